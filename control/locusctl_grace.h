/* SPDX-License-Identifier: MIT */
/*
 * locusctl's GRACE subcommands. locusctl's dispatch calls
 * locusctl_grace_main(subcmd, argc, argv) with argv[0] the subcommand name:
 *
 *   fit --grace (--trace FILE [--use-gen] | --esft DIR [--layers 26 --k 6])
 *       --nodes N --gpus G [--capacity C] [--replica-budget B] [--n-experts E]
 *       [--r R] [--seed S] [--no-replication] [--load-tol T] [--uneven]
 *       -o TABLE                       --load-tol: swap primaries by load
 *                                      while the peak GPU is above (1 + T) x
 *                                      mean (default 0.1; larger keeps more
 *                                      co-activated experts together);
 *                                      --uneven: allow more than ceil(E/N)
 *                                      primaries on a GPU (up to capacity)
 *   fit --grace (--trace FILE | --esft DIR) --eldr-table ELDR_TABLE
 *       --ep-ranks-per-decoder R --nodes N --gpus G [--capacity C]
 *       [--replica-budget B] [--r R] [--seed S] [--no-replication]
 *       [--load-tol T] [--uneven] -o SET
 *                                      one placement per decoder's EP group
 *                                      (control/locus_grace_epgroups.h), in
 *                                      a placement set (shm/locus_graceset.h)
 *   show TABLE                         a GRACE table file, in text
 *   eplb-export TABLE [-o FILE.json]   phy2log / log2phy / logcnt JSON
 *   eplb-import FILE.json --nodes N --gpus G [--capacity C]
 *       [--replica-budget B] -o TABLE
 *   rebalance -i INSTANCE --table TABLE --interval S [--count N]
 *       [--threshold 0.05] [--window N] [--decay D] [--every N]
 *       [--max-moves M] [--trace CALIB] [--swaps N] [--counter NAME]
 *       [--timeout-ms N] [-o TABLE]
 *
 * rebalance reads the live per-(layer, expert) token counters of a running
 * locusd (counter NAME; default "grace_expert_tokens", else the engine's "expert_tokens";
 * shape [layers >= L][experts >= E]) every interval, keeps the last
 * --window intervals' increases (default 1), an interval k old weighted by
 * --decay^k (default 1), and every --every intervals (default 1) refits
 * replication on TABLE's grouping with those loads, keeping the refit only
 * for the layers it improves, best gain per moved copy first, within
 * --max-moves copies a push may load onto GPUs (default no bound); it prints
 * the predicted gain against the moves and pushes to the GRACE table channel
 * only when the predicted skew improves by more than the threshold
 * (relative). The pushed table becomes the base of the next round. Before
 * each refit, a layer whose primaries' peak drifted above 1.1 x the mean
 * takes up to --swaps N swaps of primaries between GPUs (default 2 with
 * --trace, whose co-activation picks the swaps losing the least; 0 without:
 * the grouping stays); swapped experts count as moved copies.
 *
 * Returns a process exit code: 0 success, 1 failure (message on stderr),
 * 2 usage error.
 */
#ifndef LOCUSCTL_GRACE_H
#define LOCUSCTL_GRACE_H

int locusctl_grace_main(const char *subcmd, int argc, char **argv);

#endif /* LOCUSCTL_GRACE_H */
