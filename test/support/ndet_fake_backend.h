/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * A host-only engine for the CPU tests (install it with
 * ndet_comm_set_backend_for_testing).  It runs the real setup protocol
 * (ndet_setup.c) with pools in host memory: peers in this process are reached by
 * direct pointers and probed by writing and reading those pools, and it honours
 * NCCL_DET_TEST_FAIL (alloc, ipc_open, probe, @rank) and NCCL_DET_MAX_MEMORY as the
 * CUDA engine does.
 *
 * Multi-host (ndet_backend.multi_host): the stages 1, 3 and 5 of
 * doc/multihost-design.md on host memory, with the staging (NCCL_DET_HOSTS_STAGING
 * bytes, counted with the pool) allocated at setup when the table spans hosts.
 * Stages 1 and 5 run the flag protocol below among the ranks of one host only (each
 * rank maps its g - 1 local peers, never a remote one); the arithmetic is the CPU
 * reference's two stages (ndet_reference_hosts_partial, _combine).
 *
 * Its collectives (all-reduce, reduce-scatter, reduce; plain ops and PreMulSum) run
 * the kernels' flag protocol (ndet_kernels.h) on the calling thread, through the
 * pools and never through NCCL: copy-in (and the PreMulSum scalar: a device scalar
 * is read now, as a kernel reads it when it runs), publish ready =
 * step << 24 | signature into every peer's pool, wait for every peer's ready (exact
 * step, signature of count/dtype/op/nranks/collective/root/PreMulSum), reduce with
 * the CPU reference tree (ndet_reference.h, so a test can tell a diverted result
 * from NCCL's rank order; only the root of a reduce writes),
 * publish done, wait until every peer has read our input.  Every wait polls the
 * pool's abort word, the engine's abort flag (ncclCommAbort, revoke) and a deadline
 * of NCCL_DET_TIMEOUT from the start of the call or the last successful wait, as
 * the kernels do.  A batch posts
 * every call before it waits for any, so one thread may drive several ranks.
 *
 * Errors, as the kernels report them: the first one goes into the engine's error
 * word (ndet_kernel_error_t), and every rank's abort word is set so that the peers
 * leave too (NDET_KERNEL_ERR_PEER).  Like a kernel launch, the call that failed
 * still returns NDET_OK; ncclCommGetAsyncError reports the error and the next call
 * fails fast (NDET_ERR_REMOTE at launch).  A NULL buffer with count > 0 "faults"
 * (NDET_FAKE_KERNEL_FAULT: a CUDA kernel would die with an illegal address and its
 * peers would time out; here they are told at once).  ndet_fake_backend_set_error()
 * injects any error.
 *
 * FAKE_BACKEND_PROCESS_PER_RANK=1 makes every rank publish a pid of its own, as if
 * each rank were a process: peers are then "opened" like IPC peers (ipc_open faults
 * apply, and each counts in ndet_resources.ipc_imports until closed) and the
 * finalize barrier runs.  By default all ranks share this process, as threads of one
 * process really do (no barrier: see ndet_comm_finalize_group).
 *
 * Teardown is the CUDA engine's (src/protocol/ndet_teardown.h, the same code): wait for the
 * engine's "kernels" (ndet_fake_backend_spin_rank leaves one running), write the
 * detach words into the pools it "imported" and close them, barrier, then free the
 * pool, or leave it pending until every peer "process" detached or ended
 * (ndet_fake_backend_end_process), or keep it.  A pool counts its
 * ndet_pool_memory_bytes() in ndet_resources while allocated; kept and pending
 * pools stay allocated until ndet_fake_backend_reset.
 * ndet_fake_backend_set_library_version() makes a rank publish another library
 * version.
 *
 * Exit: like the CUDA runtime, the backend registers an exit handler at its first
 * setup; once that ran, any use of an engine aborts the process ("after the runtime
 * shut down"), so a test sees what would crash with CUDA.
 */
#ifndef NDET_FAKE_BACKEND_H_
#define NDET_FAKE_BACKEND_H_

#include <stdbool.h>
#include <stdint.h>

#include "protocol/ndet_backend.h"

extern const struct ndet_backend ndet_fake_backend;

/* The error word of a "kernel" that touched a NULL buffer (not an ndet_kernel_error_t). */
#define NDET_FAKE_KERNEL_FAULT 0x100u

/* kernel_errors[] slots: NDET_KERNEL_ERR_TIMEOUT ... NDET_KERNEL_ERR_PEER. */
#define NDET_FAKE_ERROR_SLOTS 5

struct ndet_fake_backend_counters {
	int engines_created;
	int engines_destroyed; /* released */
	int pools_freed;
	int pools_quarantined;         /* kept on purpose (ndet_teardown_leak): a peer may read */
	int barriers;                  /* engines that met their peers in a teardown barrier */
	unsigned long long allreduces; /* collectives of any kind that reduced */
	int kernel_errors[NDET_FAKE_ERROR_SLOTS]; /* first errors by ndet_kernel_error_t */
	int faults;                               /* NDET_FAKE_KERNEL_FAULT */
	int hosts_connects; /* hosts_connect calls (one per setup batch across hosts) */
	/* hosts_order calls: the stage stream waiting for the call's, and the reverse. */
	int hosts_orders_to_stages, hosts_orders_to_call;
	int hosts_stages_off_stream; /* stages not given the engine's stage stream */
	int calls_failed_unlaunched; /* fail_call: calls this rank could not launch */
};

void ndet_fake_backend_counters(struct ndet_fake_backend_counters *counters);

/*
 * Zero the counters (ndet_resources too), forget the version and spin overrides and
 * free the quarantined pools (between tests only).
 */
void ndet_fake_backend_reset(void);

/* As if a kernel of `engine` had failed with `kernel_error` (ndet_kernel_error_t). */
void ndet_fake_backend_set_error(void *engine, uint32_t kernel_error);

/*
 * Across hosts: the join of `rank`'s streams (hosts_order) that comes after `after`
 * successful ones fails with NDET_ERR_CUDA, once; -1: none.  And `rank`'s stage
 * stream taken by another capture: its calls' BEGIN says NDET_ERR_UNSUPPORTED (-1:
 * none).  Reset by ndet_fake_backend_reset.
 */
void ndet_fake_backend_fail_join(int rank, int after);
void ndet_fake_backend_stage_stream_busy(int rank);

/*
 * From now on, the all-reduces of `rank` (of every communicator) launch a "kernel"
 * that never meets its peers and runs in the background until the engine's abort
 * flag is set (NDET_KERNEL_ERR_ABORTED) or NCCL_DET_TIMEOUT passes; the launch
 * returns at once, as a real one does.  -1: none.  Reset by ndet_fake_backend_reset.
 */
void ndet_fake_backend_spin_rank(int rank);

/*
 * Setups from now on: `rank` of every communicator publishes `version` as its
 * library version (a peer running another nccl-det release); rank -1: none.  Reset
 * by ndet_fake_backend_reset.
 */
void ndet_fake_backend_set_library_version(int rank, uint32_t version);

/*
 * Setups from now on: `rank` of every communicator stands for a GPU that is (not)
 * sm_90+ and does (not) run our fp8 kernels (every other rank: sm_90 with them, or
 * what FAKE_CUDA_MAJOR says); rank -1: none.  Reset by ndet_fake_backend_reset.
 */
void ndet_fake_backend_set_gpu(int rank, bool sm90, bool fp8);

/*
 * Setups from now on: `rank` of every communicator publishes no
 * NDET_SETUP_FLAG_MULTI_HOST (capable false), as a rank whose engine lacks the
 * multi-host stages would; rank -1 or capable true: none.  Reset by
 * ndet_fake_backend_reset.
 */
void ndet_fake_backend_set_multi_host(int rank, bool capable);

/* Peers' pools an engine maps (itself not counted): g - 1 on a host of g ranks. */
int ndet_fake_backend_mapped_peers(void *engine);

/*
 * With FAKE_BACKEND_PROCESS_PER_RANK=1: the "process" of `rank` (of every
 * communicator) has ended, as if killed: pools waiting for its detach word no longer
 * wait for it.  Reset by ndet_fake_backend_reset.
 */
void ndet_fake_backend_end_process(int rank);

/*
 * Called before every setup or teardown exchange of the engines, on the thread that
 * runs it, before the divert layer's exchange is asked (NULL: none): a test stops a
 * communicator between two rounds of a lockstep setup.  Reset by
 * ndet_fake_backend_reset.
 */
void ndet_fake_backend_set_exchange_hook(void (*hook)(void));

/*
 * A function every launch of a call runs first, with the call's engine (NULL: none):
 * a test fails a kernel after the divert layer found the engine healthy.  Reset by
 * ndet_fake_backend_reset.
 */
void ndet_fake_backend_set_launch_hook(void (*hook)(void *engine));

#endif /* NDET_FAKE_BACKEND_H_ */
