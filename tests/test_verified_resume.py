"""Every restored checkpoint verified (record.py): a flipped bit, a changed metrics row, a
damaged or deleted step metadata, a damaged run_info.json, each ends as an exact resume from
the newest whole checkpoint or as one line naming the file, never as training on it."""
import json
import os

import jax.numpy as jnp
import numpy as np
import pytest
from conftest import QUIET, planned_run, quiet_config, rows, without_timing

from fedinit_jax.experiment import record, simulation
from fedinit_jax.experiment.workdir import WorkdirError

SMALL = quiet_config()  # 4 rounds, a checkpoint after each, the newest two kept: 3 and 4
LONGER = quiet_config(rounds=6)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted run of LONGER: its metrics rows."""
    workdir = tmp_path_factory.mktemp("reference")
    planned_run(LONGER, str(workdir), **QUIET)
    return without_timing(rows(workdir))


@pytest.fixture(scope="module")
def done4(tmp_path_factory):
    """A finished run of SMALL (checkpoints 3 and 4), copied by each test."""
    workdir = tmp_path_factory.mktemp("done4")
    planned_run(SMALL, str(workdir), **QUIET)
    return workdir


@pytest.fixture
def workdir(tmp_path, done4):
    import shutil

    shutil.copytree(done4, tmp_path / "run")
    return tmp_path / "run"


def _extend(workdir):
    logged = []
    planned_run(LONGER, str(workdir), log=logged.append, progress=False)
    return logged


def _flip_a_bit(workdir, step):
    """One bit in the middle of the largest data file of checkpoint `step`."""
    folder = workdir / "checkpoints" / str(step) / "default" / "ocdbt.process_0" / "d"
    path = max(folder.iterdir(), key=lambda p: p.stat().st_size)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))


def test_a_flipped_bit_in_the_newest_checkpoint_falls_back(workdir, reference):
    _flip_a_bit(workdir, 4)
    logged = _extend(workdir)
    assert any("checkpoint after round 4 is not usable" in line for line in logged), logged
    assert "resumed from the checkpoint after round 3" in logged
    assert (workdir / "checkpoints" / "corrupt-4").is_dir()
    assert without_timing(rows(workdir)) == reference


def test_a_changed_digit_in_a_metrics_row_is_recomputed_or_refused(workdir, reference):
    """Row 4 changed (valid JSON): checkpoint 4 vouches for another row, checkpoint 3 does
    not cover it: resumed from 3, row 4 recomputed. Row 2 changed: no checkpoint vouches for
    it, refused naming the line, nothing changed."""
    path = workdir / "metrics.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    row = json.loads(lines[3])
    lines[3] = json.dumps({**row, "train_loss": row["train_loss"] + 1e-4}) + "\n"
    path.write_text("".join(lines))
    logged = _extend(workdir)
    assert any("metrics.jsonl line 4 differs" in line for line in logged), logged
    assert without_timing(rows(workdir)) == reference


@pytest.mark.parametrize("row2", ["a digit", '{"round": 2}'])
def test_a_metrics_row_no_checkpoint_vouches_for_is_refused(workdir, row2):
    path = workdir / "metrics.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    lines[1] = (lines[1].replace('"train_loss": 0.', '"train_loss": 1.') if row2 == "a digit"
                else row2 + "\n")
    path.write_text("".join(lines))
    before = path.read_bytes()
    with pytest.raises(WorkdirError, match=r"holds 4 rounds .*metrics.jsonl line 2 differs "
                                           r".*checkpoints after rounds 4, 3\)\)") as err:
        planned_run(LONGER, str(workdir), **QUIET)
    assert "\n" not in str(err.value)
    assert path.read_bytes() == before
    assert sorted(os.listdir(workdir / "checkpoints")) == ["3", "4"]


@pytest.mark.parametrize("how", ["changed", "deleted", "no record"])
def test_a_damaged_step_metadata_falls_back_naming_the_file(workdir, reference, how):
    path = workdir / "checkpoints" / "4" / "_CHECKPOINT_METADATA"
    if how == "changed":
        path.write_text(path.read_text().replace('"per_client"', '"per_slient"'))
    elif how == "deleted":
        path.unlink()
    else:
        metadata = json.loads(path.read_text())
        del metadata["custom_metadata"]["record"]
        path.write_text(json.dumps(metadata))
    logged = _extend(workdir)
    assert any("checkpoint after round 4 is not usable" in line and str(path) in line
               for line in logged), logged
    assert without_timing(rows(workdir)) == reference


def test_a_damaged_run_info_is_rewritten_and_the_run_resumes(workdir, reference):
    (workdir / "run_info.json").write_text("")
    logged = _extend(workdir)
    assert any("run_info.json" in line and "written anew" in line for line in logged), logged
    assert without_timing(rows(workdir)) == reference


def test_a_refusal_summary_says_the_rounds_done(workdir):
    for step in (3, 4):
        _flip_a_bit(workdir, step)
    logged = []
    with pytest.raises(WorkdirError):
        planned_run(LONGER, str(workdir), log=logged.append, progress=False)
    summary = [line for line in logged if line.startswith("summary:")]
    assert summary and "round 4/6 (none in this run)" in summary[0], logged


def test_every_checkpoint_damaged_after_rows_is_refused_naming_each(workdir):
    for step in (3, 4):
        _flip_a_bit(workdir, step)
    with pytest.raises(WorkdirError, match=r"holds 4 rounds .*checkpoints/4: its state "
                                           r"differs.*checkpoints/3: "):
        planned_run(LONGER, str(workdir), **QUIET)
    assert sorted(os.listdir(workdir / "checkpoints")) == ["3", "4"]


def test_a_diverging_evaluation_writes_no_checkpoint(tmp_path):
    """A non-finite evaluation ends the round before its row or checkpoint is written: the
    checkpoint before it is never rotated out by one of a diverged state."""
    config = quiet_config(rounds=6, local_lr=1e4, runaway_factor=0.0)
    with pytest.raises(simulation.NonFiniteError, match="non-finite") as err:
        planned_run(config, str(tmp_path), **QUIET)
    assert "\n" not in str(err.value)
    diverged_at = int(str(err.value).split("round ")[1].split(":")[0])
    saved = sorted(int(s) for s in os.listdir(tmp_path / "checkpoints") if s.isdigit())
    assert all(s < diverged_at for s in saved)
    assert [r["round"] for r in rows(tmp_path)] == list(range(1, diverged_at))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "bool", "uint8", "int32"])
def test_the_state_digest_is_the_same_on_the_devices_and_in_numpy(dtype, monkeypatch):
    """The checksums of a leaf held whole (numpy, block by block) equal those of a sharded
    one (jitted, whole), and one flipped bit or two swapped values change the digest."""
    x = (jnp.arange(37) % 2 == 0) if dtype == "bool" else jnp.arange(37).astype(dtype)
    whole = np.asarray(record._sharded_checksums(x))
    np.testing.assert_array_equal(record._checksums(x), whole)
    monkeypatch.setattr(record, "_BLOCK", 5)  # blocks that end mid-array
    np.testing.assert_array_equal(record._checksums(x), whole)
    digest = record.state_digest({"x": x})
    flipped = np.asarray(x).copy()
    flipped.view(np.uint8)[5] ^= 1
    swapped = np.asarray(x).copy()
    swapped[[1, 2]] = swapped[[2, 1]]
    assert record.state_digest({"x": jnp.asarray(flipped)}) != digest
    assert record.state_digest({"x": jnp.asarray(swapped)}) != digest
    assert record.state_digest({"y": x}) != digest


def test_train_log_says_when_the_previous_run_ended_uncleanly(workdir):
    """A kill leaves train.log without its summary line: the resumed run says so before
    its rounds, and names why its store is the one it uses (auto: as the run so far)."""
    log = workdir / "train.log"
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:-1]))  # as a SIGKILL leaves it: no summary line
    planned_run(LONGER, str(workdir), **QUIET)
    text = log.read_text()
    assert text.count("note: the previous run in this workdir ended without its summary") == 1
    assert "client store: device (auto, as the run so far: run_info.json)" in text
    planned_run(quiet_config(rounds=7), str(workdir), **QUIET)  # ended cleanly: no note
    assert log.read_text().count("note: the previous run") == 1
