# SPDX-License-Identifier: MIT
"""examples/pd_proxy.py end to end, run as a user runs it, against small
aiohttp servers standing in for vLLM: the prefill server answers each prompt
with the routing of one request of the repository's trace, in vLLM's
formats (choices[0].routed_experts as base64 .npy, or prompt_routed_experts
as nested lists); four decode servers answer as themselves. The decode
server the proxy picks must be the C router's decision for that request
(tools/python/tests/route_ref.c, loads all 0), and the request it gets must
carry the prefill's kv_transfer_params.

Then what production does to it: locusd killed and started again under it
(no 500, detached then attached again, routing resumed), chat completions,
SGLang's flat base64 form, vLLM's dense-layer placeholder rows with
--moe-layers, loads read from the decode servers' /metrics, and --record
written as a trace that locusctl fit reads."""
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
from conftest import BIN, REPO, wait_for
from locus import proxy_inputs, proxy_metrics
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
        self.form = "vllm"         # vllm (npy / lists alternately), sglang, dense, plain
        self.metrics = [None] * DECODERS   # /metrics text of each decode server (None: 404)
        self.decode_routing = False        # decode answers carry their tokens' routing
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
            app.router.add_post("/v1/chat/completions", self.prefill)
            await self._serve(app, self.prefill_port)
            for i, port in enumerate(self.decode_ports):
                app = web.Application()
                app.router.add_post("/v1/completions", self._decode_handler(i))
                app.router.add_post("/v1/chat/completions", self._decode_handler(i))
                app.router.add_get("/metrics", self._metrics_handler(i))
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
        self.prefill_seen.append((body, dict(request.headers), request.path))
        text = body["messages"][-1]["content"] if "messages" in body else body["prompt"]
        n = int(text.split()[-1])
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
        elif self.form == "sglang":
            # SGLang: base64 of the flat int32 array [tokens, model layers, k], on sglext;
            # the model's layer 0 is dense (zero rows)
            out["sglext"] = {"routed_experts": base64.b64encode(
                with_dense(ids).astype("<i4").tobytes()).decode()}
        elif self.form == "dense":
            out["choices"][0]["routed_experts"] = npy_b64(with_dense(ids).astype(np.int32))
        elif self.form == "plain":
            out["choices"][0]["routed_experts"] = npy_b64(ids.astype(np.int32))
        elif n % 2 == 0:
            # vLLM's CompletionResponseChoice.routed_experts: base64 .npy, [prompt_len, L, k]
            out["choices"][0]["routed_experts"] = npy_b64(ids.astype(np.int32))
        else:
            # releases with the response-level nested lists
            out["prompt_routed_experts"] = ids.tolist()
        return web.json_response(out)

    def _metrics_handler(self, i):
        async def metrics(request):
            if self.metrics[i] is None:
                return web.Response(status=404, text="Not Found")
            return web.Response(text=self.metrics[i],
                                content_type="text/plain", charset="utf-8")
        return metrics

    def _decode_handler(self, i):
        async def decode(request):
            body = await request.json()
            self.decode_seen.append((i, body, dict(request.headers), request.path))
            if body.get("stream"):
                r = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                await r.prepare(request)
                for w in ("decoded", " by", f" {i}"):
                    chunk = {"object": "text_completion", "choices": [{"index": 0, "text": w}]}
                    await r.write(f"data: {json.dumps(chunk)}\n\n".encode())
                await r.write(b"data: [DONE]\n\n")
                await r.write_eof()
                return r
            out = {"object": "text_completion", "choices": [
                {"index": 0, "text": f"decoded by {i}", "finish_reason": "length"}]}
            if self.decode_routing:
                # vLLM's routing of the whole sequence but the last token: the prompt's
                # (stale on a decode server) then 3 generated tokens' (of another request)
                ids = self.reqs[int(body["prompt"].split()[-1])]
                gen = self.reqs[0][:3]
                out["choices"][0]["routed_experts"] = npy_b64(
                    np.concatenate([ids, gen]).astype(np.int32))
                out["usage"] = {"prompt_tokens": len(ids), "completion_tokens": 4}
            return web.json_response(out)
        return decode


def with_dense(ids):
    """ids [tokens, 26, k] with a dense layer's zero placeholder row first, as
    vLLM and SGLang return a model whose layer 0 is dense."""
    return np.concatenate([np.zeros_like(ids[:, :1]), ids], axis=1)


def post(port, body, timeout=30, path="/v1/completions"):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


class Proxy:
    """examples/pd_proxy.py as a process, in front of the backends."""

    def __init__(self, d, be, extra=()):
        self.d, self.be = d, be
        self.port = free_port()
        args = [sys.executable, PROXY, "-i", d.instance, "--port", str(self.port),
                "--host", "127.0.0.1",
                "--prefiller-hosts", "127.0.0.1", "--prefiller-ports", str(be.prefill_port),
                "--decoder-hosts", *["127.0.0.1"] * DECODERS,
                "--decoder-ports", *map(str, be.decode_ports), *extra]
        self.log = os.path.join(d.dir, f"proxy-{self.port}.log")
        self.proc = subprocess.Popen(args, stdout=open(self.log, "w"),
                                     stderr=subprocess.STDOUT)
        wait_for(lambda: self.health() is not None, 30, "the proxy to listen")

    def health_code(self):
        """(HTTP status, body) of /healthcheck, or None while nothing listens."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthcheck",
                                        timeout=5) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())
        except OSError:
            assert self.proc.poll() is None, self.log_text()
            return None

    def health(self):
        got = self.health_code()
        return got and got[1]

    def log_text(self):
        with open(self.log) as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def proxies(fresh, trace):
    """A factory: (locusd, backends, proxy) with the proxy's extra arguments;
    the proxy's decoder agents up."""
    made = []

    def make(*extra, daemon=None, backends=None):
        d = daemon or fresh("load_timeout_ms = 60000\n")
        be = backends or Backends(trace[1])
        p = Proxy(d, be, extra)
        made.append((p, be))
        with locus.Counters(d.instance) as ctr:
            wait_for(lambda: all(ctr.value("decoder_up", i) == 1 for i in range(DECODERS)),
                     10, "the proxy's decoder agents to be up")
        return d, be, p
    yield make
    for p, be in made:
        p.stop()
    for be in {id(be): be for _, be in made}.values():
        be.stop()


@pytest.fixture
def setup(proxies, trace):
    d, be, p = proxies()
    ctr = locus.Counters(d.instance)
    yield d, be, p.port, ctr, p.health, trace[1]
    ctr.close()


def loads_are(ctr, loads, timeout=10):
    wait_for(lambda: all(ctr.value("decoder_load", i) == loads[i] for i in range(DECODERS)),
             timeout, f"locusd's decoder loads to be {loads}")


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
        pre, pre_headers, _ = be.prefill_seen[-1]
        assert pre["max_tokens"] == 1 and pre["stream"] is False
        assert pre["kv_transfer_params"]["do_remote_decode"] is True
        dec_i, dec, dec_headers, _ = be.decode_seen[-1]
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
    pre, _, _ = be.prefill_seen[-1]
    assert pre["stream"] is False and "stream_options" not in pre
    assert be.decode_seen[-1][1]["stream"] is True

    # a prefill server started without --enable-return-routed-experts: served by load,
    # the reason in the answer's X-Locus-Route, counted
    be.no_routing = True
    n_dec = len(be.decode_seen)
    status, headers, text = post(port, {"model": "m", "prompt": "trace request 4"})
    assert status == 200, text
    assert headers["X-Locus-Route"].startswith("fallback refused")
    assert "--enable-return-routed-experts" in headers["X-Locus-Route"]
    assert len(be.decode_seen) == n_dec + 1
    h = health()
    assert h["refused_inputs"] == {"no_routing": 1} and h["fallback_reasons"] == {"refused": 1}
    status, _, text = post(port, None)
    assert status == 400


def routed_by_locus(port, k, ref, path="/v1/completions", body=None):
    """Post trace request k; assert locus routed it where the C router does."""
    body = body or {"model": "m", "prompt": f"trace request {k}", "max_tokens": 4}
    status, headers, text = post(port, body, path=path)
    assert status == 200, text
    assert headers["X-Locus-Route"].startswith("locus band"), (k, headers)
    assert headers["X-Locus-Decoder"] == str(ref[k][0]), (k, headers, ref[k])
    return headers, text


def test_proxy_survives_a_locusd_restart(proxies, eldr_table, tmp_path):
    """locusd killed under traffic: no request fails, /healthcheck says
    detached; started again: the proxy attaches again by itself, routing by
    locus resumes, and no request stays counted in flight."""
    d, be, p = proxies("--reattach-min", "0.05", "--reattach-max", "0.4")
    ref, _ = reference(eldr_table, {i: 0 for i in range(DECODERS)}, 0, tmp_path)
    ctr = locus.Counters(d.instance)
    for k in range(4):
        loads_are(ctr, [0] * DECODERS)
        routed_by_locus(p.port, k, ref)
    ctr.close()

    answers, stop = [], threading.Event()

    def traffic():
        k = 0
        while not stop.is_set():
            status, headers, text = post(p.port, {"model": "m", "stream": k % 2 == 0,
                                                  "prompt": f"trace request {k % 40}"})
            answers.append((status, headers.get("X-Locus-Route", ""), text))
            k += 1
    threads = [threading.Thread(target=traffic) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: len(answers) >= 10, 20, "traffic through the proxy")
        d.kill()
        wait_for(lambda: p.health()["locus"] == "detached", 5, "the proxy to see locusd gone")
        code, h = p.health_code()
        assert code == 200 and h["status"] == "degraded", h  # it still serves: ready
        n = len(answers)
        wait_for(lambda: len(answers) >= n + 10, 20, "traffic while locusd is down")
        time.sleep(0.5)  # several failed attach attempts, backing off
        assert p.health()["attach_failures"] >= 2
        d.restart(eldr_table)
        wait_for(lambda: p.health()["locus"] == "attached", 10, "the proxy to attach again")
        n = len(answers)
        wait_for(lambda: len(answers) >= n + 10, 20, "traffic after the restart")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    bad = [a for a in answers if a[0] != 200]
    assert not bad, bad[:3]
    assert any(r.startswith("fallback detached") for _, r, _ in answers)
    assert answers[-1][1].startswith("locus band"), answers[-1][1]
    h = p.health()
    assert h["status"] == "ok" and h["attaches"] == 2 and h["detaches"] == 1, h
    assert h["in_flight"] == [0] * DECODERS, h
    assert sum(h["routed_by_locus"]) + h["fallbacks"] == len(answers) + 4
    # the new locusd routes as the C router does once the loads are back to 0
    with locus.Counters(d.instance) as ctr:
        wait_for(lambda: all(ctr.value("decoder_up", i) == 1 for i in range(DECODERS)), 10,
                 "the proxy's decoder agents up on the new locusd")
        for k in range(4, 10):
            loads_are(ctr, [0] * DECODERS)
            routed_by_locus(p.port, k, ref)
    assert "lost" in p.log_text() and "attached to locusd" in p.log_text()


def test_proxy_chat_completions(setup, eldr_table, tmp_path):
    d, be, port, ctr, health, reqs = setup
    ref, _ = reference(eldr_table, {i: 0 for i in range(DECODERS)}, 0, tmp_path)
    for k in (1, 2, 5):  # nested lists and base64 .npy
        loads_are(ctr, [0] * DECODERS)
        body = {"model": "m", "messages": [{"role": "user", "content": f"trace request {k}"}],
                "max_completion_tokens": 16}
        headers, text = routed_by_locus(port, k, ref, "/v1/chat/completions", body)
        assert json.loads(text)["choices"][0]["text"] == f"decoded by {ref[k][0]}"
        pre, _, path = be.prefill_seen[-1]
        assert path == "/v1/chat/completions" and pre["max_completion_tokens"] == 1
        i, dec, _, path = be.decode_seen[-1]
        assert path == "/v1/chat/completions" and dec["max_completion_tokens"] == 16
        assert dec["messages"] == body["messages"]


def test_proxy_sglang_routed_experts(proxies, eldr_table, tmp_path):
    """SGLang's flat int32 form, the model's dense layer 0 in it: shaped by
    the layer map (27 rows x 6 = 162 ids per token; 26 rows do not divide)."""
    d, be, p = proxies("--ask-routed-experts", "--moe-layers", "1-26")
    be.form = "sglang"
    ref, _ = reference(eldr_table, {i: 0 for i in range(DECODERS)}, 0, tmp_path)
    with locus.Counters(d.instance) as ctr:
        for k in range(6):
            loads_are(ctr, [0] * DECODERS)
            routed_by_locus(p.port, k, ref)
            assert be.prefill_seen[-1][0]["return_routed_experts"] is True
    h = p.health()
    assert h["fallbacks"] == 0 and h["refused_inputs"] == {}


def test_proxy_dense_placeholders(proxies, eldr_table, tmp_path):
    """vLLM's 27 rows for a 26-layer table: --moe-layers 1-26 routes them; a
    selection that does not fit the answer is refused with a sentence and the
    request served by load."""
    d, be, p = proxies("--moe-layers", "1-26")
    be.form = "dense"
    ref, _ = reference(eldr_table, {i: 0 for i in range(DECODERS)}, 0, tmp_path)
    with locus.Counters(d.instance) as ctr:
        for k in range(4):
            loads_are(ctr, [0] * DECODERS)
            routed_by_locus(p.port, k, ref)
    be.form = "plain"  # 26 rows: row 26 is not there
    status, headers, text = post(p.port, {"model": "m", "prompt": "trace request 4"})
    assert status == 200, text
    route = headers["X-Locus-Route"]
    assert route.startswith("fallback refused") and "--moe-layers names row 26" in route
    h = p.health()
    assert h["refused_inputs"] == {"layers": 1} and h["fallbacks"] == 1, h
    assert "routed experts refused (layers)" in p.log_text()


def vllm_metrics(running, waiting, kv):
    return ("# HELP vllm:num_requests_running Number of requests in model execution.\n"
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{engine="0",model_name="m"}} {running}.0\n'
            f'vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}.0\n'
            f'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {kv}\n')


def sglang_metrics(running, queued, usage):
    # two data-parallel ranks: the counts add up
    return "".join(f'sglang:num_running_reqs{{dp_rank="{r}",model_name="m"}} {running / 2}\n'
                   f'sglang:num_queue_reqs{{dp_rank="{r}",model_name="m"}} {queued / 2}\n'
                   f'sglang:token_usage{{dp_rank="{r}",model_name="m"}} {usage}\n'
                   for r in (0, 1))


def test_proxy_loads_from_metrics(proxies, eldr_table, tmp_path):
    """The decode servers' /metrics are the loads locusd routes on; metrics
    that stop parsing fall back to the requests in flight, counted."""
    d, be, p = proxies("--metrics-interval", "0.1", "--kv-weight", "10")
    loads = [0, 9, 9, 0]  # running + waiting + 10 x KV usage
    # decoder 0's text is as long as a real server's, its histograms first
    hist = "".join(f'vllm:e2e_request_latency_seconds_bucket{{le="{b}",model_name="m"}} 0.0\n'
                   for b in range(4000))
    be.metrics = [hist + vllm_metrics(0, 0, 0.0), vllm_metrics(5, 2, 0.2),
                  sglang_metrics(4, 2, 0.3), sglang_metrics(0, 0, 0.01)]
    ref, _ = reference(eldr_table, dict(enumerate(loads)), 0, tmp_path)
    ref0, _ = reference(eldr_table, {i: 0 for i in range(DECODERS)}, 0, tmp_path)
    n = 16
    assert [r[0] for r in ref[:n]] != [r[0] for r in ref0[:n]], "the loads change nothing"
    ctr = locus.Counters(d.instance)
    try:
        for k in range(n):
            loads_are(ctr, loads)
            routed_by_locus(p.port, k, ref)
        h = p.health()
        assert [x["load_from"] for x in h["decoders"]] == ["metrics"] * DECODERS
        assert [x["engine"] for x in h["decoders"]] == ["vllm", "vllm", "sglang", "sglang"]
        assert h["decoders"][1]["kv_usage"] == 0.2 and h["decoders"][2]["running"] == 4
        # decoder 2's metrics turn to garbage, decoder 3's go away: in-flight counts (0)
        be.metrics[2] = "vllm:num_requests_running{engine=\"0\" 3\n"
        be.metrics[3] = None
        loads_are(ctr, [0, 9, 0, 0])
    finally:
        ctr.close()
    h = p.health()
    assert [x["load_from"] for x in h["decoders"]] == ["metrics", "metrics", "in_flight",
                                                        "in_flight"]
    assert h["decoders"][2]["metrics_errors"].get("unparsable", 0) >= 1
    assert h["decoders"][3]["metrics_errors"].get("unparsable", 0) >= 1  # a 404
    assert h["reports_from_in_flight"] > 0
    assert "decode server 2's metrics" in p.log_text()


def test_proxy_record_refits(proxies, eldr_table, trace, tmp_path):
    """--record FILE: the routed experts of each request as a trace, with the
    decode server that answered and its generated tokens' routing; locusctl
    fit reads it."""
    rec = tmp_path / "seen.jsonl"
    d, be, p = proxies("--record", str(rec))
    be.decode_routing = True
    n = 12
    served = {}
    for k in range(n):
        status, headers, text = post(p.port, {"model": "m", "prompt": f"trace request {k}",
                                              "stream": k == 3},
                                     )
        assert status == 200, text
        served[k] = int(headers["X-Locus-Decoder"])
    wait_for(lambda: p.health()["record"]["requests"] == n, 10, "the requests recorded")
    p.stop()
    lines = [json.loads(x) for x in rec.read_text().splitlines()]
    assert lines[0] == {"locus_trace": 1, "n_layers": 26, "k": 6, "n_experts": 64}
    assert len(lines) == n + 1
    reqs = trace[1]
    ids = {be.prefill_seen[k][1]["X-Request-Id"]: k for k in range(n)}
    for line in lines[1:]:
        k = ids[line["id"]]
        assert np.array_equal(np.array(line["prompt_routed_experts"]), reqs[k])
        assert line["decoder"] == served[k] and line["route"] == "locus"
        if k == 3:  # streamed: the answer is not kept
            assert "routed_experts" not in line
        else:
            assert np.array_equal(np.array(line["routed_experts"]), reqs[0][:3])
    out = tmp_path / "x.tbl"
    r = subprocess.run([os.path.join(BIN, "locusctl"), "fit", "--trace", str(rec),
                        "--decoders", "2", "-o", str(out)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size > 0


# ---- the input and metrics readers alone ----------------------------------------------

def test_inputs_layer_map(trace):
    ids = trace[1][0]
    dense = with_dense(ids)
    body = {"choices": [{"routed_experts": npy_b64(dense)}],
            "usage": {"prompt_tokens": len(ids)}}
    # the placeholder row dropped without a selection: it is the only one
    got = proxy_inputs.routed_experts_of(body, table_layers=26, n_experts=64)
    assert np.array_equal(got, ids)
    got = proxy_inputs.routed_experts_of(body, table_layers=26, n_experts=64,
                                         moe_layers=proxy_inputs.parse_layers("1-26"))
    assert np.array_equal(got, ids)
    with pytest.raises(proxy_inputs.Refused, match="row 0 of .* a dense-layer placeholder"):
        proxy_inputs.routed_experts_of(body, table_layers=26, n_experts=64,
                                       moe_layers=proxy_inputs.parse_layers("0-25"))
    # two rows more than the table's and one placeholder: no guess
    two = np.concatenate([dense, ids[:, :1]], axis=1)
    body["choices"][0]["routed_experts"] = npy_b64(two)
    with pytest.raises(proxy_inputs.Refused, match="28 layer rows .* pass --moe-layers") as e:
        proxy_inputs.routed_experts_of(body, table_layers=26, n_experts=64)
    assert e.value.kind == "layers"
    # SGLang's flat form, shaped by --top-k
    flat = {"meta_info": {"routed_experts": base64.b64encode(
        dense.astype("<i4").tobytes()).decode(), "prompt_tokens": len(ids)}}
    got = proxy_inputs.routed_experts_of(flat, table_layers=26, top_k=6)
    assert np.array_equal(got, ids)
    with pytest.raises(proxy_inputs.Refused, match="162 ids per token.*--top-k"):
        proxy_inputs.routed_experts_of(flat, table_layers=26)
    with pytest.raises(proxy_inputs.Refused, match="not base64"):
        proxy_inputs.routed_experts_of({"sglext": {"routed_experts": "@@@"}}, table_layers=26)
    body["choices"][0]["routed_experts"] = npy_b64(ids + 64)
    with pytest.raises(proxy_inputs.Refused, match=r"routes to expert 1\d\d: .*experts 0..63") as e:
        proxy_inputs.routed_experts_of(body, table_layers=26, n_experts=64)
    assert e.value.kind == "ids"
    for bad in ("", "3-1", "a", "1,1", "2-2000"):
        with pytest.raises(ValueError):
            proxy_inputs.parse_layers(bad)
    assert proxy_inputs.parse_layers("0,3-5") == [0, 3, 4, 5]


def test_metrics_reader():
    assert proxy_metrics.load_of(vllm_metrics(3, 2, 0.5)) == ("vllm", 3, 2, 0.5)
    assert proxy_metrics.load_of(sglang_metrics(4, 2, 0.25)) == ("sglang", 4, 2, 0.25)
    old = ('vllm:num_requests_running{model_name="m"} 1\n'
           'vllm:num_requests_waiting{model_name="m"} 0\n'
           'vllm:gpu_cache_usage_perc{model_name="m",note="a \\"}\\" b"} 0.75\n')
    assert proxy_metrics.load_of(old) == ("vllm", 1, 0, 0.75)
    for bad in ("vllm:num_requests_running 1\n",                     # no waiting gauge
                'vllm:num_requests_running{a="1" 2\n',               # labels not closed
                "vllm:num_requests_running x\nvllm:num_requests_waiting 0\n",
                "vllm:num_requests_running -1\nvllm:num_requests_waiting 0\n",
                "<html>oops</html>\n"):
        with pytest.raises(proxy_metrics.Unparsable):
            proxy_metrics.load_of(bad)
