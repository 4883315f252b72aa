/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The setup protocol (src/protocol/ndet_setup.c) driven by ONE thread for every rank of one
 * or two communicators at once, as nccl-tests -g and ncclCommInitAll do: the mock
 * all-gather fails the test if a rank's exchange ever comes without all its peers
 * (that would hang a real job).  Every mismatch kind of the table, changed wire
 * formats, local, map and probe failures and failed exchanges must end with the same
 * verdict on every rank, after the same number of rounds, with the right release.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "protocol/ndet_setup.h"
#include "common/ndet_settings.h"
#include "kernels/ndet_types.h"

#define MAX_MEMBERS 40

struct mock_member {
	int comm;
	int rank, nranks;
	int device;                        /* what the setup member says (-1: unknown) */
	uint64_t identity;                 /* likewise, its communicator's (0: unknown) */
	struct ndet_setup_payload payload; /* what prepare publishes */
	bool fail_map, fail_verify;
	int prepared, mapped, verified, released;
	bool released_mapped;
	int rounds; /* exchanges this member took part in */
};

/* Change the record of (comm, rank) in round `round` on the wire. */
typedef void (*tamper_fn)(int round, void *record, size_t bytes);

static struct {
	struct mock_member members[MAX_MEMBERS];
	int count;
	int round;
	int fail_round; /* the exchange of this round fails (0: none) */
	int fail_comm;  /* ... for this communicator's members only (0: every member) */
	int fail_ranks; /* ... for its ranks in this bit mask only (0: every rank) */
	int tamper_round, tamper_comm, tamper_rank;
	tamper_fn tamper;
	/*
	 * The all-gather leaves the slot of (drop_comm, drop_rank) unwritten in round
	 * drop_round, or (replay) fills it with what that rank sent the round before.
	 */
	int drop_round, drop_comm, drop_rank;
	bool replay;
	unsigned char previous[MAX_MEMBERS][sizeof(struct ndet_setup_payload)];
} world;

static void mock_prepare(void *opaque, struct ndet_setup_payload *payload)
{
	struct mock_member *member = opaque;
	member->prepared++;
	*payload = member->payload;
}

static bool mock_map(void *opaque, const struct ndet_setup_payload *table, int nranks)
{
	struct mock_member *member = opaque;
	member->mapped++;
	assert_int_equal(nranks, member->nranks);
	for (int r = 0; r < nranks; r++)
		assert_int_equal(table[r].rank, r);
	return !member->fail_map;
}

static bool mock_verify(void *opaque)
{
	struct mock_member *member = opaque;
	member->verified++;
	return !member->fail_verify;
}

static void mock_release(void *opaque, bool peers_may_have_mapped, const uint32_t *opened)
{
	(void)opened;
	struct mock_member *member = opaque;
	member->released++;
	member->released_mapped = peers_may_have_mapped;
}

static const struct ndet_setup_member_ops mock_ops = {
	.prepare = mock_prepare,
	.map_and_probe_write = mock_map,
	.probe_verify = mock_verify,
	.release = mock_release,
};

/* Every rank of every communicator in the call must be in the call: lockstep. */
static ndet_status_t mock_allgather(void *context, int count, void *const members[],
				    const void *const sends[], void *const recvs[], size_t bytes,
				    ndet_status_t results[])
{
	assert_ptr_equal(context, &world);
	world.round++;
	for (int i = 0; i < count; i++) {
		struct mock_member *me = members[i];
		me->rounds++;
		for (int r = 0; r < me->nranks; r++) {
			int found = -1;
			for (int j = 0; j < count; j++) {
				const struct mock_member *peer = members[j];
				if (peer->comm == me->comm && peer->rank == r)
					found = j;
			}
			if (found < 0)
				fail_msg("round %d: rank %d of communicator %d exchanges without "
					 "rank %d: a real job would hang",
					 world.round, me->rank, me->comm, r);
			unsigned char *slot = (unsigned char *)recvs[i] + (size_t)r * bytes;
			const struct mock_member *sender = members[found];
			bool drop = world.round == world.drop_round &&
				    sender->comm == world.drop_comm && r == world.drop_rank;
			if (drop && world.replay)
				memcpy(slot, world.previous[sender - world.members], bytes);
			else if (!drop)
				memcpy(slot, sends[found], bytes);
			if (world.tamper != NULL && world.round == world.tamper_round &&
			    me->comm == world.tamper_comm && r == world.tamper_rank)
				world.tamper(world.round, slot, bytes);
		}
	}
	for (int j = 0; j < count; j++) {
		const struct mock_member *sender = members[j];
		memcpy(world.previous[sender - world.members], sends[j], bytes);
	}
	ndet_status_t first = NDET_OK;
	for (int i = 0; i < count; i++) {
		const struct mock_member *me = members[i];
		const bool fails = world.round == world.fail_round &&
				   (world.fail_comm == 0 || me->comm == world.fail_comm) &&
				   (world.fail_ranks == 0 || ((world.fail_ranks >> me->rank) & 1));
		results[i] = fails ? NDET_ERR_NCCL : NDET_OK;
		if (fails)
			first = NDET_ERR_NCCL;
	}
	return first;
}

/* A communicator `comm` of `nranks` ranks whose records all agree. */
static void add_comm(int comm, int nranks)
{
	for (int r = 0; r < nranks; r++) {
		assert_true(world.count < MAX_MEMBERS);
		struct mock_member *member = &world.members[world.count++];
		memset(member, 0, sizeof(*member));
		member->comm = comm;
		member->rank = r;
		member->nranks = nranks;
		member->device = -1;
		struct ndet_setup_payload *payload = &member->payload;
		ndet_setup_payload_identity(payload, NULL);
		payload->rank = r;
		payload->nranks = nranks;
		payload->cuda_device = r % 2;
		payload->settings_hash = 0x1234;
		payload->pool_bytes = 1 << 20;
		payload->sm_count = 132;
		payload->pool_address = 0x10000 * (uint64_t)(r + 1);
		payload->data_offset = 4096;
		payload->flags = NDET_SETUP_FLAG_STRICT;
		payload->blocking = 1;
	}
}

static struct mock_member *member_of(int comm, int rank)
{
	for (int i = 0; i < world.count; i++)
		if (world.members[i].comm == comm && world.members[i].rank == rank)
			return &world.members[i];
	fail_msg("no member %d/%d", comm, rank);
	return NULL;
}

static struct ndet_setup_member results[MAX_MEMBERS];

static void run(void)
{
	for (int i = 0; i < world.count; i++) {
		memset(&results[i], 0x5a, sizeof(results[i]));
		results[i].context = &world.members[i];
		results[i].rank = world.members[i].rank;
		results[i].nranks = world.members[i].nranks;
		results[i].device = world.members[i].device;
		results[i].comm_identity = world.members[i].identity;
	}
	ndet_setup_run(results, world.count, &mock_ops, mock_allgather, &world);
}

static const struct ndet_setup_member *result_of(int comm, int rank)
{
	for (int i = 0; i < world.count; i++)
		if (world.members[i].comm == comm && world.members[i].rank == rank)
			return &results[i];
	fail_msg("no member %d/%d", comm, rank);
	return NULL;
}

/* Every rank of `comm` ended alike, after `rounds` exchanges. */
static void assert_comm(int comm, ndet_status_t status, ndet_verdict_reason_t reason, int offending,
			uint32_t detail, int rounds)
{
	for (int i = 0; i < world.count; i++) {
		const struct mock_member *member = &world.members[i];
		if (member->comm != comm)
			continue;
		const struct ndet_setup_member *result = &results[i];
		assert_int_equal(result->status, status);
		assert_int_equal(result->verdict.reason, reason);
		assert_int_equal(result->verdict.offending_rank, offending);
		assert_int_equal(result->verdict.detail, detail);
		assert_int_equal(member->rounds, rounds);
		/* Released exactly when it leaves without an engine. */
		assert_int_equal(member->released, status == NDET_OK ? 0 : 1);
		if (member->released)
			assert_int_equal(member->released_mapped, rounds >= 3);
	}
}

static int reset(void **state)
{
	(void)state;
	memset(&world, 0, sizeof(world));
	return 0;
}

/* Two communicators, five ranks, one thread: four exchanges, every rank ready. */
static void test_two_comms_in_lockstep(void **state)
{
	(void)state;
	add_comm(1, 3);
	add_comm(2, 2);
	run();
	assert_int_equal(world.round, 4);
	assert_comm(1, NDET_OK, NDET_VERDICT_OK, -1, 0, 4);
	assert_comm(2, NDET_OK, NDET_VERDICT_OK, -1, 0, 4);
	for (int i = 0; i < world.count; i++) {
		assert_int_equal(world.members[i].prepared, 1);
		assert_int_equal(world.members[i].mapped, 1);
		assert_int_equal(world.members[i].verified, 1);
		assert_int_equal(results[i].agreed_flags, NDET_SETUP_FLAG_STRICT);
	}
}

/* One rank not strict: the agreed flags say so on every rank. */
static void test_agreed_flags(void **state)
{
	(void)state;
	add_comm(1, 4);
	member_of(1, 3)->payload.flags = 0;
	run();
	for (int r = 0; r < 4; r++)
		assert_int_equal(result_of(1, r)->agreed_flags, 0);
}

/* A table mismatch on rank 2 of a 4-rank communicator next to a healthy one. */
struct mismatch {
	const char *name;
	void (*spoil)(struct ndet_setup_payload *payload);
	ndet_verdict_reason_t reason;
	uint32_t detail;
};

static void spoil_hostname(struct ndet_setup_payload *p)
{
	snprintf(p->hostname, sizeof(p->hostname), "another-host");
}
static void spoil_boot_id(struct ndet_setup_payload *p)
{
	snprintf(p->boot_id, sizeof(p->boot_id), "rebooted");
}
static void spoil_version(struct ndet_setup_payload *p)
{
	p->library_version = 999;
}
static void spoil_settings(struct ndet_setup_payload *p)
{
	p->settings_hash ^= 1;
}
static void spoil_pool(struct ndet_setup_payload *p)
{
	p->pool_bytes *= 2;
}
static void spoil_pid_namespace(struct ndet_setup_payload *p)
{
	p->pid_namespace += 1;
}
static void spoil_ipc_namespace(struct ndet_setup_payload *p)
{
	p->ipc_namespace += 1;
}
static void spoil_rank(struct ndet_setup_payload *p)
{
	p->rank = 1;
}
static void spoil_local_alloc(struct ndet_setup_payload *p)
{
	p->local_status = NDET_LOCAL_ALLOC_FAILED;
}
static void spoil_local_export(struct ndet_setup_payload *p)
{
	p->local_status = NDET_LOCAL_EXPORT_FAILED;
}
static void spoil_hostname_unterminated(struct ndet_setup_payload *p)
{
	memset(p->hostname, 'x', sizeof(p->hostname));
}

static void test_every_mismatch_kind(void **state)
{
	const struct mismatch cases[] = {
		/* Rank 2 alone on another host: 3 + 1 ranks. */
		{"hostname", spoil_hostname, NDET_VERDICT_MULTI_HOST_UNEQUAL, 1},
		{"boot id", spoil_boot_id, NDET_VERDICT_MULTI_HOST_UNEQUAL, 1},
		{"library version", spoil_version, NDET_VERDICT_VERSION_MISMATCH, 999},
		{"settings hash", spoil_settings, NDET_VERDICT_SETTINGS_MISMATCH, 0},
		{"pool geometry", spoil_pool, NDET_VERDICT_POOL_MISMATCH, 0},
		{"PID namespace", spoil_pid_namespace, NDET_VERDICT_NAMESPACE,
		 NDET_VERDICT_DETAIL_PID_NAMESPACE},
		{"IPC namespace", spoil_ipc_namespace, NDET_VERDICT_NAMESPACE,
		 NDET_VERDICT_DETAIL_IPC_NAMESPACE},
		{"rank field", spoil_rank, NDET_VERDICT_RANK_MISMATCH, 0},
		{"local allocation", spoil_local_alloc, NDET_VERDICT_LOCAL_FAILURE,
		 NDET_LOCAL_ALLOC_FAILED},
		{"local export", spoil_local_export, NDET_VERDICT_LOCAL_FAILURE,
		 NDET_LOCAL_EXPORT_FAILED},
		{"unterminated string", spoil_hostname_unterminated, NDET_VERDICT_BAD_RECORD, 0},
	};
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		reset(state);
		add_comm(1, 4);
		add_comm(2, 3);
		if (cases[c].spoil == spoil_pid_namespace || cases[c].spoil == spoil_ipc_namespace)
			for (int r = 0; r < 4; r++) {
				member_of(1, r)->payload.pid_namespace = 77;
				member_of(1, r)->payload.ipc_namespace = 88;
			}
		cases[c].spoil(&member_of(1, 2)->payload);
		run();
		print_message("mismatch: %s\n", cases[c].name);
		/* Refused after round 2 on every rank; the healthy communicator goes on. */
		assert_comm(1, NDET_ERR_UNSUPPORTED, cases[c].reason, 2, cases[c].detail, 2);
		assert_comm(2, NDET_OK, NDET_VERDICT_OK, -1, 0, 4);
		assert_int_equal(world.round, 4);
	}
}

/*
 * Two hosts of two (ranks 2 and 3 on host B): every rank leaves after the payloads,
 * with the multi-host verdict, or the non-blocking one when a rank is non-blocking;
 * the single-host communicator driven in the same lockstep goes on.
 */
static void test_multi_host(void **state)
{
	for (int nonblocking = 0; nonblocking < 2; nonblocking++) {
		reset(state);
		add_comm(1, 4);
		add_comm(2, 3);
		/* Every rank has this process's pid and namespaces: nothing to go by. */
		spoil_hostname(&member_of(1, 2)->payload);
		spoil_hostname(&member_of(1, 3)->payload);
		if (nonblocking)
			member_of(1, 3)->payload.blocking = 0;
		run();
		if (nonblocking)
			assert_comm(1, NDET_ERR_UNSUPPORTED, NDET_VERDICT_MULTI_HOST_NONBLOCKING, 3,
				    2, 2);
		else
			assert_comm(1, NDET_ERR_UNSUPPORTED, NDET_VERDICT_MULTI_HOST, 2, 2, 2);
		assert_comm(2, NDET_OK, NDET_VERDICT_OK, -1, 0, 4);
	}
}

static void test_too_many_ranks(void **state)
{
	(void)state;
	add_comm(1, NDET_MAX_RANKS + 1);
	run();
	assert_comm(1, NDET_ERR_UNSUPPORTED, NDET_VERDICT_TOO_MANY_RANKS, NDET_MAX_RANKS,
		    NDET_MAX_RANKS + 1, 2);
}

/* Headers: a release with another format, a corrupt magic or payload length. */
static void tamper_format_version(int round, void *record, size_t bytes)
{
	struct ndet_setup_header header;
	assert_int_equal(bytes, sizeof(header));
	memcpy(&header, record, sizeof(header));
	header.format_version = NDET_SETUP_FORMAT_VERSION + 1;
	header.checksum = ndet_setup_header_checksum(&header);
	memcpy(record, &header, sizeof(header));
}

static void tamper_payload_length(int round, void *record, size_t bytes)
{
	struct ndet_setup_header header;
	memcpy(&header, record, sizeof(header));
	header.payload_length += 8;
	header.checksum = ndet_setup_header_checksum(&header);
	memcpy(record, &header, sizeof(header));
}

static void tamper_magic(int round, void *record, size_t bytes)
{
	((unsigned char *)record)[0] ^= 0xff;
}

static void tamper_checksum(int round, void *record, size_t bytes)
{
	((unsigned char *)record)[offsetof(struct ndet_setup_header, checksum)] ^= 0x01;
}

/* The slot of a rank that never sent anything (its NCCL ran another collective). */
static void tamper_never_sent(int round, void *record, size_t bytes)
{
	memset(record, 0, bytes);
}

static void test_header_checks(void **state)
{
	const tamper_fn tampers[] = {tamper_format_version, tamper_payload_length, tamper_magic,
				     tamper_checksum, tamper_never_sent};
	for (size_t t = 0; t < sizeof(tampers) / sizeof(tampers[0]); t++) {
		reset(state);
		add_comm(1, 3);
		add_comm(2, 2);
		world.tamper = tampers[t];
		world.tamper_round = 1;
		world.tamper_comm = 1;
		world.tamper_rank = 1;
		run();
		/* detail: the format version the offending header announced. */
		uint32_t detail = NDET_SETUP_FORMAT_VERSION;
		if (tampers[t] == tamper_format_version)
			detail = NDET_SETUP_FORMAT_VERSION + 1;
		/*
		 * Every rank stops after the headers: no payload of unknown length.  A
		 * record of another release is a fallback; no record at all means that
		 * rank never ran the setup.
		 */
		bool record =
			tampers[t] == tamper_format_version || tampers[t] == tamper_payload_length;
		if (record)
			assert_comm(1, NDET_ERR_UNSUPPORTED, NDET_VERDICT_BAD_RECORD, 1, detail, 1);
		else
			assert_comm(1, NDET_ERR_UNSUPPORTED, NDET_VERDICT_NOT_IN_SETUP, 1, 0, 1);
		for (int r = 0; r < 3; r++)
			assert_int_equal(member_of(1, r)->prepared, 0);
		assert_comm(2, NDET_OK, NDET_VERDICT_OK, -1, 0, 4);
	}
}

/* Round 3 and 4 failures on one rank: everyone falls back, pools quarantined. */
static void test_map_failure(void **state)
{
	(void)state;
	add_comm(1, 4);
	add_comm(2, 2);
	member_of(1, 1)->fail_map = true;
	run();
	assert_comm(1, NDET_ERR_UNSUPPORTED, NDET_VERDICT_LOCAL_FAILURE, 1, NDET_LOCAL_MAP_FAILED,
		    3);
	assert_comm(2, NDET_OK, NDET_VERDICT_OK, -1, 0, 4);
}

static void test_probe_failure(void **state)
{
	(void)state;
	add_comm(1, 3);
	member_of(1, 2)->fail_verify = true;
	member_of(1, 1)->fail_verify = true;
	run();
	/* The lowest failing rank is named. */
	assert_comm(1, NDET_ERR_UNSUPPORTED, NDET_VERDICT_LOCAL_FAILURE, 1, NDET_LOCAL_PROBE_FAILED,
		    4);
}

/*
 * A failed exchange: its members leave, and after round 3 their pools are kept.
 * Every member of the call fails, or (aborted from another thread, say) only
 * communicator 1's, and communicator 2 goes through all four rounds.
 */
static void test_exchange_failure(void **state)
{
	for (int failing = 0; failing <= 1; failing++) {
		for (int round = 1; round <= 4; round++) {
			reset(state);
			add_comm(1, 2);
			add_comm(2, 3);
			world.fail_round = round;
			world.fail_comm = failing;
			run();
			for (int i = 0; i < world.count; i++) {
				if (failing != 0 && world.members[i].comm != failing)
					continue;
				assert_int_equal(results[i].status, NDET_ERR_NCCL);
				assert_int_equal(world.members[i].released, 1);
				assert_int_equal(world.members[i].released_mapped, round >= 3);
				assert_int_equal(world.members[i].rounds, round);
			}
			if (failing != 0)
				assert_comm(2, NDET_OK, NDET_VERDICT_OK, -1, 0, 4);
		}
	}
}

/*
 * One rank of a communicator fails its exchange (the thread drives every rank of
 * it, each on its own device): every rank of that communicator leaves with it, or
 * the next round would exchange without it (the mock fails such a call: a real job
 * would hang there).  A communicator of another size goes on; one of the same
 * size leaves too, since a rank of it with another rank number on another device
 * may be a rank of the failed one's communicator.
 */
static void test_exchange_failure_of_one_rank(void **state)
{
	for (int round = 1; round <= 4; round++) {
		reset(state);
		add_comm(1, 2);
		add_comm(2, 3);
		for (int i = 0; i < world.count; i++)
			world.members[i].device = world.members[i].rank;
		world.fail_round = round;
		world.fail_comm = 2;
		world.fail_ranks = 1u << 1;
		run();
		assert_comm(1, NDET_OK, NDET_VERDICT_OK, -1, 0, 4);
		for (int r = 0; r < 3; r++) {
			assert_int_equal(result_of(2, r)->status,
					 r == 1 ? NDET_ERR_NCCL : NDET_ERR_REMOTE);
			assert_int_equal(member_of(2, r)->rounds, round);
			assert_int_equal(member_of(2, r)->released, 1);
		}
	}
	/* Two communicators of one size: a rank of the first may be one of the second. */
	reset(state);
	add_comm(1, 2);
	add_comm(2, 2);
	for (int i = 0; i < world.count; i++)
		world.members[i].device = world.members[i].rank;
	world.fail_round = 2;
	world.fail_comm = 1;
	world.fail_ranks = 1u << 0;
	run();
	for (int c = 1; c <= 2; c++)
		for (int r = 0; r < 2; r++)
			assert_int_equal(member_of(c, r)->rounds, 2);
	assert_int_equal(result_of(1, 0)->status, NDET_ERR_NCCL);
	assert_int_equal(result_of(1, 1)->status, NDET_ERR_REMOTE);
	assert_int_equal(result_of(2, 0)->status, NDET_ERR_REMOTE);
	assert_int_equal(result_of(2, 1)->status, NDET_ERR_REMOTE);
	/*
	 * Unknown identities, but a rank of communicator 2 on the failed rank's device
	 * and the other of the same rank number as it: neither may be one of
	 * communicator 1 (NCCL puts no two ranks of a communicator on one GPU in a
	 * process), so communicator 2 goes on.
	 */
	reset(state);
	add_comm(1, 2);
	add_comm(2, 2);
	member_of(1, 0)->device = 0;
	member_of(1, 1)->device = 1;
	member_of(2, 0)->device = 1;
	member_of(2, 1)->device = 0;
	world.fail_round = 2;
	world.fail_comm = 1;
	world.fail_ranks = 1u << 0;
	run();
	assert_int_equal(result_of(1, 0)->status, NDET_ERR_NCCL);
	assert_int_equal(result_of(1, 1)->status, NDET_ERR_REMOTE);
	assert_comm(2, NDET_OK, NDET_VERDICT_OK, -1, 0, 4);
	/*
	 * Known identities decide instead: communicator 1's ranks leave together, and
	 * communicator 2, whose own exchange went through, goes on (as it does on every
	 * thread that drives a rank of it, whatever else that thread drives).
	 */
	reset(state);
	add_comm(1, 2);
	add_comm(2, 2);
	for (int i = 0; i < world.count; i++) {
		world.members[i].device = world.members[i].rank;
		world.members[i].identity = 0x1000 + (uint64_t)world.members[i].comm;
	}
	world.fail_round = 2;
	world.fail_comm = 1;
	world.fail_ranks = 1u << 0;
	run();
	assert_int_equal(result_of(1, 0)->status, NDET_ERR_NCCL);
	assert_int_equal(result_of(1, 1)->status, NDET_ERR_REMOTE);
	for (int r = 0; r < 2; r++)
		assert_int_equal(member_of(1, r)->rounds, 2);
	assert_comm(2, NDET_OK, NDET_VERDICT_OK, -1, 0, 4);
}

/*
 * An all-gather that leaves one rank's slot unwritten, or hands over that rank's
 * record of the round before: what the buffer held is never accepted.  Without the
 * receive buffer cleared and the round in the record, round 4 read round 3's "0"
 * (mapped fine) as "verified fine" and diverted with a peer that never said so.
 */
static void test_stale_round_refused(void **state)
{
	for (int replay = 0; replay < 2; replay++) {
		for (int round = 2; round <= 4; round++) {
			reset(state);
			add_comm(1, 3);
			add_comm(2, 2);
			world.drop_round = round;
			world.drop_comm = 1;
			world.drop_rank = 1;
			world.replay = replay != 0;
			run();
			print_message("%s rank 1's record of round %d\n",
				      replay ? "replayed" : "dropped", round);
			assert_comm(1, NDET_ERR_UNSUPPORTED, NDET_VERDICT_BAD_RECORD, 1, 0, round);
			assert_comm(2, NDET_OK, NDET_VERDICT_OK, -1, 0, 4);
		}
	}
}

/* A caller bug (invalid rank) leaves that member out; the others go on. */
static void test_invalid_member(void **state)
{
	(void)state;
	add_comm(1, 2);
	struct mock_member *bad = &world.members[world.count++];
	memset(bad, 0, sizeof(*bad));
	bad->comm = 9;
	bad->rank = 5;
	bad->nranks = 2;
	run();
	assert_int_equal(results[2].status, NDET_ERR_INVALID_ARGUMENT);
	assert_int_equal(bad->prepared + bad->released + bad->rounds, 0);
	assert_comm(1, NDET_OK, NDET_VERDICT_OK, -1, 0, 4);
}

/* The barrier round outside setup. */
static void test_agree(void **state)
{
	(void)state;
	add_comm(1, 3);
	add_comm(2, 2);
	void *members[5];
	int nranks[5];
	int32_t words[5] = {0, 0, 0, 0, 1};
	bool clean[5] = {false, false, false, true, true};
	/* Kept from call to call: each call must zero them itself (the dropped word). */
	static unsigned char words_of[5][3 * NDET_SETUP_AGREE_BYTES];
	void *gathered[5];
	for (int i = 0; i < 5; i++) {
		members[i] = &world.members[i];
		nranks[i] = world.members[i].nranks;
		gathered[i] = words_of[i];
	}
	assert_int_equal(ndet_setup_agree(5, members, nranks, words, clean, gathered,
					  mock_allgather, &world),
			 NDET_OK);
	assert_int_equal(world.round, 1);
	for (int i = 0; i < 3; i++)
		assert_true(clean[i]);
	for (int i = 3; i < 5; i++)
		assert_false(clean[i]);
	world.fail_round = 2;
	assert_int_equal(ndet_setup_agree(5, members, nranks, words, clean, gathered,
					  mock_allgather, &world),
			 NDET_ERR_NCCL);
	for (int i = 0; i < 5; i++)
		assert_false(clean[i]);
	/* Communicator 2's exchange fails: communicator 1's clean words still count. */
	world.fail_round = 3;
	world.fail_comm = 2;
	for (int i = 0; i < 5; i++)
		clean[i] = i >= 3;
	assert_int_equal(ndet_setup_agree(5, members, nranks, words, clean, gathered,
					  mock_allgather, &world),
			 NDET_ERR_NCCL);
	for (int i = 0; i < 3; i++)
		assert_true(clean[i]);
	for (int i = 3; i < 5; i++)
		assert_false(clean[i]);
	world.fail_comm = 0;
	assert_int_equal(ndet_setup_agree(0, members, nranks, words, clean, gathered,
					  mock_allgather, &world),
			 NDET_OK);
	/* A barrier word that never arrived is not "clean" (the buffer was zero). */
	words[4] = 0;
	world.fail_round = 0;
	world.drop_round = world.round + 1;
	world.drop_comm = 2;
	world.drop_rank = 1;
	assert_int_equal(ndet_setup_agree(5, members, nranks, words, clean, gathered,
					  mock_allgather, &world),
			 NDET_OK);
	for (int i = 0; i < 3; i++)
		assert_true(clean[i]);
	for (int i = 3; i < 5; i++)
		assert_false(clean[i]);
}

/*
 * The barrier judged among some ranks: everyone exchanges, each member judges the
 * words of its list only (a rank outside the communicator is never clean).
 */
static void test_agree_among(void **state)
{
	(void)state;
	add_comm(1, 4);
	void *members[4];
	int nranks[4];
	const int32_t words[4] = {0, 0, 0, 1};
	const int pair01[] = {0, 1}, pair23[] = {2, 3}, single2[] = {2}, outside[] = {0, 4};
	const int *among[4] = {pair01, pair23, single2, outside};
	const int among_count[4] = {2, 2, 1, 2};
	bool clean[4];
	static unsigned char words_of[4][4 * NDET_SETUP_AGREE_BYTES];
	void *gathered[4];
	for (int i = 0; i < 4; i++) {
		members[i] = &world.members[i];
		nranks[i] = 4;
		gathered[i] = words_of[i];
	}
	assert_int_equal(ndet_setup_agree_among(4, members, nranks, words, among, among_count,
						clean, gathered, mock_allgather, &world),
			 NDET_OK);
	assert_int_equal(world.round, 1);
	assert_true(clean[0]);
	assert_false(clean[1]);
	assert_true(clean[2]);
	assert_false(clean[3]);
	/* Without lists, every rank: rank 3's word spoils them all. */
	assert_int_equal(ndet_setup_agree_among(4, members, nranks, words, NULL, NULL, clean,
						gathered, mock_allgather, &world),
			 NDET_OK);
	for (int i = 0; i < 4; i++)
		assert_false(clean[i]);
}

/* The identity every payload starts from. */
static void test_identity(void **state)
{
	(void)state;
	struct ndet_setup_payload payload;
	memset(&payload, 0x5a, sizeof(payload));
	ndet_setup_payload_identity(&payload, NULL);
	assert_non_null(memchr(payload.hostname, '\0', sizeof(payload.hostname)));
	assert_true(strlen(payload.hostname) > 0);
	assert_non_null(memchr(payload.boot_id, '\0', sizeof(payload.boot_id)));
	assert_true(payload.pid > 0);
	assert_int_equal(payload.local_status, NDET_LOCAL_READY);
	assert_int_equal(payload.flags, 0);
	assert_true(payload.library_version > 0);
	struct ndet_setup_payload real = payload;

	/* "" is no test host either. */
	ndet_setup_payload_identity(&payload, "");
	assert_memory_equal(&payload, &real, sizeof(payload));

	/* NCCL_DET_TEST_HOST's name replaces hostname and boot id, nothing else. */
	ndet_setup_payload_identity(&payload, "node-B");
	assert_string_equal(payload.hostname, "node-B");
	assert_string_equal(payload.boot_id, NDET_SETUP_TEST_HOST_BOOT_ID);
	assert_int_equal(payload.pid, real.pid);
	assert_int_equal(payload.pid_namespace, real.pid_namespace);
	assert_int_equal(payload.library_version, real.library_version);
	struct ndet_setup_payload other;
	ndet_setup_payload_identity(&other, "node-C");
	assert_false(ndet_setup_same_host(&payload, &other));
	ndet_setup_payload_identity(&other, "node-B");
	assert_true(ndet_setup_same_host(&payload, &other));
	assert_false(ndet_setup_same_host(&payload, &real));
	/* The longest name the setting takes fits. */
	char longest[NDET_SETTINGS_TEST_HOST_NAME_MAX + 1];
	memset(longest, 'n', sizeof(longest) - 1);
	longest[sizeof(longest) - 1] = '\0';
	ndet_setup_payload_identity(&payload, longest);
	assert_string_equal(payload.hostname, longest);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_two_comms_in_lockstep, reset),
		cmocka_unit_test_setup(test_agreed_flags, reset),
		cmocka_unit_test_setup(test_every_mismatch_kind, reset),
		cmocka_unit_test_setup(test_multi_host, reset),
		cmocka_unit_test_setup(test_too_many_ranks, reset),
		cmocka_unit_test_setup(test_header_checks, reset),
		cmocka_unit_test_setup(test_map_failure, reset),
		cmocka_unit_test_setup(test_probe_failure, reset),
		cmocka_unit_test_setup(test_exchange_failure, reset),
		cmocka_unit_test_setup(test_exchange_failure_of_one_rank, reset),
		cmocka_unit_test_setup(test_stale_round_refused, reset),
		cmocka_unit_test_setup(test_invalid_member, reset),
		cmocka_unit_test_setup(test_agree_among, reset),
		cmocka_unit_test_setup(test_agree, reset),
		cmocka_unit_test_setup(test_identity, reset),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
