# Host C code.  Pure logic (no CUDA/NCCL calls) goes into libndet_logic.la so the
# CPU tests reach it without a GPU; CUDA-using host code into libndet_engine.la.

noinst_LTLIBRARIES += src/libndet_logic.la
src_libndet_logic_la_SOURCES = \
	src/ndet_status.c src/ndet_status.h \
	src/ndet_log.c src/ndet_log.h \
	src/ndet_env.c src/ndet_env.h \
	src/ndet_settings.c src/ndet_settings.h

# The CPU reference of the determinism contract, in its own library so its flags hold
# whoever links it: contraction into FMAs or fast-math reassociation would change the
# bits the GPU is checked against.
noinst_LTLIBRARIES += src/libndet_reference.la
src_libndet_reference_la_SOURCES = src/ndet_reference.c src/ndet_reference.h \
	kernels/ndet_types.h
src_libndet_reference_la_CFLAGS = $(AM_CFLAGS) -ffp-contract=off -fno-fast-math
src_libndet_logic_la_LIBADD = src/libndet_reference.la

# Setup record: wire format and the table verdict every rank computes alike.
src_libndet_logic_la_SOURCES += src/ndet_setup_record.c src/ndet_setup_record.h \
	src/ndet_setup.c src/ndet_setup.h

# Teardown decisions (what may be freed when) and the count of what engines hold:
# pure, so the CPU tests drive the same code through the host-only engine.
src_libndet_logic_la_SOURCES += src/ndet_teardown.c src/ndet_teardown.h

# The all-reduce decision: pure, so the CPU tests prove it uses rank-identical facts only.
src_libndet_logic_la_SOURCES += src/ndet_eligibility.c src/ndet_eligibility.h

# Launch planning: pure, so the CPU tests prove it ignores everything local.
src_libndet_logic_la_SOURCES += src/ndet_plan.c src/ndet_plan.h kernels/ndet_kernels.h \
	src/ndet_check.h

# The pool layout, from the engine configuration: pure, so the host-only engine of the
# CPU tests sizes its pools with the engine's own code.
src_libndet_logic_la_SOURCES += src/ndet_pool_layout.c src/ndet_pool_layout.h

# The engine: pools, CUDA IPC, setup rounds, launches.  Needs the CUDA runtime, which
# every final link takes statically ($(CUDA_STATIC_LIBS)) so that DT_NEEDED stays
# libc-only.
noinst_LTLIBRARIES += src/libndet_engine.la
src_libndet_engine_la_SOURCES = src/ndet_engine.c src/ndet_engine.h src/ndet_cuda.h \
	src/ndet_settings.h
src_libndet_engine_la_LIBADD = kernels/libndet_kernels.la src/libndet_logic.la

# The engine as the divert layer's backend (ndet_backend_default): linked after
# libndet_divert.la by the installed libraries.  The CPU tests link the host-only
# backend there instead (test/libndet_fake_backend.la), so they carry no kernel code
# and no CUDA runtime.
noinst_LTLIBRARIES += src/libndet_backend_cuda.la
src_libndet_backend_cuda_la_SOURCES = src/ndet_backend.c src/ndet_backend.h
src_libndet_backend_cuda_la_LIBADD = src/libndet_engine.la

# The divert layer: per-communicator state, setup through the real NCCL, groups.  It
# calls NCCL through ndet_resolve.c, which the final link provides (libnccl-det.la,
# or a test that compiles it in), and the engine through the backend of the link.
noinst_LTLIBRARIES += src/libndet_divert.la
src_libndet_divert_la_SOURCES = src/ndet_comm.c src/ndet_comm.h \
	src/ndet_group.c src/ndet_group.h src/ndet_backend.h
# No LIBADD: the backend library after it brings the pure logic (libndet_logic.la).

# The LD_PRELOAD library.  Its DT_NEEDED list must hold only libc-family libraries
# (test/test_dtneeded.sh): it finds the real NCCL at run time (ndet_resolve.c) and
# must never pull a libnccl or libcudart in ahead of the application's own, so the
# CUDA runtime is linked statically.  Only the names in libnccl-det.map are exported;
# --exclude-libs keeps anything from static archives (cudart included) local as well.
#
# The same file is the tuner and net plugin (installed as libnccl-tuner-det.so and
# libnccl-net-det.so, symlinks to it): NCCL dlopens plugins RTLD_LOCAL, so there the
# interposers are never reached and only the plugin structs count.
lib_LTLIBRARIES += src/libnccl-det.la
src_libnccl_det_la_SOURCES = \
	src/ndet_shim.c \
	src/ndet_resolve.c src/ndet_resolve.h \
	src/ndet_tuner.c src/ndet_tuner.h \
	src/ndet_netplugin.c src/ndet_netplugin.h
src_libnccl_det_la_LDFLAGS = $(AM_LDFLAGS) -module -avoid-version -shared -no-undefined \
	-Wl,--version-script=$(srcdir)/src/libnccl-det.map -Wl,--exclude-libs,ALL
src_libnccl_det_la_LIBADD = src/libndet_divert.la src/libndet_backend_cuda.la $(CUDA_STATIC_LIBS) \
	$(PTHREAD_LIBS)
EXTRA_src_libnccl_det_la_DEPENDENCIES = src/libnccl-det.map
EXTRA_DIST += src/libnccl-det.map

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
	$(SHELL) $(srcdir)/test/installcheck.sh "$(DESTDIR)$(libdir)" "$(DESTDIR)$(includedir)" \
		"$(DESTDIR)$(bindir)"
	NDET_TOP_BUILDDIR='$(abs_top_builddir)' NDET_TOP_SRCDIR='$(abs_top_srcdir)' \
		NDET_SANITIZER='$(SANITIZER_LDFLAGS)' $(SHELL) $(srcdir)/test/test_dtneeded.sh \
		"$(DESTDIR)$(libdir)/libnccl-det.so" "$(DESTDIR)$(dropindir)/libnccl.so.2"

include src/dropin/local.mk
