"""A small real dataset that ships inside an installed package: scikit-learn's digits.

1,797 handwritten digits, 8x8 grey levels 0..16, 10 classes (UCI optdigits test set). Returned
in the same form as a TFDS split (uint8 images [n, 8, 8, 1] scaled to 0..255, int32 labels),
split 80/20 into train and test with a fixed seed, so the default run needs no download.
"""
import numpy as np

from fedinit_jax.checks import require


def load_digits(split: str):
    """(images uint8 [n, 8, 8, 1], labels int32 [n], num_classes=10) for 'train' or 'test'."""
    sk_load_digits = require("sklearn.datasets", "the embedded digits").load_digits
    if split not in ("train", "test"):
        raise ValueError(f"split={split!r}: digits has 'train' and 'test'")
    digits = sk_load_digits()
    images = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)[..., None]
    labels = digits.target.astype(np.int32)
    order = np.random.default_rng(0).permutation(len(labels))
    cut = int(0.8 * len(labels))
    idx = order[:cut] if split == "train" else order[cut:]
    return images[idx], labels[idx], 10
