// SPDX-License-Identifier: MIT
/*
 * Seeds of the system's boundaries (gen_seeds.c writes the rest): the table
 * channels under writes, a segment file, requests on a node's registration
 * and control sockets, and the verbs handshake's messages.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_tables.h"
#include "gen_seeds.h"
#include "locus_client.h"
#include "locus_client_priv.h"
#include "locus_counters.h"
#include "locus_counters_priv.h"
#include "locus_eldr.h"
#include "locus_eldr_priv.h"
#include "locus_file.h"
#include "locus_push.h"
#include "locus_shm.h"
#include "locus_shm_priv.h"
#include "locus_table.h"
#include "locus_verbs.h"

/* The writes that turn region a into b, as fuzz_table_region reads them. */
static void diff_writes(struct bs *s, const uint8_t *a, const uint8_t *b, size_t len)
{
	for (size_t i = 0; i < len;) {
		size_t n = 0;

		if (a[i] == b[i]) {
			i++;
			continue;
		}
		while (i + n < len && n < 255 && (a[i + n] != b[i + n] || (n && n < 8)))
			n++;
		b16(s, (uint32_t)i);
		b8(s, (uint32_t)n);
		bmem(s, b + i, n);
		i += n;
	}
}

void table_region(void)
{
	struct locus_table_params tp = { .n_channels = 1, .n_readers = 2,
					 .channel = { { .n_slots = 3, .slot_size = 1024 } } };
	size_t len = locus_table_region_size(&tp), blen;
	uint8_t *a = aligned_alloc(64, LOCUS_ALIGN_UP(len, 64));
	uint8_t *b = aligned_alloc(64, LOCUS_ALIGN_UP(len, 64));
	void *blob = ft_eldr_blob(2, 8, 2, 5, &blen);
	struct locus_table_region *t;
	struct locus_table_reader r;
	struct bs s = { .n = 0 };

	/* what the fuzz target builds: a region, its reader, one table adopted */
	if (!a || !b || !blob || locus_table_region_init(a, len, &tp, NULL) ||
	    locus_table_region_attach(a, len, &t, NULL) ||
	    locus_table_reader_register(t, 0, 0, locus_eldr_table_validate_cb, NULL, &r, NULL))
		exit(1);
	free(blob);
	blob = ft_eldr_blob(2, 8, 4, 0, &blen);
	if (locus_table_push(t, 0, blob, blen, 0, NULL) <= 0 || locus_table_reader_poll(&r) != 1)
		exit(1);
	memcpy(b, a, len);
	/* a second, different table published as a writer would */
	free(blob);
	blob = ft_eldr_blob(2, 8, 2, 5, &blen);
	{
		struct locus_table_region *tb;

		if (locus_table_region_attach(b, len, &tb, NULL) ||
		    locus_table_push(tb, 0, blob, blen, 0, NULL) <= 0)
			exit(1);
		locus_table_region_detach(tb);
	}
	diff_writes(&s, a, b, len);
	put("table_region", "second-table", s.b, s.n);
	put("table_region", "nothing", "", 0);
	locus_table_reader_unregister(&r);
	locus_table_region_detach(t);
	free(a);
	free(b);
	free(blob);
}

void segment(void)
{
	struct locus_ctr_params cp = { .max_entries = 2, .n_blocks = 1, .block_size = 64 };
	struct locus_shm_params sp = { .instance = "seed" };
	char dir[] = "/tmp/locus-seed-XXXXXX", path[256];
	struct locus_shm *shm;
	struct locus_counters *c;
	struct locus_ctr_desc d = { .name = "x", .kind = LOCUS_CTR_COUNTER };
	uint64_t off;
	size_t size, len;
	char *buf;
	void *r;

	if (!mkdtemp(dir))
		exit(1);
	setenv(LOCUS_SHM_DIR_ENV, dir, 1);
	/* the counters are all a segment holds */
	sp.region_size[LOCUS_REGION_COUNTERS] = locus_counters_region_size(&cp);
	if (locus_shm_create(&sp, &shm, NULL))
		exit(1);
	r = locus_shm_region(shm, LOCUS_REGION_COUNTERS, &size);
	if (locus_counters_init(r, size, &cp, NULL) || locus_counters_open(r, size, 0, &c, NULL) ||
	    locus_counters_register(c, &d, &off, NULL) < 0)
		exit(1);
	locus_counters_close(c);
	locus_shm_set_state(shm, LOCUS_SHM_RUNNING);
	locus_shm_detach(shm);
	if (locus_shm_path("seed", path, sizeof(path)) ||
	    locus_file_read(path, 1 << 20, &buf, &len, NULL))
		exit(1);
	put("segment", "counters", buf, len);
	free(buf);
	locus_shm_remove("seed");
	rmdir(dir);
	unsetenv(LOCUS_SHM_DIR_ENV);
}

/* One request of fuzz_node_sockets: flags, the request's bytes, the table byte to change. */
static void ns_req(struct bs *s, uint8_t f, const void *req, uint8_t len, uint16_t at, uint8_t val)
{
	b8(s, f);
	b8(s, len);
	bmem(s, req, len);
	b16(s, at);
	b8(s, val);
}

void node_sockets(void)
{
	struct locus_push_req push = { .magic = LOCUS_PUSH_MAGIC, .version = LOCUS_PUSH_VERSION,
				       .op = LOCUS_PUSH_TABLE, .channel = 0 };
	struct locus_push_req status = { .magic = LOCUS_PUSH_MAGIC, .version = LOCUS_PUSH_VERSION,
					 .op = LOCUS_PUSH_STATUS };
	struct locus_reg_req att = { .magic = LOCUS_REG_MAGIC, .version = LOCUS_REG_VERSION,
				     .op = LOCUS_REG_ATTACH, .roles = LOCUS_ROLE_PREFILL };
	struct locus_reg_req dec = att;
	struct bs s = { .n = 0 };

	/* a sealed table pushed (f: control, one fd, the table, unchanged), then the status */
	ns_req(&s, 0x01 | 0x02 | 0x40, &push, sizeof(push), 0xffff, 0);
	ns_req(&s, 0x01, &status, sizeof(status), 0xffff, 0);
	put("node_sockets", "push-status", s.b, s.n);
	s.n = 0;
	/* the same table with one byte changed: published, refused by the reader */
	ns_req(&s, 0x01 | 0x02 | 0x40, &push, sizeof(push), 100, 0x5a);
	put("node_sockets", "push-corrupt", s.b, s.n);
	s.n = 0;
	/* an unsealed one: refused before publishing */
	ns_req(&s, 0x01 | 0x02 | 0x40, &push, sizeof(push), 0xffff, 1);
	put("node_sockets", "push-unsealed", s.b, s.n);
	s.n = 0;
	/* attachments: a prefiller granted and confirmed, a decoder granted and left */
	dec.roles = LOCUS_ROLE_DECODE;
	dec.decoder_id = 1;
	ns_req(&s, 0x80, &att, sizeof(att), 0, 0);
	ns_req(&s, 0x00, &dec, sizeof(dec), 0, 0);
	put("node_sockets", "attach", s.b, s.n);
}

void verbs_proto(void)
{
	struct locus_verbs_pdata p = { .version = LOCUS_VERBS_PROTO_VERSION, .cluster_id = 7,
				       .from = 0, .to = 1, .nonce = { 9, 8, 7 } };
	struct locus_verbs_hello h = { .version = LOCUS_VERBS_PROTO_VERSION, .slot_shift = 14,
				       .from = 1, .slot_count = 256, .rkey = 0x1234,
				       .inbox_addr = 0x7f0000000000ull };
	struct bs s;

	for (unsigned kind = LOCUS_VERBS_PD_REQ; kind <= LOCUS_VERBS_PD_REP; kind++) {
		s.n = 0;
		p.kind = (uint8_t)kind;
		b8(&s, kind - 1);
		s.n += locus_verbs_pdata_encode(&p, s.b + s.n);
		put("verbs_proto", kind == LOCUS_VERBS_PD_REQ ? "req" : "rep", s.b, s.n);
	}
	for (unsigned kind = LOCUS_VERBS_HELLO_A; kind <= LOCUS_VERBS_HELLO_P; kind++) {
		s.n = 0;
		h.kind = (uint8_t)kind;
		b8(&s, kind - 1);
		locus_verbs_hello_encode(&h, s.b + s.n);
		s.n += LOCUS_VERBS_HELLO_LEN;
		put("verbs_proto", kind == LOCUS_VERBS_HELLO_A ? "hello-a" : "hello-p", s.b, s.n);
	}
	/* 16 slots of 64 bytes: a message of 2 slots at head 20, one of 4 that skips the tail */
	for (int v = 0; v < 2; v++) {
		s.n = 0;
		b8(&s, 4);
		b16(&s, 14);
		b8(&s, 0);
		b32(&s, v ? 30 : 20);
		b32(&s, 0);
		b32(&s, v ? (3u << 16) : (1u << 16 | 4));
		b32(&s, v ? 200 : 100);
		put("verbs_proto", v ? "ring-skip-tail" : "ring", s.b, s.n);
	}
}
