/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The host/device ABI of the kernels: the geometry constants, the flags region at the
 * start of every rank's pool, the engine's host-mapped status, the error codes a
 * kernel reports and the argument block of one launch.  Plain C, read by the host
 * code and the kernels alike; the launchers are in ndet_kernels.h.
 *
 * The flag protocol in short (doc/protocol.md has it step by step).  Each block b of
 * every rank owns a lane in its pool and moves one chunk per step s.  A step writes
 * into pools, publishes ready[b][me] = (s, call signature) into every peer's flags and
 * waits for every peer's ready of s with the same signature (another signature: an
 * error, never garbage), then reduces in the tree order of ndet_reference.h.
 * released[b][q] = s says rank q no longer touches my lane b for step s, done[b][q] =
 * s that nothing of step s is left in q's pool; a step waits for the one or the other
 * of the block's previous step before it writes (LL steps publish neither, and the
 * step after them waits for the flags of the step before them).  Pull (one-shot,
 * two-shot, reduce-scatter) loads the peers' lanes; LL stores data and tag together in
 * 8-byte words into the peers' LL slots; push stores segments into the peers' lanes.
 * Flags hold exact step values, so peers are at most one step apart and counters may
 * wrap; the step counters live in device memory, so CUDA-graph replays continue the
 * sequence.
 */
#ifndef NDET_ABI_H_
#define NDET_ABI_H_

#include <stddef.h>
#include <stdint.h>

#include "kernels/ndet_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Threads per block of the all-reduce kernel (at least 64: warp 1 reads the host flag). */
#define NDET_KERNEL_THREADS 256

/* Upper bound of NCCL_DET_MAX_BLOCKS (flag arrays are sized for it). */
#define NDET_KERNEL_MAX_BLOCKS 128

/* Bits of a ready flag: step (high 40) and call signature (low 24). */
#define NDET_FLAG_SIGNATURE_BITS 24
#define NDET_FLAG_SIGNATURE_MASK ((1u << NDET_FLAG_SIGNATURE_BITS) - 1u)

typedef enum {
	NDET_PATH_NONE = 0, /* count == 0: nothing to do */
	NDET_PATH_COPY,     /* one rank: recvbuff = sendbuff */
	NDET_PATH_ONESHOT,
	NDET_PATH_TWOSHOT,
	NDET_PATH_SCATTER, /* reduce-scatter: count elements per rank block */
	NDET_PATH_LL,      /* one step, data and flag in each 8-byte word */
	NDET_PATH_PUSH,    /* two-shot by remote stores into the peers' pools */
} ndet_path_t;

/*
 * LL geometry: lines per thread, data bytes per line and block, bytes of one slot (of
 * NDET_LL_BLOCK_LINES 16-byte lines).  A line carries NDET_LL_LINE_DATA bytes of data
 * and a 32-bit tag in each 8-byte half; a wide line (elements of 1, 2 and 4 bytes,
 * large LL messages: ndet_plan.h) NDET_LL_WIDE_LINE_DATA and a 16-bit tag in each, in
 * blocks of up to NDET_LL_WIDE_BLOCK_BYTES, the same slot of NDET_LL_BLOCK_LINES lines.
 * Either format has kernels of one line per thread, for blocks of at most half that.
 * args.ll_line names the format of an LL call (device/ndet_ll.cuh).
 */
#define NDET_LL_LINES_PER_THREAD 2
#define NDET_LL_BLOCK_LINES      (NDET_KERNEL_THREADS * NDET_LL_LINES_PER_THREAD)
#define NDET_LL_LINE_DATA        8
#define NDET_LL_BLOCK_BYTES      (NDET_LL_BLOCK_LINES * NDET_LL_LINE_DATA)
#define NDET_LL_SLOT_BYTES       (NDET_LL_BLOCK_LINES * 16)
#define NDET_LL_WIDE_LINE_DATA   12
#define NDET_LL_WIDE_BLOCK_BYTES (NDET_LL_BLOCK_LINES * NDET_LL_WIDE_LINE_DATA)

/*
 * LL tags repeat every 255 LL steps (doc/protocol.md, LL), so on one slot parity a line
 * last written 510 steps ago would match.  An LL step stores only the lines that hold
 * data, except at the steps t with t % NDET_LL_REFRESH_STEPS < 2, which store every
 * line of the slot: no line of either parity is then older than NDET_LL_REFRESH_STEPS
 * steps, which must stay below 510.
 */
#define NDET_LL_REFRESH_STEPS 256u
#if NDET_LL_REFRESH_STEPS % 2 != 0 || NDET_LL_REFRESH_STEPS >= 510
#error "NDET_LL_REFRESH_STEPS: even, and below the tags' period on one parity (510)"
#endif

/*
 * The step counters of a rank (ndet_kernel_args.step_counters), four words per block:
 * its step, its LL step, the step its last LL step was (an LL step right after
 * another needs no released wait: doc/protocol.md, LL), and, once it ran LL steps,
 * the step before the first of them: LL steps publish neither released nor done, so
 * the next step on another path waits for that step's.
 */
#define NDET_STEP_COUNTER_WORDS 4
#define NDET_COUNTER_LL(b)      (NDET_KERNEL_MAX_BLOCKS + (b))
#define NDET_COUNTER_LAST_LL(b) (2 * NDET_KERNEL_MAX_BLOCKS + (b))
#define NDET_COUNTER_OPEN(b)    (3 * NDET_KERNEL_MAX_BLOCKS + (b))
/* Upper bound of NCCL_DET_LL_MAX, and the most LL blocks a pool has slots for. */
#define NDET_LL_MAX_BYTES  (256u * 1024u)
#define NDET_LL_MAX_BLOCKS ((NDET_LL_MAX_BYTES + NDET_LL_BLOCK_BYTES - 1) / NDET_LL_BLOCK_BYTES)

/*
 * Segments: two-shot and push split a chunk of len elements among the n ranks;
 * segment q is elements [q x seg, min(len, (q + 1) x seg)) of the chunk, with seg =
 * ndet_segment_elems(len, n, element size): the share ceil(len / n), rounded up to
 * whole NDET_SEGMENT_BYTES where the share is at least n of them, else to whole
 * 16-byte packs.  Segments of a whole-lane chunk then start on 128-byte lines (3
 * ranks, 1 MiB: 349,696 bytes, not 349,536 that start 96 bytes into a line), and the
 * last one still has elements: it is at least len - (n - 1) x (share + unit - 1),
 * more than one unit when the share is n units or more.  The planner and the kernels
 * both call this one function, so they cannot disagree on where a segment starts.
 */
#define NDET_SEGMENT_BYTES 512u
#ifdef __CUDACC__
#define NDET_HOST_DEVICE __host__ __device__
#else
#define NDET_HOST_DEVICE
#endif
static inline NDET_HOST_DEVICE uint64_t ndet_segment_elems(uint64_t len, uint32_t n,
							   uint32_t elem_size)
{
	const uint64_t share = (len + n - 1) / n;
	const uint64_t unit = share * elem_size >= (uint64_t)n * NDET_SEGMENT_BYTES
				      ? NDET_SEGMENT_BYTES / elem_size
				      : 16u / elem_size;
	return (share + unit - 1) / unit * unit;
}

/*
 * Kernel-table index of PreMulSum: op NDET_OP_SUM with args.premul set (for
 * ndet_kernel_allreduce_all_ranks, which takes the index).
 */
#define NDET_KERNEL_OP_PREMULSUM NDET_OP_COUNT

/* Error words a kernel writes into host-mapped memory (first writer wins). */
typedef enum {
	NDET_KERNEL_OK = 0,
	NDET_KERNEL_ERR_TIMEOUT = 1,   /* a peer did not answer before NCCL_DET_TIMEOUT */
	NDET_KERNEL_ERR_ABORTED = 2,   /* ncclCommAbort / revoke set the abort flag */
	NDET_KERNEL_ERR_SIGNATURE = 3, /* a peer called with another count/dtype/op */
	NDET_KERNEL_ERR_PEER = 4,      /* a peer failed and told us so */
	/*
	 * Not a kernel's: the host saw a stage of NCCL's between hosts make no progress
	 * for NCCL_DET_TIMEOUT (struct ndet_hosts_stall).
	 */
	NDET_KERNEL_ERR_STALLED = 5,
	/*
	 * Not a kernel's: a launch (or a join of streams) of this rank's failed on its way
	 * to the GPU while its peers went on; they were told (ndet_engine_poison).
	 */
	NDET_KERNEL_ERR_LAUNCH = 6,
} ndet_kernel_error_t;

/*
 * Flags region at the start of each rank's pool.  Peers write into it (remote
 * stores), its owner polls it (local loads).  One 64-bit word per (block, source).
 */
struct ndet_flags {
	uint64_t ready[NDET_KERNEL_MAX_BLOCKS][NDET_MAX_RANKS];
	uint64_t reduced[NDET_KERNEL_MAX_BLOCKS][NDET_MAX_RANKS];
	uint64_t done[NDET_KERNEL_MAX_BLOCKS][NDET_MAX_RANKS];
	uint64_t released[NDET_KERNEL_MAX_BLOCKS][NDET_MAX_RANKS];
	uint64_t abort_word;            /* nonzero: some rank failed; leave at once */
	uint64_t probe[NDET_MAX_RANKS]; /* setup write-and-verify probe, slot per writer */
	uint64_t pad[15];
	/*
	 * PreMulSum: this rank's scalar for block b's current step, widened to the
	 * accumulation type (float bits in the low half, or double bits).  Written by
	 * its owner before ready, read by peers after it, like the lane.
	 */
	uint64_t scalar[NDET_KERNEL_MAX_BLOCKS];
};

/*
 * Host-mapped status of one engine (cudaHostAlloc mapped): the kernels report
 * errors here and the host reads it without any CUDA call (a cudaMemcpy would
 * queue behind a spinning kernel).
 *
 * Publishing an error (the first failure only), so that a reader never sees the
 * error with stale or half-written details:
 *   1. claim: atomicCAS(&claim, 0, code); only the thread that gets 0 back goes on
 *      (the others write nothing here);
 *   2. write the details: block, peer, step, observed, phase, rank (plain stores);
 *   3. __threadfence_system(), then store error = code with release semantics
 *      (st.release.sys, or a volatile store after the fence): `error` is written
 *      last, by the claimer only.
 * Every failure a kernel records also sets the rank's own abort word in device
 * memory (ndet_fail), so a kernel that asks "did this engine fail?" at start reads
 * that word, not this host-mapped struct.  The host reads `error` with acquire; the
 * details are complete when error != 0 and claim == error (ndet_engine_error_details);
 * an error word without that claim yields the error without details.  `abort` is the
 * host's, read by the kernels.
 */
struct ndet_host_status {
	volatile uint32_t error; /* ndet_kernel_error_t; written last, by the claimer */
	volatile uint32_t abort; /* set by the host to make kernels leave */
	volatile uint32_t block; /* where the error was seen */
	volatile uint32_t peer;
	volatile uint64_t step;
	volatile uint64_t observed; /* the flag value last seen in the failed wait */
	volatile uint32_t phase;    /* 0 kernel start (LL: the host abort flag, read once a
				       line kept block 0 waiting), 1 done, 2 ready, 3
				       reduced: which wait; 4 a peer host's status word */
	volatile uint32_t rank;     /* the rank that recorded the error */
	volatile uint32_t claim;    /* the code of the first failure: who writes the details */
	uint32_t reserved;
	/*
	 * Multi-host stage kernels, as they start: (%globaltimer << 1) | nccl_follows
	 * (struct ndet_hosts_stall in protocol/ndet_hosts_plan.h reads it), after `where`,
	 * their ndet_hosts_args.where: which stage of which chunk started last.
	 */
	volatile uint64_t where;
	volatile uint64_t progress;
	/*
	 * 1 + this rank's local index (its index on its host, as ndet_fail writes into
	 * abort words), from setup on: what a failed join of a call across hosts copies, as
	 * one 8-byte word, into the abort words of this host's ranks (the host's
	 * ndet_engine_hosts_order; never read by a kernel).
	 */
	uint64_t poison_word;
};

/* Everything one rank's launch needs; passed by value. */
struct ndet_kernel_args {
	const void *sendbuff;
	void *recvbuff;
	uint64_t count;       /* reduce-scatter: recvcount (sendbuff holds nranks blocks) */
	uint64_t chunk_elems; /* elements per block per step */
	uint64_t steps;
	uint64_t lane_bytes;
	uint64_t timeout_ns; /* 0: never */
	int32_t dtype;       /* ndet_dtype_t */
	int32_t op;          /* ndet_op_t */
	int32_t path;        /* ndet_path_t */
	int32_t nranks;
	int32_t rank;
	uint32_t blocks;
	uint32_t signature; /* NDET_FLAG_SIGNATURE_BITS bits */
	uint32_t debug_delay_ns;
	int32_t root;         /* ncclReduce: the rank that writes recvbuff; -1 every rank */
	int32_t premul;       /* ndet_premul_t; op is NDET_OP_SUM when set */
	uint32_t ll_line;     /* NDET_PATH_LL: data bytes per line (the plan's ll_line) */
	uint64_t scalar_bits; /* NDET_PREMUL_HOST: the scalar's bits, one element of dtype */
	const void *scalar;   /* NDET_PREMUL_DEVICE: device address of one element */
	/*
	 * This rank's, NDET_STEP_COUNTER_WORDS per block: word b is block b's step,
	 * NDET_COUNTER_LL(b) its LL step, NDET_COUNTER_LAST_LL(b) the step of its
	 * last LL step (0: none yet) and NDET_COUNTER_OPEN(b) the step before its
	 * latest run of LL steps.
	 */
	uint64_t *step_counters;
	/*
	 * LL slots: from lanes[r], rank r's slot for (block b, source q, parity p) is at
	 * ll_offset + ((b * nranks + q) * 2 + p) * NDET_LL_SLOT_BYTES.
	 */
	uint64_t ll_offset;
	struct ndet_host_status *host_status;     /* device pointer of host-mapped memory */
	struct ndet_flags *flags[NDET_MAX_RANKS]; /* every rank's flags, as mapped here */
	char *lanes[NDET_MAX_RANKS];              /* every rank's lane 0, as mapped here */
	/*
	 * nccl-det-perf --trace (NULL otherwise): device memory of 2 x NDET_TRACE_WORDS,
	 * where thread 0 of block 0 and of the last block writes its timeline: word 0
	 * the number of events, then one per event, (code << 56) | %globaltimer's low
	 * 56 bits (ns).  Codes: NDET_TRACE_*.
	 */
	uint64_t *trace;
};

/*
 * One stage kernel of a call across hosts (doc/multihost-design.md, "The data path"):
 * stage 1, 3 or 5 of one chunk.  `k` is the launch as on one host: rank and nranks
 * are this rank's local index l and g, flags and lanes those of its host; sendbuff,
 * recvbuff and count the whole message (a reduce-scatter's whole send buffer).
 * Segment d of the chunk is its elements [d x H x p, (d + 1) x H x p), clipped to
 * chunk_len; this rank's partial and result regions hold segment l.
 */
struct ndet_hosts_args {
	struct ndet_kernel_args k;
	int32_t stage;         /* 1, 3 or 5 */
	int32_t nhosts;        /* H */
	int32_t host;          /* this rank's h */
	uint32_t partial_size; /* bytes of a partial element: the data type's or Acc's */
	uint64_t chunk_offset; /* the chunk's first element in the message */
	uint64_t chunk_len;    /* its elements */
	uint64_t block_elems;  /* p: a block's stride (protocol/ndet_hosts_plan.h) */
	uint64_t piece_elems;  /* stages 1 and 5: elements of a segment per block and step */
	char *partial;         /* the slot's partial region: segment l, partial type */
	char *received;        /* the H - 1 partial blocks received, in host order but h */
	uint64_t received_stride;
	char *result; /* the result region: segment l, data type */
	/*
	 * Stages 3 and 5: the peer hosts' status words that came with stage 2 or 4
	 * (H of them, by host; this rank's own unused): nonzero, a rank of that host
	 * failed, and so does this kernel (NDET_KERNEL_ERR_PEER, phase 4).  NULL: none.
	 */
	const uint64_t *peer_status;
	/* Stage 5: the message elements this rank writes; recvbuff[0] is out_begin. */
	uint64_t out_begin, out_end;
	uint32_t divisor;      /* avg: g x H */
	uint32_t nccl_follows; /* 1: a stage of NCCL's follows this kernel in the call */
	/*
	 * For the host's report of a stall (ndet_hosts_where): the stage, the chunk and
	 * the call's chunk count, NDET_HOSTS_WHERE_*.
	 */
	uint64_t where;
};

/*
 * What every launcher of the stage kernels checks of one rank's arguments: the index
 * of its kernel (stage 1, 3, 5: 0, 1, 2), or -1 where they are out of range.
 */
static inline int ndet_hosts_args_kernel(const struct ndet_hosts_args *a)
{
	const int index = a->stage == 1 ? 0 : a->stage == 3 ? 1 : a->stage == 5 ? 2 : -1;
	if (a->k.dtype < 0 || a->k.dtype >= NDET_DTYPE_COUNT || a->k.op < 0 ||
	    a->k.op >= NDET_OP_COUNT ||
	    (a->k.premul != NDET_PREMUL_NONE && a->k.op != NDET_OP_SUM) || a->k.nranks < 1 ||
	    a->k.nranks > NDET_MAX_RANKS || a->k.blocks < 1 || a->nhosts < 2 || a->host < 0 ||
	    a->host >= a->nhosts)
		return -1;
	return index;
}

/* ndet_hosts_args.where: stage << 60 | chunk << 30 | chunks, each count at most MAX. */
#define NDET_HOSTS_WHERE_MAX       ((1ull << 30) - 1)
#define NDET_HOSTS_WHERE_STAGE(w)  ((uint32_t)((w) >> 60))
#define NDET_HOSTS_WHERE_CHUNK(w)  (((w) >> 30) & NDET_HOSTS_WHERE_MAX)
#define NDET_HOSTS_WHERE_CHUNKS(w) ((w)&NDET_HOSTS_WHERE_MAX)

#define NDET_TRACE_WORDS 512
enum ndet_trace_code {
	NDET_TRACE_START = 1,  /* kernel start (the deadline's t0) */
	NDET_TRACE_OPENED,     /* the step may start: its released/done wait returned (pull,
				  push; LL: that wait, or the prologue's end) */
	NDET_TRACE_SCATTERED,  /* a step's segments (pull: copy-in; LL: lines) stored,
				  ready released */
	NDET_TRACE_READY,      /* every peer's segment of the step arrived (LL: thread
				  0's lines of every peer) */
	NDET_TRACE_REDUCED,    /* own segment reduced and stored, reduced released
				  (LL: every line reduced) */
	NDET_TRACE_PEERS_DONE, /* every peer's reduced segment of the step arrived */
	NDET_TRACE_GATHERED,   /* the peers' segments copied out to recvbuff (pull: the
				  block's reads of the step done, before done is released) */
	NDET_TRACE_STEP,       /* pull: a step begins (before its released wait) */
	NDET_TRACE_COPIED,     /* thread 0 stored its share of a segment / reduction */
	NDET_TRACE_SYNCED,     /* the block's threads all did (before the release; LL:
				  every thread has its lines, the block agreed) */
	NDET_TRACE_END,        /* the block's last event */
};

#ifdef __cplusplus
}
#endif

#endif /* NDET_ABI_H_ */
