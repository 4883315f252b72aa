#!/bin/sh
# libnccl-det.so and the drop-in libnccl.so.2 may depend on libc-family libraries
# only: a DT_NEEDED libnccl or libcudart would be loaded ahead of the application's
# own copy (or not be found).  Sanitizer builds also need their runtimes.
# usage: test_dtneeded.sh [LIBRARY...] (default: the built libnccl-det.so and drop-in;
# `make installcheck` passes the installed ones)
. "${NDET_TOP_SRCDIR:-.}/test/support/test_preload_lib.sh"

[ $# -gt 0 ] || set -- "$shim" "$dropin"
for library in "$@"; do
	[ -f "$library" ] || fail "$library was not built"
	readelf -d "$library" >"$scratch/dynamic" || fail "readelf -d $library failed"
	sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' "$scratch/dynamic" >"$scratch/needed"
	[ -s "$scratch/needed" ] || fail "no DT_NEEDED entries read from $library"
	while read -r needed; do
		case $needed in
		libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | ld-linux*.so.*) ;;
		libasan.so.* | libubsan.so.* | libtsan.so.* | libgcc_s.so.* | libstdc++.so.*)
			[ -n "$NDET_SANITIZER" ] || fail "$library: $needed is needed outside a sanitizer build"
			;;
		*) fail "$library needs $needed (only libc-family libraries are allowed)" ;;
		esac
	done <"$scratch/needed"
	grep -q -E '\((RPATH|RUNPATH)\)' "$scratch/dynamic" && fail "$library must carry no RPATH/RUNPATH"
	echo "PASS: $library: DT_NEEDED = $(tr '\n' ' ' <"$scratch/needed")"
done
