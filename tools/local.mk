# Installed tools.
bin_PROGRAMS += tools/nccl-det-perf
tools_nccl_det_perf_SOURCES = tools/nccl-det-perf.c
tools_nccl_det_perf_LDADD = src/libndet_engine.la $(CUDA_STATIC_LIBS) -lm $(PTHREAD_LIBS)
