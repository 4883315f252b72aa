#!/bin/sh
# libnccl-det.so exports exactly the NCCL entry points it interposes (and its own
# ncclDet* names and the plugin structs, see test_plugins.sh), unversioned, and never
# pnccl*: those must keep reaching NCCL.
. "${NDET_TOP_SRCDIR:-.}/test/support/test_preload_lib.sh"

expected="ncclAllReduce ncclCommAbort ncclCommDestroy ncclCommFinalize ncclCommGetAsyncError
ncclCommInitAll ncclCommInitRank ncclCommInitRankConfig ncclCommInitRankScalable
ncclCommRevoke ncclCommShrink ncclCommSplit ncclGroupEnd ncclGroupSimulateEnd
ncclGroupStart ncclRedOpCreatePreMulSum ncclRedOpDestroy ncclReduce ncclReduceScatter"
printf '%s\n' $expected | sort >"$scratch/expected"

# Defined dynamic symbols: "Num: Value Size Type Bind Vis Ndx Name".
readelf --dyn-syms -W "$shim" >"$scratch/dynsyms" || fail "readelf failed"
awk '$1 ~ /^[0-9]+:$/ && $7 != "UND" && $4 != "SECTION" && $4 != "FILE" && NF >= 8 && $8 != "" { print $8 }' \
	"$scratch/dynsyms" | grep -v -E '^(ncclDet|ncclTunerPlugin_v|ncclNetPlugin_v)' | sort >"$scratch/exported"
cmp -s "$scratch/expected" "$scratch/exported" || {
	diff -u "$scratch/expected" "$scratch/exported" >&2
	fail "libnccl-det.so exports differ from the interposed entry points"
}
grep -q ' pnccl' "$scratch/dynsyms" && fail "libnccl-det.so must not define or need pnccl*"
grep -q '@' "$scratch/exported" && fail "exports must be unversioned"
awk '$1 ~ /^[0-9]+:$/ && $8 ~ /^nccl/ && $8 !~ /Plugin_v[0-9]+$/ && ($5 != "GLOBAL" || $6 != "DEFAULT" || $4 != "FUNC") { exit 1 }' \
	"$scratch/dynsyms" || fail "an interposer is not a global default-visibility function"
echo "PASS: $(wc -l <"$scratch/exported") interposers exported, nothing else"
