/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Test data that can tell reduction orders apart (doc/testing.md: a test proves
 * that its data discriminates).  Plain C with no CUDA and no nccl-det code, so the
 * CPU tests and the GPU test programs share it without trusting what they test.
 *
 * Deterministic: element i of a buffer depends only on (dtype, seed, i, rank, nranks,
 * flags), never on count or first_index, so a large call and a smaller or offset call
 * can be filled with the same values for element i.
 */
#ifndef NDET_TEST_DATA_H_
#define NDET_TEST_DATA_H_

#include <stddef.h>
#include <stdint.h>

#include "kernels/ndet_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Half of the elements get a large value on one rank and its exact negation on
 * another rank, with small values of wide exponent range on the others.  The small
 * values that the large partial sums absorb depend on the order, and the cancellation
 * makes that visible even after the final rounding of f16/bf16 (whose f32 sums of
 * independent values almost never differ after rounding).  Needs nranks >= 2.
 */
#define NDET_TEST_DATA_CANCEL 0x1u

/*
 * About one element in 32 of each rank is inf, NaN, +-0, a subnormal or the largest
 * finite.  f8e4m3 has no inf: the largest finite (+-448) stands in for it, and its
 * NaN is 0x7f/0xff only.
 */
#define NDET_TEST_DATA_SPECIALS 0x2u

/*
 * Independent values with random signs and wide exponents (sums of up to 16 of them do
 * not overflow; products may, which is fine data too).  flags: 0 or
 * NDET_TEST_DATA_SPECIALS.
 */
void ndet_test_fill_random(ndet_dtype_t dtype, void *buffer, size_t count, uint64_t seed,
			   unsigned flags);

/*
 * Rank `rank`'s input for elements [first_index, first_index + count) of a data set
 * of `nranks` ranks.  Each rank fills its own buffer; only together do the ranks hold
 * the NDET_TEST_DATA_CANCEL pairs.  Without that flag, ranks get independent values.
 */
void ndet_test_fill_rank(ndet_dtype_t dtype, void *buffer, size_t first_index, size_t count,
			 uint64_t seed, int rank, int nranks, unsigned flags);

/* Bits of element `index` (zero-extended). */
uint64_t ndet_test_element_bits(ndet_dtype_t dtype, const void *buffer, size_t index);

/* Element `index` as a double (exact for every dtype here, fp8 included). */
double ndet_test_element_to_double(ndet_dtype_t dtype, const void *buffer, size_t index);

/* Is element `index` a NaN (any payload)? */
int ndet_test_element_is_nan(ndet_dtype_t dtype, const void *buffer, size_t index);

/*
 * Number of elements whose bits differ, counting two NaNs as equal whatever their
 * payloads (the contract fixes NaN-ness, not payloads).  *first_difference (if not
 * NULL) gets the first differing index, or count when none differs.
 */
size_t ndet_test_count_differences(ndet_dtype_t dtype, const void *a, const void *b, size_t count,
				   size_t *first_difference);

/* "0x3c00 (1)" for failure messages.  Returns what snprintf returns. */
int ndet_test_format_element(ndet_dtype_t dtype, const void *buffer, size_t index, char *text,
			     size_t text_size);

#ifdef __cplusplus
}
#endif

#endif /* NDET_TEST_DATA_H_ */
