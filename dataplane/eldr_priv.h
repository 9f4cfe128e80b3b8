/* SPDX-License-Identifier: MIT */
/*
 * Router internals shared by the selection code and the scoring kernels.
 *
 * Two arithmetics. The integer one (the routing paths scalar, avx2,
 * avx512): each centroid (idf folded in) is quantised once, at build, to
 * int16 with its own scale (|q| <= ELDR_QMAX at its largest element), and
 * a signature's dot product with it is the exact integer sum of count x q,
 * which every kernel computes exactly (int32 lanes flushed into int64
 * before they can overflow, see eldr_qchunk()): exact integers do not
 * depend on the order of the sum, so every path gives the same bits.
 *
 * The float one (LOCUS_ELDR_PATH_F32, the reference of tests and
 * benchmarks): features are processed in
 * blocks of 16 lanes; lane i of a block accumulates with a fused
 * multiply-add into accumulator lane i; the 16 lanes are then summed in
 * the fixed tree of eldr_reduce16() (i += i+8, i += i+4, i += i+2,
 * 0 += 1). The scalar kernel does exactly that with fmaf(); AVX2 holds the
 * 16 lanes in two registers, AVX-512 in one. The integer paths' norm (it
 * needs idf per feature) is float too, in 4 chains (eldr_qnorm_scalar()).
 *
 * The 8-bit arithmetic (the *_I8 paths, eldr_q8kernels.c): each centroid
 * (idf folded in) quantised to u8 over its own range, w ~ off + scale x p
 * with p in 0..ELDR_Q8MAX (off = its smallest element, or 0 if none is
 * negative: every fitted centroid); a signature's counts rounded to levels
 * a = round(count / 2^s), the smallest s that keeps every level <=
 * ELDR_A8MAX; the dot product sum a x p, the levels' sum and the norm^2
 * sum a^2 x W (W: idf^2 scaled to u16 once, at build) are exact integers,
 * then one double expression: every 8-bit path gives the same bits.
 * AVX-512 multiplies the bytes themselves (vpdpbusd: u8 centroid x s8
 * level, twice the products per instruction of vpdpwssd); scalar and AVX2
 * run the 16-bit kernels on the same numbers.
 */
#ifndef LOCUS_ELDR_PRIV_H
#define LOCUS_ELDR_PRIV_H

#include <stdint.h>

#include "locus_common.h"
#include "locus_eldr_router.h"

#define ELDR_LANES 16u /* canonical accumulator width */
#define ELDR_GROUP 4u  /* centroids scored together, packed side by side */
#define ELDR_BATCH 4u  /* widest batched kernel (signatures per centroid pass) */
#define ELDR_QLANES 32u  /* u16 features per block of the integer kernels */
#define ELDR_QMAX 32767  /* largest |q| of a quantised centroid element */
#define ELDR_NCHAINS 4u  /* the integer paths' norm: independent accumulator chains */
#define ELDR_Q8LANES 64u /* u8 features per block of the 8-bit AVX-512 kernel */
#define ELDR_Q8MAX 255   /* largest p of an 8-bit centroid element (u8) */
#define ELDR_A8MAX 127   /* largest signature level (s8, vpdpbusd's signed operand) */
#define ELDR_W8MAX 65535 /* norm weight of the largest idf^2 */

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
/*
 * The masked layers of counts (read once each) into private xq; returns
 * their norm^2 (float arithmetic), *maxc = largest count.
 */
typedef float (*eldr_qload_fn)(const struct locus_eldr_router *r, const uint16_t *counts,
			       uint16_t *xq, uint32_t *maxc);
/*
 * Software prefetch of the next batch's counts into L2 while the kernels
 * compute: the lines off[0..n_lines) of each of the n_sigs counts at base,
 * per_step of them at each block step, from the cursor (sig, line) that
 * every kernel of the batch moves on.
 */
struct eldr_prefetch {
	const uint8_t *base[ELDR_BATCH];
	const uint32_t *off;
	uint32_t n_sigs, n_lines, per_step, sig, line;
};

/*
 * dots[s][k_pad] = exact sum of xq[s] x q_c for n (1..batch_width)
 * signatures whose counts are all <= maxc; pf (NULL: none) is stepped.
 */
typedef void (*eldr_qdots_fn)(const struct locus_eldr_router *r, const uint16_t *const *xq,
			      uint32_t n, uint32_t maxc, int64_t *const *dots,
			      struct eldr_prefetch *pf);
/*
 * 8-bit arithmetic: the levels of the masked layers of counts (into xq as
 * u16 for the 16-bit kernels, or into a8 as bytes for AVX-512); returns
 * norm^2 = sum a^2 x W and *asum = sum a, exact.
 */
typedef uint64_t (*eldr_q8load_fn)(const struct locus_eldr_router *r, const uint16_t *counts,
				   uint16_t *xq, uint8_t *a8, uint64_t *asum,
				   struct eldr_prefetch *pf);
/* dots[s][k_pad] = exact sum of a8[s] x p_c for n (1..ELDR_BATCH) signatures */
typedef void (*eldr_q8dots_fn)(const struct locus_eldr_router *r, const uint8_t *const *a8,
			       uint32_t n, int64_t *const *dots, struct eldr_prefetch *pf);

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
	int f32;                 /* the float arithmetic (LOCUS_ELDR_PATH_F32) */
	uint32_t n_qblocks;      /* ceil(n_feat / ELDR_QLANES) */
	eldr_qload_fn qload;
	eldr_qdots_fn qdots;
	int i8;                  /* the 8-bit arithmetic (the *_I8 paths) */
	uint32_t n_q8blocks;     /* ceil(n_feat / ELDR_Q8LANES) */
	eldr_q8load_fn q8load;
	eldr_q8dots_fn q8dots;   /* NULL: the 16-bit qdots on the levels in xq */
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
	/*
	 * The integer path's centroids instead of cw (same memory):
	 * q[((g * n_qblocks + b) * ELDR_GROUP + c) * 32 + lane], and
	 * qscale[c] = centroid c's element / q (its largest |element| / QMAX).
	 */
	const int16_t *q;
	const double *qscale;    /* [k_pad] */
	/*
	 * The 8-bit paths: u8 centroids (cw's memory again) in AVX-512's
	 * layout q8[((g * n_q8blocks + b) * ELDR_GROUP + c) * 64 + lane], or
	 * in q's layout as int16 for the 16-bit kernels; qscale[c] their
	 * scale, qoff[c] their offset; w8[n_q8blocks * 64] the norm's weights
	 * (0 in padding), one unit of which is wscale of idf^2.
	 */
	const uint8_t *q8;
	const double *qoff;
	const uint16_t *w8;
	double wscale;
	uint8_t *a8;             /* scratch [ELDR_BATCH][n_q8blocks * 64]: levels as bytes */
	float *x;                /* scratch [ELDR_BATCH][n_blocks * 16], padding stays 0 */
	uint16_t *xq;            /* integer path's scratch (x's memory), [ELDR_BATCH][n_qblocks * 32] */
	int64_t *qdot;           /* scratch [ELDR_BATCH][k_pad] */
	const uint32_t *line_off; /* [n_lines]: 64-byte lines of the masked counts */
	uint32_t n_lines;
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

/*
 * 32-feature blocks a kernel may sum in int32 lanes, each lane taking
 * per_block products per block, before flushing them into int64: every
 * product is at most maxc x QMAX in magnitude. 0: not even one block (the
 * kernel falls back to eldr_qdots_scalar, exact in int64 throughout).
 */
static inline uint32_t eldr_qchunk(uint32_t maxc, uint32_t per_block)
{
	uint64_t prod = (uint64_t)maxc * ELDR_QMAX * per_block;

	return prod ? (uint32_t)LOCUS_MIN((uint64_t)INT32_MAX / prod, (uint64_t)UINT32_MAX)
		    : UINT32_MAX;
}

float eldr_qnorm_scalar(const struct locus_eldr_router *r, const uint16_t *xq, uint32_t *maxc);
float eldr_qnorm_avx2(const struct locus_eldr_router *r, const uint16_t *xq, uint32_t *maxc);
float eldr_qnorm_avx512(const struct locus_eldr_router *r, const uint16_t *xq, uint32_t *maxc);
float eldr_qload_scalar(const struct locus_eldr_router *r, const uint16_t *counts, uint16_t *xq,
			uint32_t *maxc);
float eldr_qload_avx2(const struct locus_eldr_router *r, const uint16_t *counts, uint16_t *xq,
		      uint32_t *maxc);
float eldr_qload_avx512(const struct locus_eldr_router *r, const uint16_t *counts, uint16_t *xq,
			uint32_t *maxc);
void eldr_qdots_scalar(const struct locus_eldr_router *r, const uint16_t *const *xq, uint32_t n,
		       uint32_t maxc, int64_t *const *dots, struct eldr_prefetch *pf);
void eldr_qdots_avx2(const struct locus_eldr_router *r, const uint16_t *const *xq, uint32_t n,
		     uint32_t maxc, int64_t *const *dots, struct eldr_prefetch *pf);
void eldr_qdots_avx512(const struct locus_eldr_router *r, const uint16_t *const *xq, uint32_t n,
		       uint32_t maxc, int64_t *const *dots, struct eldr_prefetch *pf);

uint32_t eldr_a8shift(uint32_t maxc);
uint64_t eldr_q8load_scalar(const struct locus_eldr_router *r, const uint16_t *counts,
			    uint16_t *xq, uint8_t *a8, uint64_t *asum, struct eldr_prefetch *pf);
uint64_t eldr_q8load_avx512(const struct locus_eldr_router *r, const uint16_t *counts,
			    uint16_t *xq, uint8_t *a8, uint64_t *asum, struct eldr_prefetch *pf);
void eldr_q8dots_avx512(const struct locus_eldr_router *r, const uint8_t *const *a8, uint32_t n,
			int64_t *const *dots, struct eldr_prefetch *pf);

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
