/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 */
#include "config.h"

#include "ndet_plan.h"

#include "ndet_reference.h"

#include <string.h>

unsigned ndet_plan_dtype_size(ndet_dtype_t dtype)
{
	/* Every dtype the reference knows has a kernel. */
	return (unsigned)ndet_dtype_size(dtype);
}

static uint64_t ndet_plan_div_up(uint64_t a, uint64_t b)
{
	return a / b + (a % b != 0);
}

/* FNV-1a over the plan-defining values; folded to the flag's signature bits. */
static uint32_t ndet_plan_signature(const struct ndet_plan_params *params,
				    const struct ndet_plan *plan)
{
	const uint64_t words[] = {params->count,	(uint64_t)params->dtype,
				  (uint64_t)params->op, (uint64_t)params->nranks,
				  (uint64_t)plan->path, plan->blocks,
				  plan->chunk_elems,	plan->steps};
	uint64_t hash = 0xcbf29ce484222325ull;
	const unsigned char *bytes = (const unsigned char *)words;
	for (size_t i = 0; i < sizeof(words); i++) {
		hash ^= bytes[i];
		hash *= 0x100000001b3ull;
	}
	uint32_t folded = (uint32_t)(hash ^ (hash >> 24) ^ (hash >> 48)) & NDET_FLAG_SIGNATURE_MASK;
	/* 0 is what a never-written flag holds; keep signatures distinguishable from it. */
	return folded == 0 ? 1u : folded;
}

ndet_status_t ndet_plan_make(const struct ndet_plan_params *params, struct ndet_plan *plan)
{
	const unsigned size = ndet_plan_dtype_size(params->dtype);
	if (size == 0 || (unsigned)params->op >= NDET_OP_COUNT || params->nranks < 1 ||
	    params->nranks > NDET_MAX_RANKS || params->max_blocks < 1 ||
	    params->max_blocks > NDET_KERNEL_MAX_BLOCKS || params->lane_bytes < 16)
		return NDET_ERR_INVALID_ARGUMENT;

	struct ndet_plan result;
	memset(&result, 0, sizeof(result));
	const uint64_t pack = 16 / size;
	const uint64_t lane_elems = params->lane_bytes / size / pack * pack;
	if (params->count == 0) {
		result.path = NDET_PATH_NONE;
	} else if (params->nranks == 1) {
		result.path = NDET_PATH_COPY;
	} else {
		/* Overflow-safe: count * size only compared, never stored past 2^64. */
		const uint64_t bytes = params->count > UINT64_MAX / size ? UINT64_MAX
									 : params->count * size;
		result.path = bytes <= params->oneshot_max ? NDET_PATH_ONESHOT : NDET_PATH_TWOSHOT;
		const uint64_t per_block = result.path == NDET_PATH_ONESHOT
						   ? NDET_PLAN_ONESHOT_BYTES_PER_BLOCK
						   : NDET_PLAN_TWOSHOT_BYTES_PER_BLOCK;
		uint64_t blocks = ndet_plan_div_up(bytes, per_block);
		if (blocks > (uint64_t)params->max_blocks)
			blocks = (uint64_t)params->max_blocks;
		uint64_t chunk = ndet_plan_div_up(params->count, blocks);
		chunk = ndet_plan_div_up(chunk, pack) * pack;
		if (chunk > lane_elems)
			chunk = lane_elems;
		/* No block without work in the first step. */
		const uint64_t needed = ndet_plan_div_up(params->count, chunk);
		if (blocks > needed)
			blocks = needed;
		result.blocks = (uint32_t)blocks;
		result.chunk_elems = chunk;
		result.steps = ndet_plan_div_up(params->count, blocks * chunk);
	}
	result.signature = ndet_plan_signature(params, &result);
	*plan = result;
	return NDET_OK;
}
