"""Resuming a run: which rounds a workdir holds and for which config, the newest good
checkpoint, and the metrics rows up to it.

A workdir holds one config's run (any field but `rounds` differing is refused); rows already
written are never dropped for want of a checkpoint; past a damaged checkpoint the previous one
is used and the rounds after it recomputed bit for bit (simulation.py's module doc).
"""
import os

from fedinit_jax import experiment
from fedinit_jax.client_store import deltas
from fedinit_jax.experiment import checkpoint as checkpoint_lib
from fedinit_jax.experiment import record as record_lib
from fedinit_jax.experiment import workdir as workdir_lib
from fedinit_jax.experiment.workdir import WorkdirError, read_metrics

__all__ = ["RESUMABLE_CHANGES", "EVALUATION_ONLY", "prepare_workdir", "rounds_done",
           "finished_rounds", "rows_up_to", "make_workdir", "resume", "recorded_store"]

RESUMABLE_CHANGES = ("rounds",)  # fields that may differ when a run is resumed (extended)
EVALUATION_ONLY = checkpoint_lib.EVALUATION_ONLY  # besides test_*: evaluation rounds


def prepare_workdir(workdir: str, config: dict) -> None:
    """Refuse a workdir of another config, or one whose rounds exceed config.rounds; then
    write config.json (resolved). The caller holds the workdir's lock."""
    config = experiment.resolve(config)
    path = os.path.join(workdir, "config.json")
    done = rounds_done(workdir, config)
    if done:
        if config["rounds"] < done:
            raise WorkdirError(f"config.rounds={config['rounds']} is below the {done} rounds "
                               f"already done in {workdir!r}; a run is extended, never cut: "
                               f"use --config.rounds>={done} or a new workdir")
    workdir_lib.write_json(path, config)


def rounds_done(workdir: str, config: dict) -> int:
    """Rounds a workdir already holds for `config` (0 if it holds none). WorkdirError when it
    holds rounds of another config (any field but `rounds`) by its config.json or by the
    config its newest checkpoint records, when it holds rounds whose config is unknown (no
    config.json, no config in the checkpoint), or damaged metrics. Configs are compared
    resolved (experiment.resolve: a default written out equals the default left None)."""
    config = experiment.resolve(config)
    path = os.path.join(workdir, "config.json")
    saved = [(path, experiment.saved_config(path))] if os.path.exists(path) else []
    done = max([0] + [r["round"] for r in read_metrics(workdir)[-1:]]
               + checkpoint_lib.checkpoint_rounds(workdir))
    if not done:  # a workdir with no finished round holds no results: it takes the new
        return 0  # config (e.g. the corrected command after a run that failed in round 1)
    recorded = checkpoint_lib.saved_config(workdir)
    if recorded is not None:
        saved.append(("its newest checkpoint",
                      experiment.read_recorded(recorded)))
    if not saved:
        raise WorkdirError(f"workdir={workdir!r} holds {done} rounds but no config.json, and "
                           "no checkpoint records its config: which config made them is "
                           "unknown; restore config.json, or use a new workdir")
    new = experiment.flat_fields(config)
    for source, old in saved:
        old = experiment.flat_fields(old)
        diff = sorted(k for k in set(old) | set(new)
                      if k not in RESUMABLE_CHANGES and old.get(k) != new.get(k))
        if diff:
            details = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in diff)
            raise WorkdirError(f"workdir={workdir!r} holds a run of a different config "
                               f"({details}; by {source}); use a new workdir or the same "
                               "config to resume")
    return done


def finished_rounds(workdir: str, config: dict) -> int:
    """The rounds that rerunning `config` in workdir would not recompute: all of them when
    its metrics cover config.rounds (finished, whatever its checkpoints hold: _resume), else
    its newest checkpoint's round. WorkdirError, as the binary's, when the workdir holds
    another config, damaged metrics, or a checkpoint whose rounds metrics.jsonl lacks (so a
    sweep never calls "done" a cell the binary would refuse)."""
    rounds_done(workdir, config)
    written = len(read_metrics(workdir))
    if written >= config["rounds"]:
        return written
    start = max([0] + checkpoint_lib.checkpoint_rounds(workdir))
    rows_up_to(workdir, start)
    return start


def rows_up_to(workdir, start):
    """Metrics rows 1..start; WorkdirError when any of them is missing (never a silent hole)."""
    rows = read_metrics(workdir, upto_round=start)
    if len(rows) < start:
        raise WorkdirError(
            f"{os.path.join(workdir, workdir_lib.METRICS)} holds rounds 1..{len(rows)} but "
            f"the checkpoint is after round {start}: rounds {len(rows) + 1}..{start} are "
            "missing; restore the file, or move checkpoints/ away to recompute every round")
    return rows


def make_workdir(workdir: str) -> None:
    """Create the workdir and prove it is writable (ValueError naming it when not)."""
    try:
        os.makedirs(workdir, exist_ok=True)
        probe = os.path.join(workdir, f".write_test_{os.getpid()}")
        with open(probe, "w") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as err:
        raise WorkdirError(f"workdir={workdir!r} is not writable: {err.strerror}") from None


def resume(checkpointer, state, config, workdir, log, rows_folder=None):
    """(rounds done, state, metrics rows 1..rounds done, client manifest) from the newest
    checkpoint that proves whole.

    A checkpoint is used when its metadata matches its record, the metrics rows up to its
    round are the rows it recorded, its state matches its digest and, with a client store
    (rows_folder: its record's folder), every delta its manifest names is whole
    (record.py, deltas.verify). Past one that is not, the previous one is used, the
    rounds after it recomputed (bit for bit: simulation.py's module doc) and the passed-over
    checkpoints moved aside, each named with why. Rows already written are never dropped for
    want of a checkpoint: a run whose rows cover config.rounds, as its newest readable record
    vouches for them, is finished (no state is needed), and an unfinished run that no
    checkpoint can resume is refused, nothing moved, rather than started over."""
    written = read_metrics(workdir)
    if len(written) >= config["rounds"] and _vouched_for(checkpointer, written):
        return len(written), state, written, None
    damaged, start, manifest = [], 0, None
    for step in checkpointer.steps():
        try:
            restored, manifest = _verified(checkpointer, step, state, written, workdir,
                                           rows_folder)
        except record_lib.Damaged as err:
            damaged.append((step, str(err)))
            continue
        start, state = step, restored
        break
    if damaged and not start:  # rows were written before any checkpoint: never start over
        steps_of = {}
        for step, text in damaged:
            steps_of.setdefault(text, []).append(str(step))
        why = "; ".join(f"{text} (checkpoint{'s' * (len(steps) > 1)} after round"
                        f"{'s' * (len(steps) > 1)} {', '.join(steps)})"
                        for text, steps in steps_of.items())
        raise WorkdirError(
            f"{workdir!r} holds {len(written)} rounds ({workdir_lib.METRICS}) but no "
            f"checkpoint can resume the run ({why}). Nothing was changed: restore what is named, "
            f"or move {workdir_lib.METRICS} and checkpoints/ aside and rerun to recompute "
            "every round")
    for step, why in damaged:
        checkpointer.set_aside(step, why)
    if start:
        log(f"resumed from the checkpoint after round {start}")
    rows = written[:start]
    if rows and start < config["rounds"] and start % config["eval_every"]:
        # the evaluation taken because `start` was the last round of a shorter run: an
        # uninterrupted run of config.rounds has none there
        rows[-1] = checkpoint_lib.trimmed(rows[-1])
    return start, state, rows, manifest


def _vouched_for(checkpointer, written) -> bool:
    """Whether the newest checkpoint whose record reads finds the rows it covers as they were
    written (True when no checkpoint records them: the rows are all there is)."""
    for step in checkpointer.steps():
        try:
            record = checkpointer.metadata(step)["record"]
        except record_lib.Damaged:
            continue
        return record_lib.first_row_differing(record, written) is None
    return True


def _verified(checkpointer, step, like, written, workdir, rows_folder):
    """(state, client manifest) of the checkpoint after `step`, every part of it checked
    against its record; record.Damaged saying what is not as written."""
    metadata = checkpointer.metadata(step)
    record = metadata["record"]
    bad = record_lib.first_row_differing(record, written)
    if bad is not None:
        path = os.path.join(workdir, workdir_lib.METRICS)
        raise record_lib.Damaged(
            f"{path} line {bad} " + ("is missing" if bad > len(written) else
                                     "differs from the row the run wrote, by this "
                                     "checkpoint's record"))
    state = checkpointer.load(step, like, record)
    manifest = metadata.get("client_rows")
    if rows_folder is not None:
        if manifest is None:
            raise record_lib.Damaged(f"the checkpoint after round {step} has no manifest of "
                                     "the clients' rows")
        try:
            deltas.verify(rows_folder, manifest, step)
        except deltas.StoreDamaged as err:
            raise record_lib.Damaged(str(err).split(": the checkpoint after")[0]) from None
    return state, manifest


def recorded_store(workdir):
    """The client store the run in workdir used: run_info.json's, or when that file is
    damaged, the one the newest whole checkpoint records; None for a new workdir."""
    path = os.path.join(workdir, "run_info.json")
    if os.path.exists(path):
        try:
            return workdir_lib.read_json(path).get("client_store")
        except WorkdirError:
            pass  # the checkpoints' records say it too
    return checkpoint_lib.newest_metadata(workdir).get("record", {}).get("client_store")
