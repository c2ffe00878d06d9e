"""FedDyn (Acar et al., 2021) as a Correction of FedAvg, in the authors' code's form.

    local gradient:  clip(g + lam * (h_i - w_i0)) + (wd + lam) * w_k
    after training:  h_i <- h_i + p_i,   p_i = w_iK - w_i0 (the local progress)
    server:          w <- mean_S(w_iK) + mean_C(h_i)     (eta_g and delta_from unused)
                     mean_C(h_i) is kept as server state, moved by the cohort's changes
                     sum_S(h_i+ - h_i) / C: a round reads only its clients' h_i

Without clipping this is g + lam * h_i + lam * (w_k - w_i0) + wd * w_k. With clipping the
authors clip only g + lam * (h_i - w_i0) and add lam * w_k with the weight decay afterwards
(their SGD's weight_decay = wd + lam); the paper's tables were made with this form, so it is
the one implemented. For ResNet-18-GN, lam * ||w_i0|| ~ 11 > 10 = clip, so it clips from the
first step. h_i is built from p_i under both `delta_from`, as the authors do; under RI,
w_iK - w would carry the offset beta (w - w_i) into h_i and feed it back (correction.py).
lam = 0.1 by default; the paper's FedDyn runs decay eta_l by 0.9995 per round.

With a client_optimizer other than SGD, the dual pull lam (h_i - w_i0) and lam * w_k go
through that optimizer like the loss gradient (they are part of g), and h_i accumulates the
progress p_i that optimizer made: FedDyn's fixed-point argument (grad f_i(w_i) = lam h_i at
a stationary point) assumes SGD steps and does not hold as such.
"""
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from fedinit_jax.algorithms.fedavg import fedavg
from fedinit_jax.algorithms.options import shares_fedavg_options
from fedinit_jax.checks import check_number
from fedinit_jax.correction import ClientCorrection, Correction, ServerCorrection
from fedinit_jax.tree import client_sum
from fedinit_jax.types import Costs, Params

__all__ = ["FedDynClientState", "FedDynState", "COSTS", "correction", "feddyn"]


class FedDynClientState(NamedTuple):
    h: Params  # client i's accumulated local progress (the dual variable)


def _finalize(ctx, progress, _lr_sum, _carry):
    return FedDynClientState(jax.tree.map(jnp.add, ctx.client_state.h, progress))


class FedDynState(NamedTuple):
    mean_h: Params  # mean_C(h_i), kept from the cohort's changes (no read of every h_i)


def _server_update(state, inputs):
    """mean_C(h_i) += sum_S(h_i+ - h_i) / C (only the cohort's h_i change);
    w = mean_S(w_iK) + mean_C(h_i)."""
    change = client_sum(jax.tree.map(jnp.subtract, inputs.new_clients.h, inputs.old_clients.h),
                        inputs.mask)
    mean_h = jax.tree.map(lambda m, dh: m + dh / inputs.num_clients, state.mean_h, change)
    return FedDynState(mean_h), jax.tree.map(jnp.add, inputs.mean_w_end, mean_h)


COSTS = Costs(server_state=("mean_h",), client_state=("h_i",))


def correction(lam: float) -> Correction:
    """FedDyn's dual correction with coefficient lam (lam * w_k joins the weight decay)."""

    def gradient(g, _w_k, ctx):
        return jax.tree.map(lambda g, h, w0: g + lam * (h - w0), g, ctx.client_state.h,
                            ctx.w_start)

    return Correction(
        client=ClientCorrection(init=lambda w: FedDynClientState(optax.tree.zeros_like(w)),
                                gradient=gradient, finalize=_finalize, decay=lam),
        server=ServerCorrection(init=lambda w: FedDynState(optax.tree.zeros_like(w)),
                                update=_server_update))


@shares_fedavg_options(fedavg, server_step=False)
def feddyn(loss_fn, *, lam: float = 0.1, **options):
    """FedDyn with dual coefficient lam; the server model is mean_S(w_iK) + mean_C(h_i)."""
    check_number("lam", lam, 0.0)
    return fedavg(loss_fn, correction=correction(lam), **options)
