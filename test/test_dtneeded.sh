#!/bin/sh
# libnccl-det.so may depend on libc-family libraries only: a DT_NEEDED libnccl or
# libcudart would be loaded ahead of the application's own copy (or not be found).
# Sanitizer builds also need their runtimes.
. "${NDET_TOP_SRCDIR:-.}/test/test_preload_lib.sh"

readelf -d "$shim" >"$scratch/dynamic" || fail "readelf -d failed"
sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' "$scratch/dynamic" >"$scratch/needed"
[ -s "$scratch/needed" ] || fail "no DT_NEEDED entries read from $shim"
while read -r library; do
	case $library in
	libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | ld-linux*.so.*) ;;
	libasan.so.* | libubsan.so.* | libtsan.so.* | libgcc_s.so.* | libstdc++.so.*)
		[ -n "$NDET_SANITIZER" ] || fail "$library is needed outside a sanitizer build"
		;;
	*) fail "libnccl-det.so needs $library (only libc-family libraries are allowed)" ;;
	esac
done <"$scratch/needed"
grep -q -E '\((RPATH|RUNPATH)\)' "$scratch/dynamic" && fail "libnccl-det.so must carry no RPATH/RUNPATH"
echo "PASS: DT_NEEDED = $(tr '\n' ' ' <"$scratch/needed")"
