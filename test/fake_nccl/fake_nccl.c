/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The fake NCCL (libnccl.so.2 for the CPU tests).  Behaviour and knobs: fake_nccl.h.
 *
 * Concurrency: one process-wide mutex (fake_lock) guards every communicator, clique
 * and rendezvous slot, and one condition variable wakes every waiter.  Tests are
 * small, so simplicity beats throughput.  The trace has its own lock (never taken
 * together with fake_lock), and nothing calls a public nccl* name (PLT) while
 * holding a lock, because an interposer may sit in between and call back in.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <nccl.h>

#include "fake_nccl.h"

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

static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fake_cond = PTHREAD_COND_INITIALIZER;
static struct ncclComm *fake_live_comms;
static struct fake_clique *fake_pending_cliques;
static struct fake_token *fake_tokens;
static unsigned fake_comm_serial, fake_id_serial, fake_token_serial;

static pthread_mutex_t fake_mem_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fake_mem *fake_mems;
static unsigned fake_mem_serial;

static _Thread_local struct fake_group fake_group;
static _Thread_local char fake_last_error[256];

/* ------------------------------------------------------------------ environment */

static long fake_env_long(const char *name, long fallback)
{
	const char *value = getenv(name);
	if (value == NULL || value[0] == '\0')
		return fallback;
	char *end = NULL;
	errno = 0;
	long parsed = strtol(value, &end, 0);
	if (errno != 0 || end == value || *end != '\0')
		return fallback;
	return parsed;
}

static void fake_set_last_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fake_set_last_error(const char *fmt, ...)
{
	va_list args;
	va_start(args, fmt);
	vsnprintf(fake_last_error, sizeof(fake_last_error), fmt, args);
	va_end(args);
}

/*
 * FAKE_NCCL_FAIL: does `function` fail now, and with which code?  `rank` is the rank
 * the call acts for (-1 when it has none).
 */
static bool fake_should_fail(const char *function, int rank, ncclResult_t *code)
{
	const char *list = getenv("FAKE_NCCL_FAIL");
	if (list == NULL || list[0] == '\0')
		return false;
	size_t length = strlen(function);
	for (const char *token = list; token != NULL && *token != '\0';) {
		const char *comma = strchr(token, ',');
		size_t token_length = comma != NULL ? (size_t)(comma - token) : strlen(token);
		if (token_length >= length && strncmp(token, function, length) == 0 &&
		    (token_length == length || token[length] == '=')) {
			long fail_rank = fake_env_long("FAKE_NCCL_FAIL_RANK", -1);
			if (fail_rank >= 0 && rank >= 0 && rank != fail_rank)
				return false;
			*code = FAKE_NCCL_DEFAULT_FAIL_CODE;
			if (token_length > length) {
				char number[32];
				size_t digits = token_length - length - 1;
				if (digits >= sizeof(number))
					digits = sizeof(number) - 1;
				memcpy(number, token + length + 1, digits);
				number[digits] = '\0';
				*code = (ncclResult_t)strtol(number, NULL, 0);
			}
			fake_set_last_error("fake NCCL: %s failed on request (FAKE_NCCL_FAIL)",
					    function);
			return true;
		}
		token = comma != NULL ? comma + 1 : NULL;
	}
	return false;
}

/* ------------------------------------------------------------------ trace */

static pthread_mutex_t fake_trace_lock = PTHREAD_MUTEX_INITIALIZER;
static int fake_trace_fd = -1;
static char fake_trace_path[4096];
static struct {
	const void *pointer;
	unsigned id;
} * fake_pointer_names;
static size_t fake_pointer_count, fake_pointer_capacity;

struct fake_line {
	bool enabled;
	bool first_argument;
	size_t length;
	char text[FAKE_LINE_BYTES];
};

/* Opens (or re-opens, when FAKE_NCCL_TRACE changed) the trace; false when tracing is off. */
static bool fake_trace_sync(void)
{
	const char *path = getenv("FAKE_NCCL_TRACE");
	if (path == NULL || path[0] == '\0')
		return false;
	bool ok = true;
	pthread_mutex_lock(&fake_trace_lock);
	if (fake_trace_fd < 0 || strcmp(path, fake_trace_path) != 0) {
		if (fake_trace_fd >= 0 && close(fake_trace_fd) != 0)
			perror("fake NCCL: close trace");
		fake_trace_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
		if (fake_trace_fd < 0) {
			fprintf(stderr, "fake NCCL: cannot open FAKE_NCCL_TRACE=%s: %s\n", path,
				strerror(errno));
			ok = false;
		}
		snprintf(fake_trace_path, sizeof(fake_trace_path), "%s", path);
		/* A new trace names pointers from p1 again. */
		fake_pointer_count = 0;
	}
	pthread_mutex_unlock(&fake_trace_lock);
	return ok;
}

static void fake_line_add(struct fake_line *line, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void fake_line_add(struct fake_line *line, const char *fmt, ...)
{
	if (!line->enabled || line->length >= sizeof(line->text) - 1)
		return;
	va_list args;
	va_start(args, fmt);
	int written =
	    vsnprintf(line->text + line->length, sizeof(line->text) - line->length, fmt, args);
	va_end(args);
	if (written < 0)
		return;
	line->length += (size_t)written;
	if (line->length >= sizeof(line->text))
		line->length = sizeof(line->text) - 1;
}

static void fake_line_begin(struct fake_line *line, const char *function)
{
	line->enabled = fake_trace_sync();
	line->first_argument = true;
	line->length = 0;
	fake_line_add(line, "%s(", function);
}

static void fake_arg(struct fake_line *line, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void fake_arg(struct fake_line *line, const char *fmt, ...)
{
	if (!line->enabled || line->length >= sizeof(line->text) - 1)
		return;
	if (!line->first_argument)
		fake_line_add(line, ", ");
	line->first_argument = false;
	va_list args;
	va_start(args, fmt);
	int written =
	    vsnprintf(line->text + line->length, sizeof(line->text) - line->length, fmt, args);
	va_end(args);
	if (written < 0)
		return;
	line->length += (size_t)written;
	if (line->length >= sizeof(line->text))
		line->length = sizeof(line->text) - 1;
}

static void fake_line_write(struct fake_line *line)
{
	if (!line->enabled)
		return;
	fake_line_add(line, "\n");
	pthread_mutex_lock(&fake_trace_lock);
	size_t done = 0;
	while (fake_trace_fd >= 0 && done < line->length) {
		ssize_t written = write(fake_trace_fd, line->text + done, line->length - done);
		if (written < 0 && errno == EINTR)
			continue;
		if (written <= 0) {
			fprintf(stderr, "fake NCCL: cannot write the trace: %s\n", strerror(errno));
			break;
		}
		done += (size_t)written;
	}
	pthread_mutex_unlock(&fake_trace_lock);
}

static const char *fake_result_name(ncclResult_t result)
{
	switch (result) {
	case ncclSuccess:
		return "ncclSuccess";
	case ncclUnhandledCudaError:
		return "ncclUnhandledCudaError";
	case ncclSystemError:
		return "ncclSystemError";
	case ncclInternalError:
		return "ncclInternalError";
	case ncclInvalidArgument:
		return "ncclInvalidArgument";
	case ncclInvalidUsage:
		return "ncclInvalidUsage";
	case ncclRemoteError:
		return "ncclRemoteError";
	case ncclInProgress:
		return "ncclInProgress";
	case ncclNumResults:
		break;
	}
	return "ncclResult?";
}

static void fake_line_finish(struct fake_line *line, ncclResult_t result)
{
	fake_line_add(line, ") = %s", fake_result_name(result));
	fake_line_write(line);
}

/* Name of a pointer that is stable across runs: mem<N>[+off] or p<N>. */
static void fake_pointer_name(const void *pointer, char *name, size_t size)
{
	if (pointer == NULL) {
		snprintf(name, size, "NULL");
		return;
	}
	bool found = false;
	pthread_mutex_lock(&fake_mem_lock);
	for (struct fake_mem *mem = fake_mems; mem != NULL; mem = mem->next) {
		uintptr_t base = (uintptr_t)mem->base, address = (uintptr_t)pointer;
		if (address >= base && address < base + mem->size) {
			if (address == base)
				snprintf(name, size, "mem%u", mem->serial);
			else
				snprintf(name, size, "mem%u+%zu", mem->serial,
					 (size_t)(address - base));
			found = true;
			break;
		}
	}
	pthread_mutex_unlock(&fake_mem_lock);
	if (found)
		return;

	unsigned id = 0;
	pthread_mutex_lock(&fake_trace_lock);
	for (size_t i = 0; i < fake_pointer_count; i++) {
		if (fake_pointer_names[i].pointer == pointer) {
			id = fake_pointer_names[i].id;
			break;
		}
	}
	if (id == 0) {
		if (fake_pointer_count == fake_pointer_capacity) {
			size_t capacity =
			    fake_pointer_capacity == 0 ? 64 : 2 * fake_pointer_capacity;
			void *grown =
			    realloc(fake_pointer_names, capacity * sizeof(fake_pointer_names[0]));
			if (grown != NULL) {
				fake_pointer_names = grown;
				fake_pointer_capacity = capacity;
			}
		}
		if (fake_pointer_count < fake_pointer_capacity) {
			id = (unsigned)fake_pointer_count + 1;
			fake_pointer_names[fake_pointer_count].pointer = pointer;
			fake_pointer_names[fake_pointer_count].id = id;
			fake_pointer_count++;
		}
	}
	pthread_mutex_unlock(&fake_trace_lock);
	if (id == 0)
		snprintf(name, size, "p?");
	else
		snprintf(name, size, "p%u", id);
}

static void fake_arg_pointer(struct fake_line *line, const char *what, const void *pointer)
{
	if (!line->enabled)
		return;
	char name[64];
	fake_pointer_name(pointer, name, sizeof(name));
	fake_arg(line, "%s=%s", what, name);
}

static bool fake_comm_is_live_locked(const struct ncclComm *comm)
{
	for (struct ncclComm *live = fake_live_comms; live != NULL; live = live->next_live) {
		if (live == comm)
			return true;
	}
	return false;
}

static void fake_comm_name(const struct ncclComm *comm, char *name, size_t size)
{
	if (comm == NULL) {
		snprintf(name, size, "NULL");
		return;
	}
	pthread_mutex_lock(&fake_lock);
	if (fake_comm_is_live_locked(comm))
		snprintf(name, size, "comm%u", comm->serial);
	else
		snprintf(name, size, "comm?");
	pthread_mutex_unlock(&fake_lock);
}

static void fake_arg_comm(struct fake_line *line, const char *what, const struct ncclComm *comm)
{
	if (!line->enabled)
		return;
	char name[32];
	fake_comm_name(comm, name, sizeof(name));
	fake_arg(line, "%s=%s", what, name);
}

/* An output communicator: what the call wrote, or "unset" when it wrote nothing. */
static void fake_arg_comm_out(struct fake_line *line, const char *what, ncclComm_t *comm,
			      bool written)
{
	if (!line->enabled)
		return;
	if (comm == NULL) {
		fake_arg(line, "%s=NULL", what);
		return;
	}
	if (!written) {
		fake_arg(line, "%s=>unset", what);
		return;
	}
	char name[32];
	fake_comm_name(*comm, name, sizeof(name));
	fake_arg(line, "%s=>%s", what, name);
}

static const char *fake_datatype_name(ncclDataType_t datatype)
{
	static const char *const names[] = {
	    "ncclInt8",    "ncclUint8",    "ncclInt32",      "ncclUint32",
	    "ncclInt64",   "ncclUint64",   "ncclFloat16",    "ncclFloat32",
	    "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2",
	};
	if ((int)datatype >= 0 && (size_t)datatype < sizeof(names) / sizeof(names[0]))
		return names[datatype];
	return NULL;
}

static void fake_arg_datatype(struct fake_line *line, const char *what, ncclDataType_t datatype)
{
	const char *name = fake_datatype_name(datatype);
	if (name != NULL)
		fake_arg(line, "%s=%s", what, name);
	else
		fake_arg(line, "%s=%d", what, (int)datatype);
}

static void fake_arg_op(struct fake_line *line, const char *what, ncclRedOp_t op)
{
	static const char *const names[] = {"ncclSum", "ncclProd", "ncclMax", "ncclMin", "ncclAvg"};
	if ((int)op >= 0 && (int)op < (int)ncclNumOps)
		fake_arg(line, "%s=%s", what, names[op]);
	else
		fake_arg(line, "%s=op%d", what, (int)op);
}

static bool fake_id_serial_of(const ncclUniqueId *id, unsigned *serial)
{
	if (memcmp(id->internal, FAKE_ID_MAGIC, strlen(FAKE_ID_MAGIC)) != 0)
		return false;
	memcpy(serial, id->internal + strlen(FAKE_ID_MAGIC), sizeof(*serial));
	return true;
}

static void fake_arg_id(struct fake_line *line, const char *what, const ncclUniqueId *id)
{
	unsigned serial;
	if (id == NULL)
		fake_arg(line, "%sNULL", what);
	else if (fake_id_serial_of(id, &serial))
		fake_arg(line, "%sid%u", what, serial);
	else
		fake_arg(line, "%sid?", what);
}

static void fake_arg_config(struct fake_line *line, const ncclConfig_t *config)
{
	if (!line->enabled)
		return;
	if (config == NULL) {
		fake_arg(line, "config=NULL");
		return;
	}
	if (config->magic != FAKE_CONFIG_MAGIC) {
		fake_arg(line, "config={bad magic}");
		return;
	}
	char text[512];
	size_t used = 0;
#define FAKE_CONFIG_INT(field)                                                                     \
	do {                                                                                       \
		if (config->size >= offsetof(ncclConfig_t, field) + sizeof(config->field) &&       \
		    used < sizeof(text)) {                                                         \
			if (config->field == NCCL_CONFIG_UNDEF_INT)                                \
				used += (size_t)snprintf(text + used, sizeof(text) - used,         \
							 "%s%s=undef", used ? "," : "", #field);   \
			else                                                                       \
				used +=                                                            \
				    (size_t)snprintf(text + used, sizeof(text) - used, "%s%s=%d",  \
						     used ? "," : "", #field, config->field);      \
		}                                                                                  \
	} while (0)
	FAKE_CONFIG_INT(blocking);
	FAKE_CONFIG_INT(cgaClusterSize);
	FAKE_CONFIG_INT(minCTAs);
	FAKE_CONFIG_INT(maxCTAs);
	FAKE_CONFIG_INT(splitShare);
	FAKE_CONFIG_INT(shrinkShare);
#undef FAKE_CONFIG_INT
	const char *name = NULL;
	if (config->size >= offsetof(ncclConfig_t, commName) + sizeof(config->commName))
		name = config->commName;
	if (used < sizeof(text))
		snprintf(text + used, sizeof(text) - used, ",commName=%s",
			 name != NULL ? name : "NULL");
	fake_arg(line, "config={%s}", text);
}

/* ------------------------------------------------------------------ data types */

static size_t fake_datatype_size(ncclDataType_t datatype)
{
	switch (datatype) {
	case ncclInt8:
	case ncclUint8:
	case ncclFloat8e4m3:
	case ncclFloat8e5m2:
		return 1;
	case ncclFloat16:
	case ncclBfloat16:
		return 2;
	case ncclInt32:
	case ncclUint32:
	case ncclFloat32:
		return 4;
	case ncclInt64:
	case ncclUint64:
	case ncclFloat64:
		return 8;
	case ncclNumTypes:
		break;
	}
	return 0;
}

static long fake_env_long(const char *name, long fallback);

/*
 * Every type, fp8 included: this fake is NCCL >= 2.24 on sm_90 GPUs, unless
 * FAKE_NCCL_SM names an older GPU (80: an A100), where NCCL refuses fp8 reductions
 * ("FP8 reduction support begins with sm90 capable devices", ncclInvalidArgument).
 */
static bool fake_datatype_reducible(ncclDataType_t datatype)
{
	if ((datatype == ncclFloat8e4m3 || datatype == ncclFloat8e5m2) &&
	    fake_env_long("FAKE_NCCL_SM", 90) < 90)
		return false;
	return fake_datatype_size(datatype) != 0;
}

static bool fake_datatype_is_float(ncclDataType_t datatype)
{
	return datatype == ncclFloat16 || datatype == ncclBfloat16 || datatype == ncclFloat32 ||
	       datatype == ncclFloat64 || datatype == ncclFloat8e4m3 || datatype == ncclFloat8e5m2;
}

/*
 * fp8 by table and search, independent of nccl-det's bit-level conversions: the
 * value of each of the 256 codes from its fields, and a double rounded by scanning
 * for the nearest finite code (ties to the even code), saturating like NCCL's
 * __NV_SATFINITE conversions; NaN gives the type's NaN code 0x7f.
 */
static double fake_fp8_value(ncclDataType_t datatype, unsigned code)
{
	const bool e4m3 = datatype == ncclFloat8e4m3;
	const int mantissa_bits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
	const unsigned exponent = (code & 0x7fu) >> mantissa_bits;
	const unsigned mantissa = code & ((1u << mantissa_bits) - 1);
	const unsigned top = e4m3 ? 0xfu : 0x1fu;
	double value;
	if (e4m3 && (code & 0x7fu) == 0x7fu)
		value = NAN;
	else if (!e4m3 && exponent == top)
		value = mantissa != 0 ? NAN : INFINITY;
	else if (exponent == 0)
		value = ldexp((double)mantissa, 1 - bias - mantissa_bits);
	else
		value = ldexp((double)(mantissa | (1u << mantissa_bits)),
			      (int)exponent - bias - mantissa_bits);
	return (code & 0x80u) ? -value : value;
}

static unsigned fake_fp8_code(ncclDataType_t datatype, double value)
{
	if (isnan(value))
		return 0x7fu;
	const unsigned sign = signbit(value) ? 0x80u : 0;
	const double magnitude = fabs(value);
	unsigned best = 0;
	double best_error = INFINITY;
	for (unsigned code = 0; code < 0x80u; code++) {
		const double candidate = fake_fp8_value(datatype, code);
		if (!isfinite(candidate))
			continue;
		const double error = fabs(candidate - magnitude);
		if (error < best_error || (error == best_error && (code & 1u) == 0)) {
			best = code;
			best_error = error;
		}
	}
	return sign | best;
}

static bool fake_datatype_is_signed(ncclDataType_t datatype)
{
	return datatype == ncclInt8 || datatype == ncclInt32 || datatype == ncclInt64;
}

static float fake_half_to_float(uint16_t half)
{
	int exponent = (half >> 10) & 0x1f;
	int mantissa = half & 0x3ff;
	float value;
	if (exponent == 0)
		value = ldexpf((float)mantissa, -24);
	else if (exponent == 31)
		value = mantissa != 0 ? NAN : INFINITY;
	else
		value = ldexpf((float)(mantissa | 0x400), exponent - 25);
	return (half & 0x8000u) ? -value : value;
}

/* Round to nearest even, as a GPU conversion does. */
static uint16_t fake_float_to_half(float value)
{
	uint16_t sign = signbit(value) ? 0x8000u : 0;
	if (isnan(value))
		return sign | 0x7e00u;
	float magnitude = fabsf(value);
	if (magnitude >= 65520.0f)
		return sign | 0x7c00u;
	if (magnitude < ldexpf(1.0f, -14))
		return sign | (uint16_t)nearbyintf(magnitude * 16777216.0f);
	int exponent;
	float fraction = frexpf(magnitude, &exponent);
	float mantissa = nearbyintf(ldexpf(fraction, 11));
	if (mantissa == 2048.0f) {
		mantissa = 1024.0f;
		exponent++;
	}
	int biased = exponent + 14;
	if (biased >= 31)
		return sign | 0x7c00u;
	return sign | (uint16_t)(biased << 10) | (uint16_t)((int)mantissa - 1024);
}

static float fake_bfloat16_to_float(uint16_t bits)
{
	uint32_t wide = (uint32_t)bits << 16;
	float value;
	memcpy(&value, &wide, sizeof(value));
	return value;
}

static uint16_t fake_float_to_bfloat16(float value)
{
	uint32_t bits;
	memcpy(&bits, &value, sizeof(bits));
	if (isnan(value))
		return (uint16_t)((bits >> 16) | 0x40u);
	bits += 0x7fffu + ((bits >> 16) & 1u);
	return (uint16_t)(bits >> 16);
}

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

static union fake_value fake_load(const void *base, size_t index, ncclDataType_t datatype)
{
	union fake_value value = {0};
	const unsigned char *bytes =
	    (const unsigned char *)base + index * fake_datatype_size(datatype);
	switch (datatype) {
	case ncclInt8: {
		int8_t x;
		memcpy(&x, bytes, sizeof(x));
		value.s = x;
		break;
	}
	case ncclUint8:
		value.u = bytes[0];
		break;
	case ncclInt32: {
		int32_t x;
		memcpy(&x, bytes, sizeof(x));
		value.s = x;
		break;
	}
	case ncclUint32: {
		uint32_t x;
		memcpy(&x, bytes, sizeof(x));
		value.u = x;
		break;
	}
	case ncclInt64:
		memcpy(&value.s, bytes, sizeof(value.s));
		break;
	case ncclUint64:
		memcpy(&value.u, bytes, sizeof(value.u));
		break;
	case ncclFloat16: {
		uint16_t x;
		memcpy(&x, bytes, sizeof(x));
		value.f = fake_half_to_float(x);
		break;
	}
	case ncclBfloat16: {
		uint16_t x;
		memcpy(&x, bytes, sizeof(x));
		value.f = fake_bfloat16_to_float(x);
		break;
	}
	case ncclFloat32: {
		float x;
		memcpy(&x, bytes, sizeof(x));
		value.f = x;
		break;
	}
	case ncclFloat64:
		memcpy(&value.f, bytes, sizeof(value.f));
		break;
	case ncclFloat8e4m3:
	case ncclFloat8e5m2:
		value.f = fake_fp8_value(datatype, bytes[0]);
		break;
	default:
		break;
	}
	return value;
}

static void fake_store(void *base, size_t index, ncclDataType_t datatype, union fake_value value)
{
	unsigned char *bytes = (unsigned char *)base + index * fake_datatype_size(datatype);
	switch (datatype) {
	case ncclInt8:
	case ncclUint8:
		bytes[0] = (unsigned char)value.u;
		break;
	case ncclInt32:
	case ncclUint32: {
		uint32_t x = (uint32_t)value.u;
		memcpy(bytes, &x, sizeof(x));
		break;
	}
	case ncclInt64:
	case ncclUint64:
		memcpy(bytes, &value.u, sizeof(value.u));
		break;
	case ncclFloat16: {
		uint16_t x = fake_float_to_half((float)value.f);
		memcpy(bytes, &x, sizeof(x));
		break;
	}
	case ncclBfloat16: {
		uint16_t x = fake_float_to_bfloat16((float)value.f);
		memcpy(bytes, &x, sizeof(x));
		break;
	}
	case ncclFloat32: {
		float x = (float)value.f;
		memcpy(bytes, &x, sizeof(x));
		break;
	}
	case ncclFloat64:
		memcpy(bytes, &value.f, sizeof(value.f));
		break;
	case ncclFloat8e4m3:
	case ncclFloat8e5m2:
		/* Rounded to float first: NCCL's operands and results are at most floats. */
		bytes[0] = (unsigned char)fake_fp8_code(datatype, (double)(float)value.f);
		break;
	default:
		break;
	}
}

/* Round to the storage type after every operation, as a device reduction would. */
static union fake_value fake_round(ncclDataType_t datatype, union fake_value value)
{
	unsigned char scratch[8];
	fake_store(scratch, 0, datatype, value);
	return fake_load(scratch, 0, datatype);
}

static union fake_value fake_combine(ncclDataType_t datatype, ncclRedOp_t op, union fake_value a,
				     union fake_value b)
{
	union fake_value result;
	bool is_float = fake_datatype_is_float(datatype);
	bool is_signed = fake_datatype_is_signed(datatype);
	switch (op) {
	case ncclProd:
		if (is_float)
			result.f = a.f * b.f;
		else
			result.u = a.u * b.u;
		break;
	case ncclMax:
		if (is_float)
			result = (b.f > a.f || isnan(b.f)) ? b : a;
		else if (is_signed)
			result = b.s > a.s ? b : a;
		else
			result = b.u > a.u ? b : a;
		break;
	case ncclMin:
		if (is_float)
			result = (b.f < a.f || isnan(b.f)) ? b : a;
		else if (is_signed)
			result = b.s < a.s ? b : a;
		else
			result = b.u < a.u ? b : a;
		break;
	default: /* sum, avg and pre-multiplied sums */
		if (is_float)
			result.f = a.f + b.f;
		else
			result.u = a.u + b.u;
		break;
	}
	return fake_round(datatype, result);
}

/* ------------------------------------------------------------------ communicators */

/* Pins a live communicator for the duration of a call. */
static ncclResult_t fake_comm_acquire(ncclComm_t comm)
{
	if (comm == NULL) {
		fake_set_last_error("fake NCCL: NULL communicator");
		return ncclInvalidArgument;
	}
	pthread_mutex_lock(&fake_lock);
	bool live = fake_comm_is_live_locked(comm);
	if (live)
		comm->users++;
	pthread_mutex_unlock(&fake_lock);
	if (!live) {
		fake_set_last_error("fake NCCL: communicator %p is not live", (void *)comm);
		return ncclInvalidArgument;
	}
	return ncclSuccess;
}

static void fake_comm_free(struct ncclComm *comm)
{
	free(comm->send_seq);
	free(comm->recv_seq);
	free(comm);
}

static void fake_comm_release(ncclComm_t comm)
{
	pthread_mutex_lock(&fake_lock);
	comm->users--;
	bool free_now = comm->dead && comm->users == 0;
	pthread_mutex_unlock(&fake_lock);
	if (free_now)
		fake_comm_free(comm);
}

static int fake_comm_rank(ncclComm_t comm)
{
	int rank = -1;
	if (comm == NULL)
		return rank;
	pthread_mutex_lock(&fake_lock);
	if (fake_comm_is_live_locked(comm))
		rank = comm->rank;
	pthread_mutex_unlock(&fake_lock);
	return rank;
}

static ncclResult_t fake_comm_place_locked(struct ncclComm *comm, int rank, int nranks)
{
	comm->rank = rank;
	comm->nranks = nranks;
	comm->send_seq = calloc((size_t)nranks, sizeof(*comm->send_seq));
	comm->recv_seq = calloc((size_t)nranks, sizeof(*comm->recv_seq));
	if (comm->send_seq == NULL || comm->recv_seq == NULL) {
		fake_set_last_error("fake NCCL: out of memory");
		return ncclSystemError;
	}
	return ncclSuccess;
}

/*
 * A new communicator object (not yet in a clique).  Like NCCL, it takes memory
 * through the public ncclMemAlloc, so an interposer sees the call.
 */
static ncclResult_t fake_comm_create(bool blocking, int device, struct ncclComm **out)
{
	struct ncclComm *comm = calloc(1, sizeof(*comm));
	if (comm == NULL) {
		fake_set_last_error("fake NCCL: out of memory");
		return ncclSystemError;
	}
	ncclResult_t result = ncclMemAlloc(&comm->scratch, FAKE_SCRATCH_BYTES);
	if (result != ncclSuccess) {
		free(comm);
		return result;
	}
	comm->rank = -1;
	comm->device = device;
	comm->blocking = blocking;
	comm->async_error = ncclSuccess;
	pthread_mutex_lock(&fake_lock);
	comm->serial = ++fake_comm_serial;
	comm->next_live = fake_live_comms;
	fake_live_comms = comm;
	pthread_mutex_unlock(&fake_lock);
	*out = comm;
	return ncclSuccess;
}

static bool fake_comm_ready_locked(const struct ncclComm *comm)
{
	return comm->clique != NULL && comm->clique->complete && comm->polls_left == 0 &&
	       comm->rank >= 0;
}

static ncclResult_t fake_comm_check_ready(ncclComm_t comm)
{
	pthread_mutex_lock(&fake_lock);
	bool ready = fake_comm_ready_locked(comm);
	pthread_mutex_unlock(&fake_lock);
	if (!ready) {
		/* NCCL: "Attempt to use communicator before the previous operation returned
		 * ncclSuccess" */
		fake_set_last_error("fake NCCL: communicator used before it is ready");
		return ncclInvalidArgument;
	}
	return ncclSuccess;
}

static int fake_default_blocking(void)
{
	return fake_env_long("NCCL_COMM_BLOCKING", 1) != 0;
}

/* `inherited` is used when config is NULL (split and shrink inherit the parent's mode). */
static ncclResult_t fake_config_blocking(const ncclConfig_t *config, int inherited, bool *blocking)
{
	int value = inherited;
	if (config != NULL) {
		if (config->magic != FAKE_CONFIG_MAGIC ||
		    config->size < offsetof(ncclConfig_t, blocking) + sizeof(config->blocking)) {
			fake_set_last_error(
			    "fake NCCL: config not initialized with NCCL_CONFIG_INITIALIZER");
			return ncclInvalidArgument;
		}
		value = config->blocking;
		if (value == NCCL_CONFIG_UNDEF_INT)
			value = fake_default_blocking();
	}
	*blocking = value != 0;
	return ncclSuccess;
}

/* ------------------------------------------------------------------ cliques */

static struct fake_clique *fake_clique_new_locked(int nranks)
{
	struct fake_clique *clique = calloc(1, sizeof(*clique));
	if (clique == NULL)
		return NULL;
	clique->nranks = nranks;
	clique->fail_code = ncclSuccess;
	return clique;
}

static void fake_slot_free(struct fake_slot *slot)
{
	free(slot->posts);
	free(slot);
}

static void fake_post_free(struct fake_post *post)
{
	if (post->owns_exclude)
		free(post->exclude);
	free(post);
}

static void fake_clique_unref_locked(struct fake_clique *clique)
{
	if (--clique->refs > 0)
		return;
	if (clique->pending) {
		for (struct fake_clique **link = &fake_pending_cliques; *link != NULL;
		     link = &(*link)->next_pending) {
			if (*link == clique) {
				*link = clique->next_pending;
				break;
			}
		}
	}
	while (clique->slots != NULL) {
		struct fake_slot *slot = clique->slots;
		clique->slots = slot->next;
		fake_slot_free(slot);
	}
	free(clique);
}

/* A slot is finished: hand its result to detached posts (nobody waits for them). */
static void fake_slot_release_detached_locked(struct fake_clique *clique, struct fake_slot *slot)
{
	for (int i = 0; i < slot->nposts; i++) {
		struct fake_post *post = slot->posts[i];
		if (post == NULL || !post->detached)
			continue;
		if (post->result != ncclSuccess && post->child != NULL)
			post->child->async_error = post->result;
		slot->posts[i] = NULL;
		slot->consumed++;
		fake_post_free(post);
		fake_clique_unref_locked(clique);
	}
}

static void fake_slot_unlink_locked(struct fake_clique *clique, struct fake_slot *slot)
{
	for (struct fake_slot **link = &clique->slots; *link != NULL; link = &(*link)->next) {
		if (*link == slot) {
			*link = slot->next;
			return;
		}
	}
}

/*
 * Fails every operation still waiting for peers.  `keep_shrink`: a revoke or a
 * shrink with NCCL_SHRINK_ABORT stops the parent's work but not the shrink itself.
 */
static void fake_clique_fail_pending_locked(struct fake_clique *clique, ncclResult_t code,
					    bool keep_shrink)
{
	for (struct fake_slot *slot = clique->slots, *next; slot != NULL; slot = next) {
		next = slot->next;
		if (slot->done || (keep_shrink && slot->class == FAKE_CLASS_SHRINK))
			continue;
		slot->done = true;
		slot->failed = true;
		for (int i = 0; i < slot->nposts; i++) {
			if (slot->posts[i] != NULL)
				slot->posts[i]->result = code;
		}
		/* Keep a reference: releasing detached posts may drop the clique's last one. */
		clique->refs++;
		fake_slot_release_detached_locked(clique, slot);
		if (slot->consumed == slot->arrived) {
			fake_slot_unlink_locked(clique, slot);
			fake_slot_free(slot);
		}
		fake_clique_unref_locked(clique);
	}
	pthread_cond_broadcast(&fake_cond);
}

static void fake_clique_fail_locked(struct fake_clique *clique, ncclResult_t code)
{
	if (!clique->failed) {
		clique->failed = true;
		clique->fail_code = code;
	}
	clique->refs++;
	fake_clique_fail_pending_locked(clique, code, false);
	fake_clique_unref_locked(clique);
}

static void fake_deadline(struct timespec *deadline)
{
	long timeout_ms = fake_env_long("FAKE_NCCL_TIMEOUT_MS", FAKE_NCCL_DEFAULT_TIMEOUT_MS);
	struct timeval now;
	gettimeofday(&now, NULL);
	deadline->tv_sec = now.tv_sec + timeout_ms / 1000;
	deadline->tv_nsec = now.tv_usec * 1000L + (timeout_ms % 1000) * 1000000L;
	if (deadline->tv_nsec >= 1000000000L) {
		deadline->tv_sec++;
		deadline->tv_nsec -= 1000000000L;
	}
}

/* Waits on fake_cond; on timeout fails the clique so that nobody hangs. */
static void fake_wait_or_fail_locked(struct fake_clique *clique, const struct timespec *deadline)
{
	int error = pthread_cond_timedwait(&fake_cond, &fake_lock, deadline);
	if (error == ETIMEDOUT) {
		fprintf(stderr,
			"fake NCCL: a rendezvous of %d ranks timed out (FAKE_NCCL_TIMEOUT_MS); "
			"failing the communicator\n",
			clique->nranks);
		fake_clique_fail_locked(clique, ncclSystemError);
	} else if (error != 0) {
		fprintf(stderr, "fake NCCL: pthread_cond_timedwait: %s\n", strerror(error));
		fake_clique_fail_locked(clique, ncclSystemError);
	}
}

/* ncclCommInitRank*: join the clique of `id`; completes it when the last rank arrives. */
static ncclResult_t fake_join_locked(struct ncclComm *comm, const ncclUniqueId *id)
{
	struct fake_clique *clique = NULL;
	for (struct fake_clique *c = fake_pending_cliques; c != NULL; c = c->next_pending) {
		if (memcmp(&c->id, id, sizeof(*id)) == 0) {
			clique = c;
			break;
		}
	}
	if (clique == NULL) {
		clique = fake_clique_new_locked(comm->nranks);
		if (clique == NULL) {
			fake_set_last_error("fake NCCL: out of memory");
			return ncclSystemError;
		}
		clique->id = *id;
		clique->pending = true;
		clique->next_pending = fake_pending_cliques;
		fake_pending_cliques = clique;
	}
	if (clique->failed)
		return clique->fail_code;
	if (clique->nranks != comm->nranks) {
		fake_set_last_error("fake NCCL: nranks %d differs from the %d of other ranks",
				    comm->nranks, clique->nranks);
		return ncclInvalidArgument;
	}
	clique->refs++;
	clique->joined++;
	comm->clique = clique;
	if (clique->joined == clique->nranks) {
		clique->complete = true;
		clique->pending = false;
		for (struct fake_clique **link = &fake_pending_cliques; *link != NULL;
		     link = &(*link)->next_pending) {
			if (*link == clique) {
				*link = clique->next_pending;
				break;
			}
		}
		pthread_cond_broadcast(&fake_cond);
	}
	return ncclSuccess;
}

static ncclResult_t fake_wait_init_locked(struct ncclComm *comm)
{
	struct fake_clique *clique = comm->clique;
	struct timespec deadline;
	fake_deadline(&deadline);
	clique->refs++;
	while (!clique->complete && !clique->failed)
		fake_wait_or_fail_locked(clique, &deadline);
	ncclResult_t result = clique->failed ? clique->fail_code : ncclSuccess;
	fake_clique_unref_locked(clique);
	return result;
}

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
			value =
			    fake_combine(datatype, first->op, value, fake_input(slot->posts[r], i));
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
static ncclResult_t fake_group_defer(const struct fake_post *post)
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

static void fake_note_nonblocking_locked(struct ncclComm *comm)
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
static ncclResult_t fake_group_flush(bool simulate)
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
static ncclResult_t fake_submit(struct fake_post *post, bool detach)
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
static ncclResult_t fake_collective(struct fake_post *post, bool reduces)
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

/* ------------------------------------------------------------------ API: init */

/* Everything ncclCommInitRank, ...Config and ...Scalable share. */
static ncclResult_t fake_init_rank(const char *function, ncclComm_t *out, int nranks,
				   const ncclUniqueId *id, int rank, const ncclConfig_t *config)
{
	ncclResult_t result = ncclSuccess;
	if (fake_should_fail(function, rank, &result))
		return result;
	if (out == NULL || id == NULL || nranks < 1 || rank < 0 || rank >= nranks) {
		fake_set_last_error("fake NCCL: %s: invalid arguments", function);
		return ncclInvalidArgument;
	}
	bool blocking;
	result = fake_config_blocking(config, fake_default_blocking(), &blocking);
	if (result != ncclSuccess)
		return result;
	struct ncclComm *comm;
	result = fake_comm_create(blocking, (int)fake_env_long("FAKE_NCCL_CUDA_DEVICE", 0), &comm);
	if (result != ncclSuccess)
		return result;
	pthread_mutex_lock(&fake_lock);
	result = fake_comm_place_locked(comm, rank, nranks);
	pthread_mutex_unlock(&fake_lock);
	*out = comm;
	if (result != ncclSuccess)
		return result;

	if (fake_group.depth > 0) {
		struct fake_post post = {.kind = FAKE_INIT, .comm = comm, .id = *id, .root = -1};
		return fake_group_defer(&post);
	}
	pthread_mutex_lock(&fake_lock);
	result = fake_join_locked(comm, id);
	if (result == ncclSuccess) {
		if (blocking) {
			result = fake_wait_init_locked(comm);
		} else {
			fake_note_nonblocking_locked(comm);
			result = ncclInProgress;
		}
	}
	pthread_mutex_unlock(&fake_lock);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t *comm, int nranks,
	      ncclUniqueId commId, int rank, ncclConfig_t *config);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
				    ncclConfig_t *config)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommInitRankConfig");
	ncclResult_t result =
	    fake_init_rank("ncclCommInitRankConfig", comm, nranks, &commId, rank, config);
	fake_arg_comm_out(&line, "comm", comm, result == ncclSuccess || result == ncclInProgress);
	fake_arg(&line, "nranks=%d", nranks);
	fake_arg_id(&line, "commId=", &commId);
	fake_arg(&line, "rank=%d", rank);
	fake_arg_config(&line, config);
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t *comm, int nranks, ncclUniqueId commId,
	      int rank);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommInitRank");
	ncclResult_t result = fake_init_rank("ncclCommInitRank", comm, nranks, &commId, rank, NULL);
	fake_arg_comm_out(&line, "comm", comm, result == ncclSuccess || result == ncclInProgress);
	fake_arg(&line, "nranks=%d", nranks);
	fake_arg_id(&line, "commId=", &commId);
	fake_arg(&line, "rank=%d", rank);
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t *newcomm, int nranks, int myrank,
	      int nId, ncclUniqueId *commIds, ncclConfig_t *config);
ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
				      ncclUniqueId *commIds, ncclConfig_t *config)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommInitRankScalable");
	ncclResult_t result;
	if (nId < 1 || commIds == NULL) {
		fake_set_last_error("fake NCCL: ncclCommInitRankScalable needs at least one id");
		result = ncclInvalidArgument;
	} else {
		/* All ranks pass the same ids; the first names the clique. */
		result = fake_init_rank("ncclCommInitRankScalable", newcomm, nranks, &commIds[0],
					myrank, config);
	}
	fake_arg_comm_out(&line, "newcomm", newcomm,
			  result == ncclSuccess || result == ncclInProgress);
	fake_arg(&line, "nranks=%d", nranks);
	fake_arg(&line, "myrank=%d", myrank);
	fake_arg(&line, "nId=%d", nId);
	if (line.enabled && commIds != NULL && nId > 0) {
		fake_arg(&line, "commIds=[");
		for (int i = 0; i < nId; i++) {
			unsigned serial;
			if (fake_id_serial_of(&commIds[i], &serial))
				fake_line_add(&line, "%sid%u", i > 0 ? "," : "", serial);
			else
				fake_line_add(&line, "%sid?", i > 0 ? "," : "");
		}
		fake_line_add(&line, "]");
	} else {
		fake_arg_pointer(&line, "commIds", commIds);
	}
	fake_arg_config(&line, config);
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t *comm, int ndev, const int *devlist);
ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommInitAll");
	ncclResult_t result = ncclSuccess;
	int created = 0;
	bool blocking = fake_default_blocking();
	if (fake_should_fail("ncclCommInitAll", -1, &result)) {
		/* nothing created: result holds the requested code */
	} else if (comm == NULL || ndev < 1) {
		result = ncclInvalidArgument;
	} else {
		for (; created < ndev && result == ncclSuccess; created++) {
			int device = devlist != NULL ? devlist[created] : created;
			result = fake_comm_create(blocking, device, &comm[created]);
			if (result != ncclSuccess)
				break;
		}
		if (result == ncclSuccess) {
			pthread_mutex_lock(&fake_lock);
			struct fake_clique *clique = fake_clique_new_locked(ndev);
			if (clique == NULL)
				result = ncclSystemError;
			for (int i = 0; i < ndev && result == ncclSuccess; i++) {
				result = fake_comm_place_locked(comm[i], i, ndev);
				comm[i]->clique = clique;
				clique->refs++;
				if (!blocking)
					fake_note_nonblocking_locked(comm[i]);
			}
			if (clique != NULL)
				clique->complete = true;
			pthread_mutex_unlock(&fake_lock);
			if (result == ncclSuccess && !blocking)
				result = ncclInProgress;
		}
	}
	if (line.enabled && comm != NULL && created == ndev) {
		fake_arg(&line, "comm=>[");
		for (int i = 0; i < ndev; i++) {
			char name[32];
			fake_comm_name(comm[i], name, sizeof(name));
			fake_line_add(&line, "%s%s", i > 0 ? "," : "", name);
		}
		fake_line_add(&line, "]");
	} else {
		fake_arg(&line, "comm=>unset");
	}
	fake_arg(&line, "ndev=%d", ndev);
	if (line.enabled && devlist != NULL && ndev > 0) {
		fake_arg(&line, "devlist=[");
		for (int i = 0; i < ndev; i++)
			fake_line_add(&line, "%s%d", i > 0 ? "," : "", devlist[i]);
		fake_line_add(&line, "]");
	} else {
		fake_arg(&line, "devlist=NULL");
	}
	fake_line_finish(&line, result);
	return result;
}

/* ------------------------------------------------------------------ API: teardown */

static ncclResult_t fake_comm_teardown(ncclComm_t comm, bool abort)
{
	pthread_mutex_lock(&fake_lock);
	for (struct ncclComm **link = &fake_live_comms; *link != NULL; link = &(*link)->next_live) {
		if (*link == comm) {
			*link = comm->next_live;
			break;
		}
	}
	comm->dead = true;
	void *scratch = comm->scratch;
	comm->scratch = NULL;
	struct fake_clique *clique = comm->clique;
	comm->clique = NULL;
	if (clique != NULL) {
		/* A rank that leaves an unfinished init rendezvous strands the others. */
		if (abort || !clique->complete)
			fake_clique_fail_locked(clique, ncclRemoteError);
		fake_clique_unref_locked(clique);
	}
	pthread_mutex_unlock(&fake_lock);
	/* NCCL frees its buffers through the public name: interposers see this call. */
	return ncclMemFree(scratch);
}

FAKE_NCCL_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm);
ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommFinalize");
	fake_arg_comm(&line, "comm", comm);
	ncclResult_t result = ncclSuccess;
	if (!fake_should_fail("ncclCommFinalize", fake_comm_rank(comm), &result)) {
		result = fake_comm_acquire(comm);
		if (result == ncclSuccess) {
			pthread_mutex_lock(&fake_lock);
			if (!comm->blocking) {
				fake_note_nonblocking_locked(comm);
				result = ncclInProgress;
			}
			pthread_mutex_unlock(&fake_lock);
			fake_comm_release(comm);
		}
	}
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommDestroy");
	fake_arg_comm(&line, "comm", comm);
	ncclResult_t result = ncclSuccess;
	if (comm != NULL && !fake_should_fail("ncclCommDestroy", fake_comm_rank(comm), &result)) {
		result = fake_comm_acquire(comm);
		if (result == ncclSuccess) {
			result = fake_comm_teardown(comm, false);
			fake_comm_release(comm);
		}
	}
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommAbort");
	fake_arg_comm(&line, "comm", comm);
	ncclResult_t result = ncclSuccess;
	if (comm != NULL && !fake_should_fail("ncclCommAbort", fake_comm_rank(comm), &result)) {
		result = fake_comm_acquire(comm);
		if (result == ncclSuccess) {
			result = fake_comm_teardown(comm, true);
			fake_comm_release(comm);
		}
	}
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags);
ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommRevoke");
	fake_arg_comm(&line, "comm", comm);
	fake_arg(&line, "revokeFlags=%d", revokeFlags);
	ncclResult_t result = ncclSuccess;
	if (!fake_should_fail("ncclCommRevoke", fake_comm_rank(comm), &result)) {
		result = fake_comm_acquire(comm);
		if (result == ncclSuccess) {
			if (revokeFlags != NCCL_REVOKE_DEFAULT) {
				result = ncclInvalidArgument;
			} else {
				pthread_mutex_lock(&fake_lock);
				if (comm->clique != NULL) {
					comm->clique->revoked = true;
					fake_clique_fail_pending_locked(comm->clique,
									ncclRemoteError, true);
				}
				if (!comm->blocking) {
					fake_note_nonblocking_locked(comm);
					result = ncclInProgress;
				}
				pthread_mutex_unlock(&fake_lock);
			}
			fake_comm_release(comm);
		}
	}
	fake_line_finish(&line, result);
	return result;
}

/* ------------------------------------------------------------------ API: split, shrink */

FAKE_NCCL_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
	      ncclConfig_t *config);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
			   ncclConfig_t *config)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommSplit");
	fake_arg_comm(&line, "comm", comm);
	fake_arg(&line, "color=%d", color);
	fake_arg(&line, "key=%d", key);
	ncclResult_t result = ncclSuccess;
	bool written = false;
	if (!fake_should_fail("ncclCommSplit", fake_comm_rank(comm), &result)) {
		result = fake_comm_acquire(comm);
		if (result == ncclSuccess) {
			bool blocking = false;
			if (newcomm == NULL || (color < 0 && color != NCCL_SPLIT_NOCOLOR))
				result = ncclInvalidArgument;
			if (result == ncclSuccess)
				result = fake_comm_check_ready(comm);
			if (result == ncclSuccess)
				result = fake_config_blocking(config, comm->blocking, &blocking);
			struct ncclComm *child = NULL;
			if (result == ncclSuccess && color != NCCL_SPLIT_NOCOLOR)
				result = fake_comm_create(blocking, comm->device, &child);
			if (result == ncclSuccess) {
				*newcomm = child;
				written = true;
				struct fake_post post = {.kind = FAKE_SPLIT,
							 .comm = comm,
							 .color = color,
							 .key = key,
							 .child = child,
							 .root = -1};
				result = fake_submit(&post, !blocking);
			}
			fake_comm_release(comm);
		}
	}
	fake_arg_comm_out(&line, "newcomm", newcomm, written);
	fake_arg_config(&line, config);
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int *excludeRanksList,
	      int excludeRanksCount, ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags);
ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
			    ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommShrink");
	fake_arg_comm(&line, "comm", comm);
	if (line.enabled && excludeRanksList != NULL && excludeRanksCount > 0) {
		fake_arg(&line, "excludeRanksList=[");
		for (int i = 0; i < excludeRanksCount; i++)
			fake_line_add(&line, "%s%d", i > 0 ? "," : "", excludeRanksList[i]);
		fake_line_add(&line, "]");
	} else {
		fake_arg_pointer(&line, "excludeRanksList", excludeRanksList);
	}
	fake_arg(&line, "excludeRanksCount=%d", excludeRanksCount);
	ncclResult_t result = ncclSuccess;
	bool written = false;
	if (!fake_should_fail("ncclCommShrink", fake_comm_rank(comm), &result)) {
		result = fake_comm_acquire(comm);
		if (result == ncclSuccess) {
			bool blocking = false;
			if (newcomm == NULL || excludeRanksCount < 0 ||
			    (excludeRanksCount > 0 && excludeRanksList == NULL))
				result = ncclInvalidArgument;
			if (result == ncclSuccess) {
				pthread_mutex_lock(&fake_lock);
				/* Revoked parents may shrink: that is what revoke is for. */
				bool ready = comm->clique != NULL && comm->clique->complete &&
					     comm->polls_left == 0;
				int rank = comm->rank, nranks = comm->nranks;
				pthread_mutex_unlock(&fake_lock);
				if (!ready)
					result = ncclInvalidArgument;
				for (int i = 0; i < excludeRanksCount && result == ncclSuccess;
				     i++) {
					if (excludeRanksList[i] < 0 ||
					    excludeRanksList[i] >= nranks ||
					    excludeRanksList[i] == rank)
						result = ncclInvalidArgument;
				}
				if (result == ncclSuccess && excludeRanksCount >= nranks)
					result = ncclInvalidArgument;
			}
			if (result == ncclSuccess)
				result = fake_config_blocking(config, comm->blocking, &blocking);
			struct ncclComm *child = NULL;
			if (result == ncclSuccess)
				result = fake_comm_create(blocking, comm->device, &child);
			if (result == ncclSuccess) {
				*newcomm = child;
				written = true;
				struct fake_post post = {.kind = FAKE_SHRINK,
							 .comm = comm,
							 .child = child,
							 .exclude = excludeRanksList,
							 .exclude_count = excludeRanksCount,
							 .flags = shrinkFlags,
							 .root = -1};
				result = fake_submit(&post, !blocking);
			}
			fake_comm_release(comm);
		}
	}
	fake_arg_comm_out(&line, "newcomm", newcomm, written);
	fake_arg_config(&line, config);
	fake_arg(&line, "shrinkFlags=%d", shrinkFlags);
	fake_line_finish(&line, result);
	return result;
}

/* ------------------------------------------------------------------ API: errors, queries */

FAKE_NCCL_API(const char *, ncclGetErrorString, ncclResult_t result);
const char *ncclGetErrorString(ncclResult_t result)
{
	const char *text;
	switch (result) {
	case ncclSuccess:
		text = "no error";
		break;
	case ncclUnhandledCudaError:
		text = "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
		break;
	case ncclSystemError:
		text = "unhandled system error (run with NCCL_DEBUG=INFO for details)";
		break;
	case ncclInternalError:
		text = "internal error - please report this issue to the NCCL developers";
		break;
	case ncclInvalidArgument:
		text = "invalid argument (run with NCCL_DEBUG=WARN for details)";
		break;
	case ncclInvalidUsage:
		text = "invalid usage (run with NCCL_DEBUG=WARN for details)";
		break;
	case ncclRemoteError:
		text = "remote process exited or there was a network error";
		break;
	case ncclInProgress:
		text = "NCCL operation in progress";
		break;
	default:
		text = "unknown result code";
		break;
	}
	struct fake_line line;
	fake_line_begin(&line, "ncclGetErrorString");
	fake_arg(&line, "result=%s", fake_result_name(result));
	fake_line_add(&line, ") = \"%s\"", text);
	fake_line_write(&line);
	return text;
}

FAKE_NCCL_API(const char *, ncclGetLastError, ncclComm_t comm);
const char *ncclGetLastError(ncclComm_t comm)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclGetLastError");
	fake_arg_comm(&line, "comm", comm);
	fake_line_add(&line, ") = \"%s\"", fake_last_error);
	fake_line_write(&line);
	return fake_last_error;
}

FAKE_NCCL_API(void, ncclResetDebugInit, void);
void ncclResetDebugInit(void)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclResetDebugInit");
	fake_line_add(&line, ")");
	fake_line_write(&line);
}

FAKE_NCCL_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t *asyncError);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommGetAsyncError");
	fake_arg_comm(&line, "comm", comm);
	ncclResult_t result = ncclSuccess;
	if (!fake_should_fail("ncclCommGetAsyncError", fake_comm_rank(comm), &result)) {
		result = fake_comm_acquire(comm);
		if (result == ncclSuccess) {
			if (asyncError == NULL) {
				result = ncclInvalidArgument;
			} else {
				ncclResult_t state;
				pthread_mutex_lock(&fake_lock);
				struct fake_clique *clique = comm->clique;
				if (comm->async_error != ncclSuccess)
					state = comm->async_error;
				else if (clique != NULL && clique->failed)
					state = ncclRemoteError;
				else if (clique == NULL || !clique->complete)
					state = ncclInProgress;
				else if (comm->polls_left > 0) {
					comm->polls_left--;
					state = ncclInProgress;
				} else
					state = (ncclResult_t)fake_env_long("FAKE_NCCL_ASYNC_ERROR",
									    ncclSuccess);
				pthread_mutex_unlock(&fake_lock);
				*asyncError = state;
			}
			fake_comm_release(comm);
		}
	}
	if (result == ncclSuccess)
		fake_arg(&line, "asyncError=>%s", fake_result_name(*asyncError));
	else
		fake_arg(&line, "asyncError=>unset");
	fake_line_finish(&line, result);
	return result;
}

/* ncclCommCount, ncclCommCuDevice, ncclCommUserRank. */
static ncclResult_t fake_comm_query(const char *function, ncclComm_t comm, int *out, int which)
{
	ncclResult_t result = ncclSuccess;
	if (fake_should_fail(function, fake_comm_rank(comm), &result))
		return result;
	if (out == NULL)
		return ncclInvalidArgument;
	result = fake_comm_acquire(comm);
	if (result != ncclSuccess)
		return result;
	pthread_mutex_lock(&fake_lock);
	int value = which == 0 ? comm->nranks : which == 1 ? comm->device : comm->rank;
	bool known = comm->rank >= 0;
	pthread_mutex_unlock(&fake_lock);
	fake_comm_release(comm);
	if (!known)
		return ncclInvalidArgument;
	*out = value;
	return ncclSuccess;
}

FAKE_NCCL_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int *count);
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommCount");
	fake_arg_comm(&line, "comm", comm);
	ncclResult_t result = fake_comm_query("ncclCommCount", comm, count, 0);
	if (result == ncclSuccess)
		fake_arg(&line, "count=>%d", *count);
	else
		fake_arg(&line, "count=>unset");
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int *device);
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommCuDevice");
	fake_arg_comm(&line, "comm", comm);
	ncclResult_t result = fake_comm_query("ncclCommCuDevice", comm, device, 1);
	if (result == ncclSuccess)
		fake_arg(&line, "device=>%d", *device);
	else
		fake_arg(&line, "device=>unset");
	fake_line_finish(&line, result);
	return result;
}

FAKE_NCCL_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int *rank);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
	struct fake_line line;
	fake_line_begin(&line, "ncclCommUserRank");
	fake_arg_comm(&line, "comm", comm);
	ncclResult_t result = fake_comm_query("ncclCommUserRank", comm, rank, 2);
	if (result == ncclSuccess)
		fake_arg(&line, "rank=>%d", *rank);
	else
		fake_arg(&line, "rank=>unset");
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
