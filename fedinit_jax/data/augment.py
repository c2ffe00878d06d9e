"""Normalisation and the reference's training augmentation, on the device inside the scan.

    x = (image / 255 - mean) / std
    with p = 0.5: x = flip_left_right(x)
    with p = 0.5: x = random 32x32 crop of x zero-padded by 4 pixels   (pad value 0 after
                                                                        normalisation)

Every example draws its own flip, crop decision and offset from the step's key (the round
gives each client and step its own key). Evaluation uses `normalize` only.
"""
import jax
import jax.numpy as jnp

__all__ = ["PAD", "normalize", "augment"]

PAD = 4


def normalize(images, mean, std):
    """uint8 [..., H, W, C] -> float32 normalised with the per-channel mean/std (0..1 scale)."""
    lead = (1,) * (images.ndim - 1)  # the channel statistics broadcast over [..., H, W]
    mean = jnp.asarray(mean, jnp.float32).reshape(lead + (-1,))
    std = jnp.asarray(std, jnp.float32).reshape(lead + (-1,))
    return (images.astype(jnp.float32) / 255.0 - mean) / std


def _augment_one(key, x):
    flip_key, crop_key, offset_key = jax.random.split(key, 3)
    x = jnp.where(jax.random.bernoulli(flip_key), x[:, ::-1, :], x)
    height, width = x.shape[0], x.shape[1]
    padded = jnp.pad(x, ((PAD, PAD), (PAD, PAD), (0, 0)))
    offsets = jax.random.randint(offset_key, (2,), 0, 2 * PAD + 1)
    offsets = jnp.where(jax.random.bernoulli(crop_key), offsets, PAD)  # PAD = no crop
    return jax.lax.dynamic_slice(padded, (offsets[0], offsets[1], 0),
                                 (height, width, x.shape[2]))


def augment(key, images):
    """Random flip then random padded crop, per example: float [B, H, W, C] -> same shape."""
    return jax.vmap(_augment_one)(jax.random.split(key, images.shape[0]), images)
