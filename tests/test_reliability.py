"""Reliability: kills at many points, SIGTERM, corrupted checkpoints, bad configs, bad data."""
import copy
import os
import re
import shutil
import signal
import time

import numpy as np
import pytest
from conftest import (
    QUIET,
    TINY,
    fault_then_resume,
    planned_run,
    quiet_config,
    rows,
    train,
    without_timing,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.configs import default
from fedinit_jax import data, experiment
from fedinit_jax.experiment import planning, schema, simulation, stopping, workdir

FAST = [*TINY[1:], "--config.rounds=6", "--config.eval_every=2"]
SLOW = [*FAST, "--config.local_epochs=10"]  # rounds long enough to signal one mid-run
BASE = default.get_config().to_dict()
SMALL = quiet_config()
SMALL6 = quiet_config(rounds=6)  # the in-process twin of FAST


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted run of SLOW (in-process: the same numbers as the binary's)."""
    workdir = tmp_path_factory.mktemp("reference")
    planned_run(quiet_config(rounds=6, local_epochs=10), str(workdir), **QUIET)
    return without_timing(rows(workdir))


@pytest.fixture(scope="module")
def small_reference(tmp_path_factory):
    """An uninterrupted in-process run of SMALL (6 rounds): its metrics rows."""
    workdir = tmp_path_factory.mktemp("small_reference")
    planned_run(SMALL6, str(workdir), **QUIET)
    return without_timing(rows(workdir))


@pytest.mark.parametrize("point", [
    "round_start:3", pytest.param("eval:4", marks=pytest.mark.slow),
    pytest.param("metrics_written:3", marks=pytest.mark.slow), "checkpoint_saved:2",
    "metrics_written:6"])
def test_a_fault_at_each_point_then_resume(tmp_path, small_reference, point):
    """The run dies at each point of the loop (in-process: the fault callback raises), then the
    same command resumes: bit-identical rows, none duplicated or missing. Real SIGKILLs of the
    binary (no cleanup at all) are the subprocess tests below and in test_train.py."""
    fault_then_resume(SMALL6, tmp_path, point)
    assert without_timing(rows(tmp_path)) == small_reference


@pytest.mark.slow  # ~10 s: a cut write's folder in-process below (test_a_cut_checkpoint_write_...)
def test_sigkill_during_checkpoint_write(tmp_path, reference):
    """Kill while orbax's temporary checkpoint directory exists (mid-write), then resume."""
    proc = train(tmp_path, *SLOW, wait=False)
    ckpt = tmp_path / "checkpoints"
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if ckpt.exists() and any("tmp" in p.name for p in ckpt.iterdir() if p.name != "2"):
            break
        time.sleep(0.0005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    resumed = train(tmp_path, *SLOW)
    assert resumed.returncode == 0, resumed.stderr
    assert without_timing(rows(tmp_path)) == reference


@pytest.mark.slow  # ~11 s: SIGTERM at a round boundary, its checkpoint, exit 75 and the exact
# resume run by default in test_distributed.py (two processes) and test_sweep.py (the cells)
def test_sigterm_checkpoints_at_round_boundary_and_exits(tmp_path, reference):
    proc = train(tmp_path, *SLOW, wait=False)
    metrics = tmp_path / "metrics.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline and not (metrics.exists() and metrics.read_text().count("\n")):
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=240)
    done = len(rows(tmp_path))
    assert done < 6, "the signal came after the last round: nothing was tested"
    assert proc.returncode == 75, stderr  # rerun to continue: a scheduler requeues
    assert f"stopped by SIGTERM after round {done}" in stderr
    assert str(done) in os.listdir(tmp_path / "checkpoints")
    assert train(tmp_path, *SLOW).returncode == 0
    assert without_timing(rows(tmp_path)) == reference


def test_corrupted_latest_checkpoint_falls_back(tmp_path, small_reference):
    planned_run(SMALL, str(tmp_path), **QUIET)
    latest = tmp_path / "checkpoints" / "4"
    for root, _, files in os.walk(latest):
        for name in files:
            with open(os.path.join(root, name), "r+b") as f:
                f.truncate(max(0, os.path.getsize(f.name) // 3))
    logged = []
    planned_run(SMALL6, str(tmp_path), log=logged.append, progress=False)
    assert any("checkpoint after round 4 is not usable" in line for line in logged)
    assert (tmp_path / "checkpoints" / "corrupt-4").exists()
    assert without_timing(rows(tmp_path)) == small_reference


def _damage(folder):
    for root, _, files in os.walk(folder):
        for name in files:
            with open(os.path.join(root, name), "r+b") as f:
                f.truncate(max(0, os.path.getsize(f.name) // 3))


def test_a_finished_run_keeps_its_rows_when_its_only_checkpoint_is_damaged(tmp_path):
    """keep_checkpoints=1: the finished run's one checkpoint damaged; rerunning the command
    keeps every row (the run is finished) instead of starting over."""
    config = quiet_config(rounds=5, checkpoint_every=3, keep_checkpoints=1)
    planned_run(config, str(tmp_path), **QUIET)
    before = rows(tmp_path)
    _damage(tmp_path / "checkpoints" / "5")
    planned_run(config, str(tmp_path), **QUIET)
    assert rows(tmp_path) == before


def test_an_unfinished_run_with_no_readable_checkpoint_is_refused_not_restarted(tmp_path):
    config = quiet_config(rounds=5, checkpoint_every=3, keep_checkpoints=1)
    planned_run(config, str(tmp_path), **QUIET)
    before = (tmp_path / "metrics.jsonl").read_bytes()
    _damage(tmp_path / "checkpoints" / "5")
    with pytest.raises(simulation.WorkdirError, match="holds 5 rounds .*no checkpoint can resume "
                                                      "the run .*/checkpoints/5.*Nothing was "
                                                      "changed"):
        planned_run({**config, "rounds": 7}, str(tmp_path), **QUIET)
    assert (tmp_path / "metrics.jsonl").read_bytes() == before
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["5"]  # nothing moved


def test_partial_metrics_line_is_dropped(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"round": 1, "a": 1.0}\n{"round": 2, "a"')
    assert simulation.read_metrics(str(tmp_path)) == [{"round": 1, "a": 1.0}]


# ------------------------------------------------------------------ config validation

BAD_VALUES = {
    "rounds": [0, -3, 1.5, "10", None, True], "num_clients": [0, -1, 2.0, "x"],
    "participation": [0.0, -0.1, 1.01, float("nan"), "half"], "local_lr": [0.0, -1.0, float("inf")],
    "batch_size": [0, -5, 3.5], "local_epochs": [0, -1], "eval_every": [0],
    "task.images.dirichlet_alpha": [0.0, -0.5, float("nan")],
    "task.images.client_noise": [-0.1, float("inf")], "task.images.category_noise": [-1.0],
    "task.images.augment": ["yes", 1], "task.images.partition": ["random"],
    "weight_decay": [-1e-3], "clip_norm": [-1.0],
    "algorithm": ["fedfoo", "", 3], "model": ["resnet50", None],
    "delta_from": ["local", None], "execution": ["pmap"], "lr_decay": [0.0, 1.5, -1.0],
    "beta": [float("nan"), float("inf")], "conv": ["cudnn"], "seed": [-1, 0.5],
    "keep_checkpoints": [0], "checkpoint_every": [-1], "num_devices": [-1],
    "model_width": [0.0, -1.0], "task.images.classes_per_client": [0],
    "client_state_dtype": ["int8", "bf16", None], "participation_mode": ["uniform", None],
}


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(BAD_VALUES)).flatmap(
    lambda field: st.tuples(st.just(field), st.sampled_from(BAD_VALUES[field]))))
def test_random_invalid_configs_name_the_field(field_value):
    field, value = field_value
    config = copy.deepcopy(BASE)
    *path, name = field.split(".")
    inner = config
    for key in path:
        inner = inner[key]
    inner[name] = value
    with pytest.raises(ValueError, match=f"config.{re.escape(field)}="):
        experiment.validate(config)


@pytest.mark.parametrize("changes, field", [
    ({"algorithm": "fedavg", "rho": 0.1}, "rho"),
    ({"model": "vgg11", "model_width": 0.5}, "model_width"),
    ({"num_clients": 4, "participation": 0.1}, "participation"),
    ({"execution": "chunked", "chunk_size": 0}, "chunk_size"),
])
def test_cross_field_rules(changes, field):
    with pytest.raises(ValueError, match=f"config.{field}="):
        experiment.validate({**BASE, **changes})


def test_default_config_is_valid():
    experiment.validate(BASE)


def test_a_workdir_of_another_schema_is_refused_in_one_line(tmp_path):
    """config.json of schema 2 (or none recorded): refused before any work, in one line
    naming the file and the version; nothing in the workdir is changed."""
    from fedinit_jax.experiment.workdir import WorkdirError

    config = experiment.resolve(BASE)
    for version in (2, None):
        recorded = {**config, schema.FIELD: version}
        workdir.write_json(str(tmp_path / "config.json"), recorded)
        (tmp_path / "metrics.jsonl").write_text('{"round": 1}\n')
        with pytest.raises(WorkdirError) as refused:
            simulation.prepare_workdir(str(tmp_path), BASE)
        line = str(refused.value)
        assert "\n" not in line and str(tmp_path / "config.json") in line
        assert f"schema_version={version!r}: this fedinit_jax reads configs of schema 3" in line
        assert workdir.read_json(str(tmp_path / "config.json")) == recorded


# ------------------------------------------------------------------ data faults

def test_bad_split_contents_are_named():
    images = np.zeros((4, 8, 8, 3), np.uint8)
    with pytest.raises(ValueError, match="where.*labels out of range"):
        data.tfds_source.check_split(images, np.array([0, 1, 2, 10]), 10, "where")
    with pytest.raises(ValueError, match="where.*uint8"):
        data.tfds_source.check_split(images[..., 0], np.zeros(4, np.int32), 10, "where")
    with pytest.raises(ValueError, match="where.*3 labels for 4 images"):
        data.tfds_source.check_split(images, np.zeros(3, np.int32), 10, "where")


SHARED = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "tfds", "cifar10", "3.0.2")


@pytest.mark.skipif(not os.path.isdir(SHARED), reason="../shared/tfds is not here")
@pytest.mark.parametrize("fault", ["missing", "truncated"])
def test_damaged_tfds_split_file(tmp_path, fault):
    target = tmp_path / "tfds" / "cifar10" / "3.0.2"
    target.mkdir(parents=True)
    for name in os.listdir(SHARED):
        if "test" not in name:
            os.symlink(os.path.abspath(os.path.join(SHARED, name)), target / name)
    record = "cifar10-test.array_record-00000-of-00001"
    if fault == "truncated":
        with open(os.path.join(SHARED, record), "rb") as src:
            (target / record).write_bytes(src.read(100_000))
    with pytest.raises((FileNotFoundError, ValueError), match="cifar10.*test"):
        data.load("cifar10", "test", data_dir=str(tmp_path / "tfds"),
                  cache_dir=str(tmp_path / "cache"))
    assert not os.path.exists(tmp_path / "cache") or not os.listdir(tmp_path / "cache")


# ------------------------------------------------------------------ Reliability II: the workdir


def test_a_live_workdir_is_refused(tmp_path):
    from fedinit_jax.experiment import workdir

    holder = workdir.Lock(str(tmp_path))  # another writer holds it
    try:
        with pytest.raises(ValueError, match=f"is in use by process {os.getpid()} on "):
            planned_run(SMALL, str(tmp_path), **QUIET)
        assert sorted(os.listdir(tmp_path)) == [".lock"]  # nothing touched
    finally:
        holder.release()
    assert len(planned_run(SMALL, str(tmp_path), **QUIET)) == 4  # free again


def test_writers_racing_on_one_json_file_each_write_it_whole(tmp_path):
    """Two sweeps record one cell's status at once: every write lands whole, none fails,
    no temporary file is left (a shared temporary name failed one writer's rename)."""
    import json
    from concurrent.futures import ThreadPoolExecutor

    from fedinit_jax.experiment import workdir

    path = str(tmp_path / "status.json")

    def write(writer):
        for i in range(300):
            workdir.write_json(path, {"writer": writer, "i": i, "pad": "x" * 4096})

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(write, range(4)))  # re-raises a writer's error
    assert json.load(open(path))["i"] == 299
    assert os.listdir(tmp_path) == ["status.json"]


def test_two_processes_on_one_workdir(tmp_path):
    """The binary is refused (one line, exit 2, naming the holder) while another process
    holds the workdir's lock; a SIGKILLed holder leaves no lock. The holder is a process that
    takes the lock as a run does (workdir.Lock), not a training."""
    import subprocess
    import sys

    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from fedinit_jax.experiment.workdir import "
         "Lock; Lock(sys.argv[1]); print('held', flush=True); time.sleep(600)",
         str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    second = train(tmp_path, *FAST)
    assert second.returncode == 2
    assert second.stderr.strip().endswith("use another workdir")
    assert f"in use by process {holder.pid}" in second.stderr
    assert len(second.stderr.splitlines()) == 1
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert workdir.holder(str(tmp_path)) is None  # the kill released it: a run takes it
    workdir.Lock(str(tmp_path)).release()


def test_rounds_below_the_done_ones_are_refused(tmp_path):
    planned_run(SMALL, str(tmp_path), **QUIET)
    before = (tmp_path / "config.json").read_text()
    with pytest.raises(ValueError, match="config.rounds=2 is below the 4 rounds already done"):
        planned_run({**SMALL, "rounds": 2}, str(tmp_path), **QUIET)
    assert (tmp_path / "config.json").read_text() == before
    assert len(planned_run({**SMALL, "rounds": 5}, str(tmp_path), **QUIET)) == 5  # extend


@pytest.mark.parametrize("damage", ["middle line", "hole", "deleted"])
def test_damaged_metrics_are_refused_never_truncated(tmp_path, damage):
    planned_run(SMALL, str(tmp_path), **QUIET)
    path = tmp_path / "metrics.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    if damage == "middle line":
        lines[1] = '{"round": 2, "train_lo\n'
        match = "line 2 is damaged"
    elif damage == "hole":
        lines = lines[:2]  # a file cut to 2 rows while the checkpoint is after round 4
        match = "holds 2 rounds .* line 3 is missing .checkpoints after rounds 4, 3"
    else:
        lines = []
        match = "holds 0 rounds .* line 1 is missing .checkpoints after rounds 4, 3"
    path.write_text("".join(lines))
    before = path.read_bytes()
    with pytest.raises(ValueError, match=match):
        planned_run({**SMALL, "rounds": 6}, str(tmp_path), **QUIET)
    assert path.read_bytes() == before  # left as it was
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["3", "4"]  # nothing moved


def _enospc(*_args, **_kwargs):
    raise OSError(28, os.strerror(28))


class _FullDisk:
    """Wraps a file: its `fail_at`-th write raises ENOSPC."""

    def __init__(self, file, fail_at):
        self._file, self._left = file, fail_at

    def write(self, text):
        self._left -= 1
        if not self._left:
            _enospc()
        return self._file.write(text)

    def __getattr__(self, name):
        return getattr(self._file, name)


@pytest.mark.parametrize("target", [  # one handler for the three writes; TensorBoard's: -m slow
    "metrics", pytest.param("tensorboard", marks=pytest.mark.slow), "checkpoint"])
def test_a_failed_write_ends_the_run_with_one_line(tmp_path, monkeypatch, target):
    """The third write of metrics / TensorBoard / a checkpoint fails with ENOSPC."""
    from tensorboardX.event_file_writer import EventsWriter

    from fedinit_jax.experiment import checkpoint, workdir

    if target == "metrics":
        init = workdir.MetricsLog.__init__

        def full_disk_init(self, *args):
            init(self, *args)
            self._file = _FullDisk(self._file, 3)

        monkeypatch.setattr(workdir.MetricsLog, "__init__", full_disk_init)
    else:
        owner, name = ((EventsWriter, "flush") if target == "tensorboard"
                       else (checkpoint.Checkpointer, "save"))
        original, calls = getattr(owner, name), []

        def failing(self, *args):
            calls.append(1)
            if len(calls) == 3:
                _enospc()
            return original(self, *args)

        monkeypatch.setattr(owner, name, failing)
    with pytest.raises(simulation.WriteError) as err:
        planned_run(SMALL, str(tmp_path), **QUIET)
    message = str(err.value)
    assert "no space left on device writing" in message and "\n" not in message
    assert "last good checkpoint: round 2" in message
    kept = [r["round"] for r in simulation.read_metrics(str(tmp_path))]
    assert kept == ([1, 2] if target == "metrics" else [1, 2, 3])
    monkeypatch.undo()
    resumed = planned_run(SMALL, str(tmp_path), **QUIET)  # space again: resumes
    assert [r["round"] for r in resumed] == [1, 2, 3, 4]


def test_disk_full_subprocess_exits_4_promptly(tmp_path):
    """A real write failure: files may not grow past 300 KB (ulimit -f, SIGXFSZ ignored, so a
    write past it fails with EFBIG), and the first checkpoint (~0.4 MB of client models)
    cannot be written."""
    import subprocess
    import sys

    from conftest import ROOT

    command = [sys.executable, "-m", "experiments.train", "--config",
               "experiments/configs/default.py", "--workdir", str(tmp_path), *TINY[1:],
               "--config.rounds=4", "--config.checkpoint_every=2"]
    started = time.time()
    result = subprocess.run(["bash", "-c", 'trap "" XFSZ; ulimit -f 293; exec "$@"', "-",
                             *command], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert result.returncode == 4, result.stderr
    line = result.stderr.strip().splitlines()
    assert len(line) == 1 and "file too large writing" in line[0], result.stderr
    assert "checkpoints" in line[0] and "last good checkpoint: none" in line[0]
    assert [r["round"] for r in rows(tmp_path)] == [1, 2]
    assert time.time() - started < 120


@pytest.mark.parametrize("damage", ["labels", "truncated", "missing images"])
def test_damaged_cache_is_named(tmp_path, monkeypatch, damage):
    """The decoded-data cache gets the checks fresh data gets, and errors name the file."""
    from fedinit_jax.data import tfds_source

    class Info:
        name, version = "toy", "1.0.0"
        features = {"label": type("L", (), {"num_classes": 10})()}

    monkeypatch.setattr(tfds_source, "_source", lambda *a: (type("B", (), {
        "info": Info, "data_dir": str(tmp_path)})(), None))
    cache = tmp_path / "cache" / "toy-1.0.0-train"
    tfds_source._save_atomically(str(cache), np.zeros((4, 8, 8, 3), np.uint8),
                                 np.array([0, 1, 2, 3], np.int32))
    if damage == "labels":
        np.save(str(cache) + ".labels.npy", np.array([99, -3, 0, 1], np.int32))
        says = "labels out of range"
    elif damage == "truncated":
        path = str(cache) + ".images.npy"
        os.truncate(path, os.path.getsize(path) // 2)
        says = "images.npy cannot be read"
    else:
        os.remove(str(cache) + ".images.npy")
        says = "images.npy cannot be read"
    with pytest.raises(ValueError, match=says) as err:
        tfds_source.load("toy", "train", cache_dir=str(tmp_path / "cache"))
    assert str(cache) in str(err.value)


def test_an_extended_run_equals_an_uninterrupted_one(tmp_path):
    """Extending 3 -> 5 rounds (eval every 2) drops the evaluation taken at round 3 because it
    was the last round, so the rows equal a 5-round run's."""
    whole = planned_run({**SMALL, "rounds": 5}, str(tmp_path / "whole"), **QUIET)
    planned_run({**SMALL, "rounds": 3}, str(tmp_path / "ext"), **QUIET)
    extended = planned_run({**SMALL, "rounds": 5}, str(tmp_path / "ext"), **QUIET)
    strip = lambda rs: [{k: v for k, v in r.items() if not k.endswith("seconds")} for r in rs]  # noqa: E731
    assert strip(extended) == strip(whole)
    assert strip(simulation.read_metrics(str(tmp_path / "ext"))) == strip(whole)


def test_resuming_on_another_device_count_is_recorded(tmp_path, monkeypatch):
    """num_devices=0 (all that divide N) on a machine of 2 devices, then of 1."""
    planned_run({**SMALL, "rounds": 2}, str(tmp_path), **QUIET)
    monkeypatch.setattr(planning, "num_devices", lambda config: 1)
    lines = []
    planned_run({**SMALL, "rounds": 3}, str(tmp_path), log=lines.append, progress=False)
    assert any("resuming on 1 devices, the run so far used 2" in line for line in lines)
    info = __import__("json").load(open(tmp_path / "run_info.json"))
    assert info["num_devices_history"] == [{"after_round": 2, "num_devices": 1, "before": 2}]


def test_a_workdir_without_rounds_takes_the_corrected_config(tmp_path):
    """A run that failed before its first round (say out of memory) left config.json only:
    the corrected command is not refused as 'another config'."""
    simulation.make_workdir(str(tmp_path))
    simulation.prepare_workdir(str(tmp_path), {**SMALL, "model_width": 50.0})
    assert len(planned_run(SMALL, str(tmp_path), **QUIET)) == 4


def test_checkpoint_of_another_layout_is_refused_and_kept(tmp_path):
    """A whole checkpoint whose state has another structure (e.g. written before FedState's
    fields were renamed) is not 'corrupt': WorkdirError, and it stays where it is."""
    import jax.numpy as jnp

    from fedinit_jax import algorithms
    from fedinit_jax.experiment.checkpoint import Checkpointer
    from fedinit_jax.experiment.workdir import WorkdirError

    def loss(params, batch, key):
        return jnp.sum(params["w"] ** 2)

    params = {"w": jnp.ones(3)}
    saver = Checkpointer(str(tmp_path), log=lambda line: None)
    saver.save(2, algorithms.fedavg(loss).init(params, num_clients=4))
    saver.close()
    reader = Checkpointer(str(tmp_path), log=lambda line: None)
    with pytest.raises(WorkdirError, match="another layout.*nothing was moved"):
        reader.load(2, algorithms.scaffold(loss).init(params, num_clients=4),
                    reader.metadata(2)["record"])
    reader.close()
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["2"]


def test_a_momentum_state_round_trips_and_a_flipped_value_is_caught(tmp_path):
    """ri_state (left out of a checkpoint while empty) round-trips, verified by the
    record's state digest; one changed value of the restored state fails the digest."""
    import jax.numpy as jnp

    from fedinit_jax import algorithms
    from fedinit_jax.experiment import record
    from fedinit_jax.experiment.checkpoint import Checkpointer

    def loss(params, batch, key):
        return jnp.sum(params["w"] ** 2)

    params = {"w": jnp.ones(3)}
    momentum = algorithms.fedinit(loss, beta=0.1, ri_offset="momentum",
                                  first_visit="global").init(params, num_clients=4)
    momentum = momentum._replace(ri_state={"w": jnp.arange(3.0)})
    saver = Checkpointer(str(tmp_path), log=lambda line: None)
    saver.save(4, momentum)
    entry = saver.metadata(4)["record"]
    restored = saver.load(4, momentum, entry)
    np.testing.assert_array_equal(restored.ri_state["w"], [0.0, 1.0, 2.0])
    with pytest.raises(record.Damaged, match="differs from the one written"):
        saver.load(4, momentum, {**entry, "state": record.state_digest(
            momentum._replace(ri_state={"w": jnp.arange(1.0, 4.0)}))})
    saver.close()


def test_read_metrics_up_to_a_round(tmp_path):
    from fedinit_jax.experiment import workdir

    workdir.rewrite_metrics(str(tmp_path), [{"round": 1}, {"round": 2}, {"round": 3}])
    assert workdir.read_metrics(str(tmp_path), upto_round=0) == []
    assert workdir.read_metrics(str(tmp_path), upto_round=2) == [{"round": 1}, {"round": 2}]
    assert len(workdir.read_metrics(str(tmp_path))) == 3


def test_the_checkpoint_identifies_the_run_when_config_json_is_gone(tmp_path):
    """config.json deleted: a rerun under another config is refused by the config the
    checkpoint records; the same config resumes (and config.json is written again); with
    neither, rows of an unknown config are refused, never continued."""
    planned_run(SMALL, str(tmp_path), **QUIET)
    os.remove(tmp_path / "config.json")
    with pytest.raises(simulation.WorkdirError, match=r"different config \(local_lr: 0.1 -> "
                                                      r"0.05, seed: 0 -> 7; by its newest"):
        planned_run({**SMALL6, "local_lr": 0.05, "seed": 7}, str(tmp_path), **QUIET)
    assert not (tmp_path / "config.json").exists()
    planned_run(SMALL6, str(tmp_path), **QUIET)
    assert (tmp_path / "config.json").exists() and len(rows(tmp_path)) == 6
    os.remove(tmp_path / "config.json")
    for name in os.listdir(tmp_path / "checkpoints"):
        shutil.rmtree(tmp_path / "checkpoints" / name)
    with pytest.raises(simulation.WorkdirError, match="holds 6 rounds but no config.json"):
        planned_run(SMALL6, str(tmp_path), **QUIET)


def test_a_cut_checkpoint_write_leaves_no_temporary_folder_after_resume(tmp_path):
    planned_run(SMALL, str(tmp_path), **QUIET)
    left = tmp_path / "checkpoints" / "5.orbax-checkpoint-tmp-1234567"
    left.mkdir()
    (left / "partial").write_text("x")
    planned_run(SMALL6, str(tmp_path), **QUIET)
    assert not left.exists()
    assert "5" in os.listdir(tmp_path / "checkpoints")


def test_a_train_loss_that_runs_away_ends_the_run_diverged(tmp_path, monkeypatch):
    """The rule (simulation.runaway) against a plain loop, on the collapses' shape, on a
    healthy run's noise, on one lucky cohort's dip and on a lowest loss of 0; then the loop:
    a run whose loss stays above the threshold ends diverged (NonFiniteError: exit 3, the
    sweep's 'diverged'), its rows kept."""
    from conftest import QUIET, quiet_config

    from fedinit_jax.experiment import simulation

    def reference(losses, factor=30.0, k=5, w=10):
        for n in range(w + k, len(losses) + 1):
            medians = [sorted(losses[i - w:i])[w // 2 - 1:w // 2 + 1] for i in range(w, n - k + 1)]
            baseline = min((a + b) / 2 for a, b in medians)
            if all(x > factor * baseline and x > 20.0 * losses[0] for x in losses[n - k:n]):
                return n
        return None

    rng = np.random.default_rng(0)
    healthy = list(0.5 * np.exp(-np.arange(300) / 40) * np.exp(rng.normal(size=300)))
    cases = {"collapse": [4.2, 1.5] + [1.6] * 12 + [200.0, 260.0, 300.0, 400.0, 500.0, 900.0],
             "noise": list(np.exp(rng.normal(size=60) * 3)),
             "healthy": [2.3] + healthy,  # the run: 0.448 after a lowest of 3e-4
             "lucky dip": [2.3] + [0.4] * 10 + [1e-4] + [0.45] * 20,
             "a loss of 0": [2.3] + [0.0] * 12 + [0.3] * 10}
    expected = {"collapse": 19, "noise": None, "healthy": None, "lucky dip": None,
                "a loss of 0": None}
    for name, losses in cases.items():
        fired = next((n for n in range(1, len(losses) + 1) if simulation.runaway(
            [{"round": k + 1, "train_loss": x} for k, x in enumerate(losses[:n])])), None)
        assert fired == reference(losses), name
        if name in expected:
            assert fired == expected[name], name

    monkeypatch.setattr(stopping, "RUNAWAY_WINDOW", 1)  # the baseline: the lowest loss
    real = stopping.runaway
    monkeypatch.setattr(simulation, "runaway", lambda rows: real(  # a loss growing 1000x a round
        [{**r, "train_loss": 1000.0 ** r["round"]} for r in rows]))
    with pytest.raises(simulation.NonFiniteError, match="for 5 rounds .*: the run diverged"):
        planned_run(quiet_config(rounds=8, eval_every=4), str(tmp_path), **QUIET)
    assert len(rows(tmp_path)) == 6
    assert "summary: diverged; round 6/8" in (tmp_path / "train.log").read_text()


def test_a_signal_a_stop_request_received_reaches_the_handler_it_replaced():
    """A SIGTERM that comes after a run's last round ends no run (the run is done), but the
    sweep around it must still stop before its next cell: StopRequest hands the signal on."""
    seen = []

    def remember(signum, _frame):
        seen.append(signum)
    remember.stops_between_runs = True
    old = signal.signal(signal.SIGTERM, remember)
    try:
        with stopping.StopRequest() as stop:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # the handler runs between bytecodes of the main thread
            assert stop.signum == signal.SIGTERM and seen == []  # held while the run lasts
        assert seen == [signal.SIGTERM]
        with stopping.StopRequest():  # no signal: nothing handed on
            pass
        assert seen == [signal.SIGTERM]
        with pytest.raises(stopping.NonFiniteError):  # a run that diverged after the signal:
            with stopping.StopRequest():              # the sweep, which goes on, still stops
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)
                raise stopping.NonFiniteError("diverged")
        assert seen == [signal.SIGTERM] * 2
    finally:
        signal.signal(signal.SIGTERM, old)
