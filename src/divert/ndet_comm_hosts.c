/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Diverted calls of communicators that span hosts (doc/multihost-design.md): the
 * schedule of ndet_hosts_plan.h run through the backend's stages 1, 3 and 5 and the
 * real NCCL's grouped ncclSend/ncclRecv on the user's own communicator for stages 2
 * and 4.  NCCL's groups go on the call's stream, our stage kernels on the engine's
 * stage stream, joined by events in the order of ndet_hosts_schedule_next, with no
 * host synchronisation between stages: NCCL moves bytes, the engine does every
 * arithmetic step.
 */
#include "config.h"

#include "divert/ndet_comm.h"
#include "divert/ndet_comm_internal.h"

#include <stdlib.h>
#include <string.h>

#include "common/ndet_dtype.h"
#include "common/ndet_log.h"
#include "resolve/ndet_resolve.h"

/* One call across hosts and what its issue loop needs. */
struct ndet_comm_hosts_call {
	struct ndet_backend_call *launch;
	ncclComm_t nccl;
	struct ndet_backend_hosts view;
	struct ndet_hosts_plan plan;
	ncclResult_t nccl_result; /* the first NCCL failure: no more NCCL stages */
	/*
	 * Where its stage kernels go: the engine's stage stream (joins), or the call's
	 * own stream (an engine without one, one in another capture, a failed join).
	 */
	cudaStream_t stages_on;
	bool joins;       /* its stage stream holds work of this call: keep joining */
	bool join_failed; /* one WARN per call */
};

bool ndet_comm_hosts_capable(void)
{
	const struct ndet_backend *backend = ndet_comm_backend();
	const struct ndet_nccl *nccl = ndet_resolve_nccl();
	return backend->multi_host && backend->hosts_connect != NULL && nccl->ncclSend != NULL &&
	       nccl->ncclRecv != NULL && nccl->ncclGroupStart != NULL && nccl->ncclGroupEnd != NULL;
}

bool ndet_comm_hosts_engine(void *engine, struct ndet_backend_hosts *view)
{
	const struct ndet_backend *backend = ndet_comm_backend();
	return backend->multi_host && backend->hosts_view != NULL &&
	       backend->hosts_view(engine, view) == NDET_OK && view->nhosts > 1;
}

/*
 * The plan of a call: a function of the agreed facts only (dtype, op, H, g, the count
 * and the agreed staging), so every rank chunks alike.  A reduce-scatter runs the
 * all-reduce's schedule over its whole send buffer (g x H blocks of recvcount).
 */
static ndet_status_t ndet_comm_hosts_plan(struct ndet_comm_hosts_call *item)
{
	const struct ndet_backend_call *call = item->launch;
	const struct ndet_backend_hosts *view = &item->view;
	const struct ndet_hosts_params params = ndet_hosts_params_for(
		call->dtype, call->op, call->premul != NDET_PREMUL_NONE, call->coll, call->count,
		view->nhosts, view->local_ranks, view->staging_bytes);
	return ndet_hosts_plan_make(&params, &item->plan);
}

/* Does chunk `j` exist in this call (j may be negative or past the end)? */
static bool ndet_comm_hosts_has(const struct ndet_comm_hosts_call *item, int64_t j)
{
	return j >= 0 && (uint64_t)j < item->plan.chunks;
}

/*
 * Stage 1, 3 or 5 of chunk j for every call that has it, one backend batch.  A
 * call's first failure is its status; later stages still run (their peers wait for
 * them, and the NCCL stages between must match the peers').
 */
static void ndet_comm_hosts_ours(struct ndet_comm_hosts_call *items, int count,
				 struct ndet_backend_call *batch, ndet_hosts_stage_t stage,
				 int64_t j)
{
	int n = 0;
	for (int i = 0; i < count; i++) {
		if (!ndet_comm_hosts_has(&items[i], j))
			continue;
		batch[n] = *items[i].launch;
		batch[n].hosts_plan = &items[i].plan;
		batch[n].stream = items[i].stages_on;
		n++;
	}
	if (n == 0)
		return;
	ndet_comm_backend()->hosts_stage(batch, n, stage, (uint64_t)j);
	n = 0;
	for (int i = 0; i < count; i++) {
		if (!ndet_comm_hosts_has(&items[i], j))
			continue;
		if (items[i].launch->status == NDET_OK)
			items[i].launch->status = batch[n].status;
		n++;
	}
}

static void ndet_comm_hosts_nccl_failed(struct ndet_comm_hosts_call *item, ncclResult_t result)
{
	if (result == ncclSuccess || item->nccl_result != ncclSuccess)
		return;
	item->nccl_result = result;
	NDET_WARN("communicator %p: NCCL failed a send or receive between hosts of nccl-det's "
		  "%s: %d; the call fails with NCCL's result",
		  (void *)item->nccl, ndet_comm_coll_name(item->launch->coll), (int)result);
}

/* The sends (or receives) of one call's stage 2 or 4 of chunk j, as bytes. */
static void ndet_comm_hosts_post(const struct ndet_nccl *nccl, struct ndet_comm_hosts_call *item,
				 ndet_hosts_stage_t stage, int64_t j, bool send)
{
	const struct ndet_hosts_chunk chunk = ndet_hosts_chunk_at(&item->plan, (uint64_t)j);
	const struct ndet_hosts_rank rank = {
		.host = item->view.host, .local = item->view.local, .ranks = item->view.ranks};
	uint32_t n = 0;
	if (ndet_hosts_transfers(&item->plan, &chunk, &rank, stage, send, item->view.transfers,
				 &n) != NDET_OK) {
		ndet_comm_hosts_nccl_failed(item, ncclInternalError);
		return;
	}
	unsigned char *staging = item->view.staging;
	for (uint32_t k = 0; k < n; k++) {
		const struct ndet_hosts_transfer *t = &item->view.transfers[k];
		ncclResult_t result =
			send ? nccl->ncclSend(staging + t->staging_offset, (size_t)t->bytes,
					      ncclUint8, t->peer, item->nccl, item->launch->stream)
			     : nccl->ncclRecv(staging + t->staging_offset, (size_t)t->bytes,
					      ncclUint8, t->peer, item->nccl, item->launch->stream);
		ndet_comm_hosts_nccl_failed(item, result);
	}
	/*
	 * Then the status words, with every peer host whether or not a block moved: this
	 * rank's abort word out, each peer's into its place in the slot, which the next
	 * stage kernel checks (a failure here travels with the data).  Both sides post
	 * them after the blocks, so NCCL pairs each with its own.
	 */
	unsigned char *slot = staging + chunk.slot_offset;
	const struct ndet_backend_hosts *view = &item->view;
	for (int h = 0; h < view->nhosts && item->nccl_result == ncclSuccess; h++) {
		if (h == view->host)
			continue;
		const int peer = view->ranks[h * view->local_ranks + view->local];
		ncclResult_t result =
			send ? nccl->ncclSend(view->status_word, NDET_HOSTS_STATUS_BYTES, ncclUint8,
					      peer, item->nccl, item->launch->stream)
			     : nccl->ncclRecv(slot + ndet_hosts_status_at(&item->plan, stage, h),
					      NDET_HOSTS_STATUS_BYTES, ncclUint8, peer, item->nccl,
					      item->launch->stream);
		ndet_comm_hosts_nccl_failed(item, result);
	}
}

/* Does the call take part in the NCCL group of step j (stage 2(j) or 4(j - 1))? */
static bool ndet_comm_hosts_in_group(const struct ndet_comm_hosts_call *item, int64_t j)
{
	return ndet_comm_hosts_has(item, j) || ndet_comm_hosts_has(item, j - 1);
}

/*
 * The NCCL stages of step j, stage 2 of chunk j and stage 4 of chunk j - 1, of every
 * call that has them, in ONE NCCL group: a thread that drives several ranks must never
 * wait in one rank's group end for another rank it drives, and the two stages are
 * independent (their inputs were enqueued before, their buffers are disjoint), so
 * NCCL moves them at the same time.  Every rank posts in the same order (stage 2's
 * sends and receives, then stage 4's), so NCCL pairs the two transfers between two
 * ranks in order.  A call NCCL failed takes no part any more.
 */
static void ndet_comm_hosts_nccl(struct ndet_comm_hosts_call *items, int count, int64_t j)
{
	const struct ndet_nccl *nccl = ndet_resolve_nccl();
	bool any = false;
	for (int i = 0; i < count; i++)
		any = any || (ndet_comm_hosts_in_group(&items[i], j) &&
			      items[i].nccl_result == ncclSuccess);
	if (!any)
		return;
	ncclResult_t result = ncclInvalidUsage;
	if (nccl->ncclGroupStart == NULL || nccl->ncclGroupEnd == NULL || nccl->ncclSend == NULL ||
	    nccl->ncclRecv == NULL)
		result = ndet_status_to_nccl(
			ndet_resolve_missing(nccl->ncclSend == NULL ? NDET_NCCL_FN_ncclSend
								    : NDET_NCCL_FN_ncclGroupStart));
	else
		result = nccl->ncclGroupStart();
	if (result != ncclSuccess) {
		for (int i = 0; i < count; i++)
			if (ndet_comm_hosts_in_group(&items[i], j))
				ndet_comm_hosts_nccl_failed(&items[i], result);
		return;
	}
	for (int i = 0; i < count; i++) {
		if (!ndet_comm_hosts_in_group(&items[i], j) || items[i].nccl_result != ncclSuccess)
			continue;
		/* Each list in turn; after a failed post the call posts nothing more. */
		for (int list = 0; list < 4 && items[i].nccl_result == ncclSuccess; list++) {
			const int64_t chunk = list < 2 ? j : j - 1;
			if (ndet_comm_hosts_has(&items[i], chunk))
				ndet_comm_hosts_post(nccl, &items[i],
						     list < 2 ? NDET_HOSTS_STAGE_PARTIALS
							      : NDET_HOSTS_STAGE_RESULTS,
						     chunk, list % 2 == 0);
		}
	}
	result = nccl->ncclGroupEnd();
	for (int i = 0; i < count; i++)
		if (ndet_comm_hosts_in_group(&items[i], j))
			ndet_comm_hosts_nccl_failed(&items[i], result);
}

/*
 * Join each call's two streams (ndet_hosts_schedule_next's TO_K and TO_S; the
 * backend's hosts_order).  At BEGIN a call whose engine has no stage stream, or whose
 * stage stream is taken by another open capture, runs its stages on its own stream
 * (the same order is valid on one stream) and joins nothing.  A join that fails
 * fails the call; the backend has then poisoned the status word this rank sends and
 * aborted its kernels, so its peers fail too instead of taking what it sends.  The
 * rest of its stages run on its own stream, and the joins go on (the last one
 * orders the user's next work after everything on the stage stream).
 */
static void ndet_comm_hosts_join(struct ndet_comm_hosts_call *items, int count,
				 ndet_hosts_join_t join)
{
	const struct ndet_backend *backend = ndet_comm_backend();
	for (int i = 0; i < count; i++) {
		struct ndet_comm_hosts_call *item = &items[i];
		if (join == NDET_HOSTS_JOIN_BEGIN) {
			item->stages_on = item->launch->stream;
			item->joins = false;
			if (item->view.stage_stream == NULL || backend->hosts_order == NULL)
				continue;
		} else if (!item->joins) {
			continue;
		}
		const ndet_status_t status =
			backend->hosts_order(item->launch->engine, item->launch->stream, join);
		if (status == NDET_OK) {
			if (join == NDET_HOSTS_JOIN_BEGIN) {
				item->stages_on = item->view.stage_stream;
				item->joins = true;
			}
			continue;
		}
		if (join == NDET_HOSTS_JOIN_BEGIN && status == NDET_ERR_UNSUPPORTED)
			continue; /* the stages stay on the call's stream */
		item->stages_on = item->launch->stream;
		if (item->join_failed)
			continue;
		item->join_failed = true;
		NDET_WARN("communicator %p: cannot order nccl-det's stage stream with the "
			  "stream of its %s (%s): the call fails",
			  (void *)item->nccl, ndet_comm_coll_name(item->launch->coll),
			  ndet_status_name(status));
		if (item->launch->status == NDET_OK)
			item->launch->status = status;
	}
}

/*
 * The issue loop (doc/multihost-design.md, "Streams and the pipeline"): the schedule
 * of ndet_hosts_schedule_next over the most chunks of any call of the batch (a call
 * takes part in the stages and groups of its own chunks only).  Every input of a
 * stage is produced before it on one of the two streams, joined by the TO_K and TO_S
 * of the schedule, and a slot is reused only three chunks later, after its last
 * reader.
 */
static void ndet_comm_hosts_issue(struct ndet_comm_hosts_call *items, int count,
				  struct ndet_backend_call *batch)
{
	uint64_t chunks = 0;
	for (int i = 0; i < count; i++)
		if (items[i].plan.chunks > chunks)
			chunks = items[i].plan.chunks;
	struct ndet_hosts_schedule schedule = {.chunks = chunks};
	bool begun = false;
	for (;;) {
		const struct ndet_hosts_op op = ndet_hosts_schedule_next(&schedule);
		switch (op.kind) {
		case NDET_HOSTS_OP_TO_K:
			ndet_comm_hosts_join(items, count,
					     begun ? NDET_HOSTS_JOIN_TO_STAGES
						   : NDET_HOSTS_JOIN_BEGIN);
			begun = true;
			break;
		case NDET_HOSTS_OP_TO_S:
			/* The schedule's last operation is its last TO_S. */
			ndet_comm_hosts_join(items, count,
					     schedule.finished ? NDET_HOSTS_JOIN_END
							       : NDET_HOSTS_JOIN_TO_CALL);
			break;
		case NDET_HOSTS_OP_STAGE:
			ndet_comm_hosts_ours(items, count, batch, op.stage, (int64_t)op.chunk);
			break;
		case NDET_HOSTS_OP_GROUP:
			ndet_comm_hosts_nccl(items, count, (int64_t)op.chunk);
			break;
		default:
			return;
		}
	}
}

ncclResult_t ndet_comm_hosts_launch(struct ndet_backend_call *launches, const ncclComm_t *comms,
				    int count)
{
	ncclResult_t first = ncclSuccess;
	/* A batch of up to NDET_COMM_STACK calls allocates nothing. */
	struct ndet_comm_hosts_call items_here[NDET_COMM_STACK];
	struct ndet_backend_call batch_here[NDET_COMM_STACK];
	const bool here = count <= NDET_COMM_STACK;
	struct ndet_comm_hosts_call *items =
		here ? items_here : calloc((size_t)count, sizeof(*items));
	struct ndet_backend_call *batch = here ? batch_here : calloc((size_t)count, sizeof(*batch));
	if (here)
		memset(items_here, 0, sizeof(items_here));
	if (items == NULL || batch == NULL) {
		for (int i = 0; i < count; i++)
			launches[i].status = NDET_ERR_SYSTEM;
		goto out;
	}
	for (int i = 0; i < count; i++) {
		struct ndet_comm_hosts_call *item = &items[i];
		item->launch = &launches[i];
		item->nccl = comms[i];
		launches[i].status = NDET_OK;
		/* Every rank decides alike: the view and the plan are agreed facts. */
		if (!ndet_comm_hosts_engine(launches[i].engine, &item->view))
			launches[i].status = NDET_ERR_INTERNAL;
		else
			launches[i].status = ndet_comm_hosts_plan(item);
		if (launches[i].status != NDET_OK)
			item->plan.chunks = 0;
	}
	ndet_comm_hosts_issue(items, count, batch);
	for (int i = 0; i < count; i++) {
		if (items[i].nccl_result == ncclSuccess)
			continue;
		launches[i].status = NDET_ERR_NCCL;
		if (first == ncclSuccess)
			first = items[i].nccl_result;
	}
out:
	if (!here) {
		free(batch);
		free(items);
	}
	return first;
}

/* ---------------------------------------------------------------- connections */

/* The communicators whose connections between hosts one setup makes. */
struct ndet_comm_hosts_links {
	const ncclComm_t *comms;
	const struct ndet_backend_hosts *views;
	int count;
	ncclResult_t *results; /* per communicator */
};

/*
 * One byte to each rank of the same local index on the other hosts and one from each:
 * the peers of every send and receive of stages 2 and 4.  NCCL connects all its
 * channels to a peer at the first send or receive with it, whatever its size, and
 * does so inside the ncclGroupEnd of that call (NCCL_RUNTIME_CONNECT, on by default
 * since 2.22): after this group every connection the calls use exists.  One group
 * for every communicator of the setup, as for the stages.
 */
static ndet_status_t ndet_comm_hosts_connect_all(void *context)
{
	const struct ndet_comm_hosts_links *links = context;
	const struct ndet_nccl *nccl = ndet_resolve_nccl();
	ncclResult_t result = nccl->ncclGroupStart();
	for (int i = 0; i < links->count; i++)
		links->results[i] = result;
	if (result != ncclSuccess)
		return NDET_ERR_NCCL;
	for (int i = 0; i < links->count; i++) {
		const struct ndet_backend_hosts *view = &links->views[i];
		unsigned char *bytes = view->connect_buffer;
		for (int h = 0; h < view->nhosts && links->results[i] == ncclSuccess; h++) {
			if (h == view->host)
				continue;
			const int peer = view->ranks[h * view->local_ranks + view->local];
			result = nccl->ncclSend(bytes, 1, ncclUint8, peer, links->comms[i],
						view->connect_stream);
			if (result == ncclSuccess)
				result = nccl->ncclRecv(bytes + 1 + h, 1, ncclUint8, peer,
							links->comms[i], view->connect_stream);
			links->results[i] = result;
		}
	}
	result = nccl->ncclGroupEnd();
	ndet_status_t status = NDET_OK;
	for (int i = 0; i < links->count; i++) {
		if (links->results[i] == ncclSuccess)
			links->results[i] = result;
		if (links->results[i] != ncclSuccess)
			status = NDET_ERR_NCCL;
	}
	return status;
}

ncclResult_t ndet_comm_hosts_connect(void *const engines[], const ncclComm_t comms[],
				     ncclResult_t results[], int count)
{
	const struct ndet_backend *backend = ndet_comm_backend();
	/* Up to NDET_COMM_STACK communicators allocate nothing: none drops out. */
	struct ndet_backend_hosts views_here[NDET_COMM_STACK];
	ncclComm_t linked_here[NDET_COMM_STACK];
	ncclResult_t linked_results_here[NDET_COMM_STACK];
	int index_here[NDET_COMM_STACK];
	const bool here = count <= NDET_COMM_STACK;
	const size_t slots = (size_t)(count > 0 ? count : 1);
	struct ndet_backend_hosts *views = here ? views_here : calloc(slots, sizeof(*views));
	ncclComm_t *linked = here ? linked_here : calloc(slots, sizeof(*linked));
	ncclResult_t *linked_results =
		here ? linked_results_here : calloc(slots, sizeof(*linked_results));
	int *index = here ? index_here : calloc(slots, sizeof(*index));
	ncclResult_t first = ncclSuccess;
	int n = 0;
	for (int i = 0; i < count; i++)
		results[i] = ncclSuccess;
	if (views == NULL || linked == NULL || linked_results == NULL || index == NULL) {
		first = ncclSystemError;
		for (int i = 0; i < count; i++)
			results[i] = first;
		goto out;
	}
	for (int i = 0; i < count; i++) {
		if (engines[i] == NULL || !ndet_comm_hosts_engine(engines[i], &views[n]))
			continue;
		if (views[n].connect_buffer == NULL || !ndet_comm_hosts_capable()) {
			results[i] = ncclInternalError;
			continue;
		}
		linked[n] = comms[i];
		index[n++] = i;
	}
	if (n > 0) {
		struct ndet_comm_hosts_links links = {linked, views, n, linked_results};
		(void)backend->hosts_connect(ndet_comm_hosts_connect_all, &links);
		for (int k = 0; k < n; k++) {
			results[index[k]] = linked_results[k];
			if (linked_results[k] == ncclSuccess)
				NDET_INFO(NDET_SUBSYS_SETUP,
					  "communicator %p: connected to the %d ranks of its local "
					  "index on other hosts",
					  (void *)linked[k], views[k].nhosts - 1);
		}
	}
	for (int i = 0; i < count; i++) {
		if (results[i] == ncclSuccess)
			continue;
		NDET_WARN("communicator %p: NCCL failed nccl-det's connections between hosts at "
			  "setup: %d; its calls fail with NCCL's error",
			  (void *)comms[i], (int)results[i]);
		if (first == ncclSuccess)
			first = results[i];
	}
out:
	if (!here) {
		free(index);
		free(linked_results);
		free(linked);
		free(views);
	}
	return first;
}
