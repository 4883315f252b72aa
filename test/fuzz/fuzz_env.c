/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Fuzz target: the conf-file reader (src/common/ndet_env.c), against a plain re-reading of
 * the same bytes.  Byte 0 picks how the files are found: bit 0, the user file through
 * NCCL_CONF_FILE (else $HOME/.nccl.conf); bit 1, the rest split at byte 1 into the
 * user file and /etc/nccl.conf's stand-in (else all of it is the user file).  Every
 * NAME=VALUE line must then be found with its trimmed value and the right source
 * (the first definition wins, the environment beats both files), names never defined
 * must be absent, and nothing may crash or leak.
 *
 * `make check` runs the plain driver (fuzz_driver.c).  With libFuzzer:
 *   test/fuzz/libfuzzer.sh BUILD_DIR 60    (or see that script for the clang command)
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test/fuzz/fuzz_driver.h"
#include "common/ndet_env.h"

const char fuzz_name[] = "fuzz_env";

static char fuzz_dir[PATH_MAX];
static char fuzz_conf[PATH_MAX];   /* the NCCL_CONF_FILE name */
static char fuzz_home[PATH_MAX];   /* $HOME/.nccl.conf */
static char fuzz_system[PATH_MAX]; /* /etc/nccl.conf's stand-in */

struct fuzz_entry {
	char *name;
	char *value;
	ndet_env_source_t source;
};

struct fuzz_expected {
	struct fuzz_entry *entries;
	size_t count, capacity;
};

static void fuzz_cleanup(void)
{
	unlink(fuzz_conf);
	unlink(fuzz_home);
	unlink(fuzz_system);
	if (rmdir(fuzz_dir) != 0)
		perror("fuzz_env: rmdir");
}

static void fuzz_path(char *path, const char *leaf)
{
	int length = snprintf(path, PATH_MAX, "%s/%s", fuzz_dir, leaf);
	if (length < 0 || length >= PATH_MAX)
		fuzz_fail("TMPDIR", "too long");
}

static void fuzz_init(void)
{
	if (fuzz_dir[0] != '\0')
		return;
	const char *tmp = getenv("TMPDIR");
	int length = snprintf(fuzz_dir, sizeof(fuzz_dir), "%s/ndet-fuzz-env-XXXXXX",
			      tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
	if (length < 0 || (size_t)length >= sizeof(fuzz_dir) || mkdtemp(fuzz_dir) == NULL)
		fuzz_fail("mkdtemp", strerror(errno));
	fuzz_path(fuzz_conf, "user.conf");
	fuzz_path(fuzz_home, ".nccl.conf");
	fuzz_path(fuzz_system, "system.conf");
	if (atexit(fuzz_cleanup) != 0)
		fuzz_fail("atexit", "failed");
	/* The machine's own conf files must not steer the run. */
	if (setenv("HOME", fuzz_dir, 1) != 0)
		fuzz_fail("setenv", strerror(errno));
}

static void fuzz_write(const char *path, const uint8_t *bytes, size_t size)
{
	FILE *file = fopen(path, "wb");
	if (file == NULL)
		fuzz_fail("fopen", strerror(errno));
	if (size > 0 && fwrite(bytes, 1, size, file) != size)
		fuzz_fail("fwrite", strerror(errno));
	if (fclose(file) != 0)
		fuzz_fail("fclose", strerror(errno));
}

static struct fuzz_entry *fuzz_find(struct fuzz_expected *expected, const char *name)
{
	for (size_t i = 0; i < expected->count; i++)
		if (strcmp(expected->entries[i].name, name) == 0)
			return &expected->entries[i];
	return NULL;
}

/* Written out again on purpose: the oracle must not share the reader's code. */
static char *fuzz_trim(char *text)
{
	while (isspace((unsigned char)*text))
		text++;
	size_t length = strlen(text);
	while (length > 0 && isspace((unsigned char)text[length - 1]))
		text[--length] = '\0';
	return text;
}

/*
 * The same bytes read the obvious way: lines end at '\n' (the last one may not);
 * a line, as a C string, ends at its first NUL.
 */
static void fuzz_expect_file(struct fuzz_expected *expected, const uint8_t *bytes, size_t size,
			     ndet_env_source_t source)
{
	for (size_t start = 0; start < size;) {
		const uint8_t *newline = memchr(bytes + start, '\n', size - start);
		size_t end = newline != NULL ? (size_t)(newline - bytes) : size;
		char *line = strndup((const char *)bytes + start, end - start);
		if (line == NULL)
			fuzz_fail("strndup", strerror(errno));
		char *text = fuzz_trim(line);
		char *equals = strchr(text, '=');
		if (text[0] != '\0' && text[0] != '#' && equals != NULL) {
			*equals = '\0';
			char *name = fuzz_trim(text);
			char *value = fuzz_trim(equals + 1);
			if (name[0] != '\0' && fuzz_find(expected, name) == NULL) {
				if (expected->count == expected->capacity) {
					size_t grown = expected->capacity * 2 + 8;
					struct fuzz_entry *entries = realloc(
						expected->entries, grown * sizeof(*entries));
					if (entries == NULL)
						fuzz_fail("realloc", "out of memory");
					expected->entries = entries;
					expected->capacity = grown;
				}
				struct fuzz_entry *entry = &expected->entries[expected->count++];
				entry->name = strdup(name);
				entry->value = strdup(value);
				entry->source = source;
				if (entry->name == NULL || entry->value == NULL)
					fuzz_fail("strdup", "out of memory");
			}
		}
		free(line);
		start = end + 1;
	}
}

static void fuzz_check(const struct fuzz_entry *entry)
{
	ndet_env_source_t source = NDET_ENV_SOURCE_DEFAULT;
	const char *value = ndet_env_get(entry->name, &source);
	const char *environment = getenv(entry->name);
	const char *want = environment != NULL ? environment : entry->value;
	ndet_env_source_t want_source = entry->source;
	if (environment != NULL && strcmp(environment, entry->value) != 0)
		want_source = NDET_ENV_SOURCE_ENVIRONMENT;
	if (value == NULL || strcmp(value, want) != 0)
		fuzz_fail("wrong value for", entry->name);
	if (source != want_source)
		fuzz_fail("wrong source for", entry->name);
	if (ndet_env_source_name(source) == NULL)
		fuzz_fail("no source name for", entry->name);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_init();
	if (size < 2)
		return 0;
	const bool named = (data[0] & 1) != 0, two_files = (data[0] & 2) != 0;
	const uint8_t *rest = data + 2;
	size_t length = size - 2;
	size_t user_length = two_files ? length * data[1] / 256 : length;

	const char *user = named ? fuzz_conf : fuzz_home;
	unlink(fuzz_conf);
	unlink(fuzz_home);
	fuzz_write(user, rest, user_length);
	fuzz_write(fuzz_system, rest + user_length, two_files ? length - user_length : 0);
	if (named ? setenv("NCCL_CONF_FILE", fuzz_conf, 1) != 0 : unsetenv("NCCL_CONF_FILE") != 0)
		fuzz_fail("setenv", strerror(errno));
	ndet_env_reset_for_testing(fuzz_system);

	struct fuzz_expected expected = {0};
	fuzz_expect_file(&expected, rest, user_length, NDET_ENV_SOURCE_USER_CONF);
	fuzz_expect_file(&expected, rest + user_length, two_files ? length - user_length : 0,
			 NDET_ENV_SOURCE_SYSTEM_CONF);
	for (size_t i = 0; i < expected.count; i++)
		fuzz_check(&expected.entries[i]);
	ndet_env_source_t source = NDET_ENV_SOURCE_ENVIRONMENT;
	if (fuzz_find(&expected, "NDET_FUZZ_NEVER_SET") == NULL &&
	    (ndet_env_get("NDET_FUZZ_NEVER_SET", &source) != NULL ||
	     source != NDET_ENV_SOURCE_DEFAULT))
		fuzz_fail("a name no file defines", "was found");

	for (size_t i = 0; i < expected.count; i++) {
		free(expected.entries[i].name);
		free(expected.entries[i].value);
	}
	free(expected.entries);
	/* Frees the reader's entries too: LeakSanitizer sees every allocation go. */
	ndet_env_reset_for_testing(NULL);
	return 0;
}

/* Byte 0: bit 0 NCCL_CONF_FILE, bit 1 two files split at byte 1. */
const struct fuzz_seed fuzz_seeds[] = {
	FUZZ_SEED("\x00\x00NCCL_DEBUG=INFO\n"),
	FUZZ_SEED("\x01\x00 NCCL_DET_POOL_SIZE = 64M \n# comment\n\n=\n==\nno equals\n"),
	FUZZ_SEED("\x03\x80NCCL_DET_ENABLE=1\nNCCL_DET_ENABLE=0\nNCCL_DET_STRICT=1\n"
		  "NCCL_DET_ENABLE=2\nNCCL_DET_STATS=1\n"),
	FUZZ_SEED("\x02\x40"
		  "A=1\r\nB = two words \r\n\tC\t=\t\t\nD=\nE==x=y\n  #F=1\n"),
	FUZZ_SEED("\x01\x00PATH=/nowhere\nHOME=/nowhere\nNCCL_CONF_FILE=/etc/passwd\n"),
	FUZZ_SEED("\x00\x00X=1\x00Y=2\nZ=3"),
	FUZZ_SEED("\x03\xffL=1\nL=2\nM=3"),
	FUZZ_SEED("\x00\x00\x01=\x02\n\xff\xfe=\x80\x81\n\v\f=\v\f\n"),
};
const size_t fuzz_seed_count = sizeof(fuzz_seeds) / sizeof(fuzz_seeds[0]);
const unsigned fuzz_generated_inputs = 2000;
