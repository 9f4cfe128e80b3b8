// SPDX-License-Identifier: MIT
/*
 * ELDR benchmarks (figures printed, never asserted):
 *  1. routing decisions/s on one core, L=48 E=128, K=16 and K=64, mask of
 *     12 layers and no mask (and K=16 unmasked again with long prompts'
 *     counts), per kernel path (the 16-bit paths, the 8-bit ones "-i8", and
 *     the float reference kernels, "f32"),
 *     against a naive scalar double loop (double precision, table layout
 *     as stored) and against merely reading the 12 KiB of each signature,
 *     in the same run;
 *  2. fit time for N=1,000 synthetic signatures of 48 x 128, K=16, against
 *     plain (unbalanced) Lloyd iterations on the same vectors; and
 *     locusctl fit's default as it runs (the tuning, then the fit) against
 *     the plain balanced fit on one synthetic trace, one pinned core.
 * Signatures come from a pool larger than the last-level cache, so every
 * decision reads its 12 KiB from memory as a router's inbox would.
 */
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "locus_eldr_priv.h"
#include "locus_eldr_router.h"
#include "eldr_replay.h"
#include "locus_eldrfit.h"
#include "locus_trace.h"

#define L 48
#define E 128
#define POOL_MAX 4096 /* signatures: 4096 x 12 KiB = 48 MiB */

static uint32_t POOL = POOL_MAX; /* --pool: fewer, to see the kernels with cache-hot signatures */

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

/*
 * This thread's CPU time: the routing figures are per core-second the
 * benchmark actually ran, so time the scheduler gave other processes on a
 * shared machine is not counted against any variant.
 */
static double cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A sealed-free payload with random unit centroids over the mask. */
static uint8_t *make_table(uint32_t K, int n_mask, size_t *len)
{
	struct locus_eldr_tbl_layout lay;
	uint32_t *ids;
	uint8_t *p, *mask;
	float *idf, *cen;

	locus_eldr_tbl_layout(L, E, K, &lay);
	p = aligned_alloc(64, LOCUS_ALIGN_UP(lay.len, 64));
	if (!p || locus_eldr_tbl_init(p, lay.len, L, E, (uint16_t)K, 0.1f, &ids, &mask, &idf, &cen))
		abort();
	for (int l = 0; l < L; l++)
		mask[l] = n_mask >= L || l % (L / n_mask) == 0;
	((struct locus_eldr_tbl_hdr *)p)->n_masked = (uint16_t)(n_mask >= L ? L : n_mask);
	for (int f = 0; f < L * E; f++)
		idf[f] = 1.0f + (float)(rnd() % 3000) / 1000.0f;
	for (uint32_t d = 0; d < K; d++) {
		double n2 = 0;

		ids[d] = d;
		for (int f = 0; f < L * E; f++) {
			float v = mask[f / E] ? (float)(rnd() % 1000) / 1000.0f : 0.0f;

			cen[(size_t)d * L * E + f] = v;
			n2 += (double)v * v;
		}
		for (int f = 0; f < L * E; f++)
			cen[(size_t)d * L * E + f] = (float)(cen[(size_t)d * L * E + f] / sqrt(n2));
	}
	if (locus_eldr_tbl_validate(p, lay.len, NULL, NULL))
		abort();
	*len = lay.len;
	return p;
}

/* The obvious implementation: doubles, stored layout, then the same rules. */
static uint32_t naive_route(const struct locus_eldr_tbl_view *v, const uint16_t *cnt,
			    uint64_t *load)
{
	const struct locus_eldr_tbl_hdr *h = v->hdr;
	double s[64], best = -1e300, n2 = 0;
	uint32_t pick = 0;
	uint64_t bl = UINT64_MAX;

	for (uint32_t l = 0; l < L; l++)
		for (uint32_t e = 0; e < E && v->layer_mask[l]; e++) {
			double x = cnt[l * E + e] * (double)v->idf[l * E + e];

			n2 += x * x;
		}
	for (uint32_t d = 0; d < h->n_decoders; d++) {
		double dot = 0;

		for (uint32_t l = 0; l < L; l++)
			for (uint32_t e = 0; e < E && v->layer_mask[l]; e++)
				dot += cnt[l * E + e] * (double)v->idf[l * E + e] *
				       v->centroids[((size_t)d * L + l) * E + e];
		s[d] = n2 > 0 ? dot / sqrt(n2) : 0;
		if (s[d] > best)
			best = s[d];
	}
	for (uint32_t d = 0; d < h->n_decoders; d++)
		if (s[d] >= best - h->tau && (load[d] < bl || (load[d] == bl && s[d] > s[pick]))) {
			bl = load[d];
			pick = d;
		}
	load[pick]++;
	return pick;
}

struct variant {
	const char *name;
	int kind;                       /* 0 read, 1 naive, 2 route, 3 route_batch */
	struct locus_eldr_router *r;
	double best;                    /* best rate over the slices */
};

static uint64_t sink;

/* Run one variant for about `slice` seconds; returns decisions (or reads) per second. */
static double run_slice(struct variant *v, const struct locus_eldr_tbl_view *tv,
			const uint8_t *pool, size_t slen, double slice)
{
	static uint64_t load[64];
	static uint32_t cursor;
	double t0 = cpu_now(), dt;
	uint32_t n = 0;

	do {
		for (int rep = 0; rep < 16; rep++) {
			const uint8_t *sig = pool + (size_t)cursor * slen;
			struct locus_eldr_decision d[16];

			switch (v->kind) {
			case 0: {
				const uint64_t *w = (const uint64_t *)sig;

				for (size_t j = 0; j < slen / 8; j++)
					sink += w[j];
				n++;
				break;
			}
			case 1:
				sink += naive_route(tv, locus_eldr_sig_counts(sig), load);
				n++;
				break;
			case 2:
				if (locus_eldr_route(v->r, sig, slen, d))
					abort();
				sink += d[0].slot;
				n++;
				break;
			default: {
				const void *ptr[16];
				size_t lens[16];
				int rc[16];

				for (uint32_t j = 0; j < 16; j++) {
					ptr[j] = pool + (size_t)((cursor + j) % POOL) * slen;
					lens[j] = slen;
				}
				n += locus_eldr_route_batch(v->r, ptr, lens, 16, d, rc);
				sink += d[0].slot;
				cursor = (cursor + 15) % POOL;
				break;
			}
			}
			cursor = (cursor + 1) % POOL;
			if (v->r && (n & 255) < 16)
				locus_eldr_router_set_load(v->r, d[0].slot, n & 7);
		}
		dt = cpu_now() - t0;
	} while (dt < slice);
	return n / dt;
}

#define N_PATHS 7

static void bench_route(uint8_t *pool, size_t slen, uint32_t K, int n_mask, int rounds,
			const char *what)
{
	static const enum locus_eldr_path paths[N_PATHS] = {
		LOCUS_ELDR_PATH_F32, LOCUS_ELDR_PATH_SCALAR, LOCUS_ELDR_PATH_AVX2,
		LOCUS_ELDR_PATH_AVX512, LOCUS_ELDR_PATH_SCALAR_I8, LOCUS_ELDR_PATH_AVX2_I8,
		LOCUS_ELDR_PATH_AVX512_I8
	};
	struct locus_eldr_tbl_view tv;
	struct variant v[2 + 2 * N_PATHS];
	size_t len, msz;
	uint8_t *tbl = make_table(K, n_mask, &len);
	void *mem[N_PATHS] = { 0 };
	int nv = 0, prev1 = -1, prevb = -1;

	locus_eldr_tbl_validate(tbl, len, &tv, NULL);
	v[nv++] = (struct variant){ "read 12 KiB", 0, NULL, 0 };
	v[nv++] = (struct variant){ "naive double loop", 1, NULL, 0 };
	msz = locus_eldr_router_mem_size(tbl, len);
	for (size_t p = 0; p < N_PATHS; p++) {
		struct locus_eldr_router *r;

		mem[p] = aligned_alloc(64, LOCUS_ALIGN_UP(msz, 64));
		if (!locus_eldr_path_supported(paths[p]) ||
		    locus_eldr_router_build(mem[p], msz, tbl, len, paths[p], &r, NULL))
			continue;
		if (paths[p] == LOCUS_ELDR_PATH_F32)
			prev1 = nv;
		v[nv++] = (struct variant){ locus_eldr_path_name(paths[p]), 2, r, 0 };
		if (paths[p] == LOCUS_ELDR_PATH_F32)
			prevb = nv;
		if (paths[p] != LOCUS_ELDR_PATH_SCALAR && paths[p] != LOCUS_ELDR_PATH_SCALAR_I8)
			v[nv++] = (struct variant){ locus_eldr_path_name(paths[p]), 3, r, 0 };
	}
	/* interleaved slices, best of each: the machine is shared */
	for (int round = 0; round < rounds; round++)
		for (int i = 0; i < nv; i++) {
			double rate = run_slice(&v[i], &tv, pool, slen, 0.03);

			if (rate > v[i].best)
				v[i].best = rate;
		}
	printf("K=%-3u mask=%2d/%d layers%s (per CPU-second, best of %d slices of 30 ms each)\n", K,
	       n_mask >= L ? L : n_mask, L, what, rounds);
	for (int i = 0; i < nv; i++)
		printf("  %-18s %-6s %10.0f /s  = %6.2fx naive, %5.2fx read-only, %5.2fx f32 single, "
		       "%5.2fx f32 batch\n", v[i].name,
		       v[i].kind == 3 ? "batch" : v[i].kind == 2 ? "single" : "", v[i].best,
		       v[i].best / v[1].best, v[i].best / v[0].best, v[i].best / v[prev1].best,
		       v[i].best / v[prevb].best);
	for (size_t p = 0; p < N_PATHS; p++)
		free(mem[p]);
	free(tbl);
}

/*
 * Synthetic calibration: 24 latent groups (not K) of unequal sizes, each
 * preferring 16 experts per layer for half of its picks, the other half
 * uniform: overlapping clusters, so k-means and the balance have work to do.
 */
static void make_calib(uint16_t *pre, uint16_t *gen, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		uint32_t g = (i * i + 7 * i) % 24;

		for (int phase = 0; phase < 2; phase++) {
			uint16_t *c = (phase ? gen : pre) + (size_t)i * L * E;
			int T = phase ? 32 : 64;

			for (int t = 0; t < T; t++)
				for (int l = 0; l < L; l++)
					for (int k = 0; k < 8; k++) {
						uint32_t r = rnd();
						uint32_t e = r % 2 ? (g * 5 + (r >> 4) % 16 + 3 * l) % E :
							     (r >> 4) % E;

						c[l * E + e]++;
					}
		}
	}
}

static void bench_fit(void)
{
	const uint32_t n = 1000, K = 16;
	uint16_t *pre = calloc((size_t)n * L * E, 2), *gen = calloc((size_t)n * L * E, 2);
	struct locus_eldrfit_opts o = { .n_decoders = K, .tau = 0.1f, .seed = 1 };
	struct locus_eldrfit_result res;
	float *x, *c, *idf;
	uint8_t mask[L];
	uint32_t *a;
	double t0, t_full, t_nomask, t_lloyd;
	int iters;

	if (!pre || !gen)
		abort();
	make_calib(pre, gen, n);
	t0 = now();
	if (locus_eldrfit_arrays(pre, NULL, n, L, E, pre, gen, 512, LOCUS_ELDRFIT_SCORE_DECODE, &o, &res,
				 NULL))
		abort();
	t_full = now() - t0;
	printf("fit N=%u 48x128 K=%u with mask search (512 scored): %.3f s  (%u layers, %u iterations)\n",
	       n, K, t_full, res.n_masked, res.iterations);
	locus_eldrfit_result_free(&res);
	o.no_mask = 1;
	t0 = now();
	if (locus_eldrfit_arrays(pre, NULL, n, L, E, NULL, NULL, 0, 0, &o, &res, NULL))
		abort();
	t_nomask = now() - t0;
	iters = (int)res.iterations;
	printf("fit N=%u 48x128 K=%u, every layer (IDF + balanced k-means): %.3f s  (%d iterations%s)\n",
	       n, K, t_nomask, iters, res.converged ? ", converged" : "");
	locus_eldrfit_result_free(&res);
	{
		/* locusctl fit's defaults: slack, price, 8 restarts, decode-aware */
		struct locus_eldrfit_opts od;
		double t_def;

		locus_eldrfit_opts_default(&od, K);
		od.seed = 1;
		t0 = now();
		if (locus_eldrfit_arrays(pre, gen, n, L, E, pre, gen, 512,
					 LOCUS_ELDRFIT_SCORE_DECODE, &od, &res, NULL))
			abort();
		t_def = now() - t0;
		printf("fit N=%u 48x128 K=%u, locusctl fit's defaults (mask search, %u restarts, "
		       "decode-aware): %.3f s  (%u layers)\n", n, K, od.restarts, t_def,
		       res.n_masked);
		locus_eldrfit_result_free(&res);
	}
	/* baseline: the same number of plain Lloyd iterations (unbalanced) */
	x = malloc(sizeof(float) * n * L * E);
	c = malloc(sizeof(float) * K * L * E);
	idf = malloc(sizeof(float) * L * E);
	a = malloc(sizeof(uint32_t) * n);
	memset(mask, 1, sizeof(mask));
	locus_eldrfit_idf(pre, n, (size_t)L * E, idf);
	for (uint32_t i = 0; i < n; i++)
		locus_eldrfit_vector(pre + (size_t)i * L * E, L, E, idf, mask,
				     x + (size_t)i * L * E);
	t0 = now();
	memcpy(c, x, sizeof(float) * K * L * E);
	for (int it = 0; it < iters; it++) {
		for (uint32_t i = 0; i < n; i++) {
			double best = -1e300;

			for (uint32_t k = 0; k < K; k++) {
				float s = 0;

				for (uint32_t f = 0; f < L * E; f++)
					s += x[(size_t)i * L * E + f] * c[(size_t)k * L * E + f];
				if (s > best) {
					best = s;
					a[i] = k;
				}
			}
		}
		for (uint32_t k = 0; k < K; k++) {
			double n2 = 0;

			memset(c + (size_t)k * L * E, 0, sizeof(float) * L * E);
			for (uint32_t i = 0; i < n; i++)
				if (a[i] == k)
					for (uint32_t f = 0; f < L * E; f++)
						c[(size_t)k * L * E + f] += x[(size_t)i * L * E + f];
			for (uint32_t f = 0; f < L * E; f++)
				n2 += (double)c[(size_t)k * L * E + f] * c[(size_t)k * L * E + f];
			for (uint32_t f = 0; f < L * E && n2 > 0; f++)
				c[(size_t)k * L * E + f] = (float)(c[(size_t)k * L * E + f] / sqrt(n2));
		}
	}
	t_lloyd = now() - t0;
	printf("baseline: %d plain Lloyd iterations (unbalanced, naive loops): %.3f s; "
	       "balanced fit / Lloyd = %.2fx\n", iters, t_lloyd, t_nomask / t_lloyd);
	free(a);
	free(idf);
	free(c);
	free(x);
	free(gen);
	free(pre);
}

/*
 * A calibration trace of n requests as make_calib draws them, token by
 * token (k = 8 distinct experts per layer, 64 prompt and 32 decode tokens,
 * the same 24 latent groups), for what needs a trace: the tuning replays
 * decode steps. Freed with free(*ids) and locus_trace_free().
 */
static struct locus_trace *make_trace(uint32_t n, uint16_t **ids)
{
	const uint32_t P = 64, G = 32, k = 8;
	struct locus_trace_req *reqs = calloc(n, sizeof(*reqs));
	uint16_t *buf = malloc(sizeof(*buf) * n * (P + G) * L * k);
	struct locus_trace *t = NULL;

	if (!reqs || !buf)
		abort();
	for (uint32_t i = 0; i < n; i++) {
		uint32_t g = (i * i + 7 * i) % 24;
		uint16_t *b = buf + (size_t)i * (P + G) * L * k;

		for (uint32_t tk = 0; tk < (P + G) * L; tk++) {
			uint16_t *p = b + (size_t)tk * k;

			for (uint32_t j = 0; j < k; j++) {
				uint32_t r, e, dup;

				do {
					r = rnd();
					e = r % 2 ? (g * 5 + (r >> 4) % 16 + 3 * (tk % L)) % E :
					    (r >> 4) % E;
					dup = 0;
					for (uint32_t q = 0; q < j; q++)
						dup |= p[q] == e;
				} while (dup);
				p[j] = (uint16_t)e;
			}
		}
		snprintf(reqs[i].id, sizeof(reqs[i].id), "r%u", i);
		reqs[i].prompt = b;
		reqs[i].prompt_len = P;
		reqs[i].gen = b + (size_t)P * L * k;
		reqs[i].gen_len = G;
	}
	if (locus_trace_from_arrays(L, (uint16_t)k, E, n, reqs, NULL, &t, NULL))
		abort();
	free(reqs);
	*ids = buf;
	return t;
}

/*
 * locusctl fit's default as it runs (the tuning, --tune auto, then the fit
 * with its choice) against the plain balanced fit (every layer, IDF and
 * balanced k-means, one seed, nothing tuned), the same trace, one pinned
 * core, CPU seconds of this thread.
 */
static void bench_default(void)
{
	const uint32_t n = 1000, K = 16;
	struct locus_eldrfit_opts od, op = { .n_decoders = K, .tau = 0.1f, .seed = 1,
					     .no_mask = 1 };
	struct locus_eldrfit_tune_opts tu = { .replay = eldr_replay_router,
					      .oracle = eldr_replay_domain };
	struct locus_eldrfit_tune_result tr;
	struct locus_eldrfit_result res;
	struct eldr_replay_cache *cache;
	double t0, t_plain, t_tune, t_fit;
	uint16_t *ids;
	struct locus_trace *t = make_trace(n, &ids);
	cpu_set_t one, was;
	int cpu = sched_getcpu();

	sched_getaffinity(0, sizeof(was), &was);
	CPU_ZERO(&one);
	CPU_SET(cpu < 0 ? 0 : cpu, &one);
	sched_setaffinity(0, sizeof(one), &one);
	t0 = cpu_now();
	if (locus_eldrfit_trace(t, &op, &res, NULL))
		abort();
	t_plain = cpu_now() - t0;
	locus_eldrfit_result_free(&res);
	locus_eldrfit_opts_default(&od, K);
	if (eldr_replay_cache_new(&cache))
		abort();
	tu.replay_arg = cache;
	tu.oracle_arg = cache;
	t0 = cpu_now();
	if (locus_eldrfit_tune(t, NULL, 0, &od, &tu, &tr, NULL))
		abort();
	t_tune = cpu_now() - t0;
	locus_eldrfit_tune_apply(&tr.pt[tr.chosen], &od);
	t0 = cpu_now();
	if (locus_eldrfit_trace(t, &od, &res, NULL))
		abort();
	t_fit = cpu_now() - t0;
	printf("fit N=%u 48x128 K=%u trace (k=8, 64 prompt + 32 decode tokens), pinned to cpu %d, "
	       "CPU seconds:\n", n, K, cpu);
	printf("  plain balanced fit (every layer, one seed, nothing tuned): %.3f s\n", t_plain);
	printf("  locusctl fit's default: %.3f s = tuning %.3f s (%u points, 2 folds) + fit %.3f s "
	       "(%u layers); %.1fx the plain balanced fit\n", t_tune + t_fit, t_tune, tr.n_pt,
	       t_fit, res.n_masked, (t_tune + t_fit) / t_plain);
	locus_eldrfit_result_free(&res);
	locus_eldrfit_tune_result_free(&tr);
	eldr_replay_cache_free(cache);
	sched_setaffinity(0, sizeof(was), &was);
	locus_trace_free(t);
	free(ids);
}

/* The exact balanced assignment alone, against an unconstrained argmin. */
static void bench_assign(uint32_t n, uint32_t K)
{
	double *cost = malloc(sizeof(double) * n * K), t0, t_bal, t_min;
	uint32_t *a = malloc(sizeof(uint32_t) * n), reps = 0;

	if (!cost || !a)
		abort();
	for (uint32_t i = 0; i < n * K; i++)
		cost[i] = -(double)(rnd() % 1000000) / 1e6;
	t0 = now();
	do {
		if (locus_eldrfit_balanced_assign(cost, n, K, a))
			abort();
		reps++;
	} while (now() - t0 < 0.3);
	t_bal = (now() - t0) / reps;
	reps = 0;
	t0 = now();
	do {
		for (uint32_t i = 0; i < n; i++) {
			uint32_t best = 0;

			for (uint32_t k = 1; k < K; k++)
				if (cost[i * K + k] < cost[i * K + best])
					best = k;
			a[i] = best;
		}
		sink += a[reps % n];
		reps++;
	} while (now() - t0 < 0.1);
	t_min = (now() - t0) / reps;
	printf("exact balanced assignment N=%u K=%u: %.2f ms per call (unconstrained argmin %.3f ms, "
	       "%.0fx)\n", n, K, t_bal * 1e3, t_min * 1e3, t_bal / t_min);
	free(a);
	free(cost);
}

/*
 * The pool's signatures: a quarter of the counts 1..63, the rest 0 (short
 * prompts: no count above the 8-bit levels' 127), or with long every count
 * 0..499 (a prompt of thousands of tokens: the 8-bit path shifts its levels,
 * a second pass over the counts).
 */
static void fill_pool(uint8_t *pool, size_t slen, int long_prompts)
{
	for (uint32_t i = 0; i < POOL; i++) {
		struct locus_eldr_sig_hdr *h = (void *)(pool + i * slen);
		uint16_t *c = (uint16_t *)(h + 1);

		memset(h, 0, sizeof(*h));
		h->magic = LOCUS_ELDR_SIG_MAGIC;
		h->version = LOCUS_ELDR_SIG_VERSION;
		h->n_layers = L;
		h->n_experts = E;
		for (int f = 0; f < L * E; f++) {
			uint32_t r = rnd();

			c[f] = long_prompts ? (uint16_t)(r % 500) :
			       r % 4 ? 0 : (uint16_t)(r >> 8) % 64;
		}
	}
}

/*
 * eldr_bench [--route-only | --fit-only] [--rounds N] [--pool S]: --fit-only
 * runs the fit figures alone, --route-only the
 * routing figures alone (K=16 every layer first), N interleaved slices per
 * variant (default 6), a pool of S signatures (default 4096, 48 MiB: from
 * memory; 16 keeps them in cache, the kernels' compute alone).
 */
int main(int argc, char **argv)
{
	size_t slen = locus_eldr_sig_len(L, E);
	uint8_t *pool = aligned_alloc(64, slen * POOL_MAX);
	int route_only = 0, fit_only = 0, rounds = 6;
	cpu_set_t cpus;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--route-only")) {
			route_only = 1;
		} else if (!strcmp(argv[i], "--fit-only")) {
			fit_only = 1;
		} else if (!strcmp(argv[i], "--pool") && i + 1 < argc) {
			POOL = (uint32_t)atoi(argv[++i]);
			if (POOL < 16 || POOL > POOL_MAX)
				POOL = POOL_MAX;
		} else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
			rounds = atoi(argv[++i]);
			if (rounds < 1 || rounds > 1000)
				rounds = 6;
		} else {
			fprintf(stderr, "usage: eldr_bench [--route-only | --fit-only] [--rounds N] [--pool 16..4096]\n");
			return 2;
		}
	}
	if (!pool)
		return 1;
	fill_pool(pool, slen, 0);
	printf("ELDR routing, one core, L=%d E=%d, pool of %d signatures (%zu MiB)\n", L, E, POOL,
	       slen * POOL >> 20);
	if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0)
		printf("ran on cpu %d, allowed %d of %ld online cpus (pin with taskset -c N)\n",
		       sched_getcpu(), CPU_COUNT(&cpus), sysconf(_SC_NPROCESSORS_ONLN));
	printf("paths: avx2 %s, avx512 (VNNI) %s; f32 = the float reference kernels\n",
	       locus_eldr_path_supported(LOCUS_ELDR_PATH_AVX2) ? "yes" : "no",
	       locus_eldr_path_supported(LOCUS_ELDR_PATH_AVX512) ? "yes" : "no");
	if (!fit_only) {
		bench_route(pool, slen, 16, L, rounds, "");
		bench_route(pool, slen, 16, 12, rounds, "");
		bench_route(pool, slen, 64, L, rounds, "");
		bench_route(pool, slen, 64, 12, rounds, "");
		fill_pool(pool, slen, 1);
		bench_route(pool, slen, 16, L, rounds, ", long prompts");
	}
	if (sink == 42)
		printf("\n");
	free(pool);
	if (route_only)
		return 0;
	bench_fit();
	bench_default();
	bench_assign(1000, 16);
	bench_assign(1000, 64);
	return 0;
}
