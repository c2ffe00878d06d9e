"""SCAFFOLD (Karimireddy et al., 2020), option II, as a Correction of FedAvg.

    local gradient:  g + (c - c_i)
    after training:  c_i+ = c_i - c - p_i / (K eta_l),   p_i = w_iK - w_i0 (local progress)
    server:          c <- c + sum_S(c_i+ - c_i) / C;  w as FedAvg (follows delta_from)

c_i is built from p_i under both `delta_from`, as in the authors' code: under RI, w_iK - w
would carry the offset beta (w - w_i) into c_i (correction.py).
"""
import jax
import jax.numpy as jnp

from fedinit_jax.algorithms.fedavg import fedavg
from fedinit_jax.correction import Correction
from fedinit_jax.tree import client_sum, zeros_like
from fedinit_jax.types import Costs


def _gradient(g, _w, ctx):
    return jax.tree.map(lambda g, c, ci: g + (c - ci), g, ctx.server_extra, ctx.client_extra)


def _client_update(ctx, progress, steps_lr, _carry):
    return jax.tree.map(lambda ci, c, p: ci - c - p / steps_lr,
                        ctx.client_extra, ctx.server_extra, progress)


def _server_update(c, old, new, _mean_progress, _steps_lr, num_clients, weights):
    change = client_sum(jax.tree.map(jnp.subtract, new, old), weights)
    return jax.tree.map(lambda c, dc: c + dc / num_clients, c, change)


CORRECTION = Correction(
    init_server=zeros_like, init_client=zeros_like, gradient=_gradient,
    client_update=_client_update, server_update=_server_update,
    costs=Costs(down=("w", "c"), up=("delta", "delta_c"), server_state=("c",),
                client_state=("c_i",)))


def scaffold(loss_fn, **options):
    """SCAFFOLD with control variates c (server) and c_i (every client), zero at start."""
    return fedavg(loss_fn, correction=CORRECTION, **options)
