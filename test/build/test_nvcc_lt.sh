#!/bin/sh
# build-aux/nvcc-lt.sh on a small kernel: the libtool object and its stub, the header
# dependencies nvcc writes (a changed header must rebuild the object), a launcher in
# front of the compiler (NVCC_LAUNCHER), and ccache through it where ccache exists.
# PTX only (compute_80): no ptxas, a second or so per compile.
. "${NDET_TOP_SRCDIR:-.}/test/support/test_preload_lib.sh"
nvcc=${NVCC:-nvcc}
command -v ${nvcc##* } >/dev/null 2>&1 || { echo "SKIP: no nvcc ($nvcc)"; exit 77; }
lt="$NDET_TOP_SRCDIR/build-aux/nvcc-lt.sh"
cd "$scratch" || exit 1
printf '#define NDET_TEST_VALUE 3\n' >value.cuh
cat >k.cu <<'CU'
#include "value.cuh"
__global__ void ndet_test_kernel(int *p) { *p = NDET_TEST_VALUE; }
extern "C" int ndet_test_launch(int *p) { ndet_test_kernel<<<1, 1>>>(p); return 0; }
CU
flags="-arch=compute_80 -code=compute_80 -I."

sh "$lt" out/k.lo k.cu $nvcc $flags || fail "nvcc-lt.sh failed"
for f in out/k.lo out/k.o out/.libs/k.o out/.deps/k.Plo; do
	[ -s "$f" ] || fail "$f not written"
done
grep -q "pic_object='.libs/k.o'" out/k.lo || fail "out/k.lo does not name .libs/k.o"
head -1 out/.deps/k.Plo | grep -q '^out/k\.lo *:' || fail "the dependency target is not out/k.lo"
grep -q 'value\.cuh' out/.deps/k.Plo || fail "out/.deps/k.Plo does not name value.cuh"
ls out/.deps/*.tmp >/dev/null 2>&1 && fail "a temporary dependency file was left"
echo "PASS: object, stub and header dependencies"

# A launcher: any command word in front of nvcc.
cat >launcher.sh <<'SH'
#!/bin/sh
echo "$*" >>"$(dirname "$0")/launched"
exec "$@"
SH
chmod +x launcher.sh
sh "$lt" out/l.lo k.cu "$scratch/launcher.sh" $nvcc $flags || fail "nvcc-lt.sh with a launcher failed"
grep -q 'k\.cu' launched || fail "the launcher did not run the compile"
[ -s out/.libs/l.o ] || fail "the launcher's compile wrote no object"
echo "PASS: launcher in front of nvcc"

# A failing compile leaves no stub behind (make must not take it as built).
printf '#error broken\n' >>value.cuh
sh "$lt" out/bad.lo k.cu $nvcc $flags 2>/dev/null && fail "a broken source compiled"
[ -e out/bad.lo ] && fail "a failed compile left out/bad.lo"
echo "PASS: a failed compile leaves no object stub"
printf '#define NDET_TEST_VALUE 3\n' >value.cuh

if command -v ccache >/dev/null 2>&1; then
	export CCACHE_DIR="$scratch/ccache"
	for i in 1 2; do
		rm -rf out/c.lo out/.libs/c.o out/.deps/c.Plo
		sh "$lt" out/c.lo k.cu ccache $nvcc $flags || fail "ccache compile $i failed"
		[ -s out/.deps/c.Plo ] || fail "ccache compile $i wrote no dependency file"
	done
	ccache -s >stats 2>&1
	hits=$(sed -n 's/^ *Hits: *\([0-9]*\) .*/\1/p' stats | head -1)
	[ "${hits:-0}" -ge 1 ] || { cat stats >&2; fail "the second ccache compile was no hit"; }
	echo "PASS: ccache serves the second compile"
else
	echo "ccache not installed: its case not run"
fi
