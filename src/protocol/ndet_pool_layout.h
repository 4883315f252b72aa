/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The layout of a rank's pool, from its engine configuration alone: the flags region
 * (struct ndet_flags, then the detach area), the lanes, the LL slots, and the step
 * counters allocated beside it.  Pure (no CUDA call), so the CUDA engine and the
 * host-only engine of the CPU tests size their pools with the same code, and every
 * rank of a communicator computes the same layout from the same agreed facts.
 *
 * The kernels reduce the ranks of one host (doc/protocol.md, "The engine's local
 * view"): once the table is agreed the engine lays out its lanes with a configuration
 * whose rank and nranks are its local index and its host's g.  The allocation comes
 * before the table, so what depends on g there (the LL slots) is sized for the most
 * ranks a host can hold: min(nranks, NDET_MAX_RANKS), which is g on one host.
 */
#ifndef NDET_POOL_LAYOUT_H_
#define NDET_POOL_LAYOUT_H_

#include <stdint.h>

#include "protocol/ndet_engine_config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Lanes start on multiples of this many bytes. */
#define NDET_POOL_LANE_ALIGN 256u

/*
 * The detach area of the teardown's detach protocol (ndet_teardown.h): one word per
 * rank right after struct ndet_flags, inside the flags region, which the setup
 * zeroes before any peer can import the pool.  No kernel touches it (the kernels
 * address struct ndet_flags only), so the kernels need not know it exists; its
 * offset follows the struct when that grows.
 */
#define NDET_POOL_DETACH_OFFSET ((sizeof(struct ndet_flags) + 63) / 64 * 64)
#define NDET_POOL_DETACH_BYTES  (NDET_MAX_RANKS * sizeof(uint64_t))

/* Device bytes of the step counters (ndet_kernel_args.step_counters). */
#define NDET_POOL_COUNTER_BYTES                                                                    \
	(NDET_STEP_COUNTER_WORDS * NDET_KERNEL_MAX_BLOCKS * sizeof(uint64_t))

/*
 * The most ranks the communicator of `config` can have on one host, known before the
 * table: min(nranks, NDET_MAX_RANKS) (the verdict refuses more on one host).
 */
uint64_t ndet_pool_host_ranks_bound(const struct ndet_engine_config *config);
/* Bytes of the flags region, whole pages: struct ndet_flags and the detach area. */
uint64_t ndet_pool_flags_bytes(void);
/* The pool's data bytes (the lanes): known before setup. */
uint64_t ndet_pool_data_bytes(const struct ndet_engine_config *config);
/* How many lanes the data bytes make: the grid cap of the configuration. */
uint64_t ndet_pool_lanes(const struct ndet_engine_config *config);
uint64_t ndet_pool_lane_bytes(const struct ndet_engine_config *config);
/* Bytes of the LL slots after the lanes. */
uint64_t ndet_pool_ll_bytes(const struct ndet_engine_config *config);
/* Device memory one engine takes: the pool and its step counters. */
uint64_t ndet_pool_memory_bytes(const struct ndet_engine_config *config);

#ifdef __cplusplus
}
#endif

#endif /* NDET_POOL_LAYOUT_H_ */
