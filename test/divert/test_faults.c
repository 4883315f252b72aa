/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Faults on a CPU: nothing hangs forever, nothing is lost, nothing leaks.  Like
 * test_divert, this program plays libnccl-det.so (src/preload/ndet_shim.c compiled in) in
 * front of the multi-rank fake NCCL, with the host-only backend, whose all-reduce
 * runs the kernels' flag protocol with its abort word, abort flag and deadline
 * (test/support/ndet_fake_backend.h).  Ranks are threads.
 *
 * Covered: ncclCommAbort from another thread while a call waits; a peer that stops
 * (SIGSTOP's stand-in: it never calls) and the survivors' timeout, async error,
 * abort and shrink; diverging calls (count, dtype, op, one rank at count 0, one rank
 * in NCCL); destroy while peers still run calls; destroy in any order; finalize
 * then destroy; pools between "processes" released without a barrier (detach
 * protocol), and a killed peer's; tensor- and data-parallel communicators from ncclCommSplit used
 * concurrently by several threads; many create/destroy cycles with no growth; fork
 * after setup, quiet and busy.  ASan, LSan and TSan builds run the same tests.
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "test/fake_nccl/fake_nccl.h"
#include "nccl_det.h"
#include "divert/ndet_comm.h"
#include "test/support/ndet_divert_fixture.h"
#include "test/support/ndet_fake_backend.h"
#include "kernels/ndet_abi.h"
#include "common/ndet_log.h"
#include "test/support/ndet_test_clock.h"
#include "test/support/ndet_test_data.h"
#include "reference/ndet_reference.h"
#include "common/ndet_settings.h"
#include "protocol/ndet_teardown.h"

#define MAX_RANKS 8
#define COUNT     97
#define SENTINEL  0x7b

static char log_path[4096];

/* ------------------------------------------------------------------ fixtures */

static const char *const knobs[] = {
	"NCCL_DET_TIMEOUT",   "NCCL_DET_TEST_FAIL", "FAKE_BACKEND_PROCESS_PER_RANK",
	"FAKE_NCCL_FAIL",     "NCCL_COMM_BLOCKING", "NCCL_DET_DEBUG_SUBSYS",
	"NCCL_DET_TEST_HOST",
};

static void settings_changed(void)
{
	ndet_settings_reset_for_testing();
	ndet_log_reset_for_testing();
}

static void set_knob(const char *name, const char *value)
{
	assert_int_equal(setenv(name, value, 1), 0);
	settings_changed();
}

static int setup(void **state)
{
	(void)state;
	if (ndet_divert_fixture_reset(knobs, sizeof(knobs) / sizeof(knobs[0]), log_path, NULL) != 0)
		return -1;
	/* A broken protocol fails a test in seconds instead of hanging `make check`. */
	if (setenv("NCCL_DET_TIMEOUT", "20", 1) != 0)
		return -1;
	settings_changed();
	return 0;
}

static int setup_group(void **state)
{
	(void)state;
	return ndet_divert_fixture_start(log_path, sizeof(log_path), NULL, 0);
}

static int teardown_group(void **state)
{
	(void)state;
	ndet_divert_fixture_stop(log_path, NULL);
	return 0;
}

/* ------------------------------------------------------------------ helpers */

/* What the engines of this process hold (ndet_teardown.h). */
static struct ndet_resources resources(void)
{
	struct ndet_resources now;
	ndet_resources_get(&now);
	return now;
}

/* Spin (politely) until *flag holds at least `value`. */
static void wait_flag(const int *flag, int value)
{
	while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) < value)
		pause_ms(1);
}

static void raise_flag(int *flag)
{
	__atomic_add_fetch(flag, 1, __ATOMIC_ACQ_REL);
}

/* A watchdog thread: once *flag is raised, wait `ms`, then abort *comm. */
static ncclResult_t watchdog_abort(const int *flag, long ms, ncclComm_t *comm)
{
	wait_flag(flag, 1);
	pause_ms(ms);
	return ncclCommAbort(*comm);
}

/* ncclCommGetAsyncError through nccl-det; ncclInternalError if the call fails. */
static ncclResult_t async_error(ncclComm_t comm)
{
	ncclResult_t async = ncclInternalError;
	if (ncclCommGetAsyncError(comm, &async) != ncclSuccess)
		return ncclInternalError;
	return async;
}

/*
 * A call on a non-blocking communicator may answer ncclInProgress (NCCL's group end
 * leaves the launch to its async thread): poll until it is done, as NCCL asks of a
 * caller before the next call.  nccl-det's diverted calls answer ncclSuccess.
 */
static ncclResult_t settle(ncclComm_t comm, ncclResult_t result)
{
	ncclResult_t state = result;
	while (state == ncclInProgress) {
		if (ncclCommGetAsyncError(comm, &state) != ncclSuccess)
			return ncclInternalError;
	}
	return state;
}

static int diverted(ncclComm_t comm)
{
	int answer = -1;
	const char *reason = NULL;
	if (ncclDetCommQuery(comm, &answer, &reason) != ncclSuccess)
		return -1;
	return answer;
}

static ncclResult_t reduce_floats(float *values, size_t count, ncclComm_t comm)
{
	return ncclAllReduce(values, values, count, ncclFloat32, ncclSum, comm, NULL);
}

static struct ndet_fake_backend_counters counters(void)
{
	struct ndet_fake_backend_counters now;
	ndet_fake_backend_counters(&now);
	return now;
}

/* ------------------------------------------------------------------ abort while waiting */

struct abort_job {
	ncclUniqueId id;
	ncclComm_t comms[2];
	int inside, aborted, left; /* flags */
	ncclResult_t call0, abort0, call1, async1, next1;
	double waited;
};

static void abort_rank(int rank, void *opaque)
{
	struct abort_job *job = opaque;
	float values[COUNT] = {0};
	if (rank == 2) {
		/* PyTorch's watchdog: aborts rank 0 while its all-reduce waits for rank 1. */
		job->abort0 = watchdog_abort(&job->inside, 100, &job->comms[0]);
		raise_flag(&job->aborted);
		return;
	}
	if (ncclCommInitRank(&job->comms[rank], 2, job->id, rank) != ncclSuccess)
		return;
	if (rank == 0) {
		raise_flag(&job->inside);
		double start = now_seconds();
		job->call0 = reduce_floats(values, COUNT, job->comms[0]);
		job->waited = now_seconds() - start;
		raise_flag(&job->left);
		return; /* aborted: nothing more to do with it */
	}
	/*
	 * Rank 1 comes only once rank 0's call has left: its kernel learns of the abort
	 * from the abort word.  (Arriving earlier, it could still meet rank 0's kernel,
	 * which polls its abort flag between looks at the peers' flags, as the GPU's
	 * does: the call would then complete on both ranks.)
	 */
	wait_flag(&job->aborted, 1);
	wait_flag(&job->left, 1);
	job->call1 = reduce_floats(values, COUNT, job->comms[1]);
	job->async1 = async_error(job->comms[1]);
	job->next1 = reduce_floats(values, COUNT, job->comms[1]);
	ncclCommDestroy(job->comms[1]);
}

static void test_abort_releases_waiting_call(void **state)
{
	(void)state;
	/* Far above what the test waits: only the abort can release the call. */
	set_knob("NCCL_DET_TIMEOUT", "30");
	struct abort_job job = {0};
	assert_int_equal(pncclGetUniqueId(&job.id), ncclSuccess);
	assert_int_equal(fake_nccl_run_ranks(3, abort_rank, &job), 0);
	assert_int_equal(job.abort0, ncclSuccess);
	/* A launch succeeds; its kernel left at the abort instead of waiting. */
	assert_int_equal(job.call0, ncclSuccess);
	if (job.waited > 10.0)
		fail_msg("the aborted call waited %.1f s", job.waited);
	struct ndet_fake_backend_counters now = counters();
	assert_int_equal(now.kernel_errors[NDET_KERNEL_ERR_ABORTED], 1);
	/* The peer's next kernel found the abort word and left too. */
	assert_int_equal(now.kernel_errors[NDET_KERNEL_ERR_PEER], 1);
	assert_int_equal(job.call1, ncclSuccess);
	assert_int_equal(job.async1, ncclRemoteError);
	assert_int_equal(job.next1, ncclRemoteError);
}

/* ------------------------------------------------------------------ abort during teardown */

struct teardown_abort_job {
	ncclUniqueId id;
	ncclComm_t comms[2];
	bool destroy; /* rank 0 destroys instead of finalizing */
	int tearing;  /* flag */
	ncclResult_t call0, abort0;
	double seconds[2];
};

static void teardown_abort_rank(int rank, void *opaque)
{
	struct teardown_abort_job *job = opaque;
	float values[COUNT] = {0};
	if (rank == 2) {
		/* PyTorch's watchdog: aborts rank 0 while its teardown waits for its kernel. */
		job->abort0 = watchdog_abort(&job->tearing, 300, &job->comms[0]);
		return;
	}
	if (ncclCommInitRank(&job->comms[rank], 2, job->id, rank) != ncclSuccess)
		return;
	ncclComm_t comm = job->comms[rank];
	if (rank == 0) {
		/* Its "kernel" never meets rank 1: it spins until the abort flag. */
		job->call0 = reduce_floats(values, COUNT, comm);
		raise_flag(&job->tearing);
	}
	double start = now_seconds();
	if (rank == 0 && job->destroy) {
		(void)ncclCommDestroy(comm);
	} else {
		/* Rank 1 waits in the barrier for rank 0, until the abort fails it. */
		(void)ncclCommFinalize(comm);
		if (rank == 1)
			(void)ncclCommDestroy(comm);
	}
	job->seconds[rank] = now_seconds() - start;
}

/*
 * ncclCommAbort from another thread reaches an engine whose finalize or destroy is
 * waiting for its kernel: the kernel leaves, the teardown returns in well under
 * NCCL_DET_TIMEOUT, and no pool is freed while a reader may remain.
 */
static void test_abort_during_teardown(void **state)
{
	for (int destroy = 0; destroy < 2; destroy++) {
		for (int processes = 0; processes < 2; processes++) {
			setup(state);
			set_knob("NCCL_DET_TIMEOUT", "30");
			if (processes)
				set_knob("FAKE_BACKEND_PROCESS_PER_RANK", "1");
			ndet_fake_backend_spin_rank(0);
			struct teardown_abort_job job = {.destroy = destroy != 0};
			assert_int_equal(pncclGetUniqueId(&job.id), ncclSuccess);
			assert_int_equal(fake_nccl_run_ranks(3, teardown_abort_rank, &job), 0);
			print_message("%s, %s: rank 0 %.2f s, rank 1 %.2f s\n",
				      destroy ? "destroy" : "finalize",
				      processes ? "processes" : "threads", job.seconds[0],
				      job.seconds[1]);
			assert_int_equal(job.call0, ncclSuccess);
			assert_int_equal(job.abort0, ncclSuccess);
			for (int r = 0; r < 2; r++)
				if (job.seconds[r] > 5.0)
					fail_msg("rank %d's teardown took %.1f s", r,
						 job.seconds[r]);
			struct ndet_fake_backend_counters now = counters();
			assert_int_equal(now.kernel_errors[NDET_KERNEL_ERR_ABORTED], 1);
			assert_int_equal(now.engines_destroyed, 2);
			/*
			 * Threads: both pools go with the last rank (every kernel left).
			 * Processes: the barrier never completed, but both kernels left and
			 * both ranks wrote their detach words: the detach protocol frees
			 * both rather than keeping them until exit.
			 */
			assert_int_equal(now.pools_freed, 2);
			assert_int_equal(now.pools_quarantined, 0);
			assert_int_equal(resources().pending_pools, 0);
			assert_int_equal(ndet_comm_registered_for_testing(), 0);
		}
	}
}

/* ------------------------------------------------------------------ a stopped peer */

struct stopped_job {
	ncclUniqueId id;
	ncclComm_t comms[3], shrunk[2];
	int released, survivors_done, queried; /* flags */
	ncclResult_t call[3], async[3], next[3], shrink[2], shrunk_call[2], abort[2];
	ncclResult_t parent_async[2];
	double until_error[2];
	int shrunk_diverted[2];
	float inputs[2][COUNT], outputs[2][COUNT];
};

static void stopped_rank(int rank, void *opaque)
{
	struct stopped_job *job = opaque;
	float values[COUNT];
	for (int i = 0; i < COUNT; i++)
		values[i] = (float)(rank + i);
	if (ncclCommInitRank(&job->comms[rank], 3, job->id, rank) != ncclSuccess)
		return;
	if (rank == 2) {
		/* Stopped: makes no call until the survivors are done, then resumes. */
		wait_flag(&job->released, 1);
		job->call[2] = reduce_floats(values, COUNT, job->comms[2]);
		job->async[2] = async_error(job->comms[2]);
		job->next[2] = reduce_floats(values, COUNT, job->comms[2]);
		ncclCommAbort(job->comms[2]);
		return;
	}
	double start = now_seconds();
	job->call[rank] = reduce_floats(values, COUNT, job->comms[rank]);
	/* PyTorch's watchdog polls until the error shows. */
	ncclResult_t async;
	while ((async = async_error(job->comms[rank])) == ncclSuccess && now_seconds() - start < 30)
		pause_ms(10);
	job->until_error[rank] = now_seconds() - start;
	job->async[rank] = async;
	job->next[rank] = reduce_floats(values, COUNT, job->comms[rank]);
	/* Shrink the stopped rank away (aborting the parent's work) and go on, diverted. */
	static int exclude[1] = {2};
	job->shrink[rank] = ncclCommShrink(job->comms[rank], exclude, 1, &job->shrunk[rank], NULL,
					   NCCL_SHRINK_ABORT);
	if (job->shrink[rank] == ncclSuccess) {
		for (int i = 0; i < COUNT; i++)
			job->inputs[rank][i] = job->outputs[rank][i] =
				(float)(rank + 1) * 0.1f + (float)i * 1e-3f;
		job->shrunk_call[rank] =
			reduce_floats(job->outputs[rank], COUNT, job->shrunk[rank]);
		job->shrunk_diverted[rank] = diverted(job->shrunk[rank]);
		ncclCommDestroy(job->shrunk[rank]);
	}
	/*
	 * NCCL's own ncclCommEnsureReady asks this before it shrinks, splits or finalizes.
	 * Both ask before either aborts: the fake fails the peers of an aborted rank.
	 */
	job->parent_async[rank] = async_error(job->comms[rank]);
	raise_flag(&job->queried);
	wait_flag(&job->queried, 2);
	job->abort[rank] = ncclCommAbort(job->comms[rank]);
	if (__atomic_add_fetch(&job->survivors_done, 1, __ATOMIC_ACQ_REL) == 2)
		raise_flag(&job->released);
}

static void test_stopped_peer(void **state)
{
	(void)state;
	set_knob("NCCL_DET_TIMEOUT", "1");
	struct stopped_job job = {0};
	assert_int_equal(pncclGetUniqueId(&job.id), ncclSuccess);
	assert_int_equal(fake_nccl_run_ranks(3, stopped_rank, &job), 0);
	for (int r = 0; r < 2; r++) {
		assert_int_equal(job.call[r], ncclSuccess);
		assert_int_equal(job.async[r], ncclRemoteError);
		/* Within NCCL_DET_TIMEOUT + 1 s of the call. */
		if (job.until_error[r] > 2.0)
			fail_msg("rank %d: the error took %.2f s", r, job.until_error[r]);
		assert_int_equal(job.next[r], ncclRemoteError);
		assert_int_equal(job.shrink[r], ncclSuccess);
		assert_int_equal(job.shrunk_call[r], ncclSuccess);
		assert_int_equal(job.shrunk_diverted[r], 1);
		/* The shrink aborted the failed work: NCCL's answer again, not our old error. */
		assert_int_equal(job.parent_async[r], ncclSuccess);
		assert_int_equal(job.abort[r], ncclSuccess);
	}
	/* The shrunk communicator computed the tree, bit for bit, on both ranks. */
	const void *inputs[2] = {job.inputs[0], job.inputs[1]};
	float tree[COUNT];
	assert_int_equal(
		ndet_reference_allreduce(inputs, 2, tree, COUNT, NDET_DTYPE_F32, NDET_OP_SUM),
		NDET_OK);
	assert_memory_equal(job.outputs[0], tree, sizeof(tree));
	assert_memory_equal(job.outputs[1], tree, sizeof(tree));
	/* The stopped rank, resumed, fails fast instead of waiting for the dead call. */
	assert_int_equal(job.call[2], ncclSuccess);
	assert_int_equal(job.async[2], ncclRemoteError);
	assert_int_equal(job.next[2], ncclRemoteError);
	assert_true(counters().kernel_errors[NDET_KERNEL_ERR_TIMEOUT] >= 1);
}

/* ------------------------------------------------------------------ diverging calls */

enum diverge { DIVERGE_COUNT, DIVERGE_DTYPE, DIVERGE_OP, DIVERGE_INTEGER };

struct diverge_job {
	ncclUniqueId id;
	enum diverge how;
	ncclResult_t call[3], async[3], follow[3];
	bool untouched[3];
	double waited[3];
};

static void diverge_rank(int rank, void *opaque)
{
	struct diverge_job *job = opaque;
	ncclComm_t comm = NULL;
	unsigned char send[COUNT * 8], recv[COUNT * 8];
	memset(send, 0x3c, sizeof(send));
	memset(recv, SENTINEL, sizeof(recv));
	size_t count = COUNT;
	ncclDataType_t datatype = ncclFloat32;
	ncclRedOp_t op = ncclSum;
	if (rank == 1) {
		switch (job->how) {
		case DIVERGE_COUNT:
			count = COUNT - 1;
			break;
		case DIVERGE_DTYPE:
			datatype = ncclBfloat16;
			break;
		case DIVERGE_OP:
			op = ncclMax;
			break;
		case DIVERGE_INTEGER:
			datatype = ncclInt32; /* NCCL's, while the others wait in ours */
			break;
		}
	}
	if (ncclCommInitRank(&comm, 3, job->id, rank) != ncclSuccess)
		return;
	double start = now_seconds();
	job->call[rank] = ncclAllReduce(send, recv, count, datatype, op, comm, NULL);
	job->waited[rank] = now_seconds() - start;
	job->untouched[rank] = true;
	for (size_t i = 0; i < sizeof(recv); i++)
		job->untouched[rank] = job->untouched[rank] && recv[i] == SENTINEL;
	/* One more call shows every rank that the communicator is poisoned. */
	job->follow[rank] = ncclAllReduce(send, recv, COUNT, ncclFloat32, ncclSum, comm, NULL);
	job->async[rank] = async_error(comm);
	ncclCommDestroy(comm);
}

static void test_diverging_calls(void **state)
{
	(void)state;
	/* Divergence is caught by the signature at once, long before the timeout. */
	const enum diverge signed_cases[] = {DIVERGE_COUNT, DIVERGE_DTYPE, DIVERGE_OP};
	for (size_t c = 0; c < 3; c++) {
		setup(state);
		struct diverge_job job = {.how = signed_cases[c]};
		assert_int_equal(pncclGetUniqueId(&job.id), ncclSuccess);
		assert_int_equal(fake_nccl_run_ranks(3, diverge_rank, &job), 0);
		for (int r = 0; r < 3; r++) {
			assert_int_equal(job.call[r], ncclSuccess);
			if (job.waited[r] > 10.0)
				fail_msg("case %zu rank %d waited %.1f s", c, r, job.waited[r]);
			/* Not garbage: nothing was written. */
			assert_true(job.untouched[r]);
			assert_int_equal(job.follow[r], ncclRemoteError);
			assert_int_equal(job.async[r], ncclRemoteError);
		}
		assert_true(counters().kernel_errors[NDET_KERNEL_ERR_SIGNATURE] >= 1);
	}
	/*
	 * A datatype that goes to NCCL on one rank: the others wait in our kernels
	 * until NCCL_DET_TIMEOUT, the odd one in NCCL until its own timeout (the fake's
	 * stands for NCCL's watchdog): errors, not hangs.  (Count 0 on one rank is no
	 * call there, in NCCL as in nccl-det: its next call pairs with the others'.)
	 */
	setup(state);
	set_knob("NCCL_DET_TIMEOUT", "1");
	assert_int_equal(setenv("FAKE_NCCL_TIMEOUT_MS", "3000", 1), 0);
	struct diverge_job job = {.how = DIVERGE_INTEGER};
	assert_int_equal(pncclGetUniqueId(&job.id), ncclSuccess);
	assert_int_equal(fake_nccl_run_ranks(3, diverge_rank, &job), 0);
	assert_int_equal(setenv("FAKE_NCCL_TIMEOUT_MS", "20000", 1), 0);
	for (int r = 0; r < 3; r += 2) {
		assert_int_equal(job.call[r], ncclSuccess);
		assert_true(job.untouched[r]);
		assert_int_equal(job.follow[r], ncclRemoteError);
		assert_int_equal(job.async[r], ncclRemoteError);
	}
	assert_int_not_equal(job.call[1], ncclSuccess);
	assert_int_equal(job.async[1], ncclRemoteError);
	assert_true(counters().kernel_errors[NDET_KERNEL_ERR_TIMEOUT] >= 1);
}

/* ------------------------------------------------------------------ destroy, finalize */

struct teardown_job {
	ncclUniqueId id;
	int nranks;
	bool finalize;
	int waiting, destroyed; /* flags */
	int freed_at_first_destroy;
	ncclResult_t first[MAX_RANKS], later[MAX_RANKS], async[MAX_RANKS], end[MAX_RANKS];
};

/* Rank 0 destroys while its peers are inside their next call. */
static void destroy_early_rank(int rank, void *opaque)
{
	struct teardown_job *job = opaque;
	ncclComm_t comm = NULL;
	float values[COUNT] = {0};
	if (ncclCommInitRank(&comm, job->nranks, job->id, rank) != ncclSuccess)
		return;
	job->first[rank] = reduce_floats(values, COUNT, comm);
	if (rank == 0) {
		wait_flag(&job->waiting, job->nranks - 1);
		pause_ms(50);
		job->end[rank] = ncclCommDestroy(comm);
		job->freed_at_first_destroy = counters().pools_freed;
		raise_flag(&job->destroyed);
		return;
	}
	raise_flag(&job->waiting);
	/* Waits for rank 0, which is gone: its pool stays, our kernel times out. */
	job->later[rank] = reduce_floats(values, COUNT, comm);
	job->async[rank] = async_error(comm);
	wait_flag(&job->destroyed, 1);
	job->end[rank] = ncclCommDestroy(comm);
}

static void test_destroy_while_peers_run(void **state)
{
	(void)state;
	set_knob("NCCL_DET_TIMEOUT", "1");
	struct teardown_job job = {.nranks = 3};
	assert_int_equal(pncclGetUniqueId(&job.id), ncclSuccess);
	assert_int_equal(fake_nccl_run_ranks(3, destroy_early_rank, &job), 0);
	for (int r = 0; r < 3; r++) {
		assert_int_equal(job.first[r], ncclSuccess);
		assert_int_equal(job.end[r], ncclSuccess);
	}
	for (int r = 1; r < 3; r++) {
		assert_int_equal(job.later[r], ncclSuccess);
		assert_int_equal(job.async[r], ncclRemoteError);
	}
	struct ndet_fake_backend_counters now = counters();
	assert_int_equal(now.engines_destroyed, 3);
	/* Nobody freed a pool while a peer might still read it: not at rank 0's destroy. */
	assert_int_equal(job.freed_at_first_destroy, 0);
	/* Threads of one process: the last destroy frees every pool. */
	assert_int_equal(now.pools_freed, 3);
	assert_int_equal(now.pools_quarantined, 0);
	assert_int_equal(ndet_comm_registered_for_testing(), 0);
}

/* Each rank leaves at its own time: rank r after (nranks - r) * 20 ms. */
static void any_order_rank(int rank, void *opaque)
{
	struct teardown_job *job = opaque;
	ncclComm_t comm = NULL;
	float values[COUNT];
	if (ncclCommInitRank(&comm, job->nranks, job->id, rank) != ncclSuccess)
		return;
	for (int i = 0; i < 5 && job->first[rank] == ncclSuccess; i++) {
		for (int k = 0; k < COUNT; k++)
			values[k] = (float)(rank + i);
		job->first[rank] = reduce_floats(values, COUNT, comm);
		if (values[0] != (float)(job->nranks * (job->nranks - 1) / 2 + job->nranks * i))
			job->first[rank] = ncclInternalError;
	}
	pause_ms((job->nranks - rank) * 20);
	if (job->finalize) {
		job->later[rank] = ncclCommFinalize(comm);
		job->async[rank] = async_error(comm);
		pause_ms(rank * 20); /* destroy in the other order */
	}
	job->end[rank] = ncclCommDestroy(comm);
}

static void test_destroy_any_order(void **state)
{
	(void)state;
	/*
	 * Threads, reverse order; then between "processes" destroy alone (the detach
	 * protocol: each pool goes once every peer let go of it, within the bounded poll
	 * of its destroy, as the peers leave 20 ms apart) and finalize + destroy.
	 */
	for (int mode = 0; mode < 3; mode++) {
		const bool finalize = mode == 2;
		setup(state);
		if (mode > 0)
			set_knob("FAKE_BACKEND_PROCESS_PER_RANK", "1");
		struct teardown_job job = {.nranks = 4, .finalize = finalize};
		assert_int_equal(pncclGetUniqueId(&job.id), ncclSuccess);
		assert_int_equal(fake_nccl_run_ranks(4, any_order_rank, &job), 0);
		for (int r = 0; r < 4; r++) {
			assert_int_equal(job.first[r], ncclSuccess);
			assert_int_equal(job.end[r], ncclSuccess);
			if (finalize) {
				assert_int_equal(job.later[r], ncclSuccess);
				assert_int_equal(job.async[r], ncclSuccess);
			}
		}
		struct ndet_fake_backend_counters now = counters();
		assert_int_equal(now.engines_destroyed, 4);
		/*
		 * Threads: freed with the last rank of the process; processes: by the
		 * detach protocol, or after the barrier.
		 */
		assert_int_equal(now.pools_freed, 4);
		assert_int_equal(now.pools_quarantined, 0);
		assert_int_equal(resources().pending_pools, 0);
		assert_int_equal(now.barriers, finalize ? 4 : 0);
		assert_int_equal(ndet_comm_registered_for_testing(), 0);
	}

	/* One thread holds every rank and destroys them out of order. */
	setup(state);
	ncclComm_t comms[4] = {NULL};
	static float values[4][COUNT];
	const int order[4] = {2, 0, 3, 1};
	assert_int_equal(ncclCommInitAll(comms, 4, NULL), ncclSuccess);
	assert_int_equal(ncclGroupStart(), ncclSuccess);
	for (int r = 0; r < 4; r++)
		assert_int_equal(reduce_floats(values[r], COUNT, comms[r]), ncclSuccess);
	assert_int_equal(ncclGroupEnd(), ncclSuccess);
	for (int i = 0; i < 4; i++) {
		/* Not one pool goes while another rank of the process may read it. */
		assert_int_equal(counters().pools_freed, 0);
		assert_int_equal(ncclCommDestroy(comms[order[i]]), ncclSuccess);
	}
	assert_int_equal(counters().engines_destroyed, 4);
	assert_int_equal(counters().pools_freed, 4);
	assert_int_equal(ndet_comm_registered_for_testing(), 0);
}

/* Nothing allocated, mapped, waiting or kept (and the public API says the same). */
static void assert_nothing_held(int cycle)
{
	struct ndet_resources now = resources();
	ncclDetResources_t api;
	memset(&api, 0x5a, sizeof(api));
	assert_int_equal(ncclDetGetResources(&api), ncclSuccess);
	assert_int_equal(api.allocations, now.allocations);
	assert_int_equal(api.bytes, now.bytes);
	assert_int_equal(api.ipcImports, now.ipc_imports);
	assert_int_equal(api.deferredPools, now.deferred_pools);
	assert_int_equal(api.pendingPools, now.pending_pools);
	assert_int_equal(api.leakedPools, now.leaked_pools);
	assert_int_equal(api.leakedBytes, now.leaked_bytes);
	if (now.allocations != 0 || now.bytes != 0 || now.ipc_imports != 0 ||
	    now.deferred_pools != 0 || now.pending_pools != 0 || now.leaked_pools != 0)
		fail_msg("after cycle %d: %lld allocations (%lld bytes), %lld mappings, %lld "
			 "pools waiting, %lld pending, %lld kept",
			 cycle, (long long)now.allocations, (long long)now.bytes,
			 (long long)now.ipc_imports, (long long)now.deferred_pools,
			 (long long)now.pending_pools, (long long)now.leaked_pools);
	assert_int_equal(ndet_comm_registered_for_testing(), 0);
	assert_int_equal(ndet_teardown_shares_for_testing(), 0);
}

/* ------------------------------------------------------------------ a killed peer */

struct killed_job {
	ncclUniqueId id;
	int left, ended; /* flags */
	ncclResult_t call[3], end[3];
	int64_t pending_while_alive, pending_after_end;
	int freed_while_alive, freed_after_end;
};

/*
 * Ranks 0 and 1 destroy after one call; rank 2 stays silent (stopped) until they
 * did, then its "process" ends (killed): its mappings went with it, so the next look
 * (any later create or destroy of the survivors' process) frees their pools.
 */
static void killed_rank(int rank, void *opaque)
{
	struct killed_job *job = opaque;
	ncclComm_t comm = NULL;
	float values[COUNT];
	for (int i = 0; i < COUNT; i++)
		values[i] = (float)rank;
	if (ncclCommInitRank(&comm, 3, job->id, rank) != ncclSuccess)
		return;
	job->call[rank] = reduce_floats(values, COUNT, comm);
	if (rank < 2) {
		job->end[rank] = ncclCommDestroy(comm);
		raise_flag(&job->left);
		return;
	}
	wait_flag(&job->left, 2);
	job->pending_while_alive = resources().pending_pools;
	job->freed_while_alive = counters().pools_freed;
	ndet_fake_backend_end_process(2);
	ndet_teardown_pending_retry(false);
	job->pending_after_end = resources().pending_pools;
	job->freed_after_end = counters().pools_freed;
	/* Test cleanup: the dead rank's communicator (it writes no detach word). */
	job->end[rank] = ncclCommAbort(comm);
}

static void test_killed_peer_releases_pools(void **state)
{
	(void)state;
	set_knob("FAKE_BACKEND_PROCESS_PER_RANK", "1");
	ndet_teardown_set_detach_wait_for_testing(200);
	struct killed_job job = {0};
	assert_int_equal(pncclGetUniqueId(&job.id), ncclSuccess);
	assert_int_equal(fake_nccl_run_ranks(3, killed_rank, &job), 0);
	for (int r = 0; r < 3; r++) {
		assert_int_equal(job.call[r], ncclSuccess);
		assert_int_equal(job.end[r], ncclSuccess);
	}
	/* Alive and silent: nothing freed under it. */
	assert_int_equal(job.pending_while_alive, 2);
	assert_int_equal(job.freed_while_alive, 0);
	/* Gone: both survivors' pools freed, each counting rank 2 as gone. */
	assert_int_equal(job.pending_after_end, 0);
	assert_int_equal(job.freed_after_end, 2);
	assert_int_equal(resources().peers_gone, 2);
	/* The dead rank's own pool went too (both survivors had detached). */
	assert_int_equal(counters().pools_freed, 3);
	assert_nothing_held(0);
}

/* ------------------------------------------------------------------ split groups */

#define GRID_RANKS 4
#define GRID_CALLS 40

struct grid_job {
	ncclUniqueId id;
	ncclComm_t world[GRID_RANKS], tp[GRID_RANKS], dp[GRID_RANKS];
	int wrong[GRID_RANKS][3];
	int diverted[GRID_RANKS][3];
};

struct grid_worker {
	struct grid_job *job;
	pthread_t thread;
	int rank, which; /* 0 world, 1 tensor-parallel, 2 data-parallel */
	ncclComm_t comm;
};

/* Rank r's value in call i on communicator `which`: the sum tells the group apart. */
static float grid_value(int which, int rank, int call)
{
	return (float)(which * 100000 + call * 100 + (1 << rank));
}

/* The sum a group must see: the ranks of the group, and no others. */
static float grid_expected(int which, int rank, int call)
{
	float sum = 0;
	for (int q = 0; q < GRID_RANKS; q++) {
		bool member = which == 0 || (which == 1 && q / 2 == rank / 2) ||
			      (which == 2 && q % 2 == rank % 2);
		if (member)
			sum += grid_value(which, q, call);
	}
	return sum;
}

static void *grid_worker_main(void *opaque)
{
	struct grid_worker *worker = opaque;
	float values[COUNT];
	for (int call = 0; call < GRID_CALLS; call++) {
		for (int i = 0; i < COUNT; i++)
			values[i] = grid_value(worker->which, worker->rank, call);
		if (reduce_floats(values, COUNT, worker->comm) != ncclSuccess ||
		    values[COUNT - 1] != grid_expected(worker->which, worker->rank, call))
			worker->job->wrong[worker->rank][worker->which]++;
	}
	worker->job->diverted[worker->rank][worker->which] = diverted(worker->comm);
	return NULL;
}

static void grid_rank(int rank, void *opaque)
{
	struct grid_job *job = opaque;
	ncclComm_t *world = &job->world[rank], *tp = &job->tp[rank], *dp = &job->dp[rank];
	if (ncclCommInitRank(world, GRID_RANKS, job->id, rank) != ncclSuccess ||
	    ncclCommSplit(*world, rank / 2, rank, tp, NULL) != ncclSuccess ||
	    ncclCommSplit(*world, rank % 2, rank, dp, NULL) != ncclSuccess) {
		job->wrong[rank][0] = -1;
		return;
	}
	/* Three threads per rank, one per communicator, all at once. */
	struct grid_worker workers[3];
	const ncclComm_t comms[3] = {*world, *tp, *dp};
	for (int w = 0; w < 3; w++) {
		workers[w] = (struct grid_worker){
			.job = job, .rank = rank, .which = w, .comm = comms[w]};
		if (pthread_create(&workers[w].thread, NULL, grid_worker_main, &workers[w]) != 0) {
			job->wrong[rank][w] = -1;
			workers[w].comm = NULL;
		}
	}
	for (int w = 0; w < 3; w++)
		if (workers[w].comm != NULL)
			pthread_join(workers[w].thread, NULL);
	ncclCommDestroy(*dp);
	ncclCommDestroy(*tp);
	ncclCommDestroy(*world);
}

static void test_split_groups_concurrently(void **state)
{
	(void)state;
	struct grid_job job = {0};
	assert_int_equal(pncclGetUniqueId(&job.id), ncclSuccess);
	assert_int_equal(fake_nccl_run_ranks(GRID_RANKS, grid_rank, &job), 0);
	for (int r = 0; r < GRID_RANKS; r++) {
		for (int w = 0; w < 3; w++) {
			if (job.wrong[r][w] != 0)
				fail_msg("rank %d communicator %d: %d wrong results", r, w,
					 job.wrong[r][w]);
			assert_int_equal(job.diverted[r][w], 1);
		}
	}
	assert_int_equal(counters().allreduces, (unsigned long long)GRID_RANKS * 3 * GRID_CALLS);
	assert_int_equal(ndet_comm_registered_for_testing(), 0);
}

/* ------------------------------------------------------------------ abort beside a setup */

#define LOCKSTEP_RANKS 3

/*
 * Two communicators created in one group (one lockstep setup of both at its end);
 * before setup exchange `abort_before`, every rank's communicator 0 is aborted from
 * another thread, once every rank is between the same two rounds.
 */
struct lockstep_job {
	ncclUniqueId ids[2];
	int abort_before;
	pthread_barrier_t between;
	float inputs[LOCKSTEP_RANKS][COUNT], outputs[LOCKSTEP_RANKS][COUNT];
	ncclResult_t created[LOCKSTEP_RANKS], aborted[LOCKSTEP_RANKS], call[LOCKSTEP_RANKS];
	int diverted[LOCKSTEP_RANKS], hooked[LOCKSTEP_RANKS];
};

static struct lockstep_job *lockstep_current;
static __thread int lockstep_rank_here = -1; /* the rank this thread drives */
static __thread ncclComm_t *lockstep_victim; /* its communicator 0, until aborted */
static __thread int lockstep_exchanges;

struct lockstep_abort {
	ncclComm_t comm;
	ncclResult_t result;
};

static void *lockstep_abort_main(void *opaque)
{
	struct lockstep_abort *abort = opaque;
	abort->result = ncclCommAbort(abort->comm);
	return NULL;
}

/* ndet_fake_backend_set_exchange_hook: the abort, between two rounds of the setup. */
static void lockstep_hook(void)
{
	struct lockstep_job *job = lockstep_current;
	if (lockstep_victim == NULL || ++lockstep_exchanges != job->abort_before)
		return;
	/* Every rank has left the round before: none is still in its exchange. */
	pthread_barrier_wait(&job->between);
	struct lockstep_abort abort = {.comm = *lockstep_victim, .result = ncclInternalError};
	pthread_t thread;
	if (pthread_create(&thread, NULL, lockstep_abort_main, &abort) == 0)
		pthread_join(thread, NULL);
	job->aborted[lockstep_rank_here] = abort.result;
	job->hooked[lockstep_rank_here] = lockstep_exchanges;
	lockstep_victim = NULL;
}

static void lockstep_rank(int rank, void *opaque)
{
	struct lockstep_job *job = opaque;
	ncclComm_t comms[2] = {NULL, NULL};
	lockstep_rank_here = rank;
	lockstep_victim = &comms[0];
	lockstep_exchanges = 0;
	ncclResult_t result = ncclGroupStart();
	for (int c = 0; c < 2 && result == ncclSuccess; c++)
		result = ncclCommInitRank(&comms[c], LOCKSTEP_RANKS, job->ids[c], rank);
	const ncclResult_t end = ncclGroupEnd();
	job->created[rank] = result != ncclSuccess ? result : end;
	lockstep_victim = NULL;
	if (comms[1] == NULL)
		return;
	job->call[rank] = ncclAllReduce(job->inputs[rank], job->outputs[rank], COUNT, ncclFloat32,
					ncclSum, comms[1], NULL);
	job->diverted[rank] = diverted(comms[1]);
	ncclCommDestroy(comms[1]);
}

/*
 * A communicator aborted from another thread while it is set up in lockstep with
 * another one: only it leaves the setup, whichever round it left before; the other
 * is set up on every rank and computes the tree.
 */
static void test_abort_beside_a_lockstep_setup(void **state)
{
	for (int before = 1; before <= 4; before++) {
		setup(state);
		struct lockstep_job *job = calloc(1, sizeof(*job));
		assert_non_null(job);
		job->abort_before = before;
		assert_int_equal(pthread_barrier_init(&job->between, NULL, LOCKSTEP_RANKS), 0);
		for (int c = 0; c < 2; c++)
			assert_int_equal(pncclGetUniqueId(&job->ids[c]), ncclSuccess);
		for (int r = 0; r < LOCKSTEP_RANKS; r++)
			ndet_test_fill_random(NDET_DTYPE_F32, job->inputs[r], COUNT,
					      0x10c5 + (uint64_t)(before * 8 + r), 0);
		lockstep_current = job;
		ndet_fake_backend_set_exchange_hook(lockstep_hook);
		assert_int_equal(fake_nccl_run_ranks(LOCKSTEP_RANKS, lockstep_rank, job), 0);
		ndet_fake_backend_set_exchange_hook(NULL);
		print_message("communicator 0 aborted before setup exchange %d\n", before);
		const void *inputs[LOCKSTEP_RANKS];
		float tree[COUNT];
		for (int r = 0; r < LOCKSTEP_RANKS; r++)
			inputs[r] = job->inputs[r];
		assert_int_equal(ndet_reference_allreduce(inputs, LOCKSTEP_RANKS, tree, COUNT,
							  NDET_DTYPE_F32, NDET_OP_SUM),
				 NDET_OK);
		for (int r = 0; r < LOCKSTEP_RANKS; r++) {
			assert_int_equal(job->hooked[r], before);
			assert_int_equal(job->aborted[r], ncclSuccess);
			assert_int_equal(job->created[r], ncclSuccess);
			assert_int_equal(job->call[r], ncclSuccess);
			assert_int_equal(job->diverted[r], 1);
			assert_memory_equal(job->outputs[r], tree, sizeof(tree));
		}
		assert_int_equal(ndet_comm_registered_for_testing(), 0);
		pthread_barrier_destroy(&job->between);
		free(job);
	}
}

/*
 * One thread drives both ranks of two communicators (two cliques), set up in one
 * lockstep at the outermost ncclGroupEnd; before setup exchange `before`, rank 0 of
 * the first is aborted from another thread.  Its other rank leaves with it without
 * calling NCCL: its all-gather would wait for the aborted rank forever (real NCCL
 * does not fail it, as the fake does).  The second communicator is set up and diverts.
 */
static ncclComm_t *clique_victim;
static int clique_abort_before, clique_exchanges;
static ncclResult_t clique_aborted;

static void *clique_abort_main(void *opaque)
{
	(void)opaque;
	clique_aborted = ncclCommAbort(*clique_victim);
	return NULL;
}

static void clique_hook(void)
{
	pthread_t thread;
	if (++clique_exchanges == clique_abort_before &&
	    pthread_create(&thread, NULL, clique_abort_main, NULL) == 0)
		pthread_join(thread, NULL);
}

static void test_abort_in_a_clique_setup(void **state)
{
	for (int before = 1; before <= 4; before++) {
		setup(state);
		char trace[4096];
		ncclComm_t x[2] = {NULL, NULL}, y[2] = {NULL, NULL};
		static float data[2][COUNT], sums[2][COUNT];
		assert_int_equal(fake_nccl_trace_temp(trace, sizeof(trace)), 0);
		clique_victim = &x[0];
		clique_abort_before = before;
		clique_exchanges = 0;
		clique_aborted = ncclInternalError;
		assert_int_equal(ncclGroupStart(), ncclSuccess);
		assert_int_equal(fake_nccl_init_clique(x, 2), ncclSuccess);
		assert_int_equal(fake_nccl_init_clique(y, 2), ncclSuccess);
		assert_int_equal(setenv("FAKE_NCCL_TRACE", trace, 1), 0);
		ndet_fake_backend_set_exchange_hook(clique_hook);
		assert_int_equal(ncclGroupEnd(), ncclSuccess);
		ndet_fake_backend_set_exchange_hook(NULL);
		unsetenv("FAKE_NCCL_TRACE");
		print_message("rank 0 of the first clique aborted before setup exchange %d\n",
			      before);
		assert_int_equal(clique_aborted, ncclSuccess);
		/* Four all-gathers a round until the abort, then the second clique's two. */
		assert_int_equal(fake_nccl_trace_count(trace, "ncclAllGather"),
				 4 * (before - 1) + 2 * (5 - before));
		remove(trace);
		for (int r = 0; r < 2; r++) {
			ndet_test_fill_random(NDET_DTYPE_F32, data[r], COUNT,
					      0xc11e + (uint64_t)(before * 2 + r), 0);
			assert_int_equal(diverted(y[r]), 1);
		}
		assert_int_equal(ncclGroupStart(), ncclSuccess);
		for (int r = 0; r < 2; r++)
			assert_int_equal(ncclAllReduce(data[r], sums[r], COUNT, ncclFloat32,
						       ncclSum, y[r], NULL),
					 ncclSuccess);
		assert_int_equal(ncclGroupEnd(), ncclSuccess);
		const void *inputs[2] = {data[0], data[1]};
		float tree[COUNT];
		assert_int_equal(ndet_reference_allreduce(inputs, 2, tree, COUNT, NDET_DTYPE_F32,
							  NDET_OP_SUM),
				 NDET_OK);
		for (int r = 0; r < 2; r++) {
			assert_memory_equal(sums[r], tree, sizeof(tree));
			assert_int_equal(ncclCommDestroy(y[r]), ncclSuccess);
		}
		assert_int_equal(ncclCommAbort(x[1]), ncclSuccess);
		assert_int_equal(ndet_comm_registered_for_testing(), 0);
	}
}

/* ------------------------------------------------------------------ create/destroy cycles */

static int cycle_count(void)
{
	const char *value = getenv("NDET_TEST_CYCLES");
	int cycles = value != NULL ? atoi(value) : 0;
	return cycles > 0 ? cycles : 1000;
}

enum cycle_end { END_DESTROY, END_FINALIZE, END_ABORT };

/*
 * One cycle: two ranks of one thread, set up, one diverted call, then the end:
 * destroy, finalize + destroy, or abort.
 */
static void one_cycle(enum cycle_end end)
{
	ncclComm_t comms[2] = {NULL, NULL};
	float values[2][8];
	for (int i = 0; i < 8; i++)
		values[0][i] = values[1][i] = (float)i;
	assert_int_equal(ncclCommInitAll(comms, 2, NULL), ncclSuccess);
	assert_int_equal(ncclGroupStart(), ncclSuccess);
	for (int r = 0; r < 2; r++)
		assert_int_equal(reduce_floats(values[r], 8, comms[r]), ncclSuccess);
	assert_int_equal(ncclGroupEnd(), ncclSuccess);
	assert_true(values[1][7] == 14.0f);
	/* While the communicators live, the public counters show their pools. */
	ncclDetResources_t held;
	assert_int_equal(ncclDetGetResources(&held), ncclSuccess);
	assert_true(held.allocations > 0 && held.bytes > 0);
	assert_int_equal(ncclDetGetResources(NULL), ncclInvalidArgument);
	if (end == END_FINALIZE) {
		assert_int_equal(ncclGroupStart(), ncclSuccess);
		for (int r = 0; r < 2; r++)
			assert_int_equal(ncclCommFinalize(comms[r]), ncclSuccess);
		assert_int_equal(ncclGroupEnd(), ncclSuccess);
	}
	for (int r = 0; r < 2; r++)
		assert_int_equal(end == END_ABORT ? ncclCommAbort(comms[r])
						  : ncclCommDestroy(comms[r]),
				 ncclSuccess);
}

static void test_create_destroy_cycles(void **state)
{
	const int cycles = cycle_count();
	static const char *const names[] = {"destroy", "finalize + destroy", "abort"};
	/*
	 * Ranks of one process (threads, ncclCommInitAll): whatever the end, the last
	 * rank released frees both pools.  Nothing may be left after any cycle.
	 */
	for (int end = END_DESTROY; end <= END_ABORT; end++) {
		setup(state);
		print_message("%d cycles, one process, %s\n", cycles, names[end]);
		for (int c = 0; c < cycles; c++) {
			one_cycle((enum cycle_end)end);
			assert_nothing_held(c);
		}
		struct ndet_fake_backend_counters now = counters();
		assert_int_equal(now.engines_created, 2 * cycles);
		assert_int_equal(now.engines_destroyed, 2 * cycles);
		assert_int_equal(now.pools_freed, 2 * cycles);
		assert_int_equal(now.pools_quarantined, 0);
		assert_int_equal(now.barriers, 0);
	}

	/* Ranks "in other processes": finalize meets at a barrier and frees every pool. */
	setup(state);
	set_knob("FAKE_BACKEND_PROCESS_PER_RANK", "1");
	for (int c = 0; c < cycles; c++) {
		one_cycle(END_FINALIZE);
		assert_nothing_held(c);
	}
	struct ndet_fake_backend_counters now = counters();
	assert_int_equal(now.pools_freed, 2 * cycles);
	assert_int_equal(now.barriers, 2 * cycles);

	/*
	 * Destroy without finalize, or abort, between processes: no barrier, but each
	 * rank writes its detach word into the other's pool once its kernels are idle,
	 * and a pool goes once its peer did (before the detach protocol every pool was
	 * kept until exit).  One thread tears both "processes" down in turn: rank 0's
	 * pool is pending until rank 1's teardown, which frees both; no polling (the
	 * thread would wait for itself).
	 */
	for (int end = END_DESTROY; end <= END_ABORT; end += END_ABORT - END_DESTROY) {
		setup(state);
		set_knob("FAKE_BACKEND_PROCESS_PER_RANK", "1");
		set_knob("NCCL_DET_DEBUG_SUBSYS", "ALLOC");
		set_knob("NCCL_DET_DEBUG", "INFO");
		ndet_teardown_set_detach_wait_for_testing(0);
		print_message("%d cycles, processes, %s\n", cycles, names[end]);
		for (int c = 0; c < cycles; c++) {
			one_cycle((enum cycle_end)end);
			assert_nothing_held(c);
		}
		now = counters();
		assert_int_equal(now.engines_destroyed, 2 * cycles);
		assert_int_equal(now.pools_freed, 2 * cycles);
		assert_int_equal(now.pools_quarantined, 0);
		assert_int_equal(now.barriers, 0);
		assert_int_equal(resources().peers_gone, 0);
		assert_int_equal(fake_nccl_file_count(log_path, "kept until exit", NULL), 0);
		set_knob("NCCL_DET_DEBUG", "WARN");
	}
}

/* ------------------------------------------------------------------ ranks that disagree */

enum odd_setting { ODD_POOL_SIZE, ODD_STRICT, ODD_VERSION, ODD_DISABLED };

struct odd_job {
	ncclUniqueId id;
	enum odd_setting odd;
	int odd_rank;
	bool nonblocking;      /* first call a PreMulSum one, before any setup */
	bool disabled_gathers; /* ODD_DISABLED: its first collective matches round one */
	ncclResult_t init[3], premul[3], call[3], async[3];
	int diverted[3];
	float output[3][COUNT];
};

static ncclResult_t odd_init(struct odd_job *job, int rank, ncclComm_t *comm)
{
	if (!job->nonblocking)
		return ncclCommInitRank(comm, 3, job->id, rank);
	ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
	config.blocking = 0;
	ncclResult_t result = ncclCommInitRankConfig(comm, 3, job->id, rank, &config);
	if (result != ncclInProgress)
		return result;
	ncclResult_t state = ncclInProgress;
	while (state == ncclInProgress) {
		result = ncclCommGetAsyncError(*comm, &state);
		if (result != ncclSuccess)
			return result;
	}
	return state;
}

static void odd_rank(int rank, void *opaque)
{
	struct odd_job *job = opaque;
	/* Real ranks are processes, each with its environment: here a thread's settings. */
	struct ndet_settings mine = *ndet_settings_get();
	if (rank == job->odd_rank) {
		if (job->odd == ODD_POOL_SIZE)
			mine.pool_size *= 2;
		else if (job->odd == ODD_STRICT)
			mine.strict = true;
		else if (job->odd == ODD_DISABLED)
			mine.enable = false;
	}
	ndet_settings_set_thread_override_for_testing(&mine);
	ncclComm_t comm = NULL;
	float values[COUNT];
	for (int i = 0; i < COUNT; i++)
		values[i] = (float)(rank + 1) * 0.5f + (float)i;
	job->init[rank] = odd_init(job, rank, &comm);
	if (comm == NULL)
		goto out;
	if (job->odd == ODD_DISABLED && rank == job->odd_rank) {
		/*
		 * Without nccl-det, its first collective pairs with nccl-det's first
		 * exchange: a byte all-gather of 16 bytes (that shape), or another one.
		 */
		static unsigned char mine_bytes[3][16], gathered[3][48];
		job->call[rank] = job->disabled_gathers
					  ? ncclAllGather(mine_bytes[rank], gathered[rank], 16,
							  ncclUint8, comm, NULL)
					  : reduce_floats(values, COUNT, comm);
		ncclCommDestroy(comm);
		goto out;
	}
	if (job->nonblocking) {
		ncclRedOp_t op;
		float scalar = 0.25f;
		job->premul[rank] = ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32,
							     ncclScalarHostImmediate, comm);
		if (job->premul[rank] == ncclSuccess) {
			job->premul[rank] =
				settle(comm, ncclAllReduce(values, job->output[rank], COUNT,
							   ncclFloat32, op, comm, NULL));
			ncclRedOpDestroy(op, comm);
		}
	}
	job->call[rank] = settle(comm, ncclAllReduce(values, job->output[rank], COUNT, ncclFloat32,
						     ncclSum, comm, NULL));
	job->async[rank] = async_error(comm);
	job->diverted[rank] = diverted(comm);
	ncclCommDestroy(comm);
out:
	ndet_settings_set_thread_override_for_testing(NULL);
}

static void run_odd(struct odd_job *job)
{
	assert_int_equal(pncclGetUniqueId(&job->id), ncclSuccess);
	assert_int_equal(fake_nccl_run_ranks(3, odd_rank, job), 0);
}

static int count_log(const char *needle1, const char *needle2)
{
	return fake_nccl_file_count(log_path, needle1, needle2);
}

/*
 * Settings or library versions differ between ranks: the same fallback on every
 * rank (NCCL's results, identical everywhere) and one WARN on every rank naming the
 * cause and the rank: never a split decision.  On one host, and with every rank its
 * own host (3 x 1, which diverts when the ranks agree: test_hosts.c), where the odd
 * rank is alone on its host.
 */
static void test_ranks_disagree(void **state)
{
	static const char *const hosts[] = {NULL, "A@0;B@1;C@2"};
	for (size_t h = 0; h < sizeof(hosts) / sizeof(hosts[0]); h++) {
		const struct {
			enum odd_setting odd;
			int odd_rank;
			bool nonblocking;
			const char *cause;
		} cases[] = {
			{ODD_POOL_SIZE, 1, false, "settings mismatch (rank 1)"},
			{ODD_STRICT, 2, false, "settings mismatch (rank 2)"},
			/* Strict on one rank, first call one that strict mode refuses. */
			{ODD_STRICT, 2, true, "settings mismatch (rank 2)"},
			{ODD_STRICT, 0, true, "settings mismatch (rank 1)"},
			{ODD_VERSION, 2, false, "library version mismatch (rank 2)"},
		};
		for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
			setup(state);
			if (hosts[h] != NULL) {
				assert_int_equal(setenv("NCCL_DET_TEST_HOST", hosts[h], 1), 0);
				settings_changed();
			}
			/* A split decision would leave NCCL waiting: give up quickly. */
			assert_int_equal(setenv("FAKE_NCCL_TIMEOUT_MS", "3000", 1), 0);
			if (cases[c].odd == ODD_VERSION)
				ndet_fake_backend_set_library_version(cases[c].odd_rank,
								      NCCL_DET_VERSION_CODE + 1);
			struct odd_job job = {.odd = cases[c].odd,
					      .odd_rank = cases[c].odd_rank,
					      .nonblocking = cases[c].nonblocking};
			run_odd(&job);
			assert_int_equal(setenv("FAKE_NCCL_TIMEOUT_MS", "20000", 1), 0);
			print_message("case %zu%s: %s\n", c, hosts[h] ? " (3 hosts)" : "",
				      cases[c].cause);
			for (int r = 0; r < 3; r++) {
				assert_int_equal(job.init[r], ncclSuccess);
				assert_int_equal(job.premul[r], ncclSuccess);
				assert_int_equal(job.call[r], ncclSuccess);
				assert_int_equal(job.async[r], ncclSuccess);
				assert_int_equal(job.diverted[r], 0);
				assert_memory_equal(job.output[r], job.output[0],
						    sizeof(job.output[0]));
			}
			/*
			 * Across hosts a non-blocking communicator falls back first, for that
			 * (doc/multihost-design.md): the same fallback on every rank still.
			 */
			const char *cause =
				hosts[h] != NULL && cases[c].nonblocking
					? "multi-host, non-blocking communicator (rank 0)"
					: cases[c].cause;
			assert_int_equal(count_log("not deterministic", cause), 3);
			assert_int_equal(counters().engines_created, 0);
		}
		/* The control: the same job with every rank alike diverts, on every rank. */
		setup(state);
		if (hosts[h] != NULL) {
			assert_int_equal(setenv("NCCL_DET_TEST_HOST", hosts[h], 1), 0);
			settings_changed();
		}
		struct odd_job alike = {.odd = ODD_POOL_SIZE, .odd_rank = -1};
		run_odd(&alike);
		for (int r = 0; r < 3; r++) {
			assert_int_equal(alike.call[r], ncclSuccess);
			assert_int_equal(alike.diverted[r], 1);
			assert_memory_equal(alike.output[r], alike.output[0],
					    sizeof(alike.output[0]));
		}
	}
}

/*
 * NCCL_DET_ENABLE=0 on one rank, against the documented precondition: that rank runs
 * no setup, so its first collective pairs with nccl-det's first exchange.  An NCCL
 * that notices (the fake compares the calls) fails both sides.  One that does not
 * hands the enabled ranks a slot without a setup record: they fail the communicator
 * with ncclInvalidUsage and a WARN naming the rank, now and at every later
 * all-reduce, instead of running on with collectives that no longer match.
 */
static void test_enable_differs(void **state)
{
	for (int gathers = 0; gathers < 2; gathers++) {
		setup(state);
		struct odd_job job = {
			.odd = ODD_DISABLED, .odd_rank = 1, .disabled_gathers = gathers != 0};
		run_odd(&job);
		if (!gathers) {
			for (int r = 0; r < 3; r++)
				assert_int_equal(r == 1 ? job.call[r] : job.init[r],
						 ncclInvalidUsage);
			continue;
		}
		/* The disabled rank's all-gather "succeeded" with our headers in it. */
		assert_int_equal(job.call[1], ncclSuccess);
		for (int r = 0; r < 3; r += 2) {
			assert_int_equal(job.init[r], ncclInvalidUsage);
			assert_int_equal(job.call[r], ncclInvalidUsage);
			assert_int_equal(job.async[r], ncclInvalidUsage);
			assert_int_equal(job.diverted[r], 0);
		}
		assert_int_equal(count_log("rank 1 sent no setup record", "NCCL_DET_ENABLE"), 2);
	}
}

/* ------------------------------------------------------------------ fork */

/* Quiet fork: the child may call NCCL; nothing of ours runs there. */
static void test_fork_after_setup(void **state)
{
	(void)state;
	ncclComm_t comms[2] = {NULL, NULL};
	static float values[2][COUNT];
	assert_int_equal(ncclCommInitAll(comms, 2, NULL), ncclSuccess);
	struct ndet_fake_backend_counters before = counters();
	fflush(NULL);
	pid_t child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		/* Passed through: NCCL answers, and nccl-det says it is not diverting. */
		bool ok = async_error(comms[0]) == ncclSuccess && diverted(comms[0]) == 0;
		ok = ok && ncclGroupStart() == ncclSuccess;
		for (int r = 0; r < 2; r++)
			ok = ok && reduce_floats(values[r], COUNT, comms[r]) == ncclSuccess;
		ok = ok && ncclGroupEnd() == ncclSuccess;
		for (int r = 0; r < 2; r++)
			ok = ok && ncclCommDestroy(comms[r]) == ncclSuccess;
		/* The engines the child inherited were neither used nor released. */
		struct ndet_fake_backend_counters after = counters();
		ok = ok && after.allreduces == before.allreduces &&
		     after.engines_destroyed == before.engines_destroyed;
		exit(ok ? 0 : 1);
	}
	int status = 0;
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	/* The parent goes on, diverted. */
	assert_int_equal(ncclGroupStart(), ncclSuccess);
	for (int r = 0; r < 2; r++)
		assert_int_equal(reduce_floats(values[r], COUNT, comms[r]), ncclSuccess);
	assert_int_equal(ncclGroupEnd(), ncclSuccess);
	assert_int_equal(counters().allreduces, before.allreduces + 2);
	for (int r = 0; r < 2; r++)
		assert_int_equal(ncclCommDestroy(comms[r]), ncclSuccess);
}

struct busy_job {
	ncclUniqueId id;
	ncclComm_t comms[2];
	int running, stop; /* flags */
	int calls[2];
	ncclResult_t last[2];
};

static void busy_rank(int rank, void *opaque)
{
	struct busy_job *job = opaque;
	ncclComm_t comm = NULL;
	float values[COUNT];
	if (ncclCommInitRank(&comm, 2, job->id, rank) != ncclSuccess)
		return;
	job->comms[rank] = comm;
	raise_flag(&job->running);
	/* Both ranks stop at the same call: the first flag seen decides for both. */
	for (int i = 0; i < 100000; i++) {
		for (int k = 0; k < COUNT; k++)
			values[k] = (float)(i + k);
		int stop = 0;
		if (reduce_floats(values, 1, comm) != ncclSuccess)
			break;
		if (rank == 0)
			stop = __atomic_load_n(&job->stop, __ATOMIC_ACQUIRE);
		float agreed[1] = {(float)stop};
		if (reduce_floats(agreed, 1, comm) != ncclSuccess)
			break;
		job->last[rank] = reduce_floats(values, COUNT, comm);
		job->calls[rank]++;
		if (agreed[0] != 0.0f || job->last[rank] != ncclSuccess)
			break;
	}
	ncclCommDestroy(comm);
}

/* Busy fork: the child of a process whose threads are inside our calls just exits. */
static void *busy_forker(void *opaque)
{
	struct busy_job *job = opaque;
	wait_flag(&job->running, 2);
	pause_ms(20);
	int *statuses = calloc(3, sizeof(int));
	for (int f = 0; f < 3 && statuses != NULL; f++) {
		pid_t child = fork();
		if (child == 0) {
			/*
			 * A parent's thread may have held any lock of ours at fork(): the
			 * child must not wait for one (a query touches none).  A child of a
			 * threaded process leaves with _exit, as POSIX asks (exit() runs
			 * handlers that may take locks; the quiet test uses exit()).
			 */
			int diverted_here = diverted(job->comms[0]);
			_exit(diverted_here == 0 ? 0 : 1);
		}
		if (child < 0 || waitpid(child, &statuses[f], 0) != child)
			statuses[f] = -1;
		pause_ms(5);
	}
	__atomic_store_n(&job->stop, 1, __ATOMIC_RELEASE);
	return statuses;
}

static void test_fork_while_busy(void **state)
{
	(void)state;
	struct busy_job job = {0};
	pthread_t forker;
	assert_int_equal(pncclGetUniqueId(&job.id), ncclSuccess);
	assert_int_equal(pthread_create(&forker, NULL, busy_forker, &job), 0);
	assert_int_equal(fake_nccl_run_ranks(2, busy_rank, &job), 0);
	void *result = NULL;
	assert_int_equal(pthread_join(forker, &result), 0);
	int *statuses = result;
	assert_non_null(statuses);
	for (int f = 0; f < 3; f++) {
		assert_true(WIFEXITED(statuses[f]));
		assert_int_equal(WEXITSTATUS(statuses[f]), 0);
	}
	free(statuses);
	for (int r = 0; r < 2; r++) {
		assert_int_equal(job.last[r], ncclSuccess);
		assert_true(job.calls[r] > 0);
	}
	assert_int_equal(job.calls[0], job.calls[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_abort_releases_waiting_call, setup),
		cmocka_unit_test_setup(test_abort_during_teardown, setup),
		cmocka_unit_test_setup(test_stopped_peer, setup),
		cmocka_unit_test_setup(test_diverging_calls, setup),
		cmocka_unit_test_setup(test_destroy_while_peers_run, setup),
		cmocka_unit_test_setup(test_destroy_any_order, setup),
		cmocka_unit_test_setup(test_killed_peer_releases_pools, setup),
		cmocka_unit_test_setup(test_split_groups_concurrently, setup),
		cmocka_unit_test_setup(test_abort_beside_a_lockstep_setup, setup),
		cmocka_unit_test_setup(test_abort_in_a_clique_setup, setup),
		cmocka_unit_test_setup(test_create_destroy_cycles, setup),
		cmocka_unit_test_setup(test_ranks_disagree, setup),
		cmocka_unit_test_setup(test_enable_differs, setup),
		cmocka_unit_test_setup(test_fork_after_setup, setup),
		cmocka_unit_test_setup(test_fork_while_busy, setup),
	};
	return cmocka_run_group_tests(tests, setup_group, teardown_group);
}
