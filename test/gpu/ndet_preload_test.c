/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * A plain NCCL program in the nccl-tests calling pattern, run under
 * LD_PRELOAD=libnccl-det.so: communicator init inside ncclGroupStart/End, buffers from
 * ncclMemAlloc (cuMem/VMM: cudaIpcGetMemHandle cannot export them, nccl-det copies
 * them into its own pools), every all-reduce inside its own group, interior-offset
 * pointers, in place and out of place.  Checks every result bit for bit against the
 * CPU tree, that float calls were diverted (ncclDetCommQuery, looked up at run time so
 * the program also runs without nccl-det) and that integer calls fell back correctly.
 * Then ncclReduceScatter (in place and not; each block equals the slice of an
 * ncclAllReduce of the same data, bit for bit), ncclReduce (the root only) and
 * PreMulSum ops (ncclRedOpCreatePreMulSum: host scalar on even ranks, device scalar
 * on odd ones) for all-reduce, reduce-scatter and reduce, then ncclRedOpDestroy.
 * Where nccl-det diverts, some calls go through its direct entry points instead
 * (ncclDetAllReduce, ncclDetReduceScatter, ncclDetReduce), checked the same way.
 *
 *   RANK=r WORLD=n NDET_TEST_ID_FILE=path ndet_preload_test     (one process per rank)
 * GPU = rank % visible GPUs; ranks sharing a GPU need NCCL_HOSTID per process.
 * Exit 0 pass, 1 fail, 2 setup error, 77 no GPU.  Last line: summary.
 */
#include "config.h"

#include <dlfcn.h>
#include <nccl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/ndet_dtype.h"
#include "test/gpu/ndet_gpu_common.h"
#include "reference/ndet_reference.h"

static int env_int(const char *name, int fallback)
{
	const char *value = getenv(name);
	return value != NULL ? atoi(value) : fallback;
}

/* NCCL's reductions, and nccl-det's direct entry points with the same arguments. */
typedef ncclResult_t (*allreduce_fn)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
				     ncclComm_t, cudaStream_t);
typedef ncclResult_t (*reduce_fn)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, int,
				  ncclComm_t, cudaStream_t);

struct preload_run {
	/* The direct entry points where nccl-det is loaded and diverts, else NULL. */
	allreduce_fn direct_reduce_scatter;
	reduce_fn direct_reduce;
	ncclComm_t comm;
	cudaStream_t stream;
	int rank, nranks;
	bool diverted;
	char *send, *recv, *extra; /* ncclMemAlloc'ed, max_count elements of 8 bytes */
	unsigned long long checks, failures;
};

static void preload_expect(struct preload_run *run, ndet_dtype_t dtype, const void *got,
			   const void *want, size_t count, const char *what, size_t n)
{
	size_t first = 0, bad = gpu_compare(dtype, got, want, count, &first);
	run->checks++;
	if (bad != 0 && run->diverted) {
		run->failures++;
		fprintf(stderr, "FAIL rank %d %s %s count %zu: %zu differ (first %zu)\n", run->rank,
			what, ndet_dtype_name(dtype), n, bad, first);
	}
}

/* Rank r's PreMulSum scalar as one element of dtype (little-endian): signs mixed. */
static void preload_scalar(ndet_dtype_t dtype, int r, unsigned char *out)
{
	const double value = (r % 2 == 0 ? 0.75 : -1.5) * (double)(1 + r / 2);
	const uint64_t bits = ndet_reference_element_bits(dtype, value);
	memcpy(out, &bits, ndet_dtype_size(dtype));
}

/*
 * One data set of nranks blocks of `count`: reduce-scatter, the all-reduce of the
 * same data, and a reduce to `root`, with `op` (a built-in, or a PreMulSum op made
 * from `scalars` when premul).
 */
static void preload_collectives_case(struct preload_run *run, ndet_dtype_t dtype, ncclRedOp_t op,
				     ndet_op_t ndet_op, bool premul, const unsigned char *scalars,
				     size_t count, bool in_place)
{
	const size_t size = ndet_dtype_size(dtype), total = count * (size_t)run->nranks;
	const int root = (int)(count % (size_t)run->nranks);
	void *host[NDET_MAX_RANKS];
	const void *views[NDET_MAX_RANKS];
	for (int r = 0; r < run->nranks; r++) {
		host[r] = malloc(total * size);
		gpu_fill(dtype, host[r], total, (uint64_t)(r + 3) * 104729u + count, r == 1);
		views[r] = host[r];
	}
	void *want = malloc(total * size), *got = malloc(total * size),
	     *got_all = malloc(total * size);
	if (premul)
		ndet_reference_premulsum(views, scalars, run->nranks, want, total, dtype);
	else
		ndet_reference_allreduce(views, run->nranks, want, total, dtype, ndet_op);
	GPU_CHECK(cudaMemcpyAsync(run->send, host[run->rank], total * size, cudaMemcpyHostToDevice,
				  run->stream));
	GPU_CHECK(cudaMemcpyAsync(run->extra, host[run->rank], total * size, cudaMemcpyHostToDevice,
				  run->stream));
	GPU_CHECK(cudaMemsetAsync(run->recv, 0x5a, total * size, run->stream));
	GPU_CHECK(cudaStreamSynchronize(run->stream));
	const ncclDataType_t type = ndet_dtype_to_nccl(dtype);
	/* In place: NCCL's rule, recvbuff = sendbuff + rank * recvcount. */
	char *rs_out = in_place ? run->extra + (size_t)run->rank * count * size : run->recv;
	/* The PreMulSum cases through the direct entry points, where there are some. */
	const bool direct = premul && run->direct_reduce_scatter != NULL;
	NCCL_OK(ncclGroupStart());
	NCCL_OK((direct ? run->direct_reduce_scatter : ncclReduceScatter)(
		run->extra, rs_out, count, type, op, run->comm, run->stream));
	NCCL_OK(ncclGroupEnd());
	GPU_CHECK(cudaStreamSynchronize(run->stream));
	GPU_CHECK(cudaMemcpy(got, rs_out, count * size, cudaMemcpyDeviceToHost));
	/* The all-reduce of the same data, then the reduce (recv poisoned again). */
	NCCL_OK(ncclAllReduce(run->send, run->recv, total, type, op, run->comm, run->stream));
	GPU_CHECK(cudaStreamSynchronize(run->stream));
	GPU_CHECK(cudaMemcpy(got_all, run->recv, total * size, cudaMemcpyDeviceToHost));
	preload_expect(run, dtype, got_all, want, total,
		       premul ? "premulsum all-reduce" : "all-reduce", total);
	preload_expect(run, dtype, got, (char *)want + (size_t)run->rank * count * size, count,
		       in_place ? "reduce-scatter (in place)" : "reduce-scatter", count);
	preload_expect(run, dtype, got, (char *)got_all + (size_t)run->rank * count * size, count,
		       "reduce-scatter vs all-reduce slice", count);
	GPU_CHECK(cudaMemsetAsync(run->recv, 0x5a, total * size, run->stream));
	NCCL_OK((direct ? run->direct_reduce : ncclReduce)(run->send, run->recv, total, type, op,
							   root, run->comm, run->stream));
	GPU_CHECK(cudaStreamSynchronize(run->stream));
	GPU_CHECK(cudaMemcpy(got, run->recv, total * size, cudaMemcpyDeviceToHost));
	if (run->rank == root) {
		preload_expect(run, dtype, got, want, total, "reduce (root)", total);
	} else {
		size_t touched = 0;
		for (size_t i = 0; i < total * size; i++)
			touched += ((unsigned char *)got)[i] != 0x5a;
		run->checks++;
		if (touched != 0 && run->diverted) {
			run->failures++;
			fprintf(stderr, "FAIL rank %d: reduce to root %d wrote %zu bytes here\n",
				run->rank, root, touched);
		}
	}
	for (int r = 0; r < run->nranks; r++)
		free(host[r]);
	free(want);
	free(got);
	free(got_all);
}

static void preload_collectives(struct preload_run *run)
{
	static const size_t counts[] = {1, 1001, 65537};
	unsigned char *device_scalar = NULL;
	GPU_CHECK(cudaMalloc((void **)&device_scalar, 8));
	for (int dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
		const ndet_dtype_t dt = (ndet_dtype_t)dtype;
		if (!gpu_dtype_selected(dt))
			continue;
		const size_t size = ndet_dtype_size(dt);
		unsigned char scalars[NDET_MAX_RANKS * 8], mine[8];
		for (int r = 0; r < run->nranks; r++)
			preload_scalar(dt, r, scalars + (size_t)r * size);
		memcpy(mine, scalars + (size_t)run->rank * size, size);
		GPU_CHECK(cudaMemcpy(device_scalar, mine, size, cudaMemcpyHostToDevice));
		ncclRedOp_t premul;
		const bool device = run->rank % 2 == 1;
		NCCL_OK(ncclRedOpCreatePreMulSum(
			&premul, device ? (void *)device_scalar : mine, ndet_dtype_to_nccl(dt),
			device ? ncclScalarDevice : ncclScalarHostImmediate, run->comm));
		for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
			const int op = (int)(c + (size_t)dtype) % NDET_OP_COUNT;
			preload_collectives_case(run, dt, ndet_op_to_nccl((ndet_op_t)op),
						 (ndet_op_t)op, false, NULL, counts[c], c % 2 == 0);
			preload_collectives_case(run, dt, premul, NDET_OP_SUM, true, scalars,
						 counts[c], c % 2 == 1);
		}
		NCCL_OK(ncclRedOpDestroy(premul, run->comm));
	}
	GPU_CHECK(cudaFree(device_scalar));
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	int devices = 0;
	if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
		printf("SUMMARY ndet_preload_test: no CUDA GPU visible, skipped\n");
		return 77;
	}
	const int rank = env_int("RANK", 0), nranks = env_int("WORLD", 1);
	const char *id_file = getenv("NDET_TEST_ID_FILE");
	if (id_file == NULL || nranks < 1 || nranks > NDET_MAX_RANKS)
		return 2;
	GPU_CHECK(cudaSetDevice(rank % devices));
	ncclUniqueId id;
	if (!gpu_share_unique_id(rank, id_file, &id))
		return 2;
	ncclComm_t comm;
	/* nccl-tests initialises inside a group: our setup runs at the outermost GroupEnd. */
	NCCL_OK(ncclGroupStart());
	NCCL_OK(ncclCommInitRank(&comm, nranks, id, rank));
	NCCL_OK(ncclGroupEnd());

	typedef ncclResult_t (*query_fn)(ncclComm_t, int *, const char **);
	query_fn query = (query_fn)dlsym(RTLD_DEFAULT, "ncclDetCommQuery");
	int diverted = -1;
	const char *reason = "nccl-det not loaded";
	if (query != NULL)
		query(comm, &diverted, &reason);
	printf("rank %d: nccl-det %s, communicator diverted=%d (%s)\n", rank,
	       query != NULL ? "loaded" : "absent", diverted, reason);
	/* nccl-det's direct entry points, used for some calls where the communicator diverts. */
	allreduce_fn direct_allreduce =
		diverted == 1 ? (allreduce_fn)dlsym(RTLD_DEFAULT, "ncclDetAllReduce") : NULL;

	cudaStream_t stream;
	GPU_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
	const size_t max_count = (1u << 20) + 64;
	char *send = NULL, *recv = NULL;
	NCCL_OK(ncclMemAlloc((void **)&send, max_count * 8));
	NCCL_OK(ncclMemAlloc((void **)&recv, max_count * 8));
	static const size_t sizes[] = {1, 3, 1001, 65537, (1u << 20) + 7};
	unsigned long long checks = 0, failures = 0;
	for (int dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
		if (!gpu_dtype_selected((ndet_dtype_t)dtype))
			continue;
		for (int op = 0; op < NDET_OP_COUNT; op++) {
			for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
				const size_t count = sizes[s],
					     size = ndet_dtype_size((ndet_dtype_t)dtype);
				const bool in_place = (s + op) % 2 == 1;
				/* Interior offsets, as nccl-tests' -O / offset buffers produce. */
				char *sendp = send + (size_t)(rank % 3 + 1) * size;
				char *recvp = in_place ? sendp : recv + 5 * size;
				void *host[NDET_MAX_RANKS];
				const void *views[NDET_MAX_RANKS];
				for (int r = 0; r < nranks; r++) {
					host[r] = malloc(count * size);
					gpu_fill((ndet_dtype_t)dtype, host[r], count,
						 (uint64_t)(r + 1) * 7919u + count * 31u +
							 (uint64_t)op,
						 false);
					views[r] = host[r];
				}
				void *want = malloc(count * size), *got = malloc(count * size);
				ndet_reference_allreduce(views, nranks, want, count,
							 (ndet_dtype_t)dtype, (ndet_op_t)op);
				/* On the call's stream: a cudaMemcpy from pageable memory may
				 * return before its DMA lands, and a non-blocking stream does not
				 * wait for it. */
				GPU_CHECK(cudaMemcpyAsync(sendp, host[rank], count * size,
							  cudaMemcpyHostToDevice, stream));
				const bool direct = direct_allreduce != NULL && s % 2 == 0;
				NCCL_OK(ncclGroupStart());
				NCCL_OK((direct ? direct_allreduce : ncclAllReduce)(
					sendp, recvp, count,
					ndet_dtype_to_nccl((ndet_dtype_t)dtype),
					ndet_op_to_nccl((ndet_op_t)op), comm, stream));
				NCCL_OK(ncclGroupEnd());
				GPU_CHECK(cudaStreamSynchronize(stream));
				GPU_CHECK(cudaMemcpy(got, recvp, count * size,
						     cudaMemcpyDeviceToHost));
				size_t first = 0, bad = gpu_compare((ndet_dtype_t)dtype, got, want,
								    count, &first);
				checks++;
				if (bad != 0 && diverted == 1) {
					failures++;
					fprintf(stderr,
						"FAIL rank %d %s/%s count %zu%s: %zu differ (first "
						"%zu)\n",
						rank, ndet_dtype_name((ndet_dtype_t)dtype),
						ndet_op_name((ndet_op_t)op), count,
						in_place ? " in place" : "", bad, first);
				}
				for (int r = 0; r < nranks; r++)
					free(host[r]);
				free(want);
				free(got);
			}
		}
	}
	/* An integer all-reduce falls back to NCCL and is still exact. */
	{
		const size_t count = 4099;
		int32_t *host = malloc(count * sizeof(int32_t));
		for (size_t i = 0; i < count; i++)
			host[i] = (int32_t)(i * 3 + (size_t)rank);
		GPU_CHECK(cudaMemcpyAsync(send, host, count * sizeof(int32_t),
					  cudaMemcpyHostToDevice, stream));
		NCCL_OK(ncclAllReduce(send, recv, count, ncclInt32, ncclSum, comm, stream));
		GPU_CHECK(cudaStreamSynchronize(stream));
		GPU_CHECK(cudaMemcpy(host, recv, count * sizeof(int32_t), cudaMemcpyDeviceToHost));
		checks++;
		for (size_t i = 0; i < count; i++) {
			int32_t want =
				(int32_t)(i * 3 * (size_t)nranks) + nranks * (nranks - 1) / 2;
			if (host[i] != want) {
				failures++;
				fprintf(stderr,
					"FAIL rank %d int32 fallback: element %zu is %d, want %d\n",
					rank, i, host[i], want);
				break;
			}
		}
		free(host);
	}
	struct preload_run run = {.comm = comm,
				  .stream = stream,
				  .rank = rank,
				  .nranks = nranks,
				  .diverted = diverted == 1,
				  .send = send,
				  .recv = recv};
	if (diverted == 1) {
		run.direct_reduce_scatter =
			(allreduce_fn)dlsym(RTLD_DEFAULT, "ncclDetReduceScatter");
		run.direct_reduce = (reduce_fn)dlsym(RTLD_DEFAULT, "ncclDetReduce");
	}
	NCCL_OK(ncclMemAlloc((void **)&run.extra, max_count * 8));
	preload_collectives(&run);
	NCCL_OK(ncclMemFree(run.extra));
	checks += run.checks;
	failures += run.failures;
	checks++;
	if (query != NULL && diverted != 1) {
		failures++;
		fprintf(stderr, "FAIL rank %d: nccl-det is loaded but did not divert (%s)\n", rank,
			reason);
	}
	NCCL_OK(ncclMemFree(send));
	NCCL_OK(ncclMemFree(recv));
	NCCL_OK(ncclCommFinalize(comm));
	NCCL_OK(ncclCommDestroy(comm));
	printf("SUMMARY ndet_preload_test rank %d/%d: %llu checks, %llu failed\n", rank, nranks,
	       checks, failures);
	return failures == 0 ? 0 : 1;
}
