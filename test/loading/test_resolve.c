/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Symbol resolution (src/resolve/ndet_resolve.c) and the entry points built on it
 * (src/preload/ndet_shim.c), both compiled into this test and linked against the fake
 * libnccl.so.2.  This executable plays the part of libnccl-det.so: it defines
 * ncclAllReduce & co. itself, so "ourselves" is this executable and RTLD_NEXT finds
 * the fake.  dlsym, dlopen and dl_iterate_phdr are wrapped (-Wl,--wrap=...) so that a
 * test can hide the fake from one strategy, hide one symbol, or offer the resolver
 * an address inside ourselves.
 */
#include "config.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "test/fake_nccl/fake_nccl.h"
#include "divert/ndet_comm.h"
#include "test/support/ndet_fake_backend.h"
#include "common/ndet_log.h"
#include "resolve/ndet_resolve.h"
#include "common/ndet_settings.h"

/* ------------------------------------------------------------------ wrapped loader */

void *__real_dlsym(void *handle, const char *name);
void *__real_dlopen(const char *path, int flags);
int __real_dl_iterate_phdr(int (*callback)(struct dl_phdr_info *, size_t, void *), void *data);

#define MAX_DLOPENS   16
#define INJECTED_SELF "/injected/self/libnccl.so.2"

static struct {
	bool hide_next;             /* dlsym(RTLD_NEXT, ...) finds nothing */
	bool hide_loaded;           /* dl_iterate_phdr does not report libnccl */
	bool inject_self;           /* dl_iterate_phdr first reports us as INJECTED_SELF */
	const char *hide_symbol;    /* this name and its p-alias are found nowhere */
	const char *own_symbols[2]; /* these names resolve to a function of ours */
	int dlopens;
	int dlopen_flags[MAX_DLOPENS];
	char dlopen_paths[MAX_DLOPENS][4096];
} mock;

static void function_of_ours(void)
{
}

void *__wrap_dlsym(void *handle, const char *name);
void *__wrap_dlsym(void *handle, const char *name)
{
	const char *plain = name[0] == 'p' ? name + 1 : name;
	if (mock.hide_symbol != NULL && strcmp(plain, mock.hide_symbol) == 0)
		return NULL;
	for (int i = 0; i < 2; i++) {
		if (mock.own_symbols[i] != NULL && strcmp(name, mock.own_symbols[i]) == 0)
			return (void *)&function_of_ours;
	}
	if (handle == RTLD_NEXT && mock.hide_next)
		return NULL;
	/* Called from this executable, so RTLD_NEXT still means "after us". */
	return __real_dlsym(handle, name);
}

void *__wrap_dlopen(const char *path, int flags);
void *__wrap_dlopen(const char *path, int flags)
{
	if (mock.dlopens < MAX_DLOPENS) {
		mock.dlopen_flags[mock.dlopens] = flags;
		snprintf(mock.dlopen_paths[mock.dlopens], sizeof(mock.dlopen_paths[0]), "%s",
			 path != NULL ? path : "(null)");
		mock.dlopens++;
	}
	return __real_dlopen(path, flags);
}

struct iterate_filter {
	int (*callback)(struct dl_phdr_info *, size_t, void *);
	void *data;
	bool have_self;
	struct dl_phdr_info self;
};

static int filter_objects(struct dl_phdr_info *info, size_t size, void *opaque)
{
	struct iterate_filter *filter = opaque;
	if (mock.hide_loaded && strstr(info->dlpi_name, "libnccl.so") != NULL)
		return 0;
	return filter->callback(info, size, filter->data);
}

static int find_self(struct dl_phdr_info *info, size_t size, void *opaque)
{
	struct iterate_filter *filter = opaque;
	/* The executable comes first, with an empty name. */
	if (!filter->have_self) {
		filter->self = *info;
		filter->have_self = true;
	}
	return 0;
}

int __wrap_dl_iterate_phdr(int (*callback)(struct dl_phdr_info *, size_t, void *), void *data);
int __wrap_dl_iterate_phdr(int (*callback)(struct dl_phdr_info *, size_t, void *), void *data)
{
	struct iterate_filter filter = {.callback = callback, .data = data};
	if (mock.inject_self) {
		__real_dl_iterate_phdr(find_self, &filter);
		if (filter.have_self) {
			filter.self.dlpi_name = INJECTED_SELF;
			int stop = callback(&filter.self, sizeof(filter.self), data);
			if (stop != 0)
				return stop;
		}
	}
	return __real_dl_iterate_phdr(filter_objects, &filter);
}

/* ------------------------------------------------------------------ fixtures */

static char log_path[4096];
static char fake_path[4096];
static ncclComm_t comm1; /* a one-rank communicator made directly in the fake */

static void restart_log(void)
{
	ndet_log_reset_for_testing();
	FILE *file = fopen(log_path, "w");
	assert_non_null(file);
	assert_int_equal(fclose(file), 0);
}

static int count_log_lines(const char *needle1, const char *needle2)
{
	return fake_nccl_file_count(log_path, needle1, needle2);
}

static int setup_group(void **state)
{
	(void)state;
	if (fake_nccl_trace_temp(log_path, sizeof(log_path)) != 0)
		return -1;
	if (setenv("NCCL_DET_DEBUG", "INFO", 1) != 0 ||
	    setenv("NCCL_DET_DEBUG_SUBSYS", "INIT", 1) != 0 ||
	    setenv("NCCL_DET_DEBUG_FILE", log_path, 1) != 0)
		return -1;
	Dl_info info;
	if (dladdr((void *)&pncclGetVersion, &info) == 0 || info.dli_fname == NULL)
		return -1;
	snprintf(fake_path, sizeof(fake_path), "%s", info.dli_fname);
	ndet_comm_set_backend_for_testing(&ndet_fake_backend);
	ncclUniqueId id;
	if (pncclGetUniqueId(&id) != ncclSuccess ||
	    pncclCommInitRank(&comm1, 1, id, 0) != ncclSuccess)
		return -1;
	return 0;
}

static int teardown_group(void **state)
{
	(void)state;
	if (pncclCommDestroy(comm1) != ncclSuccess)
		return -1;
	ndet_log_reset_for_testing();
	return unlink(log_path);
}

/* Every test starts with nothing resolved, no mock behaviour and an empty log. */
static int setup(void **state)
{
	(void)state;
	memset(&mock, 0, sizeof(mock));
	unsetenv("NCCL_DET_NCCL_LIBRARY");
	ndet_settings_reset_for_testing();
	ndet_resolve_reset_for_testing();
	restart_log();
	return 0;
}

/* ------------------------------------------------------------------ calls of every entry point */

/*
 * Each calls one interposed entry point with valid arguments on the fake and
 * returns its result; setup and cleanup go to the fake directly (pnccl*), so only
 * the entry point under test depends on the resolver.
 */
static ncclResult_t call_allreduce(void)
{
	static float x[2] = {1, 2};
	return ncclAllReduce(x, x, 2, ncclFloat32, ncclSum, comm1, NULL);
}

static ncclResult_t call_init_rank(void)
{
	ncclUniqueId id;
	ncclComm_t comm = NULL;
	assert_int_equal(pncclGetUniqueId(&id), ncclSuccess);
	ncclResult_t result = ncclCommInitRank(&comm, 1, id, 0);
	if (result == ncclSuccess)
		assert_int_equal(pncclCommDestroy(comm), ncclSuccess);
	return result;
}

static ncclResult_t call_init_rank_config(void)
{
	ncclUniqueId id;
	ncclComm_t comm = NULL;
	ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
	assert_int_equal(pncclGetUniqueId(&id), ncclSuccess);
	ncclResult_t result = ncclCommInitRankConfig(&comm, 1, id, 0, &config);
	if (result == ncclSuccess)
		assert_int_equal(pncclCommDestroy(comm), ncclSuccess);
	return result;
}

static ncclResult_t call_init_rank_scalable(void)
{
	ncclUniqueId id;
	ncclComm_t comm = NULL;
	assert_int_equal(pncclGetUniqueId(&id), ncclSuccess);
	ncclResult_t result = ncclCommInitRankScalable(&comm, 1, 0, 1, &id, NULL);
	if (result == ncclSuccess)
		assert_int_equal(pncclCommDestroy(comm), ncclSuccess);
	return result;
}

static ncclResult_t call_init_all(void)
{
	ncclComm_t comm = NULL;
	ncclResult_t result = ncclCommInitAll(&comm, 1, NULL);
	if (result == ncclSuccess)
		assert_int_equal(pncclCommDestroy(comm), ncclSuccess);
	return result;
}

static ncclResult_t call_split(void)
{
	ncclComm_t child = NULL;
	ncclResult_t result = ncclCommSplit(comm1, 0, 0, &child, NULL);
	if (result == ncclSuccess)
		assert_int_equal(pncclCommDestroy(child), ncclSuccess);
	return result;
}

static ncclResult_t call_shrink(void)
{
	ncclComm_t child = NULL;
	ncclResult_t result = ncclCommShrink(comm1, NULL, 0, &child, NULL, NCCL_SHRINK_DEFAULT);
	if (result == ncclSuccess)
		assert_int_equal(pncclCommDestroy(child), ncclSuccess);
	return result;
}

static ncclComm_t make_comm(void)
{
	ncclUniqueId id;
	ncclComm_t comm = NULL;
	assert_int_equal(pncclGetUniqueId(&id), ncclSuccess);
	assert_int_equal(pncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
	return comm;
}

static ncclResult_t call_destroy(void)
{
	ncclComm_t comm = make_comm();
	ncclResult_t result = ncclCommDestroy(comm);
	if (result != ncclSuccess)
		assert_int_equal(pncclCommDestroy(comm), ncclSuccess);
	return result;
}

static ncclResult_t call_finalize(void)
{
	return ncclCommFinalize(comm1);
}

static ncclResult_t call_abort(void)
{
	ncclComm_t comm = make_comm();
	ncclResult_t result = ncclCommAbort(comm);
	if (result != ncclSuccess)
		assert_int_equal(pncclCommAbort(comm), ncclSuccess);
	return result;
}

static ncclResult_t call_revoke(void)
{
	ncclComm_t comm = make_comm();
	ncclResult_t result = ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT);
	assert_int_equal(pncclCommDestroy(comm), ncclSuccess);
	return result;
}

static ncclResult_t call_group_start(void)
{
	ncclResult_t result = ncclGroupStart();
	if (result == ncclSuccess)
		assert_int_equal(pncclGroupEnd(), ncclSuccess);
	return result;
}

static ncclResult_t call_group_end(void)
{
	assert_int_equal(pncclGroupStart(), ncclSuccess);
	ncclResult_t result = ncclGroupEnd();
	if (result != ncclSuccess)
		assert_int_equal(pncclGroupEnd(), ncclSuccess);
	return result;
}

static ncclResult_t call_group_simulate_end(void)
{
	ncclSimInfo_t simulation = NCCL_SIM_INFO_INITIALIZER;
	assert_int_equal(pncclGroupStart(), ncclSuccess);
	ncclResult_t result = ncclGroupSimulateEnd(&simulation);
	if (result != ncclSuccess)
		assert_int_equal(pncclGroupEnd(), ncclSuccess);
	return result;
}

static ncclResult_t call_get_async_error(void)
{
	ncclResult_t state = ncclInternalError;
	ncclResult_t result = ncclCommGetAsyncError(comm1, &state);
	if (result == ncclSuccess)
		assert_int_equal(state, ncclSuccess);
	return result;
}

static ncclResult_t call_premulsum(void)
{
	static float scalar = 2;
	ncclRedOp_t op;
	ncclResult_t result =
		ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32, ncclScalarHostImmediate, comm1);
	if (result == ncclSuccess)
		assert_int_equal(pncclRedOpDestroy(op, comm1), ncclSuccess);
	return result;
}

static ncclResult_t call_red_op_destroy(void)
{
	static float scalar = 2;
	ncclRedOp_t op;
	assert_int_equal(pncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32,
						   ncclScalarHostImmediate, comm1),
			 ncclSuccess);
	ncclResult_t result = ncclRedOpDestroy(op, comm1);
	if (result != ncclSuccess)
		assert_int_equal(pncclRedOpDestroy(op, comm1), ncclSuccess);
	return result;
}

static const struct {
	const char *name;
	ncclResult_t (*call)(void);
} entry_points[] = {
	{"ncclAllReduce", call_allreduce},
	{"ncclCommInitRank", call_init_rank},
	{"ncclCommInitRankConfig", call_init_rank_config},
	{"ncclCommInitRankScalable", call_init_rank_scalable},
	{"ncclCommInitAll", call_init_all},
	{"ncclCommSplit", call_split},
	{"ncclCommShrink", call_shrink},
	{"ncclCommDestroy", call_destroy},
	{"ncclCommFinalize", call_finalize},
	{"ncclCommAbort", call_abort},
	{"ncclCommRevoke", call_revoke},
	{"ncclGroupStart", call_group_start},
	{"ncclGroupEnd", call_group_end},
	{"ncclGroupSimulateEnd", call_group_simulate_end},
	{"ncclCommGetAsyncError", call_get_async_error},
	{"ncclRedOpCreatePreMulSum", call_premulsum},
	{"ncclRedOpDestroy", call_red_op_destroy},
};
#define ENTRY_POINT_COUNT (sizeof(entry_points) / sizeof(entry_points[0]))

/* ------------------------------------------------------------------ tests */

static void assert_is_fake(const void *address, const char *name)
{
	void *handle = __real_dlopen(fake_path, RTLD_NOW | RTLD_NOLOAD);
	assert_non_null(handle);
	assert_ptr_equal(address, __real_dlsym(handle, name));
	assert_int_equal(dlclose(handle), 0);
}

/* Strategy 1, every function of the table, and the INFO line. */
static void test_resolve_rtld_next(void **state)
{
	(void)state;
	const struct ndet_nccl *nccl = ndet_resolve_nccl();
	assert_int_equal(ndet_resolve_strategy(), NDET_RESOLVE_NEXT);
	assert_string_equal(ndet_resolve_path(), fake_path);
	const void *const *members = (const void *const *)nccl;
	for (int i = 0; i < NDET_NCCL_FUNCTION_COUNT; i++) {
		char profiling[128];
		snprintf(profiling, sizeof(profiling), "p%s",
			 ndet_resolve_function_name((enum ndet_nccl_function)i));
		assert_is_fake(members[i], profiling);
	}
	assert_int_equal(ndet_resolve_nccl_version(), FAKE_NCCL_DEFAULT_VERSION);
	assert_int_equal(
		count_log_lines("NCCL-DET INFO real NCCL", "(found by RTLD_NEXT), version 22809"),
		1);
	assert_int_equal(mock.dlopens, 0);
	for (size_t i = 0; i < ENTRY_POINT_COUNT; i++)
		assert_int_equal(entry_points[i].call(), ncclSuccess);
}

/* Strategy 2: the fake is loaded but not reachable through RTLD_NEXT. */
static void test_resolve_loaded_object(void **state)
{
	(void)state;
	mock.hide_next = true;
	mock.inject_self = true;
	const struct ndet_nccl *nccl = ndet_resolve_nccl();
	assert_int_equal(ndet_resolve_strategy(), NDET_RESOLVE_LOADED);
	assert_string_equal(ndet_resolve_path(), fake_path);
	assert_is_fake((const void *)nccl->ncclAllReduce, "pncclAllReduce");
	/* Reopened, never loaded a second time; and never ourselves, though named libnccl.so.2. */
	assert_int_equal(mock.dlopens, 1);
	assert_string_equal(mock.dlopen_paths[0], fake_path);
	assert_true(mock.dlopen_flags[0] & RTLD_NOLOAD);
	for (int i = 0; i < mock.dlopens; i++)
		assert_string_not_equal(mock.dlopen_paths[i], INJECTED_SELF);
	assert_int_equal(count_log_lines("NCCL-DET INFO real NCCL", "dl_iterate_phdr"), 1);
	for (size_t i = 0; i < ENTRY_POINT_COUNT; i++)
		assert_int_equal(entry_points[i].call(), ncclSuccess);
}

/* Strategy 3: only NCCL_DET_NCCL_LIBRARY leads to it. */
static void test_resolve_explicit_path(void **state)
{
	(void)state;
	mock.hide_next = true;
	mock.hide_loaded = true;
	assert_int_equal(setenv("NCCL_DET_NCCL_LIBRARY", fake_path, 1), 0);
	ndet_settings_reset_for_testing();
	const struct ndet_nccl *nccl = ndet_resolve_nccl();
	assert_int_equal(ndet_resolve_strategy(), NDET_RESOLVE_EXPLICIT);
	assert_string_equal(ndet_resolve_path(), fake_path);
	assert_is_fake((const void *)nccl->ncclCommSplit, "pncclCommSplit");
	assert_int_equal(mock.dlopens, 1);
	assert_true(mock.dlopen_flags[0] & RTLD_NOW);
	assert_false(mock.dlopen_flags[0] & RTLD_GLOBAL);
	assert_int_equal(count_log_lines("NCCL-DET INFO real NCCL", "NCCL_DET_NCCL_LIBRARY"), 1);
	for (size_t i = 0; i < ENTRY_POINT_COUNT; i++)
		assert_int_equal(entry_points[i].call(), ncclSuccess);
}

/* The preload order: RTLD_NEXT wins over NCCL_DET_NCCL_LIBRARY. */
static void test_resolve_order(void **state)
{
	(void)state;
	assert_int_equal(setenv("NCCL_DET_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1), 0);
	ndet_settings_reset_for_testing();
	assert_int_equal(ndet_resolve_strategy(), NDET_RESOLVE_NEXT);
	assert_int_equal(mock.dlopens, 0);
}

/* No real NCCL: every entry point fails with ncclSystemError, one WARN, no crash. */
static void test_resolve_library_missing(void **state)
{
	(void)state;
	mock.hide_next = true;
	mock.hide_loaded = true;
	assert_int_equal(ndet_resolve_strategy(), NDET_RESOLVE_NONE);
	assert_string_equal(ndet_resolve_path(), "");
	for (int round = 0; round < 2; round++)
		for (size_t i = 0; i < ENTRY_POINT_COUNT; i++)
			assert_int_equal(entry_points[i].call(), ncclSystemError);
	assert_int_equal(count_log_lines("NCCL-DET WARN", "the real NCCL was not found"), 1);
	assert_int_equal(count_log_lines("NCCL-DET WARN", "NCCL_DET_NCCL_LIBRARY=/path/to"), 1);
	assert_int_equal(count_log_lines("NCCL-DET WARN", NULL), 1);
	assert_int_equal(ndet_resolve_nccl_version(), 0);
}

/* A bad NCCL_DET_NCCL_LIBRARY is named in the one WARN. */
static void test_resolve_explicit_path_broken(void **state)
{
	(void)state;
	mock.hide_next = true;
	mock.hide_loaded = true;
	assert_int_equal(setenv("NCCL_DET_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1), 0);
	ndet_settings_reset_for_testing();
	assert_int_equal(ndet_resolve_strategy(), NDET_RESOLVE_NONE);
	assert_int_equal(call_allreduce(), ncclSystemError);
	assert_int_equal(call_group_start(), ncclSystemError);
	assert_int_equal(
		count_log_lines("NCCL-DET WARN",
				"NCCL_DET_NCCL_LIBRARY=/nonexistent/libnccl.so.2 cannot be loaded"),
		1);
	assert_int_equal(count_log_lines("NCCL-DET WARN", NULL), 1);
}

/* Each forwarded symbol missing in turn: only its entry point fails, one WARN each. */
static void test_resolve_each_symbol_missing(void **state)
{
	(void)state;
	for (size_t missing = 0; missing < ENTRY_POINT_COUNT; missing++) {
		memset(&mock, 0, sizeof(mock));
		ndet_resolve_reset_for_testing();
		restart_log();
		mock.hide_symbol = entry_points[missing].name;
		assert_int_equal(ndet_resolve_strategy(), NDET_RESOLVE_NEXT);
		for (int round = 0; round < 2; round++) {
			for (size_t i = 0; i < ENTRY_POINT_COUNT; i++) {
				ncclResult_t expected =
					i == missing ? ncclInvalidUsage : ncclSuccess;
				ncclResult_t result = entry_points[i].call();
				if (result != expected)
					fail_msg("%s missing: %s returned %d, expected %d",
						 entry_points[missing].name, entry_points[i].name,
						 (int)result, (int)expected);
			}
		}
		assert_int_equal(count_log_lines("NCCL-DET WARN", entry_points[missing].name), 1);
		assert_int_equal(count_log_lines("NCCL-DET WARN", NULL), 1);
		assert_int_equal(count_log_lines("NCCL-DET INFO", "real NCCL lacks 1 of"), 1);
	}
}

/* An address inside ourselves is refused: the p-alias is skipped, the plain name used. */
static void test_resolve_refuses_self(void **state)
{
	(void)state;
	mock.own_symbols[0] = "pncclAllReduce";
	const struct ndet_nccl *nccl = ndet_resolve_nccl();
	assert_ptr_not_equal((const void *)nccl->ncclAllReduce, (const void *)&function_of_ours);
	assert_is_fake((const void *)nccl->ncclAllReduce, "ncclAllReduce");
	assert_int_equal(call_allreduce(), ncclSuccess);
}

/* Both names inside ourselves (a second copy of nccl-det, say): missing, no recursion. */
static void test_resolve_refuses_self_both(void **state)
{
	(void)state;
	mock.own_symbols[0] = "pncclGroupStart";
	mock.own_symbols[1] = "ncclGroupStart";
	const struct ndet_nccl *nccl = ndet_resolve_nccl();
	assert_null(nccl->ncclGroupStart);
	assert_int_equal(call_group_start(), ncclInvalidUsage);
	assert_int_equal(call_group_end(), ncclSuccess);
	assert_int_equal(count_log_lines("NCCL-DET WARN", "ncclGroupStart is not exported"), 1);
}

struct concurrent {
	const struct ndet_nccl *seen[8];
};

static void resolve_from_thread(int rank, void *arg)
{
	struct concurrent *concurrent = arg;
	concurrent->seen[rank] = ndet_resolve_nccl();
}

/* Many threads resolve at once: one resolution, one INFO line, one answer. */
static void test_resolve_concurrent(void **state)
{
	(void)state;
	struct concurrent concurrent;
	memset(&concurrent, 0, sizeof(concurrent));
	assert_int_equal(fake_nccl_run_ranks(8, resolve_from_thread, &concurrent), 0);
	for (int i = 0; i < 8; i++) {
		assert_non_null(concurrent.seen[i]);
		assert_ptr_equal(concurrent.seen[i], concurrent.seen[0]);
		assert_non_null(concurrent.seen[i]->ncclAllReduce);
	}
	assert_int_equal(count_log_lines("NCCL-DET INFO real NCCL", NULL), 1);
}

/*
 * The runtime NCCL is older than 2.21: nccl-det passes every call through (no setup,
 * no diverted all-reduce) after one WARN.
 */
static void test_resolve_old_nccl_passes_through(void **state)
{
	(void)state;
	char trace[4096];
	assert_int_equal(fake_nccl_trace_temp(trace, sizeof(trace)), 0);
	assert_int_equal(setenv("FAKE_NCCL_TRACE", trace, 1), 0);
	assert_int_equal(setenv("FAKE_NCCL_VERSION", "21903", 1), 0);
	for (int round = 0; round < 2; round++) {
		assert_int_equal(call_init_rank(), ncclSuccess);
		assert_int_equal(call_allreduce(), ncclSuccess);
	}
	unsetenv("FAKE_NCCL_VERSION");
	unsetenv("FAKE_NCCL_TRACE");
	assert_int_equal(fake_nccl_trace_count(trace, "ncclAllGather"), 0);
	assert_int_equal(fake_nccl_trace_count(trace, "ncclAllReduce"), 2);
	assert_int_equal(count_log_lines("NCCL-DET WARN", "version 21903, older than 2.21"), 1);
	assert_int_equal(count_log_lines("NCCL-DET WARN", NULL), 1);
	assert_int_equal(unlink(trace), 0);
}

/* Appends `text` to a loader cache image under construction; returns its offset. */
static uint32_t cache_string(char *image, size_t *used, size_t header, const char *text)
{
	uint32_t offset = (uint32_t)(*used - header);
	memcpy(image + *used, text, strlen(text) + 1);
	*used += strlen(text) + 1;
	return offset;
}

static void cache_entry(char *image, size_t header, int index, uint32_t flags, uint32_t key,
			uint32_t value)
{
	char *entry = image + header + 48 + (size_t)index * 24;
	memcpy(entry, &flags, 4);
	memcpy(entry + 4, &key, 4);
	memcpy(entry + 8, &value, 4);
}

/*
 * The drop-in reads /etc/ld.so.cache (glibc's "glibc-ld.so.cache1.1" format, alone
 * or after the old format's table): every x86-64 entry of the name, in order, and
 * nothing from entries of other names or ABIs, or with offsets out of the image.
 */
static void test_resolve_ld_cache(void **state)
{
	(void)state;
	static char image[4096];
	char paths[4][4096];
	for (size_t header = 0; header <= 12; header += 12) {
		memset(image, 0, sizeof(image));
		memcpy(image, "ld.so-1.7.0", header > 0 ? 11 : 0);
		memcpy(image + header, "glibc-ld.so.cache1.1", 20);
		uint32_t entries = 5;
		memcpy(image + header + 20, &entries, 4);
		size_t used = header + 48 + entries * 24;
		uint32_t nccl = cache_string(image, &used, header, "libnccl.so.2");
		uint32_t first = cache_string(image, &used, header, "/opt/a/libnccl.so.2");
		uint32_t other = cache_string(image, &used, header, "libfoo.so.1");
		uint32_t i386 = cache_string(image, &used, header, "/i386/libnccl.so.2");
		uint32_t second = cache_string(image, &used, header, "/opt/b/libnccl.so.2");
		cache_entry(image, header, 0, 0x0303, nccl, first);
		cache_entry(image, header, 1, 0x0303, other, first);
		cache_entry(image, header, 2, 0x0003, nccl, i386);
		cache_entry(image, header, 3, 0x0303, nccl, 60000);
		cache_entry(image, header, 4, 0x0303, nccl, second);
		assert_int_equal(ndet_resolve_ld_cache_find(image, used, "libnccl.so.2", paths, 4),
				 2);
		assert_string_equal(paths[0], "/opt/a/libnccl.so.2");
		assert_string_equal(paths[1], "/opt/b/libnccl.so.2");
		assert_int_equal(ndet_resolve_ld_cache_find(image, used, "libnccl.so.2", paths, 1),
				 1);
		assert_int_equal(ndet_resolve_ld_cache_find(image, used, "libbar.so", paths, 4), 0);
		/* Truncated: the entry table does not fit. */
		assert_int_equal(
			ndet_resolve_ld_cache_find(image, header + 60, "libnccl.so.2", paths, 4),
			0);
	}
	assert_int_equal(ndet_resolve_ld_cache_find("not a cache", 11, "libnccl.so.2", paths, 4),
			 0);

	/* This machine's cache knows libc. */
	FILE *file = fopen("/etc/ld.so.cache", "rb");
	if (file == NULL)
		return;
	static char real[4 << 20];
	size_t size = fread(real, 1, sizeof(real), file);
	assert_int_equal(fclose(file), 0);
	assert_true(ndet_resolve_ld_cache_find(real, size, "libc.so.6", paths, 4) >= 1);
	assert_non_null(strstr(paths[0], "libc.so.6"));
}

/* NCCL_DET_ENABLE=0: resolving and logging make no NCCL call (no pncclGetVersion). */
static void test_resolve_disabled_asks_nothing(void **state)
{
	(void)state;
	char trace[4096];
	assert_int_equal(fake_nccl_trace_temp(trace, sizeof(trace)), 0);
	assert_int_equal(setenv("FAKE_NCCL_TRACE", trace, 1), 0);
	assert_int_equal(setenv("NCCL_DET_ENABLE", "0", 1), 0);
	ndet_settings_reset_for_testing();
	(void)ndet_resolve_nccl();
	assert_int_equal(count_log_lines("NCCL-DET INFO", "version not asked (NCCL_DET_ENABLE=0)"),
			 1);
	unsetenv("NCCL_DET_ENABLE");
	ndet_settings_reset_for_testing();
	unsetenv("FAKE_NCCL_TRACE");
	assert_int_equal(fake_nccl_trace_count(trace, "ncclGetVersion"), 0);
	assert_int_equal(unlink(trace), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_resolve_rtld_next, setup),
		cmocka_unit_test_setup(test_resolve_loaded_object, setup),
		cmocka_unit_test_setup(test_resolve_explicit_path, setup),
		cmocka_unit_test_setup(test_resolve_order, setup),
		cmocka_unit_test_setup(test_resolve_library_missing, setup),
		cmocka_unit_test_setup(test_resolve_explicit_path_broken, setup),
		cmocka_unit_test_setup(test_resolve_each_symbol_missing, setup),
		cmocka_unit_test_setup(test_resolve_refuses_self, setup),
		cmocka_unit_test_setup(test_resolve_refuses_self_both, setup),
		cmocka_unit_test_setup(test_resolve_concurrent, setup),
		cmocka_unit_test_setup(test_resolve_disabled_asks_nothing, setup),
		cmocka_unit_test_setup(test_resolve_ld_cache, setup),
		cmocka_unit_test_setup(test_resolve_old_nccl_passes_through, setup),
	};
	return cmocka_run_group_tests(tests, setup_group, teardown_group);
}
