/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * A program (run with libnccl-det.so preloaded) that asks nccl-det which NCCL it uses
 * before any NCCL is loaded, as a startup log line may, then loads NCCL the way a
 * framework does (dlopen RTLD_GLOBAL) and calls it (test_early_query.sh).
 * usage: test_early_query NCCL-LIBRARY
 */
#include <dlfcn.h>
#include <stdio.h>

typedef int (*library_fn)(const char **path, int *version, const char **found_by);
typedef int (*group_fn)(void);

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	library_fn query = (library_fn)dlsym(RTLD_DEFAULT, "ncclDetGetNcclLibrary");
	if (query == NULL) {
		puts("ncclDetGetNcclLibrary is not there");
		return 1;
	}
	const char *path = NULL, *found_by = NULL;
	int version = -1;
	const int early = query(&path, &version, &found_by);
	printf("early: %d path='%s' version=%d found_by=%s\n", early, path, version, found_by);
	if (dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL) == NULL) {
		printf("dlopen: %s\n", dlerror());
		return 1;
	}
	group_fn start = (group_fn)dlsym(RTLD_DEFAULT, "ncclGroupStart");
	group_fn end = (group_fn)dlsym(RTLD_DEFAULT, "ncclGroupEnd");
	if (start == NULL || end == NULL)
		return 1;
	printf("ncclGroupStart: %d\n", start());
	printf("ncclGroupEnd: %d\n", end());
	const int late = query(&path, &version, &found_by);
	printf("late: %d found=%d\n", late, path != NULL && path[0] != '\0');
	return 0;
}
