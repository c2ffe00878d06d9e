"""CI smoke of the benchmark (no timing assertions) and every paper preset's validity."""
import os
import subprocess
import sys

import pytest

from experiments.configs import paper
from fedinit_jax import experiment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_round_speed_smoke():
    result = subprocess.run([sys.executable, "benchmarks/round_speed.py", "--smoke"], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "| naive per-step loop / fast conv |" in result.stdout
    assert "| fedavg |" in result.stdout and "1.000x" in result.stdout
    assert " MiB |" in result.stdout  # XLA's memory account of each compiled round
    assert "evaluation of 200 test images:" in result.stdout
    assert "| 2 replicas in one program / vmap clients |" in result.stdout


@pytest.mark.parametrize("key", list(paper.PAPER_ACCURACY))
def test_paper_presets_are_valid(key):
    config = paper.get_config("-".join(key)).to_dict()
    experiment.validate(config)
    assert config["paper_accuracy"]["fedinit"] == paper.PAPER_ACCURACY[key][-1]
    assert config["batch_size"] == (50 if key[3] == "10-100" else 25)


def test_paper_headline_numbers():
    """Table 4: FedInit 75.95 vs FedAvg 72.53 on CIFAR-10, ResNet-18-GN, Dir-0.1, 10%-100."""
    row = dict(zip(paper.METHODS, paper.PAPER_ACCURACY[("cifar10", "resnet18_gn", "dir0.1",
                                                        "10-100")]))
    assert row["fedinit"] - row["fedavg"] == pytest.approx(3.42)


def test_unknown_preset():
    with pytest.raises(ValueError, match="not a setting of the paper"):
        paper.get_config("cifar10-resnet18_gn-dir0.3-10-100")
