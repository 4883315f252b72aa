#!/bin/bash
# PyTorch cases beyond torch_divert.sh (see torch_extras.py for each): N
# processes on one GPU, each its own NCCL_HOSTID, LD_PRELOAD=$NDET_LIB, NCCL_DET_STATS=1
# and NCCL's COLL log, without and with MPS:
#   graph, graph-nonblocking   first all-reduces inside torch.cuda.graph capture
#   graph-nonblocking-nccl     the same with NCCL_DET_ENABLE=0 (plain NCCL's behaviour)
#   nonblocking                a few eager calls on a non-blocking communicator
#   expandable                 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
#   streams                    1000 calls alternating between two streams
#   ddp, ddp-nccl              DDP, bucket_cap_mb 1 vs 25, under nccl-det and plain NCCL
#   disabled                   NCCL_DET_ENABLE=0 on every rank: nothing diverted
#   ipcfail                    NCCL_DET_TEST_FAIL=ipc_open@1: every rank falls back, one WARN
#   ineligible, strict         int64 forwarded, PreMulSum diverted (bit-exact); strict refuses nothing of these
#   query                      ncclDetCommQuery through _comm_ptr(); no destroy: STATS at exit, rank 0's verdict
# Each job's ranks log to $OUT/extras-<mps>-<case>-<rank>.log; torch_extras.py check
# judges them.  The last line is the SUMMARY.
#
# usage: NDET_LIB=/path/libnccl-det.so [OUT=dir] [CASES="graph ..."] [MPS="off on"] \
#            [EXTRAS_NCCL_SUBSYS=COLL,INIT] [EXTRAS_ENV="VAR=VALUE ..."] \
#            test/gpu/torch_extras.sh [N]
set -u
n=${1:-4}
here=$(cd "$(dirname "$0")" && pwd)
NDET_LIB=${NDET_LIB:-$here/../../src/.libs/libnccl-det.so}
OUT=${OUT:-/tmp/ndet-gpu-out}
CASES=${CASES:-graph graph-nonblocking expandable streams ddp ddp-nccl disabled ipcfail ineligible strict query}
MPS=${MPS:-off on}
LIMIT=${LIMIT:-300}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
LOG="$OUT/torch-extras.log"
: >"$LOG"
# shellcheck source=test/gpu/gpu_lib.sh
. "$here/gpu_lib.sh"

if [ ! -f "$NDET_LIB" ]; then
	log "SUMMARY torch_extras: FAIL: NDET_LIB=$NDET_LIB does not exist"
	exit 1
fi

# shellcheck source=test/gpu/mps.sh
. "$here/mps.sh"
trap mps_stop EXIT

# The script case and the environment of a job.
job_env() {
	case $1 in
	graph | streams | ddp | ineligible) echo "$1" ;;
	graph-nonblocking) echo "graph TORCH_NCCL_USE_COMM_NONBLOCKING=1" ;;
	graph-nonblocking-nccl) echo "graph TORCH_NCCL_USE_COMM_NONBLOCKING=1 NCCL_DET_ENABLE=0" ;;
	nonblocking) echo "basic TORCH_NCCL_USE_COMM_NONBLOCKING=1" ;;
	expandable) echo "expandable PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" ;;
	ddp-nccl) echo "ddp NCCL_DET_ENABLE=0" ;;
	disabled) echo "basic NCCL_DET_ENABLE=0" ;;
	ipcfail) echo "basic NCCL_DET_TEST_FAIL=ipc_open@1" ;;
	strict) echo "ineligible NCCL_DET_STRICT=1" ;;
	query) echo "query EXTRAS_NO_DESTROY=1" ;;
	*) return 1 ;;
	esac
}

# job MPS-TAG NAME: N ranks of one case, each with its own timeout, then the check.
job() {
	local tag=$1 name=$2 spec script port pids="" rc=0 start=$SECONDS
	spec=$(job_env "$name") || {
		verdict "$tag/$name" 1 "unknown case"
		return
	}
	# shellcheck disable=SC2086 # the spec is a case and assignments
	set -- $spec
	script=$1
	shift
	port=$((20000 + RANDOM % 20000))
	rm -f "$OUT/extras-$tag-$name-"*.log
	for ((r = 0; r < n; r++)); do
		# shellcheck disable=SC2086 # EXTRAS_ENV is a list of VAR=VALUE words
		env "$@" RANK=$r WORLD="$n" PORT=$port NCCL_HOSTID=ndet-h$r NCCL_SOCKET_IFNAME=lo \
			LD_PRELOAD="$NDET_LIB" NCCL_DET_STATS=1 NCCL_DEBUG=INFO \
			NCCL_DEBUG_SUBSYS="${EXTRAS_NCCL_SUBSYS:-COLL}" ${EXTRAS_ENV:-} \
			timeout --kill-after=10 "$LIMIT" "$PYTHON" "$here/torch_extras.py" "$script" \
			>"$OUT/extras-$tag-$name-$r.log" 2>&1 &
		pids="$pids $!"
	done
	for p in $pids; do wait "$p" || rc=1; done
	log "$tag/$name: ranks exited $([ $rc -eq 0 ] && echo 0 || echo "non-zero (see $OUT/extras-$tag-$name-*.log)") in $((SECONDS - start)) s"
	"$PYTHON" "$here/torch_extras.py" check "$script" "$OUT/extras-$tag-$name-"*.log 2>&1 | tee -a "$LOG"
	[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
	verdict "$tag/$name" $rc
}

if ! nvidia-smi -L >>"$LOG" 2>&1; then
	log "SUMMARY torch_extras: no GPU visible, skipped"
	exit 77
fi
log "torch_extras n=$n, $(date -u +%FT%TZ), NDET_LIB=$NDET_LIB, $("$PYTHON" -c 'import torch; print("torch", torch.__version__)' 2>&1)"
for mps in $MPS; do
	case $mps in
	on) mps_start ;;
	off) ;;
	*)
		log "unknown MPS mode $mps"
		continue
		;;
	esac
	for name in $CASES; do
		job "mps-$mps" "$name"
	done
	[ "$mps" = on ] && mps_stop
done
log "SUMMARY torch_extras n=$n: $passed passed, $failed failed${failures:+ (failed:$failures)}${skips:+, $skipped skipped (not run here:$skips)}"
[ $failed -eq 0 ]
