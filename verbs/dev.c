// SPDX-License-Identifier: MIT
/*
 * The device's life, on the control thread (locus_verbs_dev.h for the states
 * and the hand-off with the data side): opening it (at creation and when it
 * comes back), noticing that it went away, freeing its verbs objects in
 * order once nothing uses them any more, looking for it by name, reopening.
 *
 * What a device that goes away looks like (Soft-RoCE on Linux 6.1, `rdma
 * link delete`; mlx5 after a reset or unplug is the same but for the order):
 * rdma_cm reports RDMA_CM_EVENT_DEVICE_REMOVAL on every id bound to it (the
 * kernel destroys its half of them), the async queue reports
 * IBV_EVENT_DEVICE_FATAL where the driver disassociates the context (mlx5:
 * then every verbs call fails with EIO), and the kernel's unregistration
 * waits until every process closed the device where it does not (rxe: the
 * `rdma link delete` command blocks until then). So the endpoint must let
 * go of everything on the device: its QPs (the connections close as on a
 * port error: the data side drains their flushes, fails what was posted,
 * reports each peer down), then once the data side acked that it polls
 * the CQ no more, the CQ, the caller's MRs (dev_cb.release: the message
 * pool, the clients' regions), the inboxes' MRs, the PD, the listener's id.
 * librdmacm owns the context: it closes it once no id uses it and its device
 * list says the device is gone, which it learns only when it syncs the list
 * (rdma_get_devices): done here once everything is let go of.
 *
 * While the device is gone, ibv_get_device_list() is read every dev_probe_ms
 * (nothing when no device is gone); once the name is listed again, a new
 * listener is bound to our address (librdmacm opens the new device's
 * context), the objects are made again, the peers' memory registered again
 * (their inboxes keep their addresses: a reader of the area holds no
 * dangling pointer), the caller's (dev_cb.restore), and the device is
 * handed back to the data side; the dialling peers redial at once and the
 * listening ones accept again.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>

#include "locus_err_priv.h"
#include "verbs_priv.h"

/* The device's NUMA node from sysfs (-1: unknown). */
static int read_numa(const char *dev)
{
	char path[256], line[16];
	FILE *f;
	int v = -1;

	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/device/numa_node", dev);
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (!fgets(line, sizeof(line), f) || sscanf(line, "%d", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

/* Deregister every peer's memory (kept: the inboxes keep their addresses). */
static void peers_unreg(struct locus_verbs_ep *ep)
{
	for (uint32_t i = 0; i < ep->n_peers; i++) {
		locus_verbs_mr_unreg(&ep->peers[i]->inbox);
		locus_verbs_mr_unreg(&ep->peers[i]->hs_mr);
		locus_verbs_mr_unreg(&ep->peers[i]->area_tx);
	}
}

/*
 * Register (again) the memory of every peer with the new PD; undo on
 * failure (every peer's: none had an MR before, dev_free unregistered them
 * and a peer cannot be added while there is no PD).
 */
static int peers_rereg(struct locus_verbs_ep *ep, struct locus_error *err)
{
	int rc = 0;

	for (uint32_t i = 0; i < ep->n_peers && rc == 0; i++) {
		struct locus_verbs_peer *p = ep->peers[i];

		rc = locus_verbs_mr_rereg(ep, &p->inbox, err);
		if (rc == 0)
			rc = locus_verbs_mr_rereg(ep, &p->hs_mr, err);
		if (rc == 0)
			rc = locus_verbs_mr_rereg(ep, &p->area_tx, err);
	}
	if (rc)
		peers_unreg(ep);
	return rc;
}

int locus_verbs_dev_open(struct locus_verbs_ep *ep, bool reopen, struct locus_error *err)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	const char *name;
	struct ibv_device_attr da;
	struct ibv_context *ctx;
	struct rdma_cm_id *id;
	uint32_t sge;
	int rc, fl;

	if (rdma_create_id(ep->ch, &id, NULL, RDMA_PS_TCP))
		return locus_error_set(err, errno, "rdma_create_id: %s", strerror(errno));
	sin.sin_addr = ep->prm.local_addr;
	sin.sin_port = htons(ep->prm.port);
	errno = 0;
	if (rdma_bind_addr(id, (struct sockaddr *)&sin) || !id->verbs) {
		rc = errno ? errno : ENODEV;
		rc = locus_error_set(err, rc, "cannot bind %s to an RDMA device: %s",
				     inet_ntoa(ep->prm.local_addr), strerror(rc));
		goto err_id;
	}
	ctx = id->verbs;
	name = ibv_get_device_name(ctx->device);
	if (!reopen) {
		snprintf(ep->dev_name, sizeof(ep->dev_name), "%s", name);
		if (ep->prm.dev_name && strcmp(ep->prm.dev_name, ep->dev_name)) {
			rc = locus_error_set(err, ENODEV, "%s belongs to device %s, not %s",
					     inet_ntoa(ep->prm.local_addr), ep->dev_name,
					     ep->prm.dev_name);
			goto err_id;
		}
	} else if (strcmp(name, ep->dev_name)) {
		rc = locus_error_set(err, EXDEV, "%s is on device %s now, not %s",
				     inet_ntoa(ep->prm.local_addr), name, ep->dev_name);
		goto err_id;
	}
	fl = fcntl(ctx->async_fd, F_GETFL);
	if (fl < 0 || fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		rc = locus_error_set(err, errno, "cannot make %s's async event queue non-blocking",
				     ep->dev_name);
		goto err_id;
	}
	/* gather entries for zero-copy rows; 1 if the device will not say */
	sge = ibv_query_device(ctx, &da) == 0 && da.max_sge > 1
		      ? LOCUS_MIN((uint32_t)da.max_sge, LOCUS_VERBS_MAX_SGE) : 1;
	if (reopen && sge < ep->max_send_sge) {
		rc = locus_error_set(err, ERANGE, "%s came back with %u gather entries per work "
				     "request, not %u", ep->dev_name, sge, ep->max_send_sge);
		goto err_id;
	}
	ep->pd = ibv_alloc_pd(ctx);
	if (!ep->pd) {
		rc = locus_error_set(err, errno ? errno : ENOMEM, "ibv_alloc_pd on %s failed",
				     ep->dev_name);
		goto err_id;
	}
	ep->comp = ibv_create_comp_channel(ctx);
	if (!ep->comp) {
		rc = locus_error_set(err, errno ? errno : ENOMEM, "ibv_create_comp_channel on %s",
				     ep->dev_name);
		goto err_pd;
	}
	fl = fcntl(ep->comp->fd, F_GETFL);
	if (fl < 0 || fcntl(ep->comp->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		rc = locus_error_set(err, errno, "cannot make the completion channel non-blocking");
		goto err_comp;
	}
	ep->cq = ibv_create_cq(ctx, (int)ep->prm.cq_depth, NULL, ep->comp, 0);
	if (!ep->cq) {
		rc = locus_error_set(err, errno ? errno : ENOMEM, "ibv_create_cq(%u) on %s: %s",
				     ep->prm.cq_depth, ep->dev_name, strerror(errno));
		goto err_comp;
	}
	rc = peers_rereg(ep, err);
	if (rc < 0)
		goto err_cq;
	if (ep->prm.port && rdma_listen(id, 16)) {
		rc = locus_error_set(err, errno, "rdma_listen on port %u: %s", ep->prm.port,
				     strerror(errno));
		goto err_peers;
	}
	ep->listen_id = id;
	ep->ctx = ctx;
	ep->cq_events = 0;
	ep->numa_node = read_numa(ep->dev_name);
	if (!reopen)
		ep->max_send_sge = sge;
	return 0;

err_peers:
	peers_unreg(ep);
err_cq:
	ibv_destroy_cq(ep->cq);
	ep->cq = NULL;
err_comp:
	ibv_destroy_comp_channel(ep->comp);
	ep->comp = NULL;
err_pd:
	ibv_dealloc_pd(ep->pd);
	ep->pd = NULL;
err_id:
	rdma_destroy_id(id);
	return rc;
}

/* locus_verbs_dev_close; tell: whether the caller has MRs to release (not after a failed restore). */
static void dev_free(struct locus_verbs_ep *ep, bool lost, bool tell)
{
	const struct locus_verbs_dev_callbacks *cb = &ep->prm.dev_cb;

	if (ep->cq) {
		if (ep->cq_events)
			ibv_ack_cq_events(ep->cq, ep->cq_events);
		ep->cq_events = 0;
		ibv_destroy_cq(ep->cq);
		ep->cq = NULL;
	}
	if (ep->comp) {
		ibv_destroy_comp_channel(ep->comp);
		ep->comp = NULL;
	}
	/* the MRs before their PD: the caller's, then ours */
	if (ep->pd && tell && cb->release)
		cb->release(cb->arg, ep, lost);
	peers_unreg(ep);
	if (ep->pd) {
		ibv_dealloc_pd(ep->pd);
		ep->pd = NULL;
	}
	/* the context is librdmacm's: it goes with the last id on it (see the top) */
	if (ep->listen_id) {
		rdma_destroy_id(ep->listen_id);
		ep->listen_id = NULL;
	}
	ep->ctx = NULL;
}

void locus_verbs_dev_close(struct locus_verbs_ep *ep, bool lost)
{
	dev_free(ep, lost, true);
}

void locus_verbs_dev_lost(struct locus_verbs_ep *ep, const char *why)
{
	if (!locus_verbs_dev_lose(&ep->dev))
		return;
	ep->stats.dev_lost++;
	snprintf(ep->dev_note, sizeof(ep->dev_note), "%s", why);
	for (uint32_t i = 0; i < ep->n_peers; i++) {
		struct locus_verbs_peer *p = ep->peers[i];

		/* a returning peer's request waited on the dead device: refused */
		if (p->pend_id) {
			rdma_reject(p->pend_id, NULL, 0);
			rdma_destroy_id(p->pend_id);
			p->pend_id = NULL;
		}
		if (p->id || p->phase == CTL_CONNECTING || p->phase == CTL_CONNECTED)
			locus_verbs_ctl_close(p, -ENODEV);
	}
}

int locus_verbs_dev_check(struct locus_verbs_ep *ep, int rc)
{
	struct ibv_device_attr da;

	if ((rc != -ENODEV && rc != -EIO) || !ep->ctx ||
	    locus_verbs_dev_state(&ep->dev) != LOCUS_DEV_LIVE)
		return rc;
	/* one failing call may be the call's; a device that answers nothing is gone */
	errno = 0;
	if (ibv_query_device(ep->ctx, &da)) {
		char why[96];
		int e = errno ? errno : EIO;

		if (e == ENODEV || e == EIO) {
			snprintf(why, sizeof(why), "verbs calls fail: %s", strerror(-rc));
			locus_verbs_dev_lost(ep, why);
		}
	}
	return rc;
}

/* Nothing of the lost device left: no QP, no rdma_cm id, nothing closing. */
static bool dev_unused(const struct locus_verbs_ep *ep)
{
	for (uint32_t i = 0; i < ep->n_peers; i++) {
		const struct locus_verbs_peer *p = ep->peers[i];

		if (p->id || p->pend_id || p->phase == CTL_CLOSING)
			return false;
	}
	return true;
}

/* Is a device of this name listed (ibv_get_device_list, which rereads sysfs)? */
static bool dev_listed(const char *name)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	bool found = false;

	if (!list)
		return false;
	for (int i = 0; list[i] && !found; i++)
		found = !strcmp(ibv_get_device_name(list[i]), name);
	ibv_free_device_list(list);
	return found;
}

/*
 * Make librdmacm sync its device list: it closes a dead device's context
 * once no id uses it (a driver that cannot disassociate, rxe, holds the
 * device's removal until then). Its side effect: it opens a context on
 * every device it lists that was not open yet (kept until that device goes).
 */
static void dev_sync_rdmacm(void)
{
	struct ibv_context **list = rdma_get_devices(NULL);

	if (list)
		rdma_free_devices(list);
}

/* The device went away: free it, once the data side let go of it. */
static void dev_release(struct locus_verbs_ep *ep)
{
	/* not threaded: this thread is the data side, and it is here */
	if (!ep->prm.threaded)
		(void)locus_verbs_dev_use(&ep->dev);
	if (!locus_verbs_dev_parked(&ep->dev))
		return;
	locus_verbs_dev_close(ep, true);
	dev_sync_rdmacm();
	locus_verbs_dev_bury(&ep->dev);
	ep->dev_next_probe_ns = locus_verbs_now_ns() + ep->dev_probe_ns;
}

/* The device is listed again: reopen it, the caller's memory too, then hand it back. */
static void dev_reopen(struct locus_verbs_ep *ep)
{
	const struct locus_verbs_dev_callbacks *cb = &ep->prm.dev_cb;
	struct locus_error err = { 0 };
	int rc;

	locus_verbs_dev_reopen(&ep->dev);
	rc = locus_verbs_dev_open(ep, true, &err);
	if (rc == 0 && cb->restore) {
		rc = cb->restore(cb->arg, ep, &err);
		if (rc < 0) {
			/* the caller undid its part: nothing of it to release */
			dev_free(ep, true, false);
			dev_sync_rdmacm();
		}
	}
	if (rc < 0) {
		ep->stats.dev_reopen_failed++;
		snprintf(ep->dev_note, sizeof(ep->dev_note), "listed again, not reopened: %s",
			 err.msg);
		locus_verbs_dev_bury(&ep->dev);
		return;
	}
	ep->stats.dev_back++;
	snprintf(ep->dev_note, sizeof(ep->dev_note), "reopened");
	locus_verbs_dev_revive(&ep->dev);
	/* as when a port comes back: the dialling peers redial now */
	locus_verbs_redial_now(ep);
}

void locus_verbs_dev_step(struct locus_verbs_ep *ep)
{
	uint64_t now;

	switch (locus_verbs_dev_state(&ep->dev)) {
	case LOCUS_DEV_LOST:
		if (!dev_unused(ep))
			return;
		locus_verbs_dev_park(&ep->dev);
		dev_release(ep);
		return;
	case LOCUS_DEV_GONE:
		dev_release(ep);
		return;
	case LOCUS_DEV_DEAD:
		now = locus_verbs_now_ns();
		if (now < ep->dev_next_probe_ns)
			return;
		ep->dev_next_probe_ns = now + ep->dev_probe_ns;
		if (dev_listed(ep->dev_name))
			dev_reopen(ep);
		return;
	default:
		return;
	}
}

unsigned locus_verbs_ep_device_state(const struct locus_verbs_ep *ep)
{
	return locus_verbs_dev_state(&ep->dev);
}

const char *locus_verbs_ep_device_note(const struct locus_verbs_ep *ep)
{
	return ep->dev_note;
}
