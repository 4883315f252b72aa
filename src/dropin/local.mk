# The drop-in libnccl.so.2: nccl-det under NCCL's SONAME, installed alone in
# $(libdir)/nccl-det/ so that putting that directory first in the loader's path (or
# preloading the file) makes every dlopen("libnccl.so.2") and DT_NEEDED libnccl.so.2
# of the job take it (src/ndet_dropin.h).  Built from the same sources as
# libnccl-det.so with NDET_BUILD_DROPIN (its own search order, pnccl* aliases) plus
# trampolines generated from the export list of the NCCL configure found:
#   nm -D --defined-only of $(NCCL_LIB_DIR)/libnccl.so.2, else the functions nccl.h
#   declares (no device-API host functions then: configure's summary says which).
dropindir = $(libdir)/nccl-det

if NDET_DROPIN
dropin_LTLIBRARIES = src/dropin/libnccl.la
src_dropin_libnccl_la_SOURCES = src/ndet_shim.c \
	src/ndet_resolve.c src/ndet_resolve.h \
	src/ndet_dropin.c src/ndet_dropin.h
nodist_src_dropin_libnccl_la_SOURCES = src/dropin/ndet_dropin_tramp.S
src_dropin_libnccl_la_CPPFLAGS = $(AM_CPPFLAGS) -DNDET_BUILD_DROPIN=1
src_dropin_libnccl_la_LDFLAGS = $(AM_LDFLAGS) -version-number 2:0:0 -shared -no-undefined \
	-Wl,--version-script=src/dropin/libnccl-dropin.map -Wl,--exclude-libs,ALL
src_dropin_libnccl_la_LIBADD = src/libndet_divert.la src/libndet_backend_cuda.la \
	$(CUDA_STATIC_LIBS) $(PTHREAD_LIBS)
EXTRA_src_dropin_libnccl_la_DEPENDENCIES = src/dropin/libnccl-dropin.map
endif

NDET_DROPIN_GEN = $(SHELL) $(srcdir)/src/dropin/ndet-dropin-gen.sh
NDET_DROPIN_GEN_DEPS = $(srcdir)/src/dropin/ndet-dropin-gen.sh $(srcdir)/src/ndet_shim.c

src/dropin/nccl-exports.txt: $(srcdir)/src/dropin/ndet-dropin-gen.sh Makefile
	$(AM_V_GEN)$(MKDIR_P) src/dropin && \
	if test "$(NDET_NCCL_EXPORTS_KIND)" = library; then \
		$(NDET_DROPIN_GEN) exports-from-library "$(NM)" "$(NDET_NCCL_EXPORTS_FROM)"; \
	else \
		$(NDET_DROPIN_GEN) exports-from-header "$(NDET_NCCL_EXPORTS_FROM)"; \
	fi >$@.tmp && test -s $@.tmp && mv $@.tmp $@

src/dropin/ndet_dropin_tramp.S: src/dropin/nccl-exports.txt $(NDET_DROPIN_GEN_DEPS)
	$(AM_V_GEN)$(NDET_DROPIN_GEN) trampolines src/dropin/nccl-exports.txt \
		$(srcdir)/src/ndet_shim.c >$@.tmp && mv $@.tmp $@

src/dropin/libnccl-dropin.map: src/dropin/nccl-exports.txt $(NDET_DROPIN_GEN_DEPS)
	$(AM_V_GEN)$(NDET_DROPIN_GEN) map src/dropin/nccl-exports.txt \
		$(srcdir)/src/ndet_shim.c >$@.tmp && mv $@.tmp $@

CLEANFILES += src/dropin/nccl-exports.txt src/dropin/ndet_dropin_tramp.S \
	src/dropin/libnccl-dropin.map
EXTRA_DIST += src/dropin/ndet-dropin-gen.sh
