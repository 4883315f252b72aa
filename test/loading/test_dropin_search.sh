#!/bin/sh
# The drop-in finds the real NCCL in the documented order and never itself:
#   1. NCCL_DET_NCCL_LIBRARY (the fake; the drop-in itself, by path or through a
#      symlink, is refused with a WARN, as is a missing file, and the search goes on);
#   2. an already-loaded libnccl that is not nccl-det (the fake, loaded before);
#   3. nvidia/nccl/lib/libnccl.so.2 next to a loaded Python package tree;
#   4. LD_LIBRARY_PATH (the drop-in's own directory first is skipped), the loader
#      cache, the system directories;
# with no real NCCL anywhere (on this machine's system paths) every call fails with
# ncclSystemError and one WARN.  Also: preloading the drop-in makes the program's
# dlopen("libnccl.so.2") return it (the SONAME trick XLA needs), and its calls reach
# the fake.
. "${NDET_TOP_SRCDIR:-.}/test/support/test_preload_lib.sh"

program="$top_builddir/test/loading/test_dropin_load"
anchor="$top_builddir/test/loading/.libs/libndet_test_anchor.so"
[ -x "$program" ] || fail "$program was not built"
[ -f "$anchor" ] || fail "$anchor was not built"
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export ASAN_OPTIONS

# A private copy of the drop-in (with a symlink to it) and of the fake.
mkdir -p "$scratch/dropin" "$scratch/real" "$scratch/site-packages/nvidia/nccl/lib" \
	"$scratch/site-packages/framework" || fail "mkdir"
cp "$fake_dropin" "$scratch/dropin/libnccl.so.2" || fail "copy"
ln -s libnccl.so.2 "$scratch/dropin/alias.so" || fail "symlink"
cp "$fake_nccl" "$scratch/real/libnccl.so.2" || fail "copy"
cp "$fake_nccl" "$scratch/site-packages/nvidia/nccl/lib/libnccl.so.2" || fail "copy"
cp "$anchor" "$scratch/site-packages/framework/_extension.so" || fail "copy"
dropin_copy="$scratch/dropin/libnccl.so.2"

# search NAME [VAR=VALUE...] -- [PROGRAM ARGS...]: open the drop-in copy by path and ask.
search() {
	name=$1
	shift
	settings=
	while [ "$1" != "--" ]; do
		settings="$settings $1"
		shift
	done
	shift
	rm -f "$scratch/$name.log"
	env -u NCCL_DET_NCCL_LIBRARY $settings NCCL_DET_DEBUG=INFO NCCL_DET_DEBUG_SUBSYS=INIT \
		NCCL_DET_DEBUG_FILE="$scratch/$name.log" NCCL_DET_ENABLE=0 \
		${sanitizer_runtime:+LD_PRELOAD="$sanitizer_runtime"} \
		"$program" --open "$dropin_copy" "$@" --query >"$scratch/$name.out" 2>"$scratch/$name.err" ||
		fail "$name: $(cat "$scratch/$name.err")"
}

expect() { # NAME PATH FOUND-BY-WORDS
	grep -q "^nccl: $2\$" "$scratch/$1.out" ||
		fail "$1: expected $2, got: $(cat "$scratch/$1.out") $(cat "$scratch/$1.log")"
	grep -q "^found_by: .*$3" "$scratch/$1.out" || fail "$1: found by: $(grep found_by "$scratch/$1.out")"
	grep -q '^version: 22809$' "$scratch/$1.out" || fail "$1: $(grep version "$scratch/$1.out")"
}

# 1. explicit
search explicit "NCCL_DET_NCCL_LIBRARY=$scratch/real/libnccl.so.2" -- 
expect explicit "$scratch/real/libnccl.so.2" NCCL_DET_NCCL_LIBRARY
grep -q 'WARN' "$scratch/explicit.log" && fail "explicit: unexpected WARN: $(cat "$scratch/explicit.log")"
grep -q 'version 22809' "$scratch/explicit.log" && fail "explicit: the version was asked with NCCL_DET_ENABLE=0"
grep -q "real NCCL $scratch/real/libnccl.so.2 (found by NCCL_DET_NCCL_LIBRARY" "$scratch/explicit.log" ||
	fail "explicit: no INFO line with the path: $(cat "$scratch/explicit.log")"

# ... wins over an already-loaded one
search explicit_first "NCCL_DET_NCCL_LIBRARY=$scratch/real/libnccl.so.2" -- \
	--first "$scratch/site-packages/nvidia/nccl/lib/libnccl.so.2"
expect explicit_first "$scratch/real/libnccl.so.2" NCCL_DET_NCCL_LIBRARY

# ... never the drop-in itself: by path, through a symlink, then the search goes on
for self in "$dropin_copy" "$scratch/dropin/alias.so"; do
	search self "NCCL_DET_NCCL_LIBRARY=$self" "LD_LIBRARY_PATH=$scratch/dropin:$scratch/real" --
	expect self "$scratch/real/libnccl.so.2" "LD_LIBRARY_PATH"
	grep -q "WARN.*NCCL_DET_NCCL_LIBRARY=$self cannot be loaded (it is this nccl-det library itself)" \
		"$scratch/self.log" || fail "self ($self): no WARN: $(cat "$scratch/self.log")"
done

# ... a missing file: WARN, search goes on
search missing "NCCL_DET_NCCL_LIBRARY=$scratch/nonexistent/libnccl.so.2" "LD_LIBRARY_PATH=$scratch/real" --
expect missing "$scratch/real/libnccl.so.2" "LD_LIBRARY_PATH"
grep -q "WARN.*NCCL_DET_NCCL_LIBRARY=$scratch/nonexistent/libnccl.so.2 cannot be loaded (No such file" \
	"$scratch/missing.log" || fail "missing: no WARN: $(cat "$scratch/missing.log")"

# ... another copy of nccl-det is never taken as the real NCCL
search other_copy "NCCL_DET_NCCL_LIBRARY=$dropin" "LD_LIBRARY_PATH=$scratch/real" --
expect other_copy "$scratch/real/libnccl.so.2" "LD_LIBRARY_PATH"
grep -q "it is another copy of nccl-det" "$scratch/other_copy.log" ||
	fail "other copy: no WARN: $(cat "$scratch/other_copy.log")"

# 2. already loaded (before the wheel and the search path)
search loaded "LD_LIBRARY_PATH=$scratch/real" -- \
	--first "$scratch/site-packages/nvidia/nccl/lib/libnccl.so.2"
expect loaded "$scratch/site-packages/nvidia/nccl/lib/libnccl.so.2" "already-loaded"

# 3. the wheel next to a loaded Python package (before LD_LIBRARY_PATH)
search wheel "LD_LIBRARY_PATH=$scratch/real" -- --first "$scratch/site-packages/framework/_extension.so"
expect wheel "$scratch/site-packages/nvidia/nccl/lib/libnccl.so.2" "wheel"

# 4. LD_LIBRARY_PATH, the drop-in's own directory first
search system "LD_LIBRARY_PATH=$scratch/dropin::$scratch/real" --
expect system "$scratch/real/libnccl.so.2" "LD_LIBRARY_PATH"

# ... with a preloaded malloc that is not libc's (jemalloc, tcmalloc): NCCL frees what
# libc allocated (the fake does so in ncclGetVersion), so it must not be bound to
# libc's free by RTLD_DEEPBIND.  (Sanitizer builds bring their own malloc.)
arena="$top_builddir/test/loading/.libs/libtest_arena_malloc.so"
[ -f "$arena" ] || fail "$arena was not built"
if [ -z "$sanitizer_runtime" ]; then
	env NCCL_DET_NCCL_LIBRARY="$scratch/real/libnccl.so.2" NCCL_DET_ENABLE=0 LD_PRELOAD="$arena" \
		"$program" --open "$dropin_copy" --query >"$scratch/arena.out" 2>"$scratch/arena.err" ||
		fail "a preloaded malloc: $(cat "$scratch/arena.err")"
	expect arena "$scratch/real/libnccl.so.2" NCCL_DET_NCCL_LIBRARY
fi

# ... behind twenty directories without NCCL (module systems, containers)
crowd=$scratch/dropin
for i in $(seq 1 20); do
	mkdir -p "$scratch/empty$i"
	crowd=$crowd:$scratch/empty$i
done
search crowded "LD_LIBRARY_PATH=$crowd:$scratch/real" --
expect crowded "$scratch/real/libnccl.so.2" "LD_LIBRARY_PATH"

# Nothing: ncclSystemError and one WARN.  (The test drop-in looks for the loader
# cache and the system directories under a root that does not exist: hermetic.)
echo ncclGetVersion >"$scratch/one"
echo ncclAllGather >>"$scratch/one"
search nothing "LD_LIBRARY_PATH=$scratch/dropin" -- --names "$scratch/one"
grep -q '^nccl: $' "$scratch/nothing.out" || fail "nothing: found $(cat "$scratch/nothing.out")"
grep -q '^ncclGetVersion = 2$' "$scratch/nothing.out" || fail "nothing: $(cat "$scratch/nothing.out")"
grep -q '^ncclAllGather = 2$' "$scratch/nothing.out" || fail "nothing: $(cat "$scratch/nothing.out")"
[ "$(grep -c 'NCCL-DET WARN' "$scratch/nothing.log")" -eq 1 ] ||
	fail "nothing: expected one WARN: $(cat "$scratch/nothing.log")"
grep -q 'the real NCCL was not found: NCCL_DET_NCCL_LIBRARY is not set, no libnccl.so\* other than nccl-det is loaded' \
	"$scratch/nothing.log" || fail "nothing: $(cat "$scratch/nothing.log")"

# The SONAME trick: preloaded, the drop-in is what dlopen("libnccl.so.2") returns.
rm -f "$scratch/soname.trace"
env FAKE_NCCL_TRACE="$scratch/soname.trace" NCCL_DET_NCCL_LIBRARY="$fake_nccl" NCCL_DET_ENABLE=0 \
	LD_PRELOAD="$(preload_of "$dropin_copy")" "$program" --query --names "$scratch/one" \
	>"$scratch/soname.out" 2>"$scratch/soname.err" || fail "soname: $(cat "$scratch/soname.err")"
grep -q "^opened: $dropin_copy nccl-det=1$" "$scratch/soname.out" ||
	fail "dlopen(\"libnccl.so.2\") did not return the preloaded drop-in: $(cat "$scratch/soname.out")"
# (Zero arguments: the fake answers ncclInvalidArgument for the NULL version.)
grep -q '^ncclGetVersion = 4$' "$scratch/soname.out" || fail "soname: $(cat "$scratch/soname.out")"
grep -q '^ncclGetVersion(' "$scratch/soname.trace" || fail "soname: the call did not reach the fake"
echo "PASS: explicit, loaded, wheel, system in order; never itself; SONAME lookup returns the drop-in"
