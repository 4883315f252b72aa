/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 */
#include "ndet_kernels.h"

#include <cuda_runtime.h>

__global__ void ndet_fill_u32_kernel(unsigned *dst, size_t count, unsigned value)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
	     i += (size_t)gridDim.x * blockDim.x)
		dst[i] = value;
}

extern "C" int ndet_kernel_fill_u32(unsigned *dst, size_t count, unsigned value, void *stream)
{
	if (count == 0)
		return 0;
	unsigned blocks = (unsigned)((count + 255) / 256);
	if (blocks > 1024)
		blocks = 1024;
	ndet_fill_u32_kernel<<<blocks, 256, 0, (cudaStream_t)stream>>>(dst, count, value);
	return (int)cudaGetLastError();
}
