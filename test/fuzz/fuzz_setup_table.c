/*
 * Copyright (c) 2026, nccl-det authors. SPDX-License-Identifier: BSD-3-Clause
 *
 * Fuzz target: the setup record (src/protocol/ndet_setup_record.c), what every rank runs on
 * the bytes its peers sent.  Byte 0 gives the number of ranks, 1 to 16; byte 1 bit 0
 * picks how the table is made:
 *   raw:      the rest of the input, cut into records (zero-padded): mostly garbage;
 *   mutated:  a good table of one host, then the rest read as edits (rank, offset,
 *             byte), so that the later checks of the verdict are reached too.
 * Then: the first 16 bytes as a round-one header; ndet_setup_payload_parse on every
 * record and on wrong lengths (must not crash; a record it accepts is copied
 * unchanged, one it refuses leaves the output alone); ndet_setup_evaluate on the
 * table from every rank's own copy (the same verdict everywhere, the table untouched,
 * a verdict consistent with the records); on an accepted table, the peer kinds.
 *
 * `make check` runs the plain driver (fuzz_driver.c); test/fuzz/libfuzzer.sh runs libFuzzer.
 */
#include "config.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test/fuzz/fuzz_driver.h"
#include "protocol/ndet_setup_record.h"
#include "protocol/ndet_host_table.h"
#include "kernels/ndet_types.h"

const char fuzz_name[] = "fuzz_setup_table";

#define FUZZ_RANKS  16
#define FUZZ_RECORD sizeof(struct ndet_setup_payload)

/* A record of a good table: one host, ranks 2k and 2k+1 in one process. */
static void fuzz_good_record(struct ndet_setup_payload *record, int rank, int nranks)
{
	static const char host[] = "fuzz-host", boot[] = "00000000-0000-4000-8000-000000000000";
	memset(record, 0, sizeof(*record));
	memcpy(record->hostname, host, sizeof(host));
	memcpy(record->boot_id, boot, sizeof(boot));
	record->pid = 100 + (uint64_t)(rank / 2);
	record->pid_namespace = 7;
	record->ipc_namespace = 9;
	record->cuda_device = rank;
	record->rank = rank;
	record->nranks = nranks;
	record->library_version = 1;
	record->settings_hash = 42;
	record->pool_bytes = 1 << 20;
	record->data_offset = 4096;
	record->pool_address = (uint64_t)(rank + 1) << 32;
	record->sm_count = 132;
	record->blocking = 1;
}

static void fuzz_check_header(const uint8_t *data, size_t size)
{
	struct ndet_setup_header header;
	memset(&header, 0, sizeof(header));
	memcpy(&header, data, size < sizeof(header) ? size : sizeof(header));
	ndet_status_t status = ndet_setup_header_check(&header);
	if (status != NDET_OK && status != NDET_ERR_UNSUPPORTED)
		fuzz_fail("header", "unexpected status");
	if (status == NDET_OK && !ndet_setup_header_is_record(&header))
		fuzz_fail("header", "accepted without being a record");
}

/* Parse record `r` as a peer's bytes; true when accepted. */
static bool fuzz_parse(const struct ndet_setup_payload *record)
{
	unsigned char bytes[FUZZ_RECORD + 1];
	struct ndet_setup_payload parsed;
	memcpy(bytes, record, FUZZ_RECORD);
	bytes[FUZZ_RECORD] = 0;
	/* Wrong lengths are refused and leave the output alone. */
	const size_t lengths[] = {0, FUZZ_RECORD - 1, FUZZ_RECORD + 1};
	for (size_t i = 0; i < sizeof(lengths) / sizeof(lengths[0]); i++) {
		memset(&parsed, 0x77, sizeof(parsed));
		if (ndet_setup_payload_parse(bytes, lengths[i], &parsed) != NDET_ERR_UNSUPPORTED)
			fuzz_fail("parse", "accepted a wrong length");
		for (size_t k = 0; k < sizeof(parsed); k++)
			if (((const unsigned char *)&parsed)[k] != 0x77)
				fuzz_fail("parse", "wrote on refusal");
	}
	/* Received bytes carry no alignment: parse from an odd address too. */
	memmove(bytes + 1, bytes, FUZZ_RECORD);
	memset(&parsed, 0x77, sizeof(parsed));
	ndet_status_t status = ndet_setup_payload_parse(bytes + 1, FUZZ_RECORD, &parsed);
	if (status == NDET_OK && memcmp(&parsed, record, FUZZ_RECORD) != 0)
		fuzz_fail("parse", "changed an accepted record");
	if (status != NDET_OK && status != NDET_ERR_UNSUPPORTED)
		fuzz_fail("parse", "unexpected status");
	return status == NDET_OK;
}

static bool fuzz_same_verdict(const struct ndet_setup_verdict *a,
			      const struct ndet_setup_verdict *b)
{
	return a->reason == b->reason && a->offending_rank == b->offending_rank &&
	       a->detail == b->detail;
}

/* The verdict agrees with the records it judged. */
static void fuzz_check_verdict(const struct ndet_setup_payload *table, int nranks,
			       const bool *parsed, const struct ndet_setup_verdict *verdict)
{
	if ((unsigned)verdict->reason >= NDET_VERDICT_COUNT)
		fuzz_fail("verdict", "reason out of range");
	if (ndet_verdict_reason_name(verdict->reason) == NULL ||
	    ndet_verdict_reason_fix(verdict->reason) == NULL)
		fuzz_fail("verdict", "no text");
	if (verdict->reason == NDET_VERDICT_OK) {
		if (verdict->offending_rank != -1)
			fuzz_fail("verdict", "OK names a rank");
		for (int r = 0; r < nranks; r++) {
			if (!parsed[r] || table[r].rank != r || table[r].nranks != nranks ||
			    table[r].local_status != NDET_LOCAL_READY ||
			    table[r].library_version != table[0].library_version ||
			    table[r].settings_hash != table[0].settings_hash ||
			    (!ndet_setup_same_host(&table[r], &table[0]) &&
			     (!ndet_setup_table_multi_host(table, nranks) ||
			      table[r].blocking == 0)))
				fuzz_fail("verdict", "OK for a table that must be refused");
		}
		return;
	}
	/* A multi-host verdict names the first rank of a host other than rank 0's. */
	if (verdict->reason == NDET_VERDICT_MULTI_HOST ||
	    verdict->reason == NDET_VERDICT_MULTI_HOST_UNEQUAL) {
		const int r = verdict->offending_rank;
		if (r < 1 || r >= nranks || ndet_setup_same_host(&table[r], &table[0]))
			fuzz_fail("verdict", "multi-host names a rank of rank 0's host");
		for (int q = 0; q < r; q++)
			if (ndet_setup_same_host(&table[q], &table[r]))
				fuzz_fail("verdict", "multi-host names a host by a later rank");
	}
	if (verdict->reason == NDET_VERDICT_MULTI_HOST_NONBLOCKING &&
	    (verdict->offending_rank < 0 || verdict->offending_rank >= nranks ||
	     table[verdict->offending_rank].blocking != 0))
		fuzz_fail("verdict", "non-blocking names a blocking rank");
	if (verdict->offending_rank < 0 || verdict->offending_rank >= nranks)
		fuzz_fail("verdict", "offending rank out of range");
	/* A bad record is the lowest one the parser refuses. */
	if (verdict->reason == NDET_VERDICT_BAD_RECORD) {
		for (int r = 0; r < verdict->offending_rank; r++)
			if (!parsed[r])
				fuzz_fail("verdict", "a lower bad record was not named");
		if (parsed[verdict->offending_rank])
			fuzz_fail("verdict", "names a record the parser accepts");
	} else {
		for (int r = 0; r < nranks; r++)
			if (!parsed[r])
				fuzz_fail("verdict", "judged a table with a bad record");
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct ndet_setup_payload table[FUZZ_RANKS], copy[FUZZ_RANKS];
	static struct ndet_host_table *hosts; /* storage of the verdict, kept for every input */
	bool parsed[FUZZ_RANKS];
	if (size < 2)
		return 0;
	if (hosts == NULL && (hosts = ndet_host_table_create(FUZZ_RANKS)) == NULL)
		fuzz_fail("hosts", "out of memory");
	const int nranks = 1 + data[0] % FUZZ_RANKS;
	const bool mutated = (data[1] & 1) != 0;
	const uint8_t *rest = data + 2;
	const size_t length = size - 2;

	fuzz_check_header(rest, length);
	memset(table, 0, sizeof(table));
	if (mutated) {
		for (int r = 0; r < nranks; r++)
			fuzz_good_record(&table[r], r, nranks);
		for (size_t at = 0; at + 4 <= length; at += 4) {
			int r = rest[at] % nranks;
			size_t offset =
				((size_t)rest[at + 1] | (size_t)rest[at + 2] << 8) % FUZZ_RECORD;
			((uint8_t *)&table[r])[offset] = rest[at + 3];
		}
	} else {
		size_t bytes = (size_t)nranks * FUZZ_RECORD;
		memcpy(table, rest, length < bytes ? length : bytes);
	}
	for (int r = 0; r < nranks; r++)
		parsed[r] = fuzz_parse(&table[r]);

	/* Every rank judges its own copy of the same bytes. */
	struct ndet_setup_verdict first = {NDET_VERDICT_OK, -1, 0};
	for (int r = 0; r < nranks; r++) {
		struct ndet_setup_verdict verdict;
		memset(&verdict, r & 1 ? 0xff : 0x00, sizeof(verdict));
		memcpy(copy, table, (size_t)nranks * sizeof(table[0]));
		ndet_setup_evaluate(copy, nranks, hosts, &verdict);
		if (memcmp(copy, table, (size_t)nranks * sizeof(table[0])) != 0)
			fuzz_fail("evaluate", "changed the table");
		if (r == 0)
			first = verdict;
		else if (!fuzz_same_verdict(&first, &verdict))
			fuzz_fail("evaluate", "ranks reached different verdicts");
	}
	fuzz_check_verdict(table, nranks, parsed, &first);
	if (first.reason == NDET_VERDICT_OK) {
		bool shares = ndet_setup_table_shares_process(table, nranks);
		bool found = false;
		for (int r = 0; r < nranks; r++) {
			for (int q = 0; q < nranks; q++) {
				ndet_peer_kind_t kind = ndet_setup_peer_kind(table, r, q);
				const bool remote = !ndet_setup_same_host(&table[r], &table[q]);
				if ((r == q) != (kind == NDET_PEER_SELF) ||
				    remote != (kind == NDET_PEER_REMOTE) ||
				    (unsigned)kind > NDET_PEER_REMOTE)
					fuzz_fail("peer kind", "wrong");
				found = found || kind == NDET_PEER_SAME_PROCESS;
			}
		}
		if (shares != found)
			fuzz_fail("shares process", "disagrees with the peer kinds");
	}
	return 0;
}

/* Byte 0: ranks - 1; byte 1 bit 0: mutated good table (edits of 4 bytes). */
const struct fuzz_seed fuzz_seeds[] = {
	FUZZ_SEED("\x02\x01"),                                     /* a good table of 3 */
	FUZZ_SEED("\x0f\x01"),                                     /* a good table of 16 */
	FUZZ_SEED("\x03\x01\x02\xa0\x00\x05"),                     /* rank 2's library version */
	FUZZ_SEED("\x03\x01\x01\x40\x00\x41"),                     /* rank 1's boot id */
	FUZZ_SEED("\x03\x01\x03\x94\x00\x07"),                     /* rank 3's rank field */
	FUZZ_SEED("\x03\x01\x00\x9c\x00\x02"),                     /* rank 0's local status */
	FUZZ_SEED("\x03\x01\x01\xb0\x00\x00\x01\xb2\x00\x10"),     /* rank 1's pool size */
	FUZZ_SEED("\x03\x01\x02\x3f\x00\x41"),                     /* unterminated hostname */
	FUZZ_SEED("\x03\x01\x02\x78\x00\x01"),                     /* rank 2's IPC namespace */
	FUZZ_SEED("\x01\x00NDET\x01\x00\x00\x00\x10\x01\x00\x00"), /* raw, a header */
	FUZZ_SEED("\x00\x00"), /* raw zeros: nobody sent anything */
	/* Ranks 2 and 3 on another host: two hosts of two; then rank 3 non-blocking. */
	FUZZ_SEED("\x03\x01\x02\x00\x00\x58\x03\x00\x00\x58"),
	FUZZ_SEED("\x03\x01\x02\x00\x00\x58\x03\x00\x00\x58\x03\x14\x01\x00"),
	FUZZ_SEED("\x02\x01\x02\x00\x00\x58"), /* 2 + 1 ranks */
};
const size_t fuzz_seed_count = sizeof(fuzz_seeds) / sizeof(fuzz_seeds[0]);
const unsigned fuzz_generated_inputs = 20000;
