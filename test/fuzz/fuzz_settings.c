/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Fuzz entry for the settings parser and the conf-file reader.  Each input is used
 * twice: byte 0 picks a variable and the rest is its value in the environment; then
 * the whole input is a conf file named by NCCL_CONF_FILE.  After each parse every
 * setting must be in its documented range, the dump must stay one line per setting,
 * and a value the dump prints must parse back to the same settings.
 *
 * `make check` builds this with the plain driver below and runs it over a small
 * built-in corpus (and any files named on the command line).  With clang and
 * libFuzzer, for 300 s: test/fuzz/libfuzzer.sh BUILD_DIR 300 fuzz_settings
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/ndet_env.h"
#include "common/ndet_log.h"
#include "common/ndet_settings.h"

#define FUZZ_MIB (UINT64_C(1) << 20)
#define FUZZ_GIB (UINT64_C(1) << 30)
#define FUZZ_TIB (UINT64_C(1) << 40)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct {
	const char *name;
	int round_trip; /* the dump prints it in the syntax the parser reads */
} fuzz_variables[] = {
	{"NCCL_DET_ENABLE", 1},         {"NCCL_DET_STRICT", 1},      {"NCCL_DET_STATS", 1},
	{"NCCL_DET_POOL_SIZE", 1},      {"NCCL_DET_ONESHOT_MAX", 1}, {"NCCL_DET_TIMEOUT", 1},
	{"NCCL_DET_MAX_MEMORY", 1},     {"NCCL_DET_MAX_BLOCKS", 1},  {"NCCL_DET_DEBUG_DELAY", 1},
	{"NCCL_DET_NCCL_LIBRARY", 0},   {"NCCL_DET_TEST_FAIL", 1},   {"NCCL_DET_DEBUG", 0},
	{"NCCL_DET_DEBUG_SUBSYS", 0},   {"NCCL_DET_TUNER_ALGO", 1},  {"NCCL_DET_TUNER_PROTO", 1},
	{"NCCL_DET_TUNER_CHANNELS", 1}, {"NCCL_DET_EXPECT", 0},      {"NCCL_DET_LL_MAX", 1},
	{"NCCL_DET_PUSH_MIN", 1},       {"NCCL_DET_TEST_HOST", 1},   {"NCCL_DET_HOSTS_STAGING", 1},
	{"NCCL_DET_LL_WIDE_MIN", 1},
	/* Not NCCL_DET_DEBUG_FILE: the fuzzer would create files wherever it names. */
};

#define FUZZ_VARIABLE_COUNT (sizeof(fuzz_variables) / sizeof(fuzz_variables[0]))
#define FUZZ_DUMP_ROWS      23 /* the fuzzed variables and NCCL_DET_DEBUG_FILE */

static char fuzz_dir[PATH_MAX];
static char fuzz_conf[PATH_MAX];
static char fuzz_system_conf[PATH_MAX];

static void fuzz_die(const char *what, const char *detail)
{
	fprintf(stderr, "fuzz_settings: %s: %s\n", what, detail);
	abort();
}

static void fuzz_cleanup(void)
{
	if (unlink(fuzz_conf) != 0 && errno != ENOENT)
		perror("fuzz_settings: unlink");
	if (rmdir(fuzz_dir) != 0)
		perror("fuzz_settings: rmdir");
}

static void fuzz_init(void)
{
	if (fuzz_dir[0] != '\0')
		return;
	const char *tmp = getenv("TMPDIR");
	int length = snprintf(fuzz_dir, sizeof(fuzz_dir), "%s/ndet-fuzz-XXXXXX",
			      tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
	if (length < 0 || (size_t)length >= sizeof(fuzz_dir))
		fuzz_die("TMPDIR", "too long");
	if (mkdtemp(fuzz_dir) == NULL)
		fuzz_die("mkdtemp", strerror(errno));
	length = snprintf(fuzz_conf, sizeof(fuzz_conf), "%s/fuzz.conf", fuzz_dir);
	if (length < 0 || (size_t)length >= sizeof(fuzz_conf))
		fuzz_die("TMPDIR", "too long");
	/* Never created: the machine's /etc/nccl.conf must not steer the run. */
	length = snprintf(fuzz_system_conf, sizeof(fuzz_system_conf), "%s/missing.conf", fuzz_dir);
	if (length < 0 || (size_t)length >= sizeof(fuzz_system_conf))
		fuzz_die("TMPDIR", "too long");
	if (atexit(fuzz_cleanup) != 0)
		fuzz_die("atexit", "failed");
	if (setenv("HOME", fuzz_dir, 1) != 0)
		fuzz_die("setenv", strerror(errno));
	for (size_t i = 0; i < FUZZ_VARIABLE_COUNT; i++) {
		if (unsetenv(fuzz_variables[i].name) != 0)
			fuzz_die("unsetenv", strerror(errno));
	}
}

/*
 * INFO on every subsystem, so the WARN and INFO dump paths run too, into /dev/null.
 * Set in the environment, they also beat whatever a fuzzed conf file says.
 */
static void fuzz_set_logging(void)
{
	if (setenv("NCCL_DET_DEBUG", "INFO", 1) != 0 ||
	    setenv("NCCL_DET_DEBUG_SUBSYS", "ALL", 1) != 0 ||
	    setenv("NCCL_DET_DEBUG_FILE", "/dev/null", 1) != 0)
		fuzz_die("setenv", strerror(errno));
}

static const struct ndet_settings *fuzz_parse(void)
{
	ndet_env_reset_for_testing(fuzz_system_conf);
	ndet_log_reset_for_testing();
	ndet_settings_reset_for_testing();
	return ndet_settings_get();
}

static void fuzz_check_ranges(const struct ndet_settings *s)
{
	if (s->pool_size < FUZZ_MIB || s->pool_size > 16 * FUZZ_GIB)
		fuzz_die("range", "pool_size");
	if (s->oneshot_max > FUZZ_GIB && s->oneshot_max != NDET_SETTINGS_SIZE_AUTO)
		fuzz_die("range", "oneshot_max");
	if (s->timeout_ms < 1000 || s->timeout_ms > UINT64_C(604800000) || s->timeout_ms % 1000)
		fuzz_die("range", "timeout_ms");
	if (s->max_memory < FUZZ_MIB || s->max_memory > FUZZ_TIB)
		fuzz_die("range", "max_memory");
	if (s->max_blocks < 1 || s->max_blocks > 128)
		fuzz_die("range", "max_blocks");
	if (s->ll_max > 256 * 1024)
		fuzz_die("range", "ll_max");
	if (s->push_min > FUZZ_TIB)
		fuzz_die("range", "push_min");
	if (s->ll_wide_min > FUZZ_TIB)
		fuzz_die("range", "ll_wide_min");
	if (s->debug_delay_ns > 10000000)
		fuzz_die("range", "debug_delay_ns");
	if (memchr(s->nccl_library, '\0', sizeof(s->nccl_library)) == NULL)
		fuzz_die("range", "nccl_library not terminated");
	if ((s->test_fail &
	     ~(unsigned)(NDET_FAULT_ALLOC | NDET_FAULT_IPC_OPEN | NDET_FAULT_PROBE)) != 0 ||
	    s->test_fail_rank < -1)
		fuzz_die("range", "test_fail");
	if (memchr(s->test_host, '\0', sizeof(s->test_host)) == NULL)
		fuzz_die("range", "test_host not terminated");
	/* A name it gives a rank is a host name: 1 to 63 of its characters. */
	for (int rank = -1; rank < 4; rank++) {
		char name[NDET_SETTINGS_TEST_HOST_NAME_MAX + 1];
		if (!ndet_settings_test_host(s, rank, name, sizeof(name)))
			continue;
		const size_t length = strlen(name);
		if (length == 0 || length > NDET_SETTINGS_TEST_HOST_NAME_MAX ||
		    strspn(name,
			   "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") !=
			    length)
			fuzz_die("range", "test_host name");
	}
}

/* The dump; the caller frees it.  One header and one line per setting, printable only. */
static char *fuzz_dump(void)
{
	char *text = NULL;
	size_t size = 0;
	FILE *memory = open_memstream(&text, &size);
	if (memory == NULL)
		fuzz_die("open_memstream", strerror(errno));
	ndet_settings_dump(memory);
	if (fclose(memory) != 0)
		fuzz_die("fclose", strerror(errno));
	size_t lines = 0;
	for (size_t i = 0; i < size; i++) {
		unsigned char byte = (unsigned char)text[i];
		if (byte == '\n')
			lines++;
		else if (byte < 0x20 || byte >= 0x7f)
			fuzz_die("dump", "unescaped byte");
	}
	if (lines != 1 + FUZZ_DUMP_ROWS)
		fuzz_die("dump", "not one line per setting");
	return text;
}

/* Feed the value the dump shows for `name` back in: it must give the same settings. */
static void fuzz_check_round_trip(const char *name, const struct ndet_settings *parsed)
{
	struct ndet_settings before;
	memcpy(&before, parsed, sizeof(before));
	char *dump = fuzz_dump();
	size_t name_length = strlen(name);
	const char *line = dump;
	while (line != NULL &&
	       !(strncmp(line, name, name_length) == 0 && line[name_length] == ' ')) {
		line = strchr(line, '\n');
		if (line != NULL)
			line++;
	}
	if (line == NULL)
		fuzz_die("dump", name);
	const char *value = line + name_length;
	value += strspn(value, " ");
	char *shown = strndup(value, strcspn(value, " "));
	free(dump);
	if (shown == NULL)
		fuzz_die("strndup", strerror(errno));
	if (setenv(name, shown, 1) != 0)
		fuzz_die("setenv", strerror(errno));
	const struct ndet_settings *again = fuzz_parse();
	if (memcmp(&before, again, sizeof(before)) != 0)
		fuzz_die("round trip changed the settings", shown);
	free(shown);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_init();
	fuzz_set_logging();
	if (size == 0)
		return 0;

	/* The environment: a C string, so the value ends at the first NUL. */
	const char *name = fuzz_variables[data[0] % FUZZ_VARIABLE_COUNT].name;
	char *value = strndup((const char *)data + 1, size - 1);
	if (value == NULL)
		fuzz_die("strndup", strerror(errno));
	if (setenv(name, value, 1) != 0)
		fuzz_die("setenv", strerror(errno));
	free(value);
	const struct ndet_settings *settings = fuzz_parse();
	fuzz_check_ranges(settings);
	(void)ndet_settings_agreement_hash(settings);
	free(fuzz_dump());
	if (fuzz_variables[data[0] % FUZZ_VARIABLE_COUNT].round_trip)
		fuzz_check_round_trip(name, settings);
	if (unsetenv(name) != 0)
		fuzz_die("unsetenv", strerror(errno));
	fuzz_set_logging();

	/* The whole input as a conf file. */
	FILE *file = fopen(fuzz_conf, "w");
	if (file == NULL)
		fuzz_die("fopen", strerror(errno));
	if (fwrite(data, 1, size, file) != size)
		fuzz_die("fwrite", strerror(errno));
	if (fclose(file) != 0)
		fuzz_die("fclose", strerror(errno));
	if (setenv("NCCL_CONF_FILE", fuzz_conf, 1) != 0)
		fuzz_die("setenv", strerror(errno));
	settings = fuzz_parse();
	fuzz_check_ranges(settings);
	free(fuzz_dump());
	if (unsetenv("NCCL_CONF_FILE") != 0)
		fuzz_die("unsetenv", strerror(errno));
	return 0;
}

#ifndef NDET_LIBFUZZER
/* Byte 0 of each input is the variable's index in fuzz_variables. */
static const struct {
	unsigned variable;
	const char *text;
} fuzz_corpus[] = {
	{0, "1"},
	{0, "off"},
	{1, "YES"},
	{2, "2"},
	{3, "64MiB"},
	{3, "18446744073709551616"},
	{3, "16777216T"},
	{3, "1Ki"},
	{3, "-1"},
	{4, "0"},
	{4, "1GiB"},
	{5, "0"},
	{5, "604800"},
	{6, "1T"},
	{7, "4294967320"},
	{8, "10000000"},
	{9, "/opt/nccl/lib/libnccl.so.2"},
	{9, "/path\twith\ncontrol\x01bytes"},
	{10, "alloc,probe@0"},
	{10, "ipc_open@"},
	{10, "alloc,,probe"},
	{10, "none"},
	{11, "INFO"},
	{12, "^COLL"},
	{3, "NCCL_DET_POOL_SIZE=64M\n# comment\n\n  NCCL_DET_TEST_FAIL = alloc@1\n"},
	{5, "NCCL_DET_TIMEOUT=0\nNCCL_DET_TIMEOUT=60\n=\n==\nno equals\n"},
	{7, "NCCL_DET_MAX_BLOCKS=\nNCCL_DET_ENABLE=maybe\nNCCL_DET_DEBUG_DELAY=1\r\n"},
};

/* Inputs named on the command line (crashes, a libFuzzer corpus), then the built-in ones. */
int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		FILE *file = fopen(argv[i], "rb");
		if (file == NULL)
			fuzz_die(argv[i], strerror(errno));
		uint8_t buffer[65536];
		size_t size = fread(buffer, 1, sizeof(buffer), file);
		if (ferror(file))
			fuzz_die(argv[i], "read error");
		if (fclose(file) != 0)
			fuzz_die(argv[i], strerror(errno));
		LLVMFuzzerTestOneInput(buffer, size);
	}
	for (size_t i = 0; i < sizeof(fuzz_corpus) / sizeof(fuzz_corpus[0]); i++) {
		uint8_t buffer[1024];
		size_t length = strlen(fuzz_corpus[i].text);
		if (length + 1 > sizeof(buffer))
			fuzz_die("corpus", "entry too long");
		buffer[0] = (uint8_t)fuzz_corpus[i].variable;
		memcpy(buffer + 1, fuzz_corpus[i].text, length);
		LLVMFuzzerTestOneInput(buffer, length + 1);
	}
	/* A value longer than the library path buffer, from both sources. */
	uint8_t long_input[6000];
	memset(long_input, 'a', sizeof(long_input));
	long_input[0] = 9;
	LLVMFuzzerTestOneInput(long_input, sizeof(long_input));
	printf("fuzz_settings: %zu built-in inputs passed\n",
	       sizeof(fuzz_corpus) / sizeof(fuzz_corpus[0]) + 1);
	return 0;
}
#endif /* NDET_LIBFUZZER */
