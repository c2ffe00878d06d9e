"""fedinit_jax: FedInit (personalized relaxed initialization) and its federated baselines as
pure, jit-compiled JAX rounds with vmapped clients.

Paper: "Rethinking the Personalized Relaxed Initialization in the Federated Learning:
Consistency and Generalization" (FedInit; ../shared/paper), whose Algorithm 1 starts each
sampled client from the relaxed initialization w_i0 = w + beta * (w - w_i).
"""
from fedinit_jax import algorithms
from fedinit_jax.correction import (
    ClientCorrection,
    Correction,
    LocalContext,
    ServerCorrection,
    ServerInput,
    compose,
)
from fedinit_jax.federated_round import build_algorithm
from fedinit_jax.types import Costs, FederatedAlgorithm, FedState, RoundInput

__all__ = ["algorithms", "build_algorithm", "Correction", "ClientCorrection", "ServerCorrection",
           "ServerInput", "LocalContext", "compose", "Costs", "FederatedAlgorithm", "FedState",
           "RoundInput"]
__version__ = "0.1.0"
