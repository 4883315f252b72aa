/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Check macros for NCCL and system calls (CUDA ones are in ndet_cuda.h): each logs
 * once, where the error is found, with the call's text and the cause, sets the
 * caller's status and jumps to the caller's cleanup label.  Callers only propagate.
 */
#ifndef NDET_CHECK_H_
#define NDET_CHECK_H_

#include <errno.h>
#include <string.h>

#include <nccl.h>

#include "common/ndet_log.h"
#include "common/ndet_status.h"

/* A call returning ncclResult_t; the status keeps NCCL's meaning (ndet_status_from_nccl). */
#define NDET_NCCL_CHECK_GOTO(call, status, label)                                                  \
	do {                                                                                       \
		ncclResult_t ndet_nccl_res_ = (call);                                              \
		if (ndet_nccl_res_ != ncclSuccess && ndet_nccl_res_ != ncclInProgress) {           \
			NDET_WARN("%s failed: NCCL error %d", #call, (int)ndet_nccl_res_);         \
			(status) = ndet_status_from_nccl(ndet_nccl_res_);                          \
			goto label;                                                                \
		}                                                                                  \
	} while (0)

/* A system call returning -1 and setting errno (open, stat, pthread_*: see below). */
#define NDET_SYS_CHECK_GOTO(call, status, label)                                                   \
	do {                                                                                       \
		if ((call) == -1) {                                                                \
			int ndet_sys_errno_ = errno;                                               \
			NDET_WARN("%s failed: %s (errno %d)", #call, strerror(ndet_sys_errno_),    \
				  ndet_sys_errno_);                                                \
			(status) = NDET_ERR_SYSTEM;                                                \
			goto label;                                                                \
		}                                                                                  \
	} while (0)

/* A call returning 0 or an errno value (the pthread family). */
#define NDET_ERRNO_CHECK_GOTO(call, status, label)                                                 \
	do {                                                                                       \
		int ndet_err_ = (call);                                                            \
		if (ndet_err_ != 0) {                                                              \
			NDET_WARN("%s failed: %s (errno %d)", #call, strerror(ndet_err_),          \
				  ndet_err_);                                                      \
			(status) = NDET_ERR_SYSTEM;                                                \
			goto label;                                                                \
		}                                                                                  \
	} while (0)

#endif /* NDET_CHECK_H_ */
