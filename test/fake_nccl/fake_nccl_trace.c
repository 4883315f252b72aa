/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Trace-file helpers (declared in fake_nccl.h).  Kept apart from the helpers that
 * call NCCL so that a test which does not link libnccl (it reaches NCCL through a
 * dlopen'ed library) can use them.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test/fake_nccl/fake_nccl.h"

char *fake_nccl_trace_read(const char *path)
{
	FILE *file = fopen(path, "r");
	if (file == NULL)
		return errno == ENOENT ? strdup("") : NULL;
	size_t capacity = 4096, length = 0;
	char *text = malloc(capacity);
	while (text != NULL) {
		if (length + 1 == capacity) {
			char *grown = realloc(text, 2 * capacity);
			if (grown == NULL) {
				free(text);
				text = NULL;
				break;
			}
			text = grown;
			capacity *= 2;
		}
		size_t got = fread(text + length, 1, capacity - 1 - length, file);
		length += got;
		if (got == 0) {
			if (ferror(file)) {
				free(text);
				text = NULL;
			}
			break;
		}
	}
	if (text != NULL)
		text[length] = '\0';
	if (fclose(file) != 0) {
		free(text);
		return NULL;
	}
	return text;
}

int fake_nccl_trace_count(const char *path, const char *function)
{
	char *text = fake_nccl_trace_read(path);
	if (text == NULL)
		return -1;
	size_t length = strlen(function);
	int count = 0;
	for (char *line = text; *line != '\0';) {
		char *end = strchr(line, '\n');
		if (strncmp(line, function, length) == 0 && line[length] == '(')
			count++;
		if (end == NULL)
			break;
		line = end + 1;
	}
	free(text);
	return count;
}

int fake_nccl_file_count(const char *path, const char *needle1, const char *needle2)
{
	FILE *file = fopen(path, "r");
	if (file == NULL)
		return -1;
	char line[4096];
	int count = 0;
	while (fgets(line, sizeof(line), file) != NULL) {
		if (strstr(line, needle1) != NULL &&
		    (needle2 == NULL || strstr(line, needle2) != NULL))
			count++;
	}
	fclose(file);
	return count;
}

int fake_nccl_trace_temp(char *path, size_t size)
{
	const char *directory = getenv("TMPDIR");
	if (directory == NULL || directory[0] == '\0')
		directory = "/tmp";
	int written = snprintf(path, size, "%s/fake-nccl-trace-XXXXXX", directory);
	if (written < 0 || (size_t)written >= size)
		return -1;
	int fd = mkstemp(path);
	if (fd < 0)
		return -1;
	return close(fd) == 0 ? 0 : -1;
}
