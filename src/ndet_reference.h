/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The CPU reference of the determinism contract (DESIGN.md section 1).  Plain C,
 * compiled with -ffp-contract=off, sharing no arithmetic with kernels/.
 *
 * THE TREE.  For n ranks, element i of the result is T(0, n) where
 *     T(lo, 1) = x_lo[i]
 *     T(lo, m) = T(lo, p) (op) T(lo + p, m - p),  p = the largest power of two < m
 * i.e. the left subtree is always a full power of two.  n = 8 gives
 * ((0+1)+(2+3))+((4+5)+(6+7)); n = 3 gives (0+1)+2; n = 6 gives ((0+1)+(2+3))+(4+5).
 * Every node is evaluated in the accumulation type (f32 for f32/f16/bf16, f64 for
 * f64) with IEEE round-to-nearest-even, no contraction, subnormals kept; the root is
 * rounded once to the output type (round-to-nearest-even).
 *
 * OPS.  sum, prod: IEEE add/multiply.  min/max: NaN-suppressing like NCCL's
 * fminf/fmaxf/__hmin/__hmax (one NaN operand -> the other operand; both NaN -> NaN)
 * and -0 orders below +0 (min(-0,+0) = -0, max(-0,+0) = +0), so the result's bits
 * never depend on operand order.  avg: the tree sum in the accumulation type, then
 * one IEEE division by n in the accumulation type, then the final rounding.
 */
#ifndef NDET_REFERENCE_H_
#define NDET_REFERENCE_H_

#include <stddef.h>
#include <stdint.h>

#include "ndet_status.h"
#include "ndet_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Size in bytes of one element; 0 for an invalid dtype. */
size_t ndet_dtype_size(ndet_dtype_t dtype);

/* "f32", "f16", "bf16", "f64"; "sum", "prod", "min", "max", "avg". */
const char *ndet_dtype_name(ndet_dtype_t dtype);
const char *ndet_op_name(ndet_op_t op);

/*
 * output[i] = T(inputs[0][i], ..., inputs[nranks-1][i]) for i < count.
 * `output` may alias one of the inputs.  NDET_ERR_INVALID_ARGUMENT for nranks < 1,
 * a bad dtype/op or NULL pointers with count > 0.
 */
ndet_status_t ndet_reference_allreduce(const void *const *inputs, int nranks, void *output,
				       size_t count, ndet_dtype_t dtype, ndet_op_t op);

/*
 * The same reduction in plain sequential order ((x0 op x1) op x2) ..., used by tests
 * to prove their data discriminates between orders.
 */
ndet_status_t ndet_reference_allreduce_sequential(const void *const *inputs, int nranks,
						  void *output, size_t count, ndet_dtype_t dtype,
						  ndet_op_t op);

/* Largest communicator the reduce-scatter and PreMulSum references take. */
#define NDET_REFERENCE_MAX_RANKS 4096

/*
 * Reduce-scatter: rank `rank` receives elements [rank*recvcount, (rank+1)*recvcount)
 * of the all-reduce of inputs that hold nranks*recvcount elements each, bit for bit
 * (the same tree, the same rounding): an all-reduce equals the concatenation of the
 * reduce-scatter blocks.  ncclReduce needs no reference of its own: the root gets the
 * all-reduce result.
 */
ndet_status_t ndet_reference_reduce_scatter(const void *const *inputs, int nranks, int rank,
					    void *output, size_t recvcount, ndet_dtype_t dtype,
					    ndet_op_t op);

/*
 * PreMulSum (ncclRedOpCreatePreMulSum): rank r's elements are multiplied by its scalar
 * scalars[r] (an array of nranks values of `dtype`) in the accumulation type with one
 * IEEE rounding there, then summed with the tree, then rounded once to `dtype`.  For
 * f16 and bf16 the product of two widened values is exact in f32, so the adds and the
 * final rounding are the only roundings; for f32 (f64) each product is rounded to f32
 * (f64) before it is added, never fused with the add.
 */
ndet_status_t ndet_reference_premulsum(const void *const *inputs, const void *scalars,
				       int nranks, void *output, size_t count, ndet_dtype_t dtype);

/*
 * The tree for n as text, e.g. "((0+1)+2)" for n = 3, "0" for n = 1.  Returns the
 * length of the whole text, like snprintf: a result >= buffer_size means the text was
 * cut short (always NUL-terminated when buffer_size > 0).  -1 for nranks < 1.
 */
int ndet_reference_tree_string(int nranks, char *buffer, size_t buffer_size);

/* Exact conversions (round-to-nearest-even, subnormals kept, NaN stays NaN). */
float ndet_half_to_float(uint16_t bits);
uint16_t ndet_float_to_half(float value);
float ndet_bfloat16_to_float(uint16_t bits);
uint16_t ndet_float_to_bfloat16(float value);

#ifdef __cplusplus
}
#endif

#endif /* NDET_REFERENCE_H_ */
