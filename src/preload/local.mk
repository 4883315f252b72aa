# What libnccl-det.so exports: the interposed NCCL functions (the shim), nccl-det's
# own API, and the tuner and net plugin structs (NCCL dlopens plugins RTLD_LOCAL, so
# there the interposers are never reached and only the plugin structs count).
noinst_LTLIBRARIES += src/preload/libndet_preload.la
src_preload_libndet_preload_la_SOURCES = \
	src/preload/ndet_shim.c \
	src/preload/ndet_tuner.c src/preload/ndet_tuner.h \
	src/preload/ndet_netplugin.c src/preload/ndet_netplugin.h
EXTRA_DIST += src/preload/libnccl-det.map
