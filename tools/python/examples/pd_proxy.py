#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A prefill/decode disaggregation proxy that picks the decode server with
locus: POST /v1/completions and /v1/chat/completions go to a prefill server
(max_tokens 1, not streamed), the prompt's routed experts it returns are
routed through locusd's ELDR router, and the request goes to the decode
server locus chose, its answer streamed back.

    pd_proxy.py -i INSTANCE --port 8000 \\
        --prefiller-hosts localhost --prefiller-ports 8100 \\
        --decoder-hosts localhost localhost --decoder-ports 8200 8201

Decode server i is locus decoder id i. The prefill servers must return the
routed experts: vLLM started with --enable-return-routed-experts (and the KV
connector of your deployment, e.g. --kv-transfer-config
'{"kv_connector":"NixlConnector","kv_role":"kv_both"}'), or SGLang with
--enable-return-routed-experts and this proxy with --ask-routed-experts.
locusd must run with an ELDR table of as many decoders (locusctl fit
--decoders N, locusctl push).

The proxy itself is locus/proxy_server.py (what it does when locusd
restarts, what /healthcheck answers, where the loads come from); the routed
experts it reads, and the layer map, are in locus/proxy_inputs.py.

Prefix caching: vLLM keeps the routings beside the KV slots, so a local
prefix-cache hit still returns the whole prompt's routing (the routing
capture supports prefix caching, vllm-project/vllm#28284; the slot indexing
is described in #39568, which also warns that KV loaded from elsewhere, as
in P/D transfer or offload, can come with a stale routing). The opt-in
--enable-omit-prefix-routed-experts (#57966, open as of 2026-12) returns
only the tokens after the cached prefix: that is the case the client's
cached_blocks / new_blocks (the signature cache) are for.
"""
import argparse
import logging
import os
import sys

from aiohttp import web

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from locus import proxy_server  # noqa: E402  (the package of this checkout, else the installed one)
from locus.proxy_inputs import parse_layers  # noqa: E402

log = logging.getLogger("pd_proxy")


def _seconds(lo, hi):
    def parse(text):
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{v} s is out of range ({lo}..{hi})")
        return v
    return parse


def _layers(text):
    try:
        return parse_layers(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _top_k(text):
    try:
        k = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 1 <= k <= 64:
        raise argparse.ArgumentTypeError(f"top-k {k} is out of range (1..64)")
    return k


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-i", "--instance", required=True, help="the locusd instance")
    p.add_argument("--host", default="localhost")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--prefiller-hosts", "--prefiller-host", nargs="+", default=["localhost"])
    p.add_argument("--prefiller-ports", "--prefiller-port", type=int, nargs="+",
                   default=[8100])
    p.add_argument("--decoder-hosts", "--decoder-host", nargs="+", default=["localhost"])
    p.add_argument("--decoder-ports", "--decoder-port", type=int, nargs="+", default=[8200])
    p.add_argument("--timeout", type=_seconds(0.1, 7 * 24 * 3600), default=6 * 60 * 60,
                   help="bound on a backend request, s")
    p.add_argument("--locus-timeout", type=_seconds(0.01, 60), default=2.0,
                   help="bound on a locus wait (attach, route), s")
    p.add_argument("--report-interval", type=_seconds(0.001, 10), default=0.05,
                   help="decoder agents: load reports and signature polls; how often a lost "
                   "locusd is noticed, s")
    p.add_argument("--no-decoder-agents", dest="decoder_agents", action="store_false",
                   help="the decode servers attach to locusd as decoders themselves")
    p.add_argument("--reattach-min", type=_seconds(0.001, 60), default=0.1,
                   help="first delay before attaching to locusd again, s (doubles per "
                   "failure, jittered)")
    p.add_argument("--reattach-max", type=_seconds(0.001, 600), default=5.0,
                   help="longest delay between attach attempts, s")
    p.add_argument("--moe-layers", type=_layers, default=None,
                   help="which layer rows of the returned routed experts are the table's MoE "
                   "layers, e.g. 1-26 (default: all rows when they are as many as the "
                   "table's layers, else the rows that are not dense-layer placeholders)")
    p.add_argument("--top-k", type=_top_k, default=None,
                   help="experts per token: shapes SGLang's flat routed experts when the "
                   "layer map does not")
    p.add_argument("--ask-routed-experts", action="store_true",
                   help='add "return_routed_experts": true to the prefill request (SGLang '
                   "asks for it per request)")
    p.add_argument("--metrics-interval", type=_seconds(0, 3600), default=1.0,
                   help="how often each decode server's /metrics is read for its load, s "
                   "(0: never; the load is then the proxy's requests in flight)")
    p.add_argument("--metrics-max-age", type=_seconds(0.001, 3600), default=None,
                   help="metrics older than this are stale and the load falls back to the "
                   "requests in flight, s (default: 3 intervals)")
    p.add_argument("--kv-weight", type=float, default=0.0,
                   help="requests a full KV cache adds to a decode server's load (its KV "
                   "usage 0..1 times this)")
    p.add_argument("--record", metavar="FILE", default=None,
                   help="write each routed request's routed experts (and the decode server "
                   "that answered) to FILE as a trace locusctl fit --trace reads")
    a = p.parse_args(argv)
    if a.reattach_max < a.reattach_min:
        p.error("--reattach-max must be at least --reattach-min")
    if not 0 <= a.kv_weight <= 1e6 or a.kv_weight != a.kv_weight:
        p.error(f"--kv-weight {a.kv_weight} is out of range (0..1e6)")
    if a.metrics_max_age is None:
        a.metrics_max_age = 3 * a.metrics_interval
    for kind in ("prefiller", "decoder"):
        if len(getattr(a, f"{kind}_hosts")) != len(getattr(a, f"{kind}_ports")):
            p.error(f"--{kind}-hosts and --{kind}-ports must have the same length")
    if len(a.decoder_ports) > 64:
        p.error(f"{len(a.decoder_ports)} decode servers: locus routes to 64 decoders at most")
    return a


def main(argv=None):
    logging.basicConfig(level=logging.INFO, format="pd_proxy: %(message)s")
    a = parse_args(argv)
    web.run_app(proxy_server.app(a), host=a.host, port=a.port, print=lambda *x: log.info(
        "listening on http://%s:%d, %d prefill and %d decode servers, locusd %s", a.host,
        a.port, len(a.prefiller_ports), len(a.decoder_ports), a.instance))


if __name__ == "__main__":
    main()
