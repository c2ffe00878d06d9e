"""CI smoke of the benchmark (no timing assertions) and every paper preset's validity."""
import os
import subprocess
import sys

import jax
import pytest

from experiments.configs import paper
from fedinit_jax import experiment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_round_speed_smoke():
    result = subprocess.run([sys.executable, "benchmarks/round_speed.py", "--smoke"], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "| naive per-step loop / auto conv |" in result.stdout
    assert "| fedavg |" in result.stdout and "1.000x" in result.stdout
    assert " MiB |" in result.stdout  # XLA's memory account of each compiled round
    assert "| library (jit, conv=auto) |" in result.stdout  # the evaluation table
    assert "| 2 replicas in one program / vmap clients |" in result.stdout
    ratio = {line.split(" | ")[0]: float(line.split(" | ")[-1].rstrip(" |x"))
             for line in result.stdout.splitlines() if "donated |" in line}
    assert ratio["| donated"] < ratio["| not donated"]  # no second copy of the state


def test_profile_ops_smoke():
    result = subprocess.run([sys.executable, "benchmarks/profile_ops.py", "--model", "cnn",
                             "--convs", "auto", "--steps", "1", "--batch", "2"], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "| XLA convolution |" in result.stdout and "| op (module, pass, HLO op) |" in result.stdout


@pytest.mark.parametrize("key", list(paper.PAPER_ACCURACY))
def test_paper_presets_are_valid(key):
    config = paper.get_config("-".join(key)).to_dict()
    experiment.validate(config)
    assert config["paper_accuracy"]["fedinit"] == paper.PAPER_ACCURACY[key][-1]
    assert config["batch_size"] == (50 if key[3] == "10-100" else 25)
    # the configuration the tables were made with (the authors' code)
    assert (config["delta_from"], config["participation_mode"]) == ("start", "bernoulli")
    slots = experiment.clients_per_round(config)  # the static bound on a Bernoulli |S|
    assert slots > experiment.expected_clients(config) and slots % len(jax.devices()) == 0


def test_unknown_preset():
    with pytest.raises(ValueError, match="not a setting of the paper"):
        paper.get_config("cifar10-resnet18_gn-dir0.3-10-100")
