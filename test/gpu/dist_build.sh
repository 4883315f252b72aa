#!/bin/bash
# Build nccl-det on a GPU machine from a `make dist` tarball (such machines have no
# libtool: the tarball carries its own), then run the GPU smoke tier and the PyTorch
# preload test with what was built there.
# usage: dist_build.sh nccl-det-X.Y.Z.tar.gz [extra configure args...]
set -eu
tarball=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
shift
OUT=${OUT:-/tmp/ndet-gpu-out}
mkdir -p "$OUT"
work=$(mktemp -d)
cd "$work"
tar xzf "$tarball"
cd nccl-det-*/
echo "libtool on PATH: $(command -v libtool || echo none)"
start=$SECONDS
./configure -q --disable-tests "$@" 2>&1 | tail -14
make -j"$(nproc)" > "$OUT/dist-make.log" 2>&1 || { tail -30 "$OUT/dist-make.log"; exit 1; }
echo "built from the tarball in $((SECONDS - start)) s"
readelf -d src/.libs/libnccl-det.so | grep NEEDED
BIN_DIR=$PWD/test/gpu bash test/gpu/suite.sh smoke | tail -4
bash test/gpu/torch_preload.sh "$PWD/src/.libs/libnccl-det.so" 3 | tail -5
