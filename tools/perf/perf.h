/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * nccl-det-perf: all-reduce (or, with --coll reducescatter, reduce-scatter) benchmark
 * of the deterministic engine, in the style of nccl-tests, side by side with the real
 * NCCL in the same run.  Ranks are threads of this process: one per GPU when there are
 * several, else n ranks sharing GPU 0 (their kernels run concurrently, like processes
 * under MPS).  For every size it reports eager and CUDA-graph time and busbw of nccl-det
 * and of NCCL's ncclAllReduce on the same ranks (one communicator from ncclCommInitAll),
 * their ratio, a bit-exact check against the CPU reference, a size-invariance check (the
 * same elements reduced in a smaller, offset call give the same bits) and how many
 * elements of NCCL's result differ from the tree.  On one GPU, where NVLink numbers
 * cannot exist, it reports the kernels' bytes read + written per second against a
 * device-to-device copy measured in the same run, and small-message latency against a
 * bare flag round trip.
 *
 * NCCL is found at run time (NCCL_DET_NCCL_LIBRARY, else libnccl.so.2): the tool links
 * neither NCCL nor nccl-det's shim, so "NCCL" here is always the real library.
 *
 * The program's parts, one file each:
 *   options.c  the command line: the option table, --help, parsing and checks
 *   nccl.c     the real NCCL: loading it, whether its columns run, symmetric windows
 *   rows.c     the rows of the table: which the run has, their plan, how they print
 *              (table and CSV) and the summary of ratios
 *   run.c      the measured run: rank threads, timing, the bit-exact checks
 *   trace.c    --trace: the kernel timeline of a row's call, recorded and printed
 *   probe.c    --link-probe: copy bandwidths between GPUs 0 and 1
 *   shim.c     --shim-overhead: the host time the preloaded nccl-det adds to a call
 *   main.c     the order of it all: defaults, the GPUs, the header lines, the run
 */
#ifndef NDET_PERF_H_
#define NDET_PERF_H_

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "engine/ndet_engine.h"
#include "resolve/ndet_resolve.h"
#include "kernels/ndet_bench.h"
#include "kernels/ndet_types.h"

/* A fatal error, possibly on one rank's thread: leave at once (perf_die in run.c). */
_Noreturn void perf_die(void);

#define PERF_CHECK(call)                                                                           \
	do {                                                                                       \
		cudaError_t perf_err_ = (call);                                                    \
		if (perf_err_ != cudaSuccess) {                                                    \
			fprintf(stderr, "nccl-det-perf: %s failed: %s\n", #call,                   \
				cudaGetErrorString(perf_err_));                                    \
			perf_die();                                                                \
		}                                                                                  \
	} while (0)

/* The two size classes of the ratio summary: latency-bound and bandwidth-bound. */
#define PERF_SMALL_MAX_BYTES (64u << 10)
#define PERF_LARGE_MIN_BYTES (64u << 20)

#define PERF_COUNT_OF(array) (sizeof(array) / sizeof((array)[0]))

/* ---------------------------------------------------------------- options */

enum perf_mode { PERF_EAGER = 0, PERF_GRAPH, PERF_MODE_COUNT };

enum perf_nccl_choice {
	PERF_NCCL_AUTO = 0, /* when it can run; otherwise say why */
	PERF_NCCL_REQUIRED, /* --nccl: exit 2 when it cannot run */
	PERF_NCCL_OFF,      /* --no-nccl */
};

struct perf_options {
	int nranks;
	size_t min_bytes, max_bytes;
	double factor;     /* NaN when sizes step by step_bytes (-i) */
	size_t step_bytes; /* -i; 0 = step by the factor */
	int warmup, iters;
	int graph_launches; /* -G: launches of the captured graph per graph row; 0 = none */
	unsigned modes;     /* --modes: bit per enum perf_mode (-G 0 clears the graph's) */
	bool check;
	size_t check_max_bytes;
	unsigned dtypes;    /* bit per ndet_dtype_t */
	unsigned ops;       /* bit per ndet_op_t, and PERF_OP_PREMULSUM's */
	int nccl;           /* enum perf_nccl_choice */
	int nccl_symmetric; /* --nccl-symmetric: also NCCL on symmetric windows */
	const char *csv_path;
	int dry_run;
	int assume_gpus;         /* --gpus, dry run only; -1 = the visible count */
	int coll;                /* --coll: NDET_COLL_ALLREDUCE, _REDUCE_SCATTER or _REDUCE */
	int root;                /* -r: a reduce's root; -1 until given (then 0 for reduce) */
	int link_probe;          /* --link-probe: copy bandwidths between GPUs 0 and 1, then exit */
	int shim_overhead;       /* --shim-overhead: host time the preload adds, then exit */
	int trace;               /* --trace: each row's kernel timeline (first and last block) */
	int exchange_one_thread; /* --exchange-one-thread: the flag exchange in LL's shape */
	int help;
	int version;
};

/* Parse argv into `o`; exits 2 with a message on a bad option or value. */
void perf_parse_options(int argc, char **argv, struct perf_options *o);

/* The --help text. */
void perf_usage(FILE *out);

/*
 * Once the rank count is known: a reduce's root defaults to 0; a root that is not a
 * rank exits 2 with the reason.
 */
void perf_check_root(struct perf_options *o);

/* The call's root: a reduce's, else -1 (every rank receives). */
int perf_root(const struct perf_options *o);

/* ---------------------------------------------------------------- the real NCCL */

/*
 * The real NCCL as this tool loaded it.  Its entry points are ndet_resolve.h's table of
 * NCCL functions; only those nccl.c looks up are set (the symmetric-window ones only
 * for --nccl-symmetric).
 */
struct perf_nccl {
	void *handle;
	char path[4096];
	int version;
	struct ndet_nccl fn;
};

/* ---------------------------------------------------------------- rows */

/* PERF_NCCL_SYMMETRIC: NCCL on buffers registered as symmetric windows. */
/*
 * PERF_FLOOR: the empty kernel of a call's grid; PERF_EXCHANGE: the flag exchange of
 * that grid (ndet_kernel_flag_exchange).  Timed like the calls, no table column.
 */
enum perf_impl {
	PERF_NDET = 0,
	PERF_NCCL,
	PERF_NCCL_SYMMETRIC,
	PERF_IMPL_COUNT,
	PERF_FLOOR = PERF_IMPL_COUNT,
	PERF_EXCHANGE
};

/* Rows up to this size also time their floor (PERF_FLOOR) and flag exchange. */
#define PERF_FLOOR_MAX_BYTES ((size_t)256 << 10)

/*
 * -o premulsum (nccl-tests' mulsum): PreMulSum, ncclRedOpCreatePreMulSum with a host
 * scalar per rank; its bit in perf_options.ops is the one past the ndet_op_t ones.
 */
#define PERF_OP_PREMULSUM NDET_OP_COUNT

/* One line of the table: one size, dtype and op. */
struct perf_row {
	size_t bytes, count;
	ndet_dtype_t dtype;
	ndet_op_t op; /* PreMulSum: NDET_OP_SUM with `premul` */
	bool premul;
	ndet_path_t path;
	uint32_t ll_line; /* the plan's LL line format (data bytes per line; 0: not LL) */
	uint32_t blocks;  /* the plan's grid and steps (0: no kernel) */
	uint64_t steps;
	double seconds[PERF_MODE_COUNT][PERF_IMPL_COUNT]; /* per call; < 0 = not run */
	double floor_seconds[PERF_MODE_COUNT];            /* PERF_FLOOR's, per call; 0 = not run */
	double exchange_seconds[PERF_MODE_COUNT];         /* PERF_EXCHANGE's, likewise */
	const char *exact, *invariant;                    /* "OK", "FAIL", "-" */
	long long wrong;             /* nccl-det's elements off the CPU tree; < 0 = not checked */
	long long nccl_differ;       /* elements; < 0 = not checked */
	double kernel_gbps, vs_copy; /* < 0 = not applicable */
};

/* The path column: the plan's path, "llw" for LL in wide lines (doc/protocol.md). */
const char *perf_path_name(const struct perf_row *row);

/* Ratio NCCL / nccl-det over one class of sizes in one mode. */
struct perf_ratio_stats {
	int rows;
	double min, log_sum;
};

/* What the whole run shares: options, NCCL, the ranks' buffers, rank 0's tallies. */
struct perf_world {
	struct perf_options options;
	int ngpus;         /* GPUs the ranks use: 1 for the one-GPU proxy */
	int ngpus_visible; /* GPUs this process sees (--gpus in a dry run) */
	int device_sms;    /* fewest SMs of the GPUs used (0 in a dry run: unknown) */
	bool nccl_on;
	bool symmetric_on; /* --nccl-symmetric and the library has the windows */
	struct perf_nccl nccl;
	ncclComm_t comms[NDET_MAX_RANKS];
	FILE *csv;
	pthread_barrier_t barrier;
	const void *sends[NDET_MAX_RANKS];
	struct ndet_engine *engines[NDET_MAX_RANKS];
	char *recv_host[NDET_MAX_RANKS];
	char *nccl_host;       /* the result rank's NCCL result (rank 0, a reduce's root) */
	const char *invariant; /* the result rank's size invariance of the row checked */
	/* Written by rank 0. */
	double copy_gbps, flag_rtt_us;
	double best_ratio_large;
	int large_rows;
	double ratio_sum_large;
	int failures;
	long long wrong;      /* nccl-det's elements off the tree; < 0: none checked */
	bool test_wrong_done; /* NDET_PERF_TEST_WRONG applied (run.c) */
	double busbw_sum;     /* nccl-det's busbw over the measured table rows */
	int busbw_rows;
	/* [impl][mode][small, large]; the PERF_NDET row stays empty. */
	struct perf_ratio_stats ratios[PERF_IMPL_COUNT][PERF_MODE_COUNT][2];
	uint64_t *flag_pair[2];
	char *exchange_flags[NDET_MAX_RANKS]; /* each rank's, for PERF_EXCHANGE */
};

/* One rank's thread. */
struct perf_rank {
	struct perf_world *world;
	int rank;
	cudaStream_t stream;
	char *send, *recv, *recv2, *host_in;
	/* --nccl-symmetric: from ncclMemAlloc, registered as windows. */
	char *symmetric_send, *symmetric_recv;
	ncclWindow_t symmetric_windows[2];
	/* PERF_EXCHANGE's flags of every rank, this rank's counters and failure word. */
	struct ndet_bench_exchange exchange;
	/* A PreMulSum row's: this rank's scalar, and NCCL's op with it (while the row runs). */
	uint64_t premul_scalar_bits;
	ncclRedOp_t nccl_premul_op;
};

/* nccl.c: whether the NCCL columns run, and say so; exits 2 when --nccl cannot have them. */
void perf_nccl_decide(struct perf_world *world);
/* nccl.c: whether the --nccl-symmetric columns run, and say so; never exits. */
void perf_symmetric_decide(struct perf_world *world);
/* nccl.c: ncclMemAlloc'd buffers of this rank, registered as windows (collective). */
void perf_symmetric_setup(struct perf_rank *me);
void perf_symmetric_teardown(struct perf_rank *me);
/* nccl.c: stop with the reason when `result` or the communicator's async error is one. */
void perf_check_nccl(struct perf_rank *me, ncclResult_t result, const char *what);

/* rows.c: a row's op as the table names it; rank r's PreMulSum scalar, bits of dtype. */
const char *perf_op_name(const struct perf_row *row);
uint64_t perf_premul_scalar_bits(ndet_dtype_t dtype, int rank);

/* rows.c; perf_print_row also adds nccl-det's busbw to the world's average. */
void perf_for_each_row(const struct perf_world *world,
		       void (*visit)(void *context, struct perf_row *row), void *context);
void perf_print_header(struct perf_world *world);
void perf_print_row(struct perf_world *world, const struct perf_row *row);
void perf_note_ratios(struct perf_world *world, const struct perf_row *row);
void perf_print_ratio_summary(const struct perf_world *world);
/* nccl-tests' closing lines: the elements off the tree, the average bus bandwidth. */
void perf_print_totals(const struct perf_world *world);

/* run.c */
struct ndet_engine_config perf_engine_config(const struct perf_world *world, int rank);
double perf_now(void);
/* The median of count > 0 values (sorts them in place). */
double perf_median(double *values, int count);
/* "eager", "graph" (rows.c). */
extern const char *const perf_mode_names[PERF_MODE_COUNT];

void perf_launch(struct perf_rank *me, enum perf_impl impl, const void *send, void *recv,
		 const struct perf_row *row);
void perf_check_engine(struct perf_rank *me);
/* Create the NCCL communicators, run every rank's thread; the exit status (0 or 1). */
int perf_run(struct perf_world *world);

/* trace.c: --trace of one row; perf_trace on every rank, then rank 0 prints. */
void perf_trace(struct perf_rank *me, const struct perf_row *row);
void perf_trace_print(const struct perf_world *world, const struct perf_row *row);

/* probe.c: --link-probe; the exit status. */
int perf_link_probe(int ngpus);

/* --shim-overhead (shim.c): the host time the preloaded nccl-det adds to a call; exits. */
int perf_shim_overhead(void);

/* Load the real NCCL into `nccl` (nccl.c); false with the reason in `why`. */
bool perf_nccl_load(struct perf_nccl *nccl, char *why, size_t size);

#endif /* NDET_PERF_H_ */
