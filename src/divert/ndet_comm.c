/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Per-communicator state (see ndet_comm.h): the registry, NCCL's config as it
 * applies to us, access to a communicator's engine, and the lifecycle hooks (abort,
 * revoke, finalize, destroy).  Setup, calls, queries and the exit handlers are in
 * the other ndet_comm_*.c files.
 */
#include "config.h"

#include "divert/ndet_comm.h"
#include "divert/ndet_comm_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/ndet_env.h"
#include "common/ndet_log.h"
#include "common/ndet_settings.h"
#include "resolve/ndet_resolve.h"

#define NDET_COMM_BUCKETS 256

static pthread_mutex_t ndet_comm_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ndet_comm *ndet_comm_buckets[NDET_COMM_BUCKETS];
/* The backend of this link (ndet_backend_default), or the one a test set. */
static const struct ndet_backend *ndet_comm_backend_override;

const struct ndet_backend *ndet_comm_backend(void)
{
	return ndet_comm_backend_override != NULL ? ndet_comm_backend_override
						  : ndet_backend_default();
}

static pthread_once_t ndet_comm_fork_once = PTHREAD_ONCE_INIT;

/* ---------------------------------------------------------------- registry */

static unsigned ndet_comm_bucket(ncclComm_t nccl)
{
	uint64_t key = (uint64_t)(uintptr_t)nccl;
	return (unsigned)((key * UINT64_C(0x9e3779b97f4a7c15)) >> 56) % NDET_COMM_BUCKETS;
}

static void ndet_comm_free(struct ndet_comm *comm)
{
	/*
	 * The last reference: nobody can reach the engine any more (an aborted
	 * communicator's, mostly).  Not finalized: no barrier; what a peer may still
	 * read is kept (ndet_teardown.h).
	 */
	if (comm->engine != NULL && ndet_comm_hooks_allowed()) {
		void *engine = comm->engine;
		(void)ndet_comm_backend()->quiesce_group(&engine, 1, false);
		ndet_comm_backend()->release(engine);
	}
	pthread_cond_destroy(&comm->changed);
	pthread_mutex_destroy(&comm->lock);
	free(comm->premul_ops);
	free(comm);
}

void ndet_comm_ref(struct ndet_comm *comm)
{
	pthread_mutex_lock(&ndet_comm_registry_lock);
	comm->refs++;
	pthread_mutex_unlock(&ndet_comm_registry_lock);
}

void ndet_comm_unref(struct ndet_comm *comm)
{
	if (comm == NULL)
		return;
	pthread_mutex_lock(&ndet_comm_registry_lock);
	bool last = --comm->refs == 0;
	pthread_mutex_unlock(&ndet_comm_registry_lock);
	if (last)
		ndet_comm_free(comm);
}

/*
 * Remove from the registry (its reference goes); the caller holds one of its own.
 * Its children no longer know it as their parent: a communicator NCCL creates later
 * at the same address is another one, and its abort must not stop them.
 */
static void ndet_comm_unregister(struct ndet_comm *comm)
{
	bool drop = false;
	pthread_mutex_lock(&ndet_comm_registry_lock);
	if (comm->registered) {
		struct ndet_comm **link = &ndet_comm_buckets[ndet_comm_bucket(comm->nccl)];
		while (*link != NULL && *link != comm)
			link = &(*link)->next;
		if (*link == comm)
			*link = comm->next;
		comm->registered = false;
		drop = true;
		for (unsigned b = 0; b < NDET_COMM_BUCKETS; b++)
			for (struct ndet_comm *child = ndet_comm_buckets[b]; child != NULL;
			     child = child->next)
				if (child->parent == comm->nccl) {
					child->parent = NULL;
					child->shares_parent = false;
				}
	}
	pthread_mutex_unlock(&ndet_comm_registry_lock);
	if (drop)
		ndet_comm_unref(comm);
}

struct ndet_comm *ndet_comm_lookup(ncclComm_t nccl)
{
	struct ndet_comm *found = NULL;
	if (nccl == NULL)
		return NULL;
	pthread_mutex_lock(&ndet_comm_registry_lock);
	for (struct ndet_comm *comm = ndet_comm_buckets[ndet_comm_bucket(nccl)]; comm != NULL;
	     comm = comm->next) {
		if (comm->nccl == nccl) {
			comm->refs++;
			found = comm;
			break;
		}
	}
	pthread_mutex_unlock(&ndet_comm_registry_lock);
	return found;
}

static bool ndet_comm_nccl_checks_pointers(void);

/* splitmix64's finaliser: a well-mixed 64-bit value of z. */
static uint64_t ndet_comm_mix(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t ndet_comm_nonzero(uint64_t identity)
{
	return identity != 0 ? identity : 1;
}

/*
 * How often this process saw each (hash of ids, rank) so far: with NCCL_COMM_ID set,
 * ncclGetUniqueId gives the same bytes to every communicator, created one after the
 * other (they share the root's address), so the n-th communicator of an id is told
 * apart by n.  The oldest entries give way to new ones.
 */
#define NDET_COMM_ID_SEEN 4096
static struct {
	uint64_t key;
	int rank;
	uint64_t count;
} ndet_comm_id_seen[NDET_COMM_ID_SEEN];
static unsigned ndet_comm_id_seen_next;
static pthread_mutex_t ndet_comm_id_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t ndet_comm_id_occurrence(uint64_t key, int rank)
{
	uint64_t count = 0;
	pthread_mutex_lock(&ndet_comm_id_lock);
	unsigned k = 0;
	while (k < NDET_COMM_ID_SEEN &&
	       !(ndet_comm_id_seen[k].key == key && ndet_comm_id_seen[k].rank == rank))
		k++;
	if (k < NDET_COMM_ID_SEEN) {
		count = ++ndet_comm_id_seen[k].count;
	} else {
		k = ndet_comm_id_seen_next++ % NDET_COMM_ID_SEEN;
		ndet_comm_id_seen[k].key = key;
		ndet_comm_id_seen[k].rank = rank;
		ndet_comm_id_seen[k].count = 0;
	}
	pthread_mutex_unlock(&ndet_comm_id_lock);
	return count;
}

uint64_t ndet_comm_identity_of_ids(const void *ids, size_t bytes, int nranks, int rank)
{
	const unsigned char *p = ids;
	uint64_t h = ndet_comm_mix(0x6e6363646574ull ^ (uint64_t)(uint32_t)nranks);
	for (size_t i = 0; p != NULL && i < bytes; i++)
		h = ndet_comm_mix(h ^ p[i]);
	h = ndet_comm_nonzero(h);
	return ndet_comm_nonzero(ndet_comm_mix(h ^ ndet_comm_id_occurrence(h, rank)));
}

uint64_t ndet_comm_identity_fresh(void)
{
	static uint64_t made; /* atomic */
	const uint64_t n = __atomic_add_fetch(&made, 1, __ATOMIC_RELAXED);
	/* Apart from every hash of ids: a different mix of a process-wide count. */
	return ndet_comm_nonzero(ndet_comm_mix(n ^ 0xf4e5ull << 48));
}

uint64_t ndet_comm_identity_of_split(ncclComm_t parent, int color)
{
	struct ndet_comm *known = ndet_comm_lookup(parent);
	if (known == NULL)
		return 0;
	pthread_mutex_lock(&known->lock);
	const uint64_t split = known->splits++;
	pthread_mutex_unlock(&known->lock);
	const uint64_t identity = known->identity;
	ndet_comm_unref(known);
	if (identity == 0)
		return 0;
	return ndet_comm_nonzero(
		ndet_comm_mix(ndet_comm_mix(identity ^ split) ^ (uint64_t)(uint32_t)color));
}

static int ndet_comm_rank_order(const void *a, const void *b)
{
	const int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

uint64_t ndet_comm_identity_of_shrink(ncclComm_t parent, const int *excluded, int count)
{
	int sorted[64];
	if (count < 0 || count > (int)(sizeof(sorted) / sizeof(sorted[0])) ||
	    (count > 0 && excluded == NULL))
		return 0;
	if (count > 0)
		memcpy(sorted, excluded, (size_t)count * sizeof(*sorted));
	qsort(sorted, (size_t)count, sizeof(*sorted), ndet_comm_rank_order);
	uint64_t list = ndet_comm_mix(0x5368726eull ^ (uint64_t)count);
	for (int i = 0; i < count; i++)
		list = ndet_comm_mix(list ^ (uint64_t)(uint32_t)sorted[i]);
	struct ndet_comm *known = ndet_comm_lookup(parent);
	if (known == NULL)
		return 0;
	uint64_t nth = UINT64_MAX;
	pthread_mutex_lock(&known->lock);
	for (int k = 0; k < known->shrink_lists && nth == UINT64_MAX; k++)
		if (known->shrinks[k].list == list)
			nth = known->shrinks[k].count++;
	if (nth == UINT64_MAX && known->shrink_lists < NDET_COMM_SHRINK_LISTS) {
		known->shrinks[known->shrink_lists].list = list;
		known->shrinks[known->shrink_lists++].count = 1;
		nth = 0;
	}
	const uint64_t split = known->splits;
	pthread_mutex_unlock(&known->lock);
	const uint64_t identity = known->identity;
	ndet_comm_unref(known);
	if (identity == 0 || nth == UINT64_MAX)
		return 0;
	return ndet_comm_nonzero(
		ndet_comm_mix(ndet_comm_mix(ndet_comm_mix(identity ^ split) ^ list) ^ nth));
}

struct ndet_comm *ndet_comm_register(ncclComm_t nccl, bool blocking, ncclComm_t parent,
				     bool shares_parent, uint64_t identity)
{
	(void)pthread_once(&ndet_comm_fork_once, ndet_comm_register_fork_handler);
	if (nccl == NULL)
		return NULL;
	/*
	 * NCCL reuses the address of a communicator destroyed behind our back (through
	 * pncclCommDestroy, say): the old entry describes another communicator.
	 */
	struct ndet_comm *stale = ndet_comm_lookup(nccl);
	if (stale != NULL) {
		pthread_mutex_lock(&stale->lock);
		stale->state = NDET_COMM_DEAD;
		pthread_mutex_unlock(&stale->lock);
		ndet_comm_unregister(stale);
		ndet_comm_unref(stale);
	}

	struct ndet_comm *comm = calloc(1, sizeof(*comm));
	if (comm == NULL) {
		NDET_WARN("out of memory tracking communicator %p: the call that created it "
			  "returns ncclSystemError, and its peers may wait for it in nccl-det's "
			  "setup: abort it",
			  (void *)nccl);
		return NULL;
	}
	comm->nccl = nccl;
	comm->blocking = blocking;
	comm->check_pointers = ndet_comm_nccl_checks_pointers();
	comm->parent = parent;
	comm->shares_parent = shares_parent;
	comm->identity = identity;
	comm->state = NDET_COMM_PENDING;
	comm->rank = comm->nranks = comm->device = -1;
	comm->setup_status = NDET_OK;
	comm->verdict.reason = NDET_VERDICT_OK;
	comm->verdict.offending_rank = -1;
	comm->exchange_result = ncclSuccess;
	pthread_mutex_init(&comm->lock, NULL);
	pthread_cond_init(&comm->changed, NULL);
	comm->refs = 2; /* the registry's and the caller's */
	comm->registered = true;
	pthread_mutex_lock(&ndet_comm_registry_lock);
	unsigned bucket = ndet_comm_bucket(nccl);
	comm->next = ndet_comm_buckets[bucket];
	ndet_comm_buckets[bucket] = comm;
	pthread_mutex_unlock(&ndet_comm_registry_lock);
	return comm;
}

ncclComm_t ndet_comm_nccl(const struct ndet_comm *comm)
{
	return comm->nccl;
}

bool ndet_comm_is_blocking(const struct ndet_comm *comm)
{
	return comm->blocking;
}

ndet_comm_state_t ndet_comm_state(struct ndet_comm *comm)
{
	pthread_mutex_lock(&comm->lock);
	ndet_comm_state_t state = comm->state;
	pthread_mutex_unlock(&comm->lock);
	return state;
}

/* ---------------------------------------------------------------- config */

#define NDET_CONFIG_HAS(config, field)                                                             \
	((config)->size >= offsetof(ncclConfig_t, field) + sizeof((config)->field))

/* An integer NCCL variable as NCCL reads it (environment, then its conf files). */
static int ndet_comm_nccl_variable(const char *name, int fallback)
{
	const char *value = ndet_env_get(name, NULL);
	if (value == NULL || value[0] == '\0')
		return fallback;
	char *end = NULL;
	errno = 0;
	long parsed = strtol(value, &end, 0);
	if (errno != 0 || end == value)
		return fallback;
	return (int)parsed;
}

/*
 * NCCL's pointer-check mode: NCCL_CHECK_POINTERS=1 (NCCL up to 2.28), or
 * NCCL_CHECK_MODE set to anything but DEFAULT (its successor).  Either one counts:
 * a call it makes us forward gets NCCL's own answer, checked or not.
 */
static bool ndet_comm_nccl_checks_pointers(void)
{
	if (ndet_comm_nccl_variable("NCCL_CHECK_POINTERS", 0) == 1)
		return true;
	const char *mode = ndet_env_get("NCCL_CHECK_MODE", NULL);
	return mode != NULL && mode[0] != '\0' && strcasecmp(mode, "DEFAULT") != 0;
}

bool ndet_comm_config_blocking(const ncclConfig_t *config, int inherited)
{
	int value = NCCL_CONFIG_UNDEF_INT;
	if (config == NULL && (inherited == 0 || inherited == 1))
		return inherited != 0;
	if (config != NULL && NDET_CONFIG_HAS(config, blocking))
		value = config->blocking;
	if (value == NCCL_CONFIG_UNDEF_INT)
		value = ndet_comm_nccl_variable("NCCL_COMM_BLOCKING", 1);
	return value != 0;
}

bool ndet_comm_config_shares(const ncclConfig_t *config, bool shrink)
{
	int value = NCCL_CONFIG_UNDEF_INT;
	if (config != NULL && !shrink && NDET_CONFIG_HAS(config, splitShare))
		value = config->splitShare;
	if (config != NULL && shrink && NDET_CONFIG_HAS(config, shrinkShare))
		value = config->shrinkShare;
	if (value == NCCL_CONFIG_UNDEF_INT)
		value = ndet_comm_nccl_variable(shrink ? "NCCL_COMM_SHRINK_SHARE_RESOURCES"
						       : "NCCL_COMM_SPLIT_SHARE_RESOURCES",
						0);
	return value == 1;
}

/* ---------------------------------------------------------------- engine access */

/*
 * A kernel of ours failed (its host-mapped error word is set): every later eligible
 * call fails fast.  Reading the word is a plain host load, fine under the lock; the
 * engine cannot go away while the lock is held (finalize detaches it under the lock).
 */
void ndet_comm_refresh_locked(struct ndet_comm *comm)
{
	if (comm->state != NDET_COMM_READY || comm->engine == NULL)
		return;
	const struct ndet_backend *backend = ndet_comm_backend();
	if (backend->error(comm->engine, NULL) == NDET_OK)
		return;
	comm->state = NDET_COMM_POISONED;
	comm->kernel_failed = true;
	/* Once per communicator (the state never goes back to READY): which wait failed. */
	char what[256] = "";
	if (backend->describe_error != NULL)
		(void)backend->describe_error(comm->engine, what, sizeof(what));
	NDET_WARN("communicator %p rank %d: nccl-det's collective failed (%s): its eligible "
		  "calls now fail with ncclRemoteError and ncclCommGetAsyncError reports it; "
		  "abort the communicator (ncclCommAbort) on every rank",
		  (void *)comm->nccl, comm->rank, what[0] != '\0' ? what : "no details");
}

/* Has a kernel of ours failed on `comm`, or its setup found it broken?  No CUDA call. */
static bool ndet_comm_failed(struct ndet_comm *comm)
{
	pthread_mutex_lock(&comm->lock);
	ndet_comm_refresh_locked(comm);
	bool failed = comm->kernel_failed || comm->broken != ncclSuccess;
	pthread_mutex_unlock(&comm->lock);
	return failed;
}

ncclResult_t ndet_comm_failure(struct ndet_comm *comm)
{
	pthread_mutex_lock(&comm->lock);
	ncclResult_t broken = comm->broken;
	const bool unlaunched = comm->unlaunched;
	pthread_mutex_unlock(&comm->lock);
	/* A call this rank never launched is its own failure, not a peer's. */
	return broken != ncclSuccess ? broken : unlaunched ? ncclSystemError : ncclRemoteError;
}

/*
 * The engine of a READY communicator, pinned until ndet_comm_engine_put (finalize
 * waits for the pins before it releases the engine); NULL otherwise.
 */
void *ndet_comm_engine_get(struct ndet_comm *comm)
{
	pthread_mutex_lock(&comm->lock);
	ndet_comm_refresh_locked(comm);
	void *engine = comm->state == NDET_COMM_READY ? comm->engine : NULL;
	if (engine != NULL)
		comm->engine_users++;
	pthread_mutex_unlock(&comm->lock);
	return engine;
}

void ndet_comm_engine_put(struct ndet_comm *comm)
{
	pthread_mutex_lock(&comm->lock);
	if (--comm->engine_users == 0)
		pthread_cond_broadcast(&comm->changed);
	pthread_mutex_unlock(&comm->lock);
}

/* ncclCommAbort or ncclCommRevoke reached `comm`. */
bool ndet_comm_is_stopped(struct ndet_comm *comm)
{
	pthread_mutex_lock(&comm->lock);
	bool stopped = comm->stopped;
	pthread_mutex_unlock(&comm->lock);
	return stopped;
}

/*
 * Take `comm`'s engine for teardown: wait until no thread uses it, then keep it
 * reachable for an abort only (closing_engine).  NULL when it has none.
 */
static void *ndet_comm_engine_close(struct ndet_comm *comm)
{
	pthread_mutex_lock(&comm->lock);
	while (comm->engine != NULL && comm->engine_users > 0)
		pthread_cond_wait(&comm->changed, &comm->lock);
	void *engine = comm->engine;
	comm->engine = NULL;
	comm->closing_engine = engine;
	pthread_mutex_unlock(&comm->lock);
	return engine;
}

/* After phase one: no abort may touch the engine any more, and phase two frees it. */
static void ndet_comm_engine_release(struct ndet_comm *comm, void *engine)
{
	pthread_mutex_lock(&comm->lock);
	comm->closing_engine = NULL;
	pthread_mutex_unlock(&comm->lock);
	ndet_comm_backend()->release(engine);
}

static void ndet_comm_poison_locked(struct ndet_comm *comm)
{
	if (comm->state == NDET_COMM_READY)
		comm->state = NDET_COMM_POISONED;
	comm->kernel_failed = true;
}

/* A launch reported the engine failed. */
void ndet_comm_poison(struct ndet_comm *comm)
{
	pthread_mutex_lock(&comm->lock);
	ndet_comm_refresh_locked(comm); /* READY until now: its WARN says why */
	ndet_comm_poison_locked(comm);
	pthread_mutex_unlock(&comm->lock);
}

void ndet_comm_fail_unlaunched(struct ndet_comm *comm, cudaStream_t stream)
{
	/*
	 * NULL where the communicator failed already (its peers were told then), or is
	 * not set up yet (its setup tells them: ndet_comm_setup_finish).
	 */
	void *engine = ndet_comm_engine_get(comm);
	if (engine != NULL) {
		ndet_comm_backend()->fail_call(engine, stream);
		ndet_comm_engine_put(comm);
	}
	pthread_mutex_lock(&comm->lock);
	if (comm->state == NDET_COMM_PENDING && !comm->dropped) {
		comm->dropped = true;
		comm->dropped_stream = stream;
	}
	ndet_comm_poison_locked(comm);
	comm->unlaunched = true;
	pthread_mutex_unlock(&comm->lock);
}

/* ---------------------------------------------------------------- lifecycle */

bool ndet_comm_async_error(ncclComm_t nccl, ncclResult_t *async_error)
{
	if (async_error == NULL)
		return false;
	struct ndet_comm *comm = ndet_comm_lookup(nccl);
	if (comm == NULL)
		return false;
	bool failed = ndet_comm_failed(comm);
	/*
	 * PyTorch's watchdog keys on ncclRemoteError (a peer or the network failed);
	 * any error makes it abort, so a broken setup reports what it is.
	 */
	ncclResult_t failure = failed ? ndet_comm_failure(comm) : ncclSuccess;
	ndet_comm_unref(comm);
	if (!failed)
		return false;
	*async_error = failure;
	return true;
}

/*
 * Our kernels leave and nothing of ours runs on `comm` any more.  A teardown in
 * progress on another thread (finalize, destroy) is told too: it waits for those
 * kernels.
 */
static void ndet_comm_stop(struct ndet_comm *comm)
{
	pthread_mutex_lock(&comm->lock);
	if (comm->engine != NULL)
		ndet_comm_backend()->abort(comm->engine);
	if (comm->closing_engine != NULL)
		ndet_comm_backend()->abort(comm->closing_engine);
	comm->stopped = true;
	comm->state = NDET_COMM_DEAD;
	pthread_mutex_unlock(&comm->lock);
}

/*
 * The first registered communicator that take() selects (it marks it so that the next
 * walk passes over it), with a reference for the caller; NULL when none is left.
 */
struct ndet_comm *ndet_comm_take_next(bool (*take)(struct ndet_comm *comm, void *context),
				      void *context)
{
	struct ndet_comm *found = NULL;
	pthread_mutex_lock(&ndet_comm_registry_lock);
	for (unsigned b = 0; b < NDET_COMM_BUCKETS && found == NULL; b++) {
		for (struct ndet_comm *comm = ndet_comm_buckets[b]; comm != NULL;
		     comm = comm->next) {
			if (take(comm, context)) {
				comm->refs++;
				found = comm;
				break;
			}
		}
	}
	pthread_mutex_unlock(&ndet_comm_registry_lock);
	return found;
}

/* A child sharing `context`'s resources, not yet visited: now it is. */
static bool ndet_comm_take_child(struct ndet_comm *comm, void *context)
{
	if (!comm->shares_parent || comm->parent != (ncclComm_t)context)
		return false;
	comm->shares_parent = false; /* visit once */
	return true;
}

/* Children that share a parent's resources die with it (NCCL aborts them too). */
static void ndet_comm_stop_children(ncclComm_t parent)
{
	struct ndet_comm *child;
	while ((child = ndet_comm_take_next(ndet_comm_take_child, (void *)parent)) != NULL) {
		ndet_comm_stop(child);
		ndet_comm_unref(child);
	}
}

void ndet_comm_print_stats(struct ndet_comm *comm)
{
	if (!ndet_settings_get()->stats)
		return;
	char fallbacks[512];
	size_t used = 0;
	fallbacks[0] = '\0';
	for (int reason = 1; reason < NDET_FALLBACK_COUNT; reason++) {
		uint64_t calls =
			__atomic_load_n(&comm->stats.fallback_calls[reason], __ATOMIC_RELAXED);
		if (calls == 0 || used >= sizeof(fallbacks))
			continue;
		used += (size_t)snprintf(fallbacks + used, sizeof(fallbacks) - used,
					 "%s%s %" PRIu64, used > 0 ? ", " : "",
					 ndet_fallback_reason_name((ndet_fallback_reason_t)reason),
					 calls);
	}
	pthread_mutex_lock(&comm->lock);
	int rank = comm->rank, nranks = comm->nranks;
	ndet_comm_state_t state = comm->state;
	pthread_mutex_unlock(&comm->lock);
	ndet_log_report(
		"communicator %p rank %d/%d (%s): diverted %" PRIu64 " calls, %" PRIu64
		" bytes (all-reduce %" PRIu64 ", reduce-scatter %" PRIu64 ", reduce %" PRIu64
		"; PreMulSum %" PRIu64 "); fallbacks: %s; refused (strict) %" PRIu64
		"; failed %" PRIu64,
		(void *)comm->nccl, rank, nranks, ndet_comm_state_name(state),
		__atomic_load_n(&comm->stats.diverted_calls, __ATOMIC_RELAXED),
		__atomic_load_n(&comm->stats.diverted_bytes, __ATOMIC_RELAXED),
		__atomic_load_n(&comm->stats.diverted_by_coll[NDET_COLL_ALLREDUCE],
				__ATOMIC_RELAXED),
		__atomic_load_n(&comm->stats.diverted_by_coll[NDET_COLL_REDUCE_SCATTER],
				__ATOMIC_RELAXED),
		__atomic_load_n(&comm->stats.diverted_by_coll[NDET_COLL_REDUCE], __ATOMIC_RELAXED),
		__atomic_load_n(&comm->stats.diverted_premul, __ATOMIC_RELAXED),
		used > 0 ? fallbacks : "none",
		__atomic_load_n(&comm->stats.refused_calls, __ATOMIC_RELAXED),
		__atomic_load_n(&comm->stats.failed_calls, __ATOMIC_RELAXED));
}

struct ndet_comm *ndet_comm_abort_begin(ncclComm_t nccl)
{
	struct ndet_comm *comm = ndet_comm_lookup(nccl);
	if (comm == NULL)
		return NULL;
	/* First, so that a kernel spinning on a dead peer leaves before NCCL tears down. */
	ndet_comm_stop(comm);
	ndet_comm_stop_children(nccl);
	ndet_comm_print_stats(comm);
	ndet_comm_unregister(comm);
	return comm;
}

void ndet_comm_abort_end(struct ndet_comm *comm)
{
	ndet_comm_unref(comm);
}

void ndet_comm_revoke(ncclComm_t nccl)
{
	struct ndet_comm *comm = ndet_comm_lookup(nccl);
	if (comm == NULL)
		return;
	ndet_comm_stop(comm);
	/*
	 * The failed work is aborted: from now on ncclCommGetAsyncError gives NCCL's
	 * answer, as NCCL's revoke promises.  NCCL asks it too, through the public name
	 * this library answers (ncclCommEnsureReady, before a shrink, split or
	 * finalize): our old kernel error would make NCCL refuse the very shrink that
	 * recovers from it (seen with NCCL 2.28.3 under LD_PRELOAD, test/gpu/faults.sh).
	 */
	pthread_mutex_lock(&comm->lock);
	comm->kernel_failed = false;
	comm->unlaunched = false;
	pthread_mutex_unlock(&comm->lock);
	ndet_comm_stop_children(nccl);
	ndet_comm_unref(comm);
}

void ndet_comm_revoke_refused(ncclComm_t nccl, const char *what, ncclResult_t result)
{
	if (result == ncclSuccess || result == ncclInProgress)
		return;
	struct ndet_comm *comm = ndet_comm_lookup(nccl);
	if (comm == NULL)
		return;
	pthread_mutex_lock(&comm->lock);
	const bool first = !comm->revoke_refused;
	comm->revoke_refused = true;
	pthread_mutex_unlock(&comm->lock);
	const struct ndet_nccl *real = first ? ndet_resolve_nccl() : NULL;
	if (first)
		NDET_WARN("communicator %p: NCCL refused %s (%s, %d) after nccl-det had stopped "
			  "its engine for it: the communicator's all-reduces now run in NCCL, not "
			  "deterministically",
			  (void *)nccl, what,
			  real->ncclGetErrorString != NULL ? real->ncclGetErrorString(result)
							   : "error",
			  (int)result);
	ndet_comm_unref(comm);
}

ncclResult_t ndet_comm_finalize_group(struct ndet_comm *const comms[], int count)
{
	ncclResult_t first = ncclSuccess;
	/* Up to NDET_COMM_STACK communicators allocate nothing: none misses the barrier. */
	void *engines_here[NDET_COMM_STACK];
	struct ndet_comm *owners_here[NDET_COMM_STACK];
	const bool here = count <= NDET_COMM_STACK;
	void **engines = here ? engines_here : calloc((size_t)count, sizeof(*engines));
	struct ndet_comm **owners = here ? owners_here : calloc((size_t)count, sizeof(*owners));
	int taken = 0;
	if (engines == NULL || owners == NULL) {
		NDET_WARN("out of memory finalizing %d communicator(s): nccl-det's barrier cannot "
			  "run, the finalize fails with ncclSystemError and pools stay allocated",
			  count);
		first = ncclSystemError;
		goto out;
	}
	for (int i = 0; i < count; i++) {
		struct ndet_comm *comm = comms[i];
		pthread_mutex_lock(&comm->lock);
		/*
		 * Every rank that holds an engine takes part, poisoned or not: a peer
		 * that saw no error is already waiting in the barrier.
		 */
		bool take = comm->engine != NULL &&
			    (comm->state == NDET_COMM_READY || comm->state == NDET_COMM_POISONED);
		if (comm->state != NDET_COMM_PENDING)
			comm->state = NDET_COMM_DEAD;
		pthread_mutex_unlock(&comm->lock);
		void *engine = take ? ndet_comm_engine_close(comm) : NULL;
		if (engine != NULL) {
			engines[taken] = engine;
			owners[taken++] = comm;
		}
	}
	/*
	 * Ranks of one process may all be driven by this thread, finalizing one after
	 * another (NCCL's finalize waits for no peer): a barrier would wait for ranks
	 * this thread has not reached yet.  They release without one, and their pools
	 * are freed together once the last of them is released (ndet_teardown.h).  The
	 * rule comes from the agreed table, so every rank takes the same path.
	 */
	int meeting = 0;
	for (int i = 0; i < taken; i++) {
		if (ndet_comm_backend()->shares_process(engines[i])) {
			(void)ndet_comm_backend()->quiesce_group(&engines[i], 1, false);
			ndet_comm_engine_release(owners[i], engines[i]);
			continue;
		}
		engines[meeting] = engines[i];
		owners[meeting++] = owners[i];
	}
	const ndet_status_t quiesced =
		meeting > 0 ? ndet_comm_backend()->quiesce_group(engines, meeting, true) : NDET_OK;
	if (quiesced != NDET_OK) {
		for (int i = 0; i < meeting; i++) {
			int exchange =
				__atomic_load_n(&owners[i]->exchange_result, __ATOMIC_RELAXED);
			if (exchange != ncclSuccess && first == ncclSuccess)
				first = (ncclResult_t)exchange;
		}
		/* Out of memory (more engines than fit on the stack): no barrier ran. */
		if (quiesced == NDET_ERR_SYSTEM && first == ncclSuccess)
			first = ncclSystemError;
	}
	for (int i = 0; i < meeting; i++)
		ndet_comm_engine_release(owners[i], engines[i]);
out:
	if (!here) {
		free(owners);
		free(engines);
	}
	return first;
}

void ndet_comm_destroy(ncclComm_t nccl)
{
	struct ndet_comm *comm = ndet_comm_lookup(nccl);
	if (comm == NULL)
		return;
	ndet_comm_print_stats(comm);
	pthread_mutex_lock(&comm->lock);
	comm->state = NDET_COMM_DEAD;
	pthread_mutex_unlock(&comm->lock);
	/*
	 * Still registered while we wait for our kernels: an ncclCommAbort from
	 * another thread finds the engine and makes them leave.
	 */
	void *engine = ndet_comm_engine_close(comm);
	if (engine != NULL) {
		(void)ndet_comm_backend()->quiesce_group(&engine, 1, false);
		ndet_comm_engine_release(comm, engine);
	}
	ndet_comm_unregister(comm);
	ndet_comm_unref(comm);
}

/* ---------------------------------------------------------------- tests */

void ndet_comm_set_backend_for_testing(const struct ndet_backend *backend)
{
	ndet_comm_backend_override = backend;
}

int ndet_comm_registered_for_testing(void)
{
	int count = 0;
	pthread_mutex_lock(&ndet_comm_registry_lock);
	for (unsigned b = 0; b < NDET_COMM_BUCKETS; b++)
		for (struct ndet_comm *comm = ndet_comm_buckets[b]; comm != NULL; comm = comm->next)
			count++;
	pthread_mutex_unlock(&ndet_comm_registry_lock);
	return count;
}
