/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * nccl-det-perf --link-probe: what the cost model of doc/performance.md needs, measured
 * between GPUs 0 and 1 with the all-reduce kernel's own copy loop: a local copy, reads
 * of the peer's memory ("pull") and writes into it ("push"), one way and both ways at
 * once, and both ways while the other half of each GPU's SMs copies locally (can
 * HBM-only work hide under NVLink transfers?).
 */
#include "config.h"

#include <stddef.h>
#include <stdio.h>

#include "kernels/ndet_bench.h"
#include "kernels/ndet_kernels.h"
#include "tools/perf/perf.h"

/* Buffers a, b and c on each GPU. */
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

int perf_link_probe(int ngpus)
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
			PERF_CHECK(
				cudaStreamCreateWithFlags(&p.stream[g][l], cudaStreamNonBlocking));
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
			{"pull both ways",
			 2,
			 {{0, 0, b[0][1], b[1][0], G}, {1, 0, b[1][1], b[0][0], G}},
			 1},
			{"push both ways",
			 2,
			 {{0, 0, b[1][1], b[0][0], G}, {1, 0, b[0][1], b[1][0], G}},
			 1},
			{"pull both ways, half grid",
			 2,
			 {{0, 0, b[0][1], b[1][0], H}, {1, 0, b[1][1], b[0][0], H}},
			 1},
			{"push both ways, half grid",
			 2,
			 {{0, 0, b[1][1], b[0][0], H}, {1, 0, b[0][1], b[1][0], H}},
			 1},
			{"pull both ways || local copy (half each)",
			 4,
			 {{0, 0, b[0][1], b[1][0], H},
			  {1, 0, b[1][1], b[0][0], H},
			  {0, 1, b[0][2], b[0][0], H},
			  {1, 1, b[1][2], b[1][0], H}},
			 1},
			{"push both ways || local copy (half each)",
			 4,
			 {{0, 0, b[1][1], b[0][0], H},
			  {1, 0, b[0][1], b[1][0], H},
			  {0, 1, b[0][2], b[0][0], H},
			  {1, 1, b[1][2], b[1][0], H}},
			 1},
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
