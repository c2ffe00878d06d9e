"""The sweep binary: cells done, refused when their workdir holds another config, a signal;
as batch jobs: the cell list, one cell, workers, two sweeps sharing a results folder."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT, quiet_config

TINY = ["--config.rounds=2", "--config.num_clients=8", "--config.participation=0.5",
        "--config.local_epochs=1", "--config.eval_every=1", "--algorithms=fedavg,fedinit"]


def sweep(results, *flags, wait=True):
    cmd = [sys.executable, "-m", "experiments.sweep", "--config",
           "experiments/configs/default.py", f"--results={results}", *flags]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    if not wait:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def cell_names(base, **flag_values):
    """The sweep's cells of `base` (a config dict) under these sweep flags, named as --list
    names them: the grid's logic in this process (experiments/grid.py)."""
    from absl import flags as absl_flags
    from absl.testing import flagsaver

    from experiments import grid, sweep  # noqa: F401 (sweep defines the flags grid reads)

    with flagsaver.flagsaver(**{"seeds": ["0"], **flag_values}):
        absl_flags.FLAGS.mark_as_parsed()
        return [name for name, _ in grid.cells(base)]


def status(results):
    """{cell: state} from the per-cell status files."""
    folder = os.path.join(results, "sweep_status")
    return {name[:-5]: json.load(open(os.path.join(folder, name)))["state"]
            for name in os.listdir(folder)}


@pytest.mark.slow  # ~22 s: cells run by the grid test below; the refusals are the binary's
def test_cells_listed_run_one_by_one_refused_when_changed(tmp_path):
    first = sweep(tmp_path, *TINY, "--cell=1")  # a job array's task: one cell
    assert first.returncode == 0, first.stderr
    assert "summary: done; round 2/2" in first.stdout  # the cell's own lines pass through
    assert (tmp_path / "fedinit-dir0.1-beta0.1-E1-global-s0").is_dir()  # its resolved beta
    first = sweep(tmp_path, *TINY)
    assert first.returncode == 0, first.stderr
    assert set(status(tmp_path).values()) == {"done"} and len(status(tmp_path)) == 2
    assert sweep(tmp_path, *TINY, "--cell=2").returncode == 2
    empty = sweep(tmp_path, *TINY, "--algorithms=")
    assert empty.returncode == 2 and "--algorithms is empty" in empty.stderr
    changed = sweep(tmp_path, *TINY, "--config.local_lr=0.05")
    assert changed.returncode == 1
    errors = changed.stderr.strip().splitlines()
    assert len(errors) == 2 and all("holds a run of a different config (local_lr: 0.1 -> "
                                    "0.05;" in line for line in errors), changed.stderr
    assert set(status(tmp_path).values()) == {"failed"}
    assert "0/2 cells done" in changed.stdout
    # a finished cell whose metrics.jsonl is gone is not "done": the binary refuses it too
    os.remove(tmp_path / "fedavg-dir0.1-beta0-E1-global-s0" / "metrics.jsonl")
    again = sweep(tmp_path, *TINY)
    assert again.returncode == 1 and "rounds 1..2 are missing" in again.stderr, again.stderr
    assert "1/2 cells done" in again.stdout


@pytest.mark.slow  # ~26 s: a cell's SIGTERM is in the workers' test, --cell and refusals above
def test_a_job_array_loop_preempted_and_resubmitted(tmp_path):
    """Tasks of a job array: one preempted (SIGTERM: exit 75, its cell unfinished), one
    diverged (exit 3, not rerun); --list names the states and exits 75 while cells are
    still to run, --list --unfinished gives the array spec to resubmit; after the
    resubmission only the diverged cell is not done (exit 3)."""
    grid = ["--config.rounds=20", "--config.num_clients=8", "--config.participation=0.5",
            "--config.local_epochs=5", "--config.eval_every=5", "--algorithms=fedinit",
            "--betas=0.1,0.2,1e9"]
    names = [f"fedinit-dir0.1-beta{b}-E5-global-s0" for b in ("0.1", "0.2", "1e+09")]
    task = sweep(tmp_path, *grid, "--cell=0", wait=False)
    metrics = tmp_path / names[0] / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not metrics.exists():
        time.sleep(0.05)
    task.send_signal(signal.SIGTERM)  # preemption
    _, stderr = task.communicate(timeout=120)
    assert task.returncode == 75, stderr
    assert status(tmp_path)[names[0]] == "unfinished"
    diverged = sweep(tmp_path, *grid, "--cell=2")
    assert diverged.returncode == 3, diverged.stderr
    listed = sweep(tmp_path, *grid, "--list")
    assert listed.returncode == 75, listed.stderr
    assert [line.split("\t")[1] for line in listed.stdout.splitlines()] == names
    states = [line.split("\t")[2] for line in listed.stdout.splitlines()]
    assert states[0].startswith("unfinished (") and "/20 rounds)" in states[0], states
    assert states[1] == "not started" and states[2].startswith("diverged (round "), states
    todo = sweep(tmp_path, *grid, "--list", "--unfinished")
    assert todo.returncode == 75 and todo.stdout.strip() == "0-1", todo.stdout
    rerun = sweep(tmp_path, *grid)  # resubmitted: resumes cell 0, runs cell 1, and skips
    assert rerun.returncode == 3, rerun.stderr  # the diverged cell (not run again)
    assert "diverged earlier, skipped" in rerun.stdout
    table = rerun.stdout.splitlines()[-5:]
    assert table[0].split() == ["cell", "state", "test_accuracy", "rounds", "time", "name"]
    assert [line.split()[1] for line in table[1:4]] == ["done", "done", "diverged"]
    assert [line.split()[3] for line in table[1:3]] == ["20/20", "20/20"]
    assert table[4] == f"2/3 cells done in {tmp_path}"
    log = (tmp_path / names[0] / "train.log").read_text()
    assert "resumed from the checkpoint after round" in log and log.count("summary:") == 2


@pytest.mark.slow  # ~19 s: workers share cells by the workdir locks in the SIGTERM test too
def test_workers_and_a_second_sweep_share_a_results_folder(tmp_path):
    """A 2-worker sweep and a plain one on the same 4 cells at once: the cells are split by
    the workdir locks, no cell is an error, both wait for the other's cells and exit 0."""
    grid = [*TINY, "--seeds=0,1", "--config.rounds=3"]
    procs = [sweep(tmp_path, *grid, "--workers=2", wait=False), sweep(tmp_path, *grid, wait=False)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert set(status(tmp_path).values()) == {"done"} and len(status(tmp_path)) == 4
    for cell in status(tmp_path):
        rows = [json.loads(line) for line in open(tmp_path / cell / "metrics.jsonl")]
        assert [r["round"] for r in rows] == [1, 2, 3]  # each round once: never run twice


@pytest.mark.slow  # ~6 s of --list subprocesses: the grid's refusals
def test_cells_that_would_share_a_workdir_or_be_one_run_are_refused(tmp_path):
    for flags, message in [
            (["--betas=0.1,0.1000001"], "cells share a workdir name: fedavg-dir0.1-beta0.1-"),
            (["--config.local_steps=3", "--local_epochs=1,4"],
             "--local_epochs=1,4 with --config.local_steps=3")]:
        refused = sweep(tmp_path, *TINY, *flags, "--list")
        assert refused.returncode == 2 and message in refused.stderr, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
    assert not os.listdir(tmp_path)
    # what only this process's devices can tell: every cell planned before the first runs,
    # one that cannot run here recorded failed (a worker's cells: the sweep's table says why)
    refused = sweep(tmp_path, *TINY, "--config.num_devices=64")
    assert refused.returncode == 2 and re.fullmatch(
        r"(error: cell fed(avg|init)-dir0.1-beta0(.1)?-E1-global-s0: config.num_devices=64: "
        r"must be <= the \d cpu devices here\n){2}", refused.stderr), refused.stderr
    assert status(tmp_path) == {"fedavg-dir0.1-beta0-E1-global-s0": "failed",
                                "fedinit-dir0.1-beta0.1-E1-global-s0": "failed"}
    assert sorted(os.listdir(tmp_path)) == ["sweep_status"]  # no cell's workdir


def test_sigterm_reaches_the_cells_of_every_worker(tmp_path):
    """SIGTERM to `sweep --workers=2` stops both running cells at their next round boundary
    with a checkpoint (not after their last round)."""
    proc = sweep(tmp_path, *TINY, "--config.rounds=400", "--config.local_epochs=5",
                 "--config.checkpoint_every=0", "--workers=2", wait=False)
    cells = [tmp_path / f"{a}-dir0.1-beta{b}-E5-global-s0" for a, b in (("fedavg", 0),
                                                                         ("fedinit", 0.1))]
    deadline = time.time() + 120
    while time.time() < deadline and not all((c / "metrics.jsonl").exists() for c in cells):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    start = time.time()
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 75, stderr  # stopped, rerun to continue
    assert time.time() - start < 30
    for cell in cells:
        assert status(tmp_path)[cell.name] == "unfinished"
        # the workers share the terminal: each cell's lines carry its name
        assert f"{cell.name}: round    1  " in stdout, stdout
        done = len(open(cell / "metrics.jsonl").readlines())
        assert done < 400 and os.listdir(cell / "checkpoints") == [str(done)]


def test_the_array_script_runs_the_grid_it_is_given(tmp_path):
    """experiments/batch/grid.sbatch takes its grid from $GRID or its arguments (the one the
    array spec was listed from), refuses to run without one, and requeues on 75."""
    import stat
    import subprocess

    from conftest import ROOT

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in {"srun": 'echo "srun $*" >> "$LOG"; exit "${SRUN_EXIT:-0}"',
                       "scontrol": 'echo "scontrol $*" >> "$LOG"'}.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(stat.S_IRWXU)
    script = os.path.join(ROOT, "experiments", "batch", "grid.sbatch")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "LOG": str(tmp_path / "log"),
           "SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_JOB_ID": "77"}

    python = tmp_path / "python"  # stands for the venv's interpreter: says how it was called
    python.write_text('#!/bin/bash\necho "python $*" >> "$LOG"; exit "${PY_EXIT:-0}"\n')
    python.chmod(stat.S_IRWXU)

    def run(*args, **extra):
        return subprocess.run(["bash", script, *args], env={**env, **extra}, cwd=ROOT,
                              capture_output=True, text=True, timeout=30)

    refused = run()
    assert refused.returncode == 2 and "no grid" in refused.stderr
    assert run(GRID="--config c.py --results /r --seeds=0,1").returncode == 0
    assert run("--config", "d.py", "--results", "/q", SRUN_EXIT="75").returncode == 75
    local = run("--config", "d.py", PATH="/usr/bin:/bin", PYTHON=str(python), PY_EXIT="75")
    assert local.returncode == 75 and "rerun the same command" in local.stderr  # no SLURM
    assert (tmp_path / "log").read_text().splitlines() == [
        "srun .venv/bin/python -m experiments.sweep --config c.py --results /r --seeds=0,1 "
        "--cell=3",
        "srun .venv/bin/python -m experiments.sweep --config d.py --results /q --cell=3",
        "scontrol requeue 77_3",
        "python -m experiments.sweep --config d.py --cell=3"]


def test_a_grid_over_any_config_field():
    """--grid FIELD=v1,v2 (repeatable) adds an axis over any other config field, read as the
    field's type and named in the cell's workdir; one of the grid's own axes is refused
    naming its flag."""
    base = quiet_config(local_epochs=1)
    names = cell_names(base, algorithms=["fedinit"], grid=[
        "ri_offset=next,momentum", "first_visit=global", "local_lr=0.1,0.05"])
    assert names == [f"fedinit-dir0.1-beta0.1-E1-global-ri_offset{r}-first_visitglobal-"
                     f"local_lr{lr}-s0" for r in ("next", "momentum") for lr in ("0.1", "0.05")]
    nested = cell_names(base, algorithms=["fedavg"],
                        grid=["task.images.partition=iid,pathological"])
    assert nested == [f"fedavg-dir0.1-beta0-E1-global-task.images.partition{p}-s0"
                      for p in ("iid", "pathological")]  # a family's field, by its dotted name
    for flag, says in (("beta=0.1,0.2", "beta is an axis of its own: use --betas"),
                       ("task.images.dirichlet_alpha=0.1,0.6", "task.images.dirichlet_alpha "
                        "is an axis of its own: use --dirichlet_alphas"),
                       ("task.images.alpha=1,2", "config has no field 'task.images.alpha'")):
        with pytest.raises(ValueError, match=re.escape(says)):
            cell_names(base, algorithms=["fedavg"], grid=[flag])


def test_a_cells_status_speaks_for_its_config_only(tmp_path):
    """A status file records the cell's config (read as config.json is): it speaks for that
    config only, and one that records none speaks for no cell."""
    from experiments.cell_states import cell_state, record, recorded
    from fedinit_jax import experiment

    config = experiment.checked(quiet_config())
    record(str(tmp_path), "a", config, "diverged", "round 3")
    assert recorded(str(tmp_path), "a", config)["state"] == "diverged"
    assert recorded(str(tmp_path), "a", {**config, "local_lr": 0.05}) == {}
    assert cell_state(str(tmp_path), "a", config) == ("diverged", "round 3")
    (tmp_path / "sweep_status" / "b.json").write_text(json.dumps({"state": "diverged"}))
    assert cell_state(str(tmp_path), "b", config) == ("not started", "")


def test_grid_values_none_and_paths():
    """--grid FIELD=None is None (as --config.FIELD=None), and a value holding a path names
    a folder of the results, not a nested one."""
    from experiments import grid

    assert grid._value("None", 1e-3, "weight_decay") is None
    assert grid._value("0.001", 1e-3, "weight_decay") == 0.001
    with pytest.raises(ValueError, match="config.weight_decay is a float"):
        grid._value("none", 1e-3, "weight_decay")
    assert grid._name_part("/tmp/a") == "tmp_a" and "/" not in grid._name_part("a/../b")
    assert grid._name_part(0.001) == "0.001" and grid._name_part(None) == "None"
