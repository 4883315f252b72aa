/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Raw variable lookup the way NCCL sees variables: the process environment first,
 * then `NAME=VALUE` lines of the conf files NCCL reads ($NCCL_CONF_FILE, else
 * ~/.nccl.conf, then /etc/nccl.conf).  No logging here (the logger itself uses this):
 * like NCCL, a missing or unreadable conf file and a line without '=' are skipped.
 */
#ifndef NDET_ENV_H_
#define NDET_ENV_H_

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
	NDET_ENV_SOURCE_DEFAULT = 0, /* not set anywhere */
	NDET_ENV_SOURCE_ENVIRONMENT,
	NDET_ENV_SOURCE_USER_CONF,   /* $NCCL_CONF_FILE or ~/.nccl.conf */
	NDET_ENV_SOURCE_SYSTEM_CONF, /* /etc/nccl.conf */
} ndet_env_source_t;

/*
 * Value of `name`, or NULL when it is set nowhere.  The returned string stays valid
 * for the life of the process (conf files are read once, thread-safely).  `source`
 * may be NULL.
 */
const char *ndet_env_get(const char *name, ndet_env_source_t *source);

/*
 * Calls visit() once for every distinct name starting with `prefix` that is set in
 * the environment or a conf file (environment first, then the files in lookup order),
 * with the source ndet_env_get() would report.
 */
void ndet_env_for_each_prefixed(const char *prefix,
				void (*visit)(void *context, const char *name,
					      ndet_env_source_t source),
				void *context);

/* Human-readable name of a source ("environment", "/etc/nccl.conf", ...). */
const char *ndet_env_source_name(ndet_env_source_t source);

/*
 * Test hook: forget the cached conf files so the next lookup reads them again
 * (also re-reads $NCCL_CONF_FILE and $HOME).  `system_conf_path` replaces
 * /etc/nccl.conf when not NULL.  Not thread-safe; tests only.
 */
void ndet_env_reset_for_testing(const char *system_conf_path);

#ifdef __cplusplus
}
#endif

#endif /* NDET_ENV_H_ */
