// SPDX-License-Identifier: MIT
/* locusctl GRACE subcommands: fit, show, eplb-import/export, rebalance. */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "locus_counters.h"
#include "locus_err_priv.h"
#include "locus_grace_priv.h"
#include "locus_gracefit.h"
#include "locus_push.h"
#include "locus_shm.h"
#include "locus_tblfile.h"
#include "locus_tblfile_priv.h"
#include "locus_trace.h"
#include "locusctl.h"
#include "locusctl_grace.h"

#define HDR sizeof(struct locus_tbl_hdr)

/* Shared by every locusctl command (declared in locusctl.h): one way to report. */
int locusctl_fail(const struct locus_error *err, int code)
{
	if (err && err->msg[0])
		fprintf(stderr, "locusctl: %s (%s)\n", err->msg, locus_strerror(code));
	else
		fprintf(stderr, "locusctl: %s\n", locus_strerror(code));
	return 1;
}

static int usage_err(const char *sub, const char *what)
{
	fprintf(stderr, "locusctl %s: %s (see locusctl --help)\n", sub, what);
	return 2;
}

/* Strict unsigned parse: digits only, within [lo, hi]. */
static int parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
	char *end;
	unsigned long v;

	if (!s || !*s || *s == '-' || *s == '+')
		return -1;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

static int parse_dbl(const char *s, double lo, double hi, double *out)
{
	char *end;
	double v;

	if (!s || !*s)
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || !isfinite(v) || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

static int read_text(const char *path, char **buf, size_t *len, struct locus_error *err)
{
	FILE *f = fopen(path, "rb");
	size_t cap = 1 << 16, n = 0;
	char *b;

	if (!f)
		return locus_error_set(err, errno, "%s: %s", path, strerror(errno));
	b = malloc(cap + 1);
	while (b) {
		size_t k = fread(b + n, 1, cap - n, f);

		n += k;
		if (n < cap)
			break;
		if (cap >= (1u << 30)) {
			free(b);
			fclose(f);
			return locus_error_set(err, LOCUS_ERANGE, "%s: larger than 1 GiB", path);
		}
		cap *= 2;
		char *nb = realloc(b, cap + 1);

		if (!nb)
			free(b);
		b = nb;
	}
	if (!b) {
		fclose(f);
		return locus_error_set(err, ENOMEM, "%s: out of memory", path);
	}
	if (ferror(f)) {
		free(b);
		fclose(f);
		return locus_error_set(err, EIO, "%s: read error", path);
	}
	fclose(f);
	b[n] = '\0';
	*buf = b;
	*len = n;
	return 0;
}

enum {
	OPT_GRACE = 256, OPT_TRACE, OPT_USE_GEN, OPT_ESFT, OPT_LAYERS, OPT_K, OPT_NODES,
	OPT_GPUS, OPT_CAPACITY, OPT_BUDGET, OPT_NEXPERTS, OPT_R, OPT_SEED, OPT_NOREP,
	OPT_LOADTOL, OPT_UNEVEN,
	OPT_TABLE, OPT_INTERVAL, OPT_COUNT, OPT_THRESHOLD, OPT_COUNTER, OPT_TIMEOUT,
	OPT_EP_RANKS, OPT_ELDR_TABLE, OPT_WINDOW, OPT_DECAY, OPT_EVERY, OPT_MAX_MOVES,
	OPT_NO_FALLBACK, OPT_PEAK_WEIGHT, OPT_COST_GPU, OPT_COST_NODE, OPT_SWAPS,
};

static const struct option long_opts[] = {
	{ "grace", no_argument, NULL, OPT_GRACE },
	{ "trace", required_argument, NULL, OPT_TRACE },
	{ "use-gen", no_argument, NULL, OPT_USE_GEN },
	{ "esft", required_argument, NULL, OPT_ESFT },
	{ "layers", required_argument, NULL, OPT_LAYERS },
	{ "k", required_argument, NULL, OPT_K },
	{ "nodes", required_argument, NULL, OPT_NODES },
	{ "gpus", required_argument, NULL, OPT_GPUS },
	{ "capacity", required_argument, NULL, OPT_CAPACITY },
	{ "replica-budget", required_argument, NULL, OPT_BUDGET },
	{ "n-experts", required_argument, NULL, OPT_NEXPERTS },
	{ "r", required_argument, NULL, OPT_R },
	{ "seed", required_argument, NULL, OPT_SEED },
	{ "no-replication", no_argument, NULL, OPT_NOREP },
	{ "load-tol", required_argument, NULL, OPT_LOADTOL },
	{ "uneven", no_argument, NULL, OPT_UNEVEN },
	{ "table", required_argument, NULL, OPT_TABLE },
	{ "interval", required_argument, NULL, OPT_INTERVAL },
	{ "count", required_argument, NULL, OPT_COUNT },
	{ "threshold", required_argument, NULL, OPT_THRESHOLD },
	{ "counter", required_argument, NULL, OPT_COUNTER },
	{ "timeout-ms", required_argument, NULL, OPT_TIMEOUT },
	{ "ep-ranks-per-decoder", required_argument, NULL, OPT_EP_RANKS },
	{ "eldr-table", required_argument, NULL, OPT_ELDR_TABLE },
	{ "no-fallback", no_argument, NULL, OPT_NO_FALLBACK },
	{ "peak-weight", required_argument, NULL, OPT_PEAK_WEIGHT },
	{ "cost-gpu", required_argument, NULL, OPT_COST_GPU },
	{ "cost-node", required_argument, NULL, OPT_COST_NODE },
	{ "window", required_argument, NULL, OPT_WINDOW },
	{ "decay", required_argument, NULL, OPT_DECAY },
	{ "every", required_argument, NULL, OPT_EVERY },
	{ "max-moves", required_argument, NULL, OPT_MAX_MOVES },
	{ "swaps", required_argument, NULL, OPT_SWAPS },
	{ "instance", required_argument, NULL, 'i' },
	{ "output", required_argument, NULL, 'o' },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

struct args {
	const char *trace, *esft, *out, *table, *instance, *counter, *eldr_table;
	int grace, use_gen, no_rep, uneven, no_fallback;
	double load_tol, peak_weight, cost_gpu, cost_node;
	uint32_t layers, k, n_experts, count, timeout_ms, seed, ep_ranks;
	uint32_t window, every, max_moves, swaps;
	struct locus_gracefit_topo topo;
	double r, interval, threshold, decay;
	int n_pos;
	const char *pos[4];
};

static int parse_args(const char *sub, int argc, char **argv, struct args *a)
{
	int c;

	memset(a, 0, sizeof(*a));
	a->layers = 26;
	a->k = 6;
	a->r = -1;
	a->seed = 1;
	a->threshold = 0.05;
	a->timeout_ms = 2000;
	a->interval = -1;
	a->window = 1;
	a->every = 1;
	a->decay = 1;
	a->max_moves = UINT32_MAX;
	a->swaps = UINT32_MAX; /* rebalance: LOCUS_GRACEFIT_SWAPS with --trace, else 0 */
	optind = 0; /* GNU getopt: reinitialise (callable more than once) */
	opterr = 0;
	while ((c = getopt_long(argc, argv, "i:o:h", long_opts, NULL)) != -1) {
		int bad = 0;

		switch (c) {
		case OPT_GRACE: a->grace = 1; break;
		case OPT_TRACE: a->trace = optarg; break;
		case OPT_USE_GEN: a->use_gen = 1; break;
		case OPT_ESFT: a->esft = optarg; break;
		case OPT_LAYERS: bad = parse_u32(optarg, 1, LOCUS_GRACE_MAX_LAYERS, &a->layers); break;
		case OPT_K: bad = parse_u32(optarg, 1, LOCUS_GRACE_MAX_TOPK, &a->k); break;
		case OPT_NODES:
			bad = parse_u32(optarg, 1, LOCUS_GRACE_MAX_RANKS, &a->topo.n_nodes);
			break;
		case OPT_GPUS:
			bad = parse_u32(optarg, 1, LOCUS_GRACE_MAX_RANKS, &a->topo.gpus_per_node);
			break;
		case OPT_CAPACITY:
			bad = parse_u32(optarg, 1, LOCUS_GRACE_MAX_EXPERTS, &a->topo.capacity);
			break;
		case OPT_BUDGET:
			bad = parse_u32(optarg, 0, LOCUS_GRACE_MAX_EXPERTS, &a->topo.replica_budget);
			break;
		case OPT_NEXPERTS:
			bad = parse_u32(optarg, 1, LOCUS_GRACE_MAX_EXPERTS, &a->n_experts);
			break;
		case OPT_R: bad = parse_dbl(optarg, 0, 1, &a->r); break;
		case OPT_SEED: bad = parse_u32(optarg, 0, UINT32_MAX, &a->seed); break;
		case OPT_NOREP: a->no_rep = 1; break;
		case OPT_LOADTOL: bad = parse_dbl(optarg, 0, 100, &a->load_tol); break;
		case OPT_UNEVEN: a->uneven = 1; break;
		case OPT_TABLE: a->table = optarg; break;
		case OPT_INTERVAL: bad = parse_dbl(optarg, 0.001, 86400, &a->interval); break;
		case OPT_COUNT: bad = parse_u32(optarg, 0, UINT32_MAX, &a->count); break;
		case OPT_THRESHOLD: bad = parse_dbl(optarg, 0, 1, &a->threshold); break;
		case OPT_COUNTER: a->counter = optarg; break;
		case OPT_TIMEOUT: bad = parse_u32(optarg, 0, 3600000, &a->timeout_ms); break;
		case OPT_NO_FALLBACK: a->no_fallback = 1; break;
		case OPT_PEAK_WEIGHT: bad = parse_dbl(optarg, 1e-9, 1e6, &a->peak_weight); break;
		case OPT_COST_GPU: bad = parse_dbl(optarg, 1e-9, 1e6, &a->cost_gpu); break;
		case OPT_COST_NODE: bad = parse_dbl(optarg, 1e-9, 1e6, &a->cost_node); break;
		case OPT_WINDOW: bad = parse_u32(optarg, 1, 65536, &a->window); break;
		case OPT_EVERY: bad = parse_u32(optarg, 1, 1000000, &a->every); break;
		case OPT_MAX_MOVES: bad = parse_u32(optarg, 0, UINT32_MAX - 1, &a->max_moves); break;
		case OPT_SWAPS: bad = parse_u32(optarg, 0, LOCUS_GRACE_MAX_EXPERTS, &a->swaps); break;
		case OPT_DECAY:
			bad = parse_dbl(optarg, 1e-9, 1, &a->decay);
			break;
		case OPT_EP_RANKS:
			bad = parse_u32(optarg, 1, LOCUS_GRACE_MAX_RANKS, &a->ep_ranks);
			break;
		case OPT_ELDR_TABLE: a->eldr_table = optarg; break;
		case 'i': a->instance = optarg; break;
		case 'o': a->out = optarg; break;
		case 'h': return usage_err(sub, "help: see the header of locusctl_grace.h");
		default:
			return usage_err(sub, "unknown option or missing value");
		}
		if (bad) {
			char m[160];

			snprintf(m, sizeof(m), "bad value '%s' for an option", optarg);
			return usage_err(sub, m);
		}
	}
	for (; optind < argc; optind++) {
		if (a->n_pos == (int)LOCUS_ARRAY_SIZE(a->pos))
			return usage_err(sub, "too many arguments");
		a->pos[a->n_pos++] = argv[optind];
	}
	return 0;
}

static double layer_rho(const float *pred, uint32_t N)
{
	double sum = 0, mx = 0;

	for (uint32_t r = 0; r < N; r++) {
		sum += pred[r];
		mx = fmax(mx, pred[r]);
	}
	return sum > 0 ? mx / (sum / N) : 1.0;
}

/* ---- fit ---------------------------------------------------------------- */

#define FIT_KEEP 65536u /* tokens per layer kept for the layer objective */

static int cmd_fit(const char *sub, struct args *a)
{
	struct locus_error err = { 0 };
	struct locus_trace *t = NULL;
	struct locus_gracefit_profile p = { 0 };
	struct locus_gracefit_opts o = { .r = a->r, .seed = a->seed,
					 .no_replication = a->no_rep,
					 .load_tol = a->load_tol, .uneven = a->uneven,
					 .no_fallback = a->no_fallback, .w_peak = a->peak_weight,
					 .cost_gpu = a->cost_gpu, .cost_node = a->cost_node };
	struct locus_gracefit_layer_info *li = NULL;
	uint32_t fell = 0;
	void *blob = NULL;
	size_t len = 0;
	int rc, ret = 1;

	if (!a->grace)
		return usage_err(sub, "this is the GRACE fit: pass --grace");
	if (!!a->trace == !!a->esft)
		return usage_err(sub, "give exactly one of --trace FILE and --esft DIR");
	if (!a->topo.n_nodes || !a->topo.gpus_per_node || !a->out || a->n_pos)
		return usage_err(sub, "needs --nodes, --gpus and -o TABLE");
	if (!!a->ep_ranks != !!a->eldr_table)
		return usage_err(sub, "--ep-ranks-per-decoder R and --eldr-table TABLE go "
				 "together");
	if (a->ep_ranks && a->use_gen)
		return usage_err(sub, "--use-gen does not apply to per-decoder placement: each "
				 "request is profiled from its decode tokens when it has any");
	if (a->trace) {
		struct locus_trace_opts to = { .n_experts = a->n_experts };

		rc = locus_trace_load(a->trace, &to, &t, &err);
	} else {
		char *dir = strdup(a->esft);

		if (!dir)
			return locusctl_fail(NULL, ENOMEM);
		rc = locus_trace_load_esft(a->esft, basename(dir), (uint16_t)a->layers,
					   (uint16_t)a->k, a->n_experts ? a->n_experts : 64, &t,
					   &err);
		free(dir);
	}
	if (rc)
		return locusctl_fail(&err, rc);
	if (a->ep_ranks) {
		ret = locusctl_graceset_fit(t, a->eldr_table, a->ep_ranks, &a->topo, &o, a->out);
		goto out;
	}
	rc = locus_gracefit_profile_init(&p, t->n_layers, t->n_experts, 1, &err);
	/* the first FIT_KEEP tokens of each layer score the layer objective */
	if (!rc && !a->no_fallback)
		rc = locus_gracefit_profile_keep_tokens(&p, t->k, FIT_KEEP, &err);
	if (!rc)
		rc = locus_gracefit_profile_add_trace(&p, t, a->use_gen, &err);
	if (rc) {
		ret = locusctl_fail(&err, rc);
		goto out;
	}
	li = calloc(p.n_layers, sizeof(*li));
	if (!li) {
		ret = locusctl_fail(NULL, ENOMEM);
		goto out;
	}
	rc = locus_gracefit_fit(&p, &a->topo, &o, &blob, &len, li, &err);
	if (!rc)
		rc = locus_tbl_write_file(a->out, blob, len, &err);
	if (rc) {
		ret = locusctl_fail(&err, rc);
		goto out;
	}
	printf("grace fit: %u requests, %llu token-layers, %u layers x %u experts on %u x %u "
	       "GPUs -> %s\n", t->n_requests, (unsigned long long)p.n_tokens, p.n_layers,
	       p.n_experts, a->topo.n_nodes, a->topo.gpus_per_node, a->out);
	printf("layer      r  U(r)  U(0)  skew  ->  skew'  n_rep hot replicas  cost grouped "
	       "packed\n");
	for (uint32_t l = 0; l < p.n_layers; l++) {
		printf("%5u  %5.3f %5.3f %5.3f %5.2f  -> %5.2f  %5u %3u %8u  %12.3f %6.3f%s\n", l,
		       li[l].r, li[l].U, li[l].U_uniform, li[l].rho, li[l].rho_after,
		       li[l].n_rep, li[l].n_hot, li[l].n_replicas, li[l].cost_grouped,
		       li[l].cost_packed, li[l].fallback ? "  packed (EPLB's packing)" : "");
		fell += li[l].fallback;
	}
	printf("%u of %u layers fell back to EPLB's packing (objective: %g x k x (skew - 1) "
	       "+ %g x rows off GPU + %g x rows off node%s)\n", fell, p.n_layers,
	       a->peak_weight > 0 ? a->peak_weight : 1, a->cost_gpu > 0 ? a->cost_gpu : 1,
	       a->cost_node > 0 ? a->cost_node : 1, a->no_fallback ? "; --no-fallback" : "");
	ret = 0;
out:
	free(blob);
	free(li);
	locus_gracefit_profile_free(&p);
	locus_trace_free(t);
	return ret;
}

/* ---- show --------------------------------------------------------------- */

static int load_table(const char *path, void **buf, const void **pl, size_t *plen,
		      struct locus_error *err)
{
	size_t len;
	int rc = locus_tbl_read_file(path, LOCUS_TBL_GRACE, buf, &len, err);

	if (rc)
		return rc;
	rc = locus_grace_blob_check(*buf, len, pl, plen, err);
	if (rc) {
		free(*buf);
		*buf = NULL;
	}
	return rc;
}

static int cmd_show(const char *sub, struct args *a)
{
	struct locus_error err = { 0 };
	struct locus_grace_view v;
	const void *pl;
	size_t plen;
	void *buf = NULL;
	uint32_t L, E, N, R;
	int rc;

	if (a->n_pos != 1)
		return usage_err(sub, "show TABLE");
	rc = load_table(a->pos[0], &buf, &pl, &plen, &err);
	if (rc)
		return locusctl_fail(&err, rc);
	locus_grace_view_init(&v, (void *)pl, plen, NULL);
	L = v.dims->n_layers;
	E = v.dims->n_experts;
	N = locus_grace_n_ranks(v.dims);
	R = v.dims->max_replicas;
	printf("GRACE table %s: %u layers x %u experts, %u nodes x %u GPUs, capacity %u, "
	       "replica budget %u\n", a->pos[0], L, E, v.dims->n_nodes,
	       v.dims->gpus_per_node, v.dims->capacity, v.dims->replica_budget);
	for (uint32_t l = 0; l < L; l++) {
		const float *pred = v.pred_load + (size_t)l * N;

		printf("layer %u: predicted skew %.3f\n", l, layer_rho(pred, N));
		for (uint32_t r = 0; r < N; r++) {
			printf("  rank %3u (node %u) W'=%-10.1f experts:", r,
			       r / v.dims->gpus_per_node, (double)pred[r]);
			for (uint32_t e = 0; e < E; e++)
				if (v.primary[(size_t)l * E + e] == r)
					printf(" %u", e);
			printf("  replicas:");
			for (uint32_t e = 0; e < E; e++)
				for (uint32_t i = 0; i < R; i++)
					if (v.replica[((size_t)l * E + e) * R + i] == r)
						printf(" %u", e);
			printf("\n");
		}
	}
	free(buf);
	return 0;
}

/* ---- EPLB ---------------------------------------------------------------- */

static int cmd_eplb_export(const char *sub, struct args *a)
{
	struct locus_error err = { 0 };
	const void *pl;
	size_t plen;
	void *buf = NULL;
	char *json = NULL;
	FILE *f = stdout;
	int rc;

	if (a->n_pos != 1)
		return usage_err(sub, "eplb-export TABLE [-o FILE.json]");
	rc = load_table(a->pos[0], &buf, &pl, &plen, &err);
	if (!rc)
		rc = locus_gracefit_eplb_export(pl, plen, &json, &err);
	free(buf);
	if (rc)
		return locusctl_fail(&err, rc);
	if (a->out && !(f = fopen(a->out, "w"))) {
		locus_error_set(&err, errno, "%s: %s", a->out, strerror(errno));
		free(json);
		return locusctl_fail(&err, err.code);
	}
	rc = fputs(json, f) < 0 ? -EIO : 0;
	if (f != stdout && fclose(f))
		rc = -EIO;
	free(json);
	if (rc) {
		locus_error_set(&err, EIO, "writing %s failed", a->out ? a->out : "stdout");
		return locusctl_fail(&err, EIO);
	}
	return 0;
}

static int cmd_eplb_import(const char *sub, struct args *a)
{
	struct locus_error err = { 0 };
	char *json = NULL;
	void *blob = NULL;
	size_t len = 0, blen = 0;
	int rc;

	if (a->n_pos != 1 || !a->topo.n_nodes || !a->topo.gpus_per_node || !a->out)
		return usage_err(sub, "eplb-import FILE.json --nodes N --gpus G -o TABLE");
	rc = read_text(a->pos[0], &json, &len, &err);
	if (!rc)
		rc = locus_gracefit_eplb_import(json, len, &a->topo, NULL, &blob, &blen, &err);
	if (!rc)
		rc = locus_tbl_write_file(a->out, blob, blen, &err);
	free(json);
	free(blob);
	if (rc)
		return locusctl_fail(&err, rc);
	printf("eplb-import: %s -> %s\n", a->pos[0], a->out);
	return 0;
}

/* ---- rebalance ------------------------------------------------------------ */

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
	(void)sig;
	stop_flag = 1;
}

struct live {
	struct locus_shm *shm;
	struct locus_counters *ctr;
	const struct locus_ctr_info *info;
	uint32_t idx;
	uint64_t *now, *prev;
};

static void live_close(struct live *lv)
{
	free(lv->now);
	free(lv->prev);
	locus_counters_close(lv->ctr);
	locus_shm_detach(lv->shm);
}

static int live_open(struct live *lv, const char *instance, const char *name, uint32_t L,
		     uint32_t E, struct locus_error *err)
{
	void *reg;
	size_t size;
	int rc, idx;

	memset(lv, 0, sizeof(*lv));
	/* counters only: read-only, like locus-stat; pushes go over the control socket */
	rc = locus_shm_attach(instance, LOCUS_SHM_RDONLY | LOCUS_SHM_ALLOW_GROUP, &lv->shm, err);
	if (rc)
		return rc;
	reg = locus_shm_region(lv->shm, LOCUS_REGION_COUNTERS, &size);
	if (!reg) {
		rc = locus_error_set(err, LOCUS_ESTATE, "segment %s has no counters region",
				     instance);
		goto err_close;
	}
	rc = locus_counters_open(reg, size, LOCUS_CTR_RDONLY, &lv->ctr, err);
	if (rc)
		goto err_close;
	idx = name ? locus_counters_find(lv->ctr, name) :
		     locus_counters_find(lv->ctr, "grace_expert_tokens");
	if (!name && idx < 0)
		idx = locus_counters_find(lv->ctr, "expert_tokens");
	if (idx < 0) {
		rc = locus_error_set(err, ENOENT, "segment %s has no counter %s", instance,
				     name ? name : "grace_expert_tokens or expert_tokens");
		goto err_close;
	}
	lv->idx = (uint32_t)idx;
	lv->info = locus_counters_info(lv->ctr, lv->idx);
	if (!lv->info || lv->info->kind != LOCUS_CTR_COUNTER || lv->info->ndims != 2 ||
	    lv->info->dim[0] < L || lv->info->dim[1] < E) {
		rc = locus_error_set(err, LOCUS_ERANGE, "counter %s is not a [layers >= %u]"
				     "[experts >= %u] counter", lv->info ? lv->info->name : "?",
				     L, E);
		goto err_close;
	}
	lv->now = calloc(lv->info->n_elems, sizeof(uint64_t));
	lv->prev = calloc(lv->info->n_elems, sizeof(uint64_t));
	if (!lv->now || !lv->prev) {
		rc = locus_error_set(err, ENOMEM, "rebalance: out of memory");
		goto err_close;
	}
	rc = locus_counters_sum(lv->ctr, lv->idx, lv->prev, lv->info->n_elems);
	if (rc < 0) {
		locus_error_set(err, -rc, "reading counter %s failed", lv->info->name);
		goto err_close;
	}
	return 0;

err_close:
	live_close(lv);
	return rc;
}

/* This interval's loads W[L][E]; returns their total, < 0 on a read error. */
static double live_loads(struct live *lv, uint32_t L, uint32_t E, double *W)
{
	double tot;

	if (locus_counters_sum(lv->ctr, lv->idx, lv->now, lv->info->n_elems) < 0)
		return -1;
	tot = locus_gracefit_counts_delta(lv->prev, lv->now, L, E, lv->info->dim[1], W);
	memcpy(lv->prev, lv->now, lv->info->n_elems * sizeof(uint64_t));
	return tot;
}

static void sleep_s(double s)
{
	struct timespec ts = { .tv_sec = (time_t)s,
			       .tv_nsec = (long)((s - floor(s)) * 1e9) };

	while (nanosleep(&ts, &ts) && errno == EINTR && !stop_flag)
		;
}

/* One refit round's line: the gain the plan predicts against the copies it moves. */
static void print_plan(uint32_t round, double tot, uint32_t n_win,
		       const struct locus_gracefit_rebalance *rp, uint32_t max_moves)
{
	printf("rebalance %u: %.0f tokens in the window (%u intervals), skew %.3f, refit %.3f "
	       "(%.3f with every layer, %u moves): gain %.3f for %u moves", round, tot, n_win,
	       rp->rho_now, rp->rho_after, rp->rho_full, rp->moves_full,
	       rp->rho_now - rp->rho_after, rp->moves);
	if (max_moves != UINT32_MAX)
		printf(" of %u allowed", max_moves);
	printf(", %u layers", rp->layers_changed);
	if (rp->swaps)
		printf(", %u primary swaps", rp->swaps);
}

/*
 * The co-activation of a calibration trace (its prompt tokens), for the
 * primary swaps: prof->A [L][E][E]. The trace must have L layers, E experts.
 */
static int coactivation_of(const char *path, uint32_t n_experts, uint32_t L, uint32_t E,
			   struct locus_gracefit_profile *prof, struct locus_error *err)
{
	struct locus_trace_opts to = { .n_experts = n_experts };
	struct locus_trace *t = NULL;
	int rc = locus_trace_load(path, &to, &t, err);

	if (rc)
		return rc;
	if (t->n_layers != L || t->n_experts != E)
		rc = locus_error_set(err, LOCUS_ERANGE, "%s: %u layers x %u experts, the table "
				     "has %u x %u", path, t->n_layers, t->n_experts, L, E);
	if (!rc)
		rc = locus_gracefit_profile_init(prof, L, E, 1, err);
	if (!rc)
		rc = locus_gracefit_profile_add_trace(prof, t, 0, err);
	locus_trace_free(t);
	return rc;
}

static int cmd_rebalance(const char *sub, struct args *a)
{
	struct locus_gracefit_window win = { 0 };
	struct locus_gracefit_profile prof = { 0 };
	struct locus_error err = { 0 };
	struct live lv;
	void *cur = NULL;
	const void *pl;
	size_t plen, cur_len;
	double *W = NULL;
	uint32_t L, E;
	int rc, ret = 1;

	if (!a->instance || !a->table || a->interval <= 0 || a->n_pos)
		return usage_err(sub, "rebalance -i INSTANCE --table TABLE --interval S");
	rc = locus_tbl_read_file(a->table, LOCUS_TBL_GRACE, &cur, &cur_len, &err);
	if (!rc)
		rc = locus_grace_blob_check(cur, cur_len, &pl, &plen, &err);
	if (rc) {
		free(cur);
		return locusctl_fail(&err, rc);
	}
	L = ((const struct locus_grace_dims *)pl)->n_layers;
	E = ((const struct locus_grace_dims *)pl)->n_experts;
	rc = locus_gracefit_window_init(&win, L, E, a->window, a->decay, &err);
	if (rc) {
		free(cur);
		return locusctl_fail(&err, rc);
	}
	rc = live_open(&lv, a->instance, a->counter, L, E, &err);
	if (rc) {
		locus_gracefit_window_free(&win);
		free(cur);
		return locusctl_fail(&err, rc);
	}
	W = calloc((size_t)L * E, sizeof(*W));
	if (!W) {
		ret = locusctl_fail(NULL, ENOMEM);
		goto out;
	}
	if (a->trace) {
		rc = coactivation_of(a->trace, a->n_experts, L, E, &prof, &err);
		if (rc) {
			ret = locusctl_fail(&err, rc);
			goto out;
		}
	}
	if (a->swaps == UINT32_MAX)
		a->swaps = a->trace ? LOCUS_GRACEFIT_SWAPS : 0;
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	stop_flag = 0;
	for (uint32_t round = 1; !stop_flag && (a->count == 0 || round <= a->count); round++) {
		struct locus_gracefit_rebalance rp;
		struct locus_push_result res;
		double tot;
		void *blob = NULL;
		size_t len;

		sleep_s(a->interval);
		if (live_loads(&lv, L, E, W) < 0) {
			locus_error_set(&err, LOCUS_ERANGE, "reading counter %s failed",
					lv.info->name);
			ret = locusctl_fail(&err, err.code);
			goto out;
		}
		locus_gracefit_window_add(&win, W);
		if (round % a->every)
			continue; /* sampled; refit every --every intervals */
		tot = locus_gracefit_window_loads(&win, W);
		if (tot == 0) {
			printf("rebalance %u: no tokens counted in the window\n", round);
			fflush(stdout);
			continue;
		}
		rc = locus_gracefit_rebalance_plan_swaps(pl, plen, W, prof.A, a->swaps,
							 a->max_moves, &blob, &len, &rp, &err);
		if (rc) {
			ret = locusctl_fail(&err, rc);
			goto out;
		}
		print_plan(round, tot, win.n, &rp, a->max_moves);
		if (!locus_gracefit_should_push(rp.rho_now, rp.rho_after, a->threshold)) {
			printf(": below the %.1f%% threshold, kept\n", a->threshold * 100);
			fflush(stdout);
			free(blob);
			continue;
		}
		rc = locus_push_table(a->instance, LOCUS_GRACE_TABLE_CHANNEL, blob, len,
				      (uint32_t)a->timeout_ms, &res, &err);
		if (rc < 0) {
			printf("\n");
			free(blob);
			ret = locusctl_fail(&err, rc);
			goto out;
		}
		if (res.wait.n_refused || res.timed_out) {
			printf("\n");
			fflush(stdout);
			fprintf(stderr, "locusctl: rebalance %u: generation %llu %s%s; the table "
				"in use stays the base of the next round\n", round,
				(unsigned long long)res.generation,
				res.timed_out ? "not adopted in time" : "refused: ",
				res.timed_out ? "" : res.wait.refused_msg);
			free(blob);
			continue;
		}
		if (a->out && (rc = locus_tbl_write_file(a->out, blob, len, &err))) {
			printf("\n");
			free(blob);
			ret = locusctl_fail(&err, rc);
			goto out;
		}
		printf(": pushed generation %llu\n", (unsigned long long)res.generation);
		fflush(stdout);
		free(cur);
		cur = blob;
		locus_grace_blob_check(cur, len, &pl, &plen, NULL);
	}
	ret = 0;
out:
	free(W);
	live_close(&lv);
	locus_gracefit_profile_free(&prof);
	locus_gracefit_window_free(&win);
	free(cur);
	return ret;
}

int locusctl_grace_main(const char *subcmd, int argc, char **argv)
{
	struct args a;
	int rc;

	if (!subcmd)
		return usage_err("grace", "no subcommand");
	rc = parse_args(subcmd, argc, argv, &a);
	if (rc)
		return rc;
	if (!strcmp(subcmd, "fit"))
		return cmd_fit(subcmd, &a);
	if (!strcmp(subcmd, "show"))
		return cmd_show(subcmd, &a);
	if (!strcmp(subcmd, "eplb-export"))
		return cmd_eplb_export(subcmd, &a);
	if (!strcmp(subcmd, "eplb-import"))
		return cmd_eplb_import(subcmd, &a);
	if (!strcmp(subcmd, "rebalance"))
		return cmd_rebalance(subcmd, &a);
	return usage_err(subcmd, "not a GRACE subcommand");
}
