"""Checkpoints of the whole federation with orbax, and the round they were taken after.

A checkpoint holds the FedState (global model, every client's last local model and
algorithm state, server optimizer state, beta, round). Nothing else is needed for an exact
resume: every round's randomness (client sample, batch order, PRNG key) is derived from
(seed, round) and the lr schedule from the round. Orbax writes each step into a temporary
directory and renames it when complete, so a kill mid-write leaves the previous checkpoint.
"""
import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from fedinit_jax.experiment.workdir import WorkdirError

__all__ = ["Checkpointer", "checkpoint_rounds", "saved_config"]

# FedState fields added after checkpoints existed, saved only when they hold something, so that
# a checkpoint written before them restores (and one written now restores with an older layout)
_ADDED_WHEN_USED = ("ri_momentum",)


def _on_disk(state):
    """The dict of state's fields as a checkpoint holds them: an added field left out while it
    is empty (())."""
    return {k: v for k, v in state._asdict().items()
            if not (k in _ADDED_WHEN_USED and isinstance(v, tuple) and not v)}


class Checkpointer:
    """Save / restore FedStates under <workdir>/checkpoints, keeping the newest `keep`.

    A checkpoint that cannot be read (truncated, corrupted) is reported, moved aside to
    checkpoints/corrupt-<round>, and the previous one is used instead; a whole checkpoint of
    another state layout is left in place and raises WorkdirError.
    """

    def __init__(self, workdir: str, keep: int = 2, log=print):
        self._directory = os.path.abspath(os.path.join(workdir, "checkpoints"))
        self.directory = self._directory
        self._keep = keep
        self._log = log
        self._manager = self._open()

    def _open(self):
        # cleanup_tmp_directories: a write cut by a kill leaves <round>.orbax-checkpoint-tmp
        options = ocp.CheckpointManagerOptions(max_to_keep=self._keep, create=True,
                                               enable_async_checkpointing=False,
                                               cleanup_tmp_directories=True)
        return ocp.CheckpointManager(self._directory, options=options)

    def latest_round(self):
        """Rounds completed by the newest checkpoint, or None."""
        return self._manager.latest_step()

    def save(self, rounds_done: int, state, config=None, client_rows=None) -> None:
        """The state after `rounds_done` rounds. `config` (the run's, JSON) and `client_rows`
        (a client store's manifest: fedinit_jax/row_deltas.py) go into the step's metadata,
        committed with the state: what identifies the run and its clients' rows travels
        with it (saved_config, client_rows)."""
        metadata = {k: v for k, v in (("config", config), ("client_rows", client_rows))
                    if v is not None}
        self._manager.save(rounds_done, args=ocp.args.StandardSave(_on_disk(state)), force=True,
                           custom_metadata=metadata or None)
        self._manager.wait_until_finished()

    def client_rows(self, rounds_done: int):
        """The client store's manifest saved with the checkpoint after `rounds_done`, or None
        (a run without a store, or a checkpoint saved before manifests existed)."""
        try:
            metadata = self._manager.metadata(rounds_done).custom_metadata or {}
        except Exception:  # noqa: BLE001 - an unreadable step metadata file: no manifest
            return None
        return metadata.get("client_rows")

    def manifests(self) -> list:
        """The client store's manifest of every kept checkpoint (None where a checkpoint has
        none): what row_deltas.remove_unreferenced keeps."""
        return [self.client_rows(step) for step in self._manager.all_steps()]

    def restore(self, like, keep_damaged=False):
        """(rounds done, state) of the newest readable checkpoint, or (0, None) if none is.

        The state is shaped like the pytree `like` (e.g. a fresh init state) and returned
        uncommitted (like freshly created arrays), so the round may place it on whatever
        devices it shards the clients over. An unreadable checkpoint is moved aside to
        corrupt-<round>, unless keep_damaged: then nothing is moved and `self.damaged` lists
        the unreadable rounds (the caller decides, resume.resume).
        """
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, _on_disk(like))
        self.damaged = []
        for step in sorted(self._manager.all_steps(), reverse=True):
            try:
                restored = self._manager.restore(step, args=ocp.args.StandardRestore(abstract))
                restored = jax.tree.map(lambda x: jnp.asarray(np.asarray(x)), restored)
            except Exception as err:  # orbax/tensorstore raise many kinds on damaged files
                if "tree structures do not match" in str(err):  # whole, but another layout
                    raise WorkdirError(
                        f"{os.path.join(self._directory, str(step))} holds a state of another "
                        "layout (another algorithm, or one saved by an earlier fedinit_jax "
                        "whose FedState fields differ); nothing was moved: resume it with the "
                        "version that wrote it, or use a new workdir") from None
                text = str(err).splitlines()[0].split(" See full TensorStore details")[0]
                why = f"{type(err).__name__}: {text[:200]}"
                self.damaged.append((step, why))
                if not keep_damaged:
                    self.set_aside(step, why)
                continue
            if not all(bool(np.all(np.isfinite(np.asarray(x))))
                       for x in jax.tree.leaves(restored) if np.issubdtype(x.dtype, np.floating)):
                self._log(f"checkpoint after round {step} holds non-finite values; skipped")
                continue
            return step, like._replace(**restored)
        return 0, None

    def set_aside(self, step: int, why: str) -> None:
        """Move the unreadable checkpoint after round `step` to checkpoints/corrupt-<step>."""
        aside = os.path.join(self._directory, f"corrupt-{step}")
        self._log(f"checkpoint after round {step} is unreadable ({why}); moved to {aside}, "
                  "trying the previous one")
        self._manager.close()
        shutil.rmtree(aside, ignore_errors=True)
        os.replace(os.path.join(self._directory, str(step)), aside)
        self._manager = self._open()

    def close(self):
        self._manager.close()


def checkpoint_rounds(workdir: str) -> list[int]:
    """The rounds of the checkpoints under workdir's checkpoints/ (read or not)."""
    folder = os.path.join(workdir, "checkpoints")
    return [int(d) for d in os.listdir(folder) if d.isdigit()] if os.path.isdir(folder) else []


def saved_config(workdir: str):
    """The config recorded in the newest checkpoint of workdir's checkpoints/ (a dict), or
    None when there is no checkpoint or it records none (written before configs were).

    Read from the step's metadata file (orbax's _CHECKPOINT_METADATA JSON, its
    custom_metadata) rather than through a CheckpointManager, whose creation is a collective
    of every process of a multi-process run: this is asked by process 0 alone."""
    steps = checkpoint_rounds(workdir)
    if not steps:
        return None
    try:
        with open(os.path.join(workdir, "checkpoints", str(max(steps)),
                               "_CHECKPOINT_METADATA")) as f:
            metadata = json.load(f).get("custom_metadata") or {}
    except (OSError, ValueError, AttributeError):  # a damaged step: restore() reports it
        return None
    return metadata.get("config")
