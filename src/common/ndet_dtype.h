/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Facts about the element types and operators nccl-det reduces, in one place: their
 * sizes and names, and how NCCL's datatypes and ops map onto them.  The enums
 * themselves are in kernels/ndet_types.h, shared with the device code.
 */
#ifndef NDET_DTYPE_H_
#define NDET_DTYPE_H_

#include <stdbool.h>
#include <stddef.h>

#include <nccl.h>

#include "kernels/ndet_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * fp8 arrived in NCCL 2.24 as datatypes 10 and 11 (ncclFloat8e4m3, ncclFloat8e5m2).
 * Numbers rather than enum names, so the code builds against any nccl.h.
 */
#define NDET_NCCL_FP8_E4M3 ((ncclDataType_t)10)
#define NDET_NCCL_FP8_E5M2 ((ncclDataType_t)11)

/* Size in bytes of one element; 0 for an invalid dtype. */
size_t ndet_dtype_size(ndet_dtype_t dtype);

/*
 * "f32", "f16", "bf16", "f64", "f8e4m3", "f8e5m2" (the fp8 names nccl-tests uses);
 * "sum", "prod", "min", "max", "avg".  An invalid value gets "invalid-dtype" or
 * "invalid-op".
 */
const char *ndet_dtype_name(ndet_dtype_t dtype);
const char *ndet_op_name(ndet_op_t op);

/* NCCL's datatype of a dtype (ncclFloat32 ...). */
ncclDataType_t ndet_dtype_to_nccl(ndet_dtype_t dtype);

/* The dtype of an NCCL datatype; false for a datatype nccl-det does not reduce. */
bool ndet_dtype_from_nccl(ncclDataType_t datatype, ndet_dtype_t *dtype);

/* NCCL's op of a built-in op (ncclSum ...). */
ncclRedOp_t ndet_op_to_nccl(ndet_op_t op);

/* The op of one of NCCL's built-in ops; false for any other value (PreMulSum ops). */
bool ndet_op_from_nccl(ncclRedOp_t op, ndet_op_t *out);

#ifdef __cplusplus
}
#endif

#endif /* NDET_DTYPE_H_ */
