#!/bin/sh
# What each built binary carries (its size budget and kernels/local.mk's compression):
# - the CPU test programs and libraries never launch a kernel, so they link no GPU
#   code (no .nv_fatbin section) and no CUDA runtime (libndet_divert.la takes its
#   backend from the library linked after it: the host-only engine there);
# - the installed libraries and tools do carry the kernels, compressed: with the
#   default targets each is at most NDET_BINARY_LIMIT bytes (12 MB), a budget for what
#   is installed: not for a sanitizer build, whose instrumented host code is larger;
# - every kernel object has the header dependencies nvcc wrote (kernels/.deps).
. "${NDET_TOP_SRCDIR:-.}/test/support/test_preload_lib.sh"
limit=${NDET_BINARY_LIMIT:-12000000}
top=$top_builddir

has_gpu_code() { readelf -S "$1" 2>/dev/null | grep -q '\.nv_fatbin'; }
has_cudart() { nm "$1" 2>/dev/null | grep -q -E ' (cudaGetDeviceCount|__cudaRegisterFatBinary)$'; }

checked=0
for program in "$top"/test/*/test_* "$top"/test/fuzz/fuzz_* "$top"/test/*/.libs/*.so \
	"$top"/test/dropin_fake/.libs/libnccl.so.2; do
	[ -f "$program" ] && [ -x "$program" ] || continue
	case $program in *.sh | *.o | *.log | *.trs) continue ;; esac
	file "$program" | grep -q ELF || continue
	has_gpu_code "$program" && fail "$program carries GPU code (.nv_fatbin)"
	has_cudart "$program" && fail "$program links the CUDA runtime"
	checked=$((checked + 1))
done
[ "$checked" -ge 20 ] || fail "only $checked CPU test binaries found under $top/test"
echo "PASS: $checked CPU test binaries carry no GPU code and no CUDA runtime"

for binary in "$shim" "$top/src/dropin/.libs/libnccl.so.2" "$top/tools/nccl-det-perf"; do
	[ -f "$binary" ] || { [ "$binary" != "$shim" ] && continue; fail "$binary missing"; }
	has_gpu_code "$binary" || fail "$binary carries no GPU code"
	size=$(stat -L -c %s "$binary")
	if [ "${NDET_DEFAULT_GENCODE:-yes}" = yes ] && [ -z "${NDET_SANITIZER:-}" ] &&
		[ "$size" -gt "$limit" ]; then
		fail "$binary is $size bytes, over $limit (is -Xfatbin -compress-all on? configure's summary)"
	fi
	if [ -n "${NDET_SANITIZER:-}" ]; then
		echo "PASS: $binary: GPU code, $size bytes (a sanitizer build: no size budget)"
	else
		echo "PASS: $binary: GPU code, $size bytes"
	fi
done
# The benchmark kernels (kernels/libndet_bench_kernels.la) are nccl-det-perf's and
# the GPU tests' alone.
for binary in "$shim" "$top/src/dropin/.libs/libnccl.so.2"; do
	[ -f "$binary" ] || continue
	nm "$binary" 2>/dev/null | grep -q ' ndet_kernel_fill_u32$' &&
		fail "$binary carries the benchmark kernels"
done
size=$(stat -L -c %s "$top/tools/nccl-det-info")
[ "$size" -le "$limit" ] || fail "nccl-det-info is $size bytes"
has_gpu_code "$top/tools/nccl-det-info" && fail "nccl-det-info carries GPU code"

objects=0
for lo in "$top"/kernels/*.lo; do
	[ -f "$lo" ] || continue
	base=$(basename "$lo" .lo)
	deps="$top/kernels/.deps/$base.Plo"
	[ -s "$deps" ] || fail "$lo has no dependency file ($deps)"
	grep -q 'ndet_abi\.h' "$deps" || fail "$deps does not name kernels/ndet_abi.h"
	case $base in
	ndet_kernels | ndet_kernels_all_ranks) header='ndet_kernels\.h' ;;
	ndet_bench) header='ndet_bench\.h' ;;
	*) header='device/ndet_path_kernels\.cuh' ;;
	esac
	grep -q "$header" "$deps" || fail "$deps does not name $header"
	objects=$((objects + 1))
done
[ "$objects" -ge 13 ] || fail "only $objects kernel objects found"
echo "PASS: $objects kernel objects, each with nvcc's header dependencies"
