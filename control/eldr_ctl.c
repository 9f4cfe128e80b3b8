// SPDX-License-Identifier: MIT
/* locusctl show / push for ELDR tables (fit: eldr_ctl_fit.c), the shared number parsers. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "locus_eldr.h"
#include "locus_eldr_priv.h"
#include "locus_eldrfit.h"
#include "locus_err_priv.h"
#include "locus_grace.h"
#include "locus_grace_priv.h"
#include "locus_graceset.h"
#include "locus_push.h"
#include "locus_tblfile.h"
#include "locus_trace.h"
#include "locusctl.h"

int locusctl_parse_u64(const char *s, uint64_t max, uint64_t *v)
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

int locusctl_parse_float(const char *s, float min, float max, float *v)
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
	printf("\n  centroids: %u", v->n_centroids);
	if (v->centroid_slot) {
		printf(" (decoder id of each:");
		for (uint32_t c = 0; c < v->n_centroids; c++)
			printf(" %u", v->decoder_ids[v->centroid_slot[c]]);
		printf(")");
	} else {
		printf(" (one per decoder)");
	}
	printf("\n  overflow: %s\n", h->flags & LOCUS_ELDR_TBL_F_OVERFLOW_SPREAD ?
	       "spread (a request whose band is down goes to the least loaded decoder up)" :
	       "nearest (the band of the best decoder up)");
	if (h->spill_tau != 0.0f)
		printf("  load spill: within %g of the best, beyond a margin of %u requests\n",
		       (double)h->spill_tau, h->spill_margin);
	else
		printf("  load spill: off\n");
	printf("  fit: %u calibration requests, seed %" PRIu64 ", %u iterations, "
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
	printf("],\"n_centroids\":%u,\"centroid_decoder_ids\":[", v->n_centroids);
	for (uint32_t c = 0; c < v->n_centroids; c++)
		printf(c ? ",%u" : "%u",
		       v->decoder_ids[v->centroid_slot ? v->centroid_slot[c] : c]);
	printf("],\"overflow\":\"%s\",\"spill_tau\":%.9g,\"spill_margin\":%u",
	       h->flags & LOCUS_ELDR_TBL_F_OVERFLOW_SPREAD ? "spread" : "nearest",
	       (double)h->spill_tau, h->spill_margin);
	printf(",\"n_calib\":%u,\"seed\":%" PRIu64 ",\"iterations\":%u,"
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

int locusctl_table_for_push(const char *path, void **buf, size_t *len, unsigned *kind,
			    unsigned *channel, struct locus_error *err)
{
	size_t k;
	int ret;

	*buf = NULL;
	ret = locus_tbl_read_file(path, 0, buf, len, err);
	if (ret < 0)
		return ret;
	*kind = ((const struct locus_tbl_hdr *)*buf)->kind;
	for (k = 0; k < LOCUS_ARRAY_SIZE(push_kinds); k++)
		if (push_kinds[k].kind == *kind)
			break;
	if (k == LOCUS_ARRAY_SIZE(push_kinds)) {
		ret = locus_error_set(err, LOCUS_ERANGE, "%s: no table channel for kind %s", path,
				      locus_tbl_kind_name(*kind));
		goto err_free;
	}
	*channel = push_kinds[k].channel;
	ret = check_kind(*kind, *buf, *len, err);
	if (ret < 0) {
		char msg[LOCUS_ERRMSG_MAX];

		memcpy(msg, err->msg, sizeof(msg));
		locus_error_set(err, ret, "%s: %.200s", path, msg);
		goto err_free;
	}
	return 0;

err_free:
	free(*buf);
	*buf = NULL;
	return ret;
}

int locusctl_push(int argc, char **argv)
{
	struct locus_error err = { 0 };
	struct locus_push_result res;
	const char *inst = NULL, *path = NULL;
	uint64_t timeout_ms = 2000;
	void *buf = NULL;
	size_t len;
	uint64_t pub[LOCUS_TABLE_MAX_CHANNELS], next = 0;
	unsigned kind, ch = 0, n_ch = 0;
	int ret, status = 1, kept = 0;

	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--cluster"))
			return locusctl_push_cluster(argc, argv);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-i") && i + 1 < argc)
			inst = argv[++i];
		else if (!strcmp(argv[i], "--timeout-ms") && i + 1 < argc) {
			if (locusctl_parse_u64(argv[++i], 3600000, &timeout_ms) < 0)
				goto usage;
		} else if (!path && argv[i][0] != '-')
			path = argv[i];
		else
			goto usage;
	}
	if (!inst || !path)
		goto usage;
	ret = locusctl_table_for_push(path, &buf, &len, &kind, &ch, &err);
	if (ret < 0)
		goto fail;
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
