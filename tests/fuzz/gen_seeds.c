// SPDX-License-Identifier: MIT
/*
 * Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/):
 * small valid inputs, each built with the module's own writers (table
 * sealing, the trace writer, the EPLB exporter, counters registration) or
 * captured from real engines (the two-engine harness), so every target
 * starts past its first check. `make fuzz-seeds` runs it; the output is
 * checked in. Usage: gen_seeds DIR [REPO_ROOT]
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_engine_targets.h"
#include "gen_seeds.h"
#include "fuzz_tables.h"
#include "locus_counters.h"
#include "locus_counters_priv.h"
#include "locus_crc32c.h"
#include "locus_dispatch.h"
#include "locus_eldr.h"
#include "locus_eldr_priv.h"
#include "locus_file.h"
#include "locus_gracefit.h"
#include "locus_tblfile.h"
#include "locus_trace.h"
#include "locus_verbs.h"
#include "locus_wire.h"
#include "locus_blocks.h"
#include "locus_client.h"
#include "locus_client_priv.h"
#include "locus_push.h"
#include "locus_shm.h"
#include "locus_table.h"

static const char *out_dir, *root;

/* ---- output ------------------------------------------------------------------------- */

void put(const char *target, const char *name, const void *p, size_t n)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", out_dir, target);
	if (mkdir(path, 0755) < 0 && errno != EEXIST)
		goto fail;
	snprintf(path, sizeof(path), "%s/%s/%s", out_dir, target, name);
	f = fopen(path, "wb");
	if (!f || fwrite(p, 1, n, f) != n || fclose(f))
		goto fail;
	return;
fail:
	perror(path);
	exit(1);
}

void b8(struct bs *s, uint32_t v)
{
	s->b[s->n++] = (uint8_t)v;
}

void b16(struct bs *s, uint32_t v)
{
	b8(s, v & 0xff);
	b8(s, v >> 8);
}

void b32(struct bs *s, uint32_t v)
{
	b16(s, v & 0xffff);
	b16(s, v >> 16);
}

void bmem(struct bs *s, const void *p, size_t n)
{
	memcpy(s->b + s->n, p, n);
	s->n += n;
}

/* ---- table, request and message seeds ---------------------------------------------- */

/* A tblfile seed: the mode byte (bit 0: the target fixes the checksums), then the blob. */
static void put_tbl(const char *name, uint8_t mode, const void *blob, size_t len)
{
	static struct bs s;

	s.n = 0;
	b8(&s, mode);
	bmem(&s, blob, len);
	put("tblfile", name, s.b, s.n);
}

static void tables(void)
{
	static const struct { uint16_t L, E, K; uint32_t id0; } el[] = {
		{ 2, 8, 4, 0 }, { 1, 4, 1, 0 }, { 3, 16, 8, 60 }, { 2, 8, 2, 7 },
	};
	static const struct { uint16_t L, E, K, C; float spill; uint32_t flags; } el2[] = {
		{ 2, 8, 2, 5, 0.3f, LOCUS_ELDR_TBL_F_OVERFLOW_SPREAD }, { 1, 4, 1, 3, 0, 0 },
		{ 3, 16, 4, 4, 0.5f, 0 }, { 2, 8, 3, 0, 0, LOCUS_ELDR_TBL_F_OVERFLOW_SPREAD },
	};
	static const struct { uint32_t L, E, nodes, gpn, R; } gr[] = {
		{ 2, 8, 1, 4, 1 }, { 2, 8, 2, 2, 2 }, { 1, 4, 1, 1, 0 }, { 3, 16, 4, 2, 3 },
	};
	char name[64];
	size_t len, blen;
	void *p, *b;

	for (size_t i = 0; i < LOCUS_ARRAY_SIZE(el); i++) {
		p = ft_eldr_payload(el[i].L, el[i].E, el[i].K, el[i].id0, 0.1f + 0.2f * (float)i,
				    &len);
		snprintf(name, sizeof(name), "eldr-%ux%ux%u", el[i].L, el[i].E, el[i].K);
		put("eldr_table", name, p, len);
		b = ft_seal(LOCUS_TBL_ELDR, locus_eldr_tbl_kind_version(p), p, len, &blen);
		put_tbl(name, (uint8_t)i, b, blen);
		free(p);
		free(b);
	}
	/* version 2: centroid maps, the load spill, the overflow spread */
	for (size_t i = 0; i < LOCUS_ARRAY_SIZE(el2); i++) {
		p = ft_eldr_payload_mapped(el2[i].L, el2[i].E, el2[i].K, el2[i].C, 0, 0.1f,
					   el2[i].spill, el2[i].spill ? 2 : 0, el2[i].flags, &len);
		snprintf(name, sizeof(name), "eldr2-%ux%ux%u-c%u", el2[i].L, el2[i].E, el2[i].K,
			 el2[i].C);
		put("eldr_table", name, p, len);
		b = ft_seal(LOCUS_TBL_ELDR, locus_eldr_tbl_kind_version(p), p, len, &blen);
		put_tbl(name, (uint8_t)i, b, blen);
		free(p);
		free(b);
	}
	for (size_t i = 0; i < LOCUS_ARRAY_SIZE(gr); i++) {
		struct locus_gracefit_topo topo = { .n_nodes = gr[i].nodes,
						    .gpus_per_node = gr[i].gpn };
		struct bs s = { .n = 0 };
		char *json = NULL;

		p = ft_grace_payload(gr[i].L, gr[i].E, gr[i].nodes, gr[i].gpn, gr[i].R, &len);
		snprintf(name, sizeof(name), "grace-%ux%u-%ux%u-r%u", gr[i].L, gr[i].E, gr[i].nodes,
			 gr[i].gpn, gr[i].R);
		put("grace_table", name, p, len);
		b = ft_seal(LOCUS_TBL_GRACE, LOCUS_GRACE_KIND_VERSION, p, len, &blen);
		put_tbl(name, (uint8_t)i, b, blen);
		/* EPLB: the exporter's JSON of the same placement, after the topology bytes */
		if (locus_gracefit_eplb_export(p, len, &json, NULL) == 0) {
			b8(&s, topo.n_nodes - 1);
			b8(&s, topo.gpus_per_node - 1);
			b8(&s, 0);
			b8(&s, 0);
			bmem(&s, json, strlen(json));
			put("eplb", name, s.b, s.n);
		}
		free(json);
		free(p);
		free(b);
	}
}

static void signatures(void)
{
	static const struct { uint16_t L, E; } sh[] = { { 2, 8 }, { 3, 16 }, { 1, 4 }, { 4, 64 } };

	for (uint8_t t = 0; t < LOCUS_ARRAY_SIZE(sh); t++) {
		struct bs s = { .n = 0 };
		uint16_t ids[8 * 4 * 2]; /* [token][layer][k] */
		char name[32];
		long n;

		for (int tok = 0; tok < 8; tok++)
			for (int l = 0; l < sh[t].L; l++)
				for (int k = 0; k < 2; k++)
					ids[(tok * sh[t].L + l) * 2 + k] =
						(uint16_t)((tok * 3 + l + k * 5) % sh[t].E);
		b8(&s, t);
		n = locus_eldr_sig_build(s.b + 1, sizeof(s.b) - 1, sh[t].L, sh[t].E, 2, ids, 8,
					 t == 1 ? 0x3 : 0, NULL);
		if (n < 0)
			exit(1);
		s.n += (size_t)n;
		snprintf(name, sizeof(name), "sig-%ux%u", sh[t].L, sh[t].E);
		put("eldr_sig", name, s.b, s.n);
	}
}

/* Blocks ROUTE requests for fuzz_blocks_req's shapes (its first byte picks one), an EVICT. */
static void blocks_reqs(void)
{
	static const struct { uint16_t L, E, bt; } sh[] = { { 2, 8, 16 }, { 1, 4, 4 }, { 3, 16, 255 } };

	for (uint8_t t = 0; t < LOCUS_ARRAY_SIZE(sh); t++) {
		struct bs s = { .n = 0 };
		uint64_t cached[5] = { 11, 12, 13, 14, 15 }, nh[2] = { 21, 22 };
		uint8_t counts[2 * 3 * 16] = { 0 }, tail[256] __attribute__((aligned(8)));
		uint16_t ids[3 * 3] = { 0 };
		char name[32];
		long n;

		for (int i = 0; i < 2 * sh[t].L * sh[t].E; i += sh[t].E)
			counts[i] = (uint8_t)(sh[t].bt > 4 ? 4 : sh[t].bt);
		if (locus_eldr_sig_build(tail, sizeof(tail), sh[t].L, sh[t].E, 1, ids, 3, 0, NULL) < 0)
			exit(1);
		b8(&s, t);
		n = locus_blocks_build(s.b + 8, sizeof(s.b) - 8, &(struct locus_blocks_route){
			.block_tokens = sh[t].bt, .n_cached = 5, .cached = cached,
			.n_new = t == 1 ? 0 : 2, .new_hashes = nh, .new_counts = counts,
			.tail = tail }, NULL);
		if (n < 0)
			exit(1);
		memmove(s.b + 1, s.b + 8, (size_t)n);
		s.n += (size_t)n;
		snprintf(name, sizeof(name), "route-%ux%u-bt%u", sh[t].L, sh[t].E, sh[t].bt);
		put("blocks_req", name, s.b, s.n);
	}
	{
		struct bs s = { .n = 0 };
		uint64_t h[3] = { 1, 2, 3 };
		long n;

		b8(&s, 0x80);
		n = locus_evict_build(s.b + 8, sizeof(s.b) - 8, h, 3, NULL);
		if (n < 0)
			exit(1);
		memmove(s.b + 1, s.b + 8, (size_t)n);
		s.n += (size_t)n;
		put("blocks_req", "evict-3", s.b, s.n);
	}
}

/* A dispatch request of n tokens x top_k on E experts at layer, rows at rows_off. */
static size_t dispatch_req(uint8_t *out, uint32_t n, uint16_t k, uint32_t E, uint16_t layer,
			   uint64_t rows_off)
{
	struct locus_dispatch_req rq = { .magic = LOCUS_DISPATCH_MAGIC, .layer = layer, .top_k = k,
					 .n_tokens = n, .row_bytes = 256, .rows_off = rows_off,
					 .batch_id = 42 };
	uint16_t *ex = (uint16_t *)(out + sizeof(rq));
	float *g;

	memcpy(out, &rq, sizeof(rq));
	memset(ex, 0, locus_ids_bytes(n, k));
	for (uint32_t i = 0; i < n * k; i++)
		ex[i] = (uint16_t)((i * 3 + i / k) % E);
	g = (float *)((uint8_t *)ex + locus_ids_bytes(n, k));
	for (uint32_t i = 0; i < n * k; i++)
		g[i] = 0.25f;
	return locus_dispatch_req_len(n, k);
}

static size_t combine_req(uint8_t *out, uint32_t n, uint32_t dst)
{
	struct locus_combine_req rq = { .magic = LOCUS_COMBINE_MAGIC, .layer = 1, .dst_rank = dst,
					.n_rows = n, .row_bytes = 128, .rows_off = 4096,
					.batch_id = 42 };
	struct locus_row_ref *refs = (struct locus_row_ref *)(out + sizeof(rq));

	memcpy(out, &rq, sizeof(rq));
	for (uint32_t j = 0; j < n; j++)
		refs[j] = (struct locus_row_ref){ .token = j, .kmask = 1u << (j % 2) };
	return locus_combine_req_len(n);
}

static void requests(void)
{
	static const struct { uint8_t map, src; uint32_t n; uint16_t k; uint32_t E; } d[] = {
		{ 0, 1, 4, 2, 8 }, { 1, 2, 8, 6, 8 }, { 2, 3, 1, 1, 16 }, { 3, 5, 16, 4, 64 },
	};
	struct bs s;
	char name[32];

	for (size_t i = 0; i < LOCUS_ARRAY_SIZE(d); i++) {
		s.n = 0;
		b8(&s, d[i].map);
		b8(&s, d[i].src);
		b8(&s, 4); /* a 64 KiB stage */
		s.n += dispatch_req(s.b + s.n, d[i].n, d[i].k, d[i].E, 0, 1024);
		snprintf(name, sizeof(name), "dispatch-map%u-%ux%u", d[i].map, d[i].n, d[i].k);
		put("dispatch_req", name, s.b, s.n);
	}
	for (uint32_t n = 1; n <= 16; n *= 4) {
		s.n = 0;
		b8(&s, 3); /* 4 ranks */
		b8(&s, 2);
		s.n += combine_req(s.b + s.n, n, n % 4);
		snprintf(name, sizeof(name), "combine-%u", n);
		put("combine_req", name, s.b, s.n);
	}
}

/* A rows message of n rows (DISPATCH with top_k, else COMBINE), copied or in place. */
static size_t rows_msg(uint8_t *out, uint32_t n, uint16_t k, int in_place)
{
	size_t len = locus_rows_msg_len(n, k, 64, in_place);
	struct locus_rows_hdr *h = locus_rows_hdr_of(out);

	memset(out, 0, len);
	locus_msg_hdr_init((struct locus_msg_hdr *)out, k ? LOCUS_MSG_DISPATCH : LOCUS_MSG_COMBINE,
			   (uint32_t)(len - sizeof(struct locus_msg_hdr)), 7, 0, 1, 0);
	*h = (struct locus_rows_hdr){ .magic = LOCUS_ROWS_MAGIC, .layer = 0, .top_k = k,
				      .n_rows = n, .row_bytes = 64,
				      .flags = in_place ? LOCUS_ROWS_IN_PLACE : 0, .chunk = 0,
				      .n_chunks = 1,
				      .rows_off = in_place ? 4096 : locus_rows_msg_rows_off(n, k),
				      .batch_id = 7, .placement_gen = k ? 5 : 0 };
	for (uint32_t j = 0; j < n; j++) {
		locus_rows_refs(out)[j] = (struct locus_row_ref){ .token = j, .kmask = 1 };
		for (uint32_t i = 0; i < k; i++)
			locus_rows_experts(out, n)[j * k + i] = (uint16_t)i;
	}
	return len;
}

static void messages(void)
{
	struct bs s;

	for (int v = 0; v < 4; v++) {
		static const char *names[] = { "dispatch-copied", "dispatch-in-place",
					       "combine-copied", "combine-in-place" };

		s.n = 0;
		b8(&s, 3); /* 4 ranks */
		b8(&s, 3); /* a 32 KiB stage */
		s.n += rows_msg(s.b + s.n, 3, v < 2 ? 2 : 0, v & 1);
		put("rows_msg", names[v], s.b, s.n);
	}
	/* a rank's refusal of rows planned under a placement it does not hold */
	s.n = 0;
	b8(&s, 3);
	b8(&s, 0);
	{
		size_t len = locus_rows_msg_len(0, 0, 0, 0);
		struct locus_rows_hdr *h = locus_rows_hdr_of(s.b + s.n);

		memset(s.b + s.n, 0, len);
		locus_msg_hdr_init((struct locus_msg_hdr *)(s.b + s.n), LOCUS_MSG_COMBINE,
				   (uint32_t)(len - sizeof(struct locus_msg_hdr)), 7, 1, 0, 0);
		*h = (struct locus_rows_hdr){ .magic = LOCUS_ROWS_MAGIC, .flags = LOCUS_ROWS_REFUSED,
					      .n_chunks = 1, .rows_off = locus_rows_msg_rows_off(0, 0),
					      .batch_id = 7, .placement_gen = 6 };
		s.n += len;
	}
	put("rows_msg", "combine-refused", s.b, s.n);
}

/* ---- text seeds ------------------------------------------------------------------------ */

static void copy_file(const char *target, const char *name, const char *rel)
{
	char path[512];
	size_t len;
	char *buf;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	if (locus_file_read(path, 1 << 20, &buf, &len, NULL) < 0) {
		fprintf(stderr, "gen_seeds: cannot read %s\n", path);
		exit(1);
	}
	put(target, name, buf, len);
	free(buf);
}

static void put_text(const char *target, const char *name, const char *text)
{
	put(target, name, text, strlen(text));
}

static void configs(void)
{
	copy_file("config", "default.conf", "deploy/default.conf");
	copy_file("config", "two-node.conf", "deploy/two-node.conf");
	put_text("config", "three-nodes.conf",
		 "[locusd]\ninstance = n2\nnode = 2\nrdma_device = mlx5_0\n"
		 "secret_file = /etc/locus/s\nring_size = 64\ninbox_slots = 16\n"
		 "inbox_slot_size = 4096\nstage_size = 262144\nmoe_layers = 4\n"
		 "tau = 0.25\nwatchdog = no\nintra_node = verbs\n[cluster]\nid = 3\n"
		 "gpus_per_node = 2\nnode.0 = 10.0.0.1:7471\nnode.1 = 10.0.0.2:7471\n"
		 "node.2 = 10.0.0.3:7000 # this one\n");
}

/* Write t with the trace writer and add the file as a seed. */
static void put_trace(const char *name, const struct locus_trace *t)
{
	char tmp[256];
	size_t len;
	char *buf;

	snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", out_dir, name);
	if (locus_trace_write(t, tmp, NULL) < 0 || locus_file_read(tmp, 1 << 20, &buf, &len, NULL))
		exit(1);
	remove(tmp);
	put("trace", name, buf, len);
	free(buf);
}

static void traces(void)
{
	struct locus_trace *cal = NULL, *t = NULL;
	struct locus_trace_req r[2];
	const char *dom[2];
	char path[512];

	/* the calibration sample's first two requests, cut to 3 prompt and 2 decode tokens */
	snprintf(path, sizeof(path), "%s/tests/data/calib_sample.jsonl", root);
	if (locus_trace_load(path, NULL, &cal, NULL) < 0 || cal->n_requests < 2)
		exit(1);
	for (int i = 0; i < 2; i++) {
		r[i] = cal->reqs[i];
		r[i].prompt_len = LOCUS_MIN(r[i].prompt_len, 3u);
		r[i].gen_len = LOCUS_MIN(r[i].gen_len, 2u);
		if (!r[i].gen_len)
			r[i].gen = NULL;
		dom[i] = cal->domains[r[i].domain];
	}
	if (locus_trace_from_arrays(cal->n_layers, cal->k, cal->n_experts, 2, r, dom, &t, NULL))
		exit(1);
	put_trace("calib-2", t);
	locus_trace_free(t);
	locus_trace_free(cal);
	put_text("trace", "small",
		 "{\"locus_trace\":1,\"n_layers\":2,\"k\":2,\"n_experts\":8}\n"
		 "{\"id\":\"a\",\"domain\":\"law\",\"prompt_routed_experts\":[[[0,1],[2,3]],"
		 "[[4,5],[6,7]]],\"routed_experts\":null}\n\n"
		 "{\"id\":7,\"prompt_routed_experts\":[[[1,0],[3,2]]],\"routed_experts\":[],"
		 "\"extra\":{\"k\":[1,2.5e3,true,\"\\u00e9\\ud83d\\ude00\"]}}\n");
	put_text("trace", "no-header",
		 "{\"prompt_routed_experts\":[[[5]]],\"domain\":\"x\"}\r\n"
		 "{\"prompt_routed_experts\":[[[9]]],\"routed_experts\":[[[1]]]}\n");
}

static void json(void)
{
	put_text("json", "object", "{\"a\":[1,-2.5e-3,true,false,null],\"b\":{\"c\":\"d\\n\"}}");
	put_text("json", "string", "\"caf\u00e9 \xe2\x82\xac \\ud83d\\ude00 \\t\\\"\"");
	put_text("json", "number", " -0.125E+2 ");
	put_text("json", "nested", "[[[[[[[[]]]]]]],{}]");
}

static void esft(void)
{
	struct bs s = { .n = 0 };
	static const char l1[] = "0\t1\t2\t3\t\t0.5\t0.5\t0.5\t0.5\n4\t5\t\t0.1\t0.9\n";
	static const char l2[] = "7\t6\t5\t4\t\t0.5\t0.5\t0.5\t0.5\r\n3\t2\t\t0.1\t0.9\n";

	b8(&s, 1); /* L = 2 */
	b8(&s, 1); /* k = 2 */
	b8(&s, 7); /* E = 8 */
	b16(&s, sizeof(l1) - 1);
	bmem(&s, l1, sizeof(l1) - 1);
	bmem(&s, l2, sizeof(l2) - 1);
	put("esft", "2layers-k2", s.b, s.n);
	s.n = 0;
	b8(&s, 0);
	b8(&s, 0);
	b8(&s, 63);
	bmem(&s, "17\t\t1.0\n63\t2\t\t0.5\t0.5\n", 23);
	put("esft", "1layer-k1", s.b, s.n);
}

static void counters(void)
{
	struct locus_ctr_params cp = { .max_entries = 6, .n_blocks = 2, .block_size = 2048 };
	const struct locus_ctr_desc d[] = {
		{ .name = "route_requests", .help = "signatures submitted",
		  .kind = LOCUS_CTR_COUNTER },
		{ .name = "decoder_load", .help = "last reported load", .kind = LOCUS_CTR_GAUGE,
		  .ndims = 1, .dim = { 4 }, .label = { "decoder" } },
		{ .name = "route_ns", .help = "routing time, ns", .kind = LOCUS_CTR_HISTOGRAM },
		{ .name = "expert_tokens", .help = "tokens per expert", .kind = LOCUS_CTR_COUNTER,
		  .ndims = 2, .dim = { 2, 3 }, .label = { "layer", "expert" } },
	};
	size_t len = locus_counters_region_size(&cp);
	struct locus_counters *c;
	struct bs s = { .n = 0 };
	uint64_t off[4];
	void *region = calloc(1, len);

	if (!region || locus_counters_init(region, len, &cp, NULL) ||
	    locus_counters_open(region, len, 0, &c, NULL))
		exit(1);
	for (int i = 0; i < 4; i++)
		if (locus_counters_register(c, &d[i], &off[i], NULL) < 0)
			exit(1);
	for (uint32_t b = 0; b < 2; b++) {
		void *blk = locus_counters_block(c, b);

		locus_counter_add(blk, off[0], 10 + b);
		locus_gauge_set_elem(blk, off[1], 2, -3);
		locus_hist_record(blk, off[2], 1000 * (b + 1));
		locus_counter_add_elem(blk, off[3], 4, 5);
	}
	locus_counters_close(c);
	b16(&s, (uint32_t)len);
	bmem(&s, region, len);
	put("counters", "four-entries", s.b, s.n);
	free(region);
}

/* ---- engine seeds: operations (fuzz_engine_ops.c field order) ---------------------------- */

static uint8_t op(const enum fe_op *t, size_t n, enum fe_op o)
{
	for (size_t i = 0; i < n; i++)
		if (t[i] == o)
			return (uint8_t)i;
	exit(1);
}

#define OPC(o) op(fe_ops_client, LOCUS_ARRAY_SIZE(fe_ops_client), o)
#define OPP(o) op(fe_ops_peer, LOCUS_ARRAY_SIZE(fe_ops_peer), o)
#define OPL(o) op(fe_ops_load, LOCUS_ARRAY_SIZE(fe_ops_load), o)

static void e_dispatch(struct bs *s, uint8_t opc, int node, int slot, uint8_t top_k,
		       uint8_t n_tokens, uint8_t f)
{
	b8(s, opc);
	b8(s, (uint32_t)(node | slot << 1));
	b8(s, 1);              /* layer */
	b8(s, top_k - 1);
	b8(s, n_tokens - 1);
	b16(s, 255);           /* 256-byte rows */
	b16(s, 64);            /* rows at 4096 */
	b32(s, 0x1234);        /* batch */
	b16(s, 0);             /* request at 0 */
	b8(s, f);
	b8(s, 1);              /* expert pattern: 1, 3, 5, 7: ranks of both nodes */
}

static void e_combine(struct bs *s, uint8_t opc, int node, int slot, uint8_t dst, uint8_t n,
		      uint8_t f)
{
	b8(s, opc);
	b8(s, (uint32_t)(node | slot << 1));
	b8(s, 1);
	b8(s, dst);
	b8(s, n - 1);
	b16(s, 127);
	b16(s, 128);           /* rows at 8192 */
	b32(s, 0x1234);
	b16(s, 512);           /* request at 4096 */
	b8(s, f);
}

static void e_route(struct bs *s, uint8_t opc, int node, uint8_t allowed, int e)
{
	b8(s, opc);
	b8(s, (uint32_t)node);  /* slot 0: the prefill client */
	b16(s, 1024);
	b8(s, allowed);
	for (int i = 0; i < FE_L * FE_E; i++)
		b8(s, i % FE_E == e ? 3 : 0);
}

static void e_rounds(struct bs *s, uint8_t opc, int n)
{
	b8(s, opc);
	b8(s, (uint32_t)(n - 1));
}

static void engine_client(void)
{
	struct bs s = { .n = 0 };

	/* rank 0 dispatches (its own GPU, its node, the other node), ranks answer */
	e_dispatch(&s, OPC(FE_OP_DISPATCH), 0, 2, 2, 8, 0);
	e_rounds(&s, OPC(FE_OP_ROUNDS), 4);
	e_combine(&s, OPC(FE_OP_COMBINE), 1, 2, 0, 8, 0);
	e_combine(&s, OPC(FE_OP_COMBINE), 0, 3, 0, 4, 0);
	e_rounds(&s, OPC(FE_OP_ROUNDS), 4);
	put("engine_client", "dispatch-combine", s.b, s.n);

	s.n = 0;
	e_route(&s, OPC(FE_OP_ROUTE), 0, 0, 0);
	e_route(&s, OPC(FE_OP_ROUTE), 0, 0x2, 3);
	e_route(&s, OPC(FE_OP_ROUTE), 1, 0, 6);
	e_rounds(&s, OPC(FE_OP_ROUNDS), 3);
	put("engine_client", "routes", s.b, s.n);

	/* rows from buffer regions: mapped with an MR (gathered), MR only, mapped only */
	s.n = 0;
	for (int v = 0; v < 3; v++) {
		b8(&s, OPC(FE_OP_REGION));
		b8(&s, 0 | 2 << 1);
		b8(&s, (uint32_t)(v | (v != 2 ? 16 : 0) | (v != 1 ? 8 : 0)));
		e_dispatch(&s, OPC(FE_OP_DISPATCH), 0, 2, 3, 16, (uint8_t)(1 | v << 1));
		e_rounds(&s, OPC(FE_OP_ROUNDS), 2);
	}
	put("engine_client", "regions", s.b, s.n);

	/* a receiver that holds its deliveries, a table push under traffic, a detach */
	s.n = 0;
	b8(&s, OPC(FE_OP_HOLD));
	b8(&s, 1 | 2 << 1);
	e_dispatch(&s, OPC(FE_OP_DISPATCH), 0, 3, 4, 32, 0);
	e_dispatch(&s, OPC(FE_OP_DISPATCH), 0, 3, 4, 32, 0);
	b8(&s, OPC(FE_OP_TABLE));
	b8(&s, 0);
	b8(&s, 3);
	e_combine(&s, OPC(FE_OP_COMBINE), 1, 2, 1, 16, 0);
	b8(&s, OPC(FE_OP_ATTACH));
	b8(&s, 1 | 3 << 1);
	e_rounds(&s, OPC(FE_OP_ROUNDS), 8);
	b8(&s, OPC(FE_OP_ATTACH));
	b8(&s, 1 | 3 << 1);
	put("engine_client", "hold-push-detach", s.b, s.n);
}

struct capture {
	struct bs msgs[3];   /* a signature, a dispatch, a combine node 1 sent */
};

static void on_send(void *arg, int node, const void *buf, size_t len)
{
	struct capture *c = arg;
	const struct locus_msg_hdr *h = buf;
	int i = h->type == LOCUS_MSG_SIGNATURE ? 0 : h->type == LOCUS_MSG_DISPATCH ? 1 : 2;

	if (node == 1 && !c->msgs[i].n && len < sizeof(c->msgs[i].b))
		bmem(&c->msgs[i], buf, len);
}

static void peer_and_load(void)
{
	static const enum fe_op drive[] = { FE_OP_ROUTE, FE_OP_DISPATCH, FE_OP_COMBINE };
	static struct capture cap;
	static struct bs s;
	struct fe_env *env = fe_create();
	uint8_t row[FE_AREA];
	struct fuzz_in in;

	/* what node 1's engine writes into node 0's load area */
	memcpy(row, env->n[0].load_area, sizeof(row));
	/* node 1's clients make it send a signature and rows to node 0 */
	env->on_send = on_send;
	env->on_send_arg = &cap;
	e_route(&s, 0, 1, 0x1, 0);
	e_dispatch(&s, 1, 1, 2, 2, 8, 0);
	e_combine(&s, 2, 1, 3, 0, 4, 0);
	in = (struct fuzz_in){ s.b, s.n };
	fe_run(env, &in, drive, LOCUS_ARRAY_SIZE(drive), NULL);
	fe_destroy(env);
	for (int i = 0; i < 3; i++) {
		static const char *names[] = { "signature", "dispatch-rows", "combine-rows" };

		if (!cap.msgs[i].n) {
			fprintf(stderr, "gen_seeds: node 1 sent no %s\n", names[i]);
			exit(1);
		}
		s.n = 0;
		b8(&s, OPP(FE_OP_INJECT));
		b16(&s, (uint32_t)cap.msgs[i].n);
		b8(&s, 1);
		bmem(&s, cap.msgs[i].b, cap.msgs[i].n);
		e_rounds(&s, OPP(FE_OP_ROUNDS), 2);
		put("peer_msg", names[i], s.b, s.n);
	}
	/* real messages of node 1, one changed on the wire */
	s.n = 0;
	b8(&s, OPP(FE_OP_TAMPER));
	b16(&s, 40);
	b8(&s, 0x10);
	b8(&s, 1);
	e_dispatch(&s, OPP(FE_OP_DISPATCH), 1, 2, 2, 8, 0);
	e_route(&s, OPP(FE_OP_ROUTE), 1, 0x1, 0);
	e_rounds(&s, OPP(FE_OP_ROUNDS), 3);
	put("peer_msg", "tampered", s.b, s.n);

	/* load rows: node 1's own, then one built from fields, each before a route */
	s.n = 0;
	b8(&s, OPL(FE_OP_AREA_RAW));
	b8(&s, 0);
	b8(&s, (uint32_t)locus_load_row_size(((struct locus_load_row *)row)->n));
	bmem(&s, row, locus_load_row_size(((struct locus_load_row *)row)->n));
	e_rounds(&s, OPL(FE_OP_ROUNDS), 2);
	e_route(&s, OPL(FE_OP_ROUTE), 0, 0x2, 3);
	put("load_row", "peer-row", s.b, s.n);
	s.n = 0;
	b8(&s, OPL(FE_OP_CLOCK));
	b16(&s, 300);
	b8(&s, OPL(FE_OP_AREA_ROW));
	b8(&s, 2);
	b8(&s, 0);
	b32(&s, 77);
	b8(&s, 1);
	b16(&s, 5);
	b8(&s, 3);
	b16(&s, 0);
	e_rounds(&s, OPL(FE_OP_ROUNDS), 2);
	e_route(&s, OPL(FE_OP_ROUTE), 0, 0x8, 1);
	put("load_row", "built-row", s.b, s.n);
}

static void regions(void)
{
	struct locus_reg_req q = { .magic = LOCUS_REG_MAGIC, .version = LOCUS_REG_VERSION,
				   .op = LOCUS_REG_DMABUF, .slot = 0, .generation = 1,
				   .offset = 0, .len = 4096 };
	struct bs s = { .n = 0 };

	b8(&s, 0x80 | 1);     /* one memfd, own slot and generation */
	b8(&s, sizeof(q));
	bmem(&s, &q, sizeof(q));
	q.op = LOCUS_REG_UNREGISTER;
	q.region = 9;
	b8(&s, 0x80);         /* no fd */
	b8(&s, sizeof(q));
	bmem(&s, &q, sizeof(q));
	q.op = LOCUS_REG_DMABUF;
	q.offset = 4096;
	q.len = 1ull << 20;
	b8(&s, 2 | 1 << 3);   /* two fds: refused */
	b8(&s, sizeof(q));
	bmem(&s, &q, sizeof(q));
	put("regions", "register-unregister", s.b, s.n);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: gen_seeds DIR [REPO_ROOT]\n");
		return 2;
	}
	out_dir = argv[1];
	root = argc > 2 ? argv[2] : ".";
	if (mkdir(out_dir, 0755) < 0 && errno != EEXIST) {
		perror(out_dir);
		return 1;
	}
	tables();
	grace_sets();
	signatures();
	blocks_reqs();
	requests();
	messages();
	configs();
	traces();
	json();
	esft();
	counters();
	engine_client();
	peer_and_load();
	regions();
	table_region();
	segment();
	verbs_proto();
	node_sockets();
	return 0;
}
