/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Setup record: wire format checks and the verdict every rank computes from the
 * gathered table.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "protocol/ndet_setup_record.h"
#include "protocol/ndet_host_table.h"
#include "protocol/ndet_setup.h"
#include "kernels/ndet_types.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define TABLE_MAX     128

static const uint64_t pool_bytes = 64ull << 20;

/*
 * A ready rank of a good table.  Ranks 2k and 2k+1 share a process (as with
 * ncclCommInitAll or nccl-tests -g), so tables mix both peer kinds.
 */
static void make_record(struct ndet_setup_payload *record, int rank, int nranks)
{
	memset(record, 0, sizeof(*record));
	snprintf(record->hostname, sizeof(record->hostname), "gpu-node-07");
	snprintf(record->boot_id, sizeof(record->boot_id), "4f1e2d3c-5b6a-4978-8695-a4b3c2d1e0f9");
	record->pid = 4000 + (uint64_t)(rank / 2);
	record->pid_namespace = 4026531836ull;
	record->ipc_namespace = 4026531839ull;
	for (size_t i = 0; i < sizeof(record->device_uuid); i++)
		record->device_uuid[i] = (uint8_t)(rank * 16 + (int)i);
	record->cuda_device = rank % 8;
	record->rank = rank;
	record->nranks = nranks;
	record->local_status = NDET_LOCAL_READY;
	record->library_version = 100;
	record->settings_hash = 0x0123456789abcdefull;
	record->pool_bytes = pool_bytes;
	record->pool_address = 0x7f0000000000ull + (uint64_t)rank * pool_bytes;
	record->flags_offset = 0;
	record->data_offset = 1 << 20;
	memset(record->ipc_handle, 0x40 + rank, sizeof(record->ipc_handle));
	record->sm_count = 132;
	record->blocking = 1;
}

static void make_table(struct ndet_setup_payload *table, int nranks)
{
	for (int r = 0; r < nranks; r++)
		make_record(&table[r], r, nranks);
}

/*
 * Evaluate as every rank would: each on its own copy of the gathered bytes, with host
 * storage of its own (the setup allocates it per communicator, sized to it).  All
 * verdicts must be equal (the function is pure), and the table must stay unchanged.
 * `diverts`: the multi-host decision (ndet_setup_evaluate_rules); -1 = this build's
 * (ndet_setup_evaluate).
 */
static struct ndet_setup_verdict evaluate_everywhere(const struct ndet_setup_payload *table,
						     int nranks, int diverts)
{
	static struct ndet_setup_payload copy[TABLE_MAX];
	struct ndet_setup_verdict first = {0};

	assert_true(nranks >= 1 && nranks <= TABLE_MAX);
	for (int r = 0; r < nranks; r++) {
		struct ndet_setup_verdict verdict;
		struct ndet_host_table *hosts = ndet_host_table_create(r % 2 ? nranks : TABLE_MAX);

		assert_non_null(hosts);
		memset(&verdict, 0x5a, sizeof(verdict));
		memcpy(copy, table, (size_t)nranks * sizeof(*table));
		if (diverts < 0)
			ndet_setup_evaluate(copy, nranks, hosts, &verdict);
		else
			ndet_setup_evaluate_rules(copy, nranks, hosts, diverts != 0, &verdict);
		assert_memory_equal(copy, table, (size_t)nranks * sizeof(*table));
		ndet_host_table_destroy(hosts);
		if (r == 0)
			first = verdict;
		assert_int_equal(verdict.reason, first.reason);
		assert_int_equal(verdict.offending_rank, first.offending_rank);
		assert_int_equal(verdict.detail, first.detail);
	}
	return first;
}

static void expect_verdict_rules(const struct ndet_setup_payload *table, int nranks, int diverts,
				 ndet_verdict_reason_t reason, int offending_rank, uint32_t detail)
{
	struct ndet_setup_verdict verdict = evaluate_everywhere(table, nranks, diverts);

	if (verdict.reason != reason || verdict.offending_rank != offending_rank ||
	    verdict.detail != detail)
		fail_msg("n=%d: verdict %s rank %d detail %u, expected %s rank %d detail %u",
			 nranks, ndet_verdict_reason_name(verdict.reason), verdict.offending_rank,
			 verdict.detail, ndet_verdict_reason_name(reason), offending_rank, detail);
}

/* This build's verdict. */
static void expect_verdict(const struct ndet_setup_payload *table, int nranks,
			   ndet_verdict_reason_t reason, int offending_rank, uint32_t detail)
{
	expect_verdict_rules(table, nranks, -1, reason, offending_rank, detail);
}

/* FNV-1a written out again, so a wrong constant in the library shows. */
static uint32_t fnv1a(const void *bytes, size_t length)
{
	uint32_t hash = 2166136261u;

	for (size_t i = 0; i < length; i++) {
		hash ^= ((const unsigned char *)bytes)[i];
		hash *= 16777619u;
	}
	return hash;
}

/* ---------------------------------------------------------------- header */

static void test_header_round_trip(void **state)
{
	(void)state;
	struct ndet_setup_header header;

	ndet_setup_header_init(&header, sizeof(struct ndet_setup_payload));
	assert_int_equal(header.magic, NDET_SETUP_MAGIC);
	assert_memory_equal(&header.magic, "NDET", 4);
	assert_int_equal(header.format_version, NDET_SETUP_FORMAT_VERSION);
	assert_int_equal(header.payload_length, sizeof(struct ndet_setup_payload));
	assert_int_equal(header.checksum, fnv1a(&header, 12));
	assert_int_equal(ndet_setup_header_checksum(&header), header.checksum);
	assert_int_equal(ndet_setup_header_check(&header), NDET_OK);

	/* The header travels as 16 raw bytes. */
	unsigned char wire[sizeof(header)];
	struct ndet_setup_header received;

	assert_int_equal(sizeof(wire), 16);
	memcpy(wire, &header, sizeof(wire));
	memcpy(&received, wire, sizeof(received));
	assert_int_equal(ndet_setup_header_check(&received), NDET_OK);
	assert_int_equal(ndet_setup_header_check(NULL), NDET_ERR_INVALID_ARGUMENT);
}

static void test_header_each_field_wrong_is_refused(void **state)
{
	(void)state;
	struct ndet_setup_header good, header;

	ndet_setup_header_init(&good, sizeof(struct ndet_setup_payload));

	/* Magic wrong, with and without a checksum that matches it. */
	header = good;
	header.magic ^= 0x20;
	assert_int_equal(ndet_setup_header_check(&header), NDET_ERR_UNSUPPORTED);
	header.checksum = ndet_setup_header_checksum(&header);
	assert_int_equal(ndet_setup_header_check(&header), NDET_ERR_UNSUPPORTED);

	/*
	 * The next version, and the previous ones (2: reserved where 3 has blocking, the
	 * same length; 1: no sm_count), even with a valid checksum.
	 */
	header = good;
	header.format_version = NDET_SETUP_FORMAT_VERSION + 1;
	assert_int_equal(ndet_setup_header_check(&header), NDET_ERR_UNSUPPORTED);
	header.checksum = ndet_setup_header_checksum(&header);
	assert_int_equal(ndet_setup_header_check(&header), NDET_ERR_UNSUPPORTED);
	assert_int_equal(NDET_SETUP_FORMAT_VERSION, 4);
	header = good;
	header.format_version = 3;
	header.checksum = ndet_setup_header_checksum(&header);
	assert_int_equal(ndet_setup_header_check(&header), NDET_ERR_UNSUPPORTED);
	assert_true(ndet_setup_header_is_record(&header));
	header.format_version = 1;
	header.payload_length = sizeof(struct ndet_setup_payload) - 8;
	header.checksum = ndet_setup_header_checksum(&header);
	assert_int_equal(ndet_setup_header_check(&header), NDET_ERR_UNSUPPORTED);
	header = good;
	header.format_version = 0;
	header.checksum = ndet_setup_header_checksum(&header);
	assert_int_equal(ndet_setup_header_check(&header), NDET_ERR_UNSUPPORTED);

	/* Length not ours, with valid checksums. */
	const uint32_t lengths[] = {0, sizeof(struct ndet_setup_payload) - 1,
				    sizeof(struct ndet_setup_payload) + 1,
				    sizeof(struct ndet_setup_payload) + 8, 0xffffffffu};

	for (size_t i = 0; i < ARRAY_SIZE(lengths); i++) {
		ndet_setup_header_init(&header, lengths[i]);
		assert_int_equal(ndet_setup_header_check(&header), NDET_ERR_UNSUPPORTED);
	}

	/* Checksum wrong. */
	header = good;
	header.checksum++;
	assert_int_equal(ndet_setup_header_check(&header), NDET_ERR_UNSUPPORTED);

	/* Any single flipped bit anywhere in the 16 bytes. */
	for (size_t bit = 0; bit < 8 * sizeof(header); bit++) {
		unsigned char bytes[sizeof(header)];

		memcpy(bytes, &good, sizeof(bytes));
		bytes[bit / 8] ^= (unsigned char)(1u << (bit % 8));
		memcpy(&header, bytes, sizeof(header));
		assert_int_equal(ndet_setup_header_check(&header), NDET_ERR_UNSUPPORTED);
	}
}

/*
 * A record of another release (magic and checksum right) against bytes no rank sent
 * (what a rank without nccl-det leaves in the exchange): only the first is a record.
 */
static void test_header_is_record(void **state)
{
	(void)state;
	struct ndet_setup_header good, header;
	ndet_setup_header_init(&good, sizeof(struct ndet_setup_payload));
	assert_true(ndet_setup_header_is_record(&good));
	header = good;
	header.format_version = NDET_SETUP_FORMAT_VERSION + 1;
	header.payload_length = 4096;
	header.checksum = ndet_setup_header_checksum(&header);
	assert_true(ndet_setup_header_is_record(&header));
	assert_int_equal(ndet_setup_header_check(&header), NDET_ERR_UNSUPPORTED);
	header = good;
	header.magic ^= 0x20;
	header.checksum = ndet_setup_header_checksum(&header);
	assert_false(ndet_setup_header_is_record(&header));
	header = good;
	header.checksum ^= 1;
	assert_false(ndet_setup_header_is_record(&header));
	memset(&header, 0, sizeof(header));
	assert_false(ndet_setup_header_is_record(&header));
	assert_false(ndet_setup_header_is_record(NULL));
}

/* ---------------------------------------------------------------- payload parse */

static void test_payload_parse_good(void **state)
{
	(void)state;
	struct ndet_setup_payload record, parsed;
	unsigned char wire[sizeof(record) + 1];

	make_record(&record, 3, 8);
	memcpy(wire, &record, sizeof(record));
	assert_int_equal(ndet_setup_payload_parse(wire, sizeof(record), &parsed), NDET_OK);
	assert_memory_equal(&parsed, &record, sizeof(record));

	/* Received bytes need no alignment. */
	memset(&parsed, 0, sizeof(parsed));
	memcpy(wire + 1, &record, sizeof(record));
	assert_int_equal(ndet_setup_payload_parse(wire + 1, sizeof(record), &parsed), NDET_OK);
	assert_memory_equal(&parsed, &record, sizeof(record));

	/* Edges that are still in range. */
	record.nranks = 4096;
	record.rank = 4095;
	record.flags_offset = pool_bytes - 1;
	record.data_offset = pool_bytes - 1;
	memset(record.hostname, 'h', sizeof(record.hostname) - 1);
	record.hostname[sizeof(record.hostname) - 1] = '\0';
	assert_int_equal(ndet_setup_payload_parse(&record, sizeof(record), &parsed), NDET_OK);

	/* A rank that is not ready may have no pool: its failure must still be heard. */
	make_record(&record, 1, 2);
	record.local_status = NDET_LOCAL_ALLOC_FAILED;
	record.pool_bytes = 0;
	record.pool_address = 0;
	record.flags_offset = 0;
	record.data_offset = 0;
	record.cuda_device = -1;
	record.sm_count = 0;
	assert_int_equal(ndet_setup_payload_parse(&record, sizeof(record), &parsed), NDET_OK);

	assert_int_equal(ndet_setup_payload_parse(NULL, sizeof(record), &parsed),
			 NDET_ERR_INVALID_ARGUMENT);
	assert_int_equal(ndet_setup_payload_parse(&record, sizeof(record), NULL),
			 NDET_ERR_INVALID_ARGUMENT);
}

static void expect_refused_untouched(const void *bytes, size_t length)
{
	struct ndet_setup_payload parsed, sentinel;

	memset(&sentinel, 0xa5, sizeof(sentinel));
	parsed = sentinel;
	assert_int_equal(ndet_setup_payload_parse(bytes, length, &parsed), NDET_ERR_UNSUPPORTED);
	assert_memory_equal(&parsed, &sentinel, sizeof(parsed));
}

static void test_payload_parse_wrong_length(void **state)
{
	(void)state;
	static unsigned char wire[3 * sizeof(struct ndet_setup_payload)];
	struct ndet_setup_payload record;

	make_record(&record, 0, 1);
	memcpy(wire, &record, sizeof(record));
	for (size_t length = 0; length < sizeof(record); length++)
		expect_refused_untouched(wire, length);
	expect_refused_untouched(wire, sizeof(record) + 1);
	expect_refused_untouched(wire, sizeof(record) + 8);
	expect_refused_untouched(wire, sizeof(wire));
}

static void test_payload_parse_unterminated_strings(void **state)
{
	(void)state;
	struct ndet_setup_payload record;

	make_record(&record, 0, 2);
	memset(record.hostname, 'h', sizeof(record.hostname));
	expect_refused_untouched(&record, sizeof(record));

	make_record(&record, 0, 2);
	memset(record.boot_id, 'b', sizeof(record.boot_id));
	expect_refused_untouched(&record, sizeof(record));
}

static void test_payload_parse_out_of_range_fields(void **state)
{
	(void)state;
	struct ndet_setup_payload record;

	const int32_t bad_nranks[] = {0, -1, 4097, INT32_MIN};

	for (size_t i = 0; i < ARRAY_SIZE(bad_nranks); i++) {
		make_record(&record, 0, 2);
		record.nranks = bad_nranks[i];
		expect_refused_untouched(&record, sizeof(record));
	}

	const int32_t bad_ranks[] = {-1, 4, 5, INT32_MIN};

	for (size_t i = 0; i < ARRAY_SIZE(bad_ranks); i++) {
		make_record(&record, 0, 4);
		record.rank = bad_ranks[i];
		expect_refused_untouched(&record, sizeof(record));
	}

	const uint32_t bad_status[] = {NDET_LOCAL_REASON_COUNT, 0xffffffffu};

	for (size_t i = 0; i < ARRAY_SIZE(bad_status); i++) {
		make_record(&record, 0, 2);
		record.local_status = bad_status[i];
		expect_refused_untouched(&record, sizeof(record));
	}

	make_record(&record, 0, 2);
	record.flags_offset = pool_bytes;
	expect_refused_untouched(&record, sizeof(record));
	make_record(&record, 0, 2);
	record.data_offset = pool_bytes;
	expect_refused_untouched(&record, sizeof(record));
	make_record(&record, 0, 2);
	record.data_offset = UINT64_MAX;
	expect_refused_untouched(&record, sizeof(record));
	make_record(&record, 0, 2);
	record.pool_bytes = 0;
	expect_refused_untouched(&record, sizeof(record));
	make_record(&record, 0, 2);
	record.sm_count = 0;
	expect_refused_untouched(&record, sizeof(record));
	make_record(&record, 0, 2);
	record.pool_address = 0;
	expect_refused_untouched(&record, sizeof(record));
	make_record(&record, 0, 2);
	record.cuda_device = -1;
	expect_refused_untouched(&record, sizeof(record));
	make_record(&record, 0, 2);
	record.cuda_device = INT32_MIN;
	expect_refused_untouched(&record, sizeof(record));

	/* blocking is a flag: 0 and 1 only. */
	const uint32_t bad_blocking[] = {2, 0x80000000u, 0xffffffffu};

	for (size_t i = 0; i < ARRAY_SIZE(bad_blocking); i++) {
		make_record(&record, 0, 2);
		record.blocking = bad_blocking[i];
		expect_refused_untouched(&record, sizeof(record));
		/* A rank that is not ready is held to it too. */
		record.local_status = NDET_LOCAL_ALLOC_FAILED;
		expect_refused_untouched(&record, sizeof(record));
	}
}

/* ---------------------------------------------------------------- evaluate */

static void test_evaluate_good_tables_and_peer_kinds(void **state)
{
	(void)state;
	struct ndet_setup_payload table[NDET_MAX_RANKS];

	for (int n = 1; n <= NDET_MAX_RANKS; n++) {
		make_table(table, n);
		expect_verdict(table, n, NDET_VERDICT_OK, -1, 0);
		for (int me = 0; me < n; me++) {
			for (int peer = 0; peer < n; peer++) {
				ndet_peer_kind_t expected = me == peer ? NDET_PEER_SELF
							    : me / 2 == peer / 2
								    ? NDET_PEER_SAME_PROCESS
								    : NDET_PEER_IPC;

				assert_int_equal(ndet_setup_peer_kind(table, me, peer), expected);
			}
		}
	}
}

enum mutation {
	MUTATE_HOSTNAME,
	MUTATE_BOOT_ID,
	MUTATE_LIBRARY_VERSION,
	MUTATE_SETTINGS_HASH,
	MUTATE_POOL_BYTES,
	MUTATE_FLAGS_OFFSET,
	MUTATE_DATA_OFFSET,
	MUTATE_PID_NAMESPACE,
	MUTATE_IPC_NAMESPACE,
	MUTATE_BOTH_NAMESPACES,
	MUTATE_RANK_FIELD,
	MUTATE_NRANKS_FIELD,
	MUTATE_UNTERMINATED_HOSTNAME,
	MUTATE_UNKNOWN_NAMESPACES, /* not a refusal: unknown is not comparable */
	MUTATE_UNTERMINATED_BOOT_ID,
	MUTATE_LOCAL_STATUS,
	MUTATE_BAD_BLOCKING,
	MUTATE_NEGATIVE_CUDA_DEVICE,
	MUTATE_NULL_POOL_ADDRESS,
	MUTATE_NO_SMS,
	/*
	 * Fields no verdict compares: they may differ between ranks of a good table
	 * (each rank's own process, device, handle, flags, SMs).  A wrong one shows
	 * later: a wrong handle or address fails the mapping or the probe (rounds 3 and
	 * 4, ndet_setup.h); flags are ANDed; the fewest SMs size the grid.
	 */
	MUTATE_PID,
	MUTATE_DEVICE_UUID,
	MUTATE_CUDA_DEVICE,
	MUTATE_FLAGS,
	MUTATE_POOL_ADDRESS,
	MUTATE_IPC_HANDLE,
	MUTATE_SM_COUNT,
	MUTATE_NONBLOCKING, /* compared only between hosts */
	MUTATE_COUNT
};

struct mutation_expectation {
	ndet_verdict_reason_t reason;
	int compared_with_rank_zero; /* offending rank is the lowest that differs from 0 */
};

static const struct mutation_expectation mutation_expectations[MUTATE_COUNT] = {
	/* One rank on another host: MULTI_HOST at n = 2, else MULTI_HOST_UNEQUAL. */
	[MUTATE_HOSTNAME] = {NDET_VERDICT_MULTI_HOST, 1},
	[MUTATE_BOOT_ID] = {NDET_VERDICT_MULTI_HOST, 1},
	[MUTATE_LIBRARY_VERSION] = {NDET_VERDICT_VERSION_MISMATCH, 1},
	[MUTATE_SETTINGS_HASH] = {NDET_VERDICT_SETTINGS_MISMATCH, 1},
	[MUTATE_POOL_BYTES] = {NDET_VERDICT_POOL_MISMATCH, 1},
	[MUTATE_FLAGS_OFFSET] = {NDET_VERDICT_POOL_MISMATCH, 1},
	[MUTATE_DATA_OFFSET] = {NDET_VERDICT_POOL_MISMATCH, 1},
	[MUTATE_PID_NAMESPACE] = {NDET_VERDICT_NAMESPACE, 1},
	[MUTATE_IPC_NAMESPACE] = {NDET_VERDICT_NAMESPACE, 1},
	[MUTATE_BOTH_NAMESPACES] = {NDET_VERDICT_NAMESPACE, 1},
	[MUTATE_RANK_FIELD] = {NDET_VERDICT_RANK_MISMATCH, 0},
	[MUTATE_NRANKS_FIELD] = {NDET_VERDICT_RANK_MISMATCH, 0},
	[MUTATE_UNTERMINATED_HOSTNAME] = {NDET_VERDICT_BAD_RECORD, 0},
	[MUTATE_UNKNOWN_NAMESPACES] = {NDET_VERDICT_OK, 0},
	[MUTATE_UNTERMINATED_BOOT_ID] = {NDET_VERDICT_BAD_RECORD, 0},
	[MUTATE_LOCAL_STATUS] = {NDET_VERDICT_LOCAL_FAILURE, 0},
	[MUTATE_BAD_BLOCKING] = {NDET_VERDICT_BAD_RECORD, 0},
	[MUTATE_NEGATIVE_CUDA_DEVICE] = {NDET_VERDICT_BAD_RECORD, 0},
	[MUTATE_NULL_POOL_ADDRESS] = {NDET_VERDICT_BAD_RECORD, 0},
	[MUTATE_NO_SMS] = {NDET_VERDICT_BAD_RECORD, 0},
	[MUTATE_PID] = {NDET_VERDICT_OK, 0},
	[MUTATE_DEVICE_UUID] = {NDET_VERDICT_OK, 0},
	[MUTATE_CUDA_DEVICE] = {NDET_VERDICT_OK, 0},
	[MUTATE_FLAGS] = {NDET_VERDICT_OK, 0},
	[MUTATE_POOL_ADDRESS] = {NDET_VERDICT_OK, 0},
	[MUTATE_IPC_HANDLE] = {NDET_VERDICT_OK, 0},
	[MUTATE_SM_COUNT] = {NDET_VERDICT_OK, 0},
	[MUTATE_NONBLOCKING] = {NDET_VERDICT_OK, 0},
};

static void mutate(struct ndet_setup_payload *record, enum mutation mutation, int nranks)
{
	switch (mutation) {
	case MUTATE_HOSTNAME:
		snprintf(record->hostname, sizeof(record->hostname), "gpu-node-08");
		break;
	case MUTATE_BOOT_ID:
		record->boot_id[0] = '5';
		break;
	case MUTATE_LIBRARY_VERSION:
		record->library_version = 101;
		break;
	case MUTATE_SETTINGS_HASH:
		record->settings_hash ^= 1;
		break;
	case MUTATE_POOL_BYTES:
		record->pool_bytes *= 2;
		break;
	case MUTATE_FLAGS_OFFSET:
		record->flags_offset = 4096;
		break;
	case MUTATE_DATA_OFFSET:
		record->data_offset += 4096;
		break;
	case MUTATE_PID_NAMESPACE:
		record->pid_namespace++;
		break;
	case MUTATE_IPC_NAMESPACE:
		record->ipc_namespace++;
		break;
	case MUTATE_BOTH_NAMESPACES:
		record->pid_namespace++;
		record->ipc_namespace++;
		break;
	case MUTATE_RANK_FIELD:
		record->rank = (record->rank + 1) % nranks;
		break;
	case MUTATE_NRANKS_FIELD:
		record->nranks = nranks + 1;
		break;
	case MUTATE_UNTERMINATED_HOSTNAME:
		memset(record->hostname, 'x', sizeof(record->hostname));
		break;
	case MUTATE_UNKNOWN_NAMESPACES:
		record->pid_namespace = 0;
		record->ipc_namespace = 0;
		break;
	case MUTATE_UNTERMINATED_BOOT_ID:
		memset(record->boot_id, 'b', sizeof(record->boot_id));
		break;
	case MUTATE_LOCAL_STATUS:
		record->local_status = NDET_LOCAL_MAP_FAILED;
		break;
	case MUTATE_BAD_BLOCKING:
		record->blocking = 2;
		break;
	case MUTATE_NEGATIVE_CUDA_DEVICE:
		record->cuda_device = -1;
		break;
	case MUTATE_NULL_POOL_ADDRESS:
		record->pool_address = 0;
		break;
	case MUTATE_NO_SMS:
		record->sm_count = 0;
		break;
	case MUTATE_PID:
		record->pid += 1000;
		break;
	case MUTATE_DEVICE_UUID:
		record->device_uuid[15] ^= 0xff;
		break;
	case MUTATE_CUDA_DEVICE:
		record->cuda_device += 8;
		break;
	case MUTATE_FLAGS:
		record->flags ^= 0x1u;
		break;
	case MUTATE_POOL_ADDRESS:
		record->pool_address += 1ull << 40;
		break;
	case MUTATE_IPC_HANDLE:
		record->ipc_handle[NDET_SETUP_IPC_HANDLE_LENGTH - 1] ^= 0xff;
		break;
	case MUTATE_SM_COUNT:
		record->sm_count = 16;
		break;
	case MUTATE_NONBLOCKING:
		record->blocking = 0;
		break;
	case MUTATE_COUNT:
		break;
	}
}

/* The reason of a mutation on a table of n ranks. */
static ndet_verdict_reason_t expected_reason(enum mutation mutation, int n)
{
	const ndet_verdict_reason_t reason = mutation_expectations[mutation].reason;
	return reason == NDET_VERDICT_MULTI_HOST && n > 2 ? NDET_VERDICT_MULTI_HOST_UNEQUAL
							  : reason;
}

static uint32_t expected_detail(enum mutation mutation, const struct ndet_setup_payload *table,
				int n, int offending)
{
	if (expected_reason(mutation, n) == NDET_VERDICT_MULTI_HOST)
		return 2; /* hosts */
	/* Unequal: the ranks of the offending rank's host. */
	if (expected_reason(mutation, n) == NDET_VERDICT_MULTI_HOST_UNEQUAL) {
		uint32_t ranks = 0;
		for (int r = 0; r < n; r++)
			ranks += ndet_setup_same_host(&table[r], &table[offending]);
		return ranks;
	}
	switch (mutation) {
	case MUTATE_LIBRARY_VERSION:
		return table[offending].library_version;
	case MUTATE_LOCAL_STATUS:
		return table[offending].local_status;
	case MUTATE_PID_NAMESPACE:
		return NDET_VERDICT_DETAIL_PID_NAMESPACE;
	case MUTATE_IPC_NAMESPACE:
		return NDET_VERDICT_DETAIL_IPC_NAMESPACE;
	case MUTATE_BOTH_NAMESPACES:
		return NDET_VERDICT_DETAIL_PID_NAMESPACE | NDET_VERDICT_DETAIL_IPC_NAMESPACE;
	default:
		return 0;
	}
}

static void test_evaluate_each_mismatch_on_each_rank(void **state)
{
	(void)state;
	struct ndet_setup_payload table[8];

	for (int n = 2; n <= 8; n++) {
		for (int bad = 0; bad < n; bad++) {
			for (int m = 0; m < MUTATE_COUNT; m++) {
				const struct mutation_expectation *expect =
					&mutation_expectations[m];

				make_table(table, n);
				mutate(&table[bad], (enum mutation)m, n);

				/* A changed rank 0 makes rank 1 the first to differ from it. */
				int offending =
					expect->compared_with_rank_zero && bad == 0 ? 1 : bad;

				if (expect->reason == NDET_VERDICT_OK)
					offending = -1;
				expect_verdict(
					table, n, expected_reason((enum mutation)m, n), offending,
					offending < 0 ? 0
						      : expected_detail((enum mutation)m, table, n,
									offending));
				/* Ranks 2k and 2k+1 share a process until one's pid changes. */
				if (m == MUTATE_PID && (bad ^ 1) < n) {
					assert_int_equal(ndet_setup_peer_kind(table, bad, bad ^ 1),
							 NDET_PEER_IPC);
					assert_int_equal(ndet_setup_peer_kind(table, bad ^ 1, bad),
							 NDET_PEER_IPC);
				}
				if (m == MUTATE_SM_COUNT)
					assert_int_equal(ndet_setup_table_min_sms(table, n), 16);
			}
		}
	}
}

/*
 * "Every field wrong in turn": each field of the payload is changed by at least one
 * mutation above, each mutation changes the record, and every byte of the payload
 * belongs to a listed field (a new field must join the list, and the mutations).
 */
#define PAYLOAD_FIELD(name)                                                                        \
	{                                                                                          \
#name, offsetof(struct ndet_setup_payload, name),                                  \
			sizeof(((struct ndet_setup_payload *)0)->name)                             \
	}

static void test_mutations_cover_every_field(void **state)
{
	(void)state;
	static const struct {
		const char *name;
		size_t offset;
		size_t size;
	} fields[] = {
		PAYLOAD_FIELD(hostname),
		PAYLOAD_FIELD(boot_id),
		PAYLOAD_FIELD(pid),
		PAYLOAD_FIELD(pid_namespace),
		PAYLOAD_FIELD(ipc_namespace),
		PAYLOAD_FIELD(device_uuid),
		PAYLOAD_FIELD(cuda_device),
		PAYLOAD_FIELD(rank),
		PAYLOAD_FIELD(nranks),
		PAYLOAD_FIELD(local_status),
		PAYLOAD_FIELD(library_version),
		PAYLOAD_FIELD(flags),
		PAYLOAD_FIELD(settings_hash),
		PAYLOAD_FIELD(pool_bytes),
		PAYLOAD_FIELD(pool_address),
		PAYLOAD_FIELD(flags_offset),
		PAYLOAD_FIELD(data_offset),
		PAYLOAD_FIELD(ipc_handle),
		PAYLOAD_FIELD(sm_count),
		PAYLOAD_FIELD(blocking),
	};
	unsigned char owned[sizeof(struct ndet_setup_payload)] = {0};
	bool changed[ARRAY_SIZE(fields)] = {false};

	for (size_t f = 0; f < ARRAY_SIZE(fields); f++)
		for (size_t b = 0; b < fields[f].size; b++) {
			assert_int_equal(owned[fields[f].offset + b], 0);
			owned[fields[f].offset + b] = 1;
		}
	for (size_t b = 0; b < sizeof(owned); b++)
		if (!owned[b])
			fail_msg("payload byte %zu belongs to no listed field", b);

	for (int m = 0; m < MUTATE_COUNT; m++) {
		struct ndet_setup_payload good, bad;
		bool any = false;

		make_record(&good, 1, 4);
		bad = good;
		mutate(&bad, (enum mutation)m, 4);
		for (size_t f = 0; f < ARRAY_SIZE(fields); f++)
			if (memcmp((const char *)&good + fields[f].offset,
				   (const char *)&bad + fields[f].offset, fields[f].size) != 0) {
				changed[f] = true;
				any = true;
			}
		if (!any)
			fail_msg("mutation %d changes nothing", m);
	}
	for (size_t f = 0; f < ARRAY_SIZE(fields); f++)
		if (!changed[f])
			fail_msg("no mutation changes the field %s", fields[f].name);
}

static void test_evaluate_each_local_status(void **state)
{
	(void)state;
	struct ndet_setup_payload table[8];

	for (int n = 1; n <= 8; n++) {
		for (int bad = 0; bad < n; bad++) {
			for (uint32_t s = NDET_LOCAL_READY + 1; s < NDET_LOCAL_REASON_COUNT; s++) {
				make_table(table, n);
				table[bad].local_status = s;
				expect_verdict(table, n, NDET_VERDICT_LOCAL_FAILURE, bad, s);

				/* Without a pool, as after a failed allocation: same verdict. */
				table[bad].pool_bytes = 0;
				table[bad].flags_offset = 0;
				table[bad].data_offset = 0;
				expect_verdict(table, n, NDET_VERDICT_LOCAL_FAILURE, bad, s);
			}
		}
	}
}

static void test_evaluate_too_many_ranks(void **state)
{
	(void)state;
	static struct ndet_setup_payload table[TABLE_MAX];
	const int sizes[] = {NDET_MAX_RANKS + 1, 32, TABLE_MAX};

	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		make_table(table, sizes[i]);
		expect_verdict(table, sizes[i], NDET_VERDICT_TOO_MANY_RANKS, NDET_MAX_RANKS,
			       (uint32_t)sizes[i]);
		/* Every rank also reports it locally: the table-wide reason still wins. */
		for (int r = 0; r < sizes[i]; r++)
			table[r].local_status = NDET_LOCAL_TOO_MANY_RANKS;
		expect_verdict(table, sizes[i], NDET_VERDICT_TOO_MANY_RANKS, NDET_MAX_RANKS,
			       (uint32_t)sizes[i]);
	}
	make_table(table, NDET_MAX_RANKS);
	expect_verdict(table, NDET_MAX_RANKS, NDET_VERDICT_OK, -1, 0);
}

/* The first failing check in the documented order wins, whatever the ranks. */
static void test_evaluate_check_order(void **state)
{
	(void)state;
	static struct ndet_setup_payload table[TABLE_MAX];
	const int n = 8;

	/* Two ranks fail the same check: the lower one is named. */
	make_table(table, n);
	table[6].settings_hash = 1;
	table[3].settings_hash = 2;
	expect_verdict(table, n, NDET_VERDICT_SETTINGS_MISMATCH, 3, 0);

	/* A malformed record beats a rank mismatch on a lower rank. */
	make_table(table, n);
	table[1].rank = 2;
	memset(table[5].boot_id, 'x', sizeof(table[5].boot_id));
	expect_verdict(table, n, NDET_VERDICT_BAD_RECORD, 5, 0);

	/* Rank mismatch beats multi-host. */
	make_table(table, n);
	table[2].hostname[0] = 'X';
	table[6].nranks = 7;
	expect_verdict(table, n, NDET_VERDICT_RANK_MISMATCH, 6, 0);

	/*
	 * Multi-host beats everything a rank on another machine may report differently:
	 * settings, versions, local failures, namespaces, pools.  Two hosts of four.
	 */
	make_table(table, n);
	table[1].settings_hash = 7;
	table[2].library_version = 99;
	table[3].local_status = NDET_LOCAL_UNSUPPORTED_GPU;
	table[4].pid_namespace = 5;
	table[5].pool_bytes = 1ull << 30;
	for (int r = 4; r < n; r++)
		snprintf(table[r].hostname, sizeof(table[r].hostname), "other-host");
	expect_verdict(table, n, NDET_VERDICT_MULTI_HOST, 4, 2);
	/* Before it, the rank limit of a host (two hosts of 32)... */
	make_table(table, 64);
	for (int r = 32; r < 64; r++)
		snprintf(table[r].hostname, sizeof(table[r].hostname), "other-host");
	expect_verdict(table, 64, NDET_VERDICT_TOO_MANY_RANKS, NDET_MAX_RANKS, 32);
	/* ... before that, unequal hosts (63 and 1)... */
	make_table(table, 64);
	snprintf(table[40].hostname, sizeof(table[40].hostname), "other-host");
	expect_verdict(table, 64, NDET_VERDICT_MULTI_HOST_UNEQUAL, 40, 1);
	/* ... and first of all a non-blocking rank. */
	table[50].blocking = 0;
	table[60].blocking = 0;
	expect_verdict(table, 64, NDET_VERDICT_MULTI_HOST_NONBLOCKING, 50, 2);

	/* Then: local status, version, settings, namespaces, pool geometry. */
	make_table(table, n);
	table[1].pool_bytes = 1ull << 30;
	table[2].ipc_namespace = 9;
	table[3].settings_hash = 7;
	table[4].library_version = 99;
	table[5].local_status = NDET_LOCAL_EXPORT_FAILED;
	expect_verdict(table, n, NDET_VERDICT_LOCAL_FAILURE, 5, NDET_LOCAL_EXPORT_FAILED);
	table[5].local_status = NDET_LOCAL_READY;
	expect_verdict(table, n, NDET_VERDICT_VERSION_MISMATCH, 4, 99);
	table[4].library_version = 100;
	expect_verdict(table, n, NDET_VERDICT_SETTINGS_MISMATCH, 3, 0);
	table[3].settings_hash = table[0].settings_hash;
	expect_verdict(table, n, NDET_VERDICT_NAMESPACE, 2, NDET_VERDICT_DETAIL_IPC_NAMESPACE);
	table[2].ipc_namespace = table[0].ipc_namespace;
	expect_verdict(table, n, NDET_VERDICT_POOL_MISMATCH, 1, 0);
	table[1].pool_bytes = table[0].pool_bytes;
	expect_verdict(table, n, NDET_VERDICT_OK, -1, 0);
}

static void test_evaluate_unknown_namespaces(void **state)
{
	(void)state;
	struct ndet_setup_payload table[4];

	/* Rank 0 unknown: ranks are compared with the first known id (rank 1's). */
	make_table(table, 4);
	table[0].pid_namespace = 0;
	table[2].pid_namespace = 77;
	expect_verdict(table, 4, NDET_VERDICT_NAMESPACE, 2, NDET_VERDICT_DETAIL_PID_NAMESPACE);

	/* All unknown: nothing to compare, nothing refused. */
	make_table(table, 4);
	for (int r = 0; r < 4; r++) {
		table[r].pid_namespace = 0;
		table[r].ipc_namespace = 0;
	}
	expect_verdict(table, 4, NDET_VERDICT_OK, -1, 0);
	/* Without a known PID namespace, equal pids are no proof of one process. */
	assert_int_equal(ndet_setup_peer_kind(table, 0, 1), NDET_PEER_IPC);
	assert_int_equal(ndet_setup_peer_kind(table, 1, 1), NDET_PEER_SELF);
}

/* The grid cap's input: the most ranks that share one GPU, from the device UUIDs. */
static void test_ranks_per_device(void **state)
{
	(void)state;
	struct ndet_setup_payload table[6];
	make_table(table, 6);
	assert_int_equal(ndet_setup_table_ranks_per_device(table, 6), 1);
	assert_int_equal(ndet_setup_table_ranks_per_device(table, 0), 0);
	/* Ranks 1, 4 and 5 on one GPU, ranks 0 and 2 on another: 3. */
	memcpy(table[4].device_uuid, table[1].device_uuid, sizeof(table[1].device_uuid));
	memcpy(table[5].device_uuid, table[1].device_uuid, sizeof(table[1].device_uuid));
	memcpy(table[2].device_uuid, table[0].device_uuid, sizeof(table[0].device_uuid));
	assert_int_equal(ndet_setup_table_ranks_per_device(table, 6), 3);
	/* One differing byte is another GPU. */
	table[5].device_uuid[15] ^= 1;
	assert_int_equal(ndet_setup_table_ranks_per_device(table, 6), 2);
}

/*
 * Processes on one GPU: ranks of one process count once (equal pid and PID namespace
 * on one host), ranks on other GPUs not at all.
 */
static void test_processes_per_device(void **state)
{
	(void)state;
	struct ndet_setup_payload table[6];
	make_table(table, 6);
	for (int r = 0; r < 6; r++)
		table[r].pid = 5000 + (uint64_t)r; /* every rank its own process */
	assert_int_equal(ndet_setup_table_processes_per_device(table, 6), 1);
	assert_int_equal(ndet_setup_table_processes_per_device(table, 0), 0);
	/* Ranks 0-3 on one GPU, each its own process: 4. */
	for (int r = 1; r < 4; r++)
		memcpy(table[r].device_uuid, table[0].device_uuid, sizeof(table[0].device_uuid));
	assert_int_equal(ndet_setup_table_processes_per_device(table, 6), 4);
	/* Ranks 1 and 3 threads of rank 0's process: 2 processes (0, 1, 3 and 2). */
	table[1].pid = table[3].pid = table[0].pid;
	assert_int_equal(ndet_setup_table_processes_per_device(table, 6), 2);
	assert_int_equal(ndet_setup_table_ranks_per_device(table, 6), 4);
	/* All four threads of one process: 1, whatever the rank order. */
	table[2].pid = table[0].pid;
	assert_int_equal(ndet_setup_table_processes_per_device(table, 6), 1);
	/* Ranks 2 and 3 one process, not rank 0's, rank 1 its own: 3. */
	table[2].pid = table[3].pid = 6000;
	table[1].pid = 6001;
	assert_int_equal(ndet_setup_table_processes_per_device(table, 6), 3);
	/* Without a known PID namespace equal pids prove nothing: every rank its own. */
	for (int r = 0; r < 6; r++)
		table[r].pid_namespace = 0;
	assert_int_equal(ndet_setup_table_processes_per_device(table, 6), 4);
	/* Equal pids on another host are other processes (container pids collide). */
	make_table(table, 6); /* ranks 4 and 5: one process */
	memcpy(table[5].device_uuid, table[4].device_uuid, sizeof(table[4].device_uuid));
	assert_int_equal(ndet_setup_table_processes_per_device(table, 6), 1);
	snprintf(table[5].hostname, sizeof(table[5].hostname), "gpu-node-08");
	assert_int_equal(ndet_setup_table_processes_per_device(table, 6), 2);
}

/* The other grid cap input: the fewest SMs of any rank's GPU (format 2). */
static void test_min_sms(void **state)
{
	(void)state;
	struct ndet_setup_payload table[5];
	make_table(table, 5);
	assert_int_equal(ndet_setup_table_min_sms(table, 5), 132);
	assert_int_equal(ndet_setup_table_min_sms(table, 0), 0);
	table[3].sm_count = 16; /* a MIG slice */
	table[1].sm_count = 98;
	assert_int_equal(ndet_setup_table_min_sms(table, 5), 16);
	table[0].sm_count = UINT32_MAX; /* never negative */
	assert_int_equal(ndet_setup_table_min_sms(table, 1), INT32_MAX);

	/* A ready rank must say how many SMs it has; one that is not ready need not. */
	struct ndet_setup_payload record, parsed;
	make_record(&record, 0, 2);
	record.sm_count = 0;
	assert_int_equal(ndet_setup_payload_parse(&record, sizeof(record), &parsed),
			 NDET_ERR_UNSUPPORTED);
	record.local_status = NDET_LOCAL_ALLOC_FAILED;
	assert_int_equal(ndet_setup_payload_parse(&record, sizeof(record), &parsed), NDET_OK);
	/* A format-1 record (8 bytes shorter) is refused, never misread. */
	make_record(&record, 0, 2);
	assert_int_equal(ndet_setup_payload_parse(&record, sizeof(record) - 8, &parsed),
			 NDET_ERR_UNSUPPORTED);
}

static void test_peer_kind_needs_same_pid_and_namespace(void **state)
{
	(void)state;
	struct ndet_setup_payload table[4];

	make_table(table, 4);
	assert_int_equal(ndet_setup_peer_kind(table, 0, 1), NDET_PEER_SAME_PROCESS);
	assert_int_equal(ndet_setup_peer_kind(table, 1, 0), NDET_PEER_SAME_PROCESS);
	assert_int_equal(ndet_setup_peer_kind(table, 0, 2), NDET_PEER_IPC);
	assert_int_equal(ndet_setup_peer_kind(table, 3, 3), NDET_PEER_SELF);

	/* The same pid in two containers is two processes. */
	table[2].pid = table[0].pid;
	table[2].pid_namespace = table[0].pid_namespace + 1;
	assert_int_equal(ndet_setup_peer_kind(table, 0, 2), NDET_PEER_IPC);
	assert_int_equal(ndet_setup_peer_kind(table, 2, 0), NDET_PEER_IPC);
	assert_int_equal(ndet_setup_peer_kind(NULL, 0, 1), NDET_PEER_IPC);
}

static void test_evaluate_bad_arguments(void **state)
{
	(void)state;
	struct ndet_setup_payload table[2];
	struct ndet_setup_verdict verdict;

	struct ndet_host_table *hosts = ndet_host_table_create(2);
	struct ndet_host_table *small = ndet_host_table_create(1);

	assert_non_null(hosts);
	assert_non_null(small);
	make_table(table, 2);
	ndet_setup_evaluate(NULL, 2, hosts, &verdict);
	assert_int_equal(verdict.reason, NDET_VERDICT_BAD_RECORD);
	assert_int_equal(verdict.offending_rank, -1);
	ndet_setup_evaluate(table, 0, hosts, &verdict);
	assert_int_equal(verdict.reason, NDET_VERDICT_BAD_RECORD);
	assert_int_equal(verdict.offending_rank, -1);
	ndet_setup_evaluate(table, 2, hosts, NULL); /* must not crash */
	/* No storage for the hosts, or too little: nothing can be judged. */
	ndet_setup_evaluate(table, 2, NULL, &verdict);
	assert_int_equal(verdict.reason, NDET_VERDICT_BAD_RECORD);
	assert_int_equal(verdict.offending_rank, -1);
	ndet_setup_evaluate(table, 2, small, &verdict);
	assert_int_equal(verdict.reason, NDET_VERDICT_BAD_RECORD);
	assert_int_equal(verdict.offending_rank, -1);
	ndet_setup_evaluate(table, 2, hosts, &verdict);
	assert_int_equal(verdict.reason, NDET_VERDICT_OK);
	assert_int_equal(hosts->nhosts, 1);
	/* A table shorter than the communicator claims: rank 0 says nranks = 2. */
	ndet_setup_evaluate(table, 1, small, &verdict);
	assert_int_equal(verdict.reason, NDET_VERDICT_RANK_MISMATCH);
	assert_int_equal(verdict.offending_rank, 0);
	ndet_host_table_destroy(small);
	ndet_host_table_destroy(hosts);
}

/* ---------------------------------------------------------------- hosts */

/* A good table whose rank r is on host letters[r] ("AABB": two hosts of two). */
static void make_hosts_table(struct ndet_setup_payload *table, const char *letters)
{
	const int nranks = (int)strlen(letters);

	assert_true(nranks >= 1 && nranks <= TABLE_MAX);
	make_table(table, nranks);
	for (int r = 0; r < nranks; r++) {
		snprintf(table[r].hostname, sizeof(table[r].hostname), "gpu-node-%c", letters[r]);
		snprintf(table[r].boot_id, sizeof(table[r].boot_id), "boot-%c", letters[r]);
	}
}

/* `hosts` hosts of `per_host` ranks, consecutive or rank r on host r % hosts. */
static const char *letters_of(int hosts, int per_host, bool interleaved)
{
	static char letters[TABLE_MAX + 1];
	const int n = hosts * per_host;

	assert_true(n <= TABLE_MAX);
	for (int r = 0; r < n; r++)
		letters[r] = (char)('A' + (interleaved ? r % hosts : r / per_host));
	letters[n] = '\0';
	return letters;
}

/* Every layout of the host table: the same verdict on every rank, and which. */
static void test_evaluate_multi_host_layouts(void **state)
{
	(void)state;
	static const struct {
		const char *letters;
		ndet_verdict_reason_t reason; /* this build */
		int offending;
		uint32_t detail;
		bool with_data_path; /* OK once multi-host communicators divert */
	} cases[] = {
		{"AAAA", NDET_VERDICT_OK, -1, 0, true},                    /* 1 x 4 */
		{"AABB", NDET_VERDICT_MULTI_HOST, 2, 2, true},             /* 2 x 2 */
		{"ABCD", NDET_VERDICT_MULTI_HOST, 1, 4, true},             /* 4 x 1 */
		{"AABBCC", NDET_VERDICT_MULTI_HOST, 2, 3, true},           /* 3 x 2 */
		{"ABAB", NDET_VERDICT_MULTI_HOST, 1, 2, true},             /* interleaved */
		{"ABBA", NDET_VERDICT_MULTI_HOST, 1, 2, true},             /* non-consecutive */
		{"AAB", NDET_VERDICT_MULTI_HOST_UNEQUAL, 2, 1, false},     /* 2 + 1 */
		{"ABB", NDET_VERDICT_MULTI_HOST_UNEQUAL, 1, 2, false},     /* 1 + 2 */
		{"AABBBCC", NDET_VERDICT_MULTI_HOST_UNEQUAL, 2, 3, false}, /* 2 + 3 + 2 */
		{"AABBC", NDET_VERDICT_MULTI_HOST_UNEQUAL, 4, 1, false},   /* 2 + 2 + 1 */
		{"ABCAB", NDET_VERDICT_MULTI_HOST_UNEQUAL, 2, 1, false},   /* 2 + 2 + 1, mixed */
	};
	static struct ndet_setup_payload table[TABLE_MAX];

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		const int n = (int)strlen(cases[i].letters);

		print_message("hosts %s\n", cases[i].letters);
		make_hosts_table(table, cases[i].letters);
		expect_verdict(table, n, cases[i].reason, cases[i].offending, cases[i].detail);
		expect_verdict_rules(table, n, 0, cases[i].reason, cases[i].offending,
				     cases[i].detail);
		if (cases[i].with_data_path)
			expect_verdict_rules(table, n, 1, NDET_VERDICT_OK, -1, 0);
		else
			expect_verdict_rules(table, n, 1, cases[i].reason, cases[i].offending,
					     cases[i].detail);
	}
	/* Every rank with the data path (NDET_SETUP_FLAG_MULTI_HOST): this build diverts. */
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		const int n = (int)strlen(cases[i].letters);
		make_hosts_table(table, cases[i].letters);
		for (int r = 0; r < n; r++)
			table[r].flags |= NDET_SETUP_FLAG_MULTI_HOST;
		assert_true(ndet_setup_table_multi_host(table, n));
		if (cases[i].with_data_path)
			expect_verdict(table, n, NDET_VERDICT_OK, -1, 0);
		else
			expect_verdict(table, n, cases[i].reason, cases[i].offending,
				       cases[i].detail);
		/* One rank without it: every rank falls back, as without any. */
		table[n - 1].flags &= ~NDET_SETUP_FLAG_MULTI_HOST;
		assert_false(ndet_setup_table_multi_host(table, n));
		expect_verdict(table, n, cases[i].reason, cases[i].offending, cases[i].detail);
	}
	assert_false(ndet_setup_table_multi_host(NULL, 4));
	assert_false(ndet_setup_table_multi_host(table, 0));
}

/*
 * The schedule's limit: 1024 hosts (of one rank each) divert, 1025 fall back on every
 * rank as a multi-host table without the data path.
 */
static void test_evaluate_too_many_hosts(void **state)
{
	(void)state;
	for (int n = 1024; n <= 1025; n++) {
		struct ndet_setup_payload *table = calloc((size_t)n, sizeof(*table));
		assert_non_null(table);
		for (int r = 0; r < n; r++) {
			make_record(&table[r], r, n);
			snprintf(table[r].hostname, sizeof(table[r].hostname), "node-%d", r);
			table[r].flags |= NDET_SETUP_FLAG_MULTI_HOST;
		}
		struct ndet_host_table *hosts = ndet_host_table_create(n);
		assert_non_null(hosts);
		struct ndet_setup_verdict verdict;
		ndet_setup_evaluate_rules(table, n, hosts, true, &verdict);
		if (n == 1024) {
			assert_int_equal(verdict.reason, NDET_VERDICT_OK);
		} else {
			assert_int_equal(verdict.reason, NDET_VERDICT_MULTI_HOST);
			assert_int_equal(verdict.offending_rank, 1);
			assert_int_equal(verdict.detail, n);
		}
		ndet_host_table_destroy(hosts);
		free(table);
	}
}

/* Non-blocking ranks: refused across hosts (with or without the data path), not on one. */
static void test_evaluate_multi_host_nonblocking(void **state)
{
	(void)state;
	struct ndet_setup_payload table[8];

	make_hosts_table(table, "AAAA");
	table[2].blocking = 0;
	expect_verdict(table, 4, NDET_VERDICT_OK, -1, 0);

	for (int diverts = -1; diverts <= 1; diverts++) {
		make_hosts_table(table, "AABB");
		table[3].blocking = 0;
		expect_verdict_rules(table, 4, diverts, NDET_VERDICT_MULTI_HOST_NONBLOCKING, 3, 2);
		table[1].blocking = 0;
		expect_verdict_rules(table, 4, diverts, NDET_VERDICT_MULTI_HOST_NONBLOCKING, 1, 2);
		/* Before unequal hosts and before the records' other differences. */
		make_hosts_table(table, "AABC");
		table[2].blocking = 0;
		table[1].settings_hash = 1;
		table[0].local_status = NDET_LOCAL_ALLOC_FAILED;
		expect_verdict_rules(table, 4, diverts, NDET_VERDICT_MULTI_HOST_NONBLOCKING, 2, 3);
	}
}

/* NDET_MAX_RANKS counts the ranks of one host; the number of hosts has no limit of its own. */
static void test_evaluate_ranks_per_host(void **state)
{
	(void)state;
	static struct ndet_setup_payload table[TABLE_MAX];
	const int m = NDET_MAX_RANKS;

	/* Every host at the limit: more ranks than NDET_MAX_RANKS in all, refused as multi-host. */
	make_hosts_table(table, letters_of(2, m, false));
	expect_verdict(table, 2 * m, NDET_VERDICT_MULTI_HOST, m, 2);
	expect_verdict_rules(table, 2 * m, 1, NDET_VERDICT_OK, -1, 0);
	make_hosts_table(table, letters_of(TABLE_MAX / m, m, true));
	expect_verdict(table, TABLE_MAX, NDET_VERDICT_MULTI_HOST, 1, TABLE_MAX / m);
	expect_verdict_rules(table, TABLE_MAX, 1, NDET_VERDICT_OK, -1, 0);
	make_hosts_table(table, letters_of(TABLE_MAX, 1, false));
	expect_verdict_rules(table, TABLE_MAX, 1, NDET_VERDICT_OK, -1, 0);

	/* One over: the first rank over the limit, whatever the rules. */
	for (int diverts = -1; diverts <= 1; diverts++) {
		make_hosts_table(table, letters_of(2, m + 1, false));
		expect_verdict_rules(table, 2 * (m + 1), diverts, NDET_VERDICT_TOO_MANY_RANKS, m,
				     (uint32_t)(m + 1));
		/* Interleaved: host 0 holds the even ranks; its local index m is rank 2m. */
		make_hosts_table(table, letters_of(2, m + 1, true));
		expect_verdict_rules(table, 2 * (m + 1), diverts, NDET_VERDICT_TOO_MANY_RANKS,
				     2 * m, (uint32_t)(m + 1));
	}
}

/*
 * Hosts that disagree (settings, versions, a local failure) fall back on every rank
 * alike: as multi-host in this build, for the disagreement with the data path.
 * Namespaces are compared within each host only.
 */
static void test_evaluate_hosts_disagree(void **state)
{
	(void)state;
	struct ndet_setup_payload table[8];

	make_hosts_table(table, "AABB");
	table[2].settings_hash ^= 1;
	table[3].settings_hash ^= 1;
	expect_verdict(table, 4, NDET_VERDICT_MULTI_HOST, 2, 2);
	expect_verdict_rules(table, 4, 1, NDET_VERDICT_SETTINGS_MISMATCH, 2, 0);

	make_hosts_table(table, "AABB");
	table[3].library_version = 101;
	expect_verdict(table, 4, NDET_VERDICT_MULTI_HOST, 2, 2);
	expect_verdict_rules(table, 4, 1, NDET_VERDICT_VERSION_MISMATCH, 3, 101);

	make_hosts_table(table, "ABAB");
	table[3].local_status = NDET_LOCAL_EXPORT_FAILED;
	expect_verdict(table, 4, NDET_VERDICT_MULTI_HOST, 1, 2);
	expect_verdict_rules(table, 4, 1, NDET_VERDICT_LOCAL_FAILURE, 3, NDET_LOCAL_EXPORT_FAILED);

	/* Each host in namespaces of its own: not a refusal. */
	make_hosts_table(table, "AABB");
	for (int r = 2; r < 4; r++) {
		table[r].pid_namespace = 111;
		table[r].ipc_namespace = 222;
	}
	expect_verdict_rules(table, 4, 1, NDET_VERDICT_OK, -1, 0);
	/* Another namespace within a host is. */
	table[3].pid_namespace = 112;
	expect_verdict_rules(table, 4, 1, NDET_VERDICT_NAMESPACE, 3,
			     NDET_VERDICT_DETAIL_PID_NAMESPACE);
	/* The reference is the host's first known id (rank 2's is unknown: rank 3's). */
	table[2].pid_namespace = 0;
	expect_verdict_rules(table, 4, 1, NDET_VERDICT_OK, -1, 0);

	/* The lowest outlier of any host: host A is {0, 3}, host B {1, 2}. */
	make_hosts_table(table, "ABBA");
	table[3].ipc_namespace = 5;
	table[2].pid_namespace = 6;
	expect_verdict_rules(table, 4, 1, NDET_VERDICT_NAMESPACE, 2,
			     NDET_VERDICT_DETAIL_PID_NAMESPACE);
	table[2].pid_namespace = table[1].pid_namespace;
	expect_verdict_rules(table, 4, 1, NDET_VERDICT_NAMESPACE, 3,
			     NDET_VERDICT_DETAIL_IPC_NAMESPACE);
}

/* ---------------------------------------------------------------- text */

static void test_reason_texts(void **state)
{
	(void)state;
	for (int a = 0; a < NDET_VERDICT_COUNT; a++) {
		const char *name = ndet_verdict_reason_name((ndet_verdict_reason_t)a);
		const char *fix = ndet_verdict_reason_fix((ndet_verdict_reason_t)a);

		assert_non_null(name);
		assert_non_null(fix);
		assert_true(strlen(name) > 0);
		/* Cause and fix: a cause, a ';' or ':', and what to do. */
		assert_true(strlen(fix) > 40);
		for (int b = a + 1; b < NDET_VERDICT_COUNT; b++) {
			assert_string_not_equal(name,
						ndet_verdict_reason_name((ndet_verdict_reason_t)b));
			assert_string_not_equal(fix,
						ndet_verdict_reason_fix((ndet_verdict_reason_t)b));
		}
	}
	assert_non_null(strstr(ndet_verdict_reason_fix(NDET_VERDICT_MULTI_HOST),
			       "load the same nccl-det build on every rank"));
	assert_non_null(strstr(ndet_verdict_reason_fix(NDET_VERDICT_SETTINGS_MISMATCH),
			       "set the same values on every rank"));
	assert_non_null(strstr(ndet_verdict_reason_fix(NDET_VERDICT_TOO_MANY_RANKS), "(16)"));
	assert_non_null(ndet_verdict_reason_name(NDET_VERDICT_COUNT));
	assert_non_null(ndet_verdict_reason_fix((ndet_verdict_reason_t)-1));

	for (int a = 0; a < NDET_LOCAL_REASON_COUNT; a++) {
		assert_non_null(ndet_local_status_name((ndet_local_status_t)a));
		for (int b = a + 1; b < NDET_LOCAL_REASON_COUNT; b++)
			assert_string_not_equal(ndet_local_status_name((ndet_local_status_t)a),
						ndet_local_status_name((ndet_local_status_t)b));
	}
	assert_non_null(ndet_local_status_name(NDET_LOCAL_REASON_COUNT));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_header_round_trip),
		cmocka_unit_test(test_header_each_field_wrong_is_refused),
		cmocka_unit_test(test_header_is_record),
		cmocka_unit_test(test_payload_parse_good),
		cmocka_unit_test(test_payload_parse_wrong_length),
		cmocka_unit_test(test_payload_parse_unterminated_strings),
		cmocka_unit_test(test_payload_parse_out_of_range_fields),
		cmocka_unit_test(test_evaluate_good_tables_and_peer_kinds),
		cmocka_unit_test(test_evaluate_each_mismatch_on_each_rank),
		cmocka_unit_test(test_mutations_cover_every_field),
		cmocka_unit_test(test_evaluate_each_local_status),
		cmocka_unit_test(test_evaluate_too_many_ranks),
		cmocka_unit_test(test_evaluate_check_order),
		cmocka_unit_test(test_evaluate_unknown_namespaces),
		cmocka_unit_test(test_peer_kind_needs_same_pid_and_namespace),
		cmocka_unit_test(test_ranks_per_device),
		cmocka_unit_test(test_processes_per_device),
		cmocka_unit_test(test_min_sms),
		cmocka_unit_test(test_evaluate_bad_arguments),
		cmocka_unit_test(test_evaluate_multi_host_layouts),
		cmocka_unit_test(test_evaluate_too_many_hosts),
		cmocka_unit_test(test_evaluate_multi_host_nonblocking),
		cmocka_unit_test(test_evaluate_ranks_per_host),
		cmocka_unit_test(test_evaluate_hosts_disagree),
		cmocka_unit_test(test_reason_texts),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
