// SPDX-License-Identifier: MIT
/*
 * The device's asynchronous events, on the control thread: a port that goes
 * down (IBV_EVENT_PORT_ERR: the netdev under a RoCE device set down or its
 * carrier lost) closes every connection of the endpoint at once with
 * -ENETDOWN, instead of waiting for RC's retries to run out (7 ACK
 * time-outs) or the stall watch; a port that comes back
 * (IBV_EVENT_PORT_ACTIVE) makes the dialling peers redial now, with their
 * back-off reset. Connections are closed the usual way (locus_verbs_ctl_close:
 * the QP to the error state, the data side drains and fails what did not
 * complete, once). A fatal error (IBV_EVENT_DEVICE_FATAL: the device was
 * reset or removed and its context disassociated) loses the device (dev.c):
 * its connections close the same way, then its verbs objects are freed and
 * it is reopened when it comes back. (The queue is made non-blocking when
 * the device is opened: dev.c.)
 */
#include <errno.h>

#include "verbs_priv.h"

static void port_down(struct locus_verbs_ep *ep)
{
	ep->stats.port_errors++;
	for (uint32_t i = 0; i < ep->n_peers; i++) {
		struct locus_verbs_peer *p = ep->peers[i];

		if (p->phase == CTL_CONNECTING || p->phase == CTL_CONNECTED)
			locus_verbs_ctl_close(p, -ENETDOWN);
	}
}

void locus_verbs_redial_now(struct locus_verbs_ep *ep)
{
	uint64_t now = locus_verbs_now_ns();

	for (uint32_t i = 0; i < ep->n_peers; i++) {
		struct locus_verbs_peer *p = ep->peers[i];

		p->backoff_ms = ep->prm.backoff_min_ms;
		if (p->phase == CTL_BACKOFF)
			p->deadline_ns = now;
	}
}

static void port_up(struct locus_verbs_ep *ep)
{
	ep->stats.port_ups++;
	locus_verbs_redial_now(ep);
}

int locus_verbs_port_events(struct locus_verbs_ep *ep)
{
	struct ibv_async_event ev;
	int n = 0;

	if (!ep->ctx)
		return 0; /* the device is gone: its queue with it */
	while (!ibv_get_async_event(ep->ctx, &ev)) {
		switch (ev.event_type) {
		case IBV_EVENT_PORT_ERR:
			port_down(ep);
			break;
		case IBV_EVENT_DEVICE_FATAL:
			locus_verbs_dev_lost(ep, "fatal device error (async event)");
			break;
		case IBV_EVENT_PORT_ACTIVE:
			port_up(ep);
			break;
		default:
			/* QP and CQ errors also end in completion errors, handled there */
			break;
		}
		ibv_ack_async_event(&ev);
		n++;
	}
	return n;
}
