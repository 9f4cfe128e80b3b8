// SPDX-License-Identifier: MIT
/*
 * locus-stat --slow: who stalls the collectives. The ranks that take longest
 * to answer this node's ranks (rows sent to results back: rank_answers,
 * rank_answer_ns, rank_answer_max_ns), and the rails and peers whose
 * messages take longest from post to completion (rail_send_ns, by rail and
 * peer; rail_peer_node names the peer). Slowest first.
 */
#include <stdlib.h>
#include <string.h>

#include "locus_stat.h"

struct row {
	uint32_t a, b;       /* rank and node, or rail and node */
	uint64_t n;
	double mean, p50, p99, max;
};

static const struct locus_stat_entry *find(const struct locus_stat_snap *s, const char *name)
{
	for (uint32_t i = 0; i < s->n; i++)
		if (!strcmp(s->e[i].info->name, name))
			return &s->e[i];
	return NULL;
}

static int by_mean(const void *x, const void *y)
{
	const struct row *a = x, *b = y;

	return a->mean < b->mean ? 1 : a->mean > b->mean ? -1 : 0;
}

static int by_p99(const void *x, const void *y)
{
	const struct row *a = x, *b = y;

	return a->p99 < b->p99 ? 1 : a->p99 > b->p99 ? -1 : by_mean(x, y);
}

/* The ranks, slowest mean answer first. */
static int ranks(FILE *f, const struct locus_stat_snap *s, uint32_t top, uint32_t gpn)
{
	const struct locus_stat_entry *n = find(s, "rank_answers"), *ns = find(s, "rank_answer_ns");
	const struct locus_stat_entry *mx = find(s, "rank_answer_max_ns");
	struct row *r;
	uint32_t k = 0;

	if (!n || !ns || n->info->n_elems != ns->info->n_elems) {
		fprintf(f, "no rank answer times (a locusd without them)\n");
		return 0;
	}
	r = calloc(n->info->n_elems, sizeof(*r));
	if (!r)
		return -1;
	for (uint32_t i = 0; i < n->info->n_elems; i++) {
		if (!n->w[i])
			continue;
		r[k] = (struct row){ .a = i, .b = gpn ? i / gpn : 0, .n = n->w[i],
				     .mean = (double)ns->w[i] / (double)n->w[i] / 1e3,
				     .max = mx && i < mx->info->n_elems ? (double)mx->w[i] / 1e3 : 0 };
		k++;
	}
	qsort(r, k, sizeof(*r), by_mean);
	fprintf(f, "ranks, slowest to answer this node's ranks first (rows sent -> results "
		   "back)\n%6s %6s %12s %12s %16s\n", "rank", "node", "answers", "mean us",
		"max us (last s)");
	for (uint32_t i = 0; i < k && i < top; i++)
		fprintf(f, "%6u %6u %12llu %12.1f %16.1f\n", r[i].a, r[i].b,
			(unsigned long long)r[i].n, r[i].mean, r[i].max);
	if (!k)
		fprintf(f, "  (no answers timed yet)\n");
	free(r);
	return 0;
}

/* The rails to each peer, slowest p99 send first. */
static int rails(FILE *f, const struct locus_stat_snap *s, uint32_t top)
{
	const struct locus_stat_entry *h = find(s, "rail_send_ns"), *pn = find(s, "rail_peer_node");
	uint32_t n_peers, k = 0;
	struct row *r;

	if (!h || h->info->ndims != 2) {
		fprintf(f, "no send times by rail (one node, or no transport)\n");
		return 0;
	}
	n_peers = h->info->dim[1];
	r = calloc(h->info->n_elems, sizeof(*r));
	if (!r)
		return -1;
	for (uint32_t i = 0; i < h->info->n_elems; i++) {
		const uint64_t *w = h->w + (size_t)i * LOCUS_HIST_WORDS;
		uint32_t peer = i % n_peers;

		if (!w[LOCUS_HIST_COUNT])
			continue;
		r[k] = (struct row){ .a = i / n_peers,
				     .b = pn && peer < pn->info->n_elems ? (uint32_t)pn->w[peer] : peer,
				     .n = w[LOCUS_HIST_COUNT],
				     .mean = (double)w[LOCUS_HIST_SUM] / (double)w[LOCUS_HIST_COUNT] / 1e3,
				     .p50 = locus_hist_quantile(w, 0.5) / 1e3,
				     .p99 = locus_hist_quantile(w, 0.99) / 1e3 };
		k++;
	}
	qsort(r, k, sizeof(*r), by_p99);
	fprintf(f, "rails to peers, slowest sends first (post -> the peer's device acknowledged)\n"
		   "%6s %6s %12s %10s %10s %10s\n", "rail", "node", "messages", "p50 us", "p99 us",
		"mean us");
	for (uint32_t i = 0; i < k && i < top; i++)
		fprintf(f, "%6u %6u %12llu %10.1f %10.1f %10.1f\n", r[i].a, r[i].b,
			(unsigned long long)r[i].n, r[i].p50, r[i].p99, r[i].mean);
	if (!k)
		fprintf(f, "  (no sends completed yet)\n");
	free(r);
	return 0;
}

int locus_stat_print_slow(FILE *f, const struct locus_stat_snap *s, uint32_t top,
			  uint32_t gpus_per_node)
{
	if (ranks(f, s, top, gpus_per_node) < 0)
		return -1;
	fputc('\n', f);
	if (rails(f, s, top) < 0)
		return -1;
	return ferror(f) ? -1 : 0;
}
