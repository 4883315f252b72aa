/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Benchmark and test kernels, outside the product: kernels/libndet_bench_kernels.la,
 * linked by nccl-det-perf and the GPU test programs only, never by the libraries.
 * extern "C" launchers that return the CUDA error code as an int (0 = cudaSuccess),
 * like those of ndet_kernels.h.
 */
#ifndef NDET_BENCH_H_
#define NDET_BENCH_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * `iters` flag round trips between two concurrently running launches (initiator 1 on
 * one rank, 0 on the other); *result_ns (device memory) gets the elapsed time, 0 if
 * the peer did not answer within 5 s.
 */
int ndet_kernel_flag_pingpong(uint64_t *mine, uint64_t *peer, int iters, int initiator,
			      uint64_t *result_ns, void *stream);

/*
 * Copy `bytes` with `blocks` blocks of the all-reduce kernels' copy loop (either side
 * may be a peer GPU's memory: nccl-det-perf --link-probe).
 */
int ndet_kernel_copy(void *dst, const void *src, size_t bytes, unsigned blocks, void *stream);

/*
 * An empty kernel with the collective kernels' arguments (by value) and block size, on
 * `blocks` blocks: what launching a call costs before it does anything.
 */
int ndet_kernel_empty(unsigned blocks, void *stream);

/* Fill `count` 32-bit words at `dst` with `value` on `stream`. */
int ndet_kernel_fill_u32(unsigned *dst, size_t count, unsigned value, void *stream);

/*
 * avg's product by 2^-k (the collectives' ndet_avg_of for n = 2^k) against the IEEE
 * division by n, for `count` inputs from index `first`: f32 (wide = 0) takes the bit
 * pattern `first + i` (every pattern: first 0, count 2^32), f64 (wide = 1) a hash of
 * it (indices 0-22: zeros, subnormals, the largest, infinities, NaNs).  Adds to
 * *mismatches (device memory) the inputs whose two results differ in any bit (two
 * NaNs count as equal) and, for the first one, stores its bits in *example.  n must
 * be a power of two.
 */
int ndet_kernel_check_avg_product(int wide, uint32_t n, uint64_t first, uint64_t count,
				  unsigned long long *mismatches, unsigned long long *example,
				  void *stream);

#ifdef __cplusplus
}
#endif

#endif /* NDET_BENCH_H_ */
