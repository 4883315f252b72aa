#!/bin/sh
# tools/install-deps.sh against stand-in apt-get, apt-cache, dpkg and sudo: it names the
# build's packages, installs only the missing ones (apt-get update first), does nothing
# where all are there, and without apt-get names the packages for other systems and
# fails.  Without NCCL's headers it installs libnccl-dev where apt has it, and else
# says where to get NCCL and fails.
. "${NDET_TOP_SRCDIR:-.}/test/support/test_preload_lib.sh"
script="$NDET_TOP_SRCDIR/tools/install-deps.sh"
[ -x "$script" ] || fail "$script is not executable"

"$script" --list >"$scratch/list" || fail "--list failed"
for p in autoconf automake libtool pkg-config libcmocka-dev make gcc; do
	grep -qx "$p" "$scratch/list" || fail "--list does not name $p"
done
"$script" --bogus 2>/dev/null && fail "an unknown option was accepted"

# Stand-ins: dpkg -s says "installed" for the packages in $scratch/installed.
bin="$scratch/bin"
mkdir -p "$bin"
cat >"$bin/dpkg" <<'SH'
#!/bin/sh
[ "$1" = -s ] && grep -qx "$2" "$NDET_STUB_DIR/installed"
SH
cat >"$bin/apt-get" <<'SH'
#!/bin/sh
echo "apt-get $*" >>"$NDET_STUB_DIR/calls"
case " $* " in
*" install "*" libnccl-dev "*) mkdir -p "${NDET_STUB_HEADER%/*}" && : >"$NDET_STUB_HEADER" ;;
esac
SH
cat >"$bin/apt-cache" <<'SH'
#!/bin/sh
echo "$2:"
echo "  Installed: (none)"
echo "  Candidate: $(cat "$NDET_STUB_DIR/candidate")"
SH
cat >"$bin/sudo" <<'SH'
#!/bin/sh
echo "sudo" >>"$NDET_STUB_DIR/calls"
exec "$@"
SH
chmod +x "$bin/dpkg" "$bin/apt-get" "$bin/apt-cache" "$bin/sudo"
NDET_STUB_DIR=$scratch
# NCCL's header where the script looks (here, only there).
INSTALL_DEPS_NCCL_PREFIXES="$scratch/nccl"
headers=include
NDET_STUB_HEADER="$scratch/nccl/$headers/nccl.h"
export NDET_STUB_DIR INSTALL_DEPS_NCCL_PREFIXES NDET_STUB_HEADER
mkdir -p "${NDET_STUB_HEADER%/*}"
: >"$NDET_STUB_HEADER"
echo "(none)" >"$scratch/candidate"
stub_path="$bin:/usr/bin:/bin"

cp "$scratch/list" "$scratch/installed"
: >"$scratch/calls"
PATH=$stub_path "$script" >"$scratch/out" 2>&1 || fail "all installed: $(cat "$scratch/out")"
grep -q 'every build package is installed' "$scratch/out" || fail "all installed: $(cat "$scratch/out")"
[ -s "$scratch/calls" ] && fail "apt-get ran with everything installed: $(cat "$scratch/calls")"
echo "PASS: nothing to install, no apt-get"

grep -v -x -e libcmocka-dev -e libtool "$scratch/list" >"$scratch/installed"
: >"$scratch/calls"
PATH=$stub_path "$script" >"$scratch/out" 2>&1 || fail "two missing: $(cat "$scratch/out")"
grep -q '^apt-get update' "$scratch/calls" || fail "no apt-get update: $(cat "$scratch/calls")"
install=$(grep '^apt-get install' "$scratch/calls") || fail "no apt-get install"
case $install in
*libtool*libcmocka-dev* | *libcmocka-dev*libtool*) ;;
*) fail "apt-get install did not name the missing packages: $install" ;;
esac
echo "$install" | grep -q autoconf && fail "an installed package was installed again: $install"
[ "$(grep -n '^apt-get' "$scratch/calls" | head -1 | cut -d: -f2 | cut -c1-14)" = "apt-get update" ] ||
	fail "apt-get update did not come first"
echo "PASS: the missing packages, after apt-get update"

# No NCCL headers, apt has libnccl-dev: it is installed with the runtime library.
cp "$scratch/list" "$scratch/installed"
rm -f "$NDET_STUB_HEADER"
echo "2.28.9-1+cuda12.9" >"$scratch/candidate"
: >"$scratch/calls"
PATH=$stub_path "$script" >"$scratch/out" 2>&1 || fail "no NCCL, apt has it: $(cat "$scratch/out")"
grep -q '^apt-get update' "$scratch/calls" || fail "no NCCL: no apt-get update: $(cat "$scratch/calls")"
grep -q '^apt-get install .*libnccl-dev libnccl2' "$scratch/calls" ||
	fail "no NCCL: libnccl-dev not installed: $(cat "$scratch/calls")"
echo "PASS: without NCCL's headers, libnccl-dev from apt"

# No NCCL headers and none from apt: where to get NCCL, and a failure.
rm -f "$NDET_STUB_HEADER"
echo "(none)" >"$scratch/candidate"
: >"$scratch/calls"
PATH=$stub_path "$script" >"$scratch/out" 2>&1 && fail "succeeded without NCCL: $(cat "$scratch/out")"
grep -q 'pip install nvidia-nccl-cu12' "$scratch/out" || fail "no NCCL: no way named: $(cat "$scratch/out")"
grep -q -- '--with-nccl=' "$scratch/out" || fail "no NCCL: --with-nccl not named"
grep -q '^apt-get install' "$scratch/calls" && fail "no NCCL: apt-get install ran: $(cat "$scratch/calls")"
echo "PASS: without NCCL anywhere, the ways to get it"

# No apt-get: the packages are named for other systems, and the script fails.
mkdir -p "$scratch/noapt"
ln -s "$(command -v sh)" "$scratch/noapt/sh"
for tool in id cat; do
	p=$(command -v "$tool") && ln -s "$p" "$scratch/noapt/$tool"
done
PATH="$scratch/noapt" "$script" >"$scratch/out" 2>&1 && fail "succeeded without apt-get"
grep -q 'dnf install' "$scratch/out" || fail "no package names for dnf: $(cat "$scratch/out")"
grep -q 'libcmocka-devel' "$scratch/out" || fail "dnf line lacks CMocka"
echo "PASS: without apt-get the packages are named"
