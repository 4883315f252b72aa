# GPU test programs (loopback threads, one-launch sanitizer mode, multi-process over
# the real NCCL, the nccl-tests calling pattern under LD_PRELOAD, faults), built by
# `make` where NCCL's library was found; run by test/gpu/suite.sh on a GPU machine and,
# when a GPU is visible, by test/build/test_gpu_loopback.sh in `make check`.
if HAVE_NCCL_LIB
# ndet_gpu_data.c needs neither the engine nor the kernels: a program of it alone
# (ndet_fault_test, which drives the library through NCCL's API) carries no kernel
# image, about 9 MB less with one gencode.
GPU_TEST_BASE = test/gpu/ndet_gpu_data.c test/gpu/ndet_gpu_data.h
GPU_TEST_BASE_LDADD = src/reference/libndet_reference.la $(NDET_CORE_LIBS) \
	test/support/libndet_test_data.la $(CUDA_STATIC_LIBS) $(NCCL_LDFLAGS) -lnccl -ldl -lm \
	$(PTHREAD_LIBS)
GPU_TEST_COMMON = test/gpu/ndet_gpu_common.c test/gpu/ndet_gpu_common.h \
	test/gpu/ndet_gpu_sizes.h $(GPU_TEST_BASE)
# The helpers' fill kernel (ndet_gpu_common.c) is one of the benchmark kernels.
GPU_TEST_LDADD = kernels/libndet_bench_kernels.la $(NDET_ENGINE_LIBS) $(GPU_TEST_BASE_LDADD)

noinst_PROGRAMS += test/gpu/ndet_gpu_test
test_gpu_ndet_gpu_test_SOURCES = test/gpu/ndet_gpu_test.c test/gpu/ndet_gpu_hosts.c \
	test/gpu/ndet_gpu_hosts.h $(GPU_TEST_COMMON)
# The all-ranks kernels (sanitize mode) are this program's alone (kernels/local.mk);
# a build without them (no GPU here: --enable-all-ranks-kernels) links a stand-in that
# says so.
if NDET_ALL_RANKS_KERNELS
test_gpu_ndet_gpu_test_LDADD = kernels/libndet_all_ranks.la $(GPU_TEST_LDADD)
else
test_gpu_ndet_gpu_test_SOURCES += test/gpu/ndet_all_ranks_none.c
test_gpu_ndet_gpu_test_LDADD = $(GPU_TEST_LDADD)
endif

noinst_PROGRAMS += test/gpu/ndet_preload_test
test_gpu_ndet_preload_test_SOURCES = test/gpu/ndet_preload_test.c $(GPU_TEST_COMMON)
test_gpu_ndet_preload_test_LDADD = $(GPU_TEST_LDADD)

noinst_PROGRAMS += test/gpu/ndet_fault_test
test_gpu_ndet_fault_test_SOURCES = test/gpu/ndet_fault_test.c $(GPU_TEST_BASE)
test_gpu_ndet_fault_test_LDADD = $(GPU_TEST_BASE_LDADD)
endif

EXTRA_DIST += test/gpu/suite.sh test/gpu/batch.sh test/gpu/gpu_lib.sh test/gpu/mps.sh \
	test/gpu/pack_devbin.sh test/gpu/dist_build.sh test/gpu/ab_perf.sh \
	test/gpu/torch_preload.py test/gpu/torch_preload.sh test/gpu/torch_divert.py \
	test/gpu/torch_divert.sh test/gpu/torch_extras.py test/gpu/torch_extras.sh \
	test/gpu/torch_hosts.py test/gpu/torch_hosts.sh test/gpu/torch_hosts_perf.py \
	test/gpu/torch_hosts_perf.sh \
	test/gpu/torch_rs.py test/gpu/torch_rs.sh test/gpu/torch_watchdog.py \
	test/gpu/loading.sh test/gpu/jax_psum.py test/gpu/pynccl_ctypes.py test/gpu/ndet_maps.py \
	test/gpu/nccl_tests.sh test/gpu/nccl_tests_hosts.sh test/gpu/ll_stress.sh test/gpu/faults.sh \
	test/gpu/ll_ablate.sh test/gpu/ll_ablate_build.sh test/gpu/small_targets.sh
