/* SPDX-License-Identifier: MIT */
/* locusctl simulate --moe: the command (sim_moe_ctl.c) and its report (sim_moe_report.c). */
#ifndef SIM_MOE_CTL_H
#define SIM_MOE_CTL_H

#include <stdio.h>

#include "locus_sim_moe.h"

#define MOE_MAX_TOPOS 8
#define MOE_N_PL      3   /* uniform, EPLB, GRACE */
#define MOE_N_SETS    2   /* calibration (the fitted requests), held-out */
#define MOE_N_CMP     3
#define MOE_MAX_GROUPS 64

enum { MOE_UNIFORM, MOE_EPLB, MOE_GRACE };

struct moe_topo {
	uint32_t nodes, gpus;
	uint32_t budget;          /* redundant slots per GPU (both EPLB and GRACE) */
};

/* One topology's results: [set][placement]. */
struct moe_run {
	struct moe_topo topo;
	struct locus_sim_moe_result res[MOE_N_SETS][MOE_N_PL];
	/* mean layer time (s) of each random group of the set's requests, timed on
	 * its own: [set][placement][group] (the groups of moe_setup) */
	double grp[MOE_N_SETS][MOE_N_PL][MOE_MAX_GROUPS];
	uint32_t grace_fallbacks; /* GRACE layers that took EPLB's packing */
	double grace_replicas;    /* GRACE replicas per layer */
};

struct moe_setup {
	const char *trace, *fit_trace, *model, *gpu, *fabric;
	uint32_t n_req[MOE_N_SETS], n_tok[MOE_N_SETS];
	uint32_t tokens_per_step;
	uint32_t n_groups[MOE_N_SETS];  /* random groups of requests (< 2: no interval) */
	uint16_t L, E, k;
	uint64_t seed;
	struct locus_sim_moe_hw hw;
};

/* The report: times in microseconds, 95 % intervals from the random groups. */
void sim_moe_report(FILE *f, int json, const struct moe_setup *su, const struct moe_run *runs,
		    uint32_t n_runs);

/* The placements' names: "uniform", "EPLB", "GRACE". */
extern const char *const sim_moe_pl_name[MOE_N_PL];

#endif /* SIM_MOE_CTL_H */
