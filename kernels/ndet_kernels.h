/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * C interface to the CUDA kernels: the argument block one all-reduce launch takes,
 * the layout of the pool every rank exports, and extern "C" launchers that check
 * cudaGetLastError() after the launch and return the CUDA error code as an int
 * (0 = cudaSuccess), so C callers need no CUDA C++ headers.
 *
 * PROTOCOL (per block b, per step s; one step moves one chunk through lane b).
 * Two flags end a step: released[b][q] = s says rank q no longer reads or writes my
 * lane b or LL slots for step s (it may still store flags into mine); done[b][q] = s
 * says nothing of step s is left in q's pool either.  Steps that write only their
 * own lane before their ready (pull, LL: own slots are written by peers only after
 * released) wait for released; push, which writes into the peers' lanes before any
 * ready of theirs, waits for done.  (Two-shot's stores into the peers' lanes come
 * after the peers' ready of the same step.)
 *   1. wait  released[b][q] == s-1 for every peer q (q is through with my lane b)
 *   2. copy my chunk of sendbuff into my lane b
 *   3. release-store ready[b][me] = PACK(s, signature) into every peer q's flags
 *   4. acquire-wait  ready[b][q] in my flags == PACK(s, ...) for every peer q and
 *      check q's signature equals mine (diverging calls -> error, not garbage)
 *   5a one-shot: read lane b of every rank, reduce in tree order, write recvbuff;
 *      6. release released[b][me] = done[b][me] = s to every peer
 *   5b two-shot (at 2, where sendbuff is 16-byte aligned, my own segment is not
 *      copied in: only I read it, straight from sendbuff at 5b; a local choice,
 *      the same bits): reduce my segment from every lane into recvbuff and into the same
 *      segment of every peer's lane (each pack read, then overwritten, by one
 *      thread; nobody else reads that segment), release released[b][me] = s and
 *      reduced[b][me] = s to every peer; acquire every peer's reduced[b][q]; copy
 *      their segments from my own lane into recvbuff (local reads);
 *      6. release done[b][me] = s.  So a peer's next step waits only for my
 *      reduction, not for my gather: ranks a step apart overlap.
 *   5c reduce-scatter: the lane holds n segments of chunk_elems each, segment d the
 *      chunk of block d of sendbuff; rank r reduces segment r of every lane into
 *      recvbuff (no second exchange).  Reduce (root >= 0): as 5a/5b, but only the
 *      root writes recvbuff.
 *   PreMulSum: at 2 each rank also stores its scalar, widened to the accumulation
 *   type, into scalar[b] of its own flags; at 5 the reducer multiplies rank q's
 *   elements by q's scalar (read after the acquire of ready[b][q]).
 * LL (NDET_PATH_LL, small all-reduces and reduces): no lane, no ready wait, no
 * remote read.  Each thread stores NDET_LL_LINES_PER_THREAD 16-byte lines
 * {data0, tag, data1, tag} straight from sendbuff into every peer's LL slot
 * [b][me][t % 2] (t: the block's LL step, a counter of its own), and polls the
 * same lines of every peer in its own slots until both tags equal its tag; then
 * it reduces in tree order.  The tag is (signature << 8 | t % 255 + 1): a peer in
 * another call never matches, and fails through ready instead (below).  Every line
 * of the slot is written at every LL step, so a line holds the tag of step t, of
 * t - 2 or (never written) 0, never an older one that could match.  What keeps a
 * slot from being overwritten while it is read is step 1: a rank stores step s
 * only after every peer stored released = s - 1, which a peer does after reading all
 * its lines of step s - 1 (the parity is a second guard, not the first).  Every
 * planned LL block has elements (blocks = ceil(bytes / NDET_LL_BLOCK_BYTES)), so
 * every peer waits for its lines.  The LL step also stores ready (relaxed: it
 * orders nothing; it carries the signature, so a peer on another path or call fails
 * instead of waiting) and, at its end, released and done (release), so a later
 * step's wait finds them.
 * PUSH (NDET_PATH_PUSH, large all-reduces of 2-8 ranks): stores instead of loads
 * cross NVLink, and no stage of a block is HBM-only while its peers wait.  The lane
 * of block b is split in two by step parity; each half holds n in-slots then n
 * out-slots of chunk_elems / n elements.  Per step s (parity p), rank me:
 *   scatter: segment q of its chunk from sendbuff into rank q's in-slot [p][me]
 *      (its own last, locally, and not at all where sendbuff is 16-byte aligned:
 *      only this rank reads that in-slot, so the reduce takes its own segment
 *      straight from sendbuff), then release ready = PACK(s, signature);
 *   wait ready[q] >= s (same signature) for every peer q;
 *   reduce its segment from its own in-slots [p][0..n-1] (in-slot [p][me] or, as
 *      above, sendbuff) in tree order into recvbuff
 *      and into every peer q's out-slot [p][me]; release reduced = s;
 *   scatter step s + 1 (parity 1 - p: free, every peer signalled reduced for s - 1);
 *   wait reduced[q] >= s; copy its out-slots [p][q] into recvbuff.
 * Why the slots are free when written: a peer's in-slots of parity p were last read
 * by its reduce of s - 2, which it finished before reduced(s - 2), waited for before
 * scatter(s); its out-slots of parity p were last read by its gather of s - 2, which
 * it finished before it sent ready(s), waited for before the reduce of s.  Peers can
 * be one step ahead in ready and reduced, hence ">=" (ndet_wait's at_least).  A call
 * starts with a wait for done == its first step - 1 from every peer (no access of an
 * earlier call, pull, LL or push, is left) and ends with released = done = its last
 * step.
 * Flags hold exact step values (compared for equality modulo 2^40, or "at least"
 * within 2^20 steps), so a peer can be at most one step apart and counter
 * wrap-around is harmless.  Step counters live in device memory (one per block, this
 * rank only) so CUDA-graph replays continue the sequence.  Only same-index blocks of
 * different ranks ever wait on each other.
 */
#ifndef NDET_KERNELS_H_
#define NDET_KERNELS_H_

#include <stddef.h>
#include <stdint.h>

#include "ndet_types.h"

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
	NDET_PATH_LL,      /* one step, data and flag in each 8-byte word (see above) */
	NDET_PATH_PUSH,    /* two-shot by remote stores into the peers' pools (see above) */
} ndet_path_t;

/* LL geometry: lines per thread, payload bytes per block, bytes of one slot. */
#define NDET_LL_LINES_PER_THREAD 2
#define NDET_LL_BLOCK_BYTES (NDET_KERNEL_THREADS * NDET_LL_LINES_PER_THREAD * 8)
#define NDET_LL_SLOT_BYTES (NDET_KERNEL_THREADS * NDET_LL_LINES_PER_THREAD * 16)
/* Upper bound of NCCL_DET_LL_MAX, and the most LL blocks a pool has slots for. */
#define NDET_LL_MAX_BYTES (256u * 1024u)
#define NDET_LL_MAX_BLOCKS (NDET_LL_MAX_BYTES / NDET_LL_BLOCK_BYTES)

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

/* struct ndet_host_status, the engine's host-mapped status: ndet_types.h. */

/* Everything one rank's launch needs; passed by value. */
struct ndet_kernel_args {
	const void *sendbuff;
	void *recvbuff;
	uint64_t count;       /* reduce-scatter: recvcount (sendbuff holds nranks blocks) */
	uint64_t chunk_elems; /* elements per block per step */
	uint64_t steps;
	uint64_t lane_bytes;
	uint64_t timeout_ns;  /* 0: never */
	int32_t dtype;        /* ndet_dtype_t */
	int32_t op;           /* ndet_op_t */
	int32_t path;         /* ndet_path_t */
	int32_t nranks;
	int32_t rank;
	uint32_t blocks;
	uint32_t signature;   /* NDET_FLAG_SIGNATURE_BITS bits */
	uint32_t debug_delay_ns;
	int32_t root;         /* ncclReduce: the rank that writes recvbuff; -1 every rank */
	int32_t premul;       /* ndet_premul_t; op is NDET_OP_SUM when set */
	uint64_t scalar_bits; /* NDET_PREMUL_HOST: the scalar's bits, one element of dtype */
	const void *scalar;   /* NDET_PREMUL_DEVICE: device address of one element */
	/*
	 * This rank's, one per block; the LL step counters follow at
	 * step_counters[NDET_KERNEL_MAX_BLOCKS + b].
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

#define NDET_TRACE_WORDS 512
enum ndet_trace_code {
	NDET_TRACE_START = 1,   /* kernel start (the deadline's t0) */
	NDET_TRACE_OPENED,      /* the opening released/done wait returned (pull, LL: each step) */
	NDET_TRACE_SCATTERED,   /* a step's segments (pull: copy-in; LL: lines) stored,
				   ready released */
	NDET_TRACE_READY,       /* every peer's segment of the step arrived */
	NDET_TRACE_REDUCED,     /* own segment reduced and stored, reduced released
				   (LL: every line reduced) */
	NDET_TRACE_PEERS_DONE,  /* every peer's reduced segment of the step arrived */
	NDET_TRACE_GATHERED,    /* the peers' segments copied out to recvbuff (pull: the
				   block's reads of the step done, before done is released) */
	NDET_TRACE_STEP,        /* pull: a step begins (before its released wait) */
	NDET_TRACE_COPIED,      /* thread 0 stored its share of a segment / reduction */
	NDET_TRACE_SYNCED,      /* the block's threads all did (before the release) */
	NDET_TRACE_END,         /* the block's last event */
};

/*
 * One rank's collective, on `stream` (a cudaStream_t): all-reduce, reduce (root) or
 * reduce-scatter (path), with a plain op or PreMulSum.
 */
int ndet_kernel_allreduce(const struct ndet_kernel_args *args, void *stream);

/*
 * Every rank in one launch (grid.y = nranks, 1 to 8: cudaErrorInvalidValue beyond),
 * for compute-sanitizer, which serialises separate launches.  `device_args` points
 * to nranks argument blocks in
 * device memory; `op` is the kernel-table index (NDET_KERNEL_OP_PREMULSUM for
 * PreMulSum).  Defined in kernels/libndet_all_ranks.la, which only the GPU test
 * driver links (ndet_kernels_all_ranks.cu; a build without it links
 * test/gpu/ndet_all_ranks_none.c, cudaErrorNotSupported); the engine takes it as an argument
 * (ndet_engine_collective_all_ranks), so the library carries none of it.
 */
typedef int (*ndet_all_ranks_launcher_fn)(const struct ndet_kernel_args *device_args, int dtype,
					  int op, int nranks, uint32_t blocks, void *stream);
int ndet_kernel_allreduce_all_ranks(const struct ndet_kernel_args *device_args, int dtype,
				    int op, int nranks, uint32_t blocks, void *stream);

/*
 * Load the all-ranks kernels of the dtypes in `dtype_mask` (bit per ndet_dtype_t) now
 * (with PTX alone, the driver's JIT compiles them here, once per machine:
 * ~/.nv/ComputeCache, about 20 s per dtype on an H200); a cudaError_t.
 */
int ndet_kernel_all_ranks_load(unsigned dtype_mask);

/*
 * Benchmark: `iters` flag round trips between two concurrently running launches
 * (initiator 1 on one rank, 0 on the other); *result_ns (device memory) gets the
 * elapsed time, 0 if the peer did not answer within 5 s.
 */
int ndet_kernel_flag_pingpong(uint64_t *mine, uint64_t *peer, int iters, int initiator,
			      uint64_t *result_ns, void *stream);

/*
 * Benchmark: copy `bytes` with `blocks` blocks of the all-reduce kernel's copy loop
 * (either side may be a peer GPU's memory: nccl-det-perf --link-probe).
 */
int ndet_kernel_copy(void *dst, const void *src, size_t bytes, unsigned blocks, void *stream);

/* Fill `count` 32-bit words at `dst` with `value` on `stream`. */
int ndet_kernel_fill_u32(unsigned *dst, size_t count, unsigned value, void *stream);

/*
 * Can the current device run this build's kernels?  cudaSuccess, or what the runtime
 * says of a kernel of the launchers' translation unit there (built with the same
 * targets as the collectives): cudaErrorNoKernelImageForDevice (or
 * cudaErrorInvalidDeviceFunction) where the build has no SASS for the device and no
 * PTX it can compile, e.g. a Volta or Turing GPU under the default sm_80+ targets.
 * Setup asks before it reports the rank ready, so such a GPU runs the communicator in
 * NCCL instead of failing its first call.  The error is cleared.
 */
int ndet_kernel_device_check(void);

/*
 * Can the current device run this build's fp8 kernels?  They are built for their own
 * targets (NVCC_FP8_GENCODE: sm_90 SASS and compute_90 PTX by default), so a GPU that
 * runs every other kernel may lack them.  cudaSuccess, or the runtime's error for the
 * first fp8 kernel that has no image for the device (cleared).  Setup asks, and
 * every rank's answer decides together whether fp8 calls are diverted.
 */
int ndet_kernel_fp8_check(void);

#ifdef __cplusplus
}
#endif

#endif /* NDET_KERNELS_H_ */
