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
#include "protocol/ndet_hosts_plan.h"
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
	/* Multi-host stages (hosts_stage): the call's plan, made by the divert layer. */
	const struct ndet_hosts_plan *hosts_plan;
};

/*
 * Where a multi-host engine's rank sits (hosts_view), from the host table of its setup
 * (ndet_host_table_build): equal on every rank but for `host`, `local` and `staging`.
 */
struct ndet_backend_hosts {
	int nhosts;             /* H >= 2 */
	int local_ranks;        /* g: every host has as many (the verdict requires it) */
	int host, local;        /* this rank's (h, l) */
	const int *ranks;       /* ranks[h x g + l]: the global rank of (h, l); the engine's */
	uint64_t staging_bytes; /* the agreed NCCL_DET_HOSTS_STAGING: every plan's budget */
	/*
	 * This rank's staging (device memory, NDET_HOSTS_SLOTS slots of the plan's
	 * layout): ndet_hosts_transfers' staging offsets point into it, and NCCL's sends
	 * and receives of stages 2 and 4 read and write it there.
	 */
	void *staging;
	/*
	 * Host memory for nhosts transfers (ndet_hosts_transfers' lists), the engine's:
	 * made at setup, so that a call across hosts allocates nothing (a rank that could
	 * not go on would leave its peers on other hosts waiting in NCCL).  One call at
	 * a time uses it, as NCCL allows one thread at a time on a communicator.
	 */
	struct ndet_hosts_transfer *transfers;
	/*
	 * This rank's abort word (NDET_HOSTS_STATUS_BYTES of memory NCCL can send from,
	 * the engine's): sent to every peer host with stages 2 and 4, into the peer's
	 * status words (ndet_hosts_status_at).
	 */
	const void *status_word;
	/*
	 * The connections between hosts (hosts_connect): NDET_HOSTS_CONNECT_BYTES(nhosts)
	 * bytes the engine holds in memory NCCL can send from and receive into (NULL
	 * when it has none left to lend), and the private stream that orders every other
	 * use of those bytes.
	 */
	void *connect_buffer;
	cudaStream_t connect_stream;
	/*
	 * The engine's private stream K, on which the divert layer enqueues the stage
	 * kernels of a call (hosts_stage), while NCCL's groups run on the call's stream
	 * (doc/multihost-design.md, "Streams and the pipeline"); hosts_order joins the
	 * two.  NULL: the stages run on the call's stream (an engine without one).
	 */
	cudaStream_t stage_stream;
};

/* One byte sent to each peer host, one received from each: 1 + nhosts bytes. */
#define NDET_HOSTS_CONNECT_BYTES(nhosts) ((size_t)(nhosts) + 1)

/* hosts_connect's callback: the NCCL calls, for every engine of the batch at once. */
typedef ndet_status_t (*ndet_backend_connect_fn)(void *context);

struct ndet_backend {
	const char *name;
	/*
	 * Has the multi-host stages (hosts_view, hosts_stage): the divert layer then
	 * publishes NDET_SETUP_FLAG_MULTI_HOST in every setup record, and a communicator
	 * of several hosts diverts only where every rank did (ndet_setup_evaluate).  The
	 * CUDA engine has them (kernels/device/ndet_hosts.cuh).
	 */
	bool multi_host;
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
	/*
	 * The first error in one line for a WARN (which wait of which block failed);
	 * returns its length, 0 where there is none.  No CUDA call.
	 */
	size_t (*describe_error)(void *engine, char *text, size_t size);
	/* Make running and future kernels leave; no CUDA call. */
	void (*abort)(void *engine);
	/*
	 * A call this rank will not launch (host memory ran out before it reached
	 * allreduce_group), whose peers launch theirs: as for a launch that failed, this
	 * rank's abort word goes into its peers' flags, enqueued on `stream` (captured
	 * with it, if it is being captured), so that their kernels of that call fail at
	 * once instead of at NCCL_DET_TIMEOUT, and this engine's kernels leave.  Best
	 * effort: needs no host memory of its own and reports nothing.
	 */
	void (*fail_call)(void *engine, cudaStream_t stream);
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
	/*
	 * The multi-host view of an engine: NDET_OK and *view for an engine whose
	 * communicator spans hosts; NDET_ERR_UNSUPPORTED for a single-host engine (or a
	 * backend without multi_host).  Valid while the engine lives.
	 */
	ndet_status_t (*hosts_view)(void *engine, struct ndet_backend_hosts *view);
	/*
	 * Stage 1, 3 or 5 (ndet_hosts_plan.h) of chunk `chunk` of every call (each with
	 * its hosts_plan, on a multi-host engine, chunk < plan->chunks), enqueued on the
	 * call's stream behind what is there, as a kernel launch: never waits for a peer
	 * on the host (a host-only backend may, for the whole batch at once, so that one
	 * thread may drive several ranks).
	 *   1: this host's partial (T_local over the g ranks, partial type) of segment l
	 *      into the slot's partial region;
	 *   3: T_hosts over the H partials of block (l, h) in host order, avg's
	 *      division, one rounding, into block h of the result region;
	 *   5: the host's g result segments into recvbuff: all of the chunk
	 *      (all-reduce), the part in this rank's recvcount block (reduce-scatter),
	 *      on the root only (reduce).
	 * Each call gets its status; a failure the peers must learn of is recorded as a
	 * kernel's (error), and the call's later stages still run (their NCCL stages
	 * must match their peers').
	 */
	void (*hosts_stage)(struct ndet_backend_call *calls, int count, ndet_hosts_stage_t stage,
			    uint64_t chunk);
	/*
	 * Join the engine's stage stream and `call_stream` (ndet_hosts_join_t): the
	 * stage stream waits for what is enqueued on the call's stream so far (BEGIN,
	 * TO_STAGES), or the reverse (TO_CALL, END); an event of the engine recorded on
	 * one and waited for on the other at once, so one event per direction serves
	 * every step.  Never waits on the host.  Under stream capture the stage stream
	 * joins the capture of the call's stream.  BEGIN returns NDET_ERR_UNSUPPORTED,
	 * having done nothing, where the stage stream cannot serve this call (it is part
	 * of another capture, still open): the call's stages then run on its own stream.
	 * END also makes the call's stream what the engine's next launch and its
	 * teardown wait for (NCCL's last receive included).  Any other failure: this
	 * rank's status word is poisoned on `call_stream` (its peers on other hosts fail
	 * at their next stage instead of taking what it sends), its kernels are aborted,
	 * and the error is returned.  Only for engines whose hosts_view has a stage
	 * stream.
	 */
	ndet_status_t (*hosts_order)(void *engine, cudaStream_t call_stream,
				     ndet_hosts_join_t join);
	/*
	 * Run `connect(context)` in the engines' setup context (the caller's device
	 * restored afterwards, streams it does not capture usable while the application
	 * captures one: the relaxed capture mode of the setup), and return its status.
	 * The divert layer sends a byte to every peer of the multi-host stages there, at
	 * setup, so that NCCL makes its connections (lazy since NCCL 2.22) before the
	 * first call: doc/multihost-design.md, "Connections at setup".
	 */
	ndet_status_t (*hosts_connect)(ndet_backend_connect_fn connect, void *context);
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
