"""Shared fixtures: a linear-regression federation with partial participation."""
import os

# two XLA CPU devices, so that sharded rounds can be compared with one-device rounds
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", False)

DIM = 3
NUM_CLIENTS = 5
ROUND_IDS = ([0, 2, 4], [1, 2, 3], [4, 0, 3])  # partial participation, N = 3 of C = 5
NUM_STEPS, BATCH = 4, 8


def linreg_loss(params, batch, key):
    """mean((x @ w + b - y)^2); the key is unused."""
    del key
    x, y = batch
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)


def counting(loss_fn):
    """(loss_fn that records each time JAX traces it, the list of records)."""
    traces = []

    def counted(params, batch, key):
        traces.append(1)
        return loss_fn(params, batch, key)

    return counted, traces


def flat(params):
    return np.concatenate([np.asarray(params["w"]), np.asarray(params["b"])[None]])


@pytest.fixture(scope="session")
def linreg_rounds():
    """Three rounds of heterogeneous client data: (ids, xs [N,K,B,d], ys [N,K,B], lr)."""
    rng = np.random.default_rng(0)
    true_w = rng.normal(size=(NUM_CLIENTS, DIM))  # every client its own optimum
    rounds = []
    for t, ids in enumerate(ROUND_IDS):
        xs = rng.normal(size=(len(ids), NUM_STEPS, BATCH, DIM)).astype(np.float32)
        ys = np.einsum("nkbd,nd->nkb", xs, true_w[ids]).astype(np.float32) + 0.5
        rounds.append((np.array(ids, np.int32), xs, ys, np.float32(0.05 * 0.998 ** t)))
    return rounds


@pytest.fixture(scope="session")
def theta0():
    return np.array([0.3, -0.2, 0.1, 0.05])


def params_from(theta):
    return {"w": jnp.asarray(theta[:-1], jnp.float32), "b": jnp.asarray(theta[-1], jnp.float32)}
