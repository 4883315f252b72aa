/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Element types and reduction operators nccl-det computes deterministically.
 * Plain C enums shared by the host code, the CPU reference and the kernels (only
 * the names are shared: the arithmetic of the reference and of the kernels is
 * written separately, so one cannot hide a bug of the other).
 */
#ifndef NDET_TYPES_H_
#define NDET_TYPES_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
	NDET_DTYPE_F32 = 0, /* accumulate in f32 */
	NDET_DTYPE_F16,     /* accumulate in f32, one rounding at the end */
	NDET_DTYPE_BF16,    /* accumulate in f32, one rounding at the end */
	NDET_DTYPE_F64,     /* accumulate in f64 */
	NDET_DTYPE_F8E4M3,  /* OCP fp8 E4M3 (no inf): accumulate in f32, one rounding */
	NDET_DTYPE_F8E5M2,  /* OCP fp8 E5M2: accumulate in f32, one rounding */
	NDET_DTYPE_COUNT
} ndet_dtype_t;

typedef enum {
	NDET_OP_SUM = 0,
	NDET_OP_PROD,
	NDET_OP_MIN, /* NaN-suppressing (NCCL's fminf/__hmin); -0 < +0 */
	NDET_OP_MAX, /* NaN-suppressing (NCCL's fmaxf/__hmax); -0 < +0 */
	NDET_OP_AVG, /* tree sum in the accumulation type, then IEEE division by n */
	NDET_OP_COUNT
} ndet_op_t;

/* The collectives nccl-det computes, all with the one tree of ndet_reference.h. */
typedef enum {
	NDET_COLL_ALLREDUCE = 0,  /* ncclAllReduce: every rank gets the whole result */
	NDET_COLL_REDUCE_SCATTER, /* ncclReduceScatter: rank r gets block r of it */
	NDET_COLL_REDUCE,         /* ncclReduce: the root gets the whole result */
	NDET_COLL_COUNT
} ndet_coll_t;

/*
 * PreMulSum (ncclRedOpCreatePreMulSum): op sum, every rank's input multiplied by
 * that rank's scalar first.  Where the scalar comes from:
 */
typedef enum {
	NDET_PREMUL_NONE = 0, /* a plain op */
	NDET_PREMUL_HOST,     /* ncclScalarHostImmediate: value read when the op was made */
	NDET_PREMUL_DEVICE,   /* ncclScalarDevice: read from device memory by each call */
} ndet_premul_t;

/* Largest communicator size one kernel handles; larger ones fall back. */
#define NDET_MAX_RANKS 16

#ifdef __cplusplus
}
#endif

#endif /* NDET_TYPES_H_ */
