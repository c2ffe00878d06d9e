"""The schema of a recorded config: one version number, and how a config recorded under an
older version reads today.

config.json, and the config a checkpoint records, hold `schema_version` (VERSION when
written by this code). A recorded config is read through `upgrade`, which returns it in
today's form with every value unchanged, so a run resumes, a sweep lists it, and a report
compares it as when it was written:

    1 (no schema_version)  fields added while it was written are missing: they read as the
                           value that means "as before" (ADDED_IN_1); the image family's
                           fields are top-level; a synthetic config written before families
                           had fields of their own holds Synthetic(alpha, beta) in
                           dirichlet_alpha and category_noise.
    2                      the image family's fields under task.images (tasks.IMAGES).
"""
from fedinit_jax.experiment import tasks

__all__ = ["VERSION", "FIELD", "ADDED_IN_1", "IMAGE_FIELDS_1", "upgrade", "stamp", "as_version_1"]

VERSION = 2
FIELD = "schema_version"

# fields added while version 1 was written, at the value that means "as before": a config
# recorded without one ran as this value
ADDED_IN_1 = {"client_state_dtype": "float32", "participation_mode": "fixed",
              "participation_draw": "per_client", "local_steps": 0, "aggregation": "uniform",
              "client_store": "auto", "first_visit": "init", "ri_offset": "model"}
# version 1's top-level fields of the image family (task.images since version 2)
IMAGE_FIELDS_1 = ("partition", "dirichlet_alpha", "classes_per_client", "client_noise",
                  "category_noise", "augment")


def upgrade(recorded) -> dict:
    """A recorded config in today's form (schema_version VERSION), its values unchanged.

    Args:
      recorded: a config as config.json or a checkpoint recorded it (any version).
    Returns:
      A new dict of the current schema (not yet resolved: experiment.resolve does that).
    Raises:
      ValueError: it was written by a newer schema than this code reads.
    """
    config = dict(recorded)
    version = config.get(FIELD, 1)
    if not isinstance(version, int) or not 1 <= version <= VERSION:
        kind = "" if isinstance(version, int) else f" (a {type(version).__name__}, not an int)"
        raise ValueError(f"{FIELD}={version!r}{kind}: this fedinit_jax reads configs of "
                         f"schema 1..{VERSION}" + (" (a newer version wrote it?)"
                                                   if isinstance(version, int) else ""))
    if version < 2:
        config = _from_1(config)
    config[FIELD] = VERSION
    return config


def stamp(config) -> dict:
    """A config of today's form (a ConfigDict's dict, or already recorded) with its
    schema_version: upgraded when it holds an older one.

    Raises:
      ValueError: it holds a field of schema 1's form (a top-level image field) without a
        schema_version: a config.json of schema 1 read as if it were today's, whose split
        would silently be the default one (read it with experiment.saved_config).
    """
    if FIELD in config:
        return upgrade(config)
    old = [f for f in IMAGE_FIELDS_1 if f in config]
    if old:
        raise ValueError(f"config.{old[0]}: a field of schema 1 (today: config.task."
                         f"{tasks.IMAGES}.{old[0]}); a config.json written before is read "
                         "with experiment.saved_config(path), or schema.upgrade(config)")
    return {**config, FIELD: VERSION}


def as_version_1(config) -> dict:
    """A resolved config as schema 1 recorded it (its image fields top-level, at their
    defaults for another family, no schema_version): what a digest written then (a sweep's
    status file) was taken of.

    Args:
      config: a resolved config of today's schema.
    Returns:
      A new dict in schema 1's form.
    """
    old = {k: v for k, v in config.items() if k != FIELD}
    task = dict(old.get("task") or {})
    images = {**tasks.namespace_family(tasks.IMAGES).fields, **task.pop(tasks.IMAGES, {})}
    old.update(images, task=task)
    return old


def _from_1(config: dict) -> dict:
    config = {**ADDED_IN_1, **config}
    images = {f: config.pop(f) for f in IMAGE_FIELDS_1 if f in config}
    task = dict(config.get("task") or {})
    if ("task" not in config and config.get("dataset") == "synthetic"
            and {"dirichlet_alpha", "category_noise"} <= images.keys()):
        task["synthetic"] = {"alpha": images.pop("dirichlet_alpha"),
                             "beta": images.pop("category_noise")}
    if images:
        task[tasks.IMAGES] = images
    if "dataset" in config:
        config["task"] = task
    return config
