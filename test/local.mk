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

# ---- fake NCCL -------------------------------------------------------------------
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

TESTS += test/fake_nccl/test_fake_exports.sh
EXTRA_DIST += test/fake_nccl/libnccl.map test/fake_nccl/test_fake_exports.sh

if HAVE_CMOCKA
# The fake on its own: rendezvous, groups, collectives, non-blocking, faults, trace.
check_PROGRAMS += test/test_fake_nccl
test_test_fake_nccl_SOURCES = test/fake_nccl/test_fake_nccl.c
test_test_fake_nccl_CFLAGS = $(TEST_CFLAGS)
test_test_fake_nccl_LDFLAGS = $(AM_LDFLAGS) -no-install
test_test_fake_nccl_LDADD = test/fake_nccl/libfake_nccl_helpers.la \
	test/fake_nccl/libnccl.la $(TEST_LIBS)
TESTS += test/test_fake_nccl
endif
