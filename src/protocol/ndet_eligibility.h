/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Is one ncclAllReduce, ncclReduceScatter or ncclReduce diverted?  The same rules
 * for all three.  A pure function of facts that are equal on every rank of the
 * communicator (doc/design.md, "What is diverted"): collective, datatype, op, root, the
 * communicator's agreed state and agreed settings.  Never pointers, alignment,
 * stream, capture state or a local allocation result: ranks that decide differently
 * hang (some wait in our kernels, the others in NCCL).
 *
 * Supported: ncclFloat32, ncclFloat16, ncclBfloat16, ncclFloat64 and, where every
 * rank's GPU runs our fp8 kernels (agreed at setup), ncclFloat8e4m3 and ncclFloat8e5m2
 * (NCCL >= 2.24), with ncclSum,
 * ncclProd, ncclMin, ncclMax, ncclAvg, and PreMulSum ops (ncclRedOpCreatePreMulSum,
 * op >= ncclNumOps) that this communicator made through nccl-det for the call's
 * datatype; any count (0 is a consistent no-op).  Integer types go to NCCL silently
 * (integer reductions are exact in any order).  fp8 on a communicator with a GPU
 * below sm_90 goes to NCCL, which refuses it (ncclInvalidArgument); where every GPU
 * is sm_90 or newer but one cannot run this build's fp8 kernels, fp8 goes to NCCL with
 * a WARN: the user asked for determinism and does not get it.  Arguments NCCL
 * would reject (datatype or op outside their enums, a PreMulSum op it does not know
 * or made for another datatype, a root outside the communicator; in NCCL's
 * pointer-check mode, buffers its check refuses) go to NCCL unchanged so that it
 * returns its own error code.  NCCL_DET_STRICT=1 turns every floating-point fallback
 * into ncclInvalidUsage.
 *
 * Strict mode is a fact only once agreed (the setup ANDs every rank's flag): a
 * floating-point call that strict mode might refuse, on a communicator not set up
 * yet, sets it up first.  Deciding from the local NCCL_DET_STRICT would split ranks
 * whose values differ: one refusing, the others waiting in NCCL.
 */
#ifndef NDET_ELIGIBILITY_H_
#define NDET_ELIGIBILITY_H_

#include <stdbool.h>
#include <stddef.h>

#include <nccl.h>

#include "common/ndet_dtype.h"
#include "kernels/ndet_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where a communicator stands (ndet_comm.h keeps it). */
typedef enum {
	NDET_COMM_PENDING = 0, /* setup not run yet (non-blocking, or init in a group) */
	NDET_COMM_READY,       /* engine ready: eligible calls are diverted */
	NDET_COMM_FALLBACK,    /* the ranks agreed not to divert (verdict) */
	NDET_COMM_POISONED,    /* our engine failed (timeout, divergence, peer): calls fail */
	NDET_COMM_DEAD,        /* aborted, revoked or finalized: NCCL answers every call */
	NDET_COMM_STATE_COUNT
} ndet_comm_state_t;

/* Why a call was not diverted (counted per communicator, one WARN per reason). */
typedef enum {
	NDET_FALLBACK_NONE = 0,
	NDET_FALLBACK_INTEGER,      /* integer datatype: exact anyway, silent */
	NDET_FALLBACK_DATATYPE,     /* fp8 without our fp8 kernels on every rank's GPU */
	NDET_FALLBACK_OP,           /* an op nccl-det lacks (none since PreMulSum is diverted) */
	NDET_FALLBACK_COMMUNICATOR, /* the communicator's setup verdict */
	NDET_FALLBACK_INVALID,      /* arguments NCCL rejects: forwarded for its code */
	NDET_FALLBACK_INACTIVE,     /* communicator aborted, revoked or finalized */
	NDET_FALLBACK_COUNT
} ndet_fallback_reason_t;

typedef enum {
	NDET_ACTION_DIVERT = 0, /* run through the engine */
	NDET_ACTION_SETUP,      /* set the communicator up first, then decide again */
	NDET_ACTION_FORWARD,    /* to the real NCCL (reason says why) */
	NDET_ACTION_REFUSE,     /* strict mode: ncclInvalidUsage */
	NDET_ACTION_FAIL,       /* poisoned communicator: ncclRemoteError at once */
} ndet_action_t;

struct ndet_eligibility_facts {
	ndet_coll_t coll; /* 0: ncclAllReduce */
	ncclDataType_t datatype;
	ncclRedOp_t op;
	size_t count;
	int root;   /* ncclReduce */
	int nranks; /* the communicator's size; < 1 while unknown (PENDING) */
	/*
	 * op >= ncclNumOps: is it a live PreMulSum op of this communicator (made through
	 * nccl-det, as NCCL made it on every rank), and for which datatype?
	 */
	bool premul_known;
	ncclDataType_t premul_datatype;
	ndet_comm_state_t state;
	bool strict;      /* agreed NCCL_DET_STRICT; not consulted while PENDING */
	bool sm90;        /* agreed: every rank's GPU is sm_90+ (READY only) */
	bool fp8;         /* agreed: every rank runs our fp8 kernels (READY only) */
	int nccl_version; /* runtime pncclGetVersion: which enum values exist */
	/*
	 * NCCL's pointer-check mode is on and a buffer fails its check: NCCL returns
	 * ncclInvalidArgument without communicating, on this rank, as it would
	 * without nccl-det.  Always false with the checks off.
	 */
	bool invalid_pointers;
};

struct ndet_eligibility {
	ndet_action_t action;
	ndet_fallback_reason_t reason; /* FORWARD and REFUSE; NONE otherwise */
	bool floating;                 /* a floating-point reduction */
	ndet_dtype_t dtype;            /* DIVERT and SETUP */
	ndet_op_t op;                  /* NDET_OP_SUM for PreMulSum */
	bool premul;                   /* a PreMulSum op (DIVERT and SETUP) */
};

/* The decision for one call. */
void ndet_eligibility_decide(const struct ndet_eligibility_facts *facts,
			     struct ndet_eligibility *decision);

/* Names for logs and stats. */
const char *ndet_fallback_reason_name(ndet_fallback_reason_t reason);
const char *ndet_comm_state_name(ndet_comm_state_t state);

#ifdef __cplusplus
}
#endif

#endif /* NDET_ELIGIBILITY_H_ */
