/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The tuner plugin (NCCL_TUNER_PLUGIN=det: libnccl-tuner-det.so, a symlink to
 * libnccl-det.so).  NCCL dlopens it RTLD_LOCAL and calls getCollInfo for every
 * collective with its cost table; for all-reduce the plugin pins NCCL's algorithm,
 * protocol and channel count (NCCL_DET_TUNER_ALGO/_PROTO/_CHANNELS, default tree,
 * simple, 1 channel), so that NCCL itself reduces in one order run after run.  That
 * is "pinned NCCL", not nccl-det's guarantee: NCCL's tree is still not nccl-det's
 * tree, and a plugin cannot divert a call.  Other collectives keep NCCL's choice.
 *
 * The ABI structs below are declared here from NCCL's plugin headers (tuner_v3.h,
 * tuner_v4.h, tuner_v5.h), field names as NCCL's, layouts checked by static_assert
 * in ndet_tuner.c.  Exported: ncclTunerPlugin_v3 (NCCL 2.22, 2.23), _v4 (2.24 -
 * 2.27), _v5 (2.28, 2.29); NCCL 2.21 knows only _v2, which is not provided
 * (doc/loading.md).  init never fails: a failing tuner init fails NCCL's
 * communicator init (NCCLCHECK in initTransportsRank).
 */
#ifndef NDET_TUNER_H_
#define NDET_TUNER_H_

#include <stddef.h>
#include <stdint.h>

#include <nccl.h>

#include "common/ndet_settings.h"

#ifdef __cplusplus
extern "C" {
#endif

/* nccl_common.h: ncclDebugLogger_t, ncclFunc_t (an enum: int-sized). */
typedef void (*ndet_nccl_logger_t)(int level, unsigned long flags, const char *file, int line,
				   const char *fmt, ...);
#define NDET_NCCL_LOG_INFO       3
#define NDET_NCCL_LOG_TUNING     0x40ul
#define NDET_NCCL_FUNC_ALLREDUCE 4

/* nccl_tuner.h: algorithm and protocol indices of the cost table. */
#define NDET_NCCL_ALGO_TREE         0
#define NDET_NCCL_ALGO_RING         1
#define NDET_NCCL_PROTO_LL          0
#define NDET_NCCL_PROTO_LL128       1
#define NDET_NCCL_PROTO_SIMPLE      2
#define NDET_NCCL_ALGO_PROTO_IGNORE (-1.0f)

/* tuner_v5.h */
#define NDET_TUNER_V5_ALGORITHMS 7
#define NDET_TUNER_V5_PROTOCOLS  3
#define NDET_TUNER_V5_HW_LINKS   3
#define NDET_TUNER_V5_COMPCAPS   4
#define NDET_TUNER_V5_SCALES     3

typedef struct {
	int nNvlDomains;
	int minRanksPerNvlDomain;
	int maxRanksPerNvlDomain;
} ndet_nvl_domain_info_v5_t;

typedef struct {
	double baseLatencies[NDET_TUNER_V5_ALGORITHMS][NDET_TUNER_V5_PROTOCOLS];
	double hwLatencies[NDET_TUNER_V5_HW_LINKS][NDET_TUNER_V5_ALGORITHMS]
			  [NDET_TUNER_V5_PROTOCOLS];
	double llMaxBws[NDET_TUNER_V5_COMPCAPS][NDET_TUNER_V5_SCALES];
	double perChMaxRingLL128Bws[NDET_TUNER_V5_COMPCAPS][NDET_TUNER_V5_SCALES];
	double perChMaxTreeLL128Bws[NDET_TUNER_V5_COMPCAPS][NDET_TUNER_V5_SCALES];
	double perChMaxTreeBws[NDET_TUNER_V5_COMPCAPS][NDET_TUNER_V5_SCALES];
	double perChMaxNVLSTreeBws[NDET_TUNER_V5_COMPCAPS][NDET_TUNER_V5_SCALES];
} ndet_tuner_constants_v5_t;

typedef struct {
	const char *name;
	ncclResult_t (*init)(size_t nRanks, size_t nNodes, ndet_nccl_logger_t logFunction,
			     void **context);
	ncclResult_t (*getCollInfo)(void *context, int collType, size_t nBytes, int numPipeOps,
				    float **collCostTable, int numAlgo, int numProto,
				    int *nChannels);
	ncclResult_t (*destroy)(void *context);
} ndet_tuner_v3_t;

typedef struct {
	const char *name;
	ncclResult_t (*init)(size_t nRanks, size_t nNodes, ndet_nccl_logger_t logFunction,
			     void **context);
	ncclResult_t (*getCollInfo)(void *context, int collType, size_t nBytes, int numPipeOps,
				    float **collCostTable, int numAlgo, int numProto, int regBuff,
				    int *nChannels);
	ncclResult_t (*destroy)(void *context);
} ndet_tuner_v4_t;

typedef struct {
	const char *name;
	ncclResult_t (*init)(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes,
			     ndet_nccl_logger_t logFunction,
			     ndet_nvl_domain_info_v5_t *nvlDomainInfo,
			     ndet_tuner_constants_v5_t *constants);
	ncclResult_t (*getCollInfo)(void *context, int collType, size_t nBytes, int numPipeOps,
				    float **collCostTable, int numAlgo, int numProto, int regBuff,
				    int *nChannels);
	ncclResult_t (*finalize)(void *context);
} ndet_tuner_v5_t;

/* What the tuner pins, in NCCL's indices; -1 (algo, proto) or 0 (channels) = NCCL's choice. */
struct ndet_tuner_pin {
	int algo;
	int proto;
	int channels;
};

/* The pin the settings ask for; nothing pinned with NCCL_DET_ENABLE=0. */
void ndet_tuner_pin_from_settings(const struct ndet_settings *settings, struct ndet_tuner_pin *pin);

typedef enum {
	NDET_TUNER_UNTOUCHED = 0, /* not an all-reduce, or nothing to pin */
	NDET_TUNER_PINNED,        /* the table and/or the channel count now say what `pin` asks */
	NDET_TUNER_UNAVAILABLE,   /* NCCL ruled out every entry `pin` allows (NCCL_ALGO, ...) */
} ndet_tuner_outcome_t;

/*
 * Pure: apply `pin` to one call's cost table `table` (numAlgo rows of numProto
 * floats, as NCCL lays it out) and channel count.  Entries the pin excludes become
 * NCCL_ALGO_PROTO_IGNORE; an entry NCCL ignored is never revived.  When no allowed
 * entry is left the table is untouched (NCCL's choice stands) and so is *channels.
 */
ndet_tuner_outcome_t ndet_tuner_apply(const struct ndet_tuner_pin *pin, int coll_type, float *table,
				      int num_algo, int num_proto, int *channels);

/* Readable name of a pinned algorithm or protocol ("tree", "simple", "NCCL's choice"). */
const char *ndet_tuner_algo_name(int algo);
const char *ndet_tuner_proto_name(int proto);

#ifdef __cplusplus
}
#endif

#endif /* NDET_TUNER_H_ */
