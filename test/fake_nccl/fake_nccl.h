/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * A fake NCCL for the CPU tests: test/fake_nccl/.libs/libnccl.so.2 (built by
 * `make check` only).
 *
 * Export shape (what the shim must cope with; checked by test_fake_exports.sh):
 * - SONAME libnccl.so.2; exports exactly `nccl*` and `pnccl*`, unversioned
 *   (libnccl.map: `global: nccl*; pnccl*; local: *;`), no DT_NEEDED on anything but libc.
 * - Every function of nccl.h 2.28 is a WEAK default-visibility `ncclX` plus a STRONG
 *   alias `pncclX` to the same code: NCCL's NCCL_API macro with PROFAPI=1.
 * - It calls its own public names through the PLT, as NCCL does: ncclBcast calls
 *   ncclBroadcast; every communicator takes a scratch buffer from ncclMemAlloc when
 *   it is created and gives it back through ncclMemFree in ncclCommDestroy/Abort.
 *   A preloaded interposer therefore sees those calls too and must forward them.
 *
 * Semantics: ranks are threads of one process and buffers are HOST memory (there is
 * no GPU).  Streams are ignored; every operation has completed when the call (or the
 * outermost ncclGroupEnd) returns.
 * - ncclGetUniqueId makes a fresh id; n calls of ncclCommInitRank(comm, n, id, rank)
 *   (from n threads, or from one thread inside ncclGroupStart/End) rendezvous on it.
 *   ncclCommInitRankConfig/Scalable and ncclCommInitAll work too; n = 1 just works.
 * - Collectives: AllReduce, Reduce, Broadcast, Bcast, AllGather, ReduceScatter,
 *   AlltoAll, Gather, Scatter, Send/Recv.  Reductions: sum, prod, min, max, avg and
 *   ncclRedOpCreatePreMulSum ops, for int8, uint8, int32, uint32, int64, uint64,
 *   float16, bfloat16, float32, float64 (fp8: ncclInvalidArgument).  Data is
 *   reduced in rank order 0, 1, ..., n-1.
 * - Groups are per thread and nest; everything issued inside a group runs at the
 *   outermost ncclGroupEnd of that thread, which posts every deferred operation to
 *   its communicator's rendezvous before waiting for any, so one thread can drive
 *   several ranks (nccl-tests -g, setup exchanges of several communicators).
 *   ncclGroupSimulateEnd runs deferred inits but drops deferred collectives.
 * - Non-blocking communicators (ncclConfig_t.blocking = 0, or NCCL_COMM_BLOCKING=0
 *   when the config leaves it undefined; split/shrink with a NULL config inherit the
 *   parent's): init, split, shrink and a group holding them return ncclInProgress,
 *   and ncclCommGetAsyncError reports ncclInProgress for FAKE_NCCL_ASYNC_POLLS polls
 *   (and until the rendezvous is complete), then ncclSuccess.  Using such a
 *   communicator before that gives ncclInvalidArgument, as NCCL does.
 * - ncclCommSplit (colors, keys, NCCL_SPLIT_NOCOLOR) and ncclCommShrink (excluded
 *   ranks do not call it; NCCL_SHRINK_ABORT fails the parent's pending operations)
 *   are collectives over the parent.
 * - ncclCommAbort (any thread, any time) and ncclCommRevoke fail every pending and
 *   later operation of the communicator's peers with ncclRemoteError (revoke still
 *   allows shrink); ncclCommGetAsyncError then reports ncclRemoteError.
 * - A rendezvous that waits longer than FAKE_NCCL_TIMEOUT_MS aborts the communicator
 *   (message on stderr) instead of hanging `make check`.
 * - Argument checks in NCCL's order and with its codes (ArgsCheck): NULL or dead
 *   communicator, communicator not ready, root/peer out of range, datatype, op
 *   (unknown or destroyed PreMulSum ops included): ncclInvalidArgument.  Buffers are
 *   checked only in NCCL's pointer-check mode (NCCL_CHECK_POINTERS=1, or
 *   NCCL_CHECK_MODE other than DEFAULT), and then as NCCL does: a NULL buffer is
 *   ncclInvalidArgument whatever the count.  With the checks off, a NULL buffer the
 *   operation reads or writes plays a faulting kernel: the calls return ncclSuccess,
 *   no data moves, and ncclCommGetAsyncError reports ncclUnhandledCudaError on every
 *   rank of the operation from then on.
 * - Comm query functions, Register/Deregister, WindowRegister/Deregister, MemAlloc/
 *   MemFree (malloc), GetErrorString, GetLastError work as bookkeeping.
 *
 * Environment (read at each call, so a test may change it between calls while no
 * other thread is inside the fake):
 *   FAKE_NCCL_TRACE=PATH       append one line per call to PATH (see below).
 *   FAKE_NCCL_VERSION=N        what ncclGetVersion reports (default 22809).
 *   FAKE_NCCL_FAIL=LIST        comma list of FUNCTION or FUNCTION=CODE: that function
 *                              returns CODE (default ncclInternalError = 3) without
 *                              doing anything, e.g. "ncclAllReduce=2,ncclCommSplit".
 *   FAKE_NCCL_FAIL_RANK=R      only calls on a communicator whose rank is R fail
 *                              (calls without a communicator fail on every rank).
 *   FAKE_NCCL_ASYNC_POLLS=N    ncclInProgress polls of a non-blocking comm (default 3).
 *   FAKE_NCCL_ASYNC_ERROR=CODE ncclCommGetAsyncError reports CODE once the comm is
 *                              ready (watchdog tests).
 *   FAKE_NCCL_CUDA_DEVICE=D    what ncclCommCuDevice reports for ncclCommInitRank*
 *                              comms (default 0; ncclCommInitAll: devlist[i] or i).
 *   FAKE_NCCL_TIMEOUT_MS=MS    rendezvous timeout (default 60000).
 *   NCCL_COMM_BLOCKING=0|1     as in NCCL.
 *   NCCL_CHECK_POINTERS=0|1    as in NCCL up to 2.28 (default 0).
 *   NCCL_CHECK_MODE=MODE       as in later NCCL: anything but DEFAULT checks pointers.
 *
 * Trace format: one line per call, written when the call returns (so a call NCCL
 * makes internally, e.g. ncclBroadcast inside ncclBcast, comes before its caller),
 * with every argument in a form that is stable across runs and address-space
 * layouts, so that traces of the same program with and without an interposer can
 * be compared byte for byte:
 *   ncclAllReduce(sendbuff=p1, recvbuff=p1, count=4, datatype=ncclFloat32, op=ncclSum,
 *                 comm=comm2, stream=NULL) = ncclSuccess
 *   - communicators: comm<N>, N = creation order in the process;
 *   - unique ids: id<N> (creation order); registration handles reg<N>; windows win<N>;
 *   - memory from ncclMemAlloc: mem<N> or mem<N>+<offset>;
 *   - any other pointer: p<N>, N = order of first appearance in this trace (equal
 *     pointers get equal names; keep test buffers static so that heap reuse cannot
 *     change the order);
 *   - output arguments: name=>value as written by the call, or name=>unset;
 *   - the result after " = ".
 *
 * Using it from a new test (test/local.mk):
 *   check_PROGRAMS += test/test_foo
 *   test_test_foo_CFLAGS = $(TEST_CFLAGS) -I$(top_srcdir)/test/fake_nccl
 *   test_test_foo_LDFLAGS = $(AM_LDFLAGS) -no-install
 *   test_test_foo_LDADD = test/fake_nccl/libfake_nccl_helpers.la \
 *           test/fake_nccl/libnccl.la $(TEST_LIBS)
 * -no-install puts the fake's build directory in the program's RUNPATH, so the
 * program loads the fake, not the real libnccl.so.2 the loader cache knows, and runs
 * without a libtool wrapper script.  To test nccl-det in front of it, either compile
 * the module under test into the program (as test_resolve does: the program then
 * plays libnccl-det.so, and RTLD_NEXT finds the fake), or run the program with
 * LD_PRELOAD of src/.libs/libnccl-det.so from a shell driver
 * (test_preload_lib.sh sets $shim_preload, sanitizer runtime first).  Call pncclX to
 * reach the fake directly, bypassing any interposer, e.g. for setup and cleanup.
 *
 * Helpers for tests (libfake_nccl_helpers.la, linked into the test, not into the
 * fake): see the declarations below.  The trace helpers need no libnccl.
 */
#ifndef FAKE_NCCL_H_
#define FAKE_NCCL_H_

#include <stddef.h>

#include <nccl.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FAKE_NCCL_DEFAULT_VERSION     22809
#define FAKE_NCCL_DEFAULT_FAIL_CODE   ncclInternalError
#define FAKE_NCCL_DEFAULT_ASYNC_POLLS 3
#define FAKE_NCCL_DEFAULT_TIMEOUT_MS  60000

/*
 * Run fn(rank, arg) on `nranks` new threads and join them.  Returns 0, or -1 when a
 * thread could not be created (the ones started are joined first).
 */
int fake_nccl_run_ranks(int nranks, void (*fn)(int rank, void *arg), void *arg);

/*
 * Make `nranks` communicators of one clique from the calling thread:
 * ncclGetUniqueId, then ncclGroupStart, ncclCommInitRank for every rank,
 * ncclGroupEnd (the public names, so an interposer sees them).  Returns the first
 * error.
 */
ncclResult_t fake_nccl_init_clique(ncclComm_t *comms, int nranks);

/* The whole trace file as a malloc'ed string ("" for a missing file); NULL on error. */
char *fake_nccl_trace_read(const char *path);

/* Lines of the trace whose function name (text before '(') is `function`; -1 on error. */
int fake_nccl_trace_count(const char *path, const char *function);

/*
 * Lines of the text file at `path` that contain `needle1` and, unless NULL, `needle2`
 * (log files of the tests); -1 when the file cannot be read.
 */
int fake_nccl_file_count(const char *path, const char *needle1, const char *needle2);

/*
 * A new empty file name in $TMPDIR (else /tmp) for FAKE_NCCL_TRACE, written into
 * `path`.  Returns 0, or -1 on error.
 */
int fake_nccl_trace_temp(char *path, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* FAKE_NCCL_H_ */
