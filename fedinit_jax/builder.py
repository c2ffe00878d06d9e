"""The one builder under every algorithm's: a RoundSpec made a FederatedAlgorithm, the pair
(init, apply) the builders of fedinit_jax.algorithms return.

    algo = build_algorithm(loss_fn, correction=..., beta=..., ...)   # what every builder calls
    state = algo.init(params, num_clients)      # federated_round.init_state, beta written in
    state, metrics = algo.apply(state, round_input, key)   # federated_round.federated_round, jitted

`apply` is the round jit-compiled once; as every jax.jit function it has `.lower(...)`, the
same round lowered ahead of time. `with_runtime(algo, ...)` is the same round run another
way, `apply_cohort(algo, ...)` the round on the sampled clients' rows of a ClientStore. The
round itself, pure, is federated_round.py; the host checks are checks.py.
"""
import functools

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding, PartitionSpec

from fedinit_jax import execution
from fedinit_jax import ri_offset as offset_rules
from fedinit_jax.checks import check_beta, check_choice, check_number, check_static
from fedinit_jax.correction import NONE, Correction
from fedinit_jax.federated_round import (
    CLIENT_STATE_DTYPES,
    DELTA_FROM,
    Cohort,
    RoundSpec,
    cohort_round,
    federated_round,
    init_state,
)
from fedinit_jax.types import (
    DEFAULT_RUNTIME,
    FederatedAlgorithm,
    FedState,
    RoundInput,
    Runtime,
)

__all__ = ["build_algorithm", "check_runtime", "algorithm_of", "with_runtime", "apply_cohort",
           "as_arrays"]


def build_algorithm(loss_fn, *, correction: Correction = NONE, beta: float = 0.0,
                    delta_from: str = "global", server_optimizer=None, client_optimizer=None,
                    clip_norm=None, weight_decay=None, first_visit: str = "init",
                    ri_offset: str = "model",
                    runtime: Runtime = DEFAULT_RUNTIME) -> FederatedAlgorithm:
    """A FederatedAlgorithm for `loss_fn(params, batch, key) -> scalar`.

    correction: the algorithm's plug-in (FedAvg: none; its local_gradient, if any, replaces
    the plain gradient). server_optimizer: optax transformation applied to the
    pseudo-gradient -mean_S(delta_i); default sgd(1.0), i.e. w <- w + mean delta.
    client_optimizer: see local.py (None: the paper's SGD). ri_offset, first_visit: the RI
    offset rule (ri_offset.rule: a name of ri_offset.RULES; first_visit="global" starts a new
    client from w). runtime: how it runs (Runtime).
    """
    if not callable(loss_fn):
        raise ValueError(f"loss_fn={loss_fn!r}: must be a callable (params, batch, key) -> "
                         "scalar mean loss")
    check_number("beta", beta)  # the paper sweeps -0.2..0.15
    beta = float(beta)  # a 0-d array too
    check_choice("delta_from", delta_from, DELTA_FROM)
    rule = offset_rules.rule(ri_offset, first_visit)
    check_number("clip_norm", clip_norm, 0.0, optional=True)  # None or 0: off
    check_number("weight_decay", weight_decay, 0.0, optional=True)
    for name, opt in (("server_optimizer", server_optimizer),
                      ("client_optimizer", client_optimizer)):
        if opt is not None and not isinstance(opt, optax.GradientTransformation):
            raise ValueError(f"{name} must be an optax.GradientTransformation (e.g. "
                             f"optax.adam(1e-3)), got {type(opt).__name__}")
    spec = RoundSpec(loss_fn, correction, delta_from,
                     optax.sgd(1.0) if server_optimizer is None else server_optimizer,
                     client_optimizer, clip_norm, weight_decay, rule, beta)
    check_beta(spec, beta)
    return algorithm_of(spec, runtime)


def check_runtime(runtime: Runtime) -> None:
    """ValueError naming the field when a Runtime cannot run here."""
    if not isinstance(runtime, Runtime):
        raise ValueError(f"runtime must be a fedinit_jax.Runtime, got {type(runtime)}")
    execution.check_strategy(runtime.execution, runtime.chunk_size)
    if not isinstance(runtime.donate_state, bool):
        raise ValueError(f"donate_state={runtime.donate_state!r}: must be True or False")
    if runtime.client_state_dtype is not None:  # None: the parameters' own dtype
        check_choice("client_state_dtype", runtime.client_state_dtype, CLIENT_STATE_DTYPES)
    execution.client_mesh(runtime.num_devices)  # ValueError for a count not here


def algorithm_of(spec: RoundSpec, runtime: Runtime) -> FederatedAlgorithm:
    """The algorithm of `spec` under `runtime`: init (writing spec.beta into the state), and
    the jitted round as apply, with apply.lower (the round lowered ahead of time) and
    apply.cohort (the round on a cohort's rows: apply_cohort)."""
    check_runtime(runtime)
    mesh = execution.client_mesh(runtime.num_devices)
    donate = (0,) if runtime.donate_state else ()
    round_fn = functools.partial(federated_round, spec, runtime)
    replicated = None if mesh is None else NamedSharding(mesh, PartitionSpec())
    # with a mesh the state lives replicated on it, so every round sees the same shardings
    jitted_round = jax.jit(round_fn, donate_argnums=donate, **(
        {} if mesh is None else {"out_shardings": replicated}))

    def place(state):
        return state if replicated is None else jax.device_put(state, replicated)

    def apply(state: FedState, round_input: RoundInput, key):
        """One round (pure, jittable): (state, round_input, key) -> (state, metrics)."""
        check_static(round_input, key)
        if not isinstance(state, FedState) or state.ri_rows is None:
            raise ValueError(
                "algo.apply needs a FedState with its [C, ...] client tables (algo.init(params, "
                "num_clients)); " + ("this one has none (client_store.server_state): run it "
                                     "with client_store.run_round(algo, state, store, "
                                     "round_input, key)" if isinstance(state, FedState)
                                     else f"got {type(state).__name__}"))
        return jitted_round(place(state), as_arrays(round_input), key)

    def lower(state, round_input: RoundInput, key):
        """The jit-compiled round of `apply`, lowered for these inputs without running it.

        state and the leaves of round_input.batches may be jax.ShapeDtypeStruct (e.g.
        jax.eval_shape(lambda p: algo.init(p, C), params): C by closure, it sets shapes);
        client_ids, local_lr and the masks are small arrays. `.compile()` gives XLA's
        account per device (`memory_analysis()`: arguments, outputs, temporaries, aliased)
        and `cost_analysis()` (XLA's FLOPs, which count a loop body once: benchmarks/plan.py
        counts the jaxpr instead); `apply` on inputs of the same shapes then reuses that
        compilation."""
        if replicated is not None:  # as apply puts it: replicated over the mesh
            state = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype,
                                                                sharding=replicated), state)
        check_static(round_input, key)
        return jitted_round.lower(state, as_arrays(round_input), key)

    # C static, as the tables' row count is to apply: the same XLA program, bit for bit;
    # with a mesh the new rows stay split over it (a process reads its own slots' rows)
    jitted_cohort = jax.jit(functools.partial(cohort_round, spec, runtime), static_argnums=4,
                            **({} if mesh is None else {"out_shardings": (
                                replicated, NamedSharding(mesh, PartitionSpec("clients")),
                                replicated)}))

    def cohort(state: FedState, cohort: Cohort, round_input: RoundInput, key, num_clients):
        check_static(round_input, key)
        return jitted_cohort(place(state), cohort, as_arrays(round_input), key,
                             int(num_clients))

    apply.lower, apply.cohort = lower, cohort
    return FederatedAlgorithm(init=functools.partial(init_state, spec, runtime), apply=apply,
                              spec=spec, runtime=runtime)


def with_runtime(algo: FederatedAlgorithm, runtime: Runtime | None = None,
                 **fields) -> FederatedAlgorithm:
    """`algo` under `runtime`, or under its own runtime with `fields` replaced (how the
    round runs, never what it computes)."""
    unknown = sorted(set(fields) - set(Runtime._fields))
    if unknown:
        raise ValueError(f"with_runtime: {', '.join(unknown)} not runtime options; "
                         f"allowed: {', '.join(Runtime._fields)}")
    if fields.get("execution", "chunked") != "chunked" and "chunk_size" not in fields:
        fields["chunk_size"] = None  # leaving chunked: its chunk size goes with it
    return algorithm_of(algo.spec, (algo.runtime if runtime is None else runtime)
                        ._replace(**fields))


def apply_cohort(algo: FederatedAlgorithm, state: FedState, cohort: Cohort,
                 round_input: RoundInput, key, num_clients: int):
    """One round of `algo` on the cohort's rows (cohort_round, jit-compiled; pure):
    (state, cohort, round_input, key, C) -> (state, new cohort, metrics); C a Python int.
    For a federation whose per-client state lives in a ClientStore (fedinit_jax/client_store/)."""
    return algo.apply.cohort(state, cohort, round_input, key, num_clients)


def as_arrays(round_input: RoundInput) -> RoundInput:
    """The round input with int32 ids, a float32 lr and a bool mask (when there is one)."""
    def optional(x, dtype):
        return None if x is None else jnp.asarray(x, dtype)

    return round_input._replace(
        client_ids=jnp.asarray(round_input.client_ids, jnp.int32),
        local_lr=jnp.asarray(round_input.local_lr, jnp.float32),
        mask=optional(round_input.mask, bool),
        step_mask=optional(round_input.step_mask, bool),
        sizes=optional(round_input.sizes, jnp.float32))
