# A fake libnccl.so.2 with NCCL's export shape (test/fake_nccl/fake_nccl.h), built for
# `make check` only.  -rpath makes libtool build it shared; -version-number 2:0:0 gives
# SONAME libnccl.so.2.  Programs link it with -no-install: they find it through their
# RUNPATH (never the real NCCL in the loader cache) and run without a libtool wrapper
# script, which matters under LD_PRELOAD.
check_LTLIBRARIES += test/fake_nccl/libnccl.la
test_fake_nccl_libnccl_la_SOURCES = test/fake_nccl/fake_core.c test/fake_nccl/fake_trace.c \
	test/fake_nccl/fake_exec.c test/fake_nccl/fake_api_comm.c test/fake_nccl/fake_api_coll.c \
	test/fake_nccl/fake_nccl.h test/fake_nccl/fake_nccl_internal.h
test_fake_nccl_libnccl_la_LDFLAGS = $(AM_LDFLAGS) -rpath /nowhere -version-number 2:0:0 \
	-no-undefined -Wl,--version-script=$(srcdir)/test/fake_nccl/libnccl.map
test_fake_nccl_libnccl_la_LIBADD = $(PTHREAD_LIBS) -lm
EXTRA_test_fake_nccl_libnccl_la_DEPENDENCIES = test/fake_nccl/libnccl.map

# The same fake as an NCCL older than 2.27: no ncclCommWindow(De)Register exported
# (nccl-det-perf --nccl-symmetric then says why its columns are unavailable).
check_LTLIBRARIES += test/fake_nccl_2_26/libnccl.la
test_fake_nccl_2_26_libnccl_la_SOURCES = $(test_fake_nccl_libnccl_la_SOURCES)
test_fake_nccl_2_26_libnccl_la_CFLAGS = $(AM_CFLAGS)
test_fake_nccl_2_26_libnccl_la_LDFLAGS = $(AM_LDFLAGS) -rpath /nowhere -version-number 2:0:0 \
	-no-undefined -Wl,--version-script=$(srcdir)/test/fake_nccl/libnccl-2.26.map
test_fake_nccl_2_26_libnccl_la_LIBADD = $(test_fake_nccl_libnccl_la_LIBADD)
EXTRA_test_fake_nccl_2_26_libnccl_la_DEPENDENCIES = test/fake_nccl/libnccl-2.26.map

# Helpers for tests that drive the fake (fake_nccl.h); not part of the fake itself.
check_LTLIBRARIES += test/fake_nccl/libfake_nccl_helpers.la
test_fake_nccl_libfake_nccl_helpers_la_SOURCES = test/fake_nccl/fake_nccl_helpers.c \
	test/fake_nccl/fake_nccl_trace.c

if HAVE_CMOCKA
# The fake on its own: rendezvous, groups, collectives, non-blocking, faults, trace.
check_PROGRAMS += test/fake_nccl/test_fake_nccl
test_fake_nccl_test_fake_nccl_SOURCES = test/fake_nccl/test_fake_nccl.c
test_fake_nccl_test_fake_nccl_CFLAGS = $(TEST_CFLAGS)
test_fake_nccl_test_fake_nccl_LDFLAGS = $(AM_LDFLAGS) -no-install
test_fake_nccl_test_fake_nccl_LDADD = test/fake_nccl/libfake_nccl_helpers.la \
	test/fake_nccl/libnccl.la $(TEST_LIBS)
TESTS += test/fake_nccl/test_fake_nccl
endif

TESTS += test/fake_nccl/test_fake_exports.sh
EXTRA_DIST += test/fake_nccl/libnccl.map test/fake_nccl/libnccl-2.26.map \
	test/fake_nccl/test_fake_exports.sh
