/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The wrapped allocators of ndet_alloc_fail.h.  The linker sends each call of
 * malloc (and the others) from the program's own objects to __wrap_malloc, and
 * __real_malloc is the allocator the program would have called (libc's, or a
 * sanitizer's).
 */
#include "config.h"

#include "test/support/ndet_alloc_fail.h"

#include <errno.h>
#include <execinfo.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

void *__real_malloc(size_t size);
void *__real_calloc(size_t count, size_t size);
void *__real_realloc(void *pointer, size_t size);
char *__real_strdup(const char *text);
/*
 * Exported: in a sanitizer build the linker also binds a shared library's reference
 * to these allocators to the wrappers, which the project's hidden default visibility
 * would refuse.
 */
#define NDET_WRAP __attribute__((visibility("default")))
NDET_WRAP void *__wrap_malloc(size_t size);
NDET_WRAP void *__wrap_calloc(size_t count, size_t size);
NDET_WRAP void *__wrap_realloc(void *pointer, size_t size);
NDET_WRAP char *__wrap_strdup(const char *text);

static _Thread_local struct {
	bool armed, fired;
	unsigned long count, nth;
} ndet_alloc_fail_thread;

enum { NDET_ALLOC_FAIL_FRAMES = 16 };
static pthread_mutex_t ndet_alloc_fail_lock = PTHREAD_MUTEX_INITIALIZER;
static void *ndet_alloc_fail_site[NDET_ALLOC_FAIL_FRAMES];
static int ndet_alloc_fail_depth;

/* Whether this allocation fails; records the call stack when it does. */
static bool ndet_alloc_fail_now(void)
{
	if (!ndet_alloc_fail_thread.armed)
		return false;
	if (++ndet_alloc_fail_thread.count != ndet_alloc_fail_thread.nth)
		return false;
	ndet_alloc_fail_thread.fired = true;
	void *frames[NDET_ALLOC_FAIL_FRAMES];
	const int depth = backtrace(frames, NDET_ALLOC_FAIL_FRAMES);
	pthread_mutex_lock(&ndet_alloc_fail_lock);
	memcpy(ndet_alloc_fail_site, frames, sizeof(frames));
	ndet_alloc_fail_depth = depth;
	pthread_mutex_unlock(&ndet_alloc_fail_lock);
	errno = ENOMEM;
	return true;
}

void ndet_alloc_fail_arm(unsigned long nth)
{
	ndet_alloc_fail_thread.armed = true;
	ndet_alloc_fail_thread.fired = false;
	ndet_alloc_fail_thread.count = 0;
	ndet_alloc_fail_thread.nth = nth;
}

unsigned long ndet_alloc_fail_disarm(void)
{
	ndet_alloc_fail_thread.armed = false;
	return ndet_alloc_fail_thread.count;
}

bool ndet_alloc_fail_fired(void)
{
	return ndet_alloc_fail_thread.fired;
}

void ndet_alloc_fail_print_site(FILE *out)
{
	pthread_mutex_lock(&ndet_alloc_fail_lock);
	if (ndet_alloc_fail_depth > 0) {
		fflush(out);
		backtrace_symbols_fd(ndet_alloc_fail_site, ndet_alloc_fail_depth, fileno(out));
	}
	pthread_mutex_unlock(&ndet_alloc_fail_lock);
}

void *__wrap_malloc(size_t size)
{
	return ndet_alloc_fail_now() ? NULL : __real_malloc(size);
}

void *__wrap_calloc(size_t count, size_t size)
{
	return ndet_alloc_fail_now() ? NULL : __real_calloc(count, size);
}

void *__wrap_realloc(void *pointer, size_t size)
{
	return ndet_alloc_fail_now() ? NULL : __real_realloc(pointer, size);
}

char *__wrap_strdup(const char *text)
{
	return ndet_alloc_fail_now() ? NULL : __real_strdup(text);
}
