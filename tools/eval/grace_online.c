// SPDX-License-Identifier: MIT
/* Online rebalancing replayed in time order (grace_online.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grace_heldout.h"
#include "grace_online.h"
#include "locus_common.h"
#include "locus_grace_plan.h"

/* tokens per layer the initial fit keeps for its layer objective, as locusctl fit */
#define FIT_KEEP 65536u
/* locusctl rebalance's default push threshold (relative skew gain) */
#define PUSH_THRESHOLD 0.05
/* locusctl rebalance --every: a refit every 3 intervals of window steps */
#define EVERY (GO_VLLM_INTERVAL / GO_VLLM_WINDOW)

const char *const go_method_name[GO_N_METHODS] = {
	"locus online", "EPLB online (vLLM)", "GRACE static", "EPLB static", "round robin",
	"GRACE refit (diag.)",
};

static void *xcalloc(size_t n, size_t sz)
{
	void *p = calloc(n ? n : 1, sz);

	if (!p)
		gf_die("replay", NULL, -ENOMEM);
	return p;
}

/* Token tok of request q: its prompt tokens, then its generated ones. */
static const uint16_t *req_tok(const struct locus_trace *t, const struct locus_trace_req *q,
			       uint32_t tok, uint32_t l)
{
	return tok < q->prompt_len ? locus_trace_tok(t, q->prompt, tok, l)
				   : locus_trace_tok(t, q->gen, tok - q->prompt_len, l);
}

struct req_ref {
	uint32_t tr, r, len;
};

struct slot {
	int32_t q;        /* index into the order; -1: empty */
	uint32_t next;    /* next token */
};

void go_stream_build(struct locus_trace *const *tr, uint32_t n_tr, int shuffle, uint64_t seed,
		     uint32_t batch, struct go_stream *s)
{
	uint32_t n = 0, at = 0, q_next = 0, running;
	struct req_ref *ord;
	struct slot *sl;
	size_t n_tok = 0;

	memset(s, 0, sizeof(*s));
	if (!n_tr || !batch)
		gf_die("stream", NULL, -EINVAL);
	for (uint32_t i = 0; i < n_tr; i++) {
		if (tr[i]->n_layers != tr[0]->n_layers || tr[i]->k != tr[0]->k ||
		    tr[i]->n_experts != tr[0]->n_experts)
			gf_die("stream: traces of different shapes", NULL, -EINVAL);
		n += tr[i]->n_requests;
	}
	ord = xcalloc(n, sizeof(*ord));
	for (uint32_t i = 0, j = 0; i < n_tr; i++)
		for (uint32_t r = 0; r < tr[i]->n_requests; r++, j++) {
			const struct locus_trace_req *q = &tr[i]->reqs[r];

			ord[j] = (struct req_ref){ i, r, q->prompt_len + q->gen_len };
			n_tok += ord[j].len;
		}
	if (n_tok >= UINT32_MAX)
		gf_die("stream: too many tokens", NULL, -LOCUS_ERANGE);
	for (uint32_t i = n; shuffle && i > 1; i--) {
		uint32_t j = locus_splitmix_below(&seed, i);
		struct req_ref x = ord[i - 1];

		ord[i - 1] = ord[j];
		ord[j] = x;
	}
	s->L = tr[0]->n_layers;
	s->k = tr[0]->k;
	s->E = tr[0]->n_experts;
	s->batch = batch;
	s->n_req = n;
	s->n_tok = (uint32_t)n_tok;
	s->ids = xcalloc((size_t)s->L * s->n_tok * s->k, sizeof(uint16_t));
	/* every step emits at least one token: at most n_tok steps */
	s->step0 = xcalloc((size_t)s->n_tok + 2, sizeof(uint32_t));
	sl = xcalloc(batch, sizeof(*sl));
	for (uint32_t b = 0; b < batch; b++)
		sl[b].q = -1;
	do {
		running = 0;
		for (uint32_t b = 0; b < batch; b++) {
			const struct req_ref *o;
			const struct locus_trace_req *q;

			if (sl[b].q < 0 && q_next < n)
				sl[b] = (struct slot){ .q = (int32_t)q_next++, .next = 0 };
			if (sl[b].q < 0)
				continue;
			o = &ord[sl[b].q];
			q = &tr[o->tr]->reqs[o->r];
			for (uint32_t l = 0; l < s->L; l++)
				memcpy(s->ids + ((size_t)l * s->n_tok + at) * s->k,
				       req_tok(tr[o->tr], q, sl[b].next, l), s->k * sizeof(uint16_t));
			at++;
			running++;
			if (++sl[b].next == o->len)
				sl[b].q = -1;
		}
		if (running)
			s->step0[++s->n_steps] = at;
	} while (running);
	free(sl);
	free(ord);
}

void go_stream_free(struct go_stream *s)
{
	free(s->step0);
	free(s->ids);
	memset(s, 0, sizeof(*s));
}

void go_cadence_of(uint32_t n_steps, uint32_t min_windows, struct go_cadence *c)
{
	uint64_t need = (uint64_t)GO_VLLM_INTERVAL * (min_windows + 1);

	if (n_steps >= need) {
		c->window = GO_VLLM_WINDOW;
		c->interval = GO_VLLM_INTERVAL;
	} else {
		c->window = n_steps / (EVERY * (min_windows + 1));
		c->interval = c->window * EVERY;
	}
	c->scale = (double)c->interval / GO_VLLM_INTERVAL;
	c->swaps = LOCUS_GRACEFIT_SWAPS;
	c->n_windows = c->interval ? n_steps / c->interval - 1 : 0;
	if (!c->window)
		c->n_windows = 0;
}

/* Loads W[L][E] of steps [from, to). */
static void loads_of(const struct go_stream *s, uint32_t from, uint32_t to, double *W)
{
	memset(W, 0, (size_t)s->L * s->E * sizeof(double));
	for (uint32_t l = 0; l < s->L; l++) {
		const uint16_t *id = s->ids + ((size_t)l * s->n_tok + s->step0[from]) * s->k;
		size_t n = (size_t)(s->step0[to] - s->step0[from]) * s->k;

		for (size_t i = 0; i < n; i++)
			W[(size_t)l * s->E + id[i]] += 1;
	}
}

/* Steps [from, to) as one scored set (one sequence). */
static void set_of(const struct go_stream *s, uint32_t from, uint32_t to, struct gh_set *g)
{
	uint32_t t0 = s->step0[from], n = s->step0[to] - t0;

	g->L = s->L;
	g->k = s->k;
	g->n_seq = 1;
	g->n_tok = n;
	g->tok0 = xcalloc(2, sizeof(uint32_t));
	g->tok0[1] = n;
	g->ids = xcalloc((size_t)s->L * n * s->k, sizeof(uint16_t));
	for (uint32_t l = 0; l < s->L; l++)
		memcpy(g->ids + (size_t)l * n * s->k, s->ids + ((size_t)l * s->n_tok + t0) * s->k,
		       (size_t)n * s->k * sizeof(uint16_t));
}

/*
 * locusctl fit --grace on the tokens of steps [from, to); A (may be NULL)
 * gets a copy of the profile's co-activation [L][E][E], which locusctl
 * rebalance --trace reads from the same calibration trace.
 */
static void initial_fit(const struct go_stream *s, uint32_t from, uint32_t to,
			const struct locus_gracefit_topo *tp, void **blob, size_t *len, double **A)
{
	struct locus_gracefit_profile p;
	struct locus_gracefit_opts o = { .r = -1, .seed = 1 };
	struct locus_error err = { 0 };
	uint32_t t0 = s->step0[from], n = s->step0[to] - t0;
	int rc = locus_gracefit_profile_init(&p, s->L, s->E, 1, &err);

	if (!rc)
		rc = locus_gracefit_profile_keep_tokens(&p, s->k, FIT_KEEP, &err);
	for (uint32_t l = 0; !rc && l < s->L; l++)
		rc = locus_gracefit_profile_add(&p, l, s->ids + ((size_t)l * s->n_tok + t0) * s->k,
						n, s->k, &err);
	if (!rc)
		rc = locus_gracefit_fit(&p, tp, &o, blob, len, NULL, &err);
	if (rc)
		gf_die("initial fit", &err, rc);
	if (A) {
		size_t n = (size_t)s->L * s->E * s->E;

		*A = xcalloc(n, sizeof(double));
		memcpy(*A, p.A, n * sizeof(double));
	}
	locus_gracefit_profile_free(&p);
}

/*
 * vLLM's placement before EPLB runs: physical slot p (on GPU p / (P / N))
 * holds expert p mod E, the maps built as EPLB's are.
 */
static void round_robin(uint32_t L, uint32_t E, uint32_t P, uint32_t N,
			struct locus_gracefit_eplb *p)
{
	uint32_t X = (P + E - 1) / E;

	*p = (struct locus_gracefit_eplb){ .n_layers = L, .n_experts = E, .n_phys = P,
					   .n_gpus = N, .max_copies = X };
	p->phy2log = xcalloc((size_t)L * P, sizeof(int32_t));
	p->logcnt = xcalloc((size_t)L * E, sizeof(int32_t));
	p->log2phy = xcalloc((size_t)L * E * X, sizeof(int32_t));
	p->vllm_log2phy = xcalloc((size_t)L * E * X, sizeof(int32_t));
	for (size_t i = 0; i < (size_t)L * E * X; i++)
		p->log2phy[i] = p->vllm_log2phy[i] = -1;
	for (uint32_t l = 0; l < L; l++)
		for (uint32_t q = 0; q < P; q++) {
			size_t le = (size_t)l * E + q % E;

			p->phy2log[(size_t)l * P + q] = (int32_t)(q % E);
			p->log2phy[le * X + p->logcnt[le]] = (int32_t)q;
			p->vllm_log2phy[le * X + p->logcnt[le]++] = (int32_t)q;
		}
}

/*
 * (GPU, expert) pairs of b that a does not hold: the copies whose weights
 * a rearrangement from a to b receives (vLLM copies an expert the GPU
 * already holds locally).
 */
static uint32_t eplb_gained(const struct locus_gracefit_eplb *a, const struct locus_gracefit_eplb *b)
{
	uint32_t L = a->n_layers, E = a->n_experts, P = a->n_phys, N = a->n_gpus, S = P / N;
	uint32_t gained = 0;
	uint8_t *held = xcalloc((size_t)N * E, 1);

	for (uint32_t l = 0; l < L; l++) {
		memset(held, 0, (size_t)N * E);
		for (uint32_t q = 0; q < P; q++)
			held[(size_t)(q / S) * E + (uint32_t)a->phy2log[(size_t)l * P + q]] = 1;
		for (uint32_t q = 0; q < P; q++) {
			uint8_t *h = &held[(size_t)(q / S) * E + (uint32_t)b->phy2log[(size_t)l * P + q]];

			gained += !*h;
			*h = 1;
		}
	}
	free(held);
	return gained;
}

/* Set held[l][r][e] for every copy (primary or replica) of a GRACE map. */
static void grace_held(const void *blob, size_t len, uint32_t L, uint32_t N, uint32_t E,
		       uint8_t *held)
{
	const struct locus_grace_map *m = gf_map(blob, len);

	memset(held, 0, (size_t)L * N * E);
	for (uint32_t l = 0; l < L; l++)
		for (uint32_t e = 0; e < E; e++) {
			size_t le = (size_t)l * E + e;

			for (uint32_t i = 0; i < locus_grace_map_ncopies(m)[le]; i++) {
				uint32_t r = locus_grace_map_ranks(m)[le * m->n_slots + i];

				held[((size_t)l * N + r) * E + e] = 1;
			}
		}
	free((void *)m);
}

/* (GPU, expert) copies of GRACE table b that table a does not hold. */
static uint32_t grace_gained(const void *a, size_t alen, const void *b, size_t blen, uint32_t L,
			     uint32_t N, uint32_t E)
{
	uint8_t *ha = xcalloc((size_t)L * N * E, 1), *hb = xcalloc((size_t)L * N * E, 1);
	uint32_t gained = 0;

	grace_held(a, alen, L, N, E, ha);
	grace_held(b, blen, L, N, E, hb);
	for (size_t i = 0; i < (size_t)L * N * E; i++)
		gained += hb[i] && !ha[i];
	free(hb);
	free(ha);
	return gained;
}

/* Score one window's set under a GRACE blob or an EPLB placement. */
static void score_window(const struct gh_set *g, const void *blob, size_t len,
			 const struct locus_gracefit_eplb *ep, uint32_t gpn, struct go_window *w,
			 uint32_t *slots)
{
	struct gh_score sc;
	struct gh_unit u = { .sc = { &sc }, .n = 1 };
	struct gh_metrics m;

	if (blob) {
		void *map = gf_map(blob, len);

		gh_score_grace(map, g, &sc);
		free(map);
	} else {
		gh_score_eplb(ep, gpn, g, &sc);
	}
	gh_metrics(&u, 1, &m);
	w->rows_gpu = sc.rows_gpu[0];
	w->rows_node = sc.rows_node[0];
	w->tl = sc.tl[0];
	w->mm = m.mm;
	*slots = LOCUS_MAX(*slots, sc.slots_max);
	gh_score_free(&sc);
}

static void payload_of(const void *blob, size_t len, const void **pl, size_t *plen)
{
	struct locus_error err = { 0 };
	int rc = locus_grace_blob_check(blob, len, pl, plen, &err);

	if (rc)
		gf_die("table", &err, rc);
}

void go_replay(const struct go_stream *s, const struct gf_topo *t, const struct go_cadence *c,
	       int with_refit, struct go_run *r)
{
	uint32_t L = s->L, E = s->E, N = t->nodes * t->gpus, P = gf_eplb_slots(t, E);
	struct locus_gracefit_topo tp = gf_grace_topo(t, E);
	struct locus_gracefit_eplb ep0, rr, ep_cur;
	struct locus_gracefit_window win;
	struct locus_error err = { 0 };
	void *blob0, *cur, *refit;
	size_t len0, cur_len, refit_len;
	double *W = xcalloc((size_t)L * E, sizeof(double));
	double *A = NULL;
	int rc;

	memset(r, 0, sizeof(*r));
	if (!c->n_windows || (uint64_t)(c->n_windows + 1) * c->interval > s->n_steps)
		gf_die("replay: the stream is too short for the cadence", NULL, -LOCUS_ERANGE);
	r->n_windows = c->n_windows;
	for (int x = 0; x < GO_N_METHODS; x++)
		r->w[x] = xcalloc(c->n_windows, sizeof(struct go_window));
	/* both start from a placement fitted on the first interval */
	initial_fit(s, 0, c->interval, &tp, &blob0, &len0, &A);
	loads_of(s, 0, c->interval, W);
	rc = locus_gracefit_eplb_rebalance(W, L, E, P, 1, t->nodes, N, &ep0, &err);
	if (rc)
		gf_die("EPLB", &err, rc);
	round_robin(L, E, P, N, &rr);
	cur = malloc(len0);
	if (!cur)
		gf_die("replay", NULL, -ENOMEM);
	memcpy(cur, blob0, len0);
	cur_len = len0;
	refit = malloc(len0);
	if (!refit)
		gf_die("replay", NULL, -ENOMEM);
	memcpy(refit, blob0, len0);
	refit_len = len0;
	ep_cur = ep0;
	/* locusctl rebalance: --interval <window steps> --window 1 --every 3 --decay 1 */
	rc = locus_gracefit_window_init(&win, L, E, 1, 1.0, &err);
	if (rc)
		gf_die("window", &err, rc);
	for (uint32_t round = 1; round <= EVERY * c->n_windows; round++) {
		uint32_t j = round / EVERY - 1, from = (j + 1) * c->interval, to = from + c->interval;
		struct locus_gracefit_rebalance rep;
		struct locus_gracefit_eplb ep_nx;
		const void *pl;
		size_t plen, nlen;
		struct go_window fit;
		struct gh_set g;
		void *nb;

		loads_of(s, (round - 1) * c->window, round * c->window, W);
		locus_gracefit_window_add(&win, W);
		if (round % EVERY)
			continue;
		locus_gracefit_window_loads(&win, W);
		/* locus: the replication refit, pushed when it predicts enough gain */
		payload_of(cur, cur_len, &pl, &plen);
		rc = locus_gracefit_rebalance_plan_swaps(pl, plen, W, A, c->swaps, UINT32_MAX, &nb,
							 &nlen, &rep, &err);
		if (rc)
			gf_die("rebalance plan", &err, rc);
		if (locus_gracefit_should_push(rep.rho_now, rep.rho_after, PUSH_THRESHOLD)) {
			free(cur);
			cur = nb;
			cur_len = nlen;
			r->w[GO_LOCUS][j].moves = rep.moves;
			r->w[GO_LOCUS][j].pushed = 1;
		} else {
			free(nb);
		}
		/* the diagnostic: the whole fit again on the window */
		if (with_refit) {
			initial_fit(s, from - c->window, from, &tp, &nb, &nlen, NULL);
			r->w[GO_REFIT][j].moves = grace_gained(refit, refit_len, nb, nlen, L, N, E);
			r->w[GO_REFIT][j].pushed = 1;
			free(refit);
			refit = nb;
			refit_len = nlen;
		}
		/* EPLB: placed again from the window's loads */
		rc = locus_gracefit_eplb_rebalance(W, L, E, P, 1, t->nodes, N, &ep_nx, &err);
		if (rc)
			gf_die("EPLB", &err, rc);
		r->w[GO_EPLB][j].moves = eplb_gained(&ep_cur, &ep_nx);
		r->w[GO_EPLB][j].pushed = 1;
		if (ep_cur.phy2log != ep0.phy2log)
			locus_gracefit_eplb_free(&ep_cur);
		ep_cur = ep_nx;
		/* in sample: each online placement on the window it was fitted on */
		set_of(s, from - c->window, from, &g);
		score_window(&g, cur, cur_len, NULL, t->gpus, &fit, &r->slots[GO_LOCUS]);
		r->w[GO_LOCUS][j].mm_fit = fit.mm;
		score_window(&g, NULL, 0, &ep_cur, t->gpus, &fit, &r->slots[GO_EPLB]);
		r->w[GO_EPLB][j].mm_fit = fit.mm;
		free(g.tok0);
		free(g.ids);
		set_of(s, from, to, &g);
		score_window(&g, cur, cur_len, NULL, t->gpus, &r->w[GO_LOCUS][j],
			     &r->slots[GO_LOCUS]);
		score_window(&g, NULL, 0, &ep_cur, t->gpus, &r->w[GO_EPLB][j], &r->slots[GO_EPLB]);
		score_window(&g, blob0, len0, NULL, t->gpus, &r->w[GO_GRACE_STATIC][j],
			     &r->slots[GO_GRACE_STATIC]);
		score_window(&g, NULL, 0, &ep0, t->gpus, &r->w[GO_EPLB_STATIC][j],
			     &r->slots[GO_EPLB_STATIC]);
		score_window(&g, NULL, 0, &rr, t->gpus, &r->w[GO_RR][j], &r->slots[GO_RR]);
		if (with_refit)
			score_window(&g, refit, refit_len, NULL, t->gpus, &r->w[GO_REFIT][j],
				     &r->slots[GO_REFIT]);
		free(g.tok0);
		free(g.ids);
	}
	if (ep_cur.phy2log != ep0.phy2log)
		locus_gracefit_eplb_free(&ep_cur);
	locus_gracefit_eplb_free(&ep0);
	locus_gracefit_eplb_free(&rr);
	locus_gracefit_window_free(&win);
	free(refit);
	free(cur);
	free(blob0);
	free(A);
	free(W);
}

void go_run_free(struct go_run *r)
{
	for (int x = 0; x < GO_N_METHODS; x++)
		free(r->w[x]);
	memset(r, 0, sizeof(*r));
}

void go_metrics_of(const struct go_window *w, const uint32_t *idx, uint32_t n,
		   struct go_metrics *m)
{
	double rg = 0, rn = 0, tl = 0, mm = 0, mv = 0, mf = 0;

	for (uint32_t i = 0; i < n; i++) {
		const struct go_window *x = &w[idx ? idx[i] : i];

		rg += x->rows_gpu;
		rn += x->rows_node;
		tl += x->tl;
		mm += x->mm;
		mv += x->moves;
		mf += x->mm_fit;
	}
	m->rows_gpu = tl > 0 ? rg / tl : 0;
	m->rows_node = tl > 0 ? rn / tl : 0;
	m->mm = n ? mm / n : 0;
	m->moves = n ? mv / n : 0;
	m->mm_fit = n ? mf / n : 0;
}
