# The build and the tree: what the binaries carry (no GPU code in CPU tests, size
# budgets, kernel header dependencies), nvcc-lt.sh (dependencies, launchers, ccache),
# the dependency installer, `make install` into a scratch DESTDIR, the layering of
# the includes, the paths the scripts name, and the GPU loopback suite when a GPU is
# visible (SKIP otherwise).
if NDET_CMOCKA_MISSING
TESTS += test/build/test_cmocka_missing.sh
endif
TESTS += test/build/test_binaries.sh test/build/test_nvcc_lt.sh \
	test/build/test_install_deps.sh test/build/test_install.sh test/build/test_layers.sh \
	test/build/test_paths.sh test/build/test_gpu_loopback.sh
EXTRA_DIST += test/build/test_cmocka_missing.sh test/build/test_binaries.sh \
	test/build/test_nvcc_lt.sh test/build/test_install_deps.sh test/build/test_install.sh \
	test/build/installcheck.sh test/build/test_layers.sh test/build/test_paths.sh \
	test/build/test_gpu_loopback.sh
