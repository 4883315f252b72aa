/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Conf files are read the way NCCL's initEnv() reads them: $NCCL_CONF_FILE if set,
 * else $HOME/.nccl.conf; then /etc/nccl.conf.  NCCL applies each line with
 * setenv(name, value, 0), so the environment beats the user file, which beats the
 * system file.  We never call setenv (the application owns its environment): we keep
 * the parsed lines and look them up in the same order.
 */
#include "config.h"

#include "common/ndet_env.h"

#include <ctype.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ndet_env_entry {
	char *name;
	char *value;
	ndet_env_source_t source;
};

static pthread_mutex_t ndet_env_lock = PTHREAD_MUTEX_INITIALIZER;
static int ndet_env_loaded;
/* Grown as needed: NCCL puts no limit on the number of lines either. */
static struct ndet_env_entry *ndet_env_entries;
static int ndet_env_entry_count;
static int ndet_env_entry_capacity;
static const char *ndet_env_system_conf = "/etc/nccl.conf";
static char ndet_env_user_conf_path[4096];

static struct ndet_env_entry *ndet_env_find(const char *name)
{
	for (int i = 0; i < ndet_env_entry_count; i++) {
		if (strcmp(ndet_env_entries[i].name, name) == 0)
			return &ndet_env_entries[i];
	}
	return NULL;
}

static char *ndet_env_trim(char *text)
{
	while (isspace((unsigned char)*text))
		text++;
	size_t length = strlen(text);
	while (length > 0 && isspace((unsigned char)text[length - 1]))
		text[--length] = '\0';
	return text;
}

/* False when out of memory: the caller stops reading rather than keep half a file. */
static bool ndet_env_add(const char *name, const char *value, ndet_env_source_t source)
{
	if (ndet_env_entry_count == ndet_env_entry_capacity) {
		int capacity = ndet_env_entry_capacity == 0 ? 32 : 2 * ndet_env_entry_capacity;
		struct ndet_env_entry *grown =
			realloc(ndet_env_entries, (size_t)capacity * sizeof(*grown));
		if (grown == NULL)
			return false;
		ndet_env_entries = grown;
		ndet_env_entry_capacity = capacity;
	}
	struct ndet_env_entry *entry = &ndet_env_entries[ndet_env_entry_count];
	entry->name = strdup(name);
	entry->value = strdup(value);
	if (entry->name == NULL || entry->value == NULL) {
		free(entry->name);
		free(entry->value);
		return false;
	}
	entry->source = source;
	ndet_env_entry_count++;
	return true;
}

/*
 * One file; the first definition of a name wins (NCCL's setenv(..., 0)).  Lines are
 * read whole with getline(), as NCCL does: a fixed buffer would cut a long value (a
 * library path) and parse its tail as a line of its own.
 */
static void ndet_env_read_file(const char *path, ndet_env_source_t source)
{
	FILE *file = fopen(path, "r");
	if (file == NULL)
		return;
	char *line = NULL;
	size_t line_capacity = 0;
	while (getline(&line, &line_capacity, file) != -1) {
		char *text = ndet_env_trim(line);
		if (text[0] == '\0' || text[0] == '#')
			continue;
		char *equals = strchr(text, '=');
		if (equals == NULL)
			continue;
		*equals = '\0';
		char *name = ndet_env_trim(text);
		char *value = ndet_env_trim(equals + 1);
		if (name[0] == '\0' || ndet_env_find(name) != NULL)
			continue;
		if (!ndet_env_add(name, value, source))
			break;
	}
	free(line);
	fclose(file);
}

static void ndet_env_load_locked(void)
{
	if (ndet_env_loaded)
		return;
	const char *conf = getenv("NCCL_CONF_FILE");
	if (conf != NULL && conf[0] != '\0') {
		snprintf(ndet_env_user_conf_path, sizeof(ndet_env_user_conf_path), "%s", conf);
		ndet_env_read_file(conf, NDET_ENV_SOURCE_USER_CONF);
	} else {
		const char *home = getenv("HOME");
		if (home != NULL && home[0] != '\0') {
			snprintf(ndet_env_user_conf_path, sizeof(ndet_env_user_conf_path),
				 "%s/.nccl.conf", home);
			ndet_env_read_file(ndet_env_user_conf_path, NDET_ENV_SOURCE_USER_CONF);
		}
	}
	ndet_env_read_file(ndet_env_system_conf, NDET_ENV_SOURCE_SYSTEM_CONF);
	__atomic_store_n(&ndet_env_loaded, 1, __ATOMIC_RELEASE);
}

extern char **environ;

void ndet_env_for_each_prefixed(const char *prefix,
				void (*visit)(void *context, const char *name,
					      ndet_env_source_t source),
				void *context)
{
	const size_t length = strlen(prefix);
	(void)ndet_env_get(prefix, NULL); /* the conf files, loaded once */
	for (char **entry = environ; entry != NULL && *entry != NULL; entry++) {
		const char *equals = strchr(*entry, '=');
		if (equals == NULL || strncmp(*entry, prefix, length) != 0)
			continue;
		char name[256];
		const size_t name_length = (size_t)(equals - *entry);
		if (name_length >= sizeof(name))
			continue;
		memcpy(name, *entry, name_length);
		name[name_length] = '\0';
		ndet_env_source_t source = NDET_ENV_SOURCE_ENVIRONMENT;
		(void)ndet_env_get(name, &source);
		visit(context, name, source);
	}
	for (int i = 0; i < ndet_env_entry_count; i++) {
		const struct ndet_env_entry *entry = &ndet_env_entries[i];
		if (strncmp(entry->name, prefix, length) == 0 && getenv(entry->name) == NULL)
			visit(context, entry->name, entry->source);
	}
}

const char *ndet_env_get(const char *name, ndet_env_source_t *source)
{
	const char *value = getenv(name);
	if (!__atomic_load_n(&ndet_env_loaded, __ATOMIC_ACQUIRE)) {
		pthread_mutex_lock(&ndet_env_lock);
		ndet_env_load_locked();
		pthread_mutex_unlock(&ndet_env_lock);
	}
	/* Entries are only appended before ndet_env_loaded is published: no lock needed. */
	struct ndet_env_entry *entry = ndet_env_find(name);
	if (value != NULL) {
		/* NCCL copies its conf files into the environment (setenv without overwrite)
		 * when it initialises: a variable equal to a conf-file entry is shown as coming
		 * from that file, which is where the user set it in the common case. */
		if (source != NULL)
			*source = entry != NULL && strcmp(entry->value, value) == 0
					  ? entry->source
					  : NDET_ENV_SOURCE_ENVIRONMENT;
		return value;
	}
	if (entry == NULL) {
		if (source != NULL)
			*source = NDET_ENV_SOURCE_DEFAULT;
		return NULL;
	}
	if (source != NULL)
		*source = entry->source;
	return entry->value;
}

const char *ndet_env_source_name(ndet_env_source_t source)
{
	switch (source) {
	case NDET_ENV_SOURCE_ENVIRONMENT:
		return "environment";
	case NDET_ENV_SOURCE_USER_CONF:
		return ndet_env_user_conf_path[0] != '\0' ? ndet_env_user_conf_path
							  : "user conf file";
	case NDET_ENV_SOURCE_SYSTEM_CONF:
		return ndet_env_system_conf;
	case NDET_ENV_SOURCE_DEFAULT:
		break;
	}
	return "default";
}

void ndet_env_reset_for_testing(const char *system_conf_path)
{
	pthread_mutex_lock(&ndet_env_lock);
	for (int i = 0; i < ndet_env_entry_count; i++) {
		free(ndet_env_entries[i].name);
		free(ndet_env_entries[i].value);
	}
	free(ndet_env_entries);
	ndet_env_entries = NULL;
	ndet_env_entry_count = 0;
	ndet_env_entry_capacity = 0;
	ndet_env_user_conf_path[0] = '\0';
	ndet_env_system_conf = system_conf_path != NULL ? system_conf_path : "/etc/nccl.conf";
	__atomic_store_n(&ndet_env_loaded, 0, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&ndet_env_lock);
}
