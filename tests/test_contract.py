"""The contract every registered algorithm keeps, on a tiny MLP with image batches (uint8,
augmented: the image task's loss); the convolutions have their own tests (test_conv.py)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import counting, linreg_loss, with_ri

from experiments import metrics
from fedinit_jax import RoundInput, algorithms, losses, models, with_runtime

NUM_CLIENTS, N, K, B = 4, 2, 2, 4


@pytest.fixture(scope="module")
def cnn_task():
    model = models.get("mlp", num_classes=10, width=0.125)
    params = model.init(jax.random.key(0), (8, 8, 3))
    loss_fn = losses.classification_loss(model.apply, [0.5] * 3, [0.25] * 3, augment=True)
    rng = np.random.default_rng(0)
    rounds = []
    for t in range(3):
        ids = np.sort(rng.choice(NUM_CLIENTS, N, replace=False)).astype(np.int32)
        images = rng.integers(0, 256, (N, K, B, 8, 8, 3), dtype=np.uint8)
        labels = rng.integers(0, 10, (N, K, B)).astype(np.int32)
        rounds.append(RoundInput(ids, (images, labels), np.float32(0.1 * 0.998 ** t)))
    return loss_fn, params, rounds


def _run(name, loss_fn, params, rounds, **runtime):
    counting_loss, traces = counting(loss_fn)

    algo = with_runtime(algorithms.get(name, counting_loss, **with_ri(name)), **runtime)
    state = algo.init(params, num_clients=NUM_CLIENTS)
    spec = jax.tree.map(lambda x: (x.shape, x.dtype), state)
    counts, history = [], []
    for t, inp in enumerate(rounds):
        state, m = algo.apply(state, inp, jax.random.fold_in(jax.random.key(1), t))
        counts.append(len(traces))
        history.append(m)
        assert jax.tree.map(lambda x: (x.shape, x.dtype), state) == spec
    assert counts[0] > 0 and counts[0] == counts[-1], f"{name} retraced: {counts}"
    return state, history


@pytest.mark.parametrize("name", list(algorithms.REGISTRY))
def test_contract(cnn_task, name):
    loss_fn, params, rounds = cnn_task
    state, history = _run(name, loss_fn, params, rounds, execution="vmap")
    for leaf in jax.tree.leaves(state):
        assert np.all(np.isfinite(np.asarray(leaf))), name
    for m in history:
        assert set(m) == {"train_loss", "divergence"}  # Delta^t: evaluation rounds only
        assert all(np.isfinite(float(v)) for v in m.values())


@pytest.mark.parametrize("name", list(algorithms.REGISTRY))
def test_declared_storage_is_the_states_own(name):
    """Costs.client_state / server_state (Table 9's storage) name exactly the model-sized
    vectors the algorithm's FedState keeps (jax.eval_shape of init: fedinit_jax.costs), and
    the stored bytes follow the runtime's client_state_dtype."""
    from fedinit_jax import Runtime
    from fedinit_jax.costs import state_costs

    params = {"w": jnp.zeros(9), "b": jnp.zeros(())}  # d = 10: a step count is no vector
    declared = algorithms.REGISTRY[name].costs
    measured = state_costs(algorithms.get(name, linreg_loss), params)
    assert measured.d == 10
    assert measured.client_vectors == 1 + len(declared.client_state)  # w_i and its state
    assert measured.server_vectors == 1 + len(declared.server_state)  # w and the server's
    assert measured.per_client_bytes == 4 * 10 * measured.client_vectors
    half = state_costs(algorithms.get(name, linreg_loss, runtime=Runtime(
        client_state_dtype="bfloat16")), params)
    assert half.per_client_bytes == measured.per_client_bytes // 2


def test_table9_ratios_from_declared_costs():
    """Paper Table 9: communication (downlink) and per-client storage ratios to FedAvg."""
    names = ["fedavg", "fedadam", "fedsam", "scaffold", "feddyn", "fedcm", "fedinit"]
    rows = metrics.cost_table({n: algorithms.REGISTRY[n].costs for n in names},
                              num_params=100, clients_per_round=10, num_clients=100)
    got = {r["method"]: (r["down_ratio"], r["storage_ratio"]) for r in rows}
    paper = {"fedavg": (1, 1), "fedadam": (1, 2), "fedsam": (1, 2), "scaffold": (2, 2),
             "feddyn": (1, 2), "fedcm": (2, 2), "fedinit": (1, 1)}
    # Communication matches for all seven. Storage differs for FedAdam only: its m and v live
    # on the server (server_storage 3d), so each client stores only its model (1x, paper 2x).
    assert {n: g[0] for n, g in got.items()} == {n: p[0] for n, p in paper.items()}
    assert {n: g[1] for n, g in got.items() if n != "fedadam"} == {
        n: p[1] for n, p in paper.items() if n != "fedadam"}
    assert got["fedadam"][1] == 1
    assert next(r for r in rows if r["method"] == "fedadam")["server_storage_floats"] == 300
    assert next(r for r in rows if r["method"] == "scaffold")["up_ratio"] == 2
