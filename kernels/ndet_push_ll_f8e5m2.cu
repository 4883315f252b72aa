/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The fp8 E5M2 push and LL kernels (device/ndet_push.cuh,
 * device/ndet_ll.cuh): one translation unit per element type and path group, so
 * that make -j builds them side by side.
 * Built for NVCC_FP8_GENCODE (kernels/local.mk), sm_90 and newer by default: NCCL
 * reduces fp8 only there, and ndet_kernel_fp8_check asks whether this code loads.
 */
#include "kernels/device/ndet_path_kernels.cuh"

NDET_PUSH_LL_KERNELS(NDET_DTYPE_F8E5M2, f8e5m2, NDET_LL_WIDE_KERNELS(NDET_DTYPE_F8E5M2));
