/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * A fake CUDA runtime for the CPU tests of the CUDA engine (src/engine/ndet_engine*.c
 * compiled into the test, linked against this instead of cudart and the kernels):
 * the runtime calls the engine makes, and ndet_kernel_allreduce(), on host memory.
 *
 * Model:
 * - Devices 0..7, a current device per thread.  Device memory and pinned host
 *   memory are calloc'ed blocks, counted while live.
 * - "Processes": ranks publish getpid() in their setup record.  The test links with
 *   -Wl,--wrap=getpid; fake_cuda_set_pid_per_device(true) makes getpid() depend on
 *   the current device (every device its own process, so one thread can drive
 *   ranks that reach each other through IPC), fake_cuda_set_thread_pid() sets it
 *   for the calling thread.
 * - IPC: a handle names the block and the process that exported it; opening it in
 *   the same process fails, as CUDA's does.  Mappings are counted per block and
 *   process: a process that opens a handle again gets the same pointer and one
 *   reference more, each close drops one.  A block its owner frees while mapped is
 *   no allocation any more, but its memory lives on for the mappings until the last
 *   one closes (the driver keeps it for an open import).
 * - Processes end (fake_cuda_end_process): their mappings close and their kernels
 *   end.  The test links with -Wl,--wrap=kill: kill(pid, 0) finds a fake process
 *   (pids FAKE_CUDA_PID_MIN..MAX) until it ended, real pids are asked for real.
 * - Streams run nothing by themselves: a launch queues a "kernel" whose behaviour
 *   the test picked (fake_cuda_set_kernel), and whether it has finished is decided
 *   when someone asks (cudaEventQuery): a spinning kernel finishes once its engine's
 *   abort flag is set, a stuck one never.  Copies and memsets happen at once.
 *   cudaEventRecord snapshots the stream's queue; cudaStreamWaitEvent queues a wait
 *   for that snapshot.  Streams can be put into a capture (fake_cuda_set_capture):
 *   launches there are not queued, and events recorded there cannot be queried.
 * - Violations (counted, the last one described): any call naming a destroyed
 *   stream; cudaFree of memory a process maps while a kernel of that process may
 *   still run (it may read it); a copy or memset touching memory its owner freed
 *   (through a mapping that outlived the free); cudaFree or cudaFreeHost while a
 *   queued kernel of the calling process has not finished, or a stream
 *   synchronisation while one of that stream's has not (device-wide, or stream,
 *   synchronisation behind a kernel that may spin: it would hang; another process's
 *   context is not synchronised); querying an event
 *   recorded in a capture; freeing what was not allocated; closing a mapping the
 *   calling process does not hold.
 * - Runtime shutdown (fake_cuda_set_unloading): every runtime call fails with
 *   cudaErrorCudartUnloading and is counted (a teardown at exit must stop at the
 *   first).
 * - A log of the calls that matter for ordering ("launch s3", "record e2 s3",
 *   "wait s4 e2", "open <importer pid> <owner pid>", "close", "free", "exchange"
 *   from the test), one line each.
 */
#ifndef NDET_FAKE_CUDA_H_
#define NDET_FAKE_CUDA_H_

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <cuda_runtime_api.h>

enum fake_cuda_kernel {
	FAKE_CUDA_KERNEL_DONE = 0, /* finishes at once */
	FAKE_CUDA_KERNEL_SPIN,     /* finishes once its engine's abort flag is set, as
				    * NDET_KERNEL_ERR_ABORTED (published as the protocol says),
				    * or its rank's abort word, as NDET_KERNEL_ERR_PEER */
	FAKE_CUDA_KERNEL_STUCK,    /* never finishes, abort or not (queued behind a hung one) */
	FAKE_CUDA_KERNEL_FAULT,    /* dies with an illegal address: events behind it fail */
	FAKE_CUDA_KERNEL_FAIL_UNORDERED, /* error word first, details never (wrong order) */
	FAKE_CUDA_KERNEL_FAIL_CLAIMED,   /* claimed, details half written, error unpublished */
	FAKE_CUDA_KERNEL_LAUNCH_FAILS,   /* the launch returns cudaErrorLaunchOutOfResources */
};

/* getpid() values the tests give their "processes" (fake_cuda_set_thread_pid, per device). */
#define FAKE_CUDA_PID_MIN 6000000
#define FAKE_CUDA_PID_MAX 7999999
/* getpid() of device d's "process" under fake_cuda_set_pid_per_device: this + d. */
#define FAKE_CUDA_PID_DEVICE 7000000

struct fake_cuda_counts {
	int allocations; /* live cudaMalloc + cudaHostAlloc blocks */
	uint64_t bytes;
	int mappings;        /* open cudaIpcOpenMemHandle references */
	int launches;        /* kernels queued (captured ones not counted) */
	int freed_mapped;    /* blocks freed by their owner while a process still mapped them */
	int calls_unloading; /* runtime calls refused since fake_cuda_set_unloading */
	int blocking;        /* host-blocking calls: cudaStreamSynchronize, cudaMemcpy */
	int violations;
};

/*
 * Forget everything, and free what engines kept on purpose (as the driver does at
 * exit): between tests only, with no engine left.
 */
void fake_cuda_reset(void);
void fake_cuda_counts(struct fake_cuda_counts *counts);
/* The last violation, "" when none. */
const char *fake_cuda_last_violation(void);

/* The behaviour of kernels this thread launches from now on (default DONE). */
void fake_cuda_set_kernel(enum fake_cuda_kernel kind);
/* Every kernel ever launched that has not finished (as asked now). */
int fake_cuda_kernels_running(void);
/* FAKE_CUDA_KERNEL_FAIL_CLAIMED: finish publishing (the rest of the details, then error). */
void fake_cuda_publish_claimed(void);

void fake_cuda_set_pid_per_device(bool on);

/* multiProcessorCount of every fake device (132 until fake_cuda_reset sets it back). */
void fake_cuda_set_sm_count(int sms);
void fake_cuda_set_thread_pid(pid_t pid);

/* Process `pid` ends (killed): its mappings close, its kernels end, kill() says ESRCH. */
void fake_cuda_end_process(pid_t pid);

/* From now on every runtime call fails with cudaErrorCudartUnloading (exit). */
void fake_cuda_set_unloading(bool on);

/* cudaSetDevice fails (a context already broken); fake_cuda_reset clears it. */
void fake_cuda_fail_set_device(bool on);

/* ndet_kernel_device_check says the build has no kernel image for the device (a GPU
 * the build's targets leave out); fake_cuda_reset clears it. */
void fake_cuda_set_no_kernel_image(bool on);

/* ndet_kernel_fp8_check says the build has no fp8 kernel image for the device;
 * fake_cuda_reset clears it. */
void fake_cuda_set_no_fp8_image(bool on);

/*
 * The compute capability major of every fake device (0, the default again after
 * fake_cuda_reset: $FAKE_CUDA_MAJOR, else 9).
 */
void fake_cuda_set_major(int major);

/* The next `count` device-to-device cudaMemcpyAsync fail (fake_cuda_reset clears it). */
void fake_cuda_fail_device_copies(int count);

/* From now on cudaMalloc of exactly `bytes` bytes fails (0: none; fake_cuda_reset clears it). */
void fake_cuda_fail_malloc_of(size_t bytes);

/* What [pointer, pointer + bytes) lies in: one live allocation of cudaMalloc, of
 * cudaHostAlloc, or neither (pageable memory, or across allocations). */
enum fake_cuda_memory {
	FAKE_CUDA_MEMORY_NONE,
	FAKE_CUDA_MEMORY_DEVICE,
	FAKE_CUDA_MEMORY_PINNED,
};
enum fake_cuda_memory fake_cuda_memory_kind(const void *pointer, size_t bytes);

/* cudaIpcCloseMemHandle sleeps this long on the calling thread (a slow peer). */
void fake_cuda_set_close_delay_ms(int ms);

/* Put `stream` into capture `id` (0: end the capture). */
void fake_cuda_set_capture(cudaStream_t stream, unsigned long long id);

/*
 * Give `stream` a new cudaStreamGetId, as CUDA does where one handle names another
 * stream: cudaStreamPerThread from another thread, or a destroyed stream's address
 * handed out again.
 */
void fake_cuda_stream_renew(cudaStream_t stream);
/* The short name of a stream or event in the log ("s3", "e2"). */
const char *fake_cuda_name(const void *handle);

/*
 * The arguments of the last kernel launch (not captured) whose args.rank is `rank`
 * (the launching rank's local index: its rank on one host); false if none.
 */
struct ndet_kernel_args;
bool fake_cuda_last_launch(int rank, struct ndet_kernel_args *args);
/* The arguments of local index `rank`'s last stage kernel across hosts (false: none yet). */
struct ndet_hosts_args;
bool fake_cuda_last_hosts_launch(int rank, struct ndet_hosts_args *args);

/* Append a line of the test's own to the log (e.g. "exchange"). */
void fake_cuda_log(const char *format, ...) __attribute__((format(printf, 1, 2)));
/* Index of the first log line at or after `from` that starts with `prefix`, else -1. */
int fake_cuda_log_find(const char *prefix, int from);
/* Number of log lines so far. */
int fake_cuda_log_length(void);
/* Line i of the log (valid until the next reset). */
const char *fake_cuda_log_line(int i);

#endif /* NDET_FAKE_CUDA_H_ */
