#!/bin/sh
# nccl-det-info and nccl-det-run, from the build tree:
# - both answer --help and --version;
# - nccl-det-info prints every setting with its source, the loading mode (none,
#   preload, drop-in, plugins only), the real NCCL and its version, and the GPU
#   section ("no GPU" without one), exit status 0;
# - nccl-det-run detects the framework (a program linking libnccl.so.2; Python with
#   jax, vllm or torch, also through a #! entry point) and sets the preload, the
#   drop-in path, NCCL_DET_NCCL_LIBRARY, NCCL_DET_ENABLE and NCCL_DET_EXPECT; and its
#   command runs with them, diverted (preload) or passed through (drop-in).
. "${NDET_TOP_SRCDIR:-.}/test/support/test_preload_lib.sh"

info="$top_builddir/tools/nccl-det-info"
run_tool="$top_builddir/tools/nccl-det-run"
script="$top_builddir/test/loading/test_forward_script"
for tool in "$info" "$run_tool" "$script"; do
	[ -x "$tool" ] || fail "$tool was not built"
done
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export ASAN_OPTIONS
unset NCCL_DET_NCCL_LIBRARY NCCL_DET_ENABLE NCCL_DET_EXPECT NCCL_TUNER_PLUGIN NCCL_NET_PLUGIN \
	VLLM_NCCL_SO_PATH SGLANG_NCCL_SO_PATH NCCL_CONF_FILE
HOME=$scratch
export HOME

for tool in "$info" "$run_tool"; do
	"$tool" --help >"$scratch/help" 2>&1 || fail "$tool --help failed"
	grep -q '^Usage: nccl-det-' "$scratch/help" || fail "$tool --help: $(cat "$scratch/help")"
	"$tool" --version | grep -q "$(basename "$tool") [0-9]" || fail "$tool --version"
done
"$info" --bogus >/dev/null 2>&1 && fail "nccl-det-info accepted --bogus"

# A drop-in directory: the test drop-in (the fake's exports) as libnccl.so.2.
mkdir -p "$scratch/dropin" || fail "mkdir"
cp "$fake_dropin" "$scratch/dropin/libnccl.so.2" || fail "copy"

# ---- nccl-det-info
# The IPC probe's second process, given nothing to probe, fails cleanly.
"$info" --ipc-probe-child </dev/null >"$scratch/probe" 2>&1
[ $? -eq 2 ] || fail "nccl-det-info --ipc-probe-child without input: $(cat "$scratch/probe")"
"$info" >"$scratch/info" 2>&1 || fail "nccl-det-info failed: $(cat "$scratch/info")"
for line in 'NCCL_DET_ENABLE +1 +default' 'NCCL_DET_TUNER_ALGO +tree +default' '^== GPUs' \
	'mode in effect ..... (none|plugins)' '^  (no GPU|GPU 0: )'; do
	grep -q -E "$line" "$scratch/info" || fail "nccl-det-info: no line like '$line': $(cat "$scratch/info")"
done

NCCL_DET_POOL_SIZE=64M NCCL_TUNER_PLUGIN=det "$info" --no-gpu >"$scratch/info_plugins" 2>&1 ||
	fail "nccl-det-info (plugins) failed"
grep -q -E 'NCCL_DET_POOL_SIZE +64MiB +environment' "$scratch/info_plugins" ||
	fail "nccl-det-info: the environment's value: $(cat "$scratch/info_plugins")"
grep -q "NCCL_TUNER_PLUGIN .. det  (nccl-det's tuner)" "$scratch/info_plugins" ||
	fail "nccl-det-info: tuner plugin: $(cat "$scratch/info_plugins")"
grep -q '^== GPUs' "$scratch/info_plugins" && fail "nccl-det-info --no-gpu printed the GPUs"

env LD_LIBRARY_PATH="$scratch/dropin" NCCL_DET_NCCL_LIBRARY="$fake_nccl" \
	"$info" --no-gpu >"$scratch/info_dropin" 2>&1 ||
	fail "nccl-det-info (drop-in) failed: $(cat "$scratch/info_dropin")"
for line in "libnccl.so.2 ....... $scratch/dropin/libnccl.so.2: the nccl-det drop-in" \
	"mode in effect ..... drop-in (by the loader's search path)" \
	"real NCCL .......... $fake_nccl" "found by ........... NCCL_DET_NCCL_LIBRARY" \
	"NCCL version ....... 2.28.9 (22809)"; do
	grep -q -F "$line" "$scratch/info_dropin" || fail "nccl-det-info (drop-in): no '$line': $(cat "$scratch/info_dropin")"
done
# The functions the drop-in exports and the real NCCL lacks: the one the fake lacks.
grep -q -E "drop-in exports \.+ [0-9]+ NCCL functions, 1 not in this NCCL \(a call returns ncclInvalidUsage\): ncclTestOnlyMissing$" \
	"$scratch/info_dropin" || fail "nccl-det-info (drop-in): the missing function: $(cat "$scratch/info_dropin")"
# The production drop-in (NCCL 2.21-2.29's functions) in front of the fake: as many
# missing as its export list has functions the fake lacks.
mkdir -p "$scratch/dropin_prod" && cp "$dropin" "$scratch/dropin_prod/libnccl.so.2" || fail "copy"
env LD_LIBRARY_PATH="$scratch/dropin_prod" NCCL_DET_NCCL_LIBRARY="$fake_nccl" \
	"$info" --no-gpu >"$scratch/info_prod" 2>&1 ||
	fail "nccl-det-info (production drop-in) failed: $(cat "$scratch/info_prod")"
nm -D --defined-only "$fake_nccl" | awk 'NF == 3 { print $3 }' | LC_ALL=C sort -u >"$scratch/fake_names"
grep -v '^p' "$top_builddir/src/dropin/nccl-exports.txt" | LC_ALL=C sort -u >"$scratch/prod_names"
expected_total=$(wc -l <"$scratch/prod_names")
expected_missing=$(LC_ALL=C comm -23 "$scratch/prod_names" "$scratch/fake_names" | wc -l)
[ "$expected_missing" -ge 16 ] || fail "the production drop-in lacks NCCL 2.29's functions ($expected_missing missing)"
first_missing=$(LC_ALL=C comm -23 "$scratch/prod_names" "$scratch/fake_names" | head -6 | tr '\n' ' ')
grep -q -F "drop-in exports .... $expected_total NCCL functions, $expected_missing not in this NCCL (a call returns ncclInvalidUsage): ${first_missing}..." \
	"$scratch/info_prod" ||
	fail "nccl-det-info (production drop-in): not $expected_total / $expected_missing / $first_missing: $(grep 'drop-in exports' "$scratch/info_prod")"

NCCL_DET_NCCL_LIBRARY="$fake_nccl" LD_PRELOAD="$fake_shim_preload" "$info" --no-gpu \
	>"$scratch/info_preload" 2>&1 || fail "nccl-det-info (preload) failed: $(cat "$scratch/info_preload")"
for line in "preloaded nccl-det . $fake_shim (libnccl-det.so)" "mode in effect ..... LD_PRELOAD" \
	"real NCCL .......... $fake_nccl" "nccl-det version ... 0.1.0"; do
	grep -q -F "$line" "$scratch/info_preload" || fail "nccl-det-info (preload): no '$line': $(cat "$scratch/info_preload")"
done

# ---- nccl-det-info: user settings by default, --all, the build, --check, plugins
grep -q '^NCCL_DET_TEST_FAIL' "$scratch/info" && fail "nccl-det-info lists a test-only setting by default"
grep -q -- '--all lists them' "$scratch/info" || fail "nccl-det-info does not say what --all adds"
"$info" --no-gpu --all | grep -q '^NCCL_DET_TEST_FAIL' || fail "nccl-det-info --all lacks NCCL_DET_TEST_FAIL"
NCCL_DET_TEST_FAIL=probe "$info" --no-gpu 2>/dev/null | grep -q -E '^NCCL_DET_TEST_FAIL +probe +environment' ||
	fail "a test-only setting that is set is not shown"
grep -q -E '^  GPU code \.+ -' "$scratch/info" || fail "nccl-det-info: no build section"
grep -q -E '^  CUDA runtime \.+ [0-9]+\.[0-9]+, linked statically: needs an NVIDIA driver >= ' \
	"$scratch/info" || fail "nccl-det-info: no minimum driver"
"$info" --no-gpu --check >"$scratch/check" 2>&1
[ $? -eq 1 ] || fail "--check without nccl-det: exit status not 1"
grep -q '^check: nothing would be diverted: none' "$scratch/check" || fail "--check: $(cat "$scratch/check")"
NCCL_DET_NCCL_LIBRARY="$fake_nccl" LD_PRELOAD="$fake_shim_preload" "$info" --no-gpu --check \
	>"$scratch/check" 2>&1 || fail "--check with the preload: $(tail -3 "$scratch/check")"
grep -q '^check: eligible calls would be diverted' "$scratch/check" || fail "--check: $(cat "$scratch/check")"
NCCL_DET_ENABLE=0 NCCL_DET_NCCL_LIBRARY="$fake_nccl" LD_PRELOAD="$fake_shim_preload" "$info" \
	--no-gpu --check >"$scratch/check" 2>&1 && fail "--check with NCCL_DET_ENABLE=0 passed"
grep -q 'NCCL_DET_ENABLE=0' "$scratch/check" || fail "--check, disabled: $(cat "$scratch/check")"
# A plugin NCCL cannot load is no mode; one it can is.
NCCL_TUNER_PLUGIN=det LD_LIBRARY_PATH=/nonexistent "$info" --no-gpu >"$scratch/plugin" 2>&1 ||
	fail "nccl-det-info (unloadable plugin)"
grep -q 'tuner plugin ...... libnccl-tuner-det.so cannot be loaded' "$scratch/plugin" ||
	fail "unloadable plugin: $(cat "$scratch/plugin")"
grep -q 'mode in effect ..... none: the plugin variables name nccl-det, but NCCL cannot load it' \
	"$scratch/plugin" || fail "unloadable plugin: $(cat "$scratch/plugin")"
mkdir -p "$scratch/plugins" && cp "$shim" "$scratch/plugins/libnccl-tuner-det.so" || fail "copy"
NCCL_TUNER_PLUGIN=det LD_LIBRARY_PATH="$scratch/plugins" "$info" --no-gpu >"$scratch/plugin" 2>&1 ||
	fail "nccl-det-info (plugin)"
grep -q "tuner plugin ...... loads $scratch/plugins/libnccl-tuner-det.so" "$scratch/plugin" ||
	fail "loadable plugin: $(cat "$scratch/plugin")"
grep -q 'mode in effect ..... plugins only' "$scratch/plugin" || fail "plugin: $(cat "$scratch/plugin")"
echo "PASS: nccl-det-info: settings, build, --check, plugin files"

# ---- nccl-det-run: where it finds the libraries
# In the build tree, from its own location (no make install needed).
"$run_tool" --print-env true >"$scratch/where" || fail "nccl-det-run --print-env true failed"
built=$(cd "$top_builddir/src/.libs" && pwd)/libnccl-det.so
grep -q -x -F "LD_PRELOAD=$built" "$scratch/where" || fail "build tree: $(cat "$scratch/where")"
# Moved with its prefix: ../lib beside the script.
mkdir -p "$scratch/prefix/bin" "$scratch/prefix/lib/nccl-det" || fail "mkdir"
cp "$run_tool" "$scratch/prefix/bin/nccl-det-run" && cp "$shim" "$scratch/prefix/lib/" ||
	fail "copy"
"$scratch/prefix/bin/nccl-det-run" --print-env true >"$scratch/where" || fail "moved prefix"
grep -q -x -F "LD_PRELOAD=$(cd "$scratch/prefix/lib" && pwd)/libnccl-det.so" "$scratch/where" ||
	fail "moved prefix: $(cat "$scratch/where")"
# The overrides, under their names and their former ones.
NCCL_DET_RUN_PRELOAD_LIB="$fake_shim" "$run_tool" --print-env true >"$scratch/where" ||
	fail "NCCL_DET_RUN_PRELOAD_LIB"
grep -q -x -F "LD_PRELOAD=$fake_shim" "$scratch/where" || fail "override: $(cat "$scratch/where")"
NDET_RUN_PRELOAD_LIB="$fake_shim" "$run_tool" --print-env true >"$scratch/where" ||
	fail "NDET_RUN_PRELOAD_LIB"
grep -q -x -F "LD_PRELOAD=$fake_shim" "$scratch/where" || fail "old name: $(cat "$scratch/where")"
# The mode it chose, on stderr, where NCCL's VERSION level is asked for.
NCCL_DEBUG=VERSION "$run_tool" --print-env true 2>"$scratch/version" >/dev/null ||
	fail "NCCL_DEBUG=VERSION"
grep -q "^nccl-det-run $PACKAGE_VERSION: preload for true" "$scratch/version" ||
	fail "no mode line: $(cat "$scratch/version")"
"$run_tool" --print-env true 2>"$scratch/version" >/dev/null || fail "quiet run"
[ -s "$scratch/version" ] && fail "a mode line without a debug level: $(cat "$scratch/version")"
echo "PASS: nccl-det-run finds its libraries (build tree, moved prefix, overrides)"

# ---- nccl-det-run: detection and the environment it sets
export NCCL_DET_RUN_PRELOAD_LIB="$fake_shim" NCCL_DET_RUN_DROPIN_DIR="$scratch/dropin"
"$run_tool" --print-env "$script" >"$scratch/linked" || fail "nccl-det-run --print-env failed"
for line in framework=linked mode=preload "LD_PRELOAD=$fake_shim" "NCCL_DET_NCCL_LIBRARY=$fake_nccl" \
	NCCL_DET_ENABLE=1 "NCCL_DET_EXPECT=$PACKAGE_VERSION:1"; do
	grep -q -x -F "$line" "$scratch/linked" || fail "linked program: no '$line': $(cat "$scratch/linked")"
done

# NCCL_DET_ENABLE from the user's conf file, exported for every rank.
printf 'NCCL_DET_ENABLE = 0\n' >"$scratch/nccl.conf"
NCCL_CONF_FILE="$scratch/nccl.conf" "$run_tool" --print-env "$script" >"$scratch/conf" ||
	fail "nccl-det-run (conf) failed"
grep -q -x NCCL_DET_ENABLE=0 "$scratch/conf" || fail "conf: $(cat "$scratch/conf")"
grep -q -x "NCCL_DET_EXPECT=$PACKAGE_VERSION:0" "$scratch/conf" || fail "conf: $(cat "$scratch/conf")"
# A bad value is judged by the library's parser (nccl-det-info --get): one WARN, and
# the default, as every rank would do; never a refusal of its own.
NCCL_DET_ENABLE=maybe "$run_tool" --print-env "$script" >"$scratch/maybe" 2>"$scratch/maybe.err" ||
	fail "NCCL_DET_ENABLE=maybe refused: $(cat "$scratch/maybe.err")"
grep -q -x NCCL_DET_ENABLE=1 "$scratch/maybe" || fail "maybe: $(cat "$scratch/maybe")"
grep -q 'NCCL_DET_ENABLE="maybe" (from environment) ignored: not a boolean' "$scratch/maybe.err" ||
	fail "maybe: no WARN: $(cat "$scratch/maybe.err")"
"$info" --get NCCL_DET_POOL_SIZE | grep -q -x 96MiB || fail "nccl-det-info --get NCCL_DET_POOL_SIZE"
"$info" --get NCCL_DET_BOGUS >/dev/null 2>&1
[ $? -eq 2 ] || fail "nccl-det-info --get of no setting: exit status not 2"
"$run_tool" --mode=bogus true >/dev/null 2>&1 && fail "--mode=bogus accepted"

if command -v python3 >/dev/null 2>&1; then
	# Fake Python packages: find_spec sees them, nothing is imported.
	mkdir -p "$scratch/py/jax" "$scratch/py/torch" "$scratch/py/nvidia/nccl/lib" || fail "mkdir"
	: >"$scratch/py/jax/__init__.py"
	: >"$scratch/py/torch/__init__.py"
	cp "$fake_nccl" "$scratch/py/nvidia/nccl/lib/libnccl.so.2" || fail "copy"
	wheel=$(cd "$scratch/py/nvidia/nccl/lib" && pwd -P)/libnccl.so.2
	PYTHONPATH="$scratch/py" "$run_tool" --print-env python3 -c pass >"$scratch/jax" ||
		fail "nccl-det-run (jax) failed"
	for line in framework=jax mode=dropin "NCCL_DET_NCCL_LIBRARY=$wheel" \
		"VLLM_NCCL_SO_PATH=$scratch/dropin/libnccl.so.2" "LD_PRELOAD=$scratch/dropin/libnccl.so.2"; do
		grep -q -x -F "$line" "$scratch/jax" || fail "jax: no '$line': $(cat "$scratch/jax")"
	done
	grep -q "^LD_LIBRARY_PATH=$scratch/dropin" "$scratch/jax" || fail "jax: $(cat "$scratch/jax")"

	# Behind a launcher: the program it starts decides (srun's options, counts and
	# NAME=VALUE pairs passed over).
	mkdir -p "$scratch/launchers" || fail "mkdir"
	for launcher in srun mpirun; do
		printf '#!/bin/sh\nexec "$@"\n' >"$scratch/launchers/$launcher"
		chmod +x "$scratch/launchers/$launcher"
	done
	PATH="$scratch/launchers:$PATH" PYTHONPATH="$scratch/py" "$run_tool" --print-env \
		srun -N 2 --ntasks-per-node 4 python3 -c pass >"$scratch/srun" || fail "srun"
	for line in framework=jax mode=dropin launcher=srun program=python3; do
		grep -q -x -F "$line" "$scratch/srun" || fail "srun: no '$line': $(cat "$scratch/srun")"
	done
	PATH="$scratch/launchers:$PATH" "$run_tool" --print-env mpirun -np 8 -x A=1 "$script" \
		>"$scratch/mpirun" || fail "mpirun"
	for line in framework=linked mode=preload launcher=mpirun "program=$script"; do
		grep -q -x -F "$line" "$scratch/mpirun" || fail "mpirun: no '$line': $(cat "$scratch/mpirun")"
	done
	PATH="$scratch/launchers:$PATH" "$run_tool" --print-env srun -n 2 >/dev/null 2>&1 &&
		fail "a launcher with no program was accepted"
	echo "PASS: nccl-det-run looks through srun and mpirun"

	# An entry point with a #! line (torchrun), torch only: the preload.
	rm -r "$scratch/py/jax"
	printf '#!/usr/bin/env python3\nprint("hello")\n' >"$scratch/torchrun"
	chmod +x "$scratch/torchrun"
	PYTHONPATH="$scratch/py" "$run_tool" --print-env "$scratch/torchrun" >"$scratch/torch" ||
		fail "nccl-det-run (torch) failed"
	for line in framework=torch mode=preload "LD_PRELOAD=$fake_shim" "NCCL_DET_NCCL_LIBRARY=$wheel"; do
		grep -q -x -F "$line" "$scratch/torch" || fail "torch: no '$line': $(cat "$scratch/torch")"
	done
	# vLLM's own variable names the real NCCL when no wheel is found.
	rm -r "$scratch/py/nvidia"
	mkdir -p "$scratch/py/vllm" && : >"$scratch/py/vllm/__init__.py"
	PYTHONPATH="$scratch/py" VLLM_NCCL_SO_PATH=/opt/nccl/libnccl.so.2 "$run_tool" --print-env \
		python3 -c pass >"$scratch/vllm" || fail "nccl-det-run (vllm) failed"
	for line in framework=vllm mode=dropin NCCL_DET_NCCL_LIBRARY=/opt/nccl/libnccl.so.2 \
		"VLLM_NCCL_SO_PATH=$scratch/dropin/libnccl.so.2" "SGLANG_NCCL_SO_PATH=$scratch/dropin/libnccl.so.2"; do
		grep -q -x -F "$line" "$scratch/vllm" || fail "vllm: no '$line': $(cat "$scratch/vllm")"
	done
else
	echo "note: no python3: the Python detection is not tested"
fi

# ---- nccl-det-run: the command runs with it.  In a sanitizer build the runtime must
# come first in LD_PRELOAD, and a shell cannot always run with it preloaded: there the
# environment nccl-det-run prints is applied to the command, runtime first.
run_script() { # NAME nccl-det-run-ARGS...
	name=$1
	shift
	rm -f "$scratch/$name.trace"
	if [ -z "$sanitizer_runtime" ]; then
		env FAKE_NCCL_TRACE="$scratch/$name.trace" NCCL_DET_DEBUG=INFO NCCL_DET_DEBUG_SUBSYS=INIT \
			NCCL_DET_DEBUG_FILE="$scratch/$name.log" \
			"$run_tool" "$@" "$script" >"$scratch/$name.out" 2>"$scratch/$name.err" ||
			fail "$name: $(cat "$scratch/$name.err")"
		return
	fi
	"$run_tool" --print-env "$@" "$script" >"$scratch/$name.env" || fail "$name: --print-env"
	(
		while IFS= read -r assignment; do
			case $assignment in
			framework=* | mode=*) ;;
			LD_PRELOAD=*) export LD_PRELOAD="$sanitizer_runtime ${assignment#LD_PRELOAD=}" ;;
			*=*) export "${assignment?}" ;;
			esac
		done <"$scratch/$name.env"
		FAKE_NCCL_TRACE="$scratch/$name.trace" NCCL_DET_DEBUG=INFO NCCL_DET_DEBUG_SUBSYS=INIT \
			NCCL_DET_DEBUG_FILE="$scratch/$name.log" exec "$script"
	) >"$scratch/$name.out" 2>"$scratch/$name.err" || fail "$name: $(cat "$scratch/$name.err")"
}
rm -f "$scratch/plain.trace"
FAKE_NCCL_TRACE="$scratch/plain.trace" "$script" >"$scratch/plain.out" 2>/dev/null || fail "plain run"
NCCL_DET_ENABLE=0 run_script dropin --mode=dropin
cmp -s "$scratch/plain.trace" "$scratch/dropin.trace" || fail "drop-in through nccl-det-run: a different trace"
grep -q "real NCCL $fake_nccl (found by NCCL_DET_NCCL_LIBRARY" "$scratch/dropin.log" ||
	fail "drop-in through nccl-det-run: $(cat "$scratch/dropin.log")"
run_script preload
cmp -s "$scratch/plain.out" "$scratch/preload.out" || fail "preload through nccl-det-run: different results"
cmp -s "$scratch/plain.trace" "$scratch/preload.trace" && fail "preload through nccl-det-run: nothing diverted"
grep -q 'WARN.*NCCL_DET_EXPECT' "$scratch/preload.log" && fail "preload: $(cat "$scratch/preload.log")"
# A process that got another NCCL_DET_ENABLE than the launch says so.
env NCCL_DET_EXPECT="$PACKAGE_VERSION:0" NCCL_DET_ENABLE=1 NCCL_DET_DEBUG_FILE="$scratch/mismatch.log" \
	FAKE_NCCL_TRACE="$scratch/mismatch.trace" LD_PRELOAD="$fake_shim_preload" "$script" >/dev/null 2>&1 ||
	fail "mismatch run failed"
grep -q 'WARN.*NCCL_DET_ENABLE is 1 in this process but was 0' "$scratch/mismatch.log" ||
	fail "no WARN for a changed NCCL_DET_ENABLE: $(cat "$scratch/mismatch.log")"
# ---- nccl-det-perf --coll (the benchmark itself needs a GPU)
perf="$top_builddir/tools/nccl-det-perf"
"$perf" --coll bogus >/dev/null 2>&1
[ $? -eq 2 ] || fail "nccl-det-perf accepted --coll bogus"
"$perf" -h | grep -q -- '--coll C *allreduce (default), reducescatter or reduce ' || fail "nccl-det-perf -h lacks --coll"
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -eq 0 ]; then
	"$perf" --coll reducescatter -e 1M >"$scratch/perf" 2>&1 || fail "nccl-det-perf --coll reducescatter: $(cat "$scratch/perf")"
fi
echo "PASS: nccl-det-info, nccl-det-run and nccl-det-perf's options"
