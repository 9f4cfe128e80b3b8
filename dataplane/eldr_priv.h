/* SPDX-License-Identifier: MIT */
/*
 * Router internals shared by the selection code and the scoring kernels.
 *
 * Every kernel computes bit-identical results by following one canonical
 * arithmetic: features are processed in blocks of 16 lanes; lane i of a
 * block accumulates with a fused multiply-add into accumulator lane i; the
 * 16 lanes are then summed in the fixed tree of eldr_reduce16() (i += i+8,
 * i += i+4, i += i+2, 0 += 1). The scalar kernel does exactly that with
 * fmaf(); AVX2 holds the 16 lanes in two registers, AVX-512 in one.
 */
#ifndef LOCUS_ELDR_PRIV_H
#define LOCUS_ELDR_PRIV_H

#include <stdint.h>

#include "locus_common.h"
#include "locus_eldr_router.h"

#define ELDR_LANES 16u /* canonical accumulator width */
#define ELDR_GROUP 4u  /* centroids scored together, packed side by side */
#define ELDR_BATCH 4u  /* widest batched kernel (signatures per centroid pass) */

struct locus_eldr_router;

/* masked counts of a signature into features x (exact u16 -> f32) */
typedef void (*eldr_load_fn)(const struct locus_eldr_router *r, const uint16_t *counts,
			     float *x);
/* load, then return the norm as eldr_norm_fn does (one pass when it can) */
typedef float (*eldr_loadnorm_fn)(const struct locus_eldr_router *r, const uint16_t *counts,
				  float *x);
/* sum (x * idf)^2 in the canonical order */
typedef float (*eldr_norm_fn)(const struct locus_eldr_router *r, const float *x);
/* dots[k_pad] = x . cw_d */
typedef void (*eldr_dots_fn)(const struct locus_eldr_router *r, const float *x, float *dots);
/* the same for batch_width signatures at once */
typedef void (*eldr_dots_batch_fn)(const struct locus_eldr_router *r, const float *const *x,
				   float **dots);

struct eldr_slot {
	uint64_t reported;   /* last load report */
	uint64_t local;      /* assignments made here since that report */
	uint64_t bit;        /* 1 << decoder_id when id < 64, else 0 */
	uint32_t decoder_id;
	uint32_t up;
};

struct locus_eldr_router {
	uint32_t n_layers, n_experts, n_decoders, n_masked;
	uint32_t n_cent;     /* centroids scored: the table's n_centroids, or n_decoders */
	uint32_t k_pad;      /* n_cent rounded up to ELDR_GROUP */
	uint32_t n_feat;     /* n_masked * n_experts */
	uint32_t n_blocks;   /* ceil(n_feat / ELDR_LANES) */
	float tau;
	float spill_tau;         /* the wider band of the load spill (>= tau; == tau: off) */
	uint64_t spill_margin;   /* load difference beyond which the spill takes over */
	int spread;              /* LOCUS_ELDR_TBL_F_OVERFLOW_SPREAD */
	enum locus_eldr_path path;
	eldr_loadnorm_fn loadnorm;
	eldr_dots_fn dots_one;
	eldr_dots_batch_fn dots_batch;
	uint32_t batch_width;    /* signatures dots_batch takes: 1 (none), 2 or 4 */
	const uint16_t *layers;  /* [n_masked] masked layer numbers */
	const float *idf;        /* [n_blocks * 16], 0 in padding */
	/*
	 * idf * centroid, masked layers only, packed for streaming:
	 * cw[((g * n_blocks + b) * ELDR_GROUP + c) * 16 + lane] is centroid
	 * g * 4 + c, feature b * 16 + lane (0 for padding and pad centroids).
	 * The kernels score centroids (k_pad of them), never decoders.
	 */
	const float *cw;
	float *x;                /* scratch [ELDR_BATCH][n_blocks * 16], padding stays 0 */
	float *dots;             /* scratch [ELDR_BATCH][k_pad]: similarity per centroid */
	/*
	 * Centroid c's decoder slot (NULL: centroid c is slot c's, and the
	 * centroid similarities are the decoders'), and then the decoders'
	 * similarities, scratch [ELDR_BATCH][n_decoders].
	 */
	const uint16_t *cent_slot;
	float *sv;
	struct eldr_slot *slots; /* [n_decoders] */
} __locus_cache_aligned;

static inline float eldr_reduce16(float a[ELDR_LANES])
{
	for (unsigned i = 0; i < 8; i++)
		a[i] += a[i + 8];
	for (unsigned i = 0; i < 4; i++)
		a[i] += a[i + 4];
	for (unsigned i = 0; i < 2; i++)
		a[i] += a[i + 2];
	return a[0] + a[1];
}

void eldr_load_scalar(const struct locus_eldr_router *r, const uint16_t *counts, float *x);
void eldr_load_avx2(const struct locus_eldr_router *r, const uint16_t *counts, float *x);
void eldr_load_avx512(const struct locus_eldr_router *r, const uint16_t *counts, float *x);
float eldr_loadnorm_scalar(const struct locus_eldr_router *r, const uint16_t *counts, float *x);
float eldr_loadnorm_avx2(const struct locus_eldr_router *r, const uint16_t *counts, float *x);
float eldr_loadnorm_avx512(const struct locus_eldr_router *r, const uint16_t *counts, float *x);
float eldr_norm_scalar(const struct locus_eldr_router *r, const float *x);
float eldr_norm_avx2(const struct locus_eldr_router *r, const float *x);
float eldr_norm_avx512(const struct locus_eldr_router *r, const float *x);
void eldr_dots_scalar(const struct locus_eldr_router *r, const float *x, float *dots);
void eldr_dots_avx2(const struct locus_eldr_router *r, const float *x, float *dots);
void eldr_dots_avx512(const struct locus_eldr_router *r, const float *x, float *dots);
void eldr_dots_avx2_x2(const struct locus_eldr_router *r, const float *const x[2],
		       float *dots[2]);
void eldr_dots_avx512_x4(const struct locus_eldr_router *r, const float *const x[4],
			 float *dots[4]);

#endif /* LOCUS_ELDR_PRIV_H */
