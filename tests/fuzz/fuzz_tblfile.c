// SPDX-License-Identifier: MIT
/*
 * The sealed table container (locus_tblfile.h) as a table file, a segment
 * slot or `locusctl show` presents it: locus_tbl_check on raw bytes, then
 * the kind's own blob check, as the table channel's validate callbacks do.
 * The first input byte picks how the rest is presented: as is, or with both
 * checksums made right (what a writer that computes them, honest or not,
 * produces), so that the checks after the CRCs are reached too. Contract:
 * an accepted blob keeps the header's rules (magic, version, a known kind,
 * exact length) and its payload is the bytes after the header; the kind
 * checks agree with the container.
 */
#include "fuzz.h"
#include "locus_crc32c.h"
#include "locus_eldr.h"
#include "locus_eldr_priv.h"
#include "locus_grace.h"
#include "locus_grace_priv.h"
#include "locus_graceset.h"
#include "locus_graceset_priv.h"
#include "locus_tblfile.h"

/* Both checksums as locus_tbl_seal computes them, over whatever the header says. */
static void fix_crcs(uint8_t *buf, size_t size)
{
	struct locus_tbl_hdr *h = (void *)buf;

	if (size < sizeof(*h))
		return;
	if (h->payload_len <= size - sizeof(*h))
		h->payload_crc32c = locus_crc32c(buf + sizeof(*h), h->payload_len);
	h->hdr_crc32c = 0;
	h->hdr_crc32c = locus_crc32c(h, sizeof(*h));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct locus_error err = { 0 };
	uint8_t mode = size ? data[0] : 0;
	uint8_t *buf = fuzz_dup(data + !!size, size ? size - 1 : 0);
	const struct locus_tbl_hdr *h = (const void *)buf;
	const void *pl = NULL;
	size_t plen = 0;
	unsigned other;
	int ret;

	size = size ? size - 1 : 0;
	if (mode & 1)
		fix_crcs(buf, size);
	ret = locus_tbl_check(buf, size, 0, &pl, &plen, &err);
	FUZZ_CHECK(ret <= 0, "check returned %d", ret);
	if (ret < 0) {
		FUZZ_CHECK(err.msg[0], "refusal without a message");
		FUZZ_CHECK(locus_eldr_table_validate_cb(buf, size, NULL, NULL) < 0 &&
			   locus_grace_table_validate_cb(buf, size, NULL, NULL) < 0 &&
			   locus_graceset_table_validate_cb(buf, size, NULL, NULL) < 0,
			   "a kind check took a blob the container refuses");
		goto out;
	}
	FUZZ_CHECK(size >= sizeof(*h) && h->magic == LOCUS_TBL_MAGIC &&
		   h->format_version == LOCUS_TBL_FORMAT_VERSION && h->kind >= 1 &&
		   h->kind < LOCUS_TBL_KIND_MAX, "an accepted header breaks its rules");
	FUZZ_CHECK(pl == buf + sizeof(*h) && plen == size - sizeof(*h) && plen == h->payload_len,
		   "payload pointer/length");
	other = h->kind == LOCUS_TBL_ELDR ? LOCUS_TBL_GRACE : LOCUS_TBL_ELDR;
	FUZZ_CHECK(locus_tbl_check(buf, size, h->kind, NULL, NULL, NULL) == 0 &&
		   locus_tbl_check(buf, size, other, NULL, NULL, NULL) < 0,
		   "expected kind not honoured");
	/* each kind's check takes its own kind only */
	FUZZ_CHECK(h->kind == LOCUS_TBL_ELDR || locus_eldr_table_validate_cb(buf, size, NULL,
									     NULL) < 0,
		   "ELDR check took a %s table", locus_tbl_kind_name(h->kind));
	FUZZ_CHECK(h->kind == LOCUS_TBL_GRACE || locus_grace_table_validate_cb(buf, size, NULL,
									       NULL) < 0,
		   "GRACE check took a %s table", locus_tbl_kind_name(h->kind));
	FUZZ_CHECK(h->kind == LOCUS_TBL_GRACE_SET ||
		   locus_graceset_table_validate_cb(buf, size, NULL, NULL) < 0,
		   "placement set check took a %s table", locus_tbl_kind_name(h->kind));
	if (h->kind == LOCUS_TBL_ELDR)
		locus_eldr_table_validate_cb(buf, size, NULL, NULL);
	else if (h->kind == LOCUS_TBL_GRACE)
		locus_grace_table_validate_cb(buf, size, NULL, NULL);
	else
		locus_graceset_table_validate_cb(buf, size, NULL, NULL);
out:
	free(buf);
	return 0;
}
