#!/bin/bash
# Two builds of nccl-det-perf against each other on one GPU, in one device call:
# interleaved A/B/A/B... runs (ranks as threads on GPU 0), then per row the median
# time of each and B/A.  What a kernel change must not make slower:
# sum and avg at 2, 4 and 8 ranks, every dtype, large messages (64-256 MiB, eager:
# the vs-copy rows) and small ones (8 B-256 KiB, eager and CUDA graph).  Rare ops
# (prod, min, max) and 12 ranks run once each way, reported, not judged.
#
#   test/gpu/ab_perf.sh A/nccl-det-perf B/nccl-det-perf
#
# Both binaries take --ranks and -G 0 (eager only); the rows of either layout are read:
# nccl-det-perf's nccl-tests-style one row per size, dtype, op and mode, or the older
# tool's one row per size, dtype and op with the eager and graph cells side by side
# (the 44-kernel table's build; its -n is the rank count, -i the iterations).
#
# Environment: ROUNDS (default 3), NRANKS (the rank counts of the judged runs, in the
# order they run: default "2 4 8"; put 8 first where the budget may not reach it),
# AB_BUDGET (seconds: no run starts after it; default 480, above one round of every
# size on an H200; the rare-op runs get RARE_BUDGET
# more, default 150), LARGE and SMALL (the size
# flags of the two kinds of run), OPS (the judged runs' ops, default sum,avg; add
# premulsum where both builds have it), RARE=0 leaves the rare-op runs out, OUT.  Further
# raw files given as PREV_RAW (space-separated) join the medians.
#
# Writes $OUT/ab-raw.txt (every run's rows, tagged) and $OUT/ab-summary.txt (one line
# per row: B/A of the medians; then, where the runs printed them, each small row's
# round trips above the empty kernel and its flag exchange's, medians of A and B,
# reported, not judged); the last line printed is the summary: the worst B/A of the
# judged rows, and how many are more than LIMIT (default 1.03) slower.
set -u
a=${1:?usage: ab_perf.sh A-PERF B-PERF}
ops=${OPS:-sum,avg}
b=${2:?usage: ab_perf.sh A-PERF B-PERF}
rounds=${ROUNDS:-3}
budget=${AB_BUDGET:-480}
large=${LARGE:--b 64M -e 256M -f 4}
small=${SMALL:--b 8 -e 256K -f 8}
limit=${LIMIT:-1.03}
OUT=${OUT:-/tmp/ndet-gpu-out}
mkdir -p "$OUT"
raw=$OUT/ab-raw.txt
: >"$raw"
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}

# run TAG BINARY JUDGED ARGS...: one nccl-det-perf run, its rows tagged into $raw.
run() {
	local tag=$1 binary=$2 judged=$3
	shift 3
	[ "$SECONDS" -lt "$budget" ] || return 0
	local n
	n=$(echo "$*" | sed -E 's/.*--ranks ([0-9]+).*/\1/')
	echo "# $tag $judged: $*" >>"$raw"
	"$binary" "$@" -c 0 --no-nccl 2>&1 | awk -v tag="$tag" -v n="$n" -v judged="$judged" '
		# "#   4096 B: floor (...) ...; above it: eager 0.7, graph 1.9 bare flag round
		# trips; flag exchange above it: eager 0.3, graph 1.1", under the rows of its
		# size, type and op: the round trips above the empty kernel, kinds floor and
		# exchange (reported, not judged).
		/^# +[0-9]+ B: floor/ {
			i = index($0, "above it: ")
			if (i == 0)
				next
			rest = substr($0, i + 10)
			split(rest, w, /[ ,;]+/)
			for (k = 1; k < 5; k += 2)
				if (w[k] == "eager" || w[k] == "graph")
					print tag, "floor", n, type, op, $2, w[k], w[k + 1]
			j = index(rest, "flag exchange above it: ")
			if (j == 0)
				next
			split(substr(rest, j + 24), x, /[ ,]+/)
			for (k = 1; k < 5; k += 2)
				if (x[k] == "eager" || x[k] == "graph")
					print tag, "exchange", n, type, op, $2, x[k], x[k + 1]
			next
		}
		/^#/ { next }
		# size count type redop mode path, then nccl-det time algbw busbw #wrong, ...
		NF == 17 && ($5 == "eager" || $5 == "graph") {
			print tag, judged, n, $3, $4, $1, $5, $7
			type = $3
			op = $4
		}
		# The older layout: size count type redop path grid | eager cells | graph ...
		$7 == "|" && $13 == "|" && NF >= 20 {
			print tag, judged, n, $3, $4, $1, "eager", $8
			print tag, judged, n, $3, $4, $1, "graph", $14
		}' >>"$raw"
}

for round in $(seq 1 "$rounds"); do
	for n in ${NRANKS:-2 4 8}; do
		for tag in A B; do
			binary=$a
			[ "$tag" = B ] && binary=$b
			# shellcheck disable=SC2086
			run "$tag" "$binary" judged --ranks "$n" $large -d all -o "$ops" -G 0
			# shellcheck disable=SC2086
			run "$tag" "$binary" judged --ranks "$n" $small -d all -o "$ops"
		done
	done
	echo "round $round of $rounds done ($SECONDS s)"
done
budget=$((budget + ${RARE_BUDGET:-150}))
for tag in A B; do
	[ "${RARE:-1}" = 0 ] && break
	binary=$a
	[ "$tag" = B ] && binary=$b
	for n in 2 8; do
		run "$tag" "$binary" rare --ranks "$n" -b 8 -e 256M -f 32 -d f32,bf16 -o prod,min,max
	done
	run "$tag" "$binary" rare --ranks 12 -b 8 -e 256M -f 32 -d f32,bf16 -o sum,avg
done

# shellcheck disable=SC2086
python3 - "$limit" "$OUT/ab-summary.txt" "$raw" ${PREV_RAW:-} <<'PY'
import collections, statistics, sys
limit, summary, raws = float(sys.argv[1]), sys.argv[2], sys.argv[3:]
times = collections.defaultdict(lambda: {"A": [], "B": []})
# Round trips above the empty kernel: [kind][key][tag], kinds floor and exchange.
above = collections.defaultdict(lambda: collections.defaultdict(lambda: {"A": [], "B": []}))
judged = {}
for line in (l for raw in raws for l in open(raw)):
    if line.startswith("#"):
        continue
    tag, kind, n, dtype, op, size, mode, us = line.split()
    if us == "-":
        continue
    key = (int(n), dtype, op, int(size), mode)
    if kind in ("floor", "exchange"):
        above[kind][key][tag].append(float(us))
        continue
    times[key][tag].append(float(us))
    judged[key] = kind == "judged"
rows, worst, slower = [], (0.0, None), 0
for key in sorted(times):
    t = times[key]
    if not t["A"] or not t["B"]:
        continue
    ratio = statistics.median(t["B"]) / statistics.median(t["A"])
    n, dtype, op, size, mode = key
    flag = ""
    if judged[key]:
        if ratio > worst[0]:
            worst = (ratio, key)
        if ratio > limit:
            slower += 1
            flag = "  SLOWER"
    else:
        flag = "  (rare/12 ranks)"
    rows.append("%2d %-6s %-4s %10d %-5s A %9.2f us  B %9.2f us  B/A %.3f%s" % (
        n, dtype, op, size, mode, statistics.median(t["A"]), statistics.median(t["B"]),
        ratio, flag))
floor_rows = []
for key in sorted(above["floor"]):
    t, x = above["floor"][key], above["exchange"].get(key)
    if not t["A"] or not t["B"]:
        continue
    n, dtype, op, size, mode = key
    cells = "A %5.2f  B %5.2f" % (statistics.median(t["A"]), statistics.median(t["B"]))
    if x and x["A"] and x["B"]:
        cells += "   flag exchange A %5.2f  B %5.2f" % (
            statistics.median(x["A"]), statistics.median(x["B"]))
    floor_rows.append("%2d %-6s %-4s %10d %-5s above the empty kernel, RT: %s" % (
        n, dtype, op, size, mode, cells))
if floor_rows:
    rows.append("# round trips above the empty kernel (medians; reported, not judged)")
    rows.extend(floor_rows)
with open(summary, "w") as f:
    f.write("\n".join(rows) + "\n")
print("\n".join(rows))
judged_rows = sum(1 for k in times if judged.get(k) and times[k]["A"] and times[k]["B"])
print("SUMMARY ab: %d judged rows, worst B/A %.3f at %s, %d above %.2f" % (
    judged_rows, worst[0], worst[1], slower, limit))
sys.exit(0 if judged_rows > 0 and slower == 0 else 1)
PY
