# SPDX-License-Identifier: MIT
"""The expert-parallel Buffer through a real locusd with a GRACE table
locusctl fitted from the sample trace: four ranks (a thread each, one
attachment each) dispatch, run their experts and combine; the content is
checked against the same MoE layer computed in plain numpy, never against
this package's output. Refusals submit nothing (locusd's dispatch_batches
does not move)."""
import ctypes
import threading

import numpy as np
import pytest

import locus
from conftest import close_and_wait, wait_for
from moe_ref import make_layer, reference

RANKS = 4


@pytest.fixture
def ranks(ep_daemon):
    cs = [locus.attach(ep_daemon.instance, rank=r, timeout=10) for r in range(RANKS)]
    bufs = [locus.Buffer(c, RANKS) for c in cs]
    yield bufs
    for b in bufs:
        b.close()
    close_and_wait(cs)


def on_ranks(fn, n=RANKS):
    """fn(rank) on a thread per rank; their results, or the first exception raised."""
    out, errs = [None] * n, []

    def body(r):
        try:
            out[r] = fn(r)
        except BaseException as e:  # noqa: B902 - reported below
            errs.append(e)
    ts = [threading.Thread(target=body, args=(r,)) for r in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not any(t.is_alive() for t in ts), "a rank did not return within 60 s"
    if errs:
        raise errs[0]
    return out


def experts_apply(w, recv_x, recv_idx, recv_w):
    """This rank's experts on what it received, weighted (DeepEP's convention)."""
    y = np.zeros((recv_x.shape[0], w.shape[2]), dtype=np.float32)
    for j in range(recv_idx.shape[1]):
        for e in np.unique(recv_idx[:, j]):
            if e < 0:
                continue
            sel = recv_idx[:, j] == e
            y[sel] += recv_w[sel, j:j + 1] * (recv_x[sel] @ w[e])
    return y


def table(buf):
    return buf.client.table_shape(1)


def check_received(got, xs, idx, gates):
    """Every (source rank, token, k slot) reached exactly one rank, with its row, id and gate."""
    seen = {}
    for r, (rx, ri, rw, h) in enumerate(got):
        assert rx.shape[0] == ri.shape[0] == rw.shape[0] == h.num_recv
        for src, (start, count) in h.src_slices.items():
            for i in range(start, start + count):
                t = int(h.refs["token"][i])
                np.testing.assert_array_equal(rx[i], xs[src][t])
                assert (ri[i] >= 0).any()
                for j in range(ri.shape[1]):
                    if ri[i, j] < 0:
                        assert rw[i, j] == 0
                        continue
                    assert ri[i, j] == idx[src][t, j]
                    assert rw[i, j] == gates[src][t, j]
                    assert (src, t, j) not in seen, \
                        f"{(src, t, j)} reached ranks {seen[(src, t, j)]} and {r}"
                    seen[(src, t, j)] = r
    want = {(s, t, j) for s in range(len(xs)) for t in range(len(xs[s]))
            for j in range(idx[s].shape[1])}
    assert set(seen) == want


def test_dispatch_combine_numpy(ranks):
    layers, experts = table(ranks[0])
    tokens = [37, 0, 64, 5]  # rank 1 has no tokens: it still takes part
    w, xs, idx, gates = make_layer(1, experts, 48, 40, tokens, 6)
    got = on_ranks(lambda r: ranks[r].dispatch(xs[r], idx[r], gates[r], layer=3))
    check_received(got, xs, idx, gates)
    for rx, ri, rw, h in got:  # DeepEP's num_recv_tokens_per_expert_list
        assert h.num_recv_tokens_per_expert == [int((ri == e).sum()) for e in range(experts)]

    def combine(r):
        rx, ri, rw, h = got[r]
        return ranks[r].combine(experts_apply(w, rx, ri, rw), h)
    outs = on_ranks(combine)
    with pytest.raises(ValueError, match="combined already"):
        ranks[0].combine(np.zeros((got[0][3].num_recv, 40), np.float32), got[0][3])
    for r in range(RANKS):
        assert outs[r].shape == (tokens[r], 40) and outs[r].dtype == np.float32
        np.testing.assert_allclose(outs[r], reference(w, xs[r], idx[r], gates[r]),
                                   rtol=1e-4, atol=1e-4)


def test_layers_back_to_back_and_stage_views(ranks):
    """Several layers in a row, rows staged in place (dispatch_input / combine_input)."""
    layers, experts = table(ranks[0])
    hid = 32
    w, xs, idx, gates = make_layer(2, experts, hid, hid, [20, 20, 20, 20], 4)

    def body(r):
        b = ranks[r]
        x = xs[r]
        for layer in range(3):
            xin = b.dispatch_input(len(x), hid)
            assert b._is_at(xin, b._x_off)
            xin[:] = x
            rx, ri, rw, h = b.dispatch(xin, idx[r], gates[r], layer)
            y = b.combine_input(h, hid)
            assert b._is_at(y, b._y_off) or h.num_recv == 0
            y[:] = experts_apply(w, rx, ri, rw)
            x = b.combine(y, h)
        return x
    outs = on_ranks(body)
    for r in range(RANKS):
        want = xs[r].astype(np.float64)
        for _ in range(3):
            want = reference(w, want.astype(np.float32), idx[r], gates[r])
        np.testing.assert_allclose(outs[r], want, rtol=1e-3, atol=1e-3)


def test_dispatch_combine_torch(ranks):
    torch = pytest.importorskip("torch")
    layers, experts = table(ranks[0])
    w, xs, idx, gates = make_layer(3, experts, 16, 24, [9, 30, 1, 12], 8)

    def body(r):
        x = torch.from_numpy(xs[r]).to(torch.bfloat16)
        rx, ri, rw, h = ranks[r].dispatch(x, torch.from_numpy(idx[r]),
                                          torch.from_numpy(gates[r]), layer=0)
        assert rx.dtype == torch.bfloat16 and ri.dtype == torch.int64
        assert rw.dtype == torch.float32
        y = torch.from_numpy(experts_apply(w, rx.float().numpy(), ri.numpy(), rw.numpy()))
        return x, ranks[r].combine(y, h), (rx.float().numpy(), ri.numpy(), rw.numpy(), h)
    res = on_ranks(body)
    xs16 = [res[r][0].float().numpy() for r in range(RANKS)]
    check_received([res[r][2] for r in range(RANKS)], xs16, idx, gates)
    for r in range(RANKS):
        out = res[r][1]
        assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
        np.testing.assert_allclose(out.numpy(), reference(w, xs16[r], idx[r], gates[r]),
                                   rtol=1e-4, atol=1e-4)


def test_combine_bfloat16(ranks):
    torch = pytest.importorskip("torch")
    layers, experts = table(ranks[0])
    w, xs, idx, gates = make_layer(4, experts, 8, 8, [6, 6, 6, 6], 2)

    def body(r):
        rx, ri, rw, h = ranks[r].dispatch(xs[r], idx[r], gates[r], layer=1)
        y = torch.from_numpy(experts_apply(w, rx, ri, rw)).to(torch.bfloat16)
        return ranks[r].combine(y, h)
    outs = on_ranks(body)
    for r in range(RANKS):
        assert outs[r].dtype == torch.bfloat16
        np.testing.assert_allclose(outs[r].float().numpy(),
                                   reference(w, xs[r], idx[r], gates[r]), rtol=0.05, atol=0.05)


def batches(buf):
    with locus.Counters(buf.client.instance) as c:
        return c.value("dispatch_batches"), c.value("combine_batches")


def test_refusals_submit_nothing(ranks):
    b = ranks[0]
    layers, experts = table(b)
    x = np.zeros((4, 8), np.float32)
    ids = np.zeros((4, 2), np.int64)
    ids[:, 1] = 1
    g = np.full((4, 2), 0.5, np.float32)
    before = batches(b)
    bad = [
        (TypeError, "x holds int64", (x.astype(np.int64), ids, g, 0)),
        (TypeError, "must be a numpy array or a torch tensor", ("rows", ids, g, 0)),
        (ValueError, "x must be [num_tokens, hidden]", (x[0], ids, g, 0)),
        (TypeError, "topk_idx must hold integers", (x, ids.astype(np.float32), g, 0)),
        (TypeError, "topk_weights must hold floats", (x, ids, ids, 0)),
        (ValueError, "topk_idx must be [num_tokens, num_topk] with num_tokens = 4",
         (x, ids[:3], g[:3], 0)),
        (ValueError, "one gate weight per expert choice", (x, ids, g[:, :1], 0)),
        (ValueError, f"expert id {experts} at token 2, slot 1 is out of range",
         (x, np.where(np.arange(8).reshape(4, 2) == 5, experts, ids), g, 0)),
        (ValueError, "expert id -2 at token 0, slot 1", (x, np.where(ids == 1, -2, ids), g, 0)),
        (ValueError, f"layer {layers} is out of range", (x, ids, g, layers)),
        (ValueError, "not finite", (x, ids, np.where(ids == 1, np.nan, g), 0)),
        (ValueError, "num_topk = 33", (x, np.zeros((4, 33), np.int64),
                                       np.zeros((4, 33), np.float32), 0)),
        (ValueError, "more than the Buffer's", (np.zeros((b.dispatch_bytes // 32 + 1, 8),
                                                         np.float32),
                                                np.zeros((b.dispatch_bytes // 32 + 1, 2),
                                                         np.int64),
                                                np.zeros((b.dispatch_bytes // 32 + 1, 2),
                                                         np.float32), 0)),
    ]
    for exc, text, args in bad:
        with pytest.raises(exc) as e:
            b.dispatch(*args)
        assert text in str(e.value), (text, str(e.value))
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        with pytest.raises(ValueError, match="on device meta"):
            b.dispatch(torch.zeros((4, 8), device="meta"), ids, g, 0)
    h = locus.Handle(1, 0, 4, 2, 0, refs=np.zeros(3, dtype=[("token", "<u4"),
                                                           ("kmask", "<u4")]))
    with pytest.raises(ValueError, match="another Buffer's dispatch"):
        b.combine(np.zeros((3, 8), np.float32), h)
    h._owner = b
    with pytest.raises(ValueError, match="num_recv = 3"):
        b.combine(np.zeros((2, 8), np.float32), h)
    with pytest.raises(TypeError, match="combine sums"):
        b.combine(np.zeros((3, 8), np.int32), h)
    with pytest.raises(TypeError, match="the Handle dispatch"):
        b.combine(np.zeros((3, 8), np.float32), (1, 2))
    assert batches(b) == before


def test_group_and_table_refusals(ep_daemon, fresh, attach):
    c = attach(ep_daemon.instance, prefill=True)
    with pytest.raises(ValueError, match="needs an expert-parallel rank"):
        locus.Buffer(c, 4)
    r = attach(ep_daemon.instance, rank=3)
    with pytest.raises(ValueError, match="outside the group's ranks 0..1"):
        locus.Buffer(r, 2)
    with pytest.raises(ValueError, match="1..64"):
        locus.Buffer(r, 65)
    # an instance with no GRACE table: refused before anything is submitted
    d = fresh()
    r0 = attach(d.instance, rank=0)
    b = locus.Buffer(r0, 1)
    with pytest.raises(locus.NoTableError, match="no GRACE table") as e:
        b.dispatch(np.zeros((2, 4), np.float32), np.zeros((2, 1), np.int64),
                   np.ones((2, 1), np.float32), 0)
    assert isinstance(e.value, ValueError)
    assert batches(b) == (0, 0)


def test_rows_header_layout():
    """The rows header as the C library lays it out: 48 bytes, the placement generation at
    byte 40, and the refusal's error known by name."""
    from locus import _lib
    assert ctypes.sizeof(_lib.RowsHdr) == 48
    assert _lib.RowsHdr.placement_gen.offset == 40
    assert _lib.ROWS_REFUSED == 4
    assert _lib.ERROR_NAMES[_lib.LOCUS_ESTALEPLACEMENT] == "LOCUS_ESTALEPLACEMENT"
    assert "placement" in _lib.strerror(-_lib.LOCUS_ESTALEPLACEMENT)


def hold_generations(client, floor, acked):
    """What a rank taking part in placement changes writes in its control line (struct
    locus_client_ctl: pl_acked at byte 80, pl_floor at 88, pl_part at 96): it holds
    [floor, acked]; acked 0 takes it out."""
    from locus import _lib
    ctl = client._stage_base - _lib.lib.locus_client_region(client._c).contents.buf_off
    ctypes.c_uint64.from_address(ctl + 88).value = floor
    ctypes.c_uint64.from_address(ctl + 80).value = acked
    ctypes.c_uint32.from_address(ctl + 96).value = 1 if acked else 0


def test_placement_refused(ranks):
    """Ranks that hold none of the generations the table's rows are planned under are
    handed no rows: each rank's dispatch raises LOCUS_ESTALEPLACEMENT at once (every
    destination is on this node), counted in rejected_placement, or the same failure as
    BatchAborted when another rank's refusal reached it first (then it submitted
    nothing); taken out of placement changes again the group dispatches and combines
    again."""
    layers, experts = table(ranks[0])
    w, xs, idx, gates = make_layer(7, experts, 16, 16, [6] * RANKS, 2)
    with locus.Counters(ranks[0].client.instance) as c:
        before = c.value("rejected_placement", 0)
    for b in ranks:
        hold_generations(b.client, 1 << 62, 1 << 62)
    try:
        errs = on_ranks(lambda r: pytest.raises(locus.LocusError, ranks[r].dispatch, xs[r],
                                                idx[r], gates[r], 0))
    finally:
        for b in ranks:
            hold_generations(b.client, 0, 0)
    aborted = 0
    for e in errs:
        assert e.value.name == "LOCUS_ESTALEPLACEMENT", str(e.value)
        assert "placement generation" in str(e.value)
        assert e.value.batch == 1
        aborted += isinstance(e.value, locus.BatchAborted)
    assert aborted < RANKS
    with locus.Counters(ranks[0].client.instance) as c:
        got = c.value("rejected_placement", 0)
        assert before + RANKS - aborted <= got <= before + RANKS
    got = on_ranks(lambda r: ranks[r].dispatch(xs[r], idx[r], gates[r], layer=0))
    check_received(got, xs, idx, gates)
    outs = on_ranks(lambda r: ranks[r].combine(experts_apply(w, *got[r][:3]), got[r][3]))
    for r in range(RANKS):
        np.testing.assert_allclose(outs[r], reference(w, xs[r], idx[r], gates[r]),
                                   rtol=1e-4, atol=1e-4)


def test_dispatch_waits_are_bounded(ranks):
    """A rank whose peers never dispatch gets LocusTimeout within the Buffer's timeout,
    not a hang; a peer not attached at all is locusd's refusal (LOCUS_EPEERDOWN)."""
    import time
    with pytest.raises(ValueError, match="has a Buffer already"):
        locus.Buffer(ranks[0].client, RANKS)
    b = ranks[0]
    b.timeout = 0.5
    t0 = time.monotonic()
    with pytest.raises(locus.LocusTimeout, match="did not complete within 0.5 s") as e:
        b.dispatch(np.zeros((3, 4), np.float32), np.array([[0], [1], [2]]),
                   np.ones((3, 1), np.float32), 0)
    assert time.monotonic() - t0 < 5
    # the message says what the wait lacked: the other ranks' rows of the batch
    print(e.value)
    assert "received: rows of batch 1:" in str(e.value) and "from ranks [0]" in str(e.value)


def test_peer_not_attached(ep_daemon, attach):
    r = attach(ep_daemon.instance, rank=2, timeout=0.5)
    b = locus.Buffer(r, RANKS)
    with pytest.raises(locus.LocusError, match="LOCUS_EPEERDOWN") as e:
        b.dispatch(np.zeros((0, 4), np.float32), np.zeros((0, 1), np.int64),
                   np.ones((0, 1), np.float32), 0)
    assert "rank 0, 1, 3 did not attach within 0.5 s" in str(e.value)
    # the refused notifications are not sent again and their stage ranges come back (those
    # still in flight at the deadline at their completions)
    from locus._lib import lib
    wait_for(lambda: lib.locus_ep_pump(b._ep) >= 0 and b._status().in_flight == 0, 5,
             "the notifications' completions")
    assert r._alloc.used == b._stage_bytes


def test_batch_larger_than_half_the_inbox(fresh, grace_table):
    """Every rank gets more rows in a batch than half its inbox holds: the messages
    past that are copied out and their slots handed back at once, so the other ranks'
    messages find room (held in the inbox, the last sources' DISPATCH would be refused
    for a full inbox until the timeout)."""
    d = fresh("client_slots = 8\nclient_inbox_slots = 16\ninbox_slot_size = 4096\n")
    d.push(grace_table)
    cs = [locus.attach(d.instance, rank=r, timeout=10) for r in range(RANKS)]
    try:
        bufs = [locus.Buffer(c, RANKS) for c in cs]
        assert cs[0].inbox_slots * cs[0].inbox_slot_size == 65536
        layers, experts = table(bufs[0])
        # 48 tokens x 1 KiB rows x top-6 of 64 experts: each rank receives ~150 KiB
        w, xs, idx, gates = make_layer(5, experts, 256, 256, [48] * RANKS, 6)
        got = on_ranks(lambda r: bufs[r].dispatch(xs[r], idx[r], gates[r], layer=2))
        check_received(got, xs, idx, gates)
        assert all(g[0].nbytes > 65536 for g in got)
        outs = on_ranks(lambda r: bufs[r].combine(experts_apply(w, *got[r][:3]), got[r][3]))
        for r in range(RANKS):
            np.testing.assert_allclose(outs[r], reference(w, xs[r], idx[r], gates[r]),
                                       rtol=1e-4, atol=1e-4)
        for b in bufs:
            st = b._status()
            assert st.held_bytes == 0 and st.kept == 0
            b.close()
    finally:
        close_and_wait(cs)


def test_no_selection_slots(ranks):
    """-1 in topk_idx selects nothing (DeepEP's masked and padded slots): those pairs
    reach no expert, a token with none selected (in the middle, or trailing padding)
    sums to zero, and every selected pair reaches exactly one rank."""
    layers, experts = table(ranks[0])
    tokens = [20, 12, 16, 9]
    w, xs, idx, gates = make_layer(11, experts, 24, 16, tokens, 4)
    rng = np.random.default_rng(12)
    for r in range(RANKS):
        idx[r] = np.where(rng.random(idx[r].shape) < 0.3, -1, idx[r])
        idx[r][3] = -1                 # a token with nothing selected
        idx[r][-2:] = -1               # padding at the end
        gates[r][idx[r] < 0] = -0.0    # a gate of -0.0 on a real slot stays a gate
    got = on_ranks(lambda r: ranks[r].dispatch(xs[r], idx[r], gates[r], layer=1))
    seen = {}
    for r, (rx, ri, rw, h) in enumerate(got):
        for src, (start, count) in h.src_slices.items():
            for i in range(start, start + count):
                t = int(h.refs["token"][i])
                np.testing.assert_array_equal(rx[i], xs[src][t])
                for j in range(ri.shape[1]):
                    if ri[i, j] < 0:
                        assert rw[i, j] == 0
                        continue
                    assert ri[i, j] == idx[src][t, j] and rw[i, j] == gates[src][t, j]
                    assert (src, t, j) not in seen
                    seen[(src, t, j)] = r
            # rows of one source come by token
            assert list(h.refs["token"][start:start + count]) == \
                sorted(h.refs["token"][start:start + count])
    assert set(seen) == {(s, t, j) for s in range(RANKS) for t in range(tokens[s])
                         for j in range(4) if idx[s][t, j] >= 0}
    outs = on_ranks(lambda r: ranks[r].combine(experts_apply(w, *got[r][:3]), got[r][3]))
    for r in range(RANKS):
        assert not got[r][3].masked.any()
        want = reference(w, xs[r], np.where(idx[r] < 0, 0, idx[r]),
                         np.where(idx[r] < 0, 0, gates[r]))
        np.testing.assert_allclose(outs[r], want, rtol=1e-4, atol=1e-4)
        assert not outs[r][3].any() and not outs[r][-2:].any()


def test_one_rank_fails_all_fail_fast(ep_daemon):
    """Rank 2's combine input does not fit its Buffer: it raises ValueError, and the
    three other ranks, waiting 30 s at most for its rows, get BatchAborted for the
    same batch within a second (each combine returns in under 1 s). The group then
    serves the next batch."""
    import time
    cs = [locus.attach(ep_daemon.instance, rank=r, timeout=30) for r in range(RANKS)]
    bufs = [locus.Buffer(c, RANKS, timeout=30, num_bytes=64 * 1024 if r == 2 else None)
            for r, c in enumerate(cs)]
    try:
        layers, experts = table(bufs[0])
        hid = 256  # 1 KiB rows
        w, xs, idx, gates = make_layer(13, experts, hid, hid, [16] * RANKS, 6)
        got = on_ranks(lambda r: bufs[r].dispatch(xs[r], idx[r], gates[r], layer=0))
        assert got[2][3].num_recv * hid * 4 > bufs[2].combine_bytes
        assert all(g[3].dests >> 2 & 1 for g in got), "every rank sent rank 2 rows"
        took, errs = [0.0] * RANKS, [None] * RANKS

        ys = [experts_apply(w, *g[:3]) for g in got]
        at = [0.0] * RANKS

        def combine(r):
            t0 = time.monotonic()
            try:
                bufs[r].combine(ys[r], got[r][3])
            except (ValueError, locus.LocusError) as e:
                errs[r] = e
            at[r] = time.monotonic()
            took[r] = at[r] - t0
        on_ranks(combine)
        print("combine with rank 2 failing: " +
              ", ".join(f"rank {r} {took[r] * 1e3:.1f} ms" for r in range(RANKS)) +
              "; after rank 2 raised: " +
              ", ".join(f"rank {r} {(at[r] - at[2]) * 1e3:.1f} ms" for r in (0, 1, 3)))
        assert isinstance(errs[2], ValueError) and "more than the Buffer's" in str(errs[2])
        for r in (0, 1, 3):
            e = errs[r]
            assert isinstance(e, locus.BatchAborted), repr(e)
            assert e.batch == got[r][3].batch == got[2][3].batch and e.rank == 2
            assert e.name == "LOCUS_ERANGE" and "rank 2" in str(e)
            assert took[r] < 1.0, f"rank {r} waited {took[r]:.2f} s"
        # the next batch is served whole
        w, xs, idx, gates = make_layer(14, experts, 16, 16, [8] * RANKS, 2)
        got = on_ranks(lambda r: bufs[r].dispatch(xs[r], idx[r], gates[r], layer=0))
        check_received(got, xs, idx, gates)
        outs = on_ranks(lambda r: bufs[r].combine(experts_apply(w, *got[r][:3]), got[r][3]))
        for r in range(RANKS):
            np.testing.assert_allclose(outs[r], reference(w, xs[r], idx[r], gates[r]),
                                       rtol=1e-4, atol=1e-4)
    finally:
        for b in bufs:
            b.close()
        close_and_wait(cs)


def rows_match(rx, h, xs, skip=0):
    """Row i of rx (recv_x without its first skip rows) is its source's token row."""
    for src, (start, count) in h.src_slices.items():
        for i in range(max(start, skip), start + count):
            np.testing.assert_array_equal(rx[i - skip], xs[src][int(h.refs["token"][i])])


def test_recv_x_held_is_never_written_again(ranks):
    """recv_x of large dispatches is a view of a buffer the Buffer keeps: while the
    caller holds it (or a slice of it) later dispatches leave its rows alone; once
    every view is dropped the next dispatch of that size reuses the buffer."""
    layers, experts = table(ranks[0])
    tokens, hidden = [64, 64, 64, 64], 1024  # 4 KiB rows: more than 64 KiB per rank

    def round_of(seed):
        w, xs, idx, gates = make_layer(seed, experts, hidden, 8, tokens, 6)
        got = on_ranks(lambda r: ranks[r].dispatch(xs[r], idx[r], gates[r], layer=1))
        check_received(got, xs, idx, gates)
        return got, xs
    got_a, xs_a = round_of(10)                            # held whole
    got_b, xs_b = round_of(11)
    held_b = [(g[0][1:], g[3]) for g in got_b]            # a slice of each recv_x held
    del got_b
    got_c, _ = round_of(12)
    addrs = {g[0].__array_interface__["data"][0] for g in got_c}
    del got_c                                             # dropped
    got_d, _ = round_of(12)  # the planner may spread it otherwise: some ranks' fit
    assert {g[0].__array_interface__["data"][0] for g in got_d} & addrs
    for rx, _, _, _ in got_d:
        assert not any(np.shares_memory(rx, h) for h in [g[0] for g in got_a] +
                       [v for v, _ in held_b])
    for rx, _, _, h in got_a:
        rows_match(rx, h, xs_a)
    for rx, h in held_b:
        rows_match(rx, h, xs_b, skip=1)
