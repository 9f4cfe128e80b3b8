// SPDX-License-Identifier: MIT
/*
 * Signatures as a prefill client submits them and a peer node sends them:
 * locus_eldr_sig_check against a valid table's L x E, then
 * locus_eldr_route with a router built from that table (the engine's
 * route path). The first input byte picks one of a few tables, and its
 * top bit the router's arithmetic (16-bit, or the 8-bit paths'); the rest
 * is the signature. Contract: route refuses exactly what the check refuses,
 * with its code; an accepted signature is routed within the promises of
 * locus_eldr_router.h (fuzz_eldr_common.c); a batch of it decides as one by one.
 */
#include "fuzz.h"
#include "fuzz_eldr_common.h"
#include "fuzz_tables.h"

struct shape {
	uint16_t L, E, K, C; /* C > 0: a version 2 table with a map, the spill and the spread */
	uint32_t id0;
};

static const struct shape shapes[] = {
	{ 2, 8, 4, 0, 0 }, { 3, 16, 8, 0, 60 }, { 1, 4, 2, 0, 1000 }, { 4, 64, 3, 0, 5 },
	{ 2, 8, 3, 7, 2 },
};

#define N_SHAPES LOCUS_ARRAY_SIZE(shapes)

static struct {
	void *payload;
	size_t len;
	struct locus_eldr_tbl_view v;
	struct locus_eldr_router *r[2][2]; /* [arithmetic: 16-bit, 8-bit][pair] */
	void *mem[2][2];
	uint8_t up[8];
} T[N_SHAPES];

static void setup(void)
{
	for (size_t i = 0; i < N_SHAPES; i++) {
		const struct shape *s = &shapes[i];

		T[i].payload = s->C ? ft_eldr_payload_mapped(s->L, s->E, s->K, s->C, s->id0, 0.1f,
							     0.3f, 1, LOCUS_ELDR_TBL_F_OVERFLOW_SPREAD,
							     &T[i].len) :
			       ft_eldr_payload(s->L, s->E, s->K, s->id0, 0.1f, &T[i].len);
		if (!T[i].payload || locus_eldr_tbl_validate(T[i].payload, T[i].len, &T[i].v, NULL))
			abort();
		for (int a = 0; a < 2; a++)
			for (int j = 0; j < 2; j++)
				T[i].r[a][j] = fe_router(T[i].payload, T[i].len,
							 a ? LOCUS_ELDR_PATH_AUTO_I8 :
							     LOCUS_ELDR_PATH_AUTO,
							 &T[i].mem[a][j]);
		for (uint32_t k = 0; k < s->K; k++)
			T[i].up[k] = 1;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int ready;
	struct locus_eldr_decision d, db[3];
	const void *sp[3];
	size_t lens[3];
	int rc, rc0, rcb[3];
	uint8_t *sig, valid[4096];
	float scores[8];
	struct locus_eldr_router **r;
	size_t t, n;

	if (!ready) {
		setup();
		ready = 1;
	}
	if (size < 1)
		return 0;
	t = (data[0] & 0x7f) % N_SHAPES;
	r = T[t].r[data[0] >> 7];
	n = size - 1;
	sig = fuzz_dup(data + 1, n);
	rc = locus_eldr_sig_check(sig, n, shapes[t].L, shapes[t].E, NULL);
	FUZZ_CHECK(rc <= 0, "check returned %d", rc);
	/* routers keep state: both see the same sequence of picks */
	for (uint32_t k = 0; k < shapes[t].K; k++) {
		locus_eldr_router_set_load(r[0], k, k);
		locus_eldr_router_set_load(r[1], k, k);
	}
	if (rc == 0) {
		const struct locus_eldr_sig_hdr *h = (const void *)sig;

		FUZZ_CHECK(n == locus_eldr_sig_len(shapes[t].L, shapes[t].E) &&
			   h->magic == LOCUS_ELDR_SIG_MAGIC &&
			   h->version == LOCUS_ELDR_SIG_VERSION && !h->flags &&
			   h->n_layers == shapes[t].L && h->n_experts == shapes[t].E,
			   "an accepted signature breaks its header's rules");
		for (size_t i = 0; i < sizeof(h->reserved); i++)
			FUZZ_CHECK(!h->reserved[i], "accepted with reserved bytes set");
		FUZZ_CHECK(locus_eldr_score(r[0], sig, n, scores) == 0, "score refused");
	}
	rc0 = locus_eldr_route(r[0], sig, n, &d);
	if (rc < 0)
		FUZZ_CHECK(rc0 == rc, "check refused %d, route returned %d", rc, rc0);
	else
		fe_check_decision(&T[t].v, sig, rc0, &d, scores, T[t].up);
	locus_eldr_route(r[1], sig, n, &d); /* both routers, same state */
	sp[0] = sig, lens[0] = n;
	sp[1] = valid, lens[1] = fe_sig(valid, shapes[t].L, shapes[t].E, data[0], 0);
	sp[2] = sig, lens[2] = n;
	locus_eldr_route_batch(r[1], sp, lens, 3, db, rcb);
	for (int i = 0; i < 3; i++) {
		int r1 = locus_eldr_route(r[0], sp[i], lens[i], &d);

		FUZZ_CHECK(r1 == rcb[i] && (r1 || d.slot == db[i].slot),
			   "signature %d: alone slot %u (%d), in a batch slot %u (%d)", i, d.slot,
			   r1, db[i].slot, rcb[i]);
	}
	free(sig);
	return 0;
}
