/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Variable lookup as NCCL sees it: environment, then $NCCL_CONF_FILE or
 * ~/.nccl.conf, then the system file.  Each test gets a temporary HOME and its own
 * "system" file, so the machine's /etc/nccl.conf cannot leak in.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
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

static const char *const test_files[] = {"system.conf", ".nccl.conf", "other.conf"};

static char test_dir[PATH_MAX];
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
	assert_true(fputs(text, file) >= 0);
	assert_int_equal(fclose(file), 0);
}

static void test_setenv(const char *name, const char *value)
{
	assert_int_equal(setenv(name, value, 1), 0);
}

static void test_reload(void)
{
	ndet_env_reset_for_testing(test_system_conf);
}

/* The value, asserting where it came from. */
static const char *test_get(const char *name, ndet_env_source_t expected_source)
{
	ndet_env_source_t source = (ndet_env_source_t)-1;
	const char *value = ndet_env_get(name, &source);
	if (source != expected_source)
		fail_msg("%s came from %s, expected %s", name, ndet_env_source_name(source),
			 ndet_env_source_name(expected_source));
	assert_true((value == NULL) == (expected_source == NDET_ENV_SOURCE_DEFAULT));
	return value;
}

static int test_setup(void **state)
{
	const char *tmp = getenv("TMPDIR");
	int length = snprintf(test_dir, sizeof(test_dir), "%s/ndet-env-XXXXXX",
			      tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
	if (length < 0 || (size_t)length >= sizeof(test_dir) || mkdtemp(test_dir) == NULL)
		return -1;
	test_path(test_system_conf, sizeof(test_system_conf), "system.conf");
	if (unsetenv("NCCL_CONF_FILE") != 0 || unsetenv("NDET_T_A") != 0 ||
	    setenv("HOME", test_dir, 1) != 0)
		return -1;
	test_reload();
	return 0;
}

static int test_teardown(void **state)
{
	ndet_env_reset_for_testing(NULL);
	for (size_t i = 0; i < sizeof(test_files) / sizeof(test_files[0]); i++) {
		char path[PATH_MAX];
		test_path(path, sizeof(path), test_files[i]);
		if (unlink(path) != 0 && errno != ENOENT)
			return -1;
	}
	return rmdir(test_dir);
}

static void test_env_nothing_set(void **state)
{
	assert_null(test_get("NDET_T_A", NDET_ENV_SOURCE_DEFAULT));
	ndet_env_source_t source = NDET_ENV_SOURCE_ENVIRONMENT;
	assert_null(ndet_env_get("NDET_T_A", &source));
	assert_int_equal(source, NDET_ENV_SOURCE_DEFAULT);
	/* source may be NULL */
	assert_null(ndet_env_get("NDET_T_A", NULL));
	assert_string_equal(ndet_env_source_name(NDET_ENV_SOURCE_DEFAULT), "default");
	assert_string_equal(ndet_env_source_name(NDET_ENV_SOURCE_ENVIRONMENT), "environment");
	assert_string_equal(ndet_env_source_name(NDET_ENV_SOURCE_SYSTEM_CONF), test_system_conf);
}

static void test_env_conf_file_syntax(void **state)
{
	test_write_file(".nccl.conf", "# a comment\n"
				      "   # an indented comment with NDET_T_COMMENT=1\n"
				      "\n"
				      "   \t \n"
				      "NDET_T_A=1\n"
				      "NDET_T_B = two words  \n"
				      "\tNDET_T_C=\t3\n"
				      "NDET_T_A=second definition\n"
				      "NDET_T_NO_EQUALS\n"
				      "=no name\n"
				      "NDET_T_EMPTY=\n"
				      "NDET_T_EQUALS=a=b\n"
				      "NDET_T_HASH=4 # not a comment: NCCL keeps it\n"
				      "NDET_T_LAST=no newline at the end");
	test_reload();
	assert_string_equal(test_get("NDET_T_A", NDET_ENV_SOURCE_USER_CONF), "1");
	assert_string_equal(test_get("NDET_T_B", NDET_ENV_SOURCE_USER_CONF), "two words");
	assert_string_equal(test_get("NDET_T_C", NDET_ENV_SOURCE_USER_CONF), "3");
	assert_string_equal(test_get("NDET_T_EMPTY", NDET_ENV_SOURCE_USER_CONF), "");
	assert_string_equal(test_get("NDET_T_EQUALS", NDET_ENV_SOURCE_USER_CONF), "a=b");
	assert_string_equal(test_get("NDET_T_HASH", NDET_ENV_SOURCE_USER_CONF),
			    "4 # not a comment: NCCL keeps it");
	assert_string_equal(test_get("NDET_T_LAST", NDET_ENV_SOURCE_USER_CONF),
			    "no newline at the end");
	assert_null(test_get("NDET_T_NO_EQUALS", NDET_ENV_SOURCE_DEFAULT));
	assert_null(test_get("NDET_T_COMMENT", NDET_ENV_SOURCE_DEFAULT));
	assert_null(test_get("", NDET_ENV_SOURCE_DEFAULT));

	char user_conf[PATH_MAX];
	test_path(user_conf, sizeof(user_conf), ".nccl.conf");
	assert_string_equal(ndet_env_source_name(NDET_ENV_SOURCE_USER_CONF), user_conf);
}

static void test_env_environment_beats_conf_files(void **state)
{
	test_write_file(".nccl.conf", "NDET_T_A=user\n");
	test_write_file("system.conf", "NDET_T_A=system\n");
	test_setenv("NDET_T_A", "environment");
	test_reload();
	assert_string_equal(test_get("NDET_T_A", NDET_ENV_SOURCE_ENVIRONMENT), "environment");
	/* An empty variable is still set: NCCL's setenv(name, value, 0) would keep it too. */
	test_setenv("NDET_T_A", "");
	assert_string_equal(test_get("NDET_T_A", NDET_ENV_SOURCE_ENVIRONMENT), "");
	assert_int_equal(unsetenv("NDET_T_A"), 0);
	assert_string_equal(test_get("NDET_T_A", NDET_ENV_SOURCE_USER_CONF), "user");
}

static void test_env_value_copied_from_conf_by_nccl(void **state)
{
	/* NCCL's init copies its conf files into the environment (setenv, no overwrite):
	 * a variable equal to the file's entry is reported with the file as its source. */
	test_write_file(".nccl.conf", "NDET_T_A=0\n");
	test_write_file("system.conf", "NDET_T_S=1\n");
	test_setenv("NDET_T_A", "0");
	test_setenv("NDET_T_S", "1");
	test_reload();
	assert_string_equal(test_get("NDET_T_A", NDET_ENV_SOURCE_USER_CONF), "0");
	assert_string_equal(test_get("NDET_T_S", NDET_ENV_SOURCE_SYSTEM_CONF), "1");
	/* A different value is the user's own environment. */
	test_setenv("NDET_T_A", "00");
	assert_string_equal(test_get("NDET_T_A", NDET_ENV_SOURCE_ENVIRONMENT), "00");
	assert_int_equal(unsetenv("NDET_T_A"), 0);
	assert_int_equal(unsetenv("NDET_T_S"), 0);
}

static void test_env_system_file_read_after_user_file(void **state)
{
	test_write_file(".nccl.conf", "NDET_T_BOTH=user\n");
	test_write_file("system.conf", "NDET_T_BOTH=system\n"
				       "NDET_T_SYSTEM=system only\n");
	test_reload();
	assert_string_equal(test_get("NDET_T_BOTH", NDET_ENV_SOURCE_USER_CONF), "user");
	assert_string_equal(test_get("NDET_T_SYSTEM", NDET_ENV_SOURCE_SYSTEM_CONF), "system only");
}

static void test_env_nccl_conf_file_replaces_home_file(void **state)
{
	test_write_file(".nccl.conf", "NDET_T_BOTH=home\n"
				      "NDET_T_HOME=home only\n");
	test_write_file("other.conf", "NDET_T_BOTH=other\n");
	test_write_file("system.conf", "NDET_T_BOTH=system\n"
				       "NDET_T_SYSTEM=system only\n");
	char other_conf[PATH_MAX];
	test_path(other_conf, sizeof(other_conf), "other.conf");
	test_setenv("NCCL_CONF_FILE", other_conf);
	test_reload();
	assert_string_equal(test_get("NDET_T_BOTH", NDET_ENV_SOURCE_USER_CONF), "other");
	assert_null(test_get("NDET_T_HOME", NDET_ENV_SOURCE_DEFAULT));
	assert_string_equal(test_get("NDET_T_SYSTEM", NDET_ENV_SOURCE_SYSTEM_CONF), "system only");
	assert_string_equal(ndet_env_source_name(NDET_ENV_SOURCE_USER_CONF), other_conf);

	/* An empty NCCL_CONF_FILE counts as unset: back to ~/.nccl.conf. */
	test_setenv("NCCL_CONF_FILE", "");
	test_reload();
	assert_string_equal(test_get("NDET_T_BOTH", NDET_ENV_SOURCE_USER_CONF), "home");
	assert_string_equal(test_get("NDET_T_HOME", NDET_ENV_SOURCE_USER_CONF), "home only");

	/* A missing NCCL_CONF_FILE is skipped; it still hides ~/.nccl.conf. */
	test_setenv("NCCL_CONF_FILE", "/nonexistent/ndet-test.conf");
	test_reload();
	assert_string_equal(test_get("NDET_T_BOTH", NDET_ENV_SOURCE_SYSTEM_CONF), "system");
	assert_null(test_get("NDET_T_HOME", NDET_ENV_SOURCE_DEFAULT));
	assert_int_equal(unsetenv("NCCL_CONF_FILE"), 0);
}

static void test_env_files_read_once_until_reset(void **state)
{
	test_write_file(".nccl.conf", "NDET_T_A=first\n");
	test_reload();
	assert_string_equal(test_get("NDET_T_A", NDET_ENV_SOURCE_USER_CONF), "first");
	test_write_file(".nccl.conf", "NDET_T_A=second\n");
	assert_string_equal(test_get("NDET_T_A", NDET_ENV_SOURCE_USER_CONF), "first");
	test_reload();
	assert_string_equal(test_get("NDET_T_A", NDET_ENV_SOURCE_USER_CONF), "second");
}

/* A fixed line buffer would cut the value and read its tail as a line of its own. */
static void test_env_long_lines_are_read_whole(void **state)
{
	enum { VALUE_LENGTH = 5000 };
	char *text = malloc(VALUE_LENGTH + 128);
	assert_non_null(text);
	char *cursor = text + sprintf(text, "NDET_T_LONG=");
	memset(cursor, 'x', VALUE_LENGTH);
	/* Where fgets() into 1 KiB would split the line, plant something that looks like one. */
	memcpy(cursor + 1023 - strlen("NDET_T_LONG="), "NDET_T_FORGED=1", 15);
	sprintf(cursor + VALUE_LENGTH, "\nNDET_T_AFTER=after\n");
	test_write_file(".nccl.conf", text);
	free(text);
	test_reload();
	const char *value = test_get("NDET_T_LONG", NDET_ENV_SOURCE_USER_CONF);
	assert_int_equal(strlen(value), VALUE_LENGTH);
	assert_null(test_get("NDET_T_FORGED", NDET_ENV_SOURCE_DEFAULT));
	assert_string_equal(test_get("NDET_T_AFTER", NDET_ENV_SOURCE_USER_CONF), "after");
}

static void test_env_many_definitions(void **state)
{
	enum { DEFINITIONS = 1000 };
	char *text = NULL;
	size_t size = 0;
	FILE *memory = open_memstream(&text, &size);
	assert_non_null(memory);
	for (int i = 0; i < DEFINITIONS; i++)
		assert_true(fprintf(memory, "NDET_T_%d=%d\n", i, i * 7) > 0);
	assert_int_equal(fclose(memory), 0);
	test_write_file("system.conf", text);
	free(text);
	test_reload();
	for (int i = 0; i < DEFINITIONS; i++) {
		char name[32];
		char expected[32];
		snprintf(name, sizeof(name), "NDET_T_%d", i);
		snprintf(expected, sizeof(expected), "%d", i * 7);
		assert_string_equal(test_get(name, NDET_ENV_SOURCE_SYSTEM_CONF), expected);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_env_nothing_set, test_setup, test_teardown),
		cmocka_unit_test_setup_teardown(test_env_conf_file_syntax, test_setup,
						test_teardown),
		cmocka_unit_test_setup_teardown(test_env_value_copied_from_conf_by_nccl, test_setup,
						test_teardown),
		cmocka_unit_test_setup_teardown(test_env_environment_beats_conf_files, test_setup,
						test_teardown),
		cmocka_unit_test_setup_teardown(test_env_system_file_read_after_user_file,
						test_setup, test_teardown),
		cmocka_unit_test_setup_teardown(test_env_nccl_conf_file_replaces_home_file,
						test_setup, test_teardown),
		cmocka_unit_test_setup_teardown(test_env_files_read_once_until_reset, test_setup,
						test_teardown),
		cmocka_unit_test_setup_teardown(test_env_long_lines_are_read_whole, test_setup,
						test_teardown),
		cmocka_unit_test_setup_teardown(test_env_many_definitions, test_setup,
						test_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
