/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Engine teardown decisions and resource counts (see ndet_teardown.h).
 */
#include "config.h"

#include "protocol/ndet_teardown.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include "common/ndet_log.h"
#include "kernels/ndet_types.h"

/* ---------------------------------------------------------------- resources */

static struct ndet_resources ndet_resources_now; /* atomics */
static int ndet_teardown_leak_logged;            /* once per process */
static int ndet_teardown_pending_logged;         /* once per process */
static uint64_t ndet_teardown_detach_wait_ms = NDET_TEARDOWN_DETACH_WAIT_MS;
/* Fork child, runtime shutting down, or exit handler done: pending pools stay put. */
static int ndet_teardown_stopped;

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
	resources->pending_pools =
		__atomic_load_n(&ndet_resources_now.pending_pools, __ATOMIC_RELAXED);
	resources->leaked_pools =
		__atomic_load_n(&ndet_resources_now.leaked_pools, __ATOMIC_RELAXED);
	resources->leaked_bytes =
		__atomic_load_n(&ndet_resources_now.leaked_bytes, __ATOMIC_RELAXED);
	resources->peers_gone = __atomic_load_n(&ndet_resources_now.peers_gone, __ATOMIC_RELAXED);
}

void ndet_resources_reset_for_testing(void)
{
	int64_t *counters[] = {
		&ndet_resources_now.allocations,   &ndet_resources_now.bytes,
		&ndet_resources_now.ipc_imports,   &ndet_resources_now.deferred_pools,
		&ndet_resources_now.pending_pools, &ndet_resources_now.leaked_pools,
		&ndet_resources_now.leaked_bytes,  &ndet_resources_now.peers_gone,
	};
	for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++)
		__atomic_store_n(counters[i], 0, __ATOMIC_RELAXED);
	__atomic_store_n(&ndet_teardown_leak_logged, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&ndet_teardown_pending_logged, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&ndet_teardown_detach_wait_ms, NDET_TEARDOWN_DETACH_WAIT_MS,
			 __ATOMIC_RELAXED);
	__atomic_store_n(&ndet_teardown_stopped, 0, __ATOMIC_RELAXED);
}

/* ---------------------------------------------------------------- quiesce */

uint64_t ndet_teardown_now_ms(void)
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

/*
 * Every per-rank field below is indexed by local index (ndet_teardown.h): the
 * position of a rank among the ranks of this host, in rank order.
 */
struct ndet_teardown_share {
	struct ndet_teardown_share *next;
	int nranks;
	uint64_t pools[NDET_MAX_RANKS]; /* pool address of each rank in this process, else 0 */
	int local;                      /* ranks of the communicator in this process */
	int released;
	bool all_idle; /* every released engine was idle */
	int deferred;
	void *engines[NDET_MAX_RANKS]; /* released, memory kept until the share completes */
	const struct ndet_teardown_ops *ops[NDET_MAX_RANKS];
	int ranks[NDET_MAX_RANKS];        /* the global rank of each deferred engine */
	uint32_t readers[NDET_MAX_RANKS]; /* local indices that may read each deferred pool */
	/* The detach protocol, from the table (the same for every rank of the share). */
	uint64_t epoch;
	uint32_t ipc_peers; /* ranks of this host in other processes: they import our pools */
	uint32_t pid_known; /* ranks whose pid may be judged (our PID namespace) */
	uint64_t pids[NDET_MAX_RANKS];
	int host_ranks[NDET_MAX_RANKS]; /* the global rank of each local index */
};

_Static_assert(NDET_MAX_RANKS <= 32, "local rank masks are 32-bit");

/* A released engine whose pool waits for peers in other processes to let go. */
struct ndet_teardown_pending {
	struct ndet_teardown_pending *next;
	void *engine;
	const struct ndet_teardown_ops *ops;
	int rank; /* global */
	uint64_t epoch;
	uint32_t waiting; /* local indices neither detached nor found dead yet */
	uint32_t pid_known;
	uint64_t pids[NDET_MAX_RANKS];
	int host_ranks[NDET_MAX_RANKS];
	uint64_t settle_until_ms; /* a retry with `wait` polls until then */
};

static pthread_mutex_t ndet_teardown_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ndet_teardown_share *ndet_teardown_shares;
static struct ndet_teardown_pending *ndet_teardown_pending_list;
static pthread_once_t ndet_teardown_fork_once = PTHREAD_ONCE_INIT;

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

/* ---------------------------------------------------------------- detach protocol */

static uint64_t ndet_teardown_mix(uint64_t hash, const void *bytes, size_t length)
{
	const unsigned char *p = bytes;
	for (size_t i = 0; i < length; i++) {
		hash ^= p[i];
		hash *= UINT64_C(0x100000001b3);
	}
	return hash;
}

/* splitmix64's finaliser: every input bit moves every output bit. */
static uint64_t ndet_teardown_scramble(uint64_t x)
{
	x ^= x >> 30;
	x *= UINT64_C(0xbf58476d1ce4e5b9);
	x ^= x >> 27;
	x *= UINT64_C(0x94d049bb133111eb);
	return x ^ (x >> 31);
}

/*
 * Field by field (never padding): what makes a setup unique is its processes, its
 * pools and their IPC handles (a new allocation gets a new handle).
 */
uint64_t ndet_teardown_epoch(const struct ndet_setup_payload *table, int nranks)
{
	uint64_t hash = UINT64_C(0xcbf29ce484222325);
	for (int r = 0; table != NULL && r < nranks; r++) {
		const struct ndet_setup_payload *p = &table[r];
		hash = ndet_teardown_mix(hash, &p->pid, sizeof(p->pid));
		hash = ndet_teardown_mix(hash, &p->pid_namespace, sizeof(p->pid_namespace));
		hash = ndet_teardown_mix(hash, p->device_uuid, sizeof(p->device_uuid));
		hash = ndet_teardown_mix(hash, &p->pool_address, sizeof(p->pool_address));
		hash = ndet_teardown_mix(hash, &p->pool_bytes, sizeof(p->pool_bytes));
		hash = ndet_teardown_mix(hash, p->ipc_handle, sizeof(p->ipc_handle));
	}
	hash = ndet_teardown_scramble(hash);
	return hash != 0 ? hash : 1;
}

uint64_t ndet_teardown_detach_word(uint64_t epoch, int writer, int owner)
{
	uint64_t word = ndet_teardown_scramble(
		epoch ^
		ndet_teardown_scramble(((uint64_t)(uint32_t)writer << 32) | (uint32_t)owner));
	return word != 0 ? word : 1;
}

bool ndet_teardown_process_gone(uint64_t pid)
{
	if (pid == 0 || pid > (uint64_t)INT32_MAX)
		return false;
	if (kill((pid_t)pid, 0) != 0)
		return errno == ESRCH;
	/* A zombie has exited: its mappings died with its address space and its files. */
	char path[64];
	snprintf(path, sizeof(path), "/proc/%llu/stat", (unsigned long long)pid);
	FILE *file = fopen(path, "r");
	if (file == NULL)
		return false;
	char line[512];
	bool zombie = false;
	if (fgets(line, sizeof(line), file) != NULL) {
		/* "pid (comm) S ...": comm may hold ')' and spaces; the state follows the last. */
		const char *close = strrchr(line, ')');
		zombie = close != NULL && close[1] == ' ' && (close[2] == 'Z' || close[2] == 'X');
	}
	fclose(file);
	return zombie;
}

/* ---------------------------------------------------------------- release */

/*
 * Same process = what ndet_setup_peer_kind says, the rule the engines map by: a
 * share holds exactly the ranks that reach each other by direct pointers.  Ranks on
 * other hosts never map our pools and their pids are not ours to judge: they take no
 * part (neither in the share nor among the peers the detach protocol waits for), and
 * get no local index.  The ranks of this host are numbered in rank order, as
 * ndet_host_table numbers them; the communicator may hold any number of hosts.
 */
struct ndet_teardown_share *ndet_teardown_reserve(void)
{
	return malloc(sizeof(struct ndet_teardown_share));
}

void ndet_teardown_unreserve(struct ndet_teardown_share *reserved)
{
	free(reserved);
}

struct ndet_teardown_share *ndet_teardown_join(const struct ndet_setup_payload *table, int nranks,
					       int my_rank, struct ndet_teardown_share **reserved)
{
	struct ndet_teardown_share key;
	if (table == NULL || nranks < 1 || nranks > NDET_SETUP_NRANKS_LIMIT || my_rank < 0 ||
	    my_rank >= nranks)
		return NULL;
	memset(&key, 0, sizeof(key));
	key.nranks = nranks;
	key.epoch = ndet_teardown_epoch(table, nranks);
	const uint64_t my_namespace = table[my_rank].pid_namespace;
	int l = 0;
	for (int q = 0; q < nranks; q++) {
		const ndet_peer_kind_t kind = ndet_setup_peer_kind(table, my_rank, q);
		if (kind == NDET_PEER_REMOTE)
			continue;
		/* The verdict refuses more on one host: no share, the memory is kept. */
		if (l >= NDET_MAX_RANKS)
			return NULL;
		key.host_ranks[l] = q;
		if (kind == NDET_PEER_IPC) {
			key.ipc_peers |= 1u << l;
			key.pids[l] = table[q].pid;
			if (my_namespace != 0 && table[q].pid_namespace == my_namespace)
				key.pid_known |= 1u << l;
		} else {
			key.pools[l] = table[q].pool_address;
			key.local++;
		}
		l++;
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
	if (share == NULL && reserved != NULL) {
		share = *reserved;
		*reserved = NULL;
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

static void ndet_teardown_fork_child(void)
{
	/* The child owns none of the parent's pools: never touch them. */
	__atomic_store_n(&ndet_teardown_stopped, 1, __ATOMIC_RELEASE);
}

static void ndet_teardown_register_fork_handler(void)
{
	if (pthread_atfork(NULL, NULL, ndet_teardown_fork_child) != 0)
		NDET_WARN(
			"pthread_atfork failed: a forked child could check pools it does not own");
}

/* The share's last engine is released and all were idle: wait for the other processes. */
static void ndet_teardown_pend(const struct ndet_teardown_share *share, void *engine,
			       const struct ndet_teardown_ops *ops, int rank, uint32_t readers)
{
	struct ndet_teardown_pending *pending = calloc(1, sizeof(*pending));
	if (pending == NULL) {
		ndet_teardown_leak(engine, ops, "out of memory for its release record");
		return;
	}
	(void)pthread_once(&ndet_teardown_fork_once, ndet_teardown_register_fork_handler);
	pending->engine = engine;
	pending->ops = ops;
	pending->rank = rank;
	pending->epoch = share->epoch;
	pending->waiting = share->ipc_peers & readers;
	pending->pid_known = share->pid_known;
	memcpy(pending->pids, share->pids, sizeof(pending->pids));
	memcpy(pending->host_ranks, share->host_ranks, sizeof(pending->host_ranks));
	pending->settle_until_ms = ndet_teardown_now_ms() +
				   __atomic_load_n(&ndet_teardown_detach_wait_ms, __ATOMIC_RELAXED);
	ndet_resources_add(&ndet_resources_now.pending_pools, 1);
	pthread_mutex_lock(&ndet_teardown_lock);
	pending->next = ndet_teardown_pending_list;
	ndet_teardown_pending_list = pending;
	pthread_mutex_unlock(&ndet_teardown_lock);
}

void ndet_teardown_release(struct ndet_teardown_share *share, void *engine,
			   const struct ndet_teardown_ops *ops, int rank, bool idle,
			   bool peers_done, uint32_t readers)
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
		share->ranks[share->deferred] = rank;
		share->readers[share->deferred] = readers;
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
	/*
	 * The last rank of this process is gone: nobody here can read the pools any
	 * more.  Ranks of other processes may, until they let go (detach protocol).
	 */
	for (int i = 0; i < share->deferred; i++) {
		ndet_resources_add(&ndet_resources_now.deferred_pools, -1);
		if (!share->all_idle)
			ndet_teardown_leak(share->engines[i], share->ops[i],
					   "a kernel of ours did not leave");
		else if ((share->ipc_peers & share->readers[i]) != 0)
			ndet_teardown_pend(share, share->engines[i], share->ops[i], share->ranks[i],
					   share->readers[i]);
		else
			share->ops[i]->free(share->engines[i]);
	}
	free(share);
}

/* Result of one look at a pending pool. */
typedef enum {
	NDET_TEARDOWN_STILL_READ = 0, /* some peer may still read it */
	NDET_TEARDOWN_UNREAD,         /* no peer can: free it */
	NDET_TEARDOWN_STOP,           /* the runtime is going: touch nothing any more */
} ndet_teardown_look_t;

static ndet_teardown_look_t ndet_teardown_look(struct ndet_teardown_pending *pending)
{
	uint64_t words[NDET_MAX_RANKS];
	ndet_teardown_read_t read = pending->ops->read_detach(pending->engine, words);
	if (read == NDET_TEARDOWN_READ_DOWN)
		return NDET_TEARDOWN_STOP;
	for (int l = 0; l < NDET_MAX_RANKS; l++) {
		const uint32_t bit = 1u << l;
		if ((pending->waiting & bit) == 0)
			continue;
		/* A word of another epoch (an earlier communicator's) is not this one's. */
		const uint64_t word = ndet_teardown_detach_word(
			pending->epoch, pending->host_ranks[l], pending->rank);
		if (read == NDET_TEARDOWN_READ_OK && words[l] == word) {
			pending->waiting &= ~bit;
		} else if ((pending->pid_known & bit) != 0 &&
			   pending->ops->process_gone(pending->pids[l])) {
			pending->waiting &= ~bit;
			ndet_resources_add(&ndet_resources_now.peers_gone, 1);
		}
	}
	return pending->waiting == 0 ? NDET_TEARDOWN_UNREAD : NDET_TEARDOWN_STILL_READ;
}

/* The first pool still waited for after its poll: say who holds it, once per process. */
static void ndet_teardown_log_pending(const struct ndet_teardown_pending *pending)
{
	if (__atomic_exchange_n(&ndet_teardown_pending_logged, 1, __ATOMIC_RELAXED) != 0)
		return;
	int l = 0;
	while (l < NDET_MAX_RANKS - 1 && (pending->waiting & (1u << l)) == 0)
		l++;
	NDET_INFO(NDET_SUBSYS_ALLOC,
		  "rank %d's pool stays allocated: rank %d (pid %llu) in another process has "
		  "not let go of it yet; it is freed when that rank tears down or its process "
		  "ends, checked at later communicator teardowns and at exit "
		  "(later ones are counted, not logged)",
		  pending->rank, pending->host_ranks[l], (unsigned long long)pending->pids[l]);
}

void ndet_teardown_pending_retry(bool wait)
{
	if (__atomic_load_n(&ndet_teardown_stopped, __ATOMIC_ACQUIRE) != 0)
		return;
	/* Claim every pending pool: another thread's retry leaves them to us meanwhile. */
	pthread_mutex_lock(&ndet_teardown_lock);
	struct ndet_teardown_pending *claimed = ndet_teardown_pending_list;
	ndet_teardown_pending_list = NULL;
	pthread_mutex_unlock(&ndet_teardown_lock);
	long pause_us = 50;
	bool stop = false;
	while (claimed != NULL && !stop) {
		bool settling = false;
		const uint64_t now = ndet_teardown_now_ms();
		for (struct ndet_teardown_pending **link = &claimed; *link != NULL && !stop;) {
			struct ndet_teardown_pending *pending = *link;
			ndet_teardown_look_t look = ndet_teardown_look(pending);
			stop = look == NDET_TEARDOWN_STOP;
			if (look != NDET_TEARDOWN_UNREAD) {
				settling = settling || now < pending->settle_until_ms;
				link = &pending->next;
				continue;
			}
			*link = pending->next;
			ndet_resources_add(&ndet_resources_now.pending_pools, -1);
			pending->ops->free(pending->engine);
			free(pending);
		}
		if (!wait || !settling || stop)
			break;
		struct timespec pause = {.tv_sec = 0, .tv_nsec = pause_us * 1000L};
		nanosleep(&pause, NULL);
		if (pause_us < 4000)
			pause_us *= 2;
	}
	if (stop)
		ndet_teardown_stop();
	if (claimed == NULL)
		return;
	const uint64_t now = ndet_teardown_now_ms();
	struct ndet_teardown_pending *last = claimed;
	for (struct ndet_teardown_pending *p = claimed; p != NULL; p = p->next) {
		if (now >= p->settle_until_ms)
			ndet_teardown_log_pending(p);
		last = p;
	}
	pthread_mutex_lock(&ndet_teardown_lock);
	last->next = ndet_teardown_pending_list;
	ndet_teardown_pending_list = claimed;
	pthread_mutex_unlock(&ndet_teardown_lock);
}

void ndet_teardown_stop(void)
{
	__atomic_store_n(&ndet_teardown_stopped, 1, __ATOMIC_RELEASE);
}

void ndet_teardown_at_exit(void)
{
	/*
	 * Live engines may have kernels spinning (a thread blocked in a call, say), and
	 * a free would wait behind them: then the driver frees everything at exit.
	 */
	pthread_mutex_lock(&ndet_teardown_lock);
	const bool live = ndet_teardown_shares != NULL;
	pthread_mutex_unlock(&ndet_teardown_lock);
	if (!live)
		ndet_teardown_pending_retry(false);
	/* The runtime goes next: what is still pending is the driver's to free. */
	ndet_teardown_stop();
}

void ndet_teardown_abandon_pending_for_testing(void)
{
	pthread_mutex_lock(&ndet_teardown_lock);
	struct ndet_teardown_pending *pending = ndet_teardown_pending_list;
	ndet_teardown_pending_list = NULL;
	pthread_mutex_unlock(&ndet_teardown_lock);
	while (pending != NULL) {
		struct ndet_teardown_pending *next = pending->next;
		ndet_resources_add(&ndet_resources_now.pending_pools, -1);
		(void)pending->ops->abandon(pending->engine);
		free(pending);
		pending = next;
	}
}

void ndet_teardown_set_detach_wait_for_testing(uint64_t ms)
{
	__atomic_store_n(&ndet_teardown_detach_wait_ms, ms, __ATOMIC_RELAXED);
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
