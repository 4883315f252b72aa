/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * ndet_gpu_test hosts LAYOUT [quick|full]: the multi-host schedule on one GPU, ranks
 * as threads of this process, rank r on test host LAYOUT[r] (NCCL_DET_TEST_HOST of
 * its engine: "AABB" is 2 hosts of 2, "ABAB" the same hosts interleaved).  Every call
 * runs the divert layer's issue order through the CUDA backend's stages 1, 3 and 5
 * (its hosts_view and hosts_stage); stages 2 and 4, NCCL's grouped sends and receives
 * in production, are played by device copies between the ranks' stagings, with the
 * rendezvous NCCL gives them: a receiver copies once the sender's stream reached the
 * stage, and the sender goes on once every receiver copied.  The results are checked
 * bit for bit against the CPU reference of the layout (ndet_reference_*_hosts):
 * every dtype this GPU runs, every op and PreMulSum, the three collectives, sizes
 * from one element to many chunks (a small staging), odd buffer offsets.  A few calls
 * run while each rank's stage stream is held by another open capture: their stages
 * must go to the call's own stream, with the same bits.
 *
 * ndet_gpu_test hosts LAYOUT quick|full one-launch: the same calls (without the busy
 * stage stream) with each stage of every rank in one launch
 * (ndet_engine_hosts_stage_all_ranks), for compute-sanitizer, which serialises
 * separate launches and so could never run the ranks of one host side by side.  The
 * network's copies run as above, on each rank's stream, and every stream is idle
 * before a stage starts and after it ended (the stages never overlap the copies).
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ndet_dtype.h"
#include "engine/ndet_engine.h"
#include "protocol/ndet_backend.h"
#include "protocol/ndet_hosts_plan.h"
#include "protocol/ndet_setup.h"
#include "reference/ndet_reference.h"
#include "test/gpu/ndet_gpu_common.h"
#include "test/gpu/ndet_gpu_hosts.h"
#include "test/gpu/ndet_gpu_sizes.h"

struct hosts_world {
	const char *layout;
	int nranks;
	bool quick;
	bool one_launch;             /* every rank's stage in one launch (compute-sanitizer) */
	int host_of[NDET_MAX_RANKS]; /* hosts numbered by their lowest rank */
	pthread_barrier_t barrier;
	pthread_mutex_t lock;
	unsigned long long checks, failures;
	/* The setup's exchange. */
	const void *sends[NDET_MAX_RANKS];
	/* Published by each rank for the others. */
	struct ndet_backend_hosts view[NDET_MAX_RANKS];
	cudaEvent_t reached[NDET_MAX_RANKS]; /* its stream reached a network stage */
	cudaEvent_t copied[NDET_MAX_RANKS];  /* it copied what it receives in that stage */
	const void *inputs[NDET_MAX_RANKS];  /* its send buffer's host copy */
	/* One-launch mode: every rank's engine and call, and the stage's outcome. */
	struct ndet_engine *engines[NDET_MAX_RANKS];
	struct ndet_engine_call calls[NDET_MAX_RANKS];
	ndet_status_t stage_status;
	unsigned char scalars[NDET_MAX_RANKS * 8];
};

struct hosts_rank {
	struct hosts_world *world;
	int rank;
	struct ndet_engine *engine;
	cudaStream_t stream;
	cudaStream_t stages_on; /* the engine's stage stream, or `stream` (hosts_run_call) */
	bool on_own_stream;     /* the last call's stages ran on `stream` */
	unsigned long long checks, failures;
};

static void hosts_barrier(struct hosts_world *world)
{
	pthread_barrier_wait(&world->barrier);
}

static ndet_status_t hosts_allgather(void *context, const void *send, void *recv, size_t bytes)
{
	struct hosts_rank *me = context;
	struct hosts_world *world = me->world;
	world->sends[me->rank] = send;
	hosts_barrier(world);
	for (int r = 0; r < world->nranks; r++)
		if (cudaMemcpyAsync((char *)recv + (size_t)r * bytes, world->sends[r], bytes,
				    cudaMemcpyDeviceToDevice, 0) != cudaSuccess)
			return NDET_ERR_CUDA;
	if (cudaStreamSynchronize(0) != cudaSuccess)
		return NDET_ERR_CUDA;
	hosts_barrier(world);
	return NDET_OK;
}

/* Where global rank r sits, as ndet_hosts_transfers takes it. */
static struct ndet_hosts_rank hosts_rank_of(const struct hosts_world *world, int r)
{
	const struct ndet_backend_hosts *v = &world->view[r];
	return (struct ndet_hosts_rank){.host = v->host, .local = v->local, .ranks = v->ranks};
}

static void hosts_fail(struct hosts_rank *me, const char *what)
{
	me->failures++;
	fprintf(stderr, "FAIL rank %d (%s): %s\n", me->rank, me->world->layout, what);
}

/*
 * Stage 2 or 4 of chunk j, as NCCL would run it: every receive copies from the
 * sender's staging once the sender's stream reached this point; every sender's
 * stream waits until each of its receivers copied.
 */
static void hosts_network(struct hosts_rank *me, const struct ndet_hosts_plan *plan,
			  ndet_hosts_stage_t stage, int64_t j)
{
	struct hosts_world *world = me->world;
	if (j < 0 || (uint64_t)j >= plan->chunks)
		return;
	const struct ndet_hosts_chunk chunk = ndet_hosts_chunk_at(plan, (uint64_t)j);
	const struct ndet_hosts_rank mine = hosts_rank_of(world, me->rank);
	struct ndet_hosts_transfer list[NDET_MAX_RANKS], theirs[NDET_MAX_RANKS];
	uint32_t n = 0, m = 0;
	GPU_CHECK(cudaEventRecord(world->reached[me->rank], me->stream));
	hosts_barrier(world);
	if (ndet_hosts_transfers(plan, &chunk, &mine, stage, false, list, &n) != NDET_OK)
		hosts_fail(me, "ndet_hosts_transfers (receives)");
	for (uint32_t k = 0; k < n; k++) {
		const int peer = list[k].peer;
		const struct ndet_hosts_rank sender = hosts_rank_of(world, peer);
		if (ndet_hosts_transfers(plan, &chunk, &sender, stage, true, theirs, &m) != NDET_OK)
			hosts_fail(me, "ndet_hosts_transfers (the sender's)");
		const struct ndet_hosts_transfer *match = NULL;
		for (uint32_t i = 0; i < m; i++)
			if (theirs[i].peer == me->rank)
				match = &theirs[i];
		if (match == NULL || match->bytes != list[k].bytes ||
		    match->offset != list[k].offset) {
			hosts_fail(me, "a receive without its matching send");
			continue;
		}
		GPU_CHECK(cudaStreamWaitEvent(me->stream, world->reached[peer], 0));
		GPU_CHECK(cudaMemcpyAsync(
			(char *)world->view[me->rank].staging + list[k].staging_offset,
			(const char *)world->view[peer].staging + match->staging_offset,
			list[k].bytes, cudaMemcpyDeviceToDevice, me->stream));
	}
	/* The status words, as the divert layer sends them: every peer host's abort word. */
	const struct ndet_backend_hosts *view = &world->view[me->rank];
	char *slot = (char *)view->staging + chunk.slot_offset;
	for (int h = 0; h < view->nhosts; h++) {
		if (h == view->host)
			continue;
		const int peer = view->ranks[h * view->local_ranks + view->local];
		GPU_CHECK(cudaStreamWaitEvent(me->stream, world->reached[peer], 0));
		GPU_CHECK(cudaMemcpyAsync(slot + ndet_hosts_status_at(plan, stage, h),
					  world->view[peer].status_word, NDET_HOSTS_STATUS_BYTES,
					  cudaMemcpyDeviceToDevice, me->stream));
	}
	GPU_CHECK(cudaEventRecord(world->copied[me->rank], me->stream));
	hosts_barrier(world);
	if (ndet_hosts_transfers(plan, &chunk, &mine, stage, true, list, &n) != NDET_OK)
		hosts_fail(me, "ndet_hosts_transfers (sends)");
	for (uint32_t k = 0; k < n; k++)
		GPU_CHECK(cudaStreamWaitEvent(me->stream, world->copied[list[k].peer], 0));
	/* Every peer host read this rank's status word. */
	for (int h = 0; h < view->nhosts; h++)
		if (h != view->host)
			GPU_CHECK(cudaStreamWaitEvent(
				me->stream,
				world->copied[view->ranks[h * view->local_ranks + view->local]],
				0));
}

/*
 * One-launch mode: rank 0 runs stage `stage` of chunk j for every rank once every
 * rank's stream is idle (its inputs, the network's copies, are there); the stage has
 * run when this returns on every rank.
 */
static void hosts_ours_one_launch(struct hosts_rank *me, struct ndet_backend_call *call,
				  const struct ndet_hosts_plan *plan, ndet_hosts_stage_t stage,
				  uint64_t j)
{
	struct hosts_world *world = me->world;
	GPU_CHECK(cudaStreamSynchronize(me->stream));
	world->calls[me->rank] = ndet_engine_call_of(call);
	hosts_barrier(world);
	if (me->rank == 0)
		world->stage_status = ndet_engine_hosts_stage_all_ranks(
			world->engines, world->nranks, world->calls, plan, (int)stage, j,
			ndet_kernel_hosts_stage_all_ranks, me->stream);
	hosts_barrier(world);
	if (world->stage_status != NDET_OK && call->status == NDET_OK)
		call->status = world->stage_status;
}

/* One of our stages for this rank's call, then a barrier (the ranks share queues). */
static void hosts_ours(struct hosts_rank *me, struct ndet_backend_call *call,
		       const struct ndet_hosts_plan *plan, ndet_hosts_stage_t stage, int64_t j)
{
	if (j >= 0 && (uint64_t)j < plan->chunks) {
		if (me->world->one_launch) {
			hosts_ours_one_launch(me, call, plan, stage, (uint64_t)j);
			return;
		}
		struct ndet_backend_call batch = *call;
		batch.stream = me->stages_on; /* as the divert layer does */
		ndet_backend_cuda.hosts_stage(&batch, 1, stage, (uint64_t)j);
		if (batch.status != NDET_OK && call->status == NDET_OK)
			call->status = batch.status;
	}
	hosts_barrier(me->world);
}

/* The divert layer's issue order (src/divert/ndet_comm_hosts.c). */
static ndet_status_t hosts_run_call(struct hosts_rank *me, struct ndet_backend_call *call)
{
	struct ndet_hosts_plan plan;
	const struct ndet_backend_hosts *view = &me->world->view[me->rank];
	const struct ndet_hosts_params params = ndet_hosts_params_for(
		call->dtype, call->op, call->premul != NDET_PREMUL_NONE, call->coll, call->count,
		view->nhosts, view->local_ranks, view->staging_bytes);
	if (ndet_hosts_plan_make(&params, &plan) != NDET_OK)
		return NDET_ERR_INVALID_ARGUMENT;
	call->hosts_plan = &plan;
	call->status = NDET_OK;
	/*
	 * Stages on the engine's stage stream, "NCCL" on the call's, joined by events; as
	 * the divert layer (ndet_comm_hosts_join): a stage stream another open capture
	 * holds leaves the stages on the call's stream, with no joins.
	 */
	struct ndet_hosts_schedule schedule = {.chunks = plan.chunks};
	bool begun = false, joins = false;
	me->stages_on = me->stream;
	for (;;) {
		const struct ndet_hosts_op op = ndet_hosts_schedule_next(&schedule);
		if (op.kind == NDET_HOSTS_OP_DONE)
			break;
		if (op.kind == NDET_HOSTS_OP_TO_K || op.kind == NDET_HOSTS_OP_TO_S) {
			const ndet_hosts_join_t join =
				op.kind == NDET_HOSTS_OP_TO_K
					? (begun ? NDET_HOSTS_JOIN_TO_STAGES
						 : NDET_HOSTS_JOIN_BEGIN)
					: (schedule.finished ? NDET_HOSTS_JOIN_END
							     : NDET_HOSTS_JOIN_TO_CALL);
			begun = true;
			if (view->stage_stream == NULL || me->world->one_launch ||
			    (join != NDET_HOSTS_JOIN_BEGIN && !joins))
				continue;
			const ndet_status_t st =
				ndet_backend_cuda.hosts_order(call->engine, me->stream, join);
			if (st == NDET_OK && join == NDET_HOSTS_JOIN_BEGIN) {
				me->stages_on = view->stage_stream;
				joins = true;
			} else if (st != NDET_OK &&
				   !(join == NDET_HOSTS_JOIN_BEGIN && st == NDET_ERR_UNSUPPORTED)) {
				/* A failed join fails the call; the rest on the call's stream. */
				me->stages_on = me->stream;
				if (call->status == NDET_OK)
					call->status = st;
			}
		} else if (op.kind == NDET_HOSTS_OP_STAGE) {
			hosts_ours(me, call, &plan, op.stage, (int64_t)op.chunk);
		} else {
			hosts_network(me, &plan, NDET_HOSTS_STAGE_PARTIALS, (int64_t)op.chunk);
			hosts_network(me, &plan, NDET_HOSTS_STAGE_RESULTS, (int64_t)op.chunk - 1);
		}
	}
	call->hosts_plan = NULL;
	me->on_own_stream = view->stage_stream == NULL || me->world->one_launch || !joins;
	return call->status;
}

struct hosts_case {
	ndet_dtype_t dtype;
	ndet_op_t op; /* NDET_OP_SUM with premul */
	bool premul;
	ndet_coll_t coll;
	size_t count; /* reduce-scatter: recvcount */
	size_t offset;
	int root;
	bool busy; /* the stage stream held by another open capture during the call */
};

/* One case on every rank: data, the call, the check against the reference. */
static void hosts_case_run(struct hosts_rank *me, const struct hosts_case *c, uint64_t seed)
{
	struct hosts_world *world = me->world;
	const int n = world->nranks;
	const size_t es = ndet_dtype_size(c->dtype);
	const size_t in_count = c->coll == NDET_COLL_REDUCE_SCATTER ? c->count * n : c->count;
	const size_t out_count = c->count;
	const bool writes = c->coll != NDET_COLL_REDUCE || c->root == me->rank;
	unsigned char *input = malloc(in_count * es + 1), *got = malloc(out_count * es + 1),
		      *want = malloc(out_count * es + 1), *sentinel = malloc(out_count * es + 1);
	char *send = NULL, *recv = NULL;
	if (input == NULL || got == NULL || want == NULL || sentinel == NULL)
		gpu_die();
	gpu_fill(c->dtype, input, in_count, seed * 131 + (uint64_t)me->rank,
		 c->op == NDET_OP_MIN || c->op == NDET_OP_MAX);
	gpu_fill(c->dtype, sentinel, out_count, seed * 131 + 77, false);
	GPU_CHECK(cudaMalloc((void **)&send, (in_count + c->offset) * es + 16));
	GPU_CHECK(cudaMalloc((void **)&recv, (out_count + c->offset) * es + 16));
	gpu_upload(send + c->offset * es, input, in_count * es, me->stream);
	gpu_upload(recv + c->offset * es, sentinel, out_count * es, me->stream);
	world->inputs[me->rank] = input;
	uint64_t scalar_bits = 0;
	if (c->premul) {
		scalar_bits = ndet_reference_element_bits(c->dtype, 0.75 + 0.125 * me->rank);
		memcpy(world->scalars + (size_t)me->rank * es, &scalar_bits, es);
	}
	hosts_barrier(world);

	struct ndet_backend_call call = {
		.engine = me->engine,
		.sendbuff = send + c->offset * es,
		.recvbuff = recv + c->offset * es,
		.count = c->count,
		.dtype = c->dtype,
		.op = c->op,
		.stream = me->stream,
		.coll = c->coll,
		.root = c->root,
		.premul = c->premul ? NDET_PREMUL_HOST : NDET_PREMUL_NONE,
		.scalar_bits = scalar_bits,
	};
	/*
	 * busy: a capture of this rank's own on another stream takes the stage stream in
	 * (relaxed, so that the rest of the process may go on), and holds it until the
	 * call was issued; the graph is never launched.
	 */
	cudaStream_t stage_stream = world->view[me->rank].stage_stream;
	cudaStream_t holder = NULL;
	cudaEvent_t fork = NULL, rejoin = NULL;
	if (c->busy && stage_stream != NULL) {
		GPU_CHECK(cudaStreamCreateWithFlags(&holder, cudaStreamNonBlocking));
		GPU_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
		GPU_CHECK(cudaEventCreateWithFlags(&rejoin, cudaEventDisableTiming));
		GPU_CHECK(cudaStreamBeginCapture(holder, cudaStreamCaptureModeRelaxed));
		GPU_CHECK(cudaEventRecord(fork, holder));
		GPU_CHECK(cudaStreamWaitEvent(stage_stream, fork, 0));
	}
	ndet_status_t status = hosts_run_call(me, &call);
	const bool on_own_stream = me->on_own_stream;
	if (holder != NULL) {
		cudaGraph_t graph = NULL;
		GPU_CHECK(cudaEventRecord(rejoin, stage_stream));
		GPU_CHECK(cudaStreamWaitEvent(holder, rejoin, 0));
		GPU_CHECK(cudaStreamEndCapture(holder, &graph));
		GPU_CHECK(cudaGraphDestroy(graph));
		GPU_CHECK(cudaEventDestroy(fork));
		GPU_CHECK(cudaEventDestroy(rejoin));
		GPU_CHECK(cudaStreamDestroy(holder));
	}
	GPU_CHECK(cudaStreamSynchronize(me->stream));
	uint32_t kernel_error = 0;
	ndet_status_t async = ndet_engine_error(me->engine, &kernel_error);
	GPU_CHECK(cudaMemcpy(got, recv + c->offset * es, out_count * es, cudaMemcpyDeviceToHost));

	/* The reference of this layout. */
	ndet_status_t ref = NDET_OK;
	if (!writes)
		memcpy(want, sentinel, out_count * es);
	else if (c->premul)
		ref = ndet_reference_premulsum_hosts(world->inputs, world->scalars, world->host_of,
						     n, want, out_count, c->dtype);
	else if (c->coll == NDET_COLL_REDUCE_SCATTER)
		ref = ndet_reference_reduce_scatter_hosts(world->inputs, world->host_of, n,
							  me->rank, want, out_count, c->dtype,
							  c->op);
	else
		ref = ndet_reference_allreduce_hosts(world->inputs, world->host_of, n, want,
						     out_count, c->dtype, c->op);
	me->checks++;
	size_t first = 0, bad = 0;
	/* Where the stages ran: the stage stream, unless another capture held it. */
	const bool stream_ok =
		on_own_stream == (c->busy || stage_stream == NULL || world->one_launch);
	if (status != NDET_OK || async != NDET_OK || ref != NDET_OK || !stream_ok ||
	    (bad = gpu_compare(c->dtype, got, want, out_count, &first)) != 0) {
		char what[320];
		snprintf(what, sizeof(what),
			 "%s %s%s %s count %zu offset %zu root %d%s: status %s, kernel error %u, "
			 "reference %s, %zu elements differ (first %zu)%s",
			 c->coll == NDET_COLL_REDUCE_SCATTER ? "reduce-scatter"
			 : c->coll == NDET_COLL_REDUCE       ? "reduce"
							     : "all-reduce",
			 ndet_dtype_name(c->dtype), c->premul ? " premul" : "", ndet_op_name(c->op),
			 c->count, c->offset, c->root, c->busy ? " (stage stream busy)" : "",
			 ndet_status_name(status), kernel_error, ndet_status_name(ref), bad, first,
			 stream_ok ? ""
			 : on_own_stream
				 ? "; the stages ran on the call's stream"
				 : "; the stages ran on the stage stream another capture held");
		hosts_fail(me, what);
	}
	hosts_barrier(world);
	GPU_CHECK(cudaFree(send));
	GPU_CHECK(cudaFree(recv));
	free(input);
	free(got);
	free(want);
	free(sentinel);
}

/* The cases, the same list on every rank. */
static void hosts_matrix(struct hosts_rank *me)
{
	struct hosts_world *world = me->world;
	const int n = world->nranks;
	static const ndet_op_t ops[] = {NDET_OP_SUM, NDET_OP_AVG, NDET_OP_PROD, NDET_OP_MIN,
					NDET_OP_MAX};
	/* One element to several chunks of the small staging (test_config). */
	const size_t counts_full[] = {1, 7, 1000, 65536 + 13, 300001, 2100007};
	const size_t counts_quick[] = {1, 7, 1000, 65536 + 13, 300001};
	const size_t *counts = world->quick ? counts_quick : counts_full;
	const size_t ncounts = world->quick ? sizeof(counts_quick) / sizeof(counts_quick[0])
					    : sizeof(counts_full) / sizeof(counts_full[0]);
	uint64_t seed = 1;
	for (int dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
		if (!gpu_dtype_selected((ndet_dtype_t)dtype))
			continue;
		for (size_t o = 0; o <= sizeof(ops) / sizeof(ops[0]); o++) {
			const bool premul = o == sizeof(ops) / sizeof(ops[0]);
			for (size_t k = 0; k < ncounts; k++) {
				/* Large counts: sum, avg and PreMulSum carry the chunking. */
				if (counts[k] > 70000 && !premul && ops[o] != NDET_OP_SUM &&
				    ops[o] != NDET_OP_AVG)
					continue;
				const struct hosts_case c = {
					.dtype = (ndet_dtype_t)dtype,
					.op = premul ? NDET_OP_SUM : ops[o],
					.premul = premul,
					.coll = NDET_COLL_ALLREDUCE,
					.count = counts[k],
					.offset = k % 2,
				};
				hosts_case_run(me, &c, seed++);
			}
		}
		/* Several chunks and one element while another capture holds the stage stream. */
		static const size_t busy_counts[] = {1, 300001};
		for (size_t k = 0;
		     k < sizeof(busy_counts) / sizeof(busy_counts[0]) && !world->one_launch; k++) {
			const struct hosts_case c = {.dtype = (ndet_dtype_t)dtype,
						     .op = k == 0 ? NDET_OP_SUM : NDET_OP_AVG,
						     .coll = NDET_COLL_ALLREDUCE,
						     .count = busy_counts[k],
						     .offset = 1 - k % 2,
						     .busy = true};
			hosts_case_run(me, &c, seed++);
		}
		/* Reduce-scatter (blocks of the all-reduce) and reduce to every other root. */
		static const size_t rs_counts[] = {1, 333, 40000};
		for (size_t k = 0; k < sizeof(rs_counts) / sizeof(rs_counts[0]); k++) {
			const struct hosts_case c = {.dtype = (ndet_dtype_t)dtype,
						     .op = k == 1 ? NDET_OP_AVG : NDET_OP_SUM,
						     .coll = NDET_COLL_REDUCE_SCATTER,
						     .count = rs_counts[k],
						     .offset = k % 2};
			hosts_case_run(me, &c, seed++);
		}
		for (int root = 0; root < n; root += (world->quick ? n - 1 : 1)) {
			const struct hosts_case c = {.dtype = (ndet_dtype_t)dtype,
						     .op = NDET_OP_SUM,
						     .coll = NDET_COLL_REDUCE,
						     .count = 5000 + (size_t)root,
						     .offset = (size_t)root % 2,
						     .root = root};
			hosts_case_run(me, &c, seed++);
			if (n == 1)
				break;
		}
	}
}

static void *hosts_thread(void *argument)
{
	struct hosts_rank *me = argument;
	struct hosts_world *world = me->world;
	GPU_CHECK(cudaSetDevice(0));
	GPU_CHECK(cudaStreamCreateWithFlags(&me->stream, cudaStreamNonBlocking));
	GPU_CHECK(cudaEventCreateWithFlags(&world->reached[me->rank], cudaEventDisableTiming));
	GPU_CHECK(cudaEventCreateWithFlags(&world->copied[me->rank], cudaEventDisableTiming));
	struct ndet_engine_config config;
	gpu_test_config(&config, me->rank, world->nranks);
	config.test_host[0] = world->layout[me->rank];
	config.test_host[1] = '\0';
	/* Small, so that the larger counts take several chunks and every slot. */
	const uint64_t least =
		ndet_hosts_min_staging_any(world->host_of[world->nranks - 1] + 1,
					   world->nranks / (world->host_of[world->nranks - 1] + 1));
	config.hosts_staging = least > (256u << 10) ? least : (256u << 10);
	struct ndet_setup_verdict verdict;
	ndet_status_t st = ndet_engine_create(&config, hosts_allgather, me, &me->engine, &verdict);
	if (st == NDET_OK)
		st = ndet_backend_cuda.hosts_view(me->engine, &world->view[me->rank]);
	if (st != NDET_OK) {
		fprintf(stderr, "rank %d: engine across hosts (%s): %s (verdict %d, rank %d)\n",
			me->rank, world->layout, ndet_status_name(st), verdict.reason,
			verdict.offending_rank);
		gpu_die();
	}
	world->engines[me->rank] = me->engine;
	hosts_barrier(world);
	hosts_matrix(me);
	ndet_engine_destroy(me->engine, true);
	pthread_mutex_lock(&world->lock);
	world->checks += me->checks;
	world->failures += me->failures;
	pthread_mutex_unlock(&world->lock);
	return NULL;
}

int gpu_run_hosts(const char *layout, bool quick, bool one_launch)
{
	struct hosts_world world = {.layout = layout,
				    .nranks = (int)strlen(layout),
				    .quick = quick,
				    .one_launch = one_launch};
	const int n = world.nranks;
	if (n < 2 || n > NDET_MAX_RANKS) {
		fprintf(stderr, "hosts: a layout of 2 to %d ranks, one letter each\n",
			NDET_MAX_RANKS);
		return 2;
	}
	/* Hosts by their lowest rank; every host as many ranks (the verdict's rule). */
	int nhosts = 0, size[NDET_MAX_RANKS] = {0};
	for (int r = 0; r < n; r++) {
		int h = -1;
		for (int q = 0; q < r && h < 0; q++)
			if (layout[q] == layout[r])
				h = world.host_of[q];
		world.host_of[r] = h >= 0 ? h : nhosts++;
		size[world.host_of[r]]++;
	}
	for (int h = 0; h < nhosts; h++)
		if (nhosts < 2 || size[h] != size[0]) {
			fprintf(stderr, "hosts: %s is not 2 or more hosts of as many ranks\n",
				layout);
			return 2;
		}
	/* The one-launch kernels: up to 8 ranks, and a build that has them. */
	if (one_launch && (n > 8 || ndet_kernel_all_ranks_load(0) != 0)) {
		fprintf(stderr, "hosts: one-launch takes up to 8 ranks and a build with the "
				"one-launch kernels\n");
		return 2;
	}
	ndet_setup_set_multi_host_for_testing(true);
	pthread_barrier_init(&world.barrier, NULL, (unsigned)n);
	pthread_mutex_init(&world.lock, NULL);
	pthread_t threads[NDET_MAX_RANKS];
	struct hosts_rank ranks[NDET_MAX_RANKS];
	for (int r = 0; r < n; r++) {
		ranks[r] = (struct hosts_rank){.world = &world, .rank = r};
		pthread_create(&threads[r], NULL, hosts_thread, &ranks[r]);
	}
	for (int r = 0; r < n; r++)
		pthread_join(threads[r], NULL);
	printf("SUMMARY ndet_gpu_test hosts %s (%d hosts of %d): %llu checks, %llu failed\n",
	       layout, nhosts, n / nhosts, world.checks, world.failures);
	return world.failures == 0 && world.checks > 0 ? 0 : 1;
}
