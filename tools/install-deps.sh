#!/bin/sh
# Installs what building and testing nccl-det needs besides the CUDA Toolkit: on
# Debian and Ubuntu through apt-get (as root, or through sudo); elsewhere it names the
# packages and stops.  The README's build and test commands start with it.
#
#   tools/install-deps.sh          install what is missing (nothing to do: no apt-get update)
#   tools/install-deps.sh --list   print the Debian/Ubuntu package names, one a line
#
# The CUDA Toolkit (nvcc, libcudart_static.a) is not installed here: configure finds
# it under /usr/local/cuda, or takes --with-cuda=PATH.  NCCL's headers (nccl.h >= 2.21)
# are looked for where configure looks ($NCCL_HOME, the CUDA root, /usr, /usr/local,
# pip's nvidia-nccl package); where there are none, libnccl-dev and libnccl2 are
# installed if apt knows them (NVIDIA's CUDA repository), else the script says where to
# get NCCL and fails.  INSTALL_DEPS_NCCL_PREFIXES replaces that list of places (tests).
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

cuda=${CUDA_HOME:-/usr/local/cuda}
if [ -n "${INSTALL_DEPS_NCCL_PREFIXES+set}" ]; then
	nccl_prefixes=$INSTALL_DEPS_NCCL_PREFIXES
else
	nccl_pip=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' \
		2>/dev/null || true)
	nccl_prefixes="${NCCL_HOME:-} $cuda /usr /usr/local $nccl_pip"
fi
have_nccl() {
	for prefix in $nccl_prefixes; do
		[ -f "$prefix/include/nccl.h" ] && return 0
	done
	return 1
}

missing=
for p in $packages; do
	dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
need_nccl=no
have_nccl || need_nccl=yes
if [ -z "$missing" ] && [ $need_nccl = no ]; then
	echo "install-deps: every build package is installed"
else
	sudo=
	if [ "$(id -u)" != 0 ]; then
		command -v sudo >/dev/null 2>&1 || {
			echo "install-deps: missing:$missing${missing:+ }$([ $need_nccl = yes ] && echo "NCCL's headers");" \
				"run this as root (no sudo here)" >&2
			exit 1
		}
		sudo=sudo
	fi
	export DEBIAN_FRONTEND=noninteractive
	$sudo apt-get update -qq
	if [ $need_nccl = yes ] &&
		apt-cache policy libnccl-dev 2>/dev/null | grep -q 'Candidate: [0-9]'; then
		missing="$missing libnccl-dev libnccl2"
	fi
	if [ -n "$missing" ]; then
		echo "install-deps: installing$missing"
		# shellcheck disable=SC2086
		$sudo apt-get install -y -qq $missing >/dev/null
	fi
fi
if ! have_nccl; then
	cat >&2 <<MSG
install-deps: NCCL's headers (include/nccl.h, NCCL >= 2.21) are in none of:
  $(echo $nccl_prefixes)
and apt has no libnccl-dev (NVIDIA's CUDA repository is not configured here).  Get NCCL
one of these ways, then rerun:
  - NVIDIA's repository: https://developer.nvidia.com/nccl (then apt-get install libnccl-dev)
  - pip install nvidia-nccl-cu12 (or -cu13 for CUDA 13): configure finds it there
  - an NCCL tree elsewhere: NCCL_HOME=/path/to/nccl (holding include/nccl.h) for this
    script and configure, or ./configure --with-nccl=/path/to/nccl
MSG
	exit 1
fi
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x "$cuda/bin/nvcc" ]; then
	echo "install-deps: no nvcc in PATH or $cuda/bin: install the CUDA Toolkit, or pass" \
		"--with-cuda=PATH to configure" >&2
fi
