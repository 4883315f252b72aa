/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Group fixture of the CMocka programs that play libnccl-det.so in front of the fake
 * NCCL (test_divert, test_faults): WARN logs into a fresh file, a fake NCCL that
 * gives up a stuck rendezvous after 20 s instead of hanging `make check`, and the
 * host-only backend in place of the CUDA engine.
 */
#ifndef NDET_DIVERT_FIXTURE_H_
#define NDET_DIVERT_FIXTURE_H_

#include <stddef.h>

/*
 * Create the log file (and, when trace_path is not NULL, a trace file name) and
 * install the backend.  Returns 0, or -1 on error.
 */
int ndet_divert_fixture_start(char *log_path, size_t log_size, char *trace_path, size_t trace_size);

/*
 * Before each test: unset the `count` variables of `knobs`, empty the files (the
 * trace only when not NULL), parse the settings again and reset the backend.
 * Returns 0, or -1 on error.
 */
int ndet_divert_fixture_reset(const char *const knobs[], size_t count, const char *log_path,
			      const char *trace_path);

/* Free the backend's quarantined pools, forget the logger, remove the files. */
void ndet_divert_fixture_stop(const char *log_path, const char *trace_path);

#endif /* NDET_DIVERT_FIXTURE_H_ */
