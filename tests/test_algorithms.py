"""Every baseline against the independent numpy reference; identities; bad hyperparameters."""
import jax
import numpy as np
import optax
import pytest
from conftest import NUM_CLIENTS, flat, linreg_loss, params_from
from numpy_reference import simulate
from test_core import assert_matches, run

from fedinit_jax import RoundInput, algorithms

# (registry name, library hyperparameters, reference keyword arguments); strengths are
# large so that a 1% error in any correction term moves the result past the 1e-5 tolerance.
CASES = [
    ("fedadam", {"server_lr": 0.1}, {"server_lr": 0.1}),
    ("fedsam", {"rho": 0.5}, {"rho": 0.5}),
    ("scaffold", {}, {}),
    ("feddyn", {"lam": 1.0}, {"lam": 1.0}),
    ("fedcm", {"alpha": 0.5}, {"alpha": 0.5}),
    ("fedprox", {"mu": 1.0}, {"mu": 1.0}),
    ("fedspeed", {"rho": 0.5, "lam": 1.0}, {"rho": 0.5, "lam": 1.0}),
    ("fedspeed", {"rho": 0.0, "lam": 1.0}, {"rho": 0.0, "lam": 1.0}),
    ("fedgamma", {"rho": 0.5}, {"rho": 0.5}),
    ("fedgamma", {"rho": 0.0}, {"rho": 0.0}),
    ("mofedsam", {"rho": 0.5, "alpha": 0.5}, {"rho": 0.5, "alpha": 0.5}),
    ("mofedsam", {"rho": 0.0, "alpha": 0.5}, {"rho": 0.0, "alpha": 0.5}),
    ("fedsmoo", {"rho": 0.5, "lam": 1.0}, {"rho": 0.5, "lam": 1.0}),
    ("fedsmoo", {"rho": 0.0, "lam": 1.0}, {"rho": 0.0, "lam": 1.0}),
]


@pytest.mark.parametrize("delta_from", ["global", "start"])
@pytest.mark.parametrize("beta", [0.0, 0.1])
@pytest.mark.parametrize("name, hparams, ref_kwargs", CASES,
                         ids=[f"{c[0]}-rho{c[1].get('rho', '')}" for c in CASES])
def test_matches_numpy_reference(linreg_rounds, theta0, name, hparams, ref_kwargs, beta,
                                 delta_from):
    algo = algorithms.get(name, linreg_loss, beta=beta, delta_from=delta_from, clip_norm=1.0,
                          weight_decay=1e-3, **hparams)
    state, history = run(algo, theta0, linreg_rounds)
    ref = simulate(name, theta0, NUM_CLIENTS, linreg_rounds, beta=beta, delta_from=delta_from,
                   clip=1.0, wd=1e-3, **ref_kwargs)
    assert ref["clipped_steps"] > 0  # the authors' clip form is exercised, not bypassed
    assert_matches(state, history, ref)
    assert_states_match(name, state, ref)
    if name == "fedadam":
        m, v = state.server_opt_state[0]
        np.testing.assert_allclose(flat(m), -ref["m"], atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(flat(v), ref["v"], atol=1e-6, rtol=1e-5)


# every algorithm's own state, read by field name: (server state, per-client state) parts
STATE_PARTS = {
    "scaffold": {"c": lambda s: s.server_state.c, "c_i": lambda s: s.client_state.c_i},
    "fedgamma": {"c": lambda s: s.server_state.base.c, "c_i": lambda s: s.client_state.base.c_i},
    "feddyn": {"h_i": lambda s: s.client_state.h},
    "fedspeed": {"h_i": lambda s: s.client_state.base.h},
    "fedcm": {"d": lambda s: s.server_state.d},
    "mofedsam": {"d": lambda s: s.server_state.base.d},
    "fedsmoo": {"s": lambda s: s.server_state.extra.s, "h_i": lambda s: s.client_state.base.h,
                "mu_i": lambda s: s.client_state.extra.mu},
}


def assert_states_match(name, state, ref):
    """Each state the algorithm keeps equals the numpy reference's (c, c_i, h_i, d, s, mu_i)."""
    for key, part in STATE_PARTS.get(name, {}).items():
        got = stacked(part(state)) if key.endswith("_i") else flat(part(state))
        np.testing.assert_allclose(got, ref[key], atol=1e-5, rtol=1e-5, err_msg=key)


def stacked(params):
    """[C, d+1] rows of a stacked {'w', 'b'} pytree."""
    return np.concatenate([np.asarray(params["w"]), np.asarray(params["b"])[:, None]], axis=1)


def _assert_same(a, b, atol=0.0):
    np.testing.assert_allclose(flat(a.params), flat(b.params), rtol=0, atol=atol)
    for x, y in zip(jax.tree.leaves(a.client_params), jax.tree.leaves(b.client_params)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=0, atol=atol)


@pytest.mark.parametrize("name, hparams", [
    ("fedsam", {"rho": 0.0}), ("fedprox", {"mu": 0.0}), ("fedcm", {"alpha": 1.0})])
@pytest.mark.parametrize("beta", [0.0, 0.1])
def test_zero_strength_equals_fedavg(linreg_rounds, theta0, name, hparams, beta):
    ref, _ = run(algorithms.fedavg(linreg_loss, beta=beta), theta0, linreg_rounds)
    got, _ = run(algorithms.get(name, linreg_loss, beta=beta, **hparams), theta0, linreg_rounds)
    _assert_same(ref, got, atol=1e-7)


@pytest.mark.parametrize("name, base, hparams", [
    ("fedspeed", "feddyn", {"lam": 0.1}), ("fedgamma", "scaffold", {}),
    ("mofedsam", "fedcm", {"alpha": 0.1})])
@pytest.mark.parametrize("beta", [0.0, 0.1])
def test_sam_family_with_rho_zero_reduces(linreg_rounds, theta0, name, base, hparams, beta):
    ref, _ = run(algorithms.get(base, linreg_loss, beta=beta, **hparams), theta0, linreg_rounds)
    got, _ = run(algorithms.get(name, linreg_loss, beta=beta, rho=0.0, **hparams), theta0,
                 linreg_rounds)
    _assert_same(ref, got, atol=1e-7)


def test_fedadam_with_sgd1_server_is_fedavg(linreg_rounds, theta0):
    """FedAdam is FedAvg with an optax server optimizer: swapping in sgd(1) gives FedAvg."""
    ref, _ = run(algorithms.fedavg(linreg_loss, beta=0.1), theta0, linreg_rounds)
    got, _ = run(algorithms.fedavg(linreg_loss, beta=0.1, server_optimizer=optax.sgd(1.0)),
                 theta0, linreg_rounds)
    _assert_same(ref, got)


def test_scaffold_first_round_equals_fedavg(linreg_rounds, theta0):
    one_round = linreg_rounds[:1]
    ref, _ = run(algorithms.fedavg(linreg_loss), theta0, one_round)
    got, _ = run(algorithms.scaffold(linreg_loss), theta0, one_round)
    _assert_same(ref, got, atol=1e-7)
    later, _ = run(algorithms.scaffold(linreg_loss), theta0, linreg_rounds)
    ref_later, _ = run(algorithms.fedavg(linreg_loss), theta0, linreg_rounds)
    assert np.max(np.abs(flat(later.params) - flat(ref_later.params))) > 1e-4


@pytest.mark.parametrize("name, bad", [
    ("fedsam", {"rho": -0.1}), ("fedcm", {"alpha": 1.5}), ("fedcm", {"alpha": -0.1}),
    ("feddyn", {"lam": -1.0}), ("fedprox", {"mu": -0.01}), ("fedadam", {"b1": 1.0}),
    ("fedadam", {"eps": 0.0}), ("fedadam", {"server_lr": -0.1}), ("fedsam", {"rho": float("nan")}),
    ("fedspeed", {"rho": -1.0}), ("fedspeed", {"lam": -1.0}), ("fedsmoo", {"rho": -0.1}),
    ("fedgamma", {"rho": -0.1}), ("mofedsam", {"alpha": 2.0}),
])
def test_bad_hyperparameters(name, bad):
    field = next(iter(bad))
    with pytest.raises(ValueError, match=field):
        algorithms.get(name, linreg_loss, **bad)


def test_unknown_algorithm():
    with pytest.raises(ValueError, match="registered: fedavg"):
        algorithms.get("fedfoo", linreg_loss)


def test_every_registered_name_takes_beta_and_delta_from(linreg_rounds, theta0):
    ids, xs, ys, lr = linreg_rounds[0]
    for name in algorithms.REGISTRY:
        algo = algorithms.get(name, linreg_loss, beta=0.1, delta_from="start")
        state = algo.init(params_from(theta0), num_clients=NUM_CLIENTS)
        state, _ = algo.apply(state, RoundInput(ids, (xs, ys), lr), jax.random.key(0))
        assert float(state.beta) == pytest.approx(0.1)


def fedavgm(loss_fn, *, server_lr: float = 1.0, momentum: float = 0.9, **options):
    """docs/algorithms.md's worked example, verbatim: FedAvg with server momentum."""
    import optax

    from fedinit_jax.checks import check_number

    check_number("momentum", momentum, 0.0, 1.0, high_open=True)
    return algorithms.fedavg(loss_fn, server_optimizer=optax.sgd(server_lr, momentum),
                             **options)


def test_a_new_algorithm_is_one_registry_line(monkeypatch, linreg_rounds, theta0):
    """One REGISTRY entry gives the config field, its default, validation, the display name
    and a working algorithm; two rounds of server momentum match a hand computation."""
    from experiments import results
    from experiments.configs import default
    from fedinit_jax import experiment

    monkeypatch.setitem(algorithms.REGISTRY, "fedavgm",
                        algorithms.Entry(fedavgm, "FedAvgM", 0.998, "Hsu et al. 2019"))
    assert algorithms.REGISTRY["fedavgm"].defaults == {"beta": 0.0, "server_lr": 1.0,
                                                      "momentum": 0.9}
    config = default.get_config()
    assert "momentum" in config and config.momentum is None
    config.algorithm, config.momentum = "fedavgm", 0.5
    experiment.validate(config)
    assert experiment.algorithm_kwargs(config)["momentum"] == 0.5
    config.algorithm = "fedavg"  # FedAvg does not take it: named
    with pytest.raises(ValueError, match="config.momentum=0.5: is not a hyperparameter"):
        experiment.validate(config)
    assert results.base_name({"algorithm": "fedavgm"}) == "FedAvgM"
    # server momentum by hand (beta = 0: a round's delta depends only on w):
    # m1 = -d1, w1 = w0 + d1;  m2 = 0.5 m1 - d2, w2 = w1 - m2 = w1 + 0.5 d1 + d2
    def fedavg_delta(w, t):
        ids, xs, ys, lr = linreg_rounds[t]
        algo = algorithms.get("fedavg", linreg_loss)
        state = algo.init(params_from(w), num_clients=NUM_CLIENTS)
        state, _ = algo.apply(state, RoundInput(ids, (xs, ys), lr), jax.random.key(t))
        return flat(state.params) - w

    d1 = fedavg_delta(theta0, 0)
    d2 = fedavg_delta(theta0 + d1, 1)
    algo = algorithms.get("fedavgm", linreg_loss, momentum=0.5)
    state = algo.init(params_from(theta0), num_clients=NUM_CLIENTS)
    for t, (ids, xs, ys, lr) in enumerate(linreg_rounds[:2]):
        state, _ = algo.apply(state, RoundInput(ids, (xs, ys), lr), jax.random.key(t))
    np.testing.assert_allclose(flat(state.params), theta0 + d1 + 0.5 * d1 + d2, atol=1e-5)
