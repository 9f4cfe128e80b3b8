# SPDX-License-Identifier: MIT
"""DeepEP's surface over locus: `locus.deep_ep.Buffer` takes the calls vLLM's
DeepEP prepare/finalize classes and all-to-all managers make (its
constructor, get_dispatch_layout, dispatch, combine, low_latency_dispatch,
low_latency_combine, with DeepEP's return tuples), so a call site moves over
by importing this module in place of `deep_ep`.

It is locus.Buffer (the collective is liblocus's, locus_ep.h) with three
things DeepEP's callers need and locus's own form does not carry:

* the GRACE layer of a call is Buffer state (set_layer(l), or `with
  buffer.layer(l):`), as DeepEP's calls name no layer;
* the placement: which experts this rank holds at each layer (GRACE
  placements are not contiguous ranges and may hold copies), for local
  expert ids, the layout counts and the low-latency mode's per-expert
  arrays. It is the GRACE table locusd plans with, given as bytes or a path
  (placement=, set_placement()), or, on a cluster, its placement in force;
* argument translation: DeepEP's tuples, local ids, the low-latency mode's
  [local experts, slots, hidden] arrays and its receive bound.

CPU only: numpy arrays or CPU torch tensors in, the same kind out; a GPU
tensor is refused with a sentence. The waits are bounded by the Buffer's
timeout, also those of an event's wait() and a hook's call.
"""
import ctypes
import errno
import os
import struct

import numpy as np

from . import _arrays
from ._lib import lib
from . import _lib
from .buffer import Buffer as _Buffer, Handle, _raw, _wrap, _torch
from .client import Client
from .errors import from_code

_NO_RANK = 0xffff
_DIMS = struct.Struct("<8I")  # locus_grace_dims


class Config:
    """DeepEP's tuning record (SMs, chunk sizes). Accepted wherever DeepEP takes one;
    locus plans and sizes its transfers itself, so its fields change nothing."""

    def __init__(self, num_sms=20, *args):
        self.num_sms, self.args = num_sms, args

    def get_nvl_buffer_size_hint(self, hidden_bytes, num_ranks):
        """Bytes a dispatch of 4096 tokens per rank of hidden_bytes rows receives at most."""
        return 4096 * int(num_ranks) * int(hidden_bytes)

    def get_rdma_buffer_size_hint(self, hidden_bytes, num_ranks):
        return 0


class EventOverlap:
    """DeepEP's event: wait() / current_stream_wait() finish the call it belongs to
    (bounded by the Buffer's timeout) and are no-ops once it finished; `with ev:`
    waits on leaving. A CPU path has no stream: a call made with async_finish=False
    has finished when it returns."""

    def __init__(self, finish=None):
        self._finish = finish

    def wait(self):
        f, self._finish = self._finish, None
        if f is not None:
            f()

    current_stream_wait = wait

    def done(self):
        return self._finish is None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.wait()


def _no_hook():
    return None


def _wait_event(ev, name="previous_event"):
    if ev is None:
        return
    if not hasattr(ev, "current_stream_wait"):
        raise TypeError(f"{name} must be an EventOverlap (or None), not {type(ev).__name__}")
    ev.current_stream_wait()


def _flag(v, name):
    if not isinstance(v, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, not {type(v).__name__}")
    return bool(v)


class Placement:
    """A GRACE table's placement, read from its sealed bytes (checked by liblocus,
    locus_grace_blob_check): primary [L, E] and replica [L, E, R] ranks."""

    def __init__(self, blob):
        if isinstance(blob, (str, os.PathLike)):
            with open(blob, "rb") as f:
                blob = f.read()
        if not isinstance(blob, (bytes, bytearray, memoryview)):
            raise TypeError(f"a placement is a GRACE table as bytes or a path, not "
                            f"{type(blob).__name__}")
        blob = bytes(blob)
        buf = ctypes.create_string_buffer(blob, len(blob))
        pay, n, err = ctypes.c_void_p(), ctypes.c_size_t(), _lib.Error()
        ret = lib.locus_grace_blob_check(buf, len(blob), ctypes.byref(pay), ctypes.byref(n),
                                         ctypes.byref(err))
        if ret < 0:
            raise from_code(ret, err.text() or None, what="placement")
        off = pay.value - ctypes.addressof(buf)
        L, E, nodes, gpn, R = _DIMS.unpack_from(blob, off)[:5]
        self.n_layers, self.n_experts, self.gpus_per_node = L, E, gpn
        self.n_ranks = nodes * gpn
        at = off + _DIMS.size
        self.primary = np.frombuffer(blob, "<u2", L * E, at).reshape(L, E).astype(np.int64)
        self.replica = np.frombuffer(blob, "<u2", L * E * R, at + 2 * L * E) \
            .reshape(L, E, R).astype(np.int64)

    def copies(self):
        """[L, E, 1 + R] ranks holding each expert (primary first), -1 padded."""
        if getattr(self, "_copies", None) is None:
            c = np.concatenate([self.primary[:, :, None], self.replica], axis=2)
            c[c == _NO_RANK] = -1
            self._copies = c
        return self._copies

    def local_experts(self, rank):
        """Per layer, the global ids of the experts rank holds, ascending (a local id
        is an index into its layer's array)."""
        held = (self.copies() == rank).any(axis=2)
        return [np.flatnonzero(held[l]) for l in range(self.n_layers)]

    def counted_rank(self, src):
        """[L, E]: the rank get_dispatch_layout counts an expert's tokens from rank src
        at: src when it holds a copy, else the primary when it is on src's node, else
        the lowest-ranked copy on src's node, else the primary."""
        c = self.copies()
        gpn = max(1, self.gpus_per_node)
        own = (c == src).any(axis=2)
        node = (c >= 0) & (c // gpn == src // gpn)
        node_first = np.where(node, c, 1 << 30).min(axis=2)
        prim = self.primary
        out = np.where(node_first < (1 << 30), node_first, prim)
        out = np.where(prim // gpn == src // gpn, prim, out)
        return np.where(own, src, out)


class LowLatencyHandle:
    """What low_latency_combine needs of a low_latency_dispatch: the batch's Handle
    (.handle, once its rows are in), and where each received (row, slot) sits in
    recv_x [local expert, position]."""

    def __init__(self, layer, num_local, bound, hidden, k, weighted, src_idx, src_w):
        self.layer, self.num_local_experts, self.bound = layer, num_local, bound
        self.hidden, self.top_k, self.weighted = hidden, k, weighted
        self.src_idx, self.src_weights = src_idx, src_w
        self.handle = None
        self.recv_weights = None
        self.slot_entry = None   # [num_recv, k]: entry of each (row, slot), -1 none
        self.entry_row = self.entry_local = self.entry_pos = None
        self._finish = None

    def wait(self):
        f, self._finish = self._finish, None
        if f is not None:
            f()


class Buffer(_Buffer):
    """DeepEP's Buffer over locus. `group` is a torch.distributed ProcessGroup (this
    process's rank and the group's size are torch.distributed.get_rank(group) /
    get_world_size(group); the Buffer attaches to `instance`'s locusd as that rank,
    default $LOCUS_INSTANCE or "default", and detaches on close()), or a locus Client
    attached with rank=R, then with num_ranks= (locus's own form). DeepEP's sizing
    arguments (num_nvl_bytes, num_rdma_bytes, num_qps_per_rank, ...) are kept as
    attributes: locus sizes from its stage (num_bytes=, as locus.Buffer). The NVLink,
    MNNVL and shrink switches change nothing: locus picks the paths, and a lost rank is
    masked (locus.Buffer's "Ranks that fail").

    placement: the GRACE table locusd plans with (bytes or a path; default: the
    cluster placement in force, if any). expert_ids: "local" (DeepEP's: recv_topk_idx
    holds indices into local_experts(layer), -1 elsewhere) or "global" (the GRACE
    table's ids). layer: the GRACE layer calls use until set_layer()."""

    def __init__(self, group, num_nvl_bytes=0, num_rdma_bytes=0, low_latency_mode=False,
                 num_qps_per_rank=24, allow_nvlink_for_low_latency_mode=True,
                 allow_mnnvl=False, explicitly_destroy=False, enable_shrink=False, *,
                 instance=None, num_ranks=None, placement=None, expert_ids="local",
                 layer=0, num_bytes=None, timeout=None, max_tokens=None):
        if expert_ids not in ("local", "global"):
            raise ValueError(f"expert_ids = {expert_ids!r}: \"local\" (DeepEP's) or "
                             "\"global\"")
        for name, v in (("num_nvl_bytes", num_nvl_bytes), ("num_rdma_bytes", num_rdma_bytes),
                        ("num_qps_per_rank", num_qps_per_rank)):
            _arrays.check_uint(v, name, 63)
        low_latency_mode = _flag(low_latency_mode, "low_latency_mode")
        own = None
        if isinstance(group, Client):
            client = group
            if num_ranks is None:
                raise ValueError("a Buffer over a locus Client needs num_ranks= (the EP "
                                 "group's size)")
        else:
            rank, size = self._group_rank(group)
            if num_ranks is not None and num_ranks != size:
                raise ValueError(f"num_ranks = {num_ranks}, but the group has {size} ranks")
            num_ranks = size
            from . import attach
            inst = instance or os.environ.get("LOCUS_INSTANCE", "default")
            kw = {} if timeout is None else {"timeout": timeout}
            client = own = attach(inst, rank=rank, **kw)
        try:
            super().__init__(client, num_ranks, num_bytes=num_bytes, timeout=timeout,
                             max_tokens=max_tokens)
        except BaseException:
            if own is not None:
                own.close()
            raise
        self._own_client = own
        self.group, self.group_size = group, num_ranks
        self.num_nvl_bytes, self.num_rdma_bytes = num_nvl_bytes, num_rdma_bytes
        self.low_latency_mode = low_latency_mode
        self.num_qps_per_rank = num_qps_per_rank
        self.explicitly_destroy = explicitly_destroy
        self.expert_ids = expert_ids
        self._bound = 0 if max_tokens is None else int(max_tokens)
        self._layer = 0
        self._pl = self._local = self._g2l = None
        self._counted = None
        try:
            self.set_layer(layer)
            if placement is None:
                placement = self._cluster_placement()
            if placement is not None:
                self.set_placement(placement)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _group_rank(group):
        try:
            import torch.distributed as dist
        except ImportError:
            raise TypeError("group must be a torch.distributed ProcessGroup (torch is not "
                            "installed) or a locus Client") from None
        if not isinstance(group, dist.ProcessGroup):
            raise TypeError(f"group must be a torch.distributed ProcessGroup or a locus "
                            f"Client, not {type(group).__name__}")
        rank, size = dist.get_rank(group), dist.get_world_size(group)
        if rank < 0:
            raise ValueError("this process is not a member of the group")
        return rank, size

    def _cluster_placement(self):
        try:
            cur = self.client.placement()["current"]
            return self.client.placement_table(cur) if cur else None
        except Exception:  # noqa: BLE001 - no cluster placement: given later or not needed
            return None

    # ---- DeepEP's static helpers -----------------------------------------------------

    num_sms = 20

    @staticmethod
    def set_num_sms(new_num_sms):
        """DeepEP's SM budget: kept, changes nothing (locus uses no GPU SMs)."""
        Buffer.num_sms = _arrays.check_uint(new_num_sms, "new_num_sms")

    @staticmethod
    def get_dispatch_config(num_ranks):
        return Config(Buffer.num_sms)

    @staticmethod
    def get_combine_config(num_ranks):
        return Config(Buffer.num_sms)

    @staticmethod
    def get_low_latency_rdma_size_hint(num_max_dispatch_tokens_per_rank, hidden, num_ranks,
                                       num_experts):
        """Bytes the low-latency mode's received rows take at most (float32 rows)."""
        return int(num_max_dispatch_tokens_per_rank) * int(num_ranks) * int(hidden) * 4

    def get_local_buffer_tensor(self, *a, **kw):
        raise NotImplementedError("locus has no GPU buffer to hand out: rows go through "
                                  "the client's stage (dispatch_input / combine_input)")

    def low_latency_query_mask_buffer(self, mask):
        """mask[r] = 1 for each rank of the group locusd cannot reach, else 0."""
        live = set(self.active_ranks())
        m = _arrays.as_numpy(mask, "mask")
        if m.shape != (self.num_ranks,):
            raise ValueError(f"mask must be [{self.num_ranks}], not {tuple(m.shape)}")
        m[:] = [0 if r in live else 1 for r in range(self.num_ranks)]

    def low_latency_clean_mask_buffer(self):
        return None

    def clean_low_latency_buffer(self, *a, **kw):
        return None

    def get_comm_stream(self):
        return None

    def destroy(self):
        """DeepEP's explicit destroy: close()."""
        self.close()

    def close(self):
        try:
            super().close()
        finally:
            own, self._own_client = getattr(self, "_own_client", None), None
            if own is not None:
                own.close()

    # ---- the layer and the placement -------------------------------------------------

    def set_layer(self, layer):
        """The GRACE layer of the calls from now on (vLLM's modular kernel sets it once
        per MoE layer)."""
        layer = _arrays.check_uint(layer, "layer", 16)
        if self._pl is not None and layer >= self._pl.n_layers:
            raise ValueError(f"layer {layer} is out of range: the placement has "
                             f"{self._pl.n_layers} MoE layers")
        self._layer = layer

    def layer(self, layer):
        """`with buffer.layer(l):` the calls inside run at GRACE layer l."""
        buf, prev = self, self._layer

        class _Ctx:
            def __enter__(self):
                buf.set_layer(layer)
                return buf

            def __exit__(self, *exc):
                buf._layer = prev
        return _Ctx()

    @property
    def current_layer(self):
        return self._layer

    def set_placement(self, placement):
        """The GRACE table locusd plans with (sealed bytes, a path, or a Placement): its
        experts per rank give the local ids and the layout."""
        pl = placement if isinstance(placement, Placement) else Placement(placement)
        if pl.n_ranks < self.num_ranks:
            raise ValueError(f"the placement has {pl.n_ranks} GPUs, the group "
                             f"{self.num_ranks} ranks")
        self._pl = pl
        self._local = pl.local_experts(self.rank)
        g2l = np.full((pl.n_layers, pl.n_experts), -1, np.int64)
        for l, ids in enumerate(self._local):
            g2l[l, ids] = np.arange(len(ids))
        self._g2l = g2l
        self._counted = pl.counted_rank(self.rank)
        if self._layer >= pl.n_layers:
            self._layer = 0

    def _need_placement(self, what):
        if self._pl is None:
            raise ValueError(f"{what} needs the placement: pass placement= (the GRACE "
                             "table pushed to locusd, as bytes or a path) or call "
                             "set_placement()")
        return self._pl

    def local_experts(self, layer=None):
        """The global ids of the experts this rank holds at layer (default: the current
        one), in local-id order: local id i is global id local_experts()[i]."""
        self._need_placement("local_experts")
        layer = self._layer if layer is None else _arrays.check_uint(layer, "layer", 16)
        return self._local[layer].copy()

    def num_local_experts(self, layer=None):
        return len(self.local_experts(layer))

    def expert_map(self, layer=None):
        """vLLM's expert_map for layer: [num_experts] int, global id -> local id, -1 for
        experts this rank does not hold."""
        self._need_placement("expert_map")
        layer = self._layer if layer is None else _arrays.check_uint(layer, "layer", 16)
        return self._g2l[layer].copy()

    # ---- layout ----------------------------------------------------------------------

    def get_dispatch_layout(self, topk_idx, num_experts, previous_event=None,
                            async_finish=False, allocate_on_comm_stream=False):
        """DeepEP's (num_tokens_per_rank [num_ranks], num_tokens_per_rdma_rank [nodes] or
        None on one node, num_tokens_per_expert [num_experts], is_token_in_rank
        [num_tokens, num_ranks] bool, event) for topk_idx at the current layer. A token
        counts once per rank (and node) its selected experts are counted at, and once
        per expert it selects. The rank counted for an expert: this rank when it holds
        a copy, else a copy on this node (the primary when it is one), else the
        primary; a token's other multi-copy experts count at a copy on a rank the token
        goes to anyway when there is one, as locusd's planner prefers. The planner
        spreads the rest of a multi-copy expert's tokens over its copies by weighted
        round robin, so for those experts num_tokens_per_rank is where the placement
        prefers them, not a promise. dispatch() does not need these: locusd plans."""
        _wait_event(previous_event)
        pl = self._need_placement("get_dispatch_layout")
        num_experts = _arrays.check_uint(num_experts, "num_experts")
        if num_experts != pl.n_experts:
            raise ValueError(f"num_experts = {num_experts}, the placement has "
                             f"{pl.n_experts}")
        ids = _arrays.as_numpy(topk_idx, "topk_idx")
        _arrays.check_int_dtype(ids, "topk_idx")
        if ids.ndim != 2:
            raise ValueError(f"topk_idx must be [num_tokens, num_topk], not "
                             f"{tuple(ids.shape)}")
        ids = ids.astype(np.int64, copy=False)
        bad = (ids < -1) | (ids >= num_experts)
        if bad.any():
            t, j = np.argwhere(bad)[0]
            raise ValueError(f"expert id {ids[t, j]} at token {t}, slot {j} is out of range "
                             f"(0..{num_experts - 1}, or -1 for no selection)")
        n, k = ids.shape
        R = self.num_ranks
        sel = ids >= 0
        safe = np.where(sel, ids, 0)
        c = pl.copies()[self._layer]                        # [E, 1 + R']
        multi = (c >= 0).sum(axis=1) > 1
        held = (c == self.rank).any(axis=1)
        fixed = sel & ~(multi[safe] & ~held[safe])
        dest = np.where(fixed, self._counted[self._layer][safe], -1)
        in_rank = np.zeros((n, R + 1), bool)
        rows = np.broadcast_to(np.arange(n)[:, None], (n, k))
        in_rank[rows[fixed], np.minimum(dest[fixed], R)] = True
        # multi-copy experts: a copy on a rank the token goes to anyway, else the counted
        ch = sel & ~fixed
        if ch.any():
            t_i, j_i = np.nonzero(ch)
            cc = c[ids[t_i, j_i]]                            # [m, 1 + R']
            ok = (cc >= 0) & (cc < R)
            hit = ok & in_rank[t_i[:, None], np.clip(cc, 0, R)]
            first = np.where(hit.any(axis=1), cc[np.arange(len(t_i)), hit.argmax(axis=1)],
                             self._counted[self._layer][ids[t_i, j_i]])
            in_rank[t_i, np.minimum(first, R)] = True
        in_rank = np.ascontiguousarray(in_rank[:, :R])
        per_rank = in_rank.sum(axis=0).astype(np.int32)
        onehot = np.zeros((n, num_experts + 1), bool)
        onehot[rows, np.where(sel, ids, num_experts)] = True
        per_expert = onehot[:, :num_experts].sum(axis=0).astype(np.int32)
        gpn = max(1, pl.gpus_per_node)
        nodes = -(-R // gpn)
        per_node = None
        if nodes > 1:
            pad = np.zeros((n, nodes * gpn), bool)
            pad[:, :R] = in_rank
            per_node = pad.reshape(n, nodes, gpn).any(axis=2).sum(axis=0).astype(np.int32)
        if _arrays._is_torch(topk_idx):
            torch = _torch()
            conv = torch.from_numpy
            return (conv(per_rank), None if per_node is None else conv(per_node),
                    conv(per_expert), conv(in_rank), EventOverlap())
        return per_rank, per_node, per_expert, in_rank, EventOverlap()

    # ---- high-throughput dispatch / combine -------------------------------------------

    def _next_of_group(self):
        """The id the group's next batch takes (None once closed)."""
        with self.client._lock:
            return None if self._closed else self._status().next_batch

    def _refuse(self, nb, e):
        """A dispatch refused here before it took a batch (nb still the next one): the
        group's next batch fails on every rank (locus_ep_dispatch_refuse), so none waits
        out its timeout for this rank's rows; e.batch names it."""
        with self.client._lock:
            if nb is None or self._closed or self._pending is not None or \
                    self._status().next_batch != nb:
                return  # closed, a dispatch not waited for (its rows stay), or a batch taken
            code = _lib.LOCUS_ERANGE if "more than" in str(e) else errno.EINVAL
            b = lib.locus_ep_dispatch_refuse(self._ep, -code, f"rank {self.rank}: {e}"
                                             .encode("utf-8", "replace")[:159])
            if b > 0:
                self._next_batch = b + 1
                e.batch = b

    def _to_local(self, ri, layer, h):
        """recv ids (global, -1 elsewhere) to local ids in place; a global id this rank
        does not hold by the placement fails the batch on every rank."""
        g2l = self._g2l[layer]
        m = ri >= 0
        loc = g2l[ri[m]]
        if (loc < 0).any():
            e = int(ri[m][loc < 0][0])
            msg = (f"rank {self.rank} received rows for expert {e} at layer {layer}, which "
                   "it does not hold by the placement the Buffer was given: "
                   "set_placement() with the GRACE table locusd uses")
            self.abort(h, msg, code=errno.EPROTO)
            raise ValueError(msg)
        ri[m] = loc

    def dispatch(self, x, handle=None, num_tokens_per_rank=None, num_tokens_per_rdma_rank=None,
                 is_token_in_rank=None, num_tokens_per_expert=None, topk_idx=None,
                 topk_weights=None, expert_alignment=1, num_worst_tokens=0, config=None,
                 previous_event=None, async_finish=False, allocate_on_comm_stream=False):
        """DeepEP's dispatch at the current layer: (recv_x, recv_topk_idx,
        recv_topk_weights, num_recv_tokens_per_expert_list, handle, event). x is
        [num_tokens, hidden] or (x, scales), both sent with each row. The layout
        arguments are accepted and not needed (locusd plans from topk_idx). recv_topk_idx
        holds local ids (expert_ids="global": global ids), -1 in the slots another rank
        serves; recv_topk_weights is None when topk_weights is. The per-expert list
        counts received rows per local expert (global: per expert of the table), each
        rounded up to expert_alignment. num_worst_tokens > 0 pads the received arrays to
        that many rows. handle= re-dispatches new rows with that handle's routing: the
        planner may pick another copy of a multi-copy expert, so the received ids and
        weights come again, and the handle passed now names the new batch (combine with
        either). async_finish: the rows are in when dispatch returns (event done)."""
        _wait_event(previous_event)
        nb = self._next_of_group()
        try:
            align = _arrays.check_uint(expert_alignment, "expert_alignment")
            if align < 1:
                raise ValueError("expert_alignment must be at least 1")
            worst = _arrays.check_uint(num_worst_tokens, "num_worst_tokens")
            _flag(async_finish, "async_finish")
            if handle is not None:
                if not isinstance(handle, Handle) or not hasattr(handle, "_src"):
                    raise TypeError("handle must be the handle an earlier dispatch() of this "
                                    "Buffer returned")
                ids, w, layer, weighted = handle._src
            else:
                if topk_idx is None:
                    raise ValueError("dispatch needs topk_idx (or the handle of an earlier "
                                     "dispatch to dispatch new rows the same way)")
                layer = self._layer
                ids = np.array(_raw(topk_idx, "topk_idx")[0], copy=True)
                weighted = topk_weights is not None
                w = np.array(_raw(topk_weights, "topk_weights")[0], dtype=np.float32) \
                    if weighted else np.ones(ids.shape, np.float32)
            if self.expert_ids == "local":
                self._need_placement("dispatch with local expert ids")
            scales = None
            if isinstance(x, tuple):
                if len(x) != 2:
                    raise ValueError("x as a tuple is (x, scales)")
                x, scales = x
            raw, dtname, as_torch = _raw(x, "x")
            dtname = dtname or raw.dtype.name
            parts = None
            if scales is not None:
                sraw, sdt, _ = _raw(scales, "scales")
                if raw.ndim != 2 or sraw.ndim != 2 or sraw.shape[0] != raw.shape[0]:
                    raise ValueError(f"x and scales must be [num_tokens, ...] alike, not "
                                     f"{tuple(raw.shape)} and {tuple(sraw.shape)}")
                parts = ((raw.dtype, dtname, raw.shape[1]),
                         (sraw.dtype, sdt or sraw.dtype.name, sraw.shape[1]))
                raw = np.concatenate([np.ascontiguousarray(raw).view(np.uint8),
                                      np.ascontiguousarray(sraw).view(np.uint8)], axis=1)
            rx, ri, rw, h = _Buffer.dispatch_async(self, raw, ids, w, layer).wait()
        except (ValueError, TypeError) as e:
            self._refuse(nb, e)
            raise
        h._src = (ids, w, layer, weighted)
        if self.expert_ids == "local":
            self._to_local(ri, layer, h)
            per = [h.num_recv_tokens_per_expert[g] for g in self._local[layer]]
        else:
            per = list(h.num_recv_tokens_per_expert)
        per = [-(-c // align) * align for c in per]
        n = h.num_recv
        if worst:
            if n > worst:
                msg = (f"rank {self.rank} received {n} rows, more than num_worst_tokens = "
                       f"{worst}")
                self.abort(h, msg, code=_lib.LOCUS_ERANGE)
                raise ValueError(msg)
            pad = lambda a, v: np.concatenate(  # noqa: E731
                [a, np.full((worst - n,) + a.shape[1:], v, a.dtype)])
            rx, ri, rw = pad(rx, 0), pad(ri, -1), pad(rw, 0)
        h._worst = worst
        if handle is not None:  # the handle passed names the new batch from now on
            old = handle.__dict__.get("_c")
            if old is not None:
                self._dead.append(old)  # freed at the next call, as a collected Handle's
            handle.__dict__, h.__dict__ = h.__dict__, {}
            h = handle
        outs = []
        if parts:
            at = 0
            for dt, name, cols in parts:
                nb = cols * np.dtype(dt).itemsize
                outs.append(_wrap(np.ascontiguousarray(rx[:, at:at + nb]).view(dt),
                                  name, as_torch))
                at += nb
            recv_x = tuple(outs)
        else:
            recv_x = _wrap(rx, dtname, as_torch)
        if as_torch:
            torch = _torch()
            ri, rw = torch.from_numpy(ri), torch.from_numpy(rw)
        return recv_x, ri, (rw if weighted else None), per, h, EventOverlap()

    def combine(self, x, handle, topk_weights=None, bias=None, config=None,
                previous_event=None, async_finish=False, allocate_on_comm_stream=False):
        """DeepEP's combine: (combined_x [num_tokens, hidden], combined_topk_weights or
        None, event). x's row i answers recv_x's row i, already weighted as DeepEP
        expects; rows past the received ones (num_worst_tokens padding) are ignored.
        topk_weights [num_recv, num_topk] go back summed per token likewise; bias (one
        array or two) is added to the output."""
        _wait_event(previous_event)
        if not isinstance(handle, Handle):
            raise TypeError(f"handle must be the handle dispatch() returned, not "
                            f"{type(handle).__name__}")
        n = handle.num_recv
        try:
            y, wts = x, None
            if getattr(handle, "_worst", 0) and len(y) > n:
                y = y[:n]
            if topk_weights is not None:
                wts = _arrays.as_numpy(topk_weights, "topk_weights")
                if wts.ndim != 2 or wts.shape[0] < n:
                    raise ValueError(f"topk_weights must be [num_recv, num_topk] with "
                                     f"num_recv = {n}, not {tuple(wts.shape)}")
                wts = wts[:n].astype(np.float32)
        except (ValueError, TypeError) as e:
            if getattr(handle, "_c", None) is not None and handle._owner is self:
                self.abort(handle, f"rank {self.rank}: {e}", code=errno.EINVAL)
            raise
        as_torch = _arrays._is_torch(x)
        if wts is not None:  # the weights ride as extra float32 columns
            yr = _raw(y, "x")[0]
            if as_torch and y.dtype == _torch().bfloat16:
                yr = y.float().numpy()
            y32 = np.concatenate([yr.astype(np.float32, copy=False), wts], axis=1)
            out = _Buffer.combine(self, y32, handle)
            k = wts.shape[1]
            cw, out = out[:, -k:].copy(), out[:, :-k]
            if as_torch:
                torch = _torch()
                out, cw = torch.from_numpy(np.ascontiguousarray(out)).to(x.dtype), \
                    torch.from_numpy(cw)
            else:
                out = out.astype(_raw(y, "x")[0].dtype)
        else:
            out, cw = _Buffer.combine(self, y, handle), None
        if bias is not None:
            for b in (bias if isinstance(bias, tuple) else (bias,)):
                if b is None:
                    continue
                if tuple(b.shape) != tuple(out.shape):
                    raise ValueError(f"bias must be {tuple(out.shape)}, not "
                                     f"{tuple(b.shape)}")
                out = out + b
        return out, cw, EventOverlap()

    # ---- low-latency mode ------------------------------------------------------------

    def _set_bound(self, n):
        if n != self._bound:
            with self.client._lock:
                self._check_open()
                ret = lib.locus_ep_set_max_tokens(self._ep, n)
            if ret < 0:
                raise from_code(ret, "the receive bound cannot change while a dispatch "
                                "runs" if ret == -errno.EBUSY else None,
                                what="num_max_dispatch_tokens_per_rank")
            self._bound = n

    def low_latency_dispatch(self, x, topk_idx, num_max_dispatch_tokens_per_rank, num_experts,
                             cumulative_local_expert_recv_stats=None,
                             dispatch_wait_recv_cost_stats=None, use_fp8=False,
                             round_scale=False, use_ue8m0=False, async_finish=False,
                             return_recv_hook=False, *, topk_weights=None):
        """DeepEP's low-latency dispatch at the current layer: (recv_x [num_local_experts,
        num_max_dispatch_tokens_per_rank x num_ranks, hidden], recv_count
        [num_local_experts] int32, handle, event, hook). Local expert i is
        local_experts()[i]; its rows are recv_x[i, :recv_count[i]], by source rank then
        token. num_max_dispatch_tokens_per_rank is the collective's receive bound (every
        rank passes the same; x may have at most that many rows). With
        return_recv_hook=True (or async_finish=True) the call returns once the rows are
        sent: recv_x fills when hook() (or event.wait()) is called, bounded by the
        timeout. topk_weights= (locus's, optional): the gates go with the rows and
        low_latency_combine sends back one weighted row per token and rank; without
        them, each selected expert's output goes back on its own (num_topk x the
        bytes), weighted at the source as DeepEP does."""
        nb = self._next_of_group()
        try:
            if _flag(use_fp8, "use_fp8"):
                raise ValueError("use_fp8=True: locus moves rows as given and does not quantize; "
                                 "dispatch bfloat16/float rows (use_fp8=False), or quantize "
                                 "first and send uint8 rows with the scales appended through "
                                 "dispatch((x, scales), ...)")
            for name, v in (("round_scale", round_scale), ("use_ue8m0", use_ue8m0),
                            ("async_finish", async_finish), ("return_recv_hook", return_recv_hook)):
                _flag(v, name)
            bound = _arrays.check_uint(num_max_dispatch_tokens_per_rank,
                                       "num_max_dispatch_tokens_per_rank")
            if not 1 <= bound <= 1 << 24:
                raise ValueError(f"num_max_dispatch_tokens_per_rank = {bound}: 1..{1 << 24}")
            pl = self._need_placement("low_latency_dispatch")
            num_experts = _arrays.check_uint(num_experts, "num_experts")
            if num_experts != pl.n_experts:
                raise ValueError(f"num_experts = {num_experts}, the placement has "
                                 f"{pl.n_experts}")
            layer = self._layer
            raw, dtname, as_torch = _raw(x, "x")
            dtname = dtname or raw.dtype.name
            if raw.ndim != 2:
                raise ValueError(f"x must be [num_tokens, hidden], not {tuple(raw.shape)}")
            if raw.shape[0] > bound:
                raise ValueError(f"x has {raw.shape[0]} tokens, more than "
                                 f"num_max_dispatch_tokens_per_rank = {bound}")
            ids = np.array(_raw(topk_idx, "topk_idx")[0], copy=True)
            weighted = topk_weights is not None
            w = np.array(_raw(topk_weights, "topk_weights")[0], dtype=np.float32) if weighted \
                else np.ones(ids.shape, np.float32)
            self._set_bound(bound)
            nle = len(self._local[layer])
            slots = bound * self.num_ranks
            hidden = raw.shape[1]
            recv_x = np.zeros((nle, slots, hidden), raw.dtype)
            count = np.zeros(nle, np.int32)
            lh = LowLatencyHandle(layer, nle, bound, hidden, ids.shape[1] if ids.ndim == 2 else 0,
                                  weighted, ids, w)
            ev = _Buffer.dispatch_async(self, raw, ids, w, layer)
        except (ValueError, TypeError) as e:
            self._refuse(nb, e)
            raise
        stats = cumulative_local_expert_recv_stats

        def finish():
            rx, ri, rw, h = ev.wait()
            lh.handle = h
            self._to_local(ri, layer, h)
            n, k = ri.shape
            r_i, s_i = np.nonzero(ri >= 0)
            le = ri[r_i, s_i]
            key = r_i * max(1, nle) + le
            uk, first, inv = np.unique(key, return_index=True, return_inverse=True)
            e_row, e_le = r_i[first], le[first]
            order = np.lexsort((e_row, e_le))       # by local expert, then received order
            pos = np.empty(len(uk), np.int64)
            cnt = np.bincount(e_le, minlength=nle)
            starts = np.concatenate([[0], np.cumsum(cnt)[:-1]]).astype(np.int64)
            pos[order] = np.arange(len(uk)) - np.repeat(starts, cnt)
            if len(uk) and pos.max() >= slots:
                msg = (f"rank {self.rank}: more than {slots} rows for one local expert")
                self.abort(h, msg, code=_lib.LOCUS_ERANGE)
                raise ValueError(msg)
            recv_x[e_le, pos] = rx[e_row]
            count[:] = cnt
            se = np.full((n, k), -1, np.int64)
            se[r_i, s_i] = inv
            lh.slot_entry, lh.entry_row, lh.entry_local, lh.entry_pos = se, e_row, e_le, pos
            lh.recv_weights = rw
            if stats is not None:
                s = _arrays.as_numpy(stats, "cumulative_local_expert_recv_stats")
                if s.shape != (nle,):
                    raise ValueError(f"cumulative_local_expert_recv_stats must be [{nle}]")
                s += cnt.astype(s.dtype)

        lh._finish = finish
        if not (async_finish or return_recv_hook):
            lh.wait()
        out_x = _wrap(recv_x, dtname, as_torch)
        out_c = _torch().from_numpy(count) if as_torch else count
        if return_recv_hook:
            return out_x, out_c, lh, EventOverlap(), lh.wait
        return out_x, out_c, lh, EventOverlap(lh.wait), _no_hook

    def low_latency_combine(self, x, topk_idx, topk_weights, handle, zero_copy=False,
                            async_finish=False, return_recv_hook=False, out=None,
                            combine_wait_recv_cost_stats=None):
        """DeepEP's low-latency combine: x [num_local_experts, slots, hidden] the experts'
        outputs for recv_x (unweighted), topk_idx / topk_weights this rank's as given to
        low_latency_dispatch. Returns (combined_x [num_tokens, hidden] = per token the
        sum of weight x expert output, event, hook); out= receives it in place. The
        combine has finished when it returns (event and hook are no-ops)."""
        if not isinstance(handle, LowLatencyHandle):
            raise TypeError("handle must be the handle low_latency_dispatch returned")
        handle.wait()  # its rows, if a hook was never called
        h = handle.handle
        if h is None:
            raise ValueError("the low_latency_dispatch of this handle failed: nothing to "
                             "combine")
        try:
            for name, v in (("zero_copy", zero_copy), ("async_finish", async_finish),
                            ("return_recv_hook", return_recv_hook)):
                _flag(v, name)
            as_torch = _arrays._is_torch(x)
            if as_torch:
                torch = _torch()
                if x.device.type != "cpu":
                    raise ValueError(f"x is on device {x.device}: locus reads it with the "
                                     "CPU, pass a CPU tensor (.cpu())")
                xf = x.detach().to(torch.float32).numpy()
            else:
                xn = _arrays.as_numpy(x, "x")
                if xn.dtype.kind != "f":
                    raise TypeError(f"x holds {xn.dtype}: expert outputs are floats")
                xf = xn.astype(np.float32, copy=False)
            want = (handle.num_local_experts, handle.bound * self.num_ranks)
            if xf.ndim != 3 or xf.shape[:2] != want or xf.shape[2] < 1:
                raise ValueError(f"x must be [num_local_experts, slots, hidden] with "
                                 f"{want[0]} local experts and {want[1]} slots, not "
                                 f"{tuple(xf.shape)}")
            ids = _arrays.as_numpy(topk_idx, "topk_idx")
            if ids.shape != handle.src_idx.shape or not np.array_equal(ids, handle.src_idx):
                raise ValueError("topk_idx differs from the one given to "
                                 "low_latency_dispatch")
            gw = _arrays.as_numpy(topk_weights, "topk_weights").astype(np.float32)
            if gw.shape != handle.src_idx.shape:
                raise ValueError(f"topk_weights must be {handle.src_idx.shape}, not "
                                 f"{tuple(gw.shape)}")
            if handle.weighted and not np.array_equal(gw, handle.src_weights):
                raise ValueError("topk_weights differ from those given to "
                                 "low_latency_dispatch (the rows were weighted with those)")
        except (ValueError, TypeError) as e:
            self.abort(h, f"rank {self.rank}: {e}", code=errno.EINVAL)
            raise
        n, k, H = h.num_recv, handle.top_k, xf.shape[2]
        ent = xf[handle.entry_local, handle.entry_pos]       # [entries, H]
        se = handle.slot_entry
        r_i, s_i = np.nonzero(se >= 0)
        if handle.weighted:
            y = np.zeros((n, H), np.float32)
            g = handle.recv_weights[r_i, s_i][:, None] * ent[se[r_i, s_i]]
            np.add.at(y, r_i, g)
            res = _Buffer.combine(self, y, h)
        else:
            y = np.zeros((n, k, H), np.float32)
            y[r_i, s_i] = ent[se[r_i, s_i]]
            wide = _Buffer.combine(self, y.reshape(n, k * H), h)
            wm = np.where(handle.src_idx >= 0, gw, 0).astype(np.float32)
            res = np.einsum("tkh,tk->th", wide.reshape(-1, k, H), wm)
        if as_torch:
            res = _torch().from_numpy(np.ascontiguousarray(res)).to(x.dtype)
        else:
            res = res.astype(xn.dtype, copy=False)
        if out is not None:
            if tuple(out.shape) != tuple(res.shape):
                raise ValueError(f"out must be {tuple(res.shape)}, not {tuple(out.shape)}")
            if as_torch:
                out.copy_(res)
            else:
                out[...] = res
            res = out
        return res, EventOverlap(), _no_hook
