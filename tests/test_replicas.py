"""The replica axis: R runs in one program equal R separate runs."""
import jax
import numpy as np
import pytest
from conftest import NUM_CLIENTS, linreg_loss, params_from, run

from fedinit_jax import RoundInput, algorithms, replicas


def test_beta_sweep_equals_separate_runs(linreg_rounds, theta0):
    betas = [-0.1, 0.0, 0.1, 0.2]
    algo = algorithms.fedinit(linreg_loss)
    states = replicas.init(algo, params_from(theta0), NUM_CLIENTS, betas=betas)
    apply = replicas.make_apply(algo, shared_input=True)
    for t, (ids, xs, ys, lr) in enumerate(linreg_rounds):
        key = jax.random.fold_in(jax.random.key(0), t)
        states, metrics = apply(states, RoundInput(ids, (xs, ys), lr),
                                jax.numpy.stack([key] * len(betas)))
    assert metrics["train_loss"].shape == (len(betas),)
    for r, beta in enumerate(betas):
        alone, _ = run(algorithms.fedinit(linreg_loss, beta=beta), theta0, linreg_rounds)
        for a, b in zip(jax.tree.leaves(alone), jax.tree.leaves(states)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b)[r], rtol=1e-5, atol=1e-6)


def test_seed_repeats_with_their_own_inputs(linreg_rounds, theta0):
    """Per-replica inputs and keys (as different seeds would give) and per-replica models."""
    algo = algorithms.scaffold(linreg_loss, beta=0.1)
    starts = [theta0, theta0 * 2.0]
    params = jax.tree.map(lambda *x: np.stack(x), *[params_from(s) for s in starts])
    states = replicas.init(algo, params, NUM_CLIENTS, params_per_replica=True)
    apply = replicas.make_apply(algo, shared_input=False)
    shifted = [(ids[::-1].copy(), xs[::-1] * 0.5, ys[::-1], lr) for ids, xs, ys, lr in linreg_rounds]
    for t, (a, b) in enumerate(zip(linreg_rounds, shifted)):
        inp = RoundInput(np.stack([a[0], b[0]]), (np.stack([a[1], b[1]]), np.stack([a[2], b[2]])),
                         np.stack([a[3], b[3]]))
        key = jax.random.fold_in(jax.random.key(0), t)
        states, _ = apply(states, inp, jax.numpy.stack([key, key]))
    for r, rounds in enumerate([linreg_rounds, shifted]):
        alone, _ = run(algorithms.scaffold(linreg_loss, beta=0.1), starts[r], rounds)
        for x, y in zip(jax.tree.leaves(alone), jax.tree.leaves(states)):
            np.testing.assert_allclose(np.asarray(x), np.asarray(y)[r], rtol=1e-5, atol=1e-6)


def test_bad_replica_arguments(theta0):
    algo = algorithms.fedinit(linreg_loss)
    with pytest.raises(ValueError, match="betas"):
        replicas.init(algo, params_from(theta0), NUM_CLIENTS, betas=[0.1, float("nan")])
    with pytest.raises(ValueError, match="num_replicas"):
        replicas.init(algo, params_from(theta0), NUM_CLIENTS)


def test_replicas_run_inside_a_users_jit_and_scan_with_separate_host_checks(linreg_rounds,
                                                                            theta0):
    """make_apply's function is pure (it ran a host check that failed under jit before);
    the checks are replicas.check_round_input and check_state, which knows replica states."""
    from fedinit_jax import check_state

    algo = algorithms.fedinit(linreg_loss)
    states = replicas.init(algo, params_from(theta0), NUM_CLIENTS, betas=[0.0, 0.1])
    check_state(algo, states)  # a replica state: one replica's structure; betas a sweep
    with pytest.raises(ValueError, match="state.server_state does not match"):
        check_state(algorithms.scaffold(linreg_loss), states)  # SCAFFOLD keeps c
    apply = replicas.make_apply(algo, shared_input=True)
    ids, xs, ys, lr = linreg_rounds[0]
    inp = RoundInput(ids, (xs, ys), lr)
    replicas.check_round_input(algo, states, inp)
    keys = jax.random.split(jax.random.key(0), 2)
    eager, _ = apply(states, inp, keys)
    jitted, _ = jax.jit(apply)(states, inp, keys)
    for a, b in zip(jax.tree.leaves(eager), jax.tree.leaves(jitted)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
    scanned, _ = jax.lax.scan(lambda s, k: apply(s, inp, jax.random.split(k, 2)), states,
                              jax.random.split(jax.random.key(1), 3))
    assert jax.tree.leaves(scanned)[0].shape == jax.tree.leaves(states)[0].shape
    with pytest.raises(ValueError, match=r"round_input.client_ids: shared_input=False needs a "
                                         r"leading \[R=2\] replica axis"):
        replicas.check_round_input(algo, states, inp, shared_input=False)
    with pytest.raises(ValueError, match="client_ids out of range"):
        replicas.check_round_input(algo, states, inp._replace(client_ids=ids + 100))
    with pytest.raises(ValueError, match="betas='0.1': a non-empty sequence of numbers"):
        replicas.init(algo, params_from(theta0), NUM_CLIENTS, betas="0.1")


def test_eval_shape_of_init_with_the_documented_recipe(theta0):
    algo = algorithms.scaffold(linreg_loss)
    shapes = jax.eval_shape(lambda p: algo.init(p, NUM_CLIENTS), params_from(theta0))
    assert shapes.ri_rows["w"].shape == (NUM_CLIENTS, len(theta0) - 1)
    with pytest.raises(ValueError, match=r"num_clients must be a Python int .* by closure"):
        jax.eval_shape(algo.init, params_from(theta0), NUM_CLIENTS)
