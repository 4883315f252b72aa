/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The drop-in libnccl.so.2 (src/dropin/): nccl-det built under NCCL's own SONAME,
 * exporting every name the NCCL it was built against exports.  The entry points
 * nccl-det interposes come from ndet_shim.c (ncclX and pncclX alike); every other
 * name is a generated tail-call trampoline (src/dropin/ndet-dropin-gen.sh) that
 * jumps through a slot, filled on the first call by ndet_dropin_resolve_slot() with
 * the real NCCL's address of that name (ndet_resolve_symbol).  A name the real NCCL
 * lacks gets a stub returning ncclInvalidUsage, with one WARN; no real NCCL at all,
 * ncclSystemError (the same codes as the interposed entry points).  Functions that
 * do not return ncclResult_t (ncclGetErrorString, the device API's ncclTeam*) get
 * that number in their return register: such names only exist in NCCLs that also
 * provide them, or nccl-det would be built against a newer NCCL than it runs on.
 */
#ifndef NDET_DROPIN_H_
#define NDET_DROPIN_H_

#ifdef __cplusplus
extern "C" {
#endif

/* Generated (ndet_dropin_tramp.S): one slot, name and WARN flag per trampoline. */
extern void *ndet_dropin_slots[];
extern const char *const ndet_dropin_names[];
extern const unsigned ndet_dropin_count;
extern int ndet_dropin_warned[];

/*
 * Called by the lazy stub of trampoline `index` with the caller's arguments saved:
 * returns the address to jump to, and stores it into the slot unless the answer
 * may still change (a call made while nccl-det itself is loading the real NCCL).
 */
void *ndet_dropin_resolve_slot(unsigned index);

#ifdef __cplusplus
}
#endif

#endif /* NDET_DROPIN_H_ */
