"""fedinit_jax: FedInit (personalized relaxed initialization) and its federated baselines as
pure, jit-compiled JAX rounds with vmapped clients.

Paper: "Rethinking the Personalized Relaxed Initialization in the Federated Learning:
Consistency and Generalization" (FedInit; ../shared/paper), whose Algorithm 1 starts each
sampled client from the relaxed initialization w_i0 = w + beta * (w - w_i).

    algo = fedinit_jax.algorithms.fedinit(loss_fn, beta=0.1)     # or algorithms.get(name, ...)
    state = algo.init(params, num_clients=C)
    fedinit_jax.check_round_input(algo, state, round_input)       # host-side, optional
    state, metrics = algo.apply(state, round_input, key)          # pure, jit-compiled

This package is the core (algorithms, the round, local training, corrections, models,
pytree helpers, data loaders and partitions, replicas, client stores: where the per-client
state of a large federation lives); it imports nothing of the experiment
machinery (fedinit_jax.experiment: configs, the run loop, workdirs, checkpoints, tasks).
"""
from fedinit_jax import algorithms, client_store, replicas, ri_offset
from fedinit_jax.builder import apply_cohort, build_algorithm, with_runtime
from fedinit_jax.checks import check_round_input, check_state
from fedinit_jax.correction import (
    ClientCorrection,
    Correction,
    LocalContext,
    ServerCorrection,
    ServerInput,
    compose,
)
from fedinit_jax.types import (
    Cohort,
    Costs,
    FederatedAlgorithm,
    FedState,
    RoundInput,
    RoundSpec,
    Runtime,
)

__all__ = ["algorithms", "replicas", "client_store", "ri_offset", "Cohort", "apply_cohort",
           "build_algorithm", "check_round_input", "check_state",
           "Correction", "ClientCorrection", "ServerCorrection", "ServerInput", "LocalContext",
           "compose", "Costs", "FederatedAlgorithm", "FedState", "RoundInput", "RoundSpec",
           "Runtime", "with_runtime"]
__version__ = "0.1.0"
