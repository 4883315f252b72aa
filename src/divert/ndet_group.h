/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * NCCL groups, as nccl-det sees them: per thread and nesting, like NCCL's own.
 *
 * ncclGroupStart is forwarded (calls that go to NCCL join NCCL's group) and counted.
 * Inside a group, an eligible reduction (ncclAllReduce, ncclReduceScatter,
 * ncclReduce: "all-reduce" below stands for any of them) is recorded, not launched;
 * so is a
 * communicator created there (its setup must wait: its init runs at ncclGroupEnd)
 * and an ncclCommFinalize (its barrier needs the communicator NCCL would finalize).
 * At the outermost ncclGroupEnd: NCCL's group end is forwarded first, then the
 * pending setups run in lockstep (outside any group), then the recorded all-reduces
 * in issue order per communicator: diverted ones through the engine, those that
 * turned out to fall back replayed through NCCL inside one real group (one thread
 * may drive several ranks: never one by one), then the held finalizes.  Where NCCL's
 * group end (or a replay's) answers ncclInProgress (non-blocking communicators),
 * what follows on those communicators waits until NCCL is done with them
 * (ndet_comm_wait_nccl): NCCL refuses calls before, and ours must reach the streams
 * after NCCL's kernels issued ahead of them.  ncclGroupSimulateEnd drops what was
 * recorded.
 *
 * Known reordering: an NCCL collective nccl-det never diverts (ncclBroadcast,
 * ncclAllGather, send/receive, ...) issued in the same group as a diverted reduction
 * on a communicator runs in NCCL's group end, before the diverted one, whatever the
 * issue order.  The reductions themselves (diverted or replayed) keep their issue
 * order per communicator, mixed kinds included.  On a non-blocking communicator
 * without a recorded reduction in the group nccl-det does not wait for NCCL: a
 * diverted kernel on a stream that such a communicator's NCCL work of the same group
 * also uses may reach it first.
 */
#ifndef NDET_GROUP_H_
#define NDET_GROUP_H_

#include <stdbool.h>
#include <stddef.h>

#include <nccl.h>

#include "kernels/ndet_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* This thread's nesting depth of user groups. */
int ndet_group_depth(void);

/* After the real ncclGroupStart returned `result`. */
void ndet_group_after_start(ncclResult_t result);

/* After the real ncclGroupEnd: returns NCCL's result combined with ours. */
ncclResult_t ndet_group_after_end(ncclResult_t result);

/* After the real ncclGroupSimulateEnd: drops the recorded calls at the outermost level. */
ncclResult_t ndet_group_after_simulate_end(ncclResult_t result);

/*
 * `count` communicators just became valid (init, split, shrink returned `result`;
 * NULL entries are skipped).  Outside a group, a blocking communicator is set up
 * at once; inside one, at the outermost ncclGroupEnd; a non-blocking one at its
 * first eligible all-reduce.  `identity`: their communicator's in this process
 * (ndet_comm_identity_of_ids and the others; 0 unknown).  Returns the result for the
 * caller.
 */
ncclResult_t ndet_group_comms_created(ncclComm_t *comms, int count, bool blocking,
				      ncclComm_t parent, bool shares_parent, uint64_t identity,
				      ncclResult_t result);

/* ncclAllReduce: true when nccl-det handled the call and *result is the answer. */
bool ndet_group_allreduce(const void *sendbuff, void *recvbuff, size_t count,
			  ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
			  cudaStream_t stream, ncclResult_t *result);

/*
 * Any reduction nccl-det may divert: ncclAllReduce, ncclReduceScatter (count =
 * recvcount) or ncclReduce (root; ignored by the others).  As ndet_group_allreduce.
 * `direct`: the call came through nccl-det's own entry points (ncclDetAllReduce, ...),
 * which run deterministically or fail: a floating-point call that would go to NCCL,
 * on a communicator nccl-det knows or one it does not, fails with ncclInvalidUsage
 * (as under NCCL_DET_STRICT=1, one WARN per communicator and cause).
 */
bool ndet_group_reduction(ndet_coll_t coll, const void *sendbuff, void *recvbuff, size_t count,
			  ncclDataType_t datatype, ncclRedOp_t op, int root, bool direct,
			  ncclComm_t comm, cudaStream_t stream, ncclResult_t *result);

/*
 * May a direct call with these arguments be refused where nccl-det cannot run it: a
 * floating-point reduction whose op and root NCCL could accept (anything else goes to
 * NCCL, which answers with its own code)?
 */
bool ndet_group_direct_refusable(ndet_coll_t coll, ncclDataType_t datatype, ncclRedOp_t op,
				 int root);

/*
 * ncclCommFinalize: inside a group, held until the outermost ncclGroupEnd (returns
 * true, *result = ncclSuccess); outside, our barrier runs now and the caller
 * forwards (returns false).
 */
bool ndet_group_finalize(ncclComm_t comm, ncclResult_t *result);

#ifdef __cplusplus
}
#endif

#endif /* NDET_GROUP_H_ */
