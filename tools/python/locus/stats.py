# SPDX-License-Identifier: MIT
"""Counters read straight from an instance's segment (read-only), as
locus-stat reads them: locus.stats(instance) is the object `locus-stat -i
INSTANCE --json` prints, as a dict."""
import ctypes
import math
import time

from . import _lib
from ._lib import lib
from .errors import LocusError, from_code


def _check_instance(instance):
    if not isinstance(instance, str):
        raise TypeError(f"instance must be a str, not {type(instance).__name__}")
    if lib.locus_shm_check_name(instance.encode()) != 0:
        raise ValueError(f"instance name {instance!r} is not valid ([A-Za-z0-9_.-], 1..63 "
                         "characters, not '.' or '..')")
    return instance.encode()


class Counters:
    """A read-only view of instance's counters: the segment mapped PROT_READ."""

    def __init__(self, instance):
        self._shm = ctypes.c_void_p()
        self._ctr = ctypes.c_void_p()
        name = _check_instance(instance)
        self.instance = instance
        err = _lib.Error()
        ret = lib.locus_shm_attach(name, _lib.SHM_RDONLY | _lib.SHM_ALLOW_GROUP,
                                   ctypes.byref(self._shm), ctypes.byref(err))
        if ret < 0:
            raise from_code(ret, err.text() or None, what=f"instance {instance}")
        size = ctypes.c_size_t()
        region = lib.locus_shm_region(self._shm, _lib.REGION_COUNTERS, ctypes.byref(size))
        if not region or size.value < 8 or ctypes.c_uint64.from_address(region).value == 0:
            self.close()
            raise LocusError(_lib.LOCUS_ESTATE, f"instance {instance} has no counters yet "
                             "(locusd is starting)")
        ret = lib.locus_counters_open(region, size, _lib.CTR_RDONLY, ctypes.byref(self._ctr),
                                      ctypes.byref(err))
        if ret < 0:
            self.close()
            raise from_code(ret, err.text() or None, what=f"instance {instance}: counters")
        self._index = {}
        self._words = (ctypes.c_uint64 * 64)()

    def close(self):
        if self._ctr:
            lib.locus_counters_close(self._ctr)
            self._ctr = ctypes.c_void_p()
        if self._shm:
            lib.locus_shm_detach(self._shm)
            self._shm = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    def refresh(self):
        err = _lib.Error()
        ret = lib.locus_counters_refresh(self._ctr, ctypes.byref(err))
        if ret < 0:
            raise from_code(ret, err.text() or None, what=f"instance {self.instance}: counters")

    def entry_words(self, idx):
        """(info, words) of directory entry idx, summed over the lcore blocks."""
        info = lib.locus_counters_info(self._ctr, idx).contents
        n = info.n_elems * info.elem_words
        buf = self._words if n <= len(self._words) else (ctypes.c_uint64 * n)()
        ret = lib.locus_counters_sum(self._ctr, idx, buf, len(buf))
        if ret < 0:
            raise from_code(ret, what=f"counter {info.name.decode()}")
        return info, buf[:n]

    def value(self, name, elem=0):
        """Element elem of counter name (a gauge as a signed value); None if absent."""
        ent = self._index.get(name)
        if ent is None:
            idx = lib.locus_counters_find(self._ctr, name.encode())
            if idx < 0:
                self.refresh()
                idx = lib.locus_counters_find(self._ctr, name.encode())
                if idx < 0:
                    return None
            info = lib.locus_counters_info(self._ctr, idx).contents
            n = info.n_elems * info.elem_words
            # (index, words, kind, a buffer of the entry's size): a route reads the table's
            # shape through here on every call, so nothing is looked up or copied twice
            ent = (idx, n, info.elem_words, info.kind,
                   self._words if n <= len(self._words) else (ctypes.c_uint64 * n)(),
                   info.name.decode())
            self._index[name] = ent
        idx, n, ew, kind, buf, cname = ent
        if not 0 <= elem * ew < n:
            raise IndexError(f"counter {cname} has {n // ew} elements, not {elem + 1}")
        ret = lib.locus_counters_sum(self._ctr, idx, buf, len(buf))
        if ret < 0:
            raise from_code(ret, what=f"counter {cname}")
        v = buf[elem * ew]
        return v - (1 << 64) if kind == _lib.CTR_GAUGE and v >= 1 << 63 else v

    def snapshot(self):
        """The dict locus-stat --json prints."""
        self.refresh()
        metrics = [_metric(*self.entry_words(i))
                   for i in range(lib.locus_counters_n_entries(self._ctr))]
        now = time.time_ns()
        start = lib.locus_shm_start_time_ns(self._shm)
        return {
            "instance": self.instance,
            "state": _lib.SHM_STATES.get(lib.locus_shm_state(self._shm), "unknown"),
            "owner_pid": lib.locus_shm_owner_pid(self._shm),
            "start_time_ns": start,
            "time_ns": now,
            "uptime_s": (now - start) / 1e9 if now > start else 0,
            "lcore_blocks": lib.locus_counters_n_blocks(self._ctr),
            "entries": lib.locus_counters_n_entries(self._ctr),
            "metrics": metrics,
        }


def _num(x):
    return x if math.isfinite(x) else None


def _hist(w):
    buckets = w[_lib.HIST_BUCKET0:_lib.HIST_WORDS]
    n = sum(buckets)  # the buckets read in this pass, as locus-stat counts them
    arr = (ctypes.c_uint64 * _lib.HIST_WORDS)(*w)
    out = {"count": n, "sum": w[_lib.HIST_SUM], "mean": w[_lib.HIST_SUM] / n if n else None,
           "p50": _num(lib.locus_hist_quantile(arr, 0.5)),
           "p99": _num(lib.locus_hist_quantile(arr, 0.99))}
    out["buckets"] = [[(1 << 64) - 1 if i == _lib.HIST_BUCKETS - 1 else
                       (0 if i == 0 else (1 << i) - 1), c]
                      for i, c in enumerate(buckets) if c]
    return out


def _metric(info, w):
    kind = info.kind
    ew = info.elem_words

    def elem(k):
        v = w[k * ew:(k + 1) * ew]
        if kind == _lib.CTR_HISTOGRAM:
            return _hist(v)
        if kind == _lib.CTR_GAUGE and v[0] >= 1 << 63:
            return v[0] - (1 << 64)
        return v[0]

    m = {"name": info.name.decode(), "kind": lib.locus_ctr_kind_name(kind).decode(),
         "help": info.help.decode(),
         "labels": [info.label[d].value.decode() for d in range(info.ndims)],
         "shape": [info.dim[d] for d in range(info.ndims)]}
    if info.ndims == 0:
        m["value"] = elem(0)
    elif info.ndims == 1:
        m["values"] = [elem(k) for k in range(info.n_elems)]
    else:
        row = info.dim[1]
        m["values"] = [[elem(r * row + j) for j in range(row)] for r in range(info.dim[0])]
    return m


def stats(instance):
    """The counters of instance as a dict: what `locus-stat -i INSTANCE --json`
    prints (instance, state, owner_pid, start_time_ns, time_ns, uptime_s,
    lcore_blocks, entries, metrics: name, kind, help, labels, shape, value or
    values; histograms as count, sum, mean, p50, p99, buckets)."""
    with Counters(instance) as c:
        return c.snapshot()
