# The divert layer: per-communicator state, setup through the real NCCL, groups,
# PreMulSum ops, faults.  It calls NCCL through src/resolve and the engine through
# ndet_backend_default(), which the library linked after it defines (the CUDA engine
# in the installed libraries, the host-only engine in the CPU tests).
noinst_LTLIBRARIES += src/divert/libndet_divert.la
src_divert_libndet_divert_la_SOURCES = \
	src/divert/ndet_comm.c src/divert/ndet_comm.h src/divert/ndet_comm_internal.h \
	src/divert/ndet_comm_call.c src/divert/ndet_comm_exit.c src/divert/ndet_comm_query.c \
	src/divert/ndet_comm_hosts.c src/divert/ndet_comm_setup.c \
	src/divert/ndet_group.c src/divert/ndet_group.h
