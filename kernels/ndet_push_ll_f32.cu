/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The float push and LL kernels (device/ndet_push.cuh,
 * device/ndet_ll.cuh): one translation unit per element type and path group, so
 * that make -j builds them side by side.
 */
#include "kernels/device/ndet_path_kernels.cuh"

NDET_PUSH_LL_KERNELS(NDET_DTYPE_F32, f32, NDET_LL_WIDE_KERNELS(NDET_DTYPE_F32));
