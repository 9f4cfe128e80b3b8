# SPDX-License-Identifier: MIT
"""A prefill/decode disaggregation proxy that picks the decode server with
locus (aiohttp; examples/pd_proxy.py is its command line).

POST /v1/completions and /v1/chat/completions go to a prefill server
(max_tokens 1, not streamed), the prompt's routed experts it returns are
routed by locusd's ELDR router, and the request goes to the decode server
locus chose, its answer streamed back (X-Locus-Decoder, X-Locus-Route).

The request flow is vLLM's own proxies': tests/v1/kv_connector/
nixl_integration/toy_proxy_server.py (vllm-project/vllm @ e0099301): the
prefill copy gets max_tokens 1, stream False, no stream_options and
kv_transfer_params {"do_remote_decode": true, "do_remote_prefill": false,
"remote_engine_id": null, "remote_block_ids": null, "remote_host": null,
"remote_port": null}; the prefill response's kv_transfer_params go into the
decode request unchanged; X-Request-Id and Authorization (OPENAI_API_KEY) on
both; GET /healthcheck. benchmarks/disagg_benchmarks/
disagg_prefill_proxy_server.py for max_completion_tokens (set to 1 too).
What is read as routed experts: locus/proxy_inputs.py.

locusd going away (killed, restarted, upgraded) is no error of a request:
the proxy detaches, serves every request on the least loaded decode server
(counted as a fallback), and attaches again with exponential back-off,
jittered and bounded. A request locus cannot route for any other reason
(no table, a refused input, a timeout) is served the same way. The proxy
answers 502 only for what it cannot route around: a prefill or decode server
that fails.

Decoder loads: by default the proxy attaches as decoder i for each decode
server and reports its load there (--no-decoder-agents when the decode
servers attach themselves). The load is the decode server's running plus
waiting requests from its /metrics (locus/proxy_metrics.py), plus the
requests the proxy sent it since that scrape; without fresh metrics, the
requests the proxy has in flight there.
"""
import asyncio
import collections
import itertools
import json
import logging
import os
import random
import time
import uuid

import aiohttp
from aiohttp import web

from . import attach
from .errors import LocusError, LocusGone, LocusTimeout, NoTableError
from .proxy_inputs import Refused, routed_experts_of
from .proxy_metrics import MAX_TEXT, Unparsable, load_of
from .proxy_record import Recorder

log = logging.getLogger("pd_proxy")

ROUTES = ("completions", "chat/completions")
LOG_EVERY_S = 60.0
MAX_LOAD = (1 << 31) - 1  # a load report is a u32
MAX_DECODE_BODY = 64 << 20  # bytes of a non-streamed answer kept to record its routing


class Backoff:
    """Delays between attach attempts: base, doubling up to cap, each drawn
    in [d/2, d] so proxies that lost locusd together do not retry in step."""

    def __init__(self, base, cap, rand=random.random):
        self.base, self.cap, self.rand, self.n = base, cap, rand, 0

    def next(self):
        d = min(self.cap, self.base * (2 ** min(self.n, 30)))
        self.n += 1
        return d * (0.5 + 0.5 * self.rand())

    def reset(self):
        self.n = 0


class DecoderMetrics:
    """The last good scrape of one decode server's /metrics."""
    __slots__ = ("at", "engine", "running", "waiting", "kv_usage", "in_flight", "errors",
                 "last_error", "reachable")

    def __init__(self):
        self.at = None
        self.engine = self.kv_usage = self.last_error = None
        self.running = self.waiting = self.in_flight = 0
        self.errors = collections.Counter()
        self.reachable = True


def _header(text):
    """text fit for an HTTP header value: one line, bounded."""
    return " ".join(str(text).split())[:500].encode("ascii", "replace").decode()


class Proxy:
    def __init__(self, a):
        self.a = a
        self.prefill = [f"http://{h}:{p}" for h, p in zip(a.prefiller_hosts, a.prefiller_ports)]
        self.decode = [f"http://{h}:{p}" for h, p in zip(a.decoder_hosts, a.decoder_ports)]
        n = len(self.decode)
        self.next_prefill = itertools.cycle(range(len(self.prefill)))
        self.rr = itertools.cycle(range(n))
        self.inflight = [0] * n
        self.signatures = [0] * n
        self.routed = [0] * n
        self.fallbacks = collections.Counter()   # reason -> requests served without locus
        self.refused = collections.Counter()     # kind -> inputs refused (proxy_inputs)
        self.metrics = [DecoderMetrics() for _ in range(n)]
        self.reports_from_in_flight = 0
        # locusd
        self.state = "detached"
        self.router, self.agents = None, []
        self.table = None                        # (layers, experts) last seen in use
        self.attaches = self.detaches = self.attach_failures = 0
        self.last_locus_error = None
        self.next_attach_at = 0.0
        self.routing = 0                         # route calls running in executor threads
        self.backoff = Backoff(a.reattach_min, a.reattach_max)
        self.recorder = None
        self.session = None
        self.tasks = []
        self._logged = {}                        # condition -> when it was last logged

    # ---- lifetime ---------------------------------------------------------------

    async def start(self, app):
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.a.timeout))
        if self.a.record:
            self.recorder = Recorder(self.a.record)
        await self.try_attach()
        self.tasks.append(asyncio.create_task(self.locus_loop()))
        if self.a.metrics_interval > 0:
            self.tasks.append(asyncio.create_task(self.metrics_loop()))

    async def stop(self, app):
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.close_clients()
        await self.session.close()
        if self.recorder:
            await asyncio.get_running_loop().run_in_executor(None, self.recorder.close)

    # ---- locusd: attach, lose, attach again ---------------------------------------

    def _attach_sync(self):
        a = self.a
        made = []
        try:
            made.append(attach(a.instance, prefill=True, timeout=a.locus_timeout))
            if a.decoder_agents:
                for i in range(len(self.decode)):
                    made.append(attach(a.instance, decoder=i, timeout=a.locus_timeout))
                    made[-1].report_load(self.load(i))
            return made[0], made[1:]
        except BaseException:
            for c in made:
                c.close()
            raise

    async def try_attach(self):
        loop = asyncio.get_running_loop()
        try:
            self.router, self.agents = await loop.run_in_executor(None, self._attach_sync)
        except (LocusError, OSError, ValueError) as e:
            self.attach_failures += 1
            self.last_locus_error = str(e)
            delay = self.backoff.next()
            self.next_attach_at = time.monotonic() + delay
            self._log_once("attach", "locusd %s not attached (%s); routing by load, next "
                           "attempt in %.2f s", self.a.instance, e, delay)
            return False
        self.state = "attached"
        self.attaches += 1
        self.backoff.reset()
        self._logged.pop("attach", None)
        self.read_table()
        log.info("attached to locusd %s%s", self.a.instance,
                 "" if self.table else " (no ELDR table in use yet)")
        return True

    def lose(self, err):
        """locusd is gone: detach, route by load, attach again later."""
        if self.state != "attached":
            return
        self.state = "detached"
        self.detaches += 1
        self.last_locus_error = str(err)
        self.next_attach_at = time.monotonic() + self.backoff.next()
        log.warning("locusd %s lost (%s): routing by load until it is back", self.a.instance,
                    err)
        clients = [self.router] + self.agents
        self.router, self.agents = None, []
        # a route in an executor thread may hold the router's lock: close off the loop
        asyncio.get_running_loop().run_in_executor(None, _close_all, clients)

    def close_clients(self):
        _close_all([self.router] + self.agents)
        self.router, self.agents = None, []

    def read_table(self):
        try:
            self.table = self.router.table_shape()
        except NoTableError:
            pass  # none in use: route() says so per request, the last one seen is kept

    async def locus_loop(self):
        """Attach again when due; while attached, the decoder agents' side (loads
        reported, also unchanged, so locusd keeps them up; signatures taken) and
        a look at the router, which notices a dead locusd within 100 ms."""
        while True:
            try:
                if self.state != "attached":
                    if time.monotonic() >= self.next_attach_at:
                        await self.try_attach()
                else:
                    self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # never let the loop die: it is what attaches again
                log.exception("locus loop: %s", e)
            await asyncio.sleep(self.a.report_interval)

    def tick(self):
        try:
            for i, c in enumerate(self.agents):
                c.report_load(self.load(i, count=True))
                self.signatures[i] += len(c.poll_signatures(max=256))
            if self.router is not None and not self.routing:
                self.router.poll()  # only route() is used: nothing of ours is pending
                self.read_table()
        except LocusGone as e:
            self.lose(e)
        except LocusError as e:
            self._log_once(f"tick {e.name}", "locusd: %s", e)

    def report(self, i):
        """Load of decoder i now (a request started or ended), never raising."""
        if self.state == "attached" and i < len(self.agents):
            try:
                self.agents[i].report_load(self.load(i))
            except LocusGone as e:
                self.lose(e)
            except (LocusError, ValueError):
                pass  # the next tick reports again

    # ---- loads ----------------------------------------------------------------------

    def fresh(self, i, now=None):
        m = self.metrics[i]
        now = time.monotonic() if now is None else now
        return (self.a.metrics_interval > 0 and m.at is not None and
                now - m.at <= self.a.metrics_max_age)

    def load(self, i, count=False):
        """Decoder i's load: its running and waiting requests at the last scrape
        (with --kv-weight, plus that many requests at a full KV cache) and the
        requests sent since; else the proxy's requests in flight there."""
        if self.fresh(i):
            m = self.metrics[i]
            kv = round(self.a.kv_weight * m.kv_usage) if m.kv_usage is not None else 0
            load = m.running + m.waiting + kv + max(0, self.inflight[i] - m.in_flight)
            return int(min(load, MAX_LOAD))
        if count and self.a.metrics_interval > 0:
            self.reports_from_in_flight += 1
        return self.inflight[i]

    async def scrape(self, i, session):
        m = self.metrics[i]
        url = self.decode[i] + "/metrics"
        try:
            async with session.get(url) as resp:
                m.reachable = True
                if resp.status != 200:
                    raise Unparsable(f"HTTP {resp.status}")
                raw = bytearray()
                async for chunk in resp.content.iter_any():
                    raw += chunk
                    if len(raw) > MAX_TEXT:
                        raise Unparsable(f"more than {MAX_TEXT} bytes")
            engine, running, waiting, kv = load_of(raw.decode("utf-8", errors="replace"))
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            m.reachable = False
            m.errors["unreachable"] += 1
            m.last_error = f"{url}: {e!r}"
            self._log_once(f"metrics {i}", "decode server %d's metrics: %s; its load is the "
                           "proxy's requests in flight there", i, m.last_error)
            return
        except Unparsable as e:
            m.errors["unparsable"] += 1
            m.last_error = f"{url}: {e}"
            self._log_once(f"metrics {i}", "decode server %d's metrics: %s; its load is the "
                           "proxy's requests in flight there", i, m.last_error)
            return
        self._logged.pop(f"metrics {i}", None)
        m.at, m.engine, m.running, m.waiting, m.kv_usage = (time.monotonic(), engine, running,
                                                             waiting, kv)
        m.in_flight = self.inflight[i]

    async def metrics_loop(self):
        t = min(self.a.metrics_interval, 2.0)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=t)) as s:
            while True:
                await asyncio.gather(*(self.scrape(i, s) for i in range(len(self.decode))))
                await asyncio.sleep(self.a.metrics_interval)

    def reachable(self):
        return [i for i, m in enumerate(self.metrics) if m.reachable]

    def least_loaded(self, among):
        start = next(self.rr)
        n = len(self.decode)
        return min((self.load(i), (i - start) % n, i) for i in among)[2]

    # ---- routing ------------------------------------------------------------------

    def _route_sync(self, router, body, allowed):
        """(routed experts or None, Decision or None, fallback reason or None);
        runs in an executor thread."""
        table = self.table
        if router is not None:
            try:
                table = router.table_shape()
            except NoTableError:
                table = None
        routed = routed_experts_of(body, table_layers=table and table[0],
                                   n_experts=table and table[1], moe_layers=self.a.moe_layers,
                                   top_k=self.a.top_k)
        if router is None:
            return routed, None, "detached", None
        if table is None:
            return routed, None, "no_table", "no ELDR table is in use"
        return routed, router.route(routed, allowed=allowed), None, None

    async def choose(self, body):
        """(decode server, how it was chosen, routed experts or None)."""
        loop = asyncio.get_running_loop()
        up = self.reachable()
        among = up or list(range(len(self.decode)))
        allowed = up if up and len(up) < len(self.decode) else None
        router = self.router if self.state == "attached" else None
        routed = None
        self.routing += 1
        try:
            routed, d, reason, why = await loop.run_in_executor(
                None, self._route_sync, router, body, allowed)
        except Refused as e:
            self.refused[e.kind] += 1
            reason, why = "refused", str(e)
            self._log_once(f"refused {e.kind}", "routed experts refused (%s): %s", e.kind, e)
        except LocusGone as e:
            self.lose(e)
            reason, why = "detached", str(e)
        except LocusTimeout as e:
            reason, why = "timeout", str(e)
        except (LocusError, ValueError) as e:
            reason, why = "locus_error", str(e)
            self._log_once(f"locus {type(e).__name__}", "locus did not route a request: %s", e)
        finally:
            self.routing -= 1
        if reason is None and d.decoder < len(self.decode):
            self.routed[d.decoder] += 1
            return d.decoder, f"locus band {d.band} similarity {d.similarity:.4f}", routed
        if reason is None:
            reason, why = "locus_error", f"decoder {d.decoder} has no decode server"
        self.fallbacks[reason] += 1
        i = self.least_loaded(among)
        how = f"fallback {reason}: least loaded" + (f" ({why})" if why else "")
        return i, how, routed

    # ---- HTTP ---------------------------------------------------------------------

    def headers(self, request_id):
        h = {"X-Request-Id": request_id}
        key = os.environ.get("OPENAI_API_KEY")
        if key:
            h["Authorization"] = f"Bearer {key}"
        return h

    def handler(self, route):
        async def handle(request):
            return await self.proxy(request, route)
        return handle

    async def proxy(self, request, route):
        try:
            req = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError, aiohttp.ContentTypeError):
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
        if self.a.ask_routed_experts:
            pre["return_routed_experts"] = True
        url = f"{self.prefill[next(self.next_prefill)]}/v1/{route}"
        try:
            async with self.session.post(url, json=pre, headers=headers) as resp:
                if resp.status != 200:
                    text = await resp.text()
                    return web.json_response({"error": f"prefill server {url}: {resp.status} "
                                              f"{text[:500]}"}, status=502)
                body = await resp.json(content_type=None)
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:
            return web.json_response({"error": f"prefill server {url}: {e!r}"}, status=502)
        if not isinstance(body, dict):
            return web.json_response({"error": f"prefill server {url}: the answer is not a "
                                      "JSON object"}, status=502)

        i, how, routed = await self.choose(body)
        dec = dict(req)
        if body.get("kv_transfer_params"):
            dec["kv_transfer_params"] = body["kv_transfer_params"]
        url = f"{self.decode[i]}/v1/{route}"
        self.inflight[i] += 1
        self.report(i)
        out = None
        kept = None
        try:
            async with self.session.post(url, json=dec, headers=headers) as resp:
                ctype = resp.headers.get("Content-Type", "application/json")
                out = web.StreamResponse(status=resp.status, headers={
                    "Content-Type": ctype, "X-Locus-Decoder": str(i),
                    "X-Locus-Route": _header(how)})
                await out.prepare(request)
                if (self.recorder and routed is not None and resp.status == 200 and
                        ctype.startswith("application/json")):
                    kept = bytearray()
                async for chunk in resp.content.iter_any():
                    await out.write(chunk)
                    if kept is not None:
                        kept += chunk
                        if len(kept) > MAX_DECODE_BODY:
                            kept = None
                await out.write_eof()
        except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError) as e:
            if out is not None and out.prepared:
                log.warning("decode server %s: %r after the answer began", url, e)
                return out  # the client sees the stream end early
            return web.json_response({"error": f"decode server {url}: {e!r}"}, status=502)
        finally:
            self.inflight[i] -= 1
            self.report(i)
        if self.recorder and routed is not None:
            self.record(request_id, routed, i, how, kept)
        return out

    def record(self, request_id, routed, i, how, kept):
        generated = None
        if kept:
            try:
                answer = json.loads(kept)
                generated = routed_experts_of(
                    answer, table_layers=routed.shape[1], n_experts=self.table and self.table[1],
                    moe_layers=self.a.moe_layers, top_k=self.a.top_k,
                    generated=True) if isinstance(answer, dict) else None
            except (ValueError, Refused):
                generated = None  # the answer carries no routing we read: prompt only
        self.recorder.record(request_id, routed, i, "locus" if how.startswith("locus") else
                             "fallback", n_experts=self.table and self.table[1],
                             generated=generated)

    def health(self):
        """(HTTP status, body) of GET /healthcheck."""
        now = time.monotonic()
        decoders = []
        for i, m in enumerate(self.metrics):
            decoders.append({
                "url": self.decode[i], "load": self.load(i),
                "load_from": "metrics" if self.fresh(i, now) else "in_flight",
                "engine": m.engine, "running": m.running, "waiting": m.waiting,
                "kv_usage": m.kv_usage,
                "metrics_age_s": None if m.at is None else round(now - m.at, 3),
                "metrics_errors": dict(m.errors), "reachable": m.reachable})
        if self.a.metrics_interval > 0 and not self.reachable():
            status, code = "unavailable", 503  # no decode server answers: nowhere to route
        elif self.state != "attached":
            status, code = "degraded", 200
        else:
            status, code = "ok", 200
        body = {
            "status": status, "locus": self.state, "locus_instance": self.a.instance,
            "attaches": self.attaches, "detaches": self.detaches,
            "attach_failures": self.attach_failures,
            "last_locus_error": self.last_locus_error,
            "next_attach_in_s": (round(max(0.0, self.next_attach_at - now), 3)
                                 if self.state != "attached" else None),
            "table": ({"layers": self.table[0], "experts": self.table[1]}
                      if self.table else None),
            "prefill_instances": len(self.prefill), "decode_instances": len(self.decode),
            "routed_by_locus": self.routed, "fallbacks": sum(self.fallbacks.values()),
            "fallback_reasons": dict(self.fallbacks), "refused_inputs": dict(self.refused),
            "in_flight": self.inflight, "signatures_delivered": self.signatures,
            "reports_from_in_flight": self.reports_from_in_flight, "decoders": decoders,
            "record": self.recorder.stats() if self.recorder else None}
        return code, body

    async def healthcheck(self, request):
        code, body = self.health()
        return web.json_response(body, status=code)

    def _log_once(self, key, fmt, *args):
        """Log a condition when it starts and once a minute while it lasts, not
        at every request (the counts are on /healthcheck)."""
        now = time.monotonic()
        if now - self._logged.get(key, -LOG_EVERY_S) >= LOG_EVERY_S:
            self._logged[key] = now
            log.warning(fmt, *args)


def _close_all(clients):
    for c in clients:
        if c is not None:
            try:
                c.close()
            except Exception:  # a client of a dead locusd: nothing left to free
                pass


def app(a):
    """The aiohttp application of a proxy configured by a (pd_proxy.py's
    arguments)."""
    proxy = Proxy(a)
    application = web.Application()
    for route in ROUTES:
        application.router.add_post(f"/v1/{route}", proxy.handler(route))
    application.router.add_get("/healthcheck", proxy.healthcheck)
    application.on_startup.append(proxy.start)
    application.on_cleanup.append(proxy.stop)
    application["proxy"] = proxy
    return application
