/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Engine teardown, with no CUDA and no NCCL: what may be freed when, and the
 * process-wide count of what engines hold.  Both engines (the CUDA one and the
 * host-only one of the tests) release through here, so the CPU tests exercise the
 * same decisions the GPU build makes.
 *
 * Order (DESIGN.md section 5, Teardown):
 *   1. quiesce: wait until this rank's kernels have finished (ndet_teardown_wait:
 *      bounded; once the abort flag or the error word is set, the kernels leave at
 *      their next poll and the wait gives them NDET_TEARDOWN_GRACE_MS);
 *   2. close the mappings of peers' pools (only when idle: our kernel may use them);
 *   3. barrier with every peer (collective teardown only): "idle and closed";
 *   4. free our own memory, only when the barrier found every rank idle and closed
 *      (no peer can read our pool any more) and our kernels are idle.
 * Where that cannot be shown, memory is never freed under a reader:
 *   - ranks of one communicator in this process ("a share") keep their pools until
 *     the last of them is released; then, if all of them were idle and no rank lives
 *     in another process, every pool of the share is freed (nobody can read them);
 *   - otherwise (a barrier that did not complete: dead peer, abort, NCCL error; a
 *     destroy without finalize with peers in other processes; a kernel that did not
 *     leave) the memory is leaked on purpose until the process exits, when the driver
 *     reclaims it: counted (ndet_resources) and logged once per process at INFO.
 */
#ifndef NDET_TEARDOWN_H_
#define NDET_TEARDOWN_H_

#include <stdbool.h>
#include <stdint.h>

#include "ndet_setup_record.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How long kernels told to leave (abort flag, error word) get before we give up on them. */
#define NDET_TEARDOWN_GRACE_MS 2000u

/* ---------------------------------------------------------------- resources */

/*
 * What the engines of this process hold, summed over all of them (live engines,
 * pools waiting for same-process peers and pools leaked on purpose alike).
 */
struct ndet_resources {
	int64_t allocations;    /* device and pinned host allocations (cudaMalloc, cudaHostAlloc) */
	int64_t bytes;          /* their sizes */
	int64_t ipc_imports;    /* open mappings of peers' pools (cudaIpcOpenMemHandle) */
	int64_t deferred_pools; /* released engines waiting for same-process peers */
	int64_t leaked_pools;   /* engines whose memory is kept until exit on purpose */
	int64_t leaked_bytes;   /* ... and its size (still counted in `bytes`) */
};

void ndet_resources_allocated(uint64_t bytes);
void ndet_resources_freed(uint64_t bytes);
/* +1 per mapping opened, -1 per mapping closed. */
void ndet_resources_imported(int delta);
void ndet_resources_get(struct ndet_resources *resources);
/* Tests: forget everything (leaked memory of earlier tests included). */
void ndet_resources_reset_for_testing(void);

/* ---------------------------------------------------------------- quiesce */

/* One engine's kernels, as the wait sees them. */
struct ndet_teardown_kernels {
	/* true when no kernel of the engine can still run; false while one may. */
	bool (*idle)(void *engine);
	/* true once the kernels were told to leave: abort flag or error word set. */
	bool (*stopping)(void *engine);
	void *engine;
	uint64_t timeout_ms; /* the kernels' own deadline (NCCL_DET_TIMEOUT); 0 = none */
};

/*
 * Wait until kernels->idle().  Returns false, kernels possibly still running, when
 * NDET_TEARDOWN_GRACE_MS passed since stopping() first said so, or timeout_ms +
 * NDET_TEARDOWN_GRACE_MS since the start (a kernel that outlives its own deadline
 * is stuck behind other work).  Polls; makes no call but the two callbacks.
 */
bool ndet_teardown_wait(const struct ndet_teardown_kernels *kernels);

/* ---------------------------------------------------------------- release */

/* What the release does with one engine (the engine's own code). */
struct ndet_teardown_ops {
	/* Free every allocation of the engine, then the engine: nothing can use it. */
	void (*free)(void *engine);
	/*
	 * Keep the engine's device and pinned memory allocated (a peer or a kernel may
	 * still use it) and free the rest; returns the bytes kept.
	 */
	uint64_t (*abandon)(void *engine);
};

/* The ranks of one communicator that live in this process (see above). */
struct ndet_teardown_share;

/*
 * After a setup that succeeded: the share of `my_rank`, found by the pools of the
 * table's same-process ranks (every one of them finds the same share) or made.
 * NULL when out of memory: the engine's memory is then leaked at release unless a
 * barrier completed.
 */
struct ndet_teardown_share *ndet_teardown_join(const struct ndet_setup_payload *table, int nranks,
					       int my_rank);

/*
 * Release one engine of `share` (may be NULL).  `idle`: none of its kernels can run
 * (quiesce succeeded); `peers_done`: no peer can read its memory any more (a barrier
 * found every rank idle and closed, or it has no peer).  With both, freed now;
 * otherwise kept with its share until the share's last engine is released (or, when
 * `share` is NULL, leaked at once).  The engine must not be used afterwards.
 */
void ndet_teardown_release(struct ndet_teardown_share *share, void *engine,
			   const struct ndet_teardown_ops *ops, bool idle, bool peers_done);

/*
 * Keep an engine's memory until exit (ops->abandon), counted and logged once per
 * process; `why` completes "kept until exit: ...".
 */
void ndet_teardown_leak(void *engine, const struct ndet_teardown_ops *ops, const char *why);

/* Shares with engines still to be released (leak tests). */
int ndet_teardown_shares_for_testing(void);

#ifdef __cplusplus
}
#endif

#endif /* NDET_TEARDOWN_H_ */
