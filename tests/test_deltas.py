"""client_store.deltas streams a delta block by block: written, read and folded with one block
of rows in memory (a checkpoint of 600 LSTM clients' w_i and c_i is 4 GB), and the files are
numpy's .npy format, which np.load reads and np.save writes."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedinit_jax import client_store
from fedinit_jax.algorithms import fedavg
from fedinit_jax.client_store import deltas

WIDTH = 10  # float32 records of 48 bytes (id and row): a 100-byte block holds 2


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(deltas, "BLOCK_BYTES", 100)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_delta_is_written_in_blocks_and_np_load_reads_it(tmp_path, small_blocks, dtype):
    ids = np.array([7, 3, 11, 0, 5], np.int64)
    table = np.arange(20 * WIDTH, dtype=np.float32).reshape(20, WIDTH).astype(jnp.dtype(dtype))
    asked = []

    def read_rows(some):
        asked.append(list(some))
        return table[some]

    entry = deltas.write_delta(str(tmp_path), 4, ids, read_rows)
    itemsize = jnp.dtype(dtype).itemsize
    block = max(1, 100 // (8 + WIDTH * itemsize))  # a record: its int64 id and its row
    assert asked == [[]] + [list(ids[s:s + block]) for s in range(0, ids.size, block)]
    assert entry["rows"] == 5 and entry["file"] == "delta-4.npy"
    saved = np.load(tmp_path / "delta-4.npy")  # the reference reader
    np.testing.assert_array_equal(saved["id"], ids)
    stored = table[ids].view(np.uint16) if dtype == "bfloat16" else table[ids]
    np.testing.assert_array_equal(saved["row"], stored)
    got_ids, got_rows = deltas.read_delta(str(tmp_path), "delta-4.npy", dtype)
    np.testing.assert_array_equal(got_ids, ids)
    assert got_rows.dtype == jnp.dtype(dtype)
    np.testing.assert_array_equal(got_rows.astype(np.float32), table[ids].astype(np.float32))
    deltas.verify(str(tmp_path), {"deltas": [entry]}, 4)  # its size and sha256


def test_a_delta_written_by_np_save_is_read_in_blocks(tmp_path, small_blocks):
    ids = np.array([4, 1, 9], np.int64)
    rows = np.random.default_rng(0).normal(size=(3, WIDTH)).astype(np.float32)
    records = np.empty(3, [("id", "<i8"), ("row", "<f4", (WIDTH,))])
    records["id"], records["row"] = ids, rows
    np.save(tmp_path / "delta-2.npy", records)
    with pytest.raises(deltas.StoreDamaged, match="not a delta of bfloat16 rows"):
        list(deltas.read_blocks(str(tmp_path), "delta-2.npy", "bfloat16"))
    blocks = list(deltas.read_blocks(str(tmp_path), "delta-2.npy", "float32"))
    assert [b.tolist() for b, _ in blocks] == [[4, 1], [9]]
    np.testing.assert_array_equal(np.concatenate([r for _, r in blocks]), rows)


def test_an_empty_delta(tmp_path, small_blocks):
    entry = deltas.write_delta(str(tmp_path), 1, np.array([], np.int64),
                                   lambda some: np.zeros((len(some), WIDTH), np.float32))
    ids, rows = deltas.read_delta(str(tmp_path), entry["file"], "float32")
    assert ids.shape == (0,) and rows.shape == (0, WIDTH)


def test_a_truncated_delta_is_damaged(tmp_path, small_blocks):
    deltas.write_delta(str(tmp_path), 3, np.arange(6), lambda some: np.ones(
        (len(some), WIDTH), np.float32))
    data = (tmp_path / "delta-3.npy").read_bytes()
    (tmp_path / "delta-3.npy").write_bytes(data[: len(data) // 2])
    with pytest.raises(deltas.StoreDamaged, match="delta-3.npy"):
        list(deltas.read_blocks(str(tmp_path), "delta-3.npy", "float32"))


def test_the_fold_in_blocks_is_each_ids_newest_row(tmp_path, small_blocks):
    rng = np.random.default_rng(1)
    written = {}  # round -> {id: row}
    for t, ids in ((2, [0, 1, 2, 3, 4]), (4, [3, 5, 1]), (6, [6, 0])):
        rows = {i: rng.normal(size=WIDTH).astype(np.float32) for i in ids}
        written[t] = rows
        deltas.write_delta(str(tmp_path), t, np.array(ids),
                               lambda some, rows=rows: np.stack([rows[i] for i in some])
                               if len(some) else np.empty((0, WIDTH), np.float32))
    expected = {}  # the reference fold: later rounds overwrite earlier ones
    for t in sorted(written):
        expected.update(written[t])
    got = {}
    for ids, rows in deltas.newest_first(
            str(tmp_path), [deltas.delta_name(t) for t in (2, 4, 6)], "float32"):
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
    new = rows._replace(ri_rows={"w": np.arange(60, dtype=np.float32).reshape(20, 3)})
    store.scatter(np.arange(20), new)
    assert store.pages[0] is first and [len(p) for p in store.pages] == [8, 8, 8]
    np.testing.assert_array_equal(np.asarray(store.gather(np.arange(20)).ri_rows["w"]),
                                  new.ri_rows["w"])
    small = client_store.HostStore(algo, {"w": np.zeros(3, np.float32)}, num_clients=5)
    assert small.page_rows == 5  # never more rows than clients


def test_the_compaction_rule():
    """A snapshot once the deltas a checkpoint needs (plus the next one) hold more rows than
    COMPACT_AFTER x the rows held; never for the first delta."""
    entries = [{"rows": 30}, {"rows": 50}]
    assert deltas.COMPACT_AFTER == 2.0
    assert not deltas.compacts([], written=500, held=10)
    assert not deltas.compacts(entries, written=20, held=50)  # 100 rows = 2.0 x 50
    assert deltas.compacts(entries, written=21, held=50)


def test_unreferenced_deltas_are_removed_unless_a_manifest_is_missing(tmp_path):
    for t in (2, 4, 6, 8):
        (tmp_path / deltas.delta_name(t)).write_bytes(b"x")
    (tmp_path / ".delta-10.npy.tmp7").write_bytes(b"x")  # not a delta: left to its own rule
    keep = [{"deltas": [{"file": "delta-4.npy"}]},
            {"deltas": [{"file": "delta-4.npy"}, {"file": "delta-8.npy"}]}]
    assert deltas.remove_unreferenced(str(tmp_path), [*keep, None]) == []
    assert deltas.remove_unreferenced(str(tmp_path), []) == []
    assert deltas.delta_rounds(str(tmp_path)) == [2, 4, 6, 8]
    assert deltas.remove_unreferenced(str(tmp_path), keep) == ["delta-2.npy", "delta-6.npy"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".delta-10.npy.tmp7", "delta-4.npy",
                                                          "delta-8.npy"]


@pytest.mark.parametrize("kind", ["host", "disk"])
def test_a_compacted_record_restores_every_checkpoints_rows(tmp_path, monkeypatch, kind):
    """Rows written over 8 checkpoints of a store whose record compacts (COMPACT_AFTER 1):
    restoring any checkpoint's manifest in a fresh store (newest first: a restore removes
    the later deltas) gives the rows a plain dict of numpy rows holds at that checkpoint,
    and a snapshot's manifest names one delta holding every row held."""
    monkeypatch.setattr(deltas, "COMPACT_AFTER", 1.0)
    algo = fedavg(lambda p, b: jnp.sum(p["w"]) * 0.0)
    params, c = {"w": np.zeros(3, np.float32)}, 12

    def make(name):
        store = (client_store.HostStore(algo, params, c) if kind == "host" else
                 client_store.DiskStore(algo, params, c, str(tmp_path / name)))
        store.attach(str(tmp_path / "record"))
        return store

    store, reference, saved = make("rows"), {}, []
    rng = np.random.default_rng(0)
    template = store.gather(np.arange(c))
    for t in range(1, 9):
        ids = np.sort(rng.choice(c, 4, replace=False))
        values = rng.normal(size=(4, 3)).astype(np.float32)
        store.scatter(ids, jax.tree.map(lambda x: x[:4], template)._replace(
            ri_rows={"w": values}))
        reference.update({int(i): v for i, v in zip(ids, values)})
        manifest = store.checkpoint(t)
        store.committed(t)
        saved.append((t, manifest, dict(reference)))
        assert manifest["rows_held"] == len(reference)
    snapshots = [m for _, m, _ in saved if len(m["deltas"]) == 1 and m["deltas"][0]["rows"]
                 == m["rows_held"] and m is not saved[0][1]]
    assert snapshots  # the rule fired
    for t, manifest, want in reversed(saved):  # a restore removes the later deltas
        again = make(f"again-{t}")
        again.restore(t, manifest)
        got = np.asarray(again.gather(np.arange(c)).ri_rows["w"])
        for i in range(c):
            np.testing.assert_array_equal(got[i], want.get(i, np.zeros(3, np.float32)))
        assert again.rows_held == len(want)
