"""Task families: what a Task is, and the registry from a config's dataset to its family
(the package, fedinit_jax/experiment/tasks/__init__.py, registers the built-in ones)."""
from collections.abc import Callable
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

__all__ = ["Task", "AbstractRound", "Family", "REGISTRY", "IMAGES", "register", "family",
           "namespace", "namespace_family", "field_defaults", "own_fields"]

# the family of every dataset not registered (image classification: tasks/images.py), set
# once by the package (tasks/__init__.py), which imports every family
_DEFAULT: list = []


class Task(NamedTuple):
    """A built federated task: what experiment.build needs besides the algorithm.

    round_batches(ids, rng) -> (batches [N, K, B, ...], step_mask [N, K] or None).
    client_sizes: [C] each client's size (examples or tokens; aggregation="size").
    loss_fn(params, batch, key) -> scalar; evaluate(params) -> {'test_accuracy', ...}.
    model: a flax module (init(key, input_shape), apply(params, x)); input_shape: one
    example's shape; steps: K; example_bytes: one example of a round input (data, label and
    the batch index), for the host-memory check; data_info: what the run was built from
    (JSON: the texts' folder, their files, the clients found), which the binaries print and
    record in run_info.json.
    """

    round_batches: Callable
    client_sizes: np.ndarray
    loss_fn: Callable
    evaluate: Callable
    model: Any
    input_shape: tuple
    num_classes: int
    steps: int
    example_bytes: int
    data_info: dict = {}  # what data the run used (files, clients): printed, run_info.json


class AbstractRound(NamedTuple):
    """A round's shapes without its data (benchmarks/plan.py): the model, the loss, one
    example's shape, K, the batches as jax.ShapeDtypeStruct and the step mask (or None)."""

    model: Any
    loss_fn: Callable
    input_shape: tuple
    steps: int
    batches: Any
    step_mask: Any


class Family(NamedTuple):
    """A dataset family.

    build(plan) -> Task, from the Plan's typed parts (experiment.plan(config): plan.data,
    plan.sampling, plan.schedule, plan.runtime).  check(config): ValueError("config.<field>...")
    for what can be refused without the data (called by experiment.validate, before there is
    a plan).  abstract(plan, slots) -> AbstractRound.  natural_split: the label of the
    data's own partition ("roles"), or None when the config's partition (iid / dirichlet /
    pathological) splits it.  fields: the family's own config fields and their defaults
    ({"alpha": 1.0, "beta": 1.0}): a plan's data.fields, own_fields(config).
    """

    build: Callable[[Any], Task]
    check: Callable[[Any], None]
    abstract: Callable[[Any, int], AbstractRound]
    natural_split: str | None = None
    fields: Any = MappingProxyType({})


REGISTRY: dict[str, Family] = {}
IMAGES = "images"  # config.task's namespace of the image family (any unregistered dataset)


def register(dataset: str, family: Family) -> None:
    """config.dataset == `dataset` is built by `family` from now on."""
    if not isinstance(dataset, str) or not dataset:
        raise ValueError(f"register(dataset={dataset!r}, ...): a non-empty str (config.dataset)")
    if not isinstance(family, Family):
        raise ValueError(f"register({dataset!r}, ...): a tasks.Family, got {type(family)}")
    if dataset == IMAGES:
        raise ValueError(f"register({IMAGES!r}, ...): {IMAGES!r} is the image family's "
                         "namespace in config.task; choose another name")
    if REGISTRY.get(dataset, family) is not family:
        raise ValueError(f"register({dataset!r}, ...): {dataset!r} is already registered to "
                         "another family; choose another name")
    REGISTRY[dataset] = family


def family(dataset: str) -> Family:
    """The family of a config's dataset: a registered one, else image classification."""
    return REGISTRY.get(dataset) or _DEFAULT[0]


def namespace(dataset: str) -> str:
    """Where config.task holds the fields of `dataset`'s family: its registered name, else
    IMAGES (digits, cifar10, any TFDS image dataset share the image family's fields)."""
    return dataset if dataset in REGISTRY else IMAGES


def namespace_family(name: str) -> Family | None:
    """The family whose fields config.task.<name> holds (None: no family's)."""
    return _DEFAULT[0] if name == IMAGES else REGISTRY.get(name)


def field_defaults() -> dict:
    """{namespace: {field: default}} of every family with fields of its own (the image
    family's under IMAGES): what a config file's `task` holds (experiments/configs/default.py)."""
    named = {name: dict(f.fields) for name, f in REGISTRY.items() if f.fields}
    return {IMAGES: dict(_DEFAULT[0].fields), **named}


def own_fields(config) -> dict:
    """The values of the config's dataset family's own fields: config.task.<namespace> over
    the family's defaults."""
    dataset = config["dataset"]
    given = (config.get("task") or {}).get(namespace(dataset)) or {}
    return {**family(dataset).fields, **given}


def register_default(default: Family) -> None:
    """The family of every dataset not registered (the package sets image classification)."""
    _DEFAULT[:] = [default]
