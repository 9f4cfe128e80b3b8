// SPDX-License-Identifier: MIT
/*
 * eldr_quality's decoder batches: requests arrive in rounds of K * B, every
 * policy places each round, and the batches are scored by the distinct
 * (layer, expert) pairs their decode steps read.
 */
#include <string.h>

#include "eldr_quality.h"

/* A fresh generation of the seen-stamps (no memset per step). */
static uint32_t next_stamp(struct qsim *s)
{
	if (++s->stamp == 0) {
		memset(s->seen, 0, sizeof(*s->seen) * s->t->n_layers * s->t->n_experts);
		s->stamp = 1;
	}
	return s->stamp;
}

/* Distinct pairs of the tok-th generated tokens of batch[n] (one decode step). */
static uint32_t step_pairs(struct qsim *s, const uint32_t *batch, uint32_t n, uint32_t tok)
{
	const struct locus_trace *t = s->t;
	uint32_t st = next_stamp(s), cnt = 0;

	for (uint32_t i = 0; i < n; i++) {
		const struct locus_trace_req *r = &t->reqs[batch[i]];

		for (uint32_t l = 0; l < t->n_layers; l++) {
			const uint16_t *ids = locus_trace_tok(t, r->gen, tok, l);

			for (uint32_t k = 0; k < t->k; k++) {
				uint32_t f = l * t->n_experts + ids[k];

				cnt += s->seen[f] != st;
				s->seen[f] = st;
			}
		}
	}
	return cnt;
}

/* Per decode step, averaged over the steps every request of the batch has. */
static double pairs_per_step(struct qsim *s, const uint32_t *batch, uint32_t n)
{
	uint32_t steps = UINT32_MAX;
	uint64_t cnt = 0;

	for (uint32_t i = 0; i < n; i++)
		if (s->t->reqs[batch[i]].gen_len < steps)
			steps = s->t->reqs[batch[i]].gen_len;
	if (steps && steps != UINT32_MAX && s->steps && s->steps->bits && n <= QSTEPS_MAX_BATCH)
		cnt = qsteps_pairs(s->steps, batch, n, steps);
	else
		for (uint32_t tok = 0; tok < steps; tok++)
			cnt += step_pairs(s, batch, n, tok);
	return steps ? (double)cnt / steps : 0;
}

/* Distinct pairs of all the generated tokens of a batch. */
static uint32_t whole_pairs(struct qsim *s, const uint32_t *batch, uint32_t n)
{
	const struct locus_trace *t = s->t;
	uint32_t st = next_stamp(s), cnt = 0;

	for (uint32_t i = 0; i < n; i++) {
		const struct locus_trace_req *r = &t->reqs[batch[i]];

		for (uint32_t tok = 0; tok < r->gen_len; tok++)
			for (uint32_t l = 0; l < t->n_layers; l++) {
				const uint16_t *ids = locus_trace_tok(t, r->gen, tok, l);

				for (uint32_t k = 0; k < t->k; k++) {
					uint32_t f = l * t->n_experts + ids[k];

					cnt += s->seen[f] != st;
					s->seen[f] = st;
				}
			}
	}
	return cnt;
}

/*
 * Oracle: decoders split evenly among the labelled domains (d mod domains);
 * the least-filled decoder of the request's domain, else (capped, all full)
 * the least-filled decoder with room. Unlabelled: the least-filled decoder.
 */
static uint32_t domain_pick(const struct qsim *s, uint32_t req, int capped)
{
	uint32_t dom = s->t->reqs[req].domain - 1; /* 0 = unlabelled */
	uint32_t nd = s->t->n_domains - 1, best = UINT32_MAX, dst = 0;

	for (uint32_t d = 0; d < s->K; d++) {
		int mine = nd && d % nd == dom % nd;
		uint32_t key = s->fill[d] + (mine ? 0 : 1000000);

		if ((!capped || s->fill[d] < s->B) && key < best) {
			best = key;
			dst = d;
		}
	}
	return dst;
}

/* One round req[K * B] under policy p; capped adds its batches' figures. */
static int route_round(struct qsim *s, int p, const uint32_t *req, int capped, int want_whole,
		       struct qfig *f)
{
	const uint32_t K = s->K, B = s->B;
	struct locus_eldr_router *r = s->r[p];
	uint32_t max = 0;

	memset(s->fill, 0, sizeof(*s->fill) * K);
	for (uint32_t d = 0; r && d < K; d++) {
		locus_eldr_router_set_load(r, d, 0);
		locus_eldr_router_set_up(r, d, 1);
	}
	for (uint32_t i = 0; i < K * B; i++) {
		uint32_t dst;

		if (p == QPOL_RR) {
			dst = i % K;
		} else if (p == QPOL_DOMAIN) {
			dst = domain_pick(s, req[i], capped);
		} else {
			struct locus_eldr_decision dec;

			if (locus_eldr_route(r, s->sigs + (size_t)req[i] * s->slen, s->slen,
					     &dec) < 0)
				return -1;
			dst = dec.slot;
		}
		if (capped)
			s->batch[dst * B + s->fill[dst]] = req[i];
		s->fill[dst]++;
		if (capped && r && s->fill[dst] == B)
			locus_eldr_router_set_up(r, dst, 0);
	}
	for (uint32_t d = 0; d < K; d++) {
		if (capped) {
			f->step[p] += pairs_per_step(s, s->batch + d * B, B);
			if (want_whole)
				f->whole[p] += whole_pairs(s, s->batch + d * B, B);
		} else {
			s->total[p * K + d] += s->fill[d];
			if (s->fill[d] > max)
				max = s->fill[d];
		}
	}
	if (!capped)
		f->load[p] += (double)max / B;
	return 0;
}

int qsim_run(struct qsim *s, const uint32_t *seq, uint32_t n, int want_whole, struct qfig *f)
{
	const uint32_t rounds = n / (s->K * s->B);

	memset(f, 0, sizeof(*f));
	memset(s->total, 0, sizeof(*s->total) * QPOL_N * s->K);
	for (uint32_t rd = 0; rd < rounds; rd++)
		for (int p = 0; p < QPOL_N; p++)
			for (int capped = 0; (!s->only || s->only & 1u << p) &&
			     (p < QPOL_ELDR || s->r[p]) && capped < 2; capped++)
				if (route_round(s, p, seq + (size_t)rd * s->K * s->B, capped,
						want_whole, f) < 0)
					return -1;
	for (int p = 0; rounds && p < QPOL_N; p++) {
		uint32_t max = 0;

		for (uint32_t d = 0; d < s->K; d++)
			if (s->total[p * s->K + d] > max)
				max = s->total[p * s->K + d];
		f->share[p] = (double)max * s->K / ((double)rounds * s->K * s->B);
		f->step[p] /= (double)rounds * s->K;
		f->whole[p] /= (double)rounds * s->K;
		f->load[p] /= rounds;
	}
	return (int)rounds;
}

/*
 * One capped round as the oracle fills it, then improved with the decode
 * tokens known: swap two requests of different batches whenever that lowers
 * the sum of the two batches' pairs per step, until a pass over every pair
 * of requests changes nothing (at most 50 passes). Adds both sums / K.
 */
static void swap_round(struct qsim *s, const uint32_t *req, double *oracle, double *best)
{
	const uint32_t K = s->K, B = s->B;
	double *cost = s->cost, sum = 0;
	int moved = 1;

	memset(s->fill, 0, sizeof(*s->fill) * K);
	for (uint32_t i = 0; i < K * B; i++) {
		uint32_t d = domain_pick(s, req[i], 1);

		s->batch[d * B + s->fill[d]++] = req[i];
	}
	for (uint32_t d = 0; d < K; d++) {
		cost[d] = pairs_per_step(s, s->batch + d * B, B);
		sum += cost[d];
	}
	*oracle += sum / K;
	for (int pass = 0; moved && pass < 50; pass++) {
		moved = 0;
		for (uint32_t x = 0; x < K * B; x++)
			for (uint32_t y = (x / B + 1) * B; y < K * B; y++) {
				uint32_t a = x / B, b = y / B, tmp = s->batch[x];
				double ca, cb;

				s->batch[x] = s->batch[y];
				s->batch[y] = tmp;
				ca = pairs_per_step(s, s->batch + a * B, B);
				cb = pairs_per_step(s, s->batch + b * B, B);
				if (ca + cb < cost[a] + cost[b] - 1e-9) {
					sum += ca + cb - cost[a] - cost[b];
					cost[a] = ca;
					cost[b] = cb;
					moved = 1;
				} else {
					s->batch[y] = s->batch[x];
					s->batch[x] = tmp;
				}
			}
	}
	*best += sum / K;
}

int qsim_swap_search(struct qsim *s, const uint32_t *seq, uint32_t n, double *oracle,
		     double *best)
{
	const uint32_t rounds = n / (s->K * s->B);

	*oracle = 0;
	*best = 0;
	for (uint32_t rd = 0; rd < rounds; rd++)
		swap_round(s, seq + (size_t)rd * s->K * s->B, oracle, best);
	if (rounds) {
		*oracle /= rounds;
		*best /= rounds;
	}
	return (int)rounds;
}
