#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A prefill/decode disaggregation proxy that picks the decode server with
locus: an OpenAI-compatible POST /v1/completions sends the request to a
prefill server (max_tokens 1, not streamed), routes the prompt's routed
experts the prefill server returned through locusd's ELDR router, and
forwards the request to the decode server locus chose, streaming its answer
back.

    pd_proxy.py -i INSTANCE --port 8000 \\
        --prefiller-hosts localhost --prefiller-ports 8100 \\
        --decoder-hosts localhost localhost --decoder-ports 8200 8201

Decode server i is locus decoder id i. The prefill servers must be vLLM
started with --enable-return-routed-experts (and the KV connector of your
deployment, e.g. --kv-transfer-config '{"kv_connector":"NixlConnector",
"kv_role":"kv_both"}'); locusd must run with an ELDR table of as many
decoders (locusctl fit --decoders N, locusctl push).

The shape follows vLLM's own proxies: tests/v1/kv_connector/nixl_integration/
toy_proxy_server.py (vllm-project/vllm @ e0099301) for the request flow: the
prefill copy gets max_tokens 1, stream False, no stream_options and
kv_transfer_params {"do_remote_decode": true, "do_remote_prefill": false,
"remote_engine_id": null, "remote_block_ids": null, "remote_host": null,
"remote_port": null}; the prefill response's kv_transfer_params go into the
decode request unchanged; X-Request-Id and Authorization (OPENAI_API_KEY)
headers on both; GET /healthcheck. benchmarks/disagg_benchmarks/
disagg_prefill_proxy_server.py for max_completion_tokens (set to 1 too).
The routed experts are read as vLLM's CompletionResponseChoice.routed_experts
(vllm/entrypoints/openai/completion/protocol.py @ 002032ee): a base64 string
of .npy bytes, np.load(io.BytesIO(base64.b64decode(s))), shape (num_tokens -
1, num_layers, num_experts_per_tok), i.e. [prompt_len, L, k] for a prefill of
max_tokens 1; releases that return the response-level prompt_routed_experts
as nested lists (chat completions of vLLM 0.21: [prompt_len, L, k]) are read
too. Prefix caching: vLLM keeps the routings beside the KV slots, so a local
prefix-cache hit still returns the whole prompt's routing (the routing
capture supports prefix caching, vllm-project/vllm#28284; the slot indexing
is described in #39568, which also warns that KV loaded from elsewhere, as
in P/D transfer or offload, can come with a stale routing). The opt-in
--enable-omit-prefix-routed-experts (#57966, open as of 2026-12) returns
only the tokens after the cached prefix: that is the case the client's
cached_blocks / new_blocks (the signature cache) are for.

By default the proxy also stands in for the decode servers' side of locus:
it attaches as decoder i for each decode server, reports as its load the
requests it has in flight to that server, and takes the signatures locusd
delivers (--no-decoder-agents when the decode servers attach themselves).
"""
import argparse
import asyncio
import base64
import io
import itertools
import json
import logging
import os
import sys
import uuid

import aiohttp
import numpy as np
from aiohttp import web

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import locus  # noqa: E402  (the package of this checkout, else the installed one)

log = logging.getLogger("pd_proxy")


class NoRouting(Exception):
    """The prefill response carried no routed experts."""


def routed_experts_of(body):
    """[prompt_len, n_moe_layers, k] int array from a vLLM completion response."""
    prompt_len = (body.get("usage") or {}).get("prompt_tokens")
    raw = body.get("prompt_routed_experts")
    if raw is None:
        choices = body.get("choices") or [{}]
        raw = choices[0].get("routed_experts")
    if raw is None:
        raise NoRouting("the prefill response has no routed experts (neither "
                        "choices[0].routed_experts nor prompt_routed_experts): start vLLM "
                        "with --enable-return-routed-experts")
    if isinstance(raw, str):
        arr = np.load(io.BytesIO(base64.b64decode(raw)), allow_pickle=False)
    else:
        arr = np.asarray(raw)
    if arr.ndim != 3 or not np.issubdtype(arr.dtype, np.integer):
        raise NoRouting(f"routed experts of shape {arr.shape} and type {arr.dtype}: "
                        "[tokens, layers, k] integers expected")
    if prompt_len and arr.shape[0] > prompt_len:
        arr = arr[:prompt_len]  # the prompt's tokens (a longer prefill counts one more)
    return arr


class Proxy:
    def __init__(self, a):
        self.a = a
        self.prefill = [f"http://{h}:{p}/v1" for h, p in zip(a.prefiller_hosts,
                                                             a.prefiller_ports)]
        self.decode = [f"http://{h}:{p}/v1" for h, p in zip(a.decoder_hosts, a.decoder_ports)]
        self.next_prefill = itertools.cycle(range(len(self.prefill)))
        self.next_decode = itertools.cycle(range(len(self.decode)))
        self.inflight = [0] * len(self.decode)
        self.signatures = [0] * len(self.decode)
        self.routed = [0] * len(self.decode)
        self.fallbacks = 0
        self.router = None
        self.agents = []
        self.session = None

    # ---- locus --------------------------------------------------------------------

    async def start(self, app):
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.a.timeout))
        self.router = locus.attach(self.a.instance, prefill=True, timeout=self.a.locus_timeout)
        if self.a.decoder_agents:
            self.agents = [locus.attach(self.a.instance, decoder=i,
                                        timeout=self.a.locus_timeout)
                           for i in range(len(self.decode))]
            for i in range(len(self.decode)):
                self.agents[i].report_load(0)
            app["agents_task"] = asyncio.create_task(self.agents_loop())

    async def stop(self, app):
        task = app.get("agents_task")
        if task:
            task.cancel()
        for c in self.agents + [self.router]:
            if c is not None:
                c.close()
        await self.session.close()

    async def agents_loop(self):
        """The decode servers' side of locus: loads reported (also unchanged, so
        locusd keeps them up), delivered signatures taken."""
        while True:
            for i, c in enumerate(self.agents):
                c.report_load(self.inflight[i])
                self.signatures[i] += len(c.poll_signatures(max=256))
            await asyncio.sleep(self.a.report_interval)

    def report(self, i):
        if self.agents:
            self.agents[i].report_load(self.inflight[i])

    async def choose(self, routed):
        """(decode server index, how it was chosen)."""
        loop = asyncio.get_running_loop()
        try:
            d = await loop.run_in_executor(None, self.router.route, routed)
        except (locus.LocusError, ValueError) as e:
            # locus cannot route it (no table, no decoder up, a shape the table does not
            # have): the request is still served, round robin, and the reason logged
            self.fallbacks += 1
            log.warning("locus did not route the request: %s; round robin", e)
            return next(self.next_decode), f"fallback: {e}"
        if d.decoder >= len(self.decode):
            self.fallbacks += 1
            return next(self.next_decode), f"fallback: decoder {d.decoder} has no server"
        self.routed[d.decoder] += 1
        return d.decoder, f"locus band {d.band} similarity {d.similarity:.4f}"

    # ---- HTTP ---------------------------------------------------------------------

    def headers(self, request_id):
        h = {"X-Request-Id": request_id}
        key = os.environ.get("OPENAI_API_KEY")
        if key:
            h["Authorization"] = f"Bearer {key}"
        return h

    async def completions(self, request):
        try:
            req = await request.json()
        except (json.JSONDecodeError, aiohttp.ContentTypeError):
            return web.json_response({"error": "the request body is not JSON"}, status=400)
        if not isinstance(req, dict):
            return web.json_response({"error": "the request body is not a JSON object"},
                                     status=400)
        request_id = request.headers.get("X-Request-Id") or str(uuid.uuid4())
        headers = self.headers(request_id)

        pre = dict(req)
        pre["kv_transfer_params"] = {"do_remote_decode": True, "do_remote_prefill": False,
                                     "remote_engine_id": None, "remote_block_ids": None,
                                     "remote_host": None, "remote_port": None}
        pre["stream"] = False
        pre["max_tokens"] = 1
        if "max_completion_tokens" in pre:
            pre["max_completion_tokens"] = 1
        pre.pop("stream_options", None)
        url = self.prefill[next(self.next_prefill)] + "/completions"
        try:
            async with self.session.post(url, json=pre, headers=headers) as resp:
                if resp.status != 200:
                    text = await resp.text()
                    return web.json_response({"error": f"prefill server {url}: {resp.status} "
                                              f"{text[:500]}"}, status=502)
                body = await resp.json(content_type=None)
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            return web.json_response({"error": f"prefill server {url}: {e!r}"}, status=502)
        try:
            routed = routed_experts_of(body)
        except (NoRouting, ValueError) as e:
            return web.json_response({"error": str(e)}, status=502)

        i, how = await self.choose(routed)
        dec = dict(req)
        if body.get("kv_transfer_params"):
            dec["kv_transfer_params"] = body["kv_transfer_params"]
        url = self.decode[i] + "/completions"
        self.inflight[i] += 1
        self.report(i)
        try:
            async with self.session.post(url, json=dec, headers=headers) as resp:
                out = web.StreamResponse(status=resp.status, headers={
                    "Content-Type": resp.headers.get("Content-Type", "application/json"),
                    "X-Locus-Decoder": str(i), "X-Locus-Route": how})
                await out.prepare(request)
                async for chunk in resp.content.iter_any():
                    await out.write(chunk)
                await out.write_eof()
                return out
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            return web.json_response({"error": f"decode server {url}: {e!r}"}, status=502)
        finally:
            self.inflight[i] -= 1
            self.report(i)

    async def healthcheck(self, request):
        return web.json_response({
            "status": "ok", "prefill_instances": len(self.prefill),
            "decode_instances": len(self.decode), "routed_by_locus": self.routed,
            "fallbacks": self.fallbacks, "in_flight": self.inflight,
            "signatures_delivered": self.signatures})


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
    p.add_argument("--timeout", type=float, default=6 * 60 * 60,
                   help="bound on a backend request, s")
    p.add_argument("--locus-timeout", type=float, default=2.0, help="bound on a locus wait, s")
    p.add_argument("--report-interval", type=float, default=0.05,
                   help="decoder agents: load reports and signature polls, s")
    p.add_argument("--no-decoder-agents", dest="decoder_agents", action="store_false",
                   help="the decode servers attach to locusd as decoders themselves")
    a = p.parse_args(argv)
    for kind in ("prefiller", "decoder"):
        if len(getattr(a, f"{kind}_hosts")) != len(getattr(a, f"{kind}_ports")):
            p.error(f"--{kind}-hosts and --{kind}-ports must have the same length")
    return a


def main(argv=None):
    logging.basicConfig(level=logging.INFO, format="pd_proxy: %(message)s")
    a = parse_args(argv)
    proxy = Proxy(a)
    app = web.Application()
    app.router.add_post("/v1/completions", proxy.completions)
    app.router.add_get("/healthcheck", proxy.healthcheck)
    app.on_startup.append(proxy.start)
    app.on_cleanup.append(proxy.stop)
    web.run_app(app, host=a.host, port=a.port, print=lambda *x: log.info(
        "listening on http://%s:%d, %d prefill and %d decode servers, locusd %s", a.host,
        a.port, len(proxy.prefill), len(proxy.decode), a.instance))


if __name__ == "__main__":
    main()
