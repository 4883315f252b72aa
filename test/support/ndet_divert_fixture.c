/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * See ndet_divert_fixture.h.
 */
#include "config.h"

#include "test/support/ndet_divert_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "test/fake_nccl/fake_nccl.h"
#include "divert/ndet_comm.h"
#include "test/support/ndet_fake_backend.h"
#include "common/ndet_log.h"
#include "common/ndet_settings.h"

int ndet_divert_fixture_start(char *log_path, size_t log_size, char *trace_path, size_t trace_size)
{
	if (fake_nccl_trace_temp(log_path, log_size) != 0 ||
	    (trace_path != NULL && fake_nccl_trace_temp(trace_path, trace_size) != 0))
		return -1;
	if (setenv("NCCL_DET_DEBUG", "WARN", 1) != 0 ||
	    setenv("NCCL_DET_DEBUG_FILE", log_path, 1) != 0 ||
	    setenv("FAKE_NCCL_TIMEOUT_MS", "20000", 1) != 0)
		return -1;
	ndet_comm_set_backend_for_testing(&ndet_fake_backend);
	return 0;
}

static int ndet_divert_fixture_empty(const char *path)
{
	FILE *file = fopen(path, "w");
	return file != NULL && fclose(file) == 0 ? 0 : -1;
}

int ndet_divert_fixture_reset(const char *const knobs[], size_t count, const char *log_path,
			      const char *trace_path)
{
	for (size_t i = 0; i < count; i++)
		unsetenv(knobs[i]);
	if (ndet_divert_fixture_empty(log_path) != 0 ||
	    (trace_path != NULL && ndet_divert_fixture_empty(trace_path) != 0))
		return -1;
	/* Settings and log configuration are read once per process: read them again. */
	ndet_settings_reset_for_testing();
	ndet_log_reset_for_testing();
	ndet_fake_backend_reset();
	return 0;
}

void ndet_divert_fixture_stop(const char *log_path, const char *trace_path)
{
	ndet_fake_backend_reset();
	ndet_log_reset_for_testing();
	unlink(log_path);
	if (trace_path != NULL)
		unlink(trace_path);
}

ncclDataType_t ndet_divert_nccl_type(ndet_dtype_t dtype)
{
	static const ncclDataType_t types[NDET_DTYPE_COUNT] = {
		ncclFloat32, ncclFloat16,        ncclBfloat16,
		ncclFloat64, NDET_NCCL_FP8_E4M3, NDET_NCCL_FP8_E5M2};
	return types[dtype];
}

ncclRedOp_t ndet_divert_nccl_op(ndet_op_t op)
{
	static const ncclRedOp_t ops[NDET_OP_COUNT] = {ncclSum, ncclProd, ncclMin, ncclMax,
						       ncclAvg};
	return ops[op];
}

char ndet_divert_log[4096];
char ndet_divert_trace[4096];

int ndet_divert_group_setup(void **state)
{
	(void)state;
	return ndet_divert_fixture_start(ndet_divert_log, sizeof(ndet_divert_log),
					 ndet_divert_trace, sizeof(ndet_divert_trace));
}

int ndet_divert_group_teardown(void **state)
{
	(void)state;
	ndet_divert_fixture_stop(ndet_divert_log, ndet_divert_trace);
	return 0;
}

void ndet_divert_settings_changed(void)
{
	ndet_settings_reset_for_testing();
	ndet_log_reset_for_testing();
}

void ndet_divert_trace_on(void)
{
	if (ndet_divert_fixture_empty(ndet_divert_trace) != 0 ||
	    setenv("FAKE_NCCL_TRACE", ndet_divert_trace, 1) != 0) {
		fprintf(stderr, "cannot trace into %s\n", ndet_divert_trace);
		abort();
	}
}

void ndet_divert_trace_off(void)
{
	unsetenv("FAKE_NCCL_TRACE");
}

int ndet_divert_traced(const char *function)
{
	return fake_nccl_trace_count(ndet_divert_trace, function);
}

int ndet_divert_count_log(const char *needle1, const char *needle2)
{
	return fake_nccl_file_count(ndet_divert_log, needle1, needle2);
}
