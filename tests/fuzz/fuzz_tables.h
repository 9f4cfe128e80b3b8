/* SPDX-License-Identifier: MIT */
/*
 * Valid inputs built from their formats' own headers, for the fuzz targets
 * that need a valid table beside the bytes they fuzz, the engine harness,
 * and the seed generator. Every buffer is malloc'd; the caller frees it.
 */
#ifndef LOCUS_FUZZ_TABLES_H
#define LOCUS_FUZZ_TABLES_H

#include <stddef.h>
#include <stdint.h>

#include "locus_grace.h"

/*
 * ELDR payload over L x E with K decoders (ids id0, id0 + 1, ...): every
 * layer masked, idf 1, decoder k's centroid on expert (k * 3) % E of every
 * layer (and the next expert at half weight), unit norm.
 */
void *ft_eldr_payload(uint16_t L, uint16_t E, uint16_t K, uint32_t id0, float tau, size_t *len);

/*
 * The same as a version 2 table: C >= K centroids, centroid c on expert
 * (c * 3) % E (and the next at half weight) and owned by slot c % K; the
 * given load spill (0: none) and flags.
 */
void *ft_eldr_payload_mapped(uint16_t L, uint16_t E, uint16_t K, uint16_t C, uint32_t id0,
			     float tau, float spill_tau, uint32_t spill_margin, uint32_t flags,
			     size_t *len);

/*
 * GRACE payload for L x E on nodes x gpn ranks with R replica slots: expert
 * e's primary on rank e % N, experts with e % 3 == 0 replicated on the next
 * rank when R > 0; loads 1 + e % 5, W' from the split model.
 */
void *ft_grace_payload(uint32_t L, uint32_t E, uint32_t nodes, uint32_t gpn, uint32_t R,
		       size_t *len);

/* header + payload sealed as kind / version: *len bytes. */
void *ft_seal(unsigned kind, uint32_t version, const void *payload, size_t plen, size_t *len);

/* Sealed tables as locusctl pushes them (the oldest kind_version that holds them). */
void *ft_eldr_blob(uint16_t L, uint16_t E, uint16_t K, uint32_t id0, size_t *len);
void *ft_grace_blob(uint32_t L, uint32_t E, uint32_t nodes, uint32_t gpn, uint32_t R,
		    size_t *len);

#endif /* LOCUS_FUZZ_TABLES_H */
