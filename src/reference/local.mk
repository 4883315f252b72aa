# The CPU reference of the determinism contract: the oracle the tests and the
# benchmark's checks compare with.  Not linked into the installed libraries.  In its
# own library so its flags hold whoever links it: contraction into FMAs or fast-math
# reassociation would change the bits the GPU is checked against.
noinst_LTLIBRARIES += src/reference/libndet_reference.la
src_reference_libndet_reference_la_SOURCES = src/reference/ndet_reference.c \
	src/reference/ndet_reference.h
src_reference_libndet_reference_la_CFLAGS = $(AM_CFLAGS) -ffp-contract=off -fno-fast-math
