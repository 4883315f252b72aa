/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Per-communicator state, setup through the real NCCL, the diverted launch and the
 * lifecycle hooks (see ndet_comm.h).
 */
#include "config.h"

#include "ndet_comm.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "ndet_env.h"
#include "ndet_log.h"
#include "ndet_plan.h"
#include "ndet_resolve.h"
#include "ndet_settings.h"
#include "ndet_setup.h"
#include "ndet_teardown.h"

/* "auto" travels from the settings to the planner as the same number. */
_Static_assert(NDET_SETTINGS_SIZE_AUTO == NDET_PLAN_ONESHOT_AUTO,
	       "NCCL_DET_ONESHOT_MAX=auto must reach the planner as its sentinel");

#define NDET_COMM_BUCKETS 256

/* Longest pause between two polls of a non-blocking communicator. */
#define NDET_COMM_POLL_MAX_US 1000

struct ndet_comm {
	bool exit_reported; /* NCCL_DET_STATS printed by the exit handler (registry lock) */
	/* registry lock */
	struct ndet_comm *next;
	int refs;
	bool registered;

	/* set at registration, then read-only */
	ncclComm_t nccl;
	bool blocking;
	bool check_pointers; /* NCCL's pointer-check mode, read as NCCL reads it */
	ncclComm_t parent;
	bool shares_parent; /* registry lock: cleared once its parent stopped it */

	/* comm->lock */
	pthread_mutex_t lock;
	pthread_cond_t changed; /* engine_users fell to 0, or a setup finished */
	ndet_comm_state_t state;
	bool setup_running;
	int rank, nranks, device; /* -1 until the setup asked NCCL */
	void *engine;
	/*
	 * An engine in teardown (finalize, destroy): no longer used for calls, but an
	 * abort from another thread must still reach it (its kernels poll the flag, and
	 * the teardown waits for them).  Cleared before the engine is released.
	 */
	void *closing_engine;
	bool stopped;     /* aborted or revoked: our exchanges must not call NCCL on it */
	int engine_users; /* threads between engine_get and engine_put */
	bool kernel_failed;
	bool broken; /* a rank never joined the setup: the collective order is lost */
	bool strict; /* agreed NCCL_DET_STRICT, once set up */
	bool sm90;   /* agreed: every rank's GPU is sm_90 or newer (NDET_SETUP_FLAG_SM90) */
	bool fp8;    /* agreed: every rank runs our fp8 kernels (NDET_SETUP_FLAG_FP8) */
	ndet_status_t setup_status;
	struct ndet_setup_verdict verdict;

	/* comm->lock: the PreMulSum ops NCCL made on this communicator */
	struct ndet_comm_premul *premul_ops;
	int premul_count, premul_capacity;

	/* atomics */
	int exchange_result; /* ncclResult_t of our last failed exchange */
	struct ndet_comm_stats stats;
	int warned[NDET_FALLBACK_COUNT];
	int refused_warned[NDET_FALLBACK_COUNT];
};

/* One ncclRedOpCreatePreMulSum op of a communicator. */
struct ndet_comm_premul {
	ncclRedOp_t op;
	ncclDataType_t datatype;
	ndet_premul_t residence;
	uint64_t bits;      /* NDET_PREMUL_HOST: the scalar's bytes, read at creation */
	const void *scalar; /* NDET_PREMUL_DEVICE */
};

static pthread_mutex_t ndet_comm_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ndet_comm *ndet_comm_buckets[NDET_COMM_BUCKETS];
/* The backend of this link (ndet_backend_default), or the one a test set. */
static const struct ndet_backend *ndet_comm_backend_override;

static const struct ndet_backend *ndet_comm_backend(void)
{
	return ndet_comm_backend_override != NULL ? ndet_comm_backend_override
						  : ndet_backend_default();
}
static int ndet_comm_inert; /* fork child, or exiting */
static pthread_once_t ndet_comm_fork_once = PTHREAD_ONCE_INIT;
static pthread_once_t ndet_comm_exit_once = PTHREAD_ONCE_INIT;

/* ---------------------------------------------------------------- fork and exit */

/*
 * The child of a fork inherits our registry, but none of the CUDA contexts, pools or
 * threads behind it, and possibly a lock some other thread held: do nothing there.
 */
static void ndet_comm_fork_child(void)
{
	__atomic_store_n(&ndet_comm_inert, 1, __ATOMIC_RELEASE);
}

static void ndet_comm_register_fork_handler(void)
{
	if (pthread_atfork(NULL, NULL, ndet_comm_fork_child) != 0)
		NDET_WARN("pthread_atfork failed: a forked child that calls NCCL would run "
			  "nccl-det's hooks on state it does not own");
}

/*
 * Registered right after our first CUDA call, so it runs before the CUDA runtime's
 * own exit handler (handlers run in reverse order): a static destructor that calls
 * ncclCommDestroy afterwards finds us inert instead of calling a dead runtime.
 */
static void ndet_comm_print_stats(struct ndet_comm *comm);
static struct ndet_comm *ndet_comm_take_next(bool (*take)(struct ndet_comm *comm, void *context),
					     void *context);

/* Not yet reported at exit: now it is (under the registry lock). */
static bool ndet_comm_take_unreported(struct ndet_comm *comm, void *context)
{
	(void)context;
	if (comm->exit_reported)
		return false;
	comm->exit_reported = true;
	return true;
}

/*
 * NCCL_DET_STATS of every communicator still registered at exit (a job that never
 * destroys its communicators, as many PyTorch jobs do, would otherwise print none),
 * one at a time, each with a reference of its own while it is printed.
 */
static void ndet_comm_report_live(void)
{
	if (!ndet_settings_get()->stats)
		return;
	struct ndet_comm *comm;
	while ((comm = ndet_comm_take_next(ndet_comm_take_unreported, NULL)) != NULL) {
		ndet_comm_print_stats(comm);
		ndet_comm_unref(comm);
	}
}

static void ndet_comm_at_exit(void)
{
	/* A fork child inherits the handler, but not the parent's pools. */
	if (__atomic_exchange_n(&ndet_comm_inert, 1, __ATOMIC_ACQ_REL) == 0) {
		ndet_comm_report_live();
		ndet_comm_backend()->at_exit();
	}
}

static void ndet_comm_register_exit_handler(void)
{
	if (atexit(ndet_comm_at_exit) != 0)
		NDET_WARN("atexit failed: NCCL calls made after exit() began may reach a CUDA "
			  "runtime that is shutting down");
}

bool ndet_comm_hooks_allowed(void)
{
	return __atomic_load_n(&ndet_comm_inert, __ATOMIC_ACQUIRE) == 0;
}

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

/* Remove from the registry (its reference goes); the caller holds one of its own. */
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

struct ndet_comm *ndet_comm_register(ncclComm_t nccl, bool blocking, ncclComm_t parent,
				     bool shares_parent)
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
		NDET_WARN("out of memory tracking communicator %p: its all-reduces go to NCCL on "
			  "this rank, and its peers wait in nccl-det's setup",
			  (void *)nccl);
		return NULL;
	}
	comm->nccl = nccl;
	comm->blocking = blocking;
	comm->check_pointers = ndet_comm_nccl_checks_pointers();
	comm->parent = parent;
	comm->shares_parent = shares_parent;
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
static void ndet_comm_refresh_locked(struct ndet_comm *comm)
{
	if (comm->state != NDET_COMM_READY || comm->engine == NULL)
		return;
	if (ndet_comm_backend()->error(comm->engine, NULL) == NDET_OK)
		return;
	comm->state = NDET_COMM_POISONED;
	comm->kernel_failed = true;
}

/* Has a kernel of ours failed on `comm`, or its setup found it broken?  No CUDA call. */
static bool ndet_comm_failed(struct ndet_comm *comm)
{
	pthread_mutex_lock(&comm->lock);
	ndet_comm_refresh_locked(comm);
	bool failed = comm->kernel_failed || comm->broken;
	pthread_mutex_unlock(&comm->lock);
	return failed;
}

ncclResult_t ndet_comm_failure(struct ndet_comm *comm)
{
	pthread_mutex_lock(&comm->lock);
	bool broken = comm->broken;
	pthread_mutex_unlock(&comm->lock);
	return broken ? ncclInvalidUsage : ncclRemoteError;
}

/*
 * The engine of a READY communicator, pinned until ndet_comm_engine_put (finalize
 * waits for the pins before it releases the engine); NULL otherwise.
 */
static void *ndet_comm_engine_get(struct ndet_comm *comm)
{
	pthread_mutex_lock(&comm->lock);
	ndet_comm_refresh_locked(comm);
	void *engine = comm->state == NDET_COMM_READY ? comm->engine : NULL;
	if (engine != NULL)
		comm->engine_users++;
	pthread_mutex_unlock(&comm->lock);
	return engine;
}

static void ndet_comm_engine_put(struct ndet_comm *comm)
{
	pthread_mutex_lock(&comm->lock);
	if (--comm->engine_users == 0)
		pthread_cond_broadcast(&comm->changed);
	pthread_mutex_unlock(&comm->lock);
}

/* ncclCommAbort or ncclCommRevoke reached `comm`. */
static bool ndet_comm_is_stopped(struct ndet_comm *comm)
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

/* A launch reported the engine failed. */
static void ndet_comm_poison(struct ndet_comm *comm)
{
	pthread_mutex_lock(&comm->lock);
	if (comm->state == NDET_COMM_READY)
		comm->state = NDET_COMM_POISONED;
	comm->kernel_failed = true;
	pthread_mutex_unlock(&comm->lock);
}

/* ---------------------------------------------------------------- exchange */

/*
 * Poll a non-blocking communicator until NCCL no longer reports ncclInProgress.
 * An ncclCommAbort or ncclCommRevoke (another thread) ends the wait early, and so
 * does NCCL_DET_TIMEOUT (a peer that aborted instead of joining our exchange); the
 * answer is then ncclInProgress: NCCL may still launch work that uses our buffers.
 * Finalize and destroy do not end it: our teardown barrier runs after they marked
 * the communicator inactive, and its all-gather must be waited for before the
 * exchange buffer is freed.
 */
static ncclResult_t ndet_comm_wait_ready(struct ndet_comm *comm)
{
	const struct ndet_nccl *nccl = ndet_resolve_nccl();
	unsigned pause_us = 1;
	if (comm->blocking)
		return ncclSuccess;
	if (nccl->ncclCommGetAsyncError == NULL)
		return ndet_status_to_nccl(
			ndet_resolve_missing(NDET_NCCL_FN_ncclCommGetAsyncError));
	const uint64_t deadline = ndet_teardown_now_ms() + ndet_settings_get()->timeout_ms;
	for (;;) {
		ncclResult_t state = ncclInProgress;
		ncclResult_t result = nccl->ncclCommGetAsyncError(comm->nccl, &state);
		if (result != ncclSuccess)
			return result;
		if (state != ncclInProgress)
			return state;
		/* Aborted from another thread: NCCL will not finish. */
		if (ndet_comm_is_stopped(comm))
			return ncclInProgress;
		if (ndet_teardown_now_ms() > deadline) {
			NDET_WARN("communicator %p: NCCL still reports ncclInProgress for "
				  "nccl-det's exchange after NCCL_DET_TIMEOUT; giving up on it",
				  (void *)comm->nccl);
			return ncclInProgress;
		}
		struct timespec pause = {.tv_sec = 0, .tv_nsec = (long)pause_us * 1000};
		nanosleep(&pause, NULL);
		if (pause_us < NDET_COMM_POLL_MAX_US)
			pause_us *= 2;
	}
}

/*
 * ndet_engine_exchange_fn through the real NCCL: one ncclAllGather per
 * communicator, all in one NCCL group (a thread may drive several ranks of one
 * communicator), on the engines' private streams.  Always called outside the user's
 * groups: inside one, NCCL would defer it to the user's ncclGroupEnd.
 */
static ndet_status_t ndet_comm_exchange(void *const contexts[], int count,
					const void *const sends[], void *const recvs[],
					size_t bytes, const cudaStream_t streams[])
{
	const struct ndet_nccl *nccl = ndet_resolve_nccl();
	ncclResult_t first = ncclSuccess;
	for (int i = 0; i < count; i++) {
		/* Aborted: NCCL is tearing the communicator down (a teardown's barrier). */
		if (ndet_comm_is_stopped(contexts[i])) {
			NDET_INFO(NDET_SUBSYS_SETUP,
				  "communicator %p was aborted: nccl-det's exchange is skipped",
				  (void *)((const struct ndet_comm *)contexts[i])->nccl);
			return NDET_ERR_REMOTE;
		}
	}
	if (nccl->ncclGroupStart == NULL || nccl->ncclGroupEnd == NULL ||
	    nccl->ncclAllGather == NULL) {
		first = ndet_status_to_nccl(ndet_resolve_missing(
			nccl->ncclAllGather == NULL ? NDET_NCCL_FN_ncclAllGather
						    : NDET_NCCL_FN_ncclGroupStart));
		goto out;
	}
	ncclResult_t result = nccl->ncclGroupStart();
	if (result != ncclSuccess) {
		first = result;
		goto out;
	}
	for (int i = 0; i < count; i++) {
		const struct ndet_comm *comm = contexts[i];
		result = nccl->ncclAllGather(sends[i], recvs[i], bytes, ncclUint8, comm->nccl,
					     streams != NULL ? streams[i] : NULL);
		if (result != ncclSuccess && result != ncclInProgress && first == ncclSuccess)
			first = result;
	}
	result = nccl->ncclGroupEnd();
	if (result != ncclSuccess && result != ncclInProgress && first == ncclSuccess)
		first = result;
	/*
	 * Every communicator, even after one failed: one still in progress means NCCL may
	 * still write into its buffer, which must then outlive the engine.
	 */
	bool unresolved = false;
	for (int i = 0; i < count; i++) {
		result = ndet_comm_wait_ready(contexts[i]);
		if (result == ncclInProgress)
			unresolved = true;
		else if (result != ncclSuccess && first == ncclSuccess)
			first = result;
	}
	if (unresolved)
		first = ncclInProgress;
out:
	if (first == ncclSuccess)
		return NDET_OK;
	if (first == ncclInProgress) {
		for (int i = 0; i < count; i++) {
			struct ndet_comm *comm = contexts[i];
			__atomic_store_n(&comm->exchange_result, (int)ncclInvalidUsage,
					 __ATOMIC_RELAXED);
		}
		/* The caller must not free or reuse the buffers (ndet_engine_exchange). */
		NDET_WARN("nccl-det's exchange of %zu bytes on %d communicator(s) was abandoned: "
			  "the communicator was aborted (or NCCL_DET_TIMEOUT passed) while NCCL "
			  "still ran the all-gather",
			  bytes, count);
		return NDET_IN_PROGRESS;
	}
	for (int i = 0; i < count; i++) {
		struct ndet_comm *comm = contexts[i];
		__atomic_store_n(&comm->exchange_result, (int)first, __ATOMIC_RELAXED);
	}
	NDET_WARN("nccl-det's exchange of %zu bytes through ncclAllGather on %d communicator(s) "
		  "failed: %s (%d)",
		  bytes, count,
		  nccl->ncclGetErrorString != NULL ? nccl->ncclGetErrorString(first) : "error",
		  (int)first);
	ndet_status_t status = ndet_status_from_nccl(first);
	return status == NDET_OK || status == NDET_IN_PROGRESS ? NDET_ERR_NCCL : status;
}

/* ---------------------------------------------------------------- setup */

static void ndet_comm_engine_config(const struct ndet_comm *comm, struct ndet_engine_config *config)
{
	const struct ndet_settings *settings = ndet_settings_get();
	memset(config, 0, sizeof(*config));
	config->rank = comm->rank;
	config->nranks = comm->nranks;
	config->cuda_device = comm->device;
	config->pool_size = settings->pool_size;
	config->max_blocks = settings->max_blocks;
	config->oneshot_max = settings->oneshot_max;
	config->ll_max = settings->ll_max;
	config->push_min = settings->push_min;
	config->timeout_ms = settings->timeout_ms;
	config->max_memory = settings->max_memory;
	config->debug_delay_ns = settings->debug_delay_ns;
	config->settings_hash = ndet_settings_agreement_hash(settings);
	config->test_fail = settings->test_fail;
	config->test_fail_rank = settings->test_fail_rank;
	config->setup_flags = settings->strict ? NDET_SETUP_FLAG_STRICT : 0;
}

/* What the setup needs from NCCL: the communicator ready, its rank, size and device. */
static ncclResult_t ndet_comm_describe(struct ndet_comm *comm)
{
	const struct ndet_nccl *nccl = ndet_resolve_nccl();
	int rank = -1, nranks = -1, device = -1;
	ncclResult_t result = ndet_comm_wait_ready(comm);
	if (result == ncclInProgress) /* aborted before it was ready: nothing of ours ran */
		return ncclInvalidUsage;
	if (result != ncclSuccess)
		return result;
	/* An NCCL that lacks one of these never diverts, on any rank: nothing to exchange. */
	if (nccl->ncclCommUserRank == NULL || nccl->ncclCommCount == NULL ||
	    nccl->ncclCommCuDevice == NULL || nccl->ncclGroupStart == NULL ||
	    nccl->ncclGroupEnd == NULL || nccl->ncclAllGather == NULL)
		return ncclInvalidUsage;
	result = nccl->ncclCommUserRank(comm->nccl, &rank);
	if (result == ncclSuccess)
		result = nccl->ncclCommCount(comm->nccl, &nranks);
	if (result == ncclSuccess)
		result = nccl->ncclCommCuDevice(comm->nccl, &device);
	if (result != ncclSuccess)
		return result;
	pthread_mutex_lock(&comm->lock);
	comm->rank = rank;
	comm->nranks = nranks;
	comm->device = device;
	pthread_mutex_unlock(&comm->lock);
	return ncclSuccess;
}

/*
 * The verdict of a communicator's setup, once, on its rank 0, at NCCL's VERSION level
 * (like NCCL's own version line): nccl-det's version, how it was loaded, and whether
 * the floating-point reductions are deterministic or why they run in NCCL.  The other
 * ranks say the same at INFO (ndet_comm_setup_finish).
 */
static void ndet_comm_announce(const struct ndet_comm *comm,
			       const struct ndet_backend_member *member, int rank, int nranks,
			       ndet_comm_state_t state, bool strict)
{
	if (rank != 0 || !ndet_log_enabled(NDET_LOG_VERSION, NDET_SUBSYS_ALL))
		return;
	char cause[256];
	if (member->status == NDET_ERR_UNSUPPORTED)
		snprintf(cause, sizeof(cause), "%s, rank %d",
			 ndet_verdict_reason_name(member->verdict.reason),
			 member->verdict.offending_rank);
	else
		snprintf(cause, sizeof(cause), "setup failed: %s", ndet_status_name(member->status));
	char verdict[512];
	if (state == NDET_COMM_READY)
		snprintf(verdict, sizeof(verdict),
			 "deterministic (its floating-point all-reduce, reduce-scatter and reduce "
			 "run in nccl-det)");
	else if (state == NDET_COMM_POISONED)
		snprintf(verdict, sizeof(verdict),
			 "its floating-point reductions fail with ncclInvalidUsage (%s)", cause);
	else if (strict)
		snprintf(verdict, sizeof(verdict),
			 "not diverted (%s): its floating-point reductions fail with "
			 "ncclInvalidUsage (NCCL_DET_STRICT=1)",
			 cause);
	else
		snprintf(verdict, sizeof(verdict),
			 "NOT deterministic: its floating-point reductions run in NCCL (%s)", cause);
	ndet_log(NDET_LOG_VERSION, NDET_SUBSYS_ALL, __FILE__, __LINE__,
		 "nccl-det %s (%s): communicator %p of %d ranks: %s", PACKAGE_VERSION,
		 ndet_resolve_loading_mode(), (void *)comm->nccl, nranks, verdict);
}

/* The end of one communicator's setup; wakes threads waiting for it. */
static void ndet_comm_setup_finish(struct ndet_comm *comm, const struct ndet_backend_member *member)
{
	pthread_mutex_lock(&comm->lock);
	comm->setup_running = false;
	comm->setup_status = member->status;
	comm->verdict = member->verdict;
	comm->strict = (member->agreed_flags & NDET_SETUP_FLAG_STRICT) != 0;
	comm->sm90 = (member->agreed_flags & NDET_SETUP_FLAG_SM90) != 0;
	comm->fp8 = (member->agreed_flags & NDET_SETUP_FLAG_FP8) != 0;
	/* Falling back would run NCCL on a sequence that no longer matches: fail. */
	bool broken = member->status == NDET_ERR_UNSUPPORTED &&
		      member->verdict.reason == NDET_VERDICT_NOT_IN_SETUP;
	if (comm->state == NDET_COMM_PENDING) {
		comm->state = member->status == NDET_OK ? NDET_COMM_READY
			      : broken                  ? NDET_COMM_POISONED
							: NDET_COMM_FALLBACK;
		comm->broken = broken;
		comm->engine = member->engine;
	} else if (member->engine != NULL) {
		/* Aborted or revoked while we were setting up: the engine is never used. */
		ndet_comm_backend()->abort(member->engine);
		comm->engine = member->engine;
	}
	pthread_cond_broadcast(&comm->changed);
	int rank = comm->rank, nranks = comm->nranks;
	ndet_comm_state_t state = comm->state;
	bool strict = comm->strict;
	pthread_mutex_unlock(&comm->lock);

	ndet_comm_announce(comm, member, rank, nranks, state, strict);
	if (state == NDET_COMM_READY)
		NDET_INFO(NDET_SUBSYS_SETUP, "communicator %p rank %d/%d: all-reduces diverted",
			  (void *)comm->nccl, rank, nranks);
	else if (broken)
		NDET_WARN("communicator %p rank %d/%d: rank %d sent no setup record: %s. Its "
			  "all-reduces fail with ncclInvalidUsage, and ncclCommGetAsyncError "
			  "reports ncclInvalidUsage",
			  (void *)comm->nccl, rank, nranks, member->verdict.offending_rank,
			  ndet_verdict_reason_fix(member->verdict.reason));
	else if (member->status == NDET_ERR_UNSUPPORTED)
		NDET_INFO(NDET_SUBSYS_SETUP,
			  "communicator %p rank %d/%d: not diverted: %s (rank %d, detail %u)",
			  (void *)comm->nccl, rank, nranks,
			  ndet_verdict_reason_name(member->verdict.reason),
			  member->verdict.offending_rank, (unsigned)member->verdict.detail);
	else
		NDET_INFO(NDET_SUBSYS_SETUP,
			  "communicator %p rank %d/%d: not diverted: setup failed (%s)",
			  (void *)comm->nccl, rank, nranks, ndet_status_name(member->status));
}

/* Take the PENDING communicators nobody else is setting up. */
static int ndet_comm_claim(struct ndet_comm *const comms[], int count, struct ndet_comm **claimed)
{
	int taken = 0;
	for (int i = 0; i < count; i++) {
		bool duplicate = false;
		for (int k = 0; k < taken; k++)
			duplicate = duplicate || claimed[k] == comms[i];
		if (duplicate)
			continue;
		pthread_mutex_lock(&comms[i]->lock);
		if (comms[i]->state == NDET_COMM_PENDING && !comms[i]->setup_running) {
			comms[i]->setup_running = true;
			claimed[taken++] = comms[i];
		}
		pthread_mutex_unlock(&comms[i]->lock);
	}
	return taken;
}

/* Another thread is setting `comm` up (NCCL forbids it, but never hang on it). */
static void ndet_comm_wait_setup(struct ndet_comm *comm)
{
	pthread_mutex_lock(&comm->lock);
	while (comm->setup_running)
		pthread_cond_wait(&comm->changed, &comm->lock);
	pthread_mutex_unlock(&comm->lock);
}

ncclResult_t ndet_comm_setup_group(struct ndet_comm *const comms[], int count)
{
	ncclResult_t first = ncclSuccess;
	const size_t slots = (size_t)(count > 0 ? count : 1);
	struct ndet_comm **claimed = calloc(slots, sizeof(*claimed));
	struct ndet_comm **members_of = calloc(slots, sizeof(*members_of));
	struct ndet_backend_member *members = calloc(slots, sizeof(*members));
	if (claimed == NULL || members_of == NULL || members == NULL) {
		NDET_WARN("out of memory setting up %d communicator(s): they stay pending", count);
		goto out;
	}
	int taken = ndet_comm_claim(comms, count, claimed);
	int joining = 0;
	for (int i = 0; i < taken; i++) {
		struct ndet_comm *comm = claimed[i];
		ncclResult_t result = ndet_comm_describe(comm);
		if (result != ncclSuccess) {
			/*
			 * NCCL itself failed this communicator (its init, for a non-blocking
			 * one): every rank sees that, and nobody exchanges.
			 */
			struct ndet_backend_member failed = {.status = NDET_ERR_NCCL};
			failed.verdict.offending_rank = -1;
			NDET_INFO(NDET_SUBSYS_SETUP, "communicator %p: NCCL reports %d: no setup",
				  (void *)comm->nccl, (int)result);
			ndet_comm_setup_finish(comm, &failed);
			continue;
		}
		ndet_comm_engine_config(comm, &members[joining].config);
		members[joining].exchange_context = comm;
		members_of[joining] = comm;
		joining++;
	}
	if (joining > 0) {
		ndet_comm_backend()->create_group(members, joining, ndet_comm_exchange);
		/* The CUDA runtime has started by now (see ndet_comm_at_exit). */
		(void)pthread_once(&ndet_comm_exit_once, ndet_comm_register_exit_handler);
	}
	for (int i = 0; i < joining; i++) {
		struct ndet_comm *comm = members_of[i];
		ndet_comm_setup_finish(comm, &members[i]);
		int exchange = __atomic_load_n(&comm->exchange_result, __ATOMIC_RELAXED);
		if (exchange != ncclSuccess && first == ncclSuccess)
			first = (ncclResult_t)exchange;
		/* The application must learn now: its next collective would not match. */
		if (members[i].verdict.reason == NDET_VERDICT_NOT_IN_SETUP && first == ncclSuccess)
			first = ncclInvalidUsage;
	}
	for (int i = 0; i < count; i++)
		ndet_comm_wait_setup(comms[i]);
out:
	free(members);
	free(members_of);
	free(claimed);
	return first;
}

/* ---------------------------------------------------------------- calls */

/*
 * Would NCCL's pointer check accept the call's buffers?  It checks them against the
 * communicator's device, which a communicator not set up yet has not told us.
 */
static bool ndet_comm_pointers_valid(const struct ndet_call *call)
{
	const struct ndet_nccl *nccl = ndet_resolve_nccl();
	pthread_mutex_lock(&call->comm->lock);
	int device = call->comm->device, rank = call->comm->rank;
	pthread_mutex_unlock(&call->comm->lock);
	if (device < 0 && (nccl->ncclCommCuDevice == NULL ||
			   nccl->ncclCommCuDevice(call->comm->nccl, &device) != ncclSuccess))
		device = -1;
	/* NCCL checks an ncclReduce's recvbuff on the root only. */
	bool check_recv = call->coll != NDET_COLL_REDUCE;
	if (!check_recv) {
		if (rank < 0 && (nccl->ncclCommUserRank == NULL ||
				 nccl->ncclCommUserRank(call->comm->nccl, &rank) != ncclSuccess))
			rank = -1;
		check_recv = rank < 0 || rank == call->root;
	}
	return ndet_comm_backend()->pointer_valid(device, call->sendbuff) &&
	       (!check_recv || ndet_comm_backend()->pointer_valid(device, call->recvbuff));
}

/* The PreMulSum op `op` of `comm`, or NULL.  comm->lock held. */
static const struct ndet_comm_premul *ndet_comm_premul_find_locked(const struct ndet_comm *comm,
								   ncclRedOp_t op)
{
	for (int i = 0; i < comm->premul_count; i++)
		if (comm->premul_ops[i].op == op)
			return &comm->premul_ops[i];
	return NULL;
}

void ndet_comm_decide(struct ndet_call *call)
{
	struct ndet_comm *comm = call->comm;
	struct ndet_eligibility_facts facts = {
		.coll = call->coll,
		.datatype = call->datatype,
		.op = call->op,
		.count = call->count,
		.root = call->root,
	};
	pthread_mutex_lock(&comm->lock);
	ndet_comm_refresh_locked(comm);
	facts.state = comm->state;
	facts.nranks = comm->nranks;
	/* The agreed value only: ranks may differ, and a split decision is a hang. */
	facts.strict = comm->strict;
	facts.sm90 = comm->sm90;
	facts.fp8 = comm->fp8;
	/* The scalar as it is at the first decision: a later ncclRedOpDestroy cannot change it. */
	const struct ndet_comm_premul *premul =
		(int)call->op >= (int)ncclNumOps && call->premul == NDET_PREMUL_NONE
			? ndet_comm_premul_find_locked(comm, call->op)
			: NULL;
	if (premul != NULL) {
		call->premul = premul->residence;
		call->premul_datatype = premul->datatype;
		call->scalar_bits = premul->bits;
		call->scalar = premul->scalar;
	}
	facts.premul_known = call->premul != NDET_PREMUL_NONE;
	facts.premul_datatype = call->premul_datatype;
	pthread_mutex_unlock(&comm->lock);
	/* Only fp8 depends on the NCCL release; do not ask NCCL otherwise. */
	facts.nccl_version = (int)call->datatype >= 10 ? ndet_resolve_nccl_version() : 0;
	/* A debugging mode of NCCL's, so the CUDA call it costs is NCCL's price too. */
	facts.invalid_pointers = call->comm->check_pointers && !ndet_comm_pointers_valid(call);
	ndet_eligibility_decide(&facts, &call->decision);
}

/* The cause of a communicator's fallback, for its WARN. */
static void ndet_comm_describe_fallback(struct ndet_comm *comm, char *text, size_t size)
{
	pthread_mutex_lock(&comm->lock);
	ndet_status_t status = comm->setup_status;
	struct ndet_setup_verdict verdict = comm->verdict;
	pthread_mutex_unlock(&comm->lock);
	if (status == NDET_ERR_UNSUPPORTED && verdict.reason == NDET_VERDICT_LOCAL_FAILURE)
		snprintf(text, size, "%s on rank %d (%s). Fix: %s",
			 ndet_verdict_reason_name(verdict.reason), verdict.offending_rank,
			 ndet_local_status_name((ndet_local_status_t)verdict.detail),
			 ndet_verdict_reason_fix(verdict.reason));
	else if (status == NDET_ERR_UNSUPPORTED)
		snprintf(text, size, "%s (rank %d). Fix: %s",
			 ndet_verdict_reason_name(verdict.reason), verdict.offending_rank,
			 ndet_verdict_reason_fix(verdict.reason));
	else
		snprintf(text, size,
			 "its setup failed on this rank (%s; see the WARN above). Fix: that "
			 "cause, or NCCL_DET_ENABLE=0 on every rank",
			 ndet_status_name(status));
}

static bool ndet_comm_agreed_fallback(struct ndet_comm *comm)
{
	pthread_mutex_lock(&comm->lock);
	bool agreed = comm->setup_status == NDET_ERR_UNSUPPORTED;
	pthread_mutex_unlock(&comm->lock);
	return agreed;
}

static int ndet_comm_rank(struct ndet_comm *comm)
{
	pthread_mutex_lock(&comm->lock);
	int rank = comm->rank;
	pthread_mutex_unlock(&comm->lock);
	return rank;
}

static int ndet_comm_size(struct ndet_comm *comm)
{
	pthread_mutex_lock(&comm->lock);
	int nranks = comm->nranks;
	pthread_mutex_unlock(&comm->lock);
	return nranks;
}

static void ndet_comm_describe_reason(struct ndet_comm *comm, const struct ndet_call *call,
				      char *text, size_t size)
{
	switch (call->decision.reason) {
	case NDET_FALLBACK_DATATYPE:
		snprintf(text, size,
			 "datatype %d (fp8): a rank's GPU cannot run this build's fp8 kernels "
			 "(see its setup WARN). Fix: rebuild with --with-nvcc-fp8-gencode for "
			 "that GPU, or reduce in bf16, f16 or f32",
			 (int)call->datatype);
		return;
	case NDET_FALLBACK_OP:
		snprintf(text, size,
			 "op %d is not one nccl-det computes (sum, prod, min, max, avg, "
			 "PreMulSum). Fix: use one of those",
			 (int)call->op);
		return;
	case NDET_FALLBACK_COMMUNICATOR:
		ndet_comm_describe_fallback(comm, text, size);
		return;
	default:
		snprintf(text, size, "%s", ndet_fallback_reason_name(call->decision.reason));
		return;
	}
}

void ndet_comm_note_decision(const struct ndet_call *call)
{
	struct ndet_comm *comm = call->comm;
	const ndet_fallback_reason_t reason = call->decision.reason;
	char cause[768];
	switch (call->decision.action) {
	case NDET_ACTION_FORWARD:
		__atomic_add_fetch(&comm->stats.fallback_calls[reason], 1, __ATOMIC_RELAXED);
		if (!call->decision.floating || reason == NDET_FALLBACK_INVALID ||
		    reason == NDET_FALLBACK_INACTIVE)
			return;
		/* A setup that failed here (not a verdict) was WARNed where it failed. */
		if (reason == NDET_FALLBACK_COMMUNICATOR && !ndet_comm_agreed_fallback(comm))
			return;
		if (__atomic_exchange_n(&comm->warned[reason], 1, __ATOMIC_RELAXED) != 0)
			return;
		ndet_comm_describe_reason(comm, call, cause, sizeof(cause));
		NDET_WARN("communicator %p rank %d: floating-point reductions (%s and any "
			  "other with this cause) run in NCCL and are not deterministic: %s; "
			  "NCCL_DET_STRICT=1 makes them fail instead",
			  (void *)comm->nccl, ndet_comm_rank(comm), ndet_comm_coll_name(call->coll),
			  cause);
		return;
	case NDET_ACTION_REFUSE:
		__atomic_add_fetch(&comm->stats.refused_calls, 1, __ATOMIC_RELAXED);
		if (__atomic_exchange_n(&comm->refused_warned[reason], 1, __ATOMIC_RELAXED) != 0)
			return;
		ndet_comm_describe_reason(comm, call, cause, sizeof(cause));
		NDET_WARN("communicator %p rank %d: NCCL_DET_STRICT=1: %s fails with "
			  "ncclInvalidUsage because it would not be deterministic: %s",
			  (void *)comm->nccl, ndet_comm_rank(comm), ndet_comm_coll_name(call->coll),
			  cause);
		return;
	case NDET_ACTION_FAIL:
		__atomic_add_fetch(&comm->stats.failed_calls, 1, __ATOMIC_RELAXED);
		return;
	case NDET_ACTION_DIVERT:
	case NDET_ACTION_SETUP:
		return;
	}
}

/* Most launches are single calls: no allocation on the call path for small batches. */
#define NDET_COMM_LAUNCH_STACK 16

ncclResult_t ndet_comm_launch_group(struct ndet_call *calls, int count)
{
	ncclResult_t first = ncclSuccess;
	struct ndet_backend_call stack_launches[NDET_COMM_LAUNCH_STACK];
	int stack_index[NDET_COMM_LAUNCH_STACK];
	struct ndet_backend_call *launches = stack_launches;
	int *index = stack_index;
	int launching = 0;
	if (count > NDET_COMM_LAUNCH_STACK) {
		launches = calloc((size_t)count, sizeof(*launches));
		index = calloc((size_t)count, sizeof(*index));
		if (launches == NULL || index == NULL) {
			first = ncclSystemError;
			goto out;
		}
	}
	for (int i = 0; i < count; i++) {
		struct ndet_call *call = &calls[i];
		/* A kernel error seen since the decision: fail fast, never launch. */
		void *engine = ndet_comm_engine_get(call->comm);
		if (engine == NULL) {
			__atomic_add_fetch(&call->comm->stats.failed_calls, 1, __ATOMIC_RELAXED);
			if (first == ncclSuccess)
				first = ndet_comm_failure(call->comm);
			continue;
		}
		launches[launching] = (struct ndet_backend_call){
			.engine = engine,
			.sendbuff = call->sendbuff,
			.recvbuff = call->recvbuff,
			.count = call->count,
			.dtype = call->decision.dtype,
			.op = call->decision.op,
			.stream = call->stream,
			.coll = call->coll,
			.root = call->root,
			.premul = call->decision.premul ? call->premul : NDET_PREMUL_NONE,
			.scalar_bits = call->scalar_bits,
			.scalar = call->scalar,
		};
		index[launching++] = i;
	}
	if (launching > 0)
		ndet_comm_backend()->allreduce_group(launches, launching);
	for (int k = 0; k < launching; k++) {
		struct ndet_call *call = &calls[index[k]];
		ndet_status_t status = launches[k].status;
		ndet_comm_engine_put(call->comm);
		if (status == NDET_OK) {
			struct ndet_comm_stats *stats = &call->comm->stats;
			/* A reduce-scatter's sendbuff holds every rank's block. */
			const uint64_t blocks = call->coll == NDET_COLL_REDUCE_SCATTER
							? (uint64_t)ndet_comm_size(call->comm)
							: 1;
			__atomic_add_fetch(&stats->diverted_calls, 1, __ATOMIC_RELAXED);
			__atomic_add_fetch(&stats->diverted_by_coll[call->coll], 1,
					   __ATOMIC_RELAXED);
			if (call->decision.premul)
				__atomic_add_fetch(&stats->diverted_premul, 1, __ATOMIC_RELAXED);
			__atomic_add_fetch(&stats->diverted_bytes,
					   (uint64_t)call->count * blocks *
						   ndet_plan_dtype_size(call->decision.dtype),
					   __ATOMIC_RELAXED);
			continue;
		}
		if (status == NDET_ERR_REMOTE)
			ndet_comm_poison(call->comm);
		__atomic_add_fetch(&call->comm->stats.failed_calls, 1, __ATOMIC_RELAXED);
		if (first == ncclSuccess)
			first = ndet_status_to_nccl(status);
	}
out:
	if (index != stack_index)
		free(index);
	if (launches != stack_launches)
		free(launches);
	return first;
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
static struct ndet_comm *ndet_comm_take_next(bool (*take)(struct ndet_comm *comm, void *context),
					     void *context)
{
	struct ndet_comm *found = NULL;
	pthread_mutex_lock(&ndet_comm_registry_lock);
	for (unsigned b = 0; b < NDET_COMM_BUCKETS && found == NULL; b++) {
		for (struct ndet_comm *comm = ndet_comm_buckets[b]; comm != NULL; comm = comm->next) {
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

static void ndet_comm_print_stats(struct ndet_comm *comm)
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
	pthread_mutex_unlock(&comm->lock);
	ndet_comm_stop_children(nccl);
	ndet_comm_unref(comm);
}

ncclResult_t ndet_comm_finalize_group(struct ndet_comm *const comms[], int count)
{
	ncclResult_t first = ncclSuccess;
	void **engines = calloc((size_t)(count > 0 ? count : 1), sizeof(*engines));
	struct ndet_comm **owners = calloc((size_t)(count > 0 ? count : 1), sizeof(*owners));
	int taken = 0;
	if (engines == NULL || owners == NULL) {
		NDET_WARN("out of memory finalizing %d communicator(s): pools stay allocated",
			  count);
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
	if (meeting > 0 && ndet_comm_backend()->quiesce_group(engines, meeting, true) != NDET_OK) {
		for (int i = 0; i < meeting; i++) {
			int exchange =
				__atomic_load_n(&owners[i]->exchange_result, __ATOMIC_RELAXED);
			if (exchange != ncclSuccess && first == ncclSuccess)
				first = (ncclResult_t)exchange;
		}
	}
	for (int i = 0; i < meeting; i++)
		ndet_comm_engine_release(owners[i], engines[i]);
out:
	free(owners);
	free(engines);
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

/* ---------------------------------------------------------------- PreMulSum ops */

/* Bytes of one scalar of a datatype nccl-det reduces; 0 for the others (never diverted). */
static size_t ndet_comm_scalar_size(ncclDataType_t datatype)
{
	if (datatype == NDET_NCCL_FP8_E4M3 || datatype == NDET_NCCL_FP8_E5M2)
		return 1;
	switch (datatype) {
	case ncclFloat16:
	case ncclBfloat16:
		return 2;
	case ncclFloat32:
		return 4;
	case ncclFloat64:
		return 8;
	default:
		return 0;
	}
}

void ndet_comm_premul_created(ncclComm_t nccl, ncclRedOp_t op, const void *scalar,
			      ncclDataType_t datatype, ncclScalarResidence_t residence)
{
	struct ndet_comm *comm = ndet_comm_lookup(nccl);
	if (comm == NULL)
		return;
	struct ndet_comm_premul premul = {
		.op = op,
		.datatype = datatype,
		.residence = residence == ncclScalarDevice ? NDET_PREMUL_DEVICE : NDET_PREMUL_HOST,
	};
	if (premul.residence == NDET_PREMUL_DEVICE)
		premul.scalar = scalar;
	else /* little-endian: the element's bits in the low bytes, as the kernels read them */
		memcpy(&premul.bits, scalar, ndet_comm_scalar_size(datatype));
	pthread_mutex_lock(&comm->lock);
	/* NCCL hands out a destroyed op's value again: the new op replaces it. */
	int slot = 0;
	while (slot < comm->premul_count && comm->premul_ops[slot].op != op)
		slot++;
	if (slot == comm->premul_count && slot == comm->premul_capacity) {
		int grown = comm->premul_capacity == 0 ? 4 : 2 * comm->premul_capacity;
		struct ndet_comm_premul *larger =
			realloc(comm->premul_ops, (size_t)grown * sizeof(*larger));
		if (larger == NULL) {
			pthread_mutex_unlock(&comm->lock);
			/* Unknown to us: calls with it go to NCCL on every rank that ran out. */
			NDET_WARN("out of memory recording PreMulSum op %d of communicator %p: its "
				  "calls run in NCCL on this rank, which hangs if other ranks "
				  "divert them",
				  (int)op, (void *)nccl);
			ndet_comm_unref(comm);
			return;
		}
		comm->premul_ops = larger;
		comm->premul_capacity = grown;
	}
	comm->premul_ops[slot] = premul;
	if (slot == comm->premul_count)
		comm->premul_count++;
	pthread_mutex_unlock(&comm->lock);
	ndet_comm_unref(comm);
}

void ndet_comm_premul_destroyed(ncclComm_t nccl, ncclRedOp_t op)
{
	struct ndet_comm *comm = ndet_comm_lookup(nccl);
	if (comm == NULL)
		return;
	pthread_mutex_lock(&comm->lock);
	for (int i = 0; i < comm->premul_count; i++) {
		if (comm->premul_ops[i].op == op) {
			comm->premul_ops[i] = comm->premul_ops[--comm->premul_count];
			break;
		}
	}
	pthread_mutex_unlock(&comm->lock);
	ndet_comm_unref(comm);
}

const char *ndet_comm_coll_name(ndet_coll_t coll)
{
	static const char *const names[NDET_COLL_COUNT] = {
		[NDET_COLL_ALLREDUCE] = "ncclAllReduce",
		[NDET_COLL_REDUCE_SCATTER] = "ncclReduceScatter",
		[NDET_COLL_REDUCE] = "ncclReduce",
	};
	if ((unsigned)coll >= NDET_COLL_COUNT)
		return "unknown collective";
	return names[coll];
}

/* ---------------------------------------------------------------- queries, tests */

ncclResult_t ndet_comm_query(ncclComm_t nccl, int *diverted, const char **reason)
{
	if (nccl == NULL || diverted == NULL)
		return ncclInvalidArgument;
	const char *why = "not managed by nccl-det (unknown communicator, or NCCL_DET_ENABLE=0)";
	int is_diverted = 0;
	struct ndet_comm *comm = ndet_comm_lookup(nccl);
	if (comm != NULL) {
		pthread_mutex_lock(&comm->lock);
		ndet_comm_refresh_locked(comm);
		switch (comm->state) {
		case NDET_COMM_READY:
			is_diverted = 1;
			why = "diverted: eligible all-reduces, reduce-scatters and reduces (sum, "
			      "prod, min, max, avg, PreMulSum) run in nccl-det's engine";
			break;
		case NDET_COMM_PENDING:
			why = "setup pending: runs at the first eligible reduction (non-blocking "
			      "communicator) or at the outermost ncclGroupEnd";
			break;
		case NDET_COMM_FALLBACK:
			why = comm->setup_status == NDET_ERR_UNSUPPORTED
				      ? ndet_verdict_reason_name(comm->verdict.reason)
				      : "setup failed on this rank";
			break;
		case NDET_COMM_POISONED:
			why = comm->broken ? "broken: a rank did not take part in nccl-det's "
					     "setup (NCCL_DET_ENABLE differs between ranks)"
					   : "poisoned: an nccl-det kernel failed (peer timeout, "
					     "abort or diverging calls)";
			break;
		case NDET_COMM_DEAD:
		default:
			why = "inactive: aborted, revoked or finalized";
			break;
		}
		pthread_mutex_unlock(&comm->lock);
		ndet_comm_unref(comm);
	}
	*diverted = is_diverted;
	if (reason != NULL)
		*reason = why;
	return ncclSuccess;
}

bool ndet_comm_stats(ncclComm_t nccl, struct ndet_comm_stats *stats)
{
	struct ndet_comm *comm = ndet_comm_lookup(nccl);
	if (comm == NULL)
		return false;
	stats->diverted_calls = __atomic_load_n(&comm->stats.diverted_calls, __ATOMIC_RELAXED);
	stats->diverted_bytes = __atomic_load_n(&comm->stats.diverted_bytes, __ATOMIC_RELAXED);
	for (int i = 0; i < NDET_COLL_COUNT; i++)
		stats->diverted_by_coll[i] =
			__atomic_load_n(&comm->stats.diverted_by_coll[i], __ATOMIC_RELAXED);
	stats->diverted_premul = __atomic_load_n(&comm->stats.diverted_premul, __ATOMIC_RELAXED);
	for (int i = 0; i < NDET_FALLBACK_COUNT; i++)
		stats->fallback_calls[i] =
			__atomic_load_n(&comm->stats.fallback_calls[i], __ATOMIC_RELAXED);
	stats->refused_calls = __atomic_load_n(&comm->stats.refused_calls, __ATOMIC_RELAXED);
	stats->failed_calls = __atomic_load_n(&comm->stats.failed_calls, __ATOMIC_RELAXED);
	ndet_comm_unref(comm);
	return true;
}

void ndet_comm_set_backend_for_testing(const struct ndet_backend *backend)
{
	ndet_comm_backend_override = backend;
}

void *ndet_comm_engine_for_testing(ncclComm_t nccl)
{
	struct ndet_comm *comm = ndet_comm_lookup(nccl);
	if (comm == NULL)
		return NULL;
	pthread_mutex_lock(&comm->lock);
	void *engine = comm->engine;
	pthread_mutex_unlock(&comm->lock);
	ndet_comm_unref(comm);
	return engine;
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
