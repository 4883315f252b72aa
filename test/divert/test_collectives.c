/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * ncclReduceScatter, ncclReduce and PreMulSum ops through the divert layer, on a CPU:
 * like test_divert, this program plays libnccl-det.so (the shim compiled in) in front
 * of the in-process multi-rank fake NCCL, with the host-only backend in place of the
 * CUDA engine.  A diverted call computes the CPU reference tree; the fake NCCL
 * reduces in rank order, rounding after every step (and pre-multiplies in the
 * element type); the tests prove which one ran, and that nothing reached NCCL.
 *
 * Covered: reduce-scatter results (every dtype x op, n = 3, 4, out of place and in
 * place) equal the reference blocks and the slices of the all-reduce reference;
 * reduce writes the root only (others' recvbuff untouched, may be NULL, also in
 * NCCL's pointer-check mode); PreMulSum with host and device scalars, per rank and
 * per communicator, for all-reduce, reduce-scatter and reduce, the op's life cycle
 * (a device scalar read by each call, a host one at creation, destroyed ops and ops
 * of another communicator or datatype forwarded for NCCL's error); groups that mix
 * the collectives, with a replayed fallback that reads a diverted result; ranks that
 * call different collectives fail instead of mixing them up; strict mode, stats,
 * ncclDetCommQuery; invalid roots and count 0.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "test/fake_nccl/fake_nccl.h"
#include "nccl_det.h"
#include "divert/ndet_comm.h"
#include "test/support/ndet_divert_fixture.h"
#include "test/support/ndet_fake_backend.h"
#include "kernels/ndet_abi.h"
#include "common/ndet_log.h"
#include "reference/ndet_reference.h"
#include "common/ndet_settings.h"
#include "test/support/ndet_test_data.h"

#define MAX_RANKS 4
#define RECV      37 /* elements per rank block: odd */
#define TOTAL     (RECV * MAX_RANKS)

static const char *const knobs[] = {
	"NCCL_DET_TEST_FAIL",  "NCCL_DET_STRICT", "NCCL_DET_STATS",
	"NCCL_CHECK_POINTERS", "FAKE_NCCL_TRACE", "NCCL_DET_TIMEOUT",
};

static int setup(void **state)
{
	(void)state;
	return ndet_divert_fixture_reset(knobs, sizeof(knobs) / sizeof(knobs[0]), ndet_divert_log,
					 ndet_divert_trace);
}

static void expect_same(ndet_dtype_t dtype, const void *got, const void *want, size_t count,
			const char *what, int rank)
{
	size_t first = 0;
	size_t bad = ndet_test_count_differences(dtype, got, want, count, &first);
	if (bad != 0)
		fail_msg("%s %s rank %d: %zu of %zu elements differ, first %zu", what,
			 ndet_dtype_name(dtype), rank, bad, count, first);
}

static uint64_t collective_calls(void)
{
	struct ndet_fake_backend_counters counters;
	ndet_fake_backend_counters(&counters);
	return counters.allreduces;
}

/* `n` ranks driven by this thread, NCCL's calls traced, inside ncclGroupStart. */
static void start_traced_group(ncclComm_t *comms, int n)
{
	assert_int_equal(ncclCommInitAll(comms, n, NULL), ncclSuccess);
	ndet_divert_trace_on();
	assert_int_equal(ncclGroupStart(), ncclSuccess);
}

/* ------------------------------------------------------------------ reduce-scatter */

/* Every rank's inputs (nranks blocks of RECV), its results and NCCL's own. */
struct scatter_job {
	ndet_dtype_t dtype;
	ndet_op_t op;
	int nranks;
	bool in_place; /* recvbuff = sendbuff + rank * RECV elements */
	ncclUniqueId id;
	/* Element arrays of any dtype: aligned for the widest. */
	_Alignas(16) unsigned char input[MAX_RANKS][TOTAL * 8];
	_Alignas(16) unsigned char work[MAX_RANKS][TOTAL * 8]; /* in place: a copy of input */
	_Alignas(16) unsigned char output[MAX_RANKS][RECV * 8];
	_Alignas(16) unsigned char nccl[MAX_RANKS][RECV * 8];
	ncclResult_t results[MAX_RANKS];
	uint64_t diverted_rs[MAX_RANKS];
};

static void scatter_rank(int rank, void *opaque)
{
	struct scatter_job *job = opaque;
	const size_t size = ndet_dtype_size(job->dtype);
	ncclComm_t comm = NULL;
	ncclResult_t result = ncclCommInitRank(&comm, job->nranks, job->id, rank);
	const void *send = job->input[rank];
	void *recv = job->output[rank];
	if (job->in_place) {
		memcpy(job->work[rank], job->input[rank], (size_t)job->nranks * RECV * size);
		send = job->work[rank];
		recv = job->work[rank] + (size_t)rank * RECV * size;
	}
	if (result == ncclSuccess)
		result = ncclReduceScatter(send, recv, RECV, ndet_divert_nccl_type(job->dtype),
					   ndet_divert_nccl_op(job->op), comm, NULL);
	if (result == ncclSuccess && job->in_place)
		memcpy(job->output[rank], recv, RECV * size);
	/* The fake's own reduce-scatter, in rank order. */
	if (result == ncclSuccess)
		result = pncclReduceScatter(job->input[rank], job->nccl[rank], RECV,
					    ndet_divert_nccl_type(job->dtype),
					    ndet_divert_nccl_op(job->op), comm, NULL);
	struct ndet_comm_stats stats;
	if (comm != NULL && ndet_comm_stats(comm, &stats))
		job->diverted_rs[rank] = stats.diverted_by_coll[NDET_COLL_REDUCE_SCATTER];
	if (comm != NULL) {
		ncclResult_t destroyed = ncclCommDestroy(comm);
		if (result == ncclSuccess)
			result = destroyed;
	}
	job->results[rank] = result;
}

/*
 * Every rank gets its block of the tree, bit for bit: the reduce-scatter reference
 * and the slice of the all-reduce reference alike, in place or not.  The data tells
 * the tree from NCCL's rank order, and the calls never reached NCCL.
 */
static void test_reduce_scatter_tree_results(void **state)
{
	(void)state;
	static struct scatter_job job;
	static _Alignas(16) unsigned char all[TOTAL * 8], block[RECV * 8];
	int discriminating = 0;
	for (int nranks = 3; nranks <= 4; nranks++) {
		for (int dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
			for (int op = 0; op < NDET_OP_COUNT; op++) {
				const size_t size = ndet_dtype_size((ndet_dtype_t)dtype);
				memset(&job, 0, sizeof(job));
				job.dtype = (ndet_dtype_t)dtype;
				job.op = (ndet_op_t)op;
				job.nranks = nranks;
				job.in_place = (op + dtype) % 2 == 1;
				const void *views[MAX_RANKS];
				for (int r = 0; r < nranks; r++) {
					ndet_test_fill_rank(job.dtype, job.input[r], 0,
							    (size_t)nranks * RECV,
							    0x5ca7 + (uint64_t)(dtype * 8 + op), r,
							    nranks, NDET_TEST_DATA_CANCEL);
					views[r] = job.input[r];
				}
				assert_int_equal(ndet_reference_allreduce(views, nranks, all,
									  (size_t)nranks * RECV,
									  job.dtype, job.op),
						 NDET_OK);
				assert_int_equal(pncclGetUniqueId(&job.id), ncclSuccess);
				uint64_t before = collective_calls();
				assert_int_equal(fake_nccl_run_ranks(nranks, scatter_rank, &job),
						 0);
				assert_int_equal(collective_calls() - before, (uint64_t)nranks);
				for (int r = 0; r < nranks; r++) {
					assert_int_equal(job.results[r], ncclSuccess);
					assert_int_equal(job.diverted_rs[r], 1);
					assert_int_equal(ndet_reference_reduce_scatter(
								 views, nranks, r, block, RECV,
								 job.dtype, job.op),
							 NDET_OK);
					expect_same(job.dtype, job.output[r], block, RECV,
						    "reduce-scatter vs its reference", r);
					expect_same(job.dtype, job.output[r],
						    all + (size_t)r * RECV * size, RECV,
						    "reduce-scatter vs the all-reduce slice", r);
				}
				size_t differ = 0;
				for (int r = 0; r < nranks; r++)
					differ += ndet_test_count_differences(
						job.dtype, job.nccl[r], job.output[r], RECV, NULL);
				/* Sums with 4 ranks: NCCL's rank order is not the tree. */
				if (op == NDET_OP_SUM && nranks == 4) {
					if (differ < (size_t)nranks * RECV / 20)
						fail_msg("%s: only %zu elements tell the tree from "
							 "rank order",
							 ndet_dtype_name(job.dtype), differ);
					discriminating++;
				}
			}
		}
	}
	assert_int_equal(discriminating, NDET_DTYPE_COUNT);
	assert_int_equal(ndet_divert_count_log("WARN", NULL), 0);
}

/* ------------------------------------------------------------------ reduce */

/* Only the root receives; the others' recvbuff is never touched and may be NULL. */
static void test_reduce_writes_the_root_only(void **state)
{
	(void)state;
	static float input[4][RECV], output[4][RECV], tree[RECV];
	const void *views[4];
	for (int check = 0; check < 2; check++) {
		/* NCCL's pointer check skips a non-root's recvbuff: so must ours. */
		if (check)
			assert_int_equal(setenv("NCCL_CHECK_POINTERS", "1", 1), 0);
		for (int r = 0; r < 4; r++) {
			ndet_test_fill_rank(NDET_DTYPE_F32, input[r], 0, RECV, 77, r, 4,
					    NDET_TEST_DATA_CANCEL);
			views[r] = input[r];
		}
		assert_int_equal(
			ndet_reference_allreduce(views, 4, tree, RECV, NDET_DTYPE_F32, NDET_OP_SUM),
			NDET_OK);
		memset(output, 0x5a, sizeof(output));
		ncclComm_t comms[4] = {NULL};
		assert_int_equal(ncclCommInitAll(comms, 4, NULL), ncclSuccess);
		ndet_divert_trace_on();
		assert_int_equal(ncclGroupStart(), ncclSuccess);
		for (int r = 0; r < 4; r++) {
			/* Root 2 in place; rank 1 passes no recvbuff at all. */
			const void *send = r == 2 ? (const void *)output[2] : input[r];
			if (r == 2)
				memcpy(output[2], input[2], sizeof(output[2]));
			assert_int_equal(ncclReduce(send, r == 1 ? NULL : output[r], RECV,
						    ncclFloat32, ncclSum, 2, comms[r], NULL),
					 ncclSuccess);
		}
		assert_int_equal(ncclGroupEnd(), ncclSuccess);
		ndet_divert_trace_off();
		assert_int_equal(ndet_divert_traced("ncclReduce"), 0);
		expect_same(NDET_DTYPE_F32, output[2], tree, RECV, "reduce root", 2);
		for (int r = 0; r < 4; r++) {
			if (r == 2)
				continue;
			for (int i = 0; i < RECV; i++) {
				uint32_t bits;
				memcpy(&bits, &output[r][i], sizeof(bits));
				assert_int_equal(bits, 0x5a5a5a5a);
			}
		}
		for (int r = 0; r < 4; r++) {
			struct ndet_comm_stats stats;
			assert_true(ndet_comm_stats(comms[r], &stats));
			assert_int_equal(stats.diverted_by_coll[NDET_COLL_REDUCE], 1);
			assert_int_equal(stats.fallback_calls[NDET_FALLBACK_INVALID], 0);
			assert_int_equal(ncclCommDestroy(comms[r]), ncclSuccess);
		}
		unsetenv("NCCL_CHECK_POINTERS");
	}
}

/* A root NCCL refuses is NCCL's to answer; count 0 is a no-op; one rank copies. */
static void test_reduce_root_and_count_zero(void **state)
{
	(void)state;
	static float values[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8];
	ncclUniqueId id;
	ncclComm_t comm = NULL;
	assert_int_equal(pncclGetUniqueId(&id), ncclSuccess);
	assert_int_equal(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
	ndet_divert_trace_on();
	assert_int_equal(ncclReduce(values, out, 8, ncclFloat32, ncclSum, 1, comm, NULL),
			 ncclInvalidArgument);
	assert_int_equal(ncclReduce(values, out, 8, ncclFloat32, ncclSum, -1, comm, NULL),
			 ncclInvalidArgument);
	assert_int_equal(ndet_divert_traced("ncclReduce"), 2);
	assert_int_equal(ncclReduceScatter(NULL, NULL, 0, ncclFloat32, ncclSum, comm, NULL),
			 ncclSuccess);
	assert_int_equal(ncclReduce(NULL, NULL, 0, ncclBfloat16, ncclMax, 0, comm, NULL),
			 ncclSuccess);
	assert_int_equal(ncclReduceScatter(values, out, 8, ncclFloat32, ncclSum, comm, NULL),
			 ncclSuccess);
	assert_memory_equal(out, values, sizeof(values));
	ndet_divert_trace_off();
	assert_int_equal(ndet_divert_traced("ncclReduce"), 2);
	assert_int_equal(ndet_divert_traced("ncclReduceScatter"), 0);
	struct ndet_comm_stats stats;
	assert_true(ndet_comm_stats(comm, &stats));
	assert_int_equal(stats.fallback_calls[NDET_FALLBACK_INVALID], 2);
	assert_int_equal(stats.diverted_by_coll[NDET_COLL_REDUCE_SCATTER], 2);
	assert_int_equal(stats.diverted_by_coll[NDET_COLL_REDUCE], 1);
	assert_int_equal(ncclCommDestroy(comm), ncclSuccess);
}

/* ------------------------------------------------------------------ PreMulSum */

/* One element of `dtype` for a scalar value (ndet_reference_element_bits). */
static void scalar_of(ndet_dtype_t dtype, double value, void *out)
{
	const uint64_t bits = ndet_reference_element_bits(dtype, value);
	memcpy(out, &bits, ndet_dtype_size(dtype)); /* little-endian: the low bytes */
}

/*
 * Every dtype, n = 4, one thread driving all ranks: rank r's op has scalar s_r, kept
 * by value (even ranks, ncclScalarHostImmediate) or read from "device" memory by
 * each call (odd ranks, ncclScalarDevice).  All-reduce, reduce-scatter and reduce
 * give the PreMulSum reference's bits, and differ from NCCL's.  After creation the
 * host copy is overwritten (must not matter) and the device scalar is changed (must
 * be the value used).
 */
static void test_premulsum_host_and_device_scalars(void **state)
{
	(void)state;
	enum { N = 4 };
	static _Alignas(16) unsigned char input[N][N * RECV * 8], all[N][N * RECV * 8],
		scatter[N][RECV * 8], root[N * RECV * 8], want[N * RECV * 8], nccl[N][N * RECV * 8];
	for (int dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
		const ndet_dtype_t dt = (ndet_dtype_t)dtype;
		const ncclDataType_t type = ndet_divert_nccl_type(dt);
		const size_t size = ndet_dtype_size(dt), total = (size_t)N * RECV;
		_Alignas(8) unsigned char host_scalar[N][8], device_scalar[N][8], scalars[N * 8];
		const void *views[N];
		ncclComm_t comms[N] = {NULL};
		ncclRedOp_t ops[N];
		assert_int_equal(ncclCommInitAll(comms, N, NULL), ncclSuccess);
		for (int r = 0; r < N; r++) {
			ndet_test_fill_rank(dt, input[r], 0, total, 0x9e3 + (uint64_t)dtype, r, N,
					    NDET_TEST_DATA_CANCEL);
			views[r] = input[r];
			bool device = r % 2 == 1;
			scalar_of(dt, ndet_reference_test_scalar(r), host_scalar[r]);
			scalar_of(dt, 2.5, device_scalar[r]); /* replaced before the calls */
			assert_int_equal(
				ncclRedOpCreatePreMulSum(
					&ops[r], device ? device_scalar[r] : host_scalar[r], type,
					device ? ncclScalarDevice : ncclScalarHostImmediate,
					comms[r]),
				ncclSuccess);
			/* Per communicator: every rank got the same first value. */
			assert_int_equal(ops[r], ncclNumOps);
			scalar_of(dt, ndet_reference_test_scalar(r), scalars + (size_t)r * size);
		}
		/* Host: captured already; device: read when the call runs. */
		for (int r = 0; r < N; r++) {
			if (r % 2 == 0)
				scalar_of(dt, 100.0, host_scalar[r]);
			else
				scalar_of(dt, ndet_reference_test_scalar(r), device_scalar[r]);
		}
		assert_int_equal(ndet_reference_premulsum(views, scalars, N, want, total, dt),
				 NDET_OK);
		ndet_divert_trace_on();
		assert_int_equal(ncclGroupStart(), ncclSuccess);
		for (int r = 0; r < N; r++) {
			assert_int_equal(ncclAllReduce(input[r], all[r], total, type, ops[r],
						       comms[r], NULL),
					 ncclSuccess);
			assert_int_equal(ncclReduceScatter(input[r], scatter[r], RECV, type, ops[r],
							   comms[r], NULL),
					 ncclSuccess);
			assert_int_equal(
				ncclReduce(input[r], root, total, type, ops[r], 0, comms[r], NULL),
				ncclSuccess);
			assert_int_equal(pncclAllReduce(input[r], nccl[r], total, type, ops[r],
							comms[r], NULL),
					 ncclSuccess);
		}
		assert_int_equal(ncclGroupEnd(), ncclSuccess);
		ndet_divert_trace_off();
		/* The pncclAllReduce calls only. */
		assert_int_equal(ndet_divert_traced("ncclAllReduce"), N);
		assert_int_equal(ndet_divert_traced("ncclReduceScatter"), 0);
		assert_int_equal(ndet_divert_traced("ncclReduce"), 0);
		for (int r = 0; r < N; r++) {
			expect_same(dt, all[r], want, total, "PreMulSum all-reduce", r);
			expect_same(dt, scatter[r], want + (size_t)r * RECV * size, RECV,
				    "PreMulSum reduce-scatter", r);
		}
		expect_same(dt, root, want, total, "PreMulSum reduce", 0);
		if (ndet_test_count_differences(dt, nccl[0], want, total, NULL) < total / 20)
			fail_msg("%s: NCCL's PreMulSum agrees with the tree: the data proves "
				 "nothing",
				 ndet_dtype_name(dt));
		for (int r = 0; r < N; r++) {
			struct ndet_comm_stats stats;
			assert_true(ndet_comm_stats(comms[r], &stats));
			assert_int_equal(stats.diverted_premul, 3);
			assert_int_equal(ncclRedOpDestroy(ops[r], comms[r]), ncclSuccess);
			assert_int_equal(ncclCommDestroy(comms[r]), ncclSuccess);
		}
	}
	assert_int_equal(ndet_divert_count_log("WARN", NULL), 0);
}

/*
 * Op handles are NCCL's, per communicator: the same value names different scalars on
 * two communicators; an op of another communicator, another datatype or a destroyed
 * one is NCCL's error; a value NCCL hands out again after a destroy is the new op.
 */
static void test_premulsum_ops_per_communicator(void **state)
{
	(void)state;
	static float x[2][4] = {{1, 2, 3, 4}, {10, 20, 30, 40}}, y[2][4];
	static double d[2][4];
	ncclComm_t a[2] = {NULL}, b[2] = {NULL}, c[2] = {NULL};
	assert_int_equal(ncclCommInitAll(a, 2, NULL), ncclSuccess);
	assert_int_equal(ncclCommInitAll(b, 2, NULL), ncclSuccess);
	assert_int_equal(ncclCommInitAll(c, 2, NULL), ncclSuccess);
	float two = 2.0f, three = 3.0f;
	ncclRedOp_t on_a[2], on_b[2];
	for (int r = 0; r < 2; r++) {
		assert_int_equal(ncclRedOpCreatePreMulSum(&on_a[r], &two, ncclFloat32,
							  ncclScalarHostImmediate, a[r]),
				 ncclSuccess);
		assert_int_equal(ncclRedOpCreatePreMulSum(&on_b[r], &three, ncclFloat32,
							  ncclScalarHostImmediate, b[r]),
				 ncclSuccess);
		assert_int_equal(on_a[r], on_b[r]);
	}
	/* a: 2 x (1 + 10) = 22; b: 3 x 11 = 33, with the same op value. */
	ncclComm_t *pairs[2] = {a, b};
	const float expected[2] = {22.0f, 33.0f};
	for (int p = 0; p < 2; p++) {
		assert_int_equal(ncclGroupStart(), ncclSuccess);
		for (int r = 0; r < 2; r++)
			assert_int_equal(ncclAllReduce(x[r], y[r], 4, ncclFloat32, on_a[r],
						       pairs[p][r], NULL),
					 ncclSuccess);
		assert_int_equal(ncclGroupEnd(), ncclSuccess);
		for (int r = 0; r < 2; r++)
			assert_true(y[r][0] == expected[p] && y[r][3] == expected[p] * 4.0f);
	}
	ndet_divert_trace_on();
	/* c never made the op; the op is for f32, not f64: NCCL's errors. */
	assert_int_equal(ncclAllReduce(x[0], y[0], 4, ncclFloat32, on_a[0], c[0], NULL),
			 ncclInvalidArgument);
	assert_int_equal(ncclAllReduce(d[0], d[1], 4, ncclFloat64, on_a[0], a[0], NULL),
			 ncclInvalidArgument);
	assert_int_equal(ndet_divert_traced("ncclAllReduce"), 2);
	ndet_divert_trace_off();
	/* Destroyed, then the value handed out again for another scalar. */
	float half = 0.5f;
	for (int r = 0; r < 2; r++) {
		assert_int_equal(ncclRedOpDestroy(on_a[r], a[r]), ncclSuccess);
		ncclRedOp_t again;
		assert_int_equal(ncclRedOpCreatePreMulSum(&again, &half, ncclFloat32,
							  ncclScalarHostImmediate, a[r]),
				 ncclSuccess);
		assert_int_equal(again, on_a[r]);
	}
	assert_int_equal(ncclGroupStart(), ncclSuccess);
	for (int r = 0; r < 2; r++)
		assert_int_equal(ncclReduceScatter(x[r], y[r], 2, ncclFloat32, on_a[r], a[r], NULL),
				 ncclSuccess);
	assert_int_equal(ncclGroupEnd(), ncclSuccess);
	/* 0.5 x (1 + 10), 0.5 x (2 + 20) on rank 0; 0.5 x (3 + 30), 0.5 x 44 on rank 1. */
	assert_true(y[0][0] == 5.5f && y[0][1] == 11.0f && y[1][0] == 16.5f && y[1][1] == 22.0f);
	for (int r = 0; r < 2; r++) {
		assert_int_equal(ncclRedOpDestroy(on_a[r], a[r]), ncclSuccess);
		assert_int_equal(ncclRedOpDestroy(on_b[r], b[r]), ncclSuccess);
		/* Twice: NCCL's error, and nothing of ours changes. */
		assert_int_equal(ncclRedOpDestroy(on_b[r], b[r]), ncclInvalidArgument);
		assert_int_equal(ncclCommDestroy(a[r]), ncclSuccess);
		assert_int_equal(ncclCommDestroy(b[r]), ncclSuccess);
		assert_int_equal(ncclCommDestroy(c[r]), ncclSuccess);
	}
}

/*
 * PyTorch's pattern: inside a group, make the op, call with it, destroy it (NCCL
 * resolves the op when the call is made).  At ncclGroupEnd the recorded calls still
 * use the scalars they were made with, diverted.
 */
static void test_premulsum_op_destroyed_inside_group(void **state)
{
	(void)state;
	enum { N = 3 };
	static float input[N][N * RECV], output[N][RECV], want[N * RECV];
	static float device_scalars[N];
	const float scalars[N] = {0.5f, -3.0f, 1.25f};
	const void *views[N];
	for (int r = 0; r < N; r++) {
		ndet_test_fill_rank(NDET_DTYPE_F32, input[r], 0, N * RECV, 4321, r, N,
				    NDET_TEST_DATA_CANCEL);
		views[r] = input[r];
		device_scalars[r] = scalars[r];
	}
	assert_int_equal(
		ndet_reference_premulsum(views, scalars, N, want, N * RECV, NDET_DTYPE_F32),
		NDET_OK);
	ncclComm_t comms[N] = {NULL};
	start_traced_group(comms, N);
	for (int r = 0; r < N; r++) {
		ncclRedOp_t op;
		float host = scalars[r];
		const bool device = r == 1;
		assert_int_equal(ncclRedOpCreatePreMulSum(
					 &op, device ? &device_scalars[r] : &host, ncclFloat32,
					 device ? ncclScalarDevice : ncclScalarHostImmediate,
					 comms[r]),
				 ncclSuccess);
		assert_int_equal(ncclReduceScatter(input[r], output[r], RECV, ncclFloat32, op,
						   comms[r], NULL),
				 ncclSuccess);
		assert_int_equal(ncclRedOpDestroy(op, comms[r]), ncclSuccess);
	}
	assert_int_equal(ncclGroupEnd(), ncclSuccess);
	ndet_divert_trace_off();
	assert_int_equal(ndet_divert_traced("ncclReduceScatter"), 0);
	for (int r = 0; r < N; r++) {
		expect_same(NDET_DTYPE_F32, output[r], want + (size_t)r * RECV, RECV,
			    "PreMulSum op destroyed in the group", r);
		assert_int_equal(ncclCommDestroy(comms[r]), ncclSuccess);
	}
}

/* ------------------------------------------------------------------ groups */

/*
 * One group, one thread, every rank: an all-reduce, a reduce-scatter of its result, a
 * reduce of that, and an unsigned reduce-scatter (NCCL's, replayed) of the
 * all-reduce's bits.  Each reads what the one before wrote, so only issue order per
 * communicator gives these values.
 */
static void test_group_mixes_collectives_in_order(void **state)
{
	(void)state;
	enum { N = 3 };
	static float input[N][N * RECV], all[N][N * RECV], block[N][RECV], top[RECV];
	static uint32_t bits[N][RECV];
	static float want_all[N * RECV], want_block[N][RECV], want_top[RECV];
	const void *views[N];
	for (int r = 0; r < N; r++) {
		ndet_test_fill_rank(NDET_DTYPE_F32, input[r], 0, N * RECV, 1234, r, N,
				    NDET_TEST_DATA_CANCEL);
		views[r] = input[r];
	}
	assert_int_equal(
		ndet_reference_allreduce(views, N, want_all, N * RECV, NDET_DTYPE_F32, NDET_OP_SUM),
		NDET_OK);
	const void *same[N] = {want_all, want_all, want_all};
	for (int r = 0; r < N; r++)
		assert_int_equal(ndet_reference_reduce_scatter(same, N, r, want_block[r], RECV,
							       NDET_DTYPE_F32, NDET_OP_AVG),
				 NDET_OK);
	const void *blocks[N] = {want_block[0], want_block[1], want_block[2]};
	assert_int_equal(
		ndet_reference_allreduce(blocks, N, want_top, RECV, NDET_DTYPE_F32, NDET_OP_MAX),
		NDET_OK);

	ncclComm_t comms[N] = {NULL};
	start_traced_group(comms, N);
	for (int r = 0; r < N; r++) {
		assert_int_equal(ncclAllReduce(input[r], all[r], N * RECV, ncclFloat32, ncclSum,
					       comms[r], NULL),
				 ncclSuccess);
		assert_int_equal(ncclReduceScatter(all[r], bits[r], RECV, ncclUint32, ncclSum,
						   comms[r], NULL),
				 ncclSuccess);
		assert_int_equal(ncclReduceScatter(all[r], block[r], RECV, ncclFloat32, ncclAvg,
						   comms[r], NULL),
				 ncclSuccess);
		assert_int_equal(
			ncclReduce(block[r], top, RECV, ncclFloat32, ncclMax, 1, comms[r], NULL),
			ncclSuccess);
	}
	assert_int_equal(ncclGroupEnd(), ncclSuccess);
	ndet_divert_trace_off();
	/* Only the unsigned ones reached NCCL. */
	assert_int_equal(ndet_divert_traced("ncclReduceScatter"), N);
	assert_int_equal(ndet_divert_traced("ncclAllReduce"), 0);
	assert_int_equal(ndet_divert_traced("ncclReduce"), 0);
	for (int r = 0; r < N; r++) {
		expect_same(NDET_DTYPE_F32, all[r], want_all, N * RECV, "group all-reduce", r);
		expect_same(NDET_DTYPE_F32, block[r], want_block[r], RECV, "group reduce-scatter",
			    r);
		for (int i = 0; i < RECV; i++) {
			uint32_t one;
			memcpy(&one, &want_all[(size_t)r * RECV + i], sizeof(one));
			assert_int_equal(bits[r][i], (uint32_t)(one * N));
		}
	}
	expect_same(NDET_DTYPE_F32, top, want_top, RECV, "group reduce", 1);
	for (int r = 0; r < N; r++)
		assert_int_equal(ncclCommDestroy(comms[r]), ncclSuccess);
}

/* ------------------------------------------------------------------ divergence */

struct mismatch_job {
	ncclUniqueId id;
	float send[2][2 * RECV], recv[2][2 * RECV];
	ncclResult_t call[2], async[2];
};

static void mismatch_rank(int rank, void *opaque)
{
	struct mismatch_job *job = opaque;
	ncclComm_t comm = NULL;
	if (ncclCommInitRank(&comm, 2, job->id, rank) != ncclSuccess)
		return;
	/* The same count and dtype: only the collective differs. */
	job->call[rank] = rank == 0 ? ncclReduceScatter(job->send[0], job->recv[0], RECV,
							ncclFloat32, ncclSum, comm, NULL)
				    : ncclAllReduce(job->send[1], job->recv[1], RECV, ncclFloat32,
						    ncclSum, comm, NULL);
	job->async[rank] = ncclSuccess;
	(void)ncclCommGetAsyncError(comm, &job->async[rank]);
	ncclCommDestroy(comm);
}

/* A rank in a reduce-scatter never pairs with one in an all-reduce: both fail. */
static void test_different_collectives_fail(void **state)
{
	(void)state;
	static struct mismatch_job job;
	memset(&job, 0, sizeof(job));
	assert_int_equal(pncclGetUniqueId(&job.id), ncclSuccess);
	assert_int_equal(fake_nccl_run_ranks(2, mismatch_rank, &job), 0);
	struct ndet_fake_backend_counters counters;
	ndet_fake_backend_counters(&counters);
	assert_int_equal(counters.kernel_errors[NDET_KERNEL_ERR_SIGNATURE] +
				 counters.kernel_errors[NDET_KERNEL_ERR_PEER],
			 2);
	assert_true(counters.kernel_errors[NDET_KERNEL_ERR_SIGNATURE] >= 1);
	for (int r = 0; r < 2; r++) {
		/* Like a kernel launch: the call returns, the error comes asynchronously. */
		assert_int_equal(job.call[r], ncclSuccess);
		assert_int_equal(job.async[r], ncclRemoteError);
	}
}

/* ------------------------------------------------------------------ strict, stats */

/* NCCL_DET_STRICT=1 on a communicator that fell back refuses every float reduction. */
static void test_strict_names_the_collective(void **state)
{
	(void)state;
	assert_int_equal(setenv("NCCL_DET_STRICT", "1", 1), 0);
	assert_int_equal(setenv("NCCL_DET_TEST_FAIL", "alloc@1", 1), 0);
	ndet_divert_settings_changed();
	static float values[2][2 * RECV];
	static int32_t integers[2][2 * RECV];
	ncclComm_t comms[2] = {NULL};
	assert_int_equal(ncclCommInitAll(comms, 2, NULL), ncclSuccess);
	assert_int_equal(ncclGroupStart(), ncclSuccess);
	for (int r = 0; r < 2; r++) {
		assert_int_equal(ncclReduceScatter(values[r], values[r] + r * RECV, RECV,
						   ncclFloat32, ncclSum, comms[r], NULL),
				 ncclInvalidUsage);
		assert_int_equal(ncclReduce(values[r], values[r], RECV, ncclFloat32, ncclSum, 0,
					    comms[r], NULL),
				 ncclInvalidUsage);
		assert_int_equal(ncclReduceScatter(integers[r], integers[r], RECV, ncclInt32,
						   ncclSum, comms[r], NULL),
				 ncclSuccess);
	}
	assert_int_equal(ncclGroupEnd(), ncclInvalidUsage); /* the refusals fail the group */
	/* One WARN per reason and communicator, naming the first collective refused. */
	assert_int_equal(
		ndet_divert_count_log("NCCL_DET_STRICT=1: ncclReduceScatter fails", "rank 1"), 2);
	assert_int_equal(ndet_divert_count_log("NCCL_DET_STRICT=1: ", NULL), 2);
	/* The verdict line, on rank 0 alone: refused, not run in NCCL. */
	assert_int_equal(ndet_divert_count_log("NCCL-DET VERSION nccl-det", NULL), 1);
	assert_int_equal(
		ndet_divert_count_log("NCCL-DET VERSION nccl-det",
				      "not diverted (local "
				      "failure, rank 1): its floating-point reductions fail "
				      "with ncclInvalidUsage (NCCL_DET_STRICT=1)"),
		1);
	for (int r = 0; r < 2; r++) {
		struct ndet_comm_stats stats;
		assert_true(ndet_comm_stats(comms[r], &stats));
		assert_int_equal(stats.refused_calls, 2);
		assert_int_equal(stats.fallback_calls[NDET_FALLBACK_INTEGER], 1);
		assert_int_equal(ncclCommDestroy(comms[r]), ncclSuccess);
	}
}

/* NCCL_DET_STATS=1 and ncclDetCommQuery cover every collective. */
static void test_stats_and_query(void **state)
{
	(void)state;
	assert_int_equal(setenv("NCCL_DET_STATS", "1", 1), 0);
	ndet_divert_settings_changed();
	static double send[2][2 * RECV], recv[2][2 * RECV];
	double scalar = 0.25;
	ncclComm_t comms[2] = {NULL};
	ncclRedOp_t ops[2];
	assert_int_equal(ncclCommInitAll(comms, 2, NULL), ncclSuccess);
	for (int r = 0; r < 2; r++) {
		int diverted = 0;
		const char *reason = NULL;
		assert_int_equal(ncclDetCommQuery(comms[r], &diverted, &reason), ncclSuccess);
		assert_int_equal(diverted, 1);
		assert_non_null(strstr(reason, "reduce-scatters"));
		assert_int_equal(ncclRedOpCreatePreMulSum(&ops[r], &scalar, ncclFloat64,
							  ncclScalarHostImmediate, comms[r]),
				 ncclSuccess);
	}
	assert_int_equal(ncclGroupStart(), ncclSuccess);
	for (int r = 0; r < 2; r++) {
		assert_int_equal(ncclAllReduce(send[r], recv[r], 2 * RECV, ncclFloat64, ncclSum,
					       comms[r], NULL),
				 ncclSuccess);
		assert_int_equal(ncclReduceScatter(send[r], recv[r], RECV, ncclFloat64, ops[r],
						   comms[r], NULL),
				 ncclSuccess);
		assert_int_equal(ncclReduce(send[r], recv[r], 2 * RECV, ncclFloat64, ncclMin, 1,
					    comms[r], NULL),
				 ncclSuccess);
	}
	assert_int_equal(ncclGroupEnd(), ncclSuccess);
	for (int r = 0; r < 2; r++) {
		assert_int_equal(ncclRedOpDestroy(ops[r], comms[r]), ncclSuccess);
		assert_int_equal(ncclCommDestroy(comms[r]), ncclSuccess);
	}
	/* Each rank contributed 74 doubles three times. */
	char needle[160];
	snprintf(needle, sizeof(needle),
		 "diverted 3 calls, %d bytes (all-reduce 1, reduce-scatter 1, reduce 1; PreMulSum "
		 "1)",
		 3 * 2 * RECV * 8);
	assert_int_equal(ndet_divert_count_log("NCCL-DET STATS", needle), 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_reduce_scatter_tree_results, setup),
		cmocka_unit_test_setup(test_reduce_writes_the_root_only, setup),
		cmocka_unit_test_setup(test_reduce_root_and_count_zero, setup),
		cmocka_unit_test_setup(test_premulsum_host_and_device_scalars, setup),
		cmocka_unit_test_setup(test_premulsum_ops_per_communicator, setup),
		cmocka_unit_test_setup(test_premulsum_op_destroyed_inside_group, setup),
		cmocka_unit_test_setup(test_group_mixes_collectives_in_order, setup),
		cmocka_unit_test_setup(test_different_collectives_fail, setup),
		cmocka_unit_test_setup(test_strict_names_the_collective, setup),
		cmocka_unit_test_setup(test_stats_and_query, setup),
	};
	return cmocka_run_group_tests(tests, ndet_divert_group_setup, ndet_divert_group_teardown);
}
