# SPDX-License-Identifier: MIT
"""Attaching: roles, what the slot looks like, every refusal (ours before
anything is sent, locusd's with its code), a closed client, a killed locusd."""
import errno
import signal
import threading
import time

import pytest

import locus
from locus import _lib
from conftest import close_and_wait, wait_for


def test_layouts_and_error_names():
    _lib.check_layouts()
    # the codes mirrored in _lib name the texts of the C library's locus_strerror
    assert _lib.strerror(_lib.LOCUS_ENODEST) == "no destination available"
    assert _lib.strerror(-_lib.LOCUS_ESTATE) == "wrong state"
    assert _lib.strerror(_lib.LOCUS_EFULL) == "full"
    assert locus.code_name(-errno.EEXIST) == "EEXIST"
    assert locus.code_name(_lib.LOCUS_ERANGE) == "LOCUS_ERANGE"


def test_attach_roles_and_slot(daemon, attach):
    p = attach(daemon.instance, prefill=True)
    assert (p.prefill, p.decoder, p.rank) == (True, None, None)
    assert p.stage.size == p.stage_size > 0 and p.ring_size >= 64 and p.inbox_slots == 256
    assert "prefill" in repr(p) and daemon.instance in repr(p)
    all3 = attach(daemon.instance, prefill=True, decoder=5, rank=3, timeout=1.5)
    assert (all3.decoder, all3.rank, all3.timeout) == (5, 3, 1.5)
    assert all3.slot != p.slot
    with locus.Counters(daemon.instance) as ctr:
        wait_for(lambda: ctr.value("clients_attached") >= 2, what="both attached")
    # the stage is the slot's memory: a numpy view that writes through
    p.stage[:4] = [1, 2, 3, 4]
    assert bytes(p.stage[:4]) == b"\x01\x02\x03\x04"


def test_close_is_idempotent_and_final(daemon):
    c = locus.attach(daemon.instance, prefill=True, decoder=9)
    with c:
        c.report_load(1)
    assert c.closed and "closed" in repr(c)
    c.close()
    with pytest.raises(ValueError, match="closed"):
        c.report_load(2)
    with pytest.raises(ValueError, match="closed"):
        c.poll()
    close_and_wait([c])


@pytest.mark.parametrize("kw, exc, msg", [
    ({}, ValueError, "needs a role"),
    ({"prefill": 1}, TypeError, "prefill must be True or False"),
    ({"decoder": True}, TypeError, "decoder must be an integer"),
    ({"decoder": -1}, ValueError, "decoder = -1 is out of range"),
    ({"decoder": 2**32}, ValueError, "out of range"),
    ({"rank": "0"}, TypeError, "rank must be an integer"),
    ({"prefill": True, "timeout": -1}, ValueError, "timeout = -1 s is out of range"),
    ({"prefill": True, "timeout": "2"}, TypeError, "timeout must be a number"),
])
def test_attach_bad_arguments(daemon, kw, exc, msg):
    # attaches ever accepted = attached now + detached + reclaimed: a detach of an
    # earlier test's client still being processed moves between the terms only
    # (read until two reads agree: the terms are not updated in one store)
    def accepted(ctr):
        names = ("clients_attached", "clients_detached", "clients_reclaimed")
        last = None
        for _ in range(100):
            now = sum(ctr.value(n) for n in names)
            if now == last:
                return now
            last = now
            time.sleep(0.001)
        return now

    with locus.Counters(daemon.instance) as ctr:
        before = accepted(ctr)
        with pytest.raises(exc, match=msg):
            locus.attach(daemon.instance, **kw)
        assert accepted(ctr) == before  # nothing asked of locusd


@pytest.mark.parametrize("name, exc, msg", [
    ("../etc", ValueError, "not valid"),
    ("", ValueError, "not valid"),
    (7, TypeError, "instance must be a str"),
])
def test_attach_bad_instance(name, exc, msg):
    with pytest.raises(exc, match=msg):
        locus.attach(name, prefill=True)


def test_attach_no_such_instance():
    with pytest.raises(locus.LocusGone) as e:
        locus.attach("nosuch-instance-here", prefill=True)
    assert e.value.name == "ENOENT" and "ENOENT" in str(e.value)
    assert isinstance(e.value, ConnectionError)


def test_attach_refused_by_locusd(daemon, attach):
    attach(daemon.instance, decoder=7)
    with pytest.raises(locus.LocusError) as e:
        locus.attach(daemon.instance, decoder=7)
    assert e.value.name == "EEXIST" and "decoder id 7 is attached already" in str(e.value)
    attach(daemon.instance, rank=2)
    with pytest.raises(locus.LocusError, match="EEXIST.*rank 2 is attached already"):
        locus.attach(daemon.instance, rank=2)
    with pytest.raises(locus.LocusError) as e:
        locus.attach(daemon.instance, rank=4)  # the embedded cluster: 1 node x 4 GPUs
    assert e.value.name == "LOCUS_ERANGE" and "rank 4 is not on node 0" in str(e.value)
    with pytest.raises(locus.LocusError, match="LOCUS_ERANGE.*max_decoders"):
        locus.attach(daemon.instance, decoder=64)


def test_attach_no_free_slot(bare, attach):
    cs = [attach(bare.instance, prefill=True) for _ in range(4)]  # client_slots = 4
    t0 = time.monotonic()
    with pytest.raises(locus.LocusError) as e:
        locus.attach(bare.instance, prefill=True)
    assert e.value.name == "LOCUS_EFULL" and time.monotonic() - t0 < 2.5
    close_and_wait(cs[:1])
    attach(bare.instance, prefill=True)  # a freed slot is given again


def test_killed_locusd_is_reported(fresh, trace):
    """Nothing hangs: once locusd is killed, the next call that polls says so
    within the client library's check period, and stays refused."""
    d = fresh()
    _, reqs = trace
    c = locus.attach(d.instance, prefill=True, decoder=0, timeout=5.0)
    c.report_load(0)
    assert c.route(reqs[0]).decoder == 0
    d.kill()
    t0 = time.monotonic()
    with pytest.raises(locus.LocusGone) as e:
        while time.monotonic() - t0 < 5:
            c.poll_signatures(timeout=0.05)
    assert time.monotonic() - t0 < 2.0
    assert e.value.name == "ENOTCONN" and "locusd is gone" in str(e.value)
    with pytest.raises(locus.LocusGone):
        c.route(reqs[1])
    c.close()
    with pytest.raises(locus.LocusGone):
        locus.attach(d.instance, prefill=True)



def test_route_waits_are_bounded(fresh, trace):
    """The library's wait for a decision (locus_client_poll_until) ends at the timeout:
    with locusd stopped, route() raises LocusTimeout and the request stays in flight;
    once locusd runs again wait() gives its decision. A locusd killed during a wait is
    reported within the client library's check period, not at the timeout."""
    d = fresh("load_timeout_ms = 60000\n")
    _, reqs = trace
    c = locus.attach(d.instance, prefill=True, decoder=0, timeout=5.0)
    c.report_load(0)
    assert c.route(reqs[0]).decoder == 0
    d.proc.send_signal(signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        with pytest.raises(locus.LocusTimeout, match="no completion within the timeout"):
            c.route(reqs[1], request_id=7, timeout=0.3)
        assert 0.3 <= time.monotonic() - t0 < 2.0
        assert c.in_flight == 1
    finally:
        d.proc.send_signal(signal.SIGCONT)
    dec = c.wait(7, timeout=5.0)
    assert (dec.request_id, dec.decoder) == (7, 0)
    assert [s.request_id for s in c.poll_signatures(max=10, timeout=2.0)][-1] == 7
    killer = threading.Timer(0.3, d.kill)
    d.proc.send_signal(signal.SIGSTOP)  # the next route waits until the kill
    killer.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(locus.LocusGone):
            c.route(reqs[2], timeout=30.0)
    finally:
        killer.join()
    assert time.monotonic() - t0 < 3.0
    c.close()
