/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Engine setup, launch and teardown (see ndet_engine.h).
 *
 * Setup runs four all-gather rounds, every one of them on every rank whatever
 * happened locally, so a local failure never leaves a peer waiting in an exchange:
 *   1. fixed-size headers (magic, format version, payload length);
 *   2. payloads, judged by ndet_setup_evaluate() into one verdict;
 *   3. "I mapped every peer and wrote my probe word into its pool";
 *   4. "I found every peer's probe word in my pool".
 * A failure in round 3 or 4 on any rank makes every rank fall back.
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
#include "ndet_settings.h" /* ndet_fault_t */

#define NDET_ENGINE_LANE_ALIGN 256u
#define NDET_ENGINE_PROBE_TAG 0x50524f4245000000ull /* "PROBE" */

struct ndet_engine {
	struct ndet_engine_config config;
	ndet_engine_allgather_fn allgather;
	void *context;

	char *pool; /* flags at 0, lanes at data_offset */
	uint64_t pool_bytes;
	uint64_t data_offset;
	uint64_t lane_bytes;
	uint64_t *step_counters;                  /* device, one per block */
	struct ndet_host_status *host_status;     /* host view */
	struct ndet_host_status *host_status_dev; /* device view */
	void *exchange;                           /* device buffer for the all-gathers */
	size_t exchange_bytes;

	struct ndet_flags *peer_flags[NDET_MAX_RANKS];
	char *peer_lanes[NDET_MAX_RANKS];
	void *peer_ipc_base[NDET_MAX_RANKS]; /* to cudaIpcCloseMemHandle */
	ndet_peer_kind_t peer_kind[NDET_MAX_RANKS];

	cudaStream_t last_stream;
	cudaEvent_t order_event;
	bool has_last_stream;
};

/* ---------------------------------------------------------------- sizes */

static uint64_t ndet_engine_flags_bytes(void)
{
	return (sizeof(struct ndet_flags) + 4095) / 4096 * 4096;
}

static uint64_t ndet_engine_lane_bytes(const struct ndet_engine_config *config)
{
	return config->pool_size / (uint64_t)config->max_blocks / NDET_ENGINE_LANE_ALIGN *
	       NDET_ENGINE_LANE_ALIGN;
}

uint64_t ndet_engine_memory_bytes(const struct ndet_engine_config *config)
{
	return ndet_engine_flags_bytes() +
	       ndet_engine_lane_bytes(config) * (uint64_t)config->max_blocks +
	       NDET_KERNEL_MAX_BLOCKS * sizeof(uint64_t);
}

static bool ndet_engine_fault(const struct ndet_engine_config *config, unsigned fault)
{
	return (config->test_fail & fault) != 0 &&
	       (config->test_fail_rank < 0 || config->test_fail_rank == config->rank);
}

/* ---------------------------------------------------------------- identity */

static void ndet_engine_read_boot_id(char *buffer, size_t size)
{
	buffer[0] = '\0';
	FILE *file = fopen("/proc/sys/kernel/random/boot_id", "r");
	if (file == NULL)
		return;
	if (fgets(buffer, (int)size, file) == NULL)
		buffer[0] = '\0';
	fclose(file);
	buffer[strcspn(buffer, "\n")] = '\0';
}

static uint64_t ndet_engine_namespace(const char *path)
{
	struct stat info;
	if (stat(path, &info) != 0)
		return 0; /* unknown: the evaluation does not refuse on it */
	return (uint64_t)info.st_ino;
}

/* ---------------------------------------------------------------- exchange */

/* All-gather `bytes` of host data through the engine's device exchange buffer. */
static ndet_status_t ndet_engine_exchange(struct ndet_engine *engine, const void *mine,
					  void *all, size_t bytes)
{
	ndet_status_t status = NDET_OK;
	const int nranks = engine->config.nranks;
	char *send = (char *)engine->exchange;
	char *recv = send + bytes;
	if (bytes * (size_t)(nranks + 1) > engine->exchange_bytes)
		return NDET_ERR_INTERNAL;
	NDET_CUDA_CHECK_GOTO(cudaMemcpy(send, mine, bytes, cudaMemcpyHostToDevice), status, out);
	status = engine->allgather(engine->context, send, recv, bytes);
	if (status != NDET_OK) {
		NDET_WARN("rank %d: setup exchange of %zu bytes failed: %s", engine->config.rank,
			  bytes, ndet_status_name(status));
		goto out;
	}
	NDET_CUDA_CHECK_GOTO(cudaMemcpy(all, recv, bytes * (size_t)nranks, cudaMemcpyDeviceToHost),
			     status, out);
out:
	return status;
}

/* One int per rank; returns the lowest rank whose value is nonzero, or -1. */
static ndet_status_t ndet_engine_agree(struct ndet_engine *engine, int32_t mine,
				       int *failing_rank, int32_t *failing_value)
{
	int32_t all[4096]; /* nranks <= 4096, checked at create */
	*failing_rank = -1;
	ndet_status_t status = ndet_engine_exchange(engine, &mine, all, sizeof(mine));
	if (status != NDET_OK)
		return status;
	for (int r = 0; r < engine->config.nranks; r++) {
		if (all[r] != 0) {
			*failing_rank = r;
			*failing_value = all[r];
			break;
		}
	}
	return NDET_OK;
}

/* ---------------------------------------------------------------- local resources */

static ndet_local_status_t ndet_engine_alloc(struct ndet_engine *engine)
{
	const struct ndet_engine_config *config = &engine->config;
	ndet_status_t status = NDET_OK;
	if (ndet_engine_memory_bytes(config) > config->max_memory) {
		NDET_WARN("rank %d: pool of %llu bytes exceeds NCCL_DET_MAX_MEMORY=%llu; "
			  "raise NCCL_DET_MAX_MEMORY or lower NCCL_DET_POOL_SIZE",
			  config->rank, (unsigned long long)ndet_engine_memory_bytes(config),
			  (unsigned long long)config->max_memory);
		return NDET_LOCAL_ALLOC_FAILED;
	}
	if (ndet_engine_fault(config, NDET_FAULT_ALLOC)) {
		NDET_WARN("rank %d: NCCL_DET_TEST_FAIL=alloc: pretending the pool allocation failed",
			  config->rank);
		return NDET_LOCAL_ALLOC_FAILED;
	}
	engine->data_offset = ndet_engine_flags_bytes();
	engine->lane_bytes = ndet_engine_lane_bytes(config);
	engine->pool_bytes = engine->data_offset + engine->lane_bytes * (uint64_t)config->max_blocks;

	/* Plain cudaMalloc: exportable whatever the application's allocator does. */
	NDET_CUDA_CHECK_GOTO(cudaMalloc((void **)&engine->pool, engine->pool_bytes), status,
			     alloc_failed);
	/* Zero the flags before any peer can see the pool: a stale flag is a wrong step. */
	NDET_CUDA_CHECK_GOTO(cudaMemset(engine->pool, 0, engine->data_offset), status, cuda_failed);
	NDET_CUDA_CHECK_GOTO(cudaMalloc((void **)&engine->step_counters,
					NDET_KERNEL_MAX_BLOCKS * sizeof(uint64_t)),
			     status, alloc_failed);
	NDET_CUDA_CHECK_GOTO(cudaMemset(engine->step_counters, 0,
					NDET_KERNEL_MAX_BLOCKS * sizeof(uint64_t)),
			     status, cuda_failed);
	NDET_CUDA_CHECK_GOTO(cudaHostAlloc((void **)&engine->host_status,
					   sizeof(struct ndet_host_status),
					   cudaHostAllocMapped | cudaHostAllocPortable),
			     status, alloc_failed);
	memset((void *)engine->host_status, 0, sizeof(struct ndet_host_status));
	NDET_CUDA_CHECK_GOTO(cudaHostGetDevicePointer((void **)&engine->host_status_dev,
						      engine->host_status, 0),
			     status, cuda_failed);
	NDET_CUDA_CHECK_GOTO(cudaEventCreateWithFlags(&engine->order_event, cudaEventDisableTiming),
			     status, cuda_failed);
	NDET_CUDA_CHECK_GOTO(cudaDeviceSynchronize(), status, cuda_failed);
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
	memset(payload, 0, sizeof(*payload));
	if (gethostname(payload->hostname, sizeof(payload->hostname) - 1) != 0)
		snprintf(payload->hostname, sizeof(payload->hostname), "unknown");
	ndet_engine_read_boot_id(payload->boot_id, sizeof(payload->boot_id));
	payload->pid = (uint64_t)getpid();
	payload->pid_namespace = ndet_engine_namespace("/proc/self/ns/pid");
	payload->ipc_namespace = ndet_engine_namespace("/proc/self/ns/ipc");
	payload->cuda_device = config->cuda_device;
	payload->rank = config->rank;
	payload->nranks = config->nranks;
	payload->library_version = NCCL_DET_VERSION_CODE;
	payload->settings_hash = config->settings_hash;
	payload->pool_bytes = engine->pool_bytes;
	payload->pool_address = (uint64_t)(uintptr_t)engine->pool;
	payload->flags_offset = 0;
	payload->data_offset = engine->data_offset;

	struct cudaDeviceProp properties;
	if (local == NDET_LOCAL_READY) {
		if (cudaGetDeviceProperties(&properties, config->cuda_device) == cudaSuccess) {
			memcpy(payload->device_uuid, &properties.uuid, sizeof(payload->device_uuid));
			if (properties.major < 7) {
				NDET_WARN("rank %d: GPU %d is sm_%d%d; nccl-det needs sm_70 or newer",
					  config->rank, config->cuda_device, properties.major,
					  properties.minor);
				local = NDET_LOCAL_UNSUPPORTED_GPU;
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
	bool ok = true;
	for (int q = 0; q < config->nranks; q++) {
		if (q == config->rank)
			continue;
		uint64_t token = ndet_engine_probe_token(config->rank, q);
		if (ndet_engine_fault(config, NDET_FAULT_PROBE))
			token ^= 0xdead; /* the owner must notice */
		cudaError_t err = cudaMemcpy(&engine->peer_flags[q]->probe[config->rank], &token,
					     sizeof(token), cudaMemcpyHostToDevice);
		if (err != cudaSuccess) {
			NDET_WARN("rank %d: probe write into rank %d's pool failed: %s", config->rank,
				  q, cudaGetErrorString(err));
			(void)cudaGetLastError();
			ok = false;
		}
	}
	if (cudaDeviceSynchronize() != cudaSuccess) {
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
	cudaError_t err = cudaMemcpy(probe, own->probe, sizeof(probe), cudaMemcpyDeviceToHost);
	if (err != cudaSuccess) {
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

/* Undo everything local; the pool is freed only when `free_pool`. */
static void ndet_engine_release(struct ndet_engine *engine, bool free_pool)
{
	for (int q = 0; q < NDET_MAX_RANKS; q++) {
		if (engine->peer_ipc_base[q] != NULL && free_pool)
			NDET_CUDA_CHECK_WARN(cudaIpcCloseMemHandle(engine->peer_ipc_base[q]));
		engine->peer_ipc_base[q] = NULL;
	}
	if (free_pool) {
		if (engine->order_event != NULL)
			NDET_CUDA_CHECK_WARN(cudaEventDestroy(engine->order_event));
		if (engine->exchange != NULL)
			NDET_CUDA_CHECK_WARN(cudaFree(engine->exchange));
		if (engine->step_counters != NULL)
			NDET_CUDA_CHECK_WARN(cudaFree(engine->step_counters));
		if (engine->pool != NULL)
			NDET_CUDA_CHECK_WARN(cudaFree(engine->pool));
		if (engine->host_status != NULL)
			NDET_CUDA_CHECK_WARN(cudaFreeHost((void *)engine->host_status));
	} else if (engine->pool != NULL) {
		NDET_INFO(NDET_SUBSYS_ALLOC,
			  "rank %d: pool of %llu bytes quarantined until exit (a peer or kernel "
			  "may still use it)",
			  engine->config.rank, (unsigned long long)engine->pool_bytes);
	}
	free(engine);
}

/* ---------------------------------------------------------------- create */

static void ndet_engine_set_verdict(struct ndet_setup_verdict *verdict,
				    ndet_verdict_reason_t reason, int rank, uint32_t detail)
{
	verdict->reason = reason;
	verdict->offending_rank = rank;
	verdict->detail = detail;
}

ndet_status_t ndet_engine_create(const struct ndet_engine_config *config,
				 ndet_engine_allgather_fn allgather, void *context,
				 struct ndet_engine **engine_out, struct ndet_setup_verdict *verdict)
{
	ndet_status_t status = NDET_OK;
	struct ndet_setup_header *headers = NULL;
	struct ndet_setup_payload *table = NULL;
	int saved_device = -1;
	*engine_out = NULL;
	ndet_engine_set_verdict(verdict, NDET_VERDICT_OK, -1, 0);

	if (config->nranks < 1 || config->rank < 0 || config->rank >= config->nranks ||
	    config->nranks > 4096 || allgather == NULL || config->max_blocks < 1 ||
	    config->max_blocks > NDET_KERNEL_MAX_BLOCKS)
		return NDET_ERR_INVALID_ARGUMENT;

	struct ndet_engine *engine = calloc(1, sizeof(*engine));
	if (engine == NULL)
		return NDET_ERR_SYSTEM;
	engine->config = *config;
	engine->allgather = allgather;
	engine->context = context;

	/* Work on the engine's device; give the caller's current device back at the end. */
	NDET_CUDA_CHECK_GOTO(cudaGetDevice(&saved_device), status, fail);
	if (saved_device != config->cuda_device)
		NDET_CUDA_CHECK_GOTO(cudaSetDevice(config->cuda_device), status, fail);

	/* The exchange buffer is needed by every round: without it we cannot even agree. */
	engine->exchange_bytes = sizeof(struct ndet_setup_payload) * (size_t)(config->nranks + 1);
	NDET_CUDA_CHECK_GOTO(cudaMalloc(&engine->exchange, engine->exchange_bytes), status, fail);

	ndet_local_status_t local = NDET_LOCAL_READY;
	if (config->nranks > NDET_MAX_RANKS)
		local = NDET_LOCAL_TOO_MANY_RANKS;
	else
		local = ndet_engine_alloc(engine);

	/* Round 1: headers. */
	headers = calloc((size_t)config->nranks, sizeof(*headers));
	table = calloc((size_t)config->nranks, sizeof(*table));
	if (headers == NULL || table == NULL) {
		status = NDET_ERR_SYSTEM;
		goto fail;
	}
	struct ndet_setup_header header;
	ndet_setup_header_init(&header, (uint32_t)sizeof(struct ndet_setup_payload));
	status = ndet_engine_exchange(engine, &header, headers, sizeof(header));
	if (status != NDET_OK)
		goto fail;
	for (int r = 0; r < config->nranks; r++) {
		if (ndet_setup_header_check(&headers[r]) != NDET_OK) {
			/* Every rank sees the same headers, so every rank stops here. */
			ndet_engine_set_verdict(verdict, NDET_VERDICT_BAD_RECORD, r,
						headers[r].format_version);
			status = NDET_ERR_UNSUPPORTED;
			goto fail;
		}
	}

	/* Round 2: payloads and the verdict. */
	struct ndet_setup_payload mine;
	ndet_engine_fill_payload(engine, local, &mine);
	status = ndet_engine_exchange(engine, &mine, table, sizeof(mine));
	if (status != NDET_OK)
		goto fail;
	for (int r = 0; r < config->nranks; r++) {
		struct ndet_setup_payload parsed;
		if (ndet_setup_payload_parse(&table[r], sizeof(table[r]), &parsed) != NDET_OK) {
			ndet_engine_set_verdict(verdict, NDET_VERDICT_BAD_RECORD, r, 0);
			status = NDET_ERR_UNSUPPORTED;
			goto fail;
		}
	}
	ndet_setup_evaluate(table, config->nranks, verdict);
	if (verdict->reason != NDET_VERDICT_OK) {
		status = NDET_ERR_UNSUPPORTED;
		goto fail;
	}

	/* Round 3: mapped and probe written. */
	bool mapped = ndet_engine_map_peers(engine, table);
	bool written = mapped && ndet_engine_probe_write(engine);
	int failing_rank = -1;
	int32_t failing_value = 0;
	status = ndet_engine_agree(engine, written ? 0 : (int32_t)NDET_LOCAL_MAP_FAILED,
				   &failing_rank, &failing_value);
	if (status != NDET_OK)
		goto fail;
	if (failing_rank >= 0) {
		ndet_engine_set_verdict(verdict, NDET_VERDICT_LOCAL_FAILURE, failing_rank,
					(uint32_t)failing_value);
		status = NDET_ERR_UNSUPPORTED;
		goto fail;
	}

	/* Round 4: every probe arrived. */
	bool verified = ndet_engine_probe_verify(engine);
	status = ndet_engine_agree(engine, verified ? 0 : (int32_t)NDET_LOCAL_PROBE_FAILED,
				   &failing_rank, &failing_value);
	if (status != NDET_OK)
		goto fail;
	if (failing_rank >= 0) {
		ndet_engine_set_verdict(verdict, NDET_VERDICT_LOCAL_FAILURE, failing_rank,
					(uint32_t)failing_value);
		status = NDET_ERR_UNSUPPORTED;
		goto fail;
	}

	NDET_INFO(NDET_SUBSYS_SETUP,
		  "rank %d/%d: engine ready on device %d, pool %llu bytes, %d lanes of %llu bytes",
		  config->rank, config->nranks, config->cuda_device,
		  (unsigned long long)engine->pool_bytes, config->max_blocks,
		  (unsigned long long)engine->lane_bytes);
	free(headers);
	free(table);
	if (saved_device >= 0 && saved_device != config->cuda_device)
		NDET_CUDA_CHECK_WARN(cudaSetDevice(saved_device));
	*engine_out = engine;
	return NDET_OK;

fail:
	if (status == NDET_ERR_UNSUPPORTED) {
		NDET_INFO(NDET_SUBSYS_SETUP, "rank %d: ranks agreed not to divert: %s (rank %d)",
			  config->rank, ndet_verdict_reason_name(verdict->reason),
			  verdict->offending_rank);
	}
	free(headers);
	free(table);
	/*
	 * Peers may have mapped our pool before the refusal became known; they close
	 * their mappings before returning, but not necessarily before we get here, so
	 * only free the pool when no peer ever saw it (the verdict came before round 3).
	 */
	ndet_engine_release(engine, verdict->reason != NDET_VERDICT_LOCAL_FAILURE);
	if (saved_device >= 0 && saved_device != config->cuda_device)
		NDET_CUDA_CHECK_WARN(cudaSetDevice(saved_device));
	return status;
}

/* ---------------------------------------------------------------- launch */

ndet_status_t ndet_engine_plan(const struct ndet_engine *engine, size_t count,
			       ndet_dtype_t dtype, ndet_op_t op, struct ndet_plan *plan)
{
	struct ndet_plan_params params = {
		.count = count,
		.dtype = dtype,
		.op = op,
		.nranks = engine->config.nranks,
		.oneshot_max = engine->config.oneshot_max,
		.max_blocks = engine->config.max_blocks,
		.lane_bytes = engine->lane_bytes,
	};
	return ndet_plan_make(&params, plan);
}

static void ndet_engine_fill_args(const struct ndet_engine *engine, const struct ndet_plan *plan,
				  const void *sendbuff, void *recvbuff, size_t count,
				  ndet_dtype_t dtype, ndet_op_t op, struct ndet_kernel_args *args)
{
	memset(args, 0, sizeof(*args));
	args->sendbuff = sendbuff;
	args->recvbuff = recvbuff;
	args->count = count;
	args->chunk_elems = plan->chunk_elems;
	args->steps = plan->steps;
	args->lane_bytes = engine->lane_bytes;
	args->timeout_ns = engine->config.timeout_ms * 1000000ull;
	args->dtype = (int32_t)dtype;
	args->op = (int32_t)op;
	args->path = (int32_t)plan->path;
	args->nranks = engine->config.nranks;
	args->rank = engine->config.rank;
	args->blocks = plan->blocks;
	args->signature = plan->signature;
	args->debug_delay_ns = engine->config.debug_delay_ns;
	args->step_counters = engine->step_counters;
	args->host_status = engine->host_status_dev;
	for (int r = 0; r < engine->config.nranks; r++) {
		args->flags[r] = engine->peer_flags[r];
		args->lanes[r] = engine->peer_lanes[r];
	}
}

/*
 * Calls on one engine must run in issue order even when issued on different streams
 * (their kernels share step counters and lanes): make the new stream wait for the
 * previous one.  An event recorded outside a capture cannot be waited on inside it,
 * so while capturing the caller's stream order is trusted (the shim serialises).
 */
static ndet_status_t ndet_engine_order(struct ndet_engine *engine, cudaStream_t stream)
{
	ndet_status_t status = NDET_OK;
	if (engine->has_last_stream && engine->last_stream != stream) {
		enum cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
		NDET_CUDA_CHECK_GOTO(cudaStreamIsCapturing(stream, &capture), status, out);
		if (capture == cudaStreamCaptureStatusNone) {
			NDET_CUDA_CHECK_GOTO(cudaEventRecord(engine->order_event, engine->last_stream),
					     status, out);
			NDET_CUDA_CHECK_GOTO(cudaStreamWaitEvent(stream, engine->order_event, 0),
					     status, out);
		}
	}
	engine->last_stream = stream;
	engine->has_last_stream = true;
out:
	return status;
}

ndet_status_t ndet_engine_allreduce(struct ndet_engine *engine, const void *sendbuff,
				    void *recvbuff, size_t count, ndet_dtype_t dtype,
				    ndet_op_t op, cudaStream_t stream)
{
	ndet_status_t status = ndet_engine_error(engine, NULL);
	int saved_device = -1;
	if (status != NDET_OK)
		return status;
	struct ndet_plan plan;
	status = ndet_engine_plan(engine, count, dtype, op, &plan);
	if (status != NDET_OK)
		return status;
	if (plan.path == NDET_PATH_NONE)
		return NDET_OK;

	NDET_CUDA_CHECK_GOTO(cudaGetDevice(&saved_device), status, out);
	if (saved_device != engine->config.cuda_device)
		NDET_CUDA_CHECK_GOTO(cudaSetDevice(engine->config.cuda_device), status, out);
	status = ndet_engine_order(engine, stream);
	if (status != NDET_OK)
		goto out;
	if (plan.path == NDET_PATH_COPY) {
		if (sendbuff != recvbuff)
			NDET_CUDA_CHECK_GOTO(cudaMemcpyAsync(recvbuff, sendbuff,
							     count * ndet_plan_dtype_size(dtype),
							     cudaMemcpyDeviceToDevice, stream),
					     status, out);
	} else {
		struct ndet_kernel_args args;
		ndet_engine_fill_args(engine, &plan, sendbuff, recvbuff, count, dtype, op, &args);
		NDET_CUDA_CHECK_GOTO((cudaError_t)ndet_kernel_allreduce(&args, stream), status, out);
	}
out:
	if (saved_device >= 0 && saved_device != engine->config.cuda_device)
		NDET_CUDA_CHECK_WARN(cudaSetDevice(saved_device));
	return status;
}

ndet_status_t ndet_engine_allreduce_all_ranks(struct ndet_engine *const *engines, int nranks,
					      const void *const *sendbuffs, void *const *recvbuffs,
					      size_t count, ndet_dtype_t dtype, ndet_op_t op,
					      cudaStream_t stream)
{
	ndet_status_t status = NDET_OK;
	struct ndet_kernel_args *host_args = NULL, *device_args = NULL;
	struct ndet_plan plan;
	if (nranks < 1 || nranks > NDET_MAX_RANKS)
		return NDET_ERR_INVALID_ARGUMENT;
	status = ndet_engine_plan(engines[0], count, dtype, op, &plan);
	if (status != NDET_OK)
		return status;
	if (plan.path != NDET_PATH_ONESHOT && plan.path != NDET_PATH_TWOSHOT)
		return NDET_ERR_INVALID_ARGUMENT;
	host_args = calloc((size_t)nranks, sizeof(*host_args));
	if (host_args == NULL)
		return NDET_ERR_SYSTEM;
	for (int r = 0; r < nranks; r++)
		ndet_engine_fill_args(engines[r], &plan, sendbuffs[r], recvbuffs[r], count, dtype, op,
				      &host_args[r]);
	NDET_CUDA_CHECK_GOTO(cudaMalloc((void **)&device_args, sizeof(*host_args) * (size_t)nranks),
			     status, out);
	NDET_CUDA_CHECK_GOTO(cudaMemcpy(device_args, host_args, sizeof(*host_args) * (size_t)nranks,
					cudaMemcpyHostToDevice),
			     status, out);
	NDET_CUDA_CHECK_GOTO((cudaError_t)ndet_kernel_allreduce_all_ranks(device_args, (int)dtype, (int)op, nranks, plan.blocks, stream),
			     status, out);
	NDET_CUDA_CHECK_GOTO(cudaStreamSynchronize(stream), status, out);
out:
	if (device_args != NULL)
		NDET_CUDA_CHECK_WARN(cudaFree(device_args));
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

bool ndet_engine_error_details(const struct ndet_engine *engine, uint32_t *block, uint32_t *peer,
			       uint64_t *step, uint64_t *observed, uint32_t *phase)
{
	const struct ndet_host_status *h = engine->host_status;
	if (__atomic_load_n(&h->error, __ATOMIC_ACQUIRE) == 0)
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

ndet_status_t ndet_engine_destroy(struct ndet_engine *engine, bool barrier)
{
	ndet_status_t status = NDET_OK;
	if (engine == NULL)
		return NDET_OK;
	int saved_device = -1;
	if (cudaGetDevice(&saved_device) != cudaSuccess) {
		(void)cudaGetLastError();
		saved_device = -1;
	}
	if (saved_device != engine->config.cuda_device)
		NDET_CUDA_CHECK_WARN(cudaSetDevice(engine->config.cuda_device));

	bool poisoned = ndet_engine_error(engine, NULL) != NDET_OK ||
			__atomic_load_n(&engine->host_status->abort, __ATOMIC_ACQUIRE) != 0;
	bool free_pool = false;
	/*
	 * With a barrier, every rank takes part in the final round whatever its local
	 * state (a poisoned rank says so in it): a rank that skipped it would pair its
	 * peers' round with the next exchange on the same communicator.
	 */
	if (barrier) {
		/* Our own kernels first: poll, so a kernel that fails releases us. */
		if (engine->has_last_stream && !poisoned) {
			cudaError_t err = cudaEventRecord(engine->order_event, engine->last_stream);
			if (err == cudaSuccess) {
				while ((err = cudaEventQuery(engine->order_event)) == cudaErrorNotReady) {
					if (ndet_engine_error(engine, NULL) != NDET_OK)
						break;
					usleep(100);
				}
			}
			if (err != cudaSuccess && err != cudaErrorNotReady)
				(void)cudaGetLastError();
		}
		int failing_rank = -1;
		int32_t failing_value = 0;
		poisoned = ndet_engine_error(engine, NULL) != NDET_OK;
		status = ndet_engine_agree(engine, poisoned ? 1 : 0, &failing_rank, &failing_value);
		free_pool = status == NDET_OK && failing_rank < 0;
	}
	const int device = engine->config.cuda_device;
	ndet_engine_release(engine, free_pool || (engine->config.nranks == 1 && !poisoned));
	if (saved_device >= 0 && saved_device != device)
		NDET_CUDA_CHECK_WARN(cudaSetDevice(saved_device));
	return status;
}
