/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/ndet_status.h"

static void test_status_to_nccl_maps_every_status(void **state)
{
	(void)state;
	assert_int_equal(ndet_status_to_nccl(NDET_OK), ncclSuccess);
	assert_int_equal(ndet_status_to_nccl(NDET_IN_PROGRESS), ncclInProgress);
	assert_int_equal(ndet_status_to_nccl(NDET_ERR_INVALID_ARGUMENT), ncclInvalidArgument);
	assert_int_equal(ndet_status_to_nccl(NDET_ERR_INVALID_USAGE), ncclInvalidUsage);
	assert_int_equal(ndet_status_to_nccl(NDET_ERR_UNSUPPORTED), ncclInvalidUsage);
	assert_int_equal(ndet_status_to_nccl(NDET_ERR_SYSTEM), ncclSystemError);
	assert_int_equal(ndet_status_to_nccl(NDET_ERR_CUDA), ncclUnhandledCudaError);
	assert_int_equal(ndet_status_to_nccl(NDET_ERR_REMOTE), ncclRemoteError);
	assert_int_equal(ndet_status_to_nccl(NDET_ERR_INTERNAL), ncclInternalError);
	assert_int_equal(ndet_status_to_nccl(NDET_ERR_NCCL), ncclInternalError);
	assert_int_equal(ndet_status_to_nccl((ndet_status_t)999), ncclInternalError);
}

static void test_status_round_trips_nccl_codes(void **state)
{
	(void)state;
	const ncclResult_t codes[] = {ncclSuccess,       ncclUnhandledCudaError, ncclSystemError,
				      ncclInternalError, ncclInvalidArgument,    ncclInvalidUsage,
				      ncclRemoteError,   ncclInProgress};
	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
		assert_int_equal(ndet_status_to_nccl(ndet_status_from_nccl(codes[i])), codes[i]);
	assert_int_equal(ndet_status_from_nccl((ncclResult_t)77), NDET_ERR_NCCL);
}

static void test_status_names_are_distinct(void **state)
{
	(void)state;
	for (int a = 0; a < NDET_STATUS_COUNT; a++) {
		assert_non_null(ndet_status_name((ndet_status_t)a));
		assert_true(strncmp(ndet_status_name((ndet_status_t)a), "NDET_", 5) == 0);
		for (int b = a + 1; b < NDET_STATUS_COUNT; b++)
			assert_string_not_equal(ndet_status_name((ndet_status_t)a),
						ndet_status_name((ndet_status_t)b));
	}
	assert_string_equal(ndet_status_name((ndet_status_t)-1), "NDET_STATUS_UNKNOWN");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_status_to_nccl_maps_every_status),
		cmocka_unit_test(test_status_round_trips_nccl_codes),
		cmocka_unit_test(test_status_names_are_distinct),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
