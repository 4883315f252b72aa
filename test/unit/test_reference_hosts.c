/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The multi-host contract of the CPU reference (doc/multihost.md): element i is
 * T_hosts(T_local(host 0), ..., T_local(host H-1)) in the accumulation type, rounded
 * once.  Checked against the contract's definition composed from the single-host
 * reference (every layout of up to 7 ranks), against expressions written by hand,
 * and against the mistakes an implementation could make (partials rounded to the
 * data type, avg divided at each stage), which the data must tell apart.  Layouts are
 * written one letter per rank: "ABAB" puts ranks 0 and 2 on host A, 1 and 3 on B.
 */
#include "config.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/ndet_dtype.h"
#include "protocol/ndet_host_order.h"
#include "protocol/ndet_hosts_plan.h"
#include "reference/ndet_reference.h"
#include "test/support/ndet_test_data.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define MAX_RANKS     16
/* The ops, and PreMulSum after them. */
#define OP_PREMUL  NDET_OP_COUNT
#define OPS_ALL    (NDET_OP_COUNT + 1)
#define DATA_FLAGS (NDET_TEST_DATA_CANCEL | NDET_TEST_DATA_SPECIALS)

static const char *op_label(int op)
{
	return op == OP_PREMUL ? "premulsum" : ndet_op_name((ndet_op_t)op);
}

/* ---------------------------------------------------------------- data and layouts */

/* n ranks' inputs of `count` elements and their PreMulSum scalars. */
struct data_set {
	ndet_dtype_t dtype;
	int n;
	size_t count;
	void *data[MAX_RANKS];
	const void *inputs[MAX_RANKS];
	unsigned char scalars[MAX_RANKS * 8];
};

static void data_make(struct data_set *set, ndet_dtype_t dtype, int n, size_t count, uint64_t seed,
		      unsigned flags)
{
	assert_true(n >= 1 && n <= MAX_RANKS);
	set->dtype = dtype;
	set->n = n;
	set->count = count;
	for (int r = 0; r < n; r++) {
		set->data[r] = malloc(count * ndet_dtype_size(dtype));
		assert_non_null(set->data[r]);
		/* Cancelling pairs need two ranks. */
		ndet_test_fill_rank(dtype, set->data[r], 0, count, seed, r, n,
				    n >= 2 ? flags : flags & ~NDET_TEST_DATA_CANCEL);
		set->inputs[r] = set->data[r];
	}
	ndet_test_fill_random(dtype, set->scalars, (size_t)n, seed ^ 0x5ca1a2u, 0);
}

static void data_free(struct data_set *set)
{
	for (int r = 0; r < set->n; r++)
		free(set->data[r]);
}

static void *output_for(const struct data_set *set)
{
	void *out = malloc(set->count * 8);

	assert_non_null(out);
	return out;
}

static bool same_letter(const void *identities, int rank_a, int rank_b)
{
	const char *letters = identities;

	return letters[rank_a] == letters[rank_b];
}

/* host_of of a layout of letters, in the protocol's host order; returns n. */
static int layout_hosts(const char *layout, int *host_of)
{
	int n = (int)strlen(layout), local_of[MAX_RANKS], host_size[MAX_RANKS];

	assert_true(n >= 1 && n <= MAX_RANKS);
	assert_true(ndet_host_order(n, same_letter, layout, host_of, local_of, host_size) >= 1);
	return n;
}

static int hosts_in(const int *host_of, int n)
{
	int nhosts = 0;

	for (int r = 0; r < n; r++)
		if (host_of[r] + 1 > nhosts)
			nhosts = host_of[r] + 1;
	return nhosts;
}

/*
 * The next layout of n ranks, in restricted growth order (every numbering of hosts by
 * lowest rank, each once); false after the last.
 */
static bool next_layout(int *host_of, int n)
{
	for (int i = n - 1; i >= 1; i--) {
		if (host_of[i] < hosts_in(host_of, i)) {
			host_of[i]++;
			for (int k = i + 1; k < n; k++)
				host_of[k] = 0;
			return true;
		}
	}
	return false;
}

/*
 * The layouts whose two-level tree is the single-host tree by doc/multihost.md: one
 * host, or every host holding the same power-of-two number g of consecutive ranks.
 */
static bool single_host_tree(const int *host_of, int n)
{
	int nhosts = hosts_in(host_of, n), g = n / nhosts;

	if (nhosts == 1)
		return true;
	if (n % nhosts != 0 || (g & (g - 1)) != 0)
		return false;
	for (int r = 0; r < n; r++)
		if (host_of[r] != r / g)
			return false;
	return true;
}

/* ---------------------------------------------------------------- the references */

static void reduce_hosts(const struct data_set *set, const int *host_of, int op, void *out)
{
	ndet_status_t status =
		op == OP_PREMUL
			? ndet_reference_premulsum_hosts(set->inputs, set->scalars, host_of, set->n,
							 out, set->count, set->dtype)
			: ndet_reference_allreduce_hosts(set->inputs, host_of, set->n, out,
							 set->count, set->dtype, (ndet_op_t)op);

	assert_int_equal(status, NDET_OK);
}

static void reduce_single_host(const struct data_set *set, int op, void *out)
{
	ndet_status_t status =
		op == OP_PREMUL ? ndet_reference_premulsum(set->inputs, set->scalars, set->n, out,
							   set->count, set->dtype)
				: ndet_reference_allreduce(set->inputs, set->n, out, set->count,
							   set->dtype, (ndet_op_t)op);

	assert_int_equal(status, NDET_OK);
}

static void assert_same_bits(const struct data_set *set, const void *got, const void *want,
			     const char *what, int op)
{
	if (memcmp(got, want, set->count * ndet_dtype_size(set->dtype)) != 0)
		fail_msg("%s %s n=%d: %s", ndet_dtype_name(set->dtype), op_label(op), set->n, what);
}

/* Equal but for NaN payloads (the contract fixes NaN-ness only). */
static void assert_equivalent(const struct data_set *set, const void *got, const void *want,
			      const char *what, int op)
{
	size_t first;

	if (ndet_test_count_differences(set->dtype, got, want, set->count, &first) != 0) {
		char a[64], b[64];

		ndet_test_format_element(set->dtype, got, first, a, sizeof(a));
		ndet_test_format_element(set->dtype, want, first, b, sizeof(b));
		fail_msg("%s %s n=%d %s: element %zu is %s, expected %s",
			 ndet_dtype_name(set->dtype), op_label(op), set->n, what, first, a, b);
	}
}

static size_t differences(const struct data_set *set, const void *a, const void *b)
{
	return ndet_test_count_differences(set->dtype, a, b, set->count, NULL);
}

/* The one rounding of an f32 accumulator to the output type. */
static void store_rounded(ndet_dtype_t dtype, void *out, size_t i, float value)
{
	switch (dtype) {
	case NDET_DTYPE_F16:
		((uint16_t *)out)[i] = ndet_float_to_half(value);
		break;
	case NDET_DTYPE_BF16:
		((uint16_t *)out)[i] = ndet_float_to_bfloat16(value);
		break;
	case NDET_DTYPE_F8E4M3:
		((uint8_t *)out)[i] = ndet_float_to_fp8_e4m3(value);
		break;
	case NDET_DTYPE_F8E5M2:
		((uint8_t *)out)[i] = ndet_float_to_fp8_e5m2(value);
		break;
	default:
		((float *)out)[i] = value;
		break;
	}
}

static ndet_dtype_t accumulation_of(ndet_dtype_t dtype)
{
	return dtype == NDET_DTYPE_F64 ? NDET_DTYPE_F64 : NDET_DTYPE_F32;
}

/* Rank r's leaves in the accumulation type (exactly widened), times s_r for PreMulSum. */
static void *leaves_of(const struct data_set *set, int r, bool premul)
{
	void *leaves = output_for(set);
	double s = premul ? ndet_test_element_to_double(set->dtype, set->scalars, (size_t)r) : 1;

	for (size_t i = 0; i < set->count; i++) {
		double x = ndet_test_element_to_double(set->dtype, set->data[r], i);

		if (set->dtype == NDET_DTYPE_F64)
			((double *)leaves)[i] = premul ? x * s : x;
		else
			((float *)leaves)[i] = premul ? (float)x * (float)s : (float)x;
	}
	return leaves;
}

/* How a composition goes wrong, or (all false) the contract. */
struct composition {
	bool round_partials; /* each host's partial rounded to the data type (sum only) */
	bool avg_per_stage;  /* avg: each host's sum divided by its g, then the hosts' by H */
};

/*
 * The contract by its definition, from the single-host reference: T_local of each
 * host's leaves and T_hosts of the partials are single-host reductions in the
 * accumulation type (where nothing rounds), then avg's one division by n and the one
 * rounding to the data type.  `how` makes it one of the mistakes instead.
 */
static void compose(const struct data_set *set, const int *host_of, int op, struct composition how,
		    void *out)
{
	const ndet_dtype_t stage = how.round_partials ? set->dtype : accumulation_of(set->dtype);
	const bool divide_once = op == NDET_OP_AVG && !how.avg_per_stage;
	const ndet_op_t stage_op = op == OP_PREMUL || divide_once ? NDET_OP_SUM : (ndet_op_t)op;
	const int nhosts = hosts_in(host_of, set->n);
	void *leaves[MAX_RANKS], *partials[MAX_RANKS], *total = output_for(set);
	const void *views[MAX_RANKS];

	assert_false(how.round_partials && op != NDET_OP_SUM);
	for (int r = 0; r < set->n; r++)
		leaves[r] = how.round_partials ? set->data[r] : leaves_of(set, r, op == OP_PREMUL);
	for (int h = 0; h < nhosts; h++) {
		int g = 0;

		for (int r = 0; r < set->n; r++)
			if (host_of[r] == h)
				views[g++] = leaves[r];
		partials[h] = output_for(set);
		assert_int_equal(ndet_reference_allreduce(views, g, partials[h], set->count, stage,
							  stage_op),
				 NDET_OK);
	}
	assert_int_equal(ndet_reference_allreduce((const void *const *)partials, nhosts, total,
						  set->count, stage, stage_op),
			 NDET_OK);
	if (how.round_partials)
		memcpy(out, total, set->count * ndet_dtype_size(set->dtype));
	for (size_t i = 0; i < set->count && !how.round_partials; i++) {
		if (set->dtype == NDET_DTYPE_F64) {
			double value = ((double *)total)[i];

			((double *)out)[i] = divide_once ? value / (double)set->n : value;
		} else {
			float value = ((float *)total)[i];

			store_rounded(set->dtype, out, i,
				      divide_once ? value / (float)set->n : value);
		}
	}
	for (int h = 0; h < nhosts; h++)
		free(partials[h]);
	for (int r = 0; r < set->n && !how.round_partials; r++)
		free(leaves[r]);
	free(total);
}

static const struct composition contract = {false, false};

/* ---------------------------------------------------------------- one host, powers of two */

/* Every rank on one host is the single-host reference, bit for bit, NaNs included. */
static void test_one_host_is_the_single_host_reference(void **state)
{
	(void)state;
	const int one_host[MAX_RANKS] = {0};

	for (ndet_dtype_t dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
		for (int n = 1; n <= MAX_RANKS; n++) {
			struct data_set set;
			void *hosts, *single;

			data_make(&set, dtype, n, 37, 7000 + (uint64_t)n, DATA_FLAGS);
			hosts = output_for(&set);
			single = output_for(&set);
			for (int op = 0; op < OPS_ALL; op++) {
				reduce_hosts(&set, one_host, op, hosts);
				reduce_single_host(&set, op, single);
				assert_same_bits(&set, hosts, single, "one host", op);
			}
			free(hosts);
			free(single);
			data_free(&set);
		}
	}
}

/*
 * Hosts of the same power-of-two number of consecutive ranks give the single-host
 * tree over rank order (doc/multihost.md has the proof): 1x4 = 2x2 = 4x1, 16 ranks on
 * 1x16, 2x8, 4x4, 8x2 and 16x1, 3x2 = 1x6, 3x4 = 1x12, 5x2 = 1x10, 7x1 = 1x7.  Every
 * dtype and op, specials included, bit for bit.  test_other_layouts_differ shows that
 * the same kind of data tells other groupings of these ranks apart.
 */
static void test_power_of_two_hosts_equal_single_host(void **state)
{
	(void)state;
	static const char *const layouts[] = {
		"AAAA",
		"AABB",
		"ABCD",
		"AAAAAAAAAAAAAAAA",
		"AAAAAAAABBBBBBBB",
		"AAAABBBBCCCCDDDD",
		"AABBCCDDEEFFGGHH",
		"ABCDEFGHIJKLMNOP",
		"AABBCC",
		"AAAABBBBCCCC",
		"AABBCCDDEE",
		"ABCDEFG",
	};

	for (size_t l = 0; l < ARRAY_SIZE(layouts); l++) {
		int host_of[MAX_RANKS], n = layout_hosts(layouts[l], host_of);

		assert_true(single_host_tree(host_of, n));
		for (ndet_dtype_t dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
			struct data_set set;
			void *hosts, *single;

			data_make(&set, dtype, n, 1001, 7100 + l, DATA_FLAGS);
			hosts = output_for(&set);
			single = output_for(&set);
			for (int op = 0; op < OPS_ALL; op++) {
				reduce_hosts(&set, host_of, op, hosts);
				reduce_single_host(&set, op, single);
				assert_same_bits(&set, hosts, single, layouts[l], op);
			}
			free(hosts);
			free(single);
			data_free(&set);
		}
	}
}

/*
 * Layouts outside that rule group the ranks otherwise, and the data shows it: 2x3
 * against 1x6, interleaved hosts against one host, for sum and avg in every dtype but
 * f8e4m3, whose f32 sums are exact (ndet_reference.h), so that there every layout
 * gives the same bits (asserted).  prod on independent f32 and f64 values too.
 */
static void check_layout_differs(const char *layout, ndet_dtype_t dtype, int op, unsigned flags,
				 uint64_t seed)
{
	int host_of[MAX_RANKS], n = layout_hosts(layout, host_of);
	struct data_set set;
	void *hosts, *single;

	data_make(&set, dtype, n, 1001, seed, flags);
	hosts = output_for(&set);
	single = output_for(&set);
	reduce_hosts(&set, host_of, op, hosts);
	reduce_single_host(&set, op, single);

	size_t differing = differences(&set, hosts, single);

	if (dtype == NDET_DTYPE_F8E4M3 && op != NDET_OP_PROD)
		assert_int_equal(differing, 0);
	else if (differing < set.count / 50)
		fail_msg("%s %s %s: differs from one host in only %zu of %zu elements",
			 ndet_dtype_name(dtype), op_label(op), layout, differing, set.count);
	free(hosts);
	free(single);
	data_free(&set);
}

static void test_other_layouts_differ(void **state)
{
	(void)state;
	static const char *const layouts[] = {"AAABBB", "ABAB", "ABCABC", "AABBBC",
					      "ABABABABABABABAB"};

	for (size_t l = 0; l < ARRAY_SIZE(layouts); l++) {
		for (ndet_dtype_t dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
			check_layout_differs(layouts[l], dtype, NDET_OP_SUM, NDET_TEST_DATA_CANCEL,
					     7200 + l);
			check_layout_differs(layouts[l], dtype, NDET_OP_AVG, NDET_TEST_DATA_CANCEL,
					     7300 + l);
		}
		check_layout_differs(layouts[l], NDET_DTYPE_F32, NDET_OP_PROD, 0, 7400 + l);
		check_layout_differs(layouts[l], NDET_DTYPE_F64, NDET_OP_PROD, 0, 7500 + l);
	}
}

/* ---------------------------------------------------------------- by hand */

/*
 * The two-level trees of a few layouts, written out: hosts in the order of their
 * lowest rank, T over each host's ranks, T over the hosts.  A twin in double for f64.
 */
#define HAND_TREE(name, expression)                                                                \
	static float name##_float(const float *x, float (*op)(float, float))                       \
	{                                                                                          \
		return expression;                                                                 \
	}                                                                                          \
	static double name##_double(const double *x, double (*op)(double, double))                 \
	{                                                                                          \
		return expression;                                                                 \
	}

/* ABAB: A = {0, 2}, B = {1, 3}. */
HAND_TREE(hand_abab, op(op(x[0], x[2]), op(x[1], x[3])))
/* ABCABC and CABCAB: the first host is the one of rank 0, whatever its name. */
HAND_TREE(hand_abcabc, op(op(op(x[0], x[3]), op(x[1], x[4])), op(x[2], x[5])))
/* CABCAB with the hosts in the order of their names (A, B, C): not the contract. */
HAND_TREE(hand_cabcab_by_name, op(op(op(x[1], x[4]), op(x[2], x[5])), op(x[0], x[3])))
/* AAABBB, 2x3: ((0+1)+2) + ((3+4)+5), where 1x6 is ((0+1)+(2+3)) + (4+5). */
HAND_TREE(hand_aaabbb, op(op(op(x[0], x[1]), x[2]), op(op(x[3], x[4]), x[5])))
/* AABBBC: hosts of 2, 3 and 1 ranks. */
HAND_TREE(hand_aabbbc, op(op(op(x[0], x[1]), op(op(x[2], x[3]), x[4])), x[5]))
/* ABBACCA: A = {0, 3, 6}, B = {1, 2}, C = {4, 5}. */
HAND_TREE(hand_abbacca, op(op(op(op(x[0], x[3]), x[6]), op(x[1], x[2])), op(x[4], x[5])))

struct hand_case {
	const char *layout;
	float (*tree_float)(const float *, float (*)(float, float));
	double (*tree_double)(const double *, double (*)(double, double));
};

#define HAND_CASE(layout, name)                                                                    \
	{                                                                                          \
		layout, name##_float, name##_double                                                \
	}

static float add_float(float a, float b)
{
	return a + b;
}

static float mul_float(float a, float b)
{
	return a * b;
}

static double add_double(double a, double b)
{
	return a + b;
}

static double mul_double(double a, double b)
{
	return a * b;
}

/* The hand tree of one element: leaves widened (times s_r for PreMulSum), one rounding. */
static void hand_element(const struct hand_case *c, const struct data_set *set, int op, size_t i,
			 void *out)
{
	const bool premul = op == OP_PREMUL, prod = op == NDET_OP_PROD;
	float xf[MAX_RANKS];
	double xd[MAX_RANKS];

	for (int r = 0; r < set->n; r++) {
		double x = ndet_test_element_to_double(set->dtype, set->data[r], i);
		double s = ndet_test_element_to_double(set->dtype, set->scalars, (size_t)r);

		xd[r] = premul ? x * s : x;
		xf[r] = premul ? (float)x * (float)s : (float)x;
	}
	if (set->dtype == NDET_DTYPE_F64) {
		double value = c->tree_double(xd, prod ? mul_double : add_double);

		((double *)out)[i] = op == NDET_OP_AVG ? value / set->n : value;
		return;
	}

	float value = c->tree_float(xf, prod ? mul_float : add_float);

	store_rounded(set->dtype, out, i, op == NDET_OP_AVG ? value / (float)set->n : value);
}

static void hand_reduce(const struct hand_case *c, const struct data_set *set, int op, void *out)
{
	for (size_t i = 0; i < set->count; i++)
		hand_element(c, set, op, i, out);
}

static const int hand_ops[] = {NDET_OP_SUM, NDET_OP_PROD, NDET_OP_AVG, OP_PREMUL};

/*
 * Interleaved, unequal and 2x3 layouts, every dtype, sum, prod, avg (one division by
 * n) and PreMulSum (scalars at the leaves only), against the hand trees.
 */
static void test_layouts_by_hand(void **state)
{
	(void)state;
	const struct hand_case cases[] = {
		HAND_CASE("ABAB", hand_abab),     HAND_CASE("ABCABC", hand_abcabc),
		HAND_CASE("CABCAB", hand_abcabc), HAND_CASE("AAABBB", hand_aaabbb),
		HAND_CASE("AABBBC", hand_aabbbc), HAND_CASE("ABBACCA", hand_abbacca),
	};

	for (size_t c = 0; c < ARRAY_SIZE(cases); c++) {
		int host_of[MAX_RANKS], n = layout_hosts(cases[c].layout, host_of);

		for (ndet_dtype_t dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
			for (unsigned flags = 0; flags <= NDET_TEST_DATA_SPECIALS; flags += 2) {
				struct data_set set;
				void *got, *want;

				data_make(&set, dtype, n, 1001, 7600 + c,
					  NDET_TEST_DATA_CANCEL | flags);
				got = output_for(&set);
				want = output_for(&set);
				for (size_t o = 0; o < ARRAY_SIZE(hand_ops); o++) {
					reduce_hosts(&set, host_of, hand_ops[o], got);
					hand_reduce(&cases[c], &set, hand_ops[o], want);
					assert_equivalent(&set, got, want, cases[c].layout,
							  hand_ops[o]);
				}
				free(got);
				free(want);
				data_free(&set);
			}
		}
	}
}

/*
 * Hosts are ordered by their lowest rank, not by their names: CABCAB is ABCABC, and
 * with three hosts the host order matters, so the names' order (A, B, C) gives
 * other bits on this data: sum and avg in every dtype but f8e4m3, whose sums are
 * exact; PreMulSum in f32 and f64 (random scalars undo the data's cancellations,
 * which the narrower types need to show an order).
 */
static void test_hosts_ordered_by_lowest_rank(void **state)
{
	(void)state;
	const struct hand_case by_name = HAND_CASE("CABCAB", hand_cabcab_by_name);
	int host_of[MAX_RANKS], n = layout_hosts("CABCAB", host_of);

	for (ndet_dtype_t dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
		for (size_t o = 0; o < ARRAY_SIZE(hand_ops); o++) {
			struct data_set set;
			void *got = NULL, *wrong = NULL;

			const bool wide = dtype == NDET_DTYPE_F32 || dtype == NDET_DTYPE_F64;

			if (hand_ops[o] == NDET_OP_PROD || dtype == NDET_DTYPE_F8E4M3 ||
			    (hand_ops[o] == OP_PREMUL && !wide))
				continue;
			data_make(&set, dtype, n, 1001, 7700 + (uint64_t)o, NDET_TEST_DATA_CANCEL);
			got = output_for(&set);
			wrong = output_for(&set);
			reduce_hosts(&set, host_of, hand_ops[o], got);
			hand_reduce(&by_name, &set, hand_ops[o], wrong);
			size_t differing = differences(&set, got, wrong);

			if (differing < set.count / 50)
				fail_msg("%s %s: host order by name differs in only %zu of %zu",
					 ndet_dtype_name(dtype), op_label(hand_ops[o]), differing,
					 set.count);
			free(got);
			free(wrong);
			data_free(&set);
		}
	}
}

/* ---------------------------------------------------------------- every layout */

static void check_layout_composition(const struct data_set *set, const int *host_of, void *got,
				     void *want, void *single)
{
	for (int op = 0; op < OPS_ALL; op++) {
		reduce_hosts(set, host_of, op, got);
		compose(set, host_of, op, contract, want);
		assert_equivalent(set, got, want, "against its composition", op);
		if (!single_host_tree(host_of, set->n))
			continue;
		reduce_single_host(set, op, single);
		assert_same_bits(set, got, single, "against one host", op);
	}
}

/*
 * Every host layout of 1 to 7 ranks (every numbering by lowest rank), every dtype and
 * op, specials included: the reference is the contract's composition of single-host
 * trees, and where one host or the power-of-two rule holds (15 layouts) it is the single-host
 * reference.  Then random layouts of 16 ranks.
 */
static void test_every_layout_is_its_composition(void **state)
{
	(void)state;
	int covered = 0;

	for (ndet_dtype_t dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
		for (int n = 1; n <= 7; n++) {
			int host_of[MAX_RANKS] = {0};
			struct data_set set;
			void *got, *want, *single;

			data_make(&set, dtype, n, 37, 7800 + (uint64_t)n, DATA_FLAGS);
			got = output_for(&set);
			want = output_for(&set);
			single = output_for(&set);
			do {
				check_layout_composition(&set, host_of, got, want, single);
				covered += dtype == 0 && single_host_tree(host_of, n);
			} while (next_layout(host_of, n));
			free(got);
			free(want);
			free(single);
			data_free(&set);
		}
	}
	assert_int_equal(covered, 15);

	uint64_t random_state = 99;

	for (int trial = 0; trial < 60; trial++) {
		char layout[MAX_RANKS + 1] = {0};
		int host_of[MAX_RANKS];
		struct data_set set;
		void *got, *want, *single;

		for (int r = 0; r < MAX_RANKS; r++) {
			random_state = random_state * 6364136223846793005ull + 1;
			layout[r] = (char)('A' + (random_state >> 33) % (1 + trial % 6));
		}
		layout_hosts(layout, host_of);
		data_make(&set, (ndet_dtype_t)(trial % NDET_DTYPE_COUNT), MAX_RANKS, 37,
			  7900 + (uint64_t)trial, DATA_FLAGS);
		got = output_for(&set);
		want = output_for(&set);
		single = output_for(&set);
		check_layout_composition(&set, host_of, got, want, single);
		free(got);
		free(want);
		free(single);
		data_free(&set);
	}
}

/* ---------------------------------------------------------------- the mistakes */

/*
 * On cancelling data of `layout`, the reference is the contract's composition and
 * the mistaken composition `how` differs from it in a visible share of the elements.
 */
static void check_mistake_shows(const char *layout, ndet_dtype_t dtype, int op,
				struct composition how, uint64_t seed, const char *mistake)
{
	int host_of[MAX_RANKS], n = layout_hosts(layout, host_of);
	struct data_set set;
	void *got, *want, *wrong;

	data_make(&set, dtype, n, 1001, seed, NDET_TEST_DATA_CANCEL);
	got = output_for(&set);
	want = output_for(&set);
	wrong = output_for(&set);
	reduce_hosts(&set, host_of, op, got);
	compose(&set, host_of, op, contract, want);
	compose(&set, host_of, op, how, wrong);
	assert_equivalent(&set, got, want, layout, op);

	size_t differing = differences(&set, got, wrong);

	if (differing < set.count / 50)
		fail_msg("%s %s %s: %s differs in only %zu of %zu elements", ndet_dtype_name(dtype),
			 op_label(op), layout, mistake, differing, set.count);
	free(got);
	free(want);
	free(wrong);
	data_free(&set);
}

/* check_mistake_shows for every layout and dtype of two lists. */
static void check_mistake_grid(const char *const *layouts, size_t nlayouts,
			       const ndet_dtype_t *dtypes, size_t ndtypes, int op,
			       struct composition how, uint64_t seed, const char *mistake)
{
	for (size_t l = 0; l < nlayouts; l++)
		for (size_t d = 0; d < ndtypes; d++)
			check_mistake_shows(layouts[l], dtypes[d], op, how, seed + l, mistake);
}

/*
 * avg divides once, by n = g x H.  Dividing each host's sum by g and the hosts' sum by
 * H rounds once more, and the data shows it where g is not a power of two (a division
 * by a power of two is exact): 2x3, 3x3, 4x3, in f32, f64, f16 and bf16.
 */
static void test_avg_divides_once_by_n(void **state)
{
	(void)state;
	static const char *const layouts[] = {"AAABBB", "AAABBBCCC", "AAABBBCCCDDD"};
	const ndet_dtype_t dtypes[] = {NDET_DTYPE_F32, NDET_DTYPE_F64, NDET_DTYPE_F16,
				       NDET_DTYPE_BF16};
	const struct composition per_stage = {.avg_per_stage = true};

	check_mistake_grid(layouts, ARRAY_SIZE(layouts), dtypes, ARRAY_SIZE(dtypes), NDET_OP_AVG,
			   per_stage, 8000, "dividing by g, then by H,");
}

/*
 * Host partials stay in the accumulation type.  Rounding them to the data type (what
 * chaining two single-host all-reduces would do) gives other bits on this data, in
 * bf16, f16 and both fp8 types, on 2x2, 4x4, 2x8 and 3x2, whose contract bits are the
 * single-host bits (test_power_of_two_hosts_equal_single_host).
 */
static void test_rounded_partials_disagree(void **state)
{
	(void)state;
	static const char *const layouts[] = {"AABB", "AAAABBBBCCCCDDDD", "AAAAAAAABBBBBBBB",
					      "AABBCC"};
	const ndet_dtype_t dtypes[] = {NDET_DTYPE_BF16, NDET_DTYPE_F16, NDET_DTYPE_F8E4M3,
				       NDET_DTYPE_F8E5M2};
	const struct composition rounded = {.round_partials = true};

	check_mistake_grid(layouts, ARRAY_SIZE(layouts), dtypes, ARRAY_SIZE(dtypes), NDET_OP_SUM,
			   rounded, 8100, "rounding host partials");
}

/* ---------------------------------------------------------------- ops and specials */

/*
 * min and max: the same operator at both stages, NaN-suppressing, -0 below +0, so
 * every layout gives the single-host bits, NaNs and signed zeros included.
 */
static void test_min_max_every_layout(void **state)
{
	(void)state;

	for (ndet_dtype_t dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
		for (int n = 2; n <= 6; n++) {
			int host_of[MAX_RANKS] = {0};
			struct data_set set;
			void *got, *single;

			data_make(&set, dtype, n, 1001, 8200 + (uint64_t)n, DATA_FLAGS);
			got = output_for(&set);
			single = output_for(&set);
			do {
				for (int op = NDET_OP_MIN; op <= NDET_OP_MAX; op++) {
					reduce_hosts(&set, host_of, op, got);
					reduce_single_host(&set, op, single);
					assert_same_bits(&set, got, single, "min/max", op);
				}
			} while (next_layout(host_of, n));
			free(got);
			free(single);
			data_free(&set);
		}
	}
}

/* One element per rank, values given as floats (exact in every dtype used here). */
static void one_element(ndet_dtype_t dtype, const char *layout, int op, const float *values,
			double *result, bool *negative)
{
	int host_of[MAX_RANKS], n = layout_hosts(layout, host_of);
	double storage[MAX_RANKS], out; /* room and alignment for one element of any dtype */
	const void *inputs[MAX_RANKS];

	for (int r = 0; r < n; r++) {
		if (dtype == NDET_DTYPE_F64)
			storage[r] = values[r];
		else
			store_rounded(dtype, &storage[r], 0, values[r]);
		inputs[r] = &storage[r];
	}
	assert_int_equal(
		ndet_reference_allreduce_hosts(inputs, host_of, n, &out, 1, dtype, (ndet_op_t)op),
		NDET_OK);
	*result = ndet_test_element_to_double(dtype, &out, 0);
	*negative = signbit(*result) != 0;
}

/*
 * The single-host rules at both stages, by hand: signed zeros (-0 + -0 = -0 within a
 * host and across hosts, -0 + +0 = +0), NaN (a sum with a NaN is NaN, min and max
 * skip it unless every operand is NaN), infinities (inf - inf across hosts is NaN).
 */
static void test_specials_at_both_stages(void **state)
{
	(void)state;
	const ndet_dtype_t dtypes[] = {NDET_DTYPE_F32, NDET_DTYPE_F64, NDET_DTYPE_F16,
				       NDET_DTYPE_BF16, NDET_DTYPE_F8E5M2};
	const float zero = 0.0f, nan = NAN, inf = INFINITY;
	double v;
	bool negative;

	for (size_t d = 0; d < ARRAY_SIZE(dtypes); d++) {
		ndet_dtype_t dt = dtypes[d];

		one_element(dt, "ABAB", NDET_OP_SUM, (const float[]){-zero, -zero, -zero, -zero},
			    &v, &negative);
		assert_true(v == 0 && negative);
		one_element(dt, "ABCABC", NDET_OP_AVG,
			    (const float[]){-zero, -zero, -zero, -zero, -zero, -zero}, &v,
			    &negative);
		assert_true(v == 0 && negative);
		/* A: -0 + -0 = -0; B: +0 + +0 = +0; -0 + +0 = +0. */
		one_element(dt, "ABAB", NDET_OP_SUM, (const float[]){-zero, zero, -zero, zero}, &v,
			    &negative);
		assert_true(v == 0 && !negative);
		one_element(dt, "ABAB", NDET_OP_MIN, (const float[]){zero, zero, zero, -zero}, &v,
			    &negative);
		assert_true(v == 0 && negative);
		one_element(dt, "ABAB", NDET_OP_MAX, (const float[]){-zero, -zero, zero, -zero}, &v,
			    &negative);
		assert_true(v == 0 && !negative);
		one_element(dt, "ABCABC", NDET_OP_SUM, (const float[]){1, 2, nan, 3, 4, 5}, &v,
			    &negative);
		assert_true(isnan(v));
		/* Host C's partial is NaN (min(NaN, NaN)): the host stage skips it. */
		one_element(dt, "ABCABC", NDET_OP_MIN, (const float[]){4, 2, nan, 3, 5, nan}, &v,
			    &negative);
		assert_true(v == 2);
		one_element(dt, "ABCABC", NDET_OP_MAX, (const float[]){4, 2, nan, 3, 5, nan}, &v,
			    &negative);
		assert_true(v == 5);
		one_element(dt, "ABAB", NDET_OP_MIN, (const float[]){nan, nan, nan, nan}, &v,
			    &negative);
		assert_true(isnan(v));
		/* A: inf + 1 = inf, B: -inf + 1 = -inf; the host stage gives NaN. */
		one_element(dt, "ABAB", NDET_OP_SUM, (const float[]){inf, -inf, 1, 1}, &v,
			    &negative);
		assert_true(isnan(v));
		one_element(dt, "ABCABC", NDET_OP_PROD, (const float[]){inf, 2, 3, 1, -1, 1}, &v,
			    &negative);
		assert_true(isinf(v) && negative);
	}
}

/* ---------------------------------------------------------------- reduce-scatter */

/* Block r of the multi-host all-reduce is rank r's reduce-scatter, every dtype and op. */
static void test_reduce_scatter_hosts_blocks(void **state)
{
	(void)state;
	static const char *const layouts[] = {"ABAB", "AABBBC", "ABCABC", "AAAABBBBCCCCDDDD"};
	const size_t recvcount = 37;

	for (size_t l = 0; l < ARRAY_SIZE(layouts); l++) {
		int host_of[MAX_RANKS], n = layout_hosts(layouts[l], host_of);

		for (ndet_dtype_t dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
			const size_t size = ndet_dtype_size(dtype);
			struct data_set set;
			char *all, *block = malloc(recvcount * size);

			data_make(&set, dtype, n, recvcount * (size_t)n, 8300 + l, DATA_FLAGS);
			all = output_for(&set);
			for (int op = 0; op < NDET_OP_COUNT; op++) {
				reduce_hosts(&set, host_of, op, all);
				for (int rank = 0; rank < n; rank++) {
					assert_int_equal(ndet_reference_reduce_scatter_hosts(
								 set.inputs, host_of, n, rank,
								 block, recvcount, dtype,
								 (ndet_op_t)op),
							 NDET_OK);
					assert_memory_equal(block,
							    all + (size_t)rank * recvcount * size,
							    recvcount * size);
				}
			}
			free(all);
			free(block);
			data_free(&set);
		}
	}
}

/* ---------------------------------------------------------------- arguments */

/*
 * The two stages as an implementation runs them apart (ndet_reference_hosts_partial
 * on each host, the partial in ndet_hosts_partial_size's type, then
 * ndet_reference_hosts_combine in host order) compose to the multi-host reference bit
 * for bit: every dtype, op and PreMulSum, layouts of equal hosts (consecutive,
 * interleaved, one rank per host), specials included.
 */
static void test_stages_compose(void **state)
{
	(void)state;
	static const char *const layouts[] = {"AABB",   "ABAB", "AAABBB", "AABBCC",
					      "ABCABC", "ABCD", "AAAA"};
	for (size_t l = 0; l < ARRAY_SIZE(layouts); l++) {
		int host_of[MAX_RANKS], n = layout_hosts(layouts[l], host_of);
		const int nhosts = hosts_in(host_of, n), g = n / nhosts;
		for (ndet_dtype_t dtype = 0; dtype < NDET_DTYPE_COUNT; dtype++) {
			for (int op = 0; op < OPS_ALL; op++) {
				struct data_set set;
				data_make(&set, dtype, n, 53, 8100 + l, DATA_FLAGS);
				const size_t es = ndet_dtype_size(dtype);
				const ndet_op_t plain =
					op == OP_PREMUL ? NDET_OP_SUM : (ndet_op_t)op;
				const uint32_t ps =
					ndet_hosts_partial_size(dtype, plain, op == OP_PREMUL, g);
				void *partials[MAX_RANKS];
				const void *views[MAX_RANKS];
				for (int h = 0; h < nhosts; h++) {
					const void *inputs[MAX_RANKS];
					unsigned char scalars[MAX_RANKS * 8];
					int k = 0;
					for (int r = 0; r < n; r++) {
						if (host_of[r] != h)
							continue;
						memcpy(scalars + (size_t)k * es,
						       set.scalars + (size_t)r * es, es);
						inputs[k++] = set.inputs[r];
					}
					assert_int_equal(k, g);
					partials[h] = malloc(set.count * ps);
					assert_non_null(partials[h]);
					views[h] = partials[h];
					assert_int_equal(
						ndet_reference_hosts_partial(
							inputs, op == OP_PREMUL ? scalars : NULL, g,
							partials[h], set.count, dtype, plain, ps),
						NDET_OK);
				}
				void *got = output_for(&set), *want = output_for(&set);
				assert_int_equal(ndet_reference_hosts_combine(views, nhosts, ps, n,
									      got, set.count, dtype,
									      plain),
						 NDET_OK);
				reduce_hosts(&set, host_of, op, want);
				assert_equivalent(&set, got, want, layouts[l], op);
				for (int h = 0; h < nhosts; h++)
					free(partials[h]);
				free(got);
				free(want);
				data_free(&set);
			}
		}
	}
	/* A partial type that is neither the data type nor the accumulation type. */
	float x = 1.0f, out[1];
	const void *one[1] = {&x};
	assert_int_equal(
		ndet_reference_hosts_partial(one, NULL, 1, out, 1, NDET_DTYPE_F32, NDET_OP_SUM, 8),
		NDET_ERR_INVALID_ARGUMENT);
	assert_int_equal(
		ndet_reference_hosts_combine(one, 1, 2, 1, out, 1, NDET_DTYPE_F32, NDET_OP_SUM),
		NDET_ERR_INVALID_ARGUMENT);
}

static void test_hosts_invalid_arguments(void **state)
{
	(void)state;
	float a = 1, b = 2, c = 4, out = -1;
	const void *inputs[3] = {&a, &b, &c};
	const float scalars[3] = {1, 1, 1};
	/* Not numbered by lowest rank: a host index that skips one, or starts above 0. */
	const int skips[3] = {0, 2, 1}, starts_high[3] = {1, 0, 1}, negative[3] = {0, -1, 0};
	const int good[3] = {0, 1, 0};
	const int *bad[] = {skips, starts_high, negative, NULL};

	for (size_t k = 0; k < ARRAY_SIZE(bad); k++) {
		assert_int_equal(ndet_reference_allreduce_hosts(inputs, bad[k], 3, &out, 1,
								NDET_DTYPE_F32, NDET_OP_SUM),
				 NDET_ERR_INVALID_ARGUMENT);
		/* The numbering is checked even when there is nothing to reduce. */
		assert_int_equal(ndet_reference_allreduce_hosts(inputs, bad[k], 3, &out, 0,
								NDET_DTYPE_F32, NDET_OP_SUM),
				 NDET_ERR_INVALID_ARGUMENT);
		assert_int_equal(ndet_reference_premulsum_hosts(inputs, scalars, bad[k], 3, &out, 1,
								NDET_DTYPE_F32),
				 NDET_ERR_INVALID_ARGUMENT);
		assert_int_equal(ndet_reference_reduce_scatter_hosts(inputs, bad[k], 3, 0, &out, 1,
								     NDET_DTYPE_F32, NDET_OP_SUM),
				 NDET_ERR_INVALID_ARGUMENT);
	}
	assert_int_equal(ndet_reference_allreduce_hosts(inputs, good, 0, &out, 1, NDET_DTYPE_F32,
							NDET_OP_SUM),
			 NDET_ERR_INVALID_ARGUMENT);
	assert_int_equal(ndet_reference_allreduce_hosts(inputs, good, 3, &out, 1, NDET_DTYPE_COUNT,
							NDET_OP_SUM),
			 NDET_ERR_INVALID_ARGUMENT);
	assert_int_equal(ndet_reference_allreduce_hosts(inputs, good, 3, NULL, 1, NDET_DTYPE_F32,
							NDET_OP_SUM),
			 NDET_ERR_INVALID_ARGUMENT);
	assert_int_equal(
		ndet_reference_premulsum_hosts(inputs, NULL, good, 3, &out, 1, NDET_DTYPE_F32),
		NDET_ERR_INVALID_ARGUMENT);
	assert_int_equal(ndet_reference_reduce_scatter_hosts(inputs, good, 3, 3, &out, 1,
							     NDET_DTYPE_F32, NDET_OP_SUM),
			 NDET_ERR_INVALID_ARGUMENT);
	/* (1 + 4) + 2 */
	assert_int_equal(ndet_reference_allreduce_hosts(inputs, good, 3, &out, 1, NDET_DTYPE_F32,
							NDET_OP_SUM),
			 NDET_OK);
	assert_true(out == 7.0f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_host_is_the_single_host_reference),
		cmocka_unit_test(test_power_of_two_hosts_equal_single_host),
		cmocka_unit_test(test_other_layouts_differ),
		cmocka_unit_test(test_layouts_by_hand),
		cmocka_unit_test(test_hosts_ordered_by_lowest_rank),
		cmocka_unit_test(test_every_layout_is_its_composition),
		cmocka_unit_test(test_avg_divides_once_by_n),
		cmocka_unit_test(test_rounded_partials_disagree),
		cmocka_unit_test(test_min_max_every_layout),
		cmocka_unit_test(test_specials_at_both_stages),
		cmocka_unit_test(test_reduce_scatter_hosts_blocks),
		cmocka_unit_test(test_stages_compose),
		cmocka_unit_test(test_hosts_invalid_arguments),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
