#!/bin/sh
# Run by make check where configure found no CMocka (m4/check_pkg_cmocka.m4): the unit
# tests were not built, so make check must not pass.
echo "FAIL: CMocka >= 1.1 was not found at configure time, so the unit tests were not" \
	"built. Install libcmocka-dev (tools/install-deps.sh) and rerun configure, or" \
	"configure with --disable-tests to run the other tests alone." >&2
exit 1
