/* SPDX-License-Identifier: MIT */
/*
 * The sealed table blob: one format for a table file on disk, a table in a
 * segment slot, and a table on the wire.
 *
 *   struct locus_tbl_hdr (64 bytes) | payload (payload_len bytes)
 *
 * The header names the kind of table (ELDR centroids, GRACE placement) and
 * the version of that kind's payload layout, and carries CRC32C of the
 * payload and of the header itself. The kind's own module validates the
 * payload's contents (bounds, NaN) after locus_tbl_check() has passed.
 * All integers little-endian (the only byte order locus runs on).
 */
#ifndef LOCUS_TBLFILE_H
#define LOCUS_TBLFILE_H

#include <stddef.h>
#include <stdint.h>

#include "locus_err.h"

#define LOCUS_TBL_MAGIC          0x4c42545355434f4cull /* "LOCUSTBL" */
#define LOCUS_TBL_FORMAT_VERSION 1u
#define LOCUS_TBL_MAX_PAYLOAD    (1ull << 30)

enum locus_tbl_kind {
	LOCUS_TBL_ELDR  = 1, /* decode routing: centroids, idf, mask, tau */
	LOCUS_TBL_GRACE = 2, /* expert placement: groups, replicas per layer */
	LOCUS_TBL_GRACE_SET = 3, /* one GRACE placement per EP group (locus_graceset.h) */
	LOCUS_TBL_KIND_MAX
};

struct locus_tbl_hdr {
	uint64_t magic;
	uint16_t format_version;  /* LOCUS_TBL_FORMAT_VERSION */
	uint16_t kind;            /* enum locus_tbl_kind */
	uint32_t kind_version;    /* payload layout version of that kind */
	uint64_t payload_len;
	uint64_t created_ns;      /* CLOCK_REALTIME when sealed */
	uint32_t payload_crc32c;
	uint32_t hdr_crc32c;      /* over the header with this field zero */
	uint64_t generation;      /* the cluster-wide generation the table was
				   * stored under (etcd), 0 for none: a placement's
				   * rows carry it (locus_dispatch.h) */
	uint8_t  reserved[16];    /* zero */
};

_Static_assert(sizeof(struct locus_tbl_hdr) == 64, "table header is 64 bytes");

/* Name of a kind ("eldr", "grace", "graceset") or "unknown". */
const char *locus_tbl_kind_name(unsigned kind);

/*
 * Check a sealed blob of len bytes: magic, format version, kind (when
 * expect_kind is non-zero), exact length, both checksums. On success
 * returns 0 and, when non-NULL, *payload and *payload_len. Each failure has
 * its own code and a message naming the field.
 */
int locus_tbl_check(const void *buf, size_t len, unsigned expect_kind,
		    const void **payload, size_t *payload_len, struct locus_error *err);

/*
 * Read a whole table file into a malloc'd buffer and check it as above.
 * The caller frees *buf. Truncated files, wrong magic etc. are reported
 * with the path in err->msg.
 */
int locus_tbl_read_file(const char *path, unsigned expect_kind, void **buf, size_t *len,
			struct locus_error *err);

#endif /* LOCUS_TBLFILE_H */
