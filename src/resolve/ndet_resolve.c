/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Finding the real NCCL (strategies and rules in ndet_resolve.h).
 */
#include "config.h"

#include "resolve/ndet_resolve.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/ndet_log.h"
#include "common/ndet_settings.h"

#define NDET_RESOLVE_PATH_MAX       4096
#define NDET_RESOLVE_MAX_CANDIDATES 16
/* The file name the drop-in looks for in the wheel and system directories. */
#define NDET_RESOLVE_SONAME "libnccl.so.2"
/* Every copy of nccl-det exports it; the real NCCL never does. */
#define NDET_RESOLVE_MARKER "ncclDetGetVersion"
/* Largest loader cache read (glibc's is a few hundred KiB at most). */
#define NDET_RESOLVE_LD_CACHE_MAX (16u << 20)

/*
 * Prefix of the loader cache and the system directories: "" in every installed
 * build; the test drop-in points it at a directory that does not exist, so that its
 * search is hermetic (what a machine has installed cannot leak into `make check`).
 */
static const char *ndet_resolve_system_root = "";

void ndet_resolve_set_system_root_for_testing(const char *root)
{
	ndet_resolve_system_root = root;
}

#ifdef NDET_BUILD_DROPIN
#define NDET_RESOLVE_DROPIN true
#else
#define NDET_RESOLVE_DROPIN false
#endif

static const char *const ndet_resolve_names[NDET_NCCL_FUNCTION_COUNT] = {
#define NDET_NCCL_NAME(ret, name, params) #name,
	NDET_NCCL_FUNCTIONS(NDET_NCCL_NAME)
#undef NDET_NCCL_NAME
};

/*
 * Where the drop-in looks after LD_LIBRARY_PATH and the loader cache: the CUDA
 * toolkit (NVIDIA's packages put NCCL there) and the loader's default directories.
 */
static const char *const ndet_resolve_system_dirs[] = {
	"/usr/local/cuda/lib64",
	"/usr/lib/x86_64-linux-gnu",
	"/lib/x86_64-linux-gnu",
	"/usr/lib64",
	"/lib64",
	"/usr/lib",
	"/lib",
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
static char ndet_resolve_detail[3 * NDET_RESOLVE_PATH_MAX];
/* Where names are looked up: RTLD_NEXT or a handle of ours (never closed but by the test hook). */
static void *ndet_resolve_lookup_handle;
static void *ndet_resolve_handle;
/* Base of our own object: addresses inside it are never taken (recursion). */
static const void *ndet_resolve_self_base;
/* Our own file, to refuse it under any name (a symlink, another path). */
static bool ndet_resolve_self_known;
static dev_t ndet_resolve_self_dev;
static ino_t ndet_resolve_self_ino;
/* The NCCL found is another copy of nccl-det: it diverts, we forward. */
static bool ndet_resolve_behind_copy;
/* The found library was loaded with RTLD_DEEPBIND (for the INFO line). */
static bool ndet_resolve_deepbind;
static int ndet_resolve_version; /* 0 = not asked yet, -1 = unknown, else the version */
static int ndet_resolve_divert;  /* 0 = not decided yet, 1 = allowed, -1 = refused */
static int ndet_resolve_library_warned;
static int ndet_resolve_old_warned;
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

const char *ndet_resolve_loading_mode(void)
{
	return NDET_RESOLVE_DROPIN ? "drop-in" : "preload";
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
	case NDET_RESOLVE_WHEEL:
		return "the nvidia/nccl wheel of a loaded Python package tree";
	case NDET_RESOLVE_SYSTEM:
		return "LD_LIBRARY_PATH, the loader cache and the system directories";
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

static void ndet_resolve_close(void *handle)
{
	if (dlclose(handle) != 0)
		ndet_resolve_clear_dlerror();
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

static bool ndet_resolve_same_object(const void *first, const void *second)
{
	Dl_info first_info;
	Dl_info second_info;
	if (dladdr(first, &first_info) == 0 || dladdr(second, &second_info) == 0)
		return false;
	return first_info.dli_fbase == second_info.dli_fbase;
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

/*
 * Is the object that defines `nccl_address` (found through `handle`) a copy of
 * nccl-det?  Every copy exports NDET_RESOLVE_MARKER from the same object as its
 * NCCL entry points.  dlsym and dladdr only: no dlopen, no NCCL call.
 */
static bool ndet_resolve_is_other_copy(void *handle, const void *nccl_address)
{
	void *marker = dlsym(handle, NDET_RESOLVE_MARKER);
	ndet_resolve_clear_dlerror();
	if (marker == NULL || ndet_resolve_is_own(marker))
		return false;
	return ndet_resolve_same_object(marker, nccl_address);
}

static void ndet_resolve_fill(void *handle)
{
#define NDET_NCCL_LOOKUP(ret, name, params)                                                        \
	ndet_resolve_table.name = (ret(*) params)ndet_resolve_lookup(handle, #name);
	NDET_NCCL_FUNCTIONS(NDET_NCCL_LOOKUP)
#undef NDET_NCCL_LOOKUP
	ndet_resolve_lookup_handle = handle;
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

/* Strategy NEXT: libnccl is in the global scope after us. */
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
	/* A drop-in behind us (both preloaded): it diverts, we forward. */
	ndet_resolve_behind_copy = ndet_resolve_is_other_copy(RTLD_NEXT, version);
	return true;
}

/* ------------------------------------------------------------------ loading a file */

static void ndet_resolve_find_self_file(void)
{
	Dl_info self;
	struct stat status;
	ndet_resolve_self_known = false;
	if (dladdr((const void *)&ndet_resolve_nccl, &self) == 0 || self.dli_fname == NULL ||
	    self.dli_fname[0] == '\0')
		return;
	if (stat(self.dli_fname, &status) != 0)
		return;
	ndet_resolve_self_dev = status.st_dev;
	ndet_resolve_self_ino = status.st_ino;
	ndet_resolve_self_known = true;
}

/*
 * Sanitizer runtimes abort a dlopen with RTLD_DEEPBIND (it would bypass their
 * interceptors), so the flag is left out when one is loaded.
 */
static bool ndet_resolve_sanitizer_loaded(void)
{
	static const char *const runtimes[] = {"__asan_init", "__tsan_init", "__msan_init",
					       "__hwasan_init"};
	for (size_t i = 0; i < sizeof(runtimes) / sizeof(runtimes[0]); i++) {
		if (dlsym(RTLD_DEFAULT, runtimes[i]) != NULL) {
			ndet_resolve_clear_dlerror();
			return true;
		}
	}
	ndet_resolve_clear_dlerror();
	return false;
}

/*
 * A malloc that is not libc's own (jemalloc or tcmalloc, preloaded) serves libc's
 * allocations too (realpath, getline): NCCL frees such blocks, and RTLD_DEEPBIND
 * would bind its free to libc's, which aborts on them.  So the flag is left out
 * then, as for the sanitizers.
 */
static bool ndet_resolve_malloc_replaced(void)
{
	void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	void *own = libc != NULL ? dlsym(libc, "malloc") : NULL;
	void *used = dlsym(RTLD_DEFAULT, "malloc");
	if (libc != NULL)
		dlclose(libc);
	ndet_resolve_clear_dlerror();
	return own != NULL && used != NULL && own != used;
}

static int ndet_resolve_private_flags(void)
{
	if (NDET_RESOLVE_DROPIN && !ndet_resolve_sanitizer_loaded() &&
	    !ndet_resolve_malloc_replaced())
		return RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND;
	return RTLD_NOW | RTLD_LOCAL;
}

/*
 * Load the real NCCL at `path` privately and fill the table from it.  On refusal,
 * `why` (`why_size` bytes) says why and nothing is kept loaded.
 */
static bool ndet_resolve_open_file(const char *path, char *why, size_t why_size)
{
	/* A bare name would be searched for, and "libnccl.so.2" is the drop-in's own SONAME. */
	if (strchr(path, '/') != NULL) {
		struct stat status;
		if (stat(path, &status) != 0) {
			snprintf(why, why_size, "%s", strerror(errno));
			return false;
		}
		if (ndet_resolve_self_known && status.st_dev == ndet_resolve_self_dev &&
		    status.st_ino == ndet_resolve_self_ino) {
			snprintf(why, why_size, "it is this nccl-det library itself");
			return false;
		}
	}
	int flags = ndet_resolve_private_flags();
	void *handle = dlopen(path, flags);
	if (handle == NULL) {
		const char *error = dlerror();
		snprintf(why, why_size, "%s", error != NULL ? error : "dlopen failed");
		return false;
	}
	void *version = ndet_resolve_lookup(handle, "ncclGetVersion");
	if (version == NULL) {
		snprintf(why, why_size,
			 "not a real NCCL (no ncclGetVersion other than nccl-det's own)");
		ndet_resolve_close(handle);
		return false;
	}
	/*
	 * Forwarding to a copy we loaded ourselves could loop back to us.  It stays
	 * loaded (inert: RTLD_LOCAL, no constructor of ours): its static CUDA runtime
	 * registered exit handlers, which not every runtime drops on dlclose
	 * (ThreadSanitizer's do not).
	 */
	if (ndet_resolve_is_other_copy(handle, version)) {
		snprintf(why, why_size, "it is another copy of nccl-det, not the real NCCL");
		return false;
	}
	ndet_resolve_fill(handle);
	ndet_resolve_handle = handle;
	ndet_resolve_deepbind = (flags & RTLD_DEEPBIND) != 0;
	snprintf(ndet_resolve_file, sizeof(ndet_resolve_file), "%s", path);
	return true;
}

/* Try `path`; a refusal is only traced (the search goes on). */
static bool ndet_resolve_try_file(const char *path)
{
	char why[NDET_RESOLVE_PATH_MAX];
	if (ndet_resolve_open_file(path, why, sizeof(why)))
		return true;
	NDET_TRACE(NDET_SUBSYS_INIT, "not using %s: %s", path, why);
	return false;
}

/* ------------------------------------------------------------------ loaded objects */

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

static void ndet_resolve_add_candidate(struct ndet_resolve_candidates *candidates, const char *path)
{
	for (int i = 0; i < candidates->count; i++) {
		if (strcmp(candidates->paths[i], path) == 0)
			return;
	}
	if (candidates->count < NDET_RESOLVE_MAX_CANDIDATES) {
		snprintf(candidates->paths[candidates->count], NDET_RESOLVE_PATH_MAX, "%s", path);
		candidates->count++;
	} else {
		NDET_INFO(NDET_SUBSYS_INIT,
			  "the real NCCL: %d places to look at already, %s left out",
			  NDET_RESOLVE_MAX_CANDIDATES, path);
	}
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
	ndet_resolve_add_candidate(candidates, info->dlpi_name);
	return 0;
}

static struct ndet_resolve_candidates *ndet_resolve_candidates_new(void)
{
	struct ndet_resolve_candidates *candidates = calloc(1, sizeof(*candidates));
	if (candidates == NULL) {
		snprintf(ndet_resolve_detail, sizeof(ndet_resolve_detail),
			 "out of memory while listing candidates");
		return NULL;
	}
	candidates->self_address = (const void *)&ndet_resolve_nccl;
	return candidates;
}

/* Strategy LOADED: libnccl loaded privately (RTLD_LOCAL), invisible to RTLD_NEXT. */
static bool ndet_resolve_try_loaded(void)
{
	struct ndet_resolve_candidates *candidates = ndet_resolve_candidates_new();
	if (candidates == NULL)
		return false;
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
		if (version == NULL || ndet_resolve_is_other_copy(handle, version)) {
			NDET_TRACE(NDET_SUBSYS_INIT, "%s is not the real NCCL (%s)",
				   candidates->paths[i],
				   version == NULL ? "no ncclGetVersion" : "another nccl-det");
			ndet_resolve_close(handle);
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

/* ------------------------------------------------------------------ named file */

/*
 * Strategy EXPLICIT: the path the user named.  The drop-in goes on searching when it
 * cannot be used, and says so at once (the user asked for this file); the preload
 * build, where it is the last strategy, names it in the final WARN.
 */
static bool ndet_resolve_try_explicit(void)
{
	const char *path = ndet_resolve_setting_library();
	if (path == NULL || path[0] == '\0')
		return false;
	char why[NDET_RESOLVE_PATH_MAX];
	if (ndet_resolve_open_file(path, why, sizeof(why)))
		return true;
	snprintf(ndet_resolve_detail, sizeof(ndet_resolve_detail),
		 "NCCL_DET_NCCL_LIBRARY=%s cannot be loaded (%.2000s)", path, why);
	if (NDET_RESOLVE_DROPIN)
		NDET_WARN("%s; looking for the real NCCL elsewhere.  Fix: point "
			  "NCCL_DET_NCCL_LIBRARY at the real libnccl.so.2 (not at nccl-det's "
			  "drop-in), or unset it",
			  ndet_resolve_detail);
	return false;
}

/* The first candidate file that exists and is a real NCCL; frees `candidates`. */
static bool ndet_resolve_try_candidates(struct ndet_resolve_candidates *candidates)
{
	bool found = false;
	for (int i = 0; i < candidates->count && !found; i++) {
		if (access(candidates->paths[i], F_OK) == 0)
			found = ndet_resolve_try_file(candidates->paths[i]);
	}
	free(candidates);
	return found;
}

/* ------------------------------------------------------------------ Python wheel */

/* Each loaded object under .../site-packages/ or .../dist-packages/ names a candidate. */
static int ndet_resolve_collect_wheels(struct dl_phdr_info *info, size_t size, void *opaque)
{
	static const char *const trees[] = {"/site-packages/", "/dist-packages/"};
	struct ndet_resolve_candidates *candidates = opaque;
	if (info->dlpi_name == NULL || info->dlpi_name[0] != '/')
		return 0;
	for (size_t i = 0; i < sizeof(trees) / sizeof(trees[0]); i++) {
		const char *tree = strstr(info->dlpi_name, trees[i]);
		if (tree == NULL)
			continue;
		char path[NDET_RESOLVE_PATH_MAX];
		int prefix = (int)(tree - info->dlpi_name) + (int)strlen(trees[i]);
		int written = snprintf(path, sizeof(path), "%.*snvidia/nccl/lib/%s", prefix,
				       info->dlpi_name, NDET_RESOLVE_SONAME);
		if (written > 0 && (size_t)written < sizeof(path))
			ndet_resolve_add_candidate(candidates, path);
	}
	return 0;
}

/* Strategy WHEEL: the nvidia-nccl wheel installed with the framework. */
static bool ndet_resolve_try_wheel(void)
{
	struct ndet_resolve_candidates *candidates = ndet_resolve_candidates_new();
	if (candidates == NULL)
		return false;
	(void)dl_iterate_phdr(ndet_resolve_collect_wheels, candidates);
	return ndet_resolve_try_candidates(candidates);
}

/* ------------------------------------------------------------------ system */

/* Offsets in glibc's cache format "glibc-ld.so.cache1.1" (elf/cache.h, cache_file_new). */
#define NDET_LD_CACHE_MAGIC        "glibc-ld.so.cache1.1"
#define NDET_LD_CACHE_HEADER_SIZE  48
#define NDET_LD_CACHE_NLIBS_OFFSET 20
#define NDET_LD_CACHE_ENTRY_SIZE   24
/* flags of a libc6 x86-64 entry: FLAG_ELF_LIBC6 | FLAG_X8664_LIB64 */
#define NDET_LD_CACHE_X86_64 0x0303

static uint32_t ndet_resolve_read_u32(const char *bytes)
{
	uint32_t value;
	memcpy(&value, bytes, sizeof(value));
	return value;
}

int ndet_resolve_ld_cache_find(const char *data, size_t size, const char *name, char (*paths)[4096],
			       int max)
{
	/* After the old format's table (glibc < 2.32 writes both), or at the start. */
	const char *header = NULL;
	size_t magic_length = strlen(NDET_LD_CACHE_MAGIC);
	for (size_t at = 0; at + NDET_LD_CACHE_HEADER_SIZE <= size; at += 4) {
		if (memcmp(data + at, NDET_LD_CACHE_MAGIC, magic_length) == 0) {
			header = data + at;
			break;
		}
	}
	if (header == NULL)
		return 0;
	size_t available = size - (size_t)(header - data);
	uint32_t entries = ndet_resolve_read_u32(header + NDET_LD_CACHE_NLIBS_OFFSET);
	if (entries > (available - NDET_LD_CACHE_HEADER_SIZE) / NDET_LD_CACHE_ENTRY_SIZE)
		return 0;
	int count = 0;
	for (uint32_t i = 0; i < entries && count < max; i++) {
		const char *entry =
			header + NDET_LD_CACHE_HEADER_SIZE + (size_t)i * NDET_LD_CACHE_ENTRY_SIZE;
		uint32_t flags = ndet_resolve_read_u32(entry);
		uint32_t key = ndet_resolve_read_u32(entry + 4);
		uint32_t value = ndet_resolve_read_u32(entry + 8);
		if (flags != NDET_LD_CACHE_X86_64 || key >= available || value >= available)
			continue;
		/* Strings are NUL-terminated within the image, else the entry is skipped. */
		const char *key_text = header + key;
		const char *value_text = header + value;
		if (memchr(key_text, '\0', available - key) == NULL ||
		    memchr(value_text, '\0', available - value) == NULL)
			continue;
		if (strcmp(key_text, name) != 0)
			continue;
		snprintf(paths[count], 4096, "%s", value_text);
		count++;
	}
	return count;
}

/* The loader cache's entries for NDET_RESOLVE_SONAME. */
static void ndet_resolve_add_ld_cache(struct ndet_resolve_candidates *candidates)
{
	char cache[NDET_RESOLVE_PATH_MAX];
	if (snprintf(cache, sizeof(cache), "%s/etc/ld.so.cache", ndet_resolve_system_root) >=
	    (int)sizeof(cache))
		return;
	int fd = open(cache, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	struct stat status;
	char *data = NULL;
	if (fstat(fd, &status) == 0 && status.st_size > 0 &&
	    (uint64_t)status.st_size <= NDET_RESOLVE_LD_CACHE_MAX)
		data = malloc((size_t)status.st_size);
	size_t size = 0;
	while (data != NULL && size < (size_t)status.st_size) {
		ssize_t got = read(fd, data + size, (size_t)status.st_size - size);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		size += (size_t)got;
	}
	if (close(fd) != 0)
		NDET_TRACE(NDET_SUBSYS_INIT, "closing /etc/ld.so.cache: %s", strerror(errno));
	if (data == NULL)
		return;
	char(*paths)[4096] = calloc(NDET_RESOLVE_MAX_CANDIDATES, sizeof(*paths));
	if (paths != NULL) {
		int found = ndet_resolve_ld_cache_find(data, size, NDET_RESOLVE_SONAME, paths,
						       NDET_RESOLVE_MAX_CANDIDATES);
		for (int i = 0; i < found; i++)
			ndet_resolve_add_candidate(candidates, paths[i]);
		free(paths);
	}
	free(data);
}

static void ndet_resolve_add_dir(struct ndet_resolve_candidates *candidates, const char *root,
				 const char *dir, size_t length)
{
	char path[NDET_RESOLVE_PATH_MAX];
	/* An empty entry of LD_LIBRARY_PATH means the current directory, as for the loader. */
	int written = length == 0 ? snprintf(path, sizeof(path), "./%s", NDET_RESOLVE_SONAME)
				  : snprintf(path, sizeof(path), "%s%.*s/%s", root, (int)length,
					     dir, NDET_RESOLVE_SONAME);
	/*
	 * Only a file that is there takes a place: a long LD_LIBRARY_PATH (modules,
	 * containers) must not crowd out the loader cache and the system directories.
	 */
	if (written > 0 && (size_t)written < sizeof(path) && access(path, F_OK) == 0)
		ndet_resolve_add_candidate(candidates, path);
}

/*
 * Strategy SYSTEM: where the loader would look, in its order, skipping our own file
 * (the drop-in's directory is usually first in LD_LIBRARY_PATH).
 */
static bool ndet_resolve_try_system(void)
{
	struct ndet_resolve_candidates *candidates = ndet_resolve_candidates_new();
	if (candidates == NULL)
		return false;
	const char *search = getenv("LD_LIBRARY_PATH");
	while (search != NULL && search[0] != '\0') {
		const char *end = strpbrk(search, ":;");
		size_t length = end != NULL ? (size_t)(end - search) : strlen(search);
		ndet_resolve_add_dir(candidates, "", search, length);
		search = end != NULL ? end + 1 : NULL;
	}
	ndet_resolve_add_ld_cache(candidates);
	for (size_t i = 0;
	     i < sizeof(ndet_resolve_system_dirs) / sizeof(ndet_resolve_system_dirs[0]); i++)
		ndet_resolve_add_dir(candidates, ndet_resolve_system_root,
				     ndet_resolve_system_dirs[i],
				     strlen(ndet_resolve_system_dirs[i]));
	return ndet_resolve_try_candidates(candidates);
}

/* ------------------------------------------------------------------ order */

#ifdef NDET_BUILD_DROPIN
/* We are libnccl.so.2: the user's choice, the application's copy, its wheel, the system. */
static const enum ndet_resolve_strategy ndet_resolve_order[] = {
	NDET_RESOLVE_EXPLICIT,
	NDET_RESOLVE_LOADED,
	NDET_RESOLVE_WHEEL,
	NDET_RESOLVE_SYSTEM,
};
#else
/* Preloaded in front of the application's NCCL: that one first. */
static const enum ndet_resolve_strategy ndet_resolve_order[] = {
	NDET_RESOLVE_NEXT,
	NDET_RESOLVE_LOADED,
	NDET_RESOLVE_EXPLICIT,
};
#endif

static bool ndet_resolve_try(enum ndet_resolve_strategy strategy)
{
	switch (strategy) {
	case NDET_RESOLVE_NEXT:
		return ndet_resolve_try_next();
	case NDET_RESOLVE_LOADED:
		return ndet_resolve_try_loaded();
	case NDET_RESOLVE_EXPLICIT:
		return ndet_resolve_try_explicit();
	case NDET_RESOLVE_WHEEL:
		return ndet_resolve_try_wheel();
	case NDET_RESOLVE_SYSTEM:
		return ndet_resolve_try_system();
	case NDET_RESOLVE_NONE:
		break;
	}
	return false;
}

static void ndet_resolve_locked(void)
{
	Dl_info self;
	ndet_resolve_self_base = NULL;
	if (dladdr((const void *)&ndet_resolve_nccl, &self) != 0)
		ndet_resolve_self_base = self.dli_fbase;
	ndet_resolve_find_self_file();
	memset(&ndet_resolve_table, 0, sizeof(ndet_resolve_table));
	ndet_resolve_found = NDET_RESOLVE_NONE;
	ndet_resolve_file[0] = '\0';
	ndet_resolve_detail[0] = '\0';
	for (size_t i = 0; i < sizeof(ndet_resolve_order) / sizeof(ndet_resolve_order[0]); i++) {
		if (ndet_resolve_try(ndet_resolve_order[i])) {
			ndet_resolve_found = ndet_resolve_order[i];
			return;
		}
	}
	if (!NDET_RESOLVE_DROPIN)
		return;
	char explicit_detail[sizeof(ndet_resolve_detail)];
	snprintf(explicit_detail, sizeof(explicit_detail), "%s",
		 ndet_resolve_detail[0] != '\0' ? ndet_resolve_detail
						: "NCCL_DET_NCCL_LIBRARY is not set");
	snprintf(ndet_resolve_detail, sizeof(ndet_resolve_detail),
		 "%.7000s, no libnccl.so* other than nccl-det is loaded, no nvidia/nccl/lib/%s "
		 "lies next to a loaded Python package, and LD_LIBRARY_PATH, the loader cache "
		 "and the system directories hold none but nccl-det's own",
		 explicit_detail, NDET_RESOLVE_SONAME);
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
	if (ndet_resolve_behind_copy) {
		NDET_INFO(NDET_SUBSYS_INIT,
			  "NCCL behind this copy of nccl-det is another copy of nccl-det (%s, "
			  "found by %s): that copy diverts, this one passes every call to it",
			  ndet_resolve_file, ndet_resolve_strategy_name(ndet_resolve_found));
		return;
	}
	const char *binding = ndet_resolve_deepbind ? ", loaded with RTLD_DEEPBIND" : "";
	/* A pass-through (NCCL_DET_ENABLE=0) makes no NCCL call of its own. */
	if (ndet_resolve_setting_enabled())
		NDET_INFO(NDET_SUBSYS_INIT, "real NCCL %s (found by %s%s), version %d",
			  ndet_resolve_file, ndet_resolve_strategy_name(ndet_resolve_found),
			  binding, ndet_resolve_nccl_version());
	else
		NDET_INFO(NDET_SUBSYS_INIT,
			  "real NCCL %s (found by %s%s), version not asked (NCCL_DET_ENABLE=0)",
			  ndet_resolve_file, ndet_resolve_strategy_name(ndet_resolve_found),
			  binding);

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

/*
 * The search, once: true when it has run for good.  `keep_none`: a search that found
 * nothing is kept too (every NCCL call); else it runs again next time (queries).
 */
static bool ndet_resolve_run(bool keep_none)
{
	if (__atomic_load_n(&ndet_resolve_done, __ATOMIC_ACQUIRE))
		return true;
	/* A library we dlopen may call NCCL from its constructor: no deadlock, no NCCL. */
	if (ndet_resolve_in_progress)
		return false;
	ndet_resolve_in_progress = true;
	bool resolved_here = false;
	pthread_mutex_lock(&ndet_resolve_lock);
	if (!__atomic_load_n(&ndet_resolve_done, __ATOMIC_ACQUIRE)) {
		ndet_resolve_locked();
		if (keep_none || ndet_resolve_found != NDET_RESOLVE_NONE) {
			__atomic_store_n(&ndet_resolve_done, 1, __ATOMIC_RELEASE);
			resolved_here = true;
		}
	}
	const bool done = __atomic_load_n(&ndet_resolve_done, __ATOMIC_ACQUIRE) != 0;
	pthread_mutex_unlock(&ndet_resolve_lock);
	ndet_resolve_in_progress = false;
	/* Outside the lock: logging may call pncclGetVersion. */
	if (resolved_here)
		ndet_resolve_log();
	return done;
}

const struct ndet_nccl *ndet_resolve_nccl(void)
{
	return ndet_resolve_run(true) ? &ndet_resolve_table : &ndet_resolve_empty_table;
}

bool ndet_resolve_peek(void)
{
	return ndet_resolve_run(false);
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

bool ndet_resolve_divert_allowed(void)
{
	int decided = __atomic_load_n(&ndet_resolve_divert, __ATOMIC_ACQUIRE);
	if (decided != 0)
		return decided > 0;
	(void)ndet_resolve_nccl();
	bool allowed = !ndet_resolve_behind_copy;
	if (allowed) {
		/* 0 = unknown (no NCCL, or it would not say): nothing to gate on. */
		int version = ndet_resolve_nccl_version();
		if (version != 0 && version < NDET_NCCL_MIN_VERSION) {
			allowed = false;
			NDET_WARN_ONCE(
				&ndet_resolve_old_warned,
				"the real NCCL %s is version %d, older than 2.21, the oldest "
				"nccl-det supports: every call goes to NCCL unchanged (no "
				"deterministic all-reduce).  Fix: use NCCL >= 2.21",
				ndet_resolve_file, version);
		} else if (version > NDET_NCCL_TESTED_VERSION) {
			NDET_INFO(NDET_SUBSYS_INIT,
				  "the real NCCL is version %d, newer than nccl-det was tested "
				  "with (2.29)",
				  version);
		}
	}
	__atomic_store_n(&ndet_resolve_divert, allowed ? 1 : -1, __ATOMIC_RELEASE);
	return allowed;
}

void *ndet_resolve_other_copy_symbol(const char *name)
{
	if (!ndet_resolve_peek() || !ndet_resolve_behind_copy)
		return NULL;
	void *address = dlsym(ndet_resolve_lookup_handle, name);
	ndet_resolve_clear_dlerror();
	return ndet_resolve_is_own(address) ? NULL : address;
}

void *ndet_resolve_symbol(const char *name, ndet_status_t *missing, bool *final)
{
	/* Called back from inside the resolution (a constructor of the library we load). */
	if (ndet_resolve_in_progress) {
		*missing = NDET_ERR_SYSTEM;
		*final = false;
		return NULL;
	}
	(void)ndet_resolve_nccl();
	*final = true;
	if (ndet_resolve_found == NDET_RESOLVE_NONE) {
		*missing = NDET_ERR_SYSTEM;
		return NULL;
	}
	/* pncclX and ncclX are the same code in NCCL; the p-alias skips other interposers. */
	const char *plain = strncmp(name, "pnccl", strlen("pnccl")) == 0 ? name + 1 : name;
	void *address = ndet_resolve_lookup(ndet_resolve_lookup_handle, plain);
	if (address == NULL)
		*missing = NDET_ERR_INVALID_USAGE;
	return address;
}

/* The WARN of a missing library (once per process) or symbol (once per `warned`). */
static ndet_status_t ndet_resolve_explain_missing(const char *name, int *warned)
{
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
	int version = __atomic_load_n(&ndet_resolve_version, __ATOMIC_ACQUIRE);
	char version_text[32] = "";
	if (version > 0)
		snprintf(version_text, sizeof(version_text), " (version %d)", version);
	NDET_WARN_ONCE(warned,
		       "%s is not exported by the real NCCL %s%s: that NCCL is too old for this "
		       "call, which fails with ncclInvalidUsage.  Fix: use an NCCL that provides "
		       "%s, or do not call it",
		       name, ndet_resolve_file, version_text, name);
	return NDET_ERR_INVALID_USAGE;
}

ndet_status_t ndet_resolve_missing(enum ndet_nccl_function function)
{
	if ((int)function < 0 || function >= NDET_NCCL_FUNCTION_COUNT)
		return NDET_ERR_INTERNAL;
	return ndet_resolve_explain_missing(ndet_resolve_function_name(function),
					    &ndet_resolve_symbol_warned[function]);
}

ndet_status_t ndet_resolve_missing_symbol(const char *name, int *warned)
{
	return ndet_resolve_explain_missing(name, warned);
}

void ndet_resolve_reset_for_testing(void)
{
	pthread_mutex_lock(&ndet_resolve_lock);
	if (ndet_resolve_handle != NULL)
		ndet_resolve_close(ndet_resolve_handle);
	ndet_resolve_handle = NULL;
	ndet_resolve_lookup_handle = NULL;
	memset(&ndet_resolve_table, 0, sizeof(ndet_resolve_table));
	ndet_resolve_found = NDET_RESOLVE_NONE;
	ndet_resolve_file[0] = '\0';
	ndet_resolve_detail[0] = '\0';
	ndet_resolve_behind_copy = false;
	ndet_resolve_deepbind = false;
	ndet_resolve_version = 0;
	ndet_resolve_divert = 0;
	ndet_resolve_library_warned = 0;
	ndet_resolve_old_warned = 0;
	memset(ndet_resolve_symbol_warned, 0, sizeof(ndet_resolve_symbol_warned));
	__atomic_store_n(&ndet_resolve_done, 0, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&ndet_resolve_lock);
}
