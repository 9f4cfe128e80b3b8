// SPDX-License-Identifier: MIT
#include <math.h>

#include "fuzz.h"
#include "fuzz_eldr_common.h"

struct locus_eldr_router *fe_router(const void *payload, size_t len, enum locus_eldr_path path,
				    void **mem)
{
	size_t n = locus_eldr_router_mem_size(payload, len);
	struct locus_eldr_router *r = NULL;
	struct locus_error err = { 0 };

	*mem = NULL;
	if (!n || posix_memalign(mem, 64, n))
		return NULL;
	if (locus_eldr_router_build(*mem, n, payload, len, path, &r, &err) < 0) {
		free(*mem);
		*mem = NULL;
		FUZZ_CHECK(0, "a validated payload does not build a %s router: %s",
			   locus_eldr_path_name(path), err.msg);
	}
	return r;
}

/* Slot s is allowed by the signature's mask. */
static int allowed_slot(const struct locus_eldr_tbl_view *v, const struct locus_eldr_sig_hdr *h,
			uint32_t s)
{
	uint32_t id = v->decoder_ids[s];

	return !h->allowed_decoders || (id < 64 && (h->allowed_decoders >> id & 1));
}

void fe_check_decision(const struct locus_eldr_tbl_view *v, const void *sig, int rc,
		       const struct locus_eldr_decision *d, const float *scores, const uint8_t *up)
{
	const struct locus_eldr_sig_hdr *h = sig;
	const struct locus_eldr_tbl_hdr *th = v->hdr;
	uint32_t K = th->n_decoders, n_cand = 0, n_elig = 0;
	float best = -INFINITY, anchor = -INFINITY, tau = th->tau;
	float wide = th->spill_tau > tau ? th->spill_tau : tau;
	int spread = !!(th->flags & LOCUS_ELDR_TBL_F_OVERFLOW_SPREAD);

	for (uint32_t s = 0; s < K; s++) {
		FUZZ_CHECK(isfinite(scores[s]) && fabsf(scores[s]) <= 1.001f, "score %g of slot %u",
			   (double)scores[s], s);
		if (!allowed_slot(v, h, s))
			continue;
		if (scores[s] > anchor)
			anchor = scores[s];
		if (up[s]) {
			n_elig++;
			if (scores[s] > best)
				best = scores[s];
		}
	}
	if (!n_elig) {
		FUZZ_CHECK(rc == -LOCUS_ENODEST, "no eligible decoder, route returned %d", rc);
		return;
	}
	if (!spread)
		anchor = best;
	FUZZ_CHECK(rc == 0, "an eligible decoder exists, route returned %d", rc);
	FUZZ_CHECK(d->slot < K && d->decoder_id == v->decoder_ids[d->slot],
		   "decision slot %u decoder %u", d->slot, d->decoder_id);
	FUZZ_CHECK(up[d->slot], "routed to a decoder that is down");
	FUZZ_CHECK(allowed_slot(v, h, d->slot), "decoder %u is outside the signature's mask 0x%llx",
		   d->decoder_id, (unsigned long long)h->allowed_decoders);
	FUZZ_CHECK(d->similarity == scores[d->slot] && d->best == best,
		   "decision scores %g/%g, router scores %g/%g", (double)d->similarity,
		   (double)d->best, (double)scores[d->slot], (double)best);
	for (uint32_t s = 0; s < K; s++)
		n_cand += up[s] && scores[s] >= anchor - tau && allowed_slot(v, h, s);
	if (!n_cand) {
		FUZZ_CHECK(spread, "no decoder up in the band without the overflow spread");
		FUZZ_CHECK(d->n_candidates == n_elig, "%u candidates reported, %u eligible",
			   d->n_candidates, n_elig);
		return;
	}
	FUZZ_CHECK(d->similarity >= anchor - wide, "chosen %g outside the band %g - %g",
		   (double)d->similarity, (double)anchor, (double)wide);
	FUZZ_CHECK(d->n_candidates == n_cand, "%u candidates reported, %u in the band",
		   d->n_candidates, n_cand);
}

size_t fe_sig(void *buf, uint16_t L, uint16_t E, uint32_t e, uint64_t allowed)
{
	struct locus_eldr_sig_hdr *h = buf;
	uint16_t *c = (uint16_t *)(h + 1);

	*h = (struct locus_eldr_sig_hdr){ .magic = LOCUS_ELDR_SIG_MAGIC,
					  .version = LOCUS_ELDR_SIG_VERSION, .n_layers = L,
					  .n_experts = E, .prompt_tokens = 7,
					  .allowed_decoders = allowed };
	memset(c, 0, (size_t)L * E * 2);
	if (e != UINT32_MAX)
		for (uint32_t l = 0; l < L; l++) {
			c[(size_t)l * E + e % E] += 5;
			c[(size_t)l * E + (e + 1 + l) % E] += 2;
		}
	return locus_eldr_sig_len(L, E);
}
