/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The communicator calls of the fake's API: ncclCommInit*, ncclCommFinalize, Destroy,
 * Abort and Revoke, ncclCommSplit and Shrink, and the error and query calls
 * (ncclGetErrorString, ncclGetLastError, ncclCommGetAsyncError, ncclCommCount, ...).
 */
#include "config.h"

#include <stdlib.h>

#include "test/fake_nccl/fake_nccl_internal.h"

/* ------------------------------------------------------------------ API: init */

/* Everything ncclCommInitRank, ...Config and ...Scalable share. */
static ncclResult_t fake_init_rank(const char *function, ncclComm_t *out, int nranks,
				   const ncclUniqueId *id, int rank, const ncclConfig_t *config)
{
	ncclResult_t result = ncclSuccess;
	if (fake_should_fail(function, rank, &result))
		return result;
	if (out == NULL || id == NULL || nranks < 1 || rank < 0 || rank >= nranks) {
		fake_set_last_error("fake NCCL: %s: invalid arguments", function);
		return ncclInvalidArgument;
	}
	bool blocking;
	result = fake_config_blocking(config, fake_default_blocking(), &blocking);
	if (result != ncclSuccess)
		return result;
	struct ncclComm *comm;
	result = fake_comm_create(blocking, (int)fake_env_long("FAKE_NCCL_CUDA_DEVICE", 0), &comm);
	if (result != ncclSuccess)
		return result;
	pthread_mutex_lock(&fake_lock);
	result = fake_comm_place_locked(comm, rank, nranks);
	pthread_mutex_unlock(&fake_lock);
	*out = comm;
	if (result != ncclSuccess)
		return result;

	if (fake_group.depth > 0) {
		struct fake_post post = {.kind = FAKE_INIT, .comm = comm, .id = *id, .root = -1};
		return fake_group_defer(&post);
	}
	pthread_mutex_lock(&fake_lock);
	result = fake_join_locked(comm, id);
	if (result == ncclSuccess) {
		if (blocking) {
			result = fake_wait_init_locked(comm);
		} else {
			fake_note_nonblocking_locked(comm);
			result = ncclInProgress;
		}
	}
	pthread_mutex_unlock(&fake_lock);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t *comm, int nranks,
	      ncclUniqueId commId, int rank, ncclConfig_t *config);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
				    ncclConfig_t *config)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommInitRankConfig");
	ncclResult_t result =
		fake_init_rank("ncclCommInitRankConfig", comm, nranks, &commId, rank, config);
	fake_arg_comm_out(&line, "comm", comm, result == ncclSuccess || result == ncclInProgress);
	fake_arg(&line, "nranks=%d", nranks);
	fake_arg_id(&line, "commId=", &commId);
	fake_arg(&line, "rank=%d", rank);
	fake_arg_config(&line, config);
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t *comm, int nranks, ncclUniqueId commId,
	      int rank);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommInitRank");
	ncclResult_t result = fake_init_rank("ncclCommInitRank", comm, nranks, &commId, rank, NULL);
	fake_arg_comm_out(&line, "comm", comm, result == ncclSuccess || result == ncclInProgress);
	fake_arg(&line, "nranks=%d", nranks);
	fake_arg_id(&line, "commId=", &commId);
	fake_arg(&line, "rank=%d", rank);
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t *newcomm, int nranks, int myrank,
	      int nId, ncclUniqueId *commIds, ncclConfig_t *config);
ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
				      ncclUniqueId *commIds, ncclConfig_t *config)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommInitRankScalable");
	ncclResult_t result;
	if (nId < 1 || commIds == NULL) {
		fake_set_last_error("fake NCCL: ncclCommInitRankScalable needs at least one id");
		result = ncclInvalidArgument;
	} else {
		/* All ranks pass the same ids; the first names the clique. */
		result = fake_init_rank("ncclCommInitRankScalable", newcomm, nranks, &commIds[0],
					myrank, config);
	}
	fake_arg_comm_out(&line, "newcomm", newcomm,
			  result == ncclSuccess || result == ncclInProgress);
	fake_arg(&line, "nranks=%d", nranks);
	fake_arg(&line, "myrank=%d", myrank);
	fake_arg(&line, "nId=%d", nId);
	if (line.enabled && commIds != NULL && nId > 0) {
		fake_arg(&line, "commIds=[");
		for (int i = 0; i < nId; i++) {
			unsigned serial;
			if (fake_id_serial_of(&commIds[i], &serial))
				fake_line_add(&line, "%sid%u", i > 0 ? "," : "", serial);
			else
				fake_line_add(&line, "%sid?", i > 0 ? "," : "");
		}
		fake_line_add(&line, "]");
	} else {
		fake_arg_pointer(&line, "commIds", commIds);
	}
	fake_arg_config(&line, config);
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t *comm, int ndev, const int *devlist);
ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommInitAll");
	ncclResult_t result = ncclSuccess;
	int created = 0;
	bool blocking = fake_default_blocking();
	if (fake_should_fail("ncclCommInitAll", -1, &result)) {
		/* nothing created: result holds the requested code */
	} else if (comm == NULL || ndev < 1) {
		result = ncclInvalidArgument;
	} else {
		for (; created < ndev && result == ncclSuccess; created++) {
			int device = devlist != NULL ? devlist[created] : created;
			result = fake_comm_create(blocking, device, &comm[created]);
			if (result != ncclSuccess)
				break;
		}
		if (result == ncclSuccess) {
			pthread_mutex_lock(&fake_lock);
			struct fake_clique *clique = fake_clique_new_locked(ndev);
			if (clique == NULL)
				result = ncclSystemError;
			for (int i = 0; i < ndev && result == ncclSuccess; i++) {
				result = fake_comm_place_locked(comm[i], i, ndev);
				comm[i]->clique = clique;
				clique->refs++;
				if (!blocking)
					fake_note_nonblocking_locked(comm[i]);
			}
			if (clique != NULL)
				clique->complete = true;
			pthread_mutex_unlock(&fake_lock);
			if (result == ncclSuccess && !blocking)
				result = ncclInProgress;
		}
	}
	if (line.enabled && comm != NULL && created == ndev) {
		fake_arg(&line, "comm=>[");
		for (int i = 0; i < ndev; i++) {
			char name[32];
			fake_comm_name(comm[i], name, sizeof(name));
			fake_line_add(&line, "%s%s", i > 0 ? "," : "", name);
		}
		fake_line_add(&line, "]");
	} else {
		fake_arg(&line, "comm=>unset");
	}
	fake_arg(&line, "ndev=%d", ndev);
	if (line.enabled && devlist != NULL && ndev > 0) {
		fake_arg(&line, "devlist=[");
		for (int i = 0; i < ndev; i++)
			fake_line_add(&line, "%s%d", i > 0 ? "," : "", devlist[i]);
		fake_line_add(&line, "]");
	} else {
		fake_arg(&line, "devlist=NULL");
	}
	fake_line_finish(&line, result);
	return result;
}

/* ------------------------------------------------------------------ API: teardown */

static ncclResult_t fake_comm_teardown(ncclComm_t comm, bool abort)
{
	pthread_mutex_lock(&fake_lock);
	for (struct ncclComm **link = &fake_live_comms; *link != NULL; link = &(*link)->next_live) {
		if (*link == comm) {
			*link = comm->next_live;
			break;
		}
	}
	comm->dead = true;
	void *scratch = comm->scratch;
	comm->scratch = NULL;
	struct fake_clique *clique = comm->clique;
	comm->clique = NULL;
	if (clique != NULL) {
		/* A rank that leaves an unfinished init rendezvous strands the others. */
		if (abort || !clique->complete)
			fake_clique_fail_locked(clique, ncclRemoteError);
		fake_clique_unref_locked(clique);
	}
	pthread_mutex_unlock(&fake_lock);
	/* NCCL frees its buffers through the public name: interposers see this call. */
	return ncclMemFree(scratch);
}

FAKE_NCCL_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm);
ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommFinalize");
	fake_arg_comm(&line, "comm", comm);
	ncclResult_t result = ncclSuccess;
	if (!fake_should_fail("ncclCommFinalize", fake_comm_rank(comm), &result)) {
		result = fake_comm_acquire(comm);
		if (result == ncclSuccess) {
			pthread_mutex_lock(&fake_lock);
			if (!comm->blocking) {
				fake_note_nonblocking_locked(comm);
				result = ncclInProgress;
			}
			pthread_mutex_unlock(&fake_lock);
			fake_comm_release(comm);
		}
	}
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommDestroy");
	fake_arg_comm(&line, "comm", comm);
	ncclResult_t result = ncclSuccess;
	if (comm != NULL && !fake_should_fail("ncclCommDestroy", fake_comm_rank(comm), &result)) {
		result = fake_comm_acquire(comm);
		if (result == ncclSuccess) {
			result = fake_comm_teardown(comm, false);
			fake_comm_release(comm);
		}
	}
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommAbort");
	fake_arg_comm(&line, "comm", comm);
	ncclResult_t result = ncclSuccess;
	if (comm != NULL && !fake_should_fail("ncclCommAbort", fake_comm_rank(comm), &result)) {
		result = fake_comm_acquire(comm);
		if (result == ncclSuccess) {
			result = fake_comm_teardown(comm, true);
			fake_comm_release(comm);
		}
	}
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags);
ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommRevoke");
	fake_arg_comm(&line, "comm", comm);
	fake_arg(&line, "revokeFlags=%d", revokeFlags);
	ncclResult_t result = ncclSuccess;
	if (!fake_should_fail("ncclCommRevoke", fake_comm_rank(comm), &result)) {
		result = fake_comm_acquire(comm);
		if (result == ncclSuccess) {
			if (revokeFlags != NCCL_REVOKE_DEFAULT) {
				result = ncclInvalidArgument;
			} else {
				pthread_mutex_lock(&fake_lock);
				if (comm->clique != NULL) {
					comm->clique->revoked = true;
					fake_clique_fail_pending_locked(comm->clique,
									ncclRemoteError, true);
				}
				if (!comm->blocking) {
					fake_note_nonblocking_locked(comm);
					result = ncclInProgress;
				}
				pthread_mutex_unlock(&fake_lock);
			}
			fake_comm_release(comm);
		}
	}
	fake_line_finish(&line, result);
	return result;
}

/* ------------------------------------------------------------------ API: split, shrink */

FAKE_NCCL_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
	      ncclConfig_t *config);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
			   ncclConfig_t *config)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommSplit");
	fake_arg_comm(&line, "comm", comm);
	fake_arg(&line, "color=%d", color);
	fake_arg(&line, "key=%d", key);
	ncclResult_t result = ncclSuccess;
	bool written = false;
	if (!fake_should_fail("ncclCommSplit", fake_comm_rank(comm), &result)) {
		result = fake_comm_acquire(comm);
		if (result == ncclSuccess) {
			bool blocking = false;
			if (newcomm == NULL || (color < 0 && color != NCCL_SPLIT_NOCOLOR))
				result = ncclInvalidArgument;
			if (result == ncclSuccess)
				result = fake_comm_check_ready(comm);
			if (result == ncclSuccess)
				result = fake_config_blocking(config, comm->blocking, &blocking);
			struct ncclComm *child = NULL;
			if (result == ncclSuccess && color != NCCL_SPLIT_NOCOLOR)
				result = fake_comm_create(blocking, comm->device, &child);
			if (result == ncclSuccess) {
				*newcomm = child;
				written = true;
				struct fake_post post = {.kind = FAKE_SPLIT,
							 .comm = comm,
							 .color = color,
							 .key = key,
							 .child = child,
							 .root = -1};
				result = fake_submit(&post, !blocking);
			}
			fake_comm_release(comm);
		}
	}
	fake_arg_comm_out(&line, "newcomm", newcomm, written);
	fake_arg_config(&line, config);
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int *excludeRanksList,
	      int excludeRanksCount, ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags);
ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
			    ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommShrink");
	fake_arg_comm(&line, "comm", comm);
	if (line.enabled && excludeRanksList != NULL && excludeRanksCount > 0) {
		fake_arg(&line, "excludeRanksList=[");
		for (int i = 0; i < excludeRanksCount; i++)
			fake_line_add(&line, "%s%d", i > 0 ? "," : "", excludeRanksList[i]);
		fake_line_add(&line, "]");
	} else {
		fake_arg_pointer(&line, "excludeRanksList", excludeRanksList);
	}
	fake_arg(&line, "excludeRanksCount=%d", excludeRanksCount);
	ncclResult_t result = ncclSuccess;
	bool written = false;
	if (!fake_should_fail("ncclCommShrink", fake_comm_rank(comm), &result)) {
		result = fake_comm_acquire(comm);
		if (result == ncclSuccess) {
			bool blocking = false;
			if (newcomm == NULL || excludeRanksCount < 0 ||
			    (excludeRanksCount > 0 && excludeRanksList == NULL))
				result = ncclInvalidArgument;
			if (result == ncclSuccess) {
				pthread_mutex_lock(&fake_lock);
				/* Revoked parents may shrink: that is what revoke is for. */
				bool ready = comm->clique != NULL && comm->clique->complete &&
					     comm->polls_left == 0;
				int rank = comm->rank, nranks = comm->nranks;
				pthread_mutex_unlock(&fake_lock);
				if (!ready)
					result = ncclInvalidArgument;
				for (int i = 0; i < excludeRanksCount && result == ncclSuccess;
				     i++) {
					if (excludeRanksList[i] < 0 ||
					    excludeRanksList[i] >= nranks ||
					    excludeRanksList[i] == rank)
						result = ncclInvalidArgument;
				}
				if (result == ncclSuccess && excludeRanksCount >= nranks)
					result = ncclInvalidArgument;
			}
			if (result == ncclSuccess)
				result = fake_config_blocking(config, comm->blocking, &blocking);
			struct ncclComm *child = NULL;
			if (result == ncclSuccess)
				result = fake_comm_create(blocking, comm->device, &child);
			if (result == ncclSuccess) {
				*newcomm = child;
				written = true;
				struct fake_post post = {.kind = FAKE_SHRINK,
							 .comm = comm,
							 .child = child,
							 .exclude = excludeRanksList,
							 .exclude_count = excludeRanksCount,
							 .flags = shrinkFlags,
							 .root = -1};
				result = fake_submit(&post, !blocking);
			}
			fake_comm_release(comm);
		}
	}
	fake_arg_comm_out(&line, "newcomm", newcomm, written);
	fake_arg_config(&line, config);
	fake_arg(&line, "shrinkFlags=%d", shrinkFlags);
	fake_line_finish(&line, result);
	return result;
}

/* ------------------------------------------------------------------ API: errors, queries */

FAKE_NCCL_API(const char *, ncclGetErrorString, ncclResult_t result);
const char *ncclGetErrorString(ncclResult_t result)
{
	const char *text;
	switch (result) {
	case ncclSuccess:
		text = "no error";
		break;
	case ncclUnhandledCudaError:
		text = "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
		break;
	case ncclSystemError:
		text = "unhandled system error (run with NCCL_DEBUG=INFO for details)";
		break;
	case ncclInternalError:
		text = "internal error - please report this issue to the NCCL developers";
		break;
	case ncclInvalidArgument:
		text = "invalid argument (run with NCCL_DEBUG=WARN for details)";
		break;
	case ncclInvalidUsage:
		text = "invalid usage (run with NCCL_DEBUG=WARN for details)";
		break;
	case ncclRemoteError:
		text = "remote process exited or there was a network error";
		break;
	case ncclInProgress:
		text = "NCCL operation in progress";
		break;
	default:
		text = "unknown result code";
		break;
	}
	struct fake_line line;
	fake_line_begin(&line, "ncclGetErrorString");
	fake_arg(&line, "result=%s", fake_result_name(result));
	fake_line_add(&line, ") = \"%s\"", text);
	fake_line_write(&line);
	return text;
}

FAKE_NCCL_API(const char *, ncclGetLastError, ncclComm_t comm);
const char *ncclGetLastError(ncclComm_t comm)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclGetLastError");
	fake_arg_comm(&line, "comm", comm);
	fake_line_add(&line, ") = \"%s\"", fake_last_error);
	fake_line_write(&line);
	return fake_last_error;
}

FAKE_NCCL_API(void, ncclResetDebugInit, void);
void ncclResetDebugInit(void)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclResetDebugInit");
	fake_line_add(&line, ")");
	fake_line_write(&line);
}

FAKE_NCCL_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t *asyncError);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommGetAsyncError");
	fake_arg_comm(&line, "comm", comm);
	ncclResult_t result = ncclSuccess;
	if (!fake_should_fail("ncclCommGetAsyncError", fake_comm_rank(comm), &result)) {
		result = fake_comm_acquire(comm);
		if (result == ncclSuccess) {
			if (asyncError == NULL) {
				result = ncclInvalidArgument;
			} else {
				ncclResult_t state;
				pthread_mutex_lock(&fake_lock);
				struct fake_clique *clique = comm->clique;
				if (comm->async_error != ncclSuccess)
					state = comm->async_error;
				else if (clique != NULL && clique->failed)
					state = ncclRemoteError;
				else if (clique == NULL || !clique->complete)
					state = ncclInProgress;
				else if (comm->polls_left > 0) {
					comm->polls_left--;
					state = ncclInProgress;
				} else
					state = (ncclResult_t)fake_env_long("FAKE_NCCL_ASYNC_ERROR",
									    ncclSuccess);
				pthread_mutex_unlock(&fake_lock);
				*asyncError = state;
			}
			fake_comm_release(comm);
		}
	}
	if (result == ncclSuccess)
		fake_arg(&line, "asyncError=>%s", fake_result_name(*asyncError));
	else
		fake_arg(&line, "asyncError=>unset");
	fake_line_finish(&line, result);
	return result;
}

/* ncclCommCount, ncclCommCuDevice, ncclCommUserRank. */
static ncclResult_t fake_comm_query(const char *function, ncclComm_t comm, int *out, int which)
{
	ncclResult_t result = ncclSuccess;
	if (fake_should_fail(function, fake_comm_rank(comm), &result))
		return result;
	if (out == NULL)
		return ncclInvalidArgument;
	result = fake_comm_acquire(comm);
	if (result != ncclSuccess)
		return result;
	pthread_mutex_lock(&fake_lock);
	int value = which == 0 ? comm->nranks : which == 1 ? comm->device : comm->rank;
	bool known = comm->rank >= 0;
	pthread_mutex_unlock(&fake_lock);
	fake_comm_release(comm);
	if (!known)
		return ncclInvalidArgument;
	*out = value;
	return ncclSuccess;
}

FAKE_NCCL_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int *count);
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommCount");
	fake_arg_comm(&line, "comm", comm);
	ncclResult_t result = fake_comm_query("ncclCommCount", comm, count, 0);
	if (result == ncclSuccess)
		fake_arg(&line, "count=>%d", *count);
	else
		fake_arg(&line, "count=>unset");
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int *device);
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommCuDevice");
	fake_arg_comm(&line, "comm", comm);
	ncclResult_t result = fake_comm_query("ncclCommCuDevice", comm, device, 1);
	if (result == ncclSuccess)
		fake_arg(&line, "device=>%d", *device);
	else
		fake_arg(&line, "device=>unset");
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int *rank);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommUserRank");
	fake_arg_comm(&line, "comm", comm);
	ncclResult_t result = fake_comm_query("ncclCommUserRank", comm, rank, 2);
	if (result == ncclSuccess)
		fake_arg(&line, "rank=>%d", *rank);
	else
		fake_arg(&line, "rank=>unset");
	fake_line_finish(&line, result);
	return result;
}
