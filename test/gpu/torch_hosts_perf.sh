#!/bin/bash
# Multi-host all-reduce against NCCL on simulated hosts: LAYOUT's processes on one GPU
# under MPS, each its own NCCL_HOSTID (NCCL moves the bytes over sockets, as between
# machines), NCCL_DET_TEST_HOST per rank.  Rounds alternate NCCL alone
# (NCCL_DET_ENABLE=0) and nccl-det on the same processes' layout, and the summary is
# NCCL time / nccl-det time per row (medians over rounds): above 1, nccl-det is faster.
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
export SIZES=${SIZES:-$((16 << 20)),$((64 << 20)),$((256 << 20))}
run() {
	local tag=$1 enable=$2 port=$((20000 + RANDOM % 20000)) pids="" r
	for ((r = 0; r < n; r++)); do
		LD_PRELOAD="$lib" NCCL_DET_ENABLE=$enable NCCL_DET_TEST_HOST=${layout:r:1} \
			RANK=$r WORLD=$n PORT=$port NCCL_HOSTID=ndet-h$r NCCL_SOCKET_IFNAME=lo \
			timeout 300 python3 "$here/torch_hosts_perf.py" > "$OUT/perf-$tag-$r.out" 2>&1 &
		pids="$pids $!"
	done
	local rc=0
	for p in $pids; do wait "$p" || rc=1; done
	return $rc
}
fail=0
for round in 1 2 3; do
	run "nccl-$round" 0 || fail=1
	run "ndet-$round" 1 || fail=1
done
cat "$OUT"/perf-*-0.out | grep -h '^ROW' > /dev/null || fail=1
python3 - "$OUT" "$layout" <<'PY'
import glob, statistics, sys
out, layout = sys.argv[1:]
rows = {}
for path in glob.glob(out + "/perf-*-0.out"):
    who = "ndet" if "/perf-ndet" in path else "nccl"
    for line in open(path):
        if line.startswith("ROW "):
            _, dtype, size, mode, us = line.split()
            rows.setdefault((dtype, int(size), mode), {}).setdefault(who, []).append(float(us))
print("layout %s: NCCL time / nccl-det time (median of rounds), microseconds" % layout)
for key in sorted(rows):
    r = rows[key]
    if "ndet" in r and "nccl" in r:
        a, b = statistics.median(r["nccl"]), statistics.median(r["ndet"])
        print("%-9s %10d %-6s nccl %9.1f  nccl-det %9.1f  ratio %.3f" % (key + (a, b, a / b)))
PY
echo "SUMMARY torch_hosts_perf $layout: $([ $fail -eq 0 ] && echo done || echo FAIL)"
exit $fail
