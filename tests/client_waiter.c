// SPDX-License-Identifier: MIT
/*
 * A serving worker that outlives its locusd (tests/test_faults.sh):
 *
 *   client_waiter INSTANCE DECODER_ID REATTACH_S
 *
 * attaches as decoder DECODER_ID (and prefill), says "attached", then polls
 * its completion ring and reports its load as a decoder does, until the
 * client API says locusd is gone: it prints "learned NS" (CLOCK_REALTIME)
 * and detaches. Then it attaches again, for up to REATTACH_S seconds (a new
 * locusd takes the instance over), says "reattached", submits one ROUTE and
 * waits (2 s at most) for its one completion: "served STATUS". Exit status 0
 * only if all of that happened; every wait is bounded.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "locus_client.h"

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void nap_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* Poll (as a decoder) until locusd is gone; 0, or 1 after a day of polling. */
static int wait_gone(struct locus_client *c)
{
	uint64_t t0 = clock_ns(CLOCK_MONOTONIC);

	while (clock_ns(CLOCK_MONOTONIC) - t0 < 86400ull * 1000000000ull) {
		struct locus_desc d[8];
		int n = locus_client_poll(c, d, 8);

		if (n < 0) {
			printf("learned %llu %s\n", (unsigned long long)clock_ns(CLOCK_REALTIME),
			       locus_strerror(n));
			return 0;
		}
		for (int i = 0; i < n; i++)
			if (locus_client_inbox(c, &d[i]))
				locus_client_release_slot(c, d[i].slot);
		locus_client_report_load(c, 0);
		nap_ms(1);
	}
	return 1;
}

int main(int argc, char **argv)
{
	struct locus_client_req req = { .roles = LOCUS_ROLE_DECODE | LOCUS_ROLE_PREFILL,
					.timeout_ms = 500 };
	struct locus_desc q = { .op = LOCUS_OP_ROUTE, .id = 4242, .off = 0, .len = 64 };
	struct locus_client *c;
	struct locus_error e;
	uint64_t t0;
	int ret;

	if (argc != 4)
		return 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	req.decoder_id = (uint32_t)atoi(argv[2]);
	if (locus_client_attach(argv[1], &req, &c, &e) != 0) {
		printf("attach: %s\n", e.msg);
		return 1;
	}
	printf("attached slot %u\n", locus_client_slot(c));
	if (wait_gone(c))
		return 1;
	locus_client_detach(c);

	t0 = clock_ns(CLOCK_MONOTONIC);
	do {
		ret = locus_client_attach(argv[1], &req, &c, &e);
		if (ret != 0)
			nap_ms(50);
	} while (ret != 0 && clock_ns(CLOCK_MONOTONIC) - t0 < (uint64_t)atoi(argv[3]) * 1000000000ull);
	if (ret != 0) {
		printf("reattach: %s\n", e.msg);
		return 1;
	}
	printf("reattached after %llu ms\n",
	       (unsigned long long)((clock_ns(CLOCK_MONOTONIC) - t0) / 1000000));
	if (locus_client_submit(c, &q, 1) != 1)
		return 1;
	t0 = clock_ns(CLOCK_MONOTONIC);
	while (clock_ns(CLOCK_MONOTONIC) - t0 < 2000000000ull) {
		struct locus_desc d;
		int n = locus_client_poll(c, &d, 1);

		if (n < 0)
			break;
		if (n == 1 && d.op == LOCUS_OP_ROUTE && d.id == q.id) {
			printf("served %s\n", locus_strerror(d.status));
			locus_client_detach(c);
			return 0;
		}
		nap_ms(1);
	}
	printf("no completion from the new locusd\n");
	return 1;
}
