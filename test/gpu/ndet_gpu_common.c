/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 */
#include "config.h"

#include "test/gpu/ndet_gpu_common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "test/gpu/ndet_gpu_sizes.h"
#include "kernels/ndet_bench.h"
#include "kernels/ndet_kernels.h"
#include "protocol/ndet_plan.h"
#include "reference/ndet_reference.h"
#include "test/support/ndet_test_data.h"

static size_t gpu_size(ndet_dtype_t dtype)
{
	return ndet_dtype_size(dtype);
}

/*
 * NDET_TEST_DTYPES (a comma list of dtype names; default every dtype) limits the
 * matrices, so that a tier can split them; fp8 needs a GPU that runs our fp8 kernels
 * (sm_90+), and is left out, with a line that says so, where it cannot.
 */
bool gpu_dtype_selected(ndet_dtype_t dtype)
{
	static int fp8_ok = -1;
	if (!gpu_dtype_named(dtype))
		return false;
	if (!gpu_is_fp8(dtype))
		return true;
	if (fp8_ok < 0) {
		const int image = ndet_kernel_fp8_check();
		fp8_ok = image == 0;
		if (!fp8_ok)
			printf("NOT RUN: fp8 cases (this GPU cannot run the fp8 kernels: %s)\n",
			       cudaGetErrorString((cudaError_t)image));
	}
	return fp8_ok != 0;
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
	void *got;
};

static void gpu_case_prepare(struct gpu_case *c, int nranks, int variant, bool specials,
			     uint64_t salt)
{
	const size_t bytes = c->count * gpu_size(c->dtype) + 16;
	const void *inputs[NDET_MAX_RANKS];
	/*
	 * The shared test data (test/support/ndet_test_data.h, proven on the CPU by
	 * test_reference): cancelling pairs across ranks, so that even f16 and bf16 results,
	 * rounded once from f32 sums, show a wrong order; specials in about one element in 32 per
	 * rank. Products keep gpu_fill's values: f16 products of the cancelling pairs' large values
	 * overflow, and of many small ones underflow, in most elements.
	 */
	const unsigned flags = (nranks >= 2 ? NDET_TEST_DATA_CANCEL : 0u) |
			       (specials ? NDET_TEST_DATA_SPECIALS : 0u);
	for (int r = 0; r < nranks; r++) {
		c->inputs[r] = malloc(bytes);
		if (c->op == NDET_OP_PROD)
			gpu_fill(c->dtype, c->inputs[r], c->count,
				 gpu_seed(r, c->dtype, c->op, c->count, variant) ^ salt, specials);
		else
			ndet_test_fill_rank(c->dtype, c->inputs[r], 0, c->count,
					    gpu_seed(0, c->dtype, c->op, c->count, variant) ^ salt,
					    r, nranks, flags);
		inputs[r] = c->inputs[r];
	}
	c->expected = malloc(bytes);
	c->got = malloc(bytes);
	if (ndet_reference_allreduce(inputs, nranks, c->expected, c->count, c->dtype, c->op) !=
	    NDET_OK) {
		fprintf(stderr, "reference failed\n");
		gpu_die();
	}
}

static void gpu_case_free(struct gpu_case *c, int nranks)
{
	for (int r = 0; r < nranks; r++)
		free(c->inputs[r]);
	free(c->expected);
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
			rank->rank, what, kernel_error, block, peer, (unsigned long long)step,
			phase, (unsigned long long)(observed >> 24));
	}
}

/*
 * One checked call of the matrix: variant 0 aligned, out of place, no specials; 1
 * per-rank element offsets, in place on rank 1, specials; 2 odd byte offsets
 * (misaligned), out of place.  The output against the reference, the bytes around it
 * and the send buffer of an out-of-place call (poison and input still).  send_base and
 * recv_base hold `span` bytes: the data, 144 bytes of offset and kGuard bytes more.
 */
enum { kGuard = 64 };
static void gpu_matrix_call(struct gpu_rank *rank, ndet_dtype_t dtype, ndet_op_t op, size_t count,
			    int variant, char *send_base, char *recv_base, size_t span)
{
	unsigned char guard[2 * kGuard];
	struct gpu_case c = {.dtype = dtype, .op = op, .count = count};
	gpu_case_prepare(&c, rank->nranks, variant, variant == 1, 0);
	const size_t size = gpu_size(c.dtype);
	const size_t bytes = c.count * size;
	size_t send_off = 0, recv_off = 0;
	if (variant == 1) {
		/* A different offset on every rank (up to 16 and 18
		 * elements: 5 and 7 are prime to 17 and 19). */
		send_off = (size_t)((rank->rank * 5 + 1) % 17) * size;
		recv_off = (size_t)((rank->rank * 7 + 2) % 19) * size;
	} else if (variant == 2) {
		send_off = 1 + (size_t)rank->rank % 3;
		recv_off = 3;
	}
	char *send = send_base + send_off;
	char *recv = recv_base + recv_off;
	const bool in_place = variant == 1 && rank->rank == 1;
	if (in_place)
		recv = send;
	/*
	 * Poison both buffers, on the stream the call runs on:
	 * every element must be overwritten, and no byte around
	 * the output touched.
	 */
	GPU_CHECK(cudaMemsetAsync(recv_base, 0x5a, span, rank->stream));
	GPU_CHECK(cudaMemsetAsync(send_base, 0x5a, span, rank->stream));
	gpu_upload(send, c.inputs[rank->rank], bytes, rank->stream);
	rank->barrier(rank->barrier_context);
	ndet_status_t st = ndet_engine_allreduce(rank->engine, send, recv, c.count, c.dtype, c.op,
						 rank->stream);
	if (st != NDET_OK) {
		fprintf(stderr, "FAIL rank %d: allreduce returned %s\n", rank->rank,
			ndet_status_name(st));
		rank->failures++;
	}
	GPU_CHECK(cudaStreamSynchronize(rank->stream));
	gpu_check_engine(rank, "matrix");
	GPU_CHECK(cudaMemcpy(c.got, recv, bytes, cudaMemcpyDeviceToHost));
	size_t first = 0;
	size_t bad = gpu_compare(c.dtype, c.got, c.expected, c.count, &first);
	const char *what = variant == 0   ? "aligned"
			   : variant == 1 ? "offset/in-place"
					  : "misaligned";
	gpu_report(rank, &c, what, bad, first);
	/* The bytes just before and after the output: poison still.
	 */
	const char *out_base = in_place ? send_base : recv_base;
	const size_t before =
		(size_t)(recv - out_base) < kGuard ? (size_t)(recv - out_base) : kGuard;
	GPU_CHECK(cudaMemcpy(guard, recv - before, before, cudaMemcpyDeviceToHost));
	GPU_CHECK(cudaMemcpy(guard + before, recv + bytes, kGuard, cudaMemcpyDeviceToHost));
	size_t touched = 0;
	for (size_t g = 0; g < before + kGuard; g++)
		touched += guard[g] != 0x5a;
	rank->checks++;
	if (touched != 0) {
		rank->failures++;
		fprintf(stderr,
			"FAIL rank %d: %s %s/%s count %zu: %zu "
			"bytes "
			"around the output changed\n",
			rank->rank, what, ndet_dtype_name(c.dtype), ndet_op_name(c.op), c.count,
			touched);
	}
	/* The input of an out-of-place call is left as it was. */
	if (!in_place) {
		GPU_CHECK(cudaMemcpy(c.got, send, bytes, cudaMemcpyDeviceToHost));
		rank->checks++;
		if (memcmp(c.got, c.inputs[rank->rank], bytes) != 0) {
			rank->failures++;
			fprintf(stderr,
				"FAIL rank %d: %s %s/%s count %zu: "
				"the "
				"call changed its send buffer\n",
				rank->rank, what, ndet_dtype_name(c.dtype), ndet_op_name(c.op),
				c.count);
		}
	}
	gpu_case_free(&c, rank->nranks);
}

void gpu_run_matrix(struct gpu_rank *rank, bool quick)
{
	/* The paths these reach: ndet_gpu_sizes.h (test_engine checks them). */
	static const size_t quick_sizes[] = NDET_GPU_MATRIX_QUICK_SIZES;
	static const size_t full_sizes[] = NDET_GPU_MATRIX_FULL_SIZES;
	const size_t *sizes = quick ? quick_sizes : full_sizes;
	const int nsizes = quick ? (int)(sizeof(quick_sizes) / sizeof(quick_sizes[0]))
				 : (int)(sizeof(full_sizes) / sizeof(full_sizes[0]));
	const size_t max_count = sizes[nsizes - 1];
	/* Offsets of at most 18 elements (144 bytes), the data, a guard of kGuard bytes. */
	const size_t span = max_count * 8 + 256;
	char *send_base = NULL, *recv_base = NULL;
	GPU_CHECK(cudaMalloc((void **)&send_base, span));
	GPU_CHECK(cudaMalloc((void **)&recv_base, span));

	/*
	 * First prove that the data tells summation orders apart, for every dtype: the
	 * tree and the right-to-left sequential order (for n = 3 the tree is the
	 * left-to-right one) differ in more than 5 % of the elements of a sum.
	 * Otherwise a kernel that added in another order would pass.  e4m3 sums of up to
	 * 16 values are exact in f32 (src/reference/ndet_reference.h), so no order can differ
	 * there; what could is rounding at every tree node instead of once: its data must tell
	 * those apart instead.
	 */
	for (int dtype = 0; dtype < NDET_DTYPE_COUNT && rank->nranks >= 3; dtype++) {
		if (!gpu_dtype_selected((ndet_dtype_t)dtype))
			continue;
		struct gpu_case c = {
			.dtype = (ndet_dtype_t)dtype, .op = NDET_OP_SUM, .count = 65541};
		gpu_case_prepare(&c, rank->nranks, 0, false, 0);
		const bool exact = c.dtype == NDET_DTYPE_F8E4M3;
		const void *inputs[NDET_MAX_RANKS];
		for (int r = 0; r < rank->nranks; r++)
			inputs[r] = c.inputs[exact ? r : rank->nranks - 1 - r];
		void *other = malloc(c.count * gpu_size(c.dtype) + 16);
		if (exact)
			ndet_reference_allreduce_node_rounded(inputs, rank->nranks, other, c.count,
							      c.dtype, c.op);
		else
			ndet_reference_allreduce_sequential(inputs, rank->nranks, other, c.count,
							    c.dtype, c.op);
		const char *what = exact ? "tree rounded once and at every node"
					 : "tree and right-to-left order";
		const size_t differ = gpu_compare(c.dtype, c.expected, other, c.count, NULL);
		free(other);
		rank->checks++;
		if (differ * 20 <= c.count) {
			rank->failures++;
			fprintf(stderr,
				"FAIL rank %d: %s test data: %s sums differ in only %zu of %zu "
				"elements (n=%d)\n",
				rank->rank, ndet_dtype_name(c.dtype), what, differ, c.count,
				rank->nranks);
		} else if (rank->rank == 0) {
			printf("data check: %s sums, %s differ in %.1f%% of %zu elements (n=%d)\n",
			       ndet_dtype_name(c.dtype), what,
			       100.0 * (double)differ / (double)c.count, c.count, rank->nranks);
		}
		gpu_case_free(&c, rank->nranks);
	}

	for (int dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
		if (!gpu_dtype_selected((ndet_dtype_t)dtype))
			continue;
		for (int op = 0; op < NDET_OP_COUNT; op++) {
			for (int s = 0; s < nsizes; s++) {
				/* variant 0: aligned, out of place, no specials;
				 * 1: per-rank element offsets, in place on rank 1, specials;
				 * 2: odd byte offsets (misaligned), out of place. */
				for (int variant = 0; variant < 3; variant++) {
					if (quick && variant == 2 && s % 2 == 1)
						continue;
					/* The largest full size (most of the elements, and
					 * of the host's time preparing them) aligned only. */
					if (!quick && s == nsizes - 1 && variant != 0)
						continue;
					gpu_matrix_call(rank, (ndet_dtype_t)dtype, (ndet_op_t)op,
							sizes[s], variant, send_base, recv_base,
							span);
				}
			}
		}
	}
	GPU_CHECK(cudaFree(send_base));
	GPU_CHECK(cudaFree(recv_base));
}

/*
 * The most LL blocks such an engine plans: its grid cap (every rank on this one GPU,
 * as setup finds them; a GPU of at least 96 SMs) and the pool's LL slots.
 */
static size_t gpu_ll_wide_blocks(int nranks)
{
	const struct ndet_plan_params p = {.op = NDET_OP_SUM,
					   .nranks = nranks,
					   .max_blocks = NDET_GPU_WIDE_BLOCKS,
					   .ranks_per_device = nranks,
					   .processes_per_device = 1};
	const size_t cap = ndet_plan_grid_cap(&p), slots = ndet_plan_ll_blocks(NDET_GPU_WIDE_LL);
	return cap < slots ? cap : slots;
}

size_t gpu_ll_wide_count(int nranks, ndet_dtype_t dtype, int which)
{
	const size_t size = gpu_size(dtype);
	const size_t peers = nranks > 1 ? (size_t)nranks - 1 : 1;
	const size_t least = (NDET_PLAN_LL_WIDE_MIN + peers - 1) / peers; /* bytes */
	const size_t one = gpu_ll_wide_blocks(nranks) * (NDET_LL_WIDE_BLOCK_BYTES / 2);
	size_t two = gpu_ll_wide_blocks(nranks) * NDET_LL_WIDE_BLOCK_BYTES;
	two = two < NDET_GPU_WIDE_LL ? two : NDET_GPU_WIDE_LL;
	if (which == 0)
		return (least + size - 1) / size + 1;
	return which == 1 ? one / size - 3 : two / size - 5;
}

/* The bytes per block of such a plan in wide lines, 0 where it keeps 8-byte ones. */
static size_t gpu_ll_wide_block(int nranks, ndet_dtype_t dtype, ndet_op_t op, size_t count)
{
	const size_t size = gpu_size(dtype), bytes = count * size;
	if (size > 4 || (op != NDET_OP_SUM && op != NDET_OP_AVG) || nranks < 2 || nranks > 8 ||
	    bytes > NDET_GPU_WIDE_LL || (size_t)(nranks - 1) * bytes < NDET_PLAN_LL_WIDE_MIN)
		return 0;
	/* One line per thread where that grid fits, else two. */
	for (size_t block = NDET_LL_WIDE_BLOCK_BYTES / 2; block <= NDET_LL_WIDE_BLOCK_BYTES;
	     block *= 2)
		if ((bytes + block - 1) / block <= gpu_ll_wide_blocks(nranks))
			return block;
	return 0;
}

bool gpu_ll_wide_expected(int nranks, ndet_dtype_t dtype, ndet_op_t op, size_t count)
{
	return gpu_ll_wide_block(nranks, dtype, op, count) != 0;
}

bool gpu_ll_wide_check(const struct ndet_engine *engine, int nranks, ndet_dtype_t dtype,
		       ndet_op_t op, size_t count)
{
	const size_t block = gpu_ll_wide_block(nranks, dtype, op, count);
	struct ndet_plan plan = {0};
	const ndet_status_t st = ndet_engine_plan(engine, count, dtype, op, &plan);
	const bool wide = plan.path == NDET_PATH_LL && plan.ll_line == NDET_LL_WIDE_LINE_DATA;
	if (st == NDET_OK && wide == (block != 0) &&
	    (!wide || plan.chunk_elems * gpu_size(dtype) == block))
		return true;
	fprintf(stderr,
		"FAIL wide LL %s/%s count %zu at %d ranks: %s, path %s, lines of %u bytes, blocks "
		"of %llu elements; wide lines expected: %s (blocks of %zu bytes)\n",
		ndet_dtype_name(dtype), ndet_op_name(op), count, nranks, ndet_status_name(st),
		ndet_plan_path_name(plan.path), plan.ll_line, (unsigned long long)plan.chunk_elems,
		block != 0 ? "yes" : "no", block);
	return false;
}

void gpu_run_ll_wide(struct gpu_rank *rank)
{
	/* Every count is at most NCCL_DET_LL_MAX (at 2 ranks the first is 224 KiB). */
	const size_t span = NDET_GPU_WIDE_LL + 256;
	static const ndet_op_t ops[] = {NDET_OP_SUM, NDET_OP_AVG, NDET_OP_PROD};
	char *send_base = NULL, *recv_base = NULL;
	unsigned wide = 0;
	GPU_CHECK(cudaMalloc((void **)&send_base, span));
	GPU_CHECK(cudaMalloc((void **)&recv_base, span));
	for (int dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
		if (!gpu_dtype_selected((ndet_dtype_t)dtype))
			continue;
		for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
			for (int which = 0; which < 3; which++) {
				const size_t count =
					gpu_ll_wide_count(rank->nranks, (ndet_dtype_t)dtype, which);
				const bool expected = gpu_ll_wide_expected(
					rank->nranks, (ndet_dtype_t)dtype, ops[o], count);
				rank->checks++;
				if (!gpu_ll_wide_check(rank->engine, rank->nranks,
						       (ndet_dtype_t)dtype, ops[o], count))
					rank->failures++;
				wide += expected;
				for (int variant = 0; variant < 3; variant++)
					gpu_matrix_call(rank, (ndet_dtype_t)dtype, ops[o], count,
							variant, send_base, recv_base, span);
			}
		}
	}
	if (rank->rank == 0)
		printf("wide LL lines: %u of the calls' plans take them (n=%d)\n", wide,
		       rank->nranks);
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
	ndet_status_t st =
		ndet_engine_allreduce(rank->engine, send, recv, count, c.dtype, c.op, rank->stream);
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
		GPU_CHECK(cudaMemsetAsync(recv, 0x5a, bytes, rank->stream));
		gpu_upload(send, c.inputs[rank->rank], bytes, rank->stream);
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

static double gpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * The rank's two streams, each used once by a kernel and drained before any
 * collective: a stream's first kernel was seen to start only after the other ranks'
 * kernels (threads of this process, spinning for it) had timed out, always at the
 * first call on the second stream (loopback, n = 3 and 4, about one run in ten).
 */
void gpu_streams_create(struct gpu_rank *rank)
{
	GPU_CHECK(cudaStreamCreateWithFlags(&rank->stream, cudaStreamNonBlocking));
	GPU_CHECK(cudaStreamCreateWithFlags(&rank->stream2, cudaStreamNonBlocking));
	unsigned *word = NULL;
	GPU_CHECK(cudaMalloc((void **)&word, sizeof(*word)));
	GPU_CHECK((cudaError_t)ndet_kernel_fill_u32(word, 1, 1, rank->stream));
	GPU_CHECK((cudaError_t)ndet_kernel_fill_u32(word, 1, 2, rank->stream2));
	GPU_CHECK(cudaStreamSynchronize(rank->stream));
	GPU_CHECK(cudaStreamSynchronize(rank->stream2));
	GPU_CHECK(cudaFree(word));
}

int gpu_launch_window(const struct gpu_rank *rank)
{
	const char *text = getenv("NDET_TEST_STREAM_WINDOW");
	if (text != NULL && *text != '\0')
		return atoi(text);
	return rank->shared_queues ? 1 : 50;
}

/*
 * 1,000 (quick: 200) calls alternating between two streams, no host sync.  Ranks
 * launch in windows (gpu_launch_window) with a barrier between windows, as
 * run_delay_phase does: where ranks are threads of one process, their streams share
 * hardware queues (see gpu_rank.shared_queues), and a launch that blocks in the
 * driver while a peer thread still has to launch what our queued kernels wait for
 * stalls too.  A launch that takes more than a second is reported.
 */
void gpu_run_streams(struct gpu_rank *rank, int calls)
{
	const int window = gpu_launch_window(rank);
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
	/* Poison: every call must write its whole output. */
	GPU_CHECK(cudaMemsetAsync(recv, 0x5a, count * size * (size_t)calls, rank->stream));
	GPU_CHECK(cudaDeviceSynchronize());
	rank->barrier(rank->barrier_context);
	for (int i = 0; i < calls; i++) {
		cudaStream_t stream = i % 2 ? rank->stream2 : rank->stream;
		const double t0 = gpu_now();
		ndet_engine_allreduce(rank->engine, send + (size_t)i * count * size,
				      recv + (size_t)i * count * size, count, cases[i].dtype,
				      cases[i].op, stream);
		const double took = gpu_now() - t0;
		if (took > 1.0)
			fprintf(stderr, "NOTE rank %d: two-stream call %d took %.1f s to launch\n",
				rank->rank, i, took);
		if (window > 0 && i % window == window - 1)
			rank->barrier(rank->barrier_context);
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
		gpu_report(
			rank, &cases[i], "two-stream",
			gpu_compare(cases[i].dtype, cases[i].got, cases[i].expected, count, &first),
			first);
		gpu_case_free(&cases[i], rank->nranks);
	}
	free(cases);
	GPU_CHECK(cudaFree(send));
	GPU_CHECK(cudaFree(recv));
}

void gpu_run_divergence(struct gpu_rank *rank, int silent_rank, int diverging_rank)
{
	gpu_run_divergence_call(rank, silent_rank, diverging_rank, 4099, 4100, NDET_OP_SUM);
}

void gpu_run_divergence_call(struct gpu_rank *rank, int silent_rank, int diverging_rank,
			     size_t count, size_t diverging_count, ndet_op_t diverging_op)
{
	float *buffer = NULL;
	const size_t most = count > diverging_count ? count : diverging_count;
	GPU_CHECK(cudaMalloc((void **)&buffer, most * sizeof(float)));
	GPU_CHECK(cudaMemsetAsync(buffer, 0, most * sizeof(float), rank->stream));
	GPU_CHECK(cudaStreamSynchronize(rank->stream));
	rank->barrier(rank->barrier_context);
	double start = gpu_now();
	if (rank->rank != silent_rank) {
		const bool odd = rank->rank == diverging_rank;
		ndet_engine_allreduce(rank->engine, buffer, buffer, odd ? diverging_count : count,
				      NDET_DTYPE_F32, odd ? diverging_op : NDET_OP_SUM,
				      rank->stream);
		/* The error must come from the kernels, without any host synchronisation. */
		uint32_t kernel_error = 0;
		while (ndet_engine_error(rank->engine, &kernel_error) == NDET_OK &&
		       gpu_now() - start < 30.0)
			usleep(1000);
		double elapsed = gpu_now() - start;
		rank->checks++;
		if (kernel_error == 0) {
			fprintf(stderr, "FAIL rank %d: no error %.1f s after a %s call\n",
				rank->rank, elapsed,
				silent_rank >= 0 ? "silent-peer" : "diverging");
			rank->failures++;
		} else if (rank->timeout_ms > 0 &&
			   elapsed > (double)rank->timeout_ms / 1000.0 + 1.0) {
			fprintf(stderr,
				"FAIL rank %d: error %u came %.2f s after a %s call, more than "
				"1 s past the %.2f s timeout\n",
				rank->rank, kernel_error, elapsed,
				silent_rank >= 0 ? "silent-peer" : "diverging",
				(double)rank->timeout_ms / 1000.0);
			rank->failures++;
		} else if (silent_rank < 0 && kernel_error != NDET_KERNEL_ERR_SIGNATURE &&
			   kernel_error != NDET_KERNEL_ERR_PEER) {
			/* Every calling rank called: the signatures must tell, not the clock. */
			fprintf(stderr,
				"FAIL rank %d: a diverging call ended in error %u after %.2f s, "
				"not a signature mismatch (%u) or a peer's report of one (%u)\n",
				rank->rank, kernel_error, elapsed, NDET_KERNEL_ERR_SIGNATURE,
				NDET_KERNEL_ERR_PEER);
			rank->failures++;
		} else {
			printf("rank %d: error %u after %.3f s (%s)\n", rank->rank, kernel_error,
			       elapsed,
			       silent_rank >= 0              ? "silent peer"
			       : diverging_op != NDET_OP_SUM ? "diverging op"
							     : "diverging count");
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

void gpu_run_abort_at_start(struct gpu_rank *rank, size_t count)
{
	float *buffer = NULL;
	GPU_CHECK(cudaMalloc((void **)&buffer, count * sizeof(float)));
	GPU_CHECK(cudaMemsetAsync(buffer, 0, count * sizeof(float), rank->stream));
	GPU_CHECK(cudaStreamSynchronize(rank->stream));
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
			"FAIL rank %d: abort at start, count %zu: error %u (want %u), wait %u "
			"(want 0: kernel start or an LL step's host abort read), peer %u (want "
			"%u)\n",
			rank->rank, count, kernel_error, want, phase, peer, want_peer);
	}
	rank->barrier(rank->barrier_context);
	GPU_CHECK(cudaFree(buffer));
}

/* ------------------------------------------------------------ reduce-scatter, reduce, PreMulSum */

/* Device buffers of one rank for the collective matrix (allocated once, before any launch). */
struct gpu_coll_buffers {
	char *send_rs; /* reduce-scatter input; block `rank` is its output in place */
	char *send;    /* all-reduce and reduce input */
	char *out_rs, *out_ar, *out_reduce;
	void *scalar; /* this rank's device scalar */
	size_t bytes; /* of each buffer */
};

/* One case: every rank's inputs (nranks blocks of count) and the expected all-reduce. */
struct gpu_coll_case {
	ndet_dtype_t dtype;
	ndet_op_t op;
	bool premul;
	size_t count; /* elements per rank block (recvcount) */
	int nranks;
	void *inputs[NDET_MAX_RANKS];
	unsigned char scalars[NDET_MAX_RANKS * 8];
	void *expected; /* all-reduce of nranks * count elements */
	void *block;    /* this rank's reduce-scatter reference */
	void *got, *got_ar;
};

/* device_scale: odd ranks' (device) scalars are their values times this. */
static void gpu_coll_prepare(struct gpu_coll_case *c, int rank, uint64_t seed, double device_scale)
{
	const size_t size = gpu_size(c->dtype), total = c->count * (size_t)c->nranks;
	const void *views[NDET_MAX_RANKS];
	for (int r = 0; r < c->nranks; r++) {
		c->inputs[r] = malloc(total * size + 16);
		gpu_fill(c->dtype, c->inputs[r], total, seed ^ ((uint64_t)r * 7919u), r % 2 == 1);
		views[r] = c->inputs[r];
		const uint64_t bits = ndet_reference_element_bits(
			c->dtype,
			ndet_reference_test_scalar(r) * (r % 2 == 1 ? device_scale : 1.0));
		memcpy(c->scalars + (size_t)r * size, &bits, size);
	}
	c->expected = malloc(total * size + 16);
	c->block = malloc(c->count * size + 16);
	c->got = malloc(total * size + 16);
	c->got_ar = malloc(total * size + 16);
	ndet_status_t st = c->premul ? ndet_reference_premulsum(views, c->scalars, c->nranks,
								c->expected, total, c->dtype)
				     : ndet_reference_allreduce(views, c->nranks, c->expected,
								total, c->dtype, c->op);
	/* The reduce-scatter reference, from its own function (PreMulSum: the slice). */
	if (st == NDET_OK && !c->premul)
		st = ndet_reference_reduce_scatter(views, c->nranks, rank, c->block, c->count,
						   c->dtype, c->op);
	else if (st == NDET_OK)
		memcpy(c->block, (char *)c->expected + (size_t)rank * c->count * size,
		       c->count * size);
	if (st != NDET_OK) {
		fprintf(stderr, "reference failed: %s\n", ndet_status_name(st));
		gpu_die();
	}
}

static void gpu_coll_free(struct gpu_coll_case *c)
{
	for (int r = 0; r < c->nranks; r++)
		free(c->inputs[r]);
	free(c->expected);
	free(c->block);
	free(c->got);
	free(c->got_ar);
}

static void gpu_coll_report(struct gpu_rank *rank, const struct gpu_coll_case *c, const char *what,
			    int variant, size_t mismatches, size_t first, size_t compared)
{
	rank->checks++;
	if (mismatches == 0)
		return;
	rank->failures++;
	fprintf(stderr,
		"FAIL rank %d: %s %s/%s%s recvcount %zu variant %d: %zu of %zu elements differ "
		"(first at %zu)\n",
		rank->rank, what, ndet_dtype_name(c->dtype), c->premul ? "premulsum" : "",
		c->premul ? "" : ndet_op_name(c->op), c->count, variant, mismatches, compared,
		first);
}

static void gpu_coll_buffers_alloc(struct gpu_coll_buffers *b, size_t bytes)
{
	b->bytes = bytes;
	GPU_CHECK(cudaMalloc((void **)&b->send_rs, bytes));
	GPU_CHECK(cudaMalloc((void **)&b->send, bytes));
	GPU_CHECK(cudaMalloc((void **)&b->out_rs, bytes));
	GPU_CHECK(cudaMalloc((void **)&b->out_ar, bytes));
	GPU_CHECK(cudaMalloc((void **)&b->out_reduce, bytes));
	GPU_CHECK(cudaMalloc(&b->scalar, 16));
}

static void gpu_coll_buffers_free(struct gpu_coll_buffers *b)
{
	GPU_CHECK(cudaFree(b->send_rs));
	GPU_CHECK(cudaFree(b->send));
	GPU_CHECK(cudaFree(b->out_rs));
	GPU_CHECK(cudaFree(b->out_ar));
	GPU_CHECK(cudaFree(b->out_reduce));
	GPU_CHECK(cudaFree(b->scalar));
}

/* Element offset of variant 1, byte offset of variant 2 (misaligned) of a send buffer. */
static size_t gpu_coll_send_offset(int rank, int variant, size_t size)
{
	if (variant == 1)
		return (size_t)((rank * 3 + 1) % 5) * size;
	return variant == 2 ? 1 + (size_t)rank % 3 : 0;
}

/*
 * Inputs, this rank's device scalar and poisoned outputs, all finished on return: no
 * copy may block any rank once one has launched (ranks may share this process).
 */
static void gpu_coll_upload(struct gpu_rank *rank, const struct gpu_coll_case *c,
			    const struct gpu_coll_buffers *b, int variant)
{
	const size_t size = gpu_size(c->dtype), bytes = c->count * (size_t)c->nranks * size;
	const size_t send_off = gpu_coll_send_offset(rank->rank, variant, size);
	GPU_CHECK(cudaMemsetAsync(b->out_rs, 0x5a, b->bytes, rank->stream));
	GPU_CHECK(cudaMemsetAsync(b->out_ar, 0x5a, b->bytes, rank->stream));
	GPU_CHECK(cudaMemsetAsync(b->out_reduce, 0x5a, b->bytes, rank->stream));
	gpu_upload(b->send_rs + send_off, c->inputs[rank->rank], bytes, rank->stream);
	gpu_upload(b->send + send_off, c->inputs[rank->rank], bytes, rank->stream);
	gpu_upload(b->scalar, c->scalars + (size_t)rank->rank * size, size, rank->stream);
}

/* The calls of one rank: reduce-scatter, all-reduce, reduce to `root`, one engine. */
static void gpu_coll_launch(struct gpu_rank *rank, const struct gpu_coll_case *c,
			    const struct gpu_coll_buffers *b, int variant, int root, char **rs_out,
			    char **ar_out)
{
	const size_t size = gpu_size(c->dtype);
	/* variant 0: aligned; 1: reduce-scatter in place, element offsets; 2: odd bytes. */
	const size_t send_off = gpu_coll_send_offset(rank->rank, variant, size);
	const size_t recv_off = variant == 2 ? 3 : 0;
	struct ndet_engine_call call = {
		.dtype = c->dtype,
		.op = c->premul ? NDET_OP_SUM : c->op,
		.premul = !c->premul            ? NDET_PREMUL_NONE
			  : rank->rank % 2 == 0 ? NDET_PREMUL_HOST
						: NDET_PREMUL_DEVICE,
		.scalar = b->scalar,
	};
	memcpy(&call.scalar_bits, c->scalars + (size_t)rank->rank * size, size);
	call.coll = NDET_COLL_REDUCE_SCATTER;
	call.count = c->count;
	call.sendbuff = b->send_rs + send_off;
	call.recvbuff = variant == 1 ? b->send_rs + send_off + (size_t)rank->rank * c->count * size
				     : b->out_rs + recv_off;
	*rs_out = call.recvbuff;
	ndet_status_t st = ndet_engine_collective(rank->engine, &call, rank->stream);
	/* Lock-step launches where ranks share hardware queues (gpu_rank.shared_queues). */
	if (rank->shared_queues)
		rank->barrier(rank->barrier_context);
	call.coll = NDET_COLL_ALLREDUCE;
	call.count = c->count * (size_t)c->nranks;
	call.sendbuff = b->send + send_off;
	call.recvbuff = *ar_out = b->out_ar + recv_off;
	if (st == NDET_OK)
		st = ndet_engine_collective(rank->engine, &call, rank->stream);
	if (rank->shared_queues)
		rank->barrier(rank->barrier_context);
	call.coll = NDET_COLL_REDUCE;
	call.root = root;
	call.recvbuff = b->out_reduce + recv_off;
	if (st == NDET_OK)
		st = ndet_engine_collective(rank->engine, &call, rank->stream);
	if (st != NDET_OK) {
		fprintf(stderr, "FAIL rank %d: collective launch returned %s\n", rank->rank,
			ndet_status_name(st));
		rank->failures++;
	}
}

/* Bytes of `buffer` that are not the 0x5a poison. */
static size_t gpu_touched(const void *buffer, size_t bytes)
{
	size_t touched = 0;
	for (size_t i = 0; i < bytes; i++)
		touched += ((const unsigned char *)buffer)[i] != 0x5a;
	return touched;
}

static void gpu_coll_check(struct gpu_rank *rank, struct gpu_coll_case *c,
			   const struct gpu_coll_buffers *b, int variant, int root,
			   const char *rs_out, const char *ar_out)
{
	const size_t size = gpu_size(c->dtype), total = c->count * (size_t)c->nranks;
	size_t first = 0;
	GPU_CHECK(cudaMemcpy(c->got, rs_out, c->count * size, cudaMemcpyDeviceToHost));
	GPU_CHECK(cudaMemcpy(c->got_ar, ar_out, total * size, cudaMemcpyDeviceToHost));
	gpu_coll_report(rank, c, "reduce-scatter vs reference", variant,
			gpu_compare(c->dtype, c->got, c->block, c->count, &first), first, c->count);
	/* Two launches on the GPU, one tree: the block is the all-reduce's slice. */
	gpu_coll_report(rank, c, "reduce-scatter vs all-reduce slice", variant,
			gpu_compare(c->dtype, c->got,
				    (char *)c->got_ar + (size_t)rank->rank * c->count * size,
				    c->count, &first),
			first, c->count);
	gpu_coll_report(rank, c, "all-reduce", variant,
			gpu_compare(c->dtype, c->got_ar, c->expected, total, &first), first, total);
	const size_t recv_off = variant == 2 ? 3 : 0;
	GPU_CHECK(
		cudaMemcpy(c->got, b->out_reduce, total * size + recv_off, cudaMemcpyDeviceToHost));
	if (rank->rank == root) {
		gpu_coll_report(rank, c, "reduce (root)", variant,
				gpu_compare(c->dtype, (char *)c->got + recv_off, c->expected, total,
					    &first),
				first, total);
	} else {
		gpu_coll_report(rank, c, "reduce (non-root recvbuff written)", variant,
				gpu_touched(c->got, total * size + recv_off), 0, total * size);
	}
}

void gpu_run_collectives(struct gpu_rank *rank, bool quick)
{
	static const size_t quick_sizes[] = {1, 5, 37, 1027, 70001};
	static const size_t full_sizes[] = {1, 3, 5, 37, 1027, 4099, 70001, 300007};
	const size_t *sizes = quick ? quick_sizes : full_sizes;
	const int nsizes = quick ? (int)(sizeof(quick_sizes) / sizeof(quick_sizes[0]))
				 : (int)(sizeof(full_sizes) / sizeof(full_sizes[0]));
	const int n = rank->nranks;
	struct gpu_coll_buffers b;
	gpu_coll_buffers_alloc(&b, sizes[nsizes - 1] * (size_t)n * 8 + 256);

	for (int dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
		if (!gpu_dtype_selected((ndet_dtype_t)dtype))
			continue;
		/* Every op, then PreMulSum (host scalars on even ranks, device on odd). */
		for (int op = 0; op <= NDET_OP_COUNT; op++) {
			for (int s = 0; s < nsizes; s++) {
				for (int variant = 0; variant < 3; variant++) {
					if (quick && variant != 0 && (s + op) % 2 == 1)
						continue;
					struct gpu_coll_case c = {.dtype = (ndet_dtype_t)dtype,
								  .op = op == NDET_OP_COUNT
										? NDET_OP_SUM
										: (ndet_op_t)op,
								  .premul = op == NDET_OP_COUNT,
								  .count = sizes[s],
								  .nranks = n};
					gpu_coll_prepare(&c, rank->rank,
							 gpu_seed(0, dtype, op, sizes[s], variant),
							 1.0);
					const int root = (int)((sizes[s] + (size_t)op) % (size_t)n);
					gpu_coll_upload(rank, &c, &b, variant);
					rank->barrier(rank->barrier_context);
					char *rs_out = NULL, *ar_out = NULL;
					gpu_coll_launch(rank, &c, &b, variant, root, &rs_out,
							&ar_out);
					rank->barrier(rank->barrier_context);
					GPU_CHECK(cudaStreamSynchronize(rank->stream));
					gpu_check_engine(rank, "collectives");
					gpu_coll_check(rank, &c, &b, variant, root, rs_out, ar_out);
					gpu_coll_free(&c);
				}
			}
		}
	}
	gpu_coll_buffers_free(&b);
}

void gpu_run_collectives_graph(struct gpu_rank *rank, int replays)
{
	const int n = rank->nranks;
	const size_t count = 30011; /* per rank block */
	struct gpu_coll_buffers b;
	gpu_coll_buffers_alloc(&b, count * (size_t)n * 8 + 256);
	/*
	 * One graph: a bf16 PreMulSum reduce-scatter, all-reduce and reduce.  Odd ranks
	 * read their scalar from device memory, which changes between replays: a replay
	 * must use the value the scalar has when it runs.  Even ranks' host scalars are
	 * the values captured.
	 */
	struct gpu_coll_case c = {.dtype = NDET_DTYPE_BF16,
				  .op = NDET_OP_SUM,
				  .premul = true,
				  .count = count,
				  .nranks = n};
	gpu_coll_prepare(&c, rank->rank, 4242, 1.0);
	const int root = n - 1;
	cudaGraph_t graph;
	cudaGraphExec_t exec;
	char *rs_out = NULL, *ar_out = NULL;
	rank->barrier(rank->barrier_context);
	GPU_CHECK(cudaStreamBeginCapture(rank->stream, cudaStreamCaptureModeThreadLocal));
	gpu_coll_launch(rank, &c, &b, 0, root, &rs_out, &ar_out);
	GPU_CHECK(cudaStreamEndCapture(rank->stream, &graph));
	GPU_CHECK(cudaGraphInstantiate(&exec, graph, 0));
	gpu_coll_free(&c);
	for (int i = 0; i < replays; i++) {
		c = (struct gpu_coll_case){.dtype = NDET_DTYPE_BF16,
					   .op = NDET_OP_SUM,
					   .premul = true,
					   .count = count,
					   .nranks = n};
		gpu_coll_prepare(&c, rank->rank, 5000 + (uint64_t)i, (double)(i % 4 + 1));
		gpu_coll_upload(rank, &c, &b, 0);
		rank->barrier(rank->barrier_context);
		GPU_CHECK(cudaGraphLaunch(exec, rank->stream));
		rank->barrier(rank->barrier_context);
		GPU_CHECK(cudaStreamSynchronize(rank->stream));
		gpu_check_engine(rank, "collectives graph");
		gpu_coll_check(rank, &c, &b, 0, root, rs_out, ar_out);
		gpu_coll_free(&c);
	}
	GPU_CHECK(cudaGraphExecDestroy(exec));
	GPU_CHECK(cudaGraphDestroy(graph));
	gpu_coll_buffers_free(&b);
}
