/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * libnccl-det-fake.so: libnccl-det.so with the host-only backend
 * (ndet_fake_backend.h) in place of the CUDA engine, for the preload tests that run
 * against the fake NCCL.  The fake NCCL works on host memory: the real engine would
 * hand it device pointers, so the real library is only ever preloaded there with
 * NCCL_DET_ENABLE=0.  A test library may have a constructor; libnccl-det.so has none.
 * NDET_TEST_SYSTEM_ROOT (set by the test drop-in's build) prefixes the loader cache
 * and the system directories the drop-in searches, so that its search is hermetic.
 */
#include "config.h"

#include "divert/ndet_comm.h"
#include "resolve/ndet_resolve.h"
#include "test/support/ndet_fake_backend.h"

__attribute__((constructor)) static void ndet_fake_preload_install(void)
{
	ndet_comm_set_backend_for_testing(&ndet_fake_backend);
#ifdef NDET_TEST_SYSTEM_ROOT
	ndet_resolve_set_system_root_for_testing(NDET_TEST_SYSTEM_ROOT);
#endif
}
