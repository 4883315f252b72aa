/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The host-only engine of the CPU tests (see ndet_fake_backend.h).
 */
#include "config.h"

#include "ndet_fake_backend.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ndet_kernels.h"
#include "ndet_log.h"
#include "ndet_reference.h"
#include "ndet_settings.h"
#include "ndet_setup.h"

#define NDET_FAKE_PROBE_TAG   0x46414b4550000000ull /* "FAKEP" */
#define NDET_FAKE_DATA_OFFSET 4096u

/* A pool: only the probe words; the data path needs no staging on the host. */
struct ndet_fake_pool {
	struct ndet_fake_pool *next_quarantined;
	uint64_t probe[NDET_MAX_RANKS];
};

struct ndet_fake_engine {
	struct ndet_engine_config config;
	ndet_engine_exchange_fn exchange;
	void *exchange_context;
	struct ndet_fake_pool *pool;
	struct ndet_fake_pool *peers[NDET_MAX_RANKS];
	bool shares_process;
	uint32_t error; /* atomics: as the host-mapped words of the real engine */
	uint32_t abort;
};

static pthread_mutex_t ndet_fake_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ndet_fake_pool *ndet_fake_quarantine;
static struct ndet_fake_backend_counters ndet_fake_counts;

static void ndet_fake_count(int *counter)
{
	pthread_mutex_lock(&ndet_fake_lock);
	(*counter)++;
	pthread_mutex_unlock(&ndet_fake_lock);
}

static bool ndet_fake_fault(const struct ndet_engine_config *config, unsigned fault)
{
	return (config->test_fail & fault) != 0 &&
	       (config->test_fail_rank < 0 || config->test_fail_rank == config->rank);
}

static bool ndet_fake_process_per_rank(void)
{
	const char *value = getenv("FAKE_BACKEND_PROCESS_PER_RANK");
	return value != NULL && strcmp(value, "1") == 0;
}

static uint64_t ndet_fake_probe_token(int writer, int owner)
{
	return NDET_FAKE_PROBE_TAG | ((uint64_t)writer << 12) | (uint64_t)owner;
}

/* Freed, or kept until ndet_fake_backend_reset (a peer may still hold a pointer). */
static void ndet_fake_release_pool(struct ndet_fake_pool *pool, bool free_pool)
{
	if (pool == NULL)
		return;
	pthread_mutex_lock(&ndet_fake_lock);
	if (free_pool) {
		ndet_fake_counts.pools_freed++;
	} else {
		ndet_fake_counts.pools_quarantined++;
		pool->next_quarantined = ndet_fake_quarantine;
		ndet_fake_quarantine = pool;
	}
	pthread_mutex_unlock(&ndet_fake_lock);
	if (free_pool)
		free(pool);
}

/* ---------------------------------------------------------------- setup */

static void ndet_fake_prepare(void *member, struct ndet_setup_payload *payload)
{
	struct ndet_fake_engine *engine = member;
	const struct ndet_engine_config *config = &engine->config;
	ndet_local_status_t local = NDET_LOCAL_READY;
	uint64_t bytes = ndet_engine_memory_bytes(config);

	if (config->nranks > NDET_MAX_RANKS) {
		local = NDET_LOCAL_TOO_MANY_RANKS;
	} else if (bytes > config->max_memory) {
		NDET_WARN("rank %d: pool of %llu bytes exceeds NCCL_DET_MAX_MEMORY=%llu; "
			  "raise NCCL_DET_MAX_MEMORY or lower NCCL_DET_POOL_SIZE",
			  config->rank, (unsigned long long)bytes,
			  (unsigned long long)config->max_memory);
		local = NDET_LOCAL_ALLOC_FAILED;
	} else if (ndet_fake_fault(config, NDET_FAULT_ALLOC)) {
		NDET_WARN(
			"rank %d: NCCL_DET_TEST_FAIL=alloc: pretending the pool allocation failed",
			config->rank);
		local = NDET_LOCAL_ALLOC_FAILED;
	} else {
		engine->pool = calloc(1, sizeof(*engine->pool));
		if (engine->pool == NULL)
			local = NDET_LOCAL_ALLOC_FAILED;
	}
	ndet_setup_payload_identity(payload);
	if (ndet_fake_process_per_rank())
		payload->pid = (uint64_t)getpid() * 1000u + (uint64_t)config->rank + 1u;
	payload->cuda_device = config->cuda_device;
	payload->rank = config->rank;
	payload->nranks = config->nranks;
	payload->flags = config->setup_flags;
	payload->settings_hash = config->settings_hash;
	payload->pool_bytes = bytes;
	payload->pool_address = (uint64_t)(uintptr_t)engine->pool;
	payload->flags_offset = 0;
	payload->data_offset = NDET_FAKE_DATA_OFFSET;
	payload->local_status = (uint32_t)local;
}

static bool ndet_fake_map_and_probe(void *member, const struct ndet_setup_payload *table,
				    int nranks)
{
	struct ndet_fake_engine *engine = member;
	const struct ndet_engine_config *config = &engine->config;
	bool ok = true;
	engine->shares_process = ndet_setup_table_shares_process(table, nranks);
	for (int q = 0; q < nranks; q++) {
		ndet_peer_kind_t kind = ndet_setup_peer_kind(table, config->rank, q);
		if (kind == NDET_PEER_IPC && ndet_fake_fault(config, NDET_FAULT_IPC_OPEN)) {
			NDET_WARN(
				"rank %d: NCCL_DET_TEST_FAIL=ipc_open: pretending the pool of rank "
				"%d cannot be opened",
				config->rank, q);
			ok = false;
			continue;
		}
		/* One address space: an "IPC" peer's pool is its published address too. */
		engine->peers[q] = (struct ndet_fake_pool *)(uintptr_t)table[q].pool_address;
	}
	for (int q = 0; q < nranks && ok; q++) {
		if (q == config->rank)
			continue;
		uint64_t token = ndet_fake_probe_token(config->rank, q);
		if (ndet_fake_fault(config, NDET_FAULT_PROBE))
			token ^= 0xdead; /* the owner must notice */
		engine->peers[q]->probe[config->rank] = token;
	}
	return ok;
}

static bool ndet_fake_verify(void *member)
{
	struct ndet_fake_engine *engine = member;
	const struct ndet_engine_config *config = &engine->config;
	bool ok = true;
	for (int q = 0; q < config->nranks; q++) {
		if (q != config->rank &&
		    engine->pool->probe[q] != ndet_fake_probe_token(q, config->rank)) {
			NDET_WARN("rank %d: probe word of rank %d is 0x%llx, expected 0x%llx: its "
				  "writes do not reach this GPU's memory",
				  config->rank, q, (unsigned long long)engine->pool->probe[q],
				  (unsigned long long)ndet_fake_probe_token(q, config->rank));
			ok = false;
		}
	}
	return ok;
}

static void ndet_fake_release(void *member, bool peers_may_have_mapped)
{
	struct ndet_fake_engine *engine = member;
	ndet_fake_release_pool(engine->pool, !peers_may_have_mapped);
	free(engine);
}

static const struct ndet_setup_member_ops ndet_fake_ops = {
	.prepare = ndet_fake_prepare,
	.map_and_probe_write = ndet_fake_map_and_probe,
	.probe_verify = ndet_fake_verify,
	.release = ndet_fake_release,
};

/* The exchange of `count` engines at once, on host buffers (the fake NCCL's memory). */
static ndet_status_t ndet_fake_exchange(struct ndet_fake_engine *const engines[], int count,
					const void *const sends[], void *const recvs[],
					size_t bytes)
{
	void **contexts = calloc((size_t)count, sizeof(*contexts));
	if (contexts == NULL)
		return NDET_ERR_SYSTEM;
	for (int i = 0; i < count; i++)
		contexts[i] = engines[i]->exchange_context;
	ndet_status_t status = engines[0]->exchange(contexts, count, sends, recvs, bytes, NULL);
	free(contexts);
	return status;
}

static ndet_status_t ndet_fake_setup_allgather(void *context, int count, void *const members[],
					       const void *const sends[], void *const recvs[],
					       size_t bytes)
{
	(void)context;
	return ndet_fake_exchange((struct ndet_fake_engine *const *)members, count, sends, recvs,
				  bytes);
}

static void ndet_fake_create_group(struct ndet_backend_member *members, int count,
				   ndet_engine_exchange_fn exchange)
{
	struct ndet_setup_member *setup = calloc((size_t)(count > 0 ? count : 1), sizeof(*setup));
	for (int i = 0; i < count; i++) {
		members[i].engine = NULL;
		members[i].agreed_flags = 0;
		members[i].verdict.reason = NDET_VERDICT_OK;
		members[i].verdict.offending_rank = -1;
		members[i].verdict.detail = 0;
		members[i].status = NDET_ERR_SYSTEM;
		const struct ndet_engine_config *config = &members[i].config;
		if (config->nranks < 1 || config->rank < 0 || config->rank >= config->nranks) {
			members[i].status = NDET_ERR_INVALID_ARGUMENT;
			continue;
		}
		struct ndet_fake_engine *engine = setup != NULL ? calloc(1, sizeof(*engine)) : NULL;
		if (engine == NULL)
			continue;
		engine->config = members[i].config;
		engine->exchange = exchange;
		engine->exchange_context = members[i].exchange_context;
		setup[i].context = engine;
		setup[i].rank = members[i].config.rank;
		setup[i].nranks = members[i].config.nranks;
	}
	if (setup == NULL)
		return;
	/* Members without an engine (invalid, out of memory) are left out: nranks 0. */
	ndet_setup_run(setup, count, &ndet_fake_ops, ndet_fake_setup_allgather, NULL);
	for (int i = 0; i < count; i++) {
		if (setup[i].context == NULL)
			continue;
		members[i].status = setup[i].status;
		members[i].verdict = setup[i].verdict;
		members[i].agreed_flags = setup[i].agreed_flags;
		/* The protocol released every engine it did not finish. */
		if (setup[i].status == NDET_OK) {
			members[i].engine = setup[i].context;
			ndet_fake_count(&ndet_fake_counts.engines_created);
		}
	}
	free(setup);
}

/* ---------------------------------------------------------------- calls */

/* First writer wins, as in the kernels. */
static void ndet_fake_fail(struct ndet_fake_engine *engine, uint32_t kernel_error)
{
	uint32_t expected = NDET_KERNEL_OK;
	__atomic_compare_exchange_n(&engine->error, &expected, kernel_error, false,
				    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

static ndet_status_t ndet_fake_error(void *opaque, uint32_t *kernel_error)
{
	struct ndet_fake_engine *engine = opaque;
	uint32_t error = __atomic_load_n(&engine->error, __ATOMIC_ACQUIRE);
	if (kernel_error != NULL)
		*kernel_error = error;
	return error == NDET_KERNEL_OK ? NDET_OK : NDET_ERR_REMOTE;
}

/* Reduce the calls of `calls` that move `bytes` per rank, with one exchange. */
static void ndet_fake_run_size(struct ndet_backend_call *calls, const int *index, int count,
			       size_t bytes)
{
	struct ndet_fake_engine **engines = calloc((size_t)count, sizeof(*engines));
	const void **sends = calloc((size_t)count, sizeof(*sends));
	void **gathered = calloc((size_t)count, sizeof(*gathered));
	bool ok = engines != NULL && sends != NULL && gathered != NULL;
	for (int k = 0; k < count && ok; k++) {
		struct ndet_backend_call *call = &calls[index[k]];
		engines[k] = call->engine;
		sends[k] = call->sendbuff;
		gathered[k] = malloc(bytes * (size_t)engines[k]->config.nranks);
		ok = gathered[k] != NULL;
	}
	if (ok && ndet_fake_exchange(engines, count, sends, gathered, bytes) != NDET_OK)
		ok = false;
	for (int k = 0; k < count; k++) {
		struct ndet_backend_call *call = &calls[index[k]];
		struct ndet_fake_engine *engine = call->engine;
		call->status = NDET_OK;
		if (!ok) {
			/* What a kernel whose peer vanished reports; the launch itself worked. */
			ndet_fake_fail(engine, NDET_KERNEL_ERR_PEER);
			continue;
		}
		const void *inputs[NDET_MAX_RANKS];
		for (int r = 0; r < engine->config.nranks; r++)
			inputs[r] = (const char *)gathered[k] + (size_t)r * bytes;
		call->status =
			ndet_reference_allreduce(inputs, engine->config.nranks, call->recvbuff,
						 call->count, call->dtype, call->op);
		pthread_mutex_lock(&ndet_fake_lock);
		ndet_fake_counts.allreduces++;
		pthread_mutex_unlock(&ndet_fake_lock);
	}
	for (int k = 0; gathered != NULL && k < count; k++)
		free(gathered[k]);
	free(gathered);
	free(sends);
	free(engines);
}

static void ndet_fake_allreduce_group(struct ndet_backend_call *calls, int count)
{
	int *index = calloc((size_t)(count > 0 ? count : 1), sizeof(*index));
	bool *done = calloc((size_t)(count > 0 ? count : 1), sizeof(*done));
	if (index == NULL || done == NULL) {
		for (int i = 0; i < count; i++)
			calls[i].status = NDET_ERR_SYSTEM;
		goto out;
	}
	for (int i = 0; i < count; i++) {
		struct ndet_fake_engine *engine = calls[i].engine;
		done[i] = true;
		if (ndet_fake_error(engine, NULL) != NDET_OK) {
			calls[i].status = NDET_ERR_REMOTE; /* poisoned: refused at launch */
		} else if (__atomic_load_n(&engine->abort, __ATOMIC_ACQUIRE) != 0) {
			ndet_fake_fail(engine, NDET_KERNEL_ERR_ABORTED);
			calls[i].status = NDET_OK;
		} else if (calls[i].count == 0) {
			calls[i].status = NDET_OK;
		} else {
			done[i] = false;
		}
	}
	/*
	 * Calls of equal size share one exchange: every rank of one communicator moves
	 * the same bytes, so a thread that drives several of its ranks has them all in
	 * the same exchange.
	 */
	for (int i = 0; i < count; i++) {
		if (done[i])
			continue;
		size_t bytes = calls[i].count * ndet_dtype_size(calls[i].dtype);
		int same = 0;
		for (int k = i; k < count; k++) {
			if (!done[k] && calls[k].count * ndet_dtype_size(calls[k].dtype) == bytes) {
				index[same++] = k;
				done[k] = true;
			}
		}
		ndet_fake_run_size(calls, index, same, bytes);
	}
out:
	free(done);
	free(index);
}

static void ndet_fake_abort(void *opaque)
{
	struct ndet_fake_engine *engine = opaque;
	__atomic_store_n(&engine->abort, 1u, __ATOMIC_RELEASE);
}

static bool ndet_fake_poisoned(struct ndet_fake_engine *engine)
{
	return ndet_fake_error(engine, NULL) != NDET_OK ||
	       __atomic_load_n(&engine->abort, __ATOMIC_ACQUIRE) != 0;
}

static ndet_status_t ndet_fake_destroy_group(void *const opaque[], int count, bool barrier)
{
	ndet_status_t status = NDET_OK;
	const size_t slots = (size_t)(count > 0 ? count : 1);
	void **meeting = calloc(slots, sizeof(*meeting));
	int *nranks = calloc(slots, sizeof(*nranks));
	int32_t *words = calloc(slots, sizeof(*words));
	bool *clean = calloc(slots, sizeof(*clean));
	int meetings = 0;
	if (meeting == NULL || nranks == NULL || words == NULL || clean == NULL) {
		status = NDET_ERR_SYSTEM;
		barrier = false;
	}
	for (int i = 0; i < count && barrier; i++) {
		struct ndet_fake_engine *engine = opaque[i];
		if (engine->config.nranks < 2)
			continue;
		words[meetings] = ndet_fake_poisoned(engine) ? 1 : 0;
		nranks[meetings] = engine->config.nranks;
		meeting[meetings++] = engine;
	}
	if (meetings > 0)
		status = ndet_setup_agree(meetings, meeting, nranks, words, clean,
					  ndet_fake_setup_allgather, NULL);
	for (int i = 0; i < count; i++) {
		struct ndet_fake_engine *engine = opaque[i];
		bool free_pool = engine->config.nranks == 1 && !ndet_fake_poisoned(engine);
		for (int k = 0; k < meetings; k++) {
			if (meeting[k] != engine || status != NDET_OK)
				continue;
			free_pool = free_pool || clean[k];
			ndet_fake_count(&ndet_fake_counts.barriers);
		}
		ndet_fake_release_pool(engine->pool, free_pool);
		ndet_fake_count(&ndet_fake_counts.engines_destroyed);
		free(engine);
	}
	free(clean);
	free(words);
	free(nranks);
	free(meeting);
	return status;
}

static bool ndet_fake_shares_process(void *opaque)
{
	const struct ndet_fake_engine *engine = opaque;
	return engine->shares_process;
}

const struct ndet_backend ndet_fake_backend = {
	.name = "fake (host memory, CPU reference)",
	.create_group = ndet_fake_create_group,
	.allreduce_group = ndet_fake_allreduce_group,
	.error = ndet_fake_error,
	.abort = ndet_fake_abort,
	.destroy_group = ndet_fake_destroy_group,
	.shares_process = ndet_fake_shares_process,
	.memory_bytes = ndet_engine_memory_bytes,
};

void ndet_fake_backend_counters(struct ndet_fake_backend_counters *counters)
{
	pthread_mutex_lock(&ndet_fake_lock);
	*counters = ndet_fake_counts;
	pthread_mutex_unlock(&ndet_fake_lock);
}

void ndet_fake_backend_reset(void)
{
	pthread_mutex_lock(&ndet_fake_lock);
	struct ndet_fake_pool *pool = ndet_fake_quarantine;
	ndet_fake_quarantine = NULL;
	memset(&ndet_fake_counts, 0, sizeof(ndet_fake_counts));
	pthread_mutex_unlock(&ndet_fake_lock);
	while (pool != NULL) {
		struct ndet_fake_pool *next = pool->next_quarantined;
		free(pool);
		pool = next;
	}
}

void ndet_fake_backend_set_error(void *engine, uint32_t kernel_error)
{
	ndet_fake_fail(engine, kernel_error);
}
