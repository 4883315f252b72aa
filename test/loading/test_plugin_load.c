/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Loads nccl-det's plugins the way NCCL does (dlopen("libnccl-tuner-det.so" and
 * "libnccl-net-det.so", RTLD_NOW | RTLD_LOCAL, found through the loader's search
 * path: test_plugins.sh points LD_LIBRARY_PATH at symlinks to libnccl-det.so) and
 * drives the structs NCCL looks up, with NCCL's default settings of nccl-det:
 * - both names open one object (symlinks to one file);
 * - ncclTunerPlugin_v3/_v4/_v5: init succeeds, getCollInfo leaves only tree/simple
 *   of an all-reduce cost table and one channel, and leaves other collectives alone;
 * - ncclNetPlugin_v10/_v11: init succeeds, zero devices, finalize succeeds;
 * - loaded RTLD_LOCAL, nothing is diverted: this program's ncclAllReduce (it links
 *   the fake NCCL) reaches the fake, and ncclDetCommQuery is not in the global scope.
 * Prints one line per failed check; exit status 1 if any.
 */
#include "config.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nccl.h>

#include "test/fake_nccl/fake_nccl.h"
#include "preload/ndet_netplugin.h"
#include "preload/ndet_tuner.h"

#define ALGOS  NDET_TUNER_V5_ALGORITHMS
#define PROTOS NDET_TUNER_V5_PROTOCOLS

static int failures;

#define CHECK(condition, ...)                                                                      \
	do {                                                                                       \
		if (!(condition)) {                                                                \
			printf("FAIL %s:%d: ", __FILE__, __LINE__);                                \
			printf(__VA_ARGS__);                                                       \
			printf("\n");                                                              \
			failures++;                                                                \
		}                                                                                  \
	} while (0)

/* A cost table as NCCL fills it: PAT and the NVLS entries ignored, costs in microseconds. */
static void fill_table(float table[ALGOS][PROTOS])
{
	for (int algo = 0; algo < ALGOS; algo++)
		for (int proto = 0; proto < PROTOS; proto++)
			table[algo][proto] = algo >= 4 ? NDET_NCCL_ALGO_PROTO_IGNORE
						       : 10.0f + (float)(algo * PROTOS + proto);
	/* NCCL would take ring/LL: the cheapest. */
	table[NDET_NCCL_ALGO_RING][NDET_NCCL_PROTO_LL] = 1.0f;
}

static void check_pinned(const char *version, float table[ALGOS][PROTOS], int channels)
{
	for (int algo = 0; algo < ALGOS; algo++) {
		for (int proto = 0; proto < PROTOS; proto++) {
			int ours = algo == NDET_NCCL_ALGO_TREE && proto == NDET_NCCL_PROTO_SIMPLE;
			float cost = table[algo][proto];
			CHECK(ours ? cost == 10.0f + 2 : cost == NDET_NCCL_ALGO_PROTO_IGNORE,
			      "%s: entry [%d][%d] = %g", version, algo, proto, (double)cost);
		}
	}
	CHECK(channels == 1, "%s: channels %d, expected 1", version, channels);
}

static void check_untouched(const char *version, float table[ALGOS][PROTOS], int channels)
{
	float fresh[ALGOS][PROTOS];
	fill_table(fresh);
	CHECK(memcmp(fresh, table, sizeof(fresh)) == 0, "%s: a broadcast table was changed",
	      version);
	CHECK(channels == 0, "%s: broadcast channels %d, expected 0", version, channels);
}

static void tuners(void *library)
{
	const ndet_tuner_v3_t *v3 = dlsym(library, "ncclTunerPlugin_v3");
	const ndet_tuner_v4_t *v4 = dlsym(library, "ncclTunerPlugin_v4");
	const ndet_tuner_v5_t *v5 = dlsym(library, "ncclTunerPlugin_v5");
	CHECK(v3 != NULL && v4 != NULL && v5 != NULL, "tuner structs missing");
	if (v3 == NULL || v4 == NULL || v5 == NULL)
		return;
	CHECK(strcmp(v5->name, "nccl-det") == 0, "tuner name %s", v5->name);
	float table[ALGOS][PROTOS];
	int channels;
	void *context = NULL;

	ndet_nvl_domain_info_v5_t domains = {1, 3, 3};
	ndet_tuner_constants_v5_t constants;
	memset(&constants, 0, sizeof(constants));
	CHECK(v5->init(&context, 42, 3, 1, NULL, &domains, &constants) == ncclSuccess, "v5 init");
	CHECK(context != NULL, "v5 init gave no context");
	fill_table(table);
	channels = 0;
	CHECK(v5->getCollInfo(context, NDET_NCCL_FUNC_ALLREDUCE, 1 << 20, 1, (float **)table, ALGOS,
			      PROTOS, 0, &channels) == ncclSuccess,
	      "v5 getCollInfo");
	check_pinned("v5", table, channels);
	fill_table(table);
	channels = 0;
	CHECK(v5->getCollInfo(context, 0, 1 << 20, 1, (float **)table, ALGOS, PROTOS, 0,
			      &channels) == ncclSuccess,
	      "v5 getCollInfo (broadcast)");
	check_untouched("v5", table, channels);
	CHECK(v5->finalize(context) == ncclSuccess, "v5 finalize");

	context = NULL;
	CHECK(v4->init(3, 1, NULL, &context) == ncclSuccess && context != NULL, "v4 init");
	fill_table(table);
	channels = 0;
	CHECK(v4->getCollInfo(context, NDET_NCCL_FUNC_ALLREDUCE, 8, 1, (float **)table, ALGOS,
			      PROTOS, 1, &channels) == ncclSuccess,
	      "v4 getCollInfo");
	check_pinned("v4", table, channels);
	CHECK(v4->destroy(context) == ncclSuccess, "v4 destroy");

	context = NULL;
	CHECK(v3->init(3, 1, NULL, &context) == ncclSuccess && context != NULL, "v3 init");
	fill_table(table);
	channels = 0;
	CHECK(v3->getCollInfo(context, NDET_NCCL_FUNC_ALLREDUCE, 8, 1, (float **)table, ALGOS,
			      PROTOS, &channels) == ncclSuccess,
	      "v3 getCollInfo");
	check_pinned("v3", table, channels);
	CHECK(v3->destroy(context) == ncclSuccess, "v3 destroy");
}

static void nets(void *library)
{
	const ndet_net_v10_t *v10 = dlsym(library, "ncclNetPlugin_v10");
	const ndet_net_v11_t *v11 = dlsym(library, "ncclNetPlugin_v11");
	CHECK(v10 != NULL && v11 != NULL, "net structs missing");
	if (v10 == NULL || v11 == NULL)
		return;
	CHECK(strcmp(v11->name, "nccl-det") == 0, "net name %s", v11->name);
	int devices = -1;
	CHECK(v10->init(NULL, NULL) == ncclSuccess, "v10 init");
	CHECK(v10->devices(&devices) == ncclSuccess && devices == 0, "v10: %d devices", devices);
	void *context = NULL;
	devices = -1;
	CHECK(v11->init(&context, 7, NULL, NULL, NULL) == ncclSuccess && context != NULL,
	      "v11 init");
	CHECK(v11->devices(&devices) == ncclSuccess && devices == 0, "v11: %d devices", devices);
	CHECK(v11->finalize(context) == ncclSuccess, "v11 finalize");
	/* Every other slot is filled (NCCL never calls through NULL) and refuses. */
	const void *const *slots = (const void *const *)v11;
	for (size_t i = 1; i < sizeof(*v11) / sizeof(void *); i++)
		CHECK(slots[i] != NULL, "v11 slot %zu is NULL", i);
	CHECK(v11->getProperties(0, NULL) != ncclSuccess, "v11 getProperties succeeded");
}

/* Loaded RTLD_LOCAL, the library diverts nothing: NCCL calls still reach the fake. */
static void diverts_nothing(const char *trace)
{
	CHECK(dlsym(RTLD_DEFAULT, "ncclDetCommQuery") == NULL,
	      "ncclDetCommQuery is in the global scope");
	static float data[2] = {1.0f, 2.0f};
	ncclUniqueId id;
	ncclComm_t comm = NULL;
	CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
	CHECK(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess, "ncclCommInitRank");
	CHECK(ncclAllReduce(data, data, 2, ncclFloat32, ncclSum, comm, NULL) == ncclSuccess,
	      "ncclAllReduce");
	CHECK(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy");
	CHECK(fake_nccl_trace_count(trace, "ncclAllReduce") == 1,
	      "the all-reduce did not reach the fake NCCL");
	CHECK(fake_nccl_trace_count(trace, "ncclAllGather") == 0,
	      "something set a communicator up (%d all-gathers)",
	      fake_nccl_trace_count(trace, "ncclAllGather"));
}

int main(void)
{
	const char *trace = getenv("FAKE_NCCL_TRACE");
	void *tuner = dlopen("libnccl-tuner-det.so", RTLD_NOW | RTLD_LOCAL);
	void *net = dlopen("libnccl-net-det.so", RTLD_NOW | RTLD_LOCAL);
	if (tuner == NULL || net == NULL || trace == NULL) {
		printf("FAIL: cannot load the plugins (LD_LIBRARY_PATH=%s, FAKE_NCCL_TRACE=%s): "
		       "%s\n",
		       getenv("LD_LIBRARY_PATH"), trace, dlerror());
		return 1;
	}
	CHECK(tuner == net, "the tuner and net plugin names are not one object");
	tuners(tuner);
	nets(net);
	diverts_nothing(trace);
	printf("%s: %d failed checks\n", failures == 0 ? "PASS" : "FAIL", failures);
	return failures == 0 ? 0 : 1;
}
