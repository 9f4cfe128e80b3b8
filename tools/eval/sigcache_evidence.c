// SPDX-License-Identifier: MIT
/*
 * sigcache_evidence: what the signature cache is for, on real routings.
 * Requests share a long prompt head per domain (a system prompt: the
 * first HEAD tokens of one sequence of the domain), followed by the
 * request's own prompt (a window of another sequence) and decoded tokens
 * (the window's continuation). With prefix caching the serving engine
 * computes only the request's own tokens: the head's experts are never
 * observed. Three ways to route the same held-out requests:
 *   full prompt  the whole prompt's signature (what a cache-less prefill of
 *                the whole prompt would report);
 *   cache        the head's blocks named as cached (the first request of a
 *                domain inserts them), the own tokens' full blocks new, the
 *                tail: summed as locusd does (locus_blocks_check, then
 *                locus_sigcache_add / _sum into the tail's counts). Must be
 *                byte-equal to the full prompt's signature, and so decide
 *                the same: checked for every request (exit 1 otherwise);
 *   no cache     the own tokens' signature alone (the head's counts missing),
 *                with a table fitted the same way on such signatures;
 * plus round-robin. Batches and figures as eldr_quality: rounds of K x B
 * held-out requests in a fixed arrival order, each decoder filled with B;
 * distinct (layer, expert) pairs per decode step of a batch, and over the
 * whole batch, mean over batches (fewer is better), ratio to round-robin.
 * Tables: locus_eldrfit_arrays with locusctl fit --tune off's options on the
 * calibration half's signatures of the same kind (every layer, no mask
 * search, no decode use), tau 0.1.
 *
 *   sigcache_evidence   ESFT under $LOCUS_DATA_DIR (default <repo>/../shared/data):
 *                       heads of 128 tokens, windows of 32 + 32; then the
 *                       repository's sample (heads of 96, 16 + 8)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data_paths.h"
#include "locus_blocks.h"
#include "locus_eldr_router.h"
#include "locus_eldrfit.h"
#include "locus_sigcache.h"
#include "locus_trace.h"

#define BT 16u
#define MAX_DOM 8


struct ev_req {
	uint32_t dom;
	const uint16_t *own, *gen;
	uint32_t own_len, gen_len;
};

struct ev_set {
	uint16_t L, E, k;
	uint32_t n_dom, n;
	uint16_t *head[MAX_DOM];      /* [head_len][L][k] */
	uint32_t head_len;
	struct ev_req *r;
	const char *what;
};

static size_t tok_ids(const struct ev_set *s)
{
	return (size_t)s->L * s->k;
}

/* The prompt of request i (head ++ own) into ids; its token count. */
static uint32_t prompt_of(const struct ev_set *s, uint32_t i, uint16_t *ids)
{
	const struct ev_req *q = &s->r[i];

	memcpy(ids, s->head[q->dom], s->head_len * tok_ids(s) * 2);
	memcpy(ids + s->head_len * tok_ids(s), q->own, q->own_len * tok_ids(s) * 2);
	return s->head_len + q->own_len;
}

static uint64_t block_hash(uint64_t parent, const uint16_t *ids, size_t n)
{
	const uint8_t *x = (const uint8_t *)ids;
	uint64_t h = parent ^ 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n * 2; i++)
		h = (h ^ x[i]) * 0x100000001b3ull;
	return h;
}

struct ev_cache {
	struct locus_sigcache *sc;
	uint8_t *req, *blk;
	uint64_t *scratch, *hash;
	uint16_t *sum;
	size_t req_cap;
	uint8_t inserted[MAX_DOM];
	uint64_t hits, named;
};

/*
 * Request i's signature as locusd sums it: the head's blocks cached (or new
 * the first time for the domain), the own tokens' full blocks new, the
 * tail. Written into out (a whole signature).
 */
static int cache_sig(const struct ev_set *s, struct ev_cache *c, uint32_t i, uint16_t *ids,
		     uint8_t *out, uint8_t *tail)
{
	const struct ev_req *q = &s->r[i];
	const size_t cells = (size_t)s->L * s->E, ti = tok_ids(s);
	uint32_t n = prompt_of(s, i, ids), full = n / BT, hb = s->head_len / BT;
	uint32_t n_cached = c->inserted[q->dom] ? hb : 0, found = 0;
	struct locus_blocks_shape shape = { s->L, s->E, BT, s->k };
	struct locus_blocks_layout lay;
	struct locus_eldr_sig_hdr sh;
	uint64_t parent = 0;
	long len;

	(void)q;
	for (uint32_t b = 0; b < full; b++) {
		c->hash[b] = block_hash(parent, ids + (size_t)b * BT * ti, BT * ti);
		parent = c->hash[b];
		if (b >= n_cached &&
		    locus_blocks_counts_build(c->blk + (size_t)(b - n_cached) * cells, s->L, s->E,
					      s->k, ids + (size_t)b * BT * ti, BT, NULL))
			return -1;
	}
	if (locus_eldr_sig_build(tail, locus_eldr_sig_len(s->L, s->E), s->L, s->E, s->k,
				 ids + (size_t)full * BT * ti, n - full * BT, 0, NULL) < 0)
		return -1;
	len = locus_blocks_build(c->req, c->req_cap, &(struct locus_blocks_route){
		.block_tokens = BT, .n_cached = n_cached, .cached = c->hash,
		.n_new = full - n_cached, .new_hashes = c->hash + n_cached,
		.new_counts = c->blk, .tail = tail }, NULL);
	if (len < 0 || locus_blocks_check(c->req, (size_t)len, &shape, c->scratch, &lay, NULL,
					  NULL))
		return -1;
	/* locusd's sum: tail, new blocks, cached blocks; then the new blocks cached */
	memcpy(&sh, c->req + lay.off_sig, sizeof(sh));
	memcpy(c->sum, c->req + lay.off_sig + sizeof(sh), cells * 2);
	for (uint32_t b = 0; b < lay.n_new; b++)
		locus_sigcache_sum(c->sc, c->sum, locus_blocks_new_counts(c->req, &lay, b));
	for (uint32_t b = 0; b < lay.n_cached; b++)
		found += (uint32_t)locus_sigcache_add(c->sc, locus_blocks_cached(c->req, &lay)[b],
						      c->sum);
	for (uint32_t b = 0; b < lay.n_new; b++)
		locus_sigcache_insert(c->sc, locus_blocks_new_hash(c->req, &lay, b),
				      locus_blocks_new_counts(c->req, &lay, b));
	sh.prompt_tokens += (found + lay.n_new) * BT;
	memcpy(out, &sh, sizeof(sh));
	memcpy(out + sizeof(sh), c->sum, cells * 2);
	c->inserted[s->r[i].dom] = 1;
	c->hits += found;
	c->named += n_cached;
	return 0;
}

/* Distinct (layer, expert) pairs per decode step, and over the batch (eldr_quality's). */
static void batch_pairs(const struct ev_set *s, const uint32_t *b, uint32_t n, uint8_t *seen,
			double *per_step, double *whole)
{
	const size_t LE = (size_t)s->L * s->E, ti = tok_ids(s);
	uint32_t steps = UINT32_MAX;
	uint64_t cnt = 0, all = 0;

	for (uint32_t i = 0; i < n; i++)
		steps = s->r[b[i]].gen_len < steps ? s->r[b[i]].gen_len : steps;
	for (uint32_t t = 0; t < steps; t++) {
		memset(seen, 0, LE);
		for (uint32_t i = 0; i < n; i++)
			for (size_t j = 0; j < ti; j++) {
				size_t f = (j / s->k) * s->E + s->r[b[i]].gen[t * ti + j];

				cnt += !seen[f];
				seen[f] = 1;
			}
	}
	memset(seen, 0, LE);
	for (uint32_t i = 0; i < n; i++)
		for (size_t j = 0; j < s->r[b[i]].gen_len * ti; j++) {
			size_t f = (j % ti / s->k) * s->E + s->r[b[i]].gen[j];

			all += !seen[f];
			seen[f] = 1;
		}
	*per_step += steps ? (double)cnt / steps : 0;
	*whole += (double)all;
}

enum { P_RR, P_FULL, P_CACHE, P_TAIL, P_N };
static const char *const pname[P_N] = { "round-robin", "full prompt", "cache (head cached)",
					"no cache (own only)" };

/* A router from a fit of n signatures' counts (every layer); NULL on failure. */
static struct locus_eldr_router *fit(const struct ev_set *s, const uint16_t *counts, uint32_t n,
				     uint32_t K, void **mem)
{
	struct locus_eldrfit_opts o;
	struct locus_eldrfit_result res = { 0 };
	struct locus_eldr_router *r = NULL;
	struct locus_error e = { 0 };
	size_t msz;

	/* the fit locusctl fit runs, on the signatures alone (no decode use), every layer */
	locus_eldrfit_opts_default(&o, K);
	o.seed = 1;
	o.no_mask = 1;
	if (locus_eldrfit_arrays(counts, NULL, n, s->L, s->E, NULL, NULL, 0,
				 LOCUS_ELDRFIT_SCORE_NONE, &o, &res, &e) < 0) {
		fprintf(stderr, "sigcache_evidence: fit: %s\n", e.msg);
		return NULL;
	}
	msz = locus_eldr_router_mem_size((uint8_t *)res.blob + 64, res.blob_len - 64);
	*mem = aligned_alloc(64, LOCUS_ALIGN_UP(msz, 64));
	if (!*mem || locus_eldr_router_build(*mem, msz, (uint8_t *)res.blob + 64,
					     res.blob_len - 64, LOCUS_ELDR_PATH_AUTO, &r, &e) < 0)
		r = NULL;
	locus_eldrfit_result_free(&res);
	return r;
}

static int run(const struct ev_set *s, uint32_t K, uint32_t B)
{
	const size_t cells = (size_t)s->L * s->E, slen = locus_eldr_sig_len(s->L, s->E);
	const uint32_t max_tok = s->head_len + 64;
	struct locus_sigcache_params sp = { .n_layers = s->L, .n_experts = s->E, .top_k = s->k,
					    .block_tokens = BT };
	struct ev_cache c = { 0 };
	uint32_t n_cal = 0, n_test = 0, *test, *batch, *fill, seed = 12345, rounds, n_b = 0;
	uint32_t eq_sig = 0, eq_dec = 0, n_cmp = 0;
	uint16_t *cal_full, *cal_tail, *ids;
	uint8_t *sig, *sig2, *tail, *seen;
	double step[P_N] = { 0 }, whole[P_N] = { 0 };
	struct locus_eldr_router *r_full, *r_tail;
	void *m1 = NULL, *m2 = NULL;
	uint32_t *dst_full;
	int ret = 1;

	test = calloc(s->n, sizeof(*test));
	cal_full = calloc((size_t)s->n * cells, 2);
	cal_tail = calloc((size_t)s->n * cells, 2);
	ids = malloc((size_t)max_tok * tok_ids(s) * 2);
	sig = malloc(slen);
	sig2 = malloc(slen);
	tail = aligned_alloc(8, LOCUS_ALIGN_UP(slen, 8));
	seen = malloc(cells);
	batch = malloc(sizeof(*batch) * K * B);
	dst_full = malloc(sizeof(*dst_full) * K * B);
	fill = calloc(K, sizeof(*fill));
	sp.capacity_bytes = locus_sigcache_entry_bytes(&sp) * 65536;
	c.req_cap = locus_blocks_req_len(s->L, s->E, max_tok / BT, max_tok / BT);
	c.req = aligned_alloc(8, LOCUS_ALIGN_UP(c.req_cap, 8));
	c.blk = malloc(cells * (max_tok / BT + 1));
	c.scratch = malloc(8 * (size_t)(2 * (max_tok / BT) + 2));
	c.hash = malloc(8 * (size_t)(max_tok / BT + 1));
	c.sum = malloc(cells * 2);
	if (!test || !cal_full || !cal_tail || !ids || !sig || !sig2 || !tail || !seen || !batch ||
	    !dst_full || !fill || !c.req || !c.blk || !c.scratch || !c.hash || !c.sum ||
	    locus_sigcache_create(&sp, &c.sc, NULL))
		goto out;
	for (uint32_t i = 0; i < s->n; i++) {
		uint32_t n;

		if (i % 2) {
			test[n_test++] = i;
			continue;
		}
		n = prompt_of(s, i, ids);
		locus_eldr_counts_add(cal_full + (size_t)n_cal * cells, s->L, s->E, s->k, ids, n,
				      NULL);
		locus_eldr_counts_add(cal_tail + (size_t)n_cal * cells, s->L, s->E, s->k,
				      s->r[i].own, s->r[i].own_len, NULL);
		n_cal++;
	}
	for (uint32_t i = n_test - 1; i > 0; i--) { /* a fixed arrival order */
		uint32_t j, x;

		seed = seed * 1103515245u + 12345u;
		j = (seed >> 8) % (i + 1);
		x = test[i];
		test[i] = test[j];
		test[j] = x;
	}
	r_full = fit(s, cal_full, n_cal, K, &m1);
	r_tail = fit(s, cal_tail, n_cal, K, &m2);
	if (!r_full || !r_tail)
		goto out;
	rounds = n_test / (K * B);
	for (uint32_t rd = 0; rd < rounds; rd++) {
		const uint32_t *req = test + (size_t)rd * K * B;

		for (int p = 0; p < P_N; p++) {
			struct locus_eldr_router *r = p == P_TAIL ? r_tail : r_full;

			memset(fill, 0, sizeof(*fill) * K);
			for (uint32_t d = 0; d < K; d++) {
				locus_eldr_router_set_load(r, d, 0);
				locus_eldr_router_set_up(r, d, 1);
			}
			for (uint32_t i = 0; i < K * B; i++) {
				struct locus_eldr_decision dec;
				uint32_t dst = i % K, n;

				if (p == P_FULL || p == P_CACHE) {
					n = prompt_of(s, req[i], ids);
					if (locus_eldr_sig_build(sig, slen, s->L, s->E, s->k, ids, n,
								 0, NULL) < 0)
						goto out;
				}
				if (p == P_CACHE) {
					if (cache_sig(s, &c, req[i], ids, sig2, tail))
						goto out;
					eq_sig += !memcmp(sig, sig2, slen);
					n_cmp++;
				}
				if (p == P_TAIL && locus_eldr_sig_build(sig, slen, s->L, s->E, s->k,
									s->r[req[i]].own,
									s->r[req[i]].own_len, 0,
									NULL) < 0)
					goto out;
				if (p != P_RR) {
					if (locus_eldr_route(r, p == P_CACHE ? sig2 : sig, slen,
							     &dec) < 0)
						goto out;
					dst = dec.slot;
				}
				if (p == P_FULL)
					dst_full[i] = dst;
				if (p == P_CACHE)
					eq_dec += dst == dst_full[i];
				batch[dst * B + fill[dst]++] = req[i];
				if (p != P_RR && fill[dst] == B)
					locus_eldr_router_set_up(r, dst, 0);
			}
			for (uint32_t d = 0; d < K; d++)
				batch_pairs(s, batch + d * B, B, seen, &step[p], &whole[p]);
		}
		n_b += K;
	}
	printf("K=%u decoders, batch B=%u: %u calibration / %u held-out requests, %u rounds\n", K,
	       B, n_cal, n_test, rounds);
	printf("  %-22s %-26s %s\n", "routing on", "per decode step", "whole batch");
	for (int p = 0; p < P_N; p++)
		printf("  %-22s %7.1f = %.3fx RR        %7.1f = %.3fx RR\n", pname[p],
		       step[p] / n_b, step[p] / step[P_RR], whole[p] / n_b, whole[p] / whole[P_RR]);
	printf("  cache: %llu of %llu named head blocks found; signatures equal to the full "
	       "prompt's %u/%u, decisions %u/%u\n", (unsigned long long)c.hits,
	       (unsigned long long)c.named, eq_sig, n_cmp, eq_dec, n_cmp);
	ret = eq_sig == n_cmp && eq_dec == n_cmp && n_cmp > 0 ? 0 : 1;
	if (ret)
		fprintf(stderr, "sigcache_evidence: the cache's signatures or decisions differ "
				"from the full prompt's\n");
out:
	free(m1);
	free(m2);
	locus_sigcache_destroy(c.sc);
	free(c.req);
	free(c.blk);
	free(c.scratch);
	free(c.hash);
	free(c.sum);
	free(test);
	free(cal_full);
	free(cal_tail);
	free(ids);
	free(sig);
	free(sig2);
	free(tail);
	free(seen);
	free(batch);
	free(dst_full);
	free(fill);
	return ret;
}

static int add_req(struct ev_set *s, uint32_t dom, const uint16_t *own, uint32_t own_len,
		   const uint16_t *gen, uint32_t gen_len, uint32_t *cap)
{
	if (s->n == *cap) {
		void *a = realloc(s->r, sizeof(*s->r) * (*cap ? *cap * 2 : 256));

		if (!a)
			return -1;
		s->r = a;
		*cap = *cap ? *cap * 2 : 256;
	}
	s->r[s->n++] = (struct ev_req){ .dom = dom, .own = own, .own_len = own_len, .gen = gen,
					.gen_len = gen_len };
	return 0;
}

/*
 * ESFT: per domain the head is the first 128 tokens of its first sequences
 * one after the other (intent's are short); requests are 64-token windows
 * (32 own + 32 decoded) of its other sequences. 0, or -1 when the data is
 * absent or not as its README says.
 */
static int load_esft(const char *base, struct ev_set *s, struct locus_trace **src,
		     uint16_t **heads)
{
	struct locus_error e = { 0 };
	uint32_t cap = 0;
	char dir[4096];

	*s = (struct ev_set){ .L = 26, .E = 64, .k = 6, .n_dom = 4, .head_len = 128,
			      .what = "ESFT (full data)" };
	for (int d = 0; d < 4; d++) {
		uint32_t got = 0, used = 0;

		snprintf(dir, sizeof(dir), "%s/esft/results/expert_scores/%s", base,
			 locus_trace_esft_domains[d]);
		if (locus_trace_load_esft(dir, locus_trace_esft_domains[d], 26, 6, 64, &src[d], &e) < 0) {
			if (access(dir, R_OK) == 0)
				fprintf(stderr, "sigcache_evidence: %s\n", e.msg);
			return -1;
		}
		heads[d] = s->head[d] = malloc((size_t)s->head_len * tok_ids(s) * 2);
		if (!heads[d])
			return -1;
		for (; used < src[d]->n_requests && got < s->head_len; used++) {
			const struct locus_trace_req *q = &src[d]->reqs[used];
			uint32_t n = LOCUS_MIN(q->prompt_len, s->head_len - got);

			memcpy(heads[d] + (size_t)got * tok_ids(s), q->prompt, n * tok_ids(s) * 2);
			got += n;
		}
		if (got < s->head_len) {
			fprintf(stderr, "sigcache_evidence: %s: fewer than %u tokens\n", dir,
				s->head_len);
			return -1;
		}
		for (uint32_t r = used; r < src[d]->n_requests; r++) {
			const struct locus_trace_req *q = &src[d]->reqs[r];

			for (uint32_t w = 0; w + 64 <= q->prompt_len; w += 64)
				if (add_req(s, (uint32_t)d, locus_trace_tok(src[d], q->prompt, w, 0),
					    32, locus_trace_tok(src[d], q->prompt, w + 32, 0), 32,
					    &cap))
					return -1;
		}
	}
	return 0;
}

/* The repository's sample: heads of 6 of the domain's 16-token prompts, requests 16 + 8. */
static int load_sample(const char *path, struct ev_set *s, struct locus_trace **t,
		       uint16_t **heads)
{
	struct locus_error e = { 0 };
	uint32_t cap = 0;

	if (locus_trace_load(path, NULL, t, &e) < 0) {
		fprintf(stderr, "sigcache_evidence: %s\n", e.msg);
		return -1;
	}
	*s = (struct ev_set){ .L = (*t)->n_layers, .E = (*t)->n_experts, .k = (*t)->k,
			      .n_dom = (*t)->n_domains - 1, .head_len = 96,
			      .what = "the repository's sample" };
	if (s->n_dom < 1 || s->n_dom > MAX_DOM)
		return -1;
	for (uint32_t d = 0; d < s->n_dom; d++) {
		uint32_t got = 0;

		heads[d] = s->head[d] = malloc((size_t)s->head_len * tok_ids(s) * 2);
		if (!heads[d])
			return -1;
		for (uint32_t r = 0; r < (*t)->n_requests && got < s->head_len / BT; r++)
			if ((*t)->reqs[r].domain == d + 1 && (*t)->reqs[r].prompt_len >= BT)
				memcpy(heads[d] + (size_t)got++ * BT * tok_ids(s),
				       (*t)->reqs[r].prompt, BT * tok_ids(s) * 2);
		if (got < s->head_len / BT)
			return -1;
	}
	for (uint32_t r = 0; r < (*t)->n_requests; r++) {
		const struct locus_trace_req *q = &(*t)->reqs[r];

		if (q->domain && q->gen_len && add_req(s, q->domain - 1, q->prompt, q->prompt_len,
						       q->gen, q->gen_len, &cap))
			return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct locus_trace *src[4] = { 0 }, *t = NULL;
	uint16_t *heads[MAX_DOM] = { 0 };
	struct ev_set s = { 0 };
	char dir[2048];
	int ret = 0, sample_only = argc > 1 && !strcmp(argv[1], "--sample");

	locus_data_find_root(argv[0]);
	snprintf(dir, sizeof(dir), "%.2000s", locus_data_dir());
	if (sample_only) {
		printf("ESFT: skipped (--sample)\n");
	} else if (load_esft(dir, &s, src, heads) == 0) {
		printf("%s under %s: %u requests, heads of %u tokens (%u blocks of %u) shared per "
		       "domain, 32 own prompt tokens, 32 decoded\n", s.what, dir, s.n, s.head_len,
		       s.head_len / BT, BT);
		ret |= run(&s, 4, 4);
		ret |= run(&s, 8, 4);
		ret |= run(&s, 4, 8);
	} else {
		printf("ESFT: skipped (%s/esft/results/expert_scores not readable, or not as "
		       "described in its README: see the message above)\n", dir);
	}
	free(s.r);
	for (int d = 0; d < 4; d++) {
		locus_trace_free(src[d]);
		free(heads[d]);
		heads[d] = NULL;
	}
	if (load_sample(locus_data_sample_path(), &s, &t, heads) == 0) {
		printf("%s: %u requests, heads of %u tokens shared per domain, %u own prompt "
		       "tokens, %u decoded\n", s.what, s.n, s.head_len, s.r[0].own_len,
		       s.r[0].gen_len);
		ret |= run(&s, 4, 4);
	} else {
		ret = 1;
	}
	free(s.r);
	for (uint32_t d = 0; d < MAX_DOM; d++)
		free(heads[d]);
	locus_trace_free(t);
	return ret;
}
