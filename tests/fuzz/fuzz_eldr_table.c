// SPDX-License-Identifier: MIT
/*
 * ELDR table payloads: the input is a payload, sealed here (the container
 * has its own target) and checked by locus_eldr_blob_check, what the table
 * channel, `locusctl show` and the router build run. What validates must
 * agree with locus_eldr_tbl_validate, keep the header's promises (unique
 * decoder ids, mask count, section pointers inside the payload, every
 * centroid mapped to a slot that exists and every slot owning one, the
 * spill off or wider than tau, known flags; sealed as version 1 only when
 * it uses no version 2 field), and build
 * a router on every path this CPU has; the routers then route signatures
 * within the promises of locus_eldr_router.h, score alike across paths, and a
 * batch decides as the same signatures routed one by one.
 */
#include <math.h>

#include "fuzz.h"
#include "fuzz_eldr_common.h"
#include "fuzz_tables.h"
#include "locus_eldr_priv.h"
#include "locus_tblfile.h"

#define N_SIGS 8

static void check_view(const struct locus_eldr_tbl_view *v, const void *payload, size_t len)
{
	const uint8_t *b = payload, *end = b + len;
	uint32_t L = v->hdr->n_layers, E = v->hdr->n_experts, K = v->hdr->n_decoders, m = 0;
	uint32_t C = v->n_centroids;

	FUZZ_CHECK((const void *)v->hdr == payload, "view header");
	FUZZ_CHECK((const uint8_t *)(v->decoder_ids + K) <= end &&
		   v->layer_mask + L <= end && (const uint8_t *)(v->idf + (size_t)L * E) <= end &&
		   (const uint8_t *)(v->centroids + (size_t)C * L * E) <= end &&
		   (const uint8_t *)v->decoder_ids >= b, "a section outside the payload");
	FUZZ_CHECK(v->hdr->n_centroids ? C == v->hdr->n_centroids && C >= K && v->centroid_slot &&
		   (const uint8_t *)(v->centroid_slot + C) <= end :
		   C == K && !v->centroid_slot, "centroid count %u, K %u, header %u", C, K,
		   v->hdr->n_centroids);
	for (uint32_t d = 0; v->centroid_slot && d < K; d++) {
		uint32_t owned = 0;

		for (uint32_t c = 0; c < C; c++) {
			FUZZ_CHECK(v->centroid_slot[c] < K, "centroid %u of slot %u", c,
				   v->centroid_slot[c]);
			owned += v->centroid_slot[c] == d;
		}
		FUZZ_CHECK(owned, "slot %u owns no centroid", d);
	}
	FUZZ_CHECK(!(v->hdr->flags & ~LOCUS_ELDR_TBL_FLAGS_KNOWN), "flags 0x%x", v->hdr->flags);
	FUZZ_CHECK(v->hdr->spill_tau == 0.0f ? !v->hdr->spill_margin :
		   v->hdr->spill_tau > v->hdr->tau && v->hdr->spill_tau <= 2.0f,
		   "spill %g/%u with tau %g", (double)v->hdr->spill_tau, v->hdr->spill_margin,
		   (double)v->hdr->tau);
	for (uint32_t l = 0; l < L; l++)
		m += v->layer_mask[l];
	FUZZ_CHECK(m == v->hdr->n_masked && m >= 1, "mask count");
	for (uint32_t i = 0; i < K; i++)
		for (uint32_t j = 0; j < i; j++)
			FUZZ_CHECK(v->decoder_ids[i] != v->decoder_ids[j], "duplicate decoder id");
	FUZZ_CHECK(isfinite(v->hdr->tau) && v->hdr->tau >= 0 && v->hdr->tau <= 2, "tau");
}

static void route_all(const void *payload, size_t len, const struct locus_eldr_tbl_view *v)
{
	/* each arithmetic's paths, its scalar one first: the others score as it does */
	static const enum locus_eldr_path paths[] = {
		LOCUS_ELDR_PATH_SCALAR, LOCUS_ELDR_PATH_AVX2, LOCUS_ELDR_PATH_AVX512,
		LOCUS_ELDR_PATH_SCALAR_I8, LOCUS_ELDR_PATH_AVX2_I8, LOCUS_ELDR_PATH_AVX512_I8,
	};
	uint16_t L = v->hdr->n_layers, E = v->hdr->n_experts;
	uint32_t K = v->hdr->n_decoders;
	size_t slen = locus_eldr_sig_len(L, E);
	uint8_t *sigs = malloc(slen * N_SIGS);
	float *s_ref = malloc(sizeof(float) * K * N_SIGS), *s = malloc(sizeof(float) * K);
	uint8_t *up = malloc(K);
	const void *sp[N_SIGS];
	size_t lens[N_SIGS];

	if (!sigs || !s_ref || !s || !up)
		abort();
	for (uint32_t i = 0; i < N_SIGS; i++) {
		/* the last is all-zero; two carry a decode constraint */
		uint64_t allowed = i == 2 ? 1ull << (v->decoder_ids[K - 1] & 63) : i == 5 ? 0x5 : 0;

		lens[i] = fe_sig(sigs + i * slen, L, E, i + 1 == N_SIGS ? UINT32_MAX : i * 5,
				 allowed);
		sp[i] = sigs + i * slen;
	}
	for (size_t pi = 0; pi < LOCUS_ARRAY_SIZE(paths); pi++) {
		void *m1, *m2;
		struct locus_eldr_router *r1, *r2;
		struct locus_eldr_decision d1[N_SIGS], d2[N_SIGS];
		int rc1[N_SIGS], rc2[N_SIGS];

		if (!locus_eldr_path_supported(paths[pi]))
			continue;
		r1 = fe_router(payload, len, paths[pi], &m1);
		r2 = fe_router(payload, len, paths[pi], &m2);
		FUZZ_CHECK(locus_eldr_router_n_decoders(r1) == K, "router decoders");
		for (uint32_t k = 0; k < K; k++) {
			FUZZ_CHECK(locus_eldr_router_slot(r1, v->decoder_ids[k]) == (int)k,
				   "decoder id %u not at its slot %u", v->decoder_ids[k], k);
			up[k] = k % 3 != 1;
			locus_eldr_router_set_up(r1, k, up[k]);
			locus_eldr_router_set_up(r2, k, up[k]);
			locus_eldr_router_set_load(r1, k, k % 4);
			locus_eldr_router_set_load(r2, k, k % 4);
		}
		for (uint32_t i = 0; i < N_SIGS; i++) {
			FUZZ_CHECK(locus_eldr_score(r1, sp[i], lens[i], s) == 0, "score refused");
			rc1[i] = locus_eldr_route(r1, sp[i], lens[i], &d1[i]);
			fe_check_decision(v, sp[i], rc1[i], &d1[i], s, up);
			if (pi % 3 == 0) {
				memcpy(s_ref + i * K, s, sizeof(float) * K);
				continue;
			}
			for (uint32_t k = 0; k < K; k++)
				FUZZ_CHECK(fabsf(s[k] - s_ref[i * K + k]) <= 1e-3f,
					   "%s scores %g, scalar %g (signature %u, slot %u)",
					   locus_eldr_path_name(paths[pi]), (double)s[k],
					   (double)s_ref[i * K + k], i, k);
		}
		locus_eldr_route_batch(r2, sp, lens, N_SIGS, d2, rc2);
		for (uint32_t i = 0; i < N_SIGS; i++)
			FUZZ_CHECK(rc1[i] == rc2[i] && (rc1[i] || d1[i].slot == d2[i].slot),
				   "%s: signature %u routed alone to slot %u (%d), in a batch to "
				   "slot %u (%d)", locus_eldr_path_name(paths[pi]), i, d1[i].slot,
				   rc1[i], d2[i].slot, rc2[i]);
		free(m1);
		free(m2);
	}
	free(sigs);
	free(s_ref);
	free(s);
	free(up);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct locus_error err = { 0 };
	struct locus_eldr_tbl_view v, v2;
	void *payload = fuzz_dup(data, size);
	size_t blen;
	void *blob = ft_seal(LOCUS_TBL_ELDR, LOCUS_ELDR_TBL_VERSION, data, size, &blen);
	int ret, ret2;

	if (!blob)
		goto out;
	ret = locus_eldr_blob_check(blob, blen, &v, &err);
	FUZZ_CHECK(ret <= 0, "blob check returned %d", ret);
	FUZZ_CHECK(locus_eldr_table_validate_cb(blob, blen, NULL, NULL) == ret,
		   "the table channel's callback disagrees with the blob check");
	ret2 = locus_eldr_tbl_validate(payload, size, &v2, NULL);
	FUZZ_CHECK(ret == ret2, "blob check %d, payload validate %d", ret, ret2);
	if (ret == 0) {
		/* sealed as version 1: the same verdict unless it uses version 2's fields */
		size_t l1;
		void *b1 = ft_seal(LOCUS_TBL_ELDR, 1, data, size, &l1);
		int r1 = b1 ? locus_eldr_blob_check(b1, l1, NULL, NULL) : 0;

		FUZZ_CHECK(!b1 || r1 == (locus_eldr_tbl_kind_version(payload) == 1 ? 0 :
					 -LOCUS_EVERSION),
			   "sealed as version 1: %d (the payload needs version %u)", r1,
			   locus_eldr_tbl_kind_version(payload));
		free(b1);
	}
	if (ret < 0) {
		FUZZ_CHECK(err.msg[0], "refusal %d without a message", ret);
		FUZZ_CHECK(!locus_eldr_router_mem_size(payload, size) ||
			   locus_eldr_router_build(NULL, 0, payload, size, LOCUS_ELDR_PATH_SCALAR,
						   NULL, NULL) < 0,
			   "router built from a refused table");
		goto out;
	}
	check_view(&v, (uint8_t *)blob + sizeof(struct locus_tbl_hdr), size);
	check_view(&v2, payload, size);
	route_all(payload, size, &v2);
out:
	free(blob);
	free(payload);
	return 0;
}
