#!/bin/sh
# The layering of the host code (doc/layout.md): every project include is
# path-qualified ("common/ndet_log.h", "kernels/ndet_abi.h"), and a file of one
# layer includes only its own layer and the layers below it.  An upward include
# (the protocol reaching into the engine, the engine into the divert layer) fails.
. "${NDET_TOP_SRCDIR:-.}/test/support/test_preload_lib.sh"
src=${NDET_TOP_SRCDIR:-.}

# The host/device ABI the pure layers may use; the launchers are the engine's alone.
abi="kernels/ndet_types.h kernels/ndet_abi.h"

allowed() {
	case $1 in
	common) echo "common $abi" ;;
	reference) echo "reference common $abi" ;;
	protocol) echo "protocol common $abi" ;;
	resolve) echo "resolve common" ;;
	engine) echo "engine protocol common kernels" ;;
	divert) echo "divert protocol resolve common $abi" ;;
	preload) echo "preload divert resolve protocol common $abi" ;;
	dropin) echo "dropin preload divert resolve protocol common $abi" ;;
	*) return 1 ;;
	esac
}

errors="$scratch/errors"
: >"$errors"
checked=0
for file in "$src"/src/*/*.[ch] "$src"/kernels/*.h "$src"/kernels/*.cu "$src"/kernels/*/*.cuh \
	"$src"/tools/*.c "$src"/tools/*/*.[ch] "$src"/test/*/*.[ch]; do
	[ -f "$file" ] || continue
	rel=${file#"$src"/}
	layer=
	case $rel in src/*/*) layer=$(echo "$rel" | cut -d/ -f2) ;; esac
	[ -z "$layer" ] || allowed "$layer" >/dev/null ||
		echo "$rel: a folder of src/ that doc/layout.md does not name" >>"$errors"
	grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$file" |
		sed 's/^\([0-9]*\):[^"]*"\([^"]*\)".*/\1 \2/' >"$scratch/includes"
	while read -r line name; do
		case $name in
		config.h | nccl_det.h) continue ;;
		*/*) ;;
		*) echo "$rel:$line: #include \"$name\" is not path-qualified" >>"$errors"; continue ;;
		esac
		[ -n "$layer" ] || continue
		ok=
		for allow in $(allowed "$layer"); do
			case $name in
			"$allow" | "$allow"/*) ok=yes ;;
			esac
		done
		[ -n "$ok" ] || echo "$rel:$line: layer $layer includes \"$name\"" >>"$errors"
	done <"$scratch/includes"
	checked=$((checked + 1))
done
if [ -s "$errors" ]; then
	cat "$errors" >&2
	fail "$(wc -l <"$errors") include(s) break the layering (doc/layout.md)"
fi
[ "$checked" -ge 100 ] || fail "only $checked files checked under $src"
echo "PASS: $checked files, every project include path-qualified and downward"
