/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The fake NCCL behaves as fake_nccl.h promises: export shape, multi-rank
 * rendezvous (threads, one thread driving several ranks in a group), collectives on
 * host memory, non-blocking communicators, split/shrink, abort/revoke, fault knobs,
 * trace format.  Other tests build on it, so it is tested on its own first.
 */
#include "config.h"

#include <dlfcn.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "test/fake_nccl/fake_nccl.h"

#define MAX_RANKS 8

static const char *const all_functions[] = {
	"ncclMemAlloc",
	"ncclMemFree",
	"ncclGetVersion",
	"ncclGetUniqueId",
	"ncclCommInitRankConfig",
	"ncclCommInitRank",
	"ncclCommInitAll",
	"ncclCommFinalize",
	"ncclCommDestroy",
	"ncclCommAbort",
	"ncclCommRevoke",
	"ncclCommSplit",
	"ncclCommShrink",
	"ncclCommInitRankScalable",
	"ncclGetErrorString",
	"ncclGetLastError",
	"ncclResetDebugInit",
	"ncclCommGetAsyncError",
	"ncclCommCount",
	"ncclCommCuDevice",
	"ncclCommUserRank",
	"ncclCommRegister",
	"ncclCommDeregister",
	"ncclCommWindowRegister",
	"ncclCommWindowDeregister",
	"ncclRedOpCreatePreMulSum",
	"ncclRedOpDestroy",
	"ncclReduce",
	"ncclBcast",
	"ncclBroadcast",
	"ncclAllReduce",
	"ncclReduceScatter",
	"ncclAllGather",
	"ncclAlltoAll",
	"ncclGather",
	"ncclScatter",
	"ncclSend",
	"ncclRecv",
	"ncclGroupStart",
	"ncclGroupEnd",
	"ncclGroupSimulateEnd",
};

static char trace_path[4096];

static int setup_trace(void **state)
{
	(void)state;
	if (fake_nccl_trace_temp(trace_path, sizeof(trace_path)) != 0)
		return -1;
	return setenv("FAKE_NCCL_TRACE", trace_path, 1);
}

static int teardown_trace(void **state)
{
	(void)state;
	unsetenv("FAKE_NCCL_TRACE");
	unsetenv("FAKE_NCCL_FAIL");
	unsetenv("FAKE_NCCL_FAIL_RANK");
	unsetenv("FAKE_NCCL_TIMEOUT_MS");
	unsetenv("NCCL_COMM_BLOCKING");
	return unlink(trace_path);
}

/* Exported as NCCL does: both names, same code, and nothing else of ours. */
static void test_export_shape(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(all_functions) / sizeof(all_functions[0]); i++) {
		char profiling[128];
		snprintf(profiling, sizeof(profiling), "p%s", all_functions[i]);
		void *public = dlsym(RTLD_DEFAULT, all_functions[i]);
		void *alias = dlsym(RTLD_DEFAULT, profiling);
		assert_non_null(public);
		assert_ptr_equal(public, alias);
	}
	assert_null(dlsym(RTLD_DEFAULT, "fake_comm_acquire"));
}

static void test_version_and_errors(void **state)
{
	(void)state;
	int version = 0;
	assert_int_equal(ncclGetVersion(&version), ncclSuccess);
	assert_int_equal(version, FAKE_NCCL_DEFAULT_VERSION);
	assert_int_equal(setenv("FAKE_NCCL_VERSION", "22103", 1), 0);
	assert_int_equal(ncclGetVersion(&version), ncclSuccess);
	assert_int_equal(version, 22103);
	unsetenv("FAKE_NCCL_VERSION");
	assert_string_equal(ncclGetErrorString(ncclSuccess), "no error");
	assert_int_equal(ncclGetVersion(NULL), ncclInvalidArgument);
}

static void test_single_rank(void **state)
{
	(void)state;
	ncclUniqueId id;
	ncclComm_t comm;
	assert_int_equal(ncclGetUniqueId(&id), ncclSuccess);
	assert_int_equal(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
	int value = -1;
	assert_int_equal(ncclCommCount(comm, &value), ncclSuccess);
	assert_int_equal(value, 1);
	assert_int_equal(ncclCommUserRank(comm, &value), ncclSuccess);
	assert_int_equal(value, 0);
	assert_int_equal(ncclCommCuDevice(comm, &value), ncclSuccess);
	assert_int_equal(value, 0);
	float data[4] = {1, 2, 3, 4};
	assert_int_equal(ncclAllReduce(data, data, 4, ncclFloat32, ncclSum, comm, NULL),
			 ncclSuccess);
	assert_true(data[3] == 4.0f);
	ncclResult_t async = ncclInternalError;
	assert_int_equal(ncclCommGetAsyncError(comm, &async), ncclSuccess);
	assert_int_equal(async, ncclSuccess);
	assert_int_equal(ncclCommDestroy(comm), ncclSuccess);
	/* A destroyed communicator is not accepted again. */
	assert_int_equal(ncclCommCount(comm, &value), ncclInvalidArgument);
}

struct clique_test {
	ncclUniqueId id;
	int nranks;
	int failures;
};

static void note_failure(struct clique_test *test, const char *what, int rank, long got,
			 long expected)
{
	fprintf(stderr, "rank %d: %s: got %ld, expected %ld\n", rank, what, got, expected);
	__atomic_add_fetch(&test->failures, 1, __ATOMIC_RELAXED);
}

#define EXPECT(test, what, rank, got, expected)                                                    \
	do {                                                                                       \
		long got_ = (long)(got), expected_ = (long)(expected);                             \
		if (got_ != expected_)                                                             \
			note_failure((test), (what), (rank), got_, expected_);                     \
	} while (0)

/* Every collective on 3 ranks, one thread per rank. */
static void collectives_rank(int rank, void *arg)
{
	struct clique_test *test = arg;
	const int n = test->nranks;
	ncclComm_t comm;
	EXPECT(test, "init", rank, ncclCommInitRank(&comm, n, test->id, rank), ncclSuccess);

	float f[3] = {(float)rank + 1, 0.5f * (float)rank, -1.0f * (float)rank};
	float fout[3];
	EXPECT(test, "allreduce f32", rank,
	       ncclAllReduce(f, fout, 3, ncclFloat32, ncclSum, comm, NULL), ncclSuccess);
	EXPECT(test, "f32 sum", rank, fout[0] == 6.0f && fout[1] == 1.5f && fout[2] == -3.0f, 1);

	double d[2] = {(double)rank + 2, (double)rank};
	EXPECT(test, "allreduce f64 prod", rank,
	       ncclAllReduce(d, d, 2, ncclFloat64, ncclProd, comm, NULL), ncclSuccess);
	EXPECT(test, "f64 prod", rank, d[0] == 24.0 && d[1] == 0.0, 1);

	int32_t i32[2] = {rank * 10 - 5, INT32_MAX};
	EXPECT(test, "allreduce i32 min", rank,
	       ncclAllReduce(i32, i32, 2, ncclInt32, ncclMin, comm, NULL), ncclSuccess);
	EXPECT(test, "i32 min", rank, i32[0], -5);
	int32_t wrap = INT32_MAX;
	EXPECT(test, "allreduce i32 wrap", rank,
	       ncclAllReduce(&wrap, &wrap, 1, ncclInt32, ncclSum, comm, NULL), ncclSuccess);
	EXPECT(test, "i32 wraps", rank, wrap, (int32_t)(3u * (uint32_t)INT32_MAX));

	uint64_t u64 = (uint64_t)rank << 40;
	EXPECT(test, "allreduce u64 max", rank,
	       ncclAllReduce(&u64, &u64, 1, ncclUint64, ncclMax, comm, NULL), ncclSuccess);
	EXPECT(test, "u64 max", rank, u64 == (uint64_t)2 << 40, 1);

	int8_t i8 = (int8_t)(rank == 0 ? -9 : 3);
	EXPECT(test, "allreduce i8 avg", rank,
	       ncclAllReduce(&i8, &i8, 1, ncclInt8, ncclAvg, comm, NULL), ncclSuccess);
	EXPECT(test, "i8 avg", rank, i8, -1);

	uint16_t half = 0x3c00; /* 1.0 */
	EXPECT(test, "allreduce f16", rank,
	       ncclAllReduce(&half, &half, 1, ncclFloat16, ncclSum, comm, NULL), ncclSuccess);
	EXPECT(test, "f16 sum", rank, half, 0x4200); /* 3.0 */
	uint16_t bf16 = 0x3f80;                      /* 1.0 */
	EXPECT(test, "allreduce bf16", rank,
	       ncclAllReduce(&bf16, &bf16, 1, ncclBfloat16, ncclSum, comm, NULL), ncclSuccess);
	EXPECT(test, "bf16 sum", rank, bf16, 0x4040); /* 3.0 */
	uint8_t fp8 = 0x38;                           /* e4m3 1.0 */
	EXPECT(test, "allreduce fp8", rank,
	       ncclAllReduce(&fp8, &fp8, 1, ncclFloat8e4m3, ncclSum, comm, NULL), ncclSuccess);
	EXPECT(test, "fp8 sum", rank, fp8, 0x44); /* 3.0 */
	fp8 = 0x7b; /* e5m2 57344, the largest finite: the sum saturates */
	EXPECT(test, "allreduce fp8 e5m2", rank,
	       ncclAllReduce(&fp8, &fp8, 1, ncclFloat8e5m2, ncclSum, comm, NULL), ncclSuccess);
	EXPECT(test, "fp8 saturates", rank, fp8, 0x7b);

	int32_t gathered[MAX_RANKS] = {0}, mine = 100 + rank;
	EXPECT(test, "allgather", rank, ncclAllGather(&mine, gathered, 1, ncclInt32, comm, NULL),
	       ncclSuccess);
	for (int r = 0; r < n; r++)
		EXPECT(test, "allgather data", rank, gathered[r], 100 + r);

	int32_t root_value = rank == 1 ? 77 : -1;
	EXPECT(test, "broadcast", rank,
	       ncclBroadcast(&root_value, &root_value, 1, ncclInt32, 1, comm, NULL), ncclSuccess);
	EXPECT(test, "broadcast data", rank, root_value, 77);
	int32_t bcast = rank == 2 ? 55 : 0;
	EXPECT(test, "bcast", rank, ncclBcast(&bcast, 1, ncclInt32, 2, comm, NULL), ncclSuccess);
	EXPECT(test, "bcast data", rank, bcast, 55);

	int32_t scatter_in[MAX_RANKS], scatter_out = -1;
	for (int r = 0; r < n; r++)
		scatter_in[r] = rank * 100 + r;
	EXPECT(test, "reducescatter", rank,
	       ncclReduceScatter(scatter_in, &scatter_out, 1, ncclInt32, ncclSum, comm, NULL),
	       ncclSuccess);
	EXPECT(test, "reducescatter data", rank, scatter_out, 300 + 3 * rank);

	int32_t reduced = -1, contribution = rank + 1;
	EXPECT(test, "reduce", rank,
	       ncclReduce(&contribution, &reduced, 1, ncclInt32, ncclSum, 0, comm, NULL),
	       ncclSuccess);
	EXPECT(test, "reduce data", rank, reduced, rank == 0 ? 6 : -1);

	int32_t a2a_in[MAX_RANKS], a2a_out[MAX_RANKS];
	for (int r = 0; r < n; r++)
		a2a_in[r] = rank * 10 + r;
	EXPECT(test, "alltoall", rank, ncclAlltoAll(a2a_in, a2a_out, 1, ncclInt32, comm, NULL),
	       ncclSuccess);
	for (int r = 0; r < n; r++)
		EXPECT(test, "alltoall data", rank, a2a_out[r], r * 10 + rank);

	int32_t gather_out[MAX_RANKS] = {0};
	EXPECT(test, "gather", rank, ncclGather(&mine, gather_out, 1, ncclInt32, 2, comm, NULL),
	       ncclSuccess);
	if (rank == 2)
		EXPECT(test, "gather data", rank, gather_out[1], 101);
	int32_t scattered = -1;
	EXPECT(test, "scatter", rank, ncclScatter(a2a_in, &scattered, 1, ncclInt32, 0, comm, NULL),
	       ncclSuccess);
	EXPECT(test, "scatter data", rank, scattered, rank);

	/* A ring of send/recv inside a group. */
	int32_t token = rank, received = -1;
	EXPECT(test, "group start", rank, ncclGroupStart(), ncclSuccess);
	EXPECT(test, "send", rank, ncclSend(&token, 1, ncclInt32, (rank + 1) % n, comm, NULL),
	       ncclSuccess);
	EXPECT(test, "recv", rank,
	       ncclRecv(&received, 1, ncclInt32, (rank + n - 1) % n, comm, NULL), ncclSuccess);
	EXPECT(test, "group end", rank, ncclGroupEnd(), ncclSuccess);
	EXPECT(test, "ring data", rank, received, (rank + n - 1) % n);

	/* Pre-multiplied sum: every rank scales its own input. */
	float scalar = (float)rank + 1, x = 1.0f, y = 0;
	ncclRedOp_t op;
	EXPECT(test, "premulsum", rank,
	       ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32, ncclScalarHostImmediate, comm),
	       ncclSuccess);
	EXPECT(test, "premul allreduce", rank,
	       ncclAllReduce(&x, &y, 1, ncclFloat32, op, comm, NULL), ncclSuccess);
	EXPECT(test, "premul data", rank, y == 6.0f, 1);
	EXPECT(test, "op destroy", rank, ncclRedOpDestroy(op, comm), ncclSuccess);

	EXPECT(test, "destroy", rank, ncclCommDestroy(comm), ncclSuccess);
}

static void test_collectives_threads(void **state)
{
	(void)state;
	struct clique_test test = {.nranks = 3};
	assert_int_equal(ncclGetUniqueId(&test.id), ncclSuccess);
	assert_int_equal(fake_nccl_run_ranks(3, collectives_rank, &test), 0);
	assert_int_equal(test.failures, 0);
}

/* nccl-tests -g: one thread inits and drives 4 ranks, and two cliques in one group. */
static void test_one_thread_drives_ranks(void **state)
{
	(void)state;
	ncclComm_t comms[4], others[2];
	assert_int_equal(fake_nccl_init_clique(comms, 4), ncclSuccess);
	assert_int_equal(fake_nccl_init_clique(others, 2), ncclSuccess);
	float data[4][2], other[2][1] = {{1}, {2}};
	for (int r = 0; r < 4; r++) {
		data[r][0] = (float)r;
		data[r][1] = 1.0f;
	}
	assert_int_equal(ncclGroupStart(), ncclSuccess);
	for (int r = 0; r < 4; r++) {
		assert_int_equal(
			ncclAllReduce(data[r], data[r], 2, ncclFloat32, ncclSum, comms[r], NULL),
			ncclSuccess);
		/* Issued, not run: the group has not ended. */
		assert_true(data[r][1] == 1.0f);
	}
	assert_int_equal(ncclGroupStart(), ncclSuccess); /* nested */
	for (int r = 0; r < 2; r++)
		assert_int_equal(
			ncclAllReduce(other[r], other[r], 1, ncclFloat32, ncclMax, others[r], NULL),
			ncclSuccess);
	assert_int_equal(ncclGroupEnd(), ncclSuccess);
	assert_true(data[0][1] == 1.0f); /* inner end is not the outermost */
	assert_int_equal(ncclGroupEnd(), ncclSuccess);
	for (int r = 0; r < 4; r++)
		assert_true(data[r][0] == 6.0f && data[r][1] == 4.0f);
	assert_true(other[0][0] == 2.0f && other[1][0] == 2.0f);

	/* Simulated end drops the collectives. */
	float untouched[4] = {5, 5, 5, 5};
	ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
	assert_int_equal(ncclGroupStart(), ncclSuccess);
	for (int r = 0; r < 4; r++)
		assert_int_equal(ncclAllReduce(&untouched[r], &untouched[r], 1, ncclFloat32,
					       ncclSum, comms[r], NULL),
				 ncclSuccess);
	assert_int_equal(ncclGroupSimulateEnd(&sim), ncclSuccess);
	assert_true(untouched[0] == 5.0f && sim.estimatedTime > 0);
	assert_int_equal(ncclGroupEnd(), ncclInvalidUsage);

	/* Still in sequence after the dropped group. */
	assert_int_equal(ncclGroupStart(), ncclSuccess);
	for (int r = 0; r < 4; r++)
		assert_int_equal(ncclAllReduce(&untouched[r], &untouched[r], 1, ncclFloat32,
					       ncclSum, comms[r], NULL),
				 ncclSuccess);
	assert_int_equal(ncclGroupEnd(), ncclSuccess);
	assert_true(untouched[3] == 20.0f);

	for (int r = 0; r < 4; r++)
		assert_int_equal(ncclCommDestroy(comms[r]), ncclSuccess);
	for (int r = 0; r < 2; r++)
		assert_int_equal(ncclCommDestroy(others[r]), ncclSuccess);
}

static void test_init_all_and_scalable(void **state)
{
	(void)state;
	ncclComm_t comms[3];
	int devices[3] = {4, 5, 6};
	assert_int_equal(ncclCommInitAll(comms, 3, devices), ncclSuccess);
	int device = -1;
	assert_int_equal(ncclCommCuDevice(comms[2], &device), ncclSuccess);
	assert_int_equal(device, 6);
	int32_t values[3] = {1, 2, 3};
	assert_int_equal(ncclGroupStart(), ncclSuccess);
	for (int r = 0; r < 3; r++)
		assert_int_equal(ncclAllReduce(&values[r], &values[r], 1, ncclInt32, ncclSum,
					       comms[r], NULL),
				 ncclSuccess);
	assert_int_equal(ncclGroupEnd(), ncclSuccess);
	assert_int_equal(values[1], 6);
	for (int r = 0; r < 3; r++)
		assert_int_equal(ncclCommDestroy(comms[r]), ncclSuccess);

	ncclUniqueId ids[2];
	assert_int_equal(ncclGetUniqueId(&ids[0]), ncclSuccess);
	assert_int_equal(ncclGetUniqueId(&ids[1]), ncclSuccess);
	ncclComm_t scalable[2];
	ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
	assert_int_equal(ncclGroupStart(), ncclSuccess);
	for (int r = 0; r < 2; r++)
		assert_int_equal(ncclCommInitRankScalable(&scalable[r], 2, r, 2, ids, &config),
				 ncclSuccess);
	assert_int_equal(ncclGroupEnd(), ncclSuccess);
	for (int r = 0; r < 2; r++)
		assert_int_equal(ncclCommDestroy(scalable[r]), ncclSuccess);
}

static void test_nonblocking(void **state)
{
	(void)state;
	ncclUniqueId id;
	ncclComm_t comms[2];
	ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
	config.blocking = 0;
	assert_int_equal(ncclGetUniqueId(&id), ncclSuccess);
	/* No group: non-blocking inits do not wait for each other. */
	for (int r = 0; r < 2; r++)
		assert_int_equal(ncclCommInitRankConfig(&comms[r], 2, id, r, &config),
				 ncclInProgress);
	float x = 1;
	assert_int_equal(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comms[0], NULL),
			 ncclInvalidArgument);
	for (int r = 0; r < 2; r++) {
		ncclResult_t async;
		for (int poll = 0; poll < FAKE_NCCL_DEFAULT_ASYNC_POLLS; poll++) {
			assert_int_equal(ncclCommGetAsyncError(comms[r], &async), ncclSuccess);
			assert_int_equal(async, ncclInProgress);
		}
		assert_int_equal(ncclCommGetAsyncError(comms[r], &async), ncclSuccess);
		assert_int_equal(async, ncclSuccess);
	}

	/* Non-blocking split from one thread, NULL config inherits non-blocking. */
	ncclComm_t children[2];
	for (int r = 0; r < 2; r++)
		assert_int_equal(ncclCommSplit(comms[r], 0, r, &children[r], NULL), ncclInProgress);
	for (int r = 0; r < 2; r++) {
		ncclResult_t async = ncclInProgress;
		int polls = 0;
		while (async == ncclInProgress && polls++ < 100)
			assert_int_equal(ncclCommGetAsyncError(children[r], &async), ncclSuccess);
		assert_int_equal(async, ncclSuccess);
		assert_int_equal(ncclCommDestroy(children[r]), ncclSuccess);
	}
	assert_int_equal(ncclCommFinalize(comms[0]), ncclInProgress);
	for (int r = 0; r < 2; r++)
		assert_int_equal(ncclCommDestroy(comms[r]), ncclSuccess);

	/* NCCL_COMM_BLOCKING=0 applies when no config says otherwise. */
	assert_int_equal(setenv("NCCL_COMM_BLOCKING", "0", 1), 0);
	ncclComm_t single;
	assert_int_equal(ncclGetUniqueId(&id), ncclSuccess);
	assert_int_equal(ncclCommInitRank(&single, 1, id, 0), ncclInProgress);
	ncclComm_t grouped[2];
	assert_int_equal(fake_nccl_init_clique(grouped, 2), ncclInProgress);
	unsetenv("NCCL_COMM_BLOCKING");
	assert_int_equal(ncclCommDestroy(single), ncclSuccess);
	for (int r = 0; r < 2; r++)
		assert_int_equal(ncclCommDestroy(grouped[r]), ncclSuccess);
}

static void test_split_and_shrink(void **state)
{
	(void)state;
	ncclComm_t comms[4], children[4];
	assert_int_equal(fake_nccl_init_clique(comms, 4), ncclSuccess);
	/* Colors r % 2, keys descending; rank 3 opts out. */
	assert_int_equal(ncclGroupStart(), ncclSuccess);
	for (int r = 0; r < 4; r++)
		assert_int_equal(ncclCommSplit(comms[r], r == 3 ? NCCL_SPLIT_NOCOLOR : r % 2, -r,
					       &children[r], NULL),
				 ncclSuccess);
	assert_int_equal(ncclGroupEnd(), ncclSuccess);
	assert_null(children[3]);
	int count = 0, rank = -1;
	assert_int_equal(ncclCommCount(children[0], &count), ncclSuccess);
	assert_int_equal(count, 2);
	assert_int_equal(ncclCommUserRank(children[0], &rank), ncclSuccess);
	assert_int_equal(rank, 1); /* key 0 sorts after key -2 */
	assert_int_equal(ncclCommCount(children[1], &count), ncclSuccess);
	assert_int_equal(count, 1);
	int32_t v[3] = {1, 10, 100};
	assert_int_equal(ncclGroupStart(), ncclSuccess);
	assert_int_equal(ncclAllReduce(&v[0], &v[0], 1, ncclInt32, ncclSum, children[0], NULL),
			 ncclSuccess);
	assert_int_equal(ncclAllReduce(&v[2], &v[2], 1, ncclInt32, ncclSum, children[2], NULL),
			 ncclSuccess);
	assert_int_equal(ncclGroupEnd(), ncclSuccess);
	assert_int_equal(v[0], 101);
	for (int r = 0; r < 3; r++)
		assert_int_equal(ncclCommDestroy(children[r]), ncclSuccess);

	/* Rank 3 died: the others revoke, then shrink it away. */
	int exclude[1] = {3};
	ncclComm_t shrunk[3];
	for (int r = 0; r < 3; r++)
		assert_int_equal(ncclCommRevoke(comms[r], NCCL_REVOKE_DEFAULT), ncclSuccess);
	float x = 1;
	assert_int_equal(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comms[0], NULL),
			 ncclInvalidUsage);
	assert_int_equal(ncclGroupStart(), ncclSuccess);
	for (int r = 0; r < 3; r++)
		assert_int_equal(
			ncclCommShrink(comms[r], exclude, 1, &shrunk[r], NULL, NCCL_SHRINK_DEFAULT),
			ncclSuccess);
	assert_int_equal(ncclGroupEnd(), ncclSuccess);
	assert_int_equal(ncclCommCount(shrunk[2], &count), ncclSuccess);
	assert_int_equal(count, 3);
	assert_int_equal(ncclCommUserRank(shrunk[2], &rank), ncclSuccess);
	assert_int_equal(rank, 2);
	for (int r = 0; r < 4; r++)
		assert_int_equal(ncclCommDestroy(comms[r]), ncclSuccess);
	for (int r = 0; r < 3; r++)
		assert_int_equal(ncclCommDestroy(shrunk[r]), ncclSuccess);
}

struct abort_test {
	ncclComm_t comms[2];
	ncclResult_t waiter_result;
	ncclResult_t async;
};

static void abort_rank(int rank, void *arg)
{
	struct abort_test *test = arg;
	if (rank == 0) {
		float x = 1;
		/* Rank 1 never joins this all-reduce: only the abort ends it. */
		test->waiter_result =
			ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, test->comms[0], NULL);
		test->async = ncclSuccess;
		if (ncclCommGetAsyncError(test->comms[0], &test->async) != ncclSuccess)
			test->async = ncclInternalError;
	} else {
		usleep(50 * 1000);
		if (ncclCommAbort(test->comms[1]) != ncclSuccess)
			test->async = ncclInternalError;
	}
}

static void test_abort_wakes_peers(void **state)
{
	(void)state;
	struct abort_test test;
	assert_int_equal(fake_nccl_init_clique(test.comms, 2), ncclSuccess);
	assert_int_equal(fake_nccl_run_ranks(2, abort_rank, &test), 0);
	assert_int_equal(test.waiter_result, ncclRemoteError);
	assert_int_equal(test.async, ncclRemoteError);
	assert_int_equal(ncclCommAbort(test.comms[0]), ncclSuccess);
}

static void test_timeout_does_not_hang(void **state)
{
	(void)state;
	assert_int_equal(setenv("FAKE_NCCL_TIMEOUT_MS", "100", 1), 0);
	ncclUniqueId id;
	ncclComm_t comm;
	assert_int_equal(ncclGetUniqueId(&id), ncclSuccess);
	assert_int_equal(ncclCommInitRank(&comm, 2, id, 0), ncclSystemError);
	unsetenv("FAKE_NCCL_TIMEOUT_MS");
	assert_int_equal(ncclCommAbort(comm), ncclSuccess);
}

static void test_fault_knobs(void **state)
{
	(void)state;
	ncclComm_t comms[2];
	assert_int_equal(fake_nccl_init_clique(comms, 2), ncclSuccess);
	float x = 1;
	assert_int_equal(setenv("FAKE_NCCL_FAIL", "ncclBroadcast,ncclAllReduce=2", 1), 0);
	assert_int_equal(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comms[0], NULL),
			 ncclSystemError);
	/* ncclBcast itself is not listed; the ncclBroadcast it calls fails. */
	assert_int_equal(ncclBcast(&x, 1, ncclFloat32, 0, comms[0], NULL), ncclInternalError);
	assert_string_equal(ncclGetLastError(comms[0]),
			    "fake NCCL: ncclBroadcast failed on request (FAKE_NCCL_FAIL)");
	assert_int_equal(setenv("FAKE_NCCL_FAIL_RANK", "1", 1), 0);
	assert_int_equal(setenv("FAKE_NCCL_FAIL", "ncclCommUserRank=6", 1), 0);
	int rank = -1;
	assert_int_equal(ncclCommUserRank(comms[0], &rank), ncclSuccess);
	assert_int_equal(ncclCommUserRank(comms[1], &rank), ncclRemoteError);
	unsetenv("FAKE_NCCL_FAIL");
	unsetenv("FAKE_NCCL_FAIL_RANK");
	for (int r = 0; r < 2; r++)
		assert_int_equal(ncclCommDestroy(comms[r]), ncclSuccess);
}

/*
 * NCCL's pointer-check mode: on, NULL buffers are ncclInvalidArgument whatever the
 * count (and only the buffers NCCL checks); off, they are not checked and a kernel
 * that would touch one "faults": ncclSuccess, nothing moves, an async CUDA error.
 */
static void test_pointer_check_mode(void **state)
{
	(void)state;
	const char *const modes[][2] = {
		{"NCCL_CHECK_POINTERS", "1"},
		{"NCCL_CHECK_MODE", "DEBUG_LOCAL"},
		{"NCCL_CHECK_MODE", "DEBUG_GLOBAL"},
	};
	ncclComm_t comm;
	ncclUniqueId id;
	float x[2] = {1, 2};
	assert_int_equal(ncclGetUniqueId(&id), ncclSuccess);
	assert_int_equal(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
	for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
		assert_int_equal(setenv(modes[m][0], modes[m][1], 1), 0);
		assert_int_equal(ncclAllReduce(NULL, x, 2, ncclFloat32, ncclSum, comm, NULL),
				 ncclInvalidArgument);
		assert_int_equal(ncclAllReduce(x, NULL, 0, ncclFloat32, ncclSum, comm, NULL),
				 ncclInvalidArgument);
		/* Reduce checks recvbuff on the root only; send/recv only when count > 0. */
		assert_int_equal(ncclReduce(x, NULL, 2, ncclFloat32, ncclSum, 0, comm, NULL),
				 ncclInvalidArgument);
		assert_int_equal(ncclGroupStart(), ncclSuccess);
		assert_int_equal(ncclSend(NULL, 0, ncclFloat32, 0, comm, NULL), ncclSuccess);
		assert_int_equal(ncclRecv(NULL, 0, ncclFloat32, 0, comm, NULL), ncclSuccess);
		assert_int_equal(ncclGroupEnd(), ncclSuccess);
		/* Other checks come first, with the same code. */
		assert_int_equal(ncclBroadcast(NULL, NULL, 2, ncclFloat32, 3, comm, NULL),
				 ncclInvalidArgument);
		assert_int_equal(ncclAllReduce(x, x, 2, ncclFloat32, ncclSum, comm, NULL),
				 ncclSuccess);
		unsetenv(modes[m][0]);
	}
	ncclResult_t async = ncclInternalError;
	assert_int_equal(ncclCommGetAsyncError(comm, &async), ncclSuccess);
	assert_int_equal(async, ncclSuccess);
	assert_int_equal(setenv("NCCL_CHECK_MODE", "DEFAULT", 1), 0);
	assert_int_equal(ncclAllReduce(x, NULL, 0, ncclFloat32, ncclSum, comm, NULL), ncclSuccess);
	assert_int_equal(ncclCommGetAsyncError(comm, &async), ncclSuccess);
	assert_int_equal(async, ncclSuccess);
	/* Unchecked: the "kernel" faults later; the call itself succeeded. */
	assert_int_equal(ncclAllReduce(x, NULL, 2, ncclFloat32, ncclSum, comm, NULL), ncclSuccess);
	assert_true(x[0] == 1.0f && x[1] == 2.0f);
	assert_int_equal(ncclCommGetAsyncError(comm, &async), ncclSuccess);
	assert_int_equal(async, ncclUnhandledCudaError);
	unsetenv("NCCL_CHECK_MODE");
	assert_int_equal(ncclCommDestroy(comm), ncclSuccess);
}

/* Internal calls through the public names, and the stable argument format. */
static void test_trace_format(void **state)
{
	(void)state;
	static float buffer[4];
	ncclUniqueId id;
	ncclComm_t comm;
	assert_int_equal(ncclGetUniqueId(&id), ncclSuccess);
	assert_int_equal(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
	assert_int_equal(ncclBcast(buffer, 4, ncclFloat32, 0, comm, NULL), ncclSuccess);
	assert_int_equal(ncclAllReduce(buffer, buffer + 1, 1, ncclFloat32, ncclAvg, comm, NULL),
			 ncclSuccess);
	void *memory = NULL;
	assert_int_equal(ncclMemAlloc(&memory, 100), ncclSuccess);
	assert_int_equal(ncclMemFree((char *)memory), ncclSuccess);
	assert_int_equal(ncclCommDestroy(comm), ncclSuccess);

	char *text = fake_nccl_trace_read(trace_path);
	assert_non_null(text);
	char *init = strstr(text, "ncclCommInitRank(");
	char *bcast = strstr(text, "ncclBcast(");
	char *broadcast = strstr(text, "ncclBroadcast(");
	assert_non_null(init);
	assert_non_null(bcast);
	assert_non_null(broadcast);
	/* The inner call returns (and is written) first. */
	assert_true(broadcast < bcast);
	/* The comm's scratch buffer came from ncclMemAlloc before the init line. */
	assert_true(strstr(text, "ncclMemAlloc(ptr=>mem") < init);
	unsigned id_serial, comm_serial;
	assert_int_equal(sscanf(init,
				"ncclCommInitRank(comm=>comm%u, nranks=1, commId=id%u, rank=0) "
				"= ncclSuccess",
				&comm_serial, &id_serial),
			 2);
	char expected[256];
	snprintf(expected, sizeof(expected),
		 "ncclBroadcast(sendbuff=p1, recvbuff=p1, count=4, datatype=ncclFloat32, root=0, "
		 "comm=comm%u, stream=NULL) = ncclSuccess\n",
		 comm_serial);
	assert_non_null(strstr(text, expected));
	snprintf(expected, sizeof(expected),
		 "ncclAllReduce(sendbuff=p1, recvbuff=p2, count=1, datatype=ncclFloat32, "
		 "op=ncclAvg, "
		 "comm=comm%u, stream=NULL) = ncclSuccess\n",
		 comm_serial);
	assert_non_null(strstr(text, expected));
	assert_non_null(strstr(text, "ncclMemAlloc(ptr=>mem"));
	assert_non_null(strstr(text, ", size=100) = ncclSuccess\n"));
	/* Destroy frees the scratch buffer through ncclMemFree, inside the destroy. */
	char *destroy = strstr(text, "ncclCommDestroy(");
	assert_non_null(destroy);
	char *last_free = NULL;
	for (char *at = strstr(text, "ncclMemFree("); at != NULL;
	     at = strstr(at + 1, "ncclMemFree("))
		last_free = at;
	assert_true(last_free != NULL && last_free < destroy);
	free(text);
	assert_int_equal(fake_nccl_trace_count(trace_path, "ncclMemFree"), 2);
	assert_int_equal(fake_nccl_trace_count(trace_path, "ncclBroadcast"), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_export_shape),
		cmocka_unit_test(test_version_and_errors),
		cmocka_unit_test_setup_teardown(test_single_rank, setup_trace, teardown_trace),
		cmocka_unit_test_setup_teardown(test_collectives_threads, setup_trace,
						teardown_trace),
		cmocka_unit_test_setup_teardown(test_one_thread_drives_ranks, setup_trace,
						teardown_trace),
		cmocka_unit_test_setup_teardown(test_init_all_and_scalable, setup_trace,
						teardown_trace),
		cmocka_unit_test_setup_teardown(test_nonblocking, setup_trace, teardown_trace),
		cmocka_unit_test_setup_teardown(test_split_and_shrink, setup_trace, teardown_trace),
		cmocka_unit_test_setup_teardown(test_abort_wakes_peers, setup_trace,
						teardown_trace),
		cmocka_unit_test_setup_teardown(test_timeout_does_not_hang, setup_trace,
						teardown_trace),
		cmocka_unit_test_setup_teardown(test_fault_knobs, setup_trace, teardown_trace),
		cmocka_unit_test_setup_teardown(test_pointer_check_mode, setup_trace,
						teardown_trace),
		cmocka_unit_test_setup_teardown(test_trace_format, setup_trace, teardown_trace),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
