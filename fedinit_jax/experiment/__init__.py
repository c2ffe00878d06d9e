"""The experiment machinery: a run from a flat config (what the binaries in experiments/ use).

This subpackage holds what the core (fedinit_jax's algorithms, round, models, data loaders)
does not need: the config resolved and validated (config.py), planned (planning.py) and built
(building.py, with the memory checks of memory.py), the dataset families (tasks/), the
host loop (simulation.py) with its resume (resume.py), stops (stopping.py) and outputs
(outputs.py), workdirs and their lock
(workdir.py), checkpoints (checkpoint.py, orbax), multi-process start-up (distributed.py) and
fetching data (fetch.py). It needs the `[experiments]` extra (TFDS, orbax, ml_collections,
TensorBoard, tqdm, matplotlib, scikit-learn).

`validate(config)` checks every field (types, ranges, names, cross-field rules) and raises
ValueError("config.<field>=...: what is allowed") before anything is loaded or compiled.
`checked(config)` resolves the config (`resolve`: the values that decide the numbers written
out) and validates it: what a sweep's parent knows of a cell. `plan(config)` does that once
and computes what follows from it on this process's devices (the runtime, the client slots
N, E|S|, the lr decay, the builder's arguments): the Plan that `build(plan)` (data, algorithm,
memory checks, compiled round), the host loop (simulation.run), the sweep's cells and
benchmarks/plan.py receive. The config is any mapping with the keys of
experiments/configs/default.py (an ml_collections ConfigDict there).
"""
from fedinit_jax.experiment.building import (
    Experiment,
    build,
    check_compiled_round,
    first_round_input,
    masked,
    round_input,
)
from fedinit_jax.experiment.config import (
    AGGREGATIONS,
    MAX_CLIENTS,
    OPTIONS,
    SEED_MAX,
    accepted_hparams,
    algorithm_kwargs,
    checked,
    expected_clients,
    flat_fields,
    local_lr_decay,
    options_not_applicable,
    read_recorded,
    resolve,
    saved_config,
    validate,
)
from fedinit_jax.experiment.memory import available_memory, host_memory, round_memory
from fedinit_jax.experiment.planning import Plan, client_slots, num_devices, plan, runtime

__all__ = [
    "AGGREGATIONS", "MAX_CLIENTS", "OPTIONS", "SEED_MAX",
    "Experiment", "Plan", "accepted_hparams", "algorithm_kwargs", "available_memory", "build",
    "check_compiled_round", "checked", "client_slots", "expected_clients", "first_round_input",
    "flat_fields",
    "host_memory", "local_lr_decay", "masked", "num_devices", "options_not_applicable", "plan",
    "read_recorded", "resolve", "round_input", "round_memory", "runtime", "saved_config",
    "validate",
]
