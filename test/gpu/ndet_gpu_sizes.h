/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The GPU test harness's engine settings and call sizes, in one place: the GPU
 * programs (ndet_gpu_test.c, ndet_gpu_common.c) run them, and test_engine.c (make
 * check, no GPU) proves that they reach the paths each phase is meant to cover, so a
 * change of a threshold or a size cannot quietly leave a path untested on the GPU.
 */
#ifndef NDET_GPU_SIZES_H_
#define NDET_GPU_SIZES_H_

/* The harness's defaults (NDET_TEST_POOL, _BLOCKS, _ONESHOT, _LL and _PUSH override). */
#define NDET_GPU_TEST_POOL    (1u << 20) /* small lanes: moderate sizes cross chunks */
#define NDET_GPU_TEST_BLOCKS  4
#define NDET_GPU_TEST_ONESHOT (64u << 10)
#define NDET_GPU_TEST_LL      (64u << 10) /* LL stops at 16 KiB: 4 blocks */
#define NDET_GPU_TEST_PUSH    (1u << 20)  /* the largest sizes push, the ones below pull */

/* What test/gpu/suite.sh sets for the compute-sanitizer runs (sanitize N). */
#define NDET_GPU_SANITIZE_BLOCKS 2
#define NDET_GPU_SANITIZE_PUSH   (256u << 10)

/*
 * gpu_run_matrix: every dtype and op, three pointer variants.  Quick: LL, one-shot
 * (5003 for f32/f64, 9001 for f16/bf16, 33001 for fp8), two-shot, and push over
 * several steps for f32 and f64 (two-shot over several steps beyond 8 ranks).  Full
 * adds sizes of many push steps for every dtype (the largest, most of the host's
 * work, aligned only).
 */
#define NDET_GPU_MATRIX_QUICK_SIZES                                                                \
	{                                                                                          \
		1, 2, 7, 33, 1023, 5003, 9001, 33001, 65541, 300001                                \
	}
#define NDET_GPU_MATRIX_FULL_SIZES                                                                 \
	{                                                                                          \
		1, 3, 7, 33, 1023, 4100, 9001, 33001, 65541, 300001, 1048579, 3145739              \
	}

/*
 * sanitize_run, with the sanitizers' settings: LL, LL, LL, one-shot (fp8: LL), fp8's
 * one-shot (the others' two-shot), two-shot or push.
 */
#define NDET_GPU_SANITIZE_SIZES                                                                    \
	{                                                                                          \
		1, 5, 1023, 4097, 33001, 70001                                                     \
	}

/* run_delay_phase, f32 sum: LL, one-shot, two-shot (pull), push. */
#define NDET_GPU_DELAY_COUNTS                                                                      \
	{                                                                                          \
		777, 9001, 70001, 300001                                                           \
	}

/*
 * run_delay_phase's second round, f32 sum: LL only, one to four blocks in turn, so that
 * LL steps follow each other (no released wait between them) and a block sits out
 * some calls; with the harness's cap of 4 blocks, blocks of a quarter of
 * NDET_LL_BLOCK_BYTES up to 4 KiB, of half of it up to 8 KiB, full ones above, so the
 * three sizes follow each other on the same slots.
 */
#define NDET_GPU_DELAY_LL_COUNTS                                                                   \
	{                                                                                          \
		1, 777, 2049, 4095, 333, 3001, 1025                                                \
	}

/*
 * run_delay_phase's third round, f32 sum: runs of one to three LL calls (one to four
 * blocks) ended by push, two-shot or one-shot, and those followed by LL again.  LL
 * steps publish neither released nor done: the step after them waits for the flags
 * of the step before them, which these switches exercise under the delays.
 */
#define NDET_GPU_DELAY_AFTER_LL_COUNTS                                                             \
	{                                                                                          \
		777, 300001, 1, 2049, 70001, 4095, 300001, 333, 9001, 1025, 70001, 3001, 9001, 1,  \
			300001, 2049, 1, 70001                                                     \
	}

/*
 * gpu_run_abort_at_start, f32, with the error phases' engine (NDET_GPU_ERROR_POOL and
 * _BLOCKS): one-shot, which consumes the host abort flag after its copy-in; LL of one
 * block (a quarter of NDET_LL_BLOCK_BYTES) whose lines reach past the first warp, and
 * LL of one element, in which only thread 0 has a line to wait for: in both block 0's
 * first warp reads the flag once it has waited 64 rounds.
 */
/*
 * The engine of the wide LL phase (gpu_run_ll_wide) and of the sanitizer's wide runs
 * (NDET_TEST_WIDE): a grid and LL slots that take wide lines from 3 to 8 ranks.
 */
#define NDET_GPU_WIDE_BLOCKS 64
#define NDET_GPU_WIDE_LL     (256u << 10)

#define NDET_GPU_ERROR_POOL   (1u << 20)
#define NDET_GPU_ERROR_BLOCKS 4
#define NDET_GPU_ABORT_COUNTS                                                                      \
	{                                                                                          \
		4099, 250, 1                                                                       \
	}

#endif /* NDET_GPU_SIZES_H_ */
