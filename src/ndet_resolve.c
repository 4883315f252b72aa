/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Finding the real NCCL (strategies and rules in ndet_resolve.h).
 */
#include "config.h"

#include "ndet_resolve.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ndet_log.h"
#include "ndet_settings.h"

#define NDET_RESOLVE_PATH_MAX       4096
#define NDET_RESOLVE_MAX_CANDIDATES 8

static const char *const ndet_resolve_names[NDET_NCCL_FUNCTION_COUNT] = {
#define NDET_NCCL_NAME(ret, name, params) #name,
    NDET_NCCL_FUNCTIONS(NDET_NCCL_NAME)
#undef NDET_NCCL_NAME
};

/*
 * Resolution happens once under the lock; `done` is then published with release
 * order, and the fast path only does an acquire load before reading the table.
 */
static pthread_mutex_t ndet_resolve_lock = PTHREAD_MUTEX_INITIALIZER;
static int ndet_resolve_done;
static struct ndet_nccl ndet_resolve_table;
static const struct ndet_nccl ndet_resolve_empty_table;
static enum ndet_resolve_strategy ndet_resolve_found;
static char ndet_resolve_file[NDET_RESOLVE_PATH_MAX];
/* Why the last strategy failed, for the one WARN given when nothing was found. */
static char ndet_resolve_detail[NDET_RESOLVE_PATH_MAX + 256];
/* Strategies 2 and 3.  Never closed (except by the test hook): NCCL must outlive us. */
static void *ndet_resolve_handle;
/* Base of our own object: addresses inside it are never taken (recursion). */
static const void *ndet_resolve_self_base;
static int ndet_resolve_version; /* 0 = not asked yet, -1 = unknown, else the version */
static int ndet_resolve_library_warned;
static int ndet_resolve_symbol_warned[NDET_NCCL_FUNCTION_COUNT];
/* Set while this thread resolves: a call back into us then gets the empty table. */
static _Thread_local bool ndet_resolve_in_progress;

static const char *ndet_resolve_setting_library(void)
{
	return ndet_settings_get()->nccl_library;
}

static bool ndet_resolve_setting_enabled(void)
{
	return ndet_settings_get()->enable;
}

const char *ndet_resolve_function_name(enum ndet_nccl_function function)
{
	if ((int)function < 0 || function >= NDET_NCCL_FUNCTION_COUNT)
		return "nccl?";
	return ndet_resolve_names[function];
}

const char *ndet_resolve_strategy_name(enum ndet_resolve_strategy strategy)
{
	switch (strategy) {
	case NDET_RESOLVE_NEXT:
		return "RTLD_NEXT";
	case NDET_RESOLVE_LOADED:
		return "already-loaded object (dl_iterate_phdr + RTLD_NOLOAD)";
	case NDET_RESOLVE_EXPLICIT:
		return "NCCL_DET_NCCL_LIBRARY";
	case NDET_RESOLVE_NONE:
		break;
	}
	return "none";
}

/* dlsym leaves a message for dlerror(); the application must not find ours there. */
static void ndet_resolve_clear_dlerror(void)
{
	(void)dlerror();
}

static bool ndet_resolve_is_own(const void *address)
{
	Dl_info info;
	if (address == NULL || ndet_resolve_self_base == NULL)
		return false;
	if (dladdr(address, &info) == 0)
		return false;
	return info.dli_fbase == ndet_resolve_self_base;
}

/* `pname` first (NCCL's profiling alias: skips other interposers), then `name`. */
static void *ndet_resolve_lookup(void *handle, const char *name)
{
	char profiling_name[128];
	int written = snprintf(profiling_name, sizeof(profiling_name), "p%s", name);
	void *address = NULL;
	if (written > 0 && (size_t)written < sizeof(profiling_name))
		address = dlsym(handle, profiling_name);
	if (address != NULL && ndet_resolve_is_own(address)) {
		NDET_TRACE(NDET_SUBSYS_INIT, "refused %s: it resolves into nccl-det itself",
			   profiling_name);
		address = NULL;
	}
	if (address == NULL)
		address = dlsym(handle, name);
	if (address != NULL && ndet_resolve_is_own(address)) {
		NDET_TRACE(NDET_SUBSYS_INIT, "refused %s: it resolves into nccl-det itself", name);
		address = NULL;
	}
	ndet_resolve_clear_dlerror();
	return address;
}

static void ndet_resolve_fill(void *handle)
{
#define NDET_NCCL_LOOKUP(ret, name, params)                                                        \
	ndet_resolve_table.name = (ret(*) params)ndet_resolve_lookup(handle, #name);
	NDET_NCCL_FUNCTIONS(NDET_NCCL_LOOKUP)
#undef NDET_NCCL_LOOKUP
}

/* The file an address belongs to, into ndet_resolve_file. */
static void ndet_resolve_set_file_of(const void *address, const char *fallback)
{
	Dl_info info;
	const char *file = fallback;
	if (dladdr(address, &info) != 0 && info.dli_fname != NULL && info.dli_fname[0] != '\0')
		file = info.dli_fname;
	snprintf(ndet_resolve_file, sizeof(ndet_resolve_file), "%s", file);
}

/* Strategy 1: libnccl is in the global scope after us. */
static bool ndet_resolve_try_next(void)
{
	void *version = ndet_resolve_lookup(RTLD_NEXT, "ncclGetVersion");
	if (version == NULL) {
		snprintf(ndet_resolve_detail, sizeof(ndet_resolve_detail),
			 "libnccl is not in the global symbol scope (RTLD_NEXT), no libnccl.so* "
			 "is loaded in the process, and NCCL_DET_NCCL_LIBRARY is not set");
		return false;
	}
	ndet_resolve_fill(RTLD_NEXT);
	ndet_resolve_set_file_of(version, "(unknown file)");
	return true;
}

struct ndet_resolve_candidates {
	const void *self_address;
	int count;
	char paths[NDET_RESOLVE_MAX_CANDIDATES][NDET_RESOLVE_PATH_MAX];
};

static bool ndet_resolve_object_contains(const struct dl_phdr_info *info, const void *address)
{
	uintptr_t target = (uintptr_t)address;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *segment = &info->dlpi_phdr[i];
		if (segment->p_type != PT_LOAD)
			continue;
		uintptr_t start = (uintptr_t)info->dlpi_addr + segment->p_vaddr;
		if (target >= start && target < start + segment->p_memsz)
			return true;
	}
	return false;
}

/*
 * Collects paths only: dlopen must not run inside dl_iterate_phdr, which holds the
 * loader's lock.
 */
static int ndet_resolve_collect(struct dl_phdr_info *info, size_t size, void *opaque)
{
	struct ndet_resolve_candidates *candidates = opaque;
	if (info->dlpi_name == NULL || info->dlpi_name[0] == '\0')
		return 0;
	const char *base = strrchr(info->dlpi_name, '/');
	base = base != NULL ? base + 1 : info->dlpi_name;
	if (strncmp(base, "libnccl.so", strlen("libnccl.so")) != 0)
		return 0;
	/* The drop-in build is itself a libnccl.so.2: never take ourselves. */
	if (ndet_resolve_object_contains(info, candidates->self_address))
		return 0;
	if (candidates->count < NDET_RESOLVE_MAX_CANDIDATES) {
		snprintf(candidates->paths[candidates->count], NDET_RESOLVE_PATH_MAX, "%s",
			 info->dlpi_name);
		candidates->count++;
	}
	return 0;
}

/* Strategy 2: libnccl loaded privately (RTLD_LOCAL), invisible to RTLD_NEXT. */
static bool ndet_resolve_try_loaded(void)
{
	struct ndet_resolve_candidates *candidates = calloc(1, sizeof(*candidates));
	if (candidates == NULL) {
		snprintf(ndet_resolve_detail, sizeof(ndet_resolve_detail),
			 "out of memory while listing loaded objects");
		return false;
	}
	candidates->self_address = (const void *)&ndet_resolve_nccl;
	(void)dl_iterate_phdr(ndet_resolve_collect, candidates);
	bool found = false;
	for (int i = 0; i < candidates->count && !found; i++) {
		/* RTLD_NOLOAD: the copy that is loaded, never a second one. */
		void *handle = dlopen(candidates->paths[i], RTLD_NOW | RTLD_NOLOAD);
		if (handle == NULL) {
			const char *error = dlerror();
			NDET_TRACE(NDET_SUBSYS_INIT, "cannot reopen %s: %s", candidates->paths[i],
				   error != NULL ? error : "unknown error");
			continue;
		}
		void *version = ndet_resolve_lookup(handle, "ncclGetVersion");
		if (version == NULL) {
			NDET_TRACE(NDET_SUBSYS_INIT, "%s has no ncclGetVersion: not NCCL",
				   candidates->paths[i]);
			if (dlclose(handle) != 0)
				ndet_resolve_clear_dlerror();
			continue;
		}
		ndet_resolve_fill(handle);
		ndet_resolve_handle = handle;
		snprintf(ndet_resolve_file, sizeof(ndet_resolve_file), "%s", candidates->paths[i]);
		found = true;
	}
	free(candidates);
	return found;
}

/* Strategy 3: the path the user named. */
static bool ndet_resolve_try_explicit(void)
{
	const char *path = ndet_resolve_setting_library();
	if (path == NULL || path[0] == '\0')
		return false;
	void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (handle == NULL) {
		const char *error = dlerror();
		snprintf(ndet_resolve_detail, sizeof(ndet_resolve_detail),
			 "NCCL_DET_NCCL_LIBRARY=%s cannot be loaded (%s)", path,
			 error != NULL ? error : "unknown error");
		return false;
	}
	void *version = ndet_resolve_lookup(handle, "ncclGetVersion");
	if (version == NULL) {
		snprintf(ndet_resolve_detail, sizeof(ndet_resolve_detail),
			 "NCCL_DET_NCCL_LIBRARY=%s is not a real NCCL (no ncclGetVersion other "
			 "than nccl-det's own)",
			 path);
		if (dlclose(handle) != 0)
			ndet_resolve_clear_dlerror();
		return false;
	}
	ndet_resolve_fill(handle);
	ndet_resolve_handle = handle;
	snprintf(ndet_resolve_file, sizeof(ndet_resolve_file), "%s", path);
	return true;
}

/*
 * The order of the LD_PRELOAD build.  (The drop-in build, which is itself
 * libnccl.so.2, will put NCCL_DET_NCCL_LIBRARY first: DESIGN.md section 2.)
 */
static const enum ndet_resolve_strategy ndet_resolve_order[] = {
    NDET_RESOLVE_NEXT,
    NDET_RESOLVE_LOADED,
    NDET_RESOLVE_EXPLICIT,
};

static void ndet_resolve_locked(void)
{
	Dl_info self;
	ndet_resolve_self_base = NULL;
	if (dladdr((const void *)&ndet_resolve_nccl, &self) != 0)
		ndet_resolve_self_base = self.dli_fbase;
	memset(&ndet_resolve_table, 0, sizeof(ndet_resolve_table));
	ndet_resolve_found = NDET_RESOLVE_NONE;
	ndet_resolve_file[0] = '\0';
	for (size_t i = 0; i < sizeof(ndet_resolve_order) / sizeof(ndet_resolve_order[0]); i++) {
		bool found = false;
		switch (ndet_resolve_order[i]) {
		case NDET_RESOLVE_NEXT:
			found = ndet_resolve_try_next();
			break;
		case NDET_RESOLVE_LOADED:
			found = ndet_resolve_try_loaded();
			break;
		case NDET_RESOLVE_EXPLICIT:
			found = ndet_resolve_try_explicit();
			break;
		case NDET_RESOLVE_NONE:
			break;
		}
		if (found) {
			ndet_resolve_found = ndet_resolve_order[i];
			return;
		}
	}
}

/* One INFO line: strategy, path, version; then which functions this NCCL lacks. */
static void ndet_resolve_log(void)
{
	if (!ndet_log_enabled(NDET_LOG_INFO, NDET_SUBSYS_INIT))
		return;
	if (ndet_resolve_found == NDET_RESOLVE_NONE) {
		NDET_INFO(NDET_SUBSYS_INIT, "real NCCL not found: %s", ndet_resolve_detail);
		return;
	}
	/* A pass-through (NCCL_DET_ENABLE=0) makes no NCCL call of its own. */
	if (ndet_resolve_setting_enabled())
		NDET_INFO(NDET_SUBSYS_INIT, "real NCCL %s (found by %s), version %d",
			  ndet_resolve_file, ndet_resolve_strategy_name(ndet_resolve_found),
			  ndet_resolve_nccl_version());
	else
		NDET_INFO(NDET_SUBSYS_INIT,
			  "real NCCL %s (found by %s), version not asked (NCCL_DET_ENABLE=0)",
			  ndet_resolve_file, ndet_resolve_strategy_name(ndet_resolve_found));

	char missing[1024];
	size_t used = 0;
	int count = 0;
#define NDET_NCCL_MISSING(ret, name, params)                                                       \
	if (ndet_resolve_table.name == NULL) {                                                     \
		count++;                                                                           \
		if (used < sizeof(missing))                                                        \
			used += (size_t)snprintf(missing + used, sizeof(missing) - used, "%s%s",   \
						 count > 1 ? ", " : "", #name);                    \
	}
	NDET_NCCL_FUNCTIONS(NDET_NCCL_MISSING)
#undef NDET_NCCL_MISSING
	if (count > 0)
		NDET_INFO(NDET_SUBSYS_INIT, "real NCCL lacks %d of %d functions: %s", count,
			  (int)NDET_NCCL_FUNCTION_COUNT, missing);
}

const struct ndet_nccl *ndet_resolve_nccl(void)
{
	if (__atomic_load_n(&ndet_resolve_done, __ATOMIC_ACQUIRE))
		return &ndet_resolve_table;
	/* A library we dlopen may call NCCL from its constructor: no deadlock, no NCCL. */
	if (ndet_resolve_in_progress)
		return &ndet_resolve_empty_table;
	ndet_resolve_in_progress = true;
	bool resolved_here = false;
	pthread_mutex_lock(&ndet_resolve_lock);
	if (!__atomic_load_n(&ndet_resolve_done, __ATOMIC_ACQUIRE)) {
		ndet_resolve_locked();
		__atomic_store_n(&ndet_resolve_done, 1, __ATOMIC_RELEASE);
		resolved_here = true;
	}
	pthread_mutex_unlock(&ndet_resolve_lock);
	ndet_resolve_in_progress = false;
	/* Outside the lock: logging may call pncclGetVersion. */
	if (resolved_here)
		ndet_resolve_log();
	return &ndet_resolve_table;
}

enum ndet_resolve_strategy ndet_resolve_strategy(void)
{
	(void)ndet_resolve_nccl();
	return ndet_resolve_found;
}

const char *ndet_resolve_path(void)
{
	(void)ndet_resolve_nccl();
	return ndet_resolve_file;
}

int ndet_resolve_nccl_version(void)
{
	int version = __atomic_load_n(&ndet_resolve_version, __ATOMIC_ACQUIRE);
	if (version != 0)
		return version > 0 ? version : 0;
	const struct ndet_nccl *nccl = ndet_resolve_nccl();
	version = -1;
	if (nccl->ncclGetVersion != NULL) {
		int reported = 0;
		ncclResult_t result = nccl->ncclGetVersion(&reported);
		if (result == ncclSuccess && reported > 0)
			version = reported;
		else
			NDET_INFO(NDET_SUBSYS_INIT, "pncclGetVersion failed (%d): version unknown",
				  (int)result);
	}
	/* Two threads may both ask; they store the same answer. */
	__atomic_store_n(&ndet_resolve_version, version, __ATOMIC_RELEASE);
	return version > 0 ? version : 0;
}

ndet_status_t ndet_resolve_missing(enum ndet_nccl_function function)
{
	const char *name = ndet_resolve_function_name(function);
	if (ndet_resolve_in_progress) {
		NDET_WARN(
		    "%s was called while nccl-det was still looking for the real NCCL (from a "
		    "library constructor?); the call fails with ncclSystemError",
		    name);
		return NDET_ERR_SYSTEM;
	}
	if (ndet_resolve_strategy() == NDET_RESOLVE_NONE) {
		NDET_WARN_ONCE(&ndet_resolve_library_warned,
			       "%s: the real NCCL was not found: %s.  Every NCCL call fails with "
			       "ncclSystemError.  Fix: load nccl-det only into programs that use "
			       "NCCL, or set NCCL_DET_NCCL_LIBRARY=/path/to/libnccl.so.2",
			       name, ndet_resolve_detail);
		return NDET_ERR_SYSTEM;
	}
	if ((int)function < 0 || function >= NDET_NCCL_FUNCTION_COUNT)
		return NDET_ERR_INTERNAL;
	int version = __atomic_load_n(&ndet_resolve_version, __ATOMIC_ACQUIRE);
	char version_text[32] = "";
	if (version > 0)
		snprintf(version_text, sizeof(version_text), " (version %d)", version);
	NDET_WARN_ONCE(&ndet_resolve_symbol_warned[function],
		       "%s is not exported by the real NCCL %s%s: that NCCL is too old for this "
		       "call, which fails with ncclInvalidUsage.  Fix: use an NCCL that provides "
		       "%s, or do not call it",
		       name, ndet_resolve_file, version_text, name);
	return NDET_ERR_INVALID_USAGE;
}

void ndet_resolve_reset_for_testing(void)
{
	pthread_mutex_lock(&ndet_resolve_lock);
	if (ndet_resolve_handle != NULL && dlclose(ndet_resolve_handle) != 0)
		ndet_resolve_clear_dlerror();
	ndet_resolve_handle = NULL;
	memset(&ndet_resolve_table, 0, sizeof(ndet_resolve_table));
	ndet_resolve_found = NDET_RESOLVE_NONE;
	ndet_resolve_file[0] = '\0';
	ndet_resolve_detail[0] = '\0';
	ndet_resolve_version = 0;
	ndet_resolve_library_warned = 0;
	memset(ndet_resolve_symbol_warned, 0, sizeof(ndet_resolve_symbol_warned));
	__atomic_store_n(&ndet_resolve_done, 0, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&ndet_resolve_lock);
}
