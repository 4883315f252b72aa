/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * GPU fault tests through the real NCCL API, run under
 * LD_PRELOAD=libnccl-det.so by test/gpu/faults.sh: one process per rank, ranks that share
 * a GPU each with its own NCCL_HOSTID, a short NCCL_DET_TIMEOUT.
 *
 *   RANK=r WORLD=n NDET_TEST_ID_FILE=path ndet_fault_test CASE
 *
 * kill, kill-during, stop   the last rank dies while the others are inside a large
 *        diverted all-reduce (SIGKILL before its call; SIGKILL right after its call;
 *        SIGSTOP from the script, SIGKILL once the survivors reported).  Survivors:
 *        ncclCommGetAsyncError says ncclRemoteError within NCCL_DET_TIMEOUT + 1 s of the
 *        call (kill-during may instead complete, then bit-exact), the stream completes,
 *        a fresh cudaMalloc + memset + sync works, ncclCommShrink(NCCL_SHRINK_ABORT)
 *        without the dead rank gives a diverted, bit-exact all-reduce, and
 *        ncclCommAbort of the parent returns.
 * abort-thread   2 ranks, rank 1 never calls: rank 0's kernel waits until another
 *        thread's ncclCommAbort (after 1 s); the stream completes within 2 s of it.
 * diverge-count, diverge-dtype, diverge-op   rank 1's call differs: every rank gets an
 *        error within NCCL_DET_TIMEOUT + 1 s, none a "successful" result, and the next
 *        call fails at once.
 * leak-destroy, leak-finalize, leak-abort   NDET_FAULT_CYCLES (default 100) cycles of
 *        ncclCommInitRank, three checked all-reduces and that teardown: the device's
 *        free memory after them equals that after one warm-up cycle.
 * many-comms   TP and DP groups from ncclCommSplit and the world communicator,
 *        interleaved on three streams without host synchronisation: all bit-exact.
 * fork, fork-exit   after setup the child leaves at once with _exit(0), or with exit(0)
 *        after checking that nccl-det is inert in it (no CUDA call in the child); the
 *        parent's next all-reduce is still bit-exact.
 * exit-live   returns from main with its communicator live (faults.sh wants exit 0).
 *
 * Ranks meet through files named NDET_TEST_ID_FILE + suffix; faults.sh uses
 * .victim-pid (stop: the pid to stop), .reported.R (a survivor saw the error) and
 * .victim-gone (the stopped rank was killed).  Exit 0 pass, 1 fail, 2 setup error,
 * 77 no GPU; the last line is a summary (a rank that is killed prints none).
 */
#include "config.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <nccl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nccl_det.h"
#include "reference/ndet_reference.h"
#include "test/gpu/ndet_gpu_data.h"

/* Longest wait for a peer's file: the script's per-case timeout is the real limit. */
#define FAULT_WAIT_S 600.0

static struct {
	int rank, nranks;
	const char *base; /* NDET_TEST_ID_FILE: every rendezvous file starts with it */
	const char *name; /* the case */
	double timeout;   /* NCCL_DET_TIMEOUT, seconds */
	bool enabled;     /* NCCL_DET_ENABLE is not 0: communicators must be diverted */
	/*
	 * NCCL_DET_TEST_HOST is set (faults.sh HOSTS=): the communicator spans simulated
	 * hosts, and a survivor may be held in NCCL's part of the call (doc/multihost-design.md,
	 * "Faults"): it must report an error, and ncclCommAbort must then end its stream.
	 */
	bool hosts;
	unsigned long long checks, failures;
} fault;

static double fault_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

__attribute__((format(printf, 2, 3))) static bool fault_check(bool ok, const char *format, ...)
{
	fault.checks++;
	if (ok)
		return true;
	fault.failures++;
	va_list args;
	va_start(args, format);
	fprintf(stderr, "FAIL rank %d %s: ", fault.rank, fault.name);
	vfprintf(stderr, format, args);
	fputc('\n', stderr);
	va_end(args);
	return false;
}

/* ------------------------------------------------------------ rendezvous files */

/* "<base>.<tag>", or "<base>.<tag>.<rank>" for rank >= 0. */
static void fault_path(char *path, size_t size, const char *tag, int rank)
{
	if (rank < 0)
		snprintf(path, size, "%s.%s", fault.base, tag);
	else
		snprintf(path, size, "%s.%s.%d", fault.base, tag, rank);
}

/* Readers never see a partial file: written aside, then renamed. */
static bool fault_write(const char *tag, int rank, const void *data, size_t size)
{
	char path[4096], tmp[4200];
	fault_path(path, sizeof(path), tag, rank);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *file = fopen(tmp, "wb");
	if (file == NULL)
		return false;
	bool ok = size == 0 || fwrite(data, size, 1, file) == 1;
	ok = fclose(file) == 0 && ok;
	return ok && rename(tmp, path) == 0;
}

/* Wait up to `seconds` for the file; then read `size` bytes of it into `data`. */
static bool fault_read(const char *tag, int rank, void *data, size_t size, double seconds)
{
	char path[4096];
	fault_path(path, sizeof(path), tag, rank);
	const double end = fault_now() + seconds;
	for (;;) {
		FILE *file = fopen(path, "rb");
		if (file != NULL) {
			bool ok = size == 0 || fread(data, size, 1, file) == 1;
			fclose(file);
			return ok;
		}
		if (fault_now() > end)
			return false;
		usleep(10000);
	}
}

static bool fault_barrier(const char *tag)
{
	if (!fault_write(tag, fault.rank, NULL, 0))
		return false;
	for (int r = 0; r < fault.nranks; r++)
		if (!fault_read(tag, r, NULL, 0, FAULT_WAIT_S))
			return false;
	return true;
}

/* ------------------------------------------------------------ NCCL helpers */

/* A communicator of all ranks; rank 0 hands the unique id out through a file. */
static ncclComm_t fault_comm_init(const char *tag)
{
	ncclUniqueId id;
	if (fault.rank == 0) {
		NCCL_OK(ncclGetUniqueId(&id));
		if (!fault_write(tag, -1, &id, sizeof(id))) {
			fprintf(stderr, "rank 0: cannot write %s.%s\n", fault.base, tag);
			exit(2);
		}
	} else if (!fault_read(tag, -1, &id, sizeof(id), FAULT_WAIT_S)) {
		fprintf(stderr, "rank %d: no unique id in %s.%s\n", fault.rank, fault.base, tag);
		exit(2);
	}
	ncclComm_t comm = NULL;
	NCCL_OK(ncclCommInitRank(&comm, fault.nranks, id, fault.rank));
	return comm;
}

/* nccl-det's answer for `comm`; false when nccl-det is not loaded. */
static bool fault_query(ncclComm_t comm, int *diverted, const char **reason)
{
	typedef ncclResult_t (*query_fn)(ncclComm_t, int *, const char **);
	query_fn query = (query_fn)dlsym(RTLD_DEFAULT, "ncclDetCommQuery");
	*diverted = 0;
	*reason = "nccl-det is not loaded";
	return query != NULL && query(comm, diverted, reason) == ncclSuccess;
}

static void fault_expect_diverted(ncclComm_t comm, const char *what)
{
	int diverted = 0;
	const char *reason = NULL;
	fault_query(comm, &diverted, &reason);
	if (fault.enabled)
		fault_check(diverted == 1, "%s is not diverted: %s", what, reason);
}

/*
 * Poll ncclCommGetAsyncError until it reports an error, `stream` completed without
 * one (*completed), or `limit` seconds after `start` passed.  *at: seconds after start.
 * The error must come without the host waiting for the stream (doc/design.md,
 * "Teardown and faults").
 */
static ncclResult_t fault_wait_outcome(ncclComm_t comm, cudaStream_t stream, double start,
				       double limit, double *at, bool *completed)
{
	*completed = false;
	for (;;) {
		ncclResult_t async = ncclSuccess;
		ncclResult_t result = ncclCommGetAsyncError(comm, &async);
		if (result != ncclSuccess)
			async = result;
		*at = fault_now() - start;
		if (async != ncclSuccess && async != ncclInProgress)
			return async;
		if (*completed || *at > limit)
			return ncclSuccess;
		/* Done: ask once more, an error may have been written just before. */
		*completed = cudaStreamQuery(stream) == cudaSuccess;
		if (!*completed)
			usleep(1000);
	}
}

/* Does `stream` complete within `limit` seconds (polling, never blocking)? */
static bool fault_wait_stream(cudaStream_t stream, double limit, double *done)
{
	const double start = fault_now();
	cudaError_t err;
	while ((err = cudaStreamQuery(stream)) == cudaErrorNotReady && fault_now() - start < limit)
		usleep(1000);
	*done = fault_now();
	if (err != cudaSuccess && err != cudaErrorNotReady)
		fprintf(stderr, "rank %d: cudaStreamQuery: %s\n", fault.rank,
			cudaGetErrorString(err));
	return err == cudaSuccess;
}

/* ------------------------------------------------------------ data */

/* Member `member`'s input of the call seeded `seed`: equal on every rank that builds it. */
static void fault_fill_input(float *buffer, size_t count, uint64_t seed, int member)
{
	gpu_fill(NDET_DTYPE_F32, buffer, count, seed * 1000003u + (uint64_t)member, false);
}

/* Every member's input and the CPU tree's f32 sum of them, in member order. */
struct fault_data {
	size_t count;
	int members;
	float *inputs[NDET_MAX_RANKS];
	float *expected;
};

static void *fault_alloc(size_t bytes)
{
	void *memory = malloc(bytes);
	if (memory == NULL) {
		fprintf(stderr, "rank %d: out of host memory (%zu bytes)\n", fault.rank, bytes);
		exit(2);
	}
	return memory;
}

/* ids[m] names member m's input (its rank in the parent communicator); NULL = m. */
static void fault_data_init(struct fault_data *data, size_t count, uint64_t seed, int members,
			    const int *ids)
{
	const void *views[NDET_MAX_RANKS];
	data->count = count;
	data->members = members;
	for (int m = 0; m < members; m++) {
		data->inputs[m] = fault_alloc(count * sizeof(float));
		fault_fill_input(data->inputs[m], count, seed, ids != NULL ? ids[m] : m);
		views[m] = data->inputs[m];
	}
	data->expected = fault_alloc(count * sizeof(float));
	if (ndet_reference_allreduce(views, members, data->expected, count, NDET_DTYPE_F32,
				     NDET_OP_SUM) != NDET_OK) {
		fprintf(stderr, "rank %d: the CPU reference failed\n", fault.rank);
		exit(2);
	}
}

static void fault_data_free(struct fault_data *data)
{
	for (int m = 0; m < data->members; m++)
		free(data->inputs[m]);
	free(data->expected);
}

/* The stream that wrote `recv` is synchronised: compare it bit for bit. */
static void fault_data_check(const struct fault_data *data, const float *recv, const char *what)
{
	float *got = fault_alloc(data->count * sizeof(float));
	GPU_CHECK(cudaMemcpy(got, recv, data->count * sizeof(float), cudaMemcpyDeviceToHost));
	size_t first = 0;
	size_t bad = gpu_compare(NDET_DTYPE_F32, got, data->expected, data->count, &first);
	fault_check(bad == 0, "%s: %zu of %zu elements differ from the CPU tree (first at %zu)",
		    what, bad, data->count, first);
	free(got);
}

/* Device buffers of one case, large enough for its largest call. */
struct fault_buffers {
	float *send, *recv;
	cudaStream_t stream;
};

static void fault_buffers_init(struct fault_buffers *buffers, size_t count)
{
	GPU_CHECK(cudaStreamCreateWithFlags(&buffers->stream, cudaStreamNonBlocking));
	GPU_CHECK(cudaMalloc((void **)&buffers->send, count * sizeof(float)));
	GPU_CHECK(cudaMalloc((void **)&buffers->recv, count * sizeof(float)));
}

static void fault_buffers_free(struct fault_buffers *buffers)
{
	GPU_CHECK(cudaFree(buffers->send));
	GPU_CHECK(cudaFree(buffers->recv));
	GPU_CHECK(cudaStreamDestroy(buffers->stream));
}

/* One all-reduce of fresh data on `comm`, where this rank is member `me`: checked. */
static void fault_allreduce_checked(ncclComm_t comm, int me, int members, size_t count,
				    uint64_t seed, const struct fault_buffers *buffers,
				    const char *what)
{
	struct fault_data data;
	fault_data_init(&data, count, seed, members, NULL);
	gpu_upload(buffers->send, data.inputs[me], count * sizeof(float), buffers->stream);
	GPU_CHECK(cudaMemsetAsync(buffers->recv, 0x5a, count * sizeof(float), buffers->stream));
	ncclResult_t result = ncclAllReduce(buffers->send, buffers->recv, count, ncclFloat32,
					    ncclSum, comm, buffers->stream);
	fault_check(result == ncclSuccess, "%s: ncclAllReduce returned %s", what,
		    ncclGetErrorString(result));
	GPU_CHECK(cudaStreamSynchronize(buffers->stream));
	ncclResult_t async = ncclSuccess;
	NCCL_OK(ncclCommGetAsyncError(comm, &async));
	fault_check(async == ncclSuccess, "%s: ncclCommGetAsyncError reports %s", what,
		    ncclGetErrorString(async));
	fault_data_check(&data, buffers->recv, what);
	fault_data_free(&data);
}

static void fault_finalize_destroy(ncclComm_t comm)
{
	NCCL_OK(ncclCommFinalize(comm));
	NCCL_OK(ncclCommDestroy(comm));
}

/*
 * nccl-det's own account (ncclDetGetResources): no mapping of a peer's pool left open,
 * and memory only for pools whose peer has not detached yet, or (where `kept_ok`: a
 * local peer died) pools kept until exit because a dead peer can never say it let go.
 */
static void fault_check_resources(bool kept_ok)
{
	typedef ncclResult_t (*resources_fn)(ncclDetResources_t *);
	const resources_fn get = (resources_fn)dlsym(RTLD_DEFAULT, "ncclDetGetResources");
	ncclDetResources_t held;
	if (!fault.enabled || !fault_check(get != NULL && get(&held) == ncclSuccess,
					   "ncclDetGetResources is not available"))
		return;
	printf("rank %d: nccl-det holds %lld allocations (%lld bytes), %lld peer mappings, "
	       "%lld pools pending, %lld kept\n",
	       fault.rank, (long long)held.allocations, (long long)held.bytes,
	       (long long)held.ipcImports, (long long)held.pendingPools,
	       (long long)held.leakedPools);
	fault_check(held.ipcImports == 0, "%lld mappings of peers' pools still open",
		    (long long)held.ipcImports);
	fault_check(kept_ok || held.leakedPools == 0, "%lld pools kept until exit",
		    (long long)held.leakedPools);
	fault_check(held.allocations == 0 || held.pendingPools > 0 || held.leakedPools > 0,
		    "%lld allocations held with no pool pending or kept",
		    (long long)held.allocations);
}

/* ------------------------------------------------------------ kill, kill-during, stop */

enum fault_victim {
	FAULT_KILL_BEFORE_CALL,
	FAULT_KILL_AFTER_CALL,
	FAULT_STOPPED,
};

/* The last rank's part: it never returns. */
__attribute__((noreturn)) static void fault_victim(enum fault_victim how,
						   const struct fault_buffers *buffers,
						   size_t count, ncclComm_t comm)
{
	char pid[32];
	/* The survivors are inside their call by then. */
	usleep(1000000);
	switch (how) {
	case FAULT_KILL_BEFORE_CALL:
		raise(SIGKILL);
		break;
	case FAULT_KILL_AFTER_CALL:
		/* Launched, not waited for: the process dies with the kernel in flight. */
		(void)ncclAllReduce(buffers->send, buffers->recv, count, ncclFloat32, ncclSum, comm,
				    buffers->stream);
		raise(SIGKILL);
		break;
	case FAULT_STOPPED:
		snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
		if (!fault_write("victim-pid", -1, pid, strlen(pid)))
			fprintf(stderr, "rank %d: cannot write the pid file\n", fault.rank);
		/* faults.sh stops this process here and kills it later. */
		for (int i = 0; i < 1200; i++)
			usleep(100000);
		break;
	}
	fprintf(stderr, "FAIL rank %d %s: the victim is still alive\n", fault.rank, fault.name);
	exit(1);
}

/* Fresh device memory and work on a fresh stream, after our kernel failed. */
static void fault_fresh_cuda_work(void)
{
	const size_t bytes = 1u << 20;
	unsigned char *device = NULL, *host = fault_alloc(bytes);
	cudaStream_t stream = NULL;
	cudaError_t err = cudaMalloc((void **)&device, bytes);
	if (err == cudaSuccess)
		err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
	if (err == cudaSuccess)
		err = cudaMemsetAsync(device, 0xa5, bytes, stream);
	if (err == cudaSuccess)
		err = cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream);
	if (err == cudaSuccess)
		err = cudaStreamSynchronize(stream);
	size_t wrong = 0;
	for (size_t i = 0; err == cudaSuccess && i < bytes; i++)
		wrong += host[i] != 0xa5;
	fault_check(err == cudaSuccess && wrong == 0,
		    "fresh cudaMalloc + cudaMemset + sync after the fault: %s, %zu bytes wrong",
		    cudaGetErrorString(err), wrong);
	if (stream != NULL)
		GPU_CHECK(cudaStreamDestroy(stream));
	if (device != NULL)
		GPU_CHECK(cudaFree(device));
	free(host);
}

/* The survivors go on without the last rank: shrink, then a checked all-reduce. */
static void fault_recover(ncclComm_t comm, const struct fault_buffers *buffers)
{
	int excluded = fault.nranks - 1;
	ncclComm_t child = NULL;
	/* NCCL 2.28 wants NCCL_SHRINK_ABORT for a parent that failed; nccl-det stops its
	 * kernels on the parent first (ndet_shim.c). */
	ncclResult_t result = ncclCommShrink(comm, &excluded, 1, &child, NULL, NCCL_SHRINK_ABORT);
	if (fault_check(result == ncclSuccess && child != NULL,
			"ncclCommShrink(NCCL_SHRINK_ABORT) without rank %d returned %s", excluded,
			ncclGetErrorString(result))) {
		fault_expect_diverted(child, "the shrunk communicator");
		/* Ranks below the excluded one keep their number. */
		fault_allreduce_checked(child, fault.rank, fault.nranks - 1, (1u << 20) + 7, 9100,
					buffers, "all-reduce on the shrunk communicator");
		fault_finalize_destroy(child);
		printf("rank %d: shrunk communicator of %d ranks: diverted all-reduce bit-exact\n",
		       fault.rank, fault.nranks - 1);
	}
	/* NCCL leaves the parent's resources to the caller after a shrink. */
	const double start = fault_now();
	result = ncclCommAbort(comm);
	fault_check(result == ncclSuccess, "ncclCommAbort of the parent returned %s",
		    ncclGetErrorString(result));
	printf("rank %d: ncclCommAbort of the parent returned %s after %.3f s\n", fault.rank,
	       ncclGetErrorString(result), fault_now() - start);
}

static void case_peer_death(int variant)
{
	const enum fault_victim how = (enum fault_victim)variant;
	const int victim = fault.nranks - 1;
	const size_t count = (size_t)16 << 20; /* 64 MiB of f32: chunks through the pools */
	const uint64_t seed = 7000;
	struct fault_buffers buffers;
	fault_buffers_init(&buffers, count);
	ncclComm_t comm = fault_comm_init("id");
	fault_expect_diverted(comm, "the communicator");
	float *mine = fault_alloc(count * sizeof(float));
	fault_fill_input(mine, count, seed, fault.rank);
	gpu_upload(buffers.send, mine, count * sizeof(float), buffers.stream);
	free(mine);
	if (fault.rank == victim)
		fault_victim(how, &buffers, count, comm);

	const double start = fault_now();
	ncclResult_t result = ncclAllReduce(buffers.send, buffers.recv, count, ncclFloat32, ncclSum,
					    comm, buffers.stream);
	/* Across hosts NCCL's own group end may already know of the victim, as in NCCL. */
	fault_check(result == ncclSuccess || (fault.hosts && result == ncclRemoteError),
		    "ncclAllReduce returned %s", ncclGetErrorString(result));
	double at = 0;
	bool completed = false;
	ncclResult_t async = fault_wait_outcome(comm, buffers.stream, start, fault.timeout + 10,
						&at, &completed);
	if (how == FAULT_KILL_AFTER_CALL && async == ncclSuccess && completed) {
		/* The victim's kernel finished before the process died: then it must be right. */
		printf("rank %d: the call completed before the victim died (%.3f s)\n", fault.rank,
		       at);
		struct fault_data data;
		fault_data_init(&data, count, seed, fault.nranks, NULL);
		fault_data_check(&data, buffers.recv, "all-reduce that completed");
		fault_data_free(&data);
	} else if (fault.hosts) {
		/*
		 * Across hosts: NCCL's error where NCCL waited for the victim, ours where our
		 * kernel waited for a peer held in NCCL; then the watchdog's abort ends the
		 * stream, NCCL's kernels and ours alike.
		 */
		printf("rank %d: ncclCommGetAsyncError = %s %.3f s after the call across hosts "
		       "(NCCL_DET_TIMEOUT %.0f s)\n",
		       fault.rank, ncclGetErrorString(async), at, fault.timeout);
		fault_check(
			async != ncclSuccess && async != ncclInProgress && !completed,
			"ncclCommGetAsyncError reports %s %.3f s after the call%s, want an error",
			ncclGetErrorString(async), at,
			completed ? " and the stream completed" : "");
		fault_check(
			at <= fault.timeout + 5.0,
			"the error came %.3f s after the call: later than NCCL_DET_TIMEOUT + 5 s",
			at);
		const double aborted = fault_now();
		result = ncclCommAbort(comm);
		const double returned = fault_now();
		double done = 0;
		fault_check(result == ncclSuccess, "ncclCommAbort returned %s",
			    ncclGetErrorString(result));
		fault_check(fault_wait_stream(buffers.stream, 10.0, &done),
			    "the stream is not complete 10 s after ncclCommAbort");
		printf("rank %d: ncclCommAbort returned after %.3f s, the stream completed %.3f s "
		       "after it was called\n",
		       fault.rank, returned - aborted, done - aborted);
		/* Nothing left behind by the abort; the victim's host-mate may keep its pool. */
		fault_check_resources(true);
	} else {
		printf("rank %d: ncclCommGetAsyncError = %s %.3f s after the call "
		       "(NCCL_DET_TIMEOUT "
		       "%.0f s)\n",
		       fault.rank, ncclGetErrorString(async), at, fault.timeout);
		fault_check(async == ncclRemoteError,
			    "ncclCommGetAsyncError reports %s (%d) %.3f s after the call%s, want "
			    "ncclRemoteError",
			    ncclGetErrorString(async), (int)async, at,
			    completed ? " and the stream completed" : "");
		fault_check(
			at <= fault.timeout + 1.0,
			"the error came %.3f s after the call: later than NCCL_DET_TIMEOUT + 1 s",
			at);
		double done = 0;
		fault_check(fault_wait_stream(buffers.stream, 2.0, &done),
			    "the stream is not complete 2 s after the error");
	}
	fault_fresh_cuda_work();
	fault_check(fault_write("reported", fault.rank, NULL, 0), "cannot write the report file");
	if (how == FAULT_STOPPED)
		fault_check(fault_read("victim-gone", -1, NULL, 0, 60.0),
			    "faults.sh did not kill the stopped rank");
	/* Across hosts the survivors' layout is unequal: a shrunk communicator is NCCL's. */
	if (!fault.hosts)
		fault_recover(comm, &buffers);
	fault_buffers_free(&buffers);
}

/* ------------------------------------------------------------ abort-thread */

struct fault_abort {
	ncclComm_t comm;
	double requested, returned;
	ncclResult_t result;
	int started, done; /* atomics: requested / returned and result are valid */
};

static void *fault_abort_thread(void *argument)
{
	struct fault_abort *state = argument;
	usleep(1000000);
	state->requested = fault_now();
	__atomic_store_n(&state->started, 1, __ATOMIC_RELEASE);
	state->result = ncclCommAbort(state->comm);
	state->returned = fault_now();
	__atomic_store_n(&state->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void case_abort_thread(int variant)
{
	const size_t count = 1u << 20;
	struct fault_buffers buffers;
	fault_buffers_init(&buffers, count);
	GPU_CHECK(cudaMemsetAsync(buffers.send, 0, count * sizeof(float), buffers.stream));
	GPU_CHECK(cudaStreamSynchronize(buffers.stream));
	ncclComm_t comm = fault_comm_init("id");
	fault_expect_diverted(comm, "the communicator");
	if (fault.rank != 0) {
		/* Never calls: rank 0's kernel waits for this rank until its abort. */
		fault_check(fault_read("abort-done", -1, NULL, 0, FAULT_WAIT_S),
			    "rank 0 never finished");
		NCCL_OK(ncclCommAbort(comm));
		fault_buffers_free(&buffers);
		return;
	}
	struct fault_abort state = {.comm = comm};
	const double start = fault_now();
	ncclResult_t result = ncclAllReduce(buffers.send, buffers.recv, count, ncclFloat32, ncclSum,
					    comm, buffers.stream);
	fault_check(result == ncclSuccess, "ncclAllReduce returned %s", ncclGetErrorString(result));
	pthread_t thread;
	if (pthread_create(&thread, NULL, fault_abort_thread, &state) != 0)
		exit(2);
	double done = 0;
	bool completed = fault_wait_stream(buffers.stream, 1.0 + 2.0 + 10.0, &done);
	bool aborting = __atomic_load_n(&state.started, __ATOMIC_ACQUIRE) != 0;
	fault_check(aborting,
		    "the stream completed %.3f s after the call, before the abort: the "
		    "kernel did not wait for the silent rank",
		    done - start);
	fault_check(completed && aborting && done - state.requested <= 2.0,
		    "the stream is %s %.3f s after ncclCommAbort was called (limit 2 s)",
		    completed ? "complete only" : "still not complete", done - state.requested);
	for (int i = 0; i < 3000 && !__atomic_load_n(&state.done, __ATOMIC_ACQUIRE); i++)
		usleep(10000);
	if (!fault_check(__atomic_load_n(&state.done, __ATOMIC_ACQUIRE) != 0,
			 "ncclCommAbort has not returned 30 s after it was called")) {
		printf("SUMMARY ndet_fault_test %s rank 0/%d: %llu checks, %llu failed\n",
		       fault.name, fault.nranks, fault.checks, fault.failures);
		_exit(1);
	}
	pthread_join(thread, NULL);
	fault_check(state.result == ncclSuccess, "ncclCommAbort returned %s",
		    ncclGetErrorString(state.result));
	printf("rank 0: abort called %.3f s after the call; stream complete %.3f s and "
	       "ncclCommAbort returned %.3f s after the abort\n",
	       state.requested - start, done - state.requested, state.returned - state.requested);
	fault_check(fault_write("abort-done", -1, NULL, 0), "cannot write the done file");
	fault_buffers_free(&buffers);
}

/* ------------------------------------------------------------ diverge */

enum fault_divergence {
	FAULT_DIVERGE_COUNT,
	FAULT_DIVERGE_DTYPE,
	FAULT_DIVERGE_OP,
};

static void case_diverge(int variant)
{
	static const char *const what[] = {"count", "dtype", "op"};
	const size_t count = 65541;
	struct fault_buffers buffers;
	fault_buffers_init(&buffers, count + 1);
	GPU_CHECK(cudaMemsetAsync(buffers.send, 0, (count + 1) * sizeof(float), buffers.stream));
	GPU_CHECK(cudaStreamSynchronize(buffers.stream));
	ncclComm_t comm = fault_comm_init("id");
	fault_expect_diverted(comm, "the communicator");
	size_t my_count = count;
	ncclDataType_t type = ncclFloat32;
	ncclRedOp_t op = ncclSum;
	if (fault.rank == 1 && variant == FAULT_DIVERGE_COUNT)
		my_count = count + 1;
	if (fault.rank == 1 && variant == FAULT_DIVERGE_DTYPE)
		type = ncclBfloat16;
	if (fault.rank == 1 && variant == FAULT_DIVERGE_OP)
		op = ncclMax;

	const double start = fault_now();
	ncclResult_t result =
		ncclAllReduce(buffers.send, buffers.recv, my_count, type, op, comm, buffers.stream);
	double at = fault_now() - start;
	bool completed = false;
	ncclResult_t error = result;
	if (result == ncclSuccess)
		error = fault_wait_outcome(comm, buffers.stream, start, fault.timeout + 10, &at,
					   &completed);
	printf("rank %d: %s differs on rank 1: ncclAllReduce returned %s, then %s after %.3f s\n",
	       fault.rank, what[variant], ncclGetErrorString(result), ncclGetErrorString(error),
	       at);
	fault_check(error != ncclSuccess,
		    "no error for a call whose %s differs on rank 1 (%.3f s, stream %s)",
		    what[variant], at,
		    completed ? "complete: garbage reported as success" : "busy");
	fault_check(at <= fault.timeout + 1.0,
		    "the error came %.3f s after the call: later than NCCL_DET_TIMEOUT + 1 s", at);
	double done = 0;
	fault_check(fault_wait_stream(buffers.stream, 2.0, &done),
		    "the stream is not complete 2 s after the error");
	/* The communicator is poisoned: the next call fails at once, launching nothing. */
	result =
		ncclAllReduce(buffers.send, buffers.recv, my_count, type, op, comm, buffers.stream);
	fault_check(result != ncclSuccess, "the next call on the failed communicator returned %s",
		    ncclGetErrorString(result));
	fault_check(fault_wait_stream(buffers.stream, 2.0, &done),
		    "the stream is not complete 2 s after the failed call");
	NCCL_OK(ncclCommAbort(comm));
	fault_buffers_free(&buffers);
}

/* ------------------------------------------------------------ leak */

enum fault_teardown {
	FAULT_TEARDOWN_DESTROY,
	FAULT_TEARDOWN_FINALIZE,
	FAULT_TEARDOWN_ABORT,
};

struct fault_usage {
	size_t free_bytes;
	int maps, device_maps, fds;
};

/* Device memory free, lines of /proc/self/maps (those naming an nvidia device), fds. */
static void fault_usage_get(struct fault_usage *usage)
{
	size_t total = 0;
	GPU_CHECK(cudaMemGetInfo(&usage->free_bytes, &total));
	usage->maps = usage->device_maps = usage->fds = 0;
	FILE *maps = fopen("/proc/self/maps", "r");
	char line[4096];
	while (maps != NULL && fgets(line, sizeof(line), maps) != NULL) {
		usage->maps++;
		usage->device_maps += strstr(line, "nvidia") != NULL;
	}
	if (maps != NULL)
		fclose(maps);
	DIR *fds = opendir("/proc/self/fd");
	while (fds != NULL && readdir(fds) != NULL)
		usage->fds++;
	if (fds != NULL)
		closedir(fds);
}

static void fault_leak_cycle(const char *tag, enum fault_teardown how,
			     const struct fault_buffers *buffers)
{
	static const size_t counts[] = {1001, 65541, 300007};
	ncclComm_t comm = fault_comm_init(tag);
	fault_expect_diverted(comm, "the communicator");
	for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
		fault_allreduce_checked(comm, fault.rank, fault.nranks, counts[k], 300 + k, buffers,
					"all-reduce in a cycle");
	if (how == FAULT_TEARDOWN_FINALIZE)
		NCCL_OK(ncclCommFinalize(comm));
	if (how == FAULT_TEARDOWN_ABORT)
		NCCL_OK(ncclCommAbort(comm));
	else
		NCCL_OK(ncclCommDestroy(comm));
}

static void case_leak(int variant)
{
	static const char *const teardown[] = {"ncclCommDestroy", "ncclCommFinalize + Destroy",
					       "ncclCommAbort"};
	const char *cycles_text = getenv("NDET_FAULT_CYCLES");
	const int cycles = cycles_text != NULL ? atoi(cycles_text) : 100;
	struct fault_buffers buffers;
	fault_buffers_init(&buffers, 300007);
	/* NCCL's and CUDA's lazy allocations happen here, outside the measurement. */
	fault_leak_cycle("id.warm-up", (enum fault_teardown)variant, &buffers);
	struct fault_usage before, after;
	/* Every rank measures while all are idle: the device's free memory is global. */
	fault_check(fault_barrier("warm"), "barrier after the warm-up");
	fault_usage_get(&before);
	fault_check(fault_barrier("measured"), "barrier after the first measurement");
	for (int cycle = 0; cycle < cycles; cycle++) {
		char tag[32];
		snprintf(tag, sizeof(tag), "id.%d", cycle);
		fault_leak_cycle(tag, (enum fault_teardown)variant, &buffers);
	}
	fault_check(fault_barrier("cycled"), "barrier after the cycles");
	fault_usage_get(&after);
	fault_check(fault_barrier("measured-again"), "barrier after the second measurement");
	const long long delta = (long long)before.free_bytes - (long long)after.free_bytes;
	printf("rank %d: %d cycles ending in %s: device memory in use grew by %lld bytes "
	       "(free %zu -> %zu); /proc/self/maps %d -> %d lines (%d -> %d naming nvidia); "
	       "open fds %d -> %d\n",
	       fault.rank, cycles, teardown[variant], delta, before.free_bytes, after.free_bytes,
	       before.maps, after.maps, before.device_maps, after.device_maps, before.fds,
	       after.fds);
	fault_check(delta == 0, "%d cycles ending in %s left %lld bytes of device memory in use",
		    cycles, teardown[variant], delta);
	fault_check_resources(false);
	fault_buffers_free(&buffers);
}

/* ------------------------------------------------------------ many-comms */

#define FAULT_COMMS  3
#define FAULT_ROUNDS 8

/* The parent rank of member m of communicator c (0 world, 1 TP, 2 DP) holding us. */
static int fault_member(int c, int m)
{
	if (c == 1)
		return fault.rank / 2 * 2 + m;
	if (c == 2)
		return fault.rank % 2 + 2 * m;
	return m;
}

static void case_many_comms(int variant)
{
	static const char *const names[FAULT_COMMS] = {"world", "tensor-parallel", "data-parallel"};
	if (fault.nranks < 4 || fault.nranks % 2 != 0) {
		fprintf(stderr, "many-comms needs an even WORLD of at least 4\n");
		exit(2);
	}
	ncclComm_t comms[FAULT_COMMS];
	int members[FAULT_COMMS] = {fault.nranks, 2, fault.nranks / 2};
	int me[FAULT_COMMS] = {fault.rank, fault.rank % 2, fault.rank / 2};
	comms[0] = fault_comm_init("id");
	NCCL_OK(ncclCommSplit(comms[0], fault.rank / 2, fault.rank, &comms[1], NULL));
	NCCL_OK(ncclCommSplit(comms[0], fault.rank % 2, fault.rank, &comms[2], NULL));
	for (int c = 0; c < FAULT_COMMS; c++) {
		int rank = -1, count = -1;
		NCCL_OK(ncclCommUserRank(comms[c], &rank));
		NCCL_OK(ncclCommCount(comms[c], &count));
		fault_check(rank == me[c] && count == members[c], "%s communicator: rank %d of %d",
			    names[c], rank, count);
		fault_expect_diverted(comms[c], names[c]);
	}
	cudaStream_t streams[FAULT_COMMS];
	for (int s = 0; s < FAULT_COMMS; s++)
		GPU_CHECK(cudaStreamCreateWithFlags(&streams[s], cudaStreamNonBlocking));

	/* Every input is on the device before the first launch: nothing blocks after it. */
	struct fault_call {
		struct fault_data data;
		float *send, *recv;
	} calls[FAULT_ROUNDS][FAULT_COMMS];
	for (int i = 0; i < FAULT_ROUNDS; i++) {
		for (int c = 0; c < FAULT_COMMS; c++) {
			struct fault_call *call = &calls[i][c];
			const size_t count = (i + c) % 2 ? 1001 : 100003;
			int ids[NDET_MAX_RANKS];
			for (int m = 0; m < members[c]; m++)
				ids[m] = fault_member(c, m);
			fault_data_init(&call->data, count, (uint64_t)(500 + 10 * i + c),
					members[c], ids);
			GPU_CHECK(cudaMalloc((void **)&call->send, count * sizeof(float)));
			GPU_CHECK(cudaMalloc((void **)&call->recv, count * sizeof(float)));
			gpu_upload(call->send, call->data.inputs[me[c]], count * sizeof(float),
				   streams[0]);
			GPU_CHECK(cudaMemsetAsync(call->recv, 0x5a, count * sizeof(float),
						  streams[0]));
		}
	}
	GPU_CHECK(cudaStreamSynchronize(streams[0]));
	/* One communicator's calls move between streams: nccl-det keeps their order. */
	for (int i = 0; i < FAULT_ROUNDS; i++) {
		for (int c = 0; c < FAULT_COMMS; c++) {
			struct fault_call *call = &calls[i][c];
			ncclResult_t result =
				ncclAllReduce(call->send, call->recv, call->data.count, ncclFloat32,
					      ncclSum, comms[c], streams[(c + i) % FAULT_COMMS]);
			fault_check(result == ncclSuccess, "%s round %d: ncclAllReduce returned %s",
				    names[c], i, ncclGetErrorString(result));
		}
	}
	for (int s = 0; s < FAULT_COMMS; s++)
		GPU_CHECK(cudaStreamSynchronize(streams[s]));
	for (int c = 0; c < FAULT_COMMS; c++) {
		ncclResult_t async = ncclSuccess;
		NCCL_OK(ncclCommGetAsyncError(comms[c], &async));
		fault_check(async == ncclSuccess, "%s: ncclCommGetAsyncError reports %s", names[c],
			    ncclGetErrorString(async));
	}
	for (int i = 0; i < FAULT_ROUNDS; i++) {
		for (int c = 0; c < FAULT_COMMS; c++) {
			char what[64];
			snprintf(what, sizeof(what), "%s round %d", names[c], i);
			fault_data_check(&calls[i][c].data, calls[i][c].recv, what);
			fault_data_free(&calls[i][c].data);
			GPU_CHECK(cudaFree(calls[i][c].send));
			GPU_CHECK(cudaFree(calls[i][c].recv));
		}
	}
	printf("rank %d: %d all-reduces on 3 communicators over 3 streams checked\n", fault.rank,
	       FAULT_ROUNDS * FAULT_COMMS);
	for (int c = FAULT_COMMS - 1; c >= 0; c--)
		fault_finalize_destroy(comms[c]);
	for (int s = 0; s < FAULT_COMMS; s++)
		GPU_CHECK(cudaStreamDestroy(streams[s]));
}

/* ------------------------------------------------------------ fork, exit-live */

/* Buffers of `count` floats, a communicator of all ranks and one checked call on it. */
static ncclComm_t fault_setup(struct fault_buffers *buffers, size_t count, uint64_t seed)
{
	fault_buffers_init(buffers, count);
	ncclComm_t comm = fault_comm_init("id");
	fault_expect_diverted(comm, "the communicator");
	fault_allreduce_checked(comm, fault.rank, fault.nranks, count, seed, buffers,
				"all-reduce after setup");
	return comm;
}

static void case_fork(int normal_exit)
{
	const size_t count = 100003;
	struct fault_buffers buffers;
	ncclComm_t comm = fault_setup(&buffers, count, 11);
	fflush(stdout);
	fflush(stderr);
	pid_t child = fork();
	if (child == 0) {
		if (!normal_exit)
			_exit(0);
		/* No CUDA call here: the child owns no context.  nccl-det must be inert. */
		int diverted = -1;
		const char *reason = NULL;
		bool loaded = fault_query(comm, &diverted, &reason);
		printf("rank %d fork child: ncclDetCommQuery: diverted=%d (%s)\n", fault.rank,
		       diverted, reason);
		exit(loaded && diverted != 0 ? 3 : 0);
	}
	fault_check(child > 0, "fork: %s", strerror(errno));
	int status = 0;
	pid_t waited = 0;
	for (int i = 0; child > 0 && i < 3000 && waited == 0; i++) {
		waited = waitpid(child, &status, WNOHANG);
		if (waited == 0)
			usleep(10000);
	}
	if (child > 0 && waited == 0) {
		kill(child, SIGKILL);
		waitpid(child, &status, 0);
	}
	fault_check(waited == child && WIFEXITED(status) && WEXITSTATUS(status) == 0,
		    "the child (%s) %s %d", normal_exit ? "exit(0)" : "_exit(0)",
		    waited != child       ? "hung; killed, status"
		    : WIFSIGNALED(status) ? "died of signal"
					  : "exited with",
		    WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
	fault_allreduce_checked(comm, fault.rank, fault.nranks, count, 12, &buffers,
				"all-reduce after fork()");
	fault_finalize_destroy(comm);
	fault_buffers_free(&buffers);
}

static void case_exit_live(int variant)
{
	struct fault_buffers buffers;
	(void)fault_setup(&buffers, 100003, 13);
	/* main returns with the communicator, its engine, buffers and stream live. */
}

/* ------------------------------------------------------------ main */

static const struct fault_case {
	const char *name;
	void (*run)(int variant);
	int variant;
} fault_cases[] = {
	{"kill", case_peer_death, FAULT_KILL_BEFORE_CALL},
	{"kill-during", case_peer_death, FAULT_KILL_AFTER_CALL},
	{"stop", case_peer_death, FAULT_STOPPED},
	{"abort-thread", case_abort_thread, 0},
	{"diverge-count", case_diverge, FAULT_DIVERGE_COUNT},
	{"diverge-dtype", case_diverge, FAULT_DIVERGE_DTYPE},
	{"diverge-op", case_diverge, FAULT_DIVERGE_OP},
	{"leak-destroy", case_leak, FAULT_TEARDOWN_DESTROY},
	{"leak-finalize", case_leak, FAULT_TEARDOWN_FINALIZE},
	{"leak-abort", case_leak, FAULT_TEARDOWN_ABORT},
	{"many-comms", case_many_comms, 0},
	{"fork", case_fork, 0},
	{"fork-exit", case_fork, 1},
	{"exit-live", case_exit_live, 0},
};

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	const struct fault_case *chosen = NULL;
	for (size_t i = 0; argc == 2 && i < sizeof(fault_cases) / sizeof(fault_cases[0]); i++)
		if (strcmp(argv[1], fault_cases[i].name) == 0)
			chosen = &fault_cases[i];
	if (chosen == NULL) {
		fprintf(stderr,
			"usage: RANK=r WORLD=n NDET_TEST_ID_FILE=path %s CASE\nCASE:", argv[0]);
		for (size_t i = 0; i < sizeof(fault_cases) / sizeof(fault_cases[0]); i++)
			fprintf(stderr, " %s", fault_cases[i].name);
		fputc('\n', stderr);
		return 2;
	}
	int devices = 0;
	if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
		printf("SUMMARY ndet_fault_test: no CUDA GPU visible, skipped\n");
		return 77;
	}
	const char *rank = getenv("RANK"), *world = getenv("WORLD");
	const char *timeout = getenv("NCCL_DET_TIMEOUT"), *enable = getenv("NCCL_DET_ENABLE");
	fault.name = chosen->name;
	fault.rank = rank != NULL ? atoi(rank) : 0;
	fault.nranks = world != NULL ? atoi(world) : 1;
	fault.base = getenv("NDET_TEST_ID_FILE");
	fault.timeout = timeout != NULL ? strtod(timeout, NULL) : 1800.0;
	const char *test_host = getenv("NCCL_DET_TEST_HOST");
	fault.hosts = test_host != NULL && test_host[0] != '\0';
	fault.enabled = enable == NULL || strcmp(enable, "0") != 0;
	if (fault.base == NULL || fault.nranks < 2 || fault.nranks > NDET_MAX_RANKS ||
	    fault.rank < 0 || fault.rank >= fault.nranks) {
		fprintf(stderr, "needs RANK, WORLD (2..%d) and NDET_TEST_ID_FILE\n",
			NDET_MAX_RANKS);
		return 2;
	}
	GPU_CHECK(cudaSetDevice(fault.rank % devices));
	chosen->run(chosen->variant);
	printf("SUMMARY ndet_fault_test %s rank %d/%d: %llu checks, %llu failed\n", fault.name,
	       fault.rank, fault.nranks, fault.checks, fault.failures);
	return fault.failures == 0 ? 0 : 1;
}
