/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Every NCCL_DET_* setting, in one table (name, default, doc, type, validation) in
 * ndet_settings.c.  Values come from the environment, else from the conf files NCCL
 * reads (ndet_env.h).  Parsed once, thread-safely; a bad value gives one WARN naming
 * the variable and keeps the default; effective values and their source are dumped
 * at INFO (subsystem ENV) and by nccl-det-info.
 */
#ifndef NDET_SETTINGS_H_
#define NDET_SETTINGS_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/ndet_env.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A size setting written "auto" (NCCL_DET_ONESHOT_MAX): the planner picks the value
 * for the communicator (NDET_PLAN_ONESHOT_AUTO in ndet_plan.h, the same number).
 */
#define NDET_SETTINGS_SIZE_AUTO UINT64_MAX

/* Test-only fault injection points (NCCL_DET_TEST_FAIL). */
typedef enum {
	NDET_FAULT_NONE = 0,
	NDET_FAULT_ALLOC = 1u << 0,    /* pool allocation fails */
	NDET_FAULT_IPC_OPEN = 1u << 1, /* opening a peer's IPC handle fails */
	NDET_FAULT_PROBE = 1u << 2,    /* the write-and-verify probe fails */
} ndet_fault_t;

/*
 * NCCL_DET_TEST_HOST: the longest host name (it replaces the hostname of the setup
 * record, NUL included in NDET_SETUP_HOSTNAME_LENGTH), and the longest value.
 */
#define NDET_SETTINGS_TEST_HOST_NAME_MAX 63
#define NDET_SETTINGS_TEST_HOST_MAX      256

/* NCCL_DET_TUNER_ALGO: what the tuner plugin pins NCCL's all-reduce to (ndet_tuner.h). */
typedef enum {
	NDET_TUNER_ALGO_NCCL = 0, /* leave NCCL's choice */
	NDET_TUNER_ALGO_TREE,
	NDET_TUNER_ALGO_RING,
} ndet_tuner_algo_t;

/* NCCL_DET_TUNER_PROTO */
typedef enum {
	NDET_TUNER_PROTO_NCCL = 0, /* leave NCCL's choice */
	NDET_TUNER_PROTO_SIMPLE,
	NDET_TUNER_PROTO_LL,
	NDET_TUNER_PROTO_LL128,
} ndet_tuner_proto_t;

struct ndet_settings {
	bool enable;            /* NCCL_DET_ENABLE */
	bool strict;            /* NCCL_DET_STRICT */
	bool stats;             /* NCCL_DET_STATS */
	uint64_t pool_size;     /* NCCL_DET_POOL_SIZE, bytes of staging per rank and communicator */
	uint64_t oneshot_max;   /* NCCL_DET_ONESHOT_MAX, bytes, or NDET_SETTINGS_SIZE_AUTO */
	uint64_t ll_max;        /* NCCL_DET_LL_MAX, bytes; smaller all-reduces go LL; 0 = never */
	uint64_t ll_wide_min;   /* NCCL_DET_LL_WIDE_MIN, bytes x (ranks - 1); 0 = never */
	uint64_t push_min;      /* NCCL_DET_PUSH_MIN, bytes; larger all-reduces push; 0 = never */
	uint64_t timeout_ms;    /* NCCL_DET_TIMEOUT (seconds in the variable), never 0 */
	uint64_t max_memory;    /* NCCL_DET_MAX_MEMORY, bytes of device memory per communicator */
	uint64_t hosts_staging; /* NCCL_DET_HOSTS_STAGING, bytes per rank of a multi-host comm */
	int max_blocks;         /* NCCL_DET_MAX_BLOCKS, largest grid of one call */
	unsigned debug_delay_ns; /* NCCL_DET_DEBUG_DELAY, max random delay (ns) at
				    copy-in/publish/wait */
	char nccl_library[4096]; /* NCCL_DET_NCCL_LIBRARY, "" = search */
	unsigned test_fail;      /* NCCL_DET_TEST_FAIL, ndet_fault_t bits (test only) */
	int test_fail_rank;      /* rank the fault applies to, -1 = every rank */
	/* NCCL_DET_TEST_HOST, "" = the real host (test only; ndet_settings_test_host) */
	char test_host[NDET_SETTINGS_TEST_HOST_MAX];
	int tuner_algo;     /* NCCL_DET_TUNER_ALGO, ndet_tuner_algo_t */
	int tuner_proto;    /* NCCL_DET_TUNER_PROTO, ndet_tuner_proto_t */
	int tuner_channels; /* NCCL_DET_TUNER_CHANNELS, 0 = NCCL's choice */
	char expect[64];    /* NCCL_DET_EXPECT, "VERSION:ENABLE" from nccl-det-run, "" = none */
};

/*
 * The value in effect of setting `name` as the dump shows it (a bad value: the
 * default, after its WARN); false when `name` is no setting.  nccl-det-info --get
 * prints it, so that nccl-det-run judges values with this parser.
 */
bool ndet_settings_value_text(const char *name, char *text, size_t size);

/* Is `name` an NCCL_DET_* setting of the table, or a variable nccl-det-run reads? */
bool ndet_settings_known_name(const char *name);

/*
 * The setting whose name is closest to `name` (edit distance, case-insensitive), or
 * NULL when none is within 4 edits: the suggestion of the unknown-name WARN.
 */
const char *ndet_settings_closest_name(const char *name);

/* The process-wide settings, parsed on first call. Never NULL. */
const struct ndet_settings *ndet_settings_get(void);

/*
 * The host name NCCL_DET_TEST_HOST gives `rank` of a communicator: true and the name
 * in `name` (size bytes, at least NDET_SETTINGS_TEST_HOST_NAME_MAX + 1) when the
 * setting names one (its NAME form for every rank, or the item listing `rank`); false
 * and "" when unset or when the list leaves `rank` out (the real host then).
 */
bool ndet_settings_test_host(const struct ndet_settings *settings, int rank, char *name,
			     size_t size);

/*
 * Hash of the settings that must be equal on every rank of a communicator (every
 * setting that changes the launch plan, the pool layout or what a rank does on
 * fallback: strict, pool size, one-shot threshold, max blocks; timeout is local and
 * excluded; the reasons are in ndet_settings.c).  Exchanged at setup.
 */
uint64_t ndet_settings_agreement_hash(const struct ndet_settings *settings);

/* Print every setting, its effective value and its source, one per line. */
void ndet_settings_dump(FILE *out);
/* The same; without `all`, the test-only and internal settings only where they are set. */
void ndet_settings_dump_some(FILE *out, bool all);

/* Test hook: parse again on the next ndet_settings_get() (not thread-safe). */
void ndet_settings_reset_for_testing(void);

/*
 * Test hook: ndet_settings_get() on this thread returns `settings` (NULL: the
 * process's again).  Real ranks are processes with an environment each; in the CPU
 * tests ranks are threads of one process, and this is how one of them gets other
 * settings than its peers.  The caller keeps `settings` alive while installed.
 */
void ndet_settings_set_thread_override_for_testing(const struct ndet_settings *settings);

#ifdef __cplusplus
}
#endif

#endif /* NDET_SETTINGS_H_ */
