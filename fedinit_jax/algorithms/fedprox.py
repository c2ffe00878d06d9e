"""FedProx (Li et al., 2020): a proximal term towards the client's start point, in the
authors' code's form.

    local gradient:  clip(g - mu * w_i0) + (wd + mu) * w_k

Without clipping this is g + mu * (w_k - w_i0) + wd * w_k. With clipping the authors clip only
g - mu * w_i0 and add mu * w_k with the weight decay afterwards (their SGD's weight_decay =
wd + mu), as for FedDyn; that form is implemented. mu = 0.01 by default; mu = 0 is exactly
FedAvg. With RI the proximal centre is w_i0.
"""
import jax

from fedinit_jax.algorithms.fedavg import fedavg
from fedinit_jax.algorithms.options import shares_fedavg_options
from fedinit_jax.checks import check_number
from fedinit_jax.correction import ClientCorrection, Correction

__all__ = ["correction", "fedprox"]


def correction(mu: float) -> Correction:
    """FedProx's proximal gradient: -mu * w_i0 before clipping, mu * w_k after it."""

    def gradient(g, _w_k, ctx):
        return jax.tree.map(lambda g, w0: g - mu * w0, g, ctx.w_start)

    return Correction(client=ClientCorrection(gradient=gradient, decay=mu))


@shares_fedavg_options(fedavg)
def fedprox(loss_fn, *, mu: float = 0.01, **options):
    """FedProx with proximal coefficient mu >= 0."""
    check_number("mu", mu, 0.0)
    return fedavg(loss_fn, correction=correction(mu), **options)
