/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The layout of a rank's pool (see ndet_pool_layout.h).
 */
#include "config.h"

#include "protocol/ndet_pool_layout.h"

#include "kernels/ndet_abi.h"
#include "protocol/ndet_plan.h"

uint64_t ndet_pool_flags_bytes(void)
{
	return (NDET_POOL_DETACH_OFFSET + NDET_POOL_DETACH_BYTES + 4095) / 4096 * 4096;
}

/*
 * The pool's data bytes: NCCL_DET_POOL_SIZE, floored to max_blocks lanes of whole
 * NDET_POOL_LANE_ALIGN bytes.  Known before setup: the allocation's size.
 */
uint64_t ndet_pool_data_bytes(const struct ndet_engine_config *config)
{
	return config->pool_size / (uint64_t)config->max_blocks / NDET_POOL_LANE_ALIGN *
	       NDET_POOL_LANE_ALIGN * (uint64_t)config->max_blocks;
}

/*
 * Lanes: one per block a call can have, the agreed grid cap (ndet_plan_grid_cap).
 * That is max_blocks unless ranks share a GPU or the GPU is small; there the data
 * bytes are split into fewer, larger lanes rather than left partly idle (4 ranks on
 * one GPU: 48 lanes of 2 MiB instead of 48 used lanes of 1 MiB; larger chunks, fewer
 * steps, doc/performance.md).  Before setup agrees the table (ranks_per_device,
 * device_sms and processes_per_device 0) it is max_blocks, or the cap of a 96-SM GPU;
 * from then on, a function of agreed facts only, so every rank splits alike.
 */
uint64_t ndet_pool_lanes(const struct ndet_engine_config *config)
{
	const struct ndet_plan_params params = {
		.op = NDET_OP_SUM, /* the largest cap of any op (ndet_plan.h) */
		.nranks = config->nranks,
		.max_blocks = config->max_blocks,
		.ranks_per_device = config->ranks_per_device,
		.device_sms = config->device_sms,
		.processes_per_device = config->processes_per_device,
	};
	return ndet_plan_grid_cap(&params);
}

uint64_t ndet_pool_lane_bytes(const struct ndet_engine_config *config)
{
	return ndet_pool_data_bytes(config) / ndet_pool_lanes(config) / NDET_POOL_LANE_ALIGN *
	       NDET_POOL_LANE_ALIGN;
}

uint64_t ndet_pool_host_ranks_bound(const struct ndet_engine_config *config)
{
	return config->nranks < NDET_MAX_RANKS ? (uint64_t)config->nranks : NDET_MAX_RANKS;
}

/*
 * The LL slots after the lanes: (block, source rank, parity) each (ndet_kernels.h),
 * for as many source ranks as the host can hold (the kernels address g of them).
 */
uint64_t ndet_pool_ll_bytes(const struct ndet_engine_config *config)
{
	if (config->nranks < 2)
		return 0;
	return ndet_plan_ll_blocks(config->ll_max) * ndet_pool_host_ranks_bound(config) * 2u *
	       NDET_LL_SLOT_BYTES;
}

uint64_t ndet_pool_memory_bytes(const struct ndet_engine_config *config)
{
	return ndet_pool_flags_bytes() + ndet_pool_data_bytes(config) + ndet_pool_ll_bytes(config) +
	       NDET_POOL_COUNTER_BYTES;
}
