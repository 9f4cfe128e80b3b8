/* SPDX-License-Identifier: MIT */
/* Helpers the node tests share: clock, bounded waits, clients, counters. */
#ifndef LOCUS_NODE_UTIL_H
#define LOCUS_NODE_UTIL_H

#include <pthread.h>
#include <stdint.h>

#include "locus_client.h"
#include "locus_counters.h"
#include "locus_node.h"
#include "locus_push.h"
#include "locus_shm.h"

uint64_t tu_now_ns(void);
void tu_nap(void);

/*
 * Attach to instance (cmocka failure with the reason if refused); a role or
 * a slot still held by a client detached just before is waited for (bounded).
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

/* The segment as locus-stat sees it: counters to read. */
struct tu_view {
	struct locus_shm *shm;
	struct locus_counters *ctrs;
};

/* Attach to instance's segment (read-only counters). 0, or -1 with the reason printed. */
int tu_view_open(const char *instance, struct tu_view *v);
void tu_view_close(struct tu_view *v);

/*
 * A whole node on threads: config text conf (instance included), running,
 * its control loop (held while *hold is set: nothing is answered) and an
 * engine loop, and the read-only view. 0, or -1 with the reason printed.
 */
struct tu_node {
	struct locus_node *node;
	struct tu_view view;
	pthread_t th_ctl, th_eng;
	int stop;
	int hold;            /* 1: the control loop passes without doing anything */
	int held;            /* the control loop saw hold (tu_node_hold waits for it) */
	int eng_hold, eng_held; /* the same for the engine loop */
};

/* Hold (1) or release (0) the control loop; returns once a hold took effect. */
void tu_node_hold(struct tu_node *t, int on);
/* The same for the engine loop: while held, no client ring is read. */
void tu_engine_hold(struct tu_node *t, int on);

int tu_node_start(struct tu_node *t, const char *conf);
void tu_node_stop(struct tu_node *t);

/*
 * Push blob on channel ch like `locusctl push`, through instance's control
 * socket (its node's control loop must run; a refusal of the request is a
 * cmocka failure), then wait for node's engine (if not NULL) to run on it.
 * Returns the generation; *refused says whether a reader refused it (the
 * reason is printed).
 */
int64_t tu_push(const char *instance, struct locus_node *node, unsigned ch, const void *blob,
		size_t len, int *refused);

/* Element elem of a counter summed over blocks, as locus-stat reads it. */
uint64_t tu_ctr(struct locus_counters *c, const char *name, uint32_t elem);

#endif /* LOCUS_NODE_UTIL_H */
