// SPDX-License-Identifier: MIT
/* Tables for test_node (node_tables.h), written field by field, sealed. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "locus_eldr.h"
#include "locus_eldr_priv.h"
#include "locus_grace.h"
#include "locus_tblfile.h"
#include "locus_tblfile_priv.h"
#include "node_tables.h"

/*
 * ELDR table over L x E: decoder 0's centroid leans on expert 0, decoder 1's
 * on expert 7; both share a little expert 3 so a mixed signature falls in
 * both bands. nan_centroid makes a table that seals fine and fails validation.
 */
void *eldr_table(float tau, int nan_centroid, size_t *len)
{
	struct locus_eldr_tbl_layout lay;
	uint32_t *ids;
	uint8_t *mask;
	float *idf, *cen;
	uint8_t *blob;

	assert_int_equal(locus_eldr_tbl_layout(L, E, 2, &lay), 0);
	blob = calloc(1, 64 + lay.len);
	assert_int_equal(locus_eldr_tbl_init(blob + 64, lay.len, L, E, 2, tau, &ids, &mask, &idf,
					     &cen), 0);
	ids[0] = 0;
	ids[1] = 1;
	for (int l = 0; l < L; l++) {
		mask[l] = 1;
		for (int e = 0; e < E; e++)
			idf[l * E + e] = 1.0f;
		/* each centroid: (0.9, 0.3) over layers' expert 0/7 and 3, normalised */
		cen[0 * L * E + l * E + 0] = 0.9f;
		cen[0 * L * E + l * E + 3] = 0.3f;
		cen[1 * L * E + l * E + 7] = 0.9f;
		cen[1 * L * E + l * E + 3] = 0.3f;
	}
	for (int k = 0; k < 2; k++) {
		double s = 0;

		for (int j = 0; j < L * E; j++)
			s += (double)cen[k * L * E + j] * cen[k * L * E + j];
		for (int j = 0; j < L * E; j++)
			cen[k * L * E + j] = (float)(cen[k * L * E + j] / sqrt(s));
	}
	((struct locus_eldr_tbl_hdr *)(blob + 64))->n_masked = L;
	if (nan_centroid)
		cen[5] = NAN;
	assert_int_equal(locus_tbl_seal(blob, 64 + lay.len, LOCUS_TBL_ELDR, LOCUS_ELDR_TBL_VERSION,
					lay.len), 0);
	*len = 64 + lay.len;
	return blob;
}

/*
 * Version 2 ELDR table over L x E: decoder 0 owns two centroids (expert 0
 * with a little of 3, and expert 5), decoder 1 one (expert 7 with a little
 * of 3); the overflow spread and a load spill of 0.3, margin 1.
 */
void *eldr_table_v2(float tau, size_t *len)
{
	static const uint16_t slot[3] = { 0, 1, 0 };
	static const int lead[3] = { 0, 7, 5 };
	struct locus_eldr_tbl_layout lay;
	struct locus_eldr_tbl_hdr *h;
	uint32_t *ids;
	uint16_t *map;
	uint8_t *mask, *blob;
	float *idf, *cen;

	assert_int_equal(locus_eldr_tbl_layout_mapped(L, E, 2, 3, &lay), 0);
	blob = calloc(1, 64 + lay.len);
	assert_non_null(blob);
	h = (struct locus_eldr_tbl_hdr *)(blob + 64);
	assert_int_equal(locus_eldr_tbl_init_mapped(h, lay.len, L, E, 2, 3, tau, &ids, &map, &mask,
						    &idf, &cen), 0);
	ids[0] = 0;
	ids[1] = 1;
	for (int c = 0; c < 3; c++) {
		float w3 = c < 2 ? 0.3f : 0.0f;
		double n = sqrt((0.81 + (double)w3 * w3) * L);

		map[c] = slot[c];
		for (int l = 0; l < L; l++) {
			cen[c * L * E + l * E + lead[c]] = (float)(0.9 / n);
			cen[c * L * E + l * E + 3] = (float)(w3 / n);
		}
	}
	for (int l = 0; l < L; l++) {
		mask[l] = 1;
		for (int e = 0; e < E; e++)
			idf[l * E + e] = 1.0f;
	}
	h->n_masked = L;
	h->flags = LOCUS_ELDR_TBL_F_OVERFLOW_SPREAD;
	h->spill_tau = 0.3f;
	h->spill_margin = 1;
	assert_int_equal(locus_eldr_tbl_kind_version(h), 2);
	assert_int_equal(locus_tbl_seal(blob, 64 + lay.len, LOCUS_TBL_ELDR, 2, lay.len), 0);
	*len = 64 + lay.len;
	return blob;
}

/*
 * GRACE table, 1 node x 4 GPUs, E = 8: expert e on rank e / 2; the hot
 * expert 5 (rank 2) has a replica on rank 0.
 */
uint16_t primary_of(int e)
{
	return (uint16_t)(e / 2);
}

void *grace_table(size_t *len)
{
	struct locus_grace_dims d = { .n_layers = L, .n_experts = E, .n_nodes = 1,
				      .gpus_per_node = GPN, .max_replicas = 1, .capacity = 2,
				      .replica_budget = 1 };
	struct locus_grace_view v;
	size_t plen = locus_grace_payload_size(&d);
	uint8_t *blob;

	assert_true(plen > 0);
	blob = calloc(1, 64 + plen);
	memcpy(blob + 64, &d, sizeof(d));
	assert_int_equal(locus_grace_view_init(&v, blob + 64, plen, NULL), 0);
	for (int l = 0; l < L; l++) {
		for (int e = 0; e < E; e++) {
			v.primary[l * E + e] = primary_of(e);
			v.replica[l * E + e] = e == 5 ? 0 : LOCUS_GRACE_NO_RANK;
			v.expert_load[l * E + e] = e == 5 ? 100.0f : 10.0f;
		}
		for (int r = 0; r < GPN; r++)
			v.pred_load[l * GPN + r] = 40.0f;
	}
	assert_int_equal(locus_grace_validate(&v, NULL), 0);
	assert_int_equal(locus_tbl_seal(blob, 64 + plen, LOCUS_TBL_GRACE, LOCUS_GRACE_KIND_VERSION,
					plen), 0);
	*len = 64 + plen;
	return blob;
}

