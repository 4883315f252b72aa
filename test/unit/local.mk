# Unit tests of the pure layers and the CPU reference (CMocka).
if HAVE_CMOCKA
# Programs that start no thread and take no lock: ThreadSanitizer has nothing to find
# in them, so its build compiles them (they must build everywhere) but does not run
# them; the others run in every build.
UNIT_TESTS_ONE_THREAD = test/unit/test_status test/unit/test_host_table \
	test/unit/test_eligibility test/unit/test_plan test/unit/test_plan_ll_grid \
	test/unit/test_plan_ll_grid_fill test/unit/test_plan_ll_grid_small \
	test/unit/test_hosts_plan \
	test/unit/test_check test/unit/test_host_order test/unit/test_reference \
	test/unit/test_reference_hosts
UNIT_TESTS = test/unit/test_settings test/unit/test_env test/unit/test_log \
	test/unit/test_setup_record test/unit/test_setup test/unit/test_engine \
	test/unit/test_tuner
check_PROGRAMS += $(UNIT_TESTS) $(UNIT_TESTS_ONE_THREAD)
TESTS += $(UNIT_TESTS)
if !NDET_TSAN
TESTS += $(UNIT_TESTS_ONE_THREAD)
endif

test_unit_test_status_CFLAGS = $(TEST_CFLAGS)
test_unit_test_status_LDADD = $(NDET_PURE_TEST_LIBS) $(TEST_LIBS)
test_unit_test_settings_CFLAGS = $(TEST_CFLAGS)
test_unit_test_settings_LDADD = $(NDET_PURE_TEST_LIBS) $(TEST_LIBS)
test_unit_test_env_CFLAGS = $(TEST_CFLAGS)
test_unit_test_env_LDADD = $(NDET_PURE_TEST_LIBS) $(TEST_LIBS)
test_unit_test_log_CFLAGS = $(TEST_CFLAGS)
test_unit_test_log_LDADD = $(NDET_PURE_TEST_LIBS) $(TEST_LIBS)
test_unit_test_setup_record_CFLAGS = $(TEST_CFLAGS)
test_unit_test_setup_record_LDADD = $(NDET_PURE_TEST_LIBS) $(TEST_LIBS)
# The hosts of a setup table.
test_unit_test_host_table_CFLAGS = $(TEST_CFLAGS)
test_unit_test_host_table_LDADD = $(NDET_PURE_TEST_LIBS) $(TEST_LIBS)
# The setup protocol driven for several communicators by one thread (lockstep).
test_unit_test_setup_CFLAGS = $(TEST_CFLAGS)
test_unit_test_setup_LDADD = $(NDET_PURE_TEST_LIBS) $(TEST_LIBS)
# The all-reduce decision tables.
test_unit_test_eligibility_CFLAGS = $(TEST_CFLAGS)
test_unit_test_eligibility_LDADD = $(NDET_PURE_TEST_LIBS) $(TEST_LIBS)
test_unit_test_plan_CFLAGS = $(TEST_CFLAGS)
test_unit_test_plan_LDADD = $(NDET_PURE_TEST_LIBS) $(TEST_LIBS)
# Every LL plan fits the kernels and the pool: the library's plan, and the plan of each
# measurement build (test/gpu/ll_ablate_build.sh), compiled here with its defines.
test_unit_test_plan_ll_grid_CFLAGS = $(TEST_CFLAGS)
test_unit_test_plan_ll_grid_LDADD = $(NDET_PURE_TEST_LIBS) $(TEST_LIBS)
test_unit_test_plan_ll_grid_fill_SOURCES = test/unit/test_plan_ll_grid.c src/protocol/ndet_plan.c
test_unit_test_plan_ll_grid_fill_CPPFLAGS = $(AM_CPPFLAGS) -DNDET_PLAN_LL_FILL=1
test_unit_test_plan_ll_grid_fill_CFLAGS = $(TEST_CFLAGS)
test_unit_test_plan_ll_grid_fill_LDADD = src/common/libndet_common.la $(TEST_LIBS)
test_unit_test_plan_ll_grid_small_SOURCES = test/unit/test_plan_ll_grid.c src/protocol/ndet_plan.c
test_unit_test_plan_ll_grid_small_CPPFLAGS = $(AM_CPPFLAGS) -DNDET_PLAN_LL_SMALL_BYTES=512 \
	-DNDET_PLAN_GRID_CAPACITY=264u -DNDET_PLAN_LL_FILL=1
test_unit_test_plan_ll_grid_small_CFLAGS = $(TEST_CFLAGS)
test_unit_test_plan_ll_grid_small_LDADD = src/common/libndet_common.la $(TEST_LIBS)
# The multi-host schedule: coverage, matching sends and receives, bytes, staging.
test_unit_test_hosts_plan_CFLAGS = $(TEST_CFLAGS)
test_unit_test_hosts_plan_LDADD = $(NDET_PURE_TEST_LIBS) $(TEST_LIBS)
test_unit_test_check_CFLAGS = $(TEST_CFLAGS)
test_unit_test_check_LDADD = $(NDET_PURE_TEST_LIBS) $(TEST_LIBS)
# The host order (hosts by lowest rank) of a multi-host communicator.
test_unit_test_host_order_CFLAGS = $(TEST_CFLAGS)
test_unit_test_host_order_LDADD = $(NDET_PURE_TEST_LIBS) $(TEST_LIBS)

# -ffp-contract=off: the tests compute expected values with plain float arithmetic.
test_unit_test_reference_CFLAGS = $(TEST_CFLAGS) -ffp-contract=off -fno-fast-math
test_unit_test_reference_LDADD = $(NDET_PURE_TEST_LIBS) test/support/libndet_test_data.la \
	$(TEST_LIBS)
# The multi-host contract of the reference (two-level tree), the same flags.
test_unit_test_reference_hosts_CFLAGS = $(TEST_CFLAGS) -ffp-contract=off -fno-fast-math
test_unit_test_reference_hosts_LDADD = $(NDET_PURE_TEST_LIBS) \
	test/support/libndet_test_data.la $(TEST_LIBS)

# The CUDA engine (compiled in) on a fake CUDA runtime, no GPU: teardown order, what
# stays allocated, launch order across streams, error publication.  getpid() is
# wrapped so that ranks of this process can pose as processes of their own, and kill()
# so that those "processes" can be alive or dead.
test_unit_test_engine_SOURCES = test/unit/test_engine.c test/support/ndet_fake_cuda.c \
	test/support/ndet_fake_cuda.h test/support/ndet_test_clock.h test/gpu/ndet_gpu_sizes.h \
	src/engine/ndet_engine.c src/engine/ndet_engine.h src/engine/ndet_engine_internal.h \
	src/engine/ndet_engine_launch.c src/engine/ndet_engine_pool.c \
	src/engine/ndet_engine_setup.c src/engine/ndet_engine_teardown.c
test_unit_test_engine_CFLAGS = $(TEST_CFLAGS)
test_unit_test_engine_LDFLAGS = $(AM_LDFLAGS) -Wl,--wrap=getpid -Wl,--wrap=kill
test_unit_test_engine_LDADD = $(NDET_PURE_TEST_LIBS) $(TEST_LIBS)

# The tuner plugin against the fake NCCL's plugin types.
test_unit_test_tuner_CFLAGS = $(TEST_CFLAGS)
test_unit_test_tuner_LDADD = src/preload/libndet_preload.la $(NDET_PURE_TEST_LIBS) \
	test/fake_nccl/libfake_nccl_helpers.la $(TEST_LIBS)
endif
