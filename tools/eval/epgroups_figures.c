// SPDX-License-Identifier: MIT
/*
 * epgroups_figures: per-decoder expert placement against one global
 * placement, on requests ELDR routes.
 *
 * Every decoder is expert-parallel over R ranks of its own (group k = ranks
 * k*R .. k*R+R-1 of a cluster of K*R GPUs, 4 per node). Requests split
 * alternately into a calibration half and a held-out half. On the
 * calibration half: the ELDR fit (K decoders, balanced k-means, tau 0.1)
 * and four placements with the same memory (capacity ceil(E/R) experts and
 * a replica budget of 2 per GPU, so the same expert slots per rank):
 *   per-decoder   locusctl fit --ep-ranks-per-decoder: GRACE per group from
 *                 the calibration requests nearest its centroid;
 *   global        GRACE from every calibration request, the same placement
 *                 in every group;
 *   EPLB global   EPLB-style redundant experts and balanced packing from the
 *                 global loads (every group alike);
 *   EPLB per-dec. the same packing from each group's own loads.
 * Each half is then routed by the ELDR router (rounds of K x B requests in a
 * fixed pseudo-random order, a decoder taking B per round, as eldr_quality
 * does) and each request's decode tokens are dispatched from its decoder's
 * ranks (token j on rank j mod R) under each placement, resolved as the
 * planner does (own GPU, own node, else any copy; replicas by the
 * round-robin weights' long-run shares). Figures, both halves side by side:
 *   max/mean   load over each decoder's ranks, per layer, averaged over
 *              layers and decoders;
 *   leave      token rows leaving the source GPU per token-layer (a row goes
 *              once per other destination rank).
 * Brackets: 95% bootstrap intervals over requests (200 resamples of the
 * half's requests, each with its routed decoder; percentiles corrected for
 * the resamples' bias), and for per-decoder minus global the interval of the
 * paired difference.
 *
 *   epgroups_figures [--trace FILE]   default: the full ESFT data under
 *       $LOCUS_DATA_DIR (default <repo>/../shared/data) as 64-token windows
 *       (32 prompt + 32 "generated"); then the repository's sample
 *       (tests/data/calib_sample.jsonl). Without the full data that part is
 *       skipped with a message.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data_paths.h"
#include "epgroups_score.h"
#include "locus_eldr_router.h"
#include "locus_eldrfit.h"
#include "locus_grace_epgroups.h"
#include "locus_graceset_priv.h"
#include "locus_tblfile.h"

#define HDR sizeof(struct locus_tbl_hdr)
#define N_PL 4
#define BOOT 200
#define BUDGET 2

static const char *const pl_name[N_PL] = { "per-decoder", "global", "EPLB global",
					   "EPLB per-dec." };

static void die(const char *what, const struct locus_error *e)
{
	fprintf(stderr, "epgroups_figures: %s: %s\n", what, e ? e->msg : "out of memory");
	exit(1);
}

/* 64-token windows (32 prompt + 32 decoded) of every ESFT domain; NULL if absent. */
static struct locus_trace *load_esft(const char *base)
{
	struct locus_error e = { 0 };
	struct locus_trace *t;

	return locus_trace_esft_windows(base, 32, 32, &t, &e) < 0 ? NULL : t;
}

/* One group's EPLB table on the group's local topology, lifted onto ranks first.. */
static void eplb_group(const struct locus_gracefit_profile *p, const struct locus_gracefit_topo *gt,
		       uint32_t first, const struct locus_gracefit_topo *cl,
		       struct locus_graceset_part *part)
{
	uint32_t L = p->n_layers, E = p->n_experts, n = gt->n_nodes * gt->gpus_per_node;
	uint32_t slots = gt->capacity + gt->replica_budget, R = n - 1;
	struct locus_grace_dims d = { .n_layers = L, .n_experts = E, .n_nodes = gt->n_nodes,
				      .gpus_per_node = gt->gpus_per_node, .max_replicas = R,
				      .capacity = 1 };
	uint32_t *pri_n = calloc(n, sizeof(uint32_t)), *rep_n = calloc(n, sizeof(uint32_t));
	uint16_t *pri = malloc((size_t)L * E * 2), *rep = malloc((size_t)L * E * R * 2 + 2);
	float *pred = malloc((size_t)L * n * sizeof(float));
	struct locus_grace_view v;
	struct locus_error e = { 0 };
	size_t plen;
	uint8_t *blob;

	if (!pri_n || !rep_n || !pri || !rep || !pred)
		die("EPLB", NULL);
	for (uint32_t l = 0; l < L; l++) {
		uint32_t pc[64] = { 0 }, rc[64] = { 0 };

		if (es_eplb_layer(p->W + (size_t)l * E, E, n, slots, R, pri + (size_t)l * E,
				  rep + (size_t)l * E * R, pred + (size_t)l * n) < 0)
			die("EPLB packing found no slot", NULL);
		for (uint32_t x = 0; x < E; x++) {
			pc[pri[(size_t)l * E + x]]++;
			for (uint32_t i = 0; i < R; i++)
				if (rep[((size_t)l * E + x) * R + i] != LOCUS_GRACE_NO_RANK)
					rc[rep[((size_t)l * E + x) * R + i]]++;
		}
		for (uint32_t r = 0; r < n; r++) {
			d.capacity = pc[r] > d.capacity ? pc[r] : d.capacity;
			d.replica_budget = rc[r] > d.replica_budget ? rc[r] : d.replica_budget;
		}
	}
	plen = locus_grace_payload_size(&d);
	blob = calloc(1, HDR + plen);
	if (!plen || !blob)
		die("EPLB table", NULL);
	memcpy(blob + HDR, &d, sizeof(d));
	locus_grace_view_init(&v, blob + HDR, plen, NULL);
	memcpy(v.primary, pri, (size_t)L * E * 2);
	memcpy(v.replica, rep, (size_t)L * E * R * 2);
	memcpy(v.pred_load, pred, (size_t)L * n * sizeof(float));
	for (size_t i = 0; i < (size_t)L * E; i++)
		v.expert_load[i] = (float)p->W[i];
	if (locus_epgroups_lift(blob + HDR, plen, first, cl->n_nodes, cl->gpus_per_node,
				(void **)&part->blob, &part->blob_len, &e) < 0)
		die("EPLB lift", &e);
	free(blob);
	free(pri_n);
	free(rep_n);
	free(pri);
	free(rep);
	free(pred);
}

/* EPLB set: per group from its own requests, or (own == 0) from every request. */
static void eplb_set(const struct locus_trace *cal, const uint32_t *assign, uint32_t K,
		     const struct locus_epgroups_opts *o, int own, void **blob, size_t *len)
{
	struct locus_graceset_part parts[LOCUS_GRACESET_MAX_GROUPS];
	struct locus_gracefit_topo gt;
	struct locus_error e = { 0 };
	uint32_t R = o->ranks_per_decoder;

	if (locus_epgroups_group_topo(&o->topo, R, &gt, &e) < 0)
		die("group topology", &e);
	gt.capacity = (cal->n_experts + R - 1) / R;
	for (uint32_t k = 0; k < K; k++) {
		struct locus_gracefit_profile p;

		if (locus_gracefit_profile_init(&p, cal->n_layers, cal->n_experts, 0, &e) < 0)
			die("profile", &e);
		for (uint32_t i = 0; i < cal->n_requests; i++)
			if ((!own || assign[i] == k) &&
			    locus_gracefit_profile_add_request(&p, cal, i, &e) < 0)
				die("profile", &e);
		parts[k] = (struct locus_graceset_part){ .group_id = k, .decoder_id = k,
							 .first_rank = k * R, .n_ranks = R };
		eplb_group(&p, &gt, k * R, &o->topo, &parts[k]);
		locus_gracefit_profile_free(&p);
	}
	if (locus_graceset_build(parts, K, blob, len, &e) < 0)
		die("EPLB set", &e);
	for (uint32_t k = 0; k < K; k++)
		free((void *)parts[k].blob);
}

/* Route reqs[0..n-1] of t with the router in rounds of K x B; decoder[i] gets each slot. */
static uint32_t route_half(struct locus_eldr_router *r, const struct locus_trace *t,
			   uint32_t *reqs, uint32_t n, uint32_t K, uint32_t B, uint32_t *decoder)
{
	const size_t slen = locus_eldr_sig_len(t->n_layers, t->n_experts);
	uint8_t *sig = malloc(slen);
	uint32_t seed = 12345, fill[LOCUS_GRACESET_MAX_GROUPS], used;
	struct locus_error e = { 0 };

	if (!sig)
		die("route", NULL);
	for (uint32_t i = n - 1; i > 0; i--) { /* fixed arrival order */
		uint32_t j, x;

		seed = seed * 1103515245u + 12345u;
		j = (seed >> 8) % (i + 1);
		x = reqs[i];
		reqs[i] = reqs[j];
		reqs[j] = x;
	}
	used = n / (K * B) * K * B;
	for (uint32_t rd = 0; rd * K * B < used; rd++) {
		memset(fill, 0, sizeof(fill));
		for (uint32_t d = 0; d < K; d++) {
			locus_eldr_router_set_load(r, d, 0);
			locus_eldr_router_set_up(r, d, 1);
		}
		for (uint32_t i = rd * K * B; i < (rd + 1) * K * B; i++) {
			struct locus_eldr_decision dec;
			const struct locus_trace_req *q = &t->reqs[reqs[i]];

			if (locus_eldr_sig_build(sig, slen, t->n_layers, t->n_experts, t->k, q->prompt,
						 q->prompt_len, 0, &e) < 0 ||
			    locus_eldr_route(r, sig, slen, &dec) < 0)
				die("route", &e);
			decoder[i] = dec.slot;
			if (++fill[dec.slot] == B)
				locus_eldr_router_set_up(r, dec.slot, 0);
		}
	}
	free(sig);
	return used;
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

struct ci {
	double v, lo, hi;
};

/*
 * Bias-corrected percentile interval: the 2.5 and 97.5 percentiles of the
 * resamples, shifted by the resamples' bias (their mean minus v). max/mean of
 * resampled requests is biased upwards (a request drawn twice adds skew), so
 * plain percentiles would sit above v.
 */
static struct ci interval(double v, double *boot)
{
	double mean = 0;

	for (int b = 0; b < BOOT; b++)
		mean += boot[b] / BOOT;
	qsort(boot, BOOT, sizeof(double), cmp_dbl);
	return (struct ci){ v, boot[BOOT * 25 / 1000] - (mean - v),
			    boot[BOOT * 975 / 1000] - (mean - v) };
}

/* Figures of every placement on one half, with bootstrap intervals. */
static void score_half(const struct es_placement *pl, const struct locus_trace *t,
		       const uint32_t *reqs, const uint32_t *decoder, uint32_t n, uint32_t K,
		       struct ci mm[N_PL], struct ci lv[N_PL], struct ci *dmm, struct ci *dlv)
{
	static double bmm[N_PL][BOOT], blv[N_PL][BOOT], bdm[BOOT], bdl[BOOT];
	struct es_contrib c[N_PL];
	uint32_t *w = calloc(n, sizeof(*w)), seed = 777;
	double m0[N_PL], l0[N_PL];

	if (!w)
		die("bootstrap", NULL);
	for (int p = 0; p < N_PL; p++) {
		es_contrib(&pl[p], t, reqs, decoder, n, &c[p]);
		es_figures(&c[p], NULL, K, &m0[p], &l0[p]);
	}
	for (int b = 0; b < BOOT; b++) {
		memset(w, 0, n * sizeof(*w));
		for (uint32_t i = 0; i < n; i++) {
			seed = seed * 1664525u + 1013904223u;
			w[(seed >> 8) % n]++;
		}
		for (int p = 0; p < N_PL; p++)
			es_figures(&c[p], w, K, &bmm[p][b], &blv[p][b]);
		bdm[b] = bmm[0][b] - bmm[1][b];
		bdl[b] = blv[0][b] - blv[1][b];
	}
	for (int p = 0; p < N_PL; p++) {
		mm[p] = interval(m0[p], bmm[p]);
		lv[p] = interval(l0[p], blv[p]);
		es_contrib_free(&c[p]);
	}
	*dmm = interval(m0[0] - m0[1], bdm);
	*dlv = interval(l0[0] - l0[1], bdl);
	free(w);
}

static void run(const struct locus_trace *t, uint32_t K, uint32_t R, uint32_t B)
{
	struct locus_eldrfit_opts eo;
	struct locus_epgroups_opts o = {
		.ranks_per_decoder = R,
		.topo = { .n_nodes = K * R / 4, .gpus_per_node = 4, .replica_budget = BUDGET,
			  .capacity = (t->n_experts + R - 1) / R },
		.fit = { .r = -1, .seed = 1 },
	};
	struct locus_trace_req *cr = calloc(t->n_requests, sizeof(*cr));
	uint32_t *half[2], n_half[2] = { 0, 0 }, *dec[2], *assign;
	struct locus_eldrfit_result res = { 0 };
	struct locus_eldr_router *router = NULL;
	struct es_placement pl[N_PL];
	struct locus_eldr_tbl_view v;
	struct locus_error e = { 0 };
	struct locus_trace *cal = NULL;
	void *blob[N_PL], *rmem;
	size_t blen[N_PL], msz;

	/* the ELDR table locusctl fit --tune off writes (the fixed defaults) */
	locus_eldrfit_opts_default(&eo, K);
	eo.seed = 1;
	half[0] = calloc(t->n_requests, sizeof(uint32_t));
	half[1] = calloc(t->n_requests, sizeof(uint32_t));
	dec[0] = calloc(t->n_requests, sizeof(uint32_t));
	dec[1] = calloc(t->n_requests, sizeof(uint32_t));
	assign = calloc(t->n_requests, sizeof(uint32_t));
	if (!cr || !half[0] || !half[1] || !dec[0] || !dec[1] || !assign)
		die("run", NULL);
	for (uint32_t i = 0; i < t->n_requests; i++) {
		half[i % 2][n_half[i % 2]++] = i;
		if (i % 2 == 0)
			cr[n_half[0] - 1] = t->reqs[i];
	}
	if (locus_trace_from_arrays(t->n_layers, t->k, t->n_experts, n_half[0], cr, NULL, &cal,
				    &e) < 0 ||
	    locus_eldrfit_trace(cal, &eo, &res, &e) < 0 ||
	    locus_eldr_blob_check(res.blob, res.blob_len, &v, &e) < 0)
		die("ELDR fit", &e);
	msz = locus_eldr_router_mem_size((uint8_t *)res.blob + HDR, res.blob_len - HDR);
	rmem = aligned_alloc(64, LOCUS_ALIGN_UP(msz, 64));
	if (!rmem || locus_eldr_router_build(rmem, msz, (uint8_t *)res.blob + HDR,
					     res.blob_len - HDR, LOCUS_ELDR_PATH_AUTO, &router,
					     &e) < 0)
		die("router", &e);
	if (locus_epgroups_fit(cal, &v, NULL, &o, &blob[0], &blen[0], NULL, &e) < 0)
		die("per-decoder fit", &e);
	o.one_profile = 1;
	if (locus_epgroups_fit(cal, &v, NULL, &o, &blob[1], &blen[1], NULL, &e) < 0)
		die("global fit", &e);
	if (locus_epgroups_assign(&v, cal, assign, &e) < 0)
		die("assign", &e);
	eplb_set(cal, assign, K, &o, 0, &blob[2], &blen[2]);
	eplb_set(cal, assign, K, &o, 1, &blob[3], &blen[3]);
	for (int p = 0; p < N_PL; p++)
		es_placement_load(&pl[p], blob[p], blen[p]);

	printf("K=%u decoders x R=%u EP ranks (%u nodes x 4 GPUs), batch B=%u, capacity %u + "
	       "%u replica slots per GPU: %u calibration / %u held-out requests\n", K, R,
	       K * R / 4, B, o.topo.capacity, BUDGET, n_half[0], n_half[1]);
	printf("  %-14s %-34s %s\n", "placement", "max/mean load  calib | held-out",
	       "rows leaving the GPU per token-layer  calib | held-out");
	{
		struct ci mm[2][N_PL], lv[2][N_PL], dmm[2], dlv[2];

		for (int h = 0; h < 2; h++) {
			uint32_t used = route_half(router, t, half[h], n_half[h], K, B, dec[h]);

			score_half(pl, t, half[h], dec[h], used, K, mm[h], lv[h], &dmm[h], &dlv[h]);
		}
		for (int p = 0; p < N_PL; p++)
			printf("  %-14s %.3f [%.3f,%.3f] | %.3f [%.3f,%.3f]   %.3f [%.3f,%.3f] | "
			       "%.3f [%.3f,%.3f]\n", pl_name[p], mm[0][p].v, mm[0][p].lo,
			       mm[0][p].hi, mm[1][p].v, mm[1][p].lo, mm[1][p].hi, lv[0][p].v,
			       lv[0][p].lo, lv[0][p].hi, lv[1][p].v, lv[1][p].lo, lv[1][p].hi);
		printf("  %-14s %+.3f [%+.3f,%+.3f] | %+.3f [%+.3f,%+.3f]  %+.3f [%+.3f,%+.3f] | "
		       "%+.3f [%+.3f,%+.3f]\n", "per-dec - glob", dmm[0].v, dmm[0].lo, dmm[0].hi,
		       dmm[1].v, dmm[1].lo, dmm[1].hi, dlv[0].v, dlv[0].lo, dlv[0].hi, dlv[1].v,
		       dlv[1].lo, dlv[1].hi);
	}
	for (int p = 0; p < N_PL; p++) {
		es_placement_free(&pl[p]);
		free(blob[p]);
	}
	free(rmem);
	locus_eldrfit_result_free(&res);
	locus_trace_free(cal);
	free(cr);
	free(half[0]);
	free(half[1]);
	free(dec[0]);
	free(dec[1]);
	free(assign);
}

static void run_all(const struct locus_trace *t)
{
	run(t, 4, 4, 4);
	run(t, 8, 2, 4);
}

int main(int argc, char **argv)
{
	const char *trace = NULL;
	struct locus_error e = { 0 };
	struct locus_trace *t;

	if (argc == 3 && !strcmp(argv[1], "--trace"))
		trace = argv[2];
	else if (argc != 1) {
		fprintf(stderr, "usage: epgroups_figures [--trace FILE.jsonl]\n");
		return 2;
	}
	locus_data_find_root(argv[0]);
	if (!trace) {
		t = load_esft(locus_data_dir());
		if (t) {
			printf("ESFT (full data): %u windows of 64 tokens (32 prompt + 32 decode), "
			       "4 domains\n", t->n_requests);
			run_all(t);
			locus_trace_free(t);
		} else {
			printf("ESFT: full data absent (%s): skipped\n", locus_data_dir());
		}
		trace = locus_data_sample_path();
	}
	if (locus_trace_load(trace, NULL, &t, &e) < 0) {
		fprintf(stderr, "epgroups_figures: %s\n", e.msg);
		return 1;
	}
	printf("%s: %u requests\n", trace, t->n_requests);
	run_all(t);
	locus_trace_free(t);
	return 0;
}
