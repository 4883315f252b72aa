#!/bin/sh
# Every path of this tree that .ci/run and the test scripts name (test/*/*.sh,
# test/gpu/*.sh, the fuzz and valgrind runners) exists in the source tree or, for
# what the build makes (.libs libraries, programs, kernel objects), in this build
# tree: a file that moves cannot leave a script pointing at nothing.  A name with
# a glob must match something.  Paths built only in some configurations are listed
# below with the condition that makes them.
. "${NDET_TOP_SRCDIR:-.}/test/support/test_preload_lib.sh"
src=${NDET_TOP_SRCDIR:-.}
build=$top_builddir

# configured CONDITIONAL: did configure turn this automake conditional on?
configured() {
	grep -q "^S\[\"$1_TRUE\"\]=\"\"" "$build/config.status"
}

# required PATH: false for what is built only where the configuration asks for it
# (and for the install-time docdir name, which is no path of the tree).
required() {
	case $1 in
	test/dropin_fake/* | src/dropin/.libs/*) configured NDET_DROPIN ;;
	test/gpu/ndet_*_test) configured HAVE_NCCL_LIB ;;
	kernels/.libs/*all_ranks* | kernels/*all_ranks*.lo) configured NDET_ALL_RANKS_KERNELS ;;
	doc/nccl-det) return 1 ;;
	*) return 0 ;;
	esac
}

scripts=$(cd "$src" && ls .ci/run test/*.sh test/*/*.sh 2>/dev/null)
[ -n "$scripts" ] || fail "no scripts found under $src"
checked=0
missing="$scratch/missing"
: >"$missing"
for script in $scripts; do
	# Paths that start at a top-level folder of the tree, outside comments; names
	# holding a shell expansion are skipped (their parts are checked where set).
	sed -e 's/^[[:space:]]*#.*//' -e 's/[[:space:]]#[[:space:]].*//' "$src/$script" |
		grep -o -E '(^|[^A-Za-z0-9_.$-])(\.ci|src|test|tools|kernels|doc|include|build-aux|m4)/[A-Za-z0-9_./*+${}-]*[A-Za-z0-9_*}]' |
		sed -E -e 's/^[^A-Za-z.]//' -e 's/[}]+$//' | sort -u >"$scratch/paths"
	while read -r path; do
		case $path in
		*'$'* | *'{'*) continue ;;
		esac
		found=
		for root in "$src" "$build"; do
			# shellcheck disable=SC2086 # the glob is intended
			for match in "$root"/$path; do
				[ -e "$match" ] && found=yes && break
			done
			[ -n "$found" ] && break
		done
		if [ -z "$found" ] && required "$path"; then
			echo "$script: $path" >>"$missing"
		fi
		checked=$((checked + 1))
	done <"$scratch/paths"
done
if [ -s "$missing" ]; then
	cat "$missing" >&2
	fail "$(wc -l <"$missing") path(s) named by scripts exist neither in $src nor in $build"
fi
[ "$checked" -ge 50 ] || fail "only $checked paths found in the scripts"
echo "PASS: $checked paths named by $(echo "$scripts" | wc -w) scripts exist"
