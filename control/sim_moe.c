// SPDX-License-Identifier: MIT
/* MoE-layer time per placement: the steps routed, counted and timed (locus_sim_moe.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "locus_common.h"
#include "locus_err_priv.h"
#include "locus_sim_moe.h"

#define MAX_GPUS 4096u

void locus_sim_moe_layer_time(const struct locus_sim_moe_hw *hw,
			      const struct locus_sim_moe_counts *c, struct locus_sim_moe_time *t)
{
	double a2a = 0, comp = 0;

	for (uint32_t g = 0; g < c->N; g++) {
		double intra = LOCUS_MAX(c->sent_intra[g], c->recv_intra[g]) * hw->row_bytes /
			       hw->intra_bytes_per_s;
		double inter = LOCUS_MAX(c->sent_inter[g], c->recv_inter[g]) * hw->row_bytes /
			       hw->inter_bytes_per_s;
		double flops = c->pairs[g] * hw->flops_per_pair / hw->gpu_flops;
		double weights = c->experts[g] * hw->expert_bytes / hw->hbm_bytes_per_s;

		a2a = fmax(a2a, fmax(intra, inter));
		comp = fmax(comp, fmax(flops, weights));
	}
	t->a2a_s = hw->latency_s + a2a;
	t->compute_s = comp;
	t->layer_s = 2 * t->a2a_s + comp;
}

static int hw_check(const struct locus_sim_moe_hw *hw, struct locus_error *err)
{
	const double pos[] = { hw->intra_bytes_per_s, hw->inter_bytes_per_s, hw->gpu_flops,
			       hw->hbm_bytes_per_s };
	const double nonneg[] = { hw->row_bytes, hw->expert_bytes, hw->flops_per_pair,
				  hw->latency_s };

	for (size_t i = 0; i < LOCUS_ARRAY_SIZE(pos); i++)
		if (!isfinite(pos[i]) || !(pos[i] > 0))
			return locus_error_set(err, LOCUS_ERANGE,
					       "a bandwidth or FLOP/s of the layer model is not "
					       "a finite positive number");
	for (size_t i = 0; i < LOCUS_ARRAY_SIZE(nonneg); i++)
		if (!isfinite(nonneg[i]) || nonneg[i] < 0)
			return locus_error_set(err, LOCUS_ERANGE,
					       "a size or latency of the layer model is not a "
					       "finite number >= 0");
	return 0;
}

void locus_sim_moe_result_free(struct locus_sim_moe_result *res)
{
	free(res->layer_s);
	free(res->a2a_s);
	free(res->compute_s);
	memset(res, 0, sizeof(*res));
}

/* Scratch of a run: a source GPU's batch, the per-GPU counts, the copies seen. */
struct scratch {
	uint16_t *ids, *dst;        /* [cap]: one source GPU's batch */
	uint32_t *cnt;              /* 6 x N counters */
	uint32_t *stamp;            /* [E x N]: the (step, layer) a copy was last counted in */
	size_t n_stamp;
	uint32_t now;
	struct locus_sim_moe_counts c;
};

static int scratch_init(struct scratch *s, uint32_t N, uint32_t gpn, uint32_t E, size_t cap,
			struct locus_error *err)
{
	memset(s, 0, sizeof(*s));
	s->n_stamp = (size_t)E * N;
	s->ids = calloc(cap, sizeof(uint16_t));
	s->dst = calloc(cap, sizeof(uint16_t));
	s->cnt = calloc(6 * (size_t)N, sizeof(uint32_t));
	s->stamp = calloc(s->n_stamp, sizeof(uint32_t));
	if (!s->ids || !s->dst || !s->cnt || !s->stamp)
		return locus_error_set(err, ENOMEM, "out of memory");
	s->c = (struct locus_sim_moe_counts){ .N = N, .gpus_per_node = gpn, .sent_intra = s->cnt,
					      .recv_intra = s->cnt + N,
					      .sent_inter = s->cnt + 2 * N,
					      .recv_inter = s->cnt + 3 * N,
					      .pairs = s->cnt + 4 * N, .experts = s->cnt + 5 * N };
	return 0;
}

static void scratch_free(struct scratch *s)
{
	free(s->stamp);
	free(s->cnt);
	free(s->dst);
	free(s->ids);
}

/* A new (step, layer): counts to zero. */
static void counts_reset(struct scratch *s)
{
	memset(s->cnt, 0, 6 * (size_t)s->c.N * sizeof(uint32_t));
	if (++s->now == 0) { /* after 2^32 (step, layer)s */
		memset(s->stamp, 0, s->n_stamp * sizeof(uint32_t));
		s->now = 1;
	}
}

/*
 * Count one token of source GPU src: its k pairs (experts ids, GPUs d), a
 * row to each distinct GPU other than src, by tier. Adds rows off the GPU
 * and off the node to rows[2].
 */
static void count_token(struct scratch *s, uint32_t gpn, uint32_t src, const uint16_t *ids,
			const uint16_t *d, uint32_t k, double *rows)
{
	struct locus_sim_moe_counts *c = &s->c;

	for (uint32_t j = 0; j < k; j++) {
		uint32_t g = d[j], first = 1, cp = (uint32_t)ids[j] * c->N + g;

		c->pairs[g]++;
		if (s->stamp[cp] != s->now) {
			s->stamp[cp] = s->now;
			c->experts[g]++;
		}
		for (uint32_t x = 0; x < j; x++)
			first &= d[x] != g;
		if (!first || g == src)
			continue;
		rows[0] += 1;
		if (g / gpn == src / gpn) {
			c->sent_intra[src]++;
			c->recv_intra[g]++;
		} else {
			rows[1] += 1;
			c->sent_inter[src]++;
			c->recv_inter[g]++;
		}
	}
}

/* max/mean of the GPUs' pairs (0 when none). */
static double load_mm(const struct locus_sim_moe_counts *c)
{
	uint64_t sum = 0, mx = 0;

	for (uint32_t g = 0; g < c->N; g++) {
		sum += c->pairs[g];
		mx = LOCUS_MAX(mx, (uint64_t)c->pairs[g]);
	}
	return sum ? (double)mx * c->N / (double)sum : 0;
}

/* Route one (step, layer) and count it. */
static int step_layer(const struct locus_sim_moe_cfg *cfg, struct scratch *s, uint32_t step,
		      uint32_t l, double *rows, struct locus_error *err)
{
	const struct locus_sim_moe_tokens *tk = cfg->tok;
	uint32_t N = s->c.N, k = tk->k, B = cfg->tokens_per_step;

	counts_reset(s);
	for (uint32_t src = 0; src < N; src++) {
		uint32_t n = 0;
		int rc;

		for (uint32_t i = src; i < B; i += N, n++) {
			uint32_t t = cfg->order[(size_t)step * B + i];

			memcpy(s->ids + (size_t)n * k, tk->ids + ((size_t)t * tk->L + l) * k,
			       k * sizeof(uint16_t));
		}
		if (!n)
			continue;
		rc = cfg->route(cfg->ctx, l, src, s->ids, n, k, s->dst, err);
		if (rc < 0)
			return rc;
		for (uint32_t i = 0; i < (size_t)n * k; i++)
			if (s->dst[i] >= N)
				return locus_error_set(err, LOCUS_ERANGE,
						       "a placement sent a pair to GPU %u of %u",
						       s->dst[i], N);
		for (uint32_t i = 0; i < n; i++) {
			const uint16_t *d = s->dst + (size_t)i * k;

			count_token(s, cfg->gpus_per_node, src, s->ids + (size_t)i * k, d, k,
				    rows);
		}
	}
	return 0;
}

/* The checks run and replay share. */
static int cfg_check(const struct locus_sim_moe_cfg *cfg, uint32_t n_tok,
		     struct locus_error *err)
{
	const struct locus_sim_moe_tokens *tk = cfg->tok;
	uint64_t N = (uint64_t)cfg->n_nodes * cfg->gpus_per_node;

	if (!cfg->n_nodes || !cfg->gpus_per_node || N > MAX_GPUS)
		return locus_error_set(err, LOCUS_ERANGE, "topology %ux%u: want 1..%u GPUs",
				       cfg->n_nodes, cfg->gpus_per_node, MAX_GPUS);
	if (!tk->k || !tk->L || !tk->E || (uint64_t)tk->E * N > (1u << 24))
		return locus_error_set(err, LOCUS_ERANGE,
				       "no layers, top-k or experts, or experts x GPUs > 2^24");
	if (!cfg->tokens_per_step || n_tok / cfg->tokens_per_step == 0)
		return locus_error_set(err, LOCUS_ERANGE, "%u tokens make no full step of %u",
				       n_tok, cfg->tokens_per_step);
	return hw_check(&cfg->hw, err);
}

int locus_sim_moe_run(const struct locus_sim_moe_cfg *cfg, struct locus_sim_moe_result *res,
		      struct locus_error *err)
{
	const struct locus_sim_moe_tokens *tk = cfg->tok;
	uint32_t N = cfg->n_nodes * cfg->gpus_per_node, B = cfg->tokens_per_step;
	uint32_t n_order = cfg->n_order ? cfg->n_order : tk->n_tok;
	struct scratch s;
	double rows[2] = { 0, 0 }, mm = 0;
	int rc;

	memset(res, 0, sizeof(*res));
	rc = cfg_check(cfg, n_order, err);
	if (rc)
		return rc;
	if (!cfg->route)
		return locus_error_set(err, LOCUS_ERANGE, "no placement");
	res->n_steps = n_order / B;
	rc = scratch_init(&s, N, cfg->gpus_per_node, tk->E, (size_t)(B / N + 1) * tk->k, err);
	res->layer_s = calloc(res->n_steps, sizeof(double));
	res->a2a_s = calloc(res->n_steps, sizeof(double));
	res->compute_s = calloc(res->n_steps, sizeof(double));
	if (!rc && (!res->layer_s || !res->a2a_s || !res->compute_s))
		rc = locus_error_set(err, ENOMEM, "out of memory");
	for (uint32_t st = 0; !rc && st < res->n_steps; st++) {
		for (uint32_t l = 0; !rc && l < tk->L; l++) {
			struct locus_sim_moe_time t;

			rc = step_layer(cfg, &s, st, l, rows, err);
			if (rc)
				break;
			locus_sim_moe_layer_time(&cfg->hw, &s.c, &t);
			mm += load_mm(&s.c);
			res->layer_s[st] += t.layer_s / tk->L;
			res->a2a_s[st] += t.a2a_s / tk->L;
			res->compute_s[st] += t.compute_s / tk->L;
		}
	}
	if (!rc) {
		res->rows_gpu = rows[0] / ((double)res->n_steps * B * tk->L);
		res->rows_node = rows[1] / ((double)res->n_steps * B * tk->L);
		res->load_mm = mm / ((double)res->n_steps * tk->L);
	} else {
		locus_sim_moe_result_free(res);
	}
	scratch_free(&s);
	return rc;
}
