"""The RI offset rule: what each client's row keeps and where a sampled client starts.

Relaxed initialization (paper Algorithm 1 line 6) starts client i from

    w_i0 = w + beta * o_i

and an OffsetRule says what o_i is: Algorithm 1's o_i = w - w_i ("model", the row keeps the
client's last local model w_i), or one of the cross-device departures whose row keeps an
offset instead ("next", "drift", "momentum", "shared"; docs/algorithms.md, "Clients that
return late"; "lookahead", FedACG's start). A rule may keep a state on the server
(FedState.ri_state: m^t of "momentum", "shared" and "lookahead"; () for the others). The
round calls the rule and compares no name (federated_round.py); `register` adds a rule, and
every builder and binary then takes its name as `ri_offset`. `first_visit="global"` is a variant of Algorithm 1's rule
(`with_first_visit`): a client never sampled starts from w, not w + beta (w - w^0).

A rule's functions are pure and take float32 pytrees; `rows` and `w_end` carry a leading
cohort axis [N, ...], `w`, `w_new` and the rule's state do not. Each built-in rule has an
independent numpy reference in tests/numpy_reference.py (OFFSET_RULES there).
"""
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

Array = jax.Array
Params = Any  # a pytree of arrays

__all__ = ["OffsetStep", "OffsetRule", "RULES", "FIRST_VISIT", "RI_MAX_GAIN", "register",
           "rule", "with_first_visit", "momentum_decay", "MODEL", "NEXT", "DRIFT", "MOMENTUM",
           "SHARED", "LOOKAHEAD"]

FIRST_VISIT = ("init", "global")
# ri_offset="momentum": the largest feedback gain beta gamma / (1 - gamma) of m^t (below 1, so
# w's steps cannot grow; 0.9 is Algorithm 1's at 10 of 100 clients and beta 0.1)
RI_MAX_GAIN = 0.9


class OffsetStep(NamedTuple):
    """What a rule's server state may read after a round.

    w: w^t, the global model the round started from.  w_new: w^{t+1}.
    beta: the state's RI coefficient (traced).  cohort_size: |S|, the real clients (traced
    when padded).  num_clients: C, a Python int.
    """

    w: Params
    w_new: Params
    beta: Array
    cohort_size: Any
    num_clients: int


def _no_state(params):
    return ()


def _keep_state(state, step: OffsetStep):
    return state


class OffsetRule(NamedTuple):
    """An RI offset rule, o_i in w_i0 = w + beta o_i.

    name: its `ri_offset` value.
    first_row(params) -> a client's row before its first visit (no client axis).
    offset(w, rows, visited, state) -> o_i of every cohort slot [N, ...], from the slots'
      rows (float32), whether each was sampled before ([N] bool) and the rule's state.
    stored(w, w_new, w_end) -> what each slot's row keeps after the round ([N, ...]).
    first_visit: where a client never sampled starts: "init" (from its first row, Algorithm
      1's w^0) or "global" (from w plus any shared part: its first row is a zero offset).
    init(params) -> the rule's server state (FedState.ri_state); () for none.
    update(state, OffsetStep) -> the state after the round.
    measured_from(w) -> what Delta^t measures the rows from (divergence_all: the mean
      squared distance of the rows from it): w when the rows are models, zero when they are
      offsets.
    """

    name: str
    first_row: Callable[[Params], Params]
    offset: Callable[[Params, Params, Array, Any], Params]
    stored: Callable[[Params, Params, Params], Params]
    first_visit: str = "global"
    init: Callable[[Params], Any] = _no_state
    update: Callable[[Any, OffsetStep], Any] = _keep_state
    measured_from: Callable[[Params], Params] = optax.tree.zeros_like


def _minus_end(base, w_end):
    """base - w_iK for each cohort slot (base, one of w and w_new, has no cohort axis)."""
    return jax.tree.map(lambda b, x: b[None] - x, base, w_end)


# Algorithm 1: the row keeps w_i, o_i = w - w_i
MODEL = OffsetRule(
    name="model", first_row=lambda params: params,
    offset=lambda w, rows, visited, state: _minus_end(w, rows),
    stored=lambda w, w_new, w_end: w_end, first_visit="init", measured_from=lambda w: w)
# o_i = w^{tau_i + 1} - w_i: the offset Algorithm 1 would use had the client returned the
# round after its visit
NEXT = OffsetRule(
    name="next", first_row=optax.tree.zeros_like,
    offset=lambda w, rows, visited, state: rows,
    stored=lambda w, w_new, w_end: _minus_end(w_new, w_end))
# o_i = w^{tau_i} - w_i, its own last drift
DRIFT = NEXT._replace(name="drift", stored=lambda w, w_new, w_end: _minus_end(w, w_end))


def momentum_decay(beta, cohort_size, num_clients: int):
    """gamma of "momentum" and "shared": 1 - N/C, the probability that a client sampled now
    was not sampled in a given earlier round (uniform sampling of N of C), so that
    m^t = sum_{k >= 1} gamma^k (w^{t-k+1} - w^{t-k}) is the expected sum of w's steps since a
    returning client's visit (Algorithm 1's offset), capped at RI_MAX_GAIN / (RI_MAX_GAIN +
    |beta|): the feedback gain |beta| gamma / (1 - gamma) of m^t stays at most RI_MAX_GAIN < 1.

    Args:
      beta: the state's RI coefficient (traced).
      cohort_size: |S|, the round's real clients (its padded slots not counted).
      num_clients: C.
    Returns:
      gamma, a float32 scalar in [0, 1).
    """
    return jnp.minimum(1.0 - cohort_size / num_clients,
                       RI_MAX_GAIN / (RI_MAX_GAIN + jnp.abs(beta)))


def _next_momentum(m, step: OffsetStep):
    """m^{t+1} = gamma (m^t + w^{t+1} - w^t)."""
    gamma = momentum_decay(step.beta, step.cohort_size, step.num_clients)
    return jax.tree.map(lambda mk, a, b: gamma * (mk + a - b), m, step.w_new, step.w)


# o_i = (w^{tau_i + 1} - w_i) + m^t: the server steps since the visit replaced by their
# expectation m^t, a decaying sum of w's steps
MOMENTUM = NEXT._replace(
    name="momentum", init=optax.tree.zeros_like, update=_next_momentum,
    offset=lambda w, rows, visited, m: jax.tree.map(lambda o, mk: o + mk[None], rows, m))
# o_i = m^t alone, one offset for every client (the row keeps w^{tau_i + 1} - w_i for
# Delta^t only)
SHARED = MOMENTUM._replace(
    name="shared",
    offset=lambda w, rows, visited, m: jax.tree.map(
        lambda o, mk: jnp.broadcast_to(mk[None], o.shape), rows, m))


def _last_step(m, step: OffsetStep):
    """m^{t+1} = w^{t+1} - w^t, the server's last step."""
    return jax.tree.map(jnp.subtract, step.w_new, step.w)


# o_i = m^t = w^t - w^{t-1}, the server's last step, the same for every client: FedACG's
# lookahead start w + lambda m^t (Kim et al. 2024; algorithms/fedacg.py), lambda = beta
LOOKAHEAD = SHARED._replace(name="lookahead", update=_last_step)

RULES: dict[str, OffsetRule] = {r.name: r for r in (MODEL, NEXT, DRIFT, MOMENTUM, SHARED,
                                                     LOOKAHEAD)}


def register(new: OffsetRule) -> OffsetRule:
    """Adds `new` to RULES (its name then is an `ri_offset` of every builder and binary);
    ValueError when the name is taken or the rule is not an OffsetRule."""
    if not isinstance(new, OffsetRule):
        raise ValueError(f"register: an ri_offset.OffsetRule, got {type(new).__name__}")
    if new.name in RULES:
        raise ValueError(f"register: ri_offset {new.name!r} exists already")
    if new.first_visit not in FIRST_VISIT:
        raise ValueError(f"register: first_visit={new.first_visit!r}; allowed: "
                         f"{', '.join(FIRST_VISIT)}")
    RULES[new.name] = new
    return new


def with_first_visit(base: OffsetRule) -> OffsetRule:
    """Algorithm 1's rule whose new client starts from w: o_i = 0 until client i is first
    sampled (first_visit="global"), base's offset after."""
    def offset(w, rows, visited, state):
        kept = base.offset(w, rows, visited, state)
        return jax.tree.map(lambda o: jnp.where(
            visited.reshape((-1,) + (1,) * (o.ndim - 1)), o, jnp.zeros((), o.dtype)), kept)

    return base._replace(offset=offset, first_visit="global")


def rule(ri_offset: str, first_visit: str = "init") -> OffsetRule:
    """The rule of the builders' options `ri_offset` and `first_visit`.

    Raises:
      ValueError: an unknown name, or a first visit the rule cannot make (an offset rule's
        first row is a zero offset: first_visit="init", w + beta (w - w^0), is Algorithm 1's
        rule only).
    """
    if ri_offset not in RULES:
        raise ValueError(f"ri_offset={ri_offset!r}: allowed: {', '.join(RULES)}")
    if first_visit not in FIRST_VISIT:
        raise ValueError(f"first_visit={first_visit!r}: allowed: {', '.join(FIRST_VISIT)}")
    found = RULES[ri_offset]
    if first_visit == found.first_visit:
        return found
    if found.first_visit == "init":
        return with_first_visit(found)
    raise ValueError(f"ri_offset={ri_offset!r} with first_visit={first_visit!r}: under an "
                     "offset rule a client's first offset is zero (it starts from w, as "
                     "first_visit='global' says); Algorithm 1's w + beta (w - w^0) is "
                     "ri_offset='model' only: pass first_visit='global'")
