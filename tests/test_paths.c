// SPDX-License-Identifier: MIT
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_paths.h"

static char repo_root[1024] = ".";

void locus_test_find_root(const char *argv0)
{
	const char *src = getenv("LOCUS_SRCDIR");
	char path[4096];

	if (src && *src) {
		snprintf(repo_root, sizeof(repo_root), "%s", src);
		return;
	}
	if (!realpath(argv0, path))
		return;
	for (int up = 0; up < 3; up++) {
		char *slash = strrchr(path, '/');

		if (!slash)
			return;
		*slash = '\0';
	}
	if (!path[0])
		strcpy(path, "/");
	if (strlen(path) < sizeof(repo_root))
		memcpy(repo_root, path, strlen(path) + 1);
}

const char *locus_test_root(void)
{
	return repo_root;
}

const char *locus_test_sample_path(void)
{
	static char buf[4200];

	snprintf(buf, sizeof(buf), "%s/tests/data/calib_sample.jsonl", repo_root);
	return buf;
}

const char *locus_test_data_dir(void)
{
	static char def[1100];
	const char *d = getenv("LOCUS_DATA_DIR");

	if (d && *d)
		return d;
	snprintf(def, sizeof(def), "%s/../shared/data", repo_root);
	return def;
}
