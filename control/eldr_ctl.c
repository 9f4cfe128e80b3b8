// SPDX-License-Identifier: MIT
/* locusctl fit / show / push for ELDR tables. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "locus_eldr.h"
#include "locus_eldrfit.h"
#include "locus_grace.h"
#include "locus_graceset.h"
#include "locus_push.h"
#include "locus_tblfile.h"
#include "locus_trace.h"
#include "locusctl.h"

static int parse_u64(const char *s, uint64_t max, uint64_t *v)
{
	char *end;
	unsigned long long x;

	if (!s || !*s || *s == '-' || *s == '+')
		return -1;
	errno = 0;
	x = strtoull(s, &end, 10);
	if (errno || *end || x > max)
		return -1;
	*v = x;
	return 0;
}

/* A finite float in [min, max], the whole string. */
static int parse_float(const char *s, float min, float max, float *v)
{
	char *end;
	float x;

	errno = 0;
	x = strtof(s, &end);
	if (errno || !*s || *end || !isfinite(x) || x < min || x > max)
		return -1;
	*v = x;
	return 0;
}

/* "0,1,5": comma-separated u32 ids, no empty or stray fields. */
static int parse_ids(const char *s, uint32_t **out, uint32_t *n)
{
	uint32_t cap = 16, cnt = 0, *ids = malloc(cap * sizeof(*ids));
	const char *p = s;

	if (!ids || !*s)
		goto err;
	for (;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		char field[24];
		uint64_t v;

		if (!len || len >= sizeof(field))
			goto err;
		memcpy(field, p, len);
		field[len] = '\0';
		if (parse_u64(field, UINT32_MAX, &v) < 0)
			goto err;
		if (cnt == cap) {
			uint32_t *n2 = realloc(ids, 2 * cap * sizeof(*ids));

			if (!n2)
				goto err;
			ids = n2;
			cap *= 2;
		}
		ids[cnt++] = (uint32_t)v;
		if (!comma)
			break;
		p = comma + 1;
	}
	*out = ids;
	*n = cnt;
	return 0;
err:
	free(ids);
	return -1;
}

/* Share of requests whose cluster's majority domain is their own. */
static double domain_purity(const struct locus_trace *t, const struct locus_eldrfit_result *r,
			    uint32_t K)
{
	uint32_t *cnt = calloc((size_t)K * t->n_domains, sizeof(*cnt)), agree = 0;

	if (!cnt)
		return NAN;
	for (uint32_t i = 0; i < r->n_used; i++)
		cnt[(size_t)r->assign[i] * t->n_domains + t->reqs[r->req_index[i]].domain]++;
	for (uint32_t k = 0; k < K; k++) {
		uint32_t best = 0;

		for (uint32_t d = 0; d < t->n_domains; d++)
			if (cnt[(size_t)k * t->n_domains + d] > best)
				best = cnt[(size_t)k * t->n_domains + d];
		agree += best;
	}
	free(cnt);
	return (double)agree / r->n_used;
}

static const char *score_kind_name(enum locus_eldrfit_score_kind k)
{
	return k == LOCUS_ELDRFIT_SCORE_DECODE ? "decode expert overlap" :
	       k == LOCUS_ELDRFIT_SCORE_SPLIT_HALF ? "split-half prompt proxy" : "none";
}

/* Cluster sizes against their bounds, and how the clustering ran. */
static void print_balance(const struct locus_eldrfit_opts *o, const struct locus_eldrfit_result *r)
{
	uint32_t *size = calloc(o->n_decoders, sizeof(*size)), mn = UINT32_MAX, mx = 0;

	if (!size)
		return;
	for (uint32_t i = 0; i < r->n_used; i++)
		size[r->assign[i]]++;
	for (uint32_t k = 0; k < o->n_decoders; k++) {
		mn = size[k] < mn ? size[k] : mn;
		mx = size[k] > mx ? size[k] : mx;
	}
	printf("clusters of %u..%u requests (bounds %u..%u: slack %.2f, balance price %.2f); "
	       "best of %u k-means++ seeds (seed %" PRIu64 "); %s\n", mn, mx, r->size_lo,
	       r->size_hi, (double)o->slack, (double)o->balance_price,
	       o->restarts ? o->restarts : 1, r->seed,
	       r->decode_clustered ? "clustered on prefill and decode expert use" :
	       "clustered on prefill signatures");
	free(size);
}

int locusctl_eldr_fit(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "trace", required_argument, NULL, 't' },
		{ "decoders", required_argument, NULL, 'k' },
		{ "decoder-ids", required_argument, NULL, 'd' },
		{ "tau", required_argument, NULL, 'T' },
		{ "seed", required_argument, NULL, 's' },
		{ "no-mask", no_argument, NULL, 'n' },
		{ "max-iter", required_argument, NULL, 'm' },
		{ "n-experts", required_argument, NULL, 'E' },
		{ "mask-sample", required_argument, NULL, 'S' },
		{ "slack", required_argument, NULL, 'L' },
		{ "balance-price", required_argument, NULL, 'P' },
		{ "restarts", required_argument, NULL, 'R' },
		{ "decode-weight", required_argument, NULL, 'W' },
		{ "exact-balance", no_argument, NULL, 'X' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "eldr", no_argument, NULL, 'e' },
		{ "output", required_argument, NULL, 'o' },
		{ NULL, 0, NULL, 0 },
	};
	struct locus_eldrfit_opts o;
	struct locus_trace_opts to = { 0 };
	struct locus_eldrfit_result res;
	struct locus_trace *t = NULL;
	struct locus_error err = { 0 };
	const char *trace = NULL, *out = NULL;
	uint32_t *ids = NULL, n_ids = 0;
	int c, ret, quiet = 0;
	uint64_t v;

	locus_eldrfit_opts_default(&o, 0);
	optind = 1;
	while ((c = getopt_long(argc, argv, "o:q", lo, NULL)) != -1) {
		switch (c) {
		case 't':
			trace = optarg;
			break;
		case 'k':
			if (parse_u64(optarg, LOCUS_ELDR_MAX_DECODERS, &v) < 0 || !v)
				goto bad_value;
			o.n_decoders = (uint32_t)v;
			break;
		case 'd':
			free(ids);
			ids = NULL;
			if (parse_ids(optarg, &ids, &n_ids) < 0)
				goto bad_value;
			break;
		case 'T':
			if (parse_float(optarg, 0, 2, &o.tau) < 0)
				goto bad_value;
			break;
		case 's':
			if (parse_u64(optarg, UINT64_MAX, &o.seed) < 0)
				goto bad_value;
			break;
		case 'n':
			o.no_mask = 1;
			break;
		case 'm':
			if (parse_u64(optarg, 100000, &v) < 0 || !v)
				goto bad_value;
			o.max_iter = (uint32_t)v;
			break;
		case 'E':
			if (parse_u64(optarg, LOCUS_ELDR_MAX_EXPERTS, &v) < 0 || !v)
				goto bad_value;
			to.n_experts = (uint32_t)v;
			break;
		case 'S':
			if (parse_u64(optarg, 100000, &v) < 0 || v < 2)
				goto bad_value;
			o.mask_sample = (uint32_t)v;
			break;
		case 'L':
			if (parse_float(optarg, 0, 1, &o.slack) < 0)
				goto bad_value;
			break;
		case 'P':
			if (parse_float(optarg, 0, 100, &o.balance_price) < 0)
				goto bad_value;
			break;
		case 'R':
			if (parse_u64(optarg, 1000, &v) < 0 || !v)
				goto bad_value;
			o.restarts = (uint32_t)v;
			break;
		case 'W':
			if (parse_float(optarg, 0, 100, &o.decode_weight) < 0)
				goto bad_value;
			break;
		case 'X': /* the original fit: exact balance, one seed, prefill only */
			o.slack = 0;
			o.balance_price = 0;
			o.restarts = 1;
			o.decode_weight = 0;
			break;
		case 'q':
			quiet = 1;
			break;
		case 'e': /* the default kind of fit, named explicitly */
			break;
		case 'o':
			out = optarg;
			break;
		default:
			goto usage;
		}
	}
	if (optind != argc || !trace || !out || !o.n_decoders)
		goto usage;
	if (ids && n_ids != o.n_decoders) {
		fprintf(stderr, "locusctl: --decoder-ids has %u ids, --decoders is %u\n", n_ids,
			o.n_decoders);
		free(ids);
		return 2;
	}
	o.decoder_ids = ids;
	if (!quiet)
		o.progress = locusctl_progress;
	ret = locus_trace_load(trace, &to, &t, &err);
	if (ret < 0)
		goto fail;
	ret = locus_eldrfit_trace(t, &o, &res, &err);
	if (ret < 0)
		goto fail;
	ret = locus_tbl_write_file(out, res.blob, res.blob_len, &err);
	if (ret < 0) {
		locus_eldrfit_result_free(&res);
		goto fail;
	}
	printf("fitted %u requests (L=%u E=%u k=%u) into K=%u decoders: %u/%u layers masked, "
	       "%u k-means iterations%s\n", res.n_used, t->n_layers, t->n_experts, t->k,
	       o.n_decoders, res.n_masked, t->n_layers, res.iterations,
	       res.converged ? " (converged)" : " (cap reached)");
	if (res.score_kind != LOCUS_ELDRFIT_SCORE_NONE)
		printf("mask score (%s): %.4f with the mask, %.4f with every layer\n",
		       score_kind_name(res.score_kind), res.mask_score, res.full_score);
	printf("mean similarity to own centroid: %.4f\n", res.objective / res.n_used);
	print_balance(&o, &res);
	if (t->n_domains > 2 || (t->n_domains == 2 && t->domains[1][0]))
		printf("domain purity (majority domain share per cluster): %.3f\n",
		       domain_purity(t, &res, o.n_decoders));
	printf("wrote %s (%zu bytes)\n", out, res.blob_len);
	locus_eldrfit_result_free(&res);
	locus_trace_free(t);
	free(ids);
	return 0;

fail:
	locus_trace_free(t);
	free(ids);
	return locusctl_fail(&err, ret);
bad_value:
	fprintf(stderr, "locusctl fit: bad value '%s' for --%s\n", optarg,
		c == 'k' ? "decoders" : c == 'd' ? "decoder-ids" : c == 'T' ? "tau" :
		c == 's' ? "seed" : c == 'm' ? "max-iter" : c == 'E' ? "n-experts" :
		c == 'L' ? "slack" : c == 'P' ? "balance-price" : c == 'R' ? "restarts" :
		c == 'W' ? "decode-weight" : "mask-sample");
	free(ids);
	return 2;
usage:
	fprintf(stderr, "usage: locusctl fit --trace FILE --decoders K [--decoder-ids 0,1,..] "
		"[--tau 0.1] [--seed N] [--no-mask] [--max-iter N] [--n-experts E] "
		"[--mask-sample N] [--slack 0.5] [--balance-price 2] [--restarts 8] "
		"[--decode-weight 1] [--exact-balance] [--quiet] -o TABLE\n");
	free(ids);
	return 2;
}

static void fmt_time(uint64_t ns, char *buf, size_t len)
{
	time_t s = (time_t)(ns / 1000000000ull);
	struct tm tm;

	if (gmtime_r(&s, &tm))
		strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
	else
		snprintf(buf, len, "?");
}

static void show_human(const char *path, const struct locus_tbl_hdr *th,
		       const struct locus_eldr_tbl_view *v)
{
	const struct locus_eldr_tbl_hdr *h = v->hdr;
	float lo = INFINITY, hi = -INFINITY;
	char when[40];

	fmt_time(th->created_ns, when, sizeof(when));
	for (size_t i = 0; i < (size_t)h->n_layers * h->n_experts; i++) {
		lo = fminf(lo, v->idf[i]);
		hi = fmaxf(hi, v->idf[i]);
	}
	printf("%s: ELDR table v%u, %" PRIu64 " payload bytes, crc32c 0x%08x, created %s\n",
	       path, th->kind_version, th->payload_len, th->payload_crc32c, when);
	printf("  layers L=%u  experts E=%u  decoders K=%u  tau=%g\n", h->n_layers,
	       h->n_experts, h->n_decoders, (double)h->tau);
	printf("  masked layers (%u):", h->n_masked);
	for (uint32_t l = 0; l < h->n_layers; l++)
		if (v->layer_mask[l])
			printf(" %u", l);
	printf("\n  decoder ids:");
	for (uint32_t d = 0; d < h->n_decoders; d++)
		printf(" %u", v->decoder_ids[d]);
	printf("\n  fit: %u calibration requests, seed %" PRIu64 ", %u iterations, "
	       "mask score %.4f (every layer %.4f)\n", h->n_calib, h->seed, h->iterations,
	       (double)h->mask_score, (double)h->full_score);
	printf("  idf range [%.4f, %.4f]\n", (double)lo, (double)hi);
}

static void show_json(const char *path, const struct locus_tbl_hdr *th,
		      const struct locus_eldr_tbl_view *v)
{
	const struct locus_eldr_tbl_hdr *h = v->hdr;
	int first = 1;

	printf("{\"path\":\"");
	for (const char *p = path; *p; p++)
		printf((*p == '"' || *p == '\\') ? "\\%c" : ((unsigned char)*p < 0x20 ? "?" : "%c"),
		       *p);
	printf("\",\"kind\":\"eldr\",\"kind_version\":%u,\"payload_len\":%" PRIu64
	       ",\"payload_crc32c\":%u,\"created_ns\":%" PRIu64 ",", th->kind_version,
	       th->payload_len, th->payload_crc32c, th->created_ns);
	printf("\"n_layers\":%u,\"n_experts\":%u,\"n_decoders\":%u,\"tau\":%.9g,",
	       h->n_layers, h->n_experts, h->n_decoders, (double)h->tau);
	printf("\"masked_layers\":[");
	for (uint32_t l = 0; l < h->n_layers; l++) {
		if (!v->layer_mask[l])
			continue;
		printf(first ? "%u" : ",%u", l);
		first = 0;
	}
	printf("],\"decoder_ids\":[");
	for (uint32_t d = 0; d < h->n_decoders; d++)
		printf(d ? ",%u" : "%u", v->decoder_ids[d]);
	printf("],\"n_calib\":%u,\"seed\":%" PRIu64 ",\"iterations\":%u,"
	       "\"mask_score\":%.9g,\"full_score\":%.9g}\n", h->n_calib, h->seed, h->iterations,
	       (double)h->mask_score, (double)h->full_score);
}

int locusctl_eldr_show(int argc, char **argv)
{
	struct locus_eldr_tbl_view v;
	struct locus_error err = { 0 };
	const char *path = NULL;
	void *buf = NULL;
	size_t len;
	int json = 0, ret;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = 1;
		else if (!path && argv[i][0] != '-')
			path = argv[i];
		else
			goto usage;
	}
	if (!path)
		goto usage;
	ret = locus_tbl_read_file(path, LOCUS_TBL_ELDR, &buf, &len, &err);
	if (ret < 0)
		return locusctl_fail(&err, ret);
	ret = locus_eldr_blob_check(buf, len, &v, &err);
	if (ret < 0) {
		char msg[LOCUS_ERRMSG_MAX];

		memcpy(msg, err.msg, sizeof(msg));
		locus_error_set(&err, ret, "%s: %.200s", path, msg);
		free(buf);
		return locusctl_fail(&err, ret);
	}
	if (json)
		show_json(path, buf, &v);
	else
		show_human(path, buf, &v);
	free(buf);
	return 0;
usage:
	fprintf(stderr, "usage: locusctl show TABLE [--json]\n");
	return 2;
}

/* Tables push knows: kind -> segment table channel (see check_kind). */
static const struct {
	unsigned kind;
	unsigned channel;
} push_kinds[] = {
	{ LOCUS_TBL_ELDR, LOCUS_ELDR_TABLE_CHANNEL },
	{ LOCUS_TBL_GRACE, LOCUS_GRACE_TABLE_CHANNEL },
	{ LOCUS_TBL_GRACE_SET, LOCUS_GRACE_TABLE_CHANNEL }, /* replaces every group at once */
};

static int check_kind(unsigned kind, const void *blob, size_t len, struct locus_error *err)
{
	if (kind == LOCUS_TBL_ELDR)
		return locus_eldr_blob_check(blob, len, NULL, err);
	if (kind == LOCUS_TBL_GRACE_SET)
		return locus_graceset_blob_check(blob, len, NULL, NULL, NULL, NULL, err);
	return locus_grace_blob_check(blob, len, NULL, NULL, err);
}

/* Keep buf in the push history as generation gen of kind; a failure is a warning. */
static int keep_history(const char *inst, unsigned kind, uint64_t gen, const void *buf,
			size_t len)
{
	struct locus_error herr = { 0 };
	int ret = locusctl_history_save(inst, kind, gen, buf, len, &herr);

	if (ret < 0)
		fprintf(stderr, "locusctl: warning: history not kept: %s\n", herr.msg);
	return ret;
}

int locusctl_push(int argc, char **argv)
{
	struct locus_error err = { 0 };
	struct locus_push_result res;
	const char *inst = NULL, *path = NULL;
	uint64_t timeout_ms = 2000;
	void *buf = NULL;
	size_t len, k;
	uint64_t pub[LOCUS_TABLE_MAX_CHANNELS], next = 0;
	unsigned kind, ch = 0, n_ch = 0;
	int ret, status = 1, kept = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-i") && i + 1 < argc)
			inst = argv[++i];
		else if (!strcmp(argv[i], "--timeout-ms") && i + 1 < argc) {
			if (parse_u64(argv[++i], 3600000, &timeout_ms) < 0)
				goto usage;
		} else if (!path && argv[i][0] != '-')
			path = argv[i];
		else
			goto usage;
	}
	if (!inst || !path)
		goto usage;
	ret = locus_tbl_read_file(path, 0, &buf, &len, &err);
	if (ret < 0)
		goto fail;
	kind = ((const struct locus_tbl_hdr *)buf)->kind;
	for (k = 0; k < LOCUS_ARRAY_SIZE(push_kinds); k++)
		if (push_kinds[k].kind == kind)
			break;
	if (k == LOCUS_ARRAY_SIZE(push_kinds)) {
		ret = locus_error_set(&err, LOCUS_ERANGE, "%s: no table channel for kind %s", path,
				      locus_tbl_kind_name(kind));
		goto fail;
	}
	ch = push_kinds[k].channel;
	ret = check_kind(kind, buf, len, &err);
	if (ret < 0) {
		char msg[LOCUS_ERRMSG_MAX];

		memcpy(msg, err.msg, sizeof(msg));
		locus_error_set(&err, ret, "%s: %.200s", path, msg);
		goto fail;
	}
	/*
	 * Kept under the generation it is about to get before locusd publishes
	 * it: a push killed after the publish still leaves what runs on record
	 * (one killed before leaves an entry the next push of that generation
	 * replaces).
	 */
	ret = locus_push_status(inst, pub, &n_ch, &err);
	if (ret < 0)
		goto fail;
	if (ch < n_ch) {
		next = pub[ch] + 1;
		kept = keep_history(inst, kind, next, buf, len) == 0;
	}
	/* locusd copies it into a slot, publishes it and tells what its readers did */
	ret = locus_push_table(inst, ch, buf, len, (uint32_t)timeout_ms, &res, &err);
	if (ret < 0) {
		if (kept)
			locusctl_history_drop(inst, kind, next);
		goto fail;
	}
	printf("pushed %s table %s to %s channel %u: generation %" PRIu64 "\n",
	       locus_tbl_kind_name(kind), path, inst, ch, res.generation);
	printf("readers: %u live, %u adopted, %u refused%s\n", res.wait.n_live,
	       res.wait.n_adopted, res.wait.n_refused,
	       res.timed_out ? " (timed out waiting for the rest)" : "");
	if (res.wait.n_refused)
		fprintf(stderr, "locusctl: reader %d refused generation %" PRIu64 ": %s (%s)\n",
			res.wait.refused_reader, res.wait.refused_gen, res.wait.refused_msg,
			locus_strerror(res.wait.refused_code));
	status = (res.wait.n_refused || res.timed_out) ? 1 : 0;
	/* the history keeps what the data plane may run, for diff and rollback */
	if (res.generation != next) /* another push came between: keep it where it landed */
		kept = keep_history(inst, kind, res.generation, buf, len) == 0;
	if (res.wait.n_refused && kept)
		locusctl_history_drop(inst, kind, res.generation);
	goto out;
fail:
	locusctl_fail(&err, ret);
out:
	free(buf);
	return status;
usage:
	fprintf(stderr, "usage: locusctl push -i INSTANCE TABLE [--timeout-ms N]\n");
	return 2;
}
