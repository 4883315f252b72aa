#!/bin/bash
# GPU test suite for nccl-det (run on a GPU machine; see README "GPU tests").
#
#   test/gpu/suite.sh smoke            < 3 min: avg's product check, loopback n=3,
#                                      nccl-det-perf at 3 ranks (small sizes, checked)
#                                      and at 8 (wide LL lines, checked),
#                                      a kernel's first launch behind waiting peers
#                                      (3, 4 and 8 ranks, lazy loading),
#                                      nccl-det-info's CUDA IPC probe (a second
#                                      process opens, reads and writes GPU memory),
#                                      3 processes under MPS (every dtype), one-launch mode under
#                                      compute-sanitizer memcheck (f32 and e5m2: its
#                                      kernels' first load, below, sanitizer())
#   test/gpu/suite.sh loopback         loopback n=2..8, full matrix (f32, f16, bf16, f64)
#   test/gpu/suite.sh fp8              the same for fp8 e4m3 and e5m2, and 3 and 4
#                                      processes (MPS and not)
#   test/gpu/suite.sh fp8-quick        fp8 loopback n=2 and 4 full, 8 and 12 quick (every
#                                      rank bucket; a few minutes: after a change to the
#                                      kernels)
#   test/gpu/suite.sh hosts            the multi-host stages on simulated hosts (threads,
#                                      NCCL's part played by device copies): 2 x 2, 4 x 1,
#                                      A,B,A,B, 3 x 2, 2 x 3, 2 x 4; every dtype; 3 x 1
#                                      under compute-sanitizer memcheck (one rank per
#                                      host: no kernel of ours waits for another)
#   test/gpu/suite.sh hosts-sanitize   2 x 2 under compute-sanitizer memcheck, every
#                                      rank's stage in one launch (f32, bf16)
#   test/gpu/suite.sh mp               3 and 4 processes on one GPU, with and without MPS,
#                                      and 3 under MPS with 25/50/100 % of the SMs each
#                                      (f32, f16, bf16, f64: fp8 has its tier)
#   test/gpu/suite.sh lockstep         loopback n=12 quick and n=4 with a 32 MiB pool
#   test/gpu/suite.sh ranks            loopback n=1 (the copy path), 6 and 7, quick
#   test/gpu/suite.sh mp4              4 processes under MPS, full
#   test/gpu/suite.sh ll256            LL up to 256 KiB (the default) with
#                                      the default pool and grid: loopback n=2 full and
#                                      n=3 quick, 3 processes under MPS
#   test/gpu/suite.sh sanitize         memcheck, racecheck, synccheck, initcheck (f32, f16,
#                                      bf16, f64); memcheck and racecheck of wide LL
#                                      lines at 8 ranks
#   test/gpu/suite.sh sanitize-fp8     the same for fp8 e4m3 and e5m2 (the first load of
#                                      the one-launch kernels from PTX, per dtype, would
#                                      not fit one tier for all six: doc/testing.md)
#   test/gpu/suite.sh preload          nccl-tests calling pattern under LD_PRELOAD, 3 and 4
#                                      processes (MPS), NCCL's COLL log checked
#   test/gpu/suite.sh preload-nomps    the same without MPS (time-sliced processes)
#   test/gpu/suite.sh defaults         the library's default pool and grid in loopback
#                                      (n=2), and 4 processes without MPS (quick)
#
# Binaries come from BIN_DIR (default: the build tree).  Logs go to $OUT (default
# /tmp/ndet-gpu-out) as gpu-<tier>.log; the last line printed is the summary.
set -u
tier=${1:-smoke}
here=$(cd "$(dirname "$0")" && pwd)
BIN_DIR=${BIN_DIR:-$here}
OUT=${OUT:-/tmp/ndet-gpu-out}
mkdir -p "$OUT"
LOG="$OUT/gpu-$tier.log"
: > "$LOG"
bin="$BIN_DIR/ndet_gpu_test"
preload_bin="$BIN_DIR/ndet_preload_test"
NDET_LIB=${NDET_LIB:-$here/../../src/.libs/libnccl-det.so}
# shellcheck source=test/gpu/gpu_lib.sh
. "$here/gpu_lib.sh"
# shellcheck source=test/gpu/mps.sh
. "$here/mps.sh"
trap mps_stop EXIT

# run NAME TIMEOUT CMD...: one step, its output to the log, pass/fail counted.
run() {
	local name=$1 limit=$2
	shift 2
	local start=$SECONDS
	timeout --kill-after=10 "$limit" "$@" >> "$LOG" 2>&1
	local rc=$?
	verdict "$name" $rc "$([ $rc -eq 0 ] || echo "rc=$rc, ")$((SECONDS - start)) s"
}

# perf_run NAME LIMIT ARGS...: nccl-det-perf with its checks on (exit 1 on a result off
# the CPU tree, or when a kernel of its own fails); every row of up to 256 KiB must
# also have printed its floor and flag exchange, and with PERF_ROW some row match it.
perf_run() {
	local name=$1 limit=$2
	shift 2
	local out rc start=$SECONDS
	out=$(mktemp)
	timeout --kill-after=10 "$limit" "${NDET_PERF:-$BIN_DIR/../../tools/nccl-det-perf}" "$@" \
		> "$out" 2>&1
	rc=$?
	cat "$out" >> "$LOG"
	local rows exchanges
	rows=$(grep -c '^ *[0-9]' "$out" || true)
	exchanges=$(grep -c 'flag exchange above it' "$out" || true)
	log "$name: $rows rows, $exchanges floor lines with the flag exchange"
	if [ $rc -eq 0 ] && { [ "$rows" -eq 0 ] || [ "$exchanges" -eq 0 ]; }; then
		rc=1
	fi
	# PERF_ROW=REGEX: some row must match it (the run took the plans it was for).
	if [ $rc -eq 0 ] && [ -n "${PERF_ROW:-}" ] && ! grep -q -E "$PERF_ROW" "$out"; then
		log "$name: no row like '$PERF_ROW'"
		rc=1
	fi
	rm -f "$out"
	verdict "$name" $rc "$((SECONDS - start)) s"
}

# info_run NAME LIMIT: nccl-det-info runs, and every cell of its CUDA IPC matrix (a
# second process opening, reading and writing each GPU's memory) says ok (or n/a:
# GPUs without peer access).
info_run() {
	local name=$1 limit=$2
	local out rc start=$SECONDS
	out=$(mktemp)
	timeout --kill-after=10 "$limit" "${NDET_INFO:-$BIN_DIR/../../tools/nccl-det-info}" \
		> "$out" 2>&1
	rc=$?
	cat "$out" >> "$LOG"
	if [ $rc -eq 0 ]; then
		awk '/CUDA IPC/ { on = 1; next }
			on && NF >= 2 && $1 ~ /^[0-9]+$/ && $2 ~ /^[a-z?\/]+$/ {
				rows++
				for (i = 2; i <= NF; i++) if ($i != "ok" && $i != "n/a") bad++
			}
			END { exit !(rows > 0 && bad == 0) }' "$out" || rc=1
	fi
	rm -f "$out"
	verdict "$name" $rc "$((SECONDS - start)) s"
}

# mp_run NAME N MODE LIMIT [PCT...]: N processes on GPU 0, each its own NCCL_HOSTID;
# under MPS, rank r may get CUDA_MPS_ACTIVE_THREAD_PERCENTAGE PCT[r] (a share of the SMs).
mp_run() {
	local name=$1 n=$2 mode=$3 limit=$4
	shift 4
	local pct=("$@")
	local dir
	dir=$(mktemp -d)
	local pids="" rc=0
	for ((r = 0; r < n; r++)); do
		RANK=$r WORLD=$n NDET_TEST_ID_FILE=$dir/id NCCL_HOSTID=ndet-h$r \
			NCCL_SOCKET_IFNAME=lo env ${pct[r]:+CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=${pct[r]}} \
			timeout --kill-after=10 "$limit" \
			"$bin" mp "$mode" >> "$LOG.$name.$r" 2>&1 &
		pids="$pids $!"
	done
	# shellcheck disable=SC2086
	wait_ranks $pids || rc=1
	for ((r = 0; r < n; r++)); do
		cat "$LOG.$name.$r" >> "$LOG"
		rm -f "$LOG.$name.$r"
	done
	rm -rf "$dir"
	[ $rc -eq 0 ] || gpu_state >> "$LOG"
	verdict "$name" $rc
}

# preload_run NAME N: ndet_preload_test on N processes with libnccl-det preloaded; NCCL's
# COLL log may name AllReduce only for the one integer (fallback) call per rank.
preload_run() {
	local name=$1 n=$2 limit=$3
	local dir pids="" rc=0
	dir=$(mktemp -d)
	for ((r = 0; r < n; r++)); do
		RANK=$r WORLD=$n NDET_TEST_ID_FILE=$dir/id NCCL_HOSTID=ndet-h$r \
			NCCL_SOCKET_IFNAME=lo NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL NCCL_DET_STATS=1 \
			LD_PRELOAD="$NDET_LIB" timeout --kill-after=10 "$limit" "$preload_bin" \
			> "$dir/out.$r" 2>&1 &
		pids="$pids $!"
	done
	# shellcheck disable=SC2086
	wait_ranks $pids || rc=1
	[ $rc -eq 0 ] || gpu_state >> "$LOG"
	local allreduces others
	allreduces=$(cat "$dir"/out.* | grep -c "AllReduce:" || true)
	# Every float ReduceScatter/Reduce (PreMulSum too) of the test is diverted.
	others=$(cat "$dir"/out.* | grep -c "ReduceScatter:\| Reduce:" || true)
	cat "$dir"/out.* | grep -v "NCCL INFO" >> "$LOG"
	log "$name: NCCL COLL log lines naming AllReduce: $allreduces (expected $n: one int32 fallback per rank), ReduceScatter or Reduce: $others (expected 0)"
	[ "$allreduces" -le "$n" ] && [ "$others" -eq 0 ] || rc=1
	rm -rf "$dir"
	verdict "$name" $rc
}

# The one-launch kernels are PTX alone in a default build (m4/check_pkg_nvcc.m4): the
# driver compiles them on first use, over a minute for two or four dtypes
# (ndet_gpu_test load-all-ranks loads the dtypes of NDET_TEST_DTYPES; doc/testing.md),
# then takes them from its cache (~/.nv/ComputeCache, about a second).  That happens
# here, once, outside the sanitizers' time limits, and the log says how long it took.
# Without that cache
# (CUDA_CACHE_DISABLE=1, an unwritable home) every sanitizer run would pay it again:
# build them as SASS then (--with-nvcc-all-ranks-gencode).
all_ranks_loaded=no
sanitizer() {
	local tool=$1 n=$2 limit=$3 suffix=${4:-}
	if [ $all_ranks_loaded = no ]; then
		run load-all-ranks 240 "$bin" load-all-ranks
		all_ranks_loaded=yes
	fi
	run "sanitize-$tool-n$n$suffix" "$limit" compute-sanitizer --tool "$tool" --error-exitcode 9 \
		"$bin" sanitize "$n"
}

if ! nvidia-smi -L >> "$LOG" 2>&1; then
	log "SUMMARY gpu-$tier: no GPU visible, skipped"
	exit 77
fi
skip_allowed=0 # a GPU is there: a program that finds none fails (gpu_lib.sh)
log "nccl-det GPU suite, tier $tier, $(date -u +%FT%TZ), commit ${NDET_COMMIT:-unknown}"

case $tier in
smoke)
	run avg-product 60 "$bin" avg-product
	run loopback-n3-quick 120 "$bin" loopback 3 quick
	perf_run perf-n3-small 60 --ranks 3 -b 8 -e 4K -f 8 -d f32,bf16 -o sum,avg --no-nccl
	# Wide LL lines (NCCL_DET_LL_WIDE_MIN's default): 8 ranks on one GPU take them
	# from 32 KiB, one per thread up to their grid cap (72 KiB), then two up to
	# 144 KiB (the llw rows; the last size, 146,544 bytes, only in blocks of two:
	# 8-byte lines stop at 96 KiB).
	PERF_ROW='^ +146544 +[0-9]+ +f32 +sum +eager +llw ' \
		perf_run perf-n8-wide 90 --ranks 8 -b 31K -e 147K -i 8200 -d f32,bf16,f8e4m3 \
		-o sum,avg -c 1 -n 2 -w 1 -G 0 --no-nccl
	# The checked call goes two-shot behind a push, the first launch of its kernel in
	# the process while the peers' push kernels wait: setup loaded every kernel, so
	# CUDA's lazy loading has none left to load there (it would wait for them).
	for n in 3 4 8; do
		CUDA_MODULE_LOADING=LAZY NCCL_DET_LL_MAX=32K NCCL_DET_ONESHOT_MAX=32K \
			NCCL_DET_PUSH_MIN=64K perf_run "first-launch-n$n" 60 --ranks "$n" -b 64K \
			-e 64K -d f32 -o sum -c 1 -n 2 -w 1 -G 0 --no-nccl
	done
	info_run info-ipc 60
	mps_start
	mp_run mp-n3-mps 3 quick 90
	mps_stop
	NDET_TEST_DTYPES=f32,f8e5m2 NDET_TEST_BLOCKS=2 NDET_TEST_PUSH=$((256 << 10)) \
		sanitizer memcheck 2 90
	;;
loopback | fp8)
	# Every dtype would take ~600 s here: fp8 runs as a tier of its own.
	if [ "$tier" = fp8 ]; then
		export NDET_TEST_DTYPES=f8e4m3,f8e5m2
	else
		export NDET_TEST_DTYPES=f32,f16,bf16,f64
	fi
	for n in 2 4; do
		run "loopback-n$n-full" 200 "$bin" loopback "$n" full
	done
	for n in 3 5 8 12; do
		run "loopback-n$n-quick" 120 "$bin" loopback "$n" quick
	done
	# The harness takes LL up to 64 KiB (NDET_TEST_LL; the library's default is 256 KiB).
	NDET_TEST_LL=0 run loopback-n3-quick-no-ll 120 "$bin" loopback 3 quick
	# ... and push from 1 MiB (NDET_TEST_PUSH); the largest sizes pulled as well:
	NDET_TEST_PUSH=0 run loopback-n3-quick-no-push 120 "$bin" loopback 3 quick
	# The library's default pool and grid (96 MiB, 96 blocks: lanes of 1 MiB).
	NDET_TEST_POOL=$((96 << 20)) NDET_TEST_BLOCKS=96 \
		run loopback-n2-pool96m 200 "$bin" loopback 2 quick
	NDET_TEST_POOL=$((32 << 20)) NDET_TEST_BLOCKS=16 NDET_TEST_ONESHOT=$((256 << 10)) \
		run loopback-n4-pool32m 300 "$bin" loopback 4 quick
	if [ "$tier" = fp8 ]; then
		mp_run mp-n4-nomps 4 quick 300
		mps_start
		mp_run mp-n3-mps 3 full 300
		mps_stop
	fi
	;;
hosts)
	for layout in AABB ABCD ABAB AABBCC AAABBB AAAABBBB; do
		run "hosts-$layout" 150 "$bin" hosts "$layout" quick
	done
	NDET_TEST_DTYPES=f32,bf16,f8e4m3 run hosts-ABC-memcheck 200 \
		compute-sanitizer --tool memcheck --error-exitcode 9 "$bin" hosts ABC quick
	;;
hosts-sanitize)
	# Hosts of two ranks need the ranks of a host side by side: one launch for all.
	export NDET_TEST_DTYPES=f32,bf16
	run load-all-ranks 240 "$bin" load-all-ranks
	run hosts-AABB-memcheck-one-launch 240 \
		compute-sanitizer --tool memcheck --error-exitcode 9 "$bin" hosts AABB quick \
		one-launch
	;;
fp8-quick)
	export NDET_TEST_DTYPES=f8e4m3,f8e5m2
	for n in 2 4; do
		run "loopback-n$n-full" 200 "$bin" loopback "$n" full
	done
	for n in 8 12; do
		run "loopback-n$n-quick" 120 "$bin" loopback "$n" quick
	done
	;;
mp)
	export NDET_TEST_DTYPES=f32,f16,bf16,f64
	mp_run mp-n3-nomps 3 quick 300
	mp_run mp-n4-nomps 4 quick 300
	# A fresh MPS daemon for each run, so that each stands alone.
	mps_start
	mp_run mp-n3-mps 3 full 300
	mps_stop
	mps_start
	mp_run mp-n4-mps 4 full 300
	mps_stop
	# Ranks with different shares of the GPU: the slowest sets the pace, nobody hangs.
	mps_start
	mp_run mp-n3-mps-pct 3 quick 200 25 50 100
	mps_stop
	;;
ranks)
	# The rank counts the other tiers skip: one rank (NDET_PATH_COPY, no peers) and the
	# 6- and 7-rank trees (an odd subtree on the right).
	for n in 1 6 7; do
		run "loopback-n$n-quick" 120 "$bin" loopback "$n" quick
	done
	;;
lockstep)
	# The loopback configurations that need its lock-step launches (12 ranks' streams
	# outnumber the 32 hardware queues; n=4 with a 32 MiB pool).
	run loopback-n12-quick 120 "$bin" loopback 12 quick
	NDET_TEST_POOL=$((32 << 20)) NDET_TEST_BLOCKS=16 NDET_TEST_ONESHOT=$((256 << 10)) \
		run loopback-n4-pool32m 300 "$bin" loopback 4 quick
	;;
ll256)
	# The harness takes LL up to 64 KiB on a 4-block grid unless told (LL then stops at
	# 16 KiB, a block per 4 KiB); the library's defaults are 256 KiB on up to 96 blocks
	# (2 and 3 ranks on one GPU get 96 and 64: 70001 bf16/f16 elements go LL on 35
	# blocks; 4 and more ranks plan 256 KiB two-shot).  Three processes under MPS get
	# 33 (3/4 of 132 SMs between them): there LL runs up to 33001 f32 elements on 33
	# blocks, and 70001 bf16 elements go two-shot.
	ll256_env="NDET_TEST_LL=$((256 << 10)) NDET_TEST_BLOCKS=96 NDET_TEST_POOL=$((96 << 20))"
	# shellcheck disable=SC2086 # a list of assignments
	run loopback-n2-full-ll256 200 env $ll256_env "$bin" loopback 2 full
	# shellcheck disable=SC2086
	run loopback-n3-quick-ll256 120 env $ll256_env "$bin" loopback 3 quick
	mps_start
	export NDET_TEST_LL=$((256 << 10)) NDET_TEST_BLOCKS=96 NDET_TEST_POOL=$((96 << 20))
	mp_run mp-n3-mps-ll256 3 quick 200
	unset NDET_TEST_LL NDET_TEST_BLOCKS NDET_TEST_POOL
	mps_stop
	;;
mp4)
	mps_start
	mp_run mp-n4-mps 4 full 300
	mps_stop
	;;
sanitize | sanitize-fp8)
	if [ "$tier" = sanitize-fp8 ]; then
		export NDET_TEST_DTYPES=f8e4m3,f8e5m2
	else
		export NDET_TEST_DTYPES=f32,f16,bf16,f64
	fi
	for tool in memcheck racecheck synccheck initcheck; do
		# 256 KiB: the largest f32/f64 sizes push, f16/bf16 pull
		NDET_TEST_BLOCKS=2 NDET_TEST_PUSH=$((256 << 10)) sanitizer "$tool" 3 150
	done
	# Wide LL lines (12-byte lines, one per thread) at 8 ranks, alone: engines whose
	# grid and LL slots take them (NDET_GPU_WIDE_* in test/gpu/ndet_gpu_common.h).
	for tool in memcheck racecheck; do
		NDET_TEST_WIDE=1 NDET_TEST_BLOCKS=64 NDET_TEST_LL=$((256 << 10)) \
			sanitizer "$tool" 8 150 -wide
	done
	;;
preload)
	mps_start
	preload_run preload-n3-mps 3 200
	preload_run preload-n4-mps 4 200
	mps_stop
	;;
preload-nomps)
	preload_run preload-n3-nomps 3 200
	preload_run preload-n4-nomps 4 200
	;;
defaults)
	NDET_TEST_POOL=$((96 << 20)) NDET_TEST_BLOCKS=96 \
		run loopback-n2-pool96m 200 "$bin" loopback 2 quick
	mp_run mp-n4-nomps 4 quick 300
	;;
*)
	echo "unknown tier $tier" >&2
	exit 2
	;;
esac

log "SUMMARY gpu-$tier: $passed passed, $failed failed${failures:+ (failed:$failures)}${skips:+, $skipped skipped (not run here:$skips)}"
[ $failed -eq 0 ]
