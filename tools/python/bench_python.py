#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The Python package's cost through a running locusd, for tools/python/bench.sh
(make bench), which runs the C client (build/tools/bench/bench_dataplane) on the
same daemon for the ratio:

  bench_python.py route -i INST --trace T [--seconds S] [--min-calls N] [--cpu C]
      Client.route() of the trace's prompts one at a time (window 1: submit,
      wait for the decision), as a serving engine calls it: the routed experts
      checked and the signature built (by the C library) on every call. One
      thread holds the prefiller and the 4 decoders; the decoders' signatures
      are taken between calls (not timed).
  bench_python.py dispatch -i INST --trace T [--row-bytes B] [--tokens N]
                           [--seconds S] [--min-calls N] [--cpu C] [--threads]
      Buffer dispatches on 4 ranks: each rank's N tokens of the trace at one
      layer (its real top-k), rows of B bytes staged in place (dispatch_input),
      recv_x copied out of the inbox, a Handle made. By default one thread
      drives the 4 ranks as the C client's bench does (dispatch_async on each,
      done() on each until all are in, then wait() on each: window 1); with
      --threads each rank is a thread of its own calling the blocking
      dispatch(). Every thread is pinned to CPU C (the GIL runs one at a time:
      one core, as the C client's one thread).
The timed window opens after the warm-up and lasts S seconds (default 1), then
runs on until at least N calls (rounds for dispatch; default 100) completed,
for at most 10 s more: a loaded machine still gets a figure. Prints one result
line each; figures are measured, never asserted. A window in which nothing
completed (--min-calls 0, or nothing in the 10 s) prints a sentence saying so
on stderr and exits 1.
"""
import argparse
import json
import os
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import locus  # noqa: E402

WARM_CALLS = 200    # route calls before the window opens (not timed)
MIN_CALLS = 100     # the window runs on until this many calls completed...
EXTRA_SECONDS = 10  # ...for at most this long past its end


def load_trace(path):
    with open(path) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    return [np.array(r["prompt_routed_experts"], dtype=np.int64) for r in lines[1:]]


def pin(cpu):
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})


def window_open(start, n, a):
    """True while the timed window that opened at start (monotonic) goes on,
    n calls done: its seconds, then on until --min-calls, bounded."""
    now = time.monotonic()
    if now < start + a.seconds:
        return True
    return n < a.min_calls and now < start + a.seconds + EXTRA_SECONDS


def nothing_done(what, a, one, many):
    """Exit 1 with a sentence: the timed window of what measured nothing."""
    raise SystemExit(f"bench_python: {what}: no {one} completed in the timed window "
                     f"({a.seconds:g} s, at least {a.min_calls} {many}): nothing to report")


def bench_route(a, reqs):
    # waits bounded at 10 s, as dispatch's: a loaded machine may hold a call a while
    p = locus.attach(a.instance, prefill=True, timeout=10)
    decs = [locus.attach(a.instance, decoder=i, timeout=10) for i in range(4)]
    for d in decs:
        d.report_load(0)
    with locus.Counters(a.instance) as ctr:  # locusd's housekeeping takes the reports
        deadline = time.monotonic() + 10
        while not all(ctr.value("decoder_up", i) == 1 for i in range(4)):
            if time.monotonic() > deadline:
                raise SystemExit("bench_python: the decoders are not up after 10 s")
            time.sleep(0.01)
    reported = time.monotonic()
    i = 0

    def call():  # one route; returns its round trip in ns
        nonlocal i, reported
        x = reqs[i % len(reqs)]
        i += 1
        t0 = time.perf_counter_ns()
        d = p.route(x)
        t1 = time.perf_counter_ns()
        decs[d.decoder].poll_signatures(max=64)
        if time.monotonic() - reported > 0.05:  # reports keep the decoders up (load_timeout_ms)
            for dc in decs:
                dc.report_load(0)
            reported = time.monotonic()
        return t1 - t0

    for _ in range(WARM_CALLS):
        call()
    lat = []
    start = time.monotonic()
    while window_open(start, len(lat), a):
        lat.append(call())
    layers, experts = p.table_shape()
    for c in decs + [p]:
        c.close()
    if not lat:
        nothing_done("route", a, "call", "calls")
    lat = np.array(lat, dtype=np.float64)
    total = lat.sum() / 1e9
    print(f"python route {locus._lib.ELDR_SIG_HDR_SIZE + layers * experts * 2} B signatures, "
          f"window 1: {len(lat) / total:.0f} routes/s over the timed calls; round trip p50 "
          f"{np.percentile(lat, 50) / 1e3:.2f} us, p99 {np.percentile(lat, 99) / 1e3:.2f} us "
          f"({len(lat)} routes)")


def bench_dispatch(a, reqs):
    ranks = 4
    clients = [locus.attach(a.instance, rank=r, timeout=10) for r in range(ranks)]
    bufs = [locus.Buffer(c, ranks) for c in clients]
    layers, experts = clients[0].table_shape(1)
    hidden = a.row_bytes // 4
    k = reqs[0].shape[2]
    batches = []
    for j in range(16):  # routings: trace request j at layer j % layers, N tokens
        r = reqs[j % len(reqs)]
        ids = np.stack([r[t % len(r), j % layers] for t in range(a.tokens)]).astype(np.int64)
        batches.append((ids, np.full((a.tokens, k), 1.0 / k, np.float32), j % layers))
    rows = [0] * ranks
    n_rounds = [0]
    bar = threading.Barrier(ranks)
    lat = []  # one thread: each round's time (ns)
    t, cpu = [0.0, 0.0], [0.0, 0.0]
    errs = []

    def body(r):
        try:
            b = bufs[r]
            x = b.dispatch_input(a.tokens, hidden)
            x[:] = r + 1
            # warm-up rounds, then as many as fill the time (rank 0 decides for all)
            for i in range(20):
                ids, g, layer = batches[(i * ranks + r) % len(batches)]
                b.dispatch(x, ids, g, layer)
            if bar.wait() == 0:
                t[0] = time.monotonic()
            for i in range(20):
                ids, g, layer = batches[(i * ranks + r) % len(batches)]
                b.dispatch(x, ids, g, layer)
            if bar.wait() == 0:  # the window's rounds at this pace (see window_open)
                per = max((time.monotonic() - t[0]) / 20, 1e-6)
                n_rounds[0] = min(max(int(a.seconds / per), a.min_calls),
                                  int((a.seconds + EXTRA_SECONDS) / per))
            bar.wait()
            if bar.wait() == 0:
                t[0] = time.monotonic()
                cpu[0] = time.process_time()
            got = 0
            for i in range(n_rounds[0]):
                ids, g, layer = batches[(i * ranks + r) % len(batches)]
                got += b.dispatch(x, ids, g, layer)[3].num_recv
            rows[r] = got
            if bar.wait() == 0:
                t[1] = time.monotonic()
                cpu[1] = time.process_time()
        except BaseException as e:  # reported below
            errs.append(e)
            bar.abort()
    def one_thread():
        """The 4 ranks on this thread, window 1: every rank's dispatch begun, polled
        until all are in, then collected (each rank's rows are in place already)."""
        xs = []
        for r, b in enumerate(bufs):
            xs.append(b.dispatch_input(a.tokens, hidden))
            xs[-1][:] = r + 1

        def rnd(i):
            evs = [b.dispatch_async(xs[r], *batches[(i * ranks + r) % len(batches)])
                   for r, b in enumerate(bufs)]
            while not all([ev.done() for ev in evs]):
                pass  # one spinning thread on CPU C, as the C client's
            return [ev.wait()[3].num_recv for ev in evs]
        for i in range(20):
            rnd(i)
        t0 = time.monotonic()
        for i in range(20):
            rnd(i)
        per = max((time.monotonic() - t0) / 20, 1e-6)
        n_rounds[0] = min(max(int(a.seconds / per), a.min_calls),
                          int((a.seconds + EXTRA_SECONDS) / per))
        t[0], cpu[0] = time.monotonic(), time.process_time()
        for i in range(n_rounds[0]):
            t0 = time.perf_counter_ns()
            for r, got in enumerate(rnd(i)):
                rows[r] += got
            lat.append(time.perf_counter_ns() - t0)
        t[1], cpu[1] = time.monotonic(), time.process_time()

    if a.threads:
        ths = [threading.Thread(target=body, args=(r,)) for r in range(ranks)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        if errs:
            raise errs[0]
    else:
        one_thread()
    for b in bufs:
        b.close()
    for c in clients:
        c.close()
    if not n_rounds[0]:
        nothing_done("dispatch", a, "collective round", "rounds")
    secs = t[1] - t[0]
    total = sum(rows)
    how = "a thread each, blocking dispatch(), one CPU" if a.threads else \
        "one thread, dispatch_async(), window 1"
    print(f"python dispatch {a.row_bytes} B rows: {ranks} ranks ({how}), "
          f"{a.tokens} tokens x top-{k}, {n_rounds[0]} collective rounds: {total / secs:.0f} "
          f"rows/s ({total} rows, {secs * 1e6 / n_rounds[0]:.0f} us per round, of which "
          f"{(cpu[1] - cpu[0]) * 1e6 / n_rounds[0]:.0f} us of this process's CPU"
          + (f"; round p50 {np.percentile(lat, 50) / 1e3:.0f} us, p90 "
             f"{np.percentile(lat, 90) / 1e3:.0f} us" if lat else "") + ")")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=["route", "dispatch"])
    p.add_argument("-i", "--instance", required=True)
    p.add_argument("--trace", required=True)
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--min-calls", type=int, default=MIN_CALLS)
    p.add_argument("--cpu", type=int, default=None)
    p.add_argument("--row-bytes", type=int, default=4096)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--threads", action="store_true",
                   help="dispatch: a thread per rank calling the blocking dispatch()")
    a = p.parse_args()
    pin(a.cpu)
    reqs = load_trace(a.trace)
    (bench_route if a.what == "route" else bench_dispatch)(a, reqs)


if __name__ == "__main__":
    main()
