"""Core types of fedinit_jax: the round input, the federated state and the algorithm pair.

Every algorithm is a pure function pair (optax / fedjax style)::

    state = algo.init(params, num_clients=C)
    fedinit_jax.check_round_input(algo, state, round_input)   # optional, on the host
    state, metrics = algo.apply(state, round_input, key)      # pure: jit / vmap / scan it

The state is a NamedTuple of arrays only; its structure, shapes and dtypes are the same
after every round, so a run compiles once.
"""
from collections.abc import Callable
from typing import Any, NamedTuple

import jax

from fedinit_jax.ri_offset import MODEL, OffsetRule

__all__ = ["Array", "Params", "PyTree", "LossFn", "RoundInput", "FedState", "Costs", "Runtime",
           "DEFAULT_RUNTIME", "RoundSpec", "Cohort", "FederatedAlgorithm"]

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
    sizes: None (the server's means over S are uniform, the paper's), or [N] positive
      floats, the clients' sizes n_i (examples, tokens): the server averages delta_i, p_i
      and w_iK weighted by them (FedAvg's n_i / n). Correction sums and metrics stay
      uniform. (`mask` says which slots count; `sizes` how much a counted one weighs.)
    """

    client_ids: Array
    batches: PyTree
    local_lr: Array
    mask: Array | None = None
    step_mask: Array | None = None
    sizes: Array | None = None


class FedState(NamedTuple):
    """Server-side view of the whole federation after a round.

    One form for both ways a federation is kept: with its [C, ...] client tables (ri_rows,
    client_state, client_visited: algo.init), or with those three None when a ClientStore
    holds the clients' rows (client_store.server_state; apply_cohort and
    client_store.run_round take it).

    params: w, the global model.
    ri_rows: every client's row of the RI offset rule (ri_offset.py), leaves [C, ...]: its
      last local model w_i under Algorithm 1's rule (ri_offset="model"; a client never
      sampled holds w^0, Algorithm 1 line 1), the offset part it keeps under an offset rule
      (a client never sampled holds zero).
    server_opt_state: the server optax optimizer's state (FedAdam's m, v).
    server_state: the algorithm's own server state, a NamedTuple of its module
      (ScaffoldState(c), FedCMState(d)); () if none.
    client_state: the algorithm's per-client state (ScaffoldClientState(c_i),
      FedDynClientState(h)), leaves [C, ...]; () if none.
    beta: [] float32, the relaxed-initialization coefficient: the only beta a round reads
      (traced, so replicas may differ and a hypergradient reaches it). init writes the
      builder's `beta=`; `state._replace(beta=jnp.float32(b))` changes it between rounds.
    rounds_done: [] int32, rounds completed.
    client_visited: [C] bool, whether each client has been sampled (first_visit="global"
      starts a client never sampled from w: ri_offset.with_first_visit).
    ri_state: the offset rule's server state: m^t under ri_offset="momentum" and "shared"
      (params' structure; docs/algorithms.md, "Clients that return late"); () under the
      others.
    """

    params: Params
    ri_rows: Params
    server_opt_state: Any
    server_state: Any
    client_state: Any
    beta: Array
    rounds_done: Array
    client_visited: Any = None
    ri_state: Any = ()


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

    def merge(self, other: "Costs") -> "Costs":
        """Both algorithms' costs in one round (compose): each entry's names, once each."""
        return Costs(*(a + tuple(x for x in b if x not in a) for a, b in zip(self, other)))


class Runtime(NamedTuple):
    """How a round runs, never what it computes (the numbers agree up to float rounding and
    the storage dtype of the client state). Given to a builder (`runtime=`) or to
    `fedinit_jax.with_runtime(algo, ...)`.

    execution: "vmap" (clients side by side), "sequential" (one after another, lax.map) or
      "chunked" (chunk_size clients at a time); execution.py.
    chunk_size: clients per chunk under "chunked".
    num_devices: split the sampled clients over this many devices (shard_map); None: one.
    client_state_dtype: storage dtype of the per-client state (w_i, c_i, h_i, ...):
      "bfloat16" halves it; None keeps the parameters' own dtype.
    donate_state: `apply` donates the state's buffers (jit donate_argnums): the new [C, ...]
      client tables are written in place (about half the peak memory); the state passed in
      must not be used after the call. The binaries donate; the default keeps it.
    """

    execution: str = "vmap"
    chunk_size: int | None = None
    num_devices: int | None = None
    client_state_dtype: str | None = None
    donate_state: bool = False


DEFAULT_RUNTIME = Runtime()


class RoundSpec(NamedTuple):
    """What the round computes (build_algorithm's arguments); the Runtime says how it runs.

    server_optimizer: optax transformation of the pseudo-gradient -mean_S(delta_i).
    client_optimizer: None (plain SGD, the paper's), or an optax transformation between
      weight decay and the step -eta_l (local.py).
    ri_offset: the RI offset rule, o_i of w_i0 = w + beta o_i (ri_offset.rule(name,
      first_visit); ri_offset.MODEL is Algorithm 1's).
    beta: the beta init writes into a new state (a builder's `beta=`). The round reads the
      state's (FedState.beta, traced, so replicas may differ and a hypergradient reaches
      it), never this one.
    """

    loss_fn: LossFn
    correction: Any  # fedinit_jax.correction.Correction
    delta_from: str
    server_optimizer: Any
    client_optimizer: Any
    clip_norm: float | None
    weight_decay: float | None
    ri_offset: OffsetRule = MODEL
    beta: float = 0.0


class Cohort(NamedTuple):
    """The sampled clients' rows of the per-client state, each leaf [N, ...] in the stored
    dtype (Runtime.client_state_dtype): their RI rows (FedState.ri_rows), correction states,
    and whether each was sampled before ([N] bool). Gathered from wherever the federation
    keeps them (FedState's tables, a ClientStore)."""

    ri_rows: Any
    client_state: Any
    client_visited: Any


class FederatedAlgorithm(NamedTuple):
    """The pair (init, apply) of an algorithm, and what describes it.

    init(params, num_clients) -> FedState, with spec.beta written into it.
    apply(state, round_input, key) -> (state, metrics): one round, pure and jit-compiled;
      it checks nothing on the host, so it composes with a user's own jax.jit, lax.scan and
      vmap. Host-side checks are a separate, explicit step: check_state(algo, state) once
      after init or a restore, check_round_input(algo, state, round_input) per round
      (checks.py); the binaries call both. As every jax.jit function, apply.lower(state,
      round_input, key) lowers the round ahead of time (state and batches may be
      jax.ShapeDtypeStruct): its `.compile()` tells the memory per device and the FLOPs
      before anything runs (benchmarks/plan.py; the binaries refuse a round that cannot
      fit). `fedinit_jax.apply_cohort(algo, ...)` runs the same round on the sampled
      clients' rows of a ClientStore (fedinit_jax/client_store/).
    spec: what the round computes (RoundSpec: loss, correction, delta_from, optimizers,
      clip, weight decay, the RI offset rule, the beta init writes).
    runtime: how it runs (Runtime); `fedinit_jax.with_runtime(algo, ...)` gives the same
      algorithm under another.
    What an algorithm communicates and stores: algorithms.REGISTRY[name].costs,
    fedinit_jax.costs.
    """

    init: Callable[..., FedState]
    apply: Callable[[FedState, RoundInput, Array], tuple[FedState, dict]]
    spec: RoundSpec
    runtime: Runtime
