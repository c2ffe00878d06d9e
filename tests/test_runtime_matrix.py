"""Every runtime option with every other, on 1, 2, 4 and 8 devices (tests/runtime_matrix.py):
each case of the covering array equals sequential clients on one device."""
import itertools
import json
import os
import subprocess
import sys

import pytest
import runtime_matrix
from conftest import ROOT, xla_flags

SHARDS = 8  # subprocesses, so that pytest-xdist spreads the cases over the cores


def test_cases_cover_every_pair_and_every_algorithm_on_two_device_counts_per_mode():
    opts = runtime_matrix.options()
    rows = runtime_matrix.cases(opts)
    for a, b in itertools.combinations(opts, 2):
        met = {(r[a], r[b]) for r in rows}
        missing = set(itertools.product(opts[a], opts[b])) - met
        assert not missing, (a, b, missing)
    for algorithm in opts["algorithm"]:
        for mode in opts["participation"]:
            devices = {r["devices"] for r in rows
                       if r["algorithm"] == algorithm and r["participation"] == mode}
            assert len(devices) >= 2, (algorithm, mode, devices)
    assert len(rows) < 80  # the product has 4,608


def test_a_wrong_case_is_caught():
    """compare() is not blind: a state off by 1e-3 fails, a bf16 rounding passes."""
    import numpy as np

    want = ([np.ones(3, np.float32)], [{"train_loss": 1.0}])
    off = ([np.ones(3, np.float32) + 1e-3], [{"train_loss": 1.0}])
    assert runtime_matrix.compare({"dtype": "float32"}, off, want)
    assert not runtime_matrix.compare({"dtype": "bfloat16"}, off, want)
    assert runtime_matrix.compare({"dtype": "float32"}, (want[0], [{"train_loss": 1.01}]), want)


def _run(*args, devices):
    """The last stdout line of tests/runtime_matrix.py ARGS on `devices` XLA CPU devices."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": xla_flags(devices)}
    out = subprocess.run([sys.executable, "tests/runtime_matrix.py", *args],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("shard", [0, *(pytest.param(k, marks=pytest.mark.slow)
                                       for k in range(1, SHARDS))])
def test_runtime_matrix(shard):
    """One shard of the covering array (an eighth of its cases) by default; `pytest -m slow`
    runs the other shards, which complete every pair."""
    result = _run(f"{shard}/{SHARDS}", devices=8)
    expected = len(runtime_matrix.shard_cases(shard, SHARDS))
    assert result["ran"] == expected and result["failures"] == [], result["failures"]


@pytest.mark.slow  # ~20 s: the two-process test runs the binary with Bernoulli on 4 devices
def test_binaries_with_bernoulli_and_vmap_on_2_and_4_devices(tmp_path):
    """The presets' own setting (Bernoulli, vmap) through the run loop on 2 and 4 devices,
    digits and Shakespeare (masked epochs): the same metrics to float32 rounding (one device
    against many: the matrix above)."""
    runs = _run("binaries", str(tmp_path), devices=4)
    for dataset in ("digits", "shakespeare"):
        two, four = runs[f"{dataset} 2"], runs[f"{dataset} 4"]
        assert len(two) == 2 and "test_accuracy" in two[-1]
        assert [r.keys() for r in four] == [r.keys() for r in two]
        for a, b in zip(four, two):
            assert a == pytest.approx(b, rel=1e-5, abs=1e-6), dataset
