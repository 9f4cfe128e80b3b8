/* SPDX-License-Identifier: MIT */
/* Helpers the node tests share: clock, bounded waits, clients, counters. */
#ifndef LOCUS_NODE_UTIL_H
#define LOCUS_NODE_UTIL_H

#include <stdint.h>

#include "locus_client.h"
#include "locus_counters.h"
#include "locus_node.h"
#include "locus_shm.h"
#include "locus_table.h"

uint64_t tu_now_ns(void);
void tu_nap(void);

/*
 * Attach to instance (cmocka failure with the reason if refused); a role
 * still held by a client detached just before is waited for (bounded).
 */
struct locus_client *tu_attach(const char *instance, uint32_t roles, uint32_t decoder_id,
			       uint32_t rank);

/* Poll up to tries times (a nap between): 1 with *d, 0 if nothing came. */
int tu_try_desc(struct locus_client *c, struct locus_desc *d, int tries);

/* The next descriptor, or a cmocka failure after about 10 s. */
void tu_wait_desc(struct locus_client *c, struct locus_desc *d);

/* The node's control work on a thread of its own (locusd's main lcore), until *stop. */
struct tu_control {
	struct locus_node *node;
	volatile int *stop;
};

void *tu_control_loop(void *arg); /* arg: struct tu_control */

/* The segment as locusctl and locus-stat see it: tables to push, counters to read. */
struct tu_view {
	struct locus_shm *shm;
	struct locus_table_region *tables;
	struct locus_counters *ctrs;
};

/* Attach to instance's segment (read-only counters). 0, or -1 with the reason printed. */
int tu_view_open(const char *instance, struct tu_view *v);
void tu_view_close(struct tu_view *v);

/*
 * Push blob on channel ch like `locusctl push`, wait for the readers and
 * then for node's engine to run on it. Returns the generation; *refused
 * says whether a reader refused it (the reason is printed).
 */
int64_t tu_push(struct locus_table_region *tables, struct locus_node *node, unsigned ch,
		const void *blob, size_t len, int *refused);

/* Element elem of a counter summed over blocks, as locus-stat reads it. */
uint64_t tu_ctr(struct locus_counters *c, const char *name, uint32_t elem);

#endif /* LOCUS_NODE_UTIL_H */
