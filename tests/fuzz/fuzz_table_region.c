// SPDX-License-Identifier: MIT
/*
 * The table channels under arbitrary writes. Since the segment split they
 * live in locusd's own memory and only its push server writes them (no
 * client maps them any more); the target keeps the reader safe against a
 * stray write anywhere in the process. A valid region (one ELDR channel, 3
 * slots, 2 reader records) is laid out, attached as the engine attaches it,
 * a reader registered with the ELDR validate callback (what locusd
 * registers) and a valid table pushed and adopted; then the input's writes
 * (16-bit offset, length, bytes) change the region, and the reader polls,
 * locusctl pushes and waits, and a fresh attach (a tool's) looks at it.
 * Contract, from locus_table.h: the reader never reads outside the region
 * (ASan on an exact-sized buffer), a table it switches to lies in a slot and
 * passes the validator and the CRC, the old table stays when one is refused;
 * a refusal message read back is a C string; writer and waiter never block.
 */
#include <errno.h>

#include "fuzz.h"
#include "fuzz_tables.h"
#include "locus_eldr.h"
#include "locus_eldr_priv.h"
#include "locus_table.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct locus_table_params tp = { .n_channels = 1, .n_readers = 2,
					 .channel = { { .n_slots = 3, .slot_size = 1024 } } };
	size_t len = locus_table_region_size(&tp), blen;
	struct locus_table_region *t, *t2 = NULL;
	struct locus_table_wait_result res = { 0 };
	struct locus_table_reader r;
	struct fuzz_in in = { data, size };
	uint8_t *region = NULL;
	void *blob = ft_eldr_blob(2, 8, 4, 0, &blen);
	const void *prev;
	uint64_t prev_gen;
	int ret;

	if (posix_memalign((void **)&region, 64, len) || !blob ||
	    locus_table_region_init(region, len, &tp, NULL) ||
	    locus_table_region_attach(region, len, &t, NULL) ||
	    locus_table_reader_register(t, 0, 0, locus_eldr_table_validate_cb, NULL, &r, NULL) ||
	    locus_table_push(t, 0, blob, blen, 0, NULL) <= 0 || locus_table_reader_poll(&r) != 1)
		abort();
	/* the hostile writes */
	while (in.n >= 3) {
		uint32_t off = fin_u16(&in) % len, n = fin_u8(&in);

		n = n < len - off ? n : (uint32_t)(len - off);
		fin_copy(&in, region + off, n);
	}
	for (int i = 0; i < 3; i++) {
		prev = locus_table_reader_table(&r, NULL);
		prev_gen = r.cur_gen;
		ret = locus_table_reader_poll(&r);
		if (ret > 0) {
			size_t tl;
			const uint8_t *tab = locus_table_reader_table(&r, &tl);

			FUZZ_CHECK(tab >= region && tl <= len && (size_t)(tab - region) <= len - tl,
				   "the reader switched to a table outside the region");
			FUZZ_CHECK(locus_eldr_blob_check(tab, tl, NULL, NULL) == 0,
				   "the reader switched to a table its validator refuses");
			FUZZ_CHECK(r.cur_gen > prev_gen, "generation went from %llu to %llu",
				   (unsigned long long)prev_gen, (unsigned long long)r.cur_gen);
		} else {
			FUZZ_CHECK(locus_table_reader_table(&r, NULL) == prev,
				   "a refused or unchanged poll changed the table in use");
		}
	}
	/* locusctl: a push (never waiting) and a wait on what it published */
	{
		int64_t g = locus_table_push(t, 0, blob, blen, 0, NULL);

		ret = locus_table_wait(t, 0, g > 0 ? (uint64_t)g : 1, 0, &res);
		FUZZ_CHECK(ret == 0 || ret == -ETIMEDOUT || ret == -LOCUS_ERANGE,
			   "wait returned %d", ret);
		FUZZ_CHECK(memchr(res.refused_msg, 0, sizeof(res.refused_msg)),
			   "the refusal message read back is not terminated");
		/* the table in use lies in writable memory: only a switch is judged */
		if (locus_table_reader_poll(&r) > 0) {
			size_t tl;
			const void *tab = locus_table_reader_table(&r, &tl);

			FUZZ_CHECK(locus_eldr_blob_check(tab, tl, NULL, NULL) == 0,
				   "the reader switched to a table its validator refuses");
		}
	}
	/* a tool attaching the region as it is now */
	if (locus_table_region_attach(region, len, &t2, NULL) == 0) {
		for (unsigned ch = 0; ch < locus_table_channels(t2); ch++) {
			unsigned ns;
			size_t ss;

			FUZZ_CHECK(locus_table_channel_geometry(t2, ch, &ns, &ss) == 0 &&
				   ns >= 2 && ns <= LOCUS_TABLE_MAX_SLOTS, "channel geometry");
			locus_table_published(t2, ch);
		}
		locus_table_region_detach(t2);
	}
	locus_table_reader_unregister(&r);
	locus_table_region_detach(t);
	free(region);
	free(blob);
	return 0;
}
