/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The prologue of every kernel: a block's state and step counters, the check for a
 * poisoned engine, the first look at the opening flags and the host abort flag.
 */
#ifndef NDET_DEVICE_OPEN_CUH_
#define NDET_DEVICE_OPEN_CUH_

#include <stdint.h>

#include "kernels/ndet_abi.h"
#include "kernels/device/ndet_flags.cuh"
#include "kernels/device/ndet_sync.cuh"

namespace
{

/* Thread 32 reads the host abort flag at kernel start (ndet_block_open; not LL). */
static_assert(NDET_KERNEL_THREADS > 32, "the kernel needs a second warp");

/* Where a block's call starts: what every path takes from the prologue. */
struct ndet_block_start {
	uint64_t first_step; /* the block's step counter before this call */
	uint64_t first_ll;   /* its LL step counter */
	/*
	 * The step whose released (done for push) the block's next step waits for: its
	 * last step, or where that was an LL step, the step before its run of LL steps.
	 */
	uint64_t open_step;
	bool after_ll; /* the block's last step was an LL step */
	/*
	 * Shared, 0 when the prologue ends: where block 0's first warp of an LL step puts
	 * the host abort flag it found set, for every waiting thread of the block
	 * (ndet_ll_gather).
	 */
	volatile uint32_t *abort_seen;
	uint32_t host_abort; /* thread 32 of block 0, not LL: the host abort flag as read */
};

/*
 * The prologue of every kernel: the block's state, its counters, the poisoned-engine
 * check and the host abort flag.  False: the block must leave at once.
 */
__device__ bool ndet_block_open(const ndet_kernel_args &a, ndet_block_state &st,
				ndet_block_start &start)
{
	__shared__ uint64_t first_step, first_ll, open_step;
	__shared__ int poisoned, after_ll;
	__shared__ uint32_t abort_seen;
	st.t0 = ndet_globaltimer();
	st.me = a.flags[a.rank];
	st.waits = 0;
	st.traced = 0;
	st.opening = 0;
	ndet_trace(a, st, NDET_TRACE_START, st.t0);
	const uint32_t b = blockIdx.x;

	/*
	 * The opening wait's first look (threads 0..n-1, peer q = thread q), issued with
	 * the prologue's other loads so that one memory latency covers them all: thread 0
	 * issues it after its plain and relaxed loads (an acquire would hold later ones
	 * back) and before it uses any of them.  Only this rank's own flags are read,
	 * which a poisoned engine may still do.  LL looks at its opening flag only where
	 * it waits for it (ndet_ll_block): an acquire would hold back the thread's loads
	 * of sendbuff, which an LL step needs first.
	 */
	const bool opens = a.path != NDET_PATH_LL && threadIdx.x < (unsigned)a.nranks &&
			   threadIdx.x != (unsigned)a.rank;
	const uint64_t *opening_flag = !opens ? nullptr
				       : a.path == NDET_PATH_PUSH
					       ? &st.me->done[b][threadIdx.x]
					       : &st.me->released[b][threadIdx.x];
	if (threadIdx.x == 0) {
		const uint64_t counter = a.step_counters[b];
		const uint64_t ll_counter = a.step_counters[NDET_COUNTER_LL(b)];
		const uint64_t last_ll = a.step_counters[NDET_COUNTER_LAST_LL(b)];
		const uint64_t before_ll = a.step_counters[NDET_COUNTER_OPEN(b)];
		/*
		 * Before any flag or lane of a peer is touched: a poisoned engine fails
		 * fast (later calls touch nothing).  Every failure a kernel records also
		 * sets its own abort word (ndet_fail), so that local word says "poisoned";
		 * a peer may have set it before this kernel ever waited: record that
		 * here, or this rank's host would never learn that the call failed.
		 */
		const uint64_t abort_word = ndet_load_relaxed(&st.me->abort_word);
		if (opens)
			st.opening = ndet_load_acquire(opening_flag);
		first_step = counter;
		first_ll = ll_counter;
		abort_seen = 0;
		after_ll = last_ll != 0 && last_ll == counter;
		open_step = after_ll ? before_ll : counter;
		/*
		 * An LL step after a step on another path: that step is the one the step
		 * after this run of LL steps waits for.  Kept before the step can fail: it
		 * is read only once an LL step succeeded (after_ll), and a failed step
		 * leaves the counters that decide after_ll as they were.
		 */
		if (a.path == NDET_PATH_LL && !after_ll)
			a.step_counters[NDET_COUNTER_OPEN(b)] = counter;
		poisoned = abort_word != 0;
		if (poisoned)
			ndet_record_error(a, NDET_KERNEL_ERR_PEER, (uint32_t)(abort_word - 1),
					  first_step + 1, 0, 0);
	} else if (opens) {
		st.opening = ndet_load_acquire(opening_flag);
	}
	/*
	 * The host's abort flag (a call enqueued before ncclCommAbort/Revoke that starts
	 * after it) lives in host memory, and the GPU serves such reads one after the
	 * other: were every block to read it here, block k's first flag wait would come
	 * about k microseconds late (doc/kernels.md).  So block 0 reads it, in another
	 * warp.  Pull and push consume it only after their first copy-in, which touches
	 * only this rank's own lane; an aborted call then fails there, and block 0 leaves
	 * before it publishes anything.  Its peers' block 0 never gets its ready: they,
	 * and every other block of every rank that still waits, see the abort words
	 * ndet_fail sets and fail too; blocks that finished their share have only moved
	 * data.  The call fails on every rank.  LL does not read it here: over PCIe the
	 * read took about 2 us on one H100, and block 0 of a fast LL step then got
	 * through its gather up to 0.8 us after the grid's other blocks, whether the
	 * step used the value or not (doc/performance.md).  An LL step publishes first
	 * and reads the flag only once a line keeps it waiting (ndet_ll_gather;
	 * doc/protocol.md, LL): an aborted LL call whose peers are all there completes
	 * on every rank.  Long waits also poll the flag (ndet_wait), in every block.
	 */
	uint32_t host_abort = 0;
	if (threadIdx.x == 32 && b == 0 && a.path != NDET_PATH_LL)
		host_abort = a.host_status->abort;
	__syncthreads();
	start.first_step = first_step;
	start.first_ll = first_ll;
	start.open_step = open_step;
	start.after_ll = after_ll != 0;
	start.abort_seen = &abort_seen;
	start.host_abort = host_abort;
	return !poisoned;
}

} /* namespace */

#endif /* NDET_DEVICE_OPEN_CUH_ */
