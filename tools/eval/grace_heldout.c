// SPDX-License-Identifier: MIT
/* Per-sequence scoring of placements, metrics over resampled sequences. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grace_heldout.h"

typedef void (*route_fn)(void *ctx, uint32_t layer, uint32_t src, const uint16_t *ids,
			 uint32_t n, uint32_t k, uint16_t *dst);

static void oom(void)
{
	fprintf(stderr, "grace_figures: out of memory\n");
	exit(1);
}

static void *xcalloc(size_t n, size_t sz)
{
	void *p = calloc(n ? n : 1, sz);

	if (!p)
		oom();
	return p;
}

/* A destination that serves nothing: the pair's expert has no live copy. */
#define NOWHERE 0xffffu

/*
 * Route every (source GPU, layer) batch of s with fn and add each token's
 * rows and pairs to its sequence; token t sits on the (t mod live)-th rank
 * not in lost.
 */
static void score(const struct gh_set *s, uint32_t N, uint32_t gpn, uint64_t lost, route_fn fn,
		  void *ctx, struct gh_score *out)
{
	uint32_t k = s->k, live = 0, src_of[LOCUS_GRACE_MAX_RANKS], max_tok;
	uint16_t *ids, *dst;
	uint32_t *seq = xcalloc(s->n_tok, sizeof(uint32_t));

	for (uint32_t r = 0; r < N; r++)
		if (r >= 64 || !(lost >> r & 1))
			src_of[live++] = r;
	max_tok = s->n_tok / live + 1;
	ids = xcalloc((size_t)max_tok * k, sizeof(uint16_t));
	dst = xcalloc((size_t)max_tok * k, sizeof(uint16_t));
	out->n_seq = s->n_seq;
	out->L = s->L;
	out->N = N;
	out->k = k;
	out->lost = lost;
	out->rows_gpu = xcalloc(s->n_seq, sizeof(double));
	out->rows_node = xcalloc(s->n_seq, sizeof(double));
	out->tl = xcalloc(s->n_seq, sizeof(double));
	out->masked = xcalloc(s->n_seq, sizeof(double));
	out->load = xcalloc((size_t)s->n_seq * s->L * N, sizeof(double));
	for (uint32_t q = 0; q < s->n_seq; q++)
		for (uint32_t t = s->tok0[q]; t < s->tok0[q + 1]; t++)
			seq[t] = q;
	for (uint32_t l = 0; l < s->L; l++) {
		for (uint32_t si = 0; si < live; si++) {
			uint32_t n = 0, src = src_of[si];

			for (uint32_t t = si; t < s->n_tok; t += live, n++)
				memcpy(ids + (size_t)n * k, s->ids + ((size_t)l * s->n_tok + t) * k,
				       k * sizeof(uint16_t));
			if (!n)
				continue;
			fn(ctx, l, src, ids, n, k, dst);
			for (uint32_t i = 0, t = si; i < n; i++, t += live) {
				const uint16_t *d = dst + (size_t)i * k;
				uint32_t q = seq[t];
				double *ld = out->load + ((size_t)q * s->L + l) * N;

				out->tl[q] += 1;
				for (uint32_t j = 0; j < k; j++) {
					int first = 1;

					if (d[j] == NOWHERE) {
						out->masked[q] += 1;
						continue;
					}
					ld[d[j]] += 1;
					for (uint32_t x = 0; x < j; x++)
						first &= d[x] != d[j];
					if (!first)
						continue;
					out->rows_gpu[q] += d[j] != src;
					out->rows_node[q] += d[j] / gpn != src / gpn;
				}
			}
		}
	}
	free(seq);
	free(dst);
	free(ids);
}

struct grace_ctx {
	const struct locus_grace_map *m;
	uint64_t lost;
	void **st;
	void *pmem;
	struct locus_grace_plan plan;
};

static void route_grace(void *ctx, uint32_t layer, uint32_t src, const uint16_t *ids,
			uint32_t n, uint32_t k, uint16_t *dst)
{
	struct grace_ctx *g = ctx;
	struct locus_grace_batch b = { .layer = layer, .src_rank = src, .n_tokens = n,
				       .top_k = k, .experts = ids,
				       .lost = g->lost ? &g->lost : NULL };
	struct locus_error err = { 0 };
	int rc = locus_grace_plan_batch(g->st[src / g->m->dims.gpus_per_node], g->m, &b, &g->plan,
					&err);

	if (rc < 0) {
		fprintf(stderr, "grace_figures: plan: %s\n", err.msg);
		exit(1);
	}
	for (size_t i = 0; i < (size_t)n * k; i++)
		dst[i] = g->plan.slots[i].rank == LOCUS_GRACE_MASKED ? NOWHERE
								      : g->plan.slots[i].rank;
}

void gh_score_grace(const struct locus_grace_map *m, const struct gh_set *s,
		    struct gh_score *out)
{
	gh_score_grace_lost(m, s, 0, out);
}

void gh_score_grace_lost(const struct locus_grace_map *m, const struct gh_set *s,
			 uint64_t lost, struct gh_score *out)
{
	uint32_t N = m->n_ranks, nodes = m->dims.n_nodes, live = 0, max_tok;
	size_t pm, ssz = locus_grace_plan_state_size(&m->dims);
	struct grace_ctx g = { .m = m, .lost = lost };
	uint32_t E = m->dims.n_experts;

	for (uint32_t r = 0; r < N; r++)
		live += r >= 64 || !(lost >> r & 1);
	max_tok = s->n_tok / (live ? live : 1) + 1;
	pm = locus_grace_plan_mem_size(max_tok, s->k, N);
	g.pmem = xcalloc(1, pm);
	g.st = xcalloc(nodes, sizeof(void *));
	if (locus_grace_plan_init(&g.plan, g.pmem, pm, max_tok, s->k, N))
		oom();
	for (uint32_t nd = 0; nd < nodes; nd++) {
		if (posix_memalign(&g.st[nd], 64, ssz))
			oom();
		locus_grace_plan_state_init(g.st[nd], ssz, m, nd, NULL);
	}
	score(s, N, m->dims.gpus_per_node, lost, route_grace, &g, out);
	out->slots_max = 0;
	for (uint32_t l = 0; l < m->dims.n_layers; l++) {
		uint32_t cnt[LOCUS_GRACE_MAX_RANKS] = { 0 };

		for (uint32_t e = 0; e < E; e++) {
			size_t le = (size_t)l * E + e;

			for (uint32_t i = 0; i < locus_grace_map_ncopies(m)[le]; i++)
				cnt[locus_grace_map_ranks(m)[le * m->n_slots + i]]++;
		}
		for (uint32_t r = 0; r < N; r++)
			out->slots_max = LOCUS_MAX(out->slots_max, cnt[r]);
	}
	for (uint32_t nd = 0; nd < nodes; nd++)
		free(g.st[nd]);
	free(g.st);
	free(g.pmem);
}

struct eplb_ctx {
	const struct locus_gracefit_eplb *p;
	const uint16_t *rank_of;   /* NULL: GPU g is rank g */
};

static void route_eplb(void *ctx, uint32_t layer, uint32_t src, const uint16_t *ids,
		       uint32_t n, uint32_t k, uint16_t *dst)
{
	const struct eplb_ctx *c = ctx;

	(void)src;
	locus_gracefit_eplb_dispatch(c->p, layer, ids, n, k, dst);
	for (size_t i = 0; c->rank_of && i < (size_t)n * k; i++)
		dst[i] = c->rank_of[dst[i]];
}

void gh_score_eplb(const struct locus_gracefit_eplb *p, uint32_t gpus_per_node,
		   const struct gh_set *s, struct gh_score *out)
{
	gh_score_eplb_on(p, NULL, p->n_gpus, gpus_per_node, 0, s, out);
}

void gh_score_eplb_on(const struct locus_gracefit_eplb *p, const uint16_t *rank_of,
		      uint32_t N, uint32_t gpus_per_node, uint64_t lost,
		      const struct gh_set *s, struct gh_score *out)
{
	struct eplb_ctx c = { .p = p, .rank_of = rank_of };

	score(s, N, gpus_per_node, lost, route_eplb, &c, out);
	out->slots_max = p->n_phys / p->n_gpus;
}

void gh_score_free(struct gh_score *c)
{
	free(c->rows_gpu);
	free(c->rows_node);
	free(c->tl);
	free(c->masked);
	free(c->load);
	memset(c, 0, sizeof(*c));
}

void gh_metrics(const struct gh_unit *u, size_t n, struct gh_metrics *m)
{
	double rows_gpu = 0, rows_node = 0, tl = 0, pairs = 0, masked = 0, mm = 0, cv = 0;
	size_t cells = 0;

	for (size_t i = 0; i < n; i++) {
		uint32_t L = u[i].sc[0]->L, N = u[i].sc[0]->N, live = 0;
		uint64_t lost = u[i].sc[0]->lost;

		for (uint32_t r = 0; r < N; r++)
			live += r >= 64 || !(lost >> r & 1);

		for (uint32_t x = 0; x < u[i].n; x++) {
			const struct gh_score *c = u[i].sc[x];

			for (uint32_t q = 0; q < c->n_seq; q++) {
				double w = u[i].cnt[x] ? u[i].cnt[x][q] : 1;

				rows_gpu += w * c->rows_gpu[q];
				rows_node += w * c->rows_node[q];
				tl += w * c->tl[q];
				pairs += w * c->tl[q] * c->k;
				masked += c->masked ? w * c->masked[q] : 0;
			}
		}
		for (uint32_t l = 0; l < L; l++) {
			double load[LOCUS_GRACE_MAX_RANKS], sum = 0, mx = 0, var = 0, mean;

			memset(load, 0, N * sizeof(double));

			for (uint32_t x = 0; x < u[i].n; x++) {
				const struct gh_score *c = u[i].sc[x];

				for (uint32_t q = 0; q < c->n_seq; q++) {
					double w = u[i].cnt[x] ? u[i].cnt[x][q] : 1;
					const double *ld = c->load + ((size_t)q * L + l) * N;

					if (w == 0)
						continue;
					for (uint32_t r = 0; r < N; r++)
						load[r] += w * ld[r];
				}
			}
			for (uint32_t r = 0; r < N; r++) {
				if (r < 64 && lost >> r & 1)
					continue;
				sum += load[r];
				mx = fmax(mx, load[r]);
			}
			if (!(sum > 0))
				continue;
			mean = sum / live;
			for (uint32_t r = 0; r < N; r++)
				if (r >= 64 || !(lost >> r & 1))
					var += (load[r] - mean) * (load[r] - mean) / live;
			mm += mx / mean;
			cv += sqrt(var) / mean;
			cells++;
		}
	}
	m->rows_gpu = tl > 0 ? rows_gpu / tl : 0;
	m->rows_node = tl > 0 ? rows_node / tl : 0;
	m->masked = pairs > 0 ? masked / pairs : 0;
	m->mm = cells ? mm / (double)cells : 0;
	m->cv = cells ? cv / (double)cells : 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

void gh_interval(double *x, size_t n, double *lo, double *hi)
{
	qsort(x, n, sizeof(*x), cmp_double);
	*lo = x[(size_t)floor(0.025 * (double)(n - 1))];
	*hi = x[(size_t)ceil(0.975 * (double)(n - 1))];
}

void gh_interval_bc(double point, double *x, size_t n, double *lo, double *hi)
{
	double mean = 0;

	for (size_t i = 0; i < n; i++)
		mean += x[i] / (double)n;
	gh_interval(x, n, lo, hi);
	*lo -= mean - point;
	*hi -= mean - point;
}


void gh_print_interval(double point, double *x, size_t n, int pct)
{
	double lo, hi;

	if (isnan(point)) {
		printf(" %24s", "n/a (one node)");
		return;
	}
	gh_interval_bc(point, x, n, &lo, &hi);
	if (pct)
		printf(" %+6.1f%% [%+6.1f, %+6.1f]", 100 * point, 100 * lo, 100 * hi);
	else
		printf(" %+7.3f [%+.3f, %+.3f]", point, lo, hi);
}
