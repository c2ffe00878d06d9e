"""The federated round: relaxed initialization, local training on the sampled clients,
aggregation. One pure function, jit-compiled once per run (paper Algorithm 1 with an
algorithm's Correction plugged in; docs/algorithms.md gives the maths and its departures):

    w_i0    = w + beta * o_i,  o_i = w - w_i               (RI; beta = 0 is FedAvg; the
                                                            offset rule, ri_offset.py, gives
                                                            o_i from the client's row)
    w_iK    = local_update(w_i0)                           (K corrected SGD steps)
    p_i     = w_iK - w_i0                                  (every correction state is built
                                                            from it, as the authors do)
    delta_i = w_iK - w      (delta_from="global", Algorithm 1 line 16, default)
    delta_i = w_iK - w_i0   (delta_from="start", the authors' code)
    w      <- w + server_opt(mean_S(delta_i))              (FedDyn-type servers replace w)
    row_i  <- w_iK for i in S only                        (Algorithm 1; an offset rule keeps
                                                            its offset instead)

S is the round input's client_ids, padded to a static N with masked slots when |S| varies
(RoundInput.mask): a padded slot is skipped (by lax.cond one client at a time, by selection
side by side: docs/performance.md), its id replaced by C, and every mean over S divides by
the real |S|. Per-client state may be stored narrower (Runtime.client_state_dtype) and is
computed with in float32. Metrics: train_loss and divergence = mean_S ||w_iK - w_new||^2;
the paper's Delta^t reads every client: divergence_all, on evaluation rounds.

The round is cohort_round on the sampled clients' rows (Cohort): federated_round gathers them
from FedState's [C, ...] tables and scatters them back; a ClientStore
(fedinit_jax/client_store/) does the same from host memory or disk, so a round costs its
cohort, not the federation.
"""
import functools
import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedinit_jax import execution, local, tree
from fedinit_jax.correction import LocalContext, ServerInput
from fedinit_jax.ri_offset import OffsetStep
from fedinit_jax.types import Array, Cohort, FedState, RoundInput, RoundSpec, Runtime

__all__ = ["DELTA_FROM", "COPY_WARNING_BYTES", "CLIENT_STATE_DTYPES", "to_storage",
           "from_storage", "init_state", "relaxed_start", "Slots", "slots", "local_rules",
           "ClientInput",
           "client_update", "skip_client", "train_clients", "aggregate", "round_metrics",
           "cohort_round", "federated_round", "divergence_all"]

DELTA_FROM = ("global", "start")
# init warns when undonated [C, ...] client tables exceed this: each round copies them
COPY_WARNING_BYTES = 64 * 2**20
CLIENT_STATE_DTYPES = ("float32", "bfloat16", "float16")


def _floats_to(dtype, pytree):
    """The floating leaves of `pytree` cast to dtype (integer leaves unchanged)."""
    return jax.tree.map(
        lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, pytree)


def to_storage(runtime: Runtime, pytree):
    """Per-client state as FedState keeps it (runtime.client_state_dtype)."""
    dtype = runtime.client_state_dtype
    return pytree if dtype is None else _floats_to(dtype, pytree)


def from_storage(runtime: Runtime, pytree):
    """Per-client state as the round computes with it (float32 when stored narrower)."""
    return pytree if runtime.client_state_dtype is None else _floats_to(jnp.float32, pytree)


def init_state(spec: RoundSpec, runtime: Runtime, params, num_clients: int) -> FedState:
    """FedState at round 0: w = params, every client's row its offset rule's first row
    (Algorithm 1 line 1: w_i = w^0; an offset rule's zero offset), zero correction states,
    the server optimizer's and the offset rule's initial states, and spec.beta."""
    if isinstance(num_clients, jax.core.Tracer):
        raise ValueError("num_clients must be a Python int (it sets the [C, ...] shapes), got "
                         "a tracer: under jax.eval_shape or jit pass it by closure, e.g. "
                         "jax.eval_shape(lambda p: algo.init(p, C), params)")
    if not isinstance(num_clients, (int, np.integer)) or num_clients < 1:
        raise ValueError(f"num_clients={num_clients!r} must be a positive int")
    # each leaf as an array of its own dtype: a weakly typed leaf (jnp.asarray(0.05))
    # would come back strongly typed from the round and compile it a second time
    params = jax.tree.map(lambda x: jnp.asarray(x, jnp.asarray(x).dtype), params)
    if not jax.tree.leaves(params) or not all(
            jnp.issubdtype(x.dtype, jnp.floating) for x in jax.tree.leaves(params)):
        raise ValueError("params: every leaf must be a float array (got dtypes "
                         f"{sorted({str(x.dtype) for x in jax.tree.leaves(params)})})")
    correction = spec.correction
    state = FedState(
        params=params,
        # each [C, ...] table made once, in its storage dtype (cast first: no float32 table)
        ri_rows=tree.stack(to_storage(runtime, spec.ri_offset.first_row(params)),
                           num_clients),
        server_opt_state=spec.server_optimizer.init(params),
        server_state=correction.server.init(params),
        client_state=tree.stack(to_storage(runtime, correction.client.init(params)), num_clients),
        beta=jnp.asarray(spec.beta, jnp.float32),
        rounds_done=jnp.zeros((), jnp.int32),
        client_visited=jnp.zeros((num_clients,), bool),
        ri_state=spec.ri_offset.init(params))
    tables = sum(x.nbytes for x in jax.tree.leaves(
        (state.ri_rows, state.client_state, state.client_visited)))
    if not runtime.donate_state and tables > COPY_WARNING_BYTES:
        warnings.warn(
            f"init: the [C, ...] client tables take {tables / 2**30:.2f} GiB and every "
            "algo.apply copies them: donate the state when you do not reuse the one you pass "
            "(fedinit_jax.with_runtime(algo, donate_state=True)) or keep the clients in a "
            "client_store (docs/api.md), and a round costs its cohort", stacklevel=3)
    if runtime.donate_state:  # no leaf may share a buffer with the caller's params: the
        # server-side leaves are copied (the optimizer's or correction's init may hold params);
        # the [C, ...] tables are new arrays already, and copying them would double the
        # peak memory of init
        server_side = ("params", "server_opt_state", "server_state", "ri_state")
        state = state._replace(**{field: jax.tree.map(jnp.copy, getattr(state, field))
                                  for field in server_side})
    return state


def relaxed_start(spec: RoundSpec, state: FedState, cohort: Cohort, runtime: Runtime):
    """w_i0 = w + beta o_i of every cohort slot, o_i the offset rule's (ri_offset.py) from
    the slots' stored rows (widened to float32)."""
    offsets = spec.ri_offset.offset(state.params, from_storage(runtime, cohort.ri_rows),
                                    cohort.client_visited, state.ri_state)
    return tree.offset_init(state.params, offsets, state.beta)


class Slots(NamedTuple):
    """How the round's N client slots count.

    ids: [N] client ids, a padded slot's replaced by C (gathers read a real row, scatters
      drop it).  mask: None, or [N] float32 1 / 0: real / padded (RoundInput.mask), for the
      uniform means (corrections, metrics).  aggregation: the server's weights of its means
      over S: None (uniform), or the sizes n_i (zero on padded slots).  real_steps: [N] each
      client's real local steps (K, or the step mask's count).
    """

    ids: Array
    mask: Array | None
    aggregation: Array | None
    real_steps: Array


def slots(round_input: RoundInput, num_clients: int) -> Slots:
    """The Slots of a round input on a federation of num_clients clients."""
    num_steps = jax.tree.leaves(round_input.batches)[0].shape[1]
    mask = None if round_input.mask is None else round_input.mask.astype(jnp.float32)
    aggregation = mask
    if round_input.sizes is not None:
        sizes = round_input.sizes.astype(jnp.float32)
        aggregation = sizes if mask is None else sizes * mask
    step_mask = round_input.step_mask  # [N, K] or None
    real_steps = (jnp.full(round_input.client_ids.shape, num_steps, jnp.float32)
                  if step_mask is None else jnp.sum(step_mask, axis=1).astype(jnp.float32))
    ids = (round_input.client_ids if round_input.mask is None
           else jnp.where(round_input.mask, round_input.client_ids, num_clients))
    return Slots(ids, mask, aggregation, real_steps)


def local_rules(spec: RoundSpec):
    """(gradient rule, weight decay of the local step) of the spec's correction: the authors'
    clip form adds a proximal / dual pull lam * w after clipping, as extra weight decay."""
    correction = spec.correction
    gradient = (correction.local_gradient or local.plain_gradient)(spec.loss_fn)
    decay = (spec.weight_decay if not correction.client.decay
             else (spec.weight_decay or 0.0) + correction.client.decay)
    return gradient, decay


class ClientInput(NamedTuple):
    """What one slot of a round trains on: leaves [N, ...] when built for the round, one
    client's (the leading axis mapped away) inside client_update."""

    start: Any            # w_i0 = w + beta (w - w_i), the relaxed initialization
    batches: Any          # [K, B, ...] its local steps' batches
    key: Any              # its PRNG key (from its client id)
    state: Any            # its correction state (c_i, h_i, ...), loaded
    step_mask: Any        # [K] bool, its real local steps; None: all K are
    real_steps: Any       # float32, how many of its K steps are real
    real: Any             # bool, a sampled client (False: a padded slot); None: no padding


def client_update(spec: RoundSpec, w, server_state, lr, batched: bool, client: ClientInput):
    """One client's round (Algorithm 1 lines 7-12): K corrected local steps from its start
    w_i0, then its new correction state. Returns (w_iK, p_i = w_iK - w_i0, mean local loss,
    new client state)."""
    gradient, decay = local_rules(spec)
    ctx = LocalContext(w, client.start, server_state, client.state)
    w_end, loss, carry = local.local_update(
        gradient, lambda g, wk: spec.correction.client.gradient(g, wk, ctx), client.start,
        client.batches, client.key, lr, ctx, clip_norm=spec.clip_norm, weight_decay=decay,
        client_optimizer=spec.client_optimizer, step_mask=client.step_mask,
        skip_by_cond=not batched)
    progress = jax.tree.map(jnp.subtract, w_end, client.start)
    return (w_end, progress, loss.astype(jnp.float32),
            spec.correction.client.finalize(ctx, progress, client.real_steps * lr, carry))


def skip_client(client: ClientInput):
    """A padded slot: nothing trained, its start and old state kept, zero progress."""
    # zeros_like of a slot's own array: varying over a shard_map mesh as a trained one's
    no_loss = jnp.zeros_like(jax.tree.leaves(client.start)[0], jnp.float32, shape=())
    return client.start, optax.tree.zeros_like(client.start), no_loss, client.state


def train_clients(spec: RoundSpec, runtime: Runtime, state: FedState, cohort: "Cohort",
                  round_input, lr, key, counted: Slots):
    """Every slot's client_update, mapped as the runtime says (execution.py), a padded slot
    skipped: by lax.cond one client at a time, by selection side by side (module doc).
    Returns (w_iK, p_i, losses, new client states, old client states), each [N, ...]."""
    w = state.params
    old_clients = from_storage(runtime, cohort.client_state)
    # a client's key from its id, not its slot: where a client sits (data.spread) and how
    # many devices share the slots never change its randomness
    clients = ClientInput(
        start=relaxed_start(spec, state, cohort, runtime),
        batches=round_input.batches,
        key=jax.vmap(jax.random.fold_in, (None, 0))(key, counted.ids), state=old_clients,
        step_mask=round_input.step_mask, real_steps=counted.real_steps, real=round_input.mask)
    batched = runtime.execution != "sequential"  # clients side by side: select, never cond
    train = functools.partial(client_update, spec, w, state.server_state, lr, batched)

    def one_client(client: ClientInput):
        if client.real is None:  # no padded slot in this round (static)
            return train(client)
        return tree.run_or_keep(client.real, train, skip_client, client, not batched)

    results = execution.map_clients(one_client, clients, runtime.execution,
                                     runtime.chunk_size,
                                     execution.client_mesh(runtime.num_devices))
    return (*results, old_clients)


def aggregate(spec: RoundSpec, state: FedState, lr, counted: Slots, w_end, progress,
              new_clients, old_clients, num_clients):
    """The server (Algorithm 1 lines 14-16 and the correction's server update):
    w <- w + server_opt(mean_S(delta_i)). Returns (w_new, server_opt_state, server_state)."""
    w = state.params
    mean_progress = tree.client_mean(progress, counted.aggregation)
    if spec.delta_from == "start":
        mean_delta = mean_progress
    else:
        mean_delta = tree.client_mean(jax.tree.map(lambda x, y: x - y[None], w_end, w),
                                      counted.aggregation)
    pseudo_grad = jax.tree.map(jnp.negative, mean_delta)
    updates, server_opt_state = spec.server_optimizer.update(pseudo_grad,
                                                             state.server_opt_state, w)
    server_state, w_new = spec.correction.server.update(state.server_state, ServerInput(
        w_candidate=optax.apply_updates(w, updates),
        mean_w_end=tree.client_mean(w_end, counted.aggregation), mean_progress=mean_progress,
        lr_sum=tree.client_mean(counted.real_steps, counted.mask) * lr,
        old_clients=old_clients, new_clients=new_clients, num_clients=num_clients,
        mask=counted.mask))
    return w_new, server_opt_state, server_state


def round_metrics(losses, w_end, w_new, mask) -> dict:
    """train_loss = mean_S local loss; divergence = mean_S ||w_iK - w_new||^2 (the authors').
    The paper's Delta^t over every client is not a round metric (it reads all C):
    divergence_all, on evaluation rounds."""
    return {
        "train_loss": tree.client_mean(losses, mask),
        "divergence": tree.client_mean(tree.per_client_sq_dist(w_end, w_new), mask),
    }


def cohort_round(spec: RoundSpec, runtime: Runtime, state: FedState, cohort: Cohort,
                 round_input: RoundInput, key, num_clients):
    """One round on the cohort's rows, pure: (state, cohort, round_input, key, C) ->
    (state, new cohort, metrics). Only the cohort is read and written: a round costs O(N d)
    whatever C is. state's client tables are neither read nor changed (None for a
    federation held in a ClientStore); the new rows of padded slots mean nothing and are
    not to be written back.
    num_clients: C, a Python int (SCAFFOLD's c and FedDyn's mean_C(h_i) move by the
    cohort's changes / C)."""
    counted = slots(round_input, num_clients)
    lr = jnp.asarray(round_input.local_lr, jnp.float32)
    w_end, progress, losses, new_clients, old_clients = train_clients(
        spec, runtime, state, cohort, round_input, lr, key, counted)
    w_new, server_opt_state, server_state = aggregate(
        spec, state, lr, counted, w_end, progress, new_clients, old_clients, num_clients)
    cohort_size = counted.ids.shape[0] if counted.mask is None else jnp.sum(counted.mask)
    new_state = state._replace(
        params=w_new, server_opt_state=server_opt_state, server_state=server_state,
        rounds_done=state.rounds_done + 1,
        ri_state=spec.ri_offset.update(state.ri_state, OffsetStep(
            state.params, w_new, state.beta, cohort_size, num_clients)))
    new_cohort = Cohort(to_storage(runtime, spec.ri_offset.stored(state.params, w_new, w_end)),
                        to_storage(runtime, new_clients),
                        jnp.ones_like(cohort.client_visited))
    return new_state, new_cohort, round_metrics(losses, w_end, w_new, counted.mask)


def federated_round(spec: RoundSpec, runtime: Runtime, state: FedState,
                    round_input: RoundInput, key):
    """One round, pure: (state, round_input, key) -> (state, metrics): the cohort's rows
    gathered from FedState's [C, ...] tables, cohort_round, the new rows scattered back (a
    padded slot's id is C: read clipped, its write dropped)."""
    num_clients = jax.tree.leaves(state.ri_rows)[0].shape[0]
    ids = slots(round_input, num_clients).ids
    tables = Cohort(state.ri_rows, state.client_state, state.client_visited)
    new_state, new_cohort, metrics = cohort_round(spec, runtime, state, tree.gather(tables, ids),
                                                  round_input, key, num_clients)
    new_tables = tree.scatter(tables, ids, new_cohort)
    return new_state._replace(ri_rows=new_tables.ri_rows,
                              client_state=new_tables.client_state,
                              client_visited=new_tables.client_visited), metrics


@jax.jit
def divergence_all(ri_rows, w) -> Array:
    """The paper's Delta^t = (1/C) sum_C ||w_i - w||^2 over a [C, ...] table of rows (stored
    dtype, widened to float32), measured from w = the offset rule's measured_from(w)
    (ri_offset.py: the global model when the rows are last local models, zero when they are
    offsets). It reads every client: the binaries take it on evaluation rounds only (a
    ClientStore streams its rows: fedinit_jax/client_store/)."""
    return jnp.mean(tree.per_client_sq_dist(_floats_to(jnp.float32, ri_rows), w))
