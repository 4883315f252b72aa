/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The flag protocol's device side, shared by every path (doc/protocol.md): the state
 * of a block, the waits for the peers' flags and their deadline, the signals to the
 * peers, the first error's record in the host-mapped status, the debug delay and
 * nccl-det-perf's trace.
 */
#ifndef NDET_DEVICE_FLAGS_CUH_
#define NDET_DEVICE_FLAGS_CUH_

#include <stddef.h>
#include <stdint.h>

#include "kernels/ndet_abi.h"
#include "kernels/device/ndet_sync.cuh"

namespace
{

/* Debug knob: a pseudo-random pause, so ordering bugs show up in tests. */
__device__ void ndet_debug_delay(const ndet_kernel_args &a, uint64_t step, unsigned phase)
{
	if (a.debug_delay_ns == 0)
		return;
	if (threadIdx.x == 0) {
		uint64_t h = step * 0x9E3779B97F4A7C15ull ^ ((uint64_t)blockIdx.x << 32) ^
			     ((uint64_t)a.rank << 16) ^ phase;
		h ^= h >> 29;
		h *= 0xBF58476D1CE4E5B9ull;
		h ^= h >> 32;
		uint64_t pause = h % a.debug_delay_ns;
		uint64_t t0 = ndet_globaltimer();
		while (ndet_globaltimer() - t0 < pause) {
		}
	}
	__syncthreads();
}

/* Per thread: only threads that wait for a peer use t0. */
struct ndet_block_state {
	/*
	 * Start of the deadline: kernel start, then the end of this thread's last
	 * successful wait.  A call that keeps making progress never expires, however
	 * long it runs; a wait that sees no progress fails NCCL_DET_TIMEOUT after the
	 * previous one succeeded.
	 */
	uint64_t t0;
	struct ndet_flags *me; /* own flags */
	uint32_t waits;        /* ndet_wait_all calls so far (the same in every thread) */
	/*
	 * Threads 0..n-1: the opening flag of peer q (released, or done for push) as
	 * loaded (acquire) at kernel start, alongside the prologue's other loads, so a
	 * flag that is long set costs no extra memory latency at the opening wait.  Not
	 * loaded for LL, which looks at its opening flag only where it waits for it.
	 */
	uint64_t opening;
	uint32_t traced; /* ndet_trace events written by this thread */
};

/* nccl-det-perf --trace: one event of block 0 or the last block (ndet_abi.h). */
__device__ __forceinline__ void ndet_trace(const ndet_kernel_args &a, ndet_block_state &st,
					   uint32_t code, uint64_t when = 0)
{
	if (a.trace == nullptr || threadIdx.x != 0)
		return;
	uint64_t *t;
	if (blockIdx.x == 0)
		t = a.trace;
	else if (blockIdx.x == a.blocks - 1)
		t = a.trace + NDET_TRACE_WORDS;
	else
		return;
	if (st.traced + 1 >= NDET_TRACE_WORDS)
		return;
	if (when == 0)
		when = ndet_globaltimer();
	t[1 + st.traced] = ((uint64_t)code << 56) | (when & ((1ull << 56) - 1));
	st.traced++;
	t[0] = st.traced;
}

/*
 * Record the first error of this engine (first claimer wins: `claim` takes its code,
 * struct ndet_host_status).  The details go into the status before the error word,
 * which is published last with release semantics: the host reads the word with
 * acquire (ndet_engine_error_details), so whoever sees an error also sees where it
 * happened, never half-written details.
 */
__device__ void ndet_record_error(const ndet_kernel_args &a, uint32_t code, uint32_t peer,
				  uint64_t step, uint64_t observed, uint32_t phase)
{
	struct ndet_host_status *h = a.host_status;
	if (atomicCAS((unsigned *)&h->claim, 0u, code) != 0u)
		return;
	h->block = blockIdx.x;
	h->peer = peer;
	h->step = step;
	h->observed = observed;
	h->phase = phase;
	h->rank = (uint32_t)a.rank;
	ndet_store_release_u32(&h->error, code);
}

/* Record the error and tell every peer to leave too. */
__device__ void ndet_fail(const ndet_kernel_args &a, uint32_t code, uint32_t peer, uint64_t step,
			  uint64_t observed, uint32_t phase)
{
	ndet_record_error(a, code, peer, step, observed, phase);
	for (int r = 0; r < a.nranks; r++)
		ndet_store_relaxed(&a.flags[r]->abort_word, 1ull + (uint64_t)a.rank);
}

/*
 * Wait until `flag` holds step `step` (with `at_least`, that step or a later one; and,
 * with `check`, signature `signature`).
 * Returns 0 or an ndet_kernel_error_t.  Polls the abort word every 64 spins and the
 * host abort flag and deadline every 1024 spins (host-mapped reads cross PCIe).  The
 * deadline is NCCL_DET_TIMEOUT after st.t0 (see ndet_block_state), taken from
 * %globaltimer on the device, never baked in by the host: a graph replays late.
 */
__device__ uint32_t ndet_wait(const ndet_kernel_args &a, ndet_block_state &st, const uint64_t *flag,
			      uint64_t step, bool check, uint64_t *observed, bool at_least = false,
			      const uint64_t *first = nullptr)
{
	for (uint64_t spins = 1;; spins++) {
		/* `first`: an acquire load of `flag` made earlier by this thread. */
		uint64_t v = spins == 1 && first != nullptr ? *first : ndet_load_acquire(flag);
		*observed = v;
		/* Steps ahead of `step` by less than 2^20 (at_least), or `step` exactly. */
		const uint64_t ahead = (((v >> NDET_FLAG_SIGNATURE_BITS) - step) & kStepMask);
		if (ahead == 0 || (at_least && ahead < (1u << 20))) {
			if (check && (uint32_t)(v & NDET_FLAG_SIGNATURE_MASK) != a.signature)
				return NDET_KERNEL_ERR_SIGNATURE;
			st.t0 = ndet_globaltimer(); /* progress: the deadline starts again */
			return NDET_KERNEL_OK;
		}
		if ((spins & 63) == 0) {
			if (ndet_load_relaxed(&st.me->abort_word) != 0)
				return NDET_KERNEL_ERR_PEER;
			if ((spins & 1023) == 0) {
				if (a.host_status->abort != 0)
					return NDET_KERNEL_ERR_ABORTED;
				if (a.timeout_ns != 0 && ndet_globaltimer() - st.t0 > a.timeout_ns)
					return NDET_KERNEL_ERR_TIMEOUT;
			}
		}
	}
}

/*
 * Threads 0..n-1 each wait for one peer's flag in `which` (self skipped); the block
 * then agrees on the outcome.  Returns 0 or the error this block saw.
 */
__device__ uint32_t ndet_wait_all(const ndet_kernel_args &a, ndet_block_state &st,
				  uint64_t (*which)[NDET_MAX_RANKS], uint64_t step, bool check,
				  uint32_t phase, bool at_least = false, bool opening = false)
{
	/*
	 * Two outcome words, used by alternate calls: a thread may still be reading the
	 * previous call's word when thread 0 clears this call's (no barrier in between),
	 * but never the word of the call before that (it passed this call's barrier).
	 */
	__shared__ uint32_t error_codes[2];
	uint32_t &error_code = error_codes[st.waits++ & 1];
	if (threadIdx.x == 0)
		error_code = 0;
	__syncthreads();
	const int q = threadIdx.x;
	if (q < a.nranks && q != a.rank) {
		uint64_t observed = 0;
		uint32_t code = ndet_wait(a, st, &which[blockIdx.x][q], step, check, &observed,
					  at_least, opening ? &st.opening : nullptr);
		if (code != NDET_KERNEL_OK) {
			atomicCAS(&error_code, 0u, code);
			/* Also for ERR_PEER: this rank's host must learn the call failed. */
			ndet_fail(a, code, (uint32_t)q, step, observed, phase);
		}
	}
	__syncthreads();
	return error_code;
}

/*
 * Threads 0..n-1 each publish `value` into one peer's `which` slot for this block:
 * a release store, or (release = false) a relaxed one for a flag that orders nothing.
 */
__device__ void ndet_signal_all(const ndet_kernel_args &a, size_t which_offset, uint64_t value,
				bool release = true)
{
	const int q = threadIdx.x;
	if (q < a.nranks && q != a.rank) {
		uint64_t(*slots)[NDET_MAX_RANKS] = reinterpret_cast<uint64_t(*)[NDET_MAX_RANKS]>(
			reinterpret_cast<char *>(a.flags[q]) + which_offset);
		if (release)
			ndet_store_release(&slots[blockIdx.x][a.rank], value);
		else
			ndet_store_relaxed(&slots[blockIdx.x][a.rank], value);
	}
}

/*
 * The same for two flags at once: one system-scope fence, then two strong stores
 * (each a release pattern with the fence: the PTX memory model's fence.acq_rel
 * followed by a strong write).
 */
__device__ void ndet_signal2_all(const ndet_kernel_args &a, size_t first_offset, uint64_t first,
				 size_t second_offset, uint64_t second)
{
	const int q = threadIdx.x;
	if (q < a.nranks && q != a.rank) {
		char *base = reinterpret_cast<char *>(a.flags[q]);
		uint64_t(*slots1)[NDET_MAX_RANKS] =
			reinterpret_cast<uint64_t(*)[NDET_MAX_RANKS]>(base + first_offset);
		uint64_t(*slots2)[NDET_MAX_RANKS] =
			reinterpret_cast<uint64_t(*)[NDET_MAX_RANKS]>(base + second_offset);
		asm volatile("fence.acq_rel.sys;" ::: "memory");
		ndet_store_relaxed(&slots1[blockIdx.x][a.rank], first);
		ndet_store_relaxed(&slots2[blockIdx.x][a.rank], second);
	}
}

/* End of a step or call: nothing of it is left in any pool (doc/protocol.md). */
__device__ __forceinline__ void ndet_signal_finished(const ndet_kernel_args &a, uint64_t step)
{
	ndet_signal2_all(a, offsetof(ndet_flags, released), ndet_flag_pack(step, 0),
			 offsetof(ndet_flags, done), ndet_flag_pack(step, 0));
}

} /* namespace */

#endif /* NDET_DEVICE_FLAGS_CUH_ */
