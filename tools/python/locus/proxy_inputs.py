# SPDX-License-Identifier: MIT
"""The routed experts a prefill server returns, read for a PD proxy: vLLM's
and SGLang's forms, mapped onto the MoE layers of the ELDR table in use.

Forms read (the first one present wins):
  * vLLM, completions: choices[0].routed_experts, a base64 string of .npy
    bytes, [tokens, layers, k];
  * vLLM, chat completions of some releases: the response's
    prompt_routed_experts, nested lists [tokens, layers, k];
  * SGLang (request with "return_routed_experts": true): sglext.routed_experts
    on the response, sgl_ext / sglext on choices[0] in other releases, or
    meta_info.routed_experts on /generate; a base64 string of the flat int32
    array of logical shape [tokens, layers, k].

A flat array carries no shape: tokens are the response's prompt tokens
(usage.prompt_tokens or meta_info.prompt_tokens), and layers x k must be
told (--top-k) or follow from the layer map without doubt.

Engines return one row per model layer, dense layers included, as zero
placeholders: every slot of every token is expert 0, which a real top-k of
k > 1 never routes. The layer map says which rows are the table's MoE
layers: an explicit selection (--moe-layers 1-26), else all rows when there
are as many as the table's layers, else the rows left once the placeholder
rows are dropped, when that leaves exactly the table's layers.

Every refusal is a Refused with a short .kind (counted by the proxy) and a
sentence saying why.
"""
import base64
import binascii
import io

import numpy as np

NPY_MAGIC = b"\x93NUMPY"
MAX_TOKENS = 1 << 20
MAX_LAYERS = 1024
MAX_K = 64


class Refused(ValueError):
    """The routed experts of a response cannot be routed: .kind names the
    reason in a word (no_routing, format, shape, layers, ids), the message in
    a sentence."""

    def __init__(self, kind, msg):
        self.kind = kind
        super().__init__(msg)


def parse_layers(text):
    """A layer selection such as "1-26" or "0,3-5,9" as a sorted list of
    distinct row indices; ValueError with a sentence otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("a layer selection is a list of rows or ranges, e.g. 1-26 or 0,3-5")
    out = set()
    for part in text.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        try:
            a = int(lo)
            b = int(hi) if sep else a
        except ValueError:
            raise ValueError(f"layer selection {text!r}: {part!r} is neither a row nor a "
                             "range a-b of rows") from None
        if a < 0 or b < a or b >= MAX_LAYERS:
            raise ValueError(f"layer selection {text!r}: {part!r} is not a range of rows "
                             f"0..{MAX_LAYERS - 1} with a <= b")
        for r in range(a, b + 1):
            if r in out:
                raise ValueError(f"layer selection {text!r} names row {r} twice")
            out.add(r)
    return sorted(out)


def _b64(s, where):
    try:
        return base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError) as e:
        raise Refused("format", f"{where} is not base64: {e}") from None


def _npy(raw, where):
    try:
        a = np.load(io.BytesIO(raw), allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise Refused("format", f"{where} is not a readable .npy array: {e}") from None
    if not isinstance(a, np.ndarray):
        raise Refused("format", f"{where} holds no array")
    return a


def _nested(v, where):
    try:
        a = np.asarray(v)
    except (ValueError, TypeError) as e:
        raise Refused("shape", f"{where} is not a rectangular array: {e}") from None
    if a.dtype == object or a.dtype.kind not in "iu" and a.size:
        raise Refused("format", f"{where} is not an array of integer expert ids "
                      f"(type {a.dtype})")
    return a


def _count(body, key):
    for holder in (body.get("usage"), body.get("meta_info")):
        if isinstance(holder, dict):
            n = holder.get(key)
            if isinstance(n, int) and not isinstance(n, bool) and n >= 0:
                return n
    return None


def _find(body):
    """(value, where) of the first form present, or (None, None)."""
    choices = body.get("choices")
    c0 = choices[0] if isinstance(choices, list) and choices and \
        isinstance(choices[0], dict) else {}
    cands = [(c0.get("routed_experts"), "choices[0].routed_experts"),
             (body.get("prompt_routed_experts"), "prompt_routed_experts")]
    for holder, name in ((body.get("sglext"), "sglext"),
                         (c0.get("sglext"), "choices[0].sglext"),
                         (c0.get("sgl_ext"), "choices[0].sgl_ext"),
                         (body.get("meta_info"), "meta_info")):
        if isinstance(holder, dict):
            cands.append((holder.get("routed_experts"), f"{name}.routed_experts"))
    for v, where in cands:
        if v is not None:
            return v, where
    return None, None


def _flat_shape(n, tokens, table_layers, moe_layers, top_k, where):
    """(layers, k) of a flat int32 array of n ids over tokens tokens."""
    if tokens is None:
        raise Refused("shape", f"{where} is a flat array and the response gives no "
                      "prompt_tokens to shape it by")
    if n % tokens:
        raise Refused("shape", f"{where} holds {n} ids, not a multiple of the "
                      f"{tokens} prompt tokens")
    per = n // tokens
    if top_k:
        if per % top_k:
            raise Refused("shape", f"{where} holds {per} ids per token, not a multiple of "
                          f"--top-k {top_k}")
        return per // top_k, top_k
    rows = {r for r in (table_layers, moe_layers and moe_layers[-1] + 1) if r}
    fits = sorted({(r, per // r) for r in rows if per % r == 0 and 1 <= per // r <= MAX_K})
    if len(fits) == 1:
        return fits[0]
    raise Refused("shape", f"{where} holds {per} ids per token, which the table's "
                  f"{table_layers} layers and the layer map do not split into layers x k "
                  "without doubt: pass --top-k (and --moe-layers)")


def placeholder_rows(a):
    """Layer rows that are dense-layer placeholders: every slot of every token
    is expert 0 (k > 1 only: one slot of id 0 can be a real routing)."""
    if a.shape[2] < 2:
        return []
    return [int(r) for r in np.flatnonzero(~a.any(axis=(0, 2)))]


def map_layers(a, table_layers, moe_layers=None, where="routed experts"):
    """a [tokens, rows, k] reduced to the table's MoE layers (see the module's
    doc). table_layers None: the table is not known (locusd detached), the
    selection or the placeholder rows decide alone."""
    rows = a.shape[1]
    if moe_layers:
        if moe_layers[-1] >= rows:
            raise Refused("layers", f"--moe-layers names row {moe_layers[-1]} but {where} "
                          f"has {rows} layer rows")
        if table_layers and len(moe_layers) != table_layers:
            raise Refused("layers", f"--moe-layers selects {len(moe_layers)} rows; the ELDR "
                          f"table in use has {table_layers} layers")
        out = a[:, moe_layers]
        bad = placeholder_rows(out)
        if bad:
            raise Refused("layers", f"--moe-layers selects row {moe_layers[bad[0]]} of "
                          f"{where}, a dense-layer placeholder (expert 0 in every slot): "
                          "the selection does not match the model's MoE layers")
        return out
    if table_layers is not None and rows == table_layers:
        return a
    dense = placeholder_rows(a)
    if table_layers is None or rows - len(dense) == table_layers:
        if dense:
            keep = [r for r in range(rows) if r not in set(dense)]
            return a[:, keep]
        return a
    hint = f" (e.g. --moe-layers {rows - table_layers}-{rows - 1})" if rows > table_layers \
        else ""
    raise Refused("layers", f"{where} has {rows} layer rows ({len(dense)} of them dense "
                  f"placeholders) and the ELDR table in use has {table_layers} layers: pass "
                  f"--moe-layers to say which rows are its layers{hint}")


def routed_experts_of(body, *, table_layers=None, n_experts=None, moe_layers=None,
                      top_k=None, generated=False):
    """[prompt tokens, table layers, k] int32 expert ids from a prefill
    server's JSON response (a dict), or Refused saying why not. generated:
    the tokens after the prompt instead (a decode server's answer, whose
    routing covers prompt and completion tokens but the last)."""
    if not isinstance(body, dict):
        raise Refused("format", "the prefill response is not a JSON object")
    v, where = _find(body)
    if v is None:
        raise Refused("no_routing", "the prefill response has no routed experts (none of "
                      "choices[0].routed_experts, prompt_routed_experts, sglext.routed_experts, "
                      "meta_info.routed_experts): start vLLM with "
                      "--enable-return-routed-experts, or SGLang with "
                      "--enable-return-routed-experts and the proxy with "
                      "--ask-routed-experts")
    tokens = _count(body, "prompt_tokens")
    tokens = tokens or None
    shaped = tokens
    if generated:
        done = _count(body, "completion_tokens")
        if not tokens or not done:
            raise Refused("shape", "the answer gives no prompt_tokens and completion_tokens "
                          "to find the generated tokens' routing by")
        shaped = tokens + done - 1
    if isinstance(v, str):
        raw = _b64(v, where)
        if raw.startswith(NPY_MAGIC):
            a = _npy(raw, where)
        else:
            if len(raw) % 4:
                raise Refused("format", f"{where} is {len(raw)} bytes: neither .npy nor "
                              "flat int32")
            flat = np.frombuffer(raw, dtype="<i4")
            layers, k = _flat_shape(flat.size, shaped, table_layers, moe_layers, top_k,
                                    where)
            a = flat.reshape(-1, layers, k)
    elif isinstance(v, list):
        a = _nested(v, where)
    else:
        raise Refused("format", f"{where} is a JSON {type(v).__name__}: a base64 string or "
                      "nested lists expected")
    if a.ndim != 3 or a.dtype.kind not in "iu":
        raise Refused("shape", f"{where} is of shape {a.shape} and type {a.dtype}: "
                      "[tokens, layers, k] integers expected")
    t, rows, k = a.shape
    if not (1 <= t <= MAX_TOKENS and 1 <= rows <= MAX_LAYERS and 1 <= k <= MAX_K):
        raise Refused("shape", f"{where} is of shape {a.shape}: 1..{MAX_TOKENS} tokens, "
                      f"1..{MAX_LAYERS} layers and 1..{MAX_K} experts per token accepted")
    if top_k and k != top_k:
        raise Refused("shape", f"{where} routes {k} experts per token, --top-k says {top_k}")
    if generated:
        a = a[tokens:]
        if not len(a):
            raise Refused("shape", f"{where} covers the prompt's tokens only")
    elif tokens and t > tokens:
        a = a[:tokens]  # the prompt's tokens (a longer sequence counts generated ones)
    a = map_layers(a, table_layers, moe_layers, where)
    lo, hi = int(a.min()), int(a.max())
    if lo < 0 or (n_experts and hi >= n_experts):
        bad = lo if lo < 0 else hi
        raise Refused("ids", f"{where} routes to expert {bad}: the ELDR table in use has "
                      f"experts 0..{n_experts - 1}" if n_experts else
                      f"{where} routes to expert {bad}, not an expert id")
    return np.ascontiguousarray(a, dtype=np.int32)
