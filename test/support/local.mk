# What the tests share: deterministic test data, the host-only engine, the divert
# fixture, the fake CUDA runtime, the preload stand-in, the shell library.

# Test data shared by the reference tests and the GPU test programs: plain C (no
# CMocka, no CUDA, no nccl-det code), deterministic by seed.  Built by make (the GPU
# test programs are).
noinst_LTLIBRARIES += test/support/libndet_test_data.la
test_support_libndet_test_data_la_SOURCES = test/support/ndet_test_data.c \
	test/support/ndet_test_data.h
test_support_libndet_test_data_la_CFLAGS = $(AM_CFLAGS) -ffp-contract=off
test_support_libndet_test_data_la_LIBADD = -lm

if HAVE_CMOCKA
# A host-only engine for the divert tests: the real setup protocol on host memory,
# results from the CPU reference tree (test/support/ndet_fake_backend.h).  Links
# nothing itself: its users link the pure layers after it.
check_LTLIBRARIES += test/support/libndet_fake_backend.la
test_support_libndet_fake_backend_la_SOURCES = test/support/ndet_fake_backend.c \
	test/support/ndet_fake_backend.h test/support/ndet_big_alloc.h

# libnccl-det.so with the host-only backend, for preload tests with NCCL_DET_ENABLE=1
# against the fake NCCL (which works on host memory: the CUDA engine cannot serve it).
check_LTLIBRARIES += test/support/libnccl-det-fake.la
test_support_libnccl_det_fake_la_SOURCES = test/support/ndet_fake_preload.c
test_support_libnccl_det_fake_la_LDFLAGS = $(AM_LDFLAGS) -module -avoid-version -shared \
	-rpath /nowhere -no-undefined \
	-Wl,--version-script=$(srcdir)/src/preload/libnccl-det.map
test_support_libnccl_det_fake_la_LIBADD = $(NDET_PRELOAD_LIBS) \
	test/support/libndet_fake_backend.la $(NDET_PURE_TEST_LIBS) $(PTHREAD_LIBS)
EXTRA_test_support_libnccl_det_fake_la_DEPENDENCIES = src/preload/libnccl-det.map

# What the programs that play libnccl-det.so in front of the fake NCCL share.
SHIM_TEST_SOURCES = test/support/ndet_divert_fixture.c test/support/ndet_divert_fixture.h
SHIM_TEST_CFLAGS = $(TEST_CFLAGS)
SHIM_TEST_LDADD = $(NDET_PRELOAD_LIBS) test/support/libndet_fake_backend.la \
	test/support/libndet_test_data.la $(NDET_PURE_TEST_LIBS) \
	test/fake_nccl/libfake_nccl_helpers.la test/fake_nccl/libnccl.la $(TEST_LIBS)

# Programs that fail allocations on demand (test/support/ndet_alloc_fail.h) link
# test/support/ndet_alloc_fail.c and wrap the allocators of their own objects.
NDET_ALLOC_FAIL_WRAP = -Wl,--wrap=malloc -Wl,--wrap=calloc -Wl,--wrap=realloc \
	-Wl,--wrap=strdup
endif

EXTRA_DIST += test/support/test_preload_lib.sh test/support/ndet_fake_cuda.c \
	test/support/ndet_fake_cuda.h test/support/ndet_test_clock.h
