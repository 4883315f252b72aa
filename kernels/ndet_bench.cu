/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The launchers of ndet_bench.h and their kernels: a bare flag round trip, an n-rank
 * flag exchange, the collectives' copy loop alone, a fill, and a check of avg's product by a power
 * of two.  They use the collectives' device code (device/ndet_sync.cuh, device/ndet_copy.cuh,
 * device/ndet_ll.cuh, device/ndet_tree.cuh), so they measure and check what the collectives do.
 */
#include <cuda_runtime.h>

#include "kernels/ndet_bench.h"
#include "kernels/ndet_kernels.h"
#include "kernels/ndet_abi.h"
#include "kernels/device/ndet_sync.cuh"
#include "kernels/device/ndet_copy.cuh"
#include "kernels/device/ndet_ll.cuh"
#include "kernels/device/ndet_tree.cuh"

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

/*
 * ndet_kernel_flag_exchange (ndet_bench.h).  The collectives' arguments ride along
 * unused, so that the launch costs what a call's does; the prologue's one load and
 * barrier are those of a collective block reading its step counter.  The LL shape
 * stores and polls with the LL step's own line accesses.
 */
__device__ __forceinline__ bool ndet_exchange_expired(const ndet_bench_exchange &x, uint32_t spins,
						      uint64_t t0)
{
	if ((spins & 63) != 0 || ndet_globaltimer() - t0 <= 5000000000ull)
		return false;
	*x.failed = 1;
	return true;
}

__device__ void ndet_exchange_one_thread(const ndet_bench_exchange &x, uint64_t b, uint64_t s)
{
	const int n = x.nranks, me = x.rank;
	const uint32_t tag = (uint32_t)s;
	for (int j = 1; j < n; j++) {
		const int q = (me + j) % n;
		ndet_ll_line<8>::store(x.flags[q] + (b * NDET_MAX_RANKS + me) * 16, s, tag);
	}
	uint32_t pending = ((1u << n) - 1) & ~(1u << me);
	const uint64_t t0 = ndet_globaltimer();
	for (uint32_t spins = 1; pending != 0 && !ndet_exchange_expired(x, spins, t0); spins++) {
		uint32_t w[NDET_MAX_RANKS][4];
#pragma unroll
		for (int q = 0; q < NDET_MAX_RANKS; q++)
			if ((pending >> q) & 1)
				ndet_ll_line<8>::load(x.flags[me] + (b * NDET_MAX_RANKS + q) * 16,
						      w[q]);
#pragma unroll
		for (int q = 0; q < NDET_MAX_RANKS; q++)
			if (((pending >> q) & 1) && w[q][1] == tag && w[q][3] == tag)
				pending &= ~(1u << q);
	}
}

__global__ void __launch_bounds__(NDET_KERNEL_THREADS)
	ndet_flag_exchange_kernel(const ndet_kernel_args, const ndet_bench_exchange x)
{
	__shared__ uint64_t step;
	const uint64_t b = blockIdx.x;
	if (threadIdx.x == 0)
		step = x.counters[b] + 1;
	__syncthreads();
	const uint64_t s = step;
	const int q = (int)threadIdx.x;
	if (x.one_thread) {
		if (q == 0)
			ndet_exchange_one_thread(x, b, s);
	} else if (q < x.nranks && q != x.rank) {
		ndet_store_relaxed(reinterpret_cast<uint64_t *>(x.flags[q] +
								(b * NDET_MAX_RANKS + x.rank) * 16),
				   s);
		const uint64_t *mine = reinterpret_cast<const uint64_t *>(
			x.flags[x.rank] + (b * NDET_MAX_RANKS + q) * 16);
		const uint64_t t0 = ndet_globaltimer();
		for (uint32_t spins = 1;
		     ndet_load_relaxed(mine) < s && !ndet_exchange_expired(x, spins, t0); spins++) {
		}
	}
	__syncthreads();
	if (threadIdx.x == 0)
		x.counters[b] = s;
}

/* A well-mixed 64-bit pattern of an index (splitmix64's finaliser). */
__device__ __forceinline__ uint64_t ndet_bench_mix(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

template <typename Acc> __device__ __forceinline__ Acc ndet_bench_value(uint64_t index);
template <> __device__ __forceinline__ float ndet_bench_value<float>(uint64_t index)
{
	return __int_as_float((int)(uint32_t)index);
}
/* f64: the first inputs the edges (zeros, the subnormal range, the largest, infinity, NaN). */
__constant__ uint64_t ndet_bench_f64_edges[] = {
	0x0000000000000000ull, 0x8000000000000000ull, 0x0000000000000001ull, 0x8000000000000001ull,
	0x0000000000000002ull, 0x0000000000000003ull, 0x000fffffffffffffull, 0x800fffffffffffffull,
	0x0010000000000000ull, 0x8010000000000000ull, 0x0010000000000001ull, 0x0020000000000000ull,
	0x0020000000000001ull, 0x0030000000000001ull, 0x3ff0000000000000ull, 0xbff0000000000000ull,
	0x7fefffffffffffffull, 0xffefffffffffffffull, 0x7ff0000000000000ull, 0xfff0000000000000ull,
	0x7ff8000000000000ull, 0xfff8000000000001ull, 0x7ff0000000000001ull};
template <> __device__ __forceinline__ double ndet_bench_value<double>(uint64_t index)
{
	constexpr uint64_t edges = sizeof(ndet_bench_f64_edges) / sizeof(ndet_bench_f64_edges[0]);
	return __longlong_as_double(
		(long long)(index < edges ? ndet_bench_f64_edges[index] : ndet_bench_mix(index)));
}
__device__ __forceinline__ uint64_t ndet_bench_bits(float x)
{
	return (uint32_t)__float_as_int(x);
}
__device__ __forceinline__ uint64_t ndet_bench_bits(double x)
{
	return (uint64_t)__double_as_longlong(x);
}

template <typename Acc>
__global__ void ndet_check_avg_product_kernel(uint32_t n, uint64_t first, uint64_t count,
					      unsigned long long *mismatches,
					      unsigned long long *example)
{
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
	     i += (uint64_t)gridDim.x * blockDim.x) {
		const Acc x = ndet_bench_value<Acc>(first + i);
		const Acc product = ndet_avg_of(x, n);
		const Acc quotient = ndet_div(x, (Acc)n);
		if (ndet_bench_bits(product) == ndet_bench_bits(quotient) ||
		    (isnan(product) && isnan(quotient)))
			continue;
		if (atomicAdd(mismatches, 1ull) == 0)
			*example = ndet_bench_bits(x);
	}
}

} /* namespace */

extern "C" int ndet_kernel_empty(unsigned blocks, void *stream)
{
	const ndet_kernel_args args = {};
	ndet_empty_kernel<<<blocks, NDET_KERNEL_THREADS, 0, (cudaStream_t)stream>>>(args);
	return (int)cudaGetLastError();
}

extern "C" int ndet_kernel_flag_exchange(const struct ndet_bench_exchange *exchange,
					 unsigned blocks, void *stream)
{
	if (blocks == 0 || blocks > NDET_BENCH_EXCHANGE_MAX_BLOCKS || exchange->nranks < 1 ||
	    exchange->nranks > NDET_MAX_RANKS || exchange->rank < 0 ||
	    exchange->rank >= exchange->nranks)
		return (int)cudaErrorInvalidValue;
	const ndet_kernel_args args = {};
	ndet_flag_exchange_kernel<<<blocks, NDET_KERNEL_THREADS, 0, (cudaStream_t)stream>>>(
		args, *exchange);
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

extern "C" int ndet_kernel_check_avg_product(int wide, uint32_t n, uint64_t first, uint64_t count,
					     unsigned long long *mismatches,
					     unsigned long long *example, void *stream)
{
	if (!ndet_power_of_two(n))
		return (int)cudaErrorInvalidValue;
	const cudaStream_t s = static_cast<cudaStream_t>(stream);
	const unsigned blocks = 1024, threads = 256;
	if (wide)
		ndet_check_avg_product_kernel<double>
			<<<blocks, threads, 0, s>>>(n, first, count, mismatches, example);
	else
		ndet_check_avg_product_kernel<float>
			<<<blocks, threads, 0, s>>>(n, first, count, mismatches, example);
	return (int)cudaGetLastError();
}

extern "C" int ndet_bench_load(void)
{
	/* The kernels whose blocks wait for other ranks' kernels, and those timed. */
	const void *const kernels[] = {
		(const void *)ndet_pingpong_kernel,
		(const void *)ndet_empty_kernel,
		(const void *)ndet_flag_exchange_kernel,
		(const void *)ndet_copy_kernel,
	};
	return ndet_kernel_load_each(kernels, sizeof(kernels) / sizeof(kernels[0]));
}
