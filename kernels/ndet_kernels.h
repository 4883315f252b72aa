/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The extern "C" launchers of the collective kernels (kernels/libndet_kernels.la,
 * and the all-ranks ones of kernels/libndet_all_ranks.la).  Each checks
 * cudaGetLastError() after the launch and returns the CUDA error code as an int
 * (0 = cudaSuccess), so C callers need no CUDA C++ headers.  What they take and the
 * memory they share with the host: ndet_abi.h.
 */
#ifndef NDET_KERNELS_H_
#define NDET_KERNELS_H_

#include <stdint.h>

#include "kernels/ndet_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * One rank's collective, on `stream` (a cudaStream_t): all-reduce, reduce (root) or
 * reduce-scatter (path), with a plain op or PreMulSum.
 */
int ndet_kernel_allreduce(const struct ndet_kernel_args *args, void *stream);

/*
 * One stage kernel (1, 3 or 5) of one chunk of a call across hosts, on `stream`:
 * kernels/device/ndet_hosts.cuh.  cudaErrorInvalidValue for arguments out of range.
 */
int ndet_kernel_hosts_stage(const struct ndet_hosts_args *args, void *stream);

/*
 * Every rank in one launch (grid.y = nranks, 1 to 8: cudaErrorInvalidValue beyond),
 * for compute-sanitizer, which serialises separate launches.  `device_args` points to
 * nranks argument blocks in device memory; `op` is the kernel-table index
 * (NDET_KERNEL_OP_PREMULSUM for PreMulSum).  Defined in kernels/libndet_all_ranks.la,
 * which only the GPU test driver links (ndet_kernels_all_ranks.cu; a build without it
 * links test/gpu/ndet_all_ranks_none.c, cudaErrorNotSupported); the engine takes it as
 * an argument (ndet_engine_collective_all_ranks), so the library carries none of it.
 */
typedef int (*ndet_all_ranks_launcher_fn)(const struct ndet_kernel_args *device_args, int dtype,
					  int op, int nranks, uint32_t blocks, void *stream);
int ndet_kernel_allreduce_all_ranks(const struct ndet_kernel_args *device_args, int dtype, int op,
				    int nranks, uint32_t blocks, void *stream);

/*
 * Stage 1, 3 or 5 across hosts for every rank in one launch (grid.y = nranks, 1 to 8),
 * `device_args` nranks ndet_hosts_args in device memory; as
 * ndet_kernel_allreduce_all_ranks, only in kernels/libndet_all_ranks.la.
 */
typedef int (*ndet_hosts_all_ranks_launcher_fn)(const struct ndet_hosts_args *device_args,
						int dtype, int stage, int nranks, uint32_t blocks,
						void *stream);
int ndet_kernel_hosts_stage_all_ranks(const struct ndet_hosts_args *device_args, int dtype,
				      int stage, int nranks, uint32_t blocks, void *stream);

/*
 * Load the all-ranks kernels of the dtypes in `dtype_mask` (bit per ndet_dtype_t) now
 * (with PTX alone, the driver's JIT compiles them here, once per machine, into
 * ~/.nv/ComputeCache); a cudaError_t.
 */
int ndet_kernel_all_ranks_load(unsigned dtype_mask);

/*
 * Load each of `count` kernels (their host entry points) into the current device's
 * context, as setup does below; 0, or the runtime's error for the first that cannot
 * load (cleared).
 */
int ndet_kernel_load_each(const void *const *kernels, unsigned count);

/*
 * Can the current device run this build's kernels?  Loads every collective kernel of
 * every type but fp8 into the current device's context (CUDA's lazy loading would
 * load each at its first launch, which may wait for the peers' kernels already
 * spinning in a context several ranks share: a hang until NCCL_DET_TIMEOUT).
 * cudaSuccess, or what the runtime says of the first kernel it cannot load:
 * cudaErrorNoKernelImageForDevice (or cudaErrorInvalidDeviceFunction) where the build
 * has no SASS for the device and no PTX it can compile, e.g. a Volta or Turing GPU
 * under the default sm_80+ targets.  Setup asks before it reports the rank ready, so
 * such a GPU runs the communicator in NCCL instead of failing its first call.  The
 * error is cleared.
 */
int ndet_kernel_device_check(void);

/*
 * Can the current device run this build's fp8 kernels?  They are built for their own
 * targets (NVCC_FP8_GENCODE: sm_90 SASS and compute_90 PTX by default), so a GPU that
 * runs every other kernel may lack them.  Loads every fp8 kernel, as
 * ndet_kernel_device_check does the others; cudaSuccess, or the runtime's error for
 * the first fp8 kernel that has no image for the device (cleared).  Setup asks, and
 * every rank's answer decides together whether fp8 calls are diverted.
 */
int ndet_kernel_fp8_check(void);

#ifdef __cplusplus
}
#endif

#endif /* NDET_KERNELS_H_ */
