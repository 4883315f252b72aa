/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The all-reduce decision (src/ndet_eligibility.c): every datatype x op x
 * communicator state, integer types, PreMulSum ops, invalid enums, count 0, strict,
 * and that nothing but the rank-identical facts enters it.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ndet_eligibility.h"

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

static struct ndet_eligibility decide(ncclDataType_t datatype, ncclRedOp_t op, size_t count,
				      ndet_comm_state_t state, bool strict, int version)
{
	struct ndet_eligibility_facts facts = {
		.datatype = datatype,
		.op = op,
		.count = count,
		.state = state,
		.strict = strict,
		.nccl_version = version,
	};
	struct ndet_eligibility decision;
	memset(&decision, 0x5a, sizeof(decision));
	ndet_eligibility_decide(&facts, &decision);
	return decision;
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

/* PreMulSum ops (>= ncclNumOps) on floats: NCCL with a reason, refused in strict mode. */
static void test_premulsum_ops(void **state)
{
	(void)state;
	for (size_t t = 0; t < COUNT_OF(floating_types); t++) {
		for (int index = 0; index < 3; index++) {
			ncclRedOp_t op = (ncclRedOp_t)((int)ncclNumOps + index * 17);
			for (int s = 0; s < NDET_COMM_DEAD; s++) {
				if (s == NDET_COMM_PENDING)
					continue; /* test_strict_is_agreed_first */
				struct ndet_eligibility d =
					decide(floating_types[t], op, 64, (ndet_comm_state_t)s,
					       false, NCCL_2_28);
				assert_int_equal(d.action, NDET_ACTION_FORWARD);
				assert_int_equal(d.reason, NDET_FALLBACK_OP);
				assert_true(d.floating);
				d = decide(floating_types[t], op, 64, (ndet_comm_state_t)s, true,
					   NCCL_2_28);
				assert_int_equal(d.action, NDET_ACTION_REFUSE);
				assert_int_equal(d.reason, NDET_FALLBACK_OP);
			}
		}
	}
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
	const ncclRedOp_t ops[] = {(ncclRedOp_t)ncclNumOps, ncclSum};
	for (size_t t = 0; t < COUNT_OF(types); t++) {
		for (size_t o = 0; o < COUNT_OF(ops); o++) {
			for (int strict = 0; strict < 2; strict++) {
				struct ndet_eligibility d = decide(
					types[t], ops[o], 64, NDET_COMM_PENDING, strict, NCCL_2_28);
				assert_int_equal(d.action, NDET_ACTION_SETUP);
			}
		}
	}
	struct ndet_eligibility d =
		decide(ncclInt64, (ncclRedOp_t)ncclNumOps, 64, NDET_COMM_PENDING, true, NCCL_2_28);
	assert_int_equal(d.action, NDET_ACTION_FORWARD);
	assert_int_equal(d.reason, NDET_FALLBACK_INTEGER);
}

/* fp8 exists from NCCL 2.24: a floating type nccl-det lacks; before, an invalid enum. */
static void test_fp8(void **state)
{
	(void)state;
	for (int datatype = 10; datatype <= 11; datatype++) {
		struct ndet_eligibility d = decide((ncclDataType_t)datatype, ncclSum, 8,
						   NDET_COMM_READY, false, NCCL_2_28);
		assert_int_equal(d.action, NDET_ACTION_FORWARD);
		assert_int_equal(d.reason, NDET_FALLBACK_DATATYPE);
		assert_true(d.floating);
		d = decide((ncclDataType_t)datatype, ncclSum, 8, NDET_COMM_READY, true, NCCL_2_28);
		assert_int_equal(d.action, NDET_ACTION_REFUSE);
		d = decide((ncclDataType_t)datatype, ncclSum, 8, NDET_COMM_READY, true, NCCL_2_21);
		assert_int_equal(d.action, NDET_ACTION_FORWARD);
		assert_int_equal(d.reason, NDET_FALLBACK_INVALID);
		/* Unknown runtime version: NCCL has the last word, nothing is refused. */
		d = decide((ncclDataType_t)datatype, ncclSum, 8, NDET_COMM_READY, false, 0);
		assert_int_equal(d.reason, NDET_FALLBACK_DATATYPE);
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
		cmocka_unit_test(test_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
