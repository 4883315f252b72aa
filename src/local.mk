# Host C code.  Pure logic (no CUDA/NCCL calls) goes into libndet_logic.la so the
# CPU tests reach it without a GPU; CUDA-using host code into libndet_engine.la.

noinst_LTLIBRARIES += src/libndet_logic.la
src_libndet_logic_la_SOURCES = \
	src/ndet_status.c src/ndet_status.h \
	src/ndet_log.c src/ndet_log.h \
	src/ndet_env.c src/ndet_env.h \
	src/ndet_settings.c src/ndet_settings.h

# The CPU reference of the determinism contract, in its own library so its flags hold
# whoever links it: contraction into FMAs or fast-math reassociation would change the
# bits the GPU is checked against.
noinst_LTLIBRARIES += src/libndet_reference.la
src_libndet_reference_la_SOURCES = src/ndet_reference.c src/ndet_reference.h \
	kernels/ndet_types.h
src_libndet_reference_la_CFLAGS = $(AM_CFLAGS) -ffp-contract=off -fno-fast-math
src_libndet_logic_la_LIBADD = src/libndet_reference.la

# Setup record: wire format and the table verdict every rank computes alike.
src_libndet_logic_la_SOURCES += src/ndet_setup_record.c src/ndet_setup_record.h

# Launch planning: pure, so the CPU tests prove it ignores everything local.
src_libndet_logic_la_SOURCES += src/ndet_plan.c src/ndet_plan.h kernels/ndet_kernels.h

# The engine: pools, CUDA IPC, setup rounds, launches.  Needs the CUDA runtime, which
# every final link takes statically ($(CUDA_STATIC_LIBS)) so that DT_NEEDED stays
# libc-only.
noinst_LTLIBRARIES += src/libndet_engine.la
src_libndet_engine_la_SOURCES = src/ndet_engine.c src/ndet_engine.h src/ndet_cuda.h \
	src/ndet_settings.h
src_libndet_engine_la_LIBADD = kernels/libndet_kernels.la src/libndet_logic.la
