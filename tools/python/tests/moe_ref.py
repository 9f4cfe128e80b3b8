# SPDX-License-Identifier: MIT
"""The MoE layer of the vLLM-sequence tests computed without locus, and one rank
of the four-process group test (run in a spawned process: this module imports
no fixture, so the child keeps the parent's $LOCUS_SHM_DIR)."""
import numpy as np

from locus import deep_ep

RANKS = 4
LAYER = 2


def make_layer(seed, experts, hidden, out_hidden, tokens, k):
    """Expert weights [E, hidden, out_hidden], and per rank its rows, top-k ids
    (distinct per token) and gates (summing to 1)."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((experts, hidden, out_hidden)).astype(np.float32) / 8
    xs, idx, gates = [], [], []
    for t in tokens:
        xs.append(rng.standard_normal((t, hidden)).astype(np.float32))
        idx.append(np.array([rng.choice(experts, k, replace=False) for _ in range(t)],
                            dtype=np.int64).reshape(t, k))
        g = rng.random((t, k)).astype(np.float32) + 0.1
        gates.append(g / g.sum(axis=1, keepdims=True))
    return w, xs, idx, gates


def reference(w, x, idx, gates):
    """The MoE layer without locus: sum_j gate_j * x @ W[expert_j]."""
    out = np.zeros((x.shape[0], w.shape[2]), dtype=np.float64)
    for t in range(x.shape[0]):
        for j in range(idx.shape[1]):
            out[t] += gates[t, j] * (x[t].astype(np.float64) @ w[idx[t, j]])
    return out


def masked_layer(seed, experts, hidden, out_hidden, tokens, k):
    """make_layer's layer with some slots -1 (a padded token has none selected)."""
    w, xs, idx, gates = make_layer(seed, experts, hidden, out_hidden, tokens, k)
    rng = np.random.default_rng(seed + 100)
    for r in range(len(xs)):
        if len(xs[r]):
            idx[r][rng.random(idx[r].shape) < 0.2] = -1
            idx[r][-1] = -1
    return w, xs, idx, gates

def want_out(w, x, idx, gates):
    return reference(w, x, np.where(idx < 0, 0, idx), np.where(idx < 0, 0, gates))

def ht_experts(w, local, recv_x, recv_idx, recv_w, right=True):
    """vLLM's fused experts on the received rows: each slot's local id names the expert
    by the rank's local list (right=False: by the local id as if it were global, the
    mistake a contiguous-range mapping makes); weighted and summed per row."""
    y = np.zeros((recv_x.shape[0], w.shape[2]), np.float32)
    for j in range(recv_idx.shape[1]):
        for le in np.unique(recv_idx[:, j]):
            if le < 0:
                continue
            sel = recv_idx[:, j] == le
            g = local[le] if right else le
            y[sel] += recv_w[sel, j:j + 1] * (recv_x[sel] @ w[g])
    return y

def ll_experts(w, local, recv_x, recv_count):
    """vLLM's batched experts: local expert i on its first recv_count[i] rows, unweighted."""
    out = np.zeros(recv_x.shape[:2] + (w.shape[2],), np.float32)
    for i, g in enumerate(local):
        c = int(recv_count[i])
        out[i, :c] = recv_x[i, :c] @ w[g]
    return out

def group_rank_main(rank, store, instance, grace, q):
    """One rank of a real four-process gloo group: vLLM's high-throughput and
    low-latency sequences with torch bfloat16 rows; puts (rank, error or None)."""
    try:
        import torch
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                                world_size=RANKS)
        buf = deep_ep.Buffer(group=dist.group.WORLD, num_nvl_bytes=1 << 28, num_rdma_bytes=0,
                             low_latency_mode=True, num_qps_per_rank=1,
                             explicitly_destroy=True, instance=instance, placement=grace,
                             timeout=20)
        try:
            assert (buf.rank, buf.num_ranks) == (rank, RANKS)
            experts = buf._pl.n_experts
            w, xs, idx, gates = masked_layer(51, experts, 16, 16, [11, 4, 0, 9], 4)
            x = torch.from_numpy(xs[rank]).to(torch.bfloat16)
            xr = x.float().numpy()
            want = want_out(w, xr, idx[rank], gates[rank])
            ids, g = torch.from_numpy(idx[rank]), torch.from_numpy(gates[rank])
            with buf.layer(LAYER):
                lay = buf.get_dispatch_layout(ids, experts)
                rx, ri, rw, per, h, ev = buf.dispatch(
                    x=x, topk_idx=ids, topk_weights=g, num_tokens_per_rank=lay[0],
                    is_token_in_rank=lay[3], num_tokens_per_expert=lay[2])
                assert rx.dtype == torch.bfloat16
                y = ht_experts(w, buf.local_experts(), rx.float().numpy(), ri.numpy(),
                               rw.numpy())
                out, _, ev = buf.combine(x=torch.from_numpy(y).to(torch.bfloat16), handle=h)
                np.testing.assert_allclose(out.float().numpy(), want, rtol=0.05, atol=0.05)
                rx, cnt, h, ev, hook = buf.low_latency_dispatch(x, ids, 16, experts,
                                                                return_recv_hook=True)
                hook()
                y = ll_experts(w, buf.local_experts(), rx.float().numpy(), cnt.numpy())
                out = torch.empty((len(xr), 16), dtype=torch.bfloat16)
                buf.low_latency_combine(torch.from_numpy(y).to(torch.bfloat16), ids, g, h,
                                        out=out)
                np.testing.assert_allclose(out.float().numpy(), want, rtol=0.05, atol=0.05)
        finally:
            buf.destroy()
            dist.destroy_process_group()
        q.put((rank, None))
    except BaseException as e:  # noqa: B902 - reported to the test
        q.put((rank, f"{type(e).__name__}: {e}"))

