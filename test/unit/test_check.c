/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The NCCL and system check macros: status mapping, the jump to cleanup, and one
 * WARN naming the call and the cause.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/ndet_check.h"

static int cleanup_runs;

static ncclResult_t fake_nccl_call(ncclResult_t result)
{
	return result;
}

static ndet_status_t run_nccl(ncclResult_t result)
{
	ndet_status_t status = NDET_OK;
	NDET_NCCL_CHECK_GOTO(fake_nccl_call(result), status, out);
	return status;
out:
	cleanup_runs++;
	return status;
}

static ndet_status_t run_sys(int value, int error)
{
	ndet_status_t status = NDET_OK;
	errno = error;
	NDET_SYS_CHECK_GOTO(value, status, out);
	return status;
out:
	cleanup_runs++;
	return status;
}

static ndet_status_t run_errno(int value)
{
	ndet_status_t status = NDET_OK;
	NDET_ERRNO_CHECK_GOTO(value, status, out);
	return status;
out:
	cleanup_runs++;
	return status;
}

static char log_path[] = "/tmp/ndet-test-check-XXXXXX";

static int count_lines(const char *needle)
{
	FILE *file = fopen(log_path, "r");
	char line[2048];
	int lines = 0;
	assert_non_null(file);
	while (fgets(line, sizeof(line), file) != NULL)
		lines += strstr(line, needle) != NULL;
	fclose(file);
	return lines;
}

static int setup(void **state)
{
	(void)state;
	int fd = mkstemp(log_path);
	assert_true(fd >= 0);
	close(fd);
	setenv("NCCL_DET_DEBUG_FILE", log_path, 1);
	setenv("NCCL_DET_DEBUG", "WARN", 1);
	ndet_log_reset_for_testing();
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	unlink(log_path);
	return 0;
}

static void test_nccl_check(void **state)
{
	(void)state;
	cleanup_runs = 0;
	assert_int_equal(run_nccl(ncclSuccess), NDET_OK);
	assert_int_equal(run_nccl(ncclInProgress), NDET_OK); /* not an error: the caller polls */
	assert_int_equal(cleanup_runs, 0);
	assert_int_equal(run_nccl(ncclRemoteError), NDET_ERR_REMOTE);
	assert_int_equal(run_nccl(ncclInvalidArgument), NDET_ERR_INVALID_ARGUMENT);
	assert_int_equal(run_nccl(ncclSystemError), NDET_ERR_SYSTEM);
	assert_int_equal(cleanup_runs, 3);
	assert_int_equal(count_lines("fake_nccl_call(result) failed: NCCL error 6"), 1);
}

static void test_sys_check(void **state)
{
	(void)state;
	cleanup_runs = 0;
	assert_int_equal(run_sys(0, 0), NDET_OK);
	assert_int_equal(run_sys(-1, ENOENT), NDET_ERR_SYSTEM);
	assert_int_equal(cleanup_runs, 1);
	assert_int_equal(count_lines("No such file or directory (errno 2)"), 1);
	assert_int_equal(run_errno(0), NDET_OK);
	assert_int_equal(run_errno(EBUSY), NDET_ERR_SYSTEM);
	assert_int_equal(cleanup_runs, 2);
	assert_int_equal(count_lines("busy (errno 16)"), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_nccl_check),
		cmocka_unit_test(test_sys_check),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
