/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Fuzz target: the reduction decision (src/protocol/ndet_eligibility.c).  Each input is a
 * set of facts (collective, raw datatype and op values, count, root, size, state,
 * strict, NCCL version, pointer verdict, PreMulSum registry).  The decision must be
 * total and pure (the same facts, the same decision, whatever the output held
 * before), never depend on the count, be the all-reduce's for a reduce-scatter and a
 * reduce with a valid root, and keep the rules every rank relies on: divert only a
 * supported float reduction on a READY communicator; what NCCL rejects goes to NCCL;
 * strict mode refuses only a floating-point fallback on a communicator that agreed
 * on it; a pending communicator is set up before anything strict mode might refuse.
 *
 * `make check` runs the plain driver (fuzz_driver.c); test/fuzz/libfuzzer.sh runs libFuzzer.
 */
#include "config.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "test/fuzz/fuzz_driver.h"
#include "protocol/ndet_eligibility.h"

const char fuzz_name[] = "fuzz_eligibility";

#define FUZZ_FACT_BYTES 21

/* NCCL releases the decision distinguishes (fp8 from 2.24), and garbage. */
static const int fuzz_versions[] = {0, 22105, 22300, 22400, 22809, 22903, -1, 99999};

static uint32_t fuzz_u32(const uint8_t *bytes)
{
	return (uint32_t)bytes[0] | (uint32_t)bytes[1] << 8 | (uint32_t)bytes[2] << 16 |
	       (uint32_t)bytes[3] << 24;
}

static void fuzz_facts(const uint8_t *bytes, struct ndet_eligibility_facts *facts)
{
	memset(facts, 0, sizeof(*facts));
	/* Small values most of the time, raw 32-bit values (negative, huge) sometimes. */
	uint32_t datatype = fuzz_u32(bytes), op = fuzz_u32(bytes + 4);
	facts->datatype = (ncclDataType_t)(int32_t)(bytes[16] & 1 ? datatype : datatype % 14);
	facts->op = (ncclRedOp_t)(int32_t)(bytes[16] & 2 ? op : op % 12);
	facts->count = (size_t)fuzz_u32(bytes + 8) << (bytes[12] % 40);
	facts->state = (ndet_comm_state_t)(bytes[13] % NDET_COMM_STATE_COUNT);
	facts->strict = (bytes[14] & 1) != 0;
	facts->invalid_pointers = (bytes[14] & 2) != 0;
	facts->sm90 = (bytes[14] & 4) != 0;
	facts->fp8 = (bytes[14] & 8) != 0;
	facts->nccl_version =
		fuzz_versions[bytes[15] % (sizeof(fuzz_versions) / sizeof(fuzz_versions[0]))];
	/* Collective (out of range sometimes), root (negative sometimes), size, registry. */
	facts->coll = (ndet_coll_t)(bytes[18] % (NDET_COLL_COUNT + 1));
	facts->root = (int)(int8_t)bytes[19];
	facts->nranks = (int)(bytes[20] % 18) - 1;
	facts->premul_known = (bytes[17] & 1) != 0;
	facts->premul_datatype =
		(bytes[17] & 2) != 0 ? facts->datatype : (ncclDataType_t)(bytes[17] >> 2);
}

static struct ndet_eligibility fuzz_decide(const struct ndet_eligibility_facts *facts,
					   uint8_t garbage)
{
	struct ndet_eligibility decision;
	memset(&decision, garbage, sizeof(decision));
	ndet_eligibility_decide(facts, &decision);
	return decision;
}

static bool fuzz_same(const struct ndet_eligibility *a, const struct ndet_eligibility *b)
{
	if (a->action != b->action || a->reason != b->reason || a->floating != b->floating)
		return false;
	/* dtype and op mean something only for DIVERT and SETUP. */
	if (a->action == NDET_ACTION_DIVERT || a->action == NDET_ACTION_SETUP)
		return a->dtype == b->dtype && a->op == b->op && a->premul == b->premul;
	return true;
}

/*
 * A floating-point type nccl-det reduces (fp8, 10 and 11, where the NCCL release has
 * it), with a built-in op or a PreMulSum op the communicator made for this datatype.
 * fp8_facts: fp8 only where every GPU is sm_90+ and runs our fp8 kernels (what a
 * READY communicator also needs; a poisoned one fails every such call).
 */
static bool fuzz_supported_float(const struct ndet_eligibility_facts *facts, bool fp8_facts)
{
	const int datatype = (int)facts->datatype, op = (int)facts->op;
	const bool premul = op >= (int)ncclNumOps && facts->premul_known &&
			    facts->premul_datatype == facts->datatype;
	const bool fp8 = (datatype == 10 || datatype == 11) &&
			 (facts->nccl_version == 0 || facts->nccl_version >= 22400) &&
			 (!fp8_facts || (facts->sm90 && facts->fp8));
	return (datatype == ncclFloat32 || datatype == ncclFloat16 || datatype == ncclBfloat16 ||
		datatype == ncclFloat64 || fp8) &&
	       ((op >= ncclSum && op <= ncclAvg) || premul);
}

/* A valid call of its collective (what NCCL's own checks pass). */
static bool fuzz_valid_collective(const struct ndet_eligibility_facts *facts)
{
	if ((unsigned)facts->coll >= NDET_COLL_COUNT)
		return false;
	return facts->coll != NDET_COLL_REDUCE ||
	       (facts->root >= 0 && (facts->nranks < 1 || facts->root < facts->nranks));
}

static void fuzz_check(const struct ndet_eligibility_facts *facts)
{
	struct ndet_eligibility decision = fuzz_decide(facts, 0x00);
	struct ndet_eligibility again = fuzz_decide(facts, 0xa5);
	if (!fuzz_same(&decision, &again))
		fuzz_fail("impure", "the output's old bytes changed the decision");
	if ((unsigned)decision.action > NDET_ACTION_FAIL ||
	    (unsigned)decision.reason >= NDET_FALLBACK_COUNT)
		fuzz_fail("out of range", "action or reason");

	/* The count never decides. */
	struct ndet_eligibility_facts other = *facts;
	const size_t counts[] = {0, 1, SIZE_MAX};
	for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
		other.count = counts[i];
		struct ndet_eligibility with_count = fuzz_decide(&other, 0x5a);
		if (!fuzz_same(&decision, &with_count))
			fuzz_fail("count", "changed the decision");
	}

	/* The same table for every collective: a valid reduce-scatter or reduce is decided
	 * as the all-reduce of the same facts; an invalid one goes to NCCL. */
	other = *facts;
	other.coll = NDET_COLL_ALLREDUCE;
	struct ndet_eligibility as_allreduce = fuzz_decide(&other, 0x33);
	if (fuzz_valid_collective(facts) && !fuzz_same(&decision, &as_allreduce))
		fuzz_fail("collective", "decided unlike the all-reduce");
	if (!fuzz_valid_collective(facts) &&
	    (decision.action != NDET_ACTION_FORWARD || decision.reason != NDET_FALLBACK_INVALID))
		fuzz_fail("collective", "an invalid root or collective not forwarded");

	const bool supported = fuzz_supported_float(facts, true);
	switch (decision.action) {
	case NDET_ACTION_DIVERT:
		if (facts->state != NDET_COMM_READY || !supported || facts->invalid_pointers ||
		    !fuzz_valid_collective(facts))
			fuzz_fail("DIVERT", "without a supported call on a READY communicator");
		if (decision.premul != ((int)facts->op >= (int)ncclNumOps) ||
		    (decision.premul && decision.op != NDET_OP_SUM))
			fuzz_fail("DIVERT", "PreMulSum not diverted as a pre-multiplied sum");
		if ((unsigned)decision.dtype >= NDET_DTYPE_COUNT ||
		    (unsigned)decision.op >= NDET_OP_COUNT || !decision.floating)
			fuzz_fail("DIVERT", "dtype or op out of range");
		break;
	case NDET_ACTION_SETUP:
		if (facts->state != NDET_COMM_PENDING || !decision.floating)
			fuzz_fail("SETUP", "not a floating-point call on a PENDING communicator");
		break;
	case NDET_ACTION_REFUSE:
		if (!facts->strict || !decision.floating || facts->state == NDET_COMM_PENDING ||
		    facts->state == NDET_COMM_DEAD || facts->invalid_pointers)
			fuzz_fail("REFUSE", "without an agreed strict floating-point fallback");
		break;
	case NDET_ACTION_FAIL:
		if (facts->state != NDET_COMM_POISONED || !fuzz_supported_float(facts, false))
			fuzz_fail("FAIL", "on a communicator that is not poisoned");
		break;
	case NDET_ACTION_FORWARD:
		if (decision.reason == NDET_FALLBACK_NONE)
			fuzz_fail("FORWARD", "without a reason");
		break;
	}
	/* fp8 below sm_90 on a set-up communicator: NCCL's ncclInvalidArgument. */
	if (((int)facts->datatype == 10 || (int)facts->datatype == 11) &&
	    facts->state == NDET_COMM_READY && !facts->sm90 &&
	    (decision.action != NDET_ACTION_FORWARD || decision.reason != NDET_FALLBACK_INVALID))
		fuzz_fail("fp8", "below sm_90 not left to NCCL");
	/* What NCCL rejects is NCCL's to answer, in every state. */
	if ((facts->invalid_pointers || (int)facts->op < 0 || (int)facts->datatype < 0) &&
	    (decision.action != NDET_ACTION_FORWARD || decision.reason != NDET_FALLBACK_INVALID))
		fuzz_fail("invalid arguments", "not forwarded for NCCL's code");
	/* Strict mode may only turn a fallback into a refusal, never anything else. */
	other = *facts;
	other.strict = !facts->strict;
	struct ndet_eligibility flipped = fuzz_decide(&other, 0x00);
	if (!fuzz_same(&decision, &flipped)) {
		bool refusal_swap = (decision.action == NDET_ACTION_REFUSE &&
				     flipped.action == NDET_ACTION_FORWARD) ||
				    (decision.action == NDET_ACTION_FORWARD &&
				     flipped.action == NDET_ACTION_REFUSE);
		if (!refusal_swap || decision.reason != flipped.reason)
			fuzz_fail("strict", "changed more than refuse/forward");
	}
	if (ndet_fallback_reason_name(decision.reason) == NULL ||
	    ndet_comm_state_name(facts->state) == NULL)
		fuzz_fail("names", "missing");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* One decision per FUZZ_FACT_BYTES (the last ones zero-padded). */
	for (size_t at = 0; at < size; at += FUZZ_FACT_BYTES) {
		uint8_t bytes[FUZZ_FACT_BYTES] = {0};
		size_t take = size - at < FUZZ_FACT_BYTES ? size - at : FUZZ_FACT_BYTES;
		memcpy(bytes, data + at, take);
		struct ndet_eligibility_facts facts;
		fuzz_facts(bytes, &facts);
		fuzz_check(&facts);
	}
	return 0;
}

/* datatype(4) op(4) count(4) shift state flags version mode premul coll root nranks */
const struct fuzz_seed fuzz_seeds[] = {
	FUZZ_SEED("\x07\0\0\0\0\0\0\0\x61\0\0\0\0\x01\0\x04\0\0"),     /* f32 sum READY */
	FUZZ_SEED("\x09\0\0\0\x04\0\0\0\x61\0\0\0\0\x00\x01\x04\0\0"), /* bf16 avg PENDING */
	FUZZ_SEED("\x07\0\0\0\x05\0\0\0\x61\0\0\0\0\x01\x01\x04\0\0"), /* PreMulSum strict */
	FUZZ_SEED("\x0a\0\0\0\0\0\0\0\x61\0\0\0\0\x00\x01\x01\0\0"),   /* fp8, pending, 2.21 */
	FUZZ_SEED("\x0a\0\0\0\0\0\0\0\x61\0\0\0\0\x01\x0c\x04\0\0"),   /* fp8, ready, sm90 + code */
	FUZZ_SEED("\x0b\0\0\0\0\0\0\0\x61\0\0\0\0\x01\x05\x04\0\0"), /* e5m2, no fp8 code, strict */
	FUZZ_SEED("\x02\0\0\0\0\0\0\0\x61\0\0\0\0\x03\x00\x04\0\0"), /* int32 poisoned */
	FUZZ_SEED("\xff\xff\xff\xff\0\0\0\0\x61\0\0\0\0\x01\0\x04\x01\0"),   /* datatype -1 */
	FUZZ_SEED("\x07\0\0\0\x00\0\0\x80\x61\0\0\0\0\x01\0\x04\x02\0"),     /* op INT_MIN */
	FUZZ_SEED("\x06\0\0\0\0\0\0\0\xff\xff\xff\xff\x27\x04\x02\x04\0\0"), /* f16 DEAD */
	FUZZ_SEED("\x08\0\0\0\x03\0\0\0\x61\0\0\0\0\x02\x03\x04\0\0"),       /* f64 max FALLBACK */
	FUZZ_SEED("\x07\0\0\0\x05\0\0\0\x61\0\0\0\0\x01\0\x04\0\x03\x01\0\x05"), /* PreMulSum RS */
	FUZZ_SEED("\x09\0\0\0\x01\0\0\0\x61\0\0\0\0\x01\0\x04\0\0\x02\x03\x05"), /* reduce root 3 */
	FUZZ_SEED("\x09\0\0\0\x01\0\0\0\x61\0\0\0\0\x01\0\x04\0\0\x02\x09\x05"), /* root too big */
};
const size_t fuzz_seed_count = sizeof(fuzz_seeds) / sizeof(fuzz_seeds[0]);
const unsigned fuzz_generated_inputs = 50000;
