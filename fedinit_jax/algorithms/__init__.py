"""Every algorithm of the FedInit paper as a builder `name(loss_fn, **hparams)`.

Each builder returns a FederatedAlgorithm(init, apply, round_fn, costs) and takes `beta`
(relaxed initialization, "+RI") and `delta_from` like FedAvg/FedInit. REGISTRY maps the
names to builders with their documented defaults and the paper's local-lr decay.
"""
from typing import Callable, NamedTuple

from fedinit_jax.algorithms.fedadam import fedadam
from fedinit_jax.algorithms.fedavg import fedavg, fedinit
from fedinit_jax.algorithms.fedcm import fedcm
from fedinit_jax.algorithms.feddyn import feddyn
from fedinit_jax.algorithms.fedprox import fedprox
from fedinit_jax.algorithms.fedgamma import fedgamma
from fedinit_jax.algorithms.fedsam import fedsam
from fedinit_jax.algorithms.fedsmoo import fedsmoo
from fedinit_jax.algorithms.fedspeed import fedspeed
from fedinit_jax.algorithms.mofedsam import mofedsam
from fedinit_jax.algorithms.scaffold import scaffold


class Entry(NamedTuple):
    """A registered algorithm: its builder, default hyperparameters and the paper's lr decay."""

    builder: Callable
    defaults: dict
    local_lr_decay: float
    reference: str


REGISTRY = {
    "fedavg": Entry(fedavg, {"beta": 0.0, "server_lr": 1.0}, 0.998, "McMahan et al. 2017"),
    "fedinit": Entry(fedinit, {"beta": 0.1, "server_lr": 1.0}, 0.998, "FedInit paper, Algorithm 1"),
    "fedadam": Entry(fedadam, {"server_lr": 0.1, "b1": 0.9, "b2": 0.99, "eps": 0.01}, 0.998,
                     "Reddi et al. 2021"),
    "fedsam": Entry(fedsam, {"rho": 0.1}, 0.998, "Qu et al. 2022"),
    "scaffold": Entry(scaffold, {}, 0.998, "Karimireddy et al. 2020"),
    "feddyn": Entry(feddyn, {"lam": 0.1}, 0.9995, "Acar et al. 2021"),
    "fedcm": Entry(fedcm, {"alpha": 0.1}, 0.998, "Xu et al. 2021"),
    "fedprox": Entry(fedprox, {"mu": 0.01}, 0.998, "Li et al. 2020"),
    "fedspeed": Entry(fedspeed, {"rho": 0.1, "lam": 0.1}, 0.998, "Sun et al. 2023 (FedSpeed)"),
    "fedsmoo": Entry(fedsmoo, {"rho": 0.1, "lam": 0.1}, 0.998, "Sun et al. 2023 (FedSMOO)"),
    "fedgamma": Entry(fedgamma, {"rho": 0.01}, 0.998, "Dai et al. 2023"),
    "mofedsam": Entry(mofedsam, {"rho": 0.1, "alpha": 0.1}, 0.998, "Qu et al. 2022"),
}


def get(name: str, loss_fn, **hparams):
    """Build the registered algorithm `name` with its defaults overridden by hparams."""
    if name not in REGISTRY:
        raise ValueError(f"algorithm={name!r} is unknown; registered: {', '.join(REGISTRY)}")
    entry = REGISTRY[name]
    return entry.builder(loss_fn, **{**entry.defaults, **hparams})


__all__ = ["REGISTRY", "Entry", "get", "fedavg", "fedinit", "fedadam", "fedsam", "scaffold",
           "feddyn", "fedcm", "fedprox", "fedspeed", "fedsmoo", "fedgamma", "mofedsam"]
