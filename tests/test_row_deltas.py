"""row_deltas streams a delta block by block: written, read and folded with one block of rows
in memory (a checkpoint of 600 LSTM clients' w_i and c_i is 4 GB), and the files are the
npz that np.savez writes and np.load reads, so deltas of either kind stay readable."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedinit_jax import client_store, row_deltas
from fedinit_jax.algorithms import fedavg

WIDTH = 10  # float32 rows of 40 bytes: a 100-byte block holds 2


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(row_deltas, "BLOCK_BYTES", 100)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_delta_is_written_in_blocks_and_reads_as_np_savez_wrote_it(tmp_path, small_blocks,
                                                                    dtype):
    ids = np.array([7, 3, 11, 0, 5], np.int64)
    table = np.arange(20 * WIDTH, dtype=np.float32).reshape(20, WIDTH).astype(jnp.dtype(dtype))
    asked = []

    def read_rows(some):
        asked.append(list(some))
        return table[some]

    entry = row_deltas.write_delta(str(tmp_path), 4, ids, read_rows)
    itemsize = jnp.dtype(dtype).itemsize
    block = max(1, 100 // (WIDTH * itemsize))
    assert asked == [[]] + [list(ids[s:s + block]) for s in range(0, ids.size, block)]
    assert entry["rows"] == 5 and entry["file"] == "delta-4.npz"
    with np.load(tmp_path / "delta-4.npz") as saved:  # the reference reader
        np.testing.assert_array_equal(saved["ids"], ids)
        stored = table[ids].view(np.uint16) if dtype == "bfloat16" else table[ids]
        np.testing.assert_array_equal(saved["rows"], stored)
        assert str(saved["dtype"]) == dtype
    got_ids, got_rows = row_deltas.read_delta(str(tmp_path), "delta-4.npz", dtype)
    np.testing.assert_array_equal(got_ids, ids)
    assert got_rows.dtype == jnp.dtype(dtype)
    np.testing.assert_array_equal(got_rows.astype(np.float32), table[ids].astype(np.float32))
    row_deltas.verify(str(tmp_path), {"deltas": [entry]}, 4)  # its size and sha256


def test_a_delta_written_by_np_savez_is_read_in_blocks(tmp_path, small_blocks):
    ids = np.array([4, 1, 9], np.int64)
    rows = np.random.default_rng(0).normal(size=(3, WIDTH)).astype(np.float32)
    np.savez(tmp_path / "delta-2.npz", ids=ids, rows=rows, dtype=np.array("float32"))
    blocks = list(row_deltas.read_blocks(str(tmp_path), "delta-2.npz", "float32"))
    assert [b.tolist() for b, _ in blocks] == [[4, 1], [9]]
    np.testing.assert_array_equal(np.concatenate([r for _, r in blocks]), rows)


def test_an_empty_delta(tmp_path, small_blocks):
    entry = row_deltas.write_delta(str(tmp_path), 1, np.array([], np.int64),
                                   lambda some: np.zeros((len(some), WIDTH), np.float32))
    ids, rows = row_deltas.read_delta(str(tmp_path), entry["file"], "float32")
    assert ids.shape == (0,) and rows.shape == (0, WIDTH)


def test_a_truncated_delta_is_damaged(tmp_path, small_blocks):
    row_deltas.write_delta(str(tmp_path), 3, np.arange(6), lambda some: np.ones(
        (len(some), WIDTH), np.float32))
    data = (tmp_path / "delta-3.npz").read_bytes()
    (tmp_path / "delta-3.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(row_deltas.StoreDamaged, match="delta-3.npz"):
        list(row_deltas.read_blocks(str(tmp_path), "delta-3.npz", "float32"))


def test_the_fold_in_blocks_is_each_ids_newest_row(tmp_path, small_blocks):
    rng = np.random.default_rng(1)
    written = {}  # round -> {id: row}
    for t, ids in ((2, [0, 1, 2, 3, 4]), (4, [3, 5, 1]), (6, [6, 0])):
        rows = {i: rng.normal(size=WIDTH).astype(np.float32) for i in ids}
        written[t] = rows
        row_deltas.write_delta(str(tmp_path), t, np.array(ids),
                               lambda some, rows=rows: np.stack([rows[i] for i in some])
                               if len(some) else np.empty((0, WIDTH), np.float32))
    expected = {}  # the reference fold: later rounds overwrite earlier ones
    for t in sorted(written):
        expected.update(written[t])
    got = {}
    for ids, rows in row_deltas.newest_first(
            str(tmp_path), [row_deltas.delta_name(t) for t in (2, 4, 6)], "float32"):
        assert len(ids) <= 2
        for i, row in zip(ids.tolist(), rows):
            assert i not in got
            got[i] = row
    assert sorted(got) == sorted(expected)
    for i in expected:
        np.testing.assert_array_equal(got[i], expected[i])


def test_host_rows_grow_by_pages_never_copied(small_blocks):
    """HostStore keeps its rows in pages of about BLOCK_BYTES (at most C rows): a new client
    never copies the rows held (a doubled array held 1,108 rows of 6.6 MB in 2,048, 13 GB,
    and both arrays while it grew)."""
    algo = fedavg(lambda p, b: jnp.sum(p["w"]) * 0.0)
    store = client_store.HostStore(algo, {"w": np.zeros(3, np.float32)}, num_clients=20)
    assert store.page_rows == 100 // 12
    rows = store.gather(np.arange(20))
    store.scatter(np.arange(8), jax.tree.map(lambda x: x[:8], rows))
    first = store.pages[0]
    new = rows._replace(client_params={"w": np.arange(60, dtype=np.float32).reshape(20, 3)})
    store.scatter(np.arange(20), new)
    assert store.pages[0] is first and [len(p) for p in store.pages] == [8, 8, 8]
    np.testing.assert_array_equal(np.asarray(store.gather(np.arange(20)).client_params["w"]),
                                  new.client_params["w"])
    small = client_store.HostStore(algo, {"w": np.zeros(3, np.float32)}, num_clients=5)
    assert small.page_rows == 5  # never more rows than clients
