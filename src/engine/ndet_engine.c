/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Creating engines (see ndet_engine.h): the group entry point checks each member's
 * configuration, starts its engine (private stream, exchange buffer) and runs the
 * setup protocol over all of them (ndet_engine_setup.c); ndet_engine_create does
 * the same for one engine through a plain all-gather.  The engine's memory is in
 * ndet_engine_pool.c, launches in ndet_engine_launch.c, errors and teardown in
 * ndet_engine_teardown.c.
 */
#include "config.h"

#include "engine/ndet_engine.h"
#include "engine/ndet_engine_internal.h"

#include <stdlib.h>

#include "engine/ndet_cuda.h"
#include "kernels/ndet_kernels.h"
#include "common/ndet_log.h"
#include "protocol/ndet_pool_layout.h"
#include "protocol/ndet_setup.h"

/* ---------------------------------------------------------------- creation */

static void ndet_engine_set_verdict(struct ndet_setup_verdict *verdict,
				    ndet_verdict_reason_t reason, int rank, uint32_t detail)
{
	verdict->reason = reason;
	verdict->offending_rank = rank;
	verdict->detail = detail;
}

static bool ndet_engine_config_valid(const struct ndet_engine_config *config)
{
	return config->nranks >= 1 && config->rank >= 0 && config->rank < config->nranks &&
	       config->nranks <= 4096 && config->max_blocks >= 1 &&
	       config->max_blocks <= NDET_KERNEL_MAX_BLOCKS;
}

/*
 * What an engine needs before the first exchange: its private stream and the
 * exchange buffer.  Device memory first; pinned host memory (which NCCL can DMA
 * from as well) when the device is full, since a rank that cannot exchange at all
 * would leave its peers waiting in round one.
 */
static ndet_status_t ndet_engine_start(const struct ndet_engine_member *member,
				       ndet_engine_exchange_fn exchange,
				       struct ndet_engine **engine_out)
{
	ndet_status_t status = NDET_OK;
	struct ndet_engine *engine = calloc(1, sizeof(*engine));
	if (engine == NULL)
		return NDET_ERR_SYSTEM;
	engine->config = member->config;
	engine->exchange = exchange;
	engine->exchange_context = member->exchange_context;
	engine->barrier_words = calloc((size_t)member->config.nranks, NDET_SETUP_AGREE_BYTES);
	if (engine->barrier_words == NULL) {
		free(engine);
		return NDET_ERR_SYSTEM;
	}
	if (!ndet_engine_use_device(engine)) {
		status = NDET_ERR_CUDA;
		goto fail;
	}
	NDET_CUDA_CHECK_GOTO(
		cudaStreamCreateWithFlags(&engine->setup_stream, cudaStreamNonBlocking), status,
		fail);
	engine->exchange_bytes =
		sizeof(struct ndet_setup_payload) * (size_t)(member->config.nranks + 1);
	cudaError_t err = ndet_engine_malloc(&engine->exchange_buffer, engine->exchange_bytes);
	if (err != cudaSuccess) {
		(void)cudaGetLastError();
		engine->exchange_buffer = NULL;
		engine->exchange_pinned = true;
		NDET_CUDA_CHECK_GOTO(
			ndet_engine_host_alloc(&engine->exchange_buffer, engine->exchange_bytes),
			status, fail);
	}
	*engine_out = engine;
	return NDET_OK;
fail:
	ndet_engine_free_all(engine);
	return status;
}

void ndet_engine_create_group(struct ndet_engine_member *members, int count,
			      ndet_engine_exchange_fn exchange)
{
	const size_t slots = (size_t)(count > 0 ? count : 1);
	struct ndet_setup_member *setup = calloc(slots, sizeof(*setup));
	struct ndet_engine **started = calloc(slots, sizeof(*started));
	struct ndet_engine_caller caller;
	int taking_part = 0;

	for (int i = 0; i < count; i++) {
		members[i].engine = NULL;
		members[i].agreed_flags = 0;
		ndet_engine_set_verdict(&members[i].verdict, NDET_VERDICT_OK, -1, 0);
		members[i].status = NDET_OK;
		if (!ndet_engine_config_valid(&members[i].config) || exchange == NULL)
			members[i].status = NDET_ERR_INVALID_ARGUMENT;
		else if (setup == NULL || started == NULL)
			members[i].status = NDET_ERR_SYSTEM;
	}
	if (setup == NULL || started == NULL)
		goto out;

	ndet_engine_caller_save(&caller);
	for (int i = 0; i < count; i++) {
		if (members[i].status != NDET_OK)
			continue;
		members[i].status = ndet_engine_start(&members[i], exchange, &started[i]);
		if (members[i].status != NDET_OK)
			NDET_WARN("rank %d: cannot prepare the setup exchange (%s), and its "
				  "peers wait for it in the first setup exchange: out of memory, "
				  "its communicator fails; a CUDA failure passes its calls to NCCL",
				  members[i].config.rank, ndet_status_name(members[i].status));
	}
	/*
	 * This thread's other ranks of a communicator whose rank could not start would
	 * exchange without it, forever: they leave too (ndet_exchange_may_share).  Up to
	 * NDET_SETUP_STACK members this allocates nothing; out of memory beyond, every
	 * member leaves where any could not start.
	 */
	struct ndet_exchange_place places_here[NDET_SETUP_STACK];
	bool leaves_here[NDET_SETUP_STACK];
	const bool here = count <= NDET_SETUP_STACK;
	struct ndet_exchange_place *places = here ? places_here : calloc(slots, sizeof(*places));
	bool *leaves = here ? leaves_here : calloc(slots, sizeof(*leaves));
	const bool known = places != NULL && leaves != NULL;
	bool any = false;
	for (int i = 0; i < count; i++) {
		const bool failed = members[i].status != NDET_OK &&
				    members[i].status != NDET_ERR_INVALID_ARGUMENT;
		any = any || failed;
		if (known) {
			leaves[i] = failed;
			places[i] = ndet_engine_place(&members[i].config);
		}
	}
	if (known)
		ndet_exchange_leave_together(places, leaves, count);
	for (int k = 0; any && k < count; k++) {
		if (members[k].status != NDET_OK || (known && !leaves[k]))
			continue;
		NDET_WARN("rank %d: leaves the setup with a rank of its communicator that could "
			  "not start",
			  members[k].config.rank);
		ndet_engine_free_all(started[k]);
		started[k] = NULL;
		members[k].status = NDET_ERR_REMOTE;
	}
	if (!here) {
		free(leaves);
		free(places);
	}
	for (int i = 0; i < count; i++) {
		if (started[i] == NULL)
			continue;
		setup[taking_part].context = started[i];
		setup[taking_part].rank = members[i].config.rank;
		setup[taking_part].nranks = members[i].config.nranks;
		setup[taking_part].device = members[i].config.cuda_device;
		setup[taking_part].comm_identity = members[i].config.comm_identity;
		taking_part++;
	}
	ndet_setup_run(setup, taking_part, &ndet_engine_setup_ops, ndet_engine_setup_allgather,
		       NULL);

	for (int i = 0, k = 0; i < count; i++) {
		if (started[i] == NULL)
			continue;
		const struct ndet_setup_member *result = &setup[k++];
		members[i].status = result->status;
		members[i].verdict = result->verdict;
		members[i].agreed_flags = result->agreed_flags;
		if (result->status != NDET_OK) {
			/* Released by the protocol. */
			NDET_INFO(NDET_SUBSYS_SETUP, "rank %d: no engine: %s (%s, rank %d)",
				  members[i].config.rank, ndet_status_name(result->status),
				  ndet_verdict_reason_name(result->verdict.reason),
				  result->verdict.offending_rank);
			continue;
		}
		struct ndet_engine *engine = started[i];
		NDET_INFO(NDET_SUBSYS_SETUP,
			  "rank %d/%d: engine ready on device %d, local index %d of %d on this "
			  "host (%d hosts), pool %llu bytes, %d lanes of %llu bytes",
			  engine->config.rank, engine->config.nranks, engine->config.cuda_device,
			  engine->local.index, engine->local.count, engine->local.nhosts,
			  (unsigned long long)engine->pool_bytes,
			  (int)ndet_pool_lanes(&engine->local_config),
			  (unsigned long long)engine->lane_bytes);
		members[i].engine = engine;
	}
	ndet_engine_caller_restore(&caller);
out:
	free(started);
	free(setup);
}

/* ndet_engine_create's single-member callback, as a group exchange. */
struct ndet_engine_single_exchange {
	ndet_engine_allgather_fn allgather;
	void *context;
};

static ndet_status_t ndet_engine_single_exchange(void *const contexts[], int count,
						 const void *const device_sends[],
						 void *const device_recvs[], size_t bytes,
						 const cudaStream_t streams[],
						 ndet_status_t results[])
{
	ndet_status_t first = NDET_OK;
	(void)streams;
	for (int i = 0; i < count; i++) {
		const struct ndet_engine_single_exchange *single = contexts[i];
		results[i] =
			single->allgather(single->context, device_sends[i], device_recvs[i], bytes);
		if (results[i] != NDET_OK && first == NDET_OK)
			first = results[i];
	}
	return first;
}

ndet_status_t ndet_engine_create(const struct ndet_engine_config *config,
				 ndet_engine_allgather_fn allgather, void *context,
				 struct ndet_engine **engine_out,
				 struct ndet_setup_verdict *verdict)
{
	*engine_out = NULL;
	ndet_engine_set_verdict(verdict, NDET_VERDICT_OK, -1, 0);
	if (allgather == NULL)
		return NDET_ERR_INVALID_ARGUMENT;
	struct ndet_engine_single_exchange *single = calloc(1, sizeof(*single));
	if (single == NULL)
		return NDET_ERR_SYSTEM;
	single->allgather = allgather;
	single->context = context;
	struct ndet_engine_member member = {.config = *config, .exchange_context = single};
	ndet_engine_create_group(&member, 1, ndet_engine_single_exchange);
	*verdict = member.verdict;
	if (member.status != NDET_OK) {
		free(single);
		return member.status;
	}
	/* The destroy barrier still calls through it. */
	member.engine->owned_context = single;
	*engine_out = member.engine;
	return NDET_OK;
}
