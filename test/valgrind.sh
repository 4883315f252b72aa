#!/bin/sh
# The pure-logic CPU tests, the fuzz targets' plain drivers, the fake NCCL's test
# and the divert layer's (test_divert: rank threads, no preload) under valgrind's
# memcheck: invalid accesses, uses of uninitialised values and definite or indirect
# leaks fail.  Not here: the preload tests (valgrind would trace the shells), and
# test_faults, whose forked children and time bounds do not suit valgrind; ASan,
# LSan and TSan run it.
#
#   test/valgrind.sh BUILD_DIR
#
# BUILD_DIR holds a build without sanitizers (valgrind and ASan do not mix) whose
# check programs are built (make check).  Exits 77 (skip) without valgrind.
set -u
build=${1:?usage: test/valgrind.sh BUILD_DIR}
command -v valgrind >/dev/null 2>&1 || {
	echo "valgrind.sh: no valgrind: skipped"
	exit 77
}
if grep -q '^SANITIZER_LDFLAGS = .*-fsanitize' "$build/Makefile"; then
	echo "valgrind.sh: $build is a sanitizer build" >&2
	exit 1
fi
programs="unit/test_status unit/test_settings unit/test_env unit/test_log unit/test_reference
	unit/test_setup_record unit/test_setup unit/test_eligibility unit/test_plan
	fuzz/fuzz_settings fuzz/fuzz_env fuzz/fuzz_setup_table fuzz/fuzz_eligibility
	fake_nccl/test_fake_nccl divert/test_divert"
status=0
for program in $programs; do
	path="$build/test/$program"
	[ -x "$path" ] || { echo "valgrind.sh: $path was not built" >&2; exit 1; }
	# NDET_SANITIZER: tests that measure speed skip themselves.  --fair-sched: valgrind
	# runs one thread at a time, and without it a thread that polls in a loop (the
	# watchdog of test_divert's races) can hold the lock for whole time slices while
	# the thread it waits for starves (test_divert's run time then swings from seconds
	# to minutes).
	if NDET_SANITIZER=valgrind valgrind --fair-sched=yes --quiet --error-exitcode=99 \
		--leak-check=full \
		--errors-for-leak-kinds=definite,indirect "$path" >"$path.valgrind.log" 2>&1; then
		echo "PASS: $program"
	else
		tail -40 "$path.valgrind.log" >&2
		echo "FAIL: $program under valgrind (log: $path.valgrind.log; add" \
			"--track-origins=yes to see where uninitialised values come from)" >&2
		status=1
	fi
done
exit $status
