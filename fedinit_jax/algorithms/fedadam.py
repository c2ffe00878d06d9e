"""FedAdam (Reddi et al., 2021): FedAvg whose server optimizer is Adam on mean_S(delta_i).

With dbar = mean_S(delta_i), as in the authors' code (no bias correction):

    m = b1 m + (1 - b1) dbar;  v = b2 v + (1 - b2) dbar^2;  w <- w + eta_g m / (sqrt(v) + eps)

defaults b1 = 0.9, b2 = 0.99, eps = 0.01, eta_g = 0.1. m and v start at 0, as the FedInit
authors' simulator (FL-Simulator, server/FedAdam.py), whose tables this reproduces; Reddi et
al.'s Algorithm 2 starts v at v_{-1} >= tau^2 (eps^2 here), which fedyogi.py follows. No bias
correction and eps outside the square root: both agree.
"""
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from fedinit_jax.algorithms.fedavg import fedavg
from fedinit_jax.algorithms.options import shares_fedavg_options
from fedinit_jax.checks import check_number
from fedinit_jax.types import Costs

__all__ = ["AdamNoBiasState", "scale_by_adam_no_bias_correction", "adaptive_server", "fedadam",
           "COSTS"]


class AdamNoBiasState(NamedTuple):
    m: Any  # first moment, like params
    v: Any  # second moment, like params


def scale_by_adam_no_bias_correction(b1=0.9, b2=0.99, eps=0.01) -> optax.GradientTransformation:
    """Adam's direction m / (sqrt(v) + eps) without bias correction, as an optax transform."""

    def init(params):
        zeros = jax.tree.map(jnp.zeros_like, params)
        return AdamNoBiasState(m=zeros, v=zeros)

    def update(grads, state, params=None):
        del params
        m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state.m, grads)
        v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, state.v, grads)
        updates = jax.tree.map(lambda m, v: m / (jnp.sqrt(v) + eps), m, v)
        return updates, AdamNoBiasState(m=m, v=v)

    return optax.GradientTransformation(init, update)


def adaptive_server(loss_fn, scale_by, server_lr, b1, b2, eps, options):
    """FedAvg whose server optimizer is chain(scale_by(b1, b2, eps), scale(-eta_g)) (Reddi et
    al.'s FedOpt), the hyperparameters checked first: FedAdam's and FedYogi's builder."""
    check_number("server_lr", server_lr, 0.0, low_open=True)
    check_number("b1", b1, 0.0, 1.0, high_open=True)
    check_number("b2", b2, 0.0, 1.0, high_open=True)
    check_number("eps", eps, 0.0, low_open=True)
    server_optimizer = optax.chain(scale_by(b1, b2, eps), optax.scale(-server_lr))
    return fedavg(loss_fn, server_optimizer=server_optimizer, **options)


@shares_fedavg_options(fedavg, server_optimizer=False)
def fedadam(loss_fn, *, server_lr: float = 0.1, b1: float = 0.9, b2: float = 0.99,
            eps: float = 0.01, **options):
    """FedAvg with the server optimizer chain(adam-without-bias-correction, scale(-eta_g))."""
    return adaptive_server(loss_fn, scale_by_adam_no_bias_correction, server_lr, b1, b2, eps,
                           options)


COSTS = Costs(server_state=("m", "v"))
