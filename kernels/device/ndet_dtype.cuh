/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Element types: for each ndet_dtype_t the storage type T and the accumulation type
 * Acc, the exact widening and the one rounding back (ndet_dtype<DT>), and this rank's
 * PreMulSum scalar.
 */
#ifndef NDET_DEVICE_DTYPE_CUH_
#define NDET_DEVICE_DTYPE_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "kernels/ndet_abi.h"

namespace
{

template <int DT> struct ndet_dtype;
/* from_bits: an element from the low bits of a word (a PreMulSum scalar's bits). */
template <> struct ndet_dtype<NDET_DTYPE_F32> {
	typedef float T;
	typedef float Acc;
	static __device__ __forceinline__ Acc widen(T x)
	{
		return x;
	}
	static __device__ __forceinline__ T narrow(Acc x)
	{
		return x;
	}
	static __device__ __forceinline__ T from_bits(uint64_t b)
	{
		return __uint_as_float((unsigned)b);
	}
};
template <> struct ndet_dtype<NDET_DTYPE_F16> {
	typedef __half T;
	typedef float Acc;
	static __device__ __forceinline__ Acc widen(T x)
	{
		return __half2float(x);
	}
	static __device__ __forceinline__ T narrow(Acc x)
	{
		return __float2half_rn(x);
	}
	static __device__ __forceinline__ T from_bits(uint64_t b)
	{
		return __ushort_as_half((unsigned short)b);
	}
};
template <> struct ndet_dtype<NDET_DTYPE_BF16> {
	typedef __nv_bfloat16 T;
	typedef float Acc;
	static __device__ __forceinline__ Acc widen(T x)
	{
		return __bfloat162float(x);
	}
	static __device__ __forceinline__ T narrow(Acc x)
	{
		return __float2bfloat16_rn(x);
	}
	static __device__ __forceinline__ T from_bits(uint64_t b)
	{
		return __ushort_as_bfloat16((unsigned short)b);
	}
};
template <> struct ndet_dtype<NDET_DTYPE_F64> {
	typedef double T;
	typedef double Acc;
	static __device__ __forceinline__ Acc widen(T x)
	{
		return x;
	}
	static __device__ __forceinline__ T narrow(Acc x)
	{
		return x;
	}
	static __device__ __forceinline__ T from_bits(uint64_t b)
	{
		return __longlong_as_double((long long)b);
	}
};

/*
 * fp8 (OCP E4M3 and E5M2), stored as raw bytes.  Widening goes through half, which
 * holds every fp8 value exactly.  Narrowing rounds the f32 accumulator once, to
 * nearest even, saturating finite values (__NV_SATFINITE, what NCCL's fp8 conversions
 * use): a finite magnitude above the largest finite value gives the largest finite
 * value.  Infinity stays infinity in E5M2, so that a one-rank call, a copy, and every
 * other path agree: satfinite gives the largest finite value of its sign (0x7b,
 * 0xfb), and the next code up is that infinity, so one is added to the byte (an add
 * per element, where replacing the byte cost fp8 e5m2 two-shot 1-2 %).  E4M3 has no
 * infinity and saturates it.  NaN stays NaN.  src/reference/ndet_reference.h states
 * the same rule on the bits.
 */
template <__nv_fp8_interpretation_t KIND> struct ndet_fp8_dtype {
	typedef unsigned char T;
	typedef float Acc;
	static __device__ __forceinline__ Acc widen(T x)
	{
		return __half2float(__half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)x, KIND)));
	}
	static __device__ __forceinline__ T narrow(Acc x)
	{
		const T r = (T)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, KIND);
		return KIND == __NV_E5M2 ? (T)(r + (isinf(x) ? 1 : 0)) : r;
	}
	static __device__ __forceinline__ T from_bits(uint64_t b)
	{
		return (T)b;
	}
	/*
	 * Two neighbouring elements at once (low byte first), one conversion
	 * instruction for both where widen/narrow take one each: the same values.
	 */
	static constexpr bool kPairs = true;
	static __device__ __forceinline__ float2 widen2(unsigned short x)
	{
		return __half22float2(
			__half2(__nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)x, KIND)));
	}
	static __device__ __forceinline__ unsigned short narrow2(float lo, float hi)
	{
		unsigned short r = (unsigned short)__nv_cvt_float2_to_fp8x2(make_float2(lo, hi),
									    __NV_SATFINITE, KIND);
		if (KIND == __NV_E5M2)
			r = (unsigned short)(r + (isinf(lo) ? 0x001u : 0u) +
					     (isinf(hi) ? 0x100u : 0u));
		return r;
	}
};
template <> struct ndet_dtype<NDET_DTYPE_F8E4M3> : ndet_fp8_dtype<__NV_E4M3> {
};
template <> struct ndet_dtype<NDET_DTYPE_F8E5M2> : ndet_fp8_dtype<__NV_E5M2> {
};

/* Does the dtype convert element pairs at once (widen2, narrow2)? */
template <typename D, typename = void> struct ndet_has_pairs {
	static constexpr bool value = false;
};
template <typename D> struct ndet_has_pairs<D, decltype((void)D::kPairs)> {
	static constexpr bool value = D::kPairs;
};

/* Accumulation values through a 64-bit flag word (PreMulSum scalars, ndet_flags). */
__device__ __forceinline__ uint64_t ndet_acc_bits(float x)
{
	return __float_as_uint(x);
}
__device__ __forceinline__ uint64_t ndet_acc_bits(double x)
{
	return (uint64_t)__double_as_longlong(x);
}
__device__ __forceinline__ void ndet_acc_from_bits(uint64_t b, float *x)
{
	*x = __uint_as_float((unsigned)b);
}
__device__ __forceinline__ void ndet_acc_from_bits(uint64_t b, double *x)
{
	*x = __longlong_as_double((long long)b);
}

/*
 * This rank's PreMulSum scalar, widened (exactly) to the accumulation type: the
 * bits captured at op creation, or one element of device memory read now, so a
 * CUDA-graph replay sees the value the scalar has when it runs (NCCL's semantics).
 */
template <int DT>
__device__ __forceinline__ typename ndet_dtype<DT>::Acc
ndet_premul_scalar(const ndet_kernel_args &a)
{
	typedef ndet_dtype<DT> D;
	uint64_t bits = a.scalar_bits;
	if (a.premul == NDET_PREMUL_DEVICE) {
		if (sizeof(typename D::T) == 8)
			bits = *static_cast<const unsigned long long *>(a.scalar);
		else if (sizeof(typename D::T) == 4)
			bits = *static_cast<const unsigned *>(a.scalar);
		else if (sizeof(typename D::T) == 2)
			bits = *static_cast<const unsigned short *>(a.scalar);
		else
			bits = *static_cast<const unsigned char *>(a.scalar);
	}
	return D::widen(D::from_bits(bits));
}

} /* namespace */

#endif /* NDET_DEVICE_DTYPE_CUH_ */
