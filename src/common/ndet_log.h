/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Logging in NCCL's style:  host:pid:tid [dev] NCCL-DET WARN message
 *
 * Level comes from NCCL_DET_DEBUG, else NCCL_DEBUG (VERSION, WARN, INFO, TRACE),
 * default WARN: a user who loaded nccl-det asked for determinism and must hear
 * when they do not get it.  INFO lines are filtered by subsystem through
 * NCCL_DET_DEBUG_SUBSYS, else NCCL_DEBUG_SUBSYS (comma list, `^` negates, as NCCL).
 * Output goes to NCCL_DET_DEBUG_FILE, else beside NCCL_DEBUG_FILE (its name and
 * NDET_LOG_NCCL_FILE_SUFFIX: NCCL writes its own file from the start), else stdout.
 */
#ifndef NDET_LOG_H_
#define NDET_LOG_H_

#define NDET_LOG_NCCL_FILE_SUFFIX ".nccl-det"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
	NDET_LOG_NONE = 0,
	NDET_LOG_VERSION = 1,
	NDET_LOG_WARN = 2,
	NDET_LOG_INFO = 3,
	NDET_LOG_TRACE = 4,
} ndet_log_level_t;

/* Subsystems for INFO/TRACE filtering. */
#define NDET_SUBSYS_INIT   0x01u /* loading, symbol resolution */
#define NDET_SUBSYS_ENV    0x02u /* settings */
#define NDET_SUBSYS_SETUP  0x04u /* per-communicator setup and agreement */
#define NDET_SUBSYS_COLL   0x08u /* diverted and forwarded collectives */
#define NDET_SUBSYS_ENGINE 0x10u /* pools, IPC, kernels */
#define NDET_SUBSYS_ALLOC  0x20u /* memory */
#define NDET_SUBSYS_ALL    0xffu

/* Effective level (parses the environment on first use, thread-safely). */
ndet_log_level_t ndet_log_level(void);

/* Is a message of this level and subsystem printed? Cheap after the first call. */
bool ndet_log_enabled(ndet_log_level_t level, unsigned subsys);

void ndet_log(ndet_log_level_t level, unsigned subsys, const char *file, int line, const char *fmt,
	      ...) __attribute__((format(printf, 5, 6)));

/*
 * A report the user asked for (NCCL_DET_STATS=1): printed as "NCCL-DET STATS ..." at
 * every level but NONE, to the log destination.
 */
void ndet_log_report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The CUDA device this thread works on, printed as [dev]; -1 prints nothing. */
void ndet_log_set_device(int device);

/*
 * NULL where `value` is a valid NCCL_DET_DEBUG (NCCL_DET_DEBUG_SUBSYS), else why not:
 * the settings' check, so a bad value WARNs like any other setting's.
 */
const char *ndet_log_check_level(const char *value);
const char *ndet_log_check_subsys(const char *value);

/* Test hook: forget the parsed level so the next call reads the environment again. */
void ndet_log_reset_for_testing(void);

#define NDET_WARN(fmt, ...)                                                                        \
	ndet_log(NDET_LOG_WARN, NDET_SUBSYS_ALL, __FILE__, __LINE__, fmt, ##__VA_ARGS__)
#define NDET_INFO(subsys, fmt, ...)                                                                \
	do {                                                                                       \
		if (ndet_log_enabled(NDET_LOG_INFO, (subsys)))                                     \
			ndet_log(NDET_LOG_INFO, (subsys), __FILE__, __LINE__, fmt, ##__VA_ARGS__); \
	} while (0)
#define NDET_TRACE(subsys, fmt, ...)                                                               \
	do {                                                                                       \
		if (ndet_log_enabled(NDET_LOG_TRACE, (subsys)))                                    \
			ndet_log(NDET_LOG_TRACE, (subsys), __FILE__, __LINE__, fmt,                \
				 ##__VA_ARGS__);                                                   \
	} while (0)

/*
 * WARN at most once per `once_flag` (an `int` the caller owns: per process, per
 * communicator, per reason...).  Thread-safe.
 */
#define NDET_WARN_ONCE(once_flag, fmt, ...)                                                        \
	do {                                                                                       \
		if (__atomic_exchange_n((once_flag), 1, __ATOMIC_RELAXED) == 0)                    \
			NDET_WARN(fmt, ##__VA_ARGS__);                                             \
	} while (0)

#ifdef __cplusplus
}
#endif

#endif /* NDET_LOG_H_ */
