/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * What every GPU test program shares, the engine's and the kernels' alone left out
 * (ndet_gpu_common.h has those): setup checks, test data, the NCCL unique id through
 * a file, bit-exact comparison.  A program that links only this (ndet_fault_test)
 * carries no kernel image of its own.
 */
#ifndef NDET_GPU_DATA_H_
#define NDET_GPU_DATA_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "kernels/ndet_types.h"

/*
 * A setup error of the test itself: exit status 2 at once (_exit after flushing).  Rank
 * threads of one process may fail together, and exit() from two threads runs the CUDA
 * runtime's teardown twice (a crash, status 139, instead of the 2 the scripts read).
 */
void gpu_die(void) __attribute__((noreturn));

#define GPU_CHECK(call)                                                                            \
	do {                                                                                       \
		cudaError_t gpu_err_ = (call);                                                     \
		if (gpu_err_ != cudaSuccess) {                                                     \
			fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,       \
				cudaGetErrorString(gpu_err_));                                     \
			gpu_die();                                                                 \
		}                                                                                  \
	} while (0)

/* For the programs that call NCCL: a failed call is a setup error (exit 2). */
#define NCCL_OK(call)                                                                              \
	do {                                                                                       \
		ncclResult_t nccl_res_ = (call);                                                   \
		if (nccl_res_ != ncclSuccess) {                                                    \
			fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,       \
				ncclGetErrorString(nccl_res_));                                    \
			gpu_die();                                                                 \
		}                                                                                  \
	} while (0)

/* Deterministic test values: wide exponents, mixed signs; specials on request. */
void gpu_fill(ndet_dtype_t dtype, void *buffer, size_t count, uint64_t seed, bool specials);

/* fp8 e4m3 or e5m2? */
bool gpu_is_fp8(ndet_dtype_t dtype);

/* Does NDET_TEST_DTYPES (comma list of names, default all) name `dtype`? */
bool gpu_dtype_named(ndet_dtype_t dtype);

/* Rank 0 makes the NCCL unique id and writes it to ID_FILE (atomically, through a
 * rename); the others wait up to 60 s for the file.  False on any failure. */
bool gpu_share_unique_id(int rank, const char *id_file, ncclUniqueId *id);

/* Host-to-device copy ordered on STREAM and finished on return.  A plain cudaMemcpy from
 * pageable memory may return before its DMA lands, and a non-blocking stream does not
 * wait for the legacy stream: a kernel launched next could read the old bytes. */
void gpu_upload(void *dst, const void *src, size_t bytes, cudaStream_t stream);

/* Elements whose bits differ (two NaNs count as equal); *first_index the first. */
size_t gpu_compare(ndet_dtype_t dtype, const void *got, const void *want, size_t count,
		   size_t *first_index);

#endif /* NDET_GPU_DATA_H_ */
