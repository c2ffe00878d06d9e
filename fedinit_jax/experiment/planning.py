"""The Plan: a config checked once and what follows from it on this process's devices (the
runtime, the client slots N, E|S|, the lr decay, the builder's arguments), which the build,
its memory checks, the host loop, the sweep's cells and benchmarks/plan.py receive."""
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

__all__ = ["Schedule", "Sampling", "Plan", "plan", "client_slots", "runtime", "num_devices"]


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


class Plan(NamedTuple):
    """A config resolved once, before any data (plan(config)): what the build, its memory
    checks and the run loop receive instead of recomputing them from the config; the
    config itself is kept for what identifies the run (config.json, resume)."""

    config: dict            # checked(): resolved and validated
    family: Any             # the dataset's tasks.Family
    runtime: Runtime        # how the round runs: execution resolved, devices chosen
    schedule: Schedule
    sampling: Sampling
    algorithm_kwargs: dict  # the algorithm builder's arguments

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
    return Plan(config, tasks.family(config["dataset"]), runtime(config), schedule, sampling,
                algorithm_kwargs(config))


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
