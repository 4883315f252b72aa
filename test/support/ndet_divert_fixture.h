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

#include <nccl.h>

#include "kernels/ndet_types.h"

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

/*
 * CMocka programs with one log and one trace file (test_divert, test_collectives):
 * the group hooks start and stop the fixture on these files; a program's per-test
 * setup passes them to ndet_divert_fixture_reset with its own knobs.
 */
extern char ndet_divert_log[4096];
extern char ndet_divert_trace[4096];
int ndet_divert_group_setup(void **state);
int ndet_divert_group_teardown(void **state);

/* Settings are read once per process: read them again after changing the environment. */
void ndet_divert_settings_changed(void);

/* Trace NCCL's calls into an empty ndet_divert_trace from now on; stop tracing. */
void ndet_divert_trace_on(void);
void ndet_divert_trace_off(void);

/* Calls of `function` in the trace; log lines holding needle1 (and needle2). */
int ndet_divert_traced(const char *function);
int ndet_divert_count_log(const char *needle1, const char *needle2);

/* NCCL's name of an nccl-det dtype and op. */
ncclDataType_t ndet_divert_nccl_type(ndet_dtype_t dtype);
ncclRedOp_t ndet_divert_nccl_op(ndet_op_t op);

#endif /* NDET_DIVERT_FIXTURE_H_ */
