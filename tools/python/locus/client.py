# SPDX-License-Identifier: MIT
"""One attachment to a node's locusd (a client slot), with any of its roles:
prefiller (route), decoder (receive signatures, report load), expert-parallel
rank (the Buffer of buffer.py builds on the hooks at the end of Client).

Every wait is bounded by a timeout (the attachment's, or the call's). A
Client is not to be shared between threads without a lock of the caller's:
its methods take one of their own, so concurrent calls are safe but serialised.
"""
import ctypes
import errno
import itertools
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Optional

import numpy as np

from . import _arrays, _lib
from ._lib import lib
from ._stage import Stage
from .errors import LocusError, LocusGone, LocusTimeout, NoTableError, from_code
from .stats import Counters, _check_instance

_POLL_BURST = 64
_NAP_S = 20e-6             # between empty polls while waiting
_SPIN_S = 200e-6           # polls without a nap at the start of a wait
_SLICE_S = 0.05            # the longest the library waits in one call (signals are seen between)
_FULL_RETRY_S = 50e-6      # before submitting a request whose decoder's inbox was full
_ELDR, _GRACE = 0, 1       # table channels
_U32, _F32 = struct.Struct("<I"), struct.Struct("<f")


@dataclass(frozen=True)
class Decision:
    """Where locusd routed a request. error is None when it was routed; else
    the LocusError naming the code (and decoder, band, ... are 0)."""
    request_id: int
    decoder: int
    band: int            # eligible decoders inside the locality band
    similarity: float    # of the chosen decoder's centroid
    partial: bool        # ROUTE_BLOCKS: a named cached block was not in locusd's cache
    blocks_found: int    # ROUTE_BLOCKS: named cached blocks found
    status: int = 0      # 0 or -code
    error: Optional[LocusError] = None

    @property
    def ok(self):
        return self.error is None

    def raise_for_status(self):
        if self.error is not None:
            raise self.error
        return self


class ReceivedSignature:
    """A signature routed to this decoder: request_id (the prefiller's),
    counts (uint16 [n_layers, n_experts]: prompt tokens whose top-k at layer
    l includes expert e), payload (uint8: the whole signature as locusd
    delivered it, header included), prompt_tokens, allowed_decoders (the
    request's constraint mask, 0 = any), src_node.

    Copied out of the inbox unless poll_signatures(copy=False): then counts
    and payload are views of the inbox slot, valid until release() (or
    detach); the slot stays taken until then.
    """

    def __init__(self, client, sig, copy):
        self.request_id = sig.id
        self.prompt_tokens = sig.prompt_tokens
        self.allowed_decoders = sig.allowed_decoders
        self.src_node = sig.src_node
        self.decoder_id = sig.decoder_id
        self.n_layers, self.n_experts = sig.n_layers, sig.n_experts
        payload = np.ctypeslib.as_array((ctypes.c_uint8 * sig.sig_len).from_address(sig.sig))
        counts = np.ctypeslib.as_array(
            (ctypes.c_uint16 * (sig.n_layers * sig.n_experts)).from_address(sig.counts))
        counts = counts.reshape(sig.n_layers, sig.n_experts)
        self._client, self._slot = client, sig.slot
        if copy:
            self.payload, self.counts = payload.copy(), counts.copy()
            self.release()
        else:
            self.payload, self.counts = payload, counts

    @property
    def released(self):
        return self._slot is None

    def release(self):
        """Hand the inbox slot back to locusd (once; later calls do nothing)."""
        if self._slot is not None:
            slot, self._slot = self._slot, None
            self._client._release_slot(slot)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


class _Request:
    __slots__ = ("id", "op", "off", "nbytes", "retry_at")

    def __init__(self, rid, op, off, nbytes):
        self.id, self.op, self.off, self.nbytes, self.retry_at = rid, op, off, nbytes, 0.0

    @property
    def desc(self):
        """The descriptor that submits the staged request again (nbytes is its length)."""
        return _lib.Desc(op=self.op, id=self.id, off=self.off, len=self.nbytes)


def _timeout_s(t, name="timeout"):
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, not {type(t).__name__}")
    if not 0 <= t <= 3600 or t != t:
        raise ValueError(f"{name} = {t} s is out of range (0..3600)")
    return float(t)


class Client:
    """An attachment made by locus.attach(); see there."""

    def __init__(self, instance, *, prefill=False, decoder=None, rank=None, timeout=2.0):
        self._c = ctypes.c_void_p()
        self._lock = threading.RLock()
        name = _check_instance(instance)
        self.timeout = _timeout_s(timeout)
        if not isinstance(prefill, bool):
            raise TypeError(f"prefill must be True or False, not {type(prefill).__name__}")
        roles = _lib.ROLE_PREFILL if prefill else 0
        if decoder is not None:
            decoder = _arrays.check_uint(decoder, "decoder")
            roles |= _lib.ROLE_DECODE
        if rank is not None:
            rank = _arrays.check_uint(rank, "rank")
            roles |= _lib.ROLE_RANK
        if not roles:
            raise ValueError("attach needs a role: prefill=True, decoder=ID and/or rank=R")
        self.instance, self.prefill, self.decoder, self.rank = instance, prefill, decoder, rank
        req = _lib.ClientReq(roles=roles, decoder_id=decoder or 0, rank=rank or 0,
                             timeout_ms=max(1, int(self.timeout * 1000)))
        err = _lib.Error()
        ret = lib.locus_client_attach(name, ctypes.byref(req), ctypes.byref(self._c),
                                      ctypes.byref(err))
        if ret < 0:
            self._c = ctypes.c_void_p()
            raise from_code(ret, err.text() or None, what=f"attach to {instance}")
        try:
            self._counters = Counters(instance)
        except BaseException:
            lib.locus_client_detach(self._c)
            self._c = ctypes.c_void_p()
            raise
        size = ctypes.c_uint64()
        base = lib.locus_client_stage(self._c, ctypes.byref(size))
        geo = lib.locus_client_region(self._c).contents
        self.slot = lib.locus_client_slot(self._c)
        self.generation = lib.locus_client_generation(self._c)
        self.ring_size, self.stage_size = geo.ring_size, size.value
        self.inbox_slots, self.inbox_slot_size = geo.inbox_slots, geo.inbox_slot_size
        self.stage = np.ctypeslib.as_array((ctypes.c_uint8 * size.value).from_address(base))
        self._stage_base = base
        self._alloc = Stage(size.value)
        self._descs = (_lib.Desc * _POLL_BURST)()
        self._descs_p = ctypes.cast(self._descs, ctypes.POINTER(_lib.Desc))
        # what a route hands the library, made once (calls are serialised by _lock)
        self._rreq, self._rerr = _lib.RouteTypedReq(), _lib.Error()
        self._rreq_p, self._rerr_p = ctypes.byref(self._rreq), ctypes.byref(self._rerr)
        self._eldr = (None, 0, 0)    # (table generation, layers, experts) last read
        self._inflight = {}          # request id -> _Request (ROUTE, ROUTE_BLOCKS, EVICT)
        self._done = {}              # request id -> Decision / EVICT result
        self._retry = deque()        # requests refused for a full inbox, to submit again
        self._signatures = deque()   # SIGNATURE_IN descriptors not handed out yet
        self._other = {}             # op -> deque of descriptors (the Buffer's)
        self._next_id = itertools.count(1)
        self._gone = None
        self._buffer = None          # the Buffer (buffer.py) on this client, if any

    # ---- lifetime ---------------------------------------------------------------

    def close(self):
        """Detach (locusd drains and frees the slot). Views into the stage or the
        inbox must not be used after this. Idempotent."""
        with self._lock:
            if self._c:
                lib.locus_client_detach(self._c)
                self._c = ctypes.c_void_p()
                self.stage = None
            if getattr(self, "_counters", None):
                self._counters.close()
                self._counters = None

    detach = close

    @property
    def closed(self):
        return not self._c

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        roles = [r for r, on in (("prefill", self.prefill),
                                 (f"decoder={self.decoder}", self.decoder is not None),
                                 (f"rank={self.rank}", self.rank is not None)) if on]
        state = "closed" if self.closed else f"slot {self.slot}"
        return f"<locus.Client {self.instance} {' '.join(roles)} {state}>"

    def _live(self):
        if self._gone is not None:
            raise self._gone
        if not self._c:
            raise ValueError("this locus client is closed")

    # ---- the table in use -------------------------------------------------------

    def table_shape(self, channel=_ELDR):
        """(layers, experts) of the table locusd uses on channel (0 ELDR, 1 GRACE);
        NoTableError when none is in use."""
        with self._lock:
            self._live()
            ctr = self._counters
            gen = ctr.value("table_generation", channel)
            if not gen:
                kind = "ELDR" if channel == _ELDR else "GRACE"
                raise NoTableError(_lib.LOCUS_ESTATE, f"no {kind} table is in use on instance "
                                   f"{self.instance} (push one with locusctl push)")
            return ctr.value("table_layers", channel), ctr.value("table_experts", channel)

    @property
    def block_tokens(self):
        """Tokens per KV block of locusd's signature cache (0: the cache is off)."""
        with self._lock:
            self._live()
            return self._counters.value("sigcache_block_tokens") or 0

    # ---- prefill ----------------------------------------------------------------

    def _need(self, ok, role, how):
        if not ok:
            raise ValueError(f"this attachment is not a {role}: attach with {how}")

    def _new_id(self, request_id):
        if request_id is None:
            while True:
                rid = next(self._next_id) & ((1 << 64) - 1)
                if rid not in self._inflight and rid not in self._done:
                    return rid
        rid = _arrays.check_uint(request_id, "request_id", 64)
        if rid in self._inflight or rid in self._done:
            raise ValueError(f"request_id {rid} is already in flight on this client")
        return rid

    def _take_stage(self, nbytes, deadline):
        while True:
            off = self._alloc.alloc(nbytes)
            if off is not None:
                return off
            if nbytes > self.stage_size:
                raise ValueError(f"a request of {nbytes} bytes does not fit the "
                                 f"{self.stage_size}-byte stage")
            if not self._inflight or time.monotonic() >= deadline:
                raise LocusTimeout(errno.ETIMEDOUT,
                                   f"the stage has no room for {nbytes} bytes "
                                   f"({len(self._inflight)} requests in flight): poll() first",
                                   what="submit")
            self._pump()
            time.sleep(_NAP_S)

    def _submit_built(self, op, rid, off, nbytes, build, deadline):
        """build(off) writes the request into the stage and submits it (0 or
        -code); retried while the submit ring is full."""
        while True:
            ret, err = build(off)
            if ret == 0:
                # nbytes is the request's exact length: a resubmission needs it
                self._inflight[rid] = _Request(rid, op, off, nbytes)
                return rid
            # -LOCUS_EFULL: the submit ring is full (nothing went in); else a refusal
            if ret != -_lib.LOCUS_EFULL or time.monotonic() >= deadline:
                self._alloc.free(off, nbytes)
                if ret == -_lib.LOCUS_EFULL:
                    raise LocusTimeout(errno.ETIMEDOUT, "the submit ring stayed full "
                                       f"({len(self._inflight)} requests in flight)",
                                       what="submit")
                raise from_code(ret, err or None, what="submit")
            self._pump()
            time.sleep(_NAP_S)

    def submit(self, routed_experts, *, allowed=None, cached_blocks=None, new_blocks=None,
               request_id=None, timeout=None):
        """Submit a request for routing without waiting; returns its request id
        (request_id, or one chosen here), which the decoder receives with the
        signature. poll() / wait(request_id) give the Decision.

        routed_experts: [prompt_len, n_moe_layers, k] integer expert ids (numpy
        or a CPU torch tensor), what vLLM / SGLang return with
        --enable-return-routed-experts; n_moe_layers must be the ELDR table's,
        every id below its experts. allowed: decoder ids (0..63) that may take
        the request (None: any). cached_blocks / new_blocks (u64 block hashes,
        either one given makes this a ROUTE_BLOCKS through locusd's signature
        cache): the prompt's KV blocks that hit the serving engine's prefix
        cache, and the full blocks among routed_experts' tokens (its first
        len(new_blocks) x block_tokens tokens, in order), which locusd caches;
        routed_experts then holds the prefilled tokens only (after the cached
        prefix), the rest of them the tail.
        """
        with self._lock:
            self._live()
            self._need(self.prefill, "prefiller", "prefill=True")
            t = self.timeout if timeout is None else _timeout_s(timeout)
            deadline = time.monotonic() + t
            if cached_blocks is None and new_blocks is None:
                return self._submit_route(routed_experts, allowed, request_id, deadline)
            layers, experts = self.table_shape(_ELDR)
            ids = _arrays.routed_experts(routed_experts, layers, experts)
            mask = _arrays.decoder_mask(allowed)
            rid = self._new_id(request_id)
            return self._submit_blocks(ids, layers, experts, mask, cached_blocks, new_blocks,
                                       rid, deadline)

    def _eldr_shape(self):
        """table_shape(ELDR), read again only when the table's generation moves."""
        gen = self._counters.value("table_generation", _ELDR)
        g, layers, experts = self._eldr
        if gen != g or not gen:
            layers, experts = self.table_shape(_ELDR)
            self._eldr = (gen, layers, experts)
        return layers, experts

    def _submit_route(self, x, allowed, request_id, deadline):
        """A ROUTE: the shape checked here, every id by the library as it builds the
        signature from x as it is (locus_client_route_typed)."""
        layers, experts = self._eldr_shape()
        ids, itype = _arrays.routed_experts_typed(x, layers, experts)
        mask = 0 if allowed is None else _arrays.decoder_mask(allowed)
        rid = self._new_id(request_id)
        nbytes = _lib.ELDR_SIG_HDR_SIZE + layers * experts * 2
        q = self._rreq
        q.n_layers, q.n_experts, q.k, q.ids_type = layers, experts, ids.shape[2], itype
        q.n_tokens, q.ids, q.allowed_decoders = ids.shape[0], _arrays.addr(ids), mask
        off = self._take_stage(nbytes, deadline)
        ret = lib.locus_client_route_typed(self._c, off, self._rreq_p, rid, self._rerr_p)
        if ret == 0:
            self._inflight[rid] = _Request(rid, _lib.OP_ROUTE, off, nbytes)
            return rid
        if ret != -_lib.LOCUS_EFULL:
            self._alloc.free(off, nbytes)
            if ret == -_lib.LOCUS_ERANGE:
                raise ValueError(f"routed_experts: {self._rerr.text()}")
            raise from_code(ret, self._rerr.text() or None, what="submit")

        def build(o):  # the submit ring was full: again until the deadline
            r = lib.locus_client_route_typed(self._c, o, self._rreq_p, rid, self._rerr_p)
            return r, self._rerr.text()
        return self._submit_built(_lib.OP_ROUTE, rid, off, nbytes, build, deadline)

    def _submit_blocks(self, ids, layers, experts, mask, cached, new, rid, deadline):
        cached = _arrays.hashes([] if cached is None else cached, "cached_blocks",
                                _lib.BLOCKS_MAX_CACHED)
        new = _arrays.hashes([] if new is None else new, "new_blocks", _lib.BLOCKS_MAX_NEW)
        bt = self._counters.value("sigcache_block_tokens") or 0
        if not bt:
            raise LocusError(errno.EOPNOTSUPP, f"instance {self.instance} runs without a signature cache "
                             "(sig_cache_bytes = 0): route without cached_blocks/new_blocks",
                             what="submit")
        tokens, _, k = ids.shape
        if len(new) * bt > tokens:
            raise ValueError(f"new_blocks names {len(new)} blocks of {bt} tokens but "
                             f"routed_experts has {tokens} tokens")
        seen = set()
        for name, hs in (("cached_blocks", cached), ("new_blocks", new)):
            for h in hs.tolist():
                if h in seen:
                    raise ValueError(f"{name}: block hash {h:#x} is named twice in the request")
                seen.add(h)
        err = _lib.Error()
        counts = np.zeros((len(new), layers, experts), dtype=np.uint8)
        for i in range(len(new)):
            block = ids[i * bt:(i + 1) * bt]
            ret = lib.locus_blocks_counts_build(counts[i].ctypes.data, layers, experts, k,
                                                block.ctypes.data, bt, ctypes.byref(err))
            if ret < 0:
                raise ValueError(f"new block {i}: {err.text()}")
        tail_ids = np.ascontiguousarray(ids[len(new) * bt:])
        sig_len = _lib.ELDR_SIG_HDR_SIZE + layers * experts * 2
        tail = np.empty(sig_len, dtype=np.uint8)
        ret = lib.locus_eldr_sig_build(tail.ctypes.data, sig_len, layers, experts, k,
                                       tail_ids.ctypes.data if len(tail_ids) else None,
                                       len(tail_ids), mask, ctypes.byref(err))
        if ret < 0:
            raise ValueError(f"the tail's signature: {err.text()}")
        route = _lib.BlocksRoute(block_tokens=bt, n_cached=len(cached),
                                 cached=cached.ctypes.data, n_new=len(new),
                                 new_hashes=new.ctypes.data, new_counts=counts.ctypes.data,
                                 tail=tail.ctypes.data)
        nbytes = lib.locus_blocks_req_len(layers, experts, len(cached), len(new))
        off = self._take_stage(nbytes, deadline)

        def build(o):  # the arrays route points into live in this frame
            e = _lib.Error()
            r = lib.locus_client_route_blocks(self._c, o, ctypes.byref(route), rid,
                                              ctypes.byref(e))
            return r, e.text()
        return self._submit_built(_lib.OP_ROUTE_BLOCKS, rid, off, nbytes, build, deadline)

    def route(self, routed_experts, *, allowed=None, cached_blocks=None, new_blocks=None,
              request_id=None, timeout=None):
        """submit() and wait for the Decision; a refusal by locusd raises the
        LocusError naming its code and reason. See submit() for the arguments."""
        with self._lock:
            t = self.timeout if timeout is None else _timeout_s(timeout)
            deadline = time.monotonic() + t
            if cached_blocks is None and new_blocks is None:
                self._live()
                self._need(self.prefill, "prefiller", "prefill=True")
                rid = self._submit_route(routed_experts, allowed, request_id, deadline)
                if self._buffer is None and not self._retry:
                    d = self._route_done(rid, deadline)
                    if d is not None:
                        return d
            else:
                rid = self.submit(routed_experts, allowed=allowed, cached_blocks=cached_blocks,
                                  new_blocks=new_blocks, request_id=request_id, timeout=t)
            return self._wait(rid, deadline).raise_for_status()

    def _route_done(self, rid, deadline):
        """The Decision of ROUTE rid when its completion is the one descriptor of the
        library's first wait and routed it (the common case, settled here without the
        queues); else None, and _wait() settles what came."""
        now = time.monotonic()
        n = lib.locus_client_poll_until(self._c, self._descs_p, _POLL_BURST, _lib.OP_ROUTE,
                                        rid, int(_SPIN_S * 1e9),
                                        int(min(max(0.0, deadline - now), _SLICE_S) * 1e9))
        if n != 1:
            if n < 0:
                self._poll_failed(n)
            for i in range(n):
                self._sort(self._descs[i], True)
            return None
        d = self._descs[0]
        if d.id != rid or d.op != _lib.OP_ROUTE or d.status:
            self._sort(d, True)
            return None
        r = self._inflight.pop(rid)
        self._alloc.free(r.off, r.nbytes)
        return Decision(rid, d.peer, d.count, _F32.unpack(_U32.pack(d.aux & 0xffffffff))[0],
                        bool(d.flags & _lib.DESC_F_PARTIAL), d.blocks)

    def evict(self, hashes, *, timeout=None):
        """The serving engine evicted these KV blocks: locusd drops their counts.
        Returns how many of them were cached."""
        with self._lock:
            self._live()
            self._need(self.prefill, "prefiller", "prefill=True")
            t = self.timeout if timeout is None else _timeout_s(timeout)
            deadline = time.monotonic() + t
            hs = _arrays.hashes(hashes, "hashes", _lib.EVICT_MAX)
            rid = self._new_id(None)
            nbytes = 16 + 8 * len(hs)
            off = self._take_stage(nbytes, deadline)

            def build(o):
                err = _lib.Error()
                ret = lib.locus_client_evict(self._c, o, hs.ctypes.data, len(hs), rid,
                                             ctypes.byref(err))
                return ret, err.text()
            self._submit_built(_lib.OP_EVICT, rid, off, nbytes, build, deadline)
            return self._wait(rid, deadline).raise_for_status().blocks_found

    def poll(self):
        """Completed requests since the last call (Decisions, in completion order;
        a refused one carries .error), without waiting."""
        with self._lock:
            self._live()
            self._pump()
            out = list(self._done.values())
            self._done.clear()
            return out

    def wait(self, request_id, timeout=None):
        """The Decision of request_id, waiting at most timeout seconds
        (LocusTimeout: it stays in flight). A refusal raises its LocusError."""
        with self._lock:
            t = self.timeout if timeout is None else _timeout_s(timeout)
            return self._wait(request_id, time.monotonic() + t).raise_for_status()

    @property
    def in_flight(self):
        """Requests submitted and not completed yet."""
        return len(self._inflight)

    def _wait(self, rid, deadline):
        spin_until = time.monotonic() + _SPIN_S
        while rid not in self._done:
            self._live()
            r = self._inflight.get(rid)
            if r is None:
                raise ValueError(f"request {rid} is not in flight on this client (its "
                                 "decision may have been returned by poll())")
            if self._buffer is None and not self._retry:
                # nothing to resubmit, no collective to hand descriptors to: the library
                # polls until the completion comes (spinning, then napping)
                now = time.monotonic()
                if now < deadline:
                    n = lib.locus_client_poll_until(
                        self._c, self._descs_p, _POLL_BURST, r.op, rid,
                        int(max(0.0, spin_until - now) * 1e9),
                        int(min(deadline - now, _SLICE_S) * 1e9))
                    if n < 0:
                        self._poll_failed(n)
                    for i in range(n):
                        self._sort(self._descs[i], True)
                    continue
                raise LocusTimeout(errno.ETIMEDOUT, f"request {rid} got no completion within "
                                   "the timeout; it stays in flight (poll() or wait() later)",
                                   what="wait")
            if self._pump() == 0:
                now = time.monotonic()
                if now < spin_until:
                    continue  # an answer within microseconds is the common case
                if now >= deadline:
                    raise LocusTimeout(errno.ETIMEDOUT, f"request {rid} got no completion within the "
                                       "timeout; it stays in flight (poll() or wait() later)",
                                       what="wait")
                time.sleep(_NAP_S)
        return self._done.pop(rid)

    # ---- placement changes (a rank's part in the two phases) ---------------------

    def placement(self):
        """The rank slot's placement state as a dict: staged (prepared: load
        its experts, then ack_placement), current (what this node plans with),
        free_below (every node plans with it or a later one), acked and floor
        (what this rank said it holds), part (1: it takes part; 0: its rows are
        not checked). Generations are the cluster's (0: none)."""
        with self._lock:
            self._live()
            p = _lib.Placement()
            lib.locus_client_placement(self._c, ctypes.byref(p))
            return {f: getattr(p, f) for f, _ in _lib.Placement._fields_ if f != "reserved"}

    def join_placements(self):
        """From now on this rank takes part in placement changes: every change
        waits for its ack_placement, and it gets only rows planned under a
        generation it acknowledged (none until the first)."""
        with self._lock:
            self._live()
            self._need(self.rank is not None, "rank", "rank=R")
            lib.locus_client_placement_join(self._c)

    def ack_placement(self, generation):
        """This rank holds the experts of generation (and still those of every
        generation from its floor on): rows planned under it are delivered."""
        with self._lock:
            self._live()
            self._need(self.rank is not None, "rank", "rank=R")
            ret = lib.locus_client_placement_ack(self._c, _arrays.check_uint(generation,
                                                                              "generation"))
            if ret < 0:
                raise from_code(ret, f"generation {generation} is below this rank's floor "
                                f"{self.placement()['floor']}", what="ack_placement")

    def release_placement(self, floor):
        """This rank freed the experts only generations below floor used: rows
        planned under them are refused from now on. Call it once free_below
        has passed them."""
        with self._lock:
            self._live()
            self._need(self.rank is not None, "rank", "rank=R")
            ret = lib.locus_client_placement_release(self._c, _arrays.check_uint(floor,
                                                                                  "floor"))
            if ret < 0:
                raise from_code(ret, f"floor {floor} is above what this rank acknowledged",
                                what="release_placement")

    def ranks_state(self):
        """(lost, info) as the engine serving this rank last wrote it: lost a
        frozenset of the GRACE ranks it cannot reach (node down or cut off, rank
        client gone), info a dict: n_ranks (0: not written yet), n_lost, seq
        (moves at every change), changed_ns (CLOCK_MONOTONIC of the change)."""
        with self._lock:
            self._live()
            self._need(self.rank is not None, "rank", "rank=R")
            words = (ctypes.c_uint64 * _lib.CLIENT_RANK_WORDS)()
            info = _lib.ClientRanks()
            for _ in range(100):
                ret = lib.locus_client_ranks(self._c, words, _lib.CLIENT_RANK_WORDS,
                                             ctypes.byref(info))
                if ret == 0:
                    break
            else:
                raise from_code(ret, "the set of live ranks kept changing", what="ranks")
            lost = frozenset(w * 64 + b for w in range(_lib.CLIENT_RANK_WORDS)
                             if words[w] for b in range(64) if words[w] >> b & 1)
            return lost, {f: getattr(info, f) for f, _ in _lib.ClientRanks._fields_}

    def active_ranks(self):
        """The GRACE ranks this rank's node can reach now (sorted): its engine
        plans rows only to them. Empty until the engine first wrote the set."""
        lost, info = self.ranks_state()
        return [r for r in range(info["n_ranks"]) if r not in lost]

    def placement_table(self, generation):
        """The sealed placement blob of generation (staged or current) as bytes."""
        with self._lock:
            self._live()
            blob, n, err = ctypes.c_void_p(), ctypes.c_size_t(), _lib.Error()
            ret = lib.locus_client_placement_table(self._c, _arrays.check_uint(
                generation, "generation"), ctypes.byref(blob), ctypes.byref(n),
                ctypes.byref(err))
            if ret < 0:
                raise from_code(ret, err.msg.decode(errors="replace"), what="placement_table")
            try:
                return ctypes.string_at(blob, n.value)
            finally:
                ctypes.CDLL(None).free(blob)

    def placement_moves(self, generation, since=None):
        """What this rank gains and loses going from generation since (default:
        the one in force; 0: none) to generation: two lists of (layer, expert)."""
        self._need(self.rank is not None, "rank", "rank=R")
        if since is None:
            since = self.placement()["current"]
        new = self.placement_table(generation)
        old = self.placement_table(since) if since else None
        cap = 1 << 16
        gains, losses = (ctypes.c_uint32 * cap)(), (ctypes.c_uint32 * cap)()
        ng, nl, err = ctypes.c_uint32(), ctypes.c_uint32(), _lib.Error()
        ret = lib.locus_placement_rank_moves(old, len(old) if old else 0, new, len(new),
                                             self.rank, gains, ctypes.byref(ng), losses,
                                             ctypes.byref(nl), cap, ctypes.byref(err))
        if ret < 0:
            raise from_code(ret, err.msg.decode(errors="replace"), what="placement_moves")
        if ng.value > cap or nl.value > cap:
            raise LocusError(errno.E2BIG, f"{ng.value} gains and {nl.value} losses: more "
                             f"than {cap}", what="placement_moves")
        pair = lambda v: (v >> 16, v & 0xffff)  # noqa: E731
        return ([pair(gains[i]) for i in range(ng.value)],
                [pair(losses[i]) for i in range(nl.value)])

    def placement_fetches(self, new, old, lost=()):
        """Every expert copy gained going from placement old to placement new
        (sealed GRACE tables as bytes, or generations), with where its weights
        come from: a list of (layer, expert, dst, src, old_primary); src is the
        nearest live rank holding it under old (one on dst's node first), None
        when no live rank does (load it from storage); lost: ranks to leave out."""
        if isinstance(new, int):
            new = self.placement_table(new)
        if isinstance(old, int):
            old = self.placement_table(old)
        words = (ctypes.c_uint64 * _lib.CLIENT_RANK_WORDS)()
        for r in lost:
            words[r // 64] |= 1 << (r % 64)
        n, err = ctypes.c_uint32(), _lib.Error()
        ret = lib.locus_placement_fetches(old, len(old), new, len(new), words, None, 0,
                                          ctypes.byref(n), ctypes.byref(err))
        if ret == 0 and n.value:
            out = (_lib.PlacementFetch * n.value)()
            ret = lib.locus_placement_fetches(old, len(old), new, len(new), words, out,
                                              n.value, ctypes.byref(n), ctypes.byref(err))
        if ret < 0:
            raise from_code(ret, err.msg.decode(errors="replace"), what="placement_fetches")
        st = _lib.PLACEMENT_STORAGE
        return [(f.id >> 16, f.id & 0xffff, f.dst, None if f.src == st else f.src,
                 None if f.old_primary == st else f.old_primary)
                for f in (out if n.value else ())]

    # ---- decoder ----------------------------------------------------------------

    def report_load(self, n):
        """The decoder's load (requests in its batch or queue), read by locusd's
        router; one-sided stores, never blocks. Report it regularly: a decoder
        silent for load_timeout_ms leaves routing."""
        with self._lock:
            self._live()
            self._need(self.decoder is not None, "decoder", "decoder=ID")
            lib.locus_client_report_load(self._c, _arrays.check_uint(n, "load"))

    def poll_signatures(self, max=64, *, copy=True, timeout=0.0):
        """Signatures routed to this decoder (ReceivedSignature), at most max,
        waiting up to timeout seconds for the first (0: look once)."""
        with self._lock:
            self._live()
            self._need(self.decoder is not None, "decoder", "decoder=ID")
            max = _arrays.check_uint(max, "max")
            deadline = time.monotonic() + _timeout_s(timeout)
            self._pump()
            while not self._signatures and time.monotonic() < deadline:
                time.sleep(_NAP_S)
                self._pump()
            out = []
            while self._signatures and len(out) < max:
                d = self._signatures.popleft()
                sig, err = _lib.Signature(), _lib.Error()
                ret = lib.locus_client_signature_in(self._c, ctypes.byref(d), ctypes.byref(sig),
                                                    ctypes.byref(err))
                if ret < 0:
                    self._release_slot(d.slot)
                    raise from_code(ret, err.text() or None, what="SIGNATURE_IN")
                out.append(ReceivedSignature(self, sig, copy))
            return out

    # ---- the ring ---------------------------------------------------------------

    def _release_slot(self, slot):
        """Hand an inbox slot back. A full submit ring does not lose it: liblocus
        keeps the RELEASE and sends it ahead of anything else at the next poll."""
        with self._lock:
            if self._c:
                lib.locus_client_release_slot(self._c, slot)

    def _pump(self):
        """One poll of the completion ring: completions settle their requests,
        deliveries queue by op. Returns how many descriptors came."""
        now = time.monotonic()
        while self._retry and self._retry[0].retry_at <= now:
            r = self._retry[0]
            if lib.locus_client_submit(self._c, ctypes.byref(r.desc), 1) != 1:
                break
            self._retry.popleft()
        n = lib.locus_client_poll(self._c, self._descs, _POLL_BURST)
        if n < 0:
            self._poll_failed(n)
        ep = self._buffer._ep if self._buffer is not None else None
        for i in range(n):
            # the Buffer's collectives (liblocus's locus_ep) take their own first
            if ep is not None and lib.locus_ep_take(ep, ctypes.byref(self._descs[i])):
                continue
            self._sort(self._descs[i], True)
        return n

    def _poll_failed(self, n):
        """A poll's failure n < 0 (locusd gone): raised now and by every later call."""
        self._gone = from_code(n, what=f"instance {self.instance}")
        if isinstance(self._gone, LocusGone):
            self._gone = LocusGone(n, "locusd is gone (killed or stopped): attach again "
                                   "to a restarted one", what=f"instance {self.instance}")
        raise self._gone

    def _sort(self, d, copy=False):
        """A descriptor polled that is not the Buffer's: to its queue (a copy of it
        when copy: d is then the poll array's, written again at the next poll)."""
        op = d.op
        if op == _lib.OP_ROUTE or op == _lib.OP_ROUTE_BLOCKS or op == _lib.OP_EVICT:
            self._complete(d)
            return
        if copy:
            d = _lib.Desc.from_buffer_copy(d)
        if op == _lib.OP_SIGNATURE_IN:
            self._signatures.append(d)
        else:
            self._other.setdefault(op, deque()).append(d)

    def _complete(self, d):
        r = self._inflight.get(d.id)
        if r is None or r.op != d.op:
            return  # not ours (cannot happen with locusd's contract): ignored
        if d.status == -_lib.LOCUS_EFULL and d.op != _lib.OP_EVICT:
            # back-pressure: the decoder's inbox is full; the request is still staged
            r.retry_at = time.monotonic() + _FULL_RETRY_S
            self._retry.append(r)
            return
        del self._inflight[d.id]
        self._alloc.free(r.off, r.nbytes)
        if d.status:
            what = {_lib.OP_ROUTE: "route", _lib.OP_ROUTE_BLOCKS: "route (blocks)",
                    _lib.OP_EVICT: "evict"}[d.op]
            err = from_code(d.status, what=f"{what} of request {d.id}")
            if err.code == _lib.LOCUS_ESTATE:
                err = NoTableError(err.code, err.reason, what=err.what)
            self._done[d.id] = Decision(d.id, 0, 0, 0.0, False, 0, d.status, err)
            return
        sim = _F32.unpack(_U32.pack(d.aux & 0xffffffff))[0]
        self._done[d.id] = Decision(d.id, d.peer, d.count, sim,
                                    bool(d.flags & _lib.DESC_F_PARTIAL), d.blocks)

    # ---- hooks for the expert-parallel Buffer (buffer.py) -------------------------

    def _stage_alloc(self, nbytes, timeout=None):
        """(offset) of nbytes of the stage, waiting for completions to free room."""
        t = self.timeout if timeout is None else timeout
        return self._take_stage(nbytes, time.monotonic() + t)

    def _stage_free(self, off, nbytes):
        self._alloc.free(off, nbytes)

    def _submit_desc(self, desc):
        """Submit one descriptor as is: True, or False when the ring is full."""
        self._live()
        return lib.locus_client_submit(self._c, ctypes.byref(desc), 1) == 1

    def _take(self, op):
        """Descriptors of op (DISPATCH / COMBINE completions, ROWS_IN, RESULTS_IN)
        polled so far, oldest first (a deque the caller pops)."""
        return self._other.setdefault(op, deque())

    def _inbox_address(self, desc):
        """Address of a delivery's payload in our inbox (checked), or None."""
        return lib.locus_client_inbox(self._c, ctypes.byref(desc))
