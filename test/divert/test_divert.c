/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The divert layer end to end on a CPU: the shim (src/preload/ndet_shim.c) is compiled into
 * this program, which therefore plays libnccl-det.so in front of the in-process
 * multi-rank fake NCCL (threads as ranks, host memory), with the host-only backend
 * (test/support/ndet_fake_backend.h) in place of the CUDA engine.  A diverted all-reduce
 * computes the CPU reference tree; the fake NCCL reduces in rank order, rounding
 * after every step; the tests prove which one ran.
 *
 * Covered: results (every dtype x op, n = 3, 4), one thread per rank and one thread
 * for every rank (groups, ncclCommInitAll, several communicators in one group),
 * nested groups, ncclGroupSimulateEnd, mixed eligible and fallback calls in one group,
 * non-blocking communicators, ranks on several hosts (NCCL_DET_TEST_HOST), split and shrink,
 * finalize/destroy/abort/revoke, ncclCommGetAsyncError after an engine error, injected setup
 * failures on one rank, the memory cap, strict mode, forwarded invalid arguments, count 0,
 * PreMulSum ops (diverted; destroyed ones forwarded), stats, ncclDetCommQuery, fork, and the
 * watchdog races (run under ThreadSanitizer by
 * the --enable-tsan build).
 */
#include "config.h"

#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "test/fake_nccl/fake_nccl.h"
#include "nccl_det.h"
#include "divert/ndet_comm.h"
#include "divert/ndet_comm_internal.h"
#include "test/support/ndet_divert_fixture.h"
#include "test/support/ndet_fake_backend.h"
#include "kernels/ndet_abi.h"
#include "common/ndet_log.h"
#include "reference/ndet_reference.h"
#include "common/ndet_settings.h"
#include "test/support/ndet_test_data.h"

#define MAX_RANKS 8
#define COUNT     97 /* odd, several chunks of nothing in particular */

/* ------------------------------------------------------------------ fixtures */

static const char *const knobs[] = {
	"NCCL_DET_TEST_FAIL", "NCCL_DET_TEST_HOST", "NCCL_DET_TIMEOUT",
	"NCCL_DET_STRICT",    "NCCL_DET_STATS",     "NCCL_DET_MAX_MEMORY",
	"NCCL_DET_POOL_SIZE", "NCCL_COMM_BLOCKING", "FAKE_BACKEND_PROCESS_PER_RANK",
	"FAKE_NCCL_TRACE",    "FAKE_NCCL_FAIL",     "NCCL_DET_ENABLE",
};

static int setup(void **state)
{
	(void)state;
	return ndet_divert_fixture_reset(knobs, sizeof(knobs) / sizeof(knobs[0]), ndet_divert_log,
					 ndet_divert_trace);
}

static void expect_diverted(ncclComm_t comm, int expected)
{
	int diverted = -1;
	const char *reason = NULL;
	assert_int_equal(ncclDetCommQuery(comm, &diverted, &reason), ncclSuccess);
	if (diverted != expected)
		fail_msg("communicator %p: diverted %d, expected %d (%s)", (void *)comm, diverted,
			 expected, reason != NULL ? reason : "?");
	assert_non_null(reason);
}

/* ------------------------------------------------------------------ data */

/* Inputs of every rank, the tree result and what the fake NCCL itself computes. */
struct dataset {
	ndet_dtype_t dtype;
	ndet_op_t op;
	int nranks;
	size_t count;
	unsigned char input[MAX_RANKS][COUNT * 8];
	unsigned char output[MAX_RANKS][COUNT * 8];
	unsigned char nccl[MAX_RANKS][COUNT * 8];
	unsigned char tree[COUNT * 8];
};

static void dataset_fill(struct dataset *data, ndet_dtype_t dtype, ndet_op_t op, int nranks,
			 uint64_t seed)
{
	memset(data, 0, sizeof(*data));
	data->dtype = dtype;
	data->op = op;
	data->nranks = nranks;
	data->count = COUNT;
	const void *inputs[MAX_RANKS];
	for (int r = 0; r < nranks; r++) {
		ndet_test_fill_rank(dtype, data->input[r], 0, COUNT, seed, r, nranks,
				    NDET_TEST_DATA_CANCEL);
		inputs[r] = data->input[r];
	}
	assert_int_equal(ndet_reference_allreduce(inputs, nranks, data->tree, COUNT, dtype, op),
			 NDET_OK);
}

/* Every rank's diverted output is the tree result, bit for bit. */
static void dataset_check_tree(const struct dataset *data)
{
	for (int r = 0; r < data->nranks; r++) {
		size_t first = 0;
		size_t bad = ndet_test_count_differences(data->dtype, data->output[r], data->tree,
							 data->count, &first);
		if (bad != 0)
			fail_msg("%s %s n=%d rank %d: %zu elements differ from the tree, first %zu",
				 ndet_dtype_name(data->dtype), ndet_op_name(data->op), data->nranks,
				 r, bad, first);
	}
}

/* ------------------------------------------------------------------ one thread per rank */

struct ranks_job {
	struct dataset *data;
	ncclUniqueId id;
	ncclComm_t comms[MAX_RANKS];
	ncclResult_t results[MAX_RANKS];
	int diverted[MAX_RANKS];
	bool reduce_in_nccl; /* also run the fake's own all-reduce, through pncclAllReduce */
	bool keep;           /* leave the communicators alive */
};

static void ranks_reduce(int rank, void *opaque)
{
	struct ranks_job *job = opaque;
	struct dataset *data = job->data;
	ncclComm_t comm = NULL;
	ncclResult_t result = ncclCommInitRank(&comm, data->nranks, job->id, rank);
	if (result == ncclSuccess)
		result = ncclAllReduce(data->input[rank], data->output[rank], data->count,
				       ndet_divert_nccl_type(data->dtype),
				       ndet_divert_nccl_op(data->op), comm, NULL);
	if (result == ncclSuccess && job->reduce_in_nccl)
		result = pncclAllReduce(data->input[rank], data->nccl[rank], data->count,
					ndet_divert_nccl_type(data->dtype),
					ndet_divert_nccl_op(data->op), comm, NULL);
	const char *reason = NULL;
	if (comm != NULL && ncclDetCommQuery(comm, &job->diverted[rank], &reason) != ncclSuccess)
		job->diverted[rank] = -1;
	job->comms[rank] = comm;
	if (!job->keep && comm != NULL) {
		ncclResult_t destroyed = ncclCommDestroy(comm);
		if (result == ncclSuccess)
			result = destroyed;
	}
	job->results[rank] = result;
}

static void ranks_run(struct ranks_job *job)
{
	assert_int_equal(pncclGetUniqueId(&job->id), ncclSuccess);
	assert_int_equal(fake_nccl_run_ranks(job->data->nranks, ranks_reduce, job), 0);
	for (int r = 0; r < job->data->nranks; r++)
		assert_int_equal(job->results[r], ncclSuccess);
}

/* Diverted results are the tree's, and the data tells the tree from NCCL's order. */
static void test_thread_per_rank_tree_results(void **state)
{
	(void)state;
	static struct dataset data;
	int discriminating = 0;
	for (int nranks = 3; nranks <= 4; nranks++) {
		for (int dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
			for (int op = 0; op < NDET_OP_COUNT; op++) {
				dataset_fill(&data, (ndet_dtype_t)dtype, (ndet_op_t)op, nranks,
					     0x5eed + (uint64_t)(dtype * 16 + op));
				struct ranks_job job = {.data = &data, .reduce_in_nccl = true};
				ranks_run(&job);
				for (int r = 0; r < nranks; r++)
					assert_int_equal(job.diverted[r], 1);
				dataset_check_tree(&data);
				size_t differ = ndet_test_count_differences(
					data.dtype, data.nccl[0], data.tree, COUNT, NULL);
				/*
				 * n = 3: the tree (0+1)+2 is rank order, so f32 and f64 sums
				 * agree with NCCL's; f16, bf16 and fp8 still differ (the fake
				 * rounds every step, the tree once).  n = 4 differs in all.
				 */
				bool rounds_once =
					dtype != NDET_DTYPE_F32 && dtype != NDET_DTYPE_F64;
				if ((op == NDET_OP_SUM || op == NDET_OP_AVG) &&
				    (nranks == 4 || rounds_once)) {
					/* A visible share, else the data could not catch a wrong
					 * order. */
					if (differ < COUNT / 20)
						fail_msg("%s %s n=%d: only %zu of %d elements tell "
							 "the "
							 "tree from rank order",
							 ndet_dtype_name(data.dtype),
							 ndet_op_name(data.op), nranks, differ,
							 COUNT);
					discriminating++;
				}
			}
		}
	}
	assert_int_equal(discriminating, 2 * NDET_DTYPE_COUNT + 2 * (NDET_DTYPE_COUNT - 2));
	struct ndet_fake_backend_counters counters;
	ndet_fake_backend_counters(&counters);
	assert_int_equal(counters.engines_created, (3 + 4) * NDET_DTYPE_COUNT * NDET_OP_COUNT);
	/*
	 * Threads of one process: no barrier at destroy; each pool waits for the other
	 * ranks of its process, and goes with the last of them.
	 */
	assert_int_equal(counters.pools_freed, counters.engines_created);
	assert_int_equal(counters.pools_quarantined, 0);
	assert_int_equal(ndet_divert_count_log("WARN", NULL), 0);
}

/* ------------------------------------------------------------------ one thread, every rank */

/* nccl-tests -g: inits in a group, every all-reduce in a group, one thread. */
static void test_one_thread_several_comms(void **state)
{
	(void)state;
	static struct dataset three, two;
	dataset_fill(&three, NDET_DTYPE_F32, NDET_OP_SUM, 3, 11);
	dataset_fill(&two, NDET_DTYPE_BF16, NDET_OP_AVG, 2, 12);
	ncclUniqueId id3, id2;
	ncclComm_t a[3] = {NULL}, b[2] = {NULL};
	assert_int_equal(pncclGetUniqueId(&id3), ncclSuccess);
	assert_int_equal(pncclGetUniqueId(&id2), ncclSuccess);
	assert_int_equal(ncclGroupStart(), ncclSuccess);
	for (int r = 0; r < 3; r++)
		assert_int_equal(ncclCommInitRank(&a[r], 3, id3, r), ncclSuccess);
	for (int r = 0; r < 2; r++)
		assert_int_equal(ncclCommInitRank(&b[r], 2, id2, r), ncclSuccess);
	/* Pending until the outermost ncclGroupEnd, where all five set up at once. */
	expect_diverted(a[0], 0);
	assert_int_equal(ncclGroupEnd(), ncclSuccess);
	for (int r = 0; r < 3; r++)
		expect_diverted(a[r], 1);
	for (int r = 0; r < 2; r++)
		expect_diverted(b[r], 1);

	assert_int_equal(ncclGroupStart(), ncclSuccess);
	for (int r = 0; r < 3; r++)
		assert_int_equal(ncclAllReduce(three.input[r], three.output[r], COUNT, ncclFloat32,
					       ncclSum, a[r], NULL),
				 ncclSuccess);
	for (int r = 0; r < 2; r++)
		assert_int_equal(ncclAllReduce(two.input[r], two.output[r], COUNT, ncclBfloat16,
					       ncclAvg, b[r], NULL),
				 ncclSuccess);
	assert_int_equal(ncclGroupEnd(), ncclSuccess);
	dataset_check_tree(&three);
	dataset_check_tree(&two);
	for (int r = 0; r < 3; r++)
		assert_int_equal(ncclCommDestroy(a[r]), ncclSuccess);
	for (int r = 0; r < 2; r++)
		assert_int_equal(ncclCommDestroy(b[r]), ncclSuccess);
}

/* ncclCommInitAll sets every rank up in lockstep right away. */
static void test_init_all(void **state)
{
	(void)state;
	static struct dataset data;
	dataset_fill(&data, NDET_DTYPE_F16, NDET_OP_SUM, 4, 21);
	ncclComm_t comms[4] = {NULL};
	assert_int_equal(ncclCommInitAll(comms, 4, NULL), ncclSuccess);
	for (int r = 0; r < 4; r++)
		expect_diverted(comms[r], 1);
	assert_int_equal(ncclGroupStart(), ncclSuccess);
	for (int r = 0; r < 4; r++)
		assert_int_equal(ncclAllReduce(data.input[r], data.output[r], COUNT, ncclFloat16,
					       ncclSum, comms[r], NULL),
				 ncclSuccess);
	assert_int_equal(ncclGroupEnd(), ncclSuccess);
	dataset_check_tree(&data);
	/* The verdict: one line, from rank 0, at NCCL's VERSION level. */
	char verdict[128];
	snprintf(verdict, sizeof(verdict), "NCCL-DET VERSION nccl-det %s (preload): communicator",
		 PACKAGE_VERSION);
	assert_int_equal(ndet_divert_count_log("NCCL-DET VERSION", NULL), 1);
	assert_int_equal(ndet_divert_count_log(verdict, "of 4 ranks: deterministic (its "
							"floating-point all-reduce"),
			 1);
	for (int r = 0; r < 4; r++)
		assert_int_equal(ncclCommDestroy(comms[r]), ncclSuccess);
}

/*
 * One group: a diverted all-reduce, an integer one (NCCL), and a diverted one that
 * reads the first one's output; nested groups run nothing until the outermost end;
 * ncclGroupSimulateEnd drops what was recorded.
 */
static void test_group_order_nesting_simulate(void **state)
{
	(void)state;
	static struct dataset data;
	static int32_t integers[3][COUNT], integer_sums[3][COUNT];
	static float second[3][COUNT];
	dataset_fill(&data, NDET_DTYPE_F32, NDET_OP_SUM, 3, 31);
	for (int r = 0; r < 3; r++)
		for (int i = 0; i < COUNT; i++)
			integers[r][i] = (int32_t)(r * 1000 + i);
	ncclComm_t comms[3] = {NULL};
	assert_int_equal(ncclCommInitAll(comms, 3, NULL), ncclSuccess);
	ndet_divert_trace_on();

	assert_int_equal(ncclGroupStart(), ncclSuccess);
	assert_int_equal(ncclGroupStart(), ncclSuccess);
	for (int r = 0; r < 3; r++) {
		assert_int_equal(ncclAllReduce(data.input[r], data.output[r], COUNT, ncclFloat32,
					       ncclSum, comms[r], NULL),
				 ncclSuccess);
		assert_int_equal(ncclAllReduce(integers[r], integer_sums[r], COUNT, ncclInt32,
					       ncclSum, comms[r], NULL),
				 ncclSuccess);
		assert_int_equal(ncclAllReduce(data.output[r], second[r], COUNT, ncclFloat32,
					       ncclMax, comms[r], NULL),
				 ncclSuccess);
	}
	assert_int_equal(ncclGroupEnd(), ncclSuccess);
	/* Inner end: nothing ran yet. */
	for (int r = 0; r < 3; r++)
		assert_true(second[r][0] == 0.0f && integer_sums[r][0] == 0);
	assert_int_equal(ncclGroupEnd(), ncclSuccess);
	ndet_divert_trace_off();
	dataset_check_tree(&data);
	for (int r = 0; r < 3; r++) {
		/* The max ran after the sum it reads: every rank holds the same sum. */
		assert_memory_equal(second[r], data.tree, COUNT * sizeof(float));
		for (int i = 0; i < COUNT; i++)
			assert_int_equal(integer_sums[r][i], 3 * i + 3000);
	}
	/* The integer calls were replayed through NCCL; the float ones never reached it. */
	assert_int_equal(ndet_divert_traced("ncclAllReduce"), 3);

	/* Simulated: recorded, then dropped. */
	struct ndet_fake_backend_counters before, after;
	ndet_fake_backend_counters(&before);
	memset(data.output, 0, sizeof(data.output));
	ncclSimInfo_t simulation = NCCL_SIM_INFO_INITIALIZER;
	assert_int_equal(ncclGroupStart(), ncclSuccess);
	for (int r = 0; r < 3; r++)
		assert_int_equal(ncclAllReduce(data.input[r], data.output[r], COUNT, ncclFloat32,
					       ncclSum, comms[r], NULL),
				 ncclSuccess);
	assert_int_equal(ncclGroupSimulateEnd(&simulation), ncclSuccess);
	ndet_fake_backend_counters(&after);
	assert_int_equal(after.allreduces, before.allreduces);
	for (int r = 0; r < 3; r++)
		assert_true(((float *)data.output[r])[0] == 0.0f);
	/* The thread's group state is clean again: a plain group works. */
	assert_int_equal(ncclGroupStart(), ncclSuccess);
	for (int r = 0; r < 3; r++)
		assert_int_equal(ncclAllReduce(data.input[r], data.output[r], COUNT, ncclFloat32,
					       ncclSum, comms[r], NULL),
				 ncclSuccess);
	assert_int_equal(ncclGroupEnd(), ncclSuccess);
	dataset_check_tree(&data);
	for (int r = 0; r < 3; r++)
		assert_int_equal(ncclCommDestroy(comms[r]), ncclSuccess);
}

/* ------------------------------------------------------------------ non-blocking */

struct nonblocking_job {
	struct dataset *data;
	ncclUniqueId id;
	bool env; /* NCCL_COMM_BLOCKING=0 instead of the config */
	ncclResult_t init[MAX_RANKS], reduce[MAX_RANKS], split[MAX_RANKS], mixed[MAX_RANKS];
	int pending_before[MAX_RANKS], diverted_after[MAX_RANKS], child_diverted[MAX_RANKS];
};

/*
 * Until the peers got there too: bounded in time, not in polls, so that a slow run
 * (valgrind, a loaded machine) does not give up early.
 */
static ncclResult_t poll_ready(ncclComm_t comm)
{
	ncclResult_t state = ncclInProgress;
	time_t deadline = time(NULL) + 20;
	while (state == ncclInProgress && time(NULL) < deadline) {
		ncclResult_t result = ncclCommGetAsyncError(comm, &state);
		if (result != ncclSuccess)
			return result;
		if (state == ncclInProgress)
			sched_yield();
	}
	return state;
}

#define MIXED_COUNT 67
static int32_t mixed_ints[MAX_RANKS][MIXED_COUNT], mixed_int_sums[2][MAX_RANKS][MIXED_COUNT];
static float mixed_floats[MAX_RANKS][MIXED_COUNT], mixed_float_sums[2][MAX_RANKS][MIXED_COUNT];

/*
 * One group on a non-blocking communicator mixing calls NCCL runs (int32) and
 * diverted ones (f32): NCCL's group end answers ncclInProgress and goes on in the
 * background, and NCCL refuses the next call on the communicator until it is done.
 */
static ncclResult_t mixed_group(ncclComm_t comm, int rank)
{
	ncclResult_t result = ncclGroupStart();
	for (int k = 0; k < 2 && result == ncclSuccess; k++) {
		result = ncclAllReduce(mixed_ints[rank], mixed_int_sums[k][rank], MIXED_COUNT,
				       ncclInt32, ncclSum, comm, NULL);
		if (result == ncclSuccess || result == ncclInProgress)
			result = ncclAllReduce(mixed_floats[rank], mixed_float_sums[k][rank],
					       MIXED_COUNT, ncclFloat32, ncclSum, comm, NULL);
	}
	ncclResult_t end = ncclGroupEnd();
	if (result != ncclSuccess && result != ncclInProgress)
		return result;
	return end == ncclInProgress ? poll_ready(comm) : end;
}

static void nonblocking_rank(int rank, void *opaque)
{
	struct nonblocking_job *job = opaque;
	struct dataset *data = job->data;
	ncclComm_t comm = NULL;
	ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
	config.blocking = 0;
	job->init[rank] =
		job->env ? ncclCommInitRank(&comm, data->nranks, job->id, rank)
			 : ncclCommInitRankConfig(&comm, data->nranks, job->id, rank, &config);
	if (job->init[rank] != ncclInProgress || poll_ready(comm) != ncclSuccess)
		return;
	const char *reason;
	if (ncclDetCommQuery(comm, &job->pending_before[rank], &reason) != ncclSuccess ||
	    strstr(reason, "pending") == NULL)
		job->pending_before[rank] = -1;
	/* The first eligible call sets the communicator up, polling our own exchange. */
	job->reduce[rank] = ncclAllReduce(data->input[rank], data->output[rank], data->count,
					  ndet_divert_nccl_type(data->dtype),
					  ndet_divert_nccl_op(data->op), comm, NULL);
	if (ncclDetCommQuery(comm, &job->diverted_after[rank], &reason) != ncclSuccess)
		job->diverted_after[rank] = -1;
	job->mixed[rank] = mixed_group(comm, rank);
	/* A split with a NULL config inherits non-blocking: pending until its first call. */
	ncclComm_t child = NULL;
	job->split[rank] = ncclCommSplit(comm, 0, rank, &child, NULL);
	if (job->split[rank] == ncclInProgress && poll_ready(child) == ncclSuccess) {
		int diverted = -1;
		if (ncclDetCommQuery(child, &diverted, &reason) == ncclSuccess && diverted == 0 &&
		    strstr(reason, "pending") != NULL)
			job->child_diverted[rank] = 1;
		ncclCommDestroy(child);
	}
	ncclCommDestroy(comm);
}

static void test_nonblocking(void **state)
{
	(void)state;
	static struct dataset data;
	for (int env = 0; env < 2; env++) {
		if (env)
			assert_int_equal(setenv("NCCL_COMM_BLOCKING", "0", 1), 0);
		dataset_fill(&data, NDET_DTYPE_F64, NDET_OP_SUM, 3, 41 + (uint64_t)env);
		struct nonblocking_job job = {.data = &data, .env = env != 0};
		for (int r = 0; r < 3; r++)
			for (int i = 0; i < MIXED_COUNT; i++) {
				mixed_ints[r][i] = (int32_t)(i * 7919 + r * 104729 + env) - 300000;
				mixed_floats[r][i] = (float)((i * 37 + r * 11) % 101 + 1) /
						     (float)(1u << ((i + 7 * r) % 20));
			}
		memset(mixed_int_sums, 0, sizeof(mixed_int_sums));
		memset(mixed_float_sums, 0, sizeof(mixed_float_sums));
		assert_int_equal(pncclGetUniqueId(&job.id), ncclSuccess);
		assert_int_equal(fake_nccl_run_ranks(3, nonblocking_rank, &job), 0);
		for (int r = 0; r < 3; r++) {
			assert_int_equal(job.init[r], ncclInProgress);
			assert_int_equal(job.pending_before[r], 0);
			assert_int_equal(job.reduce[r], ncclSuccess);
			assert_int_equal(job.diverted_after[r], 1);
			assert_int_equal(job.split[r], ncclInProgress);
			assert_int_equal(job.child_diverted[r], 1);
			/* The mixed group: every call ran, NCCL's exact, ours equal on every rank.
			 */
			assert_int_equal(job.mixed[r], ncclSuccess);
			for (int k = 0; k < 2; k++)
				for (int i = 0; i < MIXED_COUNT; i++) {
					assert_int_equal(mixed_int_sums[k][r][i],
							 mixed_ints[0][i] + mixed_ints[1][i] +
								 mixed_ints[2][i]);
					assert_true(mixed_float_sums[k][r][i] > 0.0f);
					assert_memory_equal(&mixed_float_sums[k][r][i],
							    &mixed_float_sums[0][0][i],
							    sizeof(float));
				}
		}
		dataset_check_tree(&data);
		unsetenv("NCCL_COMM_BLOCKING");
	}
}

/* ------------------------------------------------------------------ hosts */

struct hosts_job {
	struct dataset *data;
	ncclUniqueId id;
	bool nonblocking;
	ncclResult_t results[MAX_RANKS];
	int diverted[MAX_RANKS];
	const char *reasons[MAX_RANKS];
};

/* Until NCCL's work of a non-blocking call is done; a blocking one is. */
static ncclResult_t hosts_settle(ncclComm_t comm, ncclResult_t result)
{
	return result == ncclInProgress ? poll_ready(comm) : result;
}

/* Each rank: init (blocking or not), our all-reduce, NCCL's own, then the query. */
static void hosts_rank(int rank, void *opaque)
{
	struct hosts_job *job = opaque;
	struct dataset *data = job->data;
	const ncclDataType_t type = ndet_divert_nccl_type(data->dtype);
	const ncclRedOp_t op = ndet_divert_nccl_op(data->op);
	ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
	config.blocking = job->nonblocking ? 0 : 1;
	ncclComm_t comm = NULL;
	ncclResult_t result = ncclCommInitRankConfig(&comm, data->nranks, job->id, rank, &config);
	result = hosts_settle(comm, result);
	if (result == ncclSuccess)
		result = hosts_settle(comm, ncclAllReduce(data->input[rank], data->output[rank],
							  data->count, type, op, comm, NULL));
	if (result == ncclSuccess)
		result = hosts_settle(comm, pncclAllReduce(data->input[rank], data->nccl[rank],
							   data->count, type, op, comm, NULL));
	if (comm != NULL &&
	    ncclDetCommQuery(comm, &job->diverted[rank], &job->reasons[rank]) != ncclSuccess)
		job->diverted[rank] = -1;
	if (comm != NULL) {
		ncclResult_t destroyed = ncclCommDestroy(comm);
		if (result == ncclSuccess)
			result = destroyed;
	}
	job->results[rank] = result;
}

/*
 * NCCL_DET_TEST_HOST splits the threads of the fake NCCL into hosts.  Equal hosts of
 * blocking ranks divert where every rank's engine has the data path between hosts
 * (the host-only backend does; 2 x 2 consecutive ranks give the single-host tree;
 * test_hosts covers every layout).  Every other multi-host communicator falls back on
 * every rank alike, with the verdict's cause (non-blocking, unequal ranks per host,
 * or multi-host: a rank's engine, or the backend itself, without the stages, as the
 * CUDA engine is) in ncclDetCommQuery, one WARN per rank and the verdict line of rank
 * 0; NCCL's result is what they get.  Ranks of one process on both "hosts" share pid
 * and namespaces, so the hosts alone decide.  One name for every rank is one host,
 * which diverts as before, blocking or not.
 */
static void test_hosts(void **state)
{
	static const struct {
		const char *hosts; /* NCCL_DET_TEST_HOST */
		int nranks;
		bool nonblocking;
		ndet_verdict_reason_t reason; /* OK: diverted */
		int offending;
		int incapable;          /* this rank's engine has no multi-host stages; -1: none */
		bool backend_incapable; /* the backend has none (multi_host false) */
	} cases[] = {
		{"A@0,1;B@2,3", 4, false, NDET_VERDICT_OK, -1, -1, false},
		/* Ranks 2 and 3 are not listed: they keep the real host, another one. */
		{"A@0,1", 4, false, NDET_VERDICT_OK, -1, -1, false},
		{"A@0,1;B@2,3", 4, false, NDET_VERDICT_MULTI_HOST, 2, 3, false},
		{"A@0,2;B@1,3", 4, false, NDET_VERDICT_MULTI_HOST, 1, 0, false},
		{"A@0,1;B@2,3", 4, false, NDET_VERDICT_MULTI_HOST, 2, -1, true},
		{"A@0,1;B@2", 3, false, NDET_VERDICT_MULTI_HOST_UNEQUAL, 2, -1, false},
		{"A@0,1;B@2,3", 4, true, NDET_VERDICT_MULTI_HOST_NONBLOCKING, 0, -1, false},
		{"A@0,1,2,3", 4, false, NDET_VERDICT_OK, -1, -1, false},
		{"A@0,1,2,3", 4, false, NDET_VERDICT_OK, -1, -1, true},
		{"A", 4, false, NDET_VERDICT_OK, -1, -1, false},
		{"A", 3, true, NDET_VERDICT_OK, -1, -1, false},
	};
	static struct dataset data;
	static struct ndet_backend single_host_backend;
	single_host_backend = ndet_fake_backend;
	single_host_backend.multi_host = false;
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		const int n = cases[c].nranks;
		const bool diverts = cases[c].reason == NDET_VERDICT_OK;
		setup(state);
		print_message("NCCL_DET_TEST_HOST=%s, %d ranks%s%s\n", cases[c].hosts, n,
			      cases[c].nonblocking ? ", non-blocking" : "",
			      cases[c].backend_incapable ? ", a backend without multi-host stages"
							 : "");
		assert_int_equal(setenv("NCCL_DET_TEST_HOST", cases[c].hosts, 1), 0);
		ndet_divert_settings_changed();
		ndet_fake_backend_set_multi_host(cases[c].incapable, false);
		ndet_comm_set_backend_for_testing(cases[c].backend_incapable ? &single_host_backend
									     : &ndet_fake_backend);
		dataset_fill(&data, NDET_DTYPE_F32, NDET_OP_SUM, n, 81 + c);
		struct hosts_job job = {.data = &data, .nonblocking = cases[c].nonblocking};
		assert_int_equal(pncclGetUniqueId(&job.id), ncclSuccess);
		assert_int_equal(fake_nccl_run_ranks(n, hosts_rank, &job), 0);
		ndet_comm_set_backend_for_testing(&ndet_fake_backend);
		for (int r = 0; r < n; r++) {
			assert_int_equal(job.results[r], ncclSuccess);
			assert_int_equal(job.diverted[r], diverts ? 1 : 0);
			assert_non_null(job.reasons[r]);
			if (!diverts) {
				assert_string_equal(job.reasons[r],
						    ndet_verdict_reason_name(cases[c].reason));
				assert_memory_equal(data.output[r], data.nccl[r],
						    COUNT * sizeof(float));
			}
		}
		if (diverts) {
			dataset_check_tree(&data);
			assert_int_equal(ndet_divert_count_log("WARN", NULL), 0);
			continue;
		}
		/* One WARN per rank with cause, rank and fix; the same cause in the verdict. */
		char needle[512];
		snprintf(needle, sizeof(needle), "not deterministic: %s (rank %d). Fix: %s",
			 ndet_verdict_reason_name(cases[c].reason), cases[c].offending,
			 ndet_verdict_reason_fix(cases[c].reason));
		assert_int_equal(ndet_divert_count_log("WARN", needle), n);
		assert_int_equal(ndet_divert_count_log("WARN", NULL), n);
		snprintf(needle, sizeof(needle), "run in NCCL (%s, rank %d)",
			 ndet_verdict_reason_name(cases[c].reason), cases[c].offending);
		assert_int_equal(ndet_divert_count_log("NCCL-DET VERSION", needle), 1);
	}
}

/* ------------------------------------------------------------------ split, shrink */

struct family_job {
	ncclUniqueId id;
	int shrink_flags;
	ncclResult_t result[MAX_RANKS];
	int child_diverted[MAX_RANKS], parent_diverted[MAX_RANKS];
	float value[MAX_RANKS][4];
};

static void family_rank(int rank, void *opaque)
{
	struct family_job *job = opaque;
	ncclComm_t parent = NULL, half = NULL, shrunk = NULL;
	const char *reason;
	ncclResult_t result = ncclCommInitRank(&parent, 4, job->id, rank);
	/* Split into halves; rank 3 takes no part (NCCL_SPLIT_NOCOLOR). */
	if (result == ncclSuccess)
		result = ncclCommSplit(parent, rank == 3 ? NCCL_SPLIT_NOCOLOR : rank % 2, rank,
				       &half, NULL);
	if (result == ncclSuccess && rank != 3) {
		if (half == NULL)
			result = ncclInternalError;
		else if (ncclDetCommQuery(half, &job->child_diverted[rank], &reason) != ncclSuccess)
			result = ncclInternalError;
	} else if (result == ncclSuccess && half != NULL) {
		result = ncclInternalError;
	}
	/* Ranks 0..2 shrink rank 3 away; rank 3 (the "failed" one) does not call. */
	static int exclude[1] = {3};
	if (result == ncclSuccess && rank != 3)
		result = ncclCommShrink(parent, exclude, 1, &shrunk, NULL, job->shrink_flags);
	if (result == ncclSuccess && rank != 3) {
		for (int i = 0; i < 4; i++)
			job->value[rank][i] = (float)(rank + 1) * 0.25f;
		result = ncclAllReduce(job->value[rank], job->value[rank], 4, ncclFloat32, ncclSum,
				       shrunk, NULL);
	}
	if (result == ncclSuccess && parent != NULL &&
	    ncclDetCommQuery(parent, &job->parent_diverted[rank], &reason) != ncclSuccess)
		result = ncclInternalError;
	if (shrunk != NULL)
		ncclCommDestroy(shrunk);
	if (half != NULL)
		ncclCommDestroy(half);
	if (parent != NULL)
		ncclCommDestroy(parent);
	job->result[rank] = result;
}

static void test_split_and_shrink(void **state)
{
	(void)state;
	const int flags[] = {NCCL_SHRINK_DEFAULT, NCCL_SHRINK_ABORT};
	for (int f = 0; f < 2; f++) {
		struct family_job job = {.shrink_flags = flags[f]};
		assert_int_equal(pncclGetUniqueId(&job.id), ncclSuccess);
		assert_int_equal(fake_nccl_run_ranks(4, family_rank, &job), 0);
		for (int r = 0; r < 4; r++)
			assert_int_equal(job.result[r], ncclSuccess);
		for (int r = 0; r < 3; r++) {
			assert_int_equal(job.child_diverted[r], 1);
			/* 0.25 + 0.5 + 0.75, the same in any order. */
			assert_true(job.value[r][0] == 1.5f);
			/* A default shrink leaves the parent usable; NCCL_SHRINK_ABORT does not. */
			assert_int_equal(job.parent_diverted[r], flags[f] == NCCL_SHRINK_DEFAULT);
		}
		assert_int_equal(job.parent_diverted[3], 1);
	}
}

/*
 * A revoke NCCL refuses (flags other than 0) stops nothing; an aborting shrink NCCL
 * refuses (bad arguments) cannot be undone, and says so once instead of leaving the
 * communicator's calls to NCCL silently.
 */
struct refused_job {
	ncclUniqueId id;
	ncclResult_t revoke[MAX_RANKS], shrink[MAX_RANKS];
	int after_revoke[MAX_RANKS], after_shrink[MAX_RANKS];
};

static void refused_rank(int rank, void *opaque)
{
	struct refused_job *job = opaque;
	ncclComm_t comm = NULL, child = NULL;
	float value[4] = {1.0f, 2.0f, 3.0f, 4.0f};
	const char *reason;
	job->after_revoke[rank] = job->after_shrink[rank] = -1;
	if (ncclCommInitRank(&comm, 3, job->id, rank) != ncclSuccess)
		return;
	job->revoke[rank] = ncclCommRevoke(comm, 7);
	if (ncclAllReduce(value, value, 4, ncclFloat32, ncclSum, comm, NULL) == ncclSuccess)
		(void)ncclDetCommQuery(comm, &job->after_revoke[rank], &reason);
	job->shrink[rank] = ncclCommShrink(comm, NULL, -1, &child, NULL, NCCL_SHRINK_ABORT);
	(void)ncclDetCommQuery(comm, &job->after_shrink[rank], &reason);
	if (child != NULL)
		ncclCommDestroy(child);
	ncclCommDestroy(comm);
}

static void test_refused_revoke_and_shrink(void **state)
{
	(void)state;
	struct refused_job job = {0};
	assert_int_equal(pncclGetUniqueId(&job.id), ncclSuccess);
	assert_int_equal(fake_nccl_run_ranks(3, refused_rank, &job), 0);
	for (int r = 0; r < 3; r++) {
		assert_int_equal(job.revoke[r], ncclInvalidArgument);
		assert_int_equal(job.after_revoke[r], 1);
		assert_int_not_equal(job.shrink[r], ncclSuccess);
		assert_int_equal(job.after_shrink[r], 0);
	}
	assert_int_equal(ndet_divert_count_log("WARN", "NCCL refused ncclCommShrink"), 3);
	assert_int_equal(ndet_divert_count_log("WARN", "NCCL refused ncclCommRevoke"), 0);
}

/* ------------------------------------------------------------------ teardown paths */

enum teardown { TEARDOWN_FINALIZE, TEARDOWN_DESTROY, TEARDOWN_ABORT, TEARDOWN_REVOKE };

struct teardown_job {
	ncclUniqueId id;
	enum teardown how;
	bool nonblocking; /* config.blocking = 0: every NCCL call may answer ncclInProgress */
	ncclResult_t result[MAX_RANKS];
	ncclResult_t after[MAX_RANKS]; /* an all-reduce after revoke */
	float value[MAX_RANKS][8];
};

static void teardown_rank(int rank, void *opaque)
{
	struct teardown_job *job = opaque;
	ncclComm_t comm = NULL;
	ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
	config.blocking = job->nonblocking ? 0 : 1;
	ncclResult_t result = ncclCommInitRankConfig(&comm, 3, job->id, rank, &config);
	if (result == ncclInProgress)
		result = poll_ready(comm);
	if (result == ncclSuccess)
		result = ncclAllReduce(job->value[rank], job->value[rank], 8, ncclFloat32, ncclSum,
				       comm, NULL);
	switch (job->how) {
	case TEARDOWN_FINALIZE:
		if (result == ncclSuccess)
			result = ncclCommFinalize(comm);
		if (result == ncclInProgress)
			result = poll_ready(comm);
		if (result == ncclSuccess)
			result = ncclCommDestroy(comm);
		break;
	case TEARDOWN_DESTROY:
		if (result == ncclSuccess)
			result = ncclCommDestroy(comm);
		break;
	case TEARDOWN_ABORT:
		if (result == ncclSuccess)
			result = ncclCommAbort(comm);
		break;
	case TEARDOWN_REVOKE:
		if (result == ncclSuccess)
			result = ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT);
		/* NCCL answers for a revoked communicator, on every rank alike. */
		job->after[rank] = ncclAllReduce(job->value[rank], job->value[rank], 8, ncclFloat32,
						 ncclSum, comm, NULL);
		if (comm != NULL)
			ncclCommDestroy(comm);
		break;
	}
	job->result[rank] = result;
}

static struct ndet_fake_backend_counters run_teardown_mode(enum teardown how, bool processes,
							   bool nonblocking)
{
	if (processes)
		assert_int_equal(setenv("FAKE_BACKEND_PROCESS_PER_RANK", "1", 1), 0);
	ndet_fake_backend_reset();
	struct teardown_job job = {.how = how, .nonblocking = nonblocking};
	assert_int_equal(pncclGetUniqueId(&job.id), ncclSuccess);
	assert_int_equal(fake_nccl_run_ranks(3, teardown_rank, &job), 0);
	for (int r = 0; r < 3; r++) {
		assert_int_equal(job.result[r], ncclSuccess);
		if (how == TEARDOWN_REVOKE)
			assert_int_equal(job.after[r], ncclInvalidUsage);
	}
	unsetenv("FAKE_BACKEND_PROCESS_PER_RANK");
	struct ndet_fake_backend_counters counters;
	ndet_fake_backend_counters(&counters);
	assert_int_equal(counters.engines_created, 3);
	assert_int_equal(counters.engines_destroyed, 3);
	return counters;
}

static struct ndet_fake_backend_counters run_teardown(enum teardown how, bool processes)
{
	return run_teardown_mode(how, processes, false);
}

static void test_teardown_paths(void **state)
{
	(void)state;
	/* Finalize between processes: a barrier, then the pools are freed. */
	struct ndet_fake_backend_counters counters = run_teardown(TEARDOWN_FINALIZE, true);
	assert_int_equal(counters.barriers, 3);
	assert_int_equal(counters.pools_freed, 3);
	assert_int_equal(counters.pools_quarantined, 0);
	/*
	 * Ranks of one process: no barrier (one thread may drive them all); the pools
	 * go together once the last rank of the process is released.
	 */
	counters = run_teardown(TEARDOWN_FINALIZE, false);
	assert_int_equal(counters.barriers, 0);
	assert_int_equal(counters.pools_freed, 3);
	assert_int_equal(counters.pools_quarantined, 0);
	/*
	 * Non-blocking communicators: the barrier's all-gather answers ncclInProgress
	 * until NCCL's async thread launched it, and finalize has already marked the
	 * communicator inactive.  The barrier still waits for it: giving up there freed
	 * the exchange buffer under NCCL's pending kernel (an illegal address in
	 * PyTorch with TORCH_NCCL_USE_COMM_NONBLOCKING=1).
	 */
	counters = run_teardown_mode(TEARDOWN_FINALIZE, true, true);
	assert_int_equal(counters.barriers, 3);
	assert_int_equal(counters.pools_freed, 3);
	assert_int_equal(counters.pools_quarantined, 0);
	/*
	 * Destroy without finalize, abort, revoke: no barrier.  Between processes each
	 * rank writes its detach word into its peers' pools once its kernels are idle,
	 * and a pool goes once every peer did (ndet_teardown.h); within one process,
	 * with the last rank.  Either way nothing is kept.
	 */
	const enum teardown others[] = {TEARDOWN_DESTROY, TEARDOWN_ABORT, TEARDOWN_REVOKE};
	for (size_t i = 0; i < 3; i++) {
		for (int processes = 1; processes >= 0; processes--) {
			counters = run_teardown(others[i], processes != 0);
			assert_int_equal(counters.barriers, 0);
			assert_int_equal(counters.pools_freed, 3);
			assert_int_equal(counters.pools_quarantined, 0);
		}
	}
}

/* One thread finalizes every rank inside a group: barriers in lockstep, no hang. */
static void test_finalize_in_group(void **state)
{
	(void)state;
	assert_int_equal(setenv("FAKE_BACKEND_PROCESS_PER_RANK", "1", 1), 0);
	ncclComm_t comms[3] = {NULL};
	assert_int_equal(ncclCommInitAll(comms, 3, NULL), ncclSuccess);
	assert_int_equal(ncclGroupStart(), ncclSuccess);
	for (int r = 0; r < 3; r++)
		assert_int_equal(ncclCommFinalize(comms[r]), ncclSuccess);
	assert_int_equal(ncclGroupEnd(), ncclSuccess);
	struct ndet_fake_backend_counters counters;
	ndet_fake_backend_counters(&counters);
	assert_int_equal(counters.barriers, 3);
	assert_int_equal(counters.pools_freed, 3);
	for (int r = 0; r < 3; r++) {
		expect_diverted(comms[r], 0);
		assert_int_equal(ncclCommDestroy(comms[r]), ncclSuccess);
	}
}

/* ------------------------------------------------------------------ async errors */

/* A communicator of one rank, diverted. */
static ncclComm_t single_rank_comm(void)
{
	ncclUniqueId id;
	ncclComm_t comm = NULL;
	assert_int_equal(pncclGetUniqueId(&id), ncclSuccess);
	assert_int_equal(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
	return comm;
}

static void test_async_error_after_engine_error(void **state)
{
	(void)state;
	ncclComm_t comm = single_rank_comm();
	float value[4] = {1, 2, 3, 4};
	ncclResult_t async = ncclInternalError;
	assert_int_equal(ncclCommGetAsyncError(comm, &async), ncclSuccess);
	assert_int_equal(async, ncclSuccess);

	void *engine = ndet_comm_engine_for_testing(comm);
	assert_non_null(engine);
	ndet_fake_backend_set_error(engine, NDET_KERNEL_ERR_TIMEOUT);
	ndet_divert_trace_on();
	async = ncclSuccess;
	assert_int_equal(ncclCommGetAsyncError(comm, &async), ncclSuccess);
	assert_int_equal(async, ncclRemoteError);
	/* One WARN says which kernel failed and how (the backend's description). */
	assert_int_equal(ndet_divert_count_log("nccl-det's collective failed (fake kernel error 1 "
					       "of rank 0)",
					       "ncclCommAbort"),
			 1);
	async = ncclSuccess;
	assert_int_equal(ncclCommGetAsyncError(comm, &async), ncclSuccess);
	assert_int_equal(async, ncclRemoteError);
	/* Answered from our state alone: NCCL was not asked. */
	assert_int_equal(ndet_divert_traced("ncclCommGetAsyncError"), 0);
	/* Later eligible calls fail fast; others still go to NCCL. */
	assert_int_equal(ncclAllReduce(value, value, 4, ncclFloat32, ncclSum, comm, NULL),
			 ncclRemoteError);
	static int32_t integers[4];
	assert_int_equal(ncclAllReduce(integers, integers, 4, ncclInt32, ncclSum, comm, NULL),
			 ncclSuccess);
	ndet_divert_trace_off();
	int diverted = -1;
	const char *reason = NULL;
	assert_int_equal(ncclDetCommQuery(comm, &diverted, &reason), ncclSuccess);
	assert_int_equal(diverted, 0);
	assert_non_null(strstr(reason, "poisoned"));
	struct ndet_comm_stats stats;
	assert_true(ndet_comm_stats(comm, &stats));
	assert_int_equal(stats.failed_calls, 1);
	assert_int_equal(stats.fallback_calls[NDET_FALLBACK_INTEGER], 1);
	/* Once per communicator, however often the failure is seen. */
	assert_int_equal(ndet_divert_count_log("nccl-det's collective failed", NULL), 1);
	assert_int_equal(ncclCommDestroy(comm), ncclSuccess);
	struct ndet_fake_backend_counters counters;
	ndet_fake_backend_counters(&counters);
	/* The failed kernel had finished (teardown waits to see that): nothing to keep. */
	assert_int_equal(counters.pools_freed, 1);
	assert_int_equal(counters.pools_quarantined, 0);
}

static void fail_at_launch(void *engine)
{
	ndet_fake_backend_set_error(engine, NDET_KERNEL_ERR_TIMEOUT);
}

/*
 * A kernel error that lands after the call found the communicator healthy, as the
 * call launches: the call fails, and the communicator's one WARN still says why.
 */
static void test_engine_error_at_launch_warns(void **state)
{
	(void)state;
	ncclComm_t comm = single_rank_comm();
	float value[4] = {1, 2, 3, 4};
	ndet_fake_backend_set_launch_hook(fail_at_launch);
	assert_int_equal(ncclAllReduce(value, value, 4, ncclFloat32, ncclSum, comm, NULL),
			 ncclRemoteError);
	ndet_fake_backend_set_launch_hook(NULL);
	assert_int_equal(ndet_divert_count_log("nccl-det's collective failed (fake kernel error 1 "
					       "of rank 0)",
					       NULL),
			 1);
	ncclResult_t async = ncclSuccess;
	assert_int_equal(ncclCommGetAsyncError(comm, &async), ncclSuccess);
	assert_int_equal(async, ncclRemoteError);
	assert_int_equal(ndet_divert_count_log("nccl-det's collective failed", NULL), 1);
	assert_int_equal(ncclCommDestroy(comm), ncclSuccess);
}

/* ------------------------------------------------------------------ setup failures */

/* A fault on one rank (or all): every rank falls back, NCCL's result, one WARN each. */
static void test_injected_failures(void **state)
{
	(void)state;
	static struct dataset data;
	const struct {
		const char *fault;
		bool processes;
		ndet_local_status_t local;
		int offending;
		int fault_warnings;
	} cases[] = {
		{"alloc@1", false, NDET_LOCAL_ALLOC_FAILED, 1, 1},
		{"alloc", false, NDET_LOCAL_ALLOC_FAILED, 0, 3},
		{"probe@0", false, NDET_LOCAL_PROBE_FAILED, 1, 0},
		{"ipc_open@2", true, NDET_LOCAL_MAP_FAILED, 2, 2},
	};
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		setup(state);
		assert_int_equal(setenv("NCCL_DET_TEST_FAIL", cases[c].fault, 1), 0);
		if (cases[c].processes)
			assert_int_equal(setenv("FAKE_BACKEND_PROCESS_PER_RANK", "1", 1), 0);
		ndet_divert_settings_changed();
		dataset_fill(&data, NDET_DTYPE_F32, NDET_OP_SUM, 3, 51 + c);
		struct ranks_job job = {.data = &data, .reduce_in_nccl = true};
		ranks_run(&job);
		print_message("fault %s\n", cases[c].fault);
		for (int r = 0; r < 3; r++) {
			assert_int_equal(job.diverted[r], 0);
			/* Forwarded: exactly what NCCL computes. */
			assert_memory_equal(data.output[r], data.nccl[r], COUNT * sizeof(float));
		}
		/* One fallback WARN per rank, naming the rank and the local cause. */
		char needle[128];
		snprintf(needle, sizeof(needle), "local failure on rank %d (%s)",
			 cases[c].offending, ndet_local_status_name(cases[c].local));
		assert_int_equal(ndet_divert_count_log("not deterministic", needle), 3);
		assert_int_equal(ndet_divert_count_log("not deterministic", NULL), 3);
		/* The verdict line of rank 0 names the same cause. */
		snprintf(needle, sizeof(needle),
			 "NOT deterministic: its floating-point reductions "
			 "run in NCCL (local failure, rank %d)",
			 cases[c].offending);
		assert_int_equal(ndet_divert_count_log("NCCL-DET VERSION", NULL), 1);
		assert_int_equal(ndet_divert_count_log("NCCL-DET VERSION", needle), 1);
		/* probe@0: rank 0 writes bad tokens, its peers 1 and 2 notice (lowest: 1). */
		if (cases[c].local == NDET_LOCAL_PROBE_FAILED)
			assert_int_equal(ndet_divert_count_log("probe word of rank 0", NULL), 2);
		else
			assert_int_equal(ndet_divert_count_log("NCCL_DET_TEST_FAIL", NULL),
					 cases[c].fault_warnings);
		/* No setup got so far that peers mapped a pool and then freed it. */
		struct ndet_fake_backend_counters counters;
		ndet_fake_backend_counters(&counters);
		assert_int_equal(counters.engines_created, 0);
	}
}

/* The memory cap goes through the agreement like any local failure. */
static void test_memory_cap(void **state)
{
	(void)state;
	static struct dataset data;
	assert_int_equal(setenv("NCCL_DET_POOL_SIZE", "1M", 1), 0);
	assert_int_equal(setenv("NCCL_DET_MAX_MEMORY", "1M", 1), 0);
	ndet_divert_settings_changed();
	dataset_fill(&data, NDET_DTYPE_F32, NDET_OP_SUM, 2, 61);
	struct ranks_job job = {.data = &data};
	ranks_run(&job);
	for (int r = 0; r < 2; r++)
		assert_int_equal(job.diverted[r], 0);
	assert_int_equal(ndet_divert_count_log("WARN", "exceeds NCCL_DET_MAX_MEMORY"), 2);
	assert_int_equal(ndet_divert_count_log("not deterministic", "pool allocation failed"), 2);
}

/* The identity nccl-det gave `nccl` (0 if it does not know it). */
static uint64_t identity_of(ncclComm_t nccl)
{
	struct ndet_comm *comm = ndet_comm_lookup(nccl);
	if (comm == NULL)
		return 0;
	const uint64_t identity = comm->identity;
	ndet_comm_unref(comm);
	return identity;
}

/* Both ranks of `parents` split (or shrink: excluded rank 1 calls nothing) in one group. */
static void split_both(ncclComm_t parents[2], const int colors[2], ncclComm_t children[2])
{
	assert_int_equal(ncclGroupStart(), ncclSuccess);
	for (int r = 0; r < 2; r++)
		assert_int_equal(ncclCommSplit(parents[r], colors[r], r, &children[r], NULL),
				 ncclSuccess);
	assert_int_equal(ncclGroupEnd(), ncclSuccess);
}

/*
 * Communicator identities (what a failed lockstep exchange takes out: the ranks of
 * its own communicator on the thread): equal for the ranks of one communicator
 * created here, different for two, through ncclCommInitAll, splits (colors, repeats,
 * NCCL_SPLIT_NOCOLOR) and a shrink that one rank does not call.  The ids of
 * ncclCommInitRank: the same bytes again (NCCL_COMM_ID) make another communicator.
 */
static void test_identities(void **state)
{
	(void)state;
	ncclComm_t p[2], a[2], b[2], c[2], d[2], shrunk = NULL;
	assert_int_equal(ncclCommInitAll(p, 2, NULL), ncclSuccess);
	assert_true(identity_of(p[0]) != 0 && identity_of(p[0]) == identity_of(p[1]));
	const int same[2] = {0, 0}, apart[2] = {0, 1};
	split_both(p, same, a);
	assert_true(identity_of(a[0]) != 0 && identity_of(a[0]) == identity_of(a[1]));
	assert_true(identity_of(a[0]) != identity_of(p[0]));
	split_both(p, apart, b);
	assert_true(identity_of(b[0]) != identity_of(b[1]));
	assert_true(identity_of(b[0]) != identity_of(a[0]));
	/* Rank 1 is left out of a shrink: the next joint split still agrees. */
	const int excluded[1] = {1};
	assert_int_equal(
		ncclCommShrink(p[0], (int *)excluded, 1, &shrunk, NULL, NCCL_SHRINK_DEFAULT),
		ncclSuccess);
	assert_true(identity_of(shrunk) != 0 && identity_of(shrunk) != identity_of(p[0]));
	split_both(p, same, c);
	assert_true(identity_of(c[0]) != 0 && identity_of(c[0]) == identity_of(c[1]));
	assert_true(identity_of(c[0]) != identity_of(a[0]));
	/* A rank that gets no child still counts the split. */
	const int one_out[2] = {0, NCCL_SPLIT_NOCOLOR};
	ncclComm_t lone[2] = {NULL, NULL};
	split_both(p, one_out, lone);
	assert_null(lone[1]);
	split_both(p, same, d);
	assert_true(identity_of(d[0]) != 0 && identity_of(d[0]) == identity_of(d[1]));
	/* The same ids twice: the second communicator of each rank is another one. */
	ncclUniqueId id;
	memset(&id, 0x3c, sizeof(id));
	const uint64_t first0 = ndet_comm_identity_of_ids(&id, sizeof(id), 2, 0);
	const uint64_t first1 = ndet_comm_identity_of_ids(&id, sizeof(id), 2, 1);
	const uint64_t second0 = ndet_comm_identity_of_ids(&id, sizeof(id), 2, 0);
	const uint64_t second1 = ndet_comm_identity_of_ids(&id, sizeof(id), 2, 1);
	assert_true(first0 != 0 && first0 == first1 && second0 == second1 && first0 != second0);
	assert_true(ndet_comm_identity_of_ids(&id, sizeof(id), 3, 0) != first0);
	ncclComm_t all[] = {a[0], a[1], b[0],    b[1],   c[0], c[1],
			    d[0], d[1], lone[0], shrunk, p[0], p[1]};
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		assert_int_equal(ncclCommDestroy(all[i]), ncclSuccess);
	assert_int_equal(ndet_comm_registered_for_testing(), 0);
}

/*
 * A child sharing its parent's resources stops with the parent's abort (NCCL aborts it
 * too), but not once the parent was destroyed: a communicator NCCL creates later at
 * the parent's address is another one, and its abort leaves the child alone.
 */
static void test_child_of_a_reused_parent_address(void **state)
{
	(void)state;
	static char handles[3];
	ncclComm_t parent = (ncclComm_t)(void *)&handles[0];
	ncclComm_t children[2] = {(ncclComm_t)(void *)&handles[1], (ncclComm_t)(void *)&handles[2]};
	struct ndet_comm *first = ndet_comm_register(parent, true, NULL, false, 0);
	struct ndet_comm *kept = ndet_comm_register(children[0], true, parent, true, 0);
	assert_non_null(first);
	assert_non_null(kept);
	ndet_comm_destroy(parent);
	ndet_comm_unref(first);
	/* Another communicator at the same address, with a child of its own. */
	struct ndet_comm *second = ndet_comm_register(parent, true, NULL, false, 0);
	struct ndet_comm *own = ndet_comm_register(children[1], true, parent, true, 0);
	assert_non_null(second);
	assert_non_null(own);
	ndet_comm_abort_end(ndet_comm_abort_begin(parent));
	assert_true(ndet_comm_is_stopped(own));
	assert_false(ndet_comm_is_stopped(kept));
	ndet_comm_unref(second);
	ndet_comm_unref(own);
	ndet_comm_unref(kept);
	for (int c = 0; c < 2; c++)
		ndet_comm_destroy(children[c]);
	assert_int_equal(ndet_comm_registered_for_testing(), 0);
}

/* NCCL_DET_STRICT=1: floating-point fallbacks fail, integer ones do not. */
static void test_strict(void **state)
{
	(void)state;
	assert_int_equal(setenv("NCCL_DET_STRICT", "1", 1), 0);
	assert_int_equal(setenv("NCCL_DET_TEST_FAIL", "alloc@2", 1), 0);
	ndet_divert_settings_changed();
	ncclComm_t comms[3] = {NULL};
	static float values[3][4];
	static int32_t integers[3][4];
	assert_int_equal(ncclCommInitAll(comms, 3, NULL), ncclSuccess);
	assert_int_equal(ncclGroupStart(), ncclSuccess);
	for (int r = 0; r < 3; r++)
		assert_int_equal(ncclAllReduce(values[r], values[r], 4, ncclFloat32, ncclSum,
					       comms[r], NULL),
				 ncclInvalidUsage);
	for (int r = 0; r < 3; r++)
		assert_int_equal(ncclAllReduce(integers[r], integers[r], 4, ncclInt32, ncclSum,
					       comms[r], NULL),
				 ncclSuccess);
	/* As NCCL's group end reports an argument error of a call inside the group. */
	assert_int_equal(ncclGroupEnd(), ncclInvalidUsage);
	assert_int_equal(ndet_divert_count_log("NCCL_DET_STRICT=1: ncclAllReduce fails", "rank 2"),
			 3);
	/* The next group starts clean. */
	assert_int_equal(ncclGroupStart(), ncclSuccess);
	for (int r = 0; r < 3; r++)
		assert_int_equal(ncclAllReduce(integers[r], integers[r], 4, ncclInt32, ncclSum,
					       comms[r], NULL),
				 ncclSuccess);
	assert_int_equal(ncclGroupEnd(), ncclSuccess);
	/* A simulated group reports the refusal too. */
	ncclSimInfo_t simulation = NCCL_SIM_INFO_INITIALIZER;
	assert_int_equal(ncclGroupStart(), ncclSuccess);
	assert_int_equal(
		ncclAllReduce(values[0], values[0], 4, ncclFloat32, ncclSum, comms[0], NULL),
		ncclInvalidUsage);
	assert_int_equal(ncclGroupSimulateEnd(&simulation), ncclInvalidUsage);
	for (int r = 0; r < 3; r++)
		assert_int_equal(ncclCommDestroy(comms[r]), ncclSuccess);

	/* On a diverted communicator a PreMulSum op is diverted: nothing to refuse. */
	unsetenv("NCCL_DET_TEST_FAIL");
	ndet_divert_settings_changed();
	ncclUniqueId id;
	ncclComm_t comm = NULL;
	assert_int_equal(pncclGetUniqueId(&id), ncclSuccess);
	assert_int_equal(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
	ncclRedOp_t premul;
	float scalar = 2.0f;
	static float scaled[4] = {1.5f, -2.0f, 3.0f, 0.25f};
	assert_int_equal(ncclRedOpCreatePreMulSum(&premul, &scalar, ncclFloat32,
						  ncclScalarHostImmediate, comm),
			 ncclSuccess);
	assert_int_equal(ncclAllReduce(scaled, scaled, 4, ncclFloat32, premul, comm, NULL),
			 ncclSuccess);
	assert_true(scaled[0] == 3.0f && scaled[1] == -4.0f && scaled[3] == 0.5f);
	assert_int_equal(ncclRedOpDestroy(premul, comm), ncclSuccess);
	assert_int_equal(ncclCommDestroy(comm), ncclSuccess);
}

/*
 * The direct entry points run in the engine or fail.  On a diverted communicator they
 * give the tree's bits, as the interposed calls do; where a communicator falls back,
 * their floating-point calls fail with ncclInvalidUsage on every rank without reaching
 * NCCL (one WARN each) while ncclAllReduce still goes to NCCL; integer calls go to
 * NCCL, and NCCL answers bad arguments.  With nccl-det disabled, or on a handle it does
 * not know, floating-point calls fail too.
 */
static void test_direct_entry_points(void **state)
{
	(void)state;
	enum { RECV = COUNT / 3, ROOT = 1 };
	static struct dataset data;
	static unsigned char scattered[3][COUNT * 8], reduced[3][COUNT * 8];
	dataset_fill(&data, NDET_DTYPE_BF16, NDET_OP_SUM, 3, 31);
	ncclComm_t comms[3] = {NULL};
	assert_int_equal(ncclCommInitAll(comms, 3, NULL), ncclSuccess);
	assert_int_equal(ncclGroupStart(), ncclSuccess);
	for (int r = 0; r < 3; r++) {
		assert_int_equal(ncclDetAllReduce(data.input[r], data.output[r], COUNT,
						  ncclBfloat16, ncclSum, comms[r], NULL),
				 ncclSuccess);
		assert_int_equal(ncclDetReduceScatter(data.input[r], scattered[r], RECV,
						      ncclBfloat16, ncclSum, comms[r], NULL),
				 ncclSuccess);
		assert_int_equal(ncclDetReduce(data.input[r], reduced[r], COUNT, ncclBfloat16,
					       ncclSum, ROOT, comms[r], NULL),
				 ncclSuccess);
	}
	assert_int_equal(ncclGroupEnd(), ncclSuccess);
	dataset_check_tree(&data);
	for (int r = 0; r < 3; r++) {
		size_t first = 0;
		assert_int_equal(ndet_test_count_differences(NDET_DTYPE_BF16, scattered[r],
							     data.tree + (size_t)r * RECV * 2, RECV,
							     &first),
				 0);
		struct ndet_comm_stats stats;
		assert_true(ndet_comm_stats(comms[r], &stats));
		assert_int_equal(stats.diverted_by_coll[NDET_COLL_ALLREDUCE], 1);
		assert_int_equal(stats.diverted_by_coll[NDET_COLL_REDUCE_SCATTER], 1);
		assert_int_equal(stats.diverted_by_coll[NDET_COLL_REDUCE], 1);
	}
	size_t first = 0;
	assert_int_equal(ndet_test_count_differences(NDET_DTYPE_BF16, reduced[ROOT], data.tree,
						     COUNT, &first),
			 0);
	/* Arguments NCCL refuses: its code, as the interposed call gets it. */
	const ncclResult_t bad = pncclAllReduce(data.input[0], data.output[0], COUNT,
						(ncclDataType_t)99, ncclSum, comms[0], NULL);
	assert_int_not_equal(bad, ncclSuccess);
	assert_int_equal(ncclDetAllReduce(data.input[0], data.output[0], COUNT, (ncclDataType_t)99,
					  ncclSum, comms[0], NULL),
			 bad);
	for (int r = 0; r < 3; r++)
		assert_int_equal(ncclCommDestroy(comms[r]), ncclSuccess);

	/* A communicator that falls back (an allocation failed on rank 2). */
	assert_int_equal(setenv("NCCL_DET_TEST_FAIL", "alloc@2", 1), 0);
	ndet_divert_settings_changed();
	static float values[3][4];
	static int32_t integers[3][4];
	for (int r = 0; r < 3; r++)
		for (int i = 0; i < 4; i++) {
			values[r][i] = 0.1f * (float)(r + 1) + (float)i;
			integers[r][i] = 10 * r + i;
		}
	assert_int_equal(ncclCommInitAll(comms, 3, NULL), ncclSuccess);
	ndet_divert_trace_on();
	for (int r = 0; r < 3; r++) {
		expect_diverted(comms[r], 0);
		assert_int_equal(ncclDetAllReduce(values[r], values[r], 4, ncclFloat32, ncclSum,
						  comms[r], NULL),
				 ncclInvalidUsage);
		assert_int_equal(ncclDetReduceScatter(values[r], values[r], 1, ncclFloat32, ncclSum,
						      comms[r], NULL),
				 ncclInvalidUsage);
		assert_int_equal(ncclDetReduce(values[r], values[r], 4, ncclFloat32, ncclMax, 0,
					       comms[r], NULL),
				 ncclInvalidUsage);
	}
	assert_int_equal(ndet_divert_traced("ncclAllReduce"), 0);
	assert_int_equal(ndet_divert_traced("ncclReduceScatter"), 0);
	assert_int_equal(ndet_divert_traced("ncclReduce"), 0);
	assert_int_equal(ndet_divert_count_log("ncclDetAllReduce fails with ncclInvalidUsage",
					       "local failure on rank 2"),
			 3);
	assert_int_equal(ndet_divert_count_log("NCCL_DET_STRICT=1", NULL), 0);
	/* In a group, the refusal fails the group's end as well. */
	assert_int_equal(ncclGroupStart(), ncclSuccess);
	assert_int_equal(
		ncclDetAllReduce(values[0], values[0], 4, ncclFloat32, ncclSum, comms[0], NULL),
		ncclInvalidUsage);
	assert_int_equal(ncclGroupEnd(), ncclInvalidUsage);
	/* Integers through the direct call, floats through the interposed one: NCCL. */
	assert_int_equal(ncclGroupStart(), ncclSuccess);
	for (int r = 0; r < 3; r++) {
		assert_int_equal(ncclDetAllReduce(integers[r], integers[r], 4, ncclInt32, ncclSum,
						  comms[r], NULL),
				 ncclSuccess);
		assert_int_equal(ncclAllReduce(values[r], values[r], 4, ncclFloat32, ncclSum,
					       comms[r], NULL),
				 ncclSuccess);
	}
	assert_int_equal(ncclGroupEnd(), ncclSuccess);
	assert_int_equal(ndet_divert_traced("ncclAllReduce"), 6);
	for (int r = 0; r < 3; r++) {
		for (int i = 0; i < 4; i++)
			assert_int_equal(integers[r][i], 30 + 3 * i);
		struct ndet_comm_stats stats;
		assert_true(ndet_comm_stats(comms[r], &stats));
		assert_int_equal(stats.refused_calls, r == 0 ? 4 : 3);
		assert_int_equal(stats.fallback_calls[NDET_FALLBACK_INTEGER], 1);
		assert_int_equal(stats.fallback_calls[NDET_FALLBACK_COMMUNICATOR], 1);
		assert_int_equal(ncclCommDestroy(comms[r]), ncclSuccess);
	}
	ndet_divert_trace_off();

	/* A handle nccl-det does not know. */
	unsetenv("NCCL_DET_TEST_FAIL");
	ndet_divert_settings_changed();
	static char not_a_comm[64];
	assert_int_equal(ncclDetAllReduce(values[0], values[0], 4, ncclFloat32, ncclSum,
					  (ncclComm_t)not_a_comm, NULL),
			 ncclInvalidUsage);
	assert_int_equal(ndet_divert_count_log("ncclDetAllReduce fails", "does not know this "
									 "communicator"),
			 1);

	/* nccl-det disabled: the library passes everything through, but not these. */
	assert_int_equal(setenv("NCCL_DET_ENABLE", "0", 1), 0);
	ndet_divert_settings_changed();
	assert_int_equal(ncclCommInitAll(comms, 3, NULL), ncclSuccess);
	for (int r = 0; r < 3; r++)
		assert_int_equal(ncclDetReduce(values[r], values[r], 4, ncclFloat64, ncclSum, 0,
					       comms[r], NULL),
				 ncclInvalidUsage);
	assert_int_equal(ncclGroupStart(), ncclSuccess);
	for (int r = 0; r < 3; r++)
		assert_int_equal(ncclDetAllReduce(integers[r], integers[r], 4, ncclInt32, ncclSum,
						  comms[r], NULL),
				 ncclSuccess);
	assert_int_equal(ncclGroupEnd(), ncclSuccess);
	assert_int_equal(integers[2][1], 3 * 33);
	assert_int_equal(
		ndet_divert_count_log("ncclDetReduce fails", "disabled (NCCL_DET_ENABLE=0)"), 1);
	/* An op NCCL refuses gets NCCL's code there too. */
	const ncclResult_t bad_op = pncclAllReduce(values[0], values[0], 4, ncclFloat32,
						   (ncclRedOp_t)-1, comms[0], NULL);
	assert_int_not_equal(bad_op, ncclSuccess);
	assert_int_equal(ncclDetAllReduce(values[0], values[0], 4, ncclFloat32, (ncclRedOp_t)-1,
					  comms[0], NULL),
			 bad_op);
	for (int r = 0; r < 3; r++)
		assert_int_equal(ncclCommDestroy(comms[r]), ncclSuccess);
	unsetenv("NCCL_DET_ENABLE");
	ndet_divert_settings_changed();
}

/*
 * fp8 where not every GPU runs our fp8 kernels: one rank without them sends fp8 to
 * NCCL on every rank, one WARN each, and strict mode refuses it; one rank below sm_90
 * sends it to NCCL silently (NCCL's answer: below sm_90 NCCL refuses fp8 itself,
 * test_bad_input.sh).  f32 stays diverted on those communicators.
 */
static void test_fp8_without_kernels(void **state)
{
	(void)state;
	for (int mode = 0; mode < 3; mode++) {
		ndet_fake_backend_reset();
		const bool strict = mode == 2;
		if (strict)
			assert_int_equal(setenv("NCCL_DET_STRICT", "1", 1), 0);
		else
			unsetenv("NCCL_DET_STRICT");
		ndet_divert_settings_changed();
		/* mode 0: rank 1 below sm_90; 1 and 2: rank 1 without our fp8 code */
		ndet_fake_backend_set_gpu(1, mode != 0, false);
		ncclComm_t comms[3] = {NULL};
		static uint8_t fp8[3][4];
		static float values[3][4];
		assert_int_equal(ncclCommInitAll(comms, 3, NULL), ncclSuccess);
		for (int r = 0; r < 3; r++)
			for (int i = 0; i < 4; i++) {
				fp8[r][i] = 0x38; /* e4m3 1.0 */
				values[r][i] = 1.0f;
			}
		assert_int_equal(ncclGroupStart(), ncclSuccess);
		for (int r = 0; r < 3; r++) {
			assert_int_equal(ncclAllReduce(values[r], values[r], 4, ncclFloat32,
						       ncclSum, comms[r], NULL),
					 ncclSuccess);
			assert_int_equal(ncclAllReduce(fp8[r], fp8[r], 4, (ncclDataType_t)10,
						       ncclSum, comms[r], NULL),
					 strict ? ncclInvalidUsage : ncclSuccess);
		}
		/* The refusal fails the group's end too; the f32 calls still run. */
		assert_int_equal(ncclGroupEnd(), strict ? ncclInvalidUsage : ncclSuccess);
		for (int r = 0; r < 3; r++) {
			assert_true(values[r][0] == 3.0f);
			if (!strict)
				assert_int_equal(fp8[r][3], 0x44); /* 3.0, from NCCL */
			struct ndet_comm_stats stats;
			assert_true(ndet_comm_stats(comms[r], &stats));
			assert_int_equal(stats.diverted_calls, 1);
			const ndet_fallback_reason_t reason =
				mode == 0 ? NDET_FALLBACK_INVALID : NDET_FALLBACK_DATATYPE;
			assert_int_equal(stats.fallback_calls[reason], strict ? 0 : 1);
			assert_int_equal(stats.refused_calls, strict ? 1 : 0);
			assert_int_equal(ncclCommDestroy(comms[r]), ncclSuccess);
		}
		/* The log accumulates over the modes: none below sm_90, one per rank then. */
		if (mode < 2)
			assert_int_equal(ndet_divert_count_log("WARN", "fp8 kernels"),
					 mode == 1 ? 3 : 0);
	}
	unsetenv("NCCL_DET_STRICT");
	ndet_divert_settings_changed();
}

/* ------------------------------------------------------------------ forwarded calls */

static void test_forwarded_and_no_op_calls(void **state)
{
	(void)state;
	ncclUniqueId id;
	ncclComm_t comm = NULL;
	static float values[4] = {1, 2, 3, 4};
	static int32_t integers[4] = {1, 2, 3, 4};
	assert_int_equal(pncclGetUniqueId(&id), ncclSuccess);
	assert_int_equal(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
	ndet_divert_trace_on();
	/* What NCCL rejects, NCCL answers: its own code, its own trace line. */
	assert_int_equal(ncclAllReduce(values, values, 4, (ncclDataType_t)42, ncclSum, comm, NULL),
			 ncclInvalidArgument);
	assert_int_equal(ncclAllReduce(values, values, 4, ncclFloat32, (ncclRedOp_t)-1, comm, NULL),
			 ncclInvalidArgument);
	assert_int_equal(ncclAllReduce(values, values, 4, ncclFloat32, ncclSum, NULL, NULL),
			 ncclInvalidArgument);
	assert_int_equal(ndet_divert_traced("ncclAllReduce"), 3);
	/* count 0: a consistent no-op, nothing reaches NCCL. */
	assert_int_equal(ncclAllReduce(NULL, NULL, 0, ncclFloat32, ncclSum, comm, NULL),
			 ncclSuccess);
	assert_int_equal(ndet_divert_traced("ncclAllReduce"), 3);
	assert_int_equal(ndet_divert_traced("ncclAllGather"), 0);
	/* Integers: NCCL, silently. */
	assert_int_equal(ncclAllReduce(integers, integers, 4, ncclInt32, ncclSum, comm, NULL),
			 ncclSuccess);
	assert_int_equal(ndet_divert_traced("ncclAllReduce"), 4);
	/* PreMulSum: diverted (x 0.5 three times, exact), no WARN. */
	ncclRedOp_t premul;
	float scalar = 0.5f;
	assert_int_equal(ncclRedOpCreatePreMulSum(&premul, &scalar, ncclFloat32,
						  ncclScalarHostImmediate, comm),
			 ncclSuccess);
	for (int i = 0; i < 3; i++)
		assert_int_equal(ncclAllReduce(values, values, 4, ncclFloat32, premul, comm, NULL),
				 ncclSuccess);
	assert_true(values[0] == 0.125f && values[3] == 0.5f);
	assert_int_equal(ndet_divert_traced("ncclAllReduce"), 4);
	/* Destroyed: NCCL no longer knows the op, and it is NCCL's error to return. */
	assert_int_equal(ncclRedOpDestroy(premul, comm), ncclSuccess);
	assert_int_equal(ncclAllReduce(values, values, 4, ncclFloat32, premul, comm, NULL),
			 ncclInvalidArgument);
	assert_int_equal(ndet_divert_traced("ncclAllReduce"), 5);
	assert_int_equal(ncclRedOpDestroy(premul, comm), ncclInvalidArgument);
	ndet_divert_trace_off();
	assert_int_equal(ndet_divert_count_log("WARN", NULL), 0);
	struct ndet_comm_stats stats;
	assert_true(ndet_comm_stats(comm, &stats));
	assert_int_equal(stats.diverted_calls, 4);
	assert_int_equal(stats.diverted_premul, 3);
	assert_int_equal(stats.diverted_by_coll[NDET_COLL_ALLREDUCE], 4);
	assert_int_equal(stats.diverted_bytes, 3 * 4 * sizeof(float));
	assert_int_equal(stats.fallback_calls[NDET_FALLBACK_INVALID], 3);
	assert_int_equal(stats.fallback_calls[NDET_FALLBACK_INTEGER], 1);
	assert_int_equal(stats.fallback_calls[NDET_FALLBACK_OP], 0);
	assert_int_equal(ncclCommDestroy(comm), ncclSuccess);
}

/* NCCL_DET_STATS=1: one report per communicator at destroy. */
static void test_stats_report(void **state)
{
	(void)state;
	assert_int_equal(setenv("NCCL_DET_STATS", "1", 1), 0);
	ndet_divert_settings_changed();
	static struct dataset data;
	dataset_fill(&data, NDET_DTYPE_F32, NDET_OP_SUM, 2, 71);
	struct ranks_job job = {.data = &data};
	ranks_run(&job);
	assert_int_equal(ndet_divert_count_log("NCCL-DET STATS", "diverted 1 calls, 388 bytes"), 2);
}

/* ncclDetCommQuery's arguments and answers. */
static void test_query(void **state)
{
	(void)state;
	int diverted = 7;
	const char *reason = NULL;
	assert_int_equal(ncclDetCommQuery(NULL, &diverted, &reason), ncclInvalidArgument);
	assert_int_equal(diverted, 7);
	ncclUniqueId id;
	ncclComm_t comm = NULL;
	assert_int_equal(pncclGetUniqueId(&id), ncclSuccess);
	/* Made behind nccl-det's back: unknown to it. */
	assert_int_equal(pncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
	assert_int_equal(ncclDetCommQuery(comm, NULL, &reason), ncclInvalidArgument);
	assert_int_equal(ncclDetCommQuery(comm, &diverted, NULL), ncclSuccess);
	assert_int_equal(diverted, 0);
	assert_int_equal(ncclDetCommQuery(comm, &diverted, &reason), ncclSuccess);
	assert_non_null(strstr(reason, "not managed"));
	assert_int_equal(pncclCommDestroy(comm), ncclSuccess);
	int version = 0;
	assert_int_equal(ncclDetGetVersion(&version), ncclSuccess);
	assert_int_equal(version, NCCL_DET_VERSION_CODE);
	assert_int_equal(ncclDetGetVersion(NULL), ncclInvalidArgument);
}

/* After fork() the child passes everything through. */
static void test_fork_child_passes_through(void **state)
{
	(void)state;
	ncclUniqueId id;
	ncclComm_t comm = NULL;
	static float values[4] = {1, 2, 3, 4};
	assert_int_equal(pncclGetUniqueId(&id), ncclSuccess);
	assert_int_equal(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
	ndet_divert_trace_on();
	pid_t child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		ncclResult_t result =
			ncclAllReduce(values, values, 4, ncclFloat32, ncclSum, comm, NULL);
		_exit(result == ncclSuccess ? 0 : 1);
	}
	int status = 0;
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* The child's call reached NCCL; the parent's still diverts. */
	assert_int_equal(ndet_divert_traced("ncclAllReduce"), 1);
	assert_int_equal(ncclAllReduce(values, values, 4, ncclFloat32, ncclSum, comm, NULL),
			 ncclSuccess);
	assert_int_equal(ndet_divert_traced("ncclAllReduce"), 1);
	ndet_divert_trace_off();
	assert_int_equal(ncclCommDestroy(comm), ncclSuccess);
}

/* ------------------------------------------------------------------ watchdog races */

struct race {
	ncclUniqueId id;
	ncclComm_t comms[2];
	int stop;      /* atomics */
	int published; /* ranks whose comm is set */
	bool abort;    /* the watchdog aborts rank 0's communicator */
	int calls[2];
	ncclResult_t last[2];
};

/* PyTorch's watchdog: polls ncclCommGetAsyncError, may abort. */
static void *race_watchdog(void *opaque)
{
	struct race *race = opaque;
	while (__atomic_load_n(&race->published, __ATOMIC_ACQUIRE) < 2)
		sched_yield();
	while (!__atomic_load_n(&race->stop, __ATOMIC_ACQUIRE)) {
		for (int r = 0; r < 2; r++) {
			ncclResult_t async;
			(void)ncclCommGetAsyncError(race->comms[r], &async);
		}
		/* Abort while rank 0 is busy in its all-reduces. */
		if (race->abort && __atomic_load_n(&race->calls[0], __ATOMIC_ACQUIRE) >= 20) {
			(void)ncclCommAbort(race->comms[0]);
			return NULL;
		}
	}
	return NULL;
}

static void race_rank(int rank, void *opaque)
{
	struct race *race = opaque;
	ncclComm_t comm = NULL;
	float values[16];
	if (ncclCommInitRank(&comm, 2, race->id, rank) != ncclSuccess)
		return;
	race->comms[rank] = comm;
	__atomic_add_fetch(&race->published, 1, __ATOMIC_ACQ_REL);
	/* Without an abort, 300 calls; with one, until the abort ends them. */
	const int calls = race->abort ? 1000000 : 300;
	ncclResult_t result = ncclSuccess;
	for (int i = 0; i < calls && result == ncclSuccess; i++) {
		for (int k = 0; k < 16; k++)
			values[k] = (float)(rank + i + k);
		result = ncclAllReduce(values, values, 16, ncclFloat32, ncclSum, comm, NULL);
		__atomic_add_fetch(&race->calls[rank], 1, __ATOMIC_ACQ_REL);
	}
	race->last[rank] = result;
	/* Destroy while the watchdog may still poll (the aborted rank's comm is gone). */
	if (!(race->abort && rank == 0))
		(void)ncclCommDestroy(comm);
}

static void test_watchdog_races(void **state)
{
	(void)state;
	for (int abort = 0; abort < 2; abort++) {
		struct race race = {.abort = abort != 0};
		pthread_t watchdog;
		/*
		 * An abort between two calls of rank 0 leaves no kernel of rank 0 to tell
		 * rank 1: rank 1's call waits until NCCL_DET_TIMEOUT, as it would in NCCL.
		 */
		if (abort) {
			assert_int_equal(setenv("NCCL_DET_TIMEOUT", "1", 1), 0);
			ndet_divert_settings_changed();
		}
		assert_int_equal(pncclGetUniqueId(&race.id), ncclSuccess);
		assert_int_equal(pthread_create(&watchdog, NULL, race_watchdog, &race), 0);
		assert_int_equal(fake_nccl_run_ranks(2, race_rank, &race), 0);
		__atomic_store_n(&race.stop, 1, __ATOMIC_RELEASE);
		assert_int_equal(pthread_join(watchdog, NULL), 0);
		if (!abort) {
			assert_int_equal(race.calls[0], 300);
			assert_int_equal(race.last[0], ncclSuccess);
			assert_int_equal(race.last[1], ncclSuccess);
		} else {
			/* Both ranks stopped with an error instead of hanging. */
			assert_int_not_equal(race.last[0], ncclSuccess);
			assert_int_not_equal(race.last[1], ncclSuccess);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_thread_per_rank_tree_results, setup),
		cmocka_unit_test_setup(test_one_thread_several_comms, setup),
		cmocka_unit_test_setup(test_init_all, setup),
		cmocka_unit_test_setup(test_group_order_nesting_simulate, setup),
		cmocka_unit_test_setup(test_nonblocking, setup),
		cmocka_unit_test_setup(test_hosts, setup),
		cmocka_unit_test_setup(test_split_and_shrink, setup),
		cmocka_unit_test_setup(test_refused_revoke_and_shrink, setup),
		cmocka_unit_test_setup(test_teardown_paths, setup),
		cmocka_unit_test_setup(test_finalize_in_group, setup),
		cmocka_unit_test_setup(test_async_error_after_engine_error, setup),
		cmocka_unit_test_setup(test_engine_error_at_launch_warns, setup),
		cmocka_unit_test_setup(test_injected_failures, setup),
		cmocka_unit_test_setup(test_memory_cap, setup),
		cmocka_unit_test_setup(test_child_of_a_reused_parent_address, setup),
		cmocka_unit_test_setup(test_identities, setup),
		cmocka_unit_test_setup(test_strict, setup),
		cmocka_unit_test_setup(test_direct_entry_points, setup),
		cmocka_unit_test_setup(test_fp8_without_kernels, setup),
		cmocka_unit_test_setup(test_forwarded_and_no_op_calls, setup),
		cmocka_unit_test_setup(test_stats_report, setup),
		cmocka_unit_test_setup(test_query, setup),
		cmocka_unit_test_setup(test_fork_child_passes_through, setup),
		cmocka_unit_test_setup(test_watchdog_races, setup),
	};
	return cmocka_run_group_tests(tests, ndet_divert_group_setup, ndet_divert_group_teardown);
}
