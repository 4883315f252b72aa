#!/bin/bash
# What each part of an LL step costs, on one GPU: the nccl-det-perf builds of
# test/gpu/ll_ablate_build.sh (perf-0, the whole step; perf-MASK, the step without
# the parts of NDET_LL_ABLATE=MASK) run in turns, f32 sum, 8 B-4 KiB (SIZES), in CUDA
# graphs of 1000 calls launched 10 times (TIMING), checks off (the masked builds
# compute wrong results by design).  Per rank count, size and mask: the median time
# of the call over perf-0's, and the round trips above the empty kernel
# (nccl-det-perf's floor line), medians.  A build named
# perf-LABEL, LABEL not a number (a candidate built from another tree), is timed with
# them and reported after the masks.
#
#   test/gpu/ll_ablate.sh [DIR]        DIR: the builds (default $BUILD/ablate)
#
# Environment: ROUNDS (default 4), NRANKS (default "4 8 3"), SIZES (nccl-det-perf's
# size flags, default "-b 8 -e 4K -f 2"), TIMING (its timing flags, default "-n 1000
# -G 10 -w 20 --modes graph": the rounds of one machine then agree within about 1 %,
# where graphs of 20 calls moved an 8-rank row by up to 150 %: one H100, 2026-12-06,
# doc/performance.md),
# ABLATE_BUDGET (seconds: no run starts after it; default 400), OUT.  Every build runs
# with the library's default settings, so from NCCL_DET_LL_WIDE_MIN (224 KiB x (ranks -
# 1)) in wide LL lines: to time 8-byte lines there, add a variant such as
# VARIANTS="narrow:::NCCL_DET_LL_WIDE_MIN=0" to ll_ablate_build.sh.  Writes
# $OUT/ll-ablate-raw.txt and $OUT/ll-ablate-summary.txt; the last line printed is the
# summary.
set -u
dir=${1:-${BUILD:-.}/ablate}
rounds=${ROUNDS:-4}
budget=${ABLATE_BUDGET:-400}
OUT=${OUT:-/tmp/ndet-gpu-out}
mkdir -p "$OUT"
raw=$OUT/ll-ablate-raw.txt
: >"$raw"
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
mapfile -t builds < <(find "$dir" -maxdepth 1 -name 'perf-*' -perm -u+x | sort -V)
if [ "${#builds[@]}" -lt 2 ] || [ ! -x "$dir/perf-0" ]; then
	echo "SUMMARY ll-ablate: FAIL (no perf-0 and masked builds in $dir: test/gpu/ll_ablate_build.sh makes them)"
	exit 1
fi
# The candidates (perf-LABEL) compute right results: each first runs once checked
# (bit-exact against the CPU tree, size-invariant) at every rank count, and one that
# fails is not timed and fails the summary.
failed=
checked=()
for binary in "${builds[@]}"; do
	label=${binary##*/perf-}
	case $label in
	*[!0-9]*)
		ok=1
		for n in ${NRANKS:-4 8 3}; do
			# shellcheck disable=SC2086 # SIZES is a list of flags
			if ! "$binary" --ranks "$n" ${SIZES:--b 8 -e 4K -f 2} -d f32 -o sum -c 1 -n 2 -w 1 \
				--no-nccl >"$OUT/ll-ablate-check-$label-$n.txt" 2>&1; then
				ok=0
				failed="$failed $label/$n"
				tail -5 "$OUT/ll-ablate-check-$label-$n.txt"
			fi
		done
		[ "$ok" -eq 1 ] && checked+=("$binary")
		;;
	*) checked+=("$binary") ;;
	esac
done
builds=("${checked[@]}")
echo "checked the candidates ($SECONDS s)${failed:+; FAILED:$failed}"
runs=0
for round in $(seq 1 "$rounds"); do
	for n in ${NRANKS:-4 8 3}; do
		# Each round starts the turn at another build, so no build always runs first.
		count=${#builds[@]}
		for k in $(seq 0 $((count - 1))); do
			binary=${builds[$(((k + round) % count))]}
			[ "$SECONDS" -lt "$budget" ] || break 3
			mask=${binary##*/perf-}
			# shellcheck disable=SC2086 # SIZES and TIMING are lists of flags
			"$binary" --ranks "$n" ${SIZES:--b 8 -e 4K -f 2} ${TIMING:--n 1000 -G 10 -w 20 --modes graph} \
				-d f32 -o sum -c 0 --no-nccl 2>&1 |
				awk -v mask="$mask" -v n="$n" '
				/^# +[0-9]+ B: floor/ {
					i = index($0, "above it: ")
					if (i == 0)
						next
					rest = substr($0, i + 10)
					split(rest, w, /[ ,;]+/)
					for (k = 1; k < 5; k += 2)
						if (w[k] == "eager" || w[k] == "graph")
							print mask, n, $2, w[k], "rt", w[k + 1]
					j = index(rest, "flag exchange above it: ")
					if (j == 0)
						next
					split(substr(rest, j + 24), x, /[ ,]+/)
					for (k = 1; k < 5; k += 2)
						if (x[k] == "eager" || x[k] == "graph")
							print mask, n, $2, x[k], "xrt", x[k + 1]
					next
				}
				/bare flag round trip: / {
					i = index($0, "bare flag round trip: ")
					split(substr($0, i + 22), w, / /)
					print mask, n, 0, "-", "rtus", w[1]
				}
				/^#/ { next }
				NF == 17 && ($5 == "eager" || $5 == "graph") { print mask, n, $1, $5, "us", $7 }' >>"$raw"
			runs=$((runs + 1))
		done
	done
	echo "round $round of $rounds done ($SECONDS s)"
done
python3 - "$raw" "$OUT/ll-ablate-summary.txt" "$runs" "$failed" <<'PY'
import collections, statistics, sys
raw, summary, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
v = collections.defaultdict(list)
for line in open(raw):
    mask, n, size, mode, kind, value = line.split()
    if value != "-":
        v[(int(n), int(size), mode, kind, mask)].append(float(value))
masks = sorted({k[4] for k in v}, key=lambda m: (not m.isdigit(), int(m) if m.isdigit() else 0, m))
keys = sorted({k[:3] for k in v if k[1] > 0})
rows = ["# time over mask 0's (medians) and round trips above the empty kernel; xchg: the",
        "# flag exchange of the grid above the empty kernel (perf-0's runs)",
        "ranks     size mode    xchg " + " ".join("%13s" % ("mask " + m) for m in masks)]
saved = collections.defaultdict(list)
for n, size, mode in keys:
    base = v.get((n, size, mode, "us", "0"))
    if not base:
        continue
    cells = []
    for m in masks:
        t = v.get((n, size, mode, "us", m))
        rt = v.get((n, size, mode, "rt", m))
        if not t:
            cells.append("%13s" % "-")
            continue
        ratio = statistics.median(t) / statistics.median(base)
        cells.append("%5.3f %4s RT" % (ratio, "%.2f" % statistics.median(rt) if rt else "-"))
        unit = v.get((n, 0, "-", "rtus", m))
        if unit and mode == "graph":
            saved[(n, m)].append((statistics.median(base) - statistics.median(t)) /
                                 statistics.median(unit))
    x = v.get((n, size, mode, "xrt", "0"))
    rows.append("%5d %8d %-6s %5s " % (n, size, mode, "%.2f" % statistics.median(x) if x else "-")
                + " ".join(cells))
rows.append("# graph: what leaving the parts out saves per call, in bare flag round trips "
            "(median over sizes of the median times' difference), per rank count")
for n in sorted({k[0] for k in saved}):
    rows.append("%5d ranks: " % n + "  ".join(
        "mask %s %+.2f" % (m, statistics.median(saved[(n, m)])) for m in masks
        if saved.get((n, m))))
open(summary, "w").write("\n".join(rows) + "\n")
print("\n".join(rows))
failed = sys.argv[4].split()
ok = runs > 0 and len(keys) > 0 and not failed
print("SUMMARY ll-ablate: %s (%d runs, %d builds%s)" % ("PASS" if ok else "FAIL", runs, len(masks),
      "; candidates not exact: " + " ".join(failed) if failed else ""))
sys.exit(0 if ok else 1)
PY
