// SPDX-License-Identifier: MIT
/*
 * A trace's decode steps as bitsets over (layer, expert): the distinct pairs
 * a batch reads in one step are the population count of its requests'
 * bitsets ORed, a few words per request instead of a stamp per routed
 * expert (eldr_quality_sim.c's pairs per step, the tuning's inner loop).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "eldr_quality.h"

/* Past this many bytes of bitsets the stamps are used instead (no bitsets). */
#define QSTEPS_MAX_BYTES (512ull << 20)

int qsteps_build(struct qsteps *q, const struct locus_trace *t)
{
	const uint32_t LE = (uint32_t)t->n_layers * t->n_experts;
	uint64_t words = 0;

	memset(q, 0, sizeof(*q));
	q->W = (LE + 63) / 64;
	for (uint32_t i = 0; i < t->n_requests; i++)
		words += (uint64_t)t->reqs[i].gen_len * q->W;
	if (words * sizeof(uint64_t) > QSTEPS_MAX_BYTES)
		return 0;
	q->off = malloc(sizeof(*q->off) * t->n_requests);
	q->bits = calloc(words ? words : 1, sizeof(*q->bits));
	if (!q->off || !q->bits) {
		qsteps_free(q);
		return -ENOMEM;
	}
	words = 0;
	for (uint32_t i = 0; i < t->n_requests; i++) {
		const struct locus_trace_req *r = &t->reqs[i];

		q->off[i] = words;
		for (uint32_t tok = 0; tok < r->gen_len; tok++, words += q->W)
			for (uint32_t l = 0; l < t->n_layers; l++) {
				const uint16_t *ids = locus_trace_tok(t, r->gen, tok, l);

				for (uint32_t k = 0; k < t->k; k++) {
					uint32_t f = l * t->n_experts + ids[k];

					q->bits[words + f / 64] |= 1ull << (f % 64);
				}
			}
	}
	return 0;
}

void qsteps_free(struct qsteps *q)
{
	free(q->bits);
	free(q->off);
	memset(q, 0, sizeof(*q));
}

__attribute__((target_clones("popcnt", "default")))
uint64_t qsteps_pairs(const struct qsteps *q, const uint32_t *batch, uint32_t n, uint32_t steps)
{
	const uint64_t *row[QSTEPS_MAX_BATCH];
	const uint32_t W = q->W;
	uint64_t cnt = 0;

	for (uint32_t i = 0; i < n; i++)
		row[i] = q->bits + q->off[batch[i]];
	for (uint32_t tok = 0; tok < steps; tok++) {
		for (uint32_t w = 0; w < W; w++) {
			uint64_t u = 0;

			for (uint32_t i = 0; i < n; i++)
				u |= row[i][w];
			cnt += (uint64_t)__builtin_popcountll(u);
		}
		for (uint32_t i = 0; i < n; i++)
			row[i] += W;
	}
	return cnt;
}
