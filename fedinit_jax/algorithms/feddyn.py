"""FedDyn (Acar et al., 2021) as a Correction of FedAvg, in the authors' code's form.

    local gradient:  g + lam * h_i + lam * (w_k - w_i0)
    after training:  h_i <- h_i + delta_i
    server:          w <- mean_S(w_iK) + mean_C(h_i)     (eta_g unused)

lam = 0.1 by default; the paper's FedDyn runs decay eta_l by 0.9995 per round.
"""
import jax
import jax.numpy as jnp

from fedinit_jax.algorithms._checks import check_range
from fedinit_jax.algorithms.fedavg import fedavg
from fedinit_jax.correction import Correction
from fedinit_jax.tree import zeros_like
from fedinit_jax.types import Costs


def _client_update(ctx, delta, _steps_lr, _carry=()):
    return jax.tree.map(jnp.add, ctx.client_extra, delta)


def _global_model(_w_candidate, mean_w_end, _server_extra, h_all):
    return jax.tree.map(lambda w, h: w + jnp.mean(h, axis=0), mean_w_end, h_all)


def correction(lam: float) -> Correction:
    """FedDyn's dual correction with coefficient lam."""

    def gradient(g, w, ctx):
        return jax.tree.map(lambda g, h, wk, w0: g + lam * h + lam * (wk - w0),
                            g, ctx.client_extra, w, ctx.w_start)

    return Correction(init_client=zeros_like, gradient=gradient, client_update=_client_update,
                      global_model=_global_model,
                      costs=Costs(server_state=("mean_h",), client_state=("h_i",)))


def feddyn(loss_fn, *, lam: float = 0.1, **options):
    """FedDyn with dual coefficient lam; the server model is mean_S(w_iK) + mean_C(h_i)."""
    check_range("lam", lam, 0.0)
    return fedavg(loss_fn, correction=correction(lam), **options)
