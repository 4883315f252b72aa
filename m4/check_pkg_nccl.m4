# CHECK_PKG_NCCL: find NCCL headers (nccl.h) and a library to build tests and the
# drop-in export list against.
#
# nccl-det never links libnccl (it resolves the real NCCL at run time), so only the
# header is required; the library directory is recorded for tests and tools.
# Looks in --with-nccl, $NCCL_HOME, the CUDA root, /usr, and pip's nvidia/nccl tree.
AC_DEFUN([CHECK_PKG_NCCL], [
  AC_REQUIRE([CHECK_PKG_CUDA])
  AC_ARG_WITH([nccl],
    [AS_HELP_STRING([--with-nccl=PATH], [NCCL root holding include/nccl.h and lib/libnccl.so.2])],
    [], [with_nccl=guess])
  AS_IF([test "x$with_nccl" = "xno"],
        [AC_MSG_ERROR([nccl-det needs NCCL headers; --without-nccl is not supported])])

  AS_IF([test "x$with_nccl" = "xguess" -o "x$with_nccl" = "xyes"],
        [check_pkg_nccl_pip=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null || true)
         check_pkg_nccl_candidates="${NCCL_HOME} ${CUDA_HOME} /usr /usr/local ${check_pkg_nccl_pip}"],
        [check_pkg_nccl_candidates="$with_nccl"])
  NCCL_INCLUDE_DIR=""
  for check_pkg_nccl_dir in $check_pkg_nccl_candidates; do
    AS_IF([test -f "$check_pkg_nccl_dir/include/nccl.h"],
          [NCCL_HOME="$check_pkg_nccl_dir"; NCCL_INCLUDE_DIR="$check_pkg_nccl_dir/include"; break])
  done
  AS_IF([test -z "$NCCL_INCLUDE_DIR"],
        [AC_MSG_ERROR([nccl.h not found in: $check_pkg_nccl_candidates.
Pass --with-nccl=/path/to/nccl (the directory that holds include/nccl.h), or install
libnccl-dev, or pip install nvidia-nccl-cu12.])])

  NCCL_LIB_DIR=""
  for check_pkg_nccl_libdir in lib lib64 lib/x86_64-linux-gnu; do
    AS_IF([test -e "$NCCL_HOME/$check_pkg_nccl_libdir/libnccl.so.2"],
          [NCCL_LIB_DIR="$NCCL_HOME/$check_pkg_nccl_libdir"; break])
  done
  AS_IF([test -z "$NCCL_LIB_DIR"],
        [AC_MSG_WARN([libnccl.so.2 not found under $NCCL_HOME: GPU tests and the drop-in export list will be unavailable])])

  AC_MSG_CHECKING([NCCL header version])
  check_pkg_nccl_save_CPPFLAGS="$CPPFLAGS"
  CPPFLAGS="$CPPFLAGS -isystem $NCCL_INCLUDE_DIR $CUDA_CPPFLAGS"
  AC_COMPUTE_INT([check_pkg_nccl_code], [NCCL_VERSION_CODE], [#include <nccl.h>],
                 [AC_MSG_ERROR([cannot read NCCL_VERSION_CODE from $NCCL_INCLUDE_DIR/nccl.h])])
  CPPFLAGS="$check_pkg_nccl_save_CPPFLAGS"
  NCCL_VERSION_STRING="$((check_pkg_nccl_code / 10000)).$(( (check_pkg_nccl_code % 10000) / 100)).$((check_pkg_nccl_code % 100))"
  AC_MSG_RESULT([$NCCL_VERSION_STRING])
  AS_IF([test "$check_pkg_nccl_code" -lt 22100],
        [AC_MSG_ERROR([NCCL headers >= 2.21 are required (found $NCCL_VERSION_STRING)])])

  NCCL_CPPFLAGS="-isystem $NCCL_INCLUDE_DIR"
  AS_IF([test -n "$NCCL_LIB_DIR"], [NCCL_LDFLAGS="-L$NCCL_LIB_DIR"], [NCCL_LDFLAGS=""])
  AM_CONDITIONAL([HAVE_NCCL_LIB], [test -n "$NCCL_LIB_DIR"])
  AC_SUBST([NCCL_HOME])
  AC_SUBST([NCCL_INCLUDE_DIR])
  AC_SUBST([NCCL_LIB_DIR])
  AC_SUBST([NCCL_CPPFLAGS])
  AC_SUBST([NCCL_LDFLAGS])
  AC_SUBST([NCCL_VERSION_STRING])
])
