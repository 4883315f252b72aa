# Fuzz targets of the settings and conf-file reader, the environment, the setup table
# and the all-reduce decision, each run by the plain driver (fuzz_driver.c: no clang
# needed) over its seeds, their mutations and random inputs.  test/fuzz/libfuzzer.sh
# builds them with libFuzzer instead.
check_PROGRAMS += test/fuzz/fuzz_settings test/fuzz/fuzz_env test/fuzz/fuzz_setup_table \
	test/fuzz/fuzz_eligibility
test_fuzz_fuzz_settings_SOURCES = test/fuzz/fuzz_settings.c
test_fuzz_fuzz_settings_LDADD = $(NDET_CORE_LIBS) $(PTHREAD_LIBS)
test_fuzz_fuzz_env_SOURCES = test/fuzz/fuzz_env.c test/fuzz/fuzz_driver.c test/fuzz/fuzz_driver.h
test_fuzz_fuzz_env_LDADD = $(NDET_CORE_LIBS) $(PTHREAD_LIBS)
test_fuzz_fuzz_setup_table_SOURCES = test/fuzz/fuzz_setup_table.c test/fuzz/fuzz_driver.c \
	test/fuzz/fuzz_driver.h
test_fuzz_fuzz_setup_table_LDADD = $(NDET_CORE_LIBS) $(PTHREAD_LIBS)
test_fuzz_fuzz_eligibility_SOURCES = test/fuzz/fuzz_eligibility.c test/fuzz/fuzz_driver.c \
	test/fuzz/fuzz_driver.h
test_fuzz_fuzz_eligibility_LDADD = $(NDET_CORE_LIBS) $(PTHREAD_LIBS)
TESTS += test/fuzz/fuzz_settings test/fuzz/fuzz_env test/fuzz/fuzz_setup_table \
	test/fuzz/fuzz_eligibility
EXTRA_DIST += test/fuzz/libfuzzer.sh
