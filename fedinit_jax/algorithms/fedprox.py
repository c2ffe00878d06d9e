"""FedProx (Li et al., 2020): a proximal term towards the client's start point.

    local gradient:  g + mu * (w_k - w_i0)

mu = 0.01 by default; mu = 0 is exactly FedAvg. With RI the proximal centre is w_i0.
"""
import jax

from fedinit_jax.algorithms._checks import check_range
from fedinit_jax.algorithms.fedavg import fedavg
from fedinit_jax.correction import Correction


def correction(mu: float) -> Correction:
    """FedProx's proximal gradient mu * (w_k - w_i0)."""

    def gradient(g, w, ctx):
        return jax.tree.map(lambda g, wk, w0: g + mu * (wk - w0), g, w, ctx.w_start)

    return Correction(gradient=gradient)


def fedprox(loss_fn, *, mu: float = 0.01, **options):
    """FedProx with proximal coefficient mu >= 0."""
    check_range("mu", mu, 0.0)
    return fedavg(loss_fn, correction=correction(mu), **options)
