"""FedAvgM (Hsu et al. 2019, "Measuring the Effects of Non-Identical Data Distribution for
Federated Visual Classification"): FedAvg whose server step is SGD with momentum on the
pseudo-gradient -dbar, dbar = mean_S(delta_i):

    m <- momentum m - dbar,   w <- w - eta_g m

(heavy ball without dampening, optax.sgd(eta_g, momentum), as the paper's server update
v <- beta v + Delta w, w <- w - v). Defaults eta_g = 1 and momentum 0.9, the paper's
best-performing settings on CIFAR-10; Reddi et al. 2021 tune both. The FedInit authors'
simulator has no FedAvgM.
"""
import optax

from fedinit_jax.algorithms.fedavg import fedavg
from fedinit_jax.algorithms.options import shares_fedavg_options
from fedinit_jax.checks import check_number
from fedinit_jax.types import Costs

__all__ = ["fedavgm", "COSTS"]


@shares_fedavg_options(fedavg, server_optimizer=False)  # its server optimizer is its own
def fedavgm(loss_fn, *, server_lr: float = 1.0, momentum: float = 0.9, **options):
    """w <- w - eta_g m,  m <- momentum m + (-mean_S delta). Its server keeps state (m), so
    with RI (beta != 0) it takes delta_from="start" (help(fedavg))."""
    check_number("server_lr", server_lr, 0.0, low_open=True)
    check_number("momentum", momentum, 0.0, 1.0, high_open=True)
    return fedavg(loss_fn, server_optimizer=optax.sgd(server_lr, momentum), **options)


COSTS = Costs(server_state=("m",))
