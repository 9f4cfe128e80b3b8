/* SPDX-License-Identifier: MIT */
/* The tables test_node pushes: built here, independently of the fitters. */
#ifndef NODE_TABLES_H
#define NODE_TABLES_H

#include <stddef.h>
#include <stdint.h>

#define L 2     /* MoE layers of the test tables */
#define E 8     /* experts per layer */
#define GPN 4   /* GPUs (ranks) of the one node */

/*
 * ELDR table over L x E: decoder 0's centroid leans on expert 0, decoder 1's
 * on expert 7; both share a little expert 3 so a mixed signature falls in
 * both bands. nan_centroid makes a table that seals fine and fails
 * validation. A sealed blob (malloc'd) of *len bytes.
 */
void *eldr_table(float tau, int nan_centroid, size_t *len);

/*
 * Version 2 (locus_eldr.h): decoder 0 owns centroids on expert 0 (with a
 * little of 3) and on expert 5, decoder 1 one on expert 7 (with a little
 * of 3); overflow spread, load spill 0.3 with margin 1.
 */
void *eldr_table_v2(float tau, size_t *len);

/* GRACE table, 1 node x 4 GPUs: expert e on rank primary_of(e); expert 5 also on rank 0. */
uint16_t primary_of(int e);
void *grace_table(size_t *len);

#endif /* NODE_TABLES_H */
