// SPDX-License-Identifier: MIT
/*
 * RDMA device discovery from sysfs. The root is a parameter so the host unit
 * tests feed a fake tree; nothing here opens a device.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locus_err_priv.h"
#include "locus_verbs.h"

/* Read the first line of a small text file; returns its length or -errno. */
static int read_line(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");
	size_t n;

	if (!f)
		return -errno;
	if (!fgets(buf, (int)len, f)) {
		fclose(f);
		return -EIO;
	}
	fclose(f);
	n = strcspn(buf, "\n");
	buf[n] = '\0';
	return (int)n;
}

static int cmp_dev(const void *a, const void *b)
{
	return strcmp(((const struct locus_verbs_devinfo *)a)->name,
		      ((const struct locus_verbs_devinfo *)b)->name);
}

static unsigned count_ports(const char *dir)
{
	char path[PATH_MAX];
	struct dirent *de;
	unsigned n = 0;
	DIR *d;

	if (snprintf(path, sizeof(path), "%s/ports", dir) >= (int)sizeof(path))
		return 0;
	d = opendir(path);
	if (!d)
		return 0;
	while ((de = readdir(d)))
		if (de->d_name[0] >= '1' && de->d_name[0] <= '9')
			n++;
	closedir(d);
	return n;
}

static void fill_dev(const char *root, const char *name, struct locus_verbs_devinfo *di)
{
	char dir[PATH_MAX], path[PATH_MAX], line[32], *end;
	long v;

	memset(di, 0, sizeof(*di));
	di->numa_node = -1;
	if (snprintf(di->name, sizeof(di->name), "%s", name) >= (int)sizeof(di->name) ||
	    snprintf(dir, sizeof(dir), "%s/class/infiniband/%s", root, name) >= (int)sizeof(dir))
		return;
	di->n_ports = count_ports(dir);
	/* device -> ../../../0000:3b:00.0: resolve it to compare PCI ancestry */
	if (snprintf(path, sizeof(path), "%s/device", dir) >= (int)sizeof(path) || !realpath(path, dir))
		return; /* software device (rxe, siw): no parent */
	if (snprintf(di->pci, sizeof(di->pci), "%s", dir) >= (int)sizeof(di->pci) ||
	    snprintf(path, sizeof(path), "%s/numa_node", dir) >= (int)sizeof(path))
		return;
	if (read_line(path, line, sizeof(line)) > 0) {
		errno = 0;
		v = strtol(line, &end, 10);
		if (!errno && *end == '\0' && v >= -1 && v < 4096)
			di->numa_node = (int)v;
	}
}

int locus_verbs_dev_list(const char *sysfs_root, struct locus_verbs_devinfo *out, unsigned max)
{
	char path[PATH_MAX];
	struct dirent *de;
	unsigned n = 0;
	DIR *d;

	if (snprintf(path, sizeof(path), "%s/class/infiniband", sysfs_root) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	d = opendir(path);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.' || strlen(de->d_name) >= LOCUS_VERBS_NAME_MAX)
			continue;
		if (n < max)
			fill_dev(sysfs_root, de->d_name, &out[n]);
		n++;
	}
	closedir(d);
	qsort(out, LOCUS_MIN(n, max), sizeof(*out), cmp_dev);
	return (int)n;
}

/* Number of leading path components two resolved sysfs paths share. */
static unsigned common_components(const char *a, const char *b)
{
	unsigned n = 0;

	while (*a && *a == *b) {
		a++;
		b++;
		if ((*a == '/' || *a == '\0') && (*b == '/' || *b == '\0'))
			n++;
	}
	return n;
}

static int resolve_pci(const char *root, const char *bdf, char *out, size_t len)
{
	char path[PATH_MAX], buf[PATH_MAX];

	if (strchr(bdf, '/') || snprintf(path, sizeof(path), "%s/bus/pci/devices/%s", root, bdf) >=
	    (int)sizeof(path))
		return -EINVAL;
	if (!realpath(path, buf))
		return -errno;
	return snprintf(out, len, "%s", buf) >= (int)len ? -ENAMETOOLONG : 0;
}

int locus_verbs_dev_pick(const struct locus_verbs_devinfo *devs, unsigned n, const char *want,
			 const char *sysfs_root, const char *near_pci, int near_numa,
			 struct locus_error *err)
{
	char ref[PATH_MAX] = "";
	int best = -1;
	unsigned i, best_score = 0;

	if (n == 0)
		return locus_error_set(err, ENODEV, "no RDMA device under %s/class/infiniband",
				       sysfs_root);
	if (want && strcmp(want, "auto") != 0) {
		for (i = 0; i < n; i++)
			if (!strcmp(devs[i].name, want))
				return (int)i;
		return locus_error_set(err, ENODEV, "RDMA device '%s' not found (%u devices)", want, n);
	}
	if (near_pci && resolve_pci(sysfs_root, near_pci, ref, sizeof(ref)) < 0)
		return locus_error_set(err, ENODEV, "PCI device %s not found under %s/bus/pci/devices",
				       near_pci, sysfs_root);
	for (i = 0; i < n; i++) {
		/* score: PCI ancestry first, NUMA match second; names are sorted, so ties keep the lowest */
		unsigned score = 1;

		if (ref[0] && devs[i].pci[0])
			score += 4 * common_components(ref, devs[i].pci);
		if (near_numa >= 0 && devs[i].numa_node == near_numa)
			score += 2;
		if (best < 0 || score > best_score) {
			best = (int)i;
			best_score = score;
		}
	}
	return best;
}

int locus_verbs_gid_ipv4(const char *sysfs_root, const char *dev, unsigned port,
			 const struct in_addr *want, struct in_addr *addr)
{
	char path[PATH_MAX], line[128];
	static const uint8_t v4pfx[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	struct in6_addr g;
	int i;

	if (strchr(dev, '/'))
		return -EINVAL;
	for (i = 0; i < 256; i++) {
		if (snprintf(path, sizeof(path), "%s/class/infiniband/%s/ports/%u/gids/%d",
			     sysfs_root, dev, port, i) >= (int)sizeof(path) ||
		    read_line(path, line, sizeof(line)) < 0)
			break;
		if (inet_pton(AF_INET6, line, &g) != 1 || memcmp(g.s6_addr, v4pfx, 12))
			continue;
		if (snprintf(path, sizeof(path), "%s/class/infiniband/%s/ports/%u/gid_attrs/types/%d",
			     sysfs_root, dev, port, i) >= (int)sizeof(path) ||
		    read_line(path, line, sizeof(line)) < 0 || strcasecmp(line, "RoCE v2"))
			continue;
		if (want && memcmp(&want->s_addr, g.s6_addr + 12, 4))
			continue;
		memcpy(&addr->s_addr, g.s6_addr + 12, 4);
		return i;
	}
	return -ENOENT;
}
