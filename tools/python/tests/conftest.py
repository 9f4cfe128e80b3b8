# SPDX-License-Identifier: MIT
"""Fixtures: real locusd processes, started the way the shell tests start
them (tests/test_loadgen.sh): segments and sockets in a private directory
($LOCUS_SHM_DIR), the config keys of that test, an ELDR table fitted by
locusctl from the repository's sample trace and pushed with locusctl push.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
BUILD = os.path.join(REPO, os.environ.get("BUILD", "build"))
BIN = os.path.join(BUILD, "bin")
TRACE = os.path.join(REPO, "tests", "data", "calib_sample.jsonl")
sys.path.insert(0, os.path.join(REPO, "tools", "python"))  # the package, from the checkout

_TMP = tempfile.mkdtemp(prefix="locus-py-")
os.environ["LOCUS_SHM_DIR"] = os.path.join(_TMP, "shm")
os.environ["LOCUS_STATE_DIR"] = os.path.join(_TMP, "state")
os.environ.setdefault("LOCUS_LIBRARY", os.path.join(BUILD, "lib", "liblocus.so.0"))
os.makedirs(os.environ["LOCUS_SHM_DIR"])
os.makedirs(os.environ["LOCUS_STATE_DIR"])


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_TMP, ignore_errors=True)


def run(*args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, timeout=60, **kw)


class Daemon:
    """One locusd: instance name, its log, and a stop that always ends it."""
    started = 0

    def __init__(self, name, extra="", table=None):
        Daemon.started += 1
        self.instance = f"{name}-{os.getpid()}-{Daemon.started}"
        self.dir = os.path.join(_TMP, self.instance)
        os.makedirs(self.dir)
        self.conf = os.path.join(self.dir, "locusd.conf")
        self.log = os.path.join(self.dir, "locusd.log")
        base = (f"instance = {self.instance}\neal_args = -l 0-1 --no-huge --no-pci -m 64\n"
                "idle_sleep_us = 50\nclient_inbox_slots = 256\n")
        # a key of extra replaces the base's
        keys = {line.split("=")[0].strip() for line in extra.splitlines() if "=" in line}
        base = "".join(line + "\n" for line in base.splitlines()
                       if line.split("=")[0].strip() not in keys)
        with open(self.conf, "w") as f:
            f.write("[locusd]\n" + base + extra)
        self.proc = subprocess.Popen([os.path.join(BIN, "locusd"), "-c", self.conf],
                                     stdout=open(self.log, "w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while f"instance {self.instance} running" not in self.log_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"locusd did not start: {self.log_text()}")
            time.sleep(0.05)
        if table:
            try:
                self.push(table)
            except BaseException:
                self.stop()  # the fixture never got it: nobody else would end it
                raise

    def restart(self, table=None):
        """Kill locusd and start it again on the same instance and
        configuration (a restart under its clients), the table pushed again."""
        self.kill()
        runs = self.log_text().count(f"instance {self.instance} running")
        self.proc = subprocess.Popen([os.path.join(BIN, "locusd"), "-c", self.conf],
                                     stdout=open(self.log, "a"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while self.log_text().count(f"instance {self.instance} running") <= runs:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"locusd did not start again: {self.log_text()}")
            time.sleep(0.05)
        if table:
            self.push(table)

    def log_text(self):
        with open(self.log) as f:
            return f.read()

    def push(self, table):
        try:
            run(os.path.join(BIN, "locusctl"), "push", "-i", self.instance, table)
        except subprocess.CalledProcessError as e:
            raise RuntimeError(f"locusctl push failed: {e.stderr.strip()}\nlocusd's log:\n"
                               f"{self.log_text()}") from None

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture(scope="session")
def eldr_table():
    """The ELDR table locusctl fits from the sample trace (4 decoders, seed 1)."""
    path = os.path.join(_TMP, "eldr.tbl")
    run(os.path.join(BIN, "locusctl"), "fit", "--trace", TRACE, "--decoders", "4", "--seed",
        "1", "-o", path)
    return path


@pytest.fixture(scope="session")
def daemon(eldr_table):
    """locusd with the fitted table and its signature cache; decoders stay up
    between load reports for a minute (decisions depend on the reports only)."""
    d = Daemon("py", "load_timeout_ms = 60000\n", table=eldr_table)
    yield d
    d.stop()


@pytest.fixture(scope="session")
def grace_table():
    """The GRACE table locusctl fits from the sample trace for 1 node x 4 GPUs."""
    path = os.path.join(_TMP, "grace.tbl")
    run(os.path.join(BIN, "locusctl"), "fit", "--grace", "--trace", TRACE, "--nodes", "1",
        "--gpus", "4", "--capacity", "20", "--replica-budget", "4", "-o", path)
    return path


@pytest.fixture(scope="session")
def ep_daemon(eldr_table, grace_table):
    """locusd with both tables: 4 expert-parallel ranks (gpus_per_node 4, one node)."""
    d = Daemon("ep", "client_slots = 8\n", table=eldr_table)
    d.push(grace_table)
    yield d
    d.stop()


@pytest.fixture(scope="session")
def bare():
    """locusd with no table, no signature cache and 4 client slots."""
    d = Daemon("bare", "client_slots = 4\nsig_cache_bytes = 0\n")
    yield d
    d.stop()


@pytest.fixture
def fresh(eldr_table):
    """A factory of locusd processes of the test's own (stopped after it)."""
    made = []

    def make(extra="", table=True):
        d = Daemon("f", extra, table=eldr_table if table else None)
        made.append(d)
        return d
    yield make
    for d in made:
        d.stop()


@pytest.fixture(scope="session")
def trace():
    """The sample trace's requests: (prompt routed experts as int64 arrays), its shape."""
    with open(TRACE) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    head = lines[0]
    reqs = [np.array(r["prompt_routed_experts"], dtype=np.int64) for r in lines[1:]]
    return head, reqs


def wait_for(pred, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)



def _freed(ctr):
    return ctr.value("clients_detached") + ctr.value("clients_reclaimed")


def close_and_wait(clients, timeout=10.0):
    """Close clients (of one instance) and wait until locusd freed their
    slots: it reclaims a detached slot asynchronously, and the slot (its
    decoder id, its rank) is free again only then."""
    import locus
    clients = [c for c in clients if not c.closed]
    if not clients:
        return
    held = len(clients)
    try:
        ctr = locus.Counters(clients[0].instance)
    except locus.LocusError:  # its locusd is gone: nothing to wait for
        ctr = None
    base = _freed(ctr) if ctr else 0
    for c in clients:
        c.close()
    if ctr:
        with ctr:
            wait_for(lambda: _freed(ctr) >= base + held, timeout,
                     f"locusd to free {held} slots")


@pytest.fixture
def attach():
    """locus.attach, with every client the test made closed after it and its
    slot freed (also those the test closed itself, e.g. with `with`)."""
    import locus
    made, base = [], {}

    def _attach(instance, **kw):
        if instance not in base:
            try:
                with locus.Counters(instance) as ctr:
                    base[instance] = _freed(ctr)
            except locus.LocusError:
                base[instance] = None
        c = locus.attach(instance, **kw)
        made.append(c)
        return c
    yield _attach
    for c in made:
        c.close()
    for inst, b in base.items():
        n = sum(1 for c in made if c.instance == inst)
        if b is None:
            continue
        try:
            ctr = locus.Counters(inst)
        except locus.LocusError:  # its locusd is gone
            continue
        with ctr:
            wait_for(lambda: _freed(ctr) >= b + n, 10, f"locusd to free {n} slots")
