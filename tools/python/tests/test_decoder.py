# SPDX-License-Identifier: MIT
"""The decoder side: load reports reach locusd, signatures arrive with the
prefiller's request id, views hold their inbox slot until released, and a
wait with nothing to receive ends at its timeout."""
import time

import numpy as np
import pytest

import locus
from conftest import wait_for


def test_report_load_reaches_locusd(daemon, attach):
    d = attach(daemon.instance, decoder=3)
    with locus.Counters(daemon.instance) as ctr:
        for load in (7, 0, 123456):
            d.report_load(load)
            wait_for(lambda: ctr.value("decoder_load", 3) == load, what=f"load {load}")
        assert ctr.value("decoder_up", 3) == 1


def prefill_and_decoder(daemon, attach, d):
    """A client that routes to itself as decoder d (up), the counters, the inbox slots
    in use before it receives anything."""
    c = attach(daemon.instance, prefill=True, decoder=d)
    c.report_load(0)
    ctr = locus.Counters(daemon.instance)
    wait_for(lambda: ctr.value("decoder_up", d) == 1, what=f"decoder {d} up")
    return c, ctr, ctr.value("inbox_slots_used")


def test_signature_views_hold_the_slot_until_released(daemon, attach, trace):
    _, reqs = trace
    c, ctr, used0 = prefill_and_decoder(daemon, attach, 0)
    for i in range(3):
        c.route(reqs[i], request_id=500 + i, allowed=[0])
    views = []
    wait_for(lambda: views.extend(c.poll_signatures(copy=False)) or len(views) == 3,
             what="3 signatures")
    assert [v.request_id for v in views] == [500, 501, 502]
    assert all(not v.released for v in views)
    # the gauge is refreshed by locusd's housekeeping pass, not at delivery
    wait_for(lambda: ctr.value("inbox_slots_used") == used0 + 3, what="3 slots held")
    keep = [v.counts.copy() for v in views]
    views[0].release()
    views[0].release()  # once only
    with views[1]:
        assert views[1].counts.base is not None  # a view of the inbox, not a copy
    wait_for(lambda: ctr.value("inbox_slots_used") == used0 + 1, what="two slots back")
    views[2].release()
    wait_for(lambda: ctr.value("inbox_slots_used") == used0, what="every slot back")
    for v, k, x in zip(views, keep, reqs):
        assert v.prompt_tokens == len(x) and v.allowed_decoders == 1
        assert k.shape == (x.shape[1], 64) and int(k.sum()) > 0
    # copies (the default) release at once
    c.route(reqs[3], request_id=600)
    s = []
    wait_for(lambda: s.extend(c.poll_signatures()) or s, what="a copied signature")
    assert s[0].released and s[0].counts.flags.owndata
    wait_for(lambda: ctr.value("inbox_slots_used") == used0, what="its slot back")
    ctr.close()


def test_poll_signatures_waits_no_longer_than_asked(daemon, attach):
    d = attach(daemon.instance, decoder=4)
    t0 = time.monotonic()
    assert d.poll_signatures(timeout=0.2) == []
    assert 0.19 <= time.monotonic() - t0 < 1.0
    t0 = time.monotonic()
    assert d.poll_signatures() == []
    assert time.monotonic() - t0 < 0.1
    with pytest.raises(ValueError, match="out of range"):
        d.poll_signatures(timeout=-1)
    with pytest.raises(TypeError):
        d.poll_signatures(max=None)


def test_max_limits_a_poll(daemon, attach, trace):
    _, reqs = trace
    c = attach(daemon.instance, prefill=True, decoder=1)
    c.report_load(0)
    with locus.Counters(daemon.instance) as ctr:
        wait_for(lambda: ctr.value("decoder_up", 1) == 1, what="decoder 1 up")
    for i in range(5):
        c.route(reqs[i], allowed=[1])
    first = []
    wait_for(lambda: first.extend(c.poll_signatures(max=2)) or len(first) >= 2,
             what="two signatures")
    assert len(first) == 2
    rest = []
    wait_for(lambda: rest.extend(c.poll_signatures(max=10)) or len(first) + len(rest) == 5,
             what="the other three")
    ids = [s.request_id for s in first + rest]
    assert ids == sorted(ids) and len(set(ids)) == 5
    assert np.array_equal(first[0].counts.shape, (26, 64))
