/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Engine teardown decisions and resource counts (see ndet_teardown.h).
 */
#include "config.h"

#include "ndet_teardown.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ndet_log.h"
#include "ndet_types.h"

/* ---------------------------------------------------------------- resources */

static struct ndet_resources ndet_resources_now; /* atomics */
static int ndet_teardown_leak_logged;            /* once per process */

static void ndet_resources_add(int64_t *counter, int64_t delta)
{
	__atomic_add_fetch(counter, delta, __ATOMIC_RELAXED);
}

void ndet_resources_allocated(uint64_t bytes)
{
	ndet_resources_add(&ndet_resources_now.allocations, 1);
	ndet_resources_add(&ndet_resources_now.bytes, (int64_t)bytes);
}

void ndet_resources_freed(uint64_t bytes)
{
	ndet_resources_add(&ndet_resources_now.allocations, -1);
	ndet_resources_add(&ndet_resources_now.bytes, -(int64_t)bytes);
}

void ndet_resources_imported(int delta)
{
	ndet_resources_add(&ndet_resources_now.ipc_imports, delta);
}

void ndet_resources_get(struct ndet_resources *resources)
{
	resources->allocations = __atomic_load_n(&ndet_resources_now.allocations, __ATOMIC_RELAXED);
	resources->bytes = __atomic_load_n(&ndet_resources_now.bytes, __ATOMIC_RELAXED);
	resources->ipc_imports = __atomic_load_n(&ndet_resources_now.ipc_imports, __ATOMIC_RELAXED);
	resources->deferred_pools =
		__atomic_load_n(&ndet_resources_now.deferred_pools, __ATOMIC_RELAXED);
	resources->leaked_pools =
		__atomic_load_n(&ndet_resources_now.leaked_pools, __ATOMIC_RELAXED);
	resources->leaked_bytes =
		__atomic_load_n(&ndet_resources_now.leaked_bytes, __ATOMIC_RELAXED);
}

void ndet_resources_reset_for_testing(void)
{
	int64_t *counters[] = {
		&ndet_resources_now.allocations,  &ndet_resources_now.bytes,
		&ndet_resources_now.ipc_imports,  &ndet_resources_now.deferred_pools,
		&ndet_resources_now.leaked_pools, &ndet_resources_now.leaked_bytes,
	};
	for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++)
		__atomic_store_n(counters[i], 0, __ATOMIC_RELAXED);
	__atomic_store_n(&ndet_teardown_leak_logged, 0, __ATOMIC_RELAXED);
}

/* ---------------------------------------------------------------- quiesce */

static uint64_t ndet_teardown_now_ms(void)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return (uint64_t)now.tv_sec * 1000u + (uint64_t)now.tv_nsec / 1000000u;
}

bool ndet_teardown_wait(const struct ndet_teardown_kernels *kernels)
{
	const uint64_t start = ndet_teardown_now_ms();
	uint64_t told = 0; /* when stopping() first said so, + 1 */
	long pause_us = 50;
	for (;;) {
		if (kernels->idle(kernels->engine))
			return true;
		const uint64_t now = ndet_teardown_now_ms();
		if (told == 0 && kernels->stopping(kernels->engine))
			told = now + 1;
		if (told != 0 && now + 1 - told > NDET_TEARDOWN_GRACE_MS)
			return false;
		if (kernels->timeout_ms != 0 &&
		    now - start > kernels->timeout_ms + NDET_TEARDOWN_GRACE_MS)
			return false;
		struct timespec pause = {.tv_sec = 0, .tv_nsec = pause_us * 1000L};
		nanosleep(&pause, NULL);
		if (pause_us < 1000)
			pause_us *= 2;
	}
}

/* ---------------------------------------------------------------- release */

struct ndet_teardown_share {
	struct ndet_teardown_share *next;
	int nranks;
	uint64_t pools[NDET_MAX_RANKS]; /* pool address of each rank in this process, else 0 */
	int local;                      /* ranks of the communicator in this process */
	int released;
	bool remote;   /* some rank lives in another process */
	bool all_idle; /* every released engine was idle */
	int deferred;
	void *engines[NDET_MAX_RANKS]; /* released, memory kept until the share completes */
	const struct ndet_teardown_ops *ops[NDET_MAX_RANKS];
};

static pthread_mutex_t ndet_teardown_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ndet_teardown_share *ndet_teardown_shares;

void ndet_teardown_leak(void *engine, const struct ndet_teardown_ops *ops, const char *why)
{
	uint64_t bytes = ops->abandon(engine);
	ndet_resources_add(&ndet_resources_now.leaked_pools, 1);
	ndet_resources_add(&ndet_resources_now.leaked_bytes, (int64_t)bytes);
	if (__atomic_exchange_n(&ndet_teardown_leak_logged, 1, __ATOMIC_RELAXED) == 0)
		NDET_INFO(NDET_SUBSYS_ALLOC,
			  "%llu bytes of nccl-det memory kept until exit: %s, so freeing it could "
			  "pull it from under a reader; the driver frees it when the process "
			  "exits (later ones are counted, not logged)",
			  (unsigned long long)bytes, why);
}

/*
 * Same process = what ndet_setup_peer_kind says, the rule the engines map by: a
 * share holds exactly the ranks that reach each other by direct pointers.
 */
struct ndet_teardown_share *ndet_teardown_join(const struct ndet_setup_payload *table, int nranks,
					       int my_rank)
{
	struct ndet_teardown_share key;
	if (nranks < 1 || nranks > NDET_MAX_RANKS || my_rank < 0 || my_rank >= nranks)
		return NULL;
	memset(&key, 0, sizeof(key));
	key.nranks = nranks;
	for (int q = 0; q < nranks; q++) {
		if (ndet_setup_peer_kind(table, my_rank, q) == NDET_PEER_IPC) {
			key.remote = true;
			continue;
		}
		key.pools[q] = table[q].pool_address;
		key.local++;
	}
	pthread_mutex_lock(&ndet_teardown_lock);
	struct ndet_teardown_share *share = ndet_teardown_shares;
	/*
	 * A share stays listed while one of its engines is unreleased: that engine's
	 * pool is allocated, so no other communicator can have the same addresses.
	 */
	while (share != NULL &&
	       (share->nranks != nranks || memcmp(share->pools, key.pools, sizeof(key.pools)) != 0))
		share = share->next;
	if (share == NULL) {
		share = malloc(sizeof(*share));
		if (share != NULL) {
			*share = key;
			share->all_idle = true;
			share->next = ndet_teardown_shares;
			ndet_teardown_shares = share;
		}
	}
	pthread_mutex_unlock(&ndet_teardown_lock);
	return share;
}

void ndet_teardown_release(struct ndet_teardown_share *share, void *engine,
			   const struct ndet_teardown_ops *ops, bool idle, bool peers_done)
{
	const bool free_now = idle && peers_done;
	if (share == NULL) {
		if (free_now)
			ops->free(engine);
		else
			ndet_teardown_leak(engine, ops, "its peers may still read it");
		return;
	}
	pthread_mutex_lock(&ndet_teardown_lock);
	share->released++;
	share->all_idle = share->all_idle && idle;
	if (!free_now) {
		share->engines[share->deferred] = engine;
		share->ops[share->deferred++] = ops;
		ndet_resources_add(&ndet_resources_now.deferred_pools, 1);
	}
	const bool complete = share->released >= share->local;
	if (complete) {
		struct ndet_teardown_share **link = &ndet_teardown_shares;
		while (*link != share)
			link = &(*link)->next;
		*link = share->next;
	}
	pthread_mutex_unlock(&ndet_teardown_lock);
	if (free_now)
		ops->free(engine);
	if (!complete)
		return;
	/* The last rank of this process is gone: nobody here can read the pools any more. */
	const bool free_all = share->all_idle && !share->remote;
	for (int i = 0; i < share->deferred; i++) {
		ndet_resources_add(&ndet_resources_now.deferred_pools, -1);
		if (free_all)
			share->ops[i]->free(share->engines[i]);
		else
			ndet_teardown_leak(share->engines[i], share->ops[i],
					   share->remote
						   ? "ranks in other processes may still read it"
						   : "a kernel of ours did not leave");
	}
	free(share);
}

int ndet_teardown_shares_for_testing(void)
{
	int count = 0;
	pthread_mutex_lock(&ndet_teardown_lock);
	for (struct ndet_teardown_share *share = ndet_teardown_shares; share != NULL;
	     share = share->next)
		count++;
	pthread_mutex_unlock(&ndet_teardown_lock);
	return count;
}
