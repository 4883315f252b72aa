/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 */
#include "config.h"

#include "protocol/ndet_plan.h"

#include "common/ndet_dtype.h"

#include <string.h>

static uint64_t ndet_plan_div_up(uint64_t a, uint64_t b)
{
	return a / b + (a % b != 0);
}

uint32_t ndet_plan_signature_of(const uint64_t *words, size_t count)
{
	uint64_t hash = 0xcbf29ce484222325ull;
	const unsigned char *bytes = (const unsigned char *)words;
	for (size_t i = 0; i < count * sizeof(*words); i++) {
		hash ^= bytes[i];
		hash *= 0x100000001b3ull;
	}
	uint32_t folded = (uint32_t)(hash ^ (hash >> 24) ^ (hash >> 48)) & NDET_FLAG_SIGNATURE_MASK;
	/* 0 is what a never-written flag holds; keep signatures distinguishable from it. */
	return folded == 0 ? 1u : folded;
}

/* The plan-defining values, folded. */
static uint32_t ndet_plan_signature(const struct ndet_plan_params *params,
				    const struct ndet_plan *plan)
{
	/*
	 * The collective, its root and PreMulSum too: a rank in a reduce-scatter must not
	 * meet one in an all-reduce of the same count (garbage), it must fail.
	 */
	const uint64_t root = params->coll == NDET_COLL_REDUCE ? (uint64_t)params->root : 0;
	const uint64_t words[] = {params->count,
				  (uint64_t)params->dtype,
				  (uint64_t)params->op,
				  (uint64_t)params->nranks,
				  (uint64_t)plan->path,
				  plan->blocks,
				  plan->chunk_elems,
				  plan->steps,
				  (uint64_t)params->coll,
				  root,
				  (uint64_t)params->premul,
				  plan->ll_line};
	return ndet_plan_signature_of(words, sizeof(words) / sizeof(words[0]));
}

/*
 * Blocks of all ranks one GPU holds at once (ndet_plan.h) for the kernels of `op`:
 * those of the 16-rank bucket one per SM (every op above 8 ranks; prod, min and max
 * from 3 ranks), the others two.
 */
static uint64_t ndet_plan_device_capacity(int nranks, ndet_op_t op, int device_sms)
{
	const bool generic = op == NDET_OP_PROD || op == NDET_OP_MIN || op == NDET_OP_MAX;
	const bool one_per_sm = nranks > 8 || (nranks > 2 && generic);
	const uint64_t per_sm = one_per_sm ? 1 : 2;
	uint64_t capacity = one_per_sm ? NDET_PLAN_GRID_CAPACITY_WIDE : NDET_PLAN_GRID_CAPACITY;
	if (device_sms > 0 && per_sm * (uint64_t)device_sms < capacity)
		capacity = per_sm * (uint64_t)device_sms;
	return capacity;
}

const char *ndet_plan_path_name(ndet_path_t path)
{
	switch (path) {
	case NDET_PATH_NONE:
		return "none";
	case NDET_PATH_COPY:
		return "copy";
	case NDET_PATH_ONESHOT:
		return "1shot";
	case NDET_PATH_TWOSHOT:
		return "2shot";
	case NDET_PATH_SCATTER:
		return "rs";
	case NDET_PATH_LL:
		return "ll";
	case NDET_PATH_PUSH:
		return "push";
	}
	return "unknown";
}

/*
 * Blocks all ranks on one GPU may hold between them where several processes share it:
 * NDET_PLAN_SHARED_SMS_NUM / _DEN of its SMs (of 96 when unknown).
 */
static uint64_t ndet_plan_shared_blocks(int device_sms)
{
	const uint64_t sms = device_sms > 0 ? (uint64_t)device_sms : 96u;
	return sms * NDET_PLAN_SHARED_SMS_NUM / NDET_PLAN_SHARED_SMS_DEN;
}

bool ndet_plan_fits_device(int nranks, int device_sms, int ranks_per_device,
			   int processes_per_device)
{
	const uint64_t sharing = ranks_per_device > 1 ? (uint64_t)ranks_per_device : 1;
	/* The grid cap never goes below one block: that one block must fit the share. */
	return ndet_plan_device_capacity(nranks, NDET_OP_MAX, device_sms) >= sharing &&
	       (processes_per_device <= 1 || ndet_plan_shared_blocks(device_sms) >= sharing);
}

static uint64_t ndet_plan_ll_bytes(uint64_t ll_max)
{
	return ll_max < NDET_LL_MAX_BYTES ? ll_max : NDET_LL_MAX_BYTES;
}

uint64_t ndet_plan_ll_blocks(uint64_t ll_max)
{
	return ndet_plan_div_up(ndet_plan_ll_bytes(ll_max), NDET_LL_BLOCK_BYTES);
}

/*
 * Bytes per block of an LL plan of `bytes` (ndet_plan.h): NDET_PLAN_LL_SMALL_BYTES up
 * to NDET_PLAN_LL_SMALL_MAX where that grid fits both the cap and the pool's LL slots,
 * else NDET_LL_BLOCK_BYTES / 2 (one line per thread) where that grid fits both, else
 * NDET_LL_BLOCK_BYTES (two lines per thread) where that one fits the cap; 0 where none
 * does.  A thread stores each of its lines to every peer and polls them from every
 * peer, so smaller blocks spread a message's lines over more SMs (doc/protocol.md, LL).
 */
#ifndef NDET_PLAN_LL_HALF_BLOCKS /* -DNDET_PLAN_LL_HALF_BLOCKS=0: builds that compare */
#define NDET_PLAN_LL_HALF_BLOCKS 1
#endif
/*
 * -DNDET_PLAN_LL_FILL=1 (builds that compare): where the one-line grid exceeds the
 * cap or the pool's LL slots, as many blocks as both allow with the message spread
 * evenly over them (whole 16-byte line pairs) instead of blocks of
 * NDET_LL_BLOCK_BYTES.
 */
#ifndef NDET_PLAN_LL_FILL
#define NDET_PLAN_LL_FILL 0
#endif
_Static_assert(NDET_PLAN_LL_SMALL_BYTES % 16 == 0 && NDET_PLAN_LL_SMALL_BYTES > 0 &&
		       NDET_PLAN_LL_SMALL_BYTES <= NDET_LL_BLOCK_BYTES / 2,
	       "LL blocks of whole line pairs, of one line per thread");
static uint64_t ndet_plan_ll_block_bytes(const struct ndet_plan_params *params, uint64_t bytes)
{
	const uint64_t cap = ndet_plan_grid_cap(params);
	const uint64_t slots = ndet_plan_ll_blocks(params->ll_max);
	const uint64_t half = NDET_LL_BLOCK_BYTES / 2;
	const uint64_t small_blocks = ndet_plan_div_up(bytes, NDET_PLAN_LL_SMALL_BYTES);
	if (NDET_PLAN_LL_SMALL_BYTES < half && bytes <= NDET_PLAN_LL_SMALL_MAX &&
	    small_blocks <= cap && small_blocks <= slots)
		return NDET_PLAN_LL_SMALL_BYTES;
	const uint64_t half_blocks = ndet_plan_div_up(bytes, half);
	if (NDET_PLAN_LL_HALF_BLOCKS && half_blocks <= cap && half_blocks <= slots)
		return half;
	if (NDET_PLAN_LL_FILL) {
		/* As many blocks as both the cap and the pool's LL slots allow. */
		const uint64_t grid = cap < slots ? cap : slots;
		const uint64_t even = ndet_plan_div_up(ndet_plan_div_up(bytes, grid), 16) * 16;
		return even <= NDET_LL_BLOCK_BYTES ? (even > half ? even : half) : 0;
	}
	return ndet_plan_div_up(bytes, NDET_LL_BLOCK_BYTES) <= cap ? NDET_LL_BLOCK_BYTES : 0;
}

/*
 * -DNDET_PLAN_LL_WIDE_SMALL=B (builds that compare; B a multiple of
 * NDET_LL_WIDE_LINE_DATA): wide lines for every call that can take them, whatever
 * ll_wide_min says, in blocks of B bytes up to NDET_PLAN_LL_SMALL_MAX where that grid
 * fits (as the 8-byte lines' blocks of NDET_PLAN_LL_SMALL_BYTES), so that the two
 * formats can be timed on the same grid.
 */
#ifndef NDET_PLAN_LL_WIDE_SMALL
#define NDET_PLAN_LL_WIDE_SMALL 0
#endif
_Static_assert(NDET_PLAN_LL_WIDE_SMALL % NDET_LL_WIDE_LINE_DATA == 0 &&
		       NDET_PLAN_LL_WIDE_SMALL <= NDET_LL_WIDE_BLOCK_BYTES / 2,
	       "wide blocks of whole lines, one per thread");

/*
 * Bytes per block of an LL plan of `bytes` (at most NDET_LL_MAX_BYTES) in wide lines
 * (ndet_plan.h, ll_wide_min), 0 where it keeps lines of 8 bytes: the kernels of wide
 * lines are those of sum and avg in the buckets of up to 8 ranks, for elements that
 * fill 12 bytes whole.  One wide line per thread where that grid fits both the cap and
 * the pool's LL slots, else two where that one does (a slot holds either).
 */
_Static_assert(NDET_LL_WIDE_BLOCK_BYTES == NDET_LL_BLOCK_LINES * NDET_LL_WIDE_LINE_DATA &&
		       NDET_LL_BLOCK_LINES * 16 == NDET_LL_SLOT_BYTES,
	       "a wide block of up to two lines per thread fills one slot");
static uint64_t ndet_plan_ll_wide_block_bytes(const struct ndet_plan_params *params, uint64_t bytes)
{
	const uint64_t size = ndet_dtype_size(params->dtype);
	const bool sum = params->op == NDET_OP_SUM || params->op == NDET_OP_AVG;
	if (params->ll_wide_min == 0 || NDET_LL_WIDE_LINE_DATA % size != 0 || !sum ||
	    params->premul || params->nranks > 8 || bytes > NDET_LL_MAX_BYTES ||
	    (!NDET_PLAN_LL_WIDE_SMALL &&
	     (uint64_t)(params->nranks - 1) * bytes < params->ll_wide_min))
		return 0;
	const uint64_t cap = ndet_plan_grid_cap(params);
	const uint64_t slots = ndet_plan_ll_blocks(params->ll_max);
	if (NDET_PLAN_LL_WIDE_SMALL && bytes <= NDET_PLAN_LL_SMALL_MAX) {
		const uint64_t blocks = ndet_plan_div_up(bytes, NDET_PLAN_LL_WIDE_SMALL);
		if (blocks <= cap && blocks <= slots)
			return NDET_PLAN_LL_WIDE_SMALL;
	}
	for (uint64_t block = NDET_LL_WIDE_BLOCK_BYTES / 2; block <= NDET_LL_WIDE_BLOCK_BYTES;
	     block *= 2) {
		const uint64_t blocks = ndet_plan_div_up(bytes, block);
		if (blocks <= cap && blocks <= slots)
			return block;
	}
	return 0;
}

uint64_t ndet_plan_oneshot_max(uint64_t oneshot_max, int nranks, ndet_coll_t coll)
{
	if (oneshot_max != NDET_PLAN_ONESHOT_AUTO)
		return oneshot_max;
	/* A reduce-scatter has no one-shot: auto keeps its grid where it was. */
	if (coll == NDET_COLL_REDUCE_SCATTER || nranks != 2)
		return NDET_PLAN_ONESHOT_AUTO_MANY;
	return NDET_PLAN_ONESHOT_AUTO_2R;
}

uint64_t ndet_plan_grid_cap(const struct ndet_plan_params *params)
{
	const uint64_t sharing =
		params->ranks_per_device > 1 ? (uint64_t)params->ranks_per_device : 1;
	const uint64_t capacity =
		ndet_plan_device_capacity(params->nranks, params->op, params->device_sms);
	uint64_t cap = capacity / sharing;
	if (params->processes_per_device > 1) {
		const uint64_t shared = ndet_plan_shared_blocks(params->device_sms) / sharing;
		if (cap > shared)
			cap = shared;
	}
	if (cap > (uint64_t)params->max_blocks)
		cap = (uint64_t)params->max_blocks;
	return cap < 1 ? 1 : cap;
}

/*
 * Whole segments (ndet_kernels.h), so that an evened push or two-shot chunk splits at
 * its granules, and whole 16-byte packs of every dtype.
 */
_Static_assert(NDET_PLAN_EVEN_BYTES >= NDET_SEGMENT_BYTES &&
		       NDET_PLAN_EVEN_BYTES % NDET_SEGMENT_BYTES == 0 &&
		       NDET_SEGMENT_BYTES % 16 == 0,
	       "NDET_PLAN_EVEN_BYTES must be a positive multiple of NDET_SEGMENT_BYTES");

ndet_status_t ndet_plan_make(const struct ndet_plan_params *params, struct ndet_plan *plan)
{
	const unsigned size = (unsigned)ndet_dtype_size(params->dtype);
	const bool scatter = params->coll == NDET_COLL_REDUCE_SCATTER;
	if (size == 0 || (unsigned)params->op >= NDET_OP_COUNT || params->nranks < 1 ||
	    params->nranks > NDET_MAX_RANKS || params->max_blocks < 1 ||
	    params->max_blocks > NDET_KERNEL_MAX_BLOCKS || params->lane_bytes < 16 ||
	    (unsigned)params->coll >= NDET_COLL_COUNT ||
	    (params->premul && params->op != NDET_OP_SUM) ||
	    (params->coll == NDET_COLL_REDUCE &&
	     (params->root < 0 || params->root >= params->nranks)))
		return NDET_ERR_INVALID_ARGUMENT;

	struct ndet_plan result;
	memset(&result, 0, sizeof(result));
	const uint64_t pack = 16 / size;
	/* Reduce-scatter: a lane holds one segment per rank. */
	const uint64_t lane_elems =
		params->lane_bytes / size / (scatter ? (uint64_t)params->nranks : 1) / pack * pack;
	if (lane_elems == 0)
		return NDET_ERR_INVALID_ARGUMENT;
	if (params->count == 0) {
		result.path = NDET_PATH_NONE;
	} else if (params->nranks == 1 && !params->premul) {
		result.path = NDET_PATH_COPY;
	} else {
		/*
		 * Bytes each rank contributes (all nranks blocks of a reduce-scatter).
		 * Overflow-safe: only compared, never stored past 2^64.
		 */
		const uint64_t elems_per_rank = scatter ? (uint64_t)params->nranks : 1;
		const uint64_t bytes = params->count > UINT64_MAX / size / elems_per_rank
					       ? UINT64_MAX
					       : params->count * size * elems_per_rank;
		const uint64_t ll_max = ndet_plan_ll_bytes(params->ll_max);
		const uint64_t oneshot_max =
			ndet_plan_oneshot_max(params->oneshot_max, params->nranks, params->coll);
		const uint64_t wide_block_bytes = ndet_plan_ll_wide_block_bytes(params, bytes);
		const bool ll_wide = wide_block_bytes != 0;
		const uint64_t ll_block_bytes =
			ll_wide ? wide_block_bytes : ndet_plan_ll_block_bytes(params, bytes);
		if (!scatter && !params->premul && bytes <= ll_max && ll_block_bytes != 0) {
			/* One step, a block per ll_block_bytes (whole pairs of lines). */
			result.path = NDET_PATH_LL;
			result.ll_line = ll_wide ? NDET_LL_WIDE_LINE_DATA : NDET_LL_LINE_DATA;
			result.blocks = (uint32_t)ndet_plan_div_up(bytes, ll_block_bytes);
			result.chunk_elems = ll_block_bytes / size;
			result.steps = 1;
			result.signature = ndet_plan_signature(params, &result);
			*plan = result;
			return NDET_OK;
		}
		/*
		 * Push: a slot holds a segment (chunk / nranks); a lane holds two parities
		 * of nranks in-slots and nranks out-slots (ndet_kernels.h, PUSH).
		 */
		uint64_t slot_elems = params->lane_bytes / size / (4u * (uint64_t)params->nranks);
		/* Whole segments (ndet_kernels.h) where a slot holds one, else whole packs. */
		const uint64_t slot_unit =
			slot_elems * size >= NDET_SEGMENT_BYTES ? NDET_SEGMENT_BYTES / size : pack;
		slot_elems = slot_elems / slot_unit * slot_unit;
		const bool push = params->coll == NDET_COLL_ALLREDUCE && !params->premul &&
				  params->nranks <= NDET_PLAN_PUSH_MAX_RANKS &&
				  params->push_min != 0 && bytes >= params->push_min &&
				  bytes > oneshot_max && slot_elems > 0 &&
				  params->lane_bytes % 32 == 0; /* 16-byte aligned halves */
		if (scatter)
			result.path = NDET_PATH_SCATTER;
		else if (push)
			result.path = NDET_PATH_PUSH;
		else
			result.path = bytes <= oneshot_max ? NDET_PATH_ONESHOT : NDET_PATH_TWOSHOT;
		/*
		 * Reduce-scatter moves what the first half of a two-shot all-reduce of the
		 * same bytes moves; it takes the one-shot share per block below the
		 * one-shot threshold (latency: few flags), the two-shot share above it.
		 */
		const bool small = bytes <= oneshot_max;
		const uint64_t per_block = small ? NDET_PLAN_ONESHOT_BYTES_PER_BLOCK
						 : NDET_PLAN_TWOSHOT_BYTES_PER_BLOCK;
		uint64_t blocks;
		if (push) {
			/*
			 * No tiers: a block per NDET_PLAN_PUSH_BYTES_PER_BLOCK, at least
			 * NDET_PLAN_PUSH_MIN_BLOCKS, and enough that full chunks cover the
			 * message in NDET_PLAN_PUSH_STEPS steps (small lanes: many blocks
			 * rather than many small steps); the cap below.
			 */
			blocks = ndet_plan_div_up(bytes, NDET_PLAN_PUSH_BYTES_PER_BLOCK);
			const uint64_t full_chunk = slot_elems * (uint64_t)params->nranks * size;
			const uint64_t for_steps =
				ndet_plan_div_up(bytes, NDET_PLAN_PUSH_STEPS * full_chunk);
			if (blocks < for_steps)
				blocks = for_steps;
			if (blocks < NDET_PLAN_PUSH_MIN_BLOCKS)
				blocks = NDET_PLAN_PUSH_MIN_BLOCKS;
		} else {
			blocks = ndet_plan_div_up(bytes, per_block);
			const uint64_t tier = bytes < NDET_PLAN_MID_BYTES ? NDET_PLAN_SMALL_BLOCKS
									  : NDET_PLAN_MID_BLOCKS;
			if (blocks > tier)
				blocks = tier;
			if (!small && bytes / NDET_PLAN_LARGE_BYTES_PER_BLOCK > blocks)
				blocks = bytes / NDET_PLAN_LARGE_BYTES_PER_BLOCK;
		}
		const uint64_t cap = ndet_plan_grid_cap(params);
		if (blocks > cap)
			blocks = cap;
		uint64_t chunk = ndet_plan_div_up(params->count, blocks);
		if (push) {
			/*
			 * The kernel's segment of this chunk (ndet_kernels.h), at most a slot:
			 * a slot is whole segments, so the kernel splits the chunk below into
			 * the same seg.
			 */
			uint64_t seg = ndet_segment_elems(chunk, (uint32_t)params->nranks, size);
			if (seg > slot_elems)
				seg = slot_elems;
			chunk = seg * (uint64_t)params->nranks;
		} else {
			chunk = ndet_plan_div_up(chunk, pack) * pack;
			if (chunk > lane_elems)
				chunk = lane_elems;
		}
		/* No block without work in the first step. */
		const uint64_t needed = ndet_plan_div_up(params->count, chunk);
		if (blocks > needed)
			blocks = needed;
		/*
		 * Even steps: the fewest steps the chunk allows, then the smallest chunk
		 * of whole granules (NDET_PLAN_EVEN_BYTES, per segment where the chunk
		 * is split among the ranks: push and two-shot) that still covers the
		 * message in them, unless that rounds up past the chunk above.  A
		 * block's chunk of step k is chunk k x blocks + b, so with full chunks a
		 * last step only partly filled runs on the first blocks alone while the
		 * others sit idle (64 MiB over 96 blocks of 256 KiB: 2.67 steps of work,
		 * 3 on the critical path).
		 */
		const uint64_t steps = ndet_plan_div_up(params->count, blocks * chunk);
		const uint64_t even = ndet_plan_div_up(params->count, blocks * steps);
		uint64_t granule = NDET_PLAN_EVEN_BYTES / size;
		if (result.path == NDET_PATH_PUSH || result.path == NDET_PATH_TWOSHOT)
			granule *= (uint64_t)params->nranks;
		const uint64_t even_chunk = ndet_plan_div_up(even, granule) * granule;
		if (even_chunk < chunk)
			chunk = even_chunk;
		result.blocks = (uint32_t)blocks;
		result.chunk_elems = chunk;
		result.steps = ndet_plan_div_up(params->count, blocks * chunk);
	}
	result.signature = ndet_plan_signature(params, &result);
	*plan = result;
	return NDET_OK;
}
