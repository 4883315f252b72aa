/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The half kernels (ndet_kernels_impl.cuh), one translation unit per element type.
 */
#include "ndet_kernels_impl.cuh"

NDET_KERNEL_TABLES(NDET_DTYPE_F16, f16);
