"""MoFedSAM (Qu et al., 2022), as in the authors' simulator: FedCM with SAM's gradient.

    local gradient:  alpha * (SAM gradient, rho) + (1 - alpha) * d,  d = -dbar_prev / (K eta_l)
    server:          FedCM's

compose(FedCM, SAM). rho = 0.1, alpha = 0.1 by default; rho = 0 is exactly FedCM.
"""
from fedinit_jax.algorithms.fedavg import fedavg
from fedinit_jax.algorithms.fedcm import COSTS as FEDCM_COSTS
from fedinit_jax.algorithms.fedcm import correction as fedcm_correction
from fedinit_jax.algorithms.fedsam import COSTS as SAM_COSTS
from fedinit_jax.algorithms.fedsam import correction as sam
from fedinit_jax.algorithms.options import shares_fedavg_options
from fedinit_jax.checks import check_number
from fedinit_jax.correction import compose

__all__ = ["mofedsam", "COSTS"]


@shares_fedavg_options(fedavg)
def mofedsam(loss_fn, *, rho: float = 0.1, alpha: float = 0.1, **options):
    """FedCM's momentum mixing and server on the SAM gradient of radius rho."""
    check_number("rho", rho, 0.0)
    check_number("alpha", alpha, 0.0, 1.0)
    return fedavg(loss_fn, correction=compose(fedcm_correction(alpha), sam(rho)),
                  **options)


COSTS = FEDCM_COSTS.merge(SAM_COSTS)
