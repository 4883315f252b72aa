/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The deterministic all-reduce, reduce and reduce-scatter kernels (plain ops and
 * PreMulSum), as templates.  Each ndet_kernels_<dtype>.cu instantiates them for one
 * element type (NDET_KERNEL_TABLES), so the kernels build in parallel; the launchers
 * are in ndet_kernels.cu.  See ndet_kernels.h for the flag protocol and
 * src/ndet_reference.h for the contract these kernels meet bit for bit.
 *
 * Numerics: every tree node uses an explicitly rounded intrinsic (__fadd_rn,
 * __fmul_rn, __dadd_rn, __dmul_rn, __fdiv_rn, __ddiv_rn), which the compiler may not
 * contract into FMAs or reassociate; the files are also built with --fmad=false and
 * without fast-math, so subnormals survive.
 */
#ifndef NDET_KERNELS_IMPL_CUH_
#define NDET_KERNELS_IMPL_CUH_

#include "ndet_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

constexpr uint64_t kStepMask = (1ull << (64 - NDET_FLAG_SIGNATURE_BITS)) - 1;

/* Thread 32 reads the host abort flag at kernel start (ndet_allreduce_block). */
static_assert(NDET_KERNEL_THREADS > 32, "the kernel needs a second warp");

__device__ __forceinline__ uint64_t ndet_flag_pack(uint64_t step, uint32_t signature)
{
	return (step << NDET_FLAG_SIGNATURE_BITS) | (signature & NDET_FLAG_SIGNATURE_MASK);
}

__device__ __forceinline__ uint64_t ndet_globaltimer()
{
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/*
 * Memory ordering.  A writer publishes with a system-scope release store into the
 * peer's memory; the peer polls its own memory with system-scope acquire loads.
 * System scope because the peer is another GPU (NVLink/PCIe) or another process.
 * Release after __syncthreads() is cumulative over the block's earlier writes, and
 * acquire before __syncthreads() makes the peer's data visible to the whole block.
 */
__device__ __forceinline__ uint64_t ndet_load_acquire(const uint64_t *p)
{
	uint64_t v;
	asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}

__device__ __forceinline__ void ndet_store_release(uint64_t *p, uint64_t v)
{
	asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/* The abort word needs no ordering with data: whoever sees it leaves. */
__device__ __forceinline__ uint64_t ndet_load_relaxed(const uint64_t *p)
{
	uint64_t v;
	asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}

__device__ __forceinline__ void ndet_store_relaxed(uint64_t *p, uint64_t v)
{
	asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/*
 * The error word of the host-mapped status: a release store, so that a host thread
 * that reads the word with acquire also sees the details written before it.
 */
__device__ __forceinline__ void ndet_store_release_u32(volatile uint32_t *p, uint32_t v)
{
	asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

/* ---- element types: storage type T, accumulation type Acc ---- */

template <int DT> struct ndet_dtype;
/* from_bits: an element from the low bits of a word (a PreMulSum scalar's bits). */
template <> struct ndet_dtype<NDET_DTYPE_F32> {
	typedef float T;
	typedef float Acc;
	static __device__ __forceinline__ Acc widen(T x) { return x; }
	static __device__ __forceinline__ T narrow(Acc x) { return x; }
	static __device__ __forceinline__ T from_bits(uint64_t b)
	{
		return __uint_as_float((unsigned)b);
	}
};
template <> struct ndet_dtype<NDET_DTYPE_F16> {
	typedef __half T;
	typedef float Acc;
	static __device__ __forceinline__ Acc widen(T x) { return __half2float(x); }
	static __device__ __forceinline__ T narrow(Acc x) { return __float2half_rn(x); }
	static __device__ __forceinline__ T from_bits(uint64_t b)
	{
		return __ushort_as_half((unsigned short)b);
	}
};
template <> struct ndet_dtype<NDET_DTYPE_BF16> {
	typedef __nv_bfloat16 T;
	typedef float Acc;
	static __device__ __forceinline__ Acc widen(T x) { return __bfloat162float(x); }
	static __device__ __forceinline__ T narrow(Acc x) { return __float2bfloat16_rn(x); }
	static __device__ __forceinline__ T from_bits(uint64_t b)
	{
		return __ushort_as_bfloat16((unsigned short)b);
	}
};
template <> struct ndet_dtype<NDET_DTYPE_F64> {
	typedef double T;
	typedef double Acc;
	static __device__ __forceinline__ Acc widen(T x) { return x; }
	static __device__ __forceinline__ T narrow(Acc x) { return x; }
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
 * value.  Infinity stays infinity in E5M2 (satfinite would saturate it too), so that
 * a one-rank call, a copy, and every other path agree; E4M3 has no infinity and
 * saturates it.  NaN stays NaN.  src/ndet_reference.h states the same rule on the bits.
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
		if (KIND == __NV_E5M2 && isinf(x))
			return (T)(signbit(x) ? 0xfcu : 0x7cu);
		return (T)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, KIND);
	}
	static __device__ __forceinline__ T from_bits(uint64_t b) { return (T)b; }
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
		if (KIND == __NV_E5M2) {
			if (isinf(lo))
				r = (unsigned short)((r & 0xff00u) | (signbit(lo) ? 0xfcu : 0x7cu));
			if (isinf(hi))
				r = (unsigned short)((r & 0x00ffu) |
						     ((signbit(hi) ? 0xfcu : 0x7cu) << 8));
		}
		return r;
	}
};
template <> struct ndet_dtype<NDET_DTYPE_F8E4M3> : ndet_fp8_dtype<__NV_E4M3> {};
template <> struct ndet_dtype<NDET_DTYPE_F8E5M2> : ndet_fp8_dtype<__NV_E5M2> {};

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

/* ---- tree-node operators ---- */

__device__ __forceinline__ float ndet_add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double ndet_add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float ndet_mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double ndet_mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float ndet_div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double ndet_div(double a, double b) { return __ddiv_rn(a, b); }

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
__device__ __forceinline__ Acc ndet_tree(const ndet_kernel_args &a, Acc (&v)[NDET_MAX_RANKS],
					 int n)
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

/* The root before its one rounding: divided by n for avg. */
template <int K, typename Acc>
__device__ __forceinline__ Acc ndet_averaged(const ndet_kernel_args &a, Acc acc, int n)
{
	return K != kPremul && a.op == NDET_OP_AVG ? ndet_div(acc, (Acc)n) : acc;
}

template <int DT, int K>
__device__ __forceinline__ typename ndet_dtype<DT>::T
ndet_finish(const ndet_kernel_args &a, typename ndet_dtype<DT>::Acc acc, int n)
{
	return ndet_dtype<DT>::narrow(ndet_averaged<K>(a, acc, n));
}

/*
 * Loads from the lanes (peers' and our own) bypass L1 (ld.global.cg): lanes are
 * rewritten by other SMs, other GPUs and other processes between steps, and L1 is not
 * coherent, so a line cached by an earlier step or by another rank's block on this SM
 * must never be served.  The acquire that precedes these loads orders them; .cg makes
 * sure they reach L2 (or the peer).  The data is read once, so L1 would not help.
 */
__device__ __forceinline__ uint4 ndet_load_lane(const uint4 *p)
{
	return __ldcg(p);
}
__device__ __forceinline__ float ndet_load_lane(const float *p)
{
	return __ldcg(p);
}
__device__ __forceinline__ double ndet_load_lane(const double *p)
{
	return __ldcg(p);
}
__device__ __forceinline__ __half ndet_load_lane(const __half *p)
{
	return __ushort_as_half(__ldcg(reinterpret_cast<const unsigned short *>(p)));
}
__device__ __forceinline__ __nv_bfloat16 ndet_load_lane(const __nv_bfloat16 *p)
{
	return __ushort_as_bfloat16(__ldcg(reinterpret_cast<const unsigned short *>(p)));
}
__device__ __forceinline__ unsigned char ndet_load_lane(const unsigned char *p)
{
	return __ldcg(p);
}

/* Store one element to an address that may not be aligned to its size. */
template <typename T> __device__ __forceinline__ void ndet_store_elem(char *dst, T value)
{
	if (((uintptr_t)dst & (sizeof(T) - 1)) == 0) {
		*reinterpret_cast<T *>(dst) = value;
	} else {
		const char *src = reinterpret_cast<const char *>(&value);
#pragma unroll
		for (int i = 0; i < (int)sizeof(T); i++)
			dst[i] = src[i];
	}
}

/*
 * Block-wide copy with the widest access both addresses allow.  With kFromLane the
 * source is a lane and every load bypasses L1 (see ndet_load_lane).
 */
template <bool kFromLane = false>
__device__ __forceinline__ uint4 ndet_copy_load(const uint4 *p)
{
	return kFromLane ? __ldcg(p) : *p;
}

template <bool kFromLane = false>
__device__ void ndet_copy_bytes(char *dst, const char *src, uint64_t bytes)
{
	const unsigned tid = threadIdx.x, nth = blockDim.x;
	uintptr_t mis = (uintptr_t)dst | (uintptr_t)src;
	uint64_t done = 0;
	if ((mis & 15) == 0) {
		/*
		 * Eight loads in flight per thread before any store: one block per SM must
		 * keep enough bytes in flight to cover memory (or NVLink) latency.  The
		 * last round is predicated rather than left to a loop of one load at a
		 * time: a copy that is not a multiple of 32 KiB (8 x 256 threads x 16
		 * bytes) would spend most of its tail waiting on single loads.
		 */
		constexpr int U = 8;
		const uint64_t n = bytes / 16;
		const uint4 *s = reinterpret_cast<const uint4 *>(src);
		uint4 *d = reinterpret_cast<uint4 *>(dst);
		for (uint64_t i = tid; i < n; i += U * nth) {
			uint4 v[U];
#pragma unroll
			for (int u = 0; u < U; u++)
				if (i + u * nth < n)
					v[u] = ndet_copy_load<kFromLane>(&s[i + u * nth]);
#pragma unroll
			for (int u = 0; u < U; u++)
				if (i + u * nth < n)
					d[i + u * nth] = v[u];
		}
		done = n * 16;
	} else if ((mis & 7) == 0) {
		uint64_t n = bytes / 8;
		for (uint64_t i = tid; i < n; i += nth) {
			const uint2 *p = reinterpret_cast<const uint2 *>(src) + i;
			reinterpret_cast<uint2 *>(dst)[i] = kFromLane ? __ldcg(p) : *p;
		}
		done = n * 8;
	} else if ((mis & 3) == 0) {
		uint64_t n = bytes / 4;
		for (uint64_t i = tid; i < n; i += nth) {
			const unsigned *p = reinterpret_cast<const unsigned *>(src) + i;
			reinterpret_cast<unsigned *>(dst)[i] = kFromLane ? __ldcg(p) : *p;
		}
		done = n * 4;
	} else if ((mis & 1) == 0) {
		uint64_t n = bytes / 2;
		for (uint64_t i = tid; i < n; i += nth) {
			const unsigned short *p = reinterpret_cast<const unsigned short *>(src) + i;
			reinterpret_cast<unsigned short *>(dst)[i] = kFromLane ? __ldcg(p) : *p;
		}
		done = n * 2;
	}
	for (uint64_t i = done + tid; i < bytes; i += nth) {
		const unsigned char *p = reinterpret_cast<const unsigned char *>(src) + i;
		dst[i] = (char)(kFromLane ? __ldcg(p) : *p);
	}
}

/*
 * Reduce `len` elements, rank r's at src[r] (r < n; 16-byte aligned: pool memory, or
 * this rank's own sendbuff where two-shot and push read their own segment from it);
 * write them to `out` (user memory, any alignment; NULL: not at all) and to copies[j]
 * for j < ncopies that are not NULL (16-byte aligned pool memory, own or a peer's).
 * `scales` (PreMulSum only) holds every rank's scalar.
 */
template <int DT, int K, int NR>
__device__ void ndet_reduce_core(const ndet_kernel_args &a, const char *const (&src)[NR],
				 uint64_t len, char *out, char *const (&copies)[NR], int ncopies,
				 const typename ndet_dtype<DT>::Acc *scales)
{
	typedef ndet_dtype<DT> D;
	typedef typename D::T T;
	typedef typename D::Acc Acc;
	constexpr int E = 16 / sizeof(T);
	const int n = a.nranks;
	const unsigned tid = threadIdx.x, nth = blockDim.x;
	const uint64_t packs = len / E;
	const bool to_out = out != nullptr;
	const bool out_aligned = ((uintptr_t)out & 15) == 0;
	Acc scale[NDET_MAX_RANKS];
#pragma unroll
	for (int r = 0; r < NR; r++)
		scale[r] = ndet_premul_on<K>(a) && r < n ? scales[r] : Acc(1);

	/*
	 * Packs per thread per iteration, so that U x n loads are in flight: what the
	 * registers of the rank bucket allow (NR = 2: 4 x 2, NR = 4 and 8: 2 x n).  A
	 * block's remote reads are latency-bound: 256 threads x 16 bytes x 4 in flight
	 * moved ~8 GB/s per block over NVLink (2x H200, --trace of 16 MiB); 8 x 2 for
	 * NR = 2 gained 0-7 % at 4-16 MiB and lost 4 % at 64 MiB push (doc/PERFORMANCE).
	 * fp8 too: one pack per thread (16 elements, twice bf16's conversions per
	 * pack) compiles in about half the time, but at 2 ranks moved 7.6-8.9 points
	 * of a copy less than these U (session 15, doc/PERFORMANCE).
	 */
	constexpr int U = NR <= 2 ? 4 : NR <= 8 ? 2 : 1;
	for (uint64_t base = tid; base < packs; base += (uint64_t)U * nth) {
		uint4 raw[U][NR];
		/* All loads first, so every peer's line is in flight at once. */
#pragma unroll
		for (int u = 0; u < U; u++) {
			const uint64_t p = base + (uint64_t)u * nth;
#pragma unroll
			for (int r = 0; r < NR; r++) {
				if (r < n && p < packs)
					raw[u][r] = ndet_load_lane(
						reinterpret_cast<const uint4 *>(src[r]) + p);
			}
		}
#pragma unroll
		for (int u = 0; u < U; u++) {
			const uint64_t p = base + (uint64_t)u * nth;
			if (p >= packs)
				break;
			union {
				uint4 v;
				T e[E];
				unsigned short pair[8];
			} result;
			if constexpr (ndet_has_pairs<D>::value) {
				/* Two trees side by side: the same operations per element. */
#pragma unroll
				for (int e = 0; e < E / 2; e++) {
					Acc lo[NDET_MAX_RANKS], hi[NDET_MAX_RANKS];
#pragma unroll
					for (int r = 0; r < NR; r++) {
						if (r < n) {
							const float2 x = D::widen2(
								reinterpret_cast<const unsigned short *>(
									&raw[u][r])[e]);
							lo[r] = ndet_scaled<K>(a, x.x, scale[r]);
							hi[r] = ndet_scaled<K>(a, x.y, scale[r]);
						}
					}
					result.pair[e] = D::narrow2(
						ndet_averaged<K>(a, ndet_tree<K, Acc, NR>(a, lo, n), n),
						ndet_averaged<K>(a, ndet_tree<K, Acc, NR>(a, hi, n), n));
				}
			} else {
#pragma unroll
				for (int e = 0; e < E; e++) {
					Acc v[NDET_MAX_RANKS];
#pragma unroll
					for (int r = 0; r < NR; r++) {
						if (r < n)
							v[r] = ndet_leaf<DT, K>(
								a,
								reinterpret_cast<const T *>(&raw[u][r])[e],
								scale[r]);
					}
					result.e[e] =
						ndet_finish<DT, K>(a, ndet_tree<K, Acc, NR>(a, v, n), n);
				}
			}
			if (!to_out) {
			} else if (out_aligned) {
				reinterpret_cast<uint4 *>(out)[p] = result.v;
			} else {
#pragma unroll
				for (int e = 0; e < E; e++)
					ndet_store_elem<T>(out + (p * E + e) * sizeof(T),
							   result.e[e]);
			}
#pragma unroll
			for (int j = 0; j < NR; j++) {
				if (j < ncopies && copies[j] != nullptr)
					reinterpret_cast<uint4 *>(copies[j])[p] = result.v;
			}
		}
	}
	for (uint64_t i = packs * E + tid; i < len; i += nth) {
		Acc v[NDET_MAX_RANKS];
#pragma unroll
		for (int r = 0; r < NR; r++) {
			if (r < n)
				v[r] = ndet_leaf<DT, K>(
					a, ndet_load_lane(reinterpret_cast<const T *>(src[r]) + i),
					scale[r]);
		}
		T value = ndet_finish<DT, K>(a, ndet_tree<K, Acc, NR>(a, v, n), n);
		if (to_out)
			ndet_store_elem<T>(out + i * sizeof(T), value);
#pragma unroll
		for (int j = 0; j < NR; j++) {
			if (j < ncopies && copies[j] != nullptr)
				reinterpret_cast<T *>(copies[j])[i] = value;
		}
	}
}

/*
 * Pull: reduce `len` elements at element offset `lane_off` of lane `lane_base` in
 * every rank's pool, to `out` only (one-shot and reduce-scatter).
 */
template <int DT, int K, int NR>
__device__ void ndet_reduce_range(const ndet_kernel_args &a, uint64_t lane_base, uint64_t lane_off,
				  uint64_t len, char *out,
				  const typename ndet_dtype<DT>::Acc *scales)
{
	const uint64_t byte_off = lane_base + lane_off * sizeof(typename ndet_dtype<DT>::T);
	const char *src[NR];
	char *copies[NR];
#pragma unroll
	for (int r = 0; r < NR; r++) {
		src[r] = r < a.nranks ? a.lanes[r] + byte_off : nullptr;
		copies[r] = nullptr;
	}
	ndet_reduce_core<DT, K, NR>(a, src, len, out, copies, 0, scales);
}

/* Debug knob: a pseudo-random pause, so ordering bugs show up in tests. */
__device__ void ndet_debug_delay(const ndet_kernel_args &a, uint64_t step, unsigned phase)
{
	if (a.debug_delay_ns == 0)
		return;
	if (threadIdx.x == 0) {
		uint64_t h = step * 0x9E3779B97F4A7C15ull ^ ((uint64_t)blockIdx.x << 32) ^
			     ((uint64_t)a.rank << 16) ^ phase;
		h ^= h >> 29;
		h *= 0xBF58476D1CE4E5B9ull;
		h ^= h >> 32;
		uint64_t pause = h % a.debug_delay_ns;
		uint64_t t0 = ndet_globaltimer();
		while (ndet_globaltimer() - t0 < pause) {
		}
	}
	__syncthreads();
}

/* Per thread: only threads that wait for a peer use t0. */
struct ndet_block_state {
	/*
	 * Start of the deadline: kernel start, then the end of this thread's last
	 * successful wait.  A call that keeps making progress never expires, however
	 * long it runs; a wait that sees no progress fails NCCL_DET_TIMEOUT after the
	 * previous one succeeded.
	 */
	uint64_t t0;
	struct ndet_flags *me; /* own flags */
	uint32_t waits;        /* ndet_wait_all calls so far (the same in every thread) */
	/*
	 * Threads 0..n-1: the opening flag of peer q (released, or done for push) as
	 * loaded (acquire) at kernel start, alongside the prologue's other loads, so a
	 * flag that is long set costs no extra memory latency at the opening wait.
	 */
	uint64_t opening;
	uint32_t traced;       /* ndet_trace events written by this thread */
};

/* nccl-det-perf --trace: one event of block 0 or the last block (ndet_kernels.h). */
__device__ __forceinline__ void ndet_trace(const ndet_kernel_args &a, ndet_block_state &st,
					   uint32_t code, uint64_t when = 0)
{
	if (a.trace == nullptr || threadIdx.x != 0)
		return;
	uint64_t *t;
	if (blockIdx.x == 0)
		t = a.trace;
	else if (blockIdx.x == a.blocks - 1)
		t = a.trace + NDET_TRACE_WORDS;
	else
		return;
	if (st.traced + 1 >= NDET_TRACE_WORDS)
		return;
	if (when == 0)
		when = ndet_globaltimer();
	t[1 + st.traced] = ((uint64_t)code << 56) | (when & ((1ull << 56) - 1));
	st.traced++;
	t[0] = st.traced;
}

/*
 * Record the first error of this engine (first claimer wins: `claim` takes its code,
 * ndet_types.h).  The details go into
 * the status before the error word, which is published last with release
 * semantics: the host reads the word with acquire (ndet_engine_error_details), so
 * whoever sees an error also sees where it happened, never half-written details.
 */
__device__ void ndet_record_error(const ndet_kernel_args &a, uint32_t code, uint32_t peer,
				  uint64_t step, uint64_t observed, uint32_t phase)
{
	struct ndet_host_status *h = a.host_status;
	if (atomicCAS((unsigned *)&h->claim, 0u, code) != 0u)
		return;
	h->block = blockIdx.x;
	h->peer = peer;
	h->step = step;
	h->observed = observed;
	h->phase = phase;
	h->rank = (uint32_t)a.rank;
	ndet_store_release_u32(&h->error, code);
}

/* Record the error and tell every peer to leave too. */
__device__ void ndet_fail(const ndet_kernel_args &a, uint32_t code, uint32_t peer, uint64_t step,
			  uint64_t observed, uint32_t phase)
{
	ndet_record_error(a, code, peer, step, observed, phase);
	for (int r = 0; r < a.nranks; r++)
		ndet_store_relaxed(&a.flags[r]->abort_word, 1ull + (uint64_t)a.rank);
}

/*
 * Wait until `flag` holds step `step` (with `at_least`, that step or a later one; and,
 * with `check`, signature `signature`).
 * Returns 0 or an ndet_kernel_error_t.  Polls the abort word every 64 spins and the
 * host abort flag and deadline every 1024 spins (host-mapped reads cross PCIe).  The
 * deadline is NCCL_DET_TIMEOUT after st.t0 (see ndet_block_state), taken from
 * %globaltimer on the device, never baked in by the host: a graph replays late.
 */
__device__ uint32_t ndet_wait(const ndet_kernel_args &a, ndet_block_state &st, const uint64_t *flag,
			      uint64_t step, bool check, uint64_t *observed, bool at_least = false,
			      const uint64_t *first = nullptr)
{
	for (uint64_t spins = 1;; spins++) {
		/* `first`: an acquire load of `flag` made earlier by this thread. */
		uint64_t v = spins == 1 && first != nullptr ? *first : ndet_load_acquire(flag);
		*observed = v;
		/* Steps ahead of `step` by less than 2^20 (at_least), or `step` exactly. */
		const uint64_t ahead = (((v >> NDET_FLAG_SIGNATURE_BITS) - step) & kStepMask);
		if (ahead == 0 || (at_least && ahead < (1u << 20))) {
			if (check && (uint32_t)(v & NDET_FLAG_SIGNATURE_MASK) != a.signature)
				return NDET_KERNEL_ERR_SIGNATURE;
			st.t0 = ndet_globaltimer(); /* progress: the deadline starts again */
			return NDET_KERNEL_OK;
		}
		if ((spins & 63) == 0) {
			if (ndet_load_relaxed(&st.me->abort_word) != 0)
				return NDET_KERNEL_ERR_PEER;
			if ((spins & 1023) == 0) {
				if (a.host_status->abort != 0)
					return NDET_KERNEL_ERR_ABORTED;
				if (a.timeout_ns != 0 && ndet_globaltimer() - st.t0 > a.timeout_ns)
					return NDET_KERNEL_ERR_TIMEOUT;
			}
		}
	}
}

/*
 * Threads 0..n-1 each wait for one peer's flag in `which` (self skipped); the block
 * then agrees on the outcome.  Returns 0 or the error this block saw.
 */
__device__ uint32_t ndet_wait_all(const ndet_kernel_args &a, ndet_block_state &st,
				  uint64_t (*which)[NDET_MAX_RANKS], uint64_t step, bool check,
				  uint32_t phase, bool at_least = false, bool opening = false)
{
	/*
	 * Two outcome words, used by alternate calls: a thread may still be reading the
	 * previous call's word when thread 0 clears this call's (no barrier in between),
	 * but never the word of the call before that (it passed this call's barrier).
	 */
	__shared__ uint32_t error_codes[2];
	uint32_t &error_code = error_codes[st.waits++ & 1];
	if (threadIdx.x == 0)
		error_code = 0;
	__syncthreads();
	const int q = threadIdx.x;
	if (q < a.nranks && q != a.rank) {
		uint64_t observed = 0;
		uint32_t code = ndet_wait(a, st, &which[blockIdx.x][q], step, check, &observed,
					  at_least, opening ? &st.opening : nullptr);
		if (code != NDET_KERNEL_OK) {
			atomicCAS(&error_code, 0u, code);
			/* Also for ERR_PEER: this rank's host must learn the call failed. */
			ndet_fail(a, code, (uint32_t)q, step, observed, phase);
		}
	}
	__syncthreads();
	return error_code;
}

/*
 * Threads 0..n-1 each publish `value` into one peer's `which` slot for this block:
 * a release store, or (release = false) a relaxed one for a flag that orders nothing.
 */
__device__ void ndet_signal_all(const ndet_kernel_args &a, size_t which_offset, uint64_t value,
				bool release = true)
{
	const int q = threadIdx.x;
	if (q < a.nranks && q != a.rank) {
		uint64_t(*slots)[NDET_MAX_RANKS] = reinterpret_cast<uint64_t(*)[NDET_MAX_RANKS]>(
			reinterpret_cast<char *>(a.flags[q]) + which_offset);
		if (release)
			ndet_store_release(&slots[blockIdx.x][a.rank], value);
		else
			ndet_store_relaxed(&slots[blockIdx.x][a.rank], value);
	}
}

/*
 * The same for two flags at once: one system-scope fence, then two strong stores
 * (each a release pattern with the fence: the PTX memory model's fence.acq_rel
 * followed by a strong write).
 */
__device__ void ndet_signal2_all(const ndet_kernel_args &a, size_t first_offset,
				 uint64_t first, size_t second_offset, uint64_t second)
{
	const int q = threadIdx.x;
	if (q < a.nranks && q != a.rank) {
		char *base = reinterpret_cast<char *>(a.flags[q]);
		uint64_t(*slots1)[NDET_MAX_RANKS] =
			reinterpret_cast<uint64_t(*)[NDET_MAX_RANKS]>(base + first_offset);
		uint64_t(*slots2)[NDET_MAX_RANKS] =
			reinterpret_cast<uint64_t(*)[NDET_MAX_RANKS]>(base + second_offset);
		asm volatile("fence.acq_rel.sys;" ::: "memory");
		ndet_store_relaxed(&slots1[blockIdx.x][a.rank], first);
		ndet_store_relaxed(&slots2[blockIdx.x][a.rank], second);
	}
}

/* End of a step or call: nothing of it is left in any pool (see ndet_kernels.h). */
__device__ __forceinline__ void ndet_signal_finished(const ndet_kernel_args &a, uint64_t step)
{
	ndet_signal2_all(a, offsetof(ndet_flags, released), ndet_flag_pack(step, 0),
			 offsetof(ndet_flags, done), ndet_flag_pack(step, 0));
}

/*
 * LL lines: 16 bytes {data0, tag, data1, tag} stored and loaded as one vector of
 * four words.  Only each 8-byte half is single-copy atomic, so each carries the tag;
 * volatile accesses are relaxed at system scope and skip L1 (ndet_kernels.h, LL).
 */
__device__ __forceinline__ void ndet_ll_store(char *p, uint64_t payload, uint32_t tag)
{
	asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p),
		     "r"((uint32_t)payload), "r"(tag), "r"((uint32_t)(payload >> 32)), "r"(tag)
		     : "memory");
}

__device__ __forceinline__ void ndet_ll_load(const char *p, uint32_t (&w)[4])
{
	asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
		     : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
		     : "l"(p)
		     : "memory");
}

/* The first `bytes` (at most 8) bytes at `src`, any alignment, zero-padded. */
__device__ __forceinline__ uint64_t ndet_ll_payload(const char *src, uint64_t bytes)
{
	if (bytes >= 8 && ((uintptr_t)src & 7) == 0)
		return *reinterpret_cast<const uint64_t *>(src);
	uint64_t v = 0;
	for (uint64_t i = 0; i < bytes && i < 8; i++)
		v |= (uint64_t)(unsigned char)src[i] << (8 * i);
	return v;
}

/*
 * This thread's lines of every peer (NDET_LL_LINES_PER_THREAD lines of n - 1 peers, those
 * inside the chunk) from its own LL slots of parity `parity`, into payload[l][r]: each
 * round issues one load per line still missing before it looks at any, so lines that
 * are there cost one memory latency in all, not one per line and peer.  A line is there
 * when both halves hold `tag`.  Polls like ndet_wait (abort word, host abort, deadline),
 * and also the ready flag of each peer still missing: a peer that reached this step with
 * another signature (another call, or a path that waits for our ready instead) fails
 * the call at once.  On failure *bad_peer is that peer (a timeout: the lowest peer still
 * missing) and *observed its ready.
 */
template <int NR>
__device__ uint32_t ndet_ll_gather(const ndet_kernel_args &a, ndet_block_state &st,
				   uint64_t parity, uint64_t chunk_bytes, uint32_t tag, uint64_t step,
				   uint64_t (&payload)[NDET_LL_LINES_PER_THREAD][NR], int *bad_peer,
				   uint64_t *observed)
{
	constexpr int L = NDET_LL_LINES_PER_THREAD;
	static_assert(L * NR <= 64, "one bit per line and peer");
	const int n = a.nranks, me = a.rank;
	const char *slots = a.lanes[me] + a.ll_offset;
	const uint64_t b = blockIdx.x;
	uint64_t pending = 0;
	uint32_t peers = 0; /* peers with a line still missing */
#pragma unroll
	for (int l = 0; l < L; l++) {
		if (((uint64_t)l * NDET_KERNEL_THREADS + threadIdx.x) * 8 >= chunk_bytes)
			break;
#pragma unroll
		for (int r = 0; r < NR; r++)
			if (r < n && r != me)
				pending |= 1ull << (l * NR + r);
	}
	for (uint64_t spins = 1; pending != 0; spins++) {
		uint32_t w[L][NR][4];
#pragma unroll
		for (int l = 0; l < L; l++) {
#pragma unroll
			for (int r = 0; r < NR; r++) {
				if ((pending >> (l * NR + r)) & 1) {
					const uint64_t line = (uint64_t)l * NDET_KERNEL_THREADS + threadIdx.x;
					ndet_ll_load(slots + ((b * n + r) * 2 + parity) * NDET_LL_SLOT_BYTES +
							     line * 16,
						     w[l][r]);
				}
			}
		}
		const uint64_t before = pending;
		peers = 0;
#pragma unroll
		for (int l = 0; l < L; l++) {
#pragma unroll
			for (int r = 0; r < NR; r++) {
				const uint64_t bit = 1ull << (l * NR + r);
				if (!(pending & bit))
					continue;
				if (w[l][r][1] == tag && w[l][r][3] == tag) {
					payload[l][r] = (uint64_t)w[l][r][0] | ((uint64_t)w[l][r][2] << 32);
					pending &= ~bit;
				} else {
					peers |= 1u << r;
				}
			}
		}
		if (pending != before && spins > 1)
			st.t0 = ndet_globaltimer(); /* progress: the deadline starts again */
		if (pending == 0 || (spins & 63) != 0)
			continue;
		const int first = __ffs(peers) - 1;
		if (ndet_load_relaxed(&st.me->abort_word) != 0) {
			*bad_peer = first;
			return NDET_KERNEL_ERR_PEER;
		}
#pragma unroll
		for (int r = 0; r < NR; r++) {
			if (!((peers >> r) & 1))
				continue;
			/* Also what a timeout reports: the step the peer last announced. */
			const uint64_t ready = ndet_load_relaxed(&st.me->ready[b][r]);
			if (r == first)
				*observed = ready;
			if (((ready >> NDET_FLAG_SIGNATURE_BITS) & kStepMask) == (step & kStepMask) &&
			    (uint32_t)(ready & NDET_FLAG_SIGNATURE_MASK) != a.signature) {
				*bad_peer = r;
				*observed = ready;
				return NDET_KERNEL_ERR_SIGNATURE;
			}
		}
		if ((spins & 1023) == 0) {
			*bad_peer = first;
			if (a.host_status->abort != 0)
				return NDET_KERNEL_ERR_ABORTED;
			if (a.timeout_ns != 0 && ndet_globaltimer() - st.t0 > a.timeout_ns)
				return NDET_KERNEL_ERR_TIMEOUT;
		}
	}
	return NDET_KERNEL_OK;
}

/*
 * The LL step's reduction: this thread's lines of every rank (its own in `mine`, the
 * peers' gathered into `payload`), element by element in tree order, into recvbuff.
 * AVG: args.op is avg (the root divided by n before its rounding).
 */
template <int DT, int K, int NR, bool AVG>
__device__ __forceinline__ void
ndet_ll_reduce(const ndet_kernel_args &a, const uint64_t (&mine)[NDET_LL_LINES_PER_THREAD],
	       const uint64_t (&payload)[NDET_LL_LINES_PER_THREAD][NR], uint64_t start,
	       uint64_t chunk_bytes)
{
	typedef ndet_dtype<DT> D;
	typedef typename D::T T;
	typedef typename D::Acc Acc;
	constexpr int E8 = 8 / sizeof(T);
	const int n = a.nranks, me = a.rank;
#pragma unroll
	for (int l = 0; l < NDET_LL_LINES_PER_THREAD; l++) {
		const uint64_t line = (uint64_t)l * NDET_KERNEL_THREADS + threadIdx.x;
		const uint64_t off = line * 8;
		if (off >= chunk_bytes)
			break;
		const uint64_t valid = min((uint64_t)E8, (chunk_bytes - off) / sizeof(T));
#pragma unroll
		for (int e = 0; e < E8; e++) {
			if ((uint64_t)e >= valid)
				break;
			Acc v[NDET_MAX_RANKS];
#pragma unroll
			for (int r = 0; r < NR; r++) {
				if (r < n) {
					union {
						uint64_t u;
						T x[E8];
					} in;
					in.u = r == me ? mine[l] : payload[l][r];
					v[r] = D::widen(in.x[e]);
				}
			}
			Acc acc = ndet_tree<K, Acc, NR>(a, v, n);
			if (AVG)
				acc = ndet_div(acc, (Acc)n);
			ndet_store_elem<T>(static_cast<char *>(a.recvbuff) +
						   (start + line * E8 + e) * sizeof(T),
					   D::narrow(acc));
		}
	}
}

/*
 * One LL step of block b (ndet_kernels.h): step `step` of the block's flags, LL step
 * `t` of its slots.  Thread i carries lines i, i + threads, ... of the block's chunk.
 */
template <int DT, int K, int NR>
__device__ void ndet_ll_block(const ndet_kernel_args &a, ndet_block_state &st, uint64_t step,
			      uint64_t t, uint32_t host_abort)
{
	typedef typename ndet_dtype<DT>::T T;
	constexpr int L = NDET_LL_LINES_PER_THREAD;
	__shared__ uint32_t host_aborted;
	__shared__ uint32_t error_code;
	const uint32_t b = blockIdx.x;
	const int n = a.nranks, me = a.rank;
	/*
	 * The call's signature and the LL step: a peer in another call never matches
	 * (it fails through its ready flag instead of lending us its lines), and t, t - 2
	 * and 0 (never written) differ.  The signature is never 0 and has 24 bits.
	 */
	const uint32_t tag = (a.signature << 8) | (uint32_t)(t % 255u + 1u);
	const uint64_t parity = t & 1;
	const uint64_t start = (uint64_t)b * a.chunk_elems; /* one step: k = 0 */
	const uint64_t len = start < a.count ? min(a.chunk_elems, a.count - start) : 0;
	const uint64_t chunk_bytes = len * sizeof(T);
	const char *send = static_cast<const char *>(a.sendbuff) + start * sizeof(T);
	const bool writes = a.root < 0 || a.root == me;

	/* This thread's payloads, loaded while the done flags are checked. */
	uint64_t mine[L];
#pragma unroll
	for (int l = 0; l < L; l++) {
		const uint64_t off = ((uint64_t)l * NDET_KERNEL_THREADS + threadIdx.x) * 8;
		mine[l] = off < chunk_bytes ? ndet_ll_payload(send + off, chunk_bytes - off) : 0;
	}
	if (threadIdx.x == 0)
		error_code = 0;
	if (threadIdx.x == 32)
		host_aborted = host_abort;
	/*
	 * 1. Peers are through with my slots and flags of the previous step: only then
	 * may ready be overwritten (a peer may still wait for the previous value).
	 * Usually long true: one local load.
	 */
	if (ndet_wait_all(a, st, st.me->released, step - 1, false, 1, false, true) != 0)
		return;
	/* The deadline of the LL waits starts now, for the threads that did not wait. */
	st.t0 = ndet_globaltimer();
	ndet_trace(a, st, NDET_TRACE_OPENED, st.t0);
	if (host_aborted != 0) {
		if (threadIdx.x == 0)
			ndet_fail(a, NDET_KERNEL_ERR_ABORTED, (uint32_t)me, step, 0, 0);
		return;
	}

	/* 2. Every line of the slot, to every peer (lines past the chunk: zeros). */
	ndet_debug_delay(a, step, 2);
	for (int j = 1; j < n; j++) {
		const int q = (me + j) % n;
		char *slot = a.lanes[q] + a.ll_offset +
			     (((uint64_t)b * n + me) * 2 + parity) * NDET_LL_SLOT_BYTES;
#pragma unroll
		for (int l = 0; l < L; l++)
			ndet_ll_store(slot + ((uint64_t)l * NDET_KERNEL_THREADS + threadIdx.x) * 16,
				      mine[l], tag);
	}
	/*
	 * The signature, for peers that poll it (ndet_ll_gather) or wait for it (another
	 * path): a relaxed store, no release.  Nothing is read because of it: a peer in
	 * this LL step takes the lines by their tags, and any other peer finds another
	 * signature (the path is part of it) and fails.  A release here would hold the
	 * block until every line above reached the peer (a system-scope round trip,
	 * 1.5 us of a 4.7 us call on 2x H200); the closing fence still orders them.
	 */
	ndet_signal_all(a, offsetof(ndet_flags, ready), ndet_flag_pack(step, a.signature), false);
	ndet_trace(a, st, NDET_TRACE_SCATTERED);

	/* 3. Every peer's lines, then the tree, element by element. */
	ndet_debug_delay(a, step, 3);
	uint64_t payload[L][NR];
	int bad_peer = 0;
	uint64_t observed = 0;
	const uint32_t code =
		ndet_ll_gather<NR>(a, st, parity, chunk_bytes, tag, step, payload, &bad_peer, &observed);
	if (code == NDET_KERNEL_OK && writes) {
		/*
		 * avg's division as a branch around the whole loop, not one per element:
		 * the sum kernels then carry no division in their unrolled loop.
		 */
		if (a.op == NDET_OP_AVG)
			ndet_ll_reduce<DT, K, NR, true>(a, mine, payload, start, chunk_bytes);
		else
			ndet_ll_reduce<DT, K, NR, false>(a, mine, payload, start, chunk_bytes);
	}
	if (code != NDET_KERNEL_OK) {
		atomicCAS(&error_code, 0u, code);
		ndet_fail(a, code, (uint32_t)bad_peer, step, observed, 2);
	}
	__syncthreads();
	if (error_code != 0)
		return;
	ndet_trace(a, st, NDET_TRACE_REDUCED);

	/* 4. This rank read every line it needed of this step. */
	ndet_signal_finished(a, step);
	if (threadIdx.x == 0) {
		a.step_counters[b] = step;
		a.step_counters[NDET_KERNEL_MAX_BLOCKS + b] = t;
	}
	ndet_trace(a, st, NDET_TRACE_END);
}

/*
 * Push two-shot (NDET_PATH_PUSH, ndet_kernels.h): steps first_step + 1 ... of block b,
 * software-pipelined so that the scatter of step s + 1 overlaps the wait for step s's
 * reduced segments, and the gather of step s the wait for the peers' ready of s + 1.
 */
template <int DT, int K, int NR>
__device__ void ndet_push_block(const ndet_kernel_args &a, ndet_block_state &st,
				uint64_t first_step, uint32_t host_abort)
{
	typedef typename ndet_dtype<DT>::T T;
	__shared__ uint32_t host_aborted;
	const uint64_t b = blockIdx.x;
	const int n = a.nranks, me = a.rank;
	const uint64_t slot_bytes = a.chunk_elems / (uint64_t)n * sizeof(T);
	const uint64_t lane_base = b * a.lane_bytes;
	const uint64_t half = a.lane_bytes / 2;
	const char *send = static_cast<const char *>(a.sendbuff);
	char *recv = static_cast<char *>(a.recvbuff);
	/*
	 * My own segment is read by me alone: from sendbuff itself where that is
	 * 16-byte aligned (segments start at whole packs), so it skips my in-slot.
	 * A local choice: no peer sees it, and the bits are the same either way.
	 */
	const bool own_direct = ((uintptr_t)send & 15) == 0;
	/* Steps with elements for this block (the planner gives every block one). */
	const uint64_t chunks = (a.count + a.chunk_elems - 1) / a.chunk_elems;
	if (chunks <= b)
		return;
	const uint64_t steps = min(a.steps, (chunks - b + a.blocks - 1) / a.blocks);

	/* Segment q of step k: elements [*begin, *end) of the chunk; returns its start. */
	auto segment = [&](uint64_t k, int q, uint64_t *begin, uint64_t *end) -> uint64_t {
		const uint64_t start = (k * a.blocks + b) * a.chunk_elems;
		const uint64_t len = min(a.chunk_elems, a.count - start);
		const uint64_t seg = ndet_segment_elems(len, (uint32_t)n, sizeof(T));
		*begin = min(len, (uint64_t)q * seg);
		*end = min(len, *begin + seg);
		return start;
	};
	/* Rank r's region of parity p: in-slots [0, n), out-slots [n, 2n). */
	auto region = [&](int r, uint64_t p) -> char * {
		return a.lanes[r] + lane_base + p * half;
	};
	/* Step k's chunk: segment q of it into rank q's in-slot `me`, then ready. */
	auto scatter = [&](uint64_t k) {
		const uint64_t s = first_step + 1 + k;
		ndet_debug_delay(a, s, 1);
		for (int j = 1; j <= n; j++) {
			const int q = (me + j) % n; /* own segment last: it is local */
			uint64_t qb, qe;
			const uint64_t start = segment(k, q, &qb, &qe);
			if (qe > qb && !(q == me && own_direct))
				ndet_copy_bytes(region(q, s & 1) + (uint64_t)me * slot_bytes,
						send + (start + qb) * sizeof(T), (qe - qb) * sizeof(T));
			ndet_trace(a, st, NDET_TRACE_COPIED);
		}
		__syncthreads();
		ndet_trace(a, st, NDET_TRACE_SYNCED);
		ndet_signal_all(a, offsetof(ndet_flags, ready), ndet_flag_pack(s, a.signature));
		ndet_trace(a, st, NDET_TRACE_SCATTERED);
	};

	/*
	 * Before the first remote store: every peer finished every access to the pools of
	 * the steps before (pull, LL or push: each ends a call with done; never later
	 * than first_step, so exactly that, as the other paths wait).
	 */
	if (ndet_wait_all(a, st, st.me->done, first_step, false, 1, false, true) != 0)
		return;
	ndet_trace(a, st, NDET_TRACE_OPENED);
	if (threadIdx.x == 32)
		host_aborted = host_abort;
	__syncthreads();
	if (host_aborted != 0) {
		if (threadIdx.x == 0)
			ndet_fail(a, NDET_KERNEL_ERR_ABORTED, (uint32_t)me, first_step + 1, 0, 0);
		return;
	}
	scatter(0);
	for (uint64_t k = 0; k < steps; k++) {
		const uint64_t s = first_step + 1 + k;
		const uint64_t p = s & 1;
		/* Every peer's segment `me` of step s is in my in-slots (a peer may be one
		 * step ahead already: its ready of s + 1 implies that of s). */
		ndet_debug_delay(a, s, 2);
		if (ndet_wait_all(a, st, st.me->ready, s, true, 2, true) != 0)
			return;
		ndet_trace(a, st, NDET_TRACE_READY);
		/* Reduce segment `me` into recvbuff and every peer's out-slot `me`. */
		uint64_t mb, me_end;
		const uint64_t start = segment(k, me, &mb, &me_end);
		const char *src[NR];
		char *copies[NR];
#pragma unroll
		for (int r = 0; r < NR; r++) {
			src[r] = r >= n ? nullptr
			       : r == me && own_direct ? send + (start + mb) * sizeof(T)
						       : region(me, p) + (uint64_t)r * slot_bytes;
			/* Constant indices keep the pointers in registers. */
			copies[r] = r + 1 < n ? region((me + r + 1) % n, p) +
							(uint64_t)(n + me) * slot_bytes
					      : nullptr;
		}
		ndet_reduce_core<DT, K, NR>(a, src, me_end - mb, recv + (start + mb) * sizeof(T),
					     copies, n - 1, nullptr);
		ndet_trace(a, st, NDET_TRACE_COPIED);
		__syncthreads();
		ndet_trace(a, st, NDET_TRACE_SYNCED);
		ndet_signal_all(a, offsetof(ndet_flags, reduced), ndet_flag_pack(s, a.signature));
		ndet_trace(a, st, NDET_TRACE_REDUCED);
		/*
		 * Step s + 1 goes out while the reduced flags of s travel.  Its in-slots
		 * (parity of s - 1) are free: every peer signalled reduced for s - 1, so it
		 * read them (waited below one step ago, or the done wait above).
		 */
		if (k + 1 < steps)
			scatter(k + 1);
		ndet_debug_delay(a, s, 3);
		if (ndet_wait_all(a, st, st.me->reduced, s, true, 3, true) != 0)
			return;
		ndet_trace(a, st, NDET_TRACE_PEERS_DONE);
		/* The peers' reduced segments of step s, from my out-slots to recvbuff. */
		for (int j = 1; j < n; j++) {
			const int q = (me + j) % n;
			uint64_t qb, qe;
			segment(k, q, &qb, &qe);
			if (qe > qb)
				ndet_copy_bytes<true>(recv + (start + qb) * sizeof(T),
						      region(me, p) + (uint64_t)(n + q) * slot_bytes,
						      (qe - qb) * sizeof(T));
		}
		ndet_trace(a, st, NDET_TRACE_GATHERED);
	}
	/* Every access of this call to any pool is complete. */
	__syncthreads();
	const uint64_t last = first_step + steps;
	ndet_signal_finished(a, last);
	if (threadIdx.x == 0)
		a.step_counters[b] = last;
	ndet_trace(a, st, NDET_TRACE_END);
}

/* Where a block's call starts: what every path takes from the prologue. */
struct ndet_block_start {
	uint64_t first_step; /* the block's step counter before this call */
	uint64_t first_ll;   /* its LL step counter */
	uint32_t host_abort; /* thread 32 of block 0: the host abort flag as read */
};

/*
 * The prologue of every kernel: the block's state, its counters, the poisoned-engine
 * check and the host abort flag.  False: the block must leave at once.
 */
__device__ bool ndet_block_open(const ndet_kernel_args &a, ndet_block_state &st,
				ndet_block_start &start)
{
	__shared__ uint64_t first_step, first_ll;
	__shared__ int poisoned;
	st.t0 = ndet_globaltimer();
	st.me = a.flags[a.rank];
	st.waits = 0;
	st.traced = 0;
	st.opening = 0;
	ndet_trace(a, st, NDET_TRACE_START, st.t0);
	const uint32_t b = blockIdx.x;

	/*
	 * The opening wait's first look (threads 0..n-1, peer q = thread q), issued with
	 * the prologue's other loads so that one memory latency covers them all: thread 0
	 * issues it after its plain and relaxed loads (an acquire would hold later ones
	 * back) and before it uses any of them.  Only this rank's own flags are read,
	 * which a poisoned engine may still do.
	 */
	const bool opens = threadIdx.x < (unsigned)a.nranks && threadIdx.x != (unsigned)a.rank;
	const uint64_t *opening_flag =
		!opens ? nullptr
		       : a.path == NDET_PATH_PUSH ? &st.me->done[b][threadIdx.x]
						  : &st.me->released[b][threadIdx.x];
	if (threadIdx.x == 0) {
		const uint64_t counter = a.step_counters[b];
		const uint64_t ll_counter = a.step_counters[NDET_KERNEL_MAX_BLOCKS + b];
		/*
		 * Before any flag or lane of a peer is touched: a poisoned engine fails
		 * fast (later calls touch nothing).  Every failure a kernel records also
		 * sets its own abort word (ndet_fail), so that local word says "poisoned";
		 * a peer may have set it before this kernel ever waited: record that
		 * here, or this rank's host would never learn that the call failed.
		 */
		const uint64_t abort_word = ndet_load_relaxed(&st.me->abort_word);
		if (opens)
			st.opening = ndet_load_acquire(opening_flag);
		first_step = counter;
		first_ll = ll_counter;
		poisoned = abort_word != 0;
		if (poisoned)
			ndet_record_error(a, NDET_KERNEL_ERR_PEER, (uint32_t)(abort_word - 1),
					  first_step + 1, 0, 0);
	} else if (opens) {
		st.opening = ndet_load_acquire(opening_flag);
	}
	/*
	 * The host's abort flag (a call enqueued before ncclCommAbort/Revoke that starts
	 * after it) lives in host memory, and the GPU serves such reads one after the
	 * other: with every block reading it here, block k's first flag wait came about
	 * k microseconds late (2x H200, --trace: 2 MiB in 41 us with 16 blocks reading,
	 * 25 us with block 0 alone).  So block 0 reads it, in another warp, and consumes
	 * it only after its first copy-in, which touches only this rank's own lane; an
	 * aborted call then fails there, and block 0 leaves before it publishes anything.
	 * Its peers' block 0 never gets its ready: they, and every other block of every
	 * rank that still waits, see the abort words ndet_fail sets and fail too; blocks
	 * that finished their share have only moved data.  The call fails on every rank.
	 * Long waits also poll the flag (ndet_wait), in every block.
	 */
	uint32_t host_abort = 0;
	if (threadIdx.x == 32 && b == 0)
		host_abort = a.host_status->abort;
	__syncthreads();
	start.first_step = first_step;
	start.first_ll = first_ll;
	start.host_abort = host_abort;
	return !poisoned;
}

/*
 * Pull (one-shot, two-shot, reduce-scatter; reduce through either): steps
 * first_step + 1 ... of block b, each behind the released wait of the step before.
 */
template <int DT, int K, int NR>
__device__ void ndet_pull_block(const ndet_kernel_args &a, ndet_block_state &st,
				uint64_t first_step, uint32_t host_abort)
{
	typedef ndet_dtype<DT> D;
	typedef typename D::T T;
	typedef typename D::Acc Acc;
	__shared__ uint32_t host_aborted;
	__shared__ Acc scales[NDET_MAX_RANKS]; /* PreMulSum: every rank's scalar, this step */
	const uint32_t b = blockIdx.x;
	const uint64_t lane_base = (uint64_t)b * a.lane_bytes;
	char *own_lane = a.lanes[a.rank] + lane_base;
	const char *send = static_cast<const char *>(a.sendbuff);
	char *recv = static_cast<char *>(a.recvbuff);
	/* ncclReduce: only the root has a recvbuff (the others' may be anything). */
	const bool writes = a.root < 0 || a.root == a.rank;
	/* Reduce-scatter: a lane holds one segment per destination rank. */
	const bool scatter = a.path == NDET_PATH_SCATTER;
	const int segments = scatter ? a.nranks : 1;
	/*
	 * Two-shot: only this rank reads segment `rank` of its own lane, so where
	 * sendbuff is 16-byte aligned (segments start at whole packs) it reads that
	 * segment from sendbuff and the copy-in skips it.  Local, and the same bits.
	 */
	const bool own_direct = a.path == NDET_PATH_TWOSHOT && ((uintptr_t)send & 15) == 0;
	uint64_t step = first_step;

	for (uint64_t k = 0; k < a.steps; k++) {
		const uint64_t start = (k * a.blocks + b) * a.chunk_elems;
		if (start >= a.count)
			break; /* later steps only get further: the same on every rank */
		const uint64_t len = min(a.chunk_elems, a.count - start);
		step++;
		ndet_trace(a, st, NDET_TRACE_STEP);

		/* 1. Peers are through with my lane and flags of my previous step. */
		if (ndet_wait_all(a, st, st.me->released, step - 1, false, 1, false, k == 0) != 0)
			return;
		ndet_trace(a, st, NDET_TRACE_OPENED);

		/*
		 * 2. Copy-in.  Reduce-scatter: segment d of the lane gets this chunk of
		 * block d, for every destination rank d.
		 */
		ndet_debug_delay(a, step, 1);
		/* Two-shot: my segment of this chunk (whole packs or 512-byte units). */
		const uint64_t seg = ndet_segment_elems(len, (uint32_t)a.nranks, sizeof(T));
		const uint64_t my_begin = min(len, (uint64_t)a.rank * seg);
		const uint64_t my_end = min(len, my_begin + seg);
		if (own_direct) {
			ndet_copy_bytes(own_lane, send + start * sizeof(T), my_begin * sizeof(T));
			ndet_copy_bytes(own_lane + my_end * sizeof(T),
					send + (start + my_end) * sizeof(T),
					(len - my_end) * sizeof(T));
		} else {
			for (int d = 0; d < segments; d++)
				ndet_copy_bytes(own_lane + (uint64_t)d * a.chunk_elems * sizeof(T),
						send + ((uint64_t)d * a.count + start) * sizeof(T),
						len * sizeof(T));
		}
		if (ndet_premul_on<K>(a) && threadIdx.x == 0)
			ndet_store_relaxed(&st.me->scalar[b],
					   ndet_acc_bits(ndet_premul_scalar<DT>(a)));
		ndet_trace(a, st, NDET_TRACE_COPIED);
		if (k == 0 && (threadIdx.x == 32))
			host_aborted = host_abort;
		__syncthreads();
		ndet_trace(a, st, NDET_TRACE_SYNCED);
		if (k == 0 && host_aborted != 0) {
			if (threadIdx.x == 0)
				ndet_fail(a, NDET_KERNEL_ERR_ABORTED, (uint32_t)a.rank, step, 0, 0);
			return;
		}

		/* 3. Publish. */
		ndet_debug_delay(a, step, 2);
		ndet_signal_all(a, offsetof(ndet_flags, ready), ndet_flag_pack(step, a.signature));
		ndet_trace(a, st, NDET_TRACE_SCATTERED);

		/* 4. Every peer's chunk is in its lane, and it is the same call as ours. */
		ndet_debug_delay(a, step, 3);
		if (ndet_wait_all(a, st, st.me->ready, step, true, 2) != 0)
			return;
		ndet_trace(a, st, NDET_TRACE_READY);
		if (ndet_premul_on<K>(a)) {
			/* Thread q acquired q's ready: q's scalar for this step is visible. */
			if (threadIdx.x < (unsigned)a.nranks)
				ndet_acc_from_bits(
					ndet_load_relaxed(&a.flags[threadIdx.x]->scalar[b]),
					&scales[threadIdx.x]);
			__syncthreads();
		}

		if (a.path != NDET_PATH_TWOSHOT) {
			/* One-shot: the whole chunk; reduce-scatter: segment `rank` of it. */
			const uint64_t lane_off = scatter ? (uint64_t)a.rank * a.chunk_elems : 0;
			if (writes)
				ndet_reduce_range<DT, K, NR>(a, lane_base, lane_off, len,
							      recv + start * sizeof(T), scales);
		} else {
			/*
			 * Segment `rank` of every lane (of my own: sendbuff where own_direct),
			 * reduced into recvbuff and into the same
			 * segment of the lane of every peer that gathers (all of them, or the
			 * root of a reduce): nobody reads that segment of its lane any more
			 * (only this rank reduces it), and each pack is read before it is
			 * overwritten, by the same thread.
			 */
			const char *src[NR];
			char *copies[NR];
#pragma unroll
			for (int r = 0; r < NR; r++) {
				src[r] = r >= a.nranks ? nullptr
				       : r == a.rank && own_direct
					       ? send + (start + my_begin) * sizeof(T)
					       : a.lanes[r] + lane_base + my_begin * sizeof(T);
				const int q = (a.rank + r + 1) % a.nranks;
				copies[r] = r + 1 < a.nranks && (a.root < 0 || a.root == q)
						    ? a.lanes[q] + lane_base + my_begin * sizeof(T)
						    : nullptr;
			}
			ndet_reduce_core<DT, K, NR>(a, src, my_end - my_begin,
						     writes ? recv + (start + my_begin) * sizeof(T)
							    : nullptr,
						     copies, a.nranks - 1, scales);
			/*
			 * 5. Released: my accesses to the peers' lanes of this step are over,
			 * so their next step may start.  Reduced: my segment is in their lanes.
			 */
			__syncthreads();
			ndet_signal2_all(a, offsetof(ndet_flags, released), ndet_flag_pack(step, 0),
					 offsetof(ndet_flags, reduced),
					 ndet_flag_pack(step, a.signature));
			ndet_trace(a, st, NDET_TRACE_REDUCED);
			if (ndet_wait_all(a, st, st.me->reduced, step, true, 3) != 0)
				return;
			ndet_trace(a, st, NDET_TRACE_PEERS_DONE);
			/* The peers' reduced segments, from my own lane (local reads). */
			for (int j = 1; j < a.nranks && writes; j++) {
				const int q = (a.rank + j) % a.nranks;
				const uint64_t q_begin = min(len, (uint64_t)q * seg);
				const uint64_t q_end = min(len, q_begin + seg);
				if (q_end > q_begin)
					ndet_copy_bytes<true>(recv + (start + q_begin) * sizeof(T),
							own_lane + q_begin * sizeof(T),
							(q_end - q_begin) * sizeof(T));
			}
			/* 6. Done: nothing of this step is left in any pool (push waits for it). */
			__syncthreads();
			ndet_trace(a, st, NDET_TRACE_GATHERED);
			ndet_signal_all(a, offsetof(ndet_flags, done), ndet_flag_pack(step, 0));
			continue;
		}

		/* 6. My reads of every peer's lane are complete. */
		__syncthreads();
		ndet_trace(a, st, NDET_TRACE_GATHERED);
		ndet_signal_finished(a, step);
	}
	if (threadIdx.x == 0)
		a.step_counters[b] = step;
	ndet_trace(a, st, NDET_TRACE_END);
}

/*
 * The kernels: one per (path, class, rank bucket), each only its path's code, so
 * each gets its own register allocation and unrolling.  NR = 2, 4 and 8 serve up to
 * that many ranks with two blocks per SM (several processes on one GPU must fit their
 * blocks at once); the kGeneric kernels serve prod, min and max at any rank count
 * and every op beyond 8 ranks (NR = 2, and NR = 16 with one block per SM; push: NR =
 * 2 and 8, the most it is planned for).  The all-ranks-in-one-launch kernels
 * (compute-sanitizer) run the same blocks, every path in one kernel chosen by
 * args.path, in the 8 bucket only.
 */
#define NDET_KERNEL_OCCUPANCY(NR) ((NR) <= 8 ? 2 : 1)

/*
 * One path's blocks after the prologue: pull (NDET_PATH_ONESHOT stands for one-shot,
 * two-shot and reduce-scatter, which args.path tells apart), push or LL.  Push and
 * LL are never planned with PreMulSum (ndet_plan.h): they have no kPremul kernels.
 */
template <int PATH, int DT, int K, int NR>
__device__ __forceinline__ void ndet_path_block(const ndet_kernel_args &a, ndet_block_state &st,
						const ndet_block_start &start)
{
	if constexpr (PATH == NDET_PATH_LL) {
		static_assert(K != kPremul, "LL: no PreMulSum");
		ndet_ll_block<DT, K, NR>(a, st, start.first_step + 1, start.first_ll + 1,
					 start.host_abort);
	} else if constexpr (PATH == NDET_PATH_PUSH) {
		static_assert(K != kPremul && NR <= 8, "push: no PreMulSum, at most 8 ranks");
		ndet_push_block<DT, K, NR>(a, st, start.first_step, start.host_abort);
	} else {
		ndet_pull_block<DT, K, NR>(a, st, start.first_step, start.host_abort);
	}
}

template <int PATH, int DT, int K, int NR>
__global__ void __launch_bounds__(NDET_KERNEL_THREADS, NDET_KERNEL_OCCUPANCY(NR))
	ndet_path_kernel(const ndet_kernel_args args)
{
	ndet_block_state st;
	ndet_block_start start;
	if (ndet_block_open(args, st, start))
		ndet_path_block<PATH, DT, K, NR>(args, st, start);
}

template <int DT, int K>
__global__ void __launch_bounds__(NDET_KERNEL_THREADS, NDET_KERNEL_OCCUPANCY(8))
	ndet_all_ranks_kernel(const ndet_kernel_args *args)
{
	const ndet_kernel_args &a = args[blockIdx.y];
	ndet_block_state st;
	ndet_block_start start;
	if (!ndet_block_open(a, st, start))
		return;
	if constexpr (K != kPremul) {
		if (a.path == NDET_PATH_LL)
			return ndet_path_block<NDET_PATH_LL, DT, K, 8>(a, st, start);
		if (a.path == NDET_PATH_PUSH)
			return ndet_path_block<NDET_PATH_PUSH, DT, K, 8>(a, st, start);
	}
	ndet_path_block<NDET_PATH_ONESHOT, DT, K, 8>(a, st, start);
}

} /* namespace */

typedef void (*ndet_kernel_fn)(const ndet_kernel_args);
typedef void (*ndet_all_ranks_fn)(const ndet_kernel_args *);

/* A kernel-table op index (NDET_KERNEL_OP_PREMULSUM included), for the launchers. */
static inline bool ndet_kernel_valid(int dtype, int op)
{
	return dtype >= 0 && dtype < NDET_DTYPE_COUNT && op >= 0 && op <= NDET_KERNEL_OP_PREMULSUM;
}

/*
 * Rank buckets of the sum and PreMulSum kernels: up to 2, 4 and 8 ranks.  The
 * generic kernels have two: up to 2 ranks, where the wide loops of the other would
 * cost prod, min and max most (doc/kernels.md has the figures), and up to
 * NDET_MAX_RANKS (push: 8, the most it is planned for).
 */
#define NDET_KERNEL_BUCKETS 3
#define NDET_KERNEL_GENERIC_BUCKETS 2

/*
 * One element type's kernels, in two tables so that a type may build them in two
 * translation units (kernels/local.mk): the pull kernels, and the push and LL ones.
 */
struct ndet_pull_kernels {
	ndet_kernel_fn sum[NDET_KERNEL_BUCKETS];             /* sum, avg */
	ndet_kernel_fn premul[NDET_KERNEL_BUCKETS];          /* PreMulSum */
	ndet_kernel_fn generic[NDET_KERNEL_GENERIC_BUCKETS]; /* the rest; every op beyond 8 */
};
struct ndet_push_ll_kernels {
	ndet_kernel_fn push_sum[NDET_KERNEL_BUCKETS];
	ndet_kernel_fn ll_sum[NDET_KERNEL_BUCKETS];
	ndet_kernel_fn push_generic[NDET_KERNEL_GENERIC_BUCKETS]; /* prod, min, max */
	ndet_kernel_fn ll_generic[NDET_KERNEL_GENERIC_BUCKETS];   /* and sum, avg beyond 8 */
};
/* The all-ranks kernels (compute-sanitizer), by class. */
struct ndet_all_ranks_kernels {
	ndet_all_ranks_fn sum, premul, generic;
};

#define NDET_KERNEL_TABLE_DECLARE(SUFFIX)                                                        \
	extern const ndet_pull_kernels ndet_pull_kernels_##SUFFIX;                               \
	extern const ndet_push_ll_kernels ndet_push_ll_kernels_##SUFFIX;                         \
	extern const ndet_all_ranks_kernels ndet_all_ranks_kernels_##SUFFIX

NDET_KERNEL_TABLE_DECLARE(f32);
NDET_KERNEL_TABLE_DECLARE(f16);
NDET_KERNEL_TABLE_DECLARE(bf16);
NDET_KERNEL_TABLE_DECLARE(f64);
NDET_KERNEL_TABLE_DECLARE(f8e4m3);
NDET_KERNEL_TABLE_DECLARE(f8e5m2);

#define NDET_BUCKETS_OF(PATH, DT, CLASS)                                                           \
	ndet_path_kernel<PATH, DT, CLASS, 2>, ndet_path_kernel<PATH, DT, CLASS, 4>,                \
		ndet_path_kernel<PATH, DT, CLASS, 8>

/* In ndet_pull_<dtype>.cu and ndet_push_ll_<dtype>.cu (kernels/libndet_kernels.la). */
#define NDET_PULL_KERNELS(DT, SUFFIX)                                                            \
	const ndet_pull_kernels ndet_pull_kernels_##SUFFIX = {                                   \
		{NDET_BUCKETS_OF(NDET_PATH_ONESHOT, DT, kSum)},                                  \
		{NDET_BUCKETS_OF(NDET_PATH_ONESHOT, DT, kPremul)},                               \
		{ndet_path_kernel<NDET_PATH_ONESHOT, DT, kGeneric, 2>,                           \
		 ndet_path_kernel<NDET_PATH_ONESHOT, DT, kGeneric, NDET_MAX_RANKS>},             \
	}
#define NDET_PUSH_LL_KERNELS(DT, SUFFIX)                                                         \
	const ndet_push_ll_kernels ndet_push_ll_kernels_##SUFFIX = {                             \
		{NDET_BUCKETS_OF(NDET_PATH_PUSH, DT, kSum)},                                     \
		{NDET_BUCKETS_OF(NDET_PATH_LL, DT, kSum)},                                       \
		{ndet_path_kernel<NDET_PATH_PUSH, DT, kGeneric, 2>,                              \
		 ndet_path_kernel<NDET_PATH_PUSH, DT, kGeneric, 8>},                             \
		{ndet_path_kernel<NDET_PATH_LL, DT, kGeneric, 2>,                                \
		 ndet_path_kernel<NDET_PATH_LL, DT, kGeneric, NDET_MAX_RANKS>},                  \
	}

/* In ndet_kernels_all_ranks_<dtype>.cu: kernels/libndet_all_ranks.la (local.mk). */
#define NDET_ALL_RANKS_KERNELS(DT, SUFFIX)                                                       \
	const ndet_all_ranks_kernels ndet_all_ranks_kernels_##SUFFIX = {                         \
		ndet_all_ranks_kernel<DT, kSum>,                                                 \
		ndet_all_ranks_kernel<DT, kPremul>,                                              \
		ndet_all_ranks_kernel<DT, kGeneric>,                                             \
	}

#endif /* NDET_KERNELS_IMPL_CUH_ */
