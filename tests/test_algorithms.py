"""Every baseline against the independent numpy reference; identities; bad hyperparameters."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import (
    CASES,
    NUM_CLIENTS,
    STATEFUL_SERVERS,
    assert_matches,
    assert_states_match,
    flat,
    linreg_loss,
    params_from,
    planned_run,
    ri_cases,
    ri_options,
    run,
)
from numpy_reference import simulate

from fedinit_jax import Cohort, RoundInput, algorithms, client_store, experiment


@pytest.mark.parametrize("name, hparams, ref_kwargs, beta, delta_from", ri_cases(CASES))
def test_matches_numpy_reference(linreg_rounds, theta0, name, hparams, ref_kwargs, beta,
                                 delta_from):
    algo = algorithms.get(name, linreg_loss, clip_norm=1.0, weight_decay=1e-3, **hparams,
                          **ri_options(name, beta, delta_from))
    state, history = run(algo, theta0, linreg_rounds)
    ref = simulate(name, theta0, NUM_CLIENTS, linreg_rounds, beta=beta, delta_from=delta_from,
                   clip=1.0, wd=1e-3, **ref_kwargs)
    assert ref["clipped_steps"] > 0  # the authors' clip form is exercised, not bypassed
    assert_matches(state, history, ref)
    assert_states_match(name, state, ref)
    if name == "fedavgm":  # the server momentum, as Hsu et al.'s numpy loop
        np.testing.assert_allclose(flat(state.server_opt_state[0].trace), ref["m"], atol=1e-5,
                                   rtol=1e-5)
    elif name in STATEFUL_SERVERS:  # the moments, as the paper's (Adam / Yogi) numpy loop
        m, v = state.server_opt_state[0]
        np.testing.assert_allclose(flat(m), -ref["m"], atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(flat(v), ref["v"], atol=1e-6, rtol=1e-5)


def _assert_same(a, b, atol=0.0):
    np.testing.assert_allclose(flat(a.params), flat(b.params), rtol=0, atol=atol)
    for x, y in zip(jax.tree.leaves(a.ri_rows), jax.tree.leaves(b.ri_rows)):
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


@pytest.mark.parametrize("name", [n for n, e in algorithms.REGISTRY.items()
                                  if "server_optimizer" in e.options])
def test_every_server_step_takes_an_optax_server_optimizer(linreg_rounds, theta0, name):
    """server_optimizer replaces sgd(server_lr): sgd(0.5) is server_lr=0.5 exactly, and
    momentum (a stateful optimizer) moves w elsewhere than plain SGD."""
    rounds = linreg_rounds[:2]
    by_lr, _ = run(algorithms.get(name, linreg_loss, beta=0.1, server_lr=0.5), theta0, rounds)
    by_opt, _ = run(algorithms.get(name, linreg_loss, beta=0.1,
                                   server_optimizer=optax.sgd(0.5)), theta0, rounds)
    _assert_same(by_lr, by_opt)
    heavy, _ = run(algorithms.get(name, linreg_loss, beta=0.1, delta_from="start",
                                  server_optimizer=optax.sgd(0.5, momentum=0.9)), theta0, rounds)
    by_lr, _ = run(algorithms.get(name, linreg_loss, beta=0.1, server_lr=0.5,
                                  delta_from="start"), theta0, rounds)
    assert np.max(np.abs(flat(heavy.params) - flat(by_lr.params))) > 1e-4


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


@pytest.mark.parametrize("name", [name for name, entry in algorithms.REGISTRY.items()
                                  if "ri_offset" in entry.options])
def test_every_registered_algorithm_starts_clients_from_the_relaxed_initialization(name):
    """+RI is the `beta` of every builder that takes an RI rule (FedACG's start is its own,
    the lookahead): a client whose last model w_i differs from w starts its first local step
    at w + beta (w - w_i) (Algorithm 1 line 6), recorded in the loss."""
    starts = []

    def recording_loss(params, batch, key):
        jax.debug.callback(lambda w: starts.append(np.asarray(w)), params["w"])
        return linreg_loss(params, batch, key)

    start = {"delta_from": "start"} if name in STATEFUL_SERVERS else {}  # refuse `global`
    algo = algorithms.get(name, recording_loss, beta=0.3, weight_decay=None, clip_norm=None,
                          **start)
    w = np.array([0.3, -0.2, 0.1, 0.05])
    state = algo.init(params_from(w), num_clients=NUM_CLIENTS)
    w_i = np.random.default_rng(1).normal(size=(NUM_CLIENTS, w.size)).astype(np.float32)
    state = state._replace(ri_rows={"w": jax.numpy.asarray(w_i[:, :-1]),
                                          "b": jax.numpy.asarray(w_i[:, -1])})
    x = np.ones((1, 1, 2, 3), np.float32)  # one client (id 2), one step: one first call
    state, _ = algo.apply(state, RoundInput(np.array([2]), (x, np.zeros((1, 1, 2), np.float32)),
                                            0.1), jax.random.key(0))
    want = w + 0.3 * (w - w_i[2])
    np.testing.assert_allclose(np.ravel(starts[0]), want[:-1], rtol=1e-6)


def test_a_new_algorithm_is_one_registry_line(linreg_rounds, theta0):
    """docs/algorithms.md's worked example (fedinit_jax/algorithms/fedavgm.py): its one
    REGISTRY entry gives the config field, its default, validation, the display name and a
    working algorithm; two rounds of server momentum match a hand computation."""
    from experiments import results
    from experiments.configs import default

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


def test_stateful_server_optimizer_with_global_ri_is_refused_and_why(linreg_rounds, theta0):
    """FedInit's `global` aggregation puts the RI offset beta mean_S(w - w_i) into the
    pseudo-gradient; a server optimizer with state accumulates it (Adam normalises it to a
    full step per coordinate). Shown on the linear problem: with `start` FedAdam+RI stays
    near FedAdam, with `global` (built by hand, below the refusal) w runs away."""
    for build in (lambda: algorithms.fedadam(linreg_loss, beta=0.1),
                  lambda: algorithms.fedinit(linreg_loss, server_optimizer=optax.adam(0.1)),
                  lambda: algorithms.fedavg(linreg_loss, beta=0.1,
                                            server_optimizer=optax.sgd(1.0, momentum=0.9))):
        with pytest.raises(ValueError, match="delta_from='global' with beta=0.1: the server "
                                             "optimizer keeps state"):
            build()
    # stateless steps and beta = 0 stay allowed
    algorithms.fedinit(linreg_loss, server_optimizer=optax.sgd(0.5))
    algorithms.fedadam(linreg_loss)
    algorithms.fedadam(linreg_loss, beta=0.1, delta_from="start")
    from fedinit_jax.builder import algorithm_of
    from fedinit_jax.correction import NONE
    from fedinit_jax.federated_round import RoundSpec
    from fedinit_jax.types import DEFAULT_RUNTIME

    # 20 clients of different linear targets, 5 a round, local progress small next to the
    # RI offset (eta_l 0.005): the regime where the offset dominates the pseudo-gradient
    targets = np.random.default_rng(0).normal(size=(20, 10)).astype(np.float32)
    late_loss = {}
    for delta_from in ("start", "global"):
        spec = RoundSpec(linreg_loss, NONE, delta_from, optax.adam(0.1), None, None, None,
                         beta=0.1)
        algo = algorithm_of(spec, DEFAULT_RUNTIME)
        state = algo.init({"w": np.zeros(10, np.float32), "b": np.zeros((), np.float32)}, 20)
        losses = []
        for t in range(120):
            rng = np.random.default_rng([t])
            ids = rng.choice(20, 5, replace=False)
            x = rng.normal(size=(5, 5, 8, 10)).astype(np.float32)
            y = np.einsum("nkbd,nd->nkb", x, targets[ids])
            state, metrics = algo.apply(state, RoundInput(ids, (x, y), np.float32(0.005)),
                                        jax.random.key(t))
            losses.append(float(metrics["train_loss"]))
        late_loss[delta_from] = np.mean(losses[-40:])
    assert late_loss["global"] > 1.2 * late_loss["start"], late_loss


def test_beta_lives_in_the_state(linreg_rounds, theta0):
    """The round reads state.beta only; the builder's beta is what init writes there, so
    fedavg and fedinit make one round, and a state's beta is checked where it is read."""
    import jax.numpy as jnp

    import fedinit_jax
    from fedinit_jax import check_state, replicas

    def rounds_from(algo, state):
        for t, (ids, xs, ys, lr) in enumerate(linreg_rounds):
            state, _ = algo.apply(state, RoundInput(ids, (xs, ys), lr), jax.random.key(t))
        return flat(state.params)

    fedavg, fedinit = algorithms.fedavg(linreg_loss), algorithms.fedinit(linreg_loss, beta=0.1)
    params = params_from(theta0)
    fedavg_state, fedinit_state = (fedavg.init(params, NUM_CLIENTS),
                                   fedinit.init(params, NUM_CLIENTS))
    assert float(fedavg_state.beta) == 0.0 and float(fedinit_state.beta) == np.float32(0.1)
    sequential = fedinit_jax.with_runtime(fedinit, execution="sequential")
    assert float(sequential.init(params, NUM_CLIENTS).beta) == np.float32(0.1)
    w_fedinit = rounds_from(fedinit, fedinit_state)
    np.testing.assert_array_equal(rounds_from(fedavg, fedinit_state), w_fedinit)
    np.testing.assert_array_equal(
        rounds_from(fedavg, fedavg_state._replace(beta=jnp.float32(0.1))), w_fedinit)
    assert not np.allclose(rounds_from(fedinit, fedavg_state), w_fedinit)
    # RI + global + a stateful server optimizer, refused at build, is refused in a state too
    adam = algorithms.fedavg(linreg_loss, server_optimizer=optax.adam(0.1))
    state = adam.init(params, NUM_CLIENTS)
    check_state(adam, state)
    with pytest.raises(ValueError, match="delta_from='global' with beta=0.1: the server "
                                         "optimizer keeps state"):
        check_state(adam, state._replace(beta=jnp.float32(0.1)))
    with pytest.raises(ValueError, match="delta_from='global' with beta=0.05"):
        replicas.init(adam, params, NUM_CLIENTS, betas=[0.0, 0.05])


def test_options_a_builder_would_ignore_are_refused():
    with pytest.raises(ValueError, match="server_lr=0.5: server_optimizer replaces"):
        algorithms.fedavg(linreg_loss, server_lr=0.5, server_optimizer=optax.sgd(0.1))
    with pytest.raises(ValueError, match="server_lr=-1"):
        algorithms.fedavg(linreg_loss, server_lr=-1, server_optimizer=optax.sgd(0.1))
    for name in ("feddyn", "fedspeed", "fedsmoo"):
        with pytest.raises(ValueError, match=f"{name} takes no option delta_from"):
            algorithms.get(name, linreg_loss, delta_from="start")
    with pytest.raises(ValueError, match="loss_fn=None: must be a callable"):
        algorithms.fedavg(None)
    algo = algorithms.fedinit(linreg_loss, beta=np.array(0.1))  # a 0-d array is a number
    assert float(algo.init({"w": np.zeros(3, np.float32)}, 2).beta) == pytest.approx(0.1)


@pytest.mark.parametrize("first_visit", ["init", "global"])
def test_first_visit_decides_where_a_new_client_starts(first_visit):
    """Client 2 is new in round 1 and starts from w + beta (w - w^0) (Algorithm 1, "init")
    or from w ("global"); client 3, sampled in round 1, starts from w + beta (w - w_3) in
    round 2 under both."""
    starts = []

    def recording_loss(params, batch, key):
        jax.debug.callback(lambda w: starts.append(np.asarray(w)), params["w"])
        return linreg_loss(params, batch, key)

    algo = algorithms.fedinit(recording_loss, beta=0.3, first_visit=first_visit,
                              weight_decay=None, clip_norm=None)
    w0 = np.array([0.3, -0.2, 0.1, 0.05])
    state = algo.init(params_from(w0), num_clients=NUM_CLIENTS)
    shifted = params_from(w0 + 1.0)  # w moved away from w^0, as after some rounds
    state = state._replace(params=shifted)
    x = np.ones((1, 1, 2, 3), np.float32)
    batch = (x, np.zeros((1, 1, 2), np.float32))
    state, _ = algo.apply(state, RoundInput(np.array([2]), batch, 0.1), jax.random.key(0))
    w = np.asarray(shifted["w"])
    want = w if first_visit == "global" else w + 0.3 * (w - w0[:-1])
    np.testing.assert_allclose(np.ravel(starts[0]), want, rtol=1e-6)
    assert np.asarray(state.client_visited).tolist() == [i == 2 for i in range(NUM_CLIENTS)]
    w1, w_2 = np.asarray(state.params["w"]), np.asarray(state.ri_rows["w"][2])
    starts.clear()
    algo.apply(state, RoundInput(np.array([2]), batch, 0.1), jax.random.key(1))
    np.testing.assert_allclose(np.ravel(starts[0]), w1 + 0.3 * (w1 - w_2), rtol=1e-6)


@pytest.mark.parametrize("name, ri_offset", [("fedinit", "next"), ("fedinit", "drift"),
                                             ("fedinit", "momentum"), ("fedinit", "shared"),
                                             ("scaffold", "next"), ("scaffold", "shared")])
def test_offset_rules_match_the_numpy_reference(name, ri_offset, theta0, linreg_rounds):
    """ri_offset="next" (w_i0 = w + beta (w^{tau_i+1} - w_i)), "drift" (w + beta (w^{tau_i}
    - w_i)), "momentum" (w + beta (w^{tau_i+1} - w_i + m^t)) and "shared" (w + beta m^t)
    against the plain-numpy loop: w, the stored offsets (and m^t), every round's metrics and
    the mean squared offset that divergence_all reports; "model" is Algorithm 1 (the other
    tests). An offset rule without first_visit="global" is refused."""
    from fedinit_jax.federated_round import divergence_all

    beta = 0.3
    algo = algorithms.get(name, linreg_loss, beta=beta, ri_offset=ri_offset,
                          first_visit="global", clip_norm=None, weight_decay=None)
    state, history = run(algo, theta0, linreg_rounds)
    ref = simulate("fedavg" if name == "fedinit" else name, theta0, NUM_CLIENTS, linreg_rounds,
                   beta=beta, ri_offset=ri_offset)
    np.testing.assert_allclose(flat(state.params), ref["w"], rtol=1e-5, atol=1e-6)
    rows = np.concatenate([np.asarray(state.ri_rows["w"]),
                           np.asarray(state.ri_rows["b"])[:, None]], axis=1)
    np.testing.assert_allclose(rows, ref["w_local"], rtol=1e-5, atol=1e-6)
    if ri_offset in ("momentum", "shared"):
        np.testing.assert_allclose(flat(state.ri_state), ref["ri_state"], rtol=1e-5, atol=1e-6)
    else:
        assert state.ri_state == ()
    for got, want in zip(history, ref["history"], strict=True):
        for field in ("train_loss", "divergence"):
            assert got[field] == pytest.approx(want[field], rel=1e-5, abs=1e-7), field
    delta = divergence_all(state.ri_rows, algo.spec.ri_offset.measured_from(state.params))
    assert float(delta) == pytest.approx(ref["history"][-1]["divergence_all"], rel=1e-5)
    for store in (client_store.DeviceStore(algo, params_from(theta0), NUM_CLIENTS),
                  client_store.HostStore(algo, params_from(theta0), NUM_CLIENTS)):
        # a store measures what the binaries report from the global model, as docs/api.md
        store.scatter(np.arange(NUM_CLIENTS), Cohort(state.ri_rows, state.client_state,
                                                     state.client_visited))
        assert store.divergence_all(state.params) == pytest.approx(
            ref["history"][-1]["divergence_all"], rel=1e-5), type(store).__name__
    model = simulate("fedavg" if name == "fedinit" else name, theta0, NUM_CLIENTS,
                     linreg_rounds, beta=beta)
    assert not np.allclose(ref["w"], model["w"])  # the rule changes the run
    with pytest.raises(ValueError, match="pass first_visit='global'"):
        algorithms.get(name, linreg_loss, ri_offset=ri_offset)


def test_a_seventh_offset_rule_plugs_in(tmp_path, monkeypatch, theta0, linreg_rounds):
    """A rule written here, o_i = w - s^t with s^t = (s^{t-1} + w^t) / 2 a running average of
    the global models kept on the server, registered by name: it matches its numpy reference
    (w, its server state, the rows) and runs under the binaries' run loop, checkpointed."""
    from conftest import QUIET, quiet_config
    from numpy_reference import NumpyRule

    from fedinit_jax import ri_offset

    def halfway(s, step):
        return jax.tree.map(lambda a, b: 0.5 * (a + b), s, step.w_new)

    def ahead(w, rows, visited, s):
        return jax.tree.map(lambda a, b, r: jnp.broadcast_to(a - b, r.shape), w, s, rows)

    monkeypatch.setattr(ri_offset, "RULES", dict(ri_offset.RULES))
    ri_offset.register(ri_offset.NEXT._replace(name="average", offset=ahead,
                                               init=lambda p: p, update=halfway))
    reference = NumpyRule(first_row=np.zeros_like, offset=lambda w, row, s: w - s,
                          stored=lambda w_old, w_new, end: w_new - end, init=np.copy,
                          update=lambda s, w_old, w_new, *_: 0.5 * (s + w_new))
    algo = algorithms.fedinit(linreg_loss, beta=0.3, ri_offset="average", first_visit="global",
                              clip_norm=None, weight_decay=None)
    state, _ = run(algo, theta0, linreg_rounds)
    ref = simulate("fedavg", theta0, NUM_CLIENTS, linreg_rounds, beta=0.3, ri_offset=reference)
    for got, want in ((state.params, ref["w"]), (state.ri_state, ref["ri_state"])):
        np.testing.assert_allclose(flat(got), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.concatenate([np.asarray(state.ri_rows["w"]), np.asarray(
        state.ri_rows["b"])[:, None]], axis=1), ref["w_local"], rtol=1e-5, atol=1e-6)
    config = quiet_config(algorithm="fedinit", beta=0.1, ri_offset="average",
                          first_visit="global", checkpoint_every=2)
    done = planned_run(config, str(tmp_path), **QUIET)
    assert [r["round"] for r in done] == [1, 2, 3, 4]
    assert all(np.isfinite(r["train_loss"]) for r in done)


@pytest.mark.parametrize("beta, mu, clip", [(0.85, 0.1, 1.0), (0.5, 0.0, None)])
def test_fedacg_matches_the_numpy_reference(beta, mu, clip, theta0, linreg_rounds):
    """FedACG (Kim et al. 2024): w_i0 = w + lambda m, the proximal pull mu (w_k - w_i0)
    before clipping, m <- lambda m + mean_S(p_i), w <- w + m, against the plain-numpy loop:
    w, m (FedState.ri_state), the rows, every round's metrics. Its fixed options are
    refused by name."""
    algo = algorithms.fedacg(linreg_loss, beta=beta, mu=mu, clip_norm=clip, weight_decay=1e-3)
    state, history = run(algo, theta0, linreg_rounds)
    ref = simulate("fedacg", theta0, NUM_CLIENTS, linreg_rounds, beta=beta, mu=mu, clip=clip,
                   wd=1e-3)
    for got, want in ((state.params, ref["w"]), (state.ri_state, ref["ri_state"])):
        np.testing.assert_allclose(flat(got), want, rtol=1e-5, atol=1e-6)
    rows = np.concatenate([np.asarray(state.ri_rows["w"]),
                           np.asarray(state.ri_rows["b"])[:, None]], axis=1)
    np.testing.assert_allclose(rows, ref["w_local"], rtol=1e-5, atol=1e-6)
    for got, want in zip(history, ref["history"], strict=True):
        assert got["train_loss"] == pytest.approx(want["train_loss"], rel=1e-5, abs=1e-7)
    assert ref["clipped_steps"] > 0 if clip else True
    for option in ("delta_from", "ri_offset", "server_lr"):
        with pytest.raises(ValueError, match=f"fedacg takes no option {option}"):
            algorithms.fedacg(linreg_loss, **{option: "start" if option == "delta_from"
                                              else "next" if option == "ri_offset" else 0.5})


@pytest.mark.parametrize("name", ["fedadam", "fedavgm"])
def test_the_momentum_rule_on_a_stateful_server_takes_the_start_aggregation(
        name, theta0, linreg_rounds):
    """FedInit's `momentum` rule on top of a server optimizer with state: with
    delta_from="start" the optimizer sees only the local progress mean_S(p_i) and the rule
    moves the clients' starts (matches the numpy loop: w, m^t, metrics); with "global" its
    pseudo-gradient would hold beta (e_i + m^t), m^t a sum of past server steps the
    optimizer's own state already holds, so it is refused as for Algorithm 1's offset."""
    hparams = {"server_lr": 0.1} if name == "fedadam" else {"server_lr": 0.5, "momentum": 0.7}
    options = {"beta": 0.2, "ri_offset": "momentum", "first_visit": "global",
               "clip_norm": None, "weight_decay": None}
    algo = algorithms.get(name, linreg_loss, delta_from="start", **hparams, **options)
    state, history = run(algo, theta0, linreg_rounds)
    ref = simulate(name, theta0, NUM_CLIENTS, linreg_rounds, beta=0.2, delta_from="start",
                   ri_offset="momentum", **hparams)
    for got, want in ((state.params, ref["w"]), (state.ri_state, ref["ri_state"])):
        np.testing.assert_allclose(flat(got), want, rtol=1e-5, atol=1e-6)
    for got, want in zip(history, ref["history"], strict=True):
        assert got["train_loss"] == pytest.approx(want["train_loss"], rel=1e-5, abs=1e-7)
    with pytest.raises(ValueError, match="delta_from='global' with beta=0.2"):
        algorithms.get(name, linreg_loss, **hparams, **options)


def test_momentum_offset_decays_as_its_sampling_says_with_its_gain_below_one():
    """ri_offset="momentum": gamma = 1 - N/C (a client's chance of missing a round), capped so
    that the feedback gain beta gamma / (1 - gamma) is at most 0.9 (docs/algorithms.md)."""
    from fedinit_jax.ri_offset import RI_MAX_GAIN, momentum_decay

    for beta, n, c, want in ((0.1, 10, 100, 0.9), (0.3, 3, 5, 0.4), (0.1, 10, 1000, 0.9),
                             (0.5, 10, 10**6, 0.9 / 1.4), (0.0, 10, 1000, 0.99),
                             (-0.3, 10, 1000, 0.75)):
        gamma = float(momentum_decay(np.float32(beta), n, c))
        assert gamma == pytest.approx(want, rel=1e-6)
        assert abs(beta) * gamma / (1 - gamma) <= RI_MAX_GAIN + 1e-6
