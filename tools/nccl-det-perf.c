/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * nccl-det-perf: all-reduce (or, with --coll reducescatter, reduce-scatter) benchmark
 * of the deterministic engine, in the style of nccl-tests.  Ranks are threads of this process: one
 * per GPU when there are several, else n ranks sharing GPU 0 (their kernels run concurrently, like
 * processes under MPS).  For every size it reports eager and CUDA-graph time, algbw and busbw, a
 * bit-exact check against the CPU reference, and a size-invariance check (the same
 * elements reduced in a smaller, offset call give the same bits).  On one GPU, where
 * NVLink numbers cannot exist, it reports the kernels' bytes read + written per second
 * against a device-to-device copy measured in the same run, and small-message
 * latency against a bare flag round trip.
 */
#include "config.h"

#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "nccl_det.h"
#include "ndet_engine.h"
#include "ndet_kernels.h"
#include "ndet_reference.h"
#include "ndet_settings.h"

#define PERF_CHECK(call) \
	do { \
		cudaError_t perf_err_ = (call); \
		if (perf_err_ != cudaSuccess) { \
			fprintf(stderr, "nccl-det-perf: %s failed: %s\n", #call, \
				cudaGetErrorString(perf_err_)); \
			exit(1); \
		} \
	} while (0)

struct perf_options {
	int nranks;
	size_t min_bytes, max_bytes;
	double factor;
	int warmup, iters;
	int graph; /* 0 eager, 1 graph, 2 both */
	bool check;
	size_t check_max_bytes;
	unsigned dtypes; /* bit per ndet_dtype_t */
	unsigned ops;    /* bit per ndet_op_t */
	ndet_coll_t coll; /* --coll: NDET_COLL_ALLREDUCE or NDET_COLL_REDUCE_SCATTER */
};

struct perf_world {
	struct perf_options options;
	int ngpus;
	pthread_barrier_t barrier;
	const void *sends[NDET_MAX_RANKS];
	struct ndet_engine *engines[NDET_MAX_RANKS];
	char *recv_host[NDET_MAX_RANKS];
	/* Per-size results, written by rank 0. */
	double copy_gbps, flag_rtt_us;
	double best_ratio_large;
	int large_rows;
	double ratio_sum_large;
	int failures;
	uint64_t *flag_pair[2];
};

struct perf_rank {
	struct perf_world *world;
	int rank;
};

static double perf_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static ndet_status_t perf_allgather(void *context, const void *send, void *recv, size_t bytes)
{
	struct perf_rank *me = context;
	struct perf_world *world = me->world;
	world->sends[me->rank] = send;
	pthread_barrier_wait(&world->barrier);
	for (int r = 0; r < world->options.nranks; r++) {
		if (cudaMemcpy((char *)recv + (size_t)r * bytes, world->sends[r], bytes,
			       cudaMemcpyDefault) != cudaSuccess)
			return NDET_ERR_CUDA;
	}
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
		double value = ldexp(1.0 + (double)(state >> 40) / 16777216.0,
				     (int)(state % 17) - 8) *
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
		default:
			break;
		}
	}
}

/*
 * One call of the benchmarked collective; count is the all-reduce's count, or the
 * reduce-scatter's recvcount (nccl-tests' convention: sizes are whole send buffers).
 */
static void perf_call(struct ndet_engine *engine, ndet_coll_t coll, const void *send, void *recv,
		      size_t count, ndet_dtype_t dtype, ndet_op_t op, cudaStream_t stream)
{
	const struct ndet_engine_call call = {.coll = coll,
					      .sendbuff = send,
					      .recvbuff = recv,
					      .count = count,
					      .dtype = dtype,
					      .op = op};
	(void)ndet_engine_collective(engine, &call, stream);
}

/* Bytes one rank's kernel reads + writes for one call (see kernels/ndet_kernels.h). */
static double perf_kernel_bytes(const struct ndet_plan *plan, double bytes, int n)
{
	/* Reduce-scatter of `bytes` sent: copy-in (read, write), n segments read, 1/n written. */
	if (plan->path == NDET_PATH_SCATTER)
		return 3 * bytes + bytes / n;
	if (plan->path == NDET_PATH_ONESHOT)
		return (n + 3) * bytes;
	if (plan->path == NDET_PATH_TWOSHOT)
		return 2 * bytes + (n - 1) * bytes / n + bytes + 2 * bytes / n +
		       (n - 1) * bytes / n;
	return 2 * bytes;
}

static const char *perf_path_name(ndet_path_t path)
{
	switch (path) {
	case NDET_PATH_ONESHOT:
		return "1shot";
	case NDET_PATH_TWOSHOT:
		return "2shot";
	case NDET_PATH_COPY:
		return "copy";
	case NDET_PATH_SCATTER:
		return "scattr";
	default:
		return "none";
	}
}

/* A failed call would time as a fast no-op: stop with the reason instead. */
static void perf_check_engine(struct perf_rank *me)
{
	uint32_t kernel_error = 0;
	if (ndet_engine_error(me->world->engines[me->rank], &kernel_error) != NDET_OK) {
		fprintf(stderr,
			"nccl-det-perf: rank %d: the engine failed (kernel error %u: 1 timeout, 2 "
			"abort, 3 diverging call, 4 peer failure). With ranks sharing one GPU, "
			"every rank's blocks must be resident at once: lower NCCL_DET_MAX_BLOCKS so "
			"that ranks x blocks fits the GPU.\n",
			me->rank, kernel_error);
		exit(1);
	}
}

/* Time `iters` calls (eager) or one graph of `iters` calls, between barriers. */
static double perf_time(struct perf_rank *me, cudaStream_t stream, const void *send,
			void *recv, size_t count, ndet_dtype_t dtype, ndet_op_t op, bool graph)
{
	struct perf_world *world = me->world;
	struct ndet_engine *engine = world->engines[me->rank];
	const int iters = world->options.iters;
	const ndet_coll_t coll = world->options.coll;
	cudaGraphExec_t exec = NULL;
	if (graph) {
		cudaGraph_t g;
		PERF_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
		for (int i = 0; i < iters; i++)
			perf_call(engine, coll, send, recv, count, dtype, op, stream);
		PERF_CHECK(cudaStreamEndCapture(stream, &g));
		PERF_CHECK(cudaGraphInstantiate(&exec, g, 0));
		PERF_CHECK(cudaGraphDestroy(g));
		PERF_CHECK(cudaGraphLaunch(exec, stream)); /* warm-up */
	} else {
		for (int i = 0; i < world->options.warmup; i++)
			perf_call(engine, coll, send, recv, count, dtype, op, stream);
	}
	PERF_CHECK(cudaStreamSynchronize(stream));
	pthread_barrier_wait(&world->barrier);
	double start = perf_now();
	if (graph) {
		PERF_CHECK(cudaGraphLaunch(exec, stream));
	} else {
		for (int i = 0; i < iters; i++)
			perf_call(engine, coll, send, recv, count, dtype, op, stream);
	}
	PERF_CHECK(cudaStreamSynchronize(stream));
	pthread_barrier_wait(&world->barrier);
	double elapsed = perf_now() - start;
	perf_check_engine(me);
	if (exec != NULL)
		PERF_CHECK(cudaGraphExecDestroy(exec));
	return elapsed / iters;
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
static void perf_measure_flag_rtt(struct perf_rank *me, cudaStream_t stream)
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
		PERF_CHECK((cudaError_t)ndet_kernel_flag_pingpong(world->flag_pair[me->rank],
								  world->flag_pair[peer], iters,
								  me->rank == 0, result, stream));
		PERF_CHECK(cudaStreamSynchronize(stream));
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

static void *perf_rank_main(void *argument)
{
	struct perf_rank *me = argument;
	struct perf_world *world = me->world;
	const struct perf_options *o = &world->options;
	const int n = o->nranks;
	const int device = me->rank % world->ngpus;
	PERF_CHECK(cudaSetDevice(device));
	cudaStream_t stream;
	PERF_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

	const struct ndet_settings *settings = ndet_settings_get();
	struct ndet_engine_config config = {
		.rank = me->rank,
		.nranks = n,
		.cuda_device = device,
		.pool_size = settings->pool_size,
		.max_blocks = settings->max_blocks,
		.oneshot_max = settings->oneshot_max,
		.timeout_ms = 20000,
		.max_memory = settings->max_memory,
		.settings_hash = ndet_settings_agreement_hash(settings),
		.test_fail_rank = -1,
	};
	struct ndet_setup_verdict verdict;
	ndet_status_t st =
		ndet_engine_create(&config, perf_allgather, me, &world->engines[me->rank], &verdict);
	if (st != NDET_OK) {
		fprintf(stderr, "nccl-det-perf: rank %d: engine setup failed: %s (%s, rank %d)\n",
			me->rank, ndet_status_name(st), ndet_verdict_reason_name(verdict.reason),
			verdict.offending_rank);
		exit(1);
	}
	if (me->rank == 0)
		perf_measure_copy(world);
	if (n >= 2)
		perf_measure_flag_rtt(me, stream);
	if (me->rank == 0) {
		printf("# device-to-device copy: %.1f GB/s (bytes read + written)", world->copy_gbps);
		if (n >= 2)
			printf(", bare flag round trip: %.2f us", world->flag_rtt_us);
		printf("\n#\n");
		printf("# %12s %12s %5s %5s %6s | %10s %8s %8s | %10s %8s %8s | %6s %9s | %9s %7s\n",
		       "size(B)", "count", "type", "redop", "path", "eager(us)", "algbw", "busbw",
		       "graph(us)", "algbw", "busbw", "exact", "size-inv", "kern GB/s",
		       "vs copy");
	}

	const size_t max_bytes = o->max_bytes;
	char *send = NULL, *recv = NULL, *recv2 = NULL;
	PERF_CHECK(cudaMalloc((void **)&send, max_bytes + 16));
	PERF_CHECK(cudaMalloc((void **)&recv, max_bytes + 16));
	PERF_CHECK(cudaMalloc((void **)&recv2, max_bytes + 16));
	char *host_in = malloc(max_bytes + 16);
	world->recv_host[me->rank] = malloc(max_bytes + 16);

	const bool scatter = o->coll == NDET_COLL_REDUCE_SCATTER;
	for (int dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
		if (!(o->dtypes & (1u << dtype)))
			continue;
		for (int op = 0; op < NDET_OP_COUNT; op++) {
			if (!(o->ops & (1u << op)))
				continue;
			const size_t size = ndet_dtype_size((ndet_dtype_t)dtype);
			for (double b = (double)o->min_bytes; b <= (double)max_bytes + 0.5;
			     b = b * o->factor > b ? b * o->factor : b + 1) {
				size_t count = (size_t)b / size;
				/* Reduce-scatter: count is the recvcount of n blocks of b bytes. */
				if (scatter)
					count /= (size_t)n;
				if (count == 0)
					count = 1;
				const size_t elements = scatter ? count * (size_t)n : count;
				const size_t bytes = elements * size;
				if (bytes > max_bytes)
					break;
				perf_fill((ndet_dtype_t)dtype, host_in, elements,
					  (uint64_t)me->rank * 7777 + count);
				PERF_CHECK(cudaMemcpy(send, host_in, bytes, cudaMemcpyHostToDevice));
				double eager = -1, graph = -1;
				if (o->graph != 1)
					eager = perf_time(me, stream, send, recv, count,
							  (ndet_dtype_t)dtype, (ndet_op_t)op, false);
				if (o->graph != 0)
					graph = perf_time(me, stream, send, recv, count,
							  (ndet_dtype_t)dtype, (ndet_op_t)op, true);

				/* Checks: one fresh call, then the same elements [1, count) in a
				 * smaller call at another offset. */
				const char *exact = "-", *invariant = "-";
				if (o->check && bytes <= o->check_max_bytes) {
					PERF_CHECK(cudaMemset(recv, 0x5a, bytes));
					PERF_CHECK(cudaMemset(recv2, 0x5a, bytes));
					perf_call(world->engines[me->rank], o->coll, send, recv,
						  count, (ndet_dtype_t)dtype, (ndet_op_t)op,
						  stream);
					/* Reduce-scatter: a smaller call has other rank blocks. */
					if (count > 1 && !scatter)
						ndet_engine_allreduce(world->engines[me->rank],
								      send + size, recv2 + size + 8,
								      count - 1, (ndet_dtype_t)dtype,
								      (ndet_op_t)op, stream);
					PERF_CHECK(cudaStreamSynchronize(stream));
					PERF_CHECK(cudaMemcpy(world->recv_host[me->rank], recv,
							      count * size,
							      cudaMemcpyDeviceToHost));
					pthread_barrier_wait(&world->barrier);
					if (me->rank == 0) {
						void *inputs[NDET_MAX_RANKS];
						const void *views[NDET_MAX_RANKS];
						for (int r = 0; r < n; r++) {
							inputs[r] = malloc(bytes);
							perf_fill((ndet_dtype_t)dtype, inputs[r],
								  elements,
								  (uint64_t)r * 7777 + count);
							views[r] = inputs[r];
						}
						/* The all-reduce; a reduce-scatter's block r is its
						 * slice r. */
						char *expected = malloc(bytes);
						ndet_reference_allreduce(
							views, n, expected, elements,
							(ndet_dtype_t)dtype, (ndet_op_t)op);
						bool same = true;
						for (int r = 0; r < n && same; r++)
							same = memcmp(world->recv_host[r],
								      expected +
									      (scatter ? (size_t)r *
												 count *
												 size
										       : 0),
								      count * size) == 0;
						exact = same ? "OK" : "FAIL";
						for (int r = 0; r < n; r++)
							free(inputs[r]);
						free(expected);
						if (count > 1 && !scatter) {
							char *second = malloc(bytes);
							PERF_CHECK(cudaMemcpy(second, recv2 + size + 8,
									      bytes - size,
									      cudaMemcpyDeviceToHost));
							invariant =
								memcmp(second,
								       world->recv_host[0] + size,
								       bytes - size) == 0
									? "OK"
									: "FAIL";
							free(second);
						}
						if (!same || strcmp(invariant, "FAIL") == 0)
							world->failures++;
					}
				}
				pthread_barrier_wait(&world->barrier);
				if (me->rank == 0) {
					struct ndet_plan plan;
					const struct ndet_engine_call planned = {
						.coll = o->coll,
						.count = count,
						.dtype = (ndet_dtype_t)dtype,
						.op = (ndet_op_t)op};
					ndet_engine_plan_call(world->engines[0], &planned, &plan);
					double best = graph > 0 && (eager < 0 || graph < eager) ? graph
												 : eager;
					double algbw = (double)bytes / best / 1e9;
					double kernel = perf_kernel_bytes(&plan, (double)bytes, n) * n /
							best / 1e9;
					double ratio = world->ngpus == 1 ? kernel / world->copy_gbps : 0;
					/* nccl-tests' bus factors. */
					double bus = (scatter ? 1.0 : 2.0) * (n - 1) / n;
					printf("  %12zu %12zu %5s %5s %6s | %10.2f %8.2f %8.2f | %10.2f %8.2f "
					       "%8.2f | %6s %9s | %9.1f %6.1f%%\n",
					       bytes, count, ndet_dtype_name((ndet_dtype_t)dtype),
					       ndet_op_name((ndet_op_t)op), perf_path_name(plan.path),
					       eager * 1e6, eager > 0 ? bytes / eager / 1e9 : 0,
					       eager > 0 ? bytes / eager / 1e9 * bus : 0, graph * 1e6,
					       graph > 0 ? bytes / graph / 1e9 : 0,
					       graph > 0 ? bytes / graph / 1e9 * bus : 0, exact,
					       invariant, kernel, 100 * ratio);
					(void)algbw;
					if (bytes >= (64u << 20) && world->ngpus == 1) {
						world->large_rows++;
						world->ratio_sum_large += ratio;
						if (ratio > world->best_ratio_large)
							world->best_ratio_large = ratio;
					}
					if (bytes <= 64 && n >= 2 && world->flag_rtt_us > 0 && eager > 0)
						printf("#   %zu-byte call: %.2f us = %.1f bare flag round "
						       "trips\n",
						       bytes, eager * 1e6, eager * 1e6 / world->flag_rtt_us);
				}
			}
		}
	}
	PERF_CHECK(cudaFree(send));
	PERF_CHECK(cudaFree(recv));
	PERF_CHECK(cudaFree(recv2));
	free(host_in);
	pthread_barrier_wait(&world->barrier);
	ndet_engine_destroy(world->engines[me->rank], true);
	free(world->recv_host[me->rank]);
	return NULL;
}

static unsigned perf_parse_list(const char *text, bool dtypes)
{
	unsigned mask = 0;
	char buffer[256];
	snprintf(buffer, sizeof(buffer), "%s", text);
	char *save = NULL;
	for (char *t = strtok_r(buffer, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
		int count = dtypes ? NDET_DTYPE_COUNT : NDET_OP_COUNT;
		bool found = false;
		for (int i = 0; i < count; i++) {
			const char *name = dtypes ? ndet_dtype_name((ndet_dtype_t)i)
						  : ndet_op_name((ndet_op_t)i);
			if (strcmp(t, name) == 0 || strcmp(t, "all") == 0) {
				mask |= 1u << i;
				found = true;
			}
		}
		if (!found) {
			fprintf(stderr, "nccl-det-perf: unknown %s '%s'\n", dtypes ? "type" : "op",
				t);
			exit(2);
		}
	}
	return mask;
}

static size_t perf_parse_size(const char *text)
{
	char *end = NULL;
	double value = strtod(text, &end);
	switch (*end) {
	case 'K':
	case 'k':
		value *= 1024;
		break;
	case 'M':
	case 'm':
		value *= 1024 * 1024;
		break;
	case 'G':
	case 'g':
		value *= 1024.0 * 1024 * 1024;
		break;
	default:
		break;
	}
	return (size_t)value;
}

static void perf_usage(FILE *out)
{
	fprintf(out,
		"usage: nccl-det-perf [options]\n"
		"  -n RANKS   ranks (default: one per GPU; 4 sharing GPU 0 on a one-GPU machine)\n"
		"  -b BYTES   smallest size (default 8)\n"
		"  -e BYTES   largest size (default 1G; K, M, G suffixes)\n"
		"  -f FACTOR  size step factor (default 2)\n"
		"  -d TYPES   comma list of f32,f16,bf16,f64 or all (default bf16,f32)\n"
		"  -o OPS     comma list of sum,prod,min,max,avg or all (default sum)\n"
		"  -w N       warm-up calls (default 5)\n"
		"  -i N       timed calls (default 20)\n"
		"  -G MODE    0 eager, 1 graph, 2 both (default 2)\n"
		"  -c 0|1     bit-exact and size-invariance checks (default 1, sizes <= 256M)\n"
		"  --coll C   allreduce (default) or reducescatter (sizes: whole send buffers,\n"
		"             n blocks of recvcount, as in nccl-tests)\n"
		"  -h         this help\n"
		"Settings come from NCCL_DET_* variables (see README).\n");
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	/*
	 * Ranks that share one GPU in one process run on many streams; with CUDA's
	 * default of 8 hardware queues two ranks' kernels can land in one queue, one
	 * behind the other while the first waits for the second.  Ask for more queues
	 * (before the first CUDA call).  Separate GPUs or processes need nothing.
	 */
	setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
	struct perf_world world;
	memset(&world, 0, sizeof(world));
	struct perf_options *o = &world.options;
	*o = (struct perf_options){.nranks = 0,
				   .min_bytes = 8,
				   .max_bytes = 1u << 30,
				   .factor = 2,
				   .warmup = 5,
				   .iters = 20,
				   .graph = 2,
				   .check = true,
				   .check_max_bytes = 256u << 20,
				   .dtypes = (1u << NDET_DTYPE_BF16) | (1u << NDET_DTYPE_F32),
				   .ops = 1u << NDET_OP_SUM};
	int c;
	static const struct option long_options[] = {{"coll", required_argument, NULL, 'C'},
						     {NULL, 0, NULL, 0}};
	while ((c = getopt_long(argc, argv, "n:b:e:f:d:o:w:i:G:c:h", long_options, NULL)) != -1) {
		switch (c) {
		case 'C':
			if (strcmp(optarg, "allreduce") == 0) {
				o->coll = NDET_COLL_ALLREDUCE;
			} else if (strcmp(optarg, "reducescatter") == 0) {
				o->coll = NDET_COLL_REDUCE_SCATTER;
			} else {
				fprintf(stderr,
					"nccl-det-perf: --coll takes allreduce or reducescatter\n");
				return 2;
			}
			break;
		case 'n':
			o->nranks = atoi(optarg);
			break;
		case 'b':
			o->min_bytes = perf_parse_size(optarg);
			break;
		case 'e':
			o->max_bytes = perf_parse_size(optarg);
			break;
		case 'f':
			o->factor = atof(optarg);
			break;
		case 'd':
			o->dtypes = perf_parse_list(optarg, true);
			break;
		case 'o':
			o->ops = perf_parse_list(optarg, false);
			break;
		case 'w':
			o->warmup = atoi(optarg);
			break;
		case 'i':
			o->iters = atoi(optarg);
			break;
		case 'G':
			o->graph = atoi(optarg);
			break;
		case 'c':
			o->check = atoi(optarg) != 0;
			break;
		case 'h':
			perf_usage(stdout);
			return 0;
		default:
			perf_usage(stderr);
			return 2;
		}
	}
	if (o->factor <= 1.0 || o->iters < 1 || o->min_bytes < 1 || o->max_bytes < o->min_bytes) {
		perf_usage(stderr);
		return 2;
	}
	int ngpus = 0;
	if (cudaGetDeviceCount(&ngpus) != cudaSuccess || ngpus == 0) {
		printf("nccl-det-perf: no CUDA GPU is visible on this machine, so there is nothing "
		       "to benchmark.\nRun it on a machine with NVIDIA GPUs (driver >= the CUDA "
		       "runtime nccl-det was built with).\n");
		return 0;
	}
	world.ngpus = ngpus;
	if (o->nranks == 0)
		o->nranks = ngpus > 1 ? ngpus : 4;
	if (o->nranks < 1 || o->nranks > NDET_MAX_RANKS) {
		fprintf(stderr, "nccl-det-perf: -n must be 1..%d\n", NDET_MAX_RANKS);
		return 2;
	}
	struct cudaDeviceProp properties;
	PERF_CHECK(cudaGetDeviceProperties(&properties, 0));
	const struct ndet_settings *settings = ndet_settings_get();
	printf("# nccl-det-perf %s: %d ranks on %d GPU(s) (%s), %s\n", NCCL_DET_VERSION_STRING,
	       o->nranks, ngpus < o->nranks ? ngpus : o->nranks, properties.name,
	       ngpus < o->nranks ? "ranks share GPU 0 as threads (one-GPU proxy)"
				 : "one thread per GPU");
	printf("# collective: %s\n", o->coll == NDET_COLL_REDUCE_SCATTER
					     ? "reduce-scatter (size: the whole send buffer)"
					     : "all-reduce");
	printf("# pool %llu B, max blocks %d, one-shot up to %llu B, %d warm-up, %d timed calls\n",
	       (unsigned long long)settings->pool_size, settings->max_blocks,
	       (unsigned long long)settings->oneshot_max, o->warmup, o->iters);
	if (ngpus < o->nranks)
		world.ngpus = 1;

	pthread_barrier_init(&world.barrier, NULL, (unsigned)o->nranks);
	pthread_t threads[NDET_MAX_RANKS];
	struct perf_rank ranks[NDET_MAX_RANKS];
	for (int r = 0; r < o->nranks; r++) {
		ranks[r] = (struct perf_rank){.world = &world, .rank = r};
		pthread_create(&threads[r], NULL, perf_rank_main, &ranks[r]);
	}
	for (int r = 0; r < o->nranks; r++)
		pthread_join(threads[r], NULL);
	if (world.large_rows > 0)
		printf("# large messages (>= 64 MiB): kernel bytes/s = %.1f%% of a device copy on "
		       "average, %.1f%% best (target >= 85%%)\n",
		       100 * world.ratio_sum_large / world.large_rows, 100 * world.best_ratio_large);
	printf("# SUMMARY nccl-det-perf: %s\n",
	       world.failures == 0 ? "every checked result bit-exact and size-invariant"
				   : "CHECK FAILURES (see FAIL above)");
	return world.failures == 0 ? 0 : 1;
}
