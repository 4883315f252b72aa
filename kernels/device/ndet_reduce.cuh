/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The reduce loop of the pull and push paths: `len` elements of every rank, through
 * the tree, into the user's buffer and into copies in the pools.
 */
#ifndef NDET_DEVICE_REDUCE_CUH_
#define NDET_DEVICE_REDUCE_CUH_

#include <stdint.h>

#include "kernels/ndet_abi.h"
#include "kernels/device/ndet_copy.cuh"
#include "kernels/device/ndet_dtype.cuh"
#include "kernels/device/ndet_tree.cuh"

namespace
{

/*
 * Where a reduce loop decides avg's division: at run time from args.op, once per pack
 * (ndet_reduce_roots), or fixed for the whole loop.  The pull paths of kSum's 2- and
 * 8-rank buckets, and push's 8-rank bucket, run one loop or the other
 * (ndet_reduce_core), so that a sum's loop carries no division; the 4-rank bucket
 * keeps one loop, where two were the slower, and so does push at 2 ranks, where two
 * loops spill and one does not (doc/kernels.md has the figures of each).  kGeneric
 * (avg beyond 8 ranks) keeps the run-time test; kPremul never divides.
 */
constexpr int kAvgRuntime = 0;
constexpr int kAvgNo = 1;
constexpr int kAvgYes = 2;

template <int K, int AVG, typename Acc>
__device__ __forceinline__ Acc ndet_reduce_root(const ndet_kernel_args &a, Acc acc, int n)
{
	if constexpr (AVG == kAvgYes)
		return ndet_avg_of(acc, (uint32_t)n);
	else if constexpr (AVG == kAvgNo)
		return acc;
	else
		return ndet_averaged<K>(a, acc, n);
}

/*
 * avg's division for every root of a pack at once: with kAvgRuntime one warp-uniform
 * test of args.op per pack around all the divisions, so that the trees before it and
 * the roundings after it are each one stretch of code the compiler schedules as a
 * whole (a test at each root cost fp8 two-shot at 4 ranks 4-5 %: doc/kernels.md).
 */
template <int K, int AVG, typename Acc, int E>
__device__ __forceinline__ void ndet_reduce_roots(const ndet_kernel_args &a, Acc (&acc)[E], int n)
{
	if constexpr (AVG == kAvgNo || K == kPremul) {
		return;
	} else if (AVG == kAvgYes || a.op == NDET_OP_AVG) {
		/* Products or divisions for the whole pack (ndet_avg_of). */
		if (ndet_power_of_two((uint32_t)n)) {
			const Acc inverse = ndet_power_of_two_inverse(Acc(0), (uint32_t)n);
#pragma unroll
			for (int e = 0; e < E; e++)
				acc[e] = ndet_mul(acc[e], inverse);
		} else {
#pragma unroll
			for (int e = 0; e < E; e++)
				acc[e] = ndet_div(acc[e], (Acc)n);
		}
	}
}

/* ndet_reduce_core's loops, with avg's division decided as AVG says. */
template <int DT, int K, int NR, int AVG>
__device__ __forceinline__ void ndet_reduce_loops(const ndet_kernel_args &a,
						  const char *const (&src)[NR], uint64_t len,
						  char *out, char *const (&copies)[NR], int ncopies,
						  const typename ndet_dtype<DT>::Acc *scales)
{
	typedef ndet_dtype<DT> D;
	typedef typename D::T T;
	typedef typename D::Acc Acc;
	constexpr int E = 16 / sizeof(T);
	const int n = a.nranks;
	const unsigned tid = threadIdx.x, nth = blockDim.x;
	const uint64_t packs = len / E;
	const bool to_out = out != nullptr;
	const bool out_aligned = ((uintptr_t)out & 15) == 0;
	Acc scale[NDET_MAX_RANKS];
#pragma unroll
	for (int r = 0; r < NR; r++)
		scale[r] = ndet_premul_on<K>(a) && r < n ? scales[r] : Acc(1);

	/*
	 * Packs per thread per iteration, so that U x n loads are in flight: what the
	 * registers of the rank bucket allow (NR = 2: 4 x 2, NR = 4 and 8: 2 x n).  A
	 * block's remote reads are latency-bound, so the bytes in flight set its speed;
	 * wider and narrower U were measured slower (doc/kernels.md), fp8 included.
	 */
	constexpr int U = NR <= 2 ? 4 : NR <= 8 ? 2 : 1;
	for (uint64_t base = tid; base < packs; base += (uint64_t)U * nth) {
		uint4 raw[U][NR];
		/* All loads first, so every peer's line is in flight at once. */
#pragma unroll
		for (int u = 0; u < U; u++) {
			const uint64_t p = base + (uint64_t)u * nth;
#pragma unroll
			for (int r = 0; r < NR; r++) {
				if (r < n && p < packs)
					raw[u][r] = ndet_load_lane(
						reinterpret_cast<const uint4 *>(src[r]) + p);
			}
		}
#pragma unroll
		for (int u = 0; u < U; u++) {
			const uint64_t p = base + (uint64_t)u * nth;
			if (p >= packs)
				break;
			/* Every element's tree, then avg's division, then the roundings. */
			Acc acc[E];
			if constexpr (ndet_has_pairs<D>::value) {
				/* Two trees side by side: the same operations per element. */
#pragma unroll
				for (int e = 0; e < E / 2; e++) {
					Acc lo[NDET_MAX_RANKS], hi[NDET_MAX_RANKS];
#pragma unroll
					for (int r = 0; r < NR; r++) {
						if (r < n) {
							const float2 x =
								D::widen2(reinterpret_cast<
									  const unsigned short *>(
									&raw[u][r])[e]);
							lo[r] = ndet_scaled<K>(a, x.x, scale[r]);
							hi[r] = ndet_scaled<K>(a, x.y, scale[r]);
						}
					}
					acc[2 * e] = ndet_tree<K, Acc, NR>(a, lo, n);
					acc[2 * e + 1] = ndet_tree<K, Acc, NR>(a, hi, n);
				}
			} else {
#pragma unroll
				for (int e = 0; e < E; e++) {
					Acc v[NDET_MAX_RANKS];
#pragma unroll
					for (int r = 0; r < NR; r++) {
						if (r < n)
							v[r] = ndet_leaf<DT, K>(
								a,
								reinterpret_cast<const T *>(
									&raw[u][r])[e],
								scale[r]);
					}
					acc[e] = ndet_tree<K, Acc, NR>(a, v, n);
				}
			}
			ndet_reduce_roots<K, AVG>(a, acc, n);
			union {
				uint4 v;
				T e[E];
				unsigned short pair[8];
			} result;
#pragma unroll
			for (int e = 0; e < E; e++) {
				if constexpr (ndet_has_pairs<D>::value) {
					if (e % 2 == 0)
						result.pair[e / 2] = D::narrow2(acc[e], acc[e + 1]);
				} else {
					result.e[e] = D::narrow(acc[e]);
				}
			}
			if (!to_out) {
			} else if (out_aligned) {
				reinterpret_cast<uint4 *>(out)[p] = result.v;
			} else {
#pragma unroll
				for (int e = 0; e < E; e++)
					ndet_store_elem<T>(out + (p * E + e) * sizeof(T),
							   result.e[e]);
			}
#pragma unroll
			for (int j = 0; j < NR; j++) {
				if (j < ncopies && copies[j] != nullptr)
					reinterpret_cast<uint4 *>(copies[j])[p] = result.v;
			}
		}
	}
	for (uint64_t i = packs * E + tid; i < len; i += nth) {
		Acc v[NDET_MAX_RANKS];
#pragma unroll
		for (int r = 0; r < NR; r++) {
			if (r < n)
				v[r] = ndet_leaf<DT, K>(
					a, ndet_load_lane(reinterpret_cast<const T *>(src[r]) + i),
					scale[r]);
		}
		T value = D::narrow(ndet_reduce_root<K, AVG>(a, ndet_tree<K, Acc, NR>(a, v, n), n));
		if (to_out)
			ndet_store_elem<T>(out + i * sizeof(T), value);
#pragma unroll
		for (int j = 0; j < NR; j++) {
			if (j < ncopies && copies[j] != nullptr)
				reinterpret_cast<T *>(copies[j])[i] = value;
		}
	}
}

/*
 * Reduce `len` elements, rank r's at src[r] (r < n; 16-byte aligned: pool memory, or
 * this rank's own sendbuff where two-shot and push read their own segment from it);
 * write them to `out` (user memory, any alignment; NULL: not at all) and to copies[j]
 * for j < ncopies that are not NULL (16-byte aligned pool memory, own or a peer's).
 * `scales` (PreMulSum only) holds every rank's scalar.  TWO_LOOPS (kSum only): a loop
 * without avg's division and one with it, one of them per call.
 */
template <int DT, int K, int NR, bool TWO_LOOPS = K == kSum && (NR == 2 || NR == 8)>
__device__ void ndet_reduce_core(const ndet_kernel_args &a, const char *const (&src)[NR],
				 uint64_t len, char *out, char *const (&copies)[NR], int ncopies,
				 const typename ndet_dtype<DT>::Acc *scales)
{
	static_assert(!TWO_LOOPS || K == kSum, "two loops: the sum class only");
	if constexpr (TWO_LOOPS) {
		if (a.op == NDET_OP_AVG)
			ndet_reduce_loops<DT, K, NR, kAvgYes>(a, src, len, out, copies, ncopies,
							      scales);
		else
			ndet_reduce_loops<DT, K, NR, kAvgNo>(a, src, len, out, copies, ncopies,
							     scales);
	} else {
		ndet_reduce_loops<DT, K, NR, kAvgRuntime>(a, src, len, out, copies, ncopies,
							  scales);
	}
}

/*
 * Pull: reduce `len` elements at element offset `lane_off` of lane `lane_base` in
 * every rank's pool, to `out` only (one-shot and reduce-scatter).
 */
template <int DT, int K, int NR>
__device__ void ndet_reduce_range(const ndet_kernel_args &a, uint64_t lane_base, uint64_t lane_off,
				  uint64_t len, char *out,
				  const typename ndet_dtype<DT>::Acc *scales)
{
	const uint64_t byte_off = lane_base + lane_off * sizeof(typename ndet_dtype<DT>::T);
	const char *src[NR];
	char *copies[NR];
#pragma unroll
	for (int r = 0; r < NR; r++) {
		src[r] = r < a.nranks ? a.lanes[r] + byte_off : nullptr;
		copies[r] = nullptr;
	}
	ndet_reduce_core<DT, K, NR>(a, src, len, out, copies, 0, scales);
}

} /* namespace */

#endif /* NDET_DEVICE_REDUCE_CUH_ */
