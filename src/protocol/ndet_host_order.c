/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Hosts in the order of their lowest rank: scanning ranks upwards, a rank on no host
 * seen so far opens the next host, so host h's lowest rank is below host h + 1's.
 */
#include "config.h"

#include <stddef.h>
#include <string.h>

#include "protocol/ndet_host_order.h"

/* The host of `rank` among the nhosts found so far (first_rank[h]: host h's), or nhosts. */
static int ndet_host_find(ndet_host_same_fn same, const void *identities, const int *first_rank,
			  int nhosts, int rank)
{
	for (int h = 0; h < nhosts; h++)
		if (same(identities, first_rank[h], rank))
			return h;
	return nhosts;
}

int ndet_host_order(int nranks, ndet_host_same_fn same, const void *identities, int *host_of,
		    int *local_of, int *host_size)
{
	int nhosts = 0;

	if (nranks < 1 || same == NULL || host_of == NULL || local_of == NULL || host_size == NULL)
		return -1;
	/* First pass: host indices; host_size[h] holds host h's first rank meanwhile. */
	for (int r = 0; r < nranks; r++) {
		int h = ndet_host_find(same, identities, host_size, nhosts, r);

		if (h == nhosts)
			host_size[nhosts++] = r;
		host_of[r] = h;
	}
	/* Second pass: local indices in rank order, and the sizes. */
	for (int h = 0; h < nhosts; h++)
		host_size[h] = 0;
	for (int r = 0; r < nranks; r++)
		local_of[r] = host_size[host_of[r]]++;
	return nhosts;
}

static bool ndet_host_same_string(const void *identities, int rank_a, int rank_b)
{
	const char *const *names = identities;

	return strcmp(names[rank_a], names[rank_b]) == 0;
}

int ndet_host_order_strings(const char *const *names, int nranks, int *host_of, int *local_of,
			    int *host_size)
{
	if (names == NULL || nranks < 1)
		return -1;
	for (int r = 0; r < nranks; r++)
		if (names[r] == NULL)
			return -1;
	return ndet_host_order(nranks, ndet_host_same_string, names, host_of, local_of, host_size);
}
