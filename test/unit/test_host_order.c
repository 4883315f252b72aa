/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The host order: hosts numbered by their lowest rank, a host's ranks by rank.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "protocol/ndet_host_order.h"

#define MAX_RANKS 64

struct order {
	int nhosts;
	int host_of[MAX_RANKS], local_of[MAX_RANKS], host_size[MAX_RANKS];
};

/* The order of a layout written one letter per rank ("ABAB": ranks 0 and 2 on A). */
static struct order order_of_letters(const char *layout)
{
	struct order o;
	char names[MAX_RANKS][2];
	const char *views[MAX_RANKS];
	int n = (int)strlen(layout);

	assert_true(n <= MAX_RANKS);
	for (int r = 0; r < n; r++) {
		names[r][0] = layout[r];
		names[r][1] = '\0';
		views[r] = names[r];
	}
	o.nhosts = ndet_host_order_strings(views, n, o.host_of, o.local_of, o.host_size);
	return o;
}

static void assert_ints(const int *got, const int *want, int n)
{
	for (int i = 0; i < n; i++)
		assert_int_equal(got[i], want[i]);
}

/* By hand: the host of the lowest rank first, whatever the names' own order. */
static void test_host_order_by_hand(void **state)
{
	(void)state;
	const char *names[5] = {"node-b", "node-a", "node-b", "node-c", "node-a"};
	int host_of[5], local_of[5], host_size[5];

	assert_int_equal(ndet_host_order_strings(names, 5, host_of, local_of, host_size), 3);
	assert_ints(host_of, (const int[]){0, 1, 0, 2, 1}, 5);
	assert_ints(local_of, (const int[]){0, 0, 1, 0, 1}, 5);
	assert_ints(host_size, (const int[]){2, 2, 1}, 3);

	struct order o = order_of_letters("AAAABBBB");

	assert_int_equal(o.nhosts, 2);
	assert_ints(o.host_of, (const int[]){0, 0, 0, 0, 1, 1, 1, 1}, 8);
	assert_ints(o.local_of, (const int[]){0, 1, 2, 3, 0, 1, 2, 3}, 8);
	assert_ints(o.host_size, (const int[]){4, 4}, 2);

	o = order_of_letters("CABCAB");
	assert_int_equal(o.nhosts, 3);
	assert_ints(o.host_of, (const int[]){0, 1, 2, 0, 1, 2}, 6);
	assert_ints(o.local_of, (const int[]){0, 0, 0, 1, 1, 1}, 6);

	o = order_of_letters("Z");
	assert_int_equal(o.nhosts, 1);
	assert_int_equal(o.host_of[0], 0);
	assert_int_equal(o.local_of[0], 0);
	assert_int_equal(o.host_size[0], 1);
}

/* A caller's own identities: ranks on one host when their ids agree modulo 3. */
static bool same_modulo_3(const void *identities, int rank_a, int rank_b)
{
	const int *ids = identities;

	return ids[rank_a] % 3 == ids[rank_b] % 3;
}

static void test_host_order_callback(void **state)
{
	(void)state;
	const int ids[7] = {5, 9, 2, 3, 8, 6, 11};
	int host_of[7], local_of[7], host_size[7];

	/* 5, 2, 8, 11 (2 mod 3) are host 0; 9, 3, 6 (0 mod 3) host 1. */
	assert_int_equal(ndet_host_order(7, same_modulo_3, ids, host_of, local_of, host_size), 2);
	assert_ints(host_of, (const int[]){0, 1, 0, 1, 0, 1, 0}, 7);
	assert_ints(local_of, (const int[]){0, 0, 1, 1, 2, 2, 3}, 7);
	assert_ints(host_size, (const int[]){4, 3}, 2);
}

static uint64_t next_random(uint64_t *state)
{
	*state = *state * 6364136223846793005ull + 1442695040888963407ull;
	return *state >> 33;
}

/*
 * Random layouts: the numbering is by lowest rank (each host's first rank above the
 * previous host's), local indices count a host's ranks in rank order, the sizes add
 * up, and ranks share a host exactly when their names are equal.
 */
static void test_host_order_properties(void **state)
{
	(void)state;
	uint64_t random_state = 12345;

	for (int trial = 0; trial < 500; trial++) {
		int n = 1 + (int)(next_random(&random_state) % MAX_RANKS);
		int kinds = 1 + (int)(next_random(&random_state) % 9);
		char layout[MAX_RANKS + 1];

		for (int r = 0; r < n; r++)
			layout[r] = (char)('a' + next_random(&random_state) % (uint64_t)kinds);
		layout[n] = '\0';

		struct order o = order_of_letters(layout);
		int seen[MAX_RANKS] = {0}, first[MAX_RANKS] = {0}, total = 0;

		assert_true(o.nhosts >= 1 && o.nhosts <= n);
		for (int r = 0; r < n; r++) {
			int h = o.host_of[r];

			assert_true(h >= 0 && h < o.nhosts);
			if (seen[h] == 0)
				first[h] = r;
			assert_int_equal(o.local_of[r], seen[h]++);
			for (int q = 0; q < n; q++)
				assert_int_equal(layout[q] == layout[r], o.host_of[q] == h);
		}
		for (int h = 0; h < o.nhosts; h++) {
			assert_int_equal(o.host_size[h], seen[h]);
			assert_true(h == 0 ? first[h] == 0 : first[h] > first[h - 1]);
			total += o.host_size[h];
		}
		assert_int_equal(total, n);
	}
}

static void test_host_order_invalid_arguments(void **state)
{
	(void)state;
	const char *names[2] = {"a", "b"};
	const char *with_null[2] = {"a", NULL};
	int host_of[2] = {7, 7}, local_of[2], host_size[2];

	assert_int_equal(ndet_host_order_strings(names, 0, host_of, local_of, host_size), -1);
	assert_int_equal(ndet_host_order_strings(NULL, 2, host_of, local_of, host_size), -1);
	assert_int_equal(ndet_host_order_strings(with_null, 2, host_of, local_of, host_size), -1);
	assert_int_equal(ndet_host_order_strings(names, 2, NULL, local_of, host_size), -1);
	assert_int_equal(ndet_host_order_strings(names, 2, host_of, NULL, host_size), -1);
	assert_int_equal(ndet_host_order_strings(names, 2, host_of, local_of, NULL), -1);
	assert_int_equal(ndet_host_order(2, NULL, names, host_of, local_of, host_size), -1);
	assert_int_equal(host_of[0], 7);
	assert_int_equal(ndet_host_order_strings(names, 2, host_of, local_of, host_size), 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_host_order_by_hand),
		cmocka_unit_test(test_host_order_callback),
		cmocka_unit_test(test_host_order_properties),
		cmocka_unit_test(test_host_order_invalid_arguments),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
