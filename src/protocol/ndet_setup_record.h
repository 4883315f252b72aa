/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * The setup record every rank publishes once per communicator (doc/design.md, "Setup"),
 * and the one function all ranks use to judge the gathered table, so that every rank
 * reaches the same verdict from the same bytes.
 *
 * Wire format: round one exchanges a fixed 16-byte header whose layout never changes
 * across releases (magic, format version, payload length, header checksum); round two
 * exchanges payloads of the agreed length.  Integers are in the byte order of the host
 * that wrote them: every CUDA host (x86-64, aarch64, ppc64le) is little-endian, so
 * ranks on several hosts read each other's records alike.
 */
#ifndef NDET_SETUP_RECORD_H_
#define NDET_SETUP_RECORD_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ndet_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NDET_SETUP_MAGIC 0x5445444eu /* "NDET" in memory order */
/* 2: sm_count; 3: blocking; 4: round 3's word says which pools a rank opened */
#define NDET_SETUP_FORMAT_VERSION 4u

/* Round one.  16 bytes, forever. */
struct ndet_setup_header {
	uint32_t magic;
	uint32_t format_version;
	uint32_t payload_length;
	uint32_t checksum; /* of the three fields above: see ndet_setup_header_checksum */
};

/* Largest communicator a record may describe; anything above is a corrupt record. */
#define NDET_SETUP_NRANKS_LIMIT 4096

#define NDET_SETUP_HOSTNAME_LENGTH   64
#define NDET_SETUP_BOOT_ID_LENGTH    40
#define NDET_SETUP_IPC_HANDLE_LENGTH 64

/* Local readiness a rank reports in its payload (0 = ready). */
typedef enum {
	NDET_LOCAL_READY = 0,
	NDET_LOCAL_DISABLED,        /* NCCL_DET_ENABLE=0 on that rank */
	NDET_LOCAL_ALLOC_FAILED,    /* pool allocation failed or over NCCL_DET_MAX_MEMORY */
	NDET_LOCAL_EXPORT_FAILED,   /* cudaIpcGetMemHandle failed */
	NDET_LOCAL_UNSUPPORTED_GPU, /* driver or GPU cannot run the kernels */
	NDET_LOCAL_TOO_MANY_RANKS,  /* nranks > NDET_MAX_RANKS: the host-only test engine's
				     * limit (the CUDA engine takes any nranks: the verdict
				     * limits the ranks of each host) */
	NDET_LOCAL_CUDA_FAILED,     /* another CUDA call of the setup failed */
	NDET_LOCAL_MAP_FAILED,      /* opening or mapping a peer's pool failed (round 3) */
	NDET_LOCAL_PROBE_FAILED,    /* the write-and-verify probe of a peer failed (round 4) */
	NDET_LOCAL_REASON_COUNT
} ndet_local_status_t;

/* Round two payload, format version 3 (doc/protocol.md, "Setup record"). */
struct ndet_setup_payload {
	char hostname[NDET_SETUP_HOSTNAME_LENGTH]; /* NUL-terminated */
	char boot_id[NDET_SETUP_BOOT_ID_LENGTH]; /* /proc/sys/kernel/random/boot_id, NUL-terminated
						  */
	uint64_t pid;
	uint64_t pid_namespace; /* inode of /proc/self/ns/pid, 0 if unknown */
	uint64_t ipc_namespace; /* inode of /proc/self/ns/ipc, 0 if unknown */
	uint8_t device_uuid[16];
	int32_t cuda_device; /* ordinal in the publishing process */
	int32_t rank;
	int32_t nranks;
	uint32_t local_status;    /* ndet_local_status_t */
	uint32_t library_version; /* NCCL_DET_VERSION_CODE */
	uint32_t flags;           /* NDET_SETUP_FLAG_* (ndet_setup.h); was reserved, always 0 */
	uint64_t settings_hash;   /* hash of the settings that must agree */
	uint64_t pool_bytes;      /* size of the exported allocation */
	uint64_t pool_address;    /* device address in the publisher (same-process peers) */
	uint64_t flags_offset;    /* offsets inside the allocation */
	uint64_t data_offset;
	uint8_t ipc_handle[NDET_SETUP_IPC_HANDLE_LENGTH]; /* cudaIpcMemHandle_t of the pool base */
	/* Format 2: */
	uint32_t sm_count; /* SMs of the rank's device (its MIG slice); >= 1 when ready */
	/* Format 3 (the word was reserved, always 0, in format 2): */
	uint32_t blocking; /* 1: a blocking communicator (NCCL's config.blocking), 0: not */
};

/* How a rank reaches one peer's pool. */
typedef enum {
	NDET_PEER_SELF = 0,
	NDET_PEER_SAME_PROCESS, /* direct pointer (+ peer access when on another device) */
	NDET_PEER_IPC,          /* cudaIpcOpenMemHandle */
	NDET_PEER_REMOTE,       /* another host: no mapping, no probe, no pid to judge */
} ndet_peer_kind_t;

/* Why a table was refused.  Same on every rank for the same table. */
typedef enum {
	NDET_VERDICT_OK = 0,
	NDET_VERDICT_BAD_RECORD,    /* bad magic/version/length/checksum, or unterminated strings */
	NDET_VERDICT_RANK_MISMATCH, /* rank/nranks fields do not match table position */
	NDET_VERDICT_MULTI_HOST,    /* hostname or boot id differ, and a rank's engine has no
				     * data path between hosts */
	NDET_VERDICT_MULTI_HOST_NONBLOCKING, /* more than one host, a non-blocking communicator */
	NDET_VERDICT_MULTI_HOST_UNEQUAL,     /* more than one host, unequal ranks per host */
	NDET_VERDICT_VERSION_MISMATCH,       /* library versions differ */
	NDET_VERDICT_SETTINGS_MISMATCH,      /* settings hash differs */
	NDET_VERDICT_POOL_MISMATCH,          /* pool geometry differs */
	NDET_VERDICT_NAMESPACE,              /* different PID or IPC namespaces: CUDA IPC refused */
	NDET_VERDICT_LOCAL_FAILURE,          /* some rank reported local_status != READY */
	NDET_VERDICT_TOO_MANY_RANKS,         /* more than NDET_MAX_RANKS ranks on one host */
	/*
	 * A rank's round-one slot holds no setup record at all (no magic, or a bad
	 * checksum): that rank did not run the setup (NCCL_DET_ENABLE=0 there, or
	 * nccl-det not loaded), so NCCL paired its own collective with our exchange
	 * and the communicator's collective order is broken.  Not a fallback: the
	 * communicator fails (ndet_comm.h).
	 */
	NDET_VERDICT_NOT_IN_SETUP,
	NDET_VERDICT_COUNT
} ndet_verdict_reason_t;

/*
 * detail: LOCAL_FAILURE: the offending rank's ndet_local_status_t; VERSION_MISMATCH: its
 * library_version; NAMESPACE: NDET_VERDICT_DETAIL_* bits of the namespaces that differ;
 * TOO_MANY_RANKS: the ranks of the offending rank's host (offending_rank is the lowest
 * rank with local index NDET_MAX_RANKS, the first over the limit: NDET_MAX_RANKS on
 * one host); MULTI_HOST and MULTI_HOST_NONBLOCKING: the number of hosts;
 * MULTI_HOST_UNEQUAL: the ranks of the offending rank's host; otherwise 0.
 * offending_rank is -1 when OK, and for BAD_RECORD when the table itself is missing
 * (NULL or nranks < 1, or no host table storage for it).
 */
#define NDET_VERDICT_DETAIL_PID_NAMESPACE 0x1u
#define NDET_VERDICT_DETAIL_IPC_NAMESPACE 0x2u

struct ndet_setup_verdict {
	ndet_verdict_reason_t reason;
	int offending_rank; /* lowest rank that caused the refusal; -1 when OK */
	uint32_t detail;    /* see above */
};

/* Checksum of a header's first three fields (FNV-1a over their bytes). */
uint32_t ndet_setup_header_checksum(const struct ndet_setup_header *header);

/* Fill a header for a payload of `payload_length` bytes. */
void ndet_setup_header_init(struct ndet_setup_header *header, uint32_t payload_length);

/*
 * Is this a setup record of any nccl-det release (magic and checksum right)?  A
 * header of another format version is one; bytes a rank never sent are not.
 */
bool ndet_setup_header_is_record(const struct ndet_setup_header *header);

/*
 * Judge one received header.  NDET_OK if magic, checksum and format version are ours
 * and payload_length == sizeof(struct ndet_setup_payload); else NDET_ERR_UNSUPPORTED
 * (NDET_ERR_INVALID_ARGUMENT for a NULL header).
 */
ndet_status_t ndet_setup_header_check(const struct ndet_setup_header *header);

/*
 * Copy `length` received bytes into `payload` if they form a well-formed version-3
 * payload (exact length, NUL-terminated strings, 1 <= nranks <= 4096,
 * 0 <= rank < nranks, local_status < NDET_LOCAL_REASON_COUNT, blocking 0 or 1, and for
 * a READY rank flags_offset and data_offset < pool_bytes, pool_address != 0,
 * cuda_device >= 0 and sm_count >= 1: a rank that is not ready may have no pool);
 * else NDET_ERR_UNSUPPORTED and `payload` untouched (NDET_ERR_INVALID_ARGUMENT
 * for NULL pointers).
 */
ndet_status_t ndet_setup_payload_parse(const void *bytes, size_t length,
				       struct ndet_setup_payload *payload);

/*
 * Does every rank of the table run the data path between hosts?  True when every
 * record carries NDET_SETUP_FLAG_MULTI_HOST (ndet_setup.h), which a rank publishes
 * when its engine has the multi-host stages (ndet_backend.multi_host): the CUDA engine
 * does not yet, the host-only test engine does.  A function of the table: the same
 * answer on every rank.  false for a missing table.
 */
bool ndet_setup_table_multi_host(const struct ndet_setup_payload *table, int nranks);

struct ndet_host_table;

/*
 * Judge the gathered table (table[r] is rank r's payload) by this build's rules
 * (ndet_setup_evaluate_rules, multi-host tables diverting where
 * ndet_setup_table_multi_host says every rank can).  `hosts`: storage
 * of ndet_host_table_create for at least nranks ranks, which the evaluation fills
 * with the table's hosts (ndet_host_table_build, no caller's rank) once the records
 * are well-formed and consistent; NULL or too small is a missing table (BAD_RECORD,
 * -1).  The table is only read.
 */
void ndet_setup_evaluate(const struct ndet_setup_payload *table, int nranks,
			 struct ndet_host_table *hosts, struct ndet_setup_verdict *verdict);

/*
 * The verdict, with the multi-host decision given.  Pure: the same table gives the
 * same verdict on every rank.  Checks, in order (the first failing one wins; the
 * offending rank is the lowest rank that fails it, for comparisons the lowest rank
 * whose value differs from rank 0's):
 *   1. records well-formed (BAD_RECORD);
 *   2. rank/nranks consistent (RANK_MISMATCH);
 *   then the hosts (hostname + boot id).  With more than one host:
 *   3. every rank blocking (MULTI_HOST_NONBLOCKING): between hosts the data path
 *      launches on NCCL's streams, which ncclInProgress forbids;
 *   4. as many ranks on every host (MULTI_HOST_UNEQUAL; the lowest rank of the first
 *      host, in host order, whose count differs from host 0's);
 *   and on any table:
 *   5. at most NDET_MAX_RANKS ranks on each host (TOO_MANY_RANKS): the kernels reduce
 *      one host's ranks; nothing else limits the number of hosts but the table
 *      (NDET_SETUP_NRANKS_LIMIT ranks in all);
 *   6. one host, unless `multi_host_diverts` (MULTI_HOST; the lowest rank of host 1;
 *      ndet_setup_evaluate passes ndet_setup_table_multi_host);
 *   7. local statuses (LOCAL_FAILURE);
 *   8. library versions (VERSION_MISMATCH) and 9. settings hashes
 *      (SETTINGS_MISMATCH), across every host: ranks that would run the same plan;
 *   10. namespaces (NAMESPACE), within each host: namespace ids of 0 (unknown) are
 *      not compared; known ones are compared with the first known id of the same
 *      kind on the same host (across hosts inodes are unrelated);
 *   11. pool geometry (POOL_MISMATCH).
 * The multi-host checks come right after the structural ones: where multi-host
 * communicators do not divert, the later checks would compare machines that are never
 * meant to share memory, and their fixes would mislead the user.
 */
void ndet_setup_evaluate_rules(const struct ndet_setup_payload *table, int nranks,
			       struct ndet_host_table *hosts, bool multi_host_diverts,
			       struct ndet_setup_verdict *verdict);

/*
 * Are two records of one host (equal hostname and boot id)?  Compared within their
 * fields, so unterminated strings are compared whole, never read past.
 */
bool ndet_setup_same_host(const struct ndet_setup_payload *a, const struct ndet_setup_payload *b);

/*
 * How `my_rank` reaches `peer` (self, same process, IPC, or remote), given a table
 * whose records parsed.  Remote = another host (ndet_setup_same_host), decided first:
 * across hosts equal pids and namespace inodes prove nothing (the initial PID
 * namespace has the same inode on every Linux host, and container pids collide).  On
 * one host, same process = equal pids in one known (non-zero) PID namespace;
 * otherwise IPC, whose failure is safe.
 */
ndet_peer_kind_t ndet_setup_peer_kind(const struct ndet_setup_payload *table, int my_rank,
				      int peer);

/*
 * Do two ranks of the table live in one process?  Then one thread may drive several
 * of its ranks one after another, and a blocking barrier among them would deadlock.
 * The same answer on every rank (it is a function of the table).
 */
bool ndet_setup_table_shares_process(const struct ndet_setup_payload *table, int nranks);

/* The most ranks of the table on one GPU (same device UUID); 0 for an empty table. */
int ndet_setup_table_ranks_per_device(const struct ndet_setup_payload *table, int nranks);

/*
 * The most processes with ranks on one GPU (ranks of one process count once); 0 for
 * an empty table.  Above 1 the ranks' kernels share the GPU with every other kernel
 * of those processes (MPS), which the grid cap leaves room for (ndet_plan_grid_cap).
 */
int ndet_setup_table_processes_per_device(const struct ndet_setup_payload *table, int nranks);

/* The fewest SMs of any rank's device in the table; 0 for an empty table. */
int ndet_setup_table_min_sms(const struct ndet_setup_payload *table, int nranks);

/* Text for logs: the cause and the fix. */
const char *ndet_verdict_reason_name(ndet_verdict_reason_t reason);
const char *ndet_verdict_reason_fix(ndet_verdict_reason_t reason);
const char *ndet_local_status_name(ndet_local_status_t status);

#ifdef __cplusplus
}
#endif

#endif /* NDET_SETUP_RECORD_H_ */
