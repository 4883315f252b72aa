/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Stand-in for kernels/libndet_all_ranks.la in a build without the one-launch kernels
 * (configure found no NVIDIA driver, or --disable-all-ranks-kernels): the GPU test
 * driver's loopback and process modes work; its one-launch (compute-sanitizer) mode
 * and load-all-ranks fail with this message instead of running.
 */
#include "config.h"

#include <stdio.h>

#include <cuda_runtime_api.h>

#include "kernels/ndet_kernels.h"

static int ndet_all_ranks_missing(void)
{
	fprintf(stderr,
		"ndet_gpu_test: this build has no one-launch kernels; configure with "
		"--enable-all-ranks-kernels (the default where an NVIDIA driver is found)\n");
	return (int)cudaErrorNotSupported;
}

int ndet_kernel_allreduce_all_ranks(const struct ndet_kernel_args *device_args, int dtype, int op,
				    int nranks, uint32_t blocks, void *stream)
{
	(void)device_args;
	(void)dtype;
	(void)op;
	(void)nranks;
	(void)blocks;
	(void)stream;
	return ndet_all_ranks_missing();
}

int ndet_kernel_hosts_stage_all_ranks(const struct ndet_hosts_args *device_args, int dtype,
				      int stage, int nranks, uint32_t blocks, void *stream)
{
	(void)device_args;
	(void)dtype;
	(void)stage;
	(void)nranks;
	(void)blocks;
	(void)stream;
	return ndet_all_ranks_missing();
}

int ndet_kernel_all_ranks_load(unsigned dtype_mask)
{
	(void)dtype_mask;
	return ndet_all_ranks_missing();
}
