/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Shared pieces of the GPU test programs that drive the engine: the test matrix
 * every bootstrap mode runs, and the phases beside it (ndet_gpu_data.h has what
 * needs no engine).
 */
#ifndef NDET_GPU_COMMON_H_
#define NDET_GPU_COMMON_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "engine/ndet_engine.h"
#include "kernels/ndet_types.h"
#include "test/gpu/ndet_gpu_data.h"

/*
 * Does this run cover `dtype`?  NDET_TEST_DTYPES (comma list of names, default all)
 * selects; fp8 also needs a GPU that runs the fp8 kernels (the first fp8 dtype asked
 * for prints "NOT RUN: fp8 cases (...)" where it cannot).
 */
bool gpu_dtype_selected(ndet_dtype_t dtype);

/* Per-rank context the matrix runs with. */
struct gpu_rank {
	int rank;
	int nranks;
	int device;
	struct ndet_engine *engine;
	cudaStream_t stream;
	cudaStream_t stream2;
	unsigned long long checks;
	unsigned long long failures;
	/* Barrier among ranks for host-side sequencing of the test itself. */
	void (*barrier)(void *context);
	void *barrier_context;
	/*
	 * Ranks are threads of one process on one GPU, so their streams share the
	 * device's hardware queues (CUDA_DEVICE_MAX_CONNECTIONS, at most 32).  Two
	 * ranks' streams in one queue serialise falsely: rank A's next kernel, queued
	 * behind its current one, holds rank B's kernel that A's current one waits for,
	 * until the timeout.  Such ranks launch in lock-step (a barrier between calls).
	 * Separate processes (mp mode, MPS or not) and separate GPUs need nothing.
	 */
	bool shared_queues;
	/*
	 * The engine's NCCL_DET_TIMEOUT in ms, where the error phases check that an
	 * error comes within it (0: not checked, only the 30 s limit).
	 */
	uint64_t timeout_ms;
};

/*
 * Calls a rank launches between two barriers in the many-call phases:
 * NDET_TEST_STREAM_WINDOW (0 = all at once), by default 1 where queues are shared
 * and 50 elsewhere.
 */
int gpu_launch_window(const struct gpu_rank *rank);

/* Create the rank's stream and stream2 and run one kernel on each. */
void gpu_streams_create(struct gpu_rank *rank);

/* The correctness matrix (dtypes x ops x sizes x offsets x in-place). */
void gpu_run_matrix(struct gpu_rank *rank, bool quick);

/* Graph capture + replays interleaved with eager calls. */
void gpu_run_graph(struct gpu_rank *rank, int replays);

/* Many small calls alternating between two streams with no host sync. */
void gpu_run_streams(struct gpu_rank *rank, int calls);

/* Error paths: diverging count and a silent rank.  Poisons the engine. */
void gpu_run_divergence(struct gpu_rank *rank, int silent_rank, int diverging_rank);
/*
 * The same with any shape: every rank calls f32 sum of `count`, except
 * diverging_rank (diverging_count, diverging_op); silent_rank makes no call.  Every
 * calling rank must see a kernel error within 30 s, and within rank->timeout_ms + 1 s
 * where that is set; a diverging call's error must be the signature's (or a peer's
 * that saw it), never a timeout; its next call must fail fast.
 */
void gpu_run_divergence_call(struct gpu_rank *rank, int silent_rank, int diverging_rank,
			     size_t count, size_t diverging_count, ndet_op_t diverging_op);

/*
 * ncclReduceScatter, ncclReduce and PreMulSum through the engine: every dtype, op and
 * PreMulSum (host scalars on even ranks, device scalars on odd ones), odd sizes,
 * aligned / reduce-scatter in place with offsets / misaligned; each rank's block is
 * the reference's and, bit for bit, the slice of an all-reduce of the same data run
 * on the GPU; the reduce's root gets the result and no other rank's recvbuff is
 * touched.
 */
void gpu_run_collectives(struct gpu_rank *rank, bool quick);

/*
 * The three collectives with PreMulSum in one CUDA graph, replayed with new inputs
 * and new device scalars (read at replay) while host scalars stay as captured.
 */
void gpu_run_collectives_graph(struct gpu_rank *rank, int replays);

/*
 * A call that progresses slowly (engine created with a debug delay) for longer than
 * the engine's timeout: the deadline counts from the last successful wait, so it
 * must succeed, bit-exact.  Fails the check when the call did not outlast the
 * timeout (the case would prove nothing).
 */
void gpu_run_slow_progress(struct gpu_rank *rank, uint64_t timeout_ms);

/*
 * Rank 0 aborts its engine, then calls: its kernel must leave at start (error
 * ABORTED recorded at wait 0, before touching a peer), and the peers' next calls
 * must fail at their start with PEER.  Poisons every engine.
 */
void gpu_run_abort_at_start(struct gpu_rank *rank, size_t count);

/*
 * Wide LL lines (src/protocol/ndet_plan.h, NDET_PLAN_LL_WIDE_MIN) on an engine of
 * NDET_GPU_WIDE_BLOCKS blocks and NCCL_DET_LL_MAX NDET_GPU_WIDE_LL (ndet_gpu_sizes.h),
 * every rank on one GPU: gpu_ll_wide_count gives a count of `dtype` past the rule's
 * threshold at `nranks` ranks, an element more than the smallest (which 0), near the
 * largest grid of one line per thread (which 1) or of two (which 2: at most
 * NDET_GPU_WIDE_LL), and whether the planner must take wide lines for it with `op`
 * (gpu_ll_wide_expected).  gpu_run_ll_wide checks every dtype with sum, avg and prod
 * at each count, aligned, offset and in place, misaligned, and first that
 * each plan takes wide lines exactly where expected (a harness that never reached
 * them fails).
 */
size_t gpu_ll_wide_count(int nranks, ndet_dtype_t dtype, int which);
bool gpu_ll_wide_expected(int nranks, ndet_dtype_t dtype, ndet_op_t op, size_t count);
/*
 * Whether `engine` plans that call in wide lines exactly where expected, in blocks of
 * the expected shape (one or two lines per thread), else a FAIL line.
 */
bool gpu_ll_wide_check(const struct ndet_engine *engine, int nranks, ndet_dtype_t dtype,
		       ndet_op_t op, size_t count);
void gpu_run_ll_wide(struct gpu_rank *rank);

#endif /* NDET_GPU_COMMON_H_ */
