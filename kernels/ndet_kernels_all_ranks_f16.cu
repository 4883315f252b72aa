/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The half all-ranks-in-one-launch kernels (compute-sanitizer), one translation unit
 * per element type: kernels/libndet_all_ranks.la.
 */
#include "kernels/device/ndet_path_kernels.cuh"

NDET_ALL_RANKS_KERNELS(NDET_DTYPE_F16, f16);
