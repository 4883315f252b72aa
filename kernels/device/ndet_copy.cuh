/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Memory access of a block: loads from the lanes that bypass L1, stores of single
 * elements at any alignment, and the block-wide copy with the widest access both
 * addresses allow.
 */
#ifndef NDET_DEVICE_COPY_CUH_
#define NDET_DEVICE_COPY_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace
{

/*
 * Loads from the lanes (peers' and our own) bypass L1 (ld.global.cg): lanes are
 * rewritten by other SMs, other GPUs and other processes between steps, and L1 is not
 * coherent, so a line cached by an earlier step or by another rank's block on this SM
 * must never be served.  The acquire that precedes these loads orders them; .cg makes
 * sure they reach L2 (or the peer).  The data is read once, so L1 would not help.
 */
__device__ __forceinline__ uint4 ndet_load_lane(const uint4 *p)
{
	return __ldcg(p);
}
__device__ __forceinline__ float ndet_load_lane(const float *p)
{
	return __ldcg(p);
}
__device__ __forceinline__ double ndet_load_lane(const double *p)
{
	return __ldcg(p);
}
__device__ __forceinline__ __half ndet_load_lane(const __half *p)
{
	return __ushort_as_half(__ldcg(reinterpret_cast<const unsigned short *>(p)));
}
__device__ __forceinline__ __nv_bfloat16 ndet_load_lane(const __nv_bfloat16 *p)
{
	return __ushort_as_bfloat16(__ldcg(reinterpret_cast<const unsigned short *>(p)));
}
__device__ __forceinline__ unsigned char ndet_load_lane(const unsigned char *p)
{
	return __ldcg(p);
}

/* Store one element to an address that may not be aligned to its size. */
template <typename T> __device__ __forceinline__ void ndet_store_elem(char *dst, T value)
{
	if (((uintptr_t)dst & (sizeof(T) - 1)) == 0) {
		*reinterpret_cast<T *>(dst) = value;
	} else {
		const char *src = reinterpret_cast<const char *>(&value);
#pragma unroll
		for (int i = 0; i < (int)sizeof(T); i++)
			dst[i] = src[i];
	}
}

/*
 * Block-wide copy with the widest access both addresses allow.  With kFromLane the
 * source is a lane and every load bypasses L1 (see ndet_load_lane).
 */
template <bool kFromLane = false> __device__ __forceinline__ uint4 ndet_copy_load(const uint4 *p)
{
	return kFromLane ? __ldcg(p) : *p;
}

template <bool kFromLane = false>
__device__ void ndet_copy_bytes(char *dst, const char *src, uint64_t bytes)
{
	const unsigned tid = threadIdx.x, nth = blockDim.x;
	uintptr_t mis = (uintptr_t)dst | (uintptr_t)src;
	uint64_t done = 0;
	if ((mis & 15) == 0) {
		/*
		 * Eight loads in flight per thread before any store: one block per SM must
		 * keep enough bytes in flight to cover memory (or NVLink) latency.  The
		 * last round is predicated rather than left to a loop of one load at a
		 * time: a copy that is not a multiple of 32 KiB (8 x 256 threads x 16
		 * bytes) would spend most of its tail waiting on single loads.
		 */
		constexpr int U = 8;
		const uint64_t n = bytes / 16;
		const uint4 *s = reinterpret_cast<const uint4 *>(src);
		uint4 *d = reinterpret_cast<uint4 *>(dst);
		for (uint64_t i = tid; i < n; i += U * nth) {
			uint4 v[U];
#pragma unroll
			for (int u = 0; u < U; u++)
				if (i + u * nth < n)
					v[u] = ndet_copy_load<kFromLane>(&s[i + u * nth]);
#pragma unroll
			for (int u = 0; u < U; u++)
				if (i + u * nth < n)
					d[i + u * nth] = v[u];
		}
		done = n * 16;
	} else if ((mis & 7) == 0) {
		uint64_t n = bytes / 8;
		for (uint64_t i = tid; i < n; i += nth) {
			const uint2 *p = reinterpret_cast<const uint2 *>(src) + i;
			reinterpret_cast<uint2 *>(dst)[i] = kFromLane ? __ldcg(p) : *p;
		}
		done = n * 8;
	} else if ((mis & 3) == 0) {
		uint64_t n = bytes / 4;
		for (uint64_t i = tid; i < n; i += nth) {
			const unsigned *p = reinterpret_cast<const unsigned *>(src) + i;
			reinterpret_cast<unsigned *>(dst)[i] = kFromLane ? __ldcg(p) : *p;
		}
		done = n * 4;
	} else if ((mis & 1) == 0) {
		uint64_t n = bytes / 2;
		for (uint64_t i = tid; i < n; i += nth) {
			const unsigned short *p = reinterpret_cast<const unsigned short *>(src) + i;
			reinterpret_cast<unsigned short *>(dst)[i] = kFromLane ? __ldcg(p) : *p;
		}
		done = n * 2;
	}
	for (uint64_t i = done + tid; i < bytes; i += nth) {
		const unsigned char *p = reinterpret_cast<const unsigned char *>(src) + i;
		dst[i] = (char)(kFromLane ? __ldcg(p) : *p);
	}
}

} /* namespace */

#endif /* NDET_DEVICE_COPY_CUH_ */
