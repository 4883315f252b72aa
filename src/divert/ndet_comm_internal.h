/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * What the files of the divert layer's per-communicator state share (src/divert/
 * ndet_comm*.c): the entry of one communicator, and the functions one file defines
 * for the others.  Private to src/divert/; ndet_comm.h is the layer's interface.
 */
#ifndef NDET_COMM_INTERNAL_H_
#define NDET_COMM_INTERNAL_H_

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <nccl.h>

#include "divert/ndet_comm.h"
#include "protocol/ndet_setup.h"

/* Exclusion lists a communicator's shrinks are told apart by (more: identity unknown). */
#define NDET_COMM_SHRINK_LISTS 8

struct ndet_comm {
	bool exit_reported; /* NCCL_DET_STATS printed by the exit handler (registry lock) */
	/* registry lock */
	struct ndet_comm *next;
	int refs;
	bool registered;

	/* set at registration, then read-only */
	ncclComm_t nccl;
	bool blocking;
	bool check_pointers; /* NCCL's pointer-check mode, read as NCCL reads it */
	ncclComm_t parent;   /* registry lock: NULL once the parent left the registry */
	bool shares_parent;  /* registry lock: cleared once its parent stopped it */
	/* set at registration, never changed: its communicator (ndet_comm_identity_*) */
	uint64_t identity;
	/* comm->lock: splits made from it so far; shrinks so far per exclusion list */
	uint64_t splits;
	struct {
		uint64_t list, count;
	} shrinks[NDET_COMM_SHRINK_LISTS];
	int shrink_lists;

	/* comm->lock */
	pthread_mutex_t lock;
	pthread_cond_t changed; /* engine_users fell to 0, or a setup finished */
	ndet_comm_state_t state;
	bool setup_running;
	int rank, nranks, device; /* -1 until the setup asked NCCL */
	void *engine;
	/*
	 * An engine in teardown (finalize, destroy): no longer used for calls, but an
	 * abort from another thread must still reach it (its kernels poll the flag, and
	 * the teardown waits for them).  Cleared before the engine is released.
	 */
	void *closing_engine;
	bool stopped;     /* aborted or revoked: our exchanges must not call NCCL on it */
	int engine_users; /* threads between engine_get and engine_put */
	bool kernel_failed;
	bool unlaunched; /* ... because this rank dropped a call (ndet_comm_fail_unlaunched) */
	/*
	 * A call of this rank was dropped before the communicator's setup ran (out of
	 * host memory recording or running it, or NCCL failed the group that held it on
	 * this rank): its peers may run theirs once set up, so the setup ends in
	 * POISONED and, where it set up an engine, tells the peers on `dropped_stream`
	 * (ndet_comm_setup_finish).
	 */
	bool dropped;
	cudaStream_t dropped_stream;
	bool revoke_refused; /* NCCL refused a revoke we had acted on: said once */
	/*
	 * Not ncclSuccess: the setup did not end in the ranks' agreement, so falling back
	 * could pair this rank's NCCL collectives with its peers' setup exchange.  What
	 * every eligible call, and ncclCommGetAsyncError, then return: ncclInvalidUsage
	 * where a rank never joined the setup, ncclRemoteError where this rank left with
	 * another of its communicator that this thread drives, ncclSystemError where it
	 * could not take its part for want of memory (ndet_comm_setup_broken).
	 */
	ncclResult_t broken;
	bool strict; /* agreed NCCL_DET_STRICT, once set up */
	bool sm90;   /* agreed: every rank's GPU is sm_90 or newer (NDET_SETUP_FLAG_SM90) */
	bool fp8;    /* agreed: every rank runs our fp8 kernels (NDET_SETUP_FLAG_FP8) */
	ndet_status_t setup_status;
	struct ndet_setup_verdict verdict;

	/* comm->lock: the PreMulSum ops NCCL made on this communicator */
	struct ndet_comm_premul *premul_ops;
	int premul_count, premul_capacity;

	/* atomics */
	int exchange_result; /* ncclResult_t of our last failed exchange */
	struct ndet_comm_stats stats;
	int warned[NDET_FALLBACK_COUNT];
	int refused_warned[NDET_FALLBACK_COUNT];
};

/* One ncclRedOpCreatePreMulSum op of a communicator. */
struct ndet_comm_premul {
	ncclRedOp_t op;
	ncclDataType_t datatype;
	ndet_premul_t residence;
	uint64_t bits;      /* NDET_PREMUL_HOST: the scalar's bytes, read at creation */
	const void *scalar; /* NDET_PREMUL_DEVICE */
};

/* ndet_comm.c: the backend, the registry and the lifecycle, engine access. */
const struct ndet_backend *ndet_comm_backend(void);
struct ndet_comm *ndet_comm_take_next(bool (*take)(struct ndet_comm *comm, void *context),
				      void *context);
void ndet_comm_print_stats(struct ndet_comm *comm);
void ndet_comm_refresh_locked(struct ndet_comm *comm);
void *ndet_comm_engine_get(struct ndet_comm *comm);
void ndet_comm_engine_put(struct ndet_comm *comm);
bool ndet_comm_is_stopped(struct ndet_comm *comm);

/*
 * ndet_comm_hosts.c: calls of communicators that span hosts.  Is `engine` one
 * (*view: where its rank sits)?  Then launch `count` such calls (one per
 * communicator, their engines taken), stage by stage for all of them, every NCCL
 * stage of all of them in one NCCL group; each gets its status (NDET_ERR_NCCL where
 * NCCL failed a send or receive), and the first NCCL failure is returned.
 */
bool ndet_comm_hosts_engine(void *engine, struct ndet_backend_hosts *view);
/*
 * Calls of one batch (the calls of one ncclGroupEnd, or one call), and communicators
 * of one setup, kept on the stack: every communicator a thread drives in one group,
 * up to this many.  With the engine's transfer lists (ndet_backend_hosts.transfers)
 * a call across hosts then allocates nothing, nor do the connections at setup: a
 * rank that stopped there would leave its peers on other hosts waiting in NCCL.
 * The setup protocol's bound, so that the two layers stop allocating together.
 */
#define NDET_COMM_STACK NDET_SETUP_STACK
/*
 * Can this rank run the stages between hosts: a backend with them, and NCCL's
 * grouped sends and receives?  Published in the setup record (a rank that could not
 * post them would leave its peers on other hosts waiting in NCCL).
 */
bool ndet_comm_hosts_capable(void);
/*
 * At setup, before the first call: NCCL's connections to every peer of the stages
 * between hosts, for the engines (NULL: none) that span hosts, in one NCCL group
 * (backend hosts_connect).  results[i]: comms[i]'s NCCL result; the first failure is
 * returned.
 */
ncclResult_t ndet_comm_hosts_connect(void *const engines[], const ncclComm_t comms[],
				     ncclResult_t results[], int count);
ncclResult_t ndet_comm_hosts_launch(struct ndet_backend_call *launches, const ncclComm_t *comms,
				    int count);

/* ndet_comm_exit.c: the fork and exit handlers, registered once each. */
void ndet_comm_register_fork_handler(void);
void ndet_comm_register_exit_handler(void);

#endif /* NDET_COMM_INTERNAL_H_ */
