/* SPDX-License-Identifier: MIT */
/*
 * Where a test finds the repository: $LOCUS_SRCDIR, else three levels above
 * the test program (<root>/<build>/tests/<test>), so tests run from any
 * directory. Call locus_test_find_root(argv[0]) first in main().
 */
#ifndef LOCUS_TEST_PATHS_H
#define LOCUS_TEST_PATHS_H

void locus_test_find_root(const char *argv0);

/* The repository root ("." until found). */
const char *locus_test_root(void);

/* tests/data/calib_sample.jsonl under the root. */
const char *locus_test_sample_path(void);

/* The real traces (../shared/data/README): $LOCUS_DATA_DIR, else ../shared/data beside the root. */
const char *locus_test_data_dir(void);

#endif /* LOCUS_TEST_PATHS_H */
