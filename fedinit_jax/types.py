"""Core types of fedinit_jax: the round input, the federated state and the algorithm pair.

Every algorithm is a pure function pair (optax / fedjax style)::

    state = algo.init(params, num_clients=C)
    state, metrics = algo.apply(state, round_input, key)

The state is a NamedTuple of arrays only; its structure, shapes and dtypes are the same
after every round, so a run compiles once.
"""
from collections.abc import Callable
from typing import Any, NamedTuple

import jax

Array = jax.Array
Params = Any  # a pytree of arrays
PyTree = Any
LossFn = Callable[[Params, PyTree, Array], Array]  # (params, batch, key) -> scalar mean loss


class RoundInput(NamedTuple):
    """What one communication round consumes.

    client_ids: [N] int32, the sampled clients S (distinct, in [0, C)).
    batches: a pytree whose leaves are [N, K, B, ...]: K local minibatches per client.
    local_lr: [] float32, eta_l of this round (traced: changing it never recompiles).
    mask: None (every slot is a sampled client), or [N] bool: False marks a padded slot. A
      round whose |S| varies (Bernoulli participation) pads S to a static N; padded slots
      train nothing, count in no mean or metric, and write no client state; their
      client_ids are ignored.
    step_mask: None (every local step is real), or [N, K] bool: False marks a padded local
      step (clients of unequal size, data/shakespeare.py), which changes nothing: not the
      parameters, the loss, the optimizer or a correction state. Client i's K eta_l becomes
      (its real steps) * eta_l.
    weights: None (the server's means over S are uniform, the paper's), or [N] positive
      floats, e.g. client sizes n_i: the server averages delta_i, p_i and w_iK with these
      weights (FedAvg's n_i / n). Correction sums and metrics stay uniform.
    """

    client_ids: Array
    batches: PyTree
    local_lr: Array
    mask: Array | None = None
    step_mask: Array | None = None
    weights: Array | None = None


class FedState(NamedTuple):
    """Server-side view of the whole federation after a round.

    params: w, the global model.
    client_params: w_i, every client's last local model, leaves [C, ...]; a client never
      sampled holds w^0 (the initial model), as in Algorithm 1 line 1 of the paper.
    server_opt_state: the server optax optimizer's state (FedAdam's m, v).
    server_state: the algorithm's own server state, a NamedTuple of its module
      (ScaffoldState(c), FedCMState(d)); () if none.
    client_state: the algorithm's per-client state (ScaffoldClientState(c_i),
      FedDynClientState(h)), leaves [C, ...]; () if none.
    beta: [] float32, the relaxed-initialization coefficient (traced, so replicas may differ).
    rounds_done: [] int32, rounds completed.
    """

    params: Params
    client_params: Params
    server_opt_state: Any
    server_state: Any
    client_state: Any
    beta: Array
    rounds_done: Array


class Costs(NamedTuple):
    """What an algorithm communicates and stores, each entry a model-sized (d) vector.

    down: sent by the server to each sampled client per round.
    up: sent by each sampled client to the server per round.
    server_state: kept by the server between rounds, besides w.
    client_state: kept by every client between rounds, besides its own model.
    client_work: extra model-sized buffers a client holds while training (SAM's w + e).
    """

    down: tuple[str, ...] = ("w",)
    up: tuple[str, ...] = ("delta",)
    server_state: tuple[str, ...] = ()
    client_state: tuple[str, ...] = ()
    client_work: tuple[str, ...] = ()


class FederatedAlgorithm(NamedTuple):
    """init(params, num_clients) -> FedState; apply(state, round_input, key) -> (state, metrics).

    apply validates its input on the host, then calls the jit-compiled round; round_fn is
    the same round as a pure, un-jitted function to compose into a user's own jit/vmap.
    with_runtime(execution=, chunk_size=, num_devices=, client_state_dtype=, donate_state=)
    -> the same algorithm run another way (federated_round.py); the numbers it computes do
    not change (up to float rounding, and the storage dtype of the client state).
    lower(state, round_input, key) -> the jitted round lowered ahead of time (state and
    batches may be jax.ShapeDtypeStruct): `.compile()` tells its memory per device and its
    FLOPs before anything runs (benchmarks/plan.py; the binaries refuse a round that cannot
    fit).
    """

    init: Callable[..., FedState]
    apply: Callable[[FedState, RoundInput, Array], tuple[FedState, dict]]
    round_fn: Callable[[FedState, RoundInput, Array], tuple[FedState, dict]]
    costs: Costs
    with_runtime: Callable[..., "FederatedAlgorithm"]
    lower: Callable[[FedState, RoundInput, Array], Any]
