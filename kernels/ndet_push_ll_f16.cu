/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The half push and LL kernels of ndet_kernels_impl.cuh: one translation unit
 * per element type and path group, so that make -j builds them side by side.
 */
#include "ndet_kernels_impl.cuh"

NDET_PUSH_LL_KERNELS(NDET_DTYPE_F16, f16);
