/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * C interface to the CUDA kernels: extern "C" launchers, each of which checks
 * cudaGetLastError() after its launch and returns the CUDA error code as an int
 * (0 = cudaSuccess), so C callers need no CUDA C++ headers.
 */
#ifndef NDET_KERNELS_H_
#define NDET_KERNELS_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Fill `count` 32-bit words at `dst` with `value` on `stream` (a cudaStream_t). */
int ndet_kernel_fill_u32(unsigned *dst, size_t count, unsigned value, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* NDET_KERNELS_H_ */
