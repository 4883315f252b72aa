/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * libnccl-det-fake.so: libnccl-det.so with the host-only backend
 * (ndet_fake_backend.h) in place of the CUDA engine, for the preload tests that run
 * against the fake NCCL.  The fake NCCL works on host memory: the real engine would
 * hand it device pointers, so the real library is only ever preloaded there with
 * NCCL_DET_ENABLE=0.  A test library may have a constructor; libnccl-det.so has none.
 */
#include "config.h"

#include "ndet_comm.h"
#include "ndet_fake_backend.h"

__attribute__((constructor)) static void ndet_fake_preload_install(void)
{
	ndet_comm_set_backend_for_testing(&ndet_fake_backend);
}
