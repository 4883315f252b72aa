/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Settings: defaults, the grammar of each type, one WARN per bad value with the
 * default kept, conf-file precedence, the agreement hash and parse-once under threads.
 * Every test runs in a fresh temporary HOME with its own "system" conf file and log
 * file, so the machine's /etc/nccl.conf and the caller's environment cannot leak in.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/ndet_env.h"
#include "common/ndet_log.h"
#include "common/ndet_settings.h"
#include "protocol/ndet_engine_config.h"

#define MIB (UINT64_C(1) << 20)
#define GIB (UINT64_C(1) << 30)
#define TIB (UINT64_C(1) << 40)

/* Every variable the code under test reads; cleared before each test. */
static const char *const test_variables[] = {
	"NCCL_DET_ENABLE",
	"NCCL_DET_STRICT",
	"NCCL_DET_STATS",
	"NCCL_DET_POOL_SIZE",
	"NCCL_DET_ONESHOT_MAX",
	"NCCL_DET_TIMEOUT",
	"NCCL_DET_MAX_MEMORY",
	"NCCL_DET_MAX_BLOCKS",
	"NCCL_DET_DEBUG_DELAY",
	"NCCL_DET_NCCL_LIBRARY",
	"NCCL_DET_TEST_FAIL",
	"NCCL_DET_TEST_HOST",
	"NCCL_DET_DEBUG",
	"NCCL_DET_DEBUG_SUBSYS",
	"NCCL_DET_DEBUG_FILE",
	"NCCL_DEBUG",
	"NCCL_DEBUG_SUBSYS",
	"NCCL_DEBUG_FILE",
	"NCCL_CONF_FILE",
	"NCCL_DET_TUNER_ALGO",
	"NCCL_DET_TUNER_PROTO",
	"NCCL_DET_TUNER_CHANNELS",
	"NCCL_DET_EXPECT",
	"NCCL_DET_LL_MAX",
	"NCCL_DET_LL_WIDE_MIN",
	"NCCL_DET_PUSH_MIN",
	"NCCL_DET_HOSTS_STAGING",
	/* Misspellings the unknown-name test sets. */
	"NCCL_DET_ENABLED",
	"NCCL_DET_POOLSIZE",
	"NCCL_DET_XYZZY_FROBNICATE",
};

static const char *const test_files[] = {"log", "system.conf", ".nccl.conf", "other.conf"};

static char test_dir[PATH_MAX];
static char test_log_path[PATH_MAX];
static char test_system_conf[PATH_MAX];

static void test_path(char *path, size_t size, const char *name)
{
	int length = snprintf(path, size, "%s/%s", test_dir, name);
	assert_true(length > 0 && (size_t)length < size);
}

static void test_write_file(const char *name, const char *text)
{
	char path[PATH_MAX];
	test_path(path, sizeof(path), name);
	FILE *file = fopen(path, "w");
	assert_non_null(file);
	assert_int_equal(fputs(text, file) >= 0, 1);
	assert_int_equal(fclose(file), 0);
}

static void test_setenv(const char *name, const char *value)
{
	assert_int_equal(setenv(name, value, 1), 0);
}

/* Forget every cache: conf files, log level and file, parsed settings. */
static const struct ndet_settings *test_reparse(void)
{
	ndet_env_reset_for_testing(test_system_conf);
	ndet_log_reset_for_testing();
	assert_true(unlink(test_log_path) == 0 || errno == ENOENT);
	ndet_settings_reset_for_testing();
	return ndet_settings_get();
}

/* The whole log; the caller frees it.  A missing file reads as empty. */
static char *test_read_log(void)
{
	FILE *file = fopen(test_log_path, "r");
	if (file == NULL) {
		assert_int_equal(errno, ENOENT);
		char *empty = calloc(1, 1);
		assert_non_null(empty);
		return empty;
	}
	char *text = NULL;
	size_t size = 0;
	FILE *memory = open_memstream(&text, &size);
	assert_non_null(memory);
	char chunk[4096];
	size_t got;
	while ((got = fread(chunk, 1, sizeof(chunk), file)) > 0)
		assert_int_equal(fwrite(chunk, 1, got, memory), got);
	assert_int_equal(ferror(file), 0);
	assert_int_equal(fclose(file), 0);
	assert_int_equal(fclose(memory), 0);
	return text;
}

static int test_count_lines(const char *text, const char *needle)
{
	int count = 0;
	for (const char *line = text; *line != '\0';) {
		const char *end = strchr(line, '\n');
		size_t length = end != NULL ? (size_t)(end - line) : strlen(line);
		char *copy = strndup(line, length);
		assert_non_null(copy);
		if (strstr(copy, needle) != NULL)
			count++;
		free(copy);
		line += length + (end != NULL ? 1 : 0);
	}
	return count;
}

static int test_count_log_lines(const char *needle)
{
	char *log = test_read_log();
	int count = test_count_lines(log, needle);
	free(log);
	return count;
}

static char *test_dump(void)
{
	char *text = NULL;
	size_t size = 0;
	FILE *memory = open_memstream(&text, &size);
	assert_non_null(memory);
	ndet_settings_dump(memory);
	assert_int_equal(fclose(memory), 0);
	return text;
}

static int test_setup(void **state)
{
	const char *tmp = getenv("TMPDIR");
	int length = snprintf(test_dir, sizeof(test_dir), "%s/ndet-settings-XXXXXX",
			      tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
	if (length < 0 || (size_t)length >= sizeof(test_dir) || mkdtemp(test_dir) == NULL)
		return -1;
	test_path(test_log_path, sizeof(test_log_path), "log");
	test_path(test_system_conf, sizeof(test_system_conf), "system.conf");
	for (size_t i = 0; i < sizeof(test_variables) / sizeof(test_variables[0]); i++) {
		if (unsetenv(test_variables[i]) != 0)
			return -1;
	}
	if (setenv("HOME", test_dir, 1) != 0 ||
	    setenv("NCCL_DET_DEBUG_FILE", test_log_path, 1) != 0)
		return -1;
	test_reparse();
	return 0;
}

static int test_teardown(void **state)
{
	ndet_log_reset_for_testing();
	for (size_t i = 0; i < sizeof(test_files) / sizeof(test_files[0]); i++) {
		char path[PATH_MAX];
		test_path(path, sizeof(path), test_files[i]);
		if (unlink(path) != 0 && errno != ENOENT)
			return -1;
	}
	return rmdir(test_dir);
}

static void test_settings_defaults(void **state)
{
	const struct ndet_settings *settings = test_reparse();
	assert_true(settings->enable);
	assert_false(settings->strict);
	assert_false(settings->stats);
	assert_int_equal(settings->pool_size, 96 * MIB);
	assert_true(settings->oneshot_max == NDET_SETTINGS_SIZE_AUTO);
	assert_int_equal(settings->push_min, 4 * MIB);
	assert_int_equal(settings->ll_max, 256 * 1024);
	assert_int_equal(settings->ll_wide_min, 224 * 1024); /* NDET_PLAN_LL_WIDE_MIN */
	assert_int_equal(settings->timeout_ms, 1800 * 1000);
	assert_int_equal(settings->max_memory, GIB);
	assert_int_equal(settings->max_blocks, 96);
	assert_int_equal(settings->debug_delay_ns, 0);
	assert_string_equal(settings->nccl_library, "");
	assert_int_equal(settings->test_fail, NDET_FAULT_NONE);
	assert_int_equal(settings->test_fail_rank, -1);
	assert_int_equal(settings->tuner_algo, NDET_TUNER_ALGO_TREE);
	assert_int_equal(settings->tuner_proto, NDET_TUNER_PROTO_SIMPLE);
	assert_int_equal(settings->tuner_channels, 1);
	assert_string_equal(settings->expect, "");
	assert_int_equal(test_count_log_lines("WARN"), 0);
}

/* The tuner's words in any case, its channel range, and one WARN per bad value. */
static void test_settings_tuner_values(void **state)
{
	static const struct {
		const char *algo, *proto, *channels;
		int want_algo, want_proto, want_channels, warnings;
	} cases[] = {
		{"ring", "LL128", "0", NDET_TUNER_ALGO_RING, NDET_TUNER_PROTO_LL128, 0, 0},
		{"NCCL", "nccl", "64", NDET_TUNER_ALGO_NCCL, NDET_TUNER_PROTO_NCCL, 64, 0},
		{"Tree", "ll", "8", NDET_TUNER_ALGO_TREE, NDET_TUNER_PROTO_LL, 8, 0},
		/* NVLS and CollNet are not deterministic: refused like any unknown word. */
		{"nvls", "simple", "65", NDET_TUNER_ALGO_TREE, NDET_TUNER_PROTO_SIMPLE, 1, 2},
		{"tree ", "simple2", "-1", NDET_TUNER_ALGO_TREE, NDET_TUNER_PROTO_SIMPLE, 1, 3},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		test_setenv("NCCL_DET_TUNER_ALGO", cases[i].algo);
		test_setenv("NCCL_DET_TUNER_PROTO", cases[i].proto);
		test_setenv("NCCL_DET_TUNER_CHANNELS", cases[i].channels);
		const struct ndet_settings *settings = test_reparse();
		assert_int_equal(settings->tuner_algo, cases[i].want_algo);
		assert_int_equal(settings->tuner_proto, cases[i].want_proto);
		assert_int_equal(settings->tuner_channels, cases[i].want_channels);
		assert_int_equal(test_count_log_lines("NCCL-DET WARN"), cases[i].warnings);
	}
	assert_int_equal(test_count_log_lines("NCCL_DET_TUNER_CHANNELS=\"-1\""), 1);
	assert_int_equal(
		test_count_log_lines("expected one of nccl, tree, ring; using default tree"), 1);
	test_setenv("NCCL_DET_TUNER_ALGO", "ring");
	test_setenv("NCCL_DET_TUNER_PROTO", "ll");
	test_reparse();
	char *dump = test_dump();
	assert_int_equal(
		test_count_lines(dump, "NCCL_DET_TUNER_ALGO      ring         environment"), 1);
	assert_int_equal(
		test_count_lines(dump, "NCCL_DET_TUNER_PROTO     ll           environment"), 1);
	free(dump);
}

/* NCCL_DET_EXPECT (nccl-det-run): silent when it matches, one WARN per mismatch. */
static void test_settings_expect(void **state)
{
	char matching[64];
	snprintf(matching, sizeof(matching), "%s:1", PACKAGE_VERSION);
	test_setenv("NCCL_DET_EXPECT", matching);
	assert_string_equal(test_reparse()->expect, matching);
	assert_int_equal(test_count_log_lines("NCCL-DET WARN"), 0);

	test_setenv("NCCL_DET_EXPECT", "999.0.0:1");
	test_reparse();
	assert_int_equal(
		test_count_log_lines("but nccl-det-run started the job for another version "
				     "(NCCL_DET_EXPECT=999.0.0:1)"),
		1);
	assert_int_equal(test_count_log_lines("NCCL-DET WARN"), 1);

	snprintf(matching, sizeof(matching), "%s:0", PACKAGE_VERSION);
	test_setenv("NCCL_DET_EXPECT", matching);
	test_reparse();
	assert_int_equal(test_count_log_lines("NCCL_DET_ENABLE is 1 in this process but was 0"), 1);
	assert_int_equal(test_count_log_lines("NCCL-DET WARN"), 1);
	test_setenv("NCCL_DET_ENABLE", "0");
	test_reparse();
	assert_int_equal(test_count_log_lines("NCCL-DET WARN"), 0);

	test_setenv("NCCL_DET_EXPECT", "garbage");
	test_reparse();
	assert_int_equal(test_count_log_lines("NCCL_DET_EXPECT=\"garbage\" ignored"), 1);
	assert_int_equal(test_count_log_lines("NCCL-DET WARN"), 1);
}

static void test_settings_valid_values(void **state)
{
	test_setenv("NCCL_DET_ENABLE", "0");
	test_setenv("NCCL_DET_STRICT", "yes");
	test_setenv("NCCL_DET_STATS", "ON");
	test_setenv("NCCL_DET_POOL_SIZE", "64M");
	test_setenv("NCCL_DET_ONESHOT_MAX", "0");
	test_setenv("NCCL_DET_TIMEOUT", "60");
	test_setenv("NCCL_DET_MAX_MEMORY", "2GiB");
	test_setenv("NCCL_DET_MAX_BLOCKS", "128");
	test_setenv("NCCL_DET_DEBUG_DELAY", "10000000");
	test_setenv("NCCL_DET_NCCL_LIBRARY", "/opt/nccl/lib/libnccl.so.2");
	test_setenv("NCCL_DET_TEST_FAIL", "probe");
	const struct ndet_settings *settings = test_reparse();
	assert_false(settings->enable);
	assert_true(settings->strict);
	assert_true(settings->stats);
	assert_int_equal(settings->pool_size, 64 * MIB);
	assert_int_equal(settings->oneshot_max, 0);
	assert_int_equal(settings->timeout_ms, 60 * 1000);
	assert_int_equal(settings->max_memory, 2 * GIB);
	assert_int_equal(settings->max_blocks, 128);
	assert_int_equal(settings->debug_delay_ns, 10000000);
	assert_string_equal(settings->nccl_library, "/opt/nccl/lib/libnccl.so.2");
	assert_int_equal(settings->test_fail, NDET_FAULT_PROBE);
	assert_int_equal(settings->test_fail_rank, -1);
	assert_int_equal(test_count_log_lines("WARN"), 0);

	/* The bounds themselves are accepted. */
	test_setenv("NCCL_DET_POOL_SIZE", "1M");
	test_setenv("NCCL_DET_TIMEOUT", "1");
	test_setenv("NCCL_DET_MAX_MEMORY", "1T");
	test_setenv("NCCL_DET_MAX_BLOCKS", "1");
	test_setenv("NCCL_DET_ONESHOT_MAX", "1G");
	settings = test_reparse();
	assert_int_equal(settings->pool_size, MIB);
	assert_int_equal(settings->timeout_ms, 1000);
	assert_int_equal(settings->max_memory, TIB);
	assert_int_equal(settings->max_blocks, 1);
	assert_int_equal(settings->oneshot_max, GIB);

	/* "auto", in any case, where a size setting takes it; shown back as "auto". */
	test_setenv("NCCL_DET_ONESHOT_MAX", "AUTO");
	settings = test_reparse();
	assert_true(settings->oneshot_max == NDET_SETTINGS_SIZE_AUTO);
	assert_int_equal(test_count_log_lines("WARN"), 0);
	test_setenv("NCCL_DET_POOL_SIZE", "16GiB");
	test_setenv("NCCL_DET_TIMEOUT", "604800");
	settings = test_reparse();
	assert_int_equal(settings->pool_size, 16 * GIB);
	assert_int_equal(settings->timeout_ms, UINT64_C(604800000));
	assert_int_equal(test_count_log_lines("WARN"), 0);
}

static void test_settings_bool_spellings(void **state)
{
	static const struct {
		const char *text;
		bool value;
	} cases[] = {
		{"1", true},      {"true", true}, {"TRUE", true}, {"yes", true},
		{"Yes", true},    {"on", true},   {"0", false},   {"false", false},
		{"False", false}, {"no", false},  {"NO", false},  {"off", false},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		/* Start from the opposite of the expected value so a no-op parse fails. */
		test_setenv("NCCL_DET_STRICT", cases[i].text);
		test_setenv("NCCL_DET_ENABLE", cases[i].text);
		const struct ndet_settings *settings = test_reparse();
		assert_int_equal(settings->strict, cases[i].value);
		assert_int_equal(settings->enable, cases[i].value);
		assert_int_equal(test_count_log_lines("WARN"), 0);
	}
}

static void test_settings_size_suffixes(void **state)
{
	static const struct {
		const char *text;
		uint64_t bytes;
	} cases[] = {
		{"1048576", MIB},     {"1024K", MIB},   {"1024k", MIB},  {"1024KiB", MIB},
		{"1024KB", MIB},      {"1024kib", MIB}, {"3M", 3 * MIB}, {"3MiB", 3 * MIB},
		{"3MB", 3 * MIB},     {"3m", 3 * MIB},  {"2G", 2 * GIB}, {"2GiB", 2 * GIB},
		{"2gb", 2 * GIB},     {"1T", TIB},      {"1TiB", TIB},   {"1048577B", MIB + 1},
		{"1048577", MIB + 1}, {"0001M", MIB},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		test_setenv("NCCL_DET_MAX_MEMORY", cases[i].text);
		const struct ndet_settings *settings = test_reparse();
		if (settings->max_memory != cases[i].bytes)
			fail_msg("NCCL_DET_MAX_MEMORY=%s gave %llu", cases[i].text,
				 (unsigned long long)settings->max_memory);
		assert_int_equal(test_count_log_lines("WARN"), 0);
	}
}

struct test_bad_value {
	const char *name;
	const char *value;
	const char *shown;    /* how the WARN quotes the value */
	const char *accepted; /* part of the accepted range the WARN must name */
	const char *fallback; /* "using default X" */
};

static const struct test_bad_value test_bad_values[] = {
	{"NCCL_DET_ENABLE", "2", "\"2\"", "0/1, true/false", "using default 1"},
	/* The logger's own: a bad value WARNs and the logger keeps its default. */
	{"NCCL_DET_DEBUG", "LOUD", "\"LOUD\"", "VERSION, WARN, INFO, TRACE or NONE",
	 "using default \"\""},
	{"NCCL_DET_DEBUG_SUBSYS", "BOGUS", "\"BOGUS\"", "INIT, ENV, SETUP", "using default \"\""},
	{"NCCL_DET_DEBUG_SUBSYS", "INIT,COLLS", "\"INIT,COLLS\"", "optionally behind ^",
	 "using default \"\""},
	{"NCCL_DET_ENABLE", "maybe", "\"maybe\"", "yes/no or on/off", "using default 1"},
	{"NCCL_DET_ENABLE", "1 ", "\"1 \"", "0/1", "using default 1"},
	{"NCCL_DET_STRICT", "enable", "\"enable\"", "0/1", "using default 0"},
	{"NCCL_DET_STATS", "-1", "\"-1\"", "0/1", "using default 0"},
	{"NCCL_DET_POOL_SIZE", "abc", "\"abc\"", "[1MiB, 16GiB]", "using default 96MiB"},
	{"NCCL_DET_POOL_SIZE", "32MiBx", "\"32MiBx\"", "[1MiB, 16GiB]", "using default 96MiB"},
	{"NCCL_DET_POOL_SIZE", "32Ki", "\"32Ki\"", "[1MiB, 16GiB]", "using default 96MiB"},
	{"NCCL_DET_POOL_SIZE", "32MiBB", "\"32MiBB\"", "[1MiB, 16GiB]", "using default 96MiB"},
	{"NCCL_DET_POOL_SIZE", "-1", "\"-1\"", "[1MiB, 16GiB]", "using default 96MiB"},
	{"NCCL_DET_POOL_SIZE", "-64M", "\"-64M\"", "[1MiB, 16GiB]", "using default 96MiB"},
	{"NCCL_DET_POOL_SIZE", "+64M", "\"+64M\"", "[1MiB, 16GiB]", "using default 96MiB"},
	{"NCCL_DET_POOL_SIZE", "18446744073709551616", "\"18446744073709551616\"", "[1MiB, 16GiB]",
	 "using default 96MiB"},
	{"NCCL_DET_POOL_SIZE", "18446744073709551615", "\"18446744073709551615\"", "[1MiB, 16GiB]",
	 "using default 96MiB"},
	{"NCCL_DET_POOL_SIZE", "17179869184T", "\"17179869184T\"", "[1MiB, 16GiB]",
	 "using default 96MiB"},
	/* 2^64 + 2 MiB and 2^64 + 1 TiB: wrapped around they would look in range. */
	{"NCCL_DET_POOL_SIZE", "18446744073711648768", "\"18446744073711648768\"", "[1MiB, 16GiB]",
	 "using default 96MiB"},
	{"NCCL_DET_MAX_MEMORY", "16777217T", "\"16777217T\"", "[1MiB, 1TiB]", "using default 1GiB"},
	{"NCCL_DET_POOL_SIZE", "1023K", "\"1023K\"", "[1MiB, 16GiB]", "using default 96MiB"},
	{"NCCL_DET_POOL_SIZE", "16385M", "\"16385M\"", "[1MiB, 16GiB]", "using default 96MiB"},
	{"NCCL_DET_POOL_SIZE", "1.5M", "\"1.5M\"", "[1MiB, 16GiB]", "using default 96MiB"},
	{"NCCL_DET_POOL_SIZE", " 32M", "\" 32M\"", "[1MiB, 16GiB]", "using default 96MiB"},
	{"NCCL_DET_POOL_SIZE", "0x2000000", "\"0x2000000\"", "[1MiB, 16GiB]",
	 "using default 96MiB"},
	{"NCCL_DET_POOL_SIZE", "M", "\"M\"", "[1MiB, 16GiB]", "using default 96MiB"},
	{"NCCL_DET_ONESHOT_MAX", "1025M", "\"1025M\"", "[0, 1GiB]", "using default auto"},
	{"NCCL_DET_ONESHOT_MAX", "1P", "\"1P\"", "[0, 1GiB]", "using default auto"},
	{"NCCL_DET_ONESHOT_MAX", "automatic", "\"automatic\"", "auto, or bytes",
	 "using default auto"},
	{"NCCL_DET_POOL_SIZE", "auto", "\"auto\"", "[1MiB, 16GiB]", "using default 96MiB"},
	{"NCCL_DET_LL_MAX", "257K", "\"257K\"", "[0, 256KiB]", "using default 256KiB"},
	{"NCCL_DET_TIMEOUT", "0", "\"0\"", "[1, 604800]", "using default 1800"},
	{"NCCL_DET_TIMEOUT", "604801", "\"604801\"", "[1, 604800]", "using default 1800"},
	{"NCCL_DET_TIMEOUT", "10s", "\"10s\"", "[1, 604800]", "using default 1800"},
	{"NCCL_DET_TIMEOUT", "-5", "\"-5\"", "[1, 604800]", "using default 1800"},
	{"NCCL_DET_TIMEOUT", "99999999999999999999", "\"99999999999999999999\"", "[1, 604800]",
	 "using default 1800"},
	{"NCCL_DET_MAX_MEMORY", "1023K", "\"1023K\"", "[1MiB, 1TiB]", "using default 1GiB"},
	{"NCCL_DET_MAX_MEMORY", "2T", "\"2T\"", "[1MiB, 1TiB]", "using default 1GiB"},
	{"NCCL_DET_MAX_BLOCKS", "0", "\"0\"", "[1, 128]", "using default 96"},
	{"NCCL_DET_MAX_BLOCKS", "129", "\"129\"", "[1, 128]", "using default 96"},
	{"NCCL_DET_MAX_BLOCKS", "24abc", "\"24abc\"", "[1, 128]", "using default 96"},
	{"NCCL_DET_MAX_BLOCKS", "4294967320", "\"4294967320\"", "[1, 128]", "using default 96"},
	{"NCCL_DET_MAX_BLOCKS", "24K", "\"24K\"", "[1, 128]", "using default 96"},
	{"NCCL_DET_DEBUG_DELAY", "10000001", "\"10000001\"", "[0, 10000000]", "using default 0"},
	{"NCCL_DET_TEST_FAIL", "bogus", "\"bogus\"", "alloc, ipc_open, probe",
	 "using default none"},
	{"NCCL_DET_TEST_FAIL", "alloc@", "\"alloc@\"", "@RANK", "using default none"},
	{"NCCL_DET_TEST_FAIL", "alloc@x", "\"alloc@x\"", "@RANK", "using default none"},
	{"NCCL_DET_TEST_FAIL", "@1", "\"@1\"", "@RANK", "using default none"},
	{"NCCL_DET_TEST_FAIL", "alloc,,probe", "\"alloc,,probe\"", "@RANK", "using default none"},
	{"NCCL_DET_TEST_FAIL", "alloc,", "\"alloc,\"", "@RANK", "using default none"},
	{"NCCL_DET_TEST_FAIL", "alloc@1,probe", "\"alloc@1,probe\"", "@RANK", "using default none"},
	{"NCCL_DET_TEST_FAIL", "alloc@-1", "\"alloc@-1\"", "@RANK", "using default none"},
	{"NCCL_DET_TEST_FAIL", "alloc@2147483648", "\"alloc@2147483648\"", "@RANK",
	 "using default none"},
	{"NCCL_DET_TEST_FAIL", "alloc probe", "\"alloc probe\"", "@RANK", "using default none"},
	{"NCCL_DET_TEST_FAIL", "none,alloc", "\"none,alloc\"", "@RANK", "using default none"},
	{"NCCL_DET_TEST_HOST", "A,A,B,B", "\"A,A,B,B\"", "NAME@RANK", "using default \"\""},
	{"NCCL_DET_TEST_HOST", "A@", "\"A@\"", "NAME@RANK", "using default \"\""},
	{"NCCL_DET_TEST_HOST", "@0", "\"@0\"", "NAME@RANK", "using default \"\""},
	{"NCCL_DET_TEST_HOST", "A@0,", "\"A@0,\"", "NAME@RANK", "using default \"\""},
	{"NCCL_DET_TEST_HOST", "A@0;", "\"A@0;\"", "NAME@RANK", "using default \"\""},
	{"NCCL_DET_TEST_HOST", "A@0;;B@1", "\"A@0;;B@1\"", "NAME@RANK", "using default \"\""},
	{"NCCL_DET_TEST_HOST", "A@0;B", "\"A@0;B\"", "NAME@RANK", "using default \"\""},
	{"NCCL_DET_TEST_HOST", "A;B@1", "\"A;B@1\"", "NAME@RANK", "using default \"\""},
	{"NCCL_DET_TEST_HOST", "A@0,1;B@1", "\"A@0,1;B@1\"", "NAME@RANK", "using default \"\""},
	{"NCCL_DET_TEST_HOST", "A@-1", "\"A@-1\"", "NAME@RANK", "using default \"\""},
	{"NCCL_DET_TEST_HOST", "A@x", "\"A@x\"", "NAME@RANK", "using default \"\""},
	{"NCCL_DET_TEST_HOST", "A@2147483648", "\"A@2147483648\"", "NAME@RANK",
	 "using default \"\""},
	{"NCCL_DET_TEST_HOST", "node A", "\"node A\"", "NAME@RANK", "using default \"\""},
	{"NCCL_DET_TEST_HOST", "node/A", "\"node/A\"", "NAME@RANK", "using default \"\""},
	{"NCCL_DET_TEST_HOST", "A@0 ", "\"A@0 \"", "NAME@RANK", "using default \"\""},
	{"NCCL_DET_TEST_HOST", "0123456789012345678901234567890123456789012345678901234567890123",
	 "\"0123456789012345678901234567890123456789012345678901234567890123\"", "NAME@RANK",
	 "using default \"\""},
};

static void test_settings_invalid_values_keep_default_and_warn_once(void **state)
{
	struct ndet_settings defaults;
	memcpy(&defaults, test_reparse(), sizeof(defaults));
	for (size_t i = 0; i < sizeof(test_bad_values) / sizeof(test_bad_values[0]); i++) {
		const struct test_bad_value *bad = &test_bad_values[i];
		assert_int_equal(setenv(bad->name, bad->value, 1), 0);
		const struct ndet_settings *settings = test_reparse();
		if (memcmp(settings, &defaults, sizeof(defaults)) != 0)
			fail_msg("%s=\"%s\" changed the settings", bad->name, bad->value);
		/* Parsed once: asking again must not warn again. */
		assert_ptr_equal(ndet_settings_get(), settings);
		char *log = test_read_log();
		if (test_count_lines(log, "NCCL-DET WARN") != 1 || test_count_lines(log, "") != 1)
			fail_msg("%s=\"%s\": expected exactly one WARN line, log:\n%s", bad->name,
				 bad->value, log);
		char name_value[256];
		snprintf(name_value, sizeof(name_value), "%s=%s", bad->name, bad->shown);
		const char *needles[] = {name_value, bad->accepted, bad->fallback, "environment"};
		for (size_t n = 0; n < sizeof(needles) / sizeof(needles[0]); n++) {
			if (strstr(log, needles[n]) == NULL)
				fail_msg("%s=\"%s\": WARN lacks '%s':\n%s", bad->name, bad->value,
					 needles[n], log);
		}
		free(log);
		assert_int_equal(unsetenv(bad->name), 0);
	}
}

static void test_settings_too_long_library_path(void **state)
{
	char path[5000];
	memset(path, 'a', sizeof(path) - 1);
	path[0] = '/';
	path[sizeof(path) - 1] = '\0';
	test_setenv("NCCL_DET_NCCL_LIBRARY", path);
	const struct ndet_settings *settings = test_reparse();
	assert_string_equal(settings->nccl_library, "");
	char *log = test_read_log();
	assert_int_equal(test_count_lines(log, "NCCL-DET WARN"), 1);
	assert_non_null(strstr(log, "NCCL_DET_NCCL_LIBRARY=\"/aaaa"));
	assert_non_null(strstr(log, "shorter than 4096 bytes"));
	assert_non_null(strstr(log, "using default \"\""));
	free(log);

	/* One byte too long: no room left for the terminator. */
	path[sizeof(settings->nccl_library)] = '\0';
	test_setenv("NCCL_DET_NCCL_LIBRARY", path);
	settings = test_reparse();
	assert_string_equal(settings->nccl_library, "");
	assert_int_equal(settings->test_fail, NDET_FAULT_NONE);
	assert_int_equal(test_count_log_lines("NCCL-DET WARN"), 1);

	/* The longest path that fits is kept whole. */
	path[sizeof(settings->nccl_library) - 1] = '\0';
	test_setenv("NCCL_DET_NCCL_LIBRARY", path);
	settings = test_reparse();
	assert_string_equal(settings->nccl_library, path);
	assert_int_equal(test_count_log_lines("WARN"), 0);
}

static void test_settings_empty_value_is_unset(void **state)
{
	test_setenv("NCCL_DET_POOL_SIZE", "");
	test_setenv("NCCL_DET_ENABLE", "");
	test_setenv("NCCL_DET_TEST_FAIL", "");
	const struct ndet_settings *settings = test_reparse();
	assert_int_equal(settings->pool_size, 96 * MIB);
	assert_true(settings->enable);
	assert_int_equal(settings->test_fail, NDET_FAULT_NONE);
	assert_int_equal(test_count_log_lines("WARN"), 0);
	char *dump = test_dump();
	assert_int_equal(test_count_lines(dump, "NCCL_DET_POOL_SIZE       96MiB        default "),
			 1);
	free(dump);

	/* As with NCCL's setenv(name, value, 0): an empty variable still hides the conf file. */
	test_write_file(".nccl.conf", "NCCL_DET_POOL_SIZE=4M\n");
	settings = test_reparse();
	assert_int_equal(settings->pool_size, 96 * MIB);
	assert_int_equal(test_count_log_lines("WARN"), 0);
}

static void test_settings_control_bytes_cannot_forge_log_lines(void **state)
{
	test_setenv("NCCL_DET_MAX_BLOCKS", "7\nhost:1:1 NCCL-DET WARN forged");
	const struct ndet_settings *settings = test_reparse();
	assert_int_equal(settings->max_blocks, 96);
	char *log = test_read_log();
	assert_int_equal(test_count_lines(log, "NCCL-DET WARN"), 1);
	assert_non_null(strstr(log, "NCCL_DET_MAX_BLOCKS=\"7\\x0ahost:1:1"));
	free(log);
}

static void test_settings_test_fail_parsing(void **state)
{
	static const struct {
		const char *text;
		unsigned faults;
		int rank;
	} cases[] = {
		{"alloc", NDET_FAULT_ALLOC, -1},
		{"ipc_open", NDET_FAULT_IPC_OPEN, -1},
		{"probe", NDET_FAULT_PROBE, -1},
		{"ipc_open@1", NDET_FAULT_IPC_OPEN, 1},
		{"alloc,probe@0", NDET_FAULT_ALLOC | NDET_FAULT_PROBE, 0},
		{"alloc,ipc_open,probe", NDET_FAULT_ALLOC | NDET_FAULT_IPC_OPEN | NDET_FAULT_PROBE,
		 -1},
		{"probe,alloc,probe@7", NDET_FAULT_ALLOC | NDET_FAULT_PROBE, 7},
		{"IPC_OPEN@2147483647", NDET_FAULT_IPC_OPEN, 2147483647},
		{"none", NDET_FAULT_NONE, -1},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		test_setenv("NCCL_DET_TEST_FAIL", cases[i].text);
		const struct ndet_settings *settings = test_reparse();
		if (settings->test_fail != cases[i].faults ||
		    settings->test_fail_rank != cases[i].rank)
			fail_msg("NCCL_DET_TEST_FAIL=%s gave faults %#x rank %d", cases[i].text,
				 settings->test_fail, settings->test_fail_rank);
		assert_int_equal(test_count_log_lines("WARN"), 0);
	}
	/* The dump writes the value back in the same syntax. */
	test_setenv("NCCL_DET_TEST_FAIL", "probe,alloc@3");
	test_reparse();
	char *dump = test_dump();
	assert_int_equal(
		test_count_lines(dump, "NCCL_DET_TEST_FAIL       alloc,probe@3 environment"), 1);
	free(dump);
}

/* NCCL_DET_TEST_HOST: what each rank publishes as its host. */
static void test_settings_test_host_parsing(void **state)
{
	char name[NDET_SETTINGS_TEST_HOST_NAME_MAX + 1];
	/* Unset: every rank keeps its real host. */
	const struct ndet_settings *settings = test_reparse();
	assert_string_equal(settings->test_host, "");
	for (int r = -1; r < 3; r++) {
		assert_false(ndet_settings_test_host(settings, r, name, sizeof(name)));
		assert_string_equal(name, "");
	}

	/* One name: every rank of the process, whatever its rank. */
	test_setenv("NCCL_DET_TEST_HOST", "node-A.test_1");
	settings = test_reparse();
	assert_int_equal(test_count_log_lines("WARN"), 0);
	for (int r = -1; r < 5; r++) {
		assert_true(ndet_settings_test_host(settings, r, name, sizeof(name)));
		assert_string_equal(name, "node-A.test_1");
	}
	/* Too small a buffer: no name rather than a cut one. */
	assert_false(ndet_settings_test_host(settings, 0, name, 4));
	assert_string_equal(name, "");

	/* Per rank (ranks that are threads of one process): listed ranks take the name. */
	static const struct {
		const char *text;
		const char *names[6]; /* ranks 0-5; NULL: the real host */
	} cases[] = {
		{"A@0,1;B@2,3", {"A", "A", "B", "B", NULL, NULL}},
		{"A@0,2;B@1,3", {"A", "B", "A", "B", NULL, NULL}},
		{"B@5;A@0", {"A", NULL, NULL, NULL, NULL, "B"}},
		{"A@3", {NULL, NULL, NULL, "A", NULL, NULL}},
		{"h0@0;h1@1;h2@2;h3@3;h4@4;h5@5", {"h0", "h1", "h2", "h3", "h4", "h5"}},
		{"X@0,1,2;Y@3,4,5", {"X", "X", "X", "Y", "Y", "Y"}},
		{"A@2147483647;B@0", {"B", NULL, NULL, NULL, NULL, NULL}},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		test_setenv("NCCL_DET_TEST_HOST", cases[i].text);
		settings = test_reparse();
		assert_int_equal(test_count_log_lines("WARN"), 0);
		assert_string_equal(settings->test_host, cases[i].text);
		for (int r = 0; r < 6; r++) {
			const bool named = ndet_settings_test_host(settings, r, name, sizeof(name));
			if (named != (cases[i].names[r] != NULL) ||
			    (named && strcmp(name, cases[i].names[r]) != 0))
				fail_msg("NCCL_DET_TEST_HOST=%s: rank %d gets \"%s\"",
					 cases[i].text, r, name);
		}
		/* No rank, no name: the list form names ranks only. */
		assert_false(ndet_settings_test_host(settings, -1, name, sizeof(name)));
	}
	/* The dump shows the value as written; the longest name is taken. */
	test_setenv("NCCL_DET_TEST_HOST", "A@0,1;B@2,3");
	test_reparse();
	char *dump = test_dump();
	assert_int_equal(
		test_count_lines(dump, "NCCL_DET_TEST_HOST       A@0,1;B@2,3  environment"), 1);
	free(dump);
	char longest[NDET_SETTINGS_TEST_HOST_NAME_MAX + 1];
	memset(longest, 'n', sizeof(longest) - 1);
	longest[sizeof(longest) - 1] = '\0';
	test_setenv("NCCL_DET_TEST_HOST", longest);
	settings = test_reparse();
	assert_true(ndet_settings_test_host(settings, 7, name, sizeof(name)));
	assert_string_equal(name, longest);
	assert_int_equal(test_count_log_lines("WARN"), 0);

	/* A test-only setting: never part of what ranks must agree on. */
	const uint64_t hash = ndet_settings_agreement_hash(settings);
	test_setenv("NCCL_DET_TEST_HOST", "");
	assert_int_equal(ndet_settings_agreement_hash(test_reparse()), hash);
}

static void test_settings_conf_file_precedence(void **state)
{
	test_write_file("system.conf", "NCCL_DET_POOL_SIZE=2M\n"
				       "NCCL_DET_MAX_BLOCKS=3\n"
				       "NCCL_DET_STATS=1\n");
	test_write_file(".nccl.conf", "NCCL_DET_POOL_SIZE=4M\n"
				      "NCCL_DET_MAX_BLOCKS=5\n");
	test_setenv("NCCL_DET_MAX_BLOCKS", "7");
	const struct ndet_settings *settings = test_reparse();
	assert_int_equal(settings->max_blocks, 7);       /* environment */
	assert_int_equal(settings->pool_size, 4 * MIB);  /* ~/.nccl.conf beats the system */
	assert_true(settings->stats);                    /* only in the system file */
	assert_int_equal(settings->timeout_ms, 1800000); /* nowhere */
	char user_conf[PATH_MAX];
	test_path(user_conf, sizeof(user_conf), ".nccl.conf");
	char *dump = test_dump();
	char expected[PATH_MAX + 64];
	snprintf(expected, sizeof(expected), "NCCL_DET_POOL_SIZE       4MiB         %s ",
		 user_conf);
	assert_int_equal(test_count_lines(dump, expected), 1);
	snprintf(expected, sizeof(expected), "NCCL_DET_STATS           1            %s ",
		 test_system_conf);
	assert_int_equal(test_count_lines(dump, expected), 1);
	assert_int_equal(
		test_count_lines(dump, "NCCL_DET_MAX_BLOCKS      7            environment "), 1);
	assert_int_equal(test_count_lines(dump, "NCCL_DET_TIMEOUT         1800         default "),
			 1);
	free(dump);

	/* NCCL_CONF_FILE replaces ~/.nccl.conf; the system file is still read after it. */
	test_write_file("other.conf", "NCCL_DET_POOL_SIZE=8M\n");
	test_write_file(".nccl.conf", "NCCL_DET_POOL_SIZE=4M\n"
				      "NCCL_DET_ONESHOT_MAX=1M\n");
	char other_conf[PATH_MAX];
	test_path(other_conf, sizeof(other_conf), "other.conf");
	test_setenv("NCCL_CONF_FILE", other_conf);
	settings = test_reparse();
	assert_int_equal(settings->pool_size, 8 * MIB);
	assert_true(settings->oneshot_max == NDET_SETTINGS_SIZE_AUTO);
	assert_int_equal(settings->max_blocks, 7);
	assert_true(settings->stats);
	assert_int_equal(test_count_log_lines("WARN"), 0);
}

static void test_settings_bad_conf_value_names_its_file(void **state)
{
	test_write_file("system.conf", "NCCL_DET_TIMEOUT=forever\n");
	const struct ndet_settings *settings = test_reparse();
	assert_int_equal(settings->timeout_ms, 1800000);
	char *log = test_read_log();
	assert_int_equal(test_count_lines(log, "NCCL-DET WARN"), 1);
	assert_non_null(strstr(log, "NCCL_DET_TIMEOUT=\"forever\""));
	assert_non_null(strstr(log, test_system_conf));
	free(log);
	char *dump = test_dump();
	char expected[PATH_MAX + 64];
	snprintf(expected, sizeof(expected), "1800         default, bad value in %s ignored",
		 test_system_conf);
	assert_int_equal(test_count_lines(dump, expected), 1);
	free(dump);
}

/* A misspelt NCCL_DET_* name gets one WARN with the closest setting, and changes nothing. */
static void test_settings_unknown_names_warn(void **state)
{
	struct ndet_settings defaults;
	memcpy(&defaults, test_reparse(), sizeof(defaults));
	assert_int_equal(test_count_log_lines("WARN"), 0);

	test_setenv("NCCL_DET_ENABLED", "0");
	test_setenv("NCCL_DET_POOLSIZE", "1G");
	const struct ndet_settings *settings = test_reparse();
	assert_memory_equal(settings, &defaults, sizeof(defaults));
	assert_true(settings->enable);
	char *log = test_read_log();
	assert_int_equal(test_count_lines(log, "NCCL-DET WARN"), 2);
	assert_int_equal(test_count_lines(log, "NCCL_DET_ENABLED (from environment) is not an "
					       "nccl-det setting and has no effect; did you mean "
					       "NCCL_DET_ENABLE?"),
			 1);
	assert_int_equal(test_count_lines(log, "NCCL_DET_POOLSIZE (from environment) is not an "
					       "nccl-det setting and has no effect; did you mean "
					       "NCCL_DET_POOL_SIZE?"),
			 1);
	free(log);
	/* Parsed once: no second warning. */
	assert_ptr_equal(ndet_settings_get(), settings);
	assert_int_equal(test_count_log_lines("NCCL-DET WARN"), 2);
	assert_int_equal(unsetenv("NCCL_DET_ENABLED"), 0);
	assert_int_equal(unsetenv("NCCL_DET_POOLSIZE"), 0);

	/* In a conf file: named with its file; far from every name: no suggestion. */
	test_write_file("system.conf", "NCCL_DET_TIMOUT=5\nNCCL_DET_XYZZY_FROBNICATE=1\n");
	settings = test_reparse();
	assert_int_equal(settings->timeout_ms, defaults.timeout_ms);
	log = test_read_log();
	assert_int_equal(test_count_lines(log, "NCCL-DET WARN"), 2);
	char expected[PATH_MAX + 128];
	snprintf(expected, sizeof(expected),
		 "NCCL_DET_TIMOUT (from %s) is not an nccl-det setting and has no effect; did "
		 "you mean NCCL_DET_TIMEOUT?",
		 test_system_conf);
	assert_int_equal(test_count_lines(log, expected), 1);
	assert_int_equal(test_count_lines(log, "NCCL_DET_XYZZY_FROBNICATE"), 1);
	assert_int_equal(test_count_lines(log, "NCCL_DET_XYZZY_FROBNICATE (from"), 1);
	assert_int_equal(test_count_lines(log, "did you mean"), 1);
	free(log);

	/* A set variable that is also in a conf file is named once. */
	test_setenv("NCCL_DET_XYZZY_FROBNICATE", "2");
	test_reparse();
	assert_int_equal(test_count_log_lines("NCCL_DET_XYZZY_FROBNICATE (from environment)"), 1);
	assert_int_equal(test_count_log_lines("NCCL_DET_XYZZY_FROBNICATE"), 1);
}

static void test_settings_closest_name(void **state)
{
	assert_string_equal(ndet_settings_closest_name("NCCL_DET_ENABLED"), "NCCL_DET_ENABLE");
	assert_string_equal(ndet_settings_closest_name("nccl_det_strict"), "NCCL_DET_STRICT");
	assert_string_equal(ndet_settings_closest_name("NCCL_DET_LLMAX"), "NCCL_DET_LL_MAX");
	assert_null(ndet_settings_closest_name("NCCL_DET_SOMETHING_ELSE_ENTIRELY"));
	assert_true(ndet_settings_known_name("NCCL_DET_DEBUG_SUBSYS"));
	assert_true(ndet_settings_known_name("NCCL_DET_TEST_FAIL"));
	assert_false(ndet_settings_known_name("NCCL_DET_ENABLED"));
	/* nccl-det-run's own variables reach the job: never called unknown. */
	assert_true(ndet_settings_known_name("NCCL_DET_RUN_PRELOAD_LIB"));
	assert_true(ndet_settings_known_name("NCCL_DET_RUN_DROPIN_DIR"));
	assert_true(ndet_settings_known_name("NCCL_DET_RUN_LIBDIR"));
	assert_false(ndet_settings_known_name("nccl_det_enable"));
}

static void test_settings_parsed_once_until_reset(void **state)
{
	test_setenv("NCCL_DET_MAX_BLOCKS", "8");
	const struct ndet_settings *settings = test_reparse();
	assert_int_equal(settings->max_blocks, 8);
	test_setenv("NCCL_DET_MAX_BLOCKS", "9");
	assert_int_equal(ndet_settings_get()->max_blocks, 8);
	ndet_settings_reset_for_testing();
	assert_int_equal(ndet_settings_get()->max_blocks, 9);
}

static void test_settings_info_dump(void **state)
{
	test_setenv("NCCL_DET_DEBUG", "INFO");
	test_setenv("NCCL_DET_DEBUG_SUBSYS", "ENV");
	test_setenv("NCCL_DET_POOL_SIZE", "1536K");
	test_write_file("system.conf", "NCCL_DET_STRICT=on\n");
	test_reparse();
	char *log = test_read_log();
	assert_int_equal(
		test_count_lines(log, "NCCL-DET INFO NCCL_DET_POOL_SIZE=1536KiB (environment)"), 1);
	char expected[PATH_MAX + 64];
	snprintf(expected, sizeof(expected), "NCCL-DET INFO NCCL_DET_STRICT=1 (%s)",
		 test_system_conf);
	assert_int_equal(test_count_lines(log, expected), 1);
	assert_int_equal(test_count_lines(log, "NCCL-DET INFO NCCL_DET_MAX_BLOCKS=96 (default)"),
			 1);
	assert_int_equal(test_count_lines(log, "NCCL-DET INFO NCCL_DET_DEBUG=INFO (environment)"),
			 1);
	assert_int_equal(test_count_lines(log, "NCCL-DET INFO NCCL_DET_"), 23);
	free(log);

	/* INFO for another subsystem only: no dump. */
	test_setenv("NCCL_DET_DEBUG_SUBSYS", "COLL");
	test_reparse();
	assert_int_equal(test_count_log_lines("NCCL-DET INFO"), 0);
	test_setenv("NCCL_DET_DEBUG_SUBSYS", "");
	test_setenv("NCCL_DET_DEBUG", "WARN");
	test_reparse();
	assert_int_equal(test_count_log_lines("NCCL-DET"), 0);
}

static void test_settings_dump_table(void **state)
{
	static const char *const names[] = {
		"NCCL_DET_ENABLE",        "NCCL_DET_STRICT",         "NCCL_DET_STATS",
		"NCCL_DET_POOL_SIZE",     "NCCL_DET_ONESHOT_MAX",    "NCCL_DET_TIMEOUT",
		"NCCL_DET_MAX_MEMORY",    "NCCL_DET_MAX_BLOCKS",     "NCCL_DET_DEBUG_DELAY",
		"NCCL_DET_NCCL_LIBRARY",  "NCCL_DET_TEST_FAIL",      "NCCL_DET_DEBUG",
		"NCCL_DET_DEBUG_SUBSYS",  "NCCL_DET_DEBUG_FILE",     "NCCL_DET_TUNER_ALGO",
		"NCCL_DET_TUNER_PROTO",   "NCCL_DET_TUNER_CHANNELS", "NCCL_DET_EXPECT",
		"NCCL_DET_LL_MAX",        "NCCL_DET_PUSH_MIN",       "NCCL_DET_TEST_HOST",
		"NCCL_DET_HOSTS_STAGING", "NCCL_DET_LL_WIDE_MIN",
	};
	test_setenv("NCCL_DET_MAX_MEMORY", "1048577");
	test_setenv("NCCL_DET_STRICT", "bad");
	test_reparse();
	char *dump = test_dump();
	assert_int_equal(test_count_lines(dump, "# name"), 1);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		char start[64];
		snprintf(start, sizeof(start), "%s ", names[i]);
		if (test_count_lines(dump, start) != 1)
			fail_msg("%s not listed once:\n%s", names[i], dump);
	}
	/* Header + one row per setting, nothing else. */
	size_t lines = 0;
	for (const char *c = dump; *c != '\0'; c++)
		lines += *c == '\n';
	assert_int_equal(lines, 1 + sizeof(names) / sizeof(names[0]));
	assert_int_equal(
		test_count_lines(dump, "NCCL_DET_MAX_MEMORY      1048577      environment "), 1);
	assert_int_equal(
		test_count_lines(dump,
				 "NCCL_DET_STRICT          0            default, bad value in "
				 "environment ignored"),
		1);
	assert_int_equal(test_count_lines(dump, "NCCL_DET_DEBUG_FILE "), 1);
	assert_int_equal(test_count_lines(dump, test_log_path), 1);
	assert_int_equal(test_count_lines(dump, "TEST ONLY"), 2);
	assert_int_equal(test_count_lines(dump, "NCCL_DET_NCCL_LIBRARY    \"\"           default"),
			 1);
	free(dump);
}

static void test_settings_agreement_hash_fields(void **state)
{
	const struct ndet_settings *defaults = test_reparse();
	uint64_t base = ndet_settings_agreement_hash(defaults);
	/*
	 * Pinned: every release must serialize the same settings to the same bytes (the
	 * value changes only with a default: NCCL_DET_MAX_BLOCKS 24 -> 96,
	 * NCCL_DET_ONESHOT_MAX 256 KiB -> 64 KiB and NCCL_DET_POOL_SIZE 32 -> 96 MiB in
	 * 0.1.0; NCCL_DET_LL_MAX 0 -> 256 KiB, NCCL_DET_PUSH_MIN 64 -> 8 -> 4 MiB and
	 * NCCL_DET_ONESHOT_MAX 64 KiB -> auto, NCCL_DET_LL_WIDE_MIN 0 -> 224 KiB after it)
	 * or with the format
	 * (NCCL_DET_LL_MAX joined in format 2, NCCL_DET_PUSH_MIN in format 3, the
	 * planner's grid changed in format 4, auto in format 5, even steps in format 6,
	 * 512-byte segments in format 7, NCCL_DET_HOSTS_STAGING joined in format 8,
	 * NCCL_DET_LL_WIDE_MIN in format 9).  Recomputed apart from this code: FNV-1a 64
	 * over the little-endian bytes of 9, 0, 96 MiB, 2^64 - 1 (auto), 96, 256 KiB,
	 * 224 KiB, 4 MiB, 96 MiB.
	 */
	assert_int_equal(base, UINT64_C(0xf4ee4e06a111be67));

	struct ndet_settings changed;
	memcpy(&changed, defaults, sizeof(changed));
	changed.strict = !changed.strict;
	assert_int_not_equal(ndet_settings_agreement_hash(&changed), base);
	memcpy(&changed, defaults, sizeof(changed));
	changed.pool_size += 1;
	assert_int_not_equal(ndet_settings_agreement_hash(&changed), base);
	memcpy(&changed, defaults, sizeof(changed));
	changed.pool_size += UINT64_C(1) << 40; /* a high byte only */
	assert_int_not_equal(ndet_settings_agreement_hash(&changed), base);
	memcpy(&changed, defaults, sizeof(changed));
	changed.oneshot_max = 64 * 1024; /* what auto is at more than 2 ranks */
	assert_int_not_equal(ndet_settings_agreement_hash(&changed), base);
	memcpy(&changed, defaults, sizeof(changed));
	changed.max_blocks = 25;
	assert_int_not_equal(ndet_settings_agreement_hash(&changed), base);
	memcpy(&changed, defaults, sizeof(changed));
	changed.ll_max = 4096;
	assert_int_not_equal(ndet_settings_agreement_hash(&changed), base);
	memcpy(&changed, defaults, sizeof(changed));
	changed.ll_wide_min = 0;
	assert_int_not_equal(ndet_settings_agreement_hash(&changed), base);
	memcpy(&changed, defaults, sizeof(changed));
	changed.push_min = 0;
	assert_int_not_equal(ndet_settings_agreement_hash(&changed), base);
	memcpy(&changed, defaults, sizeof(changed));
	changed.hosts_staging = 64 * 1024;
	assert_int_not_equal(ndet_settings_agreement_hash(&changed), base);

	/* Swapping two hashed values must not collide (the order is part of the format). */
	memcpy(&changed, defaults, sizeof(changed));
	changed.pool_size = defaults->oneshot_max;
	changed.oneshot_max = defaults->pool_size;
	assert_int_not_equal(ndet_settings_agreement_hash(&changed), base);

	/* Local settings stay out. */
	memcpy(&changed, defaults, sizeof(changed));
	changed.enable = !changed.enable;
	changed.stats = !changed.stats;
	changed.timeout_ms = 5000;
	changed.max_memory = 4 * GIB;
	changed.debug_delay_ns = 1000;
	snprintf(changed.nccl_library, sizeof(changed.nccl_library), "/x/libnccl.so.2");
	changed.test_fail = NDET_FAULT_ALLOC;
	changed.test_fail_rank = 3;
	snprintf(changed.test_host, sizeof(changed.test_host), "A@0,1;B@2,3");
	assert_int_equal(ndet_settings_agreement_hash(&changed), base);

	/* Only values count, never padding or other bytes of the struct. */
	struct ndet_settings noisy;
	memset(&noisy, 0xa5, sizeof(noisy));
	noisy.strict = defaults->strict;
	noisy.pool_size = defaults->pool_size;
	noisy.oneshot_max = defaults->oneshot_max;
	noisy.max_blocks = defaults->max_blocks;
	noisy.ll_max = defaults->ll_max;
	noisy.ll_wide_min = defaults->ll_wide_min;
	noisy.push_min = defaults->push_min;
	noisy.hosts_staging = defaults->hosts_staging;
	assert_int_equal(ndet_settings_agreement_hash(&noisy), base);
}

static void test_settings_agreement_hash_follows_environment(void **state)
{
	uint64_t base = ndet_settings_agreement_hash(test_reparse());
	test_setenv("NCCL_DET_TIMEOUT", "30");
	test_setenv("NCCL_DET_STATS", "1");
	assert_int_equal(ndet_settings_agreement_hash(test_reparse()), base);
	test_setenv("NCCL_DET_ONESHOT_MAX", "512K");
	assert_int_not_equal(ndet_settings_agreement_hash(test_reparse()), base);
}

/*
 * Every agreed setting reaches the engine's configuration (the divert layer's and
 * nccl-det-perf's both come from ndet_engine_config_from_settings): a setting that
 * changes the agreement hash but no field of the configuration would be agreed on and
 * then never used.  So would NCCL_DET_MAX_MEMORY, which the setup agrees by MIN.
 */
static void test_settings_engine_config(void **state)
{
	(void)state;
	const struct {
		const char *name, *value;
	} changes[] = {
		{"NCCL_DET_POOL_SIZE", "64M"},     {"NCCL_DET_MAX_BLOCKS", "25"},
		{"NCCL_DET_ONESHOT_MAX", "512K"},  {"NCCL_DET_LL_MAX", "4K"},
		{"NCCL_DET_LL_WIDE_MIN", "0"},     {"NCCL_DET_PUSH_MIN", "0"},
		{"NCCL_DET_HOSTS_STAGING", "64K"}, {"NCCL_DET_MAX_MEMORY", "4G"},
	};
	struct ndet_engine_config base;
	memset(&base, 0x5a, sizeof(base));
	ndet_engine_config_from_settings(test_reparse(), &base);
	assert_int_equal(base.settings_hash, ndet_settings_agreement_hash(test_reparse()));
	assert_int_equal(base.ll_max, test_reparse()->ll_max);
	for (size_t i = 0; i < sizeof(changes) / sizeof(changes[0]); i++) {
		test_setenv(changes[i].name, changes[i].value);
		struct ndet_engine_config changed;
		memset(&changed, 0x5a, sizeof(changed));
		ndet_engine_config_from_settings(test_reparse(), &changed);
		assert_int_equal(changed.settings_hash,
				 ndet_settings_agreement_hash(test_reparse()));
		changed.settings_hash = base.settings_hash;
		if (memcmp(&changed, &base, sizeof(base)) == 0)
			fail_msg("%s=%s changes no field of the engine configuration",
				 changes[i].name, changes[i].value);
		assert_int_equal(unsetenv(changes[i].name), 0);
	}
}

#define TEST_THREADS 32

static pthread_barrier_t test_barrier;

static void *test_get_settings(void *argument)
{
	const struct ndet_settings **result = argument;
	pthread_barrier_wait(&test_barrier);
	*result = ndet_settings_get();
	return NULL;
}

static void test_settings_concurrent_get_parses_once(void **state)
{
	test_setenv("NCCL_DET_DEBUG", "INFO");
	test_setenv("NCCL_DET_DEBUG_SUBSYS", "ENV");
	test_setenv("NCCL_DET_POOL_SIZE", "lots");
	test_setenv("NCCL_DET_MAX_BLOCKS", "16");
	ndet_env_reset_for_testing(test_system_conf);
	ndet_log_reset_for_testing();
	assert_true(unlink(test_log_path) == 0 || errno == ENOENT);
	ndet_settings_reset_for_testing();

	pthread_t threads[TEST_THREADS];
	const struct ndet_settings *results[TEST_THREADS];
	assert_int_equal(pthread_barrier_init(&test_barrier, NULL, TEST_THREADS), 0);
	for (int i = 0; i < TEST_THREADS; i++)
		assert_int_equal(pthread_create(&threads[i], NULL, test_get_settings, &results[i]),
				 0);
	for (int i = 0; i < TEST_THREADS; i++)
		assert_int_equal(pthread_join(threads[i], NULL), 0);
	assert_int_equal(pthread_barrier_destroy(&test_barrier), 0);

	for (int i = 0; i < TEST_THREADS; i++) {
		assert_ptr_equal(results[i], results[0]);
		assert_int_equal(results[i]->max_blocks, 16);
		assert_int_equal(results[i]->pool_size, 96 * MIB);
	}
	char *log = test_read_log();
	assert_int_equal(test_count_lines(log, "NCCL-DET WARN"), 1);
	assert_int_equal(test_count_lines(log, "NCCL-DET INFO NCCL_DET_MAX_BLOCKS=16"), 1);
	free(log);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_settings_tuner_values, test_setup,
						test_teardown),
		cmocka_unit_test_setup_teardown(test_settings_expect, test_setup, test_teardown),
		cmocka_unit_test_setup_teardown(test_settings_defaults, test_setup, test_teardown),
		cmocka_unit_test_setup_teardown(test_settings_valid_values, test_setup,
						test_teardown),
		cmocka_unit_test_setup_teardown(test_settings_bool_spellings, test_setup,
						test_teardown),
		cmocka_unit_test_setup_teardown(test_settings_size_suffixes, test_setup,
						test_teardown),
		cmocka_unit_test_setup_teardown(
			test_settings_invalid_values_keep_default_and_warn_once, test_setup,
			test_teardown),
		cmocka_unit_test_setup_teardown(test_settings_too_long_library_path, test_setup,
						test_teardown),
		cmocka_unit_test_setup_teardown(test_settings_empty_value_is_unset, test_setup,
						test_teardown),
		cmocka_unit_test_setup_teardown(test_settings_control_bytes_cannot_forge_log_lines,
						test_setup, test_teardown),
		cmocka_unit_test_setup_teardown(test_settings_test_fail_parsing, test_setup,
						test_teardown),
		cmocka_unit_test_setup_teardown(test_settings_test_host_parsing, test_setup,
						test_teardown),
		cmocka_unit_test_setup_teardown(test_settings_conf_file_precedence, test_setup,
						test_teardown),
		cmocka_unit_test_setup_teardown(test_settings_bad_conf_value_names_its_file,
						test_setup, test_teardown),
		cmocka_unit_test_setup_teardown(test_settings_parsed_once_until_reset, test_setup,
						test_teardown),
		cmocka_unit_test_setup_teardown(test_settings_unknown_names_warn, test_setup,
						test_teardown),
		cmocka_unit_test_setup_teardown(test_settings_closest_name, test_setup,
						test_teardown),
		cmocka_unit_test_setup_teardown(test_settings_info_dump, test_setup, test_teardown),
		cmocka_unit_test_setup_teardown(test_settings_dump_table, test_setup,
						test_teardown),
		cmocka_unit_test_setup_teardown(test_settings_agreement_hash_fields, test_setup,
						test_teardown),
		cmocka_unit_test_setup_teardown(test_settings_agreement_hash_follows_environment,
						test_setup, test_teardown),
		cmocka_unit_test_setup_teardown(test_settings_engine_config, test_setup,
						test_teardown),
		cmocka_unit_test_setup_teardown(test_settings_concurrent_get_parses_once,
						test_setup, test_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
