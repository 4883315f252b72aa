/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * nccl-det's state per NCCL communicator, in a process-wide registry keyed by
 * ncclComm_t.
 *
 * States (ndet_eligibility.h): PENDING until the setup ran (a non-blocking
 * communicator, or one created inside a group), then READY (an engine), FALLBACK (the
 * ranks agreed not to divert: verdict) or, later, POISONED (our engine failed) and
 * DEAD (aborted, revoked, finalized).  A setup that finds a rank which never joined
 * it (NCCL_DET_ENABLE=0 there, against the documented precondition) leaves the
 * communicator POISONED at once ("broken"): NCCL paired that rank's collective with
 * our exchange, so falling back would run NCCL on collectives that no longer match.
 * The creating call (or the first all-reduce of a non-blocking communicator) then
 * returns ncclInvalidUsage, every eligible all-reduce fails with it, and
 * ncclCommGetAsyncError reports it, so a watchdog aborts the job.
 *
 * Threads: the registry lock is held only to find, add or remove an entry; each
 * entry has its own lock, held only to read or change its state, never while waiting
 * for a peer or calling NCCL.  Entries are reference-counted: PyTorch's watchdog
 * calls ncclCommGetAsyncError and ncclCommAbort from its own thread while another
 * thread is inside ncclAllReduce or ncclCommDestroy, so an entry (and its engine)
 * lives until the last of them lets go.
 *
 * Teardown (src/protocol/ndet_teardown.h): phase one waits for our kernels (bounded),
 * closes our mappings of peers' pools and, in ncclCommFinalize (collective), meets
 * every peer in a barrier; phase two frees what nobody can read any more.  During
 * phase one the engine stays reachable (closing_engine): an ncclCommAbort from
 * another thread sets its abort flag, the kernels leave, and the teardown returns
 * within NDET_TEARDOWN_GRACE_MS instead of waiting for NCCL_DET_TIMEOUT.  An aborted
 * communicator is never handed to NCCL for our exchanges again.
 * Without a completed barrier (ncclCommDestroy without finalize, ncclCommAbort, a
 * dead peer) a pool is freed only when every rank that could read it lives in this
 * process and has been released idle (threads as ranks: the last one frees them
 * all; finalize takes that path too, since one thread may finalize its ranks one
 * after another and a barrier would wait for ranks it has not reached).  Otherwise
 * it is kept until exit on purpose (counted in ndet_resources, one INFO): a peer's
 * kernel may still read it, and cudaFree would synchronise the device behind a
 * kernel that may spin.  After fork() (in the child) and once the process exits,
 * nothing of ours runs: every hook passes through.
 */
#ifndef NDET_COMM_H_
#define NDET_COMM_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <nccl.h>

#include "protocol/ndet_backend.h"
#include "protocol/ndet_eligibility.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ndet_comm;

/*
 * One ncclAllReduce, ncclReduceScatter (count = recvcount) or ncclReduce, run now or
 * recorded in a group.
 */
struct ndet_call {
	struct ndet_comm *comm; /* a reference */
	const void *sendbuff;
	void *recvbuff;
	size_t count;
	ncclDataType_t datatype;
	ncclRedOp_t op;
	cudaStream_t stream;
	struct ndet_eligibility decision;
	ndet_coll_t coll;
	int root; /* ncclReduce */
	/*
	 * Made through ncclDetAllReduce, ncclDetReduceScatter or ncclDetReduce: a
	 * floating-point fallback fails (ncclInvalidUsage) whatever NCCL_DET_STRICT says.
	 */
	bool direct;
	/*
	 * A PreMulSum op's scalar, as its communicator knew it at the call's first
	 * decision (as NCCL resolves the op when the call is made): a call recorded in a
	 * group keeps it when the op is destroyed before ncclGroupEnd (PyTorch destroys
	 * its op right after the call).
	 */
	ndet_premul_t premul;
	ncclDataType_t premul_datatype;
	uint64_t scalar_bits;
	const void *scalar;
};

/* "ncclAllReduce", "ncclReduceScatter", "ncclReduce". */
const char *ndet_comm_coll_name(ndet_coll_t coll);

/* The same, or for a direct call "ncclDetAllReduce", "ncclDetReduceScatter", "ncclDetReduce". */
const char *ndet_comm_call_name(ndet_coll_t coll, bool direct);

/* Counters of one communicator (NCCL_DET_STATS=1 prints them at destroy). */
struct ndet_comm_stats {
	uint64_t diverted_calls; /* every collective */
	uint64_t diverted_bytes; /* what each rank contributed (sendbuff bytes) */
	uint64_t diverted_by_coll[NDET_COLL_COUNT];
	uint64_t diverted_premul; /* of them, with a PreMulSum op */
	uint64_t fallback_calls[NDET_FALLBACK_COUNT];
	uint64_t refused_calls; /* NCCL_DET_STRICT=1 */
	uint64_t failed_calls;  /* poisoned communicator */
};

/* false in a forked child and once the process exits: hooks must pass through. */
bool ndet_comm_hooks_allowed(void);

/* ---------------------------------------------------------------- registry */

/*
 * A communicator just became valid (init, split, shrink).  Returns a reference, or
 * NULL when nccl-det cannot track it (out of memory: every call then goes to NCCL on
 * this rank only if its setup never runs, so the WARN says so).
 */
struct ndet_comm *ndet_comm_register(ncclComm_t nccl, bool blocking, ncclComm_t parent,
				     bool shares_parent, uint64_t identity);

/*
 * Which communicator a rank belongs to, as this process can tell (never 0; 0 is
 * "unknown"): the same for two ranks of one communicator created here, different
 * for two communicators, so that a lockstep setup whose exchange fails for one
 * communicator takes exactly its ranks out (ndet_exchange_may_share).
 *   - of the ids given to ncclCommInitRank/Config (one) or Scalable (several), the
 *     size, and how many communicators of those ids this process saw at `rank`
 *     before (with NCCL_COMM_ID every id is the same);
 *   - fresh: every rank of one ncclCommInitAll;
 *   - of a split: the parent's identity, how many splits the parent's handle made
 *     before (every rank of a parent splits in the same order) and the color;
 *     counts the split, also when this rank gets no child (NCCL_SPLIT_NOCOLOR) or
 *     the call failed;
 *   - of a shrink: the parent's identity and split count, the excluded ranks, and
 *     how many shrinks with that list the handle made before (the excluded ranks
 *     call none, so shrinks are not counted as splits).
 * 0 where the parent is unknown.
 */
uint64_t ndet_comm_identity_of_ids(const void *ids, size_t bytes, int nranks, int rank);
uint64_t ndet_comm_identity_fresh(void);
uint64_t ndet_comm_identity_of_split(ncclComm_t parent, int color);
uint64_t ndet_comm_identity_of_shrink(ncclComm_t parent, const int *excluded, int count);

/* A reference to the entry of `nccl`, or NULL. */
struct ndet_comm *ndet_comm_lookup(ncclComm_t nccl);
void ndet_comm_ref(struct ndet_comm *comm);
void ndet_comm_unref(struct ndet_comm *comm);

ncclComm_t ndet_comm_nccl(const struct ndet_comm *comm);
bool ndet_comm_is_blocking(const struct ndet_comm *comm);
ndet_comm_state_t ndet_comm_state(struct ndet_comm *comm);

/*
 * Blocking mode from a config as NCCL resolves it: config->blocking where the
 * config's size says the field exists and it is not NCCL_CONFIG_UNDEF_INT, else
 * NCCL_COMM_BLOCKING, else blocking.  A NULL config takes `inherited` when it is
 * 0 or 1 (split and shrink inherit the parent's), else the environment.
 */
bool ndet_comm_config_blocking(const ncclConfig_t *config, int inherited);

/* Does a child made with `config` share its parent's resources (splitShare/shrinkShare)? */
bool ndet_comm_config_shares(const ncclConfig_t *config, bool shrink);

/* ---------------------------------------------------------------- setup */

/*
 * Set up every PENDING communicator of `comms` in lockstep: one exchange per round
 * for all of them (one thread may drive several ranks).  Must run outside any NCCL
 * group.  Returns ncclSuccess, or the first error: one NCCL gave our exchange (the
 * communicator is then unusable anyway), or one that broke a communicator because
 * this rank could not take its part (out of memory, say: its peers may wait for it
 * in the exchange, so it is not left to fall back).  Failures the ranks agree on
 * only make them fall back.
 */
ncclResult_t ndet_comm_setup_group(struct ndet_comm *const comms[], int count);

/*
 * Out of memory before `comms` could take their part in the setup: each one still
 * PENDING is broken with ncclSystemError (its eligible calls and
 * ncclCommGetAsyncError report it).  Returns ncclSystemError.
 */
ncclResult_t ndet_comm_setup_refuse(struct ndet_comm *const comms[], int count);

/*
 * A call of `comm` failed on this rank alone (a launch that failed, or one that was
 * never made for want of memory): its later calls would pair with its peers' of that
 * one, so they fail from now on, and ncclCommGetAsyncError reports it.
 */
void ndet_comm_poison(struct ndet_comm *comm);

/*
 * A call of `comm` on `stream` that this rank will not launch (host memory ran out
 * before it reached the engine, or NCCL failed the group that held it on this rank):
 * its peers' kernels of it are told at once (the backend's fail_call), or, where the
 * communicator is not set up yet, when its setup ends (which then fails it);
 * `comm` fails from then on with ncclSystemError, as ncclCommGetAsyncError says.
 * Allocates nothing.
 */
void ndet_comm_fail_unlaunched(struct ndet_comm *comm, cudaStream_t stream);

/*
 * Until NCCL's own work on a non-blocking communicator is done (its
 * ncclCommGetAsyncError no longer says ncclInProgress): NCCL refuses any other call
 * on it before, and may still be enqueueing kernels onto the application's streams.
 * At most NCCL_DET_TIMEOUT, with one WARN; ncclSuccess at once for a blocking one.
 * Returns NCCL's state (ncclInProgress: gave up, or aborted from another thread).
 */
ncclResult_t ndet_comm_wait_nccl(struct ndet_comm *comm);

/* ---------------------------------------------------------------- calls */

/* Decide `call` from its communicator's current state (fills call->decision). */
void ndet_comm_decide(struct ndet_call *call);

/* Count a decision that does not divert; WARN once per reason and communicator. */
void ndet_comm_note_decision(const struct ndet_call *call);

/*
 * Launch diverted calls, at most one per communicator (a host-only backend
 * exchanges for all of them at once).  Returns the first error as NCCL's code.
 */
ncclResult_t ndet_comm_launch_group(struct ndet_call *calls, int count);

/* ---------------------------------------------------------------- lifecycle */

/*
 * The code a failed communicator's eligible calls and ncclCommGetAsyncError report:
 * ncclRemoteError after a kernel failure (a peer, the network, a timeout: what
 * PyTorch's watchdog expects), ncclInvalidUsage when a rank never joined the setup
 * (the job's configuration is wrong: NCCL_DET_ENABLE differs between ranks).
 */
ncclResult_t ndet_comm_failure(struct ndet_comm *comm);

/* ncclCommGetAsyncError: true when our engine failed and *async_error was set here. */
bool ndet_comm_async_error(ncclComm_t nccl, ncclResult_t *async_error);

/*
 * ncclCommAbort: before forwarding, make our kernels leave (also those a finalize
 * or destroy on another thread is waiting for) and forget the communicator; after,
 * drop the returned reference (the engine is released without a barrier).
 */
struct ndet_comm *ndet_comm_abort_begin(ncclComm_t nccl);
void ndet_comm_abort_end(struct ndet_comm *comm);

/*
 * ncclCommRevoke, and ncclCommShrink with NCCL_SHRINK_ABORT (on the parent), before
 * forwarding: our kernels leave and the communicator's calls go to NCCL from now on.
 * ndet_comm_revoke_refused, after NCCL refused it (`result`, its arguments): that
 * cannot be undone, so it says so, once per communicator (WARN), instead of falling
 * back silently.
 */
void ndet_comm_revoke(ncclComm_t nccl);
void ndet_comm_revoke_refused(ncclComm_t nccl, const char *what, ncclResult_t result);

/*
 * ncclCommFinalize (collective): release the engines with a barrier, for all of
 * `comms` in lockstep, before NCCL finalizes them.  Outside any group.
 */
ncclResult_t ndet_comm_finalize_group(struct ndet_comm *const comms[], int count);

/*
 * ncclCommDestroy: stats, release the engine without a barrier (its kernels are
 * waited for while the communicator is still registered, so an abort reaches them),
 * then forget the communicator.
 */
void ndet_comm_destroy(ncclComm_t nccl);

/* ---------------------------------------------------------------- PreMulSum ops */

/*
 * NCCL made PreMulSum op `op` on `nccl` (ncclRedOpCreatePreMulSum succeeded): keep
 * what the kernels need, as NCCL does: the scalar's value now (host immediate:
 * NCCL reads it before returning) or its device address (read by every call).  Op
 * values are NCCL's own, so they are per communicator as NCCL's are.  false when out
 * of memory: the op is unknown to us, and its calls would run in NCCL on this rank
 * while the other ranks divert theirs (the caller fails its creation).
 */
bool ndet_comm_premul_created(ncclComm_t nccl, ncclRedOp_t op, const void *scalar,
			      ncclDataType_t datatype, ncclScalarResidence_t residence);

/* NCCL destroyed `op` on `nccl` (ncclRedOpDestroy succeeded). */
void ndet_comm_premul_destroyed(ncclComm_t nccl, ncclRedOp_t op);

/* ---------------------------------------------------------------- queries, tests */

/* ncclDetCommQuery. */
ncclResult_t ndet_comm_query(ncclComm_t nccl, int *diverted, const char **reason);

/* Counters of a live communicator; false when unknown. */
bool ndet_comm_stats(ncclComm_t nccl, struct ndet_comm_stats *stats);

/* Test hooks (not thread-safe against calls in flight). */
void ndet_comm_set_backend_for_testing(const struct ndet_backend *backend);
void *ndet_comm_engine_for_testing(ncclComm_t nccl);
/* Communicators in the registry (leak tests). */
int ndet_comm_registered_for_testing(void);

#ifdef __cplusplus
}
#endif

#endif /* NDET_COMM_H_ */
