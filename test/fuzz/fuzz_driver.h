/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The plain driver of the fuzz targets (fuzz_driver.c), for `make check` and any
 * machine without libFuzzer: each target defines LLVMFuzzerTestOneInput and the
 * things below; the driver feeds it the files named on the command line (crashes
 * and corpora libFuzzer wrote), the built-in seeds, then deterministic mutations of
 * the seeds and random inputs.  Built with -DNDET_LIBFUZZER (test/fuzz/libfuzzer.sh),
 * libFuzzer's own main drives the same entry point instead.
 */
#ifndef FUZZ_DRIVER_H_
#define FUZZ_DRIVER_H_

#include <stddef.h>
#include <stdint.h>

struct fuzz_seed {
	const char *bytes;
	size_t size;
};

/* A seed from a string literal (its terminating NUL left out). */
#define FUZZ_SEED(literal)                                                                         \
	{                                                                                          \
		(literal), sizeof(literal) - 1                                                     \
	}

/* Provided by each target. */
extern const char fuzz_name[];
extern const struct fuzz_seed fuzz_seeds[];
extern const size_t fuzz_seed_count;
extern const unsigned fuzz_generated_inputs; /* mutations and random inputs to run */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A failed property: print it (with the target's name) and abort, as libFuzzer expects. */
void fuzz_fail(const char *what, const char *detail) __attribute__((noreturn));

#endif /* FUZZ_DRIVER_H_ */
