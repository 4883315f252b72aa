/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * What a communicator tells about itself (see ndet_comm.h): ncclDetCommQuery's
 * answer, its counters, and its engine for the tests.
 */
#include "config.h"

#include "divert/ndet_comm.h"
#include "divert/ndet_comm_internal.h"

#include <pthread.h>

#include "protocol/ndet_setup.h"

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
			why = comm->broken == ncclInvalidUsage
				      ? "broken: a rank did not take part in nccl-det's setup "
					"(NCCL_DET_ENABLE differs between ranks)"
			      : comm->broken == ncclRemoteError
				      ? "broken: this rank left nccl-det's setup with another rank "
					"of its communicator that this thread drives"
			      : comm->broken != ncclSuccess
				      ? "broken: this rank could not take its part in nccl-det's "
					"setup (out of memory)"
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
