/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Logging: level and subsystem selection (ours beat NCCL's variables), NCCL's line
 * format, the log file, and WARN_ONCE under threads.  Output goes to a file in a
 * temporary directory so the tests can read it back.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/ndet_env.h"
#include "common/ndet_log.h"

static const char *const test_variables[] = {
	"NCCL_DET_DEBUG",    "NCCL_DET_DEBUG_SUBSYS", "NCCL_DET_DEBUG_FILE", "NCCL_DEBUG",
	"NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE",       "NCCL_CONF_FILE",
};

static const unsigned test_subsystems[] = {NDET_SUBSYS_INIT, NDET_SUBSYS_ENV,    NDET_SUBSYS_SETUP,
					   NDET_SUBSYS_COLL, NDET_SUBSYS_ENGINE, NDET_SUBSYS_ALLOC};

static char test_dir[PATH_MAX];
static char test_log_path[PATH_MAX];
static char test_system_conf[PATH_MAX];

static void test_path(char *path, size_t size, const char *name)
{
	int length = snprintf(path, size, "%s/%s", test_dir, name);
	assert_true(length > 0 && (size_t)length < size);
}

static void test_setenv(const char *name, const char *value)
{
	assert_int_equal(setenv(name, value, 1), 0);
}

/* Forget the parsed level, subsystems and file; start a fresh log. */
static void test_relog(void)
{
	ndet_env_reset_for_testing(test_system_conf);
	ndet_log_reset_for_testing();
	assert_true(unlink(test_log_path) == 0 || errno == ENOENT);
}

static char *test_read_file(const char *path)
{
	FILE *file = fopen(path, "r");
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

static int test_count(const char *text, const char *needle)
{
	int count = 0;
	for (const char *hit = strstr(text, needle); hit != NULL; hit = strstr(hit + 1, needle))
		count++;
	return count;
}

static int test_count_log(const char *needle)
{
	char *log = test_read_file(test_log_path);
	int count = test_count(log, needle);
	free(log);
	return count;
}

static int test_setup(void **state)
{
	const char *tmp = getenv("TMPDIR");
	int length = snprintf(test_dir, sizeof(test_dir), "%s/ndet-log-XXXXXX",
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
	ndet_log_set_device(-1);
	test_relog();
	return 0;
}

static int test_teardown(void **state)
{
	ndet_log_reset_for_testing();
	ndet_log_set_device(-1);
	char pid_log[64];
	snprintf(pid_log, sizeof(pid_log), "log.%d", (int)getpid());
	const char *const files[] = {"log", "system.conf", "nccl-log", pid_log};
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		char path[PATH_MAX];
		test_path(path, sizeof(path), files[i]);
		if (unlink(path) != 0 && errno != ENOENT)
			return -1;
	}
	return rmdir(test_dir);
}

static void test_log_default_level_is_warn(void **state)
{
	assert_int_equal(ndet_log_level(), NDET_LOG_WARN);
	assert_true(ndet_log_enabled(NDET_LOG_WARN, NDET_SUBSYS_ALL));
	assert_false(ndet_log_enabled(NDET_LOG_INFO, NDET_SUBSYS_INIT));
	NDET_WARN("warned %d", 1);
	NDET_INFO(NDET_SUBSYS_INIT, "informed %d", 2);
	NDET_TRACE(NDET_SUBSYS_INIT, "traced %d", 3);
	assert_int_equal(test_count_log("warned 1"), 1);
	assert_int_equal(test_count_log("informed"), 0);
	assert_int_equal(test_count_log("traced"), 0);
}

static void test_log_level_names(void **state)
{
	static const struct {
		const char *text;
		ndet_log_level_t level;
	} cases[] = {
		{"VERSION", NDET_LOG_VERSION}, {"WARN", NDET_LOG_WARN},  {"warn", NDET_LOG_WARN},
		{"INFO", NDET_LOG_INFO},       {"Info", NDET_LOG_INFO},  {"TRACE", NDET_LOG_TRACE},
		{"NONE", NDET_LOG_NONE},       {"bogus", NDET_LOG_WARN},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		test_setenv("NCCL_DET_DEBUG", cases[i].text);
		test_relog();
		if (ndet_log_level() != cases[i].level)
			fail_msg("NCCL_DET_DEBUG=%s gave level %d", cases[i].text,
				 (int)ndet_log_level());
	}
	/* NONE silences even warnings. */
	test_setenv("NCCL_DET_DEBUG", "NONE");
	test_relog();
	NDET_WARN("silenced");
	assert_int_equal(test_count_log("silenced"), 0);
}

static void test_log_det_debug_beats_nccl_debug(void **state)
{
	test_setenv("NCCL_DEBUG", "INFO");
	test_relog();
	assert_int_equal(ndet_log_level(), NDET_LOG_INFO);

	test_setenv("NCCL_DET_DEBUG", "WARN");
	test_relog();
	assert_int_equal(ndet_log_level(), NDET_LOG_WARN);
	NDET_INFO(NDET_SUBSYS_INIT, "informed");
	assert_int_equal(test_count_log("informed"), 0);

	test_setenv("NCCL_DEBUG", "WARN");
	test_setenv("NCCL_DET_DEBUG", "TRACE");
	test_relog();
	assert_int_equal(ndet_log_level(), NDET_LOG_TRACE);

	/* Empty counts as unset, as for every NCCL variable. */
	test_setenv("NCCL_DET_DEBUG", "");
	test_setenv("NCCL_DEBUG", "INFO");
	test_relog();
	assert_int_equal(ndet_log_level(), NDET_LOG_INFO);
}

static void test_log_level_from_conf_file(void **state)
{
	FILE *file = fopen(test_system_conf, "w");
	assert_non_null(file);
	assert_true(fputs("NCCL_DEBUG=TRACE\n", file) >= 0);
	assert_int_equal(fclose(file), 0);
	test_relog();
	assert_int_equal(ndet_log_level(), NDET_LOG_TRACE);
	test_setenv("NCCL_DET_DEBUG", "VERSION");
	test_relog();
	assert_int_equal(ndet_log_level(), NDET_LOG_VERSION);
}

/* Which of our subsystems print INFO, as a mask. */
static unsigned test_info_mask(void)
{
	unsigned mask = 0;
	for (size_t i = 0; i < sizeof(test_subsystems) / sizeof(test_subsystems[0]); i++) {
		if (ndet_log_enabled(NDET_LOG_INFO, test_subsystems[i]))
			mask |= test_subsystems[i];
	}
	return mask;
}

static void test_log_subsys_default_is_init_env(void **state)
{
	test_setenv("NCCL_DET_DEBUG", "INFO");
	test_relog();
	assert_int_equal(test_info_mask(), NDET_SUBSYS_INIT | NDET_SUBSYS_ENV);
	NDET_INFO(NDET_SUBSYS_ENV, "env line");
	NDET_INFO(NDET_SUBSYS_COLL, "coll line");
	assert_int_equal(test_count_log("env line"), 1);
	assert_int_equal(test_count_log("coll line"), 0);
}

static void test_log_subsys_list(void **state)
{
	test_setenv("NCCL_DET_DEBUG", "INFO");
	test_setenv("NCCL_DET_DEBUG_SUBSYS", "COLL,setup");
	test_relog();
	assert_int_equal(test_info_mask(), NDET_SUBSYS_COLL | NDET_SUBSYS_SETUP);
	NDET_INFO(NDET_SUBSYS_ENV, "env line");
	NDET_INFO(NDET_SUBSYS_COLL, "coll line");
	NDET_WARN("warn line");
	assert_int_equal(test_count_log("env line"), 0);
	assert_int_equal(test_count_log("coll line"), 1);
	/* Subsystems filter INFO and TRACE, never warnings. */
	assert_int_equal(test_count_log("warn line"), 1);

	test_setenv("NCCL_DET_DEBUG_SUBSYS", "ALL");
	test_relog();
	assert_int_equal(test_info_mask(), NDET_SUBSYS_INIT | NDET_SUBSYS_ENV | NDET_SUBSYS_SETUP |
						   NDET_SUBSYS_COLL | NDET_SUBSYS_ENGINE |
						   NDET_SUBSYS_ALLOC);
}

static void test_log_subsys_negation(void **state)
{
	test_setenv("NCCL_DET_DEBUG", "INFO");
	test_setenv("NCCL_DET_DEBUG_SUBSYS", "^COLL");
	test_relog();
	assert_int_equal(test_info_mask(), NDET_SUBSYS_INIT | NDET_SUBSYS_ENV | NDET_SUBSYS_SETUP |
						   NDET_SUBSYS_ENGINE | NDET_SUBSYS_ALLOC);
	test_setenv("NCCL_DET_DEBUG_SUBSYS", "^COLL,ENV");
	test_relog();
	assert_int_equal(test_info_mask(), NDET_SUBSYS_INIT | NDET_SUBSYS_SETUP |
						   NDET_SUBSYS_ENGINE | NDET_SUBSYS_ALLOC);
}

/* A bad value of our own keeps the default mask: a typo never turns INFO off. */
static void test_log_subsys_typo_keeps_default(void **state)
{
	test_setenv("NCCL_DET_DEBUG", "INFO");
	test_setenv("NCCL_DET_DEBUG_SUBSYS", "BOGUS");
	test_relog();
	assert_int_equal(test_info_mask(), NDET_SUBSYS_INIT | NDET_SUBSYS_ENV);
	test_setenv("NCCL_DET_DEBUG_SUBSYS", "COLL,SETUPP");
	test_relog();
	assert_int_equal(test_info_mask(), NDET_SUBSYS_INIT | NDET_SUBSYS_ENV);
	assert_null(ndet_log_check_subsys("^COLL,env"));
	assert_non_null(ndet_log_check_subsys("COLL,SETUPP"));
	assert_null(ndet_log_check_level("trace"));
	assert_non_null(ndet_log_check_level("LOUD"));
}

static void test_log_subsys_falls_back_to_nccl(void **state)
{
	test_setenv("NCCL_DET_DEBUG", "INFO");
	/* NCCL's own subsystem names we do not have (NET) are ignored. */
	test_setenv("NCCL_DEBUG_SUBSYS", "NET,COLL");
	test_relog();
	assert_int_equal(test_info_mask(), NDET_SUBSYS_COLL);
	test_setenv("NCCL_DEBUG_SUBSYS", "^INIT");
	test_relog();
	assert_int_equal(test_info_mask(), NDET_SUBSYS_ENV | NDET_SUBSYS_SETUP | NDET_SUBSYS_COLL |
						   NDET_SUBSYS_ENGINE | NDET_SUBSYS_ALLOC);
	test_setenv("NCCL_DET_DEBUG_SUBSYS", "ENGINE");
	test_relog();
	assert_int_equal(test_info_mask(), NDET_SUBSYS_ENGINE);
}

static void test_log_line_format(void **state)
{
	test_setenv("NCCL_DET_DEBUG", "TRACE");
	test_setenv("NCCL_DET_DEBUG_SUBSYS", "ALL");
	test_relog();
	NDET_WARN("hello %d", 42);
	ndet_log_set_device(3);
	NDET_INFO(NDET_SUBSYS_COLL, "with device");
	NDET_TRACE(NDET_SUBSYS_COLL, "traced");
	char *log = test_read_file(test_log_path);

	char pattern[512];
	int pid = (int)getpid();
	int tid = (int)syscall(SYS_gettid);
	snprintf(pattern, sizeof(pattern),
		 "^[^:. ]+:%d:%d NCCL-DET WARN test_log\\.c:[0-9]+ hello 42\n"
		 "[^:. ]+:%d:%d \\[3\\] NCCL-DET INFO with device\n"
		 "[^:. ]+:%d:%d \\[3\\] NCCL-DET TRACE test_log\\.c:[0-9]+ traced\n$",
		 pid, tid, pid, tid, pid, tid);
	regex_t regex;
	assert_int_equal(regcomp(&regex, pattern, REG_EXTENDED), 0);
	int matched = regexec(&regex, log, 0, NULL, 0);
	regfree(&regex);
	if (matched != 0)
		fail_msg("log does not match\n%s\nlog:\n%s", pattern, log);

	/* The host is the short name, as NCCL prints it. */
	char host[256];
	assert_int_equal(gethostname(host, sizeof(host)), 0);
	host[sizeof(host) - 1] = '\0';
	char *dot = strchr(host, '.');
	if (dot != NULL)
		*dot = '\0';
	assert_int_equal(strncmp(log, host, strcspn(log, ":")), 0);
	free(log);
}

/* The test directory's file `format` (with %d: this pid) holds `line` once; its path. */
static void test_assert_pid_file(char *path, size_t size, const char *format, const char *line)
{
	char name[64];
	snprintf(name, sizeof(name), format, (int)getpid());
	test_path(path, size, name);
	char *text = test_read_file(path);
	assert_int_equal(test_count(text, line), 1);
	free(text);
}

static void test_log_file_pattern_and_nccl_fallback(void **state)
{
	char pattern[PATH_MAX];
	test_path(pattern, sizeof(pattern), "log.%p");
	test_setenv("NCCL_DET_DEBUG_FILE", pattern);
	test_relog();
	NDET_WARN("to the pid file");
	char pid_log[PATH_MAX];
	test_assert_pid_file(pid_log, sizeof(pid_log), "log.%d", "to the pid file");
	char name[64];
	char *text;

	/*
	 * NCCL_DEBUG_FILE when ours is unset: beside NCCL's file, never in it (NCCL
	 * writes its file from the start and would overwrite our lines); %h is the host
	 * name up to its first '.', %% a '%'.
	 */
	char nccl_pattern[PATH_MAX], nccl_log[PATH_MAX], host[256];
	test_path(nccl_pattern, sizeof(nccl_pattern), "nccl-log.%h.%%");
	assert_int_equal(gethostname(host, sizeof(host)), 0);
	host[sizeof(host) - 1] = '\0';
	host[strcspn(host, ".")] = '\0';
	snprintf(name, sizeof(name), "nccl-log.%.40s.%%", host);
	test_path(nccl_log, sizeof(nccl_log), name);
	assert_int_equal(unsetenv("NCCL_DET_DEBUG_FILE"), 0);
	test_setenv("NCCL_DEBUG_FILE", nccl_pattern);
	test_relog();
	char side_log[PATH_MAX];
	const int side_len =
		snprintf(side_log, sizeof(side_log), "%s%s", nccl_log, NDET_LOG_NCCL_FILE_SUFFIX);
	assert_true(side_len > 0 && (size_t)side_len < sizeof(side_log));
	/* Asking the level reads the settings, and creates no file before a line. */
	assert_true(ndet_log_enabled(NDET_LOG_WARN, NDET_SUBSYS_ALL));
	assert_int_equal(access(side_log, F_OK), -1);
	NDET_WARN("to the nccl file");
	assert_int_equal(access(nccl_log, F_OK), -1);
	strcat(nccl_log, NDET_LOG_NCCL_FILE_SUFFIX);
	text = test_read_file(nccl_log);
	assert_int_equal(test_count(text, "to the nccl file"), 1);
	free(text);
	test_relog(); /* closes it */
	assert_int_equal(unlink(nccl_log), 0);
}

/* A relative file name is taken from the directory the settings were read in. */
static void test_log_relative_file_keeps_its_directory(void **state)
{
	char cwd[PATH_MAX], path[PATH_MAX];
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	assert_int_equal(chdir(test_dir), 0);
	test_setenv("NCCL_DET_DEBUG_FILE", "relative.%p.log");
	test_relog();
	assert_true(ndet_log_enabled(NDET_LOG_WARN, NDET_SUBSYS_ALL));
	assert_int_equal(chdir("/"), 0);
	NDET_WARN("after a chdir");
	assert_int_equal(chdir(cwd), 0);
	test_assert_pid_file(path, sizeof(path), "relative.%d.log", "after a chdir");
	test_relog(); /* closes it */
	assert_int_equal(unlink(path), 0);
}

static void test_log_keeps_errno(void **state)
{
	/* The first call of each kind reads the environment and conf files. */
	errno = EAGAIN;
	NDET_WARN("errno must survive");
	assert_int_equal(errno, EAGAIN);
	test_setenv("NCCL_DET_DEBUG", "INFO");
	test_relog();
	errno = EAGAIN;
	NDET_INFO(NDET_SUBSYS_INIT, "errno must survive");
	assert_int_equal(errno, EAGAIN);
	errno = EAGAIN;
	assert_true(ndet_log_enabled(NDET_LOG_WARN, NDET_SUBSYS_ALL));
	assert_int_equal(errno, EAGAIN);
	assert_int_equal(test_count_log("errno must survive"), 1);
}

#define TEST_THREADS 16
#define TEST_CALLS   200

static pthread_barrier_t test_barrier;
static int test_once_flag;
static int test_other_flag;

static void *test_warn_once_worker(void *argument)
{
	pthread_barrier_wait(&test_barrier);
	for (int i = 0; i < TEST_CALLS; i++) {
		NDET_WARN_ONCE(&test_once_flag, "first cause %d", i);
		NDET_WARN_ONCE(&test_other_flag, "second cause");
	}
	return NULL;
}

static void test_log_warn_once_from_many_threads(void **state)
{
	pthread_t threads[TEST_THREADS];
	test_once_flag = 0;
	test_other_flag = 0;
	assert_int_equal(pthread_barrier_init(&test_barrier, NULL, TEST_THREADS), 0);
	for (int i = 0; i < TEST_THREADS; i++)
		assert_int_equal(pthread_create(&threads[i], NULL, test_warn_once_worker, NULL), 0);
	for (int i = 0; i < TEST_THREADS; i++)
		assert_int_equal(pthread_join(threads[i], NULL), 0);
	assert_int_equal(pthread_barrier_destroy(&test_barrier), 0);
	assert_int_equal(test_count_log("NCCL-DET WARN"), 2);
	assert_int_equal(test_count_log("first cause 0"), 1);
	assert_int_equal(test_count_log("second cause"), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_log_default_level_is_warn, test_setup,
						test_teardown),
		cmocka_unit_test_setup_teardown(test_log_level_names, test_setup, test_teardown),
		cmocka_unit_test_setup_teardown(test_log_det_debug_beats_nccl_debug, test_setup,
						test_teardown),
		cmocka_unit_test_setup_teardown(test_log_level_from_conf_file, test_setup,
						test_teardown),
		cmocka_unit_test_setup_teardown(test_log_subsys_default_is_init_env, test_setup,
						test_teardown),
		cmocka_unit_test_setup_teardown(test_log_subsys_list, test_setup, test_teardown),
		cmocka_unit_test_setup_teardown(test_log_subsys_negation, test_setup,
						test_teardown),
		cmocka_unit_test_setup_teardown(test_log_subsys_typo_keeps_default, test_setup,
						test_teardown),
		cmocka_unit_test_setup_teardown(test_log_subsys_falls_back_to_nccl, test_setup,
						test_teardown),
		cmocka_unit_test_setup_teardown(test_log_line_format, test_setup, test_teardown),
		cmocka_unit_test_setup_teardown(test_log_file_pattern_and_nccl_fallback, test_setup,
						test_teardown),
		cmocka_unit_test_setup_teardown(test_log_relative_file_keeps_its_directory,
						test_setup, test_teardown),
		cmocka_unit_test_setup_teardown(test_log_keeps_errno, test_setup, test_teardown),
		cmocka_unit_test_setup_teardown(test_log_warn_once_from_many_threads, test_setup,
						test_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
