/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * What the files of the fake NCCL (fake_core.c, fake_trace.c, fake_exec.c,
 * fake_api_comm.c, fake_api_coll.c) share: types, state and internal functions.
 * Tests do not include it; they see the fake through nccl.h and fake_nccl.h.
 *
 * Concurrency: one process-wide mutex (fake_lock) guards every communicator, clique
 * and rendezvous slot, and one condition variable wakes every waiter.  Tests are
 * small, so simplicity beats throughput.  The trace has its own lock (never taken
 * together with fake_lock), and nothing calls a public nccl* name (PLT) while
 * holding a lock, because an interposer may sit in between and call back in.
 */
#ifndef FAKE_NCCL_INTERNAL_H_
#define FAKE_NCCL_INTERNAL_H_

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <nccl.h>

#include "test/fake_nccl/fake_nccl.h"

/*
 * Internal names are hidden: libnccl.so.2 exports only NCCL's (FAKE_NCCL_API).
 */
#pragma GCC visibility push(hidden)

/*
 * NCCL's NCCL_API macro with PROFAPI=1 (src/include/core.h): a weak public name and
 * a strong `p` alias of the same code.
 */
#define FAKE_NCCL_API(ret, func, ...)                                                              \
	__attribute__((visibility("default"), alias(#func))) ret p##func(__VA_ARGS__);             \
	__attribute__((visibility("default"), weak)) ret func(__VA_ARGS__)

#define FAKE_CONFIG_MAGIC   0xcafebeefu
#define FAKE_SIM_INFO_MAGIC 0x74685283u
#define FAKE_ID_MAGIC       "FAKENCCL"
#define FAKE_SCRATCH_BYTES  4096
#define FAKE_MAX_OPS        64
#define FAKE_LINE_BYTES     8192

enum fake_kind {
	FAKE_INIT,
	FAKE_ALLREDUCE,
	FAKE_REDUCE,
	FAKE_BROADCAST,
	FAKE_ALLGATHER,
	FAKE_REDUCESCATTER,
	FAKE_ALLTOALL,
	FAKE_GATHER,
	FAKE_SCATTER,
	FAKE_SEND,
	FAKE_RECV,
	FAKE_SPLIT,
	FAKE_SHRINK,
};

/* Rendezvous key spaces: shrink has its own so that a revoke cannot desynchronise it. */
enum fake_slot_class {
	FAKE_CLASS_COLLECTIVE,
	FAKE_CLASS_SHRINK,
	FAKE_CLASS_P2P,
};

struct fake_premul {
	bool live;
	ncclDataType_t datatype;
	ncclScalarResidence_t residence;
	unsigned char value[8]; /* ncclScalarHostImmediate: read at creation */
	const void *pointer;    /* ncclScalarDevice: read when the operation runs */
};

struct fake_clique;

struct ncclComm {
	struct ncclComm *next_live;
	unsigned serial;
	int users; /* calls in flight on this comm; freed when 0 and dead */
	bool dead;
	struct fake_clique *clique; /* NULL until the init rendezvous (or split) placed it */
	int rank, nranks, device;
	bool blocking;
	int polls_left; /* ncclInProgress answers still owed (non-blocking) */
	ncclResult_t async_error;
	void *scratch; /* from ncclMemAlloc, returned through ncclMemFree */
	uint64_t collective_seq, shrink_seq;
	uint64_t *send_seq, *recv_seq; /* per peer */
	struct fake_premul ops[FAKE_MAX_OPS];
};

struct fake_slot;

/* One rank's part of an operation. */
struct fake_post {
	enum fake_kind kind;
	struct ncclComm *comm;
	const void *sendbuff;
	void *recvbuff;
	size_t count;
	ncclDataType_t datatype;
	ncclRedOp_t op;
	int root; /* root, or the peer of a send/recv */
	bool premul;
	unsigned char scalar[8];
	/* split and shrink */
	int color, key;
	struct ncclComm *child;
	int *exclude;
	int exclude_count;
	int flags;
	/* init */
	ncclUniqueId id;
	/* state */
	bool detached; /* nobody waits: freed when the slot completes (non-blocking split) */
	bool owns_exclude;
	struct fake_slot *slot;
	struct fake_clique *clique;
	ncclResult_t result;
};

struct fake_slot {
	struct fake_slot *next;
	enum fake_slot_class class;
	uint64_t seq;
	int src, dst; /* p2p only */
	int expected, arrived, consumed;
	bool done, failed;
	int nposts;
	struct fake_post **posts; /* by rank; p2p: [0] send, [1] recv */
};

struct fake_clique {
	struct fake_clique *next_pending;
	bool pending; /* in fake_pending_cliques: the init rendezvous is still open */
	ncclUniqueId id;
	int nranks, joined, refs;
	bool complete, failed, revoked;
	ncclResult_t fail_code;
	struct fake_slot *slots;
};

/* Registration handles and windows: opaque to the caller, named in the trace. */
struct fake_token {
	struct fake_token *next;
	unsigned serial;
	bool window;
	struct ncclComm *comm;
};

struct ncclWindow_vidmem {
	struct fake_token token;
};

struct fake_mem {
	struct fake_mem *next;
	void *base;
	size_t size;
	unsigned serial;
};

struct fake_group {
	int depth;
	struct fake_post **posts;
	size_t count, capacity;
};

/*
 * One element as a number: integers sign- or zero-extended into 64 bits (adds and
 * multiplies wrap modulo 2^64, and storing truncates, so the result equals the
 * native type's wrap-around), floating point as double (one float/half/bfloat16
 * operation done in double and rounded once equals the native operation).
 */
union fake_value {
	uint64_t u;
	int64_t s;
	double f;
};

/* One line of the trace, built by fake_line_begin, fake_arg and fake_line_finish. */
struct fake_line {
	bool enabled;
	bool first_argument;
	size_t length;
	char text[FAKE_LINE_BYTES];
};

/*
 * Shared state, defined in fake_core.c.  fake_lock guards the communicators, cliques
 * and slots and fake_cond wakes their waiters; fake_mem_lock guards fake_mems, the
 * blocks from ncclMemAlloc.  fake_group and fake_last_error are per thread.
 */
extern pthread_mutex_t fake_lock;
extern pthread_cond_t fake_cond;
extern struct ncclComm *fake_live_comms;
extern pthread_mutex_t fake_mem_lock;
extern struct fake_mem *fake_mems;
extern _Thread_local struct fake_group fake_group;
extern _Thread_local char fake_last_error[256];

/* fake_core.c: environment, data types, communicators, cliques */
long fake_env_long(const char *name, long fallback);
void fake_set_last_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
bool fake_should_fail(const char *function, int rank, ncclResult_t *code);
size_t fake_datatype_size(ncclDataType_t datatype);
bool fake_datatype_reducible(ncclDataType_t datatype);
bool fake_datatype_is_float(ncclDataType_t datatype);
bool fake_datatype_is_signed(ncclDataType_t datatype);
union fake_value fake_load(const void *base, size_t index, ncclDataType_t datatype);
void fake_store(void *base, size_t index, ncclDataType_t datatype, union fake_value value);
union fake_value fake_round(ncclDataType_t datatype, union fake_value value);
union fake_value fake_combine(ncclDataType_t datatype, ncclRedOp_t op, union fake_value a,
			      union fake_value b);
ncclResult_t fake_comm_acquire(ncclComm_t comm);
void fake_comm_release(ncclComm_t comm);
int fake_comm_rank(ncclComm_t comm);
ncclResult_t fake_comm_place_locked(struct ncclComm *comm, int rank, int nranks);
ncclResult_t fake_comm_create(bool blocking, int device, struct ncclComm **out);
bool fake_comm_ready_locked(const struct ncclComm *comm);
ncclResult_t fake_comm_check_ready(ncclComm_t comm);
int fake_default_blocking(void);
ncclResult_t fake_config_blocking(const ncclConfig_t *config, int inherited, bool *blocking);
struct fake_clique *fake_clique_new_locked(int nranks);
void fake_slot_free(struct fake_slot *slot);
void fake_post_free(struct fake_post *post);
void fake_clique_unref_locked(struct fake_clique *clique);
void fake_slot_release_detached_locked(struct fake_clique *clique, struct fake_slot *slot);
void fake_slot_unlink_locked(struct fake_clique *clique, struct fake_slot *slot);
void fake_clique_fail_pending_locked(struct fake_clique *clique, ncclResult_t code,
				     bool keep_shrink);
void fake_clique_fail_locked(struct fake_clique *clique, ncclResult_t code);
void fake_deadline(struct timespec *deadline);
void fake_wait_or_fail_locked(struct fake_clique *clique, const struct timespec *deadline);
ncclResult_t fake_join_locked(struct ncclComm *comm, const ncclUniqueId *id);
ncclResult_t fake_wait_init_locked(struct ncclComm *comm);

/* fake_trace.c: the FAKE_NCCL_TRACE log */
void fake_line_add(struct fake_line *line, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void fake_line_begin(struct fake_line *line, const char *function);
void fake_arg(struct fake_line *line, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void fake_line_write(struct fake_line *line);
const char *fake_result_name(ncclResult_t result);
void fake_line_finish(struct fake_line *line, ncclResult_t result);
void fake_arg_pointer(struct fake_line *line, const char *what, const void *pointer);
bool fake_comm_is_live_locked(const struct ncclComm *comm);
void fake_comm_name(const struct ncclComm *comm, char *name, size_t size);
void fake_arg_comm(struct fake_line *line, const char *what, const struct ncclComm *comm);
void fake_arg_comm_out(struct fake_line *line, const char *what, ncclComm_t *comm, bool written);
void fake_arg_datatype(struct fake_line *line, const char *what, ncclDataType_t datatype);
void fake_arg_op(struct fake_line *line, const char *what, ncclRedOp_t op);
bool fake_id_serial_of(const ncclUniqueId *id, unsigned *serial);
void fake_arg_id(struct fake_line *line, const char *what, const ncclUniqueId *id);
void fake_arg_config(struct fake_line *line, const ncclConfig_t *config);

/* fake_exec.c: executing operations, groups */
ncclResult_t fake_group_defer(const struct fake_post *post);
void fake_note_nonblocking_locked(struct ncclComm *comm);
ncclResult_t fake_group_flush(bool simulate);
ncclResult_t fake_submit(struct fake_post *post, bool detach);
ncclResult_t fake_collective(struct fake_post *post, bool reduces);

#pragma GCC visibility pop

#endif /* FAKE_NCCL_INTERNAL_H_ */
