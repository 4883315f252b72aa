/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Errors and teardown (see ndet_engine.h): what the kernels published, the abort
 * flag, and the teardown of ndet_teardown.h: waiting (bounded) for our kernels,
 * the barrier that tells whether peers still read our pool, the release, and
 * what is still held at exit.
 */
#include "config.h"

#include "engine/ndet_engine.h"
#include "engine/ndet_engine_internal.h"

#include <stdio.h>
#include <stdlib.h>

#include "engine/ndet_cuda.h"
#include "kernels/ndet_kernels.h"
#include "common/ndet_log.h"
#include "protocol/ndet_pool_layout.h"
#include "protocol/ndet_setup.h"
#include "protocol/ndet_teardown.h"

/* ---------------------------------------------------------------- errors, teardown */

/*
 * Has NCCL's stage between hosts stalled?  A plain load of the progress word and the
 * clock; one thread at a time observes (the others go on with the last verdict).
 */
static bool ndet_engine_stalled(struct ndet_engine *engine)
{
	if (!ndet_engine_spans_hosts(engine))
		return false;
	if (__atomic_load_n(&engine->stall.stalled, __ATOMIC_ACQUIRE))
		return true;
	if (__atomic_test_and_set(&engine->stall_busy, __ATOMIC_ACQUIRE))
		return false;
	const uint64_t word = __atomic_load_n(&engine->host_status->progress, __ATOMIC_ACQUIRE);
	struct ndet_hosts_stall seen = engine->stall;
	const bool stalled = ndet_hosts_stall_observe(&seen, word, ndet_teardown_now_ms(),
						      engine->config.timeout_ms);
	engine->stall.seen = seen.seen;
	engine->stall.since_ms = seen.since_ms;
	__atomic_store_n(&engine->stall.stalled, stalled, __ATOMIC_RELEASE);
	const bool warn = stalled && !engine->stall_warned;
	engine->stall_warned = engine->stall_warned || stalled;
	__atomic_clear(&engine->stall_busy, __ATOMIC_RELEASE);
	if (warn) {
		/* The last stage kernel of ours to start: NCCL's sends after it are stuck. */
		char where[96];
		ndet_hosts_where_text(
			__atomic_load_n(&engine->host_status->where, __ATOMIC_ACQUIRE), where,
			sizeof(where));
		NDET_WARN("rank %d: a send or receive of NCCL between hosts in nccl-det's call "
			  "has made no progress for NCCL_DET_TIMEOUT (%llu s), after our %s: a "
			  "rank on another host may have died or stopped.  The communicator "
			  "reports ncclRemoteError; abort it (ncclCommAbort)",
			  engine->config.rank,
			  (unsigned long long)(engine->config.timeout_ms / 1000u), where);
	}
	return stalled;
}

ndet_status_t ndet_engine_error(struct ndet_engine *engine, uint32_t *kernel_error)
{
	uint32_t error = __atomic_load_n(&engine->host_status->error, __ATOMIC_ACQUIRE);
	if (error == NDET_KERNEL_OK && __atomic_load_n(&engine->poisoned, __ATOMIC_ACQUIRE) != 0)
		error = NDET_KERNEL_ERR_LAUNCH;
	if (error == NDET_KERNEL_OK && ndet_engine_stalled(engine))
		error = NDET_KERNEL_ERR_STALLED;
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

static const char *ndet_engine_error_name(uint32_t error)
{
	switch (error) {
	case NDET_KERNEL_ERR_TIMEOUT:
		return "timed out (NCCL_DET_TIMEOUT)";
	case NDET_KERNEL_ERR_ABORTED:
		return "aborted (ncclCommAbort or ncclCommRevoke)";
	case NDET_KERNEL_ERR_SIGNATURE:
		return "met a peer in another call (count, type, op or plan differ)";
	case NDET_KERNEL_ERR_PEER:
		return "failed because a peer failed";
	case NDET_KERNEL_ERR_STALLED:
		return "stalled in NCCL between hosts";
	case NDET_KERNEL_ERR_LAUNCH:
		return "lost a launch of this rank's (its peers were told)";
	default:
		return "failed";
	}
}

/* The flag a wait of `phase` (struct ndet_host_status) waited for. */
static const char *ndet_engine_wait_name(uint32_t phase)
{
	return phase == 1 ? "released/done" : phase == 2 ? "ready" : "reduced";
}

/* The details of a published kernel error, in words (ndet_engine_error_describe). */
static int ndet_engine_describe_details(const struct ndet_engine *engine, uint32_t error,
					char *text, size_t size)
{
	uint32_t block = 0, peer = 0, phase = 0;
	uint64_t step = 0, observed = 0;
	const char *name = ndet_engine_error_name(error);
	if (!ndet_engine_error_details(engine, &block, &peer, &step, &observed, &phase))
		return snprintf(text, size, "kernel error %u, %s", error, name);
	if (error == NDET_KERNEL_ERR_ABORTED)
		return snprintf(text, size, "kernel error %u, %s: block %u, step %llu", error, name,
				block, (unsigned long long)step);
	if (phase == 4) /* a stage across hosts: `peer` is the host whose word said so */
		return snprintf(text, size,
				"kernel error %u, %s: block %u, host %u reported a failure (its "
				"status word %#llx)",
				error, name, block, peer, (unsigned long long)observed);
	/* The kernels name peers by local index (so do abort words): the log, ranks. */
	if (peer < (uint32_t)engine->local.count)
		peer = (uint32_t)engine->local.ranks[peer];
	if (phase == 0 || phase > 4)
		return snprintf(text, size,
				"kernel error %u, %s: block %u, step %llu: rank %u had failed "
				"before this kernel started",
				error, name, block, (unsigned long long)step, peer);
	if (error == NDET_KERNEL_ERR_PEER)
		return snprintf(text, size,
				"kernel error %u, %s: block %u: a peer failed and told this rank "
				"while it waited for rank %u's %s flag of step %llu",
				error, name, block, peer, ndet_engine_wait_name(phase),
				(unsigned long long)step);
	return snprintf(text, size,
			"kernel error %u, %s: block %u, waiting for rank %u's %s flag of step "
			"%llu, last seen step %llu signature %06x",
			error, name, block, peer, ndet_engine_wait_name(phase),
			(unsigned long long)step,
			(unsigned long long)(observed >> NDET_FLAG_SIGNATURE_BITS),
			(unsigned)(observed & NDET_FLAG_SIGNATURE_MASK));
}

size_t ndet_engine_error_describe(const struct ndet_engine *engine, char *text, size_t size)
{
	if (size == 0)
		return 0;
	text[0] = '\0';
	/* What ndet_engine_error reports, in its order. */
	const uint32_t error = __atomic_load_n(&engine->host_status->error, __ATOMIC_ACQUIRE);
	int n = 0;
	if (error != NDET_KERNEL_OK) {
		n = ndet_engine_describe_details(engine, error, text, size);
	} else if (__atomic_load_n(&engine->poisoned, __ATOMIC_ACQUIRE) != 0) {
		n = snprintf(text, size, "kernel error %u, %s", NDET_KERNEL_ERR_LAUNCH,
			     ndet_engine_error_name(NDET_KERNEL_ERR_LAUNCH));
	} else if (__atomic_load_n(&engine->stall.stalled, __ATOMIC_ACQUIRE)) {
		char where[96];
		ndet_hosts_where_text(
			__atomic_load_n(&engine->host_status->where, __ATOMIC_ACQUIRE), where,
			sizeof(where));
		n = snprintf(text, size, "kernel error %u, %s, after our %s",
			     NDET_KERNEL_ERR_STALLED,
			     ndet_engine_error_name(NDET_KERNEL_ERR_STALLED), where);
	}
	if (n < 0) {
		text[0] = '\0';
		return 0;
	}
	return (size_t)n < size ? (size_t)n : size - 1;
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
	struct ndet_engine *engine = member;
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
	/* Without a peer on this host, nobody else reads the pool. */
	engine->peers_done = engine->local.count == 1;
}

/*
 * The destroy barrier is an exchange over the whole communicator (every rank calls
 * it: it is NCCL's all-gather there), but what it decides is a matter of pools and
 * mappings, which only the ranks of one host share: each engine judges the words of
 * its host's ranks alone (ndet_setup_agree_among), so a rank on another host whose
 * kernel did not finish keeps no pool here.
 */
ndet_status_t ndet_engine_quiesce_group(struct ndet_engine *const engines[], int count,
					bool barrier)
{
	ndet_status_t status = NDET_OK;
	const size_t slots = (size_t)(count > 0 ? count : 1);
	/* Up to NDET_SETUP_STACK engines allocate nothing: none misses the barrier. */
	void *meeting_here[NDET_SETUP_STACK], *gathered_here[NDET_SETUP_STACK];
	int nranks_here[NDET_SETUP_STACK], among_count_here[NDET_SETUP_STACK];
	int32_t words_here[NDET_SETUP_STACK];
	const int *among_here[NDET_SETUP_STACK];
	bool clean_here[NDET_SETUP_STACK];
	const bool here = count <= NDET_SETUP_STACK;
	void **meeting = here ? meeting_here : calloc(slots, sizeof(*meeting));
	void **gathered = here ? gathered_here : calloc(slots, sizeof(*gathered));
	int *nranks = here ? nranks_here : calloc(slots, sizeof(*nranks));
	int32_t *words = here ? words_here : calloc(slots, sizeof(*words));
	const int **among = here ? among_here : calloc(slots, sizeof(*among));
	int *among_count = here ? among_count_here : calloc(slots, sizeof(*among_count));
	bool *clean = here ? clean_here : calloc(slots, sizeof(*clean));
	int meetings = 0;
	struct ndet_engine_caller caller;

	ndet_engine_caller_save(&caller);
	for (int i = 0; i < count; i++)
		ndet_engine_quiesce(engines[i]);
	if (meeting == NULL || gathered == NULL || nranks == NULL || words == NULL ||
	    among == NULL || among_count == NULL || clean == NULL) {
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
		among[meetings] = engine->local.ranks;
		among_count[meetings] = engine->local.count;
		gathered[meetings] = engine->barrier_words;
		meeting[meetings++] = engine;
	}
	if (meetings > 0)
		status =
			ndet_setup_agree_among(meetings, meeting, nranks, words, among, among_count,
					       clean, gathered, ndet_engine_setup_allgather, NULL);
	/*
	 * Per communicator: where some exchange failed, the clean ones still count, and
	 * the rest keep what the quiesce set.
	 */
	for (int k = 0; k < meetings; k++)
		if (status == NDET_OK || clean[k])
			((struct ndet_engine *)meeting[k])->peers_done = clean[k];
	ndet_engine_caller_restore(&caller);
	if (!here) {
		free(clean);
		free(among_count);
		free(among);
		free(words);
		free(nranks);
		free(gathered);
		free(meeting);
	}
	return status;
}

void ndet_engine_release(struct ndet_engine *engine)
{
	struct ndet_engine_caller caller;
	if (engine == NULL)
		return;
	ndet_engine_caller_save(&caller);
	ndet_teardown_release(engine->share, engine, &ndet_engine_teardown_ops, engine->config.rank,
			      engine->idle, engine->peers_done, NDET_TEARDOWN_ALL_READERS);
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
	const int l = ndet_engine_local_index(engine, writer);
	if (engine->pool == NULL || l < 0)
		return false;
	*slot = (uint64_t *)(engine->pool + NDET_POOL_DETACH_OFFSET) + l;
	*epoch = engine->epoch;
	return true;
}

struct ndet_host_status *ndet_engine_host_status_for_testing(struct ndet_engine *engine)
{
	return engine->host_status;
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
