"""A client store as durable as the checkpoints beside it (fedinit_jax/deltas.py): a run
killed at any of the store's write positions, or whose store files are deleted, emptied or
truncated after a kill, resumes to the metrics of an uninterrupted run byte for byte, or
stops with one line naming the file (exit 2 in the binary); never a different run."""
import os
import shutil

import numpy as np
import pytest
from conftest import QUIET, planned_run, quiet_config, rows, without_timing

from fedinit_jax import client_store
from fedinit_jax.client_store import deltas
from fedinit_jax.experiment.checkpoint import Checkpointer

ROUNDS, EVERY = 6, 2
SLOW = pytest.mark.slow  # another mode or store of a case CI runs once: `pytest -m slow`


def _config(store, **changes):
    return quiet_config(rounds=ROUNDS, algorithm="scaffold", beta=0.1, client_store=store,
                        checkpoint_every=EVERY, eval_every=1, **changes)


class Killed(BaseException):
    """The process dies here: nothing catches it, no store write after it happens."""


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The metrics rows of an uninterrupted run (the disk store; the host store's are the
    same, asserted in test_the_kill_matrix)."""
    workdir = tmp_path_factory.mktemp("uninterrupted")
    planned_run(_config("disk"), str(workdir), **QUIET)
    return without_timing(rows(workdir))


def _kill_in_round(monkeypatch, owner, name, round_number, half=False):
    """Make owner.name kill the run at its first call in `round_number` (after writing the
    first half of its ids' values when `half`): the round_start fault arms it."""
    armed = {"on": False}
    original = getattr(owner, name)

    def killing(self, ids, *values):
        if not armed["on"]:
            return original(self, ids, *values)
        if half:
            keep = max(1, len(ids) // 2)
            original(self, ids[:keep], *(v[:keep] if np.ndim(v) else v for v in values))
        raise Killed(f"{name} in round {round_number}")

    monkeypatch.setattr(owner, name, killing)

    def fault(point, rounds_done):
        if (point, rounds_done) == ("round_start", round_number):
            armed["on"] = True
    return fault


def _cut_delta(monkeypatch, round_number):
    """The delta of checkpoint `round_number` dies half-written (its temporary file)."""
    original = deltas.write_delta

    def cut(folder, rounds_done, ids, rows_):
        if rounds_done != round_number:
            return original(folder, rounds_done, ids, rows_)
        with open(os.path.join(folder, f".delta-{rounds_done}.npy.tmp{os.getpid()}"), "wb") as f:
            f.write(b"PK\x03\x04 half a zip")
        raise Killed("delta write")

    monkeypatch.setattr(deltas, "write_delta", cut)


def _at(point):
    where, at = point.split(":")

    def fault(name, rounds_done):
        if (name, rounds_done) == (where, int(at)):
            raise Killed(point)
    return fault


KILLS = {  # position -> (stores, how)
    "rows half written": (("disk",), lambda mp: _kill_in_round(
        mp, client_store.DiskStore, "_write_rows", 5, half=True)),
    "rows written, presence not": (("disk",), lambda mp: _kill_in_round(
        mp, client_store.DiskStore, "mark_present", 5)),
    "presence half written": (("disk",), lambda mp: _kill_in_round(
        mp, client_store.DiskStore, "_write_present", 5, half=True)),
    "after the round's rows": (("disk", "host"), lambda mp: _at("metrics_written:5")),
    "delta half written": (("disk", "host"), lambda mp: _cut_delta(mp, 6) or _at("never:0")),
    "delta written, server state not": (("disk", "host"), lambda mp: _at("rows_saved:6")),
    "checkpoint committed": (("disk", "host"), lambda mp: _at("checkpoint_saved:4")),
}


@pytest.mark.parametrize("store, position", [  # the host store's rows have no file written
    # in a round: its positions after the round and after the commit are test_client_store's;
    # its cut delta is the disk store's (deltas.write_delta, one for both)
    pytest.param(s, p, marks=SLOW) if s == "host" and p in ("after the round's rows",
                                                            "checkpoint committed",
                                                            "delta half written")
    else (s, p) for p, (stores, _) in KILLS.items() for s in stores])
def test_the_kill_matrix(tmp_path, monkeypatch, uninterrupted, store, position):
    with monkeypatch.context() as patches:
        fault = KILLS[position][1](patches)
        with pytest.raises(Killed):
            planned_run(_config(store), str(tmp_path), fault=fault, **QUIET)
    assert not [n for n in os.listdir(tmp_path / "checkpoints") if "tmp" in n]
    planned_run(_config(store), str(tmp_path), **QUIET)
    assert without_timing(rows(tmp_path)) == uninterrupted
    assert not [n for n in os.listdir(tmp_path / "client_rows") if "tmp" in n]


def test_a_kill_while_restoring_then_rerun(tmp_path, monkeypatch, uninterrupted):
    """Killed in round 5, then killed again while the resume repairs the rows."""
    with pytest.raises(Killed):
        planned_run(_config("disk"), str(tmp_path), fault=_at("metrics_written:5"), **QUIET)
    with monkeypatch.context() as patches:
        calls = []
        original = client_store.DiskStore._write_flat

        def dying(self, ids, flat):
            calls.append(len(ids))
            original(self, ids[:1], flat[:1])
            raise Killed("restore")

        patches.setattr(client_store.DiskStore, "_write_flat", dying)
        with pytest.raises(Killed):
            planned_run(_config("disk"), str(tmp_path), **QUIET)
        assert calls  # the round-5 rows were being put back
    planned_run(_config("disk"), str(tmp_path), **QUIET)
    assert without_timing(rows(tmp_path)) == uninterrupted


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    """{store: a workdir killed after round 5's rows were written (checkpoints 2 and 4)}."""
    out = {}
    for store in ("disk", "host"):
        workdir = tmp_path_factory.mktemp(f"killed-{store}")
        with pytest.raises(Killed):
            planned_run(_config(store), str(workdir), fault=_at("metrics_written:5"),
                           **QUIET)
        out[store] = workdir
    return out


def _damage(path, how):
    if how == "delete":
        (shutil.rmtree if os.path.isdir(path) else os.remove)(path)
    else:
        with open(path, "r+b") as f:
            f.truncate(0 if how == "empty" else max(1, os.path.getsize(path) // 2))


def _a_row_chunk(folder):
    return sorted(n for n in os.listdir(folder) if not n.startswith("."))[0]


DAMAGE = [  # (store, file under client_rows/, how, the file a refusal names or None)
    # the newest checkpoint's delta damaged: the one before (round 2) is whole, the run falls
    # back to it, naming the file
    ("disk", "delta-4.npy", "truncate", None),
    *[pytest.param("disk", "delta-4.npy", how, None, marks=SLOW)
      for how in ("delete", "empty")],
    ("disk", "delta-2.npy", "delete", "delta-2.npy"),
    ("disk", "", "delete", "delta-2.npy"),  # the whole client_rows/
    *[("disk", "store/rows/<chunk>", how, None) for how in ("delete", "truncate")],
    pytest.param("disk", "store/rows/<chunk>", "empty", None, marks=SLOW),
    ("disk", "store/rows/.zarray", "empty", None),
    pytest.param("disk", "store/rows/.zarray", "delete", None, marks=SLOW),
    ("disk", "store/present/0", "truncate", None),
    pytest.param("disk", "store/present/0", "delete", None, marks=SLOW),
    ("disk", "store/present/.zarray", "empty", None),
    ("disk", "store", "delete", None),
    ("host", "delta-4.npy", "empty", None),
    *[pytest.param("host", "delta-4.npy", how, None, marks=SLOW)
      for how in ("delete", "truncate")],
    ("host", "", "delete", "delta-2.npy"),
]


@pytest.mark.parametrize("store, name, how, refused", DAMAGE)
def test_the_damage_matrix(tmp_path, killed, uninterrupted, store, name, how, refused):
    workdir = tmp_path / "run"
    shutil.copytree(killed[store], workdir)
    folder = workdir / "client_rows"
    if "<chunk>" in name:
        name = name.replace("<chunk>", _a_row_chunk(folder / "store" / "rows"))
    _damage(str(folder / name), how)
    if refused is None:
        logged = []
        planned_run(_config(store), str(workdir), log=logged.append, progress=False)
        assert without_timing(rows(workdir)) == uninterrupted
        if name.startswith("delta-"):
            assert any("checkpoint after round 4 is not usable" in line and name in line
                       for line in logged), logged
        return
    before = sorted(os.listdir(workdir / "checkpoints"))
    with pytest.raises(ValueError, match=refused) as err:
        planned_run(_config(store), str(workdir), **QUIET)
    assert "\n" not in str(err.value)
    assert sorted(os.listdir(workdir / "checkpoints")) == before  # nothing moved


@pytest.mark.parametrize("store", ["disk", "host"])
def test_a_fallback_to_an_older_checkpoint_restores_its_rows(tmp_path, killed, uninterrupted,
                                                             store):
    """The newest checkpoint (round 4) unreadable: the run resumes from round 2 with the rows
    as they were after round 2 (not those of rounds 3-5 the store holds), and its rounds 3-6
    are an uninterrupted run's."""
    workdir = tmp_path / "run"
    shutil.copytree(killed[store], workdir)
    for folder, _, files in os.walk(workdir / "checkpoints" / "4"):
        for name in files:
            _damage(os.path.join(folder, name), "empty")
    logged = []
    planned_run(_config(store), str(workdir), log=logged.append, progress=False)
    assert "resumed from the checkpoint after round 2" in logged
    assert without_timing(rows(workdir)) == uninterrupted
    assert sorted(deltas.delta_rounds(str(workdir / "client_rows"))) == [2, 4, 6]


@pytest.mark.parametrize("store", [pytest.param("host", marks=SLOW), "disk"])
def test_bfloat16_rows_resume(tmp_path, store):
    """bfloat16 client state: deltas keep its bits (np.savez wrote it as raw void, which no
    rerun could read); a run extended from 4 to 6 rounds equals an uninterrupted one."""
    config = _config(store, client_state_dtype="bfloat16")
    planned_run({**config, "rounds": 4}, str(tmp_path / "run"), **QUIET)
    planned_run(config, str(tmp_path / "run"), **QUIET)
    planned_run(config, str(tmp_path / "straight"), **QUIET)
    assert without_timing(rows(tmp_path / "run")) == without_timing(rows(tmp_path / "straight"))
    ids, held = deltas.read_delta(str(tmp_path / "run" / "client_rows"), "delta-4.npy",
                                        "bfloat16")
    assert held.dtype.name == "bfloat16" and ids.size


def test_temporaries_of_cut_writes_are_not_deltas(tmp_path):
    """A kill or a full disk during a delta write leaves a temporary file: never taken for a
    delta, removed when the store is attached."""
    for name in (".delta-6.npy.tmp9", "delta-2.npy"):
        (tmp_path / name).write_bytes(b"x")
    assert deltas.delta_rounds(str(tmp_path)) == [2]
    deltas.remove_temporaries(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["delta-2.npy"]


def test_a_failed_row_write_is_a_failed_write(tmp_path, monkeypatch):
    """Disk full while the disk store writes a round's rows: WriteError naming the array (exit
    4, as every other failed write), not tensorstore's raw message as bad input (exit 2)."""
    from fedinit_jax.experiment.workdir import WriteError

    class Full:
        def result(self):
            raise ValueError("UNKNOWN: Error writing local file \"/x/rows/3.0\": [OS error: "
                             "No space left on device] [tensorstore_spec='...'] "
                             "[os_error_code=28]")

    def full_write(self, ids, flat):
        client_store.disk._written(Full(), os.path.join(self.path, "rows"))

    monkeypatch.setattr(client_store.DiskStore, "_write_rows", full_write)
    with pytest.raises(WriteError, match=r"no space left on device writing .*client_rows"):
        planned_run(_config("disk"), str(tmp_path), **QUIET)


@pytest.mark.parametrize("store", ["host", pytest.param("disk", marks=SLOW)])
@pytest.mark.parametrize("kill", [None, "rows_saved:4", "checkpoint_committed:4"])
def test_a_compacting_record_resumes_exactly_and_keeps_only_what_checkpoints_name(
        tmp_path, monkeypatch, uninterrupted, store, kill):
    """COMPACT_AFTER 0.5 (a snapshot at every checkpoint after the first) and one checkpoint
    kept: killed after checkpoint 4's snapshot but before its server state, or after its
    commit but before the deltas no checkpoint names are deleted, the rerun equals an
    uninterrupted run, and the record ends as the last checkpoint's snapshot alone."""
    monkeypatch.setattr(deltas, "COMPACT_AFTER", 0.5)
    config = _config(store, keep_checkpoints=1)
    folder = str(tmp_path / "client_rows")
    if kill:
        with pytest.raises(Killed):
            planned_run(config, str(tmp_path), fault=_at(kill), **QUIET)
        # before the commit the snapshot is not named yet; after it, delta-2 is left over
        assert deltas.delta_rounds(folder) == [2, 4]
    planned_run(config, str(tmp_path), **QUIET)
    assert without_timing(rows(tmp_path)) == uninterrupted
    assert deltas.delta_rounds(folder) == [6]
    manifest = Checkpointer(str(tmp_path), keep=1).client_rows(6)
    assert [entry["file"] for entry in manifest["deltas"]] == ["delta-6.npy"]
    snapshot = np.load(os.path.join(folder, "delta-6.npy"))  # every row held
    assert snapshot["id"].size == len(set(snapshot["id"].tolist())) == manifest[
        "rows_held"] > 4
