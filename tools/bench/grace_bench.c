// SPDX-License-Identifier: MIT
/*
 * GRACE benchmarks (figures printed, never asserted):
 *  1. fit time, grouping + replication, 48 layers x 128 experts on 4 x 8
 *     GPUs from a synthetic skewed profile, beside EPLB-style greedy packing
 *     of the same loads in the same run;
 *  2. planned (token, expert) pairs per second on one core, 4096 tokens x
 *     top-8 per batch on that table, locus planner beside the reference
 *     planner (tests/oracle/grace_plan_ref.c: the same plans, written plainly) and a naive
 *     planner (per-pair random weighted replica choice, malloc and qsort to
 *     group rows by destination) in the same run, per CPU-second of the
 *     benchmark thread (the machine may be shared), best of interleaved
 *     slices.
 *
 * grace_bench [--blob PATH] [--rounds N]: --blob reads the fitted table
 * from PATH when it exists (the fit, the slow part, is skipped), else fits
 * and writes it there; N slices of 0.1 s per planner (default 8).
 */
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "grace_plan_ref.h"
#include "locus_grace_plan.h"
#include "locus_gracefit.h"
#include "locus_tblfile.h"

#define L_ 48
#define E_ 128
#define K_ 8
#define T_ 4096
#define NODES 4
#define GPN 8
#define N_ (NODES * GPN)

static uint64_t rs = 0x2545f4914f6cdd1dull;

static uint32_t rnd(void)
{
	rs ^= rs >> 12;
	rs ^= rs << 25;
	rs ^= rs >> 27;
	return (uint32_t)((rs * 2685821657736338717ull) >> 32);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Zipf(1.1)-popular latent groups of 8 experts; 6 choices from the group, 2 anywhere. */
static void gen_token(uint16_t *ids, const double *cdf)
{
	double u = (rnd() + 0.5) / 4294967296.0;
	uint32_t g = 0, n = 0;

	while (g < 15 && cdf[g] < u)
		g++;
	while (n < K_) {
		uint32_t e = n < 6 ? g * 8 + rnd() % 8 : rnd() % E_;
		int dup = 0;

		for (uint32_t q = 0; q < n; q++)
			dup |= ids[q] == e;
		if (!dup)
			ids[n++] = (uint16_t)e;
	}
}

static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void greedy(const double *W, uint16_t *pri)
{
	uint32_t cnt[N_] = { 0 }, ord[E_];
	double load[N_] = { 0 };

	for (uint32_t e = 0; e < E_; e++)
		ord[e] = e;
	for (uint32_t i = 1; i < E_; i++) {
		uint32_t v = ord[i], j = i;

		while (j > 0 && W[ord[j - 1]] < W[v]) {
			ord[j] = ord[j - 1];
			j--;
		}
		ord[j] = v;
	}
	for (uint32_t i = 0; i < E_; i++) {
		uint32_t b = N_;

		for (uint32_t r = 0; r < N_; r++)
			if (cnt[r] < E_ / N_ && (b == N_ || load[r] < load[b]))
				b = r;
		pri[ord[i]] = (uint16_t)b;
		cnt[b]++;
		load[b] += W[ord[i]];
	}
}

struct naive_row {
	uint32_t dst, token, kmask;
};

static int row_cmp(const void *a, const void *b)
{
	const struct naive_row *x = a, *y = b;

	if (x->dst != y->dst)
		return x->dst < y->dst ? -1 : 1;
	return x->token < y->token ? -1 : (x->token > y->token);
}

/* The obvious planner: random weighted copy per pair, sort pairs, merge. */
static uint32_t naive_plan(const struct locus_grace_map *m, uint32_t layer, const uint16_t *ex)
{
	struct naive_row *rows = malloc((size_t)T_ * K_ * sizeof(*rows));
	uint32_t n = 0, out = 0;

	for (uint32_t t = 0; t < T_; t++) {
		for (uint32_t j = 0; j < K_; j++) {
			size_t le = (size_t)layer * E_ + ex[t * K_ + j];
			const uint16_t *rk = locus_grace_map_ranks(m) + le * m->n_slots;
			const uint16_t *w = locus_grace_map_weights(m) + le * m->n_slots;
			uint32_t c = locus_grace_map_ncopies(m)[le], tot = 0, pick, i = 0;

			for (uint32_t q = 0; q < c; q++)
				tot += w[q];
			pick = (uint32_t)rand() % tot;
			while (pick >= w[i]) {
				pick -= w[i];
				i++;
			}
			rows[n++] = (struct naive_row){ rk[i], t, 1u << j };
		}
	}
	qsort(rows, n, sizeof(*rows), row_cmp);
	for (uint32_t i = 0; i < n; i++) {
		if (out && rows[out - 1].dst == rows[i].dst && rows[out - 1].token == rows[i].token)
			rows[out - 1].kmask |= rows[i].kmask;
		else
			rows[out++] = rows[i];
	}
	free(rows);
	return out;
}

/* The fitted table from path (0), or -1 when absent or unreadable. */
static int read_blob(const char *path, void **blob, size_t *len)
{
	FILE *f = path ? fopen(path, "rb") : NULL;
	long n;

	if (!f)
		return -1;
	if (fseek(f, 0, SEEK_END) || (n = ftell(f)) <= 0 || fseek(f, 0, SEEK_SET) ||
	    !(*blob = malloc((size_t)n)) || fread(*blob, 1, (size_t)n, f) != (size_t)n) {
		fclose(f);
		return -1;
	}
	fclose(f);
	*len = (size_t)n;
	return 0;
}

struct planner {
	const char *name;
	int kind; /* 0 locus, 1 reference, 2 naive */
	void *st;
	double best, rows;
};

/* One slice of about `slice` CPU-seconds of planner v; pairs per CPU-second. */
static double plan_slice(struct planner *v, const void *map, struct locus_grace_plan *plan,
			 uint16_t (*batch)[T_ * K_], double slice, int *rc, struct locus_error *err)
{
	static uint32_t iter;
	double t0 = cpu_s(), el, pairs = 0;
	uint64_t rows = 0, n = 0;

	do {
		uint32_t layer = iter % L_;

		if (v->kind == 2) {
			rows += naive_plan(map, layer, batch[iter % 16]);
		} else {
			struct locus_grace_batch b = { .layer = layer, .src_rank = iter % GPN,
						       .n_tokens = T_, .top_k = K_,
						       .experts = batch[iter % 16] };

			*rc = v->kind ? grace_plan_ref_batch(v->st, map, &b, plan, err) :
					locus_grace_plan_batch(v->st, map, &b, plan, err);
			if (*rc < 0)
				return 0;
			rows += plan->n_rows;
		}
		iter++;
		n++;
		pairs += (double)T_ * K_;
		el = cpu_s() - t0;
	} while (el < slice);
	v->rows = (double)rows / n;
	return pairs / el;
}

int main(int argc, char **argv)
{
	struct locus_gracefit_profile p;
	struct locus_gracefit_topo topo = { NODES, GPN, 6, 1 };
	struct locus_error err = { 0 };
	static uint16_t batch[16][T_ * K_];
	double cdf[16], z = 0, t0, t_prof, t_fit = 0, t_greedy;
	uint16_t pri[E_];
	void *blob = NULL, *map = NULL, *st[2] = { NULL, NULL }, *pm;
	const char *blob_path = NULL;
	const void *pl;
	size_t len, plen, msz, ssz, pmsz;
	struct locus_grace_plan plan;
	struct planner v[3] = { { "locus (TAR + SWRR)", 0, NULL, 0, 0 },
				{ "reference planner", 1, NULL, 0, 0 },
				{ "naive planner", 2, NULL, 0, 0 } };
	int rc, rounds = 8, have_blob;
	cpu_set_t cpus;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--blob") && i + 1 < argc) {
			blob_path = argv[++i];
		} else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
			rounds = atoi(argv[++i]);
			if (rounds < 1 || rounds > 1000)
				rounds = 8;
		} else {
			fprintf(stderr, "usage: grace_bench [--blob PATH] [--rounds N]\n");
			return 2;
		}
	}
	for (int g = 0; g < 16; g++)
		z += cdf[g] = 1.0 / pow(g + 1, 1.1);
	for (int g = 0; g < 16; g++)
		cdf[g] = (g ? cdf[g - 1] : 0) + cdf[g] / z;

	/* 1. fit */
	t0 = now_s();
	if ((rc = locus_gracefit_profile_init(&p, L_, E_, 1, &err)))
		goto fail;
	for (uint32_t l = 0; l < L_; l++)
		for (uint32_t t = 0; t < T_; t++) {
			uint16_t ids[K_];

			gen_token(ids, cdf);
			locus_gracefit_profile_add(&p, l, ids, 1, K_, NULL);
		}
	t_prof = now_s() - t0;
	have_blob = read_blob(blob_path, &blob, &len) == 0;
	if (!have_blob) {
		t0 = now_s();
		rc = locus_gracefit_fit(&p, &topo, NULL, &blob, &len, NULL, &err);
		t_fit = now_s() - t0;
		if (rc)
			goto fail;
		if (blob_path) {
			FILE *f = fopen(blob_path, "wb");

			if (!f || fwrite(blob, 1, len, f) != len || fclose(f))
				fprintf(stderr, "grace_bench: cannot write %s\n", blob_path);
		}
	}
	t0 = now_s();
	for (int rep = 0; rep < 10; rep++)
		for (uint32_t l = 0; l < L_; l++)
			greedy(p.W + (size_t)l * E_, pri);
	t_greedy = (now_s() - t0) / 10;
	printf("fit: %d layers x %d experts on %dx%d GPUs (profile of %d tokens x top-%d per "
	       "layer built in %.3f s)\n", L_, E_, NODES, GPN, T_, K_, t_prof);
	if (have_blob)
		printf("  grouping + replication fit   (table read from %s)\n", blob_path);
	else
		printf("  grouping + replication fit   %8.3f s\n", t_fit);
	printf("  EPLB-style greedy packing    %8.5f s", t_greedy);
	if (!have_blob)
		printf("   (fit / greedy = %.0fx)", t_fit / t_greedy);
	printf("\n");

	/* 2. planner */
	if ((rc = locus_grace_blob_check(blob, len, &pl, &plen, &err)))
		goto fail;
	msz = locus_grace_map_size(pl);
	ssz = locus_grace_plan_state_size(pl);
	pmsz = locus_grace_plan_mem_size(T_, K_, N_);
	pm = malloc(pmsz);
	if (posix_memalign(&map, 64, msz) || posix_memalign(&st[0], 64, ssz) ||
	    posix_memalign(&st[1], 64, ssz) || !pm) {
		rc = -ENOMEM;
		goto fail;
	}
	if ((rc = locus_grace_map_build(map, msz, pl, plen, 1, &err)) ||
	    (rc = locus_grace_plan_state_init(st[0], ssz, map, 0, &err)) ||
	    (rc = locus_grace_plan_state_init(st[1], ssz, map, 0, &err)) ||
	    (rc = locus_grace_plan_init(&plan, pm, pmsz, T_, K_, N_)))
		goto fail;
	v[0].st = st[0];
	v[1].st = st[1];
	for (int b = 0; b < 16; b++)
		for (uint32_t t = 0; t < T_; t++)
			gen_token(batch[b] + t * K_, cdf);
	if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0)
		printf("planner: ran on cpu %d, allowed %d of %ld online cpus (pin with taskset -c N); "
		       "per CPU-second, best of %d slices of 0.1 s\n", sched_getcpu(),
		       CPU_COUNT(&cpus), sysconf(_SC_NPROCESSORS_ONLN), rounds);
	for (int round = 0; round < rounds; round++)
		for (int i = 0; i < 3; i++) {
			double r;

			if (i == 2 && round > 0)
				continue; /* the naive planner once: the slowest by far */
			r = plan_slice(&v[i], map, &plan, batch, 0.1, &rc, &err);
			if (rc < 0)
				goto fail;
			v[i].best = r > v[i].best ? r : v[i].best;
		}
	for (int i = 0; i < 3; i++)
		printf("  %-26s %8.2f M pairs/s  (batches of %d x top-%d, %.1f rows/batch)  "
		       "= %.2fx reference, %.1fx naive\n", v[i].name, v[i].best / 1e6, T_, K_,
		       v[i].rows, v[i].best / v[1].best, v[i].best / v[2].best);
	free(pm);
	free(st[0]);
	free(st[1]);
	free(map);
	free(blob);
	locus_gracefit_profile_free(&p);
	return 0;
fail:
	fprintf(stderr, "grace_bench: %s (%s)\n", err.msg, locus_strerror(rc));
	return 1;
}
