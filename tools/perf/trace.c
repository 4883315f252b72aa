/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * nccl-det-perf --trace: after a row, a few more calls with the kernels' trace on; the
 * last call's timeline of the first and last block of every rank, printed as the
 * events as they came and the time spent reaching each kind of event.  Eager calls,
 * or where graphs are the only mode (--modes graph) a graph of the row's -n calls
 * replayed PERF_TRACE_REPLAYS times: its last call shows a call in the steady state
 * of a graph, and the replays give medians.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>

#include "kernels/ndet_kernels.h"
#include "protocol/ndet_plan.h"
#include "common/ndet_dtype.h"
#include "tools/perf/perf.h"

static const char *perf_trace_name(unsigned code)
{
	static const char *const names[] = {
		[NDET_TRACE_START] = "start",
		[NDET_TRACE_OPENED] = "opened",
		[NDET_TRACE_SCATTERED] = "scattered",
		[NDET_TRACE_READY] = "ready",
		[NDET_TRACE_REDUCED] = "reduced",
		[NDET_TRACE_PEERS_DONE] = "peers-reduced",
		[NDET_TRACE_GATHERED] = "gathered",
		[NDET_TRACE_STEP] = "step",
		[NDET_TRACE_COPIED] = "copied",
		[NDET_TRACE_SYNCED] = "synced",
		[NDET_TRACE_END] = "end",
	};
	return code < sizeof(names) / sizeof(names[0]) && names[code] != NULL ? names[code] : "?";
}

/*
 * One block's timeline (ndet_kernels.h, NDET_TRACE_WORDS): the first events as they
 * came, then for each kind of event the time spent reaching it from the event
 * before (sum, count, mean), in microseconds.
 */
static void perf_print_trace(int rank, const char *which, const uint64_t *t, uint64_t base)
{
	const uint64_t events = t[0] < NDET_TRACE_WORDS ? t[0] : NDET_TRACE_WORDS - 1;
	if (events < 2) {
		printf("#   trace rank %d %s block: %llu events (not traced)\n", rank, which,
		       (unsigned long long)events);
		return;
	}
	const uint64_t mask = (1ull << 56) - 1;
	const uint64_t t0 = t[1] & mask;
	const double span = (double)((t[events] & mask) - t0) / 1e3;
	/* Other GPUs' %globaltimer may be offset from rank 0's: read with care. */
	printf("#   trace rank %d %s block (starts %+.1f us after rank 0's first): %llu events "
	       "over %.1f us:",
	       rank, which, ((double)t0 - (double)(base & mask)) / 1e3, (unsigned long long)events,
	       span);
	for (uint64_t i = 1; i <= events && i <= 24; i++)
		printf(" %s %.1f", perf_trace_name((unsigned)(t[i] >> 56)),
		       (double)((t[i] & mask) - t0) / 1e3);
	printf("%s\n", events > 24 ? " ..." : "");
	double sum[NDET_TRACE_END + 1] = {0};
	unsigned count[NDET_TRACE_END + 1] = {0};
	for (uint64_t i = 2; i <= events; i++) {
		const unsigned code = (unsigned)(t[i] >> 56);
		if (code <= NDET_TRACE_END) {
			sum[code] += (double)((t[i] & mask) - (t[i - 1] & mask)) / 1e3;
			count[code]++;
		}
	}
	printf("#   trace rank %d %s block, time to reach each event:", rank, which);
	for (unsigned code = 0; code <= NDET_TRACE_END; code++)
		if (count[code] > 0)
			printf(" %s %.1f (%u x %.2f)", perf_trace_name(code), sum[code],
			       count[code], sum[code] / count[code]);
	printf("\n");
}

enum { PERF_TRACE_REPLAYS = 7 };

/*
 * --trace: every rank's timelines of the row's last traced call (perf_trace), one per
 * graph replay (perf_trace_samples of them; 1 for eager calls).
 */
static uint64_t perf_trace_words[PERF_TRACE_REPLAYS][NDET_MAX_RANKS][2 * NDET_TRACE_WORDS];
static int perf_trace_samples;
static int perf_trace_graph_calls; /* calls in the traced graph; 0: eager */

static bool perf_trace_in_graph(const struct perf_world *world)
{
	return world->options.modes == (1u << PERF_GRAPH) && world->options.iters > 0;
}

/*
 * --trace on one rank: three eager calls with the trace on, or a graph of the row's
 * calls captured with it and replayed, every rank's graph on the GPU before any
 * replay and each replay between barriers.  The last call's timeline stays.
 */
void perf_trace(struct perf_rank *me, const struct perf_row *row)
{
	struct perf_world *world = me->world;
	const bool graph = perf_trace_in_graph(world);
	uint64_t *words = NULL;
	cudaGraphExec_t exec = NULL;
	PERF_CHECK(cudaMalloc((void **)&words, sizeof(perf_trace_words[0][0])));
	PERF_CHECK(cudaMemsetAsync(words, 0, sizeof(perf_trace_words[0][0]), me->stream));
	PERF_CHECK(cudaStreamSynchronize(me->stream));
	pthread_barrier_wait(&world->barrier);
	ndet_engine_set_trace(world->engines[me->rank], words);
	if (graph) {
		cudaGraph_t captured;
		PERF_CHECK(cudaStreamBeginCapture(me->stream, cudaStreamCaptureModeThreadLocal));
		for (int i = 0; i < world->options.iters; i++)
			perf_launch(me, PERF_NDET, me->send, me->recv, row);
		PERF_CHECK(cudaStreamEndCapture(me->stream, &captured));
		PERF_CHECK(cudaGraphInstantiate(&exec, captured, 0));
		PERF_CHECK(cudaGraphDestroy(captured));
		PERF_CHECK(cudaGraphUpload(exec, me->stream));
	} else {
		for (int i = 0; i < 3; i++)
			perf_launch(me, PERF_NDET, me->send, me->recv, row);
	}
	/* The captured calls keep their trace pointer; later calls trace nothing. */
	ndet_engine_set_trace(world->engines[me->rank], NULL);
	PERF_CHECK(cudaStreamSynchronize(me->stream));
	pthread_barrier_wait(&world->barrier);
	const int samples = graph ? PERF_TRACE_REPLAYS : 1;
	for (int k = 0; k < samples; k++) {
		if (graph) {
			PERF_CHECK(cudaGraphLaunch(exec, me->stream));
			PERF_CHECK(cudaStreamSynchronize(me->stream));
		}
		PERF_CHECK(cudaMemcpy(perf_trace_words[k][me->rank], words,
				      sizeof(perf_trace_words[0][0]), cudaMemcpyDeviceToHost));
		pthread_barrier_wait(&world->barrier);
	}
	perf_check_engine(me);
	if (exec != NULL)
		PERF_CHECK(cudaGraphExecDestroy(exec));
	PERF_CHECK(cudaFree(words));
	if (me->rank == 0) {
		perf_trace_samples = samples;
		perf_trace_graph_calls = graph ? world->options.iters : 0;
	}
}

/*
 * One block of one rank over the replays: the median of its start after rank 0's
 * first block's (the ranks share one GPU's clock there) and of the time spent
 * reaching each kind of event, in microseconds.
 */
static void perf_print_trace_medians(int rank, int block)
{
	const uint64_t mask = (1ull << 56) - 1;
	double starts[PERF_TRACE_REPLAYS];
	double spent[NDET_TRACE_END + 1][PERF_TRACE_REPLAYS];
	int count[NDET_TRACE_END + 1] = {0};
	int traced = 0;
	for (int k = 0; k < perf_trace_samples; k++) {
		const uint64_t *t = perf_trace_words[k][rank] + block * NDET_TRACE_WORDS;
		const uint64_t *base = perf_trace_words[k][0];
		const uint64_t events = t[0] < NDET_TRACE_WORDS ? t[0] : NDET_TRACE_WORDS - 1;
		if (events < 2 || base[0] < 1)
			continue;
		starts[traced++] = ((double)(t[1] & mask) - (double)(base[1] & mask)) / 1e3;
		double sum[NDET_TRACE_END + 1] = {0};
		bool seen[NDET_TRACE_END + 1] = {false};
		for (uint64_t i = 2; i <= events; i++) {
			const unsigned code = (unsigned)(t[i] >> 56);
			if (code <= NDET_TRACE_END) {
				sum[code] += (double)((t[i] & mask) - (t[i - 1] & mask)) / 1e3;
				seen[code] = true;
			}
		}
		for (unsigned code = 0; code <= NDET_TRACE_END; code++)
			if (seen[code])
				spent[code][count[code]++] = sum[code];
	}
	if (traced == 0)
		return;
	printf("#   trace rank %d %s block, medians of %d replays: starts %+.2f us;", rank,
	       block == 0 ? "first" : "last", traced, perf_median(starts, traced));
	for (unsigned code = 0; code <= NDET_TRACE_END; code++)
		if (count[code] > 0)
			printf(" %s %.2f", perf_trace_name(code),
			       perf_median(spent[code], count[code]));
	printf("\n");
}

/* Rank 0, after the row's line: what perf_trace recorded. */
void perf_trace_print(const struct perf_world *world, const struct perf_row *row)
{
	const int last = perf_trace_samples > 0 ? perf_trace_samples - 1 : 0;
	printf("#   trace of %zu bytes %s %s: %s, %u blocks x %llu steps", row->bytes,
	       ndet_dtype_name(row->dtype), perf_op_name(row), perf_path_name(row), row->blocks,
	       (unsigned long long)row->steps);
	if (perf_trace_graph_calls > 0)
		printf("; the last call of a graph of %d, replayed %d times (timelines: the last "
		       "replay)",
		       perf_trace_graph_calls, perf_trace_samples);
	printf("\n");
	const uint64_t base = perf_trace_words[last][0][1];
	for (int r = 0; r < world->options.nranks; r++) {
		perf_print_trace(r, "first", perf_trace_words[last][r], base);
		perf_print_trace(r, "last", perf_trace_words[last][r] + NDET_TRACE_WORDS, base);
	}
	if (perf_trace_samples > 1)
		for (int r = 0; r < world->options.nranks; r++)
			for (int block = 0; block < 2; block++)
				perf_print_trace_medians(r, block);
}
