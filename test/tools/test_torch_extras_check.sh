#!/bin/sh
# The judge of test/gpu/torch_extras.sh (torch_extras.py check), on made-up rank logs,
# without torch or a GPU: it passes a diverted job whose NCCL COLL log shows exactly the
# forwarded calls, and fails one where NCCL ran a call nccl-det claims to have diverted,
# one without a STATS line, an injected IPC failure whose WARN is missing or names the
# wrong rank, a job with NCCL_DET_ENABLE=0 where NCCL missed calls, and DDP runs whose
# bucket sizes changed the weights under nccl-det (reported only under plain NCCL).
if ! command -v python3 >/dev/null 2>&1; then
	echo "no python3: skipping"
	exit 77
fi
. "${NDET_TOP_SRCDIR:-.}/test/support/test_preload_lib.sh" # $scratch, fail
judge="${NDET_TOP_SRCDIR:-.}/test/gpu/torch_extras.py"

# result CASE RANK ELIGIBLE FORWARDED REFUSED ENABLE TEST_FAIL STRICT EXTRA: a rank's JSON line.
result() {
	printf '{"case": "%s", "rank": %d, "world": 2, "errors": [], "eligible": %s, "forwarded": %s, "refused": %d, "env": {"NCCL_DET_ENABLE": "%s", "NCCL_DET_TEST_FAIL": "%s", "NCCL_DET_STRICT": "%s"}%s}\n' \
		"$1" "$2" "$3" "$4" "$5" "$6" "$7" "$8" "$9"
}
stats() { # DIVERTED FALLBACKS REFUSED: the line as src/divert/ndet_comm.c writes it
	echo "h:1:1 NCCL-DET STATS communicator 0x5 rank 0/2 (diverted): diverted $1 calls, 64 bytes (all-reduce $1, reduce-scatter 0, reduce 0; PreMulSum 0); fallbacks: $2; refused (strict) $3; failed 0"
}
coll() { # COUNT: NCCL's COLL lines
	i=0
	while [ "$i" -lt "$1" ]; do
		echo "h:1:1 [0] NCCL INFO AllReduce: opCount $i sendbuff 0x1 recvbuff 0x1 count 5 datatype 2 op 0 root 0 comm 0x5 [nranks=2] stream 0x0"
		i=$((i + 1))
	done
}
expect() { # WANT-RC WHAT CASE FILES...
	want=$1 what=$2 case=$3
	shift 3
	python3 "$judge" check "$case" "$@" >"$scratch/out" 2>&1
	rc=$?
	[ "$rc" -eq "$want" ] || fail "$what: exit $rc, expected $want: $(cat "$scratch/out")"
}

# A diverted job: 8 eligible calls diverted, the int32 and int64 forwarded and seen by NCCL.
for r in 0 1; do
	{
		coll 2
		stats 8 "integer datatype 2" 0
		result basic "$r" 8 2 0 1 "" "" ""
	} >"$scratch/ok.$r"
done
expect 0 "a diverted job" basic "$scratch/ok.0" "$scratch/ok.1"
grep -q "rank 1: NCCL ran 2 all-reduces; nccl-det diverted 8, forwarded 2, refused 0" "$scratch/out" ||
	fail "summary line: $(cat "$scratch/out")"

# NCCL ran one more all-reduce than nccl-det forwarded: a diverted call reached NCCL.
{ coll 3; stats 8 "integer datatype 2" 0; result basic 0 8 2 0 1 "" "" ""; } >"$scratch/extra.0"
expect 1 "an AllReduce in NCCL's log nccl-det did not forward" basic "$scratch/extra.0"
grep -q "NCCL's log shows 3 all-reduces, nccl-det forwarded 2" "$scratch/out" || fail "reason: $(cat "$scratch/out")"
# Fewer diverted than eligible; no STATS at all; an error the rank reported; no result.
{ coll 2; stats 7 "integer datatype 2" 0; result basic 0 8 2 0 1 "" "" ""; } >"$scratch/short.0"
expect 1 "fewer diverted calls than eligible ones" basic "$scratch/short.0"
{ coll 2; result basic 0 8 2 0 1 "" "" ""; } >"$scratch/nostats.0"
expect 1 "no STATS line" basic "$scratch/nostats.0"
{ coll 2; stats 8 "integer datatype 2" 0; result basic 0 8 2 0 1 "" "" "" | sed 's/"errors": \[\]/"errors": ["f32: 3 elements off"]/'; } >"$scratch/err.0"
expect 1 "a rank's own error" basic "$scratch/err.0"
echo "h:1:1 NCCL INFO nothing" >"$scratch/none.0"
expect 1 "a rank without a result" basic "$scratch/none.0"

# NCCL_DET_TEST_FAIL=ipc_open@1: all forwarded, one WARN per rank naming rank 1.
warn='h:1:1 NCCL-DET WARN ndet_comm_call.c:188 communicator 0x5 rank 0: floating-point all-reduces run in NCCL and are not deterministic: local failure on rank 1 (opening or mapping a peer'"'"'s pool failed). Fix: x'
{ coll 10; echo "$warn"; stats 0 "integer datatype 2, communicator not diverted 8" 0; result basic 0 8 2 0 1 ipc_open@1 "" ""; } >"$scratch/ipc.0"
expect 0 "an injected IPC failure" basic "$scratch/ipc.0"
{ coll 10; stats 0 "integer datatype 2, communicator not diverted 8" 0; result basic 0 8 2 0 1 ipc_open@1 "" ""; } >"$scratch/ipcnowarn.0"
expect 1 "an injected IPC failure without its WARN" basic "$scratch/ipcnowarn.0"
{ coll 10; echo "$warn" | sed 's/on rank 1 /on rank 0 /'; stats 0 "integer datatype 2, communicator not diverted 8" 0; result basic 0 8 2 0 1 ipc_open@1 "" ""; } >"$scratch/ipcwrong.0"
expect 1 "a WARN naming the wrong rank" basic "$scratch/ipcwrong.0"

# NCCL_DET_ENABLE=0: NCCL must run every call.
{ coll 10; result basic 0 8 2 0 0 "" "" ""; } >"$scratch/off.0"
expect 0 "NCCL_DET_ENABLE=0" basic "$scratch/off.0"
{ coll 9; result basic 0 8 2 0 0 "" "" ""; } >"$scratch/offshort.0"
expect 1 "NCCL_DET_ENABLE=0 with a call NCCL did not run" basic "$scratch/offshort.0"

# Strict: nothing PyTorch issues is refused (PreMulSum is diverted); a refusal
# (STATS count or WARN) the rank did not expect is an error.
{ coll 2; stats 9 "integer datatype 2" 0; result ineligible 0 9 2 0 1 "" 1 ""; } >"$scratch/strict.0"
expect 0 "strict, nothing refused" ineligible "$scratch/strict.0"
strict_warn='h:1:1 NCCL-DET WARN x communicator 0x5 rank 0: NCCL_DET_STRICT=1: ncclAllReduce fails with ncclInvalidUsage because it would not be deterministic: datatype 10'
{ coll 2; echo "$strict_warn"; stats 9 "integer datatype 2" 1; result ineligible 0 9 2 0 1 "" 1 ""; } >"$scratch/strictrefused.0"
expect 1 "strict with an unexpected refusal" ineligible "$scratch/strictrefused.0"
{ coll 2; echo "$strict_warn"; stats 9 "integer datatype 2" 0; result ineligible 0 9 2 0 1 "" 1 ""; } >"$scratch/strictwarn.0"
expect 1 "strict with a refusal WARN but no refusal" ineligible "$scratch/strictwarn.0"

# DDP: the bucket sizes must not matter under nccl-det, are only reported under NCCL.
ddp() { # FILE RANK ENABLE DIFFER DIGEST
	{
		coll 1
		[ "$3" = 1 ] && stats 24 "integer datatype 1" 0
		result ddp "$2" null null 0 "$3" "" "" ", \"parameters\": 10, \"bucket_differ\": $4, \"digest\": {\"1\": \"$5\"}"
	} >"$1"
}
ddp "$scratch/ddp.0" 0 1 0 aa
ddp "$scratch/ddp.1" 1 1 0 aa
expect 0 "DDP under nccl-det" ddp "$scratch/ddp.0" "$scratch/ddp.1"
ddp "$scratch/ddp.1" 1 1 3 aa
expect 1 "DDP under nccl-det with bucket-dependent weights" ddp "$scratch/ddp.0" "$scratch/ddp.1"
ddp "$scratch/ddp.1" 1 1 0 bb
expect 1 "DDP ranks with different weights" ddp "$scratch/ddp.0" "$scratch/ddp.1"
for r in 0 1; do
	{ coll 30; result ddp "$r" null null 0 0 "" "" ', "parameters": 10, "bucket_differ": 4, "digest": {"1": "cc"}'; } >"$scratch/nccl.$r"
done
expect 0 "DDP under plain NCCL" ddp "$scratch/nccl.0" "$scratch/nccl.1"
grep -q "the bucket sizes changed the final weights, as expected" "$scratch/out" || fail "plain DDP: $(cat "$scratch/out")"
# query: ncclDetCommQuery's answer is the rank's own check; the judge wants rank 0's
# verdict line (NCCL_DEBUG's VERSION level) to say deterministic, and no other rank's.
verdict() { # WHAT: the line as src/divert/ndet_comm_setup.c writes it
	echo "h:1:1 NCCL-DET VERSION nccl-det 0.1.0 (preload): communicator 0x5 of 2 ranks: $1"
}
query() { # FILE RANK VERDICT-OR-EMPTY
	{
		coll 2
		[ -n "$3" ] && verdict "$3"
		stats 8 "integer datatype 2" 0
		result query "$2" 8 2 0 1 "" "" ', "query": {"status": 0, "diverted": 1, "reason": "diverted"}'
	} >"$1"
}
det="deterministic (its floating-point all-reduce, reduce-scatter and reduce run in nccl-det)"
query "$scratch/q.0" 0 "$det"
query "$scratch/q.1" 1 ""
expect 0 "query with rank 0's verdict" query "$scratch/q.0" "$scratch/q.1"
query "$scratch/qnone.0" 0 ""
expect 1 "query without a verdict line" query "$scratch/qnone.0" "$scratch/q.1"
grep -q "no 'deterministic' verdict line on rank 0" "$scratch/out" || fail "reason: $(cat "$scratch/out")"
query "$scratch/qnot.0" 0 "NOT deterministic: its floating-point reductions run in NCCL (multi-host, rank 2)"
expect 1 "query with a fallback verdict" query "$scratch/qnot.0" "$scratch/q.1"
query "$scratch/qtwo.1" 1 "$det"
expect 1 "a verdict line on rank 1" query "$scratch/q.0" "$scratch/qtwo.1"
grep -q "a verdict line on rank 1" "$scratch/out" || fail "reason: $(cat "$scratch/out")"

echo "PASS: torch_extras.py check"
