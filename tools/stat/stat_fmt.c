// SPDX-License-Identifier: MIT
/*
 * locus-stat: the human table and the JSON rendering.
 *
 * Histogram summaries take the count as the sum of the buckets read in the
 * same pass (the count word may be a few records ahead or behind them while
 * writers run), so count, buckets and quantiles always agree.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "locus_stat.h"

static uint64_t hist_total(const uint64_t *h)
{
	uint64_t t = 0;

	for (unsigned i = 0; i < LOCUS_HIST_BUCKETS; i++)
		t += h[LOCUS_HIST_BUCKET0 + i];
	return t;
}

static const uint64_t *elem(const struct locus_stat_entry *e, uint32_t k)
{
	return e->w + (size_t)k * e->info->elem_words;
}

static int elem_is_zero(const struct locus_stat_entry *e, uint32_t k)
{
	const uint64_t *p = elem(e, k);

	if (e->info->kind == LOCUS_CTR_HISTOGRAM)
		return hist_total(p) == 0;
	return p[0] == 0;
}

static void fmt_uptime(char *buf, size_t len, const struct locus_stat_view *v)
{
	uint64_t s = v->now_ns > v->start_ns ? (v->now_ns - v->start_ns) / 1000000000ull : 0;

	snprintf(buf, len, "%" PRIu64 "d %02u:%02u:%02u", s / 86400,
		 (unsigned)(s / 3600 % 24), (unsigned)(s / 60 % 60), (unsigned)(s % 60));
}

/* ---------------------------------------------------------------- table */

static void table_name(char *buf, size_t len, const struct locus_stat_entry *e,
		       uint32_t k, int all)
{
	const struct locus_ctr_info *in = e->info;
	uint32_t idx[2];

	if (in->ndims == 0) {
		snprintf(buf, len, "%s", in->name);
		return;
	}
	locus_stat_elem_index(in, k, idx);
	if (in->ndims == 1)
		snprintf(buf, len, all ? "%s{%s=*}" : "%s{%s=%u}", in->name, in->label[0], idx[0]);
	else if (all)
		snprintf(buf, len, "%s{%s=*,%s=*}", in->name, in->label[0], in->label[1]);
	else
		snprintf(buf, len, "%s{%s=%u,%s=%u}", in->name, in->label[0], idx[0],
			 in->label[1], idx[1]);
}

static void table_value(char *buf, size_t len, const struct locus_stat_entry *e, uint32_t k)
{
	const uint64_t *p = elem(e, k);
	uint64_t n;

	switch (e->info->kind) {
	case LOCUS_CTR_COUNTER:
		snprintf(buf, len, "%" PRIu64, p[0]);
		break;
	case LOCUS_CTR_GAUGE:
		snprintf(buf, len, "%" PRId64, (int64_t)p[0]);
		break;
	default:
		n = hist_total(p);
		if (n == 0) {
			snprintf(buf, len, "count 0");
			break;
		}
		snprintf(buf, len, "count %" PRIu64 " sum %" PRIu64 " mean %.6g p50 %.6g p99 %.6g",
			 n, p[LOCUS_HIST_SUM], (double)p[LOCUS_HIST_SUM] / (double)n,
			 locus_hist_quantile(p, 0.5), locus_hist_quantile(p, 0.99));
	}
}

static void table_line(FILE *f, const struct locus_stat_view *v,
		       const struct locus_stat_entry *e, uint32_t k, int all)
{
	char name[200], val[200];
	double rate;

	table_name(name, sizeof(name), e, k, all);
	if (all)
		snprintf(val, sizeof(val), "0 (all %u elements)", e->info->n_elems);
	else
		table_value(val, sizeof(val), e, k);
	fprintf(f, "%-44s %-9s %20s", name, locus_ctr_kind_name(e->info->kind), val);
	if (v->interval_s > 0) {
		if (!all && locus_stat_rate(e, k, v->interval_s, &rate) == 0)
			fprintf(f, " %14.2f", rate);
		else
			fprintf(f, " %14s", "-");
	}
	fputc('\n', f);
}

int locus_stat_print_table(FILE *f, const struct locus_stat_view *v,
			   const struct locus_stat_snap *s)
{
	char up[64];

	fmt_uptime(up, sizeof(up), v);
	fprintf(f, "instance %s  state %s  owner pid %ld  uptime %s  lcore blocks %u  entries %u\n",
		v->instance, v->state, v->owner_pid, up, v->n_blocks, v->n_entries);
	if (v->role)
		fprintf(f, "lcore block %d (%s)\n", v->block, v->role);
	fprintf(f, "%-44s %-9s %20s", "NAME", "KIND", "VALUE");
	if (v->interval_s > 0)
		fprintf(f, " %14s", "RATE/s");
	fputc('\n', f);
	for (uint32_t i = 0; i < s->n; i++) {
		const struct locus_stat_entry *e = &s->e[i];
		int shown = 0;

		/* vectors: non-zero elements only (48 x 128 zeros help no one) */
		for (uint32_t k = 0; k < e->info->n_elems; k++) {
			if (e->info->ndims && elem_is_zero(e, k))
				continue;
			table_line(f, v, e, k, 0);
			shown++;
		}
		if (!shown)
			table_line(f, v, e, 0, 1);
	}
	if (v->interval_s > 0)
		fputc('\n', f);
	fflush(f);
	return ferror(f) ? -EIO : 0;
}

/* ----------------------------------------------------------------- JSON */

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch == '\n')
			fputs("\\n", f);
		else if (ch < 0x20 || ch == 0x7f)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

/* JSON has no NaN or infinity: those become null. */
static void json_num(FILE *f, double d)
{
	if (isfinite(d))
		fprintf(f, "%.17g", d);
	else
		fputs("null", f);
}

static void json_hist(FILE *f, const uint64_t *p)
{
	uint64_t n = hist_total(p);
	int first = 1;

	fprintf(f, "{\"count\":%" PRIu64 ",\"sum\":%" PRIu64 ",\"mean\":", n, p[LOCUS_HIST_SUM]);
	json_num(f, n ? (double)p[LOCUS_HIST_SUM] / (double)n : NAN);
	fputs(",\"p50\":", f);
	json_num(f, locus_hist_quantile(p, 0.5));
	fputs(",\"p99\":", f);
	json_num(f, locus_hist_quantile(p, 0.99));
	/* non-empty buckets only, as [inclusive upper bound, count] */
	fputs(",\"buckets\":[", f);
	for (unsigned i = 0; i < LOCUS_HIST_BUCKETS; i++) {
		uint64_t c = p[LOCUS_HIST_BUCKET0 + i];

		if (!c)
			continue;
		fprintf(f, "%s[%" PRIu64 ",%" PRIu64 "]", first ? "" : ",",
			locus_hist_bucket_le(i == LOCUS_HIST_BUCKETS - 1 ? 64 : i), c);
		first = 0;
	}
	fputs("]}", f);
}

static void json_value(FILE *f, const struct locus_stat_entry *e, uint32_t k)
{
	const uint64_t *p = elem(e, k);

	if (e->info->kind == LOCUS_CTR_COUNTER)
		fprintf(f, "%" PRIu64, p[0]);
	else if (e->info->kind == LOCUS_CTR_GAUGE)
		fprintf(f, "%" PRId64, (int64_t)p[0]);
	else
		json_hist(f, p);
}

static void json_rate(FILE *f, const struct locus_stat_entry *e, uint32_t k, double dt)
{
	double r;

	json_num(f, locus_stat_rate(e, k, dt, &r) == 0 ? r : NAN);
}

/* A vector as a flat array, a 2-D one as an array of rows. */
static void json_array(FILE *f, const struct locus_stat_entry *e, double dt, int rates)
{
	const struct locus_ctr_info *in = e->info;
	uint32_t row = in->ndims == 2 ? in->dim[1] : in->n_elems;

	fputs(in->ndims == 2 ? "[[" : "[", f);
	for (uint32_t k = 0; k < in->n_elems; k++) {
		if (k)
			fputs(in->ndims == 2 && k % row == 0 ? "],[" : ",", f);
		if (rates)
			json_rate(f, e, k, dt);
		else
			json_value(f, e, k);
	}
	fputs(in->ndims == 2 ? "]]" : "]", f);
}

static void json_entry(FILE *f, const struct locus_stat_view *v, const struct locus_stat_entry *e)
{
	const struct locus_ctr_info *in = e->info;
	int has_rate = v->interval_s > 0 && in->kind != LOCUS_CTR_GAUGE;

	fputs("{\"name\":", f);
	json_str(f, in->name);
	fputs(",\"kind\":", f);
	json_str(f, locus_ctr_kind_name(in->kind));
	fputs(",\"help\":", f);
	json_str(f, in->help);
	fputs(",\"labels\":[", f);
	for (uint32_t d = 0; d < in->ndims; d++) {
		if (d)
			fputc(',', f);
		json_str(f, in->label[d]);
	}
	fputs("],\"shape\":[", f);
	for (uint32_t d = 0; d < in->ndims; d++)
		fprintf(f, "%s%u", d ? "," : "", in->dim[d]);
	fputc(']', f);
	if (in->ndims == 0) {
		fputs(",\"value\":", f);
		json_value(f, e, 0);
		if (has_rate) {
			fputs(",\"rate\":", f);
			json_rate(f, e, 0, v->interval_s);
		}
	} else {
		fputs(",\"values\":", f);
		json_array(f, e, v->interval_s, 0);
		if (has_rate) {
			fputs(",\"rates\":", f);
			json_array(f, e, v->interval_s, 1);
		}
	}
	fputc('}', f);
}

/* One JSON object per sample, on one line (a --watch stream is JSON Lines). */
int locus_stat_print_json(FILE *f, const struct locus_stat_view *v,
			  const struct locus_stat_snap *s)
{
	double up = v->now_ns > v->start_ns ? (double)(v->now_ns - v->start_ns) / 1e9 : 0;

	fputs("{\"instance\":", f);
	json_str(f, v->instance);
	fputs(",\"state\":", f);
	json_str(f, v->state);
	fprintf(f, ",\"owner_pid\":%ld,\"start_time_ns\":%" PRIu64 ",\"time_ns\":%" PRIu64
		",\"uptime_s\":", v->owner_pid, v->start_ns, v->now_ns);
	json_num(f, up);
	fprintf(f, ",\"lcore_blocks\":%u,\"entries\":%u", v->n_blocks, v->n_entries);
	if (v->role) {
		fprintf(f, ",\"block\":%d,\"lcore\":", v->block);
		json_str(f, v->role);
	}
	if (v->interval_s > 0) {
		fputs(",\"interval_s\":", f);
		json_num(f, v->interval_s);
	}
	fputs(",\"metrics\":[", f);
	for (uint32_t i = 0; i < s->n; i++) {
		if (i)
			fputc(',', f);
		json_entry(f, v, &s->e[i]);
	}
	fputs("]}\n", f);
	fflush(f);
	return ferror(f) ? -EIO : 0;
}
