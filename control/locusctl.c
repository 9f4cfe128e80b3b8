// SPDX-License-Identifier: MIT
/* locusctl: the control plane's command line; dispatch and shared helpers. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "locus_common.h"
#include "locus_tblfile.h"
#include "locusctl.h"
#include "locusctl_grace.h"

/* GRACE's subcommands (control/locusctl_grace.c) take their name first. */
static int grace_fit(int argc, char **argv)
{
	return locusctl_grace_main("fit", argc, argv);
}

static int grace_show(int argc, char **argv)
{
	return locusctl_grace_main("show", argc, argv);
}

static int grace_other(int argc, char **argv)
{
	return locusctl_grace_main(argv[0], argc, argv);
}

static int cmd_rebalance(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--cluster"))
			return locusctl_rebalance_cluster(argc, argv);
	return grace_other(argc, argv);
}

/*
 * Kinds of fit, chosen by a flag anywhere on the fit command line (the
 * first entry is the default); the handler gets the whole argv.
 */
static const struct locusctl_cmd fit_kinds[] = {
	{ "--eldr", locusctl_eldr_fit, "fit [--eldr] ... (ELDR decode-routing table)" },
	{ "--grace", grace_fit, "fit --grace ... (GRACE expert placement table)" },
};

static int cmd_fit(int argc, char **argv)
{
	for (size_t k = 1; k < LOCUS_ARRAY_SIZE(fit_kinds); k++)
		for (int i = 1; i < argc; i++)
			if (!strcmp(argv[i], fit_kinds[k].name))
				return fit_kinds[k].run(argc, argv);
	return fit_kinds[0].run(argc, argv);
}

/*
 * show dispatches on the kind in the file's sealed header; the first entry
 * also takes files that are not tables at all (it reports what is wrong).
 */
static const struct {
	unsigned kind;
	int (*run)(int argc, char **argv);
} show_kinds[] = {
	{ LOCUS_TBL_ELDR, locusctl_eldr_show },
	{ LOCUS_TBL_GRACE, grace_show },
	{ LOCUS_TBL_GRACE_SET, locusctl_graceset_show },
};

static int cmd_show(int argc, char **argv)
{
	struct locus_tbl_hdr h;
	int fd = -1;

	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--cluster"))
			return locusctl_show_cluster(argc, argv);
	for (int i = 1; i < argc && fd < 0; i++)
		if (argv[i][0] != '-')
			fd = open(argv[i], O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = read(fd, &h, sizeof(h));

		close(fd);
		if (n == (ssize_t)sizeof(h) && h.magic == LOCUS_TBL_MAGIC) {
			for (size_t k = 0; k < LOCUS_ARRAY_SIZE(show_kinds); k++)
				if (show_kinds[k].kind == h.kind)
					return show_kinds[k].run(argc, argv);
			fprintf(stderr, "locusctl show: no viewer for %s tables in this build\n",
				locus_tbl_kind_name(h.kind));
			return 1;
		}
	}
	return show_kinds[0].run(argc, argv);
}

/* One line per subcommand; add a subcommand by adding an entry. */
static const struct locusctl_cmd cmds[] = {
	{ "fit", cmd_fit,
	  "fit --trace FILE --decoders K [--decoder-ids 0,1,..] [--tune auto|off]\n"
	  "        [--tau-batch B] [--tau-load-bound X] [--tau 0.1|auto] [--centroids-per-decoder M]\n"
	  "        [--spill-tau T [--spill-margin N]] [--overflow spread|nearest] [--seed N]\n"
	  "        [--slack S] [--balance-price P] [--restarts R] [--decode-weight W]\n"
	  "        [--exact-balance] [--no-mask] [--max-iter N] [--n-experts E] -o TABLE\n"
	  "  locusctl fit --grace (--trace FILE [--use-gen] | --esft DIR) --nodes N --gpus G\n"
	  "        [--capacity C] [--replica-budget B] [--r R] [--seed S]\n"
	  "        [--no-replication] [--load-tol T] [--uneven] [--no-fallback]\n"
	  "        [--peak-weight W] [--cost-gpu C] [--cost-node C] -o TABLE\n"
	  "  locusctl fit --grace --trace FILE --eldr-table ELDR_TABLE --ep-ranks-per-decoder R\n"
	  "        --nodes N --gpus G [--capacity C] [--replica-budget B] -o SET" },
	{ "show", cmd_show, "show TABLE [--json] | show --cluster --etcd URL[,URL] [--cluster-id N] "
			    "[--etcd-prefix P] [--etcd-cacert F --etcd-cert F --etcd-key F]" },
	{ "push", locusctl_push, "push -i INSTANCE TABLE [--timeout-ms N] | push --cluster --etcd "
				 "URL[,URL] [--cluster-id N] [--etcd-prefix P] [--etcd-cacert F "
				 "--etcd-cert F --etcd-key F] [--timeout-ms N] TABLE" },
	{ "diff", locusctl_diff, "diff TABLE_A TABLE_B | diff -i INSTANCE TABLE | diff --cluster "
				 "--etcd URL[,URL] [...] TABLE" },
	{ "rollback", locusctl_rollback,
	  "rollback -i INSTANCE [--kind eldr|grace|graceset] [--to GEN] | rollback --cluster --etcd "
	  "URL[,URL] [--kind eldr|grace] [--to GEN] [...]" },
	{ "eplb-export", grace_other, "eplb-export TABLE [-o FILE.json]   (GRACE)" },
	{ "eplb-import", grace_other,
	  "eplb-import FILE.json --nodes N --gpus G [--capacity C] [--replica-budget B] -o TABLE" },
	{ "simulate", locusctl_simulate,
	  "simulate --trace FILE --decoders K [--table ELDR_TABLE [--tau T1,T2,..\n"
	  "        [--fit-trace FILE (tau chosen on it)]]]\n"
	  "        [--model qwen3-30b-a3b|deepseek-v2-lite] [--gpu h100-sxm|mi300x]\n"
	  "        [--rate R (requests/s, Poisson; 0: all at once)] [--order trace|shuffle]\n"
	  "        [--requests N] [--gen-len N] [--batch-cap B] [--seed S]\n"
	  "        [--policies random,rr,jsq,p2c,domain,eldr] [--json]\n"
	  "        [--hidden H] [--moe-intermediate I] [--dtype-bytes B] [--hbm-gbps G]\n"
	  "        [--fixed-us F | --overhead-us O] [--kv-bytes-per-token KV]\n"
	  "        [--allow-shape-mismatch]\n"
	  "  locusctl simulate --moe --trace FILE [--fit-trace FILE] [--topo 1x8,2x4,4x8]\n"
	  "        [--tokens-per-step B] [--model M] [--gpu G] [--fabric F] [--intra-gbps G]\n"
	  "        [--inter-gbps G] [--tflops T] [--hbm-gbps G] [--latency-us U]\n"
	  "        [--replica-budget B] [--seed S] [--groups N] [--json]" },
	{ "recover", locusctl_recover_cluster,
	  "recover --cluster --etcd URL[,URL] [--interval S] [--settle-ms 1000] [--lease-s 10]\n"
	  "        [--skew auto|X] [--max-moves M] [--expert-bytes B] [--count N] [--cluster-id N]\n"
	  "        [--prepare-timeout-ms N]   (one per node: the leader refits the placement over\n"
	  "        the live ranks and pushes it in two phases when a rank is lost or comes back)" },
	{ "rebalance", cmd_rebalance,
	  "rebalance -i INSTANCE --table TABLE --interval S [--count N] [--threshold 0.05]\n"
	  "        [--window N] [--decay D] [--every N] [--max-moves M]\n"
	  "        [--counter NAME] [--timeout-ms N] [-o TABLE]   (GRACE)\n"
	  "  locusctl rebalance --cluster --etcd URL[,URL] --interval S [the same tuning]\n"
	  "        [--cluster-id N] [--prepare-timeout-ms N]   (every node's loads, two phases)" },
};

static void usage(FILE *f)
{
	fprintf(f, "usage: locusctl <command> [args]\n");
	for (size_t i = 0; i < LOCUS_ARRAY_SIZE(cmds); i++)
		fprintf(f, "  locusctl %s\n", cmds[i].usage);
}

void locusctl_progress(void *arg, const char *stage, uint32_t done, uint32_t total)
{
	static char last_stage[32];
	static uint32_t last_step;
	static int line_open;
	int tty = isatty(STDERR_FILENO);
	uint32_t pct = total ? (uint32_t)((uint64_t)done * 100 / total) : 100;
	int new_stage = strncmp(last_stage, stage, sizeof(last_stage) - 1) != 0;

	(void)arg;
	if (tty) {
		char bar[31];
		uint32_t fill = pct * 30 / 100;

		memset(bar, '#', fill);
		memset(bar + fill, ' ', 30 - fill);
		bar[30] = '\0';
		if (new_stage && line_open)
			fputc('\n', stderr);
		fprintf(stderr, "\r%-8s [%s] %u/%u", stage, bar, done, total);
		line_open = done < total;
		if (!line_open)
			fputc('\n', stderr);
	} else if (new_stage || pct / 10 != last_step / 10 || done >= total) {
		fprintf(stderr, "locusctl: %s %u/%u\n", stage, done, total);
	}
	snprintf(last_stage, sizeof(last_stage), "%s", stage);
	last_step = new_stage ? pct : (pct / 10 != last_step / 10 ? pct : last_step);
	fflush(stderr);
}

int main(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	for (size_t i = 0; i < LOCUS_ARRAY_SIZE(cmds); i++)
		if (!strcmp(argv[1], cmds[i].name))
			return cmds[i].run(argc - 1, argv + 1);
	fprintf(stderr, "locusctl: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
