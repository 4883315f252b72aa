/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * nccl-det-perf's side of the real NCCL: loading the library (NCCL_DET_NCCL_LIBRARY, else
 * libnccl.so.2) and its entry points, whether its columns can run on this layout of
 * ranks, its symmetric windows, and stopping on its errors.
 */
#include "config.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ndet_dtype.h"
#include "common/ndet_settings.h"
#include "tools/perf/perf.h"

/*
 * Where each function of ndet_resolve.h's table lies in struct ndet_nccl, and its
 * name, by NDET_NCCL_FN_ index.
 */
#define PERF_NCCL_OFFSET(ret, name, params)                                                        \
	[NDET_NCCL_FN_##name] = offsetof(struct ndet_nccl, name),
#define PERF_NCCL_NAME(ret, name, params) [NDET_NCCL_FN_##name] = #name,
static const size_t perf_nccl_offsets[NDET_NCCL_FUNCTION_COUNT] = {
	NDET_NCCL_FUNCTIONS(PERF_NCCL_OFFSET)};
static const char *const perf_nccl_names[NDET_NCCL_FUNCTION_COUNT] = {
	NDET_NCCL_FUNCTIONS(PERF_NCCL_NAME)};
#undef PERF_NCCL_OFFSET
#undef PERF_NCCL_NAME

/*
 * What the tool calls: without one of them NCCL's columns cannot run (PreMulSum's
 * calls are in every NCCL nccl-det runs with: 2.11 and later).
 */
static const enum ndet_nccl_function perf_nccl_required[] = {
	NDET_NCCL_FN_ncclGetVersion,
	NDET_NCCL_FN_ncclCommInitAll,
	NDET_NCCL_FN_ncclAllReduce,
	NDET_NCCL_FN_ncclReduceScatter,
	NDET_NCCL_FN_ncclReduce,
	NDET_NCCL_FN_ncclCommGetAsyncError,
	NDET_NCCL_FN_ncclCommDestroy,
	NDET_NCCL_FN_ncclGetErrorString,
	NDET_NCCL_FN_ncclRedOpCreatePreMulSum,
	NDET_NCCL_FN_ncclRedOpDestroy,
};

/* Looked up only for --nccl-symmetric (NCCL >= 2.27); an older NCCL runs without them. */
static const enum ndet_nccl_function perf_nccl_symmetric[] = {
	NDET_NCCL_FN_ncclMemAlloc,
	NDET_NCCL_FN_ncclMemFree,
	NDET_NCCL_FN_ncclCommWindowRegister,
	NDET_NCCL_FN_ncclCommWindowDeregister,
};

/* Fill `nccl`'s pointers of `functions`, in order; NULL, or the first name it lacks. */
static const char *perf_nccl_resolve(struct perf_nccl *nccl,
				     const enum ndet_nccl_function *functions, size_t count)
{
	for (size_t i = 0; i < count; i++) {
		const char *name = perf_nccl_names[functions[i]];
		void *symbol = dlsym(nccl->handle, name);
		if (symbol == NULL)
			return name;
		/* POSIX: a data pointer from dlsym holds a function's address. */
		memcpy((char *)&nccl->fn + perf_nccl_offsets[functions[i]], &symbol,
		       sizeof(symbol));
	}
	return NULL;
}

/*
 * Why NCCL cannot run on this layout of ranks, or NULL.  Ranks are threads of one
 * process; NCCL refuses two ranks of one communicator on one GPU of one process.
 */
static const char *perf_nccl_layout_problem(int nranks, int ngpus)
{
	if (nranks <= ngpus)
		return NULL;
	return "the ranks share GPU 0 in one process, which NCCL refuses (\"Duplicate GPU "
	       "detected\"); use at most one rank per GPU (-n)";
}

/* Load the real NCCL into `nccl`; false with the reason in `why` when it cannot be. */
bool perf_nccl_load(struct perf_nccl *nccl, char *why, size_t size)
{
	const char *configured = ndet_settings_get()->nccl_library;
	const char *name = configured[0] != '\0' ? configured : "libnccl.so.2";
	memset(nccl, 0, sizeof(*nccl));
	/* RTLD_LOCAL: NCCL's names stay out of the process's global scope. */
	nccl->handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (nccl->handle == NULL) {
		snprintf(why, size,
			 "cannot load %s (%s); set NCCL_DET_NCCL_LIBRARY to the real "
			 "libnccl.so.2",
			 name, dlerror());
		return false;
	}
	/* Every copy of nccl-det exports ncclDetGetVersion; the real NCCL never does. */
	if (dlsym(nccl->handle, "ncclDetGetVersion") != NULL) {
		snprintf(why, size,
			 "%s is nccl-det (its drop-in libnccl.so.2), not NCCL; set "
			 "NCCL_DET_NCCL_LIBRARY to the real libnccl.so.2",
			 name);
		goto refused;
	}
	const char *missing =
		perf_nccl_resolve(nccl, perf_nccl_required, PERF_COUNT_OF(perf_nccl_required));
	if (missing != NULL) {
		snprintf(why, size, "%s has no %s", name, missing);
		goto refused;
	}
	Dl_info info;
	snprintf(nccl->path, sizeof(nccl->path), "%s",
		 dladdr((void *)nccl->fn.ncclAllReduce, &info) != 0 && info.dli_fname != NULL
			 ? info.dli_fname
			 : name);
	ncclResult_t result = nccl->fn.ncclGetVersion(&nccl->version);
	if (result != ncclSuccess) {
		snprintf(why, size, "%s: ncclGetVersion failed (%d)", nccl->path, (int)result);
		goto refused;
	}
	return true;

refused:
	/* Left loaded: a copy of nccl-det (or an NCCL) carries a static CUDA runtime whose
	 * exit handlers not every runtime drops on dlclose (ThreadSanitizer's do not). */
	nccl->handle = NULL;
	return false;
}

void perf_check_nccl(struct perf_rank *me, ncclResult_t result, const char *what)
{
	const struct perf_nccl *nccl = &me->world->nccl;
	if (result == ncclSuccess &&
	    nccl->fn.ncclCommGetAsyncError(me->world->comms[me->rank], &result) == ncclSuccess &&
	    result == ncclSuccess)
		return;
	fprintf(stderr, "nccl-det-perf: rank %d: NCCL %s failed: %s\n", me->rank, what,
		nccl->fn.ncclGetErrorString(result));
	perf_die();
}

/* Window sizes: whole pages, as ncclCommWindowRegister wants them. */
static size_t perf_symmetric_bytes(const struct perf_options *o)
{
	const size_t page = NCCL_WIN_REQUIRED_ALIGNMENT;
	return (o->max_bytes + 16 + page - 1) / page * page;
}

/*
 * This rank's send and receive buffers from ncclMemAlloc, each registered as a
 * symmetric window.  Registration is collective: every rank thread calls it, in the
 * same order, on its own communicator.
 */
void perf_symmetric_setup(struct perf_rank *me)
{
	struct perf_world *world = me->world;
	const struct perf_nccl *nccl = &world->nccl;
	const size_t bytes = perf_symmetric_bytes(&world->options);
	char **buffers[2] = {&me->symmetric_send, &me->symmetric_recv};
	for (int i = 0; i < 2; i++)
		perf_check_nccl(me, nccl->fn.ncclMemAlloc((void **)buffers[i], bytes),
				"ncclMemAlloc");
	for (int i = 0; i < 2; i++)
		perf_check_nccl(me,
				nccl->fn.ncclCommWindowRegister(world->comms[me->rank], *buffers[i],
								bytes, &me->symmetric_windows[i],
								NCCL_WIN_COLL_SYMMETRIC),
				"ncclCommWindowRegister");
}

/* Undoes perf_symmetric_setup, in reverse order; collective like it. */
void perf_symmetric_teardown(struct perf_rank *me)
{
	struct perf_world *world = me->world;
	const struct perf_nccl *nccl = &world->nccl;
	for (int i = 1; i >= 0; i--)
		perf_check_nccl(me,
				nccl->fn.ncclCommWindowDeregister(world->comms[me->rank],
								  me->symmetric_windows[i]),
				"ncclCommWindowDeregister");
	perf_check_nccl(me, nccl->fn.ncclMemFree(me->symmetric_recv), "ncclMemFree");
	perf_check_nccl(me, nccl->fn.ncclMemFree(me->symmetric_send), "ncclMemFree");
}

/*
 * Decide whether the NCCL columns run, and say so.  Exits 2 when --nccl asked for
 * them and they cannot be had.
 */
void perf_nccl_decide(struct perf_world *world)
{
	const struct perf_options *o = &world->options;
	char why[4608];
	world->nccl_on = false;
	if (o->nccl == PERF_NCCL_OFF) {
		printf("# NCCL: not run (--no-nccl)\n");
		return;
	}
	const char *layout = perf_nccl_layout_problem(o->nranks, world->ngpus_visible);
	if (layout != NULL)
		snprintf(why, sizeof(why), "%s", layout);
	else if (perf_nccl_load(&world->nccl, why, sizeof(why)))
		world->nccl_on = true;
	if (!world->nccl_on) {
		printf("# NCCL: columns unavailable: %s\n", why);
		if (o->nccl == PERF_NCCL_REQUIRED) {
			fprintf(stderr, "nccl-det-perf: --nccl: NCCL cannot run here: %s\n", why);
			exit(2);
		}
		return;
	}
	const int v = world->nccl.version;
	printf("# NCCL: %s, version %d.%d.%d; one communicator of %d ranks (ncclCommInitAll over "
	       "GPUs 0..%d)\n",
	       world->nccl.path, v / 10000, v / 100 % 100, v % 100, o->nranks, o->nranks - 1);
	static const char *const knobs[] = {"NCCL_ALGO",          "NCCL_PROTO",
					    "NCCL_NVLS_ENABLE",   "NCCL_MIN_NCHANNELS",
					    "NCCL_MAX_NCHANNELS", "NCCL_P2P_LEVEL"};
	for (size_t i = 0; i < sizeof(knobs) / sizeof(knobs[0]); i++)
		if (getenv(knobs[i]) != NULL)
			printf("#   %s=%s\n", knobs[i], getenv(knobs[i]));
	printf("# ratio = NCCL time / nccl-det time (> 1: nccl-det is faster); nccl-diff = "
	       "elements of NCCL's result whose bits differ from the tree\n");
}

/* Decide whether the --nccl-symmetric columns run, and say so; never exits. */
void perf_symmetric_decide(struct perf_world *world)
{
	const struct perf_options *o = &world->options;
	world->symmetric_on = false;
	if (!o->nccl_symmetric)
		return;
	if (!world->nccl_on) {
		printf("# NCCL symmetric: columns unavailable: %s\n",
		       o->nccl == PERF_NCCL_OFF ? "NCCL is not run (--no-nccl)"
						: "NCCL cannot run here (see above)");
		return;
	}
	const char *missing = perf_nccl_resolve(&world->nccl, perf_nccl_symmetric,
						PERF_COUNT_OF(perf_nccl_symmetric));
	if (missing != NULL) {
		printf("# NCCL symmetric: columns unavailable: %s has no %s (symmetric windows "
		       "need NCCL >= 2.27)\n",
		       world->nccl.path, missing);
		return;
	}
	world->symmetric_on = true;
	printf("# NCCL symmetric: the same calls on ncclMemAlloc send/recv buffers of %zu B per "
	       "rank, registered with ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC); s-ratio "
	       "= NCCL-symm time / nccl-det time\n",
	       perf_symmetric_bytes(o));
}
