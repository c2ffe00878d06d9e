"""Every algorithm of the FedInit paper as a builder `name(loss_fn, *, hyperparameters,
shared options)`.

Each builder returns a FederatedAlgorithm (init, apply) and takes, besides its own
hyperparameters, FedAvg's options: `beta` (relaxed initialization, "+RI"), `delta_from`,
`weight_decay`, `clip_norm`, `client_optimizer`, `server_lr` / `server_optimizer` where the
server takes a step, and `runtime`; `help(builder)` lists them with their defaults
(options.py). REGISTRY maps the names to builders, table names, the paper's local-lr decay,
references and costs; everything else (the config's hyperparameter fields, their defaults,
display names, the report's order, the tests' parametrisation) is derived from it. A new
method is one module here plus one REGISTRY line (docs/algorithms.md, "Adding an algorithm").
"""
import inspect
from collections.abc import Callable
from typing import NamedTuple

from fedinit_jax.algorithms import fedacg as _fedacg
from fedinit_jax.algorithms import fedadam as _fedadam
from fedinit_jax.algorithms import fedavgm as _fedavgm
from fedinit_jax.algorithms import fedcm as _fedcm
from fedinit_jax.algorithms import feddyn as _feddyn
from fedinit_jax.algorithms import fedgamma as _fedgamma
from fedinit_jax.algorithms import fedsam as _fedsam
from fedinit_jax.algorithms import fedsmoo as _fedsmoo
from fedinit_jax.algorithms import fedspeed as _fedspeed
from fedinit_jax.algorithms import fedyogi as _fedyogi
from fedinit_jax.algorithms import mofedsam as _mofedsam
from fedinit_jax.algorithms import scaffold as _scaffold
from fedinit_jax.algorithms.fedacg import fedacg
from fedinit_jax.algorithms.fedadam import fedadam
from fedinit_jax.algorithms.fedavg import fedavg, fedinit
from fedinit_jax.algorithms.fedavgm import fedavgm
from fedinit_jax.algorithms.fedcm import fedcm
from fedinit_jax.algorithms.feddyn import feddyn
from fedinit_jax.algorithms.fedgamma import fedgamma
from fedinit_jax.algorithms.fedprox import fedprox
from fedinit_jax.algorithms.fedsam import fedsam
from fedinit_jax.algorithms.fedsmoo import fedsmoo
from fedinit_jax.algorithms.fedspeed import fedspeed
from fedinit_jax.algorithms.fedyogi import fedyogi
from fedinit_jax.algorithms.mofedsam import mofedsam
from fedinit_jax.algorithms.options import check_options
from fedinit_jax.algorithms.scaffold import scaffold
from fedinit_jax.types import Costs

# options every algorithm takes besides its hyperparameters (config fields of their own)
SHARED_OPTIONS = ("delta_from", "weight_decay", "clip_norm", "first_visit", "ri_offset")
# keyword arguments that are objects, not numbers: no config field, no hyperparameter
_OBJECTS = ("server_optimizer", "client_optimizer", "runtime", "correction")


def hyperparameters(builder) -> dict:
    """The numeric hyperparameters of a builder (or a registered name) and their defaults:
    its own keyword arguments and FedAvg's it shares (beta, server_lr), the builder's
    defaults winning; the shared options (delta_from, weight decay, clip) left out."""
    if isinstance(builder, str):
        builder = get_entry(builder).builder
    params = inspect.signature(builder).parameters
    shared = [name for name in inspect.signature(fedavg).parameters if name in params]
    return {name: params[name].default for name in dict.fromkeys([*shared, *params])
            if params[name].kind is params[name].KEYWORD_ONLY
            and name not in (*SHARED_OPTIONS, *_OBJECTS)
            and isinstance(params[name].default, (int, float))}


class Entry(NamedTuple):
    """A registered algorithm: its builder, its name in tables, the paper's per-round
    local-lr decay, its reference, and what it communicates and stores (Costs). Its
    hyperparameters and options come from the builder's signature."""

    builder: Callable
    display: str
    local_lr_decay: float
    reference: str
    costs: Costs = Costs()

    @property
    def defaults(self) -> dict:
        return hyperparameters(self.builder)

    @property
    def options(self) -> tuple:
        """Every keyword `get` takes for this algorithm (its signature's)."""
        return tuple(sorted(name for name in inspect.signature(self.builder).parameters
                            if name != "loss_fn"))


# one line per algorithm; the order is the order of the report's tables
REGISTRY = {
    "fedavg": Entry(fedavg, "FedAvg", 0.998, "McMahan et al. 2017"),
    "fedadam": Entry(fedadam, "FedAdam", 0.998, "Reddi et al. 2021", _fedadam.COSTS),
    "fedyogi": Entry(fedyogi, "FedYogi", 0.998, "Reddi et al. 2021", _fedyogi.COSTS),
    "fedavgm": Entry(fedavgm, "FedAvgM", 0.998, "Hsu et al. 2019", _fedavgm.COSTS),
    "fedacg": Entry(fedacg, "FedACG", 0.998, "Kim et al. 2024", _fedacg.COSTS),
    "fedsam": Entry(fedsam, "FedSAM", 0.998, "Qu et al. 2022", _fedsam.COSTS),
    "scaffold": Entry(scaffold, "SCAFFOLD", 0.998, "Karimireddy et al. 2020", _scaffold.COSTS),
    "feddyn": Entry(feddyn, "FedDyn", 0.9995, "Acar et al. 2021", _feddyn.COSTS),
    "fedcm": Entry(fedcm, "FedCM", 0.998, "Xu et al. 2021", _fedcm.COSTS),
    "fedprox": Entry(fedprox, "FedProx", 0.998, "Li et al. 2020"),
    "fedspeed": Entry(fedspeed, "FedSpeed", 0.998, "Sun et al. 2023 (FedSpeed)",
                      _fedspeed.COSTS),
    "fedsmoo": Entry(fedsmoo, "FedSMOO", 0.998, "Sun et al. 2023 (FedSMOO)", _fedsmoo.COSTS),
    "fedgamma": Entry(fedgamma, "FedGamma", 0.998, "Dai et al. 2023", _fedgamma.COSTS),
    "mofedsam": Entry(mofedsam, "MoFedSAM", 0.998, "Qu et al. 2022", _mofedsam.COSTS),
    "fedinit": Entry(fedinit, "FedInit", 0.998, "FedInit paper, Algorithm 1"),
}


def get_entry(name: str) -> Entry:
    """REGISTRY[name], or ValueError naming the registered algorithms."""
    if name not in REGISTRY:
        raise ValueError(f"algorithm={name!r} is unknown; registered: {', '.join(REGISTRY)}")
    return REGISTRY[name]


def hparam_names() -> tuple:
    """Every registered algorithm's hyperparameter names (the config's fields), in order."""
    return tuple(dict.fromkeys(h for entry in REGISTRY.values() for h in entry.defaults))


def get(name: str, loss_fn, **options):
    """Build the registered algorithm `name`; options override the builder's defaults. An
    option the algorithm does not take (misspelled, or meaningless for it, e.g. a server
    optimizer for FedDyn) is refused by name with the options it takes."""
    entry = get_entry(name)
    check_options(name, options, entry.options)
    return entry.builder(loss_fn, **options)


__all__ = ["REGISTRY", "Entry", "get", "get_entry", "hparam_names", "hyperparameters",
           "SHARED_OPTIONS", "fedavg", "fedinit", "fedadam", "fedsam", "scaffold", "feddyn",
           "fedcm", "fedprox", "fedspeed", "fedsmoo", "fedgamma", "mofedsam", "fedyogi",
           "fedavgm", "fedacg"]
