/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * What the LL kernels and the pool need of every LL plan, over rank counts, grid caps
 * (ranks and processes per GPU, SM counts, NCCL_DET_MAX_BLOCKS), NCCL_DET_LL_MAX and
 * message sizes around each block boundary: at least one block, no more than the cap
 * and the pool's LL slots (a block past them would store outside every peer's pool),
 * chunks of whole 16-byte line pairs that a kernel of two lines per thread carries,
 * wide lines only where the setting allows them and their kernels exist (sum and
 * avg, up to 8 ranks, elements that fill 12 bytes) and then in blocks of one line
 * per thread,
 * every element in exactly one block, one step; for sum and for prod, whose caps
 * differ.  Built once with the library's plan and once per measurement define of
 * src/protocol/ndet_plan.c (test/unit/local.mk), so that the
 * builds test/gpu/ll_ablate_build.sh makes plan grids the kernels serve.
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

static unsigned long long ll_plans, wide_plans;

static void check_ll(const struct ndet_plan_params *p)
{
	struct ndet_plan plan;
	assert_int_equal(ndet_plan_make(p, &plan), NDET_OK);
	assert_int_not_equal(plan.signature, 0);
	if (plan.path != NDET_PATH_LL)
		return;
	ll_plans++;
	const uint64_t size = ndet_dtype_size(p->dtype);
	const uint64_t chunk_bytes = plan.chunk_elems * size;
	/*
	 * Wide lines: where NCCL_DET_LL_WIDE_MIN allows them, sum and avg of up to 8 ranks,
	 * whole elements in 12 bytes, blocks of one or two lines per thread (3 or 6 KiB).
	 */
	const bool sum = p->op == NDET_OP_SUM || p->op == NDET_OP_AVG;
	if (plan.ll_line == NDET_LL_WIDE_LINE_DATA
		    ? p->ll_wide_min == 0 || !sum || p->nranks > 8 ||
			      NDET_LL_WIDE_LINE_DATA % size != 0 ||
			      (chunk_bytes != NDET_LL_WIDE_BLOCK_BYTES &&
			       chunk_bytes != NDET_LL_WIDE_BLOCK_BYTES / 2)
		    : plan.ll_line != NDET_LL_LINE_DATA)
		fail_msg("LL plan of %llu x %llu B, %d ranks, op %d: lines of %u B, blocks of %llu "
			 "B",
			 (unsigned long long)p->count, (unsigned long long)size, p->nranks,
			 (int)p->op, plan.ll_line, (unsigned long long)chunk_bytes);
	if (plan.ll_line == NDET_LL_WIDE_LINE_DATA)
		wide_plans++;
	if (plan.blocks < 1 || plan.blocks > ndet_plan_grid_cap(p) ||
	    plan.blocks > ndet_plan_ll_blocks(p->ll_max) || chunk_bytes % 16 != 0 ||
	    chunk_bytes > (uint64_t)plan.ll_line * NDET_LL_BLOCK_LINES || plan.steps != 1 ||
	    (uint64_t)plan.blocks * plan.chunk_elems < p->count ||
	    (uint64_t)(plan.blocks - 1) * plan.chunk_elems >= p->count)
		fail_msg("LL plan of %llu x %llu B, %d ranks (%d per GPU of %d SMs, %d processes), "
			 "max blocks %d, ll_max %llu: %u blocks of %llu B (cap %llu, slots %llu), "
			 "%llu steps",
			 (unsigned long long)p->count, (unsigned long long)size, p->nranks,
			 p->ranks_per_device, p->device_sms, p->processes_per_device, p->max_blocks,
			 (unsigned long long)p->ll_max, plan.blocks,
			 (unsigned long long)chunk_bytes, (unsigned long long)ndet_plan_grid_cap(p),
			 (unsigned long long)ndet_plan_ll_blocks(p->ll_max),
			 (unsigned long long)plan.steps);
}

static void test_ll_plans_fit_kernels_and_pool(void **state)
{
	(void)state;
	const int nranks[] = {2, 3, 4, 8, 9, 16};
	const int sms[] = {0, 132};
	const int max_blocks[] = {1, 3, 24, 96};
	const uint64_t ll_max[] = {2048, 4096 + 16, 32 * 1024, 64 * 1024, 256 * 1024, 1ull << 30};
	const ndet_dtype_t dtypes[] = {NDET_DTYPE_F8E4M3, NDET_DTYPE_F32, NDET_DTYPE_F64};
	for (size_t r = 0; r < sizeof(nranks) / sizeof(nranks[0]); r++) {
		for (int shared = 0; shared < 3; shared++) {
			for (size_t s = 0; s < sizeof(sms) / sizeof(sms[0]); s++) {
				for (size_t m = 0; m < sizeof(max_blocks) / sizeof(max_blocks[0]);
				     m++) {
					for (size_t l = 0; l < sizeof(ll_max) / sizeof(ll_max[0]);
					     l++) {
						struct ndet_plan_params p = {
							.op = NDET_OP_SUM,
							.nranks = nranks[r],
							.oneshot_max = NDET_PLAN_ONESHOT_AUTO,
							.max_blocks = max_blocks[m],
							.lane_bytes = 1u << 20,
							.ll_max = ll_max[l],
							/* wide LL lines off with odd m */
							.ll_wide_min =
								m % 2 ? 0 : NDET_PLAN_LL_WIDE_MIN,
							/* one rank per GPU; all on one GPU in one
							   process; in processes of their own */
							.ranks_per_device = shared ? nranks[r] : 1,
							.processes_per_device =
								shared == 2 ? nranks[r] : 1,
							.device_sms = sms[s],
						};
						if (!ndet_plan_fits_device(p.nranks, p.device_sms,
									   p.ranks_per_device,
									   p.processes_per_device))
							continue;
						for (size_t d = 0;
						     d < 2 * sizeof(dtypes) / sizeof(dtypes[0]);
						     d++) {
							/* sum's kernels and prod's (the cap
							 * differs) */
							p.dtype = dtypes[d / 2];
							p.op = d % 2 ? NDET_OP_PROD : NDET_OP_SUM;
							const uint64_t size =
								ndet_dtype_size(p.dtype);
							/* Each 1 KiB boundary up to 257 KiB, an
							   element below, 16 bytes above. */
							for (uint64_t kib = 0; kib <= 257; kib++) {
								const uint64_t at =
									kib * 1024 / size;
								const uint64_t near[] = {
									at - 1, at, at + 16 / size};
								for (size_t k = 0; k < 3; k++) {
									if (kib == 0 && k < 2)
										continue;
									p.count = near[k];
									check_ll(&p);
								}
							}
						}
					}
				}
			}
		}
	}
	/* The sweep reached the LL path, not only the others, and wide lines where planned. */
	assert_true(ll_plans > 10000);
	assert_true(wide_plans > 1000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ll_plans_fit_kernels_and_pool),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
