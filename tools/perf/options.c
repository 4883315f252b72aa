/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * nccl-det-perf's command line: every option once in a table, from which getopt_long's
 * tables and --help are made; parsing and the checks of the values together.
 */
#include "config.h"

#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ndet_dtype.h"
#include "tools/perf/perf.h"

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

/* A comma list of eager and graph into a bit mask of 1 << enum perf_mode. */
static const char *perf_parse_modes(const char *text, void *field)
{
	unsigned mask = 0;
	for (const char *cursor = text; *cursor != '\0';) {
		size_t length = strcspn(cursor, ",");
		if (length == 5 && strncmp(cursor, "eager", 5) == 0)
			mask |= 1u << PERF_EAGER;
		else if (length == 5 && strncmp(cursor, "graph", 5) == 0)
			mask |= 1u << PERF_GRAPH;
		else
			return "a comma list of eager and graph";
		cursor += length;
		if (*cursor == ',')
			cursor++;
	}
	if (mask == 0)
		return "a comma list of eager and graph";
	*(unsigned *)field = mask;
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
	/* ops: ndet_op_t's, then PERF_OP_PREMULSUM (premulsum, or nccl-tests' mulsum). */
	const int count = dtypes ? NDET_DTYPE_COUNT : PERF_OP_PREMULSUM + 1;
	unsigned result = 0;
	const char *cursor = text;
	while (*cursor != '\0') {
		size_t length = strcspn(cursor, ",");
		bool found = false;
		for (int i = 0; i < count; i++) {
			const char *candidate = dtypes ? ndet_dtype_name((ndet_dtype_t)i)
						: i == PERF_OP_PREMULSUM
							? "premulsum"
							: ndet_op_name((ndet_op_t)i);
			/* nccl-tests' names of the same types and op (its -d and -o). */
			const char *alias = dtypes                   ? perf_dtype_alias(i)
					    : i == PERF_OP_PREMULSUM ? "mulsum"
								     : NULL;
			if ((strlen(candidate) == length &&
			     strncmp(cursor, candidate, length) == 0) ||
			    (alias != NULL && strlen(alias) == length &&
			     strncmp(cursor, alias, length) == 0) ||
			    /* "all": every op but PreMulSum (nccl-tests' all has it). */
			    (length == 3 && strncmp(cursor, "all", 3) == 0 &&
			     (dtypes || i != PERF_OP_PREMULSUM))) {
				result |= 1u << i;
				found = true;
			}
		}
		if (!found)
			return dtypes ? "unknown name in the list (f32 or float, f16 or half, bf16 "
					"or "
					"bfloat16, f64 or double, f8e4m3, f8e5m2, all)"
				      : "unknown name in the list (sum, prod, min, max, avg, "
					"premulsum or "
					"mulsum, all)";
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
	else if (strcmp(text, "reduce") == 0)
		*(int *)field = NDET_COLL_REDUCE;
	else
		return "allreduce, reducescatter or reduce";
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
	/* nccl-tests' options, by its letters and long names. */
	{"minbytes", 'b', "BYTES", PERF_FIELD(min_bytes), perf_parse_size, 0,
	 "smallest size (default 8; K, M, G suffixes)"},
	{"maxbytes", 'e', "BYTES", PERF_FIELD(max_bytes), perf_parse_size, 0,
	 "largest size (default 1G)"},
	{"stepfactor", 'f', "FACTOR", PERF_FIELD(factor), perf_parse_double, 0,
	 "size step factor (default 2)"},
	{"stepbytes", 'i', "BYTES", PERF_FIELD(step_bytes), perf_parse_size, 0,
	 "size step in bytes instead of a factor (not with -f)"},
	{"iters", 'n', "N", PERF_FIELD(iters), perf_parse_int, 0, "timed iterations (default 20)"},
	{"warmup_iters", 'w', "N", PERF_FIELD(warmup), perf_parse_int, 0,
	 "warm-up iterations (default 5)"},
	{"check", 'c', "0|1", PERF_FIELD(check), perf_parse_bool, 0,
	 "bit-exact and size-invariance checks (default 1, sizes up to --check-max)"},
	{"op", 'o', "OPS", PERF_FIELD(ops), perf_parse_ops, 0,
	 "comma list of sum,prod,min,max,avg,premulsum (nccl-tests' mulsum: a scalar\n"
	 "per rank) or all (every op but premulsum; default sum)"},
	{"datatype", 'd', "TYPES", PERF_FIELD(dtypes), perf_parse_dtypes, 0,
	 "comma list of f32,f16,bf16,f64,f8e4m3,f8e5m2 or all (default bf16,f32; fp8 on sm_90+);\n"
	 "nccl-tests' float, half, bfloat16 and double too"},
	{"cudagraph", 'G', "N", PERF_FIELD(graph_launches), perf_parse_int, 0,
	 "graph rows: the -n iterations captured in one CUDA graph, launched N times\n"
	 "(default 1); 0 = eager rows only"},
	{"output_file", 'F', "FILE", PERF_FIELD(csv_path), perf_parse_string, 0,
	 "also write every size, dtype and op to FILE as CSV (one header line)"},
	{"help", 'h', NULL, PERF_FIELD(help), NULL, 1, "this help"},
	/* nccl-det-perf's own. */
	{"ranks", 0, "N", PERF_FIELD(nranks), perf_parse_int, 0,
	 "ranks (default: one per GPU; 4 sharing GPU 0 on a one-GPU machine)"},
	{"modes", 0, "MODES", PERF_FIELD(modes), perf_parse_modes, 0,
	 "comma list of eager,graph: the rows of each size (default eager,graph)"},
	{"coll", 0, "C", PERF_FIELD(coll), perf_parse_coll, 0,
	 "allreduce (default), reducescatter or reduce (reducescatter's sizes:\n"
	 "whole send buffers, each rank receives size/ranks; reduce: to rank -r)"},
	{"root", 'r', "R", PERF_FIELD(root), perf_parse_int, 0,
	 "--coll reduce: the root rank (default 0)"},
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
	{"csv", 0, "FILE", PERF_FIELD(csv_path), perf_parse_string, 0, "the same as -F FILE"},
	{"dry-run", 0, NULL, PERF_FIELD(dry_run), NULL, 1,
	 "print the setup and the rows the run would measure, and load NCCL,\n"
	 "without running anything on a GPU"},
	{"gpus", 0, "N", PERF_FIELD(assume_gpus), perf_parse_int, 0,
	 "with --dry-run: plan as if N GPUs were visible (default: those visible)"},
	{"link-probe", 0, NULL, PERF_FIELD(link_probe), NULL, 1,
	 "measure copy bandwidth local, peer-read and peer-write between GPUs 0 and 1 (one way, "
	 "both ways, alongside a local copy), then exit"},
	{"shim-overhead", 0, NULL, PERF_FIELD(shim_overhead), NULL, 1,
	 "under LD_PRELOAD=libnccl-det.so: the host time nccl-det adds to a call it\n"
	 "leaves to NCCL (one rank on GPU 0, through nccl-det against NCCL's own),\n"
	 "then exit"},
	{"exchange-one-thread", 0, NULL, PERF_FIELD(exchange_one_thread), NULL, 1,
	 "the flag exchange under each small row in an LL step's shape: thread 0 stores\n"
	 "a 16-byte line to every peer, then polls theirs (default: thread q, peer q)"},
	{"trace", 0, NULL, PERF_FIELD(trace), NULL, 1,
	 "after each row, more calls that record the timeline of their first and\n"
	 "last block on every rank (where the time of a call goes; the first 510\n"
	 "events of a block): the last of three eager calls, or with --modes graph\n"
	 "the last call of a graph of -n calls replayed 7 times, with medians"},
	{"version", 0, NULL, PERF_FIELD(version), NULL, 1, "print the version and exit"},
};

#define PERF_OPTION_COUNT   (sizeof(perf_option_table) / sizeof(perf_option_table[0]))
#define PERF_LONG_ONLY_BASE 256

void perf_usage(FILE *out)
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
	fprintf(out,
		"Settings come from NCCL_DET_* variables (doc/settings.md); NCCL is the library\n"
		"NCCL_DET_NCCL_LIBRARY names, else libnccl.so.2.  One row per size, type, op\n"
		"and mode; ratio = NCCL time / nccl-det time: above 1, nccl-det is faster\n"
		"(with --nccl-symmetric, symm-t: NCCL's time on symmetric windows instead;\n"
		"both ratios in the CSV and the summary).\n");
}

/*
 * An option this tool does not have (getopt's '?') or one without its argument (':'),
 * like nccl-tests: what was wrong, then the usage.  The letters this tool once used
 * for its own options, and nccl-tests' options it has no counterpart for, say so.
 */
static void perf_bad_option(int key, const char *word)
{
	if (key == ':')
		fprintf(stderr, "nccl-det-perf: option '%s' needs an argument\n", word);
	else if (optopt == 'C')
		fprintf(stderr, "nccl-det-perf: invalid option '-C' (the collective is --coll)\n");
	else if (optopt != 0 && strchr("tgmpzyTa", optopt) != NULL)
		fprintf(stderr,
			"nccl-det-perf: invalid option '-%c' (nccl-tests' -%c has no counterpart "
			"here)\n",
			optopt, optopt);
	else if (optopt != 0)
		fprintf(stderr, "nccl-det-perf: invalid option '-%c'\n", optopt);
	else
		fprintf(stderr, "nccl-det-perf: invalid option '%s'\n", word);
	perf_usage(stderr);
}

void perf_parse_options(int argc, char **argv, struct perf_options *o)
{
	struct option long_options[PERF_OPTION_COUNT + 1];
	char short_options[3 * PERF_OPTION_COUNT + 2];
	size_t used = 0;
	short_options[used++] = ':'; /* a missing argument returns ':', not '?' */
	for (size_t i = 0; i < PERF_OPTION_COUNT; i++) {
		const struct perf_option *option = &perf_option_table[i];
		int key = option->key != 0 ? option->key : PERF_LONG_ONLY_BASE + (int)i;
		long_options[i] = (struct option){
			option->name, option->argument != NULL ? required_argument : no_argument,
			NULL, key};
		if (option->key != 0) {
			short_options[used++] = (char)option->key;
			if (option->argument != NULL)
				short_options[used++] = ':';
		}
	}
	long_options[PERF_OPTION_COUNT] = (struct option){NULL, 0, NULL, 0};
	short_options[used] = '\0';
	/* The messages below name the tool, not argv[0] (a libtool wrapper's lt-...). */
	opterr = 0;

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
			perf_bad_option(key, argv[optind - 1]);
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
	/* The factor stays unset (NaN) unless -f gives one; -G 0 leaves the graph rows out. */
	const bool factor_given = !isnan(o->factor);
	if (!factor_given && o->step_bytes == 0)
		o->factor = 2;
	if (o->graph_launches == 0)
		o->modes &= ~(1u << PERF_GRAPH);
	const char *why = NULL;
	if (factor_given && o->step_bytes > 0)
		why = "-f (--stepfactor) and -i (--stepbytes) exclude each other";
	else if (factor_given && o->factor <= 1.0)
		why = "--stepfactor must be above 1";
	else if (o->modes == 0)
		why = "--modes graph needs -G (--cudagraph) of at least 1";
	else if (o->iters < 1)
		why = "--iters must be at least 1";
	else if (o->min_bytes < 1 || o->max_bytes < o->min_bytes)
		why = "sizes must satisfy 1 <= --minbytes <= --maxbytes";
	else if (o->assume_gpus >= 0 && !o->dry_run)
		why = "--gpus only goes with --dry-run";
	else if (o->nranks > NDET_MAX_RANKS)
		why = "--ranks is above the largest number of ranks nccl-det supports";
	else if (o->root >= 0 && o->coll != NDET_COLL_REDUCE)
		why = "-r (--root) goes with --coll reduce";
	else if (o->root >= NDET_MAX_RANKS)
		why = "-r (--root) is above the largest number of ranks nccl-det supports";
	if (why != NULL) {
		fprintf(stderr, "nccl-det-perf: %s\n", why);
		exit(2);
	}
	/* With --ranks given, before anything looks for a GPU (main.c checks the default). */
	if (o->nranks > 0)
		perf_check_root(o);
}

int perf_root(const struct perf_options *o)
{
	return o->coll == NDET_COLL_REDUCE ? o->root : -1;
}

void perf_check_root(struct perf_options *o)
{
	if (o->coll == NDET_COLL_REDUCE && o->root < 0)
		o->root = 0;
	if (o->root >= o->nranks) {
		fprintf(stderr, "nccl-det-perf: -r (--root) %d is not a rank (0 to %d)\n", o->root,
			o->nranks - 1);
		exit(2);
	}
}
