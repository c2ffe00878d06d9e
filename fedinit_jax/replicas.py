"""A replica axis: R independent runs of one configuration in one compiled program.

Seed repeats and beta sweeps (the paper's 3 seeds, Fig. 1(b)) as a vmap over whole
federations: every leaf of the state gets a leading [R] axis, and so may the round input
(different seeds sample different clients and batches) and the key.

    states = replicas.init(algo, params, num_clients=C, betas=[0.0, 0.05, 0.1])
    apply = replicas.make_apply(algo, shared_input=True)     # one input for all replicas
    replicas.check_round_input(algo, states, round_input)    # optional, on the host
    states, metrics = apply(states, round_input, keys)       # keys [R]; metrics leaves [R]

`apply` is pure and checks nothing on the host, as algo.apply: it runs inside a user's
jax.jit or lax.scan. The host checks are separate calls: check_round_input per round,
checks.check_state(algo, states) once (it understands replica states).

Replica r computes exactly what a separate run with that beta, input and key computes
(to float tolerance: vmapping changes XLA's fusions). On CPU, vmapped replicas turn
convolutions into grouped ones, which XLA:CPU runs slowly; expect the gain on GPU/TPU.
"""
import jax
import jax.numpy as jnp
import numpy as np

from fedinit_jax import tree
from fedinit_jax.builder import as_arrays
from fedinit_jax.checks import check_beta, check_inputs, check_number, check_structure
from fedinit_jax.types import FederatedAlgorithm, FedState, RoundInput

__all__ = ["init", "make_apply", "check_round_input"]


def init(algo: FederatedAlgorithm, params, num_clients: int, *, betas=None,
         num_replicas=None, params_per_replica: bool = False) -> FedState:
    """R stacked states: one per beta (each the beta its replica's rounds read), or
    num_replicas copies of the state algo.init makes.

    params_per_replica: the leaves of `params` carry a leading [R] axis (a different
    initial model per seed); otherwise every replica starts from the same model.
    """
    if betas is not None:
        if isinstance(betas, (str, bytes)) or np.ndim(betas) != 1 or not len(betas):
            raise ValueError(f"betas={betas!r}: a non-empty sequence of numbers, one per "
                             "replica (e.g. [0.0, 0.05, 0.1])")
        for b in betas:
            check_number(f"betas={list(betas)!r}: each", b)
            check_beta(algo.spec, float(b))
        num_replicas = len(betas)
    if params_per_replica:
        states = jax.vmap(lambda p: algo.init(p, num_clients))(params)
        count = jax.tree.leaves(states.params)[0].shape[0]
        if num_replicas not in (None, count):
            raise ValueError(f"{num_replicas} replicas asked for, but params carry {count}")
    else:
        if not num_replicas or num_replicas < 1:
            raise ValueError("replicas.init needs betas=[...] or num_replicas >= 1")
        single = algo.init(params, num_clients)
        states = tree.stack(single, num_replicas)
    if betas is not None:
        states = states._replace(beta=jnp.asarray(betas, jnp.float32))
    return states


def make_apply(algo: FederatedAlgorithm, shared_input: bool = True):
    """apply(states, round_input, keys) -> (states, metrics), vmapped over replicas; pure
    and jittable (no host check: check_round_input is the separate one).

    shared_input: one RoundInput for every replica (beta / lr sweeps on the same data);
    otherwise every leaf of the round input carries a leading [R] axis.
    """
    round_axes = None if shared_input else 0
    vmapped = jax.jit(jax.vmap(algo.apply, in_axes=(0, round_axes, 0)))

    def apply(states: FedState, round_input: RoundInput, keys):
        return vmapped(states, as_arrays(round_input), keys)

    return apply


def check_round_input(algo: FederatedAlgorithm, states: FedState, round_input: RoundInput,
                      shared_input: bool = True) -> None:
    """ValueError naming the field when `round_input` cannot run on the replica states
    (checks.check_round_input's rules, per replica), or when shared_input=False and
    a leaf lacks the leading [R] axis. Host-side and without a device read, as for
    algo.apply (check_state, once, also reads the betas)."""
    num_clients = check_structure(algo, states)
    num_replicas = int(np.shape(states.beta)[0])
    if shared_input:
        check_inputs(round_input, num_clients, algo.runtime.num_devices or 1)
        return
    for field, value in round_input._asdict().items():
        for leaf in jax.tree.leaves(value):
            if np.ndim(leaf) < 1 or np.shape(leaf)[0] != num_replicas:
                raise ValueError(f"round_input.{field}: shared_input=False needs a leading "
                                 f"[R={num_replicas}] replica axis on every leaf, got shape "
                                 f"{np.shape(leaf)} (one input for all replicas: "
                                 "shared_input=True)")
    for r in range(num_replicas):
        check_inputs(jax.tree.map(lambda x, r=r: x[r], round_input), num_clients,
                     algo.runtime.num_devices or 1)
