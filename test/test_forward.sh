#!/bin/sh
# Forwarding: the same script of NCCL calls (test_forward_script) against the fake
# libnccl.so.2, run without nccl-det, with it preloaded and NCCL_DET_ENABLE=0, and
# with NCCL_DET_ENABLE=1, must leave identical call traces in the fake and return
# identical codes, including NCCL's calls to its own public names (ncclBcast ->
# ncclBroadcast, ncclCommDestroy -> ncclMemFree).  Then the same with injected
# failures: the shim must hand back the fake's error codes unchanged.
. "${NDET_TOP_SRCDIR:-.}/test/test_preload_lib.sh"

script="$top_builddir/test/test_forward_script"
[ -x "$script" ] || fail "$script was not built"

# run NAME [VAR=VALUE...]: run the script with the given environment; trace, stdout
# and stderr land in $scratch/NAME.{trace,out,err}.
run() {
	name=$1
	shift
	rm -f "$scratch/$name.trace"
	env FAKE_NCCL_TRACE="$scratch/$name.trace" "$@" "$script" \
		>"$scratch/$name.out" 2>"$scratch/$name.err" ||
		fail "$name: the script exited with $? ($(cat "$scratch/$name.err"))"
}

run plain
run disabled LD_PRELOAD="$shim_preload" NCCL_DET_ENABLE=0 \
	NCCL_DET_DEBUG=INFO NCCL_DET_DEBUG_SUBSYS=INIT NCCL_DET_DEBUG_FILE="$scratch/disabled.log"
run enabled LD_PRELOAD="$shim_preload" NCCL_DET_ENABLE=1

grep -q '^provider: libnccl.so.2$' "$scratch/plain.err" || fail "plain run: $(cat "$scratch/plain.err")"
for name in disabled enabled; do
	grep -q '^provider: libnccl-det.so$' "$scratch/$name.err" ||
		fail "$name run: the shim was not in front: $(cat "$scratch/$name.err")"
	cmp -s "$scratch/plain.trace" "$scratch/$name.trace" || {
		diff -u "$scratch/plain.trace" "$scratch/$name.trace" >&2
		fail "$name run: the fake saw a different call trace"
	}
	cmp -s "$scratch/plain.out" "$scratch/$name.out" || {
		diff -u "$scratch/plain.out" "$scratch/$name.out" >&2
		fail "$name run: different return codes"
	}
done
grep -q 'version not asked (NCCL_DET_ENABLE=0)' "$scratch/disabled.log" ||
	fail "disabled run: no INFO line about the real NCCL: $(cat "$scratch/disabled.log")"

# NCCL's self-calls reached the fake: each ncclBcast line is preceded by the
# ncclBroadcast it made, each ncclCommDestroy by the ncclMemFree it made.
awk '
	/^ncclBcast\(/ { bcasts++; if (previous ~ /^ncclBroadcast\(/) inner_broadcasts++ }
	/^ncclCommDestroy\(/ { destroys++; if (previous ~ /^ncclMemFree\(/) inner_frees++ }
	{ previous = $0 }
	END {
		if (bcasts == 0 || bcasts != inner_broadcasts || destroys == 0 || destroys != inner_frees)
			exit 1
	}' "$scratch/plain.trace" || fail "the trace lacks NCCL's internal calls"
lines=$(wc -l <"$scratch/plain.trace")
[ "$lines" -gt 80 ] || fail "the trace is suspiciously short ($lines lines)"

# With INFO logging on and nccl-det enabled, the only extra NCCL call is the one
# pncclGetVersion behind the INFO line.
run info LD_PRELOAD="$shim_preload" NCCL_DET_ENABLE=1 \
	NCCL_DET_DEBUG=INFO NCCL_DET_DEBUG_SUBSYS=INIT NCCL_DET_DEBUG_FILE="$scratch/info.log"
grep -q "real NCCL .*libnccl.so.2 (found by RTLD_NEXT), version 22809" "$scratch/info.log" ||
	fail "info run: no INFO line with strategy, path and version: $(cat "$scratch/info.log")"
[ "$(grep -c '^ncclGetVersion(' "$scratch/info.trace")" -eq \
	"$(($(grep -c '^ncclGetVersion(' "$scratch/plain.trace") + 1))" ] ||
	fail "info run: expected exactly one extra ncclGetVersion"
grep -v '^ncclGetVersion(' "$scratch/plain.trace" >"$scratch/plain.noversion"
grep -v '^ncclGetVersion(' "$scratch/info.trace" >"$scratch/info.noversion"
cmp -s "$scratch/plain.noversion" "$scratch/info.noversion" || fail "info run: different trace"

# Injected failures, in interposed and in forwarded-only functions: the codes and
# traces stay identical.  Leaks are expected once a group fails half-way.
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export ASAN_OPTIONS
for failure in ncclAllReduce=5 ncclCommInitRank ncclGroupEnd=2 ncclCommSplit=4 \
	ncclCommGetAsyncError=6 ncclBroadcast=1 ncclMemFree ncclRedOpCreatePreMulSum=2 \
	ncclCommShrink=3 ncclCommDestroy=6; do
	function=${failure%%=*}
	run fail_plain FAKE_NCCL_FAIL="$failure"
	run fail_enabled FAKE_NCCL_FAIL="$failure" LD_PRELOAD="$shim_preload" NCCL_DET_ENABLE=1
	run fail_disabled FAKE_NCCL_FAIL="$failure" LD_PRELOAD="$shim_preload" NCCL_DET_ENABLE=0
	code=${failure#*=}
	[ "$code" = "$failure" ] && code=3
	grep -q "^$function(.* = $code\$" "$scratch/fail_plain.out" ||
		grep -q "^ncclBcast(.* = $code\$" "$scratch/fail_plain.out" ||
		fail "$failure: the fake did not fail as asked"
	for name in fail_enabled fail_disabled; do
		cmp -s "$scratch/fail_plain.out" "$scratch/$name.out" || {
			diff -u "$scratch/fail_plain.out" "$scratch/$name.out" >&2
			fail "$failure: $name returned different codes"
		}
		cmp -s "$scratch/fail_plain.trace" "$scratch/$name.trace" || {
			diff -u "$scratch/fail_plain.trace" "$scratch/$name.trace" >&2
			fail "$failure: $name left a different trace"
		}
	done
done
echo "PASS: identical traces and codes with and without nccl-det ($lines calls)"
