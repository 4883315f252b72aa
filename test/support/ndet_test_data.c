/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Values are built directly as bit patterns from a counter-based hash, so they are the
 * same on every machine and for every way of splitting a buffer into calls.
 */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "test/support/ndet_test_data.h"

struct ndet_test_layout {
	unsigned size;          /* bytes */
	unsigned mantissa_bits; /* stored fraction bits */
	unsigned exponent_bits;
	int bias;
	/* Unbiased exponent ranges: independent values, CANCEL's large and small values. */
	int wide_min, wide_max;
	int large_min, large_max;
	int small_min, small_max;
	/*
	 * E4M3 ("FN"): no infinities, and the exponent all ones is a normal number
	 * except S.1111.111, the one NaN.
	 */
	int no_infinity;
};

/*
 * Ranges.  wide: sums of 16 values stay finite.  large/small: for the accumulation
 * type's precision p (24 bits, 53 for f64) part of the small range lies below
 * large * 2^-p, where the large partial sums absorb it, and part above.
 *
 * fp8 (accumulated in f32):
 * f8e4m3: f32 sums of e4m3 values are exact, so no order absorbs anything; what the
 *   data must show instead is a rounding to e4m3 at every node (4 significant bits),
 *   which absorbs small values below large * 2^-4.  wide: 16 x 15 <= 448.  large
 *   stops at 2^7 so that no value is the NaN pattern 0x7f (2^8 x 1.875).
 * f8e5m2: large 2^12 ... 2^15, so large * 2^-24 is 2^-12 ... 2^-9; small from the
 *   smallest subnormal 2^-16 up to 2^-9 (just above every large * 2^-24), so part of
 *   it vanishes next to large in f32 and part survives.  The sum left after the
 *   cancellation is then made of values of a few neighbouring exponents, and what
 *   one order absorbs moves its 3 significant bits: the orders differ in about 13 %
 *   of the elements or more for every n of 4 ... 16 (a smaller range of small values
 *   shows fewer differences).  wide: 16 x 3584 = 57344.
 */
static const struct ndet_test_layout ndet_test_layouts[NDET_DTYPE_COUNT] = {
	[NDET_DTYPE_F32] = {4, 23, 8, 127, -30, 30, 20, 30, -20, 5},
	[NDET_DTYPE_F16] = {2, 10, 5, 15, -20, 10, 9, 10, -24, -4},
	[NDET_DTYPE_BF16] = {2, 7, 8, 127, -30, 30, 20, 30, -20, 5},
	[NDET_DTYPE_F64] = {8, 52, 11, 1023, -60, 60, 50, 60, -20, 10},
	[NDET_DTYPE_F8E4M3] = {1, 3, 4, 7, -9, 3, 5, 7, -9, 3, 1},
	[NDET_DTYPE_F8E5M2] = {1, 2, 5, 15, -16, 11, 12, 15, -16, -9, 0},
};

/* Hash lanes: separate streams for the shared per-element draws. */
#define NDET_TEST_LANE_CANCEL 0x1000001u
#define NDET_TEST_LANE_LARGE  0x1000002u
#define NDET_TEST_LANE_RANDOM 0x1000003u

static uint64_t ndet_test_mix(uint64_t x)
{
	/* splitmix64's finaliser: every input bit reaches every output bit. */
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t ndet_test_hash(uint64_t seed, uint64_t index, uint64_t lane)
{
	return ndet_test_mix(ndet_test_mix(ndet_test_mix(seed) ^ index) ^ lane);
}

static uint64_t ndet_test_sign_bit(const struct ndet_test_layout *layout)
{
	return 1ull << (layout->size * 8 - 1);
}

static uint64_t ndet_test_exponent_mask(const struct ndet_test_layout *layout)
{
	return ((1ull << layout->exponent_bits) - 1) << layout->mantissa_bits;
}

static uint64_t ndet_test_mantissa_mask(const struct ndet_test_layout *layout)
{
	return (1ull << layout->mantissa_bits) - 1;
}

/*
 * A value with the given unbiased exponent and random fraction.  Exponents below the
 * normal range give subnormals (never zero: zeros come only from SPECIALS).
 */
static uint64_t ndet_test_make_value(const struct ndet_test_layout *layout, int exponent,
				     uint64_t fraction, int negative)
{
	uint64_t sign = negative ? ndet_test_sign_bit(layout) : 0;
	int biased = exponent + layout->bias;

	fraction &= ndet_test_mantissa_mask(layout);
	if (biased >= 1)
		return sign | (uint64_t)biased << layout->mantissa_bits | fraction;

	unsigned shift = (unsigned)(1 - biased);
	uint64_t significand = (1ull << layout->mantissa_bits) | fraction;
	uint64_t field = shift > layout->mantissa_bits ? 0 : significand >> shift;

	return sign | (field == 0 ? 1 : field);
}

static uint64_t ndet_test_random_in_range(const struct ndet_test_layout *layout, uint64_t hash,
					  int exponent_min, int exponent_max)
{
	uint64_t span = (uint64_t)(exponent_max - exponent_min + 1);
	int exponent = exponent_min + (int)((hash >> 1) % span);

	return ndet_test_make_value(layout, exponent, hash >> 12, (int)(hash & 1));
}

static uint64_t ndet_test_special(const struct ndet_test_layout *layout, uint64_t hash)
{
	uint64_t sign = (hash & 1) ? ndet_test_sign_bit(layout) : 0;
	uint64_t exponent_mask = ndet_test_exponent_mask(layout);
	uint64_t mantissa_mask = ndet_test_mantissa_mask(layout);
	uint64_t quiet = 1ull << (layout->mantissa_bits - 1);

	if (layout->no_infinity) {
		/*
		 * E4M3: exponent_mask is the normal number 256 and there is no inf;
		 * largest finite in place of inf, the one NaN pattern for both NaNs.
		 */
		uint64_t largest = exponent_mask | (mantissa_mask - 1);

		switch ((hash >> 1) % 8) {
		case 0:
			return largest;
		case 1:
			return ndet_test_sign_bit(layout) | largest;
		case 2:
		case 3:
			return sign | exponent_mask | mantissa_mask; /* NaN */
		case 4:
			return sign;
		case 5:
			return sign | 1;
		case 6:
			return sign | (((hash >> 8) & mantissa_mask) | 1);
		default:
			return sign | largest;
		}
	}
	switch ((hash >> 1) % 8) {
	case 0:
		return exponent_mask; /* +inf */
	case 1:
		return ndet_test_sign_bit(layout) | exponent_mask; /* -inf */
	case 2:
		return sign | exponent_mask | quiet; /* canonical quiet NaN */
	case 3:
		return sign | exponent_mask | quiet | ((hash >> 8) & (quiet - 1)); /* payload */
	case 4:
		return sign; /* +-0 */
	case 5:
		return sign | 1; /* smallest subnormal */
	case 6:
		return sign | (((hash >> 8) & mantissa_mask) | 1); /* some subnormal */
	default:
		return sign | (exponent_mask - (1ull << layout->mantissa_bits)) |
		       mantissa_mask; /* largest finite */
	}
}

static void ndet_test_store(const struct ndet_test_layout *layout, void *buffer, size_t index,
			    uint64_t bits)
{
	unsigned char *target = (unsigned char *)buffer + index * layout->size;

	switch (layout->size) {
	case 1:
		*target = (unsigned char)bits;
		break;
	case 2: {
		uint16_t value = (uint16_t)bits;

		memcpy(target, &value, sizeof(value));
		break;
	}
	case 4: {
		uint32_t value = (uint32_t)bits;

		memcpy(target, &value, sizeof(value));
		break;
	}
	default:
		memcpy(target, &bits, sizeof(bits));
		break;
	}
}

static int ndet_test_valid_dtype(ndet_dtype_t dtype)
{
	return (unsigned)dtype < NDET_DTYPE_COUNT;
}

void ndet_test_fill_rank(ndet_dtype_t dtype, void *buffer, size_t first_index, size_t count,
			 uint64_t seed, int rank, int nranks, unsigned flags)
{
	if (!ndet_test_valid_dtype(dtype) || buffer == NULL || nranks < 1 || rank < 0 ||
	    rank >= nranks)
		return;

	const struct ndet_test_layout *layout = &ndet_test_layouts[dtype];
	int cancel = (flags & NDET_TEST_DATA_CANCEL) && nranks >= 2;

	for (size_t k = 0; k < count; k++) {
		uint64_t i = first_index + k;
		uint64_t own = ndet_test_hash(seed, i, (uint64_t)rank);
		uint64_t bits =
			ndet_test_random_in_range(layout, own, layout->wide_min, layout->wide_max);

		if (cancel) {
			uint64_t choice = ndet_test_hash(seed, i, NDET_TEST_LANE_CANCEL);

			if (choice & 1) {
				/* Two distinct ranks, chosen alike on every rank. */
				int positive = (int)((choice >> 8) % (uint64_t)nranks);
				int negative = (positive + 1 +
						(int)((choice >> 32) % (uint64_t)(nranks - 1))) %
					       nranks;
				uint64_t large = ndet_test_random_in_range(
					layout, ndet_test_hash(seed, i, NDET_TEST_LANE_LARGE),
					layout->large_min, layout->large_max);

				large &= ~ndet_test_sign_bit(layout);
				if (rank == positive)
					bits = large;
				else if (rank == negative)
					bits = large | ndet_test_sign_bit(layout);
				else
					bits = ndet_test_random_in_range(
						layout, own, layout->small_min, layout->small_max);
			}
		}
		/* Separate draw, so specials land independently of the value kind. */
		if (flags & NDET_TEST_DATA_SPECIALS) {
			uint64_t special = ndet_test_mix(own ^ 0x5bd1e995u);

			if (special % 32 == 0)
				bits = ndet_test_special(layout, special >> 5);
		}
		ndet_test_store(layout, buffer, (size_t)k, bits);
	}
}

void ndet_test_fill_random(ndet_dtype_t dtype, void *buffer, size_t count, uint64_t seed,
			   unsigned flags)
{
	/* A lane no rank of fill_rank uses, so the two never produce the same values. */
	ndet_test_fill_rank(dtype, buffer, 0, count, ndet_test_mix(seed ^ NDET_TEST_LANE_RANDOM), 0,
			    1, flags & NDET_TEST_DATA_SPECIALS);
}

uint64_t ndet_test_element_bits(ndet_dtype_t dtype, const void *buffer, size_t index)
{
	if (!ndet_test_valid_dtype(dtype))
		return 0;

	const struct ndet_test_layout *layout = &ndet_test_layouts[dtype];
	const unsigned char *source = (const unsigned char *)buffer + index * layout->size;

	switch (layout->size) {
	case 1:
		return *source;
	case 2: {
		uint16_t value;

		memcpy(&value, source, sizeof(value));
		return value;
	}
	case 4: {
		uint32_t value;

		memcpy(&value, source, sizeof(value));
		return value;
	}
	default: {
		uint64_t value;

		memcpy(&value, source, sizeof(value));
		return value;
	}
	}
}

int ndet_test_element_is_nan(ndet_dtype_t dtype, const void *buffer, size_t index)
{
	if (!ndet_test_valid_dtype(dtype))
		return 0;

	const struct ndet_test_layout *layout = &ndet_test_layouts[dtype];
	uint64_t bits = ndet_test_element_bits(dtype, buffer, index);
	uint64_t exponent_mask = ndet_test_exponent_mask(layout);

	/* E4M3: only S.1111.111; its other all-ones exponents are numbers. */
	if (layout->no_infinity)
		return (bits & ~ndet_test_sign_bit(layout)) ==
		       (exponent_mask | ndet_test_mantissa_mask(layout));
	return (bits & exponent_mask) == exponent_mask &&
	       (bits & ndet_test_mantissa_mask(layout)) != 0;
}

double ndet_test_element_to_double(ndet_dtype_t dtype, const void *buffer, size_t index)
{
	if (!ndet_test_valid_dtype(dtype))
		return NAN;

	const struct ndet_test_layout *layout = &ndet_test_layouts[dtype];
	uint64_t bits = ndet_test_element_bits(dtype, buffer, index);
	uint64_t fraction = bits & ndet_test_mantissa_mask(layout);
	uint64_t exponent_field = (bits & ndet_test_exponent_mask(layout)) >> layout->mantissa_bits;
	double sign = (bits & ndet_test_sign_bit(layout)) ? -1.0 : 1.0;
	int mantissa_bits = (int)layout->mantissa_bits;

	if (exponent_field == (1ull << layout->exponent_bits) - 1) {
		if (!layout->no_infinity)
			return fraction == 0 ? sign * INFINITY : NAN;
		if (fraction == ndet_test_mantissa_mask(layout))
			return NAN;
		/* E4M3: a normal number, 256 ... 448. */
	}
	if (exponent_field == 0)
		return sign * ldexp((double)fraction, 1 - layout->bias - mantissa_bits);
	return sign * ldexp((double)((1ull << mantissa_bits) | fraction),
			    (int)exponent_field - layout->bias - mantissa_bits);
}

size_t ndet_test_count_differences(ndet_dtype_t dtype, const void *a, const void *b, size_t count,
				   size_t *first_difference)
{
	size_t differences = 0;
	size_t first = count;

	for (size_t i = 0; i < count; i++) {
		if (ndet_test_element_bits(dtype, a, i) == ndet_test_element_bits(dtype, b, i))
			continue;
		if (ndet_test_element_is_nan(dtype, a, i) && ndet_test_element_is_nan(dtype, b, i))
			continue;
		if (differences == 0)
			first = i;
		differences++;
	}
	if (first_difference != NULL)
		*first_difference = first;
	return differences;
}

int ndet_test_format_element(ndet_dtype_t dtype, const void *buffer, size_t index, char *text,
			     size_t text_size)
{
	if (!ndet_test_valid_dtype(dtype))
		return snprintf(text, text_size, "(invalid dtype)");

	int digits = (int)ndet_test_layouts[dtype].size * 2;

	return snprintf(text, text_size, "0x%0*" PRIx64 " (%.17g)", digits,
			ndet_test_element_bits(dtype, buffer, index),
			ndet_test_element_to_double(dtype, buffer, index));
}
