// SPDX-License-Identifier: MIT
/* Recovery placements after a fault, scored held out (grace_adapt_score.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grace_adapt_score.h"
#include "locus_grace_plan.h"
#include "locus_tblfile.h"
#include "locus_tblfile_priv.h"

#define HDR sizeof(struct locus_tbl_hdr)
#define NONE 0xffffu

const char *const ga_method_name[GA_N_METHODS] = {
	"adapt, skew auto", "adapt, skew 1.25", "mask only", "refit", "EPLB on survivors",
};
static const double skew_of[2] = { 0, 1.25 }; /* 0: the balance as placed */

const char *const ga_fault_name[GA_N_FAULTS] = {
	"rank lost", "node lost", "rank back", "node back",
};

/* Who holds what: bit r of has[l][e] set when live rank r holds a copy; pri its primary. */
struct hold {
	uint32_t L, E;
	uint64_t *has;
	uint16_t *pri;   /* NONE: lost or no primary */
};

static void *xcalloc(size_t n, size_t sz)
{
	void *p = calloc(n ? n : 1, sz);

	if (!p)
		gf_die("grace_adapt", NULL, -ENOMEM);
	return p;
}

static int is_lost(uint64_t lost, uint32_t r)
{
	return lost >> r & 1;
}

static void hold_alloc(struct hold *h, uint32_t L, uint32_t E)
{
	h->L = L;
	h->E = E;
	h->has = xcalloc((size_t)L * E, sizeof(*h->has));
	h->pri = xcalloc((size_t)L * E, sizeof(*h->pri));
}

static void hold_free(struct hold *h)
{
	free(h->has);
	free(h->pri);
}

/* The payload of a sealed GRACE blob as a view (the blob is ours: never written). */
static void view_of(const void *blob, size_t len, struct locus_grace_view *v)
{
	struct locus_error err = { 0 };
	const void *pl;
	size_t plen;
	int rc = locus_grace_blob_check(blob, len, &pl, &plen, &err);

	if (!rc)
		rc = locus_grace_view_init(v, (void *)(uintptr_t)pl, plen, &err);
	if (rc)
		gf_die("GRACE table", &err, rc);
}

/* Holders of a GRACE table, ranks in lost holding nothing. */
static void hold_grace(const void *blob, size_t len, uint64_t lost, struct hold *h)
{
	struct locus_grace_view v;
	uint32_t R;

	view_of(blob, len, &v);
	R = v.dims->max_replicas;
	hold_alloc(h, v.dims->n_layers, v.dims->n_experts);
	for (size_t i = 0; i < (size_t)h->L * h->E; i++) {
		uint32_t p = v.primary[i];

		h->pri[i] = is_lost(lost, p) ? NONE : (uint16_t)p;
		if (!is_lost(lost, p))
			h->has[i] |= 1ull << p;
		for (uint32_t k = 0; k < R && v.replica[i * R + k] != LOCUS_GRACE_NO_RANK; k++)
			if (!is_lost(lost, v.replica[i * R + k]))
				h->has[i] |= 1ull << v.replica[i * R + k];
	}
}

/* Holders of an EPLB placement whose GPU g is rank rank_of[g] (NULL: g), lost ones cleared. */
static void hold_eplb(const struct locus_gracefit_eplb *p, const uint16_t *rank_of,
		      uint64_t lost, struct hold *h)
{
	uint32_t S = p->n_phys / p->n_gpus, E = p->n_experts;

	hold_alloc(h, p->n_layers, E);
	for (uint32_t l = 0; l < p->n_layers; l++) {
		for (uint32_t s = 0; s < p->n_phys; s++) {
			uint32_t e = (uint32_t)p->phy2log[(size_t)l * p->n_phys + s];
			uint32_t r = rank_of ? rank_of[s / S] : s / S;

			if (!is_lost(lost, r))
				h->has[(size_t)l * E + e] |= 1ull << r;
		}
		for (uint32_t e = 0; e < E; e++) {
			size_t le = (size_t)l * E + e;
			int32_t s = p->log2phy[le * p->max_copies];
			uint32_t r = rank_of ? rank_of[(uint32_t)s / S] : (uint32_t)s / S;

			h->pri[le] = is_lost(lost, r) ? NONE : (uint16_t)r;
		}
	}
}

static void count_moves(const struct hold *a, const struct hold *b, uint32_t gpn,
			struct ga_moves *m)
{
	memset(m, 0, sizeof(*m));
	for (size_t i = 0; i < (size_t)a->L * a->E; i++) {
		uint64_t gain = b->has[i] & ~a->has[i];

		for (; gain; gain &= gain - 1) {
			uint32_t r = (uint32_t)__builtin_ctzll(gain), n0 = r / gpn * gpn;
			uint64_t node = (gpn >= 64 ? ~0ull : (1ull << gpn) - 1) << n0;

			m->gained++;
			if (!a->has[i])
				m->storage++;
			else if (a->has[i] & node)
				m->same_node++;
			else
				m->other_node++;
			if (a->pri[i] == NONE)
				m->primary_storage++;
			else
				m->primary_cross += a->pri[i] / gpn != r / gpn;
		}
	}
}

/*
 * A flat fit for the live ranks (1 x N', its rank i the i-th live rank
 * rank_of[i]) as a table of t's shape: the live ranks hold what the fit
 * put on them, the lost ones nothing.
 */
static void *remap(const void *fit, size_t fit_len, const struct gf_topo *t,
		   const uint16_t *rank_of, size_t *out_len)
{
	struct locus_gracefit_topo tp = { .n_nodes = t->nodes, .gpus_per_node = t->gpus };
	struct locus_grace_view a, b;
	struct locus_grace_dims d;
	struct locus_error err = { 0 };
	uint32_t L, E, Ra, Rb, Na, N = t->nodes * t->gpus;
	size_t plen;
	uint8_t *blob;
	int rc;

	view_of(fit, fit_len, &a);
	L = a.dims->n_layers;
	E = a.dims->n_experts;
	Ra = a.dims->max_replicas;
	Na = locus_grace_n_ranks(a.dims);
	rc = locus_gracefit_dims(&tp, L, E, &d, &err);
	if (rc)
		gf_die("dims", &err, rc);
	d.capacity = a.dims->capacity;
	d.replica_budget = a.dims->replica_budget;
	Rb = d.max_replicas;
	plen = locus_grace_payload_size(&d);
	blob = xcalloc(1, HDR + plen);
	memcpy(blob + HDR, &d, sizeof(d));
	rc = locus_grace_view_init(&b, blob + HDR, plen, &err);
	if (rc)
		gf_die("remap", &err, rc);
	for (size_t i = 0; i < (size_t)L * E; i++) {
		b.primary[i] = rank_of[a.primary[i]];
		b.expert_load[i] = a.expert_load[i];
		for (uint32_t k = 0; k < Rb; k++)
			b.replica[i * Rb + k] = k < Ra && a.replica[i * Ra + k] != LOCUS_GRACE_NO_RANK ?
							rank_of[a.replica[i * Ra + k]] :
							LOCUS_GRACE_NO_RANK;
	}
	for (uint32_t l = 0; l < L; l++)
		for (uint32_t r = 0; r < Na; r++)
			b.pred_load[(size_t)l * N + rank_of[r]] = a.pred_load[(size_t)l * Na + r];
	rc = locus_grace_validate(&b, &err);
	if (!rc)
		rc = locus_tbl_seal(blob, HDR + plen, LOCUS_TBL_GRACE, LOCUS_GRACE_KIND_VERSION, plen);
	if (rc)
		gf_die("remap", &err, rc);
	*out_len = HDR + plen;
	return blob;
}

static void fit_grace(const struct gf_topo *t, const struct gf_domain *d, void **blob,
		      size_t *len)
{
	struct locus_gracefit_topo tp = gf_grace_topo(t, d->prof.n_experts);
	struct locus_gracefit_opts o = { .r = -1, .seed = 1 };
	struct locus_error err = { 0 };
	int rc = locus_gracefit_fit(&d->prof, &tp, &o, blob, len, NULL, &err);

	if (rc)
		gf_die("fit", &err, rc);
}

static void fit_eplb(const struct gf_domain *d, uint32_t P, uint32_t nodes, uint32_t gpus,
		     struct locus_gracefit_eplb *out)
{
	struct locus_error err = { 0 };
	int rc = locus_gracefit_eplb_rebalance(d->prof.W, d->prof.n_layers, d->prof.n_experts, P, 1,
					       nodes, gpus, out, &err);

	if (rc)
		gf_die("EPLB", &err, rc);
}

void ga_fits_init(struct ga_fits *f, const struct gf_topo *t, const struct gf_domain *d)
{
	uint32_t E = d->prof.n_experts, N = t->nodes * t->gpus;
	uint32_t S = gf_eplb_slots(t, E) / N;

	if (N > 64)
		gf_die("topology: more than 64 ranks", NULL, -LOCUS_ERANGE);
	memset(f, 0, sizeof(*f));
	f->t = *t;
	f->d = d;
	fit_grace(t, d, &f->blob, &f->len);
	fit_eplb(d, gf_eplb_slots(t, E), t->nodes, N, &f->eplb);
	for (int x = 0; x < 2; x++) {
		uint32_t live = N - (x ? t->gpus : 1);
		struct gf_topo flat = { 1, live };

		if (x && t->nodes < 2)
			break;
		fit_grace(&flat, d, &f->refit[x], &f->refit_len[x]);
		fit_eplb(d, live * LOCUS_MAX(S, (E + live - 1) / live), 1, live, &f->eplb_surv[x]);
	}
}

void ga_fits_free(struct ga_fits *f)
{
	free(f->blob);
	locus_gracefit_eplb_free(&f->eplb);
	for (int x = 0; x < 2; x++) {
		free(f->refit[x]);
		if (f->refit[x])
			locus_gracefit_eplb_free(&f->eplb_surv[x]);
	}
	memset(f, 0, sizeof(*f));
}

uint32_t ga_fault_cases(const struct gf_topo *t, int fault)
{
	if (fault == GA_RANK_LOST || fault == GA_RANK_BACK)
		return t->nodes * t->gpus;
	return t->nodes > 1 ? t->nodes : 0;
}

static void score_blob(const void *blob, size_t len, const struct gf_domain *d, uint64_t lost,
		       struct gh_score *sc)
{
	void *m = gf_map(blob, len);

	gh_score_grace_lost(m, &d->half[1], lost, sc);
	free(m);
}

/* Payload of a sealed blob we made. */
static const void *payload(const void *blob, size_t len, size_t *plen)
{
	struct locus_error err = { 0 };
	const void *pl;
	int rc = locus_grace_blob_check(blob, len, &pl, plen, &err);

	if (rc)
		gf_die("GRACE table", &err, rc);
	return pl;
}

static void *adapt(const void *blob, size_t len, uint64_t lost, double skew, size_t *out_len)
{
	struct locus_gracefit_adapt rep;
	struct locus_error err = { 0 };
	size_t plen;
	const void *pl = payload(blob, len, &plen);
	void *out;
	int rc = locus_gracefit_adapt(pl, plen, lost ? &lost : NULL, skew, UINT32_MAX, &out,
				      out_len, &rep, &err);

	if (rc)
		gf_die("adapt", &err, rc);
	return out;
}

void ga_case_run(const struct ga_fits *f, int fault, uint32_t which, struct ga_case *c)
{
	const struct gf_domain *d = f->d;
	uint32_t N = f->t.nodes * f->t.gpus, gpn = f->t.gpus, n_live = 0;
	int back = fault == GA_RANK_BACK || fault == GA_NODE_BACK;
	int sv = fault == GA_NODE_LOST || fault == GA_NODE_BACK;
	uint64_t lost = sv ? ((gpn >= 64 ? ~0ull : (1ull << gpn) - 1) << (which * gpn))
			   : 1ull << which;
	struct hold orig_live, orig, h, g;
	uint16_t live[64];
	void *b1, *b2;
	size_t l1, l2;

	memset(c, 0, sizeof(*c));
	c->lost = back ? 0 : lost;
	for (uint32_t r = 0; r < N; r++)
		if (!is_lost(lost, r))
			live[n_live++] = (uint16_t)r;
	hold_grace(f->blob, f->len, lost, &orig_live);
	hold_grace(f->blob, f->len, c->lost, &orig);

	for (int a = 0; a < 2; a++) {
		int m = a ? GA_ADAPT_FIXED : GA_ADAPT;

		b1 = adapt(f->blob, f->len, lost, skew_of[a], &l1);
		if (!back) {
			hold_grace(b1, l1, lost, &h);
			count_moves(&orig_live, &h, gpn, &c->mv[m]);
			hold_free(&h);
			score_blob(b1, l1, d, lost, &c->sc[m]);
		} else {
			b2 = adapt(b1, l1, 0, skew_of[a], &l2);
			hold_grace(b1, l1, lost, &h);
			hold_grace(b2, l2, 0, &g);
			count_moves(&h, &g, gpn, &c->mv[m]);
			hold_free(&h);
			hold_free(&g);
			score_blob(b2, l2, d, 0, &c->sc[m]);
			free(b2);
		}
		free(b1);
	}

	count_moves(&orig_live, &orig, gpn, &c->mv[GA_MASK]);
	score_blob(f->blob, f->len, d, c->lost, &c->sc[GA_MASK]);

	b1 = remap(f->refit[sv], f->refit_len[sv], &f->t, live, &l1);
	hold_grace(b1, l1, lost, &h);
	if (!back) {
		count_moves(&orig_live, &h, gpn, &c->mv[GA_REFIT]);
		score_blob(b1, l1, d, lost, &c->sc[GA_REFIT]);
	} else {
		count_moves(&h, &orig, gpn, &c->mv[GA_REFIT]);
		score_blob(f->blob, f->len, d, 0, &c->sc[GA_REFIT]);
	}
	hold_free(&h);
	free(b1);

	hold_eplb(&f->eplb, NULL, lost, &g);
	hold_eplb(&f->eplb_surv[sv], live, 0, &h);
	if (!back) {
		count_moves(&g, &h, gpn, &c->mv[GA_EPLB]);
		gh_score_eplb_on(&f->eplb_surv[sv], live, N, gpn, lost, &d->half[1],
				 &c->sc[GA_EPLB]);
	} else {
		hold_free(&g);
		hold_eplb(&f->eplb, NULL, 0, &g);
		count_moves(&h, &g, gpn, &c->mv[GA_EPLB]);
		gh_score_eplb(&f->eplb, gpn, &d->half[1], &c->sc[GA_EPLB]);
	}
	hold_free(&g);
	hold_free(&h);
	hold_free(&orig_live);
	hold_free(&orig);
	for (int m = 0; m < GA_N_METHODS; m++)
		c->slots[m] = c->sc[m].slots_max;
}

void ga_case_free(struct ga_case *c)
{
	for (int m = 0; m < GA_N_METHODS; m++)
		gh_score_free(&c->sc[m]);
}
