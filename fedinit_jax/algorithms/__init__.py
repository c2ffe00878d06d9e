"""Every algorithm of the FedInit paper as a builder `name(loss_fn, **hparams)`.

Each builder returns a FederatedAlgorithm(init, apply, round_fn, costs) and takes `beta`
(relaxed initialization, "+RI") and `delta_from` like FedAvg/FedInit. REGISTRY maps the
names to builders, table names and the paper's local-lr decay; everything else (the config's
hyperparameter fields, their defaults, display names, the report's order, the tests'
parametrisation) is derived from it. A new method is one module here plus one REGISTRY line
(docs/algorithms.md, "Adding an algorithm").
"""
import inspect
from collections.abc import Callable
from typing import NamedTuple

from fedinit_jax.algorithms.fedadam import fedadam
from fedinit_jax.algorithms.fedavg import fedavg, fedinit
from fedinit_jax.algorithms.fedcm import fedcm
from fedinit_jax.algorithms.feddyn import feddyn
from fedinit_jax.algorithms.fedgamma import fedgamma
from fedinit_jax.algorithms.fedprox import fedprox
from fedinit_jax.algorithms.fedsam import fedsam
from fedinit_jax.algorithms.fedsmoo import fedsmoo
from fedinit_jax.algorithms.fedspeed import fedspeed
from fedinit_jax.algorithms.mofedsam import mofedsam
from fedinit_jax.algorithms.scaffold import scaffold

# FedAvg's arguments that are not hyperparameters of a method: how the round is assembled
# (correction, costs, server_optimizer) and the options every method shares, which are
# config fields of their own
_NOT_HPARAMS = ("loss_fn", "correction", "costs", "server_optimizer", "delta_from",
                "weight_decay", "clip_norm")


def hyperparameters(builder) -> dict:
    """The documented hyperparameters of a builder and their defaults: its own keyword
    arguments and FedAvg's (beta, server_lr), the builder's defaults winning."""
    shared = [fedavg] if builder is not fedavg else []
    found = {}
    for fn in [*shared, builder]:
        for name, p in inspect.signature(fn).parameters.items():
            if (p.kind is p.KEYWORD_ONLY and name not in _NOT_HPARAMS
                    and isinstance(p.default, (int, float))):
                found[name] = p.default
    return found


# options every algorithm takes besides its hyperparameters (config fields of their own)
SHARED_OPTIONS = ("delta_from", "weight_decay", "clip_norm")


class Entry(NamedTuple):
    """A registered algorithm: its builder, its name in tables, the paper's per-round
    local-lr decay, and its reference. Its hyperparameters come from the builder.

    server_step: False when the server replaces w instead of stepping along the mean update
    (the FedDyn family), so server_lr and server_optimizer mean nothing there.
    server_optimizer: whether a user's optax server optimizer may replace sgd(server_lr)
    (not for FedAdam, whose server optimizer is its definition)."""

    builder: Callable
    display: str
    local_lr_decay: float
    reference: str
    server_step: bool = True
    server_optimizer: bool = True

    @property
    def defaults(self) -> dict:
        found = hyperparameters(self.builder)
        if not self.server_step:
            found.pop("server_lr", None)
        return found

    @property
    def options(self) -> tuple:
        """Every keyword `get` takes for this algorithm."""
        extra = ("server_optimizer",) if self.server_step and self.server_optimizer else ()
        return tuple(sorted((*self.defaults, *SHARED_OPTIONS, *extra)))


# one line per algorithm; the order is the order of the report's tables
REGISTRY = {
    "fedavg": Entry(fedavg, "FedAvg", 0.998, "McMahan et al. 2017"),
    "fedadam": Entry(fedadam, "FedAdam", 0.998, "Reddi et al. 2021", server_optimizer=False),
    "fedsam": Entry(fedsam, "FedSAM", 0.998, "Qu et al. 2022"),
    "scaffold": Entry(scaffold, "SCAFFOLD", 0.998, "Karimireddy et al. 2020"),
    "feddyn": Entry(feddyn, "FedDyn", 0.9995, "Acar et al. 2021", server_step=False),
    "fedcm": Entry(fedcm, "FedCM", 0.998, "Xu et al. 2021"),
    "fedprox": Entry(fedprox, "FedProx", 0.998, "Li et al. 2020"),
    "fedspeed": Entry(fedspeed, "FedSpeed", 0.998, "Sun et al. 2023 (FedSpeed)",
                      server_step=False),
    "fedsmoo": Entry(fedsmoo, "FedSMOO", 0.998, "Sun et al. 2023 (FedSMOO)", server_step=False),
    "fedgamma": Entry(fedgamma, "FedGamma", 0.998, "Dai et al. 2023"),
    "mofedsam": Entry(mofedsam, "MoFedSAM", 0.998, "Qu et al. 2022"),
    "fedinit": Entry(fedinit, "FedInit", 0.998, "FedInit paper, Algorithm 1"),
}


def hparam_names() -> tuple:
    """Every registered algorithm's hyperparameter names (the config's fields), in order."""
    return tuple(dict.fromkeys(h for entry in REGISTRY.values() for h in entry.defaults))


def get(name: str, loss_fn, **hparams):
    """Build the registered algorithm `name`; hparams override the builder's defaults. An
    option the algorithm does not take (misspelled, or meaningless for it, e.g. a server
    optimizer for FedDyn) is refused by name with the options it takes."""
    if name not in REGISTRY:
        raise ValueError(f"algorithm={name!r} is unknown; registered: {', '.join(REGISTRY)}")
    entry = REGISTRY[name]
    unknown = sorted(set(hparams) - set(entry.options))
    if unknown:
        raise ValueError(f"{', '.join(unknown)}={hparams[unknown[0]]!r}: {name} takes no option "
                         f"{', '.join(unknown)}; its options: {', '.join(entry.options)}")
    return entry.builder(loss_fn, **hparams)


__all__ = ["REGISTRY", "Entry", "get", "hparam_names", "hyperparameters", "fedavg", "fedinit",
           "fedadam", "fedsam", "scaffold", "feddyn", "fedcm", "fedprox", "fedspeed", "fedsmoo",
           "fedgamma", "mofedsam"]
