# Host C code.  Pure logic (no CUDA/NCCL calls) goes into libndet_logic.la so the
# CPU tests reach it without a GPU; CUDA-using host code into libndet_engine.la.

noinst_LTLIBRARIES += src/libndet_logic.la
src_libndet_logic_la_SOURCES = \
	src/ndet_status.c src/ndet_status.h \
	src/ndet_log.c src/ndet_log.h \
	src/ndet_env.c src/ndet_env.h

# The LD_PRELOAD library.  Its DT_NEEDED list must hold only libc-family libraries
# (test/test_dtneeded.sh): it finds the real NCCL at run time (ndet_resolve.c) and
# must never pull a libnccl or libcudart in ahead of the application's own.  Only the
# names in libnccl-det.map are exported; --exclude-libs keeps anything from static
# archives local as well.
lib_LTLIBRARIES += src/libnccl-det.la
src_libnccl_det_la_SOURCES = \
	src/ndet_shim.c \
	src/ndet_resolve.c src/ndet_resolve.h
src_libnccl_det_la_LDFLAGS = $(AM_LDFLAGS) -module -avoid-version -shared -no-undefined \
	-Wl,--version-script=$(srcdir)/src/libnccl-det.map -Wl,--exclude-libs,ALL
src_libnccl_det_la_LIBADD = src/libndet_logic.la $(PTHREAD_LIBS)
EXTRA_src_libnccl_det_la_DEPENDENCIES = src/libnccl-det.map
EXTRA_DIST += src/libnccl-det.map
