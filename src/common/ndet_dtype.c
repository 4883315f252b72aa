/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 */
#include "config.h"

#include "common/ndet_dtype.h"

struct ndet_dtype_fact {
	const char *name;
	size_t size;
	ncclDataType_t nccl;
};

static const struct ndet_dtype_fact ndet_dtype_facts[NDET_DTYPE_COUNT] = {
	[NDET_DTYPE_F32] = {"f32", 4, ncclFloat32},
	[NDET_DTYPE_F16] = {"f16", 2, ncclFloat16},
	[NDET_DTYPE_BF16] = {"bf16", 2, ncclBfloat16},
	[NDET_DTYPE_F64] = {"f64", 8, ncclFloat64},
	[NDET_DTYPE_F8E4M3] = {"f8e4m3", 1, NDET_NCCL_FP8_E4M3},
	[NDET_DTYPE_F8E5M2] = {"f8e5m2", 1, NDET_NCCL_FP8_E5M2},
};

struct ndet_op_fact {
	const char *name;
	ncclRedOp_t nccl;
};

static const struct ndet_op_fact ndet_op_facts[NDET_OP_COUNT] = {
	[NDET_OP_SUM] = {"sum", ncclSum}, [NDET_OP_PROD] = {"prod", ncclProd},
	[NDET_OP_MIN] = {"min", ncclMin}, [NDET_OP_MAX] = {"max", ncclMax},
	[NDET_OP_AVG] = {"avg", ncclAvg},
};

size_t ndet_dtype_size(ndet_dtype_t dtype)
{
	return (unsigned)dtype < NDET_DTYPE_COUNT ? ndet_dtype_facts[dtype].size : 0;
}

const char *ndet_dtype_name(ndet_dtype_t dtype)
{
	return (unsigned)dtype < NDET_DTYPE_COUNT ? ndet_dtype_facts[dtype].name : "invalid-dtype";
}

const char *ndet_op_name(ndet_op_t op)
{
	return (unsigned)op < NDET_OP_COUNT ? ndet_op_facts[op].name : "invalid-op";
}

ncclDataType_t ndet_dtype_to_nccl(ndet_dtype_t dtype)
{
	return (unsigned)dtype < NDET_DTYPE_COUNT ? ndet_dtype_facts[dtype].nccl : ncclFloat32;
}

bool ndet_dtype_from_nccl(ncclDataType_t datatype, ndet_dtype_t *dtype)
{
	for (int i = 0; i < NDET_DTYPE_COUNT; i++) {
		if (ndet_dtype_facts[i].nccl == datatype) {
			*dtype = (ndet_dtype_t)i;
			return true;
		}
	}
	return false;
}

ncclRedOp_t ndet_op_to_nccl(ndet_op_t op)
{
	return (unsigned)op < NDET_OP_COUNT ? ndet_op_facts[op].nccl : ncclSum;
}

bool ndet_op_from_nccl(ncclRedOp_t op, ndet_op_t *out)
{
	for (int i = 0; i < NDET_OP_COUNT; i++) {
		if (ndet_op_facts[i].nccl == op) {
			*out = (ndet_op_t)i;
			return true;
		}
	}
	return false;
}
