/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Engine setup (see ndet_engine.h): the protocol of ndet_setup.c (four rounds,
 * every one on every rank whatever happened locally), driven here with CUDA as the
 * local operations: the pool is allocated and exported in `prepare`, the ranks of
 * this host are opened and probed in `map_and_probe_write` (ranks on other hosts are
 * neither: doc/protocol.md, "The engine's local view"), and every exchange goes
 * through the caller's exchange callback on device buffers.  All of it runs on a private
 * non-blocking stream in relaxed capture mode, so a setup that happens while the
 * application captures a CUDA graph neither fails nor joins the graph.
 */
#include "config.h"

#include "engine/ndet_engine.h"
#include "engine/ndet_engine_internal.h"

#include <stdlib.h>

#include "engine/ndet_cuda.h"
#include "common/ndet_log.h"
#include "protocol/ndet_pool_layout.h"
#include "protocol/ndet_setup.h"
#include "protocol/ndet_teardown.h"

/* ---------------------------------------------------------------- exchange */

struct ndet_exchange_place ndet_engine_place(const struct ndet_engine_config *config)
{
	return ndet_exchange_place_of(config->comm_identity, config->rank, config->nranks,
				      config->cuda_device);
}

/*
 * results[i] becomes NDET_ERR_REMOTE for every engine that may be a rank of a failed
 * one's communicator (ndet_exchange_leave_together); out of memory (more than
 * NDET_SETUP_STACK engines), for every engine where any failed.
 */
static void ndet_engine_leave_together(struct ndet_engine *const engines[], int count,
				       ndet_status_t results[])
{
	bool any = false;
	for (int i = 0; i < count; i++)
		any = any || results[i] != NDET_OK;
	struct ndet_exchange_place places_here[NDET_SETUP_STACK];
	bool leaves_here[NDET_SETUP_STACK];
	const bool here = count <= NDET_SETUP_STACK;
	struct ndet_exchange_place *places = !any   ? NULL
					     : here ? places_here
						    : calloc((size_t)count, sizeof(*places));
	bool *leaves = !any ? NULL : here ? leaves_here : calloc((size_t)count, sizeof(*leaves));
	for (int i = 0; places != NULL && i < count; i++)
		places[i] = ndet_engine_place(&engines[i]->config);
	for (int i = 0; leaves != NULL && i < count; i++)
		leaves[i] = results[i] != NDET_OK;
	if (leaves != NULL)
		ndet_exchange_leave_together(places, leaves, count);
	for (int i = 0; any && i < count; i++)
		if (results[i] == NDET_OK && (leaves == NULL || leaves[i]))
			results[i] = NDET_ERR_REMOTE;
	if (!here) {
		free(leaves);
		free(places);
	}
}

/*
 * Exchange `bytes` of host data for each engine through its device buffer:
 * all[i][r * bytes ...] = rank r's mine[i].  One call of the exchange callback for
 * every engine, so that a thread driving several ranks can group them.  results[i]:
 * engine i's outcome (ndet_setup_allgather_fn); an engine that cannot exchange
 * (an abandoned buffer, a CUDA error) fails alone, with the engines that may be
 * ranks of its communicator (ndet_exchange_may_share).
 */
static ndet_status_t ndet_engine_exchange(struct ndet_engine *const engines[], int count,
					  const void *const mine[], void *const all[], size_t bytes,
					  ndet_status_t results[])
{
	ndet_status_t status = NDET_OK;
	/*
	 * Up to NDET_SETUP_STACK engines allocate nothing: an engine that began the setup
	 * never misses a round (or the destroy barrier) its peers wait in.
	 */
	void *contexts_here[NDET_SETUP_STACK], *recvs_here[NDET_SETUP_STACK];
	const void *sends_here[NDET_SETUP_STACK];
	cudaStream_t streams_here[NDET_SETUP_STACK];
	ndet_status_t called_here[NDET_SETUP_STACK];
	int index_here[NDET_SETUP_STACK];
	const bool here = count <= NDET_SETUP_STACK;
	const size_t slots = (size_t)(count > 0 ? count : 1);
	void **contexts = here ? contexts_here : calloc(slots, sizeof(*contexts));
	const void **sends = here ? sends_here : calloc(slots, sizeof(*sends));
	void **recvs = here ? recvs_here : calloc(slots, sizeof(*recvs));
	cudaStream_t *streams = here ? streams_here : calloc(slots, sizeof(*streams));
	ndet_status_t *called = here ? called_here : calloc(slots, sizeof(*called));
	int *index = here ? index_here : calloc(slots, sizeof(*index));
	int calling = 0;
	for (int i = 0; i < count; i++)
		results[i] = NDET_OK;
	if (count < 1 || contexts == NULL || sends == NULL || recvs == NULL || streams == NULL ||
	    called == NULL || index == NULL) {
		status = count < 1 ? NDET_ERR_INTERNAL : NDET_ERR_SYSTEM;
		for (int i = 0; i < count; i++)
			results[i] = status;
		goto out;
	}
	for (int i = 0; i < count; i++) {
		struct ndet_engine *engine = engines[i];
		char *send = (char *)engine->exchange_buffer;
		if (engine->exchange != engines[0]->exchange ||
		    bytes * (size_t)(engine->config.nranks + 1) > engine->exchange_bytes) {
			results[i] = NDET_ERR_INTERNAL;
			continue;
		}
		/* NCCL may still write into an abandoned exchange's buffer: never reuse it. */
		if (engine->exchange_abandoned) {
			results[i] = NDET_ERR_REMOTE;
			continue;
		}
		if (!ndet_engine_use_device(engine)) {
			results[i] = NDET_ERR_CUDA;
			continue;
		}
		/* The device buffer serves every round: nothing of the last one may remain. */
		ndet_status_t local = NDET_OK;
		NDET_CUDA_CHECK_GOTO(cudaMemsetAsync(send + bytes, 0,
						     bytes * (size_t)engine->config.nranks,
						     engine->setup_stream),
				     local, failed);
		NDET_CUDA_CHECK_GOTO(cudaMemcpyAsync(send, mine[i], bytes, cudaMemcpyHostToDevice,
						     engine->setup_stream),
				     local, failed);
		/* A callback may use a stream of its own: the send buffer must be ready. */
		NDET_CUDA_CHECK_GOTO(cudaStreamSynchronize(engine->setup_stream), local, failed);
		continue;
	failed:
		results[i] = local;
	}
	/* A member that cannot take part takes the ranks of its communicator with it. */
	ndet_engine_leave_together(engines, count, results);
	for (int i = 0; i < count; i++) {
		if (results[i] != NDET_OK)
			continue;
		char *send = (char *)engines[i]->exchange_buffer;
		contexts[calling] = engines[i]->exchange_context;
		sends[calling] = send;
		recvs[calling] = send + bytes;
		streams[calling] = engines[i]->setup_stream;
		called[calling] = NDET_ERR_INTERNAL; /* a callback that sets none fails all */
		index[calling++] = i;
	}
	if (calling > 0)
		(void)engines[index[0]]->exchange(contexts, calling, sends, recvs, bytes, streams,
						  called);
	for (int k = 0; k < calling; k++) {
		struct ndet_engine *engine = engines[index[k]];
		ndet_status_t result = called[k];
		if (result == NDET_IN_PROGRESS) {
			/* NCCL may still run the all-gather: its buffers outlive the engine. */
			engine->exchange_abandoned = true;
			result = NDET_ERR_REMOTE;
		}
		if (result == NDET_OK && !ndet_engine_use_device(engine))
			result = NDET_ERR_CUDA;
		if (result == NDET_OK) {
			NDET_CUDA_CHECK_GOTO(cudaMemcpyAsync(all[index[k]], recvs[k],
							     bytes * (size_t)engine->config.nranks,
							     cudaMemcpyDeviceToHost,
							     engine->setup_stream),
					     result, copied);
			NDET_CUDA_CHECK_GOTO(cudaStreamSynchronize(engine->setup_stream), result,
					     copied);
		}
	copied:
		results[index[k]] = result;
	}
	for (int i = 0; i < count; i++) {
		if (results[i] == NDET_OK)
			continue;
		if (status == NDET_OK)
			status = results[i];
		NDET_WARN("rank %d: exchange of %zu bytes failed: %s", engines[i]->config.rank,
			  bytes, ndet_status_name(results[i]));
	}
out:
	if (!here) {
		free(index);
		free(called);
		free(streams);
		free(recvs);
		free(sends);
		free(contexts);
	}
	return status;
}

void ndet_engine_caller_save(struct ndet_engine_caller *caller)
{
	caller->device = -1;
	if (cudaGetDevice(&caller->device) != cudaSuccess) {
		(void)cudaGetLastError();
		caller->device = -1;
	}
	caller->mode = cudaStreamCaptureModeRelaxed;
	caller->mode_saved = cudaThreadExchangeStreamCaptureMode(&caller->mode) == cudaSuccess;
	if (!caller->mode_saved)
		(void)cudaGetLastError();
}

void ndet_engine_caller_restore(struct ndet_engine_caller *caller)
{
	int current = -1;
	if (caller->mode_saved && cudaThreadExchangeStreamCaptureMode(&caller->mode) != cudaSuccess)
		(void)cudaGetLastError();
	/* Only when it changed: cudaSetDevice may create a context on that device. */
	if (cudaGetDevice(&current) != cudaSuccess)
		(void)cudaGetLastError();
	if (caller->device >= 0 && current != caller->device)
		NDET_CUDA_CHECK_WARN(cudaSetDevice(caller->device));
}

/* ---------------------------------------------------------------- setup */

/* The local operations of ndet_setup.h, with CUDA. */
static void ndet_engine_setup_prepare(void *member, struct ndet_setup_payload *payload)
{
	struct ndet_engine *engine = member;
	ndet_local_status_t local = NDET_LOCAL_READY;
	/*
	 * The kernels reduce the ranks of one host, and the verdict refuses a table with
	 * more than NDET_MAX_RANKS on one host (the pool's per-rank parts are sized for
	 * min(nranks, NDET_MAX_RANKS): ndet_pool_layout.h).  A communicator larger than
	 * that can only divert as several hosts, which needs every rank to publish the
	 * multi-host capability: without it (this rank alone already decides that the
	 * verdict falls back) no pool is allocated only to be freed at round two.
	 */
	if (engine->config.nranks > NDET_MAX_RANKS &&
	    (engine->config.setup_flags & NDET_SETUP_FLAG_MULTI_HOST) == 0 &&
	    !ndet_setup_multi_host_for_testing())
		local = NDET_LOCAL_TOO_MANY_RANKS;
	else if (!ndet_engine_use_device(engine))
		local = NDET_LOCAL_CUDA_FAILED;
	else if ((engine->reserved_share = ndet_teardown_reserve()) == NULL)
		local = NDET_LOCAL_ALLOC_FAILED; /* out of host memory */
	else
		local = ndet_engine_alloc(engine);
	ndet_engine_fill_payload(engine, local, payload);
}

/*
 * The facts of the agreed table, then the peers.  The kernels' view is the local one
 * (ndet_engine_set_local): the lanes are split for g ranks and the grid capacity is
 * that of g ranks.  The most ranks on one GPU and the fewest SMs are the whole
 * table's (agreed on every host alike; device UUIDs are unique across machines, so
 * the count is the largest host's, and on one machine split into test hosts a GPU
 * really is shared by the ranks of several hosts).
 */
static bool ndet_engine_setup_map(void *member, const struct ndet_setup_payload *table, int nranks)
{
	struct ndet_engine *engine = member;
	engine->ranks_share_process = ndet_setup_table_shares_process(table, nranks);
	engine->config.ranks_per_device = ndet_setup_table_ranks_per_device(table, nranks);
	engine->config.device_sms = ndet_setup_table_min_sms(table, nranks);
	engine->config.processes_per_device = ndet_setup_table_processes_per_device(table, nranks);
	/* Before any peer can hold a pointer into our pool: from here on it is shared. */
	engine->share =
		ndet_teardown_join(table, nranks, engine->config.rank, &engine->reserved_share);
	ndet_teardown_unreserve(engine->reserved_share);
	engine->reserved_share = NULL;
	engine->epoch = ndet_teardown_epoch(table, nranks);
	if (!ndet_engine_set_local(engine, table, nranks))
		return false;
	engine->lane_bytes = ndet_pool_lane_bytes(&engine->local_config);
	if (!ndet_plan_fits_device(engine->local.count, engine->config.device_sms,
				   engine->config.ranks_per_device,
				   engine->config.processes_per_device)) {
		/* Every rank sees the same table: every rank falls back. */
		NDET_WARN("rank %d: %d ranks of %d processes share one GPU of %d SMs, fewer "
			  "than one resident block each (processes: within 3/4 of the SMs): "
			  "the communicator runs in NCCL",
			  engine->config.rank, engine->config.ranks_per_device,
			  engine->config.processes_per_device, engine->config.device_sms);
		return false;
	}
	if (!ndet_engine_use_device(engine) || !ndet_engine_alloc_staging(engine))
		return false;
	return ndet_engine_map_peers(engine, table) && ndet_engine_probe_write(engine);
}

static bool ndet_engine_setup_verify(void *member)
{
	struct ndet_engine *engine = member;
	return ndet_engine_use_device(engine) && ndet_engine_probe_verify(engine);
}

/* The peers' pools this rank opened (ndet_setup_member_ops.opened): by local index. */
static uint32_t ndet_engine_setup_opened(void *member)
{
	const struct ndet_engine *engine = member;
	uint32_t opened = 0;
	for (int l = 0; l < engine->local.count; l++)
		if (engine->peer_ipc_base[l] != NULL)
			opened |= 1u << l;
	return opened;
}

/*
 * The ranks of this host that may hold a mapping of our pool: by round 3's words
 * where known (a peer that opened nothing, say where CUDA refused IPC on every rank,
 * is not waited for), else all.
 */
static uint32_t ndet_engine_setup_readers(const struct ndet_engine *engine,
					  bool peers_may_have_mapped, const uint32_t *opened)
{
	if (!peers_may_have_mapped)
		return 0;
	if (opened == NULL || engine->local.count == 0)
		return NDET_TEARDOWN_ALL_READERS;
	uint32_t readers = 0;
	for (int l = 0; l < engine->local.count; l++) {
		const int q = engine->local.ranks[l];
		if (l != engine->local.index && ((opened[q] >> engine->local.index) & 1u) != 0)
			readers |= 1u << l;
	}
	return readers;
}

/*
 * Peers may have mapped our pool before the refusal became known; they close their
 * mappings before returning, but not necessarily before we get here, so the pool is
 * freed at once only when no peer ever saw it (else with its share, once the peers
 * that opened it let go, or never).  No kernel ever ran: our own mappings of peers'
 * pools can go now.
 */
static void ndet_engine_setup_release(void *member, bool peers_may_have_mapped,
				      const uint32_t *opened)
{
	struct ndet_engine *engine = member;
	bool usable = ndet_engine_use_device(engine);
	if (usable) {
		ndet_engine_detach_peers(engine);
		ndet_engine_close_peers(engine);
	}
	ndet_teardown_release(engine->share, engine, &ndet_engine_teardown_ops, engine->config.rank,
			      usable, usable && !peers_may_have_mapped,
			      ndet_engine_setup_readers(engine, peers_may_have_mapped, opened));
}

const struct ndet_setup_member_ops ndet_engine_setup_ops = {
	.prepare = ndet_engine_setup_prepare,
	.map_and_probe_write = ndet_engine_setup_map,
	.opened = ndet_engine_setup_opened,
	.probe_verify = ndet_engine_setup_verify,
	.release = ndet_engine_setup_release,
};

/* ndet_setup_allgather_fn over the engines' device buffers. */
ndet_status_t ndet_engine_setup_allgather(void *context, int count, void *const members[],
					  const void *const sends[], void *const recvs[],
					  size_t bytes, ndet_status_t results[])
{
	(void)context;
	return ndet_engine_exchange((struct ndet_engine *const *)members, count, sends, recvs,
				    bytes, results);
}
