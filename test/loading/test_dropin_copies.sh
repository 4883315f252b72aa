#!/bin/sh
# The drop-in in front of the fake NCCL runs test_forward_script (which needs
# libnccl.so.2: the preloaded drop-in satisfies that by its SONAME, and loads the fake
# privately through NCCL_DET_NCCL_LIBRARY):
# - NCCL_DET_ENABLE=0: a perfect pass-through, the fake sees the trace of a run
#   without nccl-det byte for byte, NCCL's internal calls included;
# - NCCL_DET_ENABLE=1: the same trace as libnccl-det.so preloaded (the same diverts);
# - both copies in one process (libnccl-det.so and the drop-in preloaded, in either
#   order): still that trace, so exactly one copy diverts; libnccl-det.so in front
#   says it passes everything to the drop-in.
. "${NDET_TOP_SRCDIR:-.}/test/support/test_preload_lib.sh"

script="$top_builddir/test/loading/test_forward_script"
[ -x "$script" ] || fail "$script was not built"
[ -f "$fake_dropin" ] || fail "$fake_dropin was not built"

run() { # NAME [VAR=VALUE...]
	name=$1
	shift
	rm -f "$scratch/$name.trace" "$scratch/$name.log"
	env FAKE_NCCL_TRACE="$scratch/$name.trace" NCCL_DET_DEBUG=INFO NCCL_DET_DEBUG_SUBSYS=INIT \
		NCCL_DET_DEBUG_FILE="$scratch/$name.log" NCCL_DET_NCCL_LIBRARY="$fake_nccl" "$@" \
		"$script" >"$scratch/$name.out" 2>"$scratch/$name.err" ||
		fail "$name: the script exited with $? ($(cat "$scratch/$name.err"))"
}

same_file() {
	cmp -s "$1" "$2" || {
		diff -u "$1" "$2" | head -40 >&2
		fail "$3"
	}
}

# Diverting traces: the same calls, except that the one ncclGetVersion behind the
# INFO line comes when each copy resolves (the drop-in at the first call of any
# NCCL function, the preload at the first interposed one), and that the host-only
# backend's heap buffers may be named differently (malloc reuse).
same_diverted() {
	grep -v '^ncclGetVersion(' "$1" | sed 's/=p[0-9]*/=p/g' >"$1.calls"
	grep -v '^ncclGetVersion(' "$2" | sed 's/=p[0-9]*/=p/g' >"$2.calls"
	same_file "$1.calls" "$2.calls" "$3"
	[ "$(grep -c '^ncclGetVersion(' "$1")" -eq "$(grep -c '^ncclGetVersion(' "$2")" ] ||
		fail "$3 (ncclGetVersion calls)"
}

run plain
run dropin_disabled NCCL_DET_ENABLE=0 LD_PRELOAD="$(preload_of "$fake_dropin")"
same_file "$scratch/plain.trace" "$scratch/dropin_disabled.trace" \
	"drop-in, NCCL_DET_ENABLE=0: the fake saw a different call trace"
same_file "$scratch/plain.out" "$scratch/dropin_disabled.out" \
	"drop-in, NCCL_DET_ENABLE=0: different return codes"
grep -q "real NCCL $fake_nccl (found by NCCL_DET_NCCL_LIBRARY" "$scratch/dropin_disabled.log" ||
	fail "drop-in: no INFO line about the real NCCL: $(cat "$scratch/dropin_disabled.log")"
# The one WARN: the direct call the script makes, which fails while disabled.
grep 'WARN' "$scratch/dropin_disabled.log" | grep -qv 'ncclDetAllReduce fails' &&
	fail "drop-in, NCCL_DET_ENABLE=0: unexpected WARN: $(cat "$scratch/dropin_disabled.log")"

run preload NCCL_DET_ENABLE=1 LD_PRELOAD="$(preload_of "$fake_shim")"
same_file "$scratch/plain.out" "$scratch/preload.out" "preload: different codes or results"
cmp -s "$scratch/plain.trace" "$scratch/preload.trace" && fail "preload: nothing was diverted"

run dropin NCCL_DET_ENABLE=1 LD_PRELOAD="$(preload_of "$fake_dropin")"
same_file "$scratch/plain.out" "$scratch/dropin.out" "drop-in: different codes or results"
same_diverted "$scratch/preload.trace" "$scratch/dropin.trace" \
	"drop-in: diverted differently from the preload"

run both NCCL_DET_ENABLE=1 LD_PRELOAD="$(preload_of "$fake_shim" "$fake_dropin")"
same_file "$scratch/plain.out" "$scratch/both.out" "both copies: different codes or results"
same_diverted "$scratch/preload.trace" "$scratch/both.trace" \
	"both copies (preload first): not exactly one copy diverted"
grep -q "is another copy of nccl-det ($fake_dropin, found by RTLD_NEXT): that copy diverts" \
	"$scratch/both.log" || fail "both copies: the front copy did not step aside: $(cat "$scratch/both.log")"

run both_reversed NCCL_DET_ENABLE=1 LD_PRELOAD="$(preload_of "$fake_dropin" "$fake_shim")"
same_file "$scratch/plain.out" "$scratch/both_reversed.out" "both copies reversed: different codes"
same_diverted "$scratch/preload.trace" "$scratch/both_reversed.trace" \
	"both copies (drop-in first): not exactly one copy diverted"
# ncclDetAllReduce: ncclInvalidUsage (5) where nccl-det is disabled; wherever a copy
# diverts, diverted, also through the copy in front that passes everything on.
grep -q '^direct = 5$' "$scratch/dropin_disabled.err" ||
	fail "drop-in, NCCL_DET_ENABLE=0: ncclDetAllReduce did not fail: $(cat "$scratch/dropin_disabled.err")"
for name in preload dropin both both_reversed; do
	grep -q '^direct = 0$' "$scratch/$name.err" ||
		fail "$name: ncclDetAllReduce failed: $(cat "$scratch/$name.err")"
done
echo "PASS: drop-in pass-through identical to no nccl-det; drop-in diverts like the preload; two copies divert once"
