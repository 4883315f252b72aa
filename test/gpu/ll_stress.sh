#!/bin/bash
# The configuration in which ranks' streams sharing a hardware queue can stall an LL step
# (4 ranks as threads of one process on one GPU, 32 MiB pool, 16 blocks, LL up to
# 64 KiB; doc/testing.md), run RUNS times; then QUEUE_RUNS times with CUDA_DEVICE_MAX_CONNECTIONS=2,
# where the ranks' streams share hardware queues: with the harness's lock-step launches
# (counted), and with each phase launched all at once (a diagnostic, not counted: the
# false serialisation that stalled the loopback).
#
# usage: [BIN_DIR=...] [OUT=dir] [RUNS=6] [QUEUE_RUNS=2] [DIAG_RUNS=QUEUE_RUNS] [N=4]
#        test/gpu/ll_stress.sh
# DIAG_RUNS: how many times the diagnostic runs (each fails: the engines' timeout
# reports the stalled calls, or the 120 s limit ends the run).
set -u
here=$(cd "$(dirname "$0")" && pwd)
BIN_DIR=${BIN_DIR:-$here}
OUT=${OUT:-/tmp/ndet-gpu-out}
RUNS=${RUNS:-6}
QUEUE_RUNS=${QUEUE_RUNS:-2}
DIAG_RUNS=${DIAG_RUNS:-$QUEUE_RUNS}
N=${N:-4}
mkdir -p "$OUT"
LOG=$OUT/ll-stress.log
: >"$LOG"
# shellcheck source=test/gpu/gpu_lib.sh
. "$here/gpu_lib.sh"
bin=$BIN_DIR/ndet_gpu_test

if ! nvidia-smi -L >>"$LOG" 2>&1; then
	log "SUMMARY ll-stress: no GPU visible, skipped"
	exit 77
fi
skip_allowed=0 # a GPU is there: a program that finds none fails (gpu_lib.sh)
log "LL stress, $(date -u +%FT%TZ), commit ${NDET_COMMIT:-unknown}: loopback n=$N quick, 32 MiB pool, 16 blocks, LL 64 KiB"

# one NAME [VAR=VALUE...]: one loopback run; prints its summary line.
one() {
	local name=$1 rc start=$SECONDS
	shift
	env NDET_TEST_POOL=$((32 << 20)) NDET_TEST_BLOCKS=16 NDET_TEST_LL=$((64 << 10)) "$@" \
		timeout --kill-after=10 120 "$bin" loopback "$N" quick >"$OUT/ll-stress-$name.txt" 2>&1
	rc=$?
	log "  $name: exit $rc in $((SECONDS - start)) s: $(tail -1 "$OUT/ll-stress-$name.txt")"
	grep -m3 '^FAIL' "$OUT/ll-stress-$name.txt" >>"$LOG"
	return $rc
}

for ((i = 1; i <= RUNS; i++)); do
	one "run$i"
	verdict "run$i" $?
done
# Two hardware queues for 4 ranks' 8 streams: every rank shares a queue with another.
# The harness launches in lock-step there (gpu_rank.shared_queues: a barrier between
# calls), which must pass; launching a whole phase at once (window 0) is the
# diagnostic that shows the false serialisation (not counted).
for ((i = 1; i <= QUEUE_RUNS; i++)); do
	one "queues2-lockstep-run$i" CUDA_DEVICE_MAX_CONNECTIONS=2
	verdict "queues2-lockstep-run$i" $?
done
queue_stalls=0
for ((i = 1; i <= DIAG_RUNS; i++)); do
	one "queues2-window0-run$i" CUDA_DEVICE_MAX_CONNECTIONS=2 NDET_TEST_STREAM_WINDOW=0 ||
		queue_stalls=$((queue_stalls + 1))
	grep -m3 '^NOTE' "$OUT/ll-stress-queues2-window0-run$i.txt" >>"$LOG"
done
log "  diagnostic: $queue_stalls of $DIAG_RUNS runs with CUDA_DEVICE_MAX_CONNECTIONS=2 and all launches at once failed (not counted)"
log "SUMMARY ll-stress: $passed passed, $failed failed${failures:+ (failed:$failures)}${skips:+, $skipped skipped (not run here:$skips)}"
[ "$failed" -eq 0 ]
