// SPDX-License-Identifier: MIT
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_tables.h"
#include "locus_eldr.h"
#include "locus_eldr_priv.h"
#include "locus_tblfile.h"
#include "locus_tblfile_priv.h"

void *ft_eldr_payload_mapped(uint16_t L, uint16_t E, uint16_t K, uint16_t C, uint32_t id0,
			     float tau, float spill_tau, uint32_t spill_margin, uint32_t flags,
			     size_t *len)
{
	struct locus_eldr_tbl_layout lay;
	struct locus_eldr_tbl_hdr *h;
	uint32_t *ids;
	uint16_t *map;
	uint8_t *mask, *p;
	float *idf, *cen;

	if (locus_eldr_tbl_layout_mapped(L, E, K, C, &lay) < 0)
		return NULL;
	p = calloc(1, lay.len);
	if (!p || locus_eldr_tbl_init_mapped(p, lay.len, L, E, K, C, tau, &ids, &map, &mask, &idf,
					     &cen) < 0) {
		free(p);
		return NULL;
	}
	h = (struct locus_eldr_tbl_hdr *)p;
	h->spill_tau = spill_tau;
	h->spill_margin = spill_margin;
	h->flags = flags;
	for (uint32_t l = 0; l < L; l++) {
		mask[l] = 1;
		for (uint32_t e = 0; e < E; e++)
			idf[(size_t)l * E + e] = 1.0f;
	}
	h->n_masked = L;
	for (uint32_t k = 0; k < K; k++)
		ids[k] = id0 + k;
	for (uint32_t k = 0; k < (C ? C : K); k++) {
		float *c = cen + (size_t)k * L * E;
		uint32_t a = (k * 3) % E, b = (a + 1) % E;
		double w = E > 1 ? 1.0 / sqrt(1.25 * L) : 1.0 / sqrt((double)L);

		if (map)
			map[k] = (uint16_t)(k % K);
		for (uint32_t l = 0; l < L; l++) {
			c[(size_t)l * E + a] = (float)w;
			if (E > 1)
				c[(size_t)l * E + b] = (float)(w / 2);
		}
	}
	*len = lay.len;
	return p;
}

void *ft_eldr_payload(uint16_t L, uint16_t E, uint16_t K, uint32_t id0, float tau, size_t *len)
{
	return ft_eldr_payload_mapped(L, E, K, 0, id0, tau, 0.0f, 0, 0, len);
}

void *ft_grace_payload(uint32_t L, uint32_t E, uint32_t nodes, uint32_t gpn, uint32_t R,
		       size_t *len)
{
	uint32_t N = nodes * gpn;
	struct locus_grace_dims d = {
		.n_layers = L, .n_experts = E, .n_nodes = nodes, .gpus_per_node = gpn,
		.max_replicas = R, .capacity = (E + N - 1) / N, .replica_budget = E,
	};
	struct locus_grace_view v;
	size_t n = locus_grace_payload_size(&d);
	void *p;

	if (!n || !(p = calloc(1, n)))
		return NULL;
	memcpy(p, &d, sizeof(d));
	if (locus_grace_view_init(&v, p, n, NULL) < 0) {
		free(p);
		return NULL;
	}
	for (uint32_t l = 0; l < L; l++) {
		float *pred = v.pred_load + (size_t)l * N;

		for (uint32_t e = 0; e < E; e++) {
			size_t le = (size_t)l * E + e;
			uint16_t *rep = v.replica + le * R;
			uint32_t pri = e % N, copies = 1;
			float w = 1.0f + (float)(e % 5);

			v.primary[le] = (uint16_t)pri;
			for (uint32_t i = 0; i < R; i++)
				rep[i] = LOCUS_GRACE_NO_RANK;
			if (R && e % 3 == 0) {
				rep[0] = (uint16_t)((pri + 1) % N);
				copies = 2;
			}
			v.expert_load[le] = w;
			pred[pri] += w / (float)copies;
			if (copies == 2)
				pred[rep[0]] += w / 2;
		}
	}
	*len = n;
	return p;
}

void *ft_seal(unsigned kind, uint32_t version, const void *payload, size_t plen, size_t *len)
{
	uint8_t *b = malloc(sizeof(struct locus_tbl_hdr) + plen);

	if (!b)
		return NULL;
	memcpy(b + sizeof(struct locus_tbl_hdr), payload, plen);
	if (locus_tbl_seal(b, sizeof(struct locus_tbl_hdr) + plen, kind, version, plen) < 0) {
		free(b);
		return NULL;
	}
	*len = sizeof(struct locus_tbl_hdr) + plen;
	return b;
}

void *ft_eldr_blob(uint16_t L, uint16_t E, uint16_t K, uint32_t id0, size_t *len)
{
	size_t plen;
	void *p = ft_eldr_payload(L, E, K, id0, LOCUS_ELDR_TAU_DEFAULT, &plen), *b;

	if (!p)
		return NULL;
	b = ft_seal(LOCUS_TBL_ELDR, locus_eldr_tbl_kind_version(p), p, plen, len);
	free(p);
	return b;
}

void *ft_grace_blob(uint32_t L, uint32_t E, uint32_t nodes, uint32_t gpn, uint32_t R,
		    size_t *len)
{
	size_t plen;
	void *p = ft_grace_payload(L, E, nodes, gpn, R, &plen), *b;

	if (!p)
		return NULL;
	b = ft_seal(LOCUS_TBL_GRACE, LOCUS_GRACE_KIND_VERSION, p, plen, len);
	free(p);
	return b;
}
