/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The pull paths (one-shot, two-shot, reduce-scatter; reduce through either,
 * doc/protocol.md): each step copies its chunk into its own lane, and the reducers
 * load the peers' lanes.
 */
#ifndef NDET_DEVICE_PULL_CUH_
#define NDET_DEVICE_PULL_CUH_

#include <stdint.h>

#include "kernels/ndet_abi.h"
#include "kernels/device/ndet_copy.cuh"
#include "kernels/device/ndet_dtype.cuh"
#include "kernels/device/ndet_flags.cuh"
#include "kernels/device/ndet_reduce.cuh"
#include "kernels/device/ndet_sync.cuh"
#include "kernels/device/ndet_tree.cuh"

namespace
{

/*
 * Pull (one-shot, two-shot, reduce-scatter; reduce through either): steps
 * first_step + 1 ... of block b, each behind the released wait of the step before
 * (the first: of open_step, ndet_block_start).
 */
template <int DT, int K, int NR>
__device__ void ndet_pull_block(const ndet_kernel_args &a, ndet_block_state &st,
				uint64_t first_step, uint64_t open_step, uint32_t host_abort)
{
	typedef ndet_dtype<DT> D;
	typedef typename D::T T;
	typedef typename D::Acc Acc;
	__shared__ uint32_t host_aborted;
	__shared__ Acc scales[NDET_MAX_RANKS]; /* PreMulSum: every rank's scalar, this step */
	const uint32_t b = blockIdx.x;
	const uint64_t lane_base = (uint64_t)b * a.lane_bytes;
	char *own_lane = a.lanes[a.rank] + lane_base;
	const char *send = static_cast<const char *>(a.sendbuff);
	char *recv = static_cast<char *>(a.recvbuff);
	/* ncclReduce: only the root has a recvbuff (the others' may be anything). */
	const bool writes = a.root < 0 || a.root == a.rank;
	/* Reduce-scatter: a lane holds one segment per destination rank. */
	const bool scatter = a.path == NDET_PATH_SCATTER;
	const int segments = scatter ? a.nranks : 1;
	/*
	 * Two-shot: only this rank reads segment `rank` of its own lane, so where
	 * sendbuff is 16-byte aligned (segments start at whole packs) it reads that
	 * segment from sendbuff and the copy-in skips it.  Local, and the same bits.
	 */
	const bool own_direct = a.path == NDET_PATH_TWOSHOT && ((uintptr_t)send & 15) == 0;
	uint64_t step = first_step;

	for (uint64_t k = 0; k < a.steps; k++) {
		const uint64_t start = (k * a.blocks + b) * a.chunk_elems;
		if (start >= a.count)
			break; /* later steps only get further: the same on every rank */
		const uint64_t len = min(a.chunk_elems, a.count - start);
		step++;
		ndet_trace(a, st, NDET_TRACE_STEP);

		/* 1. Peers are through with my lane and flags of my previous step. */
		if (ndet_wait_all(a, st, st.me->released, k == 0 ? open_step : step - 1, false, 1,
				  false, k == 0) != 0)
			return;
		ndet_trace(a, st, NDET_TRACE_OPENED);

		/*
		 * 2. Copy-in.  Reduce-scatter: segment d of the lane gets this chunk of
		 * block d, for every destination rank d.
		 */
		ndet_debug_delay(a, step, 1);
		/* Two-shot: my segment of this chunk (whole packs or 512-byte units). */
		const uint64_t seg = ndet_segment_elems(len, (uint32_t)a.nranks, sizeof(T));
		const uint64_t my_begin = min(len, (uint64_t)a.rank * seg);
		const uint64_t my_end = min(len, my_begin + seg);
		if (own_direct) {
			ndet_copy_bytes(own_lane, send + start * sizeof(T), my_begin * sizeof(T));
			ndet_copy_bytes(own_lane + my_end * sizeof(T),
					send + (start + my_end) * sizeof(T),
					(len - my_end) * sizeof(T));
		} else {
			for (int d = 0; d < segments; d++)
				ndet_copy_bytes(own_lane + (uint64_t)d * a.chunk_elems * sizeof(T),
						send + ((uint64_t)d * a.count + start) * sizeof(T),
						len * sizeof(T));
		}
		if (ndet_premul_on<K>(a) && threadIdx.x == 0)
			ndet_store_relaxed(&st.me->scalar[b],
					   ndet_acc_bits(ndet_premul_scalar<DT>(a)));
		ndet_trace(a, st, NDET_TRACE_COPIED);
		if (k == 0 && (threadIdx.x == 32))
			host_aborted = host_abort;
		__syncthreads();
		ndet_trace(a, st, NDET_TRACE_SYNCED);
		if (k == 0 && host_aborted != 0) {
			if (threadIdx.x == 0)
				ndet_fail(a, NDET_KERNEL_ERR_ABORTED, (uint32_t)a.rank, step, 0, 0);
			return;
		}

		/* 3. Publish. */
		ndet_debug_delay(a, step, 2);
		ndet_signal_all(a, offsetof(ndet_flags, ready), ndet_flag_pack(step, a.signature));
		ndet_trace(a, st, NDET_TRACE_SCATTERED);

		/* 4. Every peer's chunk is in its lane, and it is the same call as ours. */
		ndet_debug_delay(a, step, 3);
		if (ndet_wait_all(a, st, st.me->ready, step, true, 2) != 0)
			return;
		ndet_trace(a, st, NDET_TRACE_READY);
		if (ndet_premul_on<K>(a)) {
			/* Thread q acquired q's ready: q's scalar for this step is visible. */
			if (threadIdx.x < (unsigned)a.nranks)
				ndet_acc_from_bits(
					ndet_load_relaxed(&a.flags[threadIdx.x]->scalar[b]),
					&scales[threadIdx.x]);
			__syncthreads();
		}

		if (a.path != NDET_PATH_TWOSHOT) {
			/* One-shot: the whole chunk; reduce-scatter: segment `rank` of it. */
			const uint64_t lane_off = scatter ? (uint64_t)a.rank * a.chunk_elems : 0;
			if (writes)
				ndet_reduce_range<DT, K, NR>(a, lane_base, lane_off, len,
							     recv + start * sizeof(T), scales);
		} else {
			/*
			 * Segment `rank` of every lane (of my own: sendbuff where own_direct),
			 * reduced into recvbuff and into the same
			 * segment of the lane of every peer that gathers (all of them, or the
			 * root of a reduce): nobody reads that segment of its lane any more
			 * (only this rank reduces it), and each pack is read before it is
			 * overwritten, by the same thread.
			 */
			const char *src[NR];
			char *copies[NR];
#pragma unroll
			for (int r = 0; r < NR; r++) {
				src[r] = r >= a.nranks ? nullptr
					 : r == a.rank && own_direct
						 ? send + (start + my_begin) * sizeof(T)
						 : a.lanes[r] + lane_base + my_begin * sizeof(T);
				const int q = (a.rank + r + 1) % a.nranks;
				copies[r] = r + 1 < a.nranks && (a.root < 0 || a.root == q)
						    ? a.lanes[q] + lane_base + my_begin * sizeof(T)
						    : nullptr;
			}
			ndet_reduce_core<DT, K, NR>(a, src, my_end - my_begin,
						    writes ? recv + (start + my_begin) * sizeof(T)
							   : nullptr,
						    copies, a.nranks - 1, scales);
			/*
			 * 5. Released: my accesses to the peers' lanes of this step are over,
			 * so their next step may start.  Reduced: my segment is in their lanes.
			 */
			__syncthreads();
			ndet_signal2_all(a, offsetof(ndet_flags, released), ndet_flag_pack(step, 0),
					 offsetof(ndet_flags, reduced),
					 ndet_flag_pack(step, a.signature));
			ndet_trace(a, st, NDET_TRACE_REDUCED);
			if (ndet_wait_all(a, st, st.me->reduced, step, true, 3) != 0)
				return;
			ndet_trace(a, st, NDET_TRACE_PEERS_DONE);
			/* The peers' reduced segments, from my own lane (local reads). */
			for (int j = 1; j < a.nranks && writes; j++) {
				const int q = (a.rank + j) % a.nranks;
				const uint64_t q_begin = min(len, (uint64_t)q * seg);
				const uint64_t q_end = min(len, q_begin + seg);
				if (q_end > q_begin)
					ndet_copy_bytes<true>(recv + (start + q_begin) * sizeof(T),
							      own_lane + q_begin * sizeof(T),
							      (q_end - q_begin) * sizeof(T));
			}
			/* 6. Done: nothing of this step is left in any pool (push waits for it). */
			__syncthreads();
			ndet_trace(a, st, NDET_TRACE_GATHERED);
			ndet_signal_all(a, offsetof(ndet_flags, done), ndet_flag_pack(step, 0));
			continue;
		}

		/* 6. My reads of every peer's lane are complete. */
		__syncthreads();
		ndet_trace(a, st, NDET_TRACE_GATHERED);
		ndet_signal_finished(a, step);
	}
	if (threadIdx.x == 0)
		a.step_counters[b] = step;
	ndet_trace(a, st, NDET_TRACE_END);
}

} /* namespace */

#endif /* NDET_DEVICE_PULL_CUH_ */
