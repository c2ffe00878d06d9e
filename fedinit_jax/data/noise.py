"""Heterogeneity noises of the paper (Section 5.1), applied once when client shards are built.

The paper names two noises but gives neither form nor scale, and the authors' code has
none; the forms and scales below are this library's documented choice:

  client-based (strength s_c):   every client i draws one factor per RGB channel,
      f_ic = 1 + N(0, s_c^2), and multiplies that channel of all its images by it.
  category-based (strength s_b): every class k draws one brightness shift b_k = N(0, s_b^2)
      in units of the full pixel range, and adds 255 * b_k to all images of class k.

Pixels are clipped to [0, 255] and rounded back to uint8. s = 0 (the default) is off;
s_c = 0.2 and s_b = 0.1 are visible but moderate. Both are seeded and independent of the
partition's randomness.
"""
import numpy as np

__all__ = ["apply_noises"]


def _check_scale(name, value):
    if not np.isfinite(value) or value < 0:
        raise ValueError(f"{name}={value!r} must be a finite number >= 0 (0 turns it off)")


def apply_noises(images, labels, *, client_strength: float = 0.0,
                 category_strength: float = 0.0, num_classes: int, seed: int = 0):
    """images uint8 [C, S, H, W, ch], labels [C, S] -> noised uint8 images (a new array)."""
    _check_scale("client_strength", client_strength)
    _check_scale("category_strength", category_strength)
    if client_strength == 0 and category_strength == 0:
        return images
    rng = np.random.default_rng([seed, 0xC0FFEE])
    num_clients, channels = images.shape[0], images.shape[-1]
    factors = 1.0 + client_strength * rng.standard_normal((num_clients, channels))
    shifts = 255.0 * category_strength * rng.standard_normal(num_classes)
    out = np.empty_like(images)
    for i in range(num_clients):  # one client at a time keeps the float copy small
        x = images[i].astype(np.float32) * factors[i].astype(np.float32)
        x += shifts[labels[i]].astype(np.float32)[:, None, None, None]
        out[i] = np.clip(np.rint(x), 0, 255).astype(np.uint8)
    return out
