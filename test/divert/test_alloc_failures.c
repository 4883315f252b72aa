/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Out of host memory at every allocation: a job's life (init, all-reduces eager and
 * in a group, a reduce-scatter, a PreMulSum op, a split, destroy) runs once for each
 * allocation that one rank makes, with exactly that allocation failing
 * (test/support/ndet_alloc_fail.h).  Like test_divert, this program plays
 * libnccl-det.so in front of the multi-rank fake NCCL with the host-only backend.
 * Ranks are threads of one process; then "processes" of the host-only backend (a
 * finalize and its barrier before each destroy); then each rank its own host; then
 * one thread drives every rank (ncclCommInitAll, or ncclCommInitRank in a group, and
 * each collective for all ranks in one group, as nccl-tests -g does).  A rank whose
 * call fails aborts its communicators, as an application does.
 *
 * Whatever allocation fails:
 *   - no rank waits for another that left: no rendezvous of the fake NCCL times out
 *     (a run takes far less than FAKE_NCCL_TIMEOUT_MS), which in a real job would
 *     be a hang;
 *   - a call either succeeds or says so: every call that returned ncclSuccess on a
 *     communicator without an asynchronous error wrote the exact result (f32 and f64
 *     sums of 3 ranks: the tree is rank order, so NCCL's result and nccl-det's are
 *     the same bits), and an error is ncclSystemError, or ncclRemoteError where a
 *     peer's failure reached this rank;
 *   - ranks that saw no error agree whether each communicator is diverted;
 *   - nothing is held afterwards (ndet_resources: pools, mappings, kept memory) and
 *     every engine set up is released; LeakSanitizer checks the host memory.
 *
 * Then the cases where the failing rank keeps its communicator open: a call it could
 * not record, and calls it drops while its peers run them (dropped_run).
 */
#include "config.h"

#include <math.h>
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

#include <cmocka.h>

#include "test/fake_nccl/fake_nccl.h"
#include "nccl_det.h"
#include "common/ndet_log.h"
#include "common/ndet_settings.h"
#include "protocol/ndet_teardown.h"
#include "reference/ndet_reference.h"
#include "kernels/ndet_abi.h"
#include "test/support/ndet_alloc_fail.h"
#include "test/support/ndet_divert_fixture.h"
#include "test/support/ndet_fake_backend.h"
#include "test/support/ndet_test_data.h"

#define NRANKS   3
#define COUNT    299 /* odd; the reduce-scatter uses the first NRANKS * RS_COUNT */
#define RS_COUNT 97

/* A run longer than this waited for a rank that had left (FAKE_NCCL_TIMEOUT_MS is 8 s). */
#define RUN_LIMIT_S 6.0
/* A run in which a call was never launched: below NCCL_DET_TIMEOUT (1 s, above). */
#define UNLAUNCHED_LIMIT_S 0.9

static const char *const knobs[] = {
	"NCCL_DET_TIMEOUT",   "NCCL_DET_TEST_FAIL", "FAKE_BACKEND_PROCESS_PER_RANK",
	"FAKE_NCCL_FAIL",     "NCCL_COMM_BLOCKING", "FAKE_NCCL_TIMEOUT_MS",
	"NCCL_DET_TEST_HOST",
};

static int setup(void **state)
{
	(void)state;
	if (ndet_divert_fixture_reset(knobs, sizeof(knobs) / sizeof(knobs[0]), ndet_divert_log,
				      ndet_divert_trace) != 0)
		return -1;
	/* A rank that waits for one whose call failed gives up after a second. */
	if (setenv("NCCL_DET_TIMEOUT", "1", 1) != 0 ||
	    setenv("FAKE_NCCL_TIMEOUT_MS", "8000", 1) != 0)
		return -1;
	ndet_divert_settings_changed();
	return 0;
}

static double now_seconds(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------ data */

/* Inputs and the exact results, the same for every run. */
static struct {
	float in32[NRANKS][COUNT];
	double in64[NRANKS][COUNT];
	float sum32[COUNT];
	double sum64[COUNT];
	float scalars[NRANKS]; /* each rank's PreMulSum factor */
	float premul32[COUNT]; /* the PreMulSum of in32 */
} data;

/* Every rank's `count` elements of `dtype` at inputs[r], and their tree sum. */
static void data_fill_one(ndet_dtype_t dtype, void *const inputs[NRANKS], void *sum, uint64_t seed)
{
	const void *in[NRANKS];
	for (int r = 0; r < NRANKS; r++) {
		ndet_test_fill_rank(dtype, inputs[r], 0, COUNT, seed, r, NRANKS,
				    NDET_TEST_DATA_CANCEL);
		in[r] = inputs[r];
	}
	assert_int_equal(ndet_reference_allreduce(in, NRANKS, sum, COUNT, dtype, NDET_OP_SUM),
			 NDET_OK);
}

static void data_fill(void)
{
	void *in32[NRANKS], *in64[NRANKS];
	for (int r = 0; r < NRANKS; r++) {
		in32[r] = data.in32[r];
		in64[r] = data.in64[r];
	}
	data_fill_one(NDET_DTYPE_F32, in32, data.sum32, 71);
	data_fill_one(NDET_DTYPE_F64, in64, data.sum64, 72);
	const void *in[NRANKS];
	for (int r = 0; r < NRANKS; r++) {
		data.scalars[r] = 0.75f + 0.3f * (float)r;
		in[r] = data.in32[r];
	}
	assert_int_equal(ndet_reference_premulsum(in, data.scalars, NRANKS, data.premul32, COUNT,
						  NDET_DTYPE_F32),
			 NDET_OK);
}

/* ------------------------------------------------------------------ one run */

enum step {
	STEP_INIT,
	STEP_EAGER,    /* ncclAllReduce f32 */
	STEP_GROUP_AR, /* in a group: ncclAllReduce f64 ... */
	STEP_GROUP_RS, /* ... and ncclReduceScatter f32 */
	STEP_GROUP_END,
	STEP_IN_PLACE, /* ncclAllReduce f32, in place */
	STEP_PREMUL,   /* ncclRedOpCreatePreMulSum, an all-reduce with it, its destroy */
	STEP_SPLIT,    /* ncclCommSplit, every rank color 0 */
	STEP_CHILD,    /* ncclAllReduce f64 on the child */
	STEP_ASYNC,    /* ncclCommGetAsyncError of the parent */
	STEP_CHILD_ASYNC,
	STEP_DESTROY,
	STEP_CHILD_DESTROY,
	STEP_COUNT
};

static const char *const step_names[STEP_COUNT] = {
	"init",
	"eager all-reduce",
	"grouped all-reduce",
	"grouped reduce-scatter",
	"group end",
	"in-place all-reduce",
	"PreMulSum all-reduce",
	"split",
	"child's all-reduce",
	"async error",
	"child's async error",
	"destroy",
	"child's destroy",
};

/* A step that did not run (an earlier one failed on this rank). */
#define NOT_RUN ((ncclResult_t)-1)

/* Buffers of one rank in one run. */
struct rank_run {
	float out32[COUNT], rs32[RS_COUNT], place32[COUNT], premul32[COUNT];
	double out64[COUNT], child64[COUNT];
	ncclResult_t result[STEP_COUNT];
	int diverted, child_diverted; /* -1: no communicator */
	int set_up;                   /* diverted right after a successful init; -1: none */
	/* An all-reduce or reduce-scatter failed with ncclSystemError; the parent's
	 * ncclCommGetAsyncError then. */
	bool call_failed;
	ncclResult_t async_then;
	unsigned long allocations;
	bool fired;
	bool group_open; /* between ncclGroupStart and ncclGroupEnd */
};

struct run {
	int target;        /* the rank whose allocation fails */
	unsigned long nth; /* which of its allocations; 0: none */
	bool one_thread;   /* one thread drives every rank (one_thread_main) */
	bool init_group;   /* ... and creates them with ncclCommInitRank in a group */
	int unlaunched;    /* calls the target could not launch for want of memory */
	ncclUniqueId id;
	struct rank_run rank[NRANKS];
};

/* The steps one thread driving every rank runs (it splits nothing). */
static bool step_runs(const struct run *run, int step)
{
	return !run->one_thread || step == STEP_INIT || step == STEP_EAGER ||
	       step == STEP_GROUP_AR || step == STEP_GROUP_RS || step == STEP_GROUP_END ||
	       step == STEP_ASYNC || step == STEP_DESTROY;
}

static int diverted_of(ncclComm_t comm)
{
	int answer = -1;
	const char *reason = NULL;
	if (comm == NULL || ncclDetCommQuery(comm, &answer, &reason) != ncclSuccess)
		return -1;
	return answer;
}

static ncclResult_t async_of(ncclComm_t comm)
{
	ncclResult_t async = ncclInternalError;
	if (ncclCommGetAsyncError(comm, &async) != ncclSuccess)
		return ncclInternalError;
	return async;
}

/* Poison: no result of a call looks like it. */
static void poison(void *buffer, size_t bytes)
{
	memset(buffer, 0x7f, bytes);
}

/*
 * One step of the life; false once it failed.  What an application does then
 * (PyTorch's process group, a launcher that sees a rank fail): it aborts its
 * communicators and stops using them.
 */
static bool rank_step(struct rank_run *me, int rank, enum step step, ncclComm_t comm,
		      ncclComm_t *child)
{
	ncclResult_t *result = &me->result[step];
	switch (step) {
	case STEP_EAGER:
		*result = ncclAllReduce(data.in32[rank], me->out32, COUNT, ncclFloat32, ncclSum,
					comm, NULL);
		break;
	case STEP_GROUP_AR:
		*result = ncclGroupStart();
		me->group_open = *result == ncclSuccess;
		if (*result == ncclSuccess)
			*result = ncclAllReduce(data.in64[rank], me->out64, COUNT, ncclFloat64,
						ncclSum, comm, NULL);
		break;
	case STEP_GROUP_RS:
		*result = ncclReduceScatter(data.in32[rank], me->rs32, RS_COUNT, ncclFloat32,
					    ncclSum, comm, NULL);
		break;
	case STEP_GROUP_END:
		*result = ncclGroupEnd();
		me->group_open = false;
		break;
	case STEP_IN_PLACE:
		*result = ncclAllReduce(me->place32, me->place32, COUNT, ncclFloat32, ncclSum, comm,
					NULL);
		break;
	case STEP_PREMUL: {
		ncclRedOp_t op;
		*result = ncclRedOpCreatePreMulSum(&op, &data.scalars[rank], ncclFloat32,
						   ncclScalarHostImmediate, comm);
		if (*result != ncclSuccess)
			break;
		*result = ncclAllReduce(data.in32[rank], me->premul32, COUNT, ncclFloat32, op, comm,
					NULL);
		const ncclResult_t destroyed = ncclRedOpDestroy(op, comm);
		if (*result == ncclSuccess)
			*result = destroyed;
		break;
	}
	case STEP_SPLIT:
		*result = ncclCommSplit(comm, 0, rank, child, NULL);
		break;
	case STEP_CHILD:
		*result = ncclAllReduce(data.in64[rank], me->child64, COUNT, ncclFloat64, ncclSum,
					*child, NULL);
		break;
	case STEP_ASYNC:
		*result = async_of(comm);
		break;
	case STEP_CHILD_ASYNC:
		*result = async_of(*child);
		break;
	default:
		fail();
	}
	return *result == ncclSuccess;
}

/*
 * Ranks as processes: a finalize (with its barrier) before each destroy, the child's
 * inside a group (its barrier then runs at the group's end).
 */
static bool ranks_are_processes;

static ncclResult_t rank_close(ncclComm_t comm, bool in_group)
{
	if (ranks_are_processes) {
		ncclResult_t finalized = in_group ? ncclGroupStart() : ncclSuccess;
		if (finalized == ncclSuccess)
			finalized = ncclCommFinalize(comm);
		if (in_group) {
			const ncclResult_t end = ncclGroupEnd();
			if (finalized == ncclSuccess)
				finalized = end;
		}
		if (finalized != ncclSuccess) {
			(void)ncclCommAbort(comm);
			return finalized;
		}
	}
	return ncclCommDestroy(comm);
}

static void rank_main(int rank, void *opaque)
{
	struct run *run = opaque;
	struct rank_run *me = &run->rank[rank];
	ncclComm_t comm = NULL, child = NULL;

	for (int s = 0; s < STEP_COUNT; s++)
		me->result[s] = NOT_RUN;
	poison(me->out32, sizeof(me->out32));
	poison(me->premul32, sizeof(me->premul32));
	poison(me->rs32, sizeof(me->rs32));
	poison(me->out64, sizeof(me->out64));
	poison(me->child64, sizeof(me->child64));
	memcpy(me->place32, data.in32[rank], sizeof(me->place32));
	me->diverted = me->child_diverted = -1;
	me->group_open = false;

	ndet_alloc_fail_arm(rank == run->target ? run->nth : 0);
	me->result[STEP_INIT] = ncclCommInitRank(&comm, NRANKS, run->id, rank);
	/* A failed init may leave NCCL's communicator, for the application to abort. */
	bool ok = me->result[STEP_INIT] == ncclSuccess;
	me->set_up = ok ? diverted_of(comm) : -1;
	int failed = -1;
	for (int s = STEP_EAGER; ok && s < STEP_DESTROY; s++) {
		if ((s == STEP_CHILD || s == STEP_CHILD_ASYNC) && child == NULL)
			continue;
		ok = rank_step(me, rank, (enum step)s, comm, &child);
		failed = ok ? -1 : s;
	}
	if (ok || comm != NULL) {
		me->diverted = diverted_of(comm);
		me->child_diverted = diverted_of(child);
	}
	if (me->group_open) /* a call in the group failed: close it */
		me->result[STEP_GROUP_END] = ncclGroupEnd();
	/*
	 * An all-reduce or reduce-scatter this rank could not run leaves its communicator
	 * failed: its next call would pair with its peers' of that one.
	 */
	me->call_failed =
		(failed == STEP_EAGER || failed == STEP_GROUP_AR || failed == STEP_GROUP_RS ||
		 failed == STEP_GROUP_END || failed == STEP_IN_PLACE) &&
		me->result[failed] == ncclSystemError;
	me->async_then = me->call_failed ? async_of(comm) : ncclSuccess;
	if (child != NULL)
		me->result[STEP_CHILD_DESTROY] =
			ok ? rank_close(child, true) : ncclCommAbort(child);
	if (comm != NULL)
		me->result[STEP_DESTROY] = ok ? rank_close(comm, false) : ncclCommAbort(comm);
	me->allocations = ndet_alloc_fail_disarm();
	me->fired = ndet_alloc_fail_fired();
}

/*
 * nccl-tests -g: one thread holds every rank (ncclCommInitAll) and issues each
 * collective for all of them in one group.  Its allocations count as rank
 * run->target's.
 */
static void one_thread_main(struct run *run)
{
	ncclComm_t comms[NRANKS] = {NULL};
	for (int r = 0; r < NRANKS; r++) {
		struct rank_run *me = &run->rank[r];
		for (int s = 0; s < STEP_COUNT; s++)
			me->result[s] = NOT_RUN;
		poison(me->out32, sizeof(me->out32));
		poison(me->rs32, sizeof(me->rs32));
		poison(me->out64, sizeof(me->out64));
		me->diverted = me->child_diverted = -1;
	}
	ndet_alloc_fail_arm(run->nth);
	ncclResult_t init = ncclSuccess;
	if (run->init_group) {
		/* Every rank is issued whatever one returned: NCCL inits them at the end. */
		init = ncclGroupStart();
		for (int r = 0; r < NRANKS; r++) {
			const ncclResult_t one = ncclCommInitRank(&comms[r], NRANKS, run->id, r);
			if (init == ncclSuccess)
				init = one;
		}
		const ncclResult_t end = ncclGroupEnd();
		if (init == ncclSuccess)
			init = end;
	} else {
		init = ncclCommInitAll(comms, NRANKS, NULL);
	}
	bool ok = init == ncclSuccess;
	for (int r = 0; r < NRANKS; r++)
		run->rank[r].result[STEP_INIT] = init;
	for (int r = 0; r < NRANKS; r++)
		run->rank[r].set_up = init == ncclSuccess ? diverted_of(comms[r]) : -1;
	/* Two groups: the f32 all-reduces; the f64 all-reduces with the reduce-scatters. */
	for (int g = 0; ok && g < 2; g++) {
		ncclResult_t end = ncclGroupStart();
		for (int r = 0; end == ncclSuccess && r < NRANKS; r++) {
			struct rank_run *me = &run->rank[r];
			if (g == 0) {
				me->result[STEP_EAGER] =
					ncclAllReduce(data.in32[r], me->out32, COUNT, ncclFloat32,
						      ncclSum, comms[r], NULL);
				continue;
			}
			me->result[STEP_GROUP_AR] =
				ncclAllReduce(data.in64[r], me->out64, COUNT, ncclFloat64, ncclSum,
					      comms[r], NULL);
			me->result[STEP_GROUP_RS] =
				ncclReduceScatter(data.in32[r], me->rs32, RS_COUNT, ncclFloat32,
						  ncclSum, comms[r], NULL);
		}
		end = ncclGroupEnd();
		for (int r = 0; r < NRANKS; r++) {
			struct rank_run *me = &run->rank[r];
			ncclResult_t *call =
				g == 0 ? &me->result[STEP_EAGER] : &me->result[STEP_GROUP_END];
			/* A group's calls ran only if its end says so. */
			if (g == 0 && *call == ncclSuccess)
				*call = end;
			if (g == 1)
				*call = end;
			ok = ok && end == ncclSuccess;
		}
	}
	for (int r = 0; r < NRANKS; r++) {
		struct rank_run *me = &run->rank[r];
		if (comms[r] == NULL)
			continue;
		if (ok) {
			me->result[STEP_ASYNC] = async_of(comms[r]);
			ok = me->result[STEP_ASYNC] == ncclSuccess;
		}
		me->diverted = diverted_of(comms[r]);
	}
	for (int r = 0; r < NRANKS; r++)
		if (comms[r] != NULL)
			run->rank[r].result[STEP_DESTROY] =
				ok ? ncclCommDestroy(comms[r]) : ncclCommAbort(comms[r]);
	run->rank[run->target].allocations = ndet_alloc_fail_disarm();
	run->rank[run->target].fired = ndet_alloc_fail_fired();
}

/* ------------------------------------------------------------------ judging a run */

static char verdict[4096];

static void describe(const struct run *run, const char *fmt, ...)
{
	va_list ap;
	size_t used = (size_t)snprintf(verdict, sizeof(verdict),
				       "rank %d, allocation %lu: ", run->target, run->nth);
	va_start(ap, fmt);
	vsnprintf(verdict + used, sizeof(verdict) - used, fmt, ap);
	va_end(ap);
}

static const char *result_name(ncclResult_t result)
{
	return result == NOT_RUN ? "-" : ncclGetErrorString(result);
}

static bool error_allowed(ncclResult_t result)
{
	return result == NOT_RUN || result == ncclSuccess || result == ncclSystemError ||
	       result == ncclRemoteError;
}

/* A call's output where the call and its communicator said it succeeded. */
static bool output_exact(const void *out, const void *expected, size_t bytes)
{
	return memcmp(out, expected, bytes) == 0;
}

/* Whether every step of this rank ran and succeeded. */
static bool rank_clean(const struct run *run, const struct rank_run *me)
{
	for (int s = 0; s < STEP_COUNT; s++)
		if (me->result[s] != ncclSuccess && (step_runs(run, s) || me->result[s] != NOT_RUN))
			return false;
	return true;
}

/* Whether ranks r and k do the same with both communicators; `verdict` if not. */
static bool ranks_agree(const struct run *run, int r, int k)
{
	const struct rank_run *a = &run->rank[r], *b = &run->rank[k];
	if (a->diverted != b->diverted) {
		describe(run, "rank %d %s, rank %d %s", r, a->diverted ? "diverts" : "falls back",
			 k, b->diverted ? "diverts" : "falls back");
		return false;
	}
	if (a->child_diverted != b->child_diverted) {
		describe(run, "the split: rank %d %s, rank %d %s", r,
			 a->child_diverted ? "diverts" : "falls back", k,
			 b->child_diverted ? "diverts" : "falls back");
		return false;
	}
	return true;
}

/* false, with `verdict` saying why, if the run broke a promise of this file's header. */
static bool run_judge(const struct run *run)
{
	for (int r = 0; r < NRANKS; r++) {
		const struct rank_run *me = &run->rank[r];
		const ncclResult_t *result = me->result;
		for (int s = 0; s < STEP_COUNT; s++) {
			if (!error_allowed(result[s])) {
				describe(run, "rank %d's %s returned %s", r, step_names[s],
					 result_name(result[s]));
				return false;
			}
		}
		if (result[STEP_INIT] != ncclSuccess)
			continue;
		if (me->call_failed && me->async_then == ncclSuccess) {
			describe(run,
				 "rank %d: a call failed with ncclSystemError, and its "
				 "communicator reports no error (its next call would pair with its "
				 "peers' of that one)",
				 r);
			return false;
		}
		/* Outputs are known good only where the communicator said so at the end. */
		const bool parent_ok = result[STEP_ASYNC] == ncclSuccess;
		const bool group_ok = result[STEP_GROUP_END] == ncclSuccess;
		const struct {
			enum step step;
			bool ok;
			const void *out, *expected;
			size_t bytes;
		} checks[] = {
			{STEP_EAGER, parent_ok, me->out32, data.sum32, sizeof(data.sum32)},
			{STEP_GROUP_AR, parent_ok && group_ok, me->out64, data.sum64,
			 sizeof(data.sum64)},
			{STEP_GROUP_RS, parent_ok && group_ok, me->rs32, data.sum32 + r * RS_COUNT,
			 sizeof(me->rs32)},
			{STEP_IN_PLACE, parent_ok, me->place32, data.sum32, sizeof(data.sum32)},
			{STEP_PREMUL, parent_ok, me->premul32, data.premul32,
			 sizeof(data.premul32)},
			{STEP_CHILD,
			 result[STEP_SPLIT] == ncclSuccess &&
				 result[STEP_CHILD_ASYNC] == ncclSuccess,
			 me->child64, data.sum64, sizeof(data.sum64)},
		};
		for (size_t c = 0; c < sizeof(checks) / sizeof(checks[0]); c++) {
			if (!checks[c].ok || result[checks[c].step] != ncclSuccess)
				continue;
			if (!output_exact(checks[c].out, checks[c].expected, checks[c].bytes)) {
				describe(run,
					 "rank %d's %s returned ncclSuccess and its communicator "
					 "reports no error, but its output is not the sum",
					 r, step_names[checks[c].step]);
				return false;
			}
		}
	}
	/* Every rank whose init succeeded came out of the setup as its peers did. */
	for (int r = 0; r < NRANKS; r++) {
		for (int k = r + 1; k < NRANKS; k++) {
			const int a = run->rank[r].set_up, b = run->rank[k].set_up;
			if (a >= 0 && b >= 0 && a != b) {
				describe(run, "after init, rank %d %s and rank %d %s", r,
					 a ? "diverts" : "does not divert", k,
					 b ? "diverts" : "does not divert");
				return false;
			}
		}
	}
	/*
	 * Ranks that saw no error agree on what their communicators do at the end.  (One
	 * that failed, or saw a peer fail, may have left its engine: "poisoned".)
	 */
	for (int r = 0; r < NRANKS; r++) {
		const struct rank_run *a = &run->rank[r];
		for (int k = r + 1; k < NRANKS; k++) {
			const struct rank_run *b = &run->rank[k];
			if (rank_clean(run, a) && rank_clean(run, b) && !ranks_agree(run, r, k))
				return false;
		}
	}
	return true;
}

static bool run_is_clean(const struct run *run)
{
	for (int r = 0; r < NRANKS; r++)
		if (!rank_clean(run, &run->rank[r]))
			return false;
	return true;
}

/* Runs one life; fails the test if it broke a promise.  Returns the target's count. */
static unsigned long run_once(struct run *run, bool *failed_any)
{
	struct ndet_resources before, after;
	struct ndet_fake_backend_counters engines_before, engines_after;
	ndet_resources_get(&before);
	ndet_fake_backend_counters(&engines_before);
	assert_int_equal(pncclGetUniqueId(&run->id), ncclSuccess);
	const double start = now_seconds();
	if (run->one_thread)
		one_thread_main(run);
	else
		assert_int_equal(fake_nccl_run_ranks(NRANKS, rank_main, run), 0);
	const double took = now_seconds() - start;
	ndet_resources_get(&after);
	ndet_fake_backend_counters(&engines_after);

	bool good = run_judge(run);
	if (good && took > RUN_LIMIT_S) {
		describe(run, "the run took %.1f s: a rank waited for one that had left", took);
		good = false;
	}
	/*
	 * A call the target could not launch (memory ran out recording or running it)
	 * tells its peers at once (the backend's fail_call): none of them waits
	 * NCCL_DET_TIMEOUT (a second) for it.
	 */
	run->unlaunched =
		engines_after.calls_failed_unlaunched - engines_before.calls_failed_unlaunched;
	if (good && run->unlaunched > 0 && took >= UNLAUNCHED_LIMIT_S) {
		describe(run,
			 "a call the target could not launch, and the run took %.2f s: a peer "
			 "waited NCCL_DET_TIMEOUT for it",
			 took);
		good = false;
	}
	if (good && memcmp(&before, &after, sizeof(before)) != 0) {
		describe(run,
			 "held after the run: %lld allocations (%lld bytes), %lld mappings, %lld "
			 "pools waiting, %lld pending, %lld kept (before: %lld, %lld, %lld, %lld, "
			 "%lld, %lld)",
			 (long long)after.allocations, (long long)after.bytes,
			 (long long)after.ipc_imports, (long long)after.deferred_pools,
			 (long long)after.pending_pools, (long long)after.leaked_pools,
			 (long long)before.allocations, (long long)before.bytes,
			 (long long)before.ipc_imports, (long long)before.deferred_pools,
			 (long long)before.pending_pools, (long long)before.leaked_pools);
		good = false;
	}
	/* Pools and mappings: ndet_resources above.  Engines set up: each released. */
	const int created = engines_after.engines_created - engines_before.engines_created;
	const int released = engines_after.engines_destroyed - engines_before.engines_destroyed;
	if (good && released != created) {
		describe(run, "%d engines set up, %d released", created, released);
		good = false;
	}
	if (good && run->nth == 0 && !run_is_clean(run)) {
		describe(run, "a run without a failure failed");
		good = false;
	}
	if (good && run->nth == 0 &&
	    (run->rank[0].diverted != 1 ||
	     (step_runs(run, STEP_CHILD) && run->rank[0].child_diverted != 1))) {
		describe(run, "a run without a failure did not divert");
		good = false;
	}
	if (!good) {
		print_error("%s\n", verdict);
		for (int r = 0; r < NRANKS; r++) {
			print_error("  rank %d:", r);
			for (int s = 0; s < STEP_COUNT; s++)
				print_error(" [%s]", result_name(run->rank[r].result[s]));
			print_error(" (diverted %d/%d)\n", run->rank[r].diverted,
				    run->rank[r].child_diverted);
		}
		print_error("  the failed allocation:\n");
		ndet_alloc_fail_print_site(stderr);
		*failed_any = true;
	}
	return run->rank[run->target].allocations;
}

/*
 * Every allocation of `target` (or of the one thread), one after the other; under a
 * sanitizer (NDET_SANITIZER, make check's), every other one from `odd`: the
 * sanitizers' checks make each run slower, and a run whose failure leaves a peer
 * waiting takes NCCL_DET_TIMEOUT (a second).
 */
static void sweep(int target, bool one_thread, bool init_group, bool odd)
{
	const char *sanitizer = getenv("NDET_SANITIZER");
	const unsigned long stride = sanitizer != NULL && sanitizer[0] != '\0' ? 2 : 1;
	static struct run run;
	bool failed_any = false;

	data_fill();
	memset(&run, 0, sizeof(run));
	run.target = target;
	run.one_thread = one_thread;
	run.init_group = init_group;
	const unsigned long total = run_once(&run, &failed_any);
	assert_false(failed_any);
	assert_true(total > 0);
	unsigned long fired = 0;
	int unlaunched_runs = 0;
	for (unsigned long nth = stride == 2 && odd ? 1 : stride; nth <= total + 2; nth += stride) {
		memset(&run, 0, sizeof(run));
		run.target = target;
		run.one_thread = one_thread;
		run.init_group = init_group;
		run.nth = nth;
		(void)run_once(&run, &failed_any);
		fired += run.rank[target].fired;
		unlaunched_runs += run.unlaunched > 0;
	}
	print_message("rank %d: %lu allocations in a run, %lu failed one at a time, %d of them "
		      "a call it could not launch\n",
		      target, total, fired, unlaunched_runs);
	assert_false(failed_any);
	/* Recording a call in a group allocates: some failure leaves a call unlaunched. */
	if (stride == 1)
		assert_true(unlaunched_runs > 0);
	/* Each allocation tried was reached (the order may vary a little from run to run). */
	assert_true(fired >= total / stride - total / 10);
}

static void test_rank0_out_of_memory(void **state)
{
	(void)state;
	sweep(0, false, false, false);
}

/*
 * Every rank a process of its own (the host-only backend's pids): pools go by the
 * finalize's barrier or the detach protocol instead of with the last thread.
 */
static void test_processes_out_of_memory(void **state)
{
	(void)state;
	assert_int_equal(setenv("FAKE_BACKEND_PROCESS_PER_RANK", "1", 1), 0);
	ndet_divert_settings_changed();
	ranks_are_processes = true;
	sweep(1, false, false, true);
	ranks_are_processes = false;
}

/*
 * Every rank its own host (NCCL_DET_TEST_HOST): the calls run the multi-host stages,
 * with NCCL's sends and receives between them.  Three hosts of one rank sum in rank
 * order, so the results are the same bits.
 */
static void test_hosts_out_of_memory(void **state)
{
	(void)state;
	assert_int_equal(setenv("NCCL_DET_TEST_HOST", "A@0;B@1;C@2", 1), 0);
	ndet_divert_settings_changed();
	sweep(2, false, false, true);
}

/*
 * The ranks of a case in which rank 0 keeps its communicator open (a call rank 0
 * never runs must not leave its peers waiting NCCL_DET_TIMEOUT, here 5 s), each
 * running `each_rank` from the same data, a fresh id and a barrier of all ranks;
 * the fake backend's counters before and after.
 */
static void run_kept_open(ncclUniqueId *id, pthread_barrier_t *barrier,
			  void (*each_rank)(int rank, void *opaque),
			  struct ndet_fake_backend_counters *before,
			  struct ndet_fake_backend_counters *after)
{
	assert_int_equal(setenv("NCCL_DET_TIMEOUT", "5", 1), 0);
	ndet_divert_settings_changed();
	data_fill();
	assert_int_equal(pncclGetUniqueId(id), ncclSuccess);
	assert_int_equal(pthread_barrier_init(barrier, NULL, NRANKS), 0);
	ndet_fake_backend_counters(before);
	assert_int_equal(fake_nccl_run_ranks(NRANKS, each_rank, NULL), 0);
	ndet_fake_backend_counters(after);
	pthread_barrier_destroy(barrier);
}

/*
 * Rank 0's peers (ranks 1 ...) were told of its call that never ran: no kernel of
 * theirs timed out, none waited as long as NCCL_DET_TIMEOUT (5 s), and each fails
 * with a peer's error (ncclRemoteError), not one of its own.
 */
static void assert_peers_told(const struct ndet_fake_backend_counters *before,
			      const struct ndet_fake_backend_counters *after,
			      const double seconds[NRANKS], const ncclResult_t async[NRANKS])
{
	assert_int_equal(after->kernel_errors[NDET_KERNEL_ERR_TIMEOUT] -
				 before->kernel_errors[NDET_KERNEL_ERR_TIMEOUT],
			 0);
	for (int r = 1; r < NRANKS; r++) {
		if (seconds[r] >= 2.0)
			fail_msg("rank %d waited %.1f s for a call rank 0 never ran", r,
				 seconds[r]);
		assert_int_equal(async[r], ncclRemoteError);
	}
}

/*
 * A call that rank 0 cannot record in a group (its first allocation there fails)
 * while it keeps its communicator open: the peers' calls of it fail at once, with a
 * peer's error, instead of waiting NCCL_DET_TIMEOUT (5 s here) for a rank that will
 * never launch it.  (In the sweeps above the failing rank aborts its communicator at
 * once, which tells its peers too.)
 */
static struct {
	ncclUniqueId id;
	pthread_barrier_t barrier;
	ncclResult_t recorded, ended, peer_async[NRANKS];
	double peer_seconds[NRANKS];
	bool fired, first_ok[NRANKS], aborted[NRANKS];
} unrecorded;

static void unrecorded_rank(int rank, void *opaque)
{
	(void)opaque;
	static float out[NRANKS][COUNT];
	ncclComm_t comm = NULL;
	/* The setup, and one call that works (judged by the test, not on this thread). */
	const bool init = ncclCommInitRank(&comm, NRANKS, unrecorded.id, rank) == ncclSuccess;
	unrecorded.first_ok[rank] = init &&
				    ncclAllReduce(data.in32[rank], out[rank], COUNT, ncclFloat32,
						  ncclSum, comm, NULL) == ncclSuccess &&
				    async_of(comm) == ncclSuccess && diverted_of(comm) == 1 &&
				    output_exact(out[rank], data.sum32, sizeof(data.sum32));
	pthread_barrier_wait(&unrecorded.barrier);
	if (rank == 0) {
		assert_int_equal(ncclGroupStart(), ncclSuccess);
		ndet_alloc_fail_arm(1);
		unrecorded.recorded = ncclAllReduce(data.in32[rank], out[rank], COUNT, ncclFloat32,
						    ncclSum, comm, NULL);
		(void)ndet_alloc_fail_disarm();
		unrecorded.fired = ndet_alloc_fail_fired();
		unrecorded.ended = ncclGroupEnd();
	} else {
		const double start = now_seconds();
		(void)ncclAllReduce(data.in32[rank], out[rank], COUNT, ncclFloat32, ncclSum, comm,
				    NULL);
		unrecorded.peer_async[rank] = async_of(comm);
		unrecorded.peer_seconds[rank] = now_seconds() - start;
	}
	/* Rank 0 keeps its communicator until every peer is through. */
	pthread_barrier_wait(&unrecorded.barrier);
	unrecorded.aborted[rank] = init && ncclCommAbort(comm) == ncclSuccess;
}

static void test_unrecorded_call_tells_peers(void **state)
{
	(void)state;
	memset(&unrecorded, 0, sizeof(unrecorded));
	struct ndet_fake_backend_counters before, after;
	run_kept_open(&unrecorded.id, &unrecorded.barrier, unrecorded_rank, &before, &after);
	for (int r = 0; r < NRANKS; r++) {
		assert_true(unrecorded.first_ok[r]);
		assert_true(unrecorded.aborted[r]);
	}
	assert_true(unrecorded.fired);
	assert_int_equal(unrecorded.recorded, ncclSystemError);
	assert_int_equal(unrecorded.ended, ncclSystemError);
	assert_int_equal(after.calls_failed_unlaunched - before.calls_failed_unlaunched, 1);
	assert_peers_told(&before, &after, unrecorded.peer_seconds, unrecorded.peer_async);
}

/* ---------------------------------------------- calls rank 0 drops while its peers run them */

/*
 * Rank 0 drops a call its peers run (out of memory recording or running it, or NCCL
 * failing the group on rank 0 alone) and keeps its communicator, as an application
 * that goes on after an error does.  Whatever the case: rank 0's later all-reduce
 * fails with ncclSystemError and writes nothing (it must not pair with its peers'
 * call of the dropped one), the peers' call of it fails with a peer's error within a
 * second or two (NCCL_DET_TIMEOUT is 5 s), and no rank returns ncclSuccess with a
 * wrong result.
 */
enum dropped_case {
	DROPPED_PENDING,     /* the first call of a non-blocking communicator, not set up */
	DROPPED_NCCL_GROUP,  /* NCCL's ncclGroupEnd fails on rank 0 alone */
	DROPPED_RUN_FORWARD, /* out of memory running the group: a float call and an
				int32 one for NCCL behind it (which still runs) */
};

static struct {
	enum dropped_case which;
	ncclUniqueId id;
	pthread_barrier_t barrier;
	ncclResult_t recorded, ended, next, next_async, peer_async[NRANKS];
	double peer_seconds[NRANKS];
	bool fired;
	float out[NRANKS][COUNT], next_out[COUNT];
	int32_t in_int[NRANKS][COUNT], out_int[NRANKS][COUNT], sum_int[COUNT];
	ncclResult_t int_result[NRANKS];
} dropped;

static ncclResult_t dropped_wait(ncclComm_t comm, ncclResult_t result)
{
	for (int i = 0; i < 4000000 && result == ncclInProgress; i++)
		if (ncclCommGetAsyncError(comm, &result) != ncclSuccess)
			return ncclInternalError;
	return result;
}

/* Rank `rank`'s calls of the group that rank 0 drops. */
static ncclResult_t dropped_group(int rank, ncclComm_t comm)
{
	ncclResult_t result = ncclGroupStart();
	if (result != ncclSuccess)
		return result;
	if (rank == 0 && dropped.which == DROPPED_PENDING)
		ndet_alloc_fail_arm(1);
	result = ncclAllReduce(data.in32[rank], dropped.out[rank], COUNT, ncclFloat32, ncclSum,
			       comm, NULL);
	if (rank == 0 && dropped.which == DROPPED_PENDING) {
		(void)ndet_alloc_fail_disarm();
		dropped.fired = ndet_alloc_fail_fired();
	}
	if (rank == 0)
		dropped.recorded = result;
	if (dropped.which == DROPPED_RUN_FORWARD)
		dropped.int_result[rank] =
			ncclAllReduce(dropped.in_int[rank], dropped.out_int[rank], COUNT, ncclInt32,
				      ncclSum, comm, NULL);
	if (rank == 0 && dropped.which == DROPPED_NCCL_GROUP)
		assert_int_equal(setenv("FAKE_NCCL_FAIL", "ncclGroupEnd", 1), 0);
	if (rank == 0 && dropped.which == DROPPED_RUN_FORWARD)
		ndet_alloc_fail_arm(1);
	result = ncclGroupEnd();
	if (rank == 0 && dropped.which == DROPPED_RUN_FORWARD) {
		(void)ndet_alloc_fail_disarm();
		dropped.fired = ndet_alloc_fail_fired();
	}
	if (rank == 0 && dropped.which == DROPPED_NCCL_GROUP) {
		assert_int_equal(unsetenv("FAKE_NCCL_FAIL"), 0);
		dropped.fired = result != ncclSuccess;
	}
	return dropped_wait(comm, result);
}

static void dropped_rank(int rank, void *opaque)
{
	(void)opaque;
	ncclComm_t comm = NULL;
	ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
	config.blocking = dropped.which == DROPPED_PENDING ? 0 : 1;
	assert_int_equal(dropped_wait(comm, ncclCommInitRankConfig(&comm, NRANKS, dropped.id, rank,
								   &config)),
			 ncclSuccess);
	if (dropped.which != DROPPED_PENDING) {
		/* Set up, and one call that works. */
		assert_int_equal(ncclAllReduce(data.in32[rank], dropped.out[rank], COUNT,
					       ncclFloat32, ncclSum, comm, NULL),
				 ncclSuccess);
		assert_true(output_exact(dropped.out[rank], data.sum32, sizeof(data.sum32)));
		assert_int_equal(diverted_of(comm), 1);
	}
	poison(dropped.out[rank], sizeof(dropped.out[rank]));
	/*
	 * Rank 0 first where only its group may see FAKE_NCCL_FAIL, which every thread
	 * reads; all at once where its group waits for theirs in NCCL.
	 */
	const bool first = dropped.which != DROPPED_RUN_FORWARD;
	if (rank == 0) {
		dropped.ended = dropped_group(rank, comm);
		if (first)
			pthread_barrier_wait(&dropped.barrier);
		/* It goes on: its next all-reduce (which the peers never make). */
		dropped.next =
			dropped_wait(comm, ncclAllReduce(data.in32[rank], dropped.next_out, COUNT,
							 ncclFloat32, ncclSum, comm, NULL));
		dropped.next_async = async_of(comm);
	} else {
		if (first)
			pthread_barrier_wait(&dropped.barrier);
		const double start = now_seconds();
		(void)dropped_group(rank, comm);
		dropped.peer_async[rank] = async_of(comm);
		dropped.peer_seconds[rank] = now_seconds() - start;
	}
	pthread_barrier_wait(&dropped.barrier);
	assert_int_equal(ncclCommAbort(comm), ncclSuccess);
}

static void dropped_run(enum dropped_case which)
{
	memset(&dropped, 0, sizeof(dropped));
	dropped.which = which;
	for (int i = 0; i < COUNT; i++) {
		for (int r = 0; r < NRANKS; r++) {
			dropped.in_int[r][i] = (int32_t)(i * 7919 + r * 104729) % 100003 - 50000;
			dropped.sum_int[i] += dropped.in_int[r][i];
		}
	}
	poison(dropped.next_out, sizeof(dropped.next_out));
	struct ndet_fake_backend_counters before, after;
	run_kept_open(&dropped.id, &dropped.barrier, dropped_rank, &before, &after);

	assert_true(dropped.fired);
	/* Rank 0: told at once, and its next call neither runs nor pairs. */
	if (which == DROPPED_PENDING)
		assert_int_equal(dropped.recorded, ncclSystemError);
	assert_int_not_equal(dropped.ended, ncclSuccess);
	assert_int_equal(dropped.next, ncclSystemError);
	assert_int_equal(dropped.next_async, ncclSystemError);
	float untouched[COUNT];
	poison(untouched, sizeof(untouched));
	assert_true(output_exact(dropped.next_out, untouched, sizeof(untouched)));
	assert_peers_told(&before, &after, dropped.peer_seconds, dropped.peer_async);
	/* The call for NCCL behind the dropped one still ran, on every rank. */
	if (which == DROPPED_RUN_FORWARD)
		for (int r = 0; r < NRANKS; r++) {
			assert_int_equal(dropped.int_result[r], ncclSuccess);
			assert_true(output_exact(dropped.out_int[r], dropped.sum_int,
						 sizeof(dropped.sum_int)));
		}
}

static void test_dropped_before_setup(void **state)
{
	(void)state;
	dropped_run(DROPPED_PENDING);
}

static void test_dropped_by_nccl_group_end(void **state)
{
	(void)state;
	dropped_run(DROPPED_NCCL_GROUP);
}

static void test_dropped_running_group_forwards_the_rest(void **state)
{
	(void)state;
	dropped_run(DROPPED_RUN_FORWARD);
}

/* One thread drives every rank: the setups run in lockstep, the calls in groups. */
static void test_one_thread_out_of_memory(void **state)
{
	(void)state;
	sweep(0, true, false, false);
}

/* nccl-tests -g: one thread creates every rank with ncclCommInitRank inside a group. */
static void test_one_thread_group_out_of_memory(void **state)
{
	(void)state;
	sweep(0, true, true, true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_rank0_out_of_memory, setup),
		cmocka_unit_test_setup(test_processes_out_of_memory, setup),
		cmocka_unit_test_setup(test_hosts_out_of_memory, setup),
		cmocka_unit_test_setup(test_one_thread_out_of_memory, setup),
		cmocka_unit_test_setup(test_one_thread_group_out_of_memory, setup),
		cmocka_unit_test_setup(test_unrecorded_call_tells_peers, setup),
		cmocka_unit_test_setup(test_dropped_before_setup, setup),
		cmocka_unit_test_setup(test_dropped_by_nccl_group_end, setup),
		cmocka_unit_test_setup(test_dropped_running_group_forwards_the_rest, setup),
	};
	return cmocka_run_group_tests(tests, ndet_divert_group_setup, ndet_divert_group_teardown);
}
