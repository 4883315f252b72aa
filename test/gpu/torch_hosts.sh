#!/bin/bash
# PyTorch jobs on simulated hosts (doc/testing.md, "Several hosts on one machine"): one
# process per rank on one GPU under MPS, each with its own NCCL_HOSTID (NCCL moves the
# bytes between them over sockets, as between machines), NCCL_DET_TEST_HOST naming its
# host and NCCL_DET_STRICT=1 (a fallback fails the call).  torch_hosts.py checks every
# result against the contract bit for bit; here the results of layouts the contract
# says are equal must be equal (1 x 4, 2 x 2 and 4 x 1; 1 x 6 and 3 x 2) and 2 x 3 must
# differ from 1 x 6 somewhere.
# usage: torch_hosts.sh /path/to/libnccl-det.so [LAYOUT...] [bytes] [mismatch]
#   no LAYOUT: all of them; `bytes`: the inter-host bytes check (alone: nothing else);
#   `mismatch`: host B of A,A,B,B runs with another NCCL_DET_POOL_SIZE (a setting every
#   rank must agree on): every rank falls back for that reason, none diverts, and the
#   ranks' results agree
set -u
lib=$1
shift
layouts="" bytes=0 mismatch=0
for word in "$@"; do
	case $word in
	bytes) bytes=1 ;;
	mismatch) mismatch=1 ;;
	*) layouts="$layouts $word" ;;
	esac
done
if [ $# -eq 0 ]; then
	layouts="AAAA AABB ABCD ABAB AAAAAA AABBCC AAABBB" bytes=1 mismatch=1
fi
OUT=${OUT:-/tmp/ndet-gpu-out}
mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
# Under MPS every client's 32 hardware queues cost memory: a fourth such client fails to
# start.  PyTorch needs no more than the default.
unset CUDA_DEVICE_MAX_CONNECTIONS
. "$here/mps.sh"
trap mps_stop EXIT
# Wait for every rank; once one fails, the others cannot finish: stop them.
wait_all() {
	local rc=0 left=$# p code
	declare -A finished=()
	while [ $left -gt 0 ]; do
		for p in "$@"; do
			[ -n "${finished[$p]:-}" ] && continue
			kill -0 "$p" 2> /dev/null && continue
			wait "$p"
			code=$?
			finished[$p]=1
			left=$((left - 1))
			if [ $code -ne 0 ]; then
				rc=1
				kill "$@" 2> /dev/null
			fi
		done
		[ $left -gt 0 ] && sleep 0.2
	done
	return $rc
}
fail=0
for layout in $layouts; do
	# A daemon per layout: a job that fails cannot leave the next one an MPS server
	# still recovering from its clients.
	mps_stop
	mps_start
	n=${#layout}
	port=$((20000 + RANDOM % 20000))
	pids=""
	# A 6-rank layout takes about 110 s on an H200 under MPS, a 4-rank one about 60 s;
	# Python's stacks come 20 s before the timeout.
	limit=$((40 * n))
	for ((r = 0; r < n; r++)); do
		LD_PRELOAD="$lib" NCCL_DET_STRICT=1 NCCL_DET_TEST_HOST=${layout:r:1} \
			LAYOUT=$layout RANK=$r WORLD=$n PORT=$port NCCL_HOSTID=ndet-h$r \
			STACKS_AFTER=${STACKS_AFTER:-$((limit - 20))} NCCL_SOCKET_IFNAME=lo \
			NCCL_DEBUG=VERSION timeout $limit python3 -u "$here/torch_hosts.py" \
			> "$OUT/hosts-$layout-$r.out" 2> "$OUT/hosts-$layout-$r.err" &
		pids="$pids $!"
	done
	rc=0
	wait_all $pids || rc=1
	line=$(grep -h '^{' "$OUT/hosts-$layout-0.out" | tail -1)
	if [ $rc -ne 0 ] || [ -z "$line" ]; then
		echo "FAIL $layout: the job failed (rc $rc)"
		for ((r = 0; r < n; r++)); do
			echo "  rank $r: $(grep '^phase:' "$OUT/hosts-$layout-$r.err" | tail -1)"
		done
		tail -5 "$OUT/hosts-$layout-0.err"
		fail=1
		continue
	fi
	cat "$OUT"/hosts-"$layout"-*.out | grep '^{' | python3 -c '
import json, sys
layout = sys.argv[1]
rows = [json.loads(l) for l in sys.stdin]
bad = sum(r["mismatch"] + r["rs_mismatch"] + r["graph_mismatch"] + r.get("ddp_differ", 0)
          for r in rows)
g = len(layout) // len(set(layout))
rounded = min(r["rounded_partials_differ"] for r in rows)
digests = {json.dumps(r["digest"], sort_keys=True) for r in rows}
print("%s: %d ranks, %d checks each, %d mismatches (all-reduce, reduce-scatter, graph, DDP buckets), "
      "bf16 host partials rounded: %d elements differ, ranks agree: %s" % (
      layout, len(rows), rows[0]["checked"], bad, rounded, len(digests) == 1))
for r in rows:
    for f in r["failures"][:3]:
        print("  rank %d: %s" % (r["rank"], f))
ok = bad == 0 and len(digests) == 1 and (g == 1 or len(set(layout)) == 1 or rounded > 0)
sys.exit(0 if ok else 1)
' "$layout" || fail=1
	echo "$line" > "$OUT/hosts-$layout.json"
done
# Inter-host bytes of one all-reduce (NCCL's COLL log: every Send of ours is bytes),
# per rank, against (H - 1) / H x S / g x (1 + partial / element size): f32 and bf16
# (f32 partials) on 2 x 2, and bf16 on 4 x 1 (its own elements travel).
bytes_check() {
	local layout=$1 dtype=$2 es=$3 ps=$4 count=$5 n=${#1} port=$((20000 + RANDOM % 20000))
	local pids="" r
	for ((r = 0; r < n; r++)); do
		LD_PRELOAD="$lib" NCCL_DET_STRICT=1 NCCL_DET_TEST_HOST=${layout:r:1} LAYOUT=$layout \
			RANK=$r WORLD=$n PORT=$port NCCL_HOSTID=ndet-h$r NCCL_SOCKET_IFNAME=lo \
			NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL BYTES_DTYPE=$dtype BYTES_COUNT=$count \
			STACKS_AFTER=100 timeout 120 python3 -u "$here/torch_hosts.py" > "$OUT/bytes-$layout-$dtype-$r.out" 2>&1 &
		pids="$pids $!"
	done
	local rc=0
	wait_all $pids || rc=1
	python3 - "$OUT" "$layout" "$dtype" "$es" "$ps" "$count" "$rc" <<'PY' || fail=1
import re, sys
out, layout, dtype, es, ps, count, rc = sys.argv[1:]
es, ps, count, n = int(es), int(ps), int(count), len(layout)
hosts = len(set(layout)); g = n // hosts
want = (hosts - 1) / hosts * count * es / g * (1 + ps / es)
ok = rc == "0"
for r in range(n):
    sent = 0
    for line in open("%s/bytes-%s-%s-%d.out" % (out, layout, dtype, r), errors="replace"):
        m = re.search(r"\bSend: .*?count (\d+) datatype (\d+)", line)
        if m:
            sent += int(m.group(1)) * (1 if int(m.group(2)) in (0, 1) else 4)
    ratio = sent / want if want else 0
    print("%s %s rank %d: %d inter-host bytes sent, formula %d, ratio %.3f" % (layout, dtype, r, sent, want, ratio))
    ok = ok and abs(ratio - 1) <= 0.05
sys.exit(0 if ok else 1)
PY
}
if [ $bytes -eq 1 ]; then
	mps_stop
	mps_start
	bytes_check AABB float32 4 4 $((4 << 20))
	bytes_check AABB bfloat16 2 4 $((4 << 20))
	bytes_check ABCD bfloat16 2 2 $((4 << 20))
fi

# Settings that differ between hosts: the same fallback on every rank, never a split.
mismatch_check() {
	local layout=AABB n=4 port=$((20000 + RANDOM % 20000)) pids="" r pool
	for ((r = 0; r < n; r++)); do
		pool=96M
		[ "${layout:r:1}" = B ] && pool=64M
		LD_PRELOAD="$lib" NCCL_DET_POOL_SIZE=$pool NCCL_DET_TEST_HOST=${layout:r:1} \
			LAYOUT=$layout RANK=$r WORLD=$n PORT=$port NCCL_HOSTID=ndet-h$r \
			NCCL_SOCKET_IFNAME=lo MISMATCH=1 STACKS_AFTER=100 \
			timeout 120 python3 -u "$here/torch_hosts.py" > "$OUT/mismatch-$r.out" \
			2> "$OUT/mismatch-$r.err" &
		pids="$pids $!"
	done
	local rc=0
	wait_all $pids || rc=1
	cat "$OUT"/mismatch-*.out | grep '^{' | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin]
for r in sorted(rows, key=lambda r: r["rank"]):
    print("mismatch rank %d: status %d, diverted %d, reason %r" % (
        r["rank"], r["status"], r["diverted"], r["reason"]))
digests = {json.dumps(r["digest"], sort_keys=True) for r in rows}
reasons = {r["reason"] for r in rows}
ok = (len(rows) == int(sys.argv[1]) and all(r["status"] == 0 and r["diverted"] == 0 for r in rows)
      and len(reasons) == 1 and "settings mismatch" in reasons.pop() and len(digests) == 1)
print("mismatch: every rank fell back for one reason and the results agree: %s" % ok)
sys.exit(0 if ok else 1)
' "$n" && [ $rc -eq 0 ] || fail=1
}
if [ $mismatch -eq 1 ]; then
	mps_stop
	mps_start
	mismatch_check
fi

# Layouts the contract makes equal, and one it must not.
python3 - "$OUT" $layouts <<'EOF' || fail=1
import json, os, sys
out, layouts = sys.argv[1], sys.argv[2:]
d = {}
for l in layouts:
    path = os.path.join(out, "hosts-%s.json" % l)
    if os.path.exists(path):
        d[l] = json.load(open(path))["digest"]
ok = True
for group in (("AAAA", "AABB", "ABCD"), ("AAAAAA", "AABBCC")):
    have = [l for l in group if l in d]
    for l in have[1:]:
        same = d[l] == d[have[0]]
        print("%s equals %s: %s" % (l, have[0], same))
        ok = ok and same
if "AAABBB" in d and "AAAAAA" in d:
    differ = sum(d["AAABBB"][k] != d["AAAAAA"][k] for k in d["AAAAAA"])
    print("AAABBB differs from AAAAAA in %d of %d results" % (differ, len(d["AAAAAA"])))
    ok = ok and differ > 0
sys.exit(0 if ok else 1)
EOF
echo "SUMMARY torch_hosts ($layouts$([ $bytes -eq 1 ] && echo " bytes")$([ $mismatch -eq 1 ] && echo " mismatch")): $([ $fail -eq 0 ] && echo PASS || echo FAIL)"
exit $fail
