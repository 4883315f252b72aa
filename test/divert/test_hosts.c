/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The multi-host all-reduce end to end through the divert layer, on a CPU: like
 * test_divert, this program plays libnccl-det.so (the shim compiled in) in front of
 * the in-process multi-rank fake NCCL, with the host-only backend, whose ranks
 * NCCL_DET_TEST_HOST splits into hosts.  The backend runs stages 1, 3 and 5 with the
 * CPU reference's two stages; stages 2 and 4 are the fake NCCL's ncclSend/ncclRecv,
 * which move bytes and reduce nothing.
 *
 * Covered: layouts 2x2, 4x1, 1x4 (one host: the single-host path), 3x2, 2x3 and
 * interleaved hosts, every dtype and op and PreMulSum, odd counts at odd offsets,
 * bit for bit the multi-host reference on every rank; 2x2 is the single-host
 * result, 2x3 is not 1x6's; a small NCCL_DET_HOSTS_STAGING (several chunks) gives
 * the bits of one chunk; reduce-scatter blocks and the reduce root are the
 * all-reduce's, in place and out of place; one thread driving the ranks of two
 * communicators in one group; NCCL_DET_STRICT=1; the inter-host bytes of the trace
 * are the schedule's (ndet_hosts_inter_bytes), and each rank maps only the g - 1
 * other ranks of its host; NCCL's failure of a stage between hosts is every rank's
 * result.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "test/fake_nccl/fake_nccl.h"
#include "nccl_det.h"
#include "divert/ndet_comm.h"
#include "test/support/ndet_divert_fixture.h"
#include "test/support/ndet_fake_backend.h"
#include "common/ndet_dtype.h"
#include "kernels/ndet_abi.h"
#include "protocol/ndet_host_order.h"
#include "protocol/ndet_hosts_plan.h"
#include "reference/ndet_reference.h"
#include "common/ndet_settings.h"
#include "test/support/ndet_test_data.h"

#define MAX_RANKS 6
#define COUNT     1001 /* odd */
#define OFFSET    3    /* elements: buffers start at odd offsets */
#define OP_PREMUL NDET_OP_COUNT
#define OPS_ALL   (NDET_OP_COUNT + 1)
#define ELEMS     (MAX_RANKS * COUNT + OFFSET) /* a reduce-scatter's send buffer */

static const char *const knobs[] = {
	"NCCL_DET_TEST_HOST", "NCCL_DET_STRICT", "NCCL_DET_HOSTS_STAGING",
	"NCCL_DET_TIMEOUT",   "FAKE_NCCL_TRACE", "FAKE_NCCL_FAIL",
};

static int setup(void **state)
{
	(void)state;
	return ndet_divert_fixture_reset(knobs, sizeof(knobs) / sizeof(knobs[0]), ndet_divert_log,
					 ndet_divert_trace);
}

static const char *op_label(int op)
{
	return op == OP_PREMUL ? "premulsum" : ndet_op_name((ndet_op_t)op);
}

/* ------------------------------------------------------------------ layouts */

/* One letter per rank: "ABAB" puts ranks 0 and 2 on host A, 1 and 3 on host B. */
struct layout {
	const char *letters;
	int n;
	int host_of[MAX_RANKS];
	int nhosts, g;
};

static bool same_letter(const void *identities, int a, int b)
{
	const char *letters = identities;
	return letters[a] == letters[b];
}

/* The layout's hosts, and NCCL_DET_TEST_HOST naming them (settings read again). */
static void layout_use(struct layout *layout, const char *letters)
{
	int local_of[MAX_RANKS], size[MAX_RANKS];
	char value[256] = "";
	layout->letters = letters;
	layout->n = (int)strlen(letters);
	assert_true(layout->n >= 2 && layout->n <= MAX_RANKS);
	layout->nhosts =
		ndet_host_order(layout->n, same_letter, letters, layout->host_of, local_of, size);
	layout->g = size[0];
	for (char c = 'A'; c <= 'Z'; c++) {
		bool first = true;
		for (int r = 0; r < layout->n; r++) {
			if (letters[r] != c)
				continue;
			size_t used = strlen(value);
			if (first)
				snprintf(value + used, sizeof(value) - used, "%s%c@%d",
					 used > 0 ? ";" : "", c, r);
			else
				snprintf(value + used, sizeof(value) - used, ",%d", r);
			first = false;
		}
	}
	assert_int_equal(setenv("NCCL_DET_TEST_HOST", value, 1), 0);
	ndet_divert_settings_changed();
}

/* ------------------------------------------------------------------ data */

/* Every rank's input and outputs of one dtype and op. */
struct data {
	ndet_dtype_t dtype;
	int op;
	size_t count; /* of the all-reduce (a reduce-scatter's recvcount is count / n) */
	_Alignas(16) unsigned char input[MAX_RANKS][ELEMS * 8];
	_Alignas(16) unsigned char output[MAX_RANKS][ELEMS * 8];
	_Alignas(8) unsigned char scalars[MAX_RANKS * 8];
	_Alignas(16) unsigned char want[ELEMS * 8];
};

static const void *at(const unsigned char *buffer, ndet_dtype_t dtype, size_t elements)
{
	return buffer + elements * ndet_dtype_size(dtype);
}

/* Fresh data at OFFSET, the PreMulSum scalars, and the multi-host reference's result. */
static void data_fill(struct data *data, const struct layout *layout, ndet_dtype_t dtype, int op,
		      size_t count, uint64_t seed)
{
	const void *inputs[MAX_RANKS];
	data->dtype = dtype;
	data->op = op;
	data->count = count;
	for (int r = 0; r < layout->n; r++) {
		ndet_test_fill_rank(dtype, data->input[r] + OFFSET * ndet_dtype_size(dtype), 0,
				    count, seed, r, layout->n, NDET_TEST_DATA_CANCEL);
		inputs[r] = at(data->input[r], dtype, OFFSET);
	}
	ndet_test_fill_random(dtype, data->scalars, (size_t)layout->n, seed ^ 0x5ca1, 0);
	ndet_status_t status =
		op == OP_PREMUL
			? ndet_reference_premulsum_hosts(inputs, data->scalars, layout->host_of,
							 layout->n, data->want, count, dtype)
			: ndet_reference_allreduce_hosts(inputs, layout->host_of, layout->n,
							 data->want, count, dtype, (ndet_op_t)op);
	assert_int_equal(status, NDET_OK);
}

/* The single-host reference of the same data: the tree over every rank in rank order. */
static void data_single_host(const struct data *data, int n, void *out)
{
	const void *inputs[MAX_RANKS];
	for (int r = 0; r < n; r++)
		inputs[r] = at(data->input[r], data->dtype, OFFSET);
	ndet_status_t status = data->op == OP_PREMUL
				       ? ndet_reference_premulsum(inputs, data->scalars, n, out,
								  data->count, data->dtype)
				       : ndet_reference_allreduce(inputs, n, out, data->count,
								  data->dtype, (ndet_op_t)data->op);
	assert_int_equal(status, NDET_OK);
}

static void expect_bits(const struct data *data, const void *got, const void *want, size_t count,
			const char *what, int rank)
{
	size_t first = 0;
	size_t bad = ndet_test_count_differences(data->dtype, got, want, count, &first);
	if (bad != 0)
		fail_msg("%s %s %s rank %d: %zu of %zu elements differ, first %zu", what,
			 ndet_dtype_name(data->dtype), op_label(data->op), rank, bad, count, first);
}

/* ------------------------------------------------------------------ the calls */

enum call_kind { CALL_ALLREDUCE, CALL_REDUCE_SCATTER, CALL_REDUCE };

struct call_spec {
	enum call_kind kind;
	bool in_place;
	int root;
};

/* One rank's call of `spec` on data->input/output (at OFFSET), PreMulSum op made here. */
static ncclResult_t rank_call(struct data *data, const struct call_spec *spec, int rank, int n,
			      ncclComm_t comm)
{
	const ncclDataType_t type = ndet_divert_nccl_type(data->dtype);
	const size_t es = ndet_dtype_size(data->dtype), recvcount = data->count / (size_t)n;
	ncclRedOp_t op = ncclSum;
	ncclResult_t result = ncclSuccess;
	if (data->op == OP_PREMUL)
		result = ncclRedOpCreatePreMulSum(&op, data->scalars + (size_t)rank * es, type,
						  ncclScalarHostImmediate, comm);
	else
		op = ndet_divert_nccl_op((ndet_op_t)data->op);
	if (result != ncclSuccess)
		return result;
	unsigned char *in = data->input[rank] + OFFSET * es;
	unsigned char *out = spec->in_place ? in : data->output[rank] + OFFSET * es;
	switch (spec->kind) {
	case CALL_REDUCE_SCATTER:
		if (spec->in_place)
			out = in + (size_t)rank * recvcount * es;
		result = ncclReduceScatter(in, out, recvcount, type, op, comm, NULL);
		break;
	case CALL_REDUCE:
		result = ncclReduce(in, out, data->count, type, op, spec->root, comm, NULL);
		break;
	case CALL_ALLREDUCE:
	default:
		result = ncclAllReduce(in, out, data->count, type, op, comm, NULL);
		break;
	}
	if (data->op == OP_PREMUL) {
		ncclResult_t destroyed = ncclRedOpDestroy(op, comm);
		if (result == ncclSuccess)
			result = destroyed;
	}
	return result;
}

/* Where rank r's result of `spec` lies, and how many elements (0: none is written). */
static const unsigned char *rank_result(const struct data *data, const struct call_spec *spec,
					int rank, int n, size_t *count)
{
	const size_t es = ndet_dtype_size(data->dtype), recvcount = data->count / (size_t)n;
	const unsigned char *in = data->input[rank] + OFFSET * es;
	const unsigned char *out = spec->in_place ? in : data->output[rank] + OFFSET * es;
	*count = data->count;
	if (spec->kind == CALL_REDUCE_SCATTER) {
		*count = recvcount;
		return spec->in_place ? in + (size_t)rank * recvcount * es : out;
	}
	if (spec->kind == CALL_REDUCE && rank != spec->root)
		*count = 0;
	return out;
}

/* Every rank's result is the reference's (its block, for a reduce-scatter). */
static void expect_results(const struct data *data, const struct call_spec *spec, int n,
			   const char *what)
{
	const size_t es = ndet_dtype_size(data->dtype);
	for (int r = 0; r < n; r++) {
		size_t count = 0;
		const unsigned char *got = rank_result(data, spec, r, n, &count);
		const size_t block = spec->kind == CALL_REDUCE_SCATTER ? (size_t)r * count : 0;
		if (count > 0)
			expect_bits(data, got, data->want + block * es, count, what, r);
	}
}

/* A job of one thread per rank: init, `calls` calls of the data sets, query, destroy. */
struct ranks_job {
	const struct layout *layout;
	ncclUniqueId id;
	struct data **sets;
	const struct call_spec *spec;
	int calls;
	ncclResult_t result[MAX_RANKS];
	int diverted[MAX_RANKS];
	int mapped[MAX_RANKS];
};

static void ranks_run(int rank, void *opaque)
{
	struct ranks_job *job = opaque;
	const int n = job->layout->n;
	ncclComm_t comm = NULL;
	const char *reason = NULL;
	ncclResult_t result = ncclCommInitRank(&comm, n, job->id, rank);
	for (int c = 0; c < job->calls && result == ncclSuccess; c++)
		result = rank_call(job->sets[c], job->spec, rank, n, comm);
	job->diverted[rank] = -1;
	if (comm != NULL && ncclDetCommQuery(comm, &job->diverted[rank], &reason) != ncclSuccess)
		job->diverted[rank] = -1;
	void *engine = comm != NULL ? ndet_comm_engine_for_testing(comm) : NULL;
	job->mapped[rank] = engine != NULL ? ndet_fake_backend_mapped_peers(engine) : -1;
	if (comm != NULL) {
		ncclResult_t destroyed = ncclCommDestroy(comm);
		if (result == ncclSuccess)
			result = destroyed;
	}
	job->result[rank] = result;
}

/* Run `calls` data sets through `spec` on one thread per rank; every rank diverted. */
static void run_ranks(const struct layout *layout, struct data **sets, int calls,
		      const struct call_spec *spec)
{
	struct ranks_job job = {.layout = layout, .sets = sets, .spec = spec, .calls = calls};
	assert_int_equal(pncclGetUniqueId(&job.id), ncclSuccess);
	assert_int_equal(fake_nccl_run_ranks(layout->n, ranks_run, &job), 0);
	for (int r = 0; r < layout->n; r++) {
		if (job.result[r] != ncclSuccess)
			fail_msg("%s rank %d: %d", layout->letters, r, (int)job.result[r]);
		assert_int_equal(job.diverted[r], 1);
		/* Only the other ranks of its host: never a remote one. */
		assert_int_equal(job.mapped[r], layout->g - 1);
	}
}

/* ------------------------------------------------------------------ tests */

static struct data sets[NDET_DTYPE_COUNT * OPS_ALL];

/* An f32 sum of fresh data (seed) on every rank of `comms`, in one group: its result. */
static ncclResult_t group_sum(const struct layout *layout, ncclComm_t *comms,
			      const struct call_spec *spec, uint64_t seed)
{
	data_fill(&sets[0], layout, NDET_DTYPE_F32, NDET_OP_SUM, COUNT, seed);
	assert_int_equal(ncclGroupStart(), ncclSuccess);
	for (int r = 0; r < layout->n; r++)
		assert_int_equal(rank_call(&sets[0], spec, r, layout->n, comms[r]), ncclSuccess);
	return ncclGroupEnd();
}

/*
 * Every layout, dtype, op and PreMulSum, out of place at odd offsets, one thread per
 * rank: every rank gets the multi-host reference's bits (so all the same bits), and
 * nothing is reduced by NCCL nor WARNed.  2x2 is the single-host result; 2x3 and the
 * interleaved layout are not (the data tells them apart).
 */
static void test_layouts(void **state)
{
	(void)state;
	static const char *const layouts[] = {"AABB", "ABCD", "AAAA", "AABBCC", "AAABBB", "ABAB"};
	static _Alignas(16) unsigned char single[ELEMS * 8];
	struct data *list[NDET_DTYPE_COUNT * OPS_ALL];
	const struct call_spec spec = {CALL_ALLREDUCE, false, 0};
	for (size_t l = 0; l < sizeof(layouts) / sizeof(layouts[0]); l++) {
		struct layout layout;
		int calls = 0;
		layout_use(&layout, layouts[l]);
		print_message("layout %s: %d host(s) of %d\n", layout.letters, layout.nhosts,
			      layout.g);
		for (int d = 0; d < NDET_DTYPE_COUNT; d++)
			for (int op = 0; op < OPS_ALL; op++) {
				data_fill(&sets[calls], &layout, (ndet_dtype_t)d, op, COUNT - 2 * l,
					  1000 + 37 * l + (uint64_t)calls);
				list[calls] = &sets[calls];
				calls++;
			}
		ndet_divert_trace_on();
		run_ranks(&layout, list, calls, &spec);
		ndet_divert_trace_off();
		assert_int_equal(ndet_divert_traced("ncclAllReduce"), 0);
		assert_int_equal(ndet_divert_count_log("WARN", NULL), 0);
		bool differs_from_single = false;
		for (int c = 0; c < calls; c++) {
			expect_results(list[c], &spec, layout.n, layout.letters);
			data_single_host(list[c], layout.n, single);
			size_t differing = ndet_test_count_differences(
				list[c]->dtype,
				list[c]->output[0] + OFFSET * ndet_dtype_size(list[c]->dtype),
				single, list[c]->count, NULL);
			/* Equal power-of-two hosts of consecutive ranks: the single-host tree. */
			if (strcmp(layout.letters, "AABB") == 0 ||
			    strcmp(layout.letters, "AAAA") == 0)
				assert_int_equal(differing, 0);
			differs_from_single = differs_from_single || differing > 0;
		}
		if (strcmp(layout.letters, "AAABBB") == 0 || strcmp(layout.letters, "ABAB") == 0)
			assert_true(differs_from_single);
	}
	/* Each communicator's verdict line (rank 0's) names its layout across hosts. */
	assert_int_equal(ndet_divert_count_log("deterministic across 2 hosts of 2 ranks (", NULL),
			 2);
	assert_int_equal(ndet_divert_count_log("deterministic across 4 hosts of 1 rank (", NULL),
			 1);
	assert_int_equal(ndet_divert_count_log("deterministic across 3 hosts of 2 ranks (", NULL),
			 1);
	assert_int_equal(ndet_divert_count_log("deterministic across 2 hosts of 3 ranks (", NULL),
			 1);
	assert_int_equal(ndet_divert_count_log("of 4 ranks: deterministic (its", NULL), 1);
	assert_int_equal(ndet_divert_count_log("NCCL-DET VERSION", NULL),
			 (int)(sizeof(layouts) / sizeof(layouts[0])));
}

/*
 * Reduce-scatter (out of place and in place) gives every rank its block of the
 * all-reduce, reduce the root's copy (the other ranks' buffers untouched), all-reduce
 * in place the same bits: 3x2 and interleaved hosts, a few dtypes and ops.
 */
static void test_collectives_in_place(void **state)
{
	(void)state;
	static const char *const layouts[] = {"AABBCC", "ABAB"};
	static const struct {
		ndet_dtype_t dtype;
		int op;
	} kinds[] = {{NDET_DTYPE_F32, NDET_OP_SUM},
		     {NDET_DTYPE_BF16, NDET_OP_AVG},
		     {NDET_DTYPE_F8E4M3, NDET_OP_SUM},
		     {NDET_DTYPE_F16, OP_PREMUL},
		     {NDET_DTYPE_F64, NDET_OP_PROD}};
	static const struct call_spec specs[] = {
		{CALL_ALLREDUCE, true, 0},      {CALL_REDUCE_SCATTER, false, 0},
		{CALL_REDUCE_SCATTER, true, 0}, {CALL_REDUCE, false, 1},
		{CALL_REDUCE, true, 3},
	};
	static _Alignas(16) unsigned char untouched[ELEMS * 8];
	for (size_t l = 0; l < sizeof(layouts) / sizeof(layouts[0]); l++) {
		struct layout layout;
		layout_use(&layout, layouts[l]);
		for (size_t s = 0; s < sizeof(specs) / sizeof(specs[0]); s++) {
			struct data *list[sizeof(kinds) / sizeof(kinds[0])];
			const size_t count = (size_t)layout.n * 211; /* recvcount 211: odd */
			for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
				data_fill(&sets[k], &layout, kinds[k].dtype, kinds[k].op, count,
					  2000 + 17 * s + k);
				memset(sets[k].output, 0x5a, sizeof(sets[k].output));
				list[k] = &sets[k];
			}
			memset(untouched, 0x5a, sizeof(untouched));
			run_ranks(&layout, list, (int)(sizeof(kinds) / sizeof(kinds[0])),
				  &specs[s]);
			for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
				expect_results(list[k], &specs[s], layout.n, layout.letters);
				if (specs[s].kind != CALL_REDUCE || specs[s].in_place)
					continue;
				for (int r = 0; r < layout.n; r++)
					if (r != specs[s].root)
						assert_memory_equal(list[k]->output[r], untouched,
								    sizeof(untouched));
			}
		}
	}
}

/* Is `line` of the trace an ncclSend (*send) or an ncclRecv? */
static bool p2p_line(const char *line, bool *send)
{
	*send = strncmp(line, "ncclSend(", 9) == 0;
	return *send || strncmp(line, "ncclRecv(", 9) == 0;
}

/* ncclSend/ncclRecv lines of the trace: bytes sent and received per rank. */
struct traffic {
	uint64_t sent[MAX_RANKS], received[MAX_RANKS];
	int lines;
};

/*
 * A send to P is what P receives; a receive from P is what P sent.  Every line
 * moves ncclUint8: NCCL moves bytes and never reduces.
 */
static void traffic_read(struct traffic *traffic)
{
	memset(traffic, 0, sizeof(*traffic));
	char *text = fake_nccl_trace_read(ndet_divert_trace);
	assert_non_null(text);
	for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
		bool send = false;
		if (!p2p_line(line, &send))
			continue;
		const char *count = strstr(line, "count="), *peer = strstr(line, "peer=");
		assert_non_null(count);
		assert_non_null(peer);
		assert_non_null(strstr(line, "datatype=ncclUint8"));
		assert_non_null(strstr(line, "= ncclSuccess"));
		const int p = atoi(peer + 5);
		assert_true(p >= 0 && p < MAX_RANKS);
		const uint64_t bytes = strtoull(count + 6, NULL, 10);
		if (send)
			traffic->received[p] += bytes;
		else
			traffic->sent[p] += bytes;
		traffic->lines++;
	}
	free(text);
}

/*
 * The inter-host bytes of the trace are the schedule's: with blocks of whole units
 * every rank sends and receives exactly ndet_hosts_inter_bytes (a layout that
 * gathered a host's blocks on one rank would not), and with an odd count every rank
 * stays within ndet_hosts_rank_excess_bound of it and all ranks together move
 * exactly (H - 1) x N x (ps + es) each way.
 */
static void test_inter_host_bytes(void **state)
{
	(void)state;
	static const char *const layouts[] = {"AABB", "ABCD", "AABBCC", "ABAB"};
	static const ndet_dtype_t dtypes[] = {NDET_DTYPE_F32, NDET_DTYPE_BF16, NDET_DTYPE_F8E5M2,
					      NDET_DTYPE_F64};
	const struct call_spec spec = {CALL_ALLREDUCE, false, 0};
	for (size_t l = 0; l < sizeof(layouts) / sizeof(layouts[0]); l++) {
		struct layout layout;
		layout_use(&layout, layouts[l]);
		for (size_t d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]); d++) {
			for (int exact = 0; exact < 2; exact++) {
				/* Whole 512-byte units in every block of an fp8 chunk, or odd. */
				const size_t count = exact ? (size_t)layout.n * 512 : COUNT;
				struct data *list[1] = {&sets[0]};
				data_fill(&sets[0], &layout, dtypes[d], NDET_OP_SUM, count,
					  3000 + d);
				ndet_divert_trace_on();
				run_ranks(&layout, list, 1, &spec);
				ndet_divert_trace_off();
				expect_results(&sets[0], &spec, layout.n, layout.letters);
				const struct ndet_hosts_shape shape = {
					(uint32_t)ndet_dtype_size(dtypes[d]),
					ndet_hosts_partial_size(dtypes[d], NDET_OP_SUM, false,
								layout.g),
					layout.nhosts, layout.g};
				const uint64_t each = ndet_hosts_inter_bytes(&shape, count);
				const uint64_t bound = ndet_hosts_rank_excess_bound(&shape);
				struct traffic traffic;
				uint64_t sent = 0, received = 0;
				traffic_read(&traffic);
				assert_true(traffic.lines > 0);
				/*
				 * The setup's connections, one byte with each peer host, and
				 * the status words, one with each peer host per NCCL stage and
				 * chunk.
				 */
				struct ndet_hosts_plan plan;
				const struct ndet_hosts_params params = ndet_hosts_params_for(
					dtypes[d], NDET_OP_SUM, false, NDET_COLL_ALLREDUCE, count,
					layout.nhosts, layout.g,
					(uint64_t)96 << 20); /* the default staging */
				assert_int_equal(ndet_hosts_plan_make(&params, &plan), NDET_OK);
				const uint64_t connect =
					(uint64_t)(layout.nhosts - 1) *
					(1u + 2u * NDET_HOSTS_STATUS_BYTES * plan.chunks);
				for (int r = 0; r < layout.n; r++) {
					if (exact) {
						assert_int_equal(traffic.sent[r], each + connect);
						assert_int_equal(traffic.received[r],
								 each + connect);
					}
					assert_true(traffic.sent[r] <= each + connect + bound);
					assert_true(traffic.received[r] <= each + connect + bound);
					sent += traffic.sent[r];
					received += traffic.received[r];
				}
				const uint64_t total =
					(uint64_t)(layout.nhosts - 1) * count *
						(shape.partial_size + shape.elem_size) +
					(uint64_t)layout.n * connect;
				assert_int_equal(sent, total);
				assert_int_equal(received, total);
			}
		}
	}
}

/*
 * A small NCCL_DET_HOSTS_STAGING cuts the message into several chunks (more sends in
 * the trace) and gives the bits of one chunk (the default staging).  Every stage
 * runs on the engine's stage stream, joined with the call's stream as the schedule
 * says: chunks + 2 joins each way per rank and call (so at least 4 in chunks).
 */
static void test_chunks(void **state)
{
	(void)state;
	/* Staging for 2 to 6 chunks of these messages; 4x1 needs 49K for its fp8 slots. */
	static const char *const layouts[] = {"AABB", "AAABBB", "ABCD"};
	static const char *const staging[] = {"41K", "41K", "49K"};
	static const ndet_dtype_t dtypes[] = {NDET_DTYPE_F32, NDET_DTYPE_BF16, NDET_DTYPE_F8E4M3};
	static _Alignas(16) unsigned char one_chunk[MAX_RANKS][ELEMS * 8];
	const struct call_spec spec = {CALL_ALLREDUCE, false, 0};
	for (size_t l = 0; l < sizeof(layouts) / sizeof(layouts[0]); l++) {
		struct layout layout;
		layout_use(&layout, layouts[l]);
		for (size_t d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]); d++) {
			const size_t count = MAX_RANKS * COUNT - 7;
			struct data *list[1] = {&sets[0]};
			int lines[2];
			for (int small = 0; small < 2; small++) {
				if (small)
					assert_int_equal(
						setenv("NCCL_DET_HOSTS_STAGING", staging[l], 1), 0);
				else
					unsetenv("NCCL_DET_HOSTS_STAGING");
				ndet_divert_settings_changed();
				data_fill(&sets[0], &layout, dtypes[d], NDET_OP_SUM, count,
					  4000 + d);
				struct ndet_fake_backend_counters before, after;
				ndet_fake_backend_counters(&before);
				ndet_divert_trace_on();
				run_ranks(&layout, list, 1, &spec);
				ndet_divert_trace_off();
				ndet_fake_backend_counters(&after);
				const int to_stages = after.hosts_orders_to_stages -
						      before.hosts_orders_to_stages;
				const int to_call =
					after.hosts_orders_to_call - before.hosts_orders_to_call;
				assert_int_equal(to_stages, to_call);
				assert_true(to_stages >= (small ? 4 : 3) * layout.n);
				assert_int_equal(to_stages % layout.n, 0);
				assert_int_equal(after.hosts_stages_off_stream,
						 before.hosts_stages_off_stream);
				lines[small] = ndet_divert_traced("ncclSend");
				expect_results(&sets[0], &spec, layout.n, layout.letters);
				for (int r = 0; r < layout.n; r++) {
					if (small)
						expect_bits(&sets[0], sets[0].output[r],
							    one_chunk[r], count + OFFSET, "chunks",
							    r);
					else
						memcpy(one_chunk[r], sets[0].output[r],
						       sizeof(one_chunk[r]));
				}
			}
			/* Several chunks: every chunk has its own sends. */
			if (lines[1] <= lines[0])
				fail_msg("%s %s: %d sends in chunks, %d in one", layout.letters,
					 ndet_dtype_name(dtypes[d]), lines[1], lines[0]);
		}
	}
}

/*
 * One thread drives every rank of two communicators (2x2 and 3x2 hosts) in one
 * group: each NCCL stage of all of them in one NCCL group, so nothing waits for a
 * rank this thread has not reached.  Results as from one thread per rank.
 */
static void test_one_thread_two_communicators(void **state)
{
	(void)state;
	struct layout two, three;
	ncclComm_t a[MAX_RANKS] = {NULL}, b[MAX_RANKS] = {NULL};
	const struct call_spec spec = {CALL_ALLREDUCE, false, 0};
	/* Rank r's host: A, A, B, B, C, C for both (the first has 4 ranks: 2x2). */
	layout_use(&two, "AABB");
	layout_use(&three, "AABBCC");
	assert_int_equal(fake_nccl_init_clique(a, two.n), ncclSuccess);
	assert_int_equal(fake_nccl_init_clique(b, three.n), ncclSuccess);
	data_fill(&sets[0], &two, NDET_DTYPE_BF16, NDET_OP_SUM, COUNT, 5000);
	data_fill(&sets[1], &three, NDET_DTYPE_F32, OP_PREMUL, COUNT, 5001);
	assert_int_equal(ncclGroupStart(), ncclSuccess);
	for (int r = 0; r < three.n; r++) {
		if (r < two.n)
			assert_int_equal(rank_call(&sets[0], &spec, r, two.n, a[r]), ncclSuccess);
		assert_int_equal(rank_call(&sets[1], &spec, r, three.n, b[r]), ncclSuccess);
	}
	assert_int_equal(ncclGroupEnd(), ncclSuccess);
	expect_results(&sets[0], &spec, two.n, "one thread, 2x2");
	expect_results(&sets[1], &spec, three.n, "one thread, 3x2");
	for (int r = 0; r < three.n; r++) {
		int diverted = -1;
		const char *reason = NULL;
		if (r < two.n) {
			assert_int_equal(ncclDetCommQuery(a[r], &diverted, &reason), ncclSuccess);
			assert_int_equal(diverted, 1);
			assert_int_equal(ncclCommDestroy(a[r]), ncclSuccess);
		}
		assert_int_equal(ncclDetCommQuery(b[r], &diverted, &reason), ncclSuccess);
		assert_int_equal(diverted, 1);
		assert_int_equal(ncclCommDestroy(b[r]), ncclSuccess);
	}
}

/*
 * The one-byte sends and receives of the setup's connections in the trace: for each
 * sender (its comm's serial, in rank order from `base`) and peer, how many.
 */
static void connect_lines(int counts[2][MAX_RANKS][MAX_RANKS], int *other, unsigned base)
{
	memset(counts, 0, sizeof(int) * 2 * MAX_RANKS * MAX_RANKS);
	*other = 0;
	char *text = fake_nccl_trace_read(ndet_divert_trace);
	assert_non_null(text);
	for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
		bool send = false;
		if (!p2p_line(line, &send))
			continue;
		if (strstr(line, "count=1,") == NULL) {
			(*other)++;
			continue;
		}
		const char *comm = strstr(line, "comm=comm"), *peer = strstr(line, "peer=");
		assert_non_null(comm);
		assert_non_null(peer);
		const int r = (int)(strtoul(comm + 9, NULL, 10) - base), p = atoi(peer + 5);
		assert_true(r >= 0 && r < MAX_RANKS && p >= 0 && p < MAX_RANKS);
		counts[send][r][p]++;
	}
	free(text);
}

/* The lowest serial of the communicators in the trace's ncclCommInitRank lines. */
static unsigned first_serial(void)
{
	unsigned lowest = ~0u;
	char *text = fake_nccl_trace_read(ndet_divert_trace);
	assert_non_null(text);
	for (const char *at = strstr(text, "comm=>comm"); at != NULL;
	     at = strstr(at + 1, "comm=>comm")) {
		const unsigned serial = (unsigned)strtoul(at + 10, NULL, 10);
		if (serial < lowest)
			lowest = serial;
	}
	free(text);
	return lowest;
}

/*
 * The setup makes NCCL's connections between hosts before the first call (NCCL makes
 * them lazily, at the first send to a peer): one byte to and from each rank of the
 * same local index on the other hosts, for every rank a thread sets up in one group
 * (one hosts_connect), and never again at a call.  NCCL failing them fails the init
 * with NCCL's error on every rank; the calls then still run and are right.
 */
static void test_connections_at_setup(void **state)
{
	(void)state;
	struct layout layout;
	ncclComm_t comms[MAX_RANKS] = {NULL};
	const struct call_spec spec = {CALL_ALLREDUCE, false, 0};
	int counts[2][MAX_RANKS][MAX_RANKS], other = 0;
	struct ndet_fake_backend_counters before, after;
	layout_use(&layout, "AABBCC");
	for (int failing = 0; failing < 2; failing++) {
		if (failing)
			assert_int_equal(setenv("FAKE_NCCL_FAIL", "ncclSend=6,ncclRecv=6", 1), 0);
		ndet_fake_backend_counters(&before);
		ndet_divert_trace_on();
		assert_int_equal(fake_nccl_init_clique(comms, layout.n),
				 failing ? ncclRemoteError : ncclSuccess);
		ndet_divert_trace_off();
		unsetenv("FAKE_NCCL_FAIL");
		ndet_fake_backend_counters(&after);
		assert_int_equal(after.hosts_connects, before.hosts_connects + 1);
		connect_lines(counts, &other, first_serial());
		assert_int_equal(other, 0);
		for (int r = 0; r < layout.n; r++) {
			int sent = 0, received = 0;
			for (int p = 0; p < layout.n; p++) {
				sent += counts[1][r][p];
				received += counts[0][r][p];
				/* Another host, the same local index. */
				const bool peer = layout.host_of[p] != layout.host_of[r] &&
						  p % layout.g == r % layout.g;
				if (!failing) {
					assert_int_equal(counts[1][r][p], peer ? 1 : 0);
					assert_int_equal(counts[0][r][p], peer ? 1 : 0);
					continue;
				}
				assert_true(counts[1][r][p] <= (peer ? 1 : 0));
				assert_true(counts[0][r][p] <= (peer ? 1 : 0));
			}
			/* The first failed send ended that rank's posts. */
			if (failing) {
				assert_int_equal(sent, 1);
				assert_int_equal(received, 0);
			}
		}
		assert_int_equal(ndet_divert_count_log("WARN", "connections between hosts"),
				 failing ? layout.n : 0);
		/* A call makes no connections, and its results are right. */
		data_fill(&sets[0], &layout, NDET_DTYPE_BF16, NDET_OP_SUM, COUNT, 7100 + failing);
		ndet_divert_trace_on();
		assert_int_equal(ncclGroupStart(), ncclSuccess);
		for (int r = 0; r < layout.n; r++)
			assert_int_equal(rank_call(&sets[0], &spec, r, layout.n, comms[r]),
					 ncclSuccess);
		assert_int_equal(ncclGroupEnd(), ncclSuccess);
		ndet_divert_trace_off();
		connect_lines(counts, &other, 0);
		assert_true(other > 0);
		assert_int_equal(ndet_divert_traced("ncclCommInitRank"), 0);
		expect_results(&sets[0], &spec, layout.n,
			       failing ? "after failed connections" : "after the connections");
		ndet_fake_backend_counters(&before);
		assert_int_equal(before.hosts_connects, after.hosts_connects);
		for (int r = 0; r < layout.n; r++) {
			int diverted = -1;
			const char *reason = NULL;
			assert_int_equal(ncclDetCommQuery(comms[r], &diverted, &reason),
					 ncclSuccess);
			assert_int_equal(diverted, 1);
			assert_int_equal(ncclCommDestroy(comms[r]), ncclSuccess);
		}
	}
}

/*
 * A rank's failure reaches the other hosts with the data: rank 3 calls with another op
 * than its peers (the same plan, another signature), so host B's stage 1 fails on
 * both of its ranks; host A's ranks receive B's blocks as usual, but also B's abort
 * words, and fail at their stage 3 instead of going on with B's stale partials.
 * Every rank's communicator reports ncclRemoteError; host A's ranks with
 * NDET_KERNEL_ERR_PEER.
 */
static void test_failure_reaches_other_hosts(void **state)
{
	(void)state;
	static float send[4][COUNT], recv[4][COUNT];
	const char *const layouts[] = {"AABB", "ABAB"};
	for (size_t l = 0; l < sizeof(layouts) / sizeof(layouts[0]); l++) {
		struct layout layout;
		ncclComm_t comms[MAX_RANKS] = {NULL};
		layout_use(&layout, layouts[l]);
		assert_int_equal(fake_nccl_init_clique(comms, layout.n), ncclSuccess);
		for (int r = 0; r < layout.n; r++)
			for (int i = 0; i < COUNT; i++)
				send[r][i] = (float)(r + 1) * 0.5f + (float)i;
		struct ndet_fake_backend_counters before, after;
		ndet_fake_backend_counters(&before);
		assert_int_equal(ncclGroupStart(), ncclSuccess);
		for (int r = 0; r < layout.n; r++)
			assert_int_equal(ncclAllReduce(send[r], recv[r], COUNT, ncclFloat32,
						       r == 3 ? ncclAvg : ncclSum, comms[r], NULL),
					 ncclSuccess);
		/* The host-only engine runs the stages at launch: the group end knows. */
		assert_int_equal(ncclGroupEnd(), ncclRemoteError);
		ndet_fake_backend_counters(&after);
		/* Every rank of the other host learned it from the status words. */
		assert_true(after.kernel_errors[NDET_KERNEL_ERR_PEER] -
				    before.kernel_errors[NDET_KERNEL_ERR_PEER] >=
			    layout.g);
		for (int r = 0; r < layout.n; r++) {
			ncclResult_t async = ncclSuccess;
			assert_int_equal(ncclCommGetAsyncError(comms[r], &async), ncclSuccess);
			if (async != ncclRemoteError)
				fail_msg("%s rank %d: ncclCommGetAsyncError says %d, want "
					 "ncclRemoteError",
					 layout.letters, r, (int)async);
			assert_int_equal(ncclCommAbort(comms[r]), ncclSuccess);
		}
	}
}

/* NCCL_DET_STRICT=1 on every rank: the multi-host calls divert, none is refused. */
static void test_strict(void **state)
{
	(void)state;
	struct layout layout;
	const struct call_spec spec = {CALL_ALLREDUCE, false, 0};
	struct data *list[1] = {&sets[0]};
	assert_int_equal(setenv("NCCL_DET_STRICT", "1", 1), 0);
	layout_use(&layout, "AAABBB");
	data_fill(&sets[0], &layout, NDET_DTYPE_F16, NDET_OP_MAX, COUNT, 6000);
	run_ranks(&layout, list, 1, &spec);
	expect_results(&sets[0], &spec, layout.n, "strict");
	assert_int_equal(ndet_divert_count_log("WARN", NULL), 0);
}

/*
 * NCCL fails the sends and receives between hosts on every rank: every rank's call
 * returns NCCL's result (no rank hangs, none falls back alone), the stages of our
 * own still meet, and the next call works and is right.
 */
static void test_nccl_failure_is_returned(void **state)
{
	(void)state;
	struct layout layout;
	ncclComm_t comms[MAX_RANKS] = {NULL};
	const struct call_spec spec = {CALL_ALLREDUCE, false, 0};
	layout_use(&layout, "AABB");
	assert_int_equal(fake_nccl_init_clique(comms, layout.n), ncclSuccess);
	for (int attempt = 0; attempt < 2; attempt++) {
		if (attempt == 0)
			assert_int_equal(setenv("FAKE_NCCL_FAIL", "ncclSend=6,ncclRecv=6", 1), 0);
		else
			unsetenv("FAKE_NCCL_FAIL");
		assert_int_equal(group_sum(&layout, comms, &spec, 7000),
				 attempt == 0 ? ncclRemoteError : ncclSuccess);
	}
	expect_results(&sets[0], &spec, layout.n, "after a failure");
	assert_int_equal(ndet_divert_count_log("WARN", "NCCL failed a send or receive"), layout.n);
	for (int r = 0; r < layout.n; r++) {
		struct ndet_comm_stats stats;
		assert_true(ndet_comm_stats(comms[r], &stats));
		assert_int_equal(stats.failed_calls, 1);
		assert_int_equal(stats.diverted_calls, 1);
		assert_int_equal(ncclCommDestroy(comms[r]), ncclSuccess);
	}
}

/*
 * The two streams of a call.  A rank whose stage stream is taken by another open
 * capture runs that call's stages on the call's stream: right results, no WARN.  A
 * join that fails fails the call on that rank, and its poisoned status word fails it
 * on every other rank too (no rank returns a result built from what it sent).
 */
static void test_stage_stream_fallbacks(void **state)
{
	(void)state;
	struct layout layout;
	ncclComm_t comms[MAX_RANKS] = {NULL};
	const struct call_spec spec = {CALL_ALLREDUCE, false, 0};
	layout_use(&layout, "AABB");
	assert_int_equal(fake_nccl_init_clique(comms, layout.n), ncclSuccess);

	struct ndet_fake_backend_counters before, after;
	ndet_fake_backend_counters(&before);
	ndet_fake_backend_stage_stream_busy(1);
	assert_int_equal(group_sum(&layout, comms, &spec, 7100), ncclSuccess);
	ndet_fake_backend_stage_stream_busy(-1);
	ndet_fake_backend_counters(&after);
	expect_results(&sets[0], &spec, layout.n, "a busy stage stream");
	/* Rank 1's three stages of its one chunk on the call's stream, and no join. */
	assert_int_equal(after.hosts_stages_off_stream - before.hosts_stages_off_stream, 3);
	assert_int_equal(after.hosts_orders_to_stages - before.hosts_orders_to_stages,
			 3 * (layout.n - 1));
	assert_int_equal(after.hosts_orders_to_call - before.hosts_orders_to_call,
			 3 * (layout.n - 1));
	assert_int_equal(ndet_divert_count_log("WARN", NULL), 0);
	for (int r = 0; r < layout.n; r++)
		assert_int_equal(ncclCommDestroy(comms[r]), ncclSuccess);

	/*
	 * Rank 3's join number `fail_after` fails.  One chunk: BEGIN, TO_S, group 0,
	 * TO_K, stage 3, TO_S, group 1, TO_K, stage 5, END.  Joins 0-3 come before a
	 * group, which carries the poisoned status word to host A; the local peer learns
	 * it from its abort word.  (After the last group only host B can learn it: host
	 * A already has every byte of a result rank 3 computed before its join failed.)
	 */
	for (int fail_after = 0; fail_after <= 3; fail_after++) {
		assert_int_equal(fake_nccl_init_clique(comms, layout.n), ncclSuccess);
		ndet_fake_backend_fail_join(3, fail_after);
		assert_int_not_equal(group_sum(&layout, comms, &spec, 7200 + (uint64_t)fail_after),
				     ncclSuccess);
		for (int r = 0; r < layout.n; r++) {
			ncclResult_t async = ncclSuccess;
			assert_int_equal(ncclCommGetAsyncError(comms[r], &async), ncclSuccess);
			if (r != 3 && async == ncclSuccess)
				fail_msg("rank %d: no error after rank 3's join %d failed", r,
					 fail_after);
			assert_int_equal(ncclCommDestroy(comms[r]), ncclSuccess);
		}
	}
	assert_int_equal(ndet_divert_count_log("WARN", "cannot order nccl-det's stage stream"), 4);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_layouts, setup),
		cmocka_unit_test_setup(test_stage_stream_fallbacks, setup),
		cmocka_unit_test_setup(test_collectives_in_place, setup),
		cmocka_unit_test_setup(test_inter_host_bytes, setup),
		cmocka_unit_test_setup(test_chunks, setup),
		cmocka_unit_test_setup(test_one_thread_two_communicators, setup),
		cmocka_unit_test_setup(test_connections_at_setup, setup),
		cmocka_unit_test_setup(test_failure_reaches_other_hosts, setup),
		cmocka_unit_test_setup(test_strict, setup),
		cmocka_unit_test_setup(test_nccl_failure_is_returned, setup),
	};
	return cmocka_run_group_tests(tests, ndet_divert_group_setup, ndet_divert_group_teardown);
}
