"""FedACG (Kim, Kim and Han, CVPR 2024, "Communication-Efficient Federated Learning with
Accelerated Client Gradient"): the server broadcasts a lookahead w + lambda m^t, and each
client trains from it with a proximal term towards it:

    w_i0   = w^t + lambda m^t                          (the same start for every client)
    loss_i = L_i(w) + (mu / 2) ||w - w_i0||^2          (K local SGD steps)
    m^{t+1} = lambda m^t + mean_S(w_iK - w_i0),   w^{t+1} = w^t + m^{t+1}

so w^{t+1} = mean_S(w_iK) and m^{t+1} = w^{t+1} - w^t, the server's last step. Here that is
FedAvg (Algorithm 1's `global` aggregation, eta_g = 1) with relaxed initialization whose
offset is the server's last step, ri_offset="lookahead" (fedinit_jax/ri_offset.py: o_i = m^t
for every client), at beta = lambda: FedACG is a member of the RI family with a shared,
client-independent offset, as `shared` (FedInit's momentum rule without the client's own
part) is with its weight fixed by N/C.

Where it follows which: lambda = 0.85 (`beta`) is the authors' code's server momentum
(configs/server/FedACG.yaml). Their proximal loss is weight * ||w - w_i0||^2 with weight
1e-3 (configs/client/ACG.yaml, no 1/2), added to the loss before the gradient is clipped at
norm 10: here mu = 2 x 1e-3 = 0.002 on the paper's (mu / 2) ||.||^2 form, the pull
mu (w_k - w_i0) added before clipping, as their code does (FedProx here adds its pull after
clipping, the FedInit authors' form). Weight decay and clipping are this library's
defaults (1e-3, 10), as for every method. The rows (FedState.ri_rows) keep
w^{t+1} - w_iK of each client's last visit, for Delta^t only; the round never reads them.
"""
import jax

from fedinit_jax.algorithms.fedavg import fedavg
from fedinit_jax.algorithms.options import shares_fedavg_options
from fedinit_jax.checks import check_number
from fedinit_jax.correction import ClientCorrection, Correction
from fedinit_jax.types import Costs

__all__ = ["correction", "fedacg", "COSTS", "FIXED"]

# FedAvg's options that are FedACG's definition, not choices: the lookahead start, Algorithm
# 1's aggregation at eta_g = 1 (m^{t+1} = w^{t+1} - w^t)
FIXED = ("server_lr", "server_optimizer", "delta_from", "ri_offset", "first_visit")


def correction(mu: float) -> Correction:
    """FedACG's proximal gradient g + mu (w_k - w_i0), before clipping (the authors' code)."""

    def gradient(g, w_k, ctx):
        return jax.tree.map(lambda gk, wk, w0: gk + mu * (wk - w0), g, w_k, ctx.w_start)

    return Correction(client=ClientCorrection(gradient=gradient))


@shares_fedavg_options(fedavg, refused=FIXED)
def fedacg(loss_fn, *, beta: float = 0.85, mu: float = 0.002, **options):
    """FedACG: clients start from w + beta m^t (beta is its lambda, m^t the server's last
    step) with the proximal coefficient mu >= 0 towards that start; beta = 0 and mu = 0 is
    FedAvg."""
    check_number("beta", beta, 0.0, 1.0, high_open=True)
    check_number("mu", mu, 0.0)
    return fedavg(loss_fn, correction=correction(mu), beta=beta, ri_offset="lookahead",
                  first_visit="global", **options)


COSTS = Costs(server_state=("m",))
