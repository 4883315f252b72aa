/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * ndet_kernel_allreduce_all_ranks (ndet_kernels.h): every rank of a loopback world in
 * one launch, for compute-sanitizer, which serialises separate launches.  With the
 * per-type tables (ndet_kernels_all_ranks_<dtype>.cu) this is kernels/
 * libndet_all_ranks.la, which only the GPU test driver links: the library never
 * carries these kernels, and they are built for NVCC_ALL_RANKS_GENCODE (PTX alone by
 * default, compiled by the driver on first use; m4/check_pkg_nvcc.m4).
 */
#include <cuda_runtime.h>

#include "kernels/ndet_kernels.h"
#include "kernels/device/ndet_tables.cuh"

namespace
{

/* Every element type's all-ranks kernels, indexed by ndet_dtype_t. */
const ndet_all_ranks_kernels *const ndet_all_ranks_tables[NDET_DTYPE_COUNT] = {
	&ndet_all_ranks_kernels_f32,    &ndet_all_ranks_kernels_f16,
	&ndet_all_ranks_kernels_bf16,   &ndet_all_ranks_kernels_f64,
	&ndet_all_ranks_kernels_f8e4m3, &ndet_all_ranks_kernels_f8e5m2};

/* The kernel of a kernel-table op index (NDET_KERNEL_OP_PREMULSUM for PreMulSum). */
ndet_all_ranks_fn ndet_all_ranks_select(int dtype, int op)
{
	const ndet_all_ranks_kernels &k = *ndet_all_ranks_tables[dtype];
	if (op == NDET_KERNEL_OP_PREMULSUM)
		return k.premul;
	return op == NDET_OP_SUM || op == NDET_OP_AVG ? k.sum : k.generic;
}

} /* namespace */

extern "C" int ndet_kernel_allreduce_all_ranks(const struct ndet_kernel_args *device_args,
					       int dtype, int op, int nranks, uint32_t blocks,
					       void *stream)
{
	/* Up to 8 ranks: the one bucket built (device/ndet_path_kernels.cuh). */
	if (!ndet_kernel_valid(dtype, op) || nranks < 1 || nranks > 8)
		return (int)cudaErrorInvalidValue;
	dim3 grid(blocks, (unsigned)nranks);
	ndet_all_ranks_select(dtype, op)<<<grid, NDET_KERNEL_THREADS, 0, (cudaStream_t)stream>>>(
		device_args);
	return (int)cudaGetLastError();
}

extern "C" int ndet_kernel_hosts_stage_all_ranks(const struct ndet_hosts_args *device_args,
						 int dtype, int stage, int nranks, uint32_t blocks,
						 void *stream)
{
	const int index = stage == 1 ? 0 : stage == 3 ? 1 : stage == 5 ? 2 : -1;
	if (index < 0 || dtype < 0 || dtype >= NDET_DTYPE_COUNT || nranks < 1 || nranks > 8 ||
	    blocks < 1)
		return (int)cudaErrorInvalidValue;
	dim3 grid(blocks, (unsigned)nranks);
	ndet_all_ranks_tables[dtype]
		->hosts[index]<<<grid, NDET_KERNEL_THREADS, 0, (cudaStream_t)stream>>>(device_args);
	return (int)cudaGetLastError();
}

extern "C" int ndet_kernel_all_ranks_load(unsigned dtype_mask)
{
	for (int dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
		if ((dtype_mask & (1u << dtype)) == 0)
			continue;
		const ndet_all_ranks_kernels &k = *ndet_all_ranks_tables[dtype];
		const void *const kernels[] = {(const void *)k.sum,      (const void *)k.premul,
					       (const void *)k.generic,  (const void *)k.hosts[0],
					       (const void *)k.hosts[1], (const void *)k.hosts[2]};
		for (unsigned i = 0; i < sizeof(kernels) / sizeof(kernels[0]); i++) {
			cudaFuncAttributes attributes;
			const cudaError_t err = cudaFuncGetAttributes(&attributes, kernels[i]);
			if (err != cudaSuccess)
				return (int)err;
		}
	}
	return 0;
}
