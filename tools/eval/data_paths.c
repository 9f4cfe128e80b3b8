// SPDX-License-Identifier: MIT
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data_paths.h"

static char repo_root[1024] = ".";

/* True when dir holds the repository's calibration sample. */
static int is_root(const char *dir)
{
	char p[4200];

	snprintf(p, sizeof(p), "%s/tests/data/calib_sample.jsonl", dir);
	return access(p, R_OK) == 0;
}

void locus_data_find_root(const char *argv0)
{
	const char *src = getenv("LOCUS_SRCDIR");
	char path[4096];

	if (src && *src) {
		snprintf(repo_root, sizeof(repo_root), "%s", src);
		return;
	}
	if (!argv0 || !realpath(argv0, path))
		return;
	for (;;) {
		char *slash = strrchr(path, '/');

		if (!slash)
			return;
		*slash = '\0';
		if (!path[0])
			return;
		if (is_root(path))
			break;
	}
	if (strlen(path) < sizeof(repo_root))
		memcpy(repo_root, path, strlen(path) + 1);
}

const char *locus_data_root(void)
{
	return repo_root;
}

const char *locus_data_sample_path(void)
{
	static char buf[4200];

	snprintf(buf, sizeof(buf), "%s/tests/data/calib_sample.jsonl", repo_root);
	return buf;
}

const char *locus_data_dir(void)
{
	static char def[1100];
	const char *d = getenv("LOCUS_DATA_DIR");

	if (d && *d)
		return d;
	snprintf(def, sizeof(def), "%s/../shared/data", repo_root);
	return def;
}

const char *locus_data_gptoss_path(void)
{
	static char buf[4200];

	snprintf(buf, sizeof(buf), "%s/gptoss20b/gptoss20b_decode.jsonl", locus_data_dir());
	return buf;
}

int locus_data_absent(const char *tool, const char *path, const char *what)
{
	if (access(path, F_OK) < 0 && errno == ENOENT) {
		printf("%s: %s data absent (%s): skipped; the figures need the traces of "
		       "../shared/data (LOCUS_DATA_DIR to point elsewhere)\n", tool, what, path);
		return 1;
	}
	return 0;
}
