// SPDX-License-Identifier: MIT
/*
 * EPLB interop: the phy2log / log2phy / logcnt tables of deepseek-ai/EPLB
 * (and the vLLM / SGLang load balancers built on it), as JSON.
 *
 *   phy2log[l][p]    logical expert in physical slot p; slot p lives on rank
 *                    p / slots_per_rank (rank-major layout)
 *   log2phy[l][e][i] physical slots of expert e, -1 padded
 *   logcnt[l][e]     number of copies of expert e
 *
 * locus has a primary per expert; EPLB does not. Export lists the primary's
 * slot first in log2phy; import takes log2phy[l][e][0] as the primary (for
 * EPLB's own output, the slot the expert had before replication) and every
 * other copy as a replica on its slot's rank, also where that rank already
 * holds a copy: EPLB may put two copies of one expert on one GPU, and they
 * stay two slots.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locus_err_priv.h"
#include "locus_gracefit.h"
#include "locus_tblfile.h"
#include "locus_tblfile_priv.h"

#define HDR sizeof(struct locus_tbl_hdr)
#define JSON_MAX_DEPTH 3

/* ---- a strict reader for {"key": nested int arrays, ...} --------------- */

struct jarr {
	int64_t *v;
	size_t n, cap;
	uint32_t ndim;
	size_t shape[JSON_MAX_DEPTH];
	int seen[JSON_MAX_DEPTH];
};

struct jctx {
	const char *s;
	size_t len, pos;
	struct locus_error *err;
};

static void ws(struct jctx *c)
{
	while (c->pos < c->len && (c->s[c->pos] == ' ' || c->s[c->pos] == '\n' ||
				   c->s[c->pos] == '\t' || c->s[c->pos] == '\r'))
		c->pos++;
}

static int jfail(struct jctx *c, const char *what)
{
	return locus_error_set(c->err, LOCUS_EPARSE, "EPLB JSON at byte %zu: %s", c->pos, what);
}

static int expect(struct jctx *c, char ch)
{
	ws(c);
	if (c->pos >= c->len || c->s[c->pos] != ch) {
		char m[32];

		snprintf(m, sizeof(m), "expected '%c'", ch);
		return jfail(c, m);
	}
	c->pos++;
	return 0;
}

static int jint(struct jctx *c, int64_t *out)
{
	int neg = 0;
	uint64_t v = 0;
	size_t start;

	ws(c);
	if (c->pos < c->len && c->s[c->pos] == '-') {
		neg = 1;
		c->pos++;
	}
	start = c->pos;
	while (c->pos < c->len && c->s[c->pos] >= '0' && c->s[c->pos] <= '9') {
		v = v * 10 + (uint64_t)(c->s[c->pos++] - '0');
		if (v > (1ull << 31))
			return jfail(c, "integer out of range");
	}
	if (c->pos == start)
		return jfail(c, "expected an integer");
	if (c->pos - start > 1 && c->s[start] == '0')
		return jfail(c, "leading zero");
	if (c->pos < c->len && (c->s[c->pos] == '.' || c->s[c->pos] == 'e' ||
				c->s[c->pos] == 'E'))
		return jfail(c, "expected an integer, found a fraction or exponent");
	*out = neg ? -(int64_t)v : (int64_t)v;
	return 0;
}

static int push(struct jctx *c, struct jarr *a, int64_t v)
{
	if (a->n == a->cap) {
		size_t nc = a->cap ? a->cap * 2 : 1024;
		int64_t *nv = realloc(a->v, nc * sizeof(*nv));

		if (!nv)
			return locus_error_set(c->err, ENOMEM, "EPLB JSON: out of memory");
		a->v = nv;
		a->cap = nc;
	}
	a->v[a->n++] = v;
	return 0;
}

/* A rectangular array of depth ndim (fixed by the first leaf reached). */
static int jarray(struct jctx *c, struct jarr *a, uint32_t depth)
{
	size_t count = 0;
	int rc;

	if (depth >= JSON_MAX_DEPTH)
		return jfail(c, "arrays nested too deep");
	rc = expect(c, '[');
	if (rc)
		return rc;
	ws(c);
	if (c->pos < c->len && c->s[c->pos] == ']')
		return jfail(c, "empty array");
	for (;;) {
		ws(c);
		if (c->pos < c->len && c->s[c->pos] == '[') {
			if (a->ndim && depth + 1 >= a->ndim)
				return jfail(c, "array where an integer belongs (ragged nesting)");
			rc = jarray(c, a, depth + 1);
		} else {
			int64_t v = 0;

			if (a->ndim && depth + 1 != a->ndim)
				return jfail(c, "integer where an array belongs (ragged nesting)");
			a->ndim = depth + 1;
			rc = jint(c, &v);
			if (!rc)
				rc = push(c, a, v);
		}
		if (rc)
			return rc;
		count++;
		ws(c);
		if (c->pos < c->len && c->s[c->pos] == ',') {
			c->pos++;
			continue;
		}
		rc = expect(c, ']');
		if (rc)
			return rc;
		break;
	}
	if (!a->seen[depth]) {
		a->seen[depth] = 1;
		a->shape[depth] = count;
	} else if (a->shape[depth] != count) {
		return jfail(c, "rows of different lengths");
	}
	return 0;
}

static int jstring(struct jctx *c, char *buf, size_t sz)
{
	size_t n = 0;
	int rc = expect(c, '"');

	if (rc)
		return rc;
	while (c->pos < c->len && c->s[c->pos] != '"') {
		if (c->s[c->pos] == '\\' || (unsigned char)c->s[c->pos] < 0x20)
			return jfail(c, "escapes and control characters not accepted in keys");
		if (n + 1 < sz)
			buf[n++] = c->s[c->pos];
		c->pos++;
	}
	buf[n] = '\0';
	return expect(c, '"');
}

/* ---- import ------------------------------------------------------------- */

struct eplb {
	struct jarr phy2log, log2phy, logcnt;
};

static void eplb_free(struct eplb *t)
{
	free(t->phy2log.v);
	free(t->log2phy.v);
	free(t->logcnt.v);
}

static int eplb_parse(const char *json, size_t len, struct eplb *t, struct locus_error *err)
{
	struct jctx c = { .s = json, .len = len, .err = err };
	char key[32];
	int rc, got = 0;

	rc = expect(&c, '{');
	while (!rc) {
		struct jarr *a = NULL;

		rc = jstring(&c, key, sizeof(key));
		if (!rc)
			rc = expect(&c, ':');
		if (rc)
			break;
		if (!strcmp(key, "phy2log"))
			a = &t->phy2log;
		else if (!strcmp(key, "log2phy"))
			a = &t->log2phy;
		else if (!strcmp(key, "logcnt"))
			a = &t->logcnt;
		else
			return locus_error_set(err, LOCUS_EPARSE, "EPLB JSON: unknown key \"%s\"",
					       key);
		if (a->n)
			return locus_error_set(err, LOCUS_EPARSE, "EPLB JSON: key \"%s\" twice", key);
		rc = jarray(&c, a, 0);
		if (rc)
			break;
		got++;
		ws(&c);
		if (c.pos < c.len && c.s[c.pos] == ',') {
			c.pos++;
			continue;
		}
		rc = expect(&c, '}');
		break;
	}
	if (rc)
		return rc;
	ws(&c);
	if (c.pos != c.len)
		return jfail(&c, "trailing characters after the object");
	if (got != 3)
		return locus_error_set(err, LOCUS_EPARSE,
				       "EPLB JSON needs phy2log, log2phy and logcnt");
	if (t->phy2log.ndim != 2 || t->log2phy.ndim != 3 || t->logcnt.ndim != 2)
		return locus_error_set(err, LOCUS_EPARSE, "EPLB JSON: phy2log and logcnt must "
				       "be 2-D, log2phy 3-D");
	return 0;
}

int locus_gracefit_eplb_import(const char *json, size_t len,
			       const struct locus_gracefit_topo *topo, const double *W,
			       void **blob, size_t *blob_len, struct locus_error *err)
{
	struct eplb t = { 0 };
	struct locus_grace_dims d = { 0 };
	struct locus_grace_view v;
	uint32_t L, E, P, X, N, S;
	uint32_t *npri = NULL, *nrep = NULL;
	double *pred = NULL;
	uint8_t *b = NULL;
	size_t plen;
	int rc;

	if (!json || !topo || !blob || !blob_len)
		return locus_error_set(err, EINVAL, "EPLB import: bad arguments");
	rc = eplb_parse(json, len, &t, err);
	if (rc)
		goto out;
	L = (uint32_t)t.phy2log.shape[0];
	P = (uint32_t)t.phy2log.shape[1];
	E = (uint32_t)t.log2phy.shape[1];
	X = (uint32_t)t.log2phy.shape[2];
	N = topo->n_nodes * topo->gpus_per_node;
	if (t.log2phy.shape[0] != L || t.logcnt.shape[0] != L || t.logcnt.shape[1] != E) {
		rc = locus_error_set(err, LOCUS_ERANGE, "EPLB shapes disagree: phy2log [%u][%u], "
				     "log2phy [%zu][%u][%u], logcnt [%zu][%zu]", L, P,
				     t.log2phy.shape[0], E, X, t.logcnt.shape[0],
				     t.logcnt.shape[1]);
		goto out;
	}
	if (N == 0 || N > LOCUS_GRACE_MAX_RANKS || P % N) {
		rc = locus_error_set(err, LOCUS_ERANGE, "%u physical slots do not divide over "
				     "%u ranks", P, N);
		goto out;
	}
	S = P / N;
	d.n_layers = L;
	d.n_experts = E;
	d.n_nodes = topo->n_nodes;
	d.gpus_per_node = topo->gpus_per_node;
	/* at least a fit's R; more when an expert has more copies than ranks */
	d.max_replicas = LOCUS_MIN(N - 1, LOCUS_GRACE_MAX_REPLICAS);
	d.capacity = LOCUS_MAX(topo->capacity, 1u);
	d.replica_budget = topo->replica_budget;
	npri = calloc(N, sizeof(*npri));
	nrep = calloc(N, sizeof(*nrep));
	pred = calloc(N, sizeof(*pred));
	if (!npri || !nrep || !pred) {
		rc = locus_error_set(err, ENOMEM, "EPLB import: out of memory");
		goto out;
	}
	/* consistency first: every copy listed agrees with phy2log and logcnt */
	for (uint32_t l = 0; l < L; l++) {
		for (uint32_t p = 0; p < P; p++) {
			int64_t e = t.phy2log.v[(size_t)l * P + p];

			if (e < 0 || e >= E) {
				rc = locus_error_set(err, LOCUS_ERANGE, "phy2log[%u][%u] = %lld "
						     "is not an expert id < %u", l, p,
						     (long long)e, E);
				goto out;
			}
		}
		memset(npri, 0, N * sizeof(*npri));
		memset(nrep, 0, N * sizeof(*nrep));
		for (uint32_t e = 0; e < E; e++) {
			const int64_t *ph = t.log2phy.v + ((size_t)l * E + e) * X;
			int64_t cnt = t.logcnt.v[(size_t)l * E + e], n = 0, occ = 0;

			for (uint32_t i = 0; i < X; i++) {
				if (ph[i] == -1)
					continue;
				if (ph[i] < 0 || ph[i] >= P || t.phy2log.v[(size_t)l * P + ph[i]] != e) {
					rc = locus_error_set(err, LOCUS_ERANGE,
							     "log2phy[%u][%u][%u] = %lld does not "
							     "hold expert %u in phy2log", l, e, i,
							     (long long)ph[i], e);
					goto out;
				}
				if (i != n) {
					rc = locus_error_set(err, LOCUS_ERANGE,
							     "log2phy[%u][%u]: -1 before a slot", l, e);
					goto out;
				}
				for (uint32_t q = 0; q < i; q++)
					if (ph[q] == ph[i]) {
						rc = locus_error_set(err, LOCUS_ERANGE,
								     "log2phy[%u][%u] lists slot "
								     "%lld twice", l, e,
								     (long long)ph[i]);
						goto out;
					}
				n++;
			}
			for (uint32_t p = 0; p < P; p++)
				occ += t.phy2log.v[(size_t)l * P + p] == e;
			if (n == 0) {
				rc = locus_error_set(err, LOCUS_ERANGE,
						     "layer %u: expert %u has no physical slot "
						     "(lost)", l, e);
				goto out;
			}
			if (cnt != n || occ != n) {
				rc = locus_error_set(err, LOCUS_ERANGE,
						     "layer %u expert %u: logcnt %lld, log2phy lists "
						     "%lld, phy2log holds %lld", l, e, (long long)cnt,
						     (long long)n, (long long)occ);
				goto out;
			}
			if (n - 1 > LOCUS_GRACE_MAX_REPLICAS) {
				/* a table holds a primary and R <= 63 copies besides */
				rc = locus_error_set(err, LOCUS_ERANGE,
						     "layer %u expert %u has %lld copies: a GRACE "
						     "table holds at most %u (a primary and %u "
						     "replicas)", l, e, (long long)n,
						     LOCUS_GRACE_MAX_REPLICAS + 1,
						     LOCUS_GRACE_MAX_REPLICAS);
				goto out;
			}
			d.max_replicas = LOCUS_MAX(d.max_replicas, (uint32_t)n - 1);
			/* every copy is a slot: a second one on a GPU is a replica there */
			npri[ph[0] / S]++;
			for (int64_t i = 1; i < n; i++)
				nrep[ph[i] / S]++;
		}
		for (uint32_t r = 0; r < N; r++) {
			d.capacity = LOCUS_MAX(d.capacity, npri[r]);
			d.replica_budget = LOCUS_MAX(d.replica_budget, nrep[r]);
		}
	}
	if (d.replica_budget > E) {
		/* dims bound a GPU's replicas by E; only many slots per GPU get here */
		rc = locus_error_set(err, LOCUS_ERANGE, "a rank holds %u replicas, more than "
				     "the %u experts a GRACE table allows", d.replica_budget, E);
		goto out;
	}
	rc = locus_grace_dims_check(&d, err);
	if (rc)
		goto out;
	plen = locus_grace_payload_size(&d);
	b = calloc(1, HDR + plen);
	if (!b) {
		rc = locus_error_set(err, ENOMEM, "EPLB import: out of memory");
		goto out;
	}
	memcpy(b + HDR, &d, sizeof(d));
	locus_grace_view_init(&v, b + HDR, plen, NULL);
	for (uint32_t l = 0; l < L; l++) {
		for (uint32_t e = 0; e < E; e++) {
			const int64_t *ph = t.log2phy.v + ((size_t)l * E + e) * X;
			uint16_t *rep = v.replica + ((size_t)l * E + e) * d.max_replicas;
			uint32_t pr = (uint32_t)(ph[0] / S), c = 0;

			v.primary[(size_t)l * E + e] = (uint16_t)pr;
			for (uint32_t i = 0; i < d.max_replicas; i++)
				rep[i] = LOCUS_GRACE_NO_RANK;
			/*
			 * the ranks of the other copies, ascending, one entry per
			 * copy: two copies on one GPU stay two slots (and take two
			 * shares of the expert's tokens), as EPLB placed them
			 */
			for (uint32_t i = 1; i < X && ph[i] != -1; i++) {
				uint16_t r = (uint16_t)(ph[i] / S);
				uint32_t j = c++;

				for (; j > 0 && rep[j - 1] > r; j--)
					rep[j] = rep[j - 1];
				rep[j] = r;
			}
			v.expert_load[(size_t)l * E + e] = W ? (float)W[(size_t)l * E + e] : 1.0f;
		}
	}
	for (uint32_t l = 0; l < L; l++) {
		double wl[LOCUS_GRACE_MAX_EXPERTS];

		for (uint32_t e = 0; e < E; e++)
			wl[e] = v.expert_load[(size_t)l * E + e];
		locus_gracefit_predict(&d, wl, v.primary + (size_t)l * E,
				       v.replica + (size_t)l * E * d.max_replicas, pred);
		for (uint32_t r = 0; r < N; r++)
			v.pred_load[(size_t)l * N + r] = (float)pred[r];
	}
	rc = locus_grace_validate(&v, err);
	if (!rc)
		rc = locus_tbl_seal(b, HDR + plen, LOCUS_TBL_GRACE, LOCUS_GRACE_KIND_VERSION, plen);
	if (rc)
		goto out;
	*blob = b;
	*blob_len = HDR + plen;
	b = NULL;
out:
	free(b);
	free(pred);
	free(nrep);
	free(npri);
	eplb_free(&t);
	return rc;
}

/* ---- export ------------------------------------------------------------- */

struct sbuf {
	char *s;
	size_t n, cap;
	int oom;
};

static void put(struct sbuf *b, const char *fmt, long long v)
{
	char tmp[32];
	int k = snprintf(tmp, sizeof(tmp), fmt, v);

	if (b->oom)
		return;
	if (b->n + (size_t)k + 1 > b->cap) {
		size_t nc = (b->cap ? b->cap * 2 : 4096) + (size_t)k;
		char *ns = realloc(b->s, nc);

		if (!ns) {
			b->oom = 1;
			return;
		}
		b->s = ns;
		b->cap = nc;
	}
	memcpy(b->s + b->n, tmp, (size_t)k + 1);
	b->n += (size_t)k;
}

int locus_gracefit_eplb_export(const void *payload, size_t payload_len, char **json,
			       struct locus_error *err)
{
	struct locus_grace_view v;
	uint32_t L, E, N, R, S = 0, X = 0;
	uint16_t *slots = NULL;      /* [L][N][S] expert per physical slot */
	uint32_t *copies = NULL;     /* [L][E] */
	uint8_t *on = NULL;          /* [E] scratch: expert already on this rank */
	struct sbuf b = { 0 };
	int rc;

	if (!payload || !json)
		return locus_error_set(err, EINVAL, "EPLB export: bad arguments");
	rc = locus_grace_view_init(&v, (void *)(uintptr_t)payload, payload_len, err);
	if (!rc)
		rc = locus_grace_validate(&v, err);
	if (rc)
		return rc;
	L = v.dims->n_layers;
	E = v.dims->n_experts;
	N = locus_grace_n_ranks(v.dims);
	R = v.dims->max_replicas;
	/* slots per rank: the fullest rank of any layer */
	for (uint32_t l = 0; l < L; l++) {
		uint32_t cnt[LOCUS_GRACE_MAX_RANKS] = { 0 };

		for (uint32_t e = 0; e < E; e++) {
			cnt[v.primary[(size_t)l * E + e]]++;
			for (uint32_t i = 0; i < R; i++) {
				uint16_t r = v.replica[((size_t)l * E + e) * R + i];

				if (r != LOCUS_GRACE_NO_RANK)
					cnt[r]++;
			}
		}
		for (uint32_t r = 0; r < N; r++)
			S = LOCUS_MAX(S, cnt[r]);
	}
	slots = calloc((size_t)L * N * S, sizeof(*slots));
	copies = calloc((size_t)L * E, sizeof(*copies));
	on = calloc(E, 1);
	if (!slots || !copies || !on) {
		rc = locus_error_set(err, ENOMEM, "EPLB export: out of memory");
		goto out;
	}
	for (uint32_t l = 0; l < L; l++) {
		const float *w = v.expert_load + (size_t)l * E;
		uint32_t *cp = copies + (size_t)l * E;

		for (uint32_t e = 0; e < E; e++) {
			cp[e] = 1;
			for (uint32_t i = 0; i < R; i++)
				cp[e] += v.replica[((size_t)l * E + e) * R + i] != LOCUS_GRACE_NO_RANK;
		}
		for (uint32_t r = 0; r < N; r++) {
			uint16_t *sl = slots + ((size_t)l * N + r) * S;
			uint32_t n = 0;

			memset(on, 0, E);
			for (uint32_t e = 0; e < E; e++)
				if (v.primary[(size_t)l * E + e] == r) {
					sl[n++] = (uint16_t)e;
					on[e] = 1;
				}
			for (uint32_t e = 0; e < E; e++)
				for (uint32_t i = 0; i < R; i++)
					if (v.replica[((size_t)l * E + e) * R + i] == r) {
						sl[n++] = (uint16_t)e;
						on[e] = 1;
					}
			/* EPLB has no empty slot: pad with the hottest expert per copy */
			while (n < S) {
				uint32_t best = E;

				for (uint32_t e = 0; e < E; e++)
					if (!on[e] && (best == E || (double)w[e] / cp[e] >
								    (double)w[best] / cp[best]))
						best = e;
				sl[n++] = (uint16_t)best;
				on[best] = 1;
				cp[best]++;
			}
		}
		for (uint32_t e = 0; e < E; e++)
			X = LOCUS_MAX(X, cp[e]);
	}
	put(&b, "{\"phy2log\": [", 0);
	for (uint32_t l = 0; l < L; l++) {
		put(&b, l ? ", [" : "[", 0);
		for (uint32_t p = 0; p < N * S; p++)
			put(&b, p ? ", %lld" : "%lld", slots[(size_t)l * N * S + p]);
		put(&b, "]", 0);
	}
	put(&b, "],\n \"log2phy\": [", 0);
	for (uint32_t l = 0; l < L; l++) {
		put(&b, l ? ", [" : "[", 0);
		for (uint32_t e = 0; e < E; e++) {
			uint32_t n = 0, pr = v.primary[(size_t)l * E + e];

			put(&b, e ? ", [" : "[", 0);
			/* the primary's slot first: import reads it back as primary */
			for (uint32_t i = 0; i < S; i++)
				if (slots[((size_t)l * N + pr) * S + i] == e)
					put(&b, n++ ? ", %lld" : "%lld", (long long)pr * S + i);
			for (uint32_t p = 0; p < N * S; p++)
				if (p / S != pr && slots[(size_t)l * N * S + p] == e)
					put(&b, n++ ? ", %lld" : "%lld", p);
			for (; n < X; n++)
				put(&b, ", %lld", -1);
			put(&b, "]", 0);
		}
		put(&b, "]", 0);
	}
	put(&b, "],\n \"logcnt\": [", 0);
	for (uint32_t l = 0; l < L; l++) {
		put(&b, l ? ", [" : "[", 0);
		for (uint32_t e = 0; e < E; e++)
			put(&b, e ? ", %lld" : "%lld", copies[(size_t)l * E + e]);
		put(&b, "]", 0);
	}
	put(&b, "]}\n", 0);
	if (b.oom) {
		rc = locus_error_set(err, ENOMEM, "EPLB export: out of memory");
		free(b.s);
		goto out;
	}
	*json = b.s;
out:
	free(on);
	free(copies);
	free(slots);
	return rc;
}
