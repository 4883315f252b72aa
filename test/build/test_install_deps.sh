#!/bin/sh
# tools/install-deps.sh against stand-in apt-get, dpkg and sudo: it names the build's
# packages, installs only the missing ones (apt-get update first), does nothing where
# all are there, and without apt-get names the packages for other systems and fails.
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
SH
cat >"$bin/sudo" <<'SH'
#!/bin/sh
echo "sudo" >>"$NDET_STUB_DIR/calls"
exec "$@"
SH
chmod +x "$bin/dpkg" "$bin/apt-get" "$bin/sudo"
NDET_STUB_DIR=$scratch
export NDET_STUB_DIR
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
