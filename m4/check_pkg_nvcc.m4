# CHECK_PKG_NVCC: find nvcc and choose the gencode list for kernels/.
#
# Default targets: sm_80 and sm_90 SASS plus compute_80 PTX, so Ampere and Hopper
# run native code and newer GPUs JIT the PTX.  One virtual architecture, so nvcc's
# front end (cicc, about half of a target's compile time) runs once per file and
# ptxas twice.  The kernels use no feature newer than sm_80 (no __CUDA_ARCH__ test).
# Their compute_80 and compute_90 PTX (CUDA 13.0) differ in the .target line and, for
# bf16, in how a bf16 is widened to f32 (compute_90: cvt.f32.bf16; compute_80: a move
# of its 16 bits into the high half; both exact); f32's sm_90 cubins built from either
# differ in one byte outside the code.  The GPU suite runs the default build's sm_90
# code (test/gpu/RESULTS).
# --with-nvcc-gencode overrides it.
AC_DEFUN([CHECK_PKG_NVCC], [
  AC_REQUIRE([CHECK_PKG_CUDA])
  AC_ARG_WITH([nvcc],
    [AS_HELP_STRING([--with-nvcc=PATH], [nvcc to compile kernels with (default: CUDA_HOME/bin/nvcc)])],
    [], [with_nvcc=guess])
  AC_ARG_WITH([nvcc-gencode],
    [AS_HELP_STRING([--with-nvcc-gencode=FLAGS],
      [nvcc target flags, -gencode=... or -arch=... -code=... (default: sm_80 and sm_90 SASS and compute_80 PTX)])],
    [NVCC_GENCODE="$withval"],
    [NVCC_GENCODE="-arch=compute_80 -code=sm_80,sm_90,compute_80"])

  AS_IF([test "x$with_nvcc" = "xguess" -o "x$with_nvcc" = "xyes"],
        [AC_PATH_PROG([NVCC], [nvcc], [], [$CUDA_HOME/bin$PATH_SEPARATOR$PATH])],
        [NVCC="$with_nvcc"])
  AS_IF([test -z "$NVCC" || ! test -x "$NVCC"],
        [AC_MSG_ERROR([nvcc not found. Pass --with-nvcc=/path/to/nvcc or --with-cuda=/path/to/cuda.])])

  AC_MSG_CHECKING([whether $NVCC compiles a kernel for $NVCC_GENCODE])
  check_pkg_nvcc_dir=$(mktemp -d)
  cat > "$check_pkg_nvcc_dir/t.cu" <<'NVCCEOF'
__global__ void ndet_probe(int *p) { *p = (int)threadIdx.x; }
extern "C" int ndet_probe_launch(int *p) { ndet_probe<<<1, 1>>>(p); return 0; }
NVCCEOF
  AS_IF([$NVCC $NVCC_GENCODE -c "$check_pkg_nvcc_dir/t.cu" -o "$check_pkg_nvcc_dir/t.o" >&AS_MESSAGE_LOG_FD 2>&1],
        [AC_MSG_RESULT([yes])],
        [AC_MSG_RESULT([no])
         rm -rf "$check_pkg_nvcc_dir"
         AC_MSG_ERROR([$NVCC cannot compile for "$NVCC_GENCODE"; see config.log or pass --with-nvcc-gencode=])])
  rm -rf "$check_pkg_nvcc_dir"
  AC_SUBST([NVCC])
  AC_SUBST([NVCC_GENCODE])
])
