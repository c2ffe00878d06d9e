"""Every runtime option with every other, on 1, 2, 4 and 8 devices (tests/runtime_matrix.py):
each case of the covering array equals sequential clients on one device."""
import itertools
import json
import os
import subprocess
import sys

import pytest
import runtime_matrix
from conftest import ROOT

SHARDS = 4  # subprocesses, so that pytest-xdist spreads the cases over the cores


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


@pytest.mark.parametrize("shard", range(SHARDS))
def test_runtime_matrix(shard):
    env = {**os.environ, "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    out = subprocess.run([sys.executable, "tests/runtime_matrix.py", f"{shard}/{SHARDS}"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    expected = len(runtime_matrix.cases()[shard::SHARDS])
    assert result["ran"] == expected and result["failures"] == [], result["failures"]
