#!/bin/bash
# GPU checks of nccl-det's loading modes (one GPU, several processes with per-process
# NCCL_HOSTID; doc/testing.md).  Runs and results: journal/gpu-results.txt.
#
#   test/gpu/loading.sh jax      JAX psum, 2 and 3 processes, drop-in preloaded:
#                                diverted (nccl-det's SETUP log) and bit-exact
#   test/gpu/loading.sh pynccl   the drop-in loaded with ctypes as vLLM does, after
#                                PyTorch loaded its NCCL: one real NCCL, diverted, exact
#   test/gpu/loading.sh torch    PyTorch through nccl-det-run: libnccl-det.so preloaded,
#                                results equal to a plain run
#   test/gpu/loading.sh tuner    NCCL_TUNER_PLUGIN only: the job runs, NCCL's log shows
#                                nccl-det's tuner and tree/simple all-reduces
#   test/gpu/loading.sh conf     the cluster recipe: NCCL_DET_ENABLE from NCCL_CONF_FILE
#   test/gpu/loading.sh torchrun the README's torchrun recipe on every visible GPU (needs
#                                two or more): `nccl-det-run torchrun ...` and a hand-written
#                                LD_PRELOAD give the same bits, diverted, one rank per GPU
#   test/gpu/loading.sh all
#
# BUILD is the build tree (default: ../.. of this script); logs under $OUT.
set -u
tier=${1:-all}
case $tier in
all | conf | jax | pynccl | torch | torchrun | tuner) ;;
*)
	echo "loading.sh: unknown tier '$tier' (all, conf, jax, pynccl, torch, torchrun, tuner)" >&2
	exit 2
	;;
esac
here=$(cd "$(dirname "$0")" && pwd)
BUILD=${BUILD:-$(cd "$here/../.." && pwd)}
OUT=${OUT:-/tmp/ndet-gpu-out}
mkdir -p "$OUT"
preload_lib="$BUILD/src/.libs/libnccl-det.so"
dropin_dir="$BUILD/src/dropin/.libs"
run_tool="$BUILD/tools/nccl-det-run"
export NCCL_SOCKET_IFNAME=lo
fail=0
checks=0
skipped=

# job TAG N CMD...: N processes of CMD on GPU 0 (process 0 first: the JAX coordinator).
job() {
	local tag=$1 n=$2
	shift 2
	local port=$((20000 + RANDOM % 20000)) pids="" r rc=0
	for ((r = 0; r < n; r++)); do
		# GPU 0 only: JAX would give each process every visible GPU (its mesh then
		# has N x GPUs devices, which the scripts' one-device-per-process shapes
		# do not divide: seen on a 2-GPU machine).
		CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} \
			RANK=$r WORLD=$n PORT=$port NCCL_HOSTID=ndet-h$r timeout 150 "$@" \
			>"$OUT/loading-$tag-$r.out" 2>"$OUT/loading-$tag-$r.err" &
		pids="$pids $!"
		[ $r -eq 0 ] && sleep 3
	done
	for p in $pids; do wait "$p" || rc=1; done
	return $rc
}

check() { # MESSAGE COMMAND...
	local message=$1
	shift
	checks=$((checks + 1))
	if "$@"; then echo "PASS $message"; else echo "FAIL $message"; fail=1; fi
}

absent() { # PATTERN FILE...: no line matches
	! grep -q "$@"
}

json_all() { # TAG N PYTHON-EXPRESSION-ON-d
	local tag=$1 n=$2 expr=$3 r
	for ((r = 0; r < n; r++)); do
		grep '^{' "$OUT/loading-$tag-$r.out" | python3 -c "import json,sys; d=json.load(sys.stdin); sys.exit(0 if ($expr) else 1)" || return 1
	done
}

if [ "$tier" = jax ] || [ "$tier" = all ]; then
	for n in 2 3; do
		# XLA preallocates 75% of the GPU per process: n processes share one GPU here.
		check "jax n=$n runs" job jax$n $n env LD_PRELOAD="$dropin_dir/libnccl.so.2" \
			XLA_PYTHON_CLIENT_PREALLOCATE=false \
			LD_LIBRARY_PATH="$dropin_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
			NCCL_DET_DEBUG=INFO NCCL_DET_DEBUG_SUBSYS=INIT,SETUP python3 "$here/jax_psum.py"
		check "jax n=$n bit-exact, drop-in mapped" json_all jax$n $n 'd["bit_exact"] and d["dropin_mapped"]'
		check "jax n=$n diverted" grep -q "all-reduces diverted" "$OUT/loading-jax$n-0.out" "$OUT/loading-jax$n-0.err"
		check "jax n=$n real NCCL found" grep -h "NCCL-DET INFO real NCCL" "$OUT/loading-jax$n-0.out" "$OUT/loading-jax$n-0.err"
	done
fi

if [ "$tier" = pynccl ] || [ "$tier" = all ]; then
	check "pynccl runs" job pynccl 3 env VLLM_NCCL_SO_PATH="$dropin_dir/libnccl.so.2" \
		NCCL_DET_DEBUG=INFO NCCL_DET_DEBUG_SUBSYS=INIT python3 "$here/pynccl_ctypes.py"
	check "pynccl diverted and bit-exact" json_all pynccl 3 'd["bit_exact"] and d["diverted"] == 1'
	# The drop-in and torch's own NCCL: two files, no third.
	check "pynccl one real NCCL" json_all pynccl 3 'len(d["libnccl"]) == 2'
fi

if [ "$tier" = torch ] || [ "$tier" = all ]; then
	# nccl-det-run must give exactly what a hand-written LD_PRELOAD gives (both divert:
	# the bits differ from plain NCCL's by design, so plain NCCL is no reference here).
	check "torch preloaded by hand" job torch-preload 3 env LD_PRELOAD="$preload_lib" \
		python3 "$here/torch_preload.py"
	check "torch via nccl-det-run" job torch-run 3 env NCCL_DET_RUN_PRELOAD_LIB="$preload_lib" \
		NCCL_DET_RUN_DROPIN_DIR="$dropin_dir" NCCL_DET_DEBUG=INFO NCCL_DET_DEBUG_SUBSYS=INIT \
		"$run_tool" python3 "$here/torch_preload.py"
	check "torch via nccl-det-run preloaded" json_all torch-run 3 'd["nccl_det_mapped"]'
	for ((r = 0; r < 3; r++)); do
		a=$(grep '^{' "$OUT/loading-torch-preload-$r.out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["digest"])')
		b=$(grep '^{' "$OUT/loading-torch-run-$r.out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["digest"])')
		check "torch rank $r: nccl-det-run bits == LD_PRELOAD bits" test -n "$a" -a "$a" = "$b"
	done
fi

if [ "$tier" = torchrun ] || [ "$tier" = all ]; then
	gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
	if [ "$gpus" -lt 2 ]; then
		echo "SKIP torchrun: $gpus GPU(s) visible, the recipe needs two or more"
		skipped="$skipped torchrun"
	else
		trun() { # TAG CMD-PREFIX...: torchrun on every GPU, stdout to $OUT/loading-TAG.out
			local tag=$1
			shift
			timeout 200 "$@" torchrun --standalone --nproc-per-node="$gpus" \
				"$here/torch_preload.py" >"$OUT/loading-$tag.out" 2>"$OUT/loading-$tag.err"
		}
		check "torchrun preloaded by hand" trun torchrun-preload env LD_PRELOAD="$preload_lib" \
			NCCL_DET_STATS=1
		check "torchrun via nccl-det-run" trun torchrun-run env NCCL_DET_RUN_PRELOAD_LIB="$preload_lib" \
			NCCL_DET_RUN_DROPIN_DIR="$dropin_dir" NCCL_DET_STATS=1 "$run_tool"
		for tag in torchrun-preload torchrun-run; do
			check "$tag: every rank mapped nccl-det" python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
sys.exit(0 if len(rows) == int(sys.argv[2]) and all(r["nccl_det_mapped"] for r in rows) else 1)' \
				"$OUT/loading-$tag.out" "$gpus"
			# The float all-reduces went through nccl-det (its per-communicator stats).
			check "$tag: calls diverted" grep -q "NCCL-DET STATS.*diverted [1-9]" "$OUT/loading-$tag.err" "$OUT/loading-$tag.out"
		done
		digests() { grep '^{' "$OUT/loading-$1.out" | python3 -c '
import json, sys
print(" ".join(d["digest"] for d in sorted((json.loads(l) for l in sys.stdin), key=lambda d: d["rank"])))'; }
		a=$(digests torchrun-preload)
		b=$(digests torchrun-run)
		check "torchrun: nccl-det-run bits == LD_PRELOAD bits" test -n "$a" -a "$a" = "$b"
	fi
fi

if [ "$tier" = tuner ] || [ "$tier" = all ]; then
	mkdir -p "$OUT/plugins"
	ln -sf "$preload_lib" "$OUT/plugins/libnccl-tuner-det.so"
	check "tuner-only job runs" job tuner 3 env NCCL_TUNER_PLUGIN="$OUT/plugins/libnccl-tuner-det.so" \
		NCCL_DET_STATS=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING python3 "$here/torch_preload.py"
	check "tuner announced in NCCL's log" grep -q "NCCL-DET tuner: .*pinned to algorithm tree, protocol simple, channels 1" \
		"$OUT/loading-tuner-0.out" "$OUT/loading-tuner-0.err"
	# The plugin maps libnccl-det.so but interposes nothing: NCCL runs every all-reduce,
	# with the pinned algorithm and protocol.
	check "tuner: NCCL ran the all-reduces, tree/simple" grep -q \
		"AllReduce: .* Algo TREE proto SIMPLE" "$OUT/loading-tuner-0.out" "$OUT/loading-tuner-0.err"
	check "tuner: nothing diverted (no nccl-det STATS line)" absent "NCCL-DET STATS" \
		"$OUT"/loading-tuner-0.*
fi

if [ "$tier" = conf ] || [ "$tier" = all ]; then
	printf 'NCCL_DET_ENABLE=0\n' >"$OUT/det-off.conf"
	check "conf: disabled by NCCL_CONF_FILE" job conf 3 env NCCL_CONF_FILE="$OUT/det-off.conf" \
		LD_PRELOAD="$preload_lib" NCCL_DET_DEBUG=INFO NCCL_DET_DEBUG_SUBSYS=INIT,ENV python3 "$here/torch_preload.py"
	check "conf: the setting came from the file" grep -q "NCCL_DET_ENABLE=0 ($OUT/det-off.conf)" \
		"$OUT/loading-conf-0.out" "$OUT/loading-conf-0.err"
	check "conf: pass-through" grep -q "version not asked (NCCL_DET_ENABLE=0)" \
		"$OUT/loading-conf-0.out" "$OUT/loading-conf-0.err"
fi

# A tier of which nothing could run here is a SKIP (exit 77), not a PASS.
if [ $fail -eq 0 ] && [ $checks -eq 0 ] && [ -n "$skipped" ]; then
	echo "SUMMARY loading $tier: SKIP (not run here:$skipped)"
	exit 77
fi
echo "SUMMARY loading $tier: $([ $fail -eq 0 ] && echo PASS || echo FAIL), $checks checks${skipped:+, not run here:$skipped}"
exit $fail
