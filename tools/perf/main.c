/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * nccl-det-perf's main: the defaults of the options, the GPUs and the layout of the
 * ranks, the lines that open the output, the NCCL decision, then a dry run's rows or the
 * measured run and its summary.
 */
#include "config.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "nccl_det.h"
#include "kernels/ndet_kernels.h"
#include "protocol/ndet_plan.h"
#include "common/ndet_settings.h"
#include "tools/perf/perf.h"

/* perf_for_each_row's visitor of --dry-run: the row as the run would start it. */
static void perf_dry_row(void *context, struct perf_row *row)
{
	perf_print_row(context, row);
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
	world.wrong = -1; /* no row checked yet */
	*o = (struct perf_options){.nranks = 0,
				   .min_bytes = 8,
				   .max_bytes = 1u << 30,
				   .factor = NAN,
				   .warmup = 5,
				   .iters = 20,
				   .graph_launches = 1,
				   .modes = (1u << PERF_EAGER) | (1u << PERF_GRAPH),
				   .check = true,
				   .check_max_bytes = 256u << 20,
				   .dtypes = (1u << NDET_DTYPE_BF16) | (1u << NDET_DTYPE_F32),
				   .ops = 1u << NDET_OP_SUM,
				   .nccl = PERF_NCCL_AUTO,
				   .nccl_symmetric = 0,
				   .assume_gpus = -1,
				   .root = -1};
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
	if (o->shim_overhead && !o->dry_run)
		return perf_shim_overhead();
	if (ngpus == 0)
		ngpus = 1;
	if (o->nranks == 0)
		o->nranks = ngpus > 1 ? ngpus : 4;
	perf_check_root(o);
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
	printf("# pool %llu B, max blocks %d, one-shot up to %llu B\n",
	       (unsigned long long)settings->pool_size, settings->max_blocks,
	       (unsigned long long)ndet_plan_oneshot_max(settings->oneshot_max, o->nranks,
							 o->coll));
	/* nccl-tests' line of its options, with the rank count first. */
	char step[64];
	if (o->step_bytes > 0)
		snprintf(step, sizeof(step), "%zu(bytes)", o->step_bytes);
	else
		snprintf(step, sizeof(step), "%g(factor)", o->factor);
	printf("# ranks %d minBytes %zu maxBytes %zu step: %s warmup iters: %d iters: %d "
	       "validation: %d graph: %d modes: %s\n",
	       o->nranks, o->min_bytes, o->max_bytes, step, o->warmup, o->iters, o->check ? 1 : 0,
	       o->graph_launches,
	       o->modes == (1u << PERF_EAGER)   ? "eager"
	       : o->modes == (1u << PERF_GRAPH) ? "graph"
						: "eager,graph");
	if (o->check)
		printf("# checks: bit-exact against the CPU tree and size-invariant, sizes up to "
		       "%zu B\n",
		       o->check_max_bytes);
	else
		printf("# checks: off (-c 0)\n");
	if (o->coll == NDET_COLL_REDUCE_SCATTER)
		printf("# collective: reduce-scatter (size: the whole send buffer; each rank "
		       "receives size/ranks; exact = every rank's block equals its slice of the "
		       "all-reduce tree)\n");
	else if (o->coll == NDET_COLL_REDUCE)
		printf("# collective: reduce to rank %d (exact = its result equals the all-reduce "
		       "tree and every other rank's receive buffer is left untouched)\n",
		       o->root);
	else
		printf("# collective: all-reduce\n");
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
		perf_print_totals(&world);
		printf("# SUMMARY nccl-det-perf: dry run, nothing measured\n");
		if (world.csv != NULL && fclose(world.csv) != 0)
			return 1;
		return 0;
	}

	if (perf_run(&world) != 0)
		return 1;
	if (world.large_rows > 0)
		printf("# large messages (>= 64 MiB): kernel bytes/s = %.1f%% of a device copy on "
		       "average, %.1f%% best (target >= 85%%)\n",
		       100 * world.ratio_sum_large / world.large_rows,
		       100 * world.best_ratio_large);
	perf_print_ratio_summary(&world);
	perf_print_totals(&world);
	if (world.csv != NULL && fclose(world.csv) != 0) {
		fprintf(stderr, "nccl-det-perf: writing %s failed\n", o->csv_path);
		return 1;
	}
	printf("# SUMMARY nccl-det-perf: %s\n",
	       world.failures != 0 ? "CHECK FAILURES (see FAIL above)"
	       : o->check          ? "every checked result bit-exact and size-invariant"
				   : "timed only: no result was checked (-c 0)");
	return world.failures == 0 ? 0 : 1;
}
