/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * What the files of the CUDA engine share (src/engine/ndet_engine*.c): the engine
 * itself, and the functions one file defines for the others.  Private to
 * src/engine/; ndet_engine.h is the engine's interface.
 */
#ifndef NDET_ENGINE_INTERNAL_H_
#define NDET_ENGINE_INTERNAL_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "engine/ndet_engine.h"
#include "protocol/ndet_hosts_plan.h"
#include "protocol/ndet_setup.h"
#include "protocol/ndet_teardown.h"

/* Where one kind of launch (eager, or captured) last went. */
struct ndet_engine_last {
	cudaEvent_t event;            /* recorded on `stream` right after that launch */
	cudaStream_t stream;          /* compared with the next launch's, never handed to CUDA:
				       * the application may have destroyed it since */
	unsigned long long stream_id; /* its cudaStreamGetId; 0 unknown; in a capture a constant */
	unsigned long long capture;   /* its capture id; 0 eager */
	bool valid;
};

/*
 * The ranks of this rank's host (doc/protocol.md, "The engine's local view"), from
 * the agreed table (ndet_engine_setup_map): the kernels reduce these ranks and no
 * other.  With one host, index = rank and count = nranks.
 */
struct ndet_engine_local {
	int index;                 /* this rank's local index */
	int count;                 /* g: ranks on this host, 1 ... NDET_MAX_RANKS */
	int nhosts;                /* H */
	int ranks[NDET_MAX_RANKS]; /* the global rank of each local index, ascending */
};

struct ndet_engine {
	struct ndet_engine_config config; /* rank and nranks: the communicator's */
	/*
	 * What the plan, the lanes and the kernels see: `config` with rank and nranks
	 * the local index and g (set with `local`; nranks 0 before).
	 */
	struct ndet_engine_config local_config;
	struct ndet_engine_local local;
	ndet_engine_exchange_fn exchange;
	void *exchange_context;
	void *owned_context;       /* freed with the engine (ndet_engine_create's adapter) */
	cudaStream_t setup_stream; /* private, non-blocking: setup copies and exchanges */

	char *pool; /* flags at 0, lanes at data_offset */
	uint64_t pool_bytes;
	uint64_t data_offset;
	uint64_t lane_bytes;     /* set once the table is agreed (ndet_engine_setup_map) */
	uint64_t ll_offset;      /* LL slots, from the first lane (ndet_kernels.h) */
	uint64_t *step_counters; /* device, one per block */
	uint64_t *trace;         /* ndet_engine_set_trace; NULL: none */
	struct ndet_host_status *host_status;     /* host view */
	struct ndet_host_status *host_status_dev; /* device view */
	void *exchange_buffer;                    /* device (or pinned host) memory */
	void *barrier_words; /* the destroy barrier's gathered words (NDET_SETUP_AGREE_BYTES
			      * per rank), taken before the setup's first exchange */
	size_t exchange_bytes;
	bool exchange_pinned; /* exchange_buffer came from cudaHostAlloc */
	/* An exchange was abandoned while NCCL may still write into the buffer: kept. */
	bool exchange_abandoned;

	/* The detach protocol (ndet_teardown.h). */
	uint64_t *detach_host; /* pinned: detach words on their way in and out */
	uint64_t epoch;        /* of the setup: what our detach words carry */
	int detach_warned;     /* atomic: a detach word failed to go out or in */

	/*
	 * Across hosts (local.nhosts > 1): this rank's host, the global rank of every
	 * (h, l) at [h x g + l], and the staging of the stages (config.hosts_staging
	 * bytes of device memory, this rank's only: no peer maps it).  0, NULL, NULL on
	 * one host.
	 */
	int host;
	int *host_ranks;
	void *staging;
	struct ndet_hosts_transfer *host_transfers; /* [H]: ndet_backend_hosts.transfers */
	/*
	 * The stage kernels' own stream (ndet_backend_hosts.stage_stream) and the events
	 * that join it with a call's stream: [0] recorded on the call's stream, [1] on
	 * the stage stream (ndet_engine_hosts_order).
	 */
	cudaStream_t stage_stream;
	cudaEvent_t order_events[2];
	int poisoned; /* a launch or a join failed: the abort words are written, where the
		       * engine's device could still be made current (atomic) */
	/*
	 * NCCL's stages between hosts seen from the host (ndet_engine_error): the
	 * progress word's observer, under a spin flag (any thread may poll).
	 */
	struct ndet_hosts_stall stall;
	bool stall_busy;
	bool stall_warned;

	/* By local index: this host's ranks (ranks on other hosts are never mapped). */
	struct ndet_flags *peer_flags[NDET_MAX_RANKS];
	char *peer_lanes[NDET_MAX_RANKS];
	void *peer_ipc_base[NDET_MAX_RANKS]; /* to cudaIpcCloseMemHandle */
	ndet_peer_kind_t peer_kind[NDET_MAX_RANKS];

	/* Two ranks in one process (ndet_engine_ranks_share_process). */
	bool ranks_share_process;
	/* This communicator's ranks in this process, whose pools are freed together. */
	struct ndet_teardown_share *share;
	/* ndet_teardown_reserve's, from round two's prepare until the share is joined */
	struct ndet_teardown_share *reserved_share;

	/*
	 * Issue order across streams (ndet_engine_order): the last eager launch (its
	 * event also tells teardown when our last kernel finished) and the last captured
	 * one.  last_capture: capture id of the very last launch (0: eager).
	 */
	struct ndet_engine_last eager, captured;
	unsigned long long last_capture;
	bool has_last_launch;
	int order_warned;

	/* Teardown (ndet_engine_quiesce_group, ndet_engine_release). */
	bool query_failed; /* the context is broken: no kernel can be shown finished */
	bool idle;         /* no kernel of ours can still run */
	bool peers_done;   /* no peer can read our pool any more */
};

/*
 * The group entry points run in relaxed capture mode on the engines' devices and
 * give the caller's device and capture mode back.  The caller's thread may be
 * capturing (a first all-reduce inside torch.cuda.graph): relaxed mode lets this
 * thread allocate and synchronise its own streams without invalidating the capture.
 */
struct ndet_engine_caller {
	int device;
	enum cudaStreamCaptureMode mode;
	bool mode_saved;
};

/* ndet_engine_pool.c: the engine's memory, its pool, and the mappings of its peers'. */
bool ndet_engine_use_device(const struct ndet_engine *engine);
cudaError_t ndet_engine_malloc(void *pointer, size_t bytes);
cudaError_t ndet_engine_host_alloc(void *pointer, size_t bytes);
void ndet_engine_free_memory(void *pointer, size_t bytes, bool pinned);
ndet_local_status_t ndet_engine_alloc(struct ndet_engine *engine);
void ndet_engine_fill_payload(struct ndet_engine *engine, ndet_local_status_t local,
			      struct ndet_setup_payload *payload);
bool ndet_engine_set_local(struct ndet_engine *engine, const struct ndet_setup_payload *table,
			   int nranks);
int ndet_engine_local_index(const struct ndet_engine *engine, int rank);
bool ndet_engine_map_peers(struct ndet_engine *engine, const struct ndet_setup_payload *table);
bool ndet_engine_alloc_staging(struct ndet_engine *engine);
bool ndet_engine_probe_write(struct ndet_engine *engine);
bool ndet_engine_probe_verify(struct ndet_engine *engine);
void ndet_engine_close_peers(struct ndet_engine *engine);
void ndet_engine_detach_peers(struct ndet_engine *engine);
void ndet_engine_free_all(void *member);
extern const struct ndet_teardown_ops ndet_engine_teardown_ops;

/* ndet_engine_setup.c: the caller's device and capture mode, the setup rounds. */
void ndet_engine_caller_save(struct ndet_engine_caller *caller);
/* An engine across hosts, with what its stages need (ndet_engine_alloc_staging). */
bool ndet_engine_spans_hosts(const struct ndet_engine *engine);
void ndet_engine_caller_restore(struct ndet_engine_caller *caller);
extern const struct ndet_setup_member_ops ndet_engine_setup_ops;
/* A member's place in an exchange (ndet_exchange_may_share). */
struct ndet_exchange_place ndet_engine_place(const struct ndet_engine_config *config);
ndet_status_t ndet_engine_setup_allgather(void *context, int count, void *const members[],
					  const void *const sends[], void *const recvs[],
					  size_t bytes, ndet_status_t results[]);

#endif /* NDET_ENGINE_INTERNAL_H_ */
