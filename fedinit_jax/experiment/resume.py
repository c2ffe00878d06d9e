"""Resuming a run: which rounds a workdir holds and for which config, the newest good
checkpoint, and the metrics rows up to it.

A workdir holds one config's run (any field but `rounds` differing is refused); rows already
written are never dropped for want of a checkpoint; past a damaged checkpoint the previous one
is used and the rounds after it recomputed bit for bit (simulation.py's module doc).
"""
import os

from fedinit_jax import experiment
from fedinit_jax.experiment import checkpoint as checkpoint_lib
from fedinit_jax.experiment import workdir as workdir_lib
from fedinit_jax.experiment.workdir import WorkdirError, read_metrics

__all__ = ["RESUMABLE_CHANGES", "EVALUATION_ONLY", "prepare_workdir", "rounds_done",
           "finished_rounds", "rows_up_to", "make_workdir", "resume", "recorded_store"]

RESUMABLE_CHANGES = ("rounds",)  # fields that may differ when a run is resumed (extended)
EVALUATION_ONLY = ("eval_seconds", "divergence_all")  # besides test_*: evaluation rounds


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


def resume(checkpointer, state, config, workdir, log):
    """(rounds done, state, metrics rows 1..rounds done) from the newest good checkpoint.

    Rows already written are never dropped for want of a checkpoint: a run whose rows cover
    config.rounds is finished whatever its checkpoints hold (no state is needed), and an
    unfinished run whose every checkpoint is unreadable is refused, nothing moved, rather
    than started over. Past a damaged checkpoint the previous one is used, and the rounds
    after it recomputed (bit for bit: module doc)."""
    written = read_metrics(workdir)
    if len(written) >= config["rounds"]:  # finished: the rows are the results
        return len(written), state, written
    start, restored = checkpointer.restore(state, keep_damaged=True)
    if checkpointer.damaged and not start and written:
        rounds = ", ".join(f"round {step}" for step, _ in checkpointer.damaged)
        why = checkpointer.damaged[0][1]
        raise WorkdirError(
            f"{workdir!r}: the checkpoint after {rounds} is unreadable ({why}) and no other is "
            f"left, but {workdir_lib.METRICS} holds rounds 1..{len(written)}: resuming would start "
            "over and rewrite them. Nothing was changed; to recompute every round, move "
            f"{workdir_lib.METRICS} and checkpoints/ aside and rerun")
    for step, why in checkpointer.damaged:
        checkpointer.set_aside(step, why)
    if start:
        state = restored
        log(f"resumed from the checkpoint after round {start}")
    rows = rows_up_to(workdir, start)
    if rows and start < config["rounds"] and start % config["eval_every"]:
        # the evaluation taken because `start` was the last round of a shorter run: an
        # uninterrupted run of config.rounds has none there
        rows[-1] = {k: v for k, v in rows[-1].items()
                    if not k.startswith("test_") and k not in EVALUATION_ONLY}
    return start, state, rows


def recorded_store(workdir):
    """The client store a run in workdir used (run_info.json; before the field existed: the
    device tables), or None for a new workdir."""
    path = os.path.join(workdir, "run_info.json")
    if not os.path.exists(path):
        return None
    return workdir_lib.read_json(path).get("client_store", "device")
