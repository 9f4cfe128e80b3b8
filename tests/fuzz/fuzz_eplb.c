// SPDX-License-Identifier: MIT
/*
 * EPLB JSON (phy2log / log2phy / logcnt) through
 * locus_gracefit_eplb_import, what `locusctl eplb-import` runs, for a
 * topology taken from the first four input bytes (nodes, GPUs per node,
 * capacity, replica budget). Contract, from locus_gracefit.h: an import
 * writes a sealed blob that passes the GRACE blob check for that topology,
 * every expert's primary is the rank of its first slot and its other
 * copies' ranks are exactly its replicas, one per copy (two copies on one
 * rank are two replicas there; the input is read a second time here,
 * independently, with the strict reader of control/trace_json.h), loads are
 * 1 without W; and the blob exported again with locus_gracefit_eplb_export
 * imports with the same primaries and at least as many replicas on every
 * rank (export pads).
 * LOCUS_FUZZ_SKIP names honoured: eplb_copies (copies kept, loads 1).
 */
#include "fuzz.h"
#include "fuzz_known.h"
#include "locus_gracefit.h"
#include "locus_tblfile.h"
#include "trace_json.h"

#define MAXV (1u << 16)

/* An independent read of one nested integer array: values, row-major. */
struct arr {
	int64_t v[MAXV];
	size_t n;
	size_t shape[3];
	uint32_t ndim;
};

static int read_arr(struct tj *j, struct arr *a, uint32_t depth)
{
	size_t count = 0;
	int more;

	if (depth >= 3 || tj_expect(j, '[', "[") < 0)
		return -1;
	do {
		if (tj_peek(j) == '[') {
			if (read_arr(j, a, depth + 1) < 0)
				return -1;
		} else {
			double d;

			if (tj_number(j, &d) < 0 || a->n == MAXV)
				return -1;
			a->v[a->n++] = (int64_t)(d < -1e18 ? -1e18 : d > 1e18 ? 1e18 : d);
			a->ndim = depth + 1;
		}
		count++;
		more = tj_next(j, ']');
		if (more < 0)
			return -1;
	} while (more);
	a->shape[depth] = count;
	return 0;
}

static struct arr p2l, l2p, cnt;

/* 0 when the input reads as the three arrays (the importer checked the rest). */
static int read_eplb(const char *s, size_t len)
{
	struct locus_error err;
	struct tj j;
	int more;

	p2l.n = l2p.n = cnt.n = 0;
	tj_init(&j, s, len, "eplb", 1, &err);
	if (tj_expect(&j, '{', "{") < 0)
		return -1;
	do {
		char key[32];
		struct arr *a;

		if (tj_string(&j, key, sizeof(key)) < 0 || tj_expect(&j, ':', ":") < 0)
			return -1;
		a = !strcmp(key, "phy2log") ? &p2l : !strcmp(key, "log2phy") ? &l2p : &cnt;
		if (read_arr(&j, a, 0) < 0)
			return -1;
		more = tj_next(&j, '}');
		if (more < 0)
			return -1;
	} while (more);
	return 0;
}

/* Primaries and replica sets of blob b against what the input lists. */
static void check_copies(const struct locus_grace_view *v)
{
	uint32_t L = v->dims->n_layers, E = v->dims->n_experts, R = v->dims->max_replicas;
	uint32_t N = locus_grace_n_ranks(v->dims), P, X, S;

	FUZZ_CHECK(p2l.ndim == 2 && l2p.ndim == 3 && p2l.shape[0] == L && l2p.shape[1] == E,
		   "the importer took shapes the input does not have");
	P = (uint32_t)p2l.shape[1];
	X = (uint32_t)l2p.shape[2];
	S = P / N;
	for (uint32_t l = 0; l < L; l++) {
		for (uint32_t e = 0; e < E; e++) {
			const int64_t *ph = l2p.v + ((size_t)l * E + e) * X;
			size_t le = (size_t)l * E + e;
			uint16_t want[LOCUS_GRACE_MAX_RANKS] = { 0 };
			uint16_t got[LOCUS_GRACE_MAX_RANKS] = { 0 };

			FUZZ_CHECK(v->primary[le] == ph[0] / S, "layer %u expert %u: primary %u, "
				   "first slot %lld is on rank %lld", l, e, v->primary[le],
				   (long long)ph[0], (long long)(ph[0] / S));
			if (fuzz_skip("eplb_copies"))
				continue;
			FUZZ_CHECK(v->expert_load[le] == 1.0f,
				   "layer %u expert %u: load %g without W", l, e,
				   (double)v->expert_load[le]);
			for (uint32_t i = 1; i < X && ph[i] != -1; i++)
				want[ph[i] / S]++;
			for (uint32_t i = 0; i < R; i++)
				if (v->replica[le * R + i] != LOCUS_GRACE_NO_RANK)
					got[v->replica[le * R + i]]++;
			FUZZ_CHECK(!memcmp(want, got, N * sizeof(want[0])),
				   "layer %u expert %u: the table's replicas are not the ranks of "
				   "the expert's other copies, one per copy", l, e);
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };
	struct locus_gracefit_topo topo = {
		.n_nodes = 1 + fin_u8(&in) % 8, .gpus_per_node = 1 + fin_u8(&in) % 16,
		.capacity = fin_u8(&in) % 16, .replica_budget = fin_u8(&in) % 16,
	};
	struct locus_error err = { 0 };
	char *json = fuzz_dup(in.p, in.n), *json2 = NULL;
	void *blob = NULL, *blob2 = NULL;
	const void *pl, *pl2;
	size_t blen, blen2, plen, plen2;
	struct locus_grace_view v, v2;
	int ret;

	ret = locus_gracefit_eplb_import(json, in.n, &topo, NULL, &blob, &blen, &err);
	if (ret < 0) {
		FUZZ_CHECK(err.msg[0], "refusal %d without a message", ret);
		goto out;
	}
	FUZZ_CHECK(ret == 0 && blob, "import returned %d", ret);
	ret = locus_grace_blob_check(blob, blen, &pl, &plen, &err);
	FUZZ_CHECK(ret == 0, "the imported table fails the GRACE blob check: %s", err.msg);
	FUZZ_CHECK(locus_grace_view_init(&v, (void *)pl, plen, NULL) == 0, "view");
	FUZZ_CHECK(v.dims->n_nodes == topo.n_nodes && v.dims->gpus_per_node == topo.gpus_per_node,
		   "topology %ux%u, asked %ux%u", v.dims->n_nodes, v.dims->gpus_per_node,
		   topo.n_nodes, topo.gpus_per_node);
	FUZZ_CHECK(v.dims->capacity >= topo.capacity && v.dims->replica_budget >=
		   LOCUS_MIN(topo.replica_budget, v.dims->n_experts),
		   "capacity below the topology's");
	FUZZ_CHECK(read_eplb(json, in.n) == 0, "the importer took JSON the strict reader refuses");
	check_copies(&v);
	ret = locus_gracefit_eplb_export(pl, plen, &json2, &err);
	FUZZ_CHECK(ret == 0, "an imported table does not export: %s", err.msg);
	ret = locus_gracefit_eplb_import(json2, strlen(json2), &topo, NULL, &blob2, &blen2, &err);
	if (ret < 0 && fuzz_skip("eplb_copies"))
		goto out;
	FUZZ_CHECK(ret == 0, "an exported table does not import again: %s", err.msg);
	FUZZ_CHECK(locus_tbl_check(blob2, blen2, LOCUS_TBL_GRACE, &pl2, &plen2, NULL) == 0 &&
		   locus_grace_view_init(&v2, (void *)pl2, plen2, NULL) == 0, "re-import blob");
	FUZZ_CHECK(v2.dims->n_layers == v.dims->n_layers && v2.dims->n_experts == v.dims->n_experts,
		   "re-import shape");
	for (size_t le = 0; le < (size_t)v.dims->n_layers * v.dims->n_experts; le++) {
		FUZZ_CHECK(v2.primary[le] == v.primary[le], "primary of %zu changed on export", le);
		for (uint32_t i = 0; i < v.dims->max_replicas; i++) {
			uint16_t r = v.replica[le * v.dims->max_replicas + i];
			uint32_t n1 = 0, n2 = 0;

			if (r == LOCUS_GRACE_NO_RANK)
				continue;
			for (uint32_t k = 0; k < v.dims->max_replicas; k++)
				n1 += v.replica[le * v.dims->max_replicas + k] == r;
			for (uint32_t k = 0; k < v2.dims->max_replicas; k++)
				n2 += v2.replica[le * v2.dims->max_replicas + k] == r;
			FUZZ_CHECK(n2 >= n1, "replicas on rank %u of %zu: %u, %u after export", r,
				   le, n1, n2);
		}
	}
out:
	free(json);
	free(json2);
	free(blob);
	free(blob2);
	return 0;
}
