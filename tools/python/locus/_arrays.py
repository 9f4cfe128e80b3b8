# SPDX-License-Identifier: MIT
"""Checking what callers pass: numpy arrays or torch tensors (CPU), integer
ids, u64 hashes. Every refusal is a TypeError (the kind of thing) or a
ValueError (its shape, device or values) with a sentence naming the argument.
"""
import ctypes
import numbers

import numpy as np

_char_at, _addressof = ctypes.c_char.from_buffer, ctypes.addressof


def addr(a):
    """The address of a C-contiguous array's first byte: through the buffer protocol
    when the array is writable and not empty (a third of a.ctypes.data's cost, which
    every call paid a few times), else a.ctypes.data."""
    try:
        return _addressof(_char_at(a))
    except (TypeError, ValueError, BufferError):
        return a.ctypes.data


def _is_torch(x):
    return type(x).__module__.split(".")[0] == "torch" and hasattr(x, "device")


def as_numpy(x, name):
    """x as a numpy array without a copy where it can be one (a CPU tensor's
    memory, a numpy array as is); nested lists and tuples are converted."""
    if isinstance(x, np.ndarray):
        return x
    if _is_torch(x):
        if x.device.type != "cpu":
            raise ValueError(f"{name} is on device {x.device}: locus reads it with the CPU, "
                             "pass a CPU tensor (.cpu())")
        return x.detach().numpy()
    if isinstance(x, (list, tuple)):
        try:
            a = np.asarray(x)
        except ValueError as e:
            raise ValueError(f"{name} is not a rectangular array: {e}") from None
        if a.dtype == object:
            raise ValueError(f"{name} is not a rectangular array of numbers")
        return a
    raise TypeError(f"{name} must be a numpy array or a torch tensor, "
                    f"not {type(x).__name__}")


def check_int_dtype(a, name):
    if not np.issubdtype(a.dtype, np.integer):
        raise TypeError(f"{name} must hold integers (expert ids), not {a.dtype}")


def _check_routed_shape(a, n_layers, name):
    """Refuse routed experts that are not [tokens >= 1, n_layers, 1..64]."""
    if a.ndim != 3:
        raise ValueError(f"{name} must be [prompt_len, n_moe_layers, k] (3 dimensions, as "
                         f"vLLM / SGLang return it), not {a.ndim}-dimensional {a.shape}")
    tokens, layers, k = a.shape
    if tokens < 1:
        raise ValueError(f"{name} has no tokens (shape {a.shape})")
    if layers != n_layers:
        raise ValueError(f"{name} has {layers} MoE layers; the ELDR table in use has "
                         f"{n_layers}")
    if not 1 <= k <= 64:
        raise ValueError(f"{name} has k = {k} experts per token; 1..64 are accepted")


def routed_experts(x, n_layers, n_experts, name="routed_experts"):
    """[tokens, n_layers, k] expert ids, checked against the table's shape,
    as a C-contiguous uint16 array (a copy unless it already is one)."""
    a = as_numpy(x, name)
    check_int_dtype(a, name)
    _check_routed_shape(a, n_layers, name)
    lo, hi = int(a.min()), int(a.max())
    if lo < 0 or hi >= n_experts:
        bad = np.argwhere((a < 0) | (a >= n_experts))[0]
        raise ValueError(f"{name}: expert id {int(a[tuple(bad)])} at token {bad[0]}, layer "
                         f"{bad[1]}, slot {bad[2]} is out of range: the ELDR table in use "
                         f"has {n_experts} experts (ids 0..{n_experts - 1})")
    return np.ascontiguousarray(a, dtype=np.uint16)


# numpy integer dtypes -> liblocus's enum locus_ids_type (native byte order)
_IDS_TYPES = {np.dtype(t): i for i, t in enumerate(
    (np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32, np.uint64, np.int64), 1)}


def routed_experts_typed(x, n_layers, n_experts, name="routed_experts"):
    """[tokens, n_layers, k] expert ids checked for kind and shape against the
    table's, as (a C-contiguous array of the caller's integer type, its
    locus_ids_type): no copy when x is one already. The ids' range is checked
    by the C library as it builds the signature (locus_client_route_typed),
    which names the first id out of range as routed_experts() does."""
    a = x if type(x) is np.ndarray else as_numpy(x, name)
    t = _IDS_TYPES.get(a.dtype)
    if t is None:
        check_int_dtype(a, name)
        a = a.astype(a.dtype.newbyteorder("="))  # another byte order: the same values
        t = _IDS_TYPES.get(a.dtype)
        if t is None:
            a, t = a.astype(np.int64), _IDS_TYPES[np.dtype(np.int64)]
    _check_routed_shape(a, n_layers, name)
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    return a, t


def check_uint(v, name, bits=32):
    """v as a Python int in [0, 2**bits); bool is refused (it is no id)."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{name} must be an integer, not {type(v).__name__}")
    v = int(v)
    if not 0 <= v < 1 << bits:
        raise ValueError(f"{name} = {v} is out of range (0..{(1 << bits) - 1})")
    return v


def hashes(x, name, cap):
    """A list of block hashes as a C-contiguous uint64 array: each in
    [0, 2**64) (mask a signed hash with & (2**64 - 1)), at most cap."""
    if _is_torch(x) or isinstance(x, np.ndarray):
        a = as_numpy(x, name)
        check_int_dtype(a, name)
        if a.ndim != 1:
            raise ValueError(f"{name} must be a 1-dimensional list of hashes, not {a.shape}")
        if a.size and a.dtype != np.uint64 and int(a.min()) < 0:
            raise ValueError(f"{name}: hash {int(a.min())} is negative: block hashes are u64 "
                             "(mask a signed one with & (2**64 - 1))")
        out = np.ascontiguousarray(a, dtype=np.uint64)
    else:
        try:
            items = list(x)
        except TypeError:
            raise TypeError(f"{name} must be a sequence of block hashes, "
                            f"not {type(x).__name__}") from None
        for i, h in enumerate(items):
            if isinstance(h, bool) or not isinstance(h, numbers.Integral):
                raise TypeError(f"{name}[{i}] must be an integer hash, not {type(h).__name__}")
            if not 0 <= int(h) < 1 << 64:
                raise ValueError(f"{name}[{i}] = {int(h)} is not a u64 hash (mask a signed "
                                 "one with & (2**64 - 1))")
        out = np.array([int(h) for h in items], dtype=np.uint64)
    if out.size > cap:
        raise ValueError(f"{name} names {out.size} blocks; at most {cap} in one request")
    return out


def decoder_mask(allowed):
    """allowed decoder ids -> the signature's allowed_decoders bit mask (0 = any)."""
    if allowed is None:
        return 0
    if isinstance(allowed, numbers.Integral) and not isinstance(allowed, bool):
        allowed = [allowed]
    mask = 0
    try:
        ids = list(allowed)
    except TypeError:
        raise TypeError("allowed must be a sequence of decoder ids, "
                        f"not {type(allowed).__name__}") from None
    if not ids:
        raise ValueError("allowed names no decoder (pass None to allow every decoder)")
    for d in ids:
        d = check_uint(d, "allowed decoder id")
        if d >= 64:
            raise ValueError(f"allowed decoder id {d}: a constraint can name decoder ids "
                             "0..63 only (decoders >= 64 are reachable with allowed=None)")
        mask |= 1 << d
    return mask
