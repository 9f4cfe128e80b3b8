/* SPDX-License-Identifier: MIT */
/*
 * ELDR formats: expert signatures and the ELDR table payload, with their
 * validators (shm/README.md, "ELDR signature" and "ELDR table"). The
 * contract between the control plane, which fits and seals tables, and the
 * data plane, whose router (dataplane/locus_eldr_router.h) is built from
 * them. Pure C: no EAL, verbs or shm.
 *
 * Signature (payload of a LOCUS_MSG_SIGNATURE message, and of a prefill
 * client's submit descriptor):
 *   struct locus_eldr_sig_hdr (32 bytes) | uint16_t counts[n_layers][n_experts]
 * counts[l][e] = prompt tokens whose top-k at MoE layer l includes expert e,
 * saturating at 65535 (an id repeated in one token's top-k counts once).
 *
 * Table (kind LOCUS_TBL_ELDR, kind_version 1 or 2), sealed with
 * locus_tblfile.h; the payload is
 *   struct locus_eldr_tbl_hdr (64 bytes)
 *   uint32_t decoder_ids[K]            at layout.off_ids
 *   uint16_t centroid_slot[C]          at layout.off_map (only when n_centroids = C > 0)
 *   uint8_t  layer_mask[L]  (0 or 1)   at layout.off_mask
 *   float    idf[L][E]                 at layout.off_idf
 *   float    centroids[C or K][L][E]   at layout.off_centroids
 * each section starting on a 64-byte boundary, zero padding between them.
 * A centroid is unit-norm over the masked layers and zero elsewhere; a
 * signature x = normalize(counts * idf over masked layers); s_c = x . c_c.
 * With n_centroids = 0 (version 1's layout) centroid d is decoder slot d's;
 * otherwise centroid c belongs to decoder slot centroid_slot[c], every slot
 * owns at least one, and a decoder's score is the best of its centroids'.
 * Version 2 adds n_centroids, the centroid map, flags and the load spill
 * (spill_tau, spill_margin); a version 1 table has them all zero, and a
 * table that uses none of them is written as version 1, which builds that
 * only read version 1 accept.
 */
#ifndef LOCUS_ELDR_H
#define LOCUS_ELDR_H

#include <stddef.h>
#include <stdint.h>

#include "locus_common.h"
#include "locus_err.h"

#define LOCUS_ELDR_SIG_MAGIC    0x47495345u /* "ESIG" */
#define LOCUS_ELDR_SIG_VERSION  1u
#define LOCUS_ELDR_TBL_VERSION  2u      /* the newest table layout this build reads */
#define LOCUS_ELDR_TBL_VERSION_MIN 1u   /* the oldest */
#define LOCUS_ELDR_MAX_LAYERS   1024u
#define LOCUS_ELDR_MAX_EXPERTS  4096u
#define LOCUS_ELDR_MAX_DECODERS 1024u
#define LOCUS_ELDR_MAX_CENTROIDS 4096u  /* n_centroids of a version 2 table */
#define LOCUS_ELDR_MAX_K        64u     /* top-k per token per layer */
#define LOCUS_ELDR_TAU_DEFAULT  0.1f
#define LOCUS_ELDR_NORM_TOL     1e-3f   /* |centroid norm - 1| allowed */
#define LOCUS_ELDR_IDF_MAX      1e6f    /* keeps (count * idf)^2 sums finite in f32 */

struct locus_eldr_sig_hdr {
	uint32_t magic;            /* LOCUS_ELDR_SIG_MAGIC */
	uint16_t version;          /* LOCUS_ELDR_SIG_VERSION */
	uint16_t flags;            /* 0 */
	uint16_t n_layers;         /* must equal the active table's L */
	uint16_t n_experts;        /* must equal the active table's E */
	uint32_t prompt_tokens;    /* informational (counts saturate) */
	/*
	 * Decode constraint: bit i set = the decoder whose id is i may take
	 * the request; 0 = any decoder. Decoders with ids >= 64 are only
	 * reachable with a mask of 0.
	 */
	uint64_t allowed_decoders;
	uint8_t  reserved[8];      /* 0 */
};

LOCUS_STATIC_ASSERT(sizeof(struct locus_eldr_sig_hdr) == 32, "signature header is 32 bytes");

/* Bytes of a signature payload for L layers and E experts (header included). */
static inline size_t locus_eldr_sig_len(uint32_t n_layers, uint32_t n_experts)
{
	return sizeof(struct locus_eldr_sig_hdr) + (size_t)n_layers * n_experts * 2;
}

static inline const uint16_t *locus_eldr_sig_counts(const void *payload)
{
	return (const uint16_t *)((const uint8_t *)payload + sizeof(struct locus_eldr_sig_hdr));
}

/*
 * Check a signature payload of len bytes against the table's L and E: magic,
 * version, flags and reserved zero, L/E equal, exact length. err may be NULL
 * (the hot path passes NULL and gets only the code).
 */
int locus_eldr_sig_check(const void *payload, size_t len, uint16_t n_layers,
			 uint16_t n_experts, struct locus_error *err);

/*
 * The same check on a header apart from its counts: h is the caller's
 * private copy of a signature's header, len the whole signature's bytes.
 * A signature in memory another process may write is checked this way: the
 * counts carry no structure (any value is valid), the header does, so the
 * header that was checked is the one used and forwarded.
 */
int locus_eldr_sig_hdr_check(const struct locus_eldr_sig_hdr *h, size_t len, uint16_t n_layers,
			     uint16_t n_experts, struct locus_error *err);

/*
 * Add n_tokens tokens of routed experts (ids[t][n_layers][k]) to counts
 * [n_layers][n_experts], saturating at 65535; an id repeated within one
 * token's top-k counts once. Ids >= n_experts: -LOCUS_ERANGE, counts are
 * then partially updated. Returns 0.
 */
int locus_eldr_counts_add(uint16_t *counts, uint16_t n_layers, uint16_t n_experts,
			  uint16_t k, const uint16_t *ids, uint32_t n_tokens,
			  struct locus_error *err);

/*
 * Write a whole signature payload into buf (cap bytes): header with the
 * given decode constraint, counts from the routed experts of the prompt.
 * Returns the payload length or a negative code.
 */
long locus_eldr_sig_build(void *buf, size_t cap, uint16_t n_layers, uint16_t n_experts,
			  uint16_t k, const uint16_t *ids, uint32_t n_tokens,
			  uint64_t allowed_decoders, struct locus_error *err);

/* ---- table payload ---- */

/*
 * Table flag (version 2): the band is measured from the best decoder the
 * signature allows whether it is up or not, and a request none of whose
 * band is up (its own decoders are down, or full in eldr_quality's rounds)
 * goes to the least loaded decoder up instead of the band around the best
 * decoder still up: a decoder's overflow is spread by load, not piled onto
 * its nearest neighbour.
 */
#define LOCUS_ELDR_TBL_F_OVERFLOW_SPREAD 0x1u
#define LOCUS_ELDR_TBL_FLAGS_KNOWN       0x1u

struct locus_eldr_tbl_hdr {
	uint16_t n_layers;         /* L */
	uint16_t n_experts;        /* E */
	uint16_t n_decoders;       /* K >= 1 */
	uint16_t n_masked;         /* layers set in layer_mask, >= 1 */
	float    tau;              /* locality band, finite, [0, 2] */
	uint32_t n_calib;          /* calibration requests fitted (information) */
	uint64_t seed;             /* k-means++ seed (information) */
	float    mask_score;       /* calibration score of the mask (information) */
	float    full_score;       /* same score with every layer (information) */
	uint32_t iterations;       /* k-means iterations run (information) */
	uint32_t flags;            /* LOCUS_ELDR_TBL_F_* (version 2), else 0 */
	uint16_t n_centroids;      /* 0: one centroid per decoder; else K..MAX_CENTROIDS (version 2) */
	uint16_t reserved0;        /* 0 */
	/*
	 * Load spill (version 2; locus_eldr_router_set_spill): 0 = off, else in
	 * (tau, 2]: the band's pick gives way to the least loaded decoder within
	 * spill_tau of the best when it carries more than spill_margin requests
	 * more. spill_margin is 0 when the spill is off.
	 */
	float    spill_tau;
	uint32_t spill_margin;
	uint8_t  reserved[12];     /* 0 */
};

LOCUS_STATIC_ASSERT(sizeof(struct locus_eldr_tbl_hdr) == 64, "ELDR table header is 64 bytes");

struct locus_eldr_tbl_layout {
	size_t off_ids, off_map, off_mask, off_idf, off_centroids;
	size_t len; /* exact payload length */
};

/* Offsets for L, E, K (one centroid per decoder); -LOCUS_ERANGE if any is 0 or above its maximum. */
int locus_eldr_tbl_layout(uint32_t n_layers, uint32_t n_experts, uint32_t n_decoders,
			  struct locus_eldr_tbl_layout *out);

/* Pointers into a validated payload. */
struct locus_eldr_tbl_view {
	const struct locus_eldr_tbl_hdr *hdr;
	const uint32_t *decoder_ids;  /* [K] */
	const uint16_t *centroid_slot; /* [n_centroids] decoder slot of each centroid; NULL: centroid d is slot d's */
	uint32_t n_centroids;         /* centroids in the table: hdr->n_centroids, or K when that is 0 */
	const uint8_t *layer_mask;    /* [L] */
	const float *idf;             /* [L][E] */
	const float *centroids;       /* [n_centroids][L][E] */
};

/*
 * Validate an ELDR payload (the part after the sealed-blob header): sizes,
 * exact length, unknown flags and reserved bytes zero, tau, the load spill
 * (off: all bits 0 and margin 0; else within (tau, 2]), mask bytes 0/1 and its count, at
 * least one masked layer, idf in (0, LOCUS_ELDR_IDF_MAX], centroids finite, zero outside
 * the mask and of norm 1 +- LOCUS_ELDR_NORM_TOL inside it, decoder ids
 * unique, every centroid mapped to a slot < K and every slot owning one.
 * Used by locusctl show, the table channel and the router build.
 * view may be NULL. The payload must be 4-byte aligned.
 */
int locus_eldr_tbl_validate(const void *payload, size_t len, struct locus_eldr_tbl_view *view,
			    struct locus_error *err);

/*
 * Check a whole sealed blob (locus_tblfile.h header + payload): locus_tbl_check
 * with kind LOCUS_TBL_ELDR, kind_version LOCUS_ELDR_TBL_VERSION_MIN ..
 * LOCUS_ELDR_TBL_VERSION (a version 1 table carrying version 2 fields is
 * refused), then locus_eldr_tbl_validate. The signature matches the table
 * channel's validate callback (arg unused), so locusd passes it as is.
 */
int locus_eldr_blob_check(const void *blob, size_t len, struct locus_eldr_tbl_view *view,
			  struct locus_error *err);

#endif /* LOCUS_ELDR_H */
