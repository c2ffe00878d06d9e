"""Checkpoints of the whole federation with orbax, and the round they were taken after.

A checkpoint holds the FedState (global model, every client's last local model and
algorithm state, server optimizer state, beta, round). Nothing else is needed for an exact
resume: every round's randomness (client sample, batch order, PRNG key) is derived from
(seed, round) and the lr schedule from the round. Orbax writes each step into a temporary
directory and renames it when complete, so a kill mid-write leaves the previous checkpoint.
Each step's metadata carries the run's config, the client store's manifest and the record
(record.py) that proves the checkpoint whole when it is restored.
"""
import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from fedinit_jax.experiment import record as record_lib
from fedinit_jax.experiment.workdir import WorkdirError

__all__ = ["Checkpointer", "checkpoint_rounds", "read_metadata", "newest_metadata",
           "saved_config", "trimmed"]

# fields of an evaluation round only (besides test_*): resume.resume trims them from a row
EVALUATION_ONLY = ("eval_seconds", "divergence_all")


class Checkpointer:
    """Save / restore FedStates under <workdir>/checkpoints, keeping the newest `keep`.

    Each checkpoint carries a record (record.py: digests of its state and of the metrics rows
    up to its round, and of its own metadata) that `record` and `load` verify: a checkpoint
    that cannot be read, or that differs from what was written, raises record.Damaged naming
    the file, and resume.resume falls back to the previous one (set_aside moves it to
    checkpoints/corrupt-<round>); a whole checkpoint of another state layout raises
    WorkdirError and is left in place.
    """

    def __init__(self, workdir: str, keep: int = 2, log=print):
        self.directory = os.path.abspath(os.path.join(workdir, "checkpoints"))
        self._keep = keep
        self._log = log
        self._manager = self._open()

    def _open(self):
        # cleanup_tmp_directories: a write cut by a kill leaves <round>.orbax-checkpoint-tmp
        options = ocp.CheckpointManagerOptions(max_to_keep=self._keep, create=True,
                                               enable_async_checkpointing=False,
                                               cleanup_tmp_directories=True)
        return ocp.CheckpointManager(self.directory, options=options)

    def latest_round(self):
        """Rounds completed by the newest checkpoint, or None."""
        return self._manager.latest_step()

    def steps(self) -> list[int]:
        """The rounds of the checkpoints orbax lists, newest first."""
        return sorted(self._manager.all_steps(), reverse=True)

    def save(self, rounds_done: int, state, config=None, client_rows=None, rows=(),
             client_store=None) -> None:
        """The state after `rounds_done` rounds, with its step metadata: `config` (the run's,
        JSON), `client_rows` (a client store's manifest: fedinit_jax/client_store/deltas.py) and the
        record (record.py) of the state, of `rows` (the metrics rows 1..rounds_done) and of
        `client_store`, committed with the state (saved_config, record)."""
        metadata = {k: v for k, v in (("config", config), ("client_rows", client_rows))
                    if v is not None}
        metadata["record"] = record_lib.make(rounds_done,
                                             record_lib.state_digest(state._asdict()),
                                             list(rows), trimmed, client_store)
        metadata["record"]["sha256"] = record_lib.metadata_digest(metadata)
        self._manager.save(rounds_done, args=ocp.args.StandardSave(state._asdict()), force=True,
                           custom_metadata=metadata)
        self._manager.wait_until_finished()

    def metadata(self, rounds_done: int) -> dict:
        """The verified step metadata of the checkpoint after `rounds_done` (its "record",
        "config" and "client_rows"), or record.Damaged naming the file."""
        return read_metadata(self.directory, rounds_done)

    def client_rows(self, rounds_done: int):
        """The client store's manifest saved with the checkpoint after `rounds_done`, or None
        (a run without a store, or a checkpoint whose metadata is damaged)."""
        try:
            return self.metadata(rounds_done).get("client_rows")
        except record_lib.Damaged:
            return None

    def manifests(self) -> list:
        """The client store's manifest of every kept checkpoint (None where a checkpoint has
        none): what deltas.remove_unreferenced keeps."""
        return [self.client_rows(step) for step in self._manager.all_steps()]

    def load(self, rounds_done: int, like, record: dict):
        """The state of the checkpoint after `rounds_done`, shaped like the pytree `like` (e.g.
        a fresh init state) and returned uncommitted (like freshly created arrays), so the
        round may place it on whatever devices it shards the clients over.

        record.Damaged when it cannot be read, its digest differs from `record["state"]`
        (a flipped bit) or it holds non-finite values; WorkdirError (nothing moved) when it
        is whole but of another state layout."""
        path = os.path.join(self.directory, str(rounds_done))
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like._asdict())
        try:
            restored = self._manager.restore(rounds_done,
                                             args=ocp.args.StandardRestore(abstract))
            restored = jax.tree.map(np.asarray, restored)  # on the host: checked there once
        except Exception as err:  # orbax/tensorstore raise many kinds on damaged files
            if "tree structures do not match" in str(err):  # whole, but another layout
                raise WorkdirError(
                    f"{path} holds a state of another layout (another algorithm, or one "
                    "saved by another fedinit_jax whose FedState fields differ); nothing "
                    "was moved: resume it with the version that wrote it, or use a new "
                    "workdir") from None
            text = str(err).splitlines()[0].split(" See full TensorStore details")[0]
            raise record_lib.Damaged(f"{path} is unreadable ({type(err).__name__}: "
                                     f"{text[:200]})") from None
        if record_lib.state_digest(restored) != record["state"]:
            raise record_lib.Damaged(f"{path}: its state differs from the one written (the "
                                     "digest its record holds does not match)")
        if not all(bool(np.all(np.isfinite(x))) for x in jax.tree.leaves(restored)
                   if np.issubdtype(x.dtype, np.floating)):
            raise record_lib.Damaged(f"{path} holds non-finite values")
        return like._replace(**jax.tree.map(jnp.asarray, restored))

    def set_aside(self, step: int, why: str) -> None:
        """Move the checkpoint after round `step` to checkpoints/corrupt-<step>, saying why."""
        aside = os.path.join(self.directory, f"corrupt-{step}")
        self._log(f"checkpoint after round {step} is not usable ({why}); moved to {aside}")
        self._manager.close()
        shutil.rmtree(aside, ignore_errors=True)
        os.replace(os.path.join(self.directory, str(step)), aside)
        self._manager = self._open()

    def close(self):
        self._manager.close()


def trimmed(row: dict) -> dict:
    """The row without its evaluation fields (test_*, EVALUATION_ONLY): what a resumed run
    keeps of the evaluation taken because its round was the last of a shorter run."""
    return {k: v for k, v in row.items() if not k.startswith("test_") and k not in
            EVALUATION_ONLY}


def checkpoint_rounds(workdir: str) -> list[int]:
    """The rounds of the checkpoints under workdir's checkpoints/ (read or not)."""
    folder = os.path.join(workdir, "checkpoints")
    return [int(d) for d in os.listdir(folder) if d.isdigit()] if os.path.isdir(folder) else []


def read_metadata(directory: str, rounds_done: int) -> dict:
    """The step metadata (custom_metadata) of checkpoint directory/<rounds_done>, verified
    against its record (record.check_metadata); record.Damaged naming the file when it is
    missing, unreadable or not what was written.

    Read from orbax's _CHECKPOINT_METADATA JSON rather than through a CheckpointManager,
    whose creation is a collective of every process of a multi-process run."""
    path = os.path.join(directory, str(rounds_done), "_CHECKPOINT_METADATA")
    try:
        with open(path) as f:
            metadata = json.load(f).get("custom_metadata")
    except (OSError, ValueError, AttributeError) as err:
        raise record_lib.Damaged(f"{path} cannot be read ({type(err).__name__})") from None
    record_lib.check_metadata(metadata, path, rounds_done)
    return metadata


def newest_metadata(workdir: str) -> dict:
    """The verified step metadata of the newest checkpoint of workdir's checkpoints/ whose
    metadata is whole, or {} when there is none (a damaged newest one is passed over:
    resume falls back past it)."""
    directory = os.path.join(workdir, "checkpoints")
    for step in sorted(checkpoint_rounds(workdir), reverse=True):
        try:
            return read_metadata(directory, step)
        except record_lib.Damaged:
            continue
    return {}


def saved_config(workdir: str):
    """The config recorded by the newest whole checkpoint (a dict), or None."""
    return newest_metadata(workdir).get("config")
