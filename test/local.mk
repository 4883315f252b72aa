# CPU tests (CMocka) run by `make check`.  Tests that need a GPU exit 77 (SKIP).
if HAVE_CMOCKA
TEST_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
TEST_LIBS = $(CMOCKA_LIBS) $(PTHREAD_LIBS)

check_PROGRAMS += test/test_status
test_test_status_SOURCES = test/test_status.c
test_test_status_CFLAGS = $(TEST_CFLAGS)
test_test_status_LDADD = src/libndet_logic.la $(TEST_LIBS)
TESTS += test/test_status
endif

# ---- fake NCCL, symbol resolution, forwarding and preload tests --------------------
# A fake libnccl.so.2 with NCCL's export shape (test/fake_nccl/fake_nccl.h), built for
# `make check` only.  -rpath makes libtool build it shared; -version-number 2:0:0 gives
# SONAME libnccl.so.2.  Programs link it with -no-install: they find it through their
# RUNPATH (never the real NCCL in the loader cache) and run without a libtool wrapper
# script, which matters under LD_PRELOAD.
check_LTLIBRARIES += test/fake_nccl/libnccl.la
test_fake_nccl_libnccl_la_SOURCES = test/fake_nccl/fake_nccl.c test/fake_nccl/fake_nccl.h
test_fake_nccl_libnccl_la_LDFLAGS = $(AM_LDFLAGS) -rpath /nowhere -version-number 2:0:0 \
	-no-undefined -Wl,--version-script=$(srcdir)/test/fake_nccl/libnccl.map
test_fake_nccl_libnccl_la_LIBADD = $(PTHREAD_LIBS) -lm
EXTRA_test_fake_nccl_libnccl_la_DEPENDENCIES = test/fake_nccl/libnccl.map

# Helpers for tests that drive the fake (fake_nccl.h); not part of the fake itself.
check_LTLIBRARIES += test/fake_nccl/libfake_nccl_helpers.la
test_fake_nccl_libfake_nccl_helpers_la_SOURCES = test/fake_nccl/fake_nccl_helpers.c \
	test/fake_nccl/fake_nccl_trace.c

# Forwarding: test_forward.sh runs test_forward_script with and without the preload.
check_PROGRAMS += test/test_forward_script
test_test_forward_script_SOURCES = test/test_forward_script.c
test_test_forward_script_LDFLAGS = $(AM_LDFLAGS) -no-install
test_test_forward_script_LDADD = test/fake_nccl/libnccl.la

# Preload behaviour: thread probe, and an "extension module" that needs libnccl.so.2,
# for test_preload_local (NCCL loaded RTLD_LOCAL behind a dlopen).
check_PROGRAMS += test/test_preload_threads
test_test_preload_threads_SOURCES = test/test_preload_threads.c

check_LTLIBRARIES += test/libtest_preload_ext.la
test_libtest_preload_ext_la_SOURCES = test/test_preload_ext.c
test_libtest_preload_ext_la_LDFLAGS = $(AM_LDFLAGS) -module -avoid-version -rpath /nowhere \
	-no-undefined -Wl,-rpath,$(abs_top_builddir)/test/fake_nccl/.libs
test_libtest_preload_ext_la_LIBADD = test/fake_nccl/libnccl.la

TESTS += test/fake_nccl/test_fake_exports.sh test/test_forward.sh \
	test/test_preload_silent.sh test/test_preload_exports.sh test/test_dtneeded.sh
EXTRA_DIST += test/fake_nccl/libnccl.map test/fake_nccl/test_fake_exports.sh \
	test/test_preload_lib.sh test/test_forward.sh test/test_preload_silent.sh \
	test/test_preload_local.sh test/test_preload_exports.sh test/test_dtneeded.sh

if HAVE_CMOCKA
# The fake on its own: rendezvous, groups, collectives, non-blocking, faults, trace.
check_PROGRAMS += test/test_fake_nccl
test_test_fake_nccl_SOURCES = test/fake_nccl/test_fake_nccl.c
test_test_fake_nccl_CFLAGS = $(TEST_CFLAGS)
test_test_fake_nccl_LDFLAGS = $(AM_LDFLAGS) -no-install
test_test_fake_nccl_LDADD = test/fake_nccl/libfake_nccl_helpers.la \
	test/fake_nccl/libnccl.la $(TEST_LIBS)
TESTS += test/test_fake_nccl

# Symbol resolution: ndet_resolve.c and ndet_shim.c compiled into the test, with the
# loader functions wrapped so that each strategy and failure can be forced.
check_PROGRAMS += test/test_resolve
test_test_resolve_SOURCES = test/test_resolve.c src/ndet_resolve.c src/ndet_resolve.h \
	src/ndet_shim.c
test_test_resolve_CFLAGS = $(TEST_CFLAGS) -I$(top_srcdir)/test/fake_nccl
test_test_resolve_LDFLAGS = $(AM_LDFLAGS) -no-install \
	-Wl,--wrap=dlsym -Wl,--wrap=dlopen -Wl,--wrap=dl_iterate_phdr
test_test_resolve_LDADD = src/libndet_logic.la test/fake_nccl/libfake_nccl_helpers.la \
	test/fake_nccl/libnccl.la $(TEST_LIBS)
TESTS += test/test_resolve

check_PROGRAMS += test/test_preload_local
test_test_preload_local_SOURCES = test/test_preload_local.c
test_test_preload_local_CFLAGS = $(TEST_CFLAGS) -I$(top_srcdir)/test/fake_nccl
test_test_preload_local_LDFLAGS = $(AM_LDFLAGS) -no-install
test_test_preload_local_LDADD = test/fake_nccl/libfake_nccl_helpers.la $(TEST_LIBS)
TESTS += test/test_preload_local.sh
endif
