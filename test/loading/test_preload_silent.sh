#!/bin/sh
# The preload reaches every process of a job (shells, launchers, tools): loading
# libnccl-det.so must print nothing and start no thread (no constructor work).
. "${NDET_TOP_SRCDIR:-.}/test/support/test_preload_lib.sh"

for level in "" WARN INFO TRACE; do
	env ${level:+NCCL_DET_DEBUG=$level} LD_PRELOAD="$shim_preload" /bin/true \
		>"$scratch/out" 2>"$scratch/err" || fail "/bin/true failed under the preload"
	[ -s "$scratch/out" ] && fail "stdout not empty (NCCL_DET_DEBUG=$level): $(cat "$scratch/out")"
	[ -s "$scratch/err" ] && fail "stderr not empty (NCCL_DET_DEBUG=$level): $(cat "$scratch/err")"
done
out=$(LD_PRELOAD="$shim_preload" NCCL_DET_DEBUG=INFO sh -c 'echo hello' 2>&1) ||
	fail "sh failed under the preload"
[ "$out" = hello ] || fail "a shell under the preload printed: $out"

probe="$top_builddir/test/loading/test_preload_threads"
[ -x "$probe" ] || fail "$probe was not built"
without=$("$probe") || fail "thread probe failed"
with=$(LD_PRELOAD="$shim_preload" NCCL_DET_DEBUG=INFO "$probe") ||
	fail "thread probe failed under the preload"
[ "$with" = "$without" ] || fail "the preload started threads: $with threads, $without without it"
# Without a sanitizer runtime (which may keep a thread of its own) that is exactly one.
if [ -z "$sanitizer_runtime" ] && [ "$with" != 1 ]; then
	fail "$with threads after the constructors ran, expected 1"
fi
echo "PASS: silent preload, $with thread(s)"
