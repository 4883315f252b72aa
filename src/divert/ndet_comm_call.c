/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * A communicator's calls (see ndet_comm.h): the decision for each call, the WARNs
 * and counters of calls that are not diverted, the diverted launch, and the
 * PreMulSum ops NCCL made on the communicator, which the decision reads.
 */
#include "config.h"

#include "divert/ndet_comm.h"
#include "divert/ndet_comm_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ndet_log.h"
#include "common/ndet_dtype.h"
#include "protocol/ndet_plan.h"
#include "protocol/ndet_setup.h"
#include "resolve/ndet_resolve.h"

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
	/*
	 * The agreed value only: ranks may differ, and a split decision is a hang.  A
	 * direct call is strict on every rank that makes it, which every rank does (the
	 * same collective on every rank, as any NCCL call).
	 */
	facts.strict = comm->strict || call->direct;
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
		NDET_WARN("communicator %p rank %d: %s%s fails with ncclInvalidUsage because it "
			  "would not be deterministic: %s",
			  (void *)comm->nccl, ndet_comm_rank(comm),
			  call->direct ? "" : "NCCL_DET_STRICT=1: ",
			  ndet_comm_call_name(call->coll, call->direct), cause);
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

/*
 * Put the launches of multi-host engines after the others (keeping both orders):
 * returns how many single-host ones lead.  comms[k] gets each one's communicator.
 */
static int ndet_comm_launch_partition(struct ndet_backend_call *launches, int *index,
				      ncclComm_t *comms, const struct ndet_call *calls, int count)
{
	struct ndet_backend_hosts view;
	int single = 0;
	for (int k = 0; k < count; k++) {
		if (ndet_comm_hosts_engine(launches[k].engine, &view))
			continue;
		struct ndet_backend_call launch = launches[k];
		int position = index[k];
		memmove(&launches[single + 1], &launches[single],
			(size_t)(k - single) * sizeof(*launches));
		memmove(&index[single + 1], &index[single], (size_t)(k - single) * sizeof(*index));
		launches[single] = launch;
		index[single] = position;
		single++;
	}
	for (int k = 0; k < count; k++)
		comms[k] = ndet_comm_nccl(calls[index[k]].comm);
	return single;
}

ncclResult_t ndet_comm_launch_group(struct ndet_call *calls, int count)
{
	ncclResult_t first = ncclSuccess, hosts_result = ncclSuccess;
	struct ndet_backend_call stack_launches[NDET_COMM_LAUNCH_STACK];
	int stack_index[NDET_COMM_LAUNCH_STACK];
	ncclComm_t stack_comms[NDET_COMM_LAUNCH_STACK];
	struct ndet_backend_call *launches = stack_launches;
	int *index = stack_index;
	ncclComm_t *comms = stack_comms;
	int launching = 0;
	if (count > NDET_COMM_LAUNCH_STACK) {
		launches = calloc((size_t)count, sizeof(*launches));
		index = calloc((size_t)count, sizeof(*index));
		comms = calloc((size_t)count, sizeof(*comms));
		if (launches == NULL || index == NULL || comms == NULL) {
			/* None launches here: later calls would pair with the peers' of these. */
			for (int i = 0; i < count; i++)
				ndet_comm_fail_unlaunched(calls[i].comm, calls[i].stream);
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
	/*
	 * Single-host calls first, then those across hosts, stage by stage for all of
	 * them: the same order on every thread of a job, whatever it drives.
	 */
	const int single = ndet_comm_launch_partition(launches, index, comms, calls, launching);
	if (single > 0)
		ndet_comm_backend()->allreduce_group(launches, single);
	if (launching > single)
		hosts_result = ndet_comm_hosts_launch(launches + single, comms + single,
						      launching - single);
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
						   ndet_dtype_size(call->decision.dtype),
					   __ATOMIC_RELAXED);
			continue;
		}
		/* A peer failed, or this rank could not launch it (out of memory). */
		if (status == NDET_ERR_REMOTE || status == NDET_ERR_SYSTEM)
			ndet_comm_poison(call->comm);
		__atomic_add_fetch(&call->comm->stats.failed_calls, 1, __ATOMIC_RELAXED);
		/* NCCL failed a stage between hosts: its own result, as NCCL returns it. */
		if (first == ncclSuccess)
			first = status == NDET_ERR_NCCL ? hosts_result
							: ndet_status_to_nccl(status);
	}
out:
	if (comms != stack_comms)
		free(comms);
	if (index != stack_index)
		free(index);
	if (launches != stack_launches)
		free(launches);
	return first;
}

/* ---------------------------------------------------------------- PreMulSum ops */

/* Bytes of one scalar of a datatype nccl-det reduces; 0 for the others (never diverted). */
static size_t ndet_comm_scalar_size(ncclDataType_t datatype)
{
	ndet_dtype_t dtype;
	return ndet_dtype_from_nccl(datatype, &dtype) ? ndet_dtype_size(dtype) : 0;
}

bool ndet_comm_premul_created(ncclComm_t nccl, ncclRedOp_t op, const void *scalar,
			      ncclDataType_t datatype, ncclScalarResidence_t residence)
{
	struct ndet_comm *comm = ndet_comm_lookup(nccl);
	if (comm == NULL)
		return true;
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
			NDET_WARN("out of memory recording PreMulSum op %d of communicator %p: "
				  "ncclRedOpCreatePreMulSum fails with ncclSystemError",
				  (int)op, (void *)nccl);
			ndet_comm_unref(comm);
			return false;
		}
		comm->premul_ops = larger;
		comm->premul_capacity = grown;
	}
	comm->premul_ops[slot] = premul;
	if (slot == comm->premul_count)
		comm->premul_count++;
	pthread_mutex_unlock(&comm->lock);
	ndet_comm_unref(comm);
	return true;
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
	return ndet_comm_call_name(coll, false);
}

const char *ndet_comm_call_name(ndet_coll_t coll, bool direct)
{
	static const char *const names[2][NDET_COLL_COUNT] = {
		{
			[NDET_COLL_ALLREDUCE] = "ncclAllReduce",
			[NDET_COLL_REDUCE_SCATTER] = "ncclReduceScatter",
			[NDET_COLL_REDUCE] = "ncclReduce",
		},
		{
			[NDET_COLL_ALLREDUCE] = "ncclDetAllReduce",
			[NDET_COLL_REDUCE_SCATTER] = "ncclDetReduceScatter",
			[NDET_COLL_REDUCE] = "ncclDetReduce",
		},
	};
	if ((unsigned)coll >= NDET_COLL_COUNT)
		return "unknown collective";
	return names[direct ? 1 : 0][coll];
}
