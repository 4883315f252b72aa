/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Run by test_preload_local.sh with libnccl-det.so preloaded.  This program does
 * not link NCCL: it dlopen's test_preload_ext (which needs libnccl.so.2, the fake)
 * RTLD_LOCAL, as Python loads a framework extension, and calls NCCL through it.
 * The shim must still find the fake (already-loaded object strategy), never
 * itself, and the data must make the round trip.
 */
#include "config.h"

#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "test/fake_nccl/fake_nccl.h"

typedef int (*ext_run_t)(float *values, int count, int *version);

static const char *required_env(const char *name)
{
	const char *value = getenv(name);
	if (value == NULL || value[0] == '\0')
		fail_msg("%s is not set (run through test_preload_local.sh)", name);
	return value;
}

static const char *object_of(const void *address)
{
	Dl_info info;
	if (address == NULL || dladdr(address, &info) == 0 || info.dli_fname == NULL)
		return "";
	const char *base = strrchr(info.dli_fname, '/');
	return base != NULL ? base + 1 : info.dli_fname;
}

static void test_calls_through_local_library_reach_nccl(void **state)
{
	(void)state;
	/* The situation under test: nccl-det global, no NCCL in the global scope. */
	/* libnccl-det.so, or its host-only-backend twin libnccl-det-fake.so. */
	assert_int_equal(strncmp(object_of(dlsym(RTLD_DEFAULT, "ncclAllReduce")), "libnccl-det",
				 strlen("libnccl-det")),
			 0);
	assert_null(dlsym(RTLD_DEFAULT, "pncclAllReduce"));

	void *ext = dlopen(required_env("TEST_PRELOAD_EXT"), RTLD_NOW | RTLD_LOCAL);
	if (ext == NULL)
		fail_msg("dlopen: %s", dlerror());
	assert_null(dlsym(RTLD_DEFAULT, "pncclAllReduce"));
	ext_run_t run = (ext_run_t)dlsym(ext, "test_preload_ext_run");
	assert_non_null(run);

	float values[2][4] = {{1, 2, 3, 4}, {10, 20, 30, 40}};
	int version = 0;
	assert_int_equal(run(&values[0][0], 4, &version), 0);
	assert_int_equal(version, FAKE_NCCL_DEFAULT_VERSION);
	for (int rank = 0; rank < 2; rank++)
		for (int i = 0; i < 4; i++)
			assert_true(values[rank][i] == 11.0f * (float)(i + 1));

	const char *trace = required_env("FAKE_NCCL_TRACE");
	/* With nccl-det enabled (host-only backend) the all-reduce is diverted. */
	const char *diverted = getenv("TEST_PRELOAD_DIVERTED");
	if (diverted != NULL && strcmp(diverted, "1") == 0) {
		assert_int_equal(fake_nccl_trace_count(trace, "ncclAllReduce"), 0);
		assert_true(fake_nccl_trace_count(trace, "ncclAllGather") > 0);
	} else {
		assert_int_equal(fake_nccl_trace_count(trace, "ncclAllReduce"), 2);
	}
	assert_int_equal(fake_nccl_trace_count(trace, "ncclCommInitRank"), 2);
	/* NCCL's own calls to its public names stayed inside it. */
	assert_int_equal(fake_nccl_trace_count(trace, "ncclBroadcast"), 2);
	assert_int_equal(fake_nccl_trace_count(trace, "ncclMemFree"), 2);
	assert_int_equal(dlclose(ext), 0);
}

int main(void)
{
	if (getenv("LD_PRELOAD") == NULL || strstr(getenv("LD_PRELOAD"), "libnccl-det") == NULL) {
		fprintf(stderr, "SKIP: run through test_preload_local.sh (needs the preload)\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_calls_through_local_library_reach_nccl),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
