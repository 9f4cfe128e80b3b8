# SPDX-License-Identifier: MIT
"""locus.stats(instance) is what locus-stat --json prints: the same keys,
metrics, kinds, labels, shapes and values, taken between two runs of the real
locus-stat (a value that moved in between must lie between its two readings)."""
import json
import os
import subprocess

import pytest

import locus
from conftest import BIN


def locus_stat(instance, *args):
    out = subprocess.run([os.path.join(BIN, "locus-stat"), "-i", instance, *args],
                         capture_output=True, text=True, timeout=30)
    return out.returncode, out.stdout, out.stderr


def between(before, got, after, path="stats"):
    assert type(got) is type(before) or {type(got), type(before)} <= {int, float}, \
        f"{path}: {type(got).__name__} against {type(before).__name__}"
    if isinstance(before, dict):
        assert list(got) == list(before) == list(after), f"{path}: keys"
        for k in before:
            between(before[k], got[k], after[k], f"{path}.{k}")
    elif isinstance(before, list):
        if len(before) == len(got) == len(after):
            for i, (b, g, a) in enumerate(zip(before, got, after)):
                between(b, g, a, f"{path}[{i}]")
        else:  # a histogram that took a new bucket in between
            assert len(before) <= len(got) <= len(after), f"{path}: length"
    elif isinstance(before, (int, float)) and not isinstance(before, bool):
        lo, hi = min(before, after), max(before, after)
        assert lo <= got <= hi, f"{path}: {got} not within [{before}, {after}]"
    else:
        assert got == before == after, f"{path}: {got!r} != {before!r}"


def test_stats_equal_locus_stat_json(daemon, attach, trace):
    # some traffic first, so counters, gauges and histograms are not all 0
    _, reqs = trace
    c = attach(daemon.instance, prefill=True, decoder=2)
    c.report_load(5)
    c.route(reqs[0], allowed=[2])
    c.poll_signatures(timeout=1.0)
    rc, out1, err = locus_stat(daemon.instance, "--json")
    assert rc == 0, err
    got = locus.stats(daemon.instance)
    rc, out2, err = locus_stat(daemon.instance, "--json")
    assert rc == 0, err
    before, after = json.loads(out1), json.loads(out2)
    between(before, got, after)
    m = {x["name"]: x for x in got["metrics"]}
    assert got["state"] == "running" and got["instance"] == daemon.instance
    assert m["route_requests"]["value"] >= 1 and m["route_ns"]["value"]["count"] >= 1
    assert m["decoder_load"]["values"][2] == 5 and m["decoder_up"]["values"][2] == 1
    assert m["table_layers"]["values"] == [26, 0] and m["table_experts"]["values"] == [64, 0]
    assert len(m["expert_tokens"]["values"]) == m["expert_tokens"]["shape"][0]


def test_stats_refusals():
    with pytest.raises(locus.LocusGone) as e:
        locus.stats("nosuch-instance-here")
    assert e.value.name == "ENOENT"
    rc, _, _ = locus_stat("nosuch-instance-here", "--json")
    assert rc == 2  # locus-stat's "no such instance"
    with pytest.raises(ValueError, match="not valid"):
        locus.stats("a/b")
    with pytest.raises(TypeError):
        locus.stats(None)


def test_table_shape_gauges(fresh, attach, tmp_path):
    """table_layers / table_experts {channel}: 0 before a table, then the shape
    of the ELDR table and of the GRACE table pushed (what clients check)."""
    from conftest import BIN, TRACE
    d = fresh(table=False)
    c = attach(d.instance, prefill=True)
    for ch in (0, 1):
        with pytest.raises(locus.NoTableError):
            c.table_shape(ch)
    grace = str(tmp_path / "g.tbl")
    subprocess.run([os.path.join(BIN, "locusctl"), "fit", "--grace", "--trace", TRACE,
                    "--nodes", "1", "--gpus", "4", "--capacity", "20", "--replica-budget", "4",
                    "-o", grace], check=True, capture_output=True, timeout=60)
    d.push(grace)
    assert c.table_shape(1) == (26, 64)
    with pytest.raises(locus.NoTableError):
        c.table_shape(0)
    from conftest import run
    eldr = str(tmp_path / "e.tbl")
    run(os.path.join(BIN, "locusctl"), "fit", "--trace", TRACE, "--decoders", "2", "-o", eldr)
    d.push(eldr)
    assert c.table_shape(0) == (26, 64)
    m = {x["name"]: x for x in locus.stats(d.instance)["metrics"]}
    assert m["table_layers"]["values"] == [26, 26] and m["table_experts"]["values"] == [64, 64]
