/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Launches (see ndet_engine.h): the plan of a call, the kernel arguments, the
 * order of calls on one engine across streams and CUDA graph captures, and the
 * launch itself, for one rank or (tests) for every rank of a process at once.
 */
#include "config.h"

#include "engine/ndet_engine.h"
#include "engine/ndet_engine_internal.h"

#include <stdlib.h>
#include <string.h>

#include "engine/ndet_cuda.h"
#include "kernels/ndet_kernels.h"
#include "common/ndet_log.h"
#include "protocol/ndet_pool_layout.h"
#include "common/ndet_dtype.h"
#include "protocol/ndet_backend.h"
#include "protocol/ndet_hosts_plan.h"

/* ---------------------------------------------------------------- launch */

ndet_status_t ndet_engine_plan_for_config(const struct ndet_engine_config *config, size_t count,
					  ndet_dtype_t dtype, ndet_op_t op, struct ndet_plan *plan)
{
	const struct ndet_engine_call call = {.count = count, .dtype = dtype, .op = op};
	return ndet_engine_plan_call_for_config(config, &call, plan);
}

/*
 * `call` as the kernels of this host see it: a reduce's root by its local index.  A
 * root on another host has none: the kernels reduce this host's ranks only, so such
 * a reduce is not theirs to run (NDET_ERR_INVALID_ARGUMENT; no multi-host
 * communicator diverts yet).  With one host, the call itself.
 */
static ndet_status_t ndet_engine_local_call(const struct ndet_engine *engine,
					    const struct ndet_engine_call *call,
					    struct ndet_engine_call *local)
{
	*local = *call;
	if (call->coll != NDET_COLL_REDUCE)
		return NDET_OK;
	local->root = ndet_engine_local_index(engine, call->root);
	return local->root >= 0 ? NDET_OK : NDET_ERR_INVALID_ARGUMENT;
}

/* The plan of the kernels of this host: g ranks (ndet_engine.local_config). */
ndet_status_t ndet_engine_plan_call(const struct ndet_engine *engine,
				    const struct ndet_engine_call *call, struct ndet_plan *plan)
{
	struct ndet_engine_call local;
	ndet_status_t status = ndet_engine_local_call(engine, call, &local);
	if (status != NDET_OK)
		return status;
	return ndet_engine_plan_call_for_config(&engine->local_config, &local, plan);
}

ndet_status_t ndet_engine_plan_call_for_config(const struct ndet_engine_config *config,
					       const struct ndet_engine_call *call,
					       struct ndet_plan *plan)
{
	if (config->max_blocks < 1)
		return NDET_ERR_INVALID_ARGUMENT;
	struct ndet_plan_params params = {
		.count = call->count,
		.dtype = call->dtype,
		.op = call->op,
		.nranks = config->nranks,
		.coll = call->coll,
		.root = call->root,
		.premul = call->premul != NDET_PREMUL_NONE,
		.oneshot_max = config->oneshot_max,
		.ll_max = config->ll_max,
		.ll_wide_min = config->ll_wide_min,
		.push_min = config->push_min,
		.max_blocks = config->max_blocks,
		.ranks_per_device = config->ranks_per_device,
		.device_sms = config->device_sms,
		.processes_per_device = config->processes_per_device,
		.lane_bytes = ndet_pool_lane_bytes(config),
	};
	return ndet_plan_make(&params, plan);
}

void ndet_engine_set_trace(struct ndet_engine *engine, uint64_t *device_words)
{
	engine->trace = device_words;
}

ndet_status_t ndet_engine_plan(const struct ndet_engine *engine, size_t count, ndet_dtype_t dtype,
			       ndet_op_t op, struct ndet_plan *plan)
{
	return ndet_engine_plan_for_config(&engine->local_config, count, dtype, op, plan);
}

/*
 * The kernel arguments: rank and nranks are the local index and g, flags and lanes
 * those of this host's ranks in local order (doc/protocol.md, "The engine's local
 * view"); slots from g on stay NULL.  `call` is the local call (ndet_engine_local_call).
 */
static void ndet_engine_fill_args(const struct ndet_engine *engine, const struct ndet_plan *plan,
				  const struct ndet_engine_call *call,
				  struct ndet_kernel_args *args)
{
	memset(args, 0, sizeof(*args));
	args->sendbuff = call->sendbuff;
	args->recvbuff = call->recvbuff;
	args->count = call->count;
	args->chunk_elems = plan->chunk_elems;
	args->ll_line = plan->ll_line;
	args->steps = plan->steps;
	args->lane_bytes = engine->lane_bytes;
	args->ll_offset = engine->ll_offset;
	args->timeout_ns = engine->config.timeout_ms * 1000000ull;
	args->dtype = (int32_t)call->dtype;
	args->op = (int32_t)call->op;
	args->path = (int32_t)plan->path;
	args->nranks = engine->local.count;
	args->rank = engine->local.index;
	args->blocks = plan->blocks;
	args->signature = plan->signature;
	args->debug_delay_ns = engine->config.debug_delay_ns;
	args->root = call->coll == NDET_COLL_REDUCE ? call->root : -1;
	args->premul = (int32_t)call->premul;
	args->scalar_bits = call->scalar_bits;
	args->scalar = call->scalar;
	args->step_counters = engine->step_counters;
	args->trace = engine->trace;
	args->host_status = engine->host_status_dev;
	for (int l = 0; l < engine->local.count; l++) {
		args->flags[l] = engine->peer_flags[l];
		args->lanes[l] = engine->peer_lanes[l];
	}
}

/* 0 when `stream` is not being captured, else the id of its capture. */
static cudaError_t ndet_engine_capture_id(cudaStream_t stream, unsigned long long *id)
{
	enum cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
	unsigned long long capture = 0;
#if CUDART_VERSION >= 13000
	cudaError_t err =
		cudaStreamGetCaptureInfo(stream, &status, &capture, NULL, NULL, NULL, NULL);
#elif CUDART_VERSION >= 12000
	cudaError_t err = cudaStreamGetCaptureInfo(stream, &status, &capture, NULL, NULL, NULL);
#else
	cudaError_t err = cudaStreamGetCaptureInfo(stream, &status, &capture);
#endif
	if (err != cudaSuccess)
		return err;
	*id = status == cudaStreamCaptureStatusNone ? 0 : (capture != 0 ? capture : ~0ull);
	return cudaSuccess;
}

/*
 * The process-wide id of the stream a handle names now, for an eager launch (0: not
 * known).  One handle may name several streams: cudaStreamPerThread is another stream
 * in each thread, and the address of a destroyed stream may be handed out again.  In
 * a capture (`capture` != 0) the handle alone tells, and CUDA is not asked:
 * cudaStreamGetId on a capturing stream invalidates its capture, and a capturing
 * stream cannot be destroyed.
 */
#define NDET_ENGINE_STREAM_ID_CAPTURED (~0ull)

static unsigned long long ndet_engine_stream_id(cudaStream_t stream, unsigned long long capture)
{
	unsigned long long id = 0;
	if (capture != 0)
		return NDET_ENGINE_STREAM_ID_CAPTURED;
#if CUDART_VERSION >= 12000
	if (cudaStreamGetId(stream, &id) != cudaSuccess) {
		(void)cudaGetLastError();
		id = 0;
	}
#else
	(void)stream;
#endif
	return id;
}

/*
 * Calls on one engine must run in issue order even when issued on different streams
 * (their kernels share step counters and lanes): before a launch on another stream
 * than the previous one of its kind (another handle, or the same handle naming
 * another stream: ndet_engine_stream_id), that stream waits for the event recorded
 * right after that launch (on its stream, at its launch: that stream may be gone by
 * now, and only the event is used).  Eager calls wait for eager calls; calls in one
 * capture wait for earlier calls of the same capture (the wait becomes an edge of
 * the graph).  Between an eager call and a captured one no edge can exist: the graph
 * runs whenever it is launched, and the application orders its launch (as it must
 * with NCCL: torch.cuda.graph synchronises before capturing, and replays on one
 * stream).
 */
static ndet_status_t ndet_engine_order(struct ndet_engine *engine, cudaStream_t stream,
				       unsigned long long stream_id, unsigned long long capture)
{
	ndet_status_t status = NDET_OK;
	const struct ndet_engine_last *last = capture == 0 ? &engine->eager : &engine->captured;
	const bool same_stream =
		last->stream == stream && stream_id != 0 && last->stream_id == stream_id;
	if (last->valid && last->capture == capture && !same_stream)
		NDET_CUDA_CHECK_GOTO(cudaStreamWaitEvent(stream, last->event, 0), status, out);
	if (engine->has_last_launch && engine->last_capture != capture &&
	    __atomic_exchange_n(&engine->order_warned, 1, __ATOMIC_RELAXED) == 0)
		NDET_INFO(NDET_SUBSYS_COLL,
			  "rank %d: an all-reduce on stream %p follows one in another CUDA graph "
			  "capture (or one eager and one captured): their order is the "
			  "application's (launch the graph after the eager work)",
			  engine->config.rank, (void *)stream);
out:
	return status;
}

/* Right after a launch on `stream`: what the next launch and teardown wait for. */
static ndet_status_t ndet_engine_launched(struct ndet_engine *engine, cudaStream_t stream,
					  unsigned long long stream_id, unsigned long long capture)
{
	ndet_status_t status = NDET_OK;
	struct ndet_engine_last *last = capture == 0 ? &engine->eager : &engine->captured;
	NDET_CUDA_CHECK_GOTO(cudaEventRecord(last->event, stream), status, out);
	last->stream = stream;
	last->stream_id = stream_id;
	last->capture = capture;
	last->valid = true;
	engine->last_capture = capture;
	engine->has_last_launch = true;
out:
	return status;
}

ndet_status_t ndet_engine_allreduce(struct ndet_engine *engine, const void *sendbuff,
				    void *recvbuff, size_t count, ndet_dtype_t dtype, ndet_op_t op,
				    cudaStream_t stream)
{
	const struct ndet_engine_call call = {.sendbuff = sendbuff,
					      .recvbuff = recvbuff,
					      .count = count,
					      .dtype = dtype,
					      .op = op};
	return ndet_engine_collective(engine, &call, stream);
}

/*
 * One rank: recvbuff = its block of sendbuff (block 0: the whole buffer of an
 * all-reduce or a reduce, the one block of a reduce-scatter).  An in-place call never
 * gets here (ndet_engine_enqueue).
 */
static ndet_status_t ndet_engine_copy(const struct ndet_engine_call *call, cudaStream_t stream)
{
	ndet_status_t status = NDET_OK;
	NDET_CUDA_CHECK_GOTO(cudaMemcpyAsync(call->recvbuff, call->sendbuff,
					     call->count * ndet_dtype_size(call->dtype),
					     cudaMemcpyDeviceToDevice, stream),
			     status, out);
out:
	return status;
}

/*
 * A launch or a join that failed on this rank while its peers go on: as a failing
 * kernel does (ndet_fail), the abort word of every rank of this host says so (1 +
 * rank, one 8-byte copy each from the host status, which a capture takes too), so
 * that the local peers leave instead of waiting for NCCL_DET_TIMEOUT and the status
 * word this rank sends with its next NCCL stage fails its peers on other hosts; its
 * kernels leave, and later calls fail at once (the engine's step counters no longer
 * match its peers'); and the copies count as the engine's last launch, for its
 * teardown to wait for.  Once per engine: an abort is for good.
 */
static void ndet_engine_poison(struct ndet_engine *engine, cudaStream_t call_stream,
			       unsigned long long call_capture)
{
	if (__atomic_exchange_n(&engine->poisoned, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	/*
	 * On the call's stream; where that fails (the stream is what failed), on ours,
	 * unless in a capture (ours is not part of it).
	 */
	const void *poison = (const void *)&engine->host_status->poison_word;
	for (int l = 0; l < engine->local.count; l++) {
		uint64_t *word =
			engine->peer_flags[l] != NULL ? &engine->peer_flags[l]->abort_word : NULL;
		for (int attempt = 0; word != NULL && attempt < (call_capture != 0 ? 1 : 2);
		     attempt++) {
			if (cudaMemcpyAsync(word, poison, sizeof(uint64_t), cudaMemcpyHostToDevice,
					    attempt == 0 ? call_stream : engine->setup_stream) ==
			    cudaSuccess)
				break;
			(void)cudaGetLastError();
		}
	}
	/*
	 * The stream's id is not asked for (0: unknown, so the next launch waits for the
	 * copies' event whatever its stream): the stream may be what failed.
	 */
	if (ndet_engine_launched(engine, call_stream, 0, call_capture) != NDET_OK)
		(void)cudaGetLastError();
	ndet_engine_abort(engine);
}

void ndet_engine_fail_call(struct ndet_engine *engine, cudaStream_t stream)
{
	int saved_device = -1;
	if (cudaGetDevice(&saved_device) != cudaSuccess)
		saved_device = -1;
	if (saved_device != engine->config.cuda_device &&
	    cudaSetDevice(engine->config.cuda_device) != cudaSuccess) {
		(void)cudaGetLastError();
		ndet_engine_abort(engine);
		return;
	}
	unsigned long long capture = 0;
	if (ndet_engine_capture_id(stream, &capture) != cudaSuccess) {
		(void)cudaGetLastError();
		capture = 0;
	}
	ndet_engine_poison(engine, stream, capture);
	if (saved_device >= 0 && saved_device != engine->config.cuda_device)
		NDET_CUDA_CHECK_WARN(cudaSetDevice(saved_device));
}

/* What one launch enqueues: a kernel of one host, a stage across hosts, or a copy. */
struct ndet_engine_work {
	const struct ndet_engine_call *call; /* the copy's (one rank) */
	bool kernel, stage;
	struct ndet_kernel_args args;
	struct ndet_hosts_args stage_args;
};

/*
 * Enqueue `work` on `stream` on the engine's device (the caller's device given back),
 * behind the engine's previous launch of the same kind (ndet_engine_order), and note it
 * as the last one; a one-rank copy without either, and in place nothing.  Where an
 * eager call fails on its way to the GPU, the engine is poisoned (ndet_engine_poison):
 * its peers' kernels of this call would otherwise wait for it, and the next call of
 * the same shape would pass for this one.  A capture that fails never runs (CUDA
 * invalidates it): nothing is poisoned for it.
 */
static ndet_status_t ndet_engine_enqueue(struct ndet_engine *engine, cudaStream_t stream,
					 const struct ndet_engine_work *work)
{
	ndet_status_t status = NDET_OK;
	int saved_device = -1;
	unsigned long long capture = 0;
	const bool copy = !work->stage && !work->kernel;
	if (copy && work->call->sendbuff == work->call->recvbuff)
		return NDET_OK;
	NDET_CUDA_CHECK_GOTO(cudaGetDevice(&saved_device), status, unreached);
	if (saved_device != engine->config.cuda_device)
		NDET_CUDA_CHECK_GOTO(cudaSetDevice(engine->config.cuda_device), status, unreached);
	if (copy) {
		/*
		 * A copy touches no pool and no flag of the engine: it waits for no launch
		 * of the engine's and is none that a later one must wait for
		 * (ndet_engine_order), so a one-rank call costs its copy alone, as in NCCL.
		 * Its capture is asked for only where it fails.
		 */
		status = ndet_engine_copy(work->call, stream);
		if (status != NDET_OK && ndet_engine_capture_id(stream, &capture) != cudaSuccess) {
			(void)cudaGetLastError();
			capture = 0;
		}
		goto failed;
	}
	NDET_CUDA_CHECK_GOTO(ndet_engine_capture_id(stream, &capture), status, failed);
	const unsigned long long stream_id = ndet_engine_stream_id(stream, capture);
	status = ndet_engine_order(engine, stream, stream_id, capture);
	if (status != NDET_OK)
		goto failed;
	if (work->stage)
		NDET_CUDA_CHECK_GOTO(
			(cudaError_t)ndet_kernel_hosts_stage(&work->stage_args, stream), status,
			failed);
	else
		NDET_CUDA_CHECK_GOTO((cudaError_t)ndet_kernel_allreduce(&work->args, stream),
				     status, failed);
	if (status == NDET_OK)
		status = ndet_engine_launched(engine, stream, stream_id, capture);
failed:
	if (status != NDET_OK && capture == 0)
		ndet_engine_poison(engine, stream, capture);
out:
	if (saved_device >= 0 && saved_device != engine->config.cuda_device)
		NDET_CUDA_CHECK_WARN(cudaSetDevice(saved_device));
	return status;
unreached:
	/*
	 * The engine's device cannot even be made current (a context already broken):
	 * nothing can be stored into the peers, but this rank's later calls must not
	 * pair with their calls of this one.
	 */
	__atomic_store_n(&engine->poisoned, 1, __ATOMIC_RELEASE);
	ndet_engine_abort(engine);
	goto out;
}

ndet_status_t ndet_engine_collective(struct ndet_engine *engine,
				     const struct ndet_engine_call *call, cudaStream_t stream)
{
	ndet_status_t status = ndet_engine_error(engine, NULL);
	if (status != NDET_OK)
		return status;
	struct ndet_plan plan;
	status = ndet_engine_plan_call(engine, call, &plan);
	if (status != NDET_OK)
		return status;
	if (plan.path == NDET_PATH_NONE)
		return NDET_OK;
	/* Per call, like NCCL's own COLL lines: which protocol and grid the plan chose. */
	NDET_INFO(NDET_SUBSYS_COLL, "rank %d: %s count %zu %s %s%s: %s, %u blocks x %llu steps",
		  engine->config.rank,
		  call->coll == NDET_COLL_REDUCE_SCATTER ? "reduce-scatter"
		  : call->coll == NDET_COLL_REDUCE       ? "reduce"
							 : "all-reduce",
		  call->count, ndet_dtype_name(call->dtype), ndet_op_name(call->op),
		  call->premul != NDET_PREMUL_NONE ? " (PreMulSum)" : "",
		  ndet_plan_path_name(plan.path), plan.blocks, (unsigned long long)plan.steps);

	struct ndet_engine_work work = {.call = call};
	if (plan.path != NDET_PATH_COPY) {
		struct ndet_engine_call local;
		(void)ndet_engine_local_call(engine, call, &local); /* the plan checked it */
		ndet_engine_fill_args(engine, &plan, &local, &work.args);
		work.kernel = true;
	}
	return ndet_engine_enqueue(engine, stream, &work);
}

/* The kernel arguments of one stage of a call across hosts (ndet_abi.h). */
static ndet_status_t ndet_engine_hosts_args(const struct ndet_engine *engine,
					    const struct ndet_engine_call *call,
					    const struct ndet_hosts_plan *plan,
					    const struct ndet_hosts_chunk *chunk,
					    ndet_hosts_stage_t stage, struct ndet_hosts_args *args)
{
	const struct ndet_hosts_call_key key = {.dtype = call->dtype,
						.op = call->op,
						.coll = call->coll,
						.root = call->root,
						.premul = call->premul != NDET_PREMUL_NONE};
	struct ndet_hosts_launch launch;
	ndet_status_t status =
		ndet_hosts_launch_make(plan, chunk, &key, stage, engine->lane_bytes,
				       (uint32_t)ndet_pool_lanes(&engine->local_config), &launch);
	if (status != NDET_OK)
		return status;
	const struct ndet_plan kernel_plan = {
		.path = NDET_PATH_SCATTER, .blocks = launch.blocks, .signature = launch.signature};
	/* Flags and lanes of this host's ranks; the global call (no local root). */
	memset(args, 0, sizeof(*args));
	ndet_engine_fill_args(engine, &kernel_plan, call, &args->k);
	args->k.count = plan->params.count;
	args->k.root = -1;
	args->k.trace = NULL;
	args->stage = (int32_t)stage;
	args->nhosts = engine->local.nhosts;
	args->host = engine->host;
	args->partial_size = plan->params.shape.partial_size;
	args->chunk_offset = chunk->elems.offset;
	args->chunk_len = chunk->elems.count;
	args->block_elems = chunk->block_elems;
	args->piece_elems = launch.piece_elems;
	char *slot = (char *)engine->staging + chunk->slot_offset;
	args->partial = slot + plan->slot.partial_offset;
	args->received = slot + plan->slot.received_offset;
	args->received_stride = plan->slot.received_stride;
	args->result = slot + plan->slot.result_offset;
	/* What came with the NCCL stage before this one: the peer hosts' status words. */
	if (stage == NDET_HOSTS_STAGE_REDUCE || stage == NDET_HOSTS_STAGE_GATHER)
		args->peer_status =
			(const uint64_t *)(slot +
					   ndet_hosts_status_at(plan,
								stage == NDET_HOSTS_STAGE_REDUCE
									? NDET_HOSTS_STAGE_PARTIALS
									: NDET_HOSTS_STAGE_RESULTS,
								0));
	args->divisor = (uint32_t)(engine->local.count * engine->local.nhosts);
	/* Every kernel but the call's last one has a stage of NCCL's after it. */
	args->nccl_follows =
		stage == NDET_HOSTS_STAGE_GATHER && chunk->index + 1 == plan->chunks ? 0u : 1u;
	args->where = ndet_hosts_where(stage, chunk->index, plan->chunks);
	/* Stage 5 writes: the whole message, this rank's block, or (reduce) the root only. */
	if (call->coll == NDET_COLL_REDUCE_SCATTER) {
		args->out_begin = (uint64_t)engine->config.rank * call->count;
		args->out_end = args->out_begin + call->count;
	} else if (call->coll != NDET_COLL_REDUCE || call->root == engine->config.rank) {
		args->out_end = plan->params.count;
	}
	return NDET_OK;
}

bool ndet_engine_spans_hosts(const struct ndet_engine *engine)
{
	return engine->local.nhosts > 1 && engine->staging != NULL && engine->host_ranks != NULL;
}

ndet_status_t ndet_engine_hosts_view(const struct ndet_engine *engine,
				     struct ndet_backend_hosts *view)
{
	if (!ndet_engine_spans_hosts(engine))
		return NDET_ERR_UNSUPPORTED;
	view->transfers = engine->host_transfers;
	view->nhosts = engine->local.nhosts;
	view->local_ranks = engine->local.count;
	view->host = engine->host;
	view->local = engine->local.index;
	view->ranks = engine->host_ranks;
	view->staging_bytes = engine->config.hosts_staging;
	view->staging = engine->staging;
	/* NCCL may still write into an abandoned exchange's buffer: never lend it. */
	view->connect_buffer =
		engine->exchange_abandoned ||
				engine->exchange_bytes < NDET_HOSTS_CONNECT_BYTES(view->nhosts)
			? NULL
			: engine->exchange_buffer;
	view->connect_stream = engine->setup_stream;
	view->stage_stream = engine->stage_stream;
	view->status_word = &((struct ndet_flags *)engine->pool)->abort_word;
	return NDET_OK;
}

/* Record `event` on `from`, and make `to` wait for it. */
static cudaError_t ndet_engine_join(cudaEvent_t event, cudaStream_t from, cudaStream_t to)
{
	cudaError_t err = cudaEventRecord(event, from);
	return err == cudaSuccess ? cudaStreamWaitEvent(to, event, 0) : err;
}

ndet_status_t ndet_engine_hosts_order(struct ndet_engine *engine, cudaStream_t call_stream,
				      ndet_hosts_join_t join)
{
	if (!ndet_engine_spans_hosts(engine) || engine->stage_stream == NULL)
		return NDET_ERR_UNSUPPORTED;
	ndet_status_t status = NDET_OK;
	cudaError_t err = cudaSuccess;
	int saved_device = -1;
	unsigned long long call_capture = 0, stage_capture = 0;
	NDET_CUDA_CHECK_GOTO(cudaGetDevice(&saved_device), status, out);
	if (saved_device != engine->config.cuda_device)
		NDET_CUDA_CHECK_GOTO(cudaSetDevice(engine->config.cuda_device), status, out);
	/* Every join: a failed one poisons the engine, eagerly or in the capture. */
	NDET_CUDA_CHECK_GOTO(ndet_engine_capture_id(call_stream, &call_capture), status, out);
	if (join == NDET_HOSTS_JOIN_BEGIN) {
		/*
		 * Still in a capture (one that is open) other than the call's, or in one
		 * whose id CUDA does not give: not ours now.
		 */
		NDET_CUDA_CHECK_GOTO(ndet_engine_capture_id(engine->stage_stream, &stage_capture),
				     status, out);
		if (stage_capture != 0 &&
		    (stage_capture != call_capture || stage_capture == ~0ull)) {
			status = NDET_ERR_UNSUPPORTED;
			goto out;
		}
	}
	/* Recorded and waited for at once: the wait takes the record it follows. */
	const bool to_stages = join == NDET_HOSTS_JOIN_BEGIN || join == NDET_HOSTS_JOIN_TO_STAGES;
	err = ndet_engine_join(engine->order_events[to_stages ? 0 : 1],
			       to_stages ? call_stream : engine->stage_stream,
			       to_stages ? engine->stage_stream : call_stream);
	if (err != cudaSuccess) {
		NDET_WARN("rank %d: joining the streams of a call across hosts: %s",
			  engine->config.rank, cudaGetErrorString(err));
		(void)cudaGetLastError();
		status = NDET_ERR_CUDA;
		/*
		 * A capture the application's own work already invalidated: its graph never
		 * runs, so nothing is poisoned for it (the communicator stays usable).
		 */
		if (err == cudaErrorStreamCaptureInvalidated)
			goto out;
	} else if (join == NDET_HOSTS_JOIN_END) {
		/* The call's end on its own stream: its last group and its last kernel. */
		status = ndet_engine_launched(engine, call_stream,
					      ndet_engine_stream_id(call_stream, call_capture),
					      call_capture);
	}
	if (status != NDET_OK)
		ndet_engine_poison(engine, call_stream, call_capture);
out:
	if (saved_device >= 0 && saved_device != engine->config.cuda_device)
		NDET_CUDA_CHECK_WARN(cudaSetDevice(saved_device));
	return status;
}

ndet_status_t ndet_engine_hosts_stage(struct ndet_engine *engine,
				      const struct ndet_engine_call *call,
				      const struct ndet_hosts_plan *plan, int stage, uint64_t chunk,
				      cudaStream_t stream)
{
	if (!ndet_engine_spans_hosts(engine))
		return NDET_ERR_UNSUPPORTED;
	ndet_status_t status = ndet_engine_error(engine, NULL);
	if (status != NDET_OK)
		return status;
	if (chunk >= plan->chunks)
		return NDET_ERR_INVALID_ARGUMENT;
	const struct ndet_hosts_chunk at = ndet_hosts_chunk_at(plan, chunk);
	struct ndet_engine_work work = {.call = call, .stage = true};
	status = ndet_engine_hosts_args(engine, call, plan, &at, (ndet_hosts_stage_t)stage,
					&work.stage_args);
	if (status != NDET_OK)
		return status;
	return ndet_engine_enqueue(engine, stream, &work);
}

ndet_status_t ndet_engine_allreduce_all_ranks(struct ndet_engine *const *engines, int nranks,
					      const void *const *sendbuffs, void *const *recvbuffs,
					      size_t count, ndet_dtype_t dtype, ndet_op_t op,
					      ndet_all_ranks_launcher_fn launch,
					      cudaStream_t stream)
{
	struct ndet_engine_call calls[NDET_MAX_RANKS];
	if (nranks < 1 || nranks > NDET_MAX_RANKS)
		return NDET_ERR_INVALID_ARGUMENT;
	for (int r = 0; r < nranks; r++)
		calls[r] = (struct ndet_engine_call){.sendbuff = sendbuffs[r],
						     .recvbuff = recvbuffs[r],
						     .count = count,
						     .dtype = dtype,
						     .op = op};
	return ndet_engine_collective_all_ranks(engines, nranks, calls, launch, stream);
}

/*
 * One all-ranks launch: the ranks' argument blocks (`bytes` at `host_args`) copied to
 * the device, the kernel launched (the collective's launcher, or else the stage's),
 * and waited for.
 */
struct ndet_engine_all_ranks_launch {
	ndet_all_ranks_launcher_fn collective;
	ndet_hosts_all_ranks_launcher_fn stage;
	int dtype, what; /* the kernel-table op, or the stage */
	int nranks;
	uint32_t blocks;
};

static ndet_status_t ndet_engine_run_all_ranks(const void *host_args, size_t bytes,
					       const struct ndet_engine_all_ranks_launch *l,
					       cudaStream_t stream)
{
	ndet_status_t status = NDET_OK;
	void *device_args = NULL;
	NDET_CUDA_CHECK_GOTO(ndet_engine_malloc(&device_args, bytes), status, out);
	NDET_CUDA_CHECK_GOTO(cudaMemcpy(device_args, host_args, bytes, cudaMemcpyHostToDevice),
			     status, out);
	const cudaError_t err = l->collective != NULL
					? (cudaError_t)l->collective(device_args, l->dtype, l->what,
								     l->nranks, l->blocks, stream)
					: (cudaError_t)l->stage(device_args, l->dtype, l->what,
								l->nranks, l->blocks, stream);
	NDET_CUDA_CHECK_GOTO(err, status, out);
	NDET_CUDA_CHECK_GOTO(cudaStreamSynchronize(stream), status, out);
out:
	ndet_engine_free_memory(&device_args, bytes, false);
	return status;
}

ndet_status_t ndet_engine_all_ranks_args(struct ndet_engine *const *engines, int nranks,
					 const struct ndet_engine_call *calls,
					 struct ndet_kernel_args *args, uint32_t *blocks, int *what)
{
	struct ndet_plan plan;
	if (nranks < 1 || nranks > NDET_MAX_RANKS)
		return NDET_ERR_INVALID_ARGUMENT;
	ndet_status_t status = ndet_engine_plan_call(engines[0], &calls[0], &plan);
	if (status != NDET_OK)
		return status;
	if (plan.path != NDET_PATH_ONESHOT && plan.path != NDET_PATH_TWOSHOT &&
	    plan.path != NDET_PATH_SCATTER && plan.path != NDET_PATH_LL &&
	    plan.path != NDET_PATH_PUSH)
		return NDET_ERR_INVALID_ARGUMENT;
	for (int r = 0; r < nranks; r++) {
		struct ndet_engine_call local;
		status = ndet_engine_local_call(engines[r], &calls[r], &local);
		if (status != NDET_OK)
			return status;
		ndet_engine_fill_args(engines[r], &plan, &local, &args[r]);
	}
	*blocks = plan.blocks;
	*what = calls[0].premul != NDET_PREMUL_NONE ? NDET_KERNEL_OP_PREMULSUM : (int)calls[0].op;
	return NDET_OK;
}

ndet_status_t ndet_engine_collective_all_ranks(struct ndet_engine *const *engines, int nranks,
					       const struct ndet_engine_call *calls,
					       ndet_all_ranks_launcher_fn launch,
					       cudaStream_t stream)
{
	if (nranks < 1 || nranks > NDET_MAX_RANKS || launch == NULL)
		return NDET_ERR_INVALID_ARGUMENT;
	struct ndet_kernel_args *host_args = calloc((size_t)nranks, sizeof(*host_args));
	if (host_args == NULL)
		return NDET_ERR_SYSTEM;
	struct ndet_engine_all_ranks_launch l = {
		.collective = launch, .dtype = (int)calls[0].dtype, .nranks = nranks};
	ndet_status_t status =
		ndet_engine_all_ranks_args(engines, nranks, calls, host_args, &l.blocks, &l.what);
	if (status == NDET_OK)
		status = ndet_engine_run_all_ranks(host_args, sizeof(*host_args) * (size_t)nranks,
						   &l, stream);
	free(host_args);
	return status;
}

ndet_status_t ndet_engine_hosts_stage_all_ranks(struct ndet_engine *const *engines, int nranks,
						const struct ndet_engine_call *calls,
						const struct ndet_hosts_plan *plan, int stage,
						uint64_t chunk,
						ndet_hosts_all_ranks_launcher_fn launch,
						cudaStream_t stream)
{
	ndet_status_t status = NDET_OK;
	struct ndet_hosts_args *host_args = NULL;
	/* The one-launch kernels exist for up to 8 ranks (ndet_kernels.h). */
	if (nranks < 1 || nranks > 8 || launch == NULL || plan == NULL || chunk >= plan->chunks)
		return NDET_ERR_INVALID_ARGUMENT;
	for (int r = 0; r < nranks; r++) {
		/* One collective: the kernel comes from calls[0]. */
		if (calls[r].dtype != calls[0].dtype || calls[r].op != calls[0].op ||
		    calls[r].coll != calls[0].coll || calls[r].count != calls[0].count ||
		    calls[r].premul != calls[0].premul)
			return NDET_ERR_INVALID_ARGUMENT;
		/* A rank that failed takes no further stage, as ndet_engine_hosts_stage. */
		status = ndet_engine_error(engines[r], NULL);
		if (status != NDET_OK)
			return status;
	}
	host_args = calloc((size_t)nranks, sizeof(*host_args));
	if (host_args == NULL)
		return NDET_ERR_SYSTEM;
	const struct ndet_hosts_chunk at = ndet_hosts_chunk_at(plan, chunk);
	for (int r = 0; r < nranks && status == NDET_OK; r++) {
		if (!ndet_engine_spans_hosts(engines[r]))
			status = NDET_ERR_UNSUPPORTED;
		else
			status = ndet_engine_hosts_args(engines[r], &calls[r], plan, &at,
							(ndet_hosts_stage_t)stage, &host_args[r]);
		/* One grid for every rank: the same plan gives every rank the same. */
		if (status == NDET_OK && host_args[r].k.blocks != host_args[0].k.blocks)
			status = NDET_ERR_INVALID_ARGUMENT;
		if (status == NDET_OK && ndet_hosts_args_kernel(&host_args[r]) < 0)
			status = NDET_ERR_INVALID_ARGUMENT;
	}
	if (status == NDET_OK) {
		const struct ndet_engine_all_ranks_launch l = {.stage = launch,
							       .dtype = (int)calls[0].dtype,
							       .what = stage,
							       .nranks = nranks,
							       .blocks = host_args[0].k.blocks};
		status = ndet_engine_run_all_ranks(host_args, sizeof(*host_args) * (size_t)nranks,
						   &l, stream);
	}
	free(host_args);
	return status;
}
