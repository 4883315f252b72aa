# Host C code.  Pure logic (no CUDA/NCCL calls) goes into libndet_logic.la so the
# CPU tests reach it without a GPU; CUDA-using host code into libndet_engine.la.

noinst_LTLIBRARIES += src/libndet_logic.la
src_libndet_logic_la_SOURCES = \
	src/ndet_status.c src/ndet_status.h \
	src/ndet_log.c src/ndet_log.h \
	src/ndet_env.c src/ndet_env.h \
	src/ndet_settings.c src/ndet_settings.h
