"""The schema of a recorded config: one version number.

config.json, and the config a checkpoint records, hold `schema_version` (VERSION when written
by this code). A recorded config of another version is refused in one line naming the
version: its fields or its checkpoints' state layout differ from today's, and this code keeps
no conversion (the version's fedinit_jax reads it).

    3  the image family's fields under task.images (tasks.IMAGES); a checkpoint's FedState
       holds ri_rows and ri_state (the offset rule's rows and server state).
"""
__all__ = ["VERSION", "FIELD", "check", "stamp"]

VERSION = 3
FIELD = "schema_version"


def check(recorded) -> dict:
    """A recorded config, when it is of today's schema.

    Args:
      recorded: a config as config.json or a checkpoint recorded it.
    Returns:
      A new dict with its values (not yet resolved: experiment.resolve does that).
    Raises:
      ValueError: it records no schema_version, or another one.
    """
    version = recorded.get(FIELD)
    if version != VERSION:
        raise ValueError(f"{FIELD}={version!r}: this fedinit_jax reads configs of schema "
                         f"{VERSION} only (a run recorded under another is read by the "
                         "fedinit_jax that wrote it)")
    return dict(recorded)


def stamp(config) -> dict:
    """A config of today's form (a ConfigDict's dict, or already recorded) with its
    schema_version.

    Raises:
      ValueError: it records another schema_version (check).
    """
    return check(config) if FIELD in config else {**config, FIELD: VERSION}
