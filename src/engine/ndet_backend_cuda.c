/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The CUDA engine as a backend (see ndet_backend.h).
 */
#include "config.h"

#include "protocol/ndet_backend.h"
#include "engine/ndet_engine.h"

#include <pthread.h>
#include <stdlib.h>

#include "engine/ndet_cuda.h"
#include "engine/ndet_engine_internal.h"
#include "common/ndet_log.h"
#include "protocol/ndet_pool_layout.h"

static pthread_once_t ndet_backend_cuda_once = PTHREAD_ONCE_INIT;
static bool ndet_backend_cuda_usable_result;

/*
 * Whether our CUDA runtime starts at all, asked once per process.  Without a driver
 * (or with one older than the runtime nccl-det was built with) no CUDA call of ours
 * can succeed, and the exchange buffers cannot even be allocated.
 */
static void ndet_backend_cuda_probe(void)
{
	int devices = 0;
	cudaError_t err = cudaGetDeviceCount(&devices);
	if (err == cudaSuccess && devices > 0) {
		ndet_backend_cuda_usable_result = true;
		return;
	}
	(void)cudaGetLastError();
	NDET_WARN("the CUDA runtime of nccl-det cannot start (%s): every call goes to NCCL. Fix: "
		  "install a driver that supports CUDA %d.%d, or set NCCL_DET_ENABLE=0 on "
		  "every rank",
		  err == cudaSuccess ? "no device" : cudaGetErrorString(err), CUDART_VERSION / 1000,
		  (CUDART_VERSION % 1000) / 10);
}

static void ndet_backend_cuda_create_group(struct ndet_backend_member *members, int count,
					   ndet_engine_exchange_fn exchange)
{
	struct ndet_engine_member *engines =
		calloc((size_t)(count > 0 ? count : 1), sizeof(*engines));
	(void)pthread_once(&ndet_backend_cuda_once, ndet_backend_cuda_probe);
	for (int i = 0; i < count; i++) {
		members[i].engine = NULL;
		members[i].agreed_flags = 0;
		members[i].verdict.reason = NDET_VERDICT_OK;
		members[i].verdict.offending_rank = -1;
		members[i].verdict.detail = 0;
		members[i].status = NDET_ERR_CUDA;
		if (engines == NULL)
			members[i].status = NDET_ERR_SYSTEM;
	}
	if (engines == NULL || !ndet_backend_cuda_usable_result)
		goto out;
	for (int i = 0; i < count; i++) {
		engines[i].config = members[i].config;
		engines[i].exchange_context = members[i].exchange_context;
	}
	ndet_engine_create_group(engines, count, exchange);
	for (int i = 0; i < count; i++) {
		members[i].engine = engines[i].engine;
		members[i].status = engines[i].status;
		members[i].verdict = engines[i].verdict;
		members[i].agreed_flags = engines[i].agreed_flags;
	}
out:
	free(engines);
}

/* A backend call as the engine takes it. */
struct ndet_engine_call ndet_engine_call_of(const struct ndet_backend_call *call)
{
	return (struct ndet_engine_call){
		.coll = call->coll,
		.sendbuff = call->sendbuff,
		.recvbuff = call->recvbuff,
		.count = call->count,
		.dtype = call->dtype,
		.op = call->op,
		.root = call->root,
		.premul = call->premul,
		.scalar_bits = call->scalar_bits,
		.scalar = call->scalar,
	};
}

static void ndet_backend_cuda_allreduce_group(struct ndet_backend_call *calls, int count)
{
	for (int i = 0; i < count; i++) {
		struct ndet_backend_call *call = &calls[i];
		const struct ndet_engine_call engine_call = ndet_engine_call_of(call);
		/*
		 * An engine of several hosts reduces only its own host's ranks: a whole
		 * call runs through the stages (hosts_stage), never here.
		 */
		const struct ndet_engine *engine = call->engine;
		call->status =
			engine->local.nhosts > 1
				? NDET_ERR_UNSUPPORTED
				: ndet_engine_collective(call->engine, &engine_call, call->stream);
	}
}

static ndet_status_t ndet_backend_cuda_error(void *engine, uint32_t *kernel_error)
{
	return ndet_engine_error(engine, kernel_error);
}

static size_t ndet_backend_cuda_describe_error(void *engine, char *text, size_t size)
{
	return ndet_engine_error_describe(engine, text, size);
}

static void ndet_backend_cuda_abort(void *engine)
{
	ndet_engine_abort(engine);
}

static void ndet_backend_cuda_fail_call(void *engine, cudaStream_t stream)
{
	ndet_engine_fail_call(engine, stream);
}

static ndet_status_t ndet_backend_cuda_quiesce_group(void *const engines[], int count, bool barrier)
{
	return ndet_engine_quiesce_group((struct ndet_engine *const *)engines, count, barrier);
}

static void ndet_backend_cuda_release(void *engine)
{
	ndet_engine_release(engine);
}

static bool ndet_backend_cuda_shares_process(void *engine)
{
	return ndet_engine_ranks_share_process(engine);
}

/*
 * NCCL's check (argcheck.cc CudaPtrCheck): the pointer has a device address, and
 * device memory lies on the communicator's device.  NCCL selects that device first;
 * so do we, and give the caller's back.  Only in NCCL's pointer-check mode.
 */
static bool ndet_backend_cuda_pointer_valid(int cuda_device, const void *pointer)
{
	struct cudaPointerAttributes attributes;
	int saved = -1;
	bool valid = false;
	if (pointer == NULL)
		return false;
	if (cuda_device >= 0 && cudaGetDevice(&saved) != cudaSuccess)
		saved = -1;
	bool switched =
		saved >= 0 && saved != cuda_device && cudaSetDevice(cuda_device) == cudaSuccess;
	if (cudaPointerGetAttributes(&attributes, pointer) == cudaSuccess)
		valid = attributes.devicePointer != NULL &&
			!(attributes.type == cudaMemoryTypeDevice && cuda_device >= 0 &&
			  attributes.device != cuda_device);
	/* Consumed here: the application must never see an error of ours. */
	(void)cudaGetLastError();
	if (switched)
		NDET_CUDA_CHECK_WARN(cudaSetDevice(saved));
	return valid;
}

static ndet_status_t ndet_backend_cuda_hosts_view(void *engine, struct ndet_backend_hosts *view)
{
	return ndet_engine_hosts_view(engine, view);
}

static void ndet_backend_cuda_hosts_stage(struct ndet_backend_call *calls, int count,
					  ndet_hosts_stage_t stage, uint64_t chunk)
{
	for (int i = 0; i < count; i++) {
		struct ndet_backend_call *call = &calls[i];
		const struct ndet_engine_call engine_call = ndet_engine_call_of(call);
		call->status = ndet_engine_hosts_stage(call->engine, &engine_call, call->hosts_plan,
						       (int)stage, chunk, call->stream);
	}
}

static ndet_status_t ndet_backend_cuda_hosts_order(void *engine, cudaStream_t call_stream,
						   ndet_hosts_join_t join)
{
	return ndet_engine_hosts_order(engine, call_stream, join);
}

/*
 * The divert layer's NCCL calls of the connections at setup, as the setup's own: on
 * the engines' private streams, in relaxed capture mode (an application capturing a
 * graph on another stream neither fails them nor gets them in its graph).
 */
static ndet_status_t ndet_backend_cuda_hosts_connect(ndet_backend_connect_fn connect, void *context)
{
	struct ndet_engine_caller caller;
	ndet_engine_caller_save(&caller);
	const ndet_status_t status = connect(context);
	ndet_engine_caller_restore(&caller);
	return status;
}

const struct ndet_backend ndet_backend_cuda = {
	.name = "cuda",
	.multi_host = true,
	.create_group = ndet_backend_cuda_create_group,
	.allreduce_group = ndet_backend_cuda_allreduce_group,
	.error = ndet_backend_cuda_error,
	.describe_error = ndet_backend_cuda_describe_error,
	.abort = ndet_backend_cuda_abort,
	.fail_call = ndet_backend_cuda_fail_call,
	.quiesce_group = ndet_backend_cuda_quiesce_group,
	.release = ndet_backend_cuda_release,
	.shares_process = ndet_backend_cuda_shares_process,
	.memory_bytes = ndet_pool_memory_bytes,
	.pointer_valid = ndet_backend_cuda_pointer_valid,
	.at_exit = ndet_engine_at_exit,
	.hosts_view = ndet_backend_cuda_hosts_view,
	.hosts_stage = ndet_backend_cuda_hosts_stage,
	.hosts_order = ndet_backend_cuda_hosts_order,
	.hosts_connect = ndet_backend_cuda_hosts_connect,
};

const struct ndet_backend *ndet_backend_default(void)
{
	return &ndet_backend_cuda;
}
