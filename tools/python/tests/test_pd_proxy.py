# SPDX-License-Identifier: MIT
"""examples/pd_proxy.py end to end, run as a user runs it, against small
aiohttp servers standing in for vLLM: the prefill server answers each prompt
with the routing of one request of the repository's trace, in vLLM's
formats (choices[0].routed_experts as base64 .npy, or prompt_routed_experts
as nested lists); four decode servers answer as themselves. The decode
server the proxy picks must be the C router's decision for that request
(tools/python/tests/route_ref.c, loads all 0), and the request it gets must
carry the prefill's kv_transfer_params."""
import asyncio
import base64
import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

import locus
from conftest import REPO, wait_for
from test_route import reference

aiohttp = pytest.importorskip("aiohttp")
from aiohttp import web  # noqa: E402

PROXY = os.path.join(REPO, "tools", "python", "examples", "pd_proxy.py")
DECODERS = 4


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def npy_b64(a):
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return base64.b64encode(buf.getvalue()).decode()


class Backends:
    """The prefill server and the decode servers on one event loop in a thread."""

    def __init__(self, reqs):
        self.reqs = reqs
        self.prefill_seen, self.decode_seen = [], []
        self.no_routing = False
        self.prefill_port = free_port()
        self.decode_ports = [free_port() for _ in range(DECODERS)]
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.ready.wait(10)

    def _run(self):
        asyncio.set_event_loop(self.loop)
        self.runners = []

        async def up():
            app = web.Application()
            app.router.add_post("/v1/completions", self.prefill)
            await self._serve(app, self.prefill_port)
            for i, port in enumerate(self.decode_ports):
                app = web.Application()
                app.router.add_post("/v1/completions", self._decode_handler(i))
                await self._serve(app, port)
        self.loop.run_until_complete(up())
        self.ready.set()
        self.loop.run_forever()

    async def _serve(self, app, port):
        r = web.AppRunner(app)
        await r.setup()
        await web.TCPSite(r, "127.0.0.1", port).start()
        self.runners.append(r)

    def stop(self):
        async def down():
            for r in self.runners:
                await r.cleanup()
        asyncio.run_coroutine_threadsafe(down(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    async def prefill(self, request):
        body = await request.json()
        self.prefill_seen.append((body, dict(request.headers)))
        n = int(body["prompt"].split()[-1])
        ids = self.reqs[n]
        kv = {"do_remote_prefill": True, "do_remote_decode": False,
              "remote_engine_id": "prefill-0", "remote_block_ids": [n, n + 1],
              "remote_host": "127.0.0.1", "remote_port": 5600, "tp_size": 1}
        out = {"id": f"cmpl-{n}", "object": "text_completion", "model": body["model"],
               "choices": [{"index": 0, "text": "!", "finish_reason": "length"}],
               "usage": {"prompt_tokens": len(ids), "completion_tokens": 1,
                         "total_tokens": len(ids) + 1},
               "kv_transfer_params": kv}
        if self.no_routing:
            pass
        elif n % 2 == 0:
            # vLLM's CompletionResponseChoice.routed_experts: base64 .npy, [prompt_len, L, k]
            out["choices"][0]["routed_experts"] = npy_b64(ids.astype(np.int32))
        else:
            # releases with the response-level nested lists
            out["prompt_routed_experts"] = ids.tolist()
        return web.json_response(out)

    def _decode_handler(self, i):
        async def decode(request):
            body = await request.json()
            self.decode_seen.append((i, body, dict(request.headers)))
            if body.get("stream"):
                r = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                await r.prepare(request)
                for w in ("decoded", " by", f" {i}"):
                    chunk = {"object": "text_completion", "choices": [{"index": 0, "text": w}]}
                    await r.write(f"data: {json.dumps(chunk)}\n\n".encode())
                await r.write(b"data: [DONE]\n\n")
                await r.write_eof()
                return r
            return web.json_response({"object": "text_completion", "choices": [
                {"index": 0, "text": f"decoded by {i}", "finish_reason": "length"}]})
        return decode


def post(port, body, timeout=30):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


@pytest.fixture
def setup(fresh, trace):
    d = fresh("load_timeout_ms = 60000\n")
    _, reqs = trace
    be = Backends(reqs)
    port = free_port()
    args = [sys.executable, PROXY, "-i", d.instance, "--port", str(port), "--host", "127.0.0.1",
            "--prefiller-hosts", "127.0.0.1", "--prefiller-ports", str(be.prefill_port),
            "--decoder-hosts", *["127.0.0.1"] * DECODERS,
            "--decoder-ports", *map(str, be.decode_ports)]
    log = open(os.path.join(d.dir, "proxy.log"), "w")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    ctr = locus.Counters(d.instance)

    def health():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthcheck", timeout=2) as r:
                return json.loads(r.read())
        except OSError:
            assert proc.poll() is None, open(log.name).read()
            return None
    wait_for(lambda: health() is not None, 30, "the proxy to listen")
    wait_for(lambda: all(ctr.value("decoder_up", i) == 1 for i in range(DECODERS)), 10,
             "the proxy's decoder agents to be up")
    yield d, be, port, ctr, health, reqs
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
    ctr.close()
    be.stop()


def test_proxy_routes_like_the_c_router(setup, eldr_table, tmp_path):
    d, be, port, ctr, health, reqs = setup
    ref, _ = reference(eldr_table, {i: 0 for i in range(DECODERS)}, 0, tmp_path)
    n = 24
    for k in range(n):
        # the proxy reports its requests in flight as loads: wait for them to be 0 again
        wait_for(lambda: all(ctr.value("decoder_load", i) == 0 for i in range(DECODERS)),
                 10, "loads back to 0")
        status, headers, text = post(port, {"model": "m", "prompt": f"trace request {k}",
                                            "max_tokens": 64, "temperature": 0.0})
        assert status == 200, text
        i = ref[k][0]
        assert headers["X-Locus-Decoder"] == str(i), (k, headers, ref[k])
        assert headers["X-Locus-Route"].startswith("locus band")
        assert json.loads(text)["choices"][0]["text"] == f"decoded by {i}"
        pre, pre_headers = be.prefill_seen[-1]
        assert pre["max_tokens"] == 1 and pre["stream"] is False
        assert pre["kv_transfer_params"]["do_remote_decode"] is True
        dec_i, dec, dec_headers = be.decode_seen[-1]
        assert dec_i == i
        assert dec["max_tokens"] == 64, "the decode server gets the user's request"
        assert dec["kv_transfer_params"]["remote_block_ids"] == [k, k + 1]
        assert dec_headers["X-Request-Id"] == pre_headers["X-Request-Id"]
    assert len({r[0] for r in ref[:n]}) > 1, "the reference spread nothing"
    h = health()
    assert h["fallbacks"] == 0 and sum(h["routed_by_locus"]) == n
    # every signature reached the decoder (agent) it was routed to
    want = [sum(1 for r in ref[:n] if r[0] == i) for i in range(DECODERS)]
    wait_for(lambda: health()["signatures_delivered"] == want, 10, "signatures delivered")


def test_proxy_streams_and_refuses(setup):
    d, be, port, ctr, health, reqs = setup
    status, headers, text = post(port, {"model": "m", "prompt": "trace request 3",
                                        "max_tokens": 8, "stream": True,
                                        "stream_options": {"include_usage": True}})
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    chunks = [json.loads(line[6:]) for line in text.split("\n")
              if line.startswith("data: {")]
    i = headers["X-Locus-Decoder"]
    assert "".join(c["choices"][0]["text"] for c in chunks) == f"decoded by {i}"
    assert text.rstrip().endswith("data: [DONE]")
    pre, _ = be.prefill_seen[-1]
    assert pre["stream"] is False and "stream_options" not in pre
    assert be.decode_seen[-1][1]["stream"] is True

    # a prefill server started without --enable-return-routed-experts
    be.no_routing = True
    n_dec = len(be.decode_seen)
    status, _, text = post(port, {"model": "m", "prompt": "trace request 4"})
    assert status == 502 and "--enable-return-routed-experts" in text
    assert len(be.decode_seen) == n_dec
    status, _, text = post(port, None)
    assert status == 400
