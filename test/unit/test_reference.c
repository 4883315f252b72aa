/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The CPU reference against hand-computed values, an independent reading of its own
 * tree string, GCC's _Float16 (allowed here, never in the library) and a slow
 * bfloat16 rounding written from the definition.
 */
#include "config.h"

#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "reference/ndet_reference.h"
#include "test/support/ndet_test_data.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static uint32_t float_bits(float value)
{
	uint32_t bits;

	memcpy(&bits, &value, sizeof(bits));
	return bits;
}

static float float_from_bits(uint32_t bits)
{
	float value;

	memcpy(&value, &bits, sizeof(value));
	return value;
}

static uint64_t double_bits(double value)
{
	uint64_t bits;

	memcpy(&bits, &value, sizeof(bits));
	return bits;
}

static uint16_t gcc_float_to_half(float value)
{
	_Float16 half = (_Float16)value;
	uint16_t bits;

	memcpy(&bits, &half, sizeof(bits));
	return bits;
}

static float gcc_half_to_float(uint16_t bits)
{
	_Float16 half;

	memcpy(&half, &bits, sizeof(half));
	return (float)half;
}

static int half_is_nan(uint16_t bits)
{
	return (bits & 0x7c00u) == 0x7c00u && (bits & 0x3ffu) != 0;
}

static int bfloat16_is_nan(uint16_t bits)
{
	return (bits & 0x7f80u) == 0x7f80u && (bits & 0x7fu) != 0;
}

/* One element per rank: inputs[r] points at values + r * element size. */
static void reduce_one(ndet_dtype_t dtype, ndet_op_t op, int nranks, const void *values, void *tree,
		       void *sequential)
{
	const void *inputs[64];
	size_t size = ndet_dtype_size(dtype);

	assert_true(nranks <= (int)ARRAY_SIZE(inputs));
	for (int r = 0; r < nranks; r++)
		inputs[r] = (const char *)values + (size_t)r * size;
	assert_int_equal(ndet_reference_allreduce(inputs, nranks, tree, 1, dtype, op), NDET_OK);
	if (sequential != NULL)
		assert_int_equal(ndet_reference_allreduce_sequential(inputs, nranks, sequential, 1,
								     dtype, op),
				 NDET_OK);
}

static float tree_f32(ndet_op_t op, int nranks, const float *values)
{
	float result;

	reduce_one(NDET_DTYPE_F32, op, nranks, values, &result, NULL);
	return result;
}

static float sequential_f32(ndet_op_t op, int nranks, const float *values)
{
	float tree, sequential;

	reduce_one(NDET_DTYPE_F32, op, nranks, values, &tree, &sequential);
	return sequential;
}

static uint16_t tree_16(ndet_dtype_t dtype, ndet_op_t op, int nranks, const uint16_t *values)
{
	uint16_t result;

	reduce_one(dtype, op, nranks, values, &result, NULL);
	return result;
}

static double tree_f64(ndet_op_t op, int nranks, const double *values)
{
	double result;

	reduce_one(NDET_DTYPE_F64, op, nranks, values, &result, NULL);
	return result;
}

/*
 * Slow rounding of a float to a 16-bit format, from the definition: find the two
 * neighbours by search over the format's magnitudes (decoded independently by the
 * test data library), pick the nearer, ties to the even pattern; a value past the
 * largest finite rounds as if the exponent went on, and that next value is infinity.
 */
static uint16_t slow_round_to_16(ndet_dtype_t dtype, float value)
{
	uint16_t largest_finite = dtype == NDET_DTYPE_F16 ? 0x7bff : 0x7f7f;
	double beyond_largest = dtype == NDET_DTYPE_F16 ? 65536.0 : ldexp(1.0, 128);
	uint16_t sign = signbit(value) ? 0x8000 : 0;
	double magnitude = fabs((double)value);

	if (isnan(value))
		return (uint16_t)(sign | largest_finite | 0x7fff); /* some NaN */
	if (isinf(value))
		return (uint16_t)(sign | (largest_finite + 1));

	/* Largest pattern whose value is <= magnitude. */
	uint16_t low = 0, high = largest_finite;

	while (low < high) {
		uint16_t middle = (uint16_t)(low + (high - low + 1) / 2);

		if (ndet_test_element_to_double(dtype, &middle, 0) <= magnitude)
			low = middle;
		else
			high = (uint16_t)(middle - 1);
	}

	uint16_t above_pattern = (uint16_t)(low + 1);
	double below = ndet_test_element_to_double(dtype, &low, 0);
	double above = low == largest_finite
			       ? beyond_largest
			       : ndet_test_element_to_double(dtype, &above_pattern, 0);
	uint16_t pick;

	/* 2 * magnitude and below + above are exact in double. */
	if (2 * magnitude < below + above)
		pick = low;
	else if (2 * magnitude > below + above)
		pick = above_pattern;
	else
		pick = (low & 1) ? above_pattern : low;
	return (uint16_t)(sign | pick);
}

/* ---------------------------------------------------------------- fp8 helpers */

/*
 * The two fp8 formats, described here independently of the library and of the test
 * data: OCP E4M3 ("FN": no inf, NaN only S.1111.111) and OCP E5M2 (IEEE-like).
 */
struct fp8_spec {
	ndet_dtype_t dtype;
	int exponent_bits, mantissa_bits, bias;
	uint8_t largest; /* largest finite magnitude pattern */
	int has_infinity;
	float (*decode)(uint8_t bits);
	uint8_t (*encode)(float value);
};

static const struct fp8_spec fp8_specs[] = {
	{NDET_DTYPE_F8E4M3, 4, 3, 7, 0x7e, 0, ndet_fp8_e4m3_to_float, ndet_float_to_fp8_e4m3},
	{NDET_DTYPE_F8E5M2, 5, 2, 15, 0x7b, 1, ndet_fp8_e5m2_to_float, ndet_float_to_fp8_e5m2},
};

static const struct fp8_spec *fp8_spec_of(ndet_dtype_t dtype)
{
	return dtype == NDET_DTYPE_F8E4M3 ? &fp8_specs[0] : &fp8_specs[1];
}

/* sign * 2^(e - bias) * (1 + m / 2^k), straight from the definition, with pow(). */
static double slow_fp8_formula(const struct fp8_spec *f, uint8_t bits)
{
	int top = (1 << f->exponent_bits) - 1;
	int all_mantissa = (1 << f->mantissa_bits) - 1;
	int e = (bits >> f->mantissa_bits) & top;
	int m = bits & all_mantissa;
	double fraction = m / pow(2.0, f->mantissa_bits);
	double magnitude;

	if (f->has_infinity && e == top)
		magnitude = m == 0 ? INFINITY : NAN;
	else if (!f->has_infinity && e == top && m == all_mantissa)
		magnitude = NAN;
	else if (e == 0)
		magnitude = pow(2.0, 1 - f->bias) * fraction;
	else
		magnitude = pow(2.0, e - f->bias) * (1 + fraction);
	return (bits & 0x80) ? -magnitude : magnitude;
}

/*
 * The formula's value, computed once per pattern: the rounding checks search these
 * values hundreds of thousands of times, and pow() each time made test_reference take
 * minutes under valgrind (.ci/run).
 */
static double slow_fp8_value(const struct fp8_spec *f, uint8_t bits)
{
	static double values[ARRAY_SIZE(fp8_specs)][256];
	static int known[ARRAY_SIZE(fp8_specs)];
	const size_t k = (size_t)(f - fp8_specs);

	if (!known[k]) {
		for (uint32_t b = 0; b <= 0xff; b++)
			values[k][b] = slow_fp8_formula(f, (uint8_t)b);
		known[k] = 1;
	}
	return values[k][bits];
}

static int fp8_is_nan(ndet_dtype_t dtype, uint8_t bits)
{
	return isnan(slow_fp8_value(fp8_spec_of(dtype), bits));
}

/*
 * Slow rounding of a float to fp8 from the definition: nearest of the non-negative
 * finite values (decoded by the formula above), ties to the even pattern, the sign
 * put back.  Saturating: with round-to-nearest every magnitude from the largest
 * finite up (inf included) lands on the largest finite or would overflow, and
 * overflow saturates to it as well.
 */
static uint8_t slow_round_to_fp8(ndet_dtype_t dtype, float value)
{
	const struct fp8_spec *f = fp8_spec_of(dtype);
	uint8_t sign = signbit(value) ? 0x80 : 0;
	double magnitude = fabs((double)value);

	if (isnan(value))
		return (uint8_t)(sign | 0x7f); /* a NaN in both formats */
	if (isinf(value) && f->has_infinity)
		return (uint8_t)(sign | (f->largest + 1));
	if (magnitude >= slow_fp8_value(f, f->largest))
		return (uint8_t)(sign | f->largest);

	/* Largest pattern whose value is <= magnitude (values grow with the pattern). */
	uint8_t low = 0;

	while (slow_fp8_value(f, (uint8_t)(low + 1)) <= magnitude)
		low++;

	double below = slow_fp8_value(f, low);
	double above = slow_fp8_value(f, (uint8_t)(low + 1));
	uint8_t pick;

	/* 2 * magnitude and below + above are exact in double. */
	if (2 * magnitude < below + above)
		pick = low;
	else if (2 * magnitude > below + above)
		pick = (uint8_t)(low + 1);
	else
		pick = (low & 1) ? (uint8_t)(low + 1) : low;
	return (uint8_t)(sign | pick);
}

/* The value of a slowly rounded float, as a node of the per-node rounding passes it on. */
static float slow_fp8_node(ndet_dtype_t dtype, float value)
{
	return (float)slow_fp8_value(fp8_spec_of(dtype), slow_round_to_fp8(dtype, value));
}

static void reduce_one_node_rounded(ndet_dtype_t dtype, ndet_op_t op, int nranks,
				    const void *values, void *result)
{
	const void *inputs[64];
	size_t size = ndet_dtype_size(dtype);

	assert_true(nranks <= (int)ARRAY_SIZE(inputs));
	for (int r = 0; r < nranks; r++)
		inputs[r] = (const char *)values + (size_t)r * size;
	assert_int_equal(
		ndet_reference_allreduce_node_rounded(inputs, nranks, result, 1, dtype, op),
		NDET_OK);
}

static uint8_t tree_8(ndet_dtype_t dtype, ndet_op_t op, int nranks, const uint8_t *values)
{
	uint8_t result;

	reduce_one(dtype, op, nranks, values, &result, NULL);
	return result;
}

/* Two ranks, one element each. */
static uint8_t pair_8(ndet_dtype_t dtype, ndet_op_t op, uint8_t a, uint8_t b)
{
	const uint8_t values[2] = {a, b};

	return tree_8(dtype, op, 2, values);
}

static uint8_t sequential_8(ndet_dtype_t dtype, ndet_op_t op, int nranks, const uint8_t *values)
{
	uint8_t tree, sequential;

	reduce_one(dtype, op, nranks, values, &tree, &sequential);
	return sequential;
}

static uint8_t node_rounded_8(ndet_dtype_t dtype, ndet_op_t op, int nranks, const uint8_t *values)
{
	uint8_t result;

	reduce_one_node_rounded(dtype, op, nranks, values, &result);
	return result;
}

static uint64_t next_random(uint64_t *state)
{
	/* xorshift64*: any fixed generator will do; only coverage matters. */
	*state ^= *state >> 12;
	*state ^= *state << 25;
	*state ^= *state >> 27;
	return *state * 0x2545f4914f6cdd1dull;
}

/* ---------------------------------------------------------------- names, sizes */

static void test_dtype_sizes_and_names(void **state)
{
	(void)state;
	assert_int_equal(ndet_dtype_size(NDET_DTYPE_F32), 4);
	assert_int_equal(ndet_dtype_size(NDET_DTYPE_F16), 2);
	assert_int_equal(ndet_dtype_size(NDET_DTYPE_BF16), 2);
	assert_int_equal(ndet_dtype_size(NDET_DTYPE_F64), 8);
	assert_int_equal(ndet_dtype_size(NDET_DTYPE_F8E4M3), 1);
	assert_int_equal(ndet_dtype_size(NDET_DTYPE_F8E5M2), 1);
	assert_int_equal(ndet_dtype_size(NDET_DTYPE_COUNT), 0);
	assert_int_equal(ndet_dtype_size((ndet_dtype_t)-1), 0);
	assert_string_equal(ndet_dtype_name(NDET_DTYPE_F32), "f32");
	assert_string_equal(ndet_dtype_name(NDET_DTYPE_F16), "f16");
	assert_string_equal(ndet_dtype_name(NDET_DTYPE_BF16), "bf16");
	assert_string_equal(ndet_dtype_name(NDET_DTYPE_F64), "f64");
	assert_string_equal(ndet_dtype_name(NDET_DTYPE_F8E4M3), "f8e4m3");
	assert_string_equal(ndet_dtype_name(NDET_DTYPE_F8E5M2), "f8e5m2");
	/* Every dtype has a size and a name of its own. */
	for (ndet_dtype_t dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
		assert_true(ndet_dtype_size(dtype) > 0);
		assert_string_not_equal(ndet_dtype_name(dtype), "invalid-dtype");
		for (ndet_dtype_t other = 0; other < dtype; other++)
			assert_string_not_equal(ndet_dtype_name(dtype), ndet_dtype_name(other));
	}
	assert_non_null(ndet_dtype_name(NDET_DTYPE_COUNT));
	assert_string_equal(ndet_op_name(NDET_OP_SUM), "sum");
	assert_string_equal(ndet_op_name(NDET_OP_PROD), "prod");
	assert_string_equal(ndet_op_name(NDET_OP_MIN), "min");
	assert_string_equal(ndet_op_name(NDET_OP_MAX), "max");
	assert_string_equal(ndet_op_name(NDET_OP_AVG), "avg");
	assert_non_null(ndet_op_name((ndet_op_t)99));
}

/* ---------------------------------------------------------------- tree shape */

static void test_tree_string_hand_written(void **state)
{
	(void)state;
	static const struct {
		int nranks;
		const char *text;
	} cases[] = {
		{1, "0"},
		{2, "(0+1)"},
		{3, "((0+1)+2)"},
		{4, "((0+1)+(2+3))"},
		{5, "(((0+1)+(2+3))+4)"},
		{6, "(((0+1)+(2+3))+(4+5))"},
		{7, "(((0+1)+(2+3))+((4+5)+6))"},
		{8, "(((0+1)+(2+3))+((4+5)+(6+7)))"},
		{9, "((((0+1)+(2+3))+((4+5)+(6+7)))+8)"},
		{10, "((((0+1)+(2+3))+((4+5)+(6+7)))+(8+9))"},
		{11, "((((0+1)+(2+3))+((4+5)+(6+7)))+((8+9)+10))"},
		{12, "((((0+1)+(2+3))+((4+5)+(6+7)))+((8+9)+(10+11)))"},
		{13, "((((0+1)+(2+3))+((4+5)+(6+7)))+(((8+9)+(10+11))+12))"},
		{14, "((((0+1)+(2+3))+((4+5)+(6+7)))+(((8+9)+(10+11))+(12+13)))"},
		{15, "((((0+1)+(2+3))+((4+5)+(6+7)))+(((8+9)+(10+11))+((12+13)+14)))"},
		{16, "((((0+1)+(2+3))+((4+5)+(6+7)))+(((8+9)+(10+11))+((12+13)+(14+15))))"},
	};
	char text[256];

	for (size_t c = 0; c < ARRAY_SIZE(cases); c++) {
		int length = ndet_reference_tree_string(cases[c].nranks, text, sizeof(text));

		assert_string_equal(text, cases[c].text);
		assert_int_equal(length, (int)strlen(cases[c].text));
	}
}

static void test_tree_string_truncates_like_snprintf(void **state)
{
	(void)state;
	char text[8];

	memset(text, 'x', sizeof(text));
	assert_int_equal(ndet_reference_tree_string(3, text, sizeof(text)), 9);
	assert_string_equal(text, "((0+1)+");
	assert_int_equal(ndet_reference_tree_string(3, NULL, 0), 9);
	assert_int_equal(ndet_reference_tree_string(0, text, sizeof(text)), -1);
	assert_string_equal(text, "");
	assert_int_equal(ndet_reference_tree_string(-3, text, sizeof(text)), -1);
}

/* A tree read back from its string: node := rank | "(" node "+" node ")". */
struct parsed_node {
	int leaf; /* rank for a leaf, -1 for an inner node */
	int left, right;
	int first, size; /* ranks covered */
};

struct tree_parser {
	const char *text;
	size_t position;
	struct parsed_node nodes[256];
	int node_count;
	int next_rank;
};

static int parse_node(struct tree_parser *parser)
{
	assert_true(parser->node_count < (int)ARRAY_SIZE(parser->nodes));

	int index = parser->node_count++;
	struct parsed_node *node = &parser->nodes[index];
	const char *c = &parser->text[parser->position];

	if (*c == '(') {
		parser->position++;
		int left = parse_node(parser);

		assert_int_equal(parser->text[parser->position], '+');
		parser->position++;
		int right = parse_node(parser);

		assert_int_equal(parser->text[parser->position], ')');
		parser->position++;
		node = &parser->nodes[index];
		node->leaf = -1;
		node->left = left;
		node->right = right;
		node->first = parser->nodes[left].first;
		node->size = parser->nodes[left].size + parser->nodes[right].size;
		return index;
	}
	assert_true(*c >= '0' && *c <= '9');

	char *end;
	long rank = strtol(c, &end, 10);

	parser->position += (size_t)(end - c);
	/* Every rank once, in rank order. */
	assert_int_equal(rank, parser->next_rank);
	parser->next_rank++;
	node->leaf = (int)rank;
	node->first = (int)rank;
	node->size = 1;
	return index;
}

static float evaluate_parsed_sum(const struct tree_parser *parser, int index, const float *x)
{
	const struct parsed_node *node = &parser->nodes[index];

	if (node->leaf >= 0)
		return x[node->leaf];
	float left = evaluate_parsed_sum(parser, node->left, x);
	float right = evaluate_parsed_sum(parser, node->right, x);

	return left + right;
}

static void test_tree_string_structure_for_every_n(void **state)
{
	(void)state;
	for (int n = 1; n <= 64; n++) {
		char text[1024];
		struct tree_parser parser = {.text = text};

		int length = ndet_reference_tree_string(n, text, sizeof(text));

		assert_true(length > 0 && length < (int)sizeof(text));
		assert_int_equal(parse_node(&parser), 0);
		assert_int_equal(parser.position, strlen(text));
		assert_int_equal(parser.next_rank, n);
		assert_int_equal(parser.node_count, 2 * n - 1);
		for (int k = 0; k < parser.node_count; k++) {
			const struct parsed_node *node = &parser.nodes[k];

			if (node->leaf >= 0)
				continue;
			int p = parser.nodes[node->left].size;

			/* p is the largest power of two below the node's size m. */
			assert_true((p & (p - 1)) == 0);
			assert_true(p < node->size && node->size <= 2 * p);
		}
	}
}

/* The evaluation follows the tree it prints: checked bit for bit for every n <= 16. */
static void test_tree_evaluation_matches_tree_string(void **state)
{
	(void)state;
	enum { count = 2048 };
	static float data[NDET_MAX_RANKS][count];
	static float result[count];

	for (int n = 1; n <= NDET_MAX_RANKS; n++) {
		char text[256];
		struct tree_parser parser = {.text = text};
		const void *inputs[NDET_MAX_RANKS];

		ndet_reference_tree_string(n, text, sizeof(text));
		parse_node(&parser);
		for (int r = 0; r < n; r++) {
			ndet_test_fill_rank(NDET_DTYPE_F32, data[r], 0, count, 7, r, n,
					    NDET_TEST_DATA_CANCEL);
			inputs[r] = data[r];
		}
		assert_int_equal(ndet_reference_allreduce(inputs, n, result, count, NDET_DTYPE_F32,
							  NDET_OP_SUM),
				 NDET_OK);
		for (size_t i = 0; i < count; i++) {
			float x[NDET_MAX_RANKS];

			for (int r = 0; r < n; r++)
				x[r] = data[r][i];
			assert_int_equal(float_bits(result[i]),
					 float_bits(evaluate_parsed_sum(&parser, 0, x)));
		}
	}
}

/* ---------------------------------------------------------------- f32 by hand */

/*
 * 1e8 is a float; at that magnitude the spacing is 8, so 1e8 + 1 rounds back to 1e8
 * and -1e8 + 1 to -1e8: a one next to 1e8 vanishes unless 1e8 has already cancelled.
 */
static void test_f32_sum_hand_values_order_matters(void **state)
{
	(void)state;
	static const struct {
		int nranks;
		float values[16];
		float tree;       /* by hand, following the tree */
		float sequential; /* by hand, left to right */
	} cases[] = {
		/* n = 3: the tree is ((0+1)+2), the sequential order itself. */
		{3, {1e8f, 1, -1e8f}, 0, 0},
		{3, {1e8f, -1e8f, 1}, 1, 1},
		/* (1+1e8)+(-1e8+1) = 1e8-1e8 = 0; ((1+1e8)-1e8)+1 = 1 */
		{4, {1, 1e8f, -1e8f, 1}, 0, 1},
		/* ((1e8+1)+(-1e8+1))+1 = 1; 1e8+1-1e8+1+1 = 2 */
		{5, {1e8f, 1, -1e8f, 1, 1}, 1, 2},
		{6, {1e8f, 1, -1e8f, 1, 1, 1}, 2, 3},
		{7, {1e8f, 1, -1e8f, 1, 1, 1, 1}, 3, 4},
		{8, {1e8f, 1, -1e8f, 1, 1, 1, 1, 1}, 4, 5},
		/* 4 + ((1e8+1)+(-1e8+1)) = 4; 4+1e8 is a tie that goes to 1e8 (even) ... = 1 */
		{8, {1, 1, 1, 1, 1e8f, 1, -1e8f, 1}, 4, 1},
		/*
		 * n = 9 ... 16: 1e8 at rank 0, -1e8 at rank 4, ones elsewhere.  Tree: the
		 * first eight ranks give ((1e8+1)+(1+1)) + ((-1e8+1)+(1+1)) = 1e8 + -1e8 = 0
		 * (1e8+2 rounds to 1e8), and the n - 8 ranks after them n - 8 ones exactly:
		 * n - 8.  Left to right: ranks 1-3 vanish into 1e8, rank 4 cancels it, and
		 * the n - 5 ones after it count: n - 5.
		 */
		{9, {1e8f, 1, 1, 1, -1e8f, 1, 1, 1, 1}, 1, 4},
		{10, {1e8f, 1, 1, 1, -1e8f, 1, 1, 1, 1, 1}, 2, 5},
		{11, {1e8f, 1, 1, 1, -1e8f, 1, 1, 1, 1, 1, 1}, 3, 6},
		{12, {1e8f, 1, 1, 1, -1e8f, 1, 1, 1, 1, 1, 1, 1}, 4, 7},
		{13, {1e8f, 1, 1, 1, -1e8f, 1, 1, 1, 1, 1, 1, 1, 1}, 5, 8},
		{14, {1e8f, 1, 1, 1, -1e8f, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 6, 9},
		{15, {1e8f, 1, 1, 1, -1e8f, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 7, 10},
		{16, {1e8f, 1, 1, 1, -1e8f, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 8, 11},
		/*
		 * The right subtree's shape: 1e8 at rank 8 and -1e8 at rank 12, ones
		 * elsewhere.  Tree: the first eight ranks give 8; ranks 8-11 give
		 * (1e8+1)+(1+1) = 1e8; ranks 12..n-1 give -1e8 (the ones after it vanish,
		 * at most three of them); 8 + (1e8 + -1e8) = 8.  Left to right: 8 + 1e8 =
		 * 100000008 exactly, ranks 9-11 each round back to it (100000009 is nearer
		 * 100000008), rank 12 leaves 8, and the n - 13 ones after it count: n - 5.
		 */
		{14, {1, 1, 1, 1, 1, 1, 1, 1, 1e8f, 1, 1, 1, -1e8f, 1}, 8, 9},
		{15, {1, 1, 1, 1, 1, 1, 1, 1, 1e8f, 1, 1, 1, -1e8f, 1, 1}, 8, 10},
		{16, {1, 1, 1, 1, 1, 1, 1, 1, 1e8f, 1, 1, 1, -1e8f, 1, 1, 1}, 8, 11},
	};

	for (size_t c = 0; c < ARRAY_SIZE(cases); c++) {
		float tree, sequential;

		reduce_one(NDET_DTYPE_F32, NDET_OP_SUM, cases[c].nranks, cases[c].values, &tree,
			   &sequential);
		assert_int_equal(float_bits(tree), float_bits(cases[c].tree));
		assert_int_equal(float_bits(sequential), float_bits(cases[c].sequential));
		if (cases[c].nranks >= 4)
			assert_int_not_equal(float_bits(tree), float_bits(sequential));
	}

	/* n = 3 differs from the other association, 0+(1+2): 1e8+(-1e8+1) = 0. */
	const float three[3] = {1e8f, -1e8f, 1};
	const float reversed[3] = {1, -1e8f, 1e8f};

	assert_true(tree_f32(NDET_OP_SUM, 3, three) == 1.0f);
	assert_true(sequential_f32(NDET_OP_SUM, 3, reversed) == 0.0f);
}

static void test_f32_prod_min_max_avg_hand_values(void **state)
{
	(void)state;
	const float exact[5] = {2, 3, 0.5f, -4, 1.5f};

	/* ((2*3)*(0.5*-4))*1.5 */
	assert_true(tree_f32(NDET_OP_PROD, 5, exact) == -18.0f);

	/* Tree: (1e-40 subnormal) * (1e40 -> inf) = inf; left to right stays near 1. */
	const float order[4] = {1e-20f, 1e-20f, 1e20f, 1e20f};
	float sequential = sequential_f32(NDET_OP_PROD, 4, order);

	assert_true(isinf(tree_f32(NDET_OP_PROD, 4, order)));
	assert_true(sequential > 0.99f && sequential < 1.01f);

	const float mixed[5] = {3, -1, 7, -1, 2};

	assert_true(tree_f32(NDET_OP_MIN, 5, mixed) == -1.0f);
	assert_true(tree_f32(NDET_OP_MAX, 5, mixed) == 7.0f);

	/* (1+2)+4 = 7, 7/3 rounded once: 0x40155555. */
	const float three[3] = {1, 2, 4};

	assert_int_equal(float_bits(tree_f32(NDET_OP_AVG, 3, three)), 0x40155555u);
	/* avg divides the tree sum: 0 / 4, where left to right would give 1 / 4. */
	const float cancel[4] = {1, 1e8f, -1e8f, 1};

	assert_true(tree_f32(NDET_OP_AVG, 4, cancel) == 0.0f);
	assert_true(sequential_f32(NDET_OP_AVG, 4, cancel) == 0.25f);
	/* n = 1: the value itself. */
	assert_true(tree_f32(NDET_OP_AVG, 1, &exact[4]) == 1.5f);
	assert_true(tree_f32(NDET_OP_SUM, 1, &exact[4]) == 1.5f);
}

/* ---------------------------------------------------------------- f16 / bf16 */

/*
 * f16 spacing at 2048 is 2 and bf16 spacing at 256 is 2.  Per-step rounding to the
 * storage type would lose each +1 (2049 ties to 2048); f32 accumulation keeps them,
 * and the one final rounding decides.
 */
static void test_f16_bf16_accumulate_in_f32_round_once(void **state)
{
	(void)state;
	const uint16_t h_2048 = 0x6800, h_2050 = 0x6801, h_2052 = 0x6802, h_1 = 0x3c00,
		       h_quarter = 0x3400, h_0 = 0;

	const uint16_t two_ones[4] = {h_2048, h_1, h_1, h_0};
	const uint16_t one_and_quarter[4] = {h_2048, h_1, h_quarter, h_0};
	const uint16_t tie_even_down[4] = {h_2048, h_1, h_0, h_0};
	const uint16_t tie_even_up[4] = {h_2050, h_1, h_0, h_0};

	assert_int_equal(tree_16(NDET_DTYPE_F16, NDET_OP_SUM, 4, two_ones), h_2050);
	/* 2049.25 is above the midpoint 2049: a rounding at the (0+1) node gives 2048. */
	assert_int_equal(tree_16(NDET_DTYPE_F16, NDET_OP_SUM, 4, one_and_quarter), h_2050);
	assert_int_equal(tree_16(NDET_DTYPE_F16, NDET_OP_SUM, 4, tie_even_down), h_2048);
	assert_int_equal(tree_16(NDET_DTYPE_F16, NDET_OP_SUM, 4, tie_even_up), h_2052);

	const uint16_t b_256 = 0x4380, b_258 = 0x4381, b_1 = 0x3f80, b_quarter = 0x3e80;
	const uint16_t b_two_ones[4] = {b_256, b_1, b_1, 0};
	const uint16_t b_one_and_quarter[4] = {b_256, b_1, b_quarter, 0};

	assert_int_equal(tree_16(NDET_DTYPE_BF16, NDET_OP_SUM, 4, b_two_ones), b_258);
	assert_int_equal(tree_16(NDET_DTYPE_BF16, NDET_OP_SUM, 4, b_one_and_quarter), b_258);

	/* 65504 + 65504 overflows f16 but not f32: avg is exact, sum is inf. */
	const uint16_t largest[2] = {0x7bff, 0x7bff};

	assert_int_equal(tree_16(NDET_DTYPE_F16, NDET_OP_SUM, 2, largest), 0x7c00);
	assert_int_equal(tree_16(NDET_DTYPE_F16, NDET_OP_AVG, 2, largest), 0x7bff);

	/* avg of 1, 2, 4 in f16: 7/3 in f32 then one rounding. */
	const uint16_t three[3] = {0x3c00, 0x4000, 0x4400};

	assert_int_equal(tree_16(NDET_DTYPE_F16, NDET_OP_AVG, 3, three),
			 gcc_float_to_half(7.0f / 3.0f));
	assert_int_equal(tree_16(NDET_DTYPE_F16, NDET_OP_AVG, 3, three), 0x40ab);

	/* prod/min/max in f16: 2*3*0.5 = 3; min/max pick values. */
	const uint16_t small[3] = {0x4000, 0x4200, 0x3800};

	assert_int_equal(tree_16(NDET_DTYPE_F16, NDET_OP_PROD, 3, small), 0x4200);
	assert_int_equal(tree_16(NDET_DTYPE_F16, NDET_OP_MIN, 3, small), 0x3800);
	assert_int_equal(tree_16(NDET_DTYPE_F16, NDET_OP_MAX, 3, small), 0x4200);
}

/*
 * n ranks' cancelling data with specials (seed 11) into rows of `row_bytes` at
 * `data`, and inputs[r] pointing at row r.
 */
static void fill_cancelling_ranks(ndet_dtype_t dtype, void *data, size_t row_bytes, size_t count,
				  int n, const void **inputs)
{
	for (int r = 0; r < n; r++) {
		void *row = (char *)data + (size_t)r * row_bytes;

		ndet_test_fill_rank(dtype, row, 0, count, 11, r, n,
				    NDET_TEST_DATA_CANCEL | NDET_TEST_DATA_SPECIALS);
		inputs[r] = row;
	}
}

/* n = 5 written out as ((0+1)+(2+3))+4 in float, rounded by GCC (f16) or slowly (bf16). */
static void test_f16_bf16_match_tree_expression(void **state)
{
	(void)state;
	enum { count = 4096, n = 5 };
	static uint16_t data[n][count], result[count];
	const ndet_dtype_t dtypes[] = {NDET_DTYPE_F16, NDET_DTYPE_BF16};

	for (size_t d = 0; d < ARRAY_SIZE(dtypes); d++) {
		ndet_dtype_t dtype = dtypes[d];
		const void *inputs[n];

		fill_cancelling_ranks(dtype, data, sizeof(data[0]), count, n, inputs);
		assert_int_equal(
			ndet_reference_allreduce(inputs, n, result, count, dtype, NDET_OP_SUM),
			NDET_OK);
		for (size_t i = 0; i < count; i++) {
			float x[n];

			for (int r = 0; r < n; r++)
				x[r] = (float)ndet_test_element_to_double(dtype, data[r], i);

			float sum = ((x[0] + x[1]) + (x[2] + x[3])) + x[4];
			uint16_t expected = dtype == NDET_DTYPE_F16 ? gcc_float_to_half(sum)
								    : slow_round_to_16(dtype, sum);

			if (isnan(sum)) {
				assert_true(ndet_test_element_is_nan(dtype, result, i));
				continue;
			}
			assert_int_equal(result[i], expected);
		}
	}
}

/* ---------------------------------------------------------------- f64 */

static void test_f64_hand_values(void **state)
{
	(void)state;
	/* Spacing at 1e17 is 16: the ones vanish next to 1e17 as in the f32 case. */
	const double values[4] = {1, 1e17, -1e17, 1};
	double tree, sequential;

	reduce_one(NDET_DTYPE_F64, NDET_OP_SUM, 4, values, &tree, &sequential);
	assert_true(tree == 0.0);
	assert_true(sequential == 1.0);

	const double three[3] = {1, 2, 4};

	assert_int_equal(double_bits(tree_f64(NDET_OP_AVG, 3, three)), double_bits(7.0 / 3.0));
	assert_true(tree_f64(NDET_OP_PROD, 3, three) == 8.0);
	assert_true(tree_f64(NDET_OP_MIN, 3, three) == 1.0);
	assert_true(tree_f64(NDET_OP_MAX, 3, three) == 4.0);

	/* f64 is accumulated in f64: 1 + 2^-40 survives, which f32 would lose. */
	const double fine[3] = {1, ldexp(1, -40), 0};

	assert_true(tree_f64(NDET_OP_SUM, 3, fine) == 1 + ldexp(1, -40));
}

/* ---------------------------------------------------------------- specials */

static void test_specials_inf_nan(void **state)
{
	(void)state;
	const float inf_minus_inf[4] = {INFINITY, -INFINITY, 1, 2};
	const float inf_plus_finite[3] = {INFINITY, 1, 2};
	const float with_nan[5] = {1, NAN, 2, 3, 4};
	const float inf_times_zero[2] = {INFINITY, 0};

	assert_true(isnan(tree_f32(NDET_OP_SUM, 4, inf_minus_inf)));
	assert_true(tree_f32(NDET_OP_SUM, 3, inf_plus_finite) == INFINITY);
	assert_true(isnan(tree_f32(NDET_OP_SUM, 5, with_nan)));
	assert_true(isnan(tree_f32(NDET_OP_PROD, 5, with_nan)));
	assert_true(isnan(tree_f32(NDET_OP_AVG, 5, with_nan)));
	assert_true(isnan(tree_f32(NDET_OP_PROD, 2, inf_times_zero)));

	/* min/max: a NaN operand yields the other operand, in either position. */
	const float nan_first[2] = {NAN, 5};
	const float nan_second[2] = {5, NAN};
	const float two_nans[4] = {NAN, 3, 1, NAN};
	const float all_nan[3] = {NAN, NAN, NAN};

	assert_true(tree_f32(NDET_OP_MIN, 2, nan_first) == 5.0f);
	assert_true(tree_f32(NDET_OP_MIN, 2, nan_second) == 5.0f);
	assert_true(tree_f32(NDET_OP_MAX, 2, nan_first) == 5.0f);
	assert_true(tree_f32(NDET_OP_MAX, 2, nan_second) == 5.0f);
	assert_true(tree_f32(NDET_OP_MIN, 4, two_nans) == 1.0f);
	assert_true(tree_f32(NDET_OP_MAX, 4, two_nans) == 3.0f);
	assert_true(isnan(tree_f32(NDET_OP_MIN, 3, all_nan)));
	assert_true(isnan(tree_f32(NDET_OP_MAX, 3, all_nan)));

	/* Two NaNs of different payloads: the same bits in either order. */
	const float nan_pair[2] = {float_from_bits(0x7fc00001u), float_from_bits(0xffc00002u)};
	const float nan_pair_swapped[2] = {nan_pair[1], nan_pair[0]};
	const uint16_t half_nan_pair[2] = {0x7e01, 0xfe02};
	const uint16_t half_nan_pair_swapped[2] = {0xfe02, 0x7e01};

	for (ndet_op_t op = NDET_OP_MIN; op <= NDET_OP_MAX; op++) {
		assert_true(isnan(tree_f32(op, 2, nan_pair)));
		assert_int_equal(float_bits(tree_f32(op, 2, nan_pair)),
				 float_bits(tree_f32(op, 2, nan_pair_swapped)));
		assert_int_equal(tree_16(NDET_DTYPE_F16, op, 2, half_nan_pair),
				 tree_16(NDET_DTYPE_F16, op, 2, half_nan_pair_swapped));
	}

	/* The same in f16 (NaN = 0x7e00) and f64. */
	const uint16_t half_nan[3] = {0x7e00, 0x4000, 0x7e00};

	assert_int_equal(tree_16(NDET_DTYPE_F16, NDET_OP_MIN, 3, half_nan), 0x4000);
	assert_int_equal(tree_16(NDET_DTYPE_BF16, NDET_OP_MAX, 3,
				 (const uint16_t[]){0x7fc0, 0x4000, 0x3f80}),
			 0x4000);
	assert_true(half_is_nan(tree_16(NDET_DTYPE_F16, NDET_OP_SUM, 3, half_nan)));
	/* bf16: NaN = 0x7fc0, inf = 0x7f80; sums, products and averages of them. */
	const uint16_t bf16_nan[4] = {0x3f80, 0x7fc0, 0x4000, 0x4040};
	const uint16_t bf16_inf_minus_inf[3] = {0x7f80, 0x3f80, 0xff80};

	for (ndet_op_t op = NDET_OP_SUM; op <= NDET_OP_AVG; op++) {
		if (op == NDET_OP_MIN || op == NDET_OP_MAX)
			continue;
		assert_true(bfloat16_is_nan(tree_16(NDET_DTYPE_BF16, op, 4, bf16_nan)));
		assert_true(
			half_is_nan(tree_16(NDET_DTYPE_F16, op, 4,
					    (const uint16_t[]){0x3c00, 0x7e00, 0x4000, 0x4200})));
	}
	assert_true(bfloat16_is_nan(tree_16(NDET_DTYPE_BF16, NDET_OP_SUM, 3, bf16_inf_minus_inf)));
	assert_int_equal(
		tree_16(NDET_DTYPE_BF16, NDET_OP_SUM, 2, (const uint16_t[]){0x7f80, 0x3f80}),
		0x7f80);
	/* Twice the largest bf16 (3.39e38) is past f32's range as well: inf. */
	assert_int_equal(
		tree_16(NDET_DTYPE_BF16, NDET_OP_SUM, 2, (const uint16_t[]){0x7f7f, 0x7f7f}),
		0x7f80);
	/* f16: 65504 + 65504 = 131008 in f32, inf in f16. */
	assert_int_equal(
		tree_16(NDET_DTYPE_F16, NDET_OP_SUM, 2, (const uint16_t[]){0x7bff, 0x7bff}),
		0x7c00);

	const double double_nan[3] = {NAN, -2, NAN};

	assert_true(tree_f64(NDET_OP_MIN, 3, double_nan) == -2.0);
	assert_true(isnan(tree_f64(NDET_OP_SUM, 3, double_nan)));
	assert_true(isinf(tree_f64(NDET_OP_SUM, 2, (const double[]){INFINITY, 1})));
	assert_true(isnan(tree_f64(NDET_OP_SUM, 2, (const double[]){INFINITY, -INFINITY})));
}

static void test_specials_signed_zero(void **state)
{
	(void)state;
	const float minus_plus[2] = {-0.0f, 0.0f};
	const float plus_minus[2] = {0.0f, -0.0f};
	const float three_zeros[3] = {0.0f, -0.0f, 0.0f};
	const float all_minus[4] = {-0.0f, -0.0f, -0.0f, -0.0f};

	assert_int_equal(float_bits(tree_f32(NDET_OP_MIN, 2, minus_plus)), 0x80000000u);
	assert_int_equal(float_bits(tree_f32(NDET_OP_MIN, 2, plus_minus)), 0x80000000u);
	assert_int_equal(float_bits(tree_f32(NDET_OP_MAX, 2, minus_plus)), 0u);
	assert_int_equal(float_bits(tree_f32(NDET_OP_MAX, 2, plus_minus)), 0u);
	assert_int_equal(float_bits(tree_f32(NDET_OP_MIN, 3, three_zeros)), 0x80000000u);
	assert_int_equal(float_bits(tree_f32(NDET_OP_MAX, 3, three_zeros)), 0u);
	/* IEEE sums: -0 + -0 = -0, -0 + +0 = +0. */
	assert_int_equal(float_bits(tree_f32(NDET_OP_SUM, 4, all_minus)), 0x80000000u);
	assert_int_equal(float_bits(tree_f32(NDET_OP_SUM, 2, minus_plus)), 0u);
	assert_int_equal(float_bits(tree_f32(NDET_OP_PROD, 2, minus_plus)), 0x80000000u);

	const uint16_t half_zeros[2] = {0x0000, 0x8000};
	const uint16_t half_zeros_swapped[2] = {0x8000, 0x0000};

	for (int d = 0; d < 2; d++) {
		ndet_dtype_t dtype = d == 0 ? NDET_DTYPE_F16 : NDET_DTYPE_BF16;

		assert_int_equal(tree_16(dtype, NDET_OP_MIN, 2, half_zeros), 0x8000);
		assert_int_equal(tree_16(dtype, NDET_OP_MIN, 2, half_zeros_swapped), 0x8000);
		assert_int_equal(tree_16(dtype, NDET_OP_MAX, 2, half_zeros), 0x0000);
		assert_int_equal(tree_16(dtype, NDET_OP_MAX, 2, half_zeros_swapped), 0x0000);
		/* Sums in f32 keep the sign of -0 + -0 through the rounding back. */
		assert_int_equal(tree_16(dtype, NDET_OP_SUM, 4,
					 (const uint16_t[]){0x8000, 0x8000, 0x8000, 0x8000}),
				 0x8000);
		assert_int_equal(tree_16(dtype, NDET_OP_SUM, 2, half_zeros_swapped), 0x0000);
		assert_int_equal(
			tree_16(dtype, NDET_OP_AVG, 3, (const uint16_t[]){0x8000, 0x8000, 0x8000}),
			0x8000);
		/* -0 * +0 = -0. */
		assert_int_equal(tree_16(dtype, NDET_OP_PROD, 2, half_zeros), 0x8000);
	}

	const double double_zeros[2] = {0.0, -0.0};
	const double double_zeros_swapped[2] = {-0.0, 0.0};

	assert_int_equal(double_bits(tree_f64(NDET_OP_MIN, 2, double_zeros)),
			 0x8000000000000000ull);
	assert_int_equal(double_bits(tree_f64(NDET_OP_MIN, 2, double_zeros_swapped)),
			 0x8000000000000000ull);
	assert_int_equal(double_bits(tree_f64(NDET_OP_MAX, 2, double_zeros)), 0);
	assert_int_equal(double_bits(tree_f64(NDET_OP_MAX, 2, double_zeros_swapped)), 0);
	assert_int_equal(double_bits(tree_f64(NDET_OP_SUM, 3, (const double[]){-0.0, -0.0, -0.0})),
			 0x8000000000000000ull);
	assert_int_equal(double_bits(tree_f64(NDET_OP_SUM, 2, double_zeros)), 0);
	assert_int_equal(double_bits(tree_f64(NDET_OP_AVG, 2, (const double[]){-0.0, -0.0})),
			 0x8000000000000000ull);
}

static void test_specials_subnormals_survive(void **state)
{
	(void)state;
	const float tiny = float_from_bits(1); /* 2^-149 */
	const float f32_tiny[3] = {tiny, tiny, tiny};

	assert_int_equal(float_bits(tree_f32(NDET_OP_SUM, 3, f32_tiny)), 3u);
	assert_int_equal(float_bits(tree_f32(NDET_OP_MIN, 3, (const float[]){tiny, 0, -tiny})),
			 0x80000001u);
	/* The largest subnormal plus the smallest gives the smallest normal. */
	const float to_normal[2] = {float_from_bits(0x007fffff), tiny};

	assert_int_equal(float_bits(tree_f32(NDET_OP_SUM, 2, to_normal)), 0x00800000u);
	/* A subnormal product: 2^-100 * 2^-40 = 2^-140. */
	assert_int_equal(float_bits(tree_f32(NDET_OP_PROD, 2,
					     (const float[]){ldexpf(1, -100), ldexpf(1, -40)})),
			 float_bits(ldexpf(1, -140)));

	const double double_tiny = ldexp(1, -1074);
	const double f64_tiny[3] = {double_tiny, double_tiny, double_tiny};

	assert_int_equal(double_bits(tree_f64(NDET_OP_SUM, 3, f64_tiny)), 3);

	/* f16 subnormals (2^-24 units) add in f32 and round back to subnormals. */
	const uint16_t half_tiny[3] = {0x0001, 0x0001, 0x0001};
	const uint16_t half_sub[2] = {0x03ff, 0x0001};

	assert_int_equal(tree_16(NDET_DTYPE_F16, NDET_OP_SUM, 3, half_tiny), 0x0003);
	assert_int_equal(tree_16(NDET_DTYPE_F16, NDET_OP_SUM, 2, half_sub), 0x0400);
	/* avg of 1 and 0 units: 2^-25 is a tie that goes to the even 0. */
	assert_int_equal(tree_16(NDET_DTYPE_F16, NDET_OP_AVG, 2, (const uint16_t[]){0x0001, 0}),
			 0x0000);
	/* avg of 3 units and 0: 1.5 units rounds to the even 2 units. */
	assert_int_equal(tree_16(NDET_DTYPE_F16, NDET_OP_AVG, 2, (const uint16_t[]){0x0003, 0}),
			 0x0002);
	assert_int_equal(tree_16(NDET_DTYPE_BF16, NDET_OP_SUM, 3,
				 (const uint16_t[]){0x0001, 0x0001, 0x0001}),
			 0x0003);
}

/* ---------------------------------------------------------------- conversions */

static void test_half_round_trip_every_pattern(void **state)
{
	(void)state;
	for (uint32_t b = 0; b <= 0xffff; b++) {
		uint16_t bits = (uint16_t)b;
		float value = ndet_half_to_float(bits);
		uint16_t back = ndet_float_to_half(value);

		if (half_is_nan(bits)) {
			/* Stays NaN, keeps sign and payload, comes back quiet. */
			assert_true(isnan(value));
			assert_true(isnan(gcc_half_to_float(bits)));
			assert_int_equal(back, bits | 0x0200);
			continue;
		}
		assert_int_equal(back, bits);
		assert_int_equal(float_bits(value), float_bits(gcc_half_to_float(bits)));
		assert_true((double)value == ndet_test_element_to_double(NDET_DTYPE_F16, &bits, 0));
	}
}

static void test_bfloat16_round_trip_every_pattern(void **state)
{
	(void)state;
	for (uint32_t b = 0; b <= 0xffff; b++) {
		uint16_t bits = (uint16_t)b;
		float value = ndet_bfloat16_to_float(bits);
		uint16_t back = ndet_float_to_bfloat16(value);

		if (bfloat16_is_nan(bits)) {
			assert_true(isnan(value));
			assert_int_equal(back, bits | 0x0040);
			continue;
		}
		assert_int_equal(back, bits);
		assert_true((double)value ==
			    ndet_test_element_to_double(NDET_DTYPE_BF16, &bits, 0));
	}
}

static void check_float_to_16(ndet_dtype_t dtype, float value)
{
	uint16_t got =
		dtype == NDET_DTYPE_F16 ? ndet_float_to_half(value) : ndet_float_to_bfloat16(value);

	if (isnan(value)) {
		if (dtype == NDET_DTYPE_F16) {
			assert_true(half_is_nan(got));
			assert_true(half_is_nan(gcc_float_to_half(value)));
		} else {
			assert_true(bfloat16_is_nan(got));
		}
		/* Quiet, with the sign kept. */
		assert_true(got & (dtype == NDET_DTYPE_F16 ? 0x0200 : 0x0040));
		assert_int_equal(got >> 15, float_bits(value) >> 31);
		return;
	}

	uint16_t slow = slow_round_to_16(dtype, value);

	if (got != slow)
		fail_msg("%s(%a = 0x%08x) = 0x%04x, slow reference 0x%04x", ndet_dtype_name(dtype),
			 (double)value, float_bits(value), got, slow);
	if (dtype == NDET_DTYPE_F16 && got != gcc_float_to_half(value))
		fail_msg("f16(%a = 0x%08x) = 0x%04x, GCC _Float16 0x%04x", (double)value,
			 float_bits(value), got, gcc_float_to_half(value));
}

/* Every exact value, every midpoint between neighbours, and one float ulp around them. */
static void check_neighbourhoods(ndet_dtype_t dtype)
{
	for (uint32_t b = 0; b <= 0xffff; b++) {
		uint16_t bits = (uint16_t)b;
		uint16_t next = (uint16_t)(b + 1);
		int is_nan = dtype == NDET_DTYPE_F16 ? half_is_nan(bits) : bfloat16_is_nan(bits);

		if (is_nan)
			continue;

		double here = ndet_test_element_to_double(dtype, &bits, 0);

		check_float_to_16(dtype, (float)here);
		if ((b & 0x7fff) >= (dtype == NDET_DTYPE_F16 ? 0x7bffu : 0x7f7fu))
			continue;

		/* Midpoints have one bit more than the format: exact in float. */
		float middle = (float)((here + ndet_test_element_to_double(dtype, &next, 0)) / 2);
		uint32_t middle_bits = float_bits(middle);

		for (int delta = -2; delta <= 2; delta++)
			check_float_to_16(dtype, float_from_bits(middle_bits + (uint32_t)delta));
	}
	/* Just below, at and above the overflow threshold (largest + half a spacing). */
	double threshold = dtype == NDET_DTYPE_F16 ? 65520.0 : ldexp(2.0 - ldexp(1, -8), 127);
	uint32_t threshold_bits = float_bits((float)threshold);

	for (int delta = -3; delta <= 3; delta++) {
		check_float_to_16(dtype, float_from_bits(threshold_bits + (uint32_t)delta));
		check_float_to_16(
			dtype, float_from_bits((threshold_bits + (uint32_t)delta) | 0x80000000u));
	}
}

static void check_random_floats(ndet_dtype_t dtype, uint64_t seed)
{
	uint64_t random_state = seed;

	for (int k = 0; k < 300000; k++) {
		uint64_t r = next_random(&random_state);

		/* Any bit pattern (mostly out of f16 range), then values near the format. */
		check_float_to_16(dtype, float_from_bits((uint32_t)r));

		int exponent = dtype == NDET_DTYPE_F16 ? -27 + (int)((r >> 32) % 46)
						       : -140 + (int)((r >> 32) % 270);
		float near = ldexpf(1.0f + (float)((r >> 40) & 0x7fffff) / 8388608.0f, exponent);

		check_float_to_16(dtype, (r >> 63) ? -near : near);
	}
	const float edges[] = {0.0f,
			       -0.0f,
			       INFINITY,
			       -INFINITY,
			       NAN,
			       -NAN,
			       float_from_bits(0x7f800001u), /* signalling NaN */
			       float_from_bits(0xff800001u),
			       float_from_bits(1),
			       float_from_bits(0x807fffffu),
			       float_from_bits(0x00800000u),
			       float_from_bits(0x7f7fffffu),
			       float_from_bits(0xff7fffffu),
			       ldexpf(1, -24),
			       ldexpf(1, -25),
			       ldexpf(1.5f, -25),
			       ldexpf(1, -26),
			       ldexpf(1, -14),
			       65504.0f,
			       65519.0f,
			       65520.0f,
			       1.0f,
			       -1.0f};

	for (size_t e = 0; e < ARRAY_SIZE(edges); e++)
		check_float_to_16(dtype, edges[e]);
}

static void test_float_to_half_matches_gcc_and_slow_reference(void **state)
{
	(void)state;
	check_neighbourhoods(NDET_DTYPE_F16);
	check_random_floats(NDET_DTYPE_F16, 0x1234567887654321ull);
	/* Tie to even in the subnormal range, spelled out. */
	assert_int_equal(ndet_float_to_half(ldexpf(1, -25)), 0x0000);
	assert_int_equal(ndet_float_to_half(ldexpf(3, -25)), 0x0002);
	assert_int_equal(ndet_float_to_half(ldexpf(1.0000001f, -25)), 0x0001);
	assert_int_equal(ndet_float_to_half(65520.0f), 0x7c00);
	assert_int_equal(ndet_float_to_half(65519.996f), 0x7bff);
}

static void test_float_to_bfloat16_matches_slow_reference(void **state)
{
	(void)state;
	check_neighbourhoods(NDET_DTYPE_BF16);
	check_random_floats(NDET_DTYPE_BF16, 0x0fedcba987654321ull);
	assert_int_equal(ndet_float_to_bfloat16(float_from_bits(0x3f808000u)), 0x3f80);
	assert_int_equal(ndet_float_to_bfloat16(float_from_bits(0x3f818000u)), 0x3f82);
	assert_int_equal(ndet_float_to_bfloat16(float_from_bits(0x00008000u)), 0x0000);
	assert_int_equal(ndet_float_to_bfloat16(float_from_bits(0x00018000u)), 0x0002);
	assert_int_equal(ndet_float_to_bfloat16(float_from_bits(0x7f7fffffu)), 0x7f80);
}

/* ---------------------------------------------------------------- fp8 */

/*
 * All 256 patterns of each format decode to the formula's value (signed zeros, NaN
 * and inf classes included), agree with the test data's decoding, and encode back to
 * themselves (E5M2's inf too: only finite values saturate); NaN comes back NaN.
 */
static void test_fp8_decode_every_pattern(void **state)
{
	(void)state;
	for (size_t k = 0; k < ARRAY_SIZE(fp8_specs); k++) {
		const struct fp8_spec *f = &fp8_specs[k];
		int nans = 0, infinities = 0;
		double previous = -1;

		for (uint32_t b = 0; b <= 0xff; b++) {
			uint8_t bits = (uint8_t)b;
			double slow = slow_fp8_value(f, bits);
			float value = f->decode(bits);
			uint8_t back = f->encode(value);

			assert_int_equal(ndet_test_element_is_nan(f->dtype, &bits, 0),
					 !!isnan(slow));
			if (isnan(slow)) {
				nans++;
				assert_true(isnan(value));
				assert_true(isnan(ndet_test_element_to_double(f->dtype, &bits, 0)));
				assert_true(fp8_is_nan(f->dtype, back));
				continue;
			}
			if ((double)value != slow || !signbit(value) != !signbit(slow))
				fail_msg("%s 0x%02x decodes to %a, formula %a",
					 ndet_dtype_name(f->dtype), bits, (double)value, slow);
			assert_true(ndet_test_element_to_double(f->dtype, &bits, 0) == slow);
			if (isinf(slow)) {
				infinities++;
				assert_int_equal(back, bits);
				continue;
			}
			assert_int_equal(back, bits);
			/* Values grow with the pattern (slow_round_to_fp8 relies on it). */
			if (bits <= f->largest) {
				assert_true(slow > previous);
				previous = slow;
			}
		}
		assert_int_equal(nans, f->has_infinity ? 6 : 2);
		assert_int_equal(infinities, f->has_infinity ? 2 : 0);
	}

	/* The landmarks, spelled out. */
	assert_true(ndet_fp8_e4m3_to_float(0x7e) == 448.0f);
	assert_true(ndet_fp8_e4m3_to_float(0xfe) == -448.0f);
	assert_true(ndet_fp8_e4m3_to_float(0x78) == 256.0f); /* exponent all ones: a number */
	assert_true(ndet_fp8_e4m3_to_float(0x7d) == 416.0f);
	assert_true(isnan(ndet_fp8_e4m3_to_float(0x7f)));
	assert_true(isnan(ndet_fp8_e4m3_to_float(0xff)));
	assert_true(ndet_fp8_e4m3_to_float(0x08) == 0x1p-6f);
	assert_true(ndet_fp8_e4m3_to_float(0x01) == 0x1p-9f);
	assert_true(ndet_fp8_e4m3_to_float(0x07) == 7 * 0x1p-9f);
	assert_true(ndet_fp8_e4m3_to_float(0x38) == 1.0f);
	assert_int_equal(float_bits(ndet_fp8_e4m3_to_float(0x80)), 0x80000000u);
	assert_true(ndet_fp8_e5m2_to_float(0x7b) == 57344.0f);
	assert_true(ndet_fp8_e5m2_to_float(0x7c) == INFINITY);
	assert_true(ndet_fp8_e5m2_to_float(0xfc) == -INFINITY);
	assert_true(isnan(ndet_fp8_e5m2_to_float(0x7d)));
	assert_true(isnan(ndet_fp8_e5m2_to_float(0xfe)));
	assert_true(ndet_fp8_e5m2_to_float(0x04) == 0x1p-14f);
	assert_true(ndet_fp8_e5m2_to_float(0x01) == 0x1p-16f);
	assert_true(ndet_fp8_e5m2_to_float(0x03) == 3 * 0x1p-16f);
	assert_true(ndet_fp8_e5m2_to_float(0x3c) == 1.0f);
}

static void check_float_to_fp8(ndet_dtype_t dtype, float value)
{
	const struct fp8_spec *f = fp8_spec_of(dtype);
	uint8_t got = f->encode(value);

	if (isnan(value)) {
		if (!fp8_is_nan(dtype, got))
			fail_msg("%s(NaN 0x%08x) = 0x%02x, not a NaN", ndet_dtype_name(dtype),
				 float_bits(value), got);
		return;
	}

	uint8_t slow = slow_round_to_fp8(dtype, value);

	if (got != slow)
		fail_msg("%s(%a = 0x%08x) = 0x%02x, slow reference 0x%02x", ndet_dtype_name(dtype),
			 (double)value, float_bits(value), got, slow);
}

/* A float and its neighbours, up to two float ulps either way. */
static void check_float_to_fp8_around(ndet_dtype_t dtype, float value)
{
	uint32_t bits = float_bits(value);

	for (int delta = -2; delta <= 2; delta++)
		check_float_to_fp8(dtype, float_from_bits(bits + (uint32_t)delta));
}

static void check_fp8_rounding(const struct fp8_spec *f, uint64_t seed)
{
	const double largest = slow_fp8_value(f, f->largest);
	/* One spacing above the largest finite: half of it is the saturation threshold. */
	const double spacing = largest - slow_fp8_value(f, (uint8_t)(f->largest - 1));

	/* Every value, every midpoint between neighbours, both signs, and a few ulps. */
	for (uint32_t b = 0; b <= 0xff; b++) {
		uint8_t bits = (uint8_t)b;
		uint8_t magnitude = bits & 0x7f;
		double here = slow_fp8_value(f, bits);

		if (magnitude > f->largest)
			continue;
		check_float_to_fp8_around(f->dtype, (float)here);
		if (magnitude == f->largest)
			continue;

		/* One bit more than the format: exact in float. */
		float middle = (float)((here + slow_fp8_value(f, (uint8_t)(bits + 1))) / 2);

		check_float_to_fp8_around(f->dtype, middle);
		check_float_to_fp8(f->dtype, nextafterf(middle, INFINITY));
		check_float_to_fp8(f->dtype, nextafterf(middle, -INFINITY));
	}

	/* The saturation threshold (largest + spacing / 2) and beyond, both signs. */
	const double beyond[] = {largest + spacing / 2, largest + spacing, 2 * largest,
				 largest * 256, (double)FLT_MAX};

	for (size_t k = 0; k < ARRAY_SIZE(beyond); k++) {
		check_float_to_fp8_around(f->dtype, (float)beyond[k]);
		check_float_to_fp8_around(f->dtype, (float)-beyond[k]);
	}

	/* Half the smallest subnormal and around it. */
	const double smallest = slow_fp8_value(f, 1);
	const double tiny[] = {smallest / 2,
			       smallest / 4,
			       smallest * 1.5,
			       smallest * 0.75,
			       smallest / 1024,
			       (double)FLT_MIN,
			       (double)float_from_bits(1)};

	for (size_t k = 0; k < ARRAY_SIZE(tiny); k++) {
		check_float_to_fp8_around(f->dtype, (float)tiny[k]);
		check_float_to_fp8_around(f->dtype, (float)-tiny[k]);
	}

	const float edges[] = {0.0f,
			       -0.0f,
			       INFINITY,
			       -INFINITY,
			       NAN,
			       -NAN,
			       float_from_bits(0x7f800001u),
			       float_from_bits(0xff800001u),
			       float_from_bits(0x7fffffffu),
			       464.0f,
			       480.0f,
			       61440.0f,
			       57344.0f};

	for (size_t e = 0; e < ARRAY_SIZE(edges); e++)
		check_float_to_fp8(f->dtype, edges[e]);

	/* Random floats: any bit pattern, then values across and around the range. */
	uint64_t random_state = seed;
	int low_exponent = -f->bias - f->mantissa_bits - 3;
	int high_exponent = (f->largest >> f->mantissa_bits) - f->bias + 3;

	for (int k = 0; k < 200000; k++) {
		uint64_t r = next_random(&random_state);

		check_float_to_fp8(f->dtype, float_from_bits((uint32_t)r));

		int exponent = low_exponent +
			       (int)((r >> 32) % (uint64_t)(high_exponent - low_exponent + 1));
		float near = ldexpf(1.0f + (float)((r >> 40) & 0x7fffff) / 8388608.0f, exponent);

		check_float_to_fp8(f->dtype, (r >> 63) ? -near : near);
	}
}

static void test_float_to_fp8_matches_slow_reference(void **state)
{
	(void)state;
	check_fp8_rounding(&fp8_specs[0], 0x5eed0fe4a3ull);
	check_fp8_rounding(&fp8_specs[1], 0x5eed0fe5a2ull);

	/* Spelled out.  E4M3: 464 is the tie between 448 and (the missing) 480. */
	assert_int_equal(ndet_float_to_fp8_e4m3(464.0f), 0x7e);
	assert_int_equal(ndet_float_to_fp8_e4m3(nextafterf(464.0f, INFINITY)), 0x7e);
	assert_int_equal(ndet_float_to_fp8_e4m3(480.0f), 0x7e);
	assert_int_equal(ndet_float_to_fp8_e4m3(-1e30f), 0xfe);
	assert_int_equal(ndet_float_to_fp8_e4m3(INFINITY), 0x7e);
	assert_int_equal(ndet_float_to_fp8_e4m3(-INFINITY), 0xfe);
	assert_int_equal(ndet_float_to_fp8_e4m3(NAN) & 0x7f, 0x7f);
	assert_int_equal(ndet_float_to_fp8_e4m3(-NAN) & 0x7f, 0x7f);
	/* 432 is the tie between 416 (0x7d, odd) and 448 (0x7e, even). */
	assert_int_equal(ndet_float_to_fp8_e4m3(432.0f), 0x7e);
	assert_int_equal(ndet_float_to_fp8_e4m3(nextafterf(432.0f, 0)), 0x7d);
	assert_int_equal(ndet_float_to_fp8_e4m3(17.0f), 0x58); /* tie: 16, not 18 */
	assert_int_equal(ndet_float_to_fp8_e4m3(19.0f), 0x5a); /* tie: 20, not 18 */
	/* Half the smallest subnormal 2^-9 is a tie that goes to the even (signed) 0. */
	assert_int_equal(ndet_float_to_fp8_e4m3(0x1p-10f), 0x00);
	assert_int_equal(ndet_float_to_fp8_e4m3(-0x1p-10f), 0x80);
	assert_int_equal(ndet_float_to_fp8_e4m3(nextafterf(0x1p-10f, 1)), 0x01);
	assert_int_equal(ndet_float_to_fp8_e4m3(3 * 0x1p-10f), 0x02);
	assert_int_equal(ndet_float_to_fp8_e4m3(-0x1p-30f), 0x80);
	assert_int_equal(ndet_float_to_fp8_e4m3(0.0f), 0x00);
	assert_int_equal(ndet_float_to_fp8_e4m3(-0.0f), 0x80);
	/* The largest subnormal plus half a unit carries into the smallest normal. */
	assert_int_equal(ndet_float_to_fp8_e4m3(15 * 0x1p-10f), 0x08);

	/* E5M2: 61440 is the tie between 57344 and (inf); everything beyond saturates. */
	assert_int_equal(ndet_float_to_fp8_e5m2(57344.0f), 0x7b);
	assert_int_equal(ndet_float_to_fp8_e5m2(nextafterf(61440.0f, 0)), 0x7b);
	assert_int_equal(ndet_float_to_fp8_e5m2(61440.0f), 0x7b);
	assert_int_equal(ndet_float_to_fp8_e5m2(65536.0f), 0x7b);
	assert_int_equal(ndet_float_to_fp8_e5m2(-65536.0f), 0xfb);
	assert_int_equal(ndet_float_to_fp8_e5m2(INFINITY), 0x7c);
	assert_int_equal(ndet_float_to_fp8_e5m2(-INFINITY), 0xfc);
	assert_true(fp8_is_nan(NDET_DTYPE_F8E5M2, ndet_float_to_fp8_e5m2(NAN)));
	assert_true(fp8_is_nan(NDET_DTYPE_F8E5M2, ndet_float_to_fp8_e5m2(-NAN)));
	/* 53248 is the tie between 49152 (0x7a, even) and 57344 (0x7b). */
	assert_int_equal(ndet_float_to_fp8_e5m2(53248.0f), 0x7a);
	assert_int_equal(ndet_float_to_fp8_e5m2(nextafterf(53248.0f, INFINITY)), 0x7b);
	assert_int_equal(ndet_float_to_fp8_e5m2(0x1p-17f), 0x00);
	assert_int_equal(ndet_float_to_fp8_e5m2(-0x1p-17f), 0x80);
	assert_int_equal(ndet_float_to_fp8_e5m2(nextafterf(0x1p-17f, 1)), 0x01);
	assert_int_equal(ndet_float_to_fp8_e5m2(3 * 0x1p-17f), 0x02);
	assert_int_equal(ndet_float_to_fp8_e5m2(7 * 0x1p-17f), 0x04);
}

/*
 * The one final rounding against a rounding at every node, by hand.  E4M3 spacing in
 * [16, 32) is 2: 16 + 1 = 17 is a tie that a node rounds to 16, so (16+1)+(1+0) gives
 * 16 when rounded per node and 18 when rounded once.  E5M2 spacing in [16, 32) is 4:
 * the same with 2s.  E4M3 sums are exact in f32 in every order; E5M2's are not:
 * next to 2^15 the f32 spacing is 2^-8, so 2^-10 vanishes there unless 2^15 has
 * already cancelled.
 */
static void test_fp8_sum_rounding_and_order_by_hand(void **state)
{
	(void)state;
	const ndet_dtype_t e4m3 = NDET_DTYPE_F8E4M3, e5m2 = NDET_DTYPE_F8E5M2;
	const uint8_t e4m3_ones[4] = {0x58 /* 16 */, 0x38 /* 1 */, 0x38, 0x00};
	const uint8_t e5m2_twos[4] = {0x4c /* 16 */, 0x40 /* 2 */, 0x40, 0x00};

	assert_int_equal(tree_8(e4m3, NDET_OP_SUM, 4, e4m3_ones), 0x59 /* 18 */);
	assert_int_equal(sequential_8(e4m3, NDET_OP_SUM, 4, e4m3_ones), 0x59);
	assert_int_equal(node_rounded_8(e4m3, NDET_OP_SUM, 4, e4m3_ones), 0x58 /* 16 */);
	assert_int_equal(tree_8(e5m2, NDET_OP_SUM, 4, e5m2_twos), 0x4d /* 20 */);
	assert_int_equal(sequential_8(e5m2, NDET_OP_SUM, 4, e5m2_twos), 0x4d);
	assert_int_equal(node_rounded_8(e5m2, NDET_OP_SUM, 4, e5m2_twos), 0x4c /* 16 */);

	/* E4M3: (1+16)+1 = 18 by any order; per node 17 -> 16, 16 + 1 -> 16. */
	const uint8_t e4m3_three[3] = {0x38, 0x58, 0x38};

	assert_int_equal(tree_8(e4m3, NDET_OP_SUM, 3, e4m3_three), 0x59);
	assert_int_equal(node_rounded_8(e4m3, NDET_OP_SUM, 3, e4m3_three), 0x58);

	/* E5M2, s = 2^-10 (0x14), L = 2^15 (0x78). */
	const uint8_t four[4] = {0x14, 0x78, 0xf8, 0x14};
	const uint8_t five[5] = {0x78, 0x14, 0xf8, 0x14, 0x14};

	/* (s+L)+(-L+s) = L-L = 0; ((s+L)-L)+s = s. */
	assert_int_equal(tree_8(e5m2, NDET_OP_SUM, 4, four), 0x00);
	assert_int_equal(sequential_8(e5m2, NDET_OP_SUM, 4, four), 0x14);
	/* ((L+s)+(-L+s))+s = s; L+s-L+s+s = 2s = 2^-9 (0x18). */
	assert_int_equal(tree_8(e5m2, NDET_OP_SUM, 5, five), 0x14);
	assert_int_equal(sequential_8(e5m2, NDET_OP_SUM, 5, five), 0x18);

	/* The same values in E4M3 cannot absorb: 2^-9 next to 2^7 is exact in f32. */
	const uint8_t e4m3_four[4] = {0x01, 0x70 /* 128 */, 0xf0, 0x01};

	assert_int_equal(tree_8(e4m3, NDET_OP_SUM, 4, e4m3_four), 0x02);
	assert_int_equal(sequential_8(e4m3, NDET_OP_SUM, 4, e4m3_four), 0x02);
	assert_int_equal(node_rounded_8(e4m3, NDET_OP_SUM, 4, e4m3_four), 0x00);
}

/* Saturation, NaN, inf, signed zeros, min/max and prod in fp8, by hand. */
static void test_fp8_specials_by_hand(void **state)
{
	(void)state;
	const ndet_dtype_t e4m3 = NDET_DTYPE_F8E4M3, e5m2 = NDET_DTYPE_F8E5M2;

	/* E4M3: 448 + 448 = 896 in f32, saturated to 448; the exponent-all-ones
	 * patterns below 0x7f are numbers: 256 + 128 = 384 (0x7c). */
	assert_int_equal(tree_8(e4m3, NDET_OP_SUM, 2, (const uint8_t[]){0x7e, 0x7e}), 0x7e);
	assert_int_equal(tree_8(e4m3, NDET_OP_SUM, 2, (const uint8_t[]){0xfe, 0xfe}), 0xfe);
	assert_int_equal(tree_8(e4m3, NDET_OP_AVG, 2, (const uint8_t[]){0x7e, 0x7e}), 0x7e);
	assert_int_equal(tree_8(e4m3, NDET_OP_PROD, 2, (const uint8_t[]){0x7e, 0x40}), 0x7e);
	assert_int_equal(tree_8(e4m3, NDET_OP_SUM, 2, (const uint8_t[]){0x78, 0x70}), 0x7c);
	assert_int_equal(tree_8(e4m3, NDET_OP_SUM, 2, (const uint8_t[]){0x78, 0x00}), 0x78);
	/* (448 + 448) + (-448 + 0): the f32 partial sums may exceed 448, only the root rounds. */
	assert_int_equal(tree_8(e4m3, NDET_OP_SUM, 4, (const uint8_t[]){0x7e, 0x7e, 0xfe, 0x00}),
			 0x7e);
	assert_int_equal(
		node_rounded_8(e4m3, NDET_OP_SUM, 4, (const uint8_t[]){0x7e, 0x7e, 0xfe, 0x00}),
		0x00);
	assert_int_equal(tree_8(e4m3, NDET_OP_SUM, 4, (const uint8_t[]){0x7e, 0x7e, 0xfe, 0xf0}),
			 0x7a /* 896 - 576 = 320 */);

	/*
	 * E5M2: inf + 1 = inf (only finite values saturate: NCCL's per-step satfinite
	 * would give 57344); inf - inf = NaN; finite overflow saturates.
	 */
	assert_int_equal(tree_8(e5m2, NDET_OP_SUM, 2, (const uint8_t[]){0x7c, 0x3c}), 0x7c);
	assert_int_equal(tree_8(e5m2, NDET_OP_SUM, 2, (const uint8_t[]){0xfc, 0x3c}), 0xfc);
	assert_true(fp8_is_nan(e5m2, tree_8(e5m2, NDET_OP_SUM, 2, (const uint8_t[]){0x7c, 0xfc})));
	assert_int_equal(tree_8(e5m2, NDET_OP_SUM, 2, (const uint8_t[]){0x7b, 0x7b}), 0x7b);
	assert_int_equal(tree_8(e5m2, NDET_OP_SUM, 2, (const uint8_t[]){0x7b, 0x3c}), 0x7b);
	assert_true(fp8_is_nan(e5m2, tree_8(e5m2, NDET_OP_PROD, 2, (const uint8_t[]){0x7c, 0x00})));
	/* max(inf, 2) is inf, as a one-rank call (a copy) leaves an inf. */
	assert_int_equal(tree_8(e5m2, NDET_OP_MAX, 2, (const uint8_t[]){0x7c, 0x40}), 0x7c);
	assert_int_equal(tree_8(e5m2, NDET_OP_MIN, 2, (const uint8_t[]){0xfc, 0x40}), 0xfc);
	/* One rank: every pattern but NaN comes back unchanged (its NaN stays NaN). */
	for (uint32_t b = 0; b <= 0xff; b++) {
		const uint8_t x = (uint8_t)b;
		for (int d = 0; d < 2; d++) {
			const ndet_dtype_t dtype = d == 0 ? e4m3 : e5m2;
			if (fp8_is_nan(dtype, x))
				assert_true(fp8_is_nan(dtype, tree_8(dtype, NDET_OP_SUM, 1, &x)));
			else
				assert_int_equal(tree_8(dtype, NDET_OP_SUM, 1, &x), x);
		}
	}
	assert_int_equal(tree_8(e5m2, NDET_OP_MIN, 2, (const uint8_t[]){0x7c, 0x40}), 0x40);

	for (int d = 0; d < 2; d++) {
		ndet_dtype_t dtype = d == 0 ? e4m3 : e5m2;
		const uint8_t nan = d == 0 ? 0x7f : 0x7e, two = 0x40, minus_two = 0xc0;
		const uint8_t one = d == 0 ? 0x38 : 0x3c;

		/* NaN propagates through sum/prod/avg, with either sign. */
		for (ndet_op_t op = NDET_OP_SUM; op <= NDET_OP_AVG; op++) {
			if (op == NDET_OP_MIN || op == NDET_OP_MAX)
				continue;
			assert_true(fp8_is_nan(
				dtype, tree_8(dtype, op, 3, (const uint8_t[]){one, nan, two})));
			const uint8_t negative_nan[3] = {one, two, (uint8_t)(nan | 0x80)};

			assert_true(fp8_is_nan(dtype, tree_8(dtype, op, 3, negative_nan)));
		}
		/* min/max suppress NaN, in any position. */
		assert_int_equal(tree_8(dtype, NDET_OP_MIN, 3, (const uint8_t[]){nan, two, nan}),
				 two);
		assert_int_equal(tree_8(dtype, NDET_OP_MAX, 3,
					(const uint8_t[]){(uint8_t)(nan | 0x80), minus_two, nan}),
				 minus_two);
		assert_int_equal(
			tree_8(dtype, NDET_OP_MIN, 4, (const uint8_t[]){one, nan, minus_two, nan}),
			minus_two);
		assert_true(
			fp8_is_nan(dtype, pair_8(dtype, NDET_OP_MAX, nan, (uint8_t)(nan | 0x80))));
		/* Two different NaNs: the same bits in either order. */
		assert_int_equal(pair_8(dtype, NDET_OP_MIN, 0x7f, 0xff),
				 pair_8(dtype, NDET_OP_MIN, 0xff, 0x7f));

		/* Signed zeros: -0 < +0 for min/max; IEEE sums and products. */
		assert_int_equal(pair_8(dtype, NDET_OP_MIN, 0x00, 0x80), 0x80);
		assert_int_equal(pair_8(dtype, NDET_OP_MIN, 0x80, 0x00), 0x80);
		assert_int_equal(pair_8(dtype, NDET_OP_MAX, 0x00, 0x80), 0x00);
		assert_int_equal(pair_8(dtype, NDET_OP_MAX, 0x80, 0x00), 0x00);
		assert_int_equal(
			tree_8(dtype, NDET_OP_SUM, 4, (const uint8_t[]){0x80, 0x80, 0x80, 0x80}),
			0x80);
		assert_int_equal(pair_8(dtype, NDET_OP_SUM, 0x80, 0x00), 0x00);
		assert_int_equal(pair_8(dtype, NDET_OP_PROD, 0x00, 0x80), 0x80);
		assert_int_equal(tree_8(dtype, NDET_OP_AVG, 3, (const uint8_t[]){0x80, 0x80, 0x80}),
				 0x80);

		/* Underflow keeps the sign: half the smallest subnormal ties to -0; one and
		 * a half units tie to the even two units. */
		assert_int_equal(pair_8(dtype, NDET_OP_AVG, 0x81, 0x00), 0x80);
		assert_int_equal(pair_8(dtype, NDET_OP_AVG, 0x01, 0x00), 0x00);
		assert_int_equal(pair_8(dtype, NDET_OP_AVG, 0x83, 0x00), 0x82);
		/* Subnormals add in f32 and come back as subnormals. */
		assert_int_equal(tree_8(dtype, NDET_OP_SUM, 3, (const uint8_t[]){0x01, 0x01, 0x01}),
				 0x03);
	}
}

/* avg is the f32 tree sum divided by n, then one rounding; prod rounds once too. */
static void test_fp8_avg_prod_by_hand(void **state)
{
	(void)state;
	const ndet_dtype_t e4m3 = NDET_DTYPE_F8E4M3, e5m2 = NDET_DTYPE_F8E5M2;

	/* (16+1)+1 = 18, 18/3 = 6 (0x4c); per node 16/3 = 5.33 -> 5.5 (0x4b). */
	const uint8_t e4m3_three[3] = {0x58, 0x38, 0x38};

	assert_int_equal(tree_8(e4m3, NDET_OP_AVG, 3, e4m3_three), 0x4c);
	assert_int_equal(node_rounded_8(e4m3, NDET_OP_AVG, 3, e4m3_three), 0x4b);
	/* (1+2)+4 = 7, 7/3 = 2.33 in f32, nearest E4M3 2.25 (0x41). */
	assert_int_equal(tree_8(e4m3, NDET_OP_AVG, 3, (const uint8_t[]){0x38, 0x40, 0x48}), 0x41);
	/* E5M2: (16+2)+(2+0) = 20, 20/4 = 5 (0x45); per node 16/4 = 4 (0x44). */
	const uint8_t e5m2_four[4] = {0x4c, 0x40, 0x40, 0x00};

	assert_int_equal(tree_8(e5m2, NDET_OP_AVG, 4, e5m2_four), 0x45);
	assert_int_equal(node_rounded_8(e5m2, NDET_OP_AVG, 4, e5m2_four), 0x44);
	/* n = 1: the value itself. */
	assert_int_equal(tree_8(e5m2, NDET_OP_AVG, 1, (const uint8_t[]){0x45}), 0x45);

	/*
	 * prod: 1.125^3 = 1.423828125 in f32 (exact), E4M3 spacing in [1, 2) is 1/8:
	 * nearest 1.375 (0x3b).  Per node: 1.125^2 = 1.265625 -> 1.25, x 1.125 =
	 * 1.40625 -> 1.375 as well; 1.125^4 = 1.6018 -> 1.625 (0x3d) once, but per node
	 * 1.25 x 1.25 = 1.5625 -> 1.5 (0x3c).
	 */
	assert_int_equal(tree_8(e4m3, NDET_OP_PROD, 3, (const uint8_t[]){0x39, 0x39, 0x39}), 0x3b);
	assert_int_equal(tree_8(e4m3, NDET_OP_PROD, 4, (const uint8_t[]){0x39, 0x39, 0x39, 0x39}),
			 0x3d);
	assert_int_equal(
		node_rounded_8(e4m3, NDET_OP_PROD, 4, (const uint8_t[]){0x39, 0x39, 0x39, 0x39}),
		0x3c);
}

/*
 * PreMulSum with fp8 scalars: each product is exact in f32 and only the root rounds.
 * E4M3: 1.125 x 3 = 3.375 (a tie in E4M3 that would round to 3.5), minus 3.25 x 1:
 * 0.125 (0x20); with the product rounded to E4M3 first it would be 0.25 (0x28).
 * E5M2: 1.25 x 1.25 = 1.5625 (E5M2 would round it to 1.5), minus 1.5 x 1: 2^-4
 * (0x2c); with the product rounded first, 0.
 */
static void test_fp8_premulsum_by_hand(void **state)
{
	(void)state;
	const uint8_t e4m3_x0[1] = {0x39}, e4m3_x1[1] = {0xc5};
	const uint8_t e4m3_scalars[2] = {0x44, 0x38};
	const void *e4m3_views[2] = {e4m3_x0, e4m3_x1};
	uint8_t out = 0xff;

	assert_int_equal(
		ndet_reference_premulsum(e4m3_views, e4m3_scalars, 2, &out, 1, NDET_DTYPE_F8E4M3),
		NDET_OK);
	assert_int_equal(out, 0x20);
	assert_int_equal(ndet_float_to_fp8_e4m3(3.375f), 0x46); /* what a rounded product is */

	const uint8_t e5m2_x0[1] = {0x3d}, e5m2_x1[1] = {0xbe};
	const uint8_t e5m2_scalars[2] = {0x3d, 0x3c};
	const void *e5m2_views[2] = {e5m2_x0, e5m2_x1};

	out = 0xff;
	assert_int_equal(
		ndet_reference_premulsum(e5m2_views, e5m2_scalars, 2, &out, 1, NDET_DTYPE_F8E5M2),
		NDET_OK);
	assert_int_equal(out, 0x2c);
	assert_int_equal(ndet_float_to_fp8_e5m2(1.5625f), 0x3e);

	/* A scalar that saturates the result: 448 x 2 = 896 -> 448. */
	const uint8_t big[1] = {0x7e};
	const void *big_view[1] = {big};
	const uint8_t two[1] = {0x40};

	assert_int_equal(ndet_reference_premulsum(big_view, two, 1, &out, 1, NDET_DTYPE_F8E4M3),
			 NDET_OK);
	assert_int_equal(out, 0x7e);
}

/*
 * n = 5 written out as ((0+1)+(2+3))+4 in float and rounded by the slow fp8
 * reference; the per-node rounding written out as well, to check the counterexample
 * the random-data test relies on.
 */
static void test_fp8_match_tree_expression(void **state)
{
	(void)state;
	enum { count = 4096, n = 5 };
	static uint8_t data[n][count], result[count], rounded[count];

	for (size_t k = 0; k < ARRAY_SIZE(fp8_specs); k++) {
		ndet_dtype_t dtype = fp8_specs[k].dtype;
		const void *inputs[n];

		fill_cancelling_ranks(dtype, data, sizeof(data[0]), count, n, inputs);
		assert_int_equal(
			ndet_reference_allreduce(inputs, n, result, count, dtype, NDET_OP_SUM),
			NDET_OK);
		assert_int_equal(ndet_reference_allreduce_node_rounded(inputs, n, rounded, count,
								       dtype, NDET_OP_SUM),
				 NDET_OK);
		for (size_t i = 0; i < count; i++) {
			float x[n];

			for (int r = 0; r < n; r++)
				x[r] = (float)slow_fp8_value(&fp8_specs[k], data[r][i]);

			float sum = ((x[0] + x[1]) + (x[2] + x[3])) + x[4];
			float node = slow_fp8_node(
				dtype,
				slow_fp8_node(dtype, slow_fp8_node(dtype, x[0] + x[1]) +
							     slow_fp8_node(dtype, x[2] + x[3])) +
					x[4]);

			if (isnan(sum))
				assert_true(fp8_is_nan(dtype, result[i]));
			else if (result[i] != slow_round_to_fp8(dtype, sum))
				fail_msg("%s element %zu: 0x%02x, expected 0x%02x",
					 ndet_dtype_name(dtype), i, result[i],
					 slow_round_to_fp8(dtype, sum));
			if (isnan(node))
				assert_true(fp8_is_nan(dtype, rounded[i]));
			else
				assert_int_equal(rounded[i], slow_round_to_fp8(dtype, node));
		}
	}
}

/*
 * The per-node rounding: the tree itself for f32 and f64, by hand for f16/bf16, and
 * min/max never round (their results are inputs).
 */
static void test_node_rounded_reference(void **state)
{
	(void)state;
	enum { count = 2048, n = 7 };

	for (ndet_dtype_t dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
		void *data[n], *tree = malloc(count * 8), *rounded = malloc(count * 8);
		const void *inputs[n];
		int exact = dtype == NDET_DTYPE_F32 || dtype == NDET_DTYPE_F64;

		for (int r = 0; r < n; r++) {
			data[r] = malloc(count * ndet_dtype_size(dtype));
			ndet_test_fill_rank(dtype, data[r], 0, count, 21, r, n,
					    NDET_TEST_DATA_CANCEL | NDET_TEST_DATA_SPECIALS);
			inputs[r] = data[r];
		}
		for (ndet_op_t op = 0; op < NDET_OP_COUNT; op++) {
			assert_int_equal(
				ndet_reference_allreduce(inputs, n, tree, count, dtype, op),
				NDET_OK);
			assert_int_equal(ndet_reference_allreduce_node_rounded(inputs, n, rounded,
									       count, dtype, op),
					 NDET_OK);
			size_t differences =
				ndet_test_count_differences(dtype, tree, rounded, count, NULL);

			if (exact || op == NDET_OP_MIN || op == NDET_OP_MAX)
				assert_int_equal(differences, 0);
			else if (op == NDET_OP_SUM && differences <= count / 20)
				fail_msg("%s sum: per-node rounding differs in only %zu of %d",
					 ndet_dtype_name(dtype), differences, count);
		}
		for (int r = 0; r < n; r++)
			free(data[r]);
		free(tree);
		free(rounded);
	}

	/* f16: 2048 + 1 ties to 2048 at a node; bf16 the same at 256. */
	uint16_t result;
	const uint16_t h[4] = {0x6800, 0x3c00, 0x3c00, 0};
	const uint16_t bf[4] = {0x4380, 0x3f80, 0x3f80, 0};

	reduce_one_node_rounded(NDET_DTYPE_F16, NDET_OP_SUM, 4, h, &result);
	assert_int_equal(result, 0x6800);
	assert_int_equal(tree_16(NDET_DTYPE_F16, NDET_OP_SUM, 4, h), 0x6801);
	reduce_one_node_rounded(NDET_DTYPE_BF16, NDET_OP_SUM, 4, bf, &result);
	assert_int_equal(result, 0x4380);
	assert_int_equal(tree_16(NDET_DTYPE_BF16, NDET_OP_SUM, 4, bf), 0x4381);
}

/* ---------------------------------------------------------------- random data */

struct rank_buffers {
	void *data[NDET_MAX_RANKS];
	const void *inputs[NDET_MAX_RANKS];
	const void *reversed[NDET_MAX_RANKS];
	void *tree, *other;
};

static void buffers_alloc(struct rank_buffers *b, ndet_dtype_t dtype, int n, size_t count)
{
	size_t bytes = count * ndet_dtype_size(dtype);

	for (int r = 0; r < n; r++) {
		b->data[r] = malloc(bytes);
		assert_non_null(b->data[r]);
		b->inputs[r] = b->data[r];
		b->reversed[n - 1 - r] = b->data[r];
	}
	b->tree = malloc(bytes);
	b->other = malloc(bytes);
	assert_non_null(b->tree);
	assert_non_null(b->other);
}

static void buffers_free(struct rank_buffers *b, int n)
{
	for (int r = 0; r < n; r++)
		free(b->data[r]);
	free(b->tree);
	free(b->other);
}

/*
 * The data discriminates: the tree differs from the left-to-right order (n >= 4) and
 * from the right-to-left order x0+(x1+(...)) (n >= 3, computed as left to right over
 * the reversed inputs, since a+b = b+a) in more than 5 % of the elements.  For n = 3
 * the tree is the left-to-right order, bit for bit.
 *
 * Except f8e4m3: its f32 sums are exact (ndet_reference.h), so every order gives the
 * same bits and no data can tell orders apart.  That is asserted instead, and the
 * data must tell what an implementation can get wrong there: the one final rounding
 * against a rounding to e4m3 at every node.
 */
static void check_e4m3_order_free(struct rank_buffers *b, int n, size_t count, ndet_op_t op)
{
	const ndet_dtype_t dtype = NDET_DTYPE_F8E4M3;
	size_t differences;

	ndet_reference_allreduce_sequential(b->inputs, n, b->other, count, dtype, op);
	assert_int_equal(ndet_test_count_differences(dtype, b->tree, b->other, count, NULL), 0);
	ndet_reference_allreduce_sequential(b->reversed, n, b->other, count, dtype, op);
	assert_int_equal(ndet_test_count_differences(dtype, b->tree, b->other, count, NULL), 0);
	assert_int_equal(
		ndet_reference_allreduce_node_rounded(b->inputs, n, b->other, count, dtype, op),
		NDET_OK);
	differences = ndet_test_count_differences(dtype, b->tree, b->other, count, NULL);
	if (differences <= count / 20)
		fail_msg("f8e4m3 %s n=%d: one rounding and per-node rounding differ in %zu of %zu "
			 "elements",
			 ndet_op_name(op), n, differences, count);
}

static void test_random_data_discriminates_orders(void **state)
{
	(void)state;
	enum { count = 4096 };
	const size_t minimum = count / 20;

	for (ndet_dtype_t dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
		for (int n = 3; n <= NDET_MAX_RANKS; n++) {
			struct rank_buffers b;
			size_t differences;

			buffers_alloc(&b, dtype, n, count);
			for (int r = 0; r < n; r++)
				ndet_test_fill_rank(dtype, b.data[r], 0, count, 100 + (uint64_t)n,
						    r, n, NDET_TEST_DATA_CANCEL);
			for (ndet_op_t op = NDET_OP_SUM; op <= NDET_OP_AVG; op += NDET_OP_AVG) {
				assert_int_equal(ndet_reference_allreduce(b.inputs, n, b.tree,
									  count, dtype, op),
						 NDET_OK);
				if (dtype == NDET_DTYPE_F8E4M3) {
					check_e4m3_order_free(&b, n, count, op);
					continue;
				}
				assert_int_equal(ndet_reference_allreduce_sequential(
							 b.inputs, n, b.other, count, dtype, op),
						 NDET_OK);
				differences = ndet_test_count_differences(dtype, b.tree, b.other,
									  count, NULL);
				if (n == 3)
					assert_int_equal(differences, 0);
				else if (differences <= minimum)
					fail_msg("%s %s n=%d: tree and left-to-right differ in "
						 "%zu of %d elements",
						 ndet_dtype_name(dtype), ndet_op_name(op), n,
						 differences, count);
				assert_int_equal(ndet_reference_allreduce_sequential(
							 b.reversed, n, b.other, count, dtype, op),
						 NDET_OK);
				differences = ndet_test_count_differences(dtype, b.tree, b.other,
									  count, NULL);
				if (differences <= minimum)
					fail_msg("%s %s n=%d: tree and right-to-left differ in "
						 "%zu of %d elements",
						 ndet_dtype_name(dtype), ndet_op_name(op), n,
						 differences, count);
			}
			buffers_free(&b, n);
		}
	}
}

/*
 * Independent values without cancellation pairs already discriminate where the
 * accumulation type is the storage type (f32, f64), for sums and products.
 */
static void test_independent_random_data_discriminates_f32_f64(void **state)
{
	(void)state;
	enum { count = 4096 };
	const ndet_dtype_t dtypes[] = {NDET_DTYPE_F32, NDET_DTYPE_F64};
	const ndet_op_t ops[] = {NDET_OP_SUM, NDET_OP_PROD};

	for (size_t d = 0; d < ARRAY_SIZE(dtypes); d++) {
		for (int n = 4; n <= NDET_MAX_RANKS; n++) {
			struct rank_buffers b;

			buffers_alloc(&b, dtypes[d], n, count);
			for (int r = 0; r < n; r++)
				ndet_test_fill_random(dtypes[d], b.data[r], count,
						      1000 + (uint64_t)r, 0);
			for (size_t o = 0; o < ARRAY_SIZE(ops); o++) {
				ndet_reference_allreduce(b.inputs, n, b.tree, count, dtypes[d],
							 ops[o]);
				ndet_reference_allreduce_sequential(b.inputs, n, b.other, count,
								    dtypes[d], ops[o]);
				size_t differences = ndet_test_count_differences(
					dtypes[d], b.tree, b.other, count, NULL);

				if (differences <= count / 20)
					fail_msg("%s %s n=%d: %zu of %d differ",
						 ndet_dtype_name(dtypes[d]), ndet_op_name(ops[o]),
						 n, differences, count);
			}
			buffers_free(&b, n);
		}
	}
}

/* min and max never depend on order, NaNs and signed zeros included. */
static void test_min_max_order_independent(void **state)
{
	(void)state;
	enum { count = 4096 };

	for (ndet_dtype_t dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
		for (int n = 1; n <= NDET_MAX_RANKS; n++) {
			struct rank_buffers b;

			buffers_alloc(&b, dtype, n, count);
			for (int r = 0; r < n; r++)
				ndet_test_fill_rank(dtype, b.data[r], 0, count, 5, r, n,
						    NDET_TEST_DATA_SPECIALS);
			for (ndet_op_t op = NDET_OP_MIN; op <= NDET_OP_MAX; op++) {
				ndet_reference_allreduce(b.inputs, n, b.tree, count, dtype, op);
				ndet_reference_allreduce_sequential(b.reversed, n, b.other, count,
								    dtype, op);
				/* Bits, NaNs included (count_differences would forgive payloads).
				 */
				assert_memory_equal(b.tree, b.other,
						    count * ndet_dtype_size(dtype));
			}
			buffers_free(&b, n);
		}
	}
}

/* avg is the tree sum in the accumulation type divided once by n, then rounded. */
static void test_avg_is_tree_sum_divided_by_n(void **state)
{
	(void)state;
	enum { count = 4096 };
	static float widened[NDET_MAX_RANKS][count], sum[count];

	for (ndet_dtype_t dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
		for (int n = 1; n <= NDET_MAX_RANKS; n++) {
			struct rank_buffers b;
			const void *widened_inputs[NDET_MAX_RANKS];

			buffers_alloc(&b, dtype, n, count);
			for (int r = 0; r < n; r++)
				ndet_test_fill_rank(dtype, b.data[r], 0, count, 77, r, n,
						    NDET_TEST_DATA_CANCEL |
							    NDET_TEST_DATA_SPECIALS);
			ndet_reference_allreduce(b.inputs, n, b.tree, count, dtype, NDET_OP_AVG);
			if (dtype == NDET_DTYPE_F64) {
				ndet_reference_allreduce(b.inputs, n, b.other, count, dtype,
							 NDET_OP_SUM);
				for (size_t i = 0; i < count; i++)
					((double *)b.other)[i] /= (double)n;
			} else {
				/* The f32 sum of the exactly widened inputs is the accumulator. */
				for (int r = 0; r < n; r++) {
					for (size_t i = 0; i < count; i++)
						widened[r][i] = (float)ndet_test_element_to_double(
							dtype, b.data[r], i);
					widened_inputs[r] = widened[r];
				}
				ndet_reference_allreduce(widened_inputs, n, sum, count,
							 NDET_DTYPE_F32, NDET_OP_SUM);
				for (size_t i = 0; i < count; i++) {
					float average = sum[i] / (float)n;

					if (dtype == NDET_DTYPE_F32)
						((float *)b.other)[i] = average;
					else if (dtype == NDET_DTYPE_F16)
						((uint16_t *)b.other)[i] =
							gcc_float_to_half(average);
					else if (dtype == NDET_DTYPE_BF16)
						((uint16_t *)b.other)[i] =
							slow_round_to_16(dtype, average);
					else
						((uint8_t *)b.other)[i] =
							slow_round_to_fp8(dtype, average);
				}
			}
			size_t first;

			if (ndet_test_count_differences(dtype, b.tree, b.other, count, &first) !=
			    0) {
				char got[64], want[64];

				ndet_test_format_element(dtype, b.tree, first, got, sizeof(got));
				ndet_test_format_element(dtype, b.other, first, want, sizeof(want));
				fail_msg("%s avg n=%d element %zu: %s, expected %s",
					 ndet_dtype_name(dtype), n, first, got, want);
			}
			buffers_free(&b, n);
		}
	}
}

/* ---------------------------------------------------------------- API edges */

static void test_output_may_alias_an_input(void **state)
{
	(void)state;
	enum { count = 1000, n = 5 };

	for (ndet_dtype_t dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
		struct rank_buffers b;
		size_t bytes = count * ndet_dtype_size(dtype);

		buffers_alloc(&b, dtype, n, count);
		for (int alias = 0; alias < n; alias += n - 1) {
			for (int r = 0; r < n; r++)
				ndet_test_fill_rank(dtype, b.data[r], 0, count, 3, r, n,
						    NDET_TEST_DATA_CANCEL);
			ndet_reference_allreduce(b.inputs, n, b.tree, count, dtype, NDET_OP_SUM);
			assert_int_equal(ndet_reference_allreduce(b.inputs, n, b.data[alias], count,
								  dtype, NDET_OP_SUM),
					 NDET_OK);
			assert_memory_equal(b.data[alias], b.tree, bytes);
		}
		buffers_free(&b, n);
	}
}

static void test_invalid_arguments(void **state)
{
	(void)state;
	float a = 1, c = 2, out;
	const void *inputs[2] = {&a, &c};
	const void *with_null[2] = {&a, NULL};

	typedef ndet_status_t (*reduce_fn)(const void *const *, int, void *, size_t, ndet_dtype_t,
					   ndet_op_t);
	const reduce_fn functions[] = {ndet_reference_allreduce,
				       ndet_reference_allreduce_sequential,
				       ndet_reference_allreduce_node_rounded};

	for (size_t f = 0; f < ARRAY_SIZE(functions); f++) {
		reduce_fn reduce = functions[f];

		assert_int_equal(reduce(inputs, 0, &out, 1, NDET_DTYPE_F32, NDET_OP_SUM),
				 NDET_ERR_INVALID_ARGUMENT);
		assert_int_equal(reduce(inputs, -1, &out, 1, NDET_DTYPE_F32, NDET_OP_SUM),
				 NDET_ERR_INVALID_ARGUMENT);
		assert_int_equal(reduce(inputs, 2, &out, 1, NDET_DTYPE_COUNT, NDET_OP_SUM),
				 NDET_ERR_INVALID_ARGUMENT);
		assert_int_equal(reduce(inputs, 2, &out, 1, (ndet_dtype_t)-1, NDET_OP_SUM),
				 NDET_ERR_INVALID_ARGUMENT);
		assert_int_equal(reduce(inputs, 2, &out, 1, NDET_DTYPE_F32, NDET_OP_COUNT),
				 NDET_ERR_INVALID_ARGUMENT);
		assert_int_equal(reduce(NULL, 2, &out, 1, NDET_DTYPE_F32, NDET_OP_SUM),
				 NDET_ERR_INVALID_ARGUMENT);
		assert_int_equal(reduce(inputs, 2, NULL, 1, NDET_DTYPE_F32, NDET_OP_SUM),
				 NDET_ERR_INVALID_ARGUMENT);
		assert_int_equal(reduce(with_null, 2, &out, 1, NDET_DTYPE_F32, NDET_OP_SUM),
				 NDET_ERR_INVALID_ARGUMENT);
		/* Nothing to read or write: pointers are not needed. */
		assert_int_equal(reduce(NULL, 2, NULL, 0, NDET_DTYPE_F32, NDET_OP_SUM), NDET_OK);
		assert_int_equal(reduce(NULL, 0, NULL, 0, NDET_DTYPE_F32, NDET_OP_SUM),
				 NDET_ERR_INVALID_ARGUMENT);
		assert_int_equal(reduce(inputs, 2, &out, 1, NDET_DTYPE_F32, NDET_OP_SUM), NDET_OK);
		assert_true(out == 3.0f);
	}
}

/* Element i does not depend on how many elements a call holds or where it starts. */
static void test_test_data_is_position_stable(void **state)
{
	(void)state;
	enum { count = 512, offset = 77 };
	float whole[count], part[count - offset];

	ndet_test_fill_rank(NDET_DTYPE_F32, whole, 0, count, 9, 2, 5,
			    NDET_TEST_DATA_CANCEL | NDET_TEST_DATA_SPECIALS);
	ndet_test_fill_rank(NDET_DTYPE_F32, part, offset, count - offset, 9, 2, 5,
			    NDET_TEST_DATA_CANCEL | NDET_TEST_DATA_SPECIALS);
	assert_memory_equal(whole + offset, part, sizeof(part));

	/* Deterministic by seed, different across seeds, mixed signs, wide exponents. */
	float again[count], other_seed[count];
	int negative = 0, exponent_low = 1000, exponent_high = -1000;

	ndet_test_fill_random(NDET_DTYPE_F32, again, count, 9, 0);
	ndet_test_fill_random(NDET_DTYPE_F32, other_seed, count, 10, 0);
	ndet_test_fill_random(NDET_DTYPE_F32, whole, count, 9, 0);
	assert_memory_equal(whole, again, sizeof(whole));
	assert_memory_not_equal(whole, other_seed, sizeof(whole));
	for (size_t i = 0; i < count; i++) {
		int exponent;

		assert_true(isfinite(whole[i]) && whole[i] != 0);
		negative += whole[i] < 0;
		frexpf(whole[i], &exponent);
		exponent_low = exponent < exponent_low ? exponent : exponent_low;
		exponent_high = exponent > exponent_high ? exponent : exponent_high;
	}
	assert_true(negative > count / 4 && negative < 3 * count / 4);
	assert_true(exponent_high - exponent_low >= 40);

	/* SPECIALS yields each kind somewhere in a few thousand elements. */
	static uint16_t halves[8192];
	int inf = 0, nan = 0, zero = 0, subnormal = 0;

	ndet_test_fill_random(NDET_DTYPE_F16, halves, ARRAY_SIZE(halves), 4,
			      NDET_TEST_DATA_SPECIALS);
	for (size_t i = 0; i < ARRAY_SIZE(halves); i++) {
		uint16_t h = halves[i] & 0x7fff;

		inf += h == 0x7c00;
		nan += h > 0x7c00;
		zero += h == 0;
		subnormal += h != 0 && h < 0x0400;
	}
	assert_true(inf > 0 && nan > 0 && zero > 0 && subnormal > 0);

	/*
	 * fp8: position-stable too; plain values stay in the wide range (16 of them sum
	 * to at most the largest finite), and SPECIALS gives only patterns valid for the
	 * format: E4M3's NaN is 0x7f/0xff only and it has no inf (the largest finite,
	 * 448, stands in for it).
	 */
	for (size_t k = 0; k < ARRAY_SIZE(fp8_specs); k++) {
		const struct fp8_spec *f = &fp8_specs[k];
		static uint8_t bytes[8192], part_bytes[8192];
		double largest = slow_fp8_value(f, f->largest);
		int largest_seen = 0;

		ndet_test_fill_rank(f->dtype, bytes, 0, count, 9, 2, 5,
				    NDET_TEST_DATA_CANCEL | NDET_TEST_DATA_SPECIALS);
		ndet_test_fill_rank(f->dtype, part_bytes, offset, count - offset, 9, 2, 5,
				    NDET_TEST_DATA_CANCEL | NDET_TEST_DATA_SPECIALS);
		assert_memory_equal(bytes + offset, part_bytes, count - offset);

		ndet_test_fill_random(f->dtype, bytes, ARRAY_SIZE(bytes), 9, 0);
		for (size_t i = 0; i < ARRAY_SIZE(bytes); i++) {
			double value = slow_fp8_value(f, bytes[i]);

			assert_true(isfinite(value) && value != 0);
			assert_true(16 * fabs(value) <= largest);
		}

		inf = nan = zero = subnormal = 0;
		ndet_test_fill_random(f->dtype, bytes, ARRAY_SIZE(bytes), 4,
				      NDET_TEST_DATA_SPECIALS);
		for (size_t i = 0; i < ARRAY_SIZE(bytes); i++) {
			uint8_t bits = bytes[i];
			double value = slow_fp8_value(f, bits);

			inf += isinf(value) != 0;
			nan += isnan(value) != 0;
			assert_int_equal(ndet_test_element_is_nan(f->dtype, &bits, 0),
					 isnan(value) != 0);
			zero += value == 0;
			subnormal += value != 0 && (bits & 0x7f) < (1u << f->mantissa_bits);
			largest_seen += (bits & 0x7f) == f->largest;
			/* E4M3 specials: no big number in place of inf or NaN. */
			if (!f->has_infinity && !isnan(value) && fabs(value) > 15)
				assert_int_equal(bits & 0x7f, f->largest);
		}
		assert_true(nan > 0 && zero > 0 && subnormal > 0 && largest_seen > 0);
		assert_true(f->has_infinity ? inf > 0 : inf == 0);
	}
}

/*
 * 8 ranks x 4 Mi elements, the size the contract's stock-NCCL comparison uses: each
 * element of the large call equals a one-element call on that element, at both ends,
 * around powers of two and at random places (no index is lost or shifted).
 */
static void test_large_reduction_equals_its_elements(void **state)
{
	(void)state;
	enum { n = 8 };
	const size_t count = (size_t)4 << 20;
	struct rank_buffers b;
	const void *one[n];
	uint16_t element;

	buffers_alloc(&b, NDET_DTYPE_BF16, n, count);
	for (int r = 0; r < n; r++)
		ndet_test_fill_rank(NDET_DTYPE_BF16, b.data[r], 0, count, 1, r, n, 0);
	assert_int_equal(
		ndet_reference_allreduce(b.inputs, n, b.tree, count, NDET_DTYPE_BF16, NDET_OP_SUM),
		NDET_OK);
	srand(20261205);
	for (int k = 0; k < 256; k++) {
		size_t i;
		if (k < 2)
			i = k == 0 ? 0 : count - 1;
		else if (k < 64)
			i = (((size_t)1 << (k / 3)) + count - (size_t)(k % 3)) % count;
		else
			i = ((size_t)rand() << 8 ^ (size_t)rand()) % count;
		for (int r = 0; r < n; r++)
			one[r] = (const uint16_t *)b.data[r] + i;
		assert_int_equal(
			ndet_reference_allreduce(one, n, &element, 1, NDET_DTYPE_BF16, NDET_OP_SUM),
			NDET_OK);
		assert_int_equal(element, ((const uint16_t *)b.tree)[i]);
	}
	buffers_free(&b, n);
}

/* Reduce-scatter blocks, concatenated, are the all-reduce bit for bit. */
static void test_reduce_scatter_blocks_equal_allreduce(void **state)
{
	(void)state;
	const size_t recvcount = 37;
	for (int n = 1; n <= 8; n++) {
		for (int dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
			const size_t size = ndet_dtype_size((ndet_dtype_t)dtype);
			const size_t total = recvcount * (size_t)n;
			void *in[8];
			const void *views[8];
			for (int r = 0; r < n; r++) {
				in[r] = malloc(total * size);
				ndet_test_fill_random((ndet_dtype_t)dtype, in[r], total,
						      (uint64_t)(r * 131 + dtype * 7 + n), 0);
				views[r] = in[r];
			}
			for (int op = 0; op < NDET_OP_COUNT; op++) {
				char *all = malloc(total * size), *block = malloc(recvcount * size);
				assert_int_equal(ndet_reference_allreduce(views, n, all, total,
									  (ndet_dtype_t)dtype,
									  (ndet_op_t)op),
						 NDET_OK);
				for (int rank = 0; rank < n; rank++) {
					assert_int_equal(ndet_reference_reduce_scatter(
								 views, n, rank, block, recvcount,
								 (ndet_dtype_t)dtype,
								 (ndet_op_t)op),
							 NDET_OK);
					assert_int_equal(
						ndet_test_count_differences(
							(ndet_dtype_t)dtype, block,
							all + (size_t)rank * recvcount * size,
							recvcount, NULL),
						0);
				}
				free(all);
				free(block);
			}
			for (int r = 0; r < n; r++)
				free(in[r]);
		}
	}
	float x = 1;
	const void *one[1] = {&x};
	float out;
	assert_int_equal(
		ndet_reference_reduce_scatter(one, 1, 1, &out, 1, NDET_DTYPE_F32, NDET_OP_SUM),
		NDET_ERR_INVALID_ARGUMENT);
	assert_int_equal(
		ndet_reference_reduce_scatter(one, 0, 0, &out, 1, NDET_DTYPE_F32, NDET_OP_SUM),
		NDET_ERR_INVALID_ARGUMENT);
}

static void test_premulsum(void **state)
{
	(void)state;
	/* Scalars of 1 give the plain tree sum, for every dtype. */
	for (int dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
		const size_t count = 1001, size = ndet_dtype_size((ndet_dtype_t)dtype);
		void *in[5], *ones = malloc(5 * size), *a = malloc(count * size),
			     *b = malloc(count * size);
		const void *views[5];
		for (int r = 0; r < 5; r++) {
			in[r] = malloc(count * size);
			ndet_test_fill_random((ndet_dtype_t)dtype, in[r], count, (uint64_t)(r + 77),
					      0);
			views[r] = in[r];
			if (dtype == NDET_DTYPE_F32)
				((float *)ones)[r] = 1.0f;
			else if (dtype == NDET_DTYPE_F64)
				((double *)ones)[r] = 1.0;
			else if (dtype == NDET_DTYPE_F16)
				((uint16_t *)ones)[r] = 0x3c00;
			else if (dtype == NDET_DTYPE_BF16)
				((uint16_t *)ones)[r] = 0x3f80;
			else if (dtype == NDET_DTYPE_F8E4M3)
				((uint8_t *)ones)[r] = 0x38;
			else
				((uint8_t *)ones)[r] = 0x3c;
		}
		assert_int_equal(
			ndet_reference_premulsum(views, ones, 5, a, count, (ndet_dtype_t)dtype),
			NDET_OK);
		assert_int_equal(ndet_reference_allreduce(views, 5, b, count, (ndet_dtype_t)dtype,
							  NDET_OP_SUM),
				 NDET_OK);
		assert_int_equal(
			ndet_test_count_differences((ndet_dtype_t)dtype, a, b, count, NULL), 0);
		for (int r = 0; r < 5; r++)
			free(in[r]);
		free(ones);
		free(a);
		free(b);
	}
	/* Each product rounded once in f32, then the tree: hand values. */
	const float x0[1] = {16777216.0f}, x1[1] = {1.0f}, x2[1] = {-16777216.0f};
	const void *views[3] = {x0, x1, x2};
	const float scalars[3] = {1.0f, 3.0f, 1.0f};
	float out = -1;
	/* (2^24 + 3) rounds to 2^24 + 4 in f32; minus 2^24 leaves 4. */
	assert_int_equal(ndet_reference_premulsum(views, scalars, 3, &out, 1, NDET_DTYPE_F32),
			 NDET_OK);
	assert_true(out == 4.0f);
	/* A product that rounds: 3 x (1 + 2^-23) = 3 + 3*2^-23 -> 3 + 2^-21 (ties to even). */
	const float y0[1] = {1.00000012f}, y1[1] = {0.0f};
	const void *yviews[2] = {y0, y1};
	const float yscalars[2] = {3.0f, 1.0f};
	assert_int_equal(ndet_reference_premulsum(yviews, yscalars, 2, &out, 1, NDET_DTYPE_F32),
			 NDET_OK);
	assert_true(out == 3.0f * 1.00000012f);
	assert_int_equal(ndet_reference_premulsum(yviews, NULL, 2, &out, 1, NDET_DTYPE_F32),
			 NDET_ERR_INVALID_ARGUMENT);
}

/*
 * Where the rounding of the products matters, by hand.  f32: each product is rounded
 * to f32 before the tree adds it, so a fused multiply-add (which keeps the product
 * exact) gives other bits.  f16: the product is formed in f32 from the widened
 * input, where it is exact; rounding it to f16 first (as a half-precision multiply
 * would) gives other bits.
 */
/* One value as the bits of each dtype's element: what PreMulSum scalars are made of. */
static void test_element_bits(void **state)
{
	(void)state;
	assert_int_equal(ndet_reference_element_bits(NDET_DTYPE_F64, 0.75), 0x3FE8000000000000ull);
	assert_int_equal(ndet_reference_element_bits(NDET_DTYPE_F32, -1.5), 0xBFC00000u);
	assert_int_equal(ndet_reference_element_bits(NDET_DTYPE_F16, 0.75), 0x3A00u);
	assert_int_equal(ndet_reference_element_bits(NDET_DTYPE_BF16, -1.5), 0xBFC0u);
	assert_int_equal(ndet_reference_element_bits(NDET_DTYPE_F8E4M3, 0.75), 0x34u);
	assert_int_equal(ndet_reference_element_bits(NDET_DTYPE_F8E5M2, 0.75), 0x3Au);
	/* Rounded once to f32 first: 1 + 2^-30 is 1 in f32, and so in every narrower type. */
	assert_int_equal(ndet_reference_element_bits(NDET_DTYPE_F32, 1.0 + 0x1p-30), 0x3F800000u);
	assert_int_equal(ndet_reference_element_bits(NDET_DTYPE_F64, 1.0 + 0x1p-30),
			 0x3FF0000000400000ull);
}

/* The tests' PreMulSum scalars: exact in the narrowest types, never 1, both signs, distinct. */
static void test_test_scalars(void **state)
{
	(void)state;
	int negative = 0;
	for (int r = 0; r < 16; r++) {
		const double s = ndet_reference_test_scalar(r);
		assert_true(s != 1.0 && s != 0.0);
		negative += s < 0;
		for (int q = 0; q < r; q++)
			assert_true(ndet_reference_test_scalar(q) != s);
		assert_true(ndet_fp8_e4m3_to_float((uint8_t)ndet_reference_element_bits(
				    NDET_DTYPE_F8E4M3, s)) == (float)s);
		assert_true(ndet_fp8_e5m2_to_float((uint8_t)ndet_reference_element_bits(
				    NDET_DTYPE_F8E5M2, s)) == (float)s);
		assert_true(ndet_half_to_float((uint16_t)ndet_reference_element_bits(
				    NDET_DTYPE_F16, s)) == (float)s);
		assert_true(ndet_bfloat16_to_float((uint16_t)ndet_reference_element_bits(
				    NDET_DTYPE_BF16, s)) == (float)s);
	}
	assert_true(negative > 0 && negative < 16);
}

static void test_premulsum_product_rounding_by_hand(void **state)
{
	(void)state;
	/* (1 + 2^-23)^2 = 1 + 2^-22 + 2^-46: rounds to 1 + 2^-22 in f32. */
	const float a = 1.0f + 0x1p-23f, b = -(1.0f + 0x1p-22f);
	const float x0[1] = {a}, x1[1] = {b};
	const void *views[2] = {x0, x1};
	const float scalars[2] = {a, 1.0f};
	float out = -1;
	assert_int_equal(ndet_reference_premulsum(views, scalars, 2, &out, 1, NDET_DTYPE_F32),
			 NDET_OK);
	/* Rounded product: exactly 0.  Fused (fma(a, a, b)) it would be 2^-46. */
	assert_true(out == 0.0f && !signbit(out));
	assert_true(fmaf(a, a, b) == 0x1p-46f);

	/* f16: x0 = s0 = 1 + 2^-10 (one f16 ulp above 1), x1 = -(1 + 2^-9), s1 = 1. */
	const uint16_t h0[1] = {0x3c01}, h1[1] = {0xbc02};
	const uint16_t hscalars[2] = {0x3c01, 0x3c00};
	const void *hviews[2] = {h0, h1};
	uint16_t hout = 0xffff;
	assert_int_equal(ndet_reference_premulsum(hviews, hscalars, 2, &hout, 1, NDET_DTYPE_F16),
			 NDET_OK);
	/* In f32: (1 + 2^-9 + 2^-20) - (1 + 2^-9) = 2^-20, an f16 subnormal: 16 x 2^-24.
	 * A product rounded to f16 first (1 + 2^-9 + 2^-20 -> 1 + 2^-9) would give 0. */
	assert_int_equal(hout, 0x0010);
	assert_true(ndet_half_to_float(hout) == 0x1p-20f);

	/* bf16, n = 3, tree (0+1)+2: s = 3, x = 1 + 2^-7 (bf16 ulp at 1): the product
	 * 3 + 3 x 2^-7 is exact in f32 but needs 9 significand bits, one more than bf16. */
	const uint16_t b0[1] = {0x3f81}, b1[1] = {0xc040}, b2[1] = {0x3c00};
	const uint16_t bscalars[3] = {0x4040, 0x3f80, 0x3f80};
	const void *bviews[3] = {b0, b1, b2};
	uint16_t bout = 0;
	assert_int_equal(ndet_reference_premulsum(bviews, bscalars, 3, &bout, 1, NDET_DTYPE_BF16),
			 NDET_OK);
	/* ((3 + 3/128) - 3) + 2^-7 = 3/128 + 1/128 = 2^-5 exactly; a bf16 product
	 * (3 + 3/128 is a tie between 3 + 2/128 and 3 + 4/128: even is 3 + 4/128) would
	 * give 5/128. */
	assert_true(ndet_bfloat16_to_float(bout) == 0x1p-5f);
}

/* PreMulSum and reduce-scatter compose: block r of the pre-multiplied all-reduce. */
static void test_premulsum_reduce_scatter_blocks(void **state)
{
	(void)state;
	const int n = 4;
	const size_t recvcount = 29, total = recvcount * 4;
	for (int dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
		const size_t size = ndet_dtype_size((ndet_dtype_t)dtype);
		void *in[4];
		const void *views[4], *shifted[4];
		unsigned char scalars[4 * 8];
		ndet_test_fill_random((ndet_dtype_t)dtype, scalars, 4, 991 + (uint64_t)dtype, 0);
		char *all = malloc(total * size), *block = malloc(recvcount * size);
		for (int r = 0; r < n; r++) {
			in[r] = malloc(total * size);
			ndet_test_fill_random((ndet_dtype_t)dtype, in[r], total,
					      (uint64_t)(r * 17 + dtype), 0);
			views[r] = in[r];
		}
		assert_int_equal(ndet_reference_premulsum(views, scalars, n, all, total,
							  (ndet_dtype_t)dtype),
				 NDET_OK);
		for (int rank = 0; rank < n; rank++) {
			for (int r = 0; r < n; r++)
				shifted[r] = (const char *)in[r] + (size_t)rank * recvcount * size;
			assert_int_equal(ndet_reference_premulsum(shifted, scalars, n, block,
								  recvcount, (ndet_dtype_t)dtype),
					 NDET_OK);
			assert_int_equal(
				ndet_test_count_differences((ndet_dtype_t)dtype, block,
							    all + (size_t)rank * recvcount * size,
							    recvcount, NULL),
				0);
		}
		for (int r = 0; r < n; r++)
			free(in[r]);
		free(all);
		free(block);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dtype_sizes_and_names),
		cmocka_unit_test(test_tree_string_hand_written),
		cmocka_unit_test(test_tree_string_truncates_like_snprintf),
		cmocka_unit_test(test_tree_string_structure_for_every_n),
		cmocka_unit_test(test_tree_evaluation_matches_tree_string),
		cmocka_unit_test(test_f32_sum_hand_values_order_matters),
		cmocka_unit_test(test_f32_prod_min_max_avg_hand_values),
		cmocka_unit_test(test_f16_bf16_accumulate_in_f32_round_once),
		cmocka_unit_test(test_f16_bf16_match_tree_expression),
		cmocka_unit_test(test_f64_hand_values),
		cmocka_unit_test(test_specials_inf_nan),
		cmocka_unit_test(test_specials_signed_zero),
		cmocka_unit_test(test_specials_subnormals_survive),
		cmocka_unit_test(test_half_round_trip_every_pattern),
		cmocka_unit_test(test_bfloat16_round_trip_every_pattern),
		cmocka_unit_test(test_float_to_half_matches_gcc_and_slow_reference),
		cmocka_unit_test(test_float_to_bfloat16_matches_slow_reference),
		cmocka_unit_test(test_fp8_decode_every_pattern),
		cmocka_unit_test(test_float_to_fp8_matches_slow_reference),
		cmocka_unit_test(test_fp8_sum_rounding_and_order_by_hand),
		cmocka_unit_test(test_fp8_specials_by_hand),
		cmocka_unit_test(test_fp8_avg_prod_by_hand),
		cmocka_unit_test(test_fp8_premulsum_by_hand),
		cmocka_unit_test(test_fp8_match_tree_expression),
		cmocka_unit_test(test_node_rounded_reference),
		cmocka_unit_test(test_random_data_discriminates_orders),
		cmocka_unit_test(test_independent_random_data_discriminates_f32_f64),
		cmocka_unit_test(test_min_max_order_independent),
		cmocka_unit_test(test_avg_is_tree_sum_divided_by_n),
		cmocka_unit_test(test_output_may_alias_an_input),
		cmocka_unit_test(test_invalid_arguments),
		cmocka_unit_test(test_test_data_is_position_stable),
		cmocka_unit_test(test_large_reduction_equals_its_elements),
		cmocka_unit_test(test_reduce_scatter_blocks_equal_allreduce),
		cmocka_unit_test(test_premulsum),
		cmocka_unit_test(test_premulsum_product_rounding_by_hand),
		cmocka_unit_test(test_element_bits),
		cmocka_unit_test(test_test_scalars),
		cmocka_unit_test(test_premulsum_reduce_scatter_blocks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
