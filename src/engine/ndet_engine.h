/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The deterministic all-reduce engine: one instance per communicator and rank.
 * It owns a pool (plain cudaMalloc, exported once at its base), maps the pool of
 * every other rank of its host (CUDA IPC, or a direct pointer for peers in this
 * process), and launches the kernels of kernels/ndet_kernels.cu over the ranks of its
 * host: the kernels see the rank's local index and its host's g (doc/protocol.md,
 * "The engine's local view"), which with one host are its rank and nranks.  It knows nothing about
 * NCCL: setup records travel through an all-gather callback the caller supplies (the shim uses the
 * real ncclAllGather; tests use threads or sockets).
 *
 * Memory per engine and rank: pool_size (staging lanes) + 64 KiB (flags) + a few
 * hundred bytes of step counters and host-mapped status, plus one mapping of each
 * same-host peer's pool (virtual address space only).  Every allocation and mapping is counted
 * in ndet_resources (ndet_teardown.h); teardown follows ndet_teardown.h.
 */
#ifndef NDET_ENGINE_H_
#define NDET_ENGINE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "protocol/ndet_engine_config.h"
#include "protocol/ndet_hosts_plan.h"
#include "protocol/ndet_plan.h"
#include "protocol/ndet_setup_record.h"
#include "common/ndet_status.h"
#include "kernels/ndet_kernels.h"
#include "kernels/ndet_types.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ndet_engine;

/* One engine of a group setup. */
struct ndet_engine_member {
	/* in */
	struct ndet_engine_config config;
	void *exchange_context; /* kept for the engine's life: the destroy barrier uses it */
	/* out */
	struct ndet_engine *engine;        /* set when status is NDET_OK */
	ndet_status_t status;              /* as ndet_engine_create() returns */
	struct ndet_setup_verdict verdict; /* why not, the same on every rank */
	uint32_t agreed_flags;             /* ndet_setup_member.agreed_flags */
};

/*
 * Collective.  NDET_OK and *engine set when every rank mapped and probed every peer
 * of its host.
 * NDET_ERR_UNSUPPORTED when the ranks agreed not to divert (verdict says why, the
 * same on every rank; *engine NULL).  Other codes: the exchange itself failed.
 * A wrapper of ndet_engine_create_group() for one member.
 */
ndet_status_t ndet_engine_create(const struct ndet_engine_config *config,
				 ndet_engine_allgather_fn allgather, void *context,
				 struct ndet_engine **engine, struct ndet_setup_verdict *verdict);

/*
 * Set up `count` engines in lockstep (ndet_setup.h): every round is one call of
 * `exchange` for all members still in the protocol.  Each member gets its status,
 * verdict and engine.  Works whatever the calling thread's stream-capture state:
 * it switches the thread to relaxed capture mode and uses private non-blocking
 * streams only.  The caller's current device is restored.
 */
void ndet_engine_create_group(struct ndet_engine_member *members, int count,
			      ndet_engine_exchange_fn exchange);

/*
 * Enqueue one all-reduce on `stream`.  Never blocks the host.  NDET_ERR_REMOTE at
 * once (no CUDA call) if the engine is poisoned.  Calls on one engine run in issue
 * order whatever their streams: an event recorded on `stream` right after the
 * launch is what the next call's stream waits for (the engine never touches an
 * earlier call's stream again: the application may destroy it).
 */
ndet_status_t ndet_engine_allreduce(struct ndet_engine *engine, const void *sendbuff,
				    void *recvbuff, size_t count, ndet_dtype_t dtype, ndet_op_t op,
				    cudaStream_t stream);

/*
 * One collective of any kind (zero-initialised: an all-reduce with a plain op).
 *   NDET_COLL_ALLREDUCE       count elements in sendbuff and recvbuff on every rank
 *   NDET_COLL_REDUCE_SCATTER  count = recvcount: sendbuff holds nranks blocks of it,
 *                             rank r gets block r of the all-reduce; in place when
 *                             recvbuff == sendbuff + r * count elements (NCCL's rule)
 *   NDET_COLL_REDUCE          only `root` gets the result; other ranks' recvbuff is
 *                             never touched (NCCL lets it be anything)
 * PreMulSum: op NDET_OP_SUM and premul set; the scalar is one element of dtype, its
 * bits in scalar_bits (host) or at device address `scalar` (read when the kernel
 * runs: CUDA-graph replays see its value then).
 */
struct ndet_engine_call {
	ndet_coll_t coll;
	const void *sendbuff;
	void *recvbuff;
	size_t count;
	ndet_dtype_t dtype;
	ndet_op_t op;
	int root;
	ndet_premul_t premul;
	uint64_t scalar_bits;
	const void *scalar;
};

/* The engine's call of a backend call (ndet_backend.h): the same fields. */
struct ndet_backend_call;
struct ndet_engine_call ndet_engine_call_of(const struct ndet_backend_call *call);

/*
 * ndet_engine_allreduce for any collective.  The kernels reduce the ranks of this
 * rank's host: with one host that is the communicator's collective; with several
 * (whose calls run through ndet_engine_hosts_stage) it is the collective over this
 * host's g ranks, nranks and the rank blocks of a reduce-scatter counted by local
 * index, a reduce's root named by its global rank and on this host.
 */
ndet_status_t ndet_engine_collective(struct ndet_engine *engine,
				     const struct ndet_engine_call *call, cudaStream_t stream);

/*
 * The plan this engine would use for `call` (for tools and tests): the plan of its
 * host's g ranks.  A reduce whose root is on another host: NDET_ERR_INVALID_ARGUMENT.
 */
ndet_status_t ndet_engine_plan_call(const struct ndet_engine *engine,
				    const struct ndet_engine_call *call, struct ndet_plan *plan);

/*
 * Where this engine's rank sits among the hosts of its communicator (struct
 * ndet_backend_hosts: H, g, its (h, l), every (h, l)'s global rank, its staging):
 * NDET_OK, or NDET_ERR_UNSUPPORTED on an engine of one host.  Valid while it lives.
 */
struct ndet_backend_hosts;
ndet_status_t ndet_engine_hosts_view(const struct ndet_engine *engine,
				     struct ndet_backend_hosts *view);

/*
 * Stage 1, 3 or 5 of chunk `chunk` of a call across hosts (doc/multihost-design.md),
 * `plan` the call's (ndet_hosts_plan_make, made by the divert layer), enqueued on
 * `stream` as one kernel.  `call` is the whole collective (a reduce-scatter's count
 * its recvcount, a reduce's root its global rank).  NDET_ERR_UNSUPPORTED on an engine
 * of one host; otherwise as ndet_engine_collective.
 */
ndet_status_t ndet_engine_hosts_stage(struct ndet_engine *engine,
				      const struct ndet_engine_call *call,
				      const struct ndet_hosts_plan *plan, int stage, uint64_t chunk,
				      cudaStream_t stream);

/*
 * Join a call's stream and the engine's stage stream (ndet_backend.h, hosts_order, has
 * the contract).  NDET_ERR_UNSUPPORTED on an engine of one host.
 */
ndet_status_t ndet_engine_hosts_order(struct ndet_engine *engine, cudaStream_t call_stream,
				      ndet_hosts_join_t join);

/*
 * ndet_engine_allreduce_all_ranks for any collective: calls[r] is rank r's (the
 * same collective, count, dtype and op everywhere).
 */
ndet_status_t ndet_engine_collective_all_ranks(struct ndet_engine *const *engines, int nranks,
					       const struct ndet_engine_call *calls,
					       ndet_all_ranks_launcher_fn launch,
					       cudaStream_t stream);

/*
 * The arguments of one all-ranks collective, without running it (a measurement:
 * ndet_gpu_test one-launch-time): rank r's kernel arguments into args[r], and the
 * launcher's `blocks` and `what` (the kernel-table op).  The kernels keep their step
 * counters on the device, so one set serves every later launch of the same call, as
 * a CUDA graph replays one.
 */
ndet_status_t ndet_engine_all_ranks_args(struct ndet_engine *const *engines, int nranks,
					 const struct ndet_engine_call *calls,
					 struct ndet_kernel_args *args, uint32_t *blocks,
					 int *what);

/*
 * ndet_engine_hosts_stage for every rank of this process in one launch (grid.y =
 * rank, up to 8 ranks), for compute-sanitizer: calls[r] is rank r's (one collective),
 * `plan` every rank's (the same parameters give every rank the same plan).  `launch`
 * is ndet_kernel_hosts_stage_all_ranks (ndet_kernels.h).  Every engine must be idle
 * (nothing of it still running on another stream) and on the current device: the
 * launch is not ordered after their last launches.  Returns once the stage ran.
 */
ndet_status_t ndet_engine_hosts_stage_all_ranks(struct ndet_engine *const *engines, int nranks,
						const struct ndet_engine_call *calls,
						const struct ndet_hosts_plan *plan, int stage,
						uint64_t chunk,
						ndet_hosts_all_ranks_launcher_fn launch,
						cudaStream_t stream);

/*
 * All ranks of this process in one launch (grid.y = rank), for compute-sanitizer.
 * Every engine must live in this process on the same device.  `launch` is
 * ndet_kernel_allreduce_all_ranks (ndet_kernels.h), which only the GPU test driver
 * links: the library does not carry the all-ranks kernels.
 */
ndet_status_t ndet_engine_allreduce_all_ranks(struct ndet_engine *const *engines, int nranks,
					      const void *const *sendbuffs, void *const *recvbuffs,
					      size_t count, ndet_dtype_t dtype, ndet_op_t op,
					      ndet_all_ranks_launcher_fn launch,
					      cudaStream_t stream);

/*
 * nccl-det-perf --trace: later launches write the timelines of their first and last
 * block into `device_words` (2 x NDET_TRACE_WORDS uint64_t of device memory on the
 * engine's GPU; ndet_kernels.h); NULL stops it.  The caller keeps the memory alive
 * until every such launch has finished.
 */
void ndet_engine_set_trace(struct ndet_engine *engine, uint64_t *device_words);

/* The plan this engine would use (for tools and tests). */
ndet_status_t ndet_engine_plan(const struct ndet_engine *engine, size_t count, ndet_dtype_t dtype,
			       ndet_op_t op, struct ndet_plan *plan);

/* ndet_engine_plan_call from a configuration alone (no engine: nccl-det-perf --dry-run). */
ndet_status_t ndet_engine_plan_call_for_config(const struct ndet_engine_config *config,
					       const struct ndet_engine_call *call,
					       struct ndet_plan *plan);

/*
 * The plan an engine created with `config` would use, without creating one (no CUDA
 * call): for tools that plan before, or without, a GPU.
 */
ndet_status_t ndet_engine_plan_for_config(const struct ndet_engine_config *config, size_t count,
					  ndet_dtype_t dtype, ndet_op_t op, struct ndet_plan *plan);

/*
 * The engine's asynchronous error, without any CUDA call: NDET_OK, or
 * NDET_ERR_REMOTE once a kernel reported a timeout, abort, divergence or peer
 * failure, or (across hosts) a stage of NCCL's made no progress for
 * NCCL_DET_TIMEOUT (NDET_KERNEL_ERR_STALLED: struct ndet_hosts_stall, which each
 * call of this function observes), or a launch of this rank failed while its peers
 * went on (NDET_KERNEL_ERR_LAUNCH: its peers were told).  `kernel_error` (may be
 * NULL) gets the ndet_kernel_error_t.
 */
ndet_status_t ndet_engine_error(struct ndet_engine *engine, uint32_t *kernel_error);

/*
 * Where the first kernel error was seen, for diagnostics (no CUDA call): the block,
 * the peer waited for, the step, the flag value last read and the wait (1 done,
 * 2 ready, 3 reduced).  Returns false, outputs untouched, when there is no error or
 * its details are not published complete (struct ndet_host_status, ndet_types.h).
 */
bool ndet_engine_error_details(const struct ndet_engine *engine, uint32_t *block, uint32_t *peer,
			       uint64_t *step, uint64_t *observed, uint32_t *phase);

/*
 * The first kernel error in one line for a log (no CUDA call): what failed, and where
 * its details are published, which block waited for which peer's flag of which step
 * and what it last saw.  Writes at most size bytes, NUL-terminated; returns the
 * length written, 0 (and "") when there is no error.
 */
size_t ndet_engine_error_describe(const struct ndet_engine *engine, char *text, size_t size);

/*
 * Ask running and future kernels to leave (ncclCommAbort/Revoke).  No CUDA call.
 * Any thread, any time until ndet_engine_release(): a teardown waiting in
 * ndet_engine_quiesce_group() then returns within NDET_TEARDOWN_GRACE_MS.
 */
void ndet_engine_abort(struct ndet_engine *engine);

/*
 * A call this rank will not launch while its peers launch theirs (struct
 * ndet_backend, fail_call): the abort word of every rank of this host says so, on
 * `stream` (the engine's setup stream where that fails and no capture is open), and
 * the engine aborts.  Best effort; once per engine, as a failed launch's.
 */
void ndet_engine_fail_call(struct ndet_engine *engine, cudaStream_t stream);

/*
 * Teardown, phase one (ndet_teardown.h), for `count` engines in lockstep (one
 * thread may drive several ranks): wait for each engine's kernels, bounded (an
 * abort from another thread cuts the wait short), close its mappings of peers' pools
 * if they finished, and with `barrier` meet every peer in one more exchange
 * (collective) to learn whether every rank is idle and closed.  The engines stay
 * valid: ndet_engine_abort() may still be called.  Returns the exchange's status.
 */
ndet_status_t ndet_engine_quiesce_group(struct ndet_engine *const engines[], int count,
					bool barrier);

/*
 * Phase two: free what no kernel and no peer can use any more, keep the rest (until
 * this process's other ranks of the communicator are released, until every peer in
 * another process has let go of the pool or ended (polled here for up to
 * NDET_TEARDOWN_DETACH_WAIT_MS, then at later teardowns and at exit), or
 * until exit when a kernel of ours did not leave: counted in ndet_resources, logged
 * once).  No device-synchronising call for memory that is kept.  The engine is gone
 * afterwards.  Without a phase one before, the engine counts as busy: its memory is
 * kept.
 */
void ndet_engine_release(struct ndet_engine *engine);

/*
 * The library's exit handler, before the CUDA runtime's own: one last look at the
 * pools still waiting for peers in other processes (ndet_teardown_at_exit), with
 * the caller's device restored; no CUDA call when none waits, nothing once the
 * runtime is unloading.
 */
void ndet_engine_at_exit(void);

/*
 * Tests: where rank `writer`'s detach word lies in the engine's own pool (device
 * memory; the slot of writer's local index), and the epoch of its setup.  false
 * before the pool exists, or when `writer` is not a rank of this host.
 */
bool ndet_engine_detach_slot_for_testing(const struct ndet_engine *engine, int writer,
					 uint64_t **slot, uint64_t *epoch);

/* Tests: the host-mapped status the kernels report errors into (host view). */
struct ndet_host_status *ndet_engine_host_status_for_testing(struct ndet_engine *engine);

/* Both phases, for one engine or several in lockstep (every engine is released). */
ndet_status_t ndet_engine_destroy(struct ndet_engine *engine, bool barrier);
ndet_status_t ndet_engine_destroy_group(struct ndet_engine *const engines[], int count,
					bool barrier);

/*
 * Do two ranks of the engine's communicator live in one process (agreed table: the
 * same answer on every rank)?  One thread may then drive several of its ranks one
 * after another, and a destroy barrier among them would wait forever: the caller
 * must not ask for one unless it knows each rank has a thread of its own.
 */
bool ndet_engine_ranks_share_process(const struct ndet_engine *engine);

#ifdef __cplusplus
}
#endif

#endif /* NDET_ENGINE_H_ */
