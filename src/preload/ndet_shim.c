/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The interposed NCCL entry points of libnccl-det.so (LD_PRELOAD build).
 *
 * Each one forwards to the real NCCL (ndet_resolve.h) with identical arguments and
 * returns its code, except where nccl-det takes a call over: an eligible
 * ncclAllReduce, ncclReduceScatter or ncclReduce (ndet_group.h, PreMulSum ops
 * included: their scalars are kept per communicator when NCCL makes them), the
 * async error of a communicator whose engine
 * failed, an ncclCommFinalize held in a group.  Around the calls sit the hooks that
 * keep nccl-det's state per communicator (ndet_comm.h) and per thread
 * (ndet_group.h).  With NCCL_DET_ENABLE=0 no hook runs: the library is a pure
 * pass-through; so it is after fork() in the child and once the process exits.
 *
 * The LD_PRELOAD build exports only these names (libnccl-det.map); never pnccl*,
 * which must keep reaching the real NCCL.  The drop-in build (NDET_BUILD_DROPIN,
 * src/dropin/) is libnccl.so.2 itself: it also exports pnccl* for each of these as
 * an alias of the same entry point (a caller of pncclAllReduce is diverted like a
 * caller of ncclAllReduce), and generated trampolines for every other name of the
 * real NCCL (ndet_dropin.h).  There is no constructor: the library is preloaded into
 * every process of a job (shells, launchers), so it does nothing until NCCL is called.
 * The real NCCL calls some of its own public names (ncclMemFree, ncclBroadcast, ...):
 * behind the preload, those we do not interpose reach it directly and the others are
 * forwarded like any call; behind the drop-in they stay inside the real NCCL
 * (RTLD_DEEPBIND, ndet_resolve.h).
 *
 * A copy of nccl-det whose "real NCCL" turned out to be another copy (libnccl-det.so
 * preloaded in front of a preloaded drop-in) only forwards: the copy behind it
 * diverts, so every call is diverted at most once.
 */
#include "config.h"

#include <stdbool.h>
#include <stdlib.h>

#include <nccl.h>

#include "nccl_det.h"
#include "divert/ndet_comm.h"
#include "divert/ndet_group.h"
#include "resolve/ndet_resolve.h"
#include "common/ndet_log.h"
#include "common/ndet_settings.h"
#include "common/ndet_status.h"
#include "protocol/ndet_teardown.h"

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

static bool ndet_shim_enabled(void)
{
	return ndet_settings_get()->enable && ndet_comm_hooks_allowed() &&
	       ndet_resolve_divert_allowed();
}

/* ------------------------------------------------------------------ hooks */

static ncclResult_t ndet_shim_after_comm_init(ncclComm_t *comm, const ncclConfig_t *config,
					      uint64_t identity, ncclResult_t result)
{
	return ndet_group_comms_created(comm, comm != NULL ? 1 : 0,
					ndet_comm_config_blocking(config, -1), NULL, false,
					identity, result);
}

/* A child of `parent` (split, shrink): a NULL config inherits the parent's mode. */
static ncclResult_t ndet_shim_after_child(ncclComm_t parent, ncclComm_t *newcomm,
					  const ncclConfig_t *config, bool shrink,
					  uint64_t identity, ncclResult_t result)
{
	int inherited = -1;
	struct ndet_comm *known = ndet_comm_lookup(parent);
	if (known != NULL) {
		inherited = ndet_comm_is_blocking(known) ? 1 : 0;
		ndet_comm_unref(known);
	}
	return ndet_group_comms_created(newcomm, newcomm != NULL ? 1 : 0,
					ndet_comm_config_blocking(config, inherited), parent,
					ndet_comm_config_shares(config, shrink), identity, result);
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
	ncclResult_t result;
	if (ndet_shim_enabled() &&
	    ndet_group_allreduce(sendbuff, recvbuff, count, datatype, op, comm, stream, &result))
		return result;
	return real(sendbuff, recvbuff, count, datatype, op, comm, stream);
}

NDET_EXPORT ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
					   ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
					   cudaStream_t stream)
{
	NDET_SHIM_REAL(ncclReduceScatter, real);
	ncclResult_t result;
	if (ndet_shim_enabled() &&
	    ndet_group_reduction(NDET_COLL_REDUCE_SCATTER, sendbuff, recvbuff, recvcount, datatype,
				 op, -1, false, comm, stream, &result))
		return result;
	return real(sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
}

NDET_EXPORT ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
				    ncclDataType_t datatype, ncclRedOp_t op, int root,
				    ncclComm_t comm, cudaStream_t stream)
{
	NDET_SHIM_REAL(ncclReduce, real);
	ncclResult_t result;
	if (ndet_shim_enabled() &&
	    ndet_group_reduction(NDET_COLL_REDUCE, sendbuff, recvbuff, count, datatype, op, root,
				 false, comm, stream, &result))
		return result;
	return real(sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}

NDET_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId,
					  int rank)
{
	NDET_SHIM_REAL(ncclCommInitRank, real);
	ncclResult_t result = real(comm, nranks, commId, rank);
	if (ndet_shim_enabled())
		result = ndet_shim_after_comm_init(
			comm, NULL,
			ndet_comm_identity_of_ids(&commId, sizeof(commId), nranks, rank), result);
	return result;
}

NDET_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId,
						int rank, ncclConfig_t *config)
{
	NDET_SHIM_REAL(ncclCommInitRankConfig, real);
	ncclResult_t result = real(comm, nranks, commId, rank, config);
	if (ndet_shim_enabled())
		result = ndet_shim_after_comm_init(
			comm, config,
			ndet_comm_identity_of_ids(&commId, sizeof(commId), nranks, rank), result);
	return result;
}

NDET_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank,
						  int nId, ncclUniqueId *commIds,
						  ncclConfig_t *config)
{
	NDET_SHIM_REAL(ncclCommInitRankScalable, real);
	ncclResult_t result = real(newcomm, nranks, myrank, nId, commIds, config);
	if (ndet_shim_enabled())
		result = ndet_shim_after_comm_init(
			newcomm, config,
			ndet_comm_identity_of_ids(commIds,
						  nId > 0 ? (size_t)nId * sizeof(*commIds) : 0,
						  nranks, myrank),
			result);
	return result;
}

NDET_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist)
{
	NDET_SHIM_REAL(ncclCommInitAll, real);
	ncclResult_t result = real(comm, ndev, devlist);
	/* One thread holds every rank: the setup runs all of them in lockstep. */
	if (ndet_shim_enabled())
		result = ndet_group_comms_created(comm, ndev, ndet_comm_config_blocking(NULL, -1),
						  NULL, false, ndet_comm_identity_fresh(), result);
	return result;
}

NDET_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
				       ncclConfig_t *config)
{
	NDET_SHIM_REAL(ncclCommSplit, real);
	ncclResult_t result = real(comm, color, key, newcomm, config);
	if (ndet_shim_enabled())
		result = ndet_shim_after_child(comm, newcomm, config, false,
					       ndet_comm_identity_of_split(comm, color), result);
	return result;
}

NDET_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList,
					int excludeRanksCount, ncclComm_t *newcomm,
					ncclConfig_t *config, int shrinkFlags)
{
	NDET_SHIM_REAL(ncclCommShrink, real);
	bool enabled = ndet_shim_enabled();
	/* NCCL_SHRINK_ABORT: our kernels on the parent must leave before NCCL shrinks it. */
	if (enabled && (shrinkFlags & NCCL_SHRINK_ABORT) != 0)
		ndet_comm_revoke(comm);
	ncclResult_t result =
		real(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags);
	if (enabled && (shrinkFlags & NCCL_SHRINK_ABORT) != 0)
		ndet_comm_revoke_refused(comm, "ncclCommShrink(NCCL_SHRINK_ABORT)", result);
	if (enabled)
		result = ndet_shim_after_child(
			comm, newcomm, config, true,
			ndet_comm_identity_of_shrink(comm, excludeRanksList, excludeRanksCount),
			result);
	return result;
}

NDET_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
	NDET_SHIM_REAL(ncclCommDestroy, real);
	if (ndet_shim_enabled())
		ndet_comm_destroy(comm);
	return real(comm);
}

NDET_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
	NDET_SHIM_REAL(ncclCommFinalize, real);
	ncclResult_t held;
	/* Our barrier first: NCCL's finalize ends the communicator it would run on. */
	if (ndet_shim_enabled() && ndet_group_finalize(comm, &held))
		return held;
	return real(comm);
}

NDET_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm)
{
	NDET_SHIM_REAL(ncclCommAbort, real);
	/* Our kernels leave first; our state goes once NCCL is done with the communicator. */
	struct ndet_comm *aborted = ndet_shim_enabled() ? ndet_comm_abort_begin(comm) : NULL;
	ncclResult_t result = real(comm);
	ndet_comm_abort_end(aborted);
	return result;
}

NDET_EXPORT ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags)
{
	NDET_SHIM_REAL(ncclCommRevoke, real);
	const bool enabled = ndet_shim_enabled();
	/*
	 * Flags other than 0 (nccl.h: "must be 0") are NCCL's to judge first: where NCCL
	 * takes them, our kernels are stopped right after.
	 */
	if (enabled && revokeFlags != 0) {
		ncclResult_t result = real(comm, revokeFlags);
		if (result == ncclSuccess || result == ncclInProgress)
			ndet_comm_revoke(comm);
		return result;
	}
	if (enabled)
		ndet_comm_revoke(comm);
	ncclResult_t result = real(comm, revokeFlags);
	if (enabled)
		ndet_comm_revoke_refused(comm, "ncclCommRevoke", result);
	return result;
}

NDET_EXPORT ncclResult_t ncclGroupStart(void)
{
	NDET_SHIM_REAL(ncclGroupStart, real);
	ncclResult_t result = real();
	if (ndet_shim_enabled())
		ndet_group_after_start(result);
	return result;
}

NDET_EXPORT ncclResult_t ncclGroupEnd(void)
{
	NDET_SHIM_REAL(ncclGroupEnd, real);
	ncclResult_t result = real();
	if (ndet_shim_enabled())
		result = ndet_group_after_end(result);
	return result;
}

NDET_EXPORT ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo)
{
	NDET_SHIM_REAL(ncclGroupSimulateEnd, real);
	ncclResult_t result = real(simInfo);
	if (ndet_shim_enabled())
		result = ndet_group_after_simulate_end(result);
	return result;
}

NDET_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
	NDET_SHIM_REAL(ncclCommGetAsyncError, real);
	/*
	 * A failed kernel of ours is reported from host-mapped memory, with no CUDA call
	 * (a copy would queue behind a spinning kernel) and no NCCL call.
	 */
	if (ndet_shim_enabled() && ndet_comm_async_error(comm, asyncError))
		return ncclSuccess;
	return real(comm, asyncError);
}

NDET_EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar,
						  ncclDataType_t datatype,
						  ncclScalarResidence_t residence, ncclComm_t comm)
{
	NDET_SHIM_REAL(ncclRedOpCreatePreMulSum, real);
	/*
	 * NCCL makes the op (its value, its checks); we keep its scalar for our kernels.
	 * An op we cannot keep is given back: its calls would run in NCCL on this rank
	 * alone.
	 */
	ncclResult_t result = real(op, scalar, datatype, residence, comm);
	if (result == ncclSuccess && ndet_shim_enabled() &&
	    !ndet_comm_premul_created(comm, *op, scalar, datatype, residence)) {
		const struct ndet_nccl *nccl = ndet_resolve_nccl();
		if (nccl->ncclRedOpDestroy != NULL)
			(void)nccl->ncclRedOpDestroy(*op, comm);
		result = ncclSystemError;
	}
	return result;
}

NDET_EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm)
{
	NDET_SHIM_REAL(ncclRedOpDestroy, real);
	/* An op NCCL does not know gets NCCL's error, and ours stays as it was. */
	ncclResult_t result = real(op, comm);
	if (result == ncclSuccess && ndet_shim_enabled())
		ndet_comm_premul_destroyed(comm, op);
	return result;
}

/* ------------------------------------------------------------------ profiling aliases */

#ifdef NDET_BUILD_DROPIN
/*
 * pncclX of the drop-in is the same entry point as ncclX: a caller that uses NCCL's
 * profiling names must not bypass diversion.  NCCL's own internal calls never come
 * here (the real NCCL is loaded with RTLD_DEEPBIND).
 */
#define NDET_SHIM_PROFILING_ALIAS(name)                                                            \
	extern __typeof__(name) p##name __attribute__((alias(#name), visibility("default")));
NDET_SHIM_PROFILING_ALIAS(ncclAllReduce)
NDET_SHIM_PROFILING_ALIAS(ncclReduceScatter)
NDET_SHIM_PROFILING_ALIAS(ncclReduce)
NDET_SHIM_PROFILING_ALIAS(ncclCommInitRank)
NDET_SHIM_PROFILING_ALIAS(ncclCommInitRankConfig)
NDET_SHIM_PROFILING_ALIAS(ncclCommInitRankScalable)
NDET_SHIM_PROFILING_ALIAS(ncclCommInitAll)
NDET_SHIM_PROFILING_ALIAS(ncclCommSplit)
NDET_SHIM_PROFILING_ALIAS(ncclCommShrink)
NDET_SHIM_PROFILING_ALIAS(ncclCommDestroy)
NDET_SHIM_PROFILING_ALIAS(ncclCommFinalize)
NDET_SHIM_PROFILING_ALIAS(ncclCommAbort)
NDET_SHIM_PROFILING_ALIAS(ncclCommRevoke)
NDET_SHIM_PROFILING_ALIAS(ncclGroupStart)
NDET_SHIM_PROFILING_ALIAS(ncclGroupEnd)
NDET_SHIM_PROFILING_ALIAS(ncclGroupSimulateEnd)
NDET_SHIM_PROFILING_ALIAS(ncclCommGetAsyncError)
NDET_SHIM_PROFILING_ALIAS(ncclRedOpCreatePreMulSum)
NDET_SHIM_PROFILING_ALIAS(ncclRedOpDestroy)
#endif

/* ------------------------------------------------------------------ nccl-det's own API */

/*
 * The direct entry points (nccl_det.h): the interposed call with `direct` set, so that a
 * floating-point call nccl-det would send to NCCL fails instead.  Where nccl-det does
 * not divert in this process at all, such a call fails here (one WARN per cause);
 * integer reductions and arguments NCCL refuses reach NCCL either way.  Behind another
 * copy of nccl-det, that copy's entry point answers.
 */
static bool ndet_shim_direct(ndet_coll_t coll, const void *sendbuff, void *recvbuff, size_t count,
			     ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
			     cudaStream_t stream, ncclResult_t *result)
{
	static int warned[3]; /* one WARN per cause: disabled, inactive, may not divert */
	const bool enabled = ndet_settings_get()->enable;
	const bool active = enabled && ndet_comm_hooks_allowed();
	if (active && ndet_resolve_divert_allowed())
		return ndet_group_reduction(coll, sendbuff, recvbuff, count, datatype, op, root,
					    true, comm, stream, result);
	if (comm == NULL || !ndet_group_direct_refusable(coll, datatype, op, root))
		return false;
	const int cause = !enabled ? 0 : !active ? 1 : 2;
	static const char *const why[3] = {
		"is disabled (NCCL_DET_ENABLE=0). Fix: unset NCCL_DET_ENABLE",
		"is inactive in this process (a child after fork(), or exiting). Fix: make the "
		"call in the process that created the communicator",
		"does not divert in this process (the NCCL it forwards to is too old, or is "
		"another copy of nccl-det without these entry points). Fix: NCCL >= 2.21, one "
		"copy of nccl-det",
	};
	NDET_WARN_ONCE(&warned[cause],
		       "%s fails with ncclInvalidUsage because it would not be deterministic: "
		       "nccl-det %s",
		       ndet_comm_call_name(coll, true), why[cause]);
	*result = ncclInvalidUsage;
	return true;
}

NDET_EXPORT ncclResult_t ncclDetAllReduce(const void *sendbuff, void *recvbuff, size_t count,
					  ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
					  cudaStream_t stream)
{
	__typeof__(ncclDetAllReduce) *other =
		(__typeof__(ncclDetAllReduce) *)ndet_resolve_other_copy_symbol("ncclDetAllReduce");
	if (other != NULL)
		return other(sendbuff, recvbuff, count, datatype, op, comm, stream);
	NDET_SHIM_REAL(ncclAllReduce, real);
	ncclResult_t result;
	if (ndet_shim_direct(NDET_COLL_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, -1, comm,
			     stream, &result))
		return result;
	return real(sendbuff, recvbuff, count, datatype, op, comm, stream);
}

NDET_EXPORT ncclResult_t ncclDetReduceScatter(const void *sendbuff, void *recvbuff,
					      size_t recvcount, ncclDataType_t datatype,
					      ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
	__typeof__(ncclDetReduceScatter) *other =
		(__typeof__(ncclDetReduceScatter) *)ndet_resolve_other_copy_symbol(
			"ncclDetReduceScatter");
	if (other != NULL)
		return other(sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
	NDET_SHIM_REAL(ncclReduceScatter, real);
	ncclResult_t result;
	if (ndet_shim_direct(NDET_COLL_REDUCE_SCATTER, sendbuff, recvbuff, recvcount, datatype, op,
			     -1, comm, stream, &result))
		return result;
	return real(sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
}

NDET_EXPORT ncclResult_t ncclDetReduce(const void *sendbuff, void *recvbuff, size_t count,
				       ncclDataType_t datatype, ncclRedOp_t op, int root,
				       ncclComm_t comm, cudaStream_t stream)
{
	__typeof__(ncclDetReduce) *other =
		(__typeof__(ncclDetReduce) *)ndet_resolve_other_copy_symbol("ncclDetReduce");
	if (other != NULL)
		return other(sendbuff, recvbuff, count, datatype, op, root, comm, stream);
	NDET_SHIM_REAL(ncclReduce, real);
	ncclResult_t result;
	if (ndet_shim_direct(NDET_COLL_REDUCE, sendbuff, recvbuff, count, datatype, op, root, comm,
			     stream, &result))
		return result;
	return real(sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}

NDET_EXPORT ncclResult_t ncclDetCommQuery(ncclComm_t comm, int *diverted, const char **reason)
{
	/* Behind another copy of nccl-det: that copy knows the communicator. */
	ncclResult_t (*other)(ncclComm_t, int *, const char **) =
		(ncclResult_t(*)(ncclComm_t, int *, const char **))ndet_resolve_other_copy_symbol(
			"ncclDetCommQuery");
	if (other != NULL)
		return other(comm, diverted, reason);
	bool enabled = ndet_settings_get()->enable;
	/*
	 * In a fork() child or at exit every call passes through: say so, and leave the
	 * registry alone (a thread of the parent may have held its lock at fork()).
	 */
	if (!enabled || !ndet_comm_hooks_allowed()) {
		if (comm == NULL || diverted == NULL)
			return ncclInvalidArgument;
		*diverted = 0;
		if (reason != NULL)
			*reason = enabled ? "inactive in this process (a child after fork(), or "
					    "exiting): every call goes to NCCL"
					  : "disabled (NCCL_DET_ENABLE=0)";
		return ncclSuccess;
	}
	return ndet_comm_query(comm, diverted, reason);
}

NDET_EXPORT ncclResult_t ncclDetGetResources(ncclDetResources_t *resources)
{
	if (resources == NULL)
		return ncclInvalidArgument;
	/* The copy that diverts holds the engines (a drop-in and a preload in one process). */
	ncclResult_t (*other)(ncclDetResources_t *) = (ncclResult_t(*)(
		ncclDetResources_t *))ndet_resolve_other_copy_symbol("ncclDetGetResources");
	if (other != NULL)
		return other(resources);
	struct ndet_resources now;
	ndet_resources_get(&now);
	*resources = (ncclDetResources_t){.allocations = now.allocations,
					  .bytes = now.bytes,
					  .ipcImports = now.ipc_imports,
					  .deferredPools = now.deferred_pools,
					  .pendingPools = now.pending_pools,
					  .leakedPools = now.leaked_pools,
					  .leakedBytes = now.leaked_bytes};
	return ncclSuccess;
}

NDET_EXPORT ncclResult_t ncclDetGetVersion(int *version)
{
	if (version == NULL)
		return ncclInvalidArgument;
	*version = NCCL_DET_VERSION_CODE;
	return ncclSuccess;
}

NDET_EXPORT ncclResult_t ncclDetGetNcclLibrary(const char **path, int *version,
					       const char **found_by)
{
	if (path == NULL || version == NULL)
		return ncclInvalidArgument;
	ncclResult_t (*other)(const char **, int *, const char **) =
		(ncclResult_t(*)(const char **, int *, const char **))
			ndet_resolve_other_copy_symbol("ncclDetGetNcclLibrary");
	if (other != NULL)
		return other(path, version, found_by);
	if (!ndet_resolve_peek()) {
		*path = "";
		*version = 0;
		if (found_by != NULL)
			*found_by = ndet_resolve_strategy_name(NDET_RESOLVE_NONE);
		return ncclSuccess;
	}
	enum ndet_resolve_strategy strategy = ndet_resolve_strategy();
	*path = ndet_resolve_path();
	*version = ndet_resolve_nccl_version();
	if (found_by != NULL)
		*found_by = ndet_resolve_strategy_name(strategy);
	return ncclSuccess;
}
