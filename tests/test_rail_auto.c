// SPDX-License-Identifier: MIT
/*
 * rdma_device = auto with gpu_pci: the device nearest each GPU by PCIe
 * distance (verbs/devmap.c) and the rails it gives (dataplane/rail_devs.c),
 * on fake sysfs trees built in a temporary directory:
 *   - 8 GPUs / 8 NICs, two sockets, two PCIe switches per socket, each
 *     switch with two GPUs and two NICs on its downstream ports (a GPU is
 *     as near to both NICs of its switch: the GPUs spread over them), the
 *     second socket's NICs named against the GPUs' order;
 *   - 4 GPUs / 2 NICs: the two GPUs of a switch share its NIC, rails in the
 *     order of the GPUs' first appearance;
 *   - the GPU's switch in common beats fewer hops, fewer hops break ties;
 *   - GPUs with no NIC under their host bridge: the NICs of their NUMA node;
 *   - malformed entries (dangling links, links leading elsewhere, bad
 *     addresses, bad numa_node, no device at all): an error naming the
 *     entry, never a crash or a silent guess;
 *   - the resolution of a config into rails: names, auto without gpu_pci,
 *     none, and the refusal when node.<id> lists a different number of
 *     addresses than the map gives rails.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "fake_sysfs.h"
#include "locus_config.h"
#include "locus_rail_devs.h"
#include "locus_verbs.h"

/*
 * A PCI function at devices/<path> (its last component its address), on NUMA
 * node numa (NULL: no numa_node file), listed under bus/pci/devices.
 */
static void pci(const char *path, const char *numa)
{
	char d[256], l[128];

	snprintf(d, sizeof(d), "devices/%s", path);
	fs_mk(d);
	if (numa) {
		snprintf(d, sizeof(d), "devices/%s/numa_node", path);
		fs_put(d, numa);
	}
	fs_mk("bus/pci/devices");
	snprintf(d, sizeof(d), "devices/%s", path);
	snprintf(l, sizeof(l), "bus/pci/devices/%s", strrchr(path, '/') + 1);
	fs_link(d, l);
}

/* An RDMA device name on the PCI function at devices/<path> (NULL: a software device). */
static void nic(const char *name, const char *path, const char *numa)
{
	char d[256], t[256];

	snprintf(d, sizeof(d), "class/infiniband/%s/ports/1", name);
	fs_mk(d);
	if (!path)
		return;
	pci(path, numa);
	snprintf(t, sizeof(t), "devices/%s", path);
	snprintf(d, sizeof(d), "class/infiniband/%s/device", name);
	fs_link(t, d);
}

static int tree_setup(void **state)
{
	(void)state;
	return fs_make_root("railauto");
}

static int tree_teardown(void **state)
{
	(void)state;
	return fs_remove_root();
}

/* Map gpus onto the tree; names[g] of the devices chosen. 0 or the error. */
static int map(const char *const *gpus, unsigned n, const char **names, struct locus_error *err)
{
	static struct locus_verbs_devinfo devs[64];
	unsigned gd[LOCUS_CFG_MAX_GPUS], nd = 0;
	int ret = locus_verbs_dev_near_gpus(fs_root, gpus, n, devs, 64, &nd, gd, err);

	for (unsigned g = 0; ret == 0 && g < n; g++) {
		assert_true(gd[g] < nd);
		names[g] = devs[gd[g]].name;
	}
	return ret;
}

static void expect_map(const char *const *gpus, unsigned n, const char *const *want)
{
	struct locus_error err = { 0 };
	const char *got[LOCUS_CFG_MAX_GPUS];

	if (map(gpus, n, got, &err) < 0)
		fail_msg("map: %s", err.msg);
	for (unsigned g = 0; g < n; g++)
		if (strcmp(got[g], want[g]))
			fail_msg("GPU %u (%s): %s, want %s", g, gpus[g], got[g], want[g]);
}

/* A config of node 0 (of two) with rdma_device = auto, these GPUs and addresses. */
static void auto_cfg(struct locus_config *c, const char *const *gpus, unsigned n, unsigned rails)
{
	locus_config_defaults(c);
	strcpy(c->rdma_device, "auto");
	strcpy(c->rdma_devices[0], "auto");
	c->gpus_per_node = n;
	c->n_gpu_pci = n;
	for (unsigned g = 0; g < n; g++)
		snprintf(c->gpu_pci[g], sizeof(c->gpu_pci[g]), "%s", gpus[g]);
	c->n_nodes = 2;
	for (unsigned i = 0; i < 2; i++) {
		c->nodes[i].set = 1;
		c->nodes[i].n_rails = (uint8_t)rails;
	}
}

/* ---- 8 GPUs, 8 NICs, two sockets, two switches per socket -------------------- */

static const char *const gpus8[8] = {
	"0000:03:00.0", "0000:05:00.0", "0000:13:00.0", "0000:15:00.0",
	"0000:83:00.0", "0000:85:00.0", "0000:93:00.0", "0000:95:00.0",
};

static void tree8(void)
{
	/* switch i: upstream path, its downstream bus, endpoint buses, NIC names, NUMA node */
	static const struct {
		const char *sw, *down, *ep[4], *nic[2], *numa;
	} s[4] = {
		{ "pci0000:00/0000:00:01.0/0000:01:00.0", "02", { "03", "04", "05", "06" },
		  { "mlx5_0", "mlx5_1" }, "0\n" },
		{ "pci0000:00/0000:00:02.0/0000:11:00.0", "12", { "13", "14", "15", "16" },
		  { "mlx5_2", "mlx5_3" }, "0\n" },
		/* the second socket's NICs named against the order of its GPUs */
		{ "pci0000:80/0000:80:01.0/0000:81:00.0", "82", { "83", "84", "85", "86" },
		  { "mlx5_6", "mlx5_7" }, "1\n" },
		{ "pci0000:80/0000:80:02.0/0000:91:00.0", "92", { "93", "94", "95", "96" },
		  { "mlx5_4", "mlx5_5" }, "1\n" },
	};

	for (int i = 0; i < 4; i++) {
		/* downstream port j, one endpoint each: GPU, NIC, GPU, NIC */
		for (int j = 0; j < 4; j++) {
			char path[200];

			snprintf(path, sizeof(path), "%s/0000:%s:%02x.0/0000:%s:00.0", s[i].sw,
				 s[i].down, j, s[i].ep[j]);
			if (j % 2 == 0)
				pci(path, s[i].numa);
			else
				nic(s[i].nic[j / 2], path, s[i].numa);
		}
	}
	nic("rxe0", NULL, NULL); /* a software device beside them: never nearest */
}

static void test_eight_by_eight(void **state)
{
	static const char *const want[8] = { "mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3",
					     "mlx5_6", "mlx5_7", "mlx5_4", "mlx5_5" };
	struct locus_config c;
	struct locus_rail_devs rd;
	struct locus_error err = { 0 };
	(void)state;

	tree8();
	expect_map(gpus8, 8, want);
	/* one rail per NIC, numbered as the GPUs name them */
	auto_cfg(&c, gpus8, 8, 8);
	if (locus_rail_devs_resolve(&c, fs_root, 1, &rd, &err) < 0)
		fail_msg("%s", err.msg);
	assert_int_equal(rd.n, 8);
	assert_int_equal(rd.n_gpus, 8);
	for (unsigned r = 0; r < 8; r++) {
		assert_string_equal(rd.name[r], want[r]);
		assert_int_equal(rd.gpu_rail[r], r);
	}
	/* node.0 with one address: refused, naming the rails it needs */
	auto_cfg(&c, gpus8, 8, 1);
	assert_int_equal(locus_rail_devs_resolve(&c, fs_root, 1, &rd, &err), -ERANGE);
	assert_non_null(strstr(err.msg, "gpu_pci's 8 GPUs are nearest to 8 RDMA device(s), rails "
				 "in this order: mlx5_0 mlx5_1 mlx5_2 mlx5_3 mlx5_6 mlx5_7 mlx5_4 "
				 "mlx5_5; node.0 lists 1 address(es)"));
	/* one node (the loopback alone): rail 0's device, no count to match */
	assert_int_equal(locus_rail_devs_resolve(&c, fs_root, 0, &rd, &err), 0);
	assert_string_equal(rd.name[0], "mlx5_0");
	assert_int_equal(rd.n_gpus, 0);
}

/* ---- 4 GPUs, 2 NICs: two GPUs share a NIC -------------------------------------- */

static void test_four_by_two(void **state)
{
	static const char *const gpus[4] = { "0000:03:00.0", "0000:04:00.0", "0000:13:00.0",
					     "0000:14:00.0" };
	static const char *const want[4] = { "mlx5_0", "mlx5_0", "mlx5_1", "mlx5_1" };
	/* the same GPUs in another rank order: rails follow the first appearance */
	static const char *const gpus2[4] = { "0000:13:00.0", "0000:03:00.0", "0000:14:00.0",
					      "0000:04:00.0" };
	struct locus_config c;
	struct locus_rail_devs rd;
	struct locus_error err = { 0 };
	(void)state;

	pci("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0", "0\n");
	pci("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0", "0\n");
	nic("mlx5_0", "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:02.0/0000:05:00.0", "0\n");
	pci("pci0000:00/0000:00:02.0/0000:11:00.0/0000:12:00.0/0000:13:00.0", "0\n");
	pci("pci0000:00/0000:00:02.0/0000:11:00.0/0000:12:01.0/0000:14:00.0", "0\n");
	nic("mlx5_1", "pci0000:00/0000:00:02.0/0000:11:00.0/0000:12:02.0/0000:15:00.0", "0\n");
	expect_map(gpus, 4, want);

	auto_cfg(&c, gpus, 4, 2);
	assert_int_equal(locus_rail_devs_resolve(&c, fs_root, 1, &rd, &err), 0);
	assert_int_equal(rd.n, 2);
	assert_string_equal(rd.name[0], "mlx5_0");
	assert_string_equal(rd.name[1], "mlx5_1");
	assert_memory_equal(rd.gpu_rail, ((uint8_t[]){ 0, 0, 1, 1 }), 4);

	auto_cfg(&c, gpus2, 4, 2);
	assert_int_equal(locus_rail_devs_resolve(&c, fs_root, 1, &rd, &err), 0);
	assert_string_equal(rd.name[0], "mlx5_1");
	assert_string_equal(rd.name[1], "mlx5_0");
	assert_memory_equal(rd.gpu_rail, ((uint8_t[]){ 0, 1, 0, 1 }), 4);

	/* more addresses than the map's rails */
	auto_cfg(&c, gpus, 4, 4);
	assert_int_equal(locus_rail_devs_resolve(&c, fs_root, 1, &rd, &err), -ERANGE);
	assert_non_null(strstr(err.msg, "nearest to 2 RDMA device(s), rails in this order: "
				 "mlx5_0 mlx5_1; node.0 lists 4 address(es)"));
}

/*
 * The deepest common ancestor first, hops second: a NIC behind a nested
 * switch under the GPU's switch beats an integrated NIC on the host bridge
 * (fewer hops, but only the root complex in common); between two NICs
 * under the GPU's switch, the one fewer hops away wins.
 */
static void test_switch_then_hops(void **state)
{
	static const char *const gpu[1] = { "0000:03:00.0" };
	(void)state;

	pci("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0", "0\n");
	/* on the host bridge itself: 5 hops from the GPU, the root complex in common */
	nic("mlx5_0", "pci0000:00/0000:00:1c.0", "0\n");
	/* behind a second switch under the GPU's: 6 hops, the GPU's switch in common */
	nic("mlx5_1", "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0/"
		      "0000:05:00.0/0000:06:00.0", "0\n");
	expect_map(gpu, 1, (const char *const[]){ "mlx5_1" });
	/* on the GPU's switch: 4 hops */
	nic("mlx5_2", "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:02.0/0000:07:00.0", "0\n");
	expect_map(gpu, 1, (const char *const[]){ "mlx5_2" });
}

/* ---- GPUs with no NIC under their host bridge: the NICs of their NUMA node -------- */

static void test_numa_fallback(void **state)
{
	/* separate host bridges per PCIe stack, as on most two-socket servers */
	static const char *const gpus[5] = { "0000:16:00.0", "0000:3c:00.0", "0000:b1:00.0",
					     "0000:c1:00.0", "0000:d1:00.0" };
	static const char *const want[5] = { "mlx5_1", "mlx5_1", "mlx5_0", "mlx5_2", "mlx5_0" };
	(void)state;

	nic("mlx5_0", "pci0000:97/0000:97:01.0/0000:98:00.0", "1\n");
	nic("mlx5_1", "pci0000:3a/0000:3a:01.0/0000:3b:00.0", "0\n");
	nic("mlx5_2", "pci0000:ae/0000:ae:01.0/0000:af:00.0", "1\n");
	/* GPU 0: socket 0, alone on its bridge: the one NIC of node 0 */
	pci("pci0000:15/0000:15:01.0/0000:16:00.0", "0\n");
	/* GPU 1: under mlx5_1's host bridge: nearest by PCIe (before the spread) */
	pci("pci0000:3a/0000:3a:02.0/0000:3c:00.0", "0\n");
	/* GPUs 2, 3: socket 1, no NIC on their bridges: node 1's two NICs, spread */
	pci("pci0000:b0/0000:b0:01.0/0000:b1:00.0", "1\n");
	pci("pci0000:c0/0000:c0:01.0/0000:c1:00.0", "1\n");
	/* GPU 4: the kernel knows no node for it: the NIC fewest GPUs took, then the name */
	pci("pci0000:d0/0000:d0:01.0/0000:d1:00.0", NULL);
	expect_map(gpus, 5, want);
}

/* ---- malformed trees --------------------------------------------------------------- */

static void expect_err(const char *const *gpus, unsigned n, int code, const char *msg)
{
	struct locus_error err = { 0 };
	const char *got[LOCUS_CFG_MAX_GPUS];
	int ret = map(gpus, n, got, &err);

	if (ret != -code || !strstr(err.msg, msg))
		fail_msg("got %d '%s', want %d '...%s...'", ret, err.msg, -code, msg);
}

static void test_malformed(void **state)
{
	static const char *const one[1] = { "0000:03:00.0" };
	static const char *const two[2] = { "0000:03:00.0", "0000:42:00.0" };
	char p[256];
	(void)state;

	/* no RDMA device at all */
	fs_mk("devices");
	pci("pci0000:00/0000:00:01.0/0000:03:00.0", "0\n");
	expect_err(one, 1, ENODEV, "no RDMA device under");
	nic("mlx5_0", "pci0000:00/0000:00:02.0/0000:05:00.0", "0\n");
	expect_map(one, 1, (const char *const[]){ "mlx5_0" });

	/* a GPU the machine does not have */
	expect_err(two, 2, ENODEV, "GPU 1 (0000:42:00.0): no such PCI device");
	/* addresses that are not addresses */
	expect_err((const char *const[]){ "0000:03:00" }, 1, EINVAL,
		   "GPU 0: '0000:03:00' is not a PCI address dddd:bb:dd.f");
	expect_err((const char *const[]){ "../../../etc" }, 1, EINVAL, "is not a PCI address");
	expect_err((const char *const[]){ "0000:03:00.8" }, 1, EINVAL, "is not a PCI address");
	/* a GPU link that leads nowhere */
	fs_link("devices/pci0000:00/0000:00:01.0/0000:42:00.0", "bus/pci/devices/0000:42:00.0");
	expect_err(two, 2, ENODEV, "GPU 1 (0000:42:00.0): ");
	expect_err(two, 2, ENODEV, "is a dangling link");
	/* ... to another device */
	fs_link("devices/pci0000:00/0000:00:01.0/0000:03:00.0", "bus/pci/devices/0000:42:00.0");
	expect_err(two, 2, EINVAL, "0000:03:00.0, another device");
	/* ... outside the devices tree */
	fs_mk("elsewhere/0000:42:00.0");
	fs_link("elsewhere/0000:42:00.0", "bus/pci/devices/0000:42:00.0");
	expect_err(two, 2, EINVAL, "outside");
	unlink(strcat(strcpy(p, fs_root), "/bus/pci/devices/0000:42:00.0"));

	/* a numa_node that is not a number, on the GPU and on a NIC */
	fs_put("devices/pci0000:00/0000:00:01.0/0000:03:00.0/numa_node", "zero\n");
	expect_err(one, 1, EINVAL, "GPU 0 (0000:03:00.0): ");
	expect_err(one, 1, EINVAL, "numa_node is not a NUMA node number");
	fs_put("devices/pci0000:00/0000:00:01.0/0000:03:00.0/numa_node", "4096\n");
	expect_err(one, 1, EINVAL, "numa_node is not a NUMA node number");
	fs_put("devices/pci0000:00/0000:00:01.0/0000:03:00.0/numa_node", "");
	expect_err(one, 1, EINVAL, "numa_node is not a NUMA node number");
	fs_put("devices/pci0000:00/0000:00:01.0/0000:03:00.0/numa_node", "-1\n");
	expect_map(one, 1, (const char *const[]){ "mlx5_0" });
	fs_put("devices/pci0000:00/0000:00:02.0/0000:05:00.0/numa_node", "0x1\n");
	expect_err(one, 1, EINVAL, "RDMA device mlx5_0: ");
	fs_put("devices/pci0000:00/0000:00:02.0/0000:05:00.0/numa_node", "0\n");

	/* an RDMA device whose device link dangles, or leads outside */
	nic("mlx5_1", NULL, NULL);
	fs_link("devices/pci0000:00/0000:00:09.0/0000:09:00.0", "class/infiniband/mlx5_1/device");
	expect_err(one, 1, ENODEV, "RDMA device mlx5_1: ");
	expect_err(one, 1, ENODEV, "class/infiniband/mlx5_1/device is a dangling link");
	fs_link("elsewhere", "class/infiniband/mlx5_1/device");
	expect_err(one, 1, EINVAL, "RDMA device mlx5_1: ");
	/* no link at all: a software device, taken as one (never nearer than a PCI NIC) */
	unlink(strcat(strcpy(p, fs_root), "/class/infiniband/mlx5_1/device"));
	expect_map(one, 1, (const char *const[]){ "mlx5_0" });

	/* no devices tree */
	snprintf(p, sizeof(p), "rm -rf '%s/devices'", fs_root);
	assert_int_equal(system(p), 0);
	expect_err(one, 1, ENOENT, "/devices");
}

/* ---- the config's other forms ------------------------------------------------------ */

static void test_resolve_forms(void **state)
{
	struct locus_config c;
	struct locus_rail_devs rd;
	struct locus_error err = { 0 };
	(void)state;

	nic("mlx5_0", "pci0000:00/0000:00:01.0/0000:01:00.0", "0\n");
	nic("mlx5_1", "pci0000:80/0000:80:01.0/0000:81:00.0", "1\n");
	pci("pci0000:80/0000:80:02.0/0000:82:00.0", "1\n");

	/* names: as listed */
	locus_config_defaults(&c);
	strcpy(c.rdma_device, "b");
	strcpy(c.rdma_devices[0], "b");
	strcpy(c.rdma_devices[1], "a");
	c.n_rdma_devices = 2;
	assert_int_equal(locus_rail_devs_resolve(&c, fs_root, 1, &rd, &err), 0);
	assert_int_equal(rd.n, 2);
	assert_string_equal(rd.name[0], "b");
	assert_string_equal(rd.name[1], "a");
	assert_int_equal(rd.n_gpus, 0);
	/* none: no rail */
	locus_config_defaults(&c);
	assert_int_equal(locus_rail_devs_resolve(&c, fs_root, 1, &rd, &err), 0);
	assert_int_equal(rd.n, 0);
	/* auto without gpu_pci: one device, nearest rdma_near_pci, as before */
	strcpy(c.rdma_device, "auto");
	strcpy(c.rdma_near_pci, "0000:82:00.0");
	assert_int_equal(locus_rail_devs_resolve(&c, fs_root, 1, &rd, &err), 0);
	assert_int_equal(rd.n, 1);
	assert_string_equal(rd.name[0], "mlx5_1");
	assert_int_equal(rd.n_gpus, 0);
	c.rdma_near_pci[0] = '\0';
	assert_int_equal(locus_rail_devs_resolve(&c, fs_root, 1, &rd, &err), 0);
	assert_string_equal(rd.name[0], "mlx5_0");
	/* auto with a GPU that is not there: the map's error, said to be auto's */
	auto_cfg(&c, (const char *const[]){ "0000:82:00.0", "0000:99:00.0" }, 2, 1);
	assert_int_equal(locus_rail_devs_resolve(&c, fs_root, 1, &rd, &err), -ENODEV);
	assert_non_null(strstr(err.msg, "rdma_device = auto with gpu_pci: GPU 1 (0000:99:00.0): "
				 "no such PCI device"));
	/* both GPUs nearest one NIC: one rail, one address */
	auto_cfg(&c, (const char *const[]){ "0000:82:00.0", "0000:82:00.0" }, 2, 1);
	assert_int_equal(locus_rail_devs_resolve(&c, fs_root, 1, &rd, &err), 0);
	assert_int_equal(rd.n, 1);
	assert_string_equal(rd.name[0], "mlx5_1");
	assert_memory_equal(rd.gpu_rail, ((uint8_t[]){ 0, 0 }), 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_eight_by_eight, tree_setup, tree_teardown),
		cmocka_unit_test_setup_teardown(test_four_by_two, tree_setup, tree_teardown),
		cmocka_unit_test_setup_teardown(test_switch_then_hops, tree_setup, tree_teardown),
		cmocka_unit_test_setup_teardown(test_numa_fallback, tree_setup, tree_teardown),
		cmocka_unit_test_setup_teardown(test_malformed, tree_setup, tree_teardown),
		cmocka_unit_test_setup_teardown(test_resolve_forms, tree_setup, tree_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
