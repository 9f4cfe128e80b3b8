// SPDX-License-Identifier: MIT
/* locus-stat: take a sample of the selected counters. */
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "locus_counters_priv.h"
#include "locus_stat.h"

static int selected(const char *name, char *const *pat, int npat)
{
	if (npat == 0)
		return 1;
	for (int i = 0; i < npat; i++)
		if (fnmatch(pat[i], name, 0) == 0)
			return 1;
	return 0;
}

int locus_stat_sample(const struct locus_counters *c, char *const *pat, int npat, int block,
		      struct locus_stat_snap *s)
{
	uint32_t n = locus_counters_n_entries(c);
	struct timespec ts;

	memset(s, 0, sizeof(*s));
	s->e = calloc(n ? n : 1, sizeof(*s->e));
	if (!s->e)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		const struct locus_ctr_info *in = locus_counters_info(c, i);
		struct locus_stat_entry *e;
		size_t words;

		if (!selected(in->name, pat, npat))
			continue;
		words = (size_t)in->n_elems * in->elem_words;
		e = &s->e[s->n];
		e->idx = i;
		e->info = in;
		e->w = malloc(words * sizeof(*e->w));
		if (!e->w)
			goto err_free;
		s->n++;
		if ((block < 0 ? locus_counters_sum(c, i, e->w, words)
			       : locus_counters_read_block(c, i, (uint32_t)block, e->w, words)) < 0)
			goto err_free;
	}
	clock_gettime(CLOCK_MONOTONIC, &ts);
	s->mono_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	return 0;

err_free:
	locus_stat_snap_free(s);
	return -ENOMEM;
}

/* Whether block b is an engine's: its "engines" gauge reads 1. */
static int engine_block(const struct locus_counters *c, int idx, uint32_t b)
{
	uint64_t v = 0;

	return idx >= 0 && locus_counters_read_block(c, (uint32_t)idx, b, &v, 1) == 1 && v == 1;
}

void locus_stat_block_role(const struct locus_counters *c, uint32_t b, char *buf, size_t len)
{
	int idx = locus_counters_find(c, "engines");
	uint32_t k = 0;

	if (!engine_block(c, idx, b)) {
		snprintf(buf, len, "main");
		return;
	}
	for (uint32_t i = 0; i < b; i++)
		k += (uint32_t)engine_block(c, idx, i);
	snprintf(buf, len, "engine %u", k);
}

void locus_stat_snap_free(struct locus_stat_snap *s)
{
	for (uint32_t i = 0; i < s->n; i++)
		free(s->e[i].w);
	free(s->e);
	memset(s, 0, sizeof(*s));
}

void locus_stat_link(struct locus_stat_snap *cur, const struct locus_stat_snap *prev)
{
	uint32_t j = 0;

	/* both are in directory order: one merge pass */
	for (uint32_t i = 0; i < cur->n; i++) {
		cur->e[i].prev = NULL;
		while (prev && j < prev->n && prev->e[j].idx < cur->e[i].idx)
			j++;
		if (prev && j < prev->n && prev->e[j].idx == cur->e[i].idx)
			cur->e[i].prev = prev->e[j].w;
	}
}

int locus_stat_rate(const struct locus_stat_entry *e, uint32_t k, double interval_s,
		    double *rate)
{
	size_t w = (size_t)k * e->info->elem_words;
	uint64_t a, b;

	if (!e->prev || interval_s <= 0 || e->info->kind == LOCUS_CTR_GAUGE)
		return -1;
	if (e->info->kind == LOCUS_CTR_HISTOGRAM)
		w += LOCUS_HIST_COUNT;
	a = e->prev[w];
	b = e->w[w];
	if (b < a)
		return -1;
	*rate = (double)(b - a) / interval_s;
	return 0;
}

void locus_stat_elem_index(const struct locus_ctr_info *in, uint32_t k, uint32_t idx[2])
{
	if (in->ndims == 2) {
		idx[0] = k / in->dim[1];
		idx[1] = k % in->dim[1];
	} else {
		idx[0] = k;
		idx[1] = 0;
	}
}
