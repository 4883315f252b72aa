/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Loads NCCL the way JAX/XLA and the pynccl wrappers do: dlopen(NAME, RTLD_NOW |
 * RTLD_LOCAL) and dlsym(handle, ...), never the global scope.  Driven by
 * test_dropin_*.sh against the drop-in libnccl.so.2 and the fake NCCL.
 *
 *   test_dropin_load [--first PATH]... [--open NAME] [--names FILE] [--query]
 *                    [--comm PREFIX]
 *
 *   --first PATH   dlopen(PATH, RTLD_NOW | RTLD_LOCAL) first (an NCCL already loaded
 *                  by someone else, or an object inside a Python package tree)
 *   --open NAME    what to open (default "libnccl.so.2", the SONAME lookup XLA does);
 *                  prints "opened: FILE nccl-det=0|1"
 *   --names FILE   for every name of FILE: dlsym on the handle (it must come from the
 *                  opened object itself), call it with eight zero arguments, print
 *                  "NAME = CODE"
 *   --query        print what ncclDetGetNcclLibrary says: "nccl: PATH",
 *                  "found_by: HOW", "version: N"
 *   --comm PREFIX  one-rank communicator through the handle's PREFIXnccl* names
 *                  (PREFIX "" or "p"): GetUniqueId, CommInitRank, an in-place float
 *                  sum AllReduce, CommDestroy; prints "comm: CODES", "sum: VALUES",
 *                  "diverted: 0|1"
 * Exit status 0 when every step could be made (codes are printed, not judged).
 */
#include "config.h"

#include <dlfcn.h>
#include <link.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nccl.h>

typedef long (*zero_args_t)(long, long, long, long, long, long, long, long);

static int fail(const char *what, const char *detail)
{
	fprintf(stderr, "test_dropin_load: %s: %s\n", what, detail != NULL ? detail : "");
	return 1;
}

static void *lookup(void *handle, const char *prefix, const char *name)
{
	char full[128];
	snprintf(full, sizeof(full), "%s%s", prefix, name);
	void *address = dlsym(handle, full);
	if (address == NULL)
		fprintf(stderr, "test_dropin_load: %s not exported: %s\n", full, dlerror());
	return address;
}

static int call_names(void *handle, const char *file)
{
	struct link_map *map = NULL;
	if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == NULL)
		return fail("dlinfo", dlerror());
	FILE *names = fopen(file, "r");
	if (names == NULL)
		return fail("cannot open", file);
	char name[256];
	int status = 0;
	while (fgets(name, sizeof(name), names) != NULL) {
		name[strcspn(name, "\n")] = '\0';
		if (name[0] == '\0')
			continue;
		void *address = dlsym(handle, name);
		Dl_info where;
		if (address == NULL) {
			status = fail("not exported", name);
			continue;
		}
		/* dlsym(handle) also searches dependencies: it must be the drop-in's own. */
		if (dladdr(address, &where) == 0 || (uintptr_t)where.dli_fbase != map->l_addr) {
			status = fail("not defined by the opened object", name);
			continue;
		}
		long code = ((zero_args_t)address)(0, 0, 0, 0, 0, 0, 0, 0);
		printf("%s = %d\n", name, (int)code);
	}
	if (fclose(names) != 0)
		status = fail("cannot close", file);
	return status;
}

static int query(void *handle)
{
	ncclResult_t (*get_library)(const char **, int *, const char **) = (ncclResult_t(*)(
		const char **, int *, const char **))lookup(handle, "", "ncclDetGetNcclLibrary");
	if (get_library == NULL)
		return fail("ncclDetGetNcclLibrary", "not exported");
	const char *path = NULL;
	const char *found_by = NULL;
	int version = -1;
	ncclResult_t result = get_library(&path, &version, &found_by);
	if (result != ncclSuccess)
		return fail("ncclDetGetNcclLibrary", "failed");
	printf("nccl: %s\nfound_by: %s\nversion: %d\n", path, found_by, version);
	return 0;
}

static int comm(void *handle, const char *prefix)
{
	ncclResult_t (*get_id)(ncclUniqueId *) =
		(ncclResult_t(*)(ncclUniqueId *))lookup(handle, prefix, "ncclGetUniqueId");
	ncclResult_t (*init)(ncclComm_t *, int, ncclUniqueId, int) =
		(ncclResult_t(*)(ncclComm_t *, int, ncclUniqueId, int))lookup(handle, prefix,
									      "ncclCommInitRank");
	ncclResult_t (*allreduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
				  ncclComm_t, cudaStream_t) =
		(ncclResult_t(*)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
				 ncclComm_t, cudaStream_t))lookup(handle, prefix, "ncclAllReduce");
	ncclResult_t (*destroy)(ncclComm_t) =
		(ncclResult_t(*)(ncclComm_t))lookup(handle, prefix, "ncclCommDestroy");
	ncclResult_t (*query_comm)(ncclComm_t, int *, const char **) =
		(ncclResult_t(*)(ncclComm_t, int *, const char **))dlsym(handle,
									 "ncclDetCommQuery");
	if (get_id == NULL || init == NULL || allreduce == NULL || destroy == NULL ||
	    query_comm == NULL)
		return fail("comm", "a function is missing");
	static float data[4] = {1.5f, -2.0f, 3.25f, 0.0f};
	ncclUniqueId id;
	ncclComm_t communicator = NULL;
	int codes[4];
	codes[0] = (int)get_id(&id);
	codes[1] = (int)init(&communicator, 1, id, 0);
	codes[2] = (int)allreduce(data, data, 4, ncclFloat32, ncclSum, communicator, NULL);
	int diverted = -1;
	const char *reason = "";
	if (query_comm(communicator, &diverted, &reason) != ncclSuccess)
		reason = "query failed";
	codes[3] = (int)destroy(communicator);
	printf("comm: %d %d %d %d\nsum: %g %g %g %g\ndiverted: %d (%s)\n", codes[0], codes[1],
	       codes[2], codes[3], data[0], data[1], data[2], data[3], diverted,
	       reason != NULL ? reason : "");
	return 0;
}

int main(int argc, char **argv)
{
	const char *open_name = "libnccl.so.2";
	int status = 0;
	void *handle = NULL;
	for (int i = 1; i < argc; i++) {
		const char *option = argv[i];
		const char *value = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(option, "--first") == 0 && value != NULL) {
			if (dlopen(value, RTLD_NOW | RTLD_LOCAL) == NULL)
				return fail("cannot load", dlerror());
			i++;
		} else if (strcmp(option, "--open") == 0 && value != NULL) {
			open_name = value;
			i++;
		} else if (handle == NULL &&
			   (strcmp(option, "--names") == 0 || strcmp(option, "--query") == 0 ||
			    strcmp(option, "--comm") == 0)) {
			handle = dlopen(open_name, RTLD_NOW | RTLD_LOCAL);
			if (handle == NULL)
				return fail("cannot open", dlerror());
			struct link_map *map = NULL;
			if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == NULL)
				return fail("dlinfo", dlerror());
			printf("opened: %s nccl-det=%d\n", map->l_name,
			       dlsym(handle, "ncclDetGetVersion") != NULL);
			i--; /* read the option again, now that the handle exists */
		} else if (strcmp(option, "--names") == 0 && value != NULL) {
			status |= call_names(handle, value);
			i++;
		} else if (strcmp(option, "--query") == 0) {
			status |= query(handle);
		} else if (strcmp(option, "--comm") == 0 && value != NULL) {
			status |= comm(handle, value);
			i++;
		} else {
			return fail("bad arguments at", option);
		}
	}
	if (fflush(stdout) != 0)
		return 1;
	return status;
}
