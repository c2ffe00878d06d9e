"""A small real dataset that ships inside an installed package: scikit-learn's digits.

1,797 handwritten digits, 8x8 grey levels 0..16, 10 classes (UCI optdigits test set). Returned
in the same form as a TFDS split (uint8 images [n, 8, 8, 1] scaled to 0..255, int32 labels),
split 80/20 into train and test with a fixed seed, so the default run needs no download.

The digits are read from the file scikit-learn ships (`sklearn/datasets/data/digits.csv.gz`,
64 pixels and the label per row, what `sklearn.datasets.load_digits` parses) without
importing scikit-learn, whose import costs ~1 s of every binary's start; where that file is
not found (another scikit-learn layout), `load_digits` itself is used.
"""
import gzip
import importlib.util
import pathlib

import numpy as np

from fedinit_jax.checks import require

__all__ = ["load_digits"]


def _digits_table():
    """(pixels float [1797, 64] in 0..16, labels int [1797]) as scikit-learn's load_digits."""
    spec = importlib.util.find_spec("sklearn")  # finds the package without importing it
    if spec is not None and spec.submodule_search_locations:
        path = pathlib.Path(spec.submodule_search_locations[0], "datasets", "data",
                            "digits.csv.gz")
        if path.is_file():
            with gzip.open(path, "rt") as f:
                table = np.loadtxt(f, delimiter=",")
            return table[:, :-1], table[:, -1].astype(int)
    digits = require("sklearn.datasets", "the embedded digits").load_digits()
    return digits.data, digits.target


def load_digits(split: str):
    """(images uint8 [n, 8, 8, 1], labels int32 [n], num_classes=10) for 'train' or 'test'."""
    if split not in ("train", "test"):
        raise ValueError(f"split={split!r}: digits has 'train' and 'test'")
    pixels, target = _digits_table()
    images = np.round(pixels.reshape(-1, 8, 8) * (255.0 / 16.0)).astype(np.uint8)[..., None]
    labels = target.astype(np.int32)
    order = np.random.default_rng(0).permutation(len(labels))
    cut = int(0.8 * len(labels))
    idx = order[:cut] if split == "train" else order[cut:]
    return images[idx], labels[idx], 10
