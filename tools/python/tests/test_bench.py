# SPDX-License-Identifier: MIT
"""tools/python/bench_python.py (make bench's Python rows) runs and prints its
result lines; a short run, nothing asserted about the figures. A window too
short for any call (a loaded machine, --seconds 0) still measures the minimum
number of calls; one that measured none says so and exits 1."""
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO, TRACE, Daemon

BENCH = os.path.join(REPO, "tools", "python", "bench_python.py")
# result lines: route's count of timed calls; dispatch's rounds, rows/s and rows
ROUTE = (r"^python route 3360 B signatures, window 1: \d+ routes/s .* round trip "
         r"p50 [\d.]+ us, p99 [\d.]+ us \((\d+) routes\)$")
DISPATCH = (r"^python dispatch 1024 B rows: 4 ranks .* (\d+) collective rounds: (\d+) rows/s "
            r"\((\d+) rows, ")


@pytest.fixture(scope="module")
def bench_daemon(eldr_table, grace_table):
    """locusd with both tables, as bench.sh configures it: decoders stay up
    between load reports for a minute (a loaded machine may delay the bench's)."""
    d = Daemon("bench", "client_slots = 8\nload_timeout_ms = 60000\n", table=eldr_table)
    try:
        d.push(grace_table)
    except BaseException:
        d.stop()
        raise
    yield d
    d.stop()


def run(bench_daemon, *args, seconds="0.2", rc=0):
    """bench_python.py's stdout and stderr; it exits rc, never with a traceback."""
    p = subprocess.run([sys.executable, BENCH, *args, "-i", bench_daemon.instance, "--trace",
                        TRACE, "--seconds", seconds], capture_output=True, text=True, timeout=120)
    assert p.returncode == rc, p.stdout + p.stderr
    assert "Traceback" not in p.stderr, p.stderr
    return p.stdout + p.stderr


def test_bench_route(bench_daemon):
    out = run(bench_daemon, "route")
    assert re.search(ROUTE, out, re.M), out


def test_bench_dispatch(bench_daemon):
    out = run(bench_daemon, "dispatch", "--row-bytes", "1024", "--tokens", "8")
    m = re.search(DISPATCH, out, re.M)
    assert m and int(m.group(3)) > 0, out


def test_bench_empty_window(bench_daemon):
    """--seconds 0: the window ends before any timed call; the bench runs on to
    its minimum number of calls (--min-calls) and reports them."""
    out = run(bench_daemon, "route", seconds="0")
    m = re.search(ROUTE, out, re.M)
    assert m and int(m.group(1)) > 0, out
    out = run(bench_daemon, "route", "--min-calls", "7", seconds="0")
    m = re.search(ROUTE, out, re.M)
    assert m and int(m.group(1)) >= 7, out
    out = run(bench_daemon, "dispatch", "--row-bytes", "1024", "--tokens", "8", seconds="0")
    m = re.search(DISPATCH, out, re.M)
    assert m and int(m.group(1)) > 0 and int(m.group(3)) > 0, out


def test_bench_nothing_completed(bench_daemon):
    """No call in the window and none asked for: a sentence and exit status 1."""
    out = run(bench_daemon, "route", "--min-calls", "0", seconds="0", rc=1)
    assert out.strip() == ("bench_python: route: no call completed in the timed window "
                           "(0 s, at least 0 calls): nothing to report"), out
    out = run(bench_daemon, "dispatch", "--row-bytes", "1024", "--tokens", "8", "--min-calls", "0",
              seconds="0", rc=1)
    assert out.strip() == ("bench_python: dispatch: no collective round completed in the timed "
                           "window (0 s, at least 0 rounds): nothing to report"), out
