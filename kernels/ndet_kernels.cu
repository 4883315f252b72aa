/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The extern "C" launchers of ndet_kernels.h.  The kernels themselves are
 * device/ndet_path_kernels.cuh, instantiated per element type in
 * ndet_pull_<dtype>.cu and ndet_push_ll_<dtype>.cu, which fill the tables of
 * device/ndet_tables.cuh (the all-ranks launcher and kernels, for the GPU test driver
 * only: ndet_kernels_all_ranks*.cu).
 */
#include <cuda_runtime.h>

#include "kernels/ndet_kernels.h"
#include "kernels/device/ndet_tables.cuh"

namespace
{

/* Every element type's kernels, indexed by ndet_dtype_t. */
struct ndet_type_kernels {
	const ndet_pull_kernels *pull;
	const ndet_push_ll_kernels *push_ll;
};
const ndet_type_kernels ndet_kernels[NDET_DTYPE_COUNT] = {
	{&ndet_pull_kernels_f32, &ndet_push_ll_kernels_f32},
	{&ndet_pull_kernels_f16, &ndet_push_ll_kernels_f16},
	{&ndet_pull_kernels_bf16, &ndet_push_ll_kernels_bf16},
	{&ndet_pull_kernels_f64, &ndet_push_ll_kernels_f64},
	{&ndet_pull_kernels_f8e4m3, &ndet_push_ll_kernels_f8e4m3},
	{&ndet_pull_kernels_f8e5m2, &ndet_push_ll_kernels_f8e5m2},
};

/*
 * The kernel of one checked call: its path, the class of its op and its rank bucket
 * (device/ndet_path_kernels.cuh).  Sum and avg share their kernels but on the LL path,
 * where each has its own, in four shapes: lines of 8 data bytes or, where args.ll_line
 * says so, wide ones (the planner: sum and avg of up to 8 ranks, elements of at most
 * 4 bytes); one line per thread where the blocks hold at most half a full block (the
 * table's ll1_max_elems and llw1_max_elems), else two.  Prod, min and max take the generic ones,
 * which also serve every op beyond 8 ranks.  Those of the
 * 16-rank bucket hold one block per SM, which the planner's grid cap assumes for prod,
 * min and max from 3 ranks (src/protocol/ndet_plan.c, ndet_plan_device_capacity): a
 * change of buckets here changes it there.
 */
ndet_kernel_fn ndet_kernel_select(const ndet_kernel_args &args)
{
	const int bucket = args.nranks <= 2 ? 0 : args.nranks <= 4 ? 1 : args.nranks <= 8 ? 2 : 3;
	const int generic = args.nranks <= 2 ? 0 : 1;
	const bool premul = args.premul != NDET_PREMUL_NONE;
	const bool sum = !premul && (args.op == NDET_OP_SUM || args.op == NDET_OP_AVG);
	const bool special = bucket < NDET_KERNEL_BUCKETS && (sum || premul);
	const ndet_type_kernels &k = ndet_kernels[args.dtype];
	switch (args.path) {
	case NDET_PATH_LL:
		if (!special) /* wide lines only in the sum and avg kernels: refused below */
			return args.ll_line == NDET_LL_WIDE_LINE_DATA
				       ? nullptr
				       : k.push_ll->ll_generic[generic];
		if (args.ll_line == NDET_LL_WIDE_LINE_DATA && /* NULL for f64: refused below */
		    args.chunk_elems <= k.push_ll->llw1_max_elems)
			return args.op == NDET_OP_AVG ? k.push_ll->llw1_avg[bucket]
						      : k.push_ll->llw1_sum[bucket];
		if (args.ll_line == NDET_LL_WIDE_LINE_DATA)
			return args.op == NDET_OP_AVG ? k.push_ll->llw_avg[bucket]
						      : k.push_ll->llw_sum[bucket];
		if (args.chunk_elems <= k.push_ll->ll1_max_elems)
			return args.op == NDET_OP_AVG ? k.push_ll->ll1_avg[bucket]
						      : k.push_ll->ll1_sum[bucket];
		return args.op == NDET_OP_AVG ? k.push_ll->ll_avg[bucket]
					      : k.push_ll->ll_sum[bucket];
	case NDET_PATH_PUSH: /* 2-8 ranks, never PreMulSum (checked) */
		return sum ? k.push_ll->push_sum[bucket] : k.push_ll->push_generic[generic];
	default:
		if (!special)
			return k.pull->generic[generic];
		return premul ? k.pull->premul[bucket] : k.pull->sum[bucket];
	}
}

} /* namespace */

extern "C" int ndet_kernel_allreduce(const struct ndet_kernel_args *args, void *stream)
{
	if (!ndet_kernel_valid(args->dtype, args->op) || args->op >= NDET_OP_COUNT ||
	    (args->premul != NDET_PREMUL_NONE && args->op != NDET_OP_SUM) ||
	    (args->path == NDET_PATH_LL &&
	     (args->premul != NDET_PREMUL_NONE ||
	      (args->ll_line != NDET_LL_LINE_DATA && args->ll_line != NDET_LL_WIDE_LINE_DATA))) ||
	    (args->path == NDET_PATH_PUSH && (args->premul != NDET_PREMUL_NONE || args->root >= 0 ||
					      args->nranks < 2 || args->nranks > 8)))
		return (int)cudaErrorInvalidValue;
	const ndet_kernel_fn kernel = ndet_kernel_select(*args);
	if (kernel == nullptr) /* wide lines of a type, op or rank count without them */
		return (int)cudaErrorInvalidValue;
	kernel<<<args->blocks, NDET_KERNEL_THREADS, 0, (cudaStream_t)stream>>>(*args);
	return (int)cudaGetLastError();
}

extern "C" int ndet_kernel_hosts_stage(const struct ndet_hosts_args *args, void *stream)
{
	const int stage = ndet_hosts_args_kernel(args);
	if (stage < 0)
		return (int)cudaErrorInvalidValue;
	ndet_kernels[args->k.dtype]
		.pull
		->hosts[stage]<<<args->k.blocks, NDET_KERNEL_THREADS, 0, (cudaStream_t)stream>>>(
			*args);
	return (int)cudaGetLastError();
}

/*
 * Load one kernel into the current device's context (cudaFuncGetAttributes loads a
 * kernel that CUDA's lazy loading has not loaded yet); 0 or the runtime's error,
 * cleared.
 */
static int ndet_kernel_load(const void *kernel)
{
	cudaFuncAttributes attributes;
	const cudaError_t err = cudaFuncGetAttributes(&attributes, kernel);
	if (err != cudaSuccess)
		(void)cudaGetLastError();
	return (int)err;
}

template <typename Fn> static int ndet_kernel_load_all(const Fn *kernels, unsigned count)
{
	for (unsigned i = 0; i < count; i++) {
		if (kernels[i] == nullptr) /* a table's entries that no call of its type takes */
			continue;
		const int err = ndet_kernel_load((const void *)kernels[i]);
		if (err != 0)
			return err;
	}
	return 0;
}

extern "C" int ndet_kernel_load_each(const void *const *kernels, unsigned count)
{
	return ndet_kernel_load_all(kernels, count);
}

#define NDET_LOAD_ARRAY(ARRAY)                                                                     \
	do {                                                                                       \
		const int err_ =                                                                   \
			ndet_kernel_load_all((ARRAY), sizeof(ARRAY) / sizeof((ARRAY)[0]));         \
		if (err_ != 0)                                                                     \
			return err_;                                                               \
	} while (0)

/*
 * Every kernel of one element type's tables.  Under CUDA's lazy loading (the default
 * since CUDA 12.2) a kernel's first launch loads it, and a load may wait for the
 * kernels already running in the context: a rank whose call is the first of its
 * kernel would then wait for its peers' kernels, which wait for that rank's call
 * (ranks that share a context: one process, one GPU).  Setup loads them all instead.
 */
static int ndet_kernel_load_type(const ndet_type_kernels &k)
{
	NDET_LOAD_ARRAY(k.pull->sum);
	NDET_LOAD_ARRAY(k.pull->premul);
	NDET_LOAD_ARRAY(k.pull->generic);
	NDET_LOAD_ARRAY(k.pull->hosts);
	NDET_LOAD_ARRAY(k.push_ll->push_sum);
	NDET_LOAD_ARRAY(k.push_ll->ll_sum);
	NDET_LOAD_ARRAY(k.push_ll->ll_avg);
	NDET_LOAD_ARRAY(k.push_ll->ll1_sum);
	NDET_LOAD_ARRAY(k.push_ll->ll1_avg);
	NDET_LOAD_ARRAY(k.push_ll->llw_sum);
	NDET_LOAD_ARRAY(k.push_ll->llw_avg);
	NDET_LOAD_ARRAY(k.push_ll->llw1_sum);
	NDET_LOAD_ARRAY(k.push_ll->llw1_avg);
	NDET_LOAD_ARRAY(k.push_ll->push_generic);
	NDET_LOAD_ARRAY(k.push_ll->ll_generic);
	return 0;
}

extern "C" int ndet_kernel_device_check(void)
{
	/* Every type but fp8, whose kernels have their own targets (ndet_kernel_fp8_check). */
	for (int dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
		if (dtype == NDET_DTYPE_F8E4M3 || dtype == NDET_DTYPE_F8E5M2)
			continue;
		const int err = ndet_kernel_load_type(ndet_kernels[dtype]);
		if (err != 0)
			return err;
	}
	return 0;
}

extern "C" int ndet_kernel_fp8_check(void)
{
	const int err = ndet_kernel_load_type(ndet_kernels[NDET_DTYPE_F8E4M3]);
	return err != 0 ? err : ndet_kernel_load_type(ndet_kernels[NDET_DTYPE_F8E5M2]);
}
