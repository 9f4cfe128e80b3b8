// SPDX-License-Identifier: MIT
/*
 * locusctl simulate's event loop: arrivals routed by a policy, decoders
 * batching continuously, each step timed by the model of locus_sim.h.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "locus_err_priv.h"
#include "locus_sim.h"

static const char *const policy_names[LOCUS_SIM_N_POLICIES] = {
	"random", "rr", "jsq", "p2c", "domain", "eldr",
};

const char *locus_sim_policy_name(enum locus_sim_policy p)
{
	return (unsigned)p < LOCUS_SIM_N_POLICIES ? policy_names[p] : "?";
}

int locus_sim_policy_parse(const char *name)
{
	for (int p = 0; p < LOCUS_SIM_N_POLICIES; p++)
		if (!strcmp(name, policy_names[p]))
			return p;
	return -1;
}

/* Uniform in (0, 1]: never 0, so -log() is finite. */
static double sim_unit(uint64_t *s)
{
	return ((double)(locus_splitmix64(s) >> 11) + 1.0) / 9007199254740992.0;
}

int locus_sim_arrivals(const struct locus_trace *t, uint32_t n, double rate, int shuffle,
		       uint32_t gen, uint64_t seed, struct locus_sim_arrival *out,
		       struct locus_error *err)
{
	uint32_t nt = t ? t->n_requests : 0, *perm;
	uint64_t rng = seed;
	double now = 0;

	if (!n || !nt)
		return locus_error_set(err, LOCUS_ERANGE, "no requests to simulate");
	if (!isfinite(rate) || rate < 0)
		return locus_error_set(err, LOCUS_ERANGE, "arrival rate %g: want a finite rate >= 0 "
				       "(0: every request at once)", rate);
	perm = malloc(sizeof(*perm) * nt);
	if (!perm)
		return locus_error_set(err, ENOMEM, "out of memory");
	for (uint32_t i = 0; i < n; i++) {
		uint32_t j = i % nt;

		if (j == 0) {
			for (uint32_t a = 0; a < nt; a++)
				perm[a] = a;
			for (uint32_t a = nt - 1; shuffle && a > 0; a--) {
				uint32_t b = (uint32_t)(locus_splitmix64(&rng) % (a + 1)), x = perm[a];

				perm[a] = perm[b];
				perm[b] = x;
			}
		}
		if (rate > 0)
			now += -log(sim_unit(&rng)) / rate;
		out[i].t = now;
		out[i].req = perm[j];
		out[i].gen_len = gen ? gen : t->reqs[perm[j]].gen_len;
	}
	free(perm);
	return 0;
}

int locus_sim_result_alloc(struct locus_sim_result *r, uint32_t n, uint32_t K)
{
	memset(r, 0, sizeof(*r));
	r->n = n;
	r->K = K;
	r->tpot = calloc(n, sizeof(*r->tpot));
	r->queue = calloc(n, sizeof(*r->queue));
	r->decoder = calloc(n, sizeof(*r->decoder));
	r->assigned = calloc(K, sizeof(*r->assigned));
	r->batch_time = calloc(K, sizeof(*r->batch_time));
	if (!r->tpot || !r->queue || !r->decoder || !r->assigned || !r->batch_time) {
		locus_sim_result_free(r);
		return -ENOMEM;
	}
	return 0;
}

void locus_sim_result_free(struct locus_sim_result *r)
{
	free(r->batch_time);
	free(r->assigned);
	free(r->decoder);
	free(r->queue);
	free(r->tpot);
	memset(r, 0, sizeof(*r));
}

/* A decoder: a FIFO of routed requests waiting for a slot, the batch decoding. */
struct dec {
	uint32_t qhead, qtail, queued; /* arrival indices linked through sim.next */
	uint32_t *run;                 /* [cap] arrival indices decoding */
	uint32_t running;
	int busy;                      /* a step is in progress */
	double step_end, step_dt;
};

struct sim {
	const struct locus_sim_cfg *c;
	struct locus_sim_result *res;
	struct dec *d;
	uint32_t *next, *tok, *runbuf; /* [n] queue links, [n] tokens decoded, [K * cap] */
	double *join;                  /* [n] */
	uint64_t *loads;               /* [K] */
	uint32_t *seen, stamp;         /* [L * E] generation stamps */
	uint64_t rng;
	uint32_t rr;
};

#define NONE UINT32_MAX

static int check_cfg(const struct locus_sim_cfg *c, struct locus_error *err)
{
	const struct locus_sim_hw *h = &c->hw;

	if (!c->t || !c->arr || !c->n)
		return locus_error_set(err, LOCUS_ERANGE, "no trace or no arrivals");
	if (!c->n_decoders || c->n_decoders > 65535)
		return locus_error_set(err, LOCUS_ERANGE, "decoders %u: want 1..65535", c->n_decoders);
	if (!c->batch_cap || c->batch_cap > 1u << 20)
		return locus_error_set(err, LOCUS_ERANGE, "batch cap %u: want 1..1048576", c->batch_cap);
	if (!isfinite(h->expert_bytes) || h->expert_bytes < 0 || !isfinite(h->fixed_s) ||
	    h->fixed_s < 0 || !isfinite(h->kv_bytes_per_token) || h->kv_bytes_per_token < 0)
		return locus_error_set(err, LOCUS_ERANGE, "step model: expert bytes %g, fixed %g s, "
				       "KV bytes per token %g: each finite and >= 0",
				       h->expert_bytes, h->fixed_s, h->kv_bytes_per_token);
	if (!isfinite(h->hbm_bytes_per_s) || !(h->hbm_bytes_per_s > 0))
		return locus_error_set(err, LOCUS_ERANGE, "HBM bandwidth %g B/s: want finite > 0",
				       h->hbm_bytes_per_s);
	if ((unsigned)c->policy >= LOCUS_SIM_N_POLICIES)
		return locus_error_set(err, LOCUS_ERANGE, "policy %d unknown", (int)c->policy);
	if (c->policy == LOCUS_SIM_ELDR) {
		uint16_t L, E;

		if (!c->router || !c->sigs)
			return locus_error_set(err, LOCUS_ERANGE, "eldr: no router or no signatures");
		if (locus_eldr_router_n_decoders(c->router) != c->n_decoders)
			return locus_error_set(err, LOCUS_ERANGE, "eldr: the table routes to %u decoders, "
					       "the simulation has %u",
					       locus_eldr_router_n_decoders(c->router), c->n_decoders);
		locus_eldr_router_shape(c->router, &L, &E);
		if (L != c->t->n_layers || E != c->t->n_experts)
			return locus_error_set(err, LOCUS_ERANGE, "eldr: the table is %u layers x %u "
					       "experts, the trace %u x %u", L, E, c->t->n_layers,
					       c->t->n_experts);
	}
	for (uint32_t i = 0; i < c->n; i++) {
		const struct locus_sim_arrival *a = &c->arr[i];

		if (a->req >= c->t->n_requests || !isfinite(a->t) || a->t < 0 ||
		    (i && a->t < c->arr[i - 1].t))
			return locus_error_set(err, LOCUS_ERANGE, "arrival %u: request %u at %g s "
					       "(want a trace request, times >= 0 in order)", i,
					       a->req, a->t);
		if (!a->gen_len)
			return locus_error_set(err, LOCUS_ERANGE, "arrival %u: request '%s' has no "
					       "generated tokens to decode (give a generated length)",
					       i, c->t->reqs[a->req].id);
		if (!c->t->reqs[a->req].gen_len)
			return locus_error_set(err, LOCUS_ERANGE, "request '%s' has no routed_experts: "
					       "the decode steps need its generated routings",
					       c->t->reqs[a->req].id);
	}
	return 0;
}

/* Oracle: is decoder d one of the domain's (decoders split d mod domains)? */
static int domain_mine(uint32_t d, uint32_t K, uint32_t dom, uint32_t nd)
{
	return nd <= K ? d % nd == dom % nd : d == dom % K;
}

/* The least loaded decoder among those with mine() (all when none), ties to the lower index. */
static uint32_t least_loaded(const struct sim *s, uint32_t dom, uint32_t nd)
{
	uint32_t K = s->c->n_decoders, best = 0;
	uint64_t bl = UINT64_MAX;

	for (int pass = 0; pass < 2 && bl == UINT64_MAX; pass++)
		for (uint32_t d = 0; d < K; d++)
			if ((pass || !nd || domain_mine(d, K, dom, nd)) && s->loads[d] < bl) {
				bl = s->loads[d];
				best = d;
			}
	return best;
}

/* The decoder policy p gives arrival i; loads[] is filled. */
static int pick(struct sim *s, uint32_t i, uint32_t *out, struct locus_error *err)
{
	const struct locus_sim_cfg *c = s->c;
	const uint32_t K = c->n_decoders;
	const struct locus_trace_req *r = &c->t->reqs[c->arr[i].req];
	struct locus_eldr_decision dec;
	uint32_t a, b;
	int ret;

	switch (c->policy) {
	case LOCUS_SIM_RANDOM:
		*out = (uint32_t)(locus_splitmix64(&s->rng) % K);
		return 0;
	case LOCUS_SIM_RR:
		*out = s->rr++ % K;
		return 0;
	case LOCUS_SIM_JSQ:
		*out = least_loaded(s, 0, 0);
		return 0;
	case LOCUS_SIM_P2C:
		a = (uint32_t)(locus_splitmix64(&s->rng) % K);
		b = K > 1 ? (uint32_t)(a + 1 + locus_splitmix64(&s->rng) % (K - 1)) % K : a;
		*out = s->loads[b] < s->loads[a] || (s->loads[b] == s->loads[a] && b < a) ? b : a;
		return 0;
	case LOCUS_SIM_DOMAIN:
		*out = least_loaded(s, r->domain ? r->domain - 1 : 0,
				    r->domain ? c->t->n_domains - 1 : 0);
		return 0;
	case LOCUS_SIM_ELDR:
		for (uint32_t d = 0; d < K; d++)
			locus_eldr_router_set_load(c->router, d, s->loads[d]);
		ret = locus_eldr_route(c->router, c->sigs + (size_t)c->arr[i].req * c->slen, c->slen,
				       &dec);
		if (ret < 0)
			return locus_error_set(err, -ret, "eldr: the router refused request '%s' "
					       "(code %d)", r->id, ret);
		*out = dec.slot;
		return 0;
	default:
		return locus_error_set(err, LOCUS_ERANGE, "policy %d unknown", (int)c->policy);
	}
}

/* Start decoder k's next step at now: queued requests join up to the cap, then time it. */
static void start_step(struct sim *s, uint32_t k, double now)
{
	const struct locus_sim_cfg *c = s->c;
	const struct locus_trace *t = c->t;
	struct dec *d = &s->d[k];
	uint32_t st, pairs = 0;
	double ctx = 0;

	while (d->queued && d->running < c->batch_cap) {
		uint32_t i = d->qhead;

		d->qhead = s->next[i];
		d->queued--;
		s->join[i] = now;
		s->res->queue[i] = now - c->arr[i].t;
		d->run[d->running++] = i;
	}
	d->busy = d->running > 0;
	if (!d->busy)
		return;
	if (++s->stamp == 0) {
		memset(s->seen, 0, sizeof(*s->seen) * t->n_layers * t->n_experts);
		s->stamp = 1;
	}
	st = s->stamp;
	for (uint32_t b = 0; b < d->running; b++) {
		uint32_t i = d->run[b];
		const struct locus_trace_req *r = &t->reqs[c->arr[i].req];
		uint32_t tok = s->tok[i] % r->gen_len; /* a longer decode cycles the trace's tokens */

		for (uint32_t l = 0; l < t->n_layers; l++) {
			const uint16_t *ids = locus_trace_tok(t, r->gen, tok, l);

			for (uint32_t e = 0; e < t->k; e++) {
				uint32_t f = l * t->n_experts + ids[e];

				pairs += s->seen[f] != st;
				s->seen[f] = st;
			}
		}
		ctx += (double)r->prompt_len + s->tok[i];
	}
	d->step_dt = c->hw.fixed_s + ((double)pairs * c->hw.expert_bytes +
				      ctx * c->hw.kv_bytes_per_token) / c->hw.hbm_bytes_per_s;
	d->step_end = now + d->step_dt;
	s->res->steps++;
	s->res->pairs += pairs;
	s->res->step_reqs += d->running;
	s->res->step_time += d->step_dt;
	s->res->batch_time[k] += d->step_dt * d->running;
}

/* Decoder k's step ends: every request in it has one more token; the finished leave. */
static void end_step(struct sim *s, uint32_t k)
{
	struct dec *d = &s->d[k];
	double now = d->step_end;
	uint32_t kept = 0;

	for (uint32_t b = 0; b < d->running; b++) {
		uint32_t i = d->run[b];

		s->res->tokens++;
		if (++s->tok[i] < s->c->arr[i].gen_len) {
			d->run[kept++] = i;
			continue;
		}
		s->res->tpot[i] = (now - s->join[i]) / s->c->arr[i].gen_len;
		if (now > s->res->makespan)
			s->res->makespan = now;
	}
	d->running = kept;
	start_step(s, k, now);
}

static int arrive(struct sim *s, uint32_t i, struct locus_error *err)
{
	const uint32_t K = s->c->n_decoders;
	struct dec *d;
	uint32_t k;
	int ret;

	for (k = 0; k < K; k++)
		s->loads[k] = s->d[k].running + s->d[k].queued;
	ret = pick(s, i, &k, err);
	if (ret < 0)
		return ret;
	if (k >= K)
		return locus_error_set(err, LOCUS_ERANGE, "policy chose decoder %u of %u", k, K);
	if (s->c->on_route)
		s->c->on_route(s->c->arg, i, s->loads, K, k);
	s->res->decoder[i] = k;
	s->res->assigned[k]++;
	d = &s->d[k];
	s->next[i] = NONE;
	if (d->queued)
		s->next[d->qtail] = i;
	else
		d->qhead = i;
	d->qtail = i;
	d->queued++;
	if (!d->busy) {
		/*
		 * An idle decoder starts at this instant, after every arrival of
		 * the same instant (a zero-length step whose end admits them).
		 */
		d->busy = 1;
		d->step_end = s->c->arr[i].t;
	}
	return 0;
}

static int loop(struct sim *s, struct locus_error *err)
{
	const struct locus_sim_cfg *c = s->c;
	uint32_t i = 0;

	for (;;) {
		uint32_t kmin = NONE;
		double tmin = INFINITY;
		int ret;

		for (uint32_t k = 0; k < c->n_decoders; k++)
			if (s->d[k].busy && s->d[k].step_end < tmin) {
				tmin = s->d[k].step_end;
				kmin = k;
			}
		if (i < c->n && c->arr[i].t <= tmin) {
			ret = arrive(s, i++, err);
			if (ret < 0)
				return ret;
		} else if (kmin != NONE) {
			end_step(s, kmin);
		} else {
			return 0;
		}
	}
}

int locus_sim_run(const struct locus_sim_cfg *cfg, struct locus_sim_result *res,
		  struct locus_error *err)
{
	const uint32_t K = cfg->n_decoders;
	struct sim s = { .c = cfg, .res = res, .rng = cfg->seed };
	int ret = check_cfg(cfg, err);

	if (ret < 0)
		return ret;
	if (res->n != cfg->n || res->K != K)
		return locus_error_set(err, LOCUS_ERANGE, "result holds %u arrivals x %u decoders, "
				       "the run %u x %u", res->n, res->K, cfg->n, K);
	s.d = calloc(K, sizeof(*s.d));
	s.next = calloc(cfg->n, sizeof(*s.next));
	s.tok = calloc(cfg->n, sizeof(*s.tok));
	s.join = calloc(cfg->n, sizeof(*s.join));
	s.runbuf = calloc((size_t)K * cfg->batch_cap, sizeof(*s.runbuf));
	s.loads = calloc(K, sizeof(*s.loads));
	s.seen = calloc((size_t)cfg->t->n_layers * cfg->t->n_experts, sizeof(*s.seen));
	if (!s.d || !s.next || !s.tok || !s.join || !s.runbuf || !s.loads || !s.seen) {
		ret = locus_error_set(err, ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t k = 0; k < K; k++)
		s.d[k].run = s.runbuf + (size_t)k * cfg->batch_cap;
	if (cfg->router)
		for (uint32_t k = 0; k < K; k++)
			locus_eldr_router_set_up(cfg->router, k, 1);
	res->steps = res->pairs = res->step_reqs = res->tokens = 0;
	res->step_time = res->makespan = 0;
	memset(res->assigned, 0, sizeof(*res->assigned) * K);
	memset(res->batch_time, 0, sizeof(*res->batch_time) * K);
	ret = loop(&s, err);
out:
	free(s.seen);
	free(s.loads);
	free(s.runbuf);
	free(s.join);
	free(s.tok);
	free(s.next);
	free(s.d);
	return ret;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double locus_sim_percentile(double *v, uint32_t n, double p)
{
	double rank = ceil(p / 100.0 * n);
	uint32_t idx = rank < 1 ? 0 : (uint32_t)rank - 1;

	qsort(v, n, sizeof(*v), cmp_double);
	return v[idx < n ? idx : n - 1];
}

/* max / mean of v[K] (0 when the mean is 0). */
static double skew(const double *v, uint32_t K)
{
	double sum = 0, max = 0;

	for (uint32_t k = 0; k < K; k++) {
		sum += v[k];
		if (v[k] > max)
			max = v[k];
	}
	return sum > 0 ? max * K / sum : 0;
}

int locus_sim_summarize(const struct locus_sim_result *res, struct locus_sim_summary *s)
{
	double *tmp = malloc(sizeof(*tmp) * (res->n > res->K ? res->n : res->K));
	double sum = 0;

	if (!tmp)
		return -ENOMEM;
	memset(s, 0, sizeof(*s));
	memcpy(tmp, res->tpot, sizeof(*tmp) * res->n);
	s->tpot_p50 = locus_sim_percentile(tmp, res->n, 50);
	s->tpot_p90 = locus_sim_percentile(tmp, res->n, 90);
	s->tpot_p99 = locus_sim_percentile(tmp, res->n, 99);
	memcpy(tmp, res->queue, sizeof(*tmp) * res->n);
	for (uint32_t i = 0; i < res->n; i++)
		sum += tmp[i];
	s->queue_mean = sum / res->n;
	s->queue_p50 = locus_sim_percentile(tmp, res->n, 50);
	s->queue_p99 = locus_sim_percentile(tmp, res->n, 99);
	if (res->steps) {
		s->pairs_per_step = (double)res->pairs / res->steps;
		s->batch_mean = (double)res->step_reqs / res->steps;
		s->step_mean = res->step_time / res->steps;
	}
	for (uint32_t k = 0; k < res->K; k++)
		tmp[k] = (double)res->assigned[k];
	s->skew_assigned = skew(tmp, res->K);
	s->skew_batch = skew(res->batch_time, res->K);
	s->tokens_per_s = res->makespan > 0 ? res->tokens / res->makespan : 0;
	free(tmp);
	return 0;
}
