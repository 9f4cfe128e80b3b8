# SPDX-License-Identifier: MIT
"""tools/python/bench_python.py (make bench's Python rows) runs and prints its
result lines; a short run, nothing asserted about the figures."""
import os
import re
import subprocess
import sys

from conftest import REPO, TRACE

BENCH = os.path.join(REPO, "tools", "python", "bench_python.py")


def run(ep_daemon, *args):
    p = subprocess.run([sys.executable, BENCH, *args, "-i", ep_daemon.instance, "--trace",
                        TRACE, "--seconds", "0.2"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_bench_route(ep_daemon):
    out = run(ep_daemon, "route")
    assert re.search(r"^python route 3360 B signatures, window 1: \d+ routes/s .* round trip "
                     r"p50 [\d.]+ us, p99 [\d.]+ us \(\d+ routes\)$", out, re.M), out


def test_bench_dispatch(ep_daemon):
    out = run(ep_daemon, "dispatch", "--row-bytes", "1024", "--tokens", "8")
    m = re.search(r"^python dispatch 1024 B rows: 4 ranks .* (\d+) rows/s \((\d+) rows, ", out,
                  re.M)
    assert m and int(m.group(2)) > 0, out
