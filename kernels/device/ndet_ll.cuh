/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The LL path (NDET_PATH_LL, doc/protocol.md): one step per call, data and tag
 * together in each 8-byte word of the peers' LL slots, no ready wait and no remote
 * read.
 */
#ifndef NDET_DEVICE_LL_CUH_
#define NDET_DEVICE_LL_CUH_

#include <stdint.h>

#include "kernels/ndet_abi.h"
#include "kernels/device/ndet_copy.cuh"
#include "kernels/device/ndet_dtype.cuh"
#include "kernels/device/ndet_flags.cuh"
#include "kernels/device/ndet_sync.cuh"
#include "kernels/device/ndet_tree.cuh"

/*
 * Measurement builds only (test/gpu/ll_ablate_build.sh): NDET_LL_ABLATE names parts of
 * the LL step to leave out, so that nccl-det-perf can time what each costs.  Such a
 * build is wrong by design (no abort, no reduction, ...); the library is never
 * built with it.
 */
#ifndef NDET_LL_ABLATE
#define NDET_LL_ABLATE 0
#endif
#define NDET_LL_ABLATE_READY    0x1  /* the ready flag stored before the gather */
#define NDET_LL_ABLATE_REDUCE   0x8  /* the tree and the stores into recvbuff */
#define NDET_LL_ABLATE_AGREE    0x10 /* the block's agreement on the gather's outcome */
#define NDET_LL_ABLATE_SENDBUFF 0x20 /* the loads of sendbuff (a constant is sent) */

/*
 * Measurement builds only, like NDET_LL_ABLATE, but right by design: how the gather
 * polls.  Each round of ndet_ll_gather loads every line still missing; where the
 * ranks share one GPU those loads share its memory system with the peers' stores.
 * NDET_LL_POLL_SLEEP: nanoseconds a thread sleeps after a round that brought no line.
 * NDET_LL_POLL_NARROW: after such a round, the next one loads only the first line
 * still missing (all of them again once one came).
 */
#ifndef NDET_LL_POLL_SLEEP
#define NDET_LL_POLL_SLEEP 0
#endif
#ifndef NDET_LL_POLL_NARROW
#define NDET_LL_POLL_NARROW 0
#endif
/*
 * Measurement builds only, right by design: NDET_LL_SCATTER_LANES=1 makes the kernels
 * of one line per thread spread each warp's (line, peer) stores over its lanes
 * (ndet_ll_scatter_lanes; test/gpu/ll_ablate_build.sh VARIANTS builds it), to be timed
 * against the library's step, in which thread i stores its line into every peer.
 */
#ifndef NDET_LL_SCATTER_LANES
#define NDET_LL_SCATTER_LANES 0
#endif
/*
 * NDET_LL_TOUCH_PEERS (measurement): at the start of a per-rank LL kernel (not the
 * all-ranks one), lane 0 of warp w names peer (rank + 1 + w) mod n's slot of this
 * block (and every 8th peer after it), 1 by an L2 prefetch, 2 by a load whose value is
 * never used, so that the address translations of the peers' pools overlap the
 * prologue instead of the step's stores.
 */
#ifndef NDET_LL_TOUCH_PEERS
#define NDET_LL_TOUCH_PEERS 0
#endif
/*
 * NDET_LL_STORE_LINE (measurement): the tree's results of a line gathered into one
 * line's data and stored at once where the line is whole and recvbuff aligned to its
 * words there (else element by element, as the library's step does).
 */
#ifndef NDET_LL_STORE_LINE
#define NDET_LL_STORE_LINE 0
#endif

namespace
{

/*
 * The first `bytes` of the N bytes at `src` into c[] (the rest 0), one predicated load
 * each, all issued before any is used: a partial or unaligned line waits for one load
 * latency, not one per byte.
 */
template <int N>
__device__ __forceinline__ void ndet_ll_bytes(const char *src, uint64_t bytes, uint32_t (&c)[N])
{
#pragma unroll
	for (int i = 0; i < N; i++) {
		c[i] = 0;
		asm volatile("{\n\t.reg .pred p;\n\tsetp.lt.u64 p, %1, %2;\n\t@p ld.global.u8 %0, "
			     "[%3];\n\t}"
			     : "+r"(c[i])
			     : "l"((uint64_t)i), "l"(bytes), "l"(src + i));
	}
}

/*
 * LL lines: 16 bytes stored and loaded at once, of which only each 8-byte half is
 * single-copy atomic, so each half carries a tag; volatile accesses are relaxed at
 * system scope and skip L1.  Two formats (ndet_abi.h, doc/protocol.md, LL), W the data
 * bytes of a line:
 *
 *   W = 8 (NDET_LL_LINE_DATA): {data 4, tag 4, data 4, tag 4}, the tag the call's
 *   24-bit signature and the LL step's 8 bits, the same in both halves;
 *
 *   W = 12 (NDET_LL_WIDE_LINE_DATA; elements of 1, 2 and 4 bytes, whole ones fill
 *   it): each half 6 data bytes around a 16-bit tag, the LL step's 8 bits and one
 *   byte of the signature: half h of line i byte (2i + h) mod 3, so that a line
 *   checks 16 of the signature's bits and any two lines of a thread or of
 *   neighbouring threads all 24.
 *
 * In both the step's 8 bits are bits 32-39 of each half: a slot's line holds either
 * format, both formats count the block's LL steps alike, so a line of either left
 * from step t - 2k never shows step t's bits there (NDET_LL_REFRESH_STEPS).
 *
 * ndet_ll_line<W>: a line's data, its tags (one 32-bit word: the 8-byte format's tag,
 * or the 12-byte format's two half tags), how to store it, whether a loaded line
 * holds the tags, its data, and a line's data from memory.
 */
template <int W> struct ndet_ll_line;

template <> struct ndet_ll_line<8> {
	typedef uint64_t data;

	static __device__ __forceinline__ data zero()
	{
		return 0;
	}
	/* What a line carries where measurement builds ablate the loads of sendbuff. */
	static __device__ __forceinline__ data filler()
	{
		return 0x3c003c003c003c00ull;
	}
	static __device__ __forceinline__ uint32_t tags(uint32_t signature, uint32_t step8,
							uint64_t line)
	{
		(void)line;
		return (signature << 8) | step8;
	}
	static __device__ __forceinline__ void store(char *p, data d, uint32_t tags)
	{
		asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p),
			     "r"((uint32_t)d), "r"(tags), "r"((uint32_t)(d >> 32)), "r"(tags)
			     : "memory");
	}
	static __device__ __forceinline__ void load(const char *p, uint32_t (&w)[4])
	{
		asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
			     : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
			     : "l"(p)
			     : "memory");
	}
	static __device__ __forceinline__ bool tagged(const uint32_t (&w)[4], uint32_t tags)
	{
		return w[1] == tags && w[3] == tags;
	}
	static __device__ __forceinline__ data data_of(const uint32_t (&w)[4])
	{
		return (uint64_t)w[0] | ((uint64_t)w[2] << 32);
	}
	/* The first `bytes` (at most 8) bytes at `src`, any alignment, zero-padded. */
	static __device__ __forceinline__ data payload(const char *src, uint64_t bytes)
	{
		if (bytes >= 8 && ((uintptr_t)src & 7) == 0)
			return *reinterpret_cast<const uint64_t *>(src);
		uint32_t c[8];
		ndet_ll_bytes<8>(src, bytes, c);
		uint64_t v = 0;
#pragma unroll
		for (int i = 0; i < 8; i++)
			v |= (uint64_t)c[i] << (8 * i);
		return v;
	}
};

template <> struct ndet_ll_line<12> {
	struct data {
		uint32_t w[3];
	};

	static __device__ __forceinline__ data zero()
	{
		return data{{0, 0, 0}};
	}
	static __device__ __forceinline__ data filler()
	{
		return data{{0x3c003c00u, 0x3c003c00u, 0x3c003c00u}};
	}
	/*
	 * Low 16 bits: the first half's tag; high 16: the second's.  A block's line
	 * index is far below 2^31, so 32-bit arithmetic gives the same bytes without a
	 * 64-bit remainder on the way to the step's first store.
	 */
	static __device__ __forceinline__ uint32_t tags(uint32_t signature, uint32_t step8,
							uint64_t line)
	{
		const uint32_t j = 2u * (uint32_t)line % 3u;
		const uint32_t first = (signature >> (8u * j)) & 0xffu;
		const uint32_t second = (signature >> (8u * (j == 2u ? 0u : j + 1u))) & 0xffu;
		return (first << 8) | (second << 24) | step8 * 0x10001u;
	}
	/*
	 * Each half: 4 data bytes, its tag, 2 data bytes (bytes 0-3, 4-5, then 6-9, 10-11),
	 * so that the step part lies where the 8-byte format has it.
	 */
	static __device__ __forceinline__ void store(char *p, const data &d, uint32_t tags)
	{
		const uint64_t lo = (uint64_t)d.w[0] | ((uint64_t)(tags & 0xffffu) << 32) |
				    ((uint64_t)(d.w[1] & 0xffffu) << 48);
		const uint64_t hi = (uint64_t)((d.w[1] >> 16) | (d.w[2] << 16)) |
				    ((uint64_t)(tags >> 16) << 32) |
				    ((uint64_t)(d.w[2] >> 16) << 48);
		asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(lo), "l"(hi)
			     : "memory");
	}
	static __device__ __forceinline__ void load(const char *p, uint32_t (&w)[4])
	{
		uint64_t lo, hi;
		asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];"
			     : "=l"(lo), "=l"(hi)
			     : "l"(p)
			     : "memory");
		w[0] = (uint32_t)lo;
		w[1] = (uint32_t)(lo >> 32);
		w[2] = (uint32_t)hi;
		w[3] = (uint32_t)(hi >> 32);
	}
	static __device__ __forceinline__ bool tagged(const uint32_t (&w)[4], uint32_t tags)
	{
		return (w[1] & 0xffffu) == (tags & 0xffffu) && (w[3] & 0xffffu) == (tags >> 16);
	}
	static __device__ __forceinline__ data data_of(const uint32_t (&w)[4])
	{
		return data{
			{w[0], (w[1] >> 16) | (w[2] << 16), (w[2] >> 16) | (w[3] & 0xffff0000u)}};
	}
	/* The first `bytes` (at most 12) bytes at `src`, any alignment, zero-padded. */
	static __device__ __forceinline__ data payload(const char *src, uint64_t bytes)
	{
		if (bytes >= 12 && ((uintptr_t)src & 3) == 0) {
			const uint32_t *s = reinterpret_cast<const uint32_t *>(src);
			return data{{s[0], s[1], s[2]}};
		}
		uint32_t c[12];
		ndet_ll_bytes<12>(src, bytes, c);
		data d = zero();
#pragma unroll
		for (int i = 0; i < 12; i++)
			d.w[i / 4] |= c[i] << (8 * (i % 4));
		return d;
	}
};

/* A line's data in format W. */
template <int W> using ndet_ll_data = typename ndet_ll_line<W>::data;

/* The LL step's part of the tags: t, t - 2 and 0 (never written) differ. */
__device__ __forceinline__ uint32_t ndet_ll_step8(uint64_t t)
{
	return (uint32_t)(t % 255u + 1u);
}

/*
 * This thread's lines of every peer (L lines of n - 1 peers, those inside the chunk)
 * from its own LL slots of parity `parity`, into lines[l][r] as loaded
 * (ndet_ll_line<W>::data_of gives their data): each round issues one load per line
 * still missing before it looks at any, so lines that are there cost one memory
 * latency in all, not one per line and peer.  A line is there when both halves hold
 * their tags (tags[l]).  A line stays as loaded, tags and all, and is never copied
 * out: each round loads into the entries still missing, so the thread holds each line
 * once (at 8 ranks and two wide lines per thread, a copy of the data beside the
 * round's loads would take 48 more registers and spill).
 *
 * Polls like ndet_wait (abort word, host abort, deadline), and also the ready flag of
 * each peer still missing: a peer that reached this step with another signature
 * (another call, or a path that waits for our ready instead) fails the call at once.
 * On failure *bad_peer is that peer (a timeout: the lowest peer still missing) and
 * *observed its ready.  The host abort flag is read only once a line keeps us
 * waiting: after 64 rounds, one lane of block 0's first warp (which holds the chunk's
 * first line, so it waits whenever a peer never came) reads it over PCIe, once per
 * kernel as pull and push do at their start, not once per waiting warp and block
 * (such reads are served one after the other: doc/kernels.md).  Where it is set, that
 * lane puts it into `abort_seen`, the block's shared word (written only then, so a run
 * without an abort has no shared store racing the other threads' reads), and every
 * waiting thread of the block fails, naming this rank; ndet_fail's abort words bring
 * the other blocks and ranks out.  Later aborts reach every waiting thread through its
 * own read every 1024 rounds.  An aborted call whose lines are all there completes
 * like its peers.
 */
template <int W, int NR, int L>
__device__ uint32_t ndet_ll_gather(const ndet_kernel_args &a, ndet_block_state &st, uint64_t parity,
				   uint64_t chunk_bytes,
				   const uint32_t (&tags)[NDET_LL_LINES_PER_THREAD], uint64_t step,
				   volatile uint32_t *abort_seen, uint32_t (&lines)[L][NR][4],
				   int *bad_peer, uint64_t *observed)
{
	typedef ndet_ll_line<W> Line;
	static_assert(L * NR <= 64, "one bit per line and peer");
	const int n = a.nranks, me = a.rank;
	const char *slots = a.lanes[me] + a.ll_offset;
	const uint64_t b = blockIdx.x;
	uint64_t pending = 0;
	uint32_t peers = 0; /* peers with a line still missing */
#pragma unroll
	for (int l = 0; l < L; l++) {
		if (((uint64_t)l * NDET_KERNEL_THREADS + threadIdx.x) * W >= chunk_bytes)
			break;
#pragma unroll
		for (int r = 0; r < NR; r++)
			if (r < n && r != me)
				pending |= 1ull << (l * NR + r);
	}
	uint64_t polled = ~0ull; /* of the lines missing, those this round loads */
	for (uint64_t spins = 1; pending != 0; spins++) {
#pragma unroll
		for (int l = 0; l < L; l++) {
#pragma unroll
			for (int r = 0; r < NR; r++) {
				if (((pending & polled) >> (l * NR + r)) & 1) {
					const uint64_t line =
						(uint64_t)l * NDET_KERNEL_THREADS + threadIdx.x;
					Line::load(slots +
							   ((b * n + r) * 2 + parity) *
								   NDET_LL_SLOT_BYTES +
							   line * 16,
						   lines[l][r]);
				}
			}
		}
		const uint64_t before = pending;
		peers = 0;
#pragma unroll
		for (int l = 0; l < L; l++) {
#pragma unroll
			for (int r = 0; r < NR; r++) {
				const uint64_t bit = 1ull << (l * NR + r);
				if (!(pending & bit))
					continue;
				if (!(polled & bit)) {
					peers |= 1u << r;
					continue;
				}
				if (Line::tagged(lines[l][r], tags[l])) {
					pending &= ~bit;
				} else {
					peers |= 1u << r;
				}
			}
		}
		if (pending != before && spins > 1)
			st.t0 = ndet_globaltimer(); /* progress: the deadline starts again */
		if (NDET_LL_POLL_NARROW)
			polled = pending == before ? pending & (~pending + 1) : ~0ull;
		if (NDET_LL_POLL_SLEEP > 0 && pending == before)
			__nanosleep(NDET_LL_POLL_SLEEP);
		if (pending == 0 || (spins & 63) != 0)
			continue;
		const int first = __ffs(peers) - 1;
		if (spins == 64 && b == 0 && threadIdx.x < 32) {
			const unsigned lane = threadIdx.x & 31u;
			if ((__activemask() & ((1u << lane) - 1u)) == 0) { /* the lowest waiting */
				const uint32_t host_abort = a.host_status->abort;
				if (host_abort != 0)
					*abort_seen = host_abort;
			}
		}
		if (*abort_seen != 0) {
			*bad_peer = me;
			return NDET_KERNEL_ERR_ABORTED;
		}
		if (ndet_load_relaxed(&st.me->abort_word) != 0) {
			*bad_peer = first;
			return NDET_KERNEL_ERR_PEER;
		}
#pragma unroll
		for (int r = 0; r < NR; r++) {
			if (!((peers >> r) & 1))
				continue;
			/* Also what a timeout reports: the step the peer last announced. */
			const uint64_t ready = ndet_load_relaxed(&st.me->ready[b][r]);
			if (r == first)
				*observed = ready;
			if (((ready >> NDET_FLAG_SIGNATURE_BITS) & kStepMask) ==
				    (step & kStepMask) &&
			    (uint32_t)(ready & NDET_FLAG_SIGNATURE_MASK) != a.signature) {
				*bad_peer = r;
				*observed = ready;
				return NDET_KERNEL_ERR_SIGNATURE;
			}
		}
		if ((spins & 1023) == 0) {
			*bad_peer = first;
			if (a.host_status->abort != 0)
				return NDET_KERNEL_ERR_ABORTED;
			if (a.timeout_ns != 0 && ndet_globaltimer() - st.t0 > a.timeout_ns)
				return NDET_KERNEL_ERR_TIMEOUT;
		}
	}
	return NDET_KERNEL_OK;
}

/*
 * The LL step's reduction: this thread's lines of every rank (its own in `mine`, the
 * peers' as ndet_ll_gather loaded them into `lines`), element by element in tree
 * order, into recvbuff.  AVG: args.op is avg (the root divided by n before its
 * rounding).
 */
template <int DT, int K, int NR, bool AVG, int L, int W>
__device__ __forceinline__ void
ndet_ll_reduce(const ndet_kernel_args &a, const ndet_ll_data<W> (&mine)[L],
	       const uint32_t (&lines)[L][NR][4], uint64_t start, uint64_t chunk_bytes)
{
	typedef ndet_dtype<DT> D;
	typedef typename D::T T;
	typedef typename D::Acc Acc;
	constexpr int E8 = W / sizeof(T); /* elements per line */
	static_assert(W % sizeof(T) == 0, "whole elements per line");
	const int n = a.nranks, me = a.rank;
#pragma unroll
	for (int l = 0; l < L; l++) {
		const uint64_t line = (uint64_t)l * NDET_KERNEL_THREADS + threadIdx.x;
		const uint64_t off = line * W;
		if (off >= chunk_bytes)
			break;
		const uint64_t valid = min((uint64_t)E8, (chunk_bytes - off) / sizeof(T));
#if NDET_LL_STORE_LINE
		union {
			ndet_ll_data<W> u;
			T x[E8];
		} out;
		out.u = ndet_ll_line<W>::zero();
#endif
#pragma unroll
		for (int e = 0; e < E8; e++) {
			if ((uint64_t)e >= valid)
				break;
			Acc v[NDET_MAX_RANKS];
#pragma unroll
			for (int r = 0; r < NR; r++) {
				if (r < n) {
					union {
						ndet_ll_data<W> u;
						T x[E8];
					} in;
					in.u = r == me ? mine[l]
						       : ndet_ll_line<W>::data_of(lines[l][r]);
					v[r] = D::widen(in.x[e]);
				}
			}
			Acc acc = ndet_tree<K, Acc, NR>(a, v, n);
			if (AVG)
				acc = ndet_avg_of(acc, (uint32_t)n);
#if NDET_LL_STORE_LINE
			out.x[e] = D::narrow(acc);
#else
			ndet_store_elem<T>(static_cast<char *>(a.recvbuff) +
						   (start + line * E8 + e) * sizeof(T),
					   D::narrow(acc));
#endif
		}
#if NDET_LL_STORE_LINE
		char *dst = static_cast<char *>(a.recvbuff) + (start + line * E8) * sizeof(T);
		if (valid == (uint64_t)E8 &&
		    ((uintptr_t)dst & (alignof(ndet_ll_data<W>) - 1)) == 0) {
			*reinterpret_cast<ndet_ll_data<W> *>(dst) = out.u;
		} else {
#pragma unroll
			for (int e = 0; e < E8; e++)
				if ((uint64_t)e < valid)
					ndet_store_elem<T>(dst + e * sizeof(T), out.x[e]);
		}
#endif
	}
}

/*
 * Which ops an LL kernel serves: sum only, avg only (each with no code of the other:
 * the unrolled loop of a sum kernel carries no division, and fp8's conversions are
 * scheduled best without the second loop beside them), or args.op's at run time (the
 * generic and the all-ranks kernels).
 */
constexpr int kLLOpRuntime = 0;
constexpr int kLLOpSum = 1;
constexpr int kLLOpAvg = 2;

/*
 * The largest chunk (elements of DT) of a block of one line per thread, in lines of W
 * data bytes: LL calls whose blocks hold at most half a full block (NDET_LL_BLOCK_BYTES,
 * NDET_LL_WIDE_BLOCK_BYTES) run the kernels of L = 1 (fewer registers: 86-90 at 8
 * ranks against 126-128).  ndet_kernel_select reads it from the kernel table (ll1_max_elems,
 * llw1_max_elems), the all-ranks kernel through ndet_ll_one_line.
 */
template <int DT, int W = NDET_LL_LINE_DATA>
__host__ __device__ constexpr uint64_t ndet_ll_one_line_elems()
{
	return (W == NDET_LL_WIDE_LINE_DATA ? NDET_LL_WIDE_BLOCK_BYTES : NDET_LL_BLOCK_BYTES) / 2 /
	       sizeof(typename ndet_dtype<DT>::T);
}

template <int DT, int W = NDET_LL_LINE_DATA>
__device__ __forceinline__ bool ndet_ll_one_line(const ndet_kernel_args &a)
{
	return a.chunk_elems <= ndet_ll_one_line_elems<DT, W>();
}

/*
 * This thread's lines of block b's chunk of sendbuff (past the chunk: zeros).  The LL
 * kernel loads them before its prologue, so that their latency and the prologue's
 * overlap: the first thing an LL step does after it is store them.
 */
template <int DT> __device__ __forceinline__ uint64_t ndet_ll_chunk_bytes(const ndet_kernel_args &a)
{
	const uint64_t start = (uint64_t)blockIdx.x * a.chunk_elems; /* one step: k = 0 */
	const uint64_t len = start < a.count ? min(a.chunk_elems, a.count - start) : 0;
	return len * sizeof(typename ndet_dtype<DT>::T);
}

template <int DT, int L, int W>
__device__ __forceinline__ void ndet_ll_load_mine(const ndet_kernel_args &a,
						  ndet_ll_data<W> (&mine)[L])
{
	typedef typename ndet_dtype<DT>::T T;
	typedef ndet_ll_line<W> Line;
	const uint64_t chunk_bytes = ndet_ll_chunk_bytes<DT>(a);
	const char *send = static_cast<const char *>(a.sendbuff) +
			   (uint64_t)blockIdx.x * a.chunk_elems * sizeof(T);
#pragma unroll
	for (int l = 0; l < L; l++) {
		const uint64_t off =
			((uint64_t)l * NDET_KERNEL_THREADS + threadIdx.x) * (uint64_t)W;
		if (NDET_LL_ABLATE & NDET_LL_ABLATE_SENDBUFF) {
			mine[l] = off < chunk_bytes ? Line::filler() : Line::zero();
			continue;
		}
		mine[l] = off < chunk_bytes ? Line::payload(send + off, chunk_bytes - off)
					    : Line::zero();
	}
}

__device__ __forceinline__ void ndet_ll_touch_peers(const ndet_kernel_args &a)
{
	if (!NDET_LL_TOUCH_PEERS || (threadIdx.x & 31u) != 0)
		return;
	const int n = a.nranks, me = a.rank;
	for (int j = 1 + (int)(threadIdx.x >> 5); j < n; j += NDET_KERNEL_THREADS / 32) {
		const int q = (me + j) % n;
		const char *slot = a.lanes[q] + a.ll_offset +
				   ((uint64_t)blockIdx.x * n + me) * 2 * NDET_LL_SLOT_BYTES;
		if (NDET_LL_TOUCH_PEERS == 1)
			asm volatile("prefetch.global.L2 [%0];" ::"l"(slot) : "memory");
		else
			asm volatile("{ .reg .u32 t; ld.volatile.global.u32 t, [%0]; }" ::"l"(slot)
				     : "memory");
	}
}

/* A line's data from lane `src` of the warp. */
__device__ __forceinline__ uint64_t ndet_ll_shfl(uint64_t d, int src)
{
	return __shfl_sync(0xffffffffu, d, src);
}

__device__ __forceinline__ ndet_ll_line<12>::data ndet_ll_shfl(const ndet_ll_line<12>::data &d,
							       int src)
{
	return ndet_ll_line<12>::data{{__shfl_sync(0xffffffffu, d.w[0], src),
				       __shfl_sync(0xffffffffu, d.w[1], src),
				       __shfl_sync(0xffffffffu, d.w[2], src)}};
}

/*
 * NDET_LL_SCATTER_LANES (a measurement build): the stores of a block of one line per
 * thread (L = 1) at a step that is no refresh step, each warp's (line, peer) pairs
 * spread over its lanes, so that one store instruction reaches up to 32 of them, and
 * every peer in the first.  In the library's step thread i stores its line into each
 * peer in turn, n - 1 instructions, each into another peer's pool; in one launch's
 * timelines those stores take 1.1-1.2 us at 8 ranks up to 512 B against 0.41-0.55 at
 * 2, with this spread as without it (doc/performance.md).  The same lines, values and
 * tags: only which lane stores which line changes, which nothing a peer reads depends
 * on.
 */
template <int W>
__device__ __forceinline__ void
ndet_ll_scatter_lanes(const ndet_kernel_args &a, uint64_t b, uint64_t parity, uint64_t chunk_bytes,
		      const typename ndet_ll_line<W>::data &mine, uint32_t step8)
{
	const int n = a.nranks, me = a.rank;
	const unsigned peers = (unsigned)n - 1u, lane = threadIdx.x & 31u;
	const uint64_t first = threadIdx.x & ~31u; /* the warp's first line */
	if (first * W >= chunk_bytes)
		return; /* the whole warp is past the chunk */
	const unsigned lines = (unsigned)min((uint64_t)32, (chunk_bytes - first * W + W - 1) / W);
	const unsigned pairs = lines * peers;
	for (unsigned p0 = 0; p0 < pairs; p0 += 32) {
		const unsigned p = p0 + lane, line = p / peers;
		const typename ndet_ll_line<W>::data value = ndet_ll_shfl(mine, (int)(line & 31u));
		if (p < pairs) {
			int q = me + 1 + (int)(p % peers);
			q = q >= n ? q - n : q;
			char *slot = a.lanes[q] + a.ll_offset +
				     ((b * n + me) * 2 + parity) * NDET_LL_SLOT_BYTES;
			ndet_ll_line<W>::store(
				slot + (first + line) * 16, value,
				ndet_ll_line<W>::tags(a.signature, step8, first + line));
		}
	}
}

/*
 * This thread's lines of one peer's slot: those that hold data, or at a refresh step
 * every line the thread owns (a kernel of fewer lines refreshes the slot's other lines
 * too, with zeros).
 */
template <int W, int L>
__device__ __forceinline__ void ndet_ll_store_slot(char *slot,
						   const typename ndet_ll_line<W>::data (&mine)[L],
						   uint64_t chunk_bytes, bool refresh,
						   const uint32_t (&tags)[NDET_LL_LINES_PER_THREAD])
{
	typedef ndet_ll_line<W> Line;
#pragma unroll
	for (int l = 0; l < NDET_LL_LINES_PER_THREAD; l++) {
		const uint64_t line = (uint64_t)l * NDET_KERNEL_THREADS + threadIdx.x;
		if (refresh || (l < L && line * W < chunk_bytes))
			Line::store(slot + line * 16, l < L ? mine[l % L] : Line::zero(), tags[l]);
	}
}

/*
 * One LL step of block b (doc/protocol.md): step `step` of the block's flags, LL step
 * `t` of its slots.  Thread i carries lines i, i + threads, ... of the block's chunk.
 * after_ll: the block's previous step was LL step t - 1.
 */
template <int DT, int K, int NR, int LLOP, int L, int W>
__device__ void ndet_ll_block(const ndet_kernel_args &a, ndet_block_state &st, uint64_t step,
			      uint64_t t, volatile uint32_t *abort_seen, bool after_ll,
			      const ndet_ll_data<W> (&mine)[L])
{
	typedef typename ndet_dtype<DT>::T T;
	typedef ndet_ll_line<W> Line;
	static_assert(W == NDET_LL_LINE_DATA || (W == NDET_LL_WIDE_LINE_DATA && W % sizeof(T) == 0),
		      "wide lines of whole elements");
	static_assert(L >= 1 && L <= NDET_LL_LINES_PER_THREAD, "lines per thread");
	const uint32_t b = blockIdx.x;
	const int n = a.nranks, me = a.rank;
	/*
	 * The tags of this thread's lines: the call's signature (24 bits, never 0; in
	 * lines of 12 bytes 16 of them per line, all 24 over two lines) and the LL step.
	 * A peer in another call does not match (it fails through its ready flag instead
	 * of lending us its lines), and t, t - 2 and 0 (never written) differ.
	 */
	const uint32_t step8 = ndet_ll_step8(t);
	uint32_t tags[NDET_LL_LINES_PER_THREAD];
#pragma unroll
	for (int l = 0; l < NDET_LL_LINES_PER_THREAD; l++)
		tags[l] = Line::tags(a.signature, step8,
				     (uint64_t)l * NDET_KERNEL_THREADS + threadIdx.x);
	const uint64_t parity = t & 1;
	const uint64_t start = (uint64_t)b * a.chunk_elems; /* one step: k = 0 */
	const uint64_t chunk_bytes = ndet_ll_chunk_bytes<DT>(a);
	const bool writes = a.root < 0 || a.root == me;

	/*
	 * 1. Peers are through with my slots and flags of the previous step: only then
	 * may ready be overwritten (a peer on the pull path may still wait for the
	 * previous value).  After an LL step there is nothing to wait for: no peer waits
	 * for an LL step's ready, and every peer stored its lines of step t - 1 (line 0
	 * at least, which thread 0 read) in a kernel that started after its kernel of
	 * step t - 2, the last to read the parity we write now, had finished; our own
	 * kernel boundary orders that read before every thread's stores below
	 * (doc/protocol.md, LL).
	 */
	if (!after_ll) {
		if (ndet_wait_all(a, st, st.me->released, step - 1, false, 1) != 0)
			return;
		/* The deadline of the LL waits starts now, for the threads that did not wait. */
		st.t0 = ndet_globaltimer();
	}
	ndet_trace(a, st, NDET_TRACE_OPENED);

	/*
	 * 2. The lines that hold data, to every peer; at a refresh step every line of the
	 * slot (past the chunk: zeros), so that no line keeps a tag old enough to match
	 * again (NDET_LL_REFRESH_STEPS).  Peers read only the lines that hold data.
	 */
	ndet_debug_delay(a, step, 2);
	const bool refresh = t % NDET_LL_REFRESH_STEPS < 2;
	if (L == 1 && !refresh && NDET_LL_SCATTER_LANES)
		ndet_ll_scatter_lanes<W>(a, b, parity, chunk_bytes, mine[0], step8);
	else {
		/*
		 * Peer j of the bucket is rank me + j, wrapped by a comparison: every pool
		 * address is loaded before the first store, and no remainder (a division's
		 * worth of instructions per peer) stands between two stores.  Past n: an
		 * entry of the table never stored into.
		 */
		const uint64_t mine_slot =
			a.ll_offset + (((uint64_t)b * n + me) * 2 + parity) * NDET_LL_SLOT_BYTES;
		char *pool[NR];
#pragma unroll
		for (int j = 1; j < NR; j++)
			pool[j] = a.lanes[me + j < n ? me + j : me + j - n];
#pragma unroll
		for (int j = 1; j < NR; j++) {
			if (j >= n)
				break;
			ndet_ll_store_slot<W, L>(pool[j] + mine_slot, mine, chunk_bytes, refresh,
						 tags);
		}
	}
	/*
	 * The signature, for peers that poll it (ndet_ll_gather) or wait for it (another
	 * path): a relaxed store, no release.  Nothing is read because of it: a peer in
	 * this LL step takes the lines by their tags, and any other peer finds another
	 * signature (the path is part of it) and fails.  A release here would hold the
	 * block until every line above reached the peer (a system-scope round trip, a
	 * large part of a small call: doc/kernels.md).
	 */
	if (!(NDET_LL_ABLATE & NDET_LL_ABLATE_READY))
		ndet_signal_all(a, offsetof(ndet_flags, ready), ndet_flag_pack(step, a.signature),
				false);
	ndet_trace(a, st, NDET_TRACE_SCATTERED);

	/* 3. Every peer's lines; the block agrees on the outcome. */
	ndet_debug_delay(a, step, 3);
	uint32_t lines[L][NR][4];
	int bad_peer = 0;
	uint64_t observed = 0;
	const uint32_t code = ndet_ll_gather<W, NR, L>(a, st, parity, chunk_bytes, tags, step,
						       abort_seen, lines, &bad_peer, &observed);
	ndet_trace(a, st, NDET_TRACE_READY); /* thread 0's lines of every peer */
	if (code != NDET_KERNEL_OK)
		ndet_fail(a, code, (uint32_t)bad_peer, step, observed,
			  code == NDET_KERNEL_ERR_ABORTED && *abort_seen != 0 ? 0 : 2);
	if (NDET_LL_ABLATE & NDET_LL_ABLATE_AGREE) {
		if (code != NDET_KERNEL_OK)
			return;
	} else if (__syncthreads_or(code != NDET_KERNEL_OK)) {
		return;
	}
	ndet_trace(a, st, NDET_TRACE_SYNCED); /* every thread's lines */

	/*
	 * No released or done: no peer writes what an LL step reads (its own slots) on
	 * the strength of them, and a next step on another path waits for those of the
	 * step before the block's LL steps instead (NDET_COUNTER_OPEN, which the prologue
	 * keeps), which a peer cannot pass before that step's ready (doc/protocol.md,
	 * LL).
	 *
	 * 4. The tree, element by element; at run time avg's division as a branch around
	 * the whole loop.
	 */
	if (writes && !(NDET_LL_ABLATE & NDET_LL_ABLATE_REDUCE)) {
		if (LLOP == kLLOpAvg || (LLOP == kLLOpRuntime && a.op == NDET_OP_AVG))
			ndet_ll_reduce<DT, K, NR, true, L, W>(a, mine, lines, start, chunk_bytes);
		else
			ndet_ll_reduce<DT, K, NR, false, L, W>(a, mine, lines, start, chunk_bytes);
	}
	ndet_trace(a, st, NDET_TRACE_REDUCED);
	if (threadIdx.x == 0) {
		a.step_counters[b] = step;
		a.step_counters[NDET_COUNTER_LL(b)] = t;
		a.step_counters[NDET_COUNTER_LAST_LL(b)] = step;
	}
	ndet_trace(a, st, NDET_TRACE_END);
}

} /* namespace */

#endif /* NDET_DEVICE_LL_CUH_ */
