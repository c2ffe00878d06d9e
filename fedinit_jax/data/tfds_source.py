"""Image-classification splits from TFDS without TensorFlow, decoded once and cached.

    images, labels = load("cifar10", "train")     # uint8 [n, H, W, C], int32 [n]

Reads with `tfds.data_source` (array_record, no TensorFlow), honouring TFDS_DATA_DIR or
`data_dir`. The decoded arrays are cached as .npy files under `cache_dir` (default
$FEDINIT_CACHE_DIR or ~/.cache/fedinit_jax), keyed by dataset, version and split, so the
second load skips the PNG decoding. The TFDS dir itself is only read. With internet,
`download=True` lets TFDS download and prepare a dataset (some datasets need TensorFlow
installed for that one preparation step).
"""
import os
import warnings

import numpy as np

from fedinit_jax.checks import require

__all__ = ["DEFAULT_CACHE", "load", "check_split"]

DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "fedinit_jax")


def _cache_dir(cache_dir):
    return cache_dir or os.environ.get("FEDINIT_CACHE_DIR") or DEFAULT_CACHE


def _data_dir(data_dir):
    return data_dir or os.environ.get("TFDS_DATA_DIR")


def _source(name, split, data_dir, download):
    """The builder and an array_record data source of one split, or a clear error."""
    # heavy import, only when a TFDS dataset is asked for
    tfds = require("tensorflow_datasets", f"the TFDS dataset {name!r}")

    try:
        builder = tfds.builder(name, data_dir=data_dir)
    except tfds.core.registered.DatasetNotFoundError:
        raise ValueError(f"dataset={name!r} is not a TFDS dataset name") from None
    except Exception as err:  # noqa: BLE001 - a damaged dataset_info.json (protobuf ParseError)
        first = str(err).strip().splitlines()[0][:200] if str(err).strip() else ""
        raise ValueError(f"dataset {name!r}: its files in the TFDS data dir "
                         f"{data_dir or '(TFDS default)'} cannot be read ({type(err).__name__}: "
                         f"{first}); restore or remove that dataset's folder") from None
    if download:
        builder.download_and_prepare()
    try:
        return builder, builder.as_data_source(split=split)
    except Exception as err:  # not prepared (AssertionError) or an unknown split
        known = list(builder.info.splits)
        if known and split not in known:
            raise ValueError(f"split={split!r} is not in {name}; available: "
                             f"{', '.join(known)}") from None
        why = (f"cannot read it: {err}" if os.path.isdir(builder.data_dir)
               else f"{builder.data_dir} does not exist")
        raise FileNotFoundError(
            f"dataset {name!r} split {split!r} is not prepared in the TFDS data dir "
            f"{data_dir or '(TFDS default)'} ({why}). Point "
            "TFDS_DATA_DIR (or data_dir=) at a prepared TFDS data dir, e.g. "
            "TFDS_DATA_DIR=../shared/tfds for CIFAR-10 here, or pass download=True on a "
            "machine with internet.") from None


def load(name: str, split: str, *, data_dir=None, cache_dir=None, download: bool = False):
    """A whole split as (images uint8 [n, H, W, C], labels int32 [n]) and its num_classes."""
    builder, source = _source(name, split, _data_dir(data_dir), download)
    num_classes = builder.info.features["label"].num_classes
    key = f"{builder.info.name}-{builder.info.version}-{split}"
    cache = os.path.join(_cache_dir(cache_dir), key)
    if os.path.exists(cache + ".labels.npy"):
        images, labels = _read_cache(cache)
        check_split(images, labels, num_classes, f"the cached copy {cache}.*.npy of {key} "
                    "(delete it to decode the split again)")
        return images, labels, num_classes
    writable = _writable(os.path.dirname(cache))  # asked before decoding, not after
    try:
        rows = [source[i] for i in range(len(source))]
    except Exception as err:  # a truncated or damaged record file
        raise ValueError(f"dataset {name!r} split {split!r}: cannot read its records in "
                         f"{builder.data_dir} ({type(err).__name__}: {err})") from None
    images = np.stack([np.asarray(r["image"], np.uint8) for r in rows])
    labels = np.asarray([r["label"] for r in rows], np.int32)
    check_split(images, labels, num_classes, f"{key} in {builder.data_dir}")
    if writable:
        _save_atomically(cache, images, labels)
    else:
        warnings.warn(f"the cache folder {os.path.dirname(cache)!r} cannot be written: {key} "
                      "was decoded and is not cached (set FEDINIT_CACHE_DIR or cache_dir= to "
                      "a writable folder to skip the decoding next time)", stacklevel=2)
    return images, labels, num_classes


def _writable(folder: str) -> bool:
    """Whether the cache folder exists or can be made, and a file can be written there. A
    read-only shared cache is still read (its copies above); it is only not written."""
    try:
        os.makedirs(folder, exist_ok=True)
        probe = os.path.join(folder, f".write_test_{os.getpid()}")
        open(probe, "w").close()
        os.remove(probe)
        return True
    except OSError:
        return False


def _read_cache(cache):
    """The cached arrays, or ValueError naming the file that cannot be read."""
    arrays = []
    for suffix in (".images.npy", ".labels.npy"):
        try:
            arrays.append(np.load(cache + suffix))
        except (OSError, ValueError, EOFError) as err:
            raise ValueError(f"the cached copy {cache}{suffix} cannot be read "
                             f"({type(err).__name__}: {str(err).splitlines()[0][:200]}); "
                             "delete it to decode the split again") from None
    return arrays


def check_split(images, labels, num_classes, where):
    """ValueError naming `where` if images/labels are malformed."""
    if images.ndim != 4 or images.dtype != np.uint8:
        raise ValueError(f"{where}: images must be uint8 [n, H, W, C], got {images.dtype} "
                         f"{images.shape}")
    if not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"{where}: labels must be integers, got dtype {labels.dtype}")
    if labels.shape != (images.shape[0],):
        raise ValueError(f"{where}: {labels.shape[0]} labels for {images.shape[0]} images")
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"{where}: labels out of range [0, {num_classes}): "
                         f"min {labels.min()} max {labels.max()}")


def _save_atomically(path, images, labels):
    """Write both arrays under temporary names, then rename: a crash leaves no half cache."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    for suffix, array in ((".images.npy", images), (".labels.npy", labels)):
        tmp = f"{path}{suffix}.tmp{os.getpid()}"
        with open(tmp, "wb") as f:
            np.save(f, array)
        os.replace(tmp, path + suffix)
