/* SPDX-License-Identifier: MIT */
/*
 * What the parts of the grace_figures tool share: the topologies, the
 * memory rule that gives EPLB and GRACE the same redundant slots, and the
 * planner map of a sealed table.
 */
#ifndef GRACE_FIGURES_H
#define GRACE_FIGURES_H

#include <stddef.h>
#include <stdint.h>

#include "grace_heldout.h"
#include "locus_gracefit.h"
#include "locus_trace.h"

struct gf_topo {
	uint32_t nodes, gpus;   /* nodes x GPUs per node */
};

#define GF_N_TOPOS 4
extern const struct gf_topo gf_topos[GF_N_TOPOS];

/*
 * The memory rule: b = max(1, ceil(E/N) / 4) redundant slots per GPU, N x b
 * per layer, for both. GRACE: replica budget b per GPU, at most
 * ceil(E/N) * 3/2 primaries per GPU (its grouping is non-uniform).
 * EPLB: E + N x b physical slots, (E + N x b) / N on every GPU.
 */
struct locus_gracefit_topo gf_grace_topo(const struct gf_topo *t, uint32_t E);
uint32_t gf_eplb_slots(const struct gf_topo *t, uint32_t E);

/* The planner map of a sealed GRACE blob (built, checked; exits on error). */
void *gf_map(const void *blob, size_t len);

/* "<program>: what: message (code)" on stderr, exit 1. */
void gf_die(const char *what, const struct locus_error *err, int rc);

/*
 * One ESFT domain (the DeepSeek-V2-Lite expert scores under root, gate
 * order), or any trace: its sequences in two halves (the first for fitting) and the
 * profile of the first half, token by token in sequence order. Exits on error.
 */
struct gf_domain {
	struct locus_trace *t;
	struct gh_set half[2];
	struct locus_gracefit_profile prof;
};
void gf_domain_load(const char *root, const char *dom, struct gf_domain *d);

/*
 * The same for any trace (taken over: gf_domain_free frees it), every token
 * of a request (prompt, then generated): the first half of its requests
 * and the second, or with alternate the even-numbered and the odd-numbered
 * (a trace ordered by source, where halves would differ in topic).
 */
void gf_domain_split(struct locus_trace *t, int alternate, struct gf_domain *d);
void gf_domain_free(struct gf_domain *d);

/* OLMoE's per-domain loads (grace_olmoe.c). */
void gf_olmoe_figures(const char *root);

#endif /* GRACE_FIGURES_H */
