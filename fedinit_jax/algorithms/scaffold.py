"""SCAFFOLD (Karimireddy et al., 2020), option II, as a Correction of FedAvg.

    local gradient:  g + (c - c_i)
    after training:  c_i+ = c_i - c - p_i / (K eta_l),   p_i = w_iK - w_i0 (local progress)
    server:          c <- c + sum_S(c_i+ - c_i) / C;  w as FedAvg (follows delta_from)

c_i is built from p_i under both `delta_from`, as in the authors' code: under RI, w_iK - w
would carry the offset beta (w - w_i) into c_i (correction.py).

With a client_optimizer other than the paper's SGD, p_i = -eta_l sum_k u_k sums the
optimizer's updates u_k, not the corrected gradients, so p_i / (K eta_l) and with it c_i
estimate the mean *update direction* (e.g. momentum-averaged, Adam-preconditioned); option II
is applied as written, which no analysis of SCAFFOLD covers.
"""
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from fedinit_jax.algorithms.fedavg import fedavg
from fedinit_jax.algorithms.options import shares_fedavg_options
from fedinit_jax.correction import ClientCorrection, Correction, ServerCorrection
from fedinit_jax.tree import client_sum
from fedinit_jax.types import Costs, Params

__all__ = ["ScaffoldState", "ScaffoldClientState", "COSTS", "CORRECTION", "scaffold"]


class ScaffoldState(NamedTuple):
    c: Params  # the server's control variate


class ScaffoldClientState(NamedTuple):
    c_i: Params  # client i's control variate


def _gradient(g, _w_k, ctx):
    return jax.tree.map(lambda g, c, ci: g + (c - ci), g, ctx.server_state.c,
                        ctx.client_state.c_i)


def _finalize(ctx, progress, lr_sum, _carry):
    return ScaffoldClientState(jax.tree.map(lambda ci, c, p: ci - c - p / lr_sum,
                                            ctx.client_state.c_i, ctx.server_state.c, progress))


def _server_update(state, inputs):
    change = client_sum(jax.tree.map(jnp.subtract, inputs.new_clients.c_i,
                                     inputs.old_clients.c_i), inputs.mask)
    c = jax.tree.map(lambda c, dc: c + dc / inputs.num_clients, state.c, change)
    return ScaffoldState(c), inputs.w_candidate


COSTS = Costs(down=("w", "c"), up=("delta", "delta_c"), server_state=("c",),
              client_state=("c_i",))
CORRECTION = Correction(
    client=ClientCorrection(init=lambda w: ScaffoldClientState(optax.tree.zeros_like(w)),
                            gradient=_gradient, finalize=_finalize),
    server=ServerCorrection(init=lambda w: ScaffoldState(optax.tree.zeros_like(w)),
                            update=_server_update))


@shares_fedavg_options(fedavg)
def scaffold(loss_fn, **options):
    """SCAFFOLD with control variates c (server) and c_i (every client), zero at start."""
    return fedavg(loss_fn, correction=CORRECTION, **options)
