# CUDA kernels: three libtool convenience libraries (the library's kernels; the GPU
# test driver's all-ranks kernels and the benchmark kernels, below) with extern "C"
# launchers declared in C headers (kernels/ndet_kernels.h, kernels/ndet_bench.h; what
# host and kernels share: kernels/ndet_abi.h).  The device code is in headers by
# layer (kernels/device/, doc/kernels.md).  Compiled by nvcc through
# build-aux/nvcc-lt.sh (libtool cannot drive nvcc), which also writes each object's
# header dependencies as nvcc found them (-MD) into kernels/.deps/, included below.
#
# NVCC_LAUNCHER (configure or make variable) runs nvcc through another command, for
# instance `make NVCC_LAUNCHER=ccache`.  --threads 0: one nvcc thread per target
# architecture.  -Xfatbin -compress-all (NVCC_COMPRESS, m4/check_pkg_nvcc.m4): the
# GPU code is most of every binary's size, and compressed it is about a sixth.

NVCC_BASE_FLAGS = -std=c++17 -O3 --fmad=false --threads 0 $(NVCC_COMPRESS) \
	-Xcompiler -fvisibility=hidden -Xcompiler -fno-threadsafe-statics \
	-Xcompiler -fno-exceptions -Xcompiler -Wall -I$(top_srcdir) -I$(top_builddir)
NVCC_FLAGS = $(NVCC_BASE_FLAGS) $(NVCC_GENCODE)
NVCC_LT = $(SHELL) $(top_srcdir)/build-aux/nvcc-lt.sh

# One translation unit per element type and path group (the pull kernels; push and
# LL), so make -j builds them side by side; doc/kernels.md says which kernels each
# holds and why.
ndet_kernel_types = f32 f16 bf16 f64
ndet_fp8_types = f8e4m3 f8e5m2
ndet_kernel_sources = $(foreach t,$(ndet_kernel_types),kernels/ndet_pull_$(t).cu \
	kernels/ndet_push_ll_$(t).cu)
ndet_fp8_sources = $(foreach t,$(ndet_fp8_types),kernels/ndet_pull_$(t).cu \
	kernels/ndet_push_ll_$(t).cu)

noinst_LTLIBRARIES += kernels/libndet_kernels.la
kernels_libndet_kernels_la_SOURCES = kernels/ndet_kernels.cu \
	kernels/ndet_pull_f32.cu kernels/ndet_push_ll_f32.cu \
	kernels/ndet_pull_f16.cu kernels/ndet_push_ll_f16.cu \
	kernels/ndet_pull_bf16.cu kernels/ndet_push_ll_bf16.cu \
	kernels/ndet_pull_f64.cu kernels/ndet_push_ll_f64.cu \
	kernels/ndet_pull_f8e4m3.cu kernels/ndet_push_ll_f8e4m3.cu \
	kernels/ndet_pull_f8e5m2.cu kernels/ndet_push_ll_f8e5m2.cu \
	kernels/ndet_types.h kernels/ndet_abi.h kernels/ndet_kernels.h \
	kernels/device/ndet_sync.cuh kernels/device/ndet_dtype.cuh \
	kernels/device/ndet_tree.cuh kernels/device/ndet_copy.cuh \
	kernels/device/ndet_reduce.cuh kernels/device/ndet_flags.cuh \
	kernels/device/ndet_ll.cuh kernels/device/ndet_push.cuh \
	kernels/device/ndet_open.cuh kernels/device/ndet_pull.cuh kernels/device/ndet_hosts.cuh \
	kernels/device/ndet_tables.cuh kernels/device/ndet_path_kernels.cuh
kernels_libndet_kernels_la_LIBTOOLFLAGS = --tag=CC

.cu.lo:
	$(AM_V_GEN)$(NVCC_LT) $@ $< $(NVCC_LAUNCHER) $(NVCC) $(NVCC_FLAGS)

# The fp8 kernels: their own targets (NVCC_FP8_GENCODE, m4/check_pkg_nvcc.m4), so
# their own rule (the .cu.lo rule takes NVCC_GENCODE).
ndet_fp8_objects = $(ndet_fp8_sources:.cu=.lo)
NVCC_FP8_FLAGS = $(NVCC_BASE_FLAGS) $(NVCC_FP8_GENCODE)
$(ndet_fp8_objects): kernels/%.lo: kernels/%.cu
	$(AM_V_GEN)$(NVCC_LT) $@ $< $(NVCC_LAUNCHER) $(NVCC) $(NVCC_FP8_FLAGS)

# The all-ranks-in-one-launch kernels (compute-sanitizer mode of the GPU test
# driver): the same template code as the library's kernels, needed by nothing else.
# Only test/gpu/ndet_gpu_test links them, so the library never carries them, and
# they are built for NVCC_ALL_RANKS_GENCODE, by default compute_80 PTX alone (no
# ptxas here: the driver compiles them on first use and caches the result;
# m4/check_pkg_nvcc.m4).  Built where a GPU can run them (--enable-all-ranks-kernels).
if NDET_ALL_RANKS_KERNELS
noinst_LTLIBRARIES += kernels/libndet_all_ranks.la
endif
kernels_libndet_all_ranks_la_SOURCES = kernels/ndet_kernels_all_ranks.cu \
	kernels/ndet_kernels_all_ranks_f32.cu kernels/ndet_kernels_all_ranks_f16.cu \
	kernels/ndet_kernels_all_ranks_bf16.cu kernels/ndet_kernels_all_ranks_f64.cu \
	kernels/ndet_kernels_all_ranks_f8e4m3.cu kernels/ndet_kernels_all_ranks_f8e5m2.cu
kernels_libndet_all_ranks_la_LIBTOOLFLAGS = --tag=CC
ndet_all_ranks_objects = $(foreach t,$(ndet_kernel_types) $(ndet_fp8_types), \
	kernels/ndet_kernels_all_ranks_$(t).lo)
NVCC_ALL_RANKS_FLAGS = $(NVCC_BASE_FLAGS) $(NVCC_ALL_RANKS_GENCODE)
$(ndet_all_ranks_objects): kernels/%.lo: kernels/%.cu
	$(AM_V_GEN)$(NVCC_LT) $@ $< $(NVCC_LAUNCHER) $(NVCC) $(NVCC_ALL_RANKS_FLAGS)

# The benchmark and test kernels (flag round trip, copy loop, fill): only
# tools/nccl-det-perf and the GPU test programs link them (tools/local.mk,
# test/local.mk), so the libraries carry none of them.  Built for NVCC_GENCODE.
noinst_LTLIBRARIES += kernels/libndet_bench_kernels.la
kernels_libndet_bench_kernels_la_SOURCES = kernels/ndet_bench.cu kernels/ndet_bench.h
kernels_libndet_bench_kernels_la_LIBTOOLFLAGS = --tag=CC

# Header dependencies, as nvcc wrote them (nvcc-lt.sh); none before the first build.
-include $(wildcard kernels/.deps/*.Plo)
CLEANFILES += kernels/.deps/*.Plo
