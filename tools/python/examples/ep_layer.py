#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""One MoE layer on N expert-parallel ranks (one process each) through
locusd: every rank routes its tokens (softmax over a linear router, top-k),
dispatches them with locus.Buffer, runs the experts it received (a SwiGLU
feed-forward per expert), combines, and checks its output against the same
layer computed without locus (every expert applied to every token of its own
on this process, in float64).

    ep_layer.py -i INSTANCE [--ranks 4] [--tokens 96] [--hidden 128] [--ffn 256]
                [--topk 4] [--layer 0] [--torch] [--seed 1]

locusd must run with a GRACE table of N GPUs pushed (locusctl fit --grace ...
--gpus N, then locusctl push); its experts per layer are the table's. Exits 0
when every rank's output matches (relative error under 1e-4), 1 otherwise.
"""
import argparse
import multiprocessing as mp
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import locus  # noqa: E402  (the package of this checkout, else the installed one)


def weights(seed, experts, hidden, ffn):
    """The layer's parameters: router [hidden, E], per expert gate/up [hidden, ffn] and
    down [ffn, hidden]. Every rank builds the same from the seed."""
    rng = np.random.default_rng(seed)
    router = rng.standard_normal((hidden, experts)).astype(np.float32)
    w_gate = (rng.standard_normal((experts, hidden, ffn)) / np.sqrt(hidden)).astype(np.float32)
    w_up = (rng.standard_normal((experts, hidden, ffn)) / np.sqrt(hidden)).astype(np.float32)
    w_down = (rng.standard_normal((experts, ffn, hidden)) / np.sqrt(ffn)).astype(np.float32)
    return router, w_gate, w_up, w_down


def route(x, router, k):
    """Top-k experts of each token and their renormalised softmax gates."""
    logits = x.astype(np.float64) @ router
    idx = np.argsort(-logits, axis=1, kind="stable")[:, :k]
    top = np.take_along_axis(logits, idx, axis=1)
    g = np.exp(top - top.max(axis=1, keepdims=True))
    return idx.astype(np.int64), (g / g.sum(axis=1, keepdims=True)).astype(np.float32)


def silu(v):
    return v / (1.0 + np.exp(-v))


def expert(e, x, w, dtype=np.float32):
    _, w_gate, w_up, w_down = w
    x = x.astype(dtype)
    return (silu(x @ w_gate[e].astype(dtype)) * (x @ w_up[e].astype(dtype))) @ \
        w_down[e].astype(dtype)


def experts_on_rank(recv_x, recv_idx, recv_w, w):
    """The experts this rank received rows for, each row weighted by its gates
    (what DeepEP's combine expects): y[i] = sum_j gate_ij * expert_ij(x_i)."""
    y = np.zeros(recv_x.shape, dtype=np.float32)
    for e in np.unique(recv_idx[recv_idx >= 0]):
        rows, slots = np.nonzero(recv_idx == e)
        y[rows] += recv_w[rows, slots][:, None] * expert(e, recv_x[rows], w)
    return y


def reference(x, idx, gates, w):
    """The layer without locus, in float64."""
    out = np.zeros(x.shape, dtype=np.float64)
    for j in range(idx.shape[1]):
        for e in np.unique(idx[:, j]):
            sel = idx[:, j] == e
            out[sel] += gates[sel, j:j + 1] * expert(e, x[sel], w, np.float64)
    return out


def rank_main(rank, a, q):
    try:
        c = locus.attach(a.instance, rank=rank, timeout=30)
        with c, locus.Buffer(c, a.ranks, timeout=30) as buf:
            layers, experts = c.table_shape(1)
            w = weights(a.seed, experts, a.hidden, a.ffn)
            rng = np.random.default_rng(a.seed * 1000 + rank)
            x = rng.standard_normal((a.tokens, a.hidden)).astype(np.float32)
            idx, gates = route(x, w[0], a.topk)
            t0 = time.monotonic()
            if a.torch:
                import torch
                rx, ri, rw, h = buf.dispatch(torch.from_numpy(x), torch.from_numpy(idx),
                                             torch.from_numpy(gates), a.layer)
                y = experts_on_rank(rx.numpy(), ri.numpy(), rw.numpy(), w)
                out = buf.combine(torch.from_numpy(y), h).numpy()
            else:
                rx, ri, rw, h = buf.dispatch(x, idx, gates, a.layer)
                # the expert outputs go straight into the stage: combine reads them there
                y = buf.combine_input(h, a.hidden)
                y[:] = experts_on_rank(rx, ri, rw, w)
                out = buf.combine(y, h)
            dt = time.monotonic() - t0
            want = reference(x, idx, gates, w)
            err = float(np.abs(out - want).max() / max(np.abs(want).max(), 1e-30))
            q.put((rank, h.num_recv, len(h.src_slices), err, dt, None))
    except BaseException as e:  # reported by the parent
        q.put((rank, 0, 0, None, 0.0, f"{type(e).__name__}: {e}"))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-i", "--instance", required=True)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--tokens", type=int, default=96, help="tokens per rank")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--ffn", type=int, default=256)
    p.add_argument("--topk", type=int, default=4)
    p.add_argument("--layer", type=int, default=0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--torch", action="store_true", help="pass CPU torch tensors")
    a = p.parse_args(argv)
    ctx = mp.get_context("spawn")  # a fresh interpreter per rank, as a serving engine has
    q = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, a, q)) for r in range(a.ranks)]
    for pr in procs:
        pr.start()
    results = {}
    deadline = time.monotonic() + 120
    while len(results) < a.ranks and time.monotonic() < deadline:
        try:
            r = q.get(timeout=1)
        except Exception:
            if all(not pr.is_alive() for pr in procs) and q.empty():
                break
            continue
        results[r[0]] = r
    for pr in procs:
        pr.join(10)
        if pr.is_alive():
            pr.kill()
    ok = len(results) == a.ranks
    for r in range(a.ranks):
        if r not in results:
            print(f"ep_layer: rank {r}: no result", file=sys.stderr)
            continue
        _, recv, srcs, err, dt, fail = results[r]
        if fail:
            ok = False
            print(f"ep_layer: rank {r}: {fail}", file=sys.stderr)
            continue
        good = err < 1e-4
        ok &= good
        print(f"ep_layer: rank {r}: {a.tokens} tokens out, {recv} rows in from {srcs} ranks, "
              f"dispatch+experts+combine {dt * 1e3:.1f} ms, max relative error {err:.2e}"
              f"{'' if good else ' (too large)'}")
    print("ep_layer: ok" if ok else "ep_layer: FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
