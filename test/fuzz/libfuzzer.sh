#!/bin/sh
# Build the fuzz targets with libFuzzer, AddressSanitizer and UBSan (clang) and run
# each for a bounded time.  `make check` runs the same entry points through their
# plain drivers; this is the coverage-guided run (.ci/run does it when clang can).
#
#   test/fuzz/libfuzzer.sh BUILD_DIR [SECONDS_PER_TARGET] [TARGET...]
#
# Targets run NDET_FUZZ_JOBS at a time (default: one per CPU), each for the given time.
#
# BUILD_DIR is a configured tree (config.h, include/nccl_det.h, Makefile); targets
# default to all of fuzz_settings, fuzz_env, fuzz_setup_table, fuzz_eligibility.
# Corpora and crash inputs stay in $NDET_FUZZ_DIR (default: a new directory under
# $TMPDIR, printed); re-run a crash with the plain driver: test/fuzz/fuzz_X CRASH_FILE.
# Exits 77 (skip) when clang cannot build a libFuzzer program, 1 when a target fails.
set -u
build=${1:?usage: test/fuzz/libfuzzer.sh BUILD_DIR [SECONDS] [TARGET...]}
seconds=${2:-60}
[ $# -ge 2 ] && shift 2 || shift $#
targets=${*:-fuzz_settings fuzz_env fuzz_setup_table fuzz_eligibility}
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$build" && pwd) || exit 1
clang=${CLANG:-clang}
[ -f "$build/config.h" ] || { echo "libfuzzer.sh: $build is not configured" >&2; exit 1; }

created=
if [ -n "${NDET_FUZZ_DIR:-}" ]; then
	work=$NDET_FUZZ_DIR
	mkdir -p "$work" || exit 1
else
	work=$(mktemp -d "${TMPDIR:-/tmp}/ndet-libfuzzer.XXXXXX") || exit 1
	created=yes
fi
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }\n' \
	>"$work/probe.c"
if ! "$clang" -fsanitize=fuzzer "$work/probe.c" -o "$work/probe" 2>/dev/null; then
	echo "libfuzzer.sh: $clang cannot build libFuzzer programs: skipped"
	[ -n "$created" ] && rm -rf "$work"
	exit 77
fi

nccl_cppflags=$(sed -n 's/^NCCL_CPPFLAGS = //p' "$build/Makefile")
# shellcheck disable=SC2086 # word splitting of the flag lists is intended
compile() {
	name=$1
	shift
	"$clang" -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined \
		-fno-sanitize-recover=undefined -DNDET_LIBFUZZER \
		-I"$build" -I"$build/include" -I"$src/include" -I"$src/src" -I"$src" -I"$src/kernels" \
		-I"$src/test" $nccl_cppflags "$@" -o "$work/$name" -lpthread
}

# One target: build it, run it for $seconds; its output and exit status go to files,
# reported in order below.
run_target() {
	target=$1
	case $target in
	fuzz_settings) sources="src/common/ndet_settings.c src/common/ndet_env.c src/common/ndet_log.c" ;;
	fuzz_env) sources="test/fuzz/fuzz_driver.c src/common/ndet_env.c" ;;
	fuzz_setup_table) sources="test/fuzz/fuzz_driver.c src/protocol/ndet_setup_record.c src/protocol/ndet_host_table.c src/protocol/ndet_host_order.c" ;;
	fuzz_eligibility) sources="test/fuzz/fuzz_driver.c src/protocol/ndet_eligibility.c src/common/ndet_dtype.c" ;;
	*) echo "libfuzzer.sh: unknown target $target"; return 1 ;;
	esac
	set --
	for file in "test/fuzz/$target.c" $sources; do
		set -- "$@" "$src/$file"
	done
	compile "$target" "$@" || { echo "libfuzzer.sh: $target does not build"; return 1; }
	mkdir -p "$work/$target.corpus"
	echo "=== $target for ${seconds}s (corpus $work/$target.corpus)"
	"$work/$target" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 \
		-print_final_stats=1 -artifact_prefix="$work/$target-" "$work/$target.corpus" \
		>"$work/$target.log" 2>&1
	result=$?
	grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|Done)' "$work/$target.log"
	if [ "$result" -ne 0 ]; then
		tail -40 "$work/$target.log"
		echo "libfuzzer.sh: $target FAILED (inputs: $work/$target-*)"
		return 1
	fi
	return 0
}
# NDET_FUZZ_JOBS targets at a time (default: the CPUs; each target is one process).
jobs=${NDET_FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
running=0
pids=
for target in $targets; do
	(run_target "$target" >"$work/$target.out" 2>&1; echo $? >"$work/$target.rc") &
	pids="$pids $!"
	running=$((running + 1))
	if [ "$running" -ge "$jobs" ]; then
		# shellcheck disable=SC2086
		wait $pids
		pids=
		running=0
	fi
done
wait
status=0
for target in $targets; do
	cat "$work/$target.out"
	[ "$(cat "$work/$target.rc" 2>/dev/null)" = 0 ] || status=1
done
# Kept when something failed: the crash inputs are in there.
[ "$status" -eq 0 ] && [ -n "$created" ] && rm -rf "$work"
exit $status
