/* SPDX-License-Identifier: MIT */
/* Helpers the node tests share: clock, bounded waits, clients, counters. */
#ifndef LOCUS_NODE_UTIL_H
#define LOCUS_NODE_UTIL_H

#include <stdint.h>

#include "locus_client.h"
#include "locus_counters.h"

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

/* Element elem of a counter summed over blocks, as locus-stat reads it. */
uint64_t tu_ctr(struct locus_counters *c, const char *name, uint32_t elem);

#endif /* LOCUS_NODE_UTIL_H */
