"""FedCM (Xu et al., 2021): client-level momentum from last round's mean update.

    d = -mean_S(p_i) / (K eta_l)   of the previous round (d = 0 in round 0),
                                    p_i = w_iK - w_i0 (the local progress)
    local gradient:  alpha * g + (1 - alpha) * d
    server:          w as FedAvg (follows delta_from); store d for the next round

d is built from p_i under both `delta_from`, as in the authors' code (they divide
Averaged_update = mean_S(w_iK - w_i0) by K and the previous round's lr): under RI, w_iK - w
would carry the offset beta (w - w_i) into the momentum and feed it back (correction.py).
alpha = 0.1 by default; alpha = 1 is exactly FedAvg.

With a client_optimizer other than SGD, d = -mean_S(p_i) / (K eta_l) is the mean optimizer
update of the last round, not the mean gradient, and it is mixed into g before that
optimizer sees it (momentum on momentum for optax.trace); FedCM as published uses SGD.
"""
from typing import NamedTuple

import jax
import optax

from fedinit_jax.algorithms.fedavg import fedavg
from fedinit_jax.algorithms.options import shares_fedavg_options
from fedinit_jax.checks import check_number
from fedinit_jax.correction import ClientCorrection, Correction, ServerCorrection
from fedinit_jax.types import Costs, Params

__all__ = ["FedCMState", "COSTS", "correction", "fedcm"]


class FedCMState(NamedTuple):
    d: Params  # the server direction sent down with w


def _server_update(_state, inputs):
    return (FedCMState(jax.tree.map(lambda m: -m / inputs.lr_sum, inputs.mean_progress)),
            inputs.w_candidate)


COSTS = Costs(down=("w", "d"), server_state=("d",), client_work=("d",))


def correction(alpha: float) -> Correction:
    """FedCM's momentum mixing of the local gradient with the server direction d."""

    def gradient(g, _w_k, ctx):
        return jax.tree.map(lambda g, d: alpha * g + (1 - alpha) * d, g, ctx.server_state.d)

    return Correction(
        client=ClientCorrection(gradient=gradient),
        server=ServerCorrection(init=lambda w: FedCMState(optax.tree.zeros_like(w)),
                                update=_server_update))


@shares_fedavg_options(fedavg)
def fedcm(loss_fn, *, alpha: float = 0.1, **options):
    """FedCM with momentum weight alpha in [0, 1]."""
    check_number("alpha", alpha, 0.0, 1.0)
    return fedavg(loss_fn, correction=correction(alpha), **options)
