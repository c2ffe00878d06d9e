"""Client stores (fedinit_jax/client_store/): each store gives FedState's numbers bit for
bit (FedInit, SCAFFOLD, FedDyn, FedCM; fixed and Bernoulli-padded rounds; vmap and
sequential; 1 and 2 devices); rows are created only for clients sampled; Delta^t streamed
over the rows equals the table's; a federation of 1,000,000 clients runs its rounds."""
import os

import jax
import numpy as np
import pytest
from conftest import linreg_loss, params_from, planned_run

from fedinit_jax import RoundInput, algorithms, client_store, with_runtime
from fedinit_jax.federated_round import divergence_all

THETA0 = np.array([0.3, -0.2, 0.1, 0.05])
C = 40


def _rounds(num_clients, count=4, id_range=None):
    """Round inputs of 6 slots, every other one with a padded slot (Bernoulli's mask)."""
    rng = np.random.default_rng(0)
    for t in range(count):
        ids = rng.choice(id_range or num_clients, 6, replace=False).astype(np.int32)
        xs = rng.normal(size=(6, 2, 4, 3)).astype(np.float32)
        ys = rng.normal(size=(6, 2, 4)).astype(np.float32)
        mask = np.array([1, 1, 0, 1, 1, 1], bool) if t % 2 else None
        yield RoundInput(ids, (xs, ys), np.float32(0.05), mask), jax.random.key(t)


def _stores(algo, params, num_clients, tmp_path):
    return {"device": client_store.DeviceStore(algo, params, num_clients),
            "host": client_store.HostStore(algo, params, num_clients),
            "disk": client_store.DiskStore(algo, params, num_clients, str(tmp_path / "rows"))}


def _equal(a, b):
    return all(np.array_equal(np.asarray(x), np.asarray(y))
               for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


@pytest.mark.parametrize("name, runtime", [
    ("fedinit", {"execution": "vmap"}), ("scaffold", {"execution": "vmap"}),
    pytest.param("fedcm", {"execution": "sequential"}, marks=pytest.mark.slow),
    ("feddyn", {"execution": "vmap", "num_devices": 2}),
    pytest.param("fedinit-first_visit", {"execution": "sequential"}, marks=pytest.mark.slow)])
def test_every_store_equals_the_state_tables(tmp_path, name, runtime):
    if runtime.get("num_devices", 1) > len(jax.devices()):
        pytest.skip("needs 2 XLA devices")
    name, _, first = name.partition("-")
    options = {"first_visit": "global"} if first else {}
    algo = with_runtime(algorithms.get(name, linreg_loss, beta=0.1, **options), **runtime)
    params = params_from(THETA0)
    dense = algo.init(params, C)
    stores = _stores(algo, params, C, tmp_path)
    states = {k: client_store.server_state(algo, params) for k in stores}
    for inp, key in _rounds(C):
        dense, want = algo.apply(dense, inp, key)
        for k, rows in stores.items():
            states[k], got = client_store.run_round(algo, states[k], rows, inp, key)
            assert _equal(states[k].params, dense.params), (k, name)
            assert _equal(states[k].server_state, dense.server_state), (k, name)
            assert _equal(got, want), (k, name)
    every = np.arange(C)
    delta = float(divergence_all(dense.ri_rows, dense.params))
    for k, rows in stores.items():
        assert _equal(rows.gather(every), (dense.ri_rows, dense.client_state,
                                           dense.client_visited)), k
        assert rows.divergence_all(dense.params) == pytest.approx(delta, rel=1e-6), k
    sampled = {int(i) for inp, _ in _rounds(C)
               for i in inp.client_ids[inp.mask if inp.mask is not None else slice(None)]}
    assert stores["host"].rows_held == stores["disk"].rows_held == len(sampled) < C


def test_a_million_clients_cost_their_cohort(tmp_path):
    """C = 1,000,000: the host and disk stores hold the sampled clients' rows only, and the
    rounds give what a federation of 64 gives on the same ids (FedInit's numbers do not
    depend on C), bit for bit."""
    algo = with_runtime(algorithms.fedinit(linreg_loss), execution="sequential")
    params = params_from(THETA0)
    big = 1_000_000
    small = algo.init(params, 64)
    stores = {"host": client_store.HostStore(algo, params, big),
              "disk": client_store.DiskStore(algo, params, big, str(tmp_path / "rows"))}
    states = {k: client_store.server_state(algo, params) for k in stores}
    for inp, key in _rounds(big, count=3, id_range=64):
        small, _ = algo.apply(small, inp, key)
        for k, rows in stores.items():
            states[k], _ = client_store.run_round(algo, states[k], rows, inp, key)
            assert _equal(states[k].params, small.params), k
    for rows in stores.values():
        assert 6 <= rows.rows_held <= 18
        w0_share = (big - rows.rows_held) / big  # the untouched rows read as w^0
        assert rows.divergence_all(small.params) == pytest.approx(
            (64 * float(divergence_all(small.ri_rows, small.params))
             + (big - 64) * float(divergence_all(
                 jax.tree.map(lambda x: x[None], params), small.params))) / big, rel=1e-5)
        assert 0.99 < w0_share < 1


@pytest.mark.parametrize("kind", ["host", "disk"])
def test_incremental_checkpoints_restore_exactly_after_a_kill(tmp_path, kind):
    """Rounds 1-2, checkpoint 2 (committed); rounds 3-4 and checkpoint 4's rows written but
    not committed (a kill before the server state was saved): a new process's store,
    restored to round 2, reads what the store read after round 2, rows first written later
    included (they read as w^0 again); then rounds 3-4 again give the same rows."""
    algo = algorithms.scaffold(linreg_loss, beta=0.1)
    params = params_from(THETA0)

    def make():
        rows = (client_store.HostStore(algo, params, C) if kind == "host" else
                client_store.DiskStore(algo, params, C, str(tmp_path / "rows")))
        rows.attach(str(tmp_path / "checkpoints"))
        return rows

    rounds = list(_rounds(C, count=4))
    rows, state = make(), client_store.server_state(algo, params)
    for inp, key in rounds[:2]:
        state, _ = client_store.run_round(algo, state, rows, inp, key)
    manifest = rows.checkpoint(2)
    rows.committed(2)
    after_two, state_two = rows.gather(np.arange(C)), state
    for inp, key in rounds[2:]:
        state, _ = client_store.run_round(algo, state, rows, inp, key)
    rows.checkpoint(4)  # killed before committed(4)
    after_four = rows.gather(np.arange(C))
    assert not _equal(after_four, after_two)
    again = make()
    again.restore(2, manifest)
    assert _equal(again.gather(np.arange(C)), after_two)
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["delta-2.npy"]
    state = state_two
    for inp, key in rounds[2:]:
        state, _ = client_store.run_round(algo, state, again, inp, key)
    assert _equal(again.gather(np.arange(C)), after_four)
    with pytest.raises(ValueError, match=r"client ids must be a 1-D array in \[0, 40\)"):
        again.gather(np.array([40]))


# ------------------------------------------------------------------ the binaries' loop

@pytest.fixture(scope="module")
def uninterrupted_rows(tmp_path_factory):
    """rows(store): an uninterrupted run of the loop with the clients in `store`, its rows.
    A store run is compared with its own store's: the rows equal the device tables' exactly
    in the library (test_every_store_equals_the_state_tables), but the loop's round programs
    of two stores are two XLA programs, equal in their last bits only where XLA fuses them
    alike (it does at the default compile options, not at the suite's: tests/conftest.py)."""
    from conftest import QUIET, quiet_config, rows, without_timing

    done = {}

    def rows_of(store):
        if store not in done:
            workdir = tmp_path_factory.mktemp(store)
            planned_run(quiet_config(rounds=6, algorithm="scaffold", beta=0.1, local_epochs=10,
                                     client_store=store), str(workdir), **QUIET)
            done[store] = without_timing(rows(workdir))
        return done[store]

    return rows_of


@pytest.mark.parametrize("store, point", [  # each store at each point: test_store_durability.py
    pytest.param("host", "rows_saved:4", marks=pytest.mark.slow),
    pytest.param("disk", "metrics_written:3", marks=pytest.mark.slow),
    ("disk", "checkpoint_saved:2")])
def test_the_loop_with_a_store_resumes_exactly_after_a_fault(tmp_path, uninterrupted_rows,
                                                             store, point):
    from conftest import fault_then_resume, quiet_config, rows, without_timing

    from fedinit_jax.experiment import simulation

    config = quiet_config(rounds=6, algorithm="scaffold", beta=0.1, client_store=store,
                          checkpoint_every=2, local_epochs=10)
    fault_then_resume(config, tmp_path, point)
    assert without_timing(rows(tmp_path)) == uninterrupted_rows(store)
    info = simulation.workdir_lib.read_json(str(tmp_path / "run_info.json"))
    assert info["client_store"] == store


@pytest.mark.parametrize("ri_offset", ["momentum", pytest.param("shared", marks=pytest.mark.slow)])
def test_the_momentum_offset_resumes_exactly(tmp_path, ri_offset):
    """ri_offset="momentum" and "shared" keep m^t on the server (FedState.ri_state, in the
    checkpoint): a run cut after a checkpoint resumes to the rows of an uninterrupted one."""
    from conftest import QUIET, fault_then_resume, quiet_config, rows, without_timing


    config = quiet_config(rounds=6, algorithm="fedinit", beta=0.1, ri_offset=ri_offset,
                          first_visit="global", client_store="device", checkpoint_every=2)
    planned_run(config, str(tmp_path / "whole"), **QUIET)
    fault_then_resume(config, tmp_path / "cut", "checkpoint_saved:2")
    assert without_timing(rows(tmp_path / "cut")) == without_timing(rows(tmp_path / "whole"))


@pytest.mark.slow  # ~11 s: the in-process faults above cover every point of the loop
def test_sigkill_of_the_binary_with_the_disk_store_then_resume(tmp_path, uninterrupted_rows):
    import signal
    import time

    from conftest import rows, train, without_timing

    args = ["--config.rounds=6", "--config.num_clients=8", "--config.participation=0.5",
            "--config.local_epochs=10", "--config.eval_every=2", "--config.checkpoint_every=2",
            "--config.algorithm=scaffold", "--config.beta=0.1", "--config.client_store=disk"]
    proc = train(tmp_path, *args, wait=False)
    metrics = tmp_path / "metrics.jsonl"
    deadline = time.time() + 200
    while time.time() < deadline and not (metrics.exists()
                                          and metrics.read_text().count("\n") >= 3):
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    resumed = train(tmp_path, *args)
    assert resumed.returncode == 0, resumed.stderr
    assert "client store: disk" in resumed.stdout
    # the in-process run of this config
    assert without_timing(rows(tmp_path)) == uninterrupted_rows("disk")


def test_the_cross_device_preset_runs_a_million_clients_in_the_loop(tmp_path):
    """experiments/configs/cross_device.py (Synthetic, 10^6 clients, 100 a round, host
    store), 3 rounds: each client's data is made from (seed, id) on demand, the store holds
    the 300 sampled clients' rows, and the run says so."""

    from experiments.configs import cross_device
    from fedinit_jax.experiment.tasks import synthetic

    x, y = synthetic.client_data(123_456, 1.0, 1.0, seed=0)
    again, other = synthetic.client_data(123_456, 1.0, 1.0, 0), synthetic.client_data(7, 1.0,
                                                                                      1.0, 0)
    assert np.array_equal(x, again[0]) and not np.array_equal(x, other[0])
    labels = np.concatenate([synthetic.client_data(i, 1.0, 1.0, 0)[1] for i in range(20)])
    assert x.shape == (100, 60) and len(np.unique(labels)) > 2  # a client's: mostly one class
    config = {**cross_device.get_config().to_dict(), "algorithm": "scaffold", "rounds": 3,
              "eval_every": 3, "checkpoint_every": 0}
    assert config["num_clients"] == 1_000_000 and config["participation"] == 1e-4
    logged = []
    rows = planned_run(config, str(tmp_path), log=logged.append, progress=False)
    assert len(rows) == 3 and np.isfinite(rows[-1]["divergence_all"])
    assert any(line.startswith("client store: 300 of 1,000,000 clients hold a row; peak RSS")
               for line in logged), logged
    assert any("data: clients 1000000, generated per client, from (seed, id)" in line
               for line in logged), logged


def test_the_api_on_a_store_names_bad_input():
    """The checks docs/api.md sends store users to work on a store's server state, and
    run_round, algo.apply and check_state name what is wrong instead of an IndexError or a
    silent other round: duplicate ids (one row written twice), an empty or all-padded
    cohort, a beta of the wrong shape, batches without the K axis (shapes are known at
    trace time), the key and the round input swapped."""
    from fedinit_jax import check_round_input, check_state

    algo = algorithms.fedinit(linreg_loss, beta=0.1)
    params = params_from(THETA0)
    state = client_store.server_state(algo, params)
    inp, key = next(_rounds(C))
    check_state(algo, state)
    check_round_input(algo, state, inp, num_clients=C)
    with pytest.raises(ValueError, match="pass num_clients="):
        check_round_input(algo, state, inp)
    store = client_store.HostStore(algo, params, C)
    bad = {"client_ids has duplicates": inp._replace(client_ids=np.array([3, 3, 5, 1, 2, 4],
                                                                         np.int32)),
           "mask marks every slot as padding": inp._replace(mask=np.zeros(6, bool)),
           "non-empty 1-D integer array": inp._replace(
               client_ids=np.zeros(0, np.int32), batches=jax.tree.map(lambda x: x[:0],
                                                                      inp.batches))}
    for message, round_input in bad.items():
        with pytest.raises(ValueError, match=message):
            client_store.run_round(algo, state, store, round_input, key)
    assert store.rows_held == 0  # nothing written
    with pytest.raises(ValueError, match="must not repeat"):
        store.scatter(np.array([1, 1]), store.gather(np.array([1, 1])))
    dense = algo.init(params, C)
    with pytest.raises(ValueError, match=r"state.beta has shape \(2,\)"):
        check_state(algo, dense._replace(beta=np.zeros(2, np.float32)))
    no_k = inp._replace(batches=jax.tree.map(lambda x: x[:, 0], inp.batches))
    with pytest.raises(ValueError, match=r"leading \[N, K, B\] axes"):
        algo.apply(dense, no_k, key)
    with pytest.raises(ValueError, match="were round_input and key swapped"):
        algo.apply(dense, key, inp)
    with pytest.raises(ValueError, match=r"leading \[N, K, B\] axes"):  # inside a user's jit
        jax.jit(algo.apply)(dense, no_k, key)


def test_a_stores_delta_is_exact_whatever_order_its_rows_came_in(tmp_path):
    """Delta^t of a lazy store: each row's ||w_i - w||^2 in float64 from float32
    differences, summed exactly (a plain loop with math.fsum here), the same whatever order
    the rows were written in; the device tables' float32 mean agrees to ~1e-6."""
    import math

    algo = algorithms.fedinit(linreg_loss, beta=0.1)
    params = params_from(THETA0)
    rng = np.random.default_rng(1)
    ids = rng.choice(C, 25, replace=False)
    rows = client_store.initial_row(algo, params)
    new = jax.tree.map(lambda x: (np.asarray(x)[None] + rng.normal(size=(25, *np.shape(x)))
                                  * 10.0 ** rng.integers(-3, 3, size=(25,) + (1,) * np.ndim(x))
                                  ).astype(np.float32), rows)._replace(
                                      client_visited=np.ones(25, bool))
    forward = client_store.HostStore(algo, params, C)
    backward = client_store.DiskStore(algo, params, C, str(tmp_path / "rows"))
    device = client_store.DeviceStore(algo, params, C)
    for store, order in ((forward, slice(None)), (backward, slice(None, None, -1)),
                         (device, slice(None))):
        store.scatter(ids[order], jax.tree.map(lambda x, o=order: x[o], new))
    w = jax.tree.map(lambda x: np.asarray(x) + 0.5, params)
    w_flat = np.concatenate([np.ravel(x).astype(np.float32) for x in jax.tree.leaves(w)])
    leaves = [np.asarray(x, np.float32) for x in
              jax.tree.leaves(device.gather(np.arange(C)).ri_rows)]
    terms = []
    for i in range(C):
        row = np.concatenate([x[i].ravel() for x in leaves])
        diff = (row - w_flat).astype(np.float64)
        terms.append(float(np.sum(diff * diff)))
    want = math.fsum(terms) / C
    assert forward.divergence_all(w) == backward.divergence_all(w) == want
    assert device.divergence_all(w) == pytest.approx(want, rel=1e-6)


def test_auto_on_cpu_leaves_room_for_a_checkpoint_of_the_tables(tmp_path, monkeypatch):
    """client_store=auto on CPU keeps the device tables only when the compiled round (the
    tables included) and the copies of them a checkpoint holds while orbax saves them
    (memory.SAVE_COPIES) fit the available memory; otherwise the host store, whose
    checkpoints stream (a Shakespeare SCAFFOLD run on the device tables was killed for
    memory at its first checkpoint)."""
    from types import SimpleNamespace

    from conftest import quiet_config

    from fedinit_jax.experiment import memory

    plan = SimpleNamespace(sampling=SimpleNamespace(num_clients=10))
    state = SimpleNamespace(per_client_bytes=100)  # tables: 1,000 bytes; need 300 + 2,000
    for available, fits in ((2300, True), (2299, False)):
        monkeypatch.setattr(memory, "host_memory", lambda available=available: available)
        if fits:
            memory.check_checkpoint_memory(plan, state, 300)
        else:
            with pytest.raises(ValueError, match="need 0.0 GiB"):
                memory.check_checkpoint_memory(plan, state, 300)
    monkeypatch.undo()
    monkeypatch.setattr(memory, "SAVE_COPIES", 10**9)
    logged = []
    planned_run(quiet_config(rounds=2, client_store="auto"), str(tmp_path / "run"),
                   log=logged.append, progress=False)
    assert any(line.startswith("client store: host (not on the device: the compiled round "
                               "with its [C, ...] tables") for line in logged), logged


def test_auto_on_cpu_keeps_a_sparsely_sampled_federation_in_host_memory(tmp_path):
    """client_store=auto on one CPU process: when the run samples fewer clients than C
    (rounds x N), the device's [C, ...] tables would be host memory holding rows never
    written, so auto takes the host store and says why; a federation sampled through keeps
    the device tables."""
    from conftest import quiet_config

    from fedinit_jax.experiment import simulation

    logged = []
    planned_run(quiet_config(num_clients=200, participation=0.02, rounds=2, batch_size=4,
                                client_store="auto"), str(tmp_path / "sparse"),
                   log=logged.append, progress=False)
    assert any(line.startswith("client store: host (auto on CPU") and "rounds x N = 8 of the "
               "200 clients" in line for line in logged), logged
    planned_run(quiet_config(client_store="auto"), str(tmp_path / "dense"),
                   log=logged.append, progress=False)
    info = simulation.workdir_lib.read_json(str(tmp_path / "dense" / "run_info.json"))
    assert info["client_store"] == "device"


def test_an_explicit_device_store_that_a_checkpoint_would_overflow_is_refused(tmp_path,
                                                                              monkeypatch):
    """client_store=device on CPU when the compiled round and a checkpoint's copies of the
    tables do not fit: refused before any round, naming the flag and the stores that fit
    (it would be killed for memory at its first checkpoint); nothing is written."""
    from conftest import quiet_config

    from fedinit_jax.experiment import memory

    monkeypatch.setattr(memory, "SAVE_COPIES", 10**9)
    with pytest.raises(ValueError, match=r"config.client_store=.device.*copies of the tables "
                                         r"a checkpoint holds.*client_store=host or disk"):
        planned_run(quiet_config(rounds=2, client_store="device"), str(tmp_path / "run"),
                       progress=False, log=lambda line: None)
    assert not os.path.exists(tmp_path / "run" / "checkpoints")


@pytest.mark.parametrize("kind", ["host", "disk"])
def test_rows_written_before_attach_are_in_the_first_checkpoint(tmp_path, kind):
    """docs/api.md's recipe with the store attached after its first rounds: a fresh store
    restored from the checkpoint holds every row, under ri_offset="momentum"."""
    algo = algorithms.fedinit(linreg_loss, beta=0.1, ri_offset="momentum", first_visit="global")
    params, rng = params_from(np.zeros(4, np.float32)), np.random.default_rng(0)

    def store():
        if kind == "host":
            return client_store.HostStore(algo, params, 20)
        return client_store.DiskStore(algo, params, 20, str(tmp_path / f"zarr{rng.random()}"))

    first = store()
    state = client_store.server_state(algo, params)
    for t in range(3):
        batches = (rng.normal(size=(4, 2, 8, 3)).astype(np.float32),
                   rng.normal(size=(4, 2, 8)).astype(np.float32))
        state, _ = client_store.run_round(algo, state, first, RoundInput(
            rng.choice(20, 4, replace=False), batches, 0.1), jax.random.key(t))
    first.attach(str(tmp_path / "rows"))
    manifest = first.checkpoint(3)
    first.committed(3)
    again = store()
    again.attach(str(tmp_path / "rows"))
    again.restore(3, manifest)
    assert again.rows_held == first.rows_held > 0
    assert again.divergence_all(state.params) == first.divergence_all(state.params)
