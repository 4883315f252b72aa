/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The CUDA engine (src/ndet_engine.c, compiled in) on a fake CUDA runtime
 * (test/ndet_fake_cuda.h): setup, launch ordering, error reporting and teardown,
 * with the runtime counting what is allocated and mapped and flagging what a GPU
 * would punish (memory freed while a peer maps it, a device-wide synchronisation
 * behind a spinning kernel, a destroyed stream used again).  Ranks are set up by
 * one thread in lockstep, or by a thread each; "processes" are devices (or threads)
 * with a getpid() of their own, so their peers are reached through IPC.
 */
#include "config.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ndet_engine.h"
#include "ndet_fake_cuda.h"
#include "ndet_kernels.h"
#include "ndet_log.h"
#include "ndet_test_clock.h"
#include "ndet_teardown.h"

#define MAX_RANKS 4
#define COUNT     1024

/* ------------------------------------------------------------------ the exchange */

/* One communicator's all-gather: a rendezvous of its ranks, whatever their threads. */
struct world {
	int nranks;
	pthread_mutex_t lock;
	pthread_cond_t done;
	int posted;
	uint64_t generation;
	const void *sends[MAX_RANKS];
	void *recvs[MAX_RANKS];
	int rounds;                /* exchanges completed */
	int fail_round;            /* this exchange fails on every rank (0: none) */
	int drop_round, drop_rank; /* this exchange leaves drop_rank's slot unwritten */
	ndet_status_t result;      /* of the last exchange */
};

struct member {
	struct world *world;
	int rank;
};

static uint64_t world_post(struct world *world, int rank, const void *send, void *recv,
			   size_t bytes)
{
	pthread_mutex_lock(&world->lock);
	world->sends[rank] = send;
	world->recvs[rank] = recv;
	uint64_t generation = world->generation;
	if (++world->posted == world->nranks) {
		world->rounds++;
		world->result = world->rounds == world->fail_round ? NDET_ERR_NCCL : NDET_OK;
		for (int r = 0; r < world->nranks && world->result == NDET_OK; r++)
			for (int q = 0; q < world->nranks; q++)
				if (world->rounds != world->drop_round || q != world->drop_rank)
					memcpy((char *)world->recvs[r] + (size_t)q * bytes,
					       world->sends[q], bytes);
		fake_cuda_log("exchange %d", world->rounds);
		world->posted = 0;
		world->generation++;
		pthread_cond_broadcast(&world->done);
	}
	pthread_mutex_unlock(&world->lock);
	return generation;
}

static ndet_status_t world_wait(struct world *world, uint64_t generation)
{
	pthread_mutex_lock(&world->lock);
	while (world->generation == generation)
		pthread_cond_wait(&world->done, &world->lock);
	ndet_status_t result = world->result;
	pthread_mutex_unlock(&world->lock);
	return result;
}

/* ndet_engine_exchange_fn: post every member first, then wait (one thread, many ranks). */
static ndet_status_t exchange(void *const contexts[], int count, const void *const sends[],
			      void *const recvs[], size_t bytes, const cudaStream_t streams[])
{
	(void)streams;
	uint64_t generations[MAX_RANKS];
	ndet_status_t status = NDET_OK;
	assert_true(count <= MAX_RANKS);
	for (int i = 0; i < count; i++) {
		const struct member *member = contexts[i];
		generations[i] = world_post(member->world, member->rank, sends[i], recvs[i], bytes);
	}
	for (int i = 0; i < count; i++) {
		const struct member *member = contexts[i];
		ndet_status_t result = world_wait(member->world, generations[i]);
		if (result != NDET_OK)
			status = result;
	}
	return status;
}

/* ------------------------------------------------------------------ engines */

struct group {
	struct world world;
	struct member members[MAX_RANKS];
	struct ndet_engine *engines[MAX_RANKS];
	struct ndet_engine_member results[MAX_RANKS];
	int nranks;
	bool processes;      /* every rank a process of its own (IPC peers) */
	uint64_t timeout_ms; /* NCCL_DET_TIMEOUT */
	int launched;        /* flag: thread-per-rank runs */
};

static void group_init(struct group *group, int nranks, bool processes)
{
	memset(group, 0, sizeof(*group));
	group->nranks = nranks;
	group->processes = processes;
	group->timeout_ms = 30000;
	group->world.nranks = nranks;
	pthread_mutex_init(&group->world.lock, NULL);
	pthread_cond_init(&group->world.done, NULL);
	for (int r = 0; r < nranks; r++)
		group->members[r] = (struct member){.world = &group->world, .rank = r};
}

static void group_fini(struct group *group)
{
	pthread_cond_destroy(&group->world.done);
	pthread_mutex_destroy(&group->world.lock);
}

static struct ndet_engine_member rank_member(const struct group *group, int rank)
{
	struct ndet_engine_member member = {
		.config =
			{
				.rank = rank,
				.nranks = group->nranks,
				.cuda_device = group->processes ? rank : 0,
				.pool_size = 64 << 10,
				.max_blocks = 4,
				.oneshot_max = 1 << 20,
				.timeout_ms = group->timeout_ms,
				.max_memory = 1ull << 30,
				.settings_hash = 7,
				.test_fail_rank = -1,
			},
		.exchange_context = (void *)&group->members[rank],
	};
	return member;
}

/* Every rank set up by this thread in lockstep. */
static void group_setup(struct group *group)
{
	fake_cuda_set_pid_per_device(group->processes);
	for (int r = 0; r < group->nranks; r++)
		group->results[r] = rank_member(group, r);
	ndet_engine_create_group(group->results, group->nranks, exchange);
	for (int r = 0; r < group->nranks; r++)
		group->engines[r] = group->results[r].engine;
}

static void group_create(struct group *group, int nranks, bool processes)
{
	group_init(group, nranks, processes);
	group_setup(group);
	for (int r = 0; r < nranks; r++)
		assert_int_equal(group->results[r].status, NDET_OK);
}

static float send_values[COUNT], recv_values[COUNT];

static void launch(struct ndet_engine *engine, cudaStream_t stream)
{
	assert_int_equal(ndet_engine_allreduce(engine, send_values, recv_values, COUNT,
					       NDET_DTYPE_F32, NDET_OP_SUM, stream),
			 NDET_OK);
}

static cudaStream_t new_stream(void)
{
	cudaStream_t stream = NULL;
	assert_int_equal(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
	return stream;
}

/* ------------------------------------------------------------------ checks */

static struct ndet_resources held(void)
{
	struct ndet_resources now;
	ndet_resources_get(&now);
	return now;
}

static struct fake_cuda_counts runtime(void)
{
	struct fake_cuda_counts now;
	fake_cuda_counts(&now);
	return now;
}

static void assert_no_violation(void)
{
	if (runtime().violations != 0)
		fail_msg("%d violation(s), the last: %s", runtime().violations,
			 fake_cuda_last_violation());
}

/* What the engine counts is what the runtime holds. */
static void assert_counts_agree(void)
{
	struct ndet_resources engine = held();
	struct fake_cuda_counts cuda = runtime();
	assert_int_equal(engine.allocations, cuda.allocations);
	assert_int_equal(engine.bytes, cuda.bytes);
	assert_int_equal(engine.ipc_imports, cuda.mappings);
}

static void assert_nothing_held(void)
{
	assert_no_violation();
	assert_counts_agree();
	struct ndet_resources now = held();
	if (now.allocations != 0 || now.ipc_imports != 0 || now.deferred_pools != 0 ||
	    now.leaked_pools != 0)
		fail_msg("%lld allocations (%lld bytes), %lld mappings, %lld pools waiting, %lld "
			 "kept",
			 (long long)now.allocations, (long long)now.bytes,
			 (long long)now.ipc_imports, (long long)now.deferred_pools,
			 (long long)now.leaked_pools);
	assert_int_equal(ndet_teardown_shares_for_testing(), 0);
}

/* Every engine's memory kept on purpose (and counted so), nothing freed under a reader. */
static void assert_all_kept(int engines)
{
	assert_no_violation();
	assert_counts_agree();
	struct ndet_resources now = held();
	assert_int_equal(now.leaked_pools, engines);
	assert_int_equal(now.leaked_bytes, now.bytes);
	assert_int_equal(now.deferred_pools, 0);
	assert_int_equal(ndet_teardown_shares_for_testing(), 0);
}

static int log_count(const char *prefix, int from, int to)
{
	int count = 0;
	for (int i = fake_cuda_log_find(prefix, from); i >= 0 && i < to;
	     i = fake_cuda_log_find(prefix, i + 1))
		count++;
	return count;
}

static int reset(void **state)
{
	(void)state;
	fake_cuda_reset();
	ndet_resources_reset_for_testing();
	fake_cuda_set_kernel(FAKE_CUDA_KERNEL_DONE);
	/* A hang fails the test instead of `make check`. */
	alarm(120);
	return 0;
}

/* ------------------------------------------------------------------ ranks on threads */

struct rank_thread {
	struct group *group;
	int rank;
	enum fake_cuda_kernel kernel;
	int close_delay_ms;
	pthread_t thread;
	ndet_status_t created, destroyed;
	double seconds; /* in the destroy */
};

/* A process: its own pid, sets up its rank, launches once, destroys with the barrier. */
static void *rank_main(void *opaque)
{
	struct rank_thread *me = opaque;
	struct group *group = me->group;
	fake_cuda_set_thread_pid((pid_t)(6000000 + me->rank));
	fake_cuda_set_close_delay_ms(me->close_delay_ms);
	fake_cuda_set_kernel(me->kernel);
	struct ndet_engine_member member = rank_member(group, me->rank);
	ndet_engine_create_group(&member, 1, exchange);
	me->created = member.status;
	if (member.status == NDET_OK) {
		group->engines[me->rank] = member.engine;
		if (ndet_engine_allreduce(member.engine, send_values, recv_values, COUNT,
					  NDET_DTYPE_F32, NDET_OP_SUM, NULL) != NDET_OK)
			me->created = NDET_ERR_INTERNAL;
		__atomic_add_fetch(&group->launched, 1, __ATOMIC_ACQ_REL);
		double start = now_seconds();
		me->destroyed = ndet_engine_destroy(member.engine, true);
		me->seconds = now_seconds() - start;
	}
	return NULL;
}

static void run_rank_threads(struct rank_thread *threads, int nranks)
{
	for (int r = 0; r < nranks; r++)
		assert_int_equal(pthread_create(&threads[r].thread, NULL, rank_main, &threads[r]),
				 0);
}

static void join_rank_threads(struct rank_thread *threads, int nranks)
{
	for (int r = 0; r < nranks; r++) {
		assert_int_equal(pthread_join(threads[r].thread, NULL), 0);
		assert_int_equal(threads[r].created, NDET_OK);
	}
}

/* ------------------------------------------------------------------ teardown order */

/*
 * Our kernels idle, then our mappings of peers' pools closed, then the barrier,
 * then our pool freed: no pool is freed while a peer still maps it (CUDA leaves
 * that undefined).  One thread drives three "processes" in lockstep: before the fix
 * rank 0 freed its pool right after the barrier, while ranks 1 and 2 still mapped it.
 */
static void test_teardown_order_lockstep(void **state)
{
	(void)state;
	struct group group;
	group_create(&group, 3, true);
	for (int r = 0; r < 3; r++)
		launch(group.engines[r], NULL);
	assert_int_equal(runtime().mappings, 6);
	const int from = fake_cuda_log_length();
	assert_int_equal(ndet_engine_destroy_group(group.engines, 3, true), NDET_OK);
	const int barrier = fake_cuda_log_find("exchange", from);
	assert_true(barrier > from);
	const int end = fake_cuda_log_length();
	assert_int_equal(log_count("close", from, barrier), 6);
	assert_int_equal(log_count("free", from, barrier), 0);
	assert_int_equal(log_count("close", barrier, end), 0);
	assert_true(log_count("free", barrier, end) >= 3 * 4);
	assert_nothing_held();
	group_fini(&group);
}

/* The same with a thread per "process" and one slow to close its mappings. */
static void test_teardown_order_threads(void **state)
{
	(void)state;
	struct group group;
	group_init(&group, 3, true);
	struct rank_thread threads[3];
	for (int r = 0; r < 3; r++)
		threads[r] = (struct rank_thread){
			.group = &group, .rank = r, .close_delay_ms = r == 2 ? 200 : 0};
	run_rank_threads(threads, 3);
	join_rank_threads(threads, 3);
	for (int r = 0; r < 3; r++)
		assert_int_equal(threads[r].destroyed, NDET_OK);
	assert_nothing_held();
	group_fini(&group);
}

/*
 * A barrier that does not complete (a dead peer, NCCL failed it): nobody can know
 * that the peers stopped reading, so every pool is kept, counted and logged once;
 * our own mappings are closed all the same (our kernels finished).
 */
static void test_barrier_incomplete_keeps_memory(void **state)
{
	(void)state;
	char log_path[] = "/tmp/ndet-test-engine-XXXXXX";
	int fd = mkstemp(log_path);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(setenv("NCCL_DET_DEBUG", "INFO", 1), 0);
	assert_int_equal(setenv("NCCL_DET_DEBUG_SUBSYS", "ALLOC", 1), 0);
	assert_int_equal(setenv("NCCL_DET_DEBUG_FILE", log_path, 1), 0);
	ndet_log_reset_for_testing();

	struct group group;
	group_create(&group, 3, true);
	for (int r = 0; r < 3; r++)
		launch(group.engines[r], NULL);
	group.world.fail_round = group.world.rounds + 1;
	assert_int_equal(ndet_engine_destroy_group(group.engines, 3, true), NDET_ERR_NCCL);
	assert_all_kept(3);
	assert_int_equal(runtime().mappings, 0);

	unsetenv("NCCL_DET_DEBUG");
	unsetenv("NCCL_DET_DEBUG_SUBSYS");
	unsetenv("NCCL_DET_DEBUG_FILE");
	ndet_log_reset_for_testing();
	FILE *file = fopen(log_path, "r");
	assert_non_null(file);
	char line[1024];
	int logged = 0;
	while (fgets(line, sizeof(line), file) != NULL)
		logged += strstr(line, "kept until exit") != NULL;
	fclose(file);
	unlink(log_path);
	assert_int_equal(logged, 1);
	group_fini(&group);
}

/*
 * A kernel that does not finish (and no abort): its rank waits until the kernels'
 * own deadline has passed with some grace, then keeps its memory and its mappings
 * and says so in the barrier; no peer frees its pool, and nothing synchronises the
 * device behind the kernel.
 */
static void test_kernel_not_finished_keeps_memory(void **state)
{
	(void)state;
	struct group group;
	group_init(&group, 3, true);
	group.timeout_ms = 100;
	group_setup(&group);
	fake_cuda_set_kernel(FAKE_CUDA_KERNEL_STUCK);
	launch(group.engines[0], NULL);
	fake_cuda_set_kernel(FAKE_CUDA_KERNEL_DONE);
	for (int r = 1; r < 3; r++)
		launch(group.engines[r], new_stream());
	double start = now_seconds();
	assert_int_equal(ndet_engine_destroy_group(group.engines, 3, true), NDET_OK);
	double waited = now_seconds() - start;
	if (waited > 0.1 + NDET_TEARDOWN_GRACE_MS / 1000.0 + 2.0)
		fail_msg("waited %.1f s for a kernel that does not finish", waited);
	assert_all_kept(3);
	/* Rank 0's kernel may still use its mappings: they stay open. */
	assert_int_equal(runtime().mappings, 2);
	assert_int_equal(fake_cuda_kernels_running(), 1);
	group_fini(&group);
}

/*
 * A kernel that faulted (illegal address) breaks the context: no event can say it
 * finished, and it will not set the error word.  The teardown gives up after the
 * grace period instead of the kernels' deadline, and keeps the memory.
 */
static void test_faulted_kernel_ends_wait(void **state)
{
	(void)state;
	struct group group;
	group_create(&group, 2, false);
	fake_cuda_set_kernel(FAKE_CUDA_KERNEL_FAULT);
	launch(group.engines[0], NULL);
	fake_cuda_set_kernel(FAKE_CUDA_KERNEL_DONE);
	double start = now_seconds();
	assert_int_equal(ndet_engine_destroy_group(group.engines, 2, false), NDET_OK);
	double waited = now_seconds() - start;
	if (waited > NDET_TEARDOWN_GRACE_MS / 1000.0 + 2.0)
		fail_msg("waited %.1f s behind a faulted kernel", waited);
	assert_all_kept(2);
	group_fini(&group);
}

/* ------------------------------------------------------------------ cycles */

enum cycle_end { END_BARRIER, END_DESTROY, END_ABORT };

/* Two ranks, one call each on the application's stream, then the end. */
static void engine_cycle(bool processes, enum cycle_end end)
{
	struct group group;
	group_create(&group, 2, processes);
	cudaStream_t stream = new_stream();
	for (int r = 0; r < 2; r++)
		launch(group.engines[r], stream);
	/* The application's stream may go before the communicator. */
	assert_int_equal(cudaStreamDestroy(stream), cudaSuccess);
	switch (end) {
	case END_BARRIER:
		assert_int_equal(ndet_engine_destroy_group(group.engines, 2, true), NDET_OK);
		break;
	case END_DESTROY: {
		struct fake_cuda_counts before = runtime();
		assert_int_equal(ndet_engine_destroy(group.engines[1], false), NDET_OK);
		/* Rank 0 may still read rank 1's pool: nothing of it is freed yet. */
		if (!processes) {
			assert_int_equal(runtime().allocations, before.allocations);
			assert_int_equal(held().deferred_pools, 1);
		}
		assert_int_equal(ndet_engine_destroy(group.engines[0], false), NDET_OK);
		break;
	}
	case END_ABORT:
		for (int r = 0; r < 2; r++)
			ndet_engine_abort(group.engines[r]);
		assert_int_equal(ndet_engine_destroy_group(group.engines, 2, false), NDET_OK);
		break;
	}
	group_fini(&group);
}

static int cycle_count(void)
{
	const char *value = getenv("NDET_TEST_CYCLES");
	int cycles = value != NULL ? atoi(value) : 0;
	return cycles > 0 ? cycles : 1000;
}

/*
 * Create/destroy cycles through the engine API in every order: nothing may be left
 * allocated or mapped after any cycle, except where a peer in another process may
 * still read (no barrier): there every pool is kept on purpose and counted.
 */
static void test_create_destroy_cycles(void **state)
{
	static const char *const names[] = {"barrier", "destroy", "abort"};
	const int cycles = cycle_count();
	for (int processes = 0; processes < 2; processes++) {
		for (int end = END_BARRIER; end <= END_ABORT; end++) {
			reset(state);
			const bool kept = processes && end != END_BARRIER;
			const int n = kept ? 100 : cycles;
			print_message("%d cycles, %s, %s\n", n, processes ? "processes" : "threads",
				      names[end]);
			for (int c = 0; c < n; c++) {
				engine_cycle(processes != 0, (enum cycle_end)end);
				if (!kept)
					assert_nothing_held();
			}
			if (kept) {
				assert_all_kept(2 * n);
				assert_int_equal(runtime().mappings, 0);
			}
		}
	}
}

/* ------------------------------------------------------------------ abort */

struct abort_later {
	struct ndet_engine *engine;
	const int *after;                 /* flag to wait for, or NULL */
	struct ndet_engine **engine_slot; /* read once *after is set */
	pthread_t thread;
};

static void *abort_later_main(void *opaque)
{
	struct abort_later *job = opaque;
	while (job->after != NULL && __atomic_load_n(job->after, __ATOMIC_ACQUIRE) < 2)
		pause_ms(1);
	pause_ms(200);
	ndet_engine_abort(job->engine != NULL ? job->engine : *job->engine_slot);
	return NULL;
}

/*
 * An abort from another thread makes a teardown that waits for a kernel return
 * within NDET_TEARDOWN_GRACE_MS, even for a kernel that never leaves (queued behind
 * a hung one): its memory is then kept, never freed under it.  Both without a
 * barrier (threads) and with one (processes, in lockstep).  Before the fix the wait
 * of a barrier teardown ended only when the error word was set, which such a kernel
 * never does: it hung.
 */
static void test_abort_bounds_teardown(void **state)
{
	for (int processes = 0; processes < 2; processes++) {
		reset(state);
		struct group group;
		group_create(&group, 2, processes != 0);
		fake_cuda_set_kernel(FAKE_CUDA_KERNEL_STUCK);
		launch(group.engines[0], new_stream());
		fake_cuda_set_kernel(FAKE_CUDA_KERNEL_DONE);
		launch(group.engines[1], new_stream());
		struct abort_later job = {.engine = group.engines[0]};
		assert_int_equal(pthread_create(&job.thread, NULL, abort_later_main, &job), 0);
		double start = now_seconds();
		assert_int_equal(ndet_engine_destroy_group(group.engines, 2, processes != 0),
				 NDET_OK);
		double waited = now_seconds() - start;
		assert_int_equal(pthread_join(job.thread, NULL), 0);
		if (waited > 0.2 + NDET_TEARDOWN_GRACE_MS / 1000.0 + 2.0)
			fail_msg("the teardown took %.1f s after the abort", waited - 0.2);
		/* A kernel of ours did not leave: both pools are kept, and its mapping. */
		assert_all_kept(2);
		assert_int_equal(runtime().mappings, processes ? 1 : 0);
		group_fini(&group);
	}
}

/*
 * A kernel that leaves when aborted, finalize between "processes" on a thread each,
 * the abort from a third: both return at once, and as the kernel did leave and the
 * barrier completed, everything is freed.
 */
static void test_abort_during_barrier_teardown(void **state)
{
	(void)state;
	struct group group;
	group_init(&group, 2, true);
	struct rank_thread threads[2] = {
		{.group = &group, .rank = 0, .kernel = FAKE_CUDA_KERNEL_SPIN},
		{.group = &group, .rank = 1},
	};
	struct abort_later job = {.after = &group.launched, .engine_slot = &group.engines[0]};
	assert_int_equal(pthread_create(&job.thread, NULL, abort_later_main, &job), 0);
	run_rank_threads(threads, 2);
	join_rank_threads(threads, 2);
	assert_int_equal(pthread_join(job.thread, NULL), 0);
	for (int r = 0; r < 2; r++) {
		assert_int_equal(threads[r].destroyed, NDET_OK);
		if (threads[r].seconds > 5.0)
			fail_msg("rank %d's teardown took %.1f s", r, threads[r].seconds);
	}
	assert_nothing_held();
	group_fini(&group);
}

/* ------------------------------------------------------------------ launch order */

/* The event of a "record EVENT STREAM" line. */
static void record_event(int line, const char *stream, char *event, size_t size)
{
	char name[16], on[16];
	assert_true(line >= 0);
	assert_int_equal(sscanf(fake_cuda_log_line(line), "record %15s %15s", name, on), 2);
	assert_string_equal(on, stream);
	snprintf(event, size, "%s", name);
}

/*
 * Calls on one engine keep their order across streams: right after each launch an
 * event is recorded on the launch stream, and the next launch's stream (if another)
 * waits for it.  The engine never names an earlier stream again (the application
 * destroyed it), and never queries an event recorded in a capture.
 */
static void test_launch_order_across_streams(void **state)
{
	(void)state;
	struct group group;
	group_create(&group, 2, false);
	cudaStream_t a = new_stream(), b = new_stream(), c = new_stream(), d = new_stream();
	char line[64], eager[16], captured[16];

	int from = fake_cuda_log_length();
	launch(group.engines[0], a);
	snprintf(line, sizeof(line), "launch %s", fake_cuda_name(a));
	int launched = fake_cuda_log_find(line, from);
	assert_true(launched >= 0);
	record_event(launched + 1, fake_cuda_name(a), eager, sizeof(eager));
	assert_int_equal(cudaStreamDestroy(a), cudaSuccess);

	from = fake_cuda_log_length();
	launch(group.engines[0], b);
	snprintf(line, sizeof(line), "wait %s %s", fake_cuda_name(b), eager);
	int waited = fake_cuda_log_find(line, from);
	snprintf(line, sizeof(line), "launch %s", fake_cuda_name(b));
	launched = fake_cuda_log_find(line, from);
	assert_true(waited >= 0 && waited < launched);
	record_event(launched + 1, fake_cuda_name(b), line, sizeof(line));
	assert_string_equal(line, eager);
	assert_int_equal(cudaStreamDestroy(b), cudaSuccess);

	/* Two streams of one capture: the wait becomes an edge of the graph. */
	fake_cuda_set_capture(c, 7);
	fake_cuda_set_capture(d, 7);
	from = fake_cuda_log_length();
	launch(group.engines[0], c);
	snprintf(line, sizeof(line), "launch %s captured", fake_cuda_name(c));
	launched = fake_cuda_log_find(line, from);
	record_event(launched + 1, fake_cuda_name(c), captured, sizeof(captured));
	assert_string_not_equal(captured, eager);
	launch(group.engines[0], d);
	snprintf(line, sizeof(line), "wait %s %s", fake_cuda_name(d), captured);
	assert_true(fake_cuda_log_find(line, launched) > launched);
	fake_cuda_set_capture(c, 0);
	fake_cuda_set_capture(d, 0);

	/* Eager again, on yet another stream: after the last eager call, whatever came between. */
	cudaStream_t e = new_stream();
	from = fake_cuda_log_length();
	launch(group.engines[0], e);
	snprintf(line, sizeof(line), "wait %s %s", fake_cuda_name(e), eager);
	waited = fake_cuda_log_find(line, from);
	snprintf(line, sizeof(line), "launch %s", fake_cuda_name(e));
	launched = fake_cuda_log_find(line, from);
	assert_true(waited >= 0 && waited < launched);

	launch(group.engines[1], NULL);
	assert_int_equal(ndet_engine_destroy_group(group.engines, 2, false), NDET_OK);
	assert_nothing_held();
	group_fini(&group);
}

/* ------------------------------------------------------------------ errors */

static bool details_of(struct ndet_engine *engine, uint32_t *block, uint32_t *peer, uint64_t *step,
		       uint64_t *observed, uint32_t *phase)
{
	return ndet_engine_error_details(engine, block, peer, step, observed, phase);
}

/*
 * An error's details are read only once complete: the writer claims the record,
 * writes the details, and publishes the error word last (ndet_types.h).  An error
 * word set before its details (the order kernels used before) gives no details
 * rather than stale ones; a claimed record whose error is not out yet is no error.
 */
static void test_error_details_published_last(void **state)
{
	(void)state;
	struct group group;
	group_create(&group, 2, false);
	uint32_t code = 0, block = 77, peer = 77, phase = 77;
	uint64_t step = 77, observed = 77;

	fake_cuda_set_kernel(FAKE_CUDA_KERNEL_FAIL_UNORDERED);
	launch(group.engines[0], NULL);
	assert_int_equal(ndet_engine_error(group.engines[0], &code), NDET_ERR_REMOTE);
	assert_int_equal(code, NDET_KERNEL_ERR_TIMEOUT);
	assert_false(details_of(group.engines[0], &block, &peer, &step, &observed, &phase));
	assert_int_equal(block, 77);

	fake_cuda_set_kernel(FAKE_CUDA_KERNEL_FAIL_CLAIMED);
	launch(group.engines[1], NULL);
	assert_int_equal(ndet_engine_error(group.engines[1], &code), NDET_OK);
	assert_false(details_of(group.engines[1], &block, &peer, &step, &observed, &phase));
	fake_cuda_publish_claimed();
	assert_int_equal(ndet_engine_error(group.engines[1], &code), NDET_ERR_REMOTE);
	assert_int_equal(code, NDET_KERNEL_ERR_TIMEOUT);
	assert_true(details_of(group.engines[1], &block, &peer, &step, &observed, &phase));
	assert_int_equal(block, 5);
	assert_int_equal(peer, 1);
	assert_int_equal(step, 9);
	assert_int_equal(observed, 0xabcdef);
	assert_int_equal(phase, 2);
	/* A poisoned engine refuses further calls at once. */
	assert_int_equal(ndet_engine_allreduce(group.engines[1], send_values, recv_values, COUNT,
					       NDET_DTYPE_F32, NDET_OP_SUM, NULL),
			 NDET_ERR_REMOTE);
	fake_cuda_set_kernel(FAKE_CUDA_KERNEL_DONE);
	/* The failed kernels have finished: everything goes. */
	assert_int_equal(ndet_engine_destroy_group(group.engines, 2, false), NDET_OK);
	assert_nothing_held();
	group_fini(&group);
}

/* ------------------------------------------------------------------ setup */

/*
 * An all-gather that leaves a rank's slot of round 4 unwritten: the device buffer
 * still holds round 3's records, which must not pass for round 4's.  Every rank
 * refuses alike, and the pools (mapped by peers in round 3) are freed with the last
 * rank of the process, or kept when the peers are other processes.
 */
static void test_setup_stale_round(void **state)
{
	for (int processes = 0; processes < 2; processes++) {
		reset(state);
		struct group group;
		group_init(&group, 3, processes != 0);
		group.world.drop_round = 4;
		group.world.drop_rank = 1;
		group_setup(&group);
		for (int r = 0; r < 3; r++) {
			assert_int_equal(group.results[r].status, NDET_ERR_UNSUPPORTED);
			assert_int_equal(group.results[r].verdict.reason, NDET_VERDICT_BAD_RECORD);
			assert_int_equal(group.results[r].verdict.offending_rank, 1);
		}
		if (processes)
			assert_all_kept(3);
		else
			assert_nothing_held();
		assert_int_equal(runtime().mappings, 0);
		group_fini(&group);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_teardown_order_lockstep, reset),
		cmocka_unit_test_setup(test_teardown_order_threads, reset),
		cmocka_unit_test_setup(test_barrier_incomplete_keeps_memory, reset),
		cmocka_unit_test_setup(test_kernel_not_finished_keeps_memory, reset),
		cmocka_unit_test_setup(test_faulted_kernel_ends_wait, reset),
		cmocka_unit_test_setup(test_create_destroy_cycles, reset),
		cmocka_unit_test_setup(test_abort_bounds_teardown, reset),
		cmocka_unit_test_setup(test_abort_during_barrier_teardown, reset),
		cmocka_unit_test_setup(test_launch_order_across_streams, reset),
		cmocka_unit_test_setup(test_error_details_published_last, reset),
		cmocka_unit_test_setup(test_setup_stale_round, reset),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
