# SPDX-License-Identifier: MIT
"""An expert-parallel rank's Buffer, shaped like DeepEP's: dispatch() sends
each token row to the ranks holding its top-k experts (locusd's GRACE
planner picks the copy) and returns what this rank received from every rank;
combine() sends the expert outputs back and sums them per source token.

Both are collectives over the EP group's ranks 0..num_ranks-1: every rank
calls dispatch() (also with 0 tokens) and combine() in the same order. The
collective is liblocus's (locus_ep.h): the requests, the control rows
between ranks, the gathering and ordering of what came in, the waits, the
masking of lost ranks and the sums are C, called once per dispatch or
combine with the GIL released; this class checks the arguments, makes the
arrays and keeps what DeepEP's callers expect.

Rows go without an extra copy where they can: dispatch_input() and
combine_input() are arrays over the client's staging area; an x or y that is
such an array is not copied before locusd reads it. recv_x is one copy out
of the inbox (its slots go back to locusd before dispatch returns).

A batch fails on every rank at once: a rank whose part fails (its combine
input does not fit, a refusal, a time-out) tells every other rank, which
raises BatchAborted for the same batch within milliseconds instead of
waiting out its own timeout.

Ranks that fail. locusd plans rows only to the ranks it can reach
(active_ranks()): an expert with a live copy elsewhere goes there, one with
none is masked. Once every rank of the group was live together (the group
formed), a Buffer dispatches with masking on: a masked (token, slot) is sent
nowhere and handle.masked says which, so the serving engine can renormalise
the token's gates or run it again; a rank that is lost is neither waited for
nor sent to, and the pairs it took but never answered are added to
handle.masked by combine(). Before the group formed, a rank not attached yet
is waited for, as the ranks of a group start one by one.

"No selection": a topk_idx slot of -1 selects no expert (DeepEP's masked and
padded slots); its recv_topk_idx reads -1 at the receiver, and a token with
no slot selected is still summed (to zero).
"""
import ctypes
import errno
import struct
import sys
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from . import _arrays, _lib
from ._arrays import addr
from .client import _timeout_s
from ._lib import lib
from .errors import LocusError, LocusTimeout, from_code

_WEIGHTS = 1 << 62        # a COMBINE carrying expert weights (move_weights), not results
_W_ROW = 4096             # bytes of one row of weights
_GRACE = 1
_NAP_S = 20e-6
_RETRY_S = 50e-6          # before submitting again a request a full inbox refused
_REQ_MIN = 64 * 1024      # stage bytes for the collective's requests and control rows
_ROW_DT = np.dtype([("token", "<u4"), ("kmask", "<u4")])

# dtypes a row may hold (numpy name -> itemsize); bfloat16 comes from torch only
_ROW_DTYPES = ("float16", "float32", "float64", "int8", "uint8", "int16", "int32")
_SUM_DTYPES = {"float16": _lib.EP_F16, "float32": _lib.EP_F32, "float64": _lib.EP_F64,
               "bfloat16": _lib.EP_BF16}
_ROW_NP = {np.dtype(n): n for n in _ROW_DTYPES}  # numpy row dtypes by dtype: no name lookups
_I64, _F32 = np.dtype(np.int64), np.dtype(np.float32)
_POOL_MAX = 4             # recv_x buffers a Buffer keeps for reuse


def _torch():
    import torch
    return torch


class BatchAborted(LocusError):
    """A batch failed on another rank of the group (or here, at its combine's start) and
    every rank failed it: .batch, .rank (whose failure it was), .code its code."""


@dataclass
class _WeightsMsg:
    """A weights message copied out of the inbox before its move began."""
    batch_id: int
    src_rank: int
    row_bytes: int
    refs: np.ndarray
    rows: np.ndarray


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

    def __del__(self):
        # the C handle goes back at the owner's next call (never from the collector's
        # thread while another holds the group)
        c = getattr(self, "_c", None)
        owner = getattr(self, "_owner", None)
        if c is None or owner is None:
            return
        if owner._closed:
            lib.locus_ep_handle_free(c)  # the group is gone: nothing else holds it
        else:
            owner._dead.append(c)


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


_ptr = addr


class DispatchEvent:
    """A dispatch under way (Buffer.dispatch_async): done() polls the ring once and
    says whether every rank's rows are in (or the batch failed); wait() waits for
    that, bounded by the Buffer's timeout, and returns dispatch()'s tuple (or raises
    the batch's failure)."""

    def __init__(self, buf, batch, raw, dtname, as_torch, layer, tokens, k, experts):
        self.buffer, self.batch, self.raw, self.dtname = buf, batch, raw, dtname
        self.torch, self.layer, self.tokens, self.k, self.experts = \
            as_torch, layer, tokens, k, experts
        self._ret = 0
        self._result = None

    def done(self):
        b = self.buffer
        if self._ret or self._result is not None:
            return True
        with b.client._lock:
            self._ret = lib.locus_ep_dispatch_poll(b._ep, b._recv_p, b._err_p)
        return self._ret != 0

    def wait(self):
        b = self.buffer
        if self._result is not None:
            return self._result
        with b.client._lock:
            if b._pending is not self:
                raise ValueError(f"batch {self.batch}: its Buffer was closed or it was "
                                 "waited for already")
            try:
                if self._ret == 0:
                    self._ret = lib.locus_ep_dispatch_wait(b._ep, b._recv_p, b._err_p)
                if b._others():
                    b._drain()
                if self._ret < 0:
                    raise b._failure(self._ret, b._err, f"dispatch of batch {self.batch}")
                self._result = b._collect(self)
                return self._result
            finally:
                b._pending = None
                self.raw = None

    current_stream_wait = wait


class Buffer:
    """Dispatch / combine for the rank attached as client (locus.attach(...,
    rank=R)) in an EP group of num_ranks ranks (1..64, the GRACE table's
    GPUs). num_bytes of the stage are reserved, half for the token rows one
    dispatch sends, half for the expert outputs one combine sends back
    (default: three quarters of the stage; of the rest, most holds the
    collective's requests). timeout (s) bounds every collective (default:
    the client's). max_tokens bounds the tokens any rank dispatches per batch
    (the receive side's bound, DeepEP's num_max_dispatch_tokens_per_rank;
    default: none beyond the stage)."""

    def __init__(self, client, num_ranks, *, num_bytes=None, timeout=None, max_tokens=None):
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
        max_tokens = 0 if max_tokens is None else _arrays.check_uint(max_tokens, "max_tokens")
        half = num_bytes // 2 // 64 * 64
        req = max(_REQ_MIN, (client.stage_size - num_bytes) * 3 // 4 // 64 * 64)
        if half < 64 or num_bytes + req + 4096 > client.stage_size:
            raise ValueError(f"num_bytes = {num_bytes} does not fit the client's "
                             f"{client.stage_size}-byte stage with room for requests "
                             "(raise stage_size in locusd.conf)")
        with client._lock:
            client._live()
            self._x_off = client._stage_alloc(half, 0)
            self._y_off = client._stage_alloc(half, 0)
            self._req_off = client._stage_alloc(req, 0)
        self._stage_bytes = 2 * half + req
        self.dispatch_bytes = self.combine_bytes = half
        p = _lib.EpParams(rank=self.rank, n_ranks=num_ranks, x_off=self._x_off, x_len=half,
                          y_off=self._y_off, y_len=half, req_off=self._req_off, req_len=req,
                          max_tokens=max_tokens, timeout_ms=self._ms(self.timeout))
        ep, err = ctypes.c_void_p(), _lib.Error()
        ret = lib.locus_ep_create(client._c, ctypes.byref(p), ctypes.byref(ep),
                                  ctypes.byref(err))
        if ret < 0:
            with client._lock:
                for off, n in ((self._x_off, half), (self._y_off, half), (self._req_off, req)):
                    client._stage_free(off, n)
            raise from_code(ret, err.text() or None, what="Buffer")
        self._ep = ep.value
        # the whole buffer (stage, then the inbox) as bytes, to view what the library points at
        nbuf = client.stage_size + client.inbox_slots * client.inbox_slot_size
        self._base = client._stage_base
        self._buf = np.ctypeslib.as_array((ctypes.c_uint8 * nbuf).from_address(self._base))
        self._dead = deque()       # C handles of Handles collected: freed at the next call
        self._table_gen, self._shape = None, None
        self._pending = None       # the DispatchEvent not waited for
        self._pool = []            # recv_x buffers: reused once every view of one is dropped
        self._next_batch = 1       # the id the group's next dispatch takes
        # the structures each call hands the library, made once
        self._dargs, self._recv, self._err = _lib.EpDispatchArgs(), _lib.EpRecv(), _lib.Error()
        self._rout, self._st = _lib.EpRecvOut(), _lib.EpStatus()
        self._src_count = (ctypes.c_uint32 * num_ranks)()
        self._rout.src_count = ctypes.addressof(self._src_count)
        self._dargs_p, self._recv_p = ctypes.byref(self._dargs), ctypes.byref(self._recv)
        self._err_p, self._rout_p = ctypes.byref(self._err), ctypes.byref(self._rout)
        self._st_p = ctypes.byref(self._st)
        self._descs = (_lib.Desc * 64)()
        self._lost = frozenset()   # move_weights: the ranks the engine cannot reach
        self._out = {}             # move_weights: (op, id, peer) -> [desc, off, bytes, submit]
        self._done = {}            # move_weights: (op, id, peer) -> completion desc
        self._retry = []
        self._wmove = None         # move_weights in progress: id -> [buffer, chunks, src]
        self._wstash = []          # weights that came before this rank's move_weights began
        self._closed = False
        client._buffer = self

    @staticmethod
    def _ms(t):
        return max(1, min(int(t * 1000 + 0.5), 0xffffffff))

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

    # ---- the group ------------------------------------------------------------------

    def active_ranks(self):
        """The ranks of this group locusd can reach now (sorted), as Mooncake's
        active_ranks: rows are planned only to them."""
        with self.client._lock:
            self._check_open()
            live = lib.locus_ep_active(self._ep)
            return [r for r in range(self.num_ranks) if live >> r & 1]

    def _check_open(self):
        if self._closed:
            raise ValueError("this Buffer is closed")
        self.client._live()

    def _reap(self):
        """Free the C handles of Handles collected since the last call."""
        while self._dead:
            lib.locus_ep_handle_free(self._dead.popleft())

    def _drain(self):
        """Descriptors the collective polled that are not its own: to the client's queues."""
        while True:
            n = lib.locus_ep_others(self._ep, self._descs, len(self._descs))
            for i in range(n):
                self.client._sort(_lib.Desc.from_buffer_copy(self._descs[i]))
            if n < len(self._descs):
                return

    def _status(self):
        st = _lib.EpStatus()
        lib.locus_ep_status(self._ep, ctypes.byref(st))
        return st

    def _failure(self, ret, err, what):
        """The exception for a collective's failure (ret < 0): BatchAborted when another
        rank's failure made it, else the code's."""
        st = self._status()
        text = err.text() or None
        if ret == -errno.ENOTCONN:
            self.client._gone = from_code(ret, text, what=f"instance {self.client.instance}")
        if st.fail_code == ret and st.fail_rank != self.rank:
            e = BatchAborted(ret, text, what=what)
            e.batch, e.rank = st.fail_batch, st.fail_rank
            return e
        e = from_code(ret, text, what=what)
        e.batch, e.rank = st.fail_batch, self.rank
        return e

    def abort(self, handle, reason="aborted by the serving engine", code=errno.ECANCELED):
        """Fail handle's batch here and on every other rank of the group (they raise
        BatchAborted): for a rank that cannot run its experts on what it received."""
        with self.client._lock:
            self._check_open()
            self._abort(handle.batch, -abs(code), reason)

    def _abort(self, batch, code, reason):
        lib.locus_ep_abort(self._ep, batch, code, reason.encode("utf-8", "replace")[:159])

    # ---- dispatch ---------------------------------------------------------------------

    def _table(self):
        """(layers, experts) of the GRACE table in use, read again when its generation
        moves (NoTableError when none is)."""
        gen = self.client._counters.value("table_generation", _GRACE)
        if gen != self._table_gen or not gen:
            self._shape = self.client.table_shape(_GRACE)
            self._table_gen = gen
        return self._shape

    def _check_dispatch(self, x, topk_idx, topk_weights, layer):
        """Shapes and kinds; the ids' range and the gates' finiteness are the C
        library's checks (locus_ep_dispatch_begin), in the same words."""
        if type(x) is np.ndarray and type(topk_idx) is np.ndarray and \
                type(topk_weights) is np.ndarray and type(layer) is int:
            # what a serving engine passes every call, checked without a name looked up
            ok = self._check_fast(x, topk_idx, topk_weights, layer)
            if ok is not None:
                return ok
        raw, dtname, as_torch = _raw(x, "x")
        if raw.ndim != 2:
            raise ValueError(f"x must be [num_tokens, hidden], not {raw.ndim}-dimensional "
                             f"{tuple(raw.shape)}")
        dtname = dtname or raw.dtype.name
        if dtname not in _ROW_DTYPES and dtname != "bfloat16":
            raise TypeError(f"x holds {dtname}: a Buffer moves rows of "
                            f"{', '.join(_ROW_DTYPES)} or bfloat16")
        ids = topk_idx if type(topk_idx) is np.ndarray else _arrays.as_numpy(topk_idx,
                                                                              "topk_idx")
        if ids.dtype != np.int64:
            _arrays.check_int_dtype(ids, "topk_idx")
        w = topk_weights if type(topk_weights) is np.ndarray else \
            _arrays.as_numpy(topk_weights, "topk_weights")
        if w.dtype != np.float32 and not np.issubdtype(w.dtype, np.floating):
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
        row_bytes = raw.shape[1] * raw.itemsize
        if raw.shape[1] < 1 or row_bytes > _lib.MAX_ROW_BYTES:
            raise ValueError(f"a row of {row_bytes} bytes: 1...{_lib.MAX_ROW_BYTES} bytes "
                             "per token row")
        if tokens * row_bytes > self.dispatch_bytes:
            raise ValueError(f"x is {tokens * row_bytes} bytes, more than the Buffer's "
                             f"{self.dispatch_bytes} for one dispatch")
        layers, experts = self._table()
        if type(layer) is not int:
            layer = _arrays.check_uint(layer, "layer")
        if not 0 <= layer < layers:
            raise ValueError(f"layer {layer} is out of range: the GRACE table in use has "
                             f"{layers} MoE layers (0..{layers - 1})")
        if ids.dtype != np.int64 or not ids.flags.c_contiguous:
            ids = np.ascontiguousarray(ids, dtype=np.int64)
        if w.dtype != np.float32 or not w.flags.c_contiguous:
            w = np.ascontiguousarray(w, dtype=np.float32)
        return raw, dtname, as_torch, ids, w, layer, experts

    def _check_fast(self, x, ids, w, layer):
        """_check_dispatch's result for numpy x (a row dtype, C-contiguous), int64 ids and
        float32 weights of the same C-contiguous [tokens, k] shape and an int layer in
        range with rows that fit; None for anything else (checked the long way)."""
        dtname = _ROW_NP.get(x.dtype)
        if dtname is None or x.ndim != 2 or ids.ndim != 2 or ids.dtype != _I64 or \
                w.dtype != _F32 or w.shape != ids.shape or ids.shape[0] != x.shape[0] or \
                not 1 <= ids.shape[1] <= _lib.MAX_TOPK or not x.flags.c_contiguous or \
                not ids.flags.c_contiguous or not w.flags.c_contiguous:
            return None
        row_bytes = x.shape[1] * x.itemsize
        if not 1 <= row_bytes <= _lib.MAX_ROW_BYTES or \
                x.shape[0] * row_bytes > self.dispatch_bytes:
            return None
        layers, experts = self._table()
        if not 0 <= layer < layers:
            return None
        return x, dtname, False, ids, w, layer, experts

    def dispatch(self, x, topk_idx, topk_weights, layer):
        """Send each of this rank's tokens (x [num_tokens, hidden]) to the ranks holding
        its experts (topk_idx [num_tokens, num_topk], global expert ids of the GRACE
        table, -1 for no selection; topk_weights the gates) at MoE layer `layer`, and
        return what every rank of the group sent this one: (recv_x [num_recv, hidden],
        recv_topk_idx [num_recv, num_topk] int64 with the expert ids this rank serves
        for the row and -1 in the other slots, recv_topk_weights [num_recv, num_topk]
        float32, 0 where the id is -1, handle). Rows are ordered by source rank, then
        token. numpy in, numpy out; CPU torch in, torch out."""
        return self.dispatch_async(x, topk_idx, topk_weights, layer).wait()

    def dispatch_async(self, x, topk_idx, topk_weights, layer):
        """dispatch() begun, not waited for: a DispatchEvent whose done() polls once
        and whose wait() returns dispatch()'s tuple. One dispatch runs at a time; x,
        when it is dispatch_input(), stays unchanged until then."""
        c = self.client
        with c._lock:
            self._check_open()
            if self._dead:
                self._reap()
            if self._pending is not None:
                raise ValueError(f"the dispatch of batch {self._pending.batch} is not "
                                 "waited for yet")
            raw, dtname, as_torch, ids, w, layer, experts = \
                self._check_dispatch(x, topk_idx, topk_weights, layer)
            tokens, k = ids.shape
            if tokens and not raw.flags.c_contiguous:
                raw = np.ascontiguousarray(raw)
            args = self._dargs
            args.layer, args.top_k, args.n_tokens = layer, k, tokens
            args.row_bytes, args.n_experts = raw.shape[1] * raw.itemsize, experts
            args.x = addr(raw) if tokens else None
            args.topk_idx, args.topk_weights = addr(ids), addr(w)
            args.timeout_ms = self._ms(self.timeout)
            b = lib.locus_ep_dispatch_begin(self._ep, self._dargs_p, self._err_p)
            if b < 0:
                nb = self._status().next_batch
                if nb == self._next_batch and b in (-_lib.LOCUS_ERANGE, -_lib.LOCUS_ENAN,
                                                    -errno.EINVAL):
                    raise ValueError(self._err.text())  # an argument: nothing sent
                self._next_batch = nb  # the batch was taken, and failed (another rank's abort)
                self._drain()
                raise self._failure(b, self._err, "dispatch")
            self._next_batch = b + 1
            ev = DispatchEvent(self, b, raw, dtname, as_torch, layer, tokens, k, experts)
            self._pending = ev
            return ev

    def _collect(self, ev):
        """The dispatch of ev is in: copy it out, make its Handle."""
        recv, err = self._recv, self._err
        n, kk, raw = recv.n_recv, recv.top_k, ev.raw
        recv_x = self._recv_array(n, raw.shape[1], raw.dtype)
        idx = np.empty((n, kk), dtype=np.int64)
        wts = np.empty((n, kk), dtype=np.float32)
        per = np.empty(ev.experts, dtype=np.uint32)
        refs = np.empty(n, dtype=_ROW_DT)
        o = self._rout
        o.recv_x, o.recv_idx, o.recv_weights = \
            addr(recv_x), addr(idx), addr(wts)
        o.per_expert, o.n_experts, o.refs = addr(per), ev.experts, addr(refs)
        hp = ctypes.c_void_p()
        ret = lib.locus_ep_dispatch_end(self._ep, self._rout_p, ctypes.byref(hp), self._err_p)
        if ret < 0:
            raise from_code(ret, err.text() or None, what=f"dispatch of batch {ev.batch}")
        tokens, k = ev.tokens, ev.k
        h = Handle(ev.batch, ev.layer, tokens, k, recv.rows_sent, recv.dests, torch=ev.torch)
        h.refs = refs
        at, sl, cnt = 0, {}, self._src_count
        for r in range(self.num_ranks):
            m = cnt[r]
            if m:
                sl[r] = (at, m)
                at += m
        h.src_slices = sl
        h.masked = self._masked_of(hp.value, tokens, k) if recv.n_masked else \
            np.zeros((tokens, k), bool)
        h._c, h._owner = hp.value, self
        h.num_recv_tokens_per_expert = per.tolist()
        if ev.torch:
            torch = _torch()
            return (_wrap(recv_x, ev.dtname, True), torch.from_numpy(idx),
                    torch.from_numpy(wts), h)
        return recv_x, idx, wts, h

    def _recv_array(self, n, hidden, dtype):
        """An [n, hidden] array for recv_x: a view of a buffer the Buffer keeps when one
        is large enough and nothing else holds it any more (every array made from it
        was dropped), else a new one. A kept buffer's pages and cache lines are warm:
        a fresh array of rows is page faults at its first write."""
        nbytes = n * hidden * dtype.itemsize
        pool, small = self._pool, None
        for i in range(len(pool)):
            b = pool[i]
            # references: the pool's list, b, getrefcount's argument; a view held elsewhere
            # (recv_x, a slice of it, a torch tensor over it) holds one more
            if sys.getrefcount(b) == 3:
                if b.nbytes >= nbytes:
                    return b[:nbytes].view(dtype).reshape(n, hidden)
                small = i
        if nbytes < 65536 or (small is None and len(pool) >= _POOL_MAX):
            return np.empty((n, hidden), dtype=dtype)
        # a power of two: the next batches, received counts varying, fit it too
        b = np.empty(1 << (nbytes - 1).bit_length(), dtype=np.uint8)
        if small is None:
            pool.append(b)
        else:
            pool[small] = b  # a free buffer too small for this dispatch: a larger one
        return b[:nbytes].view(dtype).reshape(n, hidden)

    def _others(self):
        """How many descriptors the collective polled for the client."""
        lib.locus_ep_status(self._ep, self._st_p)
        return self._st.others

    def _masked_of(self, hc, tokens, k):
        info = _lib.EpHandleInfo()
        lib.locus_ep_handle_info(hc, ctypes.byref(info))
        return self._masked(info, tokens, k)

    @staticmethod
    def _masked(info, tokens, k):
        if not tokens or not info.n_masked:
            return np.zeros((tokens, k), bool)
        m = np.ctypeslib.as_array((ctypes.c_uint8 * (tokens * k)).from_address(info.masked))
        return m.astype(bool).reshape(tokens, k)

    # ---- combine ----------------------------------------------------------------------

    def combine(self, y, handle):
        """Send the expert outputs y [handle.num_recv, hidden] (row i answers recv_x's
        row i, already weighted by its recv_topk_weights as DeepEP's combine expects)
        back to their source ranks, and return this rank's [num_tokens, hidden]: for
        each of its tokens the sum of the rows every rank returned for it, i.e. the
        gate-weighted sum of its experts' outputs. Float dtypes (float16/32/64,
        bfloat16); the sum is taken in float32 (float64 for float64). A failure here
        (y does not fit, a wrong shape) fails the batch on every rank."""
        c = self.client
        if not isinstance(handle, Handle):
            raise TypeError(f"handle must be the Handle dispatch() returned, not "
                            f"{type(handle).__name__}")
        with c._lock:
            self._check_open()
            self._reap()
            live = getattr(handle, "_owner", None) is self and \
                getattr(handle, "_c", None) is not None
            try:
                raw, dtname, as_torch = _raw(y, "y")
                dtname = dtname or raw.dtype.name
                if dtname not in _SUM_DTYPES:
                    raise TypeError(f"y holds {dtname}: combine sums float16, float32, "
                                    "float64 or bfloat16 rows")
                if raw.ndim != 2 or raw.shape[0] != handle.num_recv or raw.shape[1] < 1:
                    raise ValueError(f"y must be [num_recv, hidden] with num_recv = "
                                     f"{handle.num_recv} (recv_x's rows), not "
                                     f"{tuple(raw.shape)}")
                row_bytes = raw.shape[1] * raw.itemsize
                if handle.num_recv * row_bytes > self.combine_bytes:
                    raise ValueError(f"y is {handle.num_recv * row_bytes} bytes, more than "
                                     f"the Buffer's {self.combine_bytes} for one combine")
                if row_bytes > _lib.MAX_ROW_BYTES:
                    raise ValueError(f"a row of {row_bytes} bytes: at most "
                                     f"{_lib.MAX_ROW_BYTES}")
            except (ValueError, TypeError) as e:
                if live:  # the other ranks wait for this one's rows: they fail it too
                    self._abort(handle.batch, -(_lib.LOCUS_ERANGE if "more than" in str(e)
                                                else errno.EINVAL),
                                f"rank {self.rank}: {e}")
                raise
            if getattr(handle, "_owner", None) is not self:
                raise ValueError("handle comes from another Buffer's dispatch (or was "
                                 "made by hand): combine answers this Buffer's batches")
            if getattr(handle, "_combined", False):
                raise ValueError(f"batch {handle.batch} was combined already")
            if not live:
                raise ValueError(f"batch {handle.batch} failed already")
            if handle.num_recv and not self._is_at(raw, self._y_off):
                raw = np.ascontiguousarray(raw)
            out = np.empty((handle.num_tokens, raw.shape[1]), dtype=raw.dtype)
            args = _lib.EpCombineArgs(dtype=_SUM_DTYPES[dtname], hidden=raw.shape[1],
                                      y=_ptr(raw) if handle.num_recv else None, out=_ptr(out),
                                      timeout_ms=self._ms(self.timeout))
            err = _lib.Error()
            hc = handle._c
            try:
                ret = lib.locus_ep_combine(self._ep, hc, ctypes.byref(args), ctypes.byref(err))
                if ret < 0:
                    raise self._failure(ret, err, f"combine of batch {handle.batch}")
                info = _lib.EpHandleInfo()
                lib.locus_ep_handle_info(hc, ctypes.byref(info))
                if info.n_masked != handle.num_masked:
                    handle.masked = self._masked(info, handle.num_tokens, handle.top_k)
                handle.lost_ranks = tuple(r for r in range(self.num_ranks)
                                          if info.lost >> r & 1)
                handle._combined = True
            finally:
                handle._c = None
                lib.locus_ep_handle_free(hc)
                self._drain()
            return _wrap(out, dtname, as_torch)

    # ---- move_weights' requests (weights travel as tagged COMBINEs) --------------------

    def _ranks(self):
        lost, _ = self.client.ranks_state()
        self._lost = frozenset(lost)

    def _submit(self, key, submit_fn, off, nbytes, deadline):
        """submit_fn() -> (ret, err text): write the request and submit it; retried
        while the submit ring is full. The stage range is freed at completion."""
        while True:
            ret, text = submit_fn()
            if ret == 0:
                self._out[key] = [None, off, nbytes, submit_fn]
                return
            if ret != -_lib.LOCUS_EFULL or time.monotonic() >= deadline:
                self.client._stage_free(off, nbytes)
                if ret == -_lib.LOCUS_EFULL:
                    raise LocusTimeout(errno.ETIMEDOUT, "the submit ring stayed full",
                                       what="move_weights")
                raise from_code(ret, text or None, what="move_weights")
            self._poll()
            time.sleep(_NAP_S)

    def _poll(self):
        """One pump of the client's ring (the collective takes its own): weights
        completions settle their requests, weights rows are written. How many came."""
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
        self._drain()
        n = c._pump()
        q = c._take(_lib.OP_COMBINE)
        while q:
            d = q.popleft()
            key = (d.op, d.id, d.peer)
            r = self._out.get(key)
            if r is None:
                continue
            if d.status == -_lib.LOCUS_EFULL:
                self._retry.append((time.monotonic() + _RETRY_S, key))
                continue
            del self._out[key]
            c._stage_free(r[1], r[2])
            self._done[key] = _lib.Desc.from_buffer_copy(d)
        q = c._take(_lib.OP_RESULTS_IN)
        while q:
            d = q.popleft()
            m, err = _lib.ClientRows(), _lib.Error()
            ret = lib.locus_client_rows_in(c._c, ctypes.byref(d), ctypes.byref(m),
                                           ctypes.byref(err))
            if ret == 0 and m.batch_id & _WEIGHTS:
                self._weights_in(m)
            c._release_slot(m.slot if ret in (0, -_lib.LOCUS_EPEERDOWN,
                                              -_lib.LOCUS_ESTALEPLACEMENT) else d.slot)
        return n

    def _wait(self, done, deadline, what):
        # no spinning: the ranks of a group may share a core
        while not done():
            if self._poll() == 0:
                self._ranks()
                if time.monotonic() >= deadline:
                    raise LocusTimeout(errno.ETIMEDOUT, f"{what} did not complete within "
                                       f"{self.timeout} s", what=what)
                time.sleep(_NAP_S)

    def _take_done(self, key, what):
        d = self._done.pop(key)
        if d.status:
            raise from_code(d.status, what=what)
        return d

    def _at(self, addr, nbytes):
        off = addr - self._base
        return self._buf[off:off + nbytes]

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

    # ---- lifetime ---------------------------------------------------------------------

    def close(self):
        """Give the Buffer's stage ranges back to the client. Idempotent."""
        with self.client._lock:
            if self._closed:
                return
            self._closed = True
            self._pending = None
            self._reap()
            lib.locus_ep_destroy(self._ep)  # live Handles keep their C part until collected
            self._ep = None
            self.client._buffer = None
            if not self.client.closed:
                for off, n in ((self._x_off, self.dispatch_bytes),
                               (self._y_off, self.combine_bytes),
                               (self._req_off, self._stage_bytes - 2 * self.dispatch_bytes)):
                    self.client._stage_free(off, n)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
