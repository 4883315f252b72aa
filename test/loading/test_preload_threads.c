/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Prints how many threads this process has once every constructor has run
 * (entries of /proc/self/task).  test_preload_silent.sh runs it with and without
 * libnccl-det.so preloaded: the preload must not start a thread.
 */
#include "config.h"

#include <dirent.h>
#include <stdio.h>

int main(void)
{
	DIR *tasks = opendir("/proc/self/task");
	if (tasks == NULL) {
		perror("opendir /proc/self/task");
		return 1;
	}
	int count = 0;
	for (struct dirent *entry = readdir(tasks); entry != NULL; entry = readdir(tasks)) {
		if (entry->d_name[0] != '.')
			count++;
	}
	if (closedir(tasks) != 0) {
		perror("closedir");
		return 1;
	}
	printf("%d\n", count);
	return 0;
}
