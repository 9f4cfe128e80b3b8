/* SPDX-License-Identifier: MIT */
/* The seed generator's output and field writers, shared by its files (gen_seeds*.c). */
#ifndef LOCUS_GEN_SEEDS_H
#define LOCUS_GEN_SEEDS_H

#include <stddef.h>
#include <stdint.h>

/* Write seed name of target (out_dir/target/name); exits on failure. */
void put(const char *target, const char *name, const void *p, size_t n);

/* A growable byte string for inputs made of fields. */
struct bs {
	uint8_t b[65536];
	size_t n;
};

void b8(struct bs *s, uint32_t v);
void b16(struct bs *s, uint32_t v);
void b32(struct bs *s, uint32_t v);
void bmem(struct bs *s, const void *p, size_t n);

/* gen_seeds_sys.c: table channels, segment, a node's sockets, the verbs handshake */
void table_region(void);
void segment(void);
void node_sockets(void);
void verbs_proto(void);

/* gen_seeds_sets.c: GRACE placement sets (graceset, tblfile) */
void grace_sets(void);

#endif /* LOCUS_GEN_SEEDS_H */
