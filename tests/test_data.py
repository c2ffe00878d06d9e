"""Data pipeline: real CIFAR-10 via TFDS, mock CIFAR-100, partitioners, noises, shards, augmentation."""
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedinit_jax import data

SHARED_TFDS = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "tfds")


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("fedinit_cache"))


@pytest.mark.skipif(not os.path.isdir(os.path.join(SHARED_TFDS, "cifar10")),
                    reason="the prepared CIFAR-10 TFDS dir ../shared/tfds is not here")
def test_real_cifar10(cache_dir):
    """The real test split (the train split goes through the same code: 5x the decoding)."""
    test_x, test_y, k = data.load("cifar10", "test", data_dir=SHARED_TFDS, cache_dir=cache_dir)
    assert k == 10 and test_x.shape == (10000, 32, 32, 3)
    assert test_x.dtype == np.uint8 and test_y.dtype == np.int32
    np.testing.assert_array_equal(np.bincount(test_y), np.full(10, 1000))
    np.testing.assert_allclose((test_x / 255.0).mean((0, 1, 2)), [0.4941, 0.4851, 0.4504],
                               atol=1e-3)
    again_x, again_y, _ = data.load("cifar10", "test", data_dir=SHARED_TFDS, cache_dir=cache_dir)
    np.testing.assert_array_equal(again_x, test_x)  # from the cache this time
    assert any(name.startswith("cifar10-3.0.2-test") for name in os.listdir(cache_dir))


def test_mock_cifar100(tmp_path):
    import tensorflow_datasets as tfds

    with tfds.testing.mock_data(num_examples=30):
        x, y, k = data.load("cifar100", "train", cache_dir=str(tmp_path))
    assert k == 100 and x.shape == (30, 32, 32, 3) and x.dtype == np.uint8
    assert y.min() >= 0 and y.max() < 100


def test_a_cached_label_file_of_floats_is_refused_by_name(tmp_path):
    """A cached split whose labels are not integers (rewritten as float64 + 0.5) names the
    cache file instead of hanging the split."""
    import tensorflow_datasets as tfds

    with tfds.testing.mock_data(num_examples=30):
        data.load("cifar100", "train", cache_dir=str(tmp_path))
        (labels,) = [p for p in os.listdir(tmp_path) if p.endswith(".labels.npy")]
        path = os.path.join(tmp_path, labels)
        np.save(path, np.load(path).astype(np.float64) + 0.5)
        with pytest.raises(ValueError, match=f"cached copy .*{labels[:-len('.labels.npy')]}"
                           r".*labels must be integers"):
            data.load("cifar100", "train", cache_dir=str(tmp_path))


def test_missing_dataset_error_names_dataset_and_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"cifar100.*TFDS_DATA_DIR"):
        data.load("cifar100", "train", data_dir=str(tmp_path), cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match="not a TFDS dataset"):
        data.load("no_such_dataset_xyz", "train", data_dir=str(tmp_path))


def test_embedded_digits():
    x, y, k = data.load_digits("train")
    tx, ty, _ = data.load_digits("test")
    assert x.shape[1:] == (8, 8, 1) and x.dtype == np.uint8 and k == 10
    assert len(y) + len(ty) == 1797 and x.max() == 255


def test_embedded_digits_are_sklearns(monkeypatch):
    """Read from scikit-learn's file without importing it, the digits are load_digits' own,
    and so are they through the fallback (no file found)."""
    from sklearn.datasets import load_digits

    from fedinit_jax.data import embedded

    ref = load_digits()
    want = np.round(ref.images * (255 / 16)).astype(np.uint8)[..., None], ref.target
    order = np.random.default_rng(0).permutation(1797)
    for split, idx in (("train", order[:1437]), ("test", order[1437:])):
        x, y, _ = embedded.load_digits(split)
        np.testing.assert_array_equal(x, want[0][idx])
        np.testing.assert_array_equal(y, want[1][idx])
    monkeypatch.setattr(embedded.importlib.util, "find_spec", lambda name: None)
    x, y, _ = embedded.load_digits("test")
    np.testing.assert_array_equal(x, want[0][order[1437:]])
    np.testing.assert_array_equal(y, want[1][order[1437:]])


# ------------------------------------------------------------------ partitioners

labels_strategy = st.integers(2, 10).flatmap(
    lambda k: st.lists(st.integers(0, k - 1), min_size=40, max_size=300).map(
        lambda v: np.array(v + list(range(k)), np.int32)))


def _check_partition(idx, labels, num_clients):
    assert idx.shape == (num_clients, len(labels) // num_clients)
    assert idx.min() >= 0 and idx.max() < len(labels)


@settings(max_examples=25, deadline=None)
@given(labels=labels_strategy, num_clients=st.integers(1, 20), seed=st.integers(0, 2 ** 31),
       alpha=st.floats(0.05, 100.0))
def test_partitioners_properties(labels, num_clients, seed, alpha):
    k = int(labels.max()) + 1
    for make in (lambda s: data.iid(labels, num_clients, s),
                 lambda s: data.dirichlet(labels, num_clients, alpha, s),
                 lambda s: data.pathological(labels, num_clients, min(2, k), s)):
        idx = make(seed)
        _check_partition(idx, labels, num_clients)
        np.testing.assert_array_equal(idx, make(seed))  # deterministic per seed
    iid = data.iid(labels, num_clients, seed)
    assert np.unique(iid).size == iid.size  # IID never reuses
    path = data.pathological(labels, num_clients, min(2, k), seed)
    summary = data.summarize(path, labels, k)
    assert np.all(summary["classes_per_client"] == min(2, k, path.shape[1]))


def test_dirichlet_extremes():
    labels = np.repeat(np.arange(10), 500).astype(np.int32)
    near_iid = data.summarize(data.dirichlet(labels, 20, 1000.0, 0), labels, 10)["histogram"]
    assert np.all(near_iid > 0) and near_iid.min() >= 10  # every class, roughly 25 each
    skewed = data.summarize(data.dirichlet(labels, 20, 0.01, 0), labels, 10)["histogram"]
    top_share = skewed.max(1) / skewed.sum(1)
    assert np.median(top_share) > 0.9  # nearly one class per client


def test_dirichlet_matches_a_plain_loop_of_the_reference_procedure():
    """Re-derive the first assignments with the same random stream, written out longhand."""
    labels = np.array([0, 1, 1, 2, 2, 2, 0, 1, 2, 0, 1, 2], np.int32)
    got = data.dirichlet(labels, 3, 0.5, seed=7)
    rng = np.random.default_rng(7)
    priors = np.cumsum(rng.dirichlet([0.5] * 3, size=3), 1)
    pools = [rng.permutation(np.flatnonzero(labels == k)) for k in range(3)]
    left = [len(p) for p in pools]
    want = np.empty((3, 4), np.int64)
    free = [4, 4, 4]
    open_clients = [0, 1, 2]
    while open_clients:
        slot = rng.integers(len(open_clients))
        i = open_clients[slot]
        while True:
            u = rng.random()
            k = next(j for j in range(3) if u <= priors[i][j]) if u <= priors[i][-1] else 2
            if left[k] > 0:
                break
            left[k] = len(pools[k])
        left[k] -= 1
        free[i] -= 1
        want[i, free[i]] = pools[k][left[k]]
        if free[i] == 0:
            open_clients[slot] = open_clients[-1]
            open_clients.pop()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("call, field", [
    (lambda y: data.dirichlet(y, 4, 0.0), "alpha"),
    (lambda y: data.dirichlet(y, 4, -1.0), "alpha"),
    (lambda y: data.iid(y, 1000), "more than"),
    (lambda y: data.pathological(y, 4, 0), "classes_per_client"),
    (lambda y: data.pathological(y, 4, 11), "classes_per_client"),
    (lambda y: data.dirichlet(np.array([0, 1, 3] * 200, np.int32), 10, 0.01), r"\[2\]"),
    (lambda y: data.dirichlet(y + 0.5, 4, 0.1), "integers"),
    (lambda y: data.iid(-y, 4), "integers >= 0"),
])
def test_partition_bad_input(call, field):
    labels = np.repeat(np.arange(10), 10).astype(np.int32)
    with pytest.raises(ValueError, match=field):
        call(labels)


def test_summary_and_heatmap(tmp_path):
    labels = np.repeat(np.arange(10), 50).astype(np.int32)
    idx = data.dirichlet(labels, 10, 0.1, 0)
    summary = data.summarize(idx, labels, 10)
    assert summary["histogram"].sum() == idx.size
    assert summary["reused"] == idx.size - np.unique(idx).size
    assert "10 clients x 50 samples" in str(summary)
    from fedinit_jax.experiment import plots

    path = plots.save_heatmap(summary, str(tmp_path / "split.png"))
    assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------ noises and shards

def test_noises_seeded_and_documented_form():
    rng = np.random.default_rng(0)
    images = np.full((3, 4, 2, 2, 3), 100, np.uint8)
    labels = rng.integers(0, 5, (3, 4)).astype(np.int32)
    off = data.build_shards(images.reshape(12, 2, 2, 3), labels.ravel(),
                            np.arange(12).reshape(3, 4), num_classes=5)
    np.testing.assert_array_equal(off.images, images)
    client = data.build_shards(images.reshape(12, 2, 2, 3), labels.ravel(),
                               np.arange(12).reshape(3, 4), num_classes=5, client_noise=0.2)
    # one factor per client and channel: all pixels of a client's channel agree
    per_channel = client.images.reshape(3, -1, 3)
    assert np.all(per_channel == per_channel[:, :1, :])
    assert len(np.unique(per_channel[:, 0, :])) > 1
    category = data.build_shards(images.reshape(12, 2, 2, 3), labels.ravel(),
                                 np.arange(12).reshape(3, 4), num_classes=5, category_noise=0.1)
    flat_images, flat_labels = category.images.reshape(12, -1), category.labels.ravel()
    for k in np.unique(flat_labels):  # one shift per class, the same for every channel
        assert np.unique(flat_images[flat_labels == k]).size == 1
    with pytest.raises(ValueError, match="client_strength"):
        data.build_shards(images.reshape(12, 2, 2, 3), labels.ravel(),
                          np.arange(12).reshape(3, 4), num_classes=5, client_noise=-0.1)
    with pytest.raises(ValueError, match="category_strength"):
        data.build_shards(images.reshape(12, 2, 2, 3), labels.ravel(),
                          np.arange(12).reshape(3, 4), num_classes=5, category_noise=-1.0)


def test_round_batches_reshuffle_each_epoch_and_static_shapes():
    shards = data.ClientShards(
        images=np.arange(4 * 10, dtype=np.uint8).reshape(4, 10, 1, 1, 1),
        labels=np.arange(40, dtype=np.int32).reshape(4, 10))
    rng = np.random.default_rng(0)
    x, y = data.round_batches(shards, np.array([1, 3]), epochs=2, batch_size=3, rng=rng)
    assert x.shape == (2, 6, 3, 1, 1, 1) and y.shape == (2, 6, 3)  # K = 2 * (10 // 3)
    for n, client in enumerate([1, 3]):
        for epoch in range(2):
            seen = y[n, 3 * epoch: 3 * epoch + 3].ravel()
            assert np.unique(seen).size == 9 and set(seen) <= set(range(10 * client, 10 * client + 10))
        assert not np.array_equal(y[n, :3], y[n, 3:])  # reshuffled
    with pytest.raises(ValueError, match="batch_size"):
        data.round_batches(shards, np.array([0]), epochs=1, batch_size=11, rng=rng)


def test_sample_clients():
    rng = np.random.default_rng(0)
    ids = data.sample_clients(rng, 100, 10)
    assert ids.shape == (10,) and np.unique(ids).size == 10 and ids.dtype == np.int32
    with pytest.raises(ValueError, match="clients per round"):
        data.sample_clients(rng, 5, 6)


# ------------------------------------------------------------------ augmentation

def test_augmentation_shapes_flip_crop_and_per_client_difference():
    images = jnp.asarray(np.random.default_rng(0).normal(size=(64, 32, 32, 3)), jnp.float32)
    out = data.augment(jax.random.key(0), images)
    assert out.shape == images.shape and out.dtype == images.dtype
    other = data.augment(jax.random.key(1), images)
    assert not np.allclose(out, other)  # different clients/steps get different augmentations
    same = sum(np.allclose(out[i], images[i]) for i in range(64))
    flipped = sum(np.allclose(out[i], images[i, :, ::-1]) for i in range(64))
    assert 5 < same < 32 and 5 < flipped < 32  # p(identity) = p(flip only) = 1/4 (+ crop at 0,0)
    normalized = data.normalize(np.full((2, 2, 2, 3), 255, np.uint8), [0.5] * 3, [0.25] * 3)
    np.testing.assert_allclose(normalized, 2.0)


def test_a_cache_folder_that_cannot_be_written_decodes_and_warns(tmp_path):
    """FEDINIT_CACHE_DIR a file (or read-only): the split is decoded and used, with a
    warning, instead of an errno line after the decoding."""
    import tensorflow_datasets as tfds

    not_a_folder = tmp_path / "a_file"
    not_a_folder.write_text("x")
    with tfds.testing.mock_data(num_examples=30):
        with pytest.warns(UserWarning, match="cannot be written: .* is not cached"):
            x, y, _ = data.load("cifar100", "train", cache_dir=str(not_a_folder))
    assert x.shape == (30, 32, 32, 3) and y.shape == (30,)


def test_a_garbage_dataset_info_is_one_error_naming_the_data_dir(tmp_path):
    version = tmp_path / "cifar10" / "3.0.2"
    version.mkdir(parents=True)
    (version / "dataset_info.json").write_text("{not json at all")
    with pytest.raises(ValueError, match=f"dataset 'cifar10': its files in the TFDS data dir "
                                         f"{tmp_path} cannot be read"):
        data.load("cifar10", "train", data_dir=str(tmp_path), cache_dir=str(tmp_path / "c"))
