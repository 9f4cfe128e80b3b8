/* SPDX-License-Identifier: MIT */
/* The two-node harness of test_twonode*.c (twonode_harness.c). */
#ifndef TWONODE_HARNESS_H
#define TWONODE_HARNESS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "locus_client.h"
#include "locus_counters.h"
#include "locus_engine.h"
#include "locus_node.h"
#include "locus_relay.h"
#include "locus_shm.h"
#include "locus_table.h"

#define L 2
#define E 8
#define GPN 2
#define ROW 128
#define QCAP 4096
#define AREA 128 /* locus_load_row_size(max_decoders 8) = 88, rounded up */

struct qmsg {
	void *buf;
	size_t len;
	uint64_t cookie;
	int status;
};

/* One direction of the fake wire, and the send completions of a node. */
struct queue {
	pthread_mutex_t mu;
	struct qmsg m[QCAP];
	unsigned head, tail;
};

struct fake_node {
	int id;
	struct locus_node *node;
	struct locus_engine_remote rt;
	struct queue rx;        /* messages for this node */
	struct queue done;      /* this node's send completions */
	struct fake_node *peer;
	int peer_up;            /* what peer_up() answers */
	int fail_sends;         /* complete sends with an error */
	int freeze_loads;       /* load row writes do nothing: the row stops moving */
	uint8_t load_area[AREA] __locus_cache_aligned; /* where the peer's row lands */
	int hold, held;         /* the test borrows the engine lcore */
	/* tn_engines > 1: an engine per relay, the transport's sink a mux over them */
	struct locus_relay *relay[2];
	struct locus_relay_mux *mux;
	pthread_t th_ctl, th_eng;
	struct locus_shm *view;
	struct locus_counters *ctrs;
	char inst[16];
};

extern struct fake_node N[2];
/*
 * Engine lcores per node (1 or 2), read by tn_setup. With 2, each engine
 * sends through a relay of its own and the transport hands arrivals and
 * send ends to a mux, as locusd does; all of a node's engines and relays
 * are polled on its one engine thread.
 */
extern int tn_engines;

/* cmocka group setup / teardown: both nodes up with their threads, or gone. */
int tn_setup(void **state);
int tn_teardown(void **state);
/* Counter name (element elem) of node n, summed over its blocks. */
uint64_t tn_ctr(struct fake_node *n, const char *name, uint32_t elem);
/* An ELDR table of 4 decoders for L x E, sealed: *len bytes, free() it. */
void *tn_eldr_table(size_t *len);
/* Push a sealed table to both nodes and wait until both adopted it. */
void tn_push_both(unsigned ch, const void *blob, size_t len);
struct locus_client *tn_attach(struct fake_node *n, uint32_t roles, uint32_t dec, uint32_t rank);
/* Wait until rank client c's engine counts n_lost ranks lost (locus_client_ranks). */
void tn_wait_ranks(struct locus_client *c, uint32_t n_lost);
/* A signature of w0 tokens on expert 0 and w7 on 7 at stage offset off: its length. */
size_t tn_put_signature(struct locus_client *c, uint64_t off, int w0, int w7);

#endif /* TWONODE_HARNESS_H */
