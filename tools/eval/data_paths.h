/* SPDX-License-Identifier: MIT */
/*
 * Where a test or an evaluation finds the repository and the real traces:
 * the root is $LOCUS_SRCDIR, else the nearest directory above the program
 * (<root>/<build>/<folder>/.../<program>) that holds
 * tests/data/calib_sample.jsonl, so programs run from any directory. Call
 * locus_data_find_root(argv[0]) first in main().
 */
#ifndef LOCUS_DATA_PATHS_H
#define LOCUS_DATA_PATHS_H

void locus_data_find_root(const char *argv0);

/* The repository root ("." until found). */
const char *locus_data_root(void);

/* tests/data/calib_sample.jsonl under the root. */
const char *locus_data_sample_path(void);

/* The real traces (../shared/data/README): $LOCUS_DATA_DIR, else ../shared/data beside the root. */
const char *locus_data_dir(void);

/* gpt-oss-20b's decode trace under locus_data_dir(). */
const char *locus_data_gptoss_path(void);

/*
 * 1 when path does not exist, after a line saying tool skips what (the
 * figures need the real traces), else 0: an evaluation's check before it
 * loads a model's data.
 */
int locus_data_absent(const char *tool, const char *path, const char *what);

#endif /* LOCUS_DATA_PATHS_H */
