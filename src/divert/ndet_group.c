/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Per-thread group state and the front door of the reductions (see ndet_group.h).
 */
#include "config.h"

#include "divert/ndet_group.h"

#include <stdlib.h>
#include <string.h>

#include "divert/ndet_comm.h"
#include "common/ndet_dtype.h"
#include "common/ndet_log.h"
#include "resolve/ndet_resolve.h"

/* Communicators held by a group, each with a reference. */
struct ndet_group_comms {
	struct ndet_comm **items;
	int count, capacity;
};

struct ndet_group_calls {
	struct ndet_call *items;
	int count, capacity;
};

struct ndet_group {
	int depth;
	struct ndet_group_calls calls;      /* recorded all-reduces, in issue order */
	struct ndet_group_comms created;    /* communicators created in the group */
	struct ndet_group_comms finalizing; /* held ncclCommFinalize calls */
	ncclResult_t error;                 /* the first call that failed at once in the group */
	/*
	 * Out of memory, a communicator created in the group could not be tracked or
	 * listed: every one created in it is refused at its end (ndet_comm_setup_refuse),
	 * since this thread's other ranks of that one would wait for it in the setup.
	 */
	bool refusing;
};

static _Thread_local struct ndet_group ndet_group_current;

/* ---------------------------------------------------------------- lists */

static bool ndet_group_grow(void **items, int *capacity, int count, size_t size)
{
	if (count < *capacity)
		return true;
	int grown = *capacity == 0 ? 8 : 2 * *capacity;
	void *larger = realloc(*items, (size_t)grown * size);
	if (larger == NULL)
		return false;
	*items = larger;
	*capacity = grown;
	return true;
}

/* Keeps the caller's reference on success. */
static bool ndet_group_comms_add(struct ndet_group_comms *list, struct ndet_comm *comm)
{
	if (!ndet_group_grow((void **)&list->items, &list->capacity, list->count,
			     sizeof(*list->items)))
		return false;
	list->items[list->count++] = comm;
	return true;
}

static bool ndet_group_comms_contain(const struct ndet_group_comms *list,
				     const struct ndet_comm *comm)
{
	for (int i = 0; i < list->count; i++)
		if (list->items[i] == comm)
			return true;
	return false;
}

static void ndet_group_comms_release(struct ndet_group_comms *list)
{
	for (int i = 0; i < list->count; i++)
		ndet_comm_unref(list->items[i]);
	free(list->items);
	memset(list, 0, sizeof(*list));
}

static void ndet_group_calls_release(struct ndet_group_calls *list)
{
	for (int i = 0; i < list->count; i++)
		ndet_comm_unref(list->items[i].comm);
	free(list->items);
	memset(list, 0, sizeof(*list));
}

static bool ndet_group_has_calls_on(const struct ndet_group_calls *list,
				    const struct ndet_comm *comm)
{
	for (int i = 0; i < list->count; i++)
		if (list->items[i].comm == comm)
			return true;
	return false;
}

/* The first error wins; ncclInProgress only when nothing failed. */
static ncclResult_t ndet_group_combine(ncclResult_t current, ncclResult_t next)
{
	if (current != ncclSuccess && current != ncclInProgress)
		return current;
	if (next != ncclSuccess && next != ncclInProgress)
		return next;
	return current == ncclInProgress || next == ncclInProgress ? ncclInProgress : ncclSuccess;
}

/* ---------------------------------------------------------------- running recorded calls */

/* The calls of one communicator, in issue order. */
struct ndet_group_queue {
	struct ndet_comm *comm;
	int *calls;
	int count, head;
};

static int ndet_group_queues_build(struct ndet_call *calls, int count,
				   struct ndet_group_queue *queues, int *slots)
{
	int nqueues = 0;
	for (int i = 0; i < count; i++) {
		int q = 0;
		while (q < nqueues && queues[q].comm != calls[i].comm)
			q++;
		if (q == nqueues) {
			queues[q].comm = calls[i].comm;
			queues[q].calls = slots + i; /* filled below, per queue */
			queues[q].count = queues[q].head = 0;
			nqueues++;
		}
	}
	/* Lay the queues out one after another in `slots`. */
	int used = 0;
	for (int q = 0; q < nqueues; q++) {
		queues[q].calls = slots + used;
		for (int i = 0; i < count; i++)
			if (calls[i].comm == queues[q].comm)
				queues[q].calls[queues[q].count++] = i;
		used += queues[q].count;
	}
	return nqueues;
}

/* Skips the calls that end here (refused, failed); returns their combined result. */
static ncclResult_t ndet_group_queue_settle(struct ndet_group_queue *queue, struct ndet_call *calls)
{
	ncclResult_t result = ncclSuccess;
	while (queue->head < queue->count) {
		const struct ndet_call *call = &calls[queue->calls[queue->head]];
		if (call->decision.action == NDET_ACTION_REFUSE)
			result = ndet_group_combine(result, ncclInvalidUsage);
		else if (call->decision.action == NDET_ACTION_FAIL)
			result = ndet_group_combine(result, ndet_comm_failure(call->comm));
		else if (call->decision.action == NDET_ACTION_SETUP)
			result = ndet_group_combine(result, ncclSystemError); /* setup never ran */
		else
			break;
		queue->head++;
	}
	return result;
}

/* One recorded call through the real NCCL function of its kind. */
static ncclResult_t ndet_group_forward(const struct ndet_nccl *nccl, const struct ndet_call *call)
{
	ncclComm_t comm = ndet_comm_nccl(call->comm);
	switch (call->coll) {
	case NDET_COLL_REDUCE_SCATTER:
		if (nccl->ncclReduceScatter == NULL)
			break;
		return nccl->ncclReduceScatter(call->sendbuff, call->recvbuff, call->count,
					       call->datatype, call->op, comm, call->stream);
	case NDET_COLL_REDUCE:
		if (nccl->ncclReduce == NULL)
			break;
		return nccl->ncclReduce(call->sendbuff, call->recvbuff, call->count, call->datatype,
					call->op, call->root, comm, call->stream);
	case NDET_COLL_ALLREDUCE:
	default:
		if (nccl->ncclAllReduce == NULL)
			break;
		return nccl->ncclAllReduce(call->sendbuff, call->recvbuff, call->count,
					   call->datatype, call->op, comm, call->stream);
	}
	static const enum ndet_nccl_function functions[NDET_COLL_COUNT] = {
		[NDET_COLL_ALLREDUCE] = NDET_NCCL_FN_ncclAllReduce,
		[NDET_COLL_REDUCE_SCATTER] = NDET_NCCL_FN_ncclReduceScatter,
		[NDET_COLL_REDUCE] = NDET_NCCL_FN_ncclReduce,
	};
	return ndet_status_to_nccl(ndet_resolve_missing(functions[call->coll]));
}

/*
 * NCCL's group end said ncclInProgress (non-blocking communicators: NCCL goes on
 * enqueueing in the background): wait until it is done on each communicator of
 * `calls` (and `more`), before anything else of this group runs on them.  Otherwise
 * NCCL would refuse the next replay on a communicator still in progress, and a
 * diverted kernel could reach a stream before the NCCL kernels issued ahead of it,
 * in an order that differs between ranks.  The calls are `items` (an array), or
 * else `pointers`.  Allocates nothing: the wait is never skipped.  Returns the
 * combined state.
 */
static ncclResult_t ndet_group_settle(const struct ndet_call *items,
				      struct ndet_call *const *pointers, int count,
				      const struct ndet_group_comms *more)
{
	ncclResult_t result = ncclSuccess;
	for (int i = 0; i < count; i++) {
		struct ndet_comm *comm = items != NULL ? items[i].comm : pointers[i]->comm;
		bool seen = false;
		for (int k = 0; k < i && !seen; k++)
			seen = (items != NULL ? items[k].comm : pointers[k]->comm) == comm;
		if (!seen)
			result = ndet_group_combine(result, ndet_comm_wait_nccl(comm));
	}
	for (int i = 0; more != NULL && i < more->count; i++)
		result = ndet_group_combine(result, ndet_comm_wait_nccl(more->items[i]));
	return result;
}

/*
 * Replays calls through the real NCCL inside one real group, until NCCL is done: the
 * calls `pointers`, or else those of `items` decided NDET_ACTION_FORWARD, in order.
 * Allocates nothing.
 */
static ncclResult_t ndet_group_replay(const struct ndet_call *items,
				      struct ndet_call *const *pointers, int count)
{
	const struct ndet_nccl *nccl = ndet_resolve_nccl();
	if (nccl->ncclGroupStart == NULL || nccl->ncclGroupEnd == NULL)
		return ndet_status_to_nccl(ndet_resolve_missing(NDET_NCCL_FN_ncclGroupStart));
	ncclResult_t result = nccl->ncclGroupStart();
	if (result != ncclSuccess)
		return result;
	for (int i = 0; i < count; i++) {
		const struct ndet_call *call = items != NULL ? &items[i] : pointers[i];
		if (items == NULL || call->decision.action == NDET_ACTION_FORWARD)
			result = ndet_group_combine(result, ndet_group_forward(nccl, call));
	}
	result = ndet_group_combine(result, nccl->ncclGroupEnd());
	return result == ncclInProgress ? ndet_group_settle(items, pointers, count, NULL) : result;
}

/*
 * Phases, until every queue is empty: batches of diverted calls (the next call of
 * every communicator whose next call is diverted: one launch batch, so a host-only
 * backend can exchange for all of them at once), then one real NCCL group with the
 * leading fallback calls of every communicator.  Every rank of a communicator holds
 * the same sequence with the same decisions, so the phases match across ranks.
 */
static ncclResult_t ndet_group_run_calls(struct ndet_call *calls, int count)
{
	ncclResult_t result = ncclSuccess;
	const size_t slots = (size_t)(count > 0 ? count : 1);
	struct ndet_group_queue *queues = calloc(slots, sizeof(*queues));
	int *order = calloc(slots, sizeof(*order));
	struct ndet_call *batch = calloc(slots, sizeof(*batch));
	struct ndet_call **replay = calloc(slots, sizeof(*replay));
	if (queues == NULL || order == NULL || batch == NULL || replay == NULL) {
		/*
		 * None of ours runs on this rank: their communicators fail from now on.
		 * Those for NCCL still go, in their order (its peers replay them too).
		 */
		NDET_WARN("out of memory running %d recorded calls: the diverted ones fail "
			  "with ncclSystemError, and so do their communicators",
			  count);
		for (int i = 0; i < count; i++)
			if (calls[i].decision.action == NDET_ACTION_DIVERT)
				ndet_comm_fail_unlaunched(calls[i].comm, calls[i].stream);
		result = ncclSystemError;
		for (int i = 0; i < count; i++) {
			if (calls[i].decision.action == NDET_ACTION_FORWARD) {
				result = ndet_group_combine(result,
							    ndet_group_replay(calls, NULL, count));
				break;
			}
		}
		goto out;
	}
	const int nqueues = ndet_group_queues_build(calls, count, queues, order);
	for (bool progress = true; progress;) {
		progress = false;
		for (;;) {
			int batched = 0;
			for (int q = 0; q < nqueues; q++) {
				struct ndet_group_queue *queue = &queues[q];
				result = ndet_group_combine(result,
							    ndet_group_queue_settle(queue, calls));
				if (queue->head < queue->count &&
				    calls[queue->calls[queue->head]].decision.action ==
					    NDET_ACTION_DIVERT)
					batch[batched++] = calls[queue->calls[queue->head++]];
			}
			if (batched == 0)
				break;
			progress = true;
			result = ndet_group_combine(result, ndet_comm_launch_group(batch, batched));
		}
		int replaying = 0;
		for (int q = 0; q < nqueues; q++) {
			struct ndet_group_queue *queue = &queues[q];
			while (queue->head < queue->count) {
				result = ndet_group_combine(result,
							    ndet_group_queue_settle(queue, calls));
				if (queue->head == queue->count ||
				    calls[queue->calls[queue->head]].decision.action !=
					    NDET_ACTION_FORWARD)
					break;
				replay[replaying++] = &calls[queue->calls[queue->head++]];
			}
		}
		if (replaying > 0) {
			progress = true;
			result = ndet_group_combine(result,
						    ndet_group_replay(NULL, replay, replaying));
		}
	}
out:
	free(replay);
	free(batch);
	free(order);
	free(queues);
	return result;
}

/* ---------------------------------------------------------------- group end */

/*
 * Add `comm` (a reference of its own) to setups due now.  Out of memory, it is
 * broken instead (ndet_comm_setup_refuse), and *result says so.
 */
static void ndet_group_due(struct ndet_group_comms *due, struct ndet_comm *comm,
			   ncclResult_t *result)
{
	if (ndet_group_comms_contain(due, comm))
		return;
	if (!ndet_group_comms_add(due, comm)) {
		*result = ndet_group_combine(*result, ndet_comm_setup_refuse(&comm, 1));
		return;
	}
	ndet_comm_ref(comm);
}

/*
 * Setups the group owes: blocking communicators created in it, and any with calls.
 * `refusing`: those created in it are refused instead (ndet_group.refusing); out of
 * memory listing them, every one is refused.
 */
static ncclResult_t ndet_group_run_setups(struct ndet_group_comms *created,
					  const struct ndet_group_calls *calls, bool refusing)
{
	struct ndet_group_comms due = {0};
	ncclResult_t result = ncclSuccess, listed = ncclSuccess;
	if (refusing)
		result = ndet_comm_setup_refuse(created->items, created->count);
	for (int i = 0; !refusing && i < created->count; i++) {
		struct ndet_comm *comm = created->items[i];
		if (ndet_comm_is_blocking(comm) || ndet_group_has_calls_on(calls, comm))
			ndet_group_due(&due, comm, &listed);
	}
	/*
	 * Pending ones with calls here that were created before (non-blocking): never
	 * ranks of a refused one, whose ranks on this thread were all created here.
	 */
	for (int i = 0; i < calls->count; i++) {
		struct ndet_comm *comm = calls->items[i].comm;
		if (ndet_comm_state(comm) == NDET_COMM_PENDING)
			ndet_group_due(&due, comm, &listed);
	}
	/* One could not be listed: the others may be ranks of its communicator. */
	if (listed != ncclSuccess) {
		(void)ndet_comm_setup_refuse(created->items, created->count);
		(void)ndet_comm_setup_refuse(due.items, due.count);
		result = ndet_group_combine(result, listed);
	}
	if (due.count > 0 && listed == ncclSuccess)
		result = ndet_group_combine(result, ndet_comm_setup_group(due.items, due.count));
	ndet_group_comms_release(&due);
	return result;
}

/* Our barriers first, then NCCL's finalize of all of them in one real group. */
static ncclResult_t ndet_group_run_finalizes(struct ndet_group_comms *finalizing)
{
	const struct ndet_nccl *nccl = ndet_resolve_nccl();
	if (finalizing->count == 0)
		return ncclSuccess;
	ncclResult_t result = ndet_comm_finalize_group(finalizing->items, finalizing->count);
	if (nccl->ncclGroupStart == NULL || nccl->ncclGroupEnd == NULL ||
	    nccl->ncclCommFinalize == NULL)
		return ndet_group_combine(result, ndet_status_to_nccl(ndet_resolve_missing(
							  NDET_NCCL_FN_ncclCommFinalize)));
	ncclResult_t nccl_result = nccl->ncclGroupStart();
	if (nccl_result != ncclSuccess)
		return ndet_group_combine(result, nccl_result);
	for (int i = 0; i < finalizing->count; i++)
		nccl_result = ndet_group_combine(
			nccl_result, nccl->ncclCommFinalize(ndet_comm_nccl(finalizing->items[i])));
	nccl_result = ndet_group_combine(nccl_result, nccl->ncclGroupEnd());
	return ndet_group_combine(result, nccl_result);
}

int ndet_group_depth(void)
{
	return ndet_group_current.depth;
}

void ndet_group_after_start(ncclResult_t result)
{
	if (result == ncclSuccess)
		ndet_group_current.depth++;
}

/* Takes this thread's recorded state, leaving it empty. */
static struct ndet_group ndet_group_take(void)
{
	struct ndet_group taken = ndet_group_current;
	memset(&ndet_group_current, 0, sizeof(ndet_group_current));
	return taken;
}

ncclResult_t ndet_group_after_end(ncclResult_t result)
{
	struct ndet_group *group = &ndet_group_current;
	if (group->depth == 0 || --group->depth > 0)
		return result;
	struct ndet_group taken = ndet_group_take();
	/*
	 * NCCL failed the group: what it held did not run; neither does ours, and the
	 * communicators of ours fail from now on (below).
	 */
	const bool nccl_ran = result == ncclSuccess || result == ncclInProgress;
	/*
	 * NCCL still enqueues in the background: ours follows once it is done.  An
	 * asynchronous error of one communicator is returned; the others' calls still run
	 * (their peers wait for them).
	 */
	if (result == ncclInProgress && (taken.calls.count > 0 || taken.finalizing.count > 0))
		result = ndet_group_settle(taken.calls.items, NULL, taken.calls.count,
					   &taken.finalizing);
	/*
	 * A call of ours that failed at once (refused, on a failed communicator) fails the
	 * group's end too, as NCCL's group end reports an argument error of a call inside
	 * it (NCCL's own error first).  The group's other calls still run: where the
	 * failure is this rank's alone (a communicator that failed here), its peers'
	 * kernels wait for them.  While NCCL still enqueues in the background
	 * (ncclInProgress, nothing of ours to wait for), the answer stays ncclInProgress:
	 * the failed call returned its error itself.
	 */
	if (result != ncclInProgress)
		result = ndet_group_combine(result, taken.error);
	if (nccl_ran) {
		result = ndet_group_combine(
			result,
			ndet_group_run_setups(&taken.created, &taken.calls, taken.refusing));
		for (int i = 0; i < taken.calls.count; i++) {
			ndet_comm_decide(&taken.calls.items[i]);
			ndet_comm_note_decision(&taken.calls.items[i]);
		}
		result = ndet_group_combine(
			result, ndet_group_run_calls(taken.calls.items, taken.calls.count));
		result = ndet_group_combine(result, ndet_group_run_finalizes(&taken.finalizing));
	} else {
		/* Pending after NCCL's failure too: none sets up without the lost one. */
		if (taken.refusing)
			(void)ndet_comm_setup_refuse(taken.created.items, taken.created.count);
		/*
		 * NCCL's failure may be this rank's alone, while its peers run the calls
		 * of ours it held: they are told, now or when the setup ends.
		 */
		for (int i = 0; i < taken.calls.count; i++) {
			const struct ndet_call *call = &taken.calls.items[i];
			if (call->decision.action == NDET_ACTION_DIVERT ||
			    call->decision.action == NDET_ACTION_SETUP)
				ndet_comm_fail_unlaunched(call->comm, call->stream);
		}
	}
	ndet_group_calls_release(&taken.calls);
	ndet_group_comms_release(&taken.created);
	ndet_group_comms_release(&taken.finalizing);
	return result;
}

ncclResult_t ndet_group_after_simulate_end(ncclResult_t result)
{
	struct ndet_group *group = &ndet_group_current;
	if (group->depth == 0 || --group->depth > 0)
		return result;
	/*
	 * Nothing of ours ran: the created communicators stay pending (set up at their
	 * first call), unless the group lost one of them (ndet_group.refusing).
	 */
	struct ndet_group taken = ndet_group_take();
	if (taken.refusing)
		(void)ndet_comm_setup_refuse(taken.created.items, taken.created.count);
	/* A call of ours that failed at once fails the simulation too, as in NCCL. */
	result = ndet_group_combine(result, taken.error);
	ndet_group_calls_release(&taken.calls);
	ndet_group_comms_release(&taken.created);
	ndet_group_comms_release(&taken.finalizing);
	return result;
}

/* ---------------------------------------------------------------- entry points */

ncclResult_t ndet_group_comms_created(ncclComm_t *comms, int count, bool blocking,
				      ncclComm_t parent, bool shares_parent, uint64_t identity,
				      ncclResult_t result)
{
	if ((result != ncclSuccess && result != ncclInProgress) || comms == NULL)
		return result;
	struct ndet_group_comms fresh = {0};
	/*
	 * Out of memory, a communicator of this call can be neither tracked nor listed:
	 * that rank cannot take part in the setup its peers are in (and nothing of ours
	 * can fail its calls), and the call's other ranks (ncclCommInitAll: the same
	 * communicator) must not set up without it.
	 */
	bool lost = false;
	for (int i = 0; i < count; i++) {
		if (comms[i] == NULL)
			continue;
		struct ndet_comm *comm =
			ndet_comm_register(comms[i], blocking, parent, shares_parent, identity);
		if (comm == NULL) {
			lost = true;
		} else if (!ndet_group_comms_add(&fresh, comm)) {
			(void)ndet_comm_setup_refuse(&comm, 1);
			ndet_comm_unref(comm);
			lost = true;
		}
	}
	if (lost) {
		result = ndet_group_combine(result, ncclSystemError);
		(void)ndet_comm_setup_refuse(fresh.items, fresh.count);
	}
	if (ndet_group_current.depth > 0) {
		/*
		 * The init runs at the outermost ncclGroupEnd: so does our setup, unless
		 * the group lost one (this thread's other ranks of it are in the group).
		 */
		for (int i = 0; i < fresh.count; i++) {
			if (!ndet_group_comms_add(&ndet_group_current.created, fresh.items[i])) {
				(void)ndet_comm_setup_refuse(&fresh.items[i], 1);
				ndet_comm_unref(fresh.items[i]);
				lost = true;
			}
		}
		if (lost) {
			ndet_group_current.refusing = true;
			ndet_group_current.error =
				ndet_group_combine(ndet_group_current.error, ncclSystemError);
			result = ndet_group_combine(result, ncclSystemError);
		}
		free(fresh.items);
		return result;
	}
	if (blocking && result == ncclSuccess && fresh.count > 0)
		result =
			ndet_group_combine(result, ndet_comm_setup_group(fresh.items, fresh.count));
	ndet_group_comms_release(&fresh);
	return result;
}

/* Record `call` (its reference moves to the group). */
static bool ndet_group_record(const struct ndet_call *call)
{
	struct ndet_group_calls *list = &ndet_group_current.calls;
	if (!ndet_group_grow((void **)&list->items, &list->capacity, list->count,
			     sizeof(*list->items)))
		return false;
	list->items[list->count++] = *call;
	return true;
}

/* A fallback that can be replayed later in order (NCCL accepts its arguments). */
static bool ndet_group_replayable(const struct ndet_eligibility *decision)
{
	return decision->action == NDET_ACTION_FORWARD &&
	       decision->reason != NDET_FALLBACK_INVALID &&
	       decision->reason != NDET_FALLBACK_INACTIVE;
}

bool ndet_group_allreduce(const void *sendbuff, void *recvbuff, size_t count,
			  ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t nccl,
			  cudaStream_t stream, ncclResult_t *result)
{
	return ndet_group_reduction(NDET_COLL_ALLREDUCE, sendbuff, recvbuff, count, datatype, op,
				    -1, false, nccl, stream, result);
}

bool ndet_group_direct_refusable(ndet_coll_t coll, ncclDataType_t datatype, ncclRedOp_t op,
				 int root)
{
	ndet_dtype_t dtype;
	return (int)datatype >= 0 && ndet_dtype_from_nccl(datatype, &dtype) && (int)op >= 0 &&
	       (coll != NDET_COLL_REDUCE || root >= 0);
}

/*
 * A direct call on a communicator nccl-det does not know (its registration failed,
 * or the handle is no communicator of this process): a floating-point reduction
 * would not be deterministic in NCCL, so it fails; the others go to NCCL, which
 * answers a bad handle with its own code.
 */
static bool ndet_group_refuse_unknown(ndet_coll_t coll, ncclDataType_t datatype, ncclRedOp_t op,
				      int root, ncclComm_t nccl, ncclResult_t *result)
{
	static int warned;
	if (nccl == NULL || !ndet_group_direct_refusable(coll, datatype, op, root))
		return false;
	if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
		NDET_WARN("communicator %p: %s fails with ncclInvalidUsage because it would not "
			  "be deterministic: nccl-det does not know this communicator (not made "
			  "by NCCL with nccl-det loaded, or its registration failed: see the "
			  "WARN above). Fix: create it with nccl-det loaded",
			  (void *)nccl, ndet_comm_call_name(coll, true));
	*result = ncclInvalidUsage;
	if (ndet_group_current.depth > 0)
		ndet_group_current.error = ndet_group_combine(ndet_group_current.error, *result);
	return true;
}

bool ndet_group_reduction(ndet_coll_t coll, const void *sendbuff, void *recvbuff, size_t count,
			  ncclDataType_t datatype, ncclRedOp_t op, int root, bool direct,
			  ncclComm_t nccl, cudaStream_t stream, ncclResult_t *result)
{
	struct ndet_comm *comm = ndet_comm_lookup(nccl);
	if (comm == NULL)
		return direct && ndet_group_refuse_unknown(coll, datatype, op, root, nccl, result);
	struct ndet_call call = {
		.comm = comm,
		.sendbuff = sendbuff,
		.recvbuff = recvbuff,
		.count = count,
		.datatype = datatype,
		.op = op,
		.stream = stream,
		.coll = coll,
		.root = root,
		.direct = direct,
	};
	ndet_comm_decide(&call);
	if (ndet_group_current.depth > 0) {
		ndet_action_t action = call.decision.action;
		/*
		 * Calls that must keep their place behind recorded ones on the same
		 * communicator are recorded too; all others act now.
		 */
		bool record = action == NDET_ACTION_DIVERT || action == NDET_ACTION_SETUP ||
			      (ndet_group_replayable(&call.decision) &&
			       ndet_group_has_calls_on(&ndet_group_current.calls, comm));
		if (record) {
			if (ndet_group_record(&call)) {
				*result = ncclSuccess;
				return true;
			}
			/*
			 * Dropped on this rank alone: its later calls would pair with its
			 * peers' of this one.  The communicator fails from now on.
			 */
			NDET_WARN("communicator %p: out of memory recording a call in a group: "
				  "it fails with ncclSystemError, and so does the communicator",
				  (void *)nccl);
			ndet_comm_fail_unlaunched(comm, call.stream);
			ndet_comm_unref(comm);
			*result = ncclSystemError;
			ndet_group_current.error =
				ndet_group_combine(ndet_group_current.error, *result);
			return true;
		}
	} else if (call.decision.action == NDET_ACTION_SETUP) {
		/* First eligible call of a pending communicator (non-blocking). */
		struct ndet_comm *pending[1] = {comm};
		(void)ndet_comm_setup_group(pending, 1);
		ndet_comm_decide(&call);
	}
	ndet_comm_note_decision(&call);
	bool handled = true;
	switch (call.decision.action) {
	case NDET_ACTION_DIVERT:
		*result = ndet_comm_launch_group(&call, 1);
		break;
	case NDET_ACTION_REFUSE:
		*result = ncclInvalidUsage;
		break;
	case NDET_ACTION_FAIL:
		*result = ndet_comm_failure(comm);
		break;
	case NDET_ACTION_SETUP:
		/* Never forward a call our peers may divert: fail it instead. */
		*result = ncclSystemError;
		break;
	case NDET_ACTION_FORWARD:
	default:
		handled = false;
		break;
	}
	if (handled && ndet_group_current.depth > 0)
		ndet_group_current.error = ndet_group_combine(ndet_group_current.error, *result);
	ndet_comm_unref(comm);
	return handled;
}

bool ndet_group_finalize(ncclComm_t nccl, ncclResult_t *result)
{
	struct ndet_comm *comm = ndet_comm_lookup(nccl);
	if (comm == NULL)
		return false;
	if (ndet_group_current.depth > 0) {
		if (ndet_group_comms_add(&ndet_group_current.finalizing, comm)) {
			*result = ncclSuccess;
			return true;
		}
		/*
		 * Its peers will wait in the barrier: the application must learn now, and
		 * abort the communicator (its pool is then kept until exit).
		 */
		NDET_WARN("communicator %p: out of memory holding ncclCommFinalize in a group: "
			  "nccl-det's barrier cannot run, and the finalize fails with "
			  "ncclSystemError: abort the communicator",
			  (void *)nccl);
		ndet_comm_unref(comm);
		*result = ncclSystemError;
		ndet_group_current.error = ndet_group_combine(ndet_group_current.error, *result);
		return true;
	}
	struct ndet_comm *finalizing[1] = {comm};
	(void)ndet_comm_finalize_group(finalizing, 1);
	ndet_comm_unref(comm);
	return false;
}
