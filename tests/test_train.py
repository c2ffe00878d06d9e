"""The experiment binary end to end: metrics fields, exact resume after SIGKILL, bad input."""
import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMING = ("train_seconds", "eval_seconds")
TINY = ["--config.rounds=3", "--config.num_clients=8", "--config.participation=0.5",
        "--config.local_epochs=1", "--config.eval_every=2", "--config.checkpoint_every=1"]


def train(workdir, *overrides, wait=True, env=None):
    cmd = [sys.executable, "-m", "experiments.train", "--config",
           "experiments/configs/default.py", f"--workdir={workdir}", *overrides]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", **(env or {})}
    if not wait:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def rows(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def without_timing(rs):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rs]


def test_end_to_end_metrics_fields(tmp_path):
    result = train(tmp_path, *TINY)
    assert result.returncode == 0, result.stderr
    got = rows(tmp_path)
    assert [r["round"] for r in got] == [1, 2, 3]
    every = {"round", "train_loss", "divergence", "divergence_all", "local_lr", "train_seconds"}
    evaluated = every | {"test_accuracy", "test_loss", "eval_seconds"}
    assert set(got[0]) == every and set(got[1]) == evaluated and set(got[2]) == evaluated
    assert 0.0 <= got[2]["test_accuracy"] <= 1.0 and got[2]["test_loss"] > 0
    assert got[1]["local_lr"] == pytest.approx(0.1 * 0.998)
    assert json.load(open(tmp_path / "config.json"))["rounds"] == 3
    assert any(f.startswith("events.out.tfevents") for f in os.listdir(tmp_path / "tb"))
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["2", "3"]  # keep_checkpoints=2
    assert "final test_accuracy" in result.stdout


def test_sigkill_then_resume_is_bit_identical(tmp_path):
    slow = [*TINY[1:], "--config.rounds=8", "--config.local_epochs=40"]
    reference = tmp_path / "reference"
    assert train(reference, *slow).returncode == 0
    killed = tmp_path / "killed"
    proc = train(killed, *slow, wait=False)
    metrics = killed / "metrics.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 2:
            break
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = len(rows(killed))
    assert 2 <= done < 8, f"the kill landed after {done} rounds; the test needs a mid-run kill"
    resumed = train(killed, *slow)
    assert resumed.returncode == 0, resumed.stderr
    assert without_timing(rows(killed)) == without_timing(rows(reference))


@pytest.mark.parametrize("flag, field", [
    ("--config.no_such_key=1", "unknown config key"),
    ("--config.algorithm=fedfoo", "config.algorithm"),
    ("--config.model=resnet50", "config.model"),
    ("--config.dataset=no_such_dataset_xyz", "dataset"),
    ("--config.rounds=0", "config.rounds"),
    ("--config.participation=1.5", "config.participation"),
    ("--config.participation=0.0", "config.participation"),
    ("--config.batch_size=1000", "config.batch_size"),
])
def test_bad_input_one_line_exit_2_nothing_written(tmp_path, flag, field):
    workdir = tmp_path / "run"
    result = train(workdir, *TINY, flag)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and lines[0].startswith("error:")
    assert not workdir.exists()


@pytest.mark.parametrize("args, says", [
    (["--config.nosuch=1"], "unknown config key 'nosuch'"),  # no --config: the default file
    (["--config=/nonexistent.py"], "/nonexistent.py"),
    (["--config={bad}"], "line 1: invalid syntax"),
    (["--config=experiments/configs/paper.py:nosuch"], "paper preset 'nosuch'"),
    (["--config=experiments/configs/default.py", "--config.dataset=cifar10",
      "--config.data_dir=/nonexistent"], "/nonexistent"),
    (["--config=experiments/configs/default.py", "--config.seed=99999999999999999999999"],
     "config.seed="),
    (["--config=experiments/configs/default.py", "--config.local_lr=1e308"],
     "config.local_lr=1e+308: is inf in float32"),
    (["--config=experiments/configs/default.py", "--config.model_width=10000"],
     "config.model_width=10000.0: the federation needs at least"),
])
def test_bad_invocations_are_one_line(tmp_path, args, says):
    bad = tmp_path / "bad_syntax.py"
    bad.write_text("def get_config(:\n")
    cmd = [sys.executable, "-m", "experiments.train", f"--workdir={tmp_path / 'run'}",
           *[a.format(bad=bad) for a in args]]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "JAX_PLATFORMS": "cpu"})
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith("error:") and says in lines[0], lines[0]
    assert not (tmp_path / "run").exists()


def test_damaged_config_json_is_named(tmp_path):
    tmp_path.joinpath("config.json").write_text('{"rounds": ')
    result = train(tmp_path, *TINY)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert f"{tmp_path}/config.json cannot be read" in result.stderr


def test_bf16_client_state_end_to_end(tmp_path):
    result = train(tmp_path, *TINY, "--config.client_state_dtype=bfloat16")
    assert result.returncode == 0, result.stderr
    assert "x 2 bytes (bfloat16)" in result.stdout
    assert all(math.isfinite(r["train_loss"]) for r in rows(tmp_path))


def test_unwritable_workdir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = train(blocker / "run", *TINY)
    assert result.returncode == 2 and "not writable" in result.stderr


def test_different_config_refuses_to_resume(tmp_path):
    assert train(tmp_path, *TINY).returncode == 0
    before = (tmp_path / "metrics.jsonl").read_text()
    result = train(tmp_path, *TINY, "--config.beta=0.3")
    assert result.returncode == 2 and "different config" in result.stderr
    assert (tmp_path / "metrics.jsonl").read_text() == before


@pytest.mark.parametrize("overrides", [
    ("--config.local_lr=1e6", "--config.clip_norm=0.0"),
    ("--config.beta=5.0", "--config.rounds=40"),
], ids=["huge_lr", "beta_5"])
def test_divergence_guard_keeps_checkpoint_and_metrics(tmp_path, overrides):
    result = train(tmp_path, *TINY, "--config.rounds=6", *overrides)
    assert result.returncode == 3, result.stderr[-500:]
    assert "non-finite" in result.stderr and "round" in result.stderr
    kept = rows(tmp_path) if (tmp_path / "metrics.jsonl").exists() else []
    diverged_at = int(result.stderr.split("round ")[1].split(":")[0])
    assert [r["round"] for r in kept] == list(range(1, diverged_at))  # all good rows kept
    saved = sorted(int(p) for p in os.listdir(tmp_path / "checkpoints") if p.isdigit())
    assert not saved or max(saved) < diverged_at  # only checkpoints of good rounds


def test_every_registered_algorithm_runs_through_the_loop_and_report(tmp_path):
    """All registered names train (in-process, 2 rounds each) and appear in the report."""
    from experiments.configs import default
    from experiments.report import report
    from fedinit_jax import algorithms, simulation

    base = {**default.get_config().to_dict(), "rounds": 2, "num_clients": 8,
            "participation": 0.5, "local_epochs": 1, "eval_every": 1, "checkpoint_every": 0}
    for name in algorithms.REGISTRY:
        got = simulation.run({**base, "algorithm": name}, str(tmp_path / name),
                             log=lambda line: None, progress=False)
        assert [r["round"] for r in got] == [1, 2] and "test_accuracy" in got[-1], name
    text = report([str(tmp_path)], str(tmp_path / "report"), window=1, last=2)
    for shown in ("FedAvg", "FedInit", "SCAFFOLD", "FedDyn", "FedCM", "FedSAM", "FedAdam",
                  "FedProx", "FedSpeed", "FedSMOO", "FedGamma", "MoFedSAM"):
        assert f"| {shown} |" in text, shown  # Table 4 row
        assert text.count(f"| {shown} | ") >= 2, shown  # and Table 9 row
