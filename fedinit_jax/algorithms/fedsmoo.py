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
from typing import Any, NamedTuple

import jax
import optax

from fedinit_jax import local
from fedinit_jax.algorithms._checks import check_range
from fedinit_jax.algorithms.fedavg import fedavg
from fedinit_jax.algorithms.feddyn import correction as feddyn_correction
from fedinit_jax.correction import Correction, LocalContext
from fedinit_jax.tree import client_mean, zeros_like
from fedinit_jax.types import Costs


class ClientState(NamedTuple):
    h: Any   # FedDyn's h_i
    mu: Any  # the SAM dual variable mu_i


def smoo_gradient(loss_fn, rho) -> local.Gradient:
    """The dynamically regularised SAM gradient; its carry is mu_i, starting from the stored one."""
    value_and_grad = jax.value_and_grad(loss_fn)

    def init(ctx):
        return ctx.client_extra.mu

    def apply(w, batch, key, mu, ctx):
        s = ctx.server_extra
        loss, g1 = value_and_grad(w, batch, key)
        g_tilde = jax.tree.map(lambda g, m, si: g - (m + si), g1, mu, s)
        w_adv, e = local.ascent_step(w, g_tilde, rho)
        mu = jax.tree.map(lambda m, ei, si: m + ei - si, mu, e, s)
        _, g = value_and_grad(w_adv, batch, key)
        return loss, g, mu

    return local.Gradient(init, apply)


def correction(lam: float, rho: float) -> Correction:
    """FedDyn's correction on the h part; mu_i and s kept for the SMOO gradient."""
    dyn = feddyn_correction(lam)

    def as_dyn(ctx):
        return ctx._replace(client_extra=ctx.client_extra.h)

    def gradient(g, w, ctx: LocalContext):
        return dyn.gradient(g, w, as_dyn(ctx))

    def client_update(ctx, progress, steps_lr, mu_final):
        return ClientState(h=dyn.client_update(as_dyn(ctx), progress, steps_lr, ()),
                           mu=mu_final)

    def server_update(_s, _old, new, _mean_progress, _steps_lr, _num_clients, weights):
        mean_mu = client_mean(new.mu, weights)
        scale = rho / (optax.tree.norm(mean_mu) + 1e-7)
        return jax.tree.map(lambda m: scale * m, mean_mu)

    def global_model(w_candidate, mean_w_end, s, client_extra):
        return dyn.global_model(w_candidate, mean_w_end, s, client_extra.h)

    return Correction(
        init_server=zeros_like, init_client=lambda w: ClientState(zeros_like(w), zeros_like(w)),
        gradient=gradient, decay=dyn.decay, client_update=client_update, server_update=server_update,
        global_model=global_model,
        costs=Costs(down=("w", "s"), up=("delta", "mu_i"), server_state=("mean_h", "s"),
                    client_state=("h_i", "mu_i"), client_work=("e",)))


def fedsmoo(loss_fn, *, rho: float = 0.1, lam: float = 0.1, **options):
    """FedSMOO with SAM radius rho and FedDyn coefficient lam."""
    check_range("rho", rho, 0.0)
    check_range("lam", lam, 0.0)
    return fedavg(loss_fn, gradient=lambda fn: smoo_gradient(fn, rho),
                  correction=correction(lam, rho), **options)
