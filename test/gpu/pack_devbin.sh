#!/bin/bash
# Copy what the GPU scripts need out of a build tree into DEST (default .devbin), laid out
# like the build tree, so it can be carried to a GPU machine that has no libtool:
#   BUILD=DEST test/gpu/loading.sh, BIN_DIR=DEST/test/gpu test/gpu/suite.sh, ...
# usage: test/gpu/pack_devbin.sh [BUILD-DIR] [DEST]
# It also writes DEST.tgz: every binary links the kernel library in (about 12 MB each,
# 70 MB in all), more than a device call carries (64 MiB), and the tarball is a quarter
# of that.  Carry DEST.tgz; test/gpu/batch.sh unpacks it where DEST is missing.
set -eu
build=$(cd "${1:-.}" && pwd)
dest=${2:-$build/.devbin}
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
(cd "$dest" && git -C "$build" rev-parse --short HEAD > COMMIT 2>/dev/null || true)
tar -C "$(dirname "$dest")" -czf "$dest.tgz" "$(basename "$dest")"
du -sh "$dest" "$dest.tgz"
