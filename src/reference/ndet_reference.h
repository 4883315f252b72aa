/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The CPU reference of the determinism contract (doc/contract.md).  Plain C,
 * compiled with -ffp-contract=off, sharing no arithmetic with kernels/.
 *
 * THE TREE.  For n ranks, element i of the result is T(0, n) where
 *     T(lo, 1) = x_lo[i]
 *     T(lo, m) = T(lo, p) (op) T(lo + p, m - p),  p = the largest power of two < m
 * i.e. the left subtree is always a full power of two.  n = 8 gives
 * ((0+1)+(2+3))+((4+5)+(6+7)); n = 3 gives (0+1)+2; n = 6 gives ((0+1)+(2+3))+(4+5).
 * Every node is evaluated in the accumulation type (f32 for f32/f16/bf16 and both
 * fp8 types, f64 for f64) with IEEE round-to-nearest-even, no contraction, subnormals
 * kept; the root is rounded once to the output type (round-to-nearest-even).
 *
 * OPS.  sum, prod: IEEE add/multiply.  min/max: NaN-suppressing like NCCL's
 * fminf/fmaxf/__hmin/__hmax (one NaN operand -> the other operand; both NaN -> NaN)
 * and -0 orders below +0 (min(-0,+0) = -0, max(-0,+0) = +0), so the result's bits
 * never depend on operand order.  avg: the tree sum in the accumulation type, then
 * one IEEE division by n in the accumulation type, then the final rounding.
 *
 * HOSTS (doc/multihost.md).  On H > 1 hosts, hosts are ordered by their lowest rank
 * and a host's ranks by rank (protocol/ndet_host_order.h computes that order), and
 * element i is T_hosts(T_local(host 0), ..., T_local(host H-1)): T over each host's
 * ranks, then T over the H partials, all in the accumulation type, rounded once at
 * the end.  avg divides once, by n = g x H (the number of ranks); PreMulSum scalars
 * apply at the leaves only, the host stage being a plain sum; prod, min and max use
 * their operator at both stages.  Where every host holds the same power-of-two number
 * of consecutive ranks this is the single-host tree over rank order, bit for bit; one
 * host is the single-host contract itself.
 *
 * FP8.  Two OCP 8-bit formats, stored one byte per element:
 *   f8e4m3 (E4M3, "FN"): sign, 4 exponent bits (bias 7), 3 mantissa bits.  No
 *     infinities; the only NaNs are S.1111.111 (0x7f, 0xff), so the other patterns
 *     with the exponent all ones are normal numbers 256 ... 448.  Largest finite 448
 *     (0x7e), smallest normal 2^-6, subnormals m * 2^-9.
 *   f8e5m2 (E5M2): sign, 5 exponent bits (bias 15), 2 mantissa bits, IEEE-like:
 *     inf 0x7c/0xfc, NaN 0x7d ... 0x7f (and with the sign set).  Largest finite
 *     57344 (0x7b), smallest normal 2^-14, subnormals m * 2^-16.
 * Both widen exactly to f32 and reduce like f16/bf16: the same tree and ops in f32,
 * PreMulSum scalars are elements of the dtype (each product is exact in f32), and the
 * f32 root (after the division of avg) is rounded ONCE to fp8:
 *   - round to nearest, ties to even, subnormal results included;
 *   - finite values SATURATE, like NCCL's fp8 conversions (satfinite): a finite
 *     magnitude that rounds above the largest finite gives +-largest finite (e4m3:
 *     |x| >= 464 gives 448, 464 itself being a tie that goes to the even 448; e5m2:
 *     |x| >= 61440 gives 57344);
 *   - +-inf stays +-inf in e5m2, as IEEE says (NCCL's satfinite makes it 57344),
 *     and so that one rank's result, a copy, is its input whatever the path: for
 *     every non-NaN pattern x, narrowing the widened x gives x back.  e4m3 has no
 *     inf: +-inf (only an f32 overflow of prod makes one) gives +-448;
 *   - NaN gives NaN (e4m3 0x7f, e5m2 0x7e, with the sign of the f32 NaN); only
 *     NaN-ness is part of the contract;
 *   - underflow keeps the sign: a magnitude of at most half the smallest subnormal
 *     gives +-0 (exactly half is a tie that goes to the even 0).
 * For e4m3, every f32 partial sum of up to 16 e4m3 values is exact (each value is a
 * multiple of 2^-9 below 2^9, so 16 of them span 2^12 ... 2^-9 with the carries:
 * fewer than 24 bits), so e4m3 sum and avg do not depend on the tree's order at all;
 * what an implementation can get wrong there is rounding to e4m3 at every node
 * instead of once at the end (ndet_reference_allreduce_node_rounded).  For e5m2
 * (values 2^15 ... 2^-16) the f32 partial sums round, and the order matters.
 */
#ifndef NDET_REFERENCE_H_
#define NDET_REFERENCE_H_

#include <stddef.h>
#include <stdint.h>

#include "common/ndet_status.h"
#include "common/ndet_dtype.h"
#include "kernels/ndet_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * output[i] = T(inputs[0][i], ..., inputs[nranks-1][i]) for i < count.
 * `output` may alias one of the inputs.  NDET_ERR_INVALID_ARGUMENT for nranks < 1,
 * a bad dtype/op or NULL pointers with count > 0; NDET_ERR_SYSTEM when scratch
 * memory (nranks elements) runs out.  The other references answer the same.
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

/*
 * The same tree, but every node's result is rounded to `dtype` before the next node
 * uses it (for avg the rounded root sum is then divided by n in the accumulation type
 * and rounded again).  Not the contract: tests use it to prove that their data tells
 * the one final rounding of f16/bf16/fp8 from a rounding at every node.  For f32 and
 * f64 it is the tree itself.
 */
ndet_status_t ndet_reference_allreduce_node_rounded(const void *const *inputs, int nranks,
						    void *output, size_t count, ndet_dtype_t dtype,
						    ndet_op_t op);

/* Largest communicator the reduce-scatter references take. */
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
 * final rounding are the only roundings (the same for the fp8 types, whose products
 * have at most 8 significand bits); for f32 (f64) each product is rounded to f32
 * (f64) before it is added, never fused with the add.
 */
ndet_status_t ndet_reference_premulsum(const void *const *inputs, const void *scalars, int nranks,
				       void *output, size_t count, ndet_dtype_t dtype);

/*
 * The multi-host references (HOSTS above).  host_of[r] is rank r's host index, the
 * hosts numbered by their lowest rank (host_of[0] == 0, and every host_of[r] is at
 * most one above each host_of before it): ndet_host_order's numbering.  Any other
 * numbering, or a NULL host_of, is NDET_ERR_INVALID_ARGUMENT, as are the arguments
 * the single-host references refuse.  All ranks on host 0 give the single-host
 * references' bits.
 *
 * The all-reduce.  `output` may alias one of the inputs.
 */
ndet_status_t ndet_reference_allreduce_hosts(const void *const *inputs, const int *host_of,
					     int nranks, void *output, size_t count,
					     ndet_dtype_t dtype, ndet_op_t op);

/* PreMulSum: leaf r is x_r * scalars[r] as in ndet_reference_premulsum; then sums. */
ndet_status_t ndet_reference_premulsum_hosts(const void *const *inputs, const void *scalars,
					     const int *host_of, int nranks, void *output,
					     size_t count, ndet_dtype_t dtype);

/*
 * Reduce-scatter: block `rank` of ndet_reference_allreduce_hosts of the same inputs
 * (nranks * recvcount elements each), bit for bit.  ncclReduce: the root receives the
 * all-reduce.
 */
ndet_status_t ndet_reference_reduce_scatter_hosts(const void *const *inputs, const int *host_of,
						  int nranks, int rank, void *output,
						  size_t recvcount, ndet_dtype_t dtype,
						  ndet_op_t op);

/*
 * The two stages of the multi-host tree, as an implementation runs them apart (the
 * host partial travels between them).  partial_size is ndet_hosts_partial_size's
 * (protocol/ndet_hosts_plan.h): the bytes of a partial element, 4 (f32) or 8 (f64)
 * for the accumulation type, or the data type's size where the partial is exact in
 * it (min, max; one rank per host without PreMulSum).
 *
 * ndet_reference_hosts_partial: partial[i] = T_local(inputs[0][i], ..., inputs[g-1][i])
 * over the g ranks of one host in rank order, in the accumulation type, stored in the
 * partial type without any other rounding.  scalars non-NULL: PreMulSum leaves
 * (x_r * scalars[r], scalars holding g values of dtype) and a sum.  avg sums here.
 *
 * ndet_reference_hosts_combine: output[i] = T_hosts(partials[0][i], ...,
 * partials[H-1][i]) in host order, in the accumulation type (PreMulSum: op sum);
 * avg then divides by nranks (g x H); one rounding to dtype.  The output may alias
 * no partial.
 *
 * Composed, they give ndet_reference_allreduce_hosts (and _premulsum_hosts) bit for
 * bit.  NDET_ERR_INVALID_ARGUMENT for a partial_size that is not the data type's,
 * 4 or 8 as above, or the arguments the other references refuse.
 */
ndet_status_t ndet_reference_hosts_partial(const void *const *inputs, const void *scalars,
					   int local_ranks, void *partial, size_t count,
					   ndet_dtype_t dtype, ndet_op_t op, uint32_t partial_size);
ndet_status_t ndet_reference_hosts_combine(const void *const *partials, int nhosts,
					   uint32_t partial_size, int nranks, void *output,
					   size_t count, ndet_dtype_t dtype, ndet_op_t op);

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

/*
 * fp8 conversions (see FP8 above): widening is exact; narrowing rounds to nearest
 * even and saturates finite values to the largest finite, e5m2 keeps inf (e4m3
 * saturates it), NaN stays NaN (a canonical one).
 */
float ndet_fp8_e4m3_to_float(uint8_t bits);
uint8_t ndet_float_to_fp8_e4m3(float value);
float ndet_fp8_e5m2_to_float(uint8_t bits);
uint8_t ndet_float_to_fp8_e5m2(float value);

/*
 * `value` as the bits of one element of `dtype` (a PreMulSum scalar, a test value):
 * exact for f64, rounded once to f32 and then by the conversions above for the others.
 */
uint64_t ndet_reference_element_bits(ndet_dtype_t dtype, double value);

/*
 * Rank r's PreMulSum scalar in the GPU tests and nccl-det-perf: exact in every dtype,
 * signs mixed, never 1 and distinct for 16 ranks (then they repeat), so a scalar
 * applied to the wrong rank or not at all gives other bits.
 */
double ndet_reference_test_scalar(int rank);

#ifdef __cplusplus
}
#endif

#endif /* NDET_REFERENCE_H_ */
