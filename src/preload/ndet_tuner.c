/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The tuner plugin: pins NCCL's all-reduce algorithm, protocol and channels
 * (see ndet_tuner.h).
 */
#include "config.h"

#include "preload/ndet_tuner.h"

#include <assert.h>
#include <stdbool.h>
#include <stdio.h>

#include "common/ndet_log.h"

#define NDET_EXPORT __attribute__((visibility("default")))

/*
 * The layouts NCCL reads.  A mismatch here would make NCCL call through the wrong
 * slot, so each struct is checked against the header it copies.
 */
static_assert(sizeof(ndet_nvl_domain_info_v5_t) == 12, "ncclNvlDomainInfo_v5_t");
static_assert(sizeof(ndet_tuner_constants_v5_t) == (21 + 63 + 5 * 12) * sizeof(double),
	      "ncclTunerConstants_v5_t");
static_assert(offsetof(ndet_tuner_constants_v5_t, llMaxBws) == (21 + 63) * sizeof(double),
	      "ncclTunerConstants_v5_t.llMaxBws");
static_assert(offsetof(ndet_tuner_constants_v5_t, perChMaxNVLSTreeBws) ==
		      (21 + 63 + 4 * 12) * sizeof(double),
	      "ncclTunerConstants_v5_t.perChMaxNVLSTreeBws");
static_assert(sizeof(ndet_tuner_v3_t) == 4 * sizeof(void *), "ncclTuner_v3_t");
static_assert(offsetof(ndet_tuner_v3_t, getCollInfo) == 2 * sizeof(void *),
	      "ncclTuner_v3_t.getCollInfo");
static_assert(offsetof(ndet_tuner_v3_t, destroy) == 3 * sizeof(void *), "ncclTuner_v3_t.destroy");
static_assert(sizeof(ndet_tuner_v4_t) == 4 * sizeof(void *), "ncclTuner_v4_t");
static_assert(offsetof(ndet_tuner_v4_t, init) == sizeof(void *), "ncclTuner_v4_t.init");
static_assert(offsetof(ndet_tuner_v4_t, getCollInfo) == 2 * sizeof(void *),
	      "ncclTuner_v4_t.getCollInfo");
static_assert(offsetof(ndet_tuner_v4_t, destroy) == 3 * sizeof(void *), "ncclTuner_v4_t.destroy");
static_assert(sizeof(ndet_tuner_v5_t) == 4 * sizeof(void *), "ncclTuner_v5_t");
static_assert(offsetof(ndet_tuner_v5_t, init) == sizeof(void *), "ncclTuner_v5_t.init");
static_assert(offsetof(ndet_tuner_v5_t, getCollInfo) == 2 * sizeof(void *),
	      "ncclTuner_v5_t.getCollInfo");
static_assert(offsetof(ndet_tuner_v5_t, finalize) == 3 * sizeof(void *), "ncclTuner_v5_t.finalize");

#define NDET_TUNER_NAME "nccl-det"

/* NCCL wants a context; every communicator gets this one (the pin is process-wide). */
static const char ndet_tuner_context = 't';
static int ndet_tuner_unavailable_warned;

void ndet_tuner_pin_from_settings(const struct ndet_settings *settings, struct ndet_tuner_pin *pin)
{
	pin->algo = -1;
	pin->proto = -1;
	pin->channels = 0;
	if (!settings->enable)
		return;
	switch (settings->tuner_algo) {
	case NDET_TUNER_ALGO_TREE:
		pin->algo = NDET_NCCL_ALGO_TREE;
		break;
	case NDET_TUNER_ALGO_RING:
		pin->algo = NDET_NCCL_ALGO_RING;
		break;
	default:
		break;
	}
	switch (settings->tuner_proto) {
	case NDET_TUNER_PROTO_SIMPLE:
		pin->proto = NDET_NCCL_PROTO_SIMPLE;
		break;
	case NDET_TUNER_PROTO_LL:
		pin->proto = NDET_NCCL_PROTO_LL;
		break;
	case NDET_TUNER_PROTO_LL128:
		pin->proto = NDET_NCCL_PROTO_LL128;
		break;
	default:
		break;
	}
	pin->channels = settings->tuner_channels;
}

static bool ndet_tuner_allows(const struct ndet_tuner_pin *pin, int algo, int proto)
{
	return (pin->algo < 0 || pin->algo == algo) && (pin->proto < 0 || pin->proto == proto);
}

ndet_tuner_outcome_t ndet_tuner_apply(const struct ndet_tuner_pin *pin, int coll_type, float *table,
				      int num_algo, int num_proto, int *channels)
{
	if (coll_type != NDET_NCCL_FUNC_ALLREDUCE)
		return NDET_TUNER_UNTOUCHED;
	bool pins_entries = pin->algo >= 0 || pin->proto >= 0;
	if (!pins_entries && pin->channels <= 0)
		return NDET_TUNER_UNTOUCHED;
	if (pins_entries) {
		if (table == NULL || num_algo <= 0 || num_proto <= 0)
			return NDET_TUNER_UNAVAILABLE;
		/* NCCL takes the cheapest entry that is not ignored: leave it only ours. */
		int allowed = 0;
		for (int algo = 0; algo < num_algo; algo++) {
			for (int proto = 0; proto < num_proto; proto++) {
				float cost = table[algo * num_proto + proto];
				if (cost != NDET_NCCL_ALGO_PROTO_IGNORE &&
				    ndet_tuner_allows(pin, algo, proto))
					allowed++;
			}
		}
		if (allowed == 0)
			return NDET_TUNER_UNAVAILABLE;
		for (int algo = 0; algo < num_algo; algo++) {
			for (int proto = 0; proto < num_proto; proto++) {
				if (!ndet_tuner_allows(pin, algo, proto))
					table[algo * num_proto + proto] =
						NDET_NCCL_ALGO_PROTO_IGNORE;
			}
		}
	}
	/* NCCL takes 0 as "its own count", which shrinks with the message size. */
	if (pin->channels > 0 && channels != NULL)
		*channels = pin->channels;
	return NDET_TUNER_PINNED;
}

const char *ndet_tuner_algo_name(int algo)
{
	switch (algo) {
	case NDET_NCCL_ALGO_TREE:
		return "tree";
	case NDET_NCCL_ALGO_RING:
		return "ring";
	default:
		return "NCCL's choice";
	}
}

const char *ndet_tuner_proto_name(int proto)
{
	switch (proto) {
	case NDET_NCCL_PROTO_SIMPLE:
		return "simple";
	case NDET_NCCL_PROTO_LL:
		return "LL";
	case NDET_NCCL_PROTO_LL128:
		return "LL128";
	default:
		return "NCCL's choice";
	}
}

/* ------------------------------------------------------------------ the plugin */

/* One line per communicator, in NCCL's own log when NCCL gave us its logger. */
static void ndet_tuner_announce(size_t nranks, size_t nnodes, ndet_nccl_logger_t logger)
{
	struct ndet_tuner_pin pin;
	const struct ndet_settings *settings = ndet_settings_get();
	ndet_tuner_pin_from_settings(settings, &pin);
	char channels[32];
	if (pin.channels > 0)
		snprintf(channels, sizeof(channels), "%d", pin.channels);
	else
		snprintf(channels, sizeof(channels), "NCCL's choice");
	if (!settings->enable) {
		if (logger != NULL)
			logger(NDET_NCCL_LOG_INFO, NDET_NCCL_LOG_TUNING, __FILE__, __LINE__,
			       "NCCL-DET tuner: NCCL_DET_ENABLE=0, NCCL's own tuning stands");
		else
			NDET_INFO(NDET_SUBSYS_INIT,
				  "tuner: NCCL_DET_ENABLE=0, NCCL's own tuning stands");
		return;
	}
	if (logger != NULL)
		logger(NDET_NCCL_LOG_INFO, NDET_NCCL_LOG_TUNING, __FILE__, __LINE__,
		       "NCCL-DET tuner: %zu ranks on %zu nodes: all-reduce pinned to algorithm "
		       "%s, protocol %s, channels %s (pinned NCCL, not nccl-det's "
		       "size-invariant all-reduce)",
		       nranks, nnodes, ndet_tuner_algo_name(pin.algo),
		       ndet_tuner_proto_name(pin.proto), channels);
	else
		NDET_INFO(NDET_SUBSYS_INIT,
			  "tuner: %zu ranks on %zu nodes: all-reduce pinned to algorithm %s, "
			  "protocol %s, channels %s",
			  nranks, nnodes, ndet_tuner_algo_name(pin.algo),
			  ndet_tuner_proto_name(pin.proto), channels);
}

static ncclResult_t ndet_tuner_get_coll_info(void *context, int coll_type, size_t bytes,
					     int pipe_ops, float **cost_table, int num_algo,
					     int num_proto, int reg_buff, int *channels)
{
	struct ndet_tuner_pin pin;
	ndet_tuner_pin_from_settings(ndet_settings_get(), &pin);
	/* NCCL passes its float[algorithms][protocols] array cast to float**. */
	ndet_tuner_outcome_t outcome = ndet_tuner_apply(&pin, coll_type, (float *)cost_table,
							num_algo, num_proto, channels);
	if (outcome == NDET_TUNER_UNAVAILABLE)
		NDET_WARN_ONCE(
			&ndet_tuner_unavailable_warned,
			"tuner: NCCL offers no all-reduce with algorithm %s and protocol %s "
			"here (NCCL_ALGO or NCCL_PROTO exclude it, or NCCL cannot run it on "
			"this communicator): NCCL's own choice runs, and its reduction "
			"order may change with the message size.  Fix: unset NCCL_ALGO and "
			"NCCL_PROTO, or set NCCL_DET_TUNER_ALGO/NCCL_DET_TUNER_PROTO to what "
			"NCCL offers",
			ndet_tuner_algo_name(pin.algo), ndet_tuner_proto_name(pin.proto));
	/* Never an error: NCCL would fail the collective (NCCLCHECK around getCollInfo). */
	return ncclSuccess;
}

static ncclResult_t ndet_tuner_init_v3(size_t nranks, size_t nnodes, ndet_nccl_logger_t logger,
				       void **context)
{
	ndet_tuner_announce(nranks, nnodes, logger);
	if (context != NULL)
		*context = (void *)&ndet_tuner_context;
	return ncclSuccess;
}

static ncclResult_t ndet_tuner_get_coll_info_v3(void *context, int coll_type, size_t bytes,
						int pipe_ops, float **cost_table, int num_algo,
						int num_proto, int *channels)
{
	return ndet_tuner_get_coll_info(context, coll_type, bytes, pipe_ops, cost_table, num_algo,
					num_proto, 0, channels);
}

static ncclResult_t ndet_tuner_init_v5(void **context, uint64_t comm_id, size_t nranks,
				       size_t nnodes, ndet_nccl_logger_t logger,
				       ndet_nvl_domain_info_v5_t *nvl_domains,
				       ndet_tuner_constants_v5_t *constants)
{
	/* The constants stay NCCL's: only the all-reduce table is pinned. */
	return ndet_tuner_init_v3(nranks, nnodes, logger, context);
}

static ncclResult_t ndet_tuner_finalize(void *context)
{
	return ncclSuccess;
}

NDET_EXPORT const ndet_tuner_v3_t ncclTunerPlugin_v3 = {
	.name = NDET_TUNER_NAME,
	.init = ndet_tuner_init_v3,
	.getCollInfo = ndet_tuner_get_coll_info_v3,
	.destroy = ndet_tuner_finalize,
};

NDET_EXPORT const ndet_tuner_v4_t ncclTunerPlugin_v4 = {
	.name = NDET_TUNER_NAME,
	.init = ndet_tuner_init_v3,
	.getCollInfo = ndet_tuner_get_coll_info,
	.destroy = ndet_tuner_finalize,
};

NDET_EXPORT const ndet_tuner_v5_t ncclTunerPlugin_v5 = {
	.name = NDET_TUNER_NAME,
	.init = ndet_tuner_init_v5,
	.getCollInfo = ndet_tuner_get_coll_info,
	.finalize = ndet_tuner_finalize,
};
