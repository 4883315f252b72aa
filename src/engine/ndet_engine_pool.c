/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The engine's local resources: its device memory and pinned words (counted in
 * ndet_resources), the pool and what each rank publishes of it in the setup, the
 * mappings of its peers' pools and the probe that proves them, the detach words,
 * and how the memory is freed or kept (ndet_teardown_ops).
 */
#include "config.h"

#include "engine/ndet_engine.h"
#include "engine/ndet_engine_internal.h"

#include <stdlib.h>
#include <string.h>

#include "engine/ndet_cuda.h"
#include "kernels/ndet_kernels.h"
#include "common/ndet_log.h"
#include "protocol/ndet_host_table.h"
#include "protocol/ndet_hosts_plan.h"
#include "protocol/ndet_pool_layout.h"
#include "common/ndet_settings.h" /* ndet_fault_t */
#include "protocol/ndet_setup.h"
#include "protocol/ndet_teardown.h"

#define NDET_ENGINE_PROBE_TAG 0x50524f4245000000ull /* "PROBE" */

/* ---------------------------------------------------------------- sizes */

/* The pool's layout: ndet_pool_layout.h (pure, so the host-only engine shares it). */

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
bool ndet_engine_use_device(const struct ndet_engine *engine)
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
cudaError_t ndet_engine_malloc(void *pointer, size_t bytes)
{
	cudaError_t err = cudaMalloc((void **)pointer, bytes);
	if (err == cudaSuccess)
		ndet_resources_allocated(bytes);
	return err;
}

/* Pinned, mapped into every device's address space. */
cudaError_t ndet_engine_host_alloc(void *pointer, size_t bytes)
{
	cudaError_t err =
		cudaHostAlloc((void **)pointer, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
	if (err == cudaSuccess)
		ndet_resources_allocated(bytes);
	return err;
}

/* cudaFree, or cudaFreeHost for `pinned` memory; *pointer becomes NULL. */
void ndet_engine_free_memory(void *pointer, size_t bytes, bool pinned)
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

ndet_local_status_t ndet_engine_alloc(struct ndet_engine *engine)
{
	const struct ndet_engine_config *config = &engine->config;
	ndet_status_t status = NDET_OK;
	if (ndet_pool_memory_bytes(config) > config->max_memory) {
		NDET_WARN(
			"rank %d: pool of %llu bytes exceeds NCCL_DET_MAX_MEMORY=%llu; "
			"raise NCCL_DET_MAX_MEMORY or lower NCCL_DET_POOL_SIZE or NCCL_DET_LL_MAX",
			config->rank, (unsigned long long)ndet_pool_memory_bytes(config),
			(unsigned long long)config->max_memory);
		return NDET_LOCAL_ALLOC_FAILED;
	}
	if (ndet_engine_fault(config, NDET_FAULT_ALLOC)) {
		NDET_WARN(
			"rank %d: NCCL_DET_TEST_FAIL=alloc: pretending the pool allocation failed",
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
	NDET_CUDA_CHECK_GOTO(
		cudaMemsetAsync(engine->pool, 0, engine->data_offset, engine->setup_stream), status,
		cuda_failed);
	if (engine->pool_bytes > engine->data_offset + engine->ll_offset)
		NDET_CUDA_CHECK_GOTO(
			cudaMemsetAsync(engine->pool + engine->data_offset + engine->ll_offset, 0,
					engine->pool_bytes - engine->data_offset -
						engine->ll_offset,
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
	engine->host_status->poison_word = 1ull + (uint64_t)engine->config.rank;
	NDET_CUDA_CHECK_GOTO(ndet_engine_host_alloc(&engine->detach_host, NDET_POOL_DETACH_BYTES),
			     status, alloc_failed);
	NDET_CUDA_CHECK_GOTO(
		cudaHostGetDevicePointer((void **)&engine->host_status_dev, engine->host_status, 0),
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

void ndet_engine_fill_payload(struct ndet_engine *engine, ndet_local_status_t local,
			      struct ndet_setup_payload *payload)
{
	const struct ndet_engine_config *config = &engine->config;
	ndet_setup_payload_identity(payload, config->test_host);
	payload->cuda_device = config->cuda_device;
	payload->rank = config->rank;
	payload->nranks = config->nranks;
	payload->flags = config->setup_flags;
	payload->blocking = config->nonblocking ? 0 : 1;
	payload->settings_hash = config->settings_hash;
	payload->pool_bytes = engine->pool_bytes;
	payload->pool_address = (uint64_t)(uintptr_t)engine->pool;
	payload->flags_offset = 0;
	payload->data_offset = engine->data_offset;

	struct cudaDeviceProp properties;
	if (local == NDET_LOCAL_READY) {
		if (cudaGetDeviceProperties(&properties, config->cuda_device) == cudaSuccess) {
			memcpy(payload->device_uuid, &properties.uuid,
			       sizeof(payload->device_uuid));
			payload->sm_count = properties.multiProcessorCount > 0
						    ? (uint32_t)properties.multiProcessorCount
						    : 1u;
			cudaError_t image;
			if (properties.major < 7) {
				NDET_WARN(
					"rank %d: GPU %d is sm_%d%d; nccl-det needs sm_70 or newer",
					config->rank, config->cuda_device, properties.major,
					properties.minor);
				local = NDET_LOCAL_UNSUPPORTED_GPU;
			} else if ((image = (cudaError_t)ndet_kernel_device_check()) !=
				   cudaSuccess) {
				/* Built for other GPUs: NCCL runs the communicator (the verdict).
				 */
				NDET_WARN("rank %d: GPU %d (sm_%d%d) cannot run this build's "
					  "kernels: %s "
					  "(rebuild with --with-nvcc-gencode for it)",
					  config->rank, config->cuda_device, properties.major,
					  properties.minor, cudaGetErrorString(image));
				local = NDET_LOCAL_UNSUPPORTED_GPU;
			} else if (properties.major >= 9) {
				payload->flags |= NDET_SETUP_FLAG_SM90;
				if ((image = (cudaError_t)ndet_kernel_fp8_check()) == cudaSuccess)
					payload->flags |= NDET_SETUP_FLAG_FP8;
				else
					NDET_WARN(
						"rank %d: GPU %d (sm_%d%d) cannot run this build's "
						"fp8 kernels: %s (fp8 reductions go to NCCL; "
						"rebuild with --with-nvcc-fp8-gencode for it)",
						config->rank, config->cuda_device, properties.major,
						properties.minor, cudaGetErrorString(image));
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

/*
 * The engine's local view (ndet_engine_internal.h) from the agreed table: its host's
 * ranks, by ndet_host_table (the same hosts the verdict judged).  false when out of
 * memory, or when the host holds more ranks than the kernels reduce (the verdict
 * refuses that table before any rank maps: a caller bug if seen here).
 */
bool ndet_engine_set_local(struct ndet_engine *engine, const struct ndet_setup_payload *table,
			   int nranks)
{
	struct ndet_host_table *hosts = ndet_host_table_create(nranks);
	bool ok = hosts != NULL &&
		  ndet_host_table_build(hosts, table, nranks, engine->config.rank) &&
		  hosts->my_count >= 1 && hosts->my_count <= NDET_MAX_RANKS;
	if (ok) {
		engine->local.index = hosts->my_local;
		engine->local.count = hosts->my_count;
		engine->local.nhosts = hosts->nhosts;
		for (int l = 0; l < hosts->my_count; l++)
			engine->local.ranks[l] = hosts->my_ranks[l];
		engine->local_config = engine->config;
		engine->local_config.rank = engine->local.index;
		/* The abort words hold local indices, as the kernels' ndet_fail writes them. */
		if (engine->host_status != NULL)
			engine->host_status->poison_word = 1ull + (uint64_t)engine->local.index;
		engine->local_config.nranks = engine->local.count;
		engine->host = hosts->my_host;
		/* Every host holds as many ranks: the verdict lets no other table divert. */
		if (hosts->nhosts > 1 && hosts->same_size) {
			engine->host_ranks = malloc((size_t)nranks * sizeof(int));
			if (engine->host_ranks != NULL)
				memcpy(engine->host_ranks, hosts->ranks,
				       (size_t)nranks * sizeof(int));
			ok = engine->host_ranks != NULL;
		}
	}
	if (!ok)
		NDET_WARN("rank %d: cannot build the hosts of the setup table (%s)",
			  engine->config.rank,
			  hosts == NULL || hosts->my_count <= NDET_MAX_RANKS
				  ? "out of memory"
				  : "too many ranks on this host");
	ndet_host_table_destroy(hosts);
	return ok;
}

/*
 * The staging of a communicator across hosts (doc/multihost-design.md, "Memory"):
 * NCCL_DET_HOSTS_STAGING bytes beside the pool, counted with it in
 * NCCL_DET_MAX_MEMORY.  Only this rank's kernels and NCCL's sends and receives touch
 * it.  A refusal here fails the setup's mapping round, on every rank alike.
 */
bool ndet_engine_alloc_staging(struct ndet_engine *engine)
{
	const struct ndet_engine_config *config = &engine->config;
	if (engine->local.nhosts < 2)
		return true;
	if (!ndet_setup_staging_fits(config, engine->pool_bytes, engine->local.nhosts,
				     engine->local.count))
		return false;
	engine->host_transfers =
		calloc((size_t)engine->local.nhosts, sizeof(*engine->host_transfers));
	if (engine->host_transfers == NULL) {
		NDET_WARN("rank %d: out of memory for the transfers of %d hosts", config->rank,
			  engine->local.nhosts);
		return false;
	}
	cudaError_t err = ndet_engine_malloc(&engine->staging, config->hosts_staging);
	if (err != cudaSuccess) {
		NDET_WARN("rank %d: cannot allocate the %llu-byte multi-host staging: %s",
			  config->rank, (unsigned long long)config->hosts_staging,
			  cudaGetErrorString(err));
		(void)cudaGetLastError();
		engine->staging = NULL;
		return false;
	}
	/* The second stream of a call across hosts, and the events that join it. */
	err = cudaStreamCreateWithFlags(&engine->stage_stream, cudaStreamNonBlocking);
	for (int i = 0; i < 2 && err == cudaSuccess; i++)
		err = cudaEventCreateWithFlags(&engine->order_events[i], cudaEventDisableTiming);
	if (err != cudaSuccess) {
		NDET_WARN("rank %d: cannot create the stream of the multi-host stages: %s",
			  config->rank, cudaGetErrorString(err));
		(void)cudaGetLastError();
		return false;
	}
	/*
	 * Zeroed before any stage runs (the setup's later rounds synchronise this stream):
	 * a status word no receive wrote, after NCCL failed a stage, reads as no failure.
	 */
	err = cudaMemsetAsync(engine->staging, 0, config->hosts_staging, engine->setup_stream);
	if (err != cudaSuccess) {
		NDET_WARN("rank %d: cannot clear the multi-host staging: %s", config->rank,
			  cudaGetErrorString(err));
		(void)cudaGetLastError();
		return false;
	}
	return true;
}

/* The local index of global rank `rank`, or -1 when it is not on this host. */
int ndet_engine_local_index(const struct ndet_engine *engine, int rank)
{
	for (int l = 0; l < engine->local.count; l++)
		if (engine->local.ranks[l] == rank)
			return l;
	return -1;
}

/*
 * Enable peer access from our device to a same-process peer's on another device
 * (q, its global rank, for the log).
 */
static bool ndet_engine_enable_peer(const struct ndet_engine *engine, int device, int q)
{
	if (device == engine->config.cuda_device)
		return true;
	cudaError_t err = cudaDeviceEnablePeerAccess(device, 0);
	if (err == cudaErrorPeerAccessAlreadyEnabled) {
		(void)cudaGetLastError();
		return true;
	}
	if (err == cudaSuccess)
		return true;
	NDET_WARN("rank %d: peer access to device %d (rank %d) failed: %s", engine->config.rank,
		  device, q, cudaGetErrorString(err));
	(void)cudaGetLastError();
	return false;
}

/* Open the pool of q (global rank) through CUDA IPC into slot l; NULL on failure. */
static char *ndet_engine_open_peer(struct ndet_engine *engine,
				   const struct ndet_setup_payload *record, int l, int q)
{
	const struct ndet_engine_config *config = &engine->config;
	if (ndet_engine_fault(config, NDET_FAULT_IPC_OPEN)) {
		NDET_WARN("rank %d: NCCL_DET_TEST_FAIL=ipc_open: pretending the pool of rank %d "
			  "cannot be opened",
			  config->rank, q);
		return NULL;
	}
	cudaIpcMemHandle_t handle;
	memcpy(&handle, record->ipc_handle, sizeof(handle));
	void *mapped = NULL;
	cudaError_t err = cudaIpcOpenMemHandle(&mapped, handle, cudaIpcMemLazyEnablePeerAccess);
	if (err != cudaSuccess) {
		NDET_WARN("rank %d: cudaIpcOpenMemHandle of rank %d's pool failed: %s",
			  config->rank, q, cudaGetErrorString(err));
		(void)cudaGetLastError();
		return NULL;
	}
	ndet_resources_imported(1);
	engine->peer_ipc_base[l] = mapped;
	return mapped;
}

/*
 * Open or point at the pool of every rank of this host, into the slot of its local
 * index.  Ranks on other hosts have no slot: nothing of theirs is reachable, and
 * nothing is opened for them.  Returns false if any peer failed.
 */
bool ndet_engine_map_peers(struct ndet_engine *engine, const struct ndet_setup_payload *table)
{
	const struct ndet_engine_config *config = &engine->config;
	bool ok = true;
	for (int l = 0; l < engine->local.count; l++) {
		const int q = engine->local.ranks[l];
		const ndet_peer_kind_t kind = ndet_setup_peer_kind(table, config->rank, q);
		engine->peer_kind[l] = kind;
		char *base = NULL;
		if (kind == NDET_PEER_REMOTE) {
			ok = false; /* not of this host after all: never mapped */
			continue;
		} else if (kind == NDET_PEER_SELF) {
			base = engine->pool;
		} else if (kind == NDET_PEER_SAME_PROCESS) {
			/* cudaIpcOpenMemHandle refuses our own process's handles by design. */
			base = (char *)(uintptr_t)table[q].pool_address;
			if (!ndet_engine_enable_peer(engine, table[q].cuda_device, q)) {
				ok = false;
				continue;
			}
		} else {
			base = ndet_engine_open_peer(engine, &table[q], l, q);
			if (base == NULL) {
				ok = false;
				continue;
			}
		}
		engine->peer_flags[l] = (struct ndet_flags *)(base + table[q].flags_offset);
		engine->peer_lanes[l] = base + table[q].data_offset;
	}
	return ok;
}

static uint64_t ndet_engine_probe_token(int writer, int owner)
{
	return NDET_ENGINE_PROBE_TAG | ((uint64_t)writer << 12) | (uint64_t)owner;
}

/* Does the probe go between me and local index l (another rank of my host)? */
static bool ndet_engine_probes(const struct ndet_engine *engine, int l)
{
	return l != engine->local.index && engine->peer_kind[l] != NDET_PEER_REMOTE;
}

/*
 * Write my token into every local peer's probe slot through the mapping we will use:
 * slot = my local index; the token names writer and owner by global rank.
 */
bool ndet_engine_probe_write(struct ndet_engine *engine)
{
	const struct ndet_engine_config *config = &engine->config;
	uint64_t tokens[NDET_MAX_RANKS];
	bool ok = true;
	for (int l = 0; l < engine->local.count; l++) {
		if (!ndet_engine_probes(engine, l))
			continue;
		const int q = engine->local.ranks[l];
		tokens[l] = ndet_engine_probe_token(config->rank, q);
		if (ndet_engine_fault(config, NDET_FAULT_PROBE))
			tokens[l] ^= 0xdead; /* the owner must notice */
		cudaError_t err = cudaMemcpyAsync(
			&engine->peer_flags[l]->probe[engine->local.index], &tokens[l],
			sizeof(tokens[l]), cudaMemcpyDefault, engine->setup_stream);
		if (err != cudaSuccess) {
			NDET_WARN("rank %d: probe write into rank %d's pool failed: %s",
				  config->rank, q, cudaGetErrorString(err));
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

/* Every local peer's token must be in my pool, in the slot of its local index, exactly. */
bool ndet_engine_probe_verify(struct ndet_engine *engine)
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
	for (int l = 0; l < engine->local.count; l++) {
		const int q = engine->local.ranks[l];
		if (ndet_engine_probes(engine, l) &&
		    probe[l] != ndet_engine_probe_token(q, config->rank)) {
			NDET_WARN("rank %d: probe word of rank %d is 0x%llx, expected 0x%llx: its "
				  "writes do not reach this GPU's memory",
				  config->rank, q, (unsigned long long)probe[l],
				  (unsigned long long)ndet_engine_probe_token(q, config->rank));
			ok = false;
		}
	}
	return ok;
}

/* Close our mappings of peers' pools: only once no kernel of ours can use them. */
void ndet_engine_close_peers(struct ndet_engine *engine)
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
 * Our last access to each peer pool we imported: "detached" into our slot (our local
 * index) of its detach area (ndet_teardown.h), so that its owner may free it without
 * a barrier.
 * Only once no kernel of ours can run (quiesce), right before the mappings close.
 * Copies on the private stream, which alone is synchronised: never the device.
 */
void ndet_engine_detach_peers(struct ndet_engine *engine)
{
	const struct ndet_engine_config *config = &engine->config;
	bool any = false, ok = true;
	if (engine->detach_host == NULL)
		return;
	for (int l = 0; l < engine->local.count; l++) {
		if (engine->peer_ipc_base[l] == NULL)
			continue;
		const int q = engine->local.ranks[l];
		engine->detach_host[l] = ndet_teardown_detach_word(engine->epoch, config->rank, q);
		char *slot = (char *)engine->peer_flags[l] + NDET_POOL_DETACH_OFFSET +
			     (size_t)engine->local.index * sizeof(uint64_t);
		cudaError_t err = cudaMemcpyAsync(slot, &engine->detach_host[l], sizeof(uint64_t),
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
	if (engine->staging != NULL)
		bytes += engine->config.hosts_staging;
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
	for (int i = 0; i < 2; i++)
		if (engine->order_events[i] != NULL)
			NDET_CUDA_CHECK_WARN(cudaEventDestroy(engine->order_events[i]));
	if (engine->stage_stream != NULL)
		NDET_CUDA_CHECK_WARN(cudaStreamDestroy(engine->stage_stream));
	free(engine->owned_context);
	free(engine->barrier_words);
	ndet_teardown_unreserve(engine->reserved_share);
	free(engine->host_ranks);
	free(engine->host_transfers);
	free(engine);
}

/* ndet_teardown_ops.free: no kernel and no peer can use the engine's memory. */
void ndet_engine_free_all(void *member)
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
	ndet_engine_free_memory(&engine->staging, engine->config.hosts_staging, false);
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

const struct ndet_teardown_ops ndet_engine_teardown_ops = {
	.free = ndet_engine_free_all,
	.abandon = ndet_engine_abandon,
	.read_detach = ndet_engine_read_detach,
	.process_gone = ndet_teardown_process_gone,
};
