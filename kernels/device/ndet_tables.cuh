/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The kernel tables the launchers (ndet_kernels.cu, ndet_kernels_all_ranks.cu) pick
 * from and the per-type units (ndet_pull_<type>.cu, ndet_push_ll_<type>.cu,
 * ndet_kernels_all_ranks_<type>.cu) define: host code, no device code.
 */
#ifndef NDET_DEVICE_TABLES_CUH_
#define NDET_DEVICE_TABLES_CUH_

#include "kernels/ndet_abi.h"

typedef void (*ndet_kernel_fn)(const ndet_kernel_args);
typedef void (*ndet_all_ranks_fn)(const ndet_kernel_args *);
typedef void (*ndet_hosts_fn)(const ndet_hosts_args);
typedef void (*ndet_hosts_all_ranks_fn)(const ndet_hosts_args *);

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
#define NDET_KERNEL_BUCKETS         3
#define NDET_KERNEL_GENERIC_BUCKETS 2

/*
 * One element type's kernels, in two tables so that a type may build them in two
 * translation units (kernels/local.mk): the pull kernels, and the push and LL ones.
 */
struct ndet_pull_kernels {
	ndet_kernel_fn sum[NDET_KERNEL_BUCKETS];             /* sum, avg */
	ndet_kernel_fn premul[NDET_KERNEL_BUCKETS];          /* PreMulSum */
	ndet_kernel_fn generic[NDET_KERNEL_GENERIC_BUCKETS]; /* the rest; every op beyond 8 */
	ndet_hosts_fn hosts[3]; /* stages 1, 3 and 5 across hosts, every op (ndet_hosts.cuh) */
};
struct ndet_push_ll_kernels {
	ndet_kernel_fn push_sum[NDET_KERNEL_BUCKETS];
	ndet_kernel_fn ll_sum[NDET_KERNEL_BUCKETS];  /* sum only */
	ndet_kernel_fn ll_avg[NDET_KERNEL_BUCKETS];  /* avg only */
	ndet_kernel_fn ll1_sum[NDET_KERNEL_BUCKETS]; /* one line per thread (ndet_ll_one_line) */
	ndet_kernel_fn ll1_avg[NDET_KERNEL_BUCKETS];
	ndet_kernel_fn llw_sum[NDET_KERNEL_BUCKETS];  /* wide lines; NULL where no */
	ndet_kernel_fn llw_avg[NDET_KERNEL_BUCKETS];  /* element fits one whole */
	ndet_kernel_fn llw1_sum[NDET_KERNEL_BUCKETS]; /* wide lines, one per thread */
	ndet_kernel_fn llw1_avg[NDET_KERNEL_BUCKETS];
	uint64_t llw1_max_elems; /* the largest chunk of llw1_* (0 without wide kernels) */
	ndet_kernel_fn push_generic[NDET_KERNEL_GENERIC_BUCKETS]; /* prod, min, max */
	ndet_kernel_fn ll_generic[NDET_KERNEL_GENERIC_BUCKETS];   /* and sum, avg beyond 8 */
	uint64_t ll1_max_elems; /* ndet_ll_one_line_elems: the largest chunk of ll1_* */
};
/* The all-ranks kernels (compute-sanitizer), by class; the stages across hosts. */
struct ndet_all_ranks_kernels {
	ndet_all_ranks_fn sum, premul, generic;
	ndet_hosts_all_ranks_fn hosts[3]; /* stages 1, 3 and 5 */
};

#define NDET_KERNEL_TABLE_DECLARE(SUFFIX)                                                          \
	extern const ndet_pull_kernels ndet_pull_kernels_##SUFFIX;                                 \
	extern const ndet_push_ll_kernels ndet_push_ll_kernels_##SUFFIX;                           \
	extern const ndet_all_ranks_kernels ndet_all_ranks_kernels_##SUFFIX

NDET_KERNEL_TABLE_DECLARE(f32);
NDET_KERNEL_TABLE_DECLARE(f16);
NDET_KERNEL_TABLE_DECLARE(bf16);
NDET_KERNEL_TABLE_DECLARE(f64);
NDET_KERNEL_TABLE_DECLARE(f8e4m3);
NDET_KERNEL_TABLE_DECLARE(f8e5m2);

#endif /* NDET_DEVICE_TABLES_CUH_ */
