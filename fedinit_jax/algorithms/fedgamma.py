"""FedGamma (Dai et al., 2023), as in the authors' simulator: SCAFFOLD with SAM's gradient.

    local gradient:  SAM gradient (rho) + (c - c_i)
    server:          SCAFFOLD's (option II control variates)

compose(SCAFFOLD, SAM). rho = 0.01 by default; rho = 0 is exactly SCAFFOLD.
"""
from fedinit_jax.algorithms.fedavg import fedavg
from fedinit_jax.algorithms.fedsam import COSTS as SAM_COSTS
from fedinit_jax.algorithms.fedsam import correction as sam
from fedinit_jax.algorithms.options import shares_fedavg_options
from fedinit_jax.algorithms.scaffold import CORRECTION as SCAFFOLD
from fedinit_jax.algorithms.scaffold import COSTS as SCAFFOLD_COSTS
from fedinit_jax.checks import check_number
from fedinit_jax.correction import compose

__all__ = ["fedgamma", "COSTS"]


@shares_fedavg_options(fedavg)
def fedgamma(loss_fn, *, rho: float = 0.01, **options):
    """SCAFFOLD's correction and server on the SAM gradient of radius rho."""
    check_number("rho", rho, 0.0)
    return fedavg(loss_fn, correction=compose(SCAFFOLD, sam(rho)),
                  **options)


COSTS = SCAFFOLD_COSTS.merge(SAM_COSTS)
