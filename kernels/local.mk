# CUDA kernels (--threads 0: one nvcc thread per target architecture): their own libtool convenience library with extern "C" launchers
# declared in a C header (kernels/ndet_kernels.h).  Compiled by nvcc through
# build-aux/nvcc-lt.sh (libtool cannot drive nvcc).

NVCC_FLAGS = -std=c++17 -O3 --fmad=false --threads 0 -Xcompiler -fvisibility=hidden \
	-Xcompiler -fno-threadsafe-statics -Xcompiler -fno-exceptions \
	-Xcompiler -Wall $(NVCC_GENCODE) -I$(top_srcdir)/kernels -I$(top_builddir)

noinst_LTLIBRARIES += kernels/libndet_kernels.la
# One translation unit per element type, so make -j builds them in parallel.
kernels_libndet_kernels_la_SOURCES = kernels/ndet_kernels.cu kernels/ndet_kernels_f32.cu \
	kernels/ndet_kernels_f16.cu kernels/ndet_kernels_bf16.cu kernels/ndet_kernels_f64.cu \
	kernels/ndet_kernels.h kernels/ndet_kernels_impl.cuh
kernels_libndet_kernels_la_LIBTOOLFLAGS = --tag=CC

.cu.lo:
	$(AM_V_GEN)$(SHELL) $(top_srcdir)/build-aux/nvcc-lt.sh $@ $(NVCC) $(NVCC_FLAGS) $<

# nvcc-lt.sh writes no dependency files: name the headers the kernels include.
ndet_kernel_deps = $(srcdir)/kernels/ndet_kernels.h $(srcdir)/kernels/ndet_types.h \
	$(srcdir)/kernels/ndet_kernels_impl.cuh
kernels/ndet_kernels.lo kernels/ndet_kernels_f32.lo kernels/ndet_kernels_f16.lo \
	kernels/ndet_kernels_bf16.lo kernels/ndet_kernels_f64.lo: $(ndet_kernel_deps)
