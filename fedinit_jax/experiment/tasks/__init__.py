"""Task registry: how a config's `dataset` becomes a federated task.

A Family knows how to build its Task from a config (load the data, split it into clients,
make a round's batches, its loss, its evaluator and its default model), what it can refuse
before loading anything, and the abstract shapes of a round (for benchmarks/plan.py). The
binaries look the family up here instead of branching on dataset names:

    REGISTRY = {"shakespeare": shakespeare.FAMILY,   # any other name: images.FAMILY
                "synthetic": synthetic.FAMILY,      # (digits, or a TFDS image dataset)
                "synthetic_shared": synthetic_shared.FAMILY}

A new dataset family is one module and one `register(name, FAMILY)` call
(docs/tasks.md's worked example, which tests/test_tasks.py registers and trains).

A family's own config fields (Synthetic's alpha and beta, the image family's partition and
noises) are `Family.fields` with their defaults; a config holds them under
config.task.<namespace>.<field>, the namespace being the registered dataset name
(`--config.task.synthetic.alpha=0.5`) or "images" for the image family, whatever the image
dataset (`--config.task.images.dirichlet_alpha=0.6`); `own_fields(config)` gives the run's
values.
"""
from fedinit_jax.experiment.tasks import images, shakespeare, synthetic, synthetic_shared
from fedinit_jax.experiment.tasks.family import (
    IMAGES,
    REGISTRY,
    AbstractRound,
    Family,
    Task,
    family,
    field_defaults,
    namespace,
    namespace_family,
    own_fields,
    register,
    register_default,
)

__all__ = ["Task", "AbstractRound", "Family", "REGISTRY", "IMAGES", "register", "family",
           "namespace", "namespace_family", "field_defaults", "own_fields", "images",
           "shakespeare", "synthetic", "synthetic_shared"]

register_default(images.FAMILY)
register("shakespeare", shakespeare.FAMILY)
register("synthetic", synthetic.FAMILY)
register("synthetic_shared", synthetic_shared.FAMILY)
