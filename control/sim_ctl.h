/* SPDX-License-Identifier: MIT */
/* locusctl simulate: the command line (sim_ctl.c) and its report (sim_report.c). */
#ifndef SIM_CTL_H
#define SIM_CTL_H

#include <stdio.h>

#include "locus_sim.h"

#define SIM_MAX_TAUS    16
#define SIM_QUANTILES   101  /* TPOT at 0, 1, .., 100 % for the CDF plot */

/* One policy's run (ELDR: one per tau). */
struct sim_row {
	enum locus_sim_policy policy;
	float tau;                     /* ELDR only */
	struct locus_sim_summary s;
	double tpot_q[SIM_QUANTILES];  /* seconds */
};

/* tau chosen on a fit trace (--fit-trace): the rule of choose_tau in sim_ctl.c. */
struct sim_tau_choice {
	const char *fit_trace;
	float tau;
	int tail_kept;                 /* 1: its fit p99 is not above the best balancer's */
	int fit_row;                   /* index into fit_rows */
	double fit_lb_p99;             /* the best balancer's p99 on the fit trace, seconds */
	const struct sim_row *fit_rows;
	uint32_t n_fit;
};

/* What the report names besides the rows. */
struct sim_setup {
	const char *trace, *table, *model, *gpu;
	uint32_t n_trace, n_requests, n_decoders, batch_cap, gen_len;
	uint16_t n_layers, n_experts, k;
	double rate;                   /* 0: every request at t = 0 */
	int shuffle;
	uint64_t seed;
	struct locus_sim_hw hw;
	double dense_bytes, overhead_s;
	const struct sim_tau_choice *choice;  /* NULL: no --fit-trace */
};

/* The table operators read (times in ms). */
void sim_report_table(FILE *f, const struct sim_setup *su, const struct sim_row *rows,
		      uint32_t n);
/* The same as one JSON object (times in ms), the plot script's input. */
void sim_report_json(FILE *f, const struct sim_setup *su, const struct sim_row *rows,
		     uint32_t n);

/* locusctl simulate --moe (control/sim_moe_ctl.c): MoE-layer time per placement. */
int locusctl_simulate_moe(int argc, char **argv);

#endif /* SIM_CTL_H */
