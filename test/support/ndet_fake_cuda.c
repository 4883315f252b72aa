/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The fake CUDA runtime of the engine tests (see ndet_fake_cuda.h).
 */
#include "config.h"

#include "test/support/ndet_fake_cuda.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/ndet_kernels.h"
#include "test/support/ndet_big_alloc.h"

#define FAKE_DEVICES   8
#define FAKE_IPC_MAGIC 0x46495043u /* "FIPC" */
#define FAKE_LOG_LINE  64

/* Streams and events start with their log name, and are kept in one list each. */
struct fake_named {
	char name[8];
	struct fake_named *next_all;
};

/* One process's mappings of a block: CUDA hands out one pointer per process, counted. */
struct fake_mapping {
	struct fake_mapping *next;
	pid_t pid;
	int count;
};

struct fake_block {
	struct fake_block *next;
	char *base;
	size_t size;
	bool pinned;
	pid_t owner;
	int mappings; /* over every process */
	struct fake_mapping *maps;
	/*
	 * Freed by its owner while still mapped: no longer an allocation, but the
	 * memory lives on for the mappings until the last one closes (the driver keeps
	 * it for an open import); any copy touching it is a violation.
	 */
	bool freed;
};

enum fake_item_kind { FAKE_ITEM_KERNEL, FAKE_ITEM_WAIT };

struct fake_stream;

struct fake_item {
	struct fake_item *next;
	enum fake_item_kind kind;
	uint64_t seq;
	bool finished;
	/* kernel */
	enum fake_cuda_kernel behaviour;
	struct ndet_host_status *status;
	const uint64_t *abort_word; /* its rank's own flags: a peer's poison (SPIN leaves) */
	int rank;
	pid_t pid; /* the launching process: its end ends the kernel */
	/* wait: until `wait_stream` finished everything up to `wait_seq` */
	struct fake_stream *wait_stream;
	uint64_t wait_seq;
};

struct fake_stream {
	struct fake_named named;
	unsigned long long id; /* cudaStreamGetId; fake_cuda_stream_renew changes it */
	bool destroyed;
	unsigned long long capture;
	struct fake_item *head, *tail;
	uint64_t seq;
};

struct fake_event {
	struct fake_named named;
	bool destroyed;
	bool captured; /* recorded in a capture: a graph node, not queryable */
	struct fake_stream *stream;
	uint64_t seq;
};

struct fake_ipc_handle {
	uint32_t magic;
	int32_t owner;
	uint64_t base;
};

static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fake_block *fake_blocks;
static struct fake_named *fake_streams;
static struct fake_named *fake_events;
static struct fake_stream fake_default_stream = {.named = {.name = "s0"}, .id = 1};
static unsigned long long fake_next_stream_id = 2;
static int fake_next_id = 1;
static struct fake_cuda_counts fake_counts;
static char fake_violation[256];
static bool fake_pid_per_device;
static int fake_sm_count = 132;
static pid_t fake_ended[64]; /* fake_cuda_end_process */
static int fake_ended_count;
static bool fake_unloading;
static size_t fake_fail_malloc_bytes; /* cudaMalloc of exactly this many bytes fails (0: none) */
static int fake_fail_device_copies;   /* so many device-to-device cudaMemcpyAsync fail */
static struct ndet_host_status *fake_claimed; /* FAKE_CUDA_KERNEL_FAIL_CLAIMED */
static char (*fake_log_lines)[FAKE_LOG_LINE];
static int fake_log_count, fake_log_capacity;

static _Thread_local enum fake_cuda_kernel fake_kernel;
static _Thread_local int fake_device;
static _Thread_local pid_t fake_thread_pid;
static _Thread_local int fake_close_delay_ms;
static _Thread_local cudaError_t fake_last_error;
static _Thread_local enum cudaStreamCaptureMode fake_capture_mode = cudaStreamCaptureModeGlobal;
static int fake_active_captures; /* streams capturing now (fake_cuda_set_capture) */

pid_t __real_getpid(void);
pid_t __wrap_getpid(void);
int __real_kill(pid_t pid, int signal);
int __wrap_kill(pid_t pid, int signal);

pid_t __wrap_getpid(void)
{
	if (fake_thread_pid != 0)
		return fake_thread_pid;
	if (__atomic_load_n(&fake_pid_per_device, __ATOMIC_RELAXED))
		return FAKE_CUDA_PID_DEVICE + fake_device;
	return __real_getpid();
}

static bool fake_ended_locked(pid_t pid)
{
	for (int i = 0; i < fake_ended_count; i++)
		if (fake_ended[i] == pid)
			return true;
	return false;
}

/* A fake process lives until fake_cuda_end_process; real pids are asked for real. */
int __wrap_kill(pid_t pid, int signal)
{
	if (pid < FAKE_CUDA_PID_MIN || pid > FAKE_CUDA_PID_MAX)
		return __real_kill(pid, signal);
	pthread_mutex_lock(&fake_lock);
	bool ended = fake_ended_locked(pid);
	pthread_mutex_unlock(&fake_lock);
	if (ended) {
		errno = ESRCH;
		return -1;
	}
	return 0;
}

/* ---------------------------------------------------------------- bookkeeping */

static void fake_log_locked(const char *format, va_list args)
{
	if (fake_log_count == fake_log_capacity) {
		int grown = fake_log_capacity == 0 ? 256 : 2 * fake_log_capacity;
		void *larger = realloc(fake_log_lines, (size_t)grown * FAKE_LOG_LINE);
		if (larger == NULL)
			return;
		fake_log_lines = larger;
		fake_log_capacity = grown;
	}
	vsnprintf(fake_log_lines[fake_log_count++], FAKE_LOG_LINE, format, args);
}

static void fake_note(const char *format, ...) __attribute__((format(printf, 1, 2)));
static void fake_note(const char *format, ...)
{
	va_list args;
	va_start(args, format);
	fake_log_locked(format, args);
	va_end(args);
}

void fake_cuda_log(const char *format, ...)
{
	va_list args;
	pthread_mutex_lock(&fake_lock);
	va_start(args, format);
	fake_log_locked(format, args);
	va_end(args);
	pthread_mutex_unlock(&fake_lock);
}

static void fake_violate(const char *format, ...) __attribute__((format(printf, 1, 2)));
static void fake_violate(const char *format, ...)
{
	va_list args;
	va_start(args, format);
	vsnprintf(fake_violation, sizeof(fake_violation), format, args);
	va_end(args);
	fake_counts.violations++;
	fprintf(stderr, "fake CUDA: violation: %s\n", fake_violation);
}

static cudaError_t fake_result(cudaError_t err)
{
	if (err != cudaSuccess)
		fake_last_error = err;
	return err;
}

static struct fake_stream *fake_stream_of(cudaStream_t stream)
{
	return stream == NULL ? &fake_default_stream : (struct fake_stream *)stream;
}

/* A stream a call may use; a destroyed one is a violation. */
static bool fake_stream_usable_locked(struct fake_stream *stream, const char *what)
{
	if (!stream->destroyed)
		return true;
	fake_violate("%s on destroyed stream %s", what, stream->named.name);
	return false;
}

static struct fake_block *fake_block_find_locked(const void *base)
{
	for (struct fake_block *block = fake_blocks; block != NULL; block = block->next)
		if (block->base == base)
			return block;
	return NULL;
}

/* Does [pointer, pointer + bytes) touch memory its owner freed (still mapped)? */
static bool fake_touches_freed_locked(const void *pointer, size_t bytes)
{
	const char *p = pointer;
	for (const struct fake_block *block = fake_blocks; block != NULL; block = block->next)
		if (block->freed && p < block->base + block->size && p + bytes > block->base)
			return true;
	return false;
}

static void fake_block_unlink_locked(struct fake_block *gone)
{
	struct fake_block **link = &fake_blocks;
	while (*link != gone)
		link = &(*link)->next;
	*link = gone->next;
	while (gone->maps != NULL) {
		struct fake_mapping *next = gone->maps->next;
		free(gone->maps);
		gone->maps = next;
	}
	ndet_big_free(gone->base, gone->size);
	free(gone);
}

/* One mapping of `block` by `pid` closes (or all of them, `all`). */
static void fake_unmap_locked(struct fake_block *block, struct fake_mapping *mapping, bool all)
{
	int closed = all ? mapping->count : 1;
	mapping->count -= closed;
	block->mappings -= closed;
	fake_counts.mappings -= closed;
	if (mapping->count == 0) {
		struct fake_mapping **link = &block->maps;
		while (*link != mapping)
			link = &(*link)->next;
		*link = mapping->next;
		free(mapping);
	}
	if (block->freed && block->mappings == 0)
		fake_block_unlink_locked(block);
}

/* ---------------------------------------------------------------- kernels */

static void fake_publish(struct ndet_host_status *status, uint32_t code, int rank)
{
	status->block = 5;
	status->peer = 1;
	status->step = 9;
	status->observed = 0xabcdef;
	status->phase = 2;
	status->rank = (uint32_t)rank;
	__atomic_store_n(&status->error, code, __ATOMIC_RELEASE);
}

/* The protocol of ndet_types.h: claim, details, then the error word. */
static void fake_fail(struct ndet_host_status *status, uint32_t code, int rank)
{
	uint32_t expected = 0;
	if (__atomic_compare_exchange_n(&status->claim, &expected, code, false, __ATOMIC_ACQ_REL,
					__ATOMIC_ACQUIRE))
		fake_publish(status, code, rank);
}

static bool fake_stream_done_locked(struct fake_stream *stream, uint64_t seq);

static bool fake_item_done_locked(struct fake_item *item)
{
	if (item->finished)
		return true;
	if (item->kind == FAKE_ITEM_WAIT) {
		item->finished = fake_stream_done_locked(item->wait_stream, item->wait_seq);
		return item->finished;
	}
	if (fake_ended_locked(item->pid)) {
		item->finished = true; /* its process ended, and the kernel with it */
		return true;
	}
	switch (item->behaviour) {
	case FAKE_CUDA_KERNEL_SPIN:
		if (__atomic_load_n(&item->status->abort, __ATOMIC_ACQUIRE) != 0) {
			fake_fail(item->status, NDET_KERNEL_ERR_ABORTED, item->rank);
			item->finished = true;
		} else if (item->abort_word != NULL &&
			   __atomic_load_n(item->abort_word, __ATOMIC_ACQUIRE) != 0) {
			fake_fail(item->status, NDET_KERNEL_ERR_PEER, item->rank);
			item->finished = true;
		}
		break;
	case FAKE_CUDA_KERNEL_STUCK:
	case FAKE_CUDA_KERNEL_FAULT:
		break;
	default:
		item->finished = true;
		break;
	}
	return item->finished;
}

/* Has `stream` finished everything up to `seq`?  In stream order. */
static bool fake_stream_done_locked(struct fake_stream *stream, uint64_t seq)
{
	for (struct fake_item *item = stream->head; item != NULL && item->seq <= seq;
	     item = item->next)
		if (!fake_item_done_locked(item))
			return false;
	return true;
}

/* The default stream, then every stream made (in the same list shape). */
static struct fake_stream *fake_stream_next(struct fake_stream *stream)
{
	if (stream == &fake_default_stream)
		return (struct fake_stream *)fake_streams;
	return (struct fake_stream *)stream->named.next_all;
}

/* A faulted kernel up to `seq`: the context is broken for everything behind it. */
static bool fake_stream_faulted_locked(const struct fake_stream *stream, uint64_t seq)
{
	for (const struct fake_item *item = stream->head; item != NULL && item->seq <= seq;
	     item = item->next)
		if (item->kind == FAKE_ITEM_KERNEL && item->behaviour == FAKE_CUDA_KERNEL_FAULT)
			return true;
	return false;
}

/* Has process `pid` a kernel that may still run? */
static bool fake_process_running_locked(pid_t pid)
{
	for (struct fake_stream *stream = &fake_default_stream; stream != NULL;
	     stream = fake_stream_next(stream)) {
		bool blocked = false;
		for (struct fake_item *item = stream->head; item != NULL; item = item->next) {
			blocked = blocked || !fake_item_done_locked(item);
			if (blocked && item->kind == FAKE_ITEM_KERNEL && item->pid == pid)
				return true;
		}
	}
	return false;
}

static int fake_running_locked(void)
{
	int running = 0;
	for (struct fake_stream *stream = &fake_default_stream; stream != NULL;
	     stream = fake_stream_next(stream)) {
		bool blocked = false;
		for (struct fake_item *item = stream->head; item != NULL; item = item->next) {
			blocked = blocked || !fake_item_done_locked(item);
			running += blocked && item->kind == FAKE_ITEM_KERNEL;
		}
	}
	return running;
}

static void fake_queue_locked(struct fake_stream *stream, struct fake_item *item)
{
	item->seq = ++stream->seq;
	if (stream->tail != NULL)
		stream->tail->next = item;
	else
		stream->head = item;
	stream->tail = item;
}

/* The arguments of each kernel rank's last launch (fake_cuda_last_launch). */
static struct ndet_kernel_args fake_last_args[NDET_MAX_RANKS];
static bool fake_last_valid[NDET_MAX_RANKS];

bool fake_cuda_last_launch(int rank, struct ndet_kernel_args *args)
{
	pthread_mutex_lock(&fake_lock);
	const bool valid = rank >= 0 && rank < NDET_MAX_RANKS && fake_last_valid[rank];
	if (valid)
		*args = fake_last_args[rank];
	pthread_mutex_unlock(&fake_lock);
	return valid;
}

/* The arguments of each kernel rank's last stage launch (fake_cuda_last_hosts_launch). */
static struct ndet_hosts_args fake_last_hosts[NDET_MAX_RANKS];
static bool fake_last_hosts_valid[NDET_MAX_RANKS];

bool fake_cuda_last_hosts_launch(int rank, struct ndet_hosts_args *args)
{
	pthread_mutex_lock(&fake_lock);
	const bool valid = rank >= 0 && rank < NDET_MAX_RANKS && fake_last_hosts_valid[rank];
	if (valid)
		*args = fake_last_hosts[rank];
	pthread_mutex_unlock(&fake_lock);
	return valid;
}

static bool fake_no_kernel_image;  /* fake_cuda_set_no_kernel_image */
static bool fake_set_device_fails; /* fake_cuda_fail_set_device */

void fake_cuda_fail_set_device(bool on)
{
	__atomic_store_n(&fake_set_device_fails, on, __ATOMIC_RELAXED);
}

void fake_cuda_set_no_kernel_image(bool on)
{
	__atomic_store_n(&fake_no_kernel_image, on, __ATOMIC_RELAXED);
}

static bool fake_no_fp8_image; /* fake_cuda_set_no_fp8_image */
static int fake_major;         /* fake_cuda_set_major; 0: FAKE_CUDA_MAJOR, else 9 */

void fake_cuda_set_no_fp8_image(bool on)
{
	__atomic_store_n(&fake_no_fp8_image, on, __ATOMIC_RELAXED);
}

void fake_cuda_set_major(int major)
{
	__atomic_store_n(&fake_major, major, __ATOMIC_RELAXED);
}

int ndet_kernel_fp8_check(void)
{
	return __atomic_load_n(&fake_no_fp8_image, __ATOMIC_RELAXED)
		       ? (int)cudaErrorNoKernelImageForDevice
		       : (int)cudaSuccess;
}

int ndet_kernel_device_check(void)
{
	return __atomic_load_n(&fake_no_kernel_image, __ATOMIC_RELAXED)
		       ? (int)cudaErrorNoKernelImageForDevice
		       : (int)cudaSuccess;
}

int ndet_kernel_allreduce(const struct ndet_kernel_args *args, void *opaque_stream)
{
	struct fake_stream *stream = fake_stream_of(opaque_stream);
	int err = cudaSuccess;
	pthread_mutex_lock(&fake_lock);
	if (!fake_stream_usable_locked(stream, "kernel launch")) {
		err = cudaErrorInvalidResourceHandle;
	} else if (fake_kernel == FAKE_CUDA_KERNEL_LAUNCH_FAILS) {
		fake_note("launch %s failed", stream->named.name);
		err = cudaErrorLaunchOutOfResources;
	} else if (stream->capture != 0) {
		fake_note("launch %s captured", stream->named.name);
	} else {
		struct fake_item *item = calloc(1, sizeof(*item));
		if (item == NULL) {
			err = cudaErrorMemoryAllocation;
		} else {
			if (args->rank >= 0 && args->rank < NDET_MAX_RANKS) {
				fake_last_args[args->rank] = *args;
				fake_last_valid[args->rank] = true;
			}
			item->kind = FAKE_ITEM_KERNEL;
			item->behaviour = fake_kernel;
			item->status = args->host_status;
			item->rank = args->rank;
			if (args->rank >= 0 && args->rank < NDET_MAX_RANKS &&
			    args->flags[args->rank] != NULL)
				item->abort_word = &args->flags[args->rank]->abort_word;
			item->pid = getpid();
			fake_queue_locked(stream, item);
			fake_counts.launches++;
			fake_note("launch %s", stream->named.name);
			if (fake_kernel == FAKE_CUDA_KERNEL_FAIL_UNORDERED) {
				/* The error first; the details never come. */
				__atomic_store_n(&item->status->error, NDET_KERNEL_ERR_TIMEOUT,
						 __ATOMIC_RELEASE);
			} else if (fake_kernel == FAKE_CUDA_KERNEL_FAIL_CLAIMED) {
				/* Claimed, half the details written, the error not yet out. */
				__atomic_store_n(&item->status->claim, NDET_KERNEL_ERR_TIMEOUT,
						 __ATOMIC_RELEASE);
				item->status->block = 5;
				item->status->peer = 1;
				fake_claimed = item->status;
			}
		}
	}
	pthread_mutex_unlock(&fake_lock);
	return fake_result((cudaError_t)err);
}

/* A stage kernel across hosts: recorded, then run as any kernel (its fake behaviour). */
int ndet_kernel_hosts_stage(const struct ndet_hosts_args *args, void *opaque_stream)
{
	pthread_mutex_lock(&fake_lock);
	if (args->k.rank >= 0 && args->k.rank < NDET_MAX_RANKS) {
		fake_last_hosts[args->k.rank] = *args;
		fake_last_hosts_valid[args->k.rank] = true;
	}
	pthread_mutex_unlock(&fake_lock);
	return ndet_kernel_allreduce(&args->k, opaque_stream);
}

/* ---------------------------------------------------------------- test controls */

void fake_cuda_reset(void)
{
	pthread_mutex_lock(&fake_lock);
	/* What engines kept on purpose goes too, as the driver frees it at exit. */
	while (fake_blocks != NULL)
		fake_block_unlink_locked(fake_blocks);
	for (struct fake_stream *stream = &fake_default_stream; stream != NULL;) {
		struct fake_stream *next = fake_stream_next(stream);
		while (stream->head != NULL) {
			struct fake_item *item = stream->head;
			stream->head = item->next;
			free(item);
		}
		stream->tail = NULL;
		if (stream != &fake_default_stream)
			free(stream);
		stream = next;
	}
	fake_streams = NULL;
	while (fake_events != NULL) {
		struct fake_named *next = fake_events->next_all;
		free(fake_events);
		fake_events = next;
	}
	memset(&fake_counts, 0, sizeof(fake_counts));
	memset(fake_last_valid, 0, sizeof(fake_last_valid));
	memset(fake_last_hosts_valid, 0, sizeof(fake_last_hosts_valid));
	fake_violation[0] = '\0';
	fake_pid_per_device = false;
	fake_sm_count = 132;
	fake_ended_count = 0;
	fake_unloading = false;
	fake_fail_malloc_bytes = 0;
	fake_fail_device_copies = 0;
	fake_no_kernel_image = false;
	fake_set_device_fails = false;
	fake_no_fp8_image = false;
	fake_major = 0;
	fake_claimed = NULL;
	fake_log_count = 0;
	fake_next_id = 1;
	pthread_mutex_unlock(&fake_lock);
}

void fake_cuda_counts(struct fake_cuda_counts *counts)
{
	pthread_mutex_lock(&fake_lock);
	*counts = fake_counts;
	pthread_mutex_unlock(&fake_lock);
}

const char *fake_cuda_last_violation(void)
{
	return fake_violation;
}

void fake_cuda_set_kernel(enum fake_cuda_kernel kind)
{
	fake_kernel = kind;
}

int fake_cuda_kernels_running(void)
{
	pthread_mutex_lock(&fake_lock);
	int running = fake_running_locked();
	pthread_mutex_unlock(&fake_lock);
	return running;
}

void fake_cuda_publish_claimed(void)
{
	pthread_mutex_lock(&fake_lock);
	if (fake_claimed != NULL)
		fake_publish(fake_claimed, fake_claimed->claim, (int)fake_claimed->rank);
	fake_claimed = NULL;
	pthread_mutex_unlock(&fake_lock);
}

void fake_cuda_set_sm_count(int sms)
{
	__atomic_store_n(&fake_sm_count, sms, __ATOMIC_RELAXED);
}

void fake_cuda_set_pid_per_device(bool on)
{
	__atomic_store_n(&fake_pid_per_device, on, __ATOMIC_RELAXED);
}

void fake_cuda_set_thread_pid(pid_t pid)
{
	fake_thread_pid = pid;
}

void fake_cuda_end_process(pid_t pid)
{
	pthread_mutex_lock(&fake_lock);
	if (!fake_ended_locked(pid) &&
	    fake_ended_count < (int)(sizeof(fake_ended) / sizeof(fake_ended[0])))
		fake_ended[fake_ended_count++] = pid;
	/* The driver closes what it mapped; its kernels end with it (fake_item_done_locked). */
	for (struct fake_block *block = fake_blocks, *next; block != NULL; block = next) {
		next = block->next;
		for (struct fake_mapping *mapping = block->maps; mapping != NULL;
		     mapping = mapping->next) {
			if (mapping->pid == pid) {
				fake_note("end %d: close", (int)pid);
				fake_unmap_locked(block, mapping, true);
				break;
			}
		}
	}
	pthread_mutex_unlock(&fake_lock);
}

void fake_cuda_set_unloading(bool on)
{
	pthread_mutex_lock(&fake_lock);
	fake_unloading = on;
	pthread_mutex_unlock(&fake_lock);
}

void fake_cuda_set_close_delay_ms(int ms)
{
	fake_close_delay_ms = ms;
}

void fake_cuda_set_capture(cudaStream_t stream, unsigned long long id)
{
	pthread_mutex_lock(&fake_lock);
	struct fake_stream *captured = fake_stream_of(stream);
	fake_active_captures += (id != 0) - (captured->capture != 0);
	captured->capture = id;
	pthread_mutex_unlock(&fake_lock);
}

const char *fake_cuda_name(const void *handle)
{
	return handle == NULL ? "s0" : ((const struct fake_named *)handle)->name;
}

int fake_cuda_log_find(const char *prefix, int from)
{
	int found = -1;
	pthread_mutex_lock(&fake_lock);
	for (int i = from < 0 ? 0 : from; i < fake_log_count && found < 0; i++)
		if (strncmp(fake_log_lines[i], prefix, strlen(prefix)) == 0)
			found = i;
	pthread_mutex_unlock(&fake_lock);
	return found;
}

int fake_cuda_log_length(void)
{
	pthread_mutex_lock(&fake_lock);
	int count = fake_log_count;
	pthread_mutex_unlock(&fake_lock);
	return count;
}

const char *fake_cuda_log_line(int i)
{
	return i >= 0 && i < fake_log_count ? fake_log_lines[i] : "";
}

/* ---------------------------------------------------------------- the runtime */

/* Every call once the runtime is unloading: refused, and counted. */
static bool fake_refused_unloading(void)
{
	pthread_mutex_lock(&fake_lock);
	bool unloading = fake_unloading;
	if (unloading)
		fake_counts.calls_unloading++;
	pthread_mutex_unlock(&fake_lock);
	if (unloading)
		fake_last_error = cudaErrorCudartUnloading;
	return unloading;
}

#define FAKE_RUNTIME_CALL()                                                                        \
	do {                                                                                       \
		if (fake_refused_unloading())                                                      \
			return cudaErrorCudartUnloading;                                           \
	} while (0)

cudaError_t cudaGetLastError(void)
{
	cudaError_t err = fake_last_error;
	fake_last_error = cudaSuccess;
	return err;
}

const char *cudaGetErrorString(cudaError_t error)
{
	return error == cudaSuccess ? "no error" : "fake CUDA error";
}

cudaError_t cudaSetDevice(int device)
{
	FAKE_RUNTIME_CALL();
	if (device < 0 || device >= FAKE_DEVICES)
		return fake_result(cudaErrorInvalidDevice);
	if (__atomic_load_n(&fake_set_device_fails, __ATOMIC_RELAXED))
		return fake_result(cudaErrorDevicesUnavailable);
	fake_device = device;
	return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
	FAKE_RUNTIME_CALL();
	*device = fake_device;
	return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
	FAKE_RUNTIME_CALL();
	if (device < 0 || device >= FAKE_DEVICES)
		return fake_result(cudaErrorInvalidDevice);
	memset(prop, 0, sizeof(*prop));
	prop->uuid.bytes[0] = (char)(device + 1);
	prop->major = __atomic_load_n(&fake_major, __ATOMIC_RELAXED);
	if (prop->major == 0) {
		const char *text = getenv("FAKE_CUDA_MAJOR");
		prop->major = text != NULL && atoi(text) > 0 ? atoi(text) : 9;
	}
	prop->multiProcessorCount = __atomic_load_n(&fake_sm_count, __ATOMIC_RELAXED);
	return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags)
{
	FAKE_RUNTIME_CALL();
	(void)peerDevice, (void)flags;
	return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
{
	FAKE_RUNTIME_CALL();
	enum cudaStreamCaptureMode previous = fake_capture_mode;
	fake_capture_mode = *mode;
	*mode = previous;
	return cudaSuccess;
}

static cudaError_t fake_alloc(void **pointer, size_t size, bool pinned)
{
	struct fake_block *block = calloc(1, sizeof(*block));
	char *base = ndet_big_alloc(size);
	if (block == NULL || base == NULL) {
		free(block);
		ndet_big_free(base, size);
		return fake_result(cudaErrorMemoryAllocation);
	}
	block->base = base;
	block->size = size;
	block->pinned = pinned;
	pthread_mutex_lock(&fake_lock);
	block->next = fake_blocks;
	fake_blocks = block;
	fake_counts.allocations++;
	fake_counts.bytes += size;
	pthread_mutex_unlock(&fake_lock);
	*pointer = base;
	return cudaSuccess;
}

/* cudaFree and cudaFreeHost synchronise the whole device first. */
static cudaError_t fake_free(void *pointer, bool pinned)
{
	cudaError_t err = cudaSuccess;
	if (pointer == NULL)
		return cudaSuccess;
	pthread_mutex_lock(&fake_lock);
	struct fake_block *block = fake_block_find_locked(pointer);
	if (block == NULL || block->freed || block->pinned != pinned) {
		fake_violate("free of %p, which is no live %s allocation", pointer,
			     pinned ? "pinned" : "device");
		err = cudaErrorInvalidValue;
	} else {
		/* A reader in another process: its kernel would read freed memory. */
		bool reader = false;
		for (const struct fake_mapping *mapping = block->maps; mapping != NULL;
		     mapping = mapping->next) {
			if (fake_process_running_locked(mapping->pid)) {
				fake_violate("cudaFree of memory process %d maps while a kernel of "
					     "it may run",
					     (int)mapping->pid);
				reader = true;
			}
		}
		/* The caller's context synchronises: other processes' kernels do not count. */
		if (fake_process_running_locked(getpid()) && !reader)
			fake_violate("%s while a kernel of process %d may spin: it would wait for "
				     "it",
				     pinned ? "cudaFreeHost" : "cudaFree", (int)getpid());
		fake_counts.allocations--;
		fake_counts.bytes -= block->size;
		fake_note("free %zu", block->size);
		if (block->mappings > 0) {
			fake_counts.freed_mapped++;
			block->freed = true;
		} else {
			fake_block_unlink_locked(block);
		}
	}
	pthread_mutex_unlock(&fake_lock);
	return fake_result(err);
}

/*
 * While a stream captures (in the global mode, which the fake assumes), CUDA refuses
 * calls that may synchronise the device, in every thread that has not switched itself
 * to the relaxed mode (cudaThreadExchangeStreamCaptureMode), and invalidates the
 * capture.
 */
static bool fake_capture_forbids(const char *what)
{
	pthread_mutex_lock(&fake_lock);
	const bool forbidden =
		fake_active_captures > 0 && fake_capture_mode != cudaStreamCaptureModeRelaxed;
	if (forbidden)
		fake_violate("%s while a stream captures, outside the relaxed capture mode", what);
	pthread_mutex_unlock(&fake_lock);
	return forbidden;
}

cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	FAKE_RUNTIME_CALL();
	if (fake_capture_forbids("cudaMalloc"))
		return fake_result(cudaErrorStreamCaptureUnsupported);
	pthread_mutex_lock(&fake_lock);
	bool refused = fake_fail_malloc_bytes != 0 && size == fake_fail_malloc_bytes;
	pthread_mutex_unlock(&fake_lock);
	if (refused)
		return fake_result(cudaErrorMemoryAllocation);
	return fake_alloc(devPtr, size, false);
}

void fake_cuda_fail_device_copies(int count)
{
	pthread_mutex_lock(&fake_lock);
	fake_fail_device_copies = count;
	pthread_mutex_unlock(&fake_lock);
}

void fake_cuda_fail_malloc_of(size_t bytes)
{
	pthread_mutex_lock(&fake_lock);
	fake_fail_malloc_bytes = bytes;
	pthread_mutex_unlock(&fake_lock);
}

enum fake_cuda_memory fake_cuda_memory_kind(const void *pointer, size_t bytes)
{
	const char *p = pointer;
	enum fake_cuda_memory kind = FAKE_CUDA_MEMORY_NONE;
	pthread_mutex_lock(&fake_lock);
	for (const struct fake_block *block = fake_blocks; block != NULL; block = block->next)
		if (!block->freed && p >= block->base && p + bytes <= block->base + block->size) {
			kind = block->pinned ? FAKE_CUDA_MEMORY_PINNED : FAKE_CUDA_MEMORY_DEVICE;
			break;
		}
	pthread_mutex_unlock(&fake_lock);
	return kind;
}

cudaError_t cudaFree(void *devPtr)
{
	FAKE_RUNTIME_CALL();
	if (fake_capture_forbids("cudaFree"))
		return fake_result(cudaErrorStreamCaptureUnsupported);
	return fake_free(devPtr, false);
}

cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
	FAKE_RUNTIME_CALL();
	if (fake_capture_forbids("cudaHostAlloc"))
		return fake_result(cudaErrorStreamCaptureUnsupported);
	(void)flags;
	return fake_alloc(pHost, size, true);
}

cudaError_t cudaFreeHost(void *ptr)
{
	FAKE_RUNTIME_CALL();
	if (fake_capture_forbids("cudaFreeHost"))
		return fake_result(cudaErrorStreamCaptureUnsupported);
	return fake_free(ptr, true);
}

cudaError_t cudaHostGetDevicePointer(void **pDevice, void *pHost, unsigned int flags)
{
	FAKE_RUNTIME_CALL();
	(void)flags;
	*pDevice = pHost; /* one address space */
	return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
	FAKE_RUNTIME_CALL();
	pthread_mutex_lock(&fake_lock);
	bool usable = fake_stream_usable_locked(fake_stream_of(stream), "cudaMemsetAsync");
	if (fake_touches_freed_locked(devPtr, count))
		fake_violate("cudaMemsetAsync into memory its owner freed");
	pthread_mutex_unlock(&fake_lock);
	if (!usable)
		return fake_result(cudaErrorInvalidResourceHandle);
	memset(devPtr, value, count);
	return cudaSuccess;
}

/*
 * A copy the way the device does it: another "process" (thread) may read or write the
 * same device words at the same time (a peer writing its detach word while the owner
 * polls it), which real device memory serves word by word.  Aligned 8-byte words are
 * copied with relaxed atomics so ThreadSanitizer sees what the hardware guarantees;
 * anything else is a plain copy.
 */
static void fake_device_copy(void *dst, const void *src, size_t count)
{
	if (((uintptr_t)dst | (uintptr_t)src | count) % sizeof(uint64_t) != 0) {
		memmove(dst, src, count);
		return;
	}
	uint64_t *to = dst;
	const uint64_t *from = src;
	for (size_t i = 0; i < count / sizeof(uint64_t); i++)
		__atomic_store_n(&to[i], __atomic_load_n(&from[i], __ATOMIC_RELAXED),
				 __ATOMIC_RELAXED);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
			    cudaStream_t stream)
{
	FAKE_RUNTIME_CALL();
	pthread_mutex_lock(&fake_lock);
	if (kind == cudaMemcpyDeviceToDevice && fake_fail_device_copies > 0) {
		fake_fail_device_copies--;
		pthread_mutex_unlock(&fake_lock);
		return fake_result(cudaErrorInvalidValue);
	}
	bool usable = fake_stream_usable_locked(fake_stream_of(stream), "cudaMemcpyAsync");
	if (fake_touches_freed_locked(dst, count) || fake_touches_freed_locked(src, count))
		fake_violate("cudaMemcpyAsync through a mapping of memory its owner freed");
	pthread_mutex_unlock(&fake_lock);
	if (!usable)
		return fake_result(cudaErrorInvalidResourceHandle);
	fake_device_copy(dst, src, count);
	return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	FAKE_RUNTIME_CALL();
	if (fake_capture_forbids("cudaMemcpy"))
		return fake_result(cudaErrorStreamCaptureUnsupported);
	(void)kind;
	pthread_mutex_lock(&fake_lock);
	fake_counts.blocking++;
	if (fake_touches_freed_locked(dst, count) || fake_touches_freed_locked(src, count))
		fake_violate("cudaMemcpy through a mapping of memory its owner freed");
	pthread_mutex_unlock(&fake_lock);
	fake_device_copy(dst, src, count);
	return cudaSuccess;
}

/* A new stream or event of `size` bytes, named "<prefix><id>" and listed. */
static void *fake_handle_new(size_t size, char prefix, struct fake_named **list)
{
	struct fake_named *named = calloc(1, size);
	if (named == NULL)
		return NULL;
	pthread_mutex_lock(&fake_lock);
	snprintf(named->name, sizeof(named->name), "%c%d", prefix, fake_next_id++);
	named->next_all = *list;
	*list = named;
	pthread_mutex_unlock(&fake_lock);
	return named;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
	FAKE_RUNTIME_CALL();
	(void)flags;
	struct fake_stream *stream = fake_handle_new(sizeof(*stream), 's', &fake_streams);
	if (stream == NULL)
		return fake_result(cudaErrorMemoryAllocation);
	pthread_mutex_lock(&fake_lock);
	stream->id = fake_next_stream_id++;
	pthread_mutex_unlock(&fake_lock);
	*pStream = (cudaStream_t)stream;
	return cudaSuccess;
}

cudaError_t cudaStreamGetId(cudaStream_t opaque, unsigned long long *id)
{
	FAKE_RUNTIME_CALL();
	struct fake_stream *stream = fake_stream_of(opaque);
	cudaError_t err = cudaSuccess;
	pthread_mutex_lock(&fake_lock);
	if (!fake_stream_usable_locked(stream, "cudaStreamGetId")) {
		err = cudaErrorInvalidResourceHandle;
	} else if (stream->capture != 0) {
		/* CUDA refuses it and invalidates the capture: every later call fails. */
		fake_violate("cudaStreamGetId on stream %s while it captures", stream->named.name);
		err = cudaErrorStreamCaptureUnsupported;
	} else {
		*id = stream->id;
	}
	pthread_mutex_unlock(&fake_lock);
	return fake_result(err);
}

void fake_cuda_stream_renew(cudaStream_t opaque)
{
	pthread_mutex_lock(&fake_lock);
	fake_stream_of(opaque)->id = fake_next_stream_id++;
	pthread_mutex_unlock(&fake_lock);
}

cudaError_t cudaStreamDestroy(cudaStream_t opaque)
{
	FAKE_RUNTIME_CALL();
	struct fake_stream *stream = fake_stream_of(opaque);
	cudaError_t err = cudaSuccess;
	pthread_mutex_lock(&fake_lock);
	if (fake_stream_usable_locked(stream, "cudaStreamDestroy"))
		stream->destroyed = true; /* kept: its queue may still be waited for */
	else
		err = cudaErrorInvalidResourceHandle;
	pthread_mutex_unlock(&fake_lock);
	return fake_result(err);
}

cudaError_t cudaStreamSynchronize(cudaStream_t opaque)
{
	FAKE_RUNTIME_CALL();
	struct fake_stream *stream = fake_stream_of(opaque);
	cudaError_t err = cudaSuccess;
	pthread_mutex_lock(&fake_lock);
	fake_counts.blocking++;
	if (!fake_stream_usable_locked(stream, "cudaStreamSynchronize")) {
		err = cudaErrorInvalidResourceHandle;
	} else if (stream->capture != 0) {
		fake_violate("cudaStreamSynchronize(%s) while it captures", stream->named.name);
		err = cudaErrorStreamCaptureUnsupported;
	} else if (!fake_stream_done_locked(stream, stream->seq)) {
		fake_violate("cudaStreamSynchronize(%s) behind a kernel that may spin",
			     stream->named.name);
		err = cudaErrorNotReady;
	}
	pthread_mutex_unlock(&fake_lock);
	return fake_result(err);
}

cudaError_t cudaStreamGetCaptureInfo(cudaStream_t opaque,
				     enum cudaStreamCaptureStatus *captureStatus_out,
				     unsigned long long *id_out, cudaGraph_t *graph_out,
				     const cudaGraphNode_t **dependencies_out,
				     const cudaGraphEdgeData **edgeData_out,
				     size_t *numDependencies_out)
{
	FAKE_RUNTIME_CALL();
	(void)graph_out, (void)dependencies_out, (void)edgeData_out, (void)numDependencies_out;
	struct fake_stream *stream = fake_stream_of(opaque);
	cudaError_t err = cudaSuccess;
	pthread_mutex_lock(&fake_lock);
	if (!fake_stream_usable_locked(stream, "cudaStreamGetCaptureInfo")) {
		err = cudaErrorInvalidResourceHandle;
	} else {
		*captureStatus_out = stream->capture != 0 ? cudaStreamCaptureStatusActive
							  : cudaStreamCaptureStatusNone;
		if (id_out != NULL)
			*id_out = stream->capture;
	}
	pthread_mutex_unlock(&fake_lock);
	return fake_result(err);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
	FAKE_RUNTIME_CALL();
	(void)flags;
	struct fake_event *created = fake_handle_new(sizeof(*created), 'e', &fake_events);
	if (created == NULL)
		return fake_result(cudaErrorMemoryAllocation);
	*event = (cudaEvent_t)created;
	return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t opaque)
{
	FAKE_RUNTIME_CALL();
	struct fake_event *event = (struct fake_event *)opaque;
	pthread_mutex_lock(&fake_lock);
	if (event->destroyed)
		fake_violate("event %s destroyed twice", event->named.name);
	event->destroyed = true; /* kept until the reset, like streams */
	pthread_mutex_unlock(&fake_lock);
	return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t opaque, cudaStream_t opaque_stream)
{
	FAKE_RUNTIME_CALL();
	struct fake_event *event = (struct fake_event *)opaque;
	struct fake_stream *stream = fake_stream_of(opaque_stream);
	cudaError_t err = cudaSuccess;
	pthread_mutex_lock(&fake_lock);
	if (!fake_stream_usable_locked(stream, "cudaEventRecord")) {
		err = cudaErrorInvalidResourceHandle;
	} else {
		event->captured = stream->capture != 0;
		event->stream = stream;
		event->seq = stream->seq;
		fake_note("record %s %s", event->named.name, stream->named.name);
	}
	pthread_mutex_unlock(&fake_lock);
	return fake_result(err);
}

cudaError_t cudaEventQuery(cudaEvent_t opaque)
{
	FAKE_RUNTIME_CALL();
	struct fake_event *event = (struct fake_event *)opaque;
	cudaError_t err = cudaSuccess;
	pthread_mutex_lock(&fake_lock);
	if (event->captured) {
		fake_violate("cudaEventQuery of %s, recorded in a capture", event->named.name);
		err = cudaErrorStreamCaptureUnsupported;
	} else if (event->stream != NULL && fake_stream_faulted_locked(event->stream, event->seq)) {
		err = cudaErrorIllegalAddress;
	} else if (event->stream != NULL && !fake_stream_done_locked(event->stream, event->seq)) {
		err = cudaErrorNotReady;
	}
	pthread_mutex_unlock(&fake_lock);
	return fake_result(err);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t opaque_stream, cudaEvent_t opaque, unsigned int flags)
{
	FAKE_RUNTIME_CALL();
	(void)flags;
	struct fake_event *event = (struct fake_event *)opaque;
	struct fake_stream *stream = fake_stream_of(opaque_stream);
	cudaError_t err = cudaSuccess;
	pthread_mutex_lock(&fake_lock);
	if (!fake_stream_usable_locked(stream, "cudaStreamWaitEvent")) {
		err = cudaErrorInvalidResourceHandle;
	} else if (event->captured != (stream->capture != 0) ||
		   (event->captured && event->stream->capture != stream->capture)) {
		fake_violate("%s waits for %s across a capture boundary", stream->named.name,
			     event->named.name);
		err = cudaErrorStreamCaptureIsolation;
	} else {
		fake_note("wait %s %s", stream->named.name, event->named.name);
		struct fake_item *item = stream->capture != 0 || event->stream == NULL
						 ? NULL
						 : calloc(1, sizeof(*item));
		if (item != NULL) {
			item->kind = FAKE_ITEM_WAIT;
			item->wait_stream = event->stream;
			item->wait_seq = event->seq;
			fake_queue_locked(stream, item);
		}
	}
	pthread_mutex_unlock(&fake_lock);
	return fake_result(err);
}

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr)
{
	FAKE_RUNTIME_CALL();
	cudaError_t err = cudaSuccess;
	pthread_mutex_lock(&fake_lock);
	struct fake_block *block = fake_block_find_locked(devPtr);
	if (block == NULL || block->pinned || block->freed) {
		err = cudaErrorInvalidValue;
	} else {
		struct fake_ipc_handle mine = {.magic = FAKE_IPC_MAGIC,
					       .owner = (int32_t)getpid(),
					       .base = (uintptr_t)devPtr};
		block->owner = getpid();
		memset(handle, 0, sizeof(*handle));
		memcpy(handle->reserved, &mine, sizeof(mine));
	}
	pthread_mutex_unlock(&fake_lock);
	return fake_result(err);
}

cudaError_t cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle, unsigned int flags)
{
	FAKE_RUNTIME_CALL();
	(void)flags;
	struct fake_ipc_handle theirs;
	cudaError_t err = cudaSuccess;
	memcpy(&theirs, handle.reserved, sizeof(theirs));
	pthread_mutex_lock(&fake_lock);
	struct fake_block *block = fake_block_find_locked((void *)(uintptr_t)theirs.base);
	struct fake_mapping *mapping = NULL;
	if (theirs.magic != FAKE_IPC_MAGIC || block == NULL || block->freed) {
		err = cudaErrorInvalidValue;
	} else if (theirs.owner == (int32_t)getpid()) {
		err = cudaErrorInvalidValue; /* CUDA refuses its own process's handles */
	} else {
		/* Opened again by the same process: the same pointer, one reference more. */
		for (mapping = block->maps; mapping != NULL && mapping->pid != getpid();
		     mapping = mapping->next)
			;
		if (mapping == NULL && (mapping = calloc(1, sizeof(*mapping))) != NULL) {
			mapping->pid = getpid();
			mapping->next = block->maps;
			block->maps = mapping;
		}
		if (mapping == NULL)
			err = cudaErrorMemoryAllocation;
	}
	if (err == cudaSuccess) {
		mapping->count++;
		block->mappings++;
		fake_counts.mappings++;
		fake_note("open %d %d", (int)getpid(), (int)theirs.owner);
		*devPtr = block->base;
	}
	pthread_mutex_unlock(&fake_lock);
	return fake_result(err);
}

cudaError_t cudaIpcCloseMemHandle(void *devPtr)
{
	FAKE_RUNTIME_CALL();
	cudaError_t err = cudaSuccess;
	if (fake_close_delay_ms > 0) {
		struct timespec pause = {.tv_sec = fake_close_delay_ms / 1000,
					 .tv_nsec = (fake_close_delay_ms % 1000) * 1000000L};
		nanosleep(&pause, NULL);
	}
	pthread_mutex_lock(&fake_lock);
	struct fake_block *block = fake_block_find_locked(devPtr);
	struct fake_mapping *mapping = block != NULL ? block->maps : NULL;
	while (mapping != NULL && mapping->pid != getpid())
		mapping = mapping->next;
	if (mapping == NULL) {
		fake_violate("cudaIpcCloseMemHandle of %p, which process %d has not mapped", devPtr,
			     (int)getpid());
		err = cudaErrorInvalidValue;
	} else {
		fake_note("close");
		fake_unmap_locked(block, mapping, false);
	}
	pthread_mutex_unlock(&fake_lock);
	return fake_result(err);
}
