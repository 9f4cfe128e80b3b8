/* SPDX-License-Identifier: MIT */
/*
 * The ELDR table as locusctl writes it and as locusd's table channel takes
 * it (not installed, not exported). The format and its validators are
 * locus_eldr.h.
 */
#ifndef LOCUS_ELDR_PRIV_H
#define LOCUS_ELDR_PRIV_H

#include <stddef.h>
#include <stdint.h>

#include "locus_eldr.h"
#include "locus_err.h"

/*
 * locus_eldr_tbl_layout with n_centroids C: 0 is locus_eldr_tbl_layout();
 * else the centroid map section and C centroids (-LOCUS_ERANGE unless
 * K <= C <= LOCUS_ELDR_MAX_CENTROIDS).
 */
int locus_eldr_tbl_layout_mapped(uint32_t n_layers, uint32_t n_experts, uint32_t n_decoders,
				 uint32_t n_centroids, struct locus_eldr_tbl_layout *out);

/*
 * The kind_version a payload is sealed with: 1 when it uses none of version
 * 2's fields (n_centroids, flags, spill), else 2.
 */
uint32_t locus_eldr_tbl_kind_version(const struct locus_eldr_tbl_hdr *h);

/*
 * Start a payload in buf (zeroed, len == layout.len): writes the header's
 * shape fields and tau, and returns writable section pointers through the
 * out parameters. The caller fills them and then validates and seals.
 */
int locus_eldr_tbl_init(void *buf, size_t len, uint16_t n_layers, uint16_t n_experts,
			uint16_t n_decoders, float tau, uint32_t **ids, uint8_t **mask,
			float **idf, float **centroids);

/*
 * The same for n_centroids C (locus_eldr_tbl_layout_mapped): also writes
 * the header's n_centroids and returns the centroid map (*map, NULL when C
 * is 0), which the caller fills.
 */
int locus_eldr_tbl_init_mapped(void *buf, size_t len, uint16_t n_layers, uint16_t n_experts,
			       uint16_t n_decoders, uint16_t n_centroids, float tau,
			       uint32_t **ids, uint16_t **map, uint8_t **mask, float **idf,
			       float **centroids);

/* The table channel that carries ELDR tables (shm/README.md, "Table channels"). */
#define LOCUS_ELDR_TABLE_CHANNEL 0u

/* locus_eldr_blob_check with the table channel's validate signature (arg unused). */
int locus_eldr_table_validate_cb(const void *blob, size_t len, void *arg,
				 struct locus_error *err);

#endif /* LOCUS_ELDR_PRIV_H */
