# The installed tools (nccl-det-info, nccl-det-run, nccl-det-perf) on the CPU, and the
# judge of test/gpu/torch_extras.sh on made-up logs (no torch, no GPU).
TESTS += test/tools/test_tools.sh test/tools/test_perf_tool.sh test/tools/test_ab_perf.sh \
	test/tools/test_ll_ablate.sh test/tools/test_small_targets.sh \
	test/tools/test_torch_extras_check.sh
EXTRA_DIST += test/tools/test_tools.sh test/tools/test_perf_tool.sh test/tools/test_ab_perf.sh \
	test/tools/test_ll_ablate.sh test/tools/test_small_targets.sh \
	test/tools/data/perf-rows-h200-2ranks.txt \
	test/tools/data/perf-floor-h200-8ranks.txt \
	test/tools/test_torch_extras_check.sh
