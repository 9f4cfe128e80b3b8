# SPDX-License-Identifier: MIT
"""locus from Python: a serving engine's prefill, decode and expert-parallel
workers talk to their node's locusd through liblocus.so (ctypes; numpy
required, torch optional: tensor arguments are numpy arrays or CPU tensors).

    import locus
    p = locus.attach("default", prefill=True)
    d = p.route(routed_experts)        # [prompt_len, n_moe_layers, k] ints
    d.decoder, d.band, d.similarity

    dec = locus.attach("default", decoder=0)
    dec.report_load(3)
    for s in dec.poll_signatures(timeout=0.1):
        s.request_id, s.counts, s.prompt_tokens

    locus.stats("default")             # what locus-stat --json prints

    ep = locus.Buffer(locus.attach("default", rank=r), num_ranks=4)
    recv_x, recv_idx, recv_w, handle = ep.dispatch(x, topk_idx, topk_weights, layer)
    out = ep.combine(expert_outputs, handle)   # DeepEP's Buffer.dispatch / combine

    from locus import deep_ep                  # DeepEP's signatures and tuples (vLLM's)
    buf = deep_ep.Buffer(group, placement="grace.tbl")
"""
from . import deep_ep
from .buffer import BatchAborted, Buffer, Handle
from .client import Client, Decision, ReceivedSignature
from .errors import LocusError, LocusGone, LocusTimeout, NoTableError, code_name
from .stats import Counters, stats

__version__ = "0.2.0"

__all__ = ["attach", "stats", "deep_ep", "BatchAborted", "Buffer", "Handle", "Client", "Decision",
           "ReceivedSignature",
           "Counters",
           "LocusError", "LocusGone", "LocusTimeout", "NoTableError", "code_name"]


def attach(instance, *, prefill=False, decoder=None, rank=None, timeout=2.0):
    """Attach to instance's locusd as a prefiller (prefill=True), the decoder
    with id decoder, and/or the expert-parallel rank rank: one client slot for
    all the roles asked for. timeout (seconds) bounds the handshake and is the
    default bound of every later wait of the client. Refusals raise
    LocusError (e.g. LOCUS_EFULL: no free slot; EEXIST: that decoder id or
    rank is attached already; LOCUS_ERANGE: a rank outside the cluster),
    LocusGone (no locusd runs) or LocusTimeout."""
    return Client(instance, prefill=prefill, decoder=decoder, rank=rank, timeout=timeout)
