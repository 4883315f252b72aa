#!/bin/sh
# Asking nccl-det which NCCL it uses before the application loaded NCCL must not leave
# every later call without it: the calls after the load reach the real NCCL, and the
# same query then names it.
. "${NDET_TOP_SRCDIR:-.}/test/support/test_preload_lib.sh"

program="$top_builddir/test/loading/test_early_query"
[ -x "$program" ] || fail "$program was not built"
env NCCL_DET_ENABLE=0 LD_PRELOAD="$shim_preload" "$program" "$fake_nccl_dir/libnccl.so.2" \
	>"$scratch/out" 2>"$scratch/err" || fail "$(cat "$scratch/out" "$scratch/err")"
grep -q "^early: 0 path='' version=0 found_by=" "$scratch/out" || fail "early: $(cat "$scratch/out")"
grep -q '^ncclGroupStart: 0$' "$scratch/out" || fail "after the load: $(cat "$scratch/out" "$scratch/err")"
grep -q '^ncclGroupEnd: 0$' "$scratch/out" || fail "after the load: $(cat "$scratch/out")"
grep -q '^late: 0 found=1$' "$scratch/out" || fail "late query: $(cat "$scratch/out")"
echo "PASS: an early ncclDetGetNcclLibrary, then NCCL loaded and called"
