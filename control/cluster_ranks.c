// SPDX-License-Identifier: MIT
/* Which ranks of the cluster are lost, from etcd's records and reports (locus_cluster_ranks.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "locus_cluster_ranks.h"
#include "locus_err_priv.h"

/* An array of small unsigned ids below bound into out (at most cap): their count, or -1. */
static int ids_of(json_t *a, uint32_t bound, uint32_t skip, uint16_t *out, uint32_t cap,
		  uint32_t *bits)
{
	size_t i;
	json_t *x;
	uint32_t n = 0;

	if (!json_is_array(a))
		return -1;
	json_array_foreach(a, i, x) {
		json_int_t v;

		if (!json_is_integer(x))
			return -1;
		v = json_integer_value(x);
		if (v < 0 || v >= (json_int_t)bound || (uint32_t)v == skip || n >= cap)
			return -1;
		if (out)
			out[n] = (uint16_t)v;
		if (bits)
			*bits |= 1u << v;
		n++;
	}
	return (int)n;
}

int locus_ranks_report_parse(const void *buf, size_t len, uint32_t node, uint32_t n_nodes,
			     uint32_t gpus_per_node, struct locus_ranks_report *out,
			     struct locus_error *err)
{
	json_error_t je;
	json_t *root, *id;
	int n, ret = 0;

	memset(out, 0, sizeof(*out));
	if (gpus_per_node == 0 || gpus_per_node > LOCUS_RANKS_MAX_GPUS)
		return locus_error_set(err, LOCUS_ERANGE, "%u GPUs a node: 1..%u", gpus_per_node,
				       LOCUS_RANKS_MAX_GPUS);
	root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return locus_error_set(err, LOCUS_EPARSE, "node %u's ranks: not JSON (%s)", node,
				       je.text);
	id = json_object_get(root, "node");
	if (!json_is_object(root) || !json_is_integer(id) || json_integer_value(id) != node) {
		ret = locus_error_set(err, LOCUS_EPARSE, "node %u's ranks: no \"node\": %u", node,
				      node);
		goto out;
	}
	out->node = node;
	if (ids_of(json_object_get(root, "attached"), gpus_per_node, UINT32_MAX, NULL,
		   LOCUS_RANKS_MAX_GPUS, &out->attached) < 0) {
		ret = locus_error_set(err, LOCUS_ERANGE, "node %u's ranks: \"attached\" is not a "
				      "list of GPUs 0..%u", node, gpus_per_node - 1);
		goto out;
	}
	n = ids_of(json_object_get(root, "down"), n_nodes, node, out->down, LOCUS_RANKS_MAX_DOWN,
		   NULL);
	if (n < 0) {
		ret = locus_error_set(err, LOCUS_ERANGE, "node %u's ranks: \"down\" is not a list "
				      "of other nodes 0..%u", node, n_nodes - 1);
		goto out;
	}
	out->n_down = (uint32_t)n;
out:
	json_decref(root);
	return ret;
}

int locus_ranks_view_init(struct locus_ranks_view *v, uint32_t n_nodes, uint32_t gpus_per_node,
			  struct locus_error *err)
{
	memset(v, 0, sizeof(*v));
	if (!n_nodes || !gpus_per_node || gpus_per_node > LOCUS_RANKS_MAX_GPUS ||
	    n_nodes > LOCUS_RANKS_MAX_DOWN)
		return locus_error_set(err, LOCUS_ERANGE, "%u nodes x %u GPUs", n_nodes,
				       gpus_per_node);
	v->n_nodes = n_nodes;
	v->gpus_per_node = gpus_per_node;
	v->words = (n_nodes * gpus_per_node + 63) / 64;
	v->seen = calloc(v->words, 8);
	v->live = calloc(v->words, 8);
	v->lost = calloc(v->words, 8);
	v->cut_off = calloc(n_nodes, 1);
	if (!v->seen || !v->live || !v->lost || !v->cut_off) {
		locus_ranks_view_free(v);
		return locus_error_set(err, ENOMEM, "out of memory");
	}
	return 0;
}

void locus_ranks_view_free(struct locus_ranks_view *v)
{
	free(v->seen);
	free(v->live);
	free(v->lost);
	free(v->cut_off);
	memset(v, 0, sizeof(*v));
}

void locus_ranks_view_update(struct locus_ranks_view *v, const uint8_t *member,
			     const struct locus_ranks_report *const *rep)
{
	uint32_t gpn = v->gpus_per_node;

	/* cut off: more than half of the other reporting members cannot reach it */
	for (uint32_t n = 0; n < v->n_nodes; n++) {
		uint32_t voters = 0, votes = 0;

		v->cut_off[n] = 0;
		if (!member[n])
			continue;
		for (uint32_t m = 0; m < v->n_nodes; m++) {
			if (m == n || !member[m] || !rep[m])
				continue;
			voters++;
			for (uint32_t i = 0; i < rep[m]->n_down; i++)
				if (rep[m]->down[i] == n) {
					votes++;
					break;
				}
		}
		v->cut_off[n] = voters && 2 * votes > voters;
	}
	memset(v->live, 0, (size_t)v->words * 8);
	memset(v->lost, 0, (size_t)v->words * 8);
	v->n_live = v->n_lost = 0;
	for (uint32_t n = 0; n < v->n_nodes; n++)
		for (uint32_t g = 0; g < gpn; g++) {
			uint32_t r = n * gpn + g;
			uint64_t bit = 1ull << (r % 64);
			int live = member[n] && rep[n] && !v->cut_off[n] &&
				   (rep[n]->attached >> g & 1);

			if (live) {
				v->live[r / 64] |= bit;
				v->seen[r / 64] |= bit;
				v->n_live++;
			} else if (v->seen[r / 64] & bit) {
				v->lost[r / 64] |= bit;
				v->n_lost++;
			}
		}
}
