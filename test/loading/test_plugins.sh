#!/bin/sh
# nccl-det as NCCL plugins: libnccl-det.so exports the structs NCCL looks up
# (ncclTunerPlugin_v3/_v4/_v5, ncclNetPlugin_v10/_v11) as global objects of the
# declared sizes, and test_plugin_load drives them through symlinks named as NCCL
# looks for them (libnccl-tuner-det.so, libnccl-net-det.so), loaded RTLD_LOCAL.
. "${NDET_TOP_SRCDIR:-.}/test/support/test_preload_lib.sh"

program="$top_builddir/test/loading/test_plugin_load"
[ -x "$program" ] || fail "$program was not built"

defined_symbols "$shim" >"$scratch/symbols"
for entry in ncclTunerPlugin_v3:32 ncclTunerPlugin_v4:32 ncclTunerPlugin_v5:32 \
	ncclNetPlugin_v10:160 ncclNetPlugin_v11:176; do
	name=${entry%%:*}
	size=${entry#*:}
	grep -q "^$name OBJECT GLOBAL DEFAULT " "$scratch/symbols" ||
		fail "$name is not exported as a global object: $(grep "$name" "$scratch/symbols")"
	readelf --dyn-syms -W "$shim" | awk -v n="$name" -v s="$size" '$8 == n && $3 == s { found = 1 } END { exit !found }' ||
		fail "$name does not have $size bytes"
done
grep -q '^ncclTunerPlugin_v2 ' "$scratch/symbols" && fail "ncclTunerPlugin_v2 must not be exported"

mkdir "$scratch/plugins" || fail "mkdir"
for name in libnccl-tuner-det.so libnccl-net-det.so; do
	ln -s "$(cd "$(dirname "$shim")" && pwd)/libnccl-det.so" "$scratch/plugins/$name" || fail "symlink"
done
: >"$scratch/trace"
env LD_LIBRARY_PATH="$scratch/plugins${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
	FAKE_NCCL_TRACE="$scratch/trace" NCCL_DET_DEBUG_FILE="$scratch/log" "$program" \
	>"$scratch/out" 2>&1 || fail "$(cat "$scratch/out")"
cat "$scratch/out"
grep -q 'WARN' "$scratch/log" 2>/dev/null && fail "unexpected WARN: $(cat "$scratch/log")"
echo "PASS: plugin structs exported and working through NCCL's names; nothing diverted"
