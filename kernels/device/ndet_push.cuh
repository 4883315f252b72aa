/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The push path (NDET_PATH_PUSH, doc/protocol.md): two-shot by stores into the
 * peers' pools, software-pipelined over the steps of a block.
 */
#ifndef NDET_DEVICE_PUSH_CUH_
#define NDET_DEVICE_PUSH_CUH_

#include <stdint.h>

#include "kernels/ndet_abi.h"
#include "kernels/device/ndet_copy.cuh"
#include "kernels/device/ndet_dtype.cuh"
#include "kernels/device/ndet_flags.cuh"
#include "kernels/device/ndet_reduce.cuh"
#include "kernels/device/ndet_sync.cuh"

namespace
{

/*
 * Push two-shot (NDET_PATH_PUSH, doc/protocol.md): steps first_step + 1 ... of block b,
 * software-pipelined so that the scatter of step s + 1 overlaps the wait for step s's
 * reduced segments, and the gather of step s the wait for the peers' ready of s + 1.
 */
template <int DT, int K, int NR>
__device__ void ndet_push_block(const ndet_kernel_args &a, ndet_block_state &st,
				uint64_t first_step, uint64_t open_step, uint32_t host_abort)
{
	typedef typename ndet_dtype<DT>::T T;
	__shared__ uint32_t host_aborted;
	const uint64_t b = blockIdx.x;
	const int n = a.nranks, me = a.rank;
	const uint64_t slot_bytes = a.chunk_elems / (uint64_t)n * sizeof(T);
	const uint64_t lane_base = b * a.lane_bytes;
	const uint64_t half = a.lane_bytes / 2;
	const char *send = static_cast<const char *>(a.sendbuff);
	char *recv = static_cast<char *>(a.recvbuff);
	/*
	 * My own segment is read by me alone: from sendbuff itself where that is
	 * 16-byte aligned (segments start at whole packs), so it skips my in-slot.
	 * A local choice: no peer sees it, and the bits are the same either way.
	 */
	const bool own_direct = ((uintptr_t)send & 15) == 0;
	/* Steps with elements for this block (the planner gives every block one). */
	const uint64_t chunks = (a.count + a.chunk_elems - 1) / a.chunk_elems;
	if (chunks <= b)
		return;
	const uint64_t steps = min(a.steps, (chunks - b + a.blocks - 1) / a.blocks);

	/* Segment q of step k: elements [*begin, *end) of the chunk; returns its start. */
	auto segment = [&](uint64_t k, int q, uint64_t *begin, uint64_t *end) -> uint64_t {
		const uint64_t start = (k * a.blocks + b) * a.chunk_elems;
		const uint64_t len = min(a.chunk_elems, a.count - start);
		const uint64_t seg = ndet_segment_elems(len, (uint32_t)n, sizeof(T));
		*begin = min(len, (uint64_t)q * seg);
		*end = min(len, *begin + seg);
		return start;
	};
	/* Rank r's region of parity p: in-slots [0, n), out-slots [n, 2n). */
	auto region = [&](int r, uint64_t p) -> char * {
		return a.lanes[r] + lane_base + p * half;
	};
	/* Step k's chunk: segment q of it into rank q's in-slot `me`, then ready. */
	auto scatter = [&](uint64_t k) {
		const uint64_t s = first_step + 1 + k;
		ndet_debug_delay(a, s, 1);
		for (int j = 1; j <= n; j++) {
			const int q = (me + j) % n; /* own segment last: it is local */
			uint64_t qb, qe;
			const uint64_t start = segment(k, q, &qb, &qe);
			if (qe > qb && !(q == me && own_direct))
				ndet_copy_bytes(region(q, s & 1) + (uint64_t)me * slot_bytes,
						send + (start + qb) * sizeof(T),
						(qe - qb) * sizeof(T));
			ndet_trace(a, st, NDET_TRACE_COPIED);
		}
		__syncthreads();
		ndet_trace(a, st, NDET_TRACE_SYNCED);
		ndet_signal_all(a, offsetof(ndet_flags, ready), ndet_flag_pack(s, a.signature));
		ndet_trace(a, st, NDET_TRACE_SCATTERED);
	};

	/*
	 * Before the first remote store: every peer finished every access to the lanes of
	 * the steps before.  LL steps touch no lane and publish no done: the last step
	 * that did is open_step (ndet_block_start), and a peer is never past it before it
	 * has this call's ready, so exactly that, as the other paths wait.
	 */
	if (ndet_wait_all(a, st, st.me->done, open_step, false, 1, false, true) != 0)
		return;
	ndet_trace(a, st, NDET_TRACE_OPENED);
	if (threadIdx.x == 32)
		host_aborted = host_abort;
	__syncthreads();
	if (host_aborted != 0) {
		if (threadIdx.x == 0)
			ndet_fail(a, NDET_KERNEL_ERR_ABORTED, (uint32_t)me, first_step + 1, 0, 0);
		return;
	}
	scatter(0);
	for (uint64_t k = 0; k < steps; k++) {
		const uint64_t s = first_step + 1 + k;
		const uint64_t p = s & 1;
		/* Every peer's segment `me` of step s is in my in-slots (a peer may be one
		 * step ahead already: its ready of s + 1 implies that of s). */
		ndet_debug_delay(a, s, 2);
		if (ndet_wait_all(a, st, st.me->ready, s, true, 2, true) != 0)
			return;
		ndet_trace(a, st, NDET_TRACE_READY);
		/* Reduce segment `me` into recvbuff and every peer's out-slot `me`. */
		uint64_t mb, me_end;
		const uint64_t start = segment(k, me, &mb, &me_end);
		const char *src[NR];
		char *copies[NR];
#pragma unroll
		for (int r = 0; r < NR; r++) {
			src[r] = r >= n                  ? nullptr
				 : r == me && own_direct ? send + (start + mb) * sizeof(T)
							 : region(me, p) + (uint64_t)r * slot_bytes;
			/* Constant indices keep the pointers in registers. */
			copies[r] = r + 1 < n ? region((me + r + 1) % n, p) +
							(uint64_t)(n + me) * slot_bytes
					      : nullptr;
		}
		/* Two loops at 8 ranks only: at 2 ranks they spill (ndet_reduce.cuh). */
		ndet_reduce_core<DT, K, NR, K == kSum && NR == 8>(a, src, me_end - mb,
								  recv + (start + mb) * sizeof(T),
								  copies, n - 1, nullptr);
		ndet_trace(a, st, NDET_TRACE_COPIED);
		__syncthreads();
		ndet_trace(a, st, NDET_TRACE_SYNCED);
		ndet_signal_all(a, offsetof(ndet_flags, reduced), ndet_flag_pack(s, a.signature));
		ndet_trace(a, st, NDET_TRACE_REDUCED);
		/*
		 * Step s + 1 goes out while the reduced flags of s travel.  Its in-slots
		 * (parity of s - 1) are free: every peer signalled reduced for s - 1, so it
		 * read them (waited below one step ago, or the done wait above).
		 */
		if (k + 1 < steps)
			scatter(k + 1);
		ndet_debug_delay(a, s, 3);
		if (ndet_wait_all(a, st, st.me->reduced, s, true, 3, true) != 0)
			return;
		ndet_trace(a, st, NDET_TRACE_PEERS_DONE);
		/* The peers' reduced segments of step s, from my out-slots to recvbuff. */
		for (int j = 1; j < n; j++) {
			const int q = (me + j) % n;
			uint64_t qb, qe;
			segment(k, q, &qb, &qe);
			if (qe > qb)
				ndet_copy_bytes<true>(recv + (start + qb) * sizeof(T),
						      region(me, p) +
							      (uint64_t)(n + q) * slot_bytes,
						      (qe - qb) * sizeof(T));
		}
		ndet_trace(a, st, NDET_TRACE_GATHERED);
	}
	/* Every access of this call to any pool is complete. */
	__syncthreads();
	const uint64_t last = first_step + steps;
	ndet_signal_finished(a, last);
	if (threadIdx.x == 0)
		a.step_counters[b] = last;
	ndet_trace(a, st, NDET_TRACE_END);
}

} /* namespace */

#endif /* NDET_DEVICE_PUSH_CUH_ */
