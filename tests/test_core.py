"""FedAvg / FedInit engine against an independent numpy reference, plus the engine's contract."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import (
    NUM_CLIENTS,
    assert_matches,
    counting,
    flat,
    linreg_loss,
    params_from,
    run,
    with_ri,
)
from numpy_reference import simulate

from fedinit_jax import RoundInput, Runtime, algorithms, check_round_input, with_runtime


@pytest.mark.parametrize("delta_from", ["global", "start"])
@pytest.mark.parametrize("beta", [0.0, 0.1, -0.2])
@pytest.mark.parametrize("clip, wd", [(None, None), (1.0, 1e-3)])
def test_fedavg_fedinit_match_numpy_reference(linreg_rounds, theta0, delta_from, beta, clip, wd):
    algo = algorithms.fedinit(linreg_loss, beta=beta, delta_from=delta_from, clip_norm=clip,
                              weight_decay=wd)
    state, history = run(algo, theta0, linreg_rounds)
    ref = simulate("fedavg", theta0, NUM_CLIENTS, linreg_rounds, beta=beta,
                   delta_from=delta_from, clip=clip, wd=wd)
    assert_matches(state, history, ref)


def test_server_lr_matches_reference(linreg_rounds, theta0):
    algo = algorithms.fedinit(linreg_loss, beta=0.1, server_lr=0.5)
    state, history = run(algo, theta0, linreg_rounds)
    ref = simulate("fedavg", theta0, NUM_CLIENTS, linreg_rounds, beta=0.1, clip=10.0,
                   wd=1e-3, server_lr=0.5)
    assert_matches(state, history, ref)


def test_delta_from_differs_under_ri(linreg_rounds, theta0):
    """With beta != 0 the two aggregation rules are different algorithms."""
    a, _ = run(algorithms.fedinit(linreg_loss, delta_from="global"), theta0, linreg_rounds)
    b, _ = run(algorithms.fedinit(linreg_loss, delta_from="start"), theta0, linreg_rounds)
    assert np.max(np.abs(flat(a.params) - flat(b.params))) > 1e-3


def test_beta_zero_is_fedavg_exactly(linreg_rounds, theta0):
    a, ha = run(algorithms.fedavg(linreg_loss), theta0, linreg_rounds)
    b, hb = run(algorithms.fedinit(linreg_loss, beta=0.0, delta_from="start"), theta0,
                linreg_rounds)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert ha == hb


def test_never_sampled_client_starts_from_relaxed_initial_model(theta0):
    """Round 2 samples a client never seen: it starts at w + beta (w - w^0)."""
    starts = []

    def recording_loss(params, batch, key):
        jax.debug.callback(lambda w: starts.append(np.asarray(w)), params["w"])
        return linreg_loss(params, batch, key)

    beta = 0.3
    algo = with_runtime(algorithms.fedinit(recording_loss, beta=beta), execution="sequential")
    state = algo.init(params_from(theta0), num_clients=4)
    x = np.ones((1, 1, 2, 3), np.float32)
    y = np.zeros((1, 1, 2), np.float32)
    state, _ = algo.apply(state, RoundInput(np.array([0]), (x, y), 0.1), jax.random.key(0))
    w1 = np.asarray(state.params["w"])
    starts.clear()
    algo.apply(state, RoundInput(np.array([3]), (x, y), 0.1), jax.random.key(1))
    np.testing.assert_allclose(starts[0], w1 + beta * (w1 - theta0[:-1]), rtol=1e-6)


def test_same_seed_bit_identical(linreg_rounds, theta0):
    """The same algorithm, state and round inputs twice (FedInit, SCAFFOLD): every leaf of the
    state and every metric equal to the bit."""
    for name in ("fedinit", "scaffold"):
        (state_a, history_a), (state_b, history_b) = (
            run(algorithms.get(name, linreg_loss), theta0, linreg_rounds) for _ in range(2))
        for a, b in zip(jax.tree.leaves(state_a), jax.tree.leaves(state_b), strict=True):
            assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), name
        assert history_a == history_b, name


@pytest.mark.parametrize("execution, chunk", [("sequential", None), ("chunked", 2)])
def test_execution_strategies_agree(linreg_rounds, theta0, execution, chunk):
    ref_state, ref_hist = run(algorithms.fedinit(linreg_loss), theta0, linreg_rounds)
    state, hist = run(with_runtime(algorithms.fedinit(linreg_loss), execution=execution,
                                                                 chunk_size=chunk),
                      theta0, linreg_rounds)
    for x, y in zip(jax.tree.leaves(ref_state), jax.tree.leaves(state)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-6)
    for a, b in zip(ref_hist, hist):
        for k in a:
            np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("execution", ["vmap", "sequential"])
def test_two_devices_match_one(linreg_rounds, theta0, execution):
    """The client axis sharded over 2 XLA CPU devices gives the same state as 1 device."""
    assert len(jax.devices()) >= 2, "conftest sets --xla_force_host_platform_device_count=2"
    two_client_rounds = [(ids[:2], xs[:2], ys[:2], lr) for ids, xs, ys, lr in linreg_rounds]
    counting_loss, traces = counting(linreg_loss)

    sharded = with_runtime(algorithms.fedinit(counting_loss), execution=execution, num_devices=2)
    one, h1 = run(with_runtime(algorithms.fedinit(linreg_loss), execution=execution), theta0,
                  two_client_rounds)
    two, h2 = run(sharded, theta0, two_client_rounds[:1])
    first = len(traces)
    sharded = with_runtime(algorithms.fedinit(counting_loss), execution=execution, num_devices=2)
    two, h2 = run(sharded, theta0, two_client_rounds)
    assert len(traces) == 2 * first  # one trace per run, not per round
    for x, y in zip(jax.tree.leaves(one), jax.tree.leaves(two)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-7)
    assert [h["train_loss"] for h in h1] == pytest.approx([h["train_loss"] for h in h2])


def test_uneven_split_over_devices_is_refused(linreg_rounds, theta0):
    algo = with_runtime(algorithms.fedinit(linreg_loss), num_devices=2)
    state = algo.init(params_from(theta0), num_clients=NUM_CLIENTS)
    ids, xs, ys, lr = linreg_rounds[0]  # 3 clients
    with pytest.raises(ValueError, match="split evenly"):
        check_round_input(algo, state, RoundInput(ids, (xs, ys), lr))
    with pytest.raises(ValueError, match="num_devices"):
        with_runtime(algorithms.fedinit(linreg_loss), num_devices=64)


def test_one_trace_for_three_rounds_and_stable_state(linreg_rounds, theta0):
    counting_loss, traces = counting(linreg_loss)

    algo = with_runtime(algorithms.fedinit(counting_loss), execution="sequential")
    state = algo.init(params_from(theta0), num_clients=NUM_CLIENTS)
    spec = jax.tree.map(lambda x: (x.shape, x.dtype), state)
    counts = []
    for t, (ids, xs, ys, lr) in enumerate(linreg_rounds):
        state, _ = algo.apply(state, RoundInput(ids, (xs, ys), float(lr)), jax.random.key(t))
        counts.append(len(traces))
        assert jax.tree.map(lambda x: (x.shape, x.dtype), state) == spec
    assert counts[0] > 0 and counts[0] == counts[1] == counts[2]  # traced once, in round 1


# ---------------------------------------------------------------- bad input

def _inp(ids, n=None, k=2, b=4):
    n = len(ids) if n is None else n
    return RoundInput(np.array(ids), (np.zeros((n, k, b, 3), np.float32),
                                      np.zeros((n, k, b), np.float32)), 0.1)


@pytest.mark.parametrize("kwargs, field", [
    ({"beta": float("nan")}, "beta"),
    ({"beta": float("inf")}, "beta"),
    ({"delta_from": "local"}, "delta_from"),
    ({"clip_norm": -1.0}, "clip_norm"),
    ({"weight_decay": float("nan")}, "weight_decay"),
    ({"server_lr": 0.0}, "server_lr"),
])
def test_bad_builder_arguments(kwargs, field):
    with pytest.raises(ValueError, match=field):
        algorithms.fedinit(linreg_loss, **kwargs)


@pytest.mark.parametrize("runtime, field", [
    ({"execution": "pmap"}, "execution"),
    ({"execution": "chunked", "chunk_size": 0}, "chunk_size"),
    ({"client_state_dtype": "int8"}, "client_state_dtype"),
    ({"devices": 2}, "devices"),
    ({"num_devices": 64}, "num_devices"),
])
def test_bad_runtime_options(runtime, field):
    with pytest.raises(ValueError, match=field):
        with_runtime(algorithms.fedinit(linreg_loss), **runtime)
    if "devices" not in runtime:  # a Runtime has no such field
        with pytest.raises(ValueError, match=field):  # the same check, given to the builder
            algorithms.fedinit(linreg_loss, runtime=Runtime(**runtime))
    with pytest.raises(ValueError, match="fedinit takes no option"):  # not a builder option
        algorithms.fedinit(linreg_loss, **runtime)


@pytest.mark.parametrize("inp, field", [
    (_inp([0, 1, 2, 3, 4, 5, 6]), "N must be <= C"),
    (_inp([0, 0, 1]), "duplicates"),
    (_inp([0, 9]), "out of range"),
    (_inp([-1, 2]), "out of range"),
    (_inp([0, 1], n=3), "leading axis"),
    (RoundInput(np.array([0, 1]), (np.zeros((2, 2, 4, 3)), np.zeros((2, 3, 4))), 0.1),
     "same leading"),
    (RoundInput(np.array([0, 1]), _inp([0, 1]).batches, float("nan")), "local_lr"),
    (RoundInput(np.array([[0, 1]]), _inp([0, 1]).batches, 0.1), "client_ids"),
])
def test_bad_round_input(theta0, inp, field):
    counting_loss, traces = counting(linreg_loss)

    algo = algorithms.fedinit(counting_loss)
    state = algo.init(params_from(theta0), num_clients=6)
    with pytest.raises(ValueError, match=field):
        check_round_input(algo, state, inp)
    assert not traces  # rejected before anything was traced or compiled


def test_bad_num_clients(theta0):
    with pytest.raises(ValueError, match="num_clients"):
        algorithms.fedavg(linreg_loss).init(params_from(theta0), num_clients=0)


def _bf16_rounded(tree):
    """What storing in bfloat16 and reading back in float32 gives (ml_dtypes, not the engine)."""
    return jax.tree.map(lambda x: jnp.asarray(np.asarray(x).astype(jnp.bfloat16)
                                              .astype(np.float32)), tree)


@pytest.mark.parametrize("name, rtol", [("scaffold", 1e-6), ("feddyn", 1e-2)])
def test_bf16_client_state_is_float32_engine_with_rounded_storage(linreg_rounds, theta0, name,
                                                                  rtol):
    """bf16 storage == the float32 engine whose per-client state is rounded to bf16 after
    every round; and it takes half the bytes. FedDyn's server reads every client's stored
    h_i, this round's rows already rounded (the reference rounds them after the round), so
    it agrees to bf16 precision only."""
    narrow = with_runtime(algorithms.get(name, linreg_loss, beta=0.1),
        client_state_dtype="bfloat16")
    wide = algorithms.get(name, linreg_loss, beta=0.1)
    state = narrow.init(params_from(theta0), num_clients=NUM_CLIENTS)
    ref = wide.init(params_from(theta0), num_clients=NUM_CLIENTS)
    per_client = (state.ri_rows, state.client_state)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(per_client))
    assert (sum(x.nbytes for x in jax.tree.leaves(per_client)) * 2
            == sum(x.nbytes for x in jax.tree.leaves((ref.ri_rows, ref.client_state))))
    for t, (ids, xs, ys, lr) in enumerate(linreg_rounds):
        key = jax.random.fold_in(jax.random.key(0), t)
        ref = ref._replace(ri_rows=_bf16_rounded(ref.ri_rows),
                           client_state=_bf16_rounded(ref.client_state))
        state, got = narrow.apply(state, RoundInput(ids, (xs, ys), lr), key)
        ref, want = wide.apply(ref, RoundInput(ids, (xs, ys), lr), key)
        np.testing.assert_allclose(float(got["train_loss"]), float(want["train_loss"]),
                                   rtol=rtol)
    np.testing.assert_allclose(flat(state.params), flat(ref.params), rtol=rtol, atol=rtol / 10)
    for a, b in zip(jax.tree.leaves(state.client_state), jax.tree.leaves(ref.client_state)):
        np.testing.assert_allclose(np.asarray(a, np.float32),
                                   np.asarray(_bf16_rounded(b), np.float32), rtol=rtol,
                                   atol=rtol / 10)
    # and it really is lossy: bf16 keeps 8 significant bits, float32 24
    assert not np.array_equal(np.asarray(state.ri_rows["w"], np.float32),
                              np.asarray(ref.ri_rows["w"]))


@pytest.mark.parametrize("change, says", [
    (lambda inp: inp._replace(local_lr=-0.1), "local_lr"),
    (lambda inp: inp._replace(local_lr=1e39), "local_lr"),
    (lambda inp: inp._replace(batches=(np.full_like(inp.batches[0], np.nan), inp.batches[1])),
     "NaN or inf"),
    (lambda inp: inp._replace(batches=jax.tree.map(lambda x: x[:, :0], inp.batches)), "K >= 1"),
    (lambda inp: inp._replace(batches=jax.tree.map(lambda x: x[:, :, :0], inp.batches)),
     "B >= 1"),
])
def test_bad_round_inputs_are_named(linreg_rounds, theta0, change, says):
    algo = algorithms.fedavg(linreg_loss)
    state = algo.init(params_from(theta0), num_clients=NUM_CLIENTS)
    ids, xs, ys, lr = linreg_rounds[0]
    with pytest.raises(ValueError, match=says):
        check_round_input(algo, state, change(RoundInput(ids, (xs, ys), lr)))


def test_state_of_another_algorithm_and_integer_params(linreg_rounds, theta0):
    ids, xs, ys, lr = linreg_rounds[0]
    scaffold_state = algorithms.scaffold(linreg_loss).init(params_from(theta0), NUM_CLIENTS)
    with pytest.raises(ValueError, match="state.server_state does not match this algorithm"):
        check_round_input(algorithms.fedcm(linreg_loss), scaffold_state,
                          RoundInput(ids, (xs, ys), lr))
    with pytest.raises(ValueError, match="every leaf must be a float"):
        algorithms.fedavg(linreg_loss).init({"w": np.zeros(3, np.int32)}, num_clients=2)


def test_numpy_scalars_are_accepted():
    algo = algorithms.fedinit(linreg_loss, beta=np.float32(0.1), weight_decay=np.float64(1e-3))
    assert float(algo.init({"w": jnp.zeros(2)}, num_clients=2).beta) == pytest.approx(0.1)
    algorithms.fedcm(linreg_loss, alpha=np.float32(0.5))


@pytest.mark.parametrize("name", ["fedavg", "fedadam", "scaffold"])
def test_donated_state_gives_the_same_rounds_and_is_consumed(linreg_rounds, theta0, name):
    """with_runtime(donate_state=True): the same numbers as without; the state passed in is
    deleted (its buffers were reused), never the caller's params; FedAdam's m and v (equal
    zeros at init) are separate buffers, so donating them is allowed."""
    params = params_from(theta0)
    plain = algorithms.get(name, linreg_loss, **with_ri(name))
    donating = with_runtime(algorithms.get(name, linreg_loss, **with_ri(name)), donate_state=True)
    a = plain.init(params, num_clients=5)
    b = donating.init(params, num_clients=5)
    for t, (ids, xs, ys, lr) in enumerate(linreg_rounds):
        old = b
        a, _ = plain.apply(a, RoundInput(ids, (xs, ys), lr), jax.random.key(t))
        b, _ = donating.apply(b, RoundInput(ids, (xs, ys), lr), jax.random.key(t))
        assert old.ri_rows["w"].is_deleted()
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert not params["w"].is_deleted()


def test_init_says_when_every_round_would_copy_large_client_tables(monkeypatch):
    """The README's API path at large C: init warns in one line that each apply copies the
    [C, ...] tables unless the state is donated (or a client store holds the clients);
    with donation nothing is said."""
    import warnings

    from fedinit_jax import federated_round, with_runtime

    monkeypatch.setattr(federated_round, "COPY_WARNING_BYTES", 1000)
    algo = algorithms.fedinit(linreg_loss)
    with pytest.warns(UserWarning, match=r"every algo.apply copies them: donate the state"):
        algo.init(params_from(np.zeros(4)), num_clients=100)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with_runtime(algo, donate_state=True).init(params_from(np.zeros(4)), num_clients=100)
        algo.init(params_from(np.zeros(4)), num_clients=10)  # 10 x 4 floats: below it
