#!/bin/sh
# `make installcheck` (run by `make distcheck`): the installed layout.
#   lib/libnccl-det.so, lib/libnccl-tuner-det.so and lib/libnccl-net-det.so (symlinks
#   to it), lib/nccl-det/libnccl.so.2 (SONAME libnccl.so.2), DT_NEEDED libc-family only;
#   include/nccl_det.h; lib/pkgconfig/nccl-det.pc; bin/nccl-det-perf, nccl-det-info,
#   nccl-det-run, the last two answering --help, nccl-det-run with the installed paths.
# usage: installcheck.sh LIBDIR INCLUDEDIR BINDIR (with DESTDIR already applied)
set -u
libdir=$1
includedir=$2
bindir=$3
fail() {
	echo "FAIL: $*" >&2
	exit 1
}

[ -f "$libdir/libnccl-det.so" ] && [ ! -L "$libdir/libnccl-det.so" ] ||
	fail "$libdir/libnccl-det.so is not a file"
for plugin in libnccl-tuner-det.so libnccl-net-det.so; do
	[ -L "$libdir/$plugin" ] || fail "$libdir/$plugin is not a symlink"
	[ "$(readlink "$libdir/$plugin")" = libnccl-det.so ] || fail "$plugin -> $(readlink "$libdir/$plugin")"
done
dropin="$libdir/nccl-det/libnccl.so.2"
[ -e "$dropin" ] || fail "$dropin is not installed"
readelf -d "$dropin" | grep -q 'Library soname: \[libnccl.so.2\]' || fail "$dropin: SONAME"
[ -f "$includedir/nccl_det.h" ] || fail "$includedir/nccl_det.h is not installed"
grep -q ncclDetGetNcclLibrary "$includedir/nccl_det.h" || fail "nccl_det.h is not the current one"
[ -f "$libdir/pkgconfig/nccl-det.pc" ] || fail "nccl-det.pc is not installed"
for tool in nccl-det-perf nccl-det-info nccl-det-run; do
	[ -x "$bindir/$tool" ] || fail "$bindir/$tool is not installed"
done
"$bindir/nccl-det-info" --help >/dev/null || fail "nccl-det-info --help"
"$bindir/nccl-det-run" --help >"${TMPDIR:-/tmp}/ndet-run-help.$$" || fail "nccl-det-run --help"
grep -q "libnccl-det.so" "${TMPDIR:-/tmp}/ndet-run-help.$$" || fail "nccl-det-run --help names no library"
rm -f "${TMPDIR:-/tmp}/ndet-run-help.$$"
"$bindir/nccl-det-info" --no-gpu >/dev/null || fail "nccl-det-info"
echo "PASS: installed layout"
