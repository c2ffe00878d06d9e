"""The experiment binary end to end: metrics fields, exact resume after SIGKILL, bad input."""
import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import QUIET, ROOT, TINY, binary_runs, planned_run, quiet_config, rows, train

from fedinit_jax import experiment
from fedinit_jax.experiment import simulation


def test_end_to_end_metrics_fields(tmp_path):
    result = train(tmp_path, *TINY, "--config.clip_norm=None")  # None: no clipping
    assert result.returncode == 0, result.stderr
    recorded = json.load(open(tmp_path / "config.json"))  # the values the run used
    assert recorded["clip_norm"] is None and recorded["beta"] == 0.1
    assert recorded["lr_decay"] == 0.998 and recorded["rho"] is None  # FedInit takes no rho
    got = rows(tmp_path)
    assert [r["round"] for r in got] == [1, 2, 3]
    every = {"round", "train_loss", "divergence", "local_lr", "train_seconds"}
    evaluated = every | {"test_accuracy", "test_loss", "eval_seconds", "divergence_all"}
    assert set(got[0]) == every and set(got[1]) == evaluated and set(got[2]) == evaluated
    assert 0.0 <= got[2]["test_accuracy"] <= 1.0 and got[2]["test_loss"] > 0
    assert got[1]["local_lr"] == pytest.approx(0.1 * 0.998)
    assert json.load(open(tmp_path / "config.json"))["rounds"] == 3
    assert any(f.startswith("events.out.tfevents") for f in os.listdir(tmp_path / "tb"))
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["2", "3"]  # keep_checkpoints=2
    lines = result.stdout.strip().splitlines()  # also train.log's, UTC-stamped
    assert lines[0].startswith("fedinit_jax: 1 process(es), ") and "client store" in lines[0]
    assert lines[-1].startswith("summary: done; round 3/3 (rounds 1-3 in this run); "
                                "test_accuracy ")
    logged = (tmp_path / "train.log").read_text().splitlines()
    assert [line.split(" ", 1)[1] for line in logged] == lines


KILL_CONFIG = {"rounds": 7, "local_epochs": 2, "eval_every": 2, "checkpoint_every": 3}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("uninterrupted")
    planned_run(quiet_config(**KILL_CONFIG), str(workdir), **QUIET)
    return _metrics_bytes(workdir)


def _metrics_bytes(workdir):
    """metrics.jsonl as text, each row re-serialised without its seconds fields."""
    return "".join(json.dumps({k: v for k, v in json.loads(line).items() if "seconds" not in k})
                   + "\n" for line in open(os.path.join(workdir, "metrics.jsonl")))


# the in-process faults (test_reliability.py::test_a_fault_at_each_point_then_resume) cover every
# point of the loop; a real SIGKILL runs once by default, at each point with `pytest -m slow`
@pytest.mark.parametrize("point, at", [
    pytest.param("round_start", 1, marks=pytest.mark.slow),  # inside the first round
    pytest.param("eval", 4, marks=pytest.mark.slow),  # evaluating, a round after the checkpoint
    ("round_start", 6),  # between checkpoints: rounds 4 and 5 done, the checkpoint is at 3
])
def test_sigkill_inside_a_round_then_resume_is_bit_identical(tmp_path, uninterrupted, point, at):
    """A real SIGKILL (no cleanup) at a point chosen inside the run: the process stops there
    (a fault hook that waits), is killed, and the same config resumes it; metrics.jsonl
    equals an uninterrupted run's byte for byte but for the seconds fields."""
    script = (
        "import sys, time; sys.path.insert(0, 'tests')\n"
        "from conftest import quiet_config, QUIET\n"
        "from fedinit_jax import experiment\n"
        "from fedinit_jax.experiment import simulation\n"
        "def wait_there(point, t):\n"
        f"    if (point, t) == {(point, at)!r}:\n"
        "        print('there', flush=True); time.sleep(600)\n"
        f"simulation.run(experiment.plan(quiet_config(**{KILL_CONFIG!r})), {str(tmp_path)!r},"
        " fault=wait_there, **QUIET)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, text=True,
                            env={**os.environ, "JAX_PLATFORMS": "cpu"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().strip() == "there", proc.stderr.read()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = len(rows(tmp_path)) if (tmp_path / "metrics.jsonl").exists() else 0
    assert done == at - 1, done  # the rows before the point, none after
    planned_run(quiet_config(**KILL_CONFIG), str(tmp_path), **QUIET)
    assert _metrics_bytes(tmp_path) == uninterrupted


@pytest.mark.parametrize("change, field", [
    ({"algorithm": "fedfoo"}, "config.algorithm"),
    ({"model": "resnet50"}, "config.model"),
    ({"dataset": "no_such_dataset_xyz"}, "dataset"),
    ({"rounds": 0}, "config.rounds"),
    ({"participation": 1.5}, "config.participation"),
    ({"participation": 0.0}, "config.participation"),
    ({"batch_size": 1000}, "config.batch_size"),
    ({"dataset": "cifar10", "data_dir": "/nonexistent"}, "/nonexistent"),
    ({"seed": 99999999999999999999999}, "config.seed="),
    ({"local_lr": 1e308}, "config.local_lr=1e+308: is inf in float32"),
    ({"model_width": 10000.0}, "config.model_width=10000.0: the federation needs at least"),
    ({"num_clients": 10**12}, "config.num_clients=1000000000000: must be <= 2147483647"),
])
def test_bad_config_is_named_before_anything_is_written(tmp_path, change, field):
    """In-process: the ValueError the binary turns into one line and exit 2 (below)."""
    workdir = tmp_path / "run"
    with pytest.raises((ValueError, OSError)) as err:
        planned_run(quiet_config(**change), str(workdir), **QUIET)
    assert field in str(err.value)
    assert not workdir.exists()


# a misspelled field is named with the closest one: the whole line, exactly
MISSPELLED = (["--config.algoritm=scaffold"], "error: config: unknown config key 'algoritm'; "
              "did you mean algorithm? (every field: experiments/configs/default.py)")
BAD_INVOCATIONS = [
    (["--config.nosuch=1"], "unknown config key 'nosuch'"),  # no --config: the default file
    MISSPELLED,
    (["--config=/nonexistent.py"], "/nonexistent.py"),
    (["--config={bad}"], "line 1: invalid syntax"),
    (["--config=experiments/configs/paper.py:nosuch"], "paper preset 'nosuch'"),
    # config errors in the run (also refused in-process above)
    (["--config=experiments/configs/default.py", "--config.rounds=0"], "config.rounds"),
    (["--config=experiments/configs/default.py", "--config.dataset=cifar10",
      "--config.data_dir=/nonexistent"], "/nonexistent"),
    (["--config=experiments/configs/default.py", "--config", "experiments/configs/paper.py"],
     "--config given 2 times"),
    (["--config=experiments/configs/default.py", "--distributed",
      "--distributed_timeout=2147483648"], "--distributed_timeout=2147483648: must be in"),
    (["--config=experiments/configs/cross_device.py", "--config.num_clients=0"],
     "--config.num_clients=0: num_clients must be at least 1"),
    (["--config=experiments/configs/cross_device.py", "--config.num_clients=5000000000"],
     "config.num_clients=5000000000: must be <= 2147483647"),
    (["--config=experiments/configs/default.py", "--config.local_steps=3",
      "--config.local_epochs=4"], "--config.local_epochs=4 with config.local_steps=3"),
]


def test_bad_invocations_are_one_line_exit_2(tmp_path):
    """The binary: flags and config files, and a config error raised in the run (one line,
    exit 2, nothing written). Each is `python -m experiments.train` in a child forked from
    one interpreter (conftest.binary_runs); the plain subprocess is every other test's."""
    bad = tmp_path / "bad_syntax.py"
    bad.write_text("def get_config(:\n")
    argvs = [[f"--workdir={tmp_path / 'run'}", *[a.format(bad=bad) for a in args]]
             for args, _ in BAD_INVOCATIONS]
    for (args, says), (code, _, stderr) in zip(BAD_INVOCATIONS, binary_runs(
            "experiments.train", argvs), strict=True):
        lines = stderr.strip().splitlines()
        assert code == 2 and len(lines) == 1, (args, stderr)
        assert lines[0].startswith("error:") and says in lines[0], (args, lines[0])
        if (args, says) == MISSPELLED:
            assert stderr.strip() == says
    assert not (tmp_path / "run").exists()


def test_damaged_config_json_is_named(tmp_path):
    tmp_path.joinpath("config.json").write_text('{"rounds": ')
    with pytest.raises(ValueError, match=f"{tmp_path}/config.json cannot be read"):
        planned_run(quiet_config(), str(tmp_path), **QUIET)


def test_bf16_client_state_end_to_end(tmp_path):
    logged = []
    got = planned_run(quiet_config(client_state_dtype="bfloat16"), str(tmp_path),
                         log=logged.append, progress=False)
    assert any("x 2 bytes (bfloat16)" in line for line in logged)
    assert all(math.isfinite(r["train_loss"]) for r in got) and len(got) == 4


def test_unwritable_workdir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ValueError, match="not writable"):
        planned_run(quiet_config(), str(blocker / "run"), **QUIET)


def test_different_config_refuses_to_resume(tmp_path):
    planned_run(quiet_config(), str(tmp_path), **QUIET)
    before = (tmp_path / "metrics.jsonl").read_text()
    with pytest.raises(ValueError, match="different config"):
        planned_run(quiet_config(beta=0.3), str(tmp_path), **QUIET)
    assert (tmp_path / "metrics.jsonl").read_text() == before


def _check_divergence_kept_good_rounds(workdir, message):
    assert ("non-finite" in message or "the run diverged" in message) and "round" in message
    kept = rows(workdir) if (workdir / "metrics.jsonl").exists() else []
    diverged_at = int(message.split("round ")[1].split(":")[0])
    finite = "the run diverged" in message  # a runaway loss: its finite rows are kept too
    assert [r["round"] for r in kept] == list(range(1, diverged_at + finite))  # rows kept
    saved = sorted(int(p) for p in os.listdir(workdir / "checkpoints") if p.isdigit())
    assert not saved or max(saved) < diverged_at  # only checkpoints of good rounds


def test_divergence_guard_exits_3_keeping_checkpoint_and_metrics(tmp_path):
    result = train(tmp_path, *TINY, "--config.rounds=6", "--config.local_lr=1e6",
                   "--config.clip_norm=0.0")
    assert result.returncode == 3, result.stderr[-500:]
    _check_divergence_kept_good_rounds(tmp_path, result.stderr)
    last = (tmp_path / "train.log").read_text().splitlines()[-1]  # the run's end, in its log
    assert last.split(" ", 1)[1].startswith("summary: diverged; round "), last


def test_divergence_guard_after_good_rounds(tmp_path):
    """beta = 5 diverges only after some good rounds: those rows and checkpoints stay."""
    logged = []
    with pytest.raises(simulation.NonFiniteError) as err:
        planned_run(quiet_config(beta=5.0, rounds=40), str(tmp_path), log=logged.append,
                       progress=False)
    _check_divergence_kept_good_rounds(tmp_path, str(err.value))
    done = len(open(tmp_path / "metrics.jsonl").readlines())  # the good rounds, then:
    assert logged[-1].startswith(f"summary: diverged; round {done}/40 (rounds 1-{done} in "
                                 "this run); test_accuracy "), logged[-1]


@pytest.mark.parametrize("names", [
    ("fedavg", "scaffold", "feddyn"),  # one of each kind: server step, correction, own server
    pytest.param(None, marks=pytest.mark.slow)])  # every registered one
def test_every_registered_algorithm_runs_through_the_loop_and_report(tmp_path, names):
    """Registered names train (in-process, 2 rounds each) and appear in the report (every
    one's contract: test_contract.py)."""
    from experiments.report import report
    from fedinit_jax import algorithms

    base = quiet_config(rounds=2, eval_every=1, checkpoint_every=0)
    for name in names or algorithms.REGISTRY:
        got = planned_run({**base, "algorithm": name}, str(tmp_path / name), **QUIET)
        assert [r["round"] for r in got] == [1, 2] and "test_accuracy" in got[-1], name
    text = report([str(tmp_path)], str(tmp_path / "report"), window=1, last=2, with_figures=False)
    for shown in (algorithms.REGISTRY[n].display for n in names or algorithms.REGISTRY):
        assert f"| {shown} |" in text, shown  # Table 4 row
        assert text.count(f"| {shown} | ") >= 2, shown  # and Table 9 row


@pytest.mark.parametrize("delay", [0.3, 1.5])
def test_ctrl_c_while_loading_is_the_documented_stop(tmp_path, delay):
    """SIGINT while the binary imports JAX, loads and compiles: one line and exit 75, rerun
    to continue (it was swallowed by JAX's gc callback, the run finishing with exit 0, or a
    long traceback)."""
    proc = train(tmp_path, *TINY, wait=False)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 75, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("stopped by SIGINT"), stderr


def test_a_federation_whose_client_arrays_cannot_fit_the_host_is_refused(monkeypatch):
    """The host keeps C client sizes (and C uniforms a per_client Bernoulli round): refused
    naming num_clients and the most this host takes, before anything is allocated."""
    from fedinit_jax.experiment import memory

    monkeypatch.setattr(memory, "host_memory", lambda: 2**30)
    config = experiment.resolve(quiet_config(num_clients=10**8, participation=1e-6,
                                             participation_mode="bernoulli"))
    with pytest.raises(ValueError, match=r"config.num_clients=100000000: needs 1.1 GiB .* at "
                                         r"most 89,478,485 clients on this host"):
        experiment.validate(config)
