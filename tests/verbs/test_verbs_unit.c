// SPDX-License-Identifier: MIT
/*
 * Host unit tests of the verbs transport's pure logic: reject codes,
 * credit / ring arithmetic, slot indexing, and device choice on a fake
 * sysfs tree built here. The handshake's encodings and MACs are in
 * test_verbs_auth.c.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "../fake_sysfs.h"
#include "locus_verbs.h"

static void test_reject_codes(void **state)
{
	(void)state;
	assert_int_equal(locus_verbs_reject_errno(LOCUS_VERBS_REJ_VERSION), -LOCUS_EVERSION);
	assert_int_equal(locus_verbs_reject_errno(LOCUS_VERBS_REJ_AUTH), -LOCUS_EAUTH);
	assert_int_equal(locus_verbs_reject_errno(LOCUS_VERBS_REJ_CLUSTER), -LOCUS_EAUTH);
	assert_int_equal(locus_verbs_reject_errno(LOCUS_VERBS_REJ_REPLAY), -LOCUS_EAUTH);
	assert_int_equal(locus_verbs_reject_errno(LOCUS_VERBS_REJ_INVALID), -LOCUS_EPROTO);
	assert_int_equal(locus_verbs_reject_errno(LOCUS_VERBS_REJ_PEER), -LOCUS_EPROTO);
	assert_int_equal(locus_verbs_reject_errno(LOCUS_VERBS_REJ_BUSY), -EBUSY);
	assert_int_equal(locus_verbs_reject_errno(200), -ECONNREFUSED);
}

static void test_slots_and_credits(void **state)
{
	struct locus_verbs_ring r = { .slot_count = 16, .slot_shift = 12 };
	uint32_t idx;

	(void)state;
	assert_int_equal(locus_verbs_slots_for(&r, 1), 1);
	assert_int_equal(locus_verbs_slots_for(&r, 4096), 1);
	assert_int_equal(locus_verbs_slots_for(&r, 4097), 2);
	assert_int_equal(locus_verbs_slots_for(&r, 12288), 3);
	assert_int_equal(locus_verbs_max_msg(&r), 8 * 4096);
	/* 16 KiB x 256: a 12,288 B signature + 32 B header fits one slot, 2 MiB max */
	{
		struct locus_verbs_ring d = { .slot_count = 256, .slot_shift = 14 };

		assert_int_equal(locus_verbs_slots_for(&d, 12288 + 32), 1);
		assert_int_equal(locus_verbs_max_msg(&d), 2u << 20);
	}
	assert_int_equal(locus_verbs_credits(&r, 0, 0), 16);
	assert_int_equal(locus_verbs_credits(&r, 10, 4), 10);
	assert_int_equal(locus_verbs_credits(&r, 20, 20), 16);
	/* cumulative counters across the u64 wrap */
	assert_int_equal(locus_verbs_credits(&r, 3, UINT64_MAX - 2), 10);
	/* placement: fits, exactly fits, wraps with skip */
	assert_int_equal(locus_verbs_place(&r, 0, 3, &idx), 3);
	assert_int_equal(idx, 0);
	assert_int_equal(locus_verbs_place(&r, 13, 3, &idx), 3);
	assert_int_equal(idx, 13);
	assert_int_equal(locus_verbs_place(&r, 14, 3, &idx), 2 + 3);
	assert_int_equal(idx, 0);
	assert_int_equal(locus_verbs_place(&r, 16 * 1000 + 15, 8, &idx), 1 + 8);
	assert_int_equal(idx, 0);
	assert_int_equal(locus_verbs_imm_encode(5, 1), 5);
	assert_int_equal(locus_verbs_imm_encode(5, 3), 5 | (2u << 16));
}

static void test_ring_accept(void **state)
{
	struct locus_verbs_ring r = { .slot_count = 16, .slot_shift = 12 };
	uint32_t idx, n, used;

	(void)state;
	assert_int_equal(locus_verbs_ring_accept(&r, 0, 0, 1, &idx, &n, &used), 0);
	assert_int_equal(used, 1);
	assert_int_equal(locus_verbs_ring_accept(&r, 5, 5 | (2u << 16), 12288, &idx, &n, &used), 0);
	assert_int_equal(idx, 5);
	assert_int_equal(n, 3);
	assert_int_equal(used, 3);
	/* the sender skipped slots 14, 15 to place 3 slots at 0 */
	assert_int_equal(locus_verbs_ring_accept(&r, 14, 0 | (2u << 16), 9000, &idx, &n, &used), 0);
	assert_int_equal(used, 5);
	/* ... but may not skip when the message fits */
	assert_int_equal(locus_verbs_ring_accept(&r, 12, 0 | (2u << 16), 9000, &idx, &n, &used),
			 -LOCUS_EPROTO);
	/* not where the next message must be */
	assert_int_equal(locus_verbs_ring_accept(&r, 4, 6, 10, &idx, &n, &used), -LOCUS_EPROTO);
	/* slot out of range; too many slots; over the end */
	assert_int_equal(locus_verbs_ring_accept(&r, 0, 16, 10, &idx, &n, &used), -LOCUS_EPROTO);
	assert_int_equal(locus_verbs_ring_accept(&r, 0, 0xffff, 10, &idx, &n, &used), -LOCUS_EPROTO);
	assert_int_equal(locus_verbs_ring_accept(&r, 0, 8u << 16, 9 * 4096, &idx, &n, &used),
			 -LOCUS_EPROTO);
	assert_int_equal(locus_verbs_ring_accept(&r, 15, 15 | (1u << 16), 5000, &idx, &n, &used),
			 -LOCUS_EPROTO);
	/* length must need exactly the slots named */
	assert_int_equal(locus_verbs_ring_accept(&r, 0, 1u << 16, 4096, &idx, &n, &used),
			 -LOCUS_EPROTO);
	assert_int_equal(locus_verbs_ring_accept(&r, 0, 1u << 16, 8193, &idx, &n, &used),
			 -LOCUS_EPROTO);
	assert_int_equal(locus_verbs_ring_accept(&r, 0, 0, 0, &idx, &n, &used), -LOCUS_EPROTO);
}

/*
 * Sender and receiver driven only by the pure rules, with an independent
 * per-slot ownership map: the sender never writes a slot the receiver holds,
 * every message is accepted where it lands, and the ring wraps many times.
 */
static void test_ring_simulation(void **state)
{
	struct locus_verbs_ring r = { .slot_count = 16, .slot_shift = 12 };
	int owner[16] = { 0 }; /* 0 free, else message number + 1 */
	uint64_t head = 0, rx_head = 0, released = 0, announced = 0;
	struct { uint32_t idx, n, used; } q[64];
	unsigned qh = 0, qn = 0, msgs = 0, stalls = 0, step, k;
	uint32_t seed = 12345;

	(void)state;
	for (step = 0; step < 20000; step++) {
		seed = seed * 1103515245u + 12345u;
		if (seed & 0x100) { /* sender tries one message */
			uint32_t len = 1 + (seed >> 8) % (uint32_t)locus_verbs_max_msg(&r);
			uint32_t n = locus_verbs_slots_for(&r, len), idx, used, ridx, rn, rused;

			used = locus_verbs_place(&r, head, n, &idx);
			if (used > locus_verbs_credits(&r, head, announced)) {
				stalls++;
				continue;
			}
			for (k = 0; k < n; k++) {
				assert_int_equal(owner[idx + k], 0);
				owner[idx + k] = (int)msgs + 1;
			}
			head += used;
			assert_int_equal(locus_verbs_ring_accept(&r, rx_head, locus_verbs_imm_encode(idx, n),
								 len, &ridx, &rn, &rused), 0);
			assert_int_equal(ridx, idx);
			assert_int_equal(rused, used);
			rx_head += rused;
			q[(qh + qn) % 64].idx = ridx;
			q[(qh + qn) % 64].n = rn;
			q[(qh + qn) % 64].used = rused;
			qn++;
			msgs++;
		} else if (qn) { /* receiver releases the oldest */
			for (k = 0; k < q[qh].n; k++)
				owner[q[qh].idx + k] = 0;
			released += q[qh].used;
			qh = (qh + 1) % 64;
			qn--;
			if ((seed & 0x600) == 0 || qn == 0)
				announced = released; /* credit write lands */
		}
	}
	assert_true(msgs > 5000);
	assert_true(head / 16 > 1000); /* wrapped over a thousand times */
	assert_true(stalls > 0);
}

/* ---- fake sysfs ---- */

static void ib_dev(const char *name, const char *pci_rel, const char *numa)
{
	char d[256];

	snprintf(d, sizeof(d), "class/infiniband/%s/ports/1/gids", name);
	fs_mk(d);
	snprintf(d, sizeof(d), "class/infiniband/%s/ports/1/gid_attrs/types", name);
	fs_mk(d);
	if (pci_rel) {
		char n[256];

		fs_mk(pci_rel);
		snprintf(n, sizeof(n), "%s/numa_node", pci_rel);
		fs_put(n, numa);
		snprintf(d, sizeof(d), "class/infiniband/%s/device", name);
		fs_link(pci_rel, d);
	}
}

static void gid(const char *dev, int i, const char *g, const char *type)
{
	char p[256];

	snprintf(p, sizeof(p), "class/infiniband/%s/ports/1/gids/%d", dev, i);
	fs_put(p, g);
	snprintf(p, sizeof(p), "class/infiniband/%s/ports/1/gid_attrs/types/%d", dev, i);
	if (type)
		fs_put(p, type);
}

static int setup_sysfs(void **state)
{
	(void)state;
	if (fs_make_root("fakesys") < 0)
		return -1;
	/* socket 0: root port 00:01.0 -> switch 01:00.0 -> {mlx5_0 @ 02:00.0, GPU @ 02:01.0} */
	ib_dev("mlx5_0", "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0", "0\n");
	/* socket 0, other root port */
	ib_dev("mlx5_1", "devices/pci0000:00/0000:00:03.0/0000:05:00.0", "0\n");
	/* socket 1 */
	ib_dev("mlx5_2", "devices/pci0000:80/0000:80:01.0/0000:81:00.0", "1\n");
	ib_dev("rxe0", NULL, NULL); /* software device: no parent */
	fs_mk("devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0");
	fs_mk("devices/pci0000:80/0000:80:02.0/0000:83:00.0");
	fs_mk("bus/pci/devices");
	fs_link("devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0",
		"bus/pci/devices/0000:02:01.0");
	fs_link("devices/pci0000:80/0000:80:02.0/0000:83:00.0", "bus/pci/devices/0000:83:00.0");
	gid("mlx5_0", 0, "fe80:0000:0000:0000:0202:c9ff:fe00:0001\n", "IB/RoCE v1\n");
	gid("mlx5_0", 1, "fe80:0000:0000:0000:0202:c9ff:fe00:0001\n", "RoCE v2\n");
	gid("mlx5_0", 2, "0000:0000:0000:0000:0000:ffff:0a00:0005\n", "IB/RoCE v1\n");
	gid("mlx5_0", 3, "0000:0000:0000:0000:0000:ffff:0a00:0005\n", "RoCE v2\n");
	gid("mlx5_0", 4, "0000:0000:0000:0000:0000:ffff:0a00:0105\n", "RoCE v2\n");
	gid("mlx5_0", 5, "0000:0000:0000:0000:0000:0000:0000:0000\n", NULL); /* unused entry */
	return 0;
}

static int teardown_sysfs(void **state)
{
	(void)state;
	return fs_remove_root();
}

static void test_dev_list(void **state)
{
	struct locus_verbs_devinfo d[8];

	(void)state;
	assert_int_equal(locus_verbs_dev_list(fs_root, d, 8), 4);
	assert_string_equal(d[0].name, "mlx5_0");
	assert_string_equal(d[3].name, "rxe0");
	assert_int_equal(d[0].numa_node, 0);
	assert_int_equal(d[2].numa_node, 1);
	assert_int_equal(d[3].numa_node, -1);
	assert_string_equal(d[3].pci, "");
	assert_non_null(strstr(d[0].pci, "0000:02:00.0"));
	assert_int_equal(d[0].n_ports, 1);
	/* a short array still reports how many exist */
	assert_int_equal(locus_verbs_dev_list(fs_root, d, 2), 4);
	/* no infiniband class at all: zero devices, not an error */
	assert_int_equal(locus_verbs_dev_list("/nonexistent-sysfs", d, 8), 0);
}

static void test_dev_pick(void **state)
{
	struct locus_verbs_devinfo d[8];
	struct locus_error err;
	int n;

	(void)state;
	n = locus_verbs_dev_list(fs_root, d, 8);
	assert_int_equal(n, 4);
	assert_int_equal(locus_verbs_dev_pick(d, 4, "mlx5_2", fs_root, NULL, -1, &err), 2);
	assert_int_equal(locus_verbs_dev_pick(d, 4, "mlx5_9", fs_root, NULL, -1, &err), -ENODEV);
	assert_non_null(strstr(err.msg, "mlx5_9"));
	/* GPU behind the same switch as mlx5_0 beats mlx5_1 on the same socket */
	assert_int_equal(locus_verbs_dev_pick(d, 4, "auto", fs_root, "0000:02:01.0", -1, &err), 0);
	/* a GPU on socket 1: same root complex as mlx5_2 */
	assert_int_equal(locus_verbs_dev_pick(d, 4, "auto", fs_root, "0000:83:00.0", -1, &err), 2);
	/* NUMA only */
	assert_int_equal(locus_verbs_dev_pick(d, 4, "auto", fs_root, NULL, 1, &err), 2);
	assert_int_equal(locus_verbs_dev_pick(d, 4, NULL, fs_root, NULL, 0, &err), 0);
	/* nothing to go by: the lowest name */
	assert_int_equal(locus_verbs_dev_pick(d, 4, "auto", fs_root, NULL, -1, &err), 0);
	/* bad PCI references */
	assert_int_equal(locus_verbs_dev_pick(d, 4, "auto", fs_root, "0000:99:00.0", -1, &err), -ENODEV);
	assert_non_null(strstr(err.msg, "0000:99:00.0"));
	assert_int_equal(locus_verbs_dev_pick(d, 4, "auto", fs_root, "../../etc", -1, &err), -ENODEV);
	assert_int_equal(locus_verbs_dev_pick(d, 0, "auto", fs_root, NULL, -1, &err), -ENODEV);
	/* a software device only: auto still works */
	assert_int_equal(locus_verbs_dev_pick(&d[3], 1, "auto", fs_root, NULL, 0, &err), 0);
}

static void test_gid_ipv4(void **state)
{
	struct in_addr a, want;

	(void)state;
	/* skips RoCE v1 and the link-local v2 GID */
	assert_int_equal(locus_verbs_gid_ipv4(fs_root, "mlx5_0", 1, NULL, &a), 3);
	assert_string_equal(inet_ntoa(a), "10.0.0.5");
	inet_aton("10.0.1.5", &want);
	assert_int_equal(locus_verbs_gid_ipv4(fs_root, "mlx5_0", 1, &want, &a), 4);
	assert_string_equal(inet_ntoa(a), "10.0.1.5");
	inet_aton("10.9.9.9", &want);
	assert_int_equal(locus_verbs_gid_ipv4(fs_root, "mlx5_0", 1, &want, &a), -ENOENT);
	assert_int_equal(locus_verbs_gid_ipv4(fs_root, "mlx5_1", 1, NULL, &a), -ENOENT);
	assert_int_equal(locus_verbs_gid_ipv4(fs_root, "mlx5_0", 2, NULL, &a), -ENOENT);
	assert_int_equal(locus_verbs_gid_ipv4(fs_root, "../x", 1, NULL, &a), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest pure[] = {
		cmocka_unit_test(test_reject_codes),
		cmocka_unit_test(test_slots_and_credits),
		cmocka_unit_test(test_ring_accept),
		cmocka_unit_test(test_ring_simulation),
	};
	const struct CMUnitTest sysfs[] = {
		cmocka_unit_test(test_dev_list),
		cmocka_unit_test(test_dev_pick),
		cmocka_unit_test(test_gid_ipv4),
	};
	int rc = cmocka_run_group_tests_name("verbs_pure", pure, NULL, NULL);

	return rc | cmocka_run_group_tests_name("verbs_sysfs", sysfs, setup_sysfs, teardown_sysfs);
}
