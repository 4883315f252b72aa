/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The multi-host schedule (src/protocol/ndet_hosts_plan.h): every element in exactly
 * one block of one chunk, sends that match receives rank by rank, the inter-host bytes
 * of the formula, staging in bounds and without overlaps, chunks from agreed facts
 * only.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/ndet_abi.h"
#include "protocol/ndet_hosts_plan.h"

#define MIB (1024u * 1024u)

/* The (H, g) pairs most tests walk: one host, one rank per host, odd and large. */
static const int host_counts[] = {1, 2, 3, 4, 7, 16, 64};
static const int local_counts[] = {1, 2, 3, 8};
#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

/* (data, partial) sizes: f32, bf16 with f32 partials, fp8, f64, and data-type partials. */
static const uint32_t sizes[][2] = {{4, 4}, {2, 4}, {1, 4}, {8, 8}, {2, 2}, {1, 1}};

static struct ndet_hosts_shape shape_of(uint32_t elem_size, uint32_t partial_size, int hosts,
					int local_ranks)
{
	struct ndet_hosts_shape shape = {elem_size, partial_size, hosts, local_ranks};
	return shape;
}

static struct ndet_hosts_plan plan_of(struct ndet_hosts_shape shape, uint64_t count,
				      uint64_t staging)
{
	struct ndet_hosts_params params = {shape, count, staging};
	struct ndet_hosts_plan plan;
	assert_int_equal(ndet_hosts_plan_make(&params, &plan), NDET_OK);
	return plan;
}

/*
 * Global ranks laid out as a launcher that round-robins hosts would: (h, l) is rank
 * l x H + h.  Host h's lowest rank is h, so hosts stay in host order, but a host's
 * ranks are not contiguous: the plan must use the mapping, not h x g + l.
 */
static int *interleaved_ranks(int hosts, int local_ranks)
{
	int *ranks = malloc(sizeof(int) * (size_t)hosts * (size_t)local_ranks);
	assert_non_null(ranks);
	for (int h = 0; h < hosts; h++)
		for (int l = 0; l < local_ranks; l++)
			ranks[h * local_ranks + l] = l * hosts + h;
	return ranks;
}

/* Counts around the interesting edges of a shape: 0, tiny, g x H +- 1, odd, large. */
static size_t counts_for(const struct ndet_hosts_shape *shape, uint64_t *counts)
{
	const uint64_t n = (uint64_t)shape->hosts * (uint64_t)shape->local_ranks;
	const uint64_t unit = NDET_SEGMENT_BYTES / shape->elem_size;
	const uint64_t list[] = {0,
				 1,
				 2,
				 3,
				 n - 1 + (n == 1),
				 n,
				 n + 1,
				 7 * n + 5,
				 unit * n,
				 unit * n + 1,
				 1000003u,
				 4u * MIB + 17,
				 (unit * n) * 37 - 1};
	memcpy(counts, list, sizeof(list));
	return COUNT_OF(list);
}

/* A check of one plan; ranks laid out as interleaved_ranks does. */
typedef void (*plan_check_fn)(const struct ndet_hosts_plan *plan, const int *ranks);

/*
 * Staging of a test: up to 1000 a multiple of the shape's least staging, above that
 * bytes (skipped where below the least).
 */
static uint64_t staging_of(uint64_t spec, const struct ndet_hosts_shape *shape)
{
	return spec <= 1000 ? spec * ndet_hosts_min_staging_bytes(shape) : spec;
}

static void check_shape(const struct ndet_hosts_shape *shape, const uint64_t *stagings,
			size_t nstagings, uint64_t max_chunks, plan_check_fn check)
{
	int *ranks = interleaved_ranks(shape->hosts, shape->local_ranks);
	uint64_t counts[16];
	const size_t ncounts = counts_for(shape, counts);
	for (size_t t = 0; t < nstagings; t++) {
		const uint64_t staging = staging_of(stagings[t], shape);
		if (staging < ndet_hosts_min_staging_bytes(shape))
			continue;
		for (size_t c = 0; c < ncounts; c++) {
			const struct ndet_hosts_plan plan = plan_of(*shape, counts[c], staging);
			/* The byte tally walks every chunk of every rank: not of huge plans. */
			if (plan.chunks <= max_chunks)
				check(&plan, ranks);
		}
	}
	free(ranks);
}

/* Every shape (sizes x host_counts x local_counts), count and staging. */
static void for_each_plan(const uint64_t *stagings, size_t nstagings, uint64_t max_chunks,
			  plan_check_fn check)
{
	for (size_t z = 0; z < COUNT_OF(sizes); z++)
		for (size_t h = 0; h < COUNT_OF(host_counts); h++)
			for (size_t l = 0; l < COUNT_OF(local_counts); l++) {
				const struct ndet_hosts_shape shape = shape_of(
					sizes[z][0], sizes[z][1], host_counts[h], local_counts[l]);
				check_shape(&shape, stagings, nstagings, max_chunks, check);
			}
}

static void test_hosts_partial_size(void **state)
{
	(void)state;
	assert_int_equal(ndet_hosts_partial_size(NDET_DTYPE_F32, NDET_OP_SUM, false, 8), 4);
	assert_int_equal(ndet_hosts_partial_size(NDET_DTYPE_BF16, NDET_OP_SUM, false, 8), 4);
	assert_int_equal(ndet_hosts_partial_size(NDET_DTYPE_F16, NDET_OP_AVG, false, 8), 4);
	assert_int_equal(ndet_hosts_partial_size(NDET_DTYPE_F8E4M3, NDET_OP_PROD, false, 8), 4);
	assert_int_equal(ndet_hosts_partial_size(NDET_DTYPE_F8E5M2, NDET_OP_SUM, false, 2), 4);
	assert_int_equal(ndet_hosts_partial_size(NDET_DTYPE_F64, NDET_OP_SUM, false, 8), 8);
	/* min/max: the partial is one of the inputs, exact in the data type. */
	assert_int_equal(ndet_hosts_partial_size(NDET_DTYPE_BF16, NDET_OP_MIN, false, 8), 2);
	assert_int_equal(ndet_hosts_partial_size(NDET_DTYPE_F8E4M3, NDET_OP_MAX, false, 8), 1);
	/* One rank per host: the partial is the rank's element... */
	assert_int_equal(ndet_hosts_partial_size(NDET_DTYPE_BF16, NDET_OP_SUM, false, 1), 2);
	assert_int_equal(ndet_hosts_partial_size(NDET_DTYPE_F16, NDET_OP_AVG, false, 1), 2);
	/* ... but x times s for PreMulSum, in the accumulation type. */
	assert_int_equal(ndet_hosts_partial_size(NDET_DTYPE_BF16, NDET_OP_SUM, true, 1), 4);
	assert_int_equal(ndet_hosts_partial_size(NDET_DTYPE_F64, NDET_OP_SUM, true, 1), 8);
	assert_int_equal(ndet_hosts_partial_size(NDET_DTYPE_COUNT, NDET_OP_SUM, false, 8), 0);
	assert_int_equal(ndet_hosts_partial_size(NDET_DTYPE_F32, NDET_OP_COUNT, false, 8), 0);
}

static void test_hosts_rejects_bad_arguments(void **state)
{
	(void)state;
	struct ndet_hosts_plan plan;
	const struct ndet_hosts_shape good = shape_of(2, 4, 4, 8);
	struct ndet_hosts_params params = {good, 1000, 64 * MIB};
	assert_int_equal(ndet_hosts_plan_make(&params, &plan), NDET_OK);
	const struct ndet_hosts_shape bad[] = {
		shape_of(3, 4, 4, 8), shape_of(0, 4, 4, 8),
		shape_of(2, 1, 4, 8), shape_of(2, 16, 4, 8),
		shape_of(2, 4, 0, 8), shape_of(2, 4, NDET_HOSTS_MAX_HOSTS + 1, 8),
		shape_of(2, 4, 4, 0), shape_of(2, 4, 4, NDET_HOSTS_MAX_LOCAL + 1)};
	for (size_t i = 0; i < COUNT_OF(bad); i++) {
		params.shape = bad[i];
		assert_int_equal(ndet_hosts_plan_make(&params, &plan), NDET_ERR_INVALID_ARGUMENT);
	}
	/* The least staging plans chunks of one unit per block; a byte less fails. */
	params.shape = good;
	params.staging_bytes = ndet_hosts_min_staging_bytes(&good);
	assert_int_equal(ndet_hosts_plan_make(&params, &plan), NDET_OK);
	assert_int_equal(plan.chunk_elems, 4 * 8 * NDET_SEGMENT_BYTES / 2);
	params.staging_bytes--;
	assert_int_equal(ndet_hosts_plan_make(&params, &plan), NDET_ERR_INVALID_ARGUMENT);

	/* A rank outside the shape, a negative global rank, an unknown stage. */
	params.staging_bytes = 64 * MIB;
	assert_int_equal(ndet_hosts_plan_make(&params, &plan), NDET_OK);
	int *ranks = interleaved_ranks(4, 8);
	struct ndet_hosts_transfer out[3];
	uint32_t n = 99;
	const struct ndet_hosts_chunk chunk = ndet_hosts_chunk_at(&plan, 0);
	const struct ndet_hosts_rank outside[] = {
		{4, 0, ranks}, {-1, 0, ranks}, {0, 8, ranks}, {0, -1, ranks}};
	for (size_t i = 0; i < COUNT_OF(outside); i++) {
		assert_int_equal(ndet_hosts_transfers(&plan, &chunk, &outside[i],
						      NDET_HOSTS_STAGE_PARTIALS, true, out, &n),
				 NDET_ERR_INVALID_ARGUMENT);
		assert_int_equal(n, 0);
	}
	const struct ndet_hosts_rank rank = {1, 2, ranks};
	assert_int_equal(
		ndet_hosts_transfers(&plan, &chunk, &rank, (ndet_hosts_stage_t)3, true, out, &n),
		NDET_ERR_INVALID_ARGUMENT);
	ranks[3 * 8 + 2] = -1;
	assert_int_equal(ndet_hosts_transfers(&plan, &chunk, &rank, NDET_HOSTS_STAGE_RESULTS, false,
					      out, &n),
			 NDET_ERR_INVALID_ARGUMENT);
	free(ranks);
}

/*
 * Walk the blocks of every chunk in (l, h) order: each starts where the previous one
 * ended, segment l is blocks (l, 0..H-1), the chunks tile [0, N).  That is a
 * partition: every element in exactly one block of one chunk.  Small messages are
 * also counted element by element.
 */
static void check_coverage(const struct ndet_hosts_plan *plan)
{
	const struct ndet_hosts_shape *shape = &plan->params.shape;
	const uint64_t count = plan->params.count;
	const uint64_t per_block =
		plan->chunk_elems / ((uint64_t)shape->hosts * shape->local_ranks);
	unsigned char *seen = count <= 100000 ? calloc(count + 1, 1) : NULL;
	assert_true(plan->chunks == 0 ? count == 0
				      : (plan->chunks - 1) * plan->chunk_elems < count);
	assert_true(plan->chunks * plan->chunk_elems >= count);
	uint64_t cursor = 0;
	for (uint64_t c = 0; c < plan->chunks; c++) {
		const struct ndet_hosts_chunk chunk = ndet_hosts_chunk_at(plan, c);
		assert_int_equal(chunk.elems.offset, cursor);
		assert_true(chunk.elems.count > 0 && chunk.elems.count <= plan->chunk_elems);
		assert_true(chunk.block_elems > 0 && chunk.block_elems <= per_block);
		assert_int_equal(chunk.slot, c % NDET_HOSTS_SLOTS);
		if (c + 1 < plan->chunks) /* full chunks: every block exactly the same */
			assert_int_equal(chunk.block_elems, per_block);
		for (int l = 0; l < shape->local_ranks; l++) {
			const struct ndet_hosts_range segment = ndet_hosts_segment(plan, &chunk, l);
			assert_int_equal(segment.offset, cursor);
			for (int h = 0; h < shape->hosts; h++) {
				const struct ndet_hosts_range block =
					ndet_hosts_block(plan, &chunk, l, h);
				assert_int_equal(block.offset, cursor);
				assert_true(block.count <= chunk.block_elems);
				for (uint64_t i = 0; seen && i < block.count; i++)
					seen[block.offset + i]++;
				cursor += block.count;
			}
			assert_int_equal(segment.offset + segment.count, cursor);
		}
		assert_int_equal(cursor, chunk.elems.offset + chunk.elems.count);
	}
	assert_int_equal(cursor, count);
	for (uint64_t i = 0; seen && i < count; i++)
		assert_int_equal(seen[i], 1);
	free(seen);
}

static void check_coverage_of(const struct ndet_hosts_plan *plan, const int *ranks)
{
	(void)ranks;
	check_coverage(plan);
}

static void test_hosts_covers_every_element_once(void **state)
{
	(void)state;
	const uint64_t stagings[] = {1, 4 * MIB, 96 * MIB};
	for_each_plan(stagings, COUNT_OF(stagings), UINT64_MAX, check_coverage_of);
}

/*
 * One stage of one chunk as every rank sees it: what host `from` sends to and what
 * host `to` receives from the other in column l (check_list: a rank's peers are in
 * its own column), cell (l x H + from) x H + to.
 */
struct ledger {
	int hosts;
	size_t cells;
	struct ndet_hosts_transfer *sent, *received;
	unsigned char *has_sent, *has_received;
};

static void ledger_free(struct ledger *ledger)
{
	free(ledger->sent);
	free(ledger->received);
	free(ledger->has_sent);
	free(ledger->has_received);
}

static void ledger_reset(struct ledger *ledger, const struct ndet_hosts_shape *shape)
{
	const size_t cells =
		(size_t)shape->local_ranks * (size_t)shape->hosts * (size_t)shape->hosts;
	if (cells != ledger->cells) {
		ledger_free(ledger);
		ledger->sent = calloc(cells, sizeof(*ledger->sent));
		ledger->received = calloc(cells, sizeof(*ledger->received));
		ledger->has_sent = calloc(cells, 1);
		ledger->has_received = calloc(cells, 1);
		assert_true(ledger->sent && ledger->received && ledger->has_sent &&
			    ledger->has_received);
	}
	ledger->hosts = shape->hosts;
	ledger->cells = cells;
	memset(ledger->has_sent, 0, cells);
	memset(ledger->has_received, 0, cells);
}

/*
 * The lists of one rank: ascending peer hosts, never itself, only its own column l,
 * never an empty transfer, and each moving the block the stage says it moves.
 */
static void check_list(const struct ndet_hosts_plan *plan, const struct ndet_hosts_chunk *chunk,
		       const struct ndet_hosts_rank *rank, ndet_hosts_stage_t stage, bool send,
		       const struct ndet_hosts_transfer *list, uint32_t n)
{
	const struct ndet_hosts_shape *shape = &plan->params.shape;
	const uint32_t size =
		stage == NDET_HOSTS_STAGE_PARTIALS ? shape->partial_size : shape->elem_size;
	const bool peer_block = (stage == NDET_HOSTS_STAGE_PARTIALS) == send;
	assert_true(n <= (uint32_t)(shape->hosts - 1));
	for (uint32_t i = 0; i < n; i++) {
		const struct ndet_hosts_transfer *t = &list[i];
		assert_true(t->peer_host != rank->host);
		assert_true(i == 0 || t->peer_host > list[i - 1].peer_host);
		assert_int_equal(t->peer,
				 rank->ranks[t->peer_host * shape->local_ranks + rank->local]);
		const struct ndet_hosts_range block = ndet_hosts_block(
			plan, chunk, rank->local, peer_block ? t->peer_host : rank->host);
		assert_int_equal(t->offset, block.offset);
		assert_int_equal(t->count, block.count);
		assert_true(t->count > 0);
		assert_int_equal(t->bytes, t->count * size);
	}
	/* Left out are exactly the empty blocks. */
	uint32_t nonempty = 0;
	for (int h = 0; h < shape->hosts; h++)
		if (h != rank->host &&
		    ndet_hosts_block(plan, chunk, rank->local, peer_block ? h : rank->host).count)
			nonempty++;
	assert_int_equal(n, nonempty);
}

static void record(struct ledger *ledger, const struct ndet_hosts_rank *rank,
		   const struct ndet_hosts_transfer *list, uint32_t n, bool send)
{
	const size_t column = (size_t)rank->local * (size_t)ledger->hosts;
	for (uint32_t i = 0; i < n; i++) {
		const int from = send ? rank->host : list[i].peer_host;
		const int to = send ? list[i].peer_host : rank->host;
		const size_t cell = (column + (size_t)from) * (size_t)ledger->hosts + (size_t)to;
		unsigned char *has = send ? ledger->has_sent : ledger->has_received;
		assert_int_equal(has[cell], 0); /* one transfer per pair and stage */
		has[cell] = 1;
		(send ? ledger->sent : ledger->received)[cell] = list[i];
	}
}

/* What A sends to B is exactly what B receives from A, and nothing goes unmatched. */
static void check_ledger(const struct ledger *ledger)
{
	for (size_t cell = 0; cell < ledger->cells; cell++) {
		assert_int_equal(ledger->has_sent[cell], ledger->has_received[cell]);
		if (!ledger->has_sent[cell])
			continue;
		assert_int_equal(ledger->sent[cell].offset, ledger->received[cell].offset);
		assert_int_equal(ledger->sent[cell].count, ledger->received[cell].count);
		assert_int_equal(ledger->sent[cell].bytes, ledger->received[cell].bytes);
	}
}

/* A rank's list of one stage and direction (asserting the call succeeds). */
static uint32_t list_of(const struct ndet_hosts_plan *plan, const struct ndet_hosts_chunk *chunk,
			const struct ndet_hosts_rank *rank, ndet_hosts_stage_t stage, bool send,
			struct ndet_hosts_transfer *list)
{
	uint32_t n = UINT32_MAX;
	assert_int_equal(ndet_hosts_transfers(plan, chunk, rank, stage, send, list, &n), NDET_OK);
	return n;
}

static const ndet_hosts_stage_t stages[] = {NDET_HOSTS_STAGE_PARTIALS, NDET_HOSTS_STAGE_RESULTS};

/*
 * The chunks a walk over every rank checks: the first NDET_HOSTS_SLOTS + 1 (every
 * slot, then one reused) and the last two (the short one and a full one before it).
 * The chunks between differ from these only in their offset and slot.
 */
static bool sampled(const struct ndet_hosts_plan *plan, uint64_t c)
{
	return c <= NDET_HOSTS_SLOTS || c + 2 >= plan->chunks;
}

/* Every rank's sends and receives of one stage of one chunk, matched pair by pair. */
static void check_stage_pairs(const struct ndet_hosts_plan *plan,
			      const struct ndet_hosts_chunk *chunk, ndet_hosts_stage_t stage,
			      const int *ranks, struct ledger *ledger)
{
	const struct ndet_hosts_shape *shape = &plan->params.shape;
	struct ndet_hosts_transfer list[NDET_HOSTS_MAX_HOSTS];
	ledger_reset(ledger, shape);
	for (int r = 0; r < shape->hosts * shape->local_ranks; r++) {
		const struct ndet_hosts_rank rank = {r / shape->local_ranks, r % shape->local_ranks,
						     ranks};
		for (int send = 0; send < 2; send++) {
			const uint32_t n = list_of(plan, chunk, &rank, stage, send, list);
			check_list(plan, chunk, &rank, stage, send, list, n);
			record(ledger, &rank, list, n, send);
		}
	}
	check_ledger(ledger);
}

static void check_pairs(const struct ndet_hosts_plan *plan, const int *ranks)
{
	struct ledger ledger = {0};
	for (uint64_t c = 0; c < plan->chunks; c++) {
		const struct ndet_hosts_chunk chunk = ndet_hosts_chunk_at(plan, c);
		for (size_t s = 0; s < COUNT_OF(stages) && sampled(plan, c); s++)
			check_stage_pairs(plan, &chunk, stages[s], ranks, &ledger);
	}
	ledger_free(&ledger);
}

static void test_hosts_sends_match_receives(void **state)
{
	(void)state;
	/* Little staging: many chunks for the large counts. */
	const uint64_t stagings[] = {3};
	for_each_plan(stagings, COUNT_OF(stagings), UINT64_MAX, check_pairs);
}

/* Every rank's bytes sent and received over every chunk and both stages. */
static void tally_bytes(const struct ndet_hosts_plan *plan, const int *ranks, uint64_t *sent,
			uint64_t *received)
{
	const struct ndet_hosts_shape *shape = &plan->params.shape;
	const int n = shape->hosts * shape->local_ranks;
	struct ndet_hosts_transfer list[NDET_HOSTS_MAX_HOSTS];
	for (uint64_t c = 0; c < plan->chunks; c++) {
		const struct ndet_hosts_chunk chunk = ndet_hosts_chunk_at(plan, c);
		for (int r = 0; r < n; r++) {
			const struct ndet_hosts_rank rank = {r / shape->local_ranks,
							     r % shape->local_ranks, ranks};
			for (size_t s = 0; s < COUNT_OF(stages); s++)
				for (int send = 0; send < 2; send++) {
					const uint32_t k =
						list_of(plan, &chunk, &rank, stages[s], send, list);
					for (uint32_t i = 0; i < k; i++)
						(send ? sent : received)[r] += list[i].bytes;
				}
		}
	}
}

/*
 * The per-rank check: no rank moves more than the formula's share plus the bound of
 * block rounding (ndet_hosts_rank_excess_bound).
 */
static bool within_bound(const struct ndet_hosts_shape *shape, uint64_t count,
			 const uint64_t *bytes)
{
	const uint64_t limit =
		ndet_hosts_inter_bytes(shape, count) + ndet_hosts_rank_excess_bound(shape);
	for (int r = 0; r < shape->hosts * shape->local_ranks; r++)
		if (bytes[r] > limit)
			return false;
	return true;
}

/*
 * All ranks together move exactly (H - 1) x N x (partial + data bytes) each way; each
 * rank its share within the bound.
 */
static void check_bytes(const struct ndet_hosts_plan *plan, const int *ranks)
{
	const struct ndet_hosts_shape *shape = &plan->params.shape;
	const uint64_t count = plan->params.count;
	const int n = shape->hosts * shape->local_ranks;
	uint64_t *sent = calloc((size_t)n, sizeof(uint64_t));
	uint64_t *received = calloc((size_t)n, sizeof(uint64_t));
	assert_true(sent && received);
	tally_bytes(plan, ranks, sent, received);
	uint64_t total_sent = 0, total_received = 0;
	for (int r = 0; r < n; r++) {
		total_sent += sent[r];
		total_received += received[r];
	}
	const uint64_t exact =
		(uint64_t)(shape->hosts - 1) * count * (shape->partial_size + shape->elem_size);
	assert_int_equal(total_sent, exact);
	assert_int_equal(total_received, exact);
	assert_true(within_bound(shape, count, sent));
	assert_true(within_bound(shape, count, received));
	free(sent);
	free(received);
}

static void test_hosts_inter_host_bytes(void **state)
{
	(void)state;
	/* The formula: 2 (H - 1) / H x S / g for f32; 1.5x that for bf16, 2.5x fp8. */
	const uint64_t s = 64 * MIB;
	const struct ndet_hosts_shape f32 = shape_of(4, 4, 4, 8), bf16 = shape_of(2, 4, 4, 8),
				      fp8 = shape_of(1, 4, 4, 8);
	const uint64_t ring = 2 * 3 * s / 4 / 8;
	assert_int_equal(ndet_hosts_inter_bytes(&f32, s / 4), ring);
	assert_int_equal(ndet_hosts_inter_bytes(&bf16, s / 2), ring * 3 / 2);
	assert_int_equal(ndet_hosts_inter_bytes(&fp8, s), ring * 5 / 2);
	/* Partials in the data type (g == 1, min/max): as f32. */
	assert_int_equal(ndet_hosts_inter_bytes(&(struct ndet_hosts_shape){2, 2, 4, 8}, s / 2),
			 ring);
	assert_int_equal(ndet_hosts_inter_bytes(&(struct ndet_hosts_shape){2, 4, 1, 8}, s), 0);
	/* No overflow on the way; saturated where the result itself would overflow. */
	assert_int_equal(ndet_hosts_inter_bytes(&f32, UINT64_MAX),
			 UINT64_MAX / 32 * 24 + 31 * 24 / 32);
	assert_int_equal(ndet_hosts_inter_bytes(&(struct ndet_hosts_shape){8, 8, 2, 1}, UINT64_MAX),
			 UINT64_MAX);
	assert_int_equal(ndet_hosts_rank_excess_bound(&fp8), 3 * 512 * 5);

	/* The schedule moves what the formula says, for every dtype and shape. */
	const uint64_t stagings[] = {3, 96 * MIB};
	for_each_plan(stagings, COUNT_OF(stagings), 64, check_bytes);

	/*
	 * A plan that gathered everything on local index 0 (rank (h, 0) owns every
	 * block of host h) moves the same total but fails the per-rank check.
	 */
	const uint64_t count = 1000003;
	uint64_t gathered[32] = {0};
	for (int h = 0; h < 4; h++)
		gathered[h * 8] = 3 * count * (bf16.partial_size + bf16.elem_size) / 4;
	assert_false(within_bound(&bf16, count, gathered));
}

/* The regions of a slot: in order, non-overlapping, large enough, in the staging. */
static void check_slot_layout(const struct ndet_hosts_plan *plan)
{
	const struct ndet_hosts_shape *shape = &plan->params.shape;
	const struct ndet_hosts_slot_layout *slot = &plan->slot;
	const uint64_t per_block =
		plan->chunk_elems / ((uint64_t)shape->hosts * (uint64_t)shape->local_ranks);
	const uint64_t segment = per_block * (uint64_t)shape->hosts;
	assert_int_equal(slot->partial_offset, 0);
	assert_true(slot->received_offset >= segment * shape->partial_size);
	assert_true(slot->received_stride >= per_block * shape->partial_size);
	assert_true(slot->result_offset >=
		    slot->received_offset + (uint64_t)(shape->hosts - 1) * slot->received_stride);
	/* The status words last: 2 x H of them, after the result segment. */
	assert_true(slot->status_offset >= slot->result_offset + segment * shape->elem_size);
	assert_int_equal(slot->status_offset % NDET_HOSTS_STAGING_ALIGN, 0);
	assert_int_equal(ndet_hosts_status_at(plan, NDET_HOSTS_STAGE_PARTIALS, 0),
			 slot->status_offset);
	assert_int_equal(ndet_hosts_status_at(plan, NDET_HOSTS_STAGE_RESULTS, 0),
			 slot->status_offset + (uint64_t)shape->hosts * NDET_HOSTS_STATUS_BYTES);
	assert_true(ndet_hosts_status_at(plan, NDET_HOSTS_STAGE_RESULTS, shape->hosts - 1) +
			    NDET_HOSTS_STATUS_BYTES <=
		    slot->bytes);
	assert_int_equal(slot->bytes % NDET_HOSTS_STAGING_ALIGN, 0);
	assert_int_equal(slot->received_offset % NDET_HOSTS_STAGING_ALIGN, 0);
	assert_int_equal(slot->result_offset % NDET_HOSTS_STAGING_ALIGN, 0);
	assert_int_equal(plan->staging_bytes, NDET_HOSTS_SLOTS * slot->bytes);
	assert_int_equal(plan->staging_bytes, ndet_hosts_staging_for(shape, plan->chunk_elems));
	assert_true(plan->staging_bytes <= plan->params.staging_bytes);
}

static bool disjoint(const struct ndet_hosts_transfer *a, const struct ndet_hosts_transfer *b)
{
	return a->staging_offset + a->bytes <= b->staging_offset ||
	       b->staging_offset + b->bytes <= a->staging_offset;
}

/* Receives lie in peer order in their region, each ending before the next begins. */
static void check_all_disjoint(const struct ndet_hosts_transfer *list, uint32_t n)
{
	for (uint32_t i = 1; i < n; i++)
		assert_true(list[i - 1].staging_offset + list[i - 1].bytes <=
			    list[i].staging_offset);
}

/*
 * One rank's transfers of one chunk: each inside its own region of the chunk's slot
 * (stage 2 sends: partial; receives: received; stage 4: result), the receives of a
 * stage never on each other, and stage 4's never on the block this rank sends.
 */
static void check_rank_staging(const struct ndet_hosts_plan *plan,
			       const struct ndet_hosts_chunk *chunk,
			       const struct ndet_hosts_rank *rank)
{
	const struct ndet_hosts_slot_layout *slot = &plan->slot;
	const uint64_t base = chunk->slot_offset;
	const uint64_t regions[4][2] = {{base + slot->partial_offset, base + slot->received_offset},
					{base + slot->received_offset, base + slot->result_offset},
					{base + slot->result_offset, base + slot->status_offset},
					{base + slot->result_offset, base + slot->status_offset}};
	struct ndet_hosts_transfer lists[4][NDET_HOSTS_MAX_HOSTS];
	uint32_t n[4];
	assert_true(base + slot->bytes <= plan->staging_bytes);
	for (int k = 0; k < 4; k++) {
		const bool send = k % 2 == 0;
		n[k] = list_of(plan, chunk, rank, stages[k / 2], send, lists[k]);
		for (uint32_t i = 0; i < n[k]; i++) {
			assert_true(lists[k][i].staging_offset >= regions[k][0]);
			assert_true(lists[k][i].staging_offset + lists[k][i].bytes <=
				    regions[k][1]);
		}
	}
	check_all_disjoint(lists[1], n[1]);
	check_all_disjoint(lists[3], n[3]);
	for (uint32_t i = 0; i < n[3] && n[2] > 0; i++)
		assert_true(disjoint(&lists[3][i], &lists[2][0]));
}

static void check_staging(const struct ndet_hosts_plan *plan, const int *ranks)
{
	const struct ndet_hosts_shape *shape = &plan->params.shape;
	check_slot_layout(plan);
	for (uint64_t c = 0; c < plan->chunks; c++) {
		const struct ndet_hosts_chunk chunk = ndet_hosts_chunk_at(plan, c);
		for (int r = 0; r < shape->hosts * shape->local_ranks && sampled(plan, c); r++) {
			const struct ndet_hosts_rank rank = {r / shape->local_ranks,
							     r % shape->local_ranks, ranks};
			check_rank_staging(plan, &chunk, &rank);
		}
	}
}

static void test_hosts_staging_layout(void **state)
{
	(void)state;
	const uint64_t stagings[] = {1, 5, 7 * MIB + 1000, 96 * MIB};
	for_each_plan(stagings, COUNT_OF(stagings), UINT64_MAX, check_staging);
}

/*
 * The chunk size: a function of the params alone (no rank enters the plan; the lists
 * are each rank's view of the same chunks), whole units per block, as many chunks as
 * NDET_HOSTS_CHUNKS where the staging allows, no fewer than the staging needs, and
 * not below NDET_HOSTS_MIN_STAGE_BYTES of stage 2 per rank.
 */
/*
 * The two-stream issue order, run as CUDA runs it: per stream in issue order, and a
 * TO_K (TO_S) is an event recorded on S (K) that K (S) then waits for.  From that,
 * which operation happens before which (transitive), and the checks: every stage
 * after what it reads, the slot of chunk c + 3 written only after chunk c's last use
 * of it, everything of the call between the first and last operation, and the
 * overlap the second stream is there for: stages 5(j - 2) and 1(j + 1) are not held
 * behind group j.
 */
enum { kScheduleMaxOps = 160 };

struct schedule_run {
	int n;
	bool before[kScheduleMaxOps][kScheduleMaxOps]; /* before[a][b]: a happens before b */
	int stage_at[6][16];                           /* [stage][chunk]: op index, or -1 */
	int group_at[18];                              /* [j] */
	int first, last;
};

static void schedule_run(uint64_t chunks, struct schedule_run *run)
{
	memset(run, 0, sizeof(*run));
	memset(run->stage_at, -1, sizeof(run->stage_at));
	memset(run->group_at, -1, sizeof(run->group_at));
	struct ndet_hosts_schedule schedule = {.chunks = chunks};
	int last_on[2] = {-1, -1}; /* 0: S, 1: K */
	int ops = 0;
	for (;;) {
		const struct ndet_hosts_op op = ndet_hosts_schedule_next(&schedule);
		if (op.kind == NDET_HOSTS_OP_DONE)
			break;
		assert_true(ops + 2 <= kScheduleMaxOps);
		/* A TO_x is two nodes: the record on one stream, the wait on the other. */
		int streams[2], count = 1;
		switch (op.kind) {
		case NDET_HOSTS_OP_TO_K:
			streams[0] = 0, streams[1] = 1, count = 2;
			break;
		case NDET_HOSTS_OP_TO_S:
			streams[0] = 1, streams[1] = 0, count = 2;
			break;
		case NDET_HOSTS_OP_STAGE:
			streams[0] = 1;
			assert_true(op.stage == NDET_HOSTS_STAGE_LOCAL ||
				    op.stage == NDET_HOSTS_STAGE_REDUCE ||
				    op.stage == NDET_HOSTS_STAGE_GATHER);
			assert_true(op.chunk < chunks);
			assert_int_equal(run->stage_at[op.stage][op.chunk], -1); /* once */
			run->stage_at[op.stage][op.chunk] = ops;
			break;
		default:
			assert_int_equal(op.kind, NDET_HOSTS_OP_GROUP);
			streams[0] = 0;
			assert_true(op.chunk <= chunks);
			assert_int_equal(run->group_at[op.chunk], -1);
			run->group_at[op.chunk] = ops;
			break;
		}
		for (int k = 0; k < count; k++) {
			const int node = ops + k;
			const int prev = last_on[streams[k]];
			if (prev >= 0) {
				for (int a = 0; a < node; a++)
					if (run->before[a][prev])
						run->before[a][node] = true;
				run->before[prev][node] = true;
			}
			if (k == 1) { /* the wait after its record */
				for (int a = 0; a < node; a++)
					if (run->before[a][ops])
						run->before[a][node] = true;
				run->before[ops][node] = true;
			}
			last_on[streams[k]] = node;
		}
		ops += count;
	}
	run->n = ops;
	run->first = 0;
	run->last = ops - 1;
}

static void test_hosts_schedule(void **state)
{
	(void)state;
	struct schedule_run *run = malloc(sizeof(*run));
	assert_non_null(run);
	for (uint64_t chunks = 0; chunks <= 15; chunks++) {
		schedule_run(chunks, run);
		/* It starts with K waiting for S and ends with S waiting for K. */
		struct ndet_hosts_schedule schedule = {.chunks = chunks};
		assert_int_equal(ndet_hosts_schedule_next(&schedule).kind, NDET_HOSTS_OP_TO_K);
		for (int a = 0; a < run->last; a++)
			assert_true(run->before[a][run->last]); /* S waits for everything */
		for (int b = 1; b <= run->last; b++)
			assert_true(run->before[0][b]); /* after the call's earlier work on S */
		for (uint64_t c = 0; c < chunks; c++) {
			const int one = run->stage_at[NDET_HOSTS_STAGE_LOCAL][c];
			const int three = run->stage_at[NDET_HOSTS_STAGE_REDUCE][c];
			const int five = run->stage_at[NDET_HOSTS_STAGE_GATHER][c];
			const int sent = run->group_at[c], returned = run->group_at[c + 1];
			assert_true(one >= 0 && three >= 0 && five >= 0 && sent >= 0 &&
				    returned >= 0);
			/* The data path: 1 -> group c (stage 2) -> 3 -> group c + 1 (stage 4) -> 5.
			 */
			assert_true(run->before[one][sent]);
			assert_true(run->before[sent][three]);
			assert_true(run->before[three][returned]);
			assert_true(run->before[returned][five]);
			/* Slot reuse: chunk c + 3 takes chunk c's slot. */
			if (c + 3 < chunks) {
				const int next_one = run->stage_at[NDET_HOSTS_STAGE_LOCAL][c + 3];
				const int next_three =
					run->stage_at[NDET_HOSTS_STAGE_REDUCE][c + 3];
				assert_true(run->before[sent][next_one]); /* partials sent */
				assert_true(run->before[three]
						       [run->group_at[c + 3]]); /* received read */
				assert_true(run->before[returned][next_three]); /* results sent */
				assert_true(run->before[five][next_three]);     /* results read */
				assert_true(run->before[five][run->group_at[c + 4]]);
			}
			/* The overlap: what runs on K while group c runs on S. */
			if (c + 1 < chunks)
				assert_false(
					run->before[sent]
						   [run->stage_at[NDET_HOSTS_STAGE_LOCAL][c + 1]]);
			if (c >= 2)
				assert_false(
					run->before[sent]
						   [run->stage_at[NDET_HOSTS_STAGE_GATHER][c - 2]]);
		}
		/* Every stage and group of the call, once (checked as they came). */
		for (uint64_t j = 0; j <= chunks && chunks > 0; j++)
			assert_true(run->group_at[j] >= 0);
		if (chunks == 0)
			assert_int_equal(run->n, 4); /* TO_K, TO_S: nothing between */
	}
	free(run);
}

/* Where a stalled call stood: packed into one word, clipped, and said in words. */
static void test_hosts_where(void **state)
{
	(void)state;
	const uint64_t w = ndet_hosts_where(NDET_HOSTS_STAGE_REDUCE, 4, 9);
	assert_int_equal(NDET_HOSTS_WHERE_STAGE(w), 3);
	assert_int_equal(NDET_HOSTS_WHERE_CHUNK(w), 4);
	assert_int_equal(NDET_HOSTS_WHERE_CHUNKS(w), 9);
	char text[64];
	ndet_hosts_where_text(w, text, sizeof(text));
	assert_string_equal(text, "stage 3 of chunk 5 of 9");
	ndet_hosts_where_text(0, text, sizeof(text));
	assert_string_equal(text, "no stage kernel yet");
	/* Counts past the field's width clip instead of spilling into the stage. */
	const uint64_t big = ndet_hosts_where(NDET_HOSTS_STAGE_GATHER, 1ull << 40, 1ull << 41);
	assert_int_equal(NDET_HOSTS_WHERE_STAGE(big), 5);
	assert_int_equal(NDET_HOSTS_WHERE_CHUNK(big), NDET_HOSTS_WHERE_MAX);
	assert_int_equal(NDET_HOSTS_WHERE_CHUNKS(big), NDET_HOSTS_WHERE_MAX);
	ndet_hosts_where_text(w, text, 8); /* clipped, terminated */
	assert_string_equal(text, "stage 3");
}

static void test_hosts_chunking(void **state)
{
	(void)state;
	const struct ndet_hosts_shape shape = shape_of(2, 4, 16, 8);
	const uint64_t granule = 16 * 8 * NDET_SEGMENT_BYTES / 2;
	/* Equal params, equal plans, byte for byte. */
	struct ndet_hosts_params params = {shape, 123456789, 96 * MIB};
	struct ndet_hosts_plan a, b;
	memset(&a, 0xa5, sizeof(a));
	memset(&b, 0x5a, sizeof(b));
	assert_int_equal(ndet_hosts_plan_make(&params, &a), NDET_OK);
	assert_int_equal(ndet_hosts_plan_make(&params, &b), NDET_OK);
	assert_int_equal(a.chunk_elems, b.chunk_elems);
	assert_int_equal(a.chunks, b.chunks);
	assert_memory_equal(&a.slot, &b.slot, sizeof(a.slot));
	assert_int_equal(a.chunk_elems % granule, 0);

	/* Ample staging: NDET_HOSTS_CHUNKS chunks of a large message. */
	struct ndet_hosts_plan plan = plan_of(shape, 1000 * NDET_HOSTS_CHUNKS * granule, 1u << 30);
	assert_int_equal(plan.chunks, NDET_HOSTS_CHUNKS);
	assert_int_equal(plan.chunk_elems, 1000 * granule);
	/* Little staging: as many chunks as it needs, each as large as it holds. */
	plan = plan_of(shape, 1000 * NDET_HOSTS_CHUNKS * granule, 16 * MIB);
	assert_true(plan.chunks > NDET_HOSTS_CHUNKS);
	assert_true(plan.staging_bytes <= 16 * MIB);
	uint64_t most = 1;
	while (ndet_hosts_staging_for(&shape, (most + 1) * granule) <= 16 * MIB)
		most++;
	assert_int_equal(plan.chunks, (1000 * NDET_HOSTS_CHUNKS + most - 1) / most);
	/* ... evened out: the last one within a granule per chunk of the others. */
	struct ndet_hosts_chunk tail = ndet_hosts_chunk_at(&plan, plan.chunks - 1);
	assert_true(tail.elems.count + plan.chunks * granule > plan.chunk_elems);
	/* More staging never makes more chunks. */
	uint64_t last = UINT64_MAX;
	for (uint64_t staging = ndet_hosts_min_staging_bytes(&shape); staging <= (256u * MIB);
	     staging *= 2) {
		plan = plan_of(shape, 50000000, staging);
		assert_true(plan.chunks <= last);
		last = plan.chunks;
	}
	/* A message that needs no split: one chunk; above it, every chunk big enough. */
	const uint64_t stage_units = (NDET_HOSTS_MIN_STAGE_BYTES + 15 * 256 * 4 - 1) /
				     (15 * 256 * 4); /* (H - 1) x unit x partial bytes */
	plan = plan_of(shape, stage_units * granule, 1u << 30);
	assert_int_equal(plan.chunks, 1);
	plan = plan_of(shape, 3 * stage_units * granule, 1u << 30);
	assert_int_equal(plan.chunks, 3);
	const struct ndet_hosts_chunk first = ndet_hosts_chunk_at(&plan, 0);
	assert_true(15 * first.block_elems * 4 >= NDET_HOSTS_MIN_STAGE_BYTES);
	/* The chunks are evened: the last one is within a granule of the others. */
	plan = plan_of(shape, 10 * stage_units * granule + 1, 1u << 30);
	tail = ndet_hosts_chunk_at(&plan, plan.chunks - 1);
	assert_true(tail.elems.count + plan.chunks * granule > plan.chunk_elems);
}

/*
 * A call's plan parameters: the partial type of its op (PreMulSum sums, its leaves
 * scaled), and a reduce-scatter planned over its whole send buffer.
 */
static void test_hosts_params_for_call(void **state)
{
	(void)state;
	struct ndet_hosts_params p = ndet_hosts_params_for(
		NDET_DTYPE_BF16, NDET_OP_AVG, false, NDET_COLL_ALLREDUCE, 1000, 3, 2, 5 * MIB);
	assert_int_equal(p.shape.elem_size, 2);
	assert_int_equal(p.shape.partial_size, 4);
	assert_int_equal(p.shape.hosts, 3);
	assert_int_equal(p.shape.local_ranks, 2);
	assert_int_equal(p.count, 1000);
	assert_int_equal(p.staging_bytes, 5 * MIB);
	p = ndet_hosts_params_for(NDET_DTYPE_BF16, NDET_OP_MAX, false, NDET_COLL_REDUCE_SCATTER,
				  1000, 3, 2, 5 * MIB);
	assert_int_equal(p.shape.partial_size, 2);
	assert_int_equal(p.count, 6000);
	/* One rank per host: its own element travels, but x times s needs f32. */
	p = ndet_hosts_params_for(NDET_DTYPE_F8E4M3, NDET_OP_SUM, false, NDET_COLL_REDUCE, 77, 4, 1,
				  MIB);
	assert_int_equal(p.shape.partial_size, 1);
	assert_int_equal(p.count, 77);
	p = ndet_hosts_params_for(NDET_DTYPE_F8E4M3, NDET_OP_SUM, true, NDET_COLL_ALLREDUCE, 77, 4,
				  1, MIB);
	assert_int_equal(p.shape.partial_size, 4);
	p = ndet_hosts_params_for(NDET_DTYPE_F64, NDET_OP_PROD, false, NDET_COLL_ALLREDUCE, 9, 2, 8,
				  MIB);
	assert_int_equal(p.shape.partial_size, 8);
}

/*
 * The least staging of a layout is every dtype's least: each dtype and op class plans
 * with it, and one byte less fails the worst of them.
 */
static void test_hosts_min_staging_any(void **state)
{
	(void)state;
	for (size_t h = 0; h < COUNT_OF(host_counts); h++) {
		for (size_t l = 0; l < COUNT_OF(local_counts); l++) {
			const int hosts = host_counts[h], g = local_counts[l];
			const uint64_t least = ndet_hosts_min_staging_any(hosts, g);
			bool tight = false;
			for (size_t k = 0; k < COUNT_OF(sizes); k++) {
				const struct ndet_hosts_shape shape =
					shape_of(sizes[k][0], sizes[k][1], hosts, g);
				struct ndet_hosts_params params = {shape, 1u << 20, least};
				struct ndet_hosts_plan plan;
				assert_int_equal(ndet_hosts_plan_make(&params, &plan), NDET_OK);
				params.staging_bytes = least - 1;
				tight = tight || ndet_hosts_plan_make(&params, &plan) ==
							 NDET_ERR_INVALID_ARGUMENT;
			}
			assert_true(tight);
		}
	}
}

/*
 * How a stage kernel runs: stage 1 splits a lane into g pieces, stage 5 takes a lane
 * per piece, both whole 512-byte units; blocks cover the segment's pieces up to half
 * the cap (24 here); stage 3 a block per 1024 elements.  The signature is the same for the same
 * stage of the same call and differs between stages, chunks and calls (it is what
 * the flags compare).
 */
static void test_hosts_launch(void **state)
{
	(void)state;
	const struct ndet_hosts_shape shape = shape_of(2, 4, 3, 4); /* bf16, 3 hosts of 4 */
	const struct ndet_hosts_plan plan = plan_of(shape, 5000001, 3 * MIB);
	assert_true(plan.chunks >= 3);
	const struct ndet_hosts_call_key key = {
		.dtype = NDET_DTYPE_BF16, .op = NDET_OP_SUM, .coll = NDET_COLL_ALLREDUCE};
	const uint64_t lane = 64u << 10;
	uint32_t seen[3 * 16];
	int nseen = 0;
	for (uint64_t j = 0; j < plan.chunks && j < 16; j++) {
		const struct ndet_hosts_chunk chunk = ndet_hosts_chunk_at(&plan, j);
		const uint64_t segment = 3 * chunk.block_elems;
		struct ndet_hosts_launch one, three, five, again;
		assert_int_equal(ndet_hosts_launch_make(&plan, &chunk, &key, NDET_HOSTS_STAGE_LOCAL,
							lane, 24, &one),
				 NDET_OK);
		assert_int_equal(one.piece_elems * 2 % NDET_SEGMENT_BYTES, 0);
		assert_true(one.piece_elems * 2 * 4 <= lane);
		assert_true((one.piece_elems + NDET_SEGMENT_BYTES / 2) * 2 * 4 > lane);
		assert_int_equal(one.blocks,
				 (segment + one.piece_elems - 1) / one.piece_elems < 12
					 ? (segment + one.piece_elems - 1) / one.piece_elems
					 : 12);
		assert_int_equal(ndet_hosts_launch_make(&plan, &chunk, &key,
							NDET_HOSTS_STAGE_GATHER, lane, 24, &five),
				 NDET_OK);
		assert_int_equal(five.piece_elems * 2, lane);
		assert_true(five.blocks >= 1 && five.blocks <= 12);
		assert_int_equal(ndet_hosts_launch_make(&plan, &chunk, &key,
							NDET_HOSTS_STAGE_REDUCE, lane, 24, &three),
				 NDET_OK);
		assert_int_equal(three.blocks, (chunk.block_elems + 1023) / 1024 < 12
						       ? (chunk.block_elems + 1023) / 1024
						       : 12);
		assert_int_equal(ndet_hosts_launch_make(&plan, &chunk, &key, NDET_HOSTS_STAGE_LOCAL,
							lane, 24, &again),
				 NDET_OK);
		assert_int_equal(again.signature, one.signature);
		const uint32_t sigs[] = {one.signature, three.signature, five.signature};
		for (int k = 0; k < 3; k++) {
			assert_true(sigs[k] != 0 && sigs[k] <= NDET_FLAG_SIGNATURE_MASK);
			for (int i = 0; i < nseen; i++)
				assert_int_not_equal(seen[i], sigs[k]);
			seen[nseen++] = sigs[k];
		}
	}
	/* Another op, collective or root: another signature. */
	const struct ndet_hosts_chunk chunk = ndet_hosts_chunk_at(&plan, 0);
	struct ndet_hosts_launch base, other;
	assert_int_equal(ndet_hosts_launch_make(&plan, &chunk, &key, NDET_HOSTS_STAGE_GATHER, lane,
						24, &base),
			 NDET_OK);
	const struct ndet_hosts_call_key others[] = {
		{.dtype = NDET_DTYPE_BF16, .op = NDET_OP_AVG, .coll = NDET_COLL_ALLREDUCE},
		{.dtype = NDET_DTYPE_F16, .op = NDET_OP_SUM, .coll = NDET_COLL_ALLREDUCE},
		{.dtype = NDET_DTYPE_BF16, .op = NDET_OP_SUM, .coll = NDET_COLL_REDUCE, .root = 1},
		{.dtype = NDET_DTYPE_BF16, .op = NDET_OP_SUM, .coll = NDET_COLL_REDUCE, .root = 2},
		{.dtype = NDET_DTYPE_BF16,
		 .op = NDET_OP_SUM,
		 .coll = NDET_COLL_ALLREDUCE,
		 .premul = true},
	};
	for (size_t k = 0; k < COUNT_OF(others); k++) {
		assert_int_equal(ndet_hosts_launch_make(&plan, &chunk, &others[k],
							NDET_HOSTS_STAGE_GATHER, lane, 24, &other),
				 NDET_OK);
		assert_int_not_equal(other.signature, base.signature);
	}
	/* Not a kernel stage, no blocks, or a lane that holds less than g units. */
	assert_int_equal(ndet_hosts_launch_make(&plan, &chunk, &key, NDET_HOSTS_STAGE_PARTIALS,
						lane, 24, &other),
			 NDET_ERR_INVALID_ARGUMENT);
	assert_int_equal(ndet_hosts_launch_make(&plan, &chunk, &key, NDET_HOSTS_STAGE_LOCAL, lane,
						0, &other),
			 NDET_ERR_INVALID_ARGUMENT);
	assert_int_equal(ndet_hosts_launch_make(&plan, &chunk, &key, NDET_HOSTS_STAGE_LOCAL,
						3 * NDET_SEGMENT_BYTES, 24, &other),
			 NDET_ERR_INVALID_ARGUMENT);
	assert_int_equal(ndet_hosts_launch_make(&plan, &chunk, &key, NDET_HOSTS_STAGE_GATHER,
						3 * NDET_SEGMENT_BYTES, 24, &other),
			 NDET_OK);
}

/*
 * The stall observer: a word that says NCCL's stage follows and stays the same for
 * more than the timeout is a stall, from its first observation on (sticky); a word
 * that changes, or whose bit 0 is clear, starts the clock again; timeout 0 never
 * stalls.
 */
static void test_stall_observe(void **state)
{
	(void)state;
	struct ndet_hosts_stall stall = {0};
	const uint64_t in_nccl = (77u << 1) | 1u, later = (78u << 1) | 1u, idle = 79u << 1;
	assert_false(ndet_hosts_stall_observe(&stall, in_nccl, 1000, 100));
	assert_false(ndet_hosts_stall_observe(&stall, in_nccl, 1100, 100)); /* exactly: not yet */
	assert_false(ndet_hosts_stall_observe(&stall, later, 1150, 100));   /* progress */
	assert_false(ndet_hosts_stall_observe(&stall, later, 1250, 100));
	assert_true(ndet_hosts_stall_observe(&stall, later, 1251, 100));
	assert_true(ndet_hosts_stall_observe(&stall, idle, 5000, 100)); /* sticky */

	struct ndet_hosts_stall quiet = {0};
	assert_false(ndet_hosts_stall_observe(&quiet, idle, 0, 100));
	assert_false(ndet_hosts_stall_observe(&quiet, idle, 100000, 100)); /* between calls */
	assert_false(ndet_hosts_stall_observe(&quiet, in_nccl, 100001, 100));
	assert_true(ndet_hosts_stall_observe(&quiet, in_nccl, 100102, 100));

	struct ndet_hosts_stall never = {0};
	assert_false(ndet_hosts_stall_observe(&never, in_nccl, 0, 0));
	assert_false(ndet_hosts_stall_observe(&never, in_nccl, UINT64_C(1) << 40, 0));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hosts_partial_size),
		cmocka_unit_test(test_hosts_rejects_bad_arguments),
		cmocka_unit_test(test_hosts_covers_every_element_once),
		cmocka_unit_test(test_hosts_sends_match_receives),
		cmocka_unit_test(test_hosts_inter_host_bytes),
		cmocka_unit_test(test_hosts_staging_layout),
		cmocka_unit_test(test_hosts_chunking),
		cmocka_unit_test(test_hosts_where),
		cmocka_unit_test(test_hosts_schedule),
		cmocka_unit_test(test_hosts_params_for_call),
		cmocka_unit_test(test_hosts_min_staging_any),
		cmocka_unit_test(test_hosts_launch),
		cmocka_unit_test(test_stall_observe),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
