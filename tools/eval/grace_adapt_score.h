/* SPDX-License-Identifier: MIT */
/*
 * Placements after ranks are lost or come back, scored on held-out tokens
 * (grace_adapt_figures and its test). A scenario is a topology and a
 * trace's calibration half; GRACE is fitted on it as locusctl fit --grace
 * does, EPLB (1 group) as vLLM calls it. A fault loses one rank or one
 * node, or brings it back; the methods:
 *   adapt          locus_gracefit_adapt from the placement in force (skew
 *                  auto: the balance as placed, and 1.25; no move bound)
 *   mask only      the fitted placement as it is: lost copies unreachable
 *   refit          a fresh GRACE fit for the live ranks (one flat node of
 *                  N' GPUs: GRACE's nodes are equal, 4 + 3 are not)
 *   EPLB           EPLB re-run for the live GPU count, as vLLM's elastic
 *                  EP does on a scale-down, with the slots per GPU it had
 *                  (more when the live GPUs cannot hold every expert)
 * Back: each method's placement for every rank again, from its own
 * placement for the survivors (mask only and refit: the fitted one).
 */
#ifndef GRACE_ADAPT_SCORE_H
#define GRACE_ADAPT_SCORE_H

#include <stdint.h>

#include "grace_figures.h"
#include "grace_heldout.h"

enum { GA_ADAPT, GA_ADAPT_FIXED, GA_MASK, GA_REFIT, GA_EPLB, GA_N_METHODS };
extern const char *const ga_method_name[GA_N_METHODS];

enum { GA_RANK_LOST, GA_NODE_LOST, GA_RANK_BACK, GA_NODE_BACK, GA_N_FAULTS };
extern const char *const ga_fault_name[GA_N_FAULTS];

/*
 * Copies gained going from one placement to the next: (rank, expert)
 * pairs held after and not before, on live ranks; where each one's
 * weights come from (the nearest live holder before: on the gaining
 * rank's node, else another node, else storage), and from where instead
 * if every copy were loaded from the expert's old primary.
 */
struct ga_moves {
	uint32_t gained;
	uint32_t storage, same_node, other_node;
	uint32_t primary_cross;    /* the old primary live, on another node */
	uint32_t primary_storage;  /* the old primary lost (or none) */
};

/* What every fault of a scenario starts from (built once). */
struct ga_fits {
	struct gf_topo t;
	const struct gf_domain *d;
	void *blob;                 /* GRACE fitted on d's calibration half */
	size_t len;
	void *refit[2];             /* flat fits: one rank lost, one node lost */
	size_t refit_len[2];
	struct locus_gracefit_eplb eplb, eplb_surv[2];
};

/* The fits of t on d (exits on error); one node lost only with 2 nodes or more. */
void ga_fits_init(struct ga_fits *f, const struct gf_topo *t, const struct gf_domain *d);
void ga_fits_free(struct ga_fits *f);

/* Cases of a fault on t: one per rank or per node (0: the fault does not apply). */
uint32_t ga_fault_cases(const struct gf_topo *t, int fault);

/* One case: every method scored on d's held-out half, its moves and slots. */
struct ga_case {
	uint64_t lost;              /* ranks lost while scored (0 for a fault back) */
	struct gh_score sc[GA_N_METHODS];
	struct ga_moves mv[GA_N_METHODS];
	uint32_t slots[GA_N_METHODS]; /* copies on the fullest GPU of any layer */
};

/*
 * Fault fault with rank or node which (< ga_fault_cases) on the fits f.
 * Exits on error (the fits and the payloads are the program's own).
 */
void ga_case_run(const struct ga_fits *f, int fault, uint32_t which, struct ga_case *c);
void ga_case_free(struct ga_case *c);

#endif /* GRACE_ADAPT_SCORE_H */
