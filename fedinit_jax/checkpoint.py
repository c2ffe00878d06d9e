"""Checkpoints of the whole federation with orbax, and the round they were taken after.

A checkpoint holds the FedState (global model, every client's last local model and
algorithm state, server optimizer state, beta, round). Nothing else is needed for an exact
resume: every round's randomness (client sample, batch order, PRNG key) is derived from
(seed, round) and the lr schedule from the round. Orbax writes each step into a temporary
directory and renames it when complete, so a kill mid-write leaves the previous checkpoint.
"""
import os

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp


class Checkpointer:
    """Save / restore FedStates under <workdir>/checkpoints, keeping the newest `keep`."""

    def __init__(self, workdir: str, keep: int = 2):
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                               enable_async_checkpointing=False)
        self._manager = ocp.CheckpointManager(
            os.path.abspath(os.path.join(workdir, "checkpoints")), options=options)

    def latest_round(self):
        """Rounds completed by the newest checkpoint, or None."""
        return self._manager.latest_step()

    def save(self, rounds_done: int, state) -> None:
        self._manager.save(rounds_done, args=ocp.args.StandardSave(state), force=True)
        self._manager.wait_until_finished()

    def restore(self, like):
        """The newest checkpoint, shaped like the pytree `like` (e.g. a fresh init state).

        Returned uncommitted (like freshly created arrays), so the round may place it on
        whatever devices it shards the clients over.
        """
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like)
        restored = self._manager.restore(self.latest_round(),
                                         args=ocp.args.StandardRestore(abstract))
        return jax.tree.map(lambda x: jnp.asarray(np.asarray(x)), restored)

    def close(self):
        self._manager.close()
