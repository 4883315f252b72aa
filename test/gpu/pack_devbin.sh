#!/bin/bash
# Copy what the GPU scripts need out of a build tree into DEST (default .devbin), laid out
# like the build tree, so it can be carried to a GPU machine that has no libtool:
#   BUILD=DEST test/gpu/loading.sh, BIN_DIR=DEST/test/gpu test/gpu/suite.sh, ...
# usage: test/gpu/pack_devbin.sh [BUILD-DIR] [DEST]
# It also writes DEST.tgz, to carry; test/gpu/batch.sh unpacks it where DEST is missing.
# Every binary that links the engine carries the kernel library, whose GPU code is
# compressed already (about 9 MB each with one gencode; ndet_fault_test carries none),
# so the tarball is hardly smaller than DEST.  A device call carries 64 MiB at most:
# LEAVE_OUT (space-separated paths under DEST, e.g. "ablate test/gpu/ndet_preload_test")
# leaves out what the steps of one call do not run, and the script fails where the
# tarball is still too large.
set -eu
build=$(cd "${1:-.}" && pwd)
dest=${2:-$build/.devbin}
limit=$((64 * 1024 * 1024))
rm -rf "$dest"
mkdir -p "$dest/src/.libs" "$dest/src/dropin/.libs" "$dest/tools" "$dest/test/gpu"
cp -a "$build"/src/.libs/libnccl-det.so* "$dest/src/.libs/"
cp -a "$build"/src/dropin/.libs/libnccl.so* "$dest/src/dropin/.libs/"
for t in nccl-det-perf nccl-det-info nccl-det-run; do
	[ -e "$build/tools/$t" ] && cp -a "$build/tools/$t" "$dest/tools/"
done
for t in "$build"/test/gpu/ndet_*_test; do
	[ -x "$t" ] && cp -a "$t" "$dest/test/gpu/"
done
# The measurement builds of test/gpu/ll_ablate_build.sh, where made (batch step ll-ablate).
if [ -d "$build/ablate" ]; then
	cp -a "$build/ablate" "$dest/ablate"
fi
for path in ${LEAVE_OUT:-}; do
	case $path in
	/* | *..*)
		echo "pack_devbin.sh: LEAVE_OUT takes paths under DEST: $path" >&2
		exit 2
		;;
	esac
	[ -e "$dest/$path" ] || {
		echo "pack_devbin.sh: LEAVE_OUT: no $path in $dest" >&2
		exit 2
	}
	rm -rf "${dest:?}/$path"
done
(cd "$dest" && git -C "$build" rev-parse --short HEAD > COMMIT 2>/dev/null || true)
tar -C "$(dirname "$dest")" -czf "$dest.tgz" "$(basename "$dest")"
du -sh "$dest" "$dest.tgz"
size=$(stat -c %s "$dest.tgz")
if [ "$size" -gt "$limit" ]; then
	echo "pack_devbin.sh: $dest.tgz is $((size / 1048576)) MiB, more than a device call" \
		"carries (64 MiB): leave out what the call does not run (LEAVE_OUT)" >&2
	exit 1
fi
