// SPDX-License-Identifier: MIT
/* locusctl simulate's report: a table for people, JSON for the plot script. */
#include <inttypes.h>
#include <stdio.h>

#include "sim_args.h"
#include "trace_json.h"
#include "sim_ctl.h"

static void row_label(const struct sim_row *r, char *buf, size_t len)
{
	if (r->policy == LOCUS_SIM_ELDR)
		snprintf(buf, len, "eldr tau=%g", (double)r->tau);
	else
		snprintf(buf, len, "%s", locus_sim_policy_name(r->policy));
}


/* The lowest TPOT at p50 (q 0) or p99 (q 1) among the load balancers of rows, or -1. */
static int best_balancer(const struct sim_row *rows, uint32_t n, int q)
{
	int best = -1;

	for (uint32_t i = 0; i < n; i++) {
		double v = q ? rows[i].s.tpot_p99 : rows[i].s.tpot_p50;

		if (rows[i].policy > LOCUS_SIM_P2C)
			continue;
		if (best < 0 || v < (q ? rows[best].s.tpot_p99 : rows[best].s.tpot_p50))
			best = (int)i;
	}
	return best;
}

/* The ELDR row at tau, or -1. */
static int eldr_row(const struct sim_row *rows, uint32_t n, float tau)
{
	for (uint32_t i = 0; i < n; i++)
		if (rows[i].policy == LOCUS_SIM_ELDR && rows[i].tau == tau)
			return (int)i;
	return -1;
}

/* The choice of tau on the fit trace and the held-out result at it. */
static void table_choice(FILE *f, const struct sim_tau_choice *c, const struct sim_row *rows,
			 uint32_t n)
{
	const struct sim_row *fr = &c->fit_rows[c->fit_row];
	int e = eldr_row(rows, n, c->tau), b50 = best_balancer(rows, n, 0);
	int b99 = best_balancer(rows, n, 1);

	fprintf(f, "tau chosen on the fit trace (%s): the lowest median whose p99 is not above the "
		"best balancer's\n", c->fit_trace);
	fprintf(f, "%-14s %9s %9s\n", "fit trace", "tpot_p50", "tpot_p99");
	for (uint32_t i = 0; i < c->n_fit; i++) {
		char label[32];

		row_label(&c->fit_rows[i], label, sizeof(label));
		fprintf(f, "%-14s %9.4f %9.4f%s\n", label, c->fit_rows[i].s.tpot_p50 * 1e3,
			c->fit_rows[i].s.tpot_p99 * 1e3, (int)i == c->fit_row ? "  <- chosen" : "");
	}
	fprintf(f, "  chosen tau %g (fit: p50 %.4f, p99 %.4f ms; best balancer p99 %.4f ms)%s\n",
		(double)c->tau, fr->s.tpot_p50 * 1e3, fr->s.tpot_p99 * 1e3, c->fit_lb_p99 * 1e3,
		c->tail_kept ? "" : "; no tau kept the tail on the fit trace: the lowest p99");
	if (e < 0)
		return;
	fprintf(f, "  held-out at tau %g: p50 %.4f ms, p99 %.4f ms", (double)c->tau,
		rows[e].s.tpot_p50 * 1e3, rows[e].s.tpot_p99 * 1e3);
	if (b50 >= 0)
		fprintf(f, "; against the best balancer (%s p50 %.4f, %s p99 %.4f): median %+.1f %%, "
			"p99 %+.1f %%", locus_sim_policy_name(rows[b50].policy),
			rows[b50].s.tpot_p50 * 1e3, locus_sim_policy_name(rows[b99].policy),
			rows[b99].s.tpot_p99 * 1e3,
			100 * (rows[e].s.tpot_p50 / rows[b50].s.tpot_p50 - 1),
			100 * (rows[e].s.tpot_p99 / rows[b99].s.tpot_p99 - 1));
	fputc('\n', f);
}

void sim_report_table(FILE *f, const struct sim_setup *su, const struct sim_row *rows,
		      uint32_t n)
{
	fprintf(f, "simulate: %u requests (%u in the trace, %s order), %u decoders x batch "
		"cap %u, model %s on %s\n", su->n_requests, su->n_trace,
		su->shuffle ? "shuffled" : "trace", su->n_decoders, su->batch_cap, su->model,
		su->gpu);
	if (su->rate > 0)
		fprintf(f, "  arrivals: Poisson, %g requests/s, seed %" PRIu64 "\n", su->rate,
			su->seed);
	else
		fprintf(f, "  arrivals: all at t=0, seed %" PRIu64 "\n", su->seed);
	fprintf(f, "  step = %.4f ms fixed + distinct experts x %.0f B + context tokens x %.0f B, "
		"at %.4g GB/s\n", su->hw.fixed_s * 1e3, su->hw.expert_bytes,
		su->hw.kv_bytes_per_token, su->hw.hbm_bytes_per_s / 1e9);
	fprintf(f, "%-14s %9s %9s %9s %9s %9s %9s %8s %6s %8s %6s %6s %9s\n", "policy",
		"tpot_p50", "tpot_p90", "tpot_p99", "queue_avg", "queue_p50", "queue_p99",
		"pairs/st", "batch", "step_ms", "skewN", "skewB", "tok/s");
	for (uint32_t i = 0; i < n; i++) {
		const struct locus_sim_summary *s = &rows[i].s;
		char label[32];

		row_label(&rows[i], label, sizeof(label));
		fprintf(f, "%-14s %9.4f %9.4f %9.4f %9.3f %9.3f %9.3f %8.1f %6.2f %8.4f %6.3f "
			"%6.3f %9.0f\n", label, s->tpot_p50 * 1e3, s->tpot_p90 * 1e3,
			s->tpot_p99 * 1e3, s->queue_mean * 1e3, s->queue_p50 * 1e3,
			s->queue_p99 * 1e3, s->pairs_per_step, s->batch_mean, s->step_mean * 1e3,
			s->skew_assigned, s->skew_batch, s->tokens_per_s);
	}
	fprintf(f, "  times in ms; pairs/st: distinct (layer, expert) pairs a step reads; batch: "
		"requests per step;\n  skewN: max/mean requests per decoder; skewB: max/mean "
		"batch occupancy over time\n");
	if (su->choice)
		table_choice(f, su->choice, rows, n);
}

void sim_report_json(FILE *f, const struct sim_setup *su, const struct sim_row *rows,
		     uint32_t n)
{
	fprintf(f, "{\"mode\":\"serve\"");
	sim_json_field(f, "trace", su->trace);
	sim_json_field(f, "table", su->table);
	sim_json_field(f, "model", su->model);
	sim_json_field(f, "gpu", su->gpu);
	fprintf(f, ",\"trace_requests\":%u,\"requests\":%u,\"decoders\":%u,\"batch_cap\":%u,"
		"\"gen_len\":%u,\"n_layers\":%u,\"n_experts\":%u,\"k\":%u,\"rate\":%.17g,"
		"\"order\":\"%s\",\"seed\":%" PRIu64 ",", su->n_trace, su->n_requests,
		su->n_decoders, su->batch_cap, su->gen_len, su->n_layers, su->n_experts, su->k,
		su->rate, su->shuffle ? "shuffle" : "trace", su->seed);
	fprintf(f, "\"step_model\":{\"fixed_ms\":%.17g,\"dense_bytes\":%.17g,\"overhead_ms\":%.17g,"
		"\"expert_bytes\":%.17g,\"kv_bytes_per_token\":%.17g,\"hbm_bytes_per_s\":%.17g},",
		su->hw.fixed_s * 1e3, su->dense_bytes, su->overhead_s * 1e3, su->hw.expert_bytes,
		su->hw.kv_bytes_per_token, su->hw.hbm_bytes_per_s);
	fprintf(f, "\"policies\":[");
	for (uint32_t i = 0; i < n; i++) {
		const struct locus_sim_summary *s = &rows[i].s;
		char label[32];

		row_label(&rows[i], label, sizeof(label));
		fprintf(f, "%s{\"label\":\"%s\",\"policy\":\"%s\",", i ? "," : "", label,
			locus_sim_policy_name(rows[i].policy));
		if (rows[i].policy == LOCUS_SIM_ELDR)
			fprintf(f, "\"tau\":%.9g,", (double)rows[i].tau);
		fprintf(f, "\"tpot_ms\":{\"p50\":%.17g,\"p90\":%.17g,\"p99\":%.17g},"
			"\"queue_ms\":{\"mean\":%.17g,\"p50\":%.17g,\"p99\":%.17g},"
			"\"pairs_per_step\":%.17g,\"batch_mean\":%.17g,\"step_ms\":%.17g,"
			"\"skew_assigned\":%.17g,\"skew_batch\":%.17g,\"tokens_per_s\":%.17g,"
			"\"tpot_quantiles_ms\":[", s->tpot_p50 * 1e3, s->tpot_p90 * 1e3,
			s->tpot_p99 * 1e3, s->queue_mean * 1e3, s->queue_p50 * 1e3,
			s->queue_p99 * 1e3, s->pairs_per_step, s->batch_mean, s->step_mean * 1e3,
			s->skew_assigned, s->skew_batch, s->tokens_per_s);
		for (int q = 0; q < SIM_QUANTILES; q++)
			fprintf(f, "%s%.17g", q ? "," : "", rows[i].tpot_q[q] * 1e3);
		fprintf(f, "]}");
	}
	fprintf(f, "]");
	if (su->choice) {
		const struct sim_tau_choice *c = su->choice;

		fprintf(f, ",\"tau_choice\":{\"fit_trace\":");
		tj_put_string(f, c->fit_trace);
		fprintf(f, ",\"rule\":\"lowest fit median TPOT with fit p99 <= best balancer's\","
			"\"tau\":%.9g,\"tail_kept\":%s,\"fit_best_balancer_p99_ms\":%.17g,\"fit\":[",
			(double)c->tau, c->tail_kept ? "true" : "false", c->fit_lb_p99 * 1e3);
		for (uint32_t i = 0; i < c->n_fit; i++) {
			char label[32];

			row_label(&c->fit_rows[i], label, sizeof(label));
			fprintf(f, "%s{\"label\":\"%s\",\"p50\":%.17g,\"p99\":%.17g}", i ? "," : "",
				label, c->fit_rows[i].s.tpot_p50 * 1e3,
				c->fit_rows[i].s.tpot_p99 * 1e3);
		}
		fprintf(f, "]}");
	}
	fprintf(f, "}\n");
}
