#!/bin/bash
# Preload transparency: a 3-process PyTorch all_reduce job (one GPU, NCCL_HOSTID per
# process) with and without LD_PRELOAD=libnccl-det.so NCCL_DET_ENABLE=0 must give
# identical results, map the same libnccl and report the same ncclGetVersion; the
# preloaded run must show nccl-det's own log line.  (With nccl-det enabled the float
# results are the tree's and differ from NCCL's by design: test/gpu/torch_divert.sh.)  usage: torch_preload.sh /path/to/libnccl-det.so [N]
set -u
lib=$1
n=${2:-3}
OUT=${OUT:-/tmp/ndet-gpu-out}
mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
run() { # run TAG EXTRA-ENV...
	local tag=$1
	shift
	local port=$((20000 + RANDOM % 20000)) pids=""
	for ((r = 0; r < n; r++)); do
		env "$@" RANK=$r WORLD=$n PORT=$port NCCL_HOSTID=ndet-h$r NCCL_SOCKET_IFNAME=lo \
			timeout 120 python3 "$here/torch_preload.py" > "$OUT/torch-$tag-$r.out" \
			2> "$OUT/torch-$tag-$r.err" &
		pids="$pids $!"
		sleep 0.2
	done
	local rc=0
	for p in $pids; do wait "$p" || rc=1; done
	return $rc
}
fail=0
run plain || { echo "FAIL: job without the preload failed"; fail=1; }
run preload LD_PRELOAD="$lib" NCCL_DET_ENABLE=0 NCCL_DET_DEBUG=INFO NCCL_DET_DEBUG_SUBSYS=INIT || {
	echo "FAIL: job with the preload failed"; fail=1; }
for ((r = 0; r < n; r++)); do
	a=$(grep '^{' "$OUT/torch-plain-$r.out" | python3 -c 'import json,sys; d=json.load(sys.stdin); d.pop("nccl_det_mapped"); print(json.dumps(d, sort_keys=True))')
	b=$(grep '^{' "$OUT/torch-preload-$r.out" | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d.pop("nccl_det_mapped"), "libnccl-det not mapped"; print(json.dumps(d, sort_keys=True))')
	if [ -z "$a" ] || [ "$a" != "$b" ]; then
		echo "FAIL rank $r: plain $a"
		echo "              preload $b"
		fail=1
	else
		echo "rank $r identical: $a"
	fi
done
if grep -q "NCCL-DET INFO" "$OUT"/torch-preload-0.out "$OUT"/torch-preload-0.err; then
	grep -h "NCCL-DET INFO" "$OUT"/torch-preload-0.out "$OUT"/torch-preload-0.err | head -3
else
	echo "FAIL: no NCCL-DET log line in the preloaded run"
	fail=1
fi
echo "SUMMARY torch_preload n=$n: $([ $fail -eq 0 ] && echo PASS || echo FAIL)"
exit $fail
