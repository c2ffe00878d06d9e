"""The one validation layer: every bad value gets ValueError("<name>=<value>: <what is
allowed>") before any compute is spent.

The builders check their hyperparameters with it (`beta=`, `rho=`), `with_runtime` its
options, and `experiment.validate` every config field under the name `config.<field>`; the
allowed values are spelled once, next to the code that uses them (DELTA_FROM,
CLIENT_STATE_DTYPES, execution.STRATEGIES, ...).

The round's host checks live here too (check_state, check_round_input, check_inputs): a
round (`algo.apply`) checks nothing, so that it can run inside a user's jit; the binaries
and a careful user call these on the host before it.
"""
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from fedinit_jax.types import FederatedAlgorithm, FedState, RoundInput

__all__ = ["FLOAT32_MAX", "fail", "fail_config", "check_choice", "check_number", "require",
           "check_beta", "check_structure", "check_state", "check_round_input", "check_static",
           "check_inputs"]

FLOAT32_MAX = float(np.finfo(np.float32).max)


def fail(name: str, value, allowed: str):
    raise ValueError(f"{name}={value!r}: {allowed}")


def fail_config(field: str, value, allowed: str):
    """ValueError naming config.<field> (the binaries' --config.<field> flag)."""
    fail(f"config.{field}", value, allowed)


def check_choice(name: str, value, allowed) -> None:
    """ValueError unless value is one of `allowed`."""
    if isinstance(value, bool) or value not in allowed:
        fail(name, value, f"allowed: {', '.join(str(a) for a in allowed)}")


def check_number(name: str, value, low=None, high=None, *, low_open=False, high_open=False,
                 integer=False, optional=False) -> None:
    """ValueError unless value is a finite number (an int if `integer`; else one float32 can
    hold, as the rounds compute in float32) in the given (half-)open range; None passes
    when `optional`."""
    if value is None and optional:
        return
    if isinstance(value, np.ndarray) and value.ndim == 0:  # np.array(0.1): a number too
        value = value[()]
    if (isinstance(value, jax.Array) and value.ndim == 0  # jnp.array(0.1), not traced
            and not isinstance(value, jax.core.Tracer)):
        value = value.item()
    kind = (int, np.integer) if integer else (int, float, np.integer, np.floating)
    if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value):
        fail(name, value, f"must be a finite {'int' if integer else 'number'}")
    if not integer and abs(value) > FLOAT32_MAX:
        fail(name, value, f"is inf in float32 (the rounds compute in float32: |x| <= "
             f"{FLOAT32_MAX:.4g})")
    if low is not None and (value <= low if low_open else value < low):
        fail(name, value, f"must be {'>' if low_open else '>='} {low}")
    if high is not None and (value >= high if high_open else value > high):
        fail(name, value, f"must be {'<' if high_open else '<='} {high}")


def require(module: str, purpose: str):
    """The module, imported; or ImportError saying what needs it and which extra brings it
    (the core installs without the experiment dependencies)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(f"{purpose} needs {module.split('.')[0]} ({err}): pip install "
                          "'fedinit_jax[experiments]'") from None


# ------------------------------------------------------------- the round's host checks

def check_beta(spec, beta) -> None:
    """ValueError when the round cannot run soundly at this beta: RI with delta_from="global"
    and a server optimizer that keeps state (help(fedinit_jax.algorithms.fedavg)). Asked of
    a builder's beta and, by check_state, of a state's."""
    if beta != 0 and spec.delta_from == "global" and _keeps_state(spec.server_optimizer):
        raise ValueError(
            f"delta_from='global' with beta={beta:g}: the server optimizer keeps state "
            "(momentum, Adam's moments) and would accumulate the RI offset beta * mean_S(w - "
            "w_i) that global aggregation puts in its pseudo-gradient, so w drifts; use "
            "delta_from='start' (the authors' code) or a stateless sgd server step "
            "(help(fedinit_jax.algorithms.fedavg))")


def _keeps_state(optimizer) -> bool:
    """True when an optax transformation's state holds arrays (momentum, moments), asked of
    its abstract init on a 3-parameter model (nothing is allocated)."""
    state = jax.eval_shape(optimizer.init, {"w": jax.ShapeDtypeStruct((3,), jnp.float32)})
    return any(x.shape == (3,) for x in jax.tree.leaves(state))  # not a step count


@functools.lru_cache(maxsize=64)
def _expected_state(init, treedef, leaves, num_clients):
    params = jax.tree.unflatten(treedef, [jax.ShapeDtypeStruct(s, d) for s, d in leaves])
    return jax.eval_shape(lambda p: init(p, num_clients), params)


def _spec_of(pytree):
    return (jax.tree.structure(pytree),
            [(tuple(x.shape), jnp.dtype(x.dtype)) for x in jax.tree.leaves(pytree)])


def check_structure(algo: FederatedAlgorithm, state) -> int | None:
    """ValueError unless `state` has the structure, shapes and dtypes algo.init makes (e.g. a
    SCAFFOLD state handed to FedCM); returns C, or None for a state whose client tables a
    ClientStore holds. A replica state (replicas.init: every leaf with a leading [R] axis,
    beta [R]) is checked by one replica's shapes (nothing sliced or copied). No device
    read."""
    if not isinstance(state, FedState):
        raise ValueError(f"state must be a FedState from algo.init, got {type(state)}")
    if np.ndim(state.beta) == 1:
        replicas = np.shape(state.beta)[0]
        if any(np.ndim(x) == 0 or np.shape(x)[0] != replicas for x in jax.tree.leaves(state)):
            raise ValueError(f"state.beta has shape {np.shape(state.beta)}: a federation's "
                             "beta is a scalar; a replica state's (replicas.init) is [R] "
                             "with every leaf [R, ...]")
        state = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), state)
    elif np.ndim(state.beta) != 0:
        raise ValueError(f"state.beta has shape {np.shape(state.beta)}: a scalar (or [R] in "
                         "a replica state)")
    stored = state.ri_rows is not None  # None: a ClientStore holds the clients
    num_clients = jax.tree.leaves(state.ri_rows)[0].shape[0] if stored else 1
    leaves = tuple((tuple(x.shape), jnp.dtype(x.dtype)) for x in jax.tree.leaves(state.params))
    want = _expected_state(algo.init, jax.tree.structure(state.params), leaves, num_clients)
    if not stored:
        want = want._replace(ri_rows=None, client_state=None, client_visited=None)
    for field in FedState._fields:
        if _spec_of(getattr(state, field)) != _spec_of(getattr(want, field)):
            raise ValueError(f"state.{field} does not match this algorithm's state (was the "
                             "state made by another algorithm's init, or for other params?)")
    return num_clients if stored else None


def check_state(algo: FederatedAlgorithm, state: FedState) -> None:
    """ValueError unless `state` is one of algo's: the structure, shapes and dtypes its init
    makes, and a beta its round runs soundly (check_beta). The round reads the state's beta,
    whatever beta the builder was given (that one is only what init writes): a state made
    by `fedavg(...).init` runs FedAvg under `fedinit(...).apply`, as it should, the two
    builders making one round. Reads beta from the device: call it once after init or a
    restore, not every round. A replica state (replicas.init: every leaf with a leading [R]
    axis, beta [R]) is checked by one replica's shapes and every replica's beta."""
    check_structure(algo, state)
    if not isinstance(state.beta, jax.core.Tracer):
        for beta in np.atleast_1d(np.asarray(state.beta)):
            check_beta(algo.spec, float(beta))


def check_round_input(algo: FederatedAlgorithm, state: FedState, round_input: RoundInput,
                      num_clients: int | None = None) -> None:
    """ValueError naming the field when `round_input` cannot run on `state` under algo's
    runtime (ids in range and distinct, [N, K, B] batches, masks, sizes, lr, N a multiple of
    the devices), or the state is not algo's. Host-side, no device read: the binaries call
    it before every round; `algo.apply` checks only what shapes show (check_static), so it
    can be jitted.

    Args:
      algo, state, round_input: as algo.apply takes them; or a state without client tables
        (client_store.server_state), whose clients a ClientStore holds.
      num_clients: C of such a state (the store's num_clients; client_store.run_round
        checks its inputs itself).
    """
    held = check_structure(algo, state)
    if held is None and num_clients is None:
        raise ValueError("state holds no client tables (client_store.server_state): pass "
                         "num_clients=, the ClientStore's")
    check_inputs(round_input, held or num_clients, algo.runtime.num_devices or 1)


def check_static(round_input, key) -> None:
    """ValueError for what a round's arguments show by their types and shapes alone (so it
    also holds inside a user's jit, at trace time, and costs nothing): a RoundInput whose
    batches are [N, K, B, ...] for its N ids, and a PRNG key. algo.apply, its lower and
    apply_cohort call it; check_inputs checks the values, on the host."""
    if not isinstance(round_input, RoundInput):
        swapped = " (were round_input and key swapped?)" if isinstance(key, RoundInput) else ""
        raise ValueError(f"round_input must be a fedinit_jax.RoundInput, got "
                         f"{type(round_input).__name__}{swapped}")
    shape, dtype = np.shape(key), getattr(key, "dtype", None)
    typed = dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key)
    if not (typed and shape == ()) and not (shape == (2,) and dtype == jnp.uint32):
        raise ValueError(f"key must be one PRNG key (jax.random.key(seed)), got "
                         f"{type(key).__name__} of shape {shape}")
    n = np.shape(round_input.client_ids)
    _batch_axes(round_input.batches, n[0] if len(n) == 1 else n)


def _batch_axes(batches, n) -> list:
    """The leaves' shapes; ValueError unless every leaf has the same leading [N, K, B] axes
    with N = n, the number of client ids."""
    leaves = jax.tree.leaves(batches)
    if not leaves:
        raise ValueError("batches is empty: it must be a pytree of [N, K, B, ...] arrays")
    shapes = [np.shape(x) for x in leaves]
    if any(len(s) < 3 for s in shapes) or len({s[:3] for s in shapes}) != 1:
        raise ValueError(f"batches: every leaf needs the same leading [N, K, B] axes (N "
                         f"clients, K local steps, B examples a step), got "
                         f"{[s[:3] for s in shapes]}")
    if shapes[0][0] != n:
        raise ValueError(f"batches: leading axis {shapes[0][0]} != number of client_ids {n}")
    return shapes


def check_inputs(round_input: RoundInput, num_clients: int, num_devices: int = 1) -> None:
    """ValueError naming the field when a round input cannot be run on num_clients clients."""
    if not isinstance(round_input, RoundInput):
        raise ValueError(f"round_input must be a fedinit_jax.RoundInput(client_ids, batches, "
                         f"local_lr, ...), got {type(round_input).__name__}")
    ids = np.asarray(round_input.client_ids)
    if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"client_ids must be a non-empty 1-D integer array, got shape "
                         f"{ids.shape} dtype {ids.dtype}")
    n = ids.size
    real = ids
    if round_input.mask is not None:
        mask = np.asarray(round_input.mask)
        if mask.shape != ids.shape or mask.dtype != np.bool_:
            raise ValueError(f"mask must be a bool array shaped like client_ids {ids.shape}, "
                             f"got shape {mask.shape} dtype {mask.dtype}")
        if not mask.any():
            raise ValueError("mask marks every slot as padding: a round needs >= 1 client")
        real = ids[mask]
    if real.size > num_clients:
        raise ValueError(f"client_ids: {real.size} sampled clients but the state holds only "
                         f"{num_clients} (N must be <= C)")
    if real.min() < 0 or real.max() >= num_clients:
        raise ValueError(f"client_ids out of range: values must lie in [0, {num_clients}), "
                         f"got min {real.min()} max {real.max()}")
    if n % num_devices:
        raise ValueError(f"client_ids: {n} clients per round cannot be split evenly over "
                         f"num_devices={num_devices}; use a multiple of {num_devices}")
    if np.unique(real).size != real.size:
        raise ValueError(f"client_ids has duplicates: {real.tolist()}; sample without "
                         "replacement")
    leaves = jax.tree.leaves(round_input.batches)
    shapes = _batch_axes(round_input.batches, n)
    if 0 in shapes[0][1:3]:
        raise ValueError(f"batches: [N, K, B] = {list(shapes[0][:3])}: every client needs K >= 1 "
                         "local steps of B >= 1 examples")
    real_rows = slice(None) if round_input.mask is None else np.asarray(round_input.mask)
    for leaf in leaves:  # host arrays only: a device array would be copied back to check;
        # every floating dtype, ml_dtypes' bfloat16 (which numpy calls no floating) included
        if (isinstance(leaf, np.ndarray) and jnp.issubdtype(leaf.dtype, jnp.floating)
                and not np.isfinite(leaf[real_rows].astype(np.float32)).all()):
            raise ValueError("batches of sampled clients hold NaN or inf values")
    if round_input.step_mask is not None:
        steps = np.asarray(round_input.step_mask)
        if steps.shape != shapes[0][:2] or steps.dtype != np.bool_:
            raise ValueError(f"step_mask must be a bool array shaped [N, K] = "
                             f"{list(shapes[0][:2])}, got shape {steps.shape} dtype {steps.dtype}")
        if not steps[real_rows].any(axis=1).all():
            raise ValueError("step_mask: every sampled client needs >= 1 real local step")
    if round_input.sizes is not None:
        w = np.asarray(round_input.sizes)
        if (w.shape != ids.shape or not np.issubdtype(w.dtype, np.number)
                or not np.isfinite(w).all() or not (w[real_rows] > 0).all()):
            raise ValueError(f"sizes must be finite numbers shaped like client_ids {ids.shape}, "
                             f"> 0 for the sampled clients; got {w!r}")
    lr = np.asarray(round_input.local_lr)
    if (lr.shape != () or not np.issubdtype(lr.dtype, np.number) or not np.isfinite(lr)
            or not 0 < lr <= FLOAT32_MAX):
        raise ValueError(f"local_lr must be a scalar in (0, {FLOAT32_MAX:.4g}] (float32), got "
                         f"{round_input.local_lr!r}")
