#!/bin/bash
# The README's nccl-tests recipe, literally: all_reduce_perf with every GPU of the
# machine as ranks of one process (-g N), under LD_PRELOAD and through nccl-det-run.
#
#   1. LD_PRELOAD, -d all -o all, 8 B-64 MiB, -c 1: nccl-tests' own check (#wrong) is 0
#      on every row, and NCCL_DET_STATS says every rank diverted calls.
#   2. nccl-det-run, bfloat16 sum, 8 B-1 GiB, eager and -G 5 (CUDA graphs): #wrong 0.
#   3. The same sizes without nccl-det (plain NCCL), for the time ratio NCCL / nccl-det
#      per size that the summary prints (nccl-tests' out-of-place column).
#
# nccl-tests is not part of nccl-det: build it yourself (NVIDIA/nccl-tests, `make`)
# and point NCCL_TESTS_BIN at all_reduce_perf.  Without it, or without a GPU, the
# script skips (exit 77).
#
# usage: NDET_LIB=... [BUILD=build tree] [NCCL_TESTS_BIN=.../all_reduce_perf] [OUT=dir] \
#            test/gpu/nccl_tests.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
NDET_LIB=${NDET_LIB:-$top/src/.libs/libnccl-det.so}
BUILD=${BUILD:-$top}
BIN=${NCCL_TESTS_BIN:-$top/.nccl-tests/all_reduce_perf}
OUT=${OUT:-/tmp/ndet-gpu-out}
mkdir -p "$OUT"
LOG=$OUT/nccl-tests.log
: >"$LOG"
# shellcheck source=test/gpu/gpu_lib.sh
. "$here/gpu_lib.sh"

if ! nvidia-smi -L >>"$LOG" 2>&1; then
	log "SUMMARY nccl-tests: no GPU visible, skipped"
	exit 77
fi
if [ ! -x "$BIN" ]; then
	log "SUMMARY nccl-tests: no all_reduce_perf at $BIN (set NCCL_TESTS_BIN), skipped"
	exit 77
fi
run_tool=$BUILD/tools/nccl-det-run
gpus=$(nvidia-smi -L | grep -c '^GPU')
[ "$gpus" -le 8 ] || gpus=8
log "nccl-tests all_reduce_perf -g $gpus, $(date -u +%FT%TZ), commit ${NDET_COMMIT:-unknown}, $BIN"

# job NAME LIMIT CMD...: run it, then judge nccl-tests' checks and nccl-det's STATS.
job() {
	local name=$1 limit=$2 rc
	shift 2
	local file=$OUT/nccl-tests-$name.txt
	# Line-buffered: a crash leaves the rows it got through.
	NCCL_DET_STATS=1 timeout --kill-after=10 "$limit" stdbuf -oL "$@" >"$file" 2>&1
	rc=$?
	local rows bad stats diverted
	rows=$(wrong_rows "$file" all | wc -l)
	bad=$(wrong_rows "$file" bad | wc -l)
	stats=$(grep -c "NCCL-DET STATS" "$file")
	diverted=$(grep "NCCL-DET STATS" "$file" | grep -c "diverted [1-9]")
	local why=""
	[ $rc -eq 0 ] || why="$why exit $rc;"
	[ "$rows" -gt 0 ] || why="$why no result rows (or no #wrong columns);"
	[ "$bad" -eq 0 ] || why="$why $bad rows with #wrong != 0;"
	case $name in
	plain) [ "$stats" -eq 0 ] || why="$why nccl-det was loaded;" ;;
	*) [ "$diverted" -eq "$gpus" ] || why="$why $diverted of $gpus ranks diverted;" ;;
	esac
	log "  $name: $rows rows, $bad with #wrong != 0, $diverted of $stats ranks diverted (exit $rc)"
	if [ -n "$why" ]; then
		wrong_rows "$file" bad | head -5 >>"$LOG"
		tail -5 "$file" >>"$LOG"
	fi
	why=${why%;}
	verdict "$name" "$([ -z "$why" ] && echo 0 || echo 1)" "${why# }"
}

cd "$(dirname "$BIN")" || exit 2
job preload-all 240 env LD_PRELOAD="$NDET_LIB" "$BIN" -g "$gpus" -b 8 -e 64M -f 4 -c 1 -d all -o all
if [ -x "$run_tool" ]; then
	job run-eager 120 env NCCL_DET_RUN_PRELOAD_LIB="$NDET_LIB" "$run_tool" "$BIN" -g "$gpus" -b 8 -e 1G -f 8 -c 1 -d bfloat16
	job run-graph 120 env NCCL_DET_RUN_PRELOAD_LIB="$NDET_LIB" "$run_tool" "$BIN" -g "$gpus" -b 8 -e 1G -f 8 -c 1 -d bfloat16 -G 5
else
	verdict run "1" "$run_tool missing"
fi
job plain 120 "$BIN" -g "$gpus" -b 8 -e 1G -f 8 -c 1 -d bfloat16

# NCCL / nccl-det time per size (out-of-place, eager), both from this run.
if [ -f "$OUT/nccl-tests-run-eager.txt" ] && [ -f "$OUT/nccl-tests-plain.txt" ]; then
	log "  time ratio NCCL / nccl-det (nccl-tests out-of-place, bfloat16 sum, eager; > 1: nccl-det faster):"
	awk '$1 ~ /^[0-9]+$/ && NF >= 13 { t[FILENAME, $1] = $6; sizes[$1] = 1 }
	     END { for (s in sizes) if (t[ARGV[1], s] > 0 && t[ARGV[2], s] > 0)
	               printf "    %12d B  %6.2f\n", s, t[ARGV[2], s] / t[ARGV[1], s] }' \
		"$OUT/nccl-tests-run-eager.txt" "$OUT/nccl-tests-plain.txt" | sort -n | tee -a "$LOG"
fi
log "SUMMARY nccl-tests: $passed passed, $failed failed${failures:+ (failed:$failures)}${skips:+, $skipped skipped (not run here:$skips)}"
[ "$failed" -eq 0 ]
