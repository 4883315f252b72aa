/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Check macros for CUDA runtime calls: log once, where the error is found, with the
 * call's text and CUDA's message; callers only propagate the status.
 *
 * A failing runtime call also sets the thread's "last error", which the application
 * would see in its next cudaGetLastError() and blame on its own code.  We clear it:
 * the error is ours and is reported through our status.
 */
#ifndef NDET_CUDA_H_
#define NDET_CUDA_H_

#include <cuda_runtime_api.h>

#include "common/ndet_log.h"
#include "common/ndet_status.h"

#define NDET_CUDA_CHECK_GOTO(call, status, label)                                                  \
	do {                                                                                       \
		cudaError_t ndet_cuda_err_ = (call);                                               \
		if (ndet_cuda_err_ != cudaSuccess) {                                               \
			NDET_WARN("%s failed: %s (%d)", #call, cudaGetErrorString(ndet_cuda_err_), \
				  (int)ndet_cuda_err_);                                            \
			(void)cudaGetLastError();                                                  \
			(status) = NDET_ERR_CUDA;                                                  \
			goto label;                                                                \
		}                                                                                  \
	} while (0)

/* For cleanup paths: log and clear, keep going. */
#define NDET_CUDA_CHECK_WARN(call)                                                                 \
	do {                                                                                       \
		cudaError_t ndet_cuda_err_ = (call);                                               \
		if (ndet_cuda_err_ != cudaSuccess) {                                               \
			NDET_WARN("%s failed: %s (%d)", #call, cudaGetErrorString(ndet_cuda_err_), \
				  (int)ndet_cuda_err_);                                            \
			(void)cudaGetLastError();                                                  \
		}                                                                                  \
	} while (0)

#endif /* NDET_CUDA_H_ */
