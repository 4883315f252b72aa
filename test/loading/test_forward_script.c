/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * A fixed, single-threaded script of NCCL calls, run by test_forward.sh against
 * the fake libnccl.so.2 with and without libnccl-det.so preloaded.  Prints every
 * return code to stdout ("step = code"), so that runs can be compared line by line,
 * and which object provides ncclAllReduce to stderr.  Every buffer is static: the
 * fake names pointers by first appearance, and static addresses keep that order
 * independent of what the heap did in between (the shim may allocate).
 *
 * The script goes on after a failing call (FAKE_NCCL_FAIL makes calls fail on
 * purpose), so handles start out NULL and are only used after they were set.
 */
#include "config.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <nccl.h>

static int step_failures;

static void report(const char *step, ncclResult_t result)
{
	printf("%s = %d\n", step, (int)result);
}

#define STEP(call) report(#call, (call))

static float values[4][8];
static float results[4][8];
static float scalars[4];
static int32_t gathered[4][8];
static unsigned char registered[4096];

/* ncclAllReduce's provider: the shim when preloaded, the fake otherwise. */
static void report_provider(void)
{
	Dl_info info;
	void *address = dlsym(RTLD_DEFAULT, "ncclAllReduce");
	if (address == NULL || dladdr(address, &info) == 0 || info.dli_fname == NULL) {
		fprintf(stderr, "provider: unknown\n");
		step_failures++;
		return;
	}
	const char *base = strrchr(info.dli_fname, '/');
	fprintf(stderr, "provider: %s\n", base != NULL ? base + 1 : info.dli_fname);
}

int main(void)
{
	report_provider();

	int version = 0;
	STEP(ncclGetVersion(&version));
	printf("version = %d\n", version);

	/* Two ranks driven by this one thread (nccl-tests -g): inits inside a group. */
	ncclUniqueId id;
	ncclComm_t comms[2] = {NULL, NULL};
	STEP(ncclGetUniqueId(&id));
	STEP(ncclGroupStart());
	STEP(ncclCommInitRank(&comms[0], 2, id, 0));
	STEP(ncclCommInitRank(&comms[1], 2, id, 1));
	STEP(ncclGroupEnd());

	int count = -1, rank = -1, device = -1;
	STEP(ncclCommCount(comms[0], &count));
	STEP(ncclCommUserRank(comms[1], &rank));
	STEP(ncclCommCuDevice(comms[1], &device));
	printf("count = %d, rank = %d, device = %d\n", count, rank, device);

	for (int r = 0; r < 2; r++)
		for (int i = 0; i < 8; i++)
			values[r][i] = (float)(r * 8 + i);
	STEP(ncclGroupStart());
	STEP(ncclAllReduce(values[0], results[0], 8, ncclFloat32, ncclSum, comms[0], NULL));
	STEP(ncclAllReduce(values[1], results[1], 8, ncclFloat32, ncclSum, comms[1], NULL));
	STEP(ncclGroupEnd());
	printf("allreduce result = %g %g\n", (double)results[0][0], (double)results[1][7]);

	/* In place, nested groups: only the outermost end runs them. */
	STEP(ncclGroupStart());
	STEP(ncclGroupStart());
	STEP(ncclAllReduce(values[0], values[0], 8, ncclFloat32, ncclMax, comms[0], NULL));
	STEP(ncclAllReduce(values[1], values[1], 8, ncclFloat32, ncclMax, comms[1], NULL));
	STEP(ncclGroupEnd());
	STEP(ncclGroupEnd());

	/* ncclBcast reaches the fake's ncclBroadcast through the PLT. */
	STEP(ncclGroupStart());
	STEP(ncclBcast(values[0], 8, ncclFloat32, 1, comms[0], NULL));
	STEP(ncclBcast(values[1], 8, ncclFloat32, 1, comms[1], NULL));
	STEP(ncclGroupEnd());

	STEP(ncclGroupStart());
	for (int r = 0; r < 2; r++) {
		STEP(ncclAllGather(values[r], gathered[r], 2, ncclFloat32, comms[r], NULL));
		STEP(ncclReduceScatter(values[r], results[r], 4, ncclFloat32, ncclSum, comms[r],
				       NULL));
		STEP(ncclReduce(values[r], results[r], 8, ncclFloat32, ncclMin, 0, comms[r], NULL));
		STEP(ncclSend(values[r], 4, ncclFloat32, 1 - r, comms[r], NULL));
		STEP(ncclRecv(results[r], 4, ncclFloat32, 1 - r, comms[r], NULL));
	}
	STEP(ncclGroupEnd());

	/* Simulated groups run nothing. */
	ncclSimInfo_t simulation = NCCL_SIM_INFO_INITIALIZER;
	STEP(ncclGroupStart());
	STEP(ncclAllReduce(values[0], results[0], 8, ncclFloat32, ncclSum, comms[0], NULL));
	STEP(ncclGroupSimulateEnd(&simulation));

	/* Pre-multiplied sums. */
	ncclRedOp_t ops[2] = {ncclSum, ncclSum};
	for (int r = 0; r < 2; r++) {
		scalars[r] = 0.5f * (float)(r + 1);
		STEP(ncclRedOpCreatePreMulSum(&ops[r], &scalars[r], ncclFloat32,
					      ncclScalarHostImmediate, comms[r]));
	}
	STEP(ncclGroupStart());
	for (int r = 0; r < 2; r++)
		STEP(ncclAllReduce(values[r], results[r], 8, ncclFloat32, ops[r], comms[r], NULL));
	STEP(ncclGroupEnd());
	for (int r = 0; r < 2; r++)
		STEP(ncclRedOpDestroy(ops[r], comms[r]));

	/* Memory and registration (NCCL's own allocator, called by the application). */
	void *memory = NULL, *handle = NULL;
	ncclWindow_t window = NULL;
	STEP(ncclMemAlloc(&memory, 1000));
	STEP(ncclCommRegister(comms[0], registered, sizeof(registered), &handle));
	STEP(ncclCommDeregister(comms[0], handle));
	STEP(ncclCommWindowRegister(comms[0], registered, sizeof(registered), &window,
				    NCCL_WIN_COLL_SYMMETRIC));
	STEP(ncclCommWindowDeregister(comms[0], window));
	STEP(ncclMemFree(memory));

	/* Split: both ranks into one child, keys reversed. */
	ncclComm_t children[2] = {NULL, NULL};
	STEP(ncclGroupStart());
	STEP(ncclCommSplit(comms[0], 0, 1, &children[0], NULL));
	STEP(ncclCommSplit(comms[1], 0, 0, &children[1], NULL));
	STEP(ncclGroupEnd());
	STEP(ncclCommUserRank(children[0], &rank));
	printf("split rank = %d\n", rank);
	STEP(ncclGroupStart());
	for (int r = 0; r < 2; r++)
		STEP(ncclAllReduce(values[r], results[r], 8, ncclFloat32, ncclAvg, children[r],
				   NULL));
	STEP(ncclGroupEnd());
	for (int r = 0; r < 2; r++)
		STEP(ncclCommDestroy(children[r]));

	/* Three ranks from ncclCommInitAll; rank 2 is shrunk away. */
	ncclComm_t trio[3] = {NULL, NULL, NULL}, pair[2] = {NULL, NULL};
	static const int devices[3] = {0, 0, 0};
	static int exclude[1] = {2};
	STEP(ncclCommInitAll(trio, 3, devices));
	STEP(ncclGroupStart());
	STEP(ncclCommShrink(trio[0], exclude, 1, &pair[0], NULL, NCCL_SHRINK_DEFAULT));
	STEP(ncclCommShrink(trio[1], exclude, 1, &pair[1], NULL, NCCL_SHRINK_DEFAULT));
	STEP(ncclGroupEnd());
	STEP(ncclCommRevoke(trio[2], NCCL_REVOKE_DEFAULT));
	STEP(ncclCommAbort(trio[2]));
	for (int r = 0; r < 2; r++) {
		STEP(ncclCommFinalize(trio[r]));
		STEP(ncclCommDestroy(trio[r]));
		STEP(ncclCommDestroy(pair[r]));
	}

	/* Non-blocking communicators: ncclInProgress until polled ready. */
	ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
	config.blocking = 0;
	ncclComm_t async_comms[2] = {NULL, NULL};
	ncclUniqueId async_id;
	STEP(ncclGetUniqueId(&async_id));
	STEP(ncclCommInitRankConfig(&async_comms[0], 2, async_id, 0, &config));
	STEP(ncclCommInitRankConfig(&async_comms[1], 2, async_id, 1, &config));
	for (int r = 0; r < 2; r++) {
		ncclResult_t state = ncclInProgress;
		for (int poll = 0; poll < 10 && state == ncclInProgress; poll++) {
			STEP(ncclCommGetAsyncError(async_comms[r], &state));
			printf("async state = %d\n", (int)state);
		}
	}
	ncclComm_t single = NULL;
	ncclUniqueId single_id;
	STEP(ncclGetUniqueId(&single_id));
	STEP(ncclCommInitRankScalable(&single, 1, 0, 1, &single_id, NULL));
	STEP(ncclAllReduce(values[0], values[0], 8, ncclFloat32, ncclSum, single, NULL));
	/*
	 * nccl-det's direct entry point, where a copy of nccl-det is loaded (its code to
	 * stderr: the runs without nccl-det have none): a one-rank sum, which leaves the
	 * values as they are.
	 */
	ncclResult_t (*direct)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
			       ncclComm_t, cudaStream_t) =
		(ncclResult_t(*)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
				 ncclComm_t, cudaStream_t))dlsym(RTLD_DEFAULT, "ncclDetAllReduce");
	if (direct != NULL)
		fprintf(stderr, "direct = %d\n",
			(int)direct(values[2], values[2], 8, ncclFloat32, ncclSum, single, NULL));

	/* Errors pass through unchanged. */
	STEP(ncclAllReduce(values[0], results[0], 8, ncclFloat32, ncclSum, NULL, NULL));
	STEP(ncclGroupEnd());
	printf("error string = %s\n", ncclGetErrorString(ncclInvalidUsage));
	printf("last error = %s\n", ncclGetLastError(NULL));

	for (int r = 0; r < 2; r++) {
		STEP(ncclCommDestroy(async_comms[r]));
		STEP(ncclCommDestroy(comms[r]));
	}
	STEP(ncclCommDestroy(single));
	return step_failures == 0 ? 0 : 1;
}
