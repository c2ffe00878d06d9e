"""The ClientStore contract (fedinit_jax/client_store/__init__.py), for every registered store
and for a fourth written here: a backend is one class (four methods on LazyStore) plus one
registry line, and then runs in the binaries' loop, checkpointed and resumed like the others."""
import jax
import numpy as np
import pytest
from conftest import (
    QUIET,
    linreg_loss,
    params_from,
    planned_run,
    quiet_config,
    rows,
    without_timing,
)

from fedinit_jax import RoundInput, algorithms, client_store
from fedinit_jax.federated_round import divergence_all

C = 12


class DictStore(client_store.LazyStore):
    """Rows in a Python dict, one flat numpy row a client: the whole backend."""

    def __init__(self, algo, params, num_clients):
        super().__init__(algo, params, num_clients)
        self.rows = {}

    @classmethod
    def open(cls, algo, params, num_clients, folder):
        del folder
        return cls(algo, params, num_clients)

    def _read_flat(self, ids):
        flat = np.stack([self.rows.get(i, self.layout.initial) for i in ids.tolist()]
                        or [self.layout.initial])[:ids.size]
        return flat, np.array([i in self.rows for i in ids.tolist()], bool)

    def _write_flat(self, ids, flat):
        for i, row in zip(ids.tolist(), flat):
            self.rows[i] = np.array(row)

    def _held_ids(self):
        return np.array(sorted(self.rows), np.int64)

    def _rebuild(self, names):
        self.rows = {}
        for ids, flat in self._folded(names):
            self._write_flat(ids, flat)
        return len(self.rows)


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(client_store.STORES, "dict", DictStore)  # the one registry line
    return client_store.STORES


def _equal(a, b):
    return all(np.array_equal(np.asarray(x), np.asarray(y))
               for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))


@pytest.mark.parametrize("name", ["device", "host", "disk", "dict"])
def test_the_contract(tmp_path, registered, name):
    algo = algorithms.scaffold(linreg_loss, beta=0.1)
    params = params_from(np.array([0.3, -0.2, 0.1, 0.05]))
    store = client_store.open_store(name, algo, params, C, str(tmp_path / "rows"))
    assert isinstance(store, client_store.ClientStore) and store.num_clients == C
    assert client_store.implements(store, client_store.ClientStore)
    assert client_store.implements(store, client_store.SharedStore) == (name == "disk")
    dense = algo.init(params, C)
    every = np.arange(C)
    assert _equal(store.gather(every), (dense.ri_rows, dense.client_state,
                                        dense.client_visited))  # never written: initial rows
    state = client_store.server_state(algo, params)
    rng = np.random.default_rng(0)
    checkpointed = client_store.implements(store, client_store.Checkpointed)
    assert checkpointed == isinstance(store, client_store.Checkpointed)
    if checkpointed:
        store.attach(str(tmp_path / "record"))
    for t in range(4):
        ids = rng.choice(C, 4, replace=False).astype(np.int32)
        batches = (rng.normal(size=(4, 2, 3, 3)).astype(np.float32),
                   rng.normal(size=(4, 2, 3)).astype(np.float32))
        inp, key = RoundInput(ids, batches, np.float32(0.05)), jax.random.key(t)
        dense, want = algo.apply(dense, inp, key)
        state, got = client_store.run_round(algo, state, store, inp, key)
        assert _equal(state.params, dense.params) and _equal(got, want)
        if checkpointed and t == 1:
            manifest, after_two = store.checkpoint(2), store.gather(every)
            store.committed(2)
    assert _equal(store.gather(every), (dense.ri_rows, dense.client_state,
                                        dense.client_visited))
    held = int(np.asarray(dense.client_visited).sum())
    assert store.rows_held == (C if name == "device" else held)
    assert store.divergence_all(dense.params) == pytest.approx(
        float(divergence_all(dense.ri_rows, dense.params)), rel=1e-6)
    if checkpointed:  # a new process's store, restored to round 2
        again = client_store.open_store(name, algo, params, C, str(tmp_path / "rows"))
        again.attach(str(tmp_path / "record"))
        again.restore(2, manifest)
        assert _equal(again.gather(every), after_two)


def test_a_registered_store_runs_in_the_binaries_loop(tmp_path, registered):
    """config.client_store="dict": validated against the registry, opened by it, killed
    after a checkpoint and resumed to an uninterrupted run's rows."""
    from conftest import fault_then_resume

    from fedinit_jax.experiment import simulation

    config = quiet_config(rounds=4, algorithm="scaffold", beta=0.1, client_store="dict",
                          checkpoint_every=2, eval_every=1)
    planned_run(config, str(tmp_path / "straight"), **QUIET)
    fault_then_resume(config, tmp_path / "resumed", "metrics_written:3")
    assert without_timing(rows(tmp_path / "resumed")) == without_timing(
        rows(tmp_path / "straight"))
    info = simulation.workdir_lib.read_json(str(tmp_path / "resumed" / "run_info.json"))
    assert info["client_store"] == "dict"
    with pytest.raises(ValueError, match="config.client_store='nosuch': allowed: auto, device"):
        planned_run(quiet_config(client_store="nosuch"), str(tmp_path / "x"), **QUIET)
