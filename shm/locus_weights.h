/* SPDX-License-Identifier: MIT */
/*
 * Expert weights moved between ranks through locusd, for a placement change
 * (liblocus). Every rank of a group runs a mover beside its client: when a
 * new generation is staged, each rank sends the weights of every expert it
 * is the chosen holder of (locus_placement_fetches: a rank of the gaining
 * rank's node first) and takes those it gains, then acknowledges the
 * generation. Weights travel as COMBINEs tagged LOCUS_WEIGHTS_TAG, on the
 * paths and rails rows take; from a registered region (LOCUS_DESC_F_REGION,
 * GPU memory as a dma-buf) they leave the node without a copy.
 *
 * Wire form, shared with the Python Buffer: batch id = LOCUS_WEIGHTS_TAG |
 * gen tag << 48 | piece << 32 | layer << 16 | expert; row j of an expert is
 * its bytes [j * row, (j + 1) * row), row = min(expert_bytes,
 * LOCUS_WEIGHTS_ROW); ref.token = j, ref.kmask = the expert's row count.
 */
#ifndef LOCUS_WEIGHTS_H
#define LOCUS_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "locus_client.h"
#include "locus_err.h"

#define LOCUS_WEIGHTS_TAG (1ull << 62) /* a COMBINE carrying weights, not results */
#define LOCUS_WEIGHTS_ROW 4096u        /* bytes per row of weights */
#define LOCUS_WEIGHTS_GEN_BITS 14u     /* generation bits in the batch id (0: any) */

/* Whether a RESULTS_IN / COMBINE with this batch id carries weights. */
static inline int locus_weights_is(uint64_t batch_id)
{
	return (batch_id >> 62) == 1;
}

/* Bytes readable at an expert's source offset: whole rows. */
static inline uint64_t locus_weights_span(uint64_t expert_bytes)
{
	uint64_t row = expert_bytes < LOCUS_WEIGHTS_ROW ? expert_bytes : LOCUS_WEIGHTS_ROW;

	return row ? (expert_bytes + row - 1) / row * row : 0;
}

struct locus_weights_params {
	uint32_t rank;           /* this client's rank */
	uint64_t expert_bytes;   /* one expert's weights, the same for every expert */
	uint32_t n_layers;       /* the model's MoE layers and experts per layer */
	uint32_t n_experts;
	uint32_t gpus_per_node;  /* ranks per node (0: from a GRACE table's dims) */
	uint32_t region;         /* registered region holding our weights; 0: the stage */
	/*
	 * Where (layer, expert)'s weights are, in that region (or the stage):
	 * 64-byte aligned, readable for locus_weights_span(expert_bytes) bytes.
	 * Asked for the experts this rank sends; they stay unchanged until the
	 * move is done.
	 */
	uint64_t (*src_off)(void *arg, uint32_t layer, uint32_t expert);
	/* Bytes [at, at + len) of a gained expert's weights arrived. */
	void (*write)(void *arg, uint32_t layer, uint32_t expert, uint64_t at, const void *data,
		      uint32_t len);
	/*
	 * A gained expert is complete (from_storage 0), or no live holder
	 * sent it (1: load it from storage). Once per gained expert per move.
	 */
	void (*gained)(void *arg, uint32_t layer, uint32_t expert, int from_storage);
	void *arg;
	uint64_t stage_off;      /* stage room for the COMBINE requests (8-aligned) */
	uint64_t stage_len;
	uint32_t rows_per_send;  /* rows per COMBINE (0: 16, 64 KiB) */
	uint32_t max_in_flight;  /* bytes of weights in flight at once (0: 256 KiB; at least
				  * one COMBINE, at most 16): the move shares the rails
				  * with token rows */
};

struct locus_weights_stats {
	uint64_t gen;            /* the move's generation */
	uint32_t sent;           /* experts sent (one per gaining rank) */
	uint32_t send_failed;    /* of them, refused (the gaining rank was lost) */
	uint32_t gains;          /* experts this rank gains */
	uint32_t received_here;  /* from a rank of our node */
	uint32_t received_other; /* from another node */
	uint32_t from_storage;   /* no live holder, or it was lost, or the deadline passed */
	uint32_t retries;        /* COMBINEs sent again (destination inbox full) */
	uint64_t bytes_sent, bytes_received;
	uint64_t rows_early;     /* rows that came before this rank's move began */
	uint64_t rows_stray;     /* rows of no expert we gain, or from another holder */
};

struct locus_weights;

/*
 * A mover for client c: keeps p (copied), and for every (layer, expert)
 * how much arrived since its move began, so rows that come before this
 * rank saw the change count. 0, or -EINVAL / -ENOMEM with err.
 */
int locus_weights_create(struct locus_client *c, const struct locus_weights_params *p,
			 struct locus_weights **out, struct locus_error *err);
void locus_weights_destroy(struct locus_weights *w);

/*
 * Begin the move from placement old to new (sealed GRACE tables or sets,
 * one shape), generation gen: the sources are chosen with the ranks lost
 * now (locus_client_ranks). Experts nobody live holds are handed to
 * gained(.., 1) at once. 0, -EBUSY (a move is running), or the fetch
 * plan's error, with err.
 */
int locus_weights_begin(struct locus_weights *w, const void *old_blob, size_t old_len,
			const void *new_blob, size_t new_len, uint64_t gen, uint32_t timeout_ms,
			struct locus_error *err);

/*
 * A descriptor from locus_client_poll: 1 when it was the mover's (a
 * COMBINE completion of weights; a RESULTS_IN of weights, its inbox slot
 * released here), 0 when it is not (the caller handles it).
 */
int locus_weights_take(struct locus_weights *w, const struct locus_desc *d);

/*
 * Submit what can go; a gained expert whose holder was lost since is left
 * to storage. 1 once the move is done (every send completed, every gain
 * complete or left to storage), 0 while it runs (or none runs),
 * -ETIMEDOUT once past the deadline with nothing in flight (the gains
 * still missing were left to storage).
 */
int locus_weights_step(struct locus_weights *w);

/* Whether a move is running. */
int locus_weights_busy(const struct locus_weights *w);

void locus_weights_stats(const struct locus_weights *w, struct locus_weights_stats *st);

#endif /* LOCUS_WEIGHTS_H */
