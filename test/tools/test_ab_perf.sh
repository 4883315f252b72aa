#!/bin/sh
# test/gpu/ab_perf.sh's row parser and judge on real nccl-det-perf output: the rows of
# test/tools/data/perf-rows-h200-2ranks.txt (nccl-det-perf --ranks 2 -b 8 -e 256K -f 8
# -d f32,bf16,f8e4m3,f16 -o sum,avg -c 0 --no-nccl -n 100 -w 10 on one H200,
# 2026-12-03) stand in for both builds, the second one's times scaled: equal builds
# pass, a build 5 % slower fails on every row, one slower row is named as the worst.
if ! command -v python3 >/dev/null 2>&1; then
	echo "no python3: skipping"
	exit 77
fi
. "${NDET_TOP_SRCDIR:-.}/test/support/test_preload_lib.sh" # $scratch, fail
top=${NDET_TOP_SRCDIR:-.}
rows=$(cd "$top" && pwd)/test/tools/data/perf-rows-h200-2ranks.txt
[ -f "$rows" ] || fail "no $rows"

# fake FILE FACTOR [SIZE TYPE OP MODE]: a "binary" printing the rows, nccl-det's time
# (field 7) times FACTOR on every row, or on the one row named.
fake() {
	cat >"$1" <<SCRIPT
#!/bin/sh
awk -v f="$2" -v size="${3:-}" -v type="${4:-}" -v op="${5:-}" -v mode="${6:-}" '
	NF == 17 && (size == "" || (\$1 == size && \$3 == type && \$4 == op && \$5 == mode)) {
		\$7 = sprintf("%.2f", \$7 * f)
	}
	{ print }' "$rows"
SCRIPT
	chmod +x "$1"
}
judged=$(awk 'NF == 17 && ($5 == "eager" || $5 == "graph")' "$rows" | wc -l)
[ "$judged" -eq 96 ] || fail "the sample holds $judged rows, expected 96"

ab() { # WANT-RC WHAT A B
	want=$1 what=$2
	ROUNDS=1 NRANKS=2 RARE=0 OUT=$scratch/ab bash "$top/test/gpu/ab_perf.sh" "$3" "$4" \
		>"$scratch/out" 2>&1
	rc=$?
	[ "$rc" -eq "$want" ] || fail "$what: exit $rc, expected $want: $(tail -3 "$scratch/out")"
}
fake "$scratch/a" 1
fake "$scratch/same" 1
ab 0 "equal builds" "$scratch/a" "$scratch/same"
grep -q "^SUMMARY ab: 96 judged rows, worst B/A 1.000 at .*, 0 above 1.03$" "$scratch/out" ||
	fail "equal builds: $(tail -1 "$scratch/out")"

fake "$scratch/slow" 1.05
ab 1 "a build 5 % slower" "$scratch/a" "$scratch/slow"
grep -q "^SUMMARY ab: 96 judged rows, worst B/A 1.0[45][0-9] at .*, 96 above 1.03$" "$scratch/out" ||
	fail "5 % slower: $(tail -1 "$scratch/out")"
[ "$(grep -c 'SLOWER$' "$scratch/out")" -eq 96 ] || fail "5 % slower: not every row flagged"

fake "$scratch/one" 1.2 32768 bf16 avg graph
ab 1 "one slower row" "$scratch/a" "$scratch/one"
grep -q "^SUMMARY ab: 96 judged rows, worst B/A 1.[12][0-9]* at (2, 'bf16', 'avg', 32768, 'graph'), 1 above 1.03$" \
	"$scratch/out" || fail "one slower row: $(tail -1 "$scratch/out")"
grep -q "^ 2 bf16   avg       32768 graph A .* B/A 1.[12][0-9]*  SLOWER$" "$scratch/out" ||
	fail "one slower row: the row is not flagged: $(grep SLOWER "$scratch/out")"
# The floor lines (test/tools/data/perf-floor-h200-8ranks.txt: nccl-det-perf --ranks 8
# -b 8 -e 32K -f 8 -d f32 -o sum -n 100 -w 20 -G 5 -c 0 --no-nccl on one H200,
# 2026-12-04): each build's round trips above the empty kernel and its flag
# exchange's, reported per row, not judged; B's 4 KiB graph row 1.2 instead of 2.4.
floor=$(cd "$top" && pwd)/test/tools/data/perf-floor-h200-8ranks.txt
[ -f "$floor" ] || fail "no $floor"
printf '#!/bin/sh\ncat "%s"\n' "$floor" >"$scratch/fa"
printf '#!/bin/sh\nsed "s/graph 2.4 bare/graph 1.2 bare/" "%s"\n' "$floor" >"$scratch/fb"
chmod +x "$scratch/fa" "$scratch/fb"
ab 0 "floor lines" "$scratch/fa" "$scratch/fb"
grep -q "^SUMMARY ab: 10 judged rows, worst B/A 1.000 at .*, 0 above 1.03$" "$scratch/out" ||
	fail "floor lines: $(tail -1 "$scratch/out")"
grep -q "^ 2 f32    sum           8 graph above the empty kernel, RT: A  2.00  B  2.00   flag exchange A  1.10  B  1.10$" \
	"$scratch/out" || fail "floor lines: 8 B graph: $(grep 'above the empty' "$scratch/out" | head -3)"
grep -q "^ 2 f32    sum        4096 graph above the empty kernel, RT: A  2.40  B  1.20   flag exchange A  1.20  B  1.20$" \
	"$scratch/out" || fail "floor lines: 4 KiB graph: $(grep 'above the empty' "$scratch/out")"
grep -q "^ 2 f32    sum       32768 eager above the empty kernel, RT: A  1.20  B  1.20   flag exchange A  1.10  B  1.10$" \
	"$scratch/out" || fail "floor lines: 32 KiB eager: $(grep 'above the empty' "$scratch/out")"
[ "$(grep -c 'above the empty kernel, RT' "$scratch/out")" -eq 10 ] ||
	fail "floor lines: expected 10: $(grep 'above the empty' "$scratch/out")"
echo "PASS: ab_perf.sh on nccl-det-perf's rows"
