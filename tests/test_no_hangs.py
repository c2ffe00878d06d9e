"""Reliability III: legal values that used to hang, silent wrongs and messages that named
nothing (each case one of the attacks that found it)."""
import math
import os
import signal
import subprocess
import sys
import time

import ml_dtypes
import numpy as np
import optax
import pytest
from conftest import (
    NUM_CLIENTS,
    QUIET,
    ROOT,
    linreg_loss,
    params_from,
    planned_run,
    quiet_config,
    train,
)

from fedinit_jax import RoundInput, algorithms, check_round_input, experiment
from fedinit_jax.data import participation, shakespeare


def test_a_bernoulli_draw_that_is_almost_never_nonempty_is_refused_before_anything():
    with pytest.raises(ValueError, match="config.participation=1e-09: with 1 clients"):
        experiment.validate(quiet_config(participation_mode="bernoulli", participation=1e-9,
                                         num_clients=1))
    with pytest.raises(ValueError, match="draws nobody"):
        participation.sample_bernoulli(np.random.default_rng(0), 1, 1e-9)


def _exact_bound(c, p, tail=participation.TAIL):
    """The smallest n with P(X > n) <= tail, X ~ Binomial(c, p), by exact sums (math.comb)."""
    for n in range(c + 1):
        if sum(math.comb(c, k) * p**k * (1 - p) ** (c - k) for k in range(n + 1, c + 1)) <= tail:
            return n


@pytest.mark.parametrize("c, p", [(1, 0.5), (7, 0.3), (20, 0.25), (100, 0.1), (200, 0.05),
                                  (150, 0.9)])
def test_bernoulli_bound_equals_exact_sums(c, p):
    assert participation.bernoulli_bound(c, p) == max(1, _exact_bound(c, p))


def test_bernoulli_bound_of_ten_million_clients_is_computed():
    """Used to take minutes (a linear search over full tail sums): now a binary search
    over sums cut past the mean. mean 5e6, std 1581: the bound is ~4.75 std above."""
    n = participation.bernoulli_bound(10_000_000, 0.5)
    assert 5_000_000 + 4 * 1581 < n < 5_000_000 + 6 * 1581


def _sigterm_a_stuck_run(workdir, stuck_round, grace, signals=1):
    """A run whose round loop never reaches a boundary (a fault that sleeps at the start of
    round `stuck_round`), sent SIGTERM `signals` times: (exit code, seconds to exit,
    stderr)."""
    script = (
        "import time, sys; sys.path.insert(0, 'tests')\n"
        "from conftest import quiet_config, QUIET\n"
        "from fedinit_jax import experiment\n"
        "from fedinit_jax.experiment import simulation\n"
        "def stuck(point, t):\n"
        f"    if point == 'round_start' and t == {stuck_round}:\n"
        "        print('stuck', flush=True); time.sleep(600)\n"
        f"simulation.run(experiment.plan(quiet_config()), {str(workdir)!r}, fault=stuck,"
        " **QUIET)\n")
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "FEDINIT_STOP_GRACE_SECONDS": str(grace)}
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().strip() == "stuck"
    t0 = time.time()
    for _ in range(signals):
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
    _, stderr = proc.communicate(timeout=60)
    return proc.returncode, time.time() - t0, stderr


def test_sigterm_ends_a_stuck_run_within_the_grace_period(tmp_path):
    """A round loop that never reaches a boundary still ends on SIGTERM: one line, exit 75
    (rerun to continue), within FEDINIT_STOP_GRACE_SECONDS, naming the checkpoint it keeps."""
    code, seconds, stderr = _sigterm_a_stuck_run(tmp_path / "run", 2, grace=2)
    assert code == 75 and seconds < 15
    assert "stopped by SIGTERM (no round boundary within 2 s)" in stderr, stderr
    assert "the checkpoint after round 1 is kept" in stderr, stderr
    assert (tmp_path / "run" / "checkpoints" / "1").is_dir()  # round 1's is kept
    last = (tmp_path / "run" / "train.log").read_text().splitlines()[-1]
    assert "summary: stopped by SIGTERM (no round boundary within 2 s)" in last, last


def test_a_stop_before_any_checkpoint_does_not_claim_one(tmp_path):
    """Stuck in round 1, nothing saved yet, a second SIGTERM: exit 128 + 15 at once, saying
    no checkpoint was taken (it said the last checkpoint was kept when there was none)."""
    code, seconds, stderr = _sigterm_a_stuck_run(tmp_path / "run", 1, grace=60, signals=2)
    assert code == 128 + signal.SIGTERM and seconds < 15, stderr
    assert "(a second signal)" in stderr, stderr
    assert "no checkpoint was taken yet, rerunning the same command starts over" in stderr
    last = (tmp_path / "run" / "train.log").read_text().splitlines()[-1]
    assert "summary: stopped by SIGTERM (a second signal)" in last, last  # whatever ends it


def test_a_signal_after_the_last_round_leaves_the_run_done(tmp_path):
    """SIGTERM while the last round's outputs are written: the run is finished, so it ends
    done (exit 0 in the binary), not 'stopped, rerun' (75), which would requeue a done task."""
    import threading

    from conftest import QUIET, quiet_config


    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are installed from the main thread only")

    def late_signal(point, rounds_done):
        if (point, rounds_done) == ("metrics_written", 4):
            os.kill(os.getpid(), signal.SIGTERM)

    rows = planned_run(quiet_config(rounds=4), str(tmp_path), fault=late_signal, **QUIET)
    assert len(rows) == 4
    assert "summary: done; round 4/4" in (tmp_path / "train.log").read_text().splitlines()[-1]


@pytest.mark.parametrize("field", [  # one check, reached from either field (the other: -m slow)
    pytest.param("local_epochs", marks=pytest.mark.slow), "local_steps"])
def test_a_round_input_too_large_for_the_host_is_refused_before_the_workdir(tmp_path, field):
    result = train(tmp_path / "run", f"--config.{field}=1000000000000")
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"error: config.{field}=1000000000000: a round's input "
                                    "needs"), result.stderr
    assert not (tmp_path / "run").exists()


def test_a_nan_in_a_bfloat16_host_batch_is_caught():
    algo = algorithms.fedavg(linreg_loss)
    state = algo.init(params_from(np.array([0.3, -0.2, 0.1, 0.05])), NUM_CLIENTS)
    x = np.ones((2, 2, 4, 3), ml_dtypes.bfloat16)
    x[1, 0, 0, 0] = np.nan
    y = np.ones((2, 2, 4), np.float32)
    with pytest.raises(ValueError, match="NaN or inf"):
        check_round_input(algo, state, RoundInput(np.array([0, 1]), (x, y), 0.1))


@pytest.mark.parametrize("name, options, says", [
    ("fedinit", {"betta": 0.1},
     "fedinit takes no option betta; its options: beta, client_optimizer, clip_norm"),
    ("fedadam", {"server_optimizer": optax.sgd(1.0)}, "fedadam takes no option server_optimizer"),
    ("feddyn", {"server_optimizer": optax.adam(0.5)}, "feddyn takes no option server_optimizer"),
    ("feddyn", {"server_lr": 0.5}, "feddyn takes no option server_lr"),
])
def test_an_option_an_algorithm_does_not_take_is_refused_by_name(name, options, says):
    with pytest.raises(ValueError, match=says):
        algorithms.get(name, linreg_loss, **options)
    with pytest.raises(ValueError, match=says):  # the builder itself, called directly
        algorithms.REGISTRY[name].builder(linreg_loss, **options)
    algorithms.get("fedavg", linreg_loss, server_optimizer=optax.adam(0.5))  # it has a step


def test_plays_that_hold_no_client_are_named_with_their_cause(tmp_path):
    (tmp_path / "empty_gut.txt").write_text("")
    (tmp_path / "noise_gut.txt").write_bytes(bytes(range(256)) * 8)
    (tmp_path / "prose_gut.txt").write_text("No speaker here.\nNone at all.\n")
    with pytest.raises(ValueError) as err:
        shakespeare.load(str(tmp_path))
    assert str(err.value) == (
        f"the Shakespeare texts in {str(tmp_path)!r} hold no client (a role with >= 2 "
        "speeches): empty_gut.txt: empty; noise_gut.txt: not a text file (binary or not "
        "UTF-8); prose_gut.txt: no speeches (no speaker heading: a NAME. line of its own)")


def test_a_compiled_round_that_cannot_fit_its_devices_is_refused(tmp_path, monkeypatch):
    """XLA's account of the compiled round against the devices' memory (here made 2 MiB: the
    state's estimate, 1.3 MB, passes; the compiled round, a few MiB per device, does not)."""
    from fedinit_jax.experiment import memory

    monkeypatch.setattr(memory, "available_memory", lambda: 2 * 2**20)
    with pytest.raises(ValueError, match=r"config.num_clients=8: the compiled round needs .* "
                                         r"per device \(XLA: arguments"):
        planned_run(quiet_config(client_store="device"), str(tmp_path / "run"), **QUIET)
    assert not (tmp_path / "run").exists()
    # client_store=auto: the clients go to host memory instead, and the run says why
    logged = []
    planned_run(quiet_config(rounds=2), str(tmp_path / "auto"), log=logged.append,
                   progress=False)
    assert any(line.startswith("client store: host (not on the device: config.num_clients=8")
               for line in logged), logged


def test_the_binaries_ask_one_cpu_device_per_core_they_may_use(monkeypatch):
    """XLA CPU devices = the cores of the process's affinity (taskset, a cpuset), not the
    machine's: with one core two devices' collectives could only take turns; and a device
    thread starved by other jobs gets COLLECTIVE_TIMEOUT_SECONDS, not XLA's 40 s abort.
    A count or a timeout in XLA_FLAGS is kept."""
    from experiments import cli

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})
    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=0")
    cli.use_all_cpu_cores()
    assert os.environ["XLA_FLAGS"].split() == [
        "--xla_backend_optimization_level=0", f"{cli.DEVICE_COUNT_FLAG}=1",
        f"{cli.COLLECTIVE_TIMEOUT_FLAG}={cli.COLLECTIVE_TIMEOUT_SECONDS}"]
    given = f"{cli.DEVICE_COUNT_FLAG}=4 {cli.COLLECTIVE_TIMEOUT_FLAG}=90"
    monkeypatch.setenv("XLA_FLAGS", given)
    cli.use_all_cpu_cores()
    assert os.environ["XLA_FLAGS"] == given
