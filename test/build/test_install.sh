#!/bin/sh
# make install into a scratch DESTDIR, then the installed layout (test/build/installcheck.sh),
# no libtool archive among it, pkg-config's flags compiling a program that includes
# nccl_det.h, and make uninstall leaving no file behind.
. "${NDET_TOP_SRCDIR:-.}/test/support/test_preload_lib.sh"
command -v pkg-config >/dev/null 2>&1 || { echo "SKIP: no pkg-config"; exit 77; }
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export ASAN_OPTIONS
root="$scratch/root"
make=${MAKE:-make}
"$make" -s -C "$top_builddir" install DESTDIR="$root" >"$scratch/install.log" 2>&1 ||
	fail "make install failed: $(tail -20 "$scratch/install.log")"
prefix=$(sed -n 's/^prefix=//p' "$top_builddir/nccl-det.pc")
libdir=$(sed -n 's/^libdir=//p' "$top_builddir/nccl-det.pc" | sed "s|\${exec_prefix}|$prefix|")
libdir=$(echo "$libdir" | sed "s|\${prefix}|$prefix|")
[ -d "$root$libdir" ] || fail "no $root$libdir after make install"

found=$(find "$root" -name '*.la')
[ -z "$found" ] || fail "libtool archives installed: $found"
echo "PASS: no .la installed"

# The documentation, the man pages, the sample conf file (every user setting at its
# default, commented out; no test-only one).
docdir="$root$prefix/share/doc/nccl-det"
for f in README contract.md loading.md settings.md install.md testing.md kernels.md \
	nccl.conf.example; do
	[ -s "$docdir/$f" ] || fail "$docdir/$f is not installed"
done
for page in man1/nccl-det-run.1 man1/nccl-det-info.1 man1/nccl-det-perf.1 man7/nccl-det.7; do
	[ -s "$root$prefix/share/man/$page" ] || fail "man page $page is not installed"
done
grep -q -x '#NCCL_DET_ENABLE=1' "$docdir/nccl.conf.example" || fail "nccl.conf.example: no ENABLE"
grep -q -x '#NCCL_DET_POOL_SIZE=96MiB' "$docdir/nccl.conf.example" || fail "nccl.conf.example: pool"
grep -q 'NCCL_DET_TEST_FAIL' "$docdir/nccl.conf.example" && fail "nccl.conf.example lists a test-only setting"
# Uncommented, it is a conf file nccl-det reads without a WARN.
sed 's/^#NCCL_DET_/NCCL_DET_/' "$docdir/nccl.conf.example" >"$scratch/sample.conf"
env NCCL_CONF_FILE="$scratch/sample.conf" NCCL_DET_DEBUG_FILE="$scratch/sample.log" \
	"$top_builddir/tools/nccl-det-info" --no-gpu >"$scratch/sample.out" 2>&1 ||
	fail "nccl-det-info with the sample conf failed"
grep -q "NCCL-DET WARN" "$scratch/sample.log" "$scratch/sample.out" 2>/dev/null &&
	fail "the sample conf gives warnings: $(cat "$scratch/sample.log" "$scratch/sample.out")"
grep -q -E "NCCL_DET_POOL_SIZE +96MiB +$scratch/sample.conf" "$scratch/sample.out" ||
	fail "the sample conf is not read: $(grep POOL_SIZE "$scratch/sample.out")"
echo "PASS: docs, man pages and a sample conf that reads without a warning are installed"

sh "$NDET_TOP_SRCDIR/test/build/installcheck.sh" "$root$libdir" "$root$prefix/include" \
	"$root$prefix/bin" || fail "installcheck.sh on the DESTDIR tree"

# The installed file, its prefix moved under DESTDIR (NCCL's and CUDA's directories
# stay the system's).
export PKG_CONFIG_LIBDIR="$root$libdir/pkgconfig"
moved="--define-variable=prefix=$root$prefix"
cflags=$(pkg-config "$moved" --cflags nccl-det) || fail "pkg-config --cflags nccl-det failed"
libs=$(pkg-config "$moved" --libs nccl-det) || fail "pkg-config --libs nccl-det failed"
case $cflags in *"-I$root$prefix/include"*) ;; *) fail "--cflags lacks the include dir: $cflags" ;; esac
case " $libs " in *-lnccl-det*) fail "pkg-config --libs names -lnccl-det: $libs" ;; esac
cat >"$scratch/query.c" <<'C'
#include <dlfcn.h>
#include <stdio.h>
#include <nccl_det.h>
typedef ncclResult_t (*query_fn)(ncclComm_t, int *, const char **);
int main(void)
{
	query_fn query = (query_fn)dlsym(RTLD_DEFAULT, "ncclDetCommQuery");
	printf("nccl-det %s %s\n", NCCL_DET_VERSION_STRING, query != NULL ? "loaded" : "absent");
	return 0;
}
C
${CC:-cc} $cflags "$scratch/query.c" -o "$scratch/query" $libs -ldl 2>"$scratch/cc.log" ||
	fail "a program with pkg-config's flags ($cflags) does not build: $(cat "$scratch/cc.log")"
"$scratch/query" | grep -q "nccl-det $PACKAGE_VERSION absent" || fail "the program's output"
echo "PASS: pkg-config's flags build a program that looks nccl-det up at run time"

"$make" -s -C "$top_builddir" uninstall DESTDIR="$root" >"$scratch/uninstall.log" 2>&1 ||
	fail "make uninstall failed: $(tail -20 "$scratch/uninstall.log")"
left=$(find "$root" -type f -o -type l)
[ -z "$left" ] || fail "left after make uninstall: $left"
echo "PASS: make uninstall removes every file"
