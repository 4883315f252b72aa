/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The host-only engine of the CPU tests (see ndet_fake_backend.h).
 */
#include "config.h"

#include "test/support/ndet_fake_backend.h"

#include "protocol/ndet_pool_layout.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/ndet_abi.h"
#include "common/ndet_log.h"
#include "reference/ndet_reference.h"
#include "common/ndet_settings.h"
#include "protocol/ndet_host_table.h"
#include "protocol/ndet_setup.h"
#include "protocol/ndet_teardown.h"
#include "test/support/ndet_big_alloc.h"

#define NDET_FAKE_PROBE_TAG   0x46414b4550000000ull /* "FAKEP" */
#define NDET_FAKE_DATA_OFFSET 4096u

/*
 * A pool: the words of the kernels' flag region (ndet_kernels.h) that the host-only
 * protocol needs, and where its owner's input of the current call lies.  Peers write
 * ready/done/abort_word/probe, the owner polls them; staging is the owner's.
 */
struct ndet_fake_pool {
	struct ndet_fake_pool *next_quarantined;
	uint64_t probe[NDET_MAX_RANKS];
	uint64_t ready[NDET_MAX_RANKS];  /* peer q's step << 24 | call signature */
	uint64_t done[NDET_MAX_RANKS];   /* peer q's step: it finished reading my staging */
	uint64_t abort_word;             /* 1 + the rank that failed: leave at once */
	uint64_t detach[NDET_MAX_RANKS]; /* peer q let go of this pool (ndet_teardown.h) */
	void *staging;                   /* a copy of the owner's sendbuff for this call */
	uint64_t scalar;                 /* PreMulSum: the owner's scalar (dtype bits) */
	/* Multi-host: the owner's sendbuff during a stage 1, and its staging (slots). */
	const void *hosts_input;
	void *hosts_staging;
	struct ndet_hosts_transfer *hosts_transfers; /* [H] */
	unsigned char *hosts_connect;                /* NDET_HOSTS_CONNECT_BYTES(H) */
};

struct ndet_fake_engine {
	struct ndet_engine_config config;
	ndet_engine_exchange_fn exchange;
	void *exchange_context;
	struct ndet_fake_pool *pool;
	uint64_t pool_bytes; /* what the pool stands for (ndet_resources) */
	struct ndet_fake_pool *peers[NDET_MAX_RANKS];
	bool imported[NDET_MAX_RANKS]; /* peers[q] "opened" like an IPC peer's pool */
	ndet_peer_kind_t kind[NDET_MAX_RANKS];
	bool shares_process;
	struct ndet_teardown_share *share;
	struct ndet_teardown_share *reserved_share; /* as the CUDA engine's */
	void *barrier_words;                        /* as the CUDA engine's */
	uint64_t staging_bytes; /* of pool_bytes: the multi-host staging, counted apart */
	uint64_t epoch;         /* of the setup: what our detach words carry */
	uint32_t error;         /* atomics: as the host-mapped words of the real engine */
	uint32_t abort;
	uint64_t step; /* calls that ran the protocol: the kernels' step counter */
	/* A "kernel" still running in the background (ndet_fake_backend_spin_rank). */
	int running; /* atomic */
	pthread_t spinner;
	bool spinner_joinable;
	/* Teardown. */
	bool idle, peers_done;
	/* Multi-host: the hosts of the table (this rank's part too); NULL on one host. */
	struct ndet_host_table *hosts;
	/* Its "stage stream": only its address is used, to check what the stages get. */
	char stage_stream;
};

static pthread_mutex_t ndet_fake_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ndet_fake_pool *ndet_fake_quarantine;
static struct ndet_fake_backend_counters ndet_fake_counts;
static int ndet_fake_version_rank = -1; /* ndet_fake_backend_set_library_version */
static uint32_t ndet_fake_version;
static int ndet_fake_gpu_rank = -1; /* ndet_fake_backend_set_gpu */
static uint32_t ndet_fake_gpu_flags;
static int ndet_fake_spin_rank = -1; /* ndet_fake_backend_spin_rank */
/* ndet_fake_backend_fail_join, ndet_fake_backend_stage_stream_busy */
static int ndet_fake_join_fail_rank = -1, ndet_fake_join_fail_after;
static int ndet_fake_busy_stage_rank = -1;
static int ndet_fake_single_host_rank = -1; /* ndet_fake_backend_set_multi_host */
/* Per-rank "processes" that ended (ndet_fake_backend_end_process): their pids. */
static uint64_t ndet_fake_ended[NDET_MAX_RANKS];
static int ndet_fake_ended_count;

/*
 * The CUDA runtime registers its exit handler at its first call, so a late exit
 * handler of the application finds it gone.  So does this engine's: any use of it
 * after exit() began and its handler ran is a crash in the making, made visible.
 */
static pthread_once_t ndet_fake_runtime_once = PTHREAD_ONCE_INIT;
static int ndet_fake_runtime_down; /* atomic */

static void ndet_fake_runtime_shutdown(void)
{
	__atomic_store_n(&ndet_fake_runtime_down, 1, __ATOMIC_RELEASE);
}

static void ndet_fake_runtime_start(void)
{
	if (atexit(ndet_fake_runtime_shutdown) != 0)
		NDET_WARN("fake backend: atexit failed");
}

static void ndet_fake_runtime_check(const char *what)
{
	if (!__atomic_load_n(&ndet_fake_runtime_down, __ATOMIC_ACQUIRE))
		return;
	fprintf(stderr, "fake backend: %s after the (CUDA) runtime shut down at exit\n", what);
	abort();
}

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

/* The pid a rank publishes when every rank poses as a process of its own. */
static uint64_t ndet_fake_rank_pid(int rank)
{
	return (uint64_t)getpid() * 1000u + (uint64_t)rank + 1u;
}

static bool ndet_fake_process_gone(uint64_t pid);

/*
 * As the CUDA engine's detach: our last access to each pool we "imported".  A rank
 * whose "process" ended writes nothing (the driver took its mappings).
 */
static void ndet_fake_detach_peers(struct ndet_fake_engine *engine)
{
	const int me = engine->config.rank;
	/* The slot of the writer's local index (ndet_teardown.h): its rank on one host. */
	const int slot = engine->hosts != NULL ? engine->hosts->my_local : me;
	if (ndet_fake_process_per_rank() && ndet_fake_process_gone(ndet_fake_rank_pid(me)))
		return;
	for (int q = 0; q < NDET_MAX_RANKS; q++)
		if (engine->imported[q])
			__atomic_store_n(&engine->peers[q]->detach[slot],
					 ndet_teardown_detach_word(engine->epoch, me, q),
					 __ATOMIC_RELEASE);
}

/* "Close" our mappings of peers' pools. */
static void ndet_fake_close_peers(struct ndet_fake_engine *engine)
{
	for (int q = 0; q < NDET_MAX_RANKS; q++) {
		if (!engine->imported[q])
			continue;
		engine->imported[q] = false;
		ndet_resources_imported(-1);
	}
}

/* ndet_teardown_ops.free: nobody can read the pool any more. */
static void ndet_fake_free(void *member)
{
	struct ndet_fake_engine *engine = member;
	ndet_teardown_unreserve(engine->reserved_share);
	free(engine->barrier_words);
	ndet_fake_close_peers(engine);
	if (engine->pool != NULL) {
		ndet_fake_count(&ndet_fake_counts.pools_freed);
		free(engine->pool->staging);
		ndet_big_free(engine->pool->hosts_staging, engine->config.hosts_staging);
		free(engine->pool->hosts_transfers);
		free(engine->pool->hosts_connect);
		free(engine->pool);
		ndet_resources_freed(engine->pool_bytes - engine->staging_bytes);
		if (engine->staging_bytes != 0)
			ndet_resources_freed(engine->staging_bytes);
	}
	ndet_host_table_destroy(engine->hosts);
	free(engine);
}

/*
 * ndet_teardown_ops.abandon: kept until ndet_fake_backend_reset (a peer may still
 * hold a pointer).  An engine whose "kernel" still runs is kept as well.
 */
static uint64_t ndet_fake_abandon(void *member)
{
	struct ndet_fake_engine *engine = member;
	uint64_t kept = engine->pool != NULL ? engine->pool_bytes : 0;
	pthread_mutex_lock(&ndet_fake_lock);
	if (engine->pool != NULL) {
		ndet_fake_counts.pools_quarantined++;
		engine->pool->next_quarantined = ndet_fake_quarantine;
		ndet_fake_quarantine = engine->pool;
	}
	pthread_mutex_unlock(&ndet_fake_lock);
	if (__atomic_load_n(&engine->running, __ATOMIC_ACQUIRE) == 0) {
		if (engine->spinner_joinable)
			pthread_join(engine->spinner, NULL);
		ndet_teardown_unreserve(engine->reserved_share);
		free(engine->barrier_words);
		ndet_host_table_destroy(engine->hosts);
		free(engine);
	}
	return kept;
}

static ndet_teardown_read_t ndet_fake_read_detach(void *member, uint64_t *words)
{
	struct ndet_fake_engine *engine = member;
	if (__atomic_load_n(&ndet_fake_runtime_down, __ATOMIC_ACQUIRE))
		return NDET_TEARDOWN_READ_DOWN;
	for (int q = 0; q < NDET_MAX_RANKS; q++)
		words[q] = __atomic_load_n(&engine->pool->detach[q], __ATOMIC_ACQUIRE);
	return NDET_TEARDOWN_READ_OK;
}

/* The per-rank "processes" live until ndet_fake_backend_end_process; real ones as kill says. */
static bool ndet_fake_process_gone(uint64_t pid)
{
	bool gone = false, fake = pid / 1000u == (uint64_t)getpid() && pid % 1000u != 0;
	pthread_mutex_lock(&ndet_fake_lock);
	for (int i = 0; i < ndet_fake_ended_count; i++)
		gone = gone || ndet_fake_ended[i] == pid;
	pthread_mutex_unlock(&ndet_fake_lock);
	return gone || (!fake && ndet_teardown_process_gone(pid));
}

static const struct ndet_teardown_ops ndet_fake_teardown_ops = {
	.free = ndet_fake_free,
	.abandon = ndet_fake_abandon,
	.read_detach = ndet_fake_read_detach,
	.process_gone = ndet_fake_process_gone,
};

/* ---------------------------------------------------------------- setup */

static void ndet_fake_prepare(void *member, struct ndet_setup_payload *payload)
{
	struct ndet_fake_engine *engine = member;
	const struct ndet_engine_config *config = &engine->config;
	ndet_local_status_t local = NDET_LOCAL_READY;
	uint64_t bytes = ndet_pool_memory_bytes(config);

	if (config->nranks > NDET_MAX_RANKS) {
		local = NDET_LOCAL_TOO_MANY_RANKS;
	} else if (bytes > config->max_memory) {
		NDET_WARN(
			"rank %d: pool of %llu bytes exceeds NCCL_DET_MAX_MEMORY=%llu; "
			"raise NCCL_DET_MAX_MEMORY or lower NCCL_DET_POOL_SIZE or NCCL_DET_LL_MAX",
			config->rank, (unsigned long long)bytes,
			(unsigned long long)config->max_memory);
		local = NDET_LOCAL_ALLOC_FAILED;
	} else if (ndet_fake_fault(config, NDET_FAULT_ALLOC)) {
		NDET_WARN(
			"rank %d: NCCL_DET_TEST_FAIL=alloc: pretending the pool allocation failed",
			config->rank);
		local = NDET_LOCAL_ALLOC_FAILED;
	} else if ((engine->reserved_share = ndet_teardown_reserve()) == NULL) {
		local = NDET_LOCAL_ALLOC_FAILED;
	} else {
		engine->pool = calloc(1, sizeof(*engine->pool));
		if (engine->pool == NULL) {
			local = NDET_LOCAL_ALLOC_FAILED;
		} else {
			engine->pool_bytes = bytes;
			ndet_resources_allocated(bytes);
		}
	}
	ndet_setup_payload_identity(payload, config->test_host);
	if (ndet_fake_process_per_rank())
		payload->pid = ndet_fake_rank_pid(config->rank);
	payload->cuda_device = config->cuda_device;
	payload->rank = config->rank;
	payload->nranks = config->nranks;
	payload->flags = config->setup_flags;
	payload->blocking = config->nonblocking ? 0 : 1;
	payload->settings_hash = config->settings_hash;
	payload->pool_bytes = bytes;
	payload->pool_address = (uint64_t)(uintptr_t)engine->pool;
	payload->flags_offset = 0;
	payload->data_offset = NDET_FAKE_DATA_OFFSET;
	payload->sm_count = 132;
	payload->local_status = (uint32_t)local;
	pthread_mutex_lock(&ndet_fake_lock);
	if (ndet_fake_version_rank == config->rank)
		payload->library_version = ndet_fake_version;
	/*
	 * The GPU a fake rank stands for: sm_90 with our fp8 kernels, as the engine
	 * would publish it (ndet_engine_pool.c), unless FAKE_CUDA_MAJOR names an older GPU
	 * for every rank or ndet_fake_backend_set_gpu another for one rank.
	 */
	const char *major = getenv("FAKE_CUDA_MAJOR");
	uint32_t gpu = major != NULL && atoi(major) > 0 && atoi(major) < 9
			       ? 0u
			       : NDET_SETUP_FLAG_SM90 | NDET_SETUP_FLAG_FP8;
	if (ndet_fake_gpu_rank == config->rank)
		gpu = ndet_fake_gpu_flags;
	payload->flags |= gpu;
	if (ndet_fake_single_host_rank == config->rank)
		payload->flags &= ~NDET_SETUP_FLAG_MULTI_HOST;
	pthread_mutex_unlock(&ndet_fake_lock);
}

/* Does the probe go between me and peer q (another rank of my host)? */
static bool ndet_fake_probes(const struct ndet_fake_engine *engine, int q)
{
	return q != engine->config.rank && engine->kind[q] != NDET_PEER_REMOTE;
}

/*
 * A communicator across hosts: its hosts, and the staging of the multi-host stages
 * (NCCL_DET_HOSTS_STAGING bytes, beside the pool and counted with it).  A local
 * failure here fails round 3 on every rank alike.
 */
static bool ndet_fake_hosts_setup(struct ndet_fake_engine *engine,
				  const struct ndet_setup_payload *table, int nranks)
{
	const struct ndet_engine_config *config = &engine->config;
	engine->hosts = ndet_host_table_create(nranks);
	if (engine->hosts == NULL ||
	    !ndet_host_table_build(engine->hosts, table, nranks, config->rank))
		return false;
	if (engine->hosts->nhosts < 2)
		return true;
	if (!ndet_setup_staging_fits(config, engine->pool_bytes, engine->hosts->nhosts,
				     engine->hosts->size_max))
		return false;
	engine->pool->hosts_transfers =
		calloc((size_t)engine->hosts->nhosts, sizeof(*engine->pool->hosts_transfers));
	engine->pool->hosts_staging = ndet_big_alloc(config->hosts_staging);
	engine->pool->hosts_connect = calloc(NDET_HOSTS_CONNECT_BYTES(engine->hosts->nhosts), 1);
	if (engine->pool->hosts_staging == NULL || engine->pool->hosts_transfers == NULL ||
	    engine->pool->hosts_connect == NULL)
		return false;
	/* A resource of its own, as the CUDA engine's staging buffer is. */
	engine->pool_bytes += config->hosts_staging;
	engine->staging_bytes = config->hosts_staging;
	ndet_resources_allocated(config->hosts_staging);
	return true;
}

static bool ndet_fake_map_and_probe(void *member, const struct ndet_setup_payload *table,
				    int nranks)
{
	struct ndet_fake_engine *engine = member;
	const struct ndet_engine_config *config = &engine->config;
	bool ok = ndet_fake_hosts_setup(engine, table, nranks);
	engine->shares_process = ndet_setup_table_shares_process(table, nranks);
	engine->share = ndet_teardown_join(table, nranks, config->rank, &engine->reserved_share);
	ndet_teardown_unreserve(engine->reserved_share);
	engine->reserved_share = NULL;
	engine->epoch = ndet_teardown_epoch(table, nranks);
	for (int q = 0; q < nranks; q++) {
		ndet_peer_kind_t kind = ndet_setup_peer_kind(table, config->rank, q);
		engine->kind[q] = kind;
		/* Another host: its pool is not reachable, as the CUDA engine's are not. */
		if (kind == NDET_PEER_REMOTE)
			continue;
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
		if (kind == NDET_PEER_IPC) {
			engine->imported[q] = true;
			ndet_resources_imported(1);
		}
	}
	for (int q = 0; q < nranks && ok; q++) {
		if (!ndet_fake_probes(engine, q))
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
		if (ndet_fake_probes(engine, q) &&
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

/*
 * As the CUDA engine's: no kernel ran, our mappings go; the pool if no peer saw it
 * (any peer may have: the fake publishes no ops->opened).
 */
static void ndet_fake_release(void *member, bool peers_may_have_mapped, const uint32_t *opened)
{
	struct ndet_fake_engine *engine = member;
	(void)opened;
	ndet_fake_detach_peers(engine);
	ndet_fake_close_peers(engine);
	ndet_teardown_release(engine->share, engine, &ndet_fake_teardown_ops, engine->config.rank,
			      true, !peers_may_have_mapped,
			      peers_may_have_mapped ? NDET_TEARDOWN_ALL_READERS : 0);
}

static const struct ndet_setup_member_ops ndet_fake_ops = {
	.prepare = ndet_fake_prepare,
	.map_and_probe_write = ndet_fake_map_and_probe,
	.probe_verify = ndet_fake_verify,
	.release = ndet_fake_release,
};

static void (*ndet_fake_exchange_hook)(void);       /* ndet_fake_lock */
static void (*ndet_fake_launch_hook)(void *engine); /* ndet_fake_lock */

void ndet_fake_backend_set_launch_hook(void (*hook)(void *engine))
{
	pthread_mutex_lock(&ndet_fake_lock);
	ndet_fake_launch_hook = hook;
	pthread_mutex_unlock(&ndet_fake_lock);
}

void ndet_fake_backend_set_exchange_hook(void (*hook)(void))
{
	pthread_mutex_lock(&ndet_fake_lock);
	ndet_fake_exchange_hook = hook;
	pthread_mutex_unlock(&ndet_fake_lock);
}

/*
 * The exchange of `count` engines at once, on host buffers (the fake NCCL's memory):
 * each engine's outcome in results[] (an abandoned exchange counts as failed).
 */
static ndet_status_t ndet_fake_exchange(struct ndet_fake_engine *const engines[], int count,
					const void *const sends[], void *const recvs[],
					size_t bytes, ndet_status_t results[])
{
	/* As the CUDA engine's: up to NDET_SETUP_STACK engines allocate nothing. */
	void *contexts_here[NDET_SETUP_STACK];
	const bool here = count <= NDET_SETUP_STACK;
	void **contexts = here ? contexts_here : calloc((size_t)count, sizeof(*contexts));
	if (contexts == NULL) {
		for (int i = 0; i < count; i++)
			results[i] = NDET_ERR_SYSTEM;
		return NDET_ERR_SYSTEM;
	}
	for (int i = 0; i < count; i++) {
		contexts[i] = engines[i]->exchange_context;
		results[i] = NDET_ERR_INTERNAL; /* a callback that sets none fails all */
	}
	pthread_mutex_lock(&ndet_fake_lock);
	void (*hook)(void) = ndet_fake_exchange_hook;
	pthread_mutex_unlock(&ndet_fake_lock);
	if (hook != NULL)
		hook();
	(void)engines[0]->exchange(contexts, count, sends, recvs, bytes, NULL, results);
	ndet_status_t status = NDET_OK;
	for (int i = 0; i < count; i++) {
		if (results[i] == NDET_IN_PROGRESS)
			results[i] = NDET_ERR_REMOTE;
		if (results[i] != NDET_OK && status == NDET_OK)
			status = results[i];
	}
	if (!here)
		free(contexts);
	return status;
}

static ndet_status_t ndet_fake_setup_allgather(void *context, int count, void *const members[],
					       const void *const sends[], void *const recvs[],
					       size_t bytes, ndet_status_t results[])
{
	(void)context;
	return ndet_fake_exchange((struct ndet_fake_engine *const *)members, count, sends, recvs,
				  bytes, results);
}

/*
 * As the CUDA engine's start: the members that may be ranks of one that got no engine
 * (out of memory) leave with it before round 1, with NDET_ERR_REMOTE.  Out of memory
 * here (test code), all of this thread's members leave.
 */
static void ndet_fake_leave_together(struct ndet_backend_member *members,
				     struct ndet_setup_member *setup, int count)
{
	bool any = false;
	for (int i = 0; i < count; i++)
		any = any ||
		      (setup[i].context == NULL && members[i].status != NDET_ERR_INVALID_ARGUMENT);
	if (!any)
		return;
	struct ndet_exchange_place *places = calloc((size_t)count, sizeof(*places));
	bool *leaves = calloc((size_t)count, sizeof(*leaves));
	const bool known = places != NULL && leaves != NULL;
	for (int i = 0; known && i < count; i++) {
		leaves[i] =
			setup[i].context == NULL && members[i].status != NDET_ERR_INVALID_ARGUMENT;
		places[i] = ndet_exchange_place_of(members[i].config.comm_identity,
						   members[i].config.rank, members[i].config.nranks,
						   members[i].config.cuda_device);
	}
	if (known)
		ndet_exchange_leave_together(places, leaves, count);
	for (int i = 0; i < count; i++) {
		struct ndet_fake_engine *engine = setup[i].context;
		if (engine == NULL || (known && !leaves[i]))
			continue;
		free(engine->barrier_words);
		free(engine);
		setup[i] = (struct ndet_setup_member){0};
		members[i].status = NDET_ERR_REMOTE;
	}
	free(leaves);
	free(places);
}

static void ndet_fake_create_group(struct ndet_backend_member *members, int count,
				   ndet_engine_exchange_fn exchange)
{
	(void)pthread_once(&ndet_fake_runtime_once, ndet_fake_runtime_start);
	ndet_fake_runtime_check("setup");
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
		if (engine != NULL) {
			engine->barrier_words =
				calloc((size_t)config->nranks, NDET_SETUP_AGREE_BYTES);
			if (engine->barrier_words == NULL) {
				free(engine);
				engine = NULL;
			}
		}
		if (engine == NULL)
			continue;
		engine->config = members[i].config;
		engine->exchange = exchange;
		engine->exchange_context = members[i].exchange_context;
		setup[i].context = engine;
		setup[i].rank = members[i].config.rank;
		setup[i].nranks = members[i].config.nranks;
		setup[i].device = members[i].config.cuda_device;
		setup[i].comm_identity = members[i].config.comm_identity;
	}
	if (setup == NULL)
		return;
	ndet_fake_leave_together(members, setup, count);
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

/* ---------------------------------------------------------------- the "kernel" */

#define NDET_FAKE_SIGNATURE_BITS 24
#define NDET_FAKE_SIGNATURE_MASK ((UINT64_C(1) << NDET_FAKE_SIGNATURE_BITS) - 1)

static void ndet_fake_count_failure(uint32_t kernel_error)
{
	pthread_mutex_lock(&ndet_fake_lock);
	if (kernel_error == NDET_FAKE_KERNEL_FAULT)
		ndet_fake_counts.faults++;
	else if (kernel_error < NDET_FAKE_ERROR_SLOTS)
		ndet_fake_counts.kernel_errors[kernel_error]++;
	pthread_mutex_unlock(&ndet_fake_lock);
}

/* First writer wins, as in the kernels. */
static void ndet_fake_fail(struct ndet_fake_engine *engine, uint32_t kernel_error)
{
	uint32_t expected = NDET_KERNEL_OK;
	if (__atomic_compare_exchange_n(&engine->error, &expected, kernel_error, false,
					__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		ndet_fake_count_failure(kernel_error);
}

/* Every rank's abort word says this rank failed: their "kernels" leave. */
static void ndet_fake_tell_peers(struct ndet_fake_engine *engine)
{
	for (int q = 0; q < engine->config.nranks; q++)
		if (engine->peers[q] != NULL)
			__atomic_store_n(&engine->peers[q]->abort_word,
					 1u + (uint64_t)engine->config.rank, __ATOMIC_RELAXED);
}

/* A failing "kernel": record the error and tell every rank to leave (ndet_fail). */
static void ndet_fake_fail_all(struct ndet_fake_engine *engine, uint32_t kernel_error)
{
	ndet_fake_fail(engine, kernel_error);
	ndet_fake_tell_peers(engine);
}

static ndet_status_t ndet_fake_error(void *opaque, uint32_t *kernel_error)
{
	struct ndet_fake_engine *engine = opaque;
	uint32_t error = __atomic_load_n(&engine->error, __ATOMIC_ACQUIRE);
	if (kernel_error != NULL)
		*kernel_error = error;
	return error == NDET_KERNEL_OK ? NDET_OK : NDET_ERR_REMOTE;
}

static size_t ndet_fake_describe_error(void *opaque, char *text, size_t size)
{
	struct ndet_fake_engine *engine = opaque;
	const uint32_t error = __atomic_load_n(&engine->error, __ATOMIC_ACQUIRE);
	if (size > 0)
		text[0] = '\0';
	const int n = error == NDET_KERNEL_OK
			      ? 0
			      : snprintf(text, size, "fake kernel error %u of rank %d", error,
					 engine->config.rank);
	return n <= 0 ? 0 : (size_t)n < size ? (size_t)n : size - 1;
}

/* The kernels' signature: calls that differ in any of these must not meet. */
static uint64_t ndet_fake_signature(const struct ndet_backend_call *call, int nranks)
{
	const uint64_t words[] = {call->count,
				  (uint64_t)call->dtype,
				  (uint64_t)call->op,
				  (uint64_t)nranks,
				  (uint64_t)call->coll,
				  call->coll == NDET_COLL_REDUCE ? (uint64_t)call->root : 0,
				  call->premul != NDET_PREMUL_NONE};
	uint64_t hash = UINT64_C(0xcbf29ce484222325);
	const unsigned char *bytes = (const unsigned char *)words;
	for (size_t i = 0; i < sizeof(words); i++) {
		hash ^= bytes[i];
		hash *= UINT64_C(0x100000001b3);
	}
	hash &= NDET_FAKE_SIGNATURE_MASK;
	return hash == 0 ? 1 : hash; /* 0 is a never-written flag */
}

static uint64_t ndet_fake_now_ns(void)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return (uint64_t)now.tv_sec * UINT64_C(1000000000) + (uint64_t)now.tv_nsec;
}

/* A spin of the host "kernel": yield at first, then sleep up to 1 ms (2 cores, many ranks). */
static void ndet_fake_pause(unsigned spins)
{
	if (spins < 64) {
		sched_yield();
		return;
	}
	unsigned shift = spins < 74 ? spins - 64 : 10;
	struct timespec pause = {.tv_sec = 0, .tv_nsec = 1000L << shift};
	nanosleep(&pause, NULL);
}

/*
 * ndet_wait: until `flag` holds step `step` (and, with `check`, `signature`),
 * polling the abort word, the host abort flag and the deadline.  NDET_KERNEL_OK or
 * the error to record.
 */
static uint32_t ndet_fake_wait(struct ndet_fake_engine *engine, const uint64_t *flag, uint64_t step,
			       bool check, uint64_t signature, uint64_t *deadline_ns)
{
	for (unsigned spins = 0;; spins++) {
		uint64_t value = __atomic_load_n(flag, __ATOMIC_ACQUIRE);
		if (value >> NDET_FAKE_SIGNATURE_BITS == step) {
			if (check && (value & NDET_FAKE_SIGNATURE_MASK) != signature)
				return NDET_KERNEL_ERR_SIGNATURE;
			/* Progress: the deadline starts again, as in the kernels. */
			if (*deadline_ns != 0)
				*deadline_ns = ndet_fake_now_ns() +
					       engine->config.timeout_ms * UINT64_C(1000000);
			return NDET_KERNEL_OK;
		}
		if (__atomic_load_n(&engine->pool->abort_word, __ATOMIC_RELAXED) != 0)
			return NDET_KERNEL_ERR_PEER;
		if (__atomic_load_n(&engine->abort, __ATOMIC_ACQUIRE) != 0)
			return NDET_KERNEL_ERR_ABORTED;
		if (*deadline_ns != 0 && ndet_fake_now_ns() > *deadline_ns)
			return NDET_KERNEL_ERR_TIMEOUT;
		ndet_fake_pause(spins);
	}
}

/* One call of a batch as its "kernel" runs it. */
struct ndet_fake_run {
	struct ndet_backend_call *call;
	struct ndet_fake_engine *engine;
	uint64_t step;
	uint64_t signature;
	uint64_t deadline_ns; /* 0: never; moves on after every successful wait */
	bool posted;          /* ready published: peers may read our staging */
	bool reduced;         /* done published */
};

/*
 * Kernel start: a poisoned engine fails fast, a NULL buffer faults (a CUDA kernel
 * would die with an illegal address; here the peers are told at once instead of
 * timing out).  Then copy-in and publish.  False when nothing was posted.
 */
static bool ndet_fake_post(struct ndet_fake_run *run)
{
	struct ndet_backend_call *call = run->call;
	struct ndet_fake_engine *engine = run->engine;
	const int me = engine->config.rank;
	uint64_t abort_word = __atomic_load_n(&engine->pool->abort_word, __ATOMIC_RELAXED);
	if (abort_word != 0) {
		ndet_fake_fail(engine, NDET_KERNEL_ERR_PEER);
		return false;
	}
	if (__atomic_load_n(&engine->abort, __ATOMIC_ACQUIRE) != 0) {
		ndet_fake_fail_all(engine, NDET_KERNEL_ERR_ABORTED);
		return false;
	}
	/* An ncclReduce's non-root ranks never touch recvbuff (it may be NULL). */
	const bool writes = call->coll != NDET_COLL_REDUCE || call->root == me;
	if (call->sendbuff == NULL || (writes && call->recvbuff == NULL)) {
		ndet_fake_fail_all(engine, NDET_FAKE_KERNEL_FAULT);
		return false;
	}
	/* A reduce-scatter's sendbuff holds one block per rank. */
	const size_t blocks =
		call->coll == NDET_COLL_REDUCE_SCATTER ? (size_t)engine->config.nranks : 1;
	size_t bytes = call->count * ndet_dtype_size(call->dtype) * blocks;
	void *staging = malloc(bytes);
	if (staging == NULL) {
		/* A launch that cannot start: the peers must not wait for it. */
		ndet_fake_fail_all(engine, NDET_KERNEL_ERR_PEER);
		return false;
	}
	memcpy(staging, call->sendbuff, bytes);
	engine->pool->staging = staging;
	/* The kernels read a device scalar when they run; so does this one. */
	engine->pool->scalar = call->scalar_bits;
	if (call->premul == NDET_PREMUL_DEVICE)
		memcpy(&engine->pool->scalar, call->scalar, ndet_dtype_size(call->dtype));
	run->step = ++engine->step;
	run->signature = ndet_fake_signature(call, engine->config.nranks);
	run->deadline_ns =
		engine->config.timeout_ms == 0
			? 0
			: ndet_fake_now_ns() + engine->config.timeout_ms * UINT64_C(1000000);
	uint64_t ready = run->step << NDET_FAKE_SIGNATURE_BITS | run->signature;
	for (int q = 0; q < engine->config.nranks; q++)
		if (q != me)
			__atomic_store_n(&engine->peers[q]->ready[me], ready, __ATOMIC_RELEASE);
	run->posted = true;
	return true;
}

/* Every peer's input is staged and it is the same call: reduce, then say so. */
static void ndet_fake_reduce(struct ndet_fake_run *run)
{
	struct ndet_fake_engine *engine = run->engine;
	const int me = engine->config.rank, nranks = engine->config.nranks;
	const void *inputs[NDET_MAX_RANKS];
	for (int q = 0; q < nranks; q++) {
		if (q == me)
			continue;
		uint32_t error = ndet_fake_wait(engine, &engine->pool->ready[q], run->step, true,
						run->signature, &run->deadline_ns);
		if (error != NDET_KERNEL_OK) {
			ndet_fake_fail_all(engine, error);
			return;
		}
	}
	const struct ndet_backend_call *call = run->call;
	const size_t size = ndet_dtype_size(call->dtype);
	/* Reduce-scatter: block `me` of every rank's input, the all-reduce's elements. */
	const size_t offset =
		call->coll == NDET_COLL_REDUCE_SCATTER ? (size_t)me * call->count * size : 0;
	unsigned char scalars[NDET_MAX_RANKS * sizeof(uint64_t)];
	for (int q = 0; q < nranks; q++) {
		inputs[q] = (const char *)engine->peers[q]->staging + offset;
		memcpy(scalars + (size_t)q * size, &engine->peers[q]->scalar, size);
	}
	ndet_status_t status = NDET_OK;
	if (call->coll == NDET_COLL_REDUCE && call->root != me)
		status = NDET_OK; /* only the root receives */
	else if (call->premul != NDET_PREMUL_NONE)
		status = ndet_reference_premulsum(inputs, scalars, nranks, call->recvbuff,
						  call->count, call->dtype);
	else
		status = ndet_reference_allreduce(inputs, nranks, call->recvbuff, call->count,
						  call->dtype, call->op);
	if (status != NDET_OK) {
		/* The launch itself is what fails: a kernel with bad arguments never starts. */
		run->call->status = status;
	}
	for (int q = 0; q < nranks; q++)
		if (q != me)
			__atomic_store_n(&engine->peers[q]->done[me],
					 run->step << NDET_FAKE_SIGNATURE_BITS, __ATOMIC_RELEASE);
	run->reduced = true;
	pthread_mutex_lock(&ndet_fake_lock);
	ndet_fake_counts.allreduces++;
	pthread_mutex_unlock(&ndet_fake_lock);
}

/* Every peer finished reading my staging: it can go.  Else it stays with the pool. */
static void ndet_fake_finish(struct ndet_fake_run *run)
{
	struct ndet_fake_engine *engine = run->engine;
	const int me = engine->config.rank;
	for (int q = 0; q < engine->config.nranks; q++) {
		if (q == me)
			continue;
		uint32_t error = ndet_fake_wait(engine, &engine->pool->done[q], run->step, false, 0,
						&run->deadline_ns);
		if (error != NDET_KERNEL_OK) {
			ndet_fake_fail_all(engine, error);
			return;
		}
	}
	free(engine->pool->staging);
	engine->pool->staging = NULL;
}

/*
 * A "kernel" that never meets its peers (queued work that will not finish on its
 * own): it runs in the background until the engine's abort flag or its deadline,
 * then records the error as a kernel would.  ndet_fake_backend_spin_rank().
 */
static void *ndet_fake_spin(void *opaque)
{
	struct ndet_fake_engine *engine = opaque;
	const uint64_t deadline_ns =
		engine->config.timeout_ms == 0
			? 0
			: ndet_fake_now_ns() + engine->config.timeout_ms * UINT64_C(1000000);
	for (unsigned spins = 0;; spins++) {
		if (__atomic_load_n(&engine->abort, __ATOMIC_ACQUIRE) != 0) {
			ndet_fake_fail(engine, NDET_KERNEL_ERR_ABORTED);
			break;
		}
		if (deadline_ns != 0 && ndet_fake_now_ns() > deadline_ns) {
			ndet_fake_fail(engine, NDET_KERNEL_ERR_TIMEOUT);
			break;
		}
		ndet_fake_pause(spins);
	}
	__atomic_store_n(&engine->running, 0, __ATOMIC_RELEASE);
	return NULL;
}

static bool ndet_fake_spins(const struct ndet_fake_engine *engine)
{
	pthread_mutex_lock(&ndet_fake_lock);
	bool spins = ndet_fake_spin_rank == engine->config.rank;
	pthread_mutex_unlock(&ndet_fake_lock);
	return spins;
}

/* The launch returns at once, as a real one does; the "kernel" runs on. */
static ndet_status_t ndet_fake_start_spinner(struct ndet_fake_engine *engine)
{
	if (__atomic_load_n(&engine->running, __ATOMIC_ACQUIRE) != 0)
		return NDET_ERR_INTERNAL; /* one at a time */
	if (engine->spinner_joinable)
		pthread_join(engine->spinner, NULL);
	engine->spinner_joinable = false;
	__atomic_store_n(&engine->running, 1, __ATOMIC_RELEASE);
	if (pthread_create(&engine->spinner, NULL, ndet_fake_spin, engine) != 0) {
		__atomic_store_n(&engine->running, 0, __ATOMIC_RELEASE);
		return NDET_ERR_SYSTEM;
	}
	engine->spinner_joinable = true;
	return NDET_OK;
}

/*
 * The kernels' protocol (ndet_kernels.h), run on the caller's thread: every call of
 * the batch posts before any waits, so a thread that drives several ranks of one
 * communicator never waits for itself.  Like a launch, a call whose "kernel" fails
 * still returns NDET_OK: the error is in the engine's error word
 * (ncclCommGetAsyncError), and the next call fails fast.
 */
/*
 * The bookkeeping of a batch, one `size` item per call: `here` (zeroed) for up to
 * NDET_SETUP_STACK calls, which allocate nothing, as the CUDA engine's launches do;
 * NULL (calls failed) when out of memory.  ndet_fake_batch_done gives it back.
 */
static void *ndet_fake_batch(struct ndet_backend_call *calls, int count, size_t size,
			     const char *what, void *here)
{
	ndet_fake_runtime_check(what);
	if (count <= NDET_SETUP_STACK) {
		memset(here, 0, size * NDET_SETUP_STACK);
		return here;
	}
	void *runs = calloc((size_t)count, size);
	for (int i = 0; i < count && runs == NULL; i++)
		calls[i].status = NDET_ERR_SYSTEM;
	return runs;
}

static void ndet_fake_batch_done(void *runs, int count)
{
	if (count > NDET_SETUP_STACK)
		free(runs);
}

static void ndet_fake_allreduce_group(struct ndet_backend_call *calls, int count)
{
	struct ndet_fake_run here[NDET_SETUP_STACK];
	struct ndet_fake_run *runs =
		ndet_fake_batch(calls, count, sizeof(*runs), "an all-reduce", here);
	if (runs == NULL)
		return;
	for (int i = 0; i < count; i++) {
		struct ndet_fake_engine *engine = calls[i].engine;
		runs[i].call = &calls[i];
		runs[i].engine = engine;
		calls[i].status = NDET_OK;
		pthread_mutex_lock(&ndet_fake_lock);
		void (*hook)(void *) = ndet_fake_launch_hook;
		pthread_mutex_unlock(&ndet_fake_lock);
		if (hook != NULL)
			hook(engine);
		if (ndet_fake_error(engine, NULL) != NDET_OK)
			calls[i].status = NDET_ERR_REMOTE; /* poisoned: refused at launch */
		else if (calls[i].count > 0 && ndet_fake_spins(engine))
			calls[i].status = ndet_fake_start_spinner(engine);
		else if (calls[i].count > 0)
			(void)ndet_fake_post(&runs[i]);
	}
	for (int i = 0; i < count; i++)
		if (runs[i].posted)
			ndet_fake_reduce(&runs[i]);
	for (int i = 0; i < count; i++)
		if (runs[i].reduced)
			ndet_fake_finish(&runs[i]);
	ndet_fake_batch_done(runs, count);
}

/* ---------------------------------------------------------------- multi-host stages */

static ndet_status_t ndet_fake_hosts_view(void *opaque, struct ndet_backend_hosts *view)
{
	struct ndet_fake_engine *engine = opaque;
	const struct ndet_host_table *hosts = engine->hosts;
	if (hosts == NULL || hosts->nhosts < 2)
		return NDET_ERR_UNSUPPORTED;
	view->nhosts = hosts->nhosts;
	view->local_ranks = hosts->size[0];
	view->host = hosts->my_host;
	view->local = hosts->my_local;
	view->ranks = hosts->ranks; /* grouped by host in host order: [h x g + l] */
	view->staging_bytes = engine->config.hosts_staging;
	view->staging = engine->pool->hosts_staging;
	view->transfers = engine->pool->hosts_transfers;
	view->status_word = &engine->pool->abort_word;
	view->connect_buffer = engine->pool->hosts_connect;
	view->connect_stream = NULL;
	view->stage_stream = (cudaStream_t)&engine->stage_stream;
	return NDET_OK;
}

/*
 * Work runs as it is issued here: a join is only counted.  The test knobs: a stage
 * stream taken by another capture (BEGIN says so), and a join that fails (as the CUDA
 * engine's: the status word this rank sends is poisoned, its kernels aborted).
 */
static ndet_status_t ndet_fake_hosts_order(void *opaque, cudaStream_t call_stream,
					   ndet_hosts_join_t join)
{
	struct ndet_fake_engine *engine = opaque;
	if (engine->hosts == NULL || engine->hosts->nhosts < 2 ||
	    call_stream == (cudaStream_t)&engine->stage_stream)
		return NDET_ERR_INVALID_ARGUMENT;
	const int rank = engine->config.rank;
	bool busy = false, fail = false;
	pthread_mutex_lock(&ndet_fake_lock);
	busy = join == NDET_HOSTS_JOIN_BEGIN && rank == ndet_fake_busy_stage_rank;
	if (!busy && rank == ndet_fake_join_fail_rank && ndet_fake_join_fail_after-- == 0) {
		fail = true;
		ndet_fake_join_fail_rank = -1;
	}
	pthread_mutex_unlock(&ndet_fake_lock);
	if (busy)
		return NDET_ERR_UNSUPPORTED;
	if (fail) {
		for (int q = 0; q < engine->config.nranks; q++)
			if (engine->peers[q] != NULL)
				__atomic_store_n(&engine->peers[q]->abort_word,
						 1ull + (uint64_t)rank, __ATOMIC_RELEASE);
		__atomic_store_n(&engine->abort, 1u, __ATOMIC_RELEASE);
		return NDET_ERR_CUDA;
	}
	const bool to_stages = join == NDET_HOSTS_JOIN_BEGIN || join == NDET_HOSTS_JOIN_TO_STAGES;
	ndet_fake_count(to_stages ? &ndet_fake_counts.hosts_orders_to_stages
				  : &ndet_fake_counts.hosts_orders_to_call);
	return NDET_OK;
}

/* Counted, so that tests see the connections made once, at setup. */
static ndet_status_t ndet_fake_hosts_connect(ndet_backend_connect_fn connect, void *context)
{
	ndet_fake_count(&ndet_fake_counts.hosts_connects);
	return connect(context);
}

/* One call's stage 1 or 5 as its "kernel" runs it, with the ranks of its host. */
struct ndet_fake_stage {
	struct ndet_backend_call *call;
	struct ndet_fake_engine *engine;
	struct ndet_hosts_chunk chunk;
	uint64_t step, signature, deadline_ns;
	bool posted, worked;
};

/* The op of the stages: PreMulSum is a sum of scaled leaves. */
static ndet_op_t ndet_fake_plain_op(const struct ndet_backend_call *call)
{
	return call->premul != NDET_PREMUL_NONE ? NDET_OP_SUM : call->op;
}

/* Where chunk `chunk` of the plan lies in a staging (its slot). */
static unsigned char *ndet_fake_slot(void *staging, const struct ndet_hosts_chunk *chunk)
{
	return (unsigned char *)staging + chunk->slot_offset;
}

/* Publish to the other ranks of my host only: the ranks of other hosts have no pool here. */
static void ndet_fake_stage_publish(struct ndet_fake_engine *engine, bool ready, uint64_t value)
{
	const struct ndet_host_table *hosts = engine->hosts;
	const int me = engine->config.rank;
	for (int k = 0; k < hosts->my_count; k++) {
		const int q = hosts->my_ranks[k];
		if (q == me)
			continue;
		uint64_t *word = ready ? &engine->peers[q]->ready[me] : &engine->peers[q]->done[me];
		__atomic_store_n(word, value, __ATOMIC_RELEASE);
	}
}

/* Wait for every other rank of my host's ready (with the signature) or done. */
static bool ndet_fake_stage_wait(struct ndet_fake_stage *run, bool ready)
{
	struct ndet_fake_engine *engine = run->engine;
	const struct ndet_host_table *hosts = engine->hosts;
	for (int k = 0; k < hosts->my_count; k++) {
		const int q = hosts->my_ranks[k];
		if (q == engine->config.rank)
			continue;
		const uint64_t *word = ready ? &engine->pool->ready[q] : &engine->pool->done[q];
		uint32_t error = ndet_fake_wait(engine, word, run->step, ready, run->signature,
						&run->deadline_ns);
		if (error != NDET_KERNEL_OK) {
			ndet_fake_fail_all(engine, error);
			return false;
		}
	}
	return true;
}

/* The stage's signature: the call's, its stage and its chunk. */
static uint64_t ndet_fake_stage_signature(const struct ndet_backend_call *call, int nranks,
					  ndet_hosts_stage_t stage, uint64_t chunk)
{
	uint64_t hash = ndet_fake_signature(call, nranks);
	const uint64_t words[] = {(uint64_t)stage, chunk};
	const unsigned char *bytes = (const unsigned char *)words;
	for (size_t i = 0; i < sizeof(words); i++) {
		hash ^= bytes[i];
		hash *= UINT64_C(0x100000001b3);
	}
	hash &= NDET_FAKE_SIGNATURE_MASK;
	return hash == 0 ? 1 : hash;
}

/* Kernel start of stage 1 or 5: fail fast, fault on NULL buffers, publish ready. */
static void ndet_fake_stage_post(struct ndet_fake_stage *run, ndet_hosts_stage_t stage)
{
	struct ndet_backend_call *call = run->call;
	struct ndet_fake_engine *engine = run->engine;
	if (__atomic_load_n(&engine->pool->abort_word, __ATOMIC_RELAXED) != 0) {
		ndet_fake_fail(engine, NDET_KERNEL_ERR_PEER);
		return;
	}
	if (__atomic_load_n(&engine->abort, __ATOMIC_ACQUIRE) != 0) {
		ndet_fake_fail_all(engine, NDET_KERNEL_ERR_ABORTED);
		return;
	}
	const bool writes = call->coll != NDET_COLL_REDUCE || call->root == engine->config.rank;
	if ((stage == NDET_HOSTS_STAGE_LOCAL && call->sendbuff == NULL) ||
	    (stage == NDET_HOSTS_STAGE_GATHER && writes && call->recvbuff == NULL)) {
		ndet_fake_fail_all(engine, NDET_FAKE_KERNEL_FAULT);
		return;
	}
	engine->pool->hosts_input = call->sendbuff;
	engine->pool->scalar = call->scalar_bits;
	if (call->premul == NDET_PREMUL_DEVICE)
		memcpy(&engine->pool->scalar, call->scalar, ndet_dtype_size(call->dtype));
	run->step = ++engine->step;
	run->signature =
		ndet_fake_stage_signature(call, engine->config.nranks, stage, run->chunk.index);
	run->deadline_ns =
		engine->config.timeout_ms == 0
			? 0
			: ndet_fake_now_ns() + engine->config.timeout_ms * UINT64_C(1000000);
	ndet_fake_stage_publish(engine, true,
				run->step << NDET_FAKE_SIGNATURE_BITS | run->signature);
	run->posted = true;
}

/* Stage 1: T_local of segment l over my host's ranks into my partial region. */
static ndet_status_t ndet_fake_stage_local(struct ndet_fake_stage *run)
{
	const struct ndet_backend_call *call = run->call;
	struct ndet_fake_engine *engine = run->engine;
	const struct ndet_host_table *hosts = engine->hosts;
	const struct ndet_hosts_plan *plan = call->hosts_plan;
	const size_t es = ndet_dtype_size(call->dtype);
	const struct ndet_hosts_range segment =
		ndet_hosts_segment(plan, &run->chunk, hosts->my_local);
	const void *inputs[NDET_MAX_RANKS];
	unsigned char scalars[NDET_MAX_RANKS * sizeof(uint64_t)];
	for (int k = 0; k < hosts->my_count; k++) {
		const struct ndet_fake_pool *pool = engine->peers[hosts->my_ranks[k]];
		inputs[k] = (const unsigned char *)pool->hosts_input + segment.offset * es;
		memcpy(scalars + (size_t)k * es, &pool->scalar, es);
	}
	unsigned char *partial = ndet_fake_slot(engine->pool->hosts_staging, &run->chunk) +
				 plan->slot.partial_offset;
	return ndet_reference_hosts_partial(
		inputs, call->premul != NDET_PREMUL_NONE ? scalars : NULL, hosts->my_count, partial,
		segment.count, call->dtype, ndet_fake_plain_op(call),
		plan->params.shape.partial_size);
}

/* Copy elements [from, from + count) of the message, held at `source`, into recvbuff. */
static void ndet_fake_stage_deliver(const struct ndet_backend_call *call, int me,
				    const unsigned char *source, uint64_t from, uint64_t count)
{
	const size_t es = ndet_dtype_size(call->dtype);
	uint64_t lo = from, hi = from + count, base = 0;
	if (call->coll == NDET_COLL_REDUCE && call->root != me)
		return; /* only the root receives */
	if (call->coll == NDET_COLL_REDUCE_SCATTER) {
		/* My block of the all-reduce: [me x recvcount, (me + 1) x recvcount). */
		base = (uint64_t)me * call->count;
		lo = lo > base ? lo : base;
		hi = hi < base + call->count ? hi : base + call->count;
	}
	if (lo >= hi)
		return;
	memcpy((unsigned char *)call->recvbuff + (lo - base) * es, source + (lo - from) * es,
	       (hi - lo) * es);
}

/* Stage 5: every result segment of my host (the peers' result regions) into recvbuff. */
static void ndet_fake_stage_gather(struct ndet_fake_stage *run)
{
	const struct ndet_backend_call *call = run->call;
	struct ndet_fake_engine *engine = run->engine;
	const struct ndet_host_table *hosts = engine->hosts;
	const struct ndet_hosts_plan *plan = call->hosts_plan;
	for (int k = 0; k < hosts->my_count; k++) {
		const struct ndet_hosts_range segment = ndet_hosts_segment(plan, &run->chunk, k);
		const unsigned char *result =
			ndet_fake_slot(engine->peers[hosts->my_ranks[k]]->hosts_staging,
				       &run->chunk) +
			plan->slot.result_offset;
		ndet_fake_stage_deliver(call, engine->config.rank, result, segment.offset,
					segment.count);
	}
	if (run->chunk.index + 1 == plan->chunks) {
		pthread_mutex_lock(&ndet_fake_lock);
		ndet_fake_counts.allreduces++;
		pthread_mutex_unlock(&ndet_fake_lock);
	}
}

/* Every rank of my host posted this stage: run it, then say so. */
static void ndet_fake_stage_work(struct ndet_fake_stage *run, ndet_hosts_stage_t stage)
{
	if (!ndet_fake_stage_wait(run, true))
		return;
	if (stage == NDET_HOSTS_STAGE_LOCAL) {
		ndet_status_t status = ndet_fake_stage_local(run);
		if (status != NDET_OK) {
			/* As a failing kernel: the host's peers learn of it (ndet_backend.h). */
			run->call->status = status;
			ndet_fake_fail_all(run->engine, NDET_FAKE_KERNEL_FAULT);
		}
	} else {
		ndet_fake_stage_gather(run);
	}
	ndet_fake_stage_publish(run->engine, false, run->step << NDET_FAKE_SIGNATURE_BITS);
	run->worked = true;
}

/* Stage 3: the hosts' tree over the H partials of my block, one rounding. */
static ndet_status_t ndet_fake_stage_reduce(const struct ndet_backend_call *call,
					    struct ndet_fake_engine *engine, uint64_t index)
{
	const struct ndet_host_table *hosts = engine->hosts;
	const struct ndet_hosts_plan *plan = call->hosts_plan;
	const struct ndet_hosts_chunk chunk = ndet_hosts_chunk_at(plan, index);
	const int h = hosts->my_host, nhosts = hosts->nhosts;
	const struct ndet_hosts_range block = ndet_hosts_block(plan, &chunk, hosts->my_local, h);
	if (block.count == 0)
		return NDET_OK;
	const uint64_t ps = plan->params.shape.partial_size, es = ndet_dtype_size(call->dtype);
	unsigned char *slot = ndet_fake_slot(engine->pool->hosts_staging, &chunk);
	const void **partials = calloc((size_t)nhosts, sizeof(*partials));
	if (partials == NULL)
		return NDET_ERR_SYSTEM;
	for (int peer = 0; peer < nhosts; peer++) {
		const uint64_t j = (uint64_t)(peer < h ? peer : peer - 1);
		partials[peer] = peer == h ? slot + plan->slot.partial_offset +
						     (uint64_t)h * chunk.block_elems * ps
					   : slot + plan->slot.received_offset +
						     j * plan->slot.received_stride;
	}
	ndet_status_t status = ndet_reference_hosts_combine(
		partials, nhosts, (uint32_t)ps, engine->config.nranks,
		slot + plan->slot.result_offset + (uint64_t)h * chunk.block_elems * es, block.count,
		call->dtype, ndet_fake_plain_op(call));
	free(partials);
	return status;
}

/*
 * Stages 3 and 5 first look at the peer hosts' status words that came with the NCCL
 * stage before them (their abort words): one set, and the "kernel" fails and tells
 * the ranks of its host, as ndet_hosts_peer_failed does.
 */
static bool ndet_fake_peer_host_failed(const struct ndet_backend_call *call,
				       struct ndet_fake_engine *engine,
				       const struct ndet_hosts_chunk *chunk,
				       ndet_hosts_stage_t stage)
{
	const unsigned char *slot = ndet_fake_slot(engine->pool->hosts_staging, chunk);
	const ndet_hosts_stage_t before = stage == NDET_HOSTS_STAGE_REDUCE
						  ? NDET_HOSTS_STAGE_PARTIALS
						  : NDET_HOSTS_STAGE_RESULTS;
	for (int h = 0; h < engine->hosts->nhosts; h++) {
		uint64_t word = 0;
		memcpy(&word, slot + ndet_hosts_status_at(call->hosts_plan, before, h),
		       sizeof(word));
		if (h != engine->hosts->my_host && word != 0) {
			ndet_fake_fail_all(engine, NDET_KERNEL_ERR_PEER);
			return true;
		}
	}
	return false;
}

/*
 * Stages 1 and 5 run the kernels' flag protocol among the ranks of one host, every
 * call of the batch posted before any waits (one thread may drive several ranks);
 * stage 3 is local.  As with a launch, a poisoned engine refuses the stage, and a
 * failure of the "kernel" goes into the error word with the call still NDET_OK.
 */
static void ndet_fake_hosts_stage(struct ndet_backend_call *calls, int count,
				  ndet_hosts_stage_t stage, uint64_t chunk)
{
	struct ndet_fake_stage here[NDET_SETUP_STACK];
	struct ndet_fake_stage *runs =
		ndet_fake_batch(calls, count, sizeof(*runs), "a multi-host stage", here);
	if (runs == NULL)
		return;
	for (int i = 0; i < count; i++) {
		struct ndet_fake_engine *engine = calls[i].engine;
		calls[i].status = NDET_OK;
		if (engine->hosts == NULL || engine->hosts->nhosts < 2 ||
		    calls[i].hosts_plan == NULL || chunk >= calls[i].hosts_plan->chunks ||
		    (stage != NDET_HOSTS_STAGE_LOCAL && stage != NDET_HOSTS_STAGE_REDUCE &&
		     stage != NDET_HOSTS_STAGE_GATHER)) {
			calls[i].status = NDET_ERR_INVALID_ARGUMENT;
			continue;
		}
		if (ndet_fake_error(engine, NULL) != NDET_OK) {
			calls[i].status = NDET_ERR_REMOTE; /* poisoned: refused at launch */
			continue;
		}
		if (calls[i].stream != (cudaStream_t)&engine->stage_stream)
			ndet_fake_count(&ndet_fake_counts.hosts_stages_off_stream);
		runs[i] = (struct ndet_fake_stage){.call = &calls[i], .engine = engine};
		runs[i].chunk = ndet_hosts_chunk_at(calls[i].hosts_plan, chunk);
		if (stage != NDET_HOSTS_STAGE_LOCAL &&
		    ndet_fake_peer_host_failed(&calls[i], engine, &runs[i].chunk, stage))
			continue;
		if (stage == NDET_HOSTS_STAGE_REDUCE) {
			calls[i].status = ndet_fake_stage_reduce(&calls[i], engine, chunk);
			if (calls[i].status != NDET_OK)
				ndet_fake_fail_all(engine, NDET_FAKE_KERNEL_FAULT);
		} else
			ndet_fake_stage_post(&runs[i], stage);
	}
	for (int i = 0; i < count; i++)
		if (runs[i].posted)
			ndet_fake_stage_work(&runs[i], stage);
	for (int i = 0; i < count; i++)
		if (runs[i].worked)
			(void)ndet_fake_stage_wait(&runs[i], false);
	ndet_fake_batch_done(runs, count);
}

static void ndet_fake_abort(void *opaque)
{
	ndet_fake_runtime_check("an abort");
	struct ndet_fake_engine *engine = opaque;
	__atomic_store_n(&engine->abort, 1u, __ATOMIC_RELEASE);
}

/*
 * As ndet_engine_fail_call: every rank's abort word says this rank failed (its peers'
 * "kernels" leave with NDET_KERNEL_ERR_PEER), and the engine aborts.
 */
static void ndet_fake_fail_call(void *opaque, cudaStream_t stream)
{
	(void)stream;
	ndet_fake_runtime_check("a call that failed before its launch");
	struct ndet_fake_engine *engine = opaque;
	ndet_fake_tell_peers(engine);
	__atomic_store_n(&engine->abort, 1u, __ATOMIC_RELEASE);
	pthread_mutex_lock(&ndet_fake_lock);
	ndet_fake_counts.calls_failed_unlaunched++;
	pthread_mutex_unlock(&ndet_fake_lock);
}

/* ---------------------------------------------------------------- teardown */

static bool ndet_fake_kernels_idle(void *opaque)
{
	struct ndet_fake_engine *engine = opaque;
	return __atomic_load_n(&engine->running, __ATOMIC_ACQUIRE) == 0;
}

static bool ndet_fake_kernels_stopping(void *opaque)
{
	struct ndet_fake_engine *engine = opaque;
	return ndet_fake_error(engine, NULL) != NDET_OK ||
	       __atomic_load_n(&engine->abort, __ATOMIC_ACQUIRE) != 0;
}

/* As ndet_engine_quiesce_group (ndet_teardown.h, steps 1 to 3). */
static ndet_status_t ndet_fake_quiesce_group(void *const opaque[], int count, bool barrier)
{
	ndet_fake_runtime_check("a teardown");
	ndet_status_t status = NDET_OK;
	const size_t slots = (size_t)(count > 0 ? count : 1);
	void *meeting_here[NDET_SETUP_STACK], *gathered_here[NDET_SETUP_STACK];
	int nranks_here[NDET_SETUP_STACK];
	int32_t words_here[NDET_SETUP_STACK];
	bool clean_here[NDET_SETUP_STACK];
	const bool here = count <= NDET_SETUP_STACK;
	void **meeting = here ? meeting_here : calloc(slots, sizeof(*meeting));
	void **gathered = here ? gathered_here : calloc(slots, sizeof(*gathered));
	int *nranks = here ? nranks_here : calloc(slots, sizeof(*nranks));
	int32_t *words = here ? words_here : calloc(slots, sizeof(*words));
	bool *clean = here ? clean_here : calloc(slots, sizeof(*clean));
	int meetings = 0;
	for (int i = 0; i < count; i++) {
		struct ndet_fake_engine *engine = opaque[i];
		const struct ndet_teardown_kernels kernels = {
			.idle = ndet_fake_kernels_idle,
			.stopping = ndet_fake_kernels_stopping,
			.engine = engine,
			.timeout_ms = engine->config.timeout_ms,
		};
		engine->idle = ndet_teardown_wait(&kernels);
		if (engine->idle) {
			if (engine->spinner_joinable)
				pthread_join(engine->spinner, NULL);
			engine->spinner_joinable = false;
			ndet_fake_detach_peers(engine);
			ndet_fake_close_peers(engine);
		}
		engine->peers_done = engine->config.nranks == 1;
	}
	if (meeting == NULL || gathered == NULL || nranks == NULL || words == NULL ||
	    clean == NULL) {
		status = NDET_ERR_SYSTEM;
		barrier = false;
	}
	for (int i = 0; i < count && barrier; i++) {
		struct ndet_fake_engine *engine = opaque[i];
		if (engine->config.nranks < 2)
			continue;
		words[meetings] = engine->idle ? 0 : 1;
		nranks[meetings] = engine->config.nranks;
		gathered[meetings] = engine->barrier_words;
		meeting[meetings++] = engine;
	}
	if (meetings > 0)
		status = ndet_setup_agree(meetings, meeting, nranks, words, clean, gathered,
					  ndet_fake_setup_allgather, NULL);
	/* As the CUDA engine's: where some exchange failed, the clean ones still count. */
	for (int k = 0; k < meetings; k++) {
		struct ndet_fake_engine *engine = meeting[k];
		if (status != NDET_OK && !clean[k])
			continue;
		engine->peers_done = clean[k];
		ndet_fake_count(&ndet_fake_counts.barriers);
	}
	if (!here) {
		free(clean);
		free(words);
		free(nranks);
		free(gathered);
		free(meeting);
	}
	return status;
}

static void ndet_fake_release_engine(void *opaque)
{
	ndet_fake_runtime_check("a release");
	struct ndet_fake_engine *engine = opaque;
	ndet_fake_count(&ndet_fake_counts.engines_destroyed);
	ndet_teardown_release(engine->share, engine, &ndet_fake_teardown_ops, engine->config.rank,
			      engine->idle, engine->peers_done, NDET_TEARDOWN_ALL_READERS);
	ndet_teardown_pending_retry(true);
}

static void ndet_fake_at_exit(void)
{
	ndet_teardown_at_exit();
}

static bool ndet_fake_shares_process(void *opaque)
{
	const struct ndet_fake_engine *engine = opaque;
	return engine->shares_process;
}

/* Host memory is the fake NCCL's device memory: only NULL fails NCCL's check there. */
static bool ndet_fake_pointer_valid(int cuda_device, const void *pointer)
{
	(void)cuda_device;
	return pointer != NULL;
}

const struct ndet_backend ndet_fake_backend = {
	.name = "fake (host memory, CPU reference)",
	.multi_host = true,
	.create_group = ndet_fake_create_group,
	.allreduce_group = ndet_fake_allreduce_group,
	.error = ndet_fake_error,
	.describe_error = ndet_fake_describe_error,
	.abort = ndet_fake_abort,
	.fail_call = ndet_fake_fail_call,
	.quiesce_group = ndet_fake_quiesce_group,
	.release = ndet_fake_release_engine,
	.shares_process = ndet_fake_shares_process,
	.memory_bytes = ndet_pool_memory_bytes,
	.pointer_valid = ndet_fake_pointer_valid,
	.at_exit = ndet_fake_at_exit,
	.hosts_view = ndet_fake_hosts_view,
	.hosts_stage = ndet_fake_hosts_stage,
	.hosts_order = ndet_fake_hosts_order,
	.hosts_connect = ndet_fake_hosts_connect,
};

void ndet_fake_backend_counters(struct ndet_fake_backend_counters *counters)
{
	pthread_mutex_lock(&ndet_fake_lock);
	*counters = ndet_fake_counts;
	pthread_mutex_unlock(&ndet_fake_lock);
}

void ndet_fake_backend_reset(void)
{
	/* Pending pools go to the quarantine, freed below. */
	ndet_teardown_abandon_pending_for_testing();
	ndet_teardown_set_detach_wait_for_testing(NDET_TEARDOWN_DETACH_WAIT_MS);
	pthread_mutex_lock(&ndet_fake_lock);
	ndet_fake_ended_count = 0;
	struct ndet_fake_pool *pool = ndet_fake_quarantine;
	ndet_fake_quarantine = NULL;
	memset(&ndet_fake_counts, 0, sizeof(ndet_fake_counts));
	ndet_fake_version_rank = -1;
	ndet_fake_gpu_rank = -1;
	ndet_fake_spin_rank = -1;
	ndet_fake_join_fail_rank = -1;
	ndet_fake_busy_stage_rank = -1;
	ndet_fake_single_host_rank = -1;
	ndet_fake_exchange_hook = NULL;
	ndet_fake_launch_hook = NULL;
	pthread_mutex_unlock(&ndet_fake_lock);
	ndet_resources_reset_for_testing();
	while (pool != NULL) {
		struct ndet_fake_pool *next = pool->next_quarantined;
		free(pool->staging);
		free(pool->hosts_staging);
		free(pool);
		pool = next;
	}
}

void ndet_fake_backend_set_gpu(int rank, bool sm90, bool fp8)
{
	pthread_mutex_lock(&ndet_fake_lock);
	ndet_fake_gpu_rank = rank;
	ndet_fake_gpu_flags = (sm90 ? NDET_SETUP_FLAG_SM90 : 0u) | (fp8 ? NDET_SETUP_FLAG_FP8 : 0u);
	pthread_mutex_unlock(&ndet_fake_lock);
}

void ndet_fake_backend_set_multi_host(int rank, bool capable)
{
	pthread_mutex_lock(&ndet_fake_lock);
	ndet_fake_single_host_rank = capable ? -1 : rank;
	pthread_mutex_unlock(&ndet_fake_lock);
}

int ndet_fake_backend_mapped_peers(void *opaque)
{
	const struct ndet_fake_engine *engine = opaque;
	int mapped = 0;
	for (int q = 0; q < NDET_MAX_RANKS; q++)
		mapped += q != engine->config.rank && engine->peers[q] != NULL;
	return mapped;
}

void ndet_fake_backend_set_error(void *engine, uint32_t kernel_error)
{
	ndet_fake_fail(engine, kernel_error);
}

void ndet_fake_backend_fail_join(int rank, int after)
{
	pthread_mutex_lock(&ndet_fake_lock);
	ndet_fake_join_fail_rank = rank;
	ndet_fake_join_fail_after = after;
	pthread_mutex_unlock(&ndet_fake_lock);
}

void ndet_fake_backend_stage_stream_busy(int rank)
{
	pthread_mutex_lock(&ndet_fake_lock);
	ndet_fake_busy_stage_rank = rank;
	pthread_mutex_unlock(&ndet_fake_lock);
}

void ndet_fake_backend_spin_rank(int rank)
{
	pthread_mutex_lock(&ndet_fake_lock);
	ndet_fake_spin_rank = rank;
	pthread_mutex_unlock(&ndet_fake_lock);
}

void ndet_fake_backend_set_library_version(int rank, uint32_t version)
{
	pthread_mutex_lock(&ndet_fake_lock);
	ndet_fake_version_rank = rank;
	ndet_fake_version = version;
	pthread_mutex_unlock(&ndet_fake_lock);
}

void ndet_fake_backend_end_process(int rank)
{
	pthread_mutex_lock(&ndet_fake_lock);
	if (ndet_fake_ended_count < NDET_MAX_RANKS)
		ndet_fake_ended[ndet_fake_ended_count++] = ndet_fake_rank_pid(rank);
	pthread_mutex_unlock(&ndet_fake_lock);
}

/* The backend of a link that takes this library after libndet_divert.la. */
const struct ndet_backend *ndet_backend_default(void)
{
	return &ndet_fake_backend;
}
