/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * nccl-det-perf's rows: which (dtype, op, size) the run has and how the engine plans
 * each, the table and CSV lines that print them, and the summary of NCCL / nccl-det
 * time ratios by size class.
 */
#include "config.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "protocol/ndet_plan.h"
#include "common/ndet_dtype.h"
#include "reference/ndet_reference.h"
#include "tools/perf/perf.h"

const char *const perf_mode_names[PERF_MODE_COUNT] = {"eager", "graph"};

const char *perf_op_name(const struct perf_row *row)
{
	return row->premul ? "mulsum" : ndet_op_name(row->op);
}

/* Rank r's PreMulSum scalar, the GPU tests' (ndet_reference_test_scalar). */
uint64_t perf_premul_scalar_bits(ndet_dtype_t dtype, int rank)
{
	return ndet_reference_element_bits(dtype, ndet_reference_test_scalar(rank));
}

/* Calls visit() for every (dtype, op, size) of the run, in the order of the table. */
void perf_for_each_row(const struct perf_world *world,
		       void (*visit)(void *context, struct perf_row *row), void *context)
{
	const struct perf_options *o = &world->options;
	for (int dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
		if (!(o->dtypes & (1u << dtype)))
			continue;
		for (int op = 0; op <= PERF_OP_PREMULSUM; op++) {
			if (!(o->ops & (1u << op)))
				continue;
			const bool premul = op == PERF_OP_PREMULSUM;
			const size_t size = ndet_dtype_size((ndet_dtype_t)dtype);
			for (double b = (double)o->min_bytes; b <= (double)o->max_bytes + 0.5;
			     b = o->step_bytes > 0   ? b + (double)o->step_bytes
				 : b * o->factor > b ? b * o->factor
						     : b + 1) {
				struct perf_row row = {
					.count = (size_t)b / size > 0 ? (size_t)b / size : 1,
					.dtype = (ndet_dtype_t)dtype,
					.op = premul ? NDET_OP_SUM : (ndet_op_t)op,
					.premul = premul,
					.path = NDET_PATH_NONE,
					.exact = "-",
					.invariant = "-",
					.nccl_differ = -1,
					.wrong = -1,
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
					.root = perf_root(o),
					.premul = premul ? NDET_PREMUL_HOST : NDET_PREMUL_NONE,
					.scalar_bits =
						premul ? perf_premul_scalar_bits(row.dtype, 0) : 0};
				struct ndet_plan plan;
				if (ndet_engine_plan_call_for_config(&config, &call, &plan) ==
				    NDET_OK) {
					row.path = plan.path;
					row.ll_line = plan.ll_line;
					row.blocks = plan.blocks;
					row.steps = plan.steps;
				}
				visit(context, &row);
			}
		}
	}
}

const char *perf_path_name(const struct perf_row *row)
{
	if (row->path == NDET_PATH_LL && row->ll_line == NDET_LL_WIDE_LINE_DATA)
		return "llw";
	return ndet_plan_path_name(row->path);
}

/* `value` with `format`, or "-" when it is negative (not measured). */
static const char *perf_cell(char *buffer, size_t size, const char *format, double value)
{
	if (value < 0)
		return "-";
	snprintf(buffer, size, format, value);
	return buffer;
}

static double perf_busbw(const struct perf_world *world, const struct perf_row *row, double seconds)
{
	const int n = world->options.nranks;
	if (seconds <= 0)
		return -1;
	const double algbw = (double)row->bytes / seconds / 1e9;
	/* nccl-tests' factors: reduce moves each byte to the root once, whatever n. */
	if (world->options.coll == NDET_COLL_REDUCE)
		return algbw;
	const double factor = world->options.coll == NDET_COLL_REDUCE_SCATTER ? 1.0 : 2.0;
	return algbw * (factor * (n - 1) / n);
}

/* `impl`'s time over nccl-det's in one mode; < 0 when either was not measured. */
static double perf_ratio(const struct perf_row *row, int mode, enum perf_impl impl)
{
	const double ndet = row->seconds[mode][PERF_NDET], other = row->seconds[mode][impl];
	return ndet > 0 && other > 0 ? other / ndet : -1;
}

/*
 * The table, one row per size, dtype, op and mode, in 132 columns: nccl-tests' columns
 * (time, algbw, busbw, #wrong) for nccl-det and time, algbw, busbw for NCCL (whose
 * result is not judged right or wrong: nccl-diff counts its elements off the tree),
 * then NCCL's time over nccl-det's (with --nccl-symmetric NCCL's time on symmetric
 * windows instead; both ratios go to the summary and the CSV), then the determinism
 * checks.  The one-GPU proxy's kernel bytes per second are in the CSV and the summary.
 */
#define PERF_ROW_LEAD   "%12s %10s %6s %*s %5s %5s"
#define PERF_ROW_NDET   " %7s %6s %6s %6s"
#define PERF_ROW_NCCL   " %7s %6s %6s"
#define PERF_ROW_RATIO  " %5s"
#define PERF_ROW_SYMM   " %7s"
#define PERF_ROW_CHECKS " %5s %8s %9s"

/* " <--- label --->" in `width` columns: which implementation columns are whose. */
static void perf_banner(const char *label, int width)
{
	const int dashes = width - 5 - (int)strlen(label);
	printf(" <%.*s %s %.*s>", dashes / 2, "--------------------", label, dashes - dashes / 2,
	       "--------------------");
}

/* The redop column: 5 wide, 6 where PreMulSum rows ("mulsum", nccl-tests' name) run. */
static int perf_redop_width(const struct perf_world *world)
{
	return world->options.ops & (1u << PERF_OP_PREMULSUM) ? 6 : 5;
}

void perf_print_header(struct perf_world *world)
{
	const bool symmetric = world->options.nccl_symmetric;
	const int w = perf_redop_width(world);
	printf("#%11s %10s %6s %*s %5s %5s", "", "", "", w, "", "", "");
	perf_banner("nccl-det", 29);
	perf_banner("NCCL", 22);
	printf("%*s", symmetric ? 8 : 6, "");
	perf_banner("checks", 25);
	printf("\n");
	printf("#%11s %10s %6s %*s %5s %5s" PERF_ROW_NDET PERF_ROW_NCCL "%s" PERF_ROW_CHECKS "\n",
	       "size", "count", "type", w, "redop", "mode", "path", "time", "algbw", "busbw",
	       "#wrong", "time", "algbw", "busbw", symmetric ? "  symm-t" : " ratio", "exact",
	       "size-inv", "nccl-diff");
	/* The units, without the blank cells that end the line. */
	char units[160];
	int length = snprintf(units, sizeof(units),
			      "#%11s %10s %6s %*s %5s %5s" PERF_ROW_NDET PERF_ROW_NCCL "%s", "(B)",
			      "(elements)", "", w, "", "", "", "(us)", "(GB/s)", "(GB/s)", "",
			      "(us)", "(GB/s)", "(GB/s)", symmetric ? "    (us)" : "");
	while (length > 0 && units[length - 1] == ' ')
		units[--length] = '\0';
	printf("%s\n", units);
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

/* nccl-tests' time cell: fewer decimals as the time grows, so it stays 7 wide. */
static const char *perf_time_cell(char *buffer, size_t size, double seconds)
{
	if (seconds < 0)
		return "-";
	const double us = seconds * 1e6;
	snprintf(buffer, size, us >= 10000 ? "%.0f" : us >= 100 ? "%.1f" : "%.2f", us);
	return buffer;
}

static double perf_algbw(const struct perf_row *row, double seconds)
{
	return seconds > 0 ? (double)row->bytes / seconds / 1e9 : -1;
}

/* CSV field: the value, or empty when not measured. */
static void perf_csv_value(FILE *csv, const char *format, double value)
{
	fputc(',', csv);
	if (value >= 0)
		fprintf(csv, format, value);
}

void perf_print_row(struct perf_world *world, const struct perf_row *row)
{
	const struct perf_options *o = &world->options;
	char cells[12][32];
	for (int m = 0; m < PERF_MODE_COUNT; m++) {
		if (!(o->modes & (1u << m)))
			continue;
		const double *s = row->seconds[m];
		snprintf(cells[0], sizeof(cells[0]), "%zu", row->bytes);
		snprintf(cells[1], sizeof(cells[1]), "%zu", row->count);
		const double busbw = perf_busbw(world, row, s[PERF_NDET]);
		if (busbw >= 0) {
			world->busbw_sum += busbw;
			world->busbw_rows++;
		}
		/* NCCL's time over nccl-det's, or with --nccl-symmetric NCCL's on windows. */
		char extra[48];
		snprintf(extra, sizeof(extra), o->nccl_symmetric ? PERF_ROW_SYMM : PERF_ROW_RATIO,
			 o->nccl_symmetric ? perf_time_cell(cells[9], sizeof(cells[9]),
							    s[PERF_NCCL_SYMMETRIC])
					   : perf_cell(cells[9], sizeof(cells[9]), "%.2f",
						       perf_ratio(row, m, PERF_NCCL)));
		printf(PERF_ROW_LEAD PERF_ROW_NDET PERF_ROW_NCCL "%s" PERF_ROW_CHECKS "\n",
		       cells[0], cells[1], ndet_dtype_name(row->dtype), perf_redop_width(world),
		       perf_op_name(row), perf_mode_names[m], perf_path_name(row),
		       perf_time_cell(cells[2], sizeof(cells[2]), s[PERF_NDET]),
		       perf_cell(cells[3], sizeof(cells[3]), "%.2f", perf_algbw(row, s[PERF_NDET])),
		       perf_cell(cells[4], sizeof(cells[4]), "%.2f", busbw),
		       perf_cell(cells[5], sizeof(cells[5]), "%.0f", (double)row->wrong),
		       perf_time_cell(cells[6], sizeof(cells[6]), s[PERF_NCCL]),
		       perf_cell(cells[7], sizeof(cells[7]), "%.2f", perf_algbw(row, s[PERF_NCCL])),
		       perf_cell(cells[8], sizeof(cells[8]), "%.2f",
				 perf_busbw(world, row, s[PERF_NCCL])),
		       extra, row->exact, row->invariant,
		       perf_cell(cells[10], sizeof(cells[10]), "%.0f", (double)row->nccl_differ));
	}
	if (world->csv == NULL)
		return;
	fprintf(world->csv, "%d,%zu,%zu,%s,%s,%s", world->options.nranks, row->bytes, row->count,
		ndet_dtype_name(row->dtype), perf_op_name(row), perf_path_name(row));
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

void perf_note_ratios(struct perf_world *world, const struct perf_row *row)
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

void perf_print_ratio_summary(const struct perf_world *world)
{
	/*
	 * The project's targets, as ratios NCCL time / nccl-det time: against classic NCCL
	 * at most 0.8x its latency (a ratio >= 1.25) and at least 0.95x its busbw; against
	 * NCCL on symmetric windows at most its latency (no busbw target).
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

void perf_print_totals(const struct perf_world *world)
{
	if (world->wrong >= 0) /* some row was checked */
		printf("# Out of bounds values : %lld %s\n", world->wrong,
		       world->failures != 0 ? "FAILED" : "OK");
	if (world->busbw_rows > 0)
		printf("# Avg bus bandwidth    : %g\n", world->busbw_sum / world->busbw_rows);
	else
		printf("# Avg bus bandwidth    : - (nothing measured)\n");
}
