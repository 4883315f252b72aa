#!/bin/sh
# libnccl loaded privately (RTLD_LOCAL, as a dependency of a dlopen'ed extension):
# the preloaded shim must find it among the loaded objects and forward to it.
. "${NDET_TOP_SRCDIR:-.}/test/test_preload_lib.sh"

program="$top_builddir/test/test_preload_local"
ext="$top_builddir/test/.libs/libtest_preload_ext.so"
[ -x "$program" ] || fail "$program was not built"
[ -f "$ext" ] || fail "$ext was not built"

env TEST_PRELOAD_EXT="$ext" FAKE_NCCL_TRACE="$scratch/trace" LD_PRELOAD="$shim_preload" \
	NCCL_DET_DEBUG=INFO NCCL_DET_DEBUG_SUBSYS=INIT NCCL_DET_DEBUG_FILE="$scratch/log" \
	"$program" || fail "test_preload_local failed (log: $(cat "$scratch/log" 2>/dev/null))"
grep -q "real NCCL $fake_nccl_dir/libnccl.so.2 (found by already-loaded object" "$scratch/log" ||
	fail "the shim did not report finding the fake among the loaded objects: $(cat "$scratch/log")"
grep -q 'WARN' "$scratch/log" && fail "unexpected warnings: $(cat "$scratch/log")"
echo "PASS: calls through an RTLD_LOCAL library were forwarded to the privately loaded NCCL"
