# SPDX-License-Identifier: MIT
"""Route decisions through locusd equal the C router's for the same table and
loads, and every decoder receives the bytes the C library builds: the
reference is tools/python/tests/route_ref.c (the pure ELDR router, the C
trace reader, locus_eldr_sig_build), never this package's own output."""
import os
import struct
import subprocess

import numpy as np
import pytest

import locus
from conftest import BUILD, TRACE, close_and_wait, wait_for

REF = os.path.join(BUILD, "tools", "python", "route_ref")


def reference(table, loads, mode, tmp_path):
    """[(decoder, band, similarity bits)], [signature bytes] per trace request."""
    sigs = tmp_path / f"sigs-{mode}.bin"
    arg = ",".join(f"{d}={n}" for d, n in sorted(loads.items()))
    out = subprocess.run([REF, table, TRACE, arg, str(mode), str(sigs)], check=True,
                         capture_output=True, text=True, timeout=60).stdout.split("\n")
    rows = [line.split() for line in out if line]
    dec = [(int(r[1]), int(r[2]), int(r[3], 16)) for r in rows]
    blob = sigs.read_bytes()
    n = len(blob) // len(rows)
    return dec, [blob[i * n:(i + 1) * n] for i in range(len(rows))]


def bits(f):
    return struct.unpack("<I", struct.pack("<f", f))[0]


@pytest.fixture
def decoders(daemon, attach):
    """Decoders 0..3 attached; a report(loads) that waits until locusd's
    router runs on exactly those loads (its decoder_load gauges show them)."""
    ds = [attach(daemon.instance, decoder=i) for i in range(4)]
    ctr = locus.Counters(daemon.instance)

    def report(loads):
        for d in ds:
            d.report_load(loads[d.decoder])
        wait_for(lambda: all(ctr.value("decoder_up", i) == 1 and
                             ctr.value("decoder_load", i) == loads[i] for i in range(4)),
                 what="locusd to take the load reports")
    yield ds, report
    ctr.close()
    close_and_wait(ds)


def deliveries(ds, n):
    """{request id: (decoder id, payload bytes)} of n signatures."""
    got = {}

    def more():
        for d in ds:
            for s in d.poll_signatures(max=1000):
                assert s.request_id not in got, f"request {s.request_id} delivered twice"
                got[s.request_id] = (d.decoder, s.payload.tobytes(), s.prompt_tokens)
        return len(got) >= n
    wait_for(more, what=f"{n} signatures at the decoders")
    return got


def check(decisions, rids, ref, sigs, got, reqs):
    for i, rid in enumerate(rids):
        d = decisions[rid]
        assert (d.decoder, d.band, bits(d.similarity)) == ref[i], f"request {i}"
        assert not d.partial and d.error is None
        assert got[rid][0] == d.decoder, f"request {i} delivered to another decoder"
        assert got[rid][1] == sigs[i], f"request {i}: signature bytes differ from C's"
        assert got[rid][2] == len(reqs[i])


def test_route_equals_c_router(daemon, eldr_table, decoders, trace, tmp_path):
    ds, report = decoders
    loads = {0: 3, 1: 0, 2: 5, 3: 1}
    report(loads)
    ref, sigs = reference(eldr_table, loads, 0, tmp_path)
    _, reqs = trace
    with locus.attach(daemon.instance, prefill=True) as p:
        decisions = {}
        rids = []
        for x in reqs:  # one at a time: each waits for its decision
            d = p.route(x)
            decisions[d.request_id] = d
            rids.append(d.request_id)
    check(decisions, rids, ref, sigs, deliveries(ds, len(reqs)), reqs)
    assert len({d.decoder for d in decisions.values()}) > 1, "the reference spread nothing"


def test_submit_poll_many_in_flight(daemon, eldr_table, decoders, trace, tmp_path):
    ds, report = decoders
    loads = {0: 1, 1: 4, 2: 0, 3: 2}
    report(loads)
    ref, sigs = reference(eldr_table, loads, 1, tmp_path)
    _, reqs = trace
    with locus.attach(daemon.instance, prefill=True) as p:
        rids = [p.submit(x, allowed=[i % 4, (i + 1) % 4], request_id=1000 + i)
                for i, x in enumerate(reqs)]
        assert p.in_flight > 0
        decisions = {}
        wait_for(lambda: decisions.update({d.request_id: d for d in p.poll()}) or
                 len(decisions) == len(reqs), what="every decision")
        assert p.in_flight == 0
    assert rids == [1000 + i for i in range(len(reqs))]
    check(decisions, rids, ref, sigs, deliveries(ds, len(reqs)), reqs)
    for i, rid in enumerate(rids):
        assert decisions[rid].decoder in (i % 4, (i + 1) % 4)


def test_torch_and_lists_route_alike(daemon, eldr_table, decoders, trace, tmp_path):
    torch = pytest.importorskip("torch")
    ds, report = decoders
    loads = {0: 2, 1: 2, 2: 2, 3: 2}
    report(loads)
    ref, sigs = reference(eldr_table, loads, 0, tmp_path)
    _, reqs = trace
    n = 12
    with locus.attach(daemon.instance, prefill=True) as p:
        decisions, rids = {}, []
        for i, x in enumerate(reqs[:n]):
            # what engines hand over: int64 / int32 tensors, numpy int32, nested lists
            arg = [torch.from_numpy(x), torch.from_numpy(x).to(torch.int32), x.astype(np.int32),
                   x.tolist()][i % 4]
            d = p.route(arg)
            decisions[d.request_id] = d
            rids.append(d.request_id)
    check(decisions, rids, ref[:n], sigs[:n], deliveries(ds, n), reqs[:n])


def test_every_integer_type_routes_alike(daemon, eldr_table, decoders, trace, tmp_path):
    """The library checks and narrows the engine's ids as they are: every integer
    dtype, another byte order and a non-contiguous view give C's decision and bytes."""
    ds, report = decoders
    loads = {0: 1, 1: 3, 2: 0, 3: 2}
    report(loads)
    ref, sigs = reference(eldr_table, loads, 0, tmp_path)
    _, reqs = trace
    kinds = [lambda x: x.astype(np.uint8), lambda x: x.astype(np.int8),
             lambda x: x.astype(np.uint16), lambda x: x.astype(np.int16),
             lambda x: x.astype(np.uint32), lambda x: x.astype(np.int32),
             lambda x: x.astype(np.uint64), lambda x: x.astype(">i8"),
             lambda x: np.asfortranarray(x), lambda x: np.repeat(x, 2, axis=2)[:, :, ::2]]
    n = 2 * len(kinds)
    with locus.attach(daemon.instance, prefill=True) as p:
        decisions, rids = {}, []
        for i, x in enumerate(reqs[:n]):
            arg = kinds[i % len(kinds)](x)
            assert np.array_equal(arg, x)
            d = p.route(arg)
            decisions[d.request_id] = d
            rids.append(d.request_id)
    check(decisions, rids, ref[:n], sigs[:n], deliveries(ds, n), reqs[:n])


def test_one_attachment_prefill_and_decoder(daemon, trace, attach):
    """Several roles in one slot: a prefiller that is decoder 0 too routes to
    itself (the only decoder up) and receives its own signature."""
    _, reqs = trace
    with attach(daemon.instance, prefill=True, decoder=0, rank=0) as c:
        c.report_load(0)
        ctr = locus.Counters(daemon.instance)
        wait_for(lambda: ctr.value("decoder_up", 0) == 1 and
                 all(ctr.value("decoder_up", i) == 0 for i in (1, 2, 3)), what="decoder 0 up")
        ctr.close()
        d = c.route(reqs[5], request_id=42)
        assert (d.request_id, d.decoder, d.band) == (42, 0, 1)
        s = c.poll_signatures(timeout=2.0)
        assert [x.request_id for x in s] == [42]
        assert s[0].counts.shape == (reqs[5].shape[1], 64)
        # counts[l][e]: tokens whose top-k at layer l names e (a repeated id once)
        want = np.zeros_like(s[0].counts)
        for tok in reqs[5]:
            for layer, ids in enumerate(tok):
                want[layer, np.unique(ids)] += 1
        assert np.array_equal(s[0].counts, want)


def test_route_blocks_through_the_signature_cache(daemon, trace, tmp_path, eldr_table, attach):
    """ROUTE_BLOCKS: the decoder gets the whole prompt's signature (C's bytes)
    when the prefix's blocks are cached, partial once they are evicted."""
    _, reqs = trace
    _, sigs = reference(eldr_table, {0: 0, 1: 0, 2: 0, 3: 0}, 0, tmp_path)
    x = reqs[7]  # 17 tokens: one 16-token block and a 1-token tail
    h = 0x1234_5678_9abc_def0 + os.getpid()
    with attach(daemon.instance, prefill=True, decoder=0) as c:
        assert c.block_tokens == 16
        c.report_load(0)
        ctr = locus.Counters(daemon.instance)
        wait_for(lambda: ctr.value("decoder_up", 0) == 1, what="decoder 0 up")
        # the first request prefills the whole prompt and caches its full block
        d1 = c.route(x, cached_blocks=[], new_blocks=[h], request_id=1)
        # the next one hits it in the KV cache: only the tail is prefilled
        d2 = c.route(x[16:], cached_blocks=[h], request_id=2)
        assert (d1.blocks_found, d1.partial) == (0, False)
        assert (d2.blocks_found, d2.partial) == (1, False)
        got = {s.request_id: s.payload.tobytes() for s in c.poll_signatures(timeout=2.0)}
        while len(got) < 2:
            got.update({s.request_id: s.payload.tobytes() for s in c.poll_signatures(timeout=2)})
        assert got[1] == sigs[7] and got[2] == sigs[7], "not the whole prompt's signature"
        assert c.evict([h, h + 1]) == 1
        d3 = c.route(x[16:], cached_blocks=[h], request_id=3)
        assert (d3.blocks_found, d3.partial) == (0, True)
        s3 = c.poll_signatures(timeout=2.0)
        assert s3[0].prompt_tokens == 1  # the tail alone: the block is gone
        ctr.close()


def test_more_in_flight_than_the_ring_holds(daemon, attach, trace):
    """1,500 requests submitted back to back: more than the 1,024-entry submit
    ring and the decoders' 256-slot inboxes hold. submit() waits (bounded) for
    room, full inboxes are resubmitted; every request is decided once and
    delivered once, while two decoders drain in a thread."""
    import threading
    _, reqs = trace
    ds = [attach(daemon.instance, decoder=i) for i in (0, 1)]
    for d in ds:
        d.report_load(0)
    with locus.Counters(daemon.instance) as ctr:
        wait_for(lambda: all(ctr.value("decoder_up", i) == 1 for i in (0, 1)), what="up")
    got, stop = {}, threading.Event()

    def drain():
        while not stop.is_set():
            for d in ds:
                for s in d.poll_signatures(max=256, timeout=0.001):
                    got[s.request_id] = got.get(s.request_id, 0) + 1
    t = threading.Thread(target=drain)
    t.start()
    try:
        p = attach(daemon.instance, prefill=True, timeout=30.0)
        assert p.ring_size == 1024
        n = 1500
        rids = [p.submit(reqs[i % len(reqs)], allowed=[0, 1]) for i in range(n)]
        decisions = {}
        wait_for(lambda: decisions.update({d.request_id: d for d in p.poll()}) or
                 len(decisions) == n, 30, "every decision")
        wait_for(lambda: len(got) == n, 30, "every delivery")
    finally:
        stop.set()
        t.join(10)
    assert sorted(decisions) == sorted(rids)
    assert all(d.ok and d.decoder in (0, 1) for d in decisions.values())
    assert set(got) == set(rids) and set(got.values()) == {1}
