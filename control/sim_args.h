/* SPDX-License-Identifier: MIT */
/*
 * What both simulate commands (sim_ctl.c: decode serving; sim_moe_ctl.c: the
 * MoE layer) read the same way: usage errors, numbers, comma lists, and the
 * model preset with its overrides checked against the trace's shape.
 */
#ifndef SIM_ARGS_H
#define SIM_ARGS_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "locus_sim.h"
#include "locus_trace.h"

/* "CMD: <fmt with arg>" and the usage hint on stderr; returns 2 (the exit status). */
int sim_usage_err(const char *cmd, const char *fmt, const char *arg);

/* A finite double in [min, max], the whole string: 0, or -1. */
int sim_parse_double(const char *s, double min, double max, double *v);

/*
 * A comma list ("a,b,c", shorter than cap bytes, no empty item): each(item,
 * arg) in order. 0, or -1 when the list is malformed or each() returned non-0.
 */
int sim_split_list(const char *s, size_t cap, int (*each)(const char *item, void *arg),
		   void *arg);

/* --hidden, --moe-intermediate, --dtype-bytes: 0 = the preset's. */
struct sim_model_over {
	uint64_t hidden, moe_inter, dtype_bytes;
};
enum sim_model_opt { SIM_OPT_HIDDEN, SIM_OPT_MOE_INTER, SIM_OPT_DTYPE };

/* One of those options' value into ov: 0, or 2 after a usage error. */
int sim_model_over_parse(const char *cmd, enum sim_model_opt which, const char *a,
			 struct sim_model_over *ov);

/* What both commands take: their values, and the defaults (SIM_COMMON_DEFAULTS). */
struct sim_common {
	const char *trace, *fit_trace, *model, *gpu;
	uint64_t seed;
	int json, allow_shape;
	struct sim_model_over ov;
};
#define SIM_COMMON_DEFAULTS { .model = "deepseek-v2-lite", .gpu = "h100-sxm", .seed = 1 }

/*
 * An option of struct sim_common by its long name ("trace", "fit-trace",
 * "model", "gpu", "seed", "json", "allow-shape-mismatch", "hidden",
 * "moe-intermediate", "dtype-bytes") with its value a: 1 taken, 0 not one
 * of them, 2 after a usage error.
 */
int sim_common_opt(const char *cmd, const char *name, const char *a, struct sim_common *c);

/*
 * getopt_long's default case: c and the option's long name (NULL if none)
 * given to sim_common_opt; 0 taken, or 2 after a usage error (an unknown
 * option, '?', or a bad value).
 */
int sim_common_getopt(const char *cmd, int c, const char *name, const char *a, char **argv,
		      struct sim_common *co);

/* ,"key":"s" (or ,"key":null for NULL) after a JSON object's first member. */
void sim_json_field(FILE *f, const char *key, const char *s);

/*
 * The presets named (model, gpu) into *m and *gpu, the trace's shape
 * checked against the model's (unless allow_shape; hint ends the message),
 * the overrides applied to *m. 0; 2 for an unknown name, 1 for a shape
 * mismatch (the message printed).
 */
int sim_model_resolve(const char *cmd, const char *model, const char *gpu,
		      const struct locus_trace *t, int allow_shape, const char *hint,
		      const struct sim_model_over *ov, struct locus_sim_model *m,
		      const struct locus_sim_gpu **gpu_out);

#endif /* SIM_ARGS_H */
