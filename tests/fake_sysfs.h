/* SPDX-License-Identifier: MIT */
/*
 * A fake sysfs tree in a temporary directory for the device-choice tests
 * (the code under test takes its sysfs root as an argument): directories,
 * files and symlinks by path under the root.
 */
#ifndef LOCUS_TEST_FAKE_SYSFS_H
#define LOCUS_TEST_FAKE_SYSFS_H

extern char fs_root[64];

/* A new empty root /tmp/locus-<tag>-XXXXXX in fs_root: 0, or -1. */
int fs_make_root(const char *tag);
/* Remove the tree: 0, or -1. */
int fs_remove_root(void);
/* Directory rel and its parents. */
void fs_mk(const char *rel);
/* File rel holding text (its directory exists). */
void fs_put(const char *rel, const char *text);
/* A symlink at rel (replacing one there) to target: absolute if it starts with '/', else under the root. */
void fs_link(const char *target, const char *rel);

#endif /* LOCUS_TEST_FAKE_SYSFS_H */
