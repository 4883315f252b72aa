/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * A malloc that is not libc's (as jemalloc or tcmalloc are, preloaded): blocks come
 * from a static arena and are never given back.  A library that frees such a block
 * with libc's own free (bound to it by RTLD_DEEPBIND) aborts the process, as it
 * would with the real allocators (test_dropin_search.sh).
 */
#include <errno.h>
#include <malloc.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_BYTES (256u << 20)
#define ALIGN       64u

static char arena[ARENA_BYTES] __attribute__((aligned(ALIGN)));
static size_t arena_used;

/* Each block is preceded by its size, in the ALIGN bytes before it. */
static void *arena_take(size_t bytes, size_t align)
{
	if (align < ALIGN)
		align = ALIGN;
	if (bytes > ARENA_BYTES || (align & (align - 1)) != 0)
		return NULL;
	const size_t need = bytes + align + ALIGN;
	const size_t start = __atomic_fetch_add(&arena_used, need, __ATOMIC_RELAXED);
	if (start + need > ARENA_BYTES)
		return NULL;
	uintptr_t p = (uintptr_t)(arena + start + ALIGN);
	p = (p + align - 1) & ~(uintptr_t)(align - 1);
	((size_t *)p)[-1] = bytes;
	return (void *)p;
}

__attribute__((visibility("default"))) void *malloc(size_t bytes)
{
	void *p = arena_take(bytes, ALIGN);
	if (p == NULL)
		errno = ENOMEM;
	return p;
}

__attribute__((visibility("default"))) void free(void *p)
{
	(void)p; /* an arena block is never reused */
}

__attribute__((visibility("default"))) void *calloc(size_t n, size_t size)
{
	if (size != 0 && n > SIZE_MAX / size)
		return NULL;
	return malloc(n * size); /* the arena starts zeroed and is never reused */
}

__attribute__((visibility("default"))) void *realloc(void *old, size_t bytes)
{
	void *p = malloc(bytes);
	if (p != NULL && old != NULL) {
		const size_t had = ((size_t *)old)[-1];
		memcpy(p, old, had < bytes ? had : bytes);
	}
	return p;
}

__attribute__((visibility("default"))) int posix_memalign(void **out, size_t align, size_t bytes)
{
	void *p = arena_take(bytes, align);
	if (p == NULL)
		return ENOMEM;
	*out = p;
	return 0;
}

__attribute__((visibility("default"))) void *aligned_alloc(size_t align, size_t bytes)
{
	return arena_take(bytes, align);
}

__attribute__((visibility("default"))) void *memalign(size_t align, size_t bytes)
{
	return arena_take(bytes, align);
}

__attribute__((visibility("default"))) void *valloc(size_t bytes)
{
	return arena_take(bytes, 4096);
}

__attribute__((visibility("default"))) void *pvalloc(size_t bytes)
{
	return arena_take((bytes + 4095) & ~(size_t)4095, 4096);
}

__attribute__((visibility("default"))) size_t malloc_usable_size(void *p)
{
	return p == NULL ? 0 : ((size_t *)p)[-1];
}
