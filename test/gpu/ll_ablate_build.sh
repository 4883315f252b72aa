#!/bin/bash
# Build nccl-det-perf once per NDET_LL_ABLATE mask (kernels/device/ndet_ll.cuh), for
# test/gpu/ll_ablate.sh to time what each part of an LL step costs.  Only the f32 LL
# kernels change (kernels/ndet_push_ll_f32.cu); every other kernel is the library's.
# Such binaries compute wrong results by design: never install or ship them.
#
#   test/gpu/ll_ablate_build.sh BUILD-DIR [DEST]
#
# BUILD-DIR: a configured and built tree (make done; GPU code for the lent machine's
# GPU, e.g. --with-nvcc-gencode=sm_90).  DEST (default BUILD-DIR/ablate) receives
# perf-MASK for every mask in ABLATE (default "0 1 4 8 16 32": the whole step,
# then the step without its ready flag, block 0's wait for the host abort read, its
# tree and recvbuff stores, the block's agreement on the gather, its loads of
# sendbuff; 0x1 ... 0x20 in ndet_ll.cuh).  The build tree's own
# objects are rebuilt without a mask at the end.  On two cores: the first mask about
# four minutes where ndet_ll.cuh is newer than the tree's kernels (they all rebuild),
# each further one about 30 s.
set -eu
build=$(cd "${1:?usage: ll_ablate_build.sh BUILD-DIR [DEST]}" && pwd)
dest=${2:-$build/ablate}
masks=${ABLATE:-0 1 4 8 16 32}
nvcc=$(sed -n 's/^NVCC = //p' "$build/Makefile")
[ -n "$nvcc" ] || {
	echo "ll_ablate_build.sh: no NVCC in $build/Makefile (a build without CUDA?)" >&2
	exit 2
}
mkdir -p "$dest"
object=kernels/ndet_push_ll_f32.lo
restore() {
	rm -f "$build/$object"
	make -s -C "$build" "$object" tools/nccl-det-perf >/dev/null
}
trap restore EXIT
for mask in $masks; do
	rm -f "$build/$object"
	make -s -C "$build" "$object" NVCC="$nvcc -DNDET_LL_ABLATE=$mask" >/dev/null
	make -s -C "$build" tools/nccl-det-perf >/dev/null
	cp "$build/tools/nccl-det-perf" "$dest/perf-$mask"
	echo "built $dest/perf-$mask"
done
git -C "$build" rev-parse --short HEAD >"$dest/COMMIT" 2>/dev/null || true
