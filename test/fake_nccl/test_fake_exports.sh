#!/bin/sh
# The fake libnccl.so.2 has NCCL's export shape, which is what the shim is tested
# against: SONAME libnccl.so.2; every nccl.h function as a WEAK ncclX plus a GLOBAL
# (strong) pncclX at the same address; nothing else exported; no symbol versions;
# and its own calls to ncclBroadcast, ncclMemAlloc and ncclMemFree go through the
# PLT (JUMP_SLOT relocations), so an interposer can see them.
top_builddir=${NDET_TOP_BUILDDIR:-.}
fake="$top_builddir/test/fake_nccl/.libs/libnccl.so.2"
fail() {
	echo "FAIL: $*" >&2
	exit 1
}
[ -f "$fake" ] || fail "$fake was not built"
scratch=$(mktemp -d "${TMPDIR:-/tmp}/ndet-test.XXXXXX") || exit 1
trap 'rm -rf "$scratch"' EXIT

readelf -d "$fake" | grep -q 'Library soname: \[libnccl.so.2\]' || fail "SONAME is not libnccl.so.2"
readelf -S -W "$fake" | grep -q '\.gnu\.version_d' && fail "exports must be unversioned"

readelf --dyn-syms -W "$fake" |
	awk '$1 ~ /^[0-9]+:$/ && $7 != "UND" && $4 == "FUNC" { print $8, $5, $6, $2 }' |
	sort >"$scratch/symbols"
# 41 functions of nccl.h 2.28, two names each.
[ "$(wc -l <"$scratch/symbols")" -eq 82 ] || fail "expected 82 function exports: $(cat "$scratch/symbols")"
awk '
	$1 ~ /^nccl/ { if ($2 != "WEAK" || $3 != "DEFAULT") bad = bad " " $1; public[$1] = $4 }
	$1 ~ /^pnccl/ { if ($2 != "GLOBAL" || $3 != "DEFAULT") bad = bad " " $1; alias[substr($1, 2)] = $4 }
	$1 !~ /^p?nccl/ { bad = bad " " $1 }
	END {
		for (name in public) if (alias[name] != public[name]) bad = bad " " name "(alias)"
		for (name in alias) if (!(name in public)) bad = bad " " name "(no public name)"
		if (bad != "") { print bad; exit 1 }
	}' "$scratch/symbols" >"$scratch/bad" || fail "wrong export shape:$(cat "$scratch/bad")"

readelf -r -W "$fake" >"$scratch/relocations"
for self_call in ncclBroadcast ncclMemAlloc ncclMemFree; do
	grep -q "JUMP_SLO.* $self_call + 0" "$scratch/relocations" ||
		fail "the fake does not call $self_call through the PLT"
done
echo "PASS: NCCL export shape (82 symbols, weak nccl*, strong pnccl*, PLT self-calls)"
