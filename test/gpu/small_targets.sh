#!/bin/bash
# The small-message targets of doc/design.md ("Performance targets"): nccl-det-perf's
# LL all-reduces (or reduces) in CUDA graphs, f32 sum, 8 B-64 KiB, at 2, 4 and 8
# ranks on GPU 0, each call's time above the floor (an empty kernel of its grid,
# launched the same way) in bare flag round trips (RT), against the targets: at most
# 1.5 RT up to 4 KiB, 2.5 up to 64 KiB.  Graphs of 1000 calls launched 10 times: long
# enough that the rounds of one machine agree within about 1 % (graphs of 20 calls
# moved an 8-rank row by up to 150 %: one H100, 2026-12-06, doc/performance.md).
# A measurement, not a test of speed: the step fails only where a run fails or the
# checked run of a rank count is not bit-exact; the summary says which targets were
# met.
#
#   test/gpu/small_targets.sh
#
# Environment: PERF (nccl-det-perf; default the build tree's), COLL (allreduce, the
# default, or reduce: rank 1 the root), NRANKS (default "2 4 8"), ROUNDS (default 3),
# SIZES (default "-b 8 -e 64K -f 2"), OUT.  Writes $OUT/NAME-raw.txt and
# $OUT/NAME.txt, NAME small-targets (small-targets-reduce for reduces); the last line
# printed is the summary.
set -u
here=$(cd "$(dirname "$0")" && pwd)
PERF=${PERF:-$here/../../tools/nccl-det-perf}
OUT=${OUT:-/tmp/ndet-gpu-out}
rounds=${ROUNDS:-3}
nranks=${NRANKS:-2 4 8}
sizes=${SIZES:--b 8 -e 64K -f 2}
case ${COLL:-allreduce} in
allreduce) coll='' name=small-targets ;;
reduce) coll="--coll reduce -r 1" name=small-targets-reduce ;;
*)
	echo "SUMMARY small-targets: FAIL (COLL=$COLL: allreduce or reduce)"
	exit 2
	;;
esac
mkdir -p "$OUT"
raw=$OUT/$name-raw.txt
: >"$raw"
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} NCCL_NVLS_ENABLE=0
failed=
for n in $nranks; do
	# shellcheck disable=SC2086 # coll and sizes are lists of flags
	if ! "$PERF" --ranks "$n" $coll $sizes -d f32 -o sum -c 1 -n 2 -w 1 -G 1 --no-nccl \
		>"$OUT/$name-check-$n.txt" 2>&1; then
		failed="$failed check/$n"
		tail -5 "$OUT/$name-check-$n.txt"
	fi
done
runs=0
for round in $(seq 1 "$rounds"); do
	for n in $nranks; do
		# shellcheck disable=SC2086 # coll and sizes are lists of flags
		if ! "$PERF" --ranks "$n" $coll $sizes -d f32 -o sum -c 0 --no-nccl -n 1000 -G 10 -w 20 \
			--modes graph >"$OUT/$name-run.txt" 2>&1; then
			failed="$failed run/$n"
			tail -3 "$OUT/$name-run.txt"
			continue
		fi
		# A run that printed no floor line (no LL row) measured nothing.
		rows=$(awk -v n="$n" '
			/bare flag round trip: / {
				i = index($0, "bare flag round trip: ")
				split(substr($0, i + 22), w, / /)
				print n, 0, "rtus", w[1]
			}
			/^# +[0-9]+ B: floor/ {
				i = index($0, "above it: ")
				if (i == 0)
					next
				split(substr($0, i + 10), w, /[ ,;]+/)
				for (k = 1; k < 5; k += 2)
					if (w[k] == "graph")
						print n, $2, "rt", w[k + 1]
			}' "$OUT/$name-run.txt" | tee -a "$raw" | grep -c ' rt ')
		[ "$rows" -gt 0 ] || failed="$failed rows/$n"
		runs=$((runs + 1))
	done
	echo "round $round of $rounds done ($SECONDS s)"
done
python3 - "$raw" "$OUT/$name.txt" "$runs" "$failed" "$name" <<'PY'
import collections, statistics, sys
raw, table, runs, failed, name = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split(), sys.argv[5]
rt = collections.defaultdict(list)
unit = []
for line in open(raw):
    n, size, kind, value = line.split()
    if kind == "rtus":
        unit.append(float(value))
    elif kind == "rt":
        rt[(int(n), int(size))].append(float(value))
ranks = sorted({k[0] for k in rt})
sizes = sorted({k[1] for k in rt})
def target(size):
    return 1.5 if size <= 4096 else 2.5 if size <= 65536 else None
rows = ["# round trips above the floor in a CUDA graph, median of the rounds; * over the target",
        "# bare flag round trip %s us" % ("%.2f-%.2f" % (min(unit), max(unit)) if unit else "?"),
        "%9s %7s" % ("size", "target") + "".join("%11s" % ("%d ranks" % n) for n in ranks)]
met = collections.Counter()
total = collections.Counter()
missed = collections.defaultdict(list)
for size in sizes:
    t = target(size)
    cells = []
    for n in ranks:
        v = rt.get((n, size))
        if not v or t is None:
            cells.append("%11s" % "-")
            continue
        m = statistics.median(v)
        total[n] += 1
        if m <= t + 1e-9:
            met[n] += 1
            cells.append("%11.2f" % m)
        else:
            missed[n].append("%s %.2f" % (size, m))
            cells.append("%10.2f*" % m)
    rows.append("%9d %7s" % (size, "%.1f" % t if t else "-") + "".join(cells))
parts = []
for n in ranks:
    part = "%d/%d at %d ranks" % (met[n], total[n], n)
    if missed[n]:
        part += " (over: %s)" % ", ".join(missed[n])
    parts.append(part)
if not rt:
    failed.append("no-rows")
status = "FAIL (%s)" % " ".join(failed) if failed else "measured"
rows.append("SUMMARY %s: %s, %d runs; targets met %s" % (name, status, runs, "; ".join(parts)))
open(table, "w").write("\n".join(rows) + "\n")
print("\n".join(rows))
sys.exit(1 if failed or runs == 0 else 0)
PY
