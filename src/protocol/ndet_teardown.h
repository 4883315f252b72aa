/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Engine teardown, with no CUDA and no NCCL: what may be freed when, and the
 * process-wide count of what engines hold.  Both engines (the CUDA one and the
 * host-only one of the tests) release through here, so the CPU tests exercise the
 * same decisions the GPU build makes.
 *
 * Order (doc/design.md, "Teardown and faults"):
 *   1. quiesce: wait until this rank's kernels have finished (ndet_teardown_wait:
 *      bounded; once the abort flag or the error word is set, the kernels leave at
 *      their next poll and the wait gives them NDET_TEARDOWN_GRACE_MS);
 *   2. detach: only when they finished, write "detached" into our slot of every
 *      peer pool we imported (the detach protocol below), then close those mappings;
 *   3. barrier with every peer (collective teardown only): "idle and closed";
 *   4. free our own memory, only when our kernels are idle and no peer can read our
 *      pool any more: the barrier found every rank idle and closed, or every peer in
 *      another process let go of it (detach protocol), and every rank of this
 *      process that reads it by direct pointer is released too.
 * Where that cannot be shown, memory is never freed under a reader:
 *   - ranks of one communicator in this process ("a share") keep their pools until
 *     the last of them is released; then, if all of them were idle, every pool of
 *     the share is freed (no rank in another process) or waits for the detach
 *     protocol (ranks in other processes);
 *   - a kernel of ours that did not leave: its memory (and its mappings) are leaked
 *     on purpose until the process exits, when the driver reclaims it: counted
 *     (ndet_resources) and logged once per process at INFO.
 *
 * Local indices: only the ranks of one host share pools, so everything here that is
 * kept per rank (the detach area's slots, the share's pools, the masks of peers
 * waited for, their pids) is indexed by local index, a rank's position among the
 * ranks of its host in rank order (ndet_host_table.h): at most NDET_MAX_RANKS
 * entries whatever the size of the communicator.  With one host, local index = rank.
 * What still spans the whole communicator: the epoch (a hash of the whole table)
 * and the detach words' values (global ranks of writer and owner), and the destroy
 * barrier, an all-gather over every rank (the engines' exchange, NCCL's collective:
 * every rank of the communicator calls it), of which each rank judges only the words
 * of its own host's ranks (ndet_setup_agree_among).
 *
 * Detach protocol (no barrier: ncclCommDestroy alone and ncclCommAbort between
 * processes).  Every pool holds a detach area, one 64-bit word per local index,
 * outside everything the kernels touch, zeroed before any peer can import the pool.
 * Rank P (local index p) writes ndet_teardown_detach_word(epoch, P, owner) into slot
 * p of every pool it imported, through its mapping, once no kernel of P can run any
 * more (step 2), and then only closes the mapping: the word is P's last access.  The epoch is a
 * hash of the agreed setup table (pids, pool addresses, IPC handles: CUDA gives a new allocation a
 * new handle even at a recycled address), so a word of an earlier communicator on recycled memory
 * never passes for this one's. The owner frees its pool (step 4) once, for every rank in another
 * process of its host (ranks on other hosts never import it), its word is there or its process has
 * ended.  That is checked right after the release,
 * polling for up to NDET_TEARDOWN_DETACH_WAIT_MS (peers usually tear down at the
 * same time); a pool still waited for stays allocated ("pending", counted) and is
 * checked again at every later engine teardown of this process and once more in the
 * exit handler (no CUDA call once the runtime is shutting down).  Not at setups: a
 * setup may run inside the application's CUDA graph capture, and cudaFree may
 * synchronise the device, which would invalidate that capture.
 * Why a dead peer's silence may be trusted: the driver tears down a process's
 * mappings and kernels when it exits (before it is a zombie), so a process that
 * kill(pid, 0) no longer finds, or that is a zombie, cannot read the pool.  Its
 * pid comes from the setup table and is compared only within one known PID
 * namespace (else it is never judged dead).  A silent peer that is alive keeps the
 * pool pending, whatever the time or the communicator's error: it may have a kernel
 * queued behind other work that has not started yet and will read the pool, and no
 * deadline proves otherwise.  So an alive peer that never tears down (stopped with
 * SIGSTOP, hung elsewhere, or simply never destroying) keeps our pool until it does,
 * it dies, or we exit.
 * Residual risks: (1) between P's detach word and P's cudaIpcCloseMemHandle the
 * owner may already free, which CUDA documents as undefined (free after every
 * importer closed).  P makes no access after the word, and we rely on the driver
 * keeping the allocation for an open import until it is closed, as it does for an
 * importer that outlives its exporter (no pool protocol can do better: the close
 * itself cannot be announced through the mapping it removes); (2) a reused
 * pid (the dead peer's pid given to a new process) only delays the release: that
 * process looks alive; (3) a peer that cannot tell (a failed detach write) keeps the
 * pool pending until it exits.  A setup that fails after the mapping round waits only
 * for the peers whose round-3 word says they opened the pool (`readers`); where those
 * words never arrived, for every peer; (4) a pending
 * pool freed later (at another communicator's teardown, or at exit) goes
 * through cudaFree, which waits for the device: behind a kernel of another live
 * engine until it leaves (NCCL_DET_TIMEOUT at worst), behind an application kernel
 * that never ends forever (as NCCL's own teardown would).  The exit handler frees
 * nothing while an engine of ours lives; (5) under MPS the server ends a dead
 * client's kernels shortly after the client process is gone, not before it: a
 * kernel of a peer killed mid-call may still run a moment after its pid is gone,
 * while its import still holds the memory (see 1).
 */
#ifndef NDET_TEARDOWN_H_
#define NDET_TEARDOWN_H_

#include <stdbool.h>
#include <stdint.h>

#include "protocol/ndet_setup_record.h"

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
	int64_t pending_pools;  /* released engines waiting for peers in other processes
				 * to let go (detach protocol) */
	int64_t leaked_pools;   /* engines whose memory is kept until exit on purpose */
	int64_t leaked_bytes;   /* ... and its size (still counted in `bytes`) */
	int64_t peers_gone;     /* silent peers found dead, which released a pool */
};

/* CLOCK_MONOTONIC in milliseconds (the teardown's waits, the comm layer's polls). */
uint64_t ndet_teardown_now_ms(void);

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

/* ---------------------------------------------------------------- detach protocol */

/* How long a release polls for its peers' detach words before the pool is pending. */
#define NDET_TEARDOWN_DETACH_WAIT_MS 2000u

/*
 * The epoch of a setup: a hash of the agreed table (the same on every rank, and
 * another for every setup), never 0.
 */
uint64_t ndet_teardown_epoch(const struct ndet_setup_payload *table, int nranks);

/*
 * What `writer` writes into `owner`'s detach area (both global ranks), in the slot of
 * writer's local index: never 0.
 */
uint64_t ndet_teardown_detach_word(uint64_t epoch, int writer, int owner);

/* Has process `pid` ended (kill(pid, 0) finds none, or a zombie)?  Never for pid 0. */
bool ndet_teardown_process_gone(uint64_t pid);

typedef enum {
	NDET_TEARDOWN_READ_OK = 0,
	NDET_TEARDOWN_READ_FAILED, /* not now (logged); perhaps later */
	NDET_TEARDOWN_READ_DOWN,   /* the runtime is shutting down: make no call any more */
} ndet_teardown_read_t;

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
	/*
	 * Copy the detach area of the engine's pool (NDET_MAX_RANKS words, slot l
	 * written by the rank of local index l) into `words`, with no device-wide
	 * synchronisation.
	 */
	ndet_teardown_read_t (*read_detach)(void *engine, uint64_t *words);
	/* ndet_teardown_process_gone, or a test's stand-in for its "processes". */
	bool (*process_gone)(uint64_t pid);
};

/* The ranks of one communicator that live in this process (see above). */
struct ndet_teardown_share;

/*
 * The memory of a share, taken before the setup's second round (NULL: out of
 * memory, which the rank then reports in its payload), so that joining one after the
 * table is agreed never fails for want of it: a rank that could not join would keep
 * its pool until exit.  ndet_teardown_unreserve frees one that was not used (NULL
 * is fine).
 */
struct ndet_teardown_share *ndet_teardown_reserve(void);
void ndet_teardown_unreserve(struct ndet_teardown_share *reserved);

/*
 * After a setup that succeeded: the share of `my_rank`, found by the pools of the
 * table's same-process ranks (every one of them finds the same share) or made in
 * *reserved (which is then taken: *reserved becomes NULL; the caller unreserves what
 * is left); it also keeps what the detach protocol needs of the table (epoch, which
 * ranks of this host are in other processes, their pids), by local index.  Any nranks
 * up to NDET_SETUP_NRANKS_LIMIT; ranks on other hosts take no part.  NULL when there
 * was no reserved memory to make one in, or when this host holds more than
 * NDET_MAX_RANKS ranks (the verdict refuses that table): the engine's memory is then
 * leaked at release unless a barrier completed.
 */
struct ndet_teardown_share *ndet_teardown_join(const struct ndet_setup_payload *table, int nranks,
					       int my_rank, struct ndet_teardown_share **reserved);

/*
 * Release one engine (global rank `rank`) of `share` (may be NULL).  `idle`: none of its
 * kernels can run (quiesce succeeded, and it wrote its detach words); `peers_done`:
 * no peer can read its memory any more (a barrier found every rank idle and closed,
 * or it has no peer).  With both, freed now; otherwise kept with its share until the
 * share's last engine is released, and then freed, left pending for the detach
 * protocol, or leaked (when `share` is NULL, leaked at once).  No waiting here: see
 * ndet_teardown_pending_retry.  `readers`: the ranks of this host (bit: local index)
 * that may have mapped its memory, NDET_TEARDOWN_ALL_READERS where that is not known:
 * only those in other processes are waited for.  The engine must not be used
 * afterwards.
 */
#define NDET_TEARDOWN_ALL_READERS 0xffffffffu
void ndet_teardown_release(struct ndet_teardown_share *share, void *engine,
			   const struct ndet_teardown_ops *ops, int rank, bool idle,
			   bool peers_done, uint32_t readers);

/*
 * Check every pending pool of the process: free those that no peer can read any
 * more.  With `wait`, keep polling while a pool released less than
 * NDET_TEARDOWN_DETACH_WAIT_MS ago is still waited for (a teardown: its peers are
 * probably tearing down too); without, look once.  Pools that
 * another thread is checking are left to it.  Nothing after fork() or once the
 * runtime said it is shutting down.
 */
void ndet_teardown_pending_retry(bool wait);

/*
 * The library's exit handler (before the CUDA runtime's own): one last look at the
 * pending pools, unless an engine is still alive (its kernel may spin, and a free
 * would wait behind it); then no teardown call touches them again.  Not in a fork
 * child.
 */
void ndet_teardown_at_exit(void);

/* From now on no teardown call touches a pending pool (the runtime is going). */
void ndet_teardown_stop(void);

/*
 * Keep an engine's memory until exit (ops->abandon), counted and logged once per
 * process; `why` completes "kept until exit: ...".
 */
void ndet_teardown_leak(void *engine, const struct ndet_teardown_ops *ops, const char *why);

/*
 * Tests: the poll of a release with `wait` (NDET_TEARDOWN_DETACH_WAIT_MS by default;
 * a thread that drives several "processes" one after another would wait for itself).
 */
void ndet_teardown_set_detach_wait_for_testing(uint64_t ms);

/*
 * Tests: give up every pending pool (ops->abandon: the engine goes, its memory stays
 * until the fake runtime's reset), as a process exit would.
 */
void ndet_teardown_abandon_pending_for_testing(void);

/* Shares with engines still to be released (leak tests). */
int ndet_teardown_shares_for_testing(void);

#ifdef __cplusplus
}
#endif

#endif /* NDET_TEARDOWN_H_ */
