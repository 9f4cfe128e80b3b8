# SPDX-License-Identifier: MIT
"""A decode server's load from its Prometheus /metrics text, for a PD proxy.

vLLM: vllm:num_requests_running + vllm:num_requests_waiting, KV usage
vllm:kv_cache_usage_perc (vllm:gpu_cache_usage_perc in older releases).
SGLang (--enable-metrics): sglang:num_running_reqs + sglang:num_queue_reqs,
KV usage sglang:token_usage. Request counts are summed over the series
(one per engine, data-parallel rank or model); KV usage is the largest (a fraction 0..1: other values are not used).
"""
import math
import re

ENGINES = {
    "vllm": (("vllm:num_requests_running",), ("vllm:num_requests_waiting",),
             ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")),
    "sglang": (("sglang:num_running_reqs",), ("sglang:num_queue_reqs",),
               ("sglang:token_usage",)),
}
MAX_TEXT = 8 << 20
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


class Unparsable(ValueError):
    """The text is no Prometheus exposition, or holds no load we know."""


def parse(text):
    """{metric name: [values]} of a Prometheus text exposition (labels
    dropped, comments skipped). Unparsable on a malformed sample line."""
    if not isinstance(text, str):
        raise Unparsable("the metrics are not text")
    if len(text) > MAX_TEXT:
        raise Unparsable(f"the metrics are {len(text)} bytes, more than {MAX_TEXT}")
    out = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _NAME.match(line)
        if not m:
            raise Unparsable(f"line {n} is no sample: {line[:80]!r}")
        rest = line[m.end():]
        if rest.startswith("{"):
            end = _labels_end(rest)
            if end < 0:
                raise Unparsable(f"line {n}: unterminated labels: {line[:80]!r}")
            rest = rest[end + 1:]
        fields = rest.split()
        if not fields or len(fields) > 2:
            raise Unparsable(f"line {n}: a value (and a timestamp) expected: {line[:80]!r}")
        try:
            v = float(fields[0])
        except ValueError:
            raise Unparsable(f"line {n}: {fields[0]!r} is no number") from None
        out.setdefault(m.group(0), []).append(v)
    return out


def _labels_end(s):
    """Index of the } closing the label set that s opens, or -1."""
    quoted = esc = False
    for i, ch in enumerate(s):
        if esc:
            esc = False
        elif ch == "\\" and quoted:
            esc = True
        elif ch == '"':
            quoted = not quoted
        elif ch == "}" and not quoted:
            return i
    return -1


def load_of(text):
    """(engine, running, waiting, kv_usage or None) of a decode server's
    /metrics text; Unparsable when it names no engine's request gauges or
    holds a count that is not a finite non-negative number."""
    samples = parse(text)
    for engine, (running, waiting, kv) in ENGINES.items():
        got = [next((samples[n] for n in names if n in samples), None)
               for names in (running, waiting)]
        if got[0] is None or got[1] is None:
            continue
        vals = got[0] + got[1]
        if not all(math.isfinite(v) and v >= 0 for v in vals):
            raise Unparsable(f"{engine}'s request gauges hold {vals}: counts expected")
        usage = next((samples[n] for n in kv if n in samples), None)
        # a fraction 0..1; anything else is not used
        kv_usage = max(usage) if usage and all(0 <= u <= 1 for u in usage) else None
        return engine, sum(got[0]), sum(got[1]), kv_usage
    raise Unparsable("no request gauges of vLLM (vllm:num_requests_running, "
                     "vllm:num_requests_waiting) or SGLang (sglang:num_running_reqs, "
                     "sglang:num_queue_reqs) in the metrics")
