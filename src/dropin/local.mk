# The drop-in libnccl.so.2: nccl-det under NCCL's SONAME, installed alone in
# $(libdir)/nccl-det/ so that putting that directory first in the loader's path (or
# preloading the file) makes every dlopen("libnccl.so.2") and DT_NEEDED libnccl.so.2
# of the job take it (src/dropin/ndet_dropin.h).  Built from the same layers as
# libnccl-det.so, with the drop-in variants of the shim and the resolver
# (NDET_BUILD_DROPIN: its own search order, pnccl* aliases) plus
# trampolines generated from the export list of the NCCL configure found:
#   nm -D --defined-only of $(NCCL_LIB_DIR)/libnccl.so.2, else the functions nccl.h
#   declares (no device-API host functions then: configure's summary says which),
#   and NCCL 2.21-2.29's functions that return ncclResult_t or nothing.
dropindir = $(libdir)/nccl-det

if NDET_DROPIN
# The shim in its drop-in variant (pnccl* aliases), with the drop-in's own code.
noinst_LTLIBRARIES += src/dropin/libndet_dropin.la
src_dropin_libndet_dropin_la_SOURCES = src/preload/ndet_shim.c \
	src/dropin/ndet_dropin.c src/dropin/ndet_dropin.h
src_dropin_libndet_dropin_la_CPPFLAGS = $(AM_CPPFLAGS) -DNDET_BUILD_DROPIN=1

dropin_LTLIBRARIES = src/dropin/libnccl.la
src_dropin_libnccl_la_SOURCES =
nodist_src_dropin_libnccl_la_SOURCES = src/dropin/ndet_dropin_tramp.S
src_dropin_libnccl_la_LDFLAGS = $(AM_LDFLAGS) -version-number 2:0:0 -shared -no-undefined \
	-Wl,--version-script=src/dropin/libnccl-dropin.map $(NDET_EXCLUDE_LIBS)
src_dropin_libnccl_la_LIBADD = $(NDET_DROPIN_LIBS) $(NDET_ENGINE_LIBS) $(NDET_CORE_LIBS) \
	$(CUDA_STATIC_LIBS) $(PTHREAD_LIBS)
EXTRA_src_dropin_libnccl_la_DEPENDENCIES = src/dropin/libnccl-dropin.map
endif

NDET_DROPIN_GEN = $(SHELL) $(srcdir)/src/dropin/ndet-dropin-gen.sh
NDET_DROPIN_GEN_DEPS = $(srcdir)/src/dropin/ndet-dropin-gen.sh $(srcdir)/src/preload/ndet_shim.c

# Plus every function NCCL 2.21-2.29 exports that returns ncclResult_t or nothing
# (src/dropin/nccl-api-names.txt), whichever NCCL the build found.
src/dropin/nccl-exports.txt: $(srcdir)/src/dropin/ndet-dropin-gen.sh \
		$(srcdir)/src/dropin/nccl-api-names.txt Makefile
	$(AM_V_GEN)$(MKDIR_P) src/dropin && \
	if test "$(NDET_NCCL_EXPORTS_KIND)" = library; then \
		$(NDET_DROPIN_GEN) exports-from-library "$(NM)" "$(NDET_NCCL_EXPORTS_FROM)"; \
	else \
		$(NDET_DROPIN_GEN) exports-from-header "$(NDET_NCCL_EXPORTS_FROM)"; \
	fi >$@.found && test -s $@.found && \
	$(NDET_DROPIN_GEN) known-names $(srcdir)/src/dropin/nccl-api-names.txt >$@.known && \
	test -s $@.known && LC_ALL=C sort -u $@.found $@.known >$@.tmp && \
	rm -f $@.found $@.known && mv $@.tmp $@

src/dropin/ndet_dropin_tramp.S: src/dropin/nccl-exports.txt $(NDET_DROPIN_GEN_DEPS)
	$(AM_V_GEN)$(NDET_DROPIN_GEN) trampolines src/dropin/nccl-exports.txt \
		$(srcdir)/src/preload/ndet_shim.c >$@.tmp && mv $@.tmp $@

src/dropin/libnccl-dropin.map: src/dropin/nccl-exports.txt $(NDET_DROPIN_GEN_DEPS)
	$(AM_V_GEN)$(NDET_DROPIN_GEN) map src/dropin/nccl-exports.txt \
		$(srcdir)/src/preload/ndet_shim.c >$@.tmp && mv $@.tmp $@

CLEANFILES += src/dropin/nccl-exports.txt src/dropin/nccl-exports.txt.found \
	src/dropin/nccl-exports.txt.known src/dropin/nccl-exports.txt.tmp \
	src/dropin/ndet_dropin_tramp.S \
	src/dropin/libnccl-dropin.map
EXTRA_DIST += src/dropin/ndet-dropin-gen.sh src/dropin/nccl-api-names.txt
