/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The schedule of a deterministic all-reduce over H hosts of g ranks each
 * (doc/multihost-design.md): chunks, their segments and blocks, the ncclSend/ncclRecv
 * lists of the two network stages, and the staging layout.  Pure (no CUDA or NCCL
 * call); every rank computes the same chunks, segments and blocks from the same
 * agreed facts, and each rank its own lists from them.
 *
 * A chunk of len elements is cut into g x H blocks of p elements each,
 *     p = ndet_segment_elems(len, g x H, elem_size)          (kernels/ndet_abi.h)
 *     block (l, h) = elements [(l x H + h) x p, (l x H + h + 1) x p) of the chunk,
 * clipped to len (trailing blocks of a short chunk may be empty); segment l is blocks
 * (l, 0) ... (l, H - 1), contiguous.  Block (l, h) is owned by the rank at (host h,
 * local index l).  Every chunk but the last is chunk_elems long, a multiple of g x H
 * whole 512-byte units, so there every block has exactly chunk_elems / (g x H)
 * elements; only the last chunk's blocks may differ, by less than one unit.
 *
 * The stages of a chunk, for the rank at (h, l):
 *   1 (our kernel)  local reduce-scatter: this host's partial of segment l into the
 *                   staging's partial region, in the partial type;
 *   2 (NCCL group)  send block (l, h') of the partial to (h', l) for every h' != h,
 *                   receive block (l, h) from each of them into the received region;
 *   3 (our kernel)  reduce the H partials of block (l, h) in host order, round once,
 *                   into block h of the result region;
 *   4 (NCCL group)  send that block to every (h', l), receive block (l, h') from each
 *                   into block h' of the result region;
 *   5 (our kernel)  local all-gather of the g result segments into recvbuff.
 */
#ifndef NDET_HOSTS_PLAN_H_
#define NDET_HOSTS_PLAN_H_

#include <stdbool.h>
#include <stdint.h>

#include "common/ndet_status.h"
#include "kernels/ndet_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Hosts and ranks per host a plan accepts (g: what the IPC engine reduces over). */
#define NDET_HOSTS_MAX_HOSTS 1024
#define NDET_HOSTS_MAX_LOCAL NDET_MAX_RANKS

/*
 * Staging slots: chunks in flight.  Chunk k uses slot k % NDET_HOSTS_SLOTS; three
 * let the network stages of chunks k and k + 1 run while our kernels work on chunks
 * k - 1 and k + 2 (doc/multihost-design.md, "Streams and the pipeline").
 */
#define NDET_HOSTS_SLOTS 3u

/*
 * Chunking: NDET_HOSTS_CHUNKS chunks, so that the NVLink stages of one chunk hide
 * under the network stages of another; fewer where that would give a rank less than
 * NDET_HOSTS_MIN_STAGE_BYTES of stage 2 per chunk (each NCCL group costs a fixed
 * latency); more where the staging holds less.  Then the same number of chunks,
 * evened out: every chunk but the last as short as covers the message (so a chunk
 * may come out below NDET_HOSTS_MIN_STAGE_BYTES by less than a chunk's share).
 */
#ifndef NDET_HOSTS_CHUNKS /* -DNDET_HOSTS_CHUNKS=N: builds that compare chunk counts */
#define NDET_HOSTS_CHUNKS 8u
#endif
#define NDET_HOSTS_MIN_STAGE_BYTES (1u << 20)

/* The regions of a slot, and the slots, start on multiples of this many bytes. */
#define NDET_HOSTS_STAGING_ALIGN 256u

/* What is reduced: equal on every rank. */
struct ndet_hosts_shape {
	uint32_t elem_size;    /* bytes of a data element: 1, 2, 4 or 8 */
	uint32_t partial_size; /* bytes of a partial element (ndet_hosts_partial_size) */
	int hosts;             /* H */
	int local_ranks;       /* g */
};

struct ndet_hosts_params {
	struct ndet_hosts_shape shape;
	uint64_t count; /* N: elements of the message */
	/*
	 * Staging bytes of one rank: an agreed setting, never a local allocation result
	 * (the chunk size depends on it, and every rank must chunk alike).
	 */
	uint64_t staging_bytes;
};

/*
 * The layout of one staging slot, in bytes from the slot's start.  With p the chunk's
 * block_elems, block (l, h') of this rank's partial segment is at partial_offset +
 * h' x p x partial_size, the partial received from host h' at received_offset + j x
 * received_stride (j = h' below this rank's host h, else h' - 1), and result block h'
 * at result_offset + h' x p x elem_size: what the kernels of stages 1, 3 and 5 use,
 * and what ndet_hosts_transfers' staging offsets point to.
 */
struct ndet_hosts_slot_layout {
	uint64_t partial_offset;  /* this rank's partial segment: H blocks, partial type */
	uint64_t received_offset; /* the H - 1 received partial blocks */
	uint64_t received_stride; /* bytes from one received block to the next */
	uint64_t result_offset;   /* the result segment: H blocks, data type */
	/*
	 * The peers' status words (NDET_HOSTS_STATUS_BYTES each, by peer host; this
	 * rank's own entry unused): H received with stage 2, then H with stage 4.  A
	 * peer sends its abort word with each stage (nonzero: a kernel of its failed, or
	 * a peer of its told it so), and the stage kernel after it (3, 5) fails when one
	 * is set: a failure travels with the data to the other hosts, whose ranks would
	 * otherwise go on with the failed rank's stale bytes.
	 */
	uint64_t status_offset;
	uint64_t bytes; /* the slot, a multiple of NDET_HOSTS_STAGING_ALIGN */
};

#define NDET_HOSTS_STATUS_BYTES 8u

/* Equal on every rank for equal params. */
struct ndet_hosts_plan {
	struct ndet_hosts_params params;
	uint64_t chunk_elems; /* every chunk but the last; g x H x (512 / elem_size) x m */
	uint64_t chunks;      /* ceil(count / chunk_elems): 0 for count 0 */
	struct ndet_hosts_slot_layout slot;
	uint64_t staging_bytes; /* NDET_HOSTS_SLOTS x slot.bytes <= params.staging_bytes */
};

struct ndet_hosts_range {
	uint64_t offset; /* first element, from the start of the message */
	uint64_t count;  /* elements; 0 for an empty block */
};

struct ndet_hosts_chunk {
	uint64_t index;
	struct ndet_hosts_range elems; /* the chunk's elements */
	uint64_t block_elems;          /* p: the stride of its blocks (header comment) */
	uint32_t slot;                 /* index % NDET_HOSTS_SLOTS */
	uint64_t slot_offset;          /* slot x plan->slot.bytes */
};

/* Where a rank sits, and every rank's global rank. */
struct ndet_hosts_rank {
	int host;         /* h: hosts ordered by their lowest global rank */
	int local;        /* l: ranks of a host ordered by global rank */
	const int *ranks; /* ranks[h x g + l]: global rank of (h, l); hosts x g entries */
};

typedef enum {
	NDET_HOSTS_STAGE_LOCAL = 1,    /* stage 1: our kernel, local reduce-scatter */
	NDET_HOSTS_STAGE_PARTIALS = 2, /* stage 2: partial blocks, partial_size bytes each */
	NDET_HOSTS_STAGE_REDUCE = 3,   /* stage 3: our kernel, the hosts' tree */
	NDET_HOSTS_STAGE_RESULTS = 4,  /* stage 4: rounded blocks, elem_size bytes each */
	NDET_HOSTS_STAGE_GATHER = 5,   /* stage 5: our kernel, local all-gather */
} ndet_hosts_stage_t;

/* Where peer host `peer`'s status word of `stage` (2 or 4) lands in a slot. */
uint64_t ndet_hosts_status_at(const struct ndet_hosts_plan *plan, ndet_hosts_stage_t stage,
			      int peer);

/* One ncclSend or ncclRecv of a stage (as bytes: NCCL moves them, never adds). */
struct ndet_hosts_transfer {
	int peer;                /* global rank */
	int peer_host;           /* h' (the peer's local index is this rank's) */
	uint64_t offset;         /* the block's first element in the message */
	uint64_t count;          /* its elements, never 0 */
	uint64_t bytes;          /* count x the size of what travels */
	uint64_t staging_offset; /* in this rank's staging, the slot's offset included */
};

/*
 * The partial type's size: the data type's for min and max (exact in it) and where
 * g == 1 (the partial is the rank's own element) unless PreMulSum (x times s, in the
 * accumulation type); the accumulation type's otherwise (8 for f64, 4 for the rest).
 * 0 for an invalid dtype or op.
 */
uint32_t ndet_hosts_partial_size(ndet_dtype_t dtype, ndet_op_t op, bool premul, int local_ranks);

/*
 * The plan parameters of a call on H hosts of g ranks: its partial type, and the
 * message the schedule runs over (a reduce-scatter's whole send buffer, g x H blocks
 * of `count` = recvcount elements; the count of an all-reduce or a reduce).  Agreed
 * facts only, so every rank plans alike.
 */
struct ndet_hosts_params ndet_hosts_params_for(ndet_dtype_t dtype, ndet_op_t op, bool premul,
					       ndet_coll_t coll, uint64_t count, int hosts,
					       int local_ranks, uint64_t staging_bytes);

/*
 * Plan a message.  NDET_ERR_INVALID_ARGUMENT for an invalid shape (elem_size not 1,
 * 2, 4 or 8; partial_size not one of those or below elem_size; hosts outside
 * [1, NDET_HOSTS_MAX_HOSTS]; local_ranks outside [1, NDET_HOSTS_MAX_LOCAL]) or
 * staging below ndet_hosts_min_staging_bytes (the setup refuses such settings
 * before any call).  The chunk size is a function of params alone.
 */
ndet_status_t ndet_hosts_plan_make(const struct ndet_hosts_params *params,
				   struct ndet_hosts_plan *plan);

/* Chunk index of a plan (index < plan->chunks). */
struct ndet_hosts_chunk ndet_hosts_chunk_at(const struct ndet_hosts_plan *plan, uint64_t index);

/* Block (local, host) of a chunk, and segment local (H blocks, contiguous). */
struct ndet_hosts_range ndet_hosts_block(const struct ndet_hosts_plan *plan,
					 const struct ndet_hosts_chunk *chunk, int local, int host);
struct ndet_hosts_range ndet_hosts_segment(const struct ndet_hosts_plan *plan,
					   const struct ndet_hosts_chunk *chunk, int local);

/*
 * The sends (send true) or receives of a stage of a chunk for one rank, in ascending
 * peer host order, empty blocks left out (the peer computes the same count and
 * leaves its side out too): at most hosts - 1 entries into out, their number into
 * *n.  What rank A sends to B is exactly what B receives from A: the same block,
 * offset, count and bytes.  NDET_ERR_INVALID_ARGUMENT for a host or local index out
 * of range or a negative global rank of a peer.
 */
ndet_status_t ndet_hosts_transfers(const struct ndet_hosts_plan *plan,
				   const struct ndet_hosts_chunk *chunk,
				   const struct ndet_hosts_rank *rank, ndet_hosts_stage_t stage,
				   bool send, struct ndet_hosts_transfer *out, uint32_t *n);

/*
 * The slot layout for chunks of chunk_elems elements (a multiple of g x H), and the
 * staging bytes they need: NDET_HOSTS_SLOTS slots, what NCCL_DET_MAX_MEMORY counts.
 */
struct ndet_hosts_slot_layout ndet_hosts_slot_for(const struct ndet_hosts_shape *shape,
						  uint64_t chunk_elems);
uint64_t ndet_hosts_staging_for(const struct ndet_hosts_shape *shape, uint64_t chunk_elems);
/* The least staging a plan accepts: chunks of one 512-byte unit per block. */
uint64_t ndet_hosts_min_staging_bytes(const struct ndet_hosts_shape *shape);

/*
 * The least staging every plan of H hosts of g ranks accepts, whatever the dtype and
 * op: the worst shape's ndet_hosts_min_staging_bytes (fp8 with f32 partials).  The
 * setup refuses NCCL_DET_HOSTS_STAGING below it on every rank alike.
 */
uint64_t ndet_hosts_min_staging_any(int hosts, int local_ranks);

/*
 * How one stage kernel (1, 3 or 5) of one chunk runs on a host: equal on every rank
 * of the host, from agreed facts only (the plan, the call, the lanes and the grid
 * cap), since stages 1 and 5 exchange per block and step through the pools.
 */
struct ndet_hosts_launch {
	uint32_t blocks;      /* at least 1, at most max_blocks */
	uint64_t piece_elems; /* stages 1 and 5: elements of a segment per block and step */
	uint32_t signature;   /* NDET_FLAG_SIGNATURE_BITS bits, never 0: the flags' */
};

/* The call a stage belongs to, as far as its signature tells calls apart. */
struct ndet_hosts_call_key {
	ndet_dtype_t dtype;
	ndet_op_t op;
	ndet_coll_t coll;
	int root; /* a reduce's global root; ignored otherwise */
	bool premul;
};

/*
 * Stage 1 splits a lane into g pieces (one per segment), stage 5 takes a whole lane
 * per piece; both in whole NDET_SEGMENT_BYTES.  Blocks: one per piece of a segment
 * (stages 1 and 5), one per 1024 elements of the block (stage 3), at least one, at
 * most half of max_blocks (the grid cap: the rest of this rank's share of the GPU is
 * left to NCCL's kernels of stages 2 and 4).  NDET_ERR_INVALID_ARGUMENT for another stage, a lane
 * too small for g pieces of one unit, or max_blocks 0.
 */
ndet_status_t ndet_hosts_launch_make(const struct ndet_hosts_plan *plan,
				     const struct ndet_hosts_chunk *chunk,
				     const struct ndet_hosts_call_key *call,
				     ndet_hosts_stage_t stage, uint64_t lane_bytes,
				     uint32_t max_blocks, struct ndet_hosts_launch *out);

/*
 * The inter-host bytes a rank sends (and receives) for a message of count elements,
 * averaged over the ranks: (H - 1) / H x count / g x (partial_size + elem_size),
 * floored.  Summed over every rank the schedule moves exactly H x g times the
 * unfloored value; one rank moves at most (H - 1) x 512 x (1 + partial_size /
 * elem_size) bytes more (ndet_hosts_rank_excess_bound).
 */
uint64_t ndet_hosts_inter_bytes(const struct ndet_hosts_shape *shape, uint64_t count);
uint64_t ndet_hosts_rank_excess_bound(const struct ndet_hosts_shape *shape);

/*
 * ndet_hosts_args.where (ndet_abi.h) of a stage kernel: its stage, its chunk and the
 * call's chunk count (counts above the field's width clipped to NDET_HOSTS_WHERE_MAX).
 */
uint64_t ndet_hosts_where(ndet_hosts_stage_t stage, uint64_t chunk, uint64_t chunks);

/*
 * "stage 5 of chunk 3 of 8" for `where` (chunks counted from 1; NUL-terminated,
 * clipped to `size`): where a stalled call stood, for the WARN.
 */
void ndet_hosts_where_text(uint64_t where, char *text, size_t size);

/*
 * The issue order of a call across hosts on two streams (doc/multihost-design.md,
 * "Streams and the pipeline"): the call's stream S, on which NCCL's groups run, and
 * the engine's private stream K, on which our stage kernels run.  Group j holds
 * stage 2 of chunk j and stage 4 of chunk j - 1.  In issue order:
 *
 *     TO_K; 1(0);
 *     for j = 0 .. chunks + 1:
 *         TO_K (j > 0); 3(j - 1); TO_S, group j (j <= chunks); 5(j - 2); 1(j + 1)
 *     TO_S
 *
 * (stages of a chunk outside [0, chunks) left out), where TO_K makes K wait for what
 * is on S so far and TO_S makes S wait for what is on K so far.  Only stage 3 waits
 * for the group before it and holds back the next: stages 5(j - 2) and 1(j + 1) run
 * on K while group j runs on S.  Every wait is for work issued earlier, so the
 * order runs as it is on one stream too (a host-only engine).
 */
typedef enum {
	NDET_HOSTS_OP_DONE = 0, /* the schedule is over */
	NDET_HOSTS_OP_TO_K,     /* K waits for what is on S so far */
	NDET_HOSTS_OP_TO_S,     /* S waits for what is on K so far */
	NDET_HOSTS_OP_STAGE,    /* our stage `stage` of chunk `chunk`, on K */
	NDET_HOSTS_OP_GROUP,    /* NCCL's group `chunk` (stage 2 of it, 4 of it - 1), on S */
} ndet_hosts_op_kind_t;

/* The joins of the two streams a call makes (the backend's hosts_order). */
typedef enum {
	NDET_HOSTS_JOIN_BEGIN = 0, /* the call's first TO_K */
	NDET_HOSTS_JOIN_TO_STAGES, /* TO_K */
	NDET_HOSTS_JOIN_TO_CALL,   /* TO_S */
	NDET_HOSTS_JOIN_END,       /* the call's last TO_S */
} ndet_hosts_join_t;

struct ndet_hosts_op {
	ndet_hosts_op_kind_t kind;
	ndet_hosts_stage_t stage; /* NDET_HOSTS_OP_STAGE */
	uint64_t chunk;           /* STAGE: the chunk; GROUP: j */
};

/* Where a schedule stands; zero-initialised, then given to ndet_hosts_schedule_next. */
struct ndet_hosts_schedule {
	uint64_t chunks;
	uint64_t step; /* j */
	uint32_t phase;
	bool started, finished;
};

/*
 * The next operation of the schedule of `chunks` chunks (NDET_HOSTS_OP_DONE at the
 * end; a call of no chunks is TO_K, TO_S).  `schedule` starts zeroed with its
 * `chunks` set.
 */
struct ndet_hosts_op ndet_hosts_schedule_next(struct ndet_hosts_schedule *schedule);

/*
 * Progress of the stages between hosts, seen from the host without a CUDA call
 * (doc/multihost-design.md, "Faults").  Each stage kernel of ours publishes, as it
 * starts, a progress word into host-mapped memory: a value never published before
 * (its start time) shifted left once, with bit 0 set when a stage of NCCL's follows
 * it in the call (clear for the call's last kernel).  Our kernels run one after
 * another on the stage stream, which between two of them waits for nothing but
 * NCCL's groups; our own waits have their own deadline.  So a
 * word with bit 0 set that stays the same for NCCL_DET_TIMEOUT means NCCL's stage
 * has stalled: a rank on another host died or stopped, which NCCL itself may never
 * report.
 */
struct ndet_hosts_stall {
	uint64_t seen;     /* the last progress word observed */
	uint64_t since_ms; /* when it was first observed */
	bool stalled;      /* sticky */
};

/*
 * Observe progress word `word` at `now_ms`: has NCCL's stage stalled for more than
 * `timeout_ms` (0: never)?  A stall stays reported.  Observations are what the
 * application's polls make: the first poll of a stalled stage starts its clock.
 */
bool ndet_hosts_stall_observe(struct ndet_hosts_stall *stall, uint64_t word, uint64_t now_ms,
			      uint64_t timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* NDET_HOSTS_PLAN_H_ */
