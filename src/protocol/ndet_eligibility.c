/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The decision for one reduction (see ndet_eligibility.h).  Pure: no logging, no
 * NCCL or CUDA call, no clock, no pointer.
 */
#include "config.h"

#include "protocol/ndet_eligibility.h"

/* Older runtimes than NCCL_FP8_VERSION have 10 types (ndet_eligibility.h). */
#define NDET_NCCL_TYPES_NO_FP8 10
#define NDET_NCCL_TYPES_FP8    12
#define NDET_NCCL_FP8_VERSION  22400

static int ndet_eligibility_type_count(int nccl_version)
{
	/* Unknown version: accept what the newest releases accept; NCCL has the last word. */
	if (nccl_version == 0 || nccl_version >= NDET_NCCL_FP8_VERSION)
		return NDET_NCCL_TYPES_FP8;
	return NDET_NCCL_TYPES_NO_FP8;
}

/* NDET_FALLBACK_NONE and *dtype for a supported type, else why not. */
static ndet_fallback_reason_t ndet_eligibility_datatype(int datatype, ndet_dtype_t *dtype,
							bool *floating)
{
	*floating = ndet_dtype_from_nccl((ncclDataType_t)datatype, dtype);
	return *floating ? NDET_FALLBACK_NONE : NDET_FALLBACK_INTEGER;
}

static ndet_fallback_reason_t ndet_eligibility_op(const struct ndet_eligibility_facts *facts,
						  struct ndet_eligibility *decision)
{
	if (ndet_op_from_nccl(facts->op, &decision->op))
		return NDET_FALLBACK_NONE;
	/*
	 * Values from ncclNumOps up are ncclRedOpCreatePreMulSum's, typed and per
	 * communicator: one NCCL does not know (never made, destroyed) or made for another
	 * datatype is NCCL's error to return.
	 */
	if (!facts->premul_known || facts->premul_datatype != facts->datatype)
		return NDET_FALLBACK_INVALID;
	decision->op = NDET_OP_SUM;
	decision->premul = true;
	return NDET_FALLBACK_NONE;
}

static void ndet_eligibility_set(struct ndet_eligibility *decision, ndet_action_t action,
				 ndet_fallback_reason_t reason)
{
	decision->action = action;
	decision->reason = reason;
}

void ndet_eligibility_decide(const struct ndet_eligibility_facts *facts,
			     struct ndet_eligibility *decision)
{
	const int datatype = (int)facts->datatype;
	const int op = (int)facts->op;

	decision->floating = false;
	decision->dtype = NDET_DTYPE_F32;
	decision->op = NDET_OP_SUM;
	decision->premul = false;
	/* A root NCCL refuses; its size is known once the communicator is set up. */
	const bool bad_root =
		facts->coll == NDET_COLL_REDUCE &&
		(facts->root < 0 || (facts->nranks >= 1 && facts->root >= facts->nranks));
	if (datatype < 0 || datatype >= ndet_eligibility_type_count(facts->nccl_version) ||
	    op < 0 || facts->invalid_pointers || bad_root ||
	    (unsigned)facts->coll >= NDET_COLL_COUNT) {
		ndet_eligibility_set(decision, NDET_ACTION_FORWARD, NDET_FALLBACK_INVALID);
		return;
	}
	if (facts->state == NDET_COMM_DEAD) {
		ndet_eligibility_set(decision, NDET_ACTION_FORWARD, NDET_FALLBACK_INACTIVE);
		return;
	}
	ndet_fallback_reason_t reason =
		ndet_eligibility_datatype(datatype, &decision->dtype, &decision->floating);
	if (reason == NDET_FALLBACK_NONE)
		reason = ndet_eligibility_op(facts, decision);
	if (reason == NDET_FALLBACK_INVALID) {
		/* NCCL's error to return, on every rank and whatever strict mode says. */
		ndet_eligibility_set(decision, NDET_ACTION_FORWARD, reason);
		return;
	}
	if (reason != NDET_FALLBACK_NONE) {
		/*
		 * Strict mode may refuse it, and only the agreed value may say so: set
		 * the communicator up first (every rank sees the same state).
		 */
		if (decision->floating && facts->state == NDET_COMM_PENDING) {
			ndet_eligibility_set(decision, NDET_ACTION_SETUP, NDET_FALLBACK_NONE);
			return;
		}
		/* Whatever the communicator's state: NCCL runs what we cannot. */
		bool refuse = decision->floating && facts->strict;
		ndet_eligibility_set(decision, refuse ? NDET_ACTION_REFUSE : NDET_ACTION_FORWARD,
				     reason);
		return;
	}
	const bool fp8 =
		decision->dtype == NDET_DTYPE_F8E4M3 || decision->dtype == NDET_DTYPE_F8E5M2;
	switch (facts->state) {
	case NDET_COMM_READY:
		if (fp8 && !facts->sm90) {
			/* NCCL reduces fp8 on sm_90+ only: its ncclInvalidArgument to return. */
			ndet_eligibility_set(decision, NDET_ACTION_FORWARD, NDET_FALLBACK_INVALID);
		} else if (fp8 && !facts->fp8) {
			ndet_eligibility_set(
				decision, facts->strict ? NDET_ACTION_REFUSE : NDET_ACTION_FORWARD,
				NDET_FALLBACK_DATATYPE);
		} else {
			ndet_eligibility_set(decision, NDET_ACTION_DIVERT, NDET_FALLBACK_NONE);
		}
		return;
	case NDET_COMM_PENDING:
		ndet_eligibility_set(decision, NDET_ACTION_SETUP, NDET_FALLBACK_NONE);
		return;
	case NDET_COMM_POISONED:
		ndet_eligibility_set(decision, NDET_ACTION_FAIL, NDET_FALLBACK_NONE);
		return;
	case NDET_COMM_FALLBACK:
	default:
		ndet_eligibility_set(decision,
				     facts->strict ? NDET_ACTION_REFUSE : NDET_ACTION_FORWARD,
				     NDET_FALLBACK_COMMUNICATOR);
		return;
	}
}

const char *ndet_fallback_reason_name(ndet_fallback_reason_t reason)
{
	static const char *const names[NDET_FALLBACK_COUNT] = {
		[NDET_FALLBACK_NONE] = "none",
		[NDET_FALLBACK_INTEGER] = "integer datatype",
		[NDET_FALLBACK_DATATYPE] = "unsupported datatype",
		[NDET_FALLBACK_OP] = "unsupported op",
		[NDET_FALLBACK_COMMUNICATOR] = "communicator not diverted",
		[NDET_FALLBACK_INVALID] = "invalid arguments",
		[NDET_FALLBACK_INACTIVE] = "communicator aborted, revoked or finalized",
	};
	if ((unsigned)reason >= NDET_FALLBACK_COUNT)
		return "unknown reason";
	return names[reason];
}

const char *ndet_comm_state_name(ndet_comm_state_t state)
{
	static const char *const names[NDET_COMM_STATE_COUNT] = {
		[NDET_COMM_PENDING] = "setup pending", [NDET_COMM_READY] = "diverted",
		[NDET_COMM_FALLBACK] = "not diverted", [NDET_COMM_POISONED] = "poisoned",
		[NDET_COMM_DEAD] = "inactive",
	};
	if ((unsigned)state >= NDET_COMM_STATE_COUNT)
		return "unknown state";
	return names[state];
}
