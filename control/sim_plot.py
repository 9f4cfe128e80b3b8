#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Plots of `locusctl simulate --json` runs (Debian's python3-matplotlib).

    control/sim_plot.py RUN.json [RUN2.json ...] -o DIR

Writes, and names on stdout:
  DIR/tpot_cdf.svg          TPOT CDF of every policy of the first run
  DIR/tpot_vs_tau.svg       ELDR median and p99 TPOT against tau (first run), the best
                            load balancer's (lowest of random/rr/jsq/p2c, per metric) as lines
  DIR/gain_vs_decoders.svg  with runs at several decoder counts: the median and p99 TPOT
                            change of ELDR at its tau (the one chosen on the fit trace when
                            the run has one, else its best median tau) against the best load
                            balancer of each
  DIR/moe_layer_time.svg    from `locusctl simulate --moe --json` runs: MoE-layer time per
                            placement and topology (compute, and 2 x all-to-all hatched),
                            calibration and held-out side by side, 95 % intervals as bars
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

BALANCERS = ("random", "rr", "jsq", "p2c")


def load(path):
    with open(path, encoding="utf-8") as f:
        run = json.load(f)
    if isinstance(run, dict) and run.get("mode") == "moe":
        if not isinstance(run.get("topologies"), list) or not run["topologies"]:
            raise ValueError(f"{path}: a simulate --moe run without topologies")
        return run
    if not isinstance(run, dict) or not isinstance(run.get("policies"), list) or not run["policies"]:
        raise ValueError(f"{path}: not a locusctl simulate --json run (no policies)")
    for p in run["policies"]:
        q = p.get("tpot_quantiles_ms")
        if not isinstance(q, list) or len(q) != 101:
            raise ValueError(f"{path}: policy {p.get('label')!r} has no 101 TPOT quantiles")
    return run


def best_balancer(run, metric="p50"):
    """The load balancer with the lowest TPOT at metric (each metric its own best)."""
    lbs = [p for p in run["policies"] if p["policy"] in BALANCERS]
    return min(lbs, key=lambda p: p["tpot_ms"][metric]) if lbs else None


def title(run):
    return (f"{run['model']} on {run['gpu']}, {run['decoders']} decoders x {run['batch_cap']}, "
            f"{run['rate']:g} req/s")


def finish(fig, ax, xlabel, ylabel, title_text, out):
    """The axes' labels, grid and legend, the figure written to out and closed."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title_text, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def plot_cdf(run, out):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    frac = [q / 100 for q in range(101)]
    for p in run["policies"]:
        ax.plot(p["tpot_quantiles_ms"], frac, label=p["label"],
                linestyle="-" if p["policy"] == "eldr" else "--")
    finish(fig, ax, "TPOT (ms)", "fraction of requests", title(run), out)


def plot_tau(run, out):
    eldr = sorted((p for p in run["policies"] if p["policy"] == "eldr"), key=lambda p: p["tau"])
    if not eldr:
        return False
    taus = [p["tau"] for p in eldr]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(taus, [p["tpot_ms"]["p50"] for p in eldr], "o-", label="ELDR median")
    ax.plot(taus, [p["tpot_ms"]["p99"] for p in eldr], "s-", label="ELDR p99")
    lb50, lb99 = best_balancer(run, "p50"), best_balancer(run, "p99")
    if lb50:
        ax.axhline(lb50["tpot_ms"]["p50"], color="C0", linestyle=":",
                   label=f"{lb50['label']} median")
        ax.axhline(lb99["tpot_ms"]["p99"], color="C1", linestyle=":", label=f"{lb99['label']} p99")
    finish(fig, ax, "tau", "TPOT (ms)", title(run), out)
    return True


def gain(run):
    """ELDR at its tau (chosen on the fit trace, else the best median) against the best
    balancer of each metric, in %."""
    eldr = [p for p in run["policies"] if p["policy"] == "eldr"]
    if not best_balancer(run) or not eldr:
        return None
    chosen = run.get("tau_choice")
    if chosen:
        best = next(p for p in eldr if p["tau"] == chosen["tau"])
    else:
        best = min(eldr, key=lambda p: p["tpot_ms"]["p50"])
    return tuple(100 * (best["tpot_ms"][k] / best_balancer(run, k)["tpot_ms"][k] - 1)
                 for k in ("p50", "p99"))


def plot_moe(run, out):
    """Figure 4's shape: per topology, a bar per placement, all-to-all hatched on compute."""
    sets = [("calibration", "calibration"), ("held_out", "held-out")]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.5), sharey=True)
    topos = run["topologies"]
    names = [p["name"] for p in topos[0]["held_out"]["placements"]]
    width = 0.8 / len(names)
    for ax, (key, label) in zip(axes, sets):
        for j, name in enumerate(names):
            xs, comp, a2a, lo, hi = [], [], [], [], []
            for i, t in enumerate(topos):
                p = next(q for q in t[key]["placements"] if q["name"] == name)
                xs.append(i + (j - (len(names) - 1) / 2) * width)
                comp.append(p["compute_us"])
                a2a.append(p["layer_us"] - p["compute_us"])
                ci = p["layer_us_ci"]
                lo.append(p["layer_us"] - ci[0] if ci[0] is not None else 0)
                hi.append(ci[1] - p["layer_us"] if ci[1] is not None else 0)
            ax.bar(xs, comp, width, color=f"C{j}", label=f"{name} compute")
            ax.bar(xs, a2a, width, bottom=comp, color=f"C{j}", alpha=0.45, hatch="//",
                   edgecolor="black", linewidth=0.3, label=f"{name} 2 x all-to-all")
            ax.errorbar(xs, [c + a for c, a in zip(comp, a2a)], yerr=[lo, hi], fmt="none",
                        ecolor="black", capsize=2, linewidth=0.8)
        ax.set_xticks(range(len(topos)))
        ax.set_xticklabels([t["topo"] for t in topos])
        ax.set_xlabel("nodes x GPUs")
        ax.set_title(label, fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    axes[0].set_ylabel("MoE layer time (us)")
    axes[1].legend(fontsize=7)
    fig.suptitle(f"{run['model']} on {run['gpu']}, {run['fabric']}, "
                 f"{run['tokens_per_step']} tokens per step", fontsize=9)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def plot_gain(runs, out):
    pts = sorted((r["decoders"], g) for r in runs for g in [gain(r)] if g)
    if len({k for k, _ in pts}) < 2:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot([k for k, _ in pts], [g[0] for _, g in pts], "o-", label="median TPOT")
    ax.plot([k for k, _ in pts], [g[1] for _, g in pts], "s-", label="p99 TPOT")
    ax.axhline(0, color="grey", linewidth=0.8)
    finish(fig, ax, "decoders", "ELDR (best tau) vs best load balancer (%)",
           f"{runs[0]['model']} on {runs[0]['gpu']}", out)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="locusctl simulate --json output files")
    ap.add_argument("-o", "--out", required=True, help="directory for the SVG files")
    a = ap.parse_args()
    try:
        runs = [load(p) for p in a.runs]
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"sim_plot: {e}", file=sys.stderr)
        return 1
    os.makedirs(a.out, exist_ok=True)
    made = []
    moe = [r for r in runs if r.get("mode") == "moe"]
    runs = [r for r in runs if r.get("mode") != "moe"]
    if moe:
        path = os.path.join(a.out, "moe_layer_time.svg")
        plot_moe(moe[0], path)
        made.append(path)
    if runs:
        path = os.path.join(a.out, "tpot_cdf.svg")
        plot_cdf(runs[0], path)
        made.append(path)
        path = os.path.join(a.out, "tpot_vs_tau.svg")
        if plot_tau(runs[0], path):
            made.append(path)
        path = os.path.join(a.out, "gain_vs_decoders.svg")
        if plot_gain(runs, path):
            made.append(path)
    for m in made:
        print(f"wrote {m}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
