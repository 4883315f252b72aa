# CHECK_PKG_NVCC: find nvcc and choose the gencode list for kernels/.
#
# Default targets: sm_80 and sm_90 SASS plus compute_80 PTX, so Ampere and Hopper
# run native code and newer GPUs JIT the PTX.  One virtual architecture, so nvcc's
# front end (cicc) runs once per file and ptxas twice.  The kernels use no feature
# newer than sm_80 (no __CUDA_ARCH__ test).  Their compute_80 and compute_90 PTX
# (CUDA 13.0) differ in the .target line and, for bf16, in how a bf16 is widened to
# f32 (compute_90: cvt.f32.bf16; compute_80: a move of its 16 bits into the high
# half; both exact).  --with-nvcc-gencode overrides it; a value sm_NN means that
# target alone (-arch=compute_NN -code=sm_NN), the fast build for development on one
# kind of GPU, and then also the fp8 kernels' target where NN is 90 or more.
#
# The all-ranks kernels (kernels/libndet_all_ranks.la: compute-sanitizer mode of the
# GPU test driver, never in the library) default to compute_80 PTX alone: the
# driver compiles it on first use and caches it (~/.nv/ComputeCache).
# --with-nvcc-all-ranks-gencode overrides it (for instance with the GPU's SASS).
# They are built only where they can run: --enable-all-ranks-kernels=auto (the
# default) builds them where this machine has an NVIDIA kernel driver
# (/proc/driver/nvidia/version or /dev/nvidiactl), yes and no force it; the test
# driver built without them says so when asked for its one-launch mode
# (test/gpu/ndet_all_ranks_none.c).
#
# The fp8 kernels (kernels/ndet_*_f8*.cu) default to sm_90 SASS and compute_90 PTX:
# NCCL reduces fp8 only on sm_90 and newer (ncclInvalidArgument below), so code for
# older GPUs would never run.  A GPU without an image for them (ndet_kernel_fp8_check)
# sends fp8 calls to NCCL with a WARN.  --with-nvcc-fp8-gencode overrides it.
#
# NVCC may carry a launcher (NVCC="ccache nvcc"), or NVCC_LAUNCHER names one: the
# kernels compile as $NVCC_LAUNCHER $NVCC; only nvcc itself must be executable.
# NVCC_COMPRESS: -Xfatbin -compress-all where nvcc takes it (the GPU code is most of
# every binary, and compressed about a sixth of it); --disable-fatbin-compression
# leaves it out.
AC_DEFUN([CHECK_PKG_NVCC], [
  AC_REQUIRE([CHECK_PKG_CUDA])
  AC_ARG_WITH([nvcc],
    [AS_HELP_STRING([--with-nvcc=PATH], [nvcc to compile kernels with (default: CUDA_HOME/bin/nvcc)])],
    [], [with_nvcc=guess])
  AC_ARG_WITH([nvcc-gencode],
    [AS_HELP_STRING([--with-nvcc-gencode=FLAGS],
      [nvcc target flags, -gencode=... or -arch=... -code=... (default: sm_80 and sm_90 SASS and compute_80 PTX)])],
    [NVCC_GENCODE="$withval" NDET_DEFAULT_GENCODE=no],
    [NVCC_GENCODE="-arch=compute_80 -code=sm_80,sm_90,compute_80" NDET_DEFAULT_GENCODE=yes])
  AC_ARG_VAR([NVCC], [the CUDA compiler, optionally behind a launcher ("ccache nvcc")])
  AC_ARG_VAR([NVCC_LAUNCHER], [command to run nvcc through, e.g. ccache])
  AC_ARG_ENABLE([fatbin-compression],
    [AS_HELP_STRING([--disable-fatbin-compression], [do not compress the GPU code in the binaries])],
    [], [enable_fatbin_compression=yes])
  ndet_gencode_single=no
  AS_CASE([$NVCC_GENCODE],
    [sm_[[0-9]]*], [ndet_gencode_sm=${NVCC_GENCODE#sm_}
                    ndet_gencode_single=$ndet_gencode_sm
                    NVCC_GENCODE="-arch=compute_$ndet_gencode_sm -code=sm_$ndet_gencode_sm"])
  AC_ARG_WITH([nvcc-all-ranks-gencode],
    [AS_HELP_STRING([--with-nvcc-all-ranks-gencode=FLAGS],
      [nvcc target flags of the GPU test driver's compute-sanitizer (all-ranks) kernels (default: compute_80 PTX alone)])],
    [NVCC_ALL_RANKS_GENCODE="$withval"],
    [NVCC_ALL_RANKS_GENCODE="-arch=compute_80 -code=compute_80"])
  AC_ARG_ENABLE([all-ranks-kernels],
    [AS_HELP_STRING([--enable-all-ranks-kernels@<:@=yes|no|auto@:>@],
      [build the GPU test driver's one-launch kernels for compute-sanitizer (test/gpu/suite.sh smoke and sanitize need them); auto (default): where this machine has an NVIDIA driver])],
    [], [enable_all_ranks_kernels=auto])
  ndet_all_ranks_why="--enable-all-ranks-kernels=$enable_all_ranks_kernels"
  AS_CASE([$enable_all_ranks_kernels],
    [yes|no], [],
    [auto], [AS_IF([test -e /proc/driver/nvidia/version || test -e /dev/nvidiactl],
                   [enable_all_ranks_kernels=yes ndet_all_ranks_why="NVIDIA driver found"],
                   [enable_all_ranks_kernels=no
                    ndet_all_ranks_why="no NVIDIA driver here; --enable-all-ranks-kernels builds them"])],
    [AC_MSG_ERROR([--enable-all-ranks-kernels takes yes, no or auto, not "$enable_all_ranks_kernels"])])
  AM_CONDITIONAL([NDET_ALL_RANKS_KERNELS], [test "$enable_all_ranks_kernels" = yes])
  AC_ARG_WITH([nvcc-fp8-gencode],
    [AS_HELP_STRING([--with-nvcc-fp8-gencode=FLAGS],
      [nvcc target flags of the fp8 kernels (default: sm_90 SASS and compute_90 PTX)])],
    [NVCC_FP8_GENCODE="$withval" NDET_DEFAULT_GENCODE=no],
    [AS_IF([test "$ndet_gencode_single" != no && test "$ndet_gencode_single" -ge 90],
           [NVCC_FP8_GENCODE="$NVCC_GENCODE"],
           [NVCC_FP8_GENCODE="-arch=compute_90 -code=sm_90,compute_90"])])

  AS_IF([test "x$with_nvcc" = "xguess" -o "x$with_nvcc" = "xyes"],
        [AS_IF([test -n "$NVCC"], [],
               [AC_PATH_PROG([NVCC], [nvcc], [], [$CUDA_HOME/bin$PATH_SEPARATOR$PATH])])],
        [NVCC="$with_nvcc"])
  # A launcher in front of nvcc (NVCC="ccache nvcc"): the last word is nvcc.
  ndet_nvcc_bin=${NVCC##* }
  AS_IF([test -n "$ndet_nvcc_bin" && test "$ndet_nvcc_bin" = "${ndet_nvcc_bin#/}"],
        [ndet_nvcc_path=$(command -v "$ndet_nvcc_bin" 2>/dev/null) || ndet_nvcc_path=],
        [ndet_nvcc_path=$ndet_nvcc_bin])
  AS_IF([test -z "$ndet_nvcc_path" || ! test -x "$ndet_nvcc_path"],
        [AC_MSG_ERROR([nvcc not found ("$NVCC"). Pass --with-nvcc=/path/to/nvcc or --with-cuda=/path/to/cuda.])])
  AS_IF([test -n "$NVCC_LAUNCHER"],
        [AC_MSG_CHECKING([the launcher of nvcc])
         AS_IF([command -v ${NVCC_LAUNCHER%% *} >/dev/null 2>&1],
               [AC_MSG_RESULT([$NVCC_LAUNCHER])],
               [AC_MSG_RESULT([not found])
                AC_MSG_ERROR([NVCC_LAUNCHER="$NVCC_LAUNCHER": ${NVCC_LAUNCHER%% *} is not a command])])])

  check_pkg_nvcc_dir=$(mktemp -d)
  cat > "$check_pkg_nvcc_dir/t.cu" <<'NVCCEOF'
__global__ void ndet_probe(int *p) { *p = (int)threadIdx.x; }
extern "C" int ndet_probe_launch(int *p) { ndet_probe<<<1, 1>>>(p); return 0; }
NVCCEOF
  check_pkg_nvcc_options="gencode fp8-gencode"
  AS_IF([test "$enable_all_ranks_kernels" = yes],
        [check_pkg_nvcc_options="$check_pkg_nvcc_options all-ranks-gencode"])
  for check_pkg_nvcc_option in $check_pkg_nvcc_options; do
    AS_CASE([$check_pkg_nvcc_option],
            [gencode], [check_pkg_nvcc_flags=$NVCC_GENCODE],
            [fp8-gencode], [check_pkg_nvcc_flags=$NVCC_FP8_GENCODE],
            [check_pkg_nvcc_flags=$NVCC_ALL_RANKS_GENCODE])
    AC_MSG_CHECKING([whether $NVCC compiles a kernel for $check_pkg_nvcc_flags])
    AS_IF([$NVCC_LAUNCHER $NVCC $check_pkg_nvcc_flags -c "$check_pkg_nvcc_dir/t.cu" -o "$check_pkg_nvcc_dir/t.o" >&AS_MESSAGE_LOG_FD 2>&1],
          [AC_MSG_RESULT([yes])],
          [AC_MSG_RESULT([no])
           rm -rf "$check_pkg_nvcc_dir"
           AC_MSG_ERROR([$NVCC cannot compile for "$check_pkg_nvcc_flags"; see config.log or pass --with-nvcc-$check_pkg_nvcc_option=])])
  done
  NVCC_COMPRESS=
  AS_IF([test "$enable_fatbin_compression" != no],
        [AC_MSG_CHECKING([whether $NVCC compresses the fatbin (-Xfatbin -compress-all)])
         AS_IF([$NVCC_LAUNCHER $NVCC -Xfatbin -compress-all $NVCC_GENCODE -c "$check_pkg_nvcc_dir/t.cu" -o "$check_pkg_nvcc_dir/t.o" >&AS_MESSAGE_LOG_FD 2>&1],
               [NVCC_COMPRESS="-Xfatbin -compress-all"
                AC_MSG_RESULT([yes])],
               [AC_MSG_RESULT([no])])])
  rm -rf "$check_pkg_nvcc_dir"
  AS_IF([test -z "$NVCC_COMPRESS"], [NDET_DEFAULT_GENCODE=no])
  AC_SUBST([NVCC_COMPRESS])
  # The default targets, compressed: the binary size budget applies (test/test_binaries.sh).
  AC_SUBST([NDET_DEFAULT_GENCODE])
  AC_SUBST([NVCC])
  AC_SUBST([NVCC_GENCODE])
  AC_SUBST([NVCC_ALL_RANKS_GENCODE])
  AC_SUBST([NVCC_FP8_GENCODE])
])
