/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The reduction tree: the explicitly rounded operators of its nodes, the kernel
 * classes (sum, PreMulSum, generic) and the tree itself, in the order of
 * ndet_reference.h.
 *
 * Every tree node uses an explicitly rounded intrinsic (__fadd_rn, __fmul_rn,
 * __dadd_rn, __dmul_rn, __fdiv_rn, __ddiv_rn), which the compiler may not contract
 * into FMAs or reassociate; the kernels are also built with --fmad=false and without
 * fast-math, so subnormals survive.
 */
#ifndef NDET_DEVICE_TREE_CUH_
#define NDET_DEVICE_TREE_CUH_

#include "kernels/ndet_abi.h"
#include "kernels/device/ndet_dtype.cuh"

namespace
{

__device__ __forceinline__ float ndet_add(float a, float b)
{
	return __fadd_rn(a, b);
}
__device__ __forceinline__ double ndet_add(double a, double b)
{
	return __dadd_rn(a, b);
}
__device__ __forceinline__ float ndet_mul(float a, float b)
{
	return __fmul_rn(a, b);
}
__device__ __forceinline__ double ndet_mul(double a, double b)
{
	return __dmul_rn(a, b);
}
__device__ __forceinline__ float ndet_div(float a, float b)
{
	return __fdiv_rn(a, b);
}
__device__ __forceinline__ double ndet_div(double a, double b)
{
	return __ddiv_rn(a, b);
}

/* NaN-suppressing like NCCL's fminf/__hmin; -0 below +0 so bits never depend on order. */
template <typename Acc> __device__ __forceinline__ Acc ndet_min(Acc a, Acc b)
{
	if (isnan(a))
		return b;
	if (isnan(b))
		return a;
	if (a < b)
		return a;
	if (b < a)
		return b;
	return signbit(a) ? a : b;
}

template <typename Acc> __device__ __forceinline__ Acc ndet_max(Acc a, Acc b)
{
	if (isnan(a))
		return b;
	if (isnan(b))
		return a;
	if (a > b)
		return a;
	if (b > a)
		return b;
	return signbit(a) ? b : a;
}

/*
 * Kernel classes: what one kernel is specialised for at compile time.  The op itself
 * is args.op, read at run time where a class serves several:
 *   kSum     sum and avg (avg: the sum, then one division by n at the root; the
 *            same operations a kernel of its own would make, so the same bits);
 *   kPremul  PreMulSum: a sum whose leaves are x_q * s_q, the product rounded once
 *            in the accumulation type (exact for f16 and bf16: 11 x 11 and 8 x 8
 *            significand bits fit in f32's 24), then the tree of sums;
 *   kGeneric every op, PreMulSum included (args.premul), the tree's operator chosen
 *            per element by a warp-uniform branch: prod, min and max at any rank
 *            count, and every op beyond 8 ranks.
 * doc/kernels.md gives the table of kernels and why it is this one.
 */
constexpr int kSum = 0;
constexpr int kPremul = 1;
constexpr int kGeneric = 2;

/* Are leaves pre-multiplied (PreMulSum)? */
template <int K> __device__ __forceinline__ bool ndet_premul_on(const ndet_kernel_args &a)
{
	return K == kPremul || (K == kGeneric && a.premul != NDET_PREMUL_NONE);
}

template <int OP, typename Acc> __device__ __forceinline__ Acc ndet_apply(Acc a, Acc b)
{
	if (OP == NDET_OP_PROD)
		return ndet_mul(a, b);
	if (OP == NDET_OP_MIN)
		return ndet_min(a, b);
	if (OP == NDET_OP_MAX)
		return ndet_max(a, b);
	return ndet_add(a, b); /* SUM, AVG and PreMulSum */
}

/* A widened leaf, pre-multiplied for PreMulSum. */
template <int K, typename Acc>
__device__ __forceinline__ Acc ndet_scaled(const ndet_kernel_args &a, Acc v, Acc scale)
{
	return ndet_premul_on<K>(a) ? ndet_mul(v, scale) : v;
}

/* One leaf of the tree: rank r's element, widened, pre-multiplied for PreMulSum. */
template <int DT, int K>
__device__ __forceinline__ typename ndet_dtype<DT>::Acc
ndet_leaf(const ndet_kernel_args &a, typename ndet_dtype<DT>::T x,
	  typename ndet_dtype<DT>::Acc scale)
{
	return ndet_scaled<K>(a, ndet_dtype<DT>::widen(x), scale);
}

/*
 * The tree, bottom-up: pair neighbours at distance 1, 2, 4, ...  With n ranks this
 * is exactly the recursive "left subtree = largest power of two below m" tree of
 * ndet_reference.h.  Loops unroll fully, so v[] stays in registers.
 */
template <int OP, typename Acc, int NR>
__device__ __forceinline__ Acc ndet_tree_of(Acc (&v)[NDET_MAX_RANKS], int n)
{
#pragma unroll
	for (int s = 1; s < NR; s <<= 1) {
#pragma unroll
		for (int i = 0; i + s < NR; i += 2 * s) {
			if (i + s < n)
				v[i] = ndet_apply<OP>(v[i], v[i + s]);
		}
	}
	return v[0];
}

/* The tree of kernel class K: sums, or args.op's operator (kGeneric). */
template <int K, typename Acc, int NR>
__device__ __forceinline__ Acc ndet_tree(const ndet_kernel_args &a, Acc (&v)[NDET_MAX_RANKS], int n)
{
	if (K == kGeneric) {
		switch (a.op) {
		case NDET_OP_PROD:
			return ndet_tree_of<NDET_OP_PROD, Acc, NR>(v, n);
		case NDET_OP_MIN:
			return ndet_tree_of<NDET_OP_MIN, Acc, NR>(v, n);
		case NDET_OP_MAX:
			return ndet_tree_of<NDET_OP_MAX, Acc, NR>(v, n);
		default:
			break;
		}
	}
	return ndet_tree_of<NDET_OP_SUM, Acc, NR>(v, n);
}

/*
 * avg's division of a root by n, the rank count (n >= 1).  By a power of two 2^k it
 * is the product with 2^-k, which is exact: x * 2^-k and x / 2^k are then the one
 * correctly rounded value of the same real number, the same bits for every x,
 * subnormal results included (these kernels never flush to zero), infinity and
 * zero alike; NaN stays NaN.  A product is one instruction where an IEEE division
 * is tens.  Any other n divides.
 */
__host__ __device__ __forceinline__ bool ndet_power_of_two(uint32_t n)
{
	return n != 0 && (n & (n - 1)) == 0;
}
/* 2^-k for n = 2^k, built from its exponent (a normal number for every 32-bit n). */
__device__ __forceinline__ float ndet_power_of_two_inverse(float, uint32_t n)
{
	return __int_as_float((127 - (__ffs((int)n) - 1)) << 23);
}
__device__ __forceinline__ double ndet_power_of_two_inverse(double, uint32_t n)
{
	return __longlong_as_double((long long)(1023 - (__ffs((int)n) - 1)) << 52);
}
template <typename Acc> __device__ __forceinline__ Acc ndet_avg_of(Acc x, uint32_t n)
{
	return ndet_power_of_two(n) ? ndet_mul(x, ndet_power_of_two_inverse(x, n))
				    : ndet_div(x, (Acc)n);
}

/* The root before its one rounding: divided by n for avg. */
template <int K, typename Acc>
__device__ __forceinline__ Acc ndet_averaged(const ndet_kernel_args &a, Acc acc, int n)
{
	return K != kPremul && a.op == NDET_OP_AVG ? ndet_avg_of(acc, (uint32_t)n) : acc;
}

} /* namespace */

#endif /* NDET_DEVICE_TREE_CUH_ */
