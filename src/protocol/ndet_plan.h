/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The launch plan of one collective (all-reduce, reduce, reduce-scatter): path, grid,
 * chunking and the call signature.  A pure function of (collective, count, dtype,
 * op, nranks, agreed settings): nothing local
 * (pointer alignment, in-place-ness, stream, capture state, SM count) may enter it,
 * because every rank must compute the same plan or the ranks' blocks would wait for
 * partners that never come.  Alignment only chooses vector widths inside the kernel.
 *
 * Element mapping: step k, block b handles elements
 *     [ (k*blocks + b) * chunk_elems , + chunk_elems ) clipped to count
 * and every element is reduced with the same tree whatever the path, so one-shot,
 * two-shot and any chunking give the same bits.  Reduce-scatter (NDET_PATH_SCATTER)
 * maps the elements of one rank block (count = recvcount) that way, every block at
 * once: a lane holds nranks segments of chunk_elems, so chunk_elems is at most a
 * lane / nranks.  Its bits are the all-reduce's for the same element (same tree):
 * an all-reduce equals the concatenation of the reduce-scatter blocks.
 */
#ifndef NDET_PLAN_H_
#define NDET_PLAN_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/ndet_abi.h"
#include "common/ndet_status.h"
#include "kernels/ndet_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Smallest share of a message one block takes.  Small messages use few blocks (fewer
 * flags to exchange, the cost that dominates latency); large ones use every block.
 * One-shot (up to NCCL_DET_ONESHOT_MAX) takes a block per 8 KiB; two-shot and
 * reduce-scatter a block per 16 KiB, within the tiers below.
 */
#define NDET_PLAN_ONESHOT_BYTES_PER_BLOCK (8u * 1024u)
#define NDET_PLAN_TWOSHOT_BYTES_PER_BLOCK (16u * 1024u)

/*
 * LL blocks of NDET_PLAN_LL_SMALL_BYTES (a quarter of NDET_LL_BLOCK_BYTES: 128 of the
 * block's threads carry a line) for messages up to NDET_PLAN_LL_SMALL_MAX, where that
 * grid fits (ndet_plan_make, LL).  Against blocks of half NDET_LL_BLOCK_BYTES, with
 * ranks sharing one H100 in graphs, they take down to 0.94 of the time (4-8 KiB at 8
 * ranks, 8-16 KiB at 4) and about the same at 2 ranks (doc/performance.md); larger
 * grids of them (more than 16 KiB where the cap and the slots allow) are unmeasured.
 * -DNDET_PLAN_LL_SMALL_BYTES=N (builds that compare; a multiple of 16, at most half
 * NDET_LL_BLOCK_BYTES, which turns them off).
 */
#ifndef NDET_PLAN_LL_SMALL_BYTES
#define NDET_PLAN_LL_SMALL_BYTES (NDET_LL_BLOCK_BYTES / 4)
#endif
#define NDET_PLAN_LL_SMALL_MAX (16u * 1024u)

/*
 * Wide LL lines (ndet_abi.h: 12 data bytes in each 16-byte line instead of 8) where an
 * LL step moves the most bytes: sum and avg of 2-8 ranks, elements of 1, 2 or 4 bytes,
 * (nranks - 1) x bytes at least params.ll_wide_min (NCCL_DET_LL_WIDE_MIN, 0: never),
 * in blocks of NDET_LL_WIDE_BLOCK_BYTES / 2 (one line per thread) where that grid fits
 * the cap and the pool's LL slots, else of NDET_LL_WIDE_BLOCK_BYTES (two) where that
 * one does.  NDET_PLAN_LL_WIDE_MIN is the threshold measured best and the setting's
 * default (from 32 KiB at 8 ranks, 75 KiB at 4).  A step then stores and polls 4/3 (n - 1)
 * bytes per message byte instead of 2 (n - 1).  With ranks sharing one H100, in graphs, wide
 * lines took 0.83 of the time at 64 KiB and 0.96 at 32 KiB at 8 ranks, 0.99-1.01 at
 * 64 KiB at 2 and 4 ranks, and 1.04-1.17 up to 16 KiB (doc/performance.md).
 */
#define NDET_PLAN_LL_WIDE_MIN (7u * 32u * 1024u)

/*
 * NCCL_DET_ONESHOT_MAX=auto (the default; oneshot_max == NDET_PLAN_ONESHOT_AUTO): at
 * 2 ranks one-shot and two-shot read the same bytes and two-shot waits for one more
 * flag round trip, so one-shot up to NDET_PLAN_ONESHOT_AUTO_2R, where push takes over
 * (NCCL_DET_PUSH_MIN, 4 MiB; push is planned only above the one-shot size, so at 2
 * ranks a NCCL_DET_PUSH_MIN below 2 MiB acts as 2 MiB + 1); with more ranks one-shot
 * reads n / 2 times as much as two-shot, and NDET_PLAN_ONESHOT_AUTO_MANY.  A
 * reduce-scatter is never one-shot; it takes the one-shot share per block up to
 * NDET_PLAN_ONESHOT_AUTO_MANY bytes when auto.
 */
#define NDET_PLAN_ONESHOT_AUTO      UINT64_MAX
#define NDET_PLAN_ONESHOT_AUTO_2R   (2u * 1024u * 1024u)
#define NDET_PLAN_ONESHOT_AUTO_MANY (64u * 1024u)

/* The one-shot threshold oneshot_max stands for in a `coll` of nranks (auto resolved). */
uint64_t ndet_plan_oneshot_max(uint64_t oneshot_max, int nranks, ndet_coll_t coll);

/*
 * The grid in tiers: blocks at the quotas above, at most NDET_PLAN_SMALL_BLOCKS below
 * NDET_PLAN_MID_BYTES and NDET_PLAN_MID_BLOCKS from there; a message above the
 * one-shot size (two-shot or reduce-scatter) then grows one block per
 * NDET_PLAN_LARGE_BYTES_PER_BLOCK (from 65 MiB on), up to the cap.
 *
 * More blocks keep more remote loads in flight (a block's pull bandwidth is about
 * its bytes in flight over an NVLink round trip) but exchange more flags; the tiers
 * are the fastest of a sweep at 2 ranks (doc/performance.md).  From
 * NCCL_DET_PUSH_MIN (4 MiB) on, an all-reduce of 2-8 ranks pushes instead (below);
 * these tiers then serve reduce, reduce-scatter, PreMulSum, more than 8 ranks and
 * NCCL_DET_PUSH_MIN=0.
 */
#define NDET_PLAN_SMALL_BLOCKS          32u
#define NDET_PLAN_MID_BYTES             (8u * 1024u * 1024u)
#define NDET_PLAN_MID_BLOCKS            64u
#define NDET_PLAN_LARGE_BYTES_PER_BLOCK (1024u * 1024u)

/*
 * Push takes a block per NDET_PLAN_PUSH_BYTES_PER_BLOCK, at least
 * NDET_PLAN_PUSH_MIN_BLOCKS and at most the cap: the links fill only with many
 * blocks storing at once (doc/performance.md).
 */
#define NDET_PLAN_PUSH_BYTES_PER_BLOCK (512u * 1024u)
#define NDET_PLAN_PUSH_MIN_BLOCKS      64u
/*
 * ... and at least as many blocks as cover the message in this many steps of full
 * chunks.  With the default lanes (1 MiB: 256 KiB chunks at 2 ranks) the rules above
 * give more; with smaller lanes this one keeps the steps large, since a block's
 * step costs a flag round trip whatever its size.
 */
#define NDET_PLAN_PUSH_STEPS 8u
/*
 * Chunks are evened out over the steps in whole multiples of this many bytes (per
 * segment for push and two-shot; a multiple of NDET_SEGMENT_BYTES, static assertion in
 * ndet_plan.c, so that an evened chunk splits at its granules).
 * Evened steps keep the blocks busy to the end (full chunks leave some blocks a
 * last step while the others idle); granules smaller than 512 bytes make copies
 * that start off the 32-byte sectors, which costs more than it saves
 * (doc/performance.md).
 */
#ifndef NDET_PLAN_EVEN_BYTES
#define NDET_PLAN_EVEN_BYTES NDET_SEGMENT_BYTES
#endif

/*
 * Push up to this many ranks: only the kernels of the 2/4/8-rank buckets carry it
 * (build time); beyond 8 ranks nothing has measured it.
 */
#define NDET_PLAN_PUSH_MAX_RANKS 8

/*
 * Blocks of all ranks on one GPU that must be resident at once: a block spins until
 * its peers' same-index blocks run, so ranks sharing a GPU (tests, MPS) split this
 * between them.  Two blocks per SM for the kernels of up to 8 ranks (their launch
 * bounds), one for more ranks and for prod, min and max from 3 ranks, whose pull and
 * LL kernels are those of the 16-rank bucket there (their register use), on the
 * fewest SMs any rank's GPU has (the setup table's sm_count: a MIG slice counts its
 * own), and never more than a 96-SM GPU holds: 192 (96 where one per SM).
 */
#ifndef NDET_PLAN_GRID_CAPACITY /* -DNDET_PLAN_GRID_CAPACITY=N: builds that compare */
#define NDET_PLAN_GRID_CAPACITY 192u
#endif
#define NDET_PLAN_GRID_CAPACITY_WIDE 96u /* one block per SM: above 8 ranks; prod, min, max */
#if NDET_PLAN_GRID_CAPACITY < NDET_PLAN_GRID_CAPACITY_WIDE
#error "sum's cap must stay the largest: the pool has a lane per block of it"
#endif

/*
 * Ranks of several processes on one GPU (MPS; NCCL itself admits that only to tests
 * that give each process its own NCCL_HOSTID) share it with every other kernel of
 * those processes: a backward pass's GEMM of one rank may have to run before that
 * rank reaches the all-reduce its peers' blocks spin in.  Blocks spread over the SMs
 * one per SM first, so while the blocks of all those ranks together stay below this
 * fraction of the SMs, the rest of the SMs hold none of them and such a kernel always
 * finds room.  (With 4 x 48 blocks on 132 SMs every SM held one, and a PyTorch DDP
 * job waited for a GEMM that fitted nowhere.)  Where one process holds every rank of
 * the GPU (the loopback harness, nccl-det-perf) they keep the full share.  A process
 * is what the setup table says is one (ndet_setup_peer_kind: ranks on different
 * hosts, or without a known PID namespace, count as different processes).
 */
#define NDET_PLAN_SHARED_SMS_NUM 3u
#define NDET_PLAN_SHARED_SMS_DEN 4u

struct ndet_plan_params {
	uint64_t count; /* reduce-scatter: recvcount */
	ndet_dtype_t dtype;
	ndet_op_t op;
	int nranks;
	ndet_coll_t coll;     /* 0: all-reduce */
	int root;             /* NDET_COLL_REDUCE only */
	bool premul;          /* PreMulSum (op NDET_OP_SUM): never a plain copy, even on 1 rank */
	uint64_t oneshot_max; /* bytes or NDET_PLAN_ONESHOT_AUTO; agreed NCCL_DET_ONESHOT_MAX */
	uint64_t ll_max;      /* bytes; agreed setting NCCL_DET_LL_MAX (0: no LL) */
	uint64_t ll_wide_min; /* bytes x (nranks - 1); NCCL_DET_LL_WIDE_MIN (0: no wide lines) */
	uint64_t push_min;    /* bytes; agreed setting NCCL_DET_PUSH_MIN (0: no push) */
	int max_blocks;       /* agreed setting NCCL_DET_MAX_BLOCKS */
	int ranks_per_device; /* agreed (setup table): most ranks on one GPU; 0 = 1 */
	int device_sms;       /* agreed (setup table): fewest SMs of a rank's GPU; 0 = 96 */
	int processes_per_device; /* agreed (setup table): most processes on one GPU; 0 = 1 */
	uint64_t lane_bytes;      /* agreed: pool data bytes / grid cap, multiple of 256 */
};

struct ndet_plan {
	ndet_path_t path;
	uint32_t blocks;
	uint64_t chunk_elems;
	uint64_t steps;
	uint32_t signature; /* NDET_FLAG_SIGNATURE_BITS bits, never 0 */
	uint32_t ll_line;   /* NDET_PATH_LL: data bytes per line (ndet_abi.h); else 0 */
};

/*
 * A flag signature from `count` words: FNV-1a over their bytes, folded to
 * NDET_FLAG_SIGNATURE_BITS bits, never 0 (what a never-written flag holds).
 */
uint32_t ndet_plan_signature_of(const uint64_t *words, size_t count);

/* Short name of a path, as logs and nccl-det-perf print it ("2shot", "push", ...). */
const char *ndet_plan_path_name(ndet_path_t path);

/*
 * Push (NDET_PATH_PUSH): an all-reduce on 2 to NDET_PLAN_PUSH_MAX_RANKS ranks, not
 * PreMulSum, of at least push_min bytes (push_min 0: never) and above oneshot_max,
 * with lane_bytes a multiple of 32 (each parity half 16-byte aligned; the engine's
 * are multiples of 256); a block per NDET_PLAN_PUSH_BYTES_PER_BLOCK, or enough for
 * NDET_PLAN_PUSH_STEPS steps of full chunks if that is more, at least
 * NDET_PLAN_PUSH_MIN_BLOCKS, at most the cap, no tiers; its chunk is nranks segments
 * (ndet_segment_elems, ndet_kernels.h), each at most a slot (lane_bytes / (4 x nranks),
 * floored to whole NDET_SEGMENT_BYTES where it holds one, else to whole 16-byte packs).
 *
 * Every path but LL: the steps are those full chunks (a lane, or a slot per segment)
 * need, and the chunk is then the smallest multiple of NDET_PLAN_EVEN_BYTES (per
 * segment for push and two-shot) that covers the message in as many steps, if that
 * is smaller.
 *
 * LL (NDET_PATH_LL): an all-reduce or reduce of at most ll_max bytes on two or more
 * ranks, not PreMulSum, takes one step: NDET_PLAN_LL_SMALL_BYTES per block up to
 * NDET_PLAN_LL_SMALL_MAX bytes when that grid fits both the cap (ndet_plan_grid_cap)
 * and the pool's LL slots (ndet_plan_ll_blocks), else NDET_LL_BLOCK_BYTES / 2 per
 * block when that grid fits both, else NDET_LL_BLOCK_BYTES per block when that grid
 * fits the cap; ll_max above NDET_LL_MAX_BYTES counts as that (the pool has no more
 * slots).  Lines of NDET_LL_LINE_DATA bytes (ll_line), or wide ones where ll_wide_min
 * says so (NDET_PLAN_LL_WIDE_MIN above).
 *
 * Plan one call.  NDET_ERR_INVALID_ARGUMENT for an invalid dtype/op/collective,
 * PreMulSum with an op other than sum, a root outside [0, nranks), nranks outside
 * [1, NDET_MAX_RANKS], max_blocks outside [1, NDET_KERNEL_MAX_BLOCKS] or a lane too
 * small for one 16-byte pack (per rank, for reduce-scatter).
 */
ndet_status_t ndet_plan_make(const struct ndet_plan_params *params, struct ndet_plan *plan);

/*
 * The largest grid a call may get: NCCL_DET_MAX_BLOCKS, and no more than
 * min(NDET_PLAN_GRID_CAPACITY, 2 x device_sms) (above 8 ranks, and for prod, min and
 * max from 3 ranks, min(NDET_PLAN_GRID_CAPACITY_WIDE, device_sms)) / ranks_per_device;
 * where several
 * processes share a GPU, also no more than 3/4 of its SMs (96 when unknown) /
 * ranks_per_device.  At least 1.  The pool's lanes follow the cap of sum, the
 * largest.
 */
uint64_t ndet_plan_grid_cap(const struct ndet_plan_params *params);

/*
 * Can ranks_per_device ranks of an nranks communicator share a GPU of device_sms SMs
 * (0: unknown) with at least one resident block each (in the kernels of every op),
 * and, where processes_per_device
 * processes hold them, within NDET_PLAN_SHARED_SMS_NUM / _DEN of the SMs?  If not, the
 * setup falls back (every rank computes the same answer from the agreed table).
 */
bool ndet_plan_fits_device(int nranks, int device_sms, int ranks_per_device,
			   int processes_per_device);

/*
 * LL blocks a pool needs slots for with NCCL_DET_LL_MAX = ll_max (above
 * NDET_LL_MAX_BYTES it counts as that); every LL plan fits them.
 */
uint64_t ndet_plan_ll_blocks(uint64_t ll_max);

#ifdef __cplusplus
}
#endif

#endif /* NDET_PLAN_H_ */
