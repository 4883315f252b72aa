/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The flag word and the memory-ordering primitives every path uses: a ready flag's
 * packing of step and signature, the GPU's nanosecond timer, and system-scope loads
 * and stores (acquire, release, relaxed) of the flags another GPU or process reads.
 */
#ifndef NDET_DEVICE_SYNC_CUH_
#define NDET_DEVICE_SYNC_CUH_

#include <stdint.h>

#include "kernels/ndet_abi.h"

namespace
{

constexpr uint64_t kStepMask = (1ull << (64 - NDET_FLAG_SIGNATURE_BITS)) - 1;

__device__ __forceinline__ uint64_t ndet_flag_pack(uint64_t step, uint32_t signature)
{
	return (step << NDET_FLAG_SIGNATURE_BITS) | (signature & NDET_FLAG_SIGNATURE_MASK);
}

__device__ __forceinline__ uint64_t ndet_globaltimer()
{
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/*
 * Memory ordering.  A writer publishes with a system-scope release store into the
 * peer's memory; the peer polls its own memory with system-scope acquire loads.
 * System scope because the peer is another GPU (NVLink/PCIe) or another process.
 * Release after __syncthreads() is cumulative over the block's earlier writes, and
 * acquire before __syncthreads() makes the peer's data visible to the whole block.
 */
__device__ __forceinline__ uint64_t ndet_load_acquire(const uint64_t *p)
{
	uint64_t v;
	asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}

__device__ __forceinline__ void ndet_store_release(uint64_t *p, uint64_t v)
{
	asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/* The abort word needs no ordering with data: whoever sees it leaves. */
__device__ __forceinline__ uint64_t ndet_load_relaxed(const uint64_t *p)
{
	uint64_t v;
	asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}

__device__ __forceinline__ void ndet_store_relaxed(uint64_t *p, uint64_t v)
{
	asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/*
 * The error word of the host-mapped status: a release store, so that a host thread
 * that reads the word with acquire also sees the details written before it.
 */
__device__ __forceinline__ void ndet_store_release_u32(volatile uint32_t *p, uint32_t v)
{
	asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

} /* namespace */

#endif /* NDET_DEVICE_SYNC_CUH_ */
