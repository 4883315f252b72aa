/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * What an engine is made from: the agreed settings of one rank's engine, and the
 * exchange callbacks its setup and teardown meet the other ranks through.  Shared by
 * the CUDA engine (src/engine), the divert layer's backend interface and the pool
 * layout, so that none of them needs the engine's own header.
 */
#ifndef NDET_ENGINE_CONFIG_H_
#define NDET_ENGINE_CONFIG_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "common/ndet_status.h"
#include "protocol/ndet_setup_record.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ndet_engine_config {
	int rank;
	int nranks;
	int cuda_device;
	uint64_t pool_size; /* staging bytes (NCCL_DET_POOL_SIZE) */
	int max_blocks;     /* NCCL_DET_MAX_BLOCKS */
	/*
	 * Set by the setup from the agreed table (whatever the input; before setup 0
	 * counts as 1): the most ranks on one GPU, which caps the grid
	 * (ndet_plan_grid_cap).
	 */
	int ranks_per_device;
	int device_sms;           /* likewise: the fewest SMs of any rank's GPU (0: unknown) */
	int processes_per_device; /* likewise: the most processes on one GPU (0 = 1) */
	uint64_t oneshot_max;     /* NCCL_DET_ONESHOT_MAX */
	uint64_t ll_max;          /* NCCL_DET_LL_MAX: LL slots in the pool, 0 = none */
	uint64_t ll_wide_min;     /* NCCL_DET_LL_WIDE_MIN: wide LL lines from here, 0 = never */
	uint64_t push_min;        /* NCCL_DET_PUSH_MIN: all-reduces from here push, 0 = never */
	uint64_t timeout_ms;      /* NCCL_DET_TIMEOUT; 0 = never (tests only) */
	uint64_t max_memory;      /* NCCL_DET_MAX_MEMORY */
	/*
	 * NCCL_DET_HOSTS_STAGING: the staging a multi-host engine allocates beside its pool
	 * (counted in max_memory with it) and every plan of its calls is made for.
	 */
	uint64_t hosts_staging;
	unsigned debug_delay_ns;
	uint64_t settings_hash; /* must be equal on every rank */
	unsigned test_fail;     /* ndet_fault_t bits */
	int test_fail_rank;     /* -1 = every rank */
	uint32_t setup_flags;   /* NDET_SETUP_FLAG_* this rank publishes (ndet_setup.h) */
	bool nonblocking;       /* NCCL's config.blocking = 0: the record's blocking is 0 */
	/* NCCL_DET_TEST_HOST's name for this rank (tests), "" = the real host */
	char test_host[NDET_SETUP_HOSTNAME_LENGTH];
	/*
	 * Which communicator the rank belongs to, as this process knows it (0: unknown):
	 * equal for two ranks of one communicator in this process, different for two
	 * communicators (ndet_exchange_place).
	 */
	uint64_t comm_identity;
};

/*
 * Gather `bytes` from every rank: device_recv[r * bytes ...] = rank r's device_send.
 * Both buffers are device memory the engine allocated (never pageable host memory:
 * NCCL would DMA from it).  Must be collective over the same ranks as the engine,
 * and complete when it returns.
 */
typedef ndet_status_t (*ndet_engine_allgather_fn)(void *context, const void *device_send,
						  void *device_recv, size_t bytes);

/*
 * The same for several engines at once (one thread may drive several ranks, which
 * must then exchange in one NCCL group): for each i, device_recvs[i] receives every
 * rank's device_sends[i] of member i's communicator.  contexts[i] is member i's
 * exchange_context.  The buffers are device memory (or pinned host memory when the
 * device is full), never pageable.  The work may be left enqueued on streams[i] (the
 * engine's private non-blocking stream, on member i's device): the engine
 * synchronises streams[i] after the call.  Called in relaxed stream-capture mode.
 * results[i]: member i's outcome, set for every member: NDET_OK (its exchange is
 * enqueued or done), NDET_IN_PROGRESS (abandoned while the transport may still write
 * into its buffers, which must then outlive the engine) or a failure.  A member
 * that fails takes no other with it, except members that may be ranks of its own
 * communicator, whose exchange would wait for it.  Returns NDET_OK when every
 * member's is, else a failed member's.
 */
typedef ndet_status_t (*ndet_engine_exchange_fn)(void *const contexts[], int count,
						 const void *const device_sends[],
						 void *const device_recvs[], size_t bytes,
						 const cudaStream_t streams[],
						 ndet_status_t results[]);

/*
 * Where a member of one exchange stands: its communicator's identity in this process
 * (ndet_engine_config.comm_identity, 0 unknown), its rank, the communicator's size and
 * its CUDA device (-1 unknown).
 */
struct ndet_exchange_place {
	uint64_t comm;
	int rank, nranks, device;
};

static inline struct ndet_exchange_place ndet_exchange_place_of(uint64_t comm, int rank, int nranks,
								int device)
{
	const struct ndet_exchange_place place = {comm, rank, nranks, device};
	return place;
}

/*
 * Whether two members of one exchange, both driven by this thread, may be ranks of
 * one communicator.  Where one fails, such a member must fail too: its next exchange
 * would wait for the rank the thread no longer drives.  Known identities decide, so
 * that a communicator leaves only when its own exchange failed (on every thread
 * alike); where neither is known, the same size, another rank and another device
 * (NCCL refuses two ranks of a communicator on one GPU in one process) may be one.
 */
static inline bool ndet_exchange_may_share(const struct ndet_exchange_place *a,
					   const struct ndet_exchange_place *b)
{
	if (a->rank == b->rank)
		return false;
	if (a->comm != 0 && b->comm != 0)
		return a->comm == b->comm;
	/* One known, one not: ranks of one communicator are registered alike. */
	if (a->comm != 0 || b->comm != 0)
		return false;
	return a->nranks == b->nranks && (a->device < 0 || b->device < 0 || a->device != b->device);
}

/*
 * Which members of one exchange leave it: those marked in leaves[], then every member
 * that may be a rank of a leaving one's communicator (ndet_exchange_may_share), and
 * theirs in turn.  places NULL (out of memory): every member leaves with any that
 * leaves.
 */
void ndet_exchange_leave_together(const struct ndet_exchange_place *places, bool leaves[],
				  int count);

struct ndet_settings;

/*
 * The fields of `config` that come from the settings every rank agrees on (the
 * agreement hash and what it covers: pool, grid, the paths' thresholds, the chunks
 * across hosts) and from NCCL_DET_MAX_MEMORY; every other field is left as it was.
 * The one place that turns settings into a protocol, for the divert layer and for
 * nccl-det-perf alike, so that a rank of either plans what the settings say.
 */
void ndet_engine_config_from_settings(const struct ndet_settings *settings,
				      struct ndet_engine_config *config);

#ifdef __cplusplus
}
#endif

#endif /* NDET_ENGINE_CONFIG_H_ */
