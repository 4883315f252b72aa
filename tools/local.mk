# Installed tools.
bin_PROGRAMS += tools/nccl-det-perf
# Its parts are listed in tools/perf/perf.h.  It uses src/resolve's table of NCCL
# functions for the entry points of the NCCL it loads itself.
tools_nccl_det_perf_SOURCES = tools/perf/perf.h tools/perf/main.c tools/perf/options.c \
	tools/perf/nccl.c tools/perf/rows.c tools/perf/run.c tools/perf/trace.c \
	tools/perf/probe.c tools/perf/shim.c
# The benchmark kernels (--link-probe's copy, the flag round trip) are its own.
tools_nccl_det_perf_LDADD = kernels/libndet_bench_kernels.la src/reference/libndet_reference.la \
	$(NDET_ENGINE_LIBS) \
	$(NDET_CORE_LIBS) $(CUDA_STATIC_LIBS) -ldl -lm $(PTHREAD_LIBS)

# What nccl-det does in this environment: settings, loading mode, real NCCL, GPUs.
bin_PROGRAMS += tools/nccl-det-info
tools_nccl_det_info_SOURCES = tools/nccl-det-info.c
tools_nccl_det_info_LDADD = $(NDET_CORE_LIBS) $(CUDA_STATIC_LIBS) -ldl $(PTHREAD_LIBS)
# Its build section names the GPU code the kernels were built for.
tools_nccl_det_info_CPPFLAGS = $(AM_CPPFLAGS) -DNDET_INFO_GENCODE='"$(NVCC_GENCODE)$(if $(NVCC_COMPRESS), (compressed))"' \
	-DNDET_INFO_FP8_GENCODE='"$(NVCC_FP8_GENCODE)"'

# The launcher; knows where `make install` puts the libraries.
bin_SCRIPTS += tools/nccl-det-run
tools/nccl-det-run: $(srcdir)/tools/nccl-det-run.in Makefile
	$(AM_V_GEN)$(MKDIR_P) tools && \
	sed -e 's|@libdir[@]|$(libdir)|g' -e 's|@PACKAGE_VERSION[@]|$(PACKAGE_VERSION)|g' \
		$(srcdir)/tools/nccl-det-run.in >$@.tmp && chmod +x $@.tmp && mv $@.tmp $@
CLEANFILES += tools/nccl-det-run
EXTRA_DIST += tools/nccl-det-run.in

# Installs the build's packages (Debian/Ubuntu): the first step of the README's
# commands and of .ci/run; not installed.
EXTRA_DIST += tools/install-deps.sh
