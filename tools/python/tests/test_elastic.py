# SPDX-License-Identifier: MIT
"""A rank of the EP group killed (-9) while the group serves: ranks 0..2 are
threads of this process, rank 3 a process of its own. After the kill, the
three keep dispatching and combining without it: no wait on the dead rank,
experts with a copy on a live rank go there, those whose only copy was on
rank 3 are masked (reported in handle.masked, never silently dropped), and
every output equals the MoE layer computed in plain numpy over the pairs
that were not masked. The time from the kill to locusd masking the rank is
printed."""
import inspect
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import locus
from conftest import BIN, TRACE, Daemon, close_and_wait, run, wait_for
from test_buffer import experts_apply, make_layer, on_ranks

RANKS, K, HIDDEN, OUT = 4, 6, 32, 24
TOKENS = [40, 24, 56, 32]
ROUNDS_BEFORE, ROUNDS_AFTER = 2, 4

# rank 3: the same rounds as the threads, then it waits to be killed
CHILD = r"""
import sys, time
import numpy as np
sys.path[:0] = sys.argv[1].split(":")
import locus
%s
inst, rounds, layer = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
c = locus.attach(inst, rank=3, timeout=20)
b = locus.Buffer(c, 4)
print("ready", flush=True)
sys.stdin.readline()
_, experts = c.table_shape(1)
for i in range(rounds):
    w, xs, idx, gates = make_layer(100 + i, experts, %d, %d, %r, %d)
    rx, ri, rw, h = b.dispatch(xs[3], idx[3], gates[3], layer=layer)
    b.combine(experts_apply(w, rx, ri, rw), h)
    print("done", i, *sorted(set(int(e) for e in ri[ri >= 0].ravel())), flush=True)
time.sleep(600)
""" % ("%s", HIDDEN, OUT, TOKENS, K)


def reference_masked(w, x, idx, gates, masked):
    """The layer over the pairs not masked: sum_j gate_j * x @ W[expert_j]."""
    out = np.zeros((x.shape[0], w.shape[2]), dtype=np.float64)
    for t in range(x.shape[0]):
        for j in range(idx.shape[1]):
            if not masked[t, j]:
                out[t] += gates[t, j] * (x[t].astype(np.float64) @ w[idx[t, j]])
    return out


@pytest.fixture
def elastic_daemon(eldr_table, tmp_path):
    """locusd with a GRACE table fitted for 1 x 4 GPUs with replicas of the hot experts."""
    tbl = str(tmp_path / "grace.tbl")
    run(os.path.join(BIN, "locusctl"), "fit", "--grace", "--trace",
        TRACE,
        "--nodes", "1", "--gpus", "4", "--capacity", "20", "--replica-budget", "12",
        "-o", tbl)
    d = Daemon("el", "client_slots = 8\n", table=eldr_table)
    d.push(tbl)
    yield d
    d.stop()


def test_rank_killed_rest_keep_serving(elastic_daemon):
    inst, layer = elastic_daemon.instance, 2
    here = os.path.dirname(os.path.abspath(__file__))
    path = ":".join([here, os.path.join(here, "..")] + sys.path)
    # the child defines the layer as the test does (importing the tests would run conftest)
    code = CHILD % (inspect.getsource(make_layer) + inspect.getsource(experts_apply))
    child = subprocess.Popen(["/usr/bin/python3", "-c", code, path, inst,
                              str(ROUNDS_BEFORE), str(layer)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env=dict(os.environ))
    cs = []
    try:
        assert child.stdout.readline().strip() == "ready"
        cs = [locus.attach(inst, rank=r, timeout=20) for r in range(3)]
        bufs = [locus.Buffer(c, RANKS, timeout=20) for c in cs]
        wait_for(lambda: all(b.active_ranks() == [0, 1, 2, 3] for b in bufs), 10,
                 "every rank live")
        child.stdin.write("go\n")
        child.stdin.flush()
        _, experts = cs[0].table_shape(1)
        served = [set() for _ in range(RANKS)]  # experts each rank received, before the kill

        def one_round(i, n_ranks, record):
            w, xs, idx, gates = make_layer(100 + i, experts, HIDDEN, OUT, TOKENS, K)

            def rank(r):
                rx, ri, rw, h = bufs[r].dispatch(xs[r], idx[r], gates[r], layer=layer)
                if record:
                    served[r].update(int(e) for e in np.unique(ri[ri >= 0]))
                got = set(int(e) for e in np.unique(ri[ri >= 0]))
                out = bufs[r].combine(experts_apply(w, rx, ri, rw), h)
                return out, h, got
            res = on_ranks(rank, n_ranks)
            return w, xs, idx, gates, res

        for i in range(ROUNDS_BEFORE):
            w, xs, idx, gates, res = one_round(i, 3, True)
            for r in range(3):
                out, h, _ = res[r]
                assert h.num_masked == 0 and h.lost_ranks == ()
                np.testing.assert_allclose(out, reference_masked(w, xs[r], idx[r], gates[r],
                                                                 h.masked), rtol=1e-4,
                                           atol=1e-4)
            line = child.stdout.readline().split()
            assert line[:2] == ["done", str(i)]
            served[3].update(int(e) for e in line[2:])

        t_kill = time.monotonic_ns()
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        wait_for(lambda: all(b.active_ranks() == [0, 1, 2] for b in bufs), 10,
                 "rank 3 masked")
        lost, info = cs[0].ranks_state()
        assert lost == {3}
        print(f"kill -9 of rank 3 -> masked by locusd: "
              f"{(info['changed_ns'] - t_kill) / 1e6:.1f} ms")

        live_before = served[0] | served[1] | served[2]
        shared_with_3 = served[3] & live_before  # rank 3 held a copy, so did a live rank
        masked_total, rerouted = 0, set()
        for i in range(ROUNDS_BEFORE, ROUNDS_BEFORE + ROUNDS_AFTER):
            t0 = time.monotonic()
            w, xs, idx, gates, res = one_round(i, 3, False)
            assert time.monotonic() - t0 < 10, "a round waited on the dead rank"
            live_got = set().union(*(g for _, _, g in res))
            for r in range(3):
                out, h, _ = res[r]
                # masked only where no live rank holds the expert
                for t, j in zip(*np.nonzero(h.masked)):
                    e = int(idx[r][t, j])
                    assert e not in live_got and e not in live_before, e
                masked_total += h.num_masked
                np.testing.assert_allclose(out, reference_masked(w, xs[r], idx[r], gates[r],
                                                                 h.masked), rtol=1e-4,
                                           atol=1e-4)
            rerouted |= shared_with_3 & live_got
        print(f"after the kill: {masked_total} pairs masked over {ROUNDS_AFTER} rounds; "
              f"{len(served[3] - live_before)} experts only rank 3 had served; "
              f"{len(rerouted)} of its replicated experts served by their live copies")
        assert masked_total > 0, "rank 3 held experts with no other copy"
        assert rerouted, "rank 3's replicated experts went to their live copies"
        with locus.Counters(inst) as ctr:
            assert ctr.value("slots_masked") == masked_total
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        close_and_wait(cs)


def test_move_weights_nearest_holder(ep_daemon, grace_table, tmp_path):
    """A placement change on 4 ranks: every expert a rank gains under the new table comes
    from a rank that holds it under the old one, through locusd (COMBINE rows over the
    same paths as rows), byte for byte; read is asked only for experts the rank holds;
    nothing comes from storage while every rank is live."""
    other = str(tmp_path / "g2.tbl")
    run(os.path.join(BIN, "locusctl"), "fit", "--grace", "--trace", TRACE, "--nodes", "1",
        "--gpus", "4", "--capacity", "24", "--seed", "9", "-o", other)
    with open(grace_table, "rb") as f:
        old = f.read()
    with open(other, "rb") as f:
        new = f.read()
    nbytes = 6000  # two rows of 4096, the second padded

    def weights(layer, e):
        return ((np.arange(nbytes, dtype=np.uint32) * 7 + layer * 131 + e * 17) & 0xff
                ).astype(np.uint8)

    cs = [locus.attach(ep_daemon.instance, rank=r, timeout=20) for r in range(RANKS)]
    bufs = [locus.Buffer(c, RANKS, timeout=20) for c in cs]
    try:
        fetches = cs[0].placement_fetches(new, old)
        # every copy gained has a live holder, never the gaining rank itself
        for layer, e, dst, src, _ in fetches:
            assert src is not None and src != dst
        got = [dict() for _ in range(RANKS)]

        def rank(r):
            def read(layer, e):
                assert any(f[3] == r and (f[0], f[1]) == (layer, e) for f in fetches)
                return weights(layer, e)

            def write(layer, e, data):
                got[r][(layer, e)] = None if data is None else bytes(data)
            return bufs[r].move_weights(new, old, read, write, nbytes)
        stats = on_ranks(rank)
        want = {}
        for layer, e, dst, src, _ in fetches:
            want.setdefault(dst, set()).add((layer, e))
        for r in range(RANKS):
            assert set(got[r]) == want.get(r, set())
            for (layer, e), data in got[r].items():
                assert data == weights(layer, e).tobytes(), (r, layer, e)
            assert stats[r]["from_storage"] == 0
        total = sum(s["received_here"] + s["received_other"] for s in stats)
        assert total == len(fetches) == sum(s["sent"] for s in stats) > 0
        print(f"placement change on 1 x 4: {len(fetches)} expert copies moved between "
              f"ranks through locusd, {sum(s['bytes_received'] for s in stats)} bytes, none "
              "from storage")
    finally:
        for b in bufs:
            b.close()
        close_and_wait(cs)
