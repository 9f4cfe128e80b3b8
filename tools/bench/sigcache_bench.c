// SPDX-License-Identifier: MIT
/*
 * Signature cache benchmark, engine level (figures printed, never
 * asserted): routes/s of a ROUTE_BLOCKS with 90 % of the prompt in cached
 * blocks, with prefix checkpoints every 8 blocks and without, against a
 * ROUTE of the full signature, alternating slices in the same run, one
 * thread pinned to one CPU (the engine lcore's share).
 *
 * What each side does is what the engine does for it, with the same
 * library calls, minus the rings:
 *   full:   read the 32-byte header privately, locus_eldr_route_split on
 *           the counts in place, copy header + counts into an inbox;
 *   blocks: copy the request's prefix (header, cached hashes, new blocks,
 *           tail header) privately, locus_blocks_hdr_check and _body_check,
 *           locus_sigcache_prompt_sum (every cached hash looked up; summed:
 *           with checkpoints the deepest named one and the blocks after it,
 *           without every cached block; the new blocks summed and inserted,
 *           checkpoints written) and locus_sigcache_sum_sig of the tail into
 *           a private sum, locus_eldr_route_split on it, the sum into an inbox.
 * Two caches, one per side (checkpoints every 8 blocks, none), the same
 * heads inserted into both.
 * Prompts (default): 2,048 tokens of 48 x 128, top-8, blocks of 16: 115
 * cached blocks (1,840 tokens, 89.8 %), 12 new blocks and a 16-token tail.
 * 64 domains share a head each (64 x 115 cached entries, 45 MB, beyond the
 * last-level cache); every request's new blocks are its own. Full
 * signatures come from a pool of 4,096 (48 MiB).
 *   sigcache_bench [CACHED_BLOCKS [DOMAINS]]   e.g. 499 16: 8,192-token prompts
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <unistd.h>

#include "locus_blocks.h"
#include "locus_eldr_priv.h"
#include "locus_eldr_router.h"
#include "locus_sigcache.h"

#define L 48
#define E 128
#define K 8
#define BT 16
#define N_NEW 12
#define TAIL 16
#define POOL 4096
#define CELLS (L * E)
#define DECODERS 16
#define CKPT 8

static uint32_t N_CACHED = 115; /* argv[1]: cached blocks per prompt */
static uint32_t DOMAINS = 64;   /* argv[2]: heads */
static uint32_t TOKENS;         /* (N_CACHED + N_NEW) x BT + TAIL */

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 11);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint8_t *make_table(size_t *len)
{
	struct locus_eldr_tbl_layout lay;
	uint32_t *ids;
	uint8_t *p, *mask;
	float *idf, *cen;

	locus_eldr_tbl_layout(L, E, DECODERS, &lay);
	p = aligned_alloc(64, LOCUS_ALIGN_UP(lay.len, 64));
	if (!p || locus_eldr_tbl_init(p, lay.len, L, E, DECODERS, 0.1f, &ids, &mask, &idf, &cen))
		abort();
	for (int l = 0; l < L; l++)
		mask[l] = 1;
	((struct locus_eldr_tbl_hdr *)p)->n_masked = L;
	for (int f = 0; f < CELLS; f++)
		idf[f] = 1.0f;
	for (uint32_t d = 0; d < DECODERS; d++) {
		double n2 = 0;

		ids[d] = d;
		for (int f = 0; f < CELLS; f++) {
			float v = (float)(rnd() % 1000) / 1000.0f;

			cen[(size_t)d * CELLS + f] = v;
			n2 += (double)v * v;
		}
		for (int f = 0; f < CELLS; f++)
			cen[(size_t)d * CELLS + f] = (float)(cen[(size_t)d * CELLS + f] / sqrt(n2));
	}
	if (locus_eldr_tbl_validate(p, lay.len, NULL, NULL))
		abort();
	*len = lay.len;
	return p;
}

/* One block's counts: BT tokens, K distinct experts per layer each. */
static void random_block(uint8_t *c)
{
	memset(c, 0, CELLS);
	for (int t = 0; t < BT; t++)
		for (int l = 0; l < L; l++)
			for (int k = 0; k < K; k++)
				c[l * E + (rnd() % (E / K)) * K + k]++;
}

struct bench {
	struct locus_eldr_router *r;
	struct locus_sigcache *sc[2]; /* [0] no checkpoints, [1] every CKPT blocks */
	uint8_t *full;        /* POOL signatures */
	size_t sig_len;
	uint8_t *reqs;        /* DOMAINS x 4 requests */
	size_t req_len;
	uint32_t n_reqs;
	uint64_t next_hash;   /* new blocks' hashes: every request's its own */
	uint8_t *priv;        /* the engine's private copy */
	uint16_t *sum;
	uint64_t *scratch;
	uint8_t *inbox;
	struct locus_blocks_shape shape;
	uint64_t sink;
};

static void route_full(struct bench *b, uint32_t i)
{
	const uint8_t *sig = b->full + (size_t)(i % POOL) * b->sig_len;
	struct locus_eldr_sig_hdr sh;
	struct locus_eldr_decision d;

	memcpy(&sh, sig, sizeof(sh));
	if (locus_eldr_route_split(b->r, &sh, (const uint16_t *)(sig + sizeof(sh)), b->sig_len,
				   &d))
		abort();
	memcpy(b->inbox, &sh, sizeof(sh));
	memcpy(b->inbox + sizeof(sh), sig + sizeof(sh), b->sig_len - sizeof(sh));
	b->sink += d.decoder_id;
}

static void route_blocks(struct bench *b, uint32_t i, struct locus_sigcache *sc)
{
	uint8_t *req = b->reqs + (size_t)(i % b->n_reqs) * b->req_len;
	struct locus_sigcache_prompt_sum ps;
	struct locus_blocks_layout lay;
	struct locus_eldr_sig_hdr sh;
	struct locus_eldr_decision d;

	/* a fresh request: its new blocks get hashes no request used */
	for (uint32_t k = 0; k < N_NEW; k++) {
		uint64_t h = b->next_hash++;

		memcpy(req + 32 + N_CACHED * 8 + k * (8 + CELLS), &h, 8);
	}
	memcpy(b->priv, req, 32);
	if (locus_blocks_hdr_check((void *)b->priv, b->req_len, &b->shape, &lay, NULL))
		abort();
	memcpy(b->priv + 32, req + 32, lay.off_sig + 32 - 32);
	if (locus_blocks_body_check(b->priv, &lay, &b->shape, b->scratch, NULL, NULL))
		abort();
	memcpy(&sh, b->priv + lay.off_sig, sizeof(sh));
	locus_sigcache_prompt_sum(sc, &(struct locus_sigcache_prompt){
		.cached = locus_blocks_cached(b->priv, &lay), .n_cached = lay.n_cached,
		.new_blocks = b->priv + lay.off_new, .new_stride = lay.new_stride,
		.n_new = lay.n_new }, b->sum, &ps);
	locus_sigcache_sum_sig(sc, b->sum, (const uint16_t *)(req + lay.off_sig + 32));
	if (locus_eldr_route_split(b->r, &sh, b->sum, lay.sig_len, &d))
		abort();
	memcpy(b->inbox, &sh, sizeof(sh));
	memcpy(b->inbox + sizeof(sh), b->sum, CELLS * 2);
	b->sink += d.decoder_id + ps.known;
}

/* Routes/s of one side over secs: 0 full, 1 blocks without checkpoints, 2 with. */
static double slice(struct bench *b, int side, double secs, uint32_t *cursor)
{
	double t0 = now(), dt;
	uint32_t n = 0;

	do {
		for (int rep = 0; rep < 32; rep++, n++) {
			uint32_t i = (*cursor)++ * 2654435761u;

			if (side)
				route_blocks(b, i, b->sc[side - 1]);
			else
				route_full(b, i);
		}
		dt = now() - t0;
	} while (dt < secs);
	for (uint32_t d = 0; d < DECODERS; d++)
		locus_eldr_router_set_load(b->r, d, 0);
	return n / dt;
}

int main(int argc, char **argv)
{
	struct bench b = { .shape = { L, E, BT, K } };
	struct locus_sigcache_params sp = { .n_layers = L, .n_experts = E, .top_k = K,
					    .block_tokens = BT, .capacity_bytes = 96ull << 20 };
	struct locus_sigcache_stats st;
	uint16_t ids[TAIL * L * K];
	uint8_t *blk = malloc(CELLS), *tbl;
	size_t tlen;
	double full_best = 0, best[2] = { 0, 0 };
	uint32_t cf = 0, cb[2] = { 0, 0 };
	uint16_t *ref = malloc(CELLS * 2);
	cpu_set_t set;
	int cpu;
	void *rmem;

	if (argc > 1)
		N_CACHED = (uint32_t)strtoul(argv[1], NULL, 10);
	if (argc > 2)
		DOMAINS = (uint32_t)strtoul(argv[2], NULL, 10);
	if (N_CACHED < 1 || N_CACHED > LOCUS_BLOCKS_MAX_CACHED || DOMAINS < 1 || DOMAINS > 4096) {
		fprintf(stderr, "usage: sigcache_bench [CACHED_BLOCKS (1..%u, 115)] "
			"[DOMAINS (1..4096, 64)]\n", LOCUS_BLOCKS_MAX_CACHED);
		return 2;
	}
	TOKENS = (N_CACHED + N_NEW) * BT + TAIL;
	CPU_ZERO(&set);
	cpu = sysconf(_SC_NPROCESSORS_ONLN) > 1 ? 1 : 0;
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		cpu = -1;
	tbl = make_table(&tlen);
	rmem = aligned_alloc(64, LOCUS_ALIGN_UP(locus_eldr_router_mem_size(tbl, tlen), 64));
	if (!rmem || locus_eldr_router_build(rmem, locus_eldr_router_mem_size(tbl, tlen), tbl,
					     tlen, LOCUS_ELDR_PATH_AUTO, &b.r, NULL) ||
	    locus_sigcache_create(&sp, &b.sc[0], NULL))
		abort();
	sp.checkpoint_blocks = CKPT;
	if (locus_sigcache_create(&sp, &b.sc[1], NULL))
		abort();
	for (uint32_t d = 0; d < DECODERS; d++)
		locus_eldr_router_set_up(b.r, d, 1);
	b.sig_len = locus_eldr_sig_len(L, E);
	b.full = aligned_alloc(64, POOL * b.sig_len);
	for (uint32_t i = 0; i < POOL; i++) {
		uint8_t *s = b.full + (size_t)i * b.sig_len;
		uint16_t *c = (uint16_t *)(s + 32);

		*(struct locus_eldr_sig_hdr *)s = (struct locus_eldr_sig_hdr){
			.magic = LOCUS_ELDR_SIG_MAGIC, .version = LOCUS_ELDR_SIG_VERSION,
			.n_layers = L, .n_experts = E, .prompt_tokens = TOKENS };
		for (int x = 0; x < CELLS; x++)
			c[x] = (uint16_t)(rnd() % 200);
	}
	/* the domains' heads, cached; 4 requests per domain (their tails differ) */
	b.req_len = locus_blocks_req_len(L, E, N_CACHED, N_NEW);
	b.n_reqs = DOMAINS * 4;
	b.reqs = aligned_alloc(64, LOCUS_ALIGN_UP(b.n_reqs * b.req_len, 64));
	for (uint32_t dom = 0; dom < DOMAINS; dom++) {
		uint64_t head[N_CACHED], nh[N_NEW];
		static uint8_t nc[N_NEW * CELLS];
		static uint8_t tail[32 + CELLS * 2] __attribute__((aligned(8)));

		for (uint32_t k = 0; k < N_CACHED; k++) {
			head[k] = ((uint64_t)dom << 32) | k;
			random_block(blk);
			locus_sigcache_insert(b.sc[0], head[k], blk);
			locus_sigcache_insert(b.sc[1], head[k], blk);
		}
		for (uint32_t q = 0; q < 4; q++) {
			for (uint32_t k = 0; k < N_NEW; k++) {
				nh[k] = 0;
				random_block(nc + k * CELLS);
			}
			for (int x = 0; x < TAIL * L * K; x++)
				ids[x] = (uint16_t)(rnd() % E);
			locus_eldr_sig_build(tail, sizeof(tail), L, E, K, ids, TAIL, 0, NULL);
			if (locus_blocks_build(b.reqs + (size_t)(dom * 4 + q) * b.req_len, b.req_len,
					       &(struct locus_blocks_route){
						       .block_tokens = BT, .n_cached = N_CACHED,
						       .cached = head, .n_new = N_NEW,
						       .new_hashes = nh, .new_counts = nc,
						       .tail = tail }, NULL) < 0)
				abort();
		}
	}
	b.next_hash = 1ull << 63;
	b.priv = aligned_alloc(64, LOCUS_ALIGN_UP(b.req_len, 64));
	b.sum = aligned_alloc(64, CELLS * 2);
	b.scratch = malloc(8 * (N_CACHED + N_NEW));
	b.inbox = aligned_alloc(64, LOCUS_ALIGN_UP(b.sig_len, 64));
	locus_sigcache_stats(b.sc[0], &st);
	printf("engine level, one thread pinned to CPU %d (no ring, no client), router path %s, "
	       "K=%u decoders\n", cpu, locus_eldr_path_name(locus_eldr_router_path(b.r)), DECODERS);
	printf("prompt %u tokens, %ux%u top-%u, blocks of %u: %u cached (%.1f %%), %u new, "
	       "tail %u; cache %llu entries of %zu B (%.1f MB of heads)\n", TOKENS, L, E, K, BT,
	       N_CACHED, 100.0 * N_CACHED * BT / TOKENS, N_NEW, TAIL, (unsigned long long)st.capacity,
	       locus_sigcache_entry_bytes(&sp), st.entries * locus_sigcache_entry_bytes(&sp) / 1e6);
	locus_sigcache_stats(b.sc[1], &st);
	printf("with checkpoints every %u blocks: %llu entries + %llu checkpoints of %zu B in the "
	       "same %llu MiB\n", CKPT, (unsigned long long)st.capacity,
	       (unsigned long long)st.ckpt_capacity, locus_sigcache_checkpoint_bytes(&sp),
	       (unsigned long long)(sp.capacity_bytes >> 20));
	/* the first pass writes the heads' checkpoints; then both sums must agree */
	for (uint32_t i = 0; i < 2 * b.n_reqs; i++) {
		route_blocks(&b, i, b.sc[0]);
		memcpy(ref, b.sum, CELLS * 2);
		route_blocks(&b, i, b.sc[1]);
		if (memcmp(ref, b.sum, CELLS * 2)) {
			fprintf(stderr, "sigcache_bench: request %u: the sums differ\n", i);
			return 1;
		}
	}
	/* warm up, then alternate slices; the best slice of each */
	slice(&b, 0, 0.1, &cf);
	slice(&b, 1, 0.1, &cb[0]);
	slice(&b, 2, 0.1, &cb[1]);
	for (int s = 0; s < 10; s++) {
		double f = slice(&b, 0, 0.2, &cf);

		full_best = f > full_best ? f : full_best;
		for (int k = 0; k < 2; k++) {
			double r = slice(&b, 1 + k, 0.2, &cb[k]);

			best[k] = r > best[k] ? r : best[k];
		}
	}
	printf("every sum of %u requests equal with and without checkpoints\n", 2 * b.n_reqs);
	printf("full signature ROUTE                         %10.0f routes/s\n", full_best);
	for (int k = 0; k < 2; k++) {
		struct locus_sigcache_stats s0;
		uint64_t routes;

		locus_sigcache_stats(b.sc[k], &s0);
		routes = s0.hits / N_CACHED;
		printf("ROUTE_BLOCKS, %.1f %% cached, %-15s %10.0f routes/s  (%.2fx the full "
		       "route; %.1f cached blocks summed per route)\n", 100.0 * N_CACHED * BT / TOKENS,
		       k ? "checkpoints 8" : "no checkpoints", best[k], best[k] / full_best,
		       routes ? (double)s0.summed / routes : 0.0);
		printf("  cache: %llu hits, %llu misses, %llu inserts, %llu LRU evictions; "
		       "checkpoints: %llu used, %llu written, %llu LRU evictions\n",
		       (unsigned long long)s0.hits, (unsigned long long)s0.misses,
		       (unsigned long long)s0.inserts,
		       (unsigned long long)s0.evictions[LOCUS_SIGCACHE_EVICT_LRU],
		       (unsigned long long)s0.ckpt_hits, (unsigned long long)s0.ckpt_inserts,
		       (unsigned long long)s0.ckpt_evictions[LOCUS_SIGCACHE_EVICT_LRU]);
	}
	free(ref);
	return b.sink == 42 ? 1 : 0;
}
