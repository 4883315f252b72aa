/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The tuner plugin's logic (src/preload/ndet_tuner.c, compiled in): which entries of NCCL's
 * cost table survive for each NCCL_DET_TUNER_* setting, the channel count, what is
 * left alone (other collectives, NCCL_DET_ENABLE=0, entries NCCL ruled out), one WARN
 * when nothing NCCL offers can be pinned, and init/getCollInfo never failing.
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

#include "test/fake_nccl/fake_nccl.h"
#include "common/ndet_env.h"
#include "common/ndet_log.h"
#include "common/ndet_settings.h"
#include "preload/ndet_tuner.h"

#define ALGOS  NDET_TUNER_V5_ALGORITHMS
#define PROTOS NDET_TUNER_V5_PROTOCOLS
#define IGNORE NDET_NCCL_ALGO_PROTO_IGNORE

extern const ndet_tuner_v5_t ncclTunerPlugin_v5;

static char log_path[4096];

static void reparse(void)
{
	ndet_env_reset_for_testing("/nonexistent/nccl.conf");
	ndet_log_reset_for_testing();
	ndet_settings_reset_for_testing();
	(void)ndet_settings_get();
}

static int setup(void **state)
{
	static const char *const variables[] = {"NCCL_DET_ENABLE", "NCCL_DET_TUNER_ALGO",
						"NCCL_DET_TUNER_PROTO", "NCCL_DET_TUNER_CHANNELS",
						"NCCL_CONF_FILE"};
	for (size_t i = 0; i < sizeof(variables) / sizeof(variables[0]); i++)
		if (unsetenv(variables[i]) != 0)
			return -1;
	if (setenv("HOME", "/nonexistent", 1) != 0 ||
	    setenv("NCCL_DET_DEBUG_FILE", log_path, 1) != 0)
		return -1;
	FILE *file = fopen(log_path, "w");
	if (file == NULL || fclose(file) != 0)
		return -1;
	reparse();
	return 0;
}

static int setup_group(void **state)
{
	return fake_nccl_trace_temp(log_path, sizeof(log_path));
}

static int teardown_group(void **state)
{
	ndet_log_reset_for_testing();
	return unlink(log_path);
}

/* NCCL's table: NVLS, NVLS-tree and PAT ruled out, ring/LL cheapest. */
static void fill(float table[ALGOS][PROTOS])
{
	for (int algo = 0; algo < ALGOS; algo++)
		for (int proto = 0; proto < PROTOS; proto++)
			table[algo][proto] =
				algo >= 4 ? IGNORE : 10.0f + (float)(algo * PROTOS + proto);
	table[NDET_NCCL_ALGO_RING][NDET_NCCL_PROTO_LL] = 1.0f;
}

/* Entries left selectable, as a bit mask over algo * PROTOS + proto. */
static unsigned selectable(float table[ALGOS][PROTOS])
{
	unsigned mask = 0;
	for (int algo = 0; algo < ALGOS; algo++)
		for (int proto = 0; proto < PROTOS; proto++)
			if (table[algo][proto] != IGNORE)
				mask |= 1u << (algo * PROTOS + proto);
	return mask;
}

#define BIT(algo, proto) (1u << ((algo)*PROTOS + (proto)))

static ndet_tuner_outcome_t apply_settings(float table[ALGOS][PROTOS], int *channels)
{
	struct ndet_tuner_pin pin;
	reparse();
	ndet_tuner_pin_from_settings(ndet_settings_get(), &pin);
	fill(table);
	*channels = 0;
	return ndet_tuner_apply(&pin, NDET_NCCL_FUNC_ALLREDUCE, &table[0][0], ALGOS, PROTOS,
				channels);
}

static void test_tuner_default_pins_tree_simple_one_channel(void **state)
{
	float table[ALGOS][PROTOS];
	int channels;
	assert_int_equal(apply_settings(table, &channels), NDET_TUNER_PINNED);
	assert_int_equal(selectable(table), BIT(NDET_NCCL_ALGO_TREE, NDET_NCCL_PROTO_SIMPLE));
	/* The surviving entry keeps NCCL's cost. */
	assert_true(table[NDET_NCCL_ALGO_TREE][NDET_NCCL_PROTO_SIMPLE] == 12.0f);
	assert_int_equal(channels, 1);
}

static void test_tuner_settings(void **state)
{
	static const struct {
		const char *algo, *proto, *channels;
		unsigned expected;
		int want_channels;
	} cases[] = {
		{"ring", "ll128", "4", BIT(1, NDET_NCCL_PROTO_LL128), 4},
		{"tree", "ll", "0", BIT(0, NDET_NCCL_PROTO_LL), 0},
		/* Only the algorithm: NCCL picks among its protocols. */
		{"ring", "nccl", "2", BIT(1, 0) | BIT(1, 1) | BIT(1, 2), 2},
		/* Only the protocol: any algorithm NCCL offers with it. */
		{"nccl", "simple", "1", BIT(0, 2) | BIT(1, 2) | BIT(2, 2) | BIT(3, 2), 1},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(setenv("NCCL_DET_TUNER_ALGO", cases[i].algo, 1), 0);
		assert_int_equal(setenv("NCCL_DET_TUNER_PROTO", cases[i].proto, 1), 0);
		assert_int_equal(setenv("NCCL_DET_TUNER_CHANNELS", cases[i].channels, 1), 0);
		float table[ALGOS][PROTOS];
		int channels;
		assert_int_equal(apply_settings(table, &channels), NDET_TUNER_PINNED);
		assert_int_equal(selectable(table), cases[i].expected);
		assert_int_equal(channels, cases[i].want_channels);
	}
}

/* Nothing pinned at all: NCCL's table and channel count stand. */
static void test_tuner_nothing_pinned(void **state)
{
	float table[ALGOS][PROTOS];
	float fresh[ALGOS][PROTOS];
	int channels;
	fill(fresh);
	assert_int_equal(setenv("NCCL_DET_TUNER_ALGO", "nccl", 1), 0);
	assert_int_equal(setenv("NCCL_DET_TUNER_PROTO", "nccl", 1), 0);
	assert_int_equal(setenv("NCCL_DET_TUNER_CHANNELS", "0", 1), 0);
	assert_int_equal(apply_settings(table, &channels), NDET_TUNER_UNTOUCHED);
	assert_memory_equal(table, fresh, sizeof(fresh));
	assert_int_equal(channels, 0);

	/* NCCL_DET_ENABLE=0: the default pin is off too. */
	assert_int_equal(unsetenv("NCCL_DET_TUNER_ALGO"), 0);
	assert_int_equal(unsetenv("NCCL_DET_TUNER_PROTO"), 0);
	assert_int_equal(unsetenv("NCCL_DET_TUNER_CHANNELS"), 0);
	assert_int_equal(setenv("NCCL_DET_ENABLE", "0", 1), 0);
	assert_int_equal(apply_settings(table, &channels), NDET_TUNER_UNTOUCHED);
	assert_memory_equal(table, fresh, sizeof(fresh));
	assert_int_equal(channels, 0);
}

/* Other collectives keep NCCL's choice. */
static void test_tuner_other_collectives(void **state)
{
	struct ndet_tuner_pin pin;
	ndet_tuner_pin_from_settings(ndet_settings_get(), &pin);
	for (int coll = 0; coll < 15; coll++) {
		if (coll == NDET_NCCL_FUNC_ALLREDUCE)
			continue;
		float table[ALGOS][PROTOS];
		float fresh[ALGOS][PROTOS];
		fill(table);
		fill(fresh);
		int channels = 0;
		assert_int_equal(
			ndet_tuner_apply(&pin, coll, &table[0][0], ALGOS, PROTOS, &channels),
			NDET_TUNER_UNTOUCHED);
		assert_memory_equal(table, fresh, sizeof(fresh));
		assert_int_equal(channels, 0);
	}
}

/* An entry NCCL ruled out is never revived; if that was ours, NCCL's choice stands. */
static void test_tuner_unavailable(void **state)
{
	struct ndet_tuner_pin pin;
	ndet_tuner_pin_from_settings(ndet_settings_get(), &pin);
	float table[ALGOS][PROTOS];
	float before[ALGOS][PROTOS];
	fill(table);
	table[NDET_NCCL_ALGO_TREE][NDET_NCCL_PROTO_SIMPLE] = IGNORE;
	memcpy(before, table, sizeof(before));
	int channels = 0;
	assert_int_equal(ndet_tuner_apply(&pin, NDET_NCCL_FUNC_ALLREDUCE, &table[0][0], ALGOS,
					  PROTOS, &channels),
			 NDET_TUNER_UNAVAILABLE);
	assert_memory_equal(table, before, sizeof(before));
	assert_int_equal(channels, 0);
	assert_int_equal(
		ndet_tuner_apply(&pin, NDET_NCCL_FUNC_ALLREDUCE, NULL, ALGOS, PROTOS, &channels),
		NDET_TUNER_UNAVAILABLE);

	/* Through the plugin: success for NCCL, one WARN however often. */
	for (int call = 0; call < 3; call++) {
		fill(table);
		table[NDET_NCCL_ALGO_TREE][NDET_NCCL_PROTO_SIMPLE] = IGNORE;
		assert_int_equal(ncclTunerPlugin_v5.getCollInfo(NULL, NDET_NCCL_FUNC_ALLREDUCE, 64,
								1, (float **)table, ALGOS, PROTOS,
								0, &channels),
				 ncclSuccess);
	}
	assert_int_equal(fake_nccl_file_count(log_path, "NCCL-DET WARN",
					      "no all-reduce with "
					      "algorithm tree and protocol simple"),
			 1);
}

/* init never fails, whatever NCCL passes; bad settings only WARN. */
static void test_tuner_init_never_fails(void **state)
{
	assert_int_equal(setenv("NCCL_DET_TUNER_ALGO", "nvls", 1), 0);
	assert_int_equal(setenv("NCCL_DET_TUNER_CHANNELS", "1000", 1), 0);
	reparse();
	void *context = NULL;
	assert_int_equal(ncclTunerPlugin_v5.init(&context, 0, 0, 0, NULL, NULL, NULL), ncclSuccess);
	assert_non_null(context);
	assert_int_equal(ncclTunerPlugin_v5.init(NULL, 1, 8, 2, NULL, NULL, NULL), ncclSuccess);
	assert_int_equal(ncclTunerPlugin_v5.finalize(context), ncclSuccess);
	assert_int_equal(fake_nccl_file_count(log_path, "NCCL-DET WARN", "NCCL_DET_TUNER_"), 2);
	/* The defaults hold. */
	float table[ALGOS][PROTOS];
	int channels = 0;
	fill(table);
	assert_int_equal(ncclTunerPlugin_v5.getCollInfo(context, NDET_NCCL_FUNC_ALLREDUCE, 64, 1,
							(float **)table, ALGOS, PROTOS, 0,
							&channels),
			 ncclSuccess);
	assert_int_equal(selectable(table), BIT(NDET_NCCL_ALGO_TREE, NDET_NCCL_PROTO_SIMPLE));
	assert_int_equal(channels, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_tuner_default_pins_tree_simple_one_channel, setup),
		cmocka_unit_test_setup(test_tuner_settings, setup),
		cmocka_unit_test_setup(test_tuner_nothing_pinned, setup),
		cmocka_unit_test_setup(test_tuner_other_collectives, setup),
		cmocka_unit_test_setup(test_tuner_unavailable, setup),
		cmocka_unit_test_setup(test_tuner_init_never_fails, setup),
	};
	return cmocka_run_group_tests(tests, setup_group, teardown_group);
}
