// SPDX-License-Identifier: MIT
/* The command-line pieces both simulate commands share (sim_args.h). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locusctl.h"
#include "sim_args.h"
#include "trace_json.h"

int sim_usage_err(const char *cmd, const char *fmt, const char *arg)
{
	fprintf(stderr, "%s: ", cmd);
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n  (locusctl --help for the usage)\n");
	return 2;
}

void sim_json_field(FILE *f, const char *key, const char *s)
{
	fprintf(f, ",\"%s\":", key);
	if (s)
		tj_put_string(f, s);
	else
		fprintf(f, "null");
}

int sim_parse_double(const char *s, double min, double max, double *v)
{
	char *end;
	double x;

	errno = 0;
	x = strtod(s, &end);
	if (errno || !*s || *end || !isfinite(x) || x < min || x > max)
		return -1;
	*v = x;
	return 0;
}

int sim_split_list(const char *s, size_t cap, int (*each)(const char *item, void *arg),
		   void *arg)
{
	char buf[512], *save = NULL, *tok;
	size_t len = strlen(s);

	if (len >= cap || len >= sizeof(buf) || !len || s[0] == ',' || s[len - 1] == ',' ||
	    strstr(s, ",,"))
		return -1;
	memcpy(buf, s, len + 1);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
		if (each(tok, arg))
			return -1;
	return 0;
}

int sim_model_over_parse(const char *cmd, enum sim_model_opt which, const char *a,
			 struct sim_model_over *ov)
{
	switch (which) {
	case SIM_OPT_HIDDEN:
		if (locusctl_parse_u64(a, 1u << 20, &ov->hidden) || !ov->hidden)
			return sim_usage_err(cmd, "--hidden '%s': want 1..1048576", a);
		return 0;
	case SIM_OPT_MOE_INTER:
		if (locusctl_parse_u64(a, 1u << 20, &ov->moe_inter) || !ov->moe_inter)
			return sim_usage_err(cmd, "--moe-intermediate '%s': want 1..1048576", a);
		return 0;
	case SIM_OPT_DTYPE:
		if (locusctl_parse_u64(a, 8, &ov->dtype_bytes) || !ov->dtype_bytes)
			return sim_usage_err(cmd, "--dtype-bytes '%s': want 1..8", a);
		return 0;
	}
	return sim_usage_err(cmd, "%s", "unknown model option");
}

int sim_model_resolve(const char *cmd, const char *model, const char *gpu,
		      const struct locus_trace *t, int allow_shape, const char *hint,
		      const struct sim_model_over *ov, struct locus_sim_model *m,
		      const struct locus_sim_gpu **gpu_out)
{
	const struct locus_sim_model *pm = locus_sim_model_find(model);
	const struct locus_sim_gpu *pg = locus_sim_gpu_find(gpu);

	if (!pm || !pg) {
		fprintf(stderr, "%s: --%s '%s': want one of %s\n", cmd, pm ? "gpu" : "model",
			pm ? gpu : model, pm ? locus_sim_gpu_names() : locus_sim_model_names());
		return 2;
	}
	*m = *pm;
	if ((t->n_layers != m->moe_layers || t->n_experts != m->n_experts || t->k != m->top_k) &&
	    !allow_shape) {
		fprintf(stderr, "%s: the trace is %u MoE layers x %u experts, top-%u; model %s is "
			"%u x %u, top-%u%s\n", cmd, t->n_layers, t->n_experts, t->k, m->name,
			m->moe_layers, m->n_experts, m->top_k, hint);
		return 1;
	}
	if (ov->hidden)
		m->hidden = (uint32_t)ov->hidden;
	if (ov->moe_inter)
		m->moe_intermediate = (uint32_t)ov->moe_inter;
	if (ov->dtype_bytes)
		m->dtype_bytes = (uint32_t)ov->dtype_bytes;
	*gpu_out = pg;
	return 0;
}

int sim_common_opt(const char *cmd, const char *name, const char *a, struct sim_common *c)
{
	static const char *const model_opts[] = { [SIM_OPT_HIDDEN] = "hidden",
						  [SIM_OPT_MOE_INTER] = "moe-intermediate",
						  [SIM_OPT_DTYPE] = "dtype-bytes" };

	if (!strcmp(name, "trace"))
		c->trace = a;
	else if (!strcmp(name, "fit-trace"))
		c->fit_trace = a;
	else if (!strcmp(name, "model"))
		c->model = a;
	else if (!strcmp(name, "gpu"))
		c->gpu = a;
	else if (!strcmp(name, "json"))
		c->json = 1;
	else if (!strcmp(name, "allow-shape-mismatch"))
		c->allow_shape = 1;
	else if (!strcmp(name, "seed")) {
		if (locusctl_parse_u64(a, UINT64_MAX, &c->seed))
			return sim_usage_err(cmd, "--seed '%s': want a decimal u64", a);
	} else {
		for (unsigned i = 0; i < sizeof(model_opts) / sizeof(model_opts[0]); i++)
			if (!strcmp(name, model_opts[i]))
				return sim_model_over_parse(cmd, (enum sim_model_opt)i, a, &c->ov) ?
				       2 : 1;
		return 0;
	}
	return 1;
}

int sim_common_getopt(const char *cmd, int c, const char *name, const char *a, char **argv,
		      struct sim_common *co)
{
	int r = c == '?' || !name ? 0 : sim_common_opt(cmd, name, a, co);

	if (r == 1)
		return 0;
	if (r == 0)
		return sim_usage_err(cmd, "unknown or incomplete option '%s'", argv[optind - 1]);
	return 2;
}
