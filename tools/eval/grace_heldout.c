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

/*
 * Route every (source GPU, layer) batch of s with fn and add each token's
 * rows and pairs to its sequence.
 */
static void score(const struct gh_set *s, uint32_t N, uint32_t gpn, route_fn fn, void *ctx,
		  struct gh_score *out)
{
	uint32_t k = s->k, max_tok = s->n_tok / N + 1;
	uint16_t *ids = xcalloc((size_t)max_tok * k, sizeof(uint16_t));
	uint16_t *dst = xcalloc((size_t)max_tok * k, sizeof(uint16_t));
	uint32_t *seq = xcalloc(s->n_tok, sizeof(uint32_t));

	out->n_seq = s->n_seq;
	out->L = s->L;
	out->N = N;
	out->rows_gpu = xcalloc(s->n_seq, sizeof(double));
	out->rows_node = xcalloc(s->n_seq, sizeof(double));
	out->tl = xcalloc(s->n_seq, sizeof(double));
	out->load = xcalloc((size_t)s->n_seq * s->L * N, sizeof(double));
	for (uint32_t q = 0; q < s->n_seq; q++)
		for (uint32_t t = s->tok0[q]; t < s->tok0[q + 1]; t++)
			seq[t] = q;
	for (uint32_t l = 0; l < s->L; l++) {
		for (uint32_t src = 0; src < N; src++) {
			uint32_t n = 0;

			for (uint32_t t = src; t < s->n_tok; t += N, n++)
				memcpy(ids + (size_t)n * k, s->ids + ((size_t)l * s->n_tok + t) * k,
				       k * sizeof(uint16_t));
			if (!n)
				continue;
			fn(ctx, l, src, ids, n, k, dst);
			for (uint32_t i = 0, t = src; i < n; i++, t += N) {
				const uint16_t *d = dst + (size_t)i * k;
				uint32_t q = seq[t];
				double *ld = out->load + ((size_t)q * s->L + l) * N;

				out->tl[q] += 1;
				for (uint32_t j = 0; j < k; j++) {
					int first = 1;

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
	void **st;
	void *pmem;
	struct locus_grace_plan plan;
};

static void route_grace(void *ctx, uint32_t layer, uint32_t src, const uint16_t *ids,
			uint32_t n, uint32_t k, uint16_t *dst)
{
	struct grace_ctx *g = ctx;
	struct locus_grace_batch b = { .layer = layer, .src_rank = src, .n_tokens = n,
				       .top_k = k, .experts = ids };
	struct locus_error err = { 0 };
	int rc = locus_grace_plan_batch(g->st[src / g->m->dims.gpus_per_node], g->m, &b, &g->plan,
					&err);

	if (rc < 0) {
		fprintf(stderr, "grace_figures: plan: %s\n", err.msg);
		exit(1);
	}
	for (size_t i = 0; i < (size_t)n * k; i++)
		dst[i] = g->plan.slots[i].rank;
}

void gh_score_grace(const struct locus_grace_map *m, const struct gh_set *s,
		    struct gh_score *out)
{
	uint32_t N = m->n_ranks, nodes = m->dims.n_nodes, max_tok = s->n_tok / N + 1;
	size_t pm = locus_grace_plan_mem_size(max_tok, s->k, N);
	size_t ssz = locus_grace_plan_state_size(&m->dims);
	struct grace_ctx g = { .m = m };
	uint32_t E = m->dims.n_experts;

	g.pmem = xcalloc(1, pm);
	g.st = xcalloc(nodes, sizeof(void *));
	if (locus_grace_plan_init(&g.plan, g.pmem, pm, max_tok, s->k, N))
		oom();
	for (uint32_t nd = 0; nd < nodes; nd++) {
		if (posix_memalign(&g.st[nd], 64, ssz))
			oom();
		locus_grace_plan_state_init(g.st[nd], ssz, m, nd, NULL);
	}
	score(s, N, m->dims.gpus_per_node, route_grace, &g, out);
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

static void route_eplb(void *ctx, uint32_t layer, uint32_t src, const uint16_t *ids,
		       uint32_t n, uint32_t k, uint16_t *dst)
{
	(void)src;
	locus_gracefit_eplb_dispatch(ctx, layer, ids, n, k, dst);
}

void gh_score_eplb(const struct locus_gracefit_eplb *p, uint32_t gpus_per_node,
		   const struct gh_set *s, struct gh_score *out)
{
	score(s, p->n_gpus, gpus_per_node, route_eplb, (void *)(uintptr_t)p, out);
	out->slots_max = p->n_phys / p->n_gpus;
}

void gh_score_free(struct gh_score *c)
{
	free(c->rows_gpu);
	free(c->rows_node);
	free(c->tl);
	free(c->load);
	memset(c, 0, sizeof(*c));
}

void gh_metrics(const struct gh_unit *u, size_t n, struct gh_metrics *m)
{
	double rows_gpu = 0, rows_node = 0, tl = 0, mm = 0, cv = 0;
	size_t cells = 0;

	for (size_t i = 0; i < n; i++) {
		uint32_t L = u[i].sc[0]->L, N = u[i].sc[0]->N;

		for (uint32_t x = 0; x < u[i].n; x++) {
			const struct gh_score *c = u[i].sc[x];

			for (uint32_t q = 0; q < c->n_seq; q++) {
				double w = u[i].cnt[x] ? u[i].cnt[x][q] : 1;

				rows_gpu += w * c->rows_gpu[q];
				rows_node += w * c->rows_node[q];
				tl += w * c->tl[q];
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
				sum += load[r];
				mx = fmax(mx, load[r]);
			}
			if (!(sum > 0))
				continue;
			mean = sum / N;
			for (uint32_t r = 0; r < N; r++)
				var += (load[r] - mean) * (load[r] - mean) / N;
			mm += mx / mean;
			cv += sqrt(var) / mean;
			cells++;
		}
	}
	m->rows_gpu = tl > 0 ? rows_gpu / tl : 0;
	m->rows_node = tl > 0 ? rows_node / tl : 0;
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

