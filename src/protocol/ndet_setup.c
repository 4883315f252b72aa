/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The setup protocol (see ndet_setup.h).  Pure: every decision comes from bytes all
 * ranks of a communicator hold alike, so they leave the protocol at the same round
 * with the same verdict.
 */
#include "config.h"

#include "protocol/ndet_setup.h"

#include "protocol/ndet_hosts_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nccl_det.h"
#include "common/ndet_log.h"
#include "common/ndet_settings.h"
#include "protocol/ndet_host_table.h"

/* A name of NCCL_DET_TEST_HOST fits the record's hostname, terminator included. */
_Static_assert(NDET_SETTINGS_TEST_HOST_NAME_MAX < NDET_SETUP_HOSTNAME_LENGTH,
	       "NCCL_DET_TEST_HOST names must fit the setup record");
_Static_assert(sizeof(NDET_SETUP_TEST_HOST_BOOT_ID) <= NDET_SETUP_BOOT_ID_LENGTH,
	       "the test boot id must fit the setup record");

/* Round numbers, for "peers may have mapped" and logs. */
enum ndet_setup_round {
	NDET_SETUP_ROUND_HEADERS = 1,
	NDET_SETUP_ROUND_PAYLOADS,
	NDET_SETUP_ROUND_MAPPED,
	NDET_SETUP_ROUND_VERIFIED,
};

/*
 * The record of rounds 3 and 4 and of the destroy barrier: a status word tagged
 * with the round it belongs to.  A slot that holds anything else (never written by
 * the all-gather, or left over from another round) is refused: a bare status word
 * would read 0, "fine", from a zeroed or stale slot.  Peers of other releases never
 * get here (round 2 refuses another library version), so this layout may change.
 */
struct ndet_setup_word {
	uint32_t tag; /* NDET_SETUP_WORD_TAG(round) */
	int32_t value;
	uint32_t opened; /* round 3: ops->opened */
	uint32_t reserved;
};

#define NDET_SETUP_WORD_TAG(round) (0x4e440000u | (uint32_t)(round)) /* "ND" and the round */

_Static_assert(sizeof(struct ndet_setup_word) == NDET_SETUP_AGREE_BYTES,
	       "a barrier word is what callers reserve for it");

/* Round number of the destroy barrier (ndet_setup_agree). */
#define NDET_SETUP_ROUND_BARRIER 5

static void ndet_setup_read_boot_id(char *buffer, size_t size)
{
	buffer[0] = '\0';
	FILE *file = fopen("/proc/sys/kernel/random/boot_id", "r");
	if (file == NULL)
		return;
	if (fgets(buffer, (int)size, file) == NULL)
		buffer[0] = '\0';
	fclose(file);
	buffer[strcspn(buffer, "\n")] = '\0';
}

static uint64_t ndet_setup_namespace(const char *path)
{
	struct stat info;
	if (stat(path, &info) != 0)
		return 0; /* unknown: the evaluation does not refuse on it */
	return (uint64_t)info.st_ino;
}

void ndet_setup_payload_identity(struct ndet_setup_payload *payload, const char *test_host)
{
	memset(payload, 0, sizeof(*payload));
	if (test_host != NULL && test_host[0] != '\0') {
		snprintf(payload->hostname, sizeof(payload->hostname), "%s", test_host);
		snprintf(payload->boot_id, sizeof(payload->boot_id), "%s",
			 NDET_SETUP_TEST_HOST_BOOT_ID);
	} else {
		if (gethostname(payload->hostname, sizeof(payload->hostname) - 1) != 0)
			snprintf(payload->hostname, sizeof(payload->hostname), "unknown");
		ndet_setup_read_boot_id(payload->boot_id, sizeof(payload->boot_id));
	}
	payload->pid = (uint64_t)getpid();
	payload->pid_namespace = ndet_setup_namespace("/proc/self/ns/pid");
	payload->ipc_namespace = ndet_setup_namespace("/proc/self/ns/ipc");
	payload->library_version = NCCL_DET_VERSION_CODE;
}

/* Per-member bookkeeping of one run. */
struct ndet_setup_state {
	bool active; /* still in the protocol */
	unsigned char *send;
	unsigned char *recv; /* nranks * the largest record */
	struct ndet_setup_payload *table;
	/* The hosts of the table, for the verdict: allocated with the buffers, before any
	 * exchange, so that judging the table never fails on this rank alone. */
	struct ndet_host_table *hosts;
};

/* ndet_setup_set_multi_host_for_testing. */
static bool ndet_setup_multi_host_testing;

void ndet_setup_set_multi_host_for_testing(bool on)
{
	__atomic_store_n(&ndet_setup_multi_host_testing, on, __ATOMIC_RELAXED);
}

bool ndet_setup_multi_host_for_testing(void)
{
	return __atomic_load_n(&ndet_setup_multi_host_testing, __ATOMIC_RELAXED);
}

/* Buffers big enough for every round. */
#define NDET_SETUP_RECORD_MAX sizeof(struct ndet_setup_payload)

static void ndet_setup_set_verdict(struct ndet_setup_member *member, ndet_verdict_reason_t reason,
				   int rank, uint32_t detail)
{
	member->verdict.reason = reason;
	member->verdict.offending_rank = rank;
	member->verdict.detail = detail;
}

/*
 * The member leaves the protocol without an engine.  `opened`: each rank's round-3
 * word where the round's exchange succeeded (NULL: unknown).
 */
static void ndet_setup_leave_opened(struct ndet_setup_member *member,
				    struct ndet_setup_state *state,
				    const struct ndet_setup_member_ops *ops, ndet_status_t status,
				    int round, const uint32_t *opened)
{
	member->status = status;
	state->active = false;
	/* Mappings are made just before round 3 is exchanged. */
	ops->release(member->context, round >= NDET_SETUP_ROUND_MAPPED, opened);
}

static void ndet_setup_leave(struct ndet_setup_member *member, struct ndet_setup_state *state,
			     const struct ndet_setup_member_ops *ops, ndet_status_t status,
			     int round)
{
	ndet_setup_leave_opened(member, state, ops, status, round, NULL);
}

void ndet_exchange_leave_together(const struct ndet_exchange_place *places, bool leaves[],
				  int count)
{
	for (bool more = true; more;) {
		more = false;
		for (int i = 0; i < count; i++) {
			for (int k = 0; leaves[i] && k < count; k++) {
				if (!leaves[k] &&
				    (places == NULL ||
				     ndet_exchange_may_share(&places[i], &places[k]))) {
					leaves[k] = true;
					more = true;
				}
			}
		}
	}
}

static struct ndet_exchange_place ndet_setup_place(const struct ndet_setup_member *member)
{
	return ndet_exchange_place_of(member->comm_identity, member->rank, member->nranks,
				      member->device);
}

/*
 * What one round's all-gather takes, for `count` members: allocated once before the
 * first round (on the stack up to NDET_SETUP_STACK members), so that a member that
 * has begun the protocol never leaves a round for want of memory while its peers
 * wait for it there.
 */
struct ndet_setup_scratch {
	void **contexts;
	const void **sends;
	void **recvs;
	int *index;
	ndet_status_t *results;
	struct ndet_exchange_place *places;
	bool *leaves;
};

struct ndet_setup_scratch_stack {
	void *contexts[NDET_SETUP_STACK];
	const void *sends[NDET_SETUP_STACK];
	void *recvs[NDET_SETUP_STACK];
	int index[NDET_SETUP_STACK];
	ndet_status_t results[NDET_SETUP_STACK];
	struct ndet_exchange_place places[NDET_SETUP_STACK];
	bool leaves[NDET_SETUP_STACK];
};

static void ndet_setup_scratch_free_heap(struct ndet_setup_scratch *scratch)
{
	free(scratch->contexts);
	free(scratch->sends);
	free(scratch->recvs);
	free(scratch->index);
	free(scratch->results);
	free(scratch->places);
	free(scratch->leaves);
}

/* false when out of memory (nothing to free then). */
static bool ndet_setup_scratch_init(struct ndet_setup_scratch *scratch,
				    struct ndet_setup_scratch_stack *stack, int count)
{
	if (count <= NDET_SETUP_STACK) {
		*scratch = (struct ndet_setup_scratch){
			stack->contexts, stack->sends,  stack->recvs, stack->index,
			stack->results,  stack->places, stack->leaves};
		return true;
	}
	const size_t n = (size_t)count;
	*scratch = (struct ndet_setup_scratch){
		calloc(n, sizeof(void *)),        calloc(n, sizeof(const void *)),
		calloc(n, sizeof(void *)),        calloc(n, sizeof(int)),
		calloc(n, sizeof(ndet_status_t)), calloc(n, sizeof(struct ndet_exchange_place)),
		calloc(n, sizeof(bool))};
	if (scratch->contexts != NULL && scratch->sends != NULL && scratch->recvs != NULL &&
	    scratch->index != NULL && scratch->results != NULL && scratch->places != NULL &&
	    scratch->leaves != NULL)
		return true;
	ndet_setup_scratch_free_heap(scratch);
	return false;
}

static void ndet_setup_scratch_free(struct ndet_setup_scratch *scratch, int count)
{
	if (count > NDET_SETUP_STACK)
		ndet_setup_scratch_free_heap(scratch);
}

/*
 * One round for every active member: `fill` wrote state->send; afterwards
 * state->recv holds nranks records of `bytes`.  A member whose exchange failed
 * leaves the protocol; the others go on (the all-gather reports each one's outcome).
 */
static void ndet_setup_exchange(struct ndet_setup_member *members, struct ndet_setup_state *states,
				int count, const struct ndet_setup_member_ops *ops,
				const struct ndet_setup_scratch *scratch,
				ndet_setup_allgather_fn allgather, void *context, size_t bytes,
				int round)
{
	void **contexts = scratch->contexts;
	const void **sends = scratch->sends;
	void **recvs = scratch->recvs;
	int *index = scratch->index;
	ndet_status_t *results = scratch->results;
	struct ndet_exchange_place *places = scratch->places;
	bool *leaves = scratch->leaves;
	int active = 0;

	for (int i = 0; i < count; i++) {
		if (!states[i].active)
			continue;
		/* Nothing of an earlier round may pass for this one's. */
		memset(states[i].recv, 0, (size_t)members[i].nranks * NDET_SETUP_RECORD_MAX);
		contexts[active] = members[i].context;
		sends[active] = states[i].send;
		recvs[active] = states[i].recv;
		index[active] = i;
		results[active] = NDET_ERR_INTERNAL; /* an all-gather that sets none fails all */
		active++;
	}
	if (active == 0)
		return;
	(void)allgather(context, active, contexts, sends, recvs, bytes, results);
	/* The members that may be ranks of a failed one's communicator fail with it. */
	for (int k = 0; k < active; k++) {
		places[k] = ndet_setup_place(&members[index[k]]);
		leaves[k] = results[k] != NDET_OK;
	}
	ndet_exchange_leave_together(places, leaves, active);
	for (int k = 0; k < active; k++)
		if (leaves[k] && results[k] == NDET_OK)
			results[k] = NDET_ERR_REMOTE;
	for (int k = 0; k < active; k++) {
		if (results[k] == NDET_OK)
			continue;
		NDET_WARN("setup round %d: the exchange of %zu bytes failed: %s; this "
			  "communicator falls back to NCCL",
			  round, bytes, ndet_status_name(results[k]));
		ndet_setup_leave(&members[index[k]], &states[index[k]], ops, results[k], round);
	}
}

static void ndet_setup_check_headers(struct ndet_setup_member *member,
				     struct ndet_setup_state *state,
				     const struct ndet_setup_member_ops *ops)
{
	for (int r = 0; r < member->nranks; r++) {
		struct ndet_setup_header header;
		memcpy(&header, state->recv + (size_t)r * sizeof(header), sizeof(header));
		if (ndet_setup_header_check(&header) == NDET_OK)
			continue;
		/*
		 * Every rank holds the same headers, so every rank stops here.  A slot
		 * without any record was never sent: that rank is not in the protocol.
		 */
		if (!ndet_setup_header_is_record(&header))
			ndet_setup_set_verdict(member, NDET_VERDICT_NOT_IN_SETUP, r, 0);
		else
			ndet_setup_set_verdict(member, NDET_VERDICT_BAD_RECORD, r,
					       header.format_version);
		ndet_setup_leave(member, state, ops, NDET_ERR_UNSUPPORTED,
				 NDET_SETUP_ROUND_HEADERS);
		return;
	}
}

static void ndet_setup_check_payloads(struct ndet_setup_member *member,
				      struct ndet_setup_state *state,
				      const struct ndet_setup_member_ops *ops)
{
	const size_t bytes = sizeof(struct ndet_setup_payload);
	uint32_t flags = ~0u;
	for (int r = 0; r < member->nranks; r++) {
		if (ndet_setup_payload_parse(state->recv + (size_t)r * bytes, bytes,
					     &state->table[r]) != NDET_OK) {
			ndet_setup_set_verdict(member, NDET_VERDICT_BAD_RECORD, r, 0);
			ndet_setup_leave(member, state, ops, NDET_ERR_UNSUPPORTED,
					 NDET_SETUP_ROUND_PAYLOADS);
			return;
		}
		flags &= state->table[r].flags;
	}
	member->agreed_flags = flags;
	ndet_setup_evaluate_rules(state->table, member->nranks, state->hosts,
				  ndet_setup_table_multi_host(state->table, member->nranks) ||
					  ndet_setup_multi_host_for_testing(),
				  &member->verdict);
	if (member->verdict.reason != NDET_VERDICT_OK)
		ndet_setup_leave(member, state, ops, NDET_ERR_UNSUPPORTED,
				 NDET_SETUP_ROUND_PAYLOADS);
}

static void ndet_setup_word_init(struct ndet_setup_word *word, int round, int32_t value)
{
	memset(word, 0, sizeof(*word));
	word->tag = NDET_SETUP_WORD_TAG(round);
	word->value = value;
}

/*
 * Rank r's word of `round` from the gathered records: false when the slot holds no
 * word of this round (the caller treats that rank as failed).
 */
static bool ndet_setup_word_read(const unsigned char *gathered, int r, int round, int32_t *value)
{
	struct ndet_setup_word word;
	memcpy(&word, gathered + (size_t)r * sizeof(word), sizeof(word));
	*value = word.value;
	return word.tag == NDET_SETUP_WORD_TAG(round);
}

/*
 * Round 3's failure: what every rank opened (its word's `opened`), for the release to
 * wait only for the peers that did.  NULL where unknown (a rank's word is missing, or
 * out of memory).
 */
static uint32_t *ndet_setup_opened_of(const struct ndet_setup_member *member,
				      const struct ndet_setup_state *state)
{
	uint32_t *opened = calloc((size_t)member->nranks, sizeof(*opened));
	for (int r = 0; opened != NULL && r < member->nranks; r++) {
		struct ndet_setup_word word;
		memcpy(&word, state->recv + (size_t)r * sizeof(word), sizeof(word));
		if (word.tag != NDET_SETUP_WORD_TAG(NDET_SETUP_ROUND_MAPPED)) {
			free(opened);
			return NULL;
		}
		opened[r] = word.opened;
	}
	return opened;
}

/* Rounds 3 and 4: the lowest rank that reported a failure fails everyone. */
static void ndet_setup_check_agreement(struct ndet_setup_member *member,
				       struct ndet_setup_state *state,
				       const struct ndet_setup_member_ops *ops, int round)
{
	for (int r = 0; r < member->nranks; r++) {
		int32_t value;
		if (!ndet_setup_word_read(state->recv, r, round, &value)) {
			ndet_setup_set_verdict(member, NDET_VERDICT_BAD_RECORD, r, 0);
			ndet_setup_leave(member, state, ops, NDET_ERR_UNSUPPORTED, round);
			return;
		}
		if (value == 0)
			continue;
		ndet_setup_set_verdict(member, NDET_VERDICT_LOCAL_FAILURE, r, (uint32_t)value);
		/*
		 * Every rank's round-3 word is in: wait only for the peers that opened
		 * this pool.  (At round 4 every rank opened every peer.)
		 */
		uint32_t *opened = round == NDET_SETUP_ROUND_MAPPED
					   ? ndet_setup_opened_of(member, state)
					   : NULL;
		ndet_setup_leave_opened(member, state, ops, NDET_ERR_UNSUPPORTED, round, opened);
		free(opened);
		return;
	}
}

static bool ndet_setup_member_valid(const struct ndet_setup_member *member)
{
	return member->nranks >= 1 && member->nranks <= NDET_SETUP_NRANKS_LIMIT &&
	       member->rank >= 0 && member->rank < member->nranks;
}

void ndet_setup_run(struct ndet_setup_member *members, int count,
		    const struct ndet_setup_member_ops *ops, ndet_setup_allgather_fn allgather,
		    void *allgather_context)
{
	struct ndet_setup_state *states = calloc((size_t)(count > 0 ? count : 1), sizeof(*states));
	struct ndet_setup_scratch_stack stack;
	struct ndet_setup_scratch scratch;
	const bool scratch_ok = ndet_setup_scratch_init(&scratch, &stack, count);

	for (int i = 0; i < count; i++) {
		struct ndet_setup_member *member = &members[i];
		member->status =
			ndet_setup_member_valid(member) ? NDET_OK : NDET_ERR_INVALID_ARGUMENT;
		member->agreed_flags = 0;
		ndet_setup_set_verdict(member, NDET_VERDICT_OK, -1, 0);
	}
	for (int i = 0; i < count; i++) {
		struct ndet_setup_member *member = &members[i];
		if (member->status != NDET_OK)
			continue;
		if (states == NULL || !scratch_ok)
			goto out_of_memory;
		struct ndet_setup_state *state = &states[i];
		state->send = calloc(1, NDET_SETUP_RECORD_MAX);
		state->recv = calloc((size_t)member->nranks, NDET_SETUP_RECORD_MAX);
		state->table = calloc((size_t)member->nranks, sizeof(*state->table));
		state->hosts = ndet_host_table_create(member->nranks);
		state->active = true;
		if (state->send == NULL || state->recv == NULL || state->table == NULL ||
		    state->hosts == NULL)
			goto out_of_memory;
	}

	/* Round 1: headers, whose size never changes across releases. */
	for (int i = 0; i < count; i++) {
		if (!states[i].active)
			continue;
		struct ndet_setup_header header;
		ndet_setup_header_init(&header, (uint32_t)sizeof(struct ndet_setup_payload));
		memcpy(states[i].send, &header, sizeof(header));
	}
	ndet_setup_exchange(members, states, count, ops, &scratch, allgather, allgather_context,
			    sizeof(struct ndet_setup_header), NDET_SETUP_ROUND_HEADERS);
	for (int i = 0; i < count; i++)
		if (states[i].active)
			ndet_setup_check_headers(&members[i], &states[i], ops);

	/* Round 2: payloads (prepared now: nothing is allocated for a peer we cannot read). */
	for (int i = 0; i < count; i++) {
		if (!states[i].active)
			continue;
		struct ndet_setup_payload payload;
		ops->prepare(members[i].context, &payload);
		memcpy(states[i].send, &payload, sizeof(payload));
	}
	ndet_setup_exchange(members, states, count, ops, &scratch, allgather, allgather_context,
			    sizeof(struct ndet_setup_payload), NDET_SETUP_ROUND_PAYLOADS);
	for (int i = 0; i < count; i++)
		if (states[i].active)
			ndet_setup_check_payloads(&members[i], &states[i], ops);

	/* Round 3: mapped and probe written. */
	for (int i = 0; i < count; i++) {
		if (!states[i].active)
			continue;
		bool ok = ops->map_and_probe_write(members[i].context, states[i].table,
						   members[i].nranks);
		struct ndet_setup_word word;
		ndet_setup_word_init(&word, NDET_SETUP_ROUND_MAPPED,
				     ok ? 0 : (int32_t)NDET_LOCAL_MAP_FAILED);
		word.opened = ops->opened != NULL ? ops->opened(members[i].context) : ~0u;
		memcpy(states[i].send, &word, sizeof(word));
	}
	ndet_setup_exchange(members, states, count, ops, &scratch, allgather, allgather_context,
			    sizeof(struct ndet_setup_word), NDET_SETUP_ROUND_MAPPED);
	for (int i = 0; i < count; i++)
		if (states[i].active)
			ndet_setup_check_agreement(&members[i], &states[i], ops,
						   NDET_SETUP_ROUND_MAPPED);

	/* Round 4: every probe arrived. */
	for (int i = 0; i < count; i++) {
		if (!states[i].active)
			continue;
		struct ndet_setup_word word;
		ndet_setup_word_init(&word, NDET_SETUP_ROUND_VERIFIED,
				     ops->probe_verify(members[i].context)
					     ? 0
					     : (int32_t)NDET_LOCAL_PROBE_FAILED);
		memcpy(states[i].send, &word, sizeof(word));
	}
	ndet_setup_exchange(members, states, count, ops, &scratch, allgather, allgather_context,
			    sizeof(struct ndet_setup_word), NDET_SETUP_ROUND_VERIFIED);
	for (int i = 0; i < count; i++)
		if (states[i].active)
			ndet_setup_check_agreement(&members[i], &states[i], ops,
						   NDET_SETUP_ROUND_VERIFIED);
	goto out;

out_of_memory:
	/*
	 * Before any exchange: no member has sent anything, and the caller's peers are
	 * in the same state only if their allocation failed too.  Nothing better exists
	 * than failing every member here (a few hundred bytes per rank); the caller
	 * reports NDET_ERR_SYSTEM, since the peers may wait in the first exchange.
	 */
	NDET_WARN("setup of %d communicator(s): out of memory before the first exchange", count);
	for (int i = 0; i < count; i++) {
		if (members[i].status != NDET_OK)
			continue;
		members[i].status = NDET_ERR_SYSTEM;
		ops->release(members[i].context, false, NULL);
		if (states != NULL)
			states[i].active = false;
	}
out:
	if (states != NULL) {
		for (int i = 0; i < count; i++) {
			free(states[i].send);
			free(states[i].recv);
			free(states[i].table);
			ndet_host_table_destroy(states[i].hosts);
		}
	}
	free(states);
	if (scratch_ok)
		ndet_setup_scratch_free(&scratch, count);
}

ndet_status_t ndet_setup_agree(int count, void *const members[], const int nranks[],
			       const int32_t words[], bool clean[], void *const gathered[],
			       ndet_setup_allgather_fn allgather, void *allgather_context)
{
	return ndet_setup_agree_among(count, members, nranks, words, NULL, NULL, clean, gathered,
				      allgather, allgather_context);
}

/* Is rank r's barrier word in `gathered` a 0 of this round? */
static bool ndet_setup_word_clean(const unsigned char *gathered, int nranks, int r)
{
	int32_t value;
	return r >= 0 && r < nranks &&
	       ndet_setup_word_read(gathered, r, NDET_SETUP_ROUND_BARRIER, &value) && value == 0;
}

/* Member i's verdict: every judged rank's word clean. */
static bool ndet_setup_agree_judge(const unsigned char *gathered, int nranks, const int *among,
				   int among_count)
{
	bool clean = true;
	if (among == NULL) {
		for (int r = 0; r < nranks; r++)
			clean = clean && ndet_setup_word_clean(gathered, nranks, r);
	} else {
		for (int k = 0; k < among_count; k++)
			clean = clean && ndet_setup_word_clean(gathered, nranks, among[k]);
	}
	return clean;
}

ndet_status_t ndet_setup_agree_among(int count, void *const members[], const int nranks[],
				     const int32_t words[], const int *const among[],
				     const int among_count[], bool clean[], void *const gathered[],
				     ndet_setup_allgather_fn allgather, void *allgather_context)
{
	ndet_status_t status = NDET_OK;
	const size_t slots = (size_t)(count > 0 ? count : 1);
	struct ndet_setup_word mine_here[NDET_SETUP_STACK];
	const void *sends_here[NDET_SETUP_STACK];
	ndet_status_t results_here[NDET_SETUP_STACK];
	const bool here = count <= NDET_SETUP_STACK;
	struct ndet_setup_word *mine = here ? mine_here : calloc(slots, sizeof(*mine));
	const void **sends = here ? sends_here : calloc(slots, sizeof(*sends));
	ndet_status_t *results = here ? results_here : calloc(slots, sizeof(*results));
	if (count < 1)
		goto out;
	for (int i = 0; i < count; i++)
		clean[i] = false;
	if (mine == NULL || sends == NULL || results == NULL) {
		status = NDET_ERR_SYSTEM;
		goto out;
	}
	for (int i = 0; i < count; i++) {
		ndet_setup_word_init(&mine[i], NDET_SETUP_ROUND_BARRIER, words[i]);
		sends[i] = &mine[i];
		results[i] = NDET_ERR_INTERNAL;
		/* Zeroed: a slot the all-gather never wrote is no word, hence not clean. */
		memset(gathered[i], 0, (size_t)nranks[i] * sizeof(struct ndet_setup_word));
	}
	status = allgather(allgather_context, count, members, sends, gathered,
			   sizeof(struct ndet_setup_word), results);
	/* A member whose exchange failed is not clean; the others judge their words. */
	for (int i = 0; i < count; i++)
		clean[i] = results[i] == NDET_OK &&
			   ndet_setup_agree_judge(gathered[i], nranks[i],
						  among != NULL ? among[i] : NULL,
						  among != NULL ? among_count[i] : 0);
out:
	if (!here) {
		free(results);
		free(sends);
		free(mine);
	}
	return status;
}

bool ndet_setup_staging_fits(const struct ndet_engine_config *config, uint64_t pool_bytes,
			     int hosts, int local_ranks)
{
	const uint64_t least = ndet_hosts_min_staging_any(hosts, local_ranks);
	if (config->hosts_staging < least) {
		NDET_WARN("rank %d: NCCL_DET_HOSTS_STAGING=%llu is below the %llu bytes %d hosts "
			  "of %d ranks need; raise it on every rank",
			  config->rank, (unsigned long long)config->hosts_staging,
			  (unsigned long long)least, hosts, local_ranks);
		return false;
	}
	if (pool_bytes + config->hosts_staging > config->max_memory) {
		NDET_WARN("rank %d: pool and multi-host staging of %llu bytes exceed "
			  "NCCL_DET_MAX_MEMORY=%llu; raise NCCL_DET_MAX_MEMORY or lower "
			  "NCCL_DET_HOSTS_STAGING",
			  config->rank, (unsigned long long)(pool_bytes + config->hosts_staging),
			  (unsigned long long)config->max_memory);
		return false;
	}
	return true;
}
