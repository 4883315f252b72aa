/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Setup record: wire format checks and the table verdict.  Pure functions of their
 * arguments (no logging, no CUDA, no clock), so every rank that holds the same bytes
 * reaches the same verdict: a split verdict would leave some ranks diverting and the
 * others calling NCCL, which hangs.
 */
#include "config.h"

#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "protocol/ndet_setup_record.h"
#include "protocol/ndet_host_table.h"
#include "protocol/ndet_hosts_plan.h"
#include "protocol/ndet_setup.h"
#include "kernels/ndet_types.h"

#define NDET_STRINGIFY_VALUE(x) #x
#define NDET_STRINGIFY(x)       NDET_STRINGIFY_VALUE(x)

/*
 * The wire format.  Peers of one release exchange these bytes; a field moved by an
 * innocent edit would make ranks misread each other, so the layout is pinned here and
 * any change needs a new NDET_SETUP_FORMAT_VERSION.
 */
static_assert(sizeof(struct ndet_setup_header) == 16, "round one header is 16 bytes forever");
static_assert(offsetof(struct ndet_setup_header, magic) == 0, "header layout");
static_assert(offsetof(struct ndet_setup_header, format_version) == 4, "header layout");
static_assert(offsetof(struct ndet_setup_header, payload_length) == 8, "header layout");
static_assert(offsetof(struct ndet_setup_header, checksum) == 12, "header layout");

static_assert(sizeof(struct ndet_setup_payload) == 280, "payload v3 size");
static_assert(offsetof(struct ndet_setup_payload, hostname) == 0, "payload v1 layout");
static_assert(offsetof(struct ndet_setup_payload, boot_id) == 64, "payload v1 layout");
static_assert(offsetof(struct ndet_setup_payload, pid) == 104, "payload v1 layout");
static_assert(offsetof(struct ndet_setup_payload, pid_namespace) == 112, "payload v1 layout");
static_assert(offsetof(struct ndet_setup_payload, ipc_namespace) == 120, "payload v1 layout");
static_assert(offsetof(struct ndet_setup_payload, device_uuid) == 128, "payload v1 layout");
static_assert(offsetof(struct ndet_setup_payload, cuda_device) == 144, "payload v1 layout");
static_assert(offsetof(struct ndet_setup_payload, rank) == 148, "payload v1 layout");
static_assert(offsetof(struct ndet_setup_payload, nranks) == 152, "payload v1 layout");
static_assert(offsetof(struct ndet_setup_payload, local_status) == 156, "payload v1 layout");
static_assert(offsetof(struct ndet_setup_payload, library_version) == 160, "payload v1 layout");
static_assert(offsetof(struct ndet_setup_payload, flags) == 164, "payload v1 layout");
static_assert(offsetof(struct ndet_setup_payload, settings_hash) == 168, "payload v1 layout");
static_assert(offsetof(struct ndet_setup_payload, pool_bytes) == 176, "payload v1 layout");
static_assert(offsetof(struct ndet_setup_payload, pool_address) == 184, "payload v1 layout");
static_assert(offsetof(struct ndet_setup_payload, flags_offset) == 192, "payload v1 layout");
static_assert(offsetof(struct ndet_setup_payload, data_offset) == 200, "payload v1 layout");
static_assert(offsetof(struct ndet_setup_payload, ipc_handle) == 208, "payload v1 layout");
static_assert(offsetof(struct ndet_setup_payload, sm_count) == 272, "payload v2 layout");
static_assert(offsetof(struct ndet_setup_payload, blocking) == 276, "payload v3 layout");

uint32_t ndet_setup_header_checksum(const struct ndet_setup_header *header)
{
	const uint32_t fields[3] = {header->magic, header->format_version, header->payload_length};
	const unsigned char *bytes = (const unsigned char *)fields;
	uint32_t hash = 0x811c9dc5u; /* FNV-1a 32-bit offset basis */

	for (size_t i = 0; i < sizeof(fields); i++) {
		hash ^= bytes[i];
		hash *= 0x01000193u; /* FNV-1a 32-bit prime */
	}
	return hash;
}

void ndet_setup_header_init(struct ndet_setup_header *header, uint32_t payload_length)
{
	memset(header, 0, sizeof(*header));
	header->magic = NDET_SETUP_MAGIC;
	header->format_version = NDET_SETUP_FORMAT_VERSION;
	header->payload_length = payload_length;
	header->checksum = ndet_setup_header_checksum(header);
}

bool ndet_setup_header_is_record(const struct ndet_setup_header *header)
{
	return header != NULL && header->magic == NDET_SETUP_MAGIC &&
	       header->checksum == ndet_setup_header_checksum(header);
}

ndet_status_t ndet_setup_header_check(const struct ndet_setup_header *header)
{
	if (header == NULL)
		return NDET_ERR_INVALID_ARGUMENT;
	if (!ndet_setup_header_is_record(header))
		return NDET_ERR_UNSUPPORTED;
	/* A different version is a peer running another release: it cannot agree. */
	if (header->format_version != NDET_SETUP_FORMAT_VERSION)
		return NDET_ERR_UNSUPPORTED;
	if (header->payload_length != sizeof(struct ndet_setup_payload))
		return NDET_ERR_UNSUPPORTED;
	return NDET_OK;
}

static bool ndet_string_terminated(const char *field, size_t size)
{
	return memchr(field, '\0', size) != NULL;
}

/*
 * The field ranges every version-3 record satisfies.  The pool (offsets, address),
 * the device ordinal and the SM count are checked only for ready ranks: a rank whose
 * allocation failed has no pool to describe, and its record must still parse so the
 * verdict can name its local failure.  blocking is a flag, 0 or 1: any other value
 * is a record of another format.
 */
static bool ndet_setup_payload_well_formed(const struct ndet_setup_payload *payload)
{
	if (!ndet_string_terminated(payload->hostname, sizeof(payload->hostname)) ||
	    !ndet_string_terminated(payload->boot_id, sizeof(payload->boot_id)))
		return false;
	if (payload->nranks < 1 || payload->nranks > NDET_SETUP_NRANKS_LIMIT)
		return false;
	if (payload->rank < 0 || payload->rank >= payload->nranks)
		return false;
	if (payload->local_status >= NDET_LOCAL_REASON_COUNT)
		return false;
	if (payload->blocking > 1)
		return false;
	if (payload->local_status == NDET_LOCAL_READY &&
	    (payload->flags_offset >= payload->pool_bytes ||
	     payload->data_offset >= payload->pool_bytes || payload->pool_address == 0 ||
	     payload->cuda_device < 0 || payload->sm_count == 0))
		return false;
	return true;
}

ndet_status_t ndet_setup_payload_parse(const void *bytes, size_t length,
				       struct ndet_setup_payload *payload)
{
	struct ndet_setup_payload candidate;

	if (bytes == NULL || payload == NULL)
		return NDET_ERR_INVALID_ARGUMENT;
	if (length != sizeof(candidate))
		return NDET_ERR_UNSUPPORTED;
	/* Received bytes carry no alignment guarantee: copy before reading fields. */
	memcpy(&candidate, bytes, sizeof(candidate));
	if (!ndet_setup_payload_well_formed(&candidate))
		return NDET_ERR_UNSUPPORTED;
	*payload = candidate;
	return NDET_OK;
}

static void ndet_verdict_set(struct ndet_setup_verdict *verdict, ndet_verdict_reason_t reason,
			     int offending_rank, uint32_t detail)
{
	verdict->reason = reason;
	verdict->offending_rank = offending_rank;
	verdict->detail = detail;
}

bool ndet_setup_same_host(const struct ndet_setup_payload *a, const struct ndet_setup_payload *b)
{
	return strncmp(a->hostname, b->hostname, sizeof(a->hostname)) == 0 &&
	       strncmp(a->boot_id, b->boot_id, sizeof(a->boot_id)) == 0;
}

static bool ndet_same_pool_geometry(const struct ndet_setup_payload *a,
				    const struct ndet_setup_payload *b)
{
	return a->pool_bytes == b->pool_bytes && a->flags_offset == b->flags_offset &&
	       a->data_offset == b->data_offset;
}

/* Checks 1 and 2: every record well-formed, and where the exchange put it. */
static bool ndet_refuse_records(const struct ndet_setup_payload *table, int nranks,
				struct ndet_setup_verdict *verdict)
{
	for (int r = 0; r < nranks; r++)
		if (!ndet_setup_payload_well_formed(&table[r])) {
			ndet_verdict_set(verdict, NDET_VERDICT_BAD_RECORD, r, 0);
			return true;
		}
	for (int r = 0; r < nranks; r++)
		if (table[r].rank != r || table[r].nranks != nranks) {
			ndet_verdict_set(verdict, NDET_VERDICT_RANK_MISMATCH, r, 0);
			return true;
		}
	return false;
}

/* Check 5: the lowest rank whose local index is NDET_MAX_RANKS, on any host. */
static bool ndet_refuse_host_sizes(const struct ndet_host_table *hosts,
				   struct ndet_setup_verdict *verdict)
{
	int over = -1, size = 0;
	for (int h = 0; h < hosts->nhosts; h++) {
		if (hosts->size[h] <= NDET_MAX_RANKS)
			continue;
		const int r = hosts->ranks[hosts->start[h] + NDET_MAX_RANKS];
		if (over < 0 || r < over) {
			over = r;
			size = hosts->size[h];
		}
	}
	if (over < 0)
		return false;
	ndet_verdict_set(verdict, NDET_VERDICT_TOO_MANY_RANKS, over, (uint32_t)size);
	return true;
}

/* Checks 3 to 6: what the hosts of the table allow. */
static bool ndet_refuse_hosts(const struct ndet_setup_payload *table,
			      const struct ndet_host_table *hosts, bool multi_host_diverts,
			      struct ndet_setup_verdict *verdict)
{
	const uint32_t nhosts = (uint32_t)hosts->nhosts;
	if (nhosts > 1) {
		for (int r = 0; r < hosts->nranks; r++)
			if (table[r].blocking == 0) {
				ndet_verdict_set(verdict, NDET_VERDICT_MULTI_HOST_NONBLOCKING, r,
						 nhosts);
				return true;
			}
		for (int h = 1; h < hosts->nhosts; h++)
			if (hosts->size[h] != hosts->size[0]) {
				ndet_verdict_set(verdict, NDET_VERDICT_MULTI_HOST_UNEQUAL,
						 ndet_host_table_first(hosts, h),
						 (uint32_t)hosts->size[h]);
				return true;
			}
	}
	if (ndet_refuse_host_sizes(hosts, verdict))
		return true;
	/* The schedule takes up to NDET_HOSTS_MAX_HOSTS hosts (ndet_hosts_plan.h). */
	if (nhosts > 1 && (!multi_host_diverts || nhosts > NDET_HOSTS_MAX_HOSTS)) {
		ndet_verdict_set(verdict, NDET_VERDICT_MULTI_HOST, ndet_host_table_first(hosts, 1),
				 nhosts);
		return true;
	}
	return false;
}

/* Checks 7 to 9: every rank ready, and the same release and settings everywhere. */
static bool ndet_refuse_agreement(const struct ndet_setup_payload *table, int nranks,
				  struct ndet_setup_verdict *verdict)
{
	for (int r = 0; r < nranks; r++)
		if (table[r].local_status != NDET_LOCAL_READY) {
			ndet_verdict_set(verdict, NDET_VERDICT_LOCAL_FAILURE, r,
					 table[r].local_status);
			return true;
		}
	for (int r = 1; r < nranks; r++)
		if (table[r].library_version != table[0].library_version) {
			ndet_verdict_set(verdict, NDET_VERDICT_VERSION_MISMATCH, r,
					 table[r].library_version);
			return true;
		}
	for (int r = 1; r < nranks; r++)
		if (table[r].settings_hash != table[0].settings_hash) {
			ndet_verdict_set(verdict, NDET_VERDICT_SETTINGS_MISMATCH, r, 0);
			return true;
		}
	return false;
}

/*
 * The first known (non-zero) namespace id of one kind among `count` ranks, or 0 when
 * none knows it.  Ranks are compared against it rather than against the first rank,
 * whose id may be unknown.
 */
static uint64_t ndet_first_known_namespace(const struct ndet_setup_payload *table, const int *ranks,
					   int count, size_t field_offset)
{
	for (int i = 0; i < count; i++) {
		uint64_t id;

		memcpy(&id, (const char *)&table[ranks[i]] + field_offset, sizeof(id));
		if (id != 0)
			return id;
	}
	return 0;
}

static bool ndet_namespace_differs(uint64_t id, uint64_t reference)
{
	/* Unknown ids are not comparable: refusing on them would refuse on no evidence. */
	return id != 0 && reference != 0 && id != reference;
}

/*
 * The lowest rank of one host whose namespaces differ from the host's first known
 * ones, or -1; *differs gets the NDET_VERDICT_DETAIL_* bits.
 */
static int ndet_host_namespace_outlier(const struct ndet_setup_payload *table, const int *ranks,
				       int count, uint32_t *differs)
{
	const uint64_t pid_reference = ndet_first_known_namespace(
		table, ranks, count, offsetof(struct ndet_setup_payload, pid_namespace));
	const uint64_t ipc_reference = ndet_first_known_namespace(
		table, ranks, count, offsetof(struct ndet_setup_payload, ipc_namespace));

	for (int i = 0; i < count; i++) {
		const struct ndet_setup_payload *record = &table[ranks[i]];

		*differs = 0;
		if (ndet_namespace_differs(record->pid_namespace, pid_reference))
			*differs |= NDET_VERDICT_DETAIL_PID_NAMESPACE;
		if (ndet_namespace_differs(record->ipc_namespace, ipc_reference))
			*differs |= NDET_VERDICT_DETAIL_IPC_NAMESPACE;
		if (*differs != 0)
			return ranks[i];
	}
	return -1;
}

/* Check 10: one PID and one IPC namespace on each host. */
static bool ndet_refuse_namespaces(const struct ndet_setup_payload *table,
				   const struct ndet_host_table *hosts,
				   struct ndet_setup_verdict *verdict)
{
	int lowest = -1;
	uint32_t detail = 0;
	for (int h = 0; h < hosts->nhosts; h++) {
		uint32_t differs = 0;
		const int r = ndet_host_namespace_outlier(table, &hosts->ranks[hosts->start[h]],
							  hosts->size[h], &differs);
		if (r >= 0 && (lowest < 0 || r < lowest)) {
			lowest = r;
			detail = differs;
		}
	}
	if (lowest < 0)
		return false;
	ndet_verdict_set(verdict, NDET_VERDICT_NAMESPACE, lowest, detail);
	return true;
}

void ndet_setup_evaluate_rules(const struct ndet_setup_payload *table, int nranks,
			       struct ndet_host_table *hosts, bool multi_host_diverts,
			       struct ndet_setup_verdict *verdict)
{
	if (verdict == NULL)
		return;
	if (table == NULL || nranks < 1 || hosts == NULL || hosts->capacity < nranks) {
		ndet_verdict_set(verdict, NDET_VERDICT_BAD_RECORD, -1, 0);
		return;
	}
	if (ndet_refuse_records(table, nranks, verdict))
		return;
	/* Cannot fail now: the storage holds nranks, and the arguments are checked. */
	(void)ndet_host_table_build(hosts, table, nranks, -1);
	if (ndet_refuse_hosts(table, hosts, multi_host_diverts, verdict) ||
	    ndet_refuse_agreement(table, nranks, verdict) ||
	    ndet_refuse_namespaces(table, hosts, verdict))
		return;
	for (int r = 1; r < nranks; r++)
		if (!ndet_same_pool_geometry(&table[r], &table[0])) {
			ndet_verdict_set(verdict, NDET_VERDICT_POOL_MISMATCH, r, 0);
			return;
		}
	ndet_verdict_set(verdict, NDET_VERDICT_OK, -1, 0);
}

bool ndet_setup_table_multi_host(const struct ndet_setup_payload *table, int nranks)
{
	if (table == NULL || nranks < 1)
		return false;
	for (int r = 0; r < nranks; r++)
		if ((table[r].flags & NDET_SETUP_FLAG_MULTI_HOST) == 0)
			return false;
	return true;
}

void ndet_setup_evaluate(const struct ndet_setup_payload *table, int nranks,
			 struct ndet_host_table *hosts, struct ndet_setup_verdict *verdict)
{
	ndet_setup_evaluate_rules(table, nranks, hosts, ndet_setup_table_multi_host(table, nranks),
				  verdict);
}

/*
 * Another host first: a pid or a namespace inode means nothing there.  Same process
 * needs proof: equal pids in one known PID namespace of one host.  When a namespace
 * is unknown, IPC is the safe guess: a wrong IPC guess makes cudaIpcOpenMemHandle fail
 * and setup fall back, while a wrong direct pointer would be dereferenced.
 */
ndet_peer_kind_t ndet_setup_peer_kind(const struct ndet_setup_payload *table, int my_rank, int peer)
{
	if (table == NULL || my_rank < 0 || peer < 0)
		return NDET_PEER_IPC;
	if (my_rank == peer)
		return NDET_PEER_SELF;

	const struct ndet_setup_payload *mine = &table[my_rank];
	const struct ndet_setup_payload *theirs = &table[peer];

	if (!ndet_setup_same_host(mine, theirs))
		return NDET_PEER_REMOTE;
	if (mine->pid == theirs->pid && mine->pid_namespace != 0 &&
	    mine->pid_namespace == theirs->pid_namespace)
		return NDET_PEER_SAME_PROCESS;
	return NDET_PEER_IPC;
}

bool ndet_setup_table_shares_process(const struct ndet_setup_payload *table, int nranks)
{
	for (int r = 0; r < nranks; r++)
		for (int q = r + 1; q < nranks; q++)
			if (ndet_setup_peer_kind(table, r, q) == NDET_PEER_SAME_PROCESS)
				return true;
	return false;
}

static bool ndet_setup_same_device(const struct ndet_setup_payload *table, int a, int b)
{
	return memcmp(table[a].device_uuid, table[b].device_uuid, sizeof(table[a].device_uuid)) ==
	       0;
}

int ndet_setup_table_ranks_per_device(const struct ndet_setup_payload *table, int nranks)
{
	int most = nranks > 0 ? 1 : 0;
	for (int r = 0; r < nranks; r++) {
		int same = 0;
		for (int q = 0; q < nranks; q++)
			same += ndet_setup_same_device(table, r, q);
		if (same > most)
			most = same;
	}
	return most;
}

int ndet_setup_table_processes_per_device(const struct ndet_setup_payload *table, int nranks)
{
	int most = nranks > 0 ? 1 : 0;
	for (int r = 0; r < nranks; r++) {
		/* Each GPU once, from its lowest rank: O(n^2 + n x ranks per GPU) in all. */
		bool lowest = true;
		for (int p = 0; p < r && lowest; p++)
			lowest = !ndet_setup_same_device(table, p, r);
		if (!lowest)
			continue;
		int processes = 0;
		for (int q = r; q < nranks; q++) {
			if (!ndet_setup_same_device(table, r, q))
				continue;
			/* q counts unless a lower rank on this GPU is of its process. */
			bool first = true;
			for (int p = r; p < q && first; p++)
				first = !ndet_setup_same_device(table, p, q) ||
					ndet_setup_peer_kind(table, q, p) != NDET_PEER_SAME_PROCESS;
			processes += first;
		}
		if (processes > most)
			most = processes;
	}
	return most;
}

int ndet_setup_table_min_sms(const struct ndet_setup_payload *table, int nranks)
{
	int fewest = 0;
	for (int r = 0; r < nranks; r++) {
		const int sms = table[r].sm_count > (uint32_t)INT32_MAX ? INT32_MAX
									: (int)table[r].sm_count;
		if (r == 0 || sms < fewest)
			fewest = sms;
	}
	return fewest;
}

const char *ndet_verdict_reason_name(ndet_verdict_reason_t reason)
{
	static const char *const names[NDET_VERDICT_COUNT] = {
		[NDET_VERDICT_OK] = "ok",
		[NDET_VERDICT_BAD_RECORD] = "bad setup record",
		[NDET_VERDICT_RANK_MISMATCH] = "rank mismatch",
		[NDET_VERDICT_MULTI_HOST] = "multi-host",
		[NDET_VERDICT_MULTI_HOST_NONBLOCKING] = "multi-host, non-blocking communicator",
		[NDET_VERDICT_MULTI_HOST_UNEQUAL] = "multi-host, unequal ranks per host",
		[NDET_VERDICT_VERSION_MISMATCH] = "library version mismatch",
		[NDET_VERDICT_SETTINGS_MISMATCH] = "settings mismatch",
		[NDET_VERDICT_POOL_MISMATCH] = "pool geometry mismatch",
		[NDET_VERDICT_NAMESPACE] = "namespace mismatch",
		[NDET_VERDICT_LOCAL_FAILURE] = "local failure",
		[NDET_VERDICT_TOO_MANY_RANKS] = "too many ranks",
		[NDET_VERDICT_NOT_IN_SETUP] = "a rank did not take part in nccl-det's setup",
	};
	if ((unsigned)reason >= NDET_VERDICT_COUNT)
		return "unknown verdict";
	return names[reason];
}

const char *ndet_verdict_reason_fix(ndet_verdict_reason_t reason)
{
	static const char *const fixes[NDET_VERDICT_COUNT] = {
		[NDET_VERDICT_OK] = "all ranks agree; nccl-det diverts this communicator's "
				    "eligible all-reduces: nothing to fix",
		[NDET_VERDICT_BAD_RECORD] =
			"a rank sent a setup record this release cannot read (another nccl-det "
			"format version, or corrupt bytes); load the same nccl-det build on "
			"every rank (nccl-det-run does this)",
		[NDET_VERDICT_RANK_MISMATCH] =
			"a rank's record names a different rank or communicator size than its "
			"position in the exchange; this is a bug in nccl-det or NCCL: please "
			"report it with NCCL_DET_DEBUG=INFO logs",
		[NDET_VERDICT_MULTI_HOST] =
			"ranks are on more than one host, and nccl-det's engine on some rank has "
			"no data path between hosts (a build or an engine without it), or there "
			"are more than " NDET_STRINGIFY(
				NDET_HOSTS_MAX_HOSTS) " hosts: load the "
						      "same nccl-det build on every rank, or keep "
						      "NCCL",
		[NDET_VERDICT_MULTI_HOST_NONBLOCKING] =
			"ranks are on more than one host and the communicator is non-blocking "
			"(config.blocking = 0, or NCCL_COMM_BLOCKING=0): between hosts nccl-det "
			"moves data with NCCL's own calls, which may then return ncclInProgress "
			"before their work is on the stream; create the communicator blocking "
			"(config.blocking = 1, NCCL_COMM_BLOCKING unset) on every rank, or keep "
			"NCCL",
		[NDET_VERDICT_MULTI_HOST_UNEQUAL] =
			"ranks are on more than one host, with more ranks on some hosts than on "
			"others, and nccl-det reduces between hosts only where every host has as "
			"many; start the same number of ranks on every host (e.g. "
			"--ntasks-per-node), or keep NCCL",
		[NDET_VERDICT_VERSION_MISMATCH] =
			"ranks loaded different nccl-det versions; install one version and load "
			"it on every rank (nccl-det-run checks this)",
		[NDET_VERDICT_SETTINGS_MISMATCH] =
			"NCCL_DET_* settings differ between ranks; set the same values on every "
			"rank (nccl-det-run checks this)",
		[NDET_VERDICT_POOL_MISMATCH] =
			"ranks laid out their pools differently (NCCL_DET_POOL_SIZE or a "
			"different build); set the same NCCL_DET_* values and load the same "
			"nccl-det build on every rank",
		[NDET_VERDICT_NAMESPACE] =
			"ranks run in different PID or IPC namespaces (containers), where CUDA "
			"IPC is refused; run all ranks in one container, or share the host's "
			"namespaces (docker --ipc=host --pid=host)",
		[NDET_VERDICT_LOCAL_FAILURE] =
			"a rank could not prepare nccl-det (see that rank's WARN for the local "
			"cause); fix that cause, e.g. raise NCCL_DET_MAX_MEMORY, or keep NCCL",
		[NDET_VERDICT_TOO_MANY_RANKS] =
			"the communicator has more ranks on one host than nccl-det's kernels "
			"handle (" NDET_STRINGIFY(NDET_MAX_RANKS) "); nothing to fix, NCCL runs "
								  "these calls",
		[NDET_VERDICT_NOT_IN_SETUP] =
			"that rank runs without nccl-det (NCCL_DET_ENABLE=0 there, or the library "
			"not loaded), so NCCL paired one of its collectives with nccl-det's setup "
			"exchange and this communicator's collectives no longer match across "
			"ranks; load nccl-det with the same NCCL_DET_ENABLE on every rank "
			"(nccl-det-run does) and restart the job",
	};
	if ((unsigned)reason >= NDET_VERDICT_COUNT)
		return "unknown verdict; this is a bug in nccl-det: please report it";
	return fixes[reason];
}

const char *ndet_local_status_name(ndet_local_status_t status)
{
	static const char *const names[NDET_LOCAL_REASON_COUNT] = {
		[NDET_LOCAL_READY] = "ready",
		[NDET_LOCAL_DISABLED] = "disabled (NCCL_DET_ENABLE=0)",
		[NDET_LOCAL_ALLOC_FAILED] = "pool allocation failed or over NCCL_DET_MAX_MEMORY",
		[NDET_LOCAL_EXPORT_FAILED] = "cudaIpcGetMemHandle failed",
		[NDET_LOCAL_UNSUPPORTED_GPU] = "driver or GPU cannot run the kernels",
		[NDET_LOCAL_TOO_MANY_RANKS] = "more ranks than nccl-det's kernels handle",
		[NDET_LOCAL_CUDA_FAILED] = "a CUDA call of the setup failed",
		[NDET_LOCAL_MAP_FAILED] = "opening or mapping a peer's pool failed",
		[NDET_LOCAL_PROBE_FAILED] = "a peer's probe write did not arrive",
	};
	if ((unsigned)status >= NDET_LOCAL_REASON_COUNT)
		return "unknown local status";
	return names[status];
}
