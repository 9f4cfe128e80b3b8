# SPDX-License-Identifier: MIT
"""The examples run as a user runs them. ep_layer.py: four rank processes
through locusd, each checking its MoE layer's output against the layer
computed without locus (the example exits 1 on a mismatch)."""
import os
import subprocess
import sys

import pytest

from conftest import REPO

EXAMPLES = os.path.join(REPO, "tools", "python", "examples")


def run_example(name, *args, timeout=180):
    return subprocess.run([sys.executable, os.path.join(EXAMPLES, name), *args],
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_ep_layer(ep_daemon, kind):
    if kind == "torch":
        pytest.importorskip("torch")
    args = ["-i", ep_daemon.instance] + (["--torch", "--tokens", "40", "--topk", "6"]
                                         if kind == "torch" else [])
    p = run_example("ep_layer.py", *args)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert lines[-1] == "ep_layer: ok"
    ranks = [line for line in lines if line.startswith("ep_layer: rank ")]
    assert len(ranks) == 4
    for line in ranks:
        assert "max relative error" in line and "too large" not in line
