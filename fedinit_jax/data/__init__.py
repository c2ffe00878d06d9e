"""Data: TFDS loading (no TensorFlow), partitioners, heterogeneity noises, client shards,
per-round inputs and on-device augmentation. Everything but augmentation is host numpy."""
from fedinit_jax.data.augment import augment, normalize
from fedinit_jax.data.embedded import load_digits
from fedinit_jax.data.participation import (
    BERNOULLI_DRAWS,
    MIN_NONEMPTY,
    PARTICIPATION_MODES,
    bernoulli_bound,
    expected_clients,
    nonempty_probability,
    pad,
    round_rng,
    sample_bernoulli,
    sample_clients,
    spread,
)
from fedinit_jax.data.partition import dirichlet, iid, pathological, summarize
from fedinit_jax.data.shards import ClientShards, build_shards, round_batches, steps_per_epoch
from fedinit_jax.data.tfds_source import load

__all__ = ["augment", "normalize", "load_digits", "dirichlet", "iid", "pathological",
           "summarize", "ClientShards", "build_shards", "round_batches",
           "round_rng", "expected_clients", "sample_clients", "steps_per_epoch", "load", "PARTICIPATION_MODES",
           "BERNOULLI_DRAWS",
           "bernoulli_bound", "pad", "sample_bernoulli", "MIN_NONEMPTY", "nonempty_probability",
           "spread"]
