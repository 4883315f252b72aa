# CHECK_ENABLE_SANITIZERS: --enable-asan (AddressSanitizer + UBSan) or
# --enable-tsan (ThreadSanitizer) for the host code and the CPU tests.
AC_DEFUN([CHECK_ENABLE_SANITIZERS], [
  AC_ARG_ENABLE([asan],
    [AS_HELP_STRING([--enable-asan], [build host code with AddressSanitizer and UndefinedBehaviorSanitizer])],
    [], [enable_asan=no])
  AC_ARG_ENABLE([tsan],
    [AS_HELP_STRING([--enable-tsan], [build host code with ThreadSanitizer])],
    [], [enable_tsan=no])
  AS_IF([test "x$enable_asan" = "xyes" -a "x$enable_tsan" = "xyes"],
        [AC_MSG_ERROR([--enable-asan and --enable-tsan cannot be combined])])
  ndet_sanitizer=none
  SANITIZER_CFLAGS=""
  SANITIZER_LDFLAGS=""
  AS_IF([test "x$enable_asan" = "xyes"],
        [ndet_sanitizer="address,undefined"
         SANITIZER_CFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
         SANITIZER_LDFLAGS="-fsanitize=address,undefined"])
  AS_IF([test "x$enable_tsan" = "xyes"],
        [ndet_sanitizer="thread"
         SANITIZER_CFLAGS="-fsanitize=thread -fno-omit-frame-pointer"
         SANITIZER_LDFLAGS="-fsanitize=thread"])
  AM_CONDITIONAL([NDET_SANITIZER], [test "x$ndet_sanitizer" != "xnone"])
  AM_CONDITIONAL([NDET_ASAN], [test "x$enable_asan" = "xyes"])
  AM_CONDITIONAL([NDET_TSAN], [test "x$enable_tsan" = "xyes"])
  AC_SUBST([SANITIZER_CFLAGS])
  AC_SUBST([SANITIZER_LDFLAGS])
])
