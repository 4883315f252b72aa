#!/bin/sh
# The drop-in libnccl.so.2 exports every name the NCCL it was built against exports
# (nm -D of the configured library, else nccl.h's functions) and every function of NCCL
# 2.21-2.29 that returns ncclResult_t or nothing (src/dropin/nccl-api-names.txt); its
# test twin every name of the fake.  Both: SONAME libnccl.so.2, unversioned functions;
# for each entry point nccl-det interposes, ncclX and pncclX are one address (pnccl
# callers are diverted too); nothing else but nccl-det's own ncclDet* API.
. "${NDET_TOP_SRCDIR:-.}/test/support/test_preload_lib.sh"

check_dropin() { # LIBRARY REFERENCE-LIST WHAT
	library=$1
	[ -f "$library" ] || fail "$library was not built"
	readelf -d "$library" | grep -q 'Library soname: \[libnccl.so.2\]' ||
		fail "$3: SONAME is not libnccl.so.2"
	readelf -S -W "$library" | grep -q '\.gnu\.version_d' && fail "$3: exports must be unversioned"
	defined_symbols "$library" >"$scratch/symbols"
	awk '{ print $1 }' "$scratch/symbols" >"$scratch/names"
	sort -u "$2" >"$scratch/reference"
	comm -23 "$scratch/reference" "$scratch/names" >"$scratch/lacking"
	[ -s "$scratch/lacking" ] && fail "$3 lacks: $(tr '\n' ' ' <"$scratch/lacking")"
	awk '$1 !~ /^(p?nccl|ncclDet)/ { print $1 }' "$scratch/symbols" >"$scratch/foreign"
	[ -s "$scratch/foreign" ] && fail "$3 exports foreign names: $(tr '\n' ' ' <"$scratch/foreign")"
	awk '$2 != "FUNC" || $3 != "GLOBAL" || $4 != "DEFAULT" { print $1 }' "$scratch/symbols" >"$scratch/odd"
	[ -s "$scratch/odd" ] && fail "$3: not global default functions: $(tr '\n' ' ' <"$scratch/odd")"
	for name in $(interposed_names); do
		plain=$(awk -v n="$name" '$1 == n { print $5 }' "$scratch/symbols")
		profiling=$(awk -v n="p$name" '$1 == n { print $5 }' "$scratch/symbols")
		[ -n "$plain" ] && [ "$plain" = "$profiling" ] ||
			fail "$3: $name and p$name are not the same entry point ($plain, $profiling)"
	done
	for name in ncclDetCommQuery ncclDetGetVersion ncclDetGetNcclLibrary ncclDetAllReduce \
		ncclDetReduceScatter ncclDetReduce; do
		grep -q "^$name " "$scratch/symbols" || fail "$3 does not export $name"
	done
	echo "$3: $(wc -l <"$scratch/names") exports, $(wc -l <"$scratch/reference") required"
}

# The configured NCCL, read again here rather than trusting the generated list.
case $NDET_NCCL_EXPORTS_KIND in
library)
	nm -D --defined-only "$NDET_NCCL_EXPORTS_FROM" | awk 'NF == 3 && $3 ~ /^p?nccl/ { print $3 }' \
		>"$scratch/configured"
	[ "$(wc -l <"$scratch/configured")" -gt 80 ] || fail "too few names read from $NDET_NCCL_EXPORTS_FROM"
	;;
*)
	cp "$top_builddir/src/dropin/nccl-exports.txt" "$scratch/configured" || fail "no export list"
	echo "note: no NCCL library was configured; checked against nccl.h's functions"
	;;
esac
# Plus NCCL 2.21-2.29's functions that return ncclResult_t or nothing, read from the
# list here too, so that a program linked against any of them loads.
names_file="${NDET_TOP_SRCDIR:-.}/src/dropin/nccl-api-names.txt"
awk '!/^#/ && NF >= 3 && ($3 == "ncclResult_t" || $3 == "void") { print $1; print "p" $1 }' \
	"$names_file" >"$scratch/known"
[ "$(wc -l <"$scratch/known")" -ge 120 ] || fail "too few names read from $names_file"
for name in ncclCommQueryProperties pncclCommSuspend ncclCommShrink ncclGroupSimulateEnd; do
	grep -q -x "$name" "$scratch/known" || fail "$names_file lacks $name"
done
grep -q -x ncclTeamWorld "$scratch/known" && fail "ncclTeamWorld (returns a struct) is no known name"
cat "$scratch/known" >>"$scratch/configured"
# The generator reads the list the same way, CRLF line ends too, and fails on a line it
# cannot read rather than export fewer names.
generator="${NDET_TOP_SRCDIR:-.}/src/dropin/ndet-dropin-gen.sh"
sh "$generator" known-names "$names_file" | sort >"$scratch/generated" || fail "known-names failed"
sort "$scratch/known" | cmp -s - "$scratch/generated" || fail "known-names differs from the list"
sed 's/$/\r/' "$names_file" >"$scratch/crlf.txt"
[ "$(sh "$generator" known-names "$scratch/crlf.txt" | wc -l)" -eq "$(wc -l <"$scratch/known")" ] ||
	fail "known-names lost names to CRLF line ends"
sed '/^ncclAllReduce /s/ncclResult_t/ncclresult_t/' "$names_file" >"$scratch/typo.txt"
sh "$generator" known-names "$scratch/typo.txt" >/dev/null 2>&1 && fail "known-names took a misspelt type"
check_dropin "$dropin" "$scratch/configured" "drop-in ($NDET_NCCL_EXPORTS_FROM and NCCL 2.21-2.29)"

nm -D --defined-only "$fake_nccl" | awk 'NF == 3 { print $3 }' >"$scratch/fake"
echo ncclTestOnlyMissing >>"$scratch/fake"
check_dropin "$fake_dropin" "$scratch/fake" "test drop-in (fake NCCL)"
echo "PASS: the drop-ins export every name of their NCCL, pncclX = ncclX where interposed"
