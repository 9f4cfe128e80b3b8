// SPDX-License-Identifier: MIT
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "fake_sysfs.h"

char fs_root[64];

int fs_make_root(const char *tag)
{
	snprintf(fs_root, sizeof(fs_root), "/tmp/locus-%s-XXXXXX", tag);
	return mkdtemp(fs_root) ? 0 : -1;
}

int fs_remove_root(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fs_root);
	return system(cmd) == 0 ? 0 : -1;
}

void fs_mk(const char *rel)
{
	char p[512], *s;

	snprintf(p, sizeof(p), "%s/%s", fs_root, rel);
	for (s = p + strlen(fs_root) + 1; (s = strchr(s, '/')); s++) {
		*s = '\0';
		mkdir(p, 0755);
		*s = '/';
	}
	mkdir(p, 0755);
}

void fs_put(const char *rel, const char *text)
{
	char p[512];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", fs_root, rel);
	f = fopen(p, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

void fs_link(const char *target, const char *rel)
{
	char t[512], p[512];

	if (target[0] == '/')
		snprintf(t, sizeof(t), "%s", target);
	else
		snprintf(t, sizeof(t), "%s/%s", fs_root, target);
	snprintf(p, sizeof(p), "%s/%s", fs_root, rel);
	unlink(p);
	assert_int_equal(symlink(t, p), 0);
}
