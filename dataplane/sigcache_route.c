// SPDX-License-Identifier: MIT
/*
 * A prompt's sum over the signature cache (locus_sigcache_prompt_sum): the
 * deepest prefix checkpoint the prompt names, the cached blocks after it,
 * the new blocks; checkpoints written where the whole prefix is known.
 */
#include <string.h>

#include "sigcache_priv.h"

/*
 * The deepest checkpoint among cached[C-1], cached[2C-1], ... stored at its
 * own index: its slot (made the most recent, counted) and *depth, or SC_NIL.
 * One stored at another index names another prefix (hashes not chained):
 * counted and passed over.
 */
static uint32_t deepest_checkpoint(struct locus_sigcache *c, const uint64_t *cached, uint32_t n,
				   uint32_t *depth)
{
	const uint32_t C = c->p.checkpoint_blocks;

	if (!C || !c->ck.n_slots)
		return SC_NIL;
	for (uint32_t q = n / C; q > 0; q--) {
		uint32_t p = q * C - 1, b = sc_find(c, &c->ck, cached[p]), i;

		if (b == SC_NIL)
			continue;
		i = c->ck.bucket[b] - 1;
		if (c->ck.slot[i].depth != p) {
			c->st.ckpt_mismatch++;
			continue;
		}
		sc_touch(&c->ck, i);
		c->st.ckpt_hits++;
		*depth = p;
		return i;
	}
	return SC_NIL;
}

/* Block index p's sum is complete and p is a checkpoint's place: store it. */
static void maybe_checkpoint(struct locus_sigcache *c, uint64_t hash, uint32_t p, int known,
			     const uint16_t *sum)
{
	const uint32_t C = c->p.checkpoint_blocks;

	if (C && known && (p + 1) % C == 0)
		locus_sigcache_checkpoint_insert(c, hash, p, sum);
}

void locus_sigcache_prompt_sum(struct locus_sigcache *c, const struct locus_sigcache_prompt *pr,
			       uint16_t *sum, struct locus_sigcache_prompt_sum *out)
{
	uint32_t depth = 0, from = 0, i, ck = deepest_checkpoint(c, pr->cached, pr->n_cached,
								 &depth);
	int prefix_known = 1;

	out->known = out->summed = out->from_checkpoint = 0;
	if (ck != SC_NIL) {
		memcpy(sum, sc_data(&c->ck, ck), c->cells * 2);
		from = depth + 1;
		out->known = out->from_checkpoint = from;
	} else {
		memset(sum, 0, c->cells * 2);
	}
	/* under the checkpoint: looked up for recency and the counters, not summed */
	for (i = 0; i < from; i++)
		locus_sigcache_touch(c, pr->cached[i]);
	for (; i < pr->n_cached; i++) {
		if (locus_sigcache_add(c, pr->cached[i], sum)) {
			out->known++;
			out->summed++;
		} else {
			prefix_known = 0;
		}
		maybe_checkpoint(c, pr->cached[i], i, prefix_known, sum);
	}
	for (uint32_t j = 0; j < pr->n_new; j++) {
		const uint8_t *blk = pr->new_blocks + (size_t)j * pr->new_stride;
		uint64_t h;

		memcpy(&h, blk, 8);
		c->sum(sum, blk + 8, c->cells);
		maybe_checkpoint(c, h, pr->n_cached + j, prefix_known, sum);
	}
	/* the serving engine holds these KV blocks whatever the route's outcome */
	for (uint32_t j = 0; j < pr->n_new; j++) {
		const uint8_t *blk = pr->new_blocks + (size_t)j * pr->new_stride;
		uint64_t h;

		memcpy(&h, blk, 8);
		locus_sigcache_insert(c, h, blk + 8);
	}
}
