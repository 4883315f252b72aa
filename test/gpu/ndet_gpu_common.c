/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 */
#include "config.h"

#include "ndet_gpu_common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ndet_reference.h"

static size_t gpu_size(ndet_dtype_t dtype)
{
	return ndet_dtype_size(dtype);
}

static uint64_t gpu_rng(uint64_t *state)
{
	uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

void gpu_fill(ndet_dtype_t dtype, void *buffer, size_t count, uint64_t seed, bool specials)
{
	uint64_t state = seed * 0x2545F4914F6CDD1Dull + 1;
	/* Exponent spread per type: wide enough that order matters, narrow enough that sums
	 * of 16 values rarely overflow. */
	int spread = dtype == NDET_DTYPE_F16 ? 8 : dtype == NDET_DTYPE_F64 ? 40 : 20;
	for (size_t i = 0; i < count; i++) {
		uint64_t bits = gpu_rng(&state);
		double mantissa = 1.0 + (double)(bits >> 12) / 4503599627370496.0;
		int exponent = (int)(bits % (uint64_t)(2 * spread + 1)) - spread;
		double value = ldexp(mantissa, exponent) * ((bits >> 11) & 1 ? -1.0 : 1.0);
		if (specials && (bits & 0xff00) == 0x1100) {
			static const double special_values[] = {INFINITY, -INFINITY, NAN, 0.0, -0.0};
			value = special_values[(bits >> 20) % 5];
		}
		bool subnormal = specials && (bits & 0xff00) == 0x2200;
		switch (dtype) {
		case NDET_DTYPE_F32: {
			float f = (float)value;
			if (subnormal)
				f = (float)((bits >> 40) % 1000 + 1) * 1.4e-45f;
			((float *)buffer)[i] = f;
			break;
		}
		case NDET_DTYPE_F64: {
			double d = value;
			if (subnormal)
				d = (double)((bits >> 40) % 1000 + 1) * 4.9e-324;
			((double *)buffer)[i] = d;
			break;
		}
		case NDET_DTYPE_F16: {
			uint16_t h = ndet_float_to_half((float)value);
			if (subnormal)
				h = (uint16_t)(((bits >> 40) % 1023 + 1) | ((bits >> 50) & 1) << 15);
			((uint16_t *)buffer)[i] = h;
			break;
		}
		case NDET_DTYPE_BF16: {
			uint16_t h = ndet_float_to_bfloat16((float)value);
			if (subnormal)
				h = (uint16_t)(((bits >> 40) % 127 + 1) | ((bits >> 50) & 1) << 15);
			((uint16_t *)buffer)[i] = h;
			break;
		}
		default:
			break;
		}
	}
}

static bool gpu_is_nan(ndet_dtype_t dtype, const char *p)
{
	switch (dtype) {
	case NDET_DTYPE_F32: {
		float f;
		memcpy(&f, p, sizeof(f));
		return isnan(f);
	}
	case NDET_DTYPE_F64: {
		double d;
		memcpy(&d, p, sizeof(d));
		return isnan(d);
	}
	case NDET_DTYPE_F16: {
		uint16_t h;
		memcpy(&h, p, sizeof(h));
		return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
	}
	case NDET_DTYPE_BF16: {
		uint16_t h;
		memcpy(&h, p, sizeof(h));
		return (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0;
	}
	default:
		return false;
	}
}

void gpu_upload(void *dst, const void *src, size_t bytes, cudaStream_t stream)
{
	GPU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
	GPU_CHECK(cudaStreamSynchronize(stream));
}

size_t gpu_compare(ndet_dtype_t dtype, const void *got, const void *want, size_t count,
		   size_t *first_index)
{
	const size_t size = gpu_size(dtype);
	size_t mismatches = 0;
	for (size_t i = 0; i < count; i++) {
		const char *g = (const char *)got + i * size, *w = (const char *)want + i * size;
		if (memcmp(g, w, size) == 0)
			continue;
		if (gpu_is_nan(dtype, g) && gpu_is_nan(dtype, w))
			continue; /* NaN payloads may differ (DESIGN.md section 1) */
		if (mismatches == 0 && first_index != NULL)
			*first_index = i;
		mismatches++;
	}
	return mismatches;
}

static uint64_t gpu_seed(int rank, int dtype, int op, size_t count, int variant)
{
	return ((uint64_t)rank * 1000003u) ^ ((uint64_t)dtype << 40) ^ ((uint64_t)op << 48) ^
	       ((uint64_t)count << 8) ^ ((uint64_t)variant << 56);
}

/* Host copies of every rank's input and the expected result for one case. */
struct gpu_case {
	ndet_dtype_t dtype;
	ndet_op_t op;
	size_t count;
	void *inputs[NDET_MAX_RANKS];
	void *expected;
	void *sequential;
	void *got;
};

static void gpu_case_prepare(struct gpu_case *c, int nranks, int variant, bool specials,
			     uint64_t salt)
{
	const size_t bytes = c->count * gpu_size(c->dtype) + 16;
	const void *inputs[NDET_MAX_RANKS];
	for (int r = 0; r < nranks; r++) {
		c->inputs[r] = malloc(bytes);
		gpu_fill(c->dtype, c->inputs[r], c->count,
			 gpu_seed(r, c->dtype, c->op, c->count, variant) ^ salt, specials);
		inputs[r] = c->inputs[r];
	}
	c->expected = malloc(bytes);
	c->sequential = malloc(bytes);
	c->got = malloc(bytes);
	if (ndet_reference_allreduce(inputs, nranks, c->expected, c->count, c->dtype, c->op) !=
	    NDET_OK) {
		fprintf(stderr, "reference failed\n");
		exit(2);
	}
	/* Right-to-left sequential order: differs from the tree for every n >= 3 (for
	 * n = 3 the tree is left-to-right sequential order). */
	const void *reversed[NDET_MAX_RANKS];
	for (int r = 0; r < nranks; r++)
		reversed[r] = inputs[nranks - 1 - r];
	ndet_reference_allreduce_sequential(reversed, nranks, c->sequential, c->count, c->dtype,
					    c->op);
}

static void gpu_case_free(struct gpu_case *c, int nranks)
{
	for (int r = 0; r < nranks; r++)
		free(c->inputs[r]);
	free(c->expected);
	free(c->sequential);
	free(c->got);
}

static void gpu_report(struct gpu_rank *rank, const struct gpu_case *c, const char *what,
		       size_t mismatches, size_t first)
{
	rank->checks++;
	if (mismatches == 0)
		return;
	rank->failures++;
	fprintf(stderr,
		"FAIL rank %d: %s %s/%s count %zu: %zu of %zu elements differ from the reference "
		"(first at %zu)\n",
		rank->rank, what, ndet_dtype_name(c->dtype), ndet_op_name(c->op), c->count,
		mismatches, c->count, first);
}

static void gpu_check_engine(struct gpu_rank *rank, const char *what)
{
	uint32_t kernel_error = 0;
	if (ndet_engine_error(rank->engine, &kernel_error) != NDET_OK) {
		rank->failures++;
		uint32_t block = 0, peer = 0, phase = 0;
		uint64_t step = 0, observed = 0;
		ndet_engine_error_details(rank->engine, &block, &peer, &step, &observed, &phase);
		fprintf(stderr,
			"FAIL rank %d: %s: engine error %u (block %u, peer %u, step %llu, wait %u, "
			"flag seen step %llu)\n",
			rank->rank, what, kernel_error, block, peer, (unsigned long long)step, phase,
			(unsigned long long)(observed >> 24));
	}
}

void gpu_run_matrix(struct gpu_rank *rank, bool quick)
{
	static const size_t quick_sizes[] = {1, 2, 7, 33, 1023, 65541, 300001};
	static const size_t full_sizes[] = {1, 3, 7, 33, 1023, 4100, 65541, 300001, 1048579,
					    3145739};
	const size_t *sizes = quick ? quick_sizes : full_sizes;
	const int nsizes = quick ? (int)(sizeof(quick_sizes) / sizeof(quick_sizes[0]))
				 : (int)(sizeof(full_sizes) / sizeof(full_sizes[0]));
	const size_t max_count = sizes[nsizes - 1];
	char *send_base = NULL, *recv_base = NULL;
	GPU_CHECK(cudaMalloc((void **)&send_base, max_count * 8 + 256));
	GPU_CHECK(cudaMalloc((void **)&recv_base, max_count * 8 + 256));
	size_t discriminating = 0, compared = 0;

	for (int dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
		for (int op = 0; op < NDET_OP_COUNT; op++) {
			for (int s = 0; s < nsizes; s++) {
				/* variant 0: aligned, out of place, no specials;
				 * 1: per-rank element offsets, in place on rank 1, specials;
				 * 2: odd byte offsets (misaligned), out of place. */
				for (int variant = 0; variant < 3; variant++) {
					if (quick && variant == 2 && s % 2 == 1)
						continue;
					struct gpu_case c = {.dtype = (ndet_dtype_t)dtype,
							     .op = (ndet_op_t)op,
							     .count = sizes[s]};
					gpu_case_prepare(&c, rank->nranks, variant, variant == 1, 0);
					const size_t size = gpu_size(c.dtype);
					const size_t bytes = c.count * size;
					size_t send_off = 0, recv_off = 0;
					if (variant == 1) {
						send_off = (size_t)((rank->rank * 3 + 1) % 5) * size;
						recv_off = (size_t)((rank->rank * 7 + 2) % 9) * size;
					} else if (variant == 2) {
						send_off = 1 + (size_t)rank->rank % 3;
						recv_off = 3;
					}
					char *send = send_base + send_off;
					char *recv = recv_base + recv_off;
					if (variant == 1 && rank->rank == 1)
						recv = send;
					/* Poison: every element must be overwritten. */
					GPU_CHECK(cudaMemset(recv_base, 0x5a, max_count * 8 + 256));
					gpu_upload(send, c.inputs[rank->rank], bytes, rank->stream);
					rank->barrier(rank->barrier_context);
					ndet_status_t st = ndet_engine_allreduce(
						rank->engine, send, recv, c.count, c.dtype, c.op,
						rank->stream);
					if (st != NDET_OK) {
						fprintf(stderr, "FAIL rank %d: allreduce returned %s\n",
							rank->rank, ndet_status_name(st));
						rank->failures++;
					}
					GPU_CHECK(cudaStreamSynchronize(rank->stream));
					gpu_check_engine(rank, "matrix");
					GPU_CHECK(cudaMemcpy(c.got, recv, bytes, cudaMemcpyDeviceToHost));
					size_t first = 0;
					size_t bad = gpu_compare(c.dtype, c.got, c.expected, c.count,
								 &first);
					gpu_report(rank, &c, variant == 0   ? "aligned"
							     : variant == 1 ? "offset/in-place"
									    : "misaligned",
						   bad, first);
					if (op == NDET_OP_SUM && variant == 0 && c.count >= 1023) {
						discriminating += gpu_compare(c.dtype, c.expected,
									      c.sequential, c.count,
									      NULL);
						compared += c.count;
					}
					gpu_case_free(&c, rank->nranks);
				}
			}
		}
	}
	if (rank->rank == 0 && compared > 0)
		printf("data check: tree and right-to-left order differ in %.2f%% of %zu sum "
		       "elements (n=%d)\n",
		       100.0 * (double)discriminating / (double)compared, compared, rank->nranks);
	if (rank->nranks >= 3 && discriminating * 100 < compared) {
		fprintf(stderr, "FAIL rank %d: test data does not discriminate summation orders\n",
			rank->rank);
		rank->failures++;
	}
	rank->checks++;
	GPU_CHECK(cudaFree(send_base));
	GPU_CHECK(cudaFree(recv_base));
}

void gpu_run_graph(struct gpu_rank *rank, int replays)
{
	const size_t count = 100003;
	struct gpu_case c = {.dtype = NDET_DTYPE_BF16, .op = NDET_OP_SUM, .count = count};
	const size_t bytes = count * gpu_size(c.dtype);
	char *send = NULL, *recv = NULL;
	GPU_CHECK(cudaMalloc((void **)&send, bytes));
	GPU_CHECK(cudaMalloc((void **)&recv, bytes));
	cudaGraph_t graph;
	cudaGraphExec_t exec;
	rank->barrier(rank->barrier_context);
	GPU_CHECK(cudaStreamBeginCapture(rank->stream, cudaStreamCaptureModeThreadLocal));
	ndet_status_t st = ndet_engine_allreduce(rank->engine, send, recv, count, c.dtype, c.op,
						 rank->stream);
	GPU_CHECK(cudaStreamEndCapture(rank->stream, &graph));
	if (st != NDET_OK) {
		fprintf(stderr, "FAIL rank %d: capture returned %s\n", rank->rank,
			ndet_status_name(st));
		rank->failures++;
		return;
	}
	GPU_CHECK(cudaGraphInstantiate(&exec, graph, 0));
	for (int i = 0; i < replays; i++) {
		bool eager = i % 10 == 9;
		gpu_case_prepare(&c, rank->nranks, 100 + i % 7, false, (uint64_t)i << 20);
		gpu_upload(send, c.inputs[rank->rank], bytes, rank->stream);
		GPU_CHECK(cudaMemset(recv, 0x5a, bytes));
		rank->barrier(rank->barrier_context);
		if (eager)
			ndet_engine_allreduce(rank->engine, send, recv, count, c.dtype, c.op,
					      rank->stream);
		else
			GPU_CHECK(cudaGraphLaunch(exec, rank->stream));
		GPU_CHECK(cudaStreamSynchronize(rank->stream));
		gpu_check_engine(rank, "graph");
		GPU_CHECK(cudaMemcpy(c.got, recv, bytes, cudaMemcpyDeviceToHost));
		size_t first = 0;
		gpu_report(rank, &c, eager ? "graph-interleaved eager" : "graph replay",
			   gpu_compare(c.dtype, c.got, c.expected, count, &first), first);
		gpu_case_free(&c, rank->nranks);
	}
	GPU_CHECK(cudaGraphExecDestroy(exec));
	GPU_CHECK(cudaGraphDestroy(graph));
	GPU_CHECK(cudaFree(send));
	GPU_CHECK(cudaFree(recv));
}

void gpu_run_streams(struct gpu_rank *rank, int calls)
{
	const size_t count = 1001;
	const size_t size = gpu_size(NDET_DTYPE_F32);
	char *send = NULL, *recv = NULL;
	GPU_CHECK(cudaMalloc((void **)&send, count * size * (size_t)calls));
	GPU_CHECK(cudaMalloc((void **)&recv, count * size * (size_t)calls));
	struct gpu_case *cases = calloc((size_t)calls, sizeof(*cases));
	for (int i = 0; i < calls; i++) {
		cases[i] = (struct gpu_case){.dtype = NDET_DTYPE_F32,
					     .op = (ndet_op_t)(i % NDET_OP_COUNT),
					     .count = count};
		gpu_case_prepare(&cases[i], rank->nranks, 200, false, (uint64_t)i << 24);
		gpu_upload(send + (size_t)i * count * size, cases[i].inputs[rank->rank],
			   count * size, rank->stream);
	}
	GPU_CHECK(cudaDeviceSynchronize());
	rank->barrier(rank->barrier_context);
	for (int i = 0; i < calls; i++) {
		cudaStream_t stream = i % 2 ? rank->stream2 : rank->stream;
		ndet_engine_allreduce(rank->engine, send + (size_t)i * count * size,
				      recv + (size_t)i * count * size, count, cases[i].dtype,
				      cases[i].op, stream);
	}
	/* Every rank has launched everything before anyone blocks (see run_delay_phase). */
	rank->barrier(rank->barrier_context);
	GPU_CHECK(cudaStreamSynchronize(rank->stream));
	GPU_CHECK(cudaStreamSynchronize(rank->stream2));
	gpu_check_engine(rank, "streams");
	for (int i = 0; i < calls; i++) {
		GPU_CHECK(cudaMemcpy(cases[i].got, recv + (size_t)i * count * size, count * size,
				     cudaMemcpyDeviceToHost));
		size_t first = 0;
		gpu_report(rank, &cases[i], "two-stream",
			   gpu_compare(cases[i].dtype, cases[i].got, cases[i].expected, count,
				       &first),
			   first);
		gpu_case_free(&cases[i], rank->nranks);
	}
	free(cases);
	GPU_CHECK(cudaFree(send));
	GPU_CHECK(cudaFree(recv));
}

static double gpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void gpu_run_divergence(struct gpu_rank *rank, int silent_rank, int diverging_rank)
{
	const size_t count = 4099;
	float *buffer = NULL;
	GPU_CHECK(cudaMalloc((void **)&buffer, (count + 1) * sizeof(float)));
	GPU_CHECK(cudaMemset(buffer, 0, (count + 1) * sizeof(float)));
	rank->barrier(rank->barrier_context);
	double start = gpu_now();
	if (rank->rank != silent_rank) {
		size_t my_count = rank->rank == diverging_rank ? count + 1 : count;
		ndet_engine_allreduce(rank->engine, buffer, buffer, my_count, NDET_DTYPE_F32,
				      NDET_OP_SUM, rank->stream);
		/* The error must come from the kernels, without any host synchronisation. */
		uint32_t kernel_error = 0;
		while (ndet_engine_error(rank->engine, &kernel_error) == NDET_OK &&
		       gpu_now() - start < 30.0)
			usleep(1000);
		double elapsed = gpu_now() - start;
		rank->checks++;
		if (kernel_error == 0) {
			fprintf(stderr, "FAIL rank %d: no error %.1f s after a %s call\n", rank->rank,
				elapsed, silent_rank >= 0 ? "silent-peer" : "diverging");
			rank->failures++;
		} else {
			printf("rank %d: error %u after %.3f s (%s)\n", rank->rank, kernel_error,
			       elapsed, silent_rank >= 0 ? "silent peer" : "diverging count");
		}
		/* Later calls fail fast, without a CUDA call. */
		rank->checks++;
		if (ndet_engine_allreduce(rank->engine, buffer, buffer, count, NDET_DTYPE_F32,
					  NDET_OP_SUM, rank->stream) != NDET_ERR_REMOTE) {
			fprintf(stderr, "FAIL rank %d: poisoned engine accepted a call\n",
				rank->rank);
			rank->failures++;
		}
		GPU_CHECK(cudaStreamSynchronize(rank->stream));
	}
	rank->barrier(rank->barrier_context);
	GPU_CHECK(cudaFree(buffer));
}

void gpu_run_slow_progress(struct gpu_rank *rank, uint64_t timeout_ms)
{
	struct gpu_case c = {.dtype = NDET_DTYPE_F32, .op = NDET_OP_SUM, .count = 4u << 20};
	const size_t bytes = c.count * gpu_size(c.dtype);
	char *send = NULL, *recv = NULL;
	GPU_CHECK(cudaMalloc((void **)&send, bytes));
	GPU_CHECK(cudaMalloc((void **)&recv, bytes));
	gpu_case_prepare(&c, rank->nranks, 300, false, 0);
	gpu_upload(send, c.inputs[rank->rank], bytes, rank->stream);
	rank->barrier(rank->barrier_context);
	double start = gpu_now();
	ndet_status_t st = ndet_engine_allreduce(rank->engine, send, recv, c.count, c.dtype, c.op,
						 rank->stream);
	/* Every rank launched before any blocks (ranks may share this process). */
	rank->barrier(rank->barrier_context);
	GPU_CHECK(cudaStreamSynchronize(rank->stream));
	double elapsed = gpu_now() - start;
	rank->checks++;
	if (st != NDET_OK) {
		rank->failures++;
		fprintf(stderr, "FAIL rank %d: slow call returned %s\n", rank->rank,
			ndet_status_name(st));
	}
	gpu_check_engine(rank, "slow progress");
	GPU_CHECK(cudaMemcpy(c.got, recv, bytes, cudaMemcpyDeviceToHost));
	size_t first = 0;
	gpu_report(rank, &c, "slow progress",
		   gpu_compare(c.dtype, c.got, c.expected, c.count, &first), first);
	rank->checks++;
	if (elapsed * 1000.0 <= (double)timeout_ms) {
		rank->failures++;
		fprintf(stderr,
			"FAIL rank %d: the slow call took %.2f s, not longer than the %.2f s "
			"timeout: raise NDET_TEST_DELAY_NS for this phase\n",
			rank->rank, elapsed, (double)timeout_ms / 1000.0);
	} else if (rank->rank == 0) {
		printf("slow progress: one call of %.2f s under a %.2f s timeout\n", elapsed,
		       (double)timeout_ms / 1000.0);
	}
	gpu_case_free(&c, rank->nranks);
	GPU_CHECK(cudaFree(send));
	GPU_CHECK(cudaFree(recv));
}

void gpu_run_abort_at_start(struct gpu_rank *rank)
{
	const size_t count = 4099;
	float *buffer = NULL;
	GPU_CHECK(cudaMalloc((void **)&buffer, count * sizeof(float)));
	GPU_CHECK(cudaMemset(buffer, 0, count * sizeof(float)));
	rank->barrier(rank->barrier_context);
	if (rank->rank == 0) {
		ndet_engine_abort(rank->engine);
		ndet_engine_allreduce(rank->engine, buffer, buffer, count, NDET_DTYPE_F32,
				      NDET_OP_SUM, rank->stream);
		/* The kernel must leave on its own: no peer ever joins this call. */
		GPU_CHECK(cudaStreamSynchronize(rank->stream));
	}
	rank->barrier(rank->barrier_context);
	if (rank->rank != 0) {
		ndet_engine_allreduce(rank->engine, buffer, buffer, count, NDET_DTYPE_F32,
				      NDET_OP_SUM, rank->stream);
		GPU_CHECK(cudaStreamSynchronize(rank->stream));
	}
	uint32_t kernel_error = 0, block = 0, peer = 0, phase = 99;
	uint64_t step = 0, observed = 0;
	(void)ndet_engine_error(rank->engine, &kernel_error);
	(void)ndet_engine_error_details(rank->engine, &block, &peer, &step, &observed, &phase);
	const uint32_t want = rank->rank == 0 ? NDET_KERNEL_ERR_ABORTED : NDET_KERNEL_ERR_PEER;
	const uint32_t want_peer = 0; /* rank 0 names itself; the others name rank 0 */
	rank->checks++;
	if (kernel_error != want || phase != 0 || peer != want_peer) {
		rank->failures++;
		fprintf(stderr,
			"FAIL rank %d: abort at start: error %u (want %u), wait %u (want 0: "
			"kernel start), peer %u (want %u)\n",
			rank->rank, kernel_error, want, phase, peer, want_peer);
	}
	rank->barrier(rank->barrier_context);
	GPU_CHECK(cudaFree(buffer));
}
