"""FedSMOO (Sun et al., 2023), as in the authors' simulator: dynamically regularised SAM
plus FedDyn's correction and server.

Per local step, with mu_i the client's SAM dual variable (carried through the steps) and s the
server's global perturbation:

    g1 = grad f(w_k);  g~ = g1 - (mu_i + s);  e = rho g~ / (||g~|| + 1e-7);  mu_i <- mu_i + e - s
    g  = clip(grad f(w_k + e) + lam * (h_i - w_i0)) + (wd + lam) * w_k   (FedDyn's clip form)

After the round: h_i <- h_i + p_i (p_i = w_iK - w_i0) and mu_i is stored for client i;
    w <- mean_S(w_iK) + mean_C(h_i);   s <- rho * mean_S(mu_i) / (||mean_S(mu_i)|| + 1e-7)

(the 1e-7 in s's denominator is the authors' code's; it keeps s = 0, not NaN, while every
mu_i is 0.) rho = 0.1, lam = 0.1 by default.
"""
from typing import NamedTuple

import jax
import optax

from fedinit_jax import local
from fedinit_jax.algorithms.fedavg import fedavg
from fedinit_jax.algorithms.feddyn import COSTS as FEDDYN_COSTS
from fedinit_jax.algorithms.feddyn import correction as feddyn_correction
from fedinit_jax.algorithms.options import shares_fedavg_options
from fedinit_jax.checks import check_number
from fedinit_jax.correction import ClientCorrection, Correction, ServerCorrection, compose
from fedinit_jax.tree import client_mean
from fedinit_jax.types import Costs, Params

__all__ = ["SmooState", "SmooClientState", "smoo_gradient", "SMOO_COSTS", "correction", "fedsmoo",
           "COSTS"]


class SmooState(NamedTuple):
    s: Params  # the global perturbation sent down with w


class SmooClientState(NamedTuple):
    mu: Params  # client i's SAM dual variable mu_i


def smoo_gradient(loss_fn, rho) -> local.Gradient:
    """The dynamically regularised SAM gradient; its carry is mu_i, starting from the stored one."""
    value_and_grad = jax.value_and_grad(loss_fn)

    def init(ctx):
        return ctx.client_state.mu

    def apply(w, batch, key, mu, ctx):
        s = ctx.server_state.s
        loss, g1 = value_and_grad(w, batch, key)
        g_tilde = jax.tree.map(lambda g, m, si: g - (m + si), g1, mu, s)
        w_adv, e = local.ascent_step(w, g_tilde, rho)
        mu = jax.tree.map(lambda m, ei, si: m + ei - si, mu, e, s)
        _, g = value_and_grad(w_adv, batch, key)
        return loss, g, mu

    return local.Gradient(init, apply)


SMOO_COSTS = Costs(down=("w", "s"), up=("delta", "mu_i"), server_state=("s",),
                   client_state=("mu_i",), client_work=("e",))


def correction(rho: float) -> Correction:
    """The SMOO part alone: its gradient rule, mu_i stored after training, the server's s."""

    def server_update(_state, inputs):
        mean_mu = client_mean(inputs.new_clients.mu, inputs.mask)
        scale = rho / (optax.tree.norm(mean_mu) + 1e-7)
        return SmooState(jax.tree.map(lambda m: scale * m, mean_mu)), inputs.w_candidate

    return Correction(
        client=ClientCorrection(init=lambda w: SmooClientState(optax.tree.zeros_like(w)),
                                finalize=lambda _ctx, _p, _lr_sum, mu: SmooClientState(mu)),
        server=ServerCorrection(init=lambda w: SmooState(optax.tree.zeros_like(w)),
                                update=server_update),
        local_gradient=lambda loss_fn: smoo_gradient(loss_fn, rho))


@shares_fedavg_options(fedavg, server_step=False)
def fedsmoo(loss_fn, *, rho: float = 0.1, lam: float = 0.1, **options):
    """FedSMOO with SAM radius rho and FedDyn coefficient lam: compose(FedDyn, SMOO)."""
    check_number("rho", rho, 0.0)
    check_number("lam", lam, 0.0)
    return fedavg(loss_fn, correction=compose(feddyn_correction(lam), correction(rho)),
                  **options)


COSTS = FEDDYN_COSTS.merge(SMOO_COSTS)
