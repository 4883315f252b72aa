/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The stage kernels of a call across hosts (doc/multihost-design.md): stage 1 (this
 * host's partial of segment l), stage 3 (the hosts' tree over the H partials of
 * block (l, h), one rounding) and stage 5 (the host's g result segments into
 * recvbuff).  NCCL moves the bytes of stages 2 and 4 between them; these kernels do
 * every arithmetic step, in the order of the CPU reference (ndet_reference.h,
 * ndet_reference_hosts_partial and ndet_reference_hosts_combine).
 *
 * Stages 1 and 5 exchange through the pools of this host with the flag protocol of
 * the pull path (doc/protocol.md): per block and step, wait for the peers' released
 * of the previous step, copy into the own lane, publish ready, wait for every peer's
 * ready with the same signature, read the peers' lanes, publish released and done.
 * With g = 1 there is nobody to exchange with, and they only convert and copy.
 * Stage 3 is local: every input is this rank's staging.
 */
#ifndef NDET_DEVICE_HOSTS_CUH_
#define NDET_DEVICE_HOSTS_CUH_

#include <stdint.h>

#include "kernels/ndet_abi.h"
#include "kernels/device/ndet_copy.cuh"
#include "kernels/device/ndet_dtype.cuh"
#include "kernels/device/ndet_flags.cuh"
#include "kernels/device/ndet_open.cuh"
#include "kernels/device/ndet_sync.cuh"
#include "kernels/device/ndet_tree.cuh"

namespace
{

/* Elements of segment d at offset o of the segment, at most `piece` of them. */
__device__ __forceinline__ uint64_t ndet_hosts_piece(const ndet_hosts_args &h, int d, uint64_t o,
						     uint64_t piece)
{
	const uint64_t stride = (uint64_t)h.nhosts * h.block_elems;
	const uint64_t lo = min(h.chunk_len, (uint64_t)d * stride);
	const uint64_t hi = min(h.chunk_len, lo + stride);
	return o >= hi - lo ? 0 : min(piece, hi - lo - o);
}

/* Load one element from an address that may not be aligned to its size (user memory). */
template <typename T> __device__ __forceinline__ T ndet_load_elem(const char *src)
{
	if (((uintptr_t)src & (sizeof(T) - 1)) == 0)
		return *reinterpret_cast<const T *>(src);
	T value;
	char *bytes = reinterpret_cast<char *>(&value);
#pragma unroll
	for (int i = 0; i < (int)sizeof(T); i++)
		bytes[i] = src[i];
	return value;
}

/* A partial element: the accumulation type where partial_size is its size, else T. */
template <int DT>
__device__ __forceinline__ typename ndet_dtype<DT>::Acc
ndet_hosts_load_partial(const char *base, uint64_t i, bool acc)
{
	typedef ndet_dtype<DT> D;
	if (acc)
		return reinterpret_cast<const typename D::Acc *>(base)[i];
	return D::widen(reinterpret_cast<const typename D::T *>(base)[i]);
}

template <int DT>
__device__ __forceinline__ void ndet_hosts_store_partial(char *base, uint64_t i, bool acc,
							 typename ndet_dtype<DT>::Acc v)
{
	typedef ndet_dtype<DT> D;
	if (acc)
		reinterpret_cast<typename D::Acc *>(base)[i] = v;
	else /* exact: min, max, or one rank's own element */
		reinterpret_cast<typename D::T *>(base)[i] = D::narrow(v);
}

/*
 * The tree over m values (m up to NDET_HOSTS_MAX_HOSTS), value(k) the k-th: the same
 * shape as ndet_tree_of (left subtree the largest power of two below m), evaluated
 * left to right with a stack of finished subtrees of decreasing size, then folded
 * from the right.  Every node is op(left, right) with left the lower indices.
 */
template <int OP, typename Acc, typename F>
__device__ __forceinline__ Acc ndet_hosts_tree_of(int m, F value)
{
	Acc stack[12];
	int size[12];
	int top = 0;
	for (int k = 0; k < m; k++) {
		Acc v = value(k);
		int s = 1;
		while (top > 0 && size[top - 1] == s) {
			v = ndet_apply<OP>(stack[top - 1], v);
			s *= 2;
			top--;
		}
		stack[top] = v;
		size[top] = s;
		top++;
	}
	Acc v = stack[top - 1];
	for (int t = top - 2; t >= 0; t--)
		v = ndet_apply<OP>(stack[t], v);
	return v;
}

/*
 * Step `step` (the k-th of this block in this launch) of stage 1 or 5 begins: every
 * peer is through with this block's lane and flags of the step before (the first
 * step: of open_step, ndet_block_start).
 */
__device__ __forceinline__ bool ndet_hosts_open(const ndet_kernel_args &a, ndet_block_state &st,
						uint64_t k, uint64_t step, uint64_t open_step)
{
	if (ndet_wait_all(a, st, st.me->released, k == 0 ? open_step : step - 1, false, 1, false,
			  k == 0) != 0)
		return false;
	ndet_debug_delay(a, step, 1);
	return true;
}

/*
 * The own lane holds this step's data: on the first step, the host abort flag read
 * at kernel start (an aborted call leaves before it publishes anything); then ready
 * to every peer, and every peer's ready with the same signature.  false: leave.
 */
__device__ bool ndet_hosts_publish(const ndet_kernel_args &a, ndet_block_state &st,
				   const ndet_block_start &start, uint64_t k, uint64_t step)
{
	__shared__ uint32_t host_aborted;
	if (k == 0 && threadIdx.x == 32)
		host_aborted = start.host_abort;
	__syncthreads();
	if (k == 0 && host_aborted != 0) {
		if (threadIdx.x == 0)
			ndet_fail(a, NDET_KERNEL_ERR_ABORTED, (uint32_t)a.rank, step, 0, 0);
		return false;
	}
	ndet_signal_all(a, offsetof(ndet_flags, ready), ndet_flag_pack(step, a.signature));
	return ndet_wait_all(a, st, st.me->ready, step, true, 2) == 0;
}

/* Stage 1 with g = 1: the partial is this rank's own leaf (x, or x times s). */
template <int DT> __device__ void ndet_hosts_local_alone(const ndet_hosts_args &h)
{
	typedef ndet_dtype<DT> D;
	typedef typename D::T T;
	typedef typename D::Acc Acc;
	const ndet_kernel_args &a = h.k;
	const bool acc = h.partial_size == sizeof(Acc);
	const Acc scale = ndet_premul_on<kGeneric>(a) ? ndet_premul_scalar<DT>(a) : Acc(1);
	const char *send = static_cast<const char *>(a.sendbuff) + h.chunk_offset * sizeof(T);
	const uint64_t n = h.chunk_len;
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (uint64_t)gridDim.x * blockDim.x)
		ndet_hosts_store_partial<DT>(
			h.partial, i, acc,
			ndet_leaf<DT, kGeneric>(a, ndet_load_elem<T>(send + i * sizeof(T)), scale));
}

/*
 * Stage 1: every rank copies its piece of each of the g segments into its lane
 * (segment d at d x piece), and rank l reduces piece l of every lane into its
 * partial region.
 */
template <int DT>
__device__ void ndet_hosts_local(const ndet_hosts_args &h, ndet_block_state &st,
				 const ndet_block_start &start)
{
	typedef ndet_dtype<DT> D;
	typedef typename D::T T;
	typedef typename D::Acc Acc;
	const ndet_kernel_args &a = h.k;
	__shared__ Acc scales[NDET_MAX_RANKS];
	const int g = a.nranks;
	const uint32_t b = blockIdx.x;
	const uint64_t piece = h.piece_elems;
	const uint64_t stride = (uint64_t)h.nhosts * h.block_elems;
	const uint64_t lane_base = (uint64_t)b * a.lane_bytes;
	char *own_lane = a.lanes[a.rank] + lane_base;
	const char *send = static_cast<const char *>(a.sendbuff);
	const bool acc = h.partial_size == sizeof(Acc);
	uint64_t step = start.first_step;
	for (uint64_t k = 0;; k++) {
		const uint64_t o = (k * a.blocks + b) * piece;
		if (o >= stride)
			break; /* the same on every rank */
		step++;
		if (!ndet_hosts_open(a, st, k, step, start.open_step))
			return;
		for (int d = 0; d < g; d++) {
			const uint64_t n = ndet_hosts_piece(h, d, o, piece);
			if (n > 0)
				ndet_copy_bytes(own_lane + (uint64_t)d * piece * sizeof(T),
						send + (h.chunk_offset + (uint64_t)d * stride + o) *
								sizeof(T),
						n * sizeof(T));
		}
		if (ndet_premul_on<kGeneric>(a) && threadIdx.x == 0)
			ndet_store_relaxed(&st.me->scalar[b],
					   ndet_acc_bits(ndet_premul_scalar<DT>(a)));
		if (!ndet_hosts_publish(a, st, start, k, step))
			return;
		if (threadIdx.x < (unsigned)g) {
			/* Thread q acquired q's ready: q's scalar for this step is visible. */
			Acc scale = Acc(1);
			if (ndet_premul_on<kGeneric>(a))
				ndet_acc_from_bits(
					ndet_load_relaxed(&a.flags[threadIdx.x]->scalar[b]),
					&scale);
			scales[threadIdx.x] = scale;
		}
		__syncthreads();
		const uint64_t mine = ndet_hosts_piece(h, a.rank, o, piece);
		const uint64_t lane_off = lane_base + (uint64_t)a.rank * piece * sizeof(T);
		for (uint64_t i = threadIdx.x; i < mine; i += blockDim.x) {
			Acc v[NDET_MAX_RANKS];
#pragma unroll
			for (int r = 0; r < NDET_MAX_RANKS; r++)
				if (r < g)
					v[r] = ndet_leaf<DT, kGeneric>(
						a,
						ndet_load_lane(reinterpret_cast<const T *>(
								       a.lanes[r] + lane_off) +
							       i),
						scales[r]);
			ndet_hosts_store_partial<DT>(
				h.partial, o + i, acc,
				ndet_tree<kGeneric, Acc, NDET_MAX_RANKS>(a, v, g));
		}
		__syncthreads();
		ndet_signal_finished(a, step);
	}
	if (threadIdx.x == 0)
		a.step_counters[b] = step;
}

/* Stage 3: block (l, h) of the H partials, in host order, through the tree. */
template <int DT, int OP> __device__ void ndet_hosts_reduce_op(const ndet_hosts_args &h)
{
	typedef ndet_dtype<DT> D;
	typedef typename D::T T;
	typedef typename D::Acc Acc;
	const ndet_kernel_args &a = h.k;
	const bool acc = h.partial_size == sizeof(Acc);
	const uint64_t p = h.block_elems;
	const uint64_t first = ((uint64_t)a.rank * h.nhosts + h.host) * p;
	const uint64_t n = first >= h.chunk_len ? 0 : min(p, h.chunk_len - first);
	const char *own = h.partial + (uint64_t)h.host * p * h.partial_size;
	T *out = reinterpret_cast<T *>(h.result + (uint64_t)h.host * p * sizeof(T));
	const bool avg = a.op == NDET_OP_AVG && a.premul == NDET_PREMUL_NONE;
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (uint64_t)gridDim.x * blockDim.x) {
		Acc v = ndet_hosts_tree_of<OP, Acc>(h.nhosts, [&](int k) {
			const char *base =
				k == h.host ? own
					    : h.received + (uint64_t)(k < h.host ? k : k - 1) *
								   h.received_stride;
			return ndet_hosts_load_partial<DT>(base, i, acc);
		});
		if (avg)
			v = ndet_avg_of(v, h.divisor);
		out[i] = D::narrow(v);
	}
}

template <int DT> __device__ void ndet_hosts_reduce(const ndet_hosts_args &h)
{
	switch (h.k.premul != NDET_PREMUL_NONE ? (int)NDET_OP_SUM : h.k.op) {
	case NDET_OP_PROD:
		return ndet_hosts_reduce_op<DT, NDET_OP_PROD>(h);
	case NDET_OP_MIN:
		return ndet_hosts_reduce_op<DT, NDET_OP_MIN>(h);
	case NDET_OP_MAX:
		return ndet_hosts_reduce_op<DT, NDET_OP_MAX>(h);
	default:
		return ndet_hosts_reduce_op<DT, NDET_OP_SUM>(h);
	}
}

/*
 * Write `n` elements of the message starting at element m0, held at `src`, into
 * recvbuff where they fall in [out_begin, out_end).
 */
template <bool kFromLane>
__device__ __forceinline__ void ndet_hosts_deliver(const ndet_hosts_args &h, uint64_t m0,
						   const char *src, uint64_t n, uint32_t es)
{
	const uint64_t lo = max(m0, h.out_begin), hi = min(m0 + n, h.out_end);
	if (lo < hi)
		ndet_copy_bytes<kFromLane>(static_cast<char *>(h.k.recvbuff) +
						   (lo - h.out_begin) * es,
					   src + (lo - m0) * es, (hi - lo) * es);
}

/* Stage 5 with g = 1: the result segment is the whole chunk. */
template <int DT> __device__ void ndet_hosts_gather_alone(const ndet_hosts_args &h)
{
	typedef typename ndet_dtype<DT>::T T;
	const uint64_t part = (h.chunk_len + gridDim.x - 1) / gridDim.x;
	const uint64_t begin = min(h.chunk_len, (uint64_t)blockIdx.x * part);
	const uint64_t end = min(h.chunk_len, begin + part);
	if (end > begin)
		ndet_hosts_deliver<false>(h, h.chunk_offset + begin, h.result + begin * sizeof(T),
					  end - begin, sizeof(T));
}

/*
 * Stage 5: every rank copies its piece of its result segment into its lane, and
 * every rank writes each rank's piece, from that rank's lane, into recvbuff.
 */
template <int DT>
__device__ void ndet_hosts_gather(const ndet_hosts_args &h, ndet_block_state &st,
				  const ndet_block_start &start)
{
	typedef typename ndet_dtype<DT>::T T;
	const ndet_kernel_args &a = h.k;
	const int g = a.nranks;
	const uint32_t b = blockIdx.x;
	const uint64_t piece = h.piece_elems;
	const uint64_t stride = (uint64_t)h.nhosts * h.block_elems;
	const uint64_t lane_base = (uint64_t)b * a.lane_bytes;
	uint64_t step = start.first_step;
	for (uint64_t k = 0;; k++) {
		const uint64_t o = (k * a.blocks + b) * piece;
		if (o >= stride)
			break;
		step++;
		if (!ndet_hosts_open(a, st, k, step, start.open_step))
			return;
		const uint64_t mine = ndet_hosts_piece(h, a.rank, o, piece);
		if (mine > 0)
			ndet_copy_bytes(a.lanes[a.rank] + lane_base, h.result + o * sizeof(T),
					mine * sizeof(T));
		if (!ndet_hosts_publish(a, st, start, k, step))
			return;
		for (int q = 0; q < g; q++) {
			const uint64_t n = ndet_hosts_piece(h, q, o, piece);
			if (n > 0)
				ndet_hosts_deliver<true>(h,
							 h.chunk_offset + (uint64_t)q * stride + o,
							 a.lanes[q] + lane_base, n, sizeof(T));
		}
		__syncthreads();
		ndet_signal_finished(a, step);
	}
	if (threadIdx.x == 0)
		a.step_counters[b] = step;
}

/*
 * Did a rank of another host fail?  Its status word, which came with the NCCL stage
 * before this kernel, is its abort word.  Then this kernel fails too, and tells the
 * ranks of its host (ndet_fail), whose next kernels leave at once; the status words
 * it sends with the next NCCL stage carry the failure on to the other hosts.
 */
__device__ bool ndet_hosts_peer_failed(const ndet_hosts_args &h)
{
	__shared__ int failed;
	if (threadIdx.x == 0)
		failed = 0;
	__syncthreads();
	for (int k = (int)threadIdx.x; h.peer_status != nullptr && k < h.nhosts;
	     k += (int)blockDim.x) {
		const uint64_t word = k == h.host ? 0 : ndet_load_relaxed(&h.peer_status[k]);
		if (word != 0) {
			atomicExch(&failed, 1);
			ndet_fail(h.k, NDET_KERNEL_ERR_PEER, (uint32_t)k, 0, word, 4);
		}
	}
	__syncthreads();
	return failed != 0;
}

/* One block of stage STAGE of one rank: the body of the stage kernels. */
template <int DT, int STAGE>
__device__ __forceinline__ void ndet_hosts_stage_block(const ndet_hosts_args &h)
{
	/*
	 * Progress for the host (struct ndet_hosts_stall), after where it stands: posted
	 * stores, never read here.
	 */
	if (blockIdx.x == 0 && threadIdx.x == 0) {
		h.k.host_status->where = h.where;
		h.k.host_status->progress = (ndet_globaltimer() << 1) | (h.nccl_follows & 1u);
	}
	if (STAGE != 1 && ndet_hosts_peer_failed(h))
		return;
	if constexpr (STAGE == 3) {
		ndet_hosts_reduce<DT>(h);
	} else if (h.k.nranks == 1) {
		if (STAGE == 1)
			ndet_hosts_local_alone<DT>(h);
		else
			ndet_hosts_gather_alone<DT>(h);
	} else {
		ndet_block_state st;
		ndet_block_start start;
		if (!ndet_block_open(h.k, st, start))
			return;
		if constexpr (STAGE == 1)
			ndet_hosts_local<DT>(h, st, start);
		else
			ndet_hosts_gather<DT>(h, st, start);
	}
}

template <int DT, int STAGE>
__global__ void __launch_bounds__(NDET_KERNEL_THREADS, 1) ndet_hosts_kernel(const ndet_hosts_args h)
{
	ndet_hosts_stage_block<DT, STAGE>(h);
}

/*
 * Every rank's stage in one launch (grid.y = rank; the GPU test driver's one-launch
 * mode under compute-sanitizer, which serialises separate launches): hs[r] is rank
 * r's arguments.  The ranks of one host exchange through their pools as in separate
 * launches; ranks of other hosts never wait for each other within a stage.
 */
template <int DT, int STAGE>
__global__ void __launch_bounds__(NDET_KERNEL_THREADS, 1)
	ndet_hosts_all_ranks_kernel(const ndet_hosts_args *hs)
{
	ndet_hosts_stage_block<DT, STAGE>(hs[blockIdx.y]);
}

} /* namespace */

#define NDET_HOSTS_KERNELS_OF(DT)                                                                  \
	{                                                                                          \
		ndet_hosts_kernel<DT, 1>, ndet_hosts_kernel<DT, 3>, ndet_hosts_kernel<DT, 5>       \
	}
#define NDET_HOSTS_ALL_RANKS_KERNELS_OF(DT)                                                        \
	{                                                                                          \
		ndet_hosts_all_ranks_kernel<DT, 1>, ndet_hosts_all_ranks_kernel<DT, 3>,            \
			ndet_hosts_all_ranks_kernel<DT, 5>                                         \
	}

#endif /* NDET_DEVICE_HOSTS_CUH_ */
