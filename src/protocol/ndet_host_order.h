/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The host order of a communicator (doc/multihost.md): which ranks share a host, and
 * in what order the hosts and their ranks enter the two-level tree.  Hosts are
 * numbered by their lowest rank (rank 0's host is host 0, the host of the lowest rank
 * not on it is host 1, ...); a host's ranks are numbered in rank order (their local
 * index).  A pure function of the ranks' host identities: every rank that holds the
 * same identities computes the same order.
 */
#ifndef NDET_HOST_ORDER_H_
#define NDET_HOST_ORDER_H_

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Are ranks a and b on the same host?  `identities` is the caller's description of
 * the ranks' hosts.  Must be an equivalence (reflexive, symmetric, transitive).
 */
typedef bool (*ndet_host_same_fn)(const void *identities, int rank_a, int rank_b);

/*
 * Number the hosts of nranks ranks.  For every rank r: host_of[r] is its host index,
 * local_of[r] its index among the ranks of its host; for every host h < H:
 * host_size[h] is its number of ranks (g_h).  Each array holds nranks entries (H is
 * at most nranks).  Returns H >= 1, or -1 (arrays untouched) for nranks < 1 or a NULL
 * pointer.  Compares each rank with the first rank of each host found so far.
 */
int ndet_host_order(int nranks, ndet_host_same_fn same, const void *identities, int *host_of,
		    int *local_of, int *host_size);

/* The same for hosts named by strings: names[r] is rank r's (equal strings, one host). */
int ndet_host_order_strings(const char *const *names, int nranks, int *host_of, int *local_of,
			    int *host_size);

#ifdef __cplusplus
}
#endif

#endif /* NDET_HOST_ORDER_H_ */
