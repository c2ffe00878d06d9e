"""FedYogi (Reddi et al., 2021, "Adaptive Federated Optimization", Algorithm 2 with Yogi):
FedAvg whose server optimizer is Yogi on the pseudo-gradient dbar = mean_S(delta_i).

    m_t = b1 m_{t-1} + (1 - b1) dbar
    v_t = v_{t-1} - (1 - b2) dbar^2 sign(v_{t-1} - dbar^2)
    w  <- w + eta_g m_t / (sqrt(v_t) + eps)          (eps: the paper's tau)

As the paper: no bias correction, m_{-1} = 0 and v_{-1} = tau^2 (Algorithm 2 asks v_{-1} >=
tau^2). Defaults b1 = 0.9, b2 = 0.99 (the paper's), eps = 0.01 and eta_g = 0.1, this project's
FedAdam's (fedadam.py), so the two differ only in the second-moment rule; the paper tunes
eta_g and tau per task. The FedInit authors' simulator has no FedYogi.
"""
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from fedinit_jax.algorithms.fedadam import adaptive_server
from fedinit_jax.algorithms.fedavg import fedavg
from fedinit_jax.algorithms.options import shares_fedavg_options
from fedinit_jax.types import Costs

__all__ = ["YogiState", "scale_by_yogi_no_bias_correction", "fedyogi", "COSTS"]


class YogiState(NamedTuple):
    m: Any  # first moment, like params
    v: Any  # second moment, like params


def scale_by_yogi_no_bias_correction(b1=0.9, b2=0.99, eps=0.01) -> optax.GradientTransformation:
    """Yogi's direction m / (sqrt(v) + eps) without bias correction, v starting at eps^2, as
    an optax transform (optax.scale_by_yogi corrects the bias and starts v elsewhere)."""

    def init(params):
        return YogiState(m=jax.tree.map(jnp.zeros_like, params),
                         v=jax.tree.map(lambda p: jnp.full_like(p, eps * eps), params))

    def update(grads, state, params=None):
        del params
        m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state.m, grads)
        v = jax.tree.map(lambda v, g: v - (1 - b2) * g * g * jnp.sign(v - g * g), state.v, grads)
        updates = jax.tree.map(lambda m, v: m / (jnp.sqrt(v) + eps), m, v)
        return updates, YogiState(m=m, v=v)

    return optax.GradientTransformation(init, update)


@shares_fedavg_options(fedavg, server_optimizer=False)
def fedyogi(loss_fn, *, server_lr: float = 0.1, b1: float = 0.9, b2: float = 0.99,
            eps: float = 0.01, **options):
    """FedAvg with the server optimizer chain(yogi-without-bias-correction, scale(-eta_g)).

    Its server keeps state (m, v), so with RI (beta != 0) it takes delta_from="start"
    (help(fedavg): under "global" the offset would enter its moments)."""
    return adaptive_server(loss_fn, scale_by_yogi_no_bias_correction, server_lr, b1, b2, eps,
                           options)


COSTS = Costs(server_state=("m", "v"))
