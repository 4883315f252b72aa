/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The CPU reference of the determinism contract.  Written for clarity: per element,
 * the leaves in the accumulation type, one recursive evaluation of the tree per host
 * and one over the hosts' partials (one host: the tree over every rank).  The GPU
 * must match these bits, so every arithmetic step here is a single IEEE operation:
 * the file is built in its own convenience library with -ffp-contract=off
 * -fno-fast-math (src/local.mk), and refuses to build in a mode that would change
 * results.
 */
#include "config.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reference/ndet_reference.h"

#ifdef __FAST_MATH__
#error "ndet_reference.c defines IEEE results: it must not be built with -ffast-math"
#endif
/* x87 excess precision would round twice (to extended, then to float/double). */
#if FLT_EVAL_METHOD != 0
#error "ndet_reference.c needs float and double evaluated in their own precision"
#endif

/*
 * Conversions.  Done on the bits rather than through a compiler's half type so the
 * reference depends on no compiler or instruction-set support, and so the rounding
 * rule is visible here.  NaNs are quieted (as F16C and CUDA's conversions do) and
 * keep their sign and the top payload bits.
 */

static uint32_t ndet_float_bits(float value)
{
	uint32_t bits;

	memcpy(&bits, &value, sizeof(bits));
	return bits;
}

static float ndet_float_from_bits(uint32_t bits)
{
	float value;

	memcpy(&value, &bits, sizeof(value));
	return value;
}

float ndet_half_to_float(uint16_t bits)
{
	uint32_t sign = (uint32_t)(bits & 0x8000u) << 16;
	uint32_t exponent = (bits >> 10) & 0x1fu;
	uint32_t mantissa = bits & 0x3ffu;

	if (exponent == 0x1f) {
		if (mantissa == 0)
			return ndet_float_from_bits(sign | 0x7f800000u);
		return ndet_float_from_bits(sign | 0x7fc00000u | (mantissa << 13));
	}
	if (exponent == 0) {
		if (mantissa == 0)
			return ndet_float_from_bits(sign);
		/*
		 * Half subnormal m * 2^-24 is a normal float: shift the leading one up to
		 * the implicit position, lowering the exponent by one per shift.
		 */
		int32_t unbiased = -14;

		while ((mantissa & 0x400u) == 0) {
			mantissa <<= 1;
			unbiased--;
		}
		mantissa &= 0x3ffu;
		return ndet_float_from_bits(sign | (uint32_t)(unbiased + 127) << 23 |
					    mantissa << 13);
	}
	return ndet_float_from_bits(sign | (exponent - 15 + 127) << 23 | mantissa << 13);
}

/*
 * Keep the top bits of `significand` above `shift`, rounding what is shifted out to
 * nearest, ties to the even kept value.  shift in [1, 31].
 */
static uint32_t ndet_shift_right_round_even(uint32_t significand, unsigned shift)
{
	uint32_t kept = significand >> shift;
	uint32_t rest = significand & ((1u << shift) - 1);
	uint32_t halfway = 1u << (shift - 1);

	if (rest > halfway || (rest == halfway && (kept & 1u)))
		kept++;
	return kept;
}

uint16_t ndet_float_to_half(float value)
{
	uint32_t bits = ndet_float_bits(value);
	uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
	uint32_t exponent = (bits >> 23) & 0xffu;
	uint32_t mantissa = bits & 0x7fffffu;

	if (exponent == 0xff) {
		if (mantissa == 0)
			return sign | 0x7c00u;
		return sign | 0x7e00u | (uint16_t)(mantissa >> 13);
	}
	/* Float subnormals are below 2^-126, far under half's smallest subnormal / 2. */
	if (exponent == 0)
		return sign;

	int32_t unbiased = (int32_t)exponent - 127;
	uint32_t significand = mantissa | 0x800000u; /* 24 bits, value * 2^(23 - unbiased) */

	if (unbiased > 15)
		return sign | 0x7c00u;
	if (unbiased >= -14) {
		/*
		 * Normal half: keep 11 of the 24 significand bits.  Adding the rounded
		 * significand to the exponent field lets a carry out of the mantissa
		 * bump the exponent, up to infinity (0x7c00) above 65504 + 16.
		 */
		uint32_t rounded = ndet_shift_right_round_even(significand, 13);

		return sign | (uint16_t)(((uint32_t)(unbiased + 14) << 10) + rounded);
	}
	/*
	 * Subnormal half: the result counts units of 2^-24, i.e. significand *
	 * 2^(unbiased + 1).  Below 2^-25 everything rounds to zero (2^-25 itself is a tie
	 * and goes to the even zero).  A carry to 0x400 is the smallest normal, correct.
	 */
	unsigned shift = (unsigned)(-(unbiased + 1));

	if (shift > 24)
		return sign;
	return sign | (uint16_t)ndet_shift_right_round_even(significand, shift);
}

float ndet_bfloat16_to_float(uint16_t bits)
{
	uint32_t wide = (uint32_t)bits << 16;

	if ((wide & 0x7f800000u) == 0x7f800000u && (wide & 0x7fffffu) != 0)
		wide |= 0x00400000u;
	return ndet_float_from_bits(wide);
}

uint16_t ndet_float_to_bfloat16(float value)
{
	uint32_t bits = ndet_float_bits(value);

	if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x7fffffu) != 0)
		return (uint16_t)((bits >> 16) | 0x0040u);
	/*
	 * bfloat16 is the top half of a float, so subnormals need no special case, and a
	 * carry out of the mantissa bumps the exponent, up to infinity.
	 */
	return (uint16_t)ndet_shift_right_round_even(bits & 0x7fffffffu, 16) |
	       (uint16_t)((bits >> 16) & 0x8000u);
}

/*
 * fp8.  The two formats differ in field widths and in what lies above the largest
 * finite pattern (E5M2: inf and NaNs, IEEE-like; E4M3: the one NaN S.1111.111, the
 * rest of its top exponent being normal numbers), so one decoder and one encoder take
 * a description of the format.
 */
struct ndet_fp8_format {
	unsigned mantissa_bits;
	int bias;
	uint8_t largest;   /* largest finite magnitude: every pattern above is inf or NaN */
	uint8_t nan;       /* the NaN a NaN input becomes (the sign is added) */
	bool has_infinity; /* the pattern just above `largest`, with mantissa 0, is inf */
};

static const struct ndet_fp8_format ndet_fp8_e4m3 = {
	.mantissa_bits = 3, .bias = 7, .largest = 0x7e, .nan = 0x7f, .has_infinity = false};
static const struct ndet_fp8_format ndet_fp8_e5m2 = {
	.mantissa_bits = 2, .bias = 15, .largest = 0x7b, .nan = 0x7e, .has_infinity = true};

static float ndet_fp8_to_float(uint8_t bits, const struct ndet_fp8_format *format)
{
	const unsigned mantissa_bits = format->mantissa_bits;
	uint32_t sign = (uint32_t)(bits & 0x80u) << 24;
	uint32_t magnitude = bits & 0x7fu;
	uint32_t exponent = magnitude >> mantissa_bits;
	uint32_t mantissa = magnitude & ((1u << mantissa_bits) - 1);

	if (magnitude > format->largest) {
		if (format->has_infinity && mantissa == 0)
			return ndet_float_from_bits(sign | 0x7f800000u);
		return ndet_float_from_bits(sign | 0x7fc00000u);
	}
	if (exponent == 0) {
		if (mantissa == 0)
			return ndet_float_from_bits(sign);
		/* m * 2^(1 - bias - mantissa_bits) is a normal float: normalise it. */
		int32_t unbiased = 1 - format->bias;

		while ((mantissa & (1u << mantissa_bits)) == 0) {
			mantissa <<= 1;
			unbiased--;
		}
		mantissa &= (1u << mantissa_bits) - 1;
		return ndet_float_from_bits(sign | (uint32_t)(unbiased + 127) << 23 |
					    mantissa << (23 - mantissa_bits));
	}
	return ndet_float_from_bits(sign |
				    (uint32_t)((int32_t)exponent - format->bias + 127) << 23 |
				    mantissa << (23 - mantissa_bits));
}

/*
 * Round to nearest even, saturating finite values: NCCL converts its fp8 results with
 * satfinite, so a finite value beyond the largest finite becomes the largest finite
 * (for E4M3 never the NaN pattern just above 448).  Infinity stays infinity where the
 * format has one (E5M2), as IEEE says and as a one-rank call (a copy) leaves it;
 * E4M3, which has none, saturates it too.
 */
static uint8_t ndet_float_to_fp8(float value, const struct ndet_fp8_format *format)
{
	const unsigned mantissa_bits = format->mantissa_bits;
	const int32_t largest_exponent = (int32_t)(format->largest >> mantissa_bits) - format->bias;
	uint32_t bits = ndet_float_bits(value);
	uint8_t sign = (uint8_t)((bits >> 24) & 0x80u);
	uint32_t exponent = (bits >> 23) & 0xffu;
	uint32_t mantissa = bits & 0x7fffffu;

	if (exponent == 0xff && mantissa != 0)
		return sign | format->nan;
	if (exponent == 0xff)
		return sign |
		       (format->has_infinity ? (uint8_t)(format->largest + 1) : format->largest);
	/* Float subnormals are below 2^-126, far under half of either smallest subnormal. */
	if (exponent == 0)
		return sign;

	int32_t unbiased = (int32_t)exponent - 127;
	uint32_t significand = mantissa | 0x800000u; /* 24 bits, value * 2^(23 - unbiased) */

	if (unbiased > largest_exponent)
		return sign | format->largest;
	if (unbiased >= 1 - format->bias) {
		/*
		 * Normal: keep 1 + mantissa_bits of the 24 significand bits.  Adding the
		 * rounded significand to the exponent field lets a carry bump the
		 * exponent; a result past the largest finite (E4M3's NaN pattern, E5M2's
		 * inf, or one exponent above) saturates.
		 */
		uint32_t rounded = ndet_shift_right_round_even(significand, 23 - mantissa_bits);
		uint32_t magnitude =
			((uint32_t)(unbiased + format->bias - 1) << mantissa_bits) + rounded;

		if (magnitude > format->largest)
			magnitude = format->largest;
		return sign | (uint8_t)magnitude;
	}
	/*
	 * Subnormal: the result counts units of 2^(1 - bias - mantissa_bits), i.e.
	 * significand * 2^(unbiased - 24 + bias + mantissa_bits).  With a shift past 24
	 * the value is below half a unit and rounds to zero; at 24 it lies in [1/2, 1)
	 * units, where exactly 1/2 is a tie that goes to the even zero.  A carry up to
	 * 1 << mantissa_bits is the smallest normal, correct.
	 */
	unsigned shift = (unsigned)(24 - format->bias - (int32_t)mantissa_bits - unbiased);

	if (shift > 24)
		return sign;
	return sign | (uint8_t)ndet_shift_right_round_even(significand, shift);
}

float ndet_fp8_e4m3_to_float(uint8_t bits)
{
	return ndet_fp8_to_float(bits, &ndet_fp8_e4m3);
}

uint8_t ndet_float_to_fp8_e4m3(float value)
{
	return ndet_float_to_fp8(value, &ndet_fp8_e4m3);
}

float ndet_fp8_e5m2_to_float(uint8_t bits)
{
	return ndet_fp8_to_float(bits, &ndet_fp8_e5m2);
}

uint8_t ndet_float_to_fp8_e5m2(float value)
{
	return ndet_float_to_fp8(value, &ndet_fp8_e5m2);
}

uint64_t ndet_reference_element_bits(ndet_dtype_t dtype, double value)
{
	const float narrow = (float)value;
	uint64_t bits = 0;
	switch (dtype) {
	case NDET_DTYPE_F64:
		memcpy(&bits, &value, sizeof(value));
		break;
	case NDET_DTYPE_F32:
		memcpy(&bits, &narrow, sizeof(narrow));
		break;
	case NDET_DTYPE_F16:
		bits = ndet_float_to_half(narrow);
		break;
	case NDET_DTYPE_BF16:
		bits = ndet_float_to_bfloat16(narrow);
		break;
	case NDET_DTYPE_F8E4M3:
		bits = ndet_float_to_fp8_e4m3(narrow);
		break;
	default:
		bits = ndet_float_to_fp8_e5m2(narrow);
		break;
	}
	return bits;
}

double ndet_reference_test_scalar(int rank)
{
	/* Two mantissa bits at most (fp8 e5m2's), magnitudes 1/8 to 3, all distinct. */
	static const double values[] = {0.75,   -1.5,  3.0,    1.25,    -0.5,  2.0,
					0.375,  -2.5,  1.75,   -0.625,  0.875, -0.3125,
					0.4375, -0.25, 0.1875, -0.21875};
	return values[rank % 16];
}

/*
 * Operators, one set per accumulation type.  min/max look only at values, never at
 * operand positions, so the bits of the result do not depend on operand order.
 */

static float ndet_min_float(float a, float b)
{
	if (isnan(a) && isnan(b))
		return NAN; /* one NaN for every order, whatever the payloads */
	if (isnan(a))
		return b;
	if (isnan(b))
		return a;
	if (a == b) /* equal values differ at most in the sign of zero */
		return signbit(a) ? a : b;
	return a < b ? a : b;
}

static float ndet_max_float(float a, float b)
{
	if (isnan(a) && isnan(b))
		return NAN; /* one NaN for every order, whatever the payloads */
	if (isnan(a))
		return b;
	if (isnan(b))
		return a;
	if (a == b)
		return signbit(a) ? b : a;
	return a > b ? a : b;
}

static float ndet_combine_float(float a, float b, ndet_op_t op)
{
	switch (op) {
	case NDET_OP_SUM:
	case NDET_OP_AVG:
		return a + b;
	case NDET_OP_PROD:
		return a * b;
	case NDET_OP_MIN:
		return ndet_min_float(a, b);
	case NDET_OP_MAX:
		return ndet_max_float(a, b);
	case NDET_OP_COUNT:
		break;
	}
	return NAN; /* unreachable: callers validate op */
}

static double ndet_min_double(double a, double b)
{
	if (isnan(a) && isnan(b))
		return NAN; /* one NaN for every order, whatever the payloads */
	if (isnan(a))
		return b;
	if (isnan(b))
		return a;
	if (a == b)
		return signbit(a) ? a : b;
	return a < b ? a : b;
}

static double ndet_max_double(double a, double b)
{
	if (isnan(a) && isnan(b))
		return NAN; /* one NaN for every order, whatever the payloads */
	if (isnan(a))
		return b;
	if (isnan(b))
		return a;
	if (a == b)
		return signbit(a) ? b : a;
	return a > b ? a : b;
}

static double ndet_combine_double(double a, double b, ndet_op_t op)
{
	switch (op) {
	case NDET_OP_SUM:
	case NDET_OP_AVG:
		return a + b;
	case NDET_OP_PROD:
		return a * b;
	case NDET_OP_MIN:
		return ndet_min_double(a, b);
	case NDET_OP_MAX:
		return ndet_max_double(a, b);
	case NDET_OP_COUNT:
		break;
	}
	return NAN;
}

/* Element i of one rank's input, widened exactly to f32 (every dtype but f64). */
static float ndet_load_float(const void *input, ndet_dtype_t dtype, size_t i)
{
	switch (dtype) {
	case NDET_DTYPE_F16:
		return ndet_half_to_float(((const uint16_t *)input)[i]);
	case NDET_DTYPE_BF16:
		return ndet_bfloat16_to_float(((const uint16_t *)input)[i]);
	case NDET_DTYPE_F8E4M3:
		return ndet_fp8_e4m3_to_float(((const uint8_t *)input)[i]);
	case NDET_DTYPE_F8E5M2:
		return ndet_fp8_e5m2_to_float(((const uint8_t *)input)[i]);
	default:
		return ((const float *)input)[i];
	}
}

/* The one rounding from the accumulation type to the output type. */
static void ndet_store_float(void *output, ndet_dtype_t dtype, size_t i, float value)
{
	switch (dtype) {
	case NDET_DTYPE_F16:
		((uint16_t *)output)[i] = ndet_float_to_half(value);
		break;
	case NDET_DTYPE_BF16:
		((uint16_t *)output)[i] = ndet_float_to_bfloat16(value);
		break;
	case NDET_DTYPE_F8E4M3:
		((uint8_t *)output)[i] = ndet_float_to_fp8_e4m3(value);
		break;
	case NDET_DTYPE_F8E5M2:
		((uint8_t *)output)[i] = ndet_float_to_fp8_e5m2(value);
		break;
	default:
		((float *)output)[i] = value;
		break;
	}
}

/*
 * `value` rounded to the storage type and widened back: what a node of
 * ndet_reference_allreduce_node_rounded passes on.
 */
static float ndet_round_float(float value, ndet_dtype_t dtype)
{
	switch (dtype) {
	case NDET_DTYPE_F16:
		return ndet_half_to_float(ndet_float_to_half(value));
	case NDET_DTYPE_BF16:
		return ndet_bfloat16_to_float(ndet_float_to_bfloat16(value));
	case NDET_DTYPE_F8E4M3:
		return ndet_fp8_e4m3_to_float(ndet_float_to_fp8_e4m3(value));
	case NDET_DTYPE_F8E5M2:
		return ndet_fp8_e5m2_to_float(ndet_float_to_fp8_e5m2(value));
	default:
		return value;
	}
}

/* The largest power of two strictly below m (m >= 2), written to avoid overflow. */
static int ndet_tree_left_size(int m)
{
	int p = 1;

	while (p <= (m - 1) / 2)
		p *= 2;
	return p;
}

/* The orders the reference evaluates: only the tree is the contract. */
enum ndet_reference_order {
	NDET_ORDER_TREE,
	NDET_ORDER_SEQUENTIAL,
	NDET_ORDER_TREE_NODE_ROUNDED,
};

/*
 * The ranks grouped by host: host after host in host order, ascending within a host,
 * so that host h's ranks are ranks[start[h]] ... ranks[start[h + 1] - 1].  One host
 * holding every rank in rank order is the single-host contract.
 */
struct ndet_host_groups {
	int nhosts;
	int *ranks; /* [nranks] */
	int *start; /* [nhosts + 1] */
};

/* One reduction: what each element combines, and in what order. */
struct ndet_reduction {
	const void *const *inputs;
	const void *scalars; /* PreMulSum: leaf r is x_r * scalars[r]; NULL otherwise */
	int nranks;
	ndet_dtype_t dtype;
	ndet_op_t op;
	enum ndet_reference_order order;
	struct ndet_host_groups hosts;
};

/*
 * The contract's T over the m values v[0 .. m): T(v, 1) = v[0], T(v, m) = T(v, p) (op)
 * T(v + p, m - p).  With round_nodes, every node's result is rounded to the storage
 * type (the tests' counterexample, never the contract).
 */
static float ndet_tree_float(const float *v, int m, ndet_dtype_t dtype, ndet_op_t op,
			     bool round_nodes)
{
	if (m == 1)
		return v[0];

	int p = ndet_tree_left_size(m);
	float left = ndet_tree_float(v, p, dtype, op, round_nodes);
	float right = ndet_tree_float(v + p, m - p, dtype, op, round_nodes);
	float value = ndet_combine_float(left, right, op);

	return round_nodes ? ndet_round_float(value, dtype) : value;
}

static double ndet_tree_double(const double *v, int m, ndet_op_t op)
{
	if (m == 1)
		return v[0];

	int p = ndet_tree_left_size(m);
	double left = ndet_tree_double(v, p, op);
	double right = ndet_tree_double(v + p, m - p, op);

	return ndet_combine_double(left, right, op);
}

static float ndet_sequential_float(const float *v, int m, ndet_op_t op)
{
	float accumulator = v[0];

	for (int k = 1; k < m; k++)
		accumulator = ndet_combine_float(accumulator, v[k], op);
	return accumulator;
}

static double ndet_sequential_double(const double *v, int m, ndet_op_t op)
{
	double accumulator = v[0];

	for (int k = 1; k < m; k++)
		accumulator = ndet_combine_double(accumulator, v[k], op);
	return accumulator;
}

/* One level (a host's ranks, or the hosts' partials) in the reduction's order. */
static float ndet_level_float(const struct ndet_reduction *red, const float *v, int m)
{
	if (red->order == NDET_ORDER_SEQUENTIAL)
		return ndet_sequential_float(v, m, red->op);
	return ndet_tree_float(v, m, red->dtype, red->op,
			       red->order == NDET_ORDER_TREE_NODE_ROUNDED);
}

static double ndet_level_double(const struct ndet_reduction *red, const double *v, int m)
{
	if (red->order == NDET_ORDER_SEQUENTIAL)
		return ndet_sequential_double(v, m, red->op);
	return ndet_tree_double(v, m, red->op);
}

/*
 * Leaf r of element i in the accumulation type: x_r[i] widened exactly, for PreMulSum
 * times s_r with one rounding there (exact for f16, bf16 and fp8).
 */
static float ndet_leaf_float(const struct ndet_reduction *red, int rank, size_t i)
{
	float x = ndet_load_float(red->inputs[rank], red->dtype, i);

	if (red->scalars == NULL)
		return x;
	return x * ndet_load_float(red->scalars, red->dtype, (size_t)rank);
}

static double ndet_leaf_double(const struct ndet_reduction *red, int rank, size_t i)
{
	double x = ((const double *)red->inputs[rank])[i];

	if (red->scalars == NULL)
		return x;
	return x * ((const double *)red->scalars)[rank];
}

/*
 * Element i before its one rounding: each host's tree over its leaves, then the tree
 * over the hosts' partials, all in the accumulation type; avg divides once, by the
 * number of ranks (g x H).  leaves and partials are scratch of nranks and nhosts.
 */
static float ndet_element_float(const struct ndet_reduction *red, size_t i, float *leaves,
				float *partials)
{
	const struct ndet_host_groups *hosts = &red->hosts;

	for (int k = 0; k < red->nranks; k++)
		leaves[k] = ndet_leaf_float(red, hosts->ranks[k], i);
	for (int h = 0; h < hosts->nhosts; h++)
		partials[h] = ndet_level_float(red, leaves + hosts->start[h],
					       hosts->start[h + 1] - hosts->start[h]);

	float value = ndet_level_float(red, partials, hosts->nhosts);

	/* n is exact in f32 for any n below 2^24. */
	return red->op == NDET_OP_AVG ? value / (float)red->nranks : value;
}

static double ndet_element_double(const struct ndet_reduction *red, size_t i, double *leaves,
				  double *partials)
{
	const struct ndet_host_groups *hosts = &red->hosts;

	for (int k = 0; k < red->nranks; k++)
		leaves[k] = ndet_leaf_double(red, hosts->ranks[k], i);
	for (int h = 0; h < hosts->nhosts; h++)
		partials[h] = ndet_level_double(red, leaves + hosts->start[h],
						hosts->start[h + 1] - hosts->start[h]);

	double value = ndet_level_double(red, partials, hosts->nhosts);

	return red->op == NDET_OP_AVG ? value / (double)red->nranks : value;
}

/*
 * Element i reads every input before it writes output[i], so an output that is one
 * of the inputs is fine.
 */
static ndet_status_t ndet_reduction_run(const struct ndet_reduction *red, void *output,
					size_t count)
{
	const int n = red->nranks, nhosts = red->hosts.nhosts;

	if (red->dtype == NDET_DTYPE_F64) {
		double *leaves = malloc((size_t)(n + nhosts) * sizeof(double));

		if (leaves == NULL)
			return NDET_ERR_SYSTEM;
		for (size_t i = 0; i < count; i++)
			((double *)output)[i] = ndet_element_double(red, i, leaves, leaves + n);
		free(leaves);
		return NDET_OK;
	}

	float *leaves = malloc((size_t)(n + nhosts) * sizeof(float));

	if (leaves == NULL)
		return NDET_ERR_SYSTEM;
	for (size_t i = 0; i < count; i++)
		ndet_store_float(output, red->dtype, i,
				 ndet_element_float(red, i, leaves, leaves + n));
	free(leaves);
	return NDET_OK;
}

/*
 * The number of hosts host_of numbers (NULL: every rank on host 0).  host_of must
 * number the hosts by their lowest rank: host_of[0] == 0 and each host_of[r] at most
 * one above every host_of before it.  false for any other numbering.
 */
static bool ndet_host_groups_count(const int *host_of, int nranks, int *nhosts)
{
	*nhosts = 0;
	for (int r = 0; r < nranks; r++) {
		int h = host_of == NULL ? 0 : host_of[r];

		if (h < 0 || h > *nhosts)
			return false;
		if (h == *nhosts)
			(*nhosts)++;
	}
	return true;
}

/* Fill hosts->ranks and hosts->start for the hosts->nhosts that host_of numbers. */
static ndet_status_t ndet_host_groups_fill(const int *host_of, int nranks,
					   struct ndet_host_groups *hosts)
{
	int k = 0;

	hosts->ranks = malloc((size_t)(nranks + hosts->nhosts + 1) * sizeof(int));
	if (hosts->ranks == NULL)
		return NDET_ERR_SYSTEM;
	hosts->start = hosts->ranks + nranks;
	for (int h = 0; h < hosts->nhosts; h++) {
		hosts->start[h] = k;
		for (int r = 0; r < nranks; r++)
			if (host_of == NULL || host_of[r] == h)
				hosts->ranks[k++] = r;
	}
	hosts->start[hosts->nhosts] = k;
	return NDET_OK;
}

static bool ndet_arguments_valid(const void *const *inputs, int nranks, const void *output,
				 size_t count, ndet_dtype_t dtype, ndet_op_t op)
{
	if (nranks < 1 || (unsigned)dtype >= NDET_DTYPE_COUNT || (unsigned)op >= NDET_OP_COUNT)
		return false;
	if (count == 0)
		return true;
	if (inputs == NULL || output == NULL)
		return false;
	for (int r = 0; r < nranks; r++)
		if (inputs[r] == NULL)
			return false;
	return true;
}

/*
 * Every reference: host_of NULL is one host; scalars non-NULL is PreMulSum (op sum).
 * The host numbering is checked even where count is 0.
 */
static ndet_status_t ndet_reference_reduce(const void *const *inputs, const void *scalars,
					   const int *host_of, int nranks, void *output,
					   size_t count, ndet_dtype_t dtype, ndet_op_t op,
					   enum ndet_reference_order order)
{
	struct ndet_reduction red = {.inputs = inputs,
				     .scalars = scalars,
				     .nranks = nranks,
				     .dtype = dtype,
				     .op = op,
				     .order = order};
	ndet_status_t status;

	if (!ndet_arguments_valid(inputs, nranks, output, count, dtype, op))
		return NDET_ERR_INVALID_ARGUMENT;
	if (!ndet_host_groups_count(host_of, nranks, &red.hosts.nhosts))
		return NDET_ERR_INVALID_ARGUMENT;
	if (count == 0)
		return NDET_OK;
	status = ndet_host_groups_fill(host_of, nranks, &red.hosts);
	if (status != NDET_OK)
		return status;
	status = ndet_reduction_run(&red, output, count);
	free(red.hosts.ranks);
	return status;
}

ndet_status_t ndet_reference_allreduce(const void *const *inputs, int nranks, void *output,
				       size_t count, ndet_dtype_t dtype, ndet_op_t op)
{
	return ndet_reference_reduce(inputs, NULL, NULL, nranks, output, count, dtype, op,
				     NDET_ORDER_TREE);
}

ndet_status_t ndet_reference_allreduce_sequential(const void *const *inputs, int nranks,
						  void *output, size_t count, ndet_dtype_t dtype,
						  ndet_op_t op)
{
	return ndet_reference_reduce(inputs, NULL, NULL, nranks, output, count, dtype, op,
				     NDET_ORDER_SEQUENTIAL);
}

ndet_status_t ndet_reference_allreduce_node_rounded(const void *const *inputs, int nranks,
						    void *output, size_t count, ndet_dtype_t dtype,
						    ndet_op_t op)
{
	return ndet_reference_reduce(inputs, NULL, NULL, nranks, output, count, dtype, op,
				     NDET_ORDER_TREE_NODE_ROUNDED);
}

ndet_status_t ndet_reference_allreduce_hosts(const void *const *inputs, const int *host_of,
					     int nranks, void *output, size_t count,
					     ndet_dtype_t dtype, ndet_op_t op)
{
	if (host_of == NULL)
		return NDET_ERR_INVALID_ARGUMENT;
	return ndet_reference_reduce(inputs, NULL, host_of, nranks, output, count, dtype, op,
				     NDET_ORDER_TREE);
}

ndet_status_t ndet_reference_premulsum(const void *const *inputs, const void *scalars, int nranks,
				       void *output, size_t count, ndet_dtype_t dtype)
{
	if (scalars == NULL)
		return NDET_ERR_INVALID_ARGUMENT;
	return ndet_reference_reduce(inputs, scalars, NULL, nranks, output, count, dtype,
				     NDET_OP_SUM, NDET_ORDER_TREE);
}

ndet_status_t ndet_reference_premulsum_hosts(const void *const *inputs, const void *scalars,
					     const int *host_of, int nranks, void *output,
					     size_t count, ndet_dtype_t dtype)
{
	if (scalars == NULL || host_of == NULL)
		return NDET_ERR_INVALID_ARGUMENT;
	return ndet_reference_reduce(inputs, scalars, host_of, nranks, output, count, dtype,
				     NDET_OP_SUM, NDET_ORDER_TREE);
}

/*
 * Reduce-scatter: block `rank` of every input, reduced like the all-reduce (host_of
 * NULL: one host), is block `rank` of the all-reduce.
 */
static ndet_status_t ndet_reference_block(const void *const *inputs, const int *host_of, int nranks,
					  int rank, void *output, size_t recvcount,
					  ndet_dtype_t dtype, ndet_op_t op)
{
	const void *shifted[NDET_REFERENCE_MAX_RANKS];
	const size_t size = ndet_dtype_size(dtype);

	if (nranks < 1 || nranks > NDET_REFERENCE_MAX_RANKS || rank < 0 || rank >= nranks ||
	    size == 0 || (recvcount > 0 && inputs == NULL))
		return NDET_ERR_INVALID_ARGUMENT;
	for (int r = 0; r < nranks && recvcount > 0; r++) {
		if (inputs[r] == NULL)
			return NDET_ERR_INVALID_ARGUMENT;
		shifted[r] = (const char *)inputs[r] + (size_t)rank * recvcount * size;
	}
	return ndet_reference_reduce(shifted, NULL, host_of, nranks, output, recvcount, dtype, op,
				     NDET_ORDER_TREE);
}

ndet_status_t ndet_reference_reduce_scatter(const void *const *inputs, int nranks, int rank,
					    void *output, size_t recvcount, ndet_dtype_t dtype,
					    ndet_op_t op)
{
	return ndet_reference_block(inputs, NULL, nranks, rank, output, recvcount, dtype, op);
}

ndet_status_t ndet_reference_reduce_scatter_hosts(const void *const *inputs, const int *host_of,
						  int nranks, int rank, void *output,
						  size_t recvcount, ndet_dtype_t dtype,
						  ndet_op_t op)
{
	if (host_of == NULL)
		return NDET_ERR_INVALID_ARGUMENT;
	return ndet_reference_block(inputs, host_of, nranks, rank, output, recvcount, dtype, op);
}

/* ---------------------------------------------------------------- host stages */

/* Is partial_size one a partial of dtype may travel in? */
static bool ndet_partial_size_valid(ndet_dtype_t dtype, uint32_t partial_size)
{
	const uint32_t accumulation = dtype == NDET_DTYPE_F64 ? 8u : 4u;
	return partial_size == accumulation || partial_size == (uint32_t)ndet_dtype_size(dtype);
}

/* Partial element i in the accumulation type (f32 here; f64 partials elsewhere). */
static float ndet_partial_load_float(const void *partial, ndet_dtype_t dtype, uint32_t partial_size,
				     size_t i)
{
	if (partial_size == 4)
		return ((const float *)partial)[i];
	return ndet_load_float(partial, dtype, i);
}

static void ndet_partial_store_float(void *partial, ndet_dtype_t dtype, uint32_t partial_size,
				     size_t i, float value)
{
	if (partial_size == 4)
		((float *)partial)[i] = value;
	else /* exact: min, max, or one rank's own element */
		ndet_store_float(partial, dtype, i, value);
}

/*
 * One stage over m values per element: the leaves of a host's ranks into a partial
 * (`combine` false: no division, the partial type), or the hosts' partials into the
 * output (`combine`: avg divides by red->nranks, one rounding to the data type).
 */
static ndet_status_t ndet_stage_run(const struct ndet_reduction *red, int m, bool combine,
				    uint32_t partial_size, void *output, size_t count)
{
	const bool avg = combine && red->op == NDET_OP_AVG;
	if (red->dtype == NDET_DTYPE_F64) {
		double *v = malloc((size_t)m * sizeof(double));
		if (v == NULL)
			return NDET_ERR_SYSTEM;
		for (size_t i = 0; i < count; i++) {
			for (int k = 0; k < m; k++)
				v[k] = combine ? ((const double *)red->inputs[k])[i]
					       : ndet_leaf_double(red, k, i);
			const double value = ndet_level_double(red, v, m);
			((double *)output)[i] = avg ? value / (double)red->nranks : value;
		}
		free(v);
		return NDET_OK;
	}
	float *v = malloc((size_t)m * sizeof(float));
	if (v == NULL)
		return NDET_ERR_SYSTEM;
	for (size_t i = 0; i < count; i++) {
		for (int k = 0; k < m; k++)
			v[k] = combine ? ndet_partial_load_float(red->inputs[k], red->dtype,
								 partial_size, i)
				       : ndet_leaf_float(red, k, i);
		const float value = ndet_level_float(red, v, m);
		/* n is exact in f32 for any n below 2^24. */
		if (combine)
			ndet_store_float(output, red->dtype, i,
					 avg ? value / (float)red->nranks : value);
		else
			ndet_partial_store_float(output, red->dtype, partial_size, i, value);
	}
	free(v);
	return NDET_OK;
}

ndet_status_t ndet_reference_hosts_partial(const void *const *inputs, const void *scalars,
					   int local_ranks, void *partial, size_t count,
					   ndet_dtype_t dtype, ndet_op_t op, uint32_t partial_size)
{
	if (!ndet_arguments_valid(inputs, local_ranks, partial, count, dtype, op) ||
	    !ndet_partial_size_valid(dtype, partial_size))
		return NDET_ERR_INVALID_ARGUMENT;
	const struct ndet_reduction red = {.inputs = inputs,
					   .scalars = scalars,
					   .nranks = local_ranks,
					   .dtype = dtype,
					   .op = scalars != NULL ? NDET_OP_SUM : op,
					   .order = NDET_ORDER_TREE};
	return count == 0 ? NDET_OK
			  : ndet_stage_run(&red, local_ranks, false, partial_size, partial, count);
}

ndet_status_t ndet_reference_hosts_combine(const void *const *partials, int nhosts,
					   uint32_t partial_size, int nranks, void *output,
					   size_t count, ndet_dtype_t dtype, ndet_op_t op)
{
	if (!ndet_arguments_valid(partials, nhosts, output, count, dtype, op) || nranks < nhosts ||
	    !ndet_partial_size_valid(dtype, partial_size))
		return NDET_ERR_INVALID_ARGUMENT;
	const struct ndet_reduction red = {.inputs = partials,
					   .nranks = nranks,
					   .dtype = dtype,
					   .op = op,
					   .order = NDET_ORDER_TREE};
	return count == 0 ? NDET_OK
			  : ndet_stage_run(&red, nhosts, true, partial_size, output, count);
}

/* snprintf-style text accumulation: counts the full length, writes what fits. */
struct ndet_text {
	char *buffer;
	size_t size;
	size_t length;
};

static void ndet_text_append(struct ndet_text *text, const char *piece)
{
	for (const char *c = piece; *c != '\0'; c++) {
		if (text->length + 1 < text->size)
			text->buffer[text->length] = *c;
		text->length++;
	}
}

static void ndet_tree_text(struct ndet_text *text, int lo, int m)
{
	if (m == 1) {
		char number[16];

		snprintf(number, sizeof(number), "%d", lo);
		ndet_text_append(text, number);
		return;
	}

	int p = ndet_tree_left_size(m);

	ndet_text_append(text, "(");
	ndet_tree_text(text, lo, p);
	ndet_text_append(text, "+");
	ndet_tree_text(text, lo + p, m - p);
	ndet_text_append(text, ")");
}

int ndet_reference_tree_string(int nranks, char *buffer, size_t buffer_size)
{
	struct ndet_text text = {.buffer = buffer, .size = buffer == NULL ? 0 : buffer_size};

	if (text.size > 0)
		buffer[0] = '\0';
	if (nranks < 1)
		return -1;
	ndet_tree_text(&text, 0, nranks);
	if (text.size > 0)
		buffer[text.length < text.size ? text.length : text.size - 1] = '\0';
	return (int)text.length;
}
