#!/bin/bash
# GPU fault tests through the real NCCL with libnccl-det.so preloaded: several
# processes on one GPU, each with its own NCCL_HOSTID (see test/gpu/ndet_fault_test.c for
# what each case checks), first under MPS, then without, plus PyTorch's watchdog on a
# killed rank (test/gpu/torch_watchdog.py).
#
#   test/gpu/faults.sh [CASE...]      default: every case of the table below
#
# Environment: BIN_DIR (where ndet_fault_test is), NDET_LIB (libnccl-det.so), OUT (the log
# $OUT/gpu-faults.log, every process's output in it, prefixed [CASE-PASS.RANK]), PYTHON (one with
# torch; default python3), FAULTS_MPS (passes, default "on off"), FAULTS_BUDGET (seconds,
# default 450: every case's timeout is cut to what is left, a case with less than 15 s
# left is not run and fails), NDET_FAULT_CYCLES (leak cycles, default 100).
# The last line is `SUMMARY faults: N passed, M failed`.
set -u
here=$(cd "$(dirname "$0")" && pwd)
BIN_DIR=${BIN_DIR:-$here}
NDET_LIB=${NDET_LIB:-$here/../../src/.libs/libnccl-det.so}
OUT=${OUT:-/tmp/ndet-gpu-out}
PYTHON=${PYTHON:-python3}
BUDGET=${FAULTS_BUDGET:-450}
bin=$BIN_DIR/ndet_fault_test
mkdir -p "$OUT"
LOG=$OUT/gpu-faults.log
: > "$LOG"
# shellcheck source=test/gpu/gpu_lib.sh
. "$here/gpu_lib.sh"
# shellcheck source=test/gpu/mps.sh
. "$here/mps.sh"
trap mps_stop EXIT
scratch=$(mktemp -d)

# kill-during runs without MPS only: under MPS the server reclaims a killed client's
# memory at once, so a survivor's kernel still reading the victim's pool takes an illegal
# address fault, which MPS makes sticky in every client (CUDA reports it on the
# survivors' streams; no kernel is left to write nccl-det's error word).  Separate GPUs,
# the case this stands for, keep an exported allocation alive while peers map it.
# name          ranks limit passes  environment
cases="
kill            3     60    on,off  NCCL_DET_TIMEOUT=5
kill-during     4     60    off     NCCL_DET_TIMEOUT=5 NCCL_DET_DEBUG_DELAY=10000000
stop            3     60    on,off  NCCL_DET_TIMEOUT=5
abort-thread    2     40    on,off  NCCL_DET_TIMEOUT=60
diverge-count   3     40    on,off  NCCL_DET_TIMEOUT=5
diverge-dtype   3     40    on,off  NCCL_DET_TIMEOUT=5
diverge-op      3     40    on,off  NCCL_DET_TIMEOUT=5
many-comms      4     90    on,off  NCCL_DET_TIMEOUT=30 NCCL_DET_MAX_BLOCKS=8
fork            3     40    on,off  NCCL_DET_TIMEOUT=30
fork-exit       3     40    on,off  NCCL_DET_TIMEOUT=30
exit-live       3     40    on,off  NCCL_DET_TIMEOUT=30
kill-hosts      4     60    on,off  NCCL_DET_TIMEOUT=5 HOSTS=AABB
stop-hosts      4     60    on,off  NCCL_DET_TIMEOUT=5 HOSTS=AABB
torch-teardown  3     60    off     NCCL_DET_TIMEOUT=5 TORCH_NCCL_ASYNC_ERROR_HANDLING=1
torch-hosts     4     60    off     NCCL_DET_TIMEOUT=5 TORCH_NCCL_ASYNC_ERROR_HANDLING=1 HOSTS=AABB
torch-skip      3     60    off     NCCL_DET_TIMEOUT=5 TORCH_NCCL_ASYNC_ERROR_HANDLING=3
leak-finalize   3     150   on,off    NCCL_DET_TIMEOUT=30
leak-destroy    3     150   on,off    NCCL_DET_TIMEOUT=30
leak-abort      3     150   on,off    NCCL_DET_TIMEOUT=30
"
# Seconds PyTorch's watchdog may take beyond NCCL_DET_TIMEOUT to report the error, and to
# end the process (it sleeps 4 x TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC first, set to 1 s).
TORCH_REPORT_SLACK=5
TORCH_END_SLACK=30

# collect TAG N RC: every rank's output into the log; a failed case's own lines on stdout.
collect() {
	local tag=$1 n=$2 rc=$3
	for ((r = 0; r < n; r++)); do
		grep -v "NCCL INFO" "$scratch/$tag.$r.log" | sed "s/^/[$tag.$r] /" >> "$LOG"
		if [ "$rc" -ne 0 ]; then
			grep -E "FAIL|^rank [0-9]|SUMMARY|failed|WARN" "$scratch/$tag.$r.log" |
				head -20 | sed "s/^/[$tag.$r] /"
		fi
	done
}

# wait_file PATH LIMIT: until PATH exists or LIMIT seconds (of $SECONDS) are reached.
wait_file() {
	while [ ! -e "$1" ] && [ "$SECONDS" -lt "$2" ]; do
		sleep 0.05
	done
	[ -e "$1" ]
}

# stop: SIGSTOP the last rank once it wrote its pid (it has not called yet), SIGKILL it
# once every survivor reported the error, then tell the survivors it is gone.
stop_victim() {
	local dir=$1 n=$2 end=$((SECONDS + $3)) pid
	wait_file "$dir/id.victim-pid" "$end" || return
	pid=$(cat "$dir/id.victim-pid")
	kill -STOP "$pid"
	log "stop: rank $((n - 1)) (pid $pid) stopped"
	for ((r = 0; r < n - 1; r++)); do
		wait_file "$dir/id.reported.$r" "$end"
	done
	kill -KILL "$pid"
	while kill -0 "$pid" 2> /dev/null && [ "$SECONDS" -lt "$end" ]; do
		sleep 0.05
	done
	log "stop: rank $((n - 1)) killed after the survivors reported"
	touch "$dir/id.victim-gone"
}

# HOSTS=LAYOUT among a case's variables: rank r runs as test host LAYOUT[r]
# (NCCL_DET_TEST_HOST), so the communicator spans simulated hosts and its calls run the
# multi-host stages (doc/multihost-design.md, "Faults").
host_of_rank() {
	local r=$1 kv
	shift
	for kv in "$@"; do
		case $kv in HOSTS=*) echo "NCCL_DET_TEST_HOST=${kv:6+r:1}" && return ;; esac
	done
	echo "NCCL_DET_TEST_HOST="
}

# fault_case TAG NAME RANKS LIMIT [VAR=VALUE...]: ndet_fault_test NAME on RANKS processes
# (NAME-hosts: the same case on the hosts of HOSTS=).
# The last rank of kill, kill-during and stop must die of SIGKILL; every other rank passes.
fault_case() {
	local tag=$1 name=${2%-hosts} n=$3 limit=$4 start=$SECONDS victim=-1 rc=0 dir code
	shift 4
	local pids=()
	dir=$(mktemp -d)
	case $name in kill | kill-during | stop) victim=$((n - 1)) ;; esac
	for ((r = 0; r < n; r++)); do
		env "$@" "$(host_of_rank $r "$@")" RANK=$r WORLD="$n" NDET_TEST_ID_FILE="$dir/id" NCCL_HOSTID=ndet-h$r \
			NCCL_SOCKET_IFNAME=lo NCCL_DEBUG=WARN LD_PRELOAD="$NDET_LIB" \
			timeout --kill-after=5 "$limit" "$bin" "$name" > "$scratch/$tag.$r.log" 2>&1 &
		pids[r]=$!
	done
	[ "$name" = stop ] && stop_victim "$dir" "$n" "$limit"
	for ((r = 0; r < n; r++)); do
		wait "${pids[r]}"
		code=$?
		if [ "$r" -eq "$victim" ] && [ "$code" -ne 137 ]; then
			log "$tag: rank $r (the victim) ended with $code, not 137 (SIGKILL)"
			rc=1
		elif [ "$r" -ne "$victim" ] && [ "$code" -ne 0 ]; then
			log "$tag: rank $r ended with $code"
			rc=1
		fi
	done
	collect "$tag" "$n" $rc
	rm -rf "$dir"
	verdict "$tag" $rc "$((SECONDS - start)) s"
}

# torch_case TAG LIMIT [VAR=VALUE...]: 3 PyTorch ranks, the last one SIGKILLed during the
# survivors' all_reduce.  Each survivor's watchdog must report the NCCL error within
# NCCL_DET_TIMEOUT + TORCH_REPORT_SLACK of its call, and end it (not our timeout) within
# NCCL_DET_TIMEOUT + TORCH_END_SLACK.
torch_case() {
	local tag=$1 limit=$2 n=3 start=$SECONDS rc=0 timeout_s=1800 dir kv
	shift 2
	for kv in "$@"; do
		case $kv in
		NCCL_DET_TIMEOUT=*) timeout_s=${kv#*=} ;;
		HOSTS=*) n=$((${#kv} - 6)) ;;
		esac
	done
	local port=$((20000 + RANDOM % 20000)) pids=()
	dir=$(mktemp -d)
	for ((r = 0; r < n; r++)); do
		(
			env "$@" "$(host_of_rank $r "$@")" RANK=$r WORLD=$n PORT=$port \
				LIMIT=$((timeout_s + TORCH_END_SLACK + 10)) \
				NCCL_HOSTID=ndet-h$r NCCL_SOCKET_IFNAME=lo NCCL_DEBUG=WARN LD_PRELOAD="$NDET_LIB" \
				TORCH_NCCL_DUMP_ON_TIMEOUT=0 TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC=1000 \
				timeout --kill-after=5 "$limit" "$PYTHON" "$here/torch_watchdog.py" \
				> "$scratch/$tag.$r.log" 2>&1
			echo "$? $(date +%s.%N)" > "$dir/end.$r"
		) &
		pids[r]=$!
	done
	for ((r = 0; r < n; r++)); do
		wait "${pids[r]}"
	done
	local file code end called said when reported ended
	for ((r = 0; r < n; r++)); do
		file=$scratch/$tag.$r.log
		read -r code end < "$dir/end.$r"
		if [ "$r" -eq $((n - 1)) ]; then
			[ "$code" -eq 137 ] || { log "$tag: rank $r (the victim) ended with $code, not 137"; rc=1; }
			continue
		fi
		called=$(sed -n 's/^CALLED //p' "$file" | head -1)
		# PyTorch's own line (glog: [E1130 04:54:16.867173002 ...]), not nccl-det's
		# WARN, which names ncclRemoteError too and has no time of day to read.
		said=$(grep -m1 -E '\[E[0-9]{4} [0-9:.]+ [^]]*\].*(ncclRemoteError|remote process exited)' \
			"$file" | cut -c1-400)
		if [ -z "$called" ] || [ -z "$said" ]; then
			log "$tag: rank $r: all_reduce ${called:+issued}${called:-never issued}; PyTorch said ${said:-nothing naming the NCCL error} (exit $code)"
			rc=1
			continue
		fi
		# glog's time of day ([E1130 04:54:16.867173002 ...]), local time like date's.
		when=$(date -d "$(echo "$said" | sed -nE 's/.*\[E[0-9]{4} ([0-9:.]+) .*/\1/p')" +%s.%N)
		reported=$(awk -v a="$called" -v b="$when" 'BEGIN { printf "%.1f", b - a }')
		# Before the call (a time of day misread, or of another day): the delay is
		# unknown, and a check that cannot fail is no check.
		if awk -v e="$reported" 'BEGIN { exit !(e < 0) }'; then
			log "$tag: rank $r: PyTorch's report reads $reported s after the all_reduce: its time is unknown"
			rc=1
		fi
		ended=$(awk -v a="$called" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
		log "$tag: rank $r: PyTorch reported the error $reported s after the all_reduce and the process ended (exit $code) $ended s after it; PyTorch said: $said"
		if [ "$code" -eq 124 ] || [ "$code" -eq 137 ] || [ "$code" -eq 3 ] || [ "$code" -eq 0 ]; then
			log "$tag: rank $r was not ended by PyTorch's watchdog (exit $code)"
			rc=1
		fi
		if awk -v e="$reported" -v l=$((timeout_s + TORCH_REPORT_SLACK)) 'BEGIN { exit !(e > l) }'; then
			log "$tag: rank $r: reported later than NCCL_DET_TIMEOUT + $TORCH_REPORT_SLACK s"
			rc=1
		fi
		if awk -v e="$ended" -v l=$((timeout_s + TORCH_END_SLACK)) 'BEGIN { exit !(e > l) }'; then
			log "$tag: rank $r: ended later than NCCL_DET_TIMEOUT + $TORCH_END_SLACK s"
			rc=1
		fi
	done
	collect "$tag" "$n" $rc
	rm -rf "$dir"
	verdict "$tag" $rc "$((SECONDS - start)) s"
}

# selected NAME [CASE...]: NAME is one of the CASEs, or none was given.
selected() {
	local name=$1 want
	shift
	[ $# -eq 0 ] && return 0
	for want in "$@"; do
		[ "$want" = "$name" ] && return 0
	done
	return 1
}

if ! nvidia-smi -L >> "$LOG" 2>&1; then
	log "SUMMARY faults: no GPU visible, skipped"
	exit 77
fi
if [ ! -x "$bin" ] || [ ! -e "$NDET_LIB" ]; then
	log "SUMMARY faults: $bin or $NDET_LIB missing (set BIN_DIR, NDET_LIB)"
	exit 2
fi
log "nccl-det fault tests, $(date -u +%FT%TZ), commit ${NDET_COMMIT:-unknown}, library $NDET_LIB"

for pass in ${FAULTS_MPS:-on off}; do
	[ "$pass" = on ] && mps_start
	while read -r name n limit passes extra; do
		[ -n "$name" ] || continue
		selected "$name" "$@" || continue
		case ",$passes," in *",$pass,"*) ;; *) continue ;; esac
		tag=$name-mps-$pass
		left=$((BUDGET - SECONDS))
		if [ $left -lt 15 ]; then
			failed=$((failed + 1))
			failures="$failures $tag"
			log "FAIL $tag (not run: the time budget of $BUDGET s is spent)"
			continue
		fi
		[ "$limit" -le "$left" ] || limit=$left
		# shellcheck disable=SC2086 # extra is a list of VAR=VALUE words
		case $name in
		torch-*) torch_case "$tag" "$limit" $extra ;;
		*) fault_case "$tag" "$name" "$n" "$limit" $extra ;;
		esac
	done <<< "$cases"
	[ "$pass" = on ] && mps_stop
done

rm -rf "$scratch"
if [ $((passed + failed)) -eq 0 ]; then
	failed=1
	failures=" (no case matched: '$*' with FAULTS_MPS='${FAULTS_MPS:-on off}')"
fi
log "SUMMARY faults: $passed passed, $failed failed${failures:+ (failed:$failures)}${skips:+, $skipped skipped (not run here:$skips)}"
[ $failed -eq 0 ]
