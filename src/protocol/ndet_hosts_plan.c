/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The schedule of a deterministic all-reduce over several hosts (see
 * ndet_hosts_plan.h).
 */
#include "config.h"

#include "protocol/ndet_hosts_plan.h"

#include <stdio.h>
#include <string.h>

#include "common/ndet_dtype.h"
#include "kernels/ndet_abi.h"
#include "protocol/ndet_plan.h"

static uint64_t ndet_hosts_div_up(uint64_t a, uint64_t b)
{
	return a / b + (a % b != 0);
}

static uint64_t ndet_hosts_align(uint64_t bytes, uint64_t align)
{
	return ndet_hosts_div_up(bytes, align) * align;
}

static bool ndet_hosts_size_ok(uint32_t size)
{
	return size == 1 || size == 2 || size == 4 || size == 8;
}

static bool ndet_hosts_shape_ok(const struct ndet_hosts_shape *shape)
{
	return ndet_hosts_size_ok(shape->elem_size) && ndet_hosts_size_ok(shape->partial_size) &&
	       shape->partial_size >= shape->elem_size && shape->hosts >= 1 &&
	       shape->hosts <= NDET_HOSTS_MAX_HOSTS && shape->local_ranks >= 1 &&
	       shape->local_ranks <= NDET_HOSTS_MAX_LOCAL;
}

/* g x H: the blocks of a chunk. */
static uint64_t ndet_hosts_blocks(const struct ndet_hosts_shape *shape)
{
	return (uint64_t)shape->hosts * (uint64_t)shape->local_ranks;
}

/* Elements of one 512-byte unit of the data type. */
static uint64_t ndet_hosts_unit(const struct ndet_hosts_shape *shape)
{
	return NDET_SEGMENT_BYTES / shape->elem_size;
}

uint32_t ndet_hosts_partial_size(ndet_dtype_t dtype, ndet_op_t op, bool premul, int local_ranks)
{
	const uint32_t size = (uint32_t)ndet_dtype_size(dtype);
	if (size == 0 || (unsigned)op >= NDET_OP_COUNT)
		return 0;
	if (op == NDET_OP_MIN || op == NDET_OP_MAX || (local_ranks == 1 && !premul))
		return size;
	return dtype == NDET_DTYPE_F64 ? 8u : 4u;
}

struct ndet_hosts_slot_layout ndet_hosts_slot_for(const struct ndet_hosts_shape *shape,
						  uint64_t chunk_elems)
{
	const uint64_t hosts = (uint64_t)shape->hosts;
	const uint64_t block = chunk_elems / ndet_hosts_blocks(shape);
	const uint64_t segment = block * hosts;
	struct ndet_hosts_slot_layout slot;
	slot.partial_offset = 0;
	slot.received_offset =
		ndet_hosts_align(segment * shape->partial_size, NDET_HOSTS_STAGING_ALIGN);
	slot.received_stride = ndet_hosts_align(block * shape->partial_size, 16);
	slot.result_offset =
		slot.received_offset +
		ndet_hosts_align((hosts - 1) * slot.received_stride, NDET_HOSTS_STAGING_ALIGN);
	slot.status_offset = slot.result_offset +
			     ndet_hosts_align(segment * shape->elem_size, NDET_HOSTS_STAGING_ALIGN);
	slot.bytes = slot.status_offset + ndet_hosts_align(2u * hosts * NDET_HOSTS_STATUS_BYTES,
							   NDET_HOSTS_STAGING_ALIGN);
	return slot;
}

uint64_t ndet_hosts_status_at(const struct ndet_hosts_plan *plan, ndet_hosts_stage_t stage,
			      int peer)
{
	const uint64_t first =
		stage == NDET_HOSTS_STAGE_RESULTS ? (uint64_t)plan->params.shape.hosts : 0u;
	return plan->slot.status_offset + (first + (uint64_t)peer) * NDET_HOSTS_STATUS_BYTES;
}

uint64_t ndet_hosts_staging_for(const struct ndet_hosts_shape *shape, uint64_t chunk_elems)
{
	return NDET_HOSTS_SLOTS * ndet_hosts_slot_for(shape, chunk_elems).bytes;
}

uint64_t ndet_hosts_min_staging_bytes(const struct ndet_hosts_shape *shape)
{
	return ndet_hosts_staging_for(shape, ndet_hosts_blocks(shape) * ndet_hosts_unit(shape));
}

struct ndet_hosts_params ndet_hosts_params_for(ndet_dtype_t dtype, ndet_op_t op, bool premul,
					       ndet_coll_t coll, uint64_t count, int hosts,
					       int local_ranks, uint64_t staging_bytes)
{
	const uint64_t blocks =
		coll == NDET_COLL_REDUCE_SCATTER ? (uint64_t)hosts * (uint64_t)local_ranks : 1;
	const struct ndet_hosts_params params = {
		.shape =
			{
				.elem_size = (uint32_t)ndet_dtype_size(dtype),
				.partial_size = ndet_hosts_partial_size(
					dtype, premul ? NDET_OP_SUM : op, premul, local_ranks),
				.hosts = hosts,
				.local_ranks = local_ranks,
			},
		.count = count * blocks,
		.staging_bytes = staging_bytes,
	};
	return params;
}

uint64_t ndet_hosts_min_staging_any(int hosts, int local_ranks)
{
	/* (elem_size, partial_size) of every dtype and op class. */
	static const uint32_t sizes[][2] = {{1, 4}, {1, 1}, {2, 4}, {2, 2}, {4, 4}, {8, 8}};
	uint64_t least = 0;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		const struct ndet_hosts_shape shape = {sizes[i][0], sizes[i][1], hosts,
						       local_ranks};
		const uint64_t bytes = ndet_hosts_min_staging_bytes(&shape);
		if (bytes > least)
			least = bytes;
	}
	return least;
}

/* The flags' signature of a stage: what tells stages of calls apart. */
static uint32_t ndet_hosts_signature(const struct ndet_hosts_plan *plan,
				     const struct ndet_hosts_chunk *chunk,
				     const struct ndet_hosts_call_key *call,
				     ndet_hosts_stage_t stage,
				     const struct ndet_hosts_launch *launch)
{
	const uint64_t root = call->coll == NDET_COLL_REDUCE ? (uint64_t)call->root : 0;
	const uint64_t words[] = {plan->params.count,
				  (uint64_t)call->dtype,
				  (uint64_t)call->op,
				  (uint64_t)call->coll,
				  root,
				  (uint64_t)call->premul,
				  (uint64_t)plan->params.shape.hosts,
				  (uint64_t)plan->params.shape.local_ranks,
				  plan->chunk_elems,
				  chunk->index,
				  (uint64_t)stage,
				  launch->blocks,
				  launch->piece_elems};
	return ndet_plan_signature_of(words, sizeof(words) / sizeof(words[0]));
}

ndet_status_t ndet_hosts_launch_make(const struct ndet_hosts_plan *plan,
				     const struct ndet_hosts_chunk *chunk,
				     const struct ndet_hosts_call_key *call,
				     ndet_hosts_stage_t stage, uint64_t lane_bytes,
				     uint32_t max_blocks, struct ndet_hosts_launch *out)
{
	const struct ndet_hosts_shape *shape = &plan->params.shape;
	const uint64_t es = shape->elem_size;
	const uint64_t g = (uint64_t)shape->local_ranks;
	memset(out, 0, sizeof(*out));
	if (max_blocks == 0 || es == 0)
		return NDET_ERR_INVALID_ARGUMENT;
	/*
	 * Half the grid cap: the other half of this rank's share of the GPU stays free for
	 * NCCL's send and receive kernels, which a local peer's stream may be running while
	 * ours spin on that peer (doc/multihost-design.md, "SMs").
	 */
	max_blocks = max_blocks > 1 ? max_blocks / 2 : 1;
	if (stage == NDET_HOSTS_STAGE_REDUCE) {
		const uint64_t blocks = (chunk->block_elems + 1023) / 1024;
		out->blocks = (uint32_t)(blocks < 1            ? 1
					 : blocks < max_blocks ? blocks
							       : max_blocks);
	} else if (stage == NDET_HOSTS_STAGE_LOCAL || stage == NDET_HOSTS_STAGE_GATHER) {
		const uint64_t ways = stage == NDET_HOSTS_STAGE_LOCAL ? g : 1;
		const uint64_t units = lane_bytes / ways / NDET_SEGMENT_BYTES;
		if (units == 0)
			return NDET_ERR_INVALID_ARGUMENT;
		out->piece_elems = units * NDET_SEGMENT_BYTES / es;
		const uint64_t segment = (uint64_t)shape->hosts * chunk->block_elems;
		const uint64_t pieces = (segment + out->piece_elems - 1) / out->piece_elems;
		out->blocks = (uint32_t)(pieces < 1            ? 1
					 : pieces < max_blocks ? pieces
							       : max_blocks);
	} else {
		return NDET_ERR_INVALID_ARGUMENT;
	}
	out->signature = ndet_hosts_signature(plan, chunk, call, stage, out);
	return NDET_OK;
}

/*
 * Units per block of a full chunk (chunk_elems = m x g x H x unit): NDET_HOSTS_CHUNKS
 * chunks, at least NDET_HOSTS_MIN_STAGE_BYTES of stage 2 per rank, at most what the
 * staging holds; then the fewest chunks that allows, evened out (the last chunk
 * then is as long as the others, or nearly).  0 when the staging is too small.
 */
static uint64_t ndet_hosts_units_per_block(const struct ndet_hosts_params *params)
{
	const struct ndet_hosts_shape *shape = &params->shape;
	const uint64_t granule = ndet_hosts_blocks(shape) * ndet_hosts_unit(shape);
	uint64_t most = params->staging_bytes / ndet_hosts_staging_for(shape, granule);
	while (most > 0 && ndet_hosts_staging_for(shape, most * granule) > params->staging_bytes)
		most--;
	if (most == 0)
		return 0;
	uint64_t least = 1;
	if (shape->hosts > 1) {
		const uint64_t stage_bytes_per_unit =
			(uint64_t)(shape->hosts - 1) * ndet_hosts_unit(shape) * shape->partial_size;
		least = ndet_hosts_div_up(NDET_HOSTS_MIN_STAGE_BYTES, stage_bytes_per_unit);
	}
	uint64_t units = ndet_hosts_div_up(params->count, NDET_HOSTS_CHUNKS * granule);
	if (units < least)
		units = least;
	if (units > most)
		units = most;
	const uint64_t chunks = ndet_hosts_div_up(params->count, units * granule);
	if (chunks > 0)
		units = ndet_hosts_div_up(params->count, chunks * granule);
	return units;
}

ndet_status_t ndet_hosts_plan_make(const struct ndet_hosts_params *params,
				   struct ndet_hosts_plan *plan)
{
	if (!ndet_hosts_shape_ok(&params->shape))
		return NDET_ERR_INVALID_ARGUMENT;
	const uint64_t units = ndet_hosts_units_per_block(params);
	if (units == 0)
		return NDET_ERR_INVALID_ARGUMENT;
	struct ndet_hosts_plan result;
	result.params = *params;
	result.chunk_elems =
		units * ndet_hosts_blocks(&params->shape) * ndet_hosts_unit(&params->shape);
	result.chunks = ndet_hosts_div_up(params->count, result.chunk_elems);
	result.slot = ndet_hosts_slot_for(&params->shape, result.chunk_elems);
	result.staging_bytes = NDET_HOSTS_SLOTS * result.slot.bytes;
	*plan = result;
	return NDET_OK;
}

struct ndet_hosts_chunk ndet_hosts_chunk_at(const struct ndet_hosts_plan *plan, uint64_t index)
{
	struct ndet_hosts_chunk chunk;
	chunk.index = index;
	chunk.elems.offset = index * plan->chunk_elems;
	const uint64_t left = plan->params.count - chunk.elems.offset;
	chunk.elems.count = left < plan->chunk_elems ? left : plan->chunk_elems;
	chunk.block_elems = ndet_segment_elems(chunk.elems.count,
					       (uint32_t)ndet_hosts_blocks(&plan->params.shape),
					       plan->params.shape.elem_size);
	chunk.slot = (uint32_t)(index % NDET_HOSTS_SLOTS);
	chunk.slot_offset = chunk.slot * plan->slot.bytes;
	return chunk;
}

/* Elements [first x p, (first + blocks) x p) of the chunk, clipped to it. */
static struct ndet_hosts_range ndet_hosts_blocks_range(const struct ndet_hosts_chunk *chunk,
						       uint64_t first, uint64_t blocks)
{
	const uint64_t len = chunk->elems.count;
	uint64_t begin = first * chunk->block_elems;
	uint64_t end = begin + blocks * chunk->block_elems;
	if (begin > len)
		begin = len;
	if (end > len)
		end = len;
	struct ndet_hosts_range range = {chunk->elems.offset + begin, end - begin};
	return range;
}

struct ndet_hosts_range ndet_hosts_block(const struct ndet_hosts_plan *plan,
					 const struct ndet_hosts_chunk *chunk, int local, int host)
{
	const uint64_t hosts = (uint64_t)plan->params.shape.hosts;
	return ndet_hosts_blocks_range(chunk, (uint64_t)local * hosts + (uint64_t)host, 1);
}

struct ndet_hosts_range ndet_hosts_segment(const struct ndet_hosts_plan *plan,
					   const struct ndet_hosts_chunk *chunk, int local)
{
	const uint64_t hosts = (uint64_t)plan->params.shape.hosts;
	return ndet_hosts_blocks_range(chunk, (uint64_t)local * hosts, hosts);
}

/*
 * The staging bytes a transfer with peer host `peer` sends from or receives into
 * (doc/multihost-design.md, "Staging"), from the slot's start.
 */
static uint64_t ndet_hosts_staging_of(const struct ndet_hosts_plan *plan,
				      const struct ndet_hosts_chunk *chunk, int host, int peer,
				      ndet_hosts_stage_t stage, bool send)
{
	const struct ndet_hosts_shape *shape = &plan->params.shape;
	const uint64_t p = chunk->block_elems;
	if (stage == NDET_HOSTS_STAGE_PARTIALS) {
		if (send) /* block (l, peer) of this rank's partial segment */
			return plan->slot.partial_offset + (uint64_t)peer * p * shape->partial_size;
		const uint64_t index = (uint64_t)(peer < host ? peer : peer - 1);
		return plan->slot.received_offset + index * plan->slot.received_stride;
	}
	/* Result segment: this rank's block h goes out, block (l, peer) comes in. */
	return plan->slot.result_offset + (uint64_t)(send ? host : peer) * p * shape->elem_size;
}

ndet_status_t ndet_hosts_transfers(const struct ndet_hosts_plan *plan,
				   const struct ndet_hosts_chunk *chunk,
				   const struct ndet_hosts_rank *rank, ndet_hosts_stage_t stage,
				   bool send, struct ndet_hosts_transfer *out, uint32_t *n)
{
	const struct ndet_hosts_shape *shape = &plan->params.shape;
	*n = 0;
	if (rank->host < 0 || rank->host >= shape->hosts || rank->local < 0 ||
	    rank->local >= shape->local_ranks ||
	    (stage != NDET_HOSTS_STAGE_PARTIALS && stage != NDET_HOSTS_STAGE_RESULTS))
		return NDET_ERR_INVALID_ARGUMENT;
	const uint32_t size =
		stage == NDET_HOSTS_STAGE_PARTIALS ? shape->partial_size : shape->elem_size;
	/*
	 * Stage 2 sends and stage 4 receives move block (l, peer); stage 2 receives and
	 * stage 4 sends this rank's own block (l, h).
	 */
	const bool peer_block = (stage == NDET_HOSTS_STAGE_PARTIALS) == send;
	uint32_t count = 0;
	for (int peer = 0; peer < shape->hosts; peer++) {
		if (peer == rank->host)
			continue;
		const int global = rank->ranks[peer * shape->local_ranks + rank->local];
		if (global < 0)
			return NDET_ERR_INVALID_ARGUMENT;
		const struct ndet_hosts_range block =
			ndet_hosts_block(plan, chunk, rank->local, peer_block ? peer : rank->host);
		if (block.count == 0)
			continue;
		struct ndet_hosts_transfer transfer = {
			.peer = global,
			.peer_host = peer,
			.offset = block.offset,
			.count = block.count,
			.bytes = block.count * size,
			.staging_offset =
				chunk->slot_offset +
				ndet_hosts_staging_of(plan, chunk, rank->host, peer, stage, send),
		};
		out[count++] = transfer;
	}
	*n = count;
	return NDET_OK;
}

uint64_t ndet_hosts_inter_bytes(const struct ndet_hosts_shape *shape, uint64_t count)
{
	const uint64_t blocks = ndet_hosts_blocks(shape);
	const uint64_t factor =
		(uint64_t)(shape->hosts - 1) * (shape->partial_size + shape->elem_size);
	/* count x factor / blocks without overflow: the quotient, then the remainder. */
	const uint64_t whole = count / blocks;
	const uint64_t rest = (count % blocks) * factor / blocks;
	if (factor != 0 && whole > (UINT64_MAX - rest) / factor)
		return UINT64_MAX;
	return whole * factor + rest;
}

uint64_t ndet_hosts_rank_excess_bound(const struct ndet_hosts_shape *shape)
{
	return (uint64_t)(shape->hosts - 1) * NDET_SEGMENT_BYTES *
	       (shape->elem_size + shape->partial_size) / shape->elem_size;
}

bool ndet_hosts_stall_observe(struct ndet_hosts_stall *stall, uint64_t word, uint64_t now_ms,
			      uint64_t timeout_ms)
{
	if (stall->stalled)
		return true;
	if (word != stall->seen || (word & 1u) == 0) {
		stall->seen = word;
		stall->since_ms = now_ms;
		return false;
	}
	stall->stalled = timeout_ms != 0 && now_ms - stall->since_ms > timeout_ms;
	return stall->stalled;
}

uint64_t ndet_hosts_where(ndet_hosts_stage_t stage, uint64_t chunk, uint64_t chunks)
{
	if (chunk > NDET_HOSTS_WHERE_MAX)
		chunk = NDET_HOSTS_WHERE_MAX;
	if (chunks > NDET_HOSTS_WHERE_MAX)
		chunks = NDET_HOSTS_WHERE_MAX;
	return ((uint64_t)stage & 15u) << 60 | chunk << 30 | chunks;
}

void ndet_hosts_where_text(uint64_t where, char *text, size_t size)
{
	if (size == 0)
		return;
	if (where == 0) {
		snprintf(text, size, "no stage kernel yet");
		return;
	}
	snprintf(text, size, "stage %u of chunk %llu of %llu", NDET_HOSTS_WHERE_STAGE(where),
		 (unsigned long long)NDET_HOSTS_WHERE_CHUNK(where) + 1,
		 (unsigned long long)NDET_HOSTS_WHERE_CHUNKS(where));
}

/* ---------------------------------------------------------------- the issue order */

static struct ndet_hosts_op ndet_hosts_op_of(ndet_hosts_op_kind_t kind, ndet_hosts_stage_t stage,
					     uint64_t chunk)
{
	const struct ndet_hosts_op op = {.kind = kind, .stage = stage, .chunk = chunk};
	return op;
}

struct ndet_hosts_op ndet_hosts_schedule_next(struct ndet_hosts_schedule *schedule)
{
	const uint64_t chunks = schedule->chunks;
	if (schedule->finished)
		return ndet_hosts_op_of(NDET_HOSTS_OP_DONE, NDET_HOSTS_STAGE_LOCAL, 0);
	if (!schedule->started) { /* TO_K, 1(0) */
		if (schedule->phase == 0) {
			schedule->phase = 1;
			return ndet_hosts_op_of(NDET_HOSTS_OP_TO_K, NDET_HOSTS_STAGE_LOCAL, 0);
		}
		schedule->started = true;
		schedule->phase = 0;
		schedule->step = 0;
		if (chunks > 0)
			return ndet_hosts_op_of(NDET_HOSTS_OP_STAGE, NDET_HOSTS_STAGE_LOCAL, 0);
	}
	/* Step j: TO_K (j > 0), 3(j - 1), TO_S + group j (j <= chunks), 5(j - 2), 1(j + 1). */
	while (chunks > 0 && schedule->step <= chunks + 1) {
		const uint64_t j = schedule->step;
		const uint32_t phase = schedule->phase++;
		switch (phase) {
		case 0:
			if (j > 0)
				return ndet_hosts_op_of(NDET_HOSTS_OP_TO_K, NDET_HOSTS_STAGE_LOCAL,
							0);
			break;
		case 1:
			if (j >= 1 && j - 1 < chunks)
				return ndet_hosts_op_of(NDET_HOSTS_OP_STAGE,
							NDET_HOSTS_STAGE_REDUCE, j - 1);
			break;
		case 2:
			if (j <= chunks)
				return ndet_hosts_op_of(NDET_HOSTS_OP_TO_S, NDET_HOSTS_STAGE_LOCAL,
							0);
			break;
		case 3:
			if (j <= chunks)
				return ndet_hosts_op_of(NDET_HOSTS_OP_GROUP,
							NDET_HOSTS_STAGE_PARTIALS, j);
			break;
		case 4:
			if (j >= 2 && j - 2 < chunks)
				return ndet_hosts_op_of(NDET_HOSTS_OP_STAGE,
							NDET_HOSTS_STAGE_GATHER, j - 2);
			break;
		default:
			schedule->phase = 0;
			schedule->step++;
			if (j + 1 < chunks)
				return ndet_hosts_op_of(NDET_HOSTS_OP_STAGE, NDET_HOSTS_STAGE_LOCAL,
							j + 1);
			break;
		}
	}
	schedule->finished = true;
	return ndet_hosts_op_of(NDET_HOSTS_OP_TO_S, NDET_HOSTS_STAGE_LOCAL, 0);
}
