/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Finding the real NCCL at run time (doc/design.md, "Loading").  nccl-det never links
 * libnccl: it looks the real library up lazily, on the first call that needs it,
 * thread-safely, and never resolves a name to itself.  Strategies:
 *
 *   NEXT      `dlsym(RTLD_NEXT, "pncclX")`, then "ncclX".  Works whenever libnccl
 *             is in the global scope (linked by the application or dlopen'ed
 *             RTLD_GLOBAL).
 *   LOADED    libnccl.so* loaded privately (a dependency of a library that was
 *             dlopen'ed RTLD_LOCAL, as PyTorch extension modules are) is invisible
 *             to RTLD_NEXT; walk the loaded objects (dl_iterate_phdr), take the
 *             first whose file name starts with "libnccl.so" and that is neither
 *             this object nor another copy of nccl-det, reopen it with RTLD_NOLOAD
 *             (never a second copy) and look the names up in it.
 *   EXPLICIT  NCCL_DET_NCCL_LIBRARY=PATH, loaded privately.
 *   WHEEL     (drop-in) nvidia/nccl/lib/libnccl.so.2 next to a loaded Python
 *             package: the site-packages or dist-packages directory of any loaded
 *             object (a framework's extension modules), loaded privately.
 *   SYSTEM    (drop-in) libnccl.so.2 in the directories of LD_LIBRARY_PATH, then
 *             the loader cache (/etc/ld.so.cache), then /usr/local/cuda/lib64 and
 *             the loader's default directories, loaded privately.
 *
 * Order: the LD_PRELOAD build takes NEXT, LOADED, EXPLICIT (the application's own
 * NCCL first).  The drop-in build (NDET_BUILD_DROPIN), which is itself named
 * libnccl.so.2, takes EXPLICIT, LOADED, WHEEL, SYSTEM.
 *
 * "Privately" is dlopen(RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND): RTLD_LOCAL keeps the
 * real NCCL out of the global scope; RTLD_DEEPBIND binds its calls to its own public
 * names (ncclMemFree, ncclCommGetAsyncError, ...) inside itself, so that NCCL's
 * internal calls never meet the drop-in's entry points or another libnccl of the
 * process (MSCCL++ learnt this the hard way).  Under a sanitizer runtime, which
 * refuses RTLD_DEEPBIND, and where malloc is not libc's (jemalloc or tcmalloc
 * preloaded: NCCL would free libc's blocks with libc's free), the flag is left out:
 * NCCL's internal calls then reach the drop-in's entry points, which forward them
 * exactly like an application call.
 *
 * This object is never taken: not by address (every symbol found is checked), not
 * by file (a candidate file with the device and inode of our own file, however it
 * is named, is refused).  Another copy of nccl-det is never loaded as "the real
 * NCCL"; only NEXT may lead to one (libnccl-det.so preloaded in front of a drop-in):
 * this copy then forwards every call to it and diverts nothing (two copies in one
 * process, exactly one diverts).
 *
 * Which strategy won, the path, and the version are logged at INFO (subsystem
 * INIT); a NCCL_DET_NCCL_LIBRARY that cannot be used is a WARN in the drop-in (it
 * goes on searching).  pncclGetVersion is only called when that INFO line is printed
 * and nccl-det is enabled, when nccl-det is about to divert (the version gate), or
 * when code asks for ndet_resolve_nccl_version(): resolving the library itself makes
 * no NCCL call, so that NCCL_DET_ENABLE=0 leaves NCCL's call trace exactly as
 * without nccl-det.
 */
#ifndef NDET_RESOLVE_H_
#define NDET_RESOLVE_H_

#include <stdbool.h>
#include <stddef.h>

#include <nccl.h>

#include "common/ndet_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Every function of nccl.h (2.28) as X(return type, name, parameter list).  The
 * table is the one place that names them: the struct of function pointers, the
 * index enum and the lookup loop are generated from it.
 */
#define NDET_NCCL_FUNCTIONS(X)                                                                     \
	X(ncclResult_t, ncclGetVersion, (int *version))                                            \
	X(ncclResult_t, ncclGetUniqueId, (ncclUniqueId * uniqueId))                                \
	X(ncclResult_t, ncclMemAlloc, (void **ptr, size_t size))                                   \
	X(ncclResult_t, ncclMemFree, (void *ptr))                                                  \
	X(ncclResult_t, ncclCommInitRank,                                                          \
	  (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank))                          \
	X(ncclResult_t, ncclCommInitRankConfig,                                                    \
	  (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t *config))    \
	X(ncclResult_t, ncclCommInitRankScalable,                                                  \
	  (ncclComm_t * newcomm, int nranks, int myrank, int nId, ncclUniqueId *commIds,           \
	   ncclConfig_t *config))                                                                  \
	X(ncclResult_t, ncclCommInitAll, (ncclComm_t * comm, int ndev, const int *devlist))        \
	X(ncclResult_t, ncclCommFinalize, (ncclComm_t comm))                                       \
	X(ncclResult_t, ncclCommDestroy, (ncclComm_t comm))                                        \
	X(ncclResult_t, ncclCommAbort, (ncclComm_t comm))                                          \
	X(ncclResult_t, ncclCommRevoke, (ncclComm_t comm, int revokeFlags))                        \
	X(ncclResult_t, ncclCommSplit,                                                             \
	  (ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config))        \
	X(ncclResult_t, ncclCommShrink,                                                            \
	  (ncclComm_t comm, int *excludeRanksList, int excludeRanksCount, ncclComm_t *newcomm,     \
	   ncclConfig_t *config, int shrinkFlags))                                                 \
	X(const char *, ncclGetErrorString, (ncclResult_t result))                                 \
	X(const char *, ncclGetLastError, (ncclComm_t comm))                                       \
	X(void, ncclResetDebugInit, (void))                                                        \
	X(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t * asyncError))       \
	X(ncclResult_t, ncclCommCount, (const ncclComm_t comm, int *count))                        \
	X(ncclResult_t, ncclCommCuDevice, (const ncclComm_t comm, int *device))                    \
	X(ncclResult_t, ncclCommUserRank, (const ncclComm_t comm, int *rank))                      \
	X(ncclResult_t, ncclCommRegister,                                                          \
	  (const ncclComm_t comm, void *buff, size_t size, void **handle))                         \
	X(ncclResult_t, ncclCommDeregister, (const ncclComm_t comm, void *handle))                 \
	X(ncclResult_t, ncclCommWindowRegister,                                                    \
	  (ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win, int winFlags))             \
	X(ncclResult_t, ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win))             \
	X(ncclResult_t, ncclRedOpCreatePreMulSum,                                                  \
	  (ncclRedOp_t * op, void *scalar, ncclDataType_t datatype,                                \
	   ncclScalarResidence_t residence, ncclComm_t comm))                                      \
	X(ncclResult_t, ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm))                       \
	X(ncclResult_t, ncclReduce,                                                                \
	  (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,            \
	   ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream))                        \
	X(ncclResult_t, ncclBcast,                                                                 \
	  (void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,           \
	   cudaStream_t stream))                                                                   \
	X(ncclResult_t, ncclBroadcast,                                                             \
	  (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,  \
	   ncclComm_t comm, cudaStream_t stream))                                                  \
	X(ncclResult_t, ncclAllReduce,                                                             \
	  (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,            \
	   ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream))                                  \
	X(ncclResult_t, ncclReduceScatter,                                                         \
	  (const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,        \
	   ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream))                                  \
	X(ncclResult_t, ncclAllGather,                                                             \
	  (const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,        \
	   ncclComm_t comm, cudaStream_t stream))                                                  \
	X(ncclResult_t, ncclAlltoAll,                                                              \
	  (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,            \
	   ncclComm_t comm, cudaStream_t stream))                                                  \
	X(ncclResult_t, ncclGather,                                                                \
	  (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,  \
	   ncclComm_t comm, cudaStream_t stream))                                                  \
	X(ncclResult_t, ncclScatter,                                                               \
	  (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,  \
	   ncclComm_t comm, cudaStream_t stream))                                                  \
	X(ncclResult_t, ncclSend,                                                                  \
	  (const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, \
	   cudaStream_t stream))                                                                   \
	X(ncclResult_t, ncclRecv,                                                                  \
	  (void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,       \
	   cudaStream_t stream))                                                                   \
	X(ncclResult_t, ncclGroupStart, (void))                                                    \
	X(ncclResult_t, ncclGroupEnd, (void))                                                      \
	X(ncclResult_t, ncclGroupSimulateEnd, (ncclSimInfo_t * simInfo))

/* NDET_NCCL_FN_ncclAllReduce, ...: index of a function in the table. */
/* clang-format off */
enum ndet_nccl_function {
#define NDET_NCCL_ENUM(ret, name, params) NDET_NCCL_FN_##name,
	NDET_NCCL_FUNCTIONS(NDET_NCCL_ENUM)
#undef NDET_NCCL_ENUM
	NDET_NCCL_FUNCTION_COUNT
};
/* clang-format on */

/*
 * The real NCCL's entry points, typed.  A member is NULL when the real library lacks
 * that symbol (an older NCCL) or when no real library was found at all.
 */
struct ndet_nccl {
#define NDET_NCCL_MEMBER(ret, name, params) ret(*name) params;
	NDET_NCCL_FUNCTIONS(NDET_NCCL_MEMBER)
#undef NDET_NCCL_MEMBER
};

enum ndet_resolve_strategy {
	NDET_RESOLVE_NONE = 0, /* no real NCCL found */
	NDET_RESOLVE_NEXT,     /* dlsym(RTLD_NEXT) */
	NDET_RESOLVE_LOADED,   /* an already-loaded libnccl.so* (dl_iterate_phdr + RTLD_NOLOAD) */
	NDET_RESOLVE_EXPLICIT, /* NCCL_DET_NCCL_LIBRARY */
	NDET_RESOLVE_WHEEL,    /* nvidia/nccl/lib of a loaded Python package tree */
	NDET_RESOLVE_SYSTEM,   /* LD_LIBRARY_PATH, the loader cache, the system directories */
};

/* Oldest NCCL nccl-det diverts for; an older one gets a pure pass-through. */
#define NDET_NCCL_MIN_VERSION 22100
/* Newest NCCL nccl-det was tested with; a newer one gets an INFO line. */
#define NDET_NCCL_TESTED_VERSION 22999

/* The real NCCL; resolved on the first call (thread-safe).  Never NULL. */
const struct ndet_nccl *ndet_resolve_nccl(void);

/*
 * An entry point found `function` NULL in the table: log why (once per process when
 * no real NCCL was found, once per symbol when only that symbol is missing) and
 * return the status to give the caller: NDET_ERR_SYSTEM (no library) or
 * NDET_ERR_INVALID_USAGE (symbol missing).
 */
ndet_status_t ndet_resolve_missing(enum ndet_nccl_function function);

/* Which strategy found the real NCCL (resolves first if needed). */
enum ndet_resolve_strategy ndet_resolve_strategy(void);

/* File of the real NCCL ("" when none), valid for the life of the process. */
const char *ndet_resolve_path(void);

/* Name of a function in the table ("ncclAllReduce"). */
const char *ndet_resolve_function_name(enum ndet_nccl_function function);

/* Name of a strategy for logs ("RTLD_NEXT", ...). */
const char *ndet_resolve_strategy_name(enum ndet_resolve_strategy strategy);

/*
 * How this copy of nccl-det was loaded, for the verdict line: "drop-in" (the drop-in
 * libnccl.so.2) or "preload" (libnccl-det.so ahead of NCCL; as NCCL's tuner or net
 * plugin alone its communicators never reach the divert layer).
 */
const char *ndet_resolve_loading_mode(void);

/*
 * The real NCCL's runtime version (pncclGetVersion, e.g. 22809), asked once and
 * cached; 0 when unknown.  Gate features on this, not on the headers.
 */
int ndet_resolve_nccl_version(void);

/*
 * May this copy of nccl-det divert?  No when the NCCL it forwards to is another copy
 * of nccl-det (that copy diverts), or when the runtime NCCL is older than
 * NDET_NCCL_MIN_VERSION (one WARN).  Asks pncclGetVersion once: call it only when
 * nccl-det is enabled.
 */
bool ndet_resolve_divert_allowed(void);

/*
 * For nccl-det's own queries (ncclDetGetNcclLibrary, ncclDetGetResources, ...): the
 * search as ndet_resolve_nccl runs it, except that finding nothing is not kept, so that
 * a query made before the application loaded NCCL does not leave every later call
 * without it.  True once the real NCCL (or another copy) was found.
 */
bool ndet_resolve_peek(void);

/*
 * When this copy forwards to another copy of nccl-det: that copy's `name` (its
 * ncclDet* API), else NULL.
 */
void *ndet_resolve_other_copy_symbol(const char *name);

/*
 * Address of `name` ("ncclX", "pncclX", or any other name the real NCCL exports) in
 * the real NCCL: the p-alias first, never an address inside nccl-det.  NULL when it
 * cannot be had; then *missing says why (NDET_ERR_SYSTEM: no real NCCL, or the
 * lookup came from inside the resolution itself, NDET_ERR_INVALID_USAGE: this NCCL
 * lacks the name) and *final whether the answer holds for the life of the process.
 * For the drop-in's generated trampolines.
 */
void *ndet_resolve_symbol(const char *name, ndet_status_t *missing, bool *final);

/*
 * Log why `name` (not in the function table) is missing, once per *warned flag, and
 * return the status the caller gets (as ndet_resolve_missing does).
 */
ndet_status_t ndet_resolve_missing_symbol(const char *name, int *warned);

/*
 * Paths the loader cache image `data` (the bytes of /etc/ld.so.cache) holds for the
 * library `name` on x86-64, into paths[0..max-1]; returns how many (0 for a cache in
 * a format it does not know).  Exposed for the tests.
 */
int ndet_resolve_ld_cache_find(const char *data, size_t size, const char *name, char (*paths)[4096],
			       int max);

/* Test hook: forget everything so the next call resolves again.  Not thread-safe. */
void ndet_resolve_reset_for_testing(void);

/* Tests: the prefix of the loader cache and the system directories ("" by default). */
void ndet_resolve_set_system_root_for_testing(const char *root);

#ifdef __cplusplus
}
#endif

#endif /* NDET_RESOLVE_H_ */
