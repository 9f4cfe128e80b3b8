// SPDX-License-Identifier: MIT
/*
 * A counters region as locus-stat reads it from a segment any process of
 * group locus can write: locus_counters_open (read-only), every entry
 * summed with locus_stat_sample, rendered as the table, JSON and
 * Prometheus text. Input: a 16-bit length n, n bytes of region, then up to
 * four (u32 offset, u64 value) writes applied after the open, as a writer
 * changing the shared bytes under the reader; then refresh and sample
 * again. Contract, from locus_counters.h: every entry the reader adopts is
 * well formed (names, labels, kind, shape, storage inside a block), sums
 * fill exactly n_elems x elem_words words, nothing is read outside the
 * region whatever the writer does later (ASan on an exact-sized copy), and
 * `locus-stat --json` prints one strict JSON value.
 */
#include "fuzz.h"
#include "locus_counters.h"
#include "locus_stat.h"
#include "trace_json.h"

static void check_info(const struct locus_counters *c)
{
	for (uint32_t i = 0; i < locus_counters_n_entries(c); i++) {
		const struct locus_ctr_info *in = locus_counters_info(c, i);
		uint64_t n = 1;

		FUZZ_CHECK(in, "entry %u has no info", i);
		FUZZ_CHECK(in->name[0] && strlen(in->name) < LOCUS_CTR_NAME_MAX &&
			   strspn(in->name, "abcdefghijklmnopqrstuvwxyz0123456789_") ==
			   strlen(in->name), "entry %u name '%.64s'", i, in->name);
		FUZZ_CHECK(memchr(in->help, 0, sizeof(in->help)), "help not terminated");
		for (const char *h = in->help; *h; h++)
			FUZZ_CHECK(*h >= 0x20 && *h < 0x7f, "help byte 0x%02x", (unsigned char)*h);
		FUZZ_CHECK(in->kind >= LOCUS_CTR_COUNTER && in->kind <= LOCUS_CTR_HISTOGRAM,
			   "kind %u", in->kind);
		FUZZ_CHECK(in->ndims <= LOCUS_CTR_MAX_DIMS, "ndims %u", in->ndims);
		for (uint32_t d = 0; d < in->ndims; d++) {
			FUZZ_CHECK(in->dim[d] >= 1 && in->label[d][0] &&
				   memchr(in->label[d], 0, LOCUS_CTR_LABEL_MAX), "dim %u", d);
			n *= in->dim[d];
		}
		FUZZ_CHECK(n == in->n_elems && n <= LOCUS_CTR_MAX_ELEMS, "n_elems %u", in->n_elems);
		FUZZ_CHECK(in->elem_words ==
			   (in->kind == LOCUS_CTR_HISTOGRAM ? LOCUS_HIST_WORDS : 1u),
			   "elem_words %u", in->elem_words);
		for (uint32_t j = 0; j < i; j++)
			FUZZ_CHECK(strcmp(locus_counters_info(c, j)->name, in->name),
				   "name '%s' twice", in->name);
	}
}

static void render(const struct locus_counters *c)
{
	struct locus_stat_view v = { .instance = "fuzz", .state = "running", .owner_pid = 1,
				     .n_blocks = locus_counters_n_blocks(c),
				     .n_entries = locus_counters_n_entries(c) };
	struct locus_stat_snap s;
	char *out = NULL;
	size_t len = 0;
	FILE *f;

	if (locus_stat_sample(c, NULL, 0, -1, &s) < 0)
		return;
	f = open_memstream(&out, &len);
	if (!f)
		abort();
	FUZZ_CHECK(locus_stat_print_json(f, &v, &s) == 0, "JSON rendering failed");
	fclose(f);
	{
		struct locus_error err = { 0 };
		struct tj j;

		tj_init(&j, out, len, "json", 1, &err);
		FUZZ_CHECK(tj_skip(&j) == 0 && tj_peek(&j) == -1, "locus-stat --json is not one "
			   "JSON value: %s\n%.2000s", err.msg, out);
	}
	free(out);
	f = fopen("/dev/null", "w");
	if (!f)
		abort();
	FUZZ_CHECK(locus_stat_print_table(f, &v, &s) == 0, "table rendering failed");
	FUZZ_CHECK(locus_stat_print_prom(f, &v, &s) == 0, "Prometheus rendering failed");
	fclose(f);
	locus_stat_snap_free(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };
	size_t n = fin_u16(&in);
	struct locus_counters *c = NULL;
	struct locus_error err = { 0 };
	uint8_t *region;
	int ret;

	n = n < in.n ? n : in.n;
	region = fuzz_dup(in.p, n);
	in.p += n;
	in.n -= n;
	ret = locus_counters_open(region, n, LOCUS_CTR_RDONLY, &c, &err);
	if (ret < 0) {
		FUZZ_CHECK(err.msg[0], "refusal %d without a message", ret);
		goto out;
	}
	check_info(c);
	render(c);
	/* the writer changes the shared bytes under the reader */
	for (int i = 0; i < 4 && in.n >= 12; i++) {
		uint32_t off = fin_u32(&in);
		uint64_t val = fin_u64(&in);

		if (n >= 8)
			memcpy(region + (off % (n - 7)), &val, 8);
	}
	locus_counters_refresh(c, NULL);
	check_info(c);
	render(c);
out:
	locus_counters_close(c);
	free(region);
	return 0;
}
