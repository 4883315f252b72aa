/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Test-side helpers around the fake NCCL (declared in fake_nccl.h): rank threads
 * and cliques.  Linked into the tests, never into the fake libnccl.so.2, whose
 * exports stay NCCL's.
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/fake_nccl/fake_nccl.h"

struct fake_nccl_rank_thread {
	pthread_t thread;
	int rank;
	void (*fn)(int rank, void *arg);
	void *arg;
};

static void *fake_nccl_rank_main(void *opaque)
{
	struct fake_nccl_rank_thread *self = opaque;
	self->fn(self->rank, self->arg);
	return NULL;
}

int fake_nccl_run_ranks(int nranks, void (*fn)(int rank, void *arg), void *arg)
{
	if (nranks < 1)
		return -1;
	struct fake_nccl_rank_thread *threads = calloc((size_t)nranks, sizeof(*threads));
	if (threads == NULL)
		return -1;
	int started = 0, status = 0;
	for (; started < nranks; started++) {
		threads[started].rank = started;
		threads[started].fn = fn;
		threads[started].arg = arg;
		int error = pthread_create(&threads[started].thread, NULL, fake_nccl_rank_main,
					   &threads[started]);
		if (error != 0) {
			fprintf(stderr, "fake_nccl_run_ranks: pthread_create: %s\n",
				strerror(error));
			status = -1;
			break;
		}
	}
	for (int i = 0; i < started; i++) {
		int error = pthread_join(threads[i].thread, NULL);
		if (error != 0) {
			fprintf(stderr, "fake_nccl_run_ranks: pthread_join: %s\n", strerror(error));
			status = -1;
		}
	}
	free(threads);
	return status;
}

ncclResult_t fake_nccl_init_clique(ncclComm_t *comms, int nranks)
{
	ncclUniqueId id;
	ncclResult_t result = ncclGetUniqueId(&id);
	if (result != ncclSuccess)
		return result;
	result = ncclGroupStart();
	if (result != ncclSuccess)
		return result;
	for (int rank = 0; rank < nranks && result == ncclSuccess; rank++)
		result = ncclCommInitRank(&comms[rank], nranks, id, rank);
	ncclResult_t end = ncclGroupEnd();
	return result != ncclSuccess ? result : end;
}
