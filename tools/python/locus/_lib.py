# SPDX-License-Identifier: MIT
"""ctypes bindings of liblocus.so.0 (shm/liblocus.map): the structures, the
constants and the prototypes of the public C API, nothing else.

The library is found, in this order, at $LOCUS_LIBRARY (a path), in the
build tree this package sits in (build/lib/ of the repository, for a
checkout), then by the dynamic loader's search ("liblocus.so.0", as
`make install` puts it). Every layout below mirrors a struct of the public
headers; check_layouts() compares their sizes with the C static asserts.
"""
import ctypes
import os
from ctypes import (POINTER, Structure, c_char, c_char_p, c_double, c_int, c_long,
                    c_size_t, c_uint, c_uint8, c_uint16, c_uint32, c_uint64, c_void_p)

SONAME = "liblocus.so.0"

# ---- locus_err.h ---------------------------------------------------------------
LOCUS_E_BASE = 1000
ERROR_NAMES = {
    1001: "LOCUS_EBADMAGIC", 1002: "LOCUS_EVERSION", 1003: "LOCUS_ETRUNCATED",
    1004: "LOCUS_EWORLDWRITABLE", 1005: "LOCUS_EFOREIGN", 1006: "LOCUS_ECRC",
    1007: "LOCUS_ERANGE", 1008: "LOCUS_ENAN", 1009: "LOCUS_EFULL", 1010: "LOCUS_ENODEST",
    1011: "LOCUS_EPEERDOWN", 1012: "LOCUS_EAUTH", 1013: "LOCUS_EPROTO",
    1014: "LOCUS_EPARSE", 1015: "LOCUS_ESTATE", 1016: "LOCUS_ESTALEPLACEMENT",
}
globals().update({name: code for code, name in ERROR_NAMES.items()})
ERRMSG_MAX = 256

# ---- locus_client.h ------------------------------------------------------------
ROLE_PREFILL, ROLE_DECODE, ROLE_RANK = 1, 2, 4
OP_ROUTE, OP_DISPATCH, OP_COMBINE, OP_RELEASE, OP_ROUTE_BLOCKS, OP_EVICT = 1, 2, 3, 4, 5, 6
OP_SIGNATURE_IN, OP_ROWS_IN, OP_RESULTS_IN = 16, 17, 18
DESC_F_REGION, DESC_F_PARTIAL, DESC_F_MASK = 1, 2, 4
EXPERT_MASKED = 0xffff
CLIENT_RANK_WORDS = 64
DESC_SIZE = 64

# ---- locus_eldr.h / locus_blocks.h ---------------------------------------------
ELDR_SIG_HDR_SIZE = 32
ELDR_MAX_LAYERS, ELDR_MAX_EXPERTS, ELDR_MAX_K = 1024, 4096, 64
BLOCKS_MAX_CACHED, BLOCKS_MAX_NEW, EVICT_MAX = 16384, 256, 16384
BLOCKS_MAX_BLOCK_TOKENS = 255

# ---- locus_shm.h / locus_counters.h --------------------------------------------
SHM_RDONLY, SHM_ALLOW_GROUP = 1, 2
SHM_STATES = {1: "starting", 2: "running", 3: "stopping"}
REGION_COUNTERS = 1
CTR_RDONLY = 1
CTR_COUNTER, CTR_GAUGE, CTR_HISTOGRAM = 1, 2, 3
HIST_COUNT, HIST_SUM, HIST_BUCKET0, HIST_BUCKETS = 0, 1, 2, 64
HIST_WORDS = HIST_BUCKET0 + HIST_BUCKETS

# ---- locus_wire.h / locus_dispatch.h (rank clients) ----------------------------
MSG_SIGNATURE, MSG_DISPATCH, MSG_COMBINE = 1, 2, 3
DISPATCH_MAGIC, COMBINE_MAGIC, ROWS_MAGIC = 0x52505344, 0x52424d43, 0x53574f52
MAX_TOPK, MAX_ROW_BYTES = 32, 1 << 20
ROWS_IN_PLACE, ROWS_IN_REGION, ROWS_REFUSED, ROWS_GONE = 1, 2, 4, 8


class Error(Structure):
    _fields_ = [("code", c_int), ("msg", c_char * ERRMSG_MAX)]

    def text(self):
        return self.msg.decode("utf-8", "replace")


class Desc(Structure):
    _fields_ = [("op", c_uint8), ("flags", c_uint8), ("layer", c_uint16),
                ("status", ctypes.c_int32), ("id", c_uint64), ("off", c_uint64),
                ("len", c_uint32), ("slot", c_uint32), ("peer", c_uint32),
                ("count", c_uint32), ("aux", c_uint64), ("region", c_uint32),
                ("blocks", c_uint32), ("dests", c_uint64)]


class ClientReq(Structure):
    _fields_ = [("roles", c_uint32), ("decoder_id", c_uint32), ("rank", c_uint32),
                ("timeout_ms", c_uint32)]


class RouteReq(Structure):
    _fields_ = [("n_layers", c_uint16), ("n_experts", c_uint16), ("k", c_uint16),
                ("n_tokens", c_uint32), ("ids", c_void_p), ("allowed_decoders", c_uint64)]


IDS_U8, IDS_I8, IDS_U16, IDS_I16, IDS_U32, IDS_I32, IDS_U64, IDS_I64 = range(1, 9)


class RouteTypedReq(Structure):
    _fields_ = [("n_layers", c_uint16), ("n_experts", c_uint16), ("k", c_uint16),
                ("ids_type", c_uint16), ("n_tokens", c_uint32), ("reserved", c_uint32),
                ("ids", c_void_p), ("allowed_decoders", c_uint64)]


class Signature(Structure):
    _fields_ = [("id", c_uint64), ("slot", c_uint32), ("src_node", c_uint32),
                ("decoder_id", c_uint32), ("n_layers", c_uint16), ("n_experts", c_uint16),
                ("prompt_tokens", c_uint32), ("allowed_decoders", c_uint64),
                ("sig", c_void_p), ("sig_len", c_size_t), ("counts", c_void_p)]


class BlocksRoute(Structure):
    _fields_ = [("block_tokens", c_uint16), ("n_cached", c_uint32), ("cached", c_void_p),
                ("n_new", c_uint32), ("new_hashes", c_void_p), ("new_counts", c_void_p),
                ("tail", c_void_p)]


class Clients(Structure):
    """struct locus_clients: a client's view of its slot geometry."""
    _fields_ = [("base", c_void_p), ("size", c_uint64), ("n_slots", c_uint32),
                ("ring_size", c_uint32), ("stage_size", c_uint64), ("inbox_slots", c_uint32),
                ("inbox_slot_size", c_uint32), ("slot_stride", c_uint64),
                ("slots_off", c_uint64), ("ring_bytes", c_uint64), ("buf_off", c_uint64),
                ("buf_size", c_uint64), ("fd", c_void_p)]


class CtrInfo(Structure):
    _fields_ = [("name", c_char * 64), ("help", c_char * 128), ("label", (c_char * 32) * 2),
                ("kind", c_uint), ("ndims", c_uint32), ("dim", c_uint32 * 2),
                ("n_elems", c_uint32), ("elem_words", c_uint32), ("offset", c_uint64)]


class MsgHdr(Structure):
    _fields_ = [("magic", c_uint32), ("version", c_uint8), ("type", c_uint8),
                ("flags", c_uint16), ("payload_len", c_uint32), ("seq", c_uint32),
                ("id", c_uint64), ("src_rank", c_uint32), ("dst_rank", c_uint32)]


class DispatchReq(Structure):
    _fields_ = [("magic", c_uint32), ("layer", c_uint16), ("top_k", c_uint16),
                ("n_tokens", c_uint32), ("row_bytes", c_uint32), ("rows_off", c_uint64),
                ("batch_id", c_uint64)]


class CombineReq(Structure):
    _fields_ = [("magic", c_uint32), ("layer", c_uint16), ("reserved", c_uint16),
                ("dst_rank", c_uint32), ("n_rows", c_uint32), ("row_bytes", c_uint32),
                ("reserved2", c_uint32), ("rows_off", c_uint64), ("batch_id", c_uint64)]


class RowRef(Structure):
    _fields_ = [("token", c_uint32), ("kmask", c_uint32)]


class RowsHdr(Structure):
    _fields_ = [("magic", c_uint32), ("layer", c_uint16), ("top_k", c_uint16),
                ("n_rows", c_uint32), ("row_bytes", c_uint32), ("flags", c_uint32),
                ("chunk", c_uint16), ("n_chunks", c_uint16), ("rows_off", c_uint64),
                ("batch_id", c_uint64), ("placement_gen", c_uint64)]


class Placement(Structure):
    _fields_ = [("staged", c_uint64), ("current", c_uint64), ("free_below", c_uint64),
                ("acked", c_uint64), ("floor", c_uint64), ("part", c_uint32),
                ("reserved", c_uint32)]


class PlacementFetch(Structure):
    _fields_ = [("id", c_uint32), ("dst", c_uint16), ("src", c_uint16),
                ("old_primary", c_uint16), ("reserved", c_uint16)]


PLACEMENT_STORAGE = 0xffff


class ClientRanks(Structure):
    _fields_ = [("seq", c_uint64), ("changed_ns", c_uint64), ("n_ranks", c_uint32),
                ("n_lost", c_uint32)]


class ClientDispatchReq(Structure):
    _fields_ = [("layer", c_uint16), ("top_k", c_uint16), ("n_tokens", c_uint32),
                ("row_bytes", c_uint32), ("n_experts", c_uint32), ("rows_off", c_uint64),
                ("experts", c_void_p), ("gates", c_void_p)]


class ClientCombineReq(Structure):
    _fields_ = [("layer", c_uint16), ("dst_rank", c_uint32), ("n_rows", c_uint32),
                ("row_bytes", c_uint32), ("rows_off", c_uint64), ("refs", c_void_p)]


class ClientRows(Structure):
    _fields_ = [("op", c_uint8), ("in_place", c_uint8), ("layer", c_uint16),
                ("top_k", c_uint16), ("chunk", c_uint16), ("n_chunks", c_uint16),
                ("slot", c_uint32), ("src_rank", c_uint32), ("n_rows", c_uint32),
                ("row_bytes", c_uint32), ("batch_id", c_uint64), ("refs", c_void_p),
                ("experts", c_void_p), ("gates", c_void_p), ("rows", c_void_p),
                ("rows_off", c_uint64)]


# ---- locus_ep.h (the expert-parallel collectives) --------------------------------
EP_F32, EP_F16, EP_BF16, EP_F64 = 1, 2, 3, 4
EP_CTL_TAG = 1 << 63


class EpParams(Structure):
    _fields_ = [("rank", c_uint32), ("n_ranks", c_uint32), ("x_off", c_uint64),
                ("x_len", c_uint64), ("y_off", c_uint64), ("y_len", c_uint64),
                ("req_off", c_uint64), ("req_len", c_uint64), ("max_tokens", c_uint32),
                ("timeout_ms", c_uint32)]


class EpDispatchArgs(Structure):
    _fields_ = [("layer", c_uint16), ("top_k", c_uint16), ("n_tokens", c_uint32),
                ("row_bytes", c_uint32), ("n_experts", c_uint32), ("x", c_void_p),
                ("topk_idx", c_void_p), ("topk_weights", c_void_p), ("timeout_ms", c_uint32)]


class EpRecv(Structure):
    _fields_ = [("batch", c_uint64), ("n_recv", c_uint32), ("top_k", c_uint16),
                ("layer", c_uint16), ("row_bytes", c_uint32), ("n_masked", c_uint32),
                ("dests", c_uint64), ("rows_sent", c_uint32), ("reserved", c_uint32)]


class EpRecvOut(Structure):
    _fields_ = [("recv_x", c_void_p), ("recv_idx", c_void_p), ("recv_weights", c_void_p),
                ("per_expert", c_void_p), ("n_experts", c_uint32), ("reserved", c_uint32),
                ("refs", c_void_p), ("src_count", c_void_p)]


class EpHandleInfo(Structure):
    _fields_ = [("batch", c_uint64), ("layer", c_uint16), ("top_k", c_uint16),
                ("n_tokens", c_uint32), ("n_recv", c_uint32), ("rows_sent", c_uint32),
                ("dests", c_uint64), ("lost", c_uint64), ("n_masked", c_uint32),
                ("combined", c_uint32), ("refs", c_void_p), ("src_start", c_void_p),
                ("src_count", c_void_p), ("masked", c_void_p)]


class EpCombineArgs(Structure):
    _fields_ = [("dtype", c_uint32), ("hidden", c_uint32), ("y", c_void_p), ("out", c_void_p),
                ("timeout_ms", c_uint32)]


class EpStatus(Structure):
    _fields_ = [("next_batch", c_uint64), ("fail_batch", c_uint64), ("fail_code", ctypes.c_int32),
                ("fail_rank", c_uint32), ("in_flight", c_uint32), ("kept", c_uint32),
                ("held_bytes", c_uint64), ("aborts_sent", c_uint64), ("aborts_in", c_uint64),
                ("ctl_refused", c_uint64), ("formed", c_uint32), ("others", c_uint32)]


# The C headers' LOCUS_STATIC_ASSERTs, for the layouts above.
_SIZES = {Desc: 64, MsgHdr: 32, DispatchReq: 32, CombineReq: 40, RowsHdr: 48, RowRef: 8,
          Error: 4 + ERRMSG_MAX, ClientReq: 16, RouteTypedReq: 32, ClientDispatchReq: 40, ClientCombineReq: 32,
          ClientRows: 80, Placement: 48, ClientRanks: 24, PlacementFetch: 12, EpParams: 64,
          EpDispatchArgs: 48, EpRecv: 40, EpRecvOut: 56, EpHandleInfo: 80, EpCombineArgs: 32,
          EpStatus: 72}

_P = c_void_p
_PROTOS = {
    # locus_client.h
    "locus_client_attach": (c_int, [c_char_p, POINTER(ClientReq), POINTER(_P), POINTER(Error)]),
    "locus_client_detach": (None, [_P]),
    "locus_client_stage": (_P, [_P, POINTER(c_uint64)]),
    "locus_client_inbox": (_P, [_P, POINTER(Desc)]),
    "locus_client_submit": (c_int, [_P, POINTER(Desc), c_uint32]),
    "locus_client_poll": (c_int, [_P, POINTER(Desc), c_uint32]),
    "locus_client_check": (c_int, [_P]),
    "locus_client_release_slot": (c_int, [_P, c_uint32]),
    "locus_client_report_load": (None, [_P, c_uint32]),
    "locus_client_route": (c_int, [_P, c_uint64, POINTER(RouteReq), c_uint64, POINTER(Error)]),
    "locus_client_route_typed": (c_int, [_P, c_uint64, POINTER(RouteTypedReq), c_uint64,
                                         POINTER(Error)]),
    "locus_client_poll_until": (c_int, [_P, POINTER(Desc), c_uint32, c_uint8, c_uint64,
                                        c_uint64, c_uint64]),
    "locus_client_signature_in": (c_int, [_P, POINTER(Desc), POINTER(Signature),
                                          POINTER(Error)]),
    "locus_client_route_blocks": (c_int, [_P, c_uint64, POINTER(BlocksRoute), c_uint64,
                                          POINTER(Error)]),
    "locus_client_evict": (c_int, [_P, c_uint64, _P, c_uint32, c_uint64, POINTER(Error)]),
    "locus_client_dispatch": (c_int, [_P, c_uint64, POINTER(ClientDispatchReq), c_uint64,
                                      POINTER(Error)]),
    "locus_client_dispatch_ex": (c_int, [_P, c_uint64, POINTER(ClientDispatchReq), c_uint64,
                                         c_uint32, POINTER(Error)]),
    "locus_client_dispatch_ids": (_P, [_P, c_uint64]),
    "locus_client_combine": (c_int, [_P, c_uint64, POINTER(ClientCombineReq), c_uint64,
                                     POINTER(Error)]),
    "locus_client_rows_in": (c_int, [_P, POINTER(Desc), POINTER(ClientRows), POINTER(Error)]),
    "locus_client_register_dmabuf": (c_int, [_P, c_int, c_uint64, c_uint64, c_uint32,
                                             POINTER(c_uint32), POINTER(c_uint32),
                                             POINTER(Error)]),
    "locus_client_unregister_region": (c_int, [_P, c_uint32, c_uint32, POINTER(Error)]),
    "locus_client_slot": (c_uint32, [_P]),
    "locus_client_generation": (c_uint64, [_P]),
    "locus_client_instance": (c_char_p, [_P]),
    "locus_client_region": (POINTER(Clients), [_P]),
    "locus_client_placement": (c_int, [_P, POINTER(Placement)]),
    "locus_client_placement_join": (c_int, [_P]),
    "locus_client_ranks": (c_int, [_P, POINTER(c_uint64), c_uint32, POINTER(ClientRanks)]),
    "locus_client_placement_ack": (c_int, [_P, c_uint64]),
    "locus_client_placement_release": (c_int, [_P, c_uint64]),
    "locus_client_placement_table": (c_int, [_P, c_uint64, POINTER(_P), POINTER(c_size_t),
                                             POINTER(Error)]),
    # locus_ep.h
    "locus_ep_create": (c_int, [_P, POINTER(EpParams), POINTER(_P), POINTER(Error)]),
    "locus_ep_destroy": (None, [_P]),
    "locus_ep_dispatch_begin": (ctypes.c_int64, [_P, POINTER(EpDispatchArgs), POINTER(Error)]),
    "locus_ep_dispatch_poll": (c_int, [_P, POINTER(EpRecv), POINTER(Error)]),
    "locus_ep_dispatch_wait": (c_int, [_P, POINTER(EpRecv), POINTER(Error)]),
    "locus_ep_dispatch_end": (c_int, [_P, POINTER(EpRecvOut), POINTER(_P), POINTER(Error)]),
    "locus_ep_handle_info": (None, [_P, POINTER(EpHandleInfo)]),
    "locus_ep_handle_free": (None, [_P]),
    "locus_ep_combine_begin": (c_int, [_P, _P, POINTER(EpCombineArgs), POINTER(Error)]),
    "locus_ep_combine_poll": (c_int, [_P, POINTER(Error)]),
    "locus_ep_combine_wait": (c_int, [_P, POINTER(Error)]),
    "locus_ep_combine": (c_int, [_P, _P, POINTER(EpCombineArgs), POINTER(Error)]),
    "locus_ep_abort": (c_int, [_P, c_uint64, c_int, c_char_p]),
    "locus_ep_take": (c_int, [_P, POINTER(Desc)]),
    "locus_ep_others": (c_uint32, [_P, POINTER(Desc), c_uint32]),
    "locus_ep_status": (None, [_P, POINTER(EpStatus)]),
    "locus_ep_active": (c_uint64, [_P]),
    "locus_ep_pump": (c_int, [_P]),
    "locus_ep_set_max_tokens": (c_int, [_P, c_uint32]),
    "locus_ep_dispatch_refuse": (ctypes.c_int64, [_P, c_int, c_char_p]),
    # locus_grace.h
    "locus_grace_blob_check": (c_int, [_P, c_size_t, POINTER(_P), POINTER(c_size_t),
                                       POINTER(Error)]),
    # locus_placement.h
    "locus_placement_fetches": (c_int, [_P, c_size_t, _P, c_size_t, POINTER(c_uint64),
                                        POINTER(PlacementFetch), c_uint32, POINTER(c_uint32),
                                        POINTER(Error)]),
    "locus_placement_rank_moves": (c_int, [_P, c_size_t, _P, c_size_t, c_uint32,
                                           POINTER(c_uint32), POINTER(c_uint32),
                                           POINTER(c_uint32), POINTER(c_uint32), c_uint32,
                                           POINTER(Error)]),
    # locus_err.h
    "locus_strerror": (c_char_p, [c_int]),
    # locus_eldr.h / locus_blocks.h
    "locus_eldr_sig_build": (c_long, [_P, c_size_t, c_uint16, c_uint16, c_uint16, _P,
                                      c_uint32, c_uint64, POINTER(Error)]),
    "locus_eldr_sig_check": (c_int, [_P, c_size_t, c_uint16, c_uint16, POINTER(Error)]),
    "locus_blocks_req_len": (c_size_t, [c_uint32, c_uint32, c_uint32, c_uint32]),
    "locus_blocks_counts_build": (c_int, [_P, c_uint16, c_uint16, c_uint16, _P, c_uint32,
                                          POINTER(Error)]),
    # locus_shm.h / locus_counters.h
    "locus_shm_attach": (c_int, [c_char_p, c_uint, POINTER(_P), POINTER(Error)]),
    "locus_shm_detach": (None, [_P]),
    "locus_shm_region": (_P, [_P, c_int, POINTER(c_size_t)]),
    "locus_shm_state": (c_int, [_P]),
    "locus_shm_owner_pid": (c_int, [_P]),
    "locus_shm_start_time_ns": (c_uint64, [_P]),
    "locus_shm_check_name": (c_int, [c_char_p]),
    "locus_counters_open": (c_int, [_P, c_size_t, c_uint, POINTER(_P), POINTER(Error)]),
    "locus_counters_close": (None, [_P]),
    "locus_counters_refresh": (c_int, [_P, POINTER(Error)]),
    "locus_counters_find": (c_int, [_P, c_char_p]),
    "locus_counters_n_blocks": (c_uint32, [_P]),
    "locus_counters_n_entries": (c_uint32, [_P]),
    "locus_counters_info": (POINTER(CtrInfo), [_P, c_uint32]),
    "locus_counters_sum": (c_int, [_P, c_uint32, POINTER(c_uint64), c_size_t]),
    "locus_ctr_kind_name": (c_char_p, [c_uint]),
    "locus_hist_quantile": (c_double, [POINTER(c_uint64), c_double]),
    # locus_dispatch.h (the Buffer's rows messages)
    "locus_rows_msg_check": (c_int, [_P, c_size_t, c_uint32, c_uint64, POINTER(Error)]),
    "locus_dispatch_req_check": (c_int, [_P, _P, c_size_t, c_uint64, c_uint32, c_uint32,
                                         c_uint32, POINTER(Error)]),
    "locus_combine_req_check": (c_int, [_P, _P, c_size_t, c_uint64, c_uint32, c_uint32,
                                        POINTER(Error)]),
}


def _candidates():
    env = os.environ.get("LOCUS_LIBRARY")
    if env:
        return [env]
    pkg = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(os.path.dirname(pkg)))
    here = os.path.join(repo, os.environ.get("BUILD", "build"), "lib", SONAME)
    in_checkout = (os.path.join(repo, "tools", "python", "locus") == pkg and
                   os.path.exists(os.path.join(repo, "shm", "liblocus.map")))
    return ([here] if in_checkout and os.path.exists(here) else []) + [SONAME]


def _load():
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError as e:
            errors.append(f"{path}: {e}")
    else:
        raise ImportError("locus: cannot load the client library (" + "; ".join(errors) +
                          "); build it with make, install it with make install, or set "
                          "LOCUS_LIBRARY to its path")
    for name, (res, args) in _PROTOS.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    return lib


lib = _load()


def check_layouts():
    """Raise AssertionError if a mirrored struct's size differs from the C one."""
    for st, size in _SIZES.items():
        assert ctypes.sizeof(st) == size, f"{st.__name__}: {ctypes.sizeof(st)} != {size}"


check_layouts()


def strerror(code):
    """locus_strerror: the name of -code or code (errno or LOCUS_E*)."""
    return lib.locus_strerror(int(code)).decode()
