/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Bad input, differentially: test_bad_input.sh runs this program against the fake
 * libnccl.so.2 without nccl-det, with libnccl-det.so preloaded and
 * NCCL_DET_ENABLE=0, and with the host-only build (libnccl-det-fake.so) and
 * NCCL_DET_ENABLE=1, each with NCCL's pointer checks off and on; the printed codes
 * must be the same in every run of one check mode.
 *
 * Each case runs on a fresh two-rank communicator, one thread per rank, both ranks
 * making the same bad call (a bad call on one rank only hangs its peers with NCCL
 * as with nccl-det).  It prints the code of every rank and whether
 * ncclCommGetAsyncError reports an error afterwards (with the checks off a NULL
 * buffer is a faulting kernel, in NCCL as in nccl-det).  The first case is a valid
 * all-reduce, so that the enabled run proves (on stderr) that calls were diverted.
 */
#include "config.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nccl.h>

#include "test/fake_nccl/fake_nccl.h"

#define RANKS 2
#define COUNT 4

typedef ncclResult_t (*ncclDetCommQuery_fn)(ncclComm_t comm, int *diverted, const char **reason);

struct rank_state {
	ncclComm_t comm;
	float send[COUNT];
	float recv[COUNT];
	bool destroyed;
};

struct bad_case {
	const char *name;
	bool nonblocking;
	ncclResult_t (*run)(int rank, struct rank_state *state);
};

struct case_run {
	const struct bad_case *bad;
	ncclUniqueId id;
	struct rank_state state[RANKS];
	ncclResult_t result[RANKS];
	int async_error[RANKS]; /* 1 error, 0 none, -1 not asked */
	int diverted[RANKS];    /* ncclDetCommQuery after the call; -1 unknown */
};

static int failures;

/* ------------------------------------------------------------------ the cases */

static ncclResult_t valid_call(int rank, struct rank_state *s)
{
	(void)rank;
	return ncclAllReduce(s->send, s->recv, COUNT, ncclFloat32, ncclSum, s->comm, NULL);
}

static ncclResult_t null_comm(int rank, struct rank_state *s)
{
	(void)rank;
	return ncclAllReduce(s->send, s->recv, COUNT, ncclFloat32, ncclSum, NULL, NULL);
}

static ncclResult_t null_sendbuff(int rank, struct rank_state *s)
{
	(void)rank;
	return ncclAllReduce(NULL, s->recv, COUNT, ncclFloat32, ncclSum, s->comm, NULL);
}

static ncclResult_t null_recvbuff(int rank, struct rank_state *s)
{
	(void)rank;
	return ncclAllReduce(s->send, NULL, COUNT, ncclFloat32, ncclSum, s->comm, NULL);
}

static ncclResult_t null_in_place(int rank, struct rank_state *s)
{
	(void)rank;
	return ncclAllReduce(NULL, NULL, COUNT, ncclBfloat16, ncclAvg, s->comm, NULL);
}

static ncclResult_t null_count_zero(int rank, struct rank_state *s)
{
	(void)rank;
	return ncclAllReduce(NULL, NULL, 0, ncclFloat32, ncclSum, s->comm, NULL);
}

static ncclResult_t count_zero(int rank, struct rank_state *s)
{
	(void)rank;
	return ncclAllReduce(s->send, s->recv, 0, ncclFloat32, ncclSum, s->comm, NULL);
}

static ncclResult_t null_integer(int rank, struct rank_state *s)
{
	(void)rank;
	return ncclAllReduce(NULL, s->recv, COUNT, ncclInt32, ncclSum, s->comm, NULL);
}

/* Inside a group the error of a bad call comes from the call, not the group end. */
static ncclResult_t null_in_group(int rank, struct rank_state *s)
{
	(void)rank;
	ncclResult_t start = ncclGroupStart();
	if (start != ncclSuccess)
		return start;
	ncclResult_t call =
		ncclAllReduce(NULL, s->recv, COUNT, ncclFloat32, ncclMax, s->comm, NULL);
	ncclResult_t end = ncclGroupEnd();
	/* Both codes, in one: call * 100 + end. */
	return (ncclResult_t)((int)call * 100 + (int)end);
}

static ncclResult_t datatype_42(int rank, struct rank_state *s)
{
	(void)rank;
	return ncclAllReduce(s->send, s->recv, COUNT, (ncclDataType_t)42, ncclSum, s->comm, NULL);
}

static ncclResult_t datatype_negative(int rank, struct rank_state *s)
{
	(void)rank;
	return ncclAllReduce(s->send, s->recv, COUNT, (ncclDataType_t)-1, ncclSum, s->comm, NULL);
}

static ncclResult_t datatype_fp8(int rank, struct rank_state *s)
{
	(void)rank;
	return ncclAllReduce(s->send, s->recv, COUNT, (ncclDataType_t)10, ncclSum, s->comm, NULL);
}

static ncclResult_t op_negative(int rank, struct rank_state *s)
{
	(void)rank;
	return ncclAllReduce(s->send, s->recv, COUNT, ncclFloat32, (ncclRedOp_t)-1, s->comm, NULL);
}

static ncclResult_t op_never_created(int rank, struct rank_state *s)
{
	(void)rank;
	return ncclAllReduce(s->send, s->recv, COUNT, ncclFloat32, (ncclRedOp_t)(ncclNumOps + 7),
			     s->comm, NULL);
}

/* A PreMulSum op: live, then destroyed. */
static ncclResult_t premul(int rank, struct rank_state *s, bool destroy_first)
{
	ncclRedOp_t op;
	float scalar = 0.5f * (float)(rank + 1);
	ncclResult_t result = ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32,
						       ncclScalarHostImmediate, s->comm);
	if (result != ncclSuccess)
		return result;
	if (destroy_first) {
		result = ncclRedOpDestroy(op, s->comm);
		if (result != ncclSuccess)
			return result;
	}
	result = ncclAllReduce(s->send, s->recv, COUNT, ncclFloat32, op, s->comm, NULL);
	if (!destroy_first) {
		ncclResult_t destroyed = ncclRedOpDestroy(op, s->comm);
		if (result == ncclSuccess)
			result = destroyed;
	}
	return result;
}

static ncclResult_t premul_live(int rank, struct rank_state *s)
{
	return premul(rank, s, false);
}

static ncclResult_t premul_destroyed(int rank, struct rank_state *s)
{
	return premul(rank, s, true);
}

static ncclResult_t destroyed_comm(int rank, struct rank_state *s)
{
	(void)rank;
	ncclResult_t result = ncclCommDestroy(s->comm);
	if (result != ncclSuccess)
		return result;
	s->destroyed = true;
	return ncclAllReduce(s->send, s->recv, COUNT, ncclFloat32, ncclSum, s->comm, NULL);
}

static ncclResult_t reduce_root_past_end(int rank, struct rank_state *s)
{
	(void)rank;
	return ncclReduce(s->send, s->recv, COUNT, ncclFloat32, ncclSum, RANKS, s->comm, NULL);
}

static ncclResult_t reduce_root_negative(int rank, struct rank_state *s)
{
	(void)rank;
	return ncclReduce(s->send, s->recv, COUNT, ncclFloat32, ncclSum, -1, s->comm, NULL);
}

static ncclResult_t broadcast_root_past_end(int rank, struct rank_state *s)
{
	(void)rank;
	return ncclBroadcast(s->send, s->recv, COUNT, ncclFloat32, 5, s->comm, NULL);
}

static ncclResult_t broadcast_root_negative(int rank, struct rank_state *s)
{
	(void)rank;
	return ncclBroadcast(s->send, s->recv, COUNT, ncclFloat32, -1, s->comm, NULL);
}

static const struct bad_case cases[] = {
	{"valid all-reduce (control)", false, valid_call},
	{"NULL communicator", false, null_comm},
	{"NULL sendbuff, count 4", false, null_sendbuff},
	{"NULL recvbuff, count 4", false, null_recvbuff},
	{"NULL in place, count 4", false, null_in_place},
	{"NULL buffers, count 0", false, null_count_zero},
	{"count 0", false, count_zero},
	{"NULL sendbuff, integer", false, null_integer},
	{"NULL sendbuff in a group (call*100+end)", false, null_in_group},
	{"NULL sendbuff, non-blocking, first call", true, null_sendbuff},
	{"datatype 42", false, datatype_42},
	{"datatype -1", false, datatype_negative},
	{"datatype fp8 e4m3", false, datatype_fp8},
	{"op -1", false, op_negative},
	{"op never created", false, op_never_created},
	{"PreMulSum op", false, premul_live},
	{"destroyed PreMulSum op", false, premul_destroyed},
	{"destroyed communicator", false, destroyed_comm},
	{"ncclReduce root = nranks", false, reduce_root_past_end},
	{"ncclReduce root -1", false, reduce_root_negative},
	{"ncclBroadcast root 5", false, broadcast_root_past_end},
	{"ncclBroadcast root -1", false, broadcast_root_negative},
};

/* ------------------------------------------------------------------ running them */

static ncclResult_t init_comm(struct case_run *run, int rank)
{
	struct rank_state *s = &run->state[rank];
	if (!run->bad->nonblocking)
		return ncclCommInitRank(&s->comm, RANKS, run->id, rank);
	ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
	config.blocking = 0;
	ncclResult_t result = ncclCommInitRankConfig(&s->comm, RANKS, run->id, rank, &config);
	if (result != ncclInProgress)
		return result == ncclSuccess ? ncclInternalError : result;
	/* NCCL: a non-blocking communicator is used only once it reports success. */
	ncclResult_t state = ncclInProgress;
	for (int poll = 0; poll < 100000 && state == ncclInProgress; poll++) {
		result = ncclCommGetAsyncError(s->comm, &state);
		if (result != ncclSuccess)
			return result;
	}
	return state;
}

static void rank_main(int rank, void *opaque)
{
	struct case_run *run = opaque;
	struct rank_state *s = &run->state[rank];
	for (int i = 0; i < COUNT; i++)
		s->send[i] = (float)(rank * COUNT + i);
	run->async_error[rank] = -1;
	run->diverted[rank] = -1;
	ncclResult_t result = init_comm(run, rank);
	if (result != ncclSuccess) {
		fprintf(stderr, "%s: rank %d: init failed with %d\n", run->bad->name, rank,
			(int)result);
		__atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
		return;
	}
	run->result[rank] = run->bad->run(rank, s);
	/*
	 * On a non-blocking communicator ncclInProgress and ncclSuccess both say the
	 * call was taken (NCCL's group end leaves the launch to its async thread;
	 * nccl-det's diverted call is launched when it returns): how it went shows in
	 * ncclCommGetAsyncError, printed too.
	 */
	if (run->bad->nonblocking && run->result[rank] == ncclInProgress)
		run->result[rank] = ncclSuccess;
	if (s->destroyed)
		return;
	ncclResult_t async = ncclInProgress, asked = ncclSuccess;
	for (int poll = 0; poll < 100000 && asked == ncclSuccess && async == ncclInProgress; poll++)
		asked = ncclCommGetAsyncError(s->comm, &async);
	if (asked == ncclSuccess)
		run->async_error[rank] = async != ncclSuccess;
	/* Only nccl-det (when preloaded) answers this. */
	ncclDetCommQuery_fn query = (ncclDetCommQuery_fn)dlsym(RTLD_DEFAULT, "ncclDetCommQuery");
	const char *reason = NULL;
	if (query != NULL && query(s->comm, &run->diverted[rank], &reason) != ncclSuccess)
		run->diverted[rank] = -1;
	if (ncclCommDestroy(s->comm) != ncclSuccess) {
		fprintf(stderr, "%s: rank %d: ncclCommDestroy failed\n", run->bad->name, rank);
		__atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
	}
}

static const char *async_text(int value)
{
	return value < 0 ? "-" : value ? "error" : "none";
}

int main(void)
{
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		static struct case_run run;
		memset(&run, 0, sizeof(run));
		run.bad = &cases[c];
		if (ncclGetUniqueId(&run.id) != ncclSuccess ||
		    fake_nccl_run_ranks(RANKS, rank_main, &run) != 0) {
			fprintf(stderr, "%s: could not run the ranks\n", cases[c].name);
			return 1;
		}
		printf("%-42s codes %d %d, async error %s %s\n", cases[c].name, (int)run.result[0],
		       (int)run.result[1], async_text(run.async_error[0]),
		       async_text(run.async_error[1]));
		/* stderr: differs between the runs on purpose. */
		fprintf(stderr, "%s: diverted %d %d\n", cases[c].name, run.diverted[0],
			run.diverted[1]);
	}
	return failures == 0 ? 0 : 1;
}
