/* SPDX-License-Identifier: MIT */
/*
 * A checker for the Prometheus text exposition format (0.0.4) as tests
 * need it: every sample line is `name{label="value",...} value`, every
 * metric family has # HELP then # TYPE before its samples, families are not
 * repeated, counters end in _total, and each histogram series has
 * cumulative buckets with increasing `le`, ending at le="+Inf" equal to its
 * _count, plus a _sum.
 */
#ifndef STAT_TEST_PROM_H
#define STAT_TEST_PROM_H

#include <stddef.h>

struct prom_sample {
	char *key;    /* name{labels} exactly as printed */
	char *value;  /* value text */
};

struct prom_family {
	char *name, *type, *help; /* help as printed (escapes kept) */
};

struct prom_doc {
	size_t n_samples, n_fam;
	struct prom_sample *s;
	struct prom_family *f;
};

/* Parse and check text; on failure -1 and a message naming the line. */
int prom_parse(const char *text, struct prom_doc *d, char *err, size_t errlen);

/* Value of the sample printed as key, family type / help; NULL if absent. */
const char *prom_value(const struct prom_doc *d, const char *key);
const char *prom_type(const struct prom_doc *d, const char *family);
const char *prom_help(const struct prom_doc *d, const char *family);

void prom_free(struct prom_doc *d);

#endif /* STAT_TEST_PROM_H */
