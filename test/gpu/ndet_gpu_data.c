/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 */
#include "config.h"

#include "test/gpu/ndet_gpu_data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/ndet_dtype.h"
#include "reference/ndet_reference.h"
#include "test/support/ndet_test_data.h"

void gpu_die(void)
{
	fflush(stdout);
	fflush(stderr);
	_exit(2);
}

bool gpu_is_fp8(ndet_dtype_t dtype)
{
	return dtype == NDET_DTYPE_F8E4M3 || dtype == NDET_DTYPE_F8E5M2;
}

/* The name filter of gpu_dtype_selected: NDET_TEST_DTYPES (comma list; default all). */
bool gpu_dtype_named(ndet_dtype_t dtype)
{
	const char *list = getenv("NDET_TEST_DTYPES");
	if (list == NULL || *list == '\0')
		return true;
	const char *name = ndet_dtype_name(dtype);
	const size_t length = strlen(name);
	for (const char *p = list; *p != '\0';) {
		const size_t item = strcspn(p, ",");
		if (item == length && strncmp(p, name, length) == 0)
			return true;
		p += item + (p[item] == ',');
	}
	return false;
}

static uint64_t gpu_rng(uint64_t *state)
{
	uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

void gpu_fill(ndet_dtype_t dtype, void *buffer, size_t count, uint64_t seed, bool specials)
{
	uint64_t state = seed * 0x2545F4914F6CDD1Dull + 1;
	/* Exponent spread per type: wide enough that order matters, narrow enough that sums
	 * of 16 values rarely overflow. */
	int spread = dtype == NDET_DTYPE_F16      ? 8
		     : dtype == NDET_DTYPE_F64    ? 40
		     : dtype == NDET_DTYPE_F8E4M3 ? 4
		     : dtype == NDET_DTYPE_F8E5M2 ? 10
						  : 20;
	for (size_t i = 0; i < count; i++) {
		uint64_t bits = gpu_rng(&state);
		double mantissa = 1.0 + (double)(bits >> 12) / 4503599627370496.0;
		int exponent = (int)(bits % (uint64_t)(2 * spread + 1)) - spread;
		double value = ldexp(mantissa, exponent) * ((bits >> 11) & 1 ? -1.0 : 1.0);
		if (specials && (bits & 0xff00) == 0x1100) {
			static const double special_values[] = {INFINITY, -INFINITY, NAN, 0.0,
								-0.0};
			value = special_values[(bits >> 20) % 5];
		}
		bool subnormal = specials && (bits & 0xff00) == 0x2200;
		switch (dtype) {
		case NDET_DTYPE_F32: {
			float f = (float)value;
			if (subnormal)
				f = (float)((bits >> 40) % 1000 + 1) * 1.4e-45f;
			((float *)buffer)[i] = f;
			break;
		}
		case NDET_DTYPE_F64: {
			double d = value;
			if (subnormal)
				d = (double)((bits >> 40) % 1000 + 1) * 4.9e-324;
			((double *)buffer)[i] = d;
			break;
		}
		case NDET_DTYPE_F16: {
			uint16_t h = ndet_float_to_half((float)value);
			if (subnormal)
				h = (uint16_t)(((bits >> 40) % 1023 + 1) | ((bits >> 50) & 1)
										   << 15);
			((uint16_t *)buffer)[i] = h;
			break;
		}
		case NDET_DTYPE_BF16: {
			uint16_t h = ndet_float_to_bfloat16((float)value);
			if (subnormal)
				h = (uint16_t)(((bits >> 40) % 127 + 1) | ((bits >> 50) & 1) << 15);
			((uint16_t *)buffer)[i] = h;
			break;
		}
		case NDET_DTYPE_F8E4M3:
		case NDET_DTYPE_F8E5M2: {
			/* inf stays inf in e5m2 and saturates to 448 in e4m3 (it has none). */
			const bool e4m3 = dtype == NDET_DTYPE_F8E4M3;
			uint8_t b = e4m3 ? ndet_float_to_fp8_e4m3((float)value)
					 : ndet_float_to_fp8_e5m2((float)value);
			if (subnormal)
				b = (uint8_t)(((bits >> 40) % (e4m3 ? 7 : 3) + 1) |
					      ((bits >> 50) & 1) << 7);
			((uint8_t *)buffer)[i] = b;
			break;
		}
		default:
			break;
		}
	}
}

bool gpu_share_unique_id(int rank, const char *id_file, ncclUniqueId *id)
{
	if (rank == 0) {
		if (ncclGetUniqueId(id) != ncclSuccess)
			return false;
		char tmp[4096];
		snprintf(tmp, sizeof(tmp), "%s.tmp", id_file);
		FILE *file = fopen(tmp, "wb");
		if (file == NULL)
			return false;
		const bool written = fwrite(id, sizeof(*id), 1, file) == 1;
		return fclose(file) == 0 && written && rename(tmp, id_file) == 0;
	}
	FILE *file = NULL;
	for (int i = 0; i < 6000 && file == NULL; i++)
		if ((file = fopen(id_file, "rb")) == NULL)
			usleep(10000);
	if (file == NULL)
		return false;
	const bool read = fread(id, sizeof(*id), 1, file) == 1;
	fclose(file);
	return read;
}

void gpu_upload(void *dst, const void *src, size_t bytes, cudaStream_t stream)
{
	GPU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
	GPU_CHECK(cudaStreamSynchronize(stream));
}

size_t gpu_compare(ndet_dtype_t dtype, const void *got, const void *want, size_t count,
		   size_t *first_index)
{
	/* NaN payloads may differ (doc/contract.md): the shared test data's rule. */
	size_t first = 0;
	const size_t mismatches = ndet_test_count_differences(dtype, got, want, count, &first);
	if (mismatches != 0 && first_index != NULL)
		*first_index = first;
	return mismatches;
}
