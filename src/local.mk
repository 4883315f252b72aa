# Host C code, one convenience library per layer (doc/layout.md draws them and what
# each may include; test/build/test_layers.sh checks it).  The installed libraries are
# assembled here from those layers.

include src/common/local.mk
include src/reference/local.mk
include src/protocol/local.mk
include src/engine/local.mk
include src/resolve/local.mk
include src/divert/local.mk
include src/preload/local.mk

# What the final links take, upper layers first (static convenience archives in
# programs: a library's users before it).  The divert layer's backend comes after it.
NDET_CORE_LIBS = src/protocol/libndet_protocol.la src/common/libndet_common.la
NDET_ENGINE_LIBS = src/engine/libndet_engine.la kernels/libndet_kernels.la
NDET_PRELOAD_LIBS = src/preload/libndet_preload.la src/divert/libndet_divert.la \
	src/resolve/libndet_resolve.la
NDET_DROPIN_LIBS = src/dropin/libndet_dropin.la src/divert/libndet_divert.la \
	src/resolve/libndet_resolve_dropin.la

# What the shared libraries link statically from outside this tree (the CUDA runtime)
# exports nothing, whatever the version script's patterns match; the layers'
# archives are this tree's own, and the version script alone says what they export.
NDET_EXCLUDE_LIBS = -Wl,--exclude-libs,libcudart_static.a

# The LD_PRELOAD library.  Its DT_NEEDED list must hold only libc-family libraries
# (test/loading/test_dtneeded.sh): it finds the real NCCL at run time (src/resolve) and
# must never pull a libnccl or libcudart in ahead of the application's own, so the
# CUDA runtime is linked statically.  Only the names in libnccl-det.map are exported.
#
# The same file is the tuner and net plugin (installed as libnccl-tuner-det.so and
# libnccl-net-det.so, symlinks to it): NCCL dlopens plugins RTLD_LOCAL, so there the
# interposers are never reached and only the plugin structs count.
lib_LTLIBRARIES += src/libnccl-det.la
src_libnccl_det_la_SOURCES =
src_libnccl_det_la_LDFLAGS = $(AM_LDFLAGS) -module -avoid-version -shared -no-undefined \
	-Wl,--version-script=$(srcdir)/src/preload/libnccl-det.map $(NDET_EXCLUDE_LIBS)
src_libnccl_det_la_LIBADD = $(NDET_PRELOAD_LIBS) $(NDET_ENGINE_LIBS) $(NDET_CORE_LIBS) \
	$(CUDA_STATIC_LIBS) $(PTHREAD_LIBS)
EXTRA_src_libnccl_det_la_DEPENDENCIES = src/preload/libnccl-det.map

# The plugin names of the one library, made at install time.
NDET_PLUGIN_LINKS = libnccl-tuner-det.so libnccl-net-det.so

# No libtool archives (.la) are installed: nothing links these libraries (they are
# preloaded, dlopened or found as libnccl.so.2), and a .la only misleads a build.
# Without the .la, uninstall removes the libraries by name.
# (libnccl-det.la goes with install-exec, the drop-in's with install-data: automake
# files a directory of its own, dropindir, under data.)
install-exec-hook:
	cd "$(DESTDIR)$(libdir)" && for link in $(NDET_PLUGIN_LINKS); do \
		rm -f "$$link" && $(LN_S) libnccl-det.so "$$link" || exit 1; \
	done
	rm -f "$(DESTDIR)$(libdir)/libnccl-det.la"

install-data-hook:
	rm -f "$(DESTDIR)$(dropindir)/libnccl.la"

uninstall-hook:
	for link in $(NDET_PLUGIN_LINKS); do rm -f "$(DESTDIR)$(libdir)/$$link"; done
	rm -f "$(DESTDIR)$(libdir)/libnccl-det.so" "$(DESTDIR)$(dropindir)"/libnccl.so*
	-rmdir "$(DESTDIR)$(dropindir)" 2>/dev/null

nodist_include_HEADERS = include/nccl_det.h

# The installed layout, and DT_NEEDED of the installed libraries (make installcheck,
# run by make distcheck).  nccl-det-run is checked where it knows its paths: installed.
installcheck-local:
	$(SHELL) $(srcdir)/test/build/installcheck.sh "$(DESTDIR)$(libdir)" "$(DESTDIR)$(includedir)" \
		"$(DESTDIR)$(bindir)"
	NDET_TOP_BUILDDIR='$(abs_top_builddir)' NDET_TOP_SRCDIR='$(abs_top_srcdir)' \
		NDET_SANITIZER='$(SANITIZER_LDFLAGS)' $(SHELL) $(srcdir)/test/loading/test_dtneeded.sh \
		"$(DESTDIR)$(libdir)/libnccl-det.so" "$(DESTDIR)$(dropindir)/libnccl.so.2"

include src/dropin/local.mk
