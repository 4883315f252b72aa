#!/bin/sh
# Bad input, differentially (test_bad_input.c): the same bad calls without nccl-det,
# with libnccl-det.so preloaded and NCCL_DET_ENABLE=0, and with nccl-det enabled
# (libnccl-det-fake.so: the host-only backend, since the fake NCCL works on host
# memory), each with NCCL's pointer checks off (NCCL_CHECK_POINTERS=0), on
# (NCCL_CHECK_POINTERS=1) and on the newer way (NCCL_CHECK_MODE=DEBUG_LOCAL).  In one
# check mode every run must print the same codes.
. "${NDET_TOP_SRCDIR:-.}/test/support/test_preload_lib.sh"

program="$top_builddir/test/divert/test_bad_input"
[ -x "$program" ] || fail "$program was not built"
[ -f "$fake_shim" ] || fail "$fake_shim was not built"

# run NAME [VAR=VALUE...]: stdout and stderr land in $scratch/NAME.{out,err}.
run() {
	name=$1
	shift
	env FAKE_NCCL_TIMEOUT_MS=20000 NCCL_DET_TIMEOUT=20 NCCL_DET_DEBUG_FILE="$scratch/$name.log" \
		"$@" "$program" >"$scratch/$name.out" 2>"$scratch/$name.err" ||
		fail "$name: the program exited with $? ($(cat "$scratch/$name.err"))"
}

# expect MODE CASE TEXT: the line of CASE in MODE's plain run contains TEXT.
expect() {
	grep -F "$2" "$scratch/$1-plain.out" | grep -q -F "$3" ||
		fail "$1: '$2' should show '$3': $(grep -F "$2" "$scratch/$1-plain.out")"
}

for mode in NCCL_CHECK_POINTERS=0 NCCL_CHECK_POINTERS=1 NCCL_CHECK_MODE=DEBUG_LOCAL; do
	run "$mode-plain" "$mode"
	run "$mode-disabled" "$mode" LD_PRELOAD="$shim_preload" NCCL_DET_ENABLE=0
	run "$mode-enabled" "$mode" LD_PRELOAD="$fake_shim_preload" NCCL_DET_ENABLE=1
	same_file "$scratch/$mode-plain.out" "$scratch/$mode-disabled.out" \
		"$mode: the pass-through returned other codes"
	same_file "$scratch/$mode-plain.out" "$scratch/$mode-enabled.out" \
		"$mode: nccl-det returned other codes than NCCL"
	# The enabled run really diverted: the control call and the count-0 one.
	grep -q -F 'valid all-reduce (control): diverted 1 1' "$scratch/$mode-enabled.err" ||
		fail "$mode: the enabled run did not divert: $(cat "$scratch/$mode-enabled.err")"
	grep -q -F 'count 0: diverted 1 1' "$scratch/$mode-enabled.err" ||
		fail "$mode: count 0 was not diverted"

	# The cases test what they claim (NCCL's codes: 0 success, 4 invalid argument).
	expect "$mode" "valid all-reduce" "codes 0 0, async error none none"
	expect "$mode" "NULL communicator" "codes 4 4"
	expect "$mode" "datatype 42" "codes 4 4"
	expect "$mode" "op never created" "codes 4 4"
	expect "$mode" "destroyed PreMulSum op" "codes 4 4"
	expect "$mode" "destroyed communicator" "codes 4 4"
	expect "$mode" "ncclBroadcast root 5" "codes 4 4"
	expect "$mode" "count 0" "codes 0 0"
	case $mode in
	NCCL_CHECK_POINTERS=0)
		# Unchecked: the launch succeeds and the kernel faults later.
		expect "$mode" "NULL sendbuff, count 4" "codes 0 0, async error error error"
		expect "$mode" "NULL buffers, count 0" "codes 0 0, async error none none"
		expect "$mode" "NULL sendbuff in a group" "codes 0 0, async error error error"
		;;
	*)
		expect "$mode" "NULL sendbuff, count 4" "codes 4 4, async error none none"
		expect "$mode" "NULL buffers, count 0" "codes 4 4"
		expect "$mode" "NULL sendbuff, non-blocking" "codes 4 4"
		expect "$mode" "NULL sendbuff in a group" "codes 400 400"
		;;
	esac
done
# fp8 is a valid call on sm_90 GPUs (the fake NCCL's and fake CUDA's default; that
# nccl-det diverts it there, test_divert shows) ...
expect NCCL_CHECK_POINTERS=0 "datatype fp8 e4m3" "codes 0 0"
# ... and below sm_90 NCCL refuses fp8 reductions (ncclInvalidArgument): nccl-det
# leaves them to NCCL, which says so on every rank (nccl-det's engine would succeed).
sm80="FAKE_NCCL_SM=80 FAKE_CUDA_MAJOR=8"
# shellcheck disable=SC2086 # a list of assignments
run sm80-plain $sm80
# shellcheck disable=SC2086
run sm80-enabled $sm80 LD_PRELOAD="$fake_shim_preload" NCCL_DET_ENABLE=1
same_file "$scratch/sm80-plain.out" "$scratch/sm80-enabled.out" \
	"sm_80: nccl-det returned other codes than NCCL"
grep -F "datatype fp8 e4m3" "$scratch/sm80-plain.out" | grep -q -F "codes 4 4" ||
	fail "sm_80: the fake NCCL did not refuse fp8"
grep -q -F 'valid all-reduce (control): diverted 1 1' "$scratch/sm80-enabled.err" ||
	fail "sm_80: the communicators were not diverted"
echo "PASS: $(wc -l <"$scratch/NCCL_CHECK_POINTERS=0-plain.out") bad calls give NCCL's codes with nccl-det absent, disabled and enabled, pointer checks off and on"
