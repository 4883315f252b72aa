# The CUDA engine: pools, CUDA IPC, the setup rounds, launches, teardown; and the
# backend of the divert layer built on it (ndet_backend_default).  Links the kernels;
# every final link takes the CUDA runtime statically ($(CUDA_STATIC_LIBS)) so that
# DT_NEEDED stays libc-only.
noinst_LTLIBRARIES += src/engine/libndet_engine.la
src_engine_libndet_engine_la_SOURCES = \
	src/engine/ndet_engine.c src/engine/ndet_engine.h src/engine/ndet_engine_internal.h \
	src/engine/ndet_engine_launch.c src/engine/ndet_engine_pool.c \
	src/engine/ndet_engine_setup.c src/engine/ndet_engine_teardown.c src/engine/ndet_cuda.h \
	src/engine/ndet_backend_cuda.c
