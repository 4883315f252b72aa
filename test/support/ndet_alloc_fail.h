/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Allocation failures on demand, for programs linked with NDET_ALLOC_FAIL_WRAP
 * (test/support/local.mk: the linker's --wrap of malloc, calloc, realloc and
 * strdup).  Every such call of the code linked statically into the program passes
 * here: nccl-det's layers, the host-only backend, the test itself.  Calls inside
 * shared libraries (libc's own, the fake NCCL's, CMocka's) do not.
 *
 * Counting and failing are per thread, so that a rank played by a thread fails its
 * own n-th allocation whatever the other ranks do.
 */
#ifndef NDET_ALLOC_FAIL_H_
#define NDET_ALLOC_FAIL_H_

#include <stdbool.h>
#include <stdio.h>

/*
 * Count this thread's allocations from now on, and fail the `nth` of them (1: the
 * next one; 0: none).  Only that one fails: the ones after it succeed again.
 */
void ndet_alloc_fail_arm(unsigned long nth);

/* Stop counting; the number of allocations this thread made since it was armed. */
unsigned long ndet_alloc_fail_disarm(void);

/* Whether this thread's armed failure has happened since ndet_alloc_fail_arm. */
bool ndet_alloc_fail_fired(void);

/* The call stack of the last failure of any thread, to `out` (nothing if none). */
void ndet_alloc_fail_print_site(FILE *out);

#endif /* NDET_ALLOC_FAIL_H_ */
