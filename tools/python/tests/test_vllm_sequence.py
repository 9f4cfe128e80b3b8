# SPDX-License-Identifier: MIT
"""vLLM's DeepEP call sequence through locus.deep_ep.Buffer on four ranks (a
thread each) against a real locusd with the GRACE table locusctl fitted:
high throughput (get_dispatch_layout -> dispatch -> experts by local id ->
combine, as deepep_ht_prepare_finalize.py calls them) and low latency
(low_latency_dispatch -> batched experts -> low_latency_combine, as
deepep_ll_prepare_finalize.py does), with masked (-1) slots, numpy and
torch. Outputs are checked against the MoE layer computed in plain numpy
(sum over the top-k of gate x expert(x)), never against this package."""
import time

import numpy as np
import pytest

import locus
from locus import deep_ep
from conftest import _freed, close_and_wait, wait_for
from moe_ref import (LAYER, RANKS, group_rank_main, ht_experts, ll_experts, masked_layer,
                     want_out)
from test_buffer import on_ranks


@pytest.fixture
def ranks(ep_daemon, grace_table):
    cs = [locus.attach(ep_daemon.instance, rank=r, timeout=10) for r in range(RANKS)]
    bufs = [deep_ep.Buffer(c, num_ranks=RANKS, placement=grace_table) for c in cs]
    yield bufs
    for b in bufs:
        b.close()
    close_and_wait(cs)


def layer_inputs(bufs, r, xs, idx, gates, torch):
    """Rank r's Buffer at LAYER and its rows, ids and gates (torch tensors when torch)."""
    b = bufs[r]
    b.set_layer(LAYER)
    x, ids, g = xs[r], idx[r], gates[r]
    if torch is not None:
        x, ids, g = torch.from_numpy(x), torch.from_numpy(ids), torch.from_numpy(g)
    return b, x, ids, g


def run_ht(bufs, w, xs, idx, gates, experts, use_torch=False, right=True):
    """One layer the way DeepEPHTPrepareAndFinalize calls the Buffer; returns per rank
    (output, layout, dispatch tuple)."""
    torch = pytest.importorskip("torch") if use_torch else None

    def body(r):
        b, x, ids, g = layer_inputs(bufs, r, xs, idx, gates, torch)
        lay = b.get_dispatch_layout(topk_idx=ids, num_experts=experts, previous_event=None,
                                    async_finish=False, allocate_on_comm_stream=False)
        per_rank, per_rdma, per_expert, in_rank, event = lay
        d = b.dispatch(x=x, handle=None, num_tokens_per_rank=per_rank,
                       num_tokens_per_rdma_rank=per_rdma, is_token_in_rank=in_rank,
                       num_tokens_per_expert=per_expert, topk_idx=ids, topk_weights=g,
                       expert_alignment=1, config=b.get_dispatch_config(RANKS),
                       previous_event=None, async_finish=False, allocate_on_comm_stream=False)
        recv_x, recv_idx, recv_w, per_list, handle, event = d
        if use_torch:
            assert isinstance(recv_x, torch.Tensor) and recv_idx.dtype == torch.int64
            recv_x, recv_idx, recv_w = recv_x.numpy(), recv_idx.numpy(), recv_w.numpy()
        y = ht_experts(w, b.local_experts(), recv_x, recv_idx, recv_w, right)
        if use_torch:
            y = torch.from_numpy(y)
        combined_x, _, event = b.combine(x=y, handle=handle, topk_weights=None,
                                         config=b.get_combine_config(RANKS),
                                         previous_event=None, async_finish=False,
                                         allocate_on_comm_stream=False)
        event.current_stream_wait()
        out = combined_x.numpy() if use_torch else combined_x
        lay = [v.numpy() if use_torch and v is not None and not isinstance(v, deep_ep.EventOverlap)
               else v for v in lay]
        return out, lay, (recv_x, recv_idx, recv_w, per_list, handle)
    return on_ranks(body)


def check_ht_received(bufs, got, xs, idx, gates):
    """Local ids name, through each rank's local_experts(), the global expert its source
    chose; every selected pair arrives once; the per-expert list counts rows."""
    seen = set()
    for r, (_, _, (rx, ri, rw, per_list, h)) in enumerate(got):
        local = bufs[r].local_experts(LAYER)
        assert per_list == [int((ri == le).any(axis=1).sum()) for le in range(len(local))]
        assert ((ri >= -1) & (ri < len(local))).all()
        for src, (start, count) in h.src_slices.items():
            for i in range(start, start + count):
                t = int(h.refs["token"][i])
                np.testing.assert_array_equal(rx[i], xs[src][t])
                for j in range(ri.shape[1]):
                    if ri[i, j] < 0:
                        continue
                    assert local[ri[i, j]] == idx[src][t, j]
                    assert rw[i, j] == gates[src][t, j]
                    assert (src, t, j) not in seen
                    seen.add((src, t, j))
    assert seen == {(s, t, j) for s in range(RANKS) for t in range(len(xs[s]))
                    for j in range(idx[s].shape[1]) if idx[s][t, j] >= 0}


def check_layout(bufs, got, grace, idx, experts):
    """The layout against the placement read here: per-expert token counts; a token is
    in the rank of each expert with one copy (or a copy on its source); a token counted
    at a rank is received there when all its experts there have a single copy."""
    pl = deep_ep.Placement(grace)
    cp = pl.copies()[LAYER]
    ncopy = (cp >= 0).sum(axis=1)
    recvd = [set() for _ in range(RANKS)]
    for r, (_, _, (_, _, _, _, h)) in enumerate(got):
        for src, (start, count) in h.src_slices.items():
            recvd[src] |= {(int(t), r) for t in h.refs["token"][start:start + count]}
    for s, (_, (per_rank, per_rdma, per_expert, in_rank, _), _) in enumerate(got):
        ids = idx[s]
        assert per_rdma is None  # one node
        assert list(per_expert) == [int((ids == e).any(axis=1).sum()) for e in range(experts)]
        assert in_rank.shape == (len(ids), RANKS) and in_rank.dtype == np.bool_
        assert list(per_rank) == list(in_rank.sum(axis=0))
        for t in range(len(ids)):
            for e in ids[t][ids[t] >= 0]:
                if s in cp[e]:
                    assert in_rank[t, s]
                elif ncopy[e] == 1:
                    assert in_rank[t, cp[e][0]] and (t, int(cp[e][0])) in recvd[s]
            assert in_rank[t].any() == (ids[t] >= 0).any()


def test_ht_sequence_numpy(ranks, grace_table):
    layers, experts = ranks[0].client.table_shape(1)
    w, xs, idx, gates = masked_layer(21, experts, 24, 20, [33, 0, 48, 7], 6)
    got = run_ht(ranks, w, xs, idx, gates, experts)
    check_ht_received(ranks, got, xs, idx, gates)
    check_layout(ranks, got, grace_table, idx, experts)
    for r in range(RANKS):
        out = got[r][0]
        assert out.shape == (len(xs[r]), 20) and out.dtype == np.float32
        np.testing.assert_allclose(out, want_out(w, xs[r], idx[r], gates[r]),
                                   rtol=1e-4, atol=1e-4)
        if len(xs[r]):
            assert not out[-1].any()  # the padded token: nothing selected, zero


def test_ht_sequence_torch(ranks):
    torch = pytest.importorskip("torch")
    layers, experts = ranks[0].client.table_shape(1)
    w, xs, idx, gates = masked_layer(22, experts, 16, 16, [12, 30, 5, 19], 8)
    got = run_ht(ranks, w, xs, idx, gates, experts, use_torch=True)
    assert all(isinstance(g[1][0], np.ndarray) for g in got)
    for r in range(RANKS):
        np.testing.assert_allclose(got[r][0], want_out(w, xs[r], idx[r], gates[r]),
                                   rtol=1e-4, atol=1e-4)
    assert torch.is_tensor(ranks[0].get_dispatch_layout(torch.from_numpy(idx[0]),
                                                        experts)[0])


def test_wrong_local_mapping_is_caught(ranks):
    """The comparison has teeth: experts picked by local id as if it were global (a
    contiguous-range expert_map on a GRACE placement) give another output."""
    layers, experts = ranks[0].client.table_shape(1)
    w, xs, idx, gates = masked_layer(23, experts, 16, 16, [20] * RANKS, 4)
    got = run_ht(ranks, w, xs, idx, gates, experts, right=False)
    assert any(not np.allclose(got[r][0], want_out(w, xs[r], idx[r], gates[r]),
                               rtol=1e-3, atol=1e-3) for r in range(RANKS))


def test_global_ids_cached_dispatch_and_weights(ep_daemon, grace_table):
    """expert_ids="global"; combine returning the gates summed back; a cached
    re-dispatch (handle=) of new rows; num_worst_tokens padding."""
    cs = [locus.attach(ep_daemon.instance, rank=r, timeout=10) for r in range(RANKS)]
    bufs = [deep_ep.Buffer(c, num_ranks=RANKS, placement=grace_table, expert_ids="global",
                           layer=LAYER) for c in cs]
    try:
        layers, experts = bufs[0].client.table_shape(1)
        w, xs, idx, gates = masked_layer(24, experts, 8, 8, [10, 3, 0, 16], 4)
        x2 = [2 * x + 1 for x in xs]

        def body(r):
            b = bufs[r]
            rx, ri, rw, per, h, _ = b.dispatch(xs[r], topk_idx=idx[r], topk_weights=gates[r],
                                               num_worst_tokens=80)
            n = h.num_recv
            assert rx.shape[0] == ri.shape[0] == 80 and (ri[n:] == -1).all()
            assert per == [int((ri == e).any(axis=1).sum()) for e in range(experts)]
            y = np.zeros((80, 8), np.float32)
            y[:n] = ht_experts(w, np.arange(experts), rx[:n], ri[:n], rw[:n])
            out, cw, _ = b.combine(y, h, topk_weights=rw)
            # cached: new rows, the same routing
            rx2, ri2, rw2, per2, h2, _ = b.dispatch(x2[r], handle=h)
            assert h2 is h and h.num_recv == len([v for v in ri2 if (v >= 0).any()])
            y2 = ht_experts(w, np.arange(experts), rx2[:h.num_recv], ri2[:h.num_recv],
                            rw2[:h.num_recv])
            out2, none, _ = b.combine(y2, h)
            assert none is None
            return out, cw, out2
        got = on_ranks(body)
        for r in range(RANKS):
            out, cw, out2 = got[r]
            np.testing.assert_allclose(out, want_out(w, xs[r], idx[r], gates[r]),
                                       rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(cw, np.where(idx[r] < 0, 0, gates[r]), rtol=1e-6)
            np.testing.assert_allclose(out2, want_out(w, x2[r], idx[r], gates[r]),
                                       rtol=1e-4, atol=1e-4)
    finally:
        for b in bufs:
            b.close()
        close_and_wait(cs)


def run_ll(bufs, w, xs, idx, gates, experts, bound, use_torch=False, hook=False,
           weights_at_dispatch=False):
    torch = pytest.importorskip("torch") if use_torch else None

    def body(r):
        b, x, ids, g = layer_inputs(bufs, r, xs, idx, gates, torch)
        extra = {"topk_weights": g} if weights_at_dispatch else {}
        recv_x, recv_count, handle, event, h = b.low_latency_dispatch(
            x, ids, bound, experts, use_fp8=False, async_finish=False,
            return_recv_hook=hook, **extra)
        nle = b.num_local_experts()
        assert tuple(recv_x.shape) == (nle, bound * RANKS, x.shape[1])
        h()  # the hook: the rows are in after it (a no-op without return_recv_hook)
        rxn = recv_x.numpy() if use_torch else recv_x
        cnt = recv_count.numpy() if use_torch else recv_count
        y = ll_experts(w, b.local_experts(), rxn, cnt)
        out = torch.empty((x.shape[0], w.shape[2])) if use_torch else \
            np.empty((x.shape[0], w.shape[2]), np.float32)
        if use_torch:
            y = torch.from_numpy(y)
        _, event, h = b.low_latency_combine(y, ids, g, handle, async_finish=False,
                                            zero_copy=False, return_recv_hook=False, out=out)
        event.current_stream_wait()
        h()
        return (out.numpy() if use_torch else out), cnt.copy(), b.local_experts()
    return on_ranks(body)


@pytest.mark.parametrize("use_torch,hook,weights_at_dispatch",
                         [(False, False, False), (True, True, False), (False, True, True),
                          (True, False, True)])
def test_ll_sequence(ranks, use_torch, hook, weights_at_dispatch):
    if use_torch:
        pytest.importorskip("torch")
    layers, experts = ranks[0].client.table_shape(1)
    bound = 16
    w, xs, idx, gates = masked_layer(31, experts, 16, 12, [16, 9, 0, 13], 4)
    got = run_ll(ranks, w, xs, idx, gates, experts, bound, use_torch, hook,
                 weights_at_dispatch)
    # recv_count, summed over the ranks holding an expert, is the (token, expert) pairs
    total = np.zeros(experts, np.int64)
    for _, cnt, local in got:
        np.add.at(total, local, cnt)
    want = sum(np.array([int((idx[s] == e).any(axis=1).sum()) for e in range(experts)])
               for s in range(RANKS))
    np.testing.assert_array_equal(total, want)
    for r in range(RANKS):
        np.testing.assert_allclose(got[r][0], want_out(w, xs[r], idx[r], gates[r]),
                                   rtol=1e-4, atol=1e-4)


def test_ll_bound_and_refusals(ranks):
    layers, experts = ranks[0].client.table_shape(1)
    b = ranks[0]
    x = np.zeros((5, 8), np.float32)
    ids = np.zeros((5, 2), np.int64)
    with pytest.raises(ValueError, match="use_fp8=True: locus moves rows as given"):
        b.low_latency_dispatch(x, ids, 8, experts, use_fp8=True)
    with pytest.raises(ValueError, match="more than num_max_dispatch_tokens_per_rank = 4"):
        b.low_latency_dispatch(x, ids, 4, experts)
    with pytest.raises(ValueError, match="num_experts = 3, the placement has"):
        b.low_latency_dispatch(x, ids, 8, 3)
    # the bound goes to the collective: a dispatch above it is refused by liblocus
    b._set_bound(4)
    with pytest.raises(ValueError, match="the group's bound is 4 per rank"):
        b.dispatch(x, topk_idx=ids, topk_weights=np.ones((5, 2), np.float32))
    b._set_bound(0)
    with pytest.raises(ValueError, match="layer 99 is out of range"):
        b.set_layer(99)
    with pytest.raises(ValueError, match="expert_ids"):
        deep_ep.Buffer(b.client, num_ranks=RANKS, expert_ids="contiguous")
    with pytest.raises(TypeError, match="ProcessGroup or a locus Client"):
        deep_ep.Buffer("group")
    with pytest.raises(ValueError, match="needs topk_idx"):
        b.dispatch(x)
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="on device meta"):
        b.dispatch(torch.zeros((5, 8), device="meta"), topk_idx=ids,
                   topk_weights=np.ones((5, 2), np.float32))


def test_ll_over_bound_fails_every_rank_fast(ep_daemon, grace_table):
    """Rank 2 has more tokens than num_max_dispatch_tokens_per_rank: it raises
    ValueError before sending, and the three others, each bounded by 30 s, raise
    BatchAborted for the same batch within a second. The next layer runs whole."""
    cs = [locus.attach(ep_daemon.instance, rank=r, timeout=30) for r in range(RANKS)]
    bufs = [deep_ep.Buffer(c, num_ranks=RANKS, placement=grace_table, layer=LAYER)
            for c in cs]
    try:
        layers, experts = bufs[0].client.table_shape(1)
        w, xs, idx, gates = masked_layer(41, experts, 8, 8, [6, 6, 9, 6], 2)
        errs, took = [None] * RANKS, [0.0] * RANKS

        def body(r):
            if r != 2:
                time.sleep(0.2)  # they wait for rank 2's rows, which never come
            t0 = time.monotonic()
            try:
                bufs[r].low_latency_dispatch(xs[r], idx[r], 8, experts)
            except (ValueError, locus.LocusError) as e:
                errs[r] = e
            took[r] = time.monotonic() - t0
        on_ranks(body)
        assert isinstance(errs[2], ValueError) and "more than" in str(errs[2])
        for r in (0, 1, 3):
            assert isinstance(errs[r], locus.BatchAborted), repr(errs[r])
            assert errs[r].rank == 2 and errs[r].batch == errs[2].batch == 1
            assert "x has 9 tokens" in str(errs[r])
            assert took[r] < 1.0, f"rank {r} waited {took[r]:.2f} s"
        w, xs, idx, gates = masked_layer(42, experts, 8, 8, [6, 6, 8, 6], 2)
        got = run_ll(bufs, w, xs, idx, gates, experts, 8)
        for r in range(RANKS):
            np.testing.assert_allclose(got[r][0], want_out(w, xs[r], idx[r], gates[r]),
                                       rtol=1e-4, atol=1e-4)
    finally:
        for b in bufs:
            b.close()
        close_and_wait(cs)


def test_scales_bias_stats_and_mask(ranks):
    """x as (quantized rows, scales) comes back as the pair; combine adds bias; the
    low-latency mode adds its counts to cumulative_local_expert_recv_stats; the mask
    query reads every rank live."""
    layers, experts = ranks[0].client.table_shape(1)
    w, xs, idx, gates = masked_layer(61, experts, 8, 8, [7, 5, 3, 6], 2)
    q = [np.clip(x * 16, -127, 127).astype(np.int8) for x in xs]
    sc = [np.abs(x).max(axis=1, keepdims=True).astype(np.float32) for x in xs]

    def body(r):
        b = ranks[r]
        b.set_layer(LAYER)
        (rq, rs), ri, rw, per, h, _ = b.dispatch(x=(q[r], sc[r]), topk_idx=idx[r],
                                                 topk_weights=gates[r])
        assert rq.dtype == np.int8 and rs.dtype == np.float32 and rs.shape[1] == 1
        for src, (start, count) in h.src_slices.items():
            toks = h.refs["token"][start:start + count]
            np.testing.assert_array_equal(rq[start:start + count], q[src][toks])
            np.testing.assert_array_equal(rs[start:start + count], sc[src][toks])
        y = np.zeros((h.num_recv, 4), np.float32)
        bias = np.full((len(xs[r]), 4), 0.5, np.float32)
        out, _, _ = b.combine(y, h, bias=(bias, bias))
        np.testing.assert_array_equal(out, 1.0)
        stats = np.zeros(b.num_local_experts(), np.int32)
        for _ in range(2):
            rx, cnt, lh, ev, hook = b.low_latency_dispatch(xs[r], idx[r], 8, experts,
                                                           cumulative_local_expert_recv_stats=stats)
            b.low_latency_combine(np.zeros(rx.shape, np.float32), idx[r], gates[r], lh)
        np.testing.assert_array_equal(stats, 2 * cnt)
        mask = np.full(RANKS, 7, np.int32)
        b.low_latency_query_mask_buffer(mask)
        assert not mask.any()
    on_ranks(body)


def test_no_placement_refusal(ep_daemon, attach):
    c = attach(ep_daemon.instance, rank=0)
    b = deep_ep.Buffer(c, num_ranks=RANKS)
    try:
        with pytest.raises(ValueError, match="needs the placement: pass placement="):
            b.local_experts()
    finally:
        b.close()


def test_expert_map(ranks, grace_table):
    """vLLM's expert_map (global id -> local id, -1) is the inverse of local_experts."""
    pl = deep_ep.Placement(grace_table)
    for b in ranks:
        for layer in (0, LAYER):
            local, emap = b.local_experts(layer), b.expert_map(layer)
            assert list(emap[local]) == list(range(len(local)))
            assert (emap >= 0).sum() == len(local)
            held = [e for e in range(pl.n_experts) if b.rank in pl.copies()[layer, e]]
            assert list(local) == held


def test_process_group(ep_daemon, tmp_path):
    """A torch.distributed ProcessGroup: the Buffer attaches as get_rank(group) in a
    group of get_world_size(group) ranks, and detaches on destroy()."""
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0,
                            world_size=1)
    try:
        b = deep_ep.Buffer(group=dist.group.WORLD, num_nvl_bytes=1 << 20, num_rdma_bytes=0,
                           low_latency_mode=False, num_qps_per_rank=1,
                           explicitly_destroy=True, instance=ep_daemon.instance)
        client = b.client
        assert (b.rank, b.num_ranks, b.group_size, b.num_nvl_bytes) == (0, 1, 1, 1 << 20)
        assert client.rank == 0 and not client.closed
        with locus.Counters(ep_daemon.instance) as ctr:
            base = _freed(ctr)
            b.destroy()
            assert client.closed
            wait_for(lambda: _freed(ctr) > base, 10, "locusd to free the slot")
    finally:
        dist.destroy_process_group()


def test_four_process_group(ep_daemon, grace_table, tmp_path):
    """Four processes in a gloo ProcessGroup, each a Buffer made from the group as vLLM
    makes it, run both sequences; each checks its output against plain numpy."""
    pytest.importorskip("torch.distributed")
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=group_rank_main, args=(r, tmp_path / "store", ep_daemon.instance,
                                             grace_table, q)) for r in range(RANKS)]
    for p in ps:
        p.start()
    try:
        got = dict(q.get(timeout=120) for _ in range(RANKS))
    finally:
        for p in ps:
            p.join(30)
            if p.is_alive():
                p.kill()
    assert got == {r: None for r in range(RANKS)}, got
