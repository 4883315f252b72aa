/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * A communicator's setup through the real NCCL (see ndet_comm.h): the exchange the
 * engine's setup rounds run on (one ncclAllGather per communicator, in one NCCL
 * group), and the setup of a group of communicators in lockstep with its verdict.
 */
#include "config.h"

#include "divert/ndet_comm.h"
#include "divert/ndet_comm_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/ndet_log.h"
#include "common/ndet_settings.h"
#include "protocol/ndet_plan.h"
#include "protocol/ndet_setup.h"
#include "protocol/ndet_teardown.h"
#include "resolve/ndet_resolve.h"

/* "auto" travels from the settings to the planner as the same number. */
_Static_assert(NDET_SETTINGS_SIZE_AUTO == NDET_PLAN_ONESHOT_AUTO,
	       "NCCL_DET_ONESHOT_MAX=auto must reach the planner as its sentinel");

/* Longest pause between two polls of a non-blocking communicator. */
#define NDET_COMM_POLL_MAX_US 1000

static pthread_once_t ndet_comm_exit_once = PTHREAD_ONCE_INIT;

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
ncclResult_t ndet_comm_wait_nccl(struct ndet_comm *comm)
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
			NDET_WARN("communicator %p: NCCL still reports ncclInProgress after "
				  "NCCL_DET_TIMEOUT; nccl-det stops waiting for it",
				  (void *)comm->nccl);
			return ncclInProgress;
		}
		struct timespec pause = {.tv_sec = 0, .tv_nsec = (long)pause_us * 1000};
		nanosleep(&pause, NULL);
		if (pause_us < NDET_COMM_POLL_MAX_US)
			pause_us *= 2;
	}
}

static struct ndet_exchange_place ndet_comm_place(const struct ndet_comm *comm)
{
	return ndet_exchange_place_of(comm->identity, comm->rank, comm->nranks, comm->device);
}

/* Member i of an exchange leaves it: `why` is its result (ndet_comm_exchange). */
static void ndet_comm_exchange_fail(struct ndet_comm *comm, ncclResult_t why)
{
	__atomic_store_n(&comm->exchange_result, (int)why, __ATOMIC_RELAXED);
}

/*
 * ndet_engine_exchange_fn through the real NCCL: one ncclAllGather per
 * communicator, all in one NCCL group (a thread may drive several ranks of one
 * communicator), on the engines' private streams.  Always called outside the user's
 * groups: inside one, NCCL would defer it to the user's ncclGroupEnd.  A
 * communicator aborted or revoked (from another thread) leaves the exchange before
 * NCCL is called, with the members that may be ranks of it (ndet_exchange_may_share);
 * the others exchange as if it had never been there.
 */
static ndet_status_t ndet_comm_exchange(void *const contexts[], int count,
					const void *const sends[], void *const recvs[],
					size_t bytes, const cudaStream_t streams[],
					ndet_status_t results[])
{
	const struct ndet_nccl *nccl = ndet_resolve_nccl();
	/* Up to NDET_COMM_STACK members allocate nothing: none leaves its peers waiting. */
	ncclResult_t outcome_here[NDET_COMM_STACK];
	bool out_here[NDET_COMM_STACK];
	struct ndet_exchange_place places_here[NDET_COMM_STACK];
	const bool here = count <= NDET_COMM_STACK;
	const size_t slots = (size_t)(count > 0 ? count : 1);
	ncclResult_t *outcome = here ? outcome_here : calloc(slots, sizeof(*outcome));
	bool *out = here ? out_here : calloc(slots, sizeof(*out));
	struct ndet_exchange_place *places = here ? places_here : calloc(slots, sizeof(*places));
	ndet_status_t first = NDET_OK;
	int calling = 0, failed = 0;
	if (outcome == NULL || out == NULL || places == NULL) {
		for (int i = 0; i < count; i++)
			results[i] = NDET_ERR_SYSTEM;
		first = NDET_ERR_SYSTEM;
		goto done;
	}
	for (int i = 0; i < count; i++) {
		out[i] = false;
		/* Aborted: NCCL is tearing the communicator down (a teardown's barrier). */
		if (ndet_comm_is_stopped(contexts[i])) {
			NDET_INFO(NDET_SUBSYS_SETUP,
				  "communicator %p was aborted: nccl-det's exchange is skipped",
				  (void *)((const struct ndet_comm *)contexts[i])->nccl);
			out[i] = true;
		}
	}
	/* ... and every member that may be a rank of one of them. */
	for (int i = 0; i < count; i++)
		places[i] = ndet_comm_place(contexts[i]);
	ndet_exchange_leave_together(places, out, count);
	for (int i = 0; i < count; i++)
		if (out[i] && !ndet_comm_is_stopped(contexts[i]))
			NDET_INFO(NDET_SUBSYS_SETUP,
				  "communicator %p may be a rank of an aborted communicator of "
				  "this thread: nccl-det's exchange is skipped",
				  (void *)((const struct ndet_comm *)contexts[i])->nccl);
	for (int i = 0; i < count; i++) {
		outcome[i] = ncclSuccess;
		if (!out[i])
			calling++;
	}
	if (calling == 0)
		goto judge;
	if (nccl->ncclGroupStart == NULL || nccl->ncclGroupEnd == NULL ||
	    nccl->ncclAllGather == NULL) {
		const ncclResult_t missing = ndet_status_to_nccl(ndet_resolve_missing(
			nccl->ncclAllGather == NULL ? NDET_NCCL_FN_ncclAllGather
						    : NDET_NCCL_FN_ncclGroupStart));
		for (int i = 0; i < count; i++)
			outcome[i] = missing;
		goto judge;
	}
	ncclResult_t group = nccl->ncclGroupStart();
	if (group != ncclSuccess) {
		for (int i = 0; i < count; i++)
			outcome[i] = group;
		goto judge;
	}
	for (int i = 0; i < count; i++) {
		if (out[i])
			continue;
		const struct ndet_comm *comm = contexts[i];
		ncclResult_t result =
			nccl->ncclAllGather(sends[i], recvs[i], bytes, ncclUint8, comm->nccl,
					    streams != NULL ? streams[i] : NULL);
		if (result != ncclSuccess && result != ncclInProgress)
			outcome[i] = result;
	}
	/* NCCL's group reports one result for all of them: each one in it takes it. */
	group = nccl->ncclGroupEnd();
	for (int i = 0; i < count; i++)
		if (!out[i] && group != ncclSuccess && group != ncclInProgress &&
		    outcome[i] == ncclSuccess)
			outcome[i] = group;
	/*
	 * Every communicator, even after one failed: one still in progress means NCCL may
	 * still write into its buffer, which must then outlive the engine.
	 */
	for (int i = 0; i < count; i++) {
		if (out[i])
			continue;
		const ncclResult_t result = ndet_comm_wait_nccl(contexts[i]);
		if (result == ncclInProgress ||
		    (result != ncclSuccess && outcome[i] == ncclSuccess))
			outcome[i] = result;
	}
judge:
	for (int i = 0; i < count; i++) {
		struct ndet_comm *comm = contexts[i];
		if (out[i]) {
			results[i] = NDET_ERR_REMOTE;
		} else if (outcome[i] == ncclSuccess) {
			results[i] = NDET_OK;
			continue;
		} else if (outcome[i] == ncclInProgress) {
			/* The caller must not free or reuse the buffers (ndet_engine_exchange). */
			ndet_comm_exchange_fail(comm, ncclInvalidUsage);
			NDET_WARN("communicator %p: nccl-det's exchange of %zu bytes was "
				  "abandoned: the communicator was aborted (or NCCL_DET_TIMEOUT "
				  "passed) while NCCL still ran the all-gather",
				  (void *)comm->nccl, bytes);
			results[i] = NDET_IN_PROGRESS;
		} else {
			ndet_comm_exchange_fail(comm, outcome[i]);
			NDET_WARN("communicator %p: nccl-det's exchange of %zu bytes through "
				  "ncclAllGather failed: %s (%d)",
				  (void *)comm->nccl, bytes,
				  nccl->ncclGetErrorString != NULL
					  ? nccl->ncclGetErrorString(outcome[i])
					  : "error",
				  (int)outcome[i]);
			const ndet_status_t status = ndet_status_from_nccl(outcome[i]);
			results[i] = status == NDET_OK || status == NDET_IN_PROGRESS ? NDET_ERR_NCCL
										     : status;
		}
		failed++;
		if (first == NDET_OK)
			first = results[i];
	}
	if (failed > 0 && failed < count)
		NDET_INFO(NDET_SUBSYS_SETUP,
			  "nccl-det's exchange: %d of %d communicator(s) failed, the others "
			  "went on",
			  failed, count);
done:
	if (!here) {
		free(places);
		free(out);
		free(outcome);
	}
	return first;
}

/* ---------------------------------------------------------------- setup */

static void ndet_comm_engine_config(const struct ndet_comm *comm, struct ndet_engine_config *config)
{
	const struct ndet_settings *settings = ndet_settings_get();
	memset(config, 0, sizeof(*config));
	config->rank = comm->rank;
	config->nranks = comm->nranks;
	config->cuda_device = comm->device;
	ndet_engine_config_from_settings(settings, config);
	config->timeout_ms = settings->timeout_ms;
	config->debug_delay_ns = settings->debug_delay_ns;
	config->test_fail = settings->test_fail;
	config->test_fail_rank = settings->test_fail_rank;
	config->setup_flags = settings->strict ? NDET_SETUP_FLAG_STRICT : 0;
	/* The data path between hosts: a multi-host table diverts where every rank has it. */
	if (ndet_comm_hosts_capable())
		config->setup_flags |= NDET_SETUP_FLAG_MULTI_HOST;
	config->nonblocking = !comm->blocking;
	config->comm_identity = comm->identity;
	if (ndet_settings_test_host(settings, comm->rank, config->test_host,
				    sizeof(config->test_host)))
		NDET_INFO(NDET_SUBSYS_SETUP,
			  "communicator %p rank %d: publishes host \"%s\" (NCCL_DET_TEST_HOST)",
			  (void *)comm->nccl, comm->rank, config->test_host);
}

/* What the setup needs from NCCL: the communicator ready, its rank, size and device. */
static ncclResult_t ndet_comm_describe(struct ndet_comm *comm)
{
	const struct ndet_nccl *nccl = ndet_resolve_nccl();
	int rank = -1, nranks = -1, device = -1;
	ncclResult_t result = ndet_comm_wait_nccl(comm);
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
			       ndet_comm_state_t state, bool strict, ncclResult_t broken,
			       bool dropped)
{
	if (rank != 0 || !ndet_log_enabled(NDET_LOG_VERSION, NDET_SUBSYS_ALL))
		return;
	char cause[256];
	if (dropped)
		snprintf(cause, sizeof(cause), "a call of this rank was dropped before the setup");
	else if (member->status == NDET_ERR_UNSUPPORTED)
		snprintf(cause, sizeof(cause), "%s, rank %d",
			 ndet_verdict_reason_name(member->verdict.reason),
			 member->verdict.offending_rank);
	else
		snprintf(cause, sizeof(cause), "setup failed: %s",
			 ndet_status_name(member->status));
	char verdict[512];
	/* Across hosts, the layout the bits are a function of (doc/multihost.md). */
	char layout[96] = "";
	struct ndet_backend_hosts view;
	if (state == NDET_COMM_READY && member->engine != NULL &&
	    ndet_comm_hosts_engine(member->engine, &view))
		snprintf(layout, sizeof(layout), " across %d hosts of %d rank%s", view.nhosts,
			 view.local_ranks, view.local_ranks == 1 ? "" : "s");
	if (state == NDET_COMM_READY)
		snprintf(verdict, sizeof(verdict),
			 "deterministic%s (its floating-point all-reduce, reduce-scatter and "
			 "reduce run in nccl-det)",
			 layout);
	else if (state == NDET_COMM_POISONED)
		snprintf(verdict, sizeof(verdict),
			 "its floating-point reductions fail with %s (%s)",
			 broken == ncclInvalidUsage  ? "ncclInvalidUsage"
			 : broken == ncclRemoteError ? "ncclRemoteError"
						     : "an error of this rank",
			 cause);
	else if (strict)
		snprintf(verdict, sizeof(verdict),
			 "not diverted (%s): its floating-point reductions fail with "
			 "ncclInvalidUsage (NCCL_DET_STRICT=1)",
			 cause);
	else
		snprintf(verdict, sizeof(verdict),
			 "NOT deterministic: its floating-point reductions run in NCCL (%s)",
			 cause);
	ndet_log(NDET_LOG_VERSION, NDET_SUBSYS_ALL, __FILE__, __LINE__,
		 "nccl-det %s (%s): communicator %p of %d ranks: %s", PACKAGE_VERSION,
		 ndet_resolve_loading_mode(), (void *)comm->nccl, nranks, verdict);
}

/*
 * ncclSuccess where `member` left the setup as every rank of its communicator did:
 * set up, or not diverted by the ranks' common verdict, by a configuration every
 * rank shares or by an NCCL that every rank finds the same (it failed the
 * communicator, or lacks a function the setup needs), or because NCCL failed our
 * exchange (the creating call returns NCCL's error, and NCCL fails the rest), or a
 * CUDA runtime that cannot start (a precondition, alike on every rank).  Otherwise
 * the error the communicator is broken with: ncclInvalidUsage where a rank never
 * joined the setup; ncclRemoteError where it left with a rank of its own
 * communicator that this thread also drives (aborted, or its exchange failed);
 * ncclSystemError where it could not take its part for want of memory.  Its peers
 * may still wait in the exchange, so nothing of this rank may run in NCCL in its
 * place.
 */
static ncclResult_t ndet_comm_setup_broken(const struct ndet_comm *comm,
					   const struct ndet_backend_member *member)
{
	switch (member->status) {
	case NDET_OK:
	case NDET_ERR_INVALID_ARGUMENT:
	case NDET_ERR_NCCL:
	/*
	 * A CUDA failure (the runtime of nccl-det cannot start: no driver, or one older
	 * than it) passes through with one WARN, as doc/contract.md says: every rank of
	 * a job needs a working runtime, or none.
	 */
	case NDET_ERR_CUDA:
		return ncclSuccess;
	case NDET_ERR_UNSUPPORTED:
		return member->verdict.reason == NDET_VERDICT_NOT_IN_SETUP ? ncclInvalidUsage
									   : ncclSuccess;
	default:
		break;
	}
	if (__atomic_load_n(&comm->exchange_result, __ATOMIC_RELAXED) != ncclSuccess)
		return ncclSuccess;
	const ncclResult_t result = ndet_status_to_nccl(member->status);
	return result == ncclSuccess || result == ncclInProgress || result == ncclInternalError
		       ? ncclSystemError
		       : result;
}

/* The end of one communicator's setup; wakes threads waiting for it. */
static void ndet_comm_setup_finish(struct ndet_comm *comm, const struct ndet_backend_member *member)
{
	ncclResult_t broken = ndet_comm_setup_broken(comm, member);
	void *tell = NULL; /* the engine that tells the peers of a dropped call */
	cudaStream_t tell_stream = NULL;
	bool dropped = false;
	pthread_mutex_lock(&comm->lock);
	comm->setup_running = false;
	comm->setup_status = member->status;
	comm->verdict = member->verdict;
	comm->strict = (member->agreed_flags & NDET_SETUP_FLAG_STRICT) != 0;
	comm->sm90 = (member->agreed_flags & NDET_SETUP_FLAG_SM90) != 0;
	comm->fp8 = (member->agreed_flags & NDET_SETUP_FLAG_FP8) != 0;
	/* Falling back would run NCCL on a sequence that may no longer match: fail. */
	if (comm->state == NDET_COMM_PENDING) {
		comm->state = member->status == NDET_OK ? NDET_COMM_READY
			      : broken != ncclSuccess   ? NDET_COMM_POISONED
							: NDET_COMM_FALLBACK;
		/*
		 * A call of this rank was dropped before: its peers run theirs now, in our
		 * kernels (told at once, below) or in NCCL (where this rank's next call must
		 * not pair with it): it fails, and so does every later one.
		 */
		dropped = comm->dropped && comm->state != NDET_COMM_POISONED;
		if (dropped) {
			if (comm->state == NDET_COMM_READY && member->engine != NULL) {
				tell = member->engine;
				tell_stream = comm->dropped_stream;
				comm->engine_users++;
			}
			comm->state = NDET_COMM_POISONED;
			broken = ncclSystemError;
		}
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
	/* Broken only where the setup decided the state (not aborted meanwhile). */
	const ncclResult_t stored = comm->broken;
	pthread_mutex_unlock(&comm->lock);

	ndet_comm_announce(comm, member, rank, nranks, state, strict, stored, dropped);
	if (tell != NULL) {
		ndet_comm_backend()->fail_call(tell, tell_stream);
		ndet_comm_engine_put(comm);
	}
	if (dropped)
		NDET_WARN("communicator %p rank %d/%d: a call of this rank was dropped before "
			  "nccl-det's setup (see the WARN above), and its peers' calls of it "
			  "fail. Its all-reduces, reduce-scatters and reduces fail with "
			  "ncclSystemError, and ncclCommGetAsyncError reports it: abort the "
			  "communicator",
			  (void *)comm->nccl, rank, nranks);
	else if (state == NDET_COMM_READY)
		NDET_INFO(NDET_SUBSYS_SETUP, "communicator %p rank %d/%d: all-reduces diverted",
			  (void *)comm->nccl, rank, nranks);
	else if (stored == ncclInvalidUsage)
		NDET_WARN("communicator %p rank %d/%d: rank %d sent no setup record: %s. Its "
			  "all-reduces fail with ncclInvalidUsage, and ncclCommGetAsyncError "
			  "reports ncclInvalidUsage",
			  (void *)comm->nccl, rank, nranks, member->verdict.offending_rank,
			  ndet_verdict_reason_fix(member->verdict.reason));
	else if (stored != ncclSuccess)
		NDET_WARN("communicator %p rank %d/%d: %s (%s), and its peers may wait for it "
			  "there. Its all-reduces, reduce-scatters and reduces fail with %s, and "
			  "ncclCommGetAsyncError reports it: abort the communicator",
			  (void *)comm->nccl, rank, nranks,
			  stored == ncclRemoteError
				  ? "this rank left nccl-det's setup with another rank of its "
				    "communicator that this thread drives"
				  : "this rank could not take its part in nccl-det's setup",
			  ndet_status_name(member->status),
			  ndet_resolve_nccl()->ncclGetErrorString != NULL
				  ? ndet_resolve_nccl()->ncclGetErrorString(stored)
				  : "an error");
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

/*
 * The connections between hosts of the engines that span hosts, made before any call
 * of theirs (ndet_comm_hosts_connect); connected[i] is member i's NCCL result.  Only
 * a table that diverts gets here on any rank, so every rank of it takes part.
 */
static void ndet_comm_setup_connect(const struct ndet_backend_member *members,
				    struct ndet_comm *const comms[], ncclResult_t connected[],
				    int count)
{
	/* Up to NDET_COMM_STACK communicators allocate nothing: none drops out. */
	void *engines_here[NDET_COMM_STACK];
	ncclComm_t nccl_here[NDET_COMM_STACK];
	const bool here = count <= NDET_COMM_STACK;
	void **engines = here ? engines_here : calloc((size_t)count, sizeof(*engines));
	ncclComm_t *nccl = here ? nccl_here : calloc((size_t)count, sizeof(*nccl));
	if (engines == NULL || nccl == NULL) {
		for (int i = 0; i < count; i++)
			connected[i] = members[i].status == NDET_OK ? ncclSystemError : ncclSuccess;
		goto out;
	}
	for (int i = 0; i < count; i++) {
		/* Aborted or revoked during the setup: NCCL will not connect it any more. */
		engines[i] = members[i].status == NDET_OK && !ndet_comm_is_stopped(comms[i])
				     ? members[i].engine
				     : NULL;
		nccl[i] = comms[i]->nccl;
	}
	(void)ndet_comm_hosts_connect(engines, nccl, connected, count);
out:
	if (!here) {
		free(nccl);
		free(engines);
	}
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

/* Its peers may wait for each of them in the exchange (ndet_comm_setup_broken). */
ncclResult_t ndet_comm_setup_refuse(struct ndet_comm *const comms[], int count)
{
	if (count < 1)
		return ncclSystemError;
	NDET_WARN("out of memory setting up %d communicator(s): their all-reduces, "
		  "reduce-scatters and reduces fail with ncclSystemError, and their peers may "
		  "wait for them in nccl-det's setup: abort them",
		  count);
	for (int i = 0; i < count; i++) {
		pthread_mutex_lock(&comms[i]->lock);
		if (comms[i]->state == NDET_COMM_PENDING && !comms[i]->setup_running) {
			comms[i]->state = NDET_COMM_POISONED;
			comms[i]->broken = ncclSystemError;
			comms[i]->setup_status = NDET_ERR_SYSTEM;
			pthread_cond_broadcast(&comms[i]->changed);
		}
		pthread_mutex_unlock(&comms[i]->lock);
	}
	return ncclSystemError;
}

ncclResult_t ndet_comm_setup_group(struct ndet_comm *const comms[], int count)
{
	ncclResult_t first = ncclSuccess;
	const size_t slots = (size_t)(count > 0 ? count : 1);
	/* Up to NDET_COMM_STACK communicators allocate nothing before the exchange. */
	struct ndet_comm *claimed_here[NDET_COMM_STACK], *members_of_here[NDET_COMM_STACK];
	struct ndet_backend_member members_here[NDET_COMM_STACK];
	ncclResult_t connected_here[NDET_COMM_STACK];
	const bool here = count <= NDET_COMM_STACK;
	struct ndet_comm **claimed = here ? claimed_here : calloc(slots, sizeof(*claimed));
	struct ndet_comm **members_of = here ? members_of_here : calloc(slots, sizeof(*members_of));
	struct ndet_backend_member *members = here ? members_here : calloc(slots, sizeof(*members));
	ncclResult_t *connected = here ? connected_here : calloc(slots, sizeof(*connected));
	if (claimed == NULL || members_of == NULL || members == NULL || connected == NULL) {
		first = ndet_comm_setup_refuse(comms, count);
		goto out;
	}
	memset(members, 0, slots * sizeof(*members));
	memset(connected, 0, slots * sizeof(*connected));
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
		ndet_comm_setup_connect(members, members_of, connected, joining);
	}
	for (int i = 0; i < joining; i++) {
		struct ndet_comm *comm = members_of[i];
		ndet_comm_setup_finish(comm, &members[i]);
		int exchange = __atomic_load_n(&comm->exchange_result, __ATOMIC_RELAXED);
		if (exchange != ncclSuccess && first == ncclSuccess)
			first = (ncclResult_t)exchange;
		/* The connections failed: the call that set it up returns NCCL's error. */
		if (connected[i] != ncclSuccess && first == ncclSuccess)
			first = connected[i];
		/*
		 * The application must learn now: its next collective may not match.  (Not
		 * of a rank that left with another of its communicator: that one's error is
		 * returned, or the application aborted it.)
		 */
		pthread_mutex_lock(&comm->lock);
		const ncclResult_t broken = comm->broken;
		pthread_mutex_unlock(&comm->lock);
		if (broken != ncclSuccess && broken != ncclRemoteError && first == ncclSuccess)
			first = broken;
	}
	for (int i = 0; i < count; i++)
		ndet_comm_wait_setup(comms[i]);
out:
	if (!here) {
		free(connected);
		free(members);
		free(members_of);
		free(claimed);
	}
	return first;
}
