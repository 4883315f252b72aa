#!/bin/bash
# PyTorch reduce-scatter, PreMulSum and FSDP2 under nccl-det: N processes on one GPU
# (NCCL_HOSTID per process), each job run under nccl-det (LD_PRELOAD) and under plain
# NCCL in the same command.  nccl-det must give
#   - 0 mismatches against the CPU tree (reduce_scatter_tensor with sum, avg, min, max,
#     product, PreMulSum with a host and a device scalar; all_reduce with the same ops),
#     0 reduce-scatter blocks unlike the matching all_reduce slice, 0 elements that
#     change with the bucketing (one flat bucket vs one call per tensor);
#   - diverted calls in its stats (reduce-scatter and PreMulSum counts), and no
#     ReduceScatter in NCCL's COLL log (NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL);
#   - bit-identical FSDP2 weights after training with two bucketing/prefetch configs.
# Plain NCCL's numbers are printed next to them (bucketing variance, whether its FSDP2
# weights differ between the configs), for the record, not as a failure.
# usage: torch_rs.sh /path/to/libnccl-det.so [N]      (OUT: where logs go)
set -u
lib=$1
n=${2:-4}
OUT=${OUT:-/tmp/ndet-gpu-out}
STEPS=${STEPS:-10}
mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
run() { # run TAG MODE CONFIG EXTRA-ENV...
	local tag=$1 mode=$2 config=$3
	shift 3
	local port=$((20000 + RANDOM % 20000)) pids=""
	for ((r = 0; r < n; r++)); do
		env "$@" RANK=$r WORLD=$n PORT=$port MODE=$mode CONFIG=$config STEPS=$STEPS \
			NCCL_HOSTID=ndet-h$r NCCL_SOCKET_IFNAME=lo CUBLAS_WORKSPACE_CONFIG=:4096:8 \
			timeout 300 python3 "$here/torch_rs.py" >"$OUT/rs-$tag-$r.out" \
			2>"$OUT/rs-$tag-$r.err" &
		pids="$pids $!"
	done
	local rc=0
	for p in $pids; do wait "$p" || rc=1; done
	return $rc
}
field() { # field TAG RANK EXPRESSION (on the rank's JSON line as d)
	grep '^{' "$OUT/rs-$1-$2.out" 2>/dev/null | tail -1 |
		python3 -c "import json,sys; d=json.load(sys.stdin); print($3)" 2>/dev/null || echo "none"
}
ndet_env=(LD_PRELOAD="$lib" NCCL_DET_STATS=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL)
fail=0

# ---- collectives
run coll-ndet collectives - "${ndet_env[@]}" || { echo "FAIL: nccl-det collectives job failed"; fail=1; }
run coll-nccl collectives - || { echo "FAIL: plain NCCL collectives job failed"; fail=1; }
for tag in coll-ndet coll-nccl; do
	for ((r = 0; r < n; r++)); do
		echo "$tag rank $r: $(field "$tag" "$r" '"elements %d, tree mismatches %d, rs!=ar slice %d, bucketing variant %d%s" % (d["elements"], d["total_mismatch"], d["rs_vs_ar"], d["bucketing_variant"], "" if d["total_mismatch"] == 0 else " " + json.dumps({k: v for k, v in d["mismatch"].items() if v}))')"
	done
done
for ((r = 0; r < n; r++)); do
	bad=$(field coll-ndet "$r" 'd["total_mismatch"] + d["rs_vs_ar"] + d["bucketing_variant"]')
	[ "$bad" = "0" ] || { echo "FAIL: nccl-det rank $r: $bad bad elements ($(field coll-ndet "$r" 'd.get("error", "")'))"; fail=1; }
done
rs_lines=$(cat "$OUT"/rs-coll-ndet-*.out "$OUT"/rs-coll-ndet-*.err | grep -c "ReduceScatter" || true)
ar_lines=$(cat "$OUT"/rs-coll-ndet-*.out "$OUT"/rs-coll-ndet-*.err | grep -c "AllReduce" || true)
echo "NCCL COLL log under nccl-det: $rs_lines ReduceScatter lines (must be 0), $ar_lines AllReduce lines (non-float or internal calls only)"
[ "$rs_lines" -eq 0 ] || { echo "FAIL: reduce-scatters reached NCCL"; fail=1; }
stats=$(grep -h "NCCL-DET STATS" "$OUT"/rs-coll-ndet-0.out "$OUT"/rs-coll-ndet-0.err | head -3)
echo "$stats"
echo "$stats" | grep -q "reduce-scatter [1-9]" || { echo "FAIL: no diverted reduce-scatter in the stats"; fail=1; }
echo "$stats" | grep -q "PreMulSum [1-9]" || { echo "FAIL: no diverted PreMulSum in the stats"; fail=1; }

# ---- FSDP2: two bucketing/prefetch configurations, nccl-det and plain NCCL
for config in a b; do
	run "fsdp-ndet-$config" fsdp "$config" LD_PRELOAD="$lib" NCCL_DET_STATS=1 ||
		{ echo "FAIL: nccl-det FSDP2 job ($config) failed"; fail=1; }
	run "fsdp-nccl-$config" fsdp "$config" || { echo "FAIL: plain NCCL FSDP2 job ($config) failed"; fail=1; }
done
for tag in ndet nccl; do
	a=$(field "fsdp-$tag-a" 0 'd.get("digest", d.get("error"))')
	b=$(field "fsdp-$tag-b" 0 'd.get("digest", d.get("error"))')
	echo "FSDP2 $tag: config a $a"
	echo "FSDP2 $tag: config b $b"
	if [ "$tag" = ndet ]; then
		if [ "$a" = "$b" ] && [ "${#a}" -eq 64 ]; then
			echo "FSDP2 under nccl-det: bit-identical weights after $STEPS steps"
		else
			echo "FAIL: FSDP2 under nccl-det: weights differ between the configurations"
			fail=1
		fi
	else
		[ "$a" = "$b" ] && echo "FSDP2 under plain NCCL: identical too (NCCL's order did not depend on the bucketing here)" ||
			echo "FSDP2 under plain NCCL: weights DIFFER between the configurations"
	fi
done
grep -h "NCCL-DET STATS" "$OUT"/rs-fsdp-ndet-a-0.out "$OUT"/rs-fsdp-ndet-a-0.err | head -2
echo "SUMMARY torch_rs n=$n: $([ $fail -eq 0 ] && echo PASS || echo FAIL)"
exit $fail
