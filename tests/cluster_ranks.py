#!/usr/bin/python3
"""Rank clients taking part in placement changes, for test_cluster_locusd.sh.

cluster_ranks.py INSTANCE RANKS SECONDS [--first R] [--hold R]

Attaches ranks FIRST..FIRST+RANKS-1 of INSTANCE. Each says at once that it holds the
placement in force (as a rank that loaded it at start), then follows the
two phases: a staged generation's gains and losses are computed from the
tables locusd keeps (the weights "loaded"), and the generation acknowledged;
the weights of generations below free_below are released. --hold R: rank R
never acknowledges (the change must abort). Prints one line per step.
Tests only: no weights move, the moves are counted.
"""
import argparse
import sys
import time

import locus

ap = argparse.ArgumentParser()
ap.add_argument("instance")
ap.add_argument("ranks", type=int)
ap.add_argument("seconds", type=float)
ap.add_argument("--first", type=int, default=0)
ap.add_argument("--hold", type=int, default=-1)
a = ap.parse_args()

clients = {r: locus.attach(a.instance, rank=r) for r in range(a.first, a.first + a.ranks)}
for r, c in clients.items():
    c.join_placements()
    p = c.placement()
    if p["current"]:
        c.ack_placement(p["current"])
    print(f"rank {r}: attached, placement {p['current']} in force", flush=True)
end = time.monotonic() + a.seconds
while time.monotonic() < end:
    for r, c in clients.items():
        p = c.placement()
        if p["staged"] and p["acked"] < p["staged"] and r != a.hold:
            gains, losses = c.placement_moves(p["staged"], p["current"] or 0)
            c.ack_placement(p["staged"])
            print(f"rank {r}: generation {p['staged']} staged: gains {len(gains)} experts, "
                  f"loses {len(losses)}; acknowledged", flush=True)
        if p["free_below"] > p["floor"] and p["acked"] >= p["free_below"]:
            c.release_placement(p["free_below"])
            print(f"rank {r}: every node plans with generation {p['free_below']} or later: "
                  f"older weights released", flush=True)
    time.sleep(0.01)
for c in clients.values():
    c.close()
sys.exit(0)
