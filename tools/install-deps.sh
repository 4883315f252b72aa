#!/bin/sh
# Installs what building and testing nccl-det needs besides the CUDA Toolkit: on
# Debian and Ubuntu through apt-get (as root, or through sudo); elsewhere it names the
# packages and stops.  The README's build and test commands start with it.
#
#   tools/install-deps.sh          install what is missing (nothing to do: no apt-get update)
#   tools/install-deps.sh --list   print the Debian/Ubuntu package names, one a line
#
# The CUDA Toolkit (nvcc, libcudart_static.a; NCCL's headers come with it or with
# libnccl-dev) is not installed here: configure finds it under /usr/local/cuda, or
# takes --with-cuda=PATH and --with-nccl=PATH.
set -eu
packages="autoconf automake libtool pkg-config make gcc g++ binutils file libcmocka-dev"

case ${1:-} in
--list)
	for p in $packages; do echo "$p"; done
	exit 0
	;;
"") ;;
*)
	echo "usage: $0 [--list]" >&2
	exit 2
	;;
esac

if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg >/dev/null 2>&1; then
	cat >&2 <<'MSG'
install-deps: no apt-get here; install these with your package manager, then rerun
the build command without this script:
  Fedora, RHEL:  dnf install autoconf automake libtool pkgconf make gcc gcc-c++ binutils file libcmocka-devel
  openSUSE:      zypper install autoconf automake libtool pkg-config make gcc gcc-c++ binutils file libcmocka-devel
  Arch:          pacman -S autoconf automake libtool pkgconf make gcc binutils file cmocka
MSG
	exit 1
fi

missing=
for p in $packages; do
	dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -z "$missing" ]; then
	echo "install-deps: every build package is installed"
else
	sudo=
	if [ "$(id -u)" != 0 ]; then
		command -v sudo >/dev/null 2>&1 || {
			echo "install-deps: missing:$missing; run this as root (no sudo here)" >&2
			exit 1
		}
		sudo=sudo
	fi
	echo "install-deps: installing$missing"
	export DEBIAN_FRONTEND=noninteractive
	$sudo apt-get update -qq
	# shellcheck disable=SC2086
	$sudo apt-get install -y -qq $missing >/dev/null
fi

cuda=${CUDA_HOME:-/usr/local/cuda}
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x "$cuda/bin/nvcc" ]; then
	echo "install-deps: no nvcc in PATH or $cuda/bin: install the CUDA Toolkit, or pass" \
		"--with-cuda=PATH to configure" >&2
fi
