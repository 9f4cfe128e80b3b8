#!/usr/bin/python3
"""Rank clients taking part in placement changes, for test_cluster_locusd.sh.

cluster_ranks.py INSTANCE RANKS SECONDS [--first R] [--hold R] [--weights BYTES --group N]

Attaches ranks FIRST..FIRST+RANKS-1 of INSTANCE. Each says at once that it holds the
placement in force (as a rank that loaded it at start), then follows the
two phases: a staged generation's gains and losses are computed from the
tables locusd keeps (the weights "loaded"), and the generation acknowledged;
the weights of generations below free_below are released. --hold R: rank R
never acknowledges (the change must abort). Prints one line per step.

--weights BYTES: each rank of an EP group of N ranks (a Buffer, a thread each)
moves the weights of a staged change before it acknowledges it
(Buffer.move_weights): every expert it gains comes from the nearest live rank
holding it, through locusd, and is checked byte for byte against what its
holder sent; an expert no live rank holds is "loaded from storage". Without
it no weights move, the moves are counted.
"""
import argparse
import sys
import threading
import time

import numpy as np

import locus

ap = argparse.ArgumentParser()
ap.add_argument("instance")
ap.add_argument("ranks", type=int)
ap.add_argument("seconds", type=float)
ap.add_argument("--first", type=int, default=0)
ap.add_argument("--hold", type=int, default=-1)
ap.add_argument("--weights", type=int, default=0)
ap.add_argument("--group", type=int, default=0)
a = ap.parse_args()


def weights(layer, e):
    """An expert's weights in these tests: the same bytes on every rank that holds it."""
    return ((np.arange(a.weights, dtype=np.uint32) * 7 + layer * 131 + e * 17) & 0xff
            ).astype(np.uint8)


clients = {r: locus.attach(a.instance, rank=r) for r in range(a.first, a.first + a.ranks)}
bufs = {r: locus.Buffer(c, a.group, timeout=20) for r, c in clients.items()} if a.weights else {}
for r, c in clients.items():
    c.join_placements()
    p = c.placement()
    if p["current"]:
        c.ack_placement(p["current"])
    print(f"rank {r}: attached, placement {p['current']} in force", flush=True)
end = time.monotonic() + a.seconds
bad = []


def move(r, c, p):
    """The weights of the staged change, then its acknowledgement."""
    if not a.weights or not p["current"]:
        gains, losses = c.placement_moves(p["staged"], p["current"] or 0)
        c.ack_placement(p["staged"])
        print(f"rank {r}: generation {p['staged']} staged: gains {len(gains)} experts, "
              f"loses {len(losses)}; acknowledged", flush=True)
        return

    def write(layer, e, data):
        if data is not None and bytes(data) != weights(layer, e).tobytes():
            bad.append((r, layer, e))
    st = bufs[r].move_weights(p["staged"], p["current"], lambda layer, e: weights(layer, e),
                              write, a.weights)
    c.ack_placement(p["staged"])
    print(f"rank {r}: generation {p['staged']} staged: gains "
          f"{st['received_here'] + st['received_other'] + st['from_storage']} experts "
          f"({st['received_here']} from this node, {st['received_other']} from another, "
          f"{st['from_storage']} from storage; {st['bytes_received']} bytes in, "
          f"{st['bytes_sent']} bytes out{', CORRUPT' if bad else ''}); acknowledged",
          flush=True)


def step(r, c):
    """Rank r's part once: take a staged change, release what nobody plans with."""
    p = c.placement()
    if p["staged"] and p["acked"] < p["staged"] and r != a.hold:
        move(r, c, p)
    if p["free_below"] > p["floor"] and p["acked"] >= p["free_below"]:
        c.release_placement(p["free_below"])
        print(f"rank {r}: every node plans with generation {p['free_below']} or later: "
              f"older weights released", flush=True)


def follow(r, c):
    while time.monotonic() < end:
        step(r, c)
        time.sleep(0.01)


if a.weights:
    # a move is a collective of the group: each rank follows on its own thread
    ts = [threading.Thread(target=follow, args=(r, c)) for r, c in clients.items()]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
else:
    while time.monotonic() < end:
        for r, c in clients.items():
            step(r, c)
        time.sleep(0.01)
for b in bufs.values():
    b.close()
for c in clients.values():
    c.close()
sys.exit(1 if bad else 0)
