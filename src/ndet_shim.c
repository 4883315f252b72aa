/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The interposed NCCL entry points of libnccl-det.so (LD_PRELOAD build).
 *
 * Each one forwards to the real NCCL (ndet_resolve.h) with identical arguments and
 * returns its code unchanged.  Around the call sits one static hook per entry point,
 * where diversion and per-communicator setup will go; they do nothing yet.  With
 * NCCL_DET_ENABLE=0 no hook runs: the library is a pure pass-through.
 *
 * Only these names are exported (libnccl-det.map); never pnccl*, which must keep
 * reaching the real NCCL.  There is no constructor: the library is preloaded into
 * every process of a job (shells, launchers), so it does nothing until NCCL is called.
 * The real NCCL calls some of its own public names (ncclMemFree, ncclBroadcast, ...);
 * those we do not interpose reach it directly, the others are forwarded like any call.
 */
#include "config.h"

#include <stdbool.h>
#include <stdlib.h>

#include <nccl.h>

#include "ndet_env.h"
#include "ndet_resolve.h"
#include "ndet_status.h"

#define NDET_EXPORT __attribute__((visibility("default")))

/*
 * `real` becomes the real NCCL's `name`.  When the real NCCL (or that symbol) is
 * missing, the entry point returns the error ndet_resolve_missing() chose and
 * explained (one WARN).
 */
#define NDET_SHIM_REAL(name, real)                                                                 \
	__typeof__(((struct ndet_nccl *)0)->name) real = ndet_resolve_nccl()->name;                \
	if (real == NULL) {                                                                        \
		return ndet_status_to_nccl(ndet_resolve_missing(NDET_NCCL_FN_##name));             \
	}

/* -1 until read, then 0 or 1. */
static int ndet_shim_enabled_cached = -1;

/*
 * TODO(settings): replace with ndet_settings_get()->enable once src/ndet_settings.c
 * lands; until then read the raw variable (environment, then NCCL's conf files).
 */
static bool ndet_shim_enabled(void)
{
	int enabled = __atomic_load_n(&ndet_shim_enabled_cached, __ATOMIC_RELAXED);
	if (enabled < 0) {
		const char *value = ndet_env_get("NCCL_DET_ENABLE", NULL);
		enabled = value == NULL || value[0] == '\0' || strtol(value, NULL, 10) != 0;
		__atomic_store_n(&ndet_shim_enabled_cached, enabled, __ATOMIC_RELAXED);
	}
	return enabled != 0;
}

/* ------------------------------------------------------------------ hooks
 *
 * "after" hooks get the real call's result and return the result to give the
 * caller; "before" hooks run first.  Empty until diversion lands.
 */

/* Divert this all-reduce?  true: it was handled and *result is the answer. */
static bool ndet_shim_divert_allreduce(const void *sendbuff, void *recvbuff, size_t count,
				       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
				       cudaStream_t stream, ncclResult_t *result)
{
	return false;
}

static ncclResult_t ndet_shim_after_comm_init_rank(ncclComm_t *comm, int nranks, int rank,
						   ncclResult_t result)
{
	return result;
}

static ncclResult_t ndet_shim_after_comm_init_rank_config(ncclComm_t *comm, int nranks, int rank,
							  ncclConfig_t *config, ncclResult_t result)
{
	return result;
}

static ncclResult_t ndet_shim_after_comm_init_rank_scalable(ncclComm_t *newcomm, int nranks,
							    int myrank, ncclConfig_t *config,
							    ncclResult_t result)
{
	return result;
}

static ncclResult_t ndet_shim_after_comm_init_all(ncclComm_t *comms, int ndev, ncclResult_t result)
{
	return result;
}

static ncclResult_t ndet_shim_after_comm_split(ncclComm_t parent, ncclComm_t *newcomm,
					       ncclConfig_t *config, ncclResult_t result)
{
	return result;
}

/* NCCL_SHRINK_ABORT must stop our kernels on the parent before NCCL shrinks it. */
static void ndet_shim_before_comm_shrink(ncclComm_t parent, int shrinkFlags)
{
}

static ncclResult_t ndet_shim_after_comm_shrink(ncclComm_t parent, ncclComm_t *newcomm,
						ncclConfig_t *config, int shrinkFlags,
						ncclResult_t result)
{
	return result;
}

static void ndet_shim_before_comm_destroy(ncclComm_t comm)
{
}

static void ndet_shim_before_comm_finalize(ncclComm_t comm)
{
}

static void ndet_shim_before_comm_abort(ncclComm_t comm)
{
}

static void ndet_shim_before_comm_revoke(ncclComm_t comm, int revokeFlags)
{
}

static ncclResult_t ndet_shim_after_group_start(ncclResult_t result)
{
	return result;
}

static ncclResult_t ndet_shim_after_group_end(ncclResult_t result)
{
	return result;
}

static ncclResult_t ndet_shim_after_group_simulate_end(ncclSimInfo_t *simInfo, ncclResult_t result)
{
	return result;
}

/* May report our own failure (a timed-out kernel) as the communicator's async error. */
static ncclResult_t ndet_shim_after_comm_get_async_error(ncclComm_t comm, ncclResult_t *asyncError,
							 ncclResult_t result)
{
	return result;
}

static ncclResult_t ndet_shim_after_red_op_create_pre_mul_sum(ncclRedOp_t *op,
							      ncclDataType_t datatype,
							      ncclComm_t comm, ncclResult_t result)
{
	return result;
}

static void ndet_shim_before_red_op_destroy(ncclRedOp_t op, ncclComm_t comm)
{
}

/* ------------------------------------------------------------------ entry points */

/* nccl.h declares these two with `()`, which is no prototype in C. */
NDET_EXPORT ncclResult_t ncclGroupStart(void);
NDET_EXPORT ncclResult_t ncclGroupEnd(void);

NDET_EXPORT ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
				       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
				       cudaStream_t stream)
{
	NDET_SHIM_REAL(ncclAllReduce, real);
	if (ndet_shim_enabled()) {
		ncclResult_t result;
		if (ndet_shim_divert_allreduce(sendbuff, recvbuff, count, datatype, op, comm,
					       stream, &result))
			return result;
	}
	return real(sendbuff, recvbuff, count, datatype, op, comm, stream);
}

NDET_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId,
					  int rank)
{
	NDET_SHIM_REAL(ncclCommInitRank, real);
	ncclResult_t result = real(comm, nranks, commId, rank);
	if (ndet_shim_enabled())
		result = ndet_shim_after_comm_init_rank(comm, nranks, rank, result);
	return result;
}

NDET_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId,
						int rank, ncclConfig_t *config)
{
	NDET_SHIM_REAL(ncclCommInitRankConfig, real);
	ncclResult_t result = real(comm, nranks, commId, rank, config);
	if (ndet_shim_enabled())
		result = ndet_shim_after_comm_init_rank_config(comm, nranks, rank, config, result);
	return result;
}

NDET_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank,
						  int nId, ncclUniqueId *commIds,
						  ncclConfig_t *config)
{
	NDET_SHIM_REAL(ncclCommInitRankScalable, real);
	ncclResult_t result = real(newcomm, nranks, myrank, nId, commIds, config);
	if (ndet_shim_enabled())
		result = ndet_shim_after_comm_init_rank_scalable(newcomm, nranks, myrank, config,
								 result);
	return result;
}

NDET_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist)
{
	NDET_SHIM_REAL(ncclCommInitAll, real);
	ncclResult_t result = real(comm, ndev, devlist);
	if (ndet_shim_enabled())
		result = ndet_shim_after_comm_init_all(comm, ndev, result);
	return result;
}

NDET_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
				       ncclConfig_t *config)
{
	NDET_SHIM_REAL(ncclCommSplit, real);
	ncclResult_t result = real(comm, color, key, newcomm, config);
	if (ndet_shim_enabled())
		result = ndet_shim_after_comm_split(comm, newcomm, config, result);
	return result;
}

NDET_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList,
					int excludeRanksCount, ncclComm_t *newcomm,
					ncclConfig_t *config, int shrinkFlags)
{
	NDET_SHIM_REAL(ncclCommShrink, real);
	bool enabled = ndet_shim_enabled();
	if (enabled)
		ndet_shim_before_comm_shrink(comm, shrinkFlags);
	ncclResult_t result =
	    real(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags);
	if (enabled)
		result = ndet_shim_after_comm_shrink(comm, newcomm, config, shrinkFlags, result);
	return result;
}

NDET_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
	NDET_SHIM_REAL(ncclCommDestroy, real);
	if (ndet_shim_enabled())
		ndet_shim_before_comm_destroy(comm);
	return real(comm);
}

NDET_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
	NDET_SHIM_REAL(ncclCommFinalize, real);
	if (ndet_shim_enabled())
		ndet_shim_before_comm_finalize(comm);
	return real(comm);
}

NDET_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm)
{
	NDET_SHIM_REAL(ncclCommAbort, real);
	if (ndet_shim_enabled())
		ndet_shim_before_comm_abort(comm);
	return real(comm);
}

NDET_EXPORT ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags)
{
	NDET_SHIM_REAL(ncclCommRevoke, real);
	if (ndet_shim_enabled())
		ndet_shim_before_comm_revoke(comm, revokeFlags);
	return real(comm, revokeFlags);
}

NDET_EXPORT ncclResult_t ncclGroupStart(void)
{
	NDET_SHIM_REAL(ncclGroupStart, real);
	ncclResult_t result = real();
	if (ndet_shim_enabled())
		result = ndet_shim_after_group_start(result);
	return result;
}

NDET_EXPORT ncclResult_t ncclGroupEnd(void)
{
	NDET_SHIM_REAL(ncclGroupEnd, real);
	ncclResult_t result = real();
	if (ndet_shim_enabled())
		result = ndet_shim_after_group_end(result);
	return result;
}

NDET_EXPORT ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo)
{
	NDET_SHIM_REAL(ncclGroupSimulateEnd, real);
	ncclResult_t result = real(simInfo);
	if (ndet_shim_enabled())
		result = ndet_shim_after_group_simulate_end(simInfo, result);
	return result;
}

NDET_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
	NDET_SHIM_REAL(ncclCommGetAsyncError, real);
	ncclResult_t result = real(comm, asyncError);
	if (ndet_shim_enabled())
		result = ndet_shim_after_comm_get_async_error(comm, asyncError, result);
	return result;
}

NDET_EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar,
						  ncclDataType_t datatype,
						  ncclScalarResidence_t residence, ncclComm_t comm)
{
	NDET_SHIM_REAL(ncclRedOpCreatePreMulSum, real);
	ncclResult_t result = real(op, scalar, datatype, residence, comm);
	if (ndet_shim_enabled())
		result = ndet_shim_after_red_op_create_pre_mul_sum(op, datatype, comm, result);
	return result;
}

NDET_EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm)
{
	NDET_SHIM_REAL(ncclRedOpDestroy, real);
	if (ndet_shim_enabled())
		ndet_shim_before_red_op_destroy(op, comm);
	return real(op, comm);
}
