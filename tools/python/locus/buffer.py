# SPDX-License-Identifier: MIT
"""An expert-parallel rank's Buffer, shaped like DeepEP's: dispatch() sends
each token row to the ranks holding its top-k experts (locusd's GRACE
planner picks the copy) and returns what this rank received from every rank;
combine() sends the expert outputs back and sums them per source token.

Both are collectives over the EP group's ranks 0..num_ranks-1: every rank
calls dispatch() (also with 0 tokens) and combine() in the same order. A
rank learns it has everything for a batch when, from every rank, it got
all of that rank's rows messages (each says how many the batch sent it) or
a notification that no row is coming: the DISPATCH completion names the
ranks that were sent rows (desc.dests), and the dispatching rank notifies
the others with a one-row COMBINE whose batch id has bit 63 set. The
requests and rows messages are written and read by the C library
(locus_client_dispatch / _combine / _rows_in); only the bookkeeping is here.

Rows go without an extra copy where they can: dispatch_input() and
combine_input() are arrays over the client's staging area; an x or y that is
such an array is not copied before locusd reads it. recv_x is one copy out
of the inbox (its slots go back to locusd before dispatch returns).

Ranks that fail. locusd plans rows only to the ranks it can reach
(active_ranks()): an expert with a live copy elsewhere goes there, one with
none is masked. Once every rank of the group was live together (the group
formed), a Buffer dispatches with masking on: a masked (token, slot) is sent
nowhere and handle.masked says which, so the serving engine can renormalise
the token's gates or run it again; a rank that is lost is neither waited for
nor sent to, and the pairs it took but never answered are added to
handle.masked by combine(). Before the group formed, a rank not attached yet
is waited for, as the ranks of a group start one by one.
"""
import ctypes
import errno
import struct
import time
from dataclasses import dataclass, field

import numpy as np

from . import _arrays, _lib
from .client import _timeout_s
from ._lib import lib
from .errors import LocusError, LocusTimeout, from_code

_NOTIFY = 1 << 63
_WEIGHTS = 1 << 62        # a COMBINE carrying expert weights (move_weights), not results
_W_ROW = 4096             # bytes of one row of weights
_GRACE = 1
_NAP_S = 20e-6
_SPILL_S = 2e-3           # a wait this long without a delivery copies held rows out
_RETRY_S = 50e-6          # before submitting again a request a full inbox refused
_NOTIFY_ROW = 64
_ROW_DT = np.dtype([("token", "<u4"), ("kmask", "<u4")])

# dtypes a row may hold (numpy name -> itemsize); bfloat16 comes from torch only
_ROW_DTYPES = ("float16", "float32", "float64", "int8", "uint8", "int16", "int32")
_SUM_DTYPES = ("float16", "float32", "float64", "bfloat16")


def _torch():
    import torch
    return torch


@dataclass
class _WeightsMsg:
    """A weights message copied out of the inbox before its move began."""
    batch_id: int
    src_rank: int
    row_bytes: int
    refs: np.ndarray
    rows: np.ndarray


class _Rows:
    """One rows message: views of the inbox (held) or copies (stashed)."""
    __slots__ = ("src", "chunk", "n_chunks", "top_k", "row_bytes", "refs", "experts",
                 "gates", "rows", "slot", "nbytes")


@dataclass
class Handle:
    """What combine() needs of a dispatch: the batch, and for every received
    row its source rank and (token, k-slot mask); src_slices[r] = (start,
    count) of rank r's rows in recv_x."""
    batch: int
    layer: int
    num_tokens: int            # this rank's tokens dispatched
    top_k: int
    rows_sent: int             # rows locusd sent out of this rank's tokens
    dests: int = 0             # bit r: rank r was sent rows of this batch
    masked: np.ndarray = None  # [num_tokens, top_k] bool: sent nowhere or never answered
    lost_ranks: tuple = ()     # ranks lost while they held this batch's rows
    src_slices: dict = field(default_factory=dict)
    refs: np.ndarray = None    # [num_recv] (token, kmask)
    torch: bool = False
    num_recv_tokens_per_expert: list = None  # [E]: rows received for each expert

    @property
    def num_recv(self):
        return 0 if self.refs is None else len(self.refs)

    @property
    def num_masked(self):
        return 0 if self.masked is None else int(self.masked.sum())


def _raw(x, name):
    """(raw numpy array of x's bytes' dtype, dtype name, is torch)."""
    if _arrays._is_torch(x):
        torch = _torch()
        if x.device.type != "cpu":
            raise ValueError(f"{name} is on device {x.device}: locus reads it with the CPU, "
                             "pass a CPU tensor (.cpu())")
        name_dt = str(x.dtype).replace("torch.", "")
        x = x.detach()
        if x.dtype == torch.bfloat16:
            return x.view(torch.int16).numpy(), "bfloat16", True
        return x.numpy(), name_dt, True
    return _arrays.as_numpy(x, name), None, False


def _wrap(raw, dtname, as_torch):
    """raw numpy data back as the caller's kind (bfloat16 bits as a torch bfloat16)."""
    if not as_torch:
        return raw
    torch = _torch()
    t = torch.from_numpy(raw)
    return t.view(torch.bfloat16) if dtname == "bfloat16" else t


def _to_f32(rows, dtname):
    if dtname == "bfloat16":
        return (rows.astype(np.uint32) << 16).view(np.float32)
    return rows.astype(np.float64 if dtname == "float64" else np.float32, copy=False)


class Buffer:
    """Dispatch / combine for the rank attached as client (locus.attach(...,
    rank=R)) in an EP group of num_ranks ranks (1..64, the GRACE table's
    GPUs). num_bytes of the stage are reserved, half for the token rows one
    dispatch sends, half for the expert outputs one combine sends back
    (default: three quarters of the stage; the rest holds the requests).
    timeout (s) bounds every wait (default: the client's)."""

    def __init__(self, client, num_ranks, *, num_bytes=None, timeout=None):
        if client.rank is None:
            raise ValueError("a Buffer needs an expert-parallel rank: attach with rank=R")
        num_ranks = _arrays.check_uint(num_ranks, "num_ranks")
        if not 1 <= num_ranks <= 64:
            raise ValueError(f"num_ranks = {num_ranks}: a Buffer serves EP groups of 1..64 "
                             "ranks")
        if client.rank >= num_ranks:
            raise ValueError(f"this client is rank {client.rank}, outside the group's ranks "
                             f"0..{num_ranks - 1}")
        if getattr(client, "_buffer", None) is not None:
            raise ValueError("this client has a Buffer already (close it first): the two "
                             "would take each other's rows")
        self.client, self.num_ranks, self.rank = client, num_ranks, client.rank
        self.timeout = client.timeout if timeout is None else _timeout_s(timeout)
        if num_bytes is None:
            num_bytes = client.stage_size * 3 // 4
        num_bytes = _arrays.check_uint(num_bytes, "num_bytes", 64)
        half = num_bytes // 2 // 64 * 64
        if half < _NOTIFY_ROW or num_bytes + 4096 > client.stage_size:
            raise ValueError(f"num_bytes = {num_bytes} does not fit the client's "
                             f"{client.stage_size}-byte stage with room for requests "
                             "(raise stage_size in locusd.conf)")
        with client._lock:
            client._live()
            self._x_off = client._stage_alloc(half, 0)
            self._y_off = client._stage_alloc(half, 0)
            self._n_off = client._stage_alloc(_NOTIFY_ROW, 0)
        self.dispatch_bytes = self.combine_bytes = half
        # the whole buffer (stage, then the inbox) as bytes, to view what the library points at
        nbuf = client.stage_size + client.inbox_slots * client.inbox_slot_size
        self._base = client._stage_base
        self._buf = np.ctypeslib.as_array((ctypes.c_uint8 * nbuf).from_address(self._base))
        self._next_batch = 1
        self._want = set()         # (op, batch) whose messages stay in the inbox until read
        self._msgs = {}            # (op, batch) -> [_Rows]
        self._notified = {}        # batch -> set of ranks that said "no rows for you"
        self._out = {}             # (op, id, peer) -> [desc, stage off, bytes]
        self._done = {}            # (op, id, peer) -> completion desc
        self._retry = []           # [(time, key)] requests to submit again
        self._abandoned = set()    # batches whose call failed: nothing submitted again
        self._refused = {}         # batch -> LocusError: a rank refused our rows of it
        self._gone = {}            # batch -> ranks that left before our rows reached them
        self._lost = frozenset()   # ranks the engine cannot reach (ranks_state)
        self._lost_seq = None
        self._formed = False       # every rank of the group was live at once: mask
        self._wmove = None         # move_weights in progress: id -> [buffer, chunks, src]
        self._wstash = []          # weights that came before this rank's move_weights began
        self._slot_bytes = client.inbox_slot_size
        self._inbox_bytes = client.inbox_slots * client.inbox_slot_size
        self._held_bytes = 0       # inbox bytes of the messages held (not copied out)
        self._closed = False
        client._buffer = self

    # ---- arrays over the stage ----------------------------------------------------

    def _stage_view(self, off, shape, dtype, nbytes_max, what):
        torch_dt = None
        if not isinstance(dtype, (np.dtype, type, str)):
            torch_dt = dtype  # a torch dtype
        n = int(np.prod(shape))
        if torch_dt is not None:
            item = _torch().empty((), dtype=torch_dt).element_size()
        else:
            item = np.dtype(dtype).itemsize
        if n * item > nbytes_max:
            raise ValueError(f"{what} of {n * item} bytes is larger than the Buffer's "
                             f"{nbytes_max} (num_bytes / 2)")
        mem = self._buf[off:off + n * item]
        if torch_dt is not None:
            torch = _torch()
            return torch.frombuffer(mem, dtype=torch_dt, count=n).view(*shape)
        return mem.view(np.dtype(dtype)).reshape(shape)

    def dispatch_input(self, num_tokens, hidden, dtype=np.float32):
        """An array [num_tokens, hidden] over the stage (numpy, or torch when dtype is a
        torch dtype): fill it and pass it as dispatch()'s x, and locusd reads the rows
        where they are. Valid until the next dispatch()."""
        self._check_open()
        return self._stage_view(self._x_off, (int(num_tokens), int(hidden)), dtype,
                                self.dispatch_bytes, "dispatch_input")

    def combine_input(self, handle, hidden, dtype=np.float32):
        """An array [handle.num_recv, hidden] over the stage: write the expert outputs
        there and pass it as combine()'s y (no copy). Valid until the next combine()."""
        self._check_open()
        return self._stage_view(self._y_off, (handle.num_recv, int(hidden)), dtype,
                                self.combine_bytes, "combine_input")

    def _is_at(self, raw, off):
        return (raw.flags.c_contiguous and raw.size and
                raw.__array_interface__["data"][0] == self._base + off)

    # ---- who is live ----------------------------------------------------------------

    def _ranks(self):
        """Refresh the lost set when the engine changed it (one small read when not)."""
        info = _lib.ClientRanks()
        if lib.locus_client_ranks(self.client._c, None, 0, ctypes.byref(info)) < 0 or \
                info.seq == self._lost_seq or not info.n_ranks:
            return
        lost, info = self.client.ranks_state()
        self._lost, self._lost_seq = lost, info["seq"]
        if not self._formed and not any(r in lost for r in range(self.num_ranks)):
            self._formed = True

    def active_ranks(self):
        """The ranks of this group locusd can reach now (sorted), as Mooncake's
        active_ranks: rows are planned only to them."""
        with self.client._lock:
            self._check_open()
            self._ranks()
            if self._lost_seq is None:
                return list(range(self.num_ranks))
            return [r for r in range(self.num_ranks) if r not in self._lost]

    def _is_lost(self, r):
        return self._formed and r in self._lost

    # ---- the ring -------------------------------------------------------------------

    def _check_open(self):
        if self._closed:
            raise ValueError("this Buffer is closed")
        self.client._live()

    def _submit(self, key, submit_fn, off, nbytes, deadline):
        """submit_fn() -> (ret, err text): write the request and submit it; retried
        while the submit ring is full. The stage range is freed at completion."""
        while True:
            ret, text = submit_fn()
            if ret == 0:
                self._out[key] = [None, off, nbytes, submit_fn]
                return
            if ret != -_lib.LOCUS_EFULL or time.monotonic() >= deadline:
                if off is not None:
                    self.client._stage_free(off, nbytes)
                if ret == -_lib.LOCUS_EFULL:
                    raise LocusTimeout(errno.ETIMEDOUT, "the submit ring stayed full",
                                       what="dispatch/combine")
                raise from_code(ret, text or None, what="dispatch/combine")
            self._poll()
            time.sleep(_NAP_S)

    def _poll(self):
        """One pump of the client's ring: completions settle requests, rows messages
        are sorted by batch. Returns how many descriptors came."""
        c = self.client
        now = time.monotonic()
        if self._retry:
            due = [k for t, k in self._retry if t <= now]
            self._retry = [(t, k) for t, k in self._retry if t > now]
            for k in due:
                ret, text = self._out[k][3]()
                if ret == -_lib.LOCUS_EFULL:
                    self._retry.append((now, k))
                elif ret < 0:
                    raise from_code(ret, text or None, what="resubmit")
        n = c._pump()
        self._ranks()
        for op in (_lib.OP_DISPATCH, _lib.OP_COMBINE):
            q = c._take(op)
            while q:
                self._completion(q.popleft())
        for op in (_lib.OP_ROWS_IN, _lib.OP_RESULTS_IN):
            q = c._take(op)
            while q:
                self._delivery(q.popleft())
        return n

    def _completion(self, d):
        key = (d.op, d.id, d.peer if d.op == _lib.OP_COMBINE else 0)
        r = self._out.get(key)
        if r is None:
            return
        if d.status == -_lib.LOCUS_EPEERDOWN and key[0] == _lib.OP_COMBINE and \
                self._is_lost(key[2]):
            d.status = 0  # a lost rank needs neither results nor a notification
        if d.status in (-_lib.LOCUS_EFULL, -_lib.LOCUS_EPEERDOWN) and \
                key[1] & ~_NOTIFY not in self._abandoned:
            # the receiver's inbox was full, or a rank is not attached yet (the ranks of a
            # group start one by one): nothing was delivered, the request is still staged;
            # submitted again until the wait's deadline, which then reports the status
            r[0] = d.status
            self._retry.append((time.monotonic() + _RETRY_S * (20 if r[0] ==
                                -_lib.LOCUS_EPEERDOWN else 1), key))
            return
        del self._out[key]
        if r[1] is not None:
            self.client._stage_free(r[1], r[2])
        self._done[key] = _lib.Desc.from_buffer_copy(d)

    def _delivery(self, d):
        m, err = _lib.ClientRows(), _lib.Error()
        ret = lib.locus_client_rows_in(self.client._c, ctypes.byref(d), ctypes.byref(m),
                                       ctypes.byref(err))
        if ret == -_lib.LOCUS_ESTALEPLACEMENT:
            self._refusal(d, m, ret, err.text())
            return
        if ret == -_lib.LOCUS_EPEERDOWN:
            # rank m.src_rank left before our rows of the batch reached it: combine
            # reports those pairs as masked
            self.client._release_slot(m.slot)
            self._gone.setdefault(m.batch_id, set()).add(m.src_rank)
            while len(self._gone) > 64:
                del self._gone[next(iter(self._gone))]
            return
        if ret < 0:
            self.client._release_slot(d.slot)
            raise from_code(ret, err.text() or None, what="rows message")
        key = (m.op, m.batch_id)
        if m.op == _lib.OP_RESULTS_IN and m.batch_id & _WEIGHTS and not m.batch_id & _NOTIFY:
            self._weights_in(m)
            self.client._release_slot(m.slot)
            return
        if m.op == _lib.OP_RESULTS_IN and m.batch_id & _NOTIFY:
            b = m.batch_id & ~_NOTIFY
            if b >= self._next_batch or (_lib.OP_ROWS_IN, b) in self._want:
                self._notified.setdefault(b, set()).add(m.src_rank)
            self.client._release_slot(m.slot)
            return
        if m.op == _lib.OP_ROWS_IN and m.batch_id < self._next_batch and key not in self._want:
            # a batch this rank gave up (its dispatch timed out): nobody will read it
            self.client._release_slot(m.slot)
            return
        if m.rows is None:
            self.client._release_slot(m.slot)
            raise LocusError(errno.EOPNOTSUPP, "rows in a registered region: a Buffer "
                             "dispatches from the stage only", what="rows message")
        r = _Rows()
        r.src, r.chunk, r.n_chunks = m.src_rank, m.chunk, m.n_chunks
        r.top_k, r.row_bytes = m.top_k, m.row_bytes
        n = m.n_rows
        r.refs = self._at(m.refs, n * 8).view(_ROW_DT)
        if m.top_k:
            r.experts = self._at(m.experts, n * m.top_k * 2).view(np.uint16).reshape(n, m.top_k)
            r.gates = self._at(m.gates, n * m.top_k * 4).view(np.float32).reshape(n, m.top_k)
        # an awaited message stays in the inbox until read (no copy) while that leaves
        # half of the inbox free: the other ranks' messages of the batch need room too
        span = -(-d.len // self._slot_bytes) * self._slot_bytes
        held = key in self._want and self._held_bytes + span <= self._inbox_bytes // 2
        if m.in_place and m.op == _lib.OP_ROWS_IN:
            # our own batch, left in our stage: the row of token t at rows + t * row_bytes
            tok = r.refs["token"]
            rows = self._at(m.rows, (int(tok.max()) + 1) * m.row_bytes).reshape(-1, m.row_bytes)
            r.rows = (rows, tok)
        else:
            r.rows = (self._at(m.rows, n * m.row_bytes).reshape(n, m.row_bytes), None)
        r.slot, r.nbytes = m.slot, span
        self._held_bytes += span
        if not held:
            # not awaited now (another rank is ahead of us), or the inbox is half taken
            self._copy_out(r)
        self._msgs.setdefault(key, []).append(r)

    def _refusal(self, d, m, ret, text):
        """Rank m.src_rank refused this rank's rows of batch m.batch_id: they were
        planned under a placement generation it does not hold. The dispatch or
        combine of that batch raises it (never rows: the batch lost them)."""
        msg = lib.locus_client_inbox(self.client._c, ctypes.byref(d))
        gen = _lib.RowsHdr.from_address(msg + ctypes.sizeof(_lib.MsgHdr)).placement_gen
        self.client._release_slot(m.slot)
        b = m.batch_id
        if b in self._abandoned:
            return
        e = from_code(ret, text or f"rank {m.src_rank} refused the rows of batch {b} planned "
                      f"under placement generation {gen}", what=f"dispatch of batch {b}")
        e.batch, e.rank, e.generation = b, m.src_rank, gen
        self._refused.setdefault(b, e)
        while len(self._refused) > 64:  # batches nobody combines any more
            del self._refused[next(iter(self._refused))]

    def _copy_out(self, r):
        """Copy a held message out of the inbox and hand its slot back."""
        r.refs = r.refs.copy()
        if r.top_k:
            r.experts, r.gates = r.experts.copy(), r.gates.copy()
        rows, tok = r.rows
        r.rows = (rows[tok] if tok is not None else rows.copy(), None)
        self.client._release_slot(r.slot)
        self._held_bytes -= r.nbytes
        r.slot = None

    def _spill(self):
        """Nothing arrives while we hold inbox slots: the message another rank waits to
        deliver may need them (a credit cycle). Copy every held message out."""
        for msgs in self._msgs.values():
            for r in msgs:
                if r.slot is not None:
                    self._copy_out(r)

    def _at(self, addr, nbytes):
        off = addr - self._base
        return self._buf[off:off + nbytes]

    def _wait(self, done, deadline, what, batch=None):
        # no spinning: the ranks of a group waiting here may share a core (threads, or
        # processes on one CPU), and the rank that holds it up would be starved
        last = time.monotonic()
        while True:
            if batch in self._refused:
                # some of the batch's rows never reached their rank: no wait ends well
                raise self._refused.pop(batch)
            if done():
                return
            if self._poll() == 0:
                now = time.monotonic()
                if self._held_bytes and now - last > _SPILL_S:
                    self._spill()
                if now >= deadline:
                    down = sorted(k[2] if k[0] == _lib.OP_COMBINE else -1
                                  for k, r in self._out.items()
                                  if r[0] == -_lib.LOCUS_EPEERDOWN)
                    if down:
                        who = "a rank the batch needs" if down[0] < 0 else \
                            "rank " + ", ".join(map(str, down))
                        raise from_code(-_lib.LOCUS_EPEERDOWN, f"{who} did not attach within "
                                        f"{self.timeout} s", what=what)
                    raise LocusTimeout(errno.ETIMEDOUT, f"{what} did not complete within "
                                       f"{self.timeout} s ({self._waiting_on()})", what=what)
                time.sleep(_NAP_S)
            else:
                last = time.monotonic()

    def _waiting_on(self):
        """What a timed-out wait still lacked, for its message: the requests without a
        final completion (and the status that made them go again), what came in."""
        names = {_lib.OP_DISPATCH: "dispatch", _lib.OP_COMBINE: "combine"}
        out = ", ".join(f"{names.get(k[0], k[0])} {k[1] & ~_NOTIFY}"
                        f"{' (notify)' if k[1] & _NOTIFY else ''} to {k[2]}"
                        f"{'' if r[0] is None else f' last {r[0]}'}"
                        for k, r in sorted(self._out.items()))
        got = "; ".join(f"{'rows' if k[0] == _lib.OP_ROWS_IN else 'results'} of batch {k[1]}:"
                        f" {sum(len(r.refs) for r in v)} rows from ranks "
                        f"{sorted({r.src for r in v})}" for k, v in sorted(self._msgs.items()))
        return (f"in flight: {out or 'none'}; queued again: {len(self._retry)}; "
                f"received: {got or 'nothing'}; inbox bytes held {self._held_bytes}")

    def _take_done(self, key, what):
        d = self._done.pop(key)
        if d.status:
            raise from_code(d.status, what=what)
        return d

    def _abandon(self, batch):
        """A call on batch failed: its requests waiting to be submitted again are dropped
        (locusd answered them already: their stage ranges go back now); those in flight
        give theirs back at their completions."""
        self._abandoned.add(batch)
        self._refused.pop(batch, None)
        self._gone.pop(batch, None)
        keep = []
        for t, k in self._retry:
            if k[1] & ~_NOTIFY != batch:
                keep.append((t, k))
                continue
            r = self._out.pop(k, None)
            if r is not None and r[1] is not None:
                self.client._stage_free(r[1], r[2])
        self._retry = keep

    def _release_held(self, key):
        for r in self._msgs.pop(key, []):
            if r.slot is not None:
                self.client._release_slot(r.slot)
                self._held_bytes -= r.nbytes

    # ---- dispatch ---------------------------------------------------------------------

    def _check_dispatch(self, x, topk_idx, topk_weights, layer):
        raw, dtname, as_torch = _raw(x, "x")
        if raw.ndim != 2:
            raise ValueError(f"x must be [num_tokens, hidden], not {raw.ndim}-dimensional "
                             f"{tuple(raw.shape)}")
        dtname = dtname or raw.dtype.name
        if dtname not in _ROW_DTYPES + ("bfloat16",):
            raise TypeError(f"x holds {dtname}: a Buffer moves rows of "
                            f"{', '.join(_ROW_DTYPES)} or bfloat16")
        ids = _arrays.as_numpy(topk_idx, "topk_idx")
        _arrays.check_int_dtype(ids, "topk_idx")
        w = _arrays.as_numpy(topk_weights, "topk_weights")
        if not np.issubdtype(w.dtype, np.floating):
            raise TypeError(f"topk_weights must hold floats (gate weights), not {w.dtype}")
        tokens = raw.shape[0]
        if ids.ndim != 2 or ids.shape[0] != tokens:
            raise ValueError(f"topk_idx must be [num_tokens, num_topk] with num_tokens = "
                             f"{tokens} (x's rows), not {tuple(ids.shape)}")
        if w.shape != ids.shape:
            raise ValueError(f"topk_weights is {tuple(w.shape)}, topk_idx {tuple(ids.shape)}: "
                             "one gate weight per expert choice")
        k = ids.shape[1]
        if not 1 <= k <= _lib.MAX_TOPK:
            raise ValueError(f"num_topk = {k}: locus dispatches 1..{_lib.MAX_TOPK} experts "
                             "per token")
        if raw.shape[1] < 1 or raw.shape[1] * raw.itemsize > _lib.MAX_ROW_BYTES:
            raise ValueError(f"a row of {raw.shape[1] * raw.itemsize} bytes: 1..."
                             f"{_lib.MAX_ROW_BYTES} bytes per token row")
        if tokens * raw.shape[1] * raw.itemsize > self.dispatch_bytes:
            raise ValueError(f"x is {tokens * raw.shape[1] * raw.itemsize} bytes, more than "
                             f"the Buffer's {self.dispatch_bytes} for one dispatch")
        layers, experts = self.client.table_shape(_GRACE)
        layer = _arrays.check_uint(layer, "layer")
        if layer >= layers:
            raise ValueError(f"layer {layer} is out of range: the GRACE table in use has "
                             f"{layers} MoE layers (0..{layers - 1})")
        if tokens:
            lo, hi = int(ids.min()), int(ids.max())
            if lo < 0 or hi >= experts:
                t, j = np.argwhere((ids < 0) | (ids >= experts))[0]
                raise ValueError(f"topk_idx: expert id {int(ids[t, j])} at token {t}, slot "
                                 f"{j} is out of range: the GRACE table in use has {experts} "
                                 f"experts (ids 0..{experts - 1}; locus dispatches every "
                                 "slot, -1 is not a choice)")
            if not np.isfinite(w).all():
                t, j = np.argwhere(~np.isfinite(w))[0]
                raise ValueError(f"topk_weights: the gate at token {t}, slot {j} is not "
                                 "finite")
        return raw, dtname, as_torch, ids, w, layer, experts

    def dispatch(self, x, topk_idx, topk_weights, layer):
        """Send each of this rank's tokens (x [num_tokens, hidden]) to the ranks holding
        its experts (topk_idx [num_tokens, num_topk], global expert ids of the GRACE
        table; topk_weights the gates) at MoE layer `layer`, and return what every rank
        of the group sent this one: (recv_x [num_recv, hidden], recv_topk_idx
        [num_recv, num_topk] int64 with the expert ids this rank serves for the row and
        -1 in the other slots, recv_topk_weights [num_recv, num_topk] float32, 0 where
        the id is -1, handle). Rows are ordered by source rank. numpy in, numpy out;
        CPU torch in, torch out."""
        c = self.client
        with c._lock:
            self._check_open()
            raw, dtname, as_torch, ids, w, layer, experts = \
                self._check_dispatch(x, topk_idx, topk_weights, layer)
            deadline = time.monotonic() + self.timeout
            batch = self._next_batch
            self._next_batch += 1
            tokens, k = ids.shape
            row_bytes = raw.shape[1] * raw.itemsize
            want = (_lib.OP_ROWS_IN, batch)
            self._want.add(want)
            try:
                dests, rows_sent, masked = self._dispatch_send(raw, ids, w, layer, experts,
                                                               batch, tokens, k, row_bytes,
                                                               deadline)
                self._notify(batch, dests, layer, deadline)
                self._wait(lambda: self._all_in(batch), deadline, f"dispatch of batch {batch}",
                           batch)
                h = self._gather(batch, layer, tokens, k, rows_sent, raw, dtname, as_torch,
                                 experts)
                h[3]._owner = self
                h[3].dests = dests
                h[3].masked = masked if masked is not None else np.zeros((tokens, k), bool)
                return h
            except BaseException:
                self._abandon(batch)
                raise
            finally:
                self._want.discard(want)
                self._release_held(want)
                self._notified.pop(batch, None)

    def _dispatch_send(self, raw, ids, w, layer, experts, batch, tokens, k, row_bytes,
                       deadline):
        """Stage and submit the DISPATCH; wait for its completion: (dests mask, rows
        sent, the masked pairs as a [tokens, k] bool array or None)."""
        if not tokens:
            return 0, 0, None
        if not self._is_at(raw, self._x_off):
            self._buf[self._x_off:self._x_off + tokens * row_bytes] = \
                np.ascontiguousarray(raw).reshape(-1).view(np.uint8)
        e16 = np.ascontiguousarray(ids, dtype=np.uint16)
        g32 = np.ascontiguousarray(w, dtype=np.float32)
        req = _lib.ClientDispatchReq(layer=layer, top_k=k, n_tokens=tokens,
                                     row_bytes=row_bytes, n_experts=experts,
                                     rows_off=self._x_off, experts=e16.ctypes.data,
                                     gates=g32.ctypes.data)
        nbytes = 32 + (tokens * k * 2 + 3) // 4 * 4 + tokens * k * 4
        off = self.client._stage_alloc(nbytes, max(0.0, deadline - time.monotonic()))
        key = (_lib.OP_DISPATCH, batch, 0)
        flags = _lib.DESC_F_MASK if self._formed else 0

        def submit():
            err = _lib.Error()
            ret = lib.locus_client_dispatch_ex(self.client._c, off, ctypes.byref(req), batch,
                                               flags, ctypes.byref(err))
            return ret, err.text()
        # e16 / g32 / req live in this frame: a resubmission (inbox full) rewrites them
        self._submit(key, submit, off, nbytes, deadline)
        self._wait(lambda: key in self._done, deadline, f"dispatch of batch {batch}", batch)
        d = self._take_done(key, f"dispatch of batch {batch}")
        masked = None
        if d.blocks:
            # locusd marked the masked pairs in the request it read; nothing was staged
            # since its completion freed the range
            at = lib.locus_client_dispatch_ids(self.client._c, off)
            got = np.ctypeslib.as_array((ctypes.c_uint16 * (tokens * k)).from_address(at))
            masked = (got == _lib.EXPERT_MASKED).reshape(tokens, k)
        return d.dests, d.aux, masked

    def _notify(self, batch, dests, layer, deadline):
        """Tell every rank this batch sent no rows that none are coming."""
        keys = []
        ref = np.zeros(1, dtype=_ROW_DT)
        ref["kmask"] = 1
        for r in range(self.num_ranks):
            if dests >> r & 1 or self._is_lost(r):
                continue
            req = _lib.ClientCombineReq(layer=layer, dst_rank=r, n_rows=1,
                                        row_bytes=_NOTIFY_ROW, rows_off=self._n_off,
                                        refs=ref.ctypes.data)
            off = self.client._stage_alloc(48, max(0.0, deadline - time.monotonic()))
            key = (_lib.OP_COMBINE, _NOTIFY | batch, r)

            def submit(req=req, off=off):
                err = _lib.Error()
                ret = lib.locus_client_combine(self.client._c, off, ctypes.byref(req),
                                               _NOTIFY | batch, ctypes.byref(err))
                return ret, err.text()
            submit.keep = (req, ref)
            self._submit(key, submit, off, 48, deadline)
            keys.append(key)
        self._wait(lambda: all(k in self._done for k in keys), deadline,
                   f"notifications of batch {batch}")
        for key in keys:
            self._take_done(key, f"notification of batch {batch} to rank {key[2]}")

    def _all_in(self, batch):
        """Every rank of the group sent its rows messages for batch, or said none come."""
        said = self._notified.get(batch, ())
        got = {}
        for r in self._msgs.get((_lib.OP_ROWS_IN, batch), ()):
            n, need = got.get(r.src, (0, r.n_chunks))
            got[r.src] = (n + 1, need)
        for s in range(self.num_ranks):
            if s in said or self._is_lost(s):
                continue
            n, need = got.get(s, (0, 1))
            if n < need:
                return False
        return True

    def _gather(self, batch, layer, tokens, k, rows_sent, raw, dtname, as_torch, experts):
        msgs = sorted(self._msgs.get((_lib.OP_ROWS_IN, batch), ()),
                      key=lambda r: (r.src, r.chunk))
        n = sum(len(r.refs) for r in msgs)
        if msgs:
            k = msgs[0].top_k
        if any(r.top_k != k for r in msgs):
            raise LocusError(errno.EPROTO, f"batch {batch}: the ranks dispatched different "
                             "num_topk", what="dispatch")
        hidden = raw.shape[1]
        if msgs and msgs[0].row_bytes != hidden * raw.itemsize:
            raise LocusError(errno.EPROTO, f"batch {batch}: rank {msgs[0].src} sent rows of "
                             f"{msgs[0].row_bytes} bytes, ours are {hidden * raw.itemsize}",
                             what="dispatch")
        recv = np.empty((n, hidden), dtype=raw.dtype)
        recv_bytes = recv.view(np.uint8).reshape(n, hidden * raw.itemsize)
        ex = np.empty((n, k), dtype=np.uint16)
        gates = np.empty((n, k), dtype=np.float32)
        refs = np.empty(n, dtype=_ROW_DT)
        h = Handle(batch, layer, tokens, k, rows_sent, torch=as_torch)
        at = 0
        for r in msgs:
            m = len(r.refs)
            rows, by_token = r.rows
            if by_token is not None:
                np.take(rows, by_token, axis=0, out=recv_bytes[at:at + m])
            else:
                recv_bytes[at:at + m] = rows
            ex[at:at + m] = r.experts
            gates[at:at + m] = r.gates
            refs[at:at + m] = r.refs
            s0, c0 = h.src_slices.get(r.src, (at, 0))
            h.src_slices[r.src] = (s0, c0 + m)
            at += m
        # a row's slots this rank serves (its k-slot mask) keep their id and gate
        mask = ((refs["kmask"][:, None] >> np.arange(k, dtype=np.uint32)) & 1).astype(bool)
        idx = np.where(mask, ex, -1).astype(np.int64, copy=False)
        wts = np.where(mask, gates, np.float32(0))
        h.refs = refs
        # what DeepEP returns as num_recv_tokens_per_expert_list
        h.num_recv_tokens_per_expert = np.bincount(idx[idx >= 0], minlength=experts).tolist()
        if as_torch:
            torch = _torch()
            return (_wrap(recv, dtname, True), torch.from_numpy(idx), torch.from_numpy(wts), h)
        return recv, idx, wts, h

    # ---- combine ----------------------------------------------------------------------

    def combine(self, y, handle):
        """Send the expert outputs y [handle.num_recv, hidden] (row i answers recv_x's
        row i, already weighted by its recv_topk_weights as DeepEP's combine expects)
        back to their source ranks, and return this rank's [num_tokens, hidden]: for
        each of its tokens the sum of the rows every rank returned for it, i.e. the
        gate-weighted sum of its experts' outputs. Float dtypes (float16/32/64,
        bfloat16); the sum is taken in float32 (float64 for float64)."""
        c = self.client
        if not isinstance(handle, Handle):
            raise TypeError(f"handle must be the Handle dispatch() returned, not "
                            f"{type(handle).__name__}")
        with c._lock:
            self._check_open()
            raw, dtname, as_torch = _raw(y, "y")
            dtname = dtname or raw.dtype.name
            if dtname not in _SUM_DTYPES:
                raise TypeError(f"y holds {dtname}: combine sums float16, float32, float64 "
                                "or bfloat16 rows")
            if raw.ndim != 2 or raw.shape[0] != handle.num_recv or raw.shape[1] < 1:
                raise ValueError(f"y must be [num_recv, hidden] with num_recv = "
                                 f"{handle.num_recv} (recv_x's rows), not {tuple(raw.shape)}")
            row_bytes = raw.shape[1] * raw.itemsize
            if handle.num_recv * row_bytes > self.combine_bytes:
                raise ValueError(f"y is {handle.num_recv * row_bytes} bytes, more than the "
                                 f"Buffer's {self.combine_bytes} for one combine")
            if row_bytes > _lib.MAX_ROW_BYTES:
                raise ValueError(f"a row of {row_bytes} bytes: at most {_lib.MAX_ROW_BYTES}")
            if getattr(handle, "_owner", None) is not self:
                raise ValueError("handle comes from another Buffer's dispatch (or was "
                                 "made by hand): combine answers this Buffer's batches")
            if getattr(handle, "_combined", False):
                raise ValueError(f"batch {handle.batch} was combined already")
            deadline = time.monotonic() + self.timeout
            want = (_lib.OP_RESULTS_IN, handle.batch)
            self._want.add(want)
            try:
                if handle.num_recv and not self._is_at(raw, self._y_off):
                    self._buf[self._y_off:self._y_off + handle.num_recv * row_bytes] = \
                        np.ascontiguousarray(raw).reshape(-1).view(np.uint8)
                keys = self._combine_send(handle, row_bytes, deadline)
                self._wait(lambda: all(k in self._done for k in keys) and
                           self._results_in(handle), deadline,
                           f"combine of batch {handle.batch}", handle.batch)
                for key in keys:
                    self._take_done(key, f"combine of batch {handle.batch} to rank {key[2]}")
                out = self._sum(handle, raw, dtname)
                self._unanswered(handle)
                handle._combined = True
                return _wrap(out, dtname, as_torch)
            except BaseException:
                self._abandon(handle.batch)
                raise
            finally:
                self._want.discard(want)
                self._release_held(want)

    def _combine_send(self, handle, row_bytes, deadline):
        keys = []
        for src, (start, count) in sorted(handle.src_slices.items()):
            if self._is_lost(src):
                continue  # its token's results have nobody to go to
            refs = np.ascontiguousarray(handle.refs[start:start + count])
            nbytes = 40 + 8 * count
            rows_off = self._y_off + start * row_bytes
            if rows_off % 64:
                # locusd takes rows at 64-byte aligned offsets: a row size that is not a
                # multiple of 64 bytes costs this source's rows a copy after the request
                nbytes = (nbytes + 63) // 64 * 64
                moved = nbytes
                nbytes += count * row_bytes
            off = self.client._stage_alloc(nbytes, max(0.0, deadline - time.monotonic()))
            if rows_off % 64:
                self._buf[off + moved:off + nbytes] = \
                    self._buf[rows_off:rows_off + count * row_bytes]
                rows_off = off + moved
            req = _lib.ClientCombineReq(layer=handle.layer, dst_rank=src, n_rows=count,
                                        row_bytes=row_bytes, rows_off=rows_off,
                                        refs=refs.ctypes.data)
            key = (_lib.OP_COMBINE, handle.batch, src)

            def submit(req=req, off=off):
                err = _lib.Error()
                ret = lib.locus_client_combine(self.client._c, off, ctypes.byref(req),
                                               handle.batch, ctypes.byref(err))
                return ret, err.text()
            submit.keep = (req, refs)
            self._submit(key, submit, off, nbytes, deadline)
            keys.append(key)
        return keys

    def _results_in(self, handle):
        msgs = self._msgs.get((_lib.OP_RESULTS_IN, handle.batch), ())
        if sum(len(r.refs) for r in msgs) >= handle.rows_sent:
            return True
        gone = self._gone.get(handle.batch, set())
        down = [r for r in range(self.num_ranks)
                if handle.dests >> r & 1 and (self._is_lost(r) or r in gone)]
        if not down:
            return False
        # a rank that holds our rows was lost: every other rank that had some answered
        # all of them (each results message says how many that rank sends)
        got = {}
        for r in msgs:
            n, need = got.get(r.src, (0, r.n_chunks))
            got[r.src] = (n + 1, need)
        for r in range(self.num_ranks):
            if handle.dests >> r & 1 and r not in down:
                n, need = got.get(r, (0, 1))
                if n < need:
                    return False
        return True

    def _unanswered(self, handle):
        """Pairs sent to a rank that was lost before it answered: added to
        handle.masked, the ranks to handle.lost_ranks."""
        msgs = self._msgs.get((_lib.OP_RESULTS_IN, handle.batch), ())
        if sum(len(r.refs) for r in msgs) >= handle.rows_sent:
            return
        k = handle.top_k
        answered = np.zeros(max(handle.num_tokens, 1), dtype=np.uint32)
        for r in msgs:
            np.bitwise_or.at(answered, r.refs["token"], r.refs["kmask"])
        bits = ((answered[:handle.num_tokens, None] >> np.arange(k, dtype=np.uint32)) & 1)
        missing = ~bits.astype(bool) & ~handle.masked
        handle.masked = handle.masked | missing
        gone = self._gone.pop(handle.batch, set())
        handle.lost_ranks = tuple(r for r in range(self.num_ranks)
                                  if handle.dests >> r & 1 and (self._is_lost(r) or r in gone))

    def _sum(self, handle, raw, dtname):
        hidden = raw.shape[1]
        acc = np.zeros((handle.num_tokens, hidden),
                       dtype=np.float64 if dtname == "float64" else np.float32)
        rdt = np.uint16 if dtname == "bfloat16" else raw.dtype
        for r in self._msgs.get((_lib.OP_RESULTS_IN, handle.batch), ()):
            rows = r.rows[0]
            if r.row_bytes != hidden * raw.itemsize or \
                    int(r.refs["token"].max(initial=0)) >= max(handle.num_tokens, 1):
                raise LocusError(errno.EPROTO, f"batch {handle.batch}: rank {r.src} returned "
                                 f"rows of {r.row_bytes} bytes or tokens past ours",
                                 what="combine")
            vals = rows.view(rdt).reshape(len(r.refs), hidden)
            acc[r.refs["token"]] += _to_f32(vals, dtname)
        if dtname == "bfloat16":
            bits = acc.astype(np.float32).view(np.uint32)
            # round to nearest even on the 16 bits kept
            bits = (bits + 0x7fff + ((bits >> 16) & 1)) >> 16
            return bits.astype(np.uint16).view(np.int16)
        return acc.astype(raw.dtype, copy=False)

    # ---- expert weights moved between ranks --------------------------------------------

    def move_weights(self, new, old, read, write, expert_bytes, timeout=None):
        """The weights of every expert this rank gains going from placement old to
        placement new (sealed GRACE tables as bytes, or cluster generations), each from
        the nearest live rank of the group that holds it (one of the gaining rank's node
        first: locus_placement_fetches), over the same paths and rails as rows. Every
        rank of the group calls it for the same change: each sends what it is the
        source of, read(layer, expert) -> expert_bytes bytes, and takes what it gains,
        write(layer, expert, data); data is None for an expert no live rank holds:
        load it from storage. Returns counts: sent, received (from this node, from
        another), from_storage, and bytes sent and received."""
        c = self.client
        expert_bytes = _arrays.check_uint(expert_bytes, "expert_bytes", 40)
        if not expert_bytes:
            raise ValueError("expert_bytes = 0: an expert has weights")
        with c._lock:
            self._check_open()
            self._ranks()
            # who can send now: a rank locusd cannot reach holds nothing for this move
            lost = set(self._lost)
            if isinstance(new, int):
                new = c.placement_table(new)
            if isinstance(old, int):
                old = c.placement_table(old)
            fetches = [f for f in c.placement_fetches(new, old, lost)
                       if f[2] < self.num_ranks]
            # the table's GPUs per node (its dims follow the 64-byte table header)
            gpn = max(1, struct.unpack_from("<4I", new, 64)[3]) if len(new) >= 80 else 1
            deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
            ch = min(expert_bytes, _W_ROW)
            n_ch = -(-expert_bytes // ch)
            st = dict(sent=0, received_here=0, received_other=0, from_storage=0,
                      bytes_sent=0, bytes_received=0)
            self._wmove = {}
            try:
                mine = [f for f in fetches if f[2] == self.rank]
                for layer, e, _, src, _ in mine:
                    if src is None:
                        write(layer, e, None)
                        st["from_storage"] += 1
                    else:
                        self._wmove[layer << 16 | e] = [None, 0, src, n_ch, ch]
                # what the holders sent before this rank got here
                stash, self._wstash = self._wstash, []
                for m in stash:
                    self._weights_in(m)
                for layer, e, dst, src, _ in fetches:
                    if src == self.rank and dst not in self._lost:
                        self._send_expert(layer, e, dst, read(layer, e), expert_bytes, ch,
                                          n_ch, deadline)
                        st["sent"] += 1
                        st["bytes_sent"] += expert_bytes
                want = [k for k, v in self._wmove.items()]
                self._wait(lambda: all(self._wmove[k][1] >= n_ch or
                                       self._wmove[k][2] in self._lost for k in want),
                           deadline, "the weights this rank gains")
                for k in want:
                    buf, got, src, _, _ = self._wmove[k]
                    if got < n_ch:  # its holder was lost meanwhile: from storage
                        write(k >> 16, k & 0xffff, None)
                        st["from_storage"] += 1
                        continue
                    write(k >> 16, k & 0xffff, buf[:expert_bytes])
                    st["received_here" if src // gpn == self.rank // gpn
                       else "received_other"] += 1
                    st["bytes_received"] += expert_bytes
                return st
            finally:
                self._wmove = None

    def _send_expert(self, layer, e, dst, data, expert_bytes, ch, n_ch, deadline):
        """One expert's weights to rank dst: COMBINEs of rows of ch bytes, row j the
        j-th chunk (ref token j, kmask the chunk count), as many rows a piece as the
        combine half of the stage holds; each piece's completion before the next."""
        raw = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)
        if raw.size != expert_bytes:
            raise ValueError(f"read({layer}, {e}) gave {raw.size} bytes, expert_bytes is "
                             f"{expert_bytes}")
        per = max(1, min(n_ch, self.combine_bytes // ch, 1 << 16))
        for piece, c0 in enumerate(range(0, n_ch, per)):
            rows = min(per, n_ch - c0)
            lo, hi = c0 * ch, min(expert_bytes, (c0 + rows) * ch)
            self._buf[self._y_off:self._y_off + rows * ch] = 0
            self._buf[self._y_off:self._y_off + hi - lo] = raw[lo:hi]
            refs = np.empty(rows, dtype=_ROW_DT)
            refs["token"] = np.arange(c0, c0 + rows, dtype=np.uint32)
            refs["kmask"] = n_ch
            req = _lib.ClientCombineReq(layer=layer, dst_rank=dst, n_rows=rows, row_bytes=ch,
                                        rows_off=self._y_off, refs=refs.ctypes.data)
            bid = _WEIGHTS | piece << 32 | layer << 16 | e
            nbytes = 40 + 8 * rows
            off = self.client._stage_alloc(nbytes, max(0.0, deadline - time.monotonic()))
            key = (_lib.OP_COMBINE, bid, dst)

            def submit(req=req, off=off, bid=bid):
                err = _lib.Error()
                ret = lib.locus_client_combine(self.client._c, off, ctypes.byref(req), bid,
                                               ctypes.byref(err))
                return ret, err.text()
            submit.keep = (req, refs)
            self._submit(key, submit, off, nbytes, deadline)
            self._wait(lambda: key in self._done, deadline, f"weights of expert ({layer}, "
                       f"{e}) to rank {dst}")
            self._take_done(key, f"weights of expert ({layer}, {e}) to rank {dst}")

    def _weights_in(self, m):
        """Rows of an expert's weights: into its buffer, counted; kept for later (a
        copy, at most 4096 messages) when this rank's move has not begun; dropped when
        they come from another rank than the planned holder."""
        if isinstance(m, _WeightsMsg):
            refs, rows = m.refs, m.rows
        else:
            if m.row_bytes == 0:
                return
            n = m.n_rows
            refs = self._at(m.refs, n * 8).view(_ROW_DT)
            rows = self._at(m.rows, n * m.row_bytes).reshape(n, m.row_bytes)
            if self._wmove is None:
                if len(self._wstash) < 4096:
                    self._wstash.append(_WeightsMsg(m.batch_id, m.src_rank, m.row_bytes,
                                                    refs.copy(), rows.copy()))
                return
        k = m.batch_id & 0xffffffff
        w = self._wmove.get(k)
        if w is None or w[2] != m.src_rank or m.row_bytes != w[4]:
            return
        n = len(refs)
        if w[0] is None:
            w[0] = np.zeros(w[3] * w[4], dtype=np.uint8)
        for j in range(n):
            t = int(refs["token"][j])
            if t < w[3]:
                w[0][t * w[4]:(t + 1) * w[4]] = rows[j]
                w[1] += 1

    # ---- lifetime ---------------------------------------------------------------------

    # ---- placement changes: the rank's part (Client.placement and the rest) ---------

    def placement(self):
        """The rank's placement state (Client.placement)."""
        return self.client.placement()

    def placement_moves(self, generation, since=None):
        """(gains, losses) of (layer, expert) going to generation (Client.placement_moves)."""
        return self.client.placement_moves(generation, since)

    def join_placements(self):
        """The rank takes part in placement changes (Client.join_placements)."""
        self.client.join_placements()

    def ack_placement(self, generation):
        """The rank holds generation's experts (Client.ack_placement)."""
        self.client.ack_placement(generation)

    def release_placement(self, floor):
        """The rank freed what only generations below floor used (Client.release_placement)."""
        self.client.release_placement(floor)

    def close(self):
        """Give the Buffer's stage ranges back to the client. Idempotent."""
        with self.client._lock:
            if self._closed:
                return
            self._closed = True
            self.client._buffer = None
            for key in list(self._msgs):
                self._release_held(key)
            if not self.client.closed:
                for off, n in ((self._x_off, self.dispatch_bytes),
                               (self._y_off, self.combine_bytes), (self._n_off, _NOTIFY_ROW)):
                    self.client._stage_free(off, n)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
