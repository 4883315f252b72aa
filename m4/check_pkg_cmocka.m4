# CHECK_PKG_CMOCKA: CMocka for the CPU unit tests run by `make check`.
# Only `make check` needs it, so the build goes on without it: --enable-tests=auto
# (the default) builds the CMocka tests where CMocka is found and otherwise warns, and
# then `make check` fails with a test that says how to get it (never a pass with the
# unit tests left out).  --enable-tests requires it; --disable-tests leaves them out.
AC_DEFUN([CHECK_PKG_CMOCKA], [
  AC_ARG_ENABLE([tests],
    [AS_HELP_STRING([--enable-tests@<:@=yes|no|auto@:>@],
      [the CMocka unit tests of make check (default auto: where CMocka >= 1.1 is found)])],
    [], [enable_tests=auto])
  have_cmocka=no
  ndet_cmocka_missing=no
  AS_CASE([$enable_tests],
    [no], [have_cmocka="no (--disable-tests)"],
    [yes|auto],
      [PKG_CHECK_MODULES([CMOCKA], [cmocka >= 1.1], [have_cmocka=yes],
        [AS_IF([test "x$enable_tests" = xyes],
           [AC_MSG_ERROR([CMocka >= 1.1 not found (needed by make check).
Install libcmocka-dev (Debian/Ubuntu; tools/install-deps.sh does) or cmocka-devel, or pass --disable-tests.])])
         AC_MSG_WARN([CMocka >= 1.1 not found: the library builds, make check fails until libcmocka-dev (tools/install-deps.sh) is installed and configure rerun])
         ndet_cmocka_missing=yes
         have_cmocka="no: make check fails until it is installed (tools/install-deps.sh)"])],
    [AC_MSG_ERROR([--enable-tests takes yes, no or auto, not "$enable_tests"])])
  AM_CONDITIONAL([HAVE_CMOCKA], [test "x$have_cmocka" = "xyes"])
  AM_CONDITIONAL([NDET_CMOCKA_MISSING], [test "x$ndet_cmocka_missing" = "xyes"])
])
