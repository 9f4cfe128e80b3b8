// SPDX-License-Identifier: MIT
/* GRACE tables and placement sets built by hand (graceset_util.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "graceset_util.h"
#include "locus_graceset_priv.h"
#include "locus_tblfile.h"
#include "locus_tblfile_priv.h"

void *gs_table(uint32_t n_layers, uint32_t n_experts, uint32_t n_nodes, uint32_t gpn,
	       uint32_t R, const uint16_t *primary, const uint16_t *replica, size_t *len)
{
	struct locus_grace_dims d = { .n_layers = n_layers, .n_experts = n_experts,
				      .n_nodes = n_nodes, .gpus_per_node = gpn,
				      .max_replicas = R, .capacity = 1, .replica_budget = 0 };
	uint32_t N = n_nodes * gpn, pri[LOCUS_GRACE_MAX_RANKS] = { 0 };
	uint32_t rep[LOCUS_GRACE_MAX_RANKS] = { 0 };
	struct locus_grace_view v;
	struct locus_error err;
	size_t plen;
	uint8_t *blob;

	for (uint32_t e = 0; e < n_experts; e++) {
		pri[primary[e]]++;
		for (uint32_t i = 0; i < R; i++)
			if (replica[e * R + i] != LOCUS_GRACE_NO_RANK)
				rep[replica[e * R + i]]++;
	}
	for (uint32_t r = 0; r < N; r++) {
		d.capacity = pri[r] > d.capacity ? pri[r] : d.capacity;
		d.replica_budget = rep[r] > d.replica_budget ? rep[r] : d.replica_budget;
	}
	plen = locus_grace_payload_size(&d);
	assert_true(plen > 0);
	blob = calloc(1, 64 + plen);
	assert_non_null(blob);
	memcpy(blob + 64, &d, sizeof(d));
	assert_int_equal(locus_grace_view_init(&v, blob + 64, plen, NULL), 0);
	for (uint32_t l = 0; l < n_layers; l++) {
		for (uint32_t e = 0; e < n_experts; e++) {
			size_t le = (size_t)l * n_experts + e;
			uint32_t n = 1;

			v.primary[le] = primary[e];
			for (uint32_t i = 0; i < R; i++) {
				v.replica[le * R + i] = replica[e * R + i];
				n += replica[e * R + i] != LOCUS_GRACE_NO_RANK;
			}
			v.expert_load[le] = 10.0f;
			v.pred_load[(size_t)l * N + primary[e]] += 10.0f / (float)n;
			for (uint32_t i = 0; i < R; i++)
				if (replica[e * R + i] != LOCUS_GRACE_NO_RANK)
					v.pred_load[(size_t)l * N + replica[e * R + i]] +=
						10.0f / (float)n;
		}
	}
	if (locus_grace_validate(&v, &err))
		fail_msg("gs_table: %s", err.msg);
	assert_int_equal(locus_tbl_seal(blob, 64 + plen, LOCUS_TBL_GRACE, LOCUS_GRACE_KIND_VERSION,
					plen), 0);
	*len = 64 + plen;
	return blob;
}

void *gs_set(struct gs_group *g, uint32_t n, size_t *len)
{
	struct locus_graceset_part parts[LOCUS_GRACESET_MAX_GROUPS];
	struct locus_error err;
	void *blob = NULL;

	assert_true(n >= 1 && n <= LOCUS_GRACESET_MAX_GROUPS);
	for (uint32_t i = 0; i < n; i++)
		parts[i] = (struct locus_graceset_part){
			.group_id = g[i].id, .decoder_id = g[i].id, .first_rank = g[i].first,
			.n_ranks = g[i].n, .blob = g[i].blob, .blob_len = g[i].len,
		};
	if (locus_graceset_build_unchecked(parts, n, &blob, len, &err))
		fail_msg("gs_set: %s", err.msg);
	for (uint32_t i = 0; i < n; i++)
		free(g[i].blob);
	return blob;
}
