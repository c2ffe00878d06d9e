"""The Plan: a config checked once and what follows from it on this process's devices, one
typed part per concern (the data, the algorithm, the runtime, the schedule, the sampling,
the client store), which the build, its memory checks, the host loop, the sweep's cells and
benchmarks/plan.py read instead of the config's strings."""
from typing import Any, NamedTuple

import jax

from fedinit_jax import data, execution
from fedinit_jax.checks import fail_config
from fedinit_jax.experiment import tasks
from fedinit_jax.experiment.config import (
    algorithm_kwargs,
    checked,
    expected_clients,
    local_lr_decay,
)
from fedinit_jax.types import Runtime

__all__ = ["Data", "Algorithm", "Schedule", "Sampling", "Store", "Plan", "plan", "client_slots",
           "runtime", "num_devices"]


class Data(NamedTuple):
    """The clients' data and a round's local work on it."""

    dataset: str            # config.dataset
    family: Any             # its tasks.Family (Family.build(plan) loads and splits it)
    fields: dict            # the family's own fields (config.task.<namespace>, tasks.own_fields)
    data_dir: str           # where the data is ('' = the loader's default)
    cache_dir: str          # the decoded-array cache ('' = the default)
    model: str
    model_width: float
    conv: str               # the image models' convolution form (models.get)
    batch_size: int         # B
    local_epochs: int       # E (local_steps 0)
    local_steps: int        # K > 0: K steps drawn from a client's data, else E epochs


class Algorithm(NamedTuple):
    """The algorithm a run builds (algorithms.get(name, loss_fn, **kwargs))."""

    name: str
    kwargs: dict            # the builder's arguments the config sets
    aggregation: str        # the server's mean over S: uniform (1 / |S|) or size (n_i / n_S)


class Schedule(NamedTuple):
    """When things happen in a run: its rounds, evaluations and checkpoints, its seed (every
    round's randomness is derived from (seed, round): simulation.py) and local lr."""

    rounds: int             # R, the rounds of the run
    eval_every: int         # evaluate every this many rounds (and after the last)
    checkpoint_every: int   # checkpoint every this many rounds (0: only at the end, a stop)
    keep_checkpoints: int   # the newest checkpoints kept
    seed: int
    local_lr: float         # eta_l at round 0
    local_lr_decay: float   # eta_l's decay per round: eta_l decay^t


class Sampling(NamedTuple):
    """Which clients a round samples: N of C uniformly (fixed) or each with probability p
    (bernoulli), and the static client axis the round is compiled for."""

    num_clients: int        # C
    mode: str               # fixed | bernoulli
    participation: float    # N / C, or p
    draw: str               # how a Bernoulli S is drawn (data/participation.py)
    client_slots: int       # N, the static client axis (Bernoulli: the bound on |S|)
    expected_clients: int   # E|S|, round(participation * C)


class Store(NamedTuple):
    """Where the per-client rows live and in which dtype (fedinit_jax/client_store/)."""

    kind: str               # auto | device | host | disk (auto: decided by experiment.build)
    dtype: str              # client_state_dtype: float32 | bfloat16 | float16


class Plan(NamedTuple):
    """A config resolved once, before any data (plan(config)): what the build, its memory
    checks and the run loop receive instead of recomputing them from the config; the
    config itself is kept for what identifies the run (config.json, resume); the task
    family's build reads the typed parts (Family.build(plan))."""

    config: dict            # checked(): resolved and validated
    data: Data
    algorithm: Algorithm
    runtime: Runtime        # how the round runs: execution resolved, devices chosen
    schedule: Schedule
    sampling: Sampling
    store: Store

    @property
    def client_slots(self) -> int:
        return self.sampling.client_slots

    @property
    def expected_clients(self) -> int:
        return self.sampling.expected_clients


def plan(config) -> Plan:
    """The Plan of a config: checked (checked), and what follows from it on this process's
    devices computed once (the runtime, the client slots)."""
    config = checked(config)
    schedule = Schedule(config["rounds"], config["eval_every"], config["checkpoint_every"],
                        config["keep_checkpoints"], config["seed"], config["local_lr"],
                        local_lr_decay(config))
    sampling = Sampling(config["num_clients"], config["participation_mode"],
                        config["participation"], config["participation_draw"],
                        client_slots(config), expected_clients(config))
    data = Data(config["dataset"], tasks.family(config["dataset"]), tasks.own_fields(config),
                config["data_dir"], config["cache_dir"], config["model"],
                config["model_width"], config["conv"], config["batch_size"],
                config["local_epochs"], config["local_steps"])
    algorithm = Algorithm(config["algorithm"], algorithm_kwargs(config), config["aggregation"])
    store = Store(config["client_store"], config["client_state_dtype"])
    return Plan(config, data, algorithm, runtime(config), schedule, sampling, store)


def client_slots(config) -> int:
    """N, the static client axis: round(participation * C) (fixed), or the static bound on a
    Bernoulli |S| (data/participation.py); rounded up to a multiple of config.num_devices
    when set, the extra slots masked (padded) as Bernoulli's are."""
    if config["participation_mode"] == "bernoulli":
        return data.bernoulli_bound(config["num_clients"], config["participation"],
                                    multiple=config["num_devices"] or len(jax.devices()))
    devices = config["num_devices"] or (len(jax.devices()) if jax.process_count() > 1 else 1)
    return -(-expected_clients(config) // devices) * devices


def runtime(config) -> Runtime:
    """How the binaries run the round: never what it computes."""
    strategy = execution.resolve(config["execution"])
    return Runtime(execution=strategy, num_devices=num_devices(config),
                   chunk_size=config["chunk_size"] if strategy == "chunked" else None,
                   client_state_dtype=config["client_state_dtype"],
                   donate_state=True)  # the loop never reads a round's input state again


def num_devices(config) -> int:
    """config.num_devices, or (0) the most devices that split the clients evenly; a
    multi-process run shards over every process's devices (0: all of them, padded)."""
    n, available = client_slots(config), len(jax.devices())
    if jax.process_count() > 1 and config["num_devices"] not in (0, available):
        fail_config("num_devices", config["num_devices"],
                    f"a run of {jax.process_count()} processes shards the clients over all their "
                    f"{available} devices: use 0 or {available}")
    if config["num_devices"]:
        if config["num_devices"] > available:
            fail_config("num_devices", config["num_devices"],
                        f"must be <= the {available} {jax.default_backend()} devices here")
        return config["num_devices"]
    return max(d for d in range(1, available + 1) if n % d == 0)
