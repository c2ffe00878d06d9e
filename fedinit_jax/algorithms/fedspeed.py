"""FedSpeed (Sun et al., 2023), as in the authors' simulator: FedDyn with SAM's gradient.

    local gradient:  clip(SAM gradient (rho) + lam * (h_i - w_i0)) + (wd + lam) * w_k
    server:          h_i <- h_i + p_i (p_i = w_iK - w_i0);  w <- mean_S(w_iK) + mean_C(h_i)

(FedDyn's clip form and state rule, feddyn.py.) compose(FedDyn, SAM).

rho = 0.1, lam = 0.1 by default; rho = 0 is exactly FedDyn.
"""
from fedinit_jax.algorithms.fedavg import fedavg
from fedinit_jax.algorithms.feddyn import COSTS as FEDDYN_COSTS
from fedinit_jax.algorithms.feddyn import correction as feddyn_correction
from fedinit_jax.algorithms.fedsam import COSTS as SAM_COSTS
from fedinit_jax.algorithms.fedsam import correction as sam
from fedinit_jax.algorithms.options import shares_fedavg_options
from fedinit_jax.checks import check_number
from fedinit_jax.correction import compose

__all__ = ["fedspeed", "COSTS"]


@shares_fedavg_options(fedavg, server_step=False)
def fedspeed(loss_fn, *, rho: float = 0.1, lam: float = 0.1, **options):
    """FedDyn's correction and server on the SAM gradient of radius rho."""
    check_number("rho", rho, 0.0)
    check_number("lam", lam, 0.0)
    return fedavg(loss_fn, correction=compose(feddyn_correction(lam), sam(rho)),
                  **options)


COSTS = FEDDYN_COSTS.merge(SAM_COSTS)
