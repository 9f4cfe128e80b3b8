// SPDX-License-Identifier: MIT
/*
 * GPU-to-engine placement by NUMA node (dataplane/engine_topo.c): hand-worked
 * maps for the layouts of a 2-socket 8-GPU node, GPUs on a node without an
 * engine, unknown nodes, and the sysfs read from a tree of the test's own.
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

#include "locus_engine_topo.h"

static void expect_map(const int *gpu, uint32_t G, const int *eng, uint32_t N,
		       const uint8_t *want)
{
	uint8_t got[16];

	locus_engine_topo_map(gpu, G, eng, N, got);
	for (uint32_t g = 0; g < G; g++)
		if (got[g] != want[g])
			fail_msg("GPU %u: engine %u, want %u", g, got[g], want[g]);
}

static void test_two_sockets(void **state)
{
	/* GPUs 0-3 on socket 0, 4-7 on socket 1; engines listed socket 1 first */
	static const int gpu[8] = { 0, 0, 0, 0, 1, 1, 1, 1 };
	static const int eng[4] = { 1, 1, 0, 0 };
	static const uint8_t want[8] = { 2, 2, 3, 3, 0, 0, 1, 1 };
	/* interleaved GPUs (0, 2, 4, 6 on socket 0), one engine per socket */
	static const int gpu_i[8] = { 0, 1, 0, 1, 0, 1, 0, 1 };
	static const int eng_i[2] = { 1, 0 };
	static const uint8_t want_i[8] = { 1, 0, 1, 0, 1, 0, 1, 0 };
	(void)state;

	expect_map(gpu, 8, eng, 4, want);
	expect_map(gpu_i, 8, eng_i, 2, want_i);
}

static void test_strays(void **state)
{
	/* GPUs 0-1 on node 1, which has no engine: spread over all; 2-3 on node 0's two */
	static const int gpu[4] = { 1, 1, 0, 0 };
	static const int eng[2] = { 0, 0 };
	static const uint8_t want[4] = { 0, 1, 0, 1 };
	/* unknown nodes (one-node machines, no firmware table): the order of the GPUs */
	static const int unk[4] = { -1, -1, -1, -1 };
	static const uint8_t want_u[4] = { 0, 0, 1, 1 };
	/* more engines on a node than GPUs: one GPU each, in order */
	static const int gpu2[2] = { 0, 0 };
	static const int eng4[4] = { 0, 0, 0, 0 };
	static const uint8_t want2[2] = { 0, 2 };
	(void)state;

	expect_map(gpu, 4, eng, 2, want);
	expect_map(unk, 4, eng, 2, want_u);
	expect_map(gpu2, 2, eng4, 4, want2);
}

static void put(const char *root, const char *bdf, const char *text)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/bus", root);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/bus/pci", root);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/bus/pci/devices", root);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/bus/pci/devices/%s", root, bdf);
	assert_int_equal(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/bus/pci/devices/%s/numa_node", root, bdf);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void test_sysfs(void **state)
{
	char root[] = "/tmp/locus-topo-test-XXXXXX";
	(void)state;

	assert_non_null(mkdtemp(root));
	put(root, "0000:17:00.0", "0\n");
	put(root, "0000:b1:00.0", "1\n");
	put(root, "0000:03:00.0", "-1\n");
	put(root, "0000:04:00.0", "junk\n");
	assert_int_equal(locus_engine_topo_pci_numa(root, "0000:17:00.0"), 0);
	assert_int_equal(locus_engine_topo_pci_numa(root, "0000:b1:00.0"), 1);
	assert_int_equal(locus_engine_topo_pci_numa(root, "0000:03:00.0"), -1);
	assert_int_equal(locus_engine_topo_pci_numa(root, "0000:04:00.0"), -1);
	assert_int_equal(locus_engine_topo_pci_numa(root, "0000:99:00.0"), -ENOENT);
	{
		char cmd[600];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
		assert_int_equal(system(cmd), 0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_two_sockets),
		cmocka_unit_test(test_strays),
		cmocka_unit_test(test_sysfs),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
