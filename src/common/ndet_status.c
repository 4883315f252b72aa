/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 */
#include "config.h"

#include "common/ndet_status.h"

ncclResult_t ndet_status_to_nccl(ndet_status_t status)
{
	switch (status) {
	case NDET_OK:
		return ncclSuccess;
	case NDET_IN_PROGRESS:
		return ncclInProgress;
	case NDET_ERR_INVALID_ARGUMENT:
		return ncclInvalidArgument;
	case NDET_ERR_INVALID_USAGE:
	case NDET_ERR_UNSUPPORTED:
		/* Only reaches a caller in strict mode, which NCCL would call misuse. */
		return ncclInvalidUsage;
	case NDET_ERR_SYSTEM:
		return ncclSystemError;
	case NDET_ERR_CUDA:
		return ncclUnhandledCudaError;
	case NDET_ERR_REMOTE:
		/* NCCL's code for "a peer or the network failed"; PyTorch's watchdog keys on it. */
		return ncclRemoteError;
	case NDET_ERR_NCCL:
	case NDET_ERR_INTERNAL:
	case NDET_STATUS_COUNT:
		break;
	}
	return ncclInternalError;
}

ndet_status_t ndet_status_from_nccl(ncclResult_t result)
{
	switch (result) {
	case ncclSuccess:
		return NDET_OK;
	case ncclInProgress:
		return NDET_IN_PROGRESS;
	case ncclInvalidArgument:
		return NDET_ERR_INVALID_ARGUMENT;
	case ncclInvalidUsage:
		return NDET_ERR_INVALID_USAGE;
	case ncclSystemError:
		return NDET_ERR_SYSTEM;
	case ncclUnhandledCudaError:
		return NDET_ERR_CUDA;
	case ncclRemoteError:
		return NDET_ERR_REMOTE;
	case ncclInternalError:
		return NDET_ERR_INTERNAL;
	default:
		return NDET_ERR_NCCL;
	}
}

const char *ndet_status_name(ndet_status_t status)
{
	static const char *const names[NDET_STATUS_COUNT] = {
		[NDET_OK] = "NDET_OK",
		[NDET_IN_PROGRESS] = "NDET_IN_PROGRESS",
		[NDET_ERR_INVALID_ARGUMENT] = "NDET_ERR_INVALID_ARGUMENT",
		[NDET_ERR_INVALID_USAGE] = "NDET_ERR_INVALID_USAGE",
		[NDET_ERR_SYSTEM] = "NDET_ERR_SYSTEM",
		[NDET_ERR_CUDA] = "NDET_ERR_CUDA",
		[NDET_ERR_NCCL] = "NDET_ERR_NCCL",
		[NDET_ERR_REMOTE] = "NDET_ERR_REMOTE",
		[NDET_ERR_INTERNAL] = "NDET_ERR_INTERNAL",
		[NDET_ERR_UNSUPPORTED] = "NDET_ERR_UNSUPPORTED",
	};
	if ((unsigned)status >= NDET_STATUS_COUNT)
		return "NDET_STATUS_UNKNOWN";
	return names[status];
}
