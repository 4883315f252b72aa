/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The deterministic all-reduce engine: one instance per communicator and rank.
 * It owns a pool (plain cudaMalloc, exported once at its base), maps every peer's
 * pool (CUDA IPC, or a direct pointer for peers in this process), and launches the
 * kernels of kernels/ndet_kernels.cu.  It knows nothing about NCCL: setup records
 * travel through an all-gather callback the caller supplies (the shim uses the real
 * ncclAllGather; tests use threads or sockets).
 *
 * Memory per engine and rank: pool_size (staging lanes) + 64 KiB (flags) + a few
 * hundred bytes of step counters and host-mapped status, plus one mapping of each
 * peer's pool (virtual address space only).
 */
#ifndef NDET_ENGINE_H_
#define NDET_ENGINE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "ndet_plan.h"
#include "ndet_setup_record.h"
#include "ndet_status.h"
#include "ndet_types.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ndet_engine;

struct ndet_engine_config {
	int rank;
	int nranks;
	int cuda_device;
	uint64_t pool_size;     /* staging bytes (NCCL_DET_POOL_SIZE) */
	int max_blocks;         /* NCCL_DET_MAX_BLOCKS */
	uint64_t oneshot_max;   /* NCCL_DET_ONESHOT_MAX */
	uint64_t timeout_ms;    /* NCCL_DET_TIMEOUT; 0 = never (tests only) */
	uint64_t max_memory;    /* NCCL_DET_MAX_MEMORY */
	unsigned debug_delay_ns;
	uint64_t settings_hash; /* must be equal on every rank */
	unsigned test_fail;     /* ndet_fault_t bits */
	int test_fail_rank;     /* -1 = every rank */
};

/*
 * Gather `bytes` from every rank: device_recv[r * bytes ...] = rank r's device_send.
 * Both buffers are device memory the engine allocated (never pageable host memory:
 * NCCL would DMA from it).  Must be collective over the same ranks as the engine.
 */
typedef ndet_status_t (*ndet_engine_allgather_fn)(void *context, const void *device_send,
						  void *device_recv, size_t bytes);

/*
 * Collective.  NDET_OK and *engine set when every rank mapped and probed every peer.
 * NDET_ERR_UNSUPPORTED when the ranks agreed not to divert (verdict says why, the
 * same on every rank; *engine NULL).  Other codes: the exchange itself failed.
 */
ndet_status_t ndet_engine_create(const struct ndet_engine_config *config,
				 ndet_engine_allgather_fn allgather, void *context,
				 struct ndet_engine **engine, struct ndet_setup_verdict *verdict);

/*
 * Enqueue one all-reduce on `stream`.  Never blocks the host.  NDET_ERR_REMOTE at
 * once (no CUDA call) if the engine is poisoned.
 */
ndet_status_t ndet_engine_allreduce(struct ndet_engine *engine, const void *sendbuff,
				    void *recvbuff, size_t count, ndet_dtype_t dtype,
				    ndet_op_t op, cudaStream_t stream);

/*
 * All ranks of this process in one launch (grid.y = rank), for compute-sanitizer.
 * Every engine must live in this process on the same device.
 */
ndet_status_t ndet_engine_allreduce_all_ranks(struct ndet_engine *const *engines, int nranks,
					      const void *const *sendbuffs, void *const *recvbuffs,
					      size_t count, ndet_dtype_t dtype, ndet_op_t op,
					      cudaStream_t stream);

/* The plan this engine would use (for tools and tests). */
ndet_status_t ndet_engine_plan(const struct ndet_engine *engine, size_t count,
			       ndet_dtype_t dtype, ndet_op_t op, struct ndet_plan *plan);

/*
 * The engine's asynchronous error, without any CUDA call: NDET_OK, or
 * NDET_ERR_REMOTE once a kernel reported a timeout, abort, divergence or peer
 * failure.  `kernel_error` (may be NULL) gets the ndet_kernel_error_t.
 */
ndet_status_t ndet_engine_error(const struct ndet_engine *engine, uint32_t *kernel_error);

/*
 * Where the first kernel error was seen, for diagnostics (no CUDA call): the block,
 * the peer waited for, the step, the flag value last read and the wait (1 done,
 * 2 ready, 3 reduced).  Returns false when there is no error.
 */
bool ndet_engine_error_details(const struct ndet_engine *engine, uint32_t *block, uint32_t *peer,
			       uint64_t *step, uint64_t *observed, uint32_t *phase);

/* Ask running and future kernels to leave (ncclCommAbort/Revoke).  No CUDA call. */
void ndet_engine_abort(struct ndet_engine *engine);

/*
 * Release the engine.  With `barrier`, waits for this rank's kernels and meets every
 * peer in one more all-gather, so no peer can still read our pool when it is freed
 * (collective).  Without it, or when the engine is poisoned (a kernel may spin and
 * cudaFree would wait for it), the pool is quarantined: left allocated until exit.
 */
ndet_status_t ndet_engine_destroy(struct ndet_engine *engine, bool barrier);

/* Bytes of device memory an engine with this config allocates. */
uint64_t ndet_engine_memory_bytes(const struct ndet_engine_config *config);

#ifdef __cplusplus
}
#endif

#endif /* NDET_ENGINE_H_ */
