/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Time for the CPU tests that measure how long a call waited.
 */
#ifndef NDET_TEST_CLOCK_H_
#define NDET_TEST_CLOCK_H_

#include <time.h>

/* Monotonic seconds. */
static inline double now_seconds(void)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}

static inline void pause_ms(long ms)
{
	struct timespec pause = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
	nanosleep(&pause, NULL);
}

#endif /* NDET_TEST_CLOCK_H_ */
