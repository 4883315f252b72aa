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
# perf-MASK for every mask in ABLATE (default "0 1 8 16 32": the whole step, then
# the step without its ready flag, its tree and recvbuff stores, the block's
# agreement on the gather, its loads of sendbuff; 0x1 ... 0x20 in ndet_ll.cuh).  The
# build tree's own objects are rebuilt without a mask at the end.  On two cores: the
# first mask about four minutes where ndet_ll.cuh is newer than the tree's kernels
# (they all rebuild), each further one about 30 s.
#
# VARIANTS (space-separated LABEL:KERNEL-DEFINES:HOST-DEFINES:SETTINGS, each list
# joined by commas) adds perf-LABEL builds that compute right results but poll or
# plan otherwise: the f32 LL kernels get the kernel defines (NDET_LL_POLL_SLEEP,
# NDET_LL_POLL_NARROW, NDET_LL_SCATTER_LANES, NDET_LL_TOUCH_PEERS,
# NDET_LL_STORE_LINE in ndet_ll.cuh),
# src/protocol/ndet_plan.c the host ones (NDET_PLAN_GRID_CAPACITY, NDET_PLAN_LL_FILL,
# NDET_PLAN_LL_SMALL_BYTES, NDET_PLAN_LL_WIDE_SMALL); SETTINGS
# (NCCL_DET_*=VALUE) alone make perf-LABEL a script that runs perf-0 with them.
# For example
#   VARIANTS="sleep100:NDET_LL_POLL_SLEEP=100 cap264::NDET_PLAN_GRID_CAPACITY=264u
#             llmax32k:::NCCL_DET_LL_MAX=32K"
# ll_ablate.sh times them after the masks (LABEL must not be a number).
set -eu
build=$(cd "${1:?usage: ll_ablate_build.sh BUILD-DIR [DEST]}" && pwd)
dest=${2:-$build/ablate}
masks=${ABLATE:-0 1 8 16 32}
nvcc=$(sed -n 's/^NVCC = //p' "$build/Makefile")
[ -n "$nvcc" ] || {
	echo "ll_ablate_build.sh: no NVCC in $build/Makefile (a build without CUDA?)" >&2
	exit 2
}
mkdir -p "$dest"
object=kernels/ndet_push_ll_f32.lo
plan=src/protocol/ndet_plan.lo
restore() {
	rm -f "$build/$object" "$build/$plan"
	make -s -C "$build" "$object" "$plan" tools/nccl-det-perf >/dev/null
}
trap restore EXIT
for mask in $masks; do
	rm -f "$build/$object"
	make -s -C "$build" "$object" NVCC="$nvcc -DNDET_LL_ABLATE=$mask" >/dev/null
	make -s -C "$build" tools/nccl-det-perf >/dev/null
	cp "$build/tools/nccl-det-perf" "$dest/perf-$mask"
	echo "built $dest/perf-$mask"
done
defines() { # "A=1,B=2" -> "-DA=1 -DB=2"
	local d out=
	for d in ${1//,/ }; do
		out="$out -D$d"
	done
	echo "$out"
}
for variant in ${VARIANTS:-}; do
	IFS=: read -r label kernel host settings <<<"$variant"
	case $label in
	'' | *[!A-Za-z0-9_-]* | [0-9]*)
		echo "ll_ablate_build.sh: variant label '$label': letters, digits, _ or -, not a number" >&2
		exit 2
		;;
	esac
	if [ -n "$kernel$host" ] && [ -n "$settings" ]; then
		echo "ll_ablate_build.sh: $label: defines or settings, not both" >&2
		exit 2
	fi
	if [ -z "$kernel$host" ]; then
		[ -x "$dest/perf-0" ] || {
			echo "ll_ablate_build.sh: $label runs perf-0 with settings: ABLATE must build mask 0" >&2
			exit 2
		}
		printf '#!/bin/sh\nexec env %s "$(dirname "$0")/perf-0" "$@"\n' "${settings//,/ }" \
			>"$dest/perf-$label"
		chmod +x "$dest/perf-$label"
		echo "made $dest/perf-$label (perf-0 with ${settings:-no settings})"
		continue
	fi
	rm -f "$build/$object" "$build/$plan"
	make -s -C "$build" "$object" NVCC="$nvcc$(defines "$kernel")" >/dev/null
	make -s -C "$build" "$plan" CPPFLAGS="$(defines "$host")" >/dev/null
	make -s -C "$build" tools/nccl-det-perf >/dev/null
	cp "$build/tools/nccl-det-perf" "$dest/perf-$label"
	echo "built $dest/perf-$label (kernel:${kernel:-none} host:${host:-none})"
done
git -C "$build" rev-parse --short HEAD >"$dest/COMMIT" 2>/dev/null || true
