#!/bin/bash
# Diverted PyTorch all_reduce, N processes on one GPU (NCCL_HOSTID per process), run
# under nccl-det and under plain NCCL in the same command.  nccl-det must give 0
# mismatches against the CPU tree and 0 size/offset variance, show diverted calls in
# its stats, and NCCL's COLL log must show no AllReduce for them.
# usage: torch_divert.sh /path/to/libnccl-det.so [N]
set -u
lib=$1
n=${2:-4}
OUT=${OUT:-/tmp/ndet-gpu-out}
mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
run() {
	local tag=$1
	shift
	local port=$((20000 + RANDOM % 20000)) pids=""
	for ((r = 0; r < n; r++)); do
		env "$@" RANK=$r WORLD=$n PORT=$port NCCL_HOSTID=ndet-h$r NCCL_SOCKET_IFNAME=lo \
			timeout 240 python3 "$here/torch_divert.py" > "$OUT/divert-$tag-$r.out" \
			2> "$OUT/divert-$tag-$r.err" &
		pids="$pids $!"
	done
	local rc=0
	for p in $pids; do wait "$p" || rc=1; done
	return $rc
}
fail=0
run ndet LD_PRELOAD="$lib" NCCL_DET_STATS=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL || {
	echo "FAIL: nccl-det job failed"; fail=1; }
run nccl || { echo "FAIL: plain NCCL job failed"; fail=1; }
for tag in ndet nccl; do
	for ((r = 0; r < n; r++)); do
		line=$(grep '^{' "$OUT/divert-$tag-$r.out" | tail -1)
		echo "$tag rank $r: $(echo "$line" | python3 -c 'import json,sys; d=json.load(sys.stdin); print("elements", d["elements"], "tree mismatches", d["total_mismatch"], "size/offset variant", d["total_size_variant"])' 2>/dev/null || echo "no result")"
	done
done
ndet_bad=$(cat "$OUT"/divert-ndet-*.out | grep '^{' | python3 -c 'import json,sys; print(sum(json.loads(l)["total_mismatch"]+json.loads(l)["total_size_variant"] for l in sys.stdin))' 2>/dev/null || echo x)
[ "$ndet_bad" = "0" ] || { echo "FAIL: nccl-det results differ from the tree or between sizes ($ndet_bad)"; fail=1; }
colls=$(cat "$OUT"/divert-ndet-*.out "$OUT"/divert-ndet-*.err | grep -c "AllReduce" || true)
echo "NCCL COLL log lines naming AllReduce under nccl-det: $colls (integer/fallback calls only)"
grep -h "NCCL-DET" "$OUT"/divert-ndet-0.out "$OUT"/divert-ndet-0.err | grep -i "stat\|divert" | head -5
# nccl-det's own COLL lines name the protocol of every diverted call.
paths=$(cat "$OUT"/divert-ndet-*.out "$OUT"/divert-ndet-*.err | grep -o "all-reduce count [0-9]* [a-z0-9]* [a-z]*: [a-z0-9]*" |
	awk '{print $6}' | sort | uniq -c | tr '\n' ' ')
echo "nccl-det all-reduce calls by protocol: $paths"
if [ "${DIVERT_LARGE:-0}" -ge $((16 << 20)) ] && ! echo "$paths" | grep -q push; then
	echo "FAIL: DIVERT_LARGE=$DIVERT_LARGE but no call took the push protocol"
	fail=1
fi
echo "SUMMARY torch_divert n=$n: $([ $fail -eq 0 ] && echo PASS || echo FAIL)"
exit $fail
