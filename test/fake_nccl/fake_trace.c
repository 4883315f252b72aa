/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The FAKE_NCCL_TRACE log of the fake: one line per API call with its arguments and
 * result, where pointers, communicators and unique ids get names that are stable
 * from run to run, so that tests can compare traces.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test/fake_nccl/fake_nccl_internal.h"

/* ------------------------------------------------------------------ trace */

static pthread_mutex_t fake_trace_lock = PTHREAD_MUTEX_INITIALIZER;
static int fake_trace_fd = -1;
static char fake_trace_path[4096];
static struct {
	const void *pointer;
	unsigned id;
} * fake_pointer_names;
static size_t fake_pointer_count, fake_pointer_capacity;

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

void fake_line_add(struct fake_line *line, const char *fmt, ...)
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

void fake_line_begin(struct fake_line *line, const char *function)
{
	line->enabled = fake_trace_sync();
	line->first_argument = true;
	line->length = 0;
	fake_line_add(line, "%s(", function);
}

void fake_arg(struct fake_line *line, const char *fmt, ...)
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

void fake_line_write(struct fake_line *line)
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

const char *fake_result_name(ncclResult_t result)
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

void fake_line_finish(struct fake_line *line, ncclResult_t result)
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
			void *grown = realloc(fake_pointer_names,
					      capacity * sizeof(fake_pointer_names[0]));
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

void fake_arg_pointer(struct fake_line *line, const char *what, const void *pointer)
{
	if (!line->enabled)
		return;
	char name[64];
	fake_pointer_name(pointer, name, sizeof(name));
	fake_arg(line, "%s=%s", what, name);
}

bool fake_comm_is_live_locked(const struct ncclComm *comm)
{
	for (struct ncclComm *live = fake_live_comms; live != NULL; live = live->next_live) {
		if (live == comm)
			return true;
	}
	return false;
}

void fake_comm_name(const struct ncclComm *comm, char *name, size_t size)
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

void fake_arg_comm(struct fake_line *line, const char *what, const struct ncclComm *comm)
{
	if (!line->enabled)
		return;
	char name[32];
	fake_comm_name(comm, name, sizeof(name));
	fake_arg(line, "%s=%s", what, name);
}

/* An output communicator: what the call wrote, or "unset" when it wrote nothing. */
void fake_arg_comm_out(struct fake_line *line, const char *what, ncclComm_t *comm, bool written)
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

void fake_arg_datatype(struct fake_line *line, const char *what, ncclDataType_t datatype)
{
	const char *name = fake_datatype_name(datatype);
	if (name != NULL)
		fake_arg(line, "%s=%s", what, name);
	else
		fake_arg(line, "%s=%d", what, (int)datatype);
}

void fake_arg_op(struct fake_line *line, const char *what, ncclRedOp_t op)
{
	static const char *const names[] = {"ncclSum", "ncclProd", "ncclMax", "ncclMin", "ncclAvg"};
	if ((int)op >= 0 && (int)op < (int)ncclNumOps)
		fake_arg(line, "%s=%s", what, names[op]);
	else
		fake_arg(line, "%s=op%d", what, (int)op);
}

bool fake_id_serial_of(const ncclUniqueId *id, unsigned *serial)
{
	if (memcmp(id->internal, FAKE_ID_MAGIC, strlen(FAKE_ID_MAGIC)) != 0)
		return false;
	memcpy(serial, id->internal + strlen(FAKE_ID_MAGIC), sizeof(*serial));
	return true;
}

void fake_arg_id(struct fake_line *line, const char *what, const ncclUniqueId *id)
{
	unsigned serial;
	if (id == NULL)
		fake_arg(line, "%sNULL", what);
	else if (fake_id_serial_of(id, &serial))
		fake_arg(line, "%sid%u", what, serial);
	else
		fake_arg(line, "%sid?", what);
}

void fake_arg_config(struct fake_line *line, const ncclConfig_t *config)
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
				used += (size_t)snprintf(text + used, sizeof(text) - used,         \
							 "%s%s=%d", used ? "," : "", #field,       \
							 config->field);                           \
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
