/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The decision for ncclAllReduce, ncclReduceScatter and ncclReduce
 * (src/protocol/ndet_eligibility.c): every datatype x op x communicator state, integer types,
 * PreMulSum ops (known, unknown, made for another datatype), invalid enums and roots,
 * count 0, strict, the same table for all three collectives, and that nothing but the
 * rank-identical facts enters it.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "protocol/ndet_eligibility.h"

#define NCCL_2_28 22809
#define NCCL_2_21 22105

static const ncclDataType_t floating_types[] = {ncclFloat32, ncclFloat16, ncclBfloat16,
						ncclFloat64};
static const ndet_dtype_t floating_dtypes[] = {NDET_DTYPE_F32, NDET_DTYPE_F16, NDET_DTYPE_BF16,
					       NDET_DTYPE_F64};
static const ncclDataType_t integer_types[] = {ncclInt8,   ncclUint8, ncclInt32,
					       ncclUint32, ncclInt64, ncclUint64};
static const ncclRedOp_t builtin_ops[] = {ncclSum, ncclProd, ncclMin, ncclMax, ncclAvg};
static const ndet_op_t builtin_ndet_ops[] = {NDET_OP_SUM, NDET_OP_PROD, NDET_OP_MIN, NDET_OP_MAX,
					     NDET_OP_AVG};

#define COUNT_OF(array) (sizeof(array) / sizeof((array)[0]))

/* The decision, into an output full of garbage (it must set every field). */
static struct ndet_eligibility decide_full(const struct ndet_eligibility_facts *facts)
{
	struct ndet_eligibility decision;
	memset(&decision, 0x5a, sizeof(decision));
	ndet_eligibility_decide(facts, &decision);
	return decision;
}

/* The facts of one call; sm90 and fp8: what setup agreed about the GPUs (fp8 only). */
static struct ndet_eligibility decide_gpu(int datatype, ncclRedOp_t op, size_t count,
					  ndet_comm_state_t state, bool strict, int version,
					  bool sm90, bool fp8)
{
	struct ndet_eligibility_facts facts = {
		.datatype = (ncclDataType_t)datatype,
		.op = op,
		.count = count,
		.state = state,
		.strict = strict,
		.nccl_version = version,
		.sm90 = sm90,
		.fp8 = fp8,
	};
	return decide_full(&facts);
}

static struct ndet_eligibility decide(ncclDataType_t datatype, ncclRedOp_t op, size_t count,
				      ndet_comm_state_t state, bool strict, int version)
{
	return decide_gpu((int)datatype, op, count, state, strict, version, false, false);
}

/* Every supported dtype x op in every state, with and without strict. */
static void test_supported_matrix(void **state)
{
	(void)state;
	for (size_t t = 0; t < COUNT_OF(floating_types); t++) {
		for (size_t o = 0; o < COUNT_OF(builtin_ops); o++) {
			for (int strict = 0; strict < 2; strict++) {
				struct ndet_eligibility d =
					decide(floating_types[t], builtin_ops[o], 1000,
					       NDET_COMM_READY, strict, NCCL_2_28);
				assert_int_equal(d.action, NDET_ACTION_DIVERT);
				assert_int_equal(d.reason, NDET_FALLBACK_NONE);
				assert_true(d.floating);
				assert_int_equal(d.dtype, floating_dtypes[t]);
				assert_int_equal(d.op, builtin_ndet_ops[o]);

				d = decide(floating_types[t], builtin_ops[o], 1000,
					   NDET_COMM_PENDING, strict, NCCL_2_28);
				assert_int_equal(d.action, NDET_ACTION_SETUP);
				d = decide(floating_types[t], builtin_ops[o], 1000,
					   NDET_COMM_POISONED, strict, NCCL_2_28);
				assert_int_equal(d.action, NDET_ACTION_FAIL);
				d = decide(floating_types[t], builtin_ops[o], 1000,
					   NDET_COMM_FALLBACK, strict, NCCL_2_28);
				assert_int_equal(d.action,
						 strict ? NDET_ACTION_REFUSE : NDET_ACTION_FORWARD);
				assert_int_equal(d.reason, NDET_FALLBACK_COMMUNICATOR);
				d = decide(floating_types[t], builtin_ops[o], 1000, NDET_COMM_DEAD,
					   strict, NCCL_2_28);
				assert_int_equal(d.action, NDET_ACTION_FORWARD);
				assert_int_equal(d.reason, NDET_FALLBACK_INACTIVE);
			}
		}
	}
}

/* Integer reductions are exact in any order: always NCCL, never refused. */
static void test_integer_types_fall_back_silently(void **state)
{
	(void)state;
	for (size_t t = 0; t < COUNT_OF(integer_types); t++) {
		for (size_t o = 0; o < COUNT_OF(builtin_ops); o++) {
			for (int s = 0; s < NDET_COMM_DEAD; s++) {
				struct ndet_eligibility d =
					decide(integer_types[t], builtin_ops[o], 7,
					       (ndet_comm_state_t)s, true, NCCL_2_28);
				assert_int_equal(d.action, NDET_ACTION_FORWARD);
				assert_int_equal(d.reason, NDET_FALLBACK_INTEGER);
				assert_false(d.floating);
			}
		}
		/* A PreMulSum op on an integer type: still the silent integer reason. */
		struct ndet_eligibility d = decide(integer_types[t], (ncclRedOp_t)(ncclNumOps + 2),
						   7, NDET_COMM_READY, true, NCCL_2_28);
		assert_int_equal(d.action, NDET_ACTION_FORWARD);
		assert_int_equal(d.reason, NDET_FALLBACK_INTEGER);
	}
}

/* A PreMulSum op this communicator made for `made_for`. */
static struct ndet_eligibility decide_premul(ncclDataType_t datatype, ncclRedOp_t op,
					     ncclDataType_t made_for, bool known,
					     ndet_comm_state_t state, bool strict)
{
	struct ndet_eligibility_facts facts = {.datatype = datatype, .op = op, .count = 64};
	facts.state = state;
	facts.strict = strict;
	facts.nccl_version = NCCL_2_28;
	facts.premul_known = known;
	facts.premul_datatype = made_for;
	return decide_full(&facts);
}

/*
 * PreMulSum ops (>= ncclNumOps) on floats: diverted like sum when the communicator
 * made the op for this datatype; an op it does not know (never made, destroyed) or
 * made for another datatype is NCCL's error to return, in every state, strict or not.
 */
static void test_premulsum_ops(void **state)
{
	(void)state;
	for (size_t t = 0; t < COUNT_OF(floating_types); t++) {
		for (int index = 0; index < 3; index++) {
			ncclRedOp_t op = (ncclRedOp_t)((int)ncclNumOps + index * 17);
			for (int strict = 0; strict < 2; strict++) {
				struct ndet_eligibility d =
					decide_premul(floating_types[t], op, floating_types[t],
						      true, NDET_COMM_READY, strict);
				assert_int_equal(d.action, NDET_ACTION_DIVERT);
				assert_int_equal(d.reason, NDET_FALLBACK_NONE);
				assert_true(d.premul);
				assert_int_equal(d.op, NDET_OP_SUM);
				assert_int_equal(d.dtype, floating_dtypes[t]);
				d = decide_premul(floating_types[t], op, floating_types[t], true,
						  NDET_COMM_PENDING, strict);
				assert_int_equal(d.action, NDET_ACTION_SETUP);
				d = decide_premul(floating_types[t], op, floating_types[t], true,
						  NDET_COMM_POISONED, strict);
				assert_int_equal(d.action, NDET_ACTION_FAIL);
				d = decide_premul(floating_types[t], op, floating_types[t], true,
						  NDET_COMM_FALLBACK, strict);
				assert_int_equal(d.action,
						 strict ? NDET_ACTION_REFUSE : NDET_ACTION_FORWARD);
				assert_int_equal(d.reason, NDET_FALLBACK_COMMUNICATOR);
				for (int s = 0; s < NDET_COMM_STATE_COUNT; s++) {
					d = decide_premul(floating_types[t], op, floating_types[t],
							  false, (ndet_comm_state_t)s, strict);
					assert_int_equal(d.action, NDET_ACTION_FORWARD);
					assert_int_equal(d.reason, s == NDET_COMM_DEAD
									   ? NDET_FALLBACK_INACTIVE
									   : NDET_FALLBACK_INVALID);
					d = decide_premul(
						floating_types[t], op,
						floating_types[(t + 1) % COUNT_OF(floating_types)],
						true, (ndet_comm_state_t)s, strict);
					assert_int_equal(d.action, NDET_ACTION_FORWARD);
					assert_true(d.reason == NDET_FALLBACK_INVALID ||
						    (s == NDET_COMM_DEAD &&
						     d.reason == NDET_FALLBACK_INACTIVE));
					assert_false(d.premul);
				}
			}
		}
	}
	/* A built-in op is never a PreMulSum one, whatever the registry says. */
	struct ndet_eligibility d =
		decide_premul(ncclFloat32, ncclSum, ncclFloat32, true, NDET_COMM_READY, false);
	assert_int_equal(d.action, NDET_ACTION_DIVERT);
	assert_false(d.premul);
}

/*
 * What strict mode might refuse waits for the setup on a communicator that has not
 * run it: the local NCCL_DET_STRICT may differ between ranks, the agreed one cannot.
 * Integer fallbacks never depend on strict mode and go to NCCL at once.
 */
static void test_strict_is_agreed_first(void **state)
{
	(void)state;
	const ncclDataType_t types[] = {ncclFloat32, ncclBfloat16, (ncclDataType_t)10};
	const ncclRedOp_t ops[] = {ncclProd, ncclSum};
	for (size_t t = 0; t < COUNT_OF(types); t++) {
		for (size_t o = 0; o < COUNT_OF(ops); o++) {
			for (int strict = 0; strict < 2; strict++) {
				struct ndet_eligibility d = decide(
					types[t], ops[o], 64, NDET_COMM_PENDING, strict, NCCL_2_28);
				assert_int_equal(d.action, NDET_ACTION_SETUP);
			}
		}
		/* fp8 with a PreMulSum op made for it: a fallback strict mode may refuse. */
		struct ndet_eligibility d = decide_premul(types[t], (ncclRedOp_t)ncclNumOps,
							  types[t], true, NDET_COMM_PENDING, true);
		assert_int_equal(d.action, NDET_ACTION_SETUP);
	}
	struct ndet_eligibility d =
		decide(ncclInt64, (ncclRedOp_t)ncclNumOps, 64, NDET_COMM_PENDING, true, NCCL_2_28);
	assert_int_equal(d.action, NDET_ACTION_FORWARD);
	assert_int_equal(d.reason, NDET_FALLBACK_INTEGER);
}

static struct ndet_eligibility decide_fp8(int datatype, ncclRedOp_t op, ndet_comm_state_t state,
					  bool strict, int version, bool sm90, bool fp8)
{
	return decide_gpu(datatype, op, 8, state, strict, version, sm90, fp8);
}

/*
 * fp8 exists from NCCL 2.24 (before, an invalid enum).  Diverted where every rank's
 * GPU is sm_90+ and runs our fp8 kernels (agreed facts); a GPU below sm_90 is NCCL's
 * ncclInvalidArgument; sm_90+ without our fp8 code is a fallback strict mode refuses.
 */
static void test_fp8(void **state)
{
	(void)state;
	const ndet_dtype_t dtypes[] = {NDET_DTYPE_F8E4M3, NDET_DTYPE_F8E5M2};
	for (int datatype = 10; datatype <= 11; datatype++) {
		for (size_t o = 0; o < COUNT_OF(builtin_ops); o++) {
			for (int strict = 0; strict < 2; strict++) {
				struct ndet_eligibility d =
					decide_fp8(datatype, builtin_ops[o], NDET_COMM_READY,
						   strict, NCCL_2_28, true, true);
				assert_int_equal(d.action, NDET_ACTION_DIVERT);
				assert_int_equal(d.dtype, dtypes[datatype - 10]);
				assert_int_equal(d.op, builtin_ndet_ops[o]);
				assert_true(d.floating);
			}
		}
		struct ndet_eligibility d = decide_fp8(datatype, ncclSum, NDET_COMM_READY, false,
						       NCCL_2_28, true, false);
		assert_int_equal(d.action, NDET_ACTION_FORWARD);
		assert_int_equal(d.reason, NDET_FALLBACK_DATATYPE);
		assert_true(d.floating);
		d = decide_fp8(datatype, ncclSum, NDET_COMM_READY, true, NCCL_2_28, true, false);
		assert_int_equal(d.action, NDET_ACTION_REFUSE);
		assert_int_equal(d.reason, NDET_FALLBACK_DATATYPE);
		/* Below sm_90 NCCL refuses fp8 itself: its error, strict or not. */
		for (int strict = 0; strict < 2; strict++) {
			for (int fp8 = 0; fp8 < 2; fp8++) {
				d = decide_fp8(datatype, ncclMax, NDET_COMM_READY, strict,
					       NCCL_2_28, false, fp8);
				assert_int_equal(d.action, NDET_ACTION_FORWARD);
				assert_int_equal(d.reason, NDET_FALLBACK_INVALID);
			}
		}
		/* Not set up yet: the agreed facts come from the setup. */
		d = decide_fp8(datatype, ncclSum, NDET_COMM_PENDING, false, NCCL_2_28, false,
			       false);
		assert_int_equal(d.action, NDET_ACTION_SETUP);
		d = decide_fp8(datatype, ncclSum, NDET_COMM_FALLBACK, false, NCCL_2_28, true, true);
		assert_int_equal(d.action, NDET_ACTION_FORWARD);
		assert_int_equal(d.reason, NDET_FALLBACK_COMMUNICATOR);
		d = decide_fp8(datatype, ncclSum, NDET_COMM_POISONED, false, NCCL_2_28, true, true);
		assert_int_equal(d.action, NDET_ACTION_FAIL);
		d = decide_fp8(datatype, ncclSum, NDET_COMM_READY, true, NCCL_2_21, true, true);
		assert_int_equal(d.action, NDET_ACTION_FORWARD);
		assert_int_equal(d.reason, NDET_FALLBACK_INVALID);
		/* Unknown runtime version: NCCL has the last word. */
		d = decide_fp8(datatype, ncclSum, NDET_COMM_READY, false, 0, true, true);
		assert_int_equal(d.action, NDET_ACTION_DIVERT);
	}
	/* The fp8 facts change no other datatype's decision. */
	for (size_t t = 0; t < COUNT_OF(floating_types); t++) {
		for (int facts = 0; facts < 4; facts++) {
			struct ndet_eligibility d =
				decide_fp8((int)floating_types[t], ncclSum, NDET_COMM_READY, false,
					   NCCL_2_28, facts & 1, facts & 2);
			assert_int_equal(d.action, NDET_ACTION_DIVERT);
		}
	}
}

/* What NCCL rejects goes to NCCL for its own code, strict or not, in every state. */
static void test_invalid_arguments_forwarded(void **state)
{
	(void)state;
	const int bad_types[] = {-1, 12, 13, 1000, (int)0x80000000};
	for (size_t i = 0; i < COUNT_OF(bad_types); i++) {
		for (int s = 0; s < NDET_COMM_STATE_COUNT; s++) {
			struct ndet_eligibility d = decide((ncclDataType_t)bad_types[i], ncclSum, 8,
							   (ndet_comm_state_t)s, true, NCCL_2_28);
			assert_int_equal(d.action, NDET_ACTION_FORWARD);
			assert_int_equal(d.reason, NDET_FALLBACK_INVALID);
		}
	}
	for (int s = 0; s < NDET_COMM_STATE_COUNT; s++) {
		struct ndet_eligibility d = decide(ncclFloat32, (ncclRedOp_t)-1, 8,
						   (ndet_comm_state_t)s, true, NCCL_2_28);
		assert_int_equal(d.action, NDET_ACTION_FORWARD);
		assert_int_equal(d.reason, NDET_FALLBACK_INVALID);
	}
}

/*
 * Buffers NCCL's pointer check refuses (its check mode only): NCCL answers, for any
 * datatype, op, count and state, before a setup could run.
 */
static void test_invalid_pointers_forwarded(void **state)
{
	(void)state;
	const ncclDataType_t types[] = {ncclFloat32, ncclBfloat16, ncclInt32, (ncclDataType_t)10};
	const ncclRedOp_t ops[] = {ncclSum, ncclAvg, (ncclRedOp_t)ncclNumOps};
	for (size_t t = 0; t < COUNT_OF(types); t++) {
		for (size_t o = 0; o < COUNT_OF(ops); o++) {
			for (int s = 0; s < NDET_COMM_STATE_COUNT; s++) {
				struct ndet_eligibility_facts facts = {
					.datatype = types[t],
					.op = ops[o],
					.count = (size_t)s,
					.state = (ndet_comm_state_t)s,
					.strict = s % 2 == 0,
					.nccl_version = NCCL_2_28,
					.invalid_pointers = true,
				};
				struct ndet_eligibility d;
				ndet_eligibility_decide(&facts, &d);
				assert_int_equal(d.action, NDET_ACTION_FORWARD);
				assert_int_equal(d.reason, NDET_FALLBACK_INVALID);
			}
		}
	}
}

/* count does not enter the decision: 0 and huge counts divert like any other. */
static void test_count_is_not_a_reason(void **state)
{
	(void)state;
	const size_t counts[] = {0, 1, 3, 1000, (size_t)1 << 40, SIZE_MAX};
	for (size_t i = 0; i < COUNT_OF(counts); i++) {
		struct ndet_eligibility d =
			decide(ncclBfloat16, ncclAvg, counts[i], NDET_COMM_READY, false, NCCL_2_28);
		assert_int_equal(d.action, NDET_ACTION_DIVERT);
		d = decide(ncclInt32, ncclSum, counts[i], NDET_COMM_READY, false, NCCL_2_28);
		assert_int_equal(d.action, NDET_ACTION_FORWARD);
	}
}

/*
 * The decision is a function of its facts only: the same facts give the same
 * decision whatever garbage the output held before.
 */
static void test_pure(void **state)
{
	(void)state;
	struct ndet_eligibility_facts facts = {
		.datatype = ncclFloat16, .op = ncclMax, .count = 5, .state = NDET_COMM_READY};
	struct ndet_eligibility first, second;
	memset(&first, 0x00, sizeof(first));
	memset(&second, 0xff, sizeof(second));
	ndet_eligibility_decide(&facts, &first);
	ndet_eligibility_decide(&facts, &second);
	assert_int_equal(first.action, second.action);
	assert_int_equal(first.reason, second.reason);
	assert_int_equal(first.dtype, second.dtype);
	assert_int_equal(first.op, second.op);
	assert_int_equal(first.floating, second.floating);
}

static bool same_decision(const struct ndet_eligibility *a, const struct ndet_eligibility *b)
{
	if (a->action != b->action || a->reason != b->reason || a->floating != b->floating)
		return false;
	if (a->action != NDET_ACTION_DIVERT && a->action != NDET_ACTION_SETUP)
		return true;
	return a->dtype == b->dtype && a->op == b->op && a->premul == b->premul;
}

/*
 * ncclReduceScatter and ncclReduce (with a valid root) get exactly the all-reduce's
 * decision, for every datatype (float, integer, fp8, invalid), op (built-in,
 * PreMulSum known, unknown and mistyped, invalid), state, strict and pointer verdict.
 */
static void test_collectives_share_the_table(void **state)
{
	(void)state;
	const int datatypes[] = {ncclFloat32, ncclFloat16, ncclBfloat16, ncclFloat64, ncclInt8,
				 ncclUint32,  ncclInt64,   10,           11,          12,
				 -1};
	const int ops[] = {ncclSum, ncclProd,   ncclMin,        ncclMax,
			   ncclAvg, ncclNumOps, ncclNumOps + 9, -1};
	int decisions = 0, diverted = 0;
	for (size_t t = 0; t < COUNT_OF(datatypes); t++) {
		for (size_t o = 0; o < COUNT_OF(ops); o++) {
			for (int premul = 0; premul < 3; premul++) {
				for (int s = 0; s < NDET_COMM_STATE_COUNT; s++) {
					for (int flags = 0; flags < 16; flags++) {
						struct ndet_eligibility_facts facts = {
							.coll = NDET_COLL_ALLREDUCE,
							.datatype = (ncclDataType_t)datatypes[t],
							.op = (ncclRedOp_t)ops[o],
							.count = 77,
							.state = (ndet_comm_state_t)s,
							.strict = (flags & 1) != 0,
							.invalid_pointers = (flags & 2) != 0,
							.sm90 = (flags & 4) != 0,
							.fp8 = (flags & 8) != 0,
							.nccl_version = NCCL_2_28,
							.nranks = s == NDET_COMM_PENDING ? -1 : 4,
							/* 0: unknown, 1: made for this type, 2:
							   another */
							.premul_known = premul != 0,
							.premul_datatype =
								premul == 1 ? (ncclDataType_t)
										      datatypes[t]
									    : ncclFloat64,
						};
						struct ndet_eligibility all = decide_full(&facts);
						facts.coll = NDET_COLL_REDUCE_SCATTER;
						struct ndet_eligibility scatter =
							decide_full(&facts);
						facts.coll = NDET_COLL_REDUCE;
						facts.root = 3;
						struct ndet_eligibility reduce =
							decide_full(&facts);
						assert_true(same_decision(&all, &scatter));
						assert_true(same_decision(&all, &reduce));
						decisions++;
						diverted += all.action == NDET_ACTION_DIVERT;
					}
				}
			}
		}
	}
	/*
	 * The table holds diverted calls of both kinds: 4 types x (5 ops + known PreMulSum x
	 * 2 values) x 2 strict, and for f64 also the PreMulSum ops "made for another" f64,
	 * whatever the fp8 facts (4 values); the 2 fp8 types the same way, only where both
	 * fp8 facts hold.
	 */
	assert_int_equal(diverted, 4 * (4 * (5 * 3 + 2) * 2 + 2 * 2) + 2 * (5 * 3 + 2) * 2);
	assert_true(decisions > 1000);
}

/* ncclReduce's root: outside [0, nranks) is NCCL's error; unknown size: set up first. */
static void test_reduce_root(void **state)
{
	(void)state;
	const struct {
		int root, nranks;
		ndet_comm_state_t comm;
		ndet_action_t action;
		ndet_fallback_reason_t reason;
	} cases[] = {
		{0, 4, NDET_COMM_READY, NDET_ACTION_DIVERT, NDET_FALLBACK_NONE},
		{3, 4, NDET_COMM_READY, NDET_ACTION_DIVERT, NDET_FALLBACK_NONE},
		{4, 4, NDET_COMM_READY, NDET_ACTION_FORWARD, NDET_FALLBACK_INVALID},
		{-1, 4, NDET_COMM_READY, NDET_ACTION_FORWARD, NDET_FALLBACK_INVALID},
		{-1, -1, NDET_COMM_PENDING, NDET_ACTION_FORWARD, NDET_FALLBACK_INVALID},
		{7, -1, NDET_COMM_PENDING, NDET_ACTION_SETUP, NDET_FALLBACK_NONE},
		{7, 4, NDET_COMM_FALLBACK, NDET_ACTION_FORWARD, NDET_FALLBACK_INVALID},
		{2, 4, NDET_COMM_POISONED, NDET_ACTION_FAIL, NDET_FALLBACK_NONE},
		{9, 4, NDET_COMM_DEAD, NDET_ACTION_FORWARD, NDET_FALLBACK_INVALID},
	};
	for (size_t c = 0; c < COUNT_OF(cases); c++) {
		for (int strict = 0; strict < 2; strict++) {
			struct ndet_eligibility_facts facts = {
				.coll = NDET_COLL_REDUCE,
				.datatype = ncclBfloat16,
				.op = ncclMax,
				.count = 5,
				.root = cases[c].root,
				.nranks = cases[c].nranks,
				.state = cases[c].comm,
				.strict = strict != 0,
				.nccl_version = NCCL_2_28,
			};
			struct ndet_eligibility d = decide_full(&facts);
			assert_int_equal(d.action, cases[c].action);
			assert_int_equal(d.reason, cases[c].reason);
			/* The other collectives have no root. */
			facts.coll = NDET_COLL_REDUCE_SCATTER;
			d = decide_full(&facts);
			assert_int_not_equal(d.reason, NDET_FALLBACK_INVALID);
		}
	}
	/* A collective nccl-det does not know is not diverted. */
	struct ndet_eligibility_facts facts = {.coll = NDET_COLL_COUNT,
					       .datatype = ncclFloat32,
					       .op = ncclSum,
					       .state = NDET_COMM_READY};
	struct ndet_eligibility d = decide_full(&facts);
	assert_int_equal(d.action, NDET_ACTION_FORWARD);
	assert_int_equal(d.reason, NDET_FALLBACK_INVALID);
}

static void test_names(void **state)
{
	(void)state;
	for (int r = 0; r < NDET_FALLBACK_COUNT; r++)
		assert_string_not_equal(ndet_fallback_reason_name((ndet_fallback_reason_t)r),
					"unknown reason");
	assert_string_equal(ndet_fallback_reason_name(NDET_FALLBACK_COUNT), "unknown reason");
	for (int s = 0; s < NDET_COMM_STATE_COUNT; s++)
		assert_string_not_equal(ndet_comm_state_name((ndet_comm_state_t)s),
					"unknown state");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_supported_matrix),
		cmocka_unit_test(test_integer_types_fall_back_silently),
		cmocka_unit_test(test_premulsum_ops),
		cmocka_unit_test(test_fp8),
		cmocka_unit_test(test_strict_is_agreed_first),
		cmocka_unit_test(test_invalid_arguments_forwarded),
		cmocka_unit_test(test_invalid_pointers_forwarded),
		cmocka_unit_test(test_count_is_not_a_reason),
		cmocka_unit_test(test_pure),
		cmocka_unit_test(test_collectives_share_the_table),
		cmocka_unit_test(test_reduce_root),
		cmocka_unit_test(test_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
