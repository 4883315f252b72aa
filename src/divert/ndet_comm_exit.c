/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Where nothing of ours may run: in the child of a fork, and once the process
 * exits.  The exit handler also prints NCCL_DET_STATS of the communicators still
 * registered and lets the engine release what it kept.
 */
#include "config.h"

#include "divert/ndet_comm.h"
#include "divert/ndet_comm_internal.h"

#include <pthread.h>
#include <stdlib.h>

#include "common/ndet_log.h"
#include "common/ndet_settings.h"

static int ndet_comm_inert; /* fork child, or exiting */

/* ---------------------------------------------------------------- fork and exit */

/*
 * The child of a fork inherits our registry, but none of the CUDA contexts, pools or
 * threads behind it, and possibly a lock some other thread held: do nothing there.
 */
static void ndet_comm_fork_child(void)
{
	__atomic_store_n(&ndet_comm_inert, 1, __ATOMIC_RELEASE);
}

void ndet_comm_register_fork_handler(void)
{
	if (pthread_atfork(NULL, NULL, ndet_comm_fork_child) != 0)
		NDET_WARN("pthread_atfork failed: a forked child that calls NCCL would run "
			  "nccl-det's hooks on state it does not own");
}

/* Not yet reported at exit: now it is (under the registry lock). */
static bool ndet_comm_take_unreported(struct ndet_comm *comm, void *context)
{
	(void)context;
	if (comm->exit_reported)
		return false;
	comm->exit_reported = true;
	return true;
}

/*
 * NCCL_DET_STATS of every communicator still registered at exit (a job that never
 * destroys its communicators, as many PyTorch jobs do, would otherwise print none),
 * one at a time, each with a reference of its own while it is printed.
 */
static void ndet_comm_report_live(void)
{
	if (!ndet_settings_get()->stats)
		return;
	struct ndet_comm *comm;
	while ((comm = ndet_comm_take_next(ndet_comm_take_unreported, NULL)) != NULL) {
		ndet_comm_print_stats(comm);
		ndet_comm_unref(comm);
	}
}

/*
 * Registered right after our first CUDA call, so it runs before the CUDA runtime's
 * own exit handler (handlers run in reverse order): a static destructor that calls
 * ncclCommDestroy afterwards finds us inert instead of calling a dead runtime.
 */
static void ndet_comm_at_exit(void)
{
	/* A fork child inherits the handler, but not the parent's pools. */
	if (__atomic_exchange_n(&ndet_comm_inert, 1, __ATOMIC_ACQ_REL) == 0) {
		ndet_comm_report_live();
		ndet_comm_backend()->at_exit();
	}
}

void ndet_comm_register_exit_handler(void)
{
	if (atexit(ndet_comm_at_exit) != 0)
		NDET_WARN("atexit failed: NCCL calls made after exit() began may reach a CUDA "
			  "runtime that is shutting down");
}

bool ndet_comm_hooks_allowed(void)
{
	return __atomic_load_n(&ndet_comm_inert, __ATOMIC_ACQUIRE) == 0;
}
