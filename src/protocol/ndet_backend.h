/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The engine as the communicator layer sees it: a table of functions, by default
 * the CUDA engine of ndet_engine.h, replaceable by tests
 * (ndet_comm_set_backend_for_testing) with a host-only engine that runs the same
 * setup protocol on host memory (test/support/ndet_fake_backend.c).  Engines are opaque.
 */
#ifndef NDET_BACKEND_H_
#define NDET_BACKEND_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "protocol/ndet_engine_config.h"
#include "protocol/ndet_setup_record.h"
#include "common/ndet_status.h"
#include "kernels/ndet_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One engine of a group setup (as struct ndet_engine_member, engine opaque). */
struct ndet_backend_member {
	/* in */
	struct ndet_engine_config config;
	void *exchange_context;
	/* out */
	void *engine;
	ndet_status_t status; /* NDET_OK, NDET_ERR_UNSUPPORTED (verdict), else failed */
	struct ndet_setup_verdict verdict;
	uint32_t agreed_flags;
};

/*
 * One collective of a launch batch (every call of a batch on another engine), as
 * struct ndet_engine_call describes it; zero-initialised fields after `status` make
 * it an all-reduce with a plain op.
 */
struct ndet_backend_call {
	void *engine;
	const void *sendbuff;
	void *recvbuff;
	size_t count; /* reduce-scatter: recvcount */
	ndet_dtype_t dtype;
	ndet_op_t op;
	cudaStream_t stream;
	ndet_status_t status; /* out */
	ndet_coll_t coll;
	int root; /* NDET_COLL_REDUCE */
	ndet_premul_t premul;
	uint64_t scalar_bits; /* NDET_PREMUL_HOST */
	const void *scalar;   /* NDET_PREMUL_DEVICE */
};

struct ndet_backend {
	const char *name;
	/*
	 * Lockstep setup of `count` engines (ndet_engine_create_group semantics).  The
	 * exchange callback is kept by every engine for its destroy barrier.
	 */
	void (*create_group)(struct ndet_backend_member *members, int count,
			     ndet_engine_exchange_fn exchange);
	/*
	 * Enqueue every call; never waits for peers (a host-only backend may exchange,
	 * but for the whole batch at once).  Each call gets its status.
	 */
	void (*allreduce_group)(struct ndet_backend_call *calls, int count);
	/* NDET_OK or NDET_ERR_REMOTE; no CUDA call (a host-mapped read). */
	ndet_status_t (*error)(void *engine, uint32_t *kernel_error);
	/* Make running and future kernels leave; no CUDA call. */
	void (*abort)(void *engine);
	/*
	 * Teardown phase one (ndet_engine_quiesce_group semantics): wait for the
	 * engines' kernels (bounded; abort() from another thread cuts it short), close
	 * their mappings, with `barrier` meet every peer.  Engines stay valid.
	 */
	ndet_status_t (*quiesce_group)(void *const engines[], int count, bool barrier);
	/* Phase two (ndet_engine_release semantics): the engine is gone afterwards. */
	void (*release)(void *engine);
	/* ndet_engine_ranks_share_process semantics. */
	bool (*shares_process)(void *engine);
	/* Device memory one engine takes. */
	uint64_t (*memory_bytes)(const struct ndet_engine_config *config);
	/*
	 * NCCL's CudaPtrCheck (its pointer-check mode): does `pointer` pass for a
	 * communicator on `cuda_device` (-1: unknown, the device is not compared)?
	 * Never stricter than NCCL's check: a pointer refused here is forwarded to NCCL.
	 */
	bool (*pointer_valid)(int cuda_device, const void *pointer);
	/*
	 * The process exits (the library's exit handler, before the runtime's own):
	 * a last look at the pools waiting for peers of other processes
	 * (ndet_teardown_at_exit).  Not in a fork child.
	 */
	void (*at_exit)(void);
};

/* The CUDA engine (src/engine/ndet_backend_cuda.c, in libndet_engine.la). */
extern const struct ndet_backend ndet_backend_cuda;

/*
 * The backend of this link, which the divert layer uses unless a test sets another
 * (ndet_comm_set_backend_for_testing).  Defined by the backend library linked after
 * libndet_divert.la: the CUDA engine in the installed libraries (src/engine/ndet_backend_cuda.c),
 * the host-only engine in the CPU tests (test/support/ndet_fake_backend.c), so that those
 * link neither the kernels nor the CUDA runtime.
 */
const struct ndet_backend *ndet_backend_default(void);

#ifdef __cplusplus
}
#endif

#endif /* NDET_BACKEND_H_ */
