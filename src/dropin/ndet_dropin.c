/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Lazy resolution of the drop-in's trampolines (see ndet_dropin.h).
 */
#include "config.h"

#include "dropin/ndet_dropin.h"

#include <stdbool.h>
#include <string.h>

#include <nccl.h>

#include "common/ndet_log.h"
#include "resolve/ndet_resolve.h"
#include "common/ndet_status.h"

/*
 * What a trampoline of a name the real NCCL cannot give jumps to.  Called with the
 * caller's arguments, which it ignores: the caller pops nothing (System V ABI).
 */
static ncclResult_t ndet_dropin_invalid_usage(void)
{
	return ncclInvalidUsage;
}

static ncclResult_t ndet_dropin_system_error(void)
{
	return ncclSystemError;
}

static ncclResult_t ndet_dropin_internal_error(void)
{
	return ncclInternalError;
}

/* ncclX and pncclX share one WARN: they are one function of the real NCCL. */
static int *ndet_dropin_warned_flag(unsigned index)
{
	const char *name = ndet_dropin_names[index];
	if (strncmp(name, "pnccl", strlen("pnccl")) != 0)
		return &ndet_dropin_warned[index];
	for (unsigned other = 0; other < ndet_dropin_count; other++) {
		if (strcmp(ndet_dropin_names[other], name + 1) == 0)
			return &ndet_dropin_warned[other];
	}
	return &ndet_dropin_warned[index];
}

void *ndet_dropin_resolve_slot(unsigned index)
{
	if (index >= ndet_dropin_count)
		return (void *)ndet_dropin_internal_error;
	const char *name = ndet_dropin_names[index];
	ndet_status_t missing = NDET_OK;
	bool final = true;
	void *target = ndet_resolve_symbol(name, &missing, &final);
	if (target == NULL) {
		ndet_status_t status =
			ndet_resolve_missing_symbol(name, ndet_dropin_warned_flag(index));
		target = status == NDET_ERR_INVALID_USAGE ? (void *)ndet_dropin_invalid_usage
							  : (void *)ndet_dropin_system_error;
		NDET_TRACE(NDET_SUBSYS_INIT, "trampoline %s: %s", name, ndet_status_name(missing));
	}
	/* Two threads may race here; both store the same address. */
	if (final)
		__atomic_store_n(&ndet_dropin_slots[index], target, __ATOMIC_RELEASE);
	return target;
}
