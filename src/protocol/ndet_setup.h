/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The per-communicator setup protocol (doc/design.md, "Setup"), with no CUDA and no NCCL:
 * the caller supplies what one member (one rank of one communicator) does locally,
 * and one all-gather that exchanges bytes for several members at once.
 *
 * Rounds, each an all-gather over every member still in the protocol:
 *   1. fixed-size headers (magic, format version, payload length);
 *   2. payloads, judged by ndet_setup_evaluate() into one verdict;
 *   3. "I mapped every peer and wrote my probe word into its pool";
 *   4. "I found every peer's probe word in my pool".
 * Every receive buffer is zeroed before its round, and the status words of rounds
 * 3 and 4 carry their round number: a slot the all-gather left unwritten, or one
 * holding another round's record, is refused (NDET_VERDICT_BAD_RECORD naming that
 * rank), never read as "fine".
 * A local failure never skips a round: it travels as a status (the payload's
 * local_status, the agreement words of rounds 3 and 4), so no peer is left waiting
 * in an exchange.  A member leaves the protocol only on a verdict its peers reach
 * from the same bytes (bad header, refused table, a failed agreement), so every rank
 * of a communicator leaves at the same round.  The memory every round needs is
 * taken before the first: a member that cannot have it never begins (NDET_ERR_SYSTEM,
 * and its caller must report it: its peers may wait for it in round 1), and, up to
 * NDET_SETUP_STACK members driven at once, one that has begun needs nothing more to
 * finish its rounds (what it may still allocate after a failed round only narrows
 * which peers its release waits for).
 *
 * Lockstep: ndet_setup_run() drives several members at once, one round at a time,
 * and hands every member's round to ONE all-gather call.  A thread that drives
 * several ranks (nccl-tests -g, ncclCommInitAll, several inits in one group) thus
 * never blocks in an exchange waiting for a rank it must drive itself.
 */
#ifndef NDET_SETUP_H_
#define NDET_SETUP_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "protocol/ndet_engine_config.h"
#include "protocol/ndet_setup_record.h"
#include "common/ndet_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What one member does locally; `member` is ndet_setup_member.context. */
struct ndet_setup_member_ops {
	/*
	 * Allocate and export what the member publishes, and fill every field of
	 * `payload`.  A local failure goes into payload->local_status; prepare never
	 * fails otherwise.
	 */
	void (*prepare)(void *member, struct ndet_setup_payload *payload);
	/*
	 * Map every peer of the agreed `table` and write this member's probe word into
	 * each peer's pool.  false when any of it failed (the cause logged here).
	 */
	bool (*map_and_probe_write)(void *member, const struct ndet_setup_payload *table,
				    int nranks);
	/*
	 * Right after map_and_probe_write, whatever it returned: the peers' pools this
	 * member opened, one bit per index among the ranks of its host (published with
	 * round 3).  NULL: every one.
	 */
	uint32_t (*opened)(void *member);
	/* true when every peer's probe word arrived in this member's pool. */
	bool (*probe_verify)(void *member);
	/*
	 * The member leaves without an engine: undo what prepare and map did.  With
	 * `peers_may_have_mapped`, peers may already hold mappings of this member's pool
	 * (round 3 was reached), so it must not be freed before they let go (ndet_teardown.h:
	 * with the other ranks of its process, or once they wrote their detach words, or
	 * at exit).  `opened`: where round 3's words are known, what each rank of the
	 * communicator opened (ops->opened, by global rank), so that only those peers are
	 * waited for; NULL: any peer may have.  May come without a prepare (out of memory
	 * before the first exchange).
	 */
	void (*release)(void *member, bool peers_may_have_mapped, const uint32_t *opened);
};

/*
 * Exchange `bytes` for each of `count` members at once: recvs[i] receives, in rank
 * order, what every rank of member i's communicator sent (nranks * bytes), sends[i]
 * is this member's contribution.  Buffers are host memory.  `members[i]` is the
 * context of the member that sends[i] belongs to.  Collective over the members'
 * communicators; the members of one call may belong to different communicators.
 * results[i]: member i's own outcome (NDET_OK: recvs[i] holds the round), set for
 * every member, so that one communicator that fails (aborted from another thread)
 * takes no other out of the protocol.  Returns NDET_OK when every member's is, else
 * a failed member's.
 */
typedef ndet_status_t (*ndet_setup_allgather_fn)(void *context, int count, void *const members[],
						 const void *const sends[], void *const recvs[],
						 size_t bytes, ndet_status_t results[]);

/* Flags a rank publishes (ndet_setup_payload.flags). */
#define NDET_SETUP_FLAG_STRICT 0x1u /* NCCL_DET_STRICT=1 on that rank */
/*
 * fp8: the rank's GPU is sm_90 or newer (NCCL reduces fp8 nowhere else: below, it
 * returns ncclInvalidArgument), and this build's fp8 kernels load on it
 * (ndet_kernel_fp8_check).  Set by the engine (ndet_engine_pool.c), not by settings.
 */
#define NDET_SETUP_FLAG_SM90 0x2u
#define NDET_SETUP_FLAG_FP8  0x4u
/*
 * The rank's engine runs the data path between hosts (ndet_backend.multi_host):
 * published by the divert layer from the backend's capability.  A table of several
 * hosts diverts only when every rank publishes it (ndet_setup_evaluate), so a
 * backend without the stages keeps every rank on NCCL alike.
 */
#define NDET_SETUP_FLAG_MULTI_HOST 0x8u

struct ndet_setup_member {
	/* in */
	void *context; /* handed to the ops and to the all-gather */
	int rank;
	int nranks; /* 1 ... 4096 */
	/*
	 * Its communicator's identity in this process (0 unknown) and the rank's CUDA
	 * device (-1 unknown): with rank and nranks, what tells which members of one call
	 * may be ranks of one communicator (ndet_exchange_may_share).  A member whose
	 * exchange fails takes those with it, so that none of them is left to exchange
	 * without a rank this thread no longer drives.
	 */
	uint64_t comm_identity;
	int device;
	/* out */
	ndet_status_t status; /* NDET_OK: engine ready; NDET_ERR_UNSUPPORTED: the ranks
			       * agreed to fall back (verdict says why); NDET_ERR_SYSTEM:
			       * out of memory before round 1; else the exchange itself
			       * failed */
	struct ndet_setup_verdict verdict;
	/*
	 * AND of every rank's payload flags (NDET_SETUP_FLAG_*), 0 when payloads were
	 * not exchanged: a fact every rank derives from the same table.
	 */
	uint32_t agreed_flags;
};

/* What NCCL_DET_TEST_HOST publishes as the boot id of every name it gives. */
#define NDET_SETUP_TEST_HOST_BOOT_ID "NCCL_DET_TEST_HOST"

/*
 * Zero `payload` and fill what identifies this process and library: hostname, boot
 * id, pid, PID and IPC namespaces, library version.  `test_host` (NCCL_DET_TEST_HOST's
 * name for this rank; NULL or "" = none) replaces the host identity: hostname
 * `test_host` and boot id NDET_SETUP_TEST_HOST_BOOT_ID, so that ranks given one name
 * are one host, whatever machine they run on.  The rest is the backend's.
 */
void ndet_setup_payload_identity(struct ndet_setup_payload *payload, const char *test_host);

/*
 * Run the protocol for `count` members in lockstep.  Every member ends with a
 * status and a verdict; ops->release() has been called for every member whose status
 * is not NDET_OK.  Members with an invalid rank/nranks get NDET_ERR_INVALID_ARGUMENT
 * and take no part (a caller bug, not a rank-dependent fact).
 */
void ndet_setup_run(struct ndet_setup_member *members, int count,
		    const struct ndet_setup_member_ops *ops, ndet_setup_allgather_fn allgather,
		    void *allgather_context);

/*
 * One agreement round outside the setup (the barrier before pools are freed):
 * member i (members[i], nranks[i] ranks) contributes words[i]; clean[i] becomes
 * true when every rank of its communicator contributed 0 (a slot without a word of
 * this round, never written or stale, is not clean).  One all-gather call for all
 * members, into gathered[i] (nranks[i] * NDET_SETUP_AGREE_BYTES each, the caller's:
 * taken at setup, so that a rank never misses the barrier its peers wait in for want
 * of memory; up to NDET_SETUP_STACK members allocate nothing else).  Returns that
 * call's status; clean[] is set for every member, false where its exchange failed.
 */
#define NDET_SETUP_AGREE_BYTES 16
#define NDET_SETUP_STACK       16
ndet_status_t ndet_setup_agree(int count, void *const members[], const int nranks[],
			       const int32_t words[], bool clean[], void *const gathered[],
			       ndet_setup_allgather_fn allgather, void *allgather_context);

/*
 * ndet_setup_agree, where clean[i] judges only the words of the ranks among[i][0 ...
 * among_count[i] - 1] (ranks of member i's communicator, each in [0, nranks[i])):
 * the exchange still spans every rank of the communicator (every rank must call
 * it), the verdict only the ranks that matter to member i (the engine's: the ranks
 * of its host, which alone may map its pool).  among NULL, or among[i] NULL: every
 * rank.  A rank outside [0, nranks[i]) is never clean.
 */
ndet_status_t ndet_setup_agree_among(int count, void *const members[], const int nranks[],
				     const int32_t words[], const int *const among[],
				     const int among_count[], bool clean[], void *const gathered[],
				     ndet_setup_allgather_fn allgather, void *allgather_context);

/*
 * Tests: judge setup tables as if every rank had the multi-host capability
 * (ndet_setup_evaluate_rules with true, whatever ndet_setup_table_multi_host says),
 * so that the CUDA engine's multi-host setup can be exercised before its stage kernels
 * exist.  Off by default; process-wide.
 */
/*
 * The staging a communicator across H hosts of g ranks allocates beside a pool of
 * pool_bytes (doc/multihost-design.md, "Memory"): true when NCCL_DET_HOSTS_STAGING is
 * at least what every plan of the layout needs and, with the pool, within
 * NCCL_DET_MAX_MEMORY; otherwise one WARN naming the setting to change.  Agreed
 * settings and the agreed table: every rank answers alike.
 */
bool ndet_setup_staging_fits(const struct ndet_engine_config *config, uint64_t pool_bytes,
			     int hosts, int local_ranks);

void ndet_setup_set_multi_host_for_testing(bool on);
bool ndet_setup_multi_host_for_testing(void);

#ifdef __cplusplus
}
#endif

#endif /* NDET_SETUP_H_ */
