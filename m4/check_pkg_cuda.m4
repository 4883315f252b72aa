# CHECK_PKG_CUDA: find the CUDA Toolkit (headers + static runtime).
#
# The library links the CUDA runtime statically (libcudart_static.a) so that its
# DT_NEEDED list holds only libc-family libraries: a dynamic libcudart that is off
# the loader path, or of another version than the application's, must never be
# pulled in by a preload.  Sets CUDA_HOME, CUDA_CPPFLAGS, CUDA_LDFLAGS,
# CUDA_STATIC_LIBS, CUDA_VERSION_STRING.
AC_DEFUN([CHECK_PKG_CUDA], [
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda=PATH], [CUDA Toolkit root (default: $CUDA_HOME, /usr/local/cuda, /usr)])],
    [], [with_cuda=guess])
  AS_IF([test "x$with_cuda" = "xno"],
        [AC_MSG_ERROR([nccl-det needs the CUDA Toolkit; --without-cuda is not supported])])

  check_pkg_cuda_save_CPPFLAGS="$CPPFLAGS"
  check_pkg_cuda_save_LDFLAGS="$LDFLAGS"
  check_pkg_cuda_save_LIBS="$LIBS"

  AS_IF([test "x$with_cuda" = "xguess" -o "x$with_cuda" = "xyes"],
        [check_pkg_cuda_candidates="${CUDA_HOME} /usr/local/cuda /usr"],
        [check_pkg_cuda_candidates="$with_cuda"])
  CUDA_HOME=""
  for check_pkg_cuda_dir in $check_pkg_cuda_candidates; do
    AS_IF([test -f "$check_pkg_cuda_dir/include/cuda_runtime_api.h"],
          [CUDA_HOME="$check_pkg_cuda_dir"; break])
  done
  AS_IF([test -z "$CUDA_HOME"],
        [AC_MSG_ERROR([CUDA headers (cuda_runtime_api.h) not found in: $check_pkg_cuda_candidates.
Pass --with-cuda=/path/to/cuda (the directory that holds include/ and lib64/).])])
  CUDA_HOME=$(cd "$CUDA_HOME" && pwd)

  CUDA_LIB_DIR=""
  for check_pkg_cuda_libdir in lib64 lib lib/x86_64-linux-gnu targets/x86_64-linux/lib; do
    AS_IF([test -f "$CUDA_HOME/$check_pkg_cuda_libdir/libcudart_static.a"],
          [CUDA_LIB_DIR="$CUDA_HOME/$check_pkg_cuda_libdir"; break])
  done
  AS_IF([test -z "$CUDA_LIB_DIR"],
        [AC_MSG_ERROR([libcudart_static.a not found under $CUDA_HOME.
Pass --with-cuda=/path/to/cuda of a full CUDA Toolkit install.])])

  CUDA_CPPFLAGS="-isystem $CUDA_HOME/include"
  CUDA_LDFLAGS="-L$CUDA_LIB_DIR"
  CUDA_STATIC_LIBS="$CUDA_LIB_DIR/libcudart_static.a -lrt -lpthread -ldl"

  CPPFLAGS="$CPPFLAGS $CUDA_CPPFLAGS"
  AC_MSG_CHECKING([CUDA runtime version])
  AC_COMPUTE_INT([check_pkg_cuda_version], [CUDART_VERSION], [#include <cuda_runtime_api.h>],
                 [AC_MSG_ERROR([cannot read CUDART_VERSION from cuda_runtime_api.h])])
  CUDA_VERSION_STRING="$((check_pkg_cuda_version / 1000)).$(( (check_pkg_cuda_version % 1000) / 10))"
  AC_MSG_RESULT([$CUDA_VERSION_STRING])
  AS_IF([test "$check_pkg_cuda_version" -lt 11080],
        [AC_MSG_ERROR([CUDA >= 11.8 is required (found $CUDA_VERSION_STRING)])])

  CPPFLAGS="$check_pkg_cuda_save_CPPFLAGS"
  LDFLAGS="$check_pkg_cuda_save_LDFLAGS"
  LIBS="$check_pkg_cuda_save_LIBS"
  AS_UNSET([check_pkg_cuda_save_CPPFLAGS])
  AS_UNSET([check_pkg_cuda_save_LDFLAGS])
  AS_UNSET([check_pkg_cuda_save_LIBS])

  AC_SUBST([CUDA_HOME])
  AC_SUBST([CUDA_LIB_DIR])
  AC_SUBST([CUDA_CPPFLAGS])
  AC_SUBST([CUDA_LDFLAGS])
  AC_SUBST([CUDA_STATIC_LIBS])
  AC_SUBST([CUDA_VERSION_STRING])
])
