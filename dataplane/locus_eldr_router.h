/* SPDX-License-Identifier: MIT */
/*
 * ELDR locality-band decode router (dataplane/README.md, "The ELDR
 * router"): built from a validated ELDR table payload (locus_eldr.h, the
 * format both planes share) into caller memory, run by the data plane's
 * routing lcores. Pure C: no EAL, verbs or shm.
 */
#ifndef LOCUS_ELDR_ROUTER_H
#define LOCUS_ELDR_ROUTER_H

#include <stddef.h>
#include <stdint.h>

#include "locus_eldr.h"
#include "locus_err.h"

/*
 * Scoring paths. SCALAR, AVX2 and AVX512 share one arithmetic and give the
 * same bits: centroids quantised once to int16 (their own scale each),
 * exact integer dot products with the u16 counts. A score differs from the
 * exact cosine by at most (sum of the masked counts) x (the centroid's
 * largest |idf x element|) / (2 x 32767) / (the signature's idf norm),
 * plus float rounding (~1e-6). F32 is float arithmetic (float fused
 * multiply-adds in a fixed order, the widest float ISA the CPU runs), the
 * reference of tests and benchmarks.
 *
 * The *_I8 paths share an 8-bit arithmetic and give the same bits as each
 * other: centroids quantised to u8 over their own range, counts rounded to
 * levels of at most 127 (by a power of two when a count exceeds it), idf^2
 * in the norm to 16 bits; exact integer sums; the quotient clamped to
 * [-1, 1] (the rounded norm can put it past 1 when the idf spans a wide range). AVX512_I8 multiplies bytes
 * (vpdpbusd), twice the products per instruction of vpdpwssd; a score is
 * within a stated tolerance of the exact cosine, not a bound: see
 * dataplane/README.md ("The ELDR router") and control/README-eldr.md
 * ("The 8-bit arithmetic").
 */
enum locus_eldr_path {
	LOCUS_ELDR_PATH_AUTO = 0,  /* best 16-bit path the CPU supports */
	LOCUS_ELDR_PATH_SCALAR,
	LOCUS_ELDR_PATH_AVX2,      /* AVX2 + FMA: vpmaddwd */
	LOCUS_ELDR_PATH_AVX512,    /* AVX-512F/BW + VNNI: vpdpwssd */
	LOCUS_ELDR_PATH_F32,       /* the float reference */
	LOCUS_ELDR_PATH_SCALAR_I8, /* the 8-bit arithmetic in plain C */
	LOCUS_ELDR_PATH_AVX2_I8,   /* the 8-bit arithmetic on AVX2's 16-bit kernel */
	LOCUS_ELDR_PATH_AVX512_I8, /* the 8-bit arithmetic: vpdpbusd */
	LOCUS_ELDR_PATH_AUTO_I8,   /* best 8-bit path the CPU supports */
};

/* Signatures one batch call checks at a time (any n is accepted). */
#define LOCUS_ELDR_MAX_BATCH 64

struct locus_eldr_decision {
	uint32_t slot;         /* index in the table's decoder list */
	uint32_t decoder_id;
	float similarity;      /* x . c of the chosen decoder */
	float best;            /* highest similarity among eligible decoders */
	uint32_t n_candidates; /* eligible decoders inside the band */
	uint64_t load;         /* effective load of the chosen decoder before this pick */
};

struct locus_eldr_router; /* one per routing lcore, in caller memory */

/* Name of a path ("scalar", "avx2", "avx512", "f32", "scalar-i8", ..., "auto-i8"). */
const char *locus_eldr_path_name(enum locus_eldr_path p);

/* The path named name (as locus_eldr_path_name() spells it): 0, or -LOCUS_ERANGE. */
int locus_eldr_path_parse(const char *name, enum locus_eldr_path *out);

/* Whether this CPU runs path p (AUTO, SCALAR and F32: always). */
int locus_eldr_path_supported(enum locus_eldr_path p);

/*
 * Bytes of memory a router for this payload needs (64-byte aligned memory),
 * or 0 when the payload's shape is invalid.
 */
size_t locus_eldr_router_mem_size(const void *payload, size_t len);

/*
 * Build a router in mem (64-byte aligned, mem_len >= mem_size) from a
 * payload, which is validated first: centroids are pre-multiplied by idf and
 * packed for the chosen kernel, only masked layers kept; the table's
 * centroid map, load spill and overflow rule are taken as they are. Every
 * decoder starts up with load 0. The router does not point into the
 * payload. -ENOTSUP if path is not supported by this CPU.
 */
int locus_eldr_router_build(void *mem, size_t mem_len, const void *payload, size_t len,
			    enum locus_eldr_path path, struct locus_eldr_router **out,
			    struct locus_error *err);

/*
 * Route one signature payload: score against every centroid (a decoder's
 * score is its centroid's, or the best of its centroids' when the table
 * maps several to it), take the eligible decoders (up, allowed by the
 * signature's mask) whose score is within tau of the best eligible score,
 * choose the lowest effective load (reported load + assignments made here
 * since that report), ties to the higher score, then the lower slot.
 * With the table's LOCUS_ELDR_TBL_F_OVERFLOW_SPREAD the band is measured
 * from the best allowed decoder, up or not, and a request with no decoder
 * of its band up takes the least loaded eligible decoder (n_candidates then
 * counts every eligible decoder). Then the load spill, when set (the
 * table's, or locus_eldr_router_set_spill). Counts the assignment. Returns
 * 0, or -LOCUS_ENODEST (no eligible decoder), or the signature check's code.
 * An all-zero signature (over the masked layers) scores 0 everywhere.
 * No allocation, no syscalls, no locks.
 */
int locus_eldr_route(struct locus_eldr_router *r, const void *sig, size_t sig_len,
		     struct locus_eldr_decision *d);

/*
 * locus_eldr_route() for a signature whose header the caller copied out of
 * shared memory: hdr (private) is checked with locus_eldr_sig_hdr_check()
 * and gives the decode constraint; counts (L x E, the router's L and E) are
 * read once each and may lie in memory a client writes concurrently: any
 * value is a valid count, so a rewrite can change the decision, never make
 * it read out of bounds.
 */
int locus_eldr_route_split(struct locus_eldr_router *r, const struct locus_eldr_sig_hdr *hdr,
			   const uint16_t *counts, size_t sig_len, struct locus_eldr_decision *d);

/*
 * Route n signatures in submission order with the same decisions as n calls
 * of locus_eldr_route(), scoring several signatures per pass over the
 * centroids (4 with AVX-512, 2 with AVX2). rc[i] is route()'s result for
 * signature i, d[i] its decision when rc[i] == 0. Returns the number routed.
 */
uint32_t locus_eldr_route_batch(struct locus_eldr_router *r, const void *const *sigs,
				const size_t *lens, uint32_t n, struct locus_eldr_decision *d,
				int *rc);

/*
 * locus_eldr_route_batch() for signatures whose headers the caller copied
 * (hdrs[i], private) and whose counts[i] may lie in shared memory, as
 * locus_eldr_route_split(): the same decisions as n calls of it, in order.
 */
uint32_t locus_eldr_route_split_batch(struct locus_eldr_router *r,
				      const struct locus_eldr_sig_hdr *hdrs,
				      const uint16_t *const *counts, const size_t *lens,
				      uint32_t n, struct locus_eldr_decision *d, int *rc);

/*
 * Scores only (tests, tools): scores[K], each decoder's (the best of its
 * centroids' with a centroid map). Returns 0 or the check's code.
 */
int locus_eldr_score(struct locus_eldr_router *r, const void *sig, size_t sig_len,
		     float *scores);

/* A load report for slot: replaces the reported load, clears local assignments. */
void locus_eldr_router_set_load(struct locus_eldr_router *r, uint32_t slot, uint64_t load);

/*
 * Override the table's load spill (tests, tools; locusd routes with the
 * table's): a request whose band's least loaded decoder carries more than
 * margin requests beyond the least loaded decoder within spill_tau of the
 * best score goes to the latter (ties as in the band). spill_tau == the
 * table's tau turns it off. -LOCUS_ERANGE unless tau <= spill_tau <= 2, finite.
 */
int locus_eldr_router_set_spill(struct locus_eldr_router *r, float spill_tau, uint64_t margin);

/* Mark slot up (1) or down (0). */
void locus_eldr_router_set_up(struct locus_eldr_router *r, uint32_t slot, int up);

/* Slot of a decoder id, or -LOCUS_ERANGE. */
int locus_eldr_router_slot(const struct locus_eldr_router *r, uint32_t decoder_id);

uint32_t locus_eldr_router_n_decoders(const struct locus_eldr_router *r);
/* The table's L and E: the shape every signature routed by r must have. */
void locus_eldr_router_shape(const struct locus_eldr_router *r, uint16_t *n_layers,
			     uint16_t *n_experts);
enum locus_eldr_path locus_eldr_router_path(const struct locus_eldr_router *r);

#endif /* LOCUS_ELDR_ROUTER_H */
