#!/bin/bash
# Several GPU steps in one device call, within one time budget, with every log in one
# tarball: a lent machine returns only a handful of files per call, and each call
# costs a machine start.
#
#   test/gpu/batch.sh STEP...         e.g. test/gpu/batch.sh smoke leak graph-nb perf2
#   test/gpu/batch.sh list            the steps and what each runs
#
# Environment: BIN_DIR / NDET_LIB / BUILD as for the other scripts (default: the build
# tree, else the .devbin tree that test/gpu/pack_devbin.sh makes), OUT (the
# tarball $OUT/batch-logs.tgz and $OUT/batch.log go there), BATCH_BUDGET (seconds for
# all steps, default 540: a device call may last 600 s).  A step that would start with
# less than its minimum left is not run and counts as failed ("no time").  The last
# line is `SUMMARY batch: N passed, M failed (...)`.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
# The carried binaries on a GPU machine (it has no build tree); the build tree where
# there is one, so a stale .devbin never stands in for a fresh build.
if [ ! -e "$top/src/.libs/libnccl-det.so" ] && [ ! -d "$top/.devbin" ] && [ -f "$top/.devbin.tgz" ]; then
	tar -C "$top" -xzf "$top/.devbin.tgz"
fi
if [ ! -e "$top/src/.libs/libnccl-det.so" ] && [ -d "$top/.devbin" ]; then
	BIN_DIR=${BIN_DIR:-$top/.devbin/test/gpu}
	NDET_LIB=${NDET_LIB:-$top/.devbin/src/.libs/libnccl-det.so}
	BUILD=${BUILD:-$top/.devbin}
fi
export BIN_DIR=${BIN_DIR:-$here} NDET_LIB=${NDET_LIB:-$top/src/.libs/libnccl-det.so}
export BUILD=${BUILD:-$top}
export NDET_COMMIT=${NDET_COMMIT:-$(cat "$BUILD/COMMIT" 2>/dev/null || git -C "$top" rev-parse --short HEAD 2>/dev/null || echo unknown)}
OUT=${OUT:-/tmp/ndet-gpu-out}
budget=${BATCH_BUDGET:-540}
work=$(mktemp -d)
mkdir -p "$OUT"
LOG=$OUT/batch.log
: >"$LOG"
# shellcheck source=test/gpu/gpu_lib.sh
. "$here/gpu_lib.sh"
PERF=$BUILD/tools/nccl-det-perf
[ -x "$PERF" ] || PERF=$top/tools/nccl-det-perf
export PERF
# The 2-rank steps compare with NCCL where there are two GPUs (NCCL refuses ranks that
# share a GPU in one process); on one GPU they time nccl-det alone.
if [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -ge 2 ]; then
	export NCCL2=--nccl
else
	export NCCL2=--no-nccl
fi
# PyTorch and JAX steps need the machine's Python environment.
if [ -z "${VIRTUAL_ENV:-}" ] && [ -f /opt/torch/.venv/bin/activate ]; then
	# shellcheck disable=SC1091
	. /opt/torch/.venv/bin/activate
fi

# The steps: name, minimum seconds it needs, what it runs (bash -c in the repository
# root, with OUT=<the step's own directory>, NDET_LIB, BIN_DIR, BUILD and PERF set).
# The minimums leave room above what a healthy run takes on an H200 (doc/testing.md,
# "How long the tiers take"), so that a slow healthy run is not cut short; a hung one
# is cut when the budget ends and fails.  smoke and sanitize also hold the first load
# of the one-launch kernels: slow from PTX on a fresh machine (a default build), fast
# from SASS or the driver's cache (suite.sh).
steps_table() {
	cat <<'EOF'
smoke        200 test/gpu/suite.sh smoke
loopback     480 test/gpu/suite.sh loopback
hosts        300 test/gpu/suite.sh hosts
hosts-sanitize 240 test/gpu/suite.sh hosts-sanitize
torch-hosts  300 test/gpu/torch_hosts.sh $NDET_LIB AAAA AABB ABCD ABAB
torch-hosts6 420 test/gpu/torch_hosts.sh $NDET_LIB AAAAAA AABBCC AAABBB
torch-hosts-bytes 200 test/gpu/torch_hosts.sh $NDET_LIB bytes mismatch
hosts-perf   300 test/gpu/torch_hosts_perf.sh $NDET_LIB ABCD
fp8          450 test/gpu/suite.sh fp8
fp8-quick    240 test/gpu/suite.sh fp8-quick
mp           400 test/gpu/suite.sh mp
sanitize     200 test/gpu/suite.sh sanitize
sanitize-fp8 200 test/gpu/suite.sh sanitize-fp8
preload       90 test/gpu/suite.sh preload
preload-nomps 150 test/gpu/suite.sh preload-nomps
defaults     120 test/gpu/suite.sh defaults
leak         300 env NDET_FAULT_CYCLES=100 FAULTS_MPS=on FAULTS_BUDGET=280 test/gpu/faults.sh leak-destroy leak-abort
faults       240 env FAULTS_BUDGET=230 test/gpu/faults.sh kill kill-during stop abort-thread diverge-count diverge-dtype diverge-op many-comms fork fork-exit exit-live torch-teardown torch-skip
faults-hosts 200 env FAULTS_MPS=off FAULTS_BUDGET=190 test/gpu/faults.sh kill-hosts stop-hosts torch-hosts
faults-leak  420 env FAULTS_BUDGET=410 test/gpu/faults.sh leak-finalize leak-destroy leak-abort
graph-nb     200 env "CASES=graph-nonblocking nonblocking graph-nonblocking-nccl" "MPS=on off" LIMIT=60 test/gpu/torch_extras.sh 3
extras-nomps 400 env MPS=off LIMIT=90 test/gpu/torch_extras.sh 4
torch-rs     200 test/gpu/torch_rs.sh $NDET_LIB 4
jax          150 test/gpu/loading.sh jax
torchrun     200 test/gpu/loading.sh torchrun
nccl-tests   240 test/gpu/nccl_tests.sh
nccl-tests-hosts 400 test/gpu/nccl_tests_hosts.sh
ll-stress    300 test/gpu/ll_stress.sh
ll-stress1   100 env RUNS=1 QUEUE_RUNS=1 test/gpu/ll_stress.sh
ll-stress-counted 90 env RUNS=3 QUEUE_RUNS=1 DIAG_RUNS=0 test/gpu/ll_stress.sh
lockstep     130 test/gpu/suite.sh lockstep
ranks        150 test/gpu/suite.sh ranks
mp4          130 test/gpu/suite.sh mp4
ll256        150 test/gpu/suite.sh ll256
torch-large  200 bash -c '. test/gpu/mps.sh && trap mps_stop EXIT && mps_start && DIVERT_LARGE=16777216 test/gpu/torch_divert.sh $NDET_LIB 4'
perf-trace-small 60 env NCCL_NVLS_ENABLE=0 NCCL_DET_LL_MAX=0 $PERF --ranks 2 -b 8 -e 64K -f 8 -d bf16 $NCCL2 -c 0 --trace && env NCCL_NVLS_ENABLE=0 NCCL_DET_LL_MAX=64K $PERF --ranks 2 -b 8 -e 64K -f 8 -d bf16 $NCCL2 -c 0 --trace
probe-small  120 export NCCL_NVLS_ENABLE=0; P="$PERF --ranks 2 -d bf16 $NCCL2 -G 0 -c 0"; NCCL_DET_LL_MAX=0 $P -b 8 -e 64K -f 8 --trace; NCCL_DET_LL_MAX=64K $P -b 8 -e 4K -f 8 --trace; $P -b 1M -e 16M -f 4 --trace; NCCL_DET_POOL_SIZE=8M $P -b 1M -e 16M -f 4; NCCL_DET_MAX_BLOCKS=4 $P -b 1M -e 16M -f 4; NCCL_DET_MAX_BLOCKS=8 $P -b 1M -e 16M -f 4
faults-abort 150 env FAULTS_MPS=on FAULTS_BUDGET=140 test/gpu/faults.sh abort-thread kill diverge-count
ll-ablate    420 env ABLATE_BUDGET=400 test/gpu/ll_ablate.sh $BUILD/ablate
small-targets 120 test/gpu/small_targets.sh
small-targets-reduce 120 env COLL=reduce test/gpu/small_targets.sh
ll-wide-trace 120 export NCCL_NVLS_ENABLE=0; for n in 8 4; do for w in 224K 1; do echo "== $n ranks, NCCL_DET_LL_WIDE_MIN=$w"; NCCL_DET_LL_WIDE_MIN=$w $PERF --ranks $n -b 64 -e 4K -f 8 -d f32 -o sum -c 0 --no-nccl -n 1000 -w 20 -G 10 --modes graph --trace || exit 1; done; done
shim-overhead 60 env LD_PRELOAD=$NDET_LIB $PERF --shim-overhead
one-launch-time 240 export NCCL_NVLS_ENABLE=0; for round in 1 2; do for n in 8 4 2; do $BIN_DIR/ndet_gpu_test one-launch-time $n || exit 1; $PERF --ranks $n -b 8 -e 64K -f 2 -d f32 -o sum -c 0 --no-nccl -n 20 -w 5 -G 20 --modes graph || exit 1; done; done
ll-variants  420 env "NRANKS=8 4" "SIZES=-b 2K -e 64K -f 2" ROUNDS=3 ABLATE_BUDGET=400 test/gpu/ll_ablate.sh $BUILD/ablate
ll-formats   360 env "NRANKS=8 4 2" "SIZES=-b 8 -e 16K -f 2" ROUNDS=3 ABLATE_BUDGET=340 test/gpu/ll_ablate.sh $BUILD/ablate
perf-fail    30 env NDET_PERF_TEST_WRONG=1 $PERF --ranks 2 -b 4K -e 4K -d f32 -o sum -G 0 -c 1 --no-nccl >$OUT/perf-fail.txt; rc=$?; cat $OUT/perf-fail.txt; [ $rc -eq 1 ] && awk '$1 == 4096 && $5 == "eager" && $10 == 2 && $15 == "FAIL"' $OUT/perf-fail.txt | grep -q . && grep -q '^# Out of bounds values : 2 FAILED$' $OUT/perf-fail.txt && grep -q 'CHECK FAILURES' $OUT/perf-fail.txt
perf-reduce  90 export NCCL_NVLS_ENABLE=0; NDET_PERF_TEST_WRONG=1 $PERF --ranks 3 --coll reduce -r 1 -b 4K -e 4K -d f32 -o sum -G 0 -c 1 --no-nccl >$OUT/reduce-fail.txt; [ $? -eq 1 ] && grep -q '^# Out of bounds values : 1 FAILED$' $OUT/reduce-fail.txt || exit 1; NDET_PERF_TEST_WRONG=2 $PERF --ranks 3 --coll reduce -r 1 -b 4K -e 4K -d f32 -o sum -G 0 -c 1 --no-nccl >$OUT/reduce-fail2.txt; [ $? -eq 1 ] && grep -q '^# Out of bounds values : 2 FAILED$' $OUT/reduce-fail2.txt || exit 1; for n in 3 4; do $PERF --ranks $n --coll reduce -r $((n - 1)) -b 8 -e 4M -f 8 -d f32,bf16 -o all -G 1 -n 2 -w 1 --no-nccl || exit 1; done; for n in 2 4 8; do $PERF --ranks $n --coll reduce -r 1 -b 8 -e 64K -f 2 -d bf16 -o sum -c 0 -n 100 -w 20 -G 5 --modes graph --no-nccl || exit 1; done
perf-mid     40 env NCCL_NVLS_ENABLE=0 $PERF --ranks 2 -b 32K -e 64M -f 2 -d bf16 $NCCL2 -G 0 -c 0 --trace
perf-trace    60 env NCCL_NVLS_ENABLE=0 $PERF --ranks 2 -b 4M -e 256M -f 4 -d bf16 $NCCL2 -G 0 -c 0 --trace
link-probe    30 $PERF --link-probe
perf2         60 env NCCL_NVLS_ENABLE=0 $PERF --ranks 2 -b 8 -e 1G -f 8 -d bf16 --nccl --nccl-symmetric --csv $OUT/perf2.csv
perf-push     60 env NCCL_NVLS_ENABLE=0 $PERF --ranks 2 -b 1M -e 1G -f 4 -d bf16 --nccl --csv $OUT/perf-push.csv
vs-copy      60 env CUDA_VISIBLE_DEVICES=0 $PERF --ranks 4 -b 64M -e 512M -f 8 -d f32,bf16 -G 0 -c 0 && env CUDA_VISIBLE_DEVICES=0 NCCL_DET_PUSH_MIN=0 $PERF --ranks 4 -b 64M -e 512M -f 8 -d f32,bf16 -G 0 -c 0
vs-lanes    150 P="env CUDA_VISIBLE_DEVICES=0 $PERF -G 0 -c 0"; for i in 1 2; do for pool in 96M 48M; do NCCL_DET_POOL_SIZE=$pool $P --ranks 4 -b 4M -e 512M -f 2 -d f32,bf16; done; done; for pool in 96M 48M; do NCCL_DET_PUSH_MIN=0 NCCL_DET_POOL_SIZE=$pool $P --ranks 4 -b 4M -e 512M -f 2 -d bf16; done; for pool in 96M 24M; do NCCL_DET_POOL_SIZE=$pool $P --ranks 8 -b 4M -e 512M -f 4 -d bf16; done; env CUDA_VISIBLE_DEVICES=0 $PERF --ranks 4 -b 1M -e 256M -f 4 -d f32,bf16 -w 1 -n 2 && env CUDA_VISIBLE_DEVICES=0 $PERF --ranks 8 -b 3M -e 192M -f 4 -d bf16 -w 1 -n 2
vs-copy-fp8  60 env CUDA_VISIBLE_DEVICES=0 $PERF --ranks 4 -b 64M -e 512M -f 8 -d f8e4m3,f8e5m2,bf16 -G 0 -c 0 && env CUDA_VISIBLE_DEVICES=0 $PERF --ranks 4 -b 8 -e 64M -f 64 -d f8e4m3,f8e5m2 -o all -w 2 -n 5
ll-probe     40 env NCCL_NVLS_ENABLE=0 NCCL_DET_LL_MAX=256K $PERF --ranks 2 -b 32K -e 256K -f 2 -d bf16 $NCCL2 -c 1 && env NCCL_NVLS_ENABLE=0 NCCL_DET_LL_MAX=0 $PERF --ranks 2 -b 32K -e 256K -f 2 -d bf16 $NCCL2 -c 0
perf-pull     60 env NCCL_NVLS_ENABLE=0 NCCL_DET_PUSH_MIN=0 $PERF --ranks 2 -b 1M -e 1G -f 4 -d bf16 --nccl -G 0 -c 0
perf-pool32   60 env NCCL_NVLS_ENABLE=0 NCCL_DET_POOL_SIZE=32M $PERF --ranks 2 -b 16M -e 1G -f 4 -d bf16 --nccl -G 0 -c 0
perf-push-mid 60 env NCCL_NVLS_ENABLE=0 NCCL_DET_LL_MAX=0 NCCL_DET_PUSH_MIN=256K $PERF --ranks 2 -b 256K -e 16M -f 4 -d bf16 --nccl -G 0 -c 0
perf-rs       60 env NCCL_NVLS_ENABLE=0 $PERF --ranks 2 -b 64K -e 1G -f 16 -d bf16 -G 0 --nccl --coll reducescatter
EOF
}

if [ "${1:-}" = list ] || [ $# -eq 0 ]; then
	steps_table
	[ $# -eq 0 ] && echo "usage: $0 STEP... (or list)" >&2 && exit 2
	exit 0
fi

if ! nvidia-smi -L >>"$LOG" 2>&1; then
	log "SUMMARY batch: no GPU visible, skipped"
	exit 77
fi
log "nccl-det GPU batch, $(date -u +%FT%TZ), commit $NDET_COMMIT, budget ${budget} s: $*"
start=$SECONDS
for name in "$@"; do
	line=$(steps_table | awk -v n="$name" '$1 == n')
	if [ -z "$line" ]; then
		verdict "$name" 1 "unknown step"
		continue
	fi
	need=$(echo "$line" | awk '{print $2}')
	cmd=$(echo "$line" | cut -d' ' -f2- | sed -E 's/^ *[0-9]+ +//')
	left=$((budget - (SECONDS - start)))
	if [ "$left" -lt "$need" ]; then
		verdict "$name" 1 "no time: ${left} s left, needs ${need} s"
		continue
	fi
	mkdir -p "$work/$name"
	t0=$SECONDS
	# The step's own OUT, so its logs land in the tarball.
	(cd "$top" && OUT=$work/$name timeout --kill-after=10 "$left" bash -c "$cmd") \
		>"$work/$name/stdout.txt" 2>&1
	rc=$?
	tail -3 "$work/$name/stdout.txt" | sed "s/^/  [$name] /" | tee -a "$LOG"
	verdict "$name" "$rc" "$((SECONDS - t0)) s"
done
log "SUMMARY batch: $passed passed, $failed failed${failures:+ (failed:$failures)}${skips:+, $skipped skipped (not run here:$skips)}"
cp "$LOG" "$work/"
tar czf "$OUT/batch-logs.tgz" -C "$work" . 2>/dev/null
rm -rf "$work"
[ "$failed" -eq 0 ]
