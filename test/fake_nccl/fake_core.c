/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The fake's core: the FAKE_NCCL_* knobs read from the environment and the last-error
 * string, element arithmetic for every data type, communicators (creation, lookup,
 * readiness), and cliques: the ranks of one communicator, their init rendezvous, their
 * rendezvous slots and how they fail.  It also defines the state that the other files
 * share (fake_nccl_internal.h).
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "test/fake_nccl/fake_nccl_internal.h"

/* The state other files use too (fake_nccl_internal.h says what guards it). */
pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t fake_cond = PTHREAD_COND_INITIALIZER;
struct ncclComm *fake_live_comms;

pthread_mutex_t fake_mem_lock = PTHREAD_MUTEX_INITIALIZER;
struct fake_mem *fake_mems;

_Thread_local struct fake_group fake_group;
_Thread_local char fake_last_error[256];

static struct fake_clique *fake_pending_cliques;
static unsigned fake_comm_serial;

/* ------------------------------------------------------------------ environment */

long fake_env_long(const char *name, long fallback)
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

void fake_set_last_error(const char *fmt, ...)
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
bool fake_should_fail(const char *function, int rank, ncclResult_t *code)
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

/* ------------------------------------------------------------------ data types */

size_t fake_datatype_size(ncclDataType_t datatype)
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

/*
 * Every type, fp8 included: this fake is NCCL >= 2.24 on sm_90 GPUs, unless
 * FAKE_NCCL_SM names an older GPU (80: an A100), where NCCL refuses fp8 reductions
 * ("FP8 reduction support begins with sm90 capable devices", ncclInvalidArgument).
 */
bool fake_datatype_reducible(ncclDataType_t datatype)
{
	if ((datatype == ncclFloat8e4m3 || datatype == ncclFloat8e5m2) &&
	    fake_env_long("FAKE_NCCL_SM", 90) < 90)
		return false;
	return fake_datatype_size(datatype) != 0;
}

bool fake_datatype_is_float(ncclDataType_t datatype)
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

bool fake_datatype_is_signed(ncclDataType_t datatype)
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

union fake_value fake_load(const void *base, size_t index, ncclDataType_t datatype)
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

void fake_store(void *base, size_t index, ncclDataType_t datatype, union fake_value value)
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
union fake_value fake_round(ncclDataType_t datatype, union fake_value value)
{
	unsigned char scratch[8];
	fake_store(scratch, 0, datatype, value);
	return fake_load(scratch, 0, datatype);
}

union fake_value fake_combine(ncclDataType_t datatype, ncclRedOp_t op, union fake_value a,
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
ncclResult_t fake_comm_acquire(ncclComm_t comm)
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

void fake_comm_release(ncclComm_t comm)
{
	pthread_mutex_lock(&fake_lock);
	comm->users--;
	bool free_now = comm->dead && comm->users == 0;
	pthread_mutex_unlock(&fake_lock);
	if (free_now)
		fake_comm_free(comm);
}

int fake_comm_rank(ncclComm_t comm)
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

ncclResult_t fake_comm_place_locked(struct ncclComm *comm, int rank, int nranks)
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
ncclResult_t fake_comm_create(bool blocking, int device, struct ncclComm **out)
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

bool fake_comm_ready_locked(const struct ncclComm *comm)
{
	return comm->clique != NULL && comm->clique->complete && comm->polls_left == 0 &&
	       comm->rank >= 0;
}

ncclResult_t fake_comm_check_ready(ncclComm_t comm)
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

int fake_default_blocking(void)
{
	return fake_env_long("NCCL_COMM_BLOCKING", 1) != 0;
}

/* `inherited` is used when config is NULL (split and shrink inherit the parent's mode). */
ncclResult_t fake_config_blocking(const ncclConfig_t *config, int inherited, bool *blocking)
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

struct fake_clique *fake_clique_new_locked(int nranks)
{
	struct fake_clique *clique = calloc(1, sizeof(*clique));
	if (clique == NULL)
		return NULL;
	clique->nranks = nranks;
	clique->fail_code = ncclSuccess;
	return clique;
}

void fake_slot_free(struct fake_slot *slot)
{
	free(slot->posts);
	free(slot);
}

void fake_post_free(struct fake_post *post)
{
	if (post->owns_exclude)
		free(post->exclude);
	free(post);
}

void fake_clique_unref_locked(struct fake_clique *clique)
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
void fake_slot_release_detached_locked(struct fake_clique *clique, struct fake_slot *slot)
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

void fake_slot_unlink_locked(struct fake_clique *clique, struct fake_slot *slot)
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
void fake_clique_fail_pending_locked(struct fake_clique *clique, ncclResult_t code,
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

void fake_clique_fail_locked(struct fake_clique *clique, ncclResult_t code)
{
	if (!clique->failed) {
		clique->failed = true;
		clique->fail_code = code;
	}
	clique->refs++;
	fake_clique_fail_pending_locked(clique, code, false);
	fake_clique_unref_locked(clique);
}

void fake_deadline(struct timespec *deadline)
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
void fake_wait_or_fail_locked(struct fake_clique *clique, const struct timespec *deadline)
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
ncclResult_t fake_join_locked(struct ncclComm *comm, const ncclUniqueId *id)
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

ncclResult_t fake_wait_init_locked(struct ncclComm *comm)
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
