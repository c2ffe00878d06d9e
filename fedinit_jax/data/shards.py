"""Client shards and the per-round input.

Shards: dense uint8 images [C, S, H, W, ch] and int32 labels [C, S], built once from a
partition's [C, S] indices (noises applied then).

Round input: for the N sampled clients, K = epochs * (S // B) minibatches each, shaped
[N, K, B, ...]. Every local epoch reshuffles the client's shard; when S is not a multiple of B
the last S % B samples of each epoch's shuffle are dropped (different ones every epoch), so
shapes are static for the whole run and the round compiles once. S < B is an error.
"""
from typing import NamedTuple

import numpy as np

from fedinit_jax.data.noise import apply_noises

__all__ = ["ClientShards", "build_shards", "steps_per_epoch", "cycled_order", "round_batches"]


class ClientShards(NamedTuple):
    images: np.ndarray  # [C, S, H, W, ch] uint8
    labels: np.ndarray  # [C, S] int32


def build_shards(images, labels, indices, *, num_classes: int, client_noise: float = 0.0,
                 category_noise: float = 0.0, seed: int = 0) -> ClientShards:
    """Gather a partition's [C, S] indices into dense shards and apply the noises once."""
    shard_images = images[indices]
    shard_labels = labels[indices].astype(np.int32)
    shard_images = apply_noises(shard_images, shard_labels, client_strength=client_noise,
                                category_strength=category_noise, num_classes=num_classes,
                                seed=seed)
    return ClientShards(shard_images, shard_labels)


def steps_per_epoch(shard_size: int, batch_size: int) -> int:
    """S // B local steps per epoch; ValueError if a shard cannot fill one batch."""
    if batch_size < 1 or batch_size > shard_size:
        raise ValueError(f"batch_size={batch_size} must be in [1, {shard_size}] (the shard size)")
    return shard_size // batch_size


def cycled_order(rng: np.random.Generator, size: int, need: int) -> np.ndarray:
    """`need` indices into `size` examples: fresh permutations one after another, cut at
    `need` (a small client repeats its examples, a large one sees part of them)."""
    return np.concatenate([rng.permutation(size) for _ in range(-(-need // size))])[:need]


def round_batches(shards: ClientShards, client_ids, *, epochs: int, batch_size: int,
                  rng: np.random.Generator, steps: int = 0):
    """(images [N, K, B, H, W, ch] uint8, labels [N, K, B] int32) for the sampled clients:
    `epochs` reshuffled passes (K = epochs * (S // B)), or with steps > 0 K = steps batches
    drawn from the shard reshuffled pass after pass."""
    size = shards.labels.shape[1]
    per_epoch = steps_per_epoch(size, batch_size)
    if steps:
        order = np.stack([cycled_order(rng, size, steps * batch_size) for _ in client_ids])
    else:
        order = np.stack([
            np.concatenate([rng.permutation(size)[: per_epoch * batch_size]
                            for _ in range(epochs)])
            for _ in client_ids])  # [N, epochs * steps * B]
    rows = np.asarray(client_ids)[:, None]
    images = shards.images[rows, order]
    labels = shards.labels[rows, order]
    k = steps or epochs * per_epoch
    return (images.reshape(len(client_ids), k, batch_size, *images.shape[2:]),
            labels.reshape(len(client_ids), k, batch_size))
