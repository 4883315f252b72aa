/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The rest of the fake's API: ncclMemAlloc/Free, ncclGetVersion and ncclGetUniqueId,
 * buffer and window registration, PreMulSum reduction ops, the collectives and
 * send/recv, and ncclGroupStart, End and SimulateEnd.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test/fake_nccl/fake_nccl_internal.h"

static struct fake_token *fake_tokens;
static unsigned fake_id_serial, fake_token_serial;
static unsigned fake_mem_serial;

/* ------------------------------------------------------------------ API: memory, version */

FAKE_NCCL_API(ncclResult_t, ncclMemAlloc, void **ptr, size_t size);
ncclResult_t ncclMemAlloc(void **ptr, size_t size)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclMemAlloc");
	ncclResult_t result = ncclSuccess;
	struct fake_mem *mem = NULL;
	if (fake_should_fail("ncclMemAlloc", -1, &result)) {
		/* nothing allocated: result holds the requested code */
	} else if (ptr == NULL) {
		result = ncclInvalidArgument;
	} else {
		mem = calloc(1, sizeof(*mem));
		size_t rounded = (size + 4095) / 4096 * 4096;
		if (mem != NULL && rounded >= size)
			mem->base = aligned_alloc(4096, rounded == 0 ? 4096 : rounded);
		if (mem == NULL || mem->base == NULL) {
			free(mem);
			mem = NULL;
			result = ncclSystemError;
		} else {
			memset(mem->base, 0, rounded == 0 ? 4096 : rounded);
			mem->size = size == 0 ? 1 : size;
			pthread_mutex_lock(&fake_mem_lock);
			mem->serial = ++fake_mem_serial;
			mem->next = fake_mems;
			fake_mems = mem;
			pthread_mutex_unlock(&fake_mem_lock);
			*ptr = mem->base;
		}
	}
	if (mem != NULL)
		fake_arg(&line, "ptr=>mem%u", mem->serial);
	else
		fake_arg(&line, "ptr%s", ptr == NULL ? "=NULL" : "=>unset");
	fake_arg(&line, "size=%zu", size);
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclMemFree, void *ptr);
ncclResult_t ncclMemFree(void *ptr)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclMemFree");
	fake_arg_pointer(&line, "ptr", ptr);
	ncclResult_t result = ncclSuccess;
	if (!fake_should_fail("ncclMemFree", -1, &result) && ptr != NULL) {
		struct fake_mem *found = NULL;
		pthread_mutex_lock(&fake_mem_lock);
		for (struct fake_mem **link = &fake_mems; *link != NULL; link = &(*link)->next) {
			if ((*link)->base == ptr) {
				found = *link;
				*link = found->next;
				break;
			}
		}
		pthread_mutex_unlock(&fake_mem_lock);
		if (found == NULL) {
			fake_set_last_error("fake NCCL: ncclMemFree of memory it did not allocate");
			result = ncclInvalidArgument;
		} else {
			free(found->base);
			free(found);
		}
	}
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclGetVersion, int *version);
ncclResult_t ncclGetVersion(int *version)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclGetVersion");
	ncclResult_t result = ncclSuccess;
	if (!fake_should_fail("ncclGetVersion", -1, &result)) {
		/*
		 * As NCCL's topology detection does: free what libc allocated (with a
		 * preloaded allocator, only a free that is not libc's own survives it).
		 */
		free(realpath(".", NULL));
		if (version == NULL)
			result = ncclInvalidArgument;
		else
			*version =
				(int)fake_env_long("FAKE_NCCL_VERSION", FAKE_NCCL_DEFAULT_VERSION);
	}
	if (result == ncclSuccess)
		fake_arg(&line, "version=>%d", *version);
	else
		fake_arg(&line, "version=>unset");
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId *uniqueId);
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclGetUniqueId");
	ncclResult_t result = ncclSuccess;
	if (!fake_should_fail("ncclGetUniqueId", -1, &result)) {
		if (uniqueId == NULL) {
			result = ncclInvalidArgument;
		} else {
			pthread_mutex_lock(&fake_lock);
			unsigned serial = ++fake_id_serial;
			pthread_mutex_unlock(&fake_lock);
			memset(uniqueId, 0, sizeof(*uniqueId));
			memcpy(uniqueId->internal, FAKE_ID_MAGIC, strlen(FAKE_ID_MAGIC));
			memcpy(uniqueId->internal + strlen(FAKE_ID_MAGIC), &serial, sizeof(serial));
			/* Another process's ids never match ours. */
			pid_t pid = getpid();
			memcpy(uniqueId->internal + strlen(FAKE_ID_MAGIC) + sizeof(serial), &pid,
			       sizeof(pid));
		}
	}
	if (result == ncclSuccess)
		fake_arg_id(&line, "uniqueId=>", uniqueId);
	else
		fake_arg(&line, "uniqueId=>unset");
	fake_line_finish(&line, result);
	return result;
}

/* ------------------------------------------------------------------ API: registration */

static ncclResult_t fake_token_create(ncclComm_t comm, bool window, struct fake_token **out)
{
	ncclResult_t result = fake_comm_acquire(comm);
	if (result != ncclSuccess)
		return result;
	struct fake_token *token =
		window ? calloc(1, sizeof(struct ncclWindow_vidmem)) : calloc(1, sizeof(*token));
	if (token == NULL) {
		fake_comm_release(comm);
		return ncclSystemError;
	}
	token->window = window;
	token->comm = comm;
	pthread_mutex_lock(&fake_lock);
	token->serial = ++fake_token_serial;
	token->next = fake_tokens;
	fake_tokens = token;
	pthread_mutex_unlock(&fake_lock);
	fake_comm_release(comm);
	*out = token;
	return ncclSuccess;
}

static ncclResult_t fake_token_destroy(ncclComm_t comm, const void *handle, bool window)
{
	ncclResult_t result = fake_comm_acquire(comm);
	if (result != ncclSuccess)
		return result;
	struct fake_token *found = NULL;
	pthread_mutex_lock(&fake_lock);
	for (struct fake_token **link = &fake_tokens; *link != NULL; link = &(*link)->next) {
		if ((const void *)*link == handle && (*link)->window == window &&
		    (*link)->comm == comm) {
			found = *link;
			*link = found->next;
			break;
		}
	}
	pthread_mutex_unlock(&fake_lock);
	fake_comm_release(comm);
	if (found == NULL)
		return ncclInvalidArgument;
	free(found);
	return ncclSuccess;
}

static void fake_token_name(const void *handle, const char *prefix, char *name, size_t size)
{
	snprintf(name, size, "%s?", prefix);
	if (handle == NULL) {
		snprintf(name, size, "NULL");
		return;
	}
	pthread_mutex_lock(&fake_lock);
	for (struct fake_token *token = fake_tokens; token != NULL; token = token->next) {
		if ((const void *)token == handle) {
			snprintf(name, size, "%s%u", prefix, token->serial);
			break;
		}
	}
	pthread_mutex_unlock(&fake_lock);
}

FAKE_NCCL_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void *buff, size_t size,
	      void **handle);
ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommRegister");
	fake_arg_comm(&line, "comm", comm);
	fake_arg_pointer(&line, "buff", buff);
	fake_arg(&line, "size=%zu", size);
	ncclResult_t result = ncclSuccess;
	struct fake_token *token = NULL;
	if (!fake_should_fail("ncclCommRegister", fake_comm_rank(comm), &result)) {
		if (handle == NULL)
			result = ncclInvalidArgument;
		else
			result = fake_token_create(comm, false, &token);
		if (result == ncclSuccess)
			*handle = token;
	}
	if (token != NULL)
		fake_arg(&line, "handle=>reg%u", token->serial);
	else
		fake_arg(&line, "handle=>unset");
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void *handle);
ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommDeregister");
	fake_arg_comm(&line, "comm", comm);
	if (line.enabled) {
		char name[32];
		fake_token_name(handle, "reg", name, sizeof(name));
		fake_arg(&line, "handle=%s", name);
	}
	ncclResult_t result = ncclSuccess;
	if (!fake_should_fail("ncclCommDeregister", fake_comm_rank(comm), &result))
		result = fake_token_destroy(comm, handle, false);
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void *buff, size_t size,
	      ncclWindow_t *win, int winFlags);
ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win,
				    int winFlags)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommWindowRegister");
	fake_arg_comm(&line, "comm", comm);
	fake_arg_pointer(&line, "buff", buff);
	fake_arg(&line, "size=%zu", size);
	ncclResult_t result = ncclSuccess;
	struct fake_token *token = NULL;
	if (!fake_should_fail("ncclCommWindowRegister", fake_comm_rank(comm), &result)) {
		if (win == NULL)
			result = ncclInvalidArgument;
		else
			result = fake_token_create(comm, true, &token);
		if (result == ncclSuccess)
			*win = (ncclWindow_t)token;
	}
	if (token != NULL)
		fake_arg(&line, "win=>win%u", token->serial);
	else
		fake_arg(&line, "win=>unset");
	fake_arg(&line, "winFlags=%d", winFlags);
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win);
ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommWindowDeregister");
	fake_arg_comm(&line, "comm", comm);
	if (line.enabled) {
		char name[32];
		fake_token_name(win, "win", name, sizeof(name));
		fake_arg(&line, "win=%s", name);
	}
	ncclResult_t result = ncclSuccess;
	if (!fake_should_fail("ncclCommWindowDeregister", fake_comm_rank(comm), &result))
		result = fake_token_destroy(comm, win, true);
	fake_line_finish(&line, result);
	return result;
}

/* ------------------------------------------------------------------ API: reduction ops */

FAKE_NCCL_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t *op, void *scalar,
	      ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
				      ncclScalarResidence_t residence, ncclComm_t comm)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclRedOpCreatePreMulSum");
	ncclResult_t result = ncclSuccess;
	int created = -1;
	if (!fake_should_fail("ncclRedOpCreatePreMulSum", fake_comm_rank(comm), &result)) {
		result = fake_comm_acquire(comm);
		if (result == ncclSuccess) {
			if (op == NULL || scalar == NULL || !fake_datatype_reducible(datatype) ||
			    (residence != ncclScalarDevice &&
			     residence != ncclScalarHostImmediate)) {
				result = ncclInvalidArgument;
			} else {
				pthread_mutex_lock(&fake_lock);
				for (int i = 0; i < FAKE_MAX_OPS; i++) {
					struct fake_premul *premul = &comm->ops[i];
					if (premul->live)
						continue;
					premul->live = true;
					premul->datatype = datatype;
					premul->residence = residence;
					premul->pointer = scalar;
					memcpy(premul->value, scalar, fake_datatype_size(datatype));
					created = i;
					break;
				}
				pthread_mutex_unlock(&fake_lock);
				if (created < 0)
					result = ncclInvalidUsage;
				else
					*op = (ncclRedOp_t)((int)ncclNumOps + created);
			}
			fake_comm_release(comm);
		}
	}
	if (created >= 0)
		fake_arg(&line, "op=>op%d", (int)ncclNumOps + created);
	else
		fake_arg(&line, "op=>unset");
	fake_arg_pointer(&line, "scalar", scalar);
	fake_arg_datatype(&line, "datatype", datatype);
	fake_arg(&line, "residence=%s",
		 residence == ncclScalarDevice ? "ncclScalarDevice" : "ncclScalarHostImmediate");
	fake_arg_comm(&line, "comm", comm);
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm);
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclRedOpDestroy");
	fake_arg_op(&line, "op", op);
	fake_arg_comm(&line, "comm", comm);
	ncclResult_t result = ncclSuccess;
	if (!fake_should_fail("ncclRedOpDestroy", fake_comm_rank(comm), &result)) {
		result = fake_comm_acquire(comm);
		if (result == ncclSuccess) {
			int index = (int)op - (int)ncclNumOps;
			pthread_mutex_lock(&fake_lock);
			if (index < 0 || index >= FAKE_MAX_OPS || !comm->ops[index].live)
				result = ncclInvalidArgument;
			else
				comm->ops[index].live = false;
			pthread_mutex_unlock(&fake_lock);
			fake_comm_release(comm);
		}
	}
	fake_line_finish(&line, result);
	return result;
}

/* ------------------------------------------------------------------ API: collectives */

static void fake_arg_stream(struct fake_line *line, cudaStream_t stream)
{
	fake_arg_pointer(line, "stream", (const void *)stream);
}

FAKE_NCCL_API(ncclResult_t, ncclReduce, const void *sendbuff, void *recvbuff, size_t count,
	      ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
	      cudaStream_t stream);
ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
			ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclReduce");
	fake_arg_pointer(&line, "sendbuff", sendbuff);
	fake_arg_pointer(&line, "recvbuff", recvbuff);
	fake_arg(&line, "count=%zu", count);
	fake_arg_datatype(&line, "datatype", datatype);
	fake_arg_op(&line, "op", op);
	fake_arg(&line, "root=%d", root);
	fake_arg_comm(&line, "comm", comm);
	fake_arg_stream(&line, stream);
	ncclResult_t result = ncclSuccess;
	int rank = fake_comm_rank(comm);
	if (!fake_should_fail("ncclReduce", rank, &result)) {
		struct fake_post post = {.kind = FAKE_REDUCE,
					 .comm = comm,
					 .sendbuff = sendbuff,
					 .recvbuff = recvbuff,
					 .count = count,
					 .datatype = datatype,
					 .op = op,
					 .root = root};
		if (result == ncclSuccess)
			result = fake_collective(&post, true);
	}
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclBroadcast, const void *sendbuff, void *recvbuff, size_t count,
	      ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
			   ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclBroadcast");
	fake_arg_pointer(&line, "sendbuff", sendbuff);
	fake_arg_pointer(&line, "recvbuff", recvbuff);
	fake_arg(&line, "count=%zu", count);
	fake_arg_datatype(&line, "datatype", datatype);
	fake_arg(&line, "root=%d", root);
	fake_arg_comm(&line, "comm", comm);
	fake_arg_stream(&line, stream);
	ncclResult_t result = ncclSuccess;
	int rank = fake_comm_rank(comm);
	if (!fake_should_fail("ncclBroadcast", rank, &result)) {
		struct fake_post post = {.kind = FAKE_BROADCAST,
					 .comm = comm,
					 .sendbuff = sendbuff,
					 .recvbuff = recvbuff,
					 .count = count,
					 .datatype = datatype,
					 .root = root};
		if (result == ncclSuccess)
			result = fake_collective(&post, false);
	}
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclBcast, void *buff, size_t count, ncclDataType_t datatype, int root,
	      ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
		       cudaStream_t stream)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclBcast");
	fake_arg_pointer(&line, "buff", buff);
	fake_arg(&line, "count=%zu", count);
	fake_arg_datatype(&line, "datatype", datatype);
	fake_arg(&line, "root=%d", root);
	fake_arg_comm(&line, "comm", comm);
	fake_arg_stream(&line, stream);
	ncclResult_t result = ncclSuccess;
	/* As NCCL (collectives.cc): through the public, interposable name. */
	if (!fake_should_fail("ncclBcast", fake_comm_rank(comm), &result))
		result = ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclAllReduce, const void *sendbuff, void *recvbuff, size_t count,
	      ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
			   ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
			   cudaStream_t stream)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclAllReduce");
	fake_arg_pointer(&line, "sendbuff", sendbuff);
	fake_arg_pointer(&line, "recvbuff", recvbuff);
	fake_arg(&line, "count=%zu", count);
	fake_arg_datatype(&line, "datatype", datatype);
	fake_arg_op(&line, "op", op);
	fake_arg_comm(&line, "comm", comm);
	fake_arg_stream(&line, stream);
	ncclResult_t result = ncclSuccess;
	if (!fake_should_fail("ncclAllReduce", fake_comm_rank(comm), &result)) {
		struct fake_post post = {.kind = FAKE_ALLREDUCE,
					 .comm = comm,
					 .sendbuff = sendbuff,
					 .recvbuff = recvbuff,
					 .count = count,
					 .datatype = datatype,
					 .op = op,
					 .root = -1};
		if (result == ncclSuccess)
			result = fake_collective(&post, true);
	}
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclReduceScatter, const void *sendbuff, void *recvbuff,
	      size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
	      cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
			       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
			       cudaStream_t stream)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclReduceScatter");
	fake_arg_pointer(&line, "sendbuff", sendbuff);
	fake_arg_pointer(&line, "recvbuff", recvbuff);
	fake_arg(&line, "recvcount=%zu", recvcount);
	fake_arg_datatype(&line, "datatype", datatype);
	fake_arg_op(&line, "op", op);
	fake_arg_comm(&line, "comm", comm);
	fake_arg_stream(&line, stream);
	ncclResult_t result = ncclSuccess;
	if (!fake_should_fail("ncclReduceScatter", fake_comm_rank(comm), &result)) {
		struct fake_post post = {.kind = FAKE_REDUCESCATTER,
					 .comm = comm,
					 .sendbuff = sendbuff,
					 .recvbuff = recvbuff,
					 .count = recvcount,
					 .datatype = datatype,
					 .op = op,
					 .root = -1};
		if (result == ncclSuccess)
			result = fake_collective(&post, true);
	}
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclAllGather, const void *sendbuff, void *recvbuff, size_t sendcount,
	      ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
			   ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclAllGather");
	fake_arg_pointer(&line, "sendbuff", sendbuff);
	fake_arg_pointer(&line, "recvbuff", recvbuff);
	fake_arg(&line, "sendcount=%zu", sendcount);
	fake_arg_datatype(&line, "datatype", datatype);
	fake_arg_comm(&line, "comm", comm);
	fake_arg_stream(&line, stream);
	ncclResult_t result = ncclSuccess;
	if (!fake_should_fail("ncclAllGather", fake_comm_rank(comm), &result)) {
		struct fake_post post = {.kind = FAKE_ALLGATHER,
					 .comm = comm,
					 .sendbuff = sendbuff,
					 .recvbuff = recvbuff,
					 .count = sendcount,
					 .datatype = datatype,
					 .root = -1};
		if (result == ncclSuccess)
			result = fake_collective(&post, false);
	}
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclAlltoAll, const void *sendbuff, void *recvbuff, size_t count,
	      ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
			  ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclAlltoAll");
	fake_arg_pointer(&line, "sendbuff", sendbuff);
	fake_arg_pointer(&line, "recvbuff", recvbuff);
	fake_arg(&line, "count=%zu", count);
	fake_arg_datatype(&line, "datatype", datatype);
	fake_arg_comm(&line, "comm", comm);
	fake_arg_stream(&line, stream);
	ncclResult_t result = ncclSuccess;
	if (!fake_should_fail("ncclAlltoAll", fake_comm_rank(comm), &result)) {
		struct fake_post post = {.kind = FAKE_ALLTOALL,
					 .comm = comm,
					 .sendbuff = sendbuff,
					 .recvbuff = recvbuff,
					 .count = count,
					 .datatype = datatype,
					 .root = -1};
		if (result == ncclSuccess)
			result = fake_collective(&post, false);
	}
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclGather, const void *sendbuff, void *recvbuff, size_t count,
	      ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
			int root, ncclComm_t comm, cudaStream_t stream)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclGather");
	fake_arg_pointer(&line, "sendbuff", sendbuff);
	fake_arg_pointer(&line, "recvbuff", recvbuff);
	fake_arg(&line, "count=%zu", count);
	fake_arg_datatype(&line, "datatype", datatype);
	fake_arg(&line, "root=%d", root);
	fake_arg_comm(&line, "comm", comm);
	fake_arg_stream(&line, stream);
	ncclResult_t result = ncclSuccess;
	int rank = fake_comm_rank(comm);
	if (!fake_should_fail("ncclGather", rank, &result)) {
		struct fake_post post = {.kind = FAKE_GATHER,
					 .comm = comm,
					 .sendbuff = sendbuff,
					 .recvbuff = recvbuff,
					 .count = count,
					 .datatype = datatype,
					 .root = root};
		if (result == ncclSuccess)
			result = fake_collective(&post, false);
	}
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclScatter, const void *sendbuff, void *recvbuff, size_t count,
	      ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
			 ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclScatter");
	fake_arg_pointer(&line, "sendbuff", sendbuff);
	fake_arg_pointer(&line, "recvbuff", recvbuff);
	fake_arg(&line, "count=%zu", count);
	fake_arg_datatype(&line, "datatype", datatype);
	fake_arg(&line, "root=%d", root);
	fake_arg_comm(&line, "comm", comm);
	fake_arg_stream(&line, stream);
	ncclResult_t result = ncclSuccess;
	int rank = fake_comm_rank(comm);
	if (!fake_should_fail("ncclScatter", rank, &result)) {
		struct fake_post post = {.kind = FAKE_SCATTER,
					 .comm = comm,
					 .sendbuff = sendbuff,
					 .recvbuff = recvbuff,
					 .count = count,
					 .datatype = datatype,
					 .root = root};
		if (result == ncclSuccess)
			result = fake_collective(&post, false);
	}
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclSend, const void *sendbuff, size_t count, ncclDataType_t datatype,
	      int peer, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
		      ncclComm_t comm, cudaStream_t stream)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclSend");
	fake_arg_pointer(&line, "sendbuff", sendbuff);
	fake_arg(&line, "count=%zu", count);
	fake_arg_datatype(&line, "datatype", datatype);
	fake_arg(&line, "peer=%d", peer);
	fake_arg_comm(&line, "comm", comm);
	fake_arg_stream(&line, stream);
	ncclResult_t result = ncclSuccess;
	if (!fake_should_fail("ncclSend", fake_comm_rank(comm), &result)) {
		struct fake_post post = {.kind = FAKE_SEND,
					 .comm = comm,
					 .sendbuff = sendbuff,
					 .count = count,
					 .datatype = datatype,
					 .root = peer};
		if (result == ncclSuccess)
			result = fake_collective(&post, false);
	}
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclRecv, void *recvbuff, size_t count, ncclDataType_t datatype,
	      int peer, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
		      ncclComm_t comm, cudaStream_t stream)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclRecv");
	fake_arg_pointer(&line, "recvbuff", recvbuff);
	fake_arg(&line, "count=%zu", count);
	fake_arg_datatype(&line, "datatype", datatype);
	fake_arg(&line, "peer=%d", peer);
	fake_arg_comm(&line, "comm", comm);
	fake_arg_stream(&line, stream);
	ncclResult_t result = ncclSuccess;
	if (!fake_should_fail("ncclRecv", fake_comm_rank(comm), &result)) {
		struct fake_post post = {.kind = FAKE_RECV,
					 .comm = comm,
					 .recvbuff = recvbuff,
					 .count = count,
					 .datatype = datatype,
					 .root = peer};
		if (result == ncclSuccess)
			result = fake_collective(&post, false);
	}
	fake_line_finish(&line, result);
	return result;
}

/* ------------------------------------------------------------------ API: groups */

FAKE_NCCL_API(ncclResult_t, ncclGroupStart, void);
ncclResult_t ncclGroupStart(void)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclGroupStart");
	ncclResult_t result = ncclSuccess;
	if (!fake_should_fail("ncclGroupStart", -1, &result))
		fake_group.depth++;
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclGroupEnd, void);
ncclResult_t ncclGroupEnd(void)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclGroupEnd");
	ncclResult_t result = ncclSuccess;
	if (!fake_should_fail("ncclGroupEnd", -1, &result)) {
		if (fake_group.depth == 0) {
			fake_set_last_error("fake NCCL: ncclGroupEnd without ncclGroupStart");
			result = ncclInvalidUsage;
		} else if (--fake_group.depth == 0) {
			result = fake_group_flush(false);
		}
	}
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t *simInfo);
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclGroupSimulateEnd");
	fake_arg_pointer(&line, "simInfo", simInfo);
	ncclResult_t result = ncclSuccess;
	if (!fake_should_fail("ncclGroupSimulateEnd", -1, &result)) {
		if (simInfo != NULL && simInfo->magic != FAKE_SIM_INFO_MAGIC) {
			result = ncclInvalidArgument;
		} else if (fake_group.depth == 0) {
			fake_set_last_error(
				"fake NCCL: ncclGroupSimulateEnd without ncclGroupStart");
			result = ncclInvalidUsage;
		} else {
			if (--fake_group.depth == 0)
				result = fake_group_flush(true);
			if (simInfo != NULL)
				simInfo->estimatedTime = 1.0f;
		}
	}
	fake_line_finish(&line, result);
	return result;
}
