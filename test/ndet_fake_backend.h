/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * A host-only engine for the CPU tests (install it with
 * ndet_comm_set_backend_for_testing).  It runs the real setup protocol
 * (ndet_setup.c) with pools in host memory: peers in this process are reached by
 * direct pointers and probed by writing and reading those pools, and it honours
 * NCCL_DET_TEST_FAIL (alloc, ipc_open, probe, @rank) and NCCL_DET_MAX_MEMORY as the
 * CUDA engine does.  Its all-reduce exchanges the inputs through the exchange
 * callback (the real, here fake, ncclAllGather via pnccl*) and computes the result
 * with the CPU reference tree (ndet_reference.h), so a test can tell a diverted
 * result (tree order) from NCCL's (the fake reduces in rank order).
 *
 * FAKE_BACKEND_PROCESS_PER_RANK=1 makes every rank publish a pid of its own, as if
 * each rank were a process: peers are then "opened" like IPC peers (ipc_open faults
 * apply) and the destroy barrier runs.  By default all ranks share this process, as
 * threads of one process really do (no barrier: see ndet_engine_destroy_group).
 *
 * Errors: an aborted engine reports NDET_KERNEL_ERR_ABORTED at its next call; a failed
 * exchange during a call reports NDET_KERNEL_ERR_PEER (what a kernel would write),
 * and ndet_fake_backend_set_error() injects any error.
 */
#ifndef NDET_FAKE_BACKEND_H_
#define NDET_FAKE_BACKEND_H_

#include <stdint.h>

#include "ndet_backend.h"

extern const struct ndet_backend ndet_fake_backend;

struct ndet_fake_backend_counters {
	int engines_created;
	int engines_destroyed;
	int pools_freed;
	int pools_quarantined;
	int barriers; /* engines released through a barrier exchange */
	unsigned long long allreduces;
};

void ndet_fake_backend_counters(struct ndet_fake_backend_counters *counters);

/* Zero the counters and free the quarantined pools (between tests only). */
void ndet_fake_backend_reset(void);

/* As if a kernel of `engine` had failed with `kernel_error` (ndet_kernel_error_t). */
void ndet_fake_backend_set_error(void *engine, uint32_t kernel_error);

#endif /* NDET_FAKE_BACKEND_H_ */
