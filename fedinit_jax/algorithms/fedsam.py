"""FedSAM (Qu et al., 2022; Caldarola et al., 2022): FedAvg whose local gradient is SAM's.

    g1 = grad f(w);  e = rho g1 / (||g1|| + 1e-7);  g = grad f(w + e)  (same minibatch)

rho = 0.1 by default; rho = 0 is exactly FedAvg. The server is FedAvg's. `correction(rho)` is
SAM as a Correction that other methods compose with (FedSpeed, FedGamma, MoFedSAM).
"""
import functools

from fedinit_jax import local
from fedinit_jax.algorithms.fedavg import fedavg
from fedinit_jax.algorithms.options import shares_fedavg_options
from fedinit_jax.checks import check_number
from fedinit_jax.correction import Correction
from fedinit_jax.types import Costs

__all__ = ["COSTS", "correction", "fedsam"]

COSTS = Costs(client_work=("e",))


def correction(rho: float) -> Correction:
    """The SAM gradient of radius rho; a client holds one more buffer, the perturbation e."""
    return Correction(local_gradient=functools.partial(local.sam_gradient, rho=rho))


@shares_fedavg_options(fedavg)
def fedsam(loss_fn, *, rho: float = 0.1, **options):
    """FedAvg with the SAM gradient of radius rho (two gradients per local step)."""
    check_number("rho", rho, 0.0)
    return fedavg(loss_fn, correction=correction(rho), **options)
