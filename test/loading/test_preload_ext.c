/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Stands in for a framework extension module (PyTorch's _C.so, say): a library with
 * DT_NEEDED libnccl.so.2 that the program dlopen's RTLD_LOCAL, so that libnccl ends
 * up loaded but outside the global symbol scope, where RTLD_NEXT cannot see it.
 * Its NCCL calls bind to the preloaded nccl-det (global scope comes first).
 */
#include "config.h"

#include <nccl.h>

#define TEST_EXPORT __attribute__((visibility("default")))

/* What a process group does: init two ranks from one thread, reduce, broadcast. */
TEST_EXPORT int test_preload_ext_run(float *values, int count, int *version);
TEST_EXPORT int test_preload_ext_run(float *values, int count, int *version)
{
	ncclUniqueId id;
	ncclComm_t comms[2];
	if (ncclGetVersion(version) != ncclSuccess || ncclGetUniqueId(&id) != ncclSuccess)
		return -1;
	if (ncclGroupStart() != ncclSuccess)
		return -1;
	for (int rank = 0; rank < 2; rank++) {
		if (ncclCommInitRank(&comms[rank], 2, id, rank) != ncclSuccess)
			return -1;
	}
	if (ncclGroupEnd() != ncclSuccess)
		return -1;
	if (ncclGroupStart() != ncclSuccess)
		return -1;
	for (int rank = 0; rank < 2; rank++) {
		if (ncclAllReduce(values + rank * count, values + rank * count, (size_t)count,
				  ncclFloat32, ncclSum, comms[rank], NULL) != ncclSuccess)
			return -1;
	}
	if (ncclGroupEnd() != ncclSuccess)
		return -1;
	for (int rank = 0; rank < 2; rank++) {
		ncclResult_t state;
		if (ncclCommGetAsyncError(comms[rank], &state) != ncclSuccess ||
		    state != ncclSuccess)
			return -1;
	}
	if (ncclGroupStart() != ncclSuccess)
		return -1;
	for (int rank = 0; rank < 2; rank++) {
		if (ncclBcast(values + rank * count, (size_t)count, ncclFloat32, 0, comms[rank],
			      NULL) != ncclSuccess)
			return -1;
	}
	if (ncclGroupEnd() != ncclSuccess)
		return -1;
	for (int rank = 0; rank < 2; rank++) {
		if (ncclCommDestroy(comms[rank]) != ncclSuccess)
			return -1;
	}
	return 0;
}
