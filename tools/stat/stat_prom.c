// SPDX-License-Identifier: MIT
/*
 * locus-stat: Prometheus text exposition format (version 0.0.4).
 *
 * Metric names are "locus_" + the entry name; counters end in "_total".
 * Vector elements carry their label names with the element index as value.
 * A log2 histogram becomes cumulative buckets at the inclusive upper bounds
 * 0, 1, 3, 7, ... 2^62 - 1, then le="+Inf" (bucket 63 is open-ended), with
 * _count equal to the +Inf bucket and _sum the sum word (mod 2^64).
 *
 * Prometheus wants base units: an entry named in nanoseconds or microseconds
 * ("route_ns", "x_us") is exported in seconds ("locus_route_seconds"), its
 * values, bucket bounds and sum divided exactly (decimal, no rounding).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locus_stat.h"

/* Entry-name suffixes in a sub-second unit, with the digits a second has. */
static const struct {
	const char *sfx;
	unsigned digits;
} sub_second[] = { { "_ns", 9 }, { "_us", 6 } };

/* Digits after the decimal point the entry's values take in seconds (0: as is). */
static unsigned unit_digits(const char *name)
{
	size_t n = strlen(name);

	for (size_t i = 0; i < sizeof(sub_second) / sizeof(sub_second[0]); i++) {
		size_t k = strlen(sub_second[i].sfx);

		if (n > k && !strcmp(name + n - k, sub_second[i].sfx))
			return sub_second[i].digits;
	}
	return 0;
}

/* v / 10^digits as an exact decimal, trailing zeros dropped: 1017 ns -> 0.000001017. */
static void scaled_u64(char *buf, size_t len, uint64_t v, unsigned digits)
{
	uint64_t one = 1;
	int n;

	for (unsigned i = 0; i < digits; i++)
		one *= 10;
	if (digits == 0 || v % one == 0) {
		snprintf(buf, len, "%" PRIu64, v / one);
		return;
	}
	n = snprintf(buf, len, "%" PRIu64 ".%0*" PRIu64, v / one, (int)digits, v % one);
	while (n > 0 && (size_t)n < len && buf[n - 1] == '0')
		buf[--n] = '\0';
}

/* HELP text escaping: backslash and line feed. */
static void prom_help(FILE *f, const char *metric, const char *help)
{
	fprintf(f, "# HELP %s ", metric);
	if (!help[0])
		help = "(no help text registered)";
	for (; *help; help++) {
		if (*help == '\\')
			fputs("\\\\", f);
		else if (*help == '\n')
			fputs("\\n", f);
		else
			fputc(*help, f);
	}
	fputc('\n', f);
}

/* Label value escaping: backslash, double quote and line feed. */
static void prom_label_value(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			fprintf(f, "\\%c", *s);
		else if (*s == '\n')
			fputs("\\n", f);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

/* The labels of element k, each followed by a comma when more follow. */
static void elem_labels(char *buf, size_t len, const struct locus_ctr_info *in, uint32_t k)
{
	uint32_t idx[2];

	buf[0] = '\0';
	if (in->ndims == 0)
		return;
	locus_stat_elem_index(in, k, idx);
	if (in->ndims == 1)
		snprintf(buf, len, "%s=\"%u\"", in->label[0], idx[0]);
	else
		snprintf(buf, len, "%s=\"%u\",%s=\"%u\"", in->label[0], idx[0],
			 in->label[1], idx[1]);
}

static void sample_line(FILE *f, const char *metric, const char *suffix, const char *labels,
			const char *extra, const char *value)
{
	int any = labels[0] || extra[0];

	fprintf(f, "%s%s%s%s%s%s%s %s\n", metric, suffix, any ? "{" : "", labels,
		labels[0] && extra[0] ? "," : "", extra, any ? "}" : "", value);
}

static void prom_hist(FILE *f, const char *metric, const char *labels, const uint64_t *p,
		      unsigned digits)
{
	char le[64], bound[40], val[40];
	uint64_t cum = 0;

	for (unsigned i = 0; i < LOCUS_HIST_BUCKETS; i++) {
		cum += p[LOCUS_HIST_BUCKET0 + i];
		if (i == LOCUS_HIST_BUCKETS - 1) {
			snprintf(le, sizeof(le), "le=\"+Inf\"");
		} else {
			scaled_u64(bound, sizeof(bound), locus_hist_bucket_le(i), digits);
			snprintf(le, sizeof(le), "le=\"%s\"", bound);
		}
		snprintf(val, sizeof(val), "%" PRIu64, cum);
		sample_line(f, metric, "_bucket", labels, le, val);
	}
	scaled_u64(val, sizeof(val), p[LOCUS_HIST_SUM], digits);
	sample_line(f, metric, "_sum", labels, "", val);
	snprintf(val, sizeof(val), "%" PRIu64, cum);
	sample_line(f, metric, "_count", labels, "", val);
}

#define PROM_NAME_MAX (LOCUS_CTR_NAME_MAX + 32)

/*
 * Sample names already printed. Distinct entry names can still map to one
 * Prometheus name (counter "x" and counter "x_total", histogram "h" and
 * gauge "h_sum"); a scraper rejects such output, so the later entry is left
 * out with a warning. Open addressing, sized for every name up front.
 */
struct name_set {
	char (*slot)[PROM_NAME_MAX];
	size_t mask;
};

static uint64_t fnv1a(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return h;
}

static int set_init(struct name_set *ns, size_t names)
{
	size_t cap = 16;

	while (cap < 2 * names)
		cap *= 2;
	ns->slot = calloc(cap, sizeof(*ns->slot));
	ns->mask = cap - 1;
	return ns->slot ? 0 : -ENOMEM;
}

/* Slot of name: where it is, or the empty slot where it would go. */
static char *set_find(const struct name_set *ns, const char *name)
{
	size_t i = (size_t)fnv1a(name) & ns->mask;

	while (ns->slot[i][0] && strcmp(ns->slot[i], name))
		i = (i + 1) & ns->mask;
	return ns->slot[i];
}

static void metric_name(char *buf, const struct locus_ctr_info *in)
{
	size_t n = strlen(in->name);
	int total = in->kind == LOCUS_CTR_COUNTER &&
		    !(n >= 6 && strcmp(in->name + n - 6, "_total") == 0);
	int base = unit_digits(in->name) ? 3 : 0; /* "_ns" / "_us" become "_seconds" */

	snprintf(buf, PROM_NAME_MAX, "locus_%.*s%s%s", (int)(n - base), in->name,
		 base ? "_seconds" : "", total ? "_total" : "");
}

/* Claim every name entry e prints; 0, or -EEXIST naming the clash in *clash. */
static int claim_names(struct name_set *ns, const struct locus_ctr_info *in, const char **clash)
{
	static const char *const hist_sfx[] = { "", "_bucket", "_sum", "_count" };
	char names[4][PROM_NAME_MAX];
	int k = in->kind == LOCUS_CTR_HISTOGRAM ? 4 : 1;

	for (int i = 0; i < k; i++) {
		metric_name(names[i], in);
		strcat(names[i], hist_sfx[i]);
		if (set_find(ns, names[i])[0]) {
			*clash = set_find(ns, names[i]);
			return -EEXIST;
		}
	}
	for (int i = 0; i < k; i++)
		strcpy(set_find(ns, names[i]), names[i]);
	return 0;
}

static void prom_entry(FILE *f, const struct locus_stat_entry *e)
{
	const struct locus_ctr_info *in = e->info;
	char metric[PROM_NAME_MAX], labels[2 * LOCUS_CTR_LABEL_MAX + 32], val[40];
	unsigned digits = unit_digits(in->name);

	metric_name(metric, in);
	prom_help(f, metric, in->help);
	fprintf(f, "# TYPE %s %s\n", metric, locus_ctr_kind_name(in->kind));
	for (uint32_t k = 0; k < in->n_elems; k++) {
		const uint64_t *p = e->w + (size_t)k * in->elem_words;

		elem_labels(labels, sizeof(labels), in, k);
		if (in->kind == LOCUS_CTR_HISTOGRAM) {
			prom_hist(f, metric, labels, p, digits);
			continue;
		}
		if (in->kind == LOCUS_CTR_GAUGE && (int64_t)p[0] < 0) {
			scaled_u64(val + 1, sizeof(val) - 1, -(uint64_t)p[0], digits);
			val[0] = '-';
		} else {
			scaled_u64(val, sizeof(val), p[0], digits);
		}
		sample_line(f, metric, "", labels, "", val);
	}
}

int locus_stat_print_prom(FILE *f, const struct locus_stat_view *v,
			  const struct locus_stat_snap *s)
{
	struct name_set ns;

	if (set_init(&ns, 4 * (size_t)s->n + 2) < 0)
		return -ENOMEM;
	strcpy(set_find(&ns, "locus_stat_segment_info"), "locus_stat_segment_info");
	strcpy(set_find(&ns, "locus_stat_segment_start_time_seconds"),
	       "locus_stat_segment_start_time_seconds");
	fputs("# HELP locus_stat_segment_info The segment locus-stat read: instance, state and owner pid.\n"
	      "# TYPE locus_stat_segment_info gauge\n"
	      "locus_stat_segment_info{instance=", f);
	prom_label_value(f, v->instance);
	fputs(",state=", f);
	prom_label_value(f, v->state);
	fprintf(f, ",owner_pid=\"%ld\"} 1\n", v->owner_pid);
	fprintf(f, "# HELP locus_stat_segment_start_time_seconds When the data plane created the segment (Unix time).\n"
		"# TYPE locus_stat_segment_start_time_seconds gauge\n"
		"locus_stat_segment_start_time_seconds %" PRIu64 ".%09" PRIu64 "\n",
		v->start_ns / UINT64_C(1000000000), v->start_ns % UINT64_C(1000000000));
	for (uint32_t i = 0; i < s->n; i++) {
		const char *clash;

		if (claim_names(&ns, s->e[i].info, &clash) < 0) {
			fprintf(stderr, "locus-stat: %s left out of the Prometheus output: its name clashes with %s\n",
				s->e[i].info->name, clash);
			continue;
		}
		prom_entry(f, &s->e[i]);
	}
	free(ns.slot);
	fflush(f);
	return ferror(f) ? -EIO : 0;
}
