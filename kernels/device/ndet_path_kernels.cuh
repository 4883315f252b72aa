/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The collective kernels, as templates: one per (path, class, rank bucket), and the
 * all-ranks-in-one-launch kernels of the GPU test driver; the macros with which a
 * per-type unit instantiates them into its table (ndet_tables.cuh).  The layers they
 * are built of, in the order they build on each other.
 */
#ifndef NDET_DEVICE_PATH_KERNELS_CUH_
#define NDET_DEVICE_PATH_KERNELS_CUH_

#include "kernels/device/ndet_sync.cuh"
#include "kernels/device/ndet_dtype.cuh"
#include "kernels/device/ndet_tree.cuh"
#include "kernels/device/ndet_copy.cuh"
#include "kernels/device/ndet_reduce.cuh"
#include "kernels/device/ndet_flags.cuh"
#include "kernels/device/ndet_ll.cuh"
#include "kernels/device/ndet_push.cuh"
#include "kernels/device/ndet_open.cuh"
#include "kernels/device/ndet_pull.cuh"
#include "kernels/device/ndet_hosts.cuh"
#include "kernels/device/ndet_tables.cuh"

namespace
{

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

/* An LL step from the prologue's outcome and this thread's lines. */
template <int DT, int K, int NR, int LLOP, int L, int W>
__device__ __forceinline__ void ndet_ll_start(const ndet_kernel_args &a, ndet_block_state &st,
					      const ndet_block_start &start,
					      const ndet_ll_data<W> (&mine)[L])
{
	ndet_ll_block<DT, K, NR, LLOP, L, W>(a, st, start.first_step + 1, start.first_ll + 1,
					     start.abort_seen, start.after_ll, mine);
}

/*
 * One path's blocks after the prologue: pull (NDET_PATH_ONESHOT stands for one-shot,
 * two-shot and reduce-scatter, which args.path tells apart), push or LL.  Push and
 * LL are never planned with PreMulSum (ndet_plan.h): they have no kPremul kernels.
 * LLOP: the ops an LL kernel serves (ndet_ll.cuh), L the lines per thread it carries
 * (1: blocks of at most half a full block only), W the data bytes of its lines
 * (NDET_LL_WIDE_LINE_DATA: args.ll_line wide); the other paths ignore them.
 */
template <int PATH, int DT, int K, int NR, int LLOP = kLLOpRuntime,
	  int L = NDET_LL_LINES_PER_THREAD, int W = NDET_LL_LINE_DATA>
__device__ __forceinline__ void ndet_path_block(const ndet_kernel_args &a, ndet_block_state &st,
						const ndet_block_start &start)
{
	if constexpr (PATH == NDET_PATH_LL) {
		static_assert(K != kPremul, "LL: no PreMulSum");
		ndet_ll_data<W> mine[L];
		ndet_ll_load_mine<DT, L, W>(a, mine);
		ndet_ll_start<DT, K, NR, LLOP, L, W>(a, st, start, mine);
	} else if constexpr (PATH == NDET_PATH_PUSH) {
		static_assert(K != kPremul && NR <= 8, "push: no PreMulSum, at most 8 ranks");
		ndet_push_block<DT, K, NR>(a, st, start.first_step, start.open_step,
					   start.host_abort);
	} else {
		ndet_pull_block<DT, K, NR>(a, st, start.first_step, start.open_step,
					   start.host_abort);
	}
}

template <int PATH, int DT, int K, int NR, int LLOP = kLLOpRuntime,
	  int L = NDET_LL_LINES_PER_THREAD, int W = NDET_LL_LINE_DATA>
__global__ void __launch_bounds__(NDET_KERNEL_THREADS, NDET_KERNEL_OCCUPANCY(NR))
	ndet_path_kernel(const ndet_kernel_args args)
{
	ndet_block_state st;
	ndet_block_start start;
	if constexpr (PATH == NDET_PATH_LL) {
		static_assert(K != kPremul, "LL: no PreMulSum");
		/* sendbuff's lines first: their latency overlaps the prologue's. */
		ndet_ll_data<W> mine[L];
		ndet_ll_load_mine<DT, L, W>(args, mine);
		ndet_ll_touch_peers(args);
		if (ndet_block_open(args, st, start))
			ndet_ll_start<DT, K, NR, LLOP, L, W>(args, st, start, mine);
	} else if (ndet_block_open(args, st, start)) {
		ndet_path_block<PATH, DT, K, NR, LLOP>(args, st, start);
	}
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
		if constexpr (NDET_LL_WIDE_LINE_DATA % sizeof(typename ndet_dtype<DT>::T) == 0) {
			constexpr int Wide = NDET_LL_WIDE_LINE_DATA;
			if (a.path == NDET_PATH_LL && a.ll_line == Wide &&
			    ndet_ll_one_line<DT, Wide>(a))
				return ndet_path_block<NDET_PATH_LL, DT, K, 8, kLLOpRuntime, 1,
						       Wide>(a, st, start);
			if (a.path == NDET_PATH_LL && a.ll_line == Wide)
				return ndet_path_block<NDET_PATH_LL, DT, K, 8, kLLOpRuntime,
						       NDET_LL_LINES_PER_THREAD, Wide>(a, st,
										       start);
		}
		if (a.path == NDET_PATH_LL && ndet_ll_one_line<DT>(a))
			return ndet_path_block<NDET_PATH_LL, DT, K, 8, kLLOpRuntime, 1>(a, st,
											start);
		if (a.path == NDET_PATH_LL)
			return ndet_path_block<NDET_PATH_LL, DT, K, 8>(a, st, start);
		if (a.path == NDET_PATH_PUSH)
			return ndet_path_block<NDET_PATH_PUSH, DT, K, 8>(a, st, start);
	}
	ndet_path_block<NDET_PATH_ONESHOT, DT, K, 8>(a, st, start);
}

} /* namespace */

#define NDET_BUCKETS_OF(PATH, DT, CLASS)                                                           \
	ndet_path_kernel<PATH, DT, CLASS, 2>, ndet_path_kernel<PATH, DT, CLASS, 4>,                \
		ndet_path_kernel<PATH, DT, CLASS, 8>
#define NDET_LL_BUCKETS_OF(DT, LLOP, L, W)                                                         \
	ndet_path_kernel<NDET_PATH_LL, DT, kSum, 2, LLOP, L, W>,                                   \
		ndet_path_kernel<NDET_PATH_LL, DT, kSum, 4, LLOP, L, W>,                           \
		ndet_path_kernel<NDET_PATH_LL, DT, kSum, 8, LLOP, L, W>

/*
 * In ndet_pull_<dtype>.cu and ndet_push_ll_<dtype>.cu (kernels/libndet_kernels.la).
 * NDET_PUSH_LL_KERNELS' WIDE: NDET_LL_WIDE_KERNELS(DT) for elements of 1, 2 and 4
 * bytes, NDET_LL_NO_WIDE_KERNELS for 8 (12 bytes hold no whole one): the kernels of
 * wide lines, two and one per thread, and the largest chunk of one per thread.
 */
#define NDET_LL_WIDE_KERNELS(DT)                                                                   \
	{NDET_LL_BUCKETS_OF(DT, kLLOpSum, NDET_LL_LINES_PER_THREAD, NDET_LL_WIDE_LINE_DATA)},      \
		{NDET_LL_BUCKETS_OF(DT, kLLOpAvg, NDET_LL_LINES_PER_THREAD,                        \
				    NDET_LL_WIDE_LINE_DATA)},                                      \
		{NDET_LL_BUCKETS_OF(DT, kLLOpSum, 1, NDET_LL_WIDE_LINE_DATA)},                     \
		{NDET_LL_BUCKETS_OF(DT, kLLOpAvg, 1, NDET_LL_WIDE_LINE_DATA)},                     \
		ndet_ll_one_line_elems<DT, NDET_LL_WIDE_LINE_DATA>()
#define NDET_LL_NO_WIDE_KERNELS                                                                    \
	{nullptr, nullptr, nullptr}, {nullptr, nullptr, nullptr}, {nullptr, nullptr, nullptr},     \
		{nullptr, nullptr, nullptr}, 0
#define NDET_PULL_KERNELS(DT, SUFFIX)                                                              \
	const ndet_pull_kernels ndet_pull_kernels_##SUFFIX = {                                     \
		{NDET_BUCKETS_OF(NDET_PATH_ONESHOT, DT, kSum)},                                    \
		{NDET_BUCKETS_OF(NDET_PATH_ONESHOT, DT, kPremul)},                                 \
		{ndet_path_kernel<NDET_PATH_ONESHOT, DT, kGeneric, 2>,                             \
		 ndet_path_kernel<NDET_PATH_ONESHOT, DT, kGeneric, NDET_MAX_RANKS>},               \
		NDET_HOSTS_KERNELS_OF(DT),                                                         \
	}
#define NDET_PUSH_LL_KERNELS(DT, SUFFIX, WIDE)                                                     \
	const ndet_push_ll_kernels ndet_push_ll_kernels_##SUFFIX = {                               \
		{NDET_BUCKETS_OF(NDET_PATH_PUSH, DT, kSum)},                                       \
		{NDET_LL_BUCKETS_OF(DT, kLLOpSum, NDET_LL_LINES_PER_THREAD, NDET_LL_LINE_DATA)},   \
		{NDET_LL_BUCKETS_OF(DT, kLLOpAvg, NDET_LL_LINES_PER_THREAD, NDET_LL_LINE_DATA)},   \
		{NDET_LL_BUCKETS_OF(DT, kLLOpSum, 1, NDET_LL_LINE_DATA)},                          \
		{NDET_LL_BUCKETS_OF(DT, kLLOpAvg, 1, NDET_LL_LINE_DATA)},                          \
		WIDE,                                                                              \
		{ndet_path_kernel<NDET_PATH_PUSH, DT, kGeneric, 2>,                                \
		 ndet_path_kernel<NDET_PATH_PUSH, DT, kGeneric, 8>},                               \
		{ndet_path_kernel<NDET_PATH_LL, DT, kGeneric, 2>,                                  \
		 ndet_path_kernel<NDET_PATH_LL, DT, kGeneric, NDET_MAX_RANKS>},                    \
		ndet_ll_one_line_elems<DT>(),                                                      \
	}

/* In ndet_kernels_all_ranks_<dtype>.cu: kernels/libndet_all_ranks.la (local.mk). */
#define NDET_ALL_RANKS_KERNELS(DT, SUFFIX)                                                         \
	const ndet_all_ranks_kernels ndet_all_ranks_kernels_##SUFFIX = {                           \
		ndet_all_ranks_kernel<DT, kSum>,                                                   \
		ndet_all_ranks_kernel<DT, kPremul>,                                                \
		ndet_all_ranks_kernel<DT, kGeneric>,                                               \
		NDET_HOSTS_ALL_RANKS_KERNELS_OF(DT),                                               \
	}

#endif /* NDET_DEVICE_PATH_KERNELS_CUH_ */
