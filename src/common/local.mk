# The ground every layer stands on: status codes and their NCCL mapping, logging, the
# environment and conf files, the settings table, the dtype/op facts.  Pure C: no
# CUDA or NCCL call.
noinst_LTLIBRARIES += src/common/libndet_common.la
src_common_libndet_common_la_SOURCES = \
	src/common/ndet_status.c src/common/ndet_status.h \
	src/common/ndet_log.c src/common/ndet_log.h \
	src/common/ndet_env.c src/common/ndet_env.h \
	src/common/ndet_settings.c src/common/ndet_settings.h \
	src/common/ndet_dtype.c src/common/ndet_dtype.h \
	src/common/ndet_check.h
