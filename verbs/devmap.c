// SPDX-License-Identifier: MIT
/*
 * rdma_device = auto with the node's GPUs: the RDMA device nearest each GPU
 * in the PCIe tree, from a sysfs root (the host tests feed a fake tree).
 * Pure file reading: nothing here opens a device. Unlike the one-device
 * choice of sysfs.c, which takes what it can read, every entry this map
 * relies on is checked and a malformed one is an error naming it: a wrong
 * map would spread the node's ranks over the wrong NICs without a word.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "locus_err_priv.h"
#include "locus_verbs.h"

#define MAX_DEPTH 64 /* path components below <root>/devices */

/* A device's place in the tree: its resolved path below <root>/devices. */
struct place {
	char path[LOCUS_VERBS_PCI_MAX]; /* "" : no PCI parent (a software device) */
	const char *comp[MAX_DEPTH];    /* into path */
	unsigned len[MAX_DEPTH];
	unsigned depth;
	int numa;                       /* -1 unknown */
};

/* "dddd:bb:dd.f" in hex (the function 0-7), nothing else. */
static int is_bdf(const char *s)
{
	static const char shape[] = "hhhh:hh:hh.f";

	if (strlen(s) != sizeof(shape) - 1)
		return 0;
	for (unsigned i = 0; shape[i]; i++) {
		if (shape[i] == 'h' && !isxdigit((unsigned char)s[i]))
			return 0;
		if (shape[i] == 'f' && (s[i] < '0' || s[i] > '7'))
			return 0;
		if ((shape[i] == ':' || shape[i] == '.') && s[i] != shape[i])
			return 0;
	}
	return 1;
}

/*
 * numa_node of the device directory dir: -1 when the file is missing (or
 * says -1), -EINVAL when it holds anything but an integer in [-1, 4095].
 */
static int read_numa(const char *dir, int *numa)
{
	char path[PATH_MAX], line[32], *end;
	FILE *f;
	long v;

	*numa = -1;
	if (snprintf(path, sizeof(path), "%s/numa_node", dir) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	f = fopen(path, "r");
	if (!f)
		return errno == ENOENT ? 0 : -errno;
	if (!fgets(line, sizeof(line), f)) {
		fclose(f);
		return -EINVAL;
	}
	fclose(f);
	line[strcspn(line, "\n")] = '\0';
	errno = 0;
	v = strtol(line, &end, 10);
	if (errno || end == line || *end || v < -1 || v > 4095)
		return -EINVAL;
	*numa = (int)v;
	return 0;
}

/*
 * Resolve the link at link_path (which must exist: the caller checked) into
 * p: the components below devices (the real path of <root>/devices, given
 * as devices/dlen) and the device's NUMA node. what names the entry in
 * errors ("GPU 3 (0000:5d:00.0)", "RDMA device mlx5_2").
 */
static int place_of(const char *link_path, const char *devices, size_t dlen, const char *what,
		    struct place *p, struct locus_error *err)
{
	char real[PATH_MAX], *s;
	int ret;

	if (!realpath(link_path, real))
		return locus_error_set(err, ENODEV, "%s: %s is a dangling link", what, link_path);
	if (strncmp(real, devices, dlen) || real[dlen] != '/' || !real[dlen + 1])
		return locus_error_set(err, EINVAL, "%s: %s leads to %s, outside %s", what,
				       link_path, real, devices);
	if (snprintf(p->path, sizeof(p->path), "%s", real + dlen + 1) >= (int)sizeof(p->path))
		return locus_error_set(err, ENAMETOOLONG, "%s: the path of %s is too long", what,
				       link_path);
	p->depth = 0;
	for (s = p->path; *s;) {
		unsigned len = (unsigned)strcspn(s, "/");

		if (p->depth == MAX_DEPTH)
			return locus_error_set(err, E2BIG, "%s: %s is more than %d levels deep",
					       what, real, MAX_DEPTH);
		p->comp[p->depth] = s;
		p->len[p->depth++] = len;
		s += len + (s[len] == '/');
	}
	ret = read_numa(real, &p->numa);
	if (ret < 0)
		return locus_error_set(err, -ret, "%s: %s/numa_node is not a NUMA node number",
				       what, real);
	return 0;
}

/* Leading components two places share (0: no common ancestor below devices). */
static unsigned shared(const struct place *a, const struct place *b)
{
	unsigned n = 0;

	while (n < a->depth && n < b->depth && a->len[n] == b->len[n] &&
	       !memcmp(a->comp[n], b->comp[n], a->len[n]))
		n++;
	return n;
}

/* Device d's place: no device link is a software device, a broken one an error. */
static int dev_place(const char *root, const char *devices, size_t dlen, const char *name,
		     struct place *p, struct locus_error *err)
{
	char link[PATH_MAX], what[LOCUS_VERBS_NAME_MAX + 16];
	struct stat st;

	memset(p, 0, sizeof(*p));
	p->numa = -1;
	snprintf(what, sizeof(what), "RDMA device %s", name);
	if (snprintf(link, sizeof(link), "%s/class/infiniband/%s/device", root, name) >=
	    (int)sizeof(link))
		return locus_error_set(err, ENAMETOOLONG, "%s: path too long", what);
	if (lstat(link, &st) < 0) {
		if (errno == ENOENT)
			return 0; /* rxe, siw: no parent device */
		return locus_error_set(err, errno, "%s: %s: %s", what, link, strerror(errno));
	}
	return place_of(link, devices, dlen, what, p, err);
}

/* GPU g's place: it must be the PCI function its address names. */
static int gpu_place(const char *root, const char *devices, size_t dlen, unsigned g,
		     const char *bdf, struct place *p, struct locus_error *err)
{
	char link[PATH_MAX], what[48];
	const char *last;
	struct stat st;
	int ret;

	memset(p, 0, sizeof(*p));
	p->numa = -1;
	if (!is_bdf(bdf))
		return locus_error_set(err, EINVAL, "GPU %u: '%s' is not a PCI address dddd:bb:dd.f",
				       g, bdf);
	snprintf(what, sizeof(what), "GPU %u (%s)", g, bdf);
	if (snprintf(link, sizeof(link), "%s/bus/pci/devices/%s", root, bdf) >= (int)sizeof(link))
		return locus_error_set(err, ENAMETOOLONG, "%s: path too long", what);
	if (lstat(link, &st) < 0)
		return locus_error_set(err, ENODEV, "%s: no such PCI device (%s: %s)", what, link,
				       strerror(errno));
	ret = place_of(link, devices, dlen, what, p, err);
	if (ret < 0)
		return ret;
	last = p->comp[p->depth - 1];
	if (p->len[p->depth - 1] != strlen(bdf) || strncasecmp(last, bdf, strlen(bdf)))
		return locus_error_set(err, EINVAL, "%s: %s leads to %s, another device", what,
				       link, p->path);
	return 0;
}

/*
 * Whether device a is nearer GPU gp than device b: the deeper common
 * ancestor, then fewer hops (only among devices that share an ancestor with
 * the GPU), then the GPU's NUMA node, then fewer GPUs already on it; equal
 * otherwise (the caller keeps the lower index, the lower name).
 */
static int nearer(const struct place *gp, const struct place *a, unsigned ta,
		  const struct place *b, unsigned tb)
{
	unsigned ca = shared(gp, a), cb = shared(gp, b);
	int na, nb;

	if (ca != cb)
		return ca > cb;
	if (ca) {
		unsigned ha = gp->depth + a->depth - 2 * ca, hb = gp->depth + b->depth - 2 * cb;

		if (ha != hb)
			return ha < hb;
	}
	na = gp->numa >= 0 && a->numa == gp->numa;
	nb = gp->numa >= 0 && b->numa == gp->numa;
	if (na != nb)
		return na;
	return ta < tb;
}

int locus_verbs_dev_near_gpus(const char *sysfs_root, const char *const *gpus, unsigned n_gpus,
			      struct locus_verbs_devinfo *devs, unsigned max, unsigned *n_devs,
			      unsigned *gpu_dev, struct locus_error *err)
{
	char devices[PATH_MAX], tmp[PATH_MAX];
	struct place *dp = NULL, gp;
	unsigned *taken = NULL;
	size_t dlen;
	int n, ret = 0;

	n = locus_verbs_dev_list(sysfs_root, devs, max);
	if (n < 0)
		return locus_error_set(err, -n, "cannot list %s/class/infiniband: %s", sysfs_root,
				       strerror(-n));
	if (n == 0)
		return locus_error_set(err, ENODEV, "no RDMA device under %s/class/infiniband",
				       sysfs_root);
	if ((unsigned)n > max)
		return locus_error_set(err, E2BIG, "%d RDMA devices under %s/class/infiniband, "
				       "more than the %u taken", n, sysfs_root, max);
	if (snprintf(tmp, sizeof(tmp), "%s/devices", sysfs_root) >= (int)sizeof(tmp) ||
	    !realpath(tmp, devices))
		return locus_error_set(err, ENOENT, "no %s/devices", sysfs_root);
	dlen = strlen(devices);
	dp = calloc((size_t)n, sizeof(*dp));
	taken = calloc((size_t)n, sizeof(*taken));
	if (!dp || !taken) {
		ret = locus_error_set(err, ENOMEM, "out of memory");
		goto out;
	}
	for (int d = 0; d < n; d++) {
		ret = dev_place(sysfs_root, devices, dlen, devs[d].name, &dp[d], err);
		if (ret < 0)
			goto out;
	}
	for (unsigned g = 0; g < n_gpus; g++) {
		unsigned best = 0;

		ret = gpu_place(sysfs_root, devices, dlen, g, gpus[g], &gp, err);
		if (ret < 0)
			goto out;
		for (unsigned d = 1; d < (unsigned)n; d++)
			if (nearer(&gp, &dp[d], taken[d], &dp[best], taken[best]))
				best = d;
		gpu_dev[g] = best;
		taken[best]++;
	}
	*n_devs = (unsigned)n;
out:
	free(dp);
	free(taken);
	return ret;
}
