/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Zeroed blocks of the fakes' pools and staging buffers (megabytes per rank, of which
 * a test touches a few kilobytes).  Under ThreadSanitizer blocks of 1 MiB and more come
 * from mmap: its calloc clears every byte of a block and its free the metadata of every
 * byte, which made the tests that set up a pool per rank dozens of times slower than
 * the rest of the suite together, while untouched mapped pages cost nothing.
 * Elsewhere calloc and free, so that AddressSanitizer and valgrind see a fake kernel
 * that runs past a block, and a test that fails allocations (ndet_alloc_fail.h) can
 * fail these too.
 */
#ifndef NDET_BIG_ALLOC_H_
#define NDET_BIG_ALLOC_H_

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#if defined(__SANITIZE_THREAD__)
#define NDET_BIG_ALLOC_MMAP_MIN ((size_t)1 << 20)
#else
#define NDET_BIG_ALLOC_MMAP_MIN SIZE_MAX
#endif

/* `size` zeroed bytes (at least one), or NULL. */
static inline void *ndet_big_alloc(size_t size)
{
	if (size >= NDET_BIG_ALLOC_MMAP_MIN) {
		void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				  -1, 0);
		return base == MAP_FAILED ? NULL : base;
	}
	return calloc(1, size > 0 ? size : 1);
}

/* Gives back a block of ndet_big_alloc(size); NULL is ignored. */
static inline void ndet_big_free(void *base, size_t size)
{
	if (base != NULL && size >= NDET_BIG_ALLOC_MMAP_MIN)
		munmap(base, size);
	else
		free(base);
}

#endif /* NDET_BIG_ALLOC_H_ */
