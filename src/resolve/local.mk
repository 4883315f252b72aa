# Finding the real NCCL and its functions.  Two variants: in front of the
# application's NCCL (LD_PRELOAD, plugins), and as libnccl.so.2 itself (the drop-in:
# its own search order).
noinst_LTLIBRARIES += src/resolve/libndet_resolve.la src/resolve/libndet_resolve_dropin.la
src_resolve_libndet_resolve_la_SOURCES = src/resolve/ndet_resolve.c src/resolve/ndet_resolve.h
src_resolve_libndet_resolve_dropin_la_SOURCES = $(src_resolve_libndet_resolve_la_SOURCES)
src_resolve_libndet_resolve_dropin_la_CPPFLAGS = $(AM_CPPFLAGS) -DNDET_BUILD_DROPIN=1
