/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The CUDA engine (src/engine/ndet_engine*.c, compiled in) on a fake CUDA runtime
 * (test/support/ndet_fake_cuda.h): setup, launch ordering, error reporting and teardown,
 * with the runtime counting what is allocated and mapped and flagging what a GPU
 * would punish (memory freed while a process that maps it may run a kernel, a copy
 * into freed memory, a device-wide synchronisation behind a spinning kernel, a
 * destroyed stream used again), and the detach protocol between processes (silent,
 * dead and stuck peers, stale words, the exit handler).  Ranks are set up by
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
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/ndet_engine.h"
#include "common/ndet_settings.h"
#include "protocol/ndet_setup.h"
#include "test/support/ndet_fake_cuda.h"
#include "test/gpu/ndet_gpu_sizes.h"
#include "kernels/ndet_kernels.h"
#include "common/ndet_log.h"
#include "protocol/ndet_backend.h"
#include "protocol/ndet_hosts_plan.h"
#include "protocol/ndet_plan.h"
#include "protocol/ndet_pool_layout.h"
#include "reference/ndet_reference.h"
#include "protocol/ndet_setup_record.h"
#include "test/support/ndet_test_clock.h"
#include "protocol/ndet_teardown.h"

#define MAX_RANKS 34 /* two hosts of 17: one rank past NDET_MAX_RANKS on a host */
#define COUNT     1024

pid_t __real_getpid(void); /* -Wl,--wrap=getpid: the test process's own */

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
	int abandon_round;         /* this exchange is abandoned in flight (an abort) */
	ndet_status_t result;      /* of the last exchange */
	/* Every rank's setup record, as the payload round gathered it. */
	struct ndet_setup_payload records[MAX_RANKS];
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
		world->result = world->rounds == world->fail_round      ? NDET_ERR_NCCL
				: world->rounds == world->abandon_round ? NDET_IN_PROGRESS
									: NDET_OK;
		for (int r = 0; r < world->nranks && world->result == NDET_OK; r++)
			for (int q = 0; q < world->nranks; q++)
				if (world->rounds != world->drop_round || q != world->drop_rank)
					memcpy((char *)world->recvs[r] + (size_t)q * bytes,
					       world->sends[q], bytes);
		for (int q = 0; q < world->nranks && bytes == sizeof(world->records[0]); q++)
			memcpy(&world->records[q], world->sends[q], bytes);
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
			      void *const recvs[], size_t bytes, const cudaStream_t streams[],
			      ndet_status_t results[])
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
		results[i] = world_wait(member->world, generations[i]);
		if (results[i] != NDET_OK)
			status = results[i];
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
	const char *hosts;   /* NCCL_DET_TEST_HOST: rank r's host is hosts[r]; NULL: one */
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
				.hosts_staging = 1 << 20,
				.settings_hash = 7,
				.test_fail_rank = -1,
			},
		.exchange_context = (void *)&group->members[rank],
	};
	if (group->hosts != NULL)
		member.config.test_host[0] = group->hosts[rank];
	return member;
}

/* Every rank set up by this thread in lockstep. */
/* Set up every rank of group->results (their configurations filled in) with `fn`. */
static void group_start(struct group *group, ndet_engine_exchange_fn fn)
{
	fake_cuda_set_pid_per_device(group->processes);
	ndet_engine_create_group(group->results, group->nranks, fn);
	for (int r = 0; r < group->nranks; r++)
		group->engines[r] = group->results[r].engine;
}

static void group_setup(struct group *group)
{
	for (int r = 0; r < group->nranks; r++)
		group->results[r] = rank_member(group, r);
	group_start(group, exchange);
}

static void group_create(struct group *group, int nranks, bool processes)
{
	group_init(group, nranks, processes);
	group_setup(group);
	for (int r = 0; r < nranks; r++)
		assert_int_equal(group->results[r].status, NDET_OK);
}

static float send_values[COUNT], recv_values[COUNT];
static float send_big[COUNT * 64], recv_big[COUNT * 64];

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
	    now.pending_pools != 0 || now.leaked_pools != 0)
		fail_msg("%lld allocations (%lld bytes), %lld mappings, %lld pools waiting, %lld "
			 "pending, %lld kept",
			 (long long)now.allocations, (long long)now.bytes,
			 (long long)now.ipc_imports, (long long)now.deferred_pools,
			 (long long)now.pending_pools, (long long)now.leaked_pools);
	/* The runtime holds nothing either: no block lives on for a forgotten mapping. */
	assert_int_equal(runtime().allocations, 0);
	assert_int_equal(runtime().mappings, 0);
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
	assert_int_equal(now.pending_pools, 0);
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
	/* Before the runtime's reset: pools an earlier test left pending are given up. */
	ndet_teardown_abandon_pending_for_testing();
	fake_cuda_reset();
	ndet_resources_reset_for_testing();
	/*
	 * One thread drives every "process" in turn: a release cannot see its peers'
	 * detach words before this thread has torn them down too, so it does not poll
	 * (tests with a thread per process poll as a process does).
	 */
	ndet_teardown_set_detach_wait_for_testing(0);
	ndet_setup_set_multi_host_for_testing(false);
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
	bool no_barrier; /* ncclCommDestroy alone: the detach protocol */
	bool abort;      /* ncclCommAbort first */
	pthread_t thread;
	ndet_status_t created, destroyed;
	double seconds;               /* in the destroy */
	struct ndet_kernel_args args; /* host_rank_main: the launch's arguments */
	bool have_args;
};

/* A process: its own pid, sets up its rank, launches once, destroys (with the barrier). */
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
		if (me->abort)
			ndet_engine_abort(member.engine);
		me->destroyed = ndet_engine_destroy(member.engine, !me->no_barrier);
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
 * that undefined).  One thread drives three "processes" in lockstep, so that a rank
 * freeing its pool right after the barrier, while ranks 1 and 2 still map it, shows.
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

/* INFO logging of `subsys` into a fresh temporary file, whose name goes to `path`. */
static void log_start(char *path, const char *subsys)
{
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(setenv("NCCL_DET_DEBUG", "INFO", 1), 0);
	assert_int_equal(setenv("NCCL_DET_DEBUG_SUBSYS", subsys, 1), 0);
	assert_int_equal(setenv("NCCL_DET_DEBUG_FILE", path, 1), 0);
	ndet_log_reset_for_testing();
}

/* Logging back to its defaults. */
static void log_stop(void)
{
	unsetenv("NCCL_DET_DEBUG");
	unsetenv("NCCL_DET_DEBUG_SUBSYS");
	unsetenv("NCCL_DET_DEBUG_FILE");
	ndet_log_reset_for_testing();
}

/* Lines of the log file at `path` that contain `needle`. */
static int file_lines_with(const char *path, const char *needle)
{
	FILE *file = fopen(path, "r");
	assert_non_null(file);
	char line[1024];
	int found = 0;
	while (fgets(line, sizeof(line), file) != NULL)
		found += strstr(line, needle) != NULL;
	fclose(file);
	return found;
}

/*
 * What a launch hands the kernel: the plan of ndet_engine_plan (path, grid, steps),
 * the trace buffer of ndet_engine_set_trace and nothing after it is cleared, and,
 * at INFO with the COLL subsystem, one line per call naming the protocol and grid.
 */
static void test_launch_args_trace_and_coll_line(void **state)
{
	(void)state;
	char log_path[] = "/tmp/ndet-test-engine-XXXXXX";
	log_start(log_path, "COLL");

	struct group group;
	group_create(&group, 2, false);
	struct ndet_plan plan;
	assert_int_equal(
		ndet_engine_plan(group.engines[1], COUNT, NDET_DTYPE_F32, NDET_OP_SUM, &plan),
		NDET_OK);
	static uint64_t trace_words[2 * NDET_TRACE_WORDS];
	ndet_engine_set_trace(group.engines[1], trace_words);
	for (int r = 0; r < 2; r++)
		launch(group.engines[r], NULL);
	struct ndet_kernel_args args;
	assert_true(fake_cuda_last_launch(1, &args));
	assert_ptr_equal(args.trace, trace_words);
	assert_int_equal(args.path, plan.path);
	assert_int_equal(args.blocks, plan.blocks);
	assert_int_equal(args.steps, plan.steps);
	assert_int_equal(args.chunk_elems, plan.chunk_elems);
	assert_int_equal(args.signature, plan.signature);
	assert_true(fake_cuda_last_launch(0, &args));
	assert_null(args.trace); /* only the engine it was set on */
	ndet_engine_set_trace(group.engines[1], NULL);
	for (int r = 0; r < 2; r++)
		launch(group.engines[r], NULL);
	assert_true(fake_cuda_last_launch(1, &args));
	assert_null(args.trace);
	assert_int_equal(ndet_engine_destroy_group(group.engines, 2, true), NDET_OK);
	assert_nothing_held();

	log_stop();
	char want[160];
	snprintf(want, sizeof(want),
		 "rank 1: all-reduce count %d f32 sum: %s, %u blocks x %llu steps", COUNT,
		 ndet_plan_path_name(plan.path), plan.blocks, (unsigned long long)plan.steps);
	assert_int_equal(file_lines_with(log_path, want), 2);                  /* rank 1's calls */
	assert_int_equal(file_lines_with(log_path, ": all-reduce count "), 4); /* all */
	unlink(log_path);
}

/*
 * A barrier that does not complete (NCCL failed it): it proves nothing, but every
 * rank's kernels finished and it wrote its detach words before the barrier, so the
 * detach protocol frees every pool all the same, and nothing is "kept until exit".
 * Before the detach protocol every pool was kept until exit.
 */
static void test_barrier_incomplete_detach_frees(void **state)
{
	(void)state;
	char log_path[] = "/tmp/ndet-test-engine-XXXXXX";
	log_start(log_path, "ALLOC");

	struct group group;
	group_create(&group, 3, true);
	for (int r = 0; r < 3; r++)
		launch(group.engines[r], NULL);
	group.world.fail_round = group.world.rounds + 1;
	assert_int_equal(ndet_engine_destroy_group(group.engines, 3, true), NDET_ERR_NCCL);
	assert_nothing_held();
	assert_int_equal(held().peers_gone, 0);

	log_stop();
	const int kept = file_lines_with(log_path, "kept until exit");
	unlink(log_path);
	assert_int_equal(kept, 0);
	group_fini(&group);
}

/*
 * The teardown barrier's exchange is abandoned while NCCL may still run it (a
 * non-blocking communicator aborted from another thread): the barrier fails, the
 * pools go by the detach protocol, and each rank's exchange buffer, which NCCL's
 * all-gather may still write, stays allocated (and counted), never freed under it.
 */
static void test_abandoned_exchange_keeps_buffer(void **state)
{
	(void)state;
	struct group group;
	group_create(&group, 3, true);
	for (int r = 0; r < 3; r++)
		launch(group.engines[r], NULL);
	group.world.abandon_round = group.world.rounds + 1;
	assert_int_equal(ndet_engine_destroy_group(group.engines, 3, true), NDET_ERR_REMOTE);
	assert_no_violation();
	assert_counts_agree();
	struct ndet_resources now = held();
	assert_int_equal(now.allocations, 3);
	assert_int_equal(now.ipc_imports, 0);
	assert_int_equal(now.pending_pools, 0);
	assert_int_equal(now.deferred_pools, 0);
	/* Nothing but the three exchange buffers: each far smaller than a pool. */
	assert_true(now.bytes > 0 && now.bytes < 3 * (64u << 10));
	group_fini(&group);
}

/*
 * A kernel that does not finish (and no abort): its rank waits until the kernels'
 * own deadline has passed with some grace, then keeps its memory and its mappings
 * and says so in the barrier.  It writes no detach word (its kernel may still read
 * the peers' pools), so the peers' pools stay pending, never freed under it, and
 * nothing synchronises the device behind the kernel.  Once its process ends (the
 * driver closes its mappings and ends its kernel), the next look frees them.
 * Before the detach protocol they were kept until exit.
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
	assert_no_violation();
	assert_counts_agree();
	assert_int_equal(held().leaked_pools, 1);
	assert_int_equal(held().pending_pools, 2);
	/* Rank 0's kernel may still use its mappings: they stay open. */
	assert_int_equal(runtime().mappings, 2);
	assert_int_equal(fake_cuda_kernels_running(), 1);
	/* Later looks (teardowns) change nothing while it lives. */
	ndet_teardown_pending_retry(false);
	assert_int_equal(held().pending_pools, 2);

	fake_cuda_end_process((pid_t)(FAKE_CUDA_PID_DEVICE + 0));
	assert_int_equal(fake_cuda_kernels_running(), 0);
	assert_int_equal(runtime().mappings, 0);
	ndet_teardown_pending_retry(false);
	assert_no_violation();
	assert_int_equal(held().pending_pools, 0);
	assert_int_equal(held().peers_gone, 2);
	/* Only rank 0's own memory remains, kept on purpose. */
	assert_int_equal(held().leaked_pools, 1);
	assert_int_equal(held().allocations, runtime().allocations);
	assert_int_equal(held().bytes, held().leaked_bytes);
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
		/*
		 * Rank 0 may still read rank 1's pool: only what no peer reads went
		 * (between processes nothing: the pool waits for rank 0's detach word).
		 */
		assert_int_equal(runtime().allocations, before.allocations);
		assert_int_equal(processes ? held().pending_pools : held().deferred_pools, 1);
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
 * allocated or mapped after any cycle, between processes too, where destroy without
 * a barrier and abort release through the detach protocol (no pool of those cycles
 * is kept until exit).  Rank 1 goes first: its pool is pending until
 * rank 0's teardown detaches, which then frees both.
 */
static void test_create_destroy_cycles(void **state)
{
	static const char *const names[] = {"barrier", "destroy", "abort"};
	const int cycles = cycle_count();
	for (int processes = 0; processes < 2; processes++) {
		for (int end = END_BARRIER; end <= END_ABORT; end++) {
			reset(state);
			print_message("%d cycles, %s, %s\n", cycles,
				      processes ? "processes" : "threads", names[end]);
			for (int c = 0; c < cycles; c++) {
				engine_cycle(processes != 0, (enum cycle_end)end);
				assert_nothing_held();
			}
			assert_int_equal(held().peers_gone, 0);
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
 * barrier (threads) and with one (processes, in lockstep).  A barrier teardown that
 * waited only for the error word would hang: such a kernel never sets it.
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
		if (!processes) {
			/* A kernel of ours did not leave: both pools are kept. */
			assert_all_kept(2);
			assert_int_equal(runtime().mappings, 0);
			group_fini(&group);
			continue;
		}
		/*
		 * Processes: rank 0's memory is kept, and its mapping of rank 1's pool,
		 * which waits for it (rank 0 wrote no detach word: its kernel may read).
		 */
		assert_no_violation();
		assert_counts_agree();
		assert_int_equal(held().leaked_pools, 1);
		assert_int_equal(held().pending_pools, 1);
		assert_int_equal(runtime().mappings, 1);
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
 * A launch on `stream` that first waits for `event`; returns the log line of the
 * launch (its event is recorded on the next line).
 */
static int launch_after_wait(struct ndet_engine *engine, cudaStream_t stream, const char *event)
{
	char line[64];
	const int from = fake_cuda_log_length();
	launch(engine, stream);
	snprintf(line, sizeof(line), "wait %s %s", fake_cuda_name(stream), event);
	const int waited = fake_cuda_log_find(line, from);
	snprintf(line, sizeof(line), "launch %s", fake_cuda_name(stream));
	const int launched = fake_cuda_log_find(line, from);
	assert_true(waited >= 0 && waited < launched);
	return launched;
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

	launched = launch_after_wait(group.engines[0], b, eager);
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
	launched = launch_after_wait(group.engines[0], e, eager);
	record_event(launched + 1, fake_cuda_name(e), eager, sizeof(eager));

	/* The same stream again: no wait. */
	from = fake_cuda_log_length();
	launch(group.engines[0], e);
	snprintf(line, sizeof(line), "wait %s", fake_cuda_name(e));
	assert_int_equal(fake_cuda_log_find(line, from), -1);
	/*
	 * The same handle naming another stream (cudaStreamPerThread in another thread, a
	 * destroyed stream's address handed out again): it waits.
	 */
	fake_cuda_stream_renew(e);
	(void)launch_after_wait(group.engines[0], e, eager);

	launch(group.engines[1], NULL);
	assert_int_equal(ndet_engine_destroy_group(group.engines, 2, false), NDET_OK);
	assert_nothing_held();
	group_fini(&group);
}

/*
 * One rank: recvbuff is sendbuff's values (an all-reduce's whole buffer, a
 * reduce-scatter's one block), by a copy on the call's stream and nothing more: no
 * kernel, no event recorded or waited for (the copy touches no pool, so it neither
 * waits for the engine's last launch nor stands as one), and in place nothing at all.
 * A copy that fails fails the call and the engine's later calls.
 */
static void test_one_rank_copy_alone(void **state)
{
	(void)state;
	struct group group;
	group_create(&group, 1, false);
	struct ndet_engine *engine = group.engines[0];
	cudaStream_t a = new_stream(), b = new_stream();
	uint32_t seed = 0x9e3779b9u;
	for (int i = 0; i < COUNT; i++) {
		seed = seed * 1664525u + 1013904223u;
		send_values[i] = (float)(int32_t)seed * 0x1p-20f;
		recv_values[i] = -(float)i - 0.5f;
	}
	const int launches = runtime().launches;
	int from = fake_cuda_log_length();
	/* An odd count at an odd element offset. */
	assert_int_equal(ndet_engine_allreduce(engine, send_values + 3, recv_values + 1, COUNT - 7,
					       NDET_DTYPE_F32, NDET_OP_SUM, a),
			 NDET_OK);
	assert_memory_equal(recv_values + 1, send_values + 3, (COUNT - 7) * sizeof(float));
	assert_true(recv_values[0] == -0.5f);
	assert_true(recv_values[COUNT - 6] == -(float)(COUNT - 6) - 0.5f);
	const struct ndet_engine_call scatter = {.coll = NDET_COLL_REDUCE_SCATTER,
						 .sendbuff = send_values + 100,
						 .recvbuff = recv_values + 900,
						 .count = 99,
						 .dtype = NDET_DTYPE_F32,
						 .op = NDET_OP_MAX,
						 .root = -1};
	assert_int_equal(ndet_engine_collective(engine, &scatter, b), NDET_OK);
	assert_memory_equal(recv_values + 900, send_values + 100, 99 * sizeof(float));
	float before[COUNT];
	memcpy(before, send_values, sizeof(before));
	assert_int_equal(ndet_engine_allreduce(engine, send_values, send_values, COUNT,
					       NDET_DTYPE_F32, NDET_OP_AVG, a),
			 NDET_OK);
	assert_memory_equal(send_values, before, sizeof(before));
	assert_int_equal(runtime().launches, launches);
	for (int i = from; i < fake_cuda_log_length(); i++)
		if (strncmp(fake_cuda_log_line(i), "record ", 7) == 0 ||
		    strncmp(fake_cuda_log_line(i), "wait ", 5) == 0 ||
		    strncmp(fake_cuda_log_line(i), "launch ", 7) == 0)
			fail_msg("a one-rank copy did more than copy: %s", fake_cuda_log_line(i));
	assert_no_violation();

	/* A copy CUDA refuses: the call fails, and so do later ones. */
	fake_cuda_fail_device_copies(1);
	recv_values[5] = 1.25f;
	assert_int_equal(ndet_engine_allreduce(engine, send_values, recv_values, COUNT,
					       NDET_DTYPE_F32, NDET_OP_SUM, b),
			 NDET_ERR_CUDA);
	assert_true(recv_values[5] == 1.25f);
	assert_int_not_equal(ndet_engine_allreduce(engine, send_values, recv_values, COUNT,
						   NDET_DTYPE_F32, NDET_OP_SUM, a),
			     NDET_OK);
	assert_true(recv_values[5] == 1.25f);
	assert_int_not_equal(ndet_engine_error(engine, NULL), NDET_OK);
	assert_int_equal(cudaStreamDestroy(a), cudaSuccess);
	assert_int_equal(cudaStreamDestroy(b), cudaSuccess);
	assert_int_equal(ndet_engine_destroy_group(group.engines, 1, false), NDET_OK);
	assert_nothing_held();
	group_fini(&group);
}

/* ------------------------------------------------------------------ errors */

/*
 * A launch that fails on one rank while its peer's kernel of the same call waits:
 * the call fails there, the peer's kernel leaves through its abort word (instead of
 * waiting for the timeout, or for this rank's next call of the same shape, which
 * would pass for this one), and this engine refuses later calls at once.
 */
static void test_failed_launch_poisons_peers(void **state)
{
	(void)state;
	struct group group;
	group_create(&group, 2, false);
	fake_cuda_set_kernel(FAKE_CUDA_KERNEL_SPIN);
	launch(group.engines[0], NULL);
	assert_int_equal(fake_cuda_kernels_running(), 1);
	fake_cuda_set_kernel(FAKE_CUDA_KERNEL_LAUNCH_FAILS);
	const int launches = runtime().launches;
	assert_int_equal(ndet_engine_allreduce(group.engines[1], send_values, recv_values, COUNT,
					       NDET_DTYPE_F32, NDET_OP_SUM, NULL),
			 NDET_ERR_CUDA);
	/* Rank 0's kernel left, naming a peer's failure. */
	assert_int_equal(fake_cuda_kernels_running(), 0);
	uint32_t code = 0;
	assert_int_equal(ndet_engine_error(group.engines[0], &code), NDET_ERR_REMOTE);
	assert_int_equal(code, NDET_KERNEL_ERR_PEER);
	/* Rank 1 reports it, refuses its next call and launches nothing. */
	assert_int_equal(ndet_engine_error(group.engines[1], &code), NDET_ERR_REMOTE);
	assert_int_equal(code, NDET_KERNEL_ERR_LAUNCH);
	char lost[128];
	ndet_engine_error_describe(group.engines[1], lost, sizeof(lost));
	assert_string_equal(lost,
			    "kernel error 6, lost a launch of this rank's (its peers were told)");
	fake_cuda_set_kernel(FAKE_CUDA_KERNEL_DONE);
	assert_int_equal(ndet_engine_allreduce(group.engines[1], send_values, recv_values, COUNT,
					       NDET_DTYPE_F32, NDET_OP_SUM, NULL),
			 NDET_ERR_REMOTE);
	assert_int_equal(runtime().launches, launches);
	assert_int_equal(ndet_engine_destroy_group(group.engines, 2, false), NDET_OK);
	assert_nothing_held();
	group_fini(&group);
}

/*
 * A launch that cannot even make the engine's device current (a context already
 * broken) reaches no GPU and can tell no peer, but the engine fails from then on:
 * its next call of the same shape would pass for this one in its peers' kernels.
 */
static void test_unreachable_device_fails_engine(void **state)
{
	(void)state;
	struct group group;
	group_create(&group, 2, true); /* "processes": rank r on device r */
	assert_int_equal(cudaSetDevice(0), cudaSuccess);
	struct ndet_engine *engine = group.engines[1];
	const int launches = runtime().launches;
	fake_cuda_fail_set_device(true);
	assert_int_equal(ndet_engine_allreduce(engine, send_values, recv_values, COUNT,
					       NDET_DTYPE_F32, NDET_OP_SUM, NULL),
			 NDET_ERR_CUDA);
	fake_cuda_fail_set_device(false);
	uint32_t code = 0;
	assert_int_equal(ndet_engine_error(engine, &code), NDET_ERR_REMOTE);
	assert_int_equal(code, NDET_KERNEL_ERR_LAUNCH);
	assert_int_equal(ndet_engine_allreduce(engine, send_values, recv_values, COUNT,
					       NDET_DTYPE_F32, NDET_OP_SUM, NULL),
			 NDET_ERR_REMOTE);
	assert_int_equal(runtime().launches, launches);
	/* The other rank's engine is untouched. */
	assert_int_equal(ndet_engine_error(group.engines[0], &code), NDET_OK);
	assert_int_equal(ndet_engine_destroy_group(group.engines, 2, true), NDET_OK);
	assert_nothing_held();
	group_fini(&group);
}

static bool details_of(struct ndet_engine *engine, uint32_t *block, uint32_t *peer, uint64_t *step,
		       uint64_t *observed, uint32_t *phase)
{
	return ndet_engine_error_details(engine, block, peer, step, observed, phase);
}

/*
 * An error's details are read only once complete: the writer claims the record,
 * writes the details, and publishes the error word last (ndet_types.h).  An error
 * word set before its details (the wrong order) gives no details
 * rather than stale ones; a claimed record whose error is not out yet is no error.
 */
static void test_error_details_published_last(void **state)
{
	(void)state;
	struct group group;
	group_create(&group, 2, false);
	uint32_t code = 0, block = 77, peer = 77, phase = 77;
	uint64_t step = 77, observed = 77;
	char none[8] = "x";
	assert_int_equal(ndet_engine_error_describe(group.engines[0], none, sizeof(none)), 0);
	assert_string_equal(none, "");

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
	/* The WARN's line: the published details; without them, the error alone. */
	char text[256];
	const char *want = "kernel error 1, timed out (NCCL_DET_TIMEOUT): block 5, waiting for "
			   "rank 1's ready flag of step 9, last seen step 0 signature abcdef";
	assert_int_equal(ndet_engine_error_describe(group.engines[1], text, sizeof(text)),
			 strlen(want));
	assert_string_equal(text, want);
	assert_int_equal(ndet_engine_error_describe(group.engines[1], text, 11), 10);
	assert_string_equal(text, "kernel err");
	assert_int_equal(ndet_engine_error_describe(group.engines[0], text, sizeof(text)),
			 strlen("kernel error 1, timed out (NCCL_DET_TIMEOUT)"));
	assert_string_equal(text, "kernel error 1, timed out (NCCL_DET_TIMEOUT)");
	/*
	 * Querying the error makes no CUDA call (an error handler, a watchdog thread or
	 * an exit hook may ask while the runtime is unusable): with every runtime call
	 * refused and counted, both queries still answer, and nothing was counted.
	 */
	fake_cuda_set_unloading(true);
	code = 0;
	block = peer = phase = 0;
	assert_int_equal(ndet_engine_error(group.engines[1], &code), NDET_ERR_REMOTE);
	assert_int_equal(code, NDET_KERNEL_ERR_TIMEOUT);
	assert_true(details_of(group.engines[1], &block, &peer, &step, &observed, &phase));
	assert_int_equal(block, 5);
	assert_int_equal(phase, 2);
	assert_int_equal(ndet_engine_error(group.engines[0], &code), NDET_ERR_REMOTE);
	assert_int_equal(runtime().calls_unloading, 0);
	fake_cuda_set_unloading(false);
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

/* ------------------------------------------------------------------ GPU test sizes */

/* The paths one size list reaches with one configuration, per dtype (bit per path). */
static void paths_of(struct ndet_engine_config config, const size_t *counts, int ncounts,
		     unsigned paths[NDET_DTYPE_COUNT], bool multi_step[NDET_DTYPE_COUNT])
{
	for (int dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
		paths[dtype] = 0;
		multi_step[dtype] = false;
		for (int i = 0; i < ncounts; i++) {
			struct ndet_plan plan;
			assert_int_equal(ndet_engine_plan_for_config(&config, counts[i],
								     (ndet_dtype_t)dtype,
								     NDET_OP_SUM, &plan),
					 NDET_OK);
			paths[dtype] |= 1u << plan.path;
			if ((plan.path == NDET_PATH_TWOSHOT || plan.path == NDET_PATH_PUSH) &&
			    plan.steps > 1)
				multi_step[dtype] = true;
		}
	}
}

static struct ndet_engine_config harness_config(int nranks, int blocks, uint64_t push_min)
{
	struct ndet_engine_config config = {
		.rank = 0,
		.nranks = nranks,
		.pool_size = NDET_GPU_TEST_POOL,
		.max_blocks = blocks,
		.oneshot_max = NDET_GPU_TEST_ONESHOT,
		.ll_max = NDET_GPU_TEST_LL,
		.push_min = push_min,
		/* Every rank on the one GPU, an H100's or H200's 132 SMs. */
		.ranks_per_device = nranks,
		.device_sms = 132,
	};
	return config;
}

#define BIT(path) (1u << (path))

/* The plan of an f32 sum all-reduce of `count` under `config`. */
static struct ndet_plan f32_sum_plan(const struct ndet_engine_config *config, size_t count)
{
	struct ndet_plan plan;
	assert_int_equal(
		ndet_engine_plan_for_config(config, count, NDET_DTYPE_F32, NDET_OP_SUM, &plan),
		NDET_OK);
	return plan;
}

/*
 * The GPU harness's sizes (test/gpu/ndet_gpu_sizes.h) reach, with its settings, the
 * paths its phases are there to cover: the quick matrix (smoke, mp, most loopback
 * runs) LL, one-shot and two-shot for every dtype, and push (pull beyond
 * NDET_PLAN_PUSH_MAX_RANKS) over several steps for f32 and f64; the full matrix
 * the same with several steps for every dtype; the compute-sanitizer sizes LL,
 * one-shot and two-shot or push for every dtype; the delay phase's f32 counts all
 * four, and its LL-only counts LL alone on one to four blocks.  For the rank counts the suites run
 * on one GPU.  (Pull two-shot over several steps below push's sizes: suite.sh's NDET_TEST_PUSH=0
 * run.)
 */
static void test_gpu_harness_sizes_reach_every_path(void **state)
{
	(void)state;
	static const size_t quick[] = NDET_GPU_MATRIX_QUICK_SIZES;
	static const size_t full[] = NDET_GPU_MATRIX_FULL_SIZES;
	static const size_t sanitize[] = NDET_GPU_SANITIZE_SIZES;
	static const size_t delay[] = NDET_GPU_DELAY_COUNTS;
	static const size_t delay_ll[] = NDET_GPU_DELAY_LL_COUNTS;
	static const int rank_counts[] = {2, 3, 4, 5, 6, 7, 8, 12};
	unsigned paths[NDET_DTYPE_COUNT];
	bool multi[NDET_DTYPE_COUNT];

	for (size_t k = 0; k < sizeof(rank_counts) / sizeof(rank_counts[0]); k++) {
		const int n = rank_counts[k];
		const bool push = n <= NDET_PLAN_PUSH_MAX_RANKS;
		const struct ndet_engine_config test =
			harness_config(n, NDET_GPU_TEST_BLOCKS, NDET_GPU_TEST_PUSH);
		const struct ndet_engine_config sanitizer =
			harness_config(n, NDET_GPU_SANITIZE_BLOCKS, NDET_GPU_SANITIZE_PUSH);

		for (int pass = 0; pass < 2; pass++) {
			if (pass == 0)
				paths_of(test, quick, (int)(sizeof(quick) / sizeof(quick[0])),
					 paths, multi);
			else
				paths_of(test, full, (int)(sizeof(full) / sizeof(full[0])), paths,
					 multi);
			for (int dt = 0; dt < NDET_DTYPE_COUNT; dt++) {
				/* Several steps: quick for f32 and f64 (f16 and bf16 push
				 * only from the full sizes), full for every dtype. */
				const bool wide = ndet_dtype_size((ndet_dtype_t)dt) >= 4;
				if ((paths[dt] & BIT(NDET_PATH_LL)) == 0 ||
				    (paths[dt] & BIT(NDET_PATH_ONESHOT)) == 0 ||
				    (paths[dt] & BIT(NDET_PATH_TWOSHOT)) == 0 ||
				    (!multi[dt] && (wide || pass == 1)))
					fail_msg("n=%d %s %s matrix: paths 0x%x, several steps %d",
						 n, ndet_dtype_name((ndet_dtype_t)dt),
						 pass == 0 ? "quick" : "full", paths[dt],
						 multi[dt]);
				if (push && (wide || pass == 1) &&
				    (paths[dt] & BIT(NDET_PATH_PUSH)) == 0)
					fail_msg("n=%d %s matrix: no push", n,
						 ndet_dtype_name((ndet_dtype_t)dt));
			}
		}
		if (n == 2 || n == 3) { /* suite.sh: sanitize 2 and 3 */
			paths_of(sanitizer, sanitize, (int)(sizeof(sanitize) / sizeof(sanitize[0])),
				 paths, multi);
			for (int dt = 0; dt < NDET_DTYPE_COUNT; dt++)
				if ((paths[dt] & BIT(NDET_PATH_LL)) == 0 ||
				    (paths[dt] & BIT(NDET_PATH_ONESHOT)) == 0 ||
				    (paths[dt] & (BIT(NDET_PATH_TWOSHOT) | BIT(NDET_PATH_PUSH))) ==
					    0)
					fail_msg("n=%d %s sanitize sizes: paths 0x%x", n,
						 ndet_dtype_name((ndet_dtype_t)dt), paths[dt]);
		}
		paths_of(test, delay, (int)(sizeof(delay) / sizeof(delay[0])), paths, multi);
		const unsigned want = BIT(NDET_PATH_LL) | BIT(NDET_PATH_ONESHOT) |
				      BIT(NDET_PATH_TWOSHOT) | (push ? BIT(NDET_PATH_PUSH) : 0);
		if ((paths[NDET_DTYPE_F32] & want) != want)
			fail_msg("n=%d delay counts: paths 0x%x, want 0x%x", n,
				 paths[NDET_DTYPE_F32], want);
		/*
		 * The LL-only round: every count LL, each block count 1 to 4 in turn, blocks
		 * of all three sizes (a line for a half of the threads, one line per thread,
		 * two), each size on several blocks.
		 */
		unsigned grids = 0, small_grids = 0, half_grids = 0, full_grids = 0;
		for (size_t i = 0; i < sizeof(delay_ll) / sizeof(delay_ll[0]); i++) {
			const struct ndet_plan plan = f32_sum_plan(&test, delay_ll[i]);
			if (plan.path != NDET_PATH_LL)
				fail_msg("n=%d LL delay count %zu: path %d", n, delay_ll[i],
					 (int)plan.path);
			grids |= 1u << plan.blocks;
			const size_t block_bytes = plan.chunk_elems * sizeof(float);
			if (block_bytes == NDET_LL_BLOCK_BYTES / 4)
				small_grids |= 1u << plan.blocks;
			else if (block_bytes == NDET_LL_BLOCK_BYTES / 2)
				half_grids |= 1u << plan.blocks;
			else if (block_bytes == NDET_LL_BLOCK_BYTES)
				full_grids |= 1u << plan.blocks;
			else
				fail_msg("n=%d LL delay count %zu: blocks of %zu bytes", n,
					 delay_ll[i], block_bytes);
		}
		if (grids != (BIT(1) | BIT(2) | BIT(3) | BIT(4)))
			fail_msg("n=%d LL delay counts: block counts 0x%x", n, grids);
		if ((small_grids & ~BIT(1)) == 0 || (half_grids & ~BIT(1)) == 0 ||
		    (full_grids & ~BIT(1)) == 0)
			fail_msg("n=%d LL delay counts: quarter blocks on 0x%x, half on 0x%x, full "
				 "on 0x%x",
				 n, small_grids, half_grids, full_grids);
		/*
		 * The wide LL phase (gpu_run_ll_wide): at 3-8 ranks its engine takes wide
		 * lines for f32 sum from an element past the rule's threshold up to its
		 * grid (the cap of n ranks on one GPU, the pool's 64 slots) of one line per
		 * thread, and past it in two up to NCCL_DET_LL_MAX; f64 never.
		 */
		if (n >= 3 && n <= 8) {
			struct ndet_engine_config wide =
				harness_config(n, NDET_GPU_WIDE_BLOCKS, NDET_GPU_TEST_PUSH);
			wide.ll_max = NDET_GPU_WIDE_LL;
			wide.ll_wide_min = NDET_PLAN_LL_WIDE_MIN;
			const size_t grid = 192 / (size_t)n < 64 ? 192 / (size_t)n : 64;
			const size_t two = grid * 6144 < 256 * 1024 ? grid * 6144 : 256 * 1024;
			const size_t counts[] = {
				(224 * 1024 + (size_t)n - 2) / ((size_t)n - 1) / 4 + 1,
				grid * 3072 / 4 - 3, two / 4 - 5};
			for (size_t i = 0; i < 3; i++) {
				const struct ndet_plan plan = f32_sum_plan(&wide, counts[i]);
				if (plan.path != NDET_PATH_LL || plan.ll_line != 12 ||
				    plan.chunk_elems * 4 != (i < 2 ? 3072u : 6144u))
					fail_msg("n=%d wide count %zu: path %d, lines of %u, "
						 "blocks of "
						 "%llu elements",
						 n, counts[i], (int)plan.path, plan.ll_line,
						 (unsigned long long)plan.chunk_elems);
				struct ndet_plan f64;
				assert_int_equal(ndet_engine_plan_for_config(&wide, counts[i] / 2,
									     NDET_DTYPE_F64,
									     NDET_OP_SUM, &f64),
						 NDET_OK);
				assert_int_not_equal(f64.ll_line, 12);
			}
			const struct ndet_plan below = f32_sum_plan(&wide, counts[0] - 2);
			assert_int_equal(below.ll_line, 8);
		}
		/* The abort-at-start counts: one-shot, then LL of one block twice. */
		static const size_t abort_counts[] = NDET_GPU_ABORT_COUNTS;
		static const ndet_path_t abort_paths[] = {NDET_PATH_ONESHOT, NDET_PATH_LL,
							  NDET_PATH_LL};
		struct ndet_engine_config errors = test;
		errors.pool_size = NDET_GPU_ERROR_POOL;
		errors.max_blocks = NDET_GPU_ERROR_BLOCKS;
		for (size_t i = 0; i < sizeof(abort_counts) / sizeof(abort_counts[0]); i++) {
			const struct ndet_plan plan = f32_sum_plan(&errors, abort_counts[i]);
			if (plan.path != abort_paths[i] ||
			    (plan.path == NDET_PATH_LL && plan.blocks != 1))
				fail_msg("n=%d abort count %zu: path %d on %u blocks", n,
					 abort_counts[i], (int)plan.path, (unsigned)plan.blocks);
		}
		/* Lines past the first warp at 250 (thread 32 has one), thread 0's alone at 1. */
		if (abort_counts[1] * sizeof(float) <= 32 * 8 ||
		    abort_counts[2] * sizeof(float) > 8)
			fail_msg("abort counts: lines past the first warp at the second, only "
				 "thread 0's at the third");
	}
}

/* ------------------------------------------------------------------ setup */

/*
 * The setup records the callback exchanges live in device memory, or in pinned host
 * memory where cudaMalloc of the exchange buffer fails: never in pageable memory
 * (NCCL's all-gather reads and writes them from the GPU).
 */
static int exchange_memory_seen[3]; /* by enum fake_cuda_memory */

static ndet_status_t exchange_checking_memory(void *const contexts[], int count,
					      const void *const sends[], void *const recvs[],
					      size_t bytes, const cudaStream_t streams[],
					      ndet_status_t results[])
{
	for (int i = 0; i < count; i++) {
		const struct member *member = contexts[i];
		exchange_memory_seen[fake_cuda_memory_kind(sends[i], bytes)]++;
		exchange_memory_seen[fake_cuda_memory_kind(
			recvs[i], bytes * (size_t)member->world->nranks)]++;
	}
	return exchange(contexts, count, sends, recvs, bytes, streams, results);
}

static void test_setup_records_never_pageable(void **state)
{
	(void)state;
	const int nranks = 3;
	for (int pinned = 0; pinned < 2; pinned++) {
		struct group group;
		memset(exchange_memory_seen, 0, sizeof(exchange_memory_seen));
		/* The exchange buffer: a header or payload slot per rank, plus the send slot. */
		fake_cuda_fail_malloc_of(
			pinned ? sizeof(struct ndet_setup_payload) * (size_t)(nranks + 1) : 0);
		group_init(&group, nranks, pinned == 1);
		for (int r = 0; r < nranks; r++)
			group.results[r] = rank_member(&group, r);
		group_start(&group, exchange_checking_memory);
		for (int r = 0; r < nranks; r++)
			assert_int_equal(group.results[r].status, NDET_OK);
		assert_int_equal(exchange_memory_seen[FAKE_CUDA_MEMORY_NONE], 0);
		/* Every round (header, payload, map, probe) of every rank, send and recv. */
		assert_true(exchange_memory_seen[pinned ? FAKE_CUDA_MEMORY_PINNED
							: FAKE_CUDA_MEMORY_DEVICE] >=
			    2 * 2 * nranks);
		assert_int_equal(exchange_memory_seen[pinned ? FAKE_CUDA_MEMORY_DEVICE
							     : FAKE_CUDA_MEMORY_PINNED],
				 0);
		launch(group.engines[0], NULL);
		assert_int_equal(ndet_engine_destroy_group(group.engines, nranks, true), NDET_OK);
		fake_cuda_fail_malloc_of(0);
		assert_nothing_held();
		group_fini(&group);
	}
}

/*
 * One rank's exchange abandoned in round 2 (its communicator aborted while NCCL still
 * ran the all-gather): the ranks this thread drives on devices of their own may be
 * ranks of that communicator, so they leave with it, and no later exchange runs
 * without it (the world's would wait forever for the missing rank).
 */
static int abandon_calls;

static ndet_status_t exchange_abandoning(void *const contexts[], int count,
					 const void *const sends[], void *const recvs[],
					 size_t bytes, const cudaStream_t streams[],
					 ndet_status_t results[])
{
	const struct member *first = contexts[0];
	abandon_calls++;
	if (count != first->world->nranks)
		fail_msg("exchange %d: %d of %d ranks: a real job would hang", abandon_calls, count,
			 first->world->nranks);
	ndet_status_t status = exchange(contexts, count, sends, recvs, bytes, streams, results);
	for (int i = 0; i < count && abandon_calls == 2; i++) {
		if (((const struct member *)contexts[i])->rank == 1) {
			results[i] = NDET_IN_PROGRESS;
			status = NDET_IN_PROGRESS;
		}
	}
	return status;
}

/*
 * One rank cannot start (its device cannot be selected): the thread's other ranks of
 * its communicator leave before any exchange, which would wait for it forever.
 */
static void test_failed_start_takes_its_communicator(void **state)
{
	(void)state;
	struct group group;
	abandon_calls = 0;
	group_init(&group, 3, true);
	for (int r = 0; r < 3; r++)
		group.results[r] = rank_member(&group, r);
	group.results[1].config.cuda_device = 99;
	group_start(&group, exchange_abandoning);
	assert_int_equal(abandon_calls, 0);
	for (int r = 0; r < 3; r++) {
		assert_int_equal(group.results[r].status, r == 1 ? NDET_ERR_CUDA : NDET_ERR_REMOTE);
		assert_null(group.results[r].engine);
	}
	group_fini(&group);
}

static void test_abandoned_exchange_takes_its_communicator(void **state)
{
	(void)state;
	struct group group;
	abandon_calls = 0;
	group_init(&group, 3, true);
	for (int r = 0; r < 3; r++)
		group.results[r] = rank_member(&group, r);
	group_start(&group, exchange_abandoning);
	assert_int_equal(abandon_calls, 2);
	for (int r = 0; r < 3; r++) {
		assert_int_equal(group.results[r].status, NDET_ERR_REMOTE);
		assert_null(group.results[r].engine);
	}
	group_fini(&group);
}

/*
 * The launch plan ignores the pointers: aligned, misaligned by a byte, offset by an
 * element and in place, every field of the kernel's plan (path, grid, chunks, steps,
 * signature, lanes) is the same; only the pointers differ.  Counts on every path.
 */
#define PLAN_COUNT_MOST 300001
/* f32 counts of every all-reduce path with group_create_every_path's settings. */
#define PATH_COUNTS                                                                                \
	{                                                                                          \
		1, 777, 5000, 70001, PLAN_COUNT_MOST                                               \
	}
static float plan_send[PLAN_COUNT_MOST + 16], plan_recv[PLAN_COUNT_MOST + 16];

/* Two ranks with LL to 4 KiB, one-shot to 64 KiB, two-shot, and push from 1 MiB. */
static void group_create_every_path(struct group *group)
{
	group_init(group, 2, false);
	for (int r = 0; r < 2; r++) {
		group->results[r] = rank_member(group, r);
		group->results[r].config.ll_max = 4096;
		group->results[r].config.oneshot_max = 64 << 10;
		group->results[r].config.push_min = 1 << 20;
	}
	group_start(group, exchange);
	for (int r = 0; r < 2; r++)
		assert_int_equal(group->results[r].status, NDET_OK);
}

static void expect_same_plan(const struct ndet_kernel_args *a, const struct ndet_kernel_args *b)
{
	assert_int_equal(a->count, b->count);
	assert_int_equal(a->chunk_elems, b->chunk_elems);
	assert_int_equal(a->steps, b->steps);
	assert_int_equal(a->lane_bytes, b->lane_bytes);
	assert_int_equal(a->timeout_ns, b->timeout_ns);
	assert_int_equal(a->dtype, b->dtype);
	assert_int_equal(a->op, b->op);
	assert_int_equal(a->path, b->path);
	assert_int_equal(a->nranks, b->nranks);
	assert_int_equal(a->rank, b->rank);
	assert_int_equal(a->blocks, b->blocks);
	assert_int_equal(a->signature, b->signature);
	assert_int_equal(a->root, b->root);
	assert_int_equal(a->premul, b->premul);
	assert_int_equal(a->ll_offset, b->ll_offset);
}

static void test_plan_ignores_pointers(void **state)
{
	(void)state;
	static const size_t counts[] = PATH_COUNTS;
	bool paths[NDET_PATH_PUSH + 1] = {false};
	struct group group;
	group_create_every_path(&group);
	for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
		struct ndet_kernel_args first[2];
		for (int variant = 0; variant < 4; variant++) {
			const char *send = (const char *)plan_send;
			char *recv = (char *)plan_recv;
			if (variant == 1) {
				send += 1;
				recv += 3;
			} else if (variant == 2) {
				recv = (char *)plan_send; /* in place */
			} else if (variant == 3) {
				send += sizeof(float);
				recv += 5 * sizeof(float);
			}
			for (int r = 0; r < 2; r++)
				assert_int_equal(
					ndet_engine_allreduce(group.engines[r], send,
							      variant == 2 ? (void *)send : recv,
							      counts[c], NDET_DTYPE_F32,
							      NDET_OP_SUM, NULL),
					NDET_OK);
			for (int r = 0; r < 2; r++) {
				struct ndet_kernel_args args;
				assert_true(fake_cuda_last_launch(r, &args));
				assert_ptr_equal(args.sendbuff, send);
				assert_ptr_equal(args.recvbuff, variant == 2 ? send : recv);
				if (variant == 0) {
					first[r] = args;
					assert_true(args.path >= 0 && args.path <= NDET_PATH_PUSH);
					paths[args.path] = true;
				} else {
					expect_same_plan(&first[r], &args);
				}
			}
		}
	}
	/* The counts reach every all-reduce path of two ranks with these settings. */
	assert_true(paths[NDET_PATH_LL]);
	assert_true(paths[NDET_PATH_ONESHOT]);
	assert_true(paths[NDET_PATH_TWOSHOT]);
	assert_true(paths[NDET_PATH_PUSH]);
	assert_int_equal(ndet_engine_destroy_group(group.engines, 2, true), NDET_OK);
	assert_nothing_held();
	group_fini(&group);
}

/*
 * Setup and teardown while another stream captures (a graph captured in one thread,
 * a communicator created or destroyed in another): their allocations, frees and
 * copies run in the relaxed capture mode, which the fake requires (CUDA would refuse
 * them and invalidate the capture otherwise).
 */
static void test_setup_and_teardown_beside_a_capture(void **state)
{
	(void)state;
	cudaStream_t capturing = new_stream();
	fake_cuda_set_capture(capturing, 5);
	struct group group;
	group_create(&group, 3, false);
	for (int r = 0; r < 3; r++)
		assert_int_equal(ndet_engine_allreduce(group.engines[r], plan_send, plan_recv, 1001,
						       NDET_DTYPE_F32, NDET_OP_SUM, NULL),
				 NDET_OK);
	assert_int_equal(ndet_engine_destroy_group(group.engines, 3, true), NDET_OK);
	fake_cuda_set_capture(capturing, 0);
	assert_no_violation();
	assert_int_equal(cudaStreamDestroy(capturing), cudaSuccess);
	assert_nothing_held();
	group_fini(&group);
}

/*
 * No host blocking on the call path: eager and captured calls on every path, the
 * reduce-scatter and the reduce make no cudaStreamSynchronize or cudaMemcpy (the
 * fake counts both), whatever stream, even on a rank's first call.
 */
static void test_calls_never_block_the_host(void **state)
{
	(void)state;
	static const size_t counts[] = PATH_COUNTS;
	struct group group;
	group_create_every_path(&group);
	cudaStream_t streams[2] = {new_stream(), new_stream()};
	const int before = runtime().blocking;
	for (int captured = 0; captured < 2; captured++) {
		for (int r = 0; r < 2; r++)
			fake_cuda_set_capture(streams[r],
					      captured ? 11 + (unsigned long long)r : 0);
		for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
			for (int r = 0; r < 2; r++)
				assert_int_equal(ndet_engine_allreduce(group.engines[r], plan_send,
								       plan_recv, counts[c],
								       NDET_DTYPE_F32, NDET_OP_SUM,
								       streams[r]),
						 NDET_OK);
		for (int r = 0; r < 2; r++) {
			const struct ndet_engine_call scatter = {.coll = NDET_COLL_REDUCE_SCATTER,
								 .sendbuff = plan_send,
								 .recvbuff = plan_recv,
								 .count = 5001,
								 .dtype = NDET_DTYPE_F32,
								 .op = NDET_OP_MAX};
			const struct ndet_engine_call reduce = {.coll = NDET_COLL_REDUCE,
								.sendbuff = plan_send,
								.recvbuff = plan_recv,
								.count = 70001,
								.dtype = NDET_DTYPE_F32,
								.op = NDET_OP_SUM,
								.root = 1};
			assert_int_equal(
				ndet_engine_collective(group.engines[r], &scatter, streams[r]),
				NDET_OK);
			assert_int_equal(
				ndet_engine_collective(group.engines[r], &reduce, streams[r]),
				NDET_OK);
		}
	}
	for (int r = 0; r < 2; r++)
		fake_cuda_set_capture(streams[r], 0);
	assert_int_equal(runtime().blocking, before);
	assert_no_violation();
	assert_int_equal(ndet_engine_destroy_group(group.engines, 2, true), NDET_OK);
	for (int r = 0; r < 2; r++)
		assert_int_equal(cudaStreamDestroy(streams[r]), cudaSuccess);
	assert_nothing_held();
	group_fini(&group);
}

/*
 * An all-gather that leaves a rank's slot of round 4 unwritten: the device buffer
 * still holds round 3's records, which must not pass for round 4's.  Every rank
 * refuses alike, and the pools (mapped by peers in round 3) are freed with the last
 * rank of the process, or when the peers in other processes let go of them.
 */
/*
 * Ranks sharing a GPU with fewer SMs than they need (one resident block each):
 * every rank refuses the same table, no engine runs, nothing stays allocated.
 */
/*
 * A GPU this build has no kernel image for (a Volta or Turing under the default sm_80+
 * targets): every rank learns it at setup, from the table, as the local failure
 * "unsupported GPU" of the lowest such rank, so the communicator runs in NCCL; no
 * engine, nothing held, no kernel launched.
 */
static void test_setup_gpu_without_kernel_image(void **state)
{
	(void)state;
	for (int processes = 0; processes < 2; processes++) {
		struct group group;
		reset(state);
		group_init(&group, 3, processes == 1);
		fake_cuda_set_no_kernel_image(true);
		group_setup(&group);
		for (int r = 0; r < 3; r++) {
			assert_int_not_equal(group.results[r].status, NDET_OK);
			assert_null(group.results[r].engine);
			assert_int_equal(group.results[r].verdict.reason,
					 NDET_VERDICT_LOCAL_FAILURE);
			assert_int_equal(group.results[r].verdict.offending_rank, 0);
			assert_int_equal(group.results[r].verdict.detail,
					 NDET_LOCAL_UNSUPPORTED_GPU);
		}
		assert_int_equal(runtime().launches, 0);
		assert_nothing_held();
		group_fini(&group);
	}
}

/*
 * fp8 is a fact of the setup, not a reason to fall back: every rank publishes whether
 * its GPU is sm_90+ and runs our fp8 kernels, the ranks agree on the AND, and the
 * engine is ready whatever the answer (f32 and the others still run).
 */
static void test_setup_fp8_flags(void **state)
{
	const struct {
		int major;
		bool no_fp8_image;
		uint32_t flags;
	} cases[] = {
		{9, false, NDET_SETUP_FLAG_SM90 | NDET_SETUP_FLAG_FP8},
		{10, false, NDET_SETUP_FLAG_SM90 | NDET_SETUP_FLAG_FP8},
		{9, true, NDET_SETUP_FLAG_SM90},
		{8, false, 0},
		{8, true, 0},
	};
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		struct group group;
		reset(state);
		group_init(&group, 3, false);
		fake_cuda_set_major(cases[c].major);
		fake_cuda_set_no_fp8_image(cases[c].no_fp8_image);
		group_setup(&group);
		for (int r = 0; r < 3; r++) {
			assert_int_equal(group.results[r].status, NDET_OK);
			assert_non_null(group.results[r].engine);
			assert_int_equal(group.results[r].agreed_flags &
						 (NDET_SETUP_FLAG_SM90 | NDET_SETUP_FLAG_FP8),
					 cases[c].flags);
		}
		assert_int_equal(ndet_engine_destroy_group(group.engines, 3, true), NDET_OK);
		assert_nothing_held();
		group_fini(&group);
	}
}

static void test_setup_gpu_too_small(void **state)
{
	(void)state;
	struct group group;
	group_init(&group, 3, false); /* three ranks on device 0 */
	/* Two SMs: two blocks of prod's kernels (one per SM), one rank would wait forever. */
	fake_cuda_set_sm_count(2);
	group_setup(&group);
	for (int r = 0; r < 3; r++) {
		assert_int_not_equal(group.results[r].status, NDET_OK);
		assert_null(group.results[r].engine);
		assert_int_equal(group.results[r].verdict.reason, group.results[0].verdict.reason);
	}
	assert_nothing_held();
	group_fini(&group);
	/* Three SMs hold three ranks' blocks of every op's kernels. */
	reset(state);
	fake_cuda_set_sm_count(3);
	group_create(&group, 3, false);
	for (int r = 0; r < 3; r++)
		launch(group.engines[r], NULL);
	assert_int_equal(ndet_engine_destroy_group(group.engines, 3, true), NDET_OK);
	assert_nothing_held();
	group_fini(&group);
}

/*
 * Lanes: one per block a call can have (the agreed grid cap), the pool's data bytes
 * split among them.  4 ranks on one GPU of 132 SMs: 192 / 4 = 48 lanes of twice the
 * size; one rank per GPU: max_blocks lanes; a 10-SM GPU: 20.  The LL slots stay
 * after the data bytes, and every block of a call has its lane.
 */
static void test_lanes_follow_grid_cap(void **state)
{
	static const struct {
		bool processes;
		int sms;
		uint64_t lanes;
	} cases[] = {{false, 132, 48}, {true, 132, 96}, {true, 10, 20}, {false, 10, 5}};
	const uint64_t data = 96 * 4096; /* max_blocks lanes of 4 KiB */
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		reset(state);
		fake_cuda_set_sm_count(cases[c].sms);
		struct group group;
		group_init(&group, 4, cases[c].processes);
		for (int r = 0; r < 4; r++) {
			group.results[r] = rank_member(&group, r);
			group.results[r].config.pool_size = data + 100; /* floored to 256s */
			group.results[r].config.max_blocks = 96;
			group.results[r].config.ll_max = 4096;
			group.results[r].config.push_min = 64 << 10;
		}
		group_start(&group, exchange);
		const uint64_t lane = data / cases[c].lanes / 256 * 256;
		for (size_t count = 100; count <= COUNT * 64; count *= 4) {
			for (int r = 0; r < 4; r++) {
				assert_int_equal(group.results[r].status, NDET_OK);
				assert_int_equal(ndet_engine_allreduce(
							 group.engines[r], send_big, recv_big,
							 count, NDET_DTYPE_F32, NDET_OP_SUM, NULL),
						 NDET_OK);
				struct ndet_kernel_args args;
				assert_true(fake_cuda_last_launch(r, &args));
				assert_int_equal(args.lane_bytes, lane);
				assert_int_equal(args.ll_offset, data);
				assert_true(args.blocks <= cases[c].lanes);
				/* The plan the kernel got is the one the agreed config gives. */
				struct ndet_plan plan;
				assert_int_equal(ndet_engine_plan(group.engines[r], count,
								  NDET_DTYPE_F32, NDET_OP_SUM,
								  &plan),
						 NDET_OK);
				assert_int_equal(plan.blocks, args.blocks);
				assert_int_equal(plan.chunk_elems, args.chunk_elems);
				assert_int_equal(plan.steps, args.steps);
			}
		}
		assert_int_equal(ndet_engine_destroy_group(group.engines, 4, true), NDET_OK);
		assert_nothing_held();
		group_fini(&group);
	}
}

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
		/*
		 * Between processes the ranks detach as they leave the setup; the pools
		 * wait (a setup frees no pending pool: it may run inside a CUDA graph
		 * capture, which a cudaFree could break), and the next teardown's look
		 * frees them all (before the detach protocol: kept until exit).
		 */
		if (processes) {
			assert_no_violation();
			assert_int_equal(held().pending_pools, 3);
			assert_int_equal(runtime().mappings, 0);
			ndet_teardown_pending_retry(false);
		}
		assert_nothing_held();
		group_fini(&group);
	}
}

/* ------------------------------------------------------------------ detach protocol */

static pid_t device_pid(int device)
{
	return (pid_t)(FAKE_CUDA_PID_DEVICE + device);
}

/*
 * ncclCommDestroy alone and ncclCommAbort between processes, a thread per process:
 * every rank waits for its kernels, writes its detach word into each peer's pool,
 * closes, and frees its own pool once its peers' words are there, polling as a
 * process does.  Rank 2 is slow to close (its peers may free while it still maps
 * their pools, never while its kernel may run: the fake runtime checks both).
 * Before the detach protocol every pool was kept until exit.
 */
static void test_detach_threads(void **state)
{
	for (int abort = 0; abort < 2; abort++) {
		reset(state);
		ndet_teardown_set_detach_wait_for_testing(NDET_TEARDOWN_DETACH_WAIT_MS);
		struct group group;
		group_init(&group, 3, true);
		struct rank_thread threads[3];
		for (int r = 0; r < 3; r++)
			threads[r] = (struct rank_thread){.group = &group,
							  .rank = r,
							  .close_delay_ms = r == 2 ? 200 : 0,
							  .no_barrier = true,
							  .abort = abort != 0};
		run_rank_threads(threads, 3);
		join_rank_threads(threads, 3);
		for (int r = 0; r < 3; r++) {
			assert_int_equal(threads[r].destroyed, NDET_OK);
			if (threads[r].seconds > NDET_TEARDOWN_DETACH_WAIT_MS / 1000.0 + 1.0)
				fail_msg("rank %d's destroy took %.1f s", r, threads[r].seconds);
		}
		print_message("%s: %d pool(s) freed while a peer still mapped them\n",
			      abort ? "abort" : "destroy", runtime().freed_mapped);
		assert_nothing_held();
		assert_int_equal(held().peers_gone, 0);
		group_fini(&group);
	}
}

/*
 * A peer that stays silent and alive (it keeps the communicator, or is stopped):
 * our pool stays pending, after the bounded poll of our destroy, at another
 * communicator's teardown and at later looks however long we wait; it goes when
 * that peer tears down.
 */
static void test_detach_silent_peer_pending(void **state)
{
	(void)state;
	struct group group;
	group_create(&group, 2, true);
	for (int r = 0; r < 2; r++)
		launch(group.engines[r], NULL);
	const struct fake_cuda_counts before = runtime();
	ndet_teardown_set_detach_wait_for_testing(300);
	double start = now_seconds();
	assert_int_equal(ndet_engine_destroy(group.engines[0], false), NDET_OK);
	double waited = now_seconds() - start;
	if (waited < 0.25 || waited > 1.5)
		fail_msg("the destroy polled for %.2f s, not about 0.3 s", waited);
	assert_no_violation();
	assert_int_equal(held().pending_pools, 1);
	/* Rank 0's pool is still allocated; only its mapping of rank 1's pool went. */
	assert_int_equal(runtime().allocations, before.allocations);
	assert_int_equal(runtime().mappings, 1);

	/* Another communicator's teardown looks again: rank 1 is still silent. */
	ndet_teardown_set_detach_wait_for_testing(0);
	struct group other;
	group_create(&other, 2, false);
	assert_int_equal(held().pending_pools, 1);
	assert_int_equal(ndet_engine_destroy_group(other.engines, 2, false), NDET_OK);
	assert_int_equal(held().pending_pools, 1);
	group_fini(&other);
	pause_ms(200);
	ndet_teardown_pending_retry(true);
	assert_int_equal(held().pending_pools, 1);

	/* Rank 1 tears down: its detach word frees rank 0's pool, rank 0's frees its own. */
	fake_cuda_set_pid_per_device(true);
	assert_int_equal(ndet_engine_destroy(group.engines[1], false), NDET_OK);
	assert_nothing_held();
	assert_int_equal(held().peers_gone, 0);
	group_fini(&group);
}

/*
 * A peer killed (SIGKILL): it never writes its word, but the driver took its
 * mappings and its kernels with it, so the survivors' pools go at their teardown
 * (kill(pid, 0) finds no such process), counted in peers_gone.
 */
static void test_detach_dead_peer(void **state)
{
	(void)state;
	struct group group;
	group_create(&group, 3, true);
	fake_cuda_set_kernel(FAKE_CUDA_KERNEL_SPIN);
	launch(group.engines[2], NULL);
	fake_cuda_set_kernel(FAKE_CUDA_KERNEL_DONE);
	for (int r = 0; r < 2; r++)
		launch(group.engines[r], NULL);
	fake_cuda_end_process(device_pid(2));
	assert_int_equal(runtime().mappings, 4); /* ranks 0 and 1 still map each other and 2 */
	assert_int_equal(ndet_engine_destroy_group(group.engines, 2, false), NDET_OK);
	assert_no_violation();
	assert_int_equal(held().pending_pools, 0);
	assert_int_equal(held().peers_gone, 2);
	assert_int_equal(runtime().mappings, 0);
	/* The dead rank's own memory: its process is gone (test cleanup, no teardown). */
	ndet_engine_release(group.engines[2]);
	assert_no_violation();
	assert_int_equal(held().leaked_pools, 1);
	assert_int_equal(held().bytes, held().leaked_bytes);
	group_fini(&group);
}

/*
 * Only this setup's word counts: a word of another epoch (an earlier communicator
 * on recycled memory), or one meant for another pool, leaves the pool pending (a
 * free there would pull the pool from under rank 1, which the fake runtime would
 * catch when rank 1 writes its real word); rank 1's real word frees it.
 */
static void test_detach_epoch_mismatch(void **state)
{
	(void)state;
	struct group group;
	group_create(&group, 3, true);
	uint64_t *slot = NULL, epoch = 0;
	assert_true(ndet_engine_detach_slot_for_testing(group.engines[0], 1, &slot, &epoch));
	assert_int_equal(*slot, 0); /* zeroed before any peer could import the pool */
	/* Ranks 0 and 2 tear down; rank 1 stays, its slot in rank 0's pool forged. */
	*slot = ndet_teardown_detach_word(epoch + 1, 1, 0);
	struct ndet_engine *leaving[2] = {group.engines[0], group.engines[2]};
	assert_int_equal(ndet_engine_destroy_group(leaving, 2, false), NDET_OK);
	assert_int_equal(held().pending_pools, 2);
	*slot = ndet_teardown_detach_word(epoch, 1, 2); /* rank 1's word for rank 2's pool */
	ndet_teardown_pending_retry(false);
	assert_int_equal(held().pending_pools, 2);
	*slot = ndet_teardown_detach_word(epoch, 2, 0); /* rank 2's, in rank 1's slot */
	ndet_teardown_pending_retry(false);
	assert_int_equal(held().pending_pools, 2);
	assert_no_violation();
	fake_cuda_set_pid_per_device(true);
	assert_int_equal(ndet_engine_destroy(group.engines[1], false), NDET_OK);
	assert_nothing_held();
	group_fini(&group);
}

/*
 * Exit: a pool whose last peer let go after every teardown of this process is
 * freed by the exit handler.  While an engine of this process lives, the handler
 * frees nothing (its kernel may spin: a free would wait behind it), and once the
 * runtime is unloading it makes one call (which says so) and no other.
 */
enum exit_case { EXIT_FREES, EXIT_ENGINE_LIVE, EXIT_UNLOADING };

static void test_exit_last_chance(void **state)
{
	/* Nothing pending: not one CUDA call (the runtime may be gone already). */
	fake_cuda_set_unloading(true);
	ndet_engine_at_exit();
	assert_int_equal(runtime().calls_unloading, 0);
	fake_cuda_set_unloading(false);
	for (int how = EXIT_FREES; how <= EXIT_UNLOADING; how++) {
		reset(state);
		struct group group;
		group_create(&group, 2, true);
		for (int r = 0; r < 2; r++)
			launch(group.engines[r], NULL);
		uint64_t *slot = NULL, epoch = 0;
		assert_true(
			ndet_engine_detach_slot_for_testing(group.engines[1], 0, &slot, &epoch));
		/* Rank 1 leaves first: its pool waits for rank 0. */
		assert_int_equal(ndet_engine_destroy(group.engines[1], false), NDET_OK);
		assert_int_equal(held().pending_pools, 1);
		/*
		 * Rank 0 "lives in another process": it leaves this one without a word
		 * (its memory kept), and its word comes late, after every teardown here.
		 */
		if (how != EXIT_ENGINE_LIVE) {
			ndet_engine_release(group.engines[0]);
			assert_int_equal(held().pending_pools, 1);
		}
		*slot = ndet_teardown_detach_word(epoch, 0, 1);
		fake_cuda_set_unloading(how == EXIT_UNLOADING);
		ndet_engine_at_exit();
		assert_int_equal(held().pending_pools, how == EXIT_FREES ? 0 : 1);
		assert_int_equal(runtime().calls_unloading, how == EXIT_UNLOADING ? 1 : 0);
		fake_cuda_set_unloading(false);
		/* After the exit handler, teardown looks at no pending pool any more. */
		ndet_teardown_pending_retry(false);
		assert_int_equal(held().pending_pools, how == EXIT_FREES ? 0 : 1);
		if (how == EXIT_ENGINE_LIVE)
			ndet_engine_release(group.engines[0]);
		assert_no_violation();
		assert_int_equal(held().leaked_pools, 1); /* rank 0's, kept on purpose */
		group_fini(&group);
	}
}

/*
 * The fake runtime catches what a GPU would punish silently: memory freed while a
 * process that maps it may still run a kernel, and a copy into memory its owner
 * freed (through a mapping that outlived the free).  Frees that are fine pass.
 */
static void test_fake_catches_free_under_reader(void **state)
{
	(void)state;
	void *pool = NULL, *mapped = NULL;
	cudaIpcMemHandle_t handle;
	uint64_t word = 1;
	fake_cuda_set_pid_per_device(true);
	assert_int_equal(cudaSetDevice(0), cudaSuccess);
	assert_int_equal(cudaMalloc(&pool, 4096), cudaSuccess);
	assert_int_equal(cudaIpcGetMemHandle(&handle, pool), cudaSuccess);
	assert_int_equal(cudaSetDevice(1), cudaSuccess);
	assert_int_equal(cudaIpcOpenMemHandle(&mapped, handle, 0), cudaSuccess);
	void *again = NULL;
	assert_int_equal(cudaIpcOpenMemHandle(&again, handle, 0), cudaSuccess);
	assert_ptr_equal(again, mapped);
	assert_int_equal(runtime().mappings, 2);
	assert_int_equal(cudaIpcCloseMemHandle(again), cudaSuccess);
	struct ndet_kernel_args args = {.rank = 1};
	fake_cuda_set_kernel(FAKE_CUDA_KERNEL_STUCK);
	assert_int_equal(ndet_kernel_allreduce(&args, NULL), cudaSuccess);
	fake_cuda_set_kernel(FAKE_CUDA_KERNEL_DONE);
	assert_int_equal(cudaSetDevice(0), cudaSuccess);
	(void)cudaFree(pool);
	assert_int_equal(runtime().violations, 1);
	assert_non_null(strstr(fake_cuda_last_violation(), "process 7000001 maps while a kernel"));
	assert_int_equal(runtime().allocations, 0);
	const int seen = runtime().violations;
	assert_int_equal(cudaSetDevice(1), cudaSuccess);
	(void)cudaMemcpy(mapped, &word, sizeof(word), cudaMemcpyDefault);
	assert_int_equal(runtime().violations, seen + 1);
	assert_non_null(strstr(fake_cuda_last_violation(), "freed"));
	/* The reader's process ends: its mapping goes, and the memory with it. */
	fake_cuda_end_process(device_pid(1));
	assert_int_equal(runtime().mappings, 0);
	assert_int_equal(fake_cuda_kernels_running(), 0);
	assert_int_equal(kill(device_pid(1), 0), -1);
	assert_int_equal(kill(device_pid(0), 0), 0);
}

/* The words and epochs of the detach protocol: never 0, never each other's. */
static void test_detach_words(void **state)
{
	(void)state;
	struct ndet_setup_payload table[3];
	memset(table, 0, sizeof(table));
	for (int r = 0; r < 3; r++) {
		table[r].pid = 100 + (uint64_t)r;
		table[r].pool_address = 0x7f0000000000ull + (uint64_t)r * 0x100000;
		table[r].ipc_handle[0] = (uint8_t)r;
	}
	const uint64_t epoch = ndet_teardown_epoch(table, 3);
	assert_int_not_equal(epoch, 0);
	/* A new allocation at the same address has a new IPC handle: a new epoch. */
	table[1].ipc_handle[63] ^= 1;
	assert_int_not_equal(ndet_teardown_epoch(table, 3), epoch);
	table[1].ipc_handle[63] ^= 1;
	assert_int_equal(ndet_teardown_epoch(table, 3), epoch);
	/* Padding and fields outside the identity do not matter. */
	table[2].cuda_device = 5;
	assert_int_equal(ndet_teardown_epoch(table, 3), epoch);
	uint64_t words[NDET_MAX_RANKS * NDET_MAX_RANKS];
	int n = 0;
	for (int writer = 0; writer < NDET_MAX_RANKS; writer++)
		for (int owner = 0; owner < NDET_MAX_RANKS; owner++) {
			uint64_t word = ndet_teardown_detach_word(epoch, writer, owner);
			assert_int_not_equal(word, 0);
			assert_int_not_equal(word,
					     ndet_teardown_detach_word(epoch + 1, writer, owner));
			for (int i = 0; i < n; i++)
				assert_int_not_equal(words[i], word);
			words[n++] = word;
		}
}

/* A live process is not gone; an exited one is, zombie or reaped; pid 0 never. */
static void test_process_gone(void **state)
{
	(void)state;
	assert_false(ndet_teardown_process_gone(0));
	assert_false(ndet_teardown_process_gone((uint64_t)__real_getpid()));
	pid_t child = fork();
	assert_true(child >= 0);
	if (child == 0)
		_exit(0);
	/* Not reaped yet: a zombie, whose mappings died with it. */
	bool gone = false;
	for (int i = 0; i < 500 && !gone; i++) {
		gone = ndet_teardown_process_gone((uint64_t)child);
		if (!gone)
			pause_ms(10);
	}
	assert_true(gone);
	int status = 0;
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(ndet_teardown_process_gone((uint64_t)child));
	/* Fake processes: alive until they end. */
	assert_false(ndet_teardown_process_gone((uint64_t)device_pid(3)));
	fake_cuda_end_process(device_pid(3));
	assert_true(ndet_teardown_process_gone((uint64_t)device_pid(3)));
}

/* ------------------------------------------------------------------ several hosts */

/*
 * NCCL_DET_TEST_HOST tables, one letter per rank ("ABAB": ranks 0 and 2 on host A),
 * judged with the multi-host switch on (ndet_setup_set_multi_host_for_testing): the
 * engine's local view (doc/protocol.md).  What these helpers compute from the
 * letters, the engine must have found in the table.
 */

/* Rank r's local index: the ranks of its host before it. */
static int host_local_index(const char *hosts, int r)
{
	int l = 0;
	for (int q = 0; q < r; q++)
		l += hosts[q] == hosts[r];
	return l;
}

/* g of rank r's host. */
static int host_size(const char *hosts, int r)
{
	int g = 0;
	for (int q = 0; hosts[q] != '\0'; q++)
		g += hosts[q] == hosts[r];
	return g;
}

/* The rank of local index l on rank r's host, -1 past its g. */
static int host_rank(const char *hosts, int r, int l)
{
	for (int q = 0; hosts[q] != '\0'; q++)
		if (hosts[q] == hosts[r] && l-- == 0)
			return q;
	return -1;
}

static char *record_pool(const struct group *group, int r)
{
	return (char *)(uintptr_t)group->world.records[r].pool_address;
}

/*
 * The setup's IPC opens (fake log "open <importer pid> <owner pid>", pids pid_base +
 * rank) from log line `from` on: every rank opened each of its g - 1 same-host peers'
 * pools once, and nothing of a rank on another host.
 */
static void assert_opens_same_host(const char *hosts, int nranks, int pid_base, int from)
{
	static int opened[MAX_RANKS][MAX_RANKS];
	memset(opened, 0, sizeof(opened));
	for (int i = fake_cuda_log_find("open ", from); i >= 0;
	     i = fake_cuda_log_find("open ", i + 1)) {
		int importer = -1, owner = -1;
		assert_int_equal(sscanf(fake_cuda_log_line(i), "open %d %d", &importer, &owner), 2);
		importer -= pid_base;
		owner -= pid_base;
		assert_true(importer >= 0 && importer < nranks && owner >= 0 && owner < nranks);
		if (hosts[importer] != hosts[owner])
			fail_msg("rank %d opened the pool of rank %d, on another host", importer,
				 owner);
		opened[importer][owner]++;
	}
	for (int r = 0; r < nranks; r++) {
		int opens = 0;
		for (int q = 0; q < nranks; q++) {
			assert_true(opened[r][q] <= 1);
			opens += opened[r][q];
		}
		assert_int_equal(opens, host_size(hosts, r) - 1);
	}
}

/*
 * Rank r's launch of `call` carried its local view: its local index and its host's g,
 * the flags and lanes of its host's ranks in local order (their pools as their records
 * published them), NULL from g on, and the plan, lanes and LL slots of the whole
 * communicator's configuration with rank and nranks replaced by them (with one host:
 * the whole communicator's configuration unchanged).
 */
static void check_local_args(const struct group *group, const char *hosts, int r,
			     const struct ndet_engine_call *call,
			     const struct ndet_kernel_args *args)
{
	const int l = host_local_index(hosts, r), g = host_size(hosts, r);
	assert_ptr_equal(args->sendbuff, call->sendbuff);
	assert_int_equal(args->rank, l);
	assert_int_equal(args->nranks, g);
	for (int k = 0; k < NDET_MAX_RANKS; k++) {
		const int q = host_rank(hosts, r, k);
		char *pool = q >= 0 ? record_pool(group, q) : NULL;
		assert_ptr_equal(args->flags[k], pool);
		assert_ptr_equal(args->lanes[k],
				 q >= 0 ? pool + group->world.records[q].data_offset : NULL);
	}
	struct ndet_engine_config config = group->results[r].config;
	config.rank = l;
	config.nranks = g;
	config.ranks_per_device =
		ndet_setup_table_ranks_per_device(group->world.records, group->nranks);
	config.device_sms = ndet_setup_table_min_sms(group->world.records, group->nranks);
	config.processes_per_device =
		ndet_setup_table_processes_per_device(group->world.records, group->nranks);
	struct ndet_engine_call local = *call;
	if (call->coll == NDET_COLL_REDUCE)
		local.root = host_local_index(hosts, call->root);
	struct ndet_plan plan;
	assert_int_equal(ndet_engine_plan_call_for_config(&config, &local, &plan), NDET_OK);
	assert_int_equal(args->path, plan.path);
	assert_int_equal(args->blocks, plan.blocks);
	assert_int_equal(args->chunk_elems, plan.chunk_elems);
	assert_int_equal(args->steps, plan.steps);
	assert_int_equal(args->signature, plan.signature);
	assert_int_equal(args->root, call->coll == NDET_COLL_REDUCE ? local.root : -1);
	assert_int_equal(args->lane_bytes, ndet_pool_lane_bytes(&config));
	assert_int_equal(args->ll_offset, ndet_pool_data_bytes(&config));
}

/* Launch `call` on rank r (lockstep) and check what its kernel got. */
static void launch_local(const struct group *group, const char *hosts, int r,
			 const struct ndet_engine_call *call)
{
	assert_int_equal(ndet_engine_collective(group->engines[r], call, NULL), NDET_OK);
	struct ndet_kernel_args args;
	assert_true(fake_cuda_last_launch(host_local_index(hosts, r), &args));
	check_local_args(group, hosts, r, call, &args);
}

/* A collective of `count` f32 between send_big and recv_big (`root`: a reduce's). */
static struct ndet_engine_call big_call(ndet_coll_t coll, size_t count, ndet_op_t op, int root)
{
	return (struct ndet_engine_call){.coll = coll,
					 .sendbuff = send_big,
					 .recvbuff = recv_big,
					 .count = count,
					 .dtype = NDET_DTYPE_F32,
					 .op = op,
					 .root = root};
}

/* A max-reduce of 3000 f32 to global rank `root`. */
static struct ndet_engine_call reduce_call(int root)
{
	return big_call(NDET_COLL_REDUCE, 3000, NDET_OP_MAX, root);
}

/* LL, one-shot, two-shot and push all-reduces, a reduce-scatter and a reduce. */
static void launch_every_kind(const struct group *group, const char *hosts)
{
	static const size_t counts[] = {100, 3000, 20000, COUNT * 64};
	for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
		for (int r = 0; r < group->nranks; r++) {
			const struct ndet_engine_call call =
				big_call(NDET_COLL_ALLREDUCE, counts[c], NDET_OP_SUM, 0);
			launch_local(group, hosts, r, &call);
		}
	for (int r = 0; r < group->nranks; r++) {
		const struct ndet_engine_call scatter =
			big_call(NDET_COLL_REDUCE_SCATTER, 1000, NDET_OP_SUM, 0);
		launch_local(group, hosts, r, &scatter);
	}
	for (int r = 0; r < group->nranks; r++) {
		/* Every rank of a host names the same root: its host's last rank. */
		const struct ndet_engine_call reduce =
			reduce_call(host_rank(hosts, r, host_size(hosts, r) - 1));
		launch_local(group, hosts, r, &reduce);
	}
}

/*
 * A group of `nranks` "processes" (a device each) on the hosts `hosts`, set up, with
 * NCCL_DET_TIMEOUT `timeout_ms`.
 */
static void hosts_group_start(struct group *group, const char *hosts, int nranks,
			      uint64_t timeout_ms)
{
	group_init(group, nranks, true);
	group->timeout_ms = timeout_ms;
	group->hosts = hosts;
	for (int r = 0; r < nranks; r++) {
		group->results[r] = rank_member(group, r);
		group->results[r].config.ll_max = 4096;
		group->results[r].config.oneshot_max = 16 << 10;
		group->results[r].config.push_min = 64 << 10;
	}
	group_start(group, exchange);
	for (int r = 0; r < nranks; r++) {
		assert_int_equal(group->results[r].status, NDET_OK);
		assert_int_equal(group->results[r].verdict.reason, NDET_VERDICT_OK);
	}
}

static void hosts_group_create(struct group *group, const char *hosts, int nranks)
{
	hosts_group_start(group, hosts, nranks, 30000);
}

/* A published error as a kernel writes it (struct ndet_host_status). */
static void publish_error(struct ndet_engine *engine, uint32_t code, uint32_t block, uint32_t peer,
			  uint64_t step, uint64_t observed, uint32_t phase)
{
	struct ndet_host_status *h = ndet_engine_host_status_for_testing(engine);
	__atomic_store_n(&h->claim, code, __ATOMIC_RELEASE);
	h->block = block;
	h->peer = peer;
	h->step = step;
	h->observed = observed;
	h->phase = phase;
	__atomic_store_n(&h->error, code, __ATOMIC_RELEASE);
}

/*
 * The WARN's description names communicator ranks, not the kernels' local indices
 * (hosts A,B,A,B: rank 1's local peer 1 is rank 3), a stage's failed host by its
 * index, and a failure seen at kernel start as such.
 */
static void test_error_description_names_ranks(void **state)
{
	(void)state;
	ndet_setup_set_multi_host_for_testing(true);
	struct group group;
	hosts_group_create(&group, "ABAB", 4);
	char text[256];
	/* Host B holds ranks 1 and 3: local indices 0 and 1. */
	publish_error(group.engines[1], NDET_KERNEL_ERR_TIMEOUT, 7, 1, 12, (11ull << 24) | 0x1234,
		      3);
	ndet_engine_error_describe(group.engines[1], text, sizeof(text));
	assert_string_equal(text, "kernel error 1, timed out (NCCL_DET_TIMEOUT): block 7, waiting "
				  "for rank 3's reduced flag of step 12, last seen step 11 "
				  "signature 001234");
	publish_error(group.engines[2], NDET_KERNEL_ERR_PEER, 0, 1, 0, 0x4, 4);
	ndet_engine_error_describe(group.engines[2], text, sizeof(text));
	assert_string_equal(text, "kernel error 4, failed because a peer failed: block 0, host 1 "
				  "reported a failure (its status word 0x4)");
	publish_error(group.engines[3], NDET_KERNEL_ERR_PEER, 2, 0, 5, 0, 0);
	ndet_engine_error_describe(group.engines[3], text, sizeof(text));
	assert_string_equal(text, "kernel error 4, failed because a peer failed: block 2, step 5: "
				  "rank 1 had failed before this kernel started");
	publish_error(group.engines[0], NDET_KERNEL_ERR_PEER, 3, 1, 8, 0, 2);
	ndet_engine_error_describe(group.engines[0], text, sizeof(text));
	assert_string_equal(text, "kernel error 4, failed because a peer failed: block 3: a peer "
				  "failed and told this rank while it waited for rank 2's ready "
				  "flag of step 8");
	assert_int_equal(ndet_engine_destroy_group(group.engines, 4, true), NDET_OK);
	assert_nothing_held();
	group_fini(&group);

	/* Aborted: no peer to blame; one host, where the index is the rank. */
	reset(state);
	group_create(&group, 2, false);
	publish_error(group.engines[1], NDET_KERNEL_ERR_ABORTED, 4, 1, 3, 0, 0);
	ndet_engine_error_describe(group.engines[1], text, sizeof(text));
	assert_string_equal(
		text, "kernel error 2, aborted (ncclCommAbort or ncclCommRevoke): block 4, step 3");
	assert_int_equal(ndet_engine_destroy_group(group.engines, 2, true), NDET_OK);
	assert_nothing_held();
	group_fini(&group);
}

/*
 * The abort word a failed launch writes into its host's ranks (the poison word) is
 * 1 + its local index, as a kernel's ndet_fail writes it: hosts A,B,A,B.
 */
static void test_poison_word_is_local_index(void **state)
{
	(void)state;
	ndet_setup_set_multi_host_for_testing(true);
	struct group group;
	hosts_group_create(&group, "ABAB", 4);
	const uint64_t want[4] = {1, 1, 2, 2};
	for (int r = 0; r < 4; r++)
		assert_int_equal(ndet_engine_host_status_for_testing(group.engines[r])->poison_word,
				 want[r]);
	assert_int_equal(ndet_engine_destroy_group(group.engines, 4, true), NDET_OK);
	assert_nothing_held();
	group_fini(&group);
}

/*
 * One host, as every diverted communicator: local index = rank, g = nranks, so the
 * kernels get exactly what the whole communicator's configuration gives (the plan of
 * ndet_engine_plan_call_for_config, its lanes, every rank's pool at its rank), and
 * the pool holds LL slots for nranks ranks.
 */
static void test_one_host_view_is_the_communicator(void **state)
{
	(void)state;
	struct group group;
	const char *same = "AAAA";
	group_init(&group, 4, true);
	for (int r = 0; r < 4; r++) {
		group.results[r] = rank_member(&group, r);
		group.results[r].config.ll_max = 4096;
		group.results[r].config.oneshot_max = 16 << 10;
		group.results[r].config.push_min = 64 << 10;
	}
	const int from = fake_cuda_log_length();
	group_start(&group, exchange);
	for (int r = 0; r < 4; r++)
		assert_int_equal(group.results[r].status, NDET_OK);
	assert_opens_same_host(same, 4, FAKE_CUDA_PID_DEVICE, from);
	const struct ndet_engine_config *config = &group.results[0].config;
	for (int r = 0; r < 4; r++)
		assert_int_equal(group.world.records[r].pool_bytes,
				 ndet_pool_flags_bytes() + ndet_pool_data_bytes(config) +
					 ndet_plan_ll_blocks(4096) * 4u * 2u * NDET_LL_SLOT_BYTES);
	launch_every_kind(&group, same);
	assert_int_equal(ndet_engine_destroy_group(group.engines, 4, true), NDET_OK);
	assert_nothing_held();
	group_fini(&group);
}

/*
 * Several hosts (2 x 2, 3 x 2, and A, B, A, B): every rank opens exactly its g - 1
 * same-host peers' pools and nothing of another host, its kernels get its local
 * index, g and its host's pools in local order, a reduce to a root on another host is
 * refused, and the whole teardown frees everything.
 */
static void test_hosts_map_and_launch_locally(void **state)
{
	static const char *const tables[] = {"AABB", "AABBCC", "ABAB"};
	for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++) {
		reset(state);
		ndet_setup_set_multi_host_for_testing(true);
		const char *hosts = tables[t];
		const int nranks = (int)strlen(hosts);
		struct group group;
		const int from = fake_cuda_log_length();
		hosts_group_create(&group, hosts, nranks);
		assert_opens_same_host(hosts, nranks, FAKE_CUDA_PID_DEVICE, from);
		assert_int_equal(runtime().mappings, nranks * (host_size(hosts, 0) - 1));
		launch_every_kind(&group, hosts);
		const int launches = runtime().launches;
		/* A root not on rank 0's host. */
		const struct ndet_engine_call elsewhere = reduce_call(hosts[1] != hosts[0] ? 1 : 2);
		assert_int_equal(ndet_engine_collective(group.engines[0], &elsewhere, NULL),
				 NDET_ERR_INVALID_ARGUMENT);
		assert_int_equal(runtime().launches, launches);
		assert_int_equal(ndet_engine_destroy_group(group.engines, nranks, true), NDET_OK);
		assert_nothing_held();
		group_fini(&group);
	}
}

/*
 * Teardown is a matter of one host: on hosts A (ranks 0, 1) and B (2, 3), rank 3's
 * kernel never finishes.  The destroy barrier spans all four ranks, but host A's ranks
 * judge only host A's words: their pools are freed at once, even with their detach
 * words lost (only the barrier can prove them free then).  Host B keeps rank 3's
 * memory (its kernel may run) and rank 2's pool waits for rank 3, until rank 3's
 * process ends.
 */
static void test_hosts_teardown_judges_own_host(void **state)
{
	(void)state;
	ndet_setup_set_multi_host_for_testing(true);
	struct group group;
	group_init(&group, 4, true);
	group.hosts = "AABB";
	group.timeout_ms = 100;
	group_setup(&group);
	for (int r = 0; r < 4; r++) {
		assert_int_equal(group.results[r].status, NDET_OK);
		fake_cuda_set_kernel(r == 3 ? FAKE_CUDA_KERNEL_STUCK : FAKE_CUDA_KERNEL_DONE);
		launch(group.engines[r], NULL);
	}
	fake_cuda_set_kernel(FAKE_CUDA_KERNEL_DONE);
	assert_int_equal(ndet_engine_quiesce_group(group.engines, 4, true), NDET_OK);
	for (int r = 0; r < 2; r++) {
		uint64_t *slot = NULL, epoch = 0;
		assert_true(ndet_engine_detach_slot_for_testing(group.engines[r], 1 - r, &slot,
								&epoch));
		assert_int_equal(*slot, ndet_teardown_detach_word(epoch, 1 - r, r));
		*slot = 0; /* lost: only the barrier proves the pool free */
	}
	for (int r = 0; r < 4; r++)
		ndet_engine_release(group.engines[r]);
	assert_no_violation();
	assert_counts_agree();
	for (int r = 0; r < 2; r++)
		assert_int_equal(fake_cuda_memory_kind(record_pool(&group, r), 1),
				 FAKE_CUDA_MEMORY_NONE);
	for (int r = 2; r < 4; r++)
		assert_int_equal(fake_cuda_memory_kind(record_pool(&group, r), 1),
				 FAKE_CUDA_MEMORY_DEVICE);
	assert_int_equal(held().leaked_pools, 1);
	assert_int_equal(held().pending_pools, 1);
	fake_cuda_end_process(device_pid(3));
	ndet_teardown_pending_retry(false);
	assert_no_violation();
	assert_int_equal(held().pending_pools, 0);
	assert_int_equal(held().peers_gone, 1);
	assert_int_equal(fake_cuda_memory_kind(record_pool(&group, 2), 1), FAKE_CUDA_MEMORY_NONE);
	assert_int_equal(held().leaked_pools, 1);
	assert_int_equal(held().bytes, held().leaked_bytes);
	group_fini(&group);
}

/*
 * The detach protocol between the ranks of a host, by local index: on hosts A, B, A, B
 * host A's ranks (0 and 2, local indices 0 and 1) tear down alone, with no barrier,
 * while host B's live on: rank 2's word lands in slot 1 of rank 0's pool and rank 0's
 * in slot 0 of rank 2's, so both pools go at once, waiting for nobody on host B.
 */
static void test_hosts_detach_by_local_index(void **state)
{
	(void)state;
	ndet_setup_set_multi_host_for_testing(true);
	struct group group;
	hosts_group_create(&group, "ABAB", 4);
	for (int r = 0; r < 4; r++)
		launch(group.engines[r], NULL);
	uint64_t *slot = NULL, epoch = 0;
	assert_false(ndet_engine_detach_slot_for_testing(group.engines[0], 1, &slot, &epoch));
	assert_true(ndet_engine_detach_slot_for_testing(group.engines[0], 2, &slot, &epoch));
	assert_ptr_equal(slot, (uint64_t *)(record_pool(&group, 0) + NDET_POOL_DETACH_OFFSET) + 1);
	struct ndet_engine *host_a[2] = {group.engines[0], group.engines[2]};
	assert_int_equal(ndet_engine_destroy_group(host_a, 2, false), NDET_OK);
	assert_no_violation();
	assert_int_equal(held().pending_pools, 0);
	assert_int_equal(held().leaked_pools, 0);
	assert_int_equal(fake_cuda_memory_kind(record_pool(&group, 0), 1), FAKE_CUDA_MEMORY_NONE);
	assert_int_equal(fake_cuda_memory_kind(record_pool(&group, 2), 1), FAKE_CUDA_MEMORY_NONE);
	struct ndet_engine *host_b[2] = {group.engines[1], group.engines[3]};
	assert_int_equal(ndet_engine_destroy_group(host_b, 2, false), NDET_OK);
	assert_nothing_held();
	group_fini(&group);
}

static pthread_mutex_t host_launch_lock = PTHREAD_MUTEX_INITIALIZER;

/*
 * A process on a host of group->hosts (devices shared round robin): sets up its rank,
 * launches one all-reduce (one launch at a time in the whole test, so that the fake's
 * record of its arguments is its own), destroys with the barrier.
 */
static void *host_rank_main(void *opaque)
{
	struct rank_thread *me = opaque;
	struct group *group = me->group;
	fake_cuda_set_thread_pid((pid_t)(FAKE_CUDA_PID_MIN + me->rank));
	struct ndet_engine_member member = rank_member(group, me->rank);
	member.config.cuda_device = me->rank % 8;
	group->results[me->rank].config = member.config;
	ndet_engine_create_group(&member, 1, exchange);
	me->created = member.status;
	if (member.status != NDET_OK)
		return NULL;
	group->engines[me->rank] = member.engine;
	pthread_mutex_lock(&host_launch_lock);
	if (ndet_engine_allreduce(member.engine, send_values, recv_values, COUNT, NDET_DTYPE_F32,
				  NDET_OP_SUM, NULL) != NDET_OK)
		me->created = NDET_ERR_INTERNAL;
	me->have_args = fake_cuda_last_launch(host_local_index(group->hosts, me->rank), &me->args);
	pthread_mutex_unlock(&host_launch_lock);
	me->destroyed = ndet_engine_destroy(member.engine, true);
	return NULL;
}

/*
 * Two hosts of 16, 32 ranks: more than NDET_MAX_RANKS in all, the most the kernels
 * reduce on each host.  Every rank (a process and a thread of its own) sets up, opens
 * its 15 same-host peers' pools and nothing of the other host, launches with its local
 * index and g = 16, and the teardown frees everything.
 */
static void test_hosts_two_of_sixteen(void **state)
{
	(void)state;
	enum { N = 32 };
	static char hosts[N + 1];
	for (int r = 0; r < N; r++)
		hosts[r] = r < N / 2 ? 'A' : 'B';
	ndet_setup_set_multi_host_for_testing(true);
	static struct group group;
	static struct rank_thread threads[N];
	group_init(&group, N, true);
	group.hosts = hosts;
	const int from = fake_cuda_log_length();
	for (int r = 0; r < N; r++) {
		threads[r] = (struct rank_thread){.group = &group, .rank = r};
		assert_int_equal(
			pthread_create(&threads[r].thread, NULL, host_rank_main, &threads[r]), 0);
	}
	join_rank_threads(threads, N);
	assert_opens_same_host(hosts, N, FAKE_CUDA_PID_MIN, from);
	for (int r = 0; r < N; r++) {
		assert_int_equal(threads[r].destroyed, NDET_OK);
		assert_true(threads[r].have_args);
		const struct ndet_engine_call call = {.sendbuff = send_values,
						      .recvbuff = recv_values,
						      .count = COUNT,
						      .dtype = NDET_DTYPE_F32,
						      .op = NDET_OP_SUM};
		check_local_args(&group, hosts, r, &call, &threads[r].args);
	}
	assert_nothing_held();
	group_fini(&group);
}

/*
 * Two hosts of 17: one rank more on each host than the kernels reduce.  The verdict
 * refuses the table on every rank (too many ranks, naming rank 16, the first past the
 * limit, switch on or off), before any mapping: nothing is opened or launched, and the
 * pools each rank prepared before the table existed are freed at once.
 */
static void test_hosts_too_many_on_a_host(void **state)
{
	enum { N = 34 };
	static char hosts[N + 1];
	for (int r = 0; r < N; r++)
		hosts[r] = r < N / 2 ? 'A' : 'B';
	for (int on = 0; on < 2; on++) {
		reset(state);
		ndet_setup_set_multi_host_for_testing(on == 1);
		static struct group group;
		group_init(&group, N, false);
		group.hosts = hosts;
		group_setup(&group);
		for (int r = 0; r < N; r++) {
			assert_int_equal(group.results[r].status, NDET_ERR_UNSUPPORTED);
			assert_null(group.results[r].engine);
			assert_int_equal(group.results[r].verdict.reason,
					 NDET_VERDICT_TOO_MANY_RANKS);
			assert_int_equal(group.results[r].verdict.offending_rank, N / 2 - 1);
			assert_int_equal(group.results[r].verdict.detail, N / 2);
		}
		assert_int_equal(group.world.rounds, 2);
		assert_int_equal(fake_cuda_log_find("open", 0), -1);
		assert_int_equal(runtime().launches, 0);
		assert_nothing_held();
		group_fini(&group);
	}
}

/* Host index of rank r: hosts numbered by their lowest rank. */
static int host_index(const char *hosts, int r)
{
	int h = 0;
	for (int q = 0; q < host_rank(hosts, r, 0); q++)
		h += host_local_index(hosts, q) == 0;
	return h;
}

/*
 * Stage s of chunk j of `call` on rank r, and what its kernel got: the local view
 * (local index, g, the host's pools), the plan's chunk and slot in this rank's
 * staging, the launch of ndet_hosts_launch_make, and the part of the message stage 5
 * writes (all of it; the reduce-scatter block of global rank r; a reduce's root only).
 */
static void check_stage_args(const struct group *group, const char *hosts, int r,
			     const struct ndet_engine_call *call, int stage, uint64_t j)
{
	const int l = host_local_index(hosts, r), g = host_size(hosts, r);
	const int nhosts = group->nranks / g;
	struct ndet_backend_hosts view;
	assert_int_equal(ndet_engine_hosts_view(group->engines[r], &view), NDET_OK);
	const struct ndet_hosts_params params =
		ndet_hosts_params_for(call->dtype, call->op, call->premul != NDET_PREMUL_NONE,
				      call->coll, call->count, nhosts, g, view.staging_bytes);
	struct ndet_hosts_plan plan;
	assert_int_equal(ndet_hosts_plan_make(&params, &plan), NDET_OK);
	assert_true(j < plan.chunks);
	assert_int_equal(ndet_engine_hosts_stage(group->engines[r], call, &plan, stage, j, NULL),
			 NDET_OK);
	struct ndet_hosts_args args;
	assert_true(fake_cuda_last_hosts_launch(l, &args));
	const struct ndet_hosts_chunk chunk = ndet_hosts_chunk_at(&plan, j);
	assert_int_equal(args.stage, stage);
	assert_int_equal(args.k.rank, l);
	assert_int_equal(args.k.nranks, g);
	assert_int_equal(args.nhosts, nhosts);
	assert_int_equal(args.host, host_index(hosts, r));
	assert_int_equal(args.partial_size, params.shape.partial_size);
	assert_int_equal(args.divisor, g * nhosts);
	/* Every kernel but the call's last has a stage of NCCL's after it. */
	assert_int_equal(args.nccl_follows, stage == 5 && j + 1 == plan.chunks ? 0 : 1);
	assert_int_equal(NDET_HOSTS_WHERE_STAGE(args.where), stage);
	assert_int_equal(NDET_HOSTS_WHERE_CHUNK(args.where), j);
	assert_int_equal(NDET_HOSTS_WHERE_CHUNKS(args.where), plan.chunks);
	assert_int_equal(args.k.count, params.count);
	assert_ptr_equal(args.k.sendbuff, call->sendbuff);
	assert_ptr_equal(args.k.recvbuff, call->recvbuff);
	assert_int_equal(args.chunk_offset, chunk.elems.offset);
	assert_int_equal(args.chunk_len, chunk.elems.count);
	assert_int_equal(args.block_elems, chunk.block_elems);
	char *slot = (char *)view.staging + chunk.slot_offset;
	assert_ptr_equal(args.partial, slot + plan.slot.partial_offset);
	assert_ptr_equal(args.received, slot + plan.slot.received_offset);
	assert_int_equal(args.received_stride, plan.slot.received_stride);
	assert_ptr_equal(args.result, slot + plan.slot.result_offset);
	/* Stages 3 and 5 check the status words of the NCCL stage before them. */
	if (stage == 1)
		assert_null(args.peer_status);
	else
		assert_ptr_equal(args.peer_status,
				 slot + ndet_hosts_status_at(&plan,
							     stage == 3 ? NDET_HOSTS_STAGE_PARTIALS
									: NDET_HOSTS_STAGE_RESULTS,
							     0));
	assert_true(chunk.slot_offset + plan.slot.bytes <= view.staging_bytes);
	const struct ndet_hosts_call_key key = {.dtype = call->dtype,
						.op = call->op,
						.coll = call->coll,
						.root = call->root,
						.premul = call->premul != NDET_PREMUL_NONE};
	struct ndet_hosts_launch launch;
	struct ndet_engine_config config = group->results[r].config;
	config.rank = l;
	config.nranks = g;
	config.ranks_per_device =
		ndet_setup_table_ranks_per_device(group->world.records, group->nranks);
	config.device_sms = ndet_setup_table_min_sms(group->world.records, group->nranks);
	config.processes_per_device =
		ndet_setup_table_processes_per_device(group->world.records, group->nranks);
	assert_int_equal(ndet_hosts_launch_make(&plan, &chunk, &key, (ndet_hosts_stage_t)stage,
						ndet_pool_lane_bytes(&config),
						(uint32_t)ndet_pool_lanes(&config), &launch),
			 NDET_OK);
	assert_int_equal(args.k.blocks, launch.blocks);
	assert_int_equal(args.k.signature, launch.signature);
	assert_int_equal(args.piece_elems, launch.piece_elems);
	assert_int_equal(args.k.lane_bytes, ndet_pool_lane_bytes(&config));
	for (int k = 0; k < NDET_MAX_RANKS; k++) {
		const int q = host_rank(hosts, r, k);
		assert_ptr_equal(args.k.flags[k], q >= 0 ? record_pool(group, q) : NULL);
	}
	uint64_t begin = 0, end = params.count;
	if (call->coll == NDET_COLL_REDUCE_SCATTER) {
		begin = (uint64_t)r * call->count;
		end = begin + call->count;
	} else if (call->coll == NDET_COLL_REDUCE && call->root != r) {
		end = 0;
	}
	assert_int_equal(args.out_begin, begin);
	assert_int_equal(args.out_end, end);
}

/* The plan of an f32 sum of 1000 elements on nhosts hosts of g, 1 MiB of staging. */
static struct ndet_hosts_plan sum_plan(int nhosts, int g)
{
	struct ndet_hosts_plan plan;
	const struct ndet_hosts_params params = ndet_hosts_params_for(
		NDET_DTYPE_F32, NDET_OP_SUM, false, NDET_COLL_ALLREDUCE, 1000, nhosts, g, 1 << 20);
	assert_int_equal(ndet_hosts_plan_make(&params, &plan), NDET_OK);
	return plan;
}

/*
 * An engine across hosts (2 x 2, A,B,A,B, 3 x 1): its view says where its rank sits
 * (H, g, its (h, l), the global rank of every (h, l), its own staging of
 * NCCL_DET_HOSTS_STAGING bytes, counted as held) and each stage kernel of each chunk
 * gets what check_stage_args computes; a chunk past the plan is refused.  An engine
 * of one host has no view and no stages.
 */
static void test_hosts_stage_arguments(void **state)
{
	static const char *const tables[] = {"AABB", "ABAB", "ABC"};
	for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++) {
		reset(state);
		ndet_setup_set_multi_host_for_testing(true);
		const char *hosts = tables[t];
		const int nranks = (int)strlen(hosts), g = host_size(hosts, 0);
		struct group group;
		hosts_group_create(&group, hosts, nranks);
		for (int r = 0; r < nranks; r++) {
			struct ndet_backend_hosts view;
			assert_int_equal(ndet_engine_hosts_view(group.engines[r], &view), NDET_OK);
			assert_int_equal(view.nhosts, nranks / g);
			assert_int_equal(view.local_ranks, g);
			assert_int_equal(view.host, host_index(hosts, r));
			assert_int_equal(view.local, host_local_index(hosts, r));
			assert_non_null(view.staging);
			assert_int_equal(view.staging_bytes, 1 << 20);
			assert_non_null(view.connect_buffer);
			assert_non_null(view.status_word);
			assert_non_null(view.connect_stream);
			for (int q = 0; q < nranks; q++)
				assert_int_equal(view.ranks[host_index(hosts, q) * g +
							    host_local_index(hosts, q)],
						 q);
		}
		const struct ndet_engine_call calls[] = {
			{.coll = NDET_COLL_ALLREDUCE,
			 .sendbuff = send_big,
			 .recvbuff = recv_big,
			 .count = 70001,
			 .dtype = NDET_DTYPE_BF16,
			 .op = NDET_OP_AVG},
			big_call(NDET_COLL_REDUCE_SCATTER, 1000, NDET_OP_SUM, 0),
			big_call(NDET_COLL_REDUCE, 3000, NDET_OP_MAX, nranks - 1),
			{.coll = NDET_COLL_ALLREDUCE,
			 .sendbuff = send_big,
			 .recvbuff = recv_big,
			 .count = 5,
			 .dtype = NDET_DTYPE_F8E4M3,
			 .op = NDET_OP_SUM,
			 .premul = NDET_PREMUL_HOST,
			 .scalar_bits = 0x38},
		};
		for (size_t c = 0; c < sizeof(calls) / sizeof(calls[0]); c++)
			for (int stage = 1; stage <= 5; stage += 2)
				for (int r = 0; r < nranks; r++)
					check_stage_args(&group, hosts, r, &calls[c], stage, 0);
		/* A chunk past the plan; a stage that is NCCL's. */
		struct ndet_hosts_plan plan;
		const struct ndet_hosts_params params =
			ndet_hosts_params_for(NDET_DTYPE_F32, NDET_OP_SUM, false,
					      NDET_COLL_ALLREDUCE, 1000, nranks / g, g, 1 << 20);
		assert_int_equal(ndet_hosts_plan_make(&params, &plan), NDET_OK);
		const struct ndet_engine_call sum =
			big_call(NDET_COLL_ALLREDUCE, 1000, NDET_OP_SUM, 0);
		const int launches = runtime().launches;
		assert_int_equal(ndet_engine_hosts_stage(group.engines[0], &sum, &plan, 1,
							 plan.chunks, NULL),
				 NDET_ERR_INVALID_ARGUMENT);
		assert_int_equal(ndet_engine_hosts_stage(group.engines[0], &sum, &plan, 2, 0, NULL),
				 NDET_ERR_INVALID_ARGUMENT);
		assert_int_equal(runtime().launches, launches);
		assert_int_equal(ndet_engine_destroy_group(group.engines, nranks, true), NDET_OK);
		assert_nothing_held();
		group_fini(&group);
	}
	/* One host: no view, no stages. */
	reset(state);
	struct group group;
	hosts_group_create(&group, "AAA", 3);
	struct ndet_backend_hosts view;
	assert_int_equal(ndet_engine_hosts_view(group.engines[0], &view), NDET_ERR_UNSUPPORTED);
	const struct ndet_hosts_plan plan = sum_plan(2, 1);
	const struct ndet_engine_call sum = big_call(NDET_COLL_ALLREDUCE, 1000, NDET_OP_SUM, 0);
	assert_int_equal(ndet_engine_hosts_stage(group.engines[0], &sum, &plan, 1, 0, NULL),
			 NDET_ERR_UNSUPPORTED);
	assert_int_equal(ndet_engine_destroy_group(group.engines, 3, true), NDET_OK);
	assert_nothing_held();
	group_fini(&group);
}

/* Stage 1 of chunk 0 of an all-reduce on rank r: the host status its kernel got. */
static struct ndet_host_status *stage_status(const struct group *group, const char *hosts, int r)
{
	const int g = host_size(hosts, r);
	const struct ndet_hosts_plan plan = sum_plan(group->nranks / g, g);
	const struct ndet_engine_call sum = big_call(NDET_COLL_ALLREDUCE, 1000, NDET_OP_SUM, 0);
	assert_int_equal(ndet_engine_hosts_stage(group->engines[r], &sum, &plan, 1, 0, NULL),
			 NDET_OK);
	struct ndet_hosts_args args;
	assert_true(fake_cuda_last_hosts_launch(host_local_index(hosts, r), &args));
	assert_int_equal(args.nccl_follows, 1);
	assert_non_null(args.k.host_status);
	return args.k.host_status;
}

/*
 * NCCL's stage between hosts seen from the host, without a CUDA call: a progress word
 * that says a stage of NCCL's follows and stays the same for NCCL_DET_TIMEOUT is a
 * stall (ncclRemoteError, NDET_KERNEL_ERR_STALLED, sticky, no more stage
 * launches); one that changes, or says the call's last kernel ran, is not; an engine
 * of one host never reads it.
 */
static void test_hosts_stall(void **state)
{
	reset(state);
	char log_path[] = "/tmp/ndet-test-engine-XXXXXX";
	log_start(log_path, "INIT");
	ndet_setup_set_multi_host_for_testing(true);
	struct group group;
	uint32_t code = 0;
	hosts_group_start(&group, "AABB", 4, 1000);
	struct ndet_host_status *status[4];
	for (int r = 0; r < 4; r++) {
		status[r] = stage_status(&group, "AABB", r);
		assert_int_equal(ndet_engine_error(group.engines[r], &code), NDET_OK);
	}
	status[0]->where = ndet_hosts_where(NDET_HOSTS_STAGE_GATHER, 2, 8);
	status[0]->progress = (1000u << 1) | 1u; /* in NCCL's stage, and it stays there */
	status[1]->progress = 1000u << 1;        /* the call's last kernel ran */
	status[2]->progress = (1000u << 1) | 1u; /* NCCL's stage ends in time */
	for (int r = 0; r < 3; r++)
		assert_int_equal(ndet_engine_error(group.engines[r], &code), NDET_OK);
	pause_ms(600);
	status[2]->progress = (2000u << 1) | 1u;
	assert_int_equal(ndet_engine_error(group.engines[2], &code), NDET_OK);
	pause_ms(600);
	assert_int_equal(ndet_engine_error(group.engines[2], &code), NDET_OK);
	assert_int_equal(ndet_engine_error(group.engines[1], &code), NDET_OK);
	assert_int_equal(ndet_engine_error(group.engines[0], &code), NDET_ERR_REMOTE);
	assert_int_equal(code, NDET_KERNEL_ERR_STALLED);
	status[0]->progress = (3000u << 1) | 1u; /* too late: a stall stays reported */
	assert_int_equal(ndet_engine_error(group.engines[0], &code), NDET_ERR_REMOTE);
	/* One WARN, on the stalled rank only, naming where its call stood. */
	assert_int_equal(file_lines_with(log_path, "made no progress"), 1);
	assert_int_equal(file_lines_with(log_path, "rank 0: a send or receive"), 1);
	assert_int_equal(file_lines_with(log_path, "after our stage 5 of chunk 3 of 8"), 1);
	char stalled[256];
	ndet_engine_error_describe(group.engines[0], stalled, sizeof(stalled));
	assert_string_equal(stalled,
			    "kernel error 5, stalled in NCCL between hosts, after our stage "
			    "5 of chunk 3 of 8");
	log_stop();
	unlink(log_path);
	const int launches = runtime().launches;
	const struct ndet_hosts_plan plan = sum_plan(2, 2);
	const struct ndet_engine_call sum = big_call(NDET_COLL_ALLREDUCE, 1000, NDET_OP_SUM, 0);
	assert_int_equal(ndet_engine_hosts_stage(group.engines[0], &sum, &plan, 3, 0, NULL),
			 NDET_ERR_REMOTE);
	assert_int_equal(runtime().launches, launches);
	assert_int_equal(ndet_engine_destroy_group(group.engines, 4, true), NDET_OK);
	assert_nothing_held();
	group_fini(&group);

	/* One host: the word means nothing. */
	reset(state);
	hosts_group_start(&group, "AAA", 3, 1000);
	assert_int_equal(ndet_engine_allreduce(group.engines[0], send_big, recv_big, 1000,
					       NDET_DTYPE_F32, NDET_OP_SUM, NULL),
			 NDET_OK);
	struct ndet_kernel_args args;
	assert_true(fake_cuda_last_launch(0, &args));
	args.host_status->progress = 1u;
	assert_int_equal(ndet_engine_error(group.engines[0], &code), NDET_OK);
	pause_ms(1100);
	assert_int_equal(ndet_engine_error(group.engines[0], &code), NDET_OK);
	assert_int_equal(ndet_engine_destroy_group(group.engines, 3, true), NDET_OK);
	assert_nothing_held();
	group_fini(&group);
}

/*
 * The staging is refused alike on every rank: below the least a layout needs, or with
 * the pool above NCCL_DET_MAX_MEMORY.  No engine is made and nothing stays held.
 */
static void test_hosts_staging_refused(void **state)
{
	for (int c = 0; c < 4; c++) {
		reset(state);
		ndet_setup_set_multi_host_for_testing(true);
		struct group group;
		/* Ranks as threads of one process, then each in its own (IPC peers). */
		group_init(&group, 4, c >= 2);
		group.hosts = "AABB";
		for (int r = 0; r < 4; r++) {
			group.results[r] = rank_member(&group, r);
			if (c % 2 == 0)
				group.results[r].config.hosts_staging =
					ndet_hosts_min_staging_any(2, 2) - 1;
			else
				group.results[r].config.max_memory =
					group.results[r].config.hosts_staging;
		}
		group_start(&group, exchange);
		for (int r = 0; r < 4; r++) {
			assert_int_not_equal(group.results[r].status, NDET_OK);
			assert_null(group.results[r].engine);
		}
		/* The pools wait for the next teardown's look (a setup frees none). */
		assert_no_violation();
		assert_int_equal(runtime().mappings, 0);
		ndet_teardown_pending_retry(false);
		assert_nothing_held();
		group_fini(&group);
	}
}

/*
 * A setup that fails where the ranks map each other's pools: each pool waits only
 * for the peers that opened it (round 3's words say which), so where CUDA refused
 * IPC on every rank (no P2P, isolated devices) no pool waits for anyone, and where
 * one rank could not open its peer's pool, the pool it did open is freed once it
 * wrote its detach word.  Ranks in separate processes: no barrier, no share.
 */
static void test_setup_ipc_refused_frees_pools(void **state)
{
	for (int c = 0; c < 2; c++) {
		reset(state);
		struct group group;
		group_init(&group, 2, true);
		for (int r = 0; r < 2; r++) {
			group.results[r] = rank_member(&group, r);
			if (c == 0 || r == 1)
				group.results[r].config.test_fail = NDET_FAULT_IPC_OPEN;
		}
		group_start(&group, exchange);
		for (int r = 0; r < 2; r++) {
			assert_int_not_equal(group.results[r].status, NDET_OK);
			assert_null(group.results[r].engine);
		}
		assert_no_violation();
		assert_int_equal(runtime().mappings, 0);
		/* Refused everywhere: nothing waits.  Else rank 1's pool, which 0 opened. */
		assert_int_equal(held().pending_pools, c == 0 ? 0 : 1);
		ndet_teardown_pending_retry(c == 1);
		assert_nothing_held();
		group_fini(&group);
	}
	/*
	 * Two hosts of two, each rank its own process, rank 3 cannot open rank 2's pool:
	 * the pools of 0 and 1 (opened by each other) and of 3 (opened by 2) wait for
	 * their openers' detach words; 2's, which nobody opened, does not.  (Each rank
	 * reads the word of its host peer by global rank and tests its own local index.)
	 */
	reset(state);
	ndet_setup_set_multi_host_for_testing(true);
	struct group group;
	group_init(&group, 4, true);
	group.hosts = "AABB";
	for (int r = 0; r < 4; r++) {
		group.results[r] = rank_member(&group, r);
		group.results[r].config.test_fail = NDET_FAULT_IPC_OPEN;
		group.results[r].config.test_fail_rank = 3;
	}
	group_start(&group, exchange);
	for (int r = 0; r < 4; r++)
		assert_null(group.results[r].engine);
	assert_int_equal(runtime().mappings, 0);
	assert_int_equal(held().pending_pools, 3);
	ndet_teardown_pending_retry(true);
	assert_nothing_held();
	group_fini(&group);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_teardown_order_lockstep, reset),
		cmocka_unit_test_setup(test_teardown_order_threads, reset),
		cmocka_unit_test_setup(test_barrier_incomplete_detach_frees, reset),
		cmocka_unit_test_setup(test_abandoned_exchange_keeps_buffer, reset),
		cmocka_unit_test_setup(test_kernel_not_finished_keeps_memory, reset),
		cmocka_unit_test_setup(test_faulted_kernel_ends_wait, reset),
		cmocka_unit_test_setup(test_create_destroy_cycles, reset),
		cmocka_unit_test_setup(test_abort_bounds_teardown, reset),
		cmocka_unit_test_setup(test_abort_during_barrier_teardown, reset),
		cmocka_unit_test_setup(test_launch_order_across_streams, reset),
		cmocka_unit_test_setup(test_one_rank_copy_alone, reset),
		cmocka_unit_test_setup(test_failed_launch_poisons_peers, reset),
		cmocka_unit_test_setup(test_unreachable_device_fails_engine, reset),
		cmocka_unit_test_setup(test_launch_args_trace_and_coll_line, reset),
		cmocka_unit_test_setup(test_error_details_published_last, reset),
		cmocka_unit_test_setup(test_error_description_names_ranks, reset),
		cmocka_unit_test_setup(test_poison_word_is_local_index, reset),
		cmocka_unit_test_setup(test_setup_stale_round, reset),
		cmocka_unit_test_setup(test_setup_records_never_pageable, reset),
		cmocka_unit_test_setup(test_abandoned_exchange_takes_its_communicator, reset),
		cmocka_unit_test_setup(test_failed_start_takes_its_communicator, reset),
		cmocka_unit_test_setup(test_plan_ignores_pointers, reset),
		cmocka_unit_test_setup(test_calls_never_block_the_host, reset),
		cmocka_unit_test_setup(test_setup_and_teardown_beside_a_capture, reset),
		cmocka_unit_test_setup(test_gpu_harness_sizes_reach_every_path, reset),
		cmocka_unit_test_setup(test_setup_gpu_too_small, reset),
		cmocka_unit_test_setup(test_lanes_follow_grid_cap, reset),
		cmocka_unit_test_setup(test_setup_gpu_without_kernel_image, reset),
		cmocka_unit_test_setup(test_setup_fp8_flags, reset),
		cmocka_unit_test_setup(test_detach_threads, reset),
		cmocka_unit_test_setup(test_detach_silent_peer_pending, reset),
		cmocka_unit_test_setup(test_detach_dead_peer, reset),
		cmocka_unit_test_setup(test_detach_epoch_mismatch, reset),
		cmocka_unit_test_setup(test_exit_last_chance, reset),
		cmocka_unit_test_setup(test_fake_catches_free_under_reader, reset),
		cmocka_unit_test_setup(test_detach_words, reset),
		cmocka_unit_test_setup(test_process_gone, reset),
		cmocka_unit_test_setup(test_one_host_view_is_the_communicator, reset),
		cmocka_unit_test_setup(test_hosts_map_and_launch_locally, reset),
		cmocka_unit_test_setup(test_hosts_teardown_judges_own_host, reset),
		cmocka_unit_test_setup(test_hosts_detach_by_local_index, reset),
		cmocka_unit_test_setup(test_hosts_two_of_sixteen, reset),
		cmocka_unit_test_setup(test_hosts_too_many_on_a_host, reset),
		cmocka_unit_test_setup(test_hosts_stage_arguments, reset),
		cmocka_unit_test_setup(test_hosts_stall, reset),
		cmocka_unit_test_setup(test_hosts_staging_refused, reset),
		cmocka_unit_test_setup(test_setup_ipc_refused_frees_pools, reset),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
