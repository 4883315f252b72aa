#!/bin/sh
# libnccl loaded privately (RTLD_LOCAL, as a dependency of a dlopen'ed extension):
# the preloaded shim must find it among the loaded objects and forward to it
# (NCCL_DET_ENABLE=0), or divert its all-reduce (NCCL_DET_ENABLE=1, host-only backend:
# the fake NCCL works on host memory).
. "${NDET_TOP_SRCDIR:-.}/test/support/test_preload_lib.sh"

program="$top_builddir/test/loading/test_preload_local"
ext="$top_builddir/test/loading/.libs/libtest_preload_ext.so"
[ -x "$program" ] || fail "$program was not built"
[ -f "$ext" ] || fail "$ext was not built"

for mode in forwarded diverted; do
	if [ $mode = forwarded ]; then
		preload=$shim_preload
		settings="NCCL_DET_ENABLE=0 TEST_PRELOAD_DIVERTED=0"
	else
		preload=$fake_shim_preload
		settings="NCCL_DET_ENABLE=1 TEST_PRELOAD_DIVERTED=1"
	fi
	rm -f "$scratch/trace" "$scratch/log"
	env $settings TEST_PRELOAD_EXT="$ext" FAKE_NCCL_TRACE="$scratch/trace" LD_PRELOAD="$preload" \
		NCCL_DET_DEBUG=INFO NCCL_DET_DEBUG_SUBSYS=INIT NCCL_DET_DEBUG_FILE="$scratch/log" \
		"$program" || fail "test_preload_local ($mode) failed (log: $(cat "$scratch/log" 2>/dev/null))"
	grep -q "real NCCL $fake_nccl_dir/libnccl.so.2 (found by already-loaded object" "$scratch/log" ||
		fail "$mode: the shim did not report finding the fake among the loaded objects: $(cat "$scratch/log")"
	grep -q 'WARN' "$scratch/log" && fail "$mode: unexpected warnings: $(cat "$scratch/log")"
done
echo "PASS: calls through an RTLD_LOCAL library were forwarded to, or diverted from, the privately loaded NCCL"
