/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 */
#include "config.h"

#include "common/ndet_log.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/ndet_env.h"

/* -1 until parsed; then an ndet_log_level_t.  Read without a lock on the fast path. */
static int ndet_log_level_cached = -1;
static unsigned ndet_log_subsys_mask = NDET_SUBSYS_INIT | NDET_SUBSYS_ENV;
static FILE *ndet_log_file;
/*
 * Where the first line goes (ndet_log_init_locked): a file name pattern and the
 * suffix to add (pattern NULL: stdout).  Opened at the first line written, so that a
 * process that logs nothing leaves no empty file.
 */
static char *ndet_log_pattern;
static const char *ndet_log_suffix = "";
static pthread_mutex_t ndet_log_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int ndet_log_device = -1;

static const struct {
	const char *name;
	unsigned bit;
} ndet_log_subsys_names[] = {
	{"INIT", NDET_SUBSYS_INIT}, {"ENV", NDET_SUBSYS_ENV},       {"SETUP", NDET_SUBSYS_SETUP},
	{"COLL", NDET_SUBSYS_COLL}, {"ENGINE", NDET_SUBSYS_ENGINE}, {"ALLOC", NDET_SUBSYS_ALLOC},
	{"ALL", NDET_SUBSYS_ALL},
};

static const char *ndet_log_lookup(const char *own, const char *nccl)
{
	const char *value = ndet_env_get(own, NULL);
	if (value == NULL || value[0] == '\0')
		value = ndet_env_get(nccl, NULL);
	return value;
}

/* The level a value names; false where it names none. */
static bool ndet_log_level_of(const char *value, ndet_log_level_t *level)
{
	static const struct {
		const char *name;
		ndet_log_level_t level;
	} levels[] = {{"VERSION", NDET_LOG_VERSION}, {"WARN", NDET_LOG_WARN},
		      {"INFO", NDET_LOG_INFO},       {"TRACE", NDET_LOG_TRACE},
		      {"NONE", NDET_LOG_NONE},       {"0", NDET_LOG_NONE}};
	for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
		if (strcasecmp(value, levels[i].name) == 0) {
			*level = levels[i].level;
			return true;
		}
	}
	return false;
}

static ndet_log_level_t ndet_log_parse_level(const char *value)
{
	ndet_log_level_t level = NDET_LOG_WARN;
	/*
	 * NCCL treats unknown values as "no output"; we keep warnings, the safer default
	 * (and the settings' WARN names the bad value: ndet_log_check_level).
	 */
	if (value == NULL || value[0] == '\0' || !ndet_log_level_of(value, &level))
		return NDET_LOG_WARN;
	return level;
}

const char *ndet_log_check_level(const char *value)
{
	ndet_log_level_t level;
	return ndet_log_level_of(value, &level) ? NULL : "not a log level";
}

/*
 * The subsystem bits of a list.  strict: false where a name in it is none of ours;
 * else such names are skipped (NCCL_DEBUG_SUBSYS, whose other names are NCCL's own).
 */
static bool ndet_log_subsys_of(const char *value, unsigned *mask, bool strict)
{
	int invert = value[0] == '^';
	char buffer[256];
	if (strlen(value) >= sizeof(buffer))
		return false;
	snprintf(buffer, sizeof(buffer), "%s", value + invert);
	unsigned bits = 0;
	char *save = NULL;
	for (char *token = strtok_r(buffer, ",", &save); token != NULL;
	     token = strtok_r(NULL, ",", &save)) {
		bool found = false;
		for (size_t i = 0;
		     i < sizeof(ndet_log_subsys_names) / sizeof(ndet_log_subsys_names[0]); i++) {
			if (strcasecmp(token, ndet_log_subsys_names[i].name) == 0) {
				bits |= ndet_log_subsys_names[i].bit;
				found = true;
			}
		}
		if (!found && strict)
			return false;
	}
	*mask = invert ? (NDET_SUBSYS_ALL & ~bits) : bits;
	return true;
}

const char *ndet_log_check_subsys(const char *value)
{
	unsigned mask;
	return ndet_log_subsys_of(value, &mask, true) ? NULL
						      : "names a subsystem that does not exist";
}

/*
 * NCCL's syntax: "INIT,COLL", or "^INIT" for everything but INIT.  Our own variable
 * naming a subsystem that does not exist keeps the default (a typo must not turn INFO
 * off; the settings' WARN names it: ndet_log_check_subsys); NCCL_DEBUG_SUBSYS, read
 * when ours is unset, may name NCCL's other subsystems, which are skipped.
 */
static unsigned ndet_log_parse_subsys(const char *own, const char *nccl)
{
	const unsigned fallback = NDET_SUBSYS_INIT | NDET_SUBSYS_ENV;
	unsigned mask = fallback;
	if (own != NULL && own[0] != '\0')
		return ndet_log_subsys_of(own, &mask, true) ? mask : fallback;
	if (nccl != NULL && nccl[0] != '\0')
		return ndet_log_subsys_of(nccl, &mask, false) ? mask : fallback;
	return fallback;
}

/*
 * The host name as NCCL puts it into file names: up to the first '.', with '/' and
 * '%' made '_'.
 */
static void ndet_log_host_piece(char *piece, size_t size)
{
	if (gethostname(piece, size) != 0)
		snprintf(piece, size, "unknown");
	piece[size - 1] = '\0';
	for (char *c = piece; *c != '\0'; c++) {
		if (*c == '.') {
			*c = '\0';
			break;
		}
		if (*c == '/' || *c == '%')
			*c = '_';
	}
}

/*
 * NCCL expands %h (host name), %p (pid) and %% in NCCL_DEBUG_FILE; so do we.
 * `suffix` is appended to the expanded name.
 */
static FILE *ndet_log_open_file(const char *pattern, const char *suffix)
{
	if (pattern == NULL || pattern[0] == '\0')
		return stdout;
	char path[4096];
	size_t used = 0;
	for (const char *p = pattern; *p != '\0' && used + 1 < sizeof(path); p++) {
		if (p[0] == '%' && (p[1] == 'h' || p[1] == 'p' || p[1] == '%')) {
			char piece[256];
			if (p[1] == 'h')
				ndet_log_host_piece(piece, sizeof(piece));
			else if (p[1] == 'p')
				snprintf(piece, sizeof(piece), "%d", (int)getpid());
			else
				snprintf(piece, sizeof(piece), "%%");
			used += (size_t)snprintf(path + used, sizeof(path) - used, "%s", piece);
			if (used >= sizeof(path))
				used = sizeof(path) - 1;
			p++;
		} else {
			path[used++] = *p;
		}
	}
	path[used] = '\0';
	if (used + strlen(suffix) >= sizeof(path))
		return stdout;
	memcpy(path + used, suffix, strlen(suffix) + 1);
	FILE *file = fopen(path, "a");
	if (file == NULL)
		return stdout;
	setvbuf(file, NULL, _IOLBF, 0);
	return file;
}

/*
 * A copy of `pattern` that names the same file from any directory: relative to the
 * directory of now (when the settings are read, as NCCL opens its file at its
 * initialisation), not of the first line, which the application may have changed.
 */
static char *ndet_log_absolute(const char *pattern)
{
	char cwd[4096];
	if (pattern[0] == '/' || getcwd(cwd, sizeof(cwd)) == NULL)
		return strdup(pattern);
	/* The directory's own '%' are doubled: the pattern's expansion keeps them. */
	const size_t bytes = 2 * strlen(cwd) + 1 + strlen(pattern) + 1;
	char *path = malloc(bytes);
	if (path == NULL)
		return NULL;
	size_t used = 0;
	for (const char *c = cwd; *c != '\0'; c++) {
		if (*c == '%')
			path[used++] = '%';
		path[used++] = *c;
	}
	snprintf(path + used, bytes - used, "/%s", pattern);
	return path;
}

static void ndet_log_init_locked(void)
{
	if (__atomic_load_n(&ndet_log_level_cached, __ATOMIC_ACQUIRE) >= 0)
		return;
	ndet_log_level_t level =
		ndet_log_parse_level(ndet_log_lookup("NCCL_DET_DEBUG", "NCCL_DEBUG"));
	ndet_log_subsys_mask = ndet_log_parse_subsys(ndet_env_get("NCCL_DET_DEBUG_SUBSYS", NULL),
						     ndet_env_get("NCCL_DEBUG_SUBSYS", NULL));
	/*
	 * Not into NCCL's own file: NCCL opens it for writing from its start, and its
	 * next lines would overwrite ours.  Beside it, with a suffix.
	 */
	const char *own = ndet_env_get("NCCL_DET_DEBUG_FILE", NULL);
	const char *nccl = ndet_env_get("NCCL_DEBUG_FILE", NULL);
	free(ndet_log_pattern);
	ndet_log_pattern = NULL;
	ndet_log_suffix = "";
	if (own != NULL && own[0] != '\0') {
		ndet_log_pattern = ndet_log_absolute(own);
	} else if (nccl != NULL && nccl[0] != '\0') {
		ndet_log_pattern = ndet_log_absolute(nccl);
		ndet_log_suffix = NDET_LOG_NCCL_FILE_SUFFIX;
	}
	__atomic_store_n(&ndet_log_level_cached, (int)level, __ATOMIC_RELEASE);
}

ndet_log_level_t ndet_log_level(void)
{
	int level = __atomic_load_n(&ndet_log_level_cached, __ATOMIC_ACQUIRE);
	if (level >= 0)
		return (ndet_log_level_t)level;
	/* Reading conf files sets errno; a caller logging a failure may still need its own. */
	int saved_errno = errno;
	pthread_mutex_lock(&ndet_log_lock);
	ndet_log_init_locked();
	pthread_mutex_unlock(&ndet_log_lock);
	errno = saved_errno;
	return (ndet_log_level_t)__atomic_load_n(&ndet_log_level_cached, __ATOMIC_ACQUIRE);
}

bool ndet_log_enabled(ndet_log_level_t level, unsigned subsys)
{
	if ((int)ndet_log_level() < (int)level)
		return false;
	if (level >= NDET_LOG_INFO && (subsys & ndet_log_subsys_mask) == 0)
		return false;
	return true;
}

void ndet_log_set_device(int device)
{
	ndet_log_device = device;
}

/* One line: "host:pid:tid [dev] NCCL-DET LABEL[ where] message". */
static void ndet_log_write(const char *label, const char *where, const char *fmt, va_list args)
{
	char host[64];
	if (gethostname(host, sizeof(host)) != 0)
		snprintf(host, sizeof(host), "unknown");
	host[sizeof(host) - 1] = '\0';
	char *dot = strchr(host, '.');
	if (dot != NULL)
		*dot = '\0';

	char message[1024];
	vsnprintf(message, sizeof(message), fmt, args);

	char device[16] = "";
	if (ndet_log_device >= 0)
		snprintf(device, sizeof(device), " [%d]", ndet_log_device);

	pthread_mutex_lock(&ndet_log_lock);
	if (ndet_log_file == NULL)
		ndet_log_file = ndet_log_open_file(ndet_log_pattern, ndet_log_suffix);
	FILE *out = ndet_log_file;
	fprintf(out, "%s:%d:%d%s NCCL-DET %s%s %s\n", host, (int)getpid(), (int)syscall(SYS_gettid),
		device, label, where, message);
	fflush(out);
	pthread_mutex_unlock(&ndet_log_lock);
}

void ndet_log(ndet_log_level_t level, unsigned subsys, const char *file, int line, const char *fmt,
	      ...)
{
	int saved_errno = errno;
	if (!ndet_log_enabled(level, subsys))
		return;
	static const char *const level_names[] = {"NONE", "VERSION", "WARN", "INFO", "TRACE"};
	char where[128] = "";
	if (level == NDET_LOG_TRACE || level == NDET_LOG_WARN) {
		const char *base = strrchr(file, '/');
		snprintf(where, sizeof(where), " %s:%d", base != NULL ? base + 1 : file, line);
	}
	va_list args;
	va_start(args, fmt);
	ndet_log_write(level_names[level], where, fmt, args);
	va_end(args);
	errno = saved_errno;
}

void ndet_log_report(const char *fmt, ...)
{
	int saved_errno = errno;
	if (ndet_log_level() == NDET_LOG_NONE)
		return;
	va_list args;
	va_start(args, fmt);
	ndet_log_write("STATS", "", fmt, args);
	va_end(args);
	errno = saved_errno;
}

void ndet_log_reset_for_testing(void)
{
	pthread_mutex_lock(&ndet_log_lock);
	if (ndet_log_file != NULL && ndet_log_file != stdout)
		fclose(ndet_log_file);
	ndet_log_file = NULL;
	free(ndet_log_pattern);
	ndet_log_pattern = NULL;
	__atomic_store_n(&ndet_log_level_cached, -1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&ndet_log_lock);
}
