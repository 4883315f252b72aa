# Loading: finding the real NCCL, forwarding, the preload's behaviour in every kind of
# process, the drop-in libnccl.so.2, the plugins, DT_NEEDED.

# Forwarding: test_forward.sh runs test_forward_script with and without the preload.
check_PROGRAMS += test/loading/test_forward_script
test_loading_test_forward_script_SOURCES = test/loading/test_forward_script.c
test_loading_test_forward_script_LDFLAGS = $(AM_LDFLAGS) -no-install
test_loading_test_forward_script_LDADD = test/fake_nccl/libnccl.la

# Preload behaviour: thread probe, and an "extension module" that needs libnccl.so.2,
# for test_preload_local (NCCL loaded RTLD_LOCAL behind a dlopen).
check_PROGRAMS += test/loading/test_preload_threads
test_loading_test_preload_threads_SOURCES = test/loading/test_preload_threads.c

# An ncclDetGetNcclLibrary before NCCL is loaded (test_early_query.sh).
check_PROGRAMS += test/loading/test_early_query
test_loading_test_early_query_SOURCES = test/loading/test_early_query.c
test_loading_test_early_query_LDADD = -ldl

check_LTLIBRARIES += test/loading/libtest_preload_ext.la
test_loading_libtest_preload_ext_la_SOURCES = test/loading/test_preload_ext.c
test_loading_libtest_preload_ext_la_LDFLAGS = $(AM_LDFLAGS) -module -avoid-version \
	-rpath /nowhere -no-undefined -Wl,-rpath,$(abs_top_builddir)/test/fake_nccl/.libs
test_loading_libtest_preload_ext_la_LIBADD = test/fake_nccl/libnccl.la

if HAVE_CMOCKA
# Symbol resolution: the preload layers linked into the test, with the loader
# functions wrapped so that each strategy and failure can be forced.  The divert
# hooks run on the host-only backend (no CUDA call of ours).
check_PROGRAMS += test/loading/test_resolve
test_loading_test_resolve_SOURCES = test/loading/test_resolve.c
test_loading_test_resolve_CFLAGS = $(TEST_CFLAGS)
test_loading_test_resolve_LDFLAGS = $(AM_LDFLAGS) -no-install \
	-Wl,--wrap=dlsym -Wl,--wrap=dlopen -Wl,--wrap=dl_iterate_phdr
test_loading_test_resolve_LDADD = $(NDET_PRELOAD_LIBS) test/support/libndet_fake_backend.la \
	$(NDET_PURE_TEST_LIBS) test/fake_nccl/libfake_nccl_helpers.la test/fake_nccl/libnccl.la \
	$(TEST_LIBS)
TESTS += test/loading/test_resolve

check_PROGRAMS += test/loading/test_preload_local
test_loading_test_preload_local_SOURCES = test/loading/test_preload_local.c
test_loading_test_preload_local_CFLAGS = $(TEST_CFLAGS)
test_loading_test_preload_local_LDFLAGS = $(AM_LDFLAGS) -no-install
test_loading_test_preload_local_LDADD = test/fake_nccl/libfake_nccl_helpers.la $(TEST_LIBS)
TESTS += test/loading/test_preload_local.sh
endif

# The trampoline caller, the plugin loader, an empty object for a fake Python package.
check_PROGRAMS += test/loading/test_dropin_load
test_loading_test_dropin_load_SOURCES = test/loading/test_dropin_load.c
test_loading_test_dropin_load_LDADD = -ldl

# A malloc that is not libc's, preloaded by test_dropin_search.sh.
check_LTLIBRARIES += test/loading/libtest_arena_malloc.la
test_loading_libtest_arena_malloc_la_SOURCES = test/loading/test_arena_malloc.c
test_loading_libtest_arena_malloc_la_LDFLAGS = $(AM_LDFLAGS) -module -avoid-version \
	-rpath /nowhere

check_LTLIBRARIES += test/loading/libndet_test_anchor.la
test_loading_libndet_test_anchor_la_SOURCES = test/loading/test_anchor.c
test_loading_libndet_test_anchor_la_LDFLAGS = $(AM_LDFLAGS) -module -avoid-version \
	-rpath /nowhere

check_PROGRAMS += test/loading/test_plugin_load
test_loading_test_plugin_load_SOURCES = test/loading/test_plugin_load.c
test_loading_test_plugin_load_LDFLAGS = $(AM_LDFLAGS) -no-install
test_loading_test_plugin_load_LDADD = test/fake_nccl/libfake_nccl_helpers.la \
	test/fake_nccl/libnccl.la -ldl

TESTS += test/loading/test_forward.sh test/loading/test_preload_silent.sh \
	test/loading/test_early_query.sh \
	test/loading/test_preload_exports.sh test/loading/test_dtneeded.sh \
	test/loading/test_plugins.sh
EXTRA_DIST += test/loading/test_forward.sh test/loading/test_preload_silent.sh \
	test/loading/test_early_query.sh \
	test/loading/test_preload_local.sh test/loading/test_preload_exports.sh \
	test/loading/test_dtneeded.sh test/loading/test_plugins.sh \
	test/loading/test_dropin_exports.sh test/loading/test_dropin_calls.sh \
	test/loading/test_dropin_search.sh test/loading/test_dropin_copies.sh

if NDET_DROPIN
if HAVE_CMOCKA
# The drop-in built against the fake NCCL's export list, plus one name the fake lacks
# (ncclTestOnlyMissing), with the host-only backend (the fake works on host memory)
# and a loader-cache/system root that does not exist (a hermetic search).
check_LTLIBRARIES += test/dropin_fake/libnccl.la
test_dropin_fake_libnccl_la_SOURCES = test/support/ndet_fake_preload.c
nodist_test_dropin_fake_libnccl_la_SOURCES = test/dropin_fake/ndet_dropin_tramp.S
test_dropin_fake_libnccl_la_CPPFLAGS = $(AM_CPPFLAGS) \
	-DNDET_TEST_SYSTEM_ROOT='"/nonexistent/ndet-test-root"'
test_dropin_fake_libnccl_la_LDFLAGS = $(AM_LDFLAGS) -rpath /nowhere -version-number 2:0:0 \
	-no-undefined -Wl,--version-script=test/dropin_fake/libnccl-dropin.map
test_dropin_fake_libnccl_la_LIBADD = $(NDET_DROPIN_LIBS) test/support/libndet_fake_backend.la \
	$(NDET_PURE_TEST_LIBS) $(PTHREAD_LIBS)
EXTRA_test_dropin_fake_libnccl_la_DEPENDENCIES = test/dropin_fake/libnccl-dropin.map

test/dropin_fake/nccl-exports.txt: test/fake_nccl/libnccl.la $(srcdir)/src/dropin/ndet-dropin-gen.sh
	$(AM_V_GEN)$(MKDIR_P) test/dropin_fake && { \
		$(NDET_DROPIN_GEN) exports-from-library "$(NM)" test/fake_nccl/.libs/libnccl.so.2 && \
		printf '%s\n' ncclTestOnlyMissing pncclTestOnlyMissing; } >$@.tmp && mv $@.tmp $@

test/dropin_fake/ndet_dropin_tramp.S: test/dropin_fake/nccl-exports.txt $(NDET_DROPIN_GEN_DEPS)
	$(AM_V_GEN)$(NDET_DROPIN_GEN) trampolines test/dropin_fake/nccl-exports.txt \
		$(srcdir)/src/preload/ndet_shim.c >$@.tmp && mv $@.tmp $@

test/dropin_fake/libnccl-dropin.map: test/dropin_fake/nccl-exports.txt $(NDET_DROPIN_GEN_DEPS)
	$(AM_V_GEN)$(NDET_DROPIN_GEN) map test/dropin_fake/nccl-exports.txt \
		$(srcdir)/src/preload/ndet_shim.c >$@.tmp && mv $@.tmp $@

CLEANFILES += test/dropin_fake/nccl-exports.txt test/dropin_fake/ndet_dropin_tramp.S \
	test/dropin_fake/libnccl-dropin.map

TESTS += test/loading/test_dropin_exports.sh test/loading/test_dropin_calls.sh \
	test/loading/test_dropin_search.sh test/loading/test_dropin_copies.sh
endif
endif
