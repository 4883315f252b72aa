/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The launchers of ndet_bench.h and their kernels: a bare flag round trip, the
 * collectives' copy loop alone, and a fill.  They use the collectives' device code
 * (device/ndet_sync.cuh, device/ndet_copy.cuh), so they measure what the collectives
 * do.
 */
#include <cuda_runtime.h>

#include "kernels/ndet_bench.h"
#include "kernels/ndet_abi.h"
#include "kernels/device/ndet_sync.cuh"
#include "kernels/device/ndet_copy.cuh"

namespace
{

/* Bare flag round trip between two ranks: the floor of any synchronisation. */
__global__ void ndet_pingpong_kernel(uint64_t *mine, uint64_t *peer, int iters, int initiator,
				     uint64_t *result)
{
	const uint64_t t0 = ndet_globaltimer();
	const uint64_t deadline = 5000000000ull; /* a benchmark must never hang */
	for (int k = 1; k <= iters; k++) {
		if (initiator)
			ndet_store_release(peer, (uint64_t)k);
		while (ndet_load_acquire(mine) != (uint64_t)k) {
			if (ndet_globaltimer() - t0 > deadline) {
				*result = 0;
				return;
			}
		}
		if (!initiator)
			ndet_store_release(peer, (uint64_t)k);
	}
	*result = ndet_globaltimer() - t0;
}

__global__ void ndet_fill_u32_kernel(unsigned *dst, size_t count, unsigned value)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
	     i += (size_t)gridDim.x * blockDim.x)
		dst[i] = value;
}

/* Benchmark copy: block b copies its own contiguous slice of `bytes`. */
__global__ void __launch_bounds__(NDET_KERNEL_THREADS)
	ndet_copy_kernel(char *dst, const char *src, size_t bytes)
{
	size_t per = (bytes + gridDim.x - 1) / gridDim.x;
	per = (per + 15) / 16 * 16;
	const size_t begin = min(bytes, (size_t)blockIdx.x * per);
	const size_t end = min(bytes, begin + per);
	ndet_copy_bytes<true>(dst + begin, src + begin, end - begin);
}

/*
 * The floor under a small collective (nccl-det-perf): a kernel that does nothing, with
 * the collective kernels' by-value arguments and block size, launched with a call's grid.
 */
__global__ void __launch_bounds__(NDET_KERNEL_THREADS) ndet_empty_kernel(const ndet_kernel_args)
{
}

} /* namespace */

extern "C" int ndet_kernel_empty(unsigned blocks, void *stream)
{
	const ndet_kernel_args args = {};
	ndet_empty_kernel<<<blocks, NDET_KERNEL_THREADS, 0, (cudaStream_t)stream>>>(args);
	return (int)cudaGetLastError();
}

extern "C" int ndet_kernel_flag_pingpong(uint64_t *mine, uint64_t *peer, int iters, int initiator,
					 uint64_t *result_ns, void *stream)
{
	ndet_pingpong_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(mine, peer, iters, initiator,
								result_ns);
	return (int)cudaGetLastError();
}

extern "C" int ndet_kernel_copy(void *dst, const void *src, size_t bytes, unsigned blocks,
				void *stream)
{
	if (bytes == 0 || blocks == 0)
		return 0;
	ndet_copy_kernel<<<blocks, NDET_KERNEL_THREADS, 0, (cudaStream_t)stream>>>(
		static_cast<char *>(dst), static_cast<const char *>(src), bytes);
	return (int)cudaGetLastError();
}

extern "C" int ndet_kernel_fill_u32(unsigned *dst, size_t count, unsigned value, void *stream)
{
	if (count == 0)
		return 0;
	unsigned blocks = (unsigned)((count + 255) / 256);
	if (blocks > 1024)
		blocks = 1024;
	ndet_fill_u32_kernel<<<blocks, 256, 0, (cudaStream_t)stream>>>(dst, count, value);
	return (int)cudaGetLastError();
}
