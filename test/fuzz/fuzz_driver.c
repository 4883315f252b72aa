/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The plain fuzz driver (see fuzz_driver.h).  fuzz_fail() lives here too, for the
 * libFuzzer builds as well.
 */
#include "config.h"

#include "test/fuzz/fuzz_driver.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_MAX_INPUT 65536

void fuzz_fail(const char *what, const char *detail)
{
	fprintf(stderr, "%s: %s: %s\n", fuzz_name, what, detail);
	abort();
}

#ifndef NDET_LIBFUZZER
/* xorshift64*: the same inputs on every run and machine. */
static uint64_t fuzz_random(uint64_t *state)
{
	*state ^= *state >> 12;
	*state ^= *state << 25;
	*state ^= *state >> 27;
	return *state * UINT64_C(0x2545f4914f6cdd1d);
}

static void fuzz_run_file(const char *path, uint8_t *buffer)
{
	FILE *file = fopen(path, "rb");
	if (file == NULL)
		fuzz_fail(path, strerror(errno));
	size_t size = fread(buffer, 1, FUZZ_MAX_INPUT, file);
	if (ferror(file))
		fuzz_fail(path, "read error");
	if (fclose(file) != 0)
		fuzz_fail(path, strerror(errno));
	LLVMFuzzerTestOneInput(buffer, size);
}

/* A seed with a few bytes overwritten, inserted or cut off, or plain random bytes. */
static size_t fuzz_generate(uint64_t *state, uint8_t *buffer)
{
	uint64_t pick = fuzz_random(state);
	if (fuzz_seed_count == 0 || pick % 4 == 0) {
		size_t size = (size_t)(fuzz_random(state) % 2048);
		for (size_t i = 0; i < size; i++)
			buffer[i] = (uint8_t)fuzz_random(state);
		return size;
	}
	const struct fuzz_seed *seed = &fuzz_seeds[(pick >> 8) % fuzz_seed_count];
	size_t size = seed->size;
	memcpy(buffer, seed->bytes, size);
	unsigned edits = 1 + (unsigned)(fuzz_random(state) % 8);
	for (unsigned e = 0; e < edits && size > 0; e++) {
		uint64_t edit = fuzz_random(state);
		size_t at = (size_t)((edit >> 8) % size);
		switch (edit % 4) {
		case 0: /* overwrite */
		case 1:
			buffer[at] = (uint8_t)(edit >> 40);
			break;
		case 2: /* insert */
			if (size < FUZZ_MAX_INPUT) {
				memmove(buffer + at + 1, buffer + at, size - at);
				buffer[at] = (uint8_t)(edit >> 40);
				size++;
			}
			break;
		default: /* cut */
			size = at;
			break;
		}
	}
	return size;
}

int main(int argc, char **argv)
{
	static uint8_t buffer[FUZZ_MAX_INPUT];
	for (int i = 1; i < argc; i++)
		fuzz_run_file(argv[i], buffer);
	for (size_t i = 0; i < fuzz_seed_count; i++) {
		memcpy(buffer, fuzz_seeds[i].bytes, fuzz_seeds[i].size);
		LLVMFuzzerTestOneInput(buffer, fuzz_seeds[i].size);
	}
	uint64_t state = UINT64_C(0x9e3779b97f4a7c15);
	for (unsigned i = 0; i < fuzz_generated_inputs; i++) {
		size_t size = fuzz_generate(&state, buffer);
		LLVMFuzzerTestOneInput(buffer, size);
	}
	printf("%s: %zu seeds and %u generated inputs passed\n", fuzz_name, fuzz_seed_count,
	       fuzz_generated_inputs);
	return 0;
}
#endif /* NDET_LIBFUZZER */
