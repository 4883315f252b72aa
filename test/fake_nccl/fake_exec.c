/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * How the fake runs an operation: each rank posts its part to its clique's rendezvous
 * slot, and the last to arrive executes the collective, send/recv pair, split or shrink
 * for all of them.  Also the per-thread groups (operations deferred until the
 * outermost ncclGroupEnd) and the argument checks every collective shares.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "test/fake_nccl/fake_nccl_internal.h"

/* ------------------------------------------------------------------ execution */

static bool fake_size_product(size_t a, size_t b, size_t *product)
{
	if (a != 0 && b > SIZE_MAX / a)
		return false;
	*product = a * b;
	return true;
}

static void fake_set_results(struct fake_slot *slot, ncclResult_t result)
{
	for (int i = 0; i < slot->nposts; i++) {
		if (slot->posts[i] != NULL)
			slot->posts[i]->result = result;
	}
}

/* Element `index` of `post`'s send buffer, pre-multiplied when its op says so. */
static union fake_value fake_input(const struct fake_post *post, size_t index)
{
	union fake_value value = fake_load(post->sendbuff, index, post->datatype);
	if (post->premul) {
		union fake_value scalar = fake_load(post->scalar, 0, post->datatype);
		value = fake_combine(post->datatype, ncclProd, value, scalar);
	}
	return value;
}

/* Reduces `total` elements over all ranks, in rank order, into a new buffer. */
static ncclResult_t fake_reduce_all(struct fake_slot *slot, int nranks, size_t total,
				    unsigned char **out)
{
	const struct fake_post *first = slot->posts[0];
	ncclDataType_t datatype = first->datatype;
	size_t bytes;
	if (!fake_size_product(total, fake_datatype_size(datatype), &bytes))
		return ncclInvalidArgument;
	unsigned char *reduced = malloc(bytes == 0 ? 1 : bytes);
	if (reduced == NULL)
		return ncclSystemError;
	for (size_t i = 0; i < total; i++) {
		union fake_value value = fake_input(first, i);
		for (int r = 1; r < nranks; r++)
			value = fake_combine(datatype, first->op, value,
					     fake_input(slot->posts[r], i));
		if (first->op == ncclAvg) {
			if (fake_datatype_is_float(datatype))
				value.f /= nranks;
			else if (fake_datatype_is_signed(datatype))
				value.s /= nranks;
			else
				value.u /= (uint64_t)nranks;
			value = fake_round(datatype, value);
		}
		fake_store(reduced, i, datatype, value);
	}
	*out = reduced;
	return ncclSuccess;
}

/* Every rank posted the same operation with matching arguments? */
static ncclResult_t fake_check_match(struct fake_slot *slot, int nranks)
{
	const struct fake_post *first = slot->posts[0];
	for (int r = 1; r < nranks; r++) {
		const struct fake_post *post = slot->posts[r];
		if (post->kind != first->kind || post->datatype != first->datatype ||
		    post->count != first->count || post->root != first->root ||
		    post->premul != first->premul || (!first->premul && post->op != first->op)) {
			fake_set_last_error("fake NCCL: ranks called different collectives");
			return ncclInvalidUsage;
		}
	}
	return ncclSuccess;
}

static ncclResult_t fake_execute_collective(struct fake_slot *slot, int nranks)
{
	const struct fake_post *first = slot->posts[0];
	ncclResult_t result = fake_check_match(slot, nranks);
	if (result != ncclSuccess)
		return result;
	size_t size = fake_datatype_size(first->datatype), count = first->count, block, all;
	if (!fake_size_product(count, size, &block) ||
	    !fake_size_product(block, (size_t)nranks, &all))
		return ncclInvalidArgument;
	/* Nothing moves; the buffers may be NULL (memcpy may not even see those). */
	if (count == 0)
		return ncclSuccess;
	unsigned char *data = NULL;

	switch (first->kind) {
	case FAKE_ALLREDUCE:
	case FAKE_REDUCE:
		result = fake_reduce_all(slot, nranks, count, &data);
		if (result != ncclSuccess)
			return result;
		for (int r = 0; r < nranks; r++) {
			if (first->kind == FAKE_ALLREDUCE || r == first->root)
				memcpy(slot->posts[r]->recvbuff, data, block);
		}
		break;
	case FAKE_REDUCESCATTER:
		result = fake_reduce_all(slot, nranks, count * (size_t)nranks, &data);
		if (result != ncclSuccess)
			return result;
		for (int r = 0; r < nranks; r++)
			memcpy(slot->posts[r]->recvbuff, data + (size_t)r * block, block);
		break;
	case FAKE_BROADCAST:
		data = malloc(block == 0 ? 1 : block);
		if (data == NULL)
			return ncclSystemError;
		memcpy(data, slot->posts[first->root]->sendbuff, block);
		for (int r = 0; r < nranks; r++)
			memcpy(slot->posts[r]->recvbuff, data, block);
		break;
	case FAKE_ALLGATHER:
	case FAKE_GATHER:
		data = malloc(all == 0 ? 1 : all);
		if (data == NULL)
			return ncclSystemError;
		for (int r = 0; r < nranks; r++)
			memcpy(data + (size_t)r * block, slot->posts[r]->sendbuff, block);
		for (int r = 0; r < nranks; r++) {
			if (first->kind == FAKE_ALLGATHER || r == first->root)
				memcpy(slot->posts[r]->recvbuff, data, all);
		}
		break;
	case FAKE_SCATTER:
		data = malloc(all == 0 ? 1 : all);
		if (data == NULL)
			return ncclSystemError;
		memcpy(data, slot->posts[first->root]->sendbuff, all);
		for (int r = 0; r < nranks; r++)
			memcpy(slot->posts[r]->recvbuff, data + (size_t)r * block, block);
		break;
	case FAKE_ALLTOALL: {
		size_t total;
		if (!fake_size_product(all, (size_t)nranks, &total))
			return ncclInvalidArgument;
		data = malloc(total == 0 ? 1 : total);
		if (data == NULL)
			return ncclSystemError;
		/* data[receiver][sender] = sender's block for receiver */
		for (int sender = 0; sender < nranks; sender++) {
			const unsigned char *send = slot->posts[sender]->sendbuff;
			for (int receiver = 0; receiver < nranks; receiver++)
				memcpy(data + (size_t)receiver * all + (size_t)sender * block,
				       send + (size_t)receiver * block, block);
		}
		for (int r = 0; r < nranks; r++)
			memcpy(slot->posts[r]->recvbuff, data + (size_t)r * all, all);
		break;
	}
	default:
		return ncclInternalError;
	}
	free(data);
	return ncclSuccess;
}

static ncclResult_t fake_execute_p2p(struct fake_slot *slot)
{
	const struct fake_post *send = slot->posts[0], *recv = slot->posts[1];
	if (send->count != recv->count || send->datatype != recv->datatype) {
		fake_set_last_error("fake NCCL: send and recv disagree on count or datatype");
		return ncclInvalidUsage;
	}
	size_t bytes;
	if (!fake_size_product(send->count, fake_datatype_size(send->datatype), &bytes))
		return ncclInvalidArgument;
	if (bytes > 0)
		memmove(recv->recvbuff, send->sendbuff, bytes);
	return ncclSuccess;
}

/* Split/shrink: place the children of `members` (in new rank order) in a new clique. */
static ncclResult_t fake_make_child_clique(struct fake_post **members, int count)
{
	struct fake_clique *clique = fake_clique_new_locked(count);
	if (clique == NULL)
		return ncclSystemError;
	clique->complete = true;
	for (int i = 0; i < count; i++) {
		struct ncclComm *child = members[i]->child;
		ncclResult_t result = fake_comm_place_locked(child, i, count);
		if (result != ncclSuccess) {
			/* The children placed so far keep their reference; the rest fail. */
			if (clique->refs == 0)
				free(clique);
			return result;
		}
		child->clique = clique;
		clique->refs++;
	}
	return ncclSuccess;
}

static ncclResult_t fake_execute_split(struct fake_slot *slot, int nranks)
{
	if (nranks < 1)
		return ncclInternalError;
	for (int r = 0; r < nranks; r++) {
		if (slot->posts[r]->kind != FAKE_SPLIT)
			return ncclInvalidUsage;
	}
	struct fake_post **members = calloc((size_t)nranks, sizeof(*members));
	bool *placed = calloc((size_t)nranks, sizeof(*placed));
	if (members == NULL || placed == NULL) {
		free(members);
		free(placed);
		return ncclSystemError;
	}
	ncclResult_t result = ncclSuccess;
	for (int r = 0; r < nranks && result == ncclSuccess; r++) {
		if (placed[r] || slot->posts[r]->color == NCCL_SPLIT_NOCOLOR)
			continue;
		int color = slot->posts[r]->color, count = 0;
		/* Ranks of this color ordered by (key, parent rank): insertion sort. */
		for (int q = r; q < nranks; q++) {
			struct fake_post *post = slot->posts[q];
			if (post->color != color)
				continue;
			placed[q] = true;
			int at = count++;
			while (at > 0 && members[at - 1]->key > post->key) {
				members[at] = members[at - 1];
				at--;
			}
			members[at] = post;
		}
		result = fake_make_child_clique(members, count);
	}
	free(members);
	free(placed);
	return result;
}

static ncclResult_t fake_execute_shrink(struct fake_slot *slot, int parent_nranks)
{
	if (parent_nranks < 1)
		return ncclInternalError;
	struct fake_post **members = calloc((size_t)parent_nranks, sizeof(*members));
	if (members == NULL)
		return ncclSystemError;
	int count = 0;
	for (int r = 0; r < parent_nranks; r++) {
		if (slot->posts[r] != NULL)
			members[count++] = slot->posts[r];
	}
	ncclResult_t result = fake_make_child_clique(members, count);
	free(members);
	return result;
}

static bool fake_post_faults(const struct fake_post *post, int rank);

/*
 * A NULL buffer the operation needs (NCCL's checks off): the launch "succeeded" and
 * the kernel faulted, so nothing moves, every call returns ncclSuccess and the error
 * surfaces later, as ncclUnhandledCudaError from ncclCommGetAsyncError.
 */
static bool fake_slot_faults_locked(struct fake_slot *slot)
{
	if (slot->class == FAKE_CLASS_SHRINK)
		return false;
	bool faults = false;
	for (int i = 0; i < slot->nposts; i++) {
		const struct fake_post *post = slot->posts[i];
		if (post != NULL && post->kind != FAKE_SPLIT &&
		    fake_post_faults(post, post->comm->rank))
			faults = true;
	}
	if (!faults)
		return false;
	for (int i = 0; i < slot->nposts; i++) {
		struct fake_post *post = slot->posts[i];
		if (post != NULL && post->comm->async_error == ncclSuccess)
			post->comm->async_error = ncclUnhandledCudaError;
	}
	return true;
}

static void fake_execute_locked(struct fake_clique *clique, struct fake_slot *slot)
{
	ncclResult_t result;
	if (fake_slot_faults_locked(slot))
		result = ncclSuccess;
	else if (slot->class == FAKE_CLASS_P2P)
		result = fake_execute_p2p(slot);
	else if (slot->class == FAKE_CLASS_SHRINK)
		result = fake_execute_shrink(slot, clique->nranks);
	else if (slot->posts[0]->kind == FAKE_SPLIT)
		result = fake_execute_split(slot, clique->nranks);
	else
		result = fake_execute_collective(slot, clique->nranks);
	fake_set_results(slot, result);
	slot->done = true;
	fake_slot_release_detached_locked(clique, slot);
	if (slot->consumed == slot->expected) {
		fake_slot_unlink_locked(clique, slot);
		fake_slot_free(slot);
	}
	pthread_cond_broadcast(&fake_cond);
}

/* Offers `post` to its rendezvous; runs the operation when it is the last one. */
static ncclResult_t fake_post_locked(struct fake_post *post)
{
	struct ncclComm *comm = post->comm;
	struct fake_clique *clique = comm->clique;
	if (!fake_comm_ready_locked(comm)) {
		fake_set_last_error("fake NCCL: communicator used before it is ready");
		return ncclInvalidArgument;
	}
	if (clique->failed)
		return clique->fail_code;
	if (clique->revoked && post->kind != FAKE_SHRINK) {
		fake_set_last_error("fake NCCL: communicator was revoked");
		return ncclInvalidUsage;
	}
	if (post->kind == FAKE_SHRINK && (post->flags & NCCL_SHRINK_ABORT)) {
		clique->revoked = true;
		fake_clique_fail_pending_locked(clique, ncclRemoteError, true);
	}

	enum fake_slot_class class = FAKE_CLASS_COLLECTIVE;
	uint64_t seq;
	int src = -1, dst = -1, index = comm->rank, expected = clique->nranks;
	if (post->kind == FAKE_SEND || post->kind == FAKE_RECV) {
		class = FAKE_CLASS_P2P;
		src = post->kind == FAKE_SEND ? comm->rank : post->root;
		dst = post->kind == FAKE_SEND ? post->root : comm->rank;
		seq = post->kind == FAKE_SEND ? comm->send_seq[post->root]++
					      : comm->recv_seq[post->root]++;
		index = post->kind == FAKE_SEND ? 0 : 1;
		expected = 2;
	} else if (post->kind == FAKE_SHRINK) {
		class = FAKE_CLASS_SHRINK;
		seq = comm->shrink_seq++;
		expected = clique->nranks - post->exclude_count;
	} else {
		seq = comm->collective_seq++;
	}

	struct fake_slot *slot = NULL;
	for (struct fake_slot *s = clique->slots; s != NULL; s = s->next) {
		if (s->class == class && s->seq == seq && s->src == src && s->dst == dst) {
			slot = s;
			break;
		}
	}
	if (slot == NULL) {
		slot = calloc(1, sizeof(*slot));
		int nposts = class == FAKE_CLASS_P2P ? 2 : clique->nranks;
		if (slot != NULL)
			slot->posts = calloc((size_t)nposts, sizeof(*slot->posts));
		if (slot == NULL || slot->posts == NULL) {
			free(slot);
			fake_set_last_error("fake NCCL: out of memory");
			return ncclSystemError;
		}
		slot->class = class;
		slot->seq = seq;
		slot->src = src;
		slot->dst = dst;
		slot->expected = expected;
		slot->nposts = nposts;
		slot->next = clique->slots;
		clique->slots = slot;
	}
	if (slot->done || slot->posts[index] != NULL || slot->expected != expected) {
		fake_set_last_error("fake NCCL: ranks disagree on the operation sequence");
		return ncclInvalidUsage;
	}
	if (post->premul) {
		const struct fake_premul *premul = &comm->ops[post->op - ncclNumOps];
		if (premul->residence == ncclScalarDevice)
			memcpy(post->scalar, premul->pointer, fake_datatype_size(post->datatype));
		else
			memcpy(post->scalar, premul->value, sizeof(post->scalar));
	}
	slot->posts[index] = post;
	slot->arrived++;
	post->slot = slot;
	post->clique = clique;
	post->result = ncclSuccess;
	clique->refs++;
	if (slot->arrived == slot->expected)
		fake_execute_locked(clique, slot);
	return ncclSuccess;
}

static ncclResult_t fake_wait_post_locked(struct fake_post *post)
{
	struct fake_slot *slot = post->slot;
	struct fake_clique *clique = post->clique;
	struct timespec deadline;
	fake_deadline(&deadline);
	while (!slot->done)
		fake_wait_or_fail_locked(clique, &deadline);
	ncclResult_t result = post->result;
	slot->consumed++;
	if (slot->consumed == (slot->failed ? slot->arrived : slot->expected)) {
		fake_slot_unlink_locked(clique, slot);
		fake_slot_free(slot);
	}
	fake_clique_unref_locked(clique);
	return result;
}

/* ------------------------------------------------------------------ groups */

static struct fake_post *fake_post_clone(const struct fake_post *post)
{
	struct fake_post *copy = malloc(sizeof(*copy));
	if (copy == NULL)
		return NULL;
	*copy = *post;
	copy->owns_exclude = false;
	if (post->exclude_count > 0) {
		copy->exclude = malloc((size_t)post->exclude_count * sizeof(*copy->exclude));
		if (copy->exclude == NULL) {
			free(copy);
			return NULL;
		}
		memcpy(copy->exclude, post->exclude, (size_t)post->exclude_count * sizeof(int));
		copy->owns_exclude = true;
	}
	return copy;
}

/* Keeps `post` (and the pin on its communicator) until the outermost ncclGroupEnd. */
ncclResult_t fake_group_defer(const struct fake_post *post)
{
	struct fake_group *group = &fake_group;
	if (group->count == group->capacity) {
		size_t capacity = group->capacity == 0 ? 16 : 2 * group->capacity;
		void *grown = realloc(group->posts, capacity * sizeof(*group->posts));
		if (grown == NULL)
			return ncclSystemError;
		group->posts = grown;
		group->capacity = capacity;
	}
	struct fake_post *copy = fake_post_clone(post);
	if (copy == NULL)
		return ncclSystemError;
	pthread_mutex_lock(&fake_lock);
	post->comm->users++;
	pthread_mutex_unlock(&fake_lock);
	group->posts[group->count++] = copy;
	return ncclSuccess;
}

void fake_note_nonblocking_locked(struct ncclComm *comm)
{
	comm->polls_left =
		(int)fake_env_long("FAKE_NCCL_ASYNC_POLLS", FAKE_NCCL_DEFAULT_ASYNC_POLLS);
	if (comm->polls_left < 0)
		comm->polls_left = 0;
}

/*
 * The outermost ncclGroupEnd: post every deferred operation before waiting for any,
 * so that one thread can drive several ranks.  Inits first (NCCL does not mix them
 * with collectives in one group).
 */
ncclResult_t fake_group_flush(bool simulate)
{
	struct fake_post **posts = fake_group.posts;
	size_t count = fake_group.count;
	fake_group.posts = NULL;
	fake_group.count = fake_group.capacity = 0;

	ncclResult_t result = ncclSuccess;
	bool in_progress = false;
	pthread_mutex_lock(&fake_lock);
	for (size_t i = 0; i < count; i++) {
		struct fake_post *post = posts[i];
		if (post->kind != FAKE_INIT)
			continue;
		post->result = fake_join_locked(post->comm, &post->id);
	}
	for (size_t i = 0; i < count; i++) {
		struct fake_post *post = posts[i];
		if (post->kind != FAKE_INIT || post->result != ncclSuccess)
			continue;
		if (post->comm->blocking) {
			post->result = fake_wait_init_locked(post->comm);
		} else {
			fake_note_nonblocking_locked(post->comm);
			in_progress = true;
		}
	}
	for (size_t i = 0; i < count; i++) {
		struct fake_post *post = posts[i];
		post->slot = NULL;
		if (post->kind == FAKE_INIT || simulate)
			continue;
		post->result = fake_post_locked(post);
	}
	for (size_t i = 0; i < count; i++) {
		struct fake_post *post = posts[i];
		if (post->slot == NULL)
			continue;
		post->result = fake_wait_post_locked(post);
		struct ncclComm *target = post->child != NULL ? post->child : post->comm;
		/*
		 * Non-blocking: NCCL's group end returns before its async thread has
		 * launched the work, and ncclCommGetAsyncError says ncclInProgress until
		 * it has (collectives too, not only inits and splits).
		 */
		if (!target->blocking && post->result == ncclSuccess) {
			fake_note_nonblocking_locked(target);
			in_progress = true;
		}
	}
	pthread_mutex_unlock(&fake_lock);

	for (size_t i = 0; i < count; i++) {
		if (posts[i]->result != ncclSuccess && result == ncclSuccess)
			result = posts[i]->result;
		fake_comm_release(posts[i]->comm);
		fake_post_free(posts[i]);
	}
	free(posts);
	if (result == ncclSuccess && in_progress)
		result = ncclInProgress;
	return result;
}

/*
 * A collective-like operation: validated by the caller, pinned here, then deferred
 * (inside a group), posted without waiting (`detach`: non-blocking split/shrink), or
 * run to completion.
 */
ncclResult_t fake_submit(struct fake_post *post, bool detach)
{
	if (fake_group.depth > 0)
		return fake_group_defer(post);
	if (detach) {
		struct fake_post *copy = fake_post_clone(post);
		if (copy == NULL)
			return ncclSystemError;
		copy->detached = true;
		pthread_mutex_lock(&fake_lock);
		if (copy->child != NULL)
			fake_note_nonblocking_locked(copy->child);
		/* Once posted, the slot owns `copy` (it may even be freed before we return). */
		ncclResult_t result = fake_post_locked(copy);
		pthread_mutex_unlock(&fake_lock);
		if (result != ncclSuccess) {
			fake_post_free(copy);
			return result;
		}
		return ncclInProgress;
	}
	pthread_mutex_lock(&fake_lock);
	ncclResult_t result = fake_post_locked(post);
	if (result == ncclSuccess)
		result = fake_wait_post_locked(post);
	/* Non-blocking: in progress until polled, as in fake_group_flush. */
	if (result == ncclSuccess && !post->comm->blocking) {
		fake_note_nonblocking_locked(post->comm);
		result = ncclInProgress;
	}
	pthread_mutex_unlock(&fake_lock);
	return result;
}

/*
 * NCCL's pointer-check mode: NCCL_CHECK_POINTERS=1 (up to 2.28), or NCCL_CHECK_MODE
 * set to anything but DEFAULT (its successor).  Off by default, as in NCCL.
 */
static bool fake_check_mode(void)
{
	if (fake_env_long("NCCL_CHECK_POINTERS", 0) == 1)
		return true;
	const char *mode = getenv("NCCL_CHECK_MODE");
	return mode != NULL && mode[0] != '\0' && strcasecmp(mode, "DEFAULT") != 0;
}

static bool fake_kind_rooted(enum fake_kind kind)
{
	return kind == FAKE_REDUCE || kind == FAKE_BROADCAST || kind == FAKE_GATHER ||
	       kind == FAKE_SCATTER || kind == FAKE_SEND || kind == FAKE_RECV;
}

/*
 * The buffers NCCL's ArgsCheck validates in check mode (argcheck.cc): send/recv check
 * their one buffer when count > 0; every other collective checks sendbuff unless it
 * is a broadcast on a non-root rank and recvbuff unless it is a reduce on a non-root
 * rank, whatever the count.  Host memory is the fake's device memory, so only NULL
 * is an invalid pointer here.
 */
static ncclResult_t fake_check_pointers(const struct fake_post *post, int rank)
{
	bool send_ok = post->sendbuff != NULL, recv_ok = post->recvbuff != NULL;
	switch (post->kind) {
	case FAKE_SEND:
		send_ok = send_ok || post->count == 0;
		recv_ok = true;
		break;
	case FAKE_RECV:
		send_ok = true;
		recv_ok = recv_ok || post->count == 0;
		break;
	default:
		send_ok = send_ok || (post->kind == FAKE_BROADCAST && rank != post->root);
		recv_ok = recv_ok || (post->kind == FAKE_REDUCE && rank != post->root);
		break;
	}
	if (send_ok && recv_ok)
		return ncclSuccess;
	fake_set_last_error("fake NCCL: %s is not a valid pointer",
			    send_ok ? "recvbuff" : "sendbuff");
	return ncclInvalidArgument;
}

/*
 * With the checks off, a NULL buffer that the operation reads or writes is what a
 * faulting kernel is on a GPU: the call returned ncclSuccess long before.  Does
 * `post` (rank `rank`) touch such a buffer?
 */
static bool fake_post_faults(const struct fake_post *post, int rank)
{
	if (post->count == 0)
		return false;
	bool root = rank == post->root;
	bool reads = true, writes = true;
	switch (post->kind) {
	case FAKE_SEND:
		writes = false;
		break;
	case FAKE_RECV:
		reads = false;
		break;
	case FAKE_BROADCAST:
	case FAKE_SCATTER:
		reads = root;
		break;
	case FAKE_REDUCE:
	case FAKE_GATHER:
		writes = root;
		break;
	default:
		break;
	}
	return (reads && post->sendbuff == NULL) || (writes && post->recvbuff == NULL);
}

/* Common path of the data-moving collectives: NCCL's ArgsCheck order, then submit. */
ncclResult_t fake_collective(struct fake_post *post, bool reduces)
{
	ncclComm_t comm = post->comm;
	ncclResult_t result = fake_comm_acquire(comm);
	if (result != ncclSuccess)
		return result;
	result = fake_comm_check_ready(comm);
	if (result == ncclSuccess && fake_kind_rooted(post->kind)) {
		pthread_mutex_lock(&fake_lock);
		bool in_range = post->root >= 0 && post->root < comm->nranks;
		pthread_mutex_unlock(&fake_lock);
		if (!in_range) {
			fake_set_last_error("fake NCCL: root/peer %d out of range", post->root);
			result = ncclInvalidArgument;
		}
	}
	if (result == ncclSuccess && fake_datatype_size(post->datatype) == 0) {
		fake_set_last_error("fake NCCL: invalid datatype %d", (int)post->datatype);
		result = ncclInvalidArgument;
	}
	if (result == ncclSuccess && reduces) {
		if (!fake_datatype_reducible(post->datatype)) {
			fake_set_last_error("fake NCCL: cannot reduce datatype %d",
					    (int)post->datatype);
			result = ncclInvalidArgument;
		} else if ((int)post->op >= (int)ncclNumOps) {
			pthread_mutex_lock(&fake_lock);
			int index = (int)post->op - (int)ncclNumOps;
			bool live = index < FAKE_MAX_OPS && comm->ops[index].live &&
				    comm->ops[index].datatype == post->datatype;
			pthread_mutex_unlock(&fake_lock);
			if (!live) {
				fake_set_last_error("fake NCCL: unknown reduction op %d",
						    (int)post->op);
				result = ncclInvalidArgument;
			}
			post->premul = true;
		} else if ((int)post->op < 0) {
			result = ncclInvalidArgument;
		}
	}
	if (result == ncclSuccess && fake_check_mode())
		result = fake_check_pointers(post, fake_comm_rank(comm));
	if (result == ncclSuccess)
		result = fake_submit(post, false);
	fake_comm_release(comm);
	return result;
}
