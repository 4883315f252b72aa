# Sourced by the preload test drivers: where the built libraries are, and how to
# preload the shim: $shim_preload (libnccl-det.so; against the fake NCCL only with
# NCCL_DET_ENABLE=0, since its CUDA engine would hand the fake device pointers) and
# $fake_shim_preload (the same library with the host-only backend, for
# NCCL_DET_ENABLE=1).
#
# In a sanitizer build libnccl-det.so needs the sanitizer runtime, and ASan insists
# on being first in the initial library list; so the runtime the shim was linked
# with goes first in LD_PRELOAD (harmless for TSan, which gets the same treatment).

top_builddir=${NDET_TOP_BUILDDIR:-.}
shim="$top_builddir/src/.libs/libnccl-det.so"
fake_nccl_dir="$top_builddir/test/fake_nccl/.libs"

if [ ! -f "$shim" ]; then
	echo "FAIL: $shim was not built" >&2
	exit 1
fi

sanitizer_runtime=$(ldd "$shim" 2>/dev/null | awk '/lib(a|t)san\.so/ { print $3; exit }')
fake_shim="$top_builddir/test/support/.libs/libnccl-det-fake.so"
if [ -n "$sanitizer_runtime" ]; then
	shim_preload="$sanitizer_runtime $shim"
	fake_shim_preload="$sanitizer_runtime $fake_shim"
else
	shim_preload="$shim"
	fake_shim_preload="$fake_shim"
fi

# A scratch directory removed on exit.
scratch=$(mktemp -d "${TMPDIR:-/tmp}/ndet-test.XXXXXX") || exit 1
trap 'rm -rf "$scratch"' EXIT

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

# The drop-in libnccl.so.2 (built against the configured NCCL's export list) and its
# test twin built against the fake's (plus ncclTestOnlyMissing, which the fake lacks)
# with the host-only backend, and the fake itself.
dropin="$top_builddir/src/dropin/.libs/libnccl.so.2"
fake_dropin="$top_builddir/test/dropin_fake/.libs/libnccl.so.2"
fake_nccl="$fake_nccl_dir/libnccl.so.2"

# An LD_PRELOAD value: the sanitizer runtime (if any) first, then the arguments.
preload_of() {
	echo "${sanitizer_runtime:+$sanitizer_runtime }$*"
}

# The names nccl-det interposes (ncclX), from the shim.
interposed_names() {
	sed -n 's/^NDET_SHIM_PROFILING_ALIAS(\([A-Za-z0-9_]*\))$/\1/p' \
		"${NDET_TOP_SRCDIR:-.}/src/preload/ndet_shim.c"
}

# Defined dynamic symbols of a library: "NAME TYPE BIND VISIBILITY VALUE", sorted.
defined_symbols() {
	readelf --dyn-syms -W "$1" |
		awk '$1 ~ /^[0-9]+:$/ && $7 != "UND" && $4 != "SECTION" && $4 != "FILE" && NF >= 8 && $8 != "" { print $8, $4, $5, $6, $2 }' |
		sort
}

# same_file A B WHAT: A and B are identical, else show the difference and fail.
same_file() {
	cmp -s "$1" "$2" || {
		diff -u "$1" "$2" >&2
		fail "$3"
	}
}
