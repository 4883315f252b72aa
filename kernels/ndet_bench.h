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

#include "kernels/ndet_types.h"

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

/*
 * Load the kernels above into the current device's context before any rank runs one:
 * under CUDA's lazy loading, a first launch while other ranks' kernels spin in the
 * same context may wait for them (ndet_kernel_device_check).  A cudaError_t.
 */
int ndet_bench_load(void);

/*
 * The flag exchange under a small collective (nccl-det-perf): what any all-reduce's
 * synchronisation costs, every rank hearing from every peer once per call.  Block b of
 * each launch takes the next step of its counter (this rank's `counters[b]`) and
 * stores it into each peer q's 16 bytes at `flags[q] + (b * NDET_MAX_RANKS + rank) *
 * 16`, then waits until each peer's step is in its own at `flags[rank] + (b *
 * NDET_MAX_RANKS + q) * 16`; then the block's barrier.  `one_thread` 0: thread q stores
 * an 8-byte flag to peer q and polls q's (the shape of the pull paths' flags);
 * 1: thread 0 stores a 16-byte LL line to every peer in turn, then polls them all,
 * one load of each per round (the shape of an LL step of 8 bytes).  Every rank must
 * launch the same sequence of grids.  Flags and counters start at zero:
 * NDET_BENCH_EXCHANGE_BYTES of flags and one counter per block, up to
 * NDET_BENCH_EXCHANGE_MAX_BLOCKS blocks.  *failed (this rank's, device memory) is set
 * to 1 when a peer's step did not come in 5 s (the block then goes on: a benchmark
 * never hangs).
 */
#define NDET_BENCH_EXCHANGE_MAX_BLOCKS 1024u
#define NDET_BENCH_EXCHANGE_BYTES      ((size_t)NDET_BENCH_EXCHANGE_MAX_BLOCKS * NDET_MAX_RANKS * 16)

struct ndet_bench_exchange {
	char *flags[NDET_MAX_RANKS];
	uint64_t *counters;
	uint32_t *failed;
	int nranks, rank, one_thread;
};

int ndet_kernel_flag_exchange(const struct ndet_bench_exchange *exchange, unsigned blocks,
			      void *stream);

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
