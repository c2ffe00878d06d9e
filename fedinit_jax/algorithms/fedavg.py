"""FedAvg and FedInit (paper Algorithm 1).

FedAvg (McMahan et al., 2017): every sampled client starts from w, runs K SGD steps, and the
server moves w by the mean update: w <- w + eta_g * mean_S(w_iK - w).

FedInit (this paper): the same, but client i starts from the personalized relaxed
initialization  w_i0 = w + beta * (w - w_i)  (Algorithm 1, line 6), beta = 0.1 by default.
Every other baseline is this builder with a Correction or a server optimizer plugged in, so
"+RI" is the `beta` argument of any of them.
"""
import optax

from fedinit_jax.checks import check_number
from fedinit_jax.correction import NONE
from fedinit_jax.federated_round import build_algorithm


def fedavg(loss_fn, *, server_lr: float = 1.0, server_optimizer=None, beta: float = 0.0,
           delta_from: str = "global", weight_decay=1e-3, clip_norm=10.0, correction=NONE,
           costs=None):
    """FedAvg (+RI when beta != 0); paper defaults: wd 1e-3, clip 10, eta_g 1.

    server_optimizer, if given, replaces sgd(server_lr) on the pseudo-gradient -mean delta.
    How the round runs (execution, devices, client-state dtype, donation) is chosen on the
    result: `fedavg(...).with_runtime(execution="sequential")`.
    """
    if server_optimizer is None:
        check_number("server_lr", server_lr, 0.0, low_open=True)
        server_optimizer = optax.sgd(server_lr)
    return build_algorithm(
        loss_fn, correction=correction, beta=beta, delta_from=delta_from,
        server_optimizer=server_optimizer, clip_norm=clip_norm, weight_decay=weight_decay,
        costs=costs)


def fedinit(loss_fn, *, beta: float = 0.1, **options):
    """FedInit: FedAvg with relaxed initialization w_i0 = w + beta (w - w_i), beta = 0.1."""
    return fedavg(loss_fn, beta=beta, **options)
