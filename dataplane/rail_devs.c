// SPDX-License-Identifier: MIT
/* The RDMA device of each rail (locus_rail_devs.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "locus_err_priv.h"
#include "locus_rail_devs.h"

#define MAX_DEVS 64

/* auto without gpu_pci: one device, as rdma_near_pci / rdma_near_numa say. */
static int auto_one(const struct locus_config *cfg, const char *root, struct locus_rail_devs *out,
		    struct locus_error *err)
{
	struct locus_verbs_devinfo devs[MAX_DEVS];
	int n, i;

	n = locus_verbs_dev_list(root, devs, MAX_DEVS);
	if (n <= 0)
		return locus_error_set(err, ENODEV, "rdma_device = auto: no RDMA device under "
				       "%s/class/infiniband", root);
	i = locus_verbs_dev_pick(devs, (unsigned)LOCUS_MIN(n, MAX_DEVS), "auto", root,
				 cfg->rdma_near_pci[0] ? cfg->rdma_near_pci : NULL,
				 cfg->rdma_near_numa, err);
	if (i < 0)
		return i;
	snprintf(out->name[0], sizeof(out->name[0]), "%s", devs[i].name);
	out->n = 1;
	return 0;
}

/*
 * auto with gpu_pci: the device nearest each GPU; a rail per distinct device
 * in the order of the GPUs' first appearance.
 */
static int auto_by_gpu(const struct locus_config *cfg, const char *root, int rails,
		       struct locus_rail_devs *out, struct locus_error *err)
{
	struct locus_verbs_devinfo devs[MAX_DEVS];
	const char *gpus[LOCUS_CFG_MAX_GPUS];
	unsigned gpu_dev[LOCUS_CFG_MAX_GPUS], n_devs, rail_dev[LOCUS_CFG_MAX_GPUS], n = 0;
	uint32_t want = cfg->nodes[cfg->node_id].n_rails;
	char list[LOCUS_CFG_MAX_GPUS * (LOCUS_VERBS_NAME_MAX + 1)] = "";
	size_t at = 0;
	int ret;

	for (uint32_t g = 0; g < cfg->n_gpu_pci; g++)
		gpus[g] = cfg->gpu_pci[g];
	ret = locus_verbs_dev_near_gpus(root, gpus, cfg->n_gpu_pci, devs, MAX_DEVS, &n_devs,
					gpu_dev, err);
	if (ret < 0) {
		char why[sizeof(err->msg)];

		snprintf(why, sizeof(why), "%s", err->msg);
		return locus_error_set(err, -ret, "rdma_device = auto with gpu_pci: %s", why);
	}
	for (uint32_t g = 0; g < cfg->n_gpu_pci; g++) {
		unsigned r = 0;

		while (r < n && rail_dev[r] != gpu_dev[g])
			r++;
		if (r == n) {
			rail_dev[n++] = gpu_dev[g];
			if (at < sizeof(list))
				at += (size_t)snprintf(list + at, sizeof(list) - at, "%s%s",
						       r ? " " : "", devs[gpu_dev[g]].name);
		}
		out->gpu_rail[g] = (uint8_t)r;
	}
	if (rails && n != want)
		return locus_error_set(err, ERANGE, "rdma_device = auto: gpu_pci's %u GPUs are "
				       "nearest to %u RDMA device(s), rails in this order: %s; "
				       "node.%u lists %u address(es): list one per rail, in that "
				       "order", cfg->n_gpu_pci, n, list, cfg->node_id, want);
	out->n = LOCUS_MIN(n, (unsigned)LOCUS_CFG_MAX_RAILS);
	for (unsigned r = 0; r < out->n; r++)
		snprintf(out->name[r], sizeof(out->name[r]), "%s", devs[rail_dev[r]].name);
	out->n_gpus = rails ? cfg->n_gpu_pci : 0;
	return 0;
}

int locus_rail_devs_resolve(const struct locus_config *cfg, const char *sysfs_root, int rails,
			    struct locus_rail_devs *out, struct locus_error *err)
{
	memset(out, 0, sizeof(*out));
	if (!strcmp(cfg->rdma_device, "none"))
		return 0;
	if (strcmp(cfg->rdma_device, "auto")) {
		out->n = LOCUS_MIN(cfg->n_rdma_devices, (uint32_t)LOCUS_CFG_MAX_RAILS);
		for (uint32_t r = 0; r < out->n; r++)
			snprintf(out->name[r], sizeof(out->name[r]), "%s", cfg->rdma_devices[r]);
		return 0;
	}
	if (!cfg->n_gpu_pci)
		return auto_one(cfg, sysfs_root, out, err);
	return auto_by_gpu(cfg, sysfs_root, rails, out, err);
}
