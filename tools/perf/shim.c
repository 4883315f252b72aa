/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * nccl-det-perf --shim-overhead: the host time nccl-det adds to a call it leaves to NCCL.
 * Run under the preload (LD_PRELOAD=libnccl-det.so): a one-rank communicator made
 * through the interposed ncclCommInitAll (so nccl-det knows it, as it knows a job's),
 * then the same small ncclAllReduce timed through the interposed entry point and
 * through the real NCCL's own, which the preload leaves alone: int32 (NCCL's: nccl-det
 * forwards it) and f32 (nccl-det's own on a diverted communicator).  Host time of the
 * calls alone (a batch of calls, then the stream waited for), median of rounds.
 */
#include "config.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>

#include <nccl.h>

#include "nccl_det.h"
#include "tools/perf/perf.h"

enum { PERF_SHIM_ROUNDS = 9, PERF_SHIM_CALLS = 200, PERF_SHIM_COUNT = 256 };

typedef ncclResult_t (*perf_allreduce_fn)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
					  ncclComm_t, cudaStream_t);

/*
 * Microseconds of host time per call of `fn`: the median of PERF_SHIM_ROUNDS batches;
 * -1 when a call fails (an f32 call that NCCL_DET_STRICT=1 refuses, say).
 */
static double perf_shim_time(perf_allreduce_fn fn, void *buffer, ncclDataType_t type,
			     ncclComm_t comm, cudaStream_t stream)
{
	double rounds[PERF_SHIM_ROUNDS];
	for (int round = -1; round < PERF_SHIM_ROUNDS; round++) {
		const double start = perf_now();
		for (int i = 0; i < PERF_SHIM_CALLS; i++) {
			const ncclResult_t result =
				fn(buffer, buffer, PERF_SHIM_COUNT, type, ncclSum, comm, stream);
			if (result != ncclSuccess) {
				fprintf(stderr, "nccl-det-perf: ncclAllReduce failed (%d)\n",
					(int)result);
				PERF_CHECK(cudaStreamSynchronize(stream));
				return -1;
			}
		}
		const double elapsed = perf_now() - start;
		PERF_CHECK(cudaStreamSynchronize(stream));
		if (round >= 0) /* round -1 warms up */
			rounds[round] = elapsed * 1e6 / PERF_SHIM_CALLS;
	}
	return perf_median(rounds, PERF_SHIM_ROUNDS);
}

int perf_shim_overhead(void)
{
	typedef ncclResult_t (*init_all_fn)(ncclComm_t *, int, const int *);
	typedef ncclResult_t (*destroy_fn)(ncclComm_t);
	typedef ncclResult_t (*query_fn)(ncclComm_t, int *, const char **);
	/* POSIX: a data pointer from dlsym holds a function's address. */
	query_fn query = (query_fn)dlsym(RTLD_DEFAULT, "ncclDetCommQuery");
	perf_allreduce_fn interposed = (perf_allreduce_fn)dlsym(RTLD_DEFAULT, "ncclAllReduce");
	init_all_fn init = (init_all_fn)dlsym(RTLD_DEFAULT, "ncclCommInitAll");
	destroy_fn destroy = (destroy_fn)dlsym(RTLD_DEFAULT, "ncclCommDestroy");
	if (query == NULL || interposed == NULL || init == NULL || destroy == NULL) {
		printf("nccl-det-perf --shim-overhead: nccl-det is not preloaded; run it as\n"
		       "  LD_PRELOAD=/path/to/libnccl-det.so nccl-det-perf --shim-overhead\n");
		return 2;
	}
	/* The real NCCL, as nccl-det-perf loads it (the preload is not libnccl.so.2). */
	static struct perf_nccl nccl;
	char why[4608];
	if (!perf_nccl_load(&nccl, why, sizeof(why))) {
		printf("nccl-det-perf --shim-overhead: %s\n", why);
		return 2;
	}
	perf_allreduce_fn real = (perf_allreduce_fn)nccl.fn.ncclAllReduce;
	int device = 0, diverted = -1;
	const char *reason = "?";
	ncclComm_t comm = NULL;
	PERF_CHECK(cudaSetDevice(device));
	if (init(&comm, 1, &device) != ncclSuccess) {
		fprintf(stderr, "nccl-det-perf: ncclCommInitAll failed\n");
		return 1;
	}
	(void)query(comm, &diverted, &reason);
	cudaStream_t stream;
	void *buffer = NULL;
	PERF_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
	PERF_CHECK(cudaMalloc(&buffer, PERF_SHIM_COUNT * sizeof(float)));
	PERF_CHECK(cudaMemset(buffer, 0, PERF_SHIM_COUNT * sizeof(float)));
	printf("# nccl-det-perf --shim-overhead: host time per ncclAllReduce of %d elements on a "
	       "one-rank communicator (GPU 0; nccl-det: %s), median of %d batches of %d calls\n",
	       PERF_SHIM_COUNT, diverted == 1 ? "diverted" : reason, PERF_SHIM_ROUNDS,
	       PERF_SHIM_CALLS);
	printf("# real NCCL %s\n", nccl.path);
	/* In turns, so that a drift of the machine touches both alike. */
	double forwarded[2] = {0, 0}, own[2] = {0, 0};
	bool failed = false, refused = false;
	for (int turn = 0; turn < 2; turn++) {
		const double through = perf_shim_time(interposed, buffer, ncclInt32, comm, stream),
			     direct = perf_shim_time(real, buffer, ncclInt32, comm, stream);
		failed |= through < 0 || direct < 0;
		forwarded[turn] = through - direct;
		const double mine = perf_shim_time(interposed, buffer, ncclFloat32, comm, stream),
			     theirs = perf_shim_time(real, buffer, ncclFloat32, comm, stream);
		refused |= mine < 0 || theirs < 0;
		own[turn] = mine - theirs;
	}
	if (failed) {
		fprintf(stderr, "nccl-det-perf --shim-overhead: an int32 call failed\n");
		return 1;
	}
	const double added = forwarded[0] > forwarded[1] ? forwarded[0] : forwarded[1];
	printf("#   int32 (NCCL runs it, through nccl-det): nccl-det adds %.2f / %.2f us per "
	       "call (two turns)\n",
	       forwarded[0], forwarded[1]);
	if (refused)
		printf("#   f32: not timed (a call failed: see above)\n");
	else
		printf("#   f32 (%s): nccl-det's call takes %+.2f / %+.2f us against NCCL's\n",
		       diverted == 1 ? "nccl-det runs it" : "NCCL runs it", own[0], own[1]);
	printf("# SUMMARY nccl-det-perf --shim-overhead: nccl-det adds %.2f us to a call it "
	       "forwards (target < 1 us: %s)\n",
	       added, added < 1.0 ? "met" : "NOT met");
	PERF_CHECK(cudaFree(buffer));
	PERF_CHECK(cudaStreamDestroy(stream));
	(void)destroy(comm);
	return 0;
}
