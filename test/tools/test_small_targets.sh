#!/bin/sh
# test/gpu/small_targets.sh's parser and summary.  A stand-in for nccl-det-perf
# prints, at 8 ranks, the rows of test/tools/data/perf-floor-h200-8ranks.txt (real
# output: every graph figure over its target), and at 2 ranks floor lines of its own
# whose 8-byte figure changes from round to round (3.0, 1.2, 1.0: the median, 1.2,
# meets 1.5; neither the first, the last nor the mean is 1.2), a 4 KiB figure over its
# target (1.6) and a 64 KiB one on it (2.5, met).  A checked run that fails fails the
# step, as does a timed run that fails or one that prints no floor line.
if ! command -v python3 >/dev/null 2>&1; then
	echo "no python3: skipping"
	exit 77
fi
. "${NDET_TOP_SRCDIR:-.}/test/support/test_preload_lib.sh" # $scratch, fail
top=$(cd "${NDET_TOP_SRCDIR:-.}" && pwd)
rows=$top/test/tools/data/perf-floor-h200-8ranks.txt
[ -f "$rows" ] || fail "no $rows"
cat >"$scratch/perf" <<SCRIPT
#!/bin/sh
case " \$* " in *" -c 1 "*) [ -z "\${FAKE_CHECK_FAILS:-}" ] && exit 0 || exit 1 ;; esac
[ "\${FAKE_RUN_FAILS:-}" = "\$2" ] && exit 1
[ "\${FAKE_NO_ROWS:-}" = "\$2" ] && exit 0
if [ "\$2" = 8 ]; then
	cat "$rows"
	exit 0
fi
round=\$(cat "$scratch/round" 2>/dev/null || echo 0)
echo \$((round + 1)) >"$scratch/round"
case \$round in 0) small=3.0 ;; 1) small=1.2 ;; *) small=1.0 ;; esac
echo "# device-to-device copy: 4000.0 GB/s (bytes read + written), bare flag round trip: 2.01 us"
echo "#   8 B: floor (empty kernel, 1 blocks) graph 0.80 us; above it: graph \$small bare flag round trips; flag exchange above it: graph 0.4"
echo "#   4096 B: floor (empty kernel, 2 blocks) graph 0.81 us; above it: graph 1.6 bare flag round trips; flag exchange above it: graph 0.4"
echo "#   65536 B: floor (empty kernel, 16 blocks) graph 0.90 us; above it: graph 2.5 bare flag round trips; flag exchange above it: graph 0.5"
SCRIPT
chmod +x "$scratch/perf"
PERF=$scratch/perf NRANKS="2 8" ROUNDS=3 OUT=$scratch/out \
	bash "$top/test/gpu/small_targets.sh" >"$scratch/log" 2>&1 ||
	fail "exit $?: $(tail -3 "$scratch/log")"
summary="SUMMARY small-targets: measured, 6 runs; targets met 2/3 at 2 ranks (over: 4096 1.60); 0/5 at 8 ranks (over: 8 2.00, 64 1.90, 512 2.00, 4096 2.40, 32768 2.60)"
[ "$(tail -1 "$scratch/log")" = "$summary" ] || fail "summary: $(tail -1 "$scratch/log")"
grep -q "^        8     1.5       1.20      2.00\*$" "$scratch/log" ||
	fail "8-byte row (the median of 3.0, 1.2 and 1.0 at 2 ranks): $(grep '^ *8 ' "$scratch/log")"
grep -q "^    65536     2.5       2.50          -$" "$scratch/log" ||
	fail "64 KiB row: $(grep '65536' "$scratch/log")"
grep -q "^# bare flag round trip 1.62-2.01 us$" "$scratch/log" ||
	fail "unit line: $(grep 'round trip' "$scratch/log")"
[ -s "$scratch/out/small-targets.txt" ] && [ -s "$scratch/out/small-targets-raw.txt" ] ||
	fail "no table or raw file"
FAKE_CHECK_FAILS=1 PERF=$scratch/perf NRANKS="2" ROUNDS=1 OUT=$scratch/out \
	bash "$top/test/gpu/small_targets.sh" >"$scratch/log" 2>&1 && fail "failed check: exit 0"
tail -1 "$scratch/log" | grep -q "^SUMMARY small-targets: FAIL (check/2), 1 runs;" ||
	fail "failed check: $(tail -1 "$scratch/log")"
FAKE_NO_ROWS=2 PERF=$scratch/perf NRANKS="2" ROUNDS=1 OUT=$scratch/out \
	bash "$top/test/gpu/small_targets.sh" >"$scratch/log" 2>&1 && fail "no rows: exit 0"
tail -1 "$scratch/log" | grep -q "^SUMMARY small-targets: FAIL (rows/2 no-rows)" ||
	fail "no rows: $(tail -1 "$scratch/log")"
# One rank count without floor lines, or with a timed run that fails, fails the step;
# the other's figures are still reported.
echo 1 >"$scratch/round"
FAKE_NO_ROWS=8 PERF=$scratch/perf NRANKS="2 8" ROUNDS=1 OUT=$scratch/out \
	bash "$top/test/gpu/small_targets.sh" >"$scratch/log" 2>&1 && fail "no rows at 8: exit 0"
tail -1 "$scratch/log" | grep -q "^SUMMARY small-targets: FAIL (rows/8), 2 runs; targets met 2/3 at 2 ranks" ||
	fail "no rows at 8: $(tail -1 "$scratch/log")"
echo 1 >"$scratch/round"
FAKE_RUN_FAILS=8 PERF=$scratch/perf NRANKS="2 8" ROUNDS=1 OUT=$scratch/out \
	bash "$top/test/gpu/small_targets.sh" >"$scratch/log" 2>&1 && fail "failed run: exit 0"
tail -1 "$scratch/log" | grep -q "^SUMMARY small-targets: FAIL (run/8), 1 runs; targets met 2/3 at 2 ranks" ||
	fail "failed run: $(tail -1 "$scratch/log")"
# COLL=reduce: every run asks for reduces rooted at rank 1; its own files and summary.
cat >"$scratch/perf-reduce" <<SCRIPT
#!/bin/sh
case " \$* " in *" --coll reduce -r 1 "*) exec "$scratch/perf" "\$@" ;; esac
exit 1
SCRIPT
chmod +x "$scratch/perf-reduce"
echo 0 >"$scratch/round"
COLL=reduce PERF=$scratch/perf-reduce NRANKS="2" ROUNDS=1 OUT=$scratch/out \
	bash "$top/test/gpu/small_targets.sh" >"$scratch/log" 2>&1 ||
	fail "reduce: exit $?: $(tail -3 "$scratch/log")"
tail -1 "$scratch/log" | grep -q "^SUMMARY small-targets-reduce: measured, 1 runs; targets met 1/3 at 2 ranks" ||
	fail "reduce: $(tail -1 "$scratch/log")"
[ -s "$scratch/out/small-targets-reduce.txt" ] || fail "reduce: no table"
COLL=scatter PERF=$scratch/perf OUT=$scratch/out bash "$top/test/gpu/small_targets.sh" \
	>"$scratch/log" 2>&1
[ $? -eq 2 ] || fail "COLL=scatter: exit 2 expected"
grep -q "^SUMMARY small-targets: FAIL (COLL=scatter: allreduce or reduce)$" "$scratch/log" ||
	fail "COLL=scatter: $(tail -1 "$scratch/log")"
echo "PASS: small_targets.sh on nccl-det-perf's floor lines"
