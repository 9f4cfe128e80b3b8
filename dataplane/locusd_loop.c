// SPDX-License-Identifier: MIT
/*
 * intra_node = verbs: rows between ranks of this node are moved by the RDMA
 * device (a loopback queue-pair pair over the registered client region)
 * instead of the engine's memcpy. The engine still writes each message's
 * header and hands the receiver its descriptor only after the copy ended.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locus_verbs.h"
#include "locus_verbs_loop.h"
#include "locusd_loop.h"
#include "locus_rail_devs.h"
#include "locus_err_priv.h"

#define LOOP_DEPTH 1024

LOCUS_STATIC_ASSERT(sizeof(struct locus_engine_ldma_src) == sizeof(struct locus_verbs_loop_src) &&
		    offsetof(struct locus_engine_ldma_src, off) ==
			    offsetof(struct locus_verbs_loop_src, off) &&
		    offsetof(struct locus_engine_ldma_src, len) ==
			    offsetof(struct locus_verbs_loop_src, len),
		    "the engine's ranges are the loop's");

struct locusd_loop {
	struct locus_verbs_loop *vl;
	struct locus_engine_ldma ops;
};

const char *locusd_sysfs_root(void)
{
	const char *root = getenv("LOCUS_SYSFS_ROOT");

	return root && root[0] ? root : "/sys";
}

int locusd_rdma_device(const struct locus_config *cfg, char *name, size_t len,
		       struct locus_error *err)
{
	struct locus_rail_devs rd;
	int ret;

	ret = locus_rail_devs_resolve(cfg, locusd_sysfs_root(), cfg->n_nodes > 1, &rd, err);
	if (ret < 0)
		return ret;
	if (!rd.n)
		return locus_error_set(err, ENODEV, "rdma_device = none");
	snprintf(name, len, "%s", rd.name[0]);
	return 0;
}

static int loop_copy(void *ctx, uint64_t dst_off, const struct locus_engine_ldma_src *src,
		     uint32_t n, uint64_t cookie)
{
	struct locusd_loop *l = ctx;

	return locus_verbs_loop_copy(l->vl, dst_off, (const struct locus_verbs_loop_src *)src, n,
				     cookie);
}

int locusd_loop_create(const struct locus_config *cfg, void *region, size_t len, size_t first,
		       size_t stride, unsigned count, struct locusd_loop **out,
		       struct locus_error *err)
{
	struct locus_verbs_loop_area a = { .addr = region, .len = len, .chunk_off = first,
					   .chunk_len = stride, .n_chunks = count };
	struct locusd_loop *l;
	char dev[64];
	int ret;

	ret = locusd_rdma_device(cfg, dev, sizeof(dev), err);
	if (ret < 0)
		return ret;
	l = calloc(1, sizeof(*l));
	if (!l)
		return locus_error_set(err, ENOMEM, "intra_node = verbs: out of memory");
	ret = locus_verbs_loop_create_area(dev, &a, LOOP_DEPTH, &l->vl, err);
	if (ret < 0) {
		free(l);
		return ret;
	}
	l->ops = (struct locus_engine_ldma){ .copy = loop_copy, .ctx = l };
	*out = l;
	return 0;
}

int locusd_loop_renew(void *ctx, uint32_t slot)
{
	struct locusd_loop *l = ctx;
	struct locus_error err = { 0 };
	int ret = locus_verbs_loop_rereg(l->vl, slot, &err);

	if (ret < 0 && ret != -EBUSY)
		fprintf(stderr, "locusd: intra_node = verbs: %s\n", err.msg);
	return ret;
}

void locusd_loop_reap(struct locusd_loop *l)
{
	if (l)
		locus_verbs_loop_reap(l->vl);
}

const struct locus_engine_ldma *locusd_loop_ops(struct locusd_loop *l)
{
	return &l->ops;
}

static void loop_done(void *arg, uint64_t cookie, int status)
{
	locus_engine_ldma_done(arg, cookie, status);
}

int locusd_loop_poll(struct locusd_loop *l, struct locus_engine *e)
{
	return locus_verbs_loop_poll(l->vl, loop_done, e);
}

unsigned locusd_loop_inflight(const struct locusd_loop *l)
{
	return locus_verbs_loop_inflight(l->vl);
}

void locusd_loop_destroy(struct locusd_loop *l)
{
	if (!l)
		return;
	locus_verbs_loop_destroy(l->vl);
	free(l);
}
