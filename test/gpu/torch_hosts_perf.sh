#!/bin/bash
# Multi-host all-reduce against NCCL on simulated hosts: LAYOUT's processes on one GPU
# under MPS, each its own NCCL_HOSTID (NCCL moves the bytes over sockets, as between
# machines) and NCCL_DET_TEST_HOST.  Each process times NCCL's ncclAllReduce and
# nccl-det's on the same communicator, buffers and stream, in alternating rounds
# (torch_hosts_perf.py); the summary is NCCL time / nccl-det time per row: above 1,
# nccl-det is faster; and the time of nccl-det's network stages moved by NCCL alone
# (p2p, no kernels) / nccl-det time: how much of nccl-det's time those bytes take.
# usage: torch_hosts_perf.sh /path/to/libnccl-det.so [LAYOUT]   (default ABCD: 4 x 1)
set -u
lib=$1
layout=${2:-ABCD}
n=${#layout}
OUT=${OUT:-/tmp/ndet-gpu-out}
mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
unset CUDA_DEVICE_MAX_CONNECTIONS
. "$here/mps.sh"
trap mps_stop EXIT
mps_start
export SIZES=${SIZES:-$((16 << 20)),$((64 << 20)),$((256 << 20))} ITERS=${ITERS:-5} ROUNDS=${ROUNDS:-5}
port=$((20000 + RANDOM % 20000))
pids=""
for ((r = 0; r < n; r++)); do
	NDET_LIB="$lib" NCCL_DET_TEST_HOST=${layout:r:1} RANK=$r WORLD=$n PORT=$port LAYOUT=$layout \
		NCCL_HOSTID=ndet-h$r NCCL_SOCKET_IFNAME=lo NCCL_DEBUG=VERSION \
		timeout 280 python3 "$here/torch_hosts_perf.py" > "$OUT/perf-$layout-$r.out" 2>&1 &
	pids="$pids $!"
done
fail=0
for p in $pids; do wait "$p" || fail=1; done
[ $fail -eq 0 ] || tail -5 "$OUT/perf-$layout-0.out"
python3 - "$OUT/perf-$layout-0.out" "$layout" <<'PY' || fail=1
import sys
path, layout = sys.argv[1:]
rows = [l.split() for l in open(path, errors="replace") if l.startswith("ROW ")]
print("layout %s: NCCL time / nccl-det time (medians of alternating rounds, same "
      "communicator), microseconds per call" % layout)
for _, dtype, size, mode, nccl, ndet, p2p in rows:
    print("%-9s %10s %-6s nccl %9s  nccl-det %9s  ratio %.3f  p2p %9s  p2p/nccl-det %.3f" % (
        dtype, size, mode, nccl, ndet, float(nccl) / float(ndet), p2p,
        float(p2p) / float(ndet)))
sys.exit(0 if rows else 1)
PY
echo "SUMMARY torch_hosts_perf $layout: $([ $fail -eq 0 ] && echo done || echo FAIL)"
exit $fail
