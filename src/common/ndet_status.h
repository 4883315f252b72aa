/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * One internal status type for every layer of nccl-det.  Internal functions return
 * ndet_status_t; the exported NCCL entry points convert it to ncclResult_t in one
 * place (ndet_status_to_nccl), so the mapping to NCCL's documented codes lives here.
 */
#ifndef NDET_STATUS_H_
#define NDET_STATUS_H_

#include <nccl.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
	NDET_OK = 0,
	NDET_IN_PROGRESS,          /* non-blocking operation still running */
	NDET_ERR_INVALID_ARGUMENT, /* caller passed a bad argument */
	NDET_ERR_INVALID_USAGE,    /* caller used the API wrongly, or strict mode refused */
	NDET_ERR_SYSTEM,           /* OS, IPC or allocation failure */
	NDET_ERR_CUDA,             /* a CUDA call failed */
	NDET_ERR_NCCL,             /* the real NCCL returned an error we cannot classify */
	NDET_ERR_REMOTE,           /* a peer failed, timed out, diverged, or the comm was aborted */
	NDET_ERR_INTERNAL,         /* a bug in nccl-det */
	NDET_ERR_UNSUPPORTED,      /* not an error for the user: the request must fall back */
	NDET_STATUS_COUNT
} ndet_status_t;

/* NCCL's code for an internal status (the only place this mapping is made). */
ncclResult_t ndet_status_to_nccl(ndet_status_t status);

/* Internal status for a code the real NCCL returned. */
ndet_status_t ndet_status_from_nccl(ncclResult_t result);

/* Short constant name for logs ("NDET_ERR_CUDA"). Never NULL. */
const char *ndet_status_name(ndet_status_t status);

#ifdef __cplusplus
}
#endif

#endif /* NDET_STATUS_H_ */
