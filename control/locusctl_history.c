// SPDX-License-Identifier: MIT
/*
 * locusctl diff, rollback and the push history behind them.
 *
 * Every table a running instance adopted through `locusctl push` is kept as
 * <state dir>/<instance>/<kind>-<generation>.tbl (state dir: $LOCUS_STATE_DIR,
 * default /var/lib/locus). `rollback` pushes the newest kept table older than
 * the generation in use (or the one named with --to) as a new generation;
 * `diff` compares two tables, or a table with what an instance runs.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "locus_eldr.h"
#include "locus_err_priv.h"
#include "locus_grace.h"
#include "locus_graceset.h"
#include "locus_push.h"
#include "locus_shm.h"
#include "locus_tblfile.h"
#include "locus_tblfile_priv.h"
#include "locusctl.h"

#define STATE_DIR_ENV "LOCUS_STATE_DIR"
#define STATE_DIR_DEFAULT "/var/lib/locus"

static const char *state_dir(void)
{
	const char *d = getenv(STATE_DIR_ENV);

	return d && *d ? d : STATE_DIR_DEFAULT;
}

static int kind_of_name(const char *s)
{
	if (!strcmp(s, "eldr"))
		return LOCUS_TBL_ELDR;
	if (!strcmp(s, "grace"))
		return LOCUS_TBL_GRACE;
	if (!strcmp(s, "graceset"))
		return LOCUS_TBL_GRACE_SET;
	return -1;
}

static unsigned channel_of(unsigned kind)
{
	return kind == LOCUS_TBL_GRACE || kind == LOCUS_TBL_GRACE_SET ? 1u : 0u;
}

/* The kinds a table channel carries: the GRACE channel takes tables and sets. */
static const unsigned channel_kinds[2][2] = {
	{ LOCUS_TBL_ELDR, LOCUS_TBL_ELDR },
	{ LOCUS_TBL_GRACE, LOCUS_TBL_GRACE_SET },
};

int locusctl_history_save(const char *instance, unsigned kind, uint64_t gen, const void *buf,
			  size_t len, struct locus_error *err)
{
	char path[4096];
	int n;

	if (locus_shm_check_name(instance))
		return locus_error_set(err, EINVAL, "bad instance name '%s'", instance);
	n = snprintf(path, sizeof(path), "%s/%s", state_dir(), instance);
	if (n < 0 || (size_t)n >= sizeof(path))
		return locus_error_set(err, ENAMETOOLONG, "state directory path too long");
	if (mkdir(state_dir(), 0750) < 0 && errno != EEXIST)
		return locus_error_set(err, errno, "%s: %s", state_dir(), strerror(errno));
	if (mkdir(path, 0750) < 0 && errno != EEXIST)
		return locus_error_set(err, errno, "%s: %s", path, strerror(errno));
	snprintf(path + n, sizeof(path) - (size_t)n, "/%s-%" PRIu64 ".tbl",
		 locus_tbl_kind_name(kind), gen);
	return locus_tbl_write_file(path, buf, len, err);
}

void locusctl_history_drop(const char *instance, unsigned kind, uint64_t gen)
{
	char path[4096];

	if (locus_shm_check_name(instance) == 0 &&
	    (size_t)snprintf(path, sizeof(path), "%s/%s/%s-%" PRIu64 ".tbl", state_dir(), instance,
			     locus_tbl_kind_name(kind), gen) < sizeof(path))
		unlink(path);
}

/*
 * The kept generation of kind for instance: exactly `want` when non-zero,
 * else the newest below `below`. Returns the generation (0: none) and fills
 * path.
 */
static uint64_t history_find(const char *instance, unsigned kind, uint64_t want, uint64_t below,
			     char *path, size_t len)
{
	char dir[3900], prefix[16];
	struct dirent *de;
	uint64_t best = 0;
	DIR *d;

	if ((size_t)snprintf(dir, sizeof(dir), "%s/%s", state_dir(), instance) >= sizeof(dir))
		return 0;
	snprintf(prefix, sizeof(prefix), "%s-", locus_tbl_kind_name(kind));
	d = opendir(dir);
	if (!d)
		return 0;
	while ((de = readdir(d))) {
		char *end;
		uint64_t g;

		if (strncmp(de->d_name, prefix, strlen(prefix)))
			continue;
		g = strtoull(de->d_name + strlen(prefix), &end, 10);
		if (strcmp(end, ".tbl") || g == 0)
			continue;
		if (want ? g == want : (g < below && g > best))
			best = g;
	}
	closedir(d);
	if (best && (size_t)snprintf(path, len, "%.3800s/%s%" PRIu64 ".tbl", dir, prefix, best) >= len)
		best = 0;
	return best;
}

/*
 * history_find over every kind kind's channel carries (a GRACE table and a
 * placement set follow each other on one channel): the newest match.
 */
static uint64_t history_find_channel(const char *instance, unsigned kind, uint64_t want,
				     uint64_t below, char *path, size_t len)
{
	const unsigned *kinds = channel_kinds[channel_of(kind)];
	uint64_t best = 0;

	for (int i = 0; i < 2; i++) {
		char p[4096];
		uint64_t g;

		if (i && kinds[1] == kinds[0])
			break;
		g = history_find(instance, kinds[i], want, below, p, sizeof(p));
		if (g > best && (size_t)snprintf(path, len, "%s", p) < len)
			best = g;
	}
	return best;
}

/* Generation the instance publishes on kind's channel (0: none), asked of locusd. */
static int published_gen(const char *instance, unsigned kind, uint64_t *gen,
			 struct locus_error *err)
{
	uint64_t pub[LOCUS_TABLE_MAX_CHANNELS];
	unsigned n = 0;
	int ret = locus_push_status(instance, pub, &n, err);

	if (ret < 0)
		return ret;
	if (channel_of(kind) >= n)
		return locus_error_set(err, LOCUS_ESTATE, "instance %s has no table channel %u",
				       instance, channel_of(kind));
	*gen = pub[channel_of(kind)];
	return 0;
}

int locusctl_rollback(int argc, char **argv)
{
	const char *inst = NULL, *kname = "eldr";
	char path[4096], *pargv[5];
	struct locus_error err = { 0 };
	uint64_t cur = 0, to = 0, found;
	int kind, ret;

	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--cluster"))
			return locusctl_rollback_cluster(argc, argv);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-i") && i + 1 < argc)
			inst = argv[++i];
		else if (!strcmp(argv[i], "--kind") && i + 1 < argc)
			kname = argv[++i];
		else if (!strcmp(argv[i], "--to") && i + 1 < argc)
			to = strtoull(argv[++i], NULL, 10);
		else
			goto usage;
	}
	kind = kind_of_name(kname);
	if (!inst || kind < 0)
		goto usage;
	ret = published_gen(inst, (unsigned)kind, &cur, &err);
	if (ret < 0)
		return locusctl_fail(&err, ret);
	found = history_find_channel(inst, (unsigned)kind, to, cur, path, sizeof(path));
	if (!found) {
		fprintf(stderr, "locusctl: no kept %s table of %s %s %" PRIu64 " in %s/%s\n", kname,
			inst, to ? "with generation" : "older than generation", to ? to : cur,
			state_dir(), inst);
		return 1;
	}
	printf("rolling %s of %s back from generation %" PRIu64 " to the table of generation %"
	       PRIu64 "\n", kname, inst, cur, found);
	pargv[0] = (char *)"push";
	pargv[1] = (char *)"-i";
	pargv[2] = (char *)inst;
	pargv[3] = path;
	pargv[4] = NULL;
	return locusctl_push(4, pargv);
usage:
	fprintf(stderr, "usage: locusctl rollback -i INSTANCE [--kind eldr|grace|graceset] "
		"[--to GEN]\n");
	return 2;
}

/* ---- diff ------------------------------------------------------------------------ */

static double cosine(const float *a, const float *b, size_t n)
{
	double ab = 0, aa = 0, bb = 0;

	for (size_t i = 0; i < n; i++) {
		ab += (double)a[i] * b[i];
		aa += (double)a[i] * a[i];
		bb += (double)b[i] * b[i];
	}
	return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : (aa == bb ? 1.0 : 0.0);
}

/* Centroid i of slot k (in table order), or NULL past its last. */
static const float *slot_centroid(const struct locus_eldr_tbl_view *v, uint32_t k, uint32_t i,
				  size_t le)
{
	for (uint32_t c = 0; c < v->n_centroids; c++)
		if ((v->centroid_slot ? v->centroid_slot[c] : c) == k && !i--)
			return v->centroids + c * le;
	return NULL;
}

/* Decoder id's centroids in a (slot ka) and b (slot kb): 1 when they differ (printed). */
static int diff_centroids(const struct locus_eldr_tbl_view *va, uint32_t ka,
			  const struct locus_eldr_tbl_view *vb, uint32_t kb, size_t le, uint32_t id)
{
	uint32_t na = 0, nb = 0;
	double worst = 1.0;
	int same = 1;

	while (slot_centroid(va, ka, na, le))
		na++;
	while (slot_centroid(vb, kb, nb, le))
		nb++;
	if (na != nb) {
		printf("decoder %u: %u -> %u centroids\n", id, na, nb);
		return 1;
	}
	for (uint32_t i = 0; i < na; i++) {
		const float *ca = slot_centroid(va, ka, i, le), *cb = slot_centroid(vb, kb, i, le);

		worst = fmin(worst, cosine(ca, cb, le));
		same &= !memcmp(ca, cb, le * sizeof(float));
	}
	if (worst < 1.0 - 1e-6 || !same) {
		printf(na == 1 ? "decoder %u: centroid cosine %.4f\n" :
		       "decoder %u: centroid cosine %.4f (the lowest of its %u)\n", id, worst, na);
		return 1;
	}
	return 0;
}

static int diff_eldr(const void *a, size_t alen, const void *b, size_t blen)
{
	struct locus_eldr_tbl_view va, vb;
	const struct locus_eldr_tbl_hdr *ha, *hb;
	struct locus_error err;
	int differ = 0;
	size_t le;

	if (locus_eldr_blob_check(a, alen, &va, &err) < 0 || locus_eldr_blob_check(b, blen, &vb, &err) < 0)
		return locusctl_fail(&err, err.code) + 1;
	ha = va.hdr;
	hb = vb.hdr;
	if (ha->n_layers != hb->n_layers || ha->n_experts != hb->n_experts) {
		printf("shape: %ux%u -> %ux%u (tables not comparable further)\n", ha->n_layers,
		       ha->n_experts, hb->n_layers, hb->n_experts);
		return 1;
	}
	le = (size_t)ha->n_layers * ha->n_experts;
	if (ha->tau != hb->tau) {
		printf("tau: %g -> %g\n", (double)ha->tau, (double)hb->tau);
		differ = 1;
	}
	for (uint32_t l = 0; l < ha->n_layers; l++)
		if (va.layer_mask[l] != vb.layer_mask[l]) {
			printf("layer %u: %s the mask\n", l, vb.layer_mask[l] ? "added to" : "removed from");
			differ = 1;
		}
	{
		double worst = 0;

		for (size_t i = 0; i < le; i++)
			worst = fmax(worst, fabs((double)va.idf[i] - vb.idf[i]));
		if (worst > 0) {
			printf("idf: max |change| %.4g\n", worst);
			differ = 1;
		}
	}
	if (ha->spill_tau != hb->spill_tau || ha->spill_margin != hb->spill_margin) {
		printf("load spill: %g/%u -> %g/%u (0: off)\n", (double)ha->spill_tau,
		       ha->spill_margin, (double)hb->spill_tau, hb->spill_margin);
		differ = 1;
	}
	if (ha->flags != hb->flags) {
		printf("overflow: %s -> %s\n",
		       ha->flags & LOCUS_ELDR_TBL_F_OVERFLOW_SPREAD ? "spread" : "nearest",
		       hb->flags & LOCUS_ELDR_TBL_F_OVERFLOW_SPREAD ? "spread" : "nearest");
		differ = 1;
	}
	for (uint32_t k = 0; k < ha->n_decoders; k++) {
		uint32_t id = va.decoder_ids[k], j;

		for (j = 0; j < hb->n_decoders && vb.decoder_ids[j] != id; j++)
			;
		if (j == hb->n_decoders) {
			printf("decoder %u: removed\n", id);
			differ = 1;
			continue;
		}
		differ |= diff_centroids(&va, k, &vb, j, le, id);
	}
	for (uint32_t j = 0; j < hb->n_decoders; j++) {
		uint32_t k;

		for (k = 0; k < ha->n_decoders && va.decoder_ids[k] != vb.decoder_ids[j]; k++)
			;
		if (k == ha->n_decoders) {
			printf("decoder %u: added\n", vb.decoder_ids[j]);
			differ = 1;
		}
	}
	return differ;
}

int locusctl_grace_diff(const void *a, size_t alen, const void *b, size_t blen,
			const char *prefix)
{
	struct locus_grace_view va, vb;
	struct locus_error err;
	const void *pa, *pb;
	size_t la, lb;
	int differ = 0;

	if (locus_grace_blob_check(a, alen, &pa, &la, &err) < 0 ||
	    locus_grace_blob_check(b, blen, &pb, &lb, &err) < 0 ||
	    locus_grace_view_init(&va, (void *)pa, la, &err) < 0 ||
	    locus_grace_view_init(&vb, (void *)pb, lb, &err) < 0)
		return locusctl_fail(&err, err.code) + 1;
	if (memcmp(va.dims, vb.dims, sizeof(*va.dims))) {
		printf("%sdims: %u layers x %u experts on %ux%u, R %u -> %u x %u on %ux%u, R %u\n",
		       prefix, va.dims->n_layers, va.dims->n_experts, va.dims->n_nodes,
		       va.dims->gpus_per_node, va.dims->max_replicas, vb.dims->n_layers,
		       vb.dims->n_experts, vb.dims->n_nodes, vb.dims->gpus_per_node,
		       vb.dims->max_replicas);
		if (va.dims->n_layers != vb.dims->n_layers || va.dims->n_experts != vb.dims->n_experts ||
		    va.dims->max_replicas != vb.dims->max_replicas ||
		    locus_grace_n_ranks(va.dims) != locus_grace_n_ranks(vb.dims))
			return 1;
		differ = 1;
	}
	for (uint32_t l = 0; l < va.dims->n_layers; l++) {
		uint32_t E = va.dims->n_experts, R = va.dims->max_replicas, N = locus_grace_n_ranks(va.dims);
		uint32_t moved = 0, rep = 0;
		double wmax_a = 0, wmax_b = 0, wsum_a = 0, wsum_b = 0;

		for (uint32_t e = 0; e < E; e++) {
			moved += va.primary[l * E + e] != vb.primary[l * E + e];
			rep += memcmp(va.replica + ((size_t)l * E + e) * R,
				      vb.replica + ((size_t)l * E + e) * R, R * sizeof(uint16_t)) != 0;
		}
		for (uint32_t r = 0; r < N; r++) {
			wmax_a = fmax(wmax_a, va.pred_load[l * N + r]);
			wmax_b = fmax(wmax_b, vb.pred_load[l * N + r]);
			wsum_a += va.pred_load[l * N + r];
			wsum_b += vb.pred_load[l * N + r];
		}
		if (moved || rep) {
			printf("%slayer %u: %u experts moved, %u replica sets changed, predicted "
			       "max/mean %.3f -> %.3f\n", prefix, l, moved, rep,
			       wsum_a > 0 ? wmax_a * N / wsum_a : 0.0,
			       wsum_b > 0 ? wmax_b * N / wsum_b : 0.0);
			differ = 1;
		}
	}
	return differ;
}

int locusctl_graceset_diff(const void *a, size_t alen, const void *b, size_t blen)
{
	static struct locus_graceset_group ga[LOCUS_GRACESET_MAX_GROUPS],
		gb[LOCUS_GRACESET_MAX_GROUPS];
	struct locus_error err = { 0 };
	const struct locus_graceset_hdr *ha, *hb;
	const void *pa, *pb;
	int differ = 0;
	int rc;

	rc = locus_graceset_blob_check(a, alen, &pa, NULL, ga, NULL, &err);
	if (!rc)
		rc = locus_graceset_blob_check(b, blen, &pb, NULL, gb, NULL, &err);
	if (rc)
		return locusctl_fail(&err, rc) + 1;
	ha = pa;
	hb = pb;
	if (ha->n_groups != hb->n_groups)
		printf("groups: %u -> %u\n", ha->n_groups, hb->n_groups);
	for (uint32_t i = 0; i < ha->n_groups || i < hb->n_groups; i++) {
		const struct locus_graceset_entry *xa = i < ha->n_groups ? ga[i].entry : NULL;
		const struct locus_graceset_entry *xb = i < hb->n_groups ? gb[i].entry : NULL;
		char prefix[64];

		if (!xa || !xb) {
			printf("group %u: %s\n", i, xa ? "removed" : "added");
			differ = 1;
			continue;
		}
		if (xa->first_rank != xb->first_rank || xa->n_ranks != xb->n_ranks ||
		    xa->decoder_id != xb->decoder_id) {
			printf("group %u: decoder %u ranks %u..%u -> decoder %u ranks %u..%u "
			       "(tables not compared)\n", i, xa->decoder_id, xa->first_rank,
			       xa->first_rank + xa->n_ranks - 1, xb->decoder_id, xb->first_rank,
			       xb->first_rank + xb->n_ranks - 1);
			differ = 1;
			continue;
		}
		snprintf(prefix, sizeof(prefix), "group %u: ", i);
		rc = locusctl_grace_diff((const uint8_t *)ga[i].payload - 64, ga[i].payload_len + 64,
					 (const uint8_t *)gb[i].payload - 64, gb[i].payload_len + 64,
					 prefix);
		if (rc > 1)
			return rc;
		differ |= rc;
	}
	return differ || ha->n_groups != hb->n_groups;
}

/* diff A B | diff -i INSTANCE B: exit 0 same, 1 different, 2 trouble (as diff(1)). */
int locusctl_diff(int argc, char **argv)
{
	const char *inst = NULL, *files[2] = { NULL, NULL };
	char cur_path[4096];
	struct locus_error err = { 0 };
	void *buf[2] = { NULL, NULL };
	size_t len[2];
	unsigned kinds[2];
	int nf = 0, ret = 2;

	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--cluster"))
			return locusctl_diff_cluster(argc, argv);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-i") && i + 1 < argc)
			inst = argv[++i];
		else if (argv[i][0] != '-' && nf < 2)
			files[nf++] = argv[i];
		else
			goto usage;
	}
	if (inst ? nf != 1 : nf != 2)
		goto usage;
	if (inst) {
		uint64_t gen = 0;

		files[1] = files[0];
		if (locus_tbl_read_file(files[1], 0, &buf[1], &len[1], &err) < 0)
			goto fail;
		kinds[1] = ((const struct locus_tbl_hdr *)buf[1])->kind;
		if (published_gen(inst, kinds[1], &gen, &err) < 0)
			goto fail;
		if (!gen ||
		    !history_find_channel(inst, kinds[1], gen, 0, cur_path, sizeof(cur_path))) {
			fprintf(stderr, "locusctl: %s runs %s generation %" PRIu64
				", which is not kept in %s/%s\n", inst, locus_tbl_kind_name(kinds[1]),
				gen, state_dir(), inst);
			goto out;
		}
		files[0] = cur_path;
		printf("--- %s generation %" PRIu64 " (%s)\n+++ %s\n", inst, gen, cur_path, files[1]);
	}
	for (int i = 0; i < 2; i++) {
		if (!buf[i] && locus_tbl_read_file(files[i], 0, &buf[i], &len[i], &err) < 0)
			goto fail;
		kinds[i] = ((const struct locus_tbl_hdr *)buf[i])->kind;
	}
	if (kinds[0] != kinds[1]) {
		printf("kind: %s -> %s\n", locus_tbl_kind_name(kinds[0]), locus_tbl_kind_name(kinds[1]));
		ret = 1;
		goto out;
	}
	ret = kinds[0] == LOCUS_TBL_ELDR	 ? diff_eldr(buf[0], len[0], buf[1], len[1])
	      : kinds[0] == LOCUS_TBL_GRACE_SET ? locusctl_graceset_diff(buf[0], len[0], buf[1],
								   len[1])
					       : locusctl_grace_diff(buf[0], len[0], buf[1], len[1], "");
	if (ret == 0)
		printf("tables are equal\n");
	goto out;
fail:
	locusctl_fail(&err, err.code);
	ret = 2;
out:
	free(buf[0]);
	free(buf[1]);
	return ret;
usage:
	fprintf(stderr, "usage: locusctl diff TABLE_A TABLE_B | locusctl diff -i INSTANCE TABLE\n");
	return 2;
}
