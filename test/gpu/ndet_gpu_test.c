/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * GPU correctness driver for the engine.
 *
 *   ndet_gpu_test loopback N [quick|full]   N ranks as threads of this process on
 *                                           GPU 0: the production per-rank launch,
 *                                           pools, flags and planner; only the peer
 *                                           table differs (direct pointers)
 *   ndet_gpu_test sanitize N                the same ranks, every call in ONE launch
 *                                           (compute-sanitizer serialises launches)
 *   ndet_gpu_test load-all-ranks            load those one-launch kernels and say how
 *                                           long it took: built as PTX alone (the
 *                                           default), the driver compiles them on first
 *                                           use (over a minute: doc/testing.md) and
 *                                           caches them
 *   ndet_gpu_test hosts LAYOUT [quick|full] rank r on test host LAYOUT[r] ("AABB": 2
 *                                           hosts of 2), as threads on GPU 0: the
 *                                           multi-host stages, NCCL's part played by
 *                                           device copies (ndet_gpu_hosts.c)
 *   ndet_gpu_test one-launch-time N         a measurement, not a test: small f32 sums
 *                                           of N ranks in ONE launch (as sanitize),
 *                                           with the library's default settings, timed
 *                                           in CUDA graphs against an empty kernel of
 *                                           as many blocks, in bare flag round trips
 *   ndet_gpu_test mp [quick|full]           one rank per process (RANK, WORLD,
 *                                           NDET_TEST_ID_FILE), CUDA IPC between
 *                                           processes, bootstrap through real NCCL
 *                                           (each process needs its own NCCL_HOSTID
 *                                           when they share a GPU)
 *
 * Environment: NDET_TEST_POOL (bytes), NDET_TEST_BLOCKS, NDET_TEST_ONESHOT (bytes),
 * NDET_TEST_LL (bytes, NCCL_DET_LL_MAX; 64 KiB here, so the LL path is always tested),
 * NDET_TEST_DELAY_NS (debug delay knob), NDET_TEST_DELAY_CALLS (calls with delays).
 * Exit 0 = every check passed, 1 = a check failed, 2 = setup error, 77 = no GPU.
 * The last line is a summary.
 */
#include "config.h"

#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kernels/ndet_bench.h"
#include "kernels/ndet_kernels.h"
#include "test/gpu/ndet_gpu_common.h"
#include "test/gpu/ndet_gpu_hosts.h"
#include "test/gpu/ndet_gpu_sizes.h"
#include "common/ndet_settings.h"
#include "protocol/ndet_plan.h"
#include "reference/ndet_reference.h"

/* one-launch-time: engines with the library's settings, not the tests' small ones. */
static bool gpu_default_settings;

static uint64_t env_u64(const char *name, uint64_t fallback)
{
	const char *value = getenv(name);
	return value != NULL && value[0] != '\0' ? strtoull(value, NULL, 0) : fallback;
}

void gpu_test_config(struct ndet_engine_config *config, int rank, int nranks)
{
	memset(config, 0, sizeof(*config));
	config->rank = rank;
	config->nranks = nranks;
	config->cuda_device = 0;
	/* Small lanes by default so moderate sizes already cross several chunks. */
	config->pool_size = env_u64("NDET_TEST_POOL", NDET_GPU_TEST_POOL);
	config->max_blocks = (int)env_u64("NDET_TEST_BLOCKS", NDET_GPU_TEST_BLOCKS);
	config->oneshot_max = env_u64("NDET_TEST_ONESHOT", NDET_GPU_TEST_ONESHOT);
	config->ll_max = env_u64("NDET_TEST_LL", NDET_GPU_TEST_LL);
	/* Wide LL lines where they pay (NCCL_DET_LL_WIDE_MIN's default). */
	config->ll_wide_min = env_u64("NDET_TEST_LL_WIDE_MIN", NDET_PLAN_LL_WIDE_MIN);
	/* Push from 1 MiB: the matrix's largest sizes push, the ones below pull. */
	config->push_min = env_u64("NDET_TEST_PUSH", NDET_GPU_TEST_PUSH);
	config->timeout_ms = env_u64("NDET_TEST_TIMEOUT_MS", 20000);
	config->max_memory = 1ull << 40;
	config->debug_delay_ns = 0;
	config->settings_hash = 42;
	config->test_fail_rank = -1;
	if (gpu_default_settings) {
		int sms = 0;
		GPU_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
		/* The library's protocol; the harness's own memory limit. */
		ndet_engine_config_from_settings(ndet_settings_get(), config);
		config->max_memory = 1ull << 40;
		config->ranks_per_device = nranks;
		config->device_sms = sms;
	}
}

/* ------------------------------------------------------------ loopback */

struct loopback_world {
	int nranks;
	pthread_barrier_t barrier;
	const void *sends[NDET_MAX_RANKS];
	struct ndet_engine *engines[NDET_MAX_RANKS];
	bool quick;
	bool sanitize;
	unsigned long long checks, failures;
	pthread_mutex_t lock;
};

struct loopback_rank {
	struct loopback_world *world;
	int rank;
};

static ndet_status_t loopback_allgather(void *context, const void *send, void *recv, size_t bytes)
{
	struct loopback_rank *me = context;
	struct loopback_world *world = me->world;
	world->sends[me->rank] = send;
	pthread_barrier_wait(&world->barrier);
	for (int r = 0; r < world->nranks; r++) {
		if (cudaMemcpyAsync((char *)recv + (size_t)r * bytes, world->sends[r], bytes,
				    cudaMemcpyDeviceToDevice, 0) != cudaSuccess)
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

static void loopback_barrier(void *context)
{
	pthread_barrier_wait(&((struct loopback_world *)context)->barrier);
}

static void run_delay_phase(struct gpu_rank *gpu, int calls, const size_t *counts, int ncounts)
{
	/*
	 * Many calls with the random-delay knob: ordering bugs show as mismatches.  The
	 * sizes rotate through the protocols with the harness's thresholds (LL up to
	 * 16 KiB with 4 blocks, one-shot up to 64 KiB, two-shot pull, push from 1 MiB),
	 * so every switch between them, where one call's flags must keep the next one's
	 * from overwriting what a peer still reads, happens under the delays too.
	 *
	 * Every call is checked: the calls of a window of kSlots go back to back (no
	 * host sync), each into its own poisoned output slot; then every slot is read
	 * back and compared with the reference, and the element after the call's count
	 * must still be poison (a call that wrote nothing, or another call's result,
	 * cannot pass).
	 */
	enum { kSlots = 50 };
	size_t most = 0;
	for (int i = 0; i < ncounts; i++)
		most = counts[i] > most ? counts[i] : most;
	const size_t slot_elems = most + 1;
	const size_t slot_bytes = slot_elems * sizeof(float);
	float *send = NULL, *recv = NULL;
	GPU_CHECK(cudaMalloc((void **)&send, most * sizeof(float)));
	GPU_CHECK(cudaMalloc((void **)&recv, slot_bytes * kSlots));
	float *inputs[NDET_MAX_RANKS];
	const void *views[NDET_MAX_RANKS];
	for (int r = 0; r < gpu->nranks; r++) {
		inputs[r] = malloc(most * sizeof(float));
		gpu_fill(NDET_DTYPE_F32, inputs[r], most, 0xde1a7 + (uint64_t)r, false);
		views[r] = inputs[r];
	}
	/* Element-wise: a shorter call's result is a prefix of the longest one's. */
	float *expected = malloc(most * sizeof(float)), *got = NULL;
	GPU_CHECK(cudaMallocHost((void **)&got, slot_bytes));
	ndet_reference_allreduce(views, gpu->nranks, expected, most, NDET_DTYPE_F32, NDET_OP_SUM);
	gpu_upload(send, inputs[gpu->rank], most * sizeof(float), gpu->stream);
	GPU_CHECK(cudaMemsetAsync(recv, 0x5a, slot_bytes * kSlots, gpu->stream));
	const int window = gpu_launch_window(gpu);
	uint32_t poison;
	memset(&poison, 0x5a, sizeof(poison));
	gpu->barrier(gpu->barrier_context);
	for (int i = 0; i < calls; i++) {
		const size_t count = counts[i % ncounts];
		float *out = recv + (size_t)(i % kSlots) * slot_elems;
		ndet_engine_allreduce(gpu->engine, send, out, count, NDET_DTYPE_F32, NDET_OP_SUM,
				      gpu->stream);
		if (i % kSlots == kSlots - 1 || i == calls - 1) {
			/*
			 * Every rank launches its share before any rank blocks: ranks that share
			 * a process must not wait in a synchronising CUDA call while a peer still
			 * has to launch the kernel theirs waits for (NCCL has the same rule).
			 */
			gpu->barrier(gpu->barrier_context);
			GPU_CHECK(cudaStreamSynchronize(gpu->stream));
			for (int j = i - i % kSlots; j <= i; j++) {
				const size_t n = counts[j % ncounts];
				GPU_CHECK(cudaMemcpy(got, recv + (size_t)(j % kSlots) * slot_elems,
						     (n + 1) * sizeof(float),
						     cudaMemcpyDeviceToHost));
				size_t first = 0;
				size_t bad = gpu_compare(NDET_DTYPE_F32, got, expected, n, &first);
				uint32_t after;
				memcpy(&after, &got[n], sizeof(after));
				gpu->checks++;
				if (bad != 0 || after != poison) {
					gpu->failures++;
					fprintf(stderr,
						"FAIL rank %d: delayed call %d (count %zu): %zu "
						"elements "
						"differ (first %zu)%s\n",
						gpu->rank, j, n, bad, first,
						after != poison ? ", and it wrote past its count"
								: "");
				}
			}
			/* No rank launches the next call while a peer still blocks in a copy. */
			gpu->barrier(gpu->barrier_context);
			GPU_CHECK(cudaMemsetAsync(recv, 0x5a, slot_bytes * kSlots, gpu->stream));
		} else if (window > 0 && i % window == window - 1) {
			gpu->barrier(gpu->barrier_context);
		}
	}
	GPU_CHECK(cudaStreamSynchronize(gpu->stream));
	uint32_t kernel_error = 0;
	gpu->checks++;
	if (ndet_engine_error(gpu->engine, &kernel_error) != NDET_OK) {
		gpu->failures++;
		uint32_t block = 0, peer = 0, phase = 0;
		uint64_t step = 0, observed = 0;
		ndet_engine_error_details(gpu->engine, &block, &peer, &step, &observed, &phase);
		fprintf(stderr,
			"FAIL rank %d: delay phase: engine error %u (block %u, peer %u, step %llu, "
			"wait %u, flag seen step %llu sig 0x%llx)\n",
			gpu->rank, kernel_error, block, peer, (unsigned long long)step, phase,
			(unsigned long long)(observed >> 24),
			(unsigned long long)(observed & 0xffffff));
	}
	for (int r = 0; r < gpu->nranks; r++)
		free(inputs[r]);
	free(expected);
	GPU_CHECK(cudaFreeHost(got));
	GPU_CHECK(cudaFree(send));
	GPU_CHECK(cudaFree(recv));
}

/*
 * LL tags repeat every 255 LL steps, so on one slot parity a line last written 510 LL
 * steps before carries the tag its reader waits for; an LL step stores only the lines
 * that hold data, and the refresh steps (NDET_LL_REFRESH_STEPS) are what keeps such a
 * line from standing.  Each round: a call of `big` elements (data A; block 0's lines
 * all hold data), kGap one-element calls (block 0's line 0 only, data B, a kernel of
 * one line per thread), and `big` elements again
 * (data C) exactly 510 LL steps after the first, under the delay knob, so that ranks
 * poll lines before their peers' stores land.  Without the refresh, a reader would
 * take A's lines for C's.  Both big calls are checked against the reference, with
 * poison after their count.  Rounds take in turn blocks of a quarter of
 * NDET_LL_BLOCK_BYTES (1000 elements: a line for half the threads), of all of it (the
 * second line of each thread, which the one-line kernels of the gap refresh without
 * using it) and of half of it, each where this engine plans such a count
 * (ll_refresh_count).
 */
enum { kLLRefreshMaxBig = 24000 };

/* A count of f32 that this engine sends LL in blocks of `block_bytes`; 0 if none. */
static size_t ll_refresh_count(const struct gpu_rank *gpu, size_t block_bytes)
{
	static const size_t candidates[] = {1000, 1500, 3000, 6000, 12000, kLLRefreshMaxBig};
	for (size_t i = 0; i < sizeof(candidates) / sizeof(candidates[0]); i++) {
		struct ndet_plan plan;
		if (ndet_engine_plan(gpu->engine, candidates[i], NDET_DTYPE_F32, NDET_OP_SUM,
				     &plan) == NDET_OK &&
		    plan.path == NDET_PATH_LL && plan.chunk_elems * sizeof(float) == block_bytes)
			return candidates[i];
	}
	return 0;
}

static void run_ll_refresh(struct gpu_rank *gpu, int rounds)
{
	enum { kGap = 509 };
	const int window = gpu_launch_window(gpu);
	static const size_t kind_bytes[3] = {NDET_LL_BLOCK_BYTES / 4, NDET_LL_BLOCK_BYTES,
					     NDET_LL_BLOCK_BYTES / 2};
	size_t kinds[3];
	for (int k = 0; k < 3; k++)
		kinds[k] = ll_refresh_count(gpu, kind_bytes[k]);
	const size_t max_bytes = kLLRefreshMaxBig * sizeof(float);
	float *send = NULL, *recv = NULL, *got = NULL;
	GPU_CHECK(cudaMalloc((void **)&send, 3 * max_bytes));
	GPU_CHECK(cudaMalloc((void **)&recv, 3 * (max_bytes + sizeof(float))));
	GPU_CHECK(cudaMallocHost((void **)&got, max_bytes + sizeof(float)));
	float *inputs[NDET_MAX_RANKS];
	const void *views[NDET_MAX_RANKS];
	float *expected = malloc(max_bytes);
	uint32_t poison;
	memset(&poison, 0x5a, sizeof(poison));
	for (int k = 0; k < 3; k++)
		if (kinds[k] == 0)
			fprintf(stderr,
				"rank %d: LL refresh: no LL count in blocks of %zu bytes here; "
				"1000 elements instead\n",
				gpu->rank, kind_bytes[k]);
	for (int round = 0; round < rounds; round++) {
		const size_t big = kinds[round % 3] != 0 ? kinds[round % 3] : 1000;
		const size_t big_bytes = big * sizeof(float);
		/* Data A, B and C of every rank, back to back: seeds from round and rank. */
		for (int r = 0; r < gpu->nranks; r++) {
			inputs[r] = malloc(3 * big_bytes);
			gpu_fill(NDET_DTYPE_F32, inputs[r], 3 * big,
				 0x11f7e5ull + ((uint64_t)round << 8) + (uint64_t)r, false);
		}
		gpu_upload(send, inputs[gpu->rank], 3 * big_bytes, gpu->stream);
		GPU_CHECK(
			cudaMemsetAsync(recv, 0x5a, 3 * (big_bytes + sizeof(float)), gpu->stream));
		gpu->barrier(gpu->barrier_context);
		float *out[3];
		for (int k = 0; k < 3; k++)
			out[k] = recv + (size_t)k * (big + 1);
		ndet_engine_allreduce(gpu->engine, send, out[0], big, NDET_DTYPE_F32, NDET_OP_SUM,
				      gpu->stream);
		for (int i = 0; i < kGap; i++) {
			if (window > 0 && i % window == 0)
				gpu->barrier(gpu->barrier_context);
			ndet_engine_allreduce(gpu->engine, send + big, out[1], 1, NDET_DTYPE_F32,
					      NDET_OP_SUM, gpu->stream);
		}
		gpu->barrier(gpu->barrier_context);
		ndet_engine_allreduce(gpu->engine, send + 2 * big, out[2], big, NDET_DTYPE_F32,
				      NDET_OP_SUM, gpu->stream);
		gpu->barrier(gpu->barrier_context);
		GPU_CHECK(cudaStreamSynchronize(gpu->stream));
		for (int k = 0; k < 3; k += 2) {
			for (int r = 0; r < gpu->nranks; r++)
				views[r] = inputs[r] + (size_t)k * big;
			ndet_reference_allreduce(views, gpu->nranks, expected, big, NDET_DTYPE_F32,
						 NDET_OP_SUM);
			GPU_CHECK(cudaMemcpy(got, out[k], big_bytes + sizeof(float),
					     cudaMemcpyDeviceToHost));
			size_t first = 0;
			const size_t bad = gpu_compare(NDET_DTYPE_F32, got, expected, big, &first);
			uint32_t after;
			memcpy(&after, &got[big], sizeof(after));
			gpu->checks++;
			if (bad != 0 || after != poison) {
				gpu->failures++;
				fprintf(stderr,
					"FAIL rank %d: LL refresh round %d, call %s: %zu elements "
					"differ (first %zu)%s\n",
					gpu->rank, round, k == 0 ? "A" : "C (510 LL steps after A)",
					bad, first,
					after != poison ? ", and it wrote past its count" : "");
			}
		}
		for (int r = 0; r < gpu->nranks; r++)
			free(inputs[r]);
		/* No rank uploads the next round's data while a peer still reads this one. */
		gpu->barrier(gpu->barrier_context);
	}
	uint32_t kernel_error = 0;
	gpu->checks++;
	if (ndet_engine_error(gpu->engine, &kernel_error) != NDET_OK) {
		gpu->failures++;
		fprintf(stderr, "FAIL rank %d: LL refresh: engine error %u\n", gpu->rank,
			kernel_error);
	}
	free(expected);
	GPU_CHECK(cudaFreeHost(got));
	GPU_CHECK(cudaFree(send));
	GPU_CHECK(cudaFree(recv));
}

/* A later engine of the same ranks; a failure is counted, never fatal. */
static bool recreate(struct gpu_rank *gpu, const struct ndet_engine_config *config,
		     struct loopback_rank *me, struct ndet_setup_verdict *verdict)
{
	ndet_status_t st =
		ndet_engine_create(config, loopback_allgather, me, &gpu->engine, verdict);
	gpu->checks++;
	if (st == NDET_OK)
		return true;
	gpu->failures++;
	fprintf(stderr, "FAIL rank %d: engine re-create: %s (verdict %d, rank %d)\n", gpu->rank,
		ndet_status_name(st), verdict->reason, verdict->offending_rank);
	return false;
}

static void *loopback_thread(void *argument)
{
	struct loopback_rank *me = argument;
	struct loopback_world *world = me->world;
	GPU_CHECK(cudaSetDevice(0));
	struct gpu_rank gpu = {.rank = me->rank,
			       .nranks = world->nranks,
			       .device = 0,
			       .barrier = loopback_barrier,
			       .barrier_context = world,
			       .shared_queues = true};
	gpu_streams_create(&gpu);
	struct ndet_engine_config config;
	gpu_test_config(&config, me->rank, world->nranks);
	struct ndet_setup_verdict verdict;
	ndet_status_t st =
		ndet_engine_create(&config, loopback_allgather, me, &gpu.engine, &verdict);
	if (st != NDET_OK) {
		fprintf(stderr, "rank %d: engine create: %s (verdict %d, rank %d)\n", me->rank,
			ndet_status_name(st), verdict.reason, verdict.offending_rank);
		gpu_die();
	}
	world->engines[me->rank] = gpu.engine;
	pthread_barrier_wait(&world->barrier);
	if (!world->sanitize) {
		gpu_run_matrix(&gpu, world->quick);
		gpu_run_graph(&gpu, world->quick ? 20 : 100);
		gpu_run_streams(&gpu, world->quick ? 200 : 1000);
		gpu_run_collectives(&gpu, world->quick);
		gpu_run_collectives_graph(&gpu, world->quick ? 8 : 40);
		ndet_engine_destroy(gpu.engine, true);

		/* Wide LL lines: an engine whose grid and LL slots take them. */
		struct ndet_engine_config wide = config;
		wide.max_blocks = NDET_GPU_WIDE_BLOCKS;
		wide.ll_max = NDET_GPU_WIDE_LL;
		wide.ll_wide_min = NDET_PLAN_LL_WIDE_MIN;
		if (!recreate(&gpu, &wide, me, &verdict))
			goto done;
		gpu_run_ll_wide(&gpu);
		ndet_engine_destroy(gpu.engine, true);

		/* Fresh engine with the delay knob. */
		config.debug_delay_ns = (unsigned)env_u64("NDET_TEST_DELAY_NS", 3000);
		if (!recreate(&gpu, &config, me, &verdict))
			goto done;
		const int delay_calls =
			(int)env_u64("NDET_TEST_DELAY_CALLS", world->quick ? 1000 : 10000);
		static const size_t mixed[] = NDET_GPU_DELAY_COUNTS;
		static const size_t ll_only[] = NDET_GPU_DELAY_LL_COUNTS;
		static const size_t after_ll[] = NDET_GPU_DELAY_AFTER_LL_COUNTS;
		run_delay_phase(&gpu, delay_calls, mixed, (int)(sizeof(mixed) / sizeof(mixed[0])));
		run_delay_phase(&gpu, delay_calls, ll_only,
				(int)(sizeof(ll_only) / sizeof(ll_only[0])));
		run_delay_phase(&gpu, delay_calls, after_ll,
				(int)(sizeof(after_ll) / sizeof(after_ll[0])));
		if (world->nranks >= 2)
			run_ll_refresh(&gpu, world->quick ? 4 : 16);
		ndet_engine_destroy(gpu.engine, true);

		/*
		 * A call that takes longer than the timeout but keeps progressing (random
		 * pauses of up to 3 x NDET_TEST_SLOW_DELAY_NS per step, 16 steps: the
		 * small pool and grid below, whatever NDET_TEST_POOL and _BLOCKS say).
		 * Not for one rank: its call is a copy, with no step to delay.
		 */
		config.pool_size = NDET_GPU_ERROR_POOL;
		config.max_blocks = NDET_GPU_ERROR_BLOCKS;
		config.timeout_ms = 1500;
		config.debug_delay_ns = (unsigned)env_u64("NDET_TEST_SLOW_DELAY_NS", 100000000);
		if (world->nranks >= 2) {
			if (!recreate(&gpu, &config, me, &verdict))
				goto done;
			gpu_run_slow_progress(&gpu, config.timeout_ms);
			ndet_engine_destroy(gpu.engine, true);
		}

		/* Error paths on fresh engines with a short timeout. */
		config.debug_delay_ns = 0;
		config.timeout_ms = 2000;
		gpu.timeout_ms = config.timeout_ms;
		if (world->nranks >= 2) {
			static const size_t abort_counts[] = NDET_GPU_ABORT_COUNTS;
			for (size_t i = 0; i < sizeof(abort_counts) / sizeof(abort_counts[0]);
			     i++) {
				if (!recreate(&gpu, &config, me, &verdict))
					goto done;
				gpu_run_abort_at_start(&gpu, abort_counts[i]);
				ndet_engine_destroy(gpu.engine, false);
			}
			if (!recreate(&gpu, &config, me, &verdict))
				goto done;
			gpu_run_divergence(&gpu, -1, 1);
			ndet_engine_destroy(gpu.engine, false);
			/*
			 * One rank's op differs, the shape (and so the LL grid) does not:
			 * an error, never the other call's lines taken for ours.
			 */
			if (!recreate(&gpu, &config, me, &verdict))
				goto done;
			gpu_run_divergence_call(&gpu, -1, 1, 1000, 1000, NDET_OP_MAX);
			ndet_engine_destroy(gpu.engine, false);
			if (!recreate(&gpu, &config, me, &verdict))
				goto done;
			gpu_run_divergence(&gpu, world->nranks - 1, -1);
			ndet_engine_destroy(gpu.engine, false);
		}
	}
done:
	pthread_mutex_lock(&world->lock);
	world->checks += gpu.checks;
	world->failures += gpu.failures;
	pthread_mutex_unlock(&world->lock);
	pthread_barrier_wait(&world->barrier);
	return NULL;
}

/*
 * The reduce-scatter path and PreMulSum in one launch (compute-sanitizer sees every
 * rank's kernel at once): every dtype, a reduce-scatter with a PreMulSum op whose
 * scalars are on the host for even ranks and in device memory for odd ones.
 */
static void sanitize_collectives(struct loopback_world *world, cudaStream_t stream)
{
	const int n = world->nranks;
	const size_t recvcount = 7001;
	for (int dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
		const ndet_dtype_t dt = (ndet_dtype_t)dtype;
		if (!gpu_dtype_selected(dt))
			continue;
		const size_t size = ndet_dtype_size(dt), total = recvcount * (size_t)n;
		void *host_in[NDET_MAX_RANKS], *device_scalars[NDET_MAX_RANKS];
		const void *views[NDET_MAX_RANKS];
		unsigned char scalars[NDET_MAX_RANKS * 8];
		struct ndet_engine_call calls[NDET_MAX_RANKS];
		void *expected = malloc(total * size), *got = malloc(recvcount * size);
		for (int r = 0; r < n; r++) {
			host_in[r] = malloc(total * size);
			gpu_fill(dt, host_in[r], total, (uint64_t)(r * 131 + dtype), true);
			views[r] = host_in[r];
			/* A different scalar per rank, rounded to the dtype (the bits are the
			 * scalar). */
			const float value = (1.0f + (float)r / 8.0f) / (float)(2 << r);
			const uint64_t bits = ndet_reference_element_bits(dt, value);
			memcpy(scalars + (size_t)r * size, &bits, size);
			void *send, *recv;
			GPU_CHECK(cudaMalloc(&send, total * size));
			GPU_CHECK(cudaMalloc(&recv, recvcount * size));
			GPU_CHECK(cudaMalloc(&device_scalars[r], 8));
			gpu_upload(send, host_in[r], total * size, stream);
			gpu_upload(device_scalars[r], &bits, size, stream);
			calls[r] = (struct ndet_engine_call){
				.coll = NDET_COLL_REDUCE_SCATTER,
				.sendbuff = send,
				.recvbuff = recv,
				.count = recvcount,
				.dtype = dt,
				.op = NDET_OP_SUM,
				.premul = r % 2 == 0 ? NDET_PREMUL_HOST : NDET_PREMUL_DEVICE,
				.scalar_bits = bits,
				.scalar = device_scalars[r],
			};
		}
		ndet_reference_premulsum(views, scalars, n, expected, total, dt);
		ndet_status_t st = ndet_engine_collective_all_ranks(
			world->engines, n, calls, ndet_kernel_allreduce_all_ranks, stream);
		world->checks++;
		if (st != NDET_OK) {
			world->failures++;
			fprintf(stderr, "FAIL sanitize reduce-scatter launch: %s\n",
				ndet_status_name(st));
		}
		for (int r = 0; r < n; r++) {
			GPU_CHECK(cudaMemcpy(got, calls[r].recvbuff, recvcount * size,
					     cudaMemcpyDeviceToHost));
			size_t first = 0,
			       bad = gpu_compare(dt, got,
						 (char *)expected + (size_t)r * recvcount * size,
						 recvcount, &first);
			world->checks++;
			if (bad != 0) {
				world->failures++;
				fprintf(stderr,
					"FAIL sanitize reduce-scatter PreMulSum rank %d %s: %zu "
					"differ "
					"(first %zu)\n",
					r, ndet_dtype_name(dt), bad, first);
			}
			GPU_CHECK(cudaFree((void *)calls[r].sendbuff));
			GPU_CHECK(cudaFree(calls[r].recvbuff));
			GPU_CHECK(cudaFree(device_scalars[r]));
			free(host_in[r]);
		}
		free(expected);
		free(got);
	}
}

/* One call of every rank in one launch, checked against the reference. */
static void sanitize_call(struct loopback_world *world, cudaStream_t stream, int dtype, int op,
			  size_t count)
{
	const int n = world->nranks;
	const size_t size = ndet_dtype_size((ndet_dtype_t)dtype);
	void *host_in[NDET_MAX_RANKS];
	const void *views[NDET_MAX_RANKS];
	const void *sends[NDET_MAX_RANKS];
	void *recvs[NDET_MAX_RANKS];
	void *expected = malloc(count * size), *got = malloc(count * size);
	for (int r = 0; r < n; r++) {
		host_in[r] = malloc(count * size);
		gpu_fill((ndet_dtype_t)dtype, host_in[r], count,
			 (uint64_t)(r * 7919 + dtype * 31 + op * 17) + count, true);
		views[r] = host_in[r];
		void *send, *recv;
		GPU_CHECK(cudaMalloc(&send, count * size));
		GPU_CHECK(cudaMalloc(&recv, count * size));
		gpu_upload(send, host_in[r], count * size, stream);
		sends[r] = send;
		recvs[r] = recv;
	}
	ndet_reference_allreduce(views, n, expected, count, (ndet_dtype_t)dtype, (ndet_op_t)op);
	ndet_status_t st = ndet_engine_allreduce_all_ranks(world->engines, n, sends, recvs, count,
							   (ndet_dtype_t)dtype, (ndet_op_t)op,
							   ndet_kernel_allreduce_all_ranks, stream);
	world->checks++;
	if (st != NDET_OK) {
		world->failures++;
		fprintf(stderr, "FAIL sanitize launch: %s\n", ndet_status_name(st));
	}
	for (int r = 0; r < n; r++) {
		GPU_CHECK(cudaMemcpy(got, recvs[r], count * size, cudaMemcpyDeviceToHost));
		size_t first = 0,
		       bad = gpu_compare((ndet_dtype_t)dtype, got, expected, count, &first);
		world->checks++;
		if (bad != 0) {
			world->failures++;
			fprintf(stderr,
				"FAIL sanitize rank %d %s/%s count %zu: "
				"%zu differ\n",
				r, ndet_dtype_name((ndet_dtype_t)dtype),
				ndet_op_name((ndet_op_t)op), count, bad);
		}
		GPU_CHECK(cudaFree((void *)sends[r]));
		GPU_CHECK(cudaFree(recvs[r]));
		free(host_in[r]);
	}
	free(expected);
	free(got);
}

/* All ranks in one launch: engines set up by the threads, calls made from here. */
static void sanitize_run(struct loopback_world *world)
{
	/* With the sanitizers' 2 blocks: LL for 1, 5 and 1023 elements, one-shot for 4097
	 * (fp8: 33001), two-shot or push for 70001, every dtype (test_engine checks the
	 * paths). */
	static const size_t sizes[] = NDET_GPU_SANITIZE_SIZES;
	const int n = world->nranks;
	const bool wide_only = env_u64("NDET_TEST_WIDE", 0) != 0;
	cudaStream_t stream;
	GPU_CHECK(cudaStreamCreate(&stream));
	for (int dtype = 0; dtype < NDET_DTYPE_COUNT && !wide_only; dtype++) {
		if (!gpu_dtype_selected((ndet_dtype_t)dtype))
			continue;
		for (int op = 0; op < NDET_OP_COUNT; op++) {
			for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
				sanitize_call(world, stream, dtype, op, sizes[s]);
			}
		}
	}
	/*
	 * NDET_TEST_WIDE=1 (engines of NDET_GPU_WIDE_BLOCKS blocks and NDET_GPU_WIDE_LL:
	 * test/gpu/suite.sh): only the wide LL lines of every dtype that has them, sum
	 * and avg, one and two lines per thread, each plan checked to take them
	 * (gpu_ll_wide_expected).
	 */
	if (wide_only) {
		static const ndet_op_t ops[] = {NDET_OP_SUM, NDET_OP_AVG};
		unsigned wide_calls = 0;
		for (int dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
			if (!gpu_dtype_selected((ndet_dtype_t)dtype))
				continue;
			for (size_t o = 0; o < 2 * sizeof(ops) / sizeof(ops[0]); o++) {
				const size_t count =
					gpu_ll_wide_count(n, (ndet_dtype_t)dtype, o % 2 ? 2 : 0);
				const bool expected = gpu_ll_wide_expected(n, (ndet_dtype_t)dtype,
									   ops[o / 2], count);
				world->checks++;
				if (!gpu_ll_wide_check(world->engines[0], n, (ndet_dtype_t)dtype,
						       ops[o / 2], count))
					world->failures++;
				if (expected) {
					sanitize_call(world, stream, dtype, ops[o / 2], count);
					wide_calls++;
				}
			}
		}
		world->checks++;
		if (wide_calls == 0) {
			world->failures++;
			fprintf(stderr,
				"FAIL sanitize wide LL: no call of these dtypes at %d ranks "
				"takes wide lines\n",
				n);
		}
	}
	if (!wide_only)
		sanitize_collectives(world, stream);
	GPU_CHECK(cudaStreamDestroy(stream));
}

/* ------------------------------------------------------------ one-launch timing */

enum { TIME_CALLS = 20, TIME_LAUNCHES = 20, TIME_ROUNDS = 7 };

static int time_compare_doubles(const void *a, const void *b)
{
	const double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Microseconds per call of `exec` (a graph of TIME_CALLS calls): the median of rounds. */
static double time_graph_us(cudaGraphExec_t exec, cudaStream_t stream)
{
	cudaEvent_t start, stop;
	double rounds[TIME_ROUNDS];
	GPU_CHECK(cudaEventCreate(&start));
	GPU_CHECK(cudaEventCreate(&stop));
	GPU_CHECK(cudaGraphLaunch(exec, stream));
	for (int round = 0; round < TIME_ROUNDS; round++) {
		GPU_CHECK(cudaEventRecord(start, stream));
		for (int l = 0; l < TIME_LAUNCHES; l++)
			GPU_CHECK(cudaGraphLaunch(exec, stream));
		GPU_CHECK(cudaEventRecord(stop, stream));
		GPU_CHECK(cudaEventSynchronize(stop));
		float ms = 0;
		GPU_CHECK(cudaEventElapsedTime(&ms, start, stop));
		rounds[round] = ms * 1000.0 / (TIME_LAUNCHES * TIME_CALLS);
	}
	GPU_CHECK(cudaEventDestroy(start));
	GPU_CHECK(cudaEventDestroy(stop));
	qsort(rounds, TIME_ROUNDS, sizeof(rounds[0]), time_compare_doubles);
	return rounds[TIME_ROUNDS / 2];
}

/* nccl-det-perf's unit: a bare flag round trip between two concurrent launches, us. */
static double time_round_trip_us(void)
{
	enum { ITERS = 2000 };
	uint64_t *flags = NULL, *result = NULL, ns = 0;
	cudaStream_t a, b;
	GPU_CHECK(cudaMalloc((void **)&flags, 2 * sizeof(uint64_t)));
	GPU_CHECK(cudaMalloc((void **)&result, 2 * sizeof(uint64_t)));
	GPU_CHECK(cudaMemset(flags, 0, 2 * sizeof(uint64_t)));
	GPU_CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
	GPU_CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
	GPU_CHECK((cudaError_t)ndet_kernel_flag_pingpong(&flags[0], &flags[1], ITERS, 1, &result[0],
							 a));
	GPU_CHECK((cudaError_t)ndet_kernel_flag_pingpong(&flags[1], &flags[0], ITERS, 0, &result[1],
							 b));
	GPU_CHECK(cudaDeviceSynchronize());
	GPU_CHECK(cudaMemcpy(&ns, &result[0], sizeof(ns), cudaMemcpyDeviceToHost));
	GPU_CHECK(cudaStreamDestroy(a));
	GPU_CHECK(cudaStreamDestroy(b));
	GPU_CHECK(cudaFree(flags));
	GPU_CHECK(cudaFree(result));
	return ns == 0 ? -1.0 : (double)ns / ITERS / 1000.0;
}

/* Every rank's result of the calls made so far against the CPU tree (a check). */
static void time_check(struct loopback_world *world, void *const *recvs, const void *want,
		       size_t count, const char *when)
{
	void *got = malloc(count * sizeof(float));
	for (int r = 0; r < world->nranks; r++) {
		GPU_CHECK(cudaMemcpy(got, recvs[r], count * sizeof(float), cudaMemcpyDeviceToHost));
		size_t first = 0, bad = gpu_compare(NDET_DTYPE_F32, got, want, count, &first);
		world->checks++;
		if (bad != 0) {
			world->failures++;
			fprintf(stderr, "FAIL one-launch-time rank %d count %zu %s: %zu differ\n",
				r, count, when, bad);
		}
	}
	free(got);
}

/*
 * The timeline of block 0 of every rank in the last call of one more launch of the
 * call's graph (kernels/ndet_abi.h, trace): all ranks run in one kernel on one clock,
 * so their events line up; us from the first rank's start.
 */
static void time_trace(struct loopback_world *world, struct ndet_kernel_args *args,
		       struct ndet_kernel_args *device_args, cudaGraphExec_t exec,
		       cudaStream_t stream)
{
	static const char *const names[] = {
		[NDET_TRACE_START] = "start",
		[NDET_TRACE_OPENED] = "opened",
		[NDET_TRACE_SCATTERED] = "scattered",
		[NDET_TRACE_REDUCED] = "reduced",
		[NDET_TRACE_END] = "end",
	};
	const int n = world->nranks;
	const size_t words = 2 * NDET_TRACE_WORDS;
	uint64_t *trace = NULL, *host = malloc(words * sizeof(uint64_t) * (size_t)n);
	GPU_CHECK(cudaMalloc((void **)&trace, words * sizeof(uint64_t) * (size_t)n));
	GPU_CHECK(cudaMemset(trace, 0, words * sizeof(uint64_t) * (size_t)n));
	for (int r = 0; r < n; r++)
		args[r].trace = trace + words * (size_t)r;
	GPU_CHECK(
		cudaMemcpy(device_args, args, sizeof(args[0]) * (size_t)n, cudaMemcpyHostToDevice));
	GPU_CHECK(cudaGraphLaunch(exec, stream));
	GPU_CHECK(cudaStreamSynchronize(stream));
	GPU_CHECK(cudaMemcpy(host, trace, words * sizeof(uint64_t) * (size_t)n,
			     cudaMemcpyDeviceToHost));
	uint64_t first = UINT64_MAX;
	const uint64_t mask = (1ull << 56) - 1;
	for (int r = 0; r < n; r++)
		if (host[words * (size_t)r] > 0)
			first = first < (host[words * (size_t)r + 1] & mask)
					? first
					: (host[words * (size_t)r + 1] & mask);
	for (int r = 0; r < n; r++) {
		const uint64_t *t = host + words * (size_t)r;
		printf("    trace rank %d block 0:", r);
		for (uint64_t e = 1; e <= t[0] && e < NDET_TRACE_WORDS; e++) {
			const unsigned code = (unsigned)(t[e] >> 56);
			printf(" %s %.2f",
			       code < sizeof(names) / sizeof(names[0]) && names[code] != NULL
				       ? names[code]
				       : "?",
			       (double)((t[e] & mask) - first) / 1000.0);
		}
		printf("\n");
	}
	for (int r = 0; r < n; r++)
		args[r].trace = NULL;
	GPU_CHECK(
		cudaMemcpy(device_args, args, sizeof(args[0]) * (size_t)n, cudaMemcpyHostToDevice));
	GPU_CHECK(cudaFree(trace));
	free(host);
}

/*
 * One size: the call (every rank's blocks in one launch) and an empty kernel of as
 * many blocks, each in a graph of TIME_CALLS launches; their difference in round
 * trips.  Ranks that launch separately (nccl-det-perf) also wait for each other's
 * kernels to start; here all start together.
 */
static void time_one_size(struct loopback_world *world, size_t bytes, double rt,
			  cudaStream_t stream)
{
	const int n = world->nranks;
	const size_t count = bytes / sizeof(float);
	void *host[NDET_MAX_RANKS], *recvs[NDET_MAX_RANKS];
	const void *views[NDET_MAX_RANKS];
	struct ndet_engine_call calls[NDET_MAX_RANKS];
	for (int r = 0; r < n; r++) {
		void *send = NULL;
		host[r] = malloc(bytes);
		gpu_fill(NDET_DTYPE_F32, host[r], count, (uint64_t)r * 7919u + bytes, false);
		views[r] = host[r];
		GPU_CHECK(cudaMalloc(&send, bytes));
		GPU_CHECK(cudaMalloc(&recvs[r], bytes));
		GPU_CHECK(cudaMemcpy(send, host[r], bytes, cudaMemcpyHostToDevice));
		calls[r] = (struct ndet_engine_call){.sendbuff = send,
						     .recvbuff = recvs[r],
						     .count = count,
						     .dtype = NDET_DTYPE_F32,
						     .op = NDET_OP_SUM};
	}
	void *want = malloc(bytes);
	ndet_reference_allreduce(views, n, want, count, NDET_DTYPE_F32, NDET_OP_SUM);
	struct ndet_kernel_args args[NDET_MAX_RANKS];
	struct ndet_kernel_args *device_args = NULL;
	uint32_t blocks = 0;
	int what = 0;
	ndet_status_t st =
		ndet_engine_all_ranks_args(world->engines, n, calls, args, &blocks, &what);
	world->checks++;
	if (st != NDET_OK) {
		world->failures++;
		fprintf(stderr, "FAIL one-launch-time %zu B: %s\n", bytes, ndet_status_name(st));
		goto out;
	}
	GPU_CHECK(cudaMalloc((void **)&device_args, sizeof(args[0]) * (size_t)n));
	GPU_CHECK(
		cudaMemcpy(device_args, args, sizeof(args[0]) * (size_t)n, cudaMemcpyHostToDevice));
	cudaGraphExec_t exec[2];
	for (int g = 0; g < 2; g++) {
		cudaGraph_t graph;
		GPU_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
		for (int i = 0; i < TIME_CALLS; i++)
			GPU_CHECK(g == 0 ? (cudaError_t)ndet_kernel_allreduce_all_ranks(
						   device_args, NDET_DTYPE_F32, what, n, blocks,
						   stream)
					 : (cudaError_t)ndet_kernel_empty(blocks * (unsigned)n,
									  stream));
		GPU_CHECK(cudaStreamEndCapture(stream, &graph));
		GPU_CHECK(cudaGraphInstantiate(&exec[g], graph, 0));
		GPU_CHECK(cudaGraphDestroy(graph));
	}
	GPU_CHECK(cudaGraphLaunch(exec[0], stream));
	GPU_CHECK(cudaStreamSynchronize(stream));
	time_check(world, recvs, want, count, "first graph");
	const double call = time_graph_us(exec[0], stream), empty = time_graph_us(exec[1], stream);
	GPU_CHECK(cudaStreamSynchronize(stream));
	time_check(world, recvs, want, count, "after the timed graphs");
	printf("  %d ranks %6zu B  %-8s %3u blocks x %d  graph: call %6.2f us  empty %5.2f us  "
	       "above %4.2f RT\n",
	       n, bytes, ndet_plan_path_name((ndet_path_t)args[0].path), blocks, n, call, empty,
	       (call - empty) / rt);
	time_trace(world, args, device_args, exec[0], stream);
	for (int g = 0; g < 2; g++)
		GPU_CHECK(cudaGraphExecDestroy(exec[g]));
out:
	for (int r = 0; r < n; r++) {
		GPU_CHECK(cudaFree((void *)calls[r].sendbuff));
		GPU_CHECK(cudaFree(recvs[r]));
		free(host[r]);
	}
	if (device_args != NULL)
		GPU_CHECK(cudaFree(device_args));
	free(want);
}

static void one_launch_time(struct loopback_world *world)
{
	static const size_t sizes[] = {8, 64, 512, 2048, 4096, 8192, 16384, 32768, 65536};
	cudaStream_t stream;
	GPU_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
	const double rt = time_round_trip_us();
	printf("# one launch, %d ranks, f32 sum, graphs of %d calls (median of %d rounds of %d "
	       "launches); bare flag round trip %.2f us\n",
	       world->nranks, TIME_CALLS, TIME_ROUNDS, TIME_LAUNCHES, rt);
	world->checks++;
	if (rt <= 0) {
		world->failures++;
		fprintf(stderr, "FAIL one-launch-time: the flag round trip did not complete\n");
	} else {
		for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
			time_one_size(world, sizes[s], rt, stream);
	}
	GPU_CHECK(cudaStreamDestroy(stream));
}

static int run_loopback(int nranks, bool quick, bool sanitize)
{
	struct loopback_world world = {.nranks = nranks, .quick = quick, .sanitize = sanitize};
	/* A build without the one-launch kernels (ndet_all_ranks_none.c) fails here, once. */
	if (sanitize && ndet_kernel_all_ranks_load(0) != 0) {
		printf("SUMMARY ndet_gpu_test sanitize n=%d: FAILED: no one-launch kernels in this "
		       "build\n",
		       nranks);
		return 1;
	}
	pthread_barrier_init(&world.barrier, NULL, (unsigned)nranks);
	pthread_mutex_init(&world.lock, NULL);
	pthread_t threads[NDET_MAX_RANKS];
	struct loopback_rank ranks[NDET_MAX_RANKS];
	for (int r = 0; r < nranks; r++) {
		ranks[r] = (struct loopback_rank){.world = &world, .rank = r};
		pthread_create(&threads[r], NULL, loopback_thread, &ranks[r]);
	}
	for (int r = 0; r < nranks; r++)
		pthread_join(threads[r], NULL);
	if (sanitize) {
		if (gpu_default_settings)
			one_launch_time(&world);
		else
			sanitize_run(&world);
		for (int r = 0; r < nranks; r++)
			ndet_engine_destroy(world.engines[r], false);
	}
	printf("SUMMARY ndet_gpu_test %s n=%d: %llu checks, %llu failed\n",
	       gpu_default_settings ? "one-launch-time"
	       : sanitize           ? "sanitize"
				    : "loopback",
	       nranks, world.checks, world.failures);
	return world.failures == 0 ? 0 : 1;
}

/* ------------------------------------------------------------ multi-process */

struct mp_context {
	ncclComm_t comm;
	cudaStream_t stream;
};

static ndet_status_t mp_allgather(void *context, const void *send, void *recv, size_t bytes)
{
	struct mp_context *mp = context;
	if (ncclAllGather(send, recv, bytes, ncclChar, mp->comm, mp->stream) != ncclSuccess)
		return NDET_ERR_NCCL;
	return cudaStreamSynchronize(mp->stream) == cudaSuccess ? NDET_OK : NDET_ERR_CUDA;
}

static struct mp_context *mp_barrier_context;
static void mp_barrier(void *context)
{
	struct mp_context *mp = context;
	int *token = NULL;
	GPU_CHECK(cudaMalloc((void **)&token, sizeof(int)));
	ncclAllReduce(token, token, 1, ncclInt32, ncclSum, mp->comm, mp->stream);
	GPU_CHECK(cudaStreamSynchronize(mp->stream));
	GPU_CHECK(cudaFree(token));
}

static int run_mp(bool quick)
{
	const int rank = (int)env_u64("RANK", 0), nranks = (int)env_u64("WORLD", 1);
	const char *id_file = getenv("NDET_TEST_ID_FILE");
	if (id_file == NULL) {
		fprintf(stderr, "mp mode needs NDET_TEST_ID_FILE, RANK and WORLD\n");
		return 2;
	}
	GPU_CHECK(cudaSetDevice(0));
	ncclUniqueId id;
	if (!gpu_share_unique_id(rank, id_file, &id))
		return 2;
	struct mp_context mp;
	GPU_CHECK(cudaStreamCreateWithFlags(&mp.stream, cudaStreamNonBlocking));
	if (ncclCommInitRank(&mp.comm, nranks, id, rank) != ncclSuccess) {
		fprintf(stderr, "rank %d: ncclCommInitRank failed\n", rank);
		return 2;
	}
	mp_barrier_context = &mp;
	struct gpu_rank gpu = {.rank = rank,
			       .nranks = nranks,
			       .device = 0,
			       .barrier = mp_barrier,
			       .barrier_context = &mp};
	gpu_streams_create(&gpu);
	struct ndet_engine_config config;
	gpu_test_config(&config, rank, nranks);
	struct ndet_setup_verdict verdict;
	ndet_status_t st = ndet_engine_create(&config, mp_allgather, &mp, &gpu.engine, &verdict);
	if (st != NDET_OK) {
		fprintf(stderr, "rank %d: engine create: %s (verdict %d, rank %d)\n", rank,
			ndet_status_name(st), verdict.reason, verdict.offending_rank);
		return 2;
	}
	gpu_run_matrix(&gpu, quick);
	gpu_run_graph(&gpu, quick ? 10 : 100);
	gpu_run_streams(&gpu, quick ? 100 : 1000);
	gpu_run_collectives(&gpu, quick);
	gpu_run_collectives_graph(&gpu, quick ? 4 : 40);
	ndet_engine_destroy(gpu.engine, true);
	/* Error paths on fresh engines: a diverging count, then a rank that never calls. */
	config.timeout_ms = 3000;
	gpu.timeout_ms = config.timeout_ms;
	for (int silent = 0; silent < 2 && nranks >= 2; silent++) {
		gpu.checks++;
		st = ndet_engine_create(&config, mp_allgather, &mp, &gpu.engine, &verdict);
		if (st != NDET_OK) {
			gpu.failures++;
			fprintf(stderr,
				"FAIL rank %d: engine re-create: %s (verdict %d, rank %d)\n", rank,
				ndet_status_name(st), verdict.reason, verdict.offending_rank);
			break;
		}
		if (silent)
			gpu_run_divergence(&gpu, nranks - 1, -1);
		else
			gpu_run_divergence(&gpu, -1, 1);
		ndet_engine_destroy(gpu.engine, false);
	}
	ncclCommDestroy(mp.comm);
	printf("SUMMARY ndet_gpu_test mp rank %d/%d: %llu checks, %llu failed\n", rank, nranks,
	       gpu.checks, gpu.failures);
	return gpu.failures == 0 ? 0 : 1;
}

/*
 * Load (and, from PTX, compile) the one-launch kernels of the dtypes this run covers
 * (NDET_TEST_DTYPES) before a sanitizer's time limit.
 */
static int run_load_all_ranks(void)
{
	struct timespec t0, t1;
	unsigned mask = 0;
	for (int dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++)
		if (gpu_dtype_selected((ndet_dtype_t)dtype))
			mask |= 1u << dtype;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	const cudaError_t err = (cudaError_t)ndet_kernel_all_ranks_load(mask);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	const double seconds =
		(double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
	if (err != cudaSuccess) {
		printf("SUMMARY ndet_gpu_test load-all-ranks: FAILED after %.1f s: %s\n", seconds,
		       cudaGetErrorString(err));
		return 1;
	}
	printf("SUMMARY ndet_gpu_test load-all-ranks: loaded in %.1f s\n", seconds);
	return 0;
}

/*
 * avg divides by a power of two as a product with its exact inverse: the same bits
 * as the division for every f32 input (all 2^32 patterns) and for 2^32 f64 patterns
 * spread over every exponent, at rank counts 1 to 2^20.
 */
static int run_avg_product(void)
{
	static const uint32_t counts[] = {1, 2, 4, 8, 16, 64, 1024, 1u << 20};
	unsigned long long *device = NULL, host[2];
	GPU_CHECK(cudaMalloc((void **)&device, sizeof(host)));
	int checks = 0, failures = 0;
	for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
		for (int wide = 0; wide < 2; wide++) {
			GPU_CHECK(cudaMemset(device, 0, sizeof(host)));
			GPU_CHECK((cudaError_t)ndet_kernel_check_avg_product(
				wide, counts[c], 0, 1ull << 32, device, device + 1, NULL));
			GPU_CHECK(cudaDeviceSynchronize());
			GPU_CHECK(cudaMemcpy(host, device, sizeof(host), cudaMemcpyDeviceToHost));
			checks++;
			if (host[0] != 0) {
				failures++;
				printf("FAIL avg-product: %s, n = %u: %llu inputs differ from the "
				       "division, the first 0x%llx\n",
				       wide ? "f64" : "f32", counts[c], host[0], host[1]);
			}
		}
	}
	GPU_CHECK(cudaFree(device));
	printf("SUMMARY ndet_gpu_test avg-product: %d checks of 2^32 inputs, %d failed\n", checks,
	       failures);
	return failures == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	/*
	 * Ranks that share one GPU in one process run on many streams; with CUDA's
	 * default of 8 hardware queues two ranks' kernels can land in one queue, one
	 * behind the other while the first waits for the second.  Ask for the most
	 * queues (before the first CUDA call); 12 ranks' streams still outnumber them,
	 * so the loopback launches in lock-step too (gpu_rank.shared_queues).  Separate
	 * GPUs or processes need nothing, and under MPS 32 queues per client cost: a
	 * fourth such client failed to start (cudaSetDevice: out of memory).
	 */
	const bool one_process =
		argc >= 2 && (strcmp(argv[1], "loopback") == 0 ||
			      strcmp(argv[1], "sanitize") == 0 || strcmp(argv[1], "hosts") == 0);
	if (one_process)
		setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
	int devices = 0;
	if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
		printf("SUMMARY ndet_gpu_test: no CUDA GPU visible, skipped\n");
		return 77;
	}
	if (argc >= 3 && strcmp(argv[1], "loopback") == 0)
		return run_loopback(atoi(argv[2]), argc < 4 || strcmp(argv[3], "full") != 0, false);
	if (argc >= 3 && strcmp(argv[1], "sanitize") == 0) {
		/* The one-launch kernels exist for up to 8 ranks (ndet_kernels.h). */
		const int n = atoi(argv[2]);
		if (n < 1 || n > 8) {
			fprintf(stderr, "%s: sanitize takes 1 to 8 ranks, not %s\n", argv[0],
				argv[2]);
			return 2;
		}
		return run_loopback(n, true, true);
	}
	if (argc >= 3 && strcmp(argv[1], "one-launch-time") == 0) {
		const int n = atoi(argv[2]);
		if (n < 2 || n > 8) {
			fprintf(stderr, "%s: one-launch-time takes 2 to 8 ranks, not %s\n", argv[0],
				argv[2]);
			return 2;
		}
		gpu_default_settings = true;
		return run_loopback(n, true, true);
	}
	if (argc >= 3 && strcmp(argv[1], "hosts") == 0) {
		bool quick = true, one_launch = false;
		for (int i = 3; i < argc; i++) {
			if (strcmp(argv[i], "full") == 0 || strcmp(argv[i], "quick") == 0) {
				quick = strcmp(argv[i], "quick") == 0;
			} else if (strcmp(argv[i], "one-launch") == 0) {
				one_launch = true;
			} else {
				fprintf(stderr,
					"%s: hosts takes quick, full and one-launch, not %s\n",
					argv[0], argv[i]);
				return 2;
			}
		}
		return gpu_run_hosts(argv[2], quick, one_launch);
	}
	if (argc >= 2 && strcmp(argv[1], "mp") == 0)
		return run_mp(argc < 3 || strcmp(argv[2], "full") != 0);
	if (argc >= 2 && strcmp(argv[1], "load-all-ranks") == 0)
		return run_load_all_ranks();
	if (argc >= 2 && strcmp(argv[1], "avg-product") == 0)
		return run_avg_product();
	fprintf(stderr,
		"usage: %s loopback N [quick|full] | sanitize N (1-8) | hosts LAYOUT "
		"[quick|full] [one-launch] | one-launch-time N (2-8) | mp [quick|full] | "
		"load-all-ranks | avg-product\n",
		argv[0]);
	return 2;
}
