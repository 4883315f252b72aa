#!/bin/sh
# Every name the drop-in exports reaches the real NCCL (the fake, which records each
# call), loaded the way pynccl/ctypes does it (dlopen by path + dlsym on the handle):
# - the test drop-in (the fake's export list): each trampoline, called with zero
#   arguments, leaves one trace line per name (ncclX and pncclX both); the name the
#   fake lacks returns ncclInvalidUsage with one WARN for the function;
# - the production drop-in (the configured NCCL's list) in front of the fake: names
#   the fake has reach it; the others (device API of a newer NCCL) return
#   ncclInvalidUsage, one WARN per function;
# - the interposed entry points under their pnccl names reach the shim: a pncclAllReduce
#   on a one-rank communicator is diverted (NCCL_DET_ENABLE=1, test drop-in) and
#   forwarded (NCCL_DET_ENABLE=0);
# - NCCL's internal calls (ncclBcast -> ncclBroadcast) reach the real NCCL.
. "${NDET_TOP_SRCDIR:-.}/test/support/test_preload_lib.sh"

program="$top_builddir/test/loading/test_dropin_load"
[ -x "$program" ] || fail "$program was not built"
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export ASAN_OPTIONS

interposed_names | awk '{ print; print "p" $0 }' >"$scratch/interposed"

# run NAME LIBRARY [ARGS...]: load LIBRARY by path in the program, the fake behind it.
run() {
	name=$1
	library=$2
	shift 2
	rm -f "$scratch/$name.trace" "$scratch/$name.log"
	env FAKE_NCCL_TRACE="$scratch/$name.trace" NCCL_DET_NCCL_LIBRARY="$fake_nccl" \
		NCCL_DET_DEBUG_FILE="$scratch/$name.log" ${LD_PRELOAD_FOR_TEST:+LD_PRELOAD="$LD_PRELOAD_FOR_TEST"} \
		"$program" --open "$library" "$@" >"$scratch/$name.out" 2>"$scratch/$name.err" ||
		fail "$name: $(cat "$scratch/$name.err")"
}
LD_PRELOAD_FOR_TEST=$sanitizer_runtime

# check_reached NAME LIST: each name of LIST reached the fake, once per name (and
# each ncclBcast once more as the ncclBroadcast NCCL makes inside it).
check_reached() {
	bcasts=$(grep -c '^p\{0,1\}ncclBcast$' "$2" || true)
	sed 's/^p//' "$2" | sort | uniq -c | while read -r count function; do
		[ "$function" = ncclBroadcast ] && count=$((count + bcasts))
		traced=$(grep -c "^$function(" "$scratch/$1.trace" || true)
		[ "$traced" -eq "$count" ] ||
			{ echo "$function: $traced trace lines, expected $count" >&2; exit 1; }
	done || fail "$1: not every call reached the fake"
}

# --- the test drop-in: the fake's own list
grep -v -x -F -f "$scratch/interposed" "$top_builddir/test/dropin_fake/nccl-exports.txt" |
	grep -v TestOnlyMissing >"$scratch/present"
printf '%s\n' ncclTestOnlyMissing pncclTestOnlyMissing ncclTestOnlyMissing >"$scratch/missing"
cat "$scratch/present" "$scratch/missing" >"$scratch/names"
run fake "$fake_dropin" --names "$scratch/names"
[ "$(wc -l <"$scratch/present")" -ge 40 ] || fail "too few trampolines: $(wc -l <"$scratch/present")"
grep -q "^opened: $fake_dropin nccl-det=1$" "$scratch/fake.out" || fail "fake: $(head -1 "$scratch/fake.out")"
check_reached fake "$scratch/present"
[ "$(grep -c '^p\{0,1\}ncclTestOnlyMissing = 5$' "$scratch/fake.out")" -eq 3 ] ||
	fail "the missing name did not return ncclInvalidUsage: $(grep TestOnly "$scratch/fake.out")"
[ "$(grep -c 'NCCL-DET WARN' "$scratch/fake.log")" -eq 1 ] ||
	fail "expected one WARN for the missing function: $(cat "$scratch/fake.log")"
grep -q 'ncclTestOnlyMissing is not exported by the real NCCL' "$scratch/fake.log" ||
	fail "the WARN does not name the function: $(cat "$scratch/fake.log")"
# NCCL's own call from ncclBcast to ncclBroadcast reached it (inside the fake).
awk '/^ncclBcast\(/ { if (previous !~ /^ncclBroadcast\(/) bad = 1 } { previous = $0 }
	END { exit bad }' "$scratch/fake.trace" || fail "ncclBcast's inner ncclBroadcast is missing"

# --- the production drop-in in front of the fake
grep -v -x -F -f "$scratch/interposed" "$top_builddir/src/dropin/nccl-exports.txt" >"$scratch/all"
sed 's/^p//' "$scratch/all" | sort -u >"$scratch/functions"
nm -D --defined-only "$fake_nccl" | awk 'NF == 3 && $3 ~ /^nccl/ { print $3 }' | sort -u >"$scratch/fake_functions"
awk 'NR == FNR { fake[$0] = 1; next } { plain = $0; sub(/^p/, "", plain); if (plain in fake) print }' \
	"$scratch/fake_functions" "$scratch/all" >"$scratch/prod_present"
sed 's/^p//' "$scratch/all" | grep -v -x -F -f "$scratch/fake_functions" | sort -u >"$scratch/prod_missing" || true
NCCL_DET_ENABLE=0 run production "$dropin" --names "$scratch/all"
check_reached production "$scratch/prod_present"
missing=$(wc -l <"$scratch/prod_missing")
if [ "$missing" -gt 0 ]; then
	while read -r function; do
		grep -q "^$function = 5$" "$scratch/production.out" ||
			fail "$function (not in the fake) did not return ncclInvalidUsage"
		[ "$(grep -c "p\{0,1\}$function is not exported by the real NCCL" "$scratch/production.log")" -eq 1 ] ||
			fail "expected one WARN for $function: $(cat "$scratch/production.log")"
	done <"$scratch/prod_missing"
fi
[ "$(grep -c 'NCCL-DET WARN' "$scratch/production.log" || true)" -eq "$missing" ] ||
	fail "expected $missing WARNs: $(cat "$scratch/production.log")"

# --- pnccl names of interposed entry points go through the shim
NCCL_DET_ENABLE=1 run divert_p "$fake_dropin" --comm p
grep -q '^comm: 0 0 0 0$' "$scratch/divert_p.out" || fail "pnccl comm: $(cat "$scratch/divert_p.out")"
grep -q '^diverted: 1' "$scratch/divert_p.out" || fail "pncclAllReduce was not diverted: $(cat "$scratch/divert_p.out")"
grep -q '^ncclAllReduce(' "$scratch/divert_p.trace" && fail "the diverted pncclAllReduce reached the fake"
grep -q '^sum: 1.5 -2 3.25 0$' "$scratch/divert_p.out" || fail "wrong one-rank sum: $(cat "$scratch/divert_p.out")"
NCCL_DET_ENABLE=1 run divert "$fake_dropin" --comm ""
grep -q '^diverted: 1' "$scratch/divert.out" || fail "ncclAllReduce was not diverted: $(cat "$scratch/divert.out")"
NCCL_DET_ENABLE=0 run forward_p "$fake_dropin" --comm p
grep -q '^comm: 0 0 0 0$' "$scratch/forward_p.out" || fail "forwarded comm: $(cat "$scratch/forward_p.out")"
[ "$(grep -c '^ncclAllReduce(' "$scratch/forward_p.trace")" -eq 1 ] || fail "the forwarded pncclAllReduce did not reach the fake"
grep -q '^ncclMemFree(' "$scratch/forward_p.trace" || fail "ncclCommDestroy's inner ncclMemFree did not reach the fake"
echo "PASS: $(wc -l <"$scratch/present") + $(wc -l <"$scratch/all") trampolines reach the fake; $missing missing functions give ncclInvalidUsage and one WARN each; pnccl entry points divert"
