/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The hosts of a setup table (see ndet_host_table.h).  Pure: no logging, no clock, no
 * allocation once the storage exists.
 */
#include "config.h"

#include "protocol/ndet_host_table.h"
#include "protocol/ndet_host_order.h"

#include <stdlib.h>

/* The table and its five arrays of `capacity` ints, in one allocation. */
struct ndet_host_storage {
	struct ndet_host_table hosts; /* first: the public pointer is the storage's */
	int arrays[];
};

#define NDET_HOST_TABLE_ARRAYS 5

struct ndet_host_table *ndet_host_table_create(int capacity)
{
	if (capacity < 1 || capacity > NDET_SETUP_NRANKS_LIMIT)
		return NULL;
	const size_t n = (size_t)capacity;
	struct ndet_host_storage *storage =
		calloc(1, sizeof(*storage) + NDET_HOST_TABLE_ARRAYS * n * sizeof(int));
	if (storage == NULL)
		return NULL;
	struct ndet_host_table *hosts = &storage->hosts;
	hosts->capacity = capacity;
	hosts->host_of = storage->arrays;
	hosts->local_of = hosts->host_of + n;
	hosts->ranks = hosts->local_of + n;
	hosts->start = hosts->ranks + n;
	hosts->size = hosts->start + n;
	hosts->my_host = -1;
	hosts->my_local = -1;
	return hosts;
}

void ndet_host_table_destroy(struct ndet_host_table *hosts)
{
	free(hosts); /* the storage starts with it */
}

static void ndet_host_table_clear(struct ndet_host_table *hosts)
{
	hosts->nranks = 0;
	hosts->nhosts = 0;
	hosts->size_min = 0;
	hosts->size_max = 0;
	hosts->same_size = false;
	hosts->consecutive = false;
	hosts->my_host = -1;
	hosts->my_local = -1;
	hosts->my_count = 0;
	hosts->my_ranks = NULL;
}

/* ndet_host_order's equivalence on setup payloads: hostname and boot id. */
static bool ndet_host_table_same(const void *identities, int rank_a, int rank_b)
{
	const struct ndet_setup_payload *table = identities;
	return ndet_setup_same_host(&table[rank_a], &table[rank_b]);
}

/* start as offsets into `ranks`, then `ranks` itself. */
static void ndet_host_table_order(struct ndet_host_table *hosts, int nranks)
{
	int offset = 0;
	for (int h = 0; h < hosts->nhosts; h++) {
		hosts->start[h] = offset;
		offset += hosts->size[h];
	}
	for (int r = 0; r < nranks; r++)
		hosts->ranks[hosts->start[hosts->host_of[r]] + hosts->local_of[r]] = r;
}

static void ndet_host_table_summarize(struct ndet_host_table *hosts, int nranks)
{
	hosts->size_min = hosts->size[0];
	hosts->size_max = hosts->size[0];
	for (int h = 1; h < hosts->nhosts; h++) {
		if (hosts->size[h] < hosts->size_min)
			hosts->size_min = hosts->size[h];
		if (hosts->size[h] > hosts->size_max)
			hosts->size_max = hosts->size[h];
	}
	hosts->same_size = hosts->size_min == hosts->size_max;
	/* Hosts in order of their first rank, ranks ascending: consecutive = identity. */
	hosts->consecutive = true;
	for (int i = 0; i < nranks; i++)
		hosts->consecutive = hosts->consecutive && hosts->ranks[i] == i;
}

bool ndet_host_table_build(struct ndet_host_table *hosts, const struct ndet_setup_payload *table,
			   int nranks, int my_rank)
{
	if (hosts == NULL)
		return false;
	ndet_host_table_clear(hosts);
	if (table == NULL || nranks < 1 || nranks > hosts->capacity || my_rank < -1 ||
	    my_rank >= nranks)
		return false;
	/* host_of, local_of and size in rank order (the one numbering of doc/multihost.md). */
	hosts->nhosts = ndet_host_order(nranks, ndet_host_table_same, table, hosts->host_of,
					hosts->local_of, hosts->size);
	ndet_host_table_order(hosts, nranks);
	ndet_host_table_summarize(hosts, nranks);
	hosts->nranks = nranks;
	if (my_rank >= 0) {
		hosts->my_host = hosts->host_of[my_rank];
		hosts->my_local = hosts->local_of[my_rank];
		hosts->my_count = hosts->size[hosts->my_host];
		hosts->my_ranks = &hosts->ranks[hosts->start[hosts->my_host]];
	}
	return true;
}

int ndet_host_table_first(const struct ndet_host_table *hosts, int host)
{
	if (hosts == NULL || host < 0 || host >= hosts->nhosts)
		return -1;
	return hosts->ranks[hosts->start[host]];
}
