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

# Test data shared by the reference tests and the GPU test programs: plain C (no
# CMocka, no CUDA, no nccl-det code), deterministic by seed.
check_LTLIBRARIES += test/libndet_test_data.la
test_libndet_test_data_la_SOURCES = test/ndet_test_data.c test/ndet_test_data.h
test_libndet_test_data_la_CFLAGS = $(AM_CFLAGS) -ffp-contract=off
test_libndet_test_data_la_LIBADD = -lm

if HAVE_CMOCKA
# -ffp-contract=off: the tests compute expected values with plain float arithmetic.
check_PROGRAMS += test/test_reference
test_test_reference_SOURCES = test/test_reference.c
test_test_reference_CFLAGS = $(TEST_CFLAGS) -ffp-contract=off -fno-fast-math
test_test_reference_LDADD = src/libndet_logic.la test/libndet_test_data.la $(TEST_LIBS)
TESTS += test/test_reference

check_PROGRAMS += test/test_setup_record
test_test_setup_record_SOURCES = test/test_setup_record.c
test_test_setup_record_CFLAGS = $(TEST_CFLAGS)
test_test_setup_record_LDADD = src/libndet_logic.la $(TEST_LIBS)
TESTS += test/test_setup_record
endif
