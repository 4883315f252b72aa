/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Process exit with live communicators, run by test_exit_live.sh with the
 * host-only build of nccl-det preloaded (libnccl-det-fake.so) in front of the fake
 * NCCL.  Each mode ends in exit(0) and must leave with status 0, promptly, without
 * a crash or a sanitizer report:
 *   live          communicators (one thread per rank, and ncclCommInitAll) were used
 *                 and are never destroyed;
 *   blocked       a rank's thread waits inside a diverted all-reduce for a peer
 *                 that never calls;
 *   late-destroy  an atexit handler registered before the first NCCL call (so it
 *                 runs after nccl-det's, as a static destructor does) destroys and
 *                 aborts communicators: nccl-det must pass them through;
 *   early-destroy an atexit handler registered after setup runs first, with
 *                 nccl-det still active, and destroys them.
 * It prints how many of its communicators were diverted, so the driver knows the
 * preload was in front.
 */
#include "config.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nccl.h>

#include "test/fake_nccl/fake_nccl.h"

#define COUNT 64

typedef ncclResult_t (*ncclDetCommQuery_fn)(ncclComm_t comm, int *diverted, const char **reason);

static ncclComm_t pair[2], trio[3];
static ncclUniqueId pair_id;
static int pair_inside; /* atomic: rank 1 is about to wait */
static const char *mode;

static int count_diverted(const ncclComm_t *comms, int count)
{
	ncclDetCommQuery_fn query = (ncclDetCommQuery_fn)dlsym(RTLD_DEFAULT, "ncclDetCommQuery");
	int total = 0;
	for (int i = 0; query != NULL && i < count; i++) {
		int diverted = 0;
		const char *reason = NULL;
		if (comms[i] != NULL && query(comms[i], &diverted, &reason) == ncclSuccess)
			total += diverted;
	}
	return total;
}

static void die(const char *what, ncclResult_t result)
{
	fprintf(stderr, "test_exit_live %s: %s failed: %d\n", mode, what, (int)result);
	exit(2);
}

static void pair_rank(int rank, void *opaque)
{
	(void)opaque;
	float values[COUNT];
	for (int i = 0; i < COUNT; i++)
		values[i] = (float)(rank + i);
	ncclResult_t result = ncclCommInitRank(&pair[rank], 2, pair_id, rank);
	if (result != ncclSuccess)
		die("ncclCommInitRank", result);
	result = ncclAllReduce(values, values, COUNT, ncclFloat32, ncclSum, pair[rank], NULL);
	if (result != ncclSuccess)
		die("ncclAllReduce", result);
}

/* Rank 1 of `pair`, in a call rank 0 never joins. */
static void *blocked_rank(void *opaque)
{
	(void)opaque;
	static float values[COUNT];
	__atomic_store_n(&pair_inside, 1, __ATOMIC_RELEASE);
	(void)ncclAllReduce(values, values, COUNT, ncclFloat32, ncclSum, pair[1], NULL);
	return NULL;
}

static void destroy_all(void)
{
	/* Results do not matter here, a crash or a hang would. */
	for (int r = 0; r < 2; r++)
		if (pair[r] != NULL)
			(void)ncclCommDestroy(pair[r]);
	(void)ncclCommAbort(trio[0]);
	for (int r = 1; r < 3; r++)
		if (trio[r] != NULL)
			(void)ncclCommDestroy(trio[r]);
}

int main(int argc, char **argv)
{
	mode = argc > 1 ? argv[1] : "live";
	if (strcmp(mode, "late-destroy") == 0 && atexit(destroy_all) != 0)
		die("atexit", ncclSystemError);
	ncclResult_t result = ncclGetUniqueId(&pair_id);
	if (result != ncclSuccess)
		die("ncclGetUniqueId", result);
	if (fake_nccl_run_ranks(2, pair_rank, NULL) != 0)
		die("threads", ncclSystemError);
	result = ncclCommInitAll(trio, 3, NULL);
	if (result != ncclSuccess)
		die("ncclCommInitAll", result);
	static float values[3][COUNT];
	if ((result = ncclGroupStart()) != ncclSuccess)
		die("ncclGroupStart", result);
	for (int r = 0; r < 3; r++)
		if ((result = ncclAllReduce(values[r], values[r], COUNT, ncclBfloat16, ncclAvg,
					    trio[r], NULL)) != ncclSuccess)
			die("ncclAllReduce", result);
	if ((result = ncclGroupEnd()) != ncclSuccess)
		die("ncclGroupEnd", result);
	printf("diverted %d\n", count_diverted(pair, 2) + count_diverted(trio, 3));
	fflush(stdout);

	if (strcmp(mode, "early-destroy") == 0 && atexit(destroy_all) != 0)
		die("atexit", ncclSystemError);
	if (strcmp(mode, "blocked") == 0) {
		pthread_t thread;
		if (pthread_create(&thread, NULL, blocked_rank, NULL) != 0)
			die("pthread_create", ncclSystemError);
		if (pthread_detach(thread) != 0)
			die("pthread_detach", ncclSystemError);
		while (!__atomic_load_n(&pair_inside, __ATOMIC_ACQUIRE))
			;
		struct timespec pause = {.tv_sec = 0, .tv_nsec = 100 * 1000000L};
		nanosleep(&pause, NULL);
	}
	exit(0);
}
