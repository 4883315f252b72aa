/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The hosts of a setup table (src/protocol/ndet_host_table.h): for layouts of one and
 * several hosts, consecutive or interleaved, with equal and unequal ranks per host,
 * the host and local index of every rank, each host's size and ranks, the caller's
 * own host, and the same answer whichever rank builds it.  Then what hosts change
 * elsewhere: ranks on other hosts are remote peers even where pids and namespace
 * inodes collide, and a teardown neither shares nor waits for them.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "protocol/ndet_host_table.h"
#include "protocol/ndet_teardown.h"
#include "kernels/ndet_types.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define MAX_RANKS     8

/* A table whose rank r is on host letters[r] ("AABB": two hosts of two). */
static void make_hosts(struct ndet_setup_payload *table, const char *letters)
{
	const int nranks = (int)strlen(letters);
	for (int r = 0; r < nranks; r++) {
		memset(&table[r], 0, sizeof(table[r]));
		snprintf(table[r].hostname, sizeof(table[r].hostname), "node-%c", letters[r]);
		snprintf(table[r].boot_id, sizeof(table[r].boot_id), "boot-%c", letters[r]);
		table[r].rank = r;
		table[r].nranks = nranks;
	}
}

struct layout {
	const char *letters;
	int nhosts;
	int host_of[MAX_RANKS];
	int local_of[MAX_RANKS];
	int ranks[MAX_RANKS]; /* grouped by host */
	int size[MAX_RANKS];  /* per host */
	bool same_size;
	bool consecutive;
};

static const struct layout layouts[] = {
	/* letters, H, host_of, local_of, ranks, size, same_size, consecutive */
	{"AABB", 2, {0, 0, 1, 1}, {0, 1, 0, 1}, {0, 1, 2, 3}, {2, 2}, 1, 1},       /* 2 x 2 */
	{"ABCD", 4, {0, 1, 2, 3}, {0, 0, 0, 0}, {0, 1, 2, 3}, {1, 1, 1, 1}, 1, 1}, /* 4 x 1 */
	{"AAAA", 1, {0, 0, 0, 0}, {0, 1, 2, 3}, {0, 1, 2, 3}, {4}, 1, 1},          /* 1 x 4 */
	{"AABBCC", 3, {0, 0, 1, 1, 2, 2}, {0, 1, 0, 1, 0, 1}, {0, 1, 2, 3, 4, 5}, {2, 2, 2}, 1, 1},
	{"ABAB", 2, {0, 1, 0, 1}, {0, 0, 1, 1}, {0, 2, 1, 3}, {2, 2}, 1, 0}, /* interleaved */
	{"AAB", 2, {0, 0, 1}, {0, 1, 0}, {0, 1, 2}, {2, 1}, 0, 1},           /* 2 + 1 */
	{"ABB", 2, {0, 1, 1}, {0, 0, 1}, {0, 1, 2}, {1, 2}, 0, 1},           /* 1 + 2 */
	{"ABBA", 2, {0, 1, 1, 0}, {0, 0, 1, 1}, {0, 3, 1, 2}, {2, 2}, 1, 0}, /* non-consecutive */
	{"BA", 2, {0, 1}, {0, 0}, {0, 1}, {1, 1}, 1, 1}, /* hosts by lowest rank, not name */
	{"CABAC", 3, {0, 1, 2, 1, 0}, {0, 0, 0, 1, 1}, {0, 4, 1, 3, 2}, {2, 2, 1}, 0, 0},
	{"A", 1, {0}, {0}, {0}, {1}, 1, 1},
};

static void expect_layout(const struct ndet_host_table *hosts, const struct layout *layout,
			  int nranks)
{
	assert_int_equal(hosts->nranks, nranks);
	assert_int_equal(hosts->nhosts, layout->nhosts);
	int min = nranks, max = 0;
	for (int h = 0; h < layout->nhosts; h++) {
		assert_int_equal(hosts->size[h], layout->size[h]);
		assert_int_equal(ndet_host_table_first(hosts, h), layout->ranks[hosts->start[h]]);
		min = layout->size[h] < min ? layout->size[h] : min;
		max = layout->size[h] > max ? layout->size[h] : max;
		/* A host's ranks are its local indices in order. */
		for (int i = 0; i < hosts->size[h]; i++) {
			const int r = hosts->ranks[hosts->start[h] + i];
			assert_int_equal(hosts->host_of[r], h);
			assert_int_equal(hosts->local_of[r], i);
		}
	}
	assert_int_equal(hosts->size_min, min);
	assert_int_equal(hosts->size_max, max);
	for (int r = 0; r < nranks; r++) {
		assert_int_equal(hosts->host_of[r], layout->host_of[r]);
		assert_int_equal(hosts->local_of[r], layout->local_of[r]);
		assert_int_equal(hosts->ranks[r], layout->ranks[r]);
	}
	assert_int_equal(hosts->same_size, layout->same_size);
	assert_int_equal(hosts->consecutive, layout->consecutive);
}

static void expect_mine(const struct ndet_host_table *hosts, int my_rank)
{
	if (my_rank < 0) {
		assert_int_equal(hosts->my_host, -1);
		assert_int_equal(hosts->my_local, -1);
		assert_int_equal(hosts->my_count, 0);
		assert_null(hosts->my_ranks);
		return;
	}
	const int h = hosts->host_of[my_rank];
	assert_int_equal(hosts->my_host, h);
	assert_int_equal(hosts->my_local, hosts->local_of[my_rank]);
	assert_int_equal(hosts->my_count, hosts->size[h]);
	assert_non_null(hosts->my_ranks);
	/* Every rank of my host, ascending, me at my local index; nobody else. */
	assert_int_equal(hosts->my_ranks[hosts->my_local], my_rank);
	int listed = 0;
	for (int r = 0; r < hosts->nranks; r++) {
		if (hosts->host_of[r] != h)
			continue;
		assert_int_equal(hosts->my_ranks[listed], r);
		listed++;
	}
	assert_int_equal(listed, hosts->my_count);
}

/* What every rank shares must not depend on who built it. */
static void expect_same_shared(const struct ndet_host_table *a, const struct ndet_host_table *b)
{
	assert_int_equal(a->nranks, b->nranks);
	assert_int_equal(a->nhosts, b->nhosts);
	const size_t ranks = (size_t)a->nranks * sizeof(int);
	const size_t per_host = (size_t)a->nhosts * sizeof(int);
	assert_memory_equal(a->host_of, b->host_of, ranks);
	assert_memory_equal(a->local_of, b->local_of, ranks);
	assert_memory_equal(a->ranks, b->ranks, ranks);
	assert_memory_equal(a->start, b->start, per_host);
	assert_memory_equal(a->size, b->size, per_host);
	assert_int_equal(a->size_min, b->size_min);
	assert_int_equal(a->size_max, b->size_max);
	assert_int_equal(a->same_size, b->same_size);
	assert_int_equal(a->consecutive, b->consecutive);
}

static void test_layouts(void **state)
{
	(void)state;
	struct ndet_setup_payload table[MAX_RANKS], copy[MAX_RANKS];
	struct ndet_host_table *reference = ndet_host_table_create(MAX_RANKS);
	struct ndet_host_table *hosts = ndet_host_table_create(MAX_RANKS);
	assert_non_null(reference);
	assert_non_null(hosts);
	for (size_t i = 0; i < ARRAY_SIZE(layouts); i++) {
		const struct layout *layout = &layouts[i];
		const int nranks = (int)strlen(layout->letters);
		print_message("hosts %s\n", layout->letters);
		make_hosts(table, layout->letters);
		memcpy(copy, table, sizeof(table));
		assert_true(ndet_host_table_build(reference, table, nranks, -1));
		expect_layout(reference, layout, nranks);
		expect_mine(reference, -1);
		/* Every rank builds from its own copy of the gathered bytes. */
		for (int me = 0; me < nranks; me++) {
			assert_true(ndet_host_table_build(hosts, table, nranks, me));
			expect_layout(hosts, layout, nranks);
			expect_mine(hosts, me);
			expect_same_shared(hosts, reference);
		}
		/* The table is only read. */
		assert_memory_equal(copy, table, sizeof(table));
	}
	ndet_host_table_destroy(hosts);
	ndet_host_table_destroy(reference);
}

/* A host is hostname and boot id together; what else a record says does not count. */
static void test_identity(void **state)
{
	(void)state;
	struct ndet_setup_payload table[4];
	struct ndet_host_table *hosts = ndet_host_table_create(4);
	assert_non_null(hosts);

	/* Same name, another boot (a rebooted node, or a container's name): two hosts. */
	make_hosts(table, "AAAA");
	snprintf(table[2].boot_id, sizeof(table[2].boot_id), "boot-other");
	assert_true(ndet_host_table_build(hosts, table, 4, 0));
	assert_int_equal(hosts->nhosts, 2);
	assert_int_equal(hosts->host_of[2], 1);
	assert_false(hosts->same_size);

	/* Same boot id, another name: two hosts too. */
	make_hosts(table, "AAAA");
	snprintf(table[3].hostname, sizeof(table[3].hostname), "node-Z");
	assert_true(ndet_host_table_build(hosts, table, 4, 0));
	assert_int_equal(hosts->nhosts, 2);
	assert_int_equal(hosts->host_of[3], 1);

	/* Pids, devices, ranks and statuses play no part. */
	make_hosts(table, "AABB");
	for (int r = 0; r < 4; r++) {
		table[r].pid = 1;
		table[r].pid_namespace = 4026531836ull;
		table[r].device_uuid[0] = 7;
		table[r].local_status = NDET_LOCAL_ALLOC_FAILED;
	}
	assert_true(ndet_host_table_build(hosts, table, 4, 3));
	assert_int_equal(hosts->nhosts, 2);
	assert_int_equal(hosts->my_host, 1);

	/* Unterminated fields are compared whole, never read past. */
	make_hosts(table, "AAAA");
	for (int r = 0; r < 4; r++)
		memset(table[r].hostname, 'x', sizeof(table[r].hostname));
	assert_true(ndet_host_table_build(hosts, table, 4, -1));
	assert_int_equal(hosts->nhosts, 1);
	table[1].hostname[sizeof(table[1].hostname) - 1] = 'y';
	assert_true(ndet_host_table_build(hosts, table, 4, -1));
	assert_int_equal(hosts->nhosts, 2);
	ndet_host_table_destroy(hosts);
}

/* Storage: capacity bounds, a smaller table in larger storage, refused arguments. */
static void test_storage_and_bad_arguments(void **state)
{
	(void)state;
	struct ndet_setup_payload table[4];
	make_hosts(table, "ABAB");
	assert_null(ndet_host_table_create(0));
	assert_null(ndet_host_table_create(-1));
	assert_null(ndet_host_table_create(NDET_SETUP_NRANKS_LIMIT + 1));
	ndet_host_table_destroy(NULL);

	struct ndet_host_table *hosts = ndet_host_table_create(3);
	assert_non_null(hosts);
	assert_int_equal(hosts->capacity, 3);
	assert_int_equal(hosts->nranks, 0);
	assert_int_equal(hosts->my_host, -1);
	/* A table larger than the storage, or bad arguments: nothing built. */
	assert_true(ndet_host_table_build(hosts, table, 3, 1));
	assert_false(ndet_host_table_build(hosts, table, 4, 1));
	assert_int_equal(hosts->nranks, 0);
	assert_int_equal(hosts->nhosts, 0);
	assert_int_equal(hosts->my_host, -1);
	assert_null(hosts->my_ranks);
	assert_false(ndet_host_table_build(hosts, NULL, 2, 0));
	assert_false(ndet_host_table_build(hosts, table, 0, -1));
	assert_false(ndet_host_table_build(hosts, table, 2, 2));
	assert_false(ndet_host_table_build(hosts, table, 2, -2));
	assert_false(ndet_host_table_build(NULL, table, 2, 0));
	assert_int_equal(ndet_host_table_first(hosts, 0), -1);
	assert_int_equal(ndet_host_table_first(NULL, 0), -1);
	/* Built again after a refusal: a smaller table in the same storage. */
	assert_true(ndet_host_table_build(hosts, table, 2, 1));
	assert_int_equal(hosts->nhosts, 2);
	assert_int_equal(ndet_host_table_first(hosts, 1), 1);
	assert_int_equal(ndet_host_table_first(hosts, 2), -1);
	assert_int_equal(ndet_host_table_first(hosts, -1), -1);
	ndet_host_table_destroy(hosts);
}

/* The largest tables: every rank its own host, and 8 ranks per host, interleaved. */
static void test_largest_tables(void **state)
{
	(void)state;
	static struct ndet_setup_payload table[NDET_SETUP_NRANKS_LIMIT];
	const int n = NDET_SETUP_NRANKS_LIMIT;
	struct ndet_host_table *hosts = ndet_host_table_create(n);
	assert_non_null(hosts);
	for (int r = 0; r < n; r++) {
		memset(&table[r], 0, sizeof(table[r]));
		snprintf(table[r].hostname, sizeof(table[r].hostname), "node-%04d", r);
		snprintf(table[r].boot_id, sizeof(table[r].boot_id), "boot");
	}
	assert_true(ndet_host_table_build(hosts, table, n, n - 1));
	assert_int_equal(hosts->nhosts, n);
	assert_true(hosts->same_size && hosts->consecutive);
	assert_int_equal(hosts->size_max, 1);
	assert_int_equal(hosts->my_host, n - 1);
	assert_int_equal(hosts->my_count, 1);

	/* Rank r on host r % 512: 512 hosts of 8, each host's ranks 512 apart. */
	for (int r = 0; r < n; r++)
		snprintf(table[r].hostname, sizeof(table[r].hostname), "node-%04d", r % 512);
	assert_true(ndet_host_table_build(hosts, table, n, 1000));
	assert_int_equal(hosts->nhosts, 512);
	assert_true(hosts->same_size);
	assert_false(hosts->consecutive);
	assert_int_equal(hosts->size_min, 8);
	assert_int_equal(hosts->my_host, 1000 % 512);
	assert_int_equal(hosts->my_local, 1);
	for (int i = 0; i < 8; i++)
		assert_int_equal(hosts->my_ranks[i], 1000 % 512 + 512 * i);
	ndet_host_table_destroy(hosts);
}

/* ---------------------------------------------------------------- peers on other hosts */

/*
 * Hosts `letters`, every rank in the initial PID and IPC namespaces (whose inodes are
 * the same constants on every Linux host), pids[r] as given, a pool each.
 */
static void make_colliding(struct ndet_setup_payload *table, const char *letters,
			   const uint64_t *pids)
{
	make_hosts(table, letters);
	for (int r = 0; r < (int)strlen(letters); r++) {
		table[r].pid = pids[r];
		table[r].pid_namespace = 4026531836ull;
		table[r].ipc_namespace = 4026531839ull;
		table[r].pool_address = 0x7f0000000000ull + ((uint64_t)r << 32);
		table[r].pool_bytes = 1 << 20;
	}
}

static void test_colliding_pids_are_remote(void **state)
{
	(void)state;
	struct ndet_setup_payload table[4];
	/* Host A: ranks 0 and 1 in one process; host B: the same pid for its ranks. */
	const uint64_t one_pid[4] = {4242, 4242, 4242, 4242};
	make_colliding(table, "AABB", one_pid);
	assert_int_equal(ndet_setup_peer_kind(table, 0, 1), NDET_PEER_SAME_PROCESS);
	assert_int_equal(ndet_setup_peer_kind(table, 2, 3), NDET_PEER_SAME_PROCESS);
	assert_int_equal(ndet_setup_peer_kind(table, 3, 3), NDET_PEER_SELF);
	for (int a = 0; a < 2; a++)
		for (int b = 2; b < 4; b++) {
			assert_int_equal(ndet_setup_peer_kind(table, a, b), NDET_PEER_REMOTE);
			assert_int_equal(ndet_setup_peer_kind(table, b, a), NDET_PEER_REMOTE);
		}
	assert_true(ndet_setup_table_shares_process(table, 4));

	/* Interleaved: the same pids, the other pairs. */
	make_colliding(table, "ABAB", one_pid);
	assert_int_equal(ndet_setup_peer_kind(table, 0, 2), NDET_PEER_SAME_PROCESS);
	assert_int_equal(ndet_setup_peer_kind(table, 0, 1), NDET_PEER_REMOTE);
	assert_int_equal(ndet_setup_peer_kind(table, 3, 0), NDET_PEER_REMOTE);

	/* One process per rank, pids colliding across hosts: IPC on a host, else remote. */
	const uint64_t per_host[4] = {100, 101, 100, 101};
	make_colliding(table, "AABB", per_host);
	assert_int_equal(ndet_setup_peer_kind(table, 0, 1), NDET_PEER_IPC);
	assert_int_equal(ndet_setup_peer_kind(table, 0, 2), NDET_PEER_REMOTE);
	assert_int_equal(ndet_setup_peer_kind(table, 1, 3), NDET_PEER_REMOTE);
	assert_false(ndet_setup_table_shares_process(table, 4));

	/* Every rank its own host, all with one pid: nobody shares anything. */
	make_colliding(table, "ABCD", one_pid);
	for (int a = 0; a < 4; a++)
		for (int b = 0; b < 4; b++)
			assert_int_equal(ndet_setup_peer_kind(table, a, b),
					 a == b ? NDET_PEER_SELF : NDET_PEER_REMOTE);
	assert_false(ndet_setup_table_shares_process(table, 4));
}

/* A teardown's view: engines of this test stand for pools; "freed" counts them. */
struct pool_stub {
	int rank;
	bool freed;
};

static uint64_t detach_words[NDET_MAX_RANKS];
static uint64_t pids_judged[8];
static int pids_judged_count;

static void stub_free(void *engine)
{
	((struct pool_stub *)engine)->freed = true;
}

static uint64_t stub_abandon(void *engine)
{
	(void)engine;
	return 0;
}

static ndet_teardown_read_t stub_read_detach(void *engine, uint64_t *words)
{
	(void)engine;
	memcpy(words, detach_words, sizeof(detach_words));
	return NDET_TEARDOWN_READ_OK;
}

static bool stub_process_gone(uint64_t pid)
{
	if (pids_judged_count < (int)ARRAY_SIZE(pids_judged))
		pids_judged[pids_judged_count++] = pid;
	return false;
}

static const struct ndet_teardown_ops stub_ops = {
	.free = stub_free,
	.abandon = stub_abandon,
	.read_detach = stub_read_detach,
	.process_gone = stub_process_gone,
};

/* ndet_teardown_join with memory reserved, as the engines join. */
static struct ndet_teardown_share *join(const struct ndet_setup_payload *table, int nranks,
					int rank)
{
	struct ndet_teardown_share *reserved = ndet_teardown_reserve();
	assert_non_null(reserved);
	struct ndet_teardown_share *share = ndet_teardown_join(table, nranks, rank, &reserved);
	ndet_teardown_unreserve(reserved);
	return share;
}

static void teardown_reset(void)
{
	memset(detach_words, 0, sizeof(detach_words));
	pids_judged_count = 0;
	ndet_resources_reset_for_testing();
	ndet_teardown_set_detach_wait_for_testing(0);
}

static void test_teardown_ignores_other_hosts(void **state)
{
	(void)state;
	struct ndet_setup_payload table[4];
	struct ndet_resources resources;

	/*
	 * Ranks 0 and 1 are this process on host A; host B's ranks have the same pid.
	 * Their share is the two of them: the last release frees both pools, with no
	 * wait for host B (whose ranks never import them).
	 */
	teardown_reset();
	const uint64_t one_pid[4] = {4242, 4242, 4242, 4242};
	make_colliding(table, "AABB", one_pid);
	struct pool_stub pools[2] = {{0, false}, {1, false}};
	struct ndet_teardown_share *share0 = join(table, 4, 0);
	/* Rank 1 finds rank 0's share: it needs no memory of its own, and takes none. */
	struct ndet_teardown_share *reserved = NULL;
	struct ndet_teardown_share *share1 = ndet_teardown_join(table, 4, 1, &reserved);
	assert_non_null(share0);
	assert_ptr_equal(share0, share1);
	reserved = ndet_teardown_reserve();
	assert_non_null(reserved);
	struct ndet_teardown_share *const spare = reserved;
	assert_ptr_equal(ndet_teardown_join(table, 4, 1, &reserved), share0);
	assert_ptr_equal(reserved, spare);
	ndet_teardown_unreserve(reserved);
	ndet_teardown_release(share0, &pools[0], &stub_ops, 0, true, false,
			      NDET_TEARDOWN_ALL_READERS);
	assert_false(pools[0].freed);
	ndet_teardown_release(share1, &pools[1], &stub_ops, 1, true, false,
			      NDET_TEARDOWN_ALL_READERS);
	assert_true(pools[0].freed && pools[1].freed);
	ndet_resources_get(&resources);
	assert_int_equal(resources.deferred_pools, 0);
	assert_int_equal(resources.pending_pools, 0);
	assert_int_equal(ndet_teardown_shares_for_testing(), 0);

	/*
	 * Rank 0 alone here, pid 100; rank 1 (pid 101) on this host imports our pool;
	 * host B reuses both pids.  The pool waits for rank 1 only, and only rank 1's
	 * pid is ever judged.
	 */
	teardown_reset();
	const uint64_t per_host[4] = {100, 101, 100, 101};
	make_colliding(table, "AABB", per_host);
	struct pool_stub alone = {0, false};
	/* No share yet, and no memory reserved for one: none (the pool would be kept). */
	reserved = NULL;
	assert_null(ndet_teardown_join(table, 4, 0, &reserved));
	assert_int_equal(ndet_teardown_shares_for_testing(), 0);
	struct ndet_teardown_share *share = join(table, 4, 0);
	assert_non_null(share);
	ndet_teardown_release(share, &alone, &stub_ops, 0, true, false, NDET_TEARDOWN_ALL_READERS);
	assert_false(alone.freed);
	ndet_teardown_pending_retry(false);
	assert_false(alone.freed);
	ndet_resources_get(&resources);
	assert_int_equal(resources.pending_pools, 1);
	assert_true(pids_judged_count >= 1);
	for (int i = 0; i < pids_judged_count; i++)
		assert_int_equal(pids_judged[i], 101);
	/* Rank 1's detach word is all it takes. */
	detach_words[1] = ndet_teardown_detach_word(ndet_teardown_epoch(table, 4), 1, 0);
	ndet_teardown_pending_retry(false);
	assert_true(alone.freed);
	ndet_resources_get(&resources);
	assert_int_equal(resources.pending_pools, 0);
	ndet_teardown_set_detach_wait_for_testing(NDET_TEARDOWN_DETACH_WAIT_MS);
}

/*
 * Shares and pending pools by local index, in a communicator larger than NDET_MAX_RANKS:
 * 32 ranks on hosts A, B, A, B, ..., every rank a process of its own.  Rank 0's host
 * peers are ranks 2, 4, ..., 30 (local indices 1 ... 15): its pool waits for their
 * words in slots 1 ... 15 (a word in a global rank's slot counts for nothing), judges
 * only their pids, and goes once all fifteen are there.  A host of 17 gets no share.
 */
static void test_teardown_by_local_index(void **state)
{
	(void)state;
	enum { N = 34 };
	static struct ndet_setup_payload table[N];
	static char letters[N + 1];
	uint64_t pids[N];
	for (int r = 0; r < N; r++) {
		letters[r] = r % 2 == 0 ? 'A' : 'B';
		pids[r] = 1000 + (uint64_t)r;
	}
	letters[N - 2] = '\0';
	teardown_reset();
	make_colliding(table, letters, pids);
	const uint64_t epoch = ndet_teardown_epoch(table, N - 2);
	struct pool_stub pool = {0, false};
	struct ndet_teardown_share *share = join(table, N - 2, 0);
	assert_non_null(share);
	ndet_teardown_release(share, &pool, &stub_ops, 0, true, false, NDET_TEARDOWN_ALL_READERS);
	ndet_teardown_pending_retry(false);
	assert_false(pool.freed);
	for (int i = 0; i < pids_judged_count; i++)
		assert_true(pids_judged[i] % 2 == 0 && pids_judged[i] != 1000);
	for (int l = 1; 2 * l < NDET_MAX_RANKS; l++)
		detach_words[2 * l] = ndet_teardown_detach_word(epoch, 2 * l, 0);
	ndet_teardown_pending_retry(false);
	assert_false(pool.freed); /* global ranks' slots */
	memset(detach_words, 0, sizeof(detach_words));
	for (int l = 1; l < NDET_MAX_RANKS; l++) {
		assert_false(pool.freed);
		detach_words[l] = ndet_teardown_detach_word(epoch, 2 * l, 0);
		ndet_teardown_pending_retry(false);
	}
	assert_true(pool.freed);

	/* Seventeen ranks on host A: no share (the verdict refuses that table). */
	letters[N - 2] = 'A';
	letters[N - 1] = 'B';
	make_colliding(table, letters, pids);
	assert_null(join(table, N, 0));
	assert_int_equal(ndet_teardown_shares_for_testing(), 0);
	ndet_teardown_set_detach_wait_for_testing(NDET_TEARDOWN_DETACH_WAIT_MS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_layouts),
		cmocka_unit_test(test_identity),
		cmocka_unit_test(test_storage_and_bad_arguments),
		cmocka_unit_test(test_largest_tables),
		cmocka_unit_test(test_colliding_pids_are_remote),
		cmocka_unit_test(test_teardown_ignores_other_hosts),
		cmocka_unit_test(test_teardown_by_local_index),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
