/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The hosts of a gathered setup table (doc/protocol.md, "Hosts"): which ranks share a
 * host, in what order, and how many each host holds.  A host is one (hostname, boot
 * id) pair of the records (ndet_setup_same_host); NCCL_DET_TEST_HOST replaces both in
 * the tests.  A pure function of the table (and, for the caller's own part, of the
 * caller's rank): every rank that holds the same table builds the same hosts.
 *
 * Order: hosts are numbered by their lowest rank (the host of rank 0 is host 0); a
 * host's ranks are numbered in rank order (its local indices).  With H hosts of g_h
 * ranks each:
 *
 *   ranks    every rank, grouped by host in host order, ascending within a host:
 *            host h holds ranks[start[h]] ... ranks[start[h] + size[h] - 1];
 *   host_of  rank -> host index;     local_of  rank -> index among its host's ranks.
 *
 * Storage comes from ndet_host_table_create, before the table exists: the setup
 * allocates it with its other buffers, before any exchange, so that building the
 * hosts (and the verdict that reads them) never fails on a rank-local allocation.
 */
#ifndef NDET_HOST_TABLE_H_
#define NDET_HOST_TABLE_H_

#include <stdbool.h>

#include "protocol/ndet_setup_record.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ndet_host_table {
	int capacity;     /* ranks the arrays hold */
	int nranks;       /* of the table built last; 0 when none was built */
	int nhosts;       /* H >= 1 once built */
	int *host_of;     /* [nranks] */
	int *local_of;    /* [nranks] */
	int *ranks;       /* [nranks] grouped by host (above) */
	int *start;       /* [nhosts] host h's first entry in `ranks` */
	int *size;        /* [nhosts] g of host h: its number of ranks */
	int size_min;     /* fewest ranks on one host */
	int size_max;     /* most ranks on one host */
	bool same_size;   /* every host holds as many ranks (size_min == size_max) */
	bool consecutive; /* every host's ranks are consecutive rank numbers */
	/* The caller's host; -1, -1, 0 and NULL when built without a rank. */
	int my_host;
	int my_local;
	int my_count;        /* size[my_host] */
	const int *my_ranks; /* [my_count] the ranks of my host, ascending (mine included) */
};

/*
 * Storage for tables of up to `capacity` ranks (1 ... NDET_SETUP_NRANKS_LIMIT); NULL
 * when out of memory or out of range.  Nothing is built yet (nranks 0).
 */
struct ndet_host_table *ndet_host_table_create(int capacity);

void ndet_host_table_destroy(struct ndet_host_table *hosts);

/*
 * Build the hosts of `table` (nranks records), and the caller's part for `my_rank`
 * (-1: none).  false, with nothing built (nranks and nhosts 0), when `hosts` or
 * `table` is NULL, nranks is outside [1, capacity] or my_rank outside [-1, nranks).
 * Reads only the host identities, bounded by their fields (unterminated strings are
 * compared whole): safe on any bytes, meaningful on records that parsed.
 */
bool ndet_host_table_build(struct ndet_host_table *hosts, const struct ndet_setup_payload *table,
			   int nranks, int my_rank);

/* The lowest rank of host h (its first), or -1 outside [0, nhosts). */
int ndet_host_table_first(const struct ndet_host_table *hosts, int host);

#ifdef __cplusplus
}
#endif

#endif /* NDET_HOST_TABLE_H_ */
