/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The launch plan: a pure function of (collective, count, dtype, op, nranks, agreed
 * settings) whose element mapping covers every element exactly once.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/ndet_dtype.h"
#include "protocol/ndet_plan.h"
#include "reference/ndet_reference.h"

static struct ndet_plan_params params_of(uint64_t count, ndet_dtype_t dtype, int nranks)
{
	struct ndet_plan_params p = {.count = count,
				     .dtype = dtype,
				     .op = NDET_OP_SUM,
				     .nranks = nranks,
				     .oneshot_max = 256 * 1024,
				     .ll_wide_min = NDET_PLAN_LL_WIDE_MIN,
				     .max_blocks = 24,
				     .lane_bytes = (32u << 20) / 24 / 256 * 256};
	return p;
}

/*
 * LL: all-reduce and reduce up to ll_max bytes in one step, a block per
 * NDET_LL_BLOCK_BYTES / 4 up to NDET_PLAN_LL_SMALL_MAX bytes when that grid fits the
 * cap and the pool's LL slots, else per NDET_LL_BLOCK_BYTES / 2 when that grid fits
 * both, else per NDET_LL_BLOCK_BYTES when that grid fits the cap; never PreMulSum,
 * reduce-scatter or 1 rank.
 */
static uint64_t expected_ll_block_bytes(const struct ndet_plan_params *p, uint64_t bytes)
{
	const uint64_t cap = ndet_plan_grid_cap(p), slots = ndet_plan_ll_blocks(p->ll_max);
	/* Wide lines first (test_plan_ll_wide), for sum of up to 8 ranks as here. */
	for (uint64_t wide = 3072; wide <= 6144; wide *= 2) {
		const uint64_t grid = (bytes + wide - 1) / wide;
		if (ndet_dtype_size(p->dtype) <= 4 && p->nranks <= 8 &&
		    (uint64_t)(p->nranks - 1) * bytes >= 224 * 1024 && grid <= cap && grid <= slots)
			return wide;
	}
	for (uint64_t block = NDET_LL_BLOCK_BYTES / 4; block < NDET_LL_BLOCK_BYTES; block *= 2) {
		const uint64_t grid = (bytes + block - 1) / block;
		if (grid <= cap && grid <= slots &&
		    (block > NDET_LL_BLOCK_BYTES / 4 || bytes <= 16 * 1024))
			return block;
	}
	return NDET_LL_BLOCK_BYTES;
}

/*
 * Wide LL lines: sum and avg of 2-8 ranks, elements of 1, 2 or 4 bytes, from
 * (n - 1) x bytes >= 224 KiB, in blocks of 3 KiB (one 12-byte line per thread) where
 * that grid fits the cap and the slots, else of 6 KiB (two) where that one does; every
 * other LL plan has lines of 8 bytes.
 */
static void test_plan_ll_wide(void **state)
{
	(void)state;
	struct ndet_plan plan;
	assert_int_equal(NDET_PLAN_LL_WIDE_MIN, 224 * 1024);
	assert_int_equal(NDET_LL_WIDE_BLOCK_BYTES, 6144);
	const struct {
		ndet_dtype_t dtype;
		ndet_op_t op;
		int nranks, max_blocks;
		uint64_t bytes;
		uint32_t blocks, line; /* line 0: not LL */
		uint32_t block_bytes;  /* of wide lines */
	} cases[] = {
		/* 8 ranks: from 32 KiB; past the cap's 24 blocks of 3 KiB, 6 KiB blocks. */
		{NDET_DTYPE_F32, NDET_OP_SUM, 8, 24, 32 * 1024 - 4, 16, 8, 0},
		{NDET_DTYPE_F32, NDET_OP_SUM, 8, 24, 32 * 1024, 11, 12, 3072},
		{NDET_DTYPE_F32, NDET_OP_SUM, 8, 24, 64 * 1024, 22, 12, 3072},
		{NDET_DTYPE_F32, NDET_OP_AVG, 8, 24, 64 * 1024, 22, 12, 3072},
		{NDET_DTYPE_F32, NDET_OP_SUM, 8, 24, 72 * 1024, 24, 12, 3072},
		{NDET_DTYPE_F32, NDET_OP_SUM, 8, 24, 72 * 1024 + 4, 13, 12, 6144},
		{NDET_DTYPE_F32, NDET_OP_AVG, 8, 24, 144 * 1024, 24, 12, 6144},
		{NDET_DTYPE_BF16, NDET_OP_SUM, 8, 24, 40 * 1024 + 2, 14, 12, 3072},
		{NDET_DTYPE_F16, NDET_OP_AVG, 6, 24, 48 * 1024, 16, 12, 3072},
		{NDET_DTYPE_F8E4M3, NDET_OP_SUM, 8, 24, 33 * 1024 + 1, 12, 12, 3072},
		{NDET_DTYPE_F8E5M2, NDET_OP_SUM, 8, 24, 33 * 1024 + 1, 12, 12, 3072},
		{NDET_DTYPE_F8E5M2, NDET_OP_SUM, 8, 8, 33 * 1024 + 1, 6, 12, 6144},
		/* Their kernels are sum's and avg's of up to 8 ranks, for whole elements. */
		{NDET_DTYPE_F32, NDET_OP_PROD, 8, 24, 64 * 1024, 16, 8, 0},
		{NDET_DTYPE_F32, NDET_OP_MAX, 8, 24, 64 * 1024, 16, 8, 0},
		{NDET_DTYPE_F64, NDET_OP_SUM, 8, 24, 64 * 1024, 16, 8, 0},
		{NDET_DTYPE_F32, NDET_OP_SUM, 9, 24, 64 * 1024, 16, 8, 0},
		/* 4 ranks from 76,459 bytes; 2 ranks from 224 KiB (86 blocks of 3 KiB outgrow
		 * the 64 slots, 43 of 6 KiB do not). */
		{NDET_DTYPE_F32, NDET_OP_SUM, 4, 96, 76456, 38, 8, 0},
		{NDET_DTYPE_F32, NDET_OP_SUM, 4, 96, 76460, 25, 12, 3072},
		{NDET_DTYPE_F32, NDET_OP_SUM, 4, 24, 76460, 13, 12, 6144},
		{NDET_DTYPE_F32, NDET_OP_SUM, 2, 96, 224 * 1024 - 4, 56, 8, 0},
		{NDET_DTYPE_F32, NDET_OP_SUM, 2, 96, 224 * 1024, 38, 12, 6144},
		{NDET_DTYPE_F32, NDET_OP_SUM, 2, 96, 256 * 1024, 43, 12, 6144},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const uint64_t size = ndet_dtype_size(cases[i].dtype);
		struct ndet_plan_params p =
			params_of(cases[i].bytes / size, cases[i].dtype, cases[i].nranks);
		p.op = cases[i].op;
		p.ll_max = 256 * 1024;
		p.max_blocks = cases[i].max_blocks;
		assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
		if (plan.path != NDET_PATH_LL || plan.blocks != cases[i].blocks ||
		    plan.ll_line != cases[i].line ||
		    (plan.ll_line == 12 && plan.chunk_elems * size != cases[i].block_bytes))
			fail_msg("case %zu: path %d, %u blocks of %llu elements, lines of %u", i,
				 (int)plan.path, plan.blocks, (unsigned long long)plan.chunk_elems,
				 plan.ll_line);
		/* A reduce takes the same lines; another format is another signature. */
		const struct ndet_plan all = plan;
		p.coll = NDET_COLL_REDUCE;
		p.root = cases[i].nranks - 1;
		assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
		assert_int_equal(plan.ll_line, all.ll_line);
		assert_int_equal(plan.blocks, all.blocks);
	}
	/* NCCL_DET_LL_WIDE_MIN: 0 never; half the threshold from 16 KiB at 8 ranks. */
	{
		struct ndet_plan_params q = params_of(64 * 1024 / 4, NDET_DTYPE_F32, 8);
		q.ll_max = 256 * 1024;
		q.ll_wide_min = 0;
		assert_int_equal(ndet_plan_make(&q, &plan), NDET_OK);
		assert_int_equal(plan.ll_line, 8);
		assert_int_equal(plan.blocks, 16);
		q.ll_wide_min = NDET_PLAN_LL_WIDE_MIN / 2;
		q.count = 16 * 1024 / 4;
		assert_int_equal(ndet_plan_make(&q, &plan), NDET_OK);
		assert_int_equal(plan.ll_line, 12);
		assert_int_equal(plan.blocks, 6);
		q.count--;
		assert_int_equal(ndet_plan_make(&q, &plan), NDET_OK);
		assert_int_equal(plan.ll_line, 8);
	}
	/* Off with NCCL_DET_LL_MAX below the message; other paths have no lines. */
	struct ndet_plan_params p = params_of(64 * 1024 / 4, NDET_DTYPE_F32, 8);
	p.ll_max = 32 * 1024;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_ONESHOT);
	assert_int_equal(plan.ll_line, 0);
	/*
	 * The slots: 64 KiB in blocks of one wide line per thread (22) need 88 KiB of
	 * ll_max; in blocks of two (11) they fit 64, as the 16 narrow ones of two do.
	 */
	p.ll_max = 64 * 1024;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_LL);
	assert_int_equal(plan.ll_line, 12);
	assert_int_equal(plan.blocks, 11);
	assert_int_equal(plan.chunk_elems * 4, NDET_LL_WIDE_BLOCK_BYTES);
	p.ll_wide_min = 0;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.ll_line, 8);
	assert_int_equal(plan.blocks, 16);
	p.ll_wide_min = NDET_PLAN_LL_WIDE_MIN;
	p.ll_max = 88 * 1024;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.ll_line, 12);
	assert_int_equal(plan.blocks, 22);
	/* Ranks sharing one GPU: the cap of 8 ranks on 132 SMs is 24 blocks each. */
	p = params_of(64 * 1024 / 4, NDET_DTYPE_F32, 8);
	p.ll_max = 256 * 1024;
	p.max_blocks = NDET_KERNEL_MAX_BLOCKS;
	p.ranks_per_device = 8;
	p.device_sms = 132;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.ll_line, 12);
	assert_int_equal(plan.blocks, 22);
}

static void test_plan_ll(void **state)
{
	(void)state;
	struct ndet_plan plan;
	struct ndet_plan_params p = params_of(2, NDET_DTYPE_F32, 2);
	p.ll_max = 64 * 1024;
	assert_int_equal(NDET_PLAN_LL_SMALL_BYTES, NDET_LL_BLOCK_BYTES / 4);
	assert_int_equal(NDET_PLAN_LL_SMALL_MAX, 16 * 1024);
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_LL);
	assert_int_equal(plan.blocks, 1);
	assert_int_equal(plan.steps, 1);
	assert_int_equal(plan.chunk_elems, NDET_LL_BLOCK_BYTES / 4 / 4);
	/*
	 * 4 KiB: four quarter blocks; two half blocks where the cap or the slots allow no
	 * more; one full block where they allow one.
	 */
	p.count = NDET_LL_BLOCK_BYTES / 4;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_LL);
	assert_int_equal(plan.blocks, 4);
	assert_int_equal(plan.chunk_elems, NDET_LL_BLOCK_BYTES / 4 / 4);
	p.max_blocks = 3;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.blocks, 2);
	assert_int_equal(plan.chunk_elems, NDET_LL_BLOCK_BYTES / 2 / 4);
	p.max_blocks = 24;
	p.ll_max = 2 * NDET_LL_BLOCK_BYTES; /* two slots */
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.blocks, 2);
	assert_int_equal(plan.chunk_elems, NDET_LL_BLOCK_BYTES / 2 / 4);
	p.count = NDET_LL_BLOCK_BYTES / 8; /* 2 KiB: two quarter blocks in two slots */
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.blocks, 2);
	assert_int_equal(plan.chunk_elems, NDET_LL_BLOCK_BYTES / 4 / 4);
	p.count = NDET_LL_BLOCK_BYTES / 4;
	p.max_blocks = 1;
	p.ll_max = 64 * 1024;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_LL);
	assert_int_equal(plan.blocks, 1);
	assert_int_equal(plan.chunk_elems, NDET_LL_BLOCK_BYTES / 4);
	p.max_blocks = 24;
	p.ll_max = NDET_LL_BLOCK_BYTES; /* one slot */
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_LL);
	assert_int_equal(plan.blocks, 1);
	assert_int_equal(plan.chunk_elems, NDET_LL_BLOCK_BYTES / 4);
	/*
	 * Quarter blocks up to 16 KiB (16), half ones above it (16 KiB + 4 in 9) and up to
	 * the slots (32 KiB in 16), full ones past them (32 KiB + 4 in 9); quarter blocks
	 * stop at 16 KiB even where cap and slots would hold more.
	 */
	p.ll_max = 64 * 1024;
	const struct {
		uint64_t bytes, blocks, block_bytes;
	} grids[] = {{16 * 1024, 16, NDET_LL_BLOCK_BYTES / 4},
		     {16 * 1024 + 4, 9, NDET_LL_BLOCK_BYTES / 2},
		     {32 * 1024, 16, NDET_LL_BLOCK_BYTES / 2},
		     {32 * 1024 + 4, 9, NDET_LL_BLOCK_BYTES}};
	for (size_t i = 0; i < sizeof(grids) / sizeof(grids[0]); i++) {
		p.count = grids[i].bytes / 4;
		assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
		assert_int_equal(plan.path, NDET_PATH_LL);
		assert_int_equal(plan.blocks, grids[i].blocks);
		assert_int_equal(plan.chunk_elems * 4, grids[i].block_bytes);
	}
	p.ll_max = 256 * 1024;
	p.max_blocks = 96;
	p.count = 16 * 1024 / 4 + 1; /* 64 quarter blocks would fit: half ones */
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.blocks, 9);
	assert_int_equal(plan.chunk_elems * 4, NDET_LL_BLOCK_BYTES / 2);
	/* Inclusive, in bytes; every element in exactly one block. */
	const ndet_dtype_t dtypes[] = {NDET_DTYPE_F32, NDET_DTYPE_F16,    NDET_DTYPE_BF16,
				       NDET_DTYPE_F64, NDET_DTYPE_F8E4M3, NDET_DTYPE_F8E5M2};
	bool seen_wide = false;
	unsigned seen = 0;
	for (size_t d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]); d++) {
		const uint64_t size = ndet_dtype_size(dtypes[d]);
		for (uint64_t count = 1; count <= 64 * 1024 / size; count += 997) {
			p = params_of(count, dtypes[d], 8);
			p.ll_max = 64 * 1024;
			assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
			assert_int_equal(plan.path, NDET_PATH_LL);
			const uint64_t block = expected_ll_block_bytes(&p, count * size);
			assert_true(plan.chunk_elems * size == block);
			assert_int_equal(plan.ll_line, block % 3072 == 0 ? 12 : 8);
			if (block % 3072 == 0)
				seen_wide = true;
			else
				seen |= (unsigned)block;
			assert_true((uint64_t)plan.blocks * plan.chunk_elems >= count);
			assert_true((uint64_t)(plan.blocks - 1) * plan.chunk_elems < count);
		}
		p = params_of(64 * 1024 / size, dtypes[d], 8);
		p.ll_max = 64 * 1024;
		assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
		assert_int_equal(plan.path, NDET_PATH_LL);
		/* At 8 ranks 64 KiB takes wide lines, two per thread, where elements fit. */
		assert_int_equal(plan.blocks, size <= 4 ? (64 * 1024 + NDET_LL_WIDE_BLOCK_BYTES -
							   1) / NDET_LL_WIDE_BLOCK_BYTES
							: 64 * 1024 / NDET_LL_BLOCK_BYTES);
		p.count++;
		assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
		assert_int_equal(plan.path, NDET_PATH_ONESHOT);
	}
	assert_int_equal(seen,
			 NDET_LL_BLOCK_BYTES / 4 | NDET_LL_BLOCK_BYTES / 2 | NDET_LL_BLOCK_BYTES);
	assert_true(seen_wide);
	/* Off, PreMulSum, reduce-scatter, one rank: never LL.  Reduce: LL. */
	p = params_of(100, NDET_DTYPE_F32, 4);
	p.ll_max = 0;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_ONESHOT);
	p.ll_max = 64 * 1024;
	p.premul = true;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_ONESHOT);
	p.premul = false;
	p.coll = NDET_COLL_REDUCE_SCATTER;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_SCATTER);
	p.coll = NDET_COLL_REDUCE;
	p.root = 3;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_LL);
	p = params_of(100, NDET_DTYPE_F32, 1);
	p.ll_max = 64 * 1024;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_COPY);
	/* The grid must fit the cap: 16 blocks for 64 KiB, not with 8 blocks at most. */
	p = params_of(16 * 1024, NDET_DTYPE_F32, 2);
	p.ll_max = 64 * 1024;
	p.max_blocks = 8;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_ONESHOT);
	p.count = 8 * NDET_LL_BLOCK_BYTES / 4;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_LL);
	assert_int_equal(plan.blocks, 8);
	/* Above NDET_LL_MAX_BYTES the pool has no slots: the setting counts as that. */
	p = params_of(NDET_LL_MAX_BYTES / 4 + 4, NDET_DTYPE_F32, 2);
	p.ll_max = 1u << 30;
	p.max_blocks = NDET_KERNEL_MAX_BLOCKS;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_TWOSHOT); /* past the one-shot 256 KiB too */
	p.count = NDET_LL_MAX_BYTES / 4;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_LL); /* wide lines, two per thread */
	assert_int_equal(plan.blocks, (NDET_LL_MAX_BYTES + NDET_LL_WIDE_BLOCK_BYTES - 1) /
					      NDET_LL_WIDE_BLOCK_BYTES);
	p.ll_wide_min = 0;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_LL);
	assert_int_equal(plan.blocks, NDET_LL_MAX_BLOCKS);
	/* The pool's LL slots: every block an LL plan may take. */
	assert_int_equal(ndet_plan_ll_blocks(0), 0);
	assert_int_equal(ndet_plan_ll_blocks(NDET_LL_BLOCK_BYTES), 1);
	assert_int_equal(ndet_plan_ll_blocks(NDET_LL_BLOCK_BYTES + 1), 2);
	assert_int_equal(ndet_plan_ll_blocks(1u << 30), NDET_LL_MAX_BLOCKS);
	/* A different path is a different signature: a mismatch fails, never pairs up. */
	struct ndet_plan ll, oneshot;
	p = params_of(100, NDET_DTYPE_F32, 2);
	p.ll_max = 64 * 1024;
	assert_int_equal(ndet_plan_make(&p, &ll), NDET_OK);
	p.ll_max = 0;
	assert_int_equal(ndet_plan_make(&p, &oneshot), NDET_OK);
	assert_int_not_equal(ll.signature, oneshot.signature);
}

static void test_plan_rejects_bad_arguments(void **state)
{
	(void)state;
	struct ndet_plan plan;
	struct ndet_plan_params p = params_of(100, NDET_DTYPE_F32, 4);
	p.dtype = NDET_DTYPE_COUNT;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_ERR_INVALID_ARGUMENT);
	p = params_of(100, NDET_DTYPE_F32, 4);
	p.op = NDET_OP_COUNT;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_ERR_INVALID_ARGUMENT);
	p = params_of(100, NDET_DTYPE_F32, 0);
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_ERR_INVALID_ARGUMENT);
	p = params_of(100, NDET_DTYPE_F32, NDET_MAX_RANKS + 1);
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_ERR_INVALID_ARGUMENT);
	p = params_of(100, NDET_DTYPE_F32, 4);
	p.max_blocks = 0;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_ERR_INVALID_ARGUMENT);
	p.max_blocks = NDET_KERNEL_MAX_BLOCKS + 1;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_ERR_INVALID_ARGUMENT);
	p = params_of(100, NDET_DTYPE_F32, 4);
	p.lane_bytes = 8;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_ERR_INVALID_ARGUMENT);
}

static void test_plan_paths(void **state)
{
	(void)state;
	struct ndet_plan plan;
	struct ndet_plan_params p = params_of(0, NDET_DTYPE_F32, 4);
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_NONE);
	p = params_of(1000, NDET_DTYPE_F32, 1);
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_COPY);
	/* The threshold is inclusive and in bytes, so it depends on the dtype. */
	p = params_of(64 * 1024, NDET_DTYPE_F32, 4);
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_ONESHOT);
	p = params_of(64 * 1024 + 1, NDET_DTYPE_F32, 4);
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_TWOSHOT);
	p = params_of(128 * 1024, NDET_DTYPE_BF16, 4);
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_ONESHOT);
	p = params_of(1, NDET_DTYPE_F64, 2);
	p.oneshot_max = 0;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_TWOSHOT);
}

/*
 * NCCL_DET_ONESHOT_MAX=auto: one-shot up to 2 MiB at 2 ranks (it reads what two-shot
 * reads, with one flag round trip less), 64 KiB at more; push from push_min above
 * that; a reduce-scatter keeps the 64 KiB grid threshold at 2 ranks too.  A number
 * is taken as it is, at any rank count.
 */
static void test_plan_oneshot_auto(void **state)
{
	(void)state;
	const uint64_t a = NDET_PLAN_ONESHOT_AUTO;
	const ndet_coll_t ar = NDET_COLL_ALLREDUCE, rs = NDET_COLL_REDUCE_SCATTER;
	assert_int_equal(ndet_plan_oneshot_max(a, 2, ar), 2u << 20);
	assert_int_equal(ndet_plan_oneshot_max(a, 3, ar), 64u << 10);
	assert_int_equal(ndet_plan_oneshot_max(a, 8, ar), 64u << 10);
	assert_int_equal(ndet_plan_oneshot_max(a, 16, ar), 64u << 10);
	assert_int_equal(ndet_plan_oneshot_max(0, 2, ar), 0);
	assert_int_equal(ndet_plan_oneshot_max(1000, 2, ar), 1000);
	assert_int_equal(ndet_plan_oneshot_max(1000, 8, ar), 1000);
	assert_int_equal(ndet_plan_oneshot_max(a, 2, NDET_COLL_REDUCE), 2u << 20);
	assert_int_equal(ndet_plan_oneshot_max(a, 2, rs), 64u << 10);
	assert_int_equal(ndet_plan_oneshot_max(1000, 2, rs), 1000);

	struct ndet_plan plan;
	struct ndet_plan_params p = params_of((2u << 20) / 2, NDET_DTYPE_BF16, 2);
	p.oneshot_max = NDET_PLAN_ONESHOT_AUTO;
	p.push_min = 4u << 20;
	p.max_blocks = 96;
	p.lane_bytes = (96u << 20) / 96 / 256 * 256;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_ONESHOT);
	assert_int_equal(plan.blocks, 32); /* a block per 8 KiB, held at 32 below 8 MiB */
	p.count += 8;                      /* one 16-byte pack past 2 MiB */
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_TWOSHOT);
	p.count = (4u << 20) / 2;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_PUSH);
	/* Three ranks: two-shot from 64 KiB + 1 byte (f32: 16385 elements). */
	p.nranks = 3;
	p.dtype = NDET_DTYPE_F32;
	p.count = 16384;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_ONESHOT);
	p.count = 16385;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_TWOSHOT);
	/* Reduce-scatter at 2 ranks: the grid of 64 KiB, as an explicit 64 KiB gives. */
	struct ndet_plan explicit_plan;
	p.nranks = 2;
	p.coll = NDET_COLL_REDUCE_SCATTER;
	p.count = (256u << 10) / 4 / 2; /* 256 KiB of send buffer */
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_SCATTER);
	p.oneshot_max = 64u << 10;
	assert_int_equal(ndet_plan_make(&p, &explicit_plan), NDET_OK);
	assert_int_equal(plan.blocks, explicit_plan.blocks);
	assert_int_equal(plan.chunk_elems, explicit_plan.chunk_elems);
	p.oneshot_max = 2u << 20; /* and it does depend on the threshold */
	assert_int_equal(ndet_plan_make(&p, &explicit_plan), NDET_OK);
	assert_int_not_equal(plan.blocks, explicit_plan.blocks);
}

/*
 * Push: all-reduces of at least push_min bytes above the one-shot size, on two or more
 * ranks, not PreMulSum; never reduce or reduce-scatter; push_min 0 never.  The chunk
 * is nranks slots (whole 512-byte units where a slot holds one, else whole packs), and
 * 2 parities x 2n slots fit the lane.
 */
static ndet_path_t path_of(const struct ndet_plan_params *p)
{
	struct ndet_plan plan;
	assert_int_equal(ndet_plan_make(p, &plan), NDET_OK);
	return plan.path;
}

/* Logs and nccl-det-perf name paths by this: every path has its own name. */
static void test_plan_path_names(void **state)
{
	(void)state;
	static const struct {
		ndet_path_t path;
		const char *name;
	} names[] = {{NDET_PATH_NONE, "none"},     {NDET_PATH_COPY, "copy"},
		     {NDET_PATH_ONESHOT, "1shot"}, {NDET_PATH_TWOSHOT, "2shot"},
		     {NDET_PATH_SCATTER, "rs"},    {NDET_PATH_LL, "ll"},
		     {NDET_PATH_PUSH, "push"}};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		assert_string_equal(ndet_plan_path_name(names[i].path), names[i].name);
	assert_string_equal(ndet_plan_path_name((ndet_path_t)99), "unknown");
}

static void test_plan_push(void **state)
{
	(void)state;
	struct ndet_plan plan;
	struct ndet_plan_params p = params_of((64u << 20) / 4, NDET_DTYPE_F32, 2);
	p.push_min = 16u << 20;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_PUSH);
	/* A slot: a quarter of the lane per rank, floored to whole 512-byte units. */
	const uint64_t slot = p.lane_bytes / 4 / (4 * 2) / 128 * 128;
	assert_int_equal(plan.blocks, 24);
	/* As many steps as full slots need, each of them even: every block has work
	 * in the last one. */
	const uint64_t full_steps = (p.count + 24 * 2 * slot - 1) / (24 * 2 * slot);
	assert_true(full_steps > 1 && p.count % (24 * 2 * slot) != 0);
	assert_int_equal(plan.steps, full_steps);
	assert_true(plan.chunk_elems < 2 * slot);
	assert_int_equal(plan.chunk_elems % (2 * 4), 0);
	assert_true(plan.steps * plan.blocks * plan.chunk_elems >= p.count);
	assert_true((plan.steps * plan.blocks - 1) * plan.chunk_elems < p.count);
	/* The threshold is inclusive and in bytes. */
	p.count = (16u << 20) / 4;
	assert_int_equal(path_of(&p), NDET_PATH_PUSH);
	p.count--;
	assert_int_equal(path_of(&p), NDET_PATH_TWOSHOT);
	/* 0: never. */
	p.count = (64u << 20) / 4;
	p.push_min = 0;
	assert_int_equal(path_of(&p), NDET_PATH_TWOSHOT);
	/* Never below the one-shot size, whatever push_min says. */
	p.push_min = 1;
	p.count = 1000;
	assert_int_equal(path_of(&p), NDET_PATH_ONESHOT);
	p.count = (1u << 20) / 4;
	assert_int_equal(path_of(&p), NDET_PATH_PUSH);
	/* Not for PreMulSum, reduce, reduce-scatter, one rank or more than 8 ranks. */
	struct ndet_plan_params q = p;
	q.premul = true;
	assert_int_equal(path_of(&q), NDET_PATH_TWOSHOT);
	q = p;
	q.coll = NDET_COLL_REDUCE;
	assert_int_equal(path_of(&q), NDET_PATH_TWOSHOT);
	q = p;
	q.coll = NDET_COLL_REDUCE_SCATTER;
	assert_int_equal(path_of(&q), NDET_PATH_SCATTER);
	q = p;
	q.nranks = 1;
	assert_int_equal(path_of(&q), NDET_PATH_COPY);
	q = p;
	q.nranks = 9;
	assert_int_equal(path_of(&q), NDET_PATH_TWOSHOT);
	/* A lane whose halves would not be 16-byte aligned: pull. */
	q = p;
	q.lane_bytes = 4096 + 16;
	assert_int_equal(path_of(&q), NDET_PATH_TWOSHOT);
	q.lane_bytes = 4096 + 32;
	assert_int_equal(path_of(&q), NDET_PATH_PUSH);
	/* 8 ranks: slots shrink with n, the lane still holds all 32 of them. */
	q = p;
	q.nranks = 8;
	q.count = (256u << 20) / 4;
	assert_int_equal(ndet_plan_make(&q, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_PUSH);
	assert_int_equal(plan.chunk_elems % (8 * 4), 0);
	assert_true(plan.chunk_elems / 8 * 4 * 4 * 8 <= q.lane_bytes);
	/* The push grid: a block per 512 KiB, at least 64, at most the cap. */
	q = p;
	q.max_blocks = 128;
	q.device_sms = 132;
	const struct {
		uint64_t bytes;
		uint32_t blocks;
	} grids[] = {{1u << 20, 64},  {8u << 20, 64},   {32u << 20, 64}, {(32u << 20) + 4, 65},
		     {48u << 20, 96}, {64u << 20, 128}, {1u << 30, 128}};
	for (size_t i = 0; i < sizeof(grids) / sizeof(grids[0]); i++) {
		q.count = grids[i].bytes / 4;
		assert_int_equal(ndet_plan_make(&q, &plan), NDET_OK);
		assert_int_equal(plan.path, NDET_PATH_PUSH);
		assert_int_equal(plan.blocks, grids[i].blocks);
	}
	/*
	 * Small lanes (a 16 MiB pool over 96 blocks): blocks enough for 8 steps of full
	 * chunks rather than a block per 512 KiB in many small steps, up to the cap.
	 */
	q.lane_bytes = (16u << 20) / 96 / 256 * 256;
	const uint64_t sizes[] = {16u << 20, 64u << 20, 100u << 20, 1u << 30};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		q.count = sizes[i] / 4;
		assert_int_equal(ndet_plan_make(&q, &plan), NDET_OK);
		assert_int_equal(plan.path, NDET_PATH_PUSH);
		if (plan.blocks < 128)
			assert_true(plan.steps <= NDET_PLAN_PUSH_STEPS);
		else
			assert_true(plan.steps > NDET_PLAN_PUSH_STEPS);
		const uint64_t quota = sizes[i] / NDET_PLAN_PUSH_BYTES_PER_BLOCK;
		assert_true(plan.blocks >= (quota < 128 ? quota : 128));
	}
	q.count = (32u << 20) / 4;
	assert_int_equal(ndet_plan_make(&q, &plan), NDET_OK);
	/* 32 MiB / (8 x 42 KiB: 2 slots of 21,824 bytes floored to whole segments), not 64 */
	assert_int_equal(plan.blocks, 98);
	/* A signature of its own: a push rank never meets a pull rank silently. */
	struct ndet_plan pull;
	q.push_min = 0;
	assert_int_equal(ndet_plan_make(&q, &pull), NDET_OK);
	assert_int_equal(pull.path, NDET_PATH_TWOSHOT);
	assert_int_not_equal(pull.signature, plan.signature);
}

/* Walk the kernel's mapping and check every element is visited exactly once. */
static void check_coverage(const struct ndet_plan_params *p, const struct ndet_plan *plan)
{
	const unsigned size = ndet_dtype_size(p->dtype);
	const uint64_t pack = 16 / size;
	assert_true(plan->blocks >= 1 && plan->blocks <= (uint32_t)p->max_blocks);
	assert_int_equal(plan->chunk_elems % pack, 0);
	assert_true(plan->chunk_elems * size <= p->lane_bytes);
	/*
	 * The kernel's chunk (k, b) starts at (k x blocks + b) x chunk_elems: visited in
	 * that order the chunks must tile [0, count) end to end, each starting where the
	 * previous one ended (no gap, no overlap), and none may start past the end
	 * before the last.  Intervals, not a map of every element: valgrind in CI.
	 */
	uint64_t expect = 0;
	bool ended = false;
	uint64_t first_step_blocks = 0;
	for (uint64_t k = 0; k < plan->steps; k++) {
		for (uint32_t b = 0; b < plan->blocks; b++) {
			uint64_t start = (k * plan->blocks + b) * plan->chunk_elems;
			if (start >= p->count) {
				ended = true;
				continue;
			}
			assert_false(ended);
			assert_int_equal(start, expect);
			if (k == 0)
				first_step_blocks++;
			uint64_t len = plan->chunk_elems;
			if (len > p->count - start)
				len = p->count - start;
			if (plan->path == NDET_PATH_TWOSHOT || plan->path == NDET_PATH_PUSH) {
				/*
				 * The kernel's segment split (ndet_kernels.h): the share rounded
				 * up to the least whole unit, 512-byte units where the share is
				 * n of them or more; the last segment keeps elements.
				 */
				const uint64_t n = (uint64_t)p->nranks;
				const uint64_t seg = ndet_segment_elems(len, (uint32_t)n, size);
				const uint64_t share = (len + n - 1) / n;
				const bool wide = share * size >= n * NDET_SEGMENT_BYTES;
				const uint64_t unit = wide ? NDET_SEGMENT_BYTES / size : pack;
				assert_int_equal(seg % unit, 0);
				assert_true(seg >= share && seg - share < unit);
				if (wide)
					assert_true((n - 1) * seg < len);
				uint64_t covered = 0;
				for (int r = 0; r < p->nranks; r++) {
					uint64_t begin =
						(uint64_t)r * seg < len ? (uint64_t)r * seg : len;
					uint64_t end = begin + seg < len ? begin + seg : len;
					covered += end - begin;
				}
				assert_int_equal(covered, len);
				/* Push: a segment fits its slot, and 2 x 2n slots the lane. */
				if (plan->path == NDET_PATH_PUSH) {
					const uint64_t slot =
						plan->chunk_elems / (uint64_t)p->nranks;
					assert_int_equal(plan->chunk_elems % (uint64_t)p->nranks,
							 0);
					assert_int_equal(slot % pack, 0);
					assert_true(seg <= slot);
					/* A full chunk splits into exactly its slots. */
					assert_int_equal(ndet_segment_elems(plan->chunk_elems,
									    (uint32_t)n, size),
							 slot);
					assert_true(4 * (uint64_t)p->nranks * slot * size <=
						    p->lane_bytes);
				}
			}
			assert_true(len > 0);
			expect = start + len;
		}
	}
	assert_int_equal(expect, p->count);
	/* No idle block in the first step. */
	assert_int_equal(first_step_blocks, plan->blocks);
	/*
	 * Even steps: one granule (NDET_PLAN_EVEN_BYTES, per segment for push and
	 * two-shot) less per chunk would not cover the message in as many steps, so a
	 * last step is never left to a few blocks while full chunks would have fitted
	 * fewer.
	 */
	if (plan->path == NDET_PATH_ONESHOT || plan->path == NDET_PATH_TWOSHOT ||
	    plan->path == NDET_PATH_PUSH || plan->path == NDET_PATH_SCATTER) {
		const bool split = plan->path == NDET_PATH_PUSH || plan->path == NDET_PATH_TWOSHOT;
		const uint64_t granule =
			(split ? (uint64_t)p->nranks : 1) * (NDET_PLAN_EVEN_BYTES / size);
		if (plan->chunk_elems > granule)
			assert_true(plan->steps * plan->blocks * (plan->chunk_elems - granule) <
				    p->count);
	}
}

/*
 * Coverage of every count x dtype x n x lane size of collective `coll`; a
 * reduce-scatter's n segments of a chunk fit one lane, and it takes its own path.
 */
static void check_coverage_matrix(ndet_coll_t coll, uint64_t push_min)
{
	const uint64_t counts[] = {1, 2, 3, 7, 8, 9, 100, 1023, 4097, 65537, 300001, 1048579};
	for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
		for (int dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
			for (int n = 2; n <= NDET_MAX_RANKS; n += 3) {
				for (int small_lanes = 0; small_lanes < 2; small_lanes++) {
					struct ndet_plan_params p =
						params_of(counts[c], (ndet_dtype_t)dtype, n);
					p.coll = coll;
					p.push_min = push_min;
					if (small_lanes) {
						p.max_blocks = 3;
						p.lane_bytes = 4096;
						p.oneshot_max = 1024;
					}
					struct ndet_plan plan;
					assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
					check_coverage(&p, &plan);
					if (coll != NDET_COLL_REDUCE_SCATTER)
						continue;
					assert_int_equal(plan.path, NDET_PATH_SCATTER);
					assert_true(plan.chunk_elems * (uint64_t)n *
							    ndet_dtype_size(p.dtype) <=
						    p.lane_bytes);
				}
			}
		}
	}
}

static void test_plan_covers_every_element_once(void **state)
{
	(void)state;
	check_coverage_matrix(NDET_COLL_ALLREDUCE, 0);
	check_coverage_matrix(NDET_COLL_ALLREDUCE, 1); /* push above the one-shot size */
}

static void test_plan_chunks_large_messages(void **state)
{
	(void)state;
	struct ndet_plan_params p = params_of(1ull << 30, NDET_DTYPE_F32, 8); /* 4 GiB */
	struct ndet_plan plan;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_TWOSHOT);
	assert_int_equal(plan.blocks, 24);
	const uint64_t lane = p.lane_bytes / 4;
	assert_int_equal(plan.steps, (p.count + 24 * lane - 1) / (24 * lane));
	assert_true(plan.chunk_elems <= lane);
	assert_true(plan.steps * plan.blocks * plan.chunk_elems >= p.count);
	/* Evened: 8 segments of whole granules, one granule less each would not do. */
	const uint64_t granule = 8 * (NDET_PLAN_EVEN_BYTES / 4);
	assert_int_equal(plan.chunk_elems % granule, 0);
	assert_true(plan.steps * plan.blocks * (plan.chunk_elems - granule) < p.count);
	/*
	 * Three ranks: every segment of an evened two-shot chunk starts on a whole
	 * granule (the kernel splits a chunk by ndet_segment_elems: the share in whole
	 * 512-byte units here).
	 */
	p = params_of(100000003, NDET_DTYPE_F32, 3);
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_TWOSHOT);
	assert_true(plan.steps > 1);
	assert_true(plan.chunk_elems < lane);
	assert_int_equal(plan.chunk_elems % (3 * NDET_PLAN_EVEN_BYTES / 4), 0);
	/*
	 * Whole-lane chunks (no evening: a lane per block and step divides the count):
	 * 3 ranks split a 1 MiB lane into segments of 349,696 bytes (683 x 512), so
	 * that every segment starts on a 128-byte line, not 349,536 (96 bytes into one).
	 */
	p = params_of(24 * 3 * (1u << 20) / 4, NDET_DTYPE_F32, 3);
	p.lane_bytes = 1u << 20;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_TWOSHOT);
	assert_int_equal(plan.blocks, 24);
	assert_int_equal(plan.chunk_elems, (1u << 20) / 4);
	assert_int_equal(ndet_segment_elems(plan.chunk_elems, 3, 4) * 4, 349696);
	/* Hand-computed splits: 512-byte units from n of them per share, else packs. */
	assert_int_equal(ndet_segment_elems(100, 2, 4), 52);          /* 200 B: packs */
	assert_int_equal(ndet_segment_elems(512, 2, 4), 256);         /* 1 KiB: 2 units */
	assert_int_equal(ndet_segment_elems(514, 2, 4), 384);         /* 1028 B -> 1536 */
	assert_int_equal(ndet_segment_elems(1530, 3, 2), 512);        /* 1020 B: packs */
	assert_int_equal(ndet_segment_elems(1500, 3, 2), 504);        /* 1000 B < 3 units */
	assert_int_equal(ndet_segment_elems(2310, 3, 2), 1024);       /* 1540 B -> 2048 */
	assert_int_equal(ndet_segment_elems(1, 8, 8), 2);             /* one f64 pack */
	assert_int_equal(ndet_segment_elems(16 * 1100, 16, 8), 1152); /* 8800 B -> 9216 */
	/* Small messages use few blocks. */
	p = params_of(1024, NDET_DTYPE_F32, 8);
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.blocks, 1);
	assert_int_equal(plan.steps, 1);
}

/*
 * The plan takes no pointer, stream or capture state at all (the API has no way to
 * pass one); what it does take must decide it deterministically: the same inputs
 * give identical plans, and every input that changes the work changes the signature.
 */
static void test_plan_is_a_function_of_its_inputs(void **state)
{
	(void)state;
	struct ndet_plan_params p = params_of(123457, NDET_DTYPE_BF16, 5);
	struct ndet_plan a, b;
	assert_int_equal(ndet_plan_make(&p, &a), NDET_OK);
	for (int i = 0; i < 100; i++) {
		assert_int_equal(ndet_plan_make(&p, &b), NDET_OK);
		assert_memory_equal(&a, &b, sizeof(a));
	}
	assert_int_not_equal(a.signature, 0);
	assert_true(a.signature <= NDET_FLAG_SIGNATURE_MASK);

	struct ndet_plan_params q = p;
	q.count++;
	assert_int_equal(ndet_plan_make(&q, &b), NDET_OK);
	assert_int_not_equal(a.signature, b.signature);
	q = p;
	q.dtype = NDET_DTYPE_F16;
	assert_int_equal(ndet_plan_make(&q, &b), NDET_OK);
	assert_int_not_equal(a.signature, b.signature);
	q = p;
	q.op = NDET_OP_MAX;
	assert_int_equal(ndet_plan_make(&q, &b), NDET_OK);
	assert_int_not_equal(a.signature, b.signature);
	q = p;
	q.nranks = 6;
	assert_int_equal(ndet_plan_make(&q, &b), NDET_OK);
	assert_int_not_equal(a.signature, b.signature);

	/*
	 * A rank whose count is off by a little (a padding or rounding bug, the usual
	 * way ranks diverge) never shares the signature: counts within 4096 of a call
	 * on every path, several rank counts and dtypes.  Every dtype and op pair of one
	 * count too.  (The signature is a hash of NDET_FLAG_SIGNATURE_BITS bits: far
	 * apart counts may share one; these may not.)
	 */
	static const size_t bases[] = {1, 4097, 123457, 3000001, 123456789};
	for (size_t i = 0; i < sizeof(bases) / sizeof(bases[0]); i++) {
		for (int n = 2; n <= 8; n += 3) {
			for (int dtype = 0; dtype < NDET_DTYPE_COUNT; dtype += 3) {
				q = params_of(bases[i], (ndet_dtype_t)dtype, n);
				assert_int_equal(ndet_plan_make(&q, &a), NDET_OK);
				for (long delta = -4096; delta <= 4096; delta++) {
					if (delta == 0 || (long)bases[i] + delta < 1)
						continue;
					struct ndet_plan_params r = q;
					r.count = (size_t)((long)bases[i] + delta);
					assert_int_equal(ndet_plan_make(&r, &b), NDET_OK);
					if (a.signature == b.signature)
						fail_msg("count %llu and %llu (n=%d, %s) share "
							 "signature 0x%x",
							 (unsigned long long)q.count,
							 (unsigned long long)r.count, n,
							 ndet_dtype_name((ndet_dtype_t)dtype),
							 a.signature);
				}
			}
		}
	}
	uint32_t seen[NDET_DTYPE_COUNT * NDET_OP_COUNT];
	for (int dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++)
		for (int op = 0; op < NDET_OP_COUNT; op++) {
			q = params_of(65536, (ndet_dtype_t)dtype, 4);
			q.op = (ndet_op_t)op;
			assert_int_equal(ndet_plan_make(&q, &a), NDET_OK);
			const int k = dtype * NDET_OP_COUNT + op;
			for (int j = 0; j < k; j++)
				assert_int_not_equal(seen[j], a.signature);
			seen[k] = a.signature;
		}
}

/*
 * Reduce-scatter: every element of a rank block once (the kernel reduces the same
 * mapping in every block at once), n segments of a chunk fit one lane, the scatter
 * path whatever the size, a copy on one rank.
 */
/*
 * The grid tiers: blocks by the per-block quotas, at most 32 below 8 MiB and 64 from
 * there, then one block per MiB of a two-shot message, never more than
 * NCCL_DET_MAX_BLOCKS or the GPU's share (192, or 96 above 8 ranks, / ranks on one
 * GPU).  Pull only here (push_min 0, ndet_plan_params' default).
 */
static void test_plan_grid_tiers(void **state)
{
	(void)state;
	struct ndet_plan plan;
	struct ndet_plan_params p = params_of(1, NDET_DTYPE_BF16, 2);
	p.max_blocks = 96;
	p.oneshot_max = 64 << 10; /* the default */
	p.lane_bytes = (32u << 20) / 96 / 256 * 256;
	static const struct {
		uint64_t bytes;
		int ranks_per_device;
		uint32_t blocks;
	} cases[] = {
		{8, 1, 1},
		{32 << 10, 1, 4},       /* one-shot quota: 8 KiB */
		{(64 << 10) + 2, 1, 5}, /* two-shot quota: 16 KiB */
		{256 << 10, 1, 16},
		{2 << 20, 1, 32}, /* 128 by quota, held at 32 below 8 MiB */
		{(8 << 20) - 16, 1, 32},
		{8 << 20, 1, 64}, /* 64 from 8 MiB */
		{16 << 20, 1, 64},
		{(64 << 20), 1, 64}, /* 64 MiB: still 64 */
		{(65 << 20), 1, 65}, /* one block per MiB from 65 MiB */
		{80 << 20, 1, 80},
		{1ull << 30, 1, 96},  /* the setting */
		{1ull << 30, 3, 64},  /* 192 / 3 */
		{1ull << 30, 8, 24},  /* 192 / 8 */
		{8 << 20, 16, 12},    /* 192 / 16 */
		{1ull << 30, 300, 1}, /* never below one block */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		p.count = cases[i].bytes / 2;
		p.ranks_per_device = cases[i].ranks_per_device;
		assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
		assert_int_equal(plan.blocks, cases[i].blocks);
		check_coverage(&p, &plan);
	}
	/* Above 8 ranks (one block per SM): 96 / ranks on one GPU. */
	p.nranks = 16;
	p.count = (1ull << 30) / 2;
	p.ranks_per_device = 16;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.blocks, 6);
	p.ranks_per_device = 1;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.blocks, 96);
	p.nranks = 2;
	/* A smaller setting caps every tier. */
	p.max_blocks = 16;
	p.count = (1ull << 30) / 2;
	p.ranks_per_device = 1;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.blocks, 16);
	/*
	 * A GPU with fewer SMs (a MIG slice, a small GPU) holds fewer blocks: two per SM
	 * up to 8 ranks, one above; never more than a 96-SM GPU's 192 (96).
	 */
	p.max_blocks = 96;
	p.count = (1ull << 30) / 2;
	static const struct {
		int nranks, sms, ranks_per_device;
		uint32_t blocks;
	} small[] = {
		{2, 16, 1, 32},  {2, 16, 4, 8},   {2, 1, 1, 2},    {2, 1, 4, 1},   {2, 0, 1, 96},
		{2, 200, 2, 96}, {2, 200, 4, 48}, {16, 16, 1, 16}, {16, 16, 4, 4}, {16, 200, 1, 96},
	};
	for (size_t i = 0; i < sizeof(small) / sizeof(small[0]); i++) {
		p.nranks = small[i].nranks;
		p.device_sms = small[i].sms;
		p.ranks_per_device = small[i].ranks_per_device;
		assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
		/* Coverage of such grids: the cases above (a 1 GiB map is slow under valgrind). */
		assert_int_equal(plan.blocks, small[i].blocks);
	}
	p.nranks = 2;
	p.device_sms = 0;
	p.ranks_per_device = 1;
	/* Fewer than one resident block per rank: the setup must fall back. */
	assert_true(ndet_plan_fits_device(2, 16, 16, 1));
	assert_true(ndet_plan_fits_device(16, 16, 16, 1));
	assert_false(ndet_plan_fits_device(16, 14, 16, 1)); /* one block per SM above 8 ranks */
	assert_true(ndet_plan_fits_device(8, 7, 7, 1));
	assert_false(ndet_plan_fits_device(8, 7, 14, 1)); /* sum's 14, not prod's 7 */
	assert_true(ndet_plan_fits_device(16, 0, 16, 0)); /* unknown: a 96-SM GPU */
	/* Processes sharing a GPU: one block each within 3/4 of the SMs (12 of 16). */
	assert_true(ndet_plan_fits_device(2, 16, 12, 12));
	assert_false(ndet_plan_fits_device(2, 16, 13, 13));
	assert_true(ndet_plan_fits_device(2, 16, 13, 1));  /* threads: the full share */
	assert_false(ndet_plan_fits_device(16, 0, 73, 2)); /* unknown: 72 of 96 */
	/*
	 * Several processes on one GPU: their ranks' blocks together on at most 3/4 of
	 * the SMs (96 when unknown), so that the rest hold none of them.  LL, the
	 * smallest grids, is capped the same way: it stops where its blocks would pass.
	 */
	static const struct {
		int nranks, sms, ranks_per_device, processes;
		uint32_t blocks;
	} shared[] = {
		{2, 132, 4, 1, 48}, /* threads of one process: the full share */
		{2, 132, 4, 4, 24}, /* 99 / 4 */
		{2, 132, 4, 2, 24}, /* two processes of two ranks each */
		{4, 132, 4, 4, 24},  {6, 132, 6, 6, 16},   {2, 132, 2, 2, 49},
		{2, 0, 4, 4, 18},    {16, 200, 16, 16, 6}, /* the GPU's own cap is the smaller: 96 /
							      16, not 150 / 16 */
		{16, 200, 8, 8, 12},                       /* and here: 96 / 8, not 150 / 8 = 18 */
		{2, 2, 4, 4, 1},                           /* never below one block */
	};
	for (size_t i = 0; i < sizeof(shared) / sizeof(shared[0]); i++) {
		p.nranks = shared[i].nranks;
		p.device_sms = shared[i].sms;
		p.ranks_per_device = shared[i].ranks_per_device;
		p.processes_per_device = shared[i].processes;
		assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
		assert_int_equal(plan.blocks, shared[i].blocks);
		assert_int_equal(ndet_plan_grid_cap(&p), shared[i].blocks);
	}
	p.nranks = 4;
	p.device_sms = 132;
	p.ranks_per_device = 4;
	p.ll_max = 256 << 10;
	p.count = (96 << 10) / 2; /* 24 LL blocks of 4 KiB: LL under the shared cap */
	p.processes_per_device = 4;
	p.ll_wide_min = 0; /* 8-byte lines (wide ones: below) */
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_LL);
	assert_int_equal(plan.blocks, 24);
	p.count = (100 << 10) / 2; /* 25 blocks: past it */
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_not_equal(plan.path, NDET_PATH_LL);
	assert_true(plan.blocks <= 24);
	p.ll_wide_min = NDET_PLAN_LL_WIDE_MIN; /* wide: 17 blocks of 6 KiB fit the cap */
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_LL);
	assert_int_equal(plan.ll_line, 12);
	assert_int_equal(plan.blocks, 17);
	p.processes_per_device = 1; /* one process: LL, in wide lines (34 blocks of 3 KiB) */
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_LL);
	assert_int_equal(plan.ll_line, 12);
	assert_int_equal(plan.blocks, 34);
	/*
	 * prod, min and max run kernels of one block per SM (the 16-rank bucket on the
	 * pull and LL paths): 8 ranks as threads on a 132-SM GPU get 96 / 8 = 12 blocks
	 * each where sum gets 24, so 40 KiB of prod is 10 LL blocks of 4 KiB, not 20 of
	 * 2 KiB: 160 such blocks would not all be resident, and a block that waits for a
	 * peer's block that cannot start waits until the timeout.
	 */
	p.nranks = 8;
	p.ranks_per_device = 8;
	p.processes_per_device = 1;
	p.count = (40 << 10) / 2;
	p.op = NDET_OP_PROD;
	assert_int_equal(ndet_plan_grid_cap(&p), 12);
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_LL);
	assert_int_equal(plan.blocks, 10);
	p.op = NDET_OP_SUM; /* 24: 14 blocks of wide lines (7 x 40 KiB >= 224 KiB) */
	assert_int_equal(ndet_plan_grid_cap(&p), 24);
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.blocks, 14);
	assert_int_equal(plan.ll_line, 12);
	/* 2 ranks run generic kernels of the 2-rank bucket, two blocks per SM: sum's cap. */
	p.nranks = 2;
	p.ranks_per_device = 2;
	p.op = NDET_OP_MIN;
	assert_int_equal(ndet_plan_grid_cap(&p), 96);
	p.nranks = 3;
	p.ranks_per_device = 3;
	assert_int_equal(ndet_plan_grid_cap(&p), 32);
	p.op = NDET_OP_SUM;
	assert_int_equal(ndet_plan_grid_cap(&p), 64);
	/* Every op, ranks sharing the GPU: all their blocks resident at once. */
	p.max_blocks = NDET_KERNEL_MAX_BLOCKS;
	for (int op = 0; op < NDET_OP_COUNT; op++) {
		const bool generic = op == NDET_OP_PROD || op == NDET_OP_MIN || op == NDET_OP_MAX;
		for (int n = 2; n <= 8; n++) {
			const bool one_per_sm =
				generic && n > 2; /* 2 ranks: kernels of their own */
			for (uint64_t bytes = 8; bytes <= (1ull << 30); bytes = bytes * 3 + 8) {
				p.op = (ndet_op_t)op;
				p.nranks = n;
				p.ranks_per_device = n;
				p.count = bytes / 2;
				assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
				assert_true((uint64_t)plan.blocks * (uint64_t)n <=
					    (one_per_sm ? 132u : 264u));
			}
		}
	}
	p.op = NDET_OP_SUM;
	p.max_blocks = 96;
	p.ll_max = 0;
	p.nranks = 2;
	p.count = (1ull << 30) / 2;
	p.device_sms = 0;
	p.ranks_per_device = 1;
	p.processes_per_device = 0;
	/* The signature tells grids apart: ranks must agree on ranks_per_device. */
	struct ndet_plan other;
	p.max_blocks = 96;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	p.ranks_per_device = 4;
	assert_int_equal(ndet_plan_make(&p, &other), NDET_OK);
	assert_int_not_equal(plan.blocks, other.blocks);
	assert_int_not_equal(plan.signature, other.signature);
}

static void test_plan_reduce_scatter(void **state)
{
	(void)state;
	check_coverage_matrix(NDET_COLL_REDUCE_SCATTER, 1); /* never push */
	struct ndet_plan_params p = params_of(1000, NDET_DTYPE_F32, 1);
	p.coll = NDET_COLL_REDUCE_SCATTER;
	struct ndet_plan plan;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_COPY);
	/* 16 ranks need 16 packs per lane. */
	p = params_of(1000, NDET_DTYPE_F32, 16);
	p.coll = NDET_COLL_REDUCE_SCATTER;
	p.lane_bytes = 16 * 16;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.chunk_elems, 4);
	p.lane_bytes = 16 * 15;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_ERR_INVALID_ARGUMENT);
	/* The size thresholds count every rank's block: 4 x 16 KiB is not one-shot sized. */
	p = params_of(4096, NDET_DTYPE_F32, 4);
	p.coll = NDET_COLL_REDUCE_SCATTER;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.blocks, 4 * 4096 * 4 / NDET_PLAN_ONESHOT_BYTES_PER_BLOCK);
}

/* Reduce plans like the all-reduce; its root must be a rank.  PreMulSum never copies. */
static void test_plan_reduce_and_premulsum(void **state)
{
	(void)state;
	struct ndet_plan_params p = params_of(300001, NDET_DTYPE_BF16, 5);
	struct ndet_plan all, reduce;
	assert_int_equal(ndet_plan_make(&p, &all), NDET_OK);
	p.coll = NDET_COLL_REDUCE;
	p.root = 4;
	assert_int_equal(ndet_plan_make(&p, &reduce), NDET_OK);
	assert_int_equal(reduce.path, all.path);
	assert_int_equal(reduce.blocks, all.blocks);
	assert_int_equal(reduce.chunk_elems, all.chunk_elems);
	assert_int_equal(reduce.steps, all.steps);
	p.root = 5;
	assert_int_equal(ndet_plan_make(&p, &reduce), NDET_ERR_INVALID_ARGUMENT);
	p.root = -1;
	assert_int_equal(ndet_plan_make(&p, &reduce), NDET_ERR_INVALID_ARGUMENT);
	p = params_of(1000, NDET_DTYPE_F32, 4);
	p.coll = NDET_COLL_COUNT;
	assert_int_equal(ndet_plan_make(&p, &reduce), NDET_ERR_INVALID_ARGUMENT);

	/* One rank: a copy, except for PreMulSum, whose scalar must still be applied. */
	p = params_of(1000, NDET_DTYPE_F16, 1);
	p.premul = true;
	struct ndet_plan plan;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_ONESHOT);
	check_coverage(&p, &plan);
	p.coll = NDET_COLL_REDUCE_SCATTER;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_OK);
	assert_int_equal(plan.path, NDET_PATH_SCATTER);
	/* PreMulSum is a sum. */
	p = params_of(1000, NDET_DTYPE_F32, 4);
	p.premul = true;
	p.op = NDET_OP_MAX;
	assert_int_equal(ndet_plan_make(&p, &plan), NDET_ERR_INVALID_ARGUMENT);
}

/*
 * Calls that must not meet have different signatures: the collective, the root of a
 * reduce and PreMulSum enter it, so a rank in a reduce-scatter that meets a rank in
 * an all-reduce of the same count fails instead of reducing the wrong elements.
 */
static uint32_t signature_of(struct ndet_plan_params params)
{
	struct ndet_plan plan;
	assert_int_equal(ndet_plan_make(&params, &plan), NDET_OK);
	return plan.signature;
}

static void test_plan_signature_names_the_collective(void **state)
{
	(void)state;
	const uint64_t counts[] = {1, 1000, 123457, 5000000};
	for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
		struct ndet_plan_params p = params_of(counts[c], NDET_DTYPE_F32, 4);
		struct ndet_plan_params scatter = p, reduce0 = p, reduce1 = p, premul = p,
					rooted = p;
		scatter.coll = NDET_COLL_REDUCE_SCATTER;
		reduce0.coll = reduce1.coll = NDET_COLL_REDUCE;
		reduce1.root = 1;
		premul.premul = true;
		rooted.root = 3;
		const uint32_t all = signature_of(p);
		assert_int_not_equal(signature_of(scatter), all);
		assert_int_not_equal(signature_of(reduce0), all);
		assert_int_not_equal(signature_of(reduce1), signature_of(reduce0));
		assert_int_not_equal(signature_of(premul), all);
		/* An all-reduce's root is no part of it (it has none). */
		assert_int_equal(signature_of(rooted), all);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_plan_rejects_bad_arguments),
		cmocka_unit_test(test_plan_paths),
		cmocka_unit_test(test_plan_ll),
		cmocka_unit_test(test_plan_ll_wide),
		cmocka_unit_test(test_plan_push),
		cmocka_unit_test(test_plan_oneshot_auto),
		cmocka_unit_test(test_plan_covers_every_element_once),
		cmocka_unit_test(test_plan_chunks_large_messages),
		cmocka_unit_test(test_plan_is_a_function_of_its_inputs),
		cmocka_unit_test(test_plan_grid_tiers),
		cmocka_unit_test(test_plan_reduce_scatter),
		cmocka_unit_test(test_plan_reduce_and_premulsum),
		cmocka_unit_test(test_plan_signature_names_the_collective),
		cmocka_unit_test(test_plan_path_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
