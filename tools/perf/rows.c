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
#include "tools/perf/perf.h"

static const char *const perf_mode_names[PERF_MODE_COUNT] = {"eager", "graph"};

/* Calls visit() for every (dtype, op, size) of the run, in the order of the table. */
void perf_for_each_row(const struct perf_world *world,
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
				if (ndet_engine_plan_call_for_config(&config, &call, &plan) ==
				    NDET_OK) {
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

static double perf_busbw(const struct perf_world *world, const struct perf_row *row, double seconds)
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

void perf_print_header(struct perf_world *world)
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

void perf_print_row(struct perf_world *world, const struct perf_row *row)
{
	char cells[8][32];
	/* blocks x steps of the plan: how the engine cuts the message. */
	char grid[32] = "-";
	if (row->blocks > 0)
		snprintf(grid, sizeof(grid), "%ux%llu", row->blocks,
			 (unsigned long long)row->steps);
	printf("  %12zu %12zu %5s %5s %6s %8s |", row->bytes, row->count,
	       ndet_dtype_name(row->dtype), ndet_op_name(row->op), ndet_plan_path_name(row->path),
	       grid);
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
