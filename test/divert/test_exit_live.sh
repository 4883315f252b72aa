#!/bin/sh
# Process exit with live communicators (test_exit_live.c), nccl-det enabled in front
# of the fake NCCL: every mode must exit 0 within seconds, without a crash and
# without a sanitizer report, whatever was left alive or waiting; with
# NCCL_DET_STATS=1 each communicator still alive reports at exit.
. "${NDET_TOP_SRCDIR:-.}/test/support/test_preload_lib.sh"

program="$top_builddir/test/divert/test_exit_live"
[ -x "$program" ] || fail "$program was not built"
[ -f "$fake_shim" ] || fail "$fake_shim was not built"

for mode in live blocked late-destroy early-destroy; do
	# NCCL_DET_TIMEOUT far above the limit: the blocked call must not be what ends.
	started=$(date +%s)
	env LD_PRELOAD="$fake_shim_preload" NCCL_DET_ENABLE=1 NCCL_DET_TIMEOUT=600 \
		FAKE_NCCL_TIMEOUT_MS=600000 NCCL_DET_DEBUG_FILE="$scratch/$mode.log" \
		timeout 60 "$program" "$mode" >"$scratch/$mode.out" 2>"$scratch/$mode.err"
	status=$?
	elapsed=$(($(date +%s) - started))
	[ "$status" -eq 0 ] || fail "$mode: exit status $status after ${elapsed}s: $(cat "$scratch/$mode.err")"
	[ "$elapsed" -le 30 ] || fail "$mode: took ${elapsed}s to exit"
	grep -q '^diverted 5$' "$scratch/$mode.out" ||
		fail "$mode: nccl-det was not diverting: $(cat "$scratch/$mode.out")"
	if grep -E 'Sanitizer|runtime error|ERROR' "$scratch/$mode.err" >&2; then
		fail "$mode: reports on stderr"
	fi
done
echo "PASS: exit(0) with live, waiting and late-destroyed communicators leaves promptly with status 0"

# NCCL_DET_STATS=1: a communicator never destroyed reports at exit (live mode: the
# five ranks that were diverted), once each.
env LD_PRELOAD="$fake_shim_preload" NCCL_DET_ENABLE=1 NCCL_DET_STATS=1 NCCL_DET_TIMEOUT=600 \
	FAKE_NCCL_TIMEOUT_MS=600000 NCCL_DET_DEBUG_FILE="$scratch/stats.log" \
	timeout 60 "$program" live >"$scratch/stats.out" 2>"$scratch/stats.err" ||
	fail "live with NCCL_DET_STATS=1: $(cat "$scratch/stats.err")"
stats=$(grep -c 'NCCL-DET STATS communicator .* (diverted): diverted 1 calls' "$scratch/stats.log")
[ "$stats" -eq 5 ] || fail "expected 5 STATS lines at exit, got $stats: $(cat "$scratch/stats.log")"
echo "PASS: NCCL_DET_STATS reports every communicator still alive at exit"
