# SPDX-License-Identifier: MIT
"""Every refusal of the prefill side: bad input raises TypeError / ValueError
with a sentence and submits nothing (locusd's route_requests and
evict_requests do not move); what locusd refuses becomes a LocusError naming
the code and the reason."""
import numpy as np
import pytest

import locus
from conftest import wait_for


@pytest.fixture
def prefill(daemon, attach):
    return attach(daemon.instance, prefill=True)


@pytest.fixture
def nothing_submitted(daemon):
    """Checks, after the test, that locusd saw no request from it."""
    ctr = locus.Counters(daemon.instance)
    before = (ctr.value("route_requests"), ctr.value("evict_requests"))
    yield
    assert (ctr.value("route_requests"), ctr.value("evict_requests")) == before
    ctr.close()


def _x(trace):
    return trace[1][0]


def _put(a, i, v):
    """a with flat element i set to v (in a's own dtype)."""
    a.flat[i] = v
    return a


BAD_EXPERTS = [
    (lambda x: x.astype(np.float32), TypeError, "must hold integers .* not float32"),
    (lambda x: x.astype(bool), TypeError, "must hold integers .* not bool"),
    (lambda x: "0 1 2", TypeError, "numpy array or a torch tensor, not str"),
    (lambda x: x[0], ValueError, "3 dimensions.* not 2-dimensional"),
    (lambda x: x[:, :, :, None], ValueError, "not 4-dimensional"),
    (lambda x: x[:0], ValueError, "has no tokens"),
    (lambda x: x[:, :25], ValueError, "has 25 MoE layers; the ELDR table in use has 26"),
    (lambda x: np.concatenate([x] * 11, axis=2), ValueError, "k = 66 experts per token"),
    (lambda x: np.where(np.arange(x.size).reshape(x.shape) == 40, 64, x), ValueError,
     r"expert id 64 at token 0, layer 6, slot 4 is out of range: .* has 64 experts"),
    (lambda x: x - 1, ValueError, "expert id -1 .* out of range"),
    (lambda x: _put(x.astype(np.uint64), 7, 2**63 + 5), ValueError,
     r"expert id 9223372036854775813 at token 0, layer 1, slot 1 is out of range"),
    (lambda x: _put(x.astype(np.int8), 161, -3), ValueError,
     r"expert id -3 at token 1, layer 0, slot 5 is out of range"),
    (lambda x: (x + 64).astype(">i4"), ValueError,
     r"expert id \d+ at token 0, layer 0, slot 0 is out of range"),
    (lambda x: [[[1, 2], [3]]], ValueError, "not a rectangular array"),
]


@pytest.mark.parametrize("make, exc, msg", BAD_EXPERTS)
def test_bad_routed_experts(prefill, trace, nothing_submitted, make, exc, msg):
    x = make(_x(trace))
    with pytest.raises(exc, match=msg):
        prefill.route(x)
    with pytest.raises(exc, match=msg):
        prefill.submit(x)
    assert prefill.in_flight == 0


def test_bad_torch_tensors(prefill, trace, nothing_submitted):
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(_x(trace))
    with pytest.raises(TypeError, match="not torch.float32|not float32"):
        prefill.route(x.float())
    # a tensor not in host memory ("meta" stands in for cuda on a machine without GPUs)
    with pytest.raises(ValueError, match="is on device meta: .* pass a CPU tensor"):
        prefill.route(torch.empty(x.shape, dtype=torch.int64, device="meta"))
    with pytest.raises(ValueError, match="out of range"):
        prefill.route(x + 64)


@pytest.mark.parametrize("kw, exc, msg", [
    ({"allowed": [64]}, ValueError, "decoder ids 0..63 only"),
    ({"allowed": []}, ValueError, "names no decoder"),
    ({"allowed": "0"}, TypeError, "must be an integer"),
    ({"allowed": 1.5}, TypeError, "sequence of decoder ids"),
    ({"request_id": -1}, ValueError, "request_id = -1 is out of range"),
    ({"request_id": 2**64}, ValueError, "out of range"),
    ({"timeout": float("nan")}, ValueError, "out of range"),
    ({"cached_blocks": [-5]}, ValueError, r"cached_blocks\[0\] = -5 is not a u64 hash"),
    ({"cached_blocks": np.array([-5])}, ValueError, "hash -5 is negative"),
    ({"cached_blocks": [1.0]}, TypeError, "must be an integer hash"),
    ({"cached_blocks": 5}, TypeError, "sequence of block hashes"),
    ({"cached_blocks": [1, 2, 1]}, ValueError, "block hash 0x1 is named twice"),
    ({"cached_blocks": [7], "new_blocks": [7]}, ValueError, "0x7 is named twice"),
    ({"new_blocks": [1, 2]}, ValueError, "2 blocks of 16 tokens but routed_experts has 17"),
    ({"cached_blocks": list(range(16385))}, ValueError, "at most 16384"),
    ({"cached_blocks": np.zeros((2, 2), dtype=np.uint64)}, ValueError, "1-dimensional"),
])
def test_bad_options(prefill, trace, nothing_submitted, kw, exc, msg):
    with pytest.raises(exc, match=msg):
        prefill.route(_x(trace), **kw)


def test_duplicate_request_id_in_flight(daemon, attach, trace):
    prefill = attach(daemon.instance, prefill=True, decoder=2)  # in the table
    prefill.report_load(0)
    with locus.Counters(daemon.instance) as ctr:
        wait_for(lambda: ctr.value("decoder_up", 2) == 1, what="decoder 2 up")
    rid = prefill.submit(_x(trace), request_id=99)
    with pytest.raises(ValueError, match="request_id 99 is already in flight"):
        prefill.submit(_x(trace), request_id=99)
    d = prefill.wait(rid)
    assert d.request_id == 99
    with pytest.raises(ValueError, match="not in flight"):
        prefill.wait(rid)


def test_bad_evict(prefill, nothing_submitted):
    with pytest.raises(ValueError, match="not a u64 hash"):
        prefill.evict([2**64])
    with pytest.raises(ValueError, match="at most 16384"):
        prefill.evict(range(16385))


def test_wrong_role(daemon, attach, trace):
    dec = attach(daemon.instance, decoder=11)
    with pytest.raises(ValueError, match="not a prefiller: attach with prefill=True"):
        dec.route(_x(trace))
    p = attach(daemon.instance, prefill=True)
    with pytest.raises(ValueError, match="not a decoder: attach with decoder=ID"):
        p.report_load(1)
    with pytest.raises(ValueError, match="not a decoder"):
        p.poll_signatures()
    with pytest.raises(ValueError, match="load = -1 is out of range"):
        dec.report_load(-1)
    with pytest.raises(TypeError, match="load must be an integer"):
        dec.report_load(1.0)


def test_no_table(bare, attach, trace):
    """No ELDR table pushed: refused before anything is sent (NoTableError is a
    ValueError and a LocusError naming LOCUS_ESTATE)."""
    p = attach(bare.instance, prefill=True)
    with pytest.raises(locus.NoTableError) as e:
        p.route(_x(trace))
    assert isinstance(e.value, ValueError) and e.value.name == "LOCUS_ESTATE"
    assert "no ELDR table is in use" in str(e.value)
    with pytest.raises(locus.NoTableError):
        p.table_shape(1)
    with locus.Counters(bare.instance) as ctr:
        assert ctr.value("route_requests") == 0


def test_locusd_refusals_name_the_code(daemon, attach, trace, fresh):
    # no decoder up: locusd answers LOCUS_ENODEST
    p = attach(daemon.instance, prefill=True)
    with locus.Counters(daemon.instance) as ctr:
        wait_for(lambda: all(ctr.value("decoder_up", i) == 0 for i in range(64)),
                 what="every decoder down")
        before = ctr.value("rejected_no_decoder")
        with pytest.raises(locus.LocusError) as e:
            p.route(_x(trace), allowed=[3])
        assert ctr.value("rejected_no_decoder") == before + 1
    assert e.value.name == "LOCUS_ENODEST"
    assert "LOCUS_ENODEST (no destination available): no eligible decoder is up" in str(e.value)
    # submit / poll hands the same refusal over in the Decision
    rid = p.submit(_x(trace))
    got = []
    wait_for(lambda: got.extend(p.poll()) or got, what="the refused decision")
    assert got[0].request_id == rid and not got[0].ok and got[0].status == -1010
    with pytest.raises(locus.LocusError, match="LOCUS_ENODEST"):
        got[0].raise_for_status()
    # a locusd without a signature cache: ROUTE_BLOCKS refused before it is sent
    nc = fresh("sig_cache_bytes = 0\n")
    q = attach(nc.instance, prefill=True, decoder=0)
    assert q.block_tokens == 0
    with pytest.raises(locus.LocusError) as e:
        q.route(_x(trace), new_blocks=[1])
    assert e.value.name == "EOPNOTSUPP" and "sig_cache_bytes = 0" in str(e.value)
