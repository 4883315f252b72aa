# Tests, by tier (doc/testing.md): each folder has its own local.mk.  `make check`
# runs every CPU test; tests that need a GPU exit 77 (SKIP) without one.
# Without CMocka (configure's default --enable-tests=auto warned) make check fails.
if HAVE_CMOCKA
TEST_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
TEST_LIBS = $(CMOCKA_LIBS) $(PTHREAD_LIBS)
endif

# The pure layers with the CPU reference: what most CPU tests link.
NDET_PURE_TEST_LIBS = src/reference/libndet_reference.la $(NDET_CORE_LIBS)

include test/support/local.mk
include test/fake_nccl/local.mk
include test/unit/local.mk
include test/fuzz/local.mk
include test/divert/local.mk
include test/loading/local.mk
include test/tools/local.mk
include test/build/local.mk
include test/gpu/local.mk

EXTRA_DIST += test/valgrind.sh
