# CPU tests (CMocka) run by `make check`.  Tests that need a GPU exit 77 (SKIP).
if HAVE_CMOCKA
TEST_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
TEST_LIBS = $(CMOCKA_LIBS) $(PTHREAD_LIBS)

check_PROGRAMS += test/test_status
test_test_status_SOURCES = test/test_status.c
test_test_status_CFLAGS = $(TEST_CFLAGS)
test_test_status_LDADD = src/libndet_logic.la $(TEST_LIBS)
TESTS += test/test_status

check_PROGRAMS += test/test_settings
test_test_settings_SOURCES = test/test_settings.c
test_test_settings_CFLAGS = $(TEST_CFLAGS)
test_test_settings_LDADD = src/libndet_logic.la $(TEST_LIBS)
TESTS += test/test_settings

check_PROGRAMS += test/test_env
test_test_env_SOURCES = test/test_env.c
test_test_env_CFLAGS = $(TEST_CFLAGS)
test_test_env_LDADD = src/libndet_logic.la $(TEST_LIBS)
TESTS += test/test_env

check_PROGRAMS += test/test_log
test_test_log_SOURCES = test/test_log.c
test_test_log_CFLAGS = $(TEST_CFLAGS)
test_test_log_LDADD = src/libndet_logic.la $(TEST_LIBS)
TESTS += test/test_log
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

# Fuzz entry for settings and conf files, run over its built-in corpus by the plain
# driver (no clang needed); see the file for the libFuzzer build.
check_PROGRAMS += test/fuzz_settings
test_fuzz_settings_SOURCES = test/fuzz_settings.c
test_fuzz_settings_LDADD = src/libndet_logic.la $(PTHREAD_LIBS)
TESTS += test/fuzz_settings

# GPU test driver (loopback threads, one-launch sanitizer mode, multi-process over
# real NCCL).  Built by `make`; run by test/gpu/suite.sh on a GPU machine and, when a
# GPU is visible, by test/test_gpu_loopback.sh in `make check` (SKIP otherwise).
noinst_PROGRAMS += test/gpu/ndet_gpu_test
test_gpu_ndet_gpu_test_SOURCES = test/gpu/ndet_gpu_test.c test/gpu/ndet_gpu_common.c \
	test/gpu/ndet_gpu_common.h
test_gpu_ndet_gpu_test_CFLAGS = $(AM_CFLAGS) -I$(top_srcdir)/test
test_gpu_ndet_gpu_test_LDADD = src/libndet_engine.la $(CUDA_STATIC_LIBS) $(NCCL_LDFLAGS) \
	-lnccl -lm $(PTHREAD_LIBS)

if HAVE_CMOCKA
check_PROGRAMS += test/test_plan
test_test_plan_SOURCES = test/test_plan.c
test_test_plan_CFLAGS = $(TEST_CFLAGS)
test_test_plan_LDADD = src/libndet_logic.la $(TEST_LIBS)
TESTS += test/test_plan
endif

# The GPU loopback suite when a GPU is visible; SKIP (77) otherwise.
TESTS += test/test_gpu_loopback.sh
EXTRA_DIST += test/test_gpu_loopback.sh test/gpu/suite.sh
