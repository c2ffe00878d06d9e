"""The library as a JAX user imports it: optax optimizers, the pure (init, apply) pair inside
the user's own jit and scan, builders whose signatures say what they take."""
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import NUM_CLIENTS, assert_matches, linreg_loss, params_from, run
from numpy_reference import simulate

from fedinit_jax import RoundInput, Runtime, algorithms


@pytest.mark.parametrize("name", ["fedinit", "scaffold"])
def test_client_optimizer_momentum_matches_numpy_reference(linreg_rounds, theta0, name):
    """client_optimizer=optax.trace(0.9): heavy-ball momentum after clipping and weight
    decay, scaled by -eta_l, its buffer fresh every round (numpy_reference's loop)."""
    algo = algorithms.get(name, linreg_loss, beta=0.1, clip_norm=1.0,
                          client_optimizer=optax.trace(0.9))
    state, history = run(algo, theta0, linreg_rounds)
    ref = simulate(name if name != "fedinit" else "fedavg", theta0, NUM_CLIENTS, linreg_rounds,
                   beta=0.1, clip=1.0, wd=1e-3, client_momentum=0.9)
    assert ref["clipped_steps"] > 0
    assert_matches(state, history, ref)
    plain = simulate(name if name != "fedinit" else "fedavg", theta0, NUM_CLIENTS,
                     linreg_rounds, beta=0.1, clip=1.0, wd=1e-3)
    assert np.max(np.abs(plain["w"] - ref["w"])) > 1e-3  # momentum changed the result


def test_apply_runs_inside_a_users_jit_and_scan(linreg_rounds, theta0):
    """All rounds as one lax.scan in the user's own jax.jit (no host check in apply):
    the numpy reference's FedInit, round by round."""
    algo = algorithms.fedinit(linreg_loss)
    ids, xs, ys, lrs = (np.stack(parts) for parts in zip(*linreg_rounds))
    keys = jax.vmap(lambda t: jax.random.fold_in(jax.random.key(0), t))(jnp.arange(len(ids)))

    @jax.jit
    def train(state, ids, xs, ys, lrs, keys):
        def one_round(state, inputs):
            i, x, y, lr, key = inputs
            return algo.apply(state, RoundInput(i, (x, y), lr), key)
        return jax.lax.scan(one_round, state, (ids, xs, ys, lrs, keys))

    state, metrics = train(algo.init(params_from(theta0), NUM_CLIENTS), ids, xs, ys, lrs, keys)
    history = [{k: float(v[t]) for k, v in metrics.items()} for t in range(len(ids))]
    ref = simulate("fedavg", theta0, NUM_CLIENTS, linreg_rounds, beta=0.1, clip=10.0, wd=1e-3)
    assert_matches(state, history, ref)


def test_vmap_of_apply_over_betas_is_a_beta_sweep(linreg_rounds, theta0):
    """jax.vmap(algo.apply) over stacked states whose beta differs: each row is the numpy
    reference of its beta (what fedinit_jax.replicas packages)."""
    betas = [0.0, 0.1, -0.2]
    algo = algorithms.fedinit(linreg_loss)
    one = algo.init(params_from(theta0), NUM_CLIENTS)
    states = jax.tree.map(lambda x: jnp.stack([x] * len(betas)), one)
    states = states._replace(beta=jnp.asarray(betas, jnp.float32))
    sweep = jax.jit(jax.vmap(algo.apply, in_axes=(0, None, None)))
    for t, (ids, xs, ys, lr) in enumerate(linreg_rounds):
        states, _ = sweep(states, RoundInput(ids, (xs, ys), lr),
                          jax.random.fold_in(jax.random.key(0), t))
    for r, beta in enumerate(betas):
        ref = simulate("fedavg", theta0, NUM_CLIENTS, linreg_rounds, beta=beta, clip=10.0,
                       wd=1e-3)
        w = np.concatenate([np.asarray(states.params["w"][r]), [states.params["b"][r]]])
        np.testing.assert_allclose(w, ref["w"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", list(algorithms.REGISTRY))
def test_help_shows_every_option_with_its_default(name):
    """No bare **options: the paper's weight decay and clip, beta, the optimizers and the
    runtime are in every builder's signature with their defaults."""
    builder = algorithms.REGISTRY[name].builder
    params = inspect.signature(builder).parameters
    assert all(p.kind is not p.VAR_KEYWORD for p in params.values())
    assert params["weight_decay"].default == 1e-3 and params["clip_norm"].default == 10.0
    assert params["beta"].default == {"fedinit": 0.1, "fedacg": 0.85}.get(name, 0.0)
    assert params["client_optimizer"].default is None
    assert ("server_optimizer" in params) == (name not in ("fedadam", "fedyogi", "fedavgm",
                                                           "fedacg", "feddyn", "fedspeed",
                                                           "fedsmoo"))
    assert algorithms.hyperparameters(name) == algorithms.hyperparameters(builder)
    assert "beta" in algorithms.hyperparameters(name)


def test_a_non_optax_optimizer_is_refused_by_name():
    with pytest.raises(ValueError, match="client_optimizer must be an optax"):
        algorithms.fedavg(linreg_loss, client_optimizer="adam")
    with pytest.raises(ValueError, match="server_optimizer must be an optax"):
        algorithms.fedavg(linreg_loss, server_optimizer=0.1)


def test_a_sharded_algorithm_jits_inside_a_users_jit(linreg_rounds, theta0):
    """With num_devices=2 apply places the state on its mesh; under the user's jit that is a
    sharding constraint, and the round is the same."""
    algo = algorithms.fedinit(linreg_loss, runtime=Runtime(num_devices=2))
    state = algo.init(params_from(theta0), NUM_CLIENTS)
    ids, xs, ys, lr = linreg_rounds[0]
    inp = RoundInput(ids[:2], (xs[:2], ys[:2]), lr)  # 2 clients: one per device
    jitted, _ = jax.jit(algo.apply)(state, inp, jax.random.key(0))
    direct, _ = algo.apply(state, inp, jax.random.key(0))
    for a, b in zip(jax.tree.leaves(jitted), jax.tree.leaves(direct)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
