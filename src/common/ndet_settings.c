/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The one table of NCCL_DET_* settings.  A row names the variable, its type, its
 * default as the user would write it, its meaning, its accepted range and the
 * field of struct ndet_settings it fills.  Defaults go through the same parser as
 * user values, so a row cannot say one default in the dump and use another.
 *
 * Grammar (deliberately strict: a value we half-understand is a value we ignore):
 *   bool     0 1 true false yes no on off                      (any case)
 *   size     DIGITS [K|M|G|T][iB|B] or DIGITS [B], binary units (any case)
 *   integer  DIGITS                   (no sign, blanks, hex or fraction)
 *   faults   POINT[,POINT...][@RANK] with POINT in alloc ipc_open probe, or none
 *   hosts    NAME, or NAME@RANK[,RANK...][;NAME@RANK[,RANK...]...], each rank once;
 *            NAME is 1 to 63 letters, digits, '.', '-' or '_'
 *   choice   one word of the row's list                        (any case)
 * The empty string means "unset", as NCCL treats its own variables.
 */
#include "config.h"

#include "common/ndet_settings.h"

#include <ctype.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>
#include <strings.h>

#include "kernels/ndet_abi.h"
#include "common/ndet_log.h"

#define NDET_KIB (UINT64_C(1) << 10)
#define NDET_MIB (UINT64_C(1) << 20)
#define NDET_GIB (UINT64_C(1) << 30)
#define NDET_TIB (UINT64_C(1) << 40)

/*
 * Bumped whenever the bytes fed to the agreement hash change meaning, and whenever the
 * same settings make a different plan (ndet_plan.h): ranks of two builds must then fall
 * back together at setup, not meet in a kernel with plans that differ (a signature
 * error on the first call).  NCCL_DET_ONESHOT_MAX=auto is hashed as
 * NDET_SETTINGS_SIZE_AUTO; what it resolves to is the planner's, so a build that
 * resolves it otherwise bumps the format.
 */
#define NDET_SETTINGS_AGREEMENT_FORMAT 9

/* Longest value shown in a log line or the dump; longer ones end in "...". */
#define NDET_SETTINGS_SHOWN_MAX 512

typedef enum {
	NDET_SETTING_BOOL,        /* bool field */
	NDET_SETTING_SIZE,        /* uint64_t field, bytes */
	NDET_SETTING_SIZE_AUTO,   /* the same, or "auto": NDET_SETTINGS_SIZE_AUTO (the planner
				     decides) */
	NDET_SETTING_SECONDS,     /* uint64_t field in milliseconds; the variable counts seconds */
	NDET_SETTING_INT,         /* int field */
	NDET_SETTING_NANOSECONDS, /* unsigned field */
	NDET_SETTING_PATH,        /* char array field of `max` bytes, terminator included */
	NDET_SETTING_FAULTS,      /* test_fail and test_fail_rank */
	NDET_SETTING_LOG,         /* no field: ndet_log.c reads it; listed for the dump */
	NDET_SETTING_CHOICE,      /* int field: index of the word in `choices` */
	NDET_SETTING_TEXT,        /* like PATH, any text */
	NDET_SETTING_HOSTS,       /* like TEXT, in the hosts grammar (NCCL_DET_TEST_HOST) */
} ndet_setting_type_t;

struct ndet_setting {
	const char *name;
	ndet_setting_type_t type;
	const char *default_text; /* as a user would write it; parsed like user values */
	uint64_t min;             /* numeric types: accepted range in the variable's own unit */
	uint64_t max;
	size_t offset; /* of the field in struct ndet_settings */
	const char *doc;
};

#define NDET_FIELD(member)      offsetof(struct ndet_settings, member)
#define NDET_FIELD_SIZE(member) sizeof(((struct ndet_settings *)0)->member)

/* The words of each NDET_SETTING_CHOICE row, by field; a word's index is its value. */
static const char *const ndet_settings_tuner_algos[] = {"nccl", "tree", "ring", NULL};
static const char *const ndet_settings_tuner_protos[] = {"nccl", "simple", "ll", "ll128", NULL};
static const char *const ndet_settings_no_words[] = {NULL};

static const struct {
	size_t offset;
	const char *const *words;
} ndet_settings_choices[] = {
	{NDET_FIELD(tuner_algo), ndet_settings_tuner_algos},
	{NDET_FIELD(tuner_proto), ndet_settings_tuner_protos},
};

static const struct ndet_setting ndet_settings_table[] = {
	/*
	 * Every rank must load nccl-det with the same value (doc/loading.md precondition,
	 * enforced by nccl-det-run): a disabled rank never joins our setup exchange.
	 */
	{"NCCL_DET_ENABLE", NDET_SETTING_BOOL, "1", 0, 1, NDET_FIELD(enable),
	 "0 = pass-through: every call goes to the real NCCL, no CUDA call of ours"},
	{"NCCL_DET_STRICT", NDET_SETTING_BOOL, "0", 0, 1, NDET_FIELD(strict),
	 "1 = a floating-point all-reduce that cannot be deterministic fails with "
	 "ncclInvalidUsage instead of falling back to NCCL"},
	{"NCCL_DET_STATS", NDET_SETTING_BOOL, "0", 0, 1, NDET_FIELD(stats),
	 "1 = report calls, bytes diverted and fallbacks by reason when a communicator is "
	 "destroyed, or at exit"},
	/*
	 * Large messages stream through the pool in chunks, so this bounds memory,
	 * not message size.  Below 1 MiB the per-chunk flag round trip dominates.
	 */
	{"NCCL_DET_POOL_SIZE", NDET_SETTING_SIZE, "96MiB", NDET_MIB, 16 * NDET_GIB,
	 NDET_FIELD(pool_size),
	 "staging pool per rank and communicator, bytes (K/M/G/T suffixes); equal on all ranks"},
	/*
	 * One-shot reads every peer's whole buffer: (n - 1) x the message per rank, where
	 * two-shot reads 2 (n - 1) / n x and waits for one more flag round trip.  At 2 ranks
	 * they read the same bytes, so one-shot wins until push takes over; with more ranks
	 * one-shot's extra traffic soon costs more than the round trip.  "auto" (the
	 * default): NDET_PLAN_ONESHOT_AUTO_2R (2 MiB) at 2 ranks, NDET_PLAN_ONESHOT_AUTO_MANY
	 * (64 KiB) otherwise (ndet_plan.h; figures in doc/performance.md).
	 */
	{"NCCL_DET_ONESHOT_MAX", NDET_SETTING_SIZE_AUTO, "auto", 0, NDET_GIB,
	 NDET_FIELD(oneshot_max),
	 "largest message reduced one-shot, bytes, or auto (2 MiB at 2 ranks, 64 KiB at more); "
	 "larger ones go two-shot; equal on all ranks"},
	/*
	 * LL (ndet_kernels.h): data and flag in each 8-byte word, pushed straight from
	 * the caller's buffer, so a call costs one one-way NVLink latency instead of a
	 * flag round trip plus a remote read.  Half of each line is flag, so it pays
	 * only while latency dominates; the pool grows by its slots (2 x 8 KiB per
	 * rank for each 4 KiB of NCCL_DET_LL_MAX: 1 MiB x ranks at 256 KiB).  All-reduce
	 * and reduce only.  On by default up to its upper bound, where it beats the pull
	 * one-shot and two-shot at 2 ranks (doc/performance.md); each rank stores
	 * (n - 1) x 2 bytes per byte, so more ranks may want less.
	 */
	{"NCCL_DET_LL_MAX", NDET_SETTING_SIZE, "256KiB", 0, NDET_LL_MAX_BYTES, NDET_FIELD(ll_max),
	 "largest all-reduce sent with the low-latency protocol, bytes (0 = never); equal on "
	 "all ranks"},
	/*
	 * Wide LL lines (ndet_plan.h, doc/protocol.md): 12 data bytes in each 16-byte line
	 * instead of 8, for the LL calls whose step moves the most bytes: sum and avg of
	 * 2-8 ranks, 1-4 byte elements, from (ranks - 1) x bytes of this.  The default,
	 * 224 KiB (NDET_PLAN_LL_WIDE_MIN), is where they pay with ranks sharing one GPU
	 * (doc/performance.md).
	 */
	{"NCCL_DET_LL_WIDE_MIN", NDET_SETTING_SIZE, "224KiB", 0, NDET_TIB, NDET_FIELD(ll_wide_min),
	 "LL all-reduces with (ranks - 1) x bytes from this size use lines of 12 data bytes "
	 "(sum and avg, 2-8 ranks, 1-4 byte elements; 0 = never); "
	 "equal on all ranks"},
	/*
	 * Push (ndet_kernels.h, PUSH): stores cross NVLink instead of loads, and a block
	 * sends step s + 1 while it waits for step s, so large all-reduces run at the
	 * links' write rate.  Both ways at once NVLink takes writes faster than reads, and
	 * a pull protocol cannot reach 0.95x NCCL there; with the grid of ndet_plan.h (64
	 * blocks or more) push wins from 4 MiB at 2 ranks (doc/performance.md).
	 */
	{"NCCL_DET_PUSH_MIN", NDET_SETTING_SIZE, "4MiB", 0, NDET_TIB, NDET_FIELD(push_min),
	 "smallest all-reduce sent with the push protocol, bytes (0 = never); equal on all "
	 "ranks"},
	/*
	 * Longer than PyTorch's 10-minute watchdog so that its diagnostics come first.
	 * 0 is refused: a kernel that may spin forever is never what a user wants.
	 */
	{"NCCL_DET_TIMEOUT", NDET_SETTING_SECONDS, "1800", 1, 604800, NDET_FIELD(timeout_ms),
	 "seconds a kernel waits for a peer before it fails the communicator"},
	{"NCCL_DET_MAX_MEMORY", NDET_SETTING_SIZE, "1GiB", NDET_MIB, NDET_TIB,
	 NDET_FIELD(max_memory),
	 "device memory nccl-det may use per communicator, bytes; above it the communicator "
	 "falls back to NCCL"},
	/*
	 * Multi-host communicators only (doc/multihost-design.md, "Memory"): the chunk
	 * size of the pipeline is a function of it, so it must be equal on every rank.
	 * Below what a communicator's shape needs (ndet_hosts_min_staging_bytes of its
	 * worst dtype: under 1 MiB up to 64 hosts of 8) its setup falls back on every rank.
	 */
	{"NCCL_DET_HOSTS_STAGING", NDET_SETTING_SIZE, "96MiB", 16 * NDET_KIB, 16 * NDET_GIB,
	 NDET_FIELD(hosts_staging),
	 "staging per rank of a communicator that spans hosts, bytes; counted in "
	 "NCCL_DET_MAX_MEMORY; equal on all ranks"},
	/*
	 * The cap of the grid; pulled messages get past 64 blocks from 65 MiB, pushed
	 * ones (from NCCL_DET_PUSH_MIN) take at least 64 (ndet_plan.h: many loads or
	 * stores in flight fill NVLink), and ranks that share a GPU split 192 blocks (96
	 * above 8 ranks) between them, fewer on GPUs with fewer than 96 SMs
	 * (ndet_plan_grid_cap).  Below 64, push at 4-32 MiB runs with fewer blocks than it
	 * was chosen with (doc/settings.md, NCCL_DET_PUSH_MIN).
	 */
	{"NCCL_DET_MAX_BLOCKS", NDET_SETTING_INT, "96", 1, 128, NDET_FIELD(max_blocks),
	 "largest grid of one all-reduce kernel; equal on all ranks"},
	/* Shakes out missing synchronisation; 10 ms keeps test runs bounded. */
	{"NCCL_DET_DEBUG_DELAY", NDET_SETTING_NANOSECONDS, "0", 0, 10000000,
	 NDET_FIELD(debug_delay_ns),
	 "debug: largest random delay (ns) injected in kernels at copy-in, publish and wait"},
	{"NCCL_DET_NCCL_LIBRARY", NDET_SETTING_PATH, "", 0, NDET_FIELD_SIZE(nccl_library),
	 NDET_FIELD(nccl_library),
	 "path of the real NCCL library; empty = search (loaded libnccl, framework wheel, system)"},
	/* Compiled into release builds on purpose: fallbacks one GPU never hits must be testable.
	 */
	{"NCCL_DET_TEST_FAIL", NDET_SETTING_FAULTS, "none", 0, 0, NDET_FIELD(test_fail),
	 "TEST ONLY: make alloc, ipc_open and/or probe fail (comma list), on every rank or only "
	 "on RANK with a trailing @RANK"},
	/*
	 * Multi-host setups on one machine: processes (or the threads of the fake NCCL and
	 * the loopback harness) that publish one name are one host, others are not.
	 */
	{"NCCL_DET_TEST_HOST", NDET_SETTING_HOSTS, "", 0, NDET_FIELD_SIZE(test_host),
	 NDET_FIELD(test_host),
	 "TEST ONLY: host name the setup record publishes instead of the hostname and boot id: "
	 "NAME for every rank, or NAME@RANK,...;NAME@RANK,... per rank (others keep theirs)"},
	{"NCCL_DET_DEBUG", NDET_SETTING_LOG, "", 0, 0, 0,
	 "log level VERSION, WARN, INFO or TRACE; unset = NCCL_DEBUG, else WARN"},
	{"NCCL_DET_DEBUG_SUBSYS", NDET_SETTING_LOG, "", 0, 0, 0,
	 "INFO subsystems INIT, ENV, SETUP, COLL, ENGINE, ALLOC, ALL (^ negates); unset = "
	 "NCCL_DEBUG_SUBSYS, else INIT,ENV"},
	{"NCCL_DET_DEBUG_FILE", NDET_SETTING_LOG, "", 0, 0, 0,
	 "log file (%h host, %p pid); unset = NCCL_DEBUG_FILE, else stdout"},
	/*
	 * The tuner plugin (NCCL_TUNER_PLUGIN=det) pins what NCCL runs for the all-reduces
	 * nccl-det does not take: one fixed tree on one channel reduces every element in
	 * the same order whatever the message size (NCCL shrinks the channel count of
	 * small messages, which reorders them; ring order follows the chunk position).
	 */
	{"NCCL_DET_TUNER_ALGO", NDET_SETTING_CHOICE, "tree", 0, 0, NDET_FIELD(tuner_algo),
	 "tuner plugin: algorithm of NCCL's all-reduce: tree, ring, or nccl (NCCL's choice)"},
	{"NCCL_DET_TUNER_PROTO", NDET_SETTING_CHOICE, "simple", 0, 0, NDET_FIELD(tuner_proto),
	 "tuner plugin: protocol of NCCL's all-reduce: simple, ll, ll128, or nccl (NCCL's choice)"},
	/* More channels buy bandwidth, but their count then follows the message size again. */
	{"NCCL_DET_TUNER_CHANNELS", NDET_SETTING_INT, "1", 0, 64, NDET_FIELD(tuner_channels),
	 "tuner plugin: channels of NCCL's all-reduce; 1 keeps one order at every size; 0 = "
	 "NCCL's choice"},
	/* Set by nccl-det-run so that a process that got another library or setting says so. */
	{"NCCL_DET_EXPECT", NDET_SETTING_TEXT, "", 0, NDET_FIELD_SIZE(expect), NDET_FIELD(expect),
	 "set by nccl-det-run: VERSION:ENABLE every process of the job must have; a mismatch "
	 "WARNs"},
};

#define NDET_SETTINGS_COUNT (sizeof(ndet_settings_table) / sizeof(ndet_settings_table[0]))

static const struct {
	const char *name;
	ndet_fault_t bit;
} ndet_settings_fault_names[] = {
	{"alloc", NDET_FAULT_ALLOC},
	{"ipc_open", NDET_FAULT_IPC_OPEN},
	{"probe", NDET_FAULT_PROBE},
};

/* Where each row's effective value came from; a rejected value keeps its source here. */
struct ndet_setting_origin {
	ndet_env_source_t source;
	bool rejected;
};

static const char *const *ndet_settings_words(const struct ndet_setting *row)
{
	for (size_t i = 0; i < sizeof(ndet_settings_choices) / sizeof(ndet_settings_choices[0]);
	     i++) {
		if (ndet_settings_choices[i].offset == row->offset)
			return ndet_settings_choices[i].words;
	}
	return ndet_settings_no_words;
}

static pthread_mutex_t ndet_settings_lock = PTHREAD_MUTEX_INITIALIZER;
static int ndet_settings_parsed;
static struct ndet_settings ndet_settings_current;
static struct ndet_setting_origin ndet_settings_origins[NDET_SETTINGS_COUNT];

/* Decimal digits only: strtoull would also take blanks, a sign and hex. */
static const char *ndet_settings_parse_digits(const char **text, uint64_t *value)
{
	const char *cursor = *text;
	if (*cursor == '-')
		return "negative";
	if (!isdigit((unsigned char)*cursor))
		return "not a number";
	uint64_t result = 0;
	for (; isdigit((unsigned char)*cursor); cursor++) {
		unsigned digit = (unsigned)(*cursor - '0');
		if (result > (UINT64_MAX - digit) / 10)
			return "too large";
		result = result * 10 + digit;
	}
	*text = cursor;
	*value = result;
	return NULL;
}

static const char *ndet_settings_parse_integer(const char *text, uint64_t *value)
{
	uint64_t result;
	const char *why = ndet_settings_parse_digits(&text, &result);
	if (why != NULL)
		return why;
	if (*text != '\0')
		return "trailing characters";
	*value = result;
	return NULL;
}

static const char *ndet_settings_parse_size(const char *text, uint64_t *bytes)
{
	uint64_t value;
	const char *why = ndet_settings_parse_digits(&text, &value);
	if (why != NULL)
		return why;
	unsigned shift = 0;
	switch (toupper((unsigned char)*text)) {
	case 'K':
		shift = 10;
		break;
	case 'M':
		shift = 20;
		break;
	case 'G':
		shift = 30;
		break;
	case 'T':
		shift = 40;
		break;
	}
	if (shift != 0) {
		text++;
		if (toupper((unsigned char)*text) == 'I') {
			text++;
			if (toupper((unsigned char)*text) != 'B')
				return "trailing characters";
		}
	}
	if (toupper((unsigned char)*text) == 'B')
		text++;
	if (*text != '\0')
		return "trailing characters";
	if (value > (UINT64_MAX >> shift))
		return "too large";
	*bytes = value << shift;
	return NULL;
}

static const char *ndet_settings_parse_bool(const char *text, bool *flag)
{
	static const char *const true_words[] = {"1", "true", "yes", "on"};
	static const char *const false_words[] = {"0", "false", "no", "off"};
	for (size_t i = 0; i < sizeof(true_words) / sizeof(true_words[0]); i++) {
		if (strcasecmp(text, true_words[i]) == 0) {
			*flag = true;
			return NULL;
		}
		if (strcasecmp(text, false_words[i]) == 0) {
			*flag = false;
			return NULL;
		}
	}
	return "not a boolean";
}

/*
 * One rank applies to the whole list: NCCL_DET_TEST_FAIL=alloc,probe@0 fails both
 * on rank 0.  "alloc@1,probe" is refused rather than guessed at.
 */
static const char *ndet_settings_parse_faults(const char *text, unsigned *faults, int *rank)
{
	if (strcasecmp(text, "none") == 0) {
		*faults = NDET_FAULT_NONE;
		*rank = -1;
		return NULL;
	}
	const char *at = strchr(text, '@');
	const char *end = at != NULL ? at : text + strlen(text);
	int parsed_rank = -1;
	if (at != NULL) {
		const char *cursor = at + 1;
		uint64_t value;
		const char *why = ndet_settings_parse_digits(&cursor, &value);
		if (why != NULL)
			return "bad rank after '@'";
		if (*cursor != '\0')
			return "trailing characters after the rank";
		if (value > INT_MAX)
			return "rank too large";
		parsed_rank = (int)value;
	}
	unsigned bits = NDET_FAULT_NONE;
	const char *item = text;
	for (;;) {
		const char *comma = memchr(item, ',', (size_t)(end - item));
		size_t length = (size_t)((comma != NULL ? comma : end) - item);
		unsigned bit = NDET_FAULT_NONE;
		for (size_t i = 0;
		     i < sizeof(ndet_settings_fault_names) / sizeof(ndet_settings_fault_names[0]);
		     i++) {
			const char *name = ndet_settings_fault_names[i].name;
			if (strlen(name) == length && strncasecmp(item, name, length) == 0)
				bit = ndet_settings_fault_names[i].bit;
		}
		if (bit == NDET_FAULT_NONE)
			return "unknown fault point";
		bits |= bit;
		if (comma == NULL)
			break;
		item = comma + 1;
	}
	*faults = bits;
	*rank = parsed_rank;
	return NULL;
}

/* The length of the host name at the start of `text` (letters, digits, '.', '-', '_'). */
static size_t ndet_settings_host_name_length(const char *text)
{
	size_t length = 0;
	while (isalnum((unsigned char)text[length]) || text[length] == '.' || text[length] == '-' ||
	       text[length] == '_')
		length++;
	return length;
}

static const char *ndet_settings_check_host_name(size_t length)
{
	if (length == 0)
		return "a host name is empty or holds other than letters, digits, '.', '-', '_'";
	if (length > NDET_SETTINGS_TEST_HOST_NAME_MAX)
		return "a host name is longer than 63 characters";
	return NULL;
}

/* Ranks one value can list: each takes a digit and a separator. */
#define NDET_SETTINGS_HOST_RANKS (NDET_SETTINGS_TEST_HOST_MAX / 2)

/*
 * The ranks of one NAME@RANK,... item from `*cursor` (past the '@'): adds them to
 * `seen` (refusing one listed before) and says whether `rank` is among them.
 */
static const char *ndet_settings_scan_host_ranks(const char **cursor, int rank, int *seen,
						 int *count, bool *listed)
{
	for (;;) {
		uint64_t value;
		if (ndet_settings_parse_digits(cursor, &value) != NULL)
			return "bad rank after '@' or ','";
		if (value > INT_MAX)
			return "rank too large";
		for (int i = 0; i < *count; i++)
			if (seen[i] == (int)value)
				return "a rank is listed twice";
		if (*count == NDET_SETTINGS_HOST_RANKS)
			return "too many ranks";
		seen[(*count)++] = (int)value;
		*listed = *listed || (int)value == rank;
		if (**cursor != ',')
			return NULL;
		(*cursor)++;
	}
}

/*
 * Check NCCL_DET_TEST_HOST's text (the hosts grammar) and find the name it gives
 * `rank` (-1: check only): NULL, or why the text is refused.  *name and *length
 * locate that name inside `text`; *length is 0 when the text gives `rank` none.
 */
static const char *ndet_settings_scan_hosts(const char *text, int rank, const char **name,
					    size_t *length)
{
	int seen[NDET_SETTINGS_HOST_RANKS];
	int count = 0;
	const char *cursor = text;
	*name = text;
	*length = 0;
	for (;;) {
		const char *item = cursor;
		const size_t item_length = ndet_settings_host_name_length(cursor);
		const char *why = ndet_settings_check_host_name(item_length);
		if (why != NULL)
			return why;
		cursor += item_length;
		/* A bare name, alone: every rank. */
		if (item == text && *cursor == '\0') {
			*length = item_length;
			return NULL;
		}
		if (*cursor != '@')
			return "expected NAME, or NAME@RANK[,RANK...] items separated by ';'";
		cursor++;
		bool listed = false;
		why = ndet_settings_scan_host_ranks(&cursor, rank, seen, &count, &listed);
		if (why != NULL)
			return why;
		if (listed) {
			*name = item;
			*length = item_length;
		}
		if (*cursor == '\0')
			return NULL;
		if (*cursor != ';')
			return "trailing characters after a rank";
		cursor++;
	}
}

/*
 * NULL when `text` is a value of NCCL_DET_TEST_HOST ("" is its default: unset), else
 * why not.  A value is stored as written.
 */
static const char *ndet_settings_check_hosts(const char *text)
{
	const char *name;
	size_t length;
	return text[0] == '\0' ? NULL : ndet_settings_scan_hosts(text, -1, &name, &length);
}

/*
 * Parse `text` for `row` and store it into `settings`; nothing is stored on error.
 * Returns NULL, or why the value was refused.
 */
/* The logger's settings (NDET_SETTING_LOG): ndet_log.c judges their values. */
static const char *ndet_settings_check_log(const struct ndet_setting *row, const char *text)
{
	if (text[0] == '\0')
		return NULL; /* unset: the logger falls back to NCCL's variable */
	if (strcmp(row->name, "NCCL_DET_DEBUG") == 0)
		return ndet_log_check_level(text);
	if (strcmp(row->name, "NCCL_DET_DEBUG_SUBSYS") == 0)
		return ndet_log_check_subsys(text);
	return NULL;
}

static const char *ndet_settings_parse_row(const struct ndet_setting *row, const char *text,
					   struct ndet_settings *settings)
{
	char *field = (char *)settings + row->offset;
	const char *why = NULL;
	uint64_t value = 0;
	switch (row->type) {
	case NDET_SETTING_BOOL: {
		bool flag;
		why = ndet_settings_parse_bool(text, &flag);
		if (why == NULL)
			*(bool *)field = flag;
		return why;
	}
	case NDET_SETTING_SIZE_AUTO:
		if (strcasecmp(text, "auto") == 0) {
			*(uint64_t *)field = NDET_SETTINGS_SIZE_AUTO;
			return NULL;
		}
		/* fall through */
	case NDET_SETTING_SIZE:
		why = ndet_settings_parse_size(text, &value);
		break;
	case NDET_SETTING_SECONDS:
	case NDET_SETTING_INT:
	case NDET_SETTING_NANOSECONDS:
		why = ndet_settings_parse_integer(text, &value);
		break;
	case NDET_SETTING_HOSTS:
		why = ndet_settings_check_hosts(text);
		if (why != NULL)
			return why;
		/* fall through */
	case NDET_SETTING_PATH:
	case NDET_SETTING_TEXT: {
		size_t length = strlen(text);
		if (length >= row->max)
			return "too long";
		memcpy(field, text, length + 1);
		return NULL;
	}
	case NDET_SETTING_FAULTS: {
		unsigned faults;
		int rank;
		why = ndet_settings_parse_faults(text, &faults, &rank);
		if (why == NULL) {
			*(unsigned *)field = faults;
			settings->test_fail_rank = rank;
		}
		return why;
	}
	case NDET_SETTING_LOG:
		return ndet_settings_check_log(row, text);
	case NDET_SETTING_CHOICE: {
		const char *const *words = ndet_settings_words(row);
		for (int i = 0; words[i] != NULL; i++) {
			if (strcasecmp(text, words[i]) == 0) {
				*(int *)field = i;
				return NULL;
			}
		}
		return "not one of the accepted words";
	}
	}
	if (why != NULL)
		return why;
	if (value < row->min || value > row->max)
		return "out of range";
	/* The range checks above keep every conversion below exact. */
	switch (row->type) {
	case NDET_SETTING_SIZE:
	case NDET_SETTING_SIZE_AUTO:
		*(uint64_t *)field = value;
		break;
	case NDET_SETTING_SECONDS:
		*(uint64_t *)field = value * 1000;
		break;
	case NDET_SETTING_INT:
		*(int *)field = (int)value;
		break;
	case NDET_SETTING_NANOSECONDS:
		*(unsigned *)field = (unsigned)value;
		break;
	default:
		break;
	}
	return NULL;
}

/*
 * Values reach logs and the dump through here: control bytes and quotes are shown
 * as \xNN (a newline in a variable must not forge a log line) and long values are
 * cut with "...".
 */
static void ndet_settings_escape(const char *value, char *text, size_t size)
{
	size_t used = 0;
	for (const char *cursor = value; *cursor != '\0'; cursor++) {
		unsigned char byte = (unsigned char)*cursor;
		bool plain = byte >= 0x20 && byte < 0x7f && byte != '"' && byte != '\\';
		size_t need = plain ? 1 : 4;
		if (used + need + 4 > size) {
			snprintf(text + used, size - used, "...");
			return;
		}
		if (plain)
			text[used++] = (char)byte;
		else
			used += (size_t)snprintf(text + used, size - used, "\\x%02x", byte);
	}
	text[used] = '\0';
}

/* Exact binary units when they fit, so the text reads back as the same value. */
static void ndet_settings_format_size(uint64_t bytes, char *text, size_t size)
{
	static const struct {
		unsigned shift;
		const char *unit;
	} units[] = {{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}};
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		uint64_t unit = UINT64_C(1) << units[i].shift;
		if (bytes != 0 && bytes % unit == 0) {
			snprintf(text, size, "%" PRIu64 "%s", bytes / unit, units[i].unit);
			return;
		}
	}
	snprintf(text, size, "%" PRIu64, bytes);
}

static void ndet_settings_format_faults(unsigned faults, int rank, char *text, size_t size)
{
	size_t used = 0;
	text[0] = '\0';
	for (size_t i = 0;
	     i < sizeof(ndet_settings_fault_names) / sizeof(ndet_settings_fault_names[0]); i++) {
		if ((faults & ndet_settings_fault_names[i].bit) == 0)
			continue;
		used += (size_t)snprintf(text + used, size - used, "%s%s", used == 0 ? "" : ",",
					 ndet_settings_fault_names[i].name);
	}
	if (used == 0) {
		snprintf(text, size, "none");
		return;
	}
	if (rank >= 0)
		snprintf(text + used, size - used, "@%d", rank);
}

/* The value as a user would write it, so a dump can be pasted back into a conf file. */
static void ndet_settings_format(const struct ndet_setting *row,
				 const struct ndet_settings *settings, char *text, size_t size)
{
	const char *field = (const char *)settings + row->offset;
	switch (row->type) {
	case NDET_SETTING_BOOL:
		snprintf(text, size, "%d", *(const bool *)field ? 1 : 0);
		return;
	case NDET_SETTING_SIZE_AUTO:
		if (*(const uint64_t *)field == NDET_SETTINGS_SIZE_AUTO) {
			snprintf(text, size, "auto");
			return;
		}
		/* fall through */
	case NDET_SETTING_SIZE:
		ndet_settings_format_size(*(const uint64_t *)field, text, size);
		return;
	case NDET_SETTING_SECONDS:
		snprintf(text, size, "%" PRIu64, *(const uint64_t *)field / 1000);
		return;
	case NDET_SETTING_INT:
		snprintf(text, size, "%d", *(const int *)field);
		return;
	case NDET_SETTING_NANOSECONDS:
		snprintf(text, size, "%u", *(const unsigned *)field);
		return;
	case NDET_SETTING_PATH:
	case NDET_SETTING_TEXT:
	case NDET_SETTING_HOSTS:
		ndet_settings_escape(field, text, size);
		return;
	case NDET_SETTING_CHOICE: {
		const char *const *words = ndet_settings_words(row);
		int value = *(const int *)field;
		for (int i = 0; words[i] != NULL; i++) {
			if (i == value) {
				snprintf(text, size, "%s", words[i]);
				return;
			}
		}
		break;
	}
	case NDET_SETTING_FAULTS:
		ndet_settings_format_faults(*(const unsigned *)field, settings->test_fail_rank,
					    text, size);
		return;
	case NDET_SETTING_LOG: {
		/* The logger's own value: what is set, unless it is bad (then the default). */
		const char *value = ndet_env_get(row->name, NULL);
		if (value == NULL || ndet_settings_check_log(row, value) != NULL)
			value = "";
		ndet_settings_escape(value, text, size);
		return;
	}
	}
	snprintf(text, size, "?");
}

/* What a WARN tells the user to write instead. */
static void ndet_settings_describe_accepted(const struct ndet_setting *row, char *text, size_t size)
{
	char low[32];
	char high[32];
	switch (row->type) {
	case NDET_SETTING_BOOL:
		snprintf(text, size, "0/1, true/false, yes/no or on/off");
		return;
	case NDET_SETTING_SIZE:
	case NDET_SETTING_SIZE_AUTO:
		ndet_settings_format_size(row->min, low, sizeof(low));
		ndet_settings_format_size(row->max, high, sizeof(high));
		snprintf(text, size, "%sbytes in [%s, %s], K/M/G/T suffixes allowed",
			 row->type == NDET_SETTING_SIZE_AUTO ? "auto, or " : "", low, high);
		return;
	case NDET_SETTING_SECONDS:
		snprintf(text, size, "whole seconds in [%" PRIu64 ", %" PRIu64 "]", row->min,
			 row->max);
		return;
	case NDET_SETTING_INT:
		snprintf(text, size, "an integer in [%" PRIu64 ", %" PRIu64 "]", row->min,
			 row->max);
		return;
	case NDET_SETTING_NANOSECONDS:
		snprintf(text, size, "nanoseconds in [%" PRIu64 ", %" PRIu64 "]", row->min,
			 row->max);
		return;
	case NDET_SETTING_PATH:
		snprintf(text, size, "a path shorter than %" PRIu64 " bytes", row->max);
		return;
	case NDET_SETTING_TEXT:
		snprintf(text, size, "a text shorter than %" PRIu64 " bytes", row->max);
		return;
	case NDET_SETTING_HOSTS:
		snprintf(text, size,
			 "NAME, or NAME@RANK[,RANK...] items separated by ';', each rank once "
			 "(NAME: letters, digits, '.', '-', '_')");
		return;
	case NDET_SETTING_CHOICE: {
		const char *const *words = ndet_settings_words(row);
		size_t used = (size_t)snprintf(text, size, "one of");
		for (int i = 0; words[i] != NULL && used < size; i++)
			used += (size_t)snprintf(text + used, size - used, "%s %s",
						 i == 0 ? "" : ",", words[i]);
		return;
	}
	case NDET_SETTING_FAULTS:
		snprintf(text, size,
			 "none, or a comma list of alloc, ipc_open, probe, optionally "
			 "followed by @RANK");
		return;
	case NDET_SETTING_LOG:
		if (strcmp(row->name, "NCCL_DET_DEBUG") == 0) {
			snprintf(text, size, "VERSION, WARN, INFO, TRACE or NONE");
			return;
		}
		if (strcmp(row->name, "NCCL_DET_DEBUG_SUBSYS") == 0) {
			snprintf(text, size,
				 "a comma list of INIT, ENV, SETUP, COLL, ENGINE, ALLOC, "
				 "ALL, optionally behind ^");
			return;
		}
		break;
	}
	snprintf(text, size, "anything");
}

static const char *ndet_settings_source_text(const struct ndet_setting_origin *origin, char *text,
					     size_t size)
{
	if (!origin->rejected)
		return ndet_env_source_name(origin->source);
	snprintf(text, size, "default, bad value in %s ignored",
		 ndet_env_source_name(origin->source));
	return text;
}

static void ndet_settings_parse_all(struct ndet_settings *settings)
{
	memset(settings, 0, sizeof(*settings));
	for (size_t i = 0; i < NDET_SETTINGS_COUNT; i++) {
		const struct ndet_setting *row = &ndet_settings_table[i];
		const char *why = ndet_settings_parse_row(row, row->default_text, settings);
		if (why != NULL)
			NDET_WARN("internal error: default \"%s\" of %s does not parse (%s)",
				  row->default_text, row->name, why);
	}
	for (size_t i = 0; i < NDET_SETTINGS_COUNT; i++) {
		const struct ndet_setting *row = &ndet_settings_table[i];
		struct ndet_setting_origin *origin = &ndet_settings_origins[i];
		ndet_env_source_t source = NDET_ENV_SOURCE_DEFAULT;
		const char *value = ndet_env_get(row->name, &source);
		origin->source = NDET_ENV_SOURCE_DEFAULT;
		origin->rejected = false;
		if (value == NULL || value[0] == '\0')
			continue;
		origin->source = source;
		const char *why = ndet_settings_parse_row(row, value, settings);
		if (why == NULL)
			continue;
		origin->rejected = true;
		char shown[NDET_SETTINGS_SHOWN_MAX];
		char accepted[128];
		char fallback[NDET_SETTINGS_SHOWN_MAX];
		ndet_settings_escape(value, shown, sizeof(shown));
		ndet_settings_describe_accepted(row, accepted, sizeof(accepted));
		ndet_settings_format(row, settings, fallback, sizeof(fallback));
		NDET_WARN("%s=\"%s\" (from %s) ignored: %s; expected %s; using default %s",
			  row->name, shown, ndet_env_source_name(source), why, accepted,
			  fallback[0] != '\0' ? fallback : "\"\"");
	}
}

/* Edit distance of two names (case-insensitive), capped at 255. */
static unsigned ndet_settings_distance(const char *a, const char *b)
{
	unsigned row[128];
	const size_t la = strlen(a), lb = strlen(b);
	if (la >= sizeof(row) / sizeof(row[0]) || lb >= sizeof(row) / sizeof(row[0]))
		return 255;
	for (size_t j = 0; j <= lb; j++)
		row[j] = (unsigned)j;
	for (size_t i = 1; i <= la; i++) {
		unsigned diagonal = row[0];
		row[0] = (unsigned)i;
		for (size_t j = 1; j <= lb; j++) {
			const unsigned above = row[j];
			const bool same = toupper((unsigned char)a[i - 1]) ==
					  toupper((unsigned char)b[j - 1]);
			unsigned best = diagonal + (same ? 0u : 1u);
			if (above + 1 < best)
				best = above + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diagonal = above;
		}
	}
	return row[lb] > 255 ? 255 : row[lb];
}

const char *ndet_settings_closest_name(const char *name)
{
	const char *closest = NULL;
	unsigned best = 255;
	for (size_t i = 0; i < NDET_SETTINGS_COUNT; i++) {
		const unsigned d = ndet_settings_distance(name, ndet_settings_table[i].name);
		if (d < best) {
			best = d;
			closest = ndet_settings_table[i].name;
		}
	}
	/* A suggestion only where the name is a near miss, not another word. */
	return best <= 4 ? closest : NULL;
}

/* Names of the family that nccl-det-run reads, not the library (tools/nccl-det-run.in). */
static const char *const ndet_settings_tool_names[] = {
	"NCCL_DET_RUN_LIBDIR",
	"NCCL_DET_RUN_PRELOAD_LIB",
	"NCCL_DET_RUN_DROPIN_DIR",
};

bool ndet_settings_known_name(const char *name)
{
	for (size_t i = 0; i < NDET_SETTINGS_COUNT; i++) {
		if (strcmp(name, ndet_settings_table[i].name) == 0)
			return true;
	}
	for (size_t i = 0;
	     i < sizeof(ndet_settings_tool_names) / sizeof(ndet_settings_tool_names[0]); i++) {
		if (strcmp(name, ndet_settings_tool_names[i]) == 0)
			return true;
	}
	return false;
}

/*
 * One WARN for every NCCL_DET_* name, set in the environment or a conf file, that is
 * no setting: a misspelt setting must not pass unnoticed (nccl-det would run with its
 * default).
 */
static void ndet_settings_warn_unknown(void *context, const char *name, ndet_env_source_t source)
{
	(void)context;
	if (ndet_settings_known_name(name))
		return;
	const char *closest = ndet_settings_closest_name(name);
	char shown[NDET_SETTINGS_SHOWN_MAX];
	ndet_settings_escape(name, shown, sizeof(shown));
	if (closest != NULL)
		NDET_WARN("%s (from %s) is not an nccl-det setting and has no effect; did you "
			  "mean %s? (nccl-det-info lists the settings)",
			  shown, ndet_env_source_name(source), closest);
	else
		NDET_WARN("%s (from %s) is not an nccl-det setting and has no effect "
			  "(nccl-det-info lists the settings)",
			  shown, ndet_env_source_name(source));
}

/*
 * nccl-det-run exports NCCL_DET_EXPECT=VERSION:ENABLE to every process it starts.  A
 * process that loaded another nccl-det, or whose NCCL_DET_ENABLE changed after the
 * launch (a conf file on another host, a script that sets it), warns: a disabled
 * rank never joins the setup exchange its enabled peers wait in.  It only warns; the
 * setup exchange itself refuses ranks with another library version.
 */
static void ndet_settings_check_expected(const struct ndet_settings *settings)
{
	if (settings->expect[0] == '\0')
		return;
	const char *colon = strrchr(settings->expect, ':');
	char shown[NDET_SETTINGS_SHOWN_MAX];
	ndet_settings_escape(settings->expect, shown, sizeof(shown));
	if (colon == NULL || (strcmp(colon + 1, "0") != 0 && strcmp(colon + 1, "1") != 0)) {
		NDET_WARN("NCCL_DET_EXPECT=\"%s\" ignored: expected VERSION:ENABLE as nccl-det-run "
			  "writes it, e.g. %s:1",
			  shown, PACKAGE_VERSION);
		return;
	}
	size_t version_length = (size_t)(colon - settings->expect);
	if (version_length != strlen(PACKAGE_VERSION) ||
	    strncmp(settings->expect, PACKAGE_VERSION, version_length) != 0)
		NDET_WARN("this process loaded nccl-det %s, but nccl-det-run started the job "
			  "for another version (NCCL_DET_EXPECT=%s): communicators whose ranks "
			  "run different versions fall back to NCCL.  Fix: give every rank the "
			  "same installation",
			  PACKAGE_VERSION, shown);
	int expected_enable = colon[1] - '0';
	if (expected_enable != (settings->enable ? 1 : 0))
		NDET_WARN("NCCL_DET_ENABLE is %d in this process but was %d when nccl-det-run "
			  "started the job (NCCL_DET_EXPECT=%s): a rank with nccl-det disabled "
			  "never joins the setup exchange its peers wait in.  Fix: set "
			  "NCCL_DET_ENABLE once, before nccl-det-run, for every rank",
			  settings->enable ? 1 : 0, expected_enable, shown);
}

static void ndet_settings_log_all(const struct ndet_settings *settings)
{
	if (!ndet_log_enabled(NDET_LOG_INFO, NDET_SUBSYS_ENV))
		return;
	for (size_t i = 0; i < NDET_SETTINGS_COUNT; i++) {
		char value[NDET_SETTINGS_SHOWN_MAX];
		char source[NDET_SETTINGS_SHOWN_MAX];
		ndet_settings_format(&ndet_settings_table[i], settings, value, sizeof(value));
		NDET_INFO(NDET_SUBSYS_ENV, "%s=%s (%s)", ndet_settings_table[i].name, value,
			  ndet_settings_source_text(&ndet_settings_origins[i], source,
						    sizeof(source)));
	}
}

/* ndet_settings_set_thread_override_for_testing; NULL outside the CPU tests. */
static _Thread_local const struct ndet_settings *ndet_settings_thread_override;

const struct ndet_settings *ndet_settings_get(void)
{
	if (ndet_settings_thread_override != NULL)
		return ndet_settings_thread_override;
	if (__atomic_load_n(&ndet_settings_parsed, __ATOMIC_ACQUIRE))
		return &ndet_settings_current;
	pthread_mutex_lock(&ndet_settings_lock);
	if (!__atomic_load_n(&ndet_settings_parsed, __ATOMIC_RELAXED)) {
		ndet_settings_parse_all(&ndet_settings_current);
		ndet_env_for_each_prefixed("NCCL_DET_", ndet_settings_warn_unknown, NULL);
		ndet_settings_check_expected(&ndet_settings_current);
		ndet_settings_log_all(&ndet_settings_current);
		__atomic_store_n(&ndet_settings_parsed, 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&ndet_settings_lock);
	return &ndet_settings_current;
}

/* Little-endian bytes whatever the host, so the serialization is fixed across builds. */
static uint64_t ndet_settings_fnv1a(uint64_t hash, uint64_t value)
{
	for (int i = 0; i < 8; i++) {
		hash ^= (value >> (8 * i)) & 0xff;
		hash *= UINT64_C(0x100000001b3);
	}
	return hash;
}

/*
 * In: what one rank alone cannot change without the others hanging or reading
 * garbage.
 *   strict       a strict rank fails a call its peers forward to NCCL: they would
 *                wait in NCCL for a rank that returned;
 *   pool_size    pool layout and chunking (offsets peers read at);
 *   oneshot_max  one-shot against two-shot for the same message;
 *   max_blocks   grid size: blocks wait on same-index blocks of their peers;
 *   ll_max, ll_wide_min, push_min  the protocol of a message (LL and its lines, pull
 *                or push);
 *   hosts_staging     the chunks of a multi-host reduction (ndet_hosts_plan_make).
 * Out: enable (a disabled rank never reaches setup: a precondition, not a check),
 * timeout (each rank's own deadline; the earliest fails the call everywhere through
 * the abort path), max_memory and test_fail (local verdicts, made consistent by the
 * setup's MIN agreement, exactly like a local allocation failure), test_host (what a
 * rank publishes as its host: the records themselves say which ranks share one, and
 * ranks given different names must still agree on everything else), stats,
 * debug_delay and nccl_library (local behaviour only).
 * Fields are serialized one by one, never hashed as raw memory: padding is not data.
 */
uint64_t ndet_settings_agreement_hash(const struct ndet_settings *settings)
{
	uint64_t hash = UINT64_C(0xcbf29ce484222325);
	hash = ndet_settings_fnv1a(hash, NDET_SETTINGS_AGREEMENT_FORMAT);
	hash = ndet_settings_fnv1a(hash, settings->strict ? 1 : 0);
	hash = ndet_settings_fnv1a(hash, settings->pool_size);
	hash = ndet_settings_fnv1a(hash, settings->oneshot_max);
	hash = ndet_settings_fnv1a(hash, (uint64_t)(int64_t)settings->max_blocks);
	hash = ndet_settings_fnv1a(hash, settings->ll_max);
	hash = ndet_settings_fnv1a(hash, settings->ll_wide_min);
	hash = ndet_settings_fnv1a(hash, settings->push_min);
	hash = ndet_settings_fnv1a(hash, settings->hosts_staging);
	return hash;
}

bool ndet_settings_test_host(const struct ndet_settings *settings, int rank, char *name,
			     size_t size)
{
	const char *found = NULL;
	size_t length = 0;
	if (size == 0)
		return false;
	name[0] = '\0';
	if (settings->test_host[0] == '\0' ||
	    ndet_settings_scan_hosts(settings->test_host, rank, &found, &length) != NULL ||
	    length == 0 || length >= size)
		return false;
	memcpy(name, found, length);
	name[length] = '\0';
	return true;
}

bool ndet_settings_value_text(const char *name, char *text, size_t size)
{
	const struct ndet_settings *settings = ndet_settings_get();
	for (size_t i = 0; i < NDET_SETTINGS_COUNT; i++) {
		if (strcmp(name, ndet_settings_table[i].name) == 0) {
			ndet_settings_format(&ndet_settings_table[i], settings, text, size);
			return true;
		}
	}
	return false;
}

/* A test-only or internal setting (nccl-det-info lists them with --all). */
static bool ndet_settings_internal(const struct ndet_setting *row)
{
	return strncmp(row->doc, "TEST ONLY", 9) == 0 || strncmp(row->doc, "debug:", 6) == 0 ||
	       strncmp(row->doc, "set by nccl-det-run", 19) == 0;
}

void ndet_settings_dump(FILE *out)
{
	ndet_settings_dump_some(out, true);
}

void ndet_settings_dump_some(FILE *out, bool all)
{
	const struct ndet_settings *settings = ndet_settings_get();
	if (fprintf(out, "%-24s %-12s %-20s %s\n", "# name", "value", "source", "meaning") < 0)
		return;
	unsigned left_out = 0;
	for (size_t i = 0; i < NDET_SETTINGS_COUNT; i++) {
		/* Set ones are shown whatever they are. */
		if (!all && ndet_settings_internal(&ndet_settings_table[i]) &&
		    ndet_settings_origins[i].source == NDET_ENV_SOURCE_DEFAULT) {
			left_out++;
			continue;
		}
		char value[NDET_SETTINGS_SHOWN_MAX];
		char source[NDET_SETTINGS_SHOWN_MAX];
		ndet_settings_format(&ndet_settings_table[i], settings, value, sizeof(value));
		if (fprintf(out, "%-24s %-12s %-20s %s\n", ndet_settings_table[i].name,
			    value[0] != '\0' ? value : "\"\"",
			    ndet_settings_source_text(&ndet_settings_origins[i], source,
						      sizeof(source)),
			    ndet_settings_table[i].doc) < 0)
			return;
	}
	if (left_out > 0)
		(void)fprintf(
			out, "# and %u test-only and internal settings, unset (--all lists them)\n",
			left_out);
}

void ndet_settings_reset_for_testing(void)
{
	pthread_mutex_lock(&ndet_settings_lock);
	__atomic_store_n(&ndet_settings_parsed, 0, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&ndet_settings_lock);
}

void ndet_settings_set_thread_override_for_testing(const struct ndet_settings *settings)
{
	ndet_settings_thread_override = settings;
}
