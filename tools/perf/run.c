/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * nccl-det-perf's measured run: one thread per rank, each with its engine (set up
 * through an all-gather over the threads) and, when NCCL's columns run, its NCCL
 * communicator; per row the timed calls of each implementation and mode, then the
 * checks of nccl-det's result against the CPU reference and of its size invariance.
 */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/ndet_bench.h"
#include "kernels/ndet_kernels.h"
#include "common/ndet_dtype.h"
#include "reference/ndet_reference.h"
#include "common/ndet_settings.h"
#include "tools/perf/perf.h"

/*
 * A fatal error, possibly on one rank's thread while the others are inside CUDA or
 * NCCL calls: exit() would run exit handlers under their feet; leave at once with the
 * output flushed.
 */
_Noreturn void perf_die(void)
{
	fflush(NULL);
	_exit(1);
}

/* Rank `rank`'s engine configuration, from the settings and the layout of the ranks. */
struct ndet_engine_config perf_engine_config(const struct perf_world *world, int rank)
{
	struct ndet_engine_config config = {
		.rank = rank,
		.nranks = world->options.nranks,
		.cuda_device = rank % world->ngpus,
		/* What the setup will agree (rank r on GPU r % ngpus), for planned rows. */
		.ranks_per_device = (world->options.nranks + world->ngpus - 1) / world->ngpus,
		.device_sms = world->device_sms,
		.timeout_ms = 20000,
		.test_fail_rank = -1,
	};
	ndet_engine_config_from_settings(ndet_settings_get(), &config);
	return config;
}

/*
 * Bytes one rank's kernel reads + writes for one call (see kernels/ndet_kernels.h),
 * with this tool's send buffers, which cudaMalloc aligns: two-shot and push take
 * the rank's own segment straight from sendbuff, so it is neither copied into the
 * pool nor read back from it.
 */
static double perf_kernel_bytes(const struct perf_row *row, double bytes, int n)
{
	const ndet_path_t path = row->path;
	if (path == NDET_PATH_ONESHOT)
		return (n + 3) * bytes;
	/*
	 * LL: sendbuff read once, recvbuff written once, and 16-byte lines of ll_line data
	 * bytes (2x or 4/3x the data) stored to and read from each of n - 1 peers.
	 */
	if (path == NDET_PATH_LL && row->ll_line != 0)
		return bytes + 2.0 * 16.0 / row->ll_line * (n - 1) * bytes + bytes;
	/*
	 * Two-shot and push alike: the other n - 1 segments copied into a pool (read +
	 * write), n segments read by the reduce, recvbuff and n - 1 pool copies of the
	 * result written, n - 1 reduced segments gathered (read + write).
	 */
	if (path == NDET_PATH_TWOSHOT || path == NDET_PATH_PUSH)
		return 2 * (n - 1) * bytes / n + bytes + bytes + 2 * (n - 1) * bytes / n;
	/* Reduce-scatter (bytes: the send buffer): copy-in, n segments read, recvbuff. */
	if (path == NDET_PATH_SCATTER)
		return 2 * bytes + bytes + bytes / n;
	return 2 * bytes;
}

double perf_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int perf_compare_doubles(const void *a, const void *b)
{
	const double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

double perf_median(double *values, int count)
{
	qsort(values, (size_t)count, sizeof(values[0]), perf_compare_doubles);
	return count % 2 ? values[count / 2] : (values[count / 2 - 1] + values[count / 2]) / 2;
}

static ndet_status_t perf_allgather(void *context, const void *send, void *recv, size_t bytes)
{
	struct perf_rank *me = context;
	struct perf_world *world = me->world;
	world->sends[me->rank] = send;
	pthread_barrier_wait(&world->barrier);
	for (int r = 0; r < world->options.nranks; r++) {
		if (cudaMemcpyAsync((char *)recv + (size_t)r * bytes, world->sends[r], bytes,
				    cudaMemcpyDefault, 0) != cudaSuccess)
			return NDET_ERR_CUDA;
	}
	/*
	 * The contract is "complete when it returns": a device-to-device cudaMemcpy may
	 * return before its copy lands, and the peers reuse their send buffers once past
	 * the barrier below.  The legacy stream: no stream of our own (several ranks
	 * share one GPU's hardware queues in one process).
	 */
	if (cudaStreamSynchronize(0) != cudaSuccess)
		return NDET_ERR_CUDA;
	pthread_barrier_wait(&world->barrier);
	return NDET_OK;
}

static void perf_fill(ndet_dtype_t dtype, void *buffer, size_t count, uint64_t seed)
{
	uint64_t state = seed * 0x9E3779B97F4A7C15ull + 7;
	for (size_t i = 0; i < count; i++) {
		state ^= state << 13;
		state ^= state >> 7;
		state ^= state << 17;
		double value =
			ldexp(1.0 + (double)(state >> 40) / 16777216.0, (int)(state % 17) - 8) *
			((state >> 20) & 1 ? -1.0 : 1.0);
		switch (dtype) {
		case NDET_DTYPE_F32:
			((float *)buffer)[i] = (float)value;
			break;
		case NDET_DTYPE_F64:
			((double *)buffer)[i] = value;
			break;
		case NDET_DTYPE_F16:
			((uint16_t *)buffer)[i] = ndet_float_to_half((float)value);
			break;
		case NDET_DTYPE_BF16:
			((uint16_t *)buffer)[i] = ndet_float_to_bfloat16((float)value);
			break;
		case NDET_DTYPE_F8E4M3:
			/* 2^-4 ... 2^4: sums of 16 stay below its largest finite, 448 */
			((uint8_t *)buffer)[i] = ndet_float_to_fp8_e4m3((float)ldexp(value, -4));
			break;
		case NDET_DTYPE_F8E5M2:
			((uint8_t *)buffer)[i] = ndet_float_to_fp8_e5m2((float)value);
			break;
		default:
			break;
		}
	}
}

static uint64_t perf_seed(int rank, size_t count)
{
	return (uint64_t)rank * 7777 + count;
}

/* Why a kernel that waits for its peers may never see them on one GPU. */
#define PERF_RESIDENCY_HINT                                                                        \
	"With ranks sharing one GPU, every rank's blocks must be resident at once: lower "         \
	"NCCL_DET_MAX_BLOCKS so that ranks x blocks fits the GPU."

/* A failed call would time as a fast no-op: stop with the reason instead. */
void perf_check_engine(struct perf_rank *me)
{
	uint32_t kernel_error = 0;
	if (ndet_engine_error(me->world->engines[me->rank], &kernel_error) != NDET_OK) {
		fprintf(stderr,
			"nccl-det-perf: rank %d: the engine failed (kernel error %u: 1 timeout, 2 "
			"abort, 3 diverging call, 4 peer failure). " PERF_RESIDENCY_HINT "\n",
			me->rank, kernel_error);
		/* Where each rank's kernels stopped (printed once, by the first to see it). */
		static int described;
		const bool first = !__atomic_exchange_n(&described, 1, __ATOMIC_ACQ_REL);
		for (int r = 0; first && r < me->world->options.nranks; r++) {
			char text[256];
			if (me->world->engines[r] != NULL &&
			    ndet_engine_error_describe(me->world->engines[r], text, sizeof(text)) !=
				    0)
				fprintf(stderr, "nccl-det-perf: rank %d: %s\n", r, text);
		}
		perf_die();
	}
}

/* The rank whose result the checks read first: a reduce's root, else rank 0. */
static int perf_result_rank(const struct perf_world *world)
{
	const int root = perf_root(&world->options);
	return root >= 0 ? root : 0;
}

static const char *perf_nccl_call_name(const struct perf_world *world)
{
	switch (world->options.coll) {
	case NDET_COLL_REDUCE_SCATTER:
		return "ncclReduceScatter";
	case NDET_COLL_REDUCE:
		return "ncclReduce";
	default:
		return "ncclAllReduce";
	}
}

void perf_launch(struct perf_rank *me, enum perf_impl impl, const void *send, void *recv,
		 const struct perf_row *row)
{
	struct perf_world *world = me->world;
	const bool scatter = world->options.coll == NDET_COLL_REDUCE_SCATTER;
	/* Reduce-scatter: row->count is the whole send buffer, a multiple of the ranks. */
	const size_t count = scatter ? row->count / (size_t)world->options.nranks : row->count;
	if (impl == PERF_FLOOR) {
		PERF_CHECK((cudaError_t)ndet_kernel_empty(row->blocks > 0 ? row->blocks : 1,
							  me->stream));
		return;
	}
	if (impl == PERF_EXCHANGE) {
		PERF_CHECK((cudaError_t)ndet_kernel_flag_exchange(
			&me->exchange, row->blocks > 0 ? row->blocks : 1, me->stream));
		return;
	}
	if (impl == PERF_NDET) {
		const struct ndet_engine_call call = {
			.coll = (ndet_coll_t)world->options.coll,
			.sendbuff = send,
			.recvbuff = recv,
			.count = count,
			.dtype = row->dtype,
			.op = row->op,
			.root = perf_root(&world->options),
			.premul = row->premul ? NDET_PREMUL_HOST : NDET_PREMUL_NONE,
			.scalar_bits = row->premul ? me->premul_scalar_bits : 0};
		/* Failures are read from the engine after the calls (perf_check_engine). */
		(void)ndet_engine_collective(world->engines[me->rank], &call, me->stream);
		return;
	}
	const ncclDataType_t type = ndet_dtype_to_nccl(row->dtype);
	const ncclRedOp_t op = row->premul ? me->nccl_premul_op : ndet_op_to_nccl(row->op);
	ncclResult_t result;
	if (world->options.coll == NDET_COLL_REDUCE)
		result = world->nccl.fn.ncclReduce(send, recv, count, type, op, world->options.root,
						   world->comms[me->rank], me->stream);
	else
		result =
			(scatter ? world->nccl.fn.ncclReduceScatter : world->nccl.fn.ncclAllReduce)(
				send, recv, count, type, op, world->comms[me->rank], me->stream);
	if (result != ncclSuccess)
		perf_check_nccl(me, result, perf_nccl_call_name(world));
}

/* A flag exchange that gave up waiting would time as a fast one: stop instead. */
static void perf_check_exchange(struct perf_rank *me)
{
	uint32_t failed = 0;
	PERF_CHECK(
		cudaMemcpy(&failed, me->exchange.failed, sizeof(failed), cudaMemcpyDeviceToHost));
	if (failed != 0) {
		fprintf(stderr,
			"nccl-det-perf: rank %d: the flag exchange waited 5 s for a "
			"peer. " PERF_RESIDENCY_HINT "\n",
			me->rank);
		perf_die();
	}
}

/*
 * Time `iters` calls (eager), or one graph of `iters` calls launched -G times (as
 * nccl-tests' -G), between barriers; the time of one call.
 */
static double perf_time(struct perf_rank *me, enum perf_impl impl, enum perf_mode mode,
			const struct perf_row *row)
{
	struct perf_world *world = me->world;
	const int iters = world->options.iters;
	const bool symmetric = impl == PERF_NCCL_SYMMETRIC;
	const char *send = symmetric ? me->symmetric_send : me->send;
	char *recv = symmetric ? me->symmetric_recv : me->recv;
	cudaGraphExec_t exec = NULL;
	/*
	 * Eager warm-up first in both modes: NCCL connects lazily at a communicator's
	 * first call of a kind, which fails inside a capture.
	 */
	for (int i = 0; i < world->options.warmup; i++)
		perf_launch(me, impl, send, recv, row);
	PERF_CHECK(cudaStreamSynchronize(me->stream));
	pthread_barrier_wait(&world->barrier);
	if (mode == PERF_GRAPH) {
		cudaGraph_t graph;
		PERF_CHECK(cudaStreamBeginCapture(me->stream, cudaStreamCaptureModeThreadLocal));
		for (int i = 0; i < iters; i++)
			perf_launch(me, impl, send, recv, row);
		PERF_CHECK(cudaStreamEndCapture(me->stream, &graph));
		PERF_CHECK(cudaGraphInstantiate(&exec, graph, 0));
		PERF_CHECK(cudaGraphDestroy(graph));
		PERF_CHECK(cudaGraphUpload(exec, me->stream));
		PERF_CHECK(cudaStreamSynchronize(me->stream));
		/*
		 * Every rank's graph is built and on the GPU before any is launched: the
		 * ranks share one GPU, where building a large graph can wait for the
		 * device, and a launched peer's first kernel spins until this rank's
		 * runs, which would then never start (a stall no job with a GPU per
		 * rank meets).
		 */
		pthread_barrier_wait(&world->barrier);
		PERF_CHECK(cudaGraphLaunch(exec, me->stream)); /* the graph's own warm-up */
	}
	PERF_CHECK(cudaStreamSynchronize(me->stream));
	pthread_barrier_wait(&world->barrier);
	double start = perf_now();
	const int launches = mode == PERF_GRAPH ? world->options.graph_launches : 1;
	if (mode == PERF_GRAPH) {
		for (int l = 0; l < launches; l++)
			PERF_CHECK(cudaGraphLaunch(exec, me->stream));
	} else {
		for (int i = 0; i < iters; i++)
			perf_launch(me, impl, send, recv, row);
	}
	PERF_CHECK(cudaStreamSynchronize(me->stream));
	pthread_barrier_wait(&world->barrier);
	double elapsed = perf_now() - start;
	if (impl == PERF_NDET)
		perf_check_engine(me);
	else if (impl == PERF_EXCHANGE)
		perf_check_exchange(me);
	else if (impl != PERF_FLOOR) /* its launches are checked one by one */
		perf_check_nccl(me, ncclSuccess, perf_nccl_call_name(world));
	if (exec != NULL)
		PERF_CHECK(cudaGraphExecDestroy(exec));
	return elapsed / ((double)iters * launches);
}

static void perf_measure_copy(struct perf_world *world)
{
	const size_t bytes = 256u << 20;
	void *a, *b;
	cudaEvent_t start, stop;
	PERF_CHECK(cudaMalloc(&a, bytes));
	PERF_CHECK(cudaMalloc(&b, bytes));
	PERF_CHECK(cudaEventCreate(&start));
	PERF_CHECK(cudaEventCreate(&stop));
	PERF_CHECK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
	PERF_CHECK(cudaEventRecord(start, 0));
	for (int i = 0; i < 10; i++)
		PERF_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0));
	PERF_CHECK(cudaEventRecord(stop, 0));
	PERF_CHECK(cudaEventSynchronize(stop));
	float ms = 0;
	PERF_CHECK(cudaEventElapsedTime(&ms, start, stop));
	world->copy_gbps = 2.0 * (double)bytes * 10 / (ms * 1e-3) / 1e9;
	PERF_CHECK(cudaFree(a));
	PERF_CHECK(cudaFree(b));
	PERF_CHECK(cudaEventDestroy(start));
	PERF_CHECK(cudaEventDestroy(stop));
}

/* Ranks 0 and 1 ping-pong a flag; the floor under any all-reduce's latency. */
static void perf_measure_flag_rtt(struct perf_rank *me)
{
	struct perf_world *world = me->world;
	const int iters = 2000;
	if (me->rank < 2) {
		PERF_CHECK(cudaMalloc((void **)&world->flag_pair[me->rank], sizeof(uint64_t)));
		PERF_CHECK(cudaMemset(world->flag_pair[me->rank], 0, sizeof(uint64_t)));
		PERF_CHECK(cudaDeviceSynchronize());
	}
	pthread_barrier_wait(&world->barrier);
	if (me->rank < 2) {
		int peer = 1 - me->rank;
		if (world->ngpus > 1 && me->rank == 0) {
			cudaError_t err = cudaDeviceEnablePeerAccess(peer % world->ngpus, 0);
			if (err != cudaSuccess)
				(void)cudaGetLastError();
		}
		uint64_t *result = NULL;
		PERF_CHECK(cudaMalloc((void **)&result, sizeof(uint64_t)));
		PERF_CHECK((cudaError_t)ndet_kernel_flag_pingpong(
			world->flag_pair[me->rank], world->flag_pair[peer], iters, me->rank == 0,
			result, me->stream));
		PERF_CHECK(cudaStreamSynchronize(me->stream));
		uint64_t ns = 0;
		PERF_CHECK(cudaMemcpy(&ns, result, sizeof(ns), cudaMemcpyDeviceToHost));
		if (me->rank == 0)
			world->flag_rtt_us = ns == 0 ? -1.0 : (double)ns / iters / 1000.0;
		PERF_CHECK(cudaFree(result));
	}
	pthread_barrier_wait(&world->barrier);
	if (me->rank < 2)
		PERF_CHECK(cudaFree(world->flag_pair[me->rank]));
}

/* Every rank's flags, counters and failure word for PERF_EXCHANGE (collective). */
static void perf_exchange_setup(struct perf_rank *me)
{
	struct perf_world *world = me->world;
	const int n = world->options.nranks;
	const size_t flag_bytes = NDET_BENCH_EXCHANGE_BYTES;
	struct ndet_bench_exchange *x = &me->exchange;
	PERF_CHECK(cudaMalloc((void **)&world->exchange_flags[me->rank], flag_bytes));
	PERF_CHECK(cudaMemset(world->exchange_flags[me->rank], 0, flag_bytes));
	PERF_CHECK(cudaMalloc((void **)&x->counters,
			      NDET_BENCH_EXCHANGE_MAX_BLOCKS * sizeof(uint64_t)));
	PERF_CHECK(cudaMemset(x->counters, 0, NDET_BENCH_EXCHANGE_MAX_BLOCKS * sizeof(uint64_t)));
	PERF_CHECK(cudaMalloc((void **)&x->failed, sizeof(uint32_t)));
	PERF_CHECK(cudaMemset(x->failed, 0, sizeof(uint32_t)));
	PERF_CHECK(cudaDeviceSynchronize());
	pthread_barrier_wait(&world->barrier);
	/* Peer access between the ranks' GPUs: the engines' setup turned it on. */
	for (int q = 0; q < n; q++)
		x->flags[q] = world->exchange_flags[q];
	x->nranks = n;
	x->rank = me->rank;
	x->one_thread = world->options.exchange_one_thread;
}

static void perf_exchange_teardown(struct perf_rank *me)
{
	pthread_barrier_wait(&me->world->barrier);
	PERF_CHECK(cudaFree(me->world->exchange_flags[me->rank]));
	PERF_CHECK(cudaFree(me->exchange.counters));
	PERF_CHECK(cudaFree(me->exchange.failed));
}

/* Elements whose bits differ between `got` and `want` (element size `size`). */
static long long perf_count_differ(const char *got, const char *want, size_t count, size_t size)
{
	long long differ = 0;
	for (size_t i = 0; i < count; i++)
		differ += memcmp(got + i * size, want + i * size, size) != 0;
	return differ;
}

/*
 * Small calls are timed against their floor: the empty kernel of their grid, launched
 * the same way (eager, or a graph of as many launches), in bare flag round trips; so
 * is the flag exchange of that grid, what any call's synchronisation costs.
 */
static bool perf_floor_row(const struct perf_world *world, const struct perf_row *row)
{
	return row->bytes <= PERF_FLOOR_MAX_BYTES && world->options.nranks >= 2 &&
	       world->flag_rtt_us > 0;
}

/*
 * "#   4096 B: floor (empty kernel, 2 blocks) eager 6.31 us, graph 0.82 us; above it:
 * eager 0.7, graph 3.4 bare flag round trips; flag exchange above it: eager 0.3, graph 1.2"
 */
static void perf_print_floor(const struct perf_world *world, const struct perf_row *row)
{
	char floor[96] = "", above[96] = "", exchange[96] = "";
	size_t f = 0, a = 0, x = 0;
	const double rt = world->flag_rtt_us * 1e-6;
	for (int mode = 0; mode < PERF_MODE_COUNT; mode++) {
		const double call = row->seconds[mode][PERF_NDET], empty = row->floor_seconds[mode];
		if (call <= 0 || empty <= 0)
			continue;
		const char *sep = f > 0 ? ", " : "";
		f += (size_t)snprintf(floor + f, sizeof(floor) - f, "%s%s %.2f us", sep,
				      perf_mode_names[mode], empty * 1e6);
		a += (size_t)snprintf(above + a, sizeof(above) - a, "%s%s %.1f", sep,
				      perf_mode_names[mode], (call - empty) / rt);
		if (row->exchange_seconds[mode] > 0)
			x += (size_t)snprintf(exchange + x, sizeof(exchange) - x, "%s%s %.1f",
					      x > 0 ? ", " : "", perf_mode_names[mode],
					      (row->exchange_seconds[mode] - empty) / rt);
		if (f >= sizeof(floor) || a >= sizeof(above) || x >= sizeof(exchange))
			return;
	}
	if (f > 0)
		printf("#   %zu B: floor (empty kernel, %u blocks) %s; above it: %s bare flag "
		       "round trips%s%s\n",
		       row->bytes, row->blocks > 0 ? row->blocks : 1, floor, above,
		       x > 0 ? "; flag exchange above it: " : "", exchange);
}

/*
 * What NDET_PERF_TEST_WRONG asks of the first checked row: 1, a wrong expected result;
 * 2, a reduce's non-root ranks expected to have written their receive buffers; 0,
 * nothing (other values, later rows).
 */
static int perf_test_wrong(struct perf_world *world)
{
	const char *value = getenv("NDET_PERF_TEST_WRONG");
	if (value == NULL || world->test_wrong_done)
		return 0;
	const int mode = strcmp(value, "1") == 0 ? 1 : strcmp(value, "2") == 0 ? 2 : 0;
	world->test_wrong_done = mode != 0;
	return mode;
}

/* What perf_check fills the receive buffers with before its calls. */
#define PERF_RECV_FILL 0x5a

/*
 * Rank 0, after every rank's fresh result is in recv_host: bit-exact against the CPU
 * reference (a reduce: the root's; every other rank's receive buffer still holds
 * PERF_RECV_FILL), size invariance as the result rank found it, NCCL's elements (of
 * the result rank) off the tree.
 */
static void perf_judge(struct perf_rank *me, struct perf_row *row)
{
	struct perf_world *world = me->world;
	const int n = world->options.nranks;
	const size_t size = ndet_dtype_size(row->dtype), bytes = row->bytes;
	void *inputs[NDET_MAX_RANKS];
	const void *views[NDET_MAX_RANKS];
	for (int r = 0; r < n; r++) {
		inputs[r] = malloc(bytes);
		perf_fill(row->dtype, inputs[r], row->count, perf_seed(r, row->count));
		views[r] = inputs[r];
	}
	char *expected = malloc(bytes);
	if (row->premul) {
		unsigned char scalars[NDET_MAX_RANKS * sizeof(uint64_t)];
		for (int r = 0; r < n; r++) {
			const uint64_t bits = perf_premul_scalar_bits(row->dtype, r);
			memcpy(scalars + (size_t)r * size, &bits, size); /* little-endian */
		}
		ndet_reference_premulsum(views, scalars, n, expected, row->count, row->dtype);
	} else {
		ndet_reference_allreduce(views, n, expected, row->count, row->dtype, row->op);
	}
	/*
	 * NDET_PERF_TEST_WRONG (the GPU suite's perf-fail and perf-reduce steps): in the
	 * first checked row, 1 flips the lowest bit of the expected first element, 2 that
	 * of the first byte a reduce's non-root ranks must leave as it was, so that each
	 * failure path (FAIL, #wrong, the closing lines, exit status 1) runs on a healthy
	 * GPU.
	 */
	const int wrong = perf_test_wrong(world);
	if (wrong == 1)
		expected[0] ^= 1;
	/* Reduce-scatter: rank r's block is block r of the all-reduce, bit for bit. */
	const bool scatter = world->options.coll == NDET_COLL_REDUCE_SCATTER;
	const size_t block = scatter ? bytes / (size_t)n : bytes;
	const int root = perf_root(&world->options);
	char *untouched = NULL;
	if (root >= 0) {
		untouched = malloc(bytes);
		if (untouched == NULL) {
			fprintf(stderr, "nccl-det-perf: out of host memory\n");
			perf_die();
		}
		memset(untouched, PERF_RECV_FILL, bytes);
		if (wrong == 2)
			untouched[0] ^= 1;
	}
	row->wrong = 0;
	if (world->wrong < 0)
		world->wrong = 0;
	for (int r = 0; r < n; r++) {
		const char *want = root >= 0 && r != root
					   ? untouched
					   : expected + (scatter ? (size_t)r * block : 0);
		row->wrong += perf_count_differ(world->recv_host[r], want, block / size, size);
	}
	free(untouched);
	world->wrong += row->wrong;
	const bool same = row->wrong == 0;
	row->exact = same ? "OK" : "FAIL";
	for (int r = 0; r < n; r++)
		free(inputs[r]);
	row->invariant = world->invariant;
	if (world->nccl_on)
		row->nccl_differ =
			perf_count_differ(world->nccl_host, expected, block / size, size);
	free(expected);
	if (!same || strcmp(row->invariant, "FAIL") == 0)
		world->failures++;
}

/*
 * The result rank's offset call of perf_check in recv2 against its fresh result in
 * recv_host: "OK", "FAIL", or "-" where there is none (one element, reduce-scatter).
 */
static const char *perf_size_invariant(struct perf_rank *me, const struct perf_row *row)
{
	const size_t size = ndet_dtype_size(row->dtype), bytes = row->bytes;
	if (row->count < 2 || me->world->options.coll == NDET_COLL_REDUCE_SCATTER)
		return "-";
	char *second = malloc(bytes);
	if (second == NULL) {
		fprintf(stderr, "nccl-det-perf: out of host memory\n");
		perf_die();
	}
	PERF_CHECK(cudaMemcpy(second, me->recv2 + size + 8, bytes - size, cudaMemcpyDeviceToHost));
	const bool same = memcmp(second, me->world->recv_host[me->rank] + size, bytes - size) == 0;
	free(second);
	return same ? "OK" : "FAIL";
}

/* One fresh call, the same elements [1, count) in a smaller call at another offset,
 * and NCCL's result of the fresh call. */
static void perf_check(struct perf_rank *me, struct perf_row *row)
{
	struct perf_world *world = me->world;
	const size_t size = ndet_dtype_size(row->dtype), bytes = row->bytes;
	PERF_CHECK(cudaMemsetAsync(me->recv, PERF_RECV_FILL, bytes, me->stream));
	PERF_CHECK(cudaMemsetAsync(me->recv2, PERF_RECV_FILL, bytes + 16, me->stream));
	perf_launch(me, PERF_NDET, me->send, me->recv, row);
	/* The size-invariance call: not for reduce-scatter (a smaller one moves blocks). */
	if (row->count > 1 && world->options.coll != NDET_COLL_REDUCE_SCATTER) {
		struct perf_row smaller = *row;
		smaller.count--;
		perf_launch(me, PERF_NDET, me->send + size, me->recv2 + size + 8, &smaller);
	}
	PERF_CHECK(cudaStreamSynchronize(me->stream));
	perf_check_engine(me);
	PERF_CHECK(cudaMemcpy(world->recv_host[me->rank], me->recv, bytes, cudaMemcpyDeviceToHost));
	if (me->rank == perf_result_rank(world))
		world->invariant = perf_size_invariant(me, row);
	if (world->nccl_on) {
		perf_launch(me, PERF_NCCL, me->send, me->recv, row);
		PERF_CHECK(cudaStreamSynchronize(me->stream));
		perf_check_nccl(me, ncclSuccess, perf_nccl_call_name(world));
		if (me->rank == perf_result_rank(world))
			PERF_CHECK(cudaMemcpy(world->nccl_host, me->recv, bytes,
					      cudaMemcpyDeviceToHost));
	}
	pthread_barrier_wait(&world->barrier);
	if (me->rank == 0)
		perf_judge(me, row);
}

/* perf_for_each_row's visitor of a rank thread: measure, check, rank 0 prints. */
static void perf_rank_row(void *context, struct perf_row *row)
{
	struct perf_rank *me = context;
	struct perf_world *world = me->world;
	const struct perf_options *o = &world->options;
	const int n = o->nranks;

	perf_fill(row->dtype, me->host_in, row->count, perf_seed(me->rank, row->count));
	/* Ordered on the stream the calls use: a pageable cudaMemcpy may return before its
	 * DMA lands, and a non-blocking stream does not wait for the legacy stream. */
	PERF_CHECK(cudaMemcpyAsync(me->send, me->host_in, row->bytes, cudaMemcpyHostToDevice,
				   me->stream));
	if (world->symmetric_on)
		PERF_CHECK(cudaMemcpyAsync(me->symmetric_send, me->host_in, row->bytes,
					   cudaMemcpyHostToDevice, me->stream));
	PERF_CHECK(cudaStreamSynchronize(me->stream));
	/* A PreMulSum row's scalar of this rank, and NCCL's op with it, for this row's calls. */
	me->premul_scalar_bits = row->premul ? perf_premul_scalar_bits(row->dtype, me->rank) : 0;
	const bool nccl_premul = row->premul && (world->nccl_on || world->symmetric_on);
	if (nccl_premul) {
		perf_check_nccl(me,
				world->nccl.fn.ncclRedOpCreatePreMulSum(
					&me->nccl_premul_op, &me->premul_scalar_bits,
					ndet_dtype_to_nccl(row->dtype), ncclScalarHostImmediate,
					world->comms[me->rank]),
				"ncclRedOpCreatePreMulSum");
	}
	/* Every rank's upload is done before any rank launches a call its peers wait in. */
	pthread_barrier_wait(&world->barrier);
	for (int mode = 0; mode < PERF_MODE_COUNT; mode++) {
		if (!(o->modes & (1u << mode)))
			continue;
		for (int impl = 0; impl < PERF_IMPL_COUNT; impl++)
			if (impl == PERF_NDET || (impl == PERF_NCCL && world->nccl_on) ||
			    (impl == PERF_NCCL_SYMMETRIC && world->symmetric_on))
				row->seconds[mode][impl] = perf_time(me, (enum perf_impl)impl,
								     (enum perf_mode)mode, row);
		if (perf_floor_row(world, row)) {
			row->floor_seconds[mode] =
				perf_time(me, PERF_FLOOR, (enum perf_mode)mode, row);
			row->exchange_seconds[mode] =
				perf_time(me, PERF_EXCHANGE, (enum perf_mode)mode, row);
		}
	}
	if (o->check && row->bytes <= o->check_max_bytes)
		perf_check(me, row);
	if (o->trace && row->blocks > 0)
		perf_trace(me, row);
	if (nccl_premul)
		perf_check_nccl(
			me,
			world->nccl.fn.ncclRedOpDestroy(me->nccl_premul_op, world->comms[me->rank]),
			"ncclRedOpDestroy");
	pthread_barrier_wait(&world->barrier);
	if (me->rank != 0)
		return;

	double best = -1;
	for (int mode = 0; mode < PERF_MODE_COUNT; mode++) {
		double s = row->seconds[mode][PERF_NDET];
		if (s > 0 && (best < 0 || s < best))
			best = s;
	}
	/* No byte model for a reduce: only its root writes, its ranks move unlike bytes. */
	if (o->coll != NDET_COLL_REDUCE)
		row->kernel_gbps = perf_kernel_bytes(row, (double)row->bytes, n) * n / best / 1e9;
	if (world->ngpus == 1 && row->kernel_gbps > 0) {
		row->vs_copy = row->kernel_gbps / world->copy_gbps;
		if (row->bytes >= PERF_LARGE_MIN_BYTES) {
			world->large_rows++;
			world->ratio_sum_large += row->vs_copy;
			if (row->vs_copy > world->best_ratio_large)
				world->best_ratio_large = row->vs_copy;
		}
	}
	perf_print_row(world, row);
	perf_note_ratios(world, row);
	if (o->trace && row->blocks > 0)
		perf_trace_print(world, row);
	if (perf_floor_row(world, row))
		perf_print_floor(world, row);
}

/* A rank's thread: its engine, the copy and flag baselines, then every row. */
static void *perf_rank_main(void *argument)
{
	struct perf_rank *me = argument;
	struct perf_world *world = me->world;
	const struct perf_options *o = &world->options;
	struct ndet_engine_config config = perf_engine_config(world, me->rank);
	PERF_CHECK(cudaSetDevice(config.cuda_device));
	PERF_CHECK(cudaStreamCreateWithFlags(&me->stream, cudaStreamNonBlocking));
	/* Before setup's exchange, which every rank passes before any kernel of theirs spins. */
	const cudaError_t bench_loaded = (cudaError_t)ndet_bench_load();

	struct ndet_setup_verdict verdict;
	ndet_status_t st = ndet_engine_create(&config, perf_allgather, me,
					      &world->engines[me->rank], &verdict);
	if (st != NDET_OK) {
		fprintf(stderr, "nccl-det-perf: rank %d: engine setup failed: %s (%s, rank %d)\n",
			me->rank, ndet_status_name(st), ndet_verdict_reason_name(verdict.reason),
			verdict.offending_rank);
		perf_die();
	}
	if (bench_loaded != cudaSuccess) {
		fprintf(stderr, "nccl-det-perf: rank %d: its timing kernels cannot load here: %s\n",
			me->rank, cudaGetErrorString(bench_loaded));
		perf_die();
	}
	if (me->rank == 0)
		perf_measure_copy(world);
	if (o->nranks >= 2) {
		perf_measure_flag_rtt(me);
		perf_exchange_setup(me);
	}
	if (me->rank == 0) {
		printf("# device-to-device copy: %.1f GB/s (bytes read + written)",
		       world->copy_gbps);
		if (o->nranks >= 2)
			printf(", bare flag round trip: %.2f us", world->flag_rtt_us);
		printf("\n#\n");
		perf_print_header(world);
	}

	PERF_CHECK(cudaMalloc((void **)&me->send, o->max_bytes + 16));
	PERF_CHECK(cudaMalloc((void **)&me->recv, o->max_bytes + 16));
	PERF_CHECK(cudaMalloc((void **)&me->recv2, o->max_bytes + 16));
	me->host_in = malloc(o->max_bytes + 16);
	world->recv_host[me->rank] = malloc(o->max_bytes + 16);
	if (me->host_in == NULL || world->recv_host[me->rank] == NULL) {
		fprintf(stderr, "nccl-det-perf: rank %d: out of host memory\n", me->rank);
		perf_die();
	}
	if (world->symmetric_on)
		perf_symmetric_setup(me);
	perf_for_each_row(world, perf_rank_row, me);
	if (world->symmetric_on)
		perf_symmetric_teardown(me);

	PERF_CHECK(cudaFree(me->send));
	PERF_CHECK(cudaFree(me->recv));
	PERF_CHECK(cudaFree(me->recv2));
	free(me->host_in);
	if (o->nranks >= 2)
		perf_exchange_teardown(me);
	pthread_barrier_wait(&world->barrier);
	ndet_engine_destroy(world->engines[me->rank], true);
	free(world->recv_host[me->rank]);
	PERF_CHECK(cudaStreamDestroy(me->stream));
	return NULL;
}

int perf_run(struct perf_world *world)
{
	const struct perf_options *o = &world->options;
	if (world->nccl_on) {
		int devices[NDET_MAX_RANKS];
		for (int r = 0; r < o->nranks; r++)
			devices[r] = r;
		ncclResult_t result =
			world->nccl.fn.ncclCommInitAll(world->comms, o->nranks, devices);
		if (result != ncclSuccess) {
			fprintf(stderr, "nccl-det-perf: ncclCommInitAll failed: %s\n",
				world->nccl.fn.ncclGetErrorString(result));
			return 1;
		}
		/* Only checked sizes come back to the host. */
		world->nccl_host = malloc(
			(o->max_bytes < o->check_max_bytes ? o->max_bytes : o->check_max_bytes) +
			16);
		if (world->nccl_host == NULL) {
			fprintf(stderr, "nccl-det-perf: out of host memory\n");
			return 1;
		}
	}
	pthread_barrier_init(&world->barrier, NULL, (unsigned)o->nranks);
	pthread_t threads[NDET_MAX_RANKS];
	struct perf_rank ranks[NDET_MAX_RANKS];
	for (int r = 0; r < o->nranks; r++) {
		ranks[r] = (struct perf_rank){.world = world, .rank = r};
		pthread_create(&threads[r], NULL, perf_rank_main, &ranks[r]);
	}
	for (int r = 0; r < o->nranks; r++)
		pthread_join(threads[r], NULL);
	if (world->nccl_on) {
		for (int r = 0; r < o->nranks; r++)
			(void)world->nccl.fn.ncclCommDestroy(world->comms[r]);
		free(world->nccl_host);
	}
	return 0;
}
