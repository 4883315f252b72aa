/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The multi-host mode of ndet_gpu_test (ndet_gpu_hosts.c) and what it shares with the
 * driver's other modes (ndet_gpu_test.c).
 */
#ifndef NDET_GPU_HOSTS_H_
#define NDET_GPU_HOSTS_H_

#include <stdbool.h>

#include "protocol/ndet_engine_config.h"

/* The engine configuration of the driver's ranks (NDET_TEST_* settings). */
void gpu_test_config(struct ndet_engine_config *config, int rank, int nranks);

/*
 * ndet_gpu_test hosts LAYOUT [quick|full] [one-launch]: exit status 0, 1 (a check
 * failed) or 2.
 */
int gpu_run_hosts(const char *layout, bool quick, bool one_launch);

#endif /* NDET_GPU_HOSTS_H_ */
