#!/bin/sh
# Runs the engine's loopback GPU test (3 ranks as threads on GPU 0) when this machine
# has a GPU; exits 77 (SKIP) otherwise, so CPU-only CI reports it as skipped.
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
	echo "no GPU visible: skipping the GPU loopback test"
	exit 77
fi
program="${NDET_TOP_BUILDDIR:-.}/test/gpu/ndet_gpu_test"
if [ ! -x "$program" ]; then
	echo "$program was not built (configure found no NCCL library): skipping"
	exit 77
fi
exec "$program" loopback 3 quick
