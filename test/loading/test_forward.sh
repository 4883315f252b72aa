#!/bin/sh
# Forwarding: the same script of NCCL calls (test_forward_script) against the fake
# libnccl.so.2, run without nccl-det and with it preloaded.
#
# NCCL_DET_ENABLE=0 (libnccl-det.so): a perfect pass-through.  The fake must see the
# identical call trace, including NCCL's calls to its own public names (ncclBcast ->
# ncclBroadcast, ncclCommDestroy -> ncclMemFree), and the script the identical codes,
# also with injected failures.
#
# NCCL_DET_ENABLE=1 (libnccl-det-fake.so: the host-only backend, since the fake NCCL
# works on host memory): the codes and printed results stay identical, and the trace
# differs exactly by what nccl-det does on purpose, checked call by call:
#   - setup: per communicator and rank, ncclCommUserRank/Count/CuDevice, then four
#     ncclAllGather rounds, each in an ncclGroupStart/End of its own;
#   - diverted calls: float all-reduces, reduce-scatters and reduces with built-in
#     and PreMulSum ops on live communicators leave the trace (the host-only backend,
#     like the CUDA engine, moves their data through its own pools, not through NCCL);
#     the invalid one still reaches NCCL;
#   - everything else is the same calls in the same order.
. "${NDET_TOP_SRCDIR:-.}/test/support/test_preload_lib.sh"

script="$top_builddir/test/loading/test_forward_script"
[ -x "$script" ] || fail "$script was not built"
[ -f "$fake_shim" ] || fail "$fake_shim was not built"

# run NAME [VAR=VALUE...]: run the script with the given environment; trace, stdout
# and stderr land in $scratch/NAME.{trace,out,err}.
run() {
	name=$1
	shift
	rm -f "$scratch/$name.trace"
	env FAKE_NCCL_TRACE="$scratch/$name.trace" NCCL_DET_DEBUG_FILE="$scratch/$name.log" "$@" \
		"$script" >"$scratch/$name.out" 2>"$scratch/$name.err" ||
		fail "$name: the script exited with $? ($(cat "$scratch/$name.err"))"
}

# Calls nccl-det makes itself, or takes over (diverted all-reduces): removed from
# a trace, what is left must match the plain run line for line.
ours='^(ncclGetVersion|ncclCommUserRank|ncclCommCount|ncclCommCuDevice|ncclAllGather|ncclGroupStart|ncclGroupEnd)\('
# Float reductions nccl-det takes over (op<N>: a PreMulSum op).
diverted='^nccl(AllReduce|ReduceScatter|Reduce)\(.*datatype=ncclFloat32, op=(ncclSum|ncclMin|ncclMax|ncclAvg|op[0-9]+), (root=[0-9]+, )?comm=comm[0-9]'
# The fake names pointers p<N> by first appearance, and our calls appear too: the
# names are given again, by first appearance in what is left.
without_ours() {
	grep -v -E "$ours" "$1" |
		grep -v -E "$diverted" |
		awk '{
			line = ""
			rest = $0
			while (match(rest, /=p[0-9]+/)) {
				old = substr(rest, RSTART + 1, RLENGTH - 1)
				if (!(old in names))
					names[old] = "p" (++count)
				line = line substr(rest, 1, RSTART) names[old]
				rest = substr(rest, RSTART + RLENGTH)
			}
			print line rest
		}'
}

run plain
run disabled LD_PRELOAD="$shim_preload" NCCL_DET_ENABLE=0 \
	NCCL_DET_DEBUG=INFO NCCL_DET_DEBUG_SUBSYS=INIT
run enabled LD_PRELOAD="$fake_shim_preload" NCCL_DET_ENABLE=1

grep -q '^provider: libnccl.so.2$' "$scratch/plain.err" || fail "plain run: $(cat "$scratch/plain.err")"
grep -q '^provider: libnccl-det.so$' "$scratch/disabled.err" ||
	fail "disabled run: the shim was not in front: $(cat "$scratch/disabled.err")"
grep -q '^provider: libnccl-det-fake.so$' "$scratch/enabled.err" ||
	fail "enabled run: the shim was not in front: $(cat "$scratch/enabled.err")"
# ncclDetAllReduce: diverted where nccl-det diverts, ncclInvalidUsage (5) where it is
# disabled, absent without it.
grep -q '^direct = ' "$scratch/plain.err" && fail "plain run: ncclDetAllReduce exists"
grep -q '^direct = 5$' "$scratch/disabled.err" ||
	fail "disabled run: ncclDetAllReduce did not fail: $(cat "$scratch/disabled.err")"
grep -q '^direct = 0$' "$scratch/enabled.err" ||
	fail "enabled run: ncclDetAllReduce failed: $(cat "$scratch/enabled.err")"

# Pass-through: byte for byte.
same_file "$scratch/plain.trace" "$scratch/disabled.trace" \
	"disabled run: the fake saw a different call trace"
same_file "$scratch/plain.out" "$scratch/disabled.out" "disabled run: different return codes"
grep -q 'version not asked (NCCL_DET_ENABLE=0)' "$scratch/disabled.log" ||
	fail "disabled run: no INFO line about the real NCCL: $(cat "$scratch/disabled.log")"

# NCCL's self-calls reached the fake: each ncclBcast line is preceded by the
# ncclBroadcast it made, each ncclCommDestroy by the ncclMemFree it made.
awk '
	/^ncclBcast\(/ { bcasts++; if (previous ~ /^ncclBroadcast\(/) inner_broadcasts++ }
	/^ncclCommDestroy\(/ { destroys++; if (previous ~ /^ncclMemFree\(/) inner_frees++ }
	{ previous = $0 }
	END {
		if (bcasts == 0 || bcasts != inner_broadcasts || destroys == 0 || destroys != inner_frees)
			exit 1
	}' "$scratch/plain.trace" || fail "the trace lacks NCCL's internal calls"
lines=$(wc -l <"$scratch/plain.trace")
[ "$lines" -gt 80 ] || fail "the trace is suspiciously short ($lines lines)"

# Enabled: same codes and results, and the trace differs only by our own calls.
same_file "$scratch/plain.out" "$scratch/enabled.out" "enabled run: different return codes or results"
without_ours "$scratch/plain.trace" >"$scratch/plain.user"
without_ours "$scratch/enabled.trace" >"$scratch/enabled.user"
same_file "$scratch/plain.user" "$scratch/enabled.user" \
	"enabled run: the application's own calls differ"
# Every float reduction on a live communicator was diverted: the script's
# all-reduces, its reduce-scatter and reduce (2 ranks each) and its 2 PreMulSum calls.
if grep -E "$diverted" "$scratch/enabled.trace" >"$scratch/leaked"; then
	fail "enabled run: eligible reductions reached NCCL: $(cat "$scratch/leaked")"
fi
for function in ncclReduceScatter ncclReduce; do
	[ "$(grep -c "^$function(" "$scratch/plain.trace")" -eq 2 ] ||
		fail "plain run: expected 2 calls of $function"
	[ "$(grep -c "^$function(" "$scratch/enabled.trace")" -eq 0 ] ||
		fail "enabled run: $function reached NCCL"
done
[ "$(grep -c -E '^ncclAllReduce\(.*op=op[0-9]' "$scratch/plain.trace")" -eq 2 ] ||
	fail "plain run: expected 2 PreMulSum all-reduces"
# ... and the invalid one was not.
grep -q -E '^ncclAllReduce\(.*comm=NULL.* = ncclInvalidArgument$' "$scratch/enabled.trace" ||
	fail "enabled run: the invalid all-reduce did not reach NCCL for its error code"
# Setup: 2 + 2 (split) + 3 (ncclCommInitAll) + 2 (shrink) + 1 (scalable) = 10 ranks,
# each asked its rank, size and device, then 4 rounds; the non-blocking pair makes no
# eligible call, so it is never set up.  Diverted all-reduces make no NCCL call.
# Ranks share this process, so finalize has no barrier.
for query in ncclCommUserRank ncclCommCount ncclCommCuDevice; do
	[ "$(grep -c "^$query(" "$scratch/enabled.trace")" -eq \
		"$(($(grep -c "^$query(" "$scratch/plain.trace") + 10))" ] ||
		fail "enabled run: expected 10 setup calls of $query"
done
[ "$(grep -c '^ncclAllGather(' "$scratch/enabled.trace")" -eq \
	"$(($(grep -c '^ncclAllGather(' "$scratch/plain.trace") + 10 * 4))" ] ||
	fail "enabled run: expected $((10 * 4)) setup ncclAllGather calls, got $(grep -c '^ncclAllGather(' "$scratch/enabled.trace")"
# Ours move bytes (the script's own gather floats).
[ "$(grep -c '^ncclAllGather(.*datatype=ncclUint8' "$scratch/enabled.trace")" -eq 40 ] ||
	fail "enabled run: nccl-det's exchanges are not byte all-gathers"

# With INFO logging, the only extra NCCL call of the pass-through is the one
# pncclGetVersion behind the INFO line.
run info LD_PRELOAD="$shim_preload" NCCL_DET_ENABLE=0 \
	NCCL_DET_DEBUG=INFO NCCL_DET_DEBUG_SUBSYS=INIT
same_file "$scratch/plain.trace" "$scratch/info.trace" "info run (disabled): different trace"
run info_enabled LD_PRELOAD="$fake_shim_preload" NCCL_DET_ENABLE=1 \
	NCCL_DET_DEBUG=INFO NCCL_DET_DEBUG_SUBSYS=INIT
grep -q "real NCCL .*libnccl.so.2 (found by RTLD_NEXT), version 22809" "$scratch/info_enabled.log" ||
	fail "info run: no INFO line with strategy, path and version: $(cat "$scratch/info_enabled.log")"
[ "$(grep -c '^ncclGetVersion(' "$scratch/info_enabled.trace")" -eq \
	"$(($(grep -c '^ncclGetVersion(' "$scratch/plain.trace") + 1))" ] ||
	fail "info run: expected exactly one extra ncclGetVersion"

# Injected failures, in interposed and in forwarded-only functions.  Pass-through:
# codes and traces stay identical.  Enabled: codes stay identical where nccl-det
# neither takes the failing call over nor uses it itself (ncclAllReduce is diverted;
# ncclGroupEnd also ends nccl-det's own exchanges, whose NCCL error the init then
# returns); there the run must just finish.  Leaks are expected once a group fails
# half-way.
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export ASAN_OPTIONS
for failure in ncclAllReduce=5 ncclCommInitRank ncclGroupEnd=2 ncclCommSplit=4 \
	ncclCommGetAsyncError=6 ncclBroadcast=1 ncclMemFree ncclRedOpCreatePreMulSum=2 \
	ncclCommShrink=3 ncclCommDestroy=6; do
	function=${failure%%=*}
	run fail_plain FAKE_NCCL_FAIL="$failure"
	run fail_disabled FAKE_NCCL_FAIL="$failure" LD_PRELOAD="$shim_preload" NCCL_DET_ENABLE=0
	run fail_enabled FAKE_NCCL_FAIL="$failure" LD_PRELOAD="$fake_shim_preload" NCCL_DET_ENABLE=1 \
		FAKE_NCCL_TIMEOUT_MS=20000
	code=${failure#*=}
	[ "$code" = "$failure" ] && code=3
	grep -q "^$function(.* = $code\$" "$scratch/fail_plain.out" ||
		grep -q "^ncclBcast(.* = $code\$" "$scratch/fail_plain.out" ||
		fail "$failure: the fake did not fail as asked"
	same_file "$scratch/fail_plain.out" "$scratch/fail_disabled.out" \
		"$failure: the pass-through returned different codes"
	same_file "$scratch/fail_plain.trace" "$scratch/fail_disabled.trace" \
		"$failure: the pass-through left a different trace"
	case $function in
	ncclAllReduce | ncclGroupEnd) ;;
	*) same_file "$scratch/fail_plain.out" "$scratch/fail_enabled.out" \
		"$failure: nccl-det returned different codes" ;;
	esac
done
echo "PASS: identical traces and codes without nccl-det and with NCCL_DET_ENABLE=0 ($lines calls); with NCCL_DET_ENABLE=1 the same codes and only nccl-det's own calls added"
