# The divert layer end to end: programs that play libnccl-det.so (the preload layers
# linked in) in front of the in-process multi-rank fake NCCL, on the host-only
# backend; and programs run under the preloaded host-only build.
if HAVE_CMOCKA
check_PROGRAMS += test/divert/test_divert
test_divert_test_divert_SOURCES = test/divert/test_divert.c $(SHIM_TEST_SOURCES)
test_divert_test_divert_CFLAGS = $(SHIM_TEST_CFLAGS)
test_divert_test_divert_LDFLAGS = $(AM_LDFLAGS) -no-install
test_divert_test_divert_LDADD = $(SHIM_TEST_LDADD)
TESTS += test/divert/test_divert

# ncclReduceScatter, ncclReduce and PreMulSum ops through the divert layer.
check_PROGRAMS += test/divert/test_collectives
test_divert_test_collectives_SOURCES = test/divert/test_collectives.c $(SHIM_TEST_SOURCES)
test_divert_test_collectives_CFLAGS = $(SHIM_TEST_CFLAGS)
test_divert_test_collectives_LDFLAGS = $(AM_LDFLAGS) -no-install
test_divert_test_collectives_LDADD = $(SHIM_TEST_LDADD)
TESTS += test/divert/test_collectives

# The multi-host all-reduce (NCCL_DET_TEST_HOST layouts) through the divert layer.
check_PROGRAMS += test/divert/test_hosts
test_divert_test_hosts_SOURCES = test/divert/test_hosts.c $(SHIM_TEST_SOURCES)
test_divert_test_hosts_CFLAGS = $(SHIM_TEST_CFLAGS)
test_divert_test_hosts_LDFLAGS = $(AM_LDFLAGS) -no-install
test_divert_test_hosts_LDADD = $(SHIM_TEST_LDADD)
TESTS += test/divert/test_hosts

# Faults: abort, stopped peers, divergence, teardown orders, split groups, cycles, fork.
check_PROGRAMS += test/divert/test_faults
test_divert_test_faults_SOURCES = test/divert/test_faults.c test/support/ndet_test_clock.h \
	$(SHIM_TEST_SOURCES)
test_divert_test_faults_CFLAGS = $(SHIM_TEST_CFLAGS)
test_divert_test_faults_LDFLAGS = $(AM_LDFLAGS) -no-install
test_divert_test_faults_LDADD = $(SHIM_TEST_LDADD)
TESTS += test/divert/test_faults

# Out of host memory at each allocation of a job's life, one rank at a time.
check_PROGRAMS += test/divert/test_alloc_failures
test_divert_test_alloc_failures_SOURCES = test/divert/test_alloc_failures.c \
	test/support/ndet_alloc_fail.c test/support/ndet_alloc_fail.h $(SHIM_TEST_SOURCES)
test_divert_test_alloc_failures_CFLAGS = $(SHIM_TEST_CFLAGS)
test_divert_test_alloc_failures_LDFLAGS = $(AM_LDFLAGS) -no-install $(NDET_ALLOC_FAIL_WRAP)
test_divert_test_alloc_failures_LDADD = $(SHIM_TEST_LDADD)
TESTS += test/divert/test_alloc_failures
endif

# Programs run by shell drivers against the fake NCCL, with and without a preload.
FAKE_PROGRAM_LDADD = test/fake_nccl/libfake_nccl_helpers.la test/fake_nccl/libnccl.la \
	$(PTHREAD_LIBS) -ldl

# Bad input: test_bad_input.sh runs test_bad_input without, with a disabled and with
# an enabled nccl-det, NCCL's pointer checks off and on.
check_PROGRAMS += test/divert/test_bad_input
test_divert_test_bad_input_SOURCES = test/divert/test_bad_input.c
test_divert_test_bad_input_LDFLAGS = $(AM_LDFLAGS) -no-install
test_divert_test_bad_input_LDADD = $(FAKE_PROGRAM_LDADD)

# Process exit with live communicators, under the preloaded host-only build.
check_PROGRAMS += test/divert/test_exit_live
test_divert_test_exit_live_SOURCES = test/divert/test_exit_live.c
test_divert_test_exit_live_LDFLAGS = $(AM_LDFLAGS) -no-install
test_divert_test_exit_live_LDADD = $(FAKE_PROGRAM_LDADD)

TESTS += test/divert/test_bad_input.sh test/divert/test_exit_live.sh
EXTRA_DIST += test/divert/test_bad_input.sh test/divert/test_exit_live.sh
