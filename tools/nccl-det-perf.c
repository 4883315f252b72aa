/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * nccl-det-perf: all-reduce (or, with --coll reducescatter, reduce-scatter) benchmark
 * of the deterministic engine, in the style of
 * nccl-tests, side by side with the real NCCL in the same run.  Ranks are threads of
 * this process: one per GPU when there are several, else n ranks sharing GPU 0 (their
 * kernels run concurrently, like processes under MPS).  For every size it reports
 * eager and CUDA-graph time and busbw of nccl-det and of NCCL's ncclAllReduce on the
 * same ranks (one communicator from ncclCommInitAll), their ratio, a bit-exact check
 * against the CPU reference, a size-invariance check (the same elements reduced in a
 * smaller, offset call give the same bits) and how many elements of NCCL's result
 * differ from the tree.  On one GPU, where NVLink numbers cannot exist, it reports the
 * kernels' bytes read + written per second against a device-to-device copy measured in
 * the same run, and small-message latency against a bare flag round trip.
 *
 * NCCL is found at run time (NCCL_DET_NCCL_LIBRARY, else libnccl.so.2): the tool links
 * neither NCCL nor nccl-det's shim, so "NCCL" here is always the real library.
 */
#include "config.h"

#include <dlfcn.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "nccl_det.h"
#include "ndet_eligibility.h"
#include "ndet_engine.h"
#include "ndet_kernels.h"
#include "ndet_reference.h"
#include "ndet_settings.h"

/*
 * A fatal error, possibly on one rank's thread while the others are inside CUDA or
 * NCCL calls: exit() would run exit handlers under their feet (a segfault was seen
 * after an NCCL failure inside a capture); leave at once with the output flushed.
 */
static _Noreturn void perf_die(void)
{
	fflush(NULL);
	_exit(1);
}

#define PERF_CHECK(call) \
	do { \
		cudaError_t perf_err_ = (call); \
		if (perf_err_ != cudaSuccess) { \
			fprintf(stderr, "nccl-det-perf: %s failed: %s\n", #call, \
				cudaGetErrorString(perf_err_)); \
			perf_die(); \
		} \
	} while (0)

/* Latency and bandwidth classes of DESIGN.md section 9. */
#define PERF_SMALL_MAX_BYTES (64u << 10)
#define PERF_LARGE_MIN_BYTES (64u << 20)

enum perf_nccl_choice {
	PERF_NCCL_AUTO = 0, /* when it can run; otherwise say why */
	PERF_NCCL_REQUIRED, /* --nccl: exit 2 when it cannot run */
	PERF_NCCL_OFF,      /* --no-nccl */
};

struct perf_options {
	int nranks;
	size_t min_bytes, max_bytes;
	double factor;
	int warmup, iters;
	int graph; /* 0 eager, 1 graph, 2 both */
	bool check;
	size_t check_max_bytes;
	unsigned dtypes;    /* bit per ndet_dtype_t */
	unsigned ops;       /* bit per ndet_op_t */
	int nccl;           /* enum perf_nccl_choice */
	int nccl_symmetric; /* --nccl-symmetric: also NCCL on symmetric windows */
	const char *csv_path;
	int dry_run;
	int assume_gpus; /* --gpus, dry run only; -1 = the visible count */
	int coll;        /* --coll: NDET_COLL_ALLREDUCE or NDET_COLL_REDUCE_SCATTER */
	int link_probe;  /* --link-probe: copy bandwidths between GPUs 0 and 1, then exit */
	int trace;       /* --trace: each row's kernel timeline (first and last block) */
	int help;
	int version;
};

/* ---------------------------------------------------------------- options */

/* NULL on success, else why `text` is no value for this option. */
typedef const char *(*perf_parse_fn)(const char *text, void *field);

struct perf_option {
	const char *name;     /* long name */
	int key;              /* short letter, or 0 for a long-only option */
	const char *argument; /* NULL for a flag */
	size_t offset;        /* of the field in struct perf_options */
	perf_parse_fn parse;  /* NULL for a flag: its int field gets flag_value */
	int flag_value;
	const char *help;
};

static const char *perf_parse_int(const char *text, void *field)
{
	char *end = NULL;
	long value = strtol(text, &end, 10);
	if (end == text || *end != '\0' || value < 0 || value > 1000000000)
		return "not a number from 0 to 10^9";
	*(int *)field = (int)value;
	return NULL;
}

static const char *perf_parse_size(const char *text, void *field)
{
	char *end = NULL;
	double value = strtod(text, &end);
	if (end == text || !(value >= 0))
		return "not a size (a number with an optional K, M or G suffix)";
	switch (*end) {
	case 'K':
	case 'k':
		value *= 1024;
		end++;
		break;
	case 'M':
	case 'm':
		value *= 1024 * 1024;
		end++;
		break;
	case 'G':
	case 'g':
		value *= 1024.0 * 1024 * 1024;
		end++;
		break;
	default:
		break;
	}
	if (*end != '\0' || value > 1e15)
		return "not a size (a number with an optional K, M or G suffix)";
	*(size_t *)field = (size_t)value;
	return NULL;
}

static const char *perf_parse_double(const char *text, void *field)
{
	char *end = NULL;
	double value = strtod(text, &end);
	if (end == text || *end != '\0' || !isfinite(value))
		return "not a number";
	*(double *)field = value;
	return NULL;
}

static const char *perf_parse_graph_mode(const char *text, void *field)
{
	if (strcmp(text, "0") != 0 && strcmp(text, "1") != 0 && strcmp(text, "2") != 0)
		return "must be 0 (eager), 1 (graph) or 2 (both)";
	*(int *)field = text[0] - '0';
	return NULL;
}

static const char *perf_parse_bool(const char *text, void *field)
{
	if (strcmp(text, "0") != 0 && strcmp(text, "1") != 0)
		return "must be 0 or 1";
	*(bool *)field = text[0] == '1';
	return NULL;
}

/* nccl-tests' name of a dtype (its -d), or NULL where it uses ours. */
static const char *perf_dtype_alias(int dtype)
{
	switch (dtype) {
	case NDET_DTYPE_F32:
		return "float";
	case NDET_DTYPE_F16:
		return "half";
	case NDET_DTYPE_BF16:
		return "bfloat16";
	case NDET_DTYPE_F64:
		return "double";
	default:
		return NULL;
	}
}

/* A comma list of dtype (or op) names, or "all", into a bit mask. */
static const char *perf_parse_names(const char *text, unsigned *mask, bool dtypes)
{
	const int count = dtypes ? NDET_DTYPE_COUNT : NDET_OP_COUNT;
	unsigned result = 0;
	const char *cursor = text;
	while (*cursor != '\0') {
		size_t length = strcspn(cursor, ",");
		bool found = false;
		for (int i = 0; i < count; i++) {
			const char *candidate = dtypes ? ndet_dtype_name((ndet_dtype_t)i)
						       : ndet_op_name((ndet_op_t)i);
			/* nccl-tests' names of the same types (its -d). */
			const char *alias = dtypes ? perf_dtype_alias(i) : NULL;
			if ((strlen(candidate) == length &&
			     strncmp(cursor, candidate, length) == 0) ||
			    (alias != NULL && strlen(alias) == length &&
			     strncmp(cursor, alias, length) == 0) ||
			    (length == 3 && strncmp(cursor, "all", 3) == 0)) {
				result |= 1u << i;
				found = true;
			}
		}
		if (!found)
			return dtypes ? "unknown name in the list (f32 or float, f16 or half, bf16 or "
					"bfloat16, f64 or double, f8e4m3, f8e5m2, all)"
				      : "unknown name in the list (sum, prod, min, max, avg, all)";
		cursor += length;
		if (*cursor == ',')
			cursor++;
	}
	if (result == 0)
		return "empty list";
	*mask = result;
	return NULL;
}

static const char *perf_parse_dtypes(const char *text, void *field)
{
	return perf_parse_names(text, field, true);
}

static const char *perf_parse_ops(const char *text, void *field)
{
	return perf_parse_names(text, field, false);
}

static const char *perf_parse_coll(const char *text, void *field)
{
	if (strcmp(text, "allreduce") == 0)
		*(int *)field = NDET_COLL_ALLREDUCE;
	else if (strcmp(text, "reducescatter") == 0)
		*(int *)field = NDET_COLL_REDUCE_SCATTER;
	else
		return "allreduce or reducescatter";
	return NULL;
}

static const char *perf_parse_string(const char *text, void *field)
{
	if (text[0] == '\0')
		return "empty";
	*(const char **)field = text;
	return NULL;
}

#define PERF_FIELD(member) offsetof(struct perf_options, member)

/*
 * Every option, once: getopt_long's tables and the help are made from it.  A new option
 * is a field in struct perf_options, its default in main() and one row here.
 */
static const struct perf_option perf_option_table[] = {
    {"ranks", 'n', "RANKS", PERF_FIELD(nranks), perf_parse_int, 0,
     "ranks (default: one per GPU; 4 sharing GPU 0 on a one-GPU machine)"},
    {"minbytes", 'b', "BYTES", PERF_FIELD(min_bytes), perf_parse_size, 0,
     "smallest size (default 8; K, M, G suffixes)"},
    {"maxbytes", 'e', "BYTES", PERF_FIELD(max_bytes), perf_parse_size, 0,
     "largest size (default 1G)"},
    {"stepfactor", 'f', "FACTOR", PERF_FIELD(factor), perf_parse_double, 0,
     "size step factor (default 2)"},
    {"datatype", 'd', "TYPES", PERF_FIELD(dtypes), perf_parse_dtypes, 0,
     "comma list of f32,f16,bf16,f64,f8e4m3,f8e5m2 or all (default bf16,f32; fp8 on sm_90+);\n"
     "nccl-tests' float, half, bfloat16 and double too"},
    {"op", 'o', "OPS", PERF_FIELD(ops), perf_parse_ops, 0,
     "comma list of sum,prod,min,max,avg or all (default sum)"},
    {"warmup_iters", 'w', "N", PERF_FIELD(warmup), perf_parse_int, 0,
     "warm-up calls (default 5)"},
    {"iters", 'i', "N", PERF_FIELD(iters), perf_parse_int, 0, "timed calls (default 20)"},
    {"cudagraph", 'G', "MODE", PERF_FIELD(graph), perf_parse_graph_mode, 0,
     "0 eager, 1 CUDA graph, 2 both (default 2)"},
    {"check", 'c', "0|1", PERF_FIELD(check), perf_parse_bool, 0,
     "bit-exact and size-invariance checks (default 1, sizes up to --check-max)"},
    {"check-max", 0, "BYTES", PERF_FIELD(check_max_bytes), perf_parse_size, 0,
     "the largest size checked (default 256M: the CPU reference holds every\n"
     "rank's input in host memory and takes about a second per GiB)"},
    {"nccl", 0, NULL, PERF_FIELD(nccl), NULL, PERF_NCCL_REQUIRED,
     "require the side-by-side NCCL columns: exit 2 when NCCL cannot run here\n"
     "(default: run NCCL whenever it can, else say why not)"},
    {"no-nccl", 0, NULL, PERF_FIELD(nccl), NULL, PERF_NCCL_OFF, "nccl-det only"},
    {"nccl-symmetric", 0, NULL, PERF_FIELD(nccl_symmetric), NULL, 1,
     "also time NCCL on ncclMemAlloc buffers registered as symmetric windows\n"
     "(NCCL >= 2.27; else say why not)"},
    {"csv", 0, "FILE", PERF_FIELD(csv_path), perf_parse_string, 0,
     "also write every row to FILE as CSV (one header line)"},
    {"dry-run", 0, NULL, PERF_FIELD(dry_run), NULL, 1,
     "print the setup and the rows the run would measure, and load NCCL,\n"
     "without running anything on a GPU"},
    {"gpus", 0, "N", PERF_FIELD(assume_gpus), perf_parse_int, 0,
     "with --dry-run: plan as if N GPUs were visible (default: those visible)"},
    {"coll", 'C', "C", PERF_FIELD(coll), perf_parse_coll, 0,
     "allreduce (default) or reducescatter (sizes: whole send buffers,\n"
     "each rank receives size/ranks)"},
    {"link-probe", 0, NULL, PERF_FIELD(link_probe), NULL, 1,
     "measure copy bandwidth local, peer-read and peer-write between GPUs 0 and 1 (one way, "
     "both ways, alongside a local copy), then exit"},
    {"trace", 0, NULL, PERF_FIELD(trace), NULL, 1,
     "after each row, one more call that records the timeline of its first and\n"
     "last block on every rank (where the time of a call goes; the first 510\n"
     "events of a block)"},
    {"help", 'h', NULL, PERF_FIELD(help), NULL, 1, "this help"},
    {"version", 0, NULL, PERF_FIELD(version), NULL, 1, "print the version and exit"},
};

#define PERF_OPTION_COUNT   (sizeof(perf_option_table) / sizeof(perf_option_table[0]))
#define PERF_LONG_ONLY_BASE 256

static void perf_usage(FILE *out)
{
	fprintf(out, "Usage: nccl-det-perf [options]\n");
	for (size_t i = 0; i < PERF_OPTION_COUNT; i++) {
		const struct perf_option *option = &perf_option_table[i];
		char synopsis[64];
		int used = option->key != 0
				   ? snprintf(synopsis, sizeof(synopsis), "-%c, --%s", option->key,
					      option->name)
				   : snprintf(synopsis, sizeof(synopsis), "    --%s", option->name);
		if (option->argument != NULL && used > 0 && (size_t)used < sizeof(synopsis))
			snprintf(synopsis + used, sizeof(synopsis) - (size_t)used, " %s",
				 option->argument);
		/* Continuation lines of the help align under its first line. */
		fprintf(out, "  %-26s ", synopsis);
		for (const char *line = option->help; *line != '\0';) {
			size_t length = strcspn(line, "\n");
			fprintf(out, "%.*s\n", (int)length, line);
			line += length;
			if (*line == '\n') {
				line++;
				fprintf(out, "  %-26s ", "");
			}
		}
	}
	fprintf(out, "Settings come from NCCL_DET_* variables (doc/settings.md); NCCL is the library\n"
		     "NCCL_DET_NCCL_LIBRARY names, else libnccl.so.2.  ratio = NCCL time /\n"
		     "nccl-det time: above 1, nccl-det is faster; s-ratio (--nccl-symmetric) is\n"
		     "the same for NCCL on symmetric windows.\n");
}

/* Parse argv into `o`; exits 2 with a message on a bad option or value. */
static void perf_parse_options(int argc, char **argv, struct perf_options *o)
{
	struct option long_options[PERF_OPTION_COUNT + 1];
	char short_options[3 * PERF_OPTION_COUNT + 1];
	size_t used = 0;
	for (size_t i = 0; i < PERF_OPTION_COUNT; i++) {
		const struct perf_option *option = &perf_option_table[i];
		int key = option->key != 0 ? option->key : PERF_LONG_ONLY_BASE + (int)i;
		long_options[i] = (struct option){option->name,
						  option->argument != NULL ? required_argument
									   : no_argument,
						  NULL, key};
		if (option->key != 0) {
			short_options[used++] = (char)option->key;
			if (option->argument != NULL)
				short_options[used++] = ':';
		}
	}
	long_options[PERF_OPTION_COUNT] = (struct option){NULL, 0, NULL, 0};
	short_options[used] = '\0';

	int key;
	while ((key = getopt_long(argc, argv, short_options, long_options, NULL)) != -1) {
		const struct perf_option *option = NULL;
		for (size_t i = 0; i < PERF_OPTION_COUNT && option == NULL; i++) {
			int own = perf_option_table[i].key != 0 ? perf_option_table[i].key
								: PERF_LONG_ONLY_BASE + (int)i;
			if (own == key)
				option = &perf_option_table[i];
		}
		if (option == NULL) {
			perf_usage(stderr);
			exit(2);
		}
		void *field = (char *)o + option->offset;
		if (option->parse == NULL) {
			*(int *)field = option->flag_value;
			continue;
		}
		const char *why = option->parse(optarg, field);
		if (why != NULL) {
			fprintf(stderr, "nccl-det-perf: --%s %s: %s\n", option->name, optarg, why);
			exit(2);
		}
	}
	if (optind < argc) {
		fprintf(stderr, "nccl-det-perf: unexpected argument '%s'\n", argv[optind]);
		exit(2);
	}
	const char *why = NULL;
	if (o->factor <= 1.0)
		why = "--stepfactor must be above 1";
	else if (o->iters < 1)
		why = "--iters must be at least 1";
	else if (o->min_bytes < 1 || o->max_bytes < o->min_bytes)
		why = "sizes must satisfy 1 <= --minbytes <= --maxbytes";
	else if (o->assume_gpus >= 0 && !o->dry_run)
		why = "--gpus only goes with --dry-run";
	else if (o->nranks > NDET_MAX_RANKS)
		why = "--ranks is above the largest number of ranks nccl-det supports";
	if (why != NULL) {
		fprintf(stderr, "nccl-det-perf: %s\n", why);
		exit(2);
	}
}

/* ---------------------------------------------------------------- the real NCCL */

struct perf_nccl {
	void *handle;
	char path[4096];
	int version;
	ncclResult_t (*get_version)(int *version);
	ncclResult_t (*comm_init_all)(ncclComm_t *comms, int ndev, const int *devlist);
	ncclResult_t (*all_reduce)(const void *sendbuff, void *recvbuff, size_t count,
				   ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
				   cudaStream_t stream);
	ncclResult_t (*reduce_scatter)(const void *sendbuff, void *recvbuff, size_t recvcount,
				       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
				       cudaStream_t stream);
	ncclResult_t (*comm_get_async_error)(ncclComm_t comm, ncclResult_t *error);
	ncclResult_t (*comm_destroy)(ncclComm_t comm);
	const char *(*get_error_string)(ncclResult_t result);
	/* Symmetric windows (NCCL >= 2.27): NULL when the library lacks them. */
	ncclResult_t (*mem_alloc)(void **ptr, size_t size);
	ncclResult_t (*mem_free)(void *ptr);
	ncclResult_t (*window_register)(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win,
					int flags);
	ncclResult_t (*window_deregister)(ncclComm_t comm, ncclWindow_t win);
};

struct perf_nccl_symbol {
	const char *name;
	size_t offset;
};

static const struct perf_nccl_symbol perf_nccl_symbols[] = {
    {"ncclGetVersion", offsetof(struct perf_nccl, get_version)},
    {"ncclCommInitAll", offsetof(struct perf_nccl, comm_init_all)},
    {"ncclAllReduce", offsetof(struct perf_nccl, all_reduce)},
    {"ncclReduceScatter", offsetof(struct perf_nccl, reduce_scatter)},
    {"ncclCommGetAsyncError", offsetof(struct perf_nccl, comm_get_async_error)},
    {"ncclCommDestroy", offsetof(struct perf_nccl, comm_destroy)},
    {"ncclGetErrorString", offsetof(struct perf_nccl, get_error_string)},
};

/* Looked up only for --nccl-symmetric; an older NCCL runs without them. */
static const struct perf_nccl_symbol perf_nccl_symmetric_symbols[] = {
    {"ncclMemAlloc", offsetof(struct perf_nccl, mem_alloc)},
    {"ncclMemFree", offsetof(struct perf_nccl, mem_free)},
    {"ncclCommWindowRegister", offsetof(struct perf_nccl, window_register)},
    {"ncclCommWindowDeregister", offsetof(struct perf_nccl, window_deregister)},
};

#define PERF_COUNT_OF(array) (sizeof(array) / sizeof((array)[0]))

/* Fill `nccl`'s pointers named in `table`; NULL, or the first name the library lacks. */
static const char *perf_nccl_resolve(struct perf_nccl *nccl, const struct perf_nccl_symbol *table,
				     size_t count)
{
	for (size_t i = 0; i < count; i++) {
		void *symbol = dlsym(nccl->handle, table[i].name);
		if (symbol == NULL)
			return table[i].name;
		/* POSIX: a data pointer from dlsym holds a function's address. */
		memcpy((char *)nccl + table[i].offset, &symbol, sizeof(symbol));
	}
	return NULL;
}

static const ncclDataType_t perf_nccl_dtypes[NDET_DTYPE_COUNT] = {
    [NDET_DTYPE_F32] = ncclFloat32,
    [NDET_DTYPE_F16] = ncclFloat16,
    [NDET_DTYPE_BF16] = ncclBfloat16,
    [NDET_DTYPE_F64] = ncclFloat64,
    [NDET_DTYPE_F8E4M3] = NDET_NCCL_FP8_E4M3,
    [NDET_DTYPE_F8E5M2] = NDET_NCCL_FP8_E5M2,
};

static const ncclRedOp_t perf_nccl_ops[NDET_OP_COUNT] = {
    [NDET_OP_SUM] = ncclSum, [NDET_OP_PROD] = ncclProd, [NDET_OP_MIN] = ncclMin,
    [NDET_OP_MAX] = ncclMax, [NDET_OP_AVG] = ncclAvg,
};

/*
 * Why NCCL cannot run on this layout of ranks, or NULL.  Ranks are threads of one
 * process; NCCL refuses two ranks of one communicator on one GPU of one process.
 */
static const char *perf_nccl_layout_problem(int nranks, int ngpus)
{
	if (nranks <= ngpus)
		return NULL;
	return "the ranks share GPU 0 in one process, which NCCL refuses (\"Duplicate GPU "
	       "detected\"); use at most one rank per GPU (-n)";
}

/* Load the real NCCL into `nccl`; false with the reason in `why` when it cannot be. */
static bool perf_nccl_load(struct perf_nccl *nccl, char *why, size_t size)
{
	const char *configured = ndet_settings_get()->nccl_library;
	const char *name = configured[0] != '\0' ? configured : "libnccl.so.2";
	memset(nccl, 0, sizeof(*nccl));
	/* RTLD_LOCAL: NCCL's names stay out of the process's global scope. */
	nccl->handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (nccl->handle == NULL) {
		snprintf(why, size, "cannot load %s (%s); set NCCL_DET_NCCL_LIBRARY to the real "
				    "libnccl.so.2",
			 name, dlerror());
		return false;
	}
	/* Every copy of nccl-det exports ncclDetGetVersion; the real NCCL never does. */
	if (dlsym(nccl->handle, "ncclDetGetVersion") != NULL) {
		snprintf(why, size, "%s is nccl-det (its drop-in libnccl.so.2), not NCCL; set "
				    "NCCL_DET_NCCL_LIBRARY to the real libnccl.so.2",
			 name);
		goto close_library;
	}
	const char *missing =
		perf_nccl_resolve(nccl, perf_nccl_symbols, PERF_COUNT_OF(perf_nccl_symbols));
	if (missing != NULL) {
		snprintf(why, size, "%s has no %s", name, missing);
		goto close_library;
	}
	Dl_info info;
	snprintf(nccl->path, sizeof(nccl->path), "%s",
		 dladdr((void *)nccl->all_reduce, &info) != 0 && info.dli_fname != NULL
			 ? info.dli_fname
			 : name);
	ncclResult_t result = nccl->get_version(&nccl->version);
	if (result != ncclSuccess) {
		snprintf(why, size, "%s: ncclGetVersion failed (%d)", nccl->path, (int)result);
		goto close_library;
	}
	return true;

close_library:
	/* Left loaded: a copy of nccl-det (or an NCCL) carries a static CUDA runtime whose
	 * exit handlers not every runtime drops on dlclose (ThreadSanitizer's do not). */
	nccl->handle = NULL;
	return false;
}

/* ---------------------------------------------------------------- rows */

/* PERF_NCCL_SYMMETRIC: NCCL on buffers registered as symmetric windows. */
enum perf_impl { PERF_NDET = 0, PERF_NCCL, PERF_NCCL_SYMMETRIC, PERF_IMPL_COUNT };
enum perf_mode { PERF_EAGER = 0, PERF_GRAPH, PERF_MODE_COUNT };

static const char *const perf_mode_names[PERF_MODE_COUNT] = {"eager", "graph"};

/* One line of the table: one size, dtype and op. */
struct perf_row {
	size_t bytes, count;
	ndet_dtype_t dtype;
	ndet_op_t op;
	ndet_path_t path;
	uint32_t blocks; /* the plan's grid and steps (0: no kernel) */
	uint64_t steps;
	double seconds[PERF_MODE_COUNT][PERF_IMPL_COUNT]; /* per call; < 0 = not run */
	const char *exact, *invariant;                    /* "OK", "FAIL", "-" */
	long long nccl_differ;                            /* elements; < 0 = not checked */
	double kernel_gbps, vs_copy;                      /* < 0 = not applicable */
};

/* Ratio NCCL / nccl-det over one class of sizes in one mode. */
struct perf_ratio_stats {
	int rows;
	double min, log_sum;
};

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
	char *nccl_host; /* rank 0's NCCL result */
	/* Written by rank 0. */
	double copy_gbps, flag_rtt_us;
	double best_ratio_large;
	int large_rows;
	double ratio_sum_large;
	int failures;
	/* [impl][mode][small, large]; the PERF_NDET row stays empty. */
	struct perf_ratio_stats ratios[PERF_IMPL_COUNT][PERF_MODE_COUNT][2];
	uint64_t *flag_pair[2];
};

struct perf_rank {
	struct perf_world *world;
	int rank;
	cudaStream_t stream;
	char *send, *recv, *recv2, *host_in;
	/* --nccl-symmetric: from ncclMemAlloc, registered as windows. */
	char *symmetric_send, *symmetric_recv;
	ncclWindow_t symmetric_windows[2];
};

static struct ndet_engine_config perf_engine_config(const struct perf_world *world, int rank)
{
	const struct ndet_settings *settings = ndet_settings_get();
	return (struct ndet_engine_config){
		.rank = rank,
		.nranks = world->options.nranks,
		.cuda_device = rank % world->ngpus,
		.pool_size = settings->pool_size,
		.max_blocks = settings->max_blocks,
		/* What the setup will agree (rank r on GPU r % ngpus), for planned rows. */
		.ranks_per_device = (world->options.nranks + world->ngpus - 1) / world->ngpus,
		.device_sms = world->device_sms,
		.oneshot_max = settings->oneshot_max,
		.ll_max = settings->ll_max,
		.push_min = settings->push_min,
		.timeout_ms = 20000,
		.max_memory = settings->max_memory,
		.settings_hash = ndet_settings_agreement_hash(settings),
		.test_fail_rank = -1,
	};
}

/*
 * Bytes one rank's kernel reads + writes for one call (see kernels/ndet_kernels.h),
 * with this tool's send buffers, which cudaMalloc aligns: two-shot and push take
 * the rank's own segment straight from sendbuff, so it is neither copied into the
 * pool nor read back from it.
 */
static double perf_kernel_bytes(ndet_path_t path, double bytes, int n)
{
	if (path == NDET_PATH_ONESHOT)
		return (n + 3) * bytes;
	if (path == NDET_PATH_LL) /* send read once, 2x lines to and from n-1 peers, out */
		return bytes + 4 * (n - 1) * bytes + bytes;
	/*
	 * Two-shot and push alike: the other n - 1 segments copied into a pool (read +
	 * write), n segments read by the reduce, recvbuff and n - 1 pool copies of the
	 * result written, n - 1 reduced segments gathered (read + write).
	 */
	if (path == NDET_PATH_TWOSHOT || path == NDET_PATH_PUSH)
		return 2 * (n - 1) * bytes / n + bytes + bytes + 2 * (n - 1) * bytes / n;
	/* Reduce-scatter (bytes: the send buffer): copy-in, n segments read, recvbuff. */
	if (path == NDET_PATH_SCATTER)
		return 2 * bytes + bytes + bytes / n;
	return 2 * bytes;
}

/* Calls visit() for every (dtype, op, size) of the run, in the order of the table. */
static void perf_for_each_row(const struct perf_world *world,
			      void (*visit)(void *context, struct perf_row *row), void *context)
{
	const struct perf_options *o = &world->options;
	for (int dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
		if (!(o->dtypes & (1u << dtype)))
			continue;
		for (int op = 0; op < NDET_OP_COUNT; op++) {
			if (!(o->ops & (1u << op)))
				continue;
			const size_t size = ndet_dtype_size((ndet_dtype_t)dtype);
			for (double b = (double)o->min_bytes; b <= (double)o->max_bytes + 0.5;
			     b = b * o->factor > b ? b * o->factor : b + 1) {
				struct perf_row row = {
					.count = (size_t)b / size > 0 ? (size_t)b / size : 1,
					.dtype = (ndet_dtype_t)dtype,
					.op = (ndet_op_t)op,
					.path = NDET_PATH_NONE,
					.exact = "-",
					.invariant = "-",
					.nccl_differ = -1,
					.kernel_gbps = -1,
					.vs_copy = -1,
				};
				const size_t n = (size_t)o->nranks;
				if (o->coll == NDET_COLL_REDUCE_SCATTER)
					row.count = row.count < n ? n : row.count / n * n;
				row.bytes = row.count * size;
				for (int m = 0; m < PERF_MODE_COUNT; m++)
					for (int i = 0; i < PERF_IMPL_COUNT; i++)
						row.seconds[m][i] = -1;
				struct ndet_engine_config config = perf_engine_config(world, 0);
				const struct ndet_engine_call call = {
					.coll = (ndet_coll_t)o->coll,
					.count = o->coll == NDET_COLL_REDUCE_SCATTER ? row.count / n
										     : row.count,
					.dtype = row.dtype,
					.op = row.op,
					.root = -1};
				struct ndet_plan plan;
				if (ndet_engine_plan_call_for_config(&config, &call, &plan) == NDET_OK) {
					row.path = plan.path;
					row.blocks = plan.blocks;
					row.steps = plan.steps;
				}
				visit(context, &row);
			}
		}
	}
}

/* `value` with `format`, or "-" when it is negative (not measured). */
static const char *perf_cell(char *buffer, size_t size, const char *format, double value)
{
	if (value < 0)
		return "-";
	snprintf(buffer, size, format, value);
	return buffer;
}

static double perf_busbw(const struct perf_world *world, const struct perf_row *row,
			 double seconds)
{
	const int n = world->options.nranks;
	if (seconds <= 0)
		return -1;
	const double factor = world->options.coll == NDET_COLL_REDUCE_SCATTER ? 1.0 : 2.0;
	return (double)row->bytes / seconds / 1e9 * (factor * (n - 1) / n);
}

/* `impl`'s time over nccl-det's in one mode; < 0 when either was not measured. */
static double perf_ratio(const struct perf_row *row, int mode, enum perf_impl impl)
{
	const double ndet = row->seconds[mode][PERF_NDET], other = row->seconds[mode][impl];
	return ndet > 0 && other > 0 ? other / ndet : -1;
}

static void perf_print_header(struct perf_world *world)
{
	const bool symmetric = world->options.nccl_symmetric;
	printf("# %12s %12s %5s %5s %6s %8s |", "", "", "", "", "", "");
	for (int m = 0; m < PERF_MODE_COUNT; m++)
		printf(" %s: %-*s|", perf_mode_names[m], symmetric ? 66 : 38,
		       symmetric ? "nccl-det, NCCL, NCCL/nccl-det, NCCL-symm, symm/nccl-det"
				 : "nccl-det, NCCL, NCCL/nccl-det");
	printf("\n");
	printf("# %12s %12s %5s %5s %6s %8s |", "size(B)", "count", "type", "redop", "path",
	       "grid");
	for (int m = 0; m < PERF_MODE_COUNT; m++) {
		printf(" %9s %8s %9s %8s %6s", "ndet(us)", "busbw", "nccl(us)", "busbw", "ratio");
		if (symmetric)
			printf(" %9s %8s %8s", "symm(us)", "busbw", "s-ratio");
		printf(" |");
	}
	printf(" %5s %8s %9s | %9s %7s\n", "exact", "size-inv", "nccl-diff", "kern GB/s",
	       "vs copy");
	if (world->csv != NULL) {
		fprintf(world->csv, "ranks,size_bytes,count,dtype,op,path,blocks,steps");
		for (int m = 0; m < PERF_MODE_COUNT; m++)
			fprintf(world->csv,
				",%1$s_ndet_us,%1$s_ndet_busbw_gbps,%1$s_nccl_us,"
				"%1$s_nccl_busbw_gbps,%1$s_ratio,%1$s_nccl_symm_us,"
				"%1$s_nccl_symm_busbw_gbps,%1$s_symm_ratio",
				perf_mode_names[m]);
		fprintf(world->csv, ",exact,size_invariant,nccl_differ_elements,kernel_gbps,"
				    "vs_copy_percent\n");
	}
}

/* CSV field: the value, or empty when not measured. */
static void perf_csv_value(FILE *csv, const char *format, double value)
{
	fputc(',', csv);
	if (value >= 0)
		fprintf(csv, format, value);
}

static void perf_print_row(struct perf_world *world, const struct perf_row *row)
{
	char cells[8][32];
	/* blocks x steps of the plan: how the engine cuts the message. */
	char grid[32] = "-";
	if (row->blocks > 0)
		snprintf(grid, sizeof(grid), "%ux%llu", row->blocks, (unsigned long long)row->steps);
	printf("  %12zu %12zu %5s %5s %6s %8s |", row->bytes, row->count,
	       ndet_dtype_name(row->dtype), ndet_op_name(row->op), ndet_plan_path_name(row->path), grid);
	for (int m = 0; m < PERF_MODE_COUNT; m++) {
		const double *s = row->seconds[m];
		printf(" %9s %8s %9s %8s %6s",
		       perf_cell(cells[0], sizeof(cells[0]), "%.2f", s[PERF_NDET] * 1e6),
		       perf_cell(cells[1], sizeof(cells[1]), "%.2f",
				 perf_busbw(world, row, s[PERF_NDET])),
		       perf_cell(cells[2], sizeof(cells[2]), "%.2f", s[PERF_NCCL] * 1e6),
		       perf_cell(cells[3], sizeof(cells[3]), "%.2f",
				 perf_busbw(world, row, s[PERF_NCCL])),
		       perf_cell(cells[4], sizeof(cells[4]), "%.2f",
				 perf_ratio(row, m, PERF_NCCL)));
		if (world->options.nccl_symmetric)
			printf(" %9s %8s %8s",
			       perf_cell(cells[5], sizeof(cells[5]), "%.2f",
					 s[PERF_NCCL_SYMMETRIC] * 1e6),
			       perf_cell(cells[6], sizeof(cells[6]), "%.2f",
					 perf_busbw(world, row, s[PERF_NCCL_SYMMETRIC])),
			       perf_cell(cells[7], sizeof(cells[7]), "%.2f",
					 perf_ratio(row, m, PERF_NCCL_SYMMETRIC)));
		printf(" |");
	}
	printf(" %5s %8s %9s | %9s %7s\n", row->exact, row->invariant,
	       perf_cell(cells[0], sizeof(cells[0]), "%.0f", (double)row->nccl_differ),
	       perf_cell(cells[1], sizeof(cells[1]), "%.1f", row->kernel_gbps),
	       perf_cell(cells[2], sizeof(cells[2]), "%.1f%%", 100 * row->vs_copy));
	if (world->csv == NULL)
		return;
	fprintf(world->csv, "%d,%zu,%zu,%s,%s,%s", world->options.nranks, row->bytes, row->count,
		ndet_dtype_name(row->dtype), ndet_op_name(row->op), ndet_plan_path_name(row->path));
	if (row->blocks > 0)
		fprintf(world->csv, ",%u,%llu", row->blocks, (unsigned long long)row->steps);
	else
		fputs(",,", world->csv);
	for (int m = 0; m < PERF_MODE_COUNT; m++) {
		const double *s = row->seconds[m];
		perf_csv_value(world->csv, "%.3f", s[PERF_NDET] * 1e6);
		perf_csv_value(world->csv, "%.3f", perf_busbw(world, row, s[PERF_NDET]));
		perf_csv_value(world->csv, "%.3f", s[PERF_NCCL] * 1e6);
		perf_csv_value(world->csv, "%.3f", perf_busbw(world, row, s[PERF_NCCL]));
		perf_csv_value(world->csv, "%.4f", perf_ratio(row, m, PERF_NCCL));
		perf_csv_value(world->csv, "%.3f", s[PERF_NCCL_SYMMETRIC] * 1e6);
		perf_csv_value(world->csv, "%.3f", perf_busbw(world, row, s[PERF_NCCL_SYMMETRIC]));
		perf_csv_value(world->csv, "%.4f", perf_ratio(row, m, PERF_NCCL_SYMMETRIC));
	}
	/* "-" (not checked) is an empty field, like every value not measured. */
	fprintf(world->csv, ",%s,%s", strcmp(row->exact, "-") != 0 ? row->exact : "",
		strcmp(row->invariant, "-") != 0 ? row->invariant : "");
	perf_csv_value(world->csv, "%.0f", (double)row->nccl_differ);
	perf_csv_value(world->csv, "%.1f", row->kernel_gbps);
	perf_csv_value(world->csv, "%.1f", 100 * row->vs_copy);
	fputc('\n', world->csv);
}

static void perf_note_ratios(struct perf_world *world, const struct perf_row *row)
{
	int size_class;
	if (row->bytes <= PERF_SMALL_MAX_BYTES)
		size_class = 0;
	else if (row->bytes >= PERF_LARGE_MIN_BYTES)
		size_class = 1;
	else
		return;
	for (int impl = PERF_NCCL; impl < PERF_IMPL_COUNT; impl++)
		for (int m = 0; m < PERF_MODE_COUNT; m++) {
			double ratio = perf_ratio(row, m, (enum perf_impl)impl);
			if (ratio <= 0)
				continue;
			struct perf_ratio_stats *stats = &world->ratios[impl][m][size_class];
			if (stats->rows == 0 || ratio < stats->min)
				stats->min = ratio;
			stats->log_sum += log(ratio);
			stats->rows++;
		}
}

static void perf_print_ratio_summary(const struct perf_world *world)
{
	/*
	 * DESIGN.md section 9: against classic NCCL <= 0.8x its latency and >= 0.95x its
	 * busbw; against NCCL on symmetric windows <= 1.0x its latency (no busbw target).
	 */
	static const char *const names[PERF_IMPL_COUNT] = {
	    [PERF_NCCL] = "NCCL", [PERF_NCCL_SYMMETRIC] = "NCCL-symm"};
	static const char *const classes[PERF_IMPL_COUNT][2] = {
	    [PERF_NCCL] = {"<= 64 KiB (target >= 1.25)", ">= 64 MiB (target >= 0.95)"},
	    [PERF_NCCL_SYMMETRIC] = {"<= 64 KiB (target >= 1.0)", ">= 64 MiB (no target)"}};
	for (int impl = PERF_NCCL; impl < PERF_IMPL_COUNT; impl++)
		for (int m = 0; m < PERF_MODE_COUNT; m++)
			for (int c = 0; c < 2; c++) {
				const struct perf_ratio_stats *stats = &world->ratios[impl][m][c];
				if (stats->rows == 0)
					continue;
				printf("# %s/nccl-det time, %s, %s: geometric mean %.2f, worst "
				       "%.2f over %d rows\n",
				       names[impl], perf_mode_names[m], classes[impl][c],
				       exp(stats->log_sum / stats->rows), stats->min, stats->rows);
			}
}

/* ---------------------------------------------------------------- running */

static double perf_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static ndet_status_t perf_allgather(void *context, const void *send, void *recv, size_t bytes)
{
	struct perf_rank *me = context;
	struct perf_world *world = me->world;
	world->sends[me->rank] = send;
	pthread_barrier_wait(&world->barrier);
	for (int r = 0; r < world->options.nranks; r++) {
		if (cudaMemcpyAsync((char *)recv + (size_t)r * bytes, world->sends[r], bytes,
				    cudaMemcpyDefault, 0) != cudaSuccess)
			return NDET_ERR_CUDA;
	}
	/*
	 * The contract is "complete when it returns": a device-to-device cudaMemcpy may
	 * return before its copy lands, and the peers reuse their send buffers once past
	 * the barrier below.  The legacy stream: no stream of our own (several ranks
	 * share one GPU's hardware queues in one process).
	 */
	if (cudaStreamSynchronize(0) != cudaSuccess)
		return NDET_ERR_CUDA;
	pthread_barrier_wait(&world->barrier);
	return NDET_OK;
}

static void perf_fill(ndet_dtype_t dtype, void *buffer, size_t count, uint64_t seed)
{
	uint64_t state = seed * 0x9E3779B97F4A7C15ull + 7;
	for (size_t i = 0; i < count; i++) {
		state ^= state << 13;
		state ^= state >> 7;
		state ^= state << 17;
		double value = ldexp(1.0 + (double)(state >> 40) / 16777216.0,
				     (int)(state % 17) - 8) *
			       ((state >> 20) & 1 ? -1.0 : 1.0);
		switch (dtype) {
		case NDET_DTYPE_F32:
			((float *)buffer)[i] = (float)value;
			break;
		case NDET_DTYPE_F64:
			((double *)buffer)[i] = value;
			break;
		case NDET_DTYPE_F16:
			((uint16_t *)buffer)[i] = ndet_float_to_half((float)value);
			break;
		case NDET_DTYPE_BF16:
			((uint16_t *)buffer)[i] = ndet_float_to_bfloat16((float)value);
			break;
		case NDET_DTYPE_F8E4M3:
			/* 2^-4 ... 2^4: sums of 16 stay below its largest finite, 448 */
			((uint8_t *)buffer)[i] = ndet_float_to_fp8_e4m3((float)ldexp(value, -4));
			break;
		case NDET_DTYPE_F8E5M2:
			((uint8_t *)buffer)[i] = ndet_float_to_fp8_e5m2((float)value);
			break;
		default:
			break;
		}
	}
}

static uint64_t perf_seed(int rank, size_t count)
{
	return (uint64_t)rank * 7777 + count;
}

/* A failed call would time as a fast no-op: stop with the reason instead. */
static void perf_check_engine(struct perf_rank *me)
{
	uint32_t kernel_error = 0;
	if (ndet_engine_error(me->world->engines[me->rank], &kernel_error) != NDET_OK) {
		fprintf(stderr,
			"nccl-det-perf: rank %d: the engine failed (kernel error %u: 1 timeout, 2 "
			"abort, 3 diverging call, 4 peer failure). With ranks sharing one GPU, "
			"every rank's blocks must be resident at once: lower NCCL_DET_MAX_BLOCKS so "
			"that ranks x blocks fits the GPU.\n",
			me->rank, kernel_error);
		perf_die();
	}
}

static void perf_check_nccl(struct perf_rank *me, ncclResult_t result, const char *what)
{
	const struct perf_nccl *nccl = &me->world->nccl;
	if (result == ncclSuccess &&
	    nccl->comm_get_async_error(me->world->comms[me->rank], &result) == ncclSuccess &&
	    result == ncclSuccess)
		return;
	fprintf(stderr, "nccl-det-perf: rank %d: NCCL %s failed: %s\n", me->rank, what,
		nccl->get_error_string(result));
	perf_die();
}

static void perf_launch(struct perf_rank *me, enum perf_impl impl, const void *send, void *recv,
			const struct perf_row *row)
{
	struct perf_world *world = me->world;
	const bool scatter = world->options.coll == NDET_COLL_REDUCE_SCATTER;
	/* Reduce-scatter: row->count is the whole send buffer, a multiple of the ranks. */
	const size_t count = scatter ? row->count / (size_t)world->options.nranks : row->count;
	if (impl == PERF_NDET) {
		const struct ndet_engine_call call = {.coll = (ndet_coll_t)world->options.coll,
						      .sendbuff = send,
						      .recvbuff = recv,
						      .count = count,
						      .dtype = row->dtype,
						      .op = row->op,
						      .root = -1};
		/* Failures are read from the engine after the calls (perf_check_engine). */
		(void)ndet_engine_collective(world->engines[me->rank], &call, me->stream);
		return;
	}
	ncclResult_t result =
		(scatter ? world->nccl.reduce_scatter : world->nccl.all_reduce)(
			send, recv, count, perf_nccl_dtypes[row->dtype], perf_nccl_ops[row->op],
			world->comms[me->rank], me->stream);
	if (result != ncclSuccess)
		perf_check_nccl(me, result, scatter ? "ncclReduceScatter" : "ncclAllReduce");
}

/* Time `iters` calls (eager) or one graph of `iters` calls, between barriers. */
static double perf_time(struct perf_rank *me, enum perf_impl impl, enum perf_mode mode,
			const struct perf_row *row)
{
	struct perf_world *world = me->world;
	const int iters = world->options.iters;
	const bool symmetric = impl == PERF_NCCL_SYMMETRIC;
	const char *send = symmetric ? me->symmetric_send : me->send;
	char *recv = symmetric ? me->symmetric_recv : me->recv;
	cudaGraphExec_t exec = NULL;
	/*
	 * Eager warm-up first in both modes: NCCL connects lazily at a communicator's
	 * first call of a kind, which fails inside a capture ("internal error", NCCL
	 * 2.28 with -G 1).
	 */
	for (int i = 0; i < world->options.warmup; i++)
		perf_launch(me, impl, send, recv, row);
	PERF_CHECK(cudaStreamSynchronize(me->stream));
	pthread_barrier_wait(&world->barrier);
	if (mode == PERF_GRAPH) {
		cudaGraph_t graph;
		PERF_CHECK(cudaStreamBeginCapture(me->stream, cudaStreamCaptureModeThreadLocal));
		for (int i = 0; i < iters; i++)
			perf_launch(me, impl, send, recv, row);
		PERF_CHECK(cudaStreamEndCapture(me->stream, &graph));
		PERF_CHECK(cudaGraphInstantiate(&exec, graph, 0));
		PERF_CHECK(cudaGraphDestroy(graph));
		PERF_CHECK(cudaGraphLaunch(exec, me->stream)); /* the graph's own warm-up */
	}
	PERF_CHECK(cudaStreamSynchronize(me->stream));
	pthread_barrier_wait(&world->barrier);
	double start = perf_now();
	if (mode == PERF_GRAPH) {
		PERF_CHECK(cudaGraphLaunch(exec, me->stream));
	} else {
		for (int i = 0; i < iters; i++)
			perf_launch(me, impl, send, recv, row);
	}
	PERF_CHECK(cudaStreamSynchronize(me->stream));
	pthread_barrier_wait(&world->barrier);
	double elapsed = perf_now() - start;
	if (impl == PERF_NDET)
		perf_check_engine(me);
	else
		perf_check_nccl(me, ncclSuccess, "all-reduce");
	if (exec != NULL)
		PERF_CHECK(cudaGraphExecDestroy(exec));
	return elapsed / iters;
}

static void perf_measure_copy(struct perf_world *world)
{
	const size_t bytes = 256u << 20;
	void *a, *b;
	cudaEvent_t start, stop;
	PERF_CHECK(cudaMalloc(&a, bytes));
	PERF_CHECK(cudaMalloc(&b, bytes));
	PERF_CHECK(cudaEventCreate(&start));
	PERF_CHECK(cudaEventCreate(&stop));
	PERF_CHECK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
	PERF_CHECK(cudaEventRecord(start, 0));
	for (int i = 0; i < 10; i++)
		PERF_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0));
	PERF_CHECK(cudaEventRecord(stop, 0));
	PERF_CHECK(cudaEventSynchronize(stop));
	float ms = 0;
	PERF_CHECK(cudaEventElapsedTime(&ms, start, stop));
	world->copy_gbps = 2.0 * (double)bytes * 10 / (ms * 1e-3) / 1e9;
	PERF_CHECK(cudaFree(a));
	PERF_CHECK(cudaFree(b));
	PERF_CHECK(cudaEventDestroy(start));
	PERF_CHECK(cudaEventDestroy(stop));
}

/* Ranks 0 and 1 ping-pong a flag; the floor under any all-reduce's latency. */
static void perf_measure_flag_rtt(struct perf_rank *me)
{
	struct perf_world *world = me->world;
	const int iters = 2000;
	if (me->rank < 2) {
		PERF_CHECK(cudaMalloc((void **)&world->flag_pair[me->rank], sizeof(uint64_t)));
		PERF_CHECK(cudaMemset(world->flag_pair[me->rank], 0, sizeof(uint64_t)));
		PERF_CHECK(cudaDeviceSynchronize());
	}
	pthread_barrier_wait(&world->barrier);
	if (me->rank < 2) {
		int peer = 1 - me->rank;
		if (world->ngpus > 1 && me->rank == 0) {
			cudaError_t err = cudaDeviceEnablePeerAccess(peer % world->ngpus, 0);
			if (err != cudaSuccess)
				(void)cudaGetLastError();
		}
		uint64_t *result = NULL;
		PERF_CHECK(cudaMalloc((void **)&result, sizeof(uint64_t)));
		PERF_CHECK((cudaError_t)ndet_kernel_flag_pingpong(world->flag_pair[me->rank],
								  world->flag_pair[peer], iters,
								  me->rank == 0, result, me->stream));
		PERF_CHECK(cudaStreamSynchronize(me->stream));
		uint64_t ns = 0;
		PERF_CHECK(cudaMemcpy(&ns, result, sizeof(ns), cudaMemcpyDeviceToHost));
		if (me->rank == 0)
			world->flag_rtt_us = ns == 0 ? -1.0 : (double)ns / iters / 1000.0;
		PERF_CHECK(cudaFree(result));
	}
	pthread_barrier_wait(&world->barrier);
	if (me->rank < 2)
		PERF_CHECK(cudaFree(world->flag_pair[me->rank]));
}

/* Elements whose bits differ between `got` and `want` (element size `size`). */
static long long perf_count_differ(const char *got, const char *want, size_t count, size_t size)
{
	long long differ = 0;
	for (size_t i = 0; i < count; i++)
		differ += memcmp(got + i * size, want + i * size, size) != 0;
	return differ;
}

/*
 * Rank 0, after every rank's fresh result is in recv_host: bit-exact against the CPU
 * reference, size invariance against the offset call in recv2, NCCL's elements off
 * the tree.
 */
static void perf_judge(struct perf_rank *me, struct perf_row *row)
{
	struct perf_world *world = me->world;
	const int n = world->options.nranks;
	const size_t size = ndet_dtype_size(row->dtype), bytes = row->bytes;
	void *inputs[NDET_MAX_RANKS];
	const void *views[NDET_MAX_RANKS];
	for (int r = 0; r < n; r++) {
		inputs[r] = malloc(bytes);
		perf_fill(row->dtype, inputs[r], row->count, perf_seed(r, row->count));
		views[r] = inputs[r];
	}
	char *expected = malloc(bytes);
	ndet_reference_allreduce(views, n, expected, row->count, row->dtype, row->op);
	/* Reduce-scatter: rank r's block is block r of the all-reduce, bit for bit. */
	const bool scatter = world->options.coll == NDET_COLL_REDUCE_SCATTER;
	const size_t block = scatter ? bytes / (size_t)n : bytes;
	bool same = true;
	for (int r = 0; r < n && same; r++)
		same = memcmp(world->recv_host[r], expected + (scatter ? (size_t)r * block : 0),
			      block) == 0;
	row->exact = same ? "OK" : "FAIL";
	for (int r = 0; r < n; r++)
		free(inputs[r]);
	if (row->count > 1 && !scatter) {
		char *second = malloc(bytes);
		PERF_CHECK(cudaMemcpy(second, me->recv2 + size + 8, bytes - size,
				      cudaMemcpyDeviceToHost));
		row->invariant =
			memcmp(second, world->recv_host[0] + size, bytes - size) == 0 ? "OK"
										      : "FAIL";
		free(second);
	}
	if (world->nccl_on)
		row->nccl_differ = perf_count_differ(world->nccl_host, expected, block / size, size);
	free(expected);
	if (!same || strcmp(row->invariant, "FAIL") == 0)
		world->failures++;
}

/* One fresh call, the same elements [1, count) in a smaller call at another offset,
 * and NCCL's result of the fresh call. */
static void perf_check(struct perf_rank *me, struct perf_row *row)
{
	struct perf_world *world = me->world;
	const size_t size = ndet_dtype_size(row->dtype), bytes = row->bytes;
	PERF_CHECK(cudaMemsetAsync(me->recv, 0x5a, bytes, me->stream));
	PERF_CHECK(cudaMemsetAsync(me->recv2, 0x5a, bytes + 16, me->stream));
	perf_launch(me, PERF_NDET, me->send, me->recv, row);
	/* The size-invariance call: all-reduce only (a smaller reduce-scatter moves blocks). */
	if (row->count > 1 && world->options.coll == NDET_COLL_ALLREDUCE) {
		struct perf_row smaller = *row;
		smaller.count--;
		perf_launch(me, PERF_NDET, me->send + size, me->recv2 + size + 8, &smaller);
	}
	PERF_CHECK(cudaStreamSynchronize(me->stream));
	perf_check_engine(me);
	PERF_CHECK(cudaMemcpy(world->recv_host[me->rank], me->recv, bytes, cudaMemcpyDeviceToHost));
	if (world->nccl_on) {
		perf_launch(me, PERF_NCCL, me->send, me->recv, row);
		PERF_CHECK(cudaStreamSynchronize(me->stream));
		perf_check_nccl(me, ncclSuccess, "all-reduce");
		if (me->rank == 0)
			PERF_CHECK(cudaMemcpy(world->nccl_host, me->recv, bytes,
					      cudaMemcpyDeviceToHost));
	}
	pthread_barrier_wait(&world->barrier);
	if (me->rank == 0)
		perf_judge(me, row);
}

static const char *perf_trace_name(unsigned code)
{
	static const char *const names[] = {
	    [NDET_TRACE_START] = "start",	    [NDET_TRACE_OPENED] = "opened",
	    [NDET_TRACE_SCATTERED] = "scattered", [NDET_TRACE_READY] = "ready",
	    [NDET_TRACE_REDUCED] = "reduced",	    [NDET_TRACE_PEERS_DONE] = "peers-reduced",
	    [NDET_TRACE_GATHERED] = "gathered",   [NDET_TRACE_STEP] = "step",
	    [NDET_TRACE_COPIED] = "copied",	    [NDET_TRACE_SYNCED] = "synced",
	    [NDET_TRACE_END] = "end",
	};
	return code < sizeof(names) / sizeof(names[0]) && names[code] != NULL ? names[code] : "?";
}

/*
 * One block's timeline (ndet_kernels.h, NDET_TRACE_WORDS): the first events as they
 * came, then for each kind of event the time spent reaching it from the event
 * before (sum, count, mean), in microseconds.
 */
static void perf_print_trace(int rank, const char *which, const uint64_t *t, uint64_t base)
{
	const uint64_t events = t[0] < NDET_TRACE_WORDS ? t[0] : NDET_TRACE_WORDS - 1;
	if (events < 2) {
		printf("#   trace rank %d %s block: %llu events (not traced)\n", rank, which,
		       (unsigned long long)events);
		return;
	}
	const uint64_t mask = (1ull << 56) - 1;
	const uint64_t t0 = t[1] & mask;
	const double span = (double)((t[events] & mask) - t0) / 1e3;
	/* Other GPUs' %globaltimer may be offset from rank 0's: read with care. */
	printf("#   trace rank %d %s block (starts %+.1f us after rank 0's first): %llu events "
	       "over %.1f us:",
	       rank, which, ((double)t0 - (double)(base & mask)) / 1e3,
	       (unsigned long long)events, span);
	for (uint64_t i = 1; i <= events && i <= 24; i++)
		printf(" %s %.1f", perf_trace_name((unsigned)(t[i] >> 56)),
		       (double)((t[i] & mask) - t0) / 1e3);
	printf("%s\n", events > 24 ? " ..." : "");
	double sum[NDET_TRACE_END + 1] = {0};
	unsigned count[NDET_TRACE_END + 1] = {0};
	for (uint64_t i = 2; i <= events; i++) {
		const unsigned code = (unsigned)(t[i] >> 56);
		if (code <= NDET_TRACE_END) {
			sum[code] += (double)((t[i] & mask) - (t[i - 1] & mask)) / 1e3;
			count[code]++;
		}
	}
	printf("#   trace rank %d %s block, time to reach each event:", rank, which);
	for (unsigned code = 0; code <= NDET_TRACE_END; code++)
		if (count[code] > 0)
			printf(" %s %.1f (%u x %.2f)", perf_trace_name(code), sum[code], count[code],
			       sum[code] / count[code]);
	printf("\n");
}

/* --trace: every rank's timelines of the row's last traced call (perf_trace). */
static uint64_t perf_trace_words[NDET_MAX_RANKS][2 * NDET_TRACE_WORDS];

/* --trace: a few more eager calls with the trace on; the last one's stays. */
static void perf_trace(struct perf_rank *me, const struct perf_row *row)
{
	struct perf_world *world = me->world;
	uint64_t *words = NULL;
	PERF_CHECK(cudaMalloc((void **)&words, sizeof(perf_trace_words[0])));
	PERF_CHECK(cudaMemsetAsync(words, 0, sizeof(perf_trace_words[0]), me->stream));
	PERF_CHECK(cudaStreamSynchronize(me->stream));
	pthread_barrier_wait(&world->barrier);
	ndet_engine_set_trace(world->engines[me->rank], words);
	for (int i = 0; i < 3; i++)
		perf_launch(me, PERF_NDET, me->send, me->recv, row);
	PERF_CHECK(cudaStreamSynchronize(me->stream));
	pthread_barrier_wait(&world->barrier);
	ndet_engine_set_trace(world->engines[me->rank], NULL);
	perf_check_engine(me);
	PERF_CHECK(cudaMemcpy(perf_trace_words[me->rank], words, sizeof(perf_trace_words[0]),
			      cudaMemcpyDeviceToHost));
	PERF_CHECK(cudaFree(words));
}

/* Rank 0, after the row's line: what perf_trace recorded. */
static void perf_trace_print(const struct perf_world *world, const struct perf_row *row)
{
	printf("#   trace of %zu bytes %s %s: %s, %u blocks x %llu steps\n", row->bytes,
	       ndet_dtype_name(row->dtype), ndet_op_name(row->op), ndet_plan_path_name(row->path),
	       row->blocks, (unsigned long long)row->steps);
	const uint64_t base = perf_trace_words[0][1];
	for (int r = 0; r < world->options.nranks; r++) {
		perf_print_trace(r, "first", perf_trace_words[r], base);
		perf_print_trace(r, "last", perf_trace_words[r] + NDET_TRACE_WORDS, base);
	}
}

/* perf_for_each_row's visitor of a rank thread: measure, check, rank 0 prints. */
static void perf_rank_row(void *context, struct perf_row *row)
{
	struct perf_rank *me = context;
	struct perf_world *world = me->world;
	const struct perf_options *o = &world->options;
	const int n = o->nranks;

	perf_fill(row->dtype, me->host_in, row->count, perf_seed(me->rank, row->count));
	/* Ordered on the stream the calls use: a pageable cudaMemcpy may return before its
	 * DMA lands, and a non-blocking stream does not wait for the legacy stream. */
	PERF_CHECK(cudaMemcpyAsync(me->send, me->host_in, row->bytes, cudaMemcpyHostToDevice,
				   me->stream));
	if (world->symmetric_on)
		PERF_CHECK(cudaMemcpyAsync(me->symmetric_send, me->host_in, row->bytes,
					   cudaMemcpyHostToDevice, me->stream));
	PERF_CHECK(cudaStreamSynchronize(me->stream));
	/* Every rank's upload is done before any rank launches a call its peers wait in. */
	pthread_barrier_wait(&world->barrier);
	for (int mode = 0; mode < PERF_MODE_COUNT; mode++) {
		if (o->graph != 2 && o->graph != mode)
			continue;
		for (int impl = 0; impl < PERF_IMPL_COUNT; impl++)
			if (impl == PERF_NDET || (impl == PERF_NCCL && world->nccl_on) ||
			    (impl == PERF_NCCL_SYMMETRIC && world->symmetric_on))
				row->seconds[mode][impl] = perf_time(me, (enum perf_impl)impl,
								     (enum perf_mode)mode, row);
	}
	if (o->check && row->bytes <= o->check_max_bytes)
		perf_check(me, row);
	if (o->trace && row->blocks > 0)
		perf_trace(me, row);
	pthread_barrier_wait(&world->barrier);
	if (me->rank != 0)
		return;

	double best = -1;
	for (int mode = 0; mode < PERF_MODE_COUNT; mode++) {
		double s = row->seconds[mode][PERF_NDET];
		if (s > 0 && (best < 0 || s < best))
			best = s;
	}
	row->kernel_gbps = perf_kernel_bytes(row->path, (double)row->bytes, n) * n / best / 1e9;
	if (world->ngpus == 1) {
		row->vs_copy = row->kernel_gbps / world->copy_gbps;
		if (row->bytes >= PERF_LARGE_MIN_BYTES) {
			world->large_rows++;
			world->ratio_sum_large += row->vs_copy;
			if (row->vs_copy > world->best_ratio_large)
				world->best_ratio_large = row->vs_copy;
		}
	}
	perf_print_row(world, row);
	perf_note_ratios(world, row);
	if (o->trace && row->blocks > 0)
		perf_trace_print(world, row);
	const double eager = row->seconds[PERF_EAGER][PERF_NDET];
	if (row->bytes <= 64 && n >= 2 && world->flag_rtt_us > 0 && eager > 0)
		printf("#   %zu-byte call: %.2f us = %.1f bare flag round trips\n", row->bytes,
		       eager * 1e6, eager * 1e6 / world->flag_rtt_us);
}

/* Window sizes: whole pages, as ncclCommWindowRegister wants them. */
static size_t perf_symmetric_bytes(const struct perf_options *o)
{
	const size_t page = NCCL_WIN_REQUIRED_ALIGNMENT;
	return (o->max_bytes + 16 + page - 1) / page * page;
}

/*
 * This rank's send and receive buffers from ncclMemAlloc, each registered as a
 * symmetric window.  Registration is collective: every rank thread calls it, in the
 * same order, on its own communicator.
 */
static void perf_symmetric_setup(struct perf_rank *me)
{
	struct perf_world *world = me->world;
	const struct perf_nccl *nccl = &world->nccl;
	const size_t bytes = perf_symmetric_bytes(&world->options);
	char **buffers[2] = {&me->symmetric_send, &me->symmetric_recv};
	for (int i = 0; i < 2; i++)
		perf_check_nccl(me, nccl->mem_alloc((void **)buffers[i], bytes), "ncclMemAlloc");
	for (int i = 0; i < 2; i++)
		perf_check_nccl(me,
				nccl->window_register(world->comms[me->rank], *buffers[i], bytes,
						      &me->symmetric_windows[i],
						      NCCL_WIN_COLL_SYMMETRIC),
				"ncclCommWindowRegister");
}

/* Undoes perf_symmetric_setup, in reverse order; collective like it. */
static void perf_symmetric_teardown(struct perf_rank *me)
{
	struct perf_world *world = me->world;
	const struct perf_nccl *nccl = &world->nccl;
	for (int i = 1; i >= 0; i--)
		perf_check_nccl(
			me,
			nccl->window_deregister(world->comms[me->rank], me->symmetric_windows[i]),
			"ncclCommWindowDeregister");
	perf_check_nccl(me, nccl->mem_free(me->symmetric_recv), "ncclMemFree");
	perf_check_nccl(me, nccl->mem_free(me->symmetric_send), "ncclMemFree");
}

static void *perf_rank_main(void *argument)
{
	struct perf_rank *me = argument;
	struct perf_world *world = me->world;
	const struct perf_options *o = &world->options;
	struct ndet_engine_config config = perf_engine_config(world, me->rank);
	PERF_CHECK(cudaSetDevice(config.cuda_device));
	PERF_CHECK(cudaStreamCreateWithFlags(&me->stream, cudaStreamNonBlocking));

	struct ndet_setup_verdict verdict;
	ndet_status_t st =
		ndet_engine_create(&config, perf_allgather, me, &world->engines[me->rank], &verdict);
	if (st != NDET_OK) {
		fprintf(stderr, "nccl-det-perf: rank %d: engine setup failed: %s (%s, rank %d)\n",
			me->rank, ndet_status_name(st), ndet_verdict_reason_name(verdict.reason),
			verdict.offending_rank);
		perf_die();
	}
	if (me->rank == 0)
		perf_measure_copy(world);
	if (o->nranks >= 2)
		perf_measure_flag_rtt(me);
	if (me->rank == 0) {
		printf("# device-to-device copy: %.1f GB/s (bytes read + written)", world->copy_gbps);
		if (o->nranks >= 2)
			printf(", bare flag round trip: %.2f us", world->flag_rtt_us);
		printf("\n#\n");
		perf_print_header(world);
	}

	PERF_CHECK(cudaMalloc((void **)&me->send, o->max_bytes + 16));
	PERF_CHECK(cudaMalloc((void **)&me->recv, o->max_bytes + 16));
	PERF_CHECK(cudaMalloc((void **)&me->recv2, o->max_bytes + 16));
	me->host_in = malloc(o->max_bytes + 16);
	world->recv_host[me->rank] = malloc(o->max_bytes + 16);
	if (me->host_in == NULL || world->recv_host[me->rank] == NULL) {
		fprintf(stderr, "nccl-det-perf: rank %d: out of host memory\n", me->rank);
		perf_die();
	}
	if (world->symmetric_on)
		perf_symmetric_setup(me);
	perf_for_each_row(world, perf_rank_row, me);
	if (world->symmetric_on)
		perf_symmetric_teardown(me);

	PERF_CHECK(cudaFree(me->send));
	PERF_CHECK(cudaFree(me->recv));
	PERF_CHECK(cudaFree(me->recv2));
	free(me->host_in);
	pthread_barrier_wait(&world->barrier);
	ndet_engine_destroy(world->engines[me->rank], true);
	free(world->recv_host[me->rank]);
	PERF_CHECK(cudaStreamDestroy(me->stream));
	return NULL;
}

/* perf_for_each_row's visitor of --dry-run: the row as the run would start it. */
static void perf_dry_row(void *context, struct perf_row *row)
{
	perf_print_row(context, row);
}

/*
 * Decide whether the NCCL columns run, and say so.  Exits 2 when --nccl asked for
 * them and they cannot be had.
 */
static void perf_nccl_decide(struct perf_world *world)
{
	const struct perf_options *o = &world->options;
	char why[4608];
	world->nccl_on = false;
	if (o->nccl == PERF_NCCL_OFF) {
		printf("# NCCL: not run (--no-nccl)\n");
		return;
	}
	const char *layout = perf_nccl_layout_problem(o->nranks, world->ngpus_visible);
	if (layout != NULL)
		snprintf(why, sizeof(why), "%s", layout);
	else if (perf_nccl_load(&world->nccl, why, sizeof(why)))
		world->nccl_on = true;
	if (!world->nccl_on) {
		printf("# NCCL: columns unavailable: %s\n", why);
		if (o->nccl == PERF_NCCL_REQUIRED) {
			fprintf(stderr, "nccl-det-perf: --nccl: NCCL cannot run here: %s\n", why);
			exit(2);
		}
		return;
	}
	const int v = world->nccl.version;
	printf("# NCCL: %s, version %d.%d.%d; one communicator of %d ranks (ncclCommInitAll over "
	       "GPUs 0..%d)\n",
	       world->nccl.path, v / 10000, v / 100 % 100, v % 100, o->nranks, o->nranks - 1);
	static const char *const knobs[] = {"NCCL_ALGO",          "NCCL_PROTO",
					    "NCCL_NVLS_ENABLE",   "NCCL_MIN_NCHANNELS",
					    "NCCL_MAX_NCHANNELS", "NCCL_P2P_LEVEL"};
	for (size_t i = 0; i < sizeof(knobs) / sizeof(knobs[0]); i++)
		if (getenv(knobs[i]) != NULL)
			printf("#   %s=%s\n", knobs[i], getenv(knobs[i]));
	printf("# ratio = NCCL time / nccl-det time (> 1: nccl-det is faster); nccl-diff = "
	       "elements of NCCL's result whose bits differ from the tree\n");
}

/* Decide whether the --nccl-symmetric columns run, and say so; never exits. */
static void perf_symmetric_decide(struct perf_world *world)
{
	const struct perf_options *o = &world->options;
	world->symmetric_on = false;
	if (!o->nccl_symmetric)
		return;
	if (!world->nccl_on) {
		printf("# NCCL symmetric: columns unavailable: %s\n",
		       o->nccl == PERF_NCCL_OFF ? "NCCL is not run (--no-nccl)"
						: "NCCL cannot run here (see above)");
		return;
	}
	const char *missing = perf_nccl_resolve(&world->nccl, perf_nccl_symmetric_symbols,
						PERF_COUNT_OF(perf_nccl_symmetric_symbols));
	if (missing != NULL) {
		printf("# NCCL symmetric: columns unavailable: %s has no %s (symmetric windows "
		       "need NCCL >= 2.27)\n",
		       world->nccl.path, missing);
		return;
	}
	world->symmetric_on = true;
	printf("# NCCL symmetric: the same calls on ncclMemAlloc send/recv buffers of %zu B per "
	       "rank, registered with ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC); s-ratio "
	       "= NCCL-symm time / nccl-det time\n",
	       perf_symmetric_bytes(o));
}

/* ------------------------------------------------------------ link probe */

/*
 * --link-probe: what the cost model of doc/PERFORMANCE needs, measured with the
 * all-reduce kernel's own copy loop: a local copy, reads of the peer's memory
 * ("pull") and writes into it ("push"), one way and both ways at once, and both
 * ways while the other half of each GPU's SMs copies locally (can HBM-only work
 * hide under NVLink transfers?).
 */
enum { PERF_PROBE_BUFFERS = 3 };

struct perf_probe {
	char *buffer[2][PERF_PROBE_BUFFERS]; /* [gpu][a, b, c] */
	cudaStream_t stream[2][2];
	size_t bytes;
	int sms;
};

/* One kernel of a probe case: on `gpu`'s stream `lane`, dst <- src with `blocks`. */
struct perf_probe_copy {
	int gpu, lane;
	char *dst;
	const char *src;
	unsigned blocks;
};

static double perf_probe_time(struct perf_probe *p, const struct perf_probe_copy *copies,
			      int ncopies)
{
	const int iters = 5;
	double start = 0;
	for (int it = -1; it < iters; it++) {
		if (it == 0) {
			for (int g = 0; g < 2; g++) {
				PERF_CHECK(cudaSetDevice(g));
				PERF_CHECK(cudaDeviceSynchronize());
			}
			start = perf_now();
		}
		for (int c = 0; c < ncopies; c++) {
			PERF_CHECK(cudaSetDevice(copies[c].gpu));
			PERF_CHECK((cudaError_t)ndet_kernel_copy(
				copies[c].dst, copies[c].src, p->bytes, copies[c].blocks,
				p->stream[copies[c].gpu][copies[c].lane]));
		}
	}
	for (int g = 0; g < 2; g++) {
		PERF_CHECK(cudaSetDevice(g));
		PERF_CHECK(cudaDeviceSynchronize());
	}
	return (perf_now() - start) / iters;
}

static int perf_link_probe(int ngpus)
{
	if (ngpus < 2) {
		printf("nccl-det-perf --link-probe: needs two GPUs, %d visible\n", ngpus);
		return 0;
	}
	struct perf_probe p = {.bytes = 256u << 20};
	struct cudaDeviceProp properties;
	PERF_CHECK(cudaGetDeviceProperties(&properties, 0));
	p.sms = properties.multiProcessorCount;
	for (int g = 0; g < 2; g++) {
		PERF_CHECK(cudaSetDevice(g));
		cudaError_t err = cudaDeviceEnablePeerAccess(1 - g, 0);
		if (err != cudaSuccess && err != cudaErrorPeerAccessAlreadyEnabled) {
			printf("nccl-det-perf --link-probe: no peer access between GPUs 0 and 1: "
			       "%s\n",
			       cudaGetErrorString(err));
			return 1;
		}
		(void)cudaGetLastError();
		for (int k = 0; k < PERF_PROBE_BUFFERS; k++) {
			PERF_CHECK(cudaMalloc((void **)&p.buffer[g][k], p.bytes));
			PERF_CHECK(cudaMemset(p.buffer[g][k], k + 1, p.bytes));
		}
		for (int l = 0; l < 2; l++)
			PERF_CHECK(cudaStreamCreateWithFlags(&p.stream[g][l], cudaStreamNonBlocking));
	}
	printf("# link probe, GPUs 0 and 1 (%s, %d SMs), %zu MiB per copy, the all-reduce "
	       "kernel's copy loop\n",
	       properties.name, p.sms, p.bytes >> 20);
	printf("# GB/s: bytes copied per GPU per second (local: read + written)\n");
	printf("%-44s %8s %10s\n", "case", "blocks", "GB/s");
	const unsigned grids[] = {(unsigned)p.sms, 2u * (unsigned)p.sms};
	for (int gi = 0; gi < 2; gi++) {
		const unsigned G = grids[gi], H = G / 2;
		char *(*b)[PERF_PROBE_BUFFERS] = p.buffer;
		const struct {
			const char *name;
			int n;
			struct perf_probe_copy c[4];
			double scale; /* bytes counted per copy of p.bytes */
		} cases[] = {
		    {"local copy, GPU 0", 1, {{0, 0, b[0][1], b[0][0], G}}, 2},
		    {"pull one way (GPU 0 reads GPU 1)", 1, {{0, 0, b[0][1], b[1][0], G}}, 1},
		    {"push one way (GPU 0 writes GPU 1)", 1, {{0, 0, b[1][1], b[0][0], G}}, 1},
		    {"pull both ways", 2, {{0, 0, b[0][1], b[1][0], G}, {1, 0, b[1][1], b[0][0], G}}, 1},
		    {"push both ways", 2, {{0, 0, b[1][1], b[0][0], G}, {1, 0, b[0][1], b[1][0], G}}, 1},
		    {"pull both ways, half grid", 2,
		     {{0, 0, b[0][1], b[1][0], H}, {1, 0, b[1][1], b[0][0], H}}, 1},
		    {"push both ways, half grid", 2,
		     {{0, 0, b[1][1], b[0][0], H}, {1, 0, b[0][1], b[1][0], H}}, 1},
		    {"pull both ways || local copy (half each)", 4,
		     {{0, 0, b[0][1], b[1][0], H},
		      {1, 0, b[1][1], b[0][0], H},
		      {0, 1, b[0][2], b[0][0], H},
		      {1, 1, b[1][2], b[1][0], H}}, 1},
		    {"push both ways || local copy (half each)", 4,
		     {{0, 0, b[1][1], b[0][0], H},
		      {1, 0, b[0][1], b[1][0], H},
		      {0, 1, b[0][2], b[0][0], H},
		      {1, 1, b[1][2], b[1][0], H}}, 1},
		};
		for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
			const double s = perf_probe_time(&p, cases[k].c, cases[k].n);
			printf("%-44s %8u %10.1f", cases[k].name, G,
			       cases[k].scale * (double)p.bytes / s / 1e9);
			if (cases[k].n == 4)
				printf("   (time %.2f ms: both kinds of copy finished)", s * 1e3);
			else
				printf("   (time %.2f ms)", s * 1e3);
			printf("\n");
		}
	}
	for (int g = 0; g < 2; g++) {
		PERF_CHECK(cudaSetDevice(g));
		for (int k = 0; k < PERF_PROBE_BUFFERS; k++)
			PERF_CHECK(cudaFree(p.buffer[g][k]));
		for (int l = 0; l < 2; l++)
			PERF_CHECK(cudaStreamDestroy(p.stream[g][l]));
	}
	printf("# SUMMARY nccl-det-perf --link-probe: done\n");
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	/*
	 * Ranks that share one GPU in one process run on many streams; with CUDA's
	 * default of 8 hardware queues two ranks' kernels can land in one queue, one
	 * behind the other while the first waits for the second.  Ask for more queues
	 * (before the first CUDA call).  Separate GPUs or processes need nothing.
	 */
	setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
	static struct perf_world world;
	struct perf_options *o = &world.options;
	*o = (struct perf_options){.nranks = 0,
				   .min_bytes = 8,
				   .max_bytes = 1u << 30,
				   .factor = 2,
				   .warmup = 5,
				   .iters = 20,
				   .graph = 2,
				   .check = true,
				   .check_max_bytes = 256u << 20,
				   .dtypes = (1u << NDET_DTYPE_BF16) | (1u << NDET_DTYPE_F32),
				   .ops = 1u << NDET_OP_SUM,
				   .nccl = PERF_NCCL_AUTO,
				   .nccl_symmetric = 0,
				   .assume_gpus = -1};
	perf_parse_options(argc, argv, o);
	if (o->help) {
		perf_usage(stdout);
		return 0;
	}
	if (o->version) {
		printf("nccl-det-perf %s\n", PACKAGE_VERSION);
		return 0;
	}

	int ngpus = 0;
	if (o->assume_gpus >= 0)
		ngpus = o->assume_gpus;
	else if (cudaGetDeviceCount(&ngpus) != cudaSuccess)
		ngpus = 0;
	if (ngpus == 0 && !o->dry_run) {
		printf("nccl-det-perf: no CUDA GPU is visible on this machine, so there is nothing "
		       "to benchmark.\nRun it on a machine with NVIDIA GPUs (driver >= the CUDA "
		       "runtime nccl-det was built with).\n");
		return 0;
	}
	if (o->link_probe && !o->dry_run)
		return perf_link_probe(ngpus);
	if (ngpus == 0)
		ngpus = 1;
	if (o->nranks == 0)
		o->nranks = ngpus > 1 ? ngpus : 4;
	world.ngpus_visible = ngpus;
	world.ngpus = ngpus < o->nranks ? 1 : ngpus;

	char device_name[256] = "dry run";
	if (!o->dry_run) {
		struct cudaDeviceProp properties;
		PERF_CHECK(cudaGetDeviceProperties(&properties, 0));
		snprintf(device_name, sizeof(device_name), "%s", properties.name);
		/* What the setup will agree (the fewest SMs), for planned rows. */
		for (int d = 0; d < world.ngpus; d++) {
			PERF_CHECK(cudaGetDeviceProperties(&properties, d));
			if (d == 0 || properties.multiProcessorCount < world.device_sms)
				world.device_sms = properties.multiProcessorCount;
		}
		/* fp8 kernels exist for sm_90+ only (NVCC_FP8_GENCODE). */
		const unsigned fp8 = (1u << NDET_DTYPE_F8E4M3) | (1u << NDET_DTYPE_F8E5M2);
		if ((o->dtypes & fp8) != 0) {
			PERF_CHECK(cudaSetDevice(0));
			const int image = ndet_kernel_fp8_check();
			if (image != 0) {
				printf("# fp8 left out: this GPU cannot run the fp8 kernels (%s)\n",
				       cudaGetErrorString((cudaError_t)image));
				o->dtypes &= ~fp8;
				if (o->dtypes == 0) {
					fprintf(stderr, "nccl-det-perf: no datatype left to run\n");
					return 2;
				}
			}
		}
	}
	const struct ndet_settings *settings = ndet_settings_get();
	printf("# nccl-det-perf %s: %d ranks on %d GPU(s) (%s), %s\n", NCCL_DET_VERSION_STRING,
	       o->nranks, ngpus < o->nranks ? 1 : o->nranks, device_name,
	       ngpus < o->nranks ? "ranks share GPU 0 as threads (one-GPU proxy)"
				 : "one thread per GPU");
	printf("# pool %llu B, max blocks %d, one-shot up to %llu B, %d warm-up, %d timed calls\n",
	       (unsigned long long)settings->pool_size, settings->max_blocks,
	       (unsigned long long)ndet_plan_oneshot_max(settings->oneshot_max, o->nranks,
							 o->coll),
	       o->warmup, o->iters);
	if (o->check)
		printf("# checks: bit-exact against the CPU tree and size-invariant, sizes up to "
		       "%zu B\n",
		       o->check_max_bytes);
	else
		printf("# checks: off (-c 0)\n");
	printf("# collective: %s\n",
	       o->coll == NDET_COLL_REDUCE_SCATTER
		       ? "reduce-scatter (size: the whole send buffer; each rank receives size/ranks; "
			 "exact = every rank's block equals its slice of the all-reduce tree)"
		       : "all-reduce");
	perf_nccl_decide(&world);
	perf_symmetric_decide(&world);
	if (o->csv_path != NULL) {
		world.csv = fopen(o->csv_path, "w");
		if (world.csv == NULL) {
			fprintf(stderr, "nccl-det-perf: cannot write %s\n", o->csv_path);
			return 2;
		}
	}
	if (o->dry_run) {
		perf_print_header(&world);
		perf_for_each_row(&world, perf_dry_row, &world);
		printf("# SUMMARY nccl-det-perf: dry run, nothing measured\n");
		if (world.csv != NULL && fclose(world.csv) != 0)
			return 1;
		return 0;
	}

	if (world.nccl_on) {
		int devices[NDET_MAX_RANKS];
		for (int r = 0; r < o->nranks; r++)
			devices[r] = r;
		ncclResult_t result = world.nccl.comm_init_all(world.comms, o->nranks, devices);
		if (result != ncclSuccess) {
			fprintf(stderr, "nccl-det-perf: ncclCommInitAll failed: %s\n",
				world.nccl.get_error_string(result));
			return 1;
		}
		/* Only checked sizes come back to the host. */
		world.nccl_host = malloc((o->max_bytes < o->check_max_bytes ? o->max_bytes
									    : o->check_max_bytes) +
					 16);
		if (world.nccl_host == NULL) {
			fprintf(stderr, "nccl-det-perf: out of host memory\n");
			return 1;
		}
	}
	pthread_barrier_init(&world.barrier, NULL, (unsigned)o->nranks);
	pthread_t threads[NDET_MAX_RANKS];
	struct perf_rank ranks[NDET_MAX_RANKS];
	for (int r = 0; r < o->nranks; r++) {
		ranks[r] = (struct perf_rank){.world = &world, .rank = r};
		pthread_create(&threads[r], NULL, perf_rank_main, &ranks[r]);
	}
	for (int r = 0; r < o->nranks; r++)
		pthread_join(threads[r], NULL);
	if (world.nccl_on) {
		for (int r = 0; r < o->nranks; r++)
			(void)world.nccl.comm_destroy(world.comms[r]);
		free(world.nccl_host);
	}
	if (world.large_rows > 0)
		printf("# large messages (>= 64 MiB): kernel bytes/s = %.1f%% of a device copy on "
		       "average, %.1f%% best (target >= 85%%)\n",
		       100 * world.ratio_sum_large / world.large_rows, 100 * world.best_ratio_large);
	perf_print_ratio_summary(&world);
	if (world.csv != NULL && fclose(world.csv) != 0) {
		fprintf(stderr, "nccl-det-perf: writing %s failed\n", o->csv_path);
		return 1;
	}
	printf("# SUMMARY nccl-det-perf: %s\n",
	       world.failures != 0 ? "CHECK FAILURES (see FAIL above)"
	       : o->check         ? "every checked result bit-exact and size-invariant"
				  : "timed only: no result was checked (-c 0)");
	return world.failures == 0 ? 0 : 1;
}
