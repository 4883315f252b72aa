# CUDA kernels (--threads 0: one nvcc thread per target architecture): two libtool
# convenience libraries (the library's kernels; the GPU test driver's all-ranks
# kernels, below) with extern "C" launchers declared in a C header
# (kernels/ndet_kernels.h).  Compiled by nvcc through
# build-aux/nvcc-lt.sh (libtool cannot drive nvcc).

NVCC_BASE_FLAGS = -std=c++17 -O3 --fmad=false --threads 0 -Xcompiler -fvisibility=hidden \
	-Xcompiler -fno-threadsafe-statics -Xcompiler -fno-exceptions \
	-Xcompiler -Wall -I$(top_srcdir)/kernels -I$(top_builddir)
NVCC_FLAGS = $(NVCC_BASE_FLAGS) $(NVCC_GENCODE)

noinst_LTLIBRARIES += kernels/libndet_kernels.la
# One translation unit per element type, so make -j builds them in parallel.
kernels_libndet_kernels_la_SOURCES = kernels/ndet_kernels.cu kernels/ndet_kernels_f32.cu \
	kernels/ndet_kernels_f16.cu kernels/ndet_kernels_bf16.cu kernels/ndet_kernels_f64.cu \
	kernels/ndet_kernels_f8e4m3.cu kernels/ndet_kernels_f8e5m2.cu \
	kernels/ndet_kernels.h kernels/ndet_kernels_impl.cuh
kernels_libndet_kernels_la_LIBTOOLFLAGS = --tag=CC
# The fp8 kernels: their own targets (NVCC_FP8_GENCODE, m4/check_pkg_nvcc.m4), so their
# own rule (the .cu.lo rule takes NVCC_GENCODE); the source is the object's name.
ndet_fp8_objects = kernels/ndet_kernels_f8e4m3.lo kernels/ndet_kernels_f8e5m2.lo
kernels/ndet_kernels_f8e4m3.lo: kernels/ndet_kernels_f8e4m3.cu
kernels/ndet_kernels_f8e5m2.lo: kernels/ndet_kernels_f8e5m2.cu
NVCC_FP8_FLAGS = $(NVCC_BASE_FLAGS) $(NVCC_FP8_GENCODE)
$(ndet_fp8_objects):
	$(AM_V_GEN)$(SHELL) $(top_srcdir)/build-aux/nvcc-lt.sh $@ $(NVCC) $(NVCC_FP8_FLAGS) \
		$(srcdir)/`echo $@ | sed 's/\.lo$$/.cu/'`

.cu.lo:
	$(AM_V_GEN)$(SHELL) $(top_srcdir)/build-aux/nvcc-lt.sh $@ $(NVCC) $(NVCC_FLAGS) $<

# nvcc-lt.sh writes no dependency files: name the headers the kernels include.
ndet_kernel_deps = $(srcdir)/kernels/ndet_kernels.h $(srcdir)/kernels/ndet_types.h \
	$(srcdir)/kernels/ndet_kernels_impl.cuh
kernels/ndet_kernels.lo kernels/ndet_kernels_f32.lo kernels/ndet_kernels_f16.lo \
	kernels/ndet_kernels_bf16.lo kernels/ndet_kernels_f64.lo \
	kernels/ndet_kernels_all_ranks.lo $(ndet_all_ranks_objects) $(ndet_fp8_objects): \
	$(ndet_kernel_deps)

# The all-ranks-in-one-launch kernels (compute-sanitizer mode of the GPU test
# driver): the same template code as the library's kernels, a third of their compile
# time, needed by nothing else.  Only test/gpu/ndet_gpu_test links them, so the
# library never carries them, and they are built for NVCC_ALL_RANKS_GENCODE, by
# default compute_80 PTX alone (no ptxas here: the driver compiles them on first use
# and caches the result; m4/check_pkg_nvcc.m4).
# Built where a GPU can run them (--enable-all-ranks-kernels, m4/check_pkg_nvcc.m4).
if NDET_ALL_RANKS_KERNELS
noinst_LTLIBRARIES += kernels/libndet_all_ranks.la
endif
kernels_libndet_all_ranks_la_SOURCES = kernels/ndet_kernels_all_ranks.cu \
	kernels/ndet_kernels_all_ranks_f32.cu kernels/ndet_kernels_all_ranks_f16.cu \
	kernels/ndet_kernels_all_ranks_bf16.cu kernels/ndet_kernels_all_ranks_f64.cu \
	kernels/ndet_kernels_all_ranks_f8e4m3.cu kernels/ndet_kernels_all_ranks_f8e5m2.cu
kernels_libndet_all_ranks_la_LIBTOOLFLAGS = --tag=CC
ndet_all_ranks_objects = kernels/ndet_kernels_all_ranks_f32.lo \
	kernels/ndet_kernels_all_ranks_f16.lo kernels/ndet_kernels_all_ranks_bf16.lo \
	kernels/ndet_kernels_all_ranks_f64.lo kernels/ndet_kernels_all_ranks_f8e4m3.lo \
	kernels/ndet_kernels_all_ranks_f8e5m2.lo
NVCC_ALL_RANKS_FLAGS = $(NVCC_BASE_FLAGS) $(NVCC_ALL_RANKS_GENCODE)
kernels/ndet_kernels_all_ranks_f32.lo: kernels/ndet_kernels_all_ranks_f32.cu
kernels/ndet_kernels_all_ranks_f16.lo: kernels/ndet_kernels_all_ranks_f16.cu
kernels/ndet_kernels_all_ranks_bf16.lo: kernels/ndet_kernels_all_ranks_bf16.cu
kernels/ndet_kernels_all_ranks_f64.lo: kernels/ndet_kernels_all_ranks_f64.cu
kernels/ndet_kernels_all_ranks_f8e4m3.lo: kernels/ndet_kernels_all_ranks_f8e4m3.cu
kernels/ndet_kernels_all_ranks_f8e5m2.lo: kernels/ndet_kernels_all_ranks_f8e5m2.cu
# Their own rule (the .cu.lo rule takes NVCC_GENCODE): the source is the object's name.
$(ndet_all_ranks_objects):
	$(AM_V_GEN)$(SHELL) $(top_srcdir)/build-aux/nvcc-lt.sh $@ $(NVCC) $(NVCC_ALL_RANKS_FLAGS) \
		$(srcdir)/`echo $@ | sed 's/\.lo$$/.cu/'`
