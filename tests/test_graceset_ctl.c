// SPDX-License-Identifier: MIT
/*
 * locusctl and placement sets against a running node (engine and control on
 * threads, the real locusctl binary over the control socket): fit per
 * decoder from the repository's sample and an ELDR table, show --json
 * (groups, ranks, primaries as in the file), push (every group adopted at
 * once), diff per group (a file against another, and against what runs),
 * rollback to the previous set, a single table after a set and back, a set
 * with a missing group refused by locusctl before it leaves, and a set
 * for another cluster shape refused by locusd with its reason printed and
 * counted.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "graceset_util.h"
#include "locus_engine.h"
#include "locus_graceset.h"
#include "locus_shm.h"
#include "locus_tblfile.h"
#include "mini_json.h"
#include "node_util.h"
#include "data_paths.h"

#define INST "t-gsetctl"

static char locusctl[4096];
static char tmpdir[] = "/tmp/test_graceset_ctl.XXXXXX";
static char out[1 << 18];
static struct tu_node tn;

/* Run "locusctl <args>" with stderr folded into out; returns the exit status. */
static int ctl(const char *fmt, ...)
{
	char args[4096], cmd[12288];
	va_list ap;
	size_t n = 0;
	FILE *p;
	int st;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "cd '%s' && '%s' %s 2>&1 </dev/null", tmpdir, locusctl, args);
	p = popen(cmd, "r");
	assert_non_null(p);
	while (n + 1 < sizeof(out)) {
		size_t got = fread(out + n, 1, sizeof(out) - 1 - n, p);

		if (!got)
			break;
		n += got;
	}
	out[n] = '\0';
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

#define CTL_OK(...)                                                                   \
	do {                                                                          \
		if (ctl(__VA_ARGS__) != 0)                                            \
			fail_msg("locusctl failed:\n%s", out);                        \
	} while (0)

static uint64_t ctr(const char *name, uint32_t elem)
{
	return tu_ctr(tn.view.ctrs, name, elem);
}

static uint64_t grace_gen(void)
{
	return locus_engine_table_generation(locus_node_engine(tn.node), 1);
}

/*
 * Wait (bounded) for the engine to run a GRACE generation after "after": a
 * push returns once the table is published, the engine adopts it at its next
 * pass (on a loaded machine, later than the next line of the test).
 */
static uint64_t wait_gen_after(uint64_t after)
{
	for (int i = 0; i < 100000 && grace_gen() <= after; i++)
		tu_nap();
	assert_true(grace_gen() > after);
	return grace_gen();
}

/* Wait (bounded) for the engine to run generation gen of the GRACE channel. */
static void wait_gen(uint64_t gen)
{
	for (int i = 0; i < 100000 && grace_gen() < gen; i++)
		tu_nap();
	assert_int_equal(grace_gen(), gen);
}

static int setup(void **state)
{
	static const char conf[] =
		"[locusd]\ninstance = " INST "\nclient_slots = 4\nring_size = 64\n"
		"stage_size = 65536\nclient_inbox_slots = 16\ninbox_slot_size = 4096\n"
		"moe_layers = 26\nmoe_experts = 64\nmax_decoders = 4\nmax_batch_tokens = 64\n"
		"table_slot_size = 1048576\nload_timeout_ms = 60000\n"
		"[cluster]\ngpus_per_node = 4\nnode.0 = 127.0.0.1:7471\n";
	char path[4200];
	(void)state;

	setenv(LOCUS_SHM_DIR_ENV, tmpdir, 1);
	snprintf(path, sizeof(path), "%s/state", tmpdir);
	setenv("LOCUS_STATE_DIR", path, 1);
	return tu_node_start(&tn, conf);
}

static int teardown(void **state)
{
	(void)state;
	tu_node_stop(&tn);
	return 0;
}

static void test_fit_show(void **state)
{
	struct mj_val j;
	const struct mj_val *groups;
	(void)state;

	CTL_OK("fit --trace '%s/tests/data/calib_sample.jsonl' --decoders 2 -o eldr.tbl",
	       locus_data_root());
	CTL_OK("fit --grace --trace '%s/tests/data/calib_sample.jsonl' --eldr-table eldr.tbl "
	       "--ep-ranks-per-decoder 2 --nodes 1 --gpus 4 --replica-budget 2 -o set1.tbl",
	       locus_data_root());
	assert_non_null(strstr(out, "2 decoders x 2 EP ranks on 1 x 4 GPUs"));
	/* the same with no replication: another placement to push, diff and roll back from */
	CTL_OK("fit --grace --trace '%s/tests/data/calib_sample.jsonl' --eldr-table eldr.tbl "
	       "--ep-ranks-per-decoder 2 --nodes 1 --gpus 4 --no-replication -o set2.tbl",
	       locus_data_root());
	/* mismatched options are usage errors */
	assert_int_equal(ctl("fit --grace --trace '%s/tests/data/calib_sample.jsonl' "
			     "--ep-ranks-per-decoder 2 --nodes 1 --gpus 4 -o x.tbl",
			     locus_data_root()), 2);
	assert_int_equal(ctl("fit --grace --trace '%s/tests/data/calib_sample.jsonl' "
			     "--eldr-table eldr.tbl --ep-ranks-per-decoder 3 --nodes 1 --gpus 4 "
			     "-o x.tbl", locus_data_root()), 1);
	assert_non_null(strstr(out, "2 decoders x 3 EP ranks each = 6 ranks, the cluster has 4"));

	CTL_OK("show set1.tbl --json");
	assert_int_equal(mj_parse(out, &j, NULL), 0);
	assert_string_equal(mj_get(&j, "kind")->s, "graceset");
	assert_int_equal(mj_get(&j, "n_groups")->num, 2);
	groups = mj_get(&j, "groups");
	assert_int_equal(groups->n, 2);
	for (size_t g = 0; g < 2; g++) {
		const struct mj_val *x = mj_at(groups, g), *layers = mj_get(x, "layers");

		assert_int_equal(mj_get(x, "group")->num, g);
		assert_int_equal(mj_get(x, "first_rank")->num, 2 * g);
		assert_int_equal(mj_get(x, "n_ranks")->num, 2);
		assert_int_equal(layers->n, 26);
		/* every primary of the group inside its ranks */
		for (size_t l = 0; l < layers->n; l++) {
			const struct mj_val *pri = mj_get(mj_at(layers, l), "primary");

			assert_int_equal(pri->n, 64);
			for (size_t e = 0; e < pri->n; e++) {
				double r = mj_at(pri, e)->num;

				assert_true(r >= 2.0 * g && r < 2.0 * g + 2);
			}
		}
	}
	mj_free(&j);
	CTL_OK("show set1.tbl");
	assert_non_null(strstr(out, "group 1: decoder 1, ranks 2..3"));
}

static void test_push_diff_rollback(void **state)
{
	uint64_t g1, g2;
	(void)state;

	CTL_OK("push -i " INST " set1.tbl");
	assert_non_null(strstr(out, "pushed graceset table set1.tbl"));
	g1 = wait_gen_after(0);
	assert_int_equal(ctr("grace_groups", 0), 2);
	assert_int_equal(ctl("diff -i " INST " set1.tbl"), 0);
	assert_non_null(strstr(out, "tables are equal"));

	/* a file against another: per group */
	assert_int_equal(ctl("diff set1.tbl set2.tbl"), 1);
	assert_non_null(strstr(out, "group 0: layer"));
	assert_non_null(strstr(out, "group 1: layer"));

	CTL_OK("push -i " INST " set2.tbl");
	g2 = wait_gen_after(g1);
	assert_int_equal(ctl("diff -i " INST " set1.tbl"), 1);
	assert_non_null(strstr(out, "replica sets changed"));

	/* rollback: the set of g1 again, as a new generation */
	CTL_OK("rollback -i " INST " --kind grace");
	assert_non_null(strstr(out, "to the table of generation"));
	wait_gen(g2 + 1);
	assert_int_equal(ctl("diff -i " INST " set1.tbl"), 0);
	assert_int_equal(ctr("grace_groups", 0), 2);
}

static void test_single_table_and_back(void **state)
{
	uint64_t g;
	(void)state;

	/* one table for every rank after a set: one group */
	CTL_OK("fit --grace --trace '%s/tests/data/calib_sample.jsonl' --nodes 1 --gpus 4 "
	       "-o one.tbl", locus_data_root());
	CTL_OK("push -i " INST " one.tbl");
	g = grace_gen();
	assert_int_equal(ctr("grace_groups", 0), 1);
	assert_int_equal(ctl("diff -i " INST " set1.tbl"), 1);
	assert_non_null(strstr(out, "kind: grace -> graceset"));
	/* rollback on the GRACE channel finds the set pushed before the table */
	CTL_OK("rollback -i " INST " --kind grace");
	wait_gen(g + 1);
	assert_int_equal(ctr("grace_groups", 0), 2);
	assert_int_equal(ctl("diff -i " INST " set1.tbl"), 0);
}

static void test_refusals(void **state)
{
	struct gs_group gr[1] = { { .id = 0, .first = 0, .n = 2 } };
	uint16_t pri[64], rep[64];
	uint64_t g = grace_gen(), rej = ctr("table_rejected", 1);
	char path[4200];
	size_t len;
	void *set;
	FILE *f;
	(void)state;

	/* a set missing group 1 (ranks 2..3): locusctl says so and sends nothing */
	for (int e = 0; e < 64; e++) {
		pri[e] = (uint16_t)(e % 2);
		rep[e] = LOCUS_GRACE_NO_RANK;
	}
	gr[0].blob = gs_table(26, 64, 1, 4, 1, pri, rep, &gr[0].len);
	set = gs_set(gr, 1, &len);
	snprintf(path, sizeof(path), "%s/missing.tbl", tmpdir);
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(set, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
	free(set);
	assert_int_equal(ctl("push -i " INST " missing.tbl"), 1);
	assert_non_null(strstr(out, "ranks 2..3 of the cluster's 4 belong to no group"));
	assert_int_equal(grace_gen(), g);

	/* a valid set for 2 nodes x 2 GPUs: locusd refuses it, counted, the old one stays */
	CTL_OK("fit --grace --trace '%s/tests/data/calib_sample.jsonl' --eldr-table eldr.tbl "
	       "--ep-ranks-per-decoder 2 --nodes 2 --gpus 2 -o other.tbl", locus_data_root());
	assert_int_equal(ctl("push -i " INST " other.tbl"), 1);
	assert_non_null(strstr(out, "this node runs 1 x 4 GPUs"));
	assert_int_equal(ctr("grace_set_refused", LOCUS_GRACESET_DIMS - 1), 1);
	assert_int_equal(ctr("table_rejected", 1), rej + 1);
	assert_int_equal(ctr("grace_groups", 0), 2);
	assert_int_equal(grace_gen(), g);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fit_show),
		cmocka_unit_test(test_push_diff_rollback),
		cmocka_unit_test(test_single_table_and_back),
		cmocka_unit_test(test_refusals),
	};
	char self[4096], cmd[4200];
	int ret;

	(void)argc;
	locus_data_find_root(argv[0]);
	if (!realpath(argv[0], self)) {
		perror(argv[0]);
		return 1;
	}
	snprintf(locusctl, sizeof(locusctl), "%s/../bin/locusctl", dirname(self));
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	ret = cmocka_run_group_tests(tests, setup, teardown);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tmpdir);
	return ret;
}
