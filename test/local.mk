# CPU tests (CMocka) run by `make check`.  Tests that need a GPU exit 77 (SKIP).
# Without CMocka (configure's default --enable-tests=auto warned) make check fails.
if NDET_CMOCKA_MISSING
TESTS += test/test_cmocka_missing.sh
endif
EXTRA_DIST += test/test_cmocka_missing.sh
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
# CMocka, no CUDA, no nccl-det code), deterministic by seed.  Built by make (the GPU
# test programs are).
noinst_LTLIBRARIES += test/libndet_test_data.la
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

# The setup protocol driven for several communicators by one thread (lockstep).
check_PROGRAMS += test/test_setup
test_test_setup_SOURCES = test/test_setup.c
test_test_setup_CFLAGS = $(TEST_CFLAGS)
test_test_setup_LDADD = src/libndet_logic.la $(TEST_LIBS)
TESTS += test/test_setup

# The CUDA engine (compiled in) on a fake CUDA runtime, no GPU: teardown order, what
# stays allocated, launch order across streams, error publication.  getpid() is
# wrapped so that ranks of this process can pose as processes of their own, and kill()
# so that those "processes" can be alive or dead.
check_PROGRAMS += test/test_engine
test_test_engine_SOURCES = test/test_engine.c test/ndet_fake_cuda.c test/ndet_fake_cuda.h \
	test/ndet_test_clock.h test/gpu/ndet_gpu_sizes.h src/ndet_engine.c src/ndet_engine.h
test_test_engine_CFLAGS = $(TEST_CFLAGS) -I$(top_srcdir)/test
test_test_engine_LDFLAGS = $(AM_LDFLAGS) -Wl,--wrap=getpid -Wl,--wrap=kill
test_test_engine_LDADD = src/libndet_logic.la $(TEST_LIBS)
TESTS += test/test_engine

# The all-reduce decision tables.
check_PROGRAMS += test/test_eligibility
test_test_eligibility_SOURCES = test/test_eligibility.c
test_test_eligibility_CFLAGS = $(TEST_CFLAGS)
test_test_eligibility_LDADD = src/libndet_logic.la $(TEST_LIBS)
TESTS += test/test_eligibility
endif

# Fuzz entry for settings and conf files, run over its built-in corpus by the plain
# driver (no clang needed); see the file for the libFuzzer build.
check_PROGRAMS += test/fuzz_settings
test_fuzz_settings_SOURCES = test/fuzz_settings.c
test_fuzz_settings_LDADD = src/libndet_logic.la $(PTHREAD_LIBS)
TESTS += test/fuzz_settings

# Fuzz targets of the conf-file reader, the setup table and the all-reduce decision,
# each run by the plain driver over its seeds, their mutations and random inputs.
# test/libfuzzer.sh builds them (and fuzz_settings) with libFuzzer instead.
check_PROGRAMS += test/fuzz_env test/fuzz_setup_table test/fuzz_eligibility
test_fuzz_env_SOURCES = test/fuzz_env.c test/fuzz_driver.c test/fuzz_driver.h
test_fuzz_env_LDADD = src/libndet_logic.la $(PTHREAD_LIBS)
test_fuzz_setup_table_SOURCES = test/fuzz_setup_table.c test/fuzz_driver.c test/fuzz_driver.h
test_fuzz_setup_table_LDADD = src/libndet_logic.la $(PTHREAD_LIBS)
test_fuzz_eligibility_SOURCES = test/fuzz_eligibility.c test/fuzz_driver.c test/fuzz_driver.h
test_fuzz_eligibility_LDADD = src/libndet_logic.la $(PTHREAD_LIBS)
TESTS += test/fuzz_env test/fuzz_setup_table test/fuzz_eligibility
EXTRA_DIST += test/libfuzzer.sh test/valgrind.sh

# GPU test driver (loopback threads, one-launch sanitizer mode, multi-process over
# real NCCL).  Built by `make`; run by test/gpu/suite.sh on a GPU machine and, when a
# GPU is visible, by test/test_gpu_loopback.sh in `make check` (SKIP otherwise).
# What every GPU test program shares: the helpers, the engine, CUDA and the real NCCL.
GPU_TEST_COMMON = test/gpu/ndet_gpu_common.c test/gpu/ndet_gpu_common.h test/gpu/ndet_gpu_sizes.h
GPU_TEST_CFLAGS = $(AM_CFLAGS) -I$(top_srcdir)/test
GPU_TEST_LDADD = src/libndet_engine.la test/libndet_test_data.la $(CUDA_STATIC_LIBS) $(NCCL_LDFLAGS) -lnccl -ldl -lm \
	$(PTHREAD_LIBS)

noinst_PROGRAMS += test/gpu/ndet_gpu_test
test_gpu_ndet_gpu_test_SOURCES = test/gpu/ndet_gpu_test.c $(GPU_TEST_COMMON)
test_gpu_ndet_gpu_test_CFLAGS = $(GPU_TEST_CFLAGS)
# The all-ranks kernels (sanitize mode) are this program's alone (kernels/local.mk);
# a build without them (no GPU here: --enable-all-ranks-kernels) links a stand-in that
# says so.
if NDET_ALL_RANKS_KERNELS
test_gpu_ndet_gpu_test_LDADD = kernels/libndet_all_ranks.la $(GPU_TEST_LDADD)
else
test_gpu_ndet_gpu_test_SOURCES += test/gpu/ndet_all_ranks_none.c
test_gpu_ndet_gpu_test_LDADD = $(GPU_TEST_LDADD)
endif

if HAVE_CMOCKA
check_PROGRAMS += test/test_plan
test_test_plan_SOURCES = test/test_plan.c
test_test_plan_CFLAGS = $(TEST_CFLAGS)
test_test_plan_LDADD = src/libndet_logic.la $(TEST_LIBS)
TESTS += test/test_plan
endif

# The judge of test/gpu/torch_extras.sh, on made-up logs (no torch, no GPU).
TESTS += test/test_torch_extras_check.sh
EXTRA_DIST += test/test_torch_extras_check.sh

# The GPU loopback suite when a GPU is visible; SKIP (77) otherwise.
TESTS += test/test_gpu_loopback.sh
EXTRA_DIST += test/test_gpu_loopback.sh test/gpu/suite.sh test/gpu/torch_preload.py \
	test/gpu/torch_preload.sh test/gpu/torch_divert.py test/gpu/torch_divert.sh test/gpu/dist_build.sh \
	test/gpu/torch_extras.py test/gpu/torch_extras.sh test/gpu/mps.sh \
	test/gpu/torch_rs.py test/gpu/torch_rs.sh \
	test/gpu/RESULTS test/gpu/loading.sh test/gpu/jax_psum.py test/gpu/pynccl_ctypes.py \
	test/gpu/ndet_maps.py test/gpu/pack_devbin.sh test/gpu/batch.sh test/gpu/nccl_tests.sh \
	test/gpu/ll_stress.sh test/gpu/ab_perf.sh

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

# Programs run by shell drivers against the fake NCCL, with and without a preload.
FAKE_PROGRAM_CFLAGS = $(AM_CFLAGS) -I$(top_srcdir)/test/fake_nccl
FAKE_PROGRAM_LDADD = test/fake_nccl/libfake_nccl_helpers.la test/fake_nccl/libnccl.la \
	$(PTHREAD_LIBS) -ldl

# Bad input: test_bad_input.sh runs test_bad_input without, with a disabled and with
# an enabled nccl-det, NCCL's pointer checks off and on.
check_PROGRAMS += test/test_bad_input
test_test_bad_input_SOURCES = test/test_bad_input.c
test_test_bad_input_CFLAGS = $(FAKE_PROGRAM_CFLAGS)
test_test_bad_input_LDFLAGS = $(AM_LDFLAGS) -no-install
test_test_bad_input_LDADD = $(FAKE_PROGRAM_LDADD)

# Process exit with live communicators, under the preloaded host-only build.
check_PROGRAMS += test/test_exit_live
test_test_exit_live_SOURCES = test/test_exit_live.c
test_test_exit_live_CFLAGS = $(FAKE_PROGRAM_CFLAGS)
test_test_exit_live_LDFLAGS = $(AM_LDFLAGS) -no-install
test_test_exit_live_LDADD = $(FAKE_PROGRAM_LDADD)

TESTS += test/fake_nccl/test_fake_exports.sh test/test_forward.sh test/test_bad_input.sh \
	test/test_exit_live.sh \
	test/test_preload_silent.sh test/test_preload_exports.sh test/test_dtneeded.sh
EXTRA_DIST += test/fake_nccl/libnccl.map test/fake_nccl/libnccl-2.26.map \
	test/fake_nccl/test_fake_exports.sh \
	test/test_preload_lib.sh test/test_forward.sh test/test_bad_input.sh test/test_exit_live.sh \
	test/test_preload_silent.sh test/test_preload_local.sh test/test_preload_exports.sh \
	test/test_dtneeded.sh

if HAVE_CMOCKA
# The fake on its own: rendezvous, groups, collectives, non-blocking, faults, trace.
check_PROGRAMS += test/test_fake_nccl
test_test_fake_nccl_SOURCES = test/fake_nccl/test_fake_nccl.c
test_test_fake_nccl_CFLAGS = $(TEST_CFLAGS)
test_test_fake_nccl_LDFLAGS = $(AM_LDFLAGS) -no-install
test_test_fake_nccl_LDADD = test/fake_nccl/libfake_nccl_helpers.la \
	test/fake_nccl/libnccl.la $(TEST_LIBS)
TESTS += test/test_fake_nccl

# A host-only engine for the divert tests: the real setup protocol on host memory,
# results from the CPU reference tree (test/ndet_fake_backend.h).
check_LTLIBRARIES += test/libndet_fake_backend.la
test_libndet_fake_backend_la_SOURCES = test/ndet_fake_backend.c test/ndet_fake_backend.h
test_libndet_fake_backend_la_CFLAGS = $(AM_CFLAGS) -I$(top_srcdir)/test
test_libndet_fake_backend_la_LIBADD = src/libndet_logic.la

# libnccl-det.so with the host-only backend, for preload tests with NCCL_DET_ENABLE=1
# against the fake NCCL (which works on host memory: the CUDA engine cannot serve it).
check_LTLIBRARIES += test/libnccl-det-fake.la
test_libnccl_det_fake_la_SOURCES = test/ndet_fake_preload.c src/ndet_shim.c \
	src/ndet_resolve.c src/ndet_resolve.h src/ndet_tuner.c src/ndet_tuner.h \
	src/ndet_netplugin.c src/ndet_netplugin.h
test_libnccl_det_fake_la_CFLAGS = $(AM_CFLAGS) -I$(top_srcdir)/test
test_libnccl_det_fake_la_LDFLAGS = $(AM_LDFLAGS) -module -avoid-version -shared -rpath /nowhere \
	-no-undefined -Wl,--version-script=$(srcdir)/src/libnccl-det.map -Wl,--exclude-libs,ALL
test_libnccl_det_fake_la_LIBADD = src/libndet_divert.la test/libndet_fake_backend.la \
	$(PTHREAD_LIBS)

# Symbol resolution: ndet_resolve.c and ndet_shim.c compiled into the test, with the
# loader functions wrapped so that each strategy and failure can be forced.  The
# divert hooks run on the host-only backend (no CUDA call of ours).
check_PROGRAMS += test/test_resolve
test_test_resolve_SOURCES = test/test_resolve.c src/ndet_resolve.c src/ndet_resolve.h \
	src/ndet_shim.c
test_test_resolve_CFLAGS = $(TEST_CFLAGS) -I$(top_srcdir)/test/fake_nccl -I$(top_srcdir)/test
test_test_resolve_LDFLAGS = $(AM_LDFLAGS) -no-install \
	-Wl,--wrap=dlsym -Wl,--wrap=dlopen -Wl,--wrap=dl_iterate_phdr
test_test_resolve_LDADD = src/libndet_divert.la test/libndet_fake_backend.la \
	test/fake_nccl/libfake_nccl_helpers.la test/fake_nccl/libnccl.la $(TEST_LIBS)
TESTS += test/test_resolve

# The divert layer end to end: the shim compiled in (this program plays
# libnccl-det.so), the in-process multi-rank fake NCCL, the host-only backend.
# What the programs that play libnccl-det.so in front of the fake NCCL share.
SHIM_TEST_SOURCES = src/ndet_resolve.c src/ndet_resolve.h src/ndet_shim.c \
	test/ndet_divert_fixture.c test/ndet_divert_fixture.h
SHIM_TEST_CFLAGS = $(TEST_CFLAGS) -I$(top_srcdir)/test/fake_nccl -I$(top_srcdir)/test
SHIM_TEST_LDADD = src/libndet_divert.la test/libndet_fake_backend.la test/libndet_test_data.la \
	test/fake_nccl/libfake_nccl_helpers.la test/fake_nccl/libnccl.la $(TEST_LIBS)

check_PROGRAMS += test/test_divert
test_test_divert_SOURCES = test/test_divert.c $(SHIM_TEST_SOURCES)
test_test_divert_CFLAGS = $(SHIM_TEST_CFLAGS)
test_test_divert_LDFLAGS = $(AM_LDFLAGS) -no-install
test_test_divert_LDADD = $(SHIM_TEST_LDADD)
TESTS += test/test_divert

# ncclReduceScatter, ncclReduce and PreMulSum ops through the divert layer.
check_PROGRAMS += test/test_collectives
test_test_collectives_SOURCES = test/test_collectives.c $(SHIM_TEST_SOURCES)
test_test_collectives_CFLAGS = $(SHIM_TEST_CFLAGS)
test_test_collectives_LDFLAGS = $(AM_LDFLAGS) -no-install
test_test_collectives_LDADD = $(SHIM_TEST_LDADD)
TESTS += test/test_collectives

# Faults: abort, stopped peers, divergence, teardown orders, split groups, cycles, fork.
check_PROGRAMS += test/test_faults
test_test_faults_SOURCES = test/test_faults.c test/ndet_test_clock.h $(SHIM_TEST_SOURCES)
test_test_faults_CFLAGS = $(SHIM_TEST_CFLAGS)
test_test_faults_LDFLAGS = $(AM_LDFLAGS) -no-install
test_test_faults_LDADD = $(SHIM_TEST_LDADD)
TESTS += test/test_faults

check_PROGRAMS += test/test_preload_local
test_test_preload_local_SOURCES = test/test_preload_local.c
test_test_preload_local_CFLAGS = $(TEST_CFLAGS) -I$(top_srcdir)/test/fake_nccl
test_test_preload_local_LDFLAGS = $(AM_LDFLAGS) -no-install
test_test_preload_local_LDADD = test/fake_nccl/libfake_nccl_helpers.la $(TEST_LIBS)
TESTS += test/test_preload_local.sh
endif

if HAVE_CMOCKA
check_PROGRAMS += test/test_check
test_test_check_SOURCES = test/test_check.c
test_test_check_CFLAGS = $(TEST_CFLAGS)
test_test_check_LDADD = src/libndet_logic.la $(TEST_LIBS)
TESTS += test/test_check
endif

# The nccl-tests calling pattern under LD_PRELOAD (run by test/gpu/suite.sh preload).
noinst_PROGRAMS += test/gpu/ndet_preload_test
test_gpu_ndet_preload_test_SOURCES = test/gpu/ndet_preload_test.c $(GPU_TEST_COMMON)
test_gpu_ndet_preload_test_CFLAGS = $(GPU_TEST_CFLAGS)
test_gpu_ndet_preload_test_LDADD = $(GPU_TEST_LDADD)

# Faults through the real NCCL API under LD_PRELOAD (run by test/gpu/faults.sh).
noinst_PROGRAMS += test/gpu/ndet_fault_test
test_gpu_ndet_fault_test_SOURCES = test/gpu/ndet_fault_test.c $(GPU_TEST_COMMON)
test_gpu_ndet_fault_test_CFLAGS = $(GPU_TEST_CFLAGS)
test_gpu_ndet_fault_test_LDADD = $(GPU_TEST_LDADD)
EXTRA_DIST += test/gpu/faults.sh test/gpu/torch_watchdog.py test/gpu/gpu_lib.sh

# ---- drop-in libnccl.so.2, plugins, tools --------------------------------------------
# The trampoline caller, the plugin loader, an empty object for a fake Python package.
check_PROGRAMS += test/test_dropin_load
test_test_dropin_load_SOURCES = test/test_dropin_load.c
test_test_dropin_load_LDADD = -ldl

check_LTLIBRARIES += test/libndet_test_anchor.la
test_libndet_test_anchor_la_SOURCES = test/test_anchor.c
test_libndet_test_anchor_la_LDFLAGS = $(AM_LDFLAGS) -module -avoid-version -rpath /nowhere

check_PROGRAMS += test/test_plugin_load
test_test_plugin_load_SOURCES = test/test_plugin_load.c
test_test_plugin_load_CFLAGS = $(AM_CFLAGS) -I$(top_srcdir)/test/fake_nccl
test_test_plugin_load_LDFLAGS = $(AM_LDFLAGS) -no-install
test_test_plugin_load_LDADD = test/fake_nccl/libfake_nccl_helpers.la test/fake_nccl/libnccl.la -ldl

TESTS += test/test_plugins.sh test/test_tools.sh test/test_perf_tool.sh
# What the binaries carry (no GPU code in CPU tests, size budgets, kernel header
# dependencies), and nvcc-lt.sh itself (dependencies, launchers, ccache).
TESTS += test/test_binaries.sh test/test_nvcc_lt.sh test/test_install_deps.sh
EXTRA_DIST += test/test_binaries.sh test/test_nvcc_lt.sh test/test_install_deps.sh
# make install into a scratch DESTDIR: layout, no .la, pkg-config, make uninstall.
TESTS += test/test_install.sh
EXTRA_DIST += test/test_install.sh
EXTRA_DIST += test/test_plugins.sh test/test_tools.sh test/test_perf_tool.sh test/installcheck.sh test/test_dropin_exports.sh \
	test/test_dropin_calls.sh test/test_dropin_search.sh test/test_dropin_copies.sh

if HAVE_CMOCKA
check_PROGRAMS += test/test_tuner
test_test_tuner_SOURCES = test/test_tuner.c src/ndet_tuner.c src/ndet_tuner.h
test_test_tuner_CFLAGS = $(TEST_CFLAGS) -I$(top_srcdir)/test/fake_nccl
test_test_tuner_LDADD = src/libndet_logic.la test/fake_nccl/libfake_nccl_helpers.la $(TEST_LIBS)
TESTS += test/test_tuner
endif

if NDET_DROPIN
# The drop-in built against the fake NCCL's export list, plus one name the fake lacks
# (ncclTestOnlyMissing), with the host-only backend (the fake works on host memory)
# and a loader-cache/system root that does not exist (a hermetic search).
check_LTLIBRARIES += test/dropin_fake/libnccl.la
test_dropin_fake_libnccl_la_SOURCES = test/ndet_fake_preload.c src/ndet_shim.c \
	src/ndet_resolve.c src/ndet_resolve.h src/ndet_dropin.c src/ndet_dropin.h
nodist_test_dropin_fake_libnccl_la_SOURCES = test/dropin_fake/ndet_dropin_tramp.S
test_dropin_fake_libnccl_la_CPPFLAGS = $(AM_CPPFLAGS) -DNDET_BUILD_DROPIN=1 \
	-DNDET_RESOLVE_SYSTEM_ROOT='"/nonexistent/ndet-test-root"'
test_dropin_fake_libnccl_la_CFLAGS = $(AM_CFLAGS) -I$(top_srcdir)/test
test_dropin_fake_libnccl_la_LDFLAGS = $(AM_LDFLAGS) -rpath /nowhere -version-number 2:0:0 \
	-no-undefined -Wl,--version-script=test/dropin_fake/libnccl-dropin.map \
	-Wl,--exclude-libs,ALL
test_dropin_fake_libnccl_la_LIBADD = src/libndet_divert.la test/libndet_fake_backend.la \
	$(PTHREAD_LIBS)
EXTRA_test_dropin_fake_libnccl_la_DEPENDENCIES = test/dropin_fake/libnccl-dropin.map

test/dropin_fake/nccl-exports.txt: test/fake_nccl/libnccl.la $(srcdir)/src/dropin/ndet-dropin-gen.sh
	$(AM_V_GEN)$(MKDIR_P) test/dropin_fake && { \
		$(NDET_DROPIN_GEN) exports-from-library "$(NM)" test/fake_nccl/.libs/libnccl.so.2 && \
		printf '%s\n' ncclTestOnlyMissing pncclTestOnlyMissing; } >$@.tmp && mv $@.tmp $@

test/dropin_fake/ndet_dropin_tramp.S: test/dropin_fake/nccl-exports.txt $(NDET_DROPIN_GEN_DEPS)
	$(AM_V_GEN)$(NDET_DROPIN_GEN) trampolines test/dropin_fake/nccl-exports.txt \
		$(srcdir)/src/ndet_shim.c >$@.tmp && mv $@.tmp $@

test/dropin_fake/libnccl-dropin.map: test/dropin_fake/nccl-exports.txt $(NDET_DROPIN_GEN_DEPS)
	$(AM_V_GEN)$(NDET_DROPIN_GEN) map test/dropin_fake/nccl-exports.txt \
		$(srcdir)/src/ndet_shim.c >$@.tmp && mv $@.tmp $@

CLEANFILES += test/dropin_fake/nccl-exports.txt test/dropin_fake/ndet_dropin_tramp.S \
	test/dropin_fake/libnccl-dropin.map

TESTS += test/test_dropin_exports.sh test/test_dropin_calls.sh test/test_dropin_search.sh \
	test/test_dropin_copies.sh
endif
