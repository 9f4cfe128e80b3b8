// SPDX-License-Identifier: MIT
/* Prometheus text format checker for tests; see stat_test_prom.h. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stat_test_prom.h"

#define MAX_SERIES 1024

/* Histogram series of the current family, keyed by their labels minus le. */
struct series {
	char key[256];
	double last_le, last_cum, inf;
	int n_buckets, has_inf, has_count, has_sum;
};

struct state {
	struct prom_doc *d;
	char *err;
	size_t errlen;
	int line;
	const char *help_name;   /* family announced by # HELP, awaiting # TYPE */
	struct prom_family *cur; /* family whose samples may follow */
	struct series ser[MAX_SERIES];
	int n_ser;
};

static int fail(struct state *st, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(st->err, st->errlen, "line %d: ", st->line);

	va_start(ap, fmt);
	if (n > 0 && (size_t)n < st->errlen)
		vsnprintf(st->err + n, st->errlen - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

static int is_name_char(char c, int first, int metric)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_')
		return 1;
	if (metric && c == ':')
		return 1;
	return !first && c >= '0' && c <= '9';
}

static size_t name_len(const char *p, int metric)
{
	size_t n = 0;

	while (is_name_char(p[n], n == 0, metric))
		n++;
	return n;
}

static int ends_with(const char *s, size_t n, const char *suf)
{
	size_t k = strlen(suf);

	return n >= k && strncmp(s + n - k, suf, k) == 0;
}

static struct prom_family *family(struct prom_doc *d, const char *name)
{
	for (size_t i = 0; i < d->n_fam; i++)
		if (strcmp(d->f[i].name, name) == 0)
			return &d->f[i];
	return NULL;
}

/* Every histogram series of the family that just ended is complete. */
static int close_family(struct state *st)
{
	for (int i = 0; i < st->n_ser; i++) {
		struct series *s = &st->ser[i];

		if (!s->has_inf || !s->has_count || !s->has_sum)
			return fail(st, "histogram %s{%s}: +Inf bucket %d, _count %d, _sum %d",
				    st->cur->name, s->key, s->has_inf, s->has_count, s->has_sum);
	}
	st->n_ser = 0;
	st->cur = NULL;
	return 0;
}

static int comment(struct state *st, const char *l, size_t len)
{
	struct prom_doc *d = st->d;
	const char *name = l + 7;
	size_t n = name_len(name, 1);
	char *nm;

	if (len < 8 || (strncmp(l, "# HELP ", 7) && strncmp(l, "# TYPE ", 7)))
		return fail(st, "unexpected comment");
	if (n == 0 || name[n] != ' ')
		return fail(st, "bad metric name after %.6s", l + 2);
	nm = strndup(name, n);
	if (l[2] == 'H') {
		if (st->cur && close_family(st) < 0)
			goto err;
		if (family(d, nm) || st->help_name) {
			fail(st, "family %s repeated or # TYPE missing", nm);
			goto err;
		}
		d->f = realloc(d->f, (d->n_fam + 1) * sizeof(*d->f));
		d->f[d->n_fam] = (struct prom_family){ .name = nm,
			.help = strndup(name + n + 1, len - 7 - n - 1) };
		st->help_name = d->f[d->n_fam++].name;
		return 0;
	}
	if (!st->help_name || strcmp(st->help_name, nm)) {
		fail(st, "# TYPE %s without its # HELP just before", nm);
		goto err;
	}
	st->cur = family(d, nm);
	st->cur->type = strndup(name + n + 1, len - 7 - n - 1);
	st->help_name = NULL;
	free(nm);
	if (strcmp(st->cur->type, "counter") && strcmp(st->cur->type, "gauge") &&
	    strcmp(st->cur->type, "histogram"))
		return fail(st, "type %s", st->cur->type);
	if (!strcmp(st->cur->type, "counter") && !ends_with(st->cur->name, strlen(st->cur->name),
							      "_total"))
		return fail(st, "counter %s does not end in _total", st->cur->name);
	return 0;
err:
	free(nm);
	return -1;
}

/* Parse {a="x",b="y"}; the key of the labels other than le into rest,
 * le's value into le (empty if none). Returns characters consumed or -1. */
static int labels(struct state *st, const char *p, char *rest, size_t rlen, char *le,
		  size_t lelen)
{
	const char *q = p + 1;

	rest[0] = le[0] = '\0';
	if (*p != '{')
		return 0;
	while (*q != '}') {
		size_t n = name_len(q, 0), vn = 0;
		const char *v;
		char val[128];

		if (n == 0 || q[n] != '=' || q[n + 1] != '"')
			return fail(st, "bad label at \"%.20s\"", q);
		for (v = q + n + 2; *v != '"'; v++) {
			if (*v == '\n' || *v == '\0')
				return fail(st, "unterminated label value");
			if (*v == '\\') {
				v++;
				if (*v != '\\' && *v != '"' && *v != 'n')
					return fail(st, "bad escape in label value");
			}
			if (vn + 1 < sizeof(val))
				val[vn++] = *v;
		}
		val[vn] = '\0';
		if (n == 2 && !strncmp(q, "le", 2)) {
			snprintf(le, lelen, "%s", val);
		} else {
			size_t k = strlen(rest);

			snprintf(rest + k, rlen - k, "%s%.*s=%s", k ? "," : "", (int)n, q, val);
		}
		q = v + 1;
		if (*q == ',')
			q++;
		else if (*q != '}')
			return fail(st, "expected , or } after a label");
	}
	return (int)(q + 1 - p);
}

static int check_hist(struct state *st, const char *name, size_t n, const char *rest,
		      const char *le, double v)
{
	const char *fam = st->cur->name;
	size_t fl = strlen(fam);
	struct series *s = NULL;

	if (n <= fl || strncmp(name, fam, fl))
		return fail(st, "sample %.*s outside family %s", (int)n, name, fam);
	for (int i = 0; i < st->n_ser; i++)
		if (!strcmp(st->ser[i].key, rest))
			s = &st->ser[i];
	if (!s) {
		if (st->n_ser == MAX_SERIES)
			return fail(st, "too many series");
		s = &st->ser[st->n_ser++];
		memset(s, 0, sizeof(*s));
		snprintf(s->key, sizeof(s->key), "%s", rest);
		s->last_le = -INFINITY;
	}
	if (n == fl + 7 && !strncmp(name + fl, "_bucket", 7)) {
		double b = !strcmp(le, "+Inf") ? INFINITY : strtod(le, NULL);

		if (!le[0] || s->has_inf || b <= s->last_le || v < s->last_cum)
			return fail(st, "bucket le=\"%s\" %g not increasing/cumulative", le, v);
		s->last_le = b;
		s->last_cum = v;
		if (isinf(b)) {
			s->has_inf = 1;
			s->inf = v;
		}
	} else if (!strncmp(name + fl, "_count", 6) && n == fl + 6) {
		if (!s->has_inf || v != s->inf)
			return fail(st, "_count %g != +Inf bucket %g", v, s->inf);
		s->has_count = 1;
	} else if (!strncmp(name + fl, "_sum", 4) && n == fl + 4) {
		s->has_sum = 1;
	} else {
		return fail(st, "sample %.*s in histogram %s", (int)n, name, fam);
	}
	return 0;
}

static int sample(struct state *st, const char *l, size_t len)
{
	struct prom_doc *d = st->d;
	size_t n = name_len(l, 1);
	char rest[256], le[128], *end, *val;
	int k;
	double v;

	if (n == 0)
		return fail(st, "line does not start with a metric name");
	if (!st->cur)
		return fail(st, "sample without # HELP and # TYPE before it");
	if (strncmp(l, "locus_", 6))
		return fail(st, "metric not prefixed locus_");
	k = labels(st, l + n, rest, sizeof(rest), le, sizeof(le));
	if (k < 0)
		return -1;
	if (l[n + k] != ' ' || n + k + 1 >= len)
		return fail(st, "expected one blank then a value");
	val = strndup(l + n + k + 1, len - n - k - 1);
	v = strtod(val, &end);
	if (*end || end == val) {
		free(val);
		return fail(st, "value \"%s\" is not a number", l + n + k + 1);
	}
	d->s = realloc(d->s, (d->n_samples + 1) * sizeof(*d->s));
	d->s[d->n_samples++] = (struct prom_sample){ .key = strndup(l, n + (size_t)k),
						     .value = val };
	if (!strcmp(st->cur->type, "histogram"))
		return check_hist(st, l, n, rest, le, v);
	if (n != strlen(st->cur->name) || strncmp(l, st->cur->name, n))
		return fail(st, "sample %.*s in family %s", (int)n, l, st->cur->name);
	if (le[0])
		return fail(st, "le label outside a histogram");
	return 0;
}

int prom_parse(const char *text, struct prom_doc *d, char *err, size_t errlen)
{
	static struct state st;
	const char *l = text;

	memset(d, 0, sizeof(*d));
	memset(&st, 0, sizeof(st));
	st.d = d;
	st.err = err;
	st.errlen = errlen;
	while (*l) {
		const char *nl = strchr(l, '\n');
		size_t len;
		int rc;

		st.line++;
		if (!nl)
			return fail(&st, "last line lacks its line feed");
		len = (size_t)(nl - l);
		if (len == 0)
			rc = 0;
		else if (l[0] == '#')
			rc = comment(&st, l, len);
		else
			rc = sample(&st, l, len);
		if (rc < 0)
			return -1;
		l = nl + 1;
	}
	if (st.help_name)
		return fail(&st, "# HELP %s without # TYPE", st.help_name);
	return st.cur ? close_family(&st) : 0;
}

const char *prom_value(const struct prom_doc *d, const char *key)
{
	for (size_t i = 0; i < d->n_samples; i++)
		if (!strcmp(d->s[i].key, key))
			return d->s[i].value;
	return NULL;
}

const char *prom_type(const struct prom_doc *d, const char *name)
{
	struct prom_family *f = family((struct prom_doc *)d, name);

	return f ? f->type : NULL;
}

const char *prom_help(const struct prom_doc *d, const char *name)
{
	struct prom_family *f = family((struct prom_doc *)d, name);

	return f ? f->help : NULL;
}

void prom_free(struct prom_doc *d)
{
	for (size_t i = 0; i < d->n_samples; i++) {
		free(d->s[i].key);
		free(d->s[i].value);
	}
	for (size_t i = 0; i < d->n_fam; i++) {
		free(d->f[i].name);
		free(d->f[i].type);
		free(d->f[i].help);
	}
	free(d->s);
	free(d->f);
	memset(d, 0, sizeof(*d));
}
