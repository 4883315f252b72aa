/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Engine setup, launch and teardown (see ndet_engine.h).
 *
 * Setup is the protocol of ndet_setup.c (four rounds, every one on every rank
 * whatever happened locally), driven here with CUDA as the local operations: the
 * pool is allocated and exported in `prepare`, peers are opened and probed in
 * `map_and_probe_write`, and every exchange goes through the caller's exchange
 * callback on device buffers.  All of it runs on a private non-blocking stream in
 * relaxed capture mode, so a setup that happens while the application captures a
 * CUDA graph neither fails nor joins the graph.
 */
#include "config.h"

#include "ndet_engine.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nccl_det.h"
#include "ndet_cuda.h"
#include "ndet_kernels.h"
#include "ndet_log.h"
#include "ndet_pool_layout.h"
#include "ndet_reference.h" /* ndet_dtype_name, ndet_op_name */
#include "ndet_settings.h" /* ndet_fault_t */
#include "ndet_setup.h"
#include "ndet_teardown.h"

#define NDET_ENGINE_PROBE_TAG 0x50524f4245000000ull /* "PROBE" */

/* Where one kind of launch (eager, or captured) last went. */
struct ndet_engine_last {
	cudaEvent_t event;          /* recorded on `stream` right after that launch */
	cudaStream_t stream;        /* compared with the next launch's, never handed to CUDA:
				     * the application may have destroyed it since */
	unsigned long long capture; /* its capture id; 0 eager */
	bool valid;
};

struct ndet_engine {
	struct ndet_engine_config config;
	ndet_engine_exchange_fn exchange;
	void *exchange_context;
	void *owned_context; /* freed with the engine (ndet_engine_create's adapter) */
	cudaStream_t setup_stream; /* private, non-blocking: setup copies and exchanges */

	char *pool; /* flags at 0, lanes at data_offset */
	uint64_t pool_bytes;
	uint64_t data_offset;
	uint64_t lane_bytes; /* set once the table is agreed (ndet_engine_setup_map) */
	uint64_t ll_offset; /* LL slots, from the first lane (ndet_kernels.h) */
	uint64_t *step_counters;                  /* device, one per block */
	uint64_t *trace;                          /* ndet_engine_set_trace; NULL: none */
	struct ndet_host_status *host_status;     /* host view */
	struct ndet_host_status *host_status_dev; /* device view */
	void *exchange_buffer;                    /* device (or pinned host) memory */
	size_t exchange_bytes;
	bool exchange_pinned; /* exchange_buffer came from cudaHostAlloc */
	/* An exchange was abandoned while NCCL may still write into the buffer: kept. */
	bool exchange_abandoned;

	/* The detach protocol (ndet_teardown.h). */
	uint64_t *detach_host; /* pinned: detach words on their way in and out */
	uint64_t epoch;        /* of the setup: what our detach words carry */
	int detach_warned;     /* atomic: a detach word failed to go out or in */

	struct ndet_flags *peer_flags[NDET_MAX_RANKS];
	char *peer_lanes[NDET_MAX_RANKS];
	void *peer_ipc_base[NDET_MAX_RANKS]; /* to cudaIpcCloseMemHandle */
	ndet_peer_kind_t peer_kind[NDET_MAX_RANKS];

	/* Two ranks in one process (ndet_engine_ranks_share_process). */
	bool ranks_share_process;
	/* This communicator's ranks in this process, whose pools are freed together. */
	struct ndet_teardown_share *share;

	/*
	 * Issue order across streams (ndet_engine_order): the last eager launch (its
	 * event also tells teardown when our last kernel finished) and the last captured
	 * one.  last_capture: capture id of the very last launch (0: eager).
	 */
	struct ndet_engine_last eager, captured;
	unsigned long long last_capture;
	bool has_last_launch;
	int order_warned;

	/* Teardown (ndet_engine_quiesce_group, ndet_engine_release). */
	bool query_failed; /* the context is broken: no kernel can be shown finished */
	bool idle;       /* no kernel of ours can still run */
	bool peers_done; /* no peer can read our pool any more */
};

/* ---------------------------------------------------------------- sizes */

/* The pool's layout: ndet_pool_layout.h (pure, so the host-only engine shares it). */

static void ndet_engine_set_verdict(struct ndet_setup_verdict *verdict,
				    ndet_verdict_reason_t reason, int rank, uint32_t detail)
{
	verdict->reason = reason;
	verdict->offending_rank = rank;
	verdict->detail = detail;
}

static bool ndet_engine_fault(const struct ndet_engine_config *config, unsigned fault)
{
	return (config->test_fail & fault) != 0 &&
	       (config->test_fail_rank < 0 || config->test_fail_rank == config->rank);
}

/* ---------------------------------------------------------------- local resources */

/*
 * Every CUDA call of setup and teardown runs on the engine's device; each local
 * operation selects it (members of one group may live on different devices) and
 * the group entry points restore the caller's device at the end.
 */
static bool ndet_engine_use_device(const struct ndet_engine *engine)
{
	cudaError_t err = cudaSetDevice(engine->config.cuda_device);
	if (err != cudaSuccess) {
		NDET_WARN("rank %d: cudaSetDevice(%d) failed: %s", engine->config.rank,
			  engine->config.cuda_device, cudaGetErrorString(err));
		(void)cudaGetLastError();
		return false;
	}
	return true;
}

/*
 * Allocation and release of the engine's memory, counted in ndet_resources (tests
 * check that every create/destroy order ends with nothing held).  A failed free is
 * logged and counted as freed: nothing would retry it.
 */
static cudaError_t ndet_engine_malloc(void *pointer, size_t bytes)
{
	cudaError_t err = cudaMalloc((void **)pointer, bytes);
	if (err == cudaSuccess)
		ndet_resources_allocated(bytes);
	return err;
}

/* Pinned, mapped into every device's address space. */
static cudaError_t ndet_engine_host_alloc(void *pointer, size_t bytes)
{
	cudaError_t err =
		cudaHostAlloc((void **)pointer, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
	if (err == cudaSuccess)
		ndet_resources_allocated(bytes);
	return err;
}

/* cudaFree, or cudaFreeHost for `pinned` memory; *pointer becomes NULL. */
static void ndet_engine_free_memory(void *pointer, size_t bytes, bool pinned)
{
	void **slot = pointer;
	if (*slot == NULL)
		return;
	if (pinned)
		NDET_CUDA_CHECK_WARN(cudaFreeHost(*slot));
	else
		NDET_CUDA_CHECK_WARN(cudaFree(*slot));
	ndet_resources_freed(bytes);
	*slot = NULL;
}

static ndet_local_status_t ndet_engine_alloc(struct ndet_engine *engine)
{
	const struct ndet_engine_config *config = &engine->config;
	ndet_status_t status = NDET_OK;
	if (ndet_pool_memory_bytes(config) > config->max_memory) {
		NDET_WARN("rank %d: pool of %llu bytes exceeds NCCL_DET_MAX_MEMORY=%llu; "
			  "raise NCCL_DET_MAX_MEMORY or lower NCCL_DET_POOL_SIZE or NCCL_DET_LL_MAX",
			  config->rank, (unsigned long long)ndet_pool_memory_bytes(config),
			  (unsigned long long)config->max_memory);
		return NDET_LOCAL_ALLOC_FAILED;
	}
	if (ndet_engine_fault(config, NDET_FAULT_ALLOC)) {
		NDET_WARN("rank %d: NCCL_DET_TEST_FAIL=alloc: pretending the pool allocation failed",
			  config->rank);
		return NDET_LOCAL_ALLOC_FAILED;
	}
	engine->data_offset = ndet_pool_flags_bytes();
	engine->ll_offset = ndet_pool_data_bytes(config);
	engine->pool_bytes = engine->data_offset + engine->ll_offset + ndet_pool_ll_bytes(config);

	/* Plain cudaMalloc: exportable whatever the application's allocator does. */
	NDET_CUDA_CHECK_GOTO(ndet_engine_malloc(&engine->pool, engine->pool_bytes), status,
			     alloc_failed);
	/*
	 * Zero the flags and the LL slots before any peer can see the pool: a stale flag
	 * is a wrong step, a stale LL tag a wrong line.
	 */
	NDET_CUDA_CHECK_GOTO(cudaMemsetAsync(engine->pool, 0, engine->data_offset,
					     engine->setup_stream),
			     status, cuda_failed);
	if (engine->pool_bytes > engine->data_offset + engine->ll_offset)
		NDET_CUDA_CHECK_GOTO(
			cudaMemsetAsync(engine->pool + engine->data_offset + engine->ll_offset, 0,
					engine->pool_bytes - engine->data_offset - engine->ll_offset,
					engine->setup_stream),
			status, cuda_failed);
	NDET_CUDA_CHECK_GOTO(ndet_engine_malloc(&engine->step_counters, NDET_POOL_COUNTER_BYTES),
			     status, alloc_failed);
	NDET_CUDA_CHECK_GOTO(cudaMemsetAsync(engine->step_counters, 0, NDET_POOL_COUNTER_BYTES,
					     engine->setup_stream),
			     status, cuda_failed);
	NDET_CUDA_CHECK_GOTO(
		ndet_engine_host_alloc(&engine->host_status, sizeof(struct ndet_host_status)),
		status, alloc_failed);
	memset((void *)engine->host_status, 0, sizeof(struct ndet_host_status));
	NDET_CUDA_CHECK_GOTO(ndet_engine_host_alloc(&engine->detach_host, NDET_POOL_DETACH_BYTES),
			     status, alloc_failed);
	NDET_CUDA_CHECK_GOTO(cudaHostGetDevicePointer((void **)&engine->host_status_dev,
						      engine->host_status, 0),
			     status, cuda_failed);
	NDET_CUDA_CHECK_GOTO(cudaEventCreateWithFlags(&engine->eager.event, cudaEventDisableTiming),
			     status, cuda_failed);
	NDET_CUDA_CHECK_GOTO(
		cudaEventCreateWithFlags(&engine->captured.event, cudaEventDisableTiming), status,
		cuda_failed);
	/* The private stream, not the device: another stream may be capturing. */
	NDET_CUDA_CHECK_GOTO(cudaStreamSynchronize(engine->setup_stream), status, cuda_failed);
	(void)status;
	return NDET_LOCAL_READY;
alloc_failed:
	return NDET_LOCAL_ALLOC_FAILED;
cuda_failed:
	return NDET_LOCAL_CUDA_FAILED;
}

static void ndet_engine_fill_payload(struct ndet_engine *engine, ndet_local_status_t local,
				     struct ndet_setup_payload *payload)
{
	const struct ndet_engine_config *config = &engine->config;
	ndet_setup_payload_identity(payload);
	payload->cuda_device = config->cuda_device;
	payload->rank = config->rank;
	payload->nranks = config->nranks;
	payload->flags = config->setup_flags;
	payload->settings_hash = config->settings_hash;
	payload->pool_bytes = engine->pool_bytes;
	payload->pool_address = (uint64_t)(uintptr_t)engine->pool;
	payload->flags_offset = 0;
	payload->data_offset = engine->data_offset;

	struct cudaDeviceProp properties;
	if (local == NDET_LOCAL_READY) {
		if (cudaGetDeviceProperties(&properties, config->cuda_device) == cudaSuccess) {
			memcpy(payload->device_uuid, &properties.uuid, sizeof(payload->device_uuid));
			payload->sm_count = properties.multiProcessorCount > 0
						    ? (uint32_t)properties.multiProcessorCount
						    : 1u;
			cudaError_t image;
			if (properties.major < 7) {
				NDET_WARN("rank %d: GPU %d is sm_%d%d; nccl-det needs sm_70 or newer",
					  config->rank, config->cuda_device, properties.major,
					  properties.minor);
				local = NDET_LOCAL_UNSUPPORTED_GPU;
			} else if ((image = (cudaError_t)ndet_kernel_device_check()) != cudaSuccess) {
				/* Built for other GPUs: NCCL runs the communicator (the verdict). */
				NDET_WARN("rank %d: GPU %d (sm_%d%d) cannot run this build's kernels: %s "
					  "(rebuild with --with-nvcc-gencode for it)",
					  config->rank, config->cuda_device, properties.major,
					  properties.minor, cudaGetErrorString(image));
				local = NDET_LOCAL_UNSUPPORTED_GPU;
			} else if (properties.major >= 9) {
				payload->flags |= NDET_SETUP_FLAG_SM90;
				if ((image = (cudaError_t)ndet_kernel_fp8_check()) == cudaSuccess)
					payload->flags |= NDET_SETUP_FLAG_FP8;
				else
					NDET_WARN("rank %d: GPU %d (sm_%d%d) cannot run this build's "
						  "fp8 kernels: %s (fp8 reductions go to NCCL; "
						  "rebuild with --with-nvcc-fp8-gencode for it)",
						  config->rank, config->cuda_device,
						  properties.major, properties.minor,
						  cudaGetErrorString(image));
			}
		} else {
			(void)cudaGetLastError();
			local = NDET_LOCAL_CUDA_FAILED;
		}
	}
	if (local == NDET_LOCAL_READY) {
		cudaIpcMemHandle_t handle;
		cudaError_t err = cudaIpcGetMemHandle(&handle, engine->pool);
		if (err != cudaSuccess) {
			NDET_WARN("rank %d: cudaIpcGetMemHandle of the pool failed: %s",
				  config->rank, cudaGetErrorString(err));
			(void)cudaGetLastError();
			local = NDET_LOCAL_EXPORT_FAILED;
		} else {
			memcpy(payload->ipc_handle, &handle, sizeof(handle));
		}
	}
	payload->local_status = (uint32_t)local;
}

/* Open or point at every peer's pool.  Returns false if any peer failed. */
static bool ndet_engine_map_peers(struct ndet_engine *engine,
				  const struct ndet_setup_payload *table)
{
	const struct ndet_engine_config *config = &engine->config;
	bool ok = true;
	for (int q = 0; q < config->nranks; q++) {
		ndet_peer_kind_t kind = ndet_setup_peer_kind(table, config->rank, q);
		engine->peer_kind[q] = kind;
		char *base = NULL;
		if (kind == NDET_PEER_SELF) {
			base = engine->pool;
		} else if (kind == NDET_PEER_SAME_PROCESS) {
			/* cudaIpcOpenMemHandle refuses our own process's handles by design. */
			base = (char *)(uintptr_t)table[q].pool_address;
			if (table[q].cuda_device != config->cuda_device) {
				cudaError_t err = cudaDeviceEnablePeerAccess(table[q].cuda_device, 0);
				if (err == cudaErrorPeerAccessAlreadyEnabled) {
					(void)cudaGetLastError();
				} else if (err != cudaSuccess) {
					NDET_WARN("rank %d: peer access to device %d (rank %d) failed: "
						  "%s",
						  config->rank, table[q].cuda_device, q,
						  cudaGetErrorString(err));
					(void)cudaGetLastError();
					ok = false;
					continue;
				}
			}
		} else {
			if (ndet_engine_fault(config, NDET_FAULT_IPC_OPEN)) {
				NDET_WARN("rank %d: NCCL_DET_TEST_FAIL=ipc_open: pretending the pool "
					  "of rank %d cannot be opened",
					  config->rank, q);
				ok = false;
				continue;
			}
			cudaIpcMemHandle_t handle;
			memcpy(&handle, table[q].ipc_handle, sizeof(handle));
			void *mapped = NULL;
			cudaError_t err =
				cudaIpcOpenMemHandle(&mapped, handle, cudaIpcMemLazyEnablePeerAccess);
			if (err != cudaSuccess) {
				NDET_WARN("rank %d: cudaIpcOpenMemHandle of rank %d's pool failed: %s",
					  config->rank, q, cudaGetErrorString(err));
				(void)cudaGetLastError();
				ok = false;
				continue;
			}
			ndet_resources_imported(1);
			engine->peer_ipc_base[q] = mapped;
			base = mapped;
		}
		engine->peer_flags[q] = (struct ndet_flags *)(base + table[q].flags_offset);
		engine->peer_lanes[q] = base + table[q].data_offset;
	}
	return ok;
}


static uint64_t ndet_engine_probe_token(int writer, int owner)
{
	return NDET_ENGINE_PROBE_TAG | ((uint64_t)writer << 12) | (uint64_t)owner;
}

/* Write my token into every peer's probe slot through the mapping we will use. */
static bool ndet_engine_probe_write(struct ndet_engine *engine)
{
	const struct ndet_engine_config *config = &engine->config;
	uint64_t tokens[NDET_MAX_RANKS];
	bool ok = true;
	for (int q = 0; q < config->nranks; q++) {
		if (q == config->rank)
			continue;
		tokens[q] = ndet_engine_probe_token(config->rank, q);
		if (ndet_engine_fault(config, NDET_FAULT_PROBE))
			tokens[q] ^= 0xdead; /* the owner must notice */
		cudaError_t err = cudaMemcpyAsync(&engine->peer_flags[q]->probe[config->rank],
						  &tokens[q], sizeof(tokens[q]), cudaMemcpyDefault,
						  engine->setup_stream);
		if (err != cudaSuccess) {
			NDET_WARN("rank %d: probe write into rank %d's pool failed: %s", config->rank,
				  q, cudaGetErrorString(err));
			(void)cudaGetLastError();
			ok = false;
		}
	}
	/* `tokens` must outlive the copies. */
	if (cudaStreamSynchronize(engine->setup_stream) != cudaSuccess) {
		(void)cudaGetLastError();
		ok = false;
	}
	return ok;
}

/* Every peer's token must be in my pool, exactly. */
static bool ndet_engine_probe_verify(struct ndet_engine *engine)
{
	const struct ndet_engine_config *config = &engine->config;
	uint64_t probe[NDET_MAX_RANKS];
	struct ndet_flags *own = (struct ndet_flags *)engine->pool;
	cudaError_t err = cudaMemcpyAsync(probe, own->probe, sizeof(probe), cudaMemcpyDeviceToHost,
					  engine->setup_stream);
	if (err == cudaSuccess)
		err = cudaStreamSynchronize(engine->setup_stream);
	if (err != cudaSuccess) {
		NDET_WARN("rank %d: reading the probe words failed: %s", config->rank,
			  cudaGetErrorString(err));
		(void)cudaGetLastError();
		return false;
	}
	bool ok = true;
	for (int q = 0; q < config->nranks; q++) {
		if (q != config->rank && probe[q] != ndet_engine_probe_token(q, config->rank)) {
			NDET_WARN("rank %d: probe word of rank %d is 0x%llx, expected 0x%llx: its "
				  "writes do not reach this GPU's memory",
				  config->rank, q, (unsigned long long)probe[q],
				  (unsigned long long)ndet_engine_probe_token(q, config->rank));
			ok = false;
		}
	}
	return ok;
}

/* Close our mappings of peers' pools: only once no kernel of ours can use them. */
static void ndet_engine_close_peers(struct ndet_engine *engine)
{
	for (int q = 0; q < NDET_MAX_RANKS; q++) {
		if (engine->peer_ipc_base[q] == NULL)
			continue;
		NDET_CUDA_CHECK_WARN(cudaIpcCloseMemHandle(engine->peer_ipc_base[q]));
		ndet_resources_imported(-1);
		engine->peer_ipc_base[q] = NULL;
	}
}

/*
 * Our last access to each peer pool we imported: "detached" into our slot of its
 * detach area (ndet_teardown.h), so that its owner may free it without a barrier.
 * Only once no kernel of ours can run (quiesce), right before the mappings close.
 * Copies on the private stream, which alone is synchronised: never the device.
 */
static void ndet_engine_detach_peers(struct ndet_engine *engine)
{
	const struct ndet_engine_config *config = &engine->config;
	bool any = false, ok = true;
	if (engine->detach_host == NULL)
		return;
	for (int q = 0; q < NDET_MAX_RANKS && q < config->nranks; q++) {
		if (engine->peer_ipc_base[q] == NULL)
			continue;
		engine->detach_host[q] = ndet_teardown_detach_word(engine->epoch, config->rank, q);
		char *slot = (char *)engine->peer_flags[q] + NDET_POOL_DETACH_OFFSET +
			     (size_t)config->rank * sizeof(uint64_t);
		cudaError_t err = cudaMemcpyAsync(slot, &engine->detach_host[q], sizeof(uint64_t),
						  cudaMemcpyDefault, engine->setup_stream);
		if (err != cudaSuccess) {
			NDET_WARN(
				"rank %d: writing the detach word into rank %d's pool failed: %s; "
				"rank %d keeps its pool until it exits",
				config->rank, q, cudaGetErrorString(err), q);
			(void)cudaGetLastError();
			ok = false;
			continue;
		}
		any = true;
	}
	if (any && cudaStreamSynchronize(engine->setup_stream) != cudaSuccess) {
		(void)cudaGetLastError();
		ok = false;
	}
	if (!ok)
		engine->detach_warned = 1;
}

/* Device and pinned memory the engine holds. */
static uint64_t ndet_engine_held_bytes(const struct ndet_engine *engine)
{
	uint64_t bytes = 0;
	if (engine->exchange_buffer != NULL)
		bytes += engine->exchange_bytes;
	if (engine->pool != NULL)
		bytes += engine->pool_bytes;
	if (engine->step_counters != NULL)
		bytes += NDET_POOL_COUNTER_BYTES;
	if (engine->host_status != NULL)
		bytes += sizeof(struct ndet_host_status);
	if (engine->detach_host != NULL)
		bytes += NDET_POOL_DETACH_BYTES;
	return bytes;
}

/*
 * Everything that is not memory, then the engine itself.  Destroying a stream or an
 * event returns at once, even with work pending (CUDA releases them when it ends).
 */
static void ndet_engine_discard(struct ndet_engine *engine)
{
	if (engine->eager.event != NULL)
		NDET_CUDA_CHECK_WARN(cudaEventDestroy(engine->eager.event));
	if (engine->captured.event != NULL)
		NDET_CUDA_CHECK_WARN(cudaEventDestroy(engine->captured.event));
	if (engine->setup_stream != NULL)
		NDET_CUDA_CHECK_WARN(cudaStreamDestroy(engine->setup_stream));
	free(engine->owned_context);
	free(engine);
}

static const struct ndet_teardown_ops ndet_engine_teardown_ops;

/* ndet_teardown_ops.free: no kernel and no peer can use the engine's memory. */
static void ndet_engine_free_all(void *member)
{
	struct ndet_engine *engine = member;
	if (!ndet_engine_use_device(engine)) {
		/* No CUDA call would succeed: keep everything. */
		ndet_teardown_leak(engine, &ndet_engine_teardown_ops,
				   "its device cannot be selected");
		return;
	}
	ndet_engine_close_peers(engine);
	if (engine->exchange_abandoned)
		NDET_INFO(NDET_SUBSYS_ALLOC,
			  "rank %d: the %zu-byte exchange buffer stays allocated: an aborted "
			  "exchange may still write into it",
			  engine->config.rank, engine->exchange_bytes);
	else
		ndet_engine_free_memory(&engine->exchange_buffer, engine->exchange_bytes,
					engine->exchange_pinned);
	ndet_engine_free_memory(&engine->step_counters, NDET_POOL_COUNTER_BYTES, false);
	ndet_engine_free_memory(&engine->pool, engine->pool_bytes, false);
	ndet_engine_free_memory(&engine->host_status, sizeof(struct ndet_host_status), true);
	ndet_engine_free_memory(&engine->detach_host, NDET_POOL_DETACH_BYTES, true);
	ndet_engine_discard(engine);
}

/*
 * ndet_teardown_ops.abandon: a peer or a kernel may still use the memory, and
 * cudaFree/cudaFreeHost would synchronise behind a kernel that may spin: keep it
 * (and any open mapping of a peer's pool), with no device-synchronising call.
 */
static uint64_t ndet_engine_abandon(void *member)
{
	struct ndet_engine *engine = member;
	uint64_t kept = ndet_engine_held_bytes(engine);
	ndet_engine_discard(engine);
	return kept;
}

/*
 * ndet_teardown_ops.read_detach: our detach area through the pinned words, on the
 * private stream (the application's streams and our kernels are not waited for).
 */
static ndet_teardown_read_t ndet_engine_read_detach(void *member, uint64_t *words)
{
	struct ndet_engine *engine = member;
	if (engine->detach_host == NULL || engine->pool == NULL)
		return NDET_TEARDOWN_READ_FAILED;
	cudaError_t err = cudaSetDevice(engine->config.cuda_device);
	if (err == cudaSuccess)
		err = cudaMemcpyAsync(engine->detach_host, engine->pool + NDET_POOL_DETACH_OFFSET,
				      NDET_POOL_DETACH_BYTES, cudaMemcpyDeviceToHost,
				      engine->setup_stream);
	if (err == cudaSuccess)
		err = cudaStreamSynchronize(engine->setup_stream);
	if (err != cudaSuccess) {
		(void)cudaGetLastError();
		if (err == cudaErrorCudartUnloading)
			return NDET_TEARDOWN_READ_DOWN;
		if (__atomic_exchange_n(&engine->detach_warned, 1, __ATOMIC_RELAXED) == 0)
			NDET_INFO(NDET_SUBSYS_ALLOC,
				  "rank %d: reading the detach words of its pool failed: %s; "
				  "it stays allocated until its peers' processes end",
				  engine->config.rank, cudaGetErrorString(err));
		return NDET_TEARDOWN_READ_FAILED;
	}
	memcpy(words, engine->detach_host, NDET_POOL_DETACH_BYTES);
	return NDET_TEARDOWN_READ_OK;
}

static const struct ndet_teardown_ops ndet_engine_teardown_ops = {
	.free = ndet_engine_free_all,
	.abandon = ndet_engine_abandon,
	.read_detach = ndet_engine_read_detach,
	.process_gone = ndet_teardown_process_gone,
};

/* ---------------------------------------------------------------- exchange */

/*
 * Exchange `bytes` of host data for each engine through its device buffer:
 * all[i][r * bytes ...] = rank r's mine[i].  One call of the exchange callback for
 * every engine, so that a thread driving several ranks can group them.
 */
static ndet_status_t ndet_engine_exchange(struct ndet_engine *const engines[], int count,
					  const void *const mine[], void *const all[],
					  size_t bytes)
{
	ndet_status_t status = NDET_OK;
	void **contexts = calloc((size_t)count, sizeof(*contexts));
	const void **sends = calloc((size_t)count, sizeof(*sends));
	void **recvs = calloc((size_t)count, sizeof(*recvs));
	cudaStream_t *streams = calloc((size_t)count, sizeof(*streams));
	if (count < 1 || contexts == NULL || sends == NULL || recvs == NULL || streams == NULL) {
		status = count < 1 ? NDET_ERR_INTERNAL : NDET_ERR_SYSTEM;
		goto out;
	}
	for (int i = 0; i < count; i++) {
		struct ndet_engine *engine = engines[i];
		if (engine->exchange != engines[0]->exchange ||
		    bytes * (size_t)(engine->config.nranks + 1) > engine->exchange_bytes) {
			status = NDET_ERR_INTERNAL;
			goto out;
		}
		/* NCCL may still write into an abandoned exchange's buffer: never reuse it. */
		if (engine->exchange_abandoned) {
			status = NDET_ERR_REMOTE;
			goto out;
		}
		char *send = (char *)engine->exchange_buffer;
		contexts[i] = engine->exchange_context;
		sends[i] = send;
		recvs[i] = send + bytes;
		streams[i] = engine->setup_stream;
		if (!ndet_engine_use_device(engine)) {
			status = NDET_ERR_CUDA;
			goto out;
		}
		/* The device buffer serves every round: nothing of the last one may remain. */
		NDET_CUDA_CHECK_GOTO(cudaMemsetAsync(recvs[i], 0, bytes * (size_t)engine->config.nranks,
						     engine->setup_stream),
				     status, out);
		NDET_CUDA_CHECK_GOTO(cudaMemcpyAsync(send, mine[i], bytes, cudaMemcpyHostToDevice,
						     engine->setup_stream),
				     status, out);
		/* A callback may use a stream of its own: the send buffer must be ready. */
		NDET_CUDA_CHECK_GOTO(cudaStreamSynchronize(engine->setup_stream), status, out);
	}
	status = engines[0]->exchange(contexts, count, sends, recvs, bytes, streams);
	if (status == NDET_IN_PROGRESS) {
		/* NCCL may still run the all-gather: its buffers outlive the engine. */
		for (int i = 0; i < count; i++)
			engines[i]->exchange_abandoned = true;
		status = NDET_ERR_REMOTE;
	}
	if (status != NDET_OK) {
		NDET_WARN("exchange of %zu bytes for %d communicator(s) failed: %s", bytes, count,
			  ndet_status_name(status));
		goto out;
	}
	for (int i = 0; i < count; i++) {
		struct ndet_engine *engine = engines[i];
		if (!ndet_engine_use_device(engine)) {
			status = NDET_ERR_CUDA;
			goto out;
		}
		NDET_CUDA_CHECK_GOTO(cudaMemcpyAsync(all[i], recvs[i],
						     bytes * (size_t)engine->config.nranks,
						     cudaMemcpyDeviceToHost, engine->setup_stream),
				     status, out);
		NDET_CUDA_CHECK_GOTO(cudaStreamSynchronize(engine->setup_stream), status, out);
	}
out:
	free(streams);
	free(recvs);
	free(sends);
	free(contexts);
	return status;
}

/*
 * The group entry points run in relaxed capture mode on the engines' devices and
 * give the caller's device and capture mode back.  The caller's thread may be
 * capturing (a first all-reduce inside torch.cuda.graph): relaxed mode lets this
 * thread allocate and synchronise its own streams without invalidating the capture.
 */
struct ndet_engine_caller {
	int device;
	enum cudaStreamCaptureMode mode;
	bool mode_saved;
};

static void ndet_engine_caller_save(struct ndet_engine_caller *caller)
{
	caller->device = -1;
	if (cudaGetDevice(&caller->device) != cudaSuccess) {
		(void)cudaGetLastError();
		caller->device = -1;
	}
	caller->mode = cudaStreamCaptureModeRelaxed;
	caller->mode_saved = cudaThreadExchangeStreamCaptureMode(&caller->mode) == cudaSuccess;
	if (!caller->mode_saved)
		(void)cudaGetLastError();
}

static void ndet_engine_caller_restore(struct ndet_engine_caller *caller)
{
	int current = -1;
	if (caller->mode_saved && cudaThreadExchangeStreamCaptureMode(&caller->mode) != cudaSuccess)
		(void)cudaGetLastError();
	/* Only when it changed: cudaSetDevice may create a context on that device. */
	if (cudaGetDevice(&current) != cudaSuccess)
		(void)cudaGetLastError();
	if (caller->device >= 0 && current != caller->device)
		NDET_CUDA_CHECK_WARN(cudaSetDevice(caller->device));
}

/* ---------------------------------------------------------------- setup */

/* The local operations of ndet_setup.h, with CUDA. */
static void ndet_engine_setup_prepare(void *member, struct ndet_setup_payload *payload)
{
	struct ndet_engine *engine = member;
	ndet_local_status_t local = NDET_LOCAL_READY;
	if (engine->config.nranks > NDET_MAX_RANKS)
		local = NDET_LOCAL_TOO_MANY_RANKS;
	else if (!ndet_engine_use_device(engine))
		local = NDET_LOCAL_CUDA_FAILED;
	else
		local = ndet_engine_alloc(engine);
	ndet_engine_fill_payload(engine, local, payload);
}

static bool ndet_engine_setup_map(void *member, const struct ndet_setup_payload *table, int nranks)
{
	struct ndet_engine *engine = member;
	engine->ranks_share_process = ndet_setup_table_shares_process(table, nranks);
	engine->config.ranks_per_device = ndet_setup_table_ranks_per_device(table, nranks);
	engine->config.device_sms = ndet_setup_table_min_sms(table, nranks);
	engine->lane_bytes = ndet_pool_lane_bytes(&engine->config);
	/* Before any peer can hold a pointer into our pool: from here on it is shared. */
	engine->share = ndet_teardown_join(table, nranks, engine->config.rank);
	engine->epoch = ndet_teardown_epoch(table, nranks);
	if (!ndet_plan_fits_device(nranks, engine->config.device_sms,
				   engine->config.ranks_per_device)) {
		/* Every rank sees the same table: every rank falls back. */
		NDET_WARN("rank %d: %d ranks share one GPU of %d SMs, fewer than one resident "
			  "block each: the communicator runs in NCCL",
			  engine->config.rank, engine->config.ranks_per_device,
			  engine->config.device_sms);
		return false;
	}
	if (!ndet_engine_use_device(engine))
		return false;
	return ndet_engine_map_peers(engine, table) && ndet_engine_probe_write(engine);
}

static bool ndet_engine_setup_verify(void *member)
{
	struct ndet_engine *engine = member;
	return ndet_engine_use_device(engine) && ndet_engine_probe_verify(engine);
}

/*
 * Peers may have mapped our pool before the refusal became known; they close their
 * mappings before returning, but not necessarily before we get here, so the pool is
 * freed at once only when no peer ever saw it (else with its share, or never).  No
 * kernel ever ran: our own mappings of peers' pools can go now.
 */
static void ndet_engine_setup_release(void *member, bool peers_may_have_mapped)
{
	struct ndet_engine *engine = member;
	bool usable = ndet_engine_use_device(engine);
	if (usable) {
		ndet_engine_detach_peers(engine);
		ndet_engine_close_peers(engine);
	}
	ndet_teardown_release(engine->share, engine, &ndet_engine_teardown_ops, engine->config.rank,
			      usable, usable && !peers_may_have_mapped);
}

static const struct ndet_setup_member_ops ndet_engine_setup_ops = {
	.prepare = ndet_engine_setup_prepare,
	.map_and_probe_write = ndet_engine_setup_map,
	.probe_verify = ndet_engine_setup_verify,
	.release = ndet_engine_setup_release,
};

/* ndet_setup_allgather_fn over the engines' device buffers. */
static ndet_status_t ndet_engine_setup_allgather(void *context, int count, void *const members[],
						 const void *const sends[], void *const recvs[],
						 size_t bytes)
{
	(void)context;
	return ndet_engine_exchange((struct ndet_engine *const *)members, count, sends, recvs,
				    bytes);
}

static bool ndet_engine_config_valid(const struct ndet_engine_config *config)
{
	return config->nranks >= 1 && config->rank >= 0 && config->rank < config->nranks &&
	       config->nranks <= 4096 && config->max_blocks >= 1 &&
	       config->max_blocks <= NDET_KERNEL_MAX_BLOCKS;
}

/*
 * What an engine needs before the first exchange: its private stream and the
 * exchange buffer.  Device memory first; pinned host memory (which NCCL can DMA
 * from as well) when the device is full, since a rank that cannot exchange at all
 * would leave its peers waiting in round one.
 */
static ndet_status_t ndet_engine_start(const struct ndet_engine_member *member,
				       ndet_engine_exchange_fn exchange,
				       struct ndet_engine **engine_out)
{
	ndet_status_t status = NDET_OK;
	struct ndet_engine *engine = calloc(1, sizeof(*engine));
	if (engine == NULL)
		return NDET_ERR_SYSTEM;
	engine->config = member->config;
	engine->exchange = exchange;
	engine->exchange_context = member->exchange_context;
	if (!ndet_engine_use_device(engine)) {
		status = NDET_ERR_CUDA;
		goto fail;
	}
	NDET_CUDA_CHECK_GOTO(cudaStreamCreateWithFlags(&engine->setup_stream,
						       cudaStreamNonBlocking),
			     status, fail);
	engine->exchange_bytes =
	    sizeof(struct ndet_setup_payload) * (size_t)(member->config.nranks + 1);
	cudaError_t err = ndet_engine_malloc(&engine->exchange_buffer, engine->exchange_bytes);
	if (err != cudaSuccess) {
		(void)cudaGetLastError();
		engine->exchange_buffer = NULL;
		engine->exchange_pinned = true;
		NDET_CUDA_CHECK_GOTO(
			ndet_engine_host_alloc(&engine->exchange_buffer, engine->exchange_bytes),
			status, fail);
	}
	*engine_out = engine;
	return NDET_OK;
fail:
	ndet_engine_free_all(engine);
	return status;
}

void ndet_engine_create_group(struct ndet_engine_member *members, int count,
			      ndet_engine_exchange_fn exchange)
{
	const size_t slots = (size_t)(count > 0 ? count : 1);
	struct ndet_setup_member *setup = calloc(slots, sizeof(*setup));
	struct ndet_engine **started = calloc(slots, sizeof(*started));
	struct ndet_engine_caller caller;
	int taking_part = 0;

	for (int i = 0; i < count; i++) {
		members[i].engine = NULL;
		members[i].agreed_flags = 0;
		ndet_engine_set_verdict(&members[i].verdict, NDET_VERDICT_OK, -1, 0);
		members[i].status = NDET_OK;
		if (!ndet_engine_config_valid(&members[i].config) || exchange == NULL)
			members[i].status = NDET_ERR_INVALID_ARGUMENT;
		else if (setup == NULL || started == NULL)
			members[i].status = NDET_ERR_SYSTEM;
	}
	if (setup == NULL || started == NULL)
		goto out;

	ndet_engine_caller_save(&caller);
	for (int i = 0; i < count; i++) {
		if (members[i].status != NDET_OK)
			continue;
		members[i].status = ndet_engine_start(&members[i], exchange, &started[i]);
		if (members[i].status != NDET_OK) {
			NDET_WARN("rank %d: cannot prepare the setup exchange (%s): this rank "
				  "passes its calls to NCCL, and its peers wait for it in the "
				  "first setup exchange",
				  members[i].config.rank, ndet_status_name(members[i].status));
			continue;
		}
		setup[taking_part].context = started[i];
		setup[taking_part].rank = members[i].config.rank;
		setup[taking_part].nranks = members[i].config.nranks;
		taking_part++;
	}
	ndet_setup_run(setup, taking_part, &ndet_engine_setup_ops, ndet_engine_setup_allgather,
		       NULL);

	for (int i = 0, k = 0; i < count; i++) {
		if (started[i] == NULL)
			continue;
		const struct ndet_setup_member *result = &setup[k++];
		members[i].status = result->status;
		members[i].verdict = result->verdict;
		members[i].agreed_flags = result->agreed_flags;
		if (result->status != NDET_OK) {
			/* Released by the protocol. */
			NDET_INFO(NDET_SUBSYS_SETUP, "rank %d: no engine: %s (%s, rank %d)",
				  members[i].config.rank, ndet_status_name(result->status),
				  ndet_verdict_reason_name(result->verdict.reason),
				  result->verdict.offending_rank);
			continue;
		}
		struct ndet_engine *engine = started[i];
		NDET_INFO(NDET_SUBSYS_SETUP,
			  "rank %d/%d: engine ready on device %d, pool %llu bytes, %d lanes of "
			  "%llu bytes",
			  engine->config.rank, engine->config.nranks, engine->config.cuda_device,
			  (unsigned long long)engine->pool_bytes,
			  (int)ndet_pool_lanes(&engine->config),
			  (unsigned long long)engine->lane_bytes);
		members[i].engine = engine;
	}
	ndet_engine_caller_restore(&caller);
out:
	free(started);
	free(setup);
}

/* ndet_engine_create's single-member callback, as a group exchange. */
struct ndet_engine_single_exchange {
	ndet_engine_allgather_fn allgather;
	void *context;
};

static ndet_status_t ndet_engine_single_exchange(void *const contexts[], int count,
						 const void *const device_sends[],
						 void *const device_recvs[], size_t bytes,
						 const cudaStream_t streams[])
{
	(void)streams;
	for (int i = 0; i < count; i++) {
		const struct ndet_engine_single_exchange *single = contexts[i];
		ndet_status_t status =
		    single->allgather(single->context, device_sends[i], device_recvs[i], bytes);
		if (status != NDET_OK)
			return status;
	}
	return NDET_OK;
}

ndet_status_t ndet_engine_create(const struct ndet_engine_config *config,
				 ndet_engine_allgather_fn allgather, void *context,
				 struct ndet_engine **engine_out, struct ndet_setup_verdict *verdict)
{
	*engine_out = NULL;
	ndet_engine_set_verdict(verdict, NDET_VERDICT_OK, -1, 0);
	if (allgather == NULL)
		return NDET_ERR_INVALID_ARGUMENT;
	struct ndet_engine_single_exchange *single = calloc(1, sizeof(*single));
	if (single == NULL)
		return NDET_ERR_SYSTEM;
	single->allgather = allgather;
	single->context = context;
	struct ndet_engine_member member = {.config = *config, .exchange_context = single};
	ndet_engine_create_group(&member, 1, ndet_engine_single_exchange);
	*verdict = member.verdict;
	if (member.status != NDET_OK) {
		free(single);
		return member.status;
	}
	/* The destroy barrier still calls through it. */
	member.engine->owned_context = single;
	*engine_out = member.engine;
	return NDET_OK;
}

/* ---------------------------------------------------------------- launch */

ndet_status_t ndet_engine_plan_for_config(const struct ndet_engine_config *config, size_t count,
					  ndet_dtype_t dtype, ndet_op_t op, struct ndet_plan *plan)
{
	const struct ndet_engine_call call = {.count = count, .dtype = dtype, .op = op};
	return ndet_engine_plan_call_for_config(config, &call, plan);
}

ndet_status_t ndet_engine_plan_call(const struct ndet_engine *engine,
				    const struct ndet_engine_call *call, struct ndet_plan *plan)
{
	return ndet_engine_plan_call_for_config(&engine->config, call, plan);
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
		.push_min = config->push_min,
		.max_blocks = config->max_blocks,
		.ranks_per_device = config->ranks_per_device,
		.device_sms = config->device_sms,
		.lane_bytes = ndet_pool_lane_bytes(config),
	};
	return ndet_plan_make(&params, plan);
}

void ndet_engine_set_trace(struct ndet_engine *engine, uint64_t *device_words)
{
	engine->trace = device_words;
}

ndet_status_t ndet_engine_plan(const struct ndet_engine *engine, size_t count,
			       ndet_dtype_t dtype, ndet_op_t op, struct ndet_plan *plan)
{
	return ndet_engine_plan_for_config(&engine->config, count, dtype, op, plan);
}

static void ndet_engine_fill_args(const struct ndet_engine *engine, const struct ndet_plan *plan,
				  const struct ndet_engine_call *call,
				  struct ndet_kernel_args *args)
{
	memset(args, 0, sizeof(*args));
	args->sendbuff = call->sendbuff;
	args->recvbuff = call->recvbuff;
	args->count = call->count;
	args->chunk_elems = plan->chunk_elems;
	args->steps = plan->steps;
	args->lane_bytes = engine->lane_bytes;
	args->ll_offset = engine->ll_offset;
	args->timeout_ns = engine->config.timeout_ms * 1000000ull;
	args->dtype = (int32_t)call->dtype;
	args->op = (int32_t)call->op;
	args->path = (int32_t)plan->path;
	args->nranks = engine->config.nranks;
	args->rank = engine->config.rank;
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
	for (int r = 0; r < engine->config.nranks; r++) {
		args->flags[r] = engine->peer_flags[r];
		args->lanes[r] = engine->peer_lanes[r];
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
 * Calls on one engine must run in issue order even when issued on different streams
 * (their kernels share step counters and lanes): before a launch on another stream
 * than the previous one of its kind, that stream waits for the event recorded right
 * after that launch (on its stream, at its launch: that stream may be gone by now,
 * and only the event is used).  Eager calls wait for eager calls; calls in one
 * capture wait for earlier calls of the same capture (the wait becomes an edge of
 * the graph).  Between an eager call and a captured one no edge can exist: the graph
 * runs whenever it is launched, and the application orders its launch (as it must
 * with NCCL: torch.cuda.graph synchronises before capturing, and replays on one
 * stream).
 */
static ndet_status_t ndet_engine_order(struct ndet_engine *engine, cudaStream_t stream,
				       unsigned long long capture)
{
	ndet_status_t status = NDET_OK;
	const struct ndet_engine_last *last = capture == 0 ? &engine->eager : &engine->captured;
	if (last->valid && last->capture == capture && last->stream != stream)
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
					  unsigned long long capture)
{
	ndet_status_t status = NDET_OK;
	struct ndet_engine_last *last = capture == 0 ? &engine->eager : &engine->captured;
	NDET_CUDA_CHECK_GOTO(cudaEventRecord(last->event, stream), status, out);
	last->stream = stream;
	last->capture = capture;
	last->valid = true;
	engine->last_capture = capture;
	engine->has_last_launch = true;
out:
	return status;
}

ndet_status_t ndet_engine_allreduce(struct ndet_engine *engine, const void *sendbuff,
				    void *recvbuff, size_t count, ndet_dtype_t dtype,
				    ndet_op_t op, cudaStream_t stream)
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
 * all-reduce or a reduce, the one block of a reduce-scatter).
 */
static ndet_status_t ndet_engine_copy(const struct ndet_engine_call *call, cudaStream_t stream)
{
	ndet_status_t status = NDET_OK;
	if (call->sendbuff != call->recvbuff)
		NDET_CUDA_CHECK_GOTO(
			cudaMemcpyAsync(call->recvbuff, call->sendbuff,
					call->count * ndet_plan_dtype_size(call->dtype),
					cudaMemcpyDeviceToDevice, stream),
			status, out);
out:
	return status;
}

ndet_status_t ndet_engine_collective(struct ndet_engine *engine,
				     const struct ndet_engine_call *call, cudaStream_t stream)
{
	ndet_status_t status = ndet_engine_error(engine, NULL);
	int saved_device = -1;
	unsigned long long capture = 0;
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
		  : call->coll == NDET_COLL_REDUCE	 ? "reduce"
							 : "all-reduce",
		  call->count, ndet_dtype_name(call->dtype), ndet_op_name(call->op),
		  call->premul != NDET_PREMUL_NONE ? " (PreMulSum)" : "",
		  ndet_plan_path_name(plan.path), plan.blocks, (unsigned long long)plan.steps);

	NDET_CUDA_CHECK_GOTO(cudaGetDevice(&saved_device), status, out);
	if (saved_device != engine->config.cuda_device)
		NDET_CUDA_CHECK_GOTO(cudaSetDevice(engine->config.cuda_device), status, out);
	NDET_CUDA_CHECK_GOTO(ndet_engine_capture_id(stream, &capture), status, out);
	status = ndet_engine_order(engine, stream, capture);
	if (status != NDET_OK)
		goto out;
	if (plan.path == NDET_PATH_COPY) {
		status = ndet_engine_copy(call, stream);
	} else {
		struct ndet_kernel_args args;
		ndet_engine_fill_args(engine, &plan, call, &args);
		NDET_CUDA_CHECK_GOTO((cudaError_t)ndet_kernel_allreduce(&args, stream), status, out);
	}
	status = ndet_engine_launched(engine, stream, capture);
out:
	if (saved_device >= 0 && saved_device != engine->config.cuda_device)
		NDET_CUDA_CHECK_WARN(cudaSetDevice(saved_device));
	return status;
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

ndet_status_t ndet_engine_collective_all_ranks(struct ndet_engine *const *engines, int nranks,
					       const struct ndet_engine_call *calls,
					       ndet_all_ranks_launcher_fn launch,
					       cudaStream_t stream)
{
	ndet_status_t status = NDET_OK;
	struct ndet_kernel_args *host_args = NULL, *device_args = NULL;
	const size_t args_bytes = sizeof(*host_args) * (size_t)(nranks > 0 ? nranks : 1);
	struct ndet_plan plan;
	if (nranks < 1 || nranks > NDET_MAX_RANKS || launch == NULL)
		return NDET_ERR_INVALID_ARGUMENT;
	status = ndet_engine_plan_call(engines[0], &calls[0], &plan);
	if (status != NDET_OK)
		return status;
	if (plan.path != NDET_PATH_ONESHOT && plan.path != NDET_PATH_TWOSHOT &&
	    plan.path != NDET_PATH_SCATTER && plan.path != NDET_PATH_LL &&
	    plan.path != NDET_PATH_PUSH)
		return NDET_ERR_INVALID_ARGUMENT;
	host_args = calloc((size_t)nranks, sizeof(*host_args));
	if (host_args == NULL)
		return NDET_ERR_SYSTEM;
	for (int r = 0; r < nranks; r++)
		ndet_engine_fill_args(engines[r], &plan, &calls[r], &host_args[r]);
	const int op =
		calls[0].premul != NDET_PREMUL_NONE ? NDET_KERNEL_OP_PREMULSUM : (int)calls[0].op;
	NDET_CUDA_CHECK_GOTO(ndet_engine_malloc(&device_args, args_bytes), status, out);
	NDET_CUDA_CHECK_GOTO(cudaMemcpy(device_args, host_args, args_bytes, cudaMemcpyHostToDevice),
			     status, out);
	NDET_CUDA_CHECK_GOTO(
		(cudaError_t)launch(device_args, (int)calls[0].dtype, op, nranks, plan.blocks,
				    stream),
		status, out);
	NDET_CUDA_CHECK_GOTO(cudaStreamSynchronize(stream), status, out);
out:
	ndet_engine_free_memory(&device_args, args_bytes, false);
	free(host_args);
	return status;
}

/* ---------------------------------------------------------------- errors, teardown */

ndet_status_t ndet_engine_error(const struct ndet_engine *engine, uint32_t *kernel_error)
{
	uint32_t error = __atomic_load_n(&engine->host_status->error, __ATOMIC_ACQUIRE);
	if (kernel_error != NULL)
		*kernel_error = error;
	return error == NDET_KERNEL_OK ? NDET_OK : NDET_ERR_REMOTE;
}

/*
 * The publication protocol of struct ndet_host_status (ndet_types.h): the details
 * are complete once `error` is published by the writer that claimed the record.
 * `error` without the matching claim comes from a writer that published first and
 * wrote the details after: they may be half written, so none are reported.
 */
bool ndet_engine_error_details(const struct ndet_engine *engine, uint32_t *block, uint32_t *peer,
			       uint64_t *step, uint64_t *observed, uint32_t *phase)
{
	const struct ndet_host_status *h = engine->host_status;
	uint32_t error = __atomic_load_n(&h->error, __ATOMIC_ACQUIRE);
	if (error == NDET_KERNEL_OK || __atomic_load_n(&h->claim, __ATOMIC_ACQUIRE) != error)
		return false;
	*block = h->block;
	*peer = h->peer;
	*step = h->step;
	*observed = h->observed;
	*phase = h->phase;
	return true;
}

void ndet_engine_abort(struct ndet_engine *engine)
{
	__atomic_store_n(&engine->host_status->abort, 1u, __ATOMIC_RELEASE);
}

bool ndet_engine_ranks_share_process(const struct ndet_engine *engine)
{
	return engine->ranks_share_process;
}

/*
 * Our last eager launch has finished (or there was none).  A query that fails
 * means the context is broken (a kernel faulted): nothing can be shown idle.
 * Captured launches are not tracked: a graph runs whenever the application
 * launches it.
 */
static bool ndet_engine_kernels_idle(void *member)
{
	struct ndet_engine *engine = member;
	if (!engine->eager.valid)
		return true;
	cudaError_t err = cudaEventQuery(engine->eager.event);
	if (err != cudaSuccess && err != cudaErrorNotReady) {
		(void)cudaGetLastError();
		engine->query_failed = true;
	}
	return err == cudaSuccess;
}

/*
 * The kernels were told to leave (they poll both words), or the context broke (a
 * faulted kernel): either way, waiting longer than the grace period is pointless.
 */
static bool ndet_engine_kernels_stopping(void *member)
{
	const struct ndet_engine *engine = member;
	return engine->query_failed || ndet_engine_error(engine, NULL) != NDET_OK ||
	       __atomic_load_n(&engine->host_status->abort, __ATOMIC_ACQUIRE) != 0;
}

/*
 * Steps 1 and 2 of ndet_teardown.h for one engine: wait (bounded) for our kernels,
 * then, only if they finished, close our mappings of peers' pools.
 */
static void ndet_engine_quiesce(struct ndet_engine *engine)
{
	const struct ndet_teardown_kernels kernels = {
		.idle = ndet_engine_kernels_idle,
		.stopping = ndet_engine_kernels_stopping,
		.engine = engine,
		.timeout_ms = engine->config.timeout_ms,
	};
	engine->idle = ndet_engine_use_device(engine) && ndet_teardown_wait(&kernels);
	if (engine->idle) {
		ndet_engine_detach_peers(engine);
		ndet_engine_close_peers(engine);
	} else {
		NDET_INFO(NDET_SUBSYS_ENGINE,
			  "rank %d: a kernel of ours has not finished%s: its memory and mappings "
			  "stay allocated, and it writes no detach word",
			  engine->config.rank,
			  ndet_engine_kernels_stopping(engine) ? " after the abort" : "");
	}
	/* Without a peer, nobody else reads the pool. */
	engine->peers_done = engine->config.nranks == 1;
}

ndet_status_t ndet_engine_quiesce_group(struct ndet_engine *const engines[], int count,
					bool barrier)
{
	ndet_status_t status = NDET_OK;
	const size_t slots = (size_t)(count > 0 ? count : 1);
	void **meeting = calloc(slots, sizeof(*meeting));
	int *nranks = calloc(slots, sizeof(*nranks));
	int32_t *words = calloc(slots, sizeof(*words));
	bool *clean = calloc(slots, sizeof(*clean));
	int meetings = 0;
	struct ndet_engine_caller caller;

	ndet_engine_caller_save(&caller);
	for (int i = 0; i < count; i++)
		ndet_engine_quiesce(engines[i]);
	if (meeting == NULL || nranks == NULL || words == NULL || clean == NULL) {
		status = NDET_ERR_SYSTEM;
		barrier = false;
	}
	for (int i = 0; i < count && barrier; i++) {
		struct ndet_engine *engine = engines[i];
		if (engine->config.nranks < 2)
			continue;
		/* A rank that is not idle still takes part: its peers are in the exchange. */
		words[meetings] = engine->idle ? 0 : 1;
		nranks[meetings] = engine->config.nranks;
		meeting[meetings++] = engine;
	}
	if (meetings > 0)
		status = ndet_setup_agree(meetings, meeting, nranks, words, clean,
					  ndet_engine_setup_allgather, NULL);
	for (int k = 0; k < meetings && status == NDET_OK; k++)
		((struct ndet_engine *)meeting[k])->peers_done = clean[k];
	ndet_engine_caller_restore(&caller);
	free(clean);
	free(words);
	free(nranks);
	free(meeting);
	return status;
}

void ndet_engine_release(struct ndet_engine *engine)
{
	struct ndet_engine_caller caller;
	if (engine == NULL)
		return;
	ndet_engine_caller_save(&caller);
	ndet_teardown_release(engine->share, engine, &ndet_engine_teardown_ops, engine->config.rank,
			      engine->idle, engine->peers_done);
	/* Peers in other processes are probably tearing down now too: give them a moment. */
	ndet_teardown_pending_retry(true);
	ndet_engine_caller_restore(&caller);
}

void ndet_engine_at_exit(void)
{
	struct ndet_engine_caller caller;
	struct ndet_resources held;
	int device = -1;
	/* Nothing waits: no CUDA call at all. */
	ndet_resources_get(&held);
	if (held.pending_pools == 0) {
		ndet_teardown_stop();
		return;
	}
	/* After the runtime's own exit handler, not one call more. */
	if (cudaGetDevice(&device) == cudaErrorCudartUnloading) {
		(void)cudaGetLastError();
		ndet_teardown_stop();
		return;
	}
	ndet_engine_caller_save(&caller);
	ndet_teardown_at_exit();
	ndet_engine_caller_restore(&caller);
}

bool ndet_engine_detach_slot_for_testing(const struct ndet_engine *engine, int writer,
					 uint64_t **slot, uint64_t *epoch)
{
	if (engine->pool == NULL || writer < 0 || writer >= NDET_MAX_RANKS)
		return false;
	*slot = (uint64_t *)(engine->pool + NDET_POOL_DETACH_OFFSET) + writer;
	*epoch = engine->epoch;
	return true;
}

ndet_status_t ndet_engine_destroy_group(struct ndet_engine *const engines[], int count,
					bool barrier)
{
	ndet_status_t status = ndet_engine_quiesce_group(engines, count, barrier);
	for (int i = 0; i < count; i++)
		ndet_engine_release(engines[i]);
	return status;
}

ndet_status_t ndet_engine_destroy(struct ndet_engine *engine, bool barrier)
{
	if (engine == NULL)
		return NDET_OK;
	return ndet_engine_destroy_group(&engine, 1, barrier);
}
