// SPDX-License-Identifier: MIT
/*
 * Registered memory: host memory on the device's NUMA node (libnuma), caller
 * memory, and dma-bufs. Failures say errno and the RLIMIT_MEMLOCK in force,
 * the usual reason registration fails outside a LimitMEMLOCK=infinity unit.
 */
#include <errno.h>
#include <numa.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "locus_err_priv.h"
#include "verbs_priv.h"

static void memlock_str(char *buf, size_t len)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_MEMLOCK, &rl) < 0)
		snprintf(buf, len, "unknown");
	else if (rl.rlim_cur == RLIM_INFINITY)
		snprintf(buf, len, "unlimited");
	else
		snprintf(buf, len, "%llu bytes", (unsigned long long)rl.rlim_cur);
}

static int reg_fail(struct locus_error *err, int e, const char *what, size_t len)
{
	char ml[48];

	memlock_str(ml, sizeof(ml));
	return locus_error_set(err, e, "%s of %zu bytes failed: %s (RLIMIT_MEMLOCK %s)", what, len,
			       strerror(e), ml);
}

int locus_verbs_mr_reg(struct locus_verbs_ep *ep, void *addr, size_t len, unsigned access,
		       struct locus_verbs_mr *mr, struct locus_error *err)
{
	struct ibv_mr *m;

	memset(mr, 0, sizeof(*mr));
	if (!addr || len == 0)
		return locus_error_set(err, EINVAL, "cannot register an empty region");
	if (!ep->pd)
		return locus_error_set(err, ENODEV, "%s is gone", ep->dev_name);
	m = ibv_reg_mr(ep->pd, addr, len, (int)access);
	if (!m)
		return reg_fail(err, errno ? errno : ENOMEM, "ibv_reg_mr", len);
	mr->addr = addr;
	mr->len = len;
	mr->lkey = m->lkey;
	mr->rkey = m->rkey;
	mr->access = access;
	mr->ibv_mr = m;
	return 0;
}

int locus_verbs_mr_alloc(struct locus_verbs_ep *ep, size_t len, unsigned access,
			 struct locus_verbs_mr *mr, struct locus_error *err)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), alloc;
	bool use_numa = ep->numa_node >= 0 && numa_available() >= 0;
	void *p;
	int rc;

	if (len == 0 || len > SIZE_MAX - pg)
		return locus_error_set(err, EINVAL, "bad allocation size %zu", len);
	alloc = LOCUS_ALIGN_UP(len, pg);
	if (use_numa) {
		p = numa_alloc_onnode(alloc, ep->numa_node);
	} else {
		p = mmap(NULL, alloc, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			p = NULL;
	}
	if (!p)
		return locus_error_set(err, ENOMEM, "cannot allocate %zu bytes on NUMA node %d",
				       alloc, ep->numa_node);
	rc = locus_verbs_mr_reg(ep, p, len, access, mr, err);
	if (rc < 0)
		goto err_free;
	mr->owned = true;
	mr->numa_alloc = use_numa;
	mr->alloc_len = alloc;
	return 0;

err_free:
	if (use_numa)
		numa_free(p, alloc);
	else
		munmap(p, alloc);
	return rc;
}

int locus_verbs_mr_reg_dmabuf(struct locus_verbs_ep *ep, int fd, uint64_t offset, size_t len,
			      uint64_t iova, unsigned access, struct locus_verbs_mr *mr,
			      struct locus_error *err)
{
	struct ibv_mr *m;
	int e;

	memset(mr, 0, sizeof(*mr));
	if (fd < 0 || len == 0)
		return locus_error_set(err, EINVAL, "dma-buf registration needs a fd and a length");
	if (!ep->pd)
		return locus_error_set(err, ENODEV, "%s is gone", ep->dev_name);
	m = ibv_reg_dmabuf_mr(ep->pd, offset, len, iova, fd, (int)access);
	if (!m) {
		e = errno ? errno : EOPNOTSUPP;
		if (e == EOPNOTSUPP || e == EINVAL || e == ENOSYS || e == EPROTONOSUPPORT)
			return locus_error_set(err, EOPNOTSUPP,
					       "dma-buf memory registration not supported by this device (%s: %s)",
					       ep->dev_name, strerror(e));
		return reg_fail(err, e, "ibv_reg_dmabuf_mr", len);
	}
	mr->addr = (void *)(uintptr_t)iova;
	mr->len = len;
	mr->lkey = m->lkey;
	mr->rkey = m->rkey;
	mr->access = access;
	mr->ibv_mr = m;
	return 0;
}

void locus_verbs_mr_unreg(struct locus_verbs_mr *mr)
{
	if (!mr->ibv_mr)
		return;
	ibv_dereg_mr(mr->ibv_mr);
	mr->ibv_mr = NULL;
	mr->lkey = mr->rkey = 0; /* no key of a freed MR is ever handed out */
}

int locus_verbs_mr_rereg(struct locus_verbs_ep *ep, struct locus_verbs_mr *mr,
			 struct locus_error *err)
{
	struct ibv_mr *m;

	if (!mr->addr || mr->ibv_mr)
		return 0; /* nothing there, or registered already */
	if (!ep->pd)
		return locus_error_set(err, ENODEV, "%s is gone", ep->dev_name);
	m = ibv_reg_mr(ep->pd, mr->addr, mr->len, (int)mr->access);
	if (!m)
		return reg_fail(err, errno ? errno : ENOMEM, "ibv_reg_mr", mr->len);
	mr->lkey = m->lkey;
	mr->rkey = m->rkey;
	mr->ibv_mr = m;
	return 0;
}

void locus_verbs_mr_free(struct locus_verbs_mr *mr)
{
	if (!mr)
		return;
	locus_verbs_mr_unreg(mr);
	/* ours even while unregistered (a device gone for good) */
	if (mr->owned && mr->addr) {
		if (mr->numa_alloc)
			numa_free(mr->addr, mr->alloc_len);
		else
			munmap(mr->addr, mr->alloc_len);
	}
	memset(mr, 0, sizeof(*mr));
}
