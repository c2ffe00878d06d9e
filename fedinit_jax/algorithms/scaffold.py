"""SCAFFOLD (Karimireddy et al., 2020), option II, as a Correction of FedAvg.

    local gradient:  g + (c - c_i)
    after training:  c_i+ = c_i - c - delta_i / (K eta_l)
    server:          c <- c + sum_S(c_i+ - c_i) / C;  w as FedAvg
"""
import jax
import jax.numpy as jnp

from fedinit_jax.algorithms.fedavg import fedavg
from fedinit_jax.correction import Correction
from fedinit_jax.tree import zeros_like
from fedinit_jax.types import Costs


def _gradient(g, _w, ctx):
    return jax.tree.map(lambda g, c, ci: g + (c - ci), g, ctx.server_extra, ctx.client_extra)


def _client_update(ctx, delta, steps_lr, _carry):
    return jax.tree.map(lambda ci, c, d: ci - c - d / steps_lr,
                        ctx.client_extra, ctx.server_extra, delta)


def _server_update(c, old, new, _mean_delta, _steps_lr, num_clients):
    return jax.tree.map(lambda c, o, n: c + jnp.sum(n - o, axis=0) / num_clients, c, old, new)


CORRECTION = Correction(
    init_server=zeros_like, init_client=zeros_like, gradient=_gradient,
    client_update=_client_update, server_update=_server_update,
    costs=Costs(down=("w", "c"), up=("delta", "delta_c"), server_state=("c",),
                client_state=("c_i",)))


def scaffold(loss_fn, **options):
    """SCAFFOLD with control variates c (server) and c_i (every client), zero at start."""
    return fedavg(loss_fn, correction=CORRECTION, **options)
