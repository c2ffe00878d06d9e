"""CI smoke of the benchmarks (no timing assertions) and every paper preset's validity."""
import os
import subprocess
import sys

import jax
import pytest

from experiments.configs import paper
from fedinit_jax import experiment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow  # 45-110 s on 2 cores (six benchmark processes, compile-bound)
def test_gpu_script_dry_run(tmp_path):
    """benchmarks/gpu.sh --dry-run: every step of the GPU suite (all round_speed tables and
    the planner) on CPU with tiny shapes, so that a lent GPU runs it to the end (the CNN
    step is step 1's code with the dry run's MLP, so the dry run leaves it out). Marked
    slow: `pytest -m slow` before changing benchmarks/ or running gpu.sh on a lent GPU."""
    env = {**os.environ, "PYTHON": sys.executable}
    result = subprocess.run(["bash", "benchmarks/gpu.sh", "--dry-run", str(tmp_path)],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    out = (tmp_path / "RESULTS_gpu.md").read_text()
    assert "Traceback" not in out and "error" not in out.lower(), out[-3000:]
    for table in ("| variant | s/round |", "| evaluation of 200 images |",
                  "| algorithm | s/round | vs FedAvg |", "| federations (one device) |",
                  "| LSTM round", "| preset | D |", "GFLOP per round per device",
                  "| xla | bfloat16 |"):
        assert table in out, table
    assert "| fedavg |" in out and "1.000x" in out
    ratio = {line.split(" | ")[0]: float(line.split(" | ")[-1].rstrip(" |x"))
             for line in out.splitlines() if "donated |" in line}
    assert ratio["| donated"] < ratio["| not donated"]  # no second copy of the state


@pytest.mark.slow  # ~8 s: `pytest -m slow` before changing benchmarks/profile_ops.py
def test_profile_ops_smoke():
    result = subprocess.run([sys.executable, "benchmarks/profile_ops.py", "--model", "cnn",
                             "--convs", "auto", "--steps", "1", "--batch", "2"], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "| XLA convolution |" in result.stdout and "| op (module, pass, HLO op) |" in result.stdout


@pytest.mark.parametrize("key", list(paper.PAPER_ACCURACY))
def test_paper_presets_are_valid(key):
    """Every preset passes validation, and its Bernoulli round has a static slot bound above
    E|S| that splits over the devices."""
    config = paper.get_config("-".join(key)).to_dict()
    experiment.validate(config)
    slots = experiment.client_slots(config)  # the static bound on a Bernoulli |S|
    assert slots > experiment.expected_clients(config) and slots % len(jax.devices()) == 0


def test_unknown_preset():
    with pytest.raises(ValueError, match="not a setting of the paper"):
        paper.get_config("cifar10-resnet18_gn-dir0.3-10-100")


def test_the_planner_takes_the_readme_names_and_refuses_bad_specs_in_one_line(tmp_path):
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import plan

    assert (plan.resolve_spec("cifar10-resnet18_gn-dir0.1-10-100")
            == "experiments/configs/paper.py:cifar10-resnet18_gn-dir0.1-10-100")
    assert plan.resolve_spec("shakespeare:paper") == "experiments/configs/shakespeare.py:paper"
    for spec, says in [("nosuch.py", "no config file 'nosuch.py'"),
                       ("experiments/configs/paper.py:bogus-name", "paper preset"),
                       ("experiments/configs/shakespeare.py:huge", "shakespeare preset"),
                       ("README.md", "not a config file")]:
        with pytest.raises(ValueError, match=says):
            plan.load_config(spec)
    cmd = [sys.executable, "benchmarks/plan.py"]
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    for args, says in [  # the binary: one line, exit 2
            (["--presets", "README.md"], "not a config file"),
            (["--presets", "experiments/configs/default.py", "--devices"], "expected at least"),
    ]:
        result = subprocess.run(cmd + args, cwd=ROOT, capture_output=True, text=True,
                                timeout=120, env=env)
        assert result.returncode == 2 and says in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr
    bad = tmp_path / "bad.py"
    bad.write_text("from experiments.configs import default\n\ndef get_config():\n"
                   "    c = default.get_config()\n    c.num_clients = -5\n    return c\n")
    result = subprocess.run(cmd + ["--presets", str(bad)], cwd=ROOT, capture_output=True,
                            text=True, timeout=120, env=env)
    assert result.returncode == 2 and "config.num_clients=-5" in result.stderr, result.stderr
    helped = subprocess.run(cmd + ["--help"], cwd=ROOT, capture_output=True, text=True)
    assert "a predicted round and run time" in helped.stdout and "--presets" in helped.stdout


def test_the_planner_counts_no_client_tables_on_the_device_for_a_store():
    """A config whose clients live in host memory (cross_device.py: client_store=host) is
    planned as the cohort round it runs: no [C, ...] tables among the device's arguments
    (it counted 2.27 GiB of them); the same config with the device store counts them."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import plan

    from experiments.configs import cross_device

    config = {**cross_device.get_config().to_dict(), "num_clients": 100_000,
              "participation": 1e-3}
    stored = plan.plan("cross_device", config, 1, 0.2)
    on_device = plan.plan("cross_device", {**config, "client_store": "device"}, 1, 0.2)
    tables = 100_000 * 610 * 4  # C x d float32 last local models (and the visited flags)
    assert stored["client_tables"] == 0 and stored["arguments"] < tables / 10
    assert on_device["client_tables"] >= tables and on_device["arguments"] > tables


def test_the_cross_device_presets_load():
    from experiments.configs import cross_device

    c10 = cross_device.get_config("cifar10-dir0.6")
    assert (c10.num_clients, c10.participation,
            c10.task.images.dirichlet_alpha) == (1000, 0.01, 0.6)
    assert cross_device.get_config().num_clients == 1_000_000
    with pytest.raises(ValueError, match="cross_device preset 'nosuch'"):
        cross_device.get_config("nosuch")
