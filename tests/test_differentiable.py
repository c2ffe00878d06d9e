"""Rounds are differentiable: the hypergradient of a validation loss after several scanned
rounds with respect to beta equals central finite differences (FedInit, SCAFFOLD+RI), and
docs/differentiable.md's example runs as written."""
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import NUM_CLIENTS, ROOT, linreg_loss, params_from

from fedinit_jax import RoundInput, algorithms


def _validation_loss(algo, theta0, linreg_rounds, beta):
    """The validation loss after the three conftest rounds, one lax.scan, beta traced."""
    ids, xs, ys, lrs = (np.stack(parts) for parts in zip(*linreg_rounds))
    keys = jax.random.split(jax.random.key(0), len(linreg_rounds))
    rng = np.random.default_rng(1)
    val_x = rng.normal(size=(64, 3)).astype(np.float32)
    val_y = (val_x @ np.array([0.5, -1.0, 0.25], np.float32)).astype(np.float32)
    state = algo.init(params_from(theta0), num_clients=NUM_CLIENTS)._replace(beta=beta)

    def one_round(state, inputs):
        ids_t, x_t, y_t, lr, key = inputs
        state, _ = algo.apply(state, RoundInput(ids_t, (x_t, y_t), lr), key)
        return state, None

    state, _ = jax.lax.scan(one_round, state, (ids, xs, ys, lrs, keys))
    return linreg_loss(state.params, (val_x, val_y), None)


@pytest.mark.parametrize("name", ["fedinit", "scaffold"])
def test_hypergradient_of_beta_equals_finite_differences(name, linreg_rounds, theta0):
    algo = algorithms.get(name, linreg_loss, beta=0.1)
    loss = jax.jit(lambda b: _validation_loss(algo, theta0, linreg_rounds, b))
    grad = float(jax.grad(loss)(jnp.float32(0.3)))
    h = 1e-2  # float32: rounding error ~1e-7 / h, truncation ~h^2
    central = (float(loss(jnp.float32(0.3 + h))) - float(loss(jnp.float32(0.3 - h)))) / (2 * h)
    assert abs(grad) > 1e-3  # beta moves the result: the comparison means something
    assert grad == pytest.approx(central, rel=2e-3), (grad, central)


def test_integer_inputs_are_not_differentiable(linreg_rounds, theta0):
    """The sampled ids are integers: JAX refuses to differentiate with respect to them."""
    algo = algorithms.fedinit(linreg_loss, beta=0.1)
    ids, xs, ys, lr = linreg_rounds[0]
    state = algo.init(params_from(theta0), num_clients=NUM_CLIENTS)

    def of_ids(ids):
        return algo.apply(state, RoundInput(ids, (xs, ys), lr), jax.random.key(0))[0].beta

    with pytest.raises(TypeError, match="grad requires real- or complex-valued inputs"):
        jax.grad(of_ids)(ids)


def test_the_docs_example_runs(capsys):
    text = open(os.path.join(ROOT, "docs", "differentiable.md")).read()
    block = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    exec(compile(block, "docs/differentiable.md", "exec"), {})
    lines = capsys.readouterr().out.strip().splitlines()
    losses = [float(re.search(r"validation loss ([\d.]+)", line).group(1)) for line in lines]
    assert len(losses) == 5 and losses[-1] < losses[0]  # the steps on beta lower it
