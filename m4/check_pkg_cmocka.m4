# CHECK_PKG_CMOCKA: CMocka for the CPU unit tests run by `make check`.
# Tests are part of every build; without CMocka configure stops and says how to get it.
AC_DEFUN([CHECK_PKG_CMOCKA], [
  AC_ARG_ENABLE([tests],
    [AS_HELP_STRING([--disable-tests], [do not build the CMocka unit tests])],
    [], [enable_tests=yes])
  have_cmocka=no
  AS_IF([test "x$enable_tests" != "xno"], [
    PKG_CHECK_MODULES([CMOCKA], [cmocka >= 1.1], [have_cmocka=yes],
      [AC_MSG_ERROR([CMocka >= 1.1 not found (needed by make check).
Install libcmocka-dev (Debian/Ubuntu) or cmocka-devel, or pass --disable-tests.])])
  ])
  AM_CONDITIONAL([HAVE_CMOCKA], [test "x$have_cmocka" = "xyes"])
])
