#!/bin/sh
# test/gpu/ll_ablate.sh's parser and summary on real nccl-det-perf output: the rows of
# test/tools/data/perf-floor-h200-8ranks.txt (8 ranks, f32 sum, one H200, bare flag
# round trip 1.62 us) stand in for every build; mask 4's graph times scaled by 0.9.
# Its 8 B-32 KiB graph rows are 4.73-5.1 us, so leaving mask 4's part out saves
# 0.30 RT (median over sizes), mask 1's nothing; a build named by a label (perf-cand:
# a candidate from another tree) is timed after the masks, 1.1 times as long here;
# no perf-0 is a failure.
if ! command -v python3 >/dev/null 2>&1; then
	echo "no python3: skipping"
	exit 77
fi
. "${NDET_TOP_SRCDIR:-.}/test/support/test_preload_lib.sh" # $scratch, fail
top=$(cd "${NDET_TOP_SRCDIR:-.}" && pwd)
rows=$top/test/tools/data/perf-floor-h200-8ranks.txt
[ -f "$rows" ] || fail "no $rows"
mkdir -p "$scratch/builds"
for mask in 0 1 4 cand; do
	factor=1
	[ "$mask" = 4 ] && factor=0.9
	[ "$mask" = cand ] && factor=1.1
	cat >"$scratch/builds/perf-$mask" <<SCRIPT
#!/bin/sh
awk -v f="$factor" 'NF == 17 && \$5 == "graph" { \$7 = sprintf("%.2f", \$7 * f) } { print }' "$rows"
SCRIPT
	chmod +x "$scratch/builds/perf-$mask"
done
ROUNDS=2 NRANKS=8 OUT=$scratch/out bash "$top/test/gpu/ll_ablate.sh" "$scratch/builds" \
	>"$scratch/log" 2>&1 || fail "exit $?: $(tail -3 "$scratch/log")"
grep -q "^SUMMARY ll-ablate: PASS (8 runs, 4 builds)$" "$scratch/log" ||
	fail "summary: $(tail -1 "$scratch/log")"
grep -q "^    8 ranks: mask 0 +0.00  mask 1 +0.00  mask 4 +0.30  mask cand -0.30$" "$scratch/log" ||
	fail "savings: $(grep ' ranks: ' "$scratch/log")"
grep -q "^    8     4096 graph   1.20 1.000 2.40 RT 1.000 2.40 RT 0.899 2.40 RT 1.101 2.40 RT$" "$scratch/log" ||
	fail "4 KiB graph row: $(grep ' 4096 graph' "$scratch/log")"
[ -s "$scratch/out/ll-ablate-raw.txt" ] && [ -s "$scratch/out/ll-ablate-summary.txt" ] ||
	fail "no raw or summary file"
rm "$scratch/builds/perf-0"
ROUNDS=1 NRANKS=8 OUT=$scratch/out bash "$top/test/gpu/ll_ablate.sh" "$scratch/builds" \
	>"$scratch/log" 2>&1 && fail "no perf-0: exit 0"
grep -q "^SUMMARY ll-ablate: FAIL (no perf-0" "$scratch/log" ||
	fail "no perf-0: $(tail -1 "$scratch/log")"
echo "PASS: ll_ablate.sh on nccl-det-perf's rows"
