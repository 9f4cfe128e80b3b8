// SPDX-License-Identifier: MIT
/*
 * locusctl and GRACE placement sets (one placement per decoder's EP group):
 * the per-decoder fit and show [--json]. Push, diff and rollback take a set
 * like any table of the GRACE channel (eldr_ctl.c, locusctl_history.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locus_grace_epgroups.h"
#include "locus_graceset.h"
#include "locus_tblfile.h"
#include "locus_tblfile_priv.h"
#include "locus_trace.h"
#include "locusctl.h"

int locusctl_graceset_fit(const struct locus_trace *t, const char *eldr_path, uint32_t R,
			  const struct locus_gracefit_topo *topo,
			  const struct locus_gracefit_opts *opts, const char *out)
{
	struct locus_epgroups_opts o = { .ranks_per_decoder = R, .topo = *topo, .fit = *opts };
	struct locus_epgroups_info *info = NULL;
	struct locus_eldr_tbl_view v;
	struct locus_error err = { 0 };
	void *eldr = NULL, *set = NULL;
	size_t elen, slen;
	uint32_t K;
	int rc, ret = 1;

	rc = locus_tbl_read_file(eldr_path, LOCUS_TBL_ELDR, &eldr, &elen, &err);
	if (!rc)
		rc = locus_eldr_blob_check(eldr, elen, &v, &err);
	if (rc) {
		locusctl_fail(&err, rc);
		goto out;
	}
	K = v.hdr->n_decoders;
	info = calloc(K, sizeof(*info));
	if (!info) {
		locusctl_fail(NULL, ENOMEM);
		goto out;
	}
	rc = locus_epgroups_fit(t, &v, NULL, &o, &set, &slen, info, &err);
	if (!rc)
		rc = locus_tbl_write_file(out, set, slen, &err);
	if (rc) {
		locusctl_fail(&err, rc);
		goto out;
	}
	printf("grace fit per decoder: %u requests, %u decoders x %u EP ranks on %u x %u GPUs "
	       "-> %s\n", t->n_requests, K, R, topo->n_nodes, topo->gpus_per_node, out);
	printf("group decoder ranks       requests (decode) token-layers  skew -> skew'\n");
	for (uint32_t k = 0; k < K; k++)
		printf("%5u %7u %5u..%-5u %8u %8u %12" PRIu64 "  %5.2f -> %5.2f%s\n", k,
		       info[k].decoder_id, info[k].first_rank,
		       info[k].first_rank + info[k].n_ranks - 1, info[k].n_requests,
		       info[k].n_decode, info[k].n_tokens, info[k].rho, info[k].rho_after,
		       info[k].fallback ? "  (owned no request: fitted from all)" : "");
	ret = 0;
out:
	free(info);
	free(set);
	free(eldr);
	return ret;
}

/* Predicted max/mean over a group's ranks at layer l. */
static double group_skew(const struct locus_grace_view *v, const struct locus_graceset_entry *x,
			 uint32_t l)
{
	uint32_t N = locus_grace_n_ranks(v->dims);
	double mx = 0, sum = 0;

	for (uint32_t r = x->first_rank; r < x->first_rank + x->n_ranks; r++) {
		double w = v->pred_load[(size_t)l * N + r];

		mx = fmax(mx, w);
		sum += w;
	}
	return sum > 0 ? mx * x->n_ranks / sum : 1.0;
}

static uint32_t n_replicas(const struct locus_grace_view *v, uint32_t l)
{
	uint32_t E = v->dims->n_experts, R = v->dims->max_replicas, n = 0;

	for (size_t i = (size_t)l * E * R; i < (size_t)(l + 1) * E * R; i++)
		n += v->replica[i] != LOCUS_GRACE_NO_RANK;
	return n;
}

static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", (unsigned char)*s);
		else
			putchar(*s);
	}
	putchar('"');
}

static void show_group_json(const struct locus_graceset_group *g)
{
	const struct locus_graceset_entry *x = g->entry;
	const struct locus_tbl_hdr *th = (const struct locus_tbl_hdr *)g->payload - 1;
	struct locus_grace_view v;
	uint32_t E;

	locus_grace_view_init(&v, (void *)(uintptr_t)g->payload, g->payload_len, NULL);
	E = v.dims->n_experts;
	printf("{\"group\":%u,\"decoder_id\":%u,\"first_rank\":%u,\"n_ranks\":%u,"
	       "\"table_crc32c\":%u,\"max_replicas\":%u,\"capacity\":%u,\"replica_budget\":%u,"
	       "\"layers\":[", x->group_id, x->decoder_id, x->first_rank, x->n_ranks,
	       th->payload_crc32c, v.dims->max_replicas, v.dims->capacity,
	       v.dims->replica_budget);
	for (uint32_t l = 0; l < v.dims->n_layers; l++) {
		printf("%s{\"predicted_skew\":%.6g,\"replicas\":%u,\"primary\":[", l ? "," : "",
		       group_skew(&v, x, l), n_replicas(&v, l));
		for (uint32_t e = 0; e < E; e++)
			printf(e ? ",%u" : "%u", v.primary[(size_t)l * E + e]);
		printf("]}");
	}
	printf("]}");
}

static void show_json(const char *path, const struct locus_tbl_hdr *th,
		      const struct locus_graceset_hdr *h, const struct locus_graceset_group *g)
{
	printf("{\"path\":");
	json_str(path);
	printf(",\"kind\":\"graceset\",\"kind_version\":%u,\"payload_len\":%" PRIu64
	       ",\"payload_crc32c\":%u,\"created_ns\":%" PRIu64 ",\"n_layers\":%u,"
	       "\"n_experts\":%u,\"n_nodes\":%u,\"gpus_per_node\":%u,\"n_groups\":%u,"
	       "\"groups\":[", th->kind_version, th->payload_len, th->payload_crc32c,
	       th->created_ns, h->n_layers, h->n_experts, h->n_nodes, h->gpus_per_node,
	       h->n_groups);
	for (uint32_t i = 0; i < h->n_groups; i++) {
		if (i)
			putchar(',');
		show_group_json(&g[i]);
	}
	printf("]}\n");
}

static void show_human(const char *path, const struct locus_graceset_hdr *h,
		       const struct locus_graceset_group *g)
{
	printf("GRACE placement set %s: %u groups, %u layers x %u experts, %u nodes x %u GPUs\n",
	       path, h->n_groups, h->n_layers, h->n_experts, h->n_nodes, h->gpus_per_node);
	for (uint32_t i = 0; i < h->n_groups; i++) {
		const struct locus_graceset_entry *x = g[i].entry;
		struct locus_grace_view v;
		double skew = 0;
		uint32_t reps = 0;

		locus_grace_view_init(&v, (void *)(uintptr_t)g[i].payload, g[i].payload_len, NULL);
		for (uint32_t l = 0; l < h->n_layers; l++) {
			skew += group_skew(&v, x, l) / h->n_layers;
			reps += n_replicas(&v, l);
		}
		printf("group %u: decoder %u, ranks %u..%u (nodes %u..%u), capacity %u, replica "
		       "budget %u, %u replica slots per expert, %u replicas over all layers, "
		       "predicted skew %.3f (mean over layers)\n", x->group_id, x->decoder_id,
		       x->first_rank, x->first_rank + x->n_ranks - 1,
		       x->first_rank / h->gpus_per_node,
		       (x->first_rank + x->n_ranks - 1) / h->gpus_per_node, v.dims->capacity,
		       v.dims->replica_budget, v.dims->max_replicas, reps, skew);
	}
}

int locusctl_graceset_show(int argc, char **argv)
{
	static struct locus_graceset_group g[LOCUS_GRACESET_MAX_GROUPS];
	struct locus_error err = { 0 };
	const char *path = NULL;
	const void *pl;
	void *buf = NULL;
	size_t len;
	int json = 0, rc;

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
	rc = locus_tbl_read_file(path, LOCUS_TBL_GRACE_SET, &buf, &len, &err);
	if (!rc)
		rc = locus_graceset_blob_check(buf, len, &pl, NULL, g, NULL, &err);
	if (rc) {
		free(buf);
		return locusctl_fail(&err, rc);
	}
	if (json)
		show_json(path, buf, pl, g);
	else
		show_human(path, pl, g);
	free(buf);
	return 0;
usage:
	fprintf(stderr, "usage: locusctl show SET [--json]\n");
	return 2;
}
