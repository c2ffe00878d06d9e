"""The federated round: relaxed initialization, local training on the sampled clients,
aggregation. One pure function, jit-compiled once per run.

Paper Algorithm 1 with an algorithm's Correction plugged in (docs/algorithms.md):

    w_i0    = w + beta * (w - w_i)                         (RI; beta = 0 is FedAvg)
    w_iK    = local_update(w_i0)                           (K corrected SGD steps)
    p_i     = w_iK - w_i0                                  (local progress: every correction
                                                            state, c_i, h_i, d, mu_i, is
                                                            built from it, as the authors do)
    delta_i = w_iK - w      (delta_from="global", paper Algorithm 1 line 16, default)
    delta_i = w_iK - w_i0   (delta_from="start", the authors' code)
    w      <- w + server_opt(mean_S(delta_i))              (sgd(eta_g): w + eta_g * mean delta)
    w_i    <- w_iK for i in S only

`delta_from` only decides how a FedAvg-type server moves w; FedDyn-type servers replace w by
mean_S(w_iK) + mean_C(h_i) either way (their ServerCorrection.update). With beta = 0, p_i = delta_i
and the two options are the same algorithm.

Participation: S is the round input's client_ids. A round whose |S| varies (the authors'
Bernoulli sampling) pads S to a static N with masked slots (RoundInput.mask): a padded slot
is skipped, its id is replaced by C so that gathers read a real row and scatters drop it,
and every mean over S divides by the real |S|. How a slot (or a masked local step) is
skipped depends on the execution: one client at a time (sequential) skips it with lax.cond
and pays nothing; clients side by side (vmap, chunked) train every slot and select the
old values with jnp.where. Under vmap a cond would run both branches and select anyway, and
JAX cannot batch a cond whose predicate varies over a shard_map axis ("Primitive mul
requires varying manual axes to match", jax 0.10), so the selection is written out: the
same numbers on 1 device, and the only form that runs on several.

Per-client state (w_i and the correction's client states, C x d each) may be stored in a
narrower float (client_state_dtype="bfloat16": half the memory of float32) when it does not fit
on the device; it is widened to float32 when read and rounded when written, so w_i is
bf16(w_iK) and everything else is computed in float32.

Metrics: train_loss (mean local loss), divergence = mean_S ||w_iK - w_new||^2 (the authors'
code) and divergence_all = (1/C) sum_C ||w_i - w_new||^2 (the paper's Delta^t).
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec

from fedinit_jax import execution as strategies
from fedinit_jax import local, tree
from fedinit_jax.checks import FLOAT32_MAX, check_choice, check_number
from fedinit_jax.correction import NONE, Correction, LocalContext, ServerInput
from fedinit_jax.types import Costs, FederatedAlgorithm, FedState, RoundInput

DELTA_FROM = ("global", "start")
CLIENT_STATE_DTYPES = ("float32", "bfloat16", "float16")


def _floats_to(dtype, pytree):
    """The floating leaves of `pytree` cast to dtype (integer leaves unchanged)."""
    return jax.tree.map(
        lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, pytree)


def _check_builder_args(beta, delta_from, clip_norm, weight_decay):
    check_number("beta", beta)  # the paper sweeps -0.2..0.15
    check_choice("delta_from", delta_from, DELTA_FROM)
    check_number("clip_norm", clip_norm, 0.0, optional=True)  # None or 0: off
    check_number("weight_decay", weight_decay, 0.0, optional=True)


def check_round_input(round_input: RoundInput, num_clients: int, num_devices: int = 1) -> None:
    """ValueError naming the field when a round input cannot be run on num_clients clients."""
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
    if not leaves:
        raise ValueError("batches is empty: it must be a pytree of [N, K, B, ...] arrays")
    shapes = [np.shape(x) for x in leaves]
    if any(len(s) < 3 for s in shapes) or len({s[:3] for s in shapes}) != 1:
        raise ValueError(f"batches: every leaf needs the same leading [N, K, B] axes, got "
                         f"{[s[:3] for s in shapes]}")
    if shapes[0][0] != n:
        raise ValueError(f"batches: leading axis {shapes[0][0]} != number of client_ids {n}")
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
    if round_input.weights is not None:
        w = np.asarray(round_input.weights)
        if (w.shape != ids.shape or not np.issubdtype(w.dtype, np.number)
                or not np.isfinite(w).all() or not (w[real_rows] > 0).all()):
            raise ValueError(f"weights must be finite numbers shaped like client_ids {ids.shape}, "
                             f"> 0 for the sampled clients; got {w!r}")
    lr = np.asarray(round_input.local_lr)
    if (lr.shape != () or not np.issubdtype(lr.dtype, np.number) or not np.isfinite(lr)
            or not 0 < lr <= FLOAT32_MAX):
        raise ValueError(f"local_lr must be a scalar in (0, {FLOAT32_MAX:.4g}] (float32), got "
                         f"{round_input.local_lr!r}")


def as_arrays(round_input: RoundInput) -> RoundInput:
    """The round input with int32 ids, a float32 lr and a bool mask (when there is one)."""
    def optional(x, dtype):
        return None if x is None else jnp.asarray(x, dtype)

    return round_input._replace(
        client_ids=jnp.asarray(round_input.client_ids, jnp.int32),
        local_lr=jnp.asarray(round_input.local_lr, jnp.float32),
        mask=optional(round_input.mask, bool),
        step_mask=optional(round_input.step_mask, bool),
        weights=optional(round_input.weights, jnp.float32))


RUNTIME_DEFAULTS = {"execution": "vmap", "chunk_size": None, "num_devices": None,
                    "client_state_dtype": None, "donate_state": False}


def build_algorithm(loss_fn, *, correction: Correction = NONE, beta: float = 0.0,
                    delta_from: str = "global", server_optimizer=None, clip_norm=None,
                    weight_decay=None, costs: Costs | None = None) -> FederatedAlgorithm:
    """A FederatedAlgorithm for `loss_fn(params, batch, key) -> scalar`, run with the
    default runtime (vmapped clients on one device); `algo.with_runtime(...)` for another.

    correction: the algorithm's plug-in (FedAvg: none; its local_gradient, if any, replaces
    the plain gradient). server_optimizer: optax transformation applied to the
    pseudo-gradient -mean_S(delta_i); default sgd(1.0), i.e. w <- w + mean delta.
    costs: what the algorithm communicates and stores (default: the correction's).
    """
    _check_builder_args(beta, delta_from, clip_norm, weight_decay)
    spec = dict(loss_fn=loss_fn, correction=correction, beta=beta, delta_from=delta_from,
                server_optimizer=optax.sgd(1.0) if server_optimizer is None
                else server_optimizer, clip_norm=clip_norm, weight_decay=weight_decay,
                costs=correction.costs if costs is None else costs)
    return _compile(spec, **RUNTIME_DEFAULTS)


def _compile(spec, *, execution, chunk_size, num_devices, client_state_dtype,
             donate_state) -> FederatedAlgorithm:
    """The algorithm of `spec` under one runtime: how the round runs, never what it computes.

    execution / chunk_size: how the sampled clients are mapped (execution.py).
    num_devices: split the sampled clients over this many devices (shard_map); None: one.
    client_state_dtype: storage dtype of the per-client state (None: the parameters' own).
    donate_state: `apply` donates the state's buffers to the round (jit donate_argnums), so
    the new [C, ...] client tables are written in place instead of next to a copy (about
    half the peak memory); the state passed in must not be used after the call (JAX raises
    "Array has been deleted" if it is). The binaries donate; the API default keeps it.
    """
    strategies.check_strategy(execution, chunk_size)
    if client_state_dtype is not None:  # None: the parameters' own dtype
        check_choice("client_state_dtype", client_state_dtype, CLIENT_STATE_DTYPES)
    mesh = strategies.client_mesh(num_devices)
    correction, server_opt = spec["correction"], spec["server_optimizer"]
    clip_norm, delta_from = spec["clip_norm"], spec["delta_from"]
    gradient_fn = (correction.local_gradient or local.plain_gradient)(spec["loss_fn"])
    client, server = correction.client, correction.server
    # the authors' clip form: a proximal / dual pull lam * w is added after clipping
    weight_decay = spec["weight_decay"]
    local_decay = weight_decay if not client.decay else (weight_decay or 0.0) + client.decay

    def store(pytree):  # per-client state as kept in FedState
        return pytree if client_state_dtype is None else _floats_to(client_state_dtype, pytree)

    def load(pytree):  # ... and as computed with
        return pytree if client_state_dtype is None else _floats_to(jnp.float32, pytree)

    def init(params, num_clients: int) -> FedState:
        if not isinstance(num_clients, (int, np.integer)) or num_clients < 1:
            raise ValueError(f"num_clients={num_clients!r} must be a positive int")
        # each leaf as an array of its own dtype: a weakly typed leaf (jnp.asarray(0.05))
        # would come back strongly typed from the round and compile it a second time
        params = jax.tree.map(lambda x: jnp.asarray(x, jnp.asarray(x).dtype), params)
        if not jax.tree.leaves(params) or not all(
                jnp.issubdtype(x.dtype, jnp.floating) for x in jax.tree.leaves(params)):
            raise ValueError("params: every leaf must be a float array (got dtypes "
                             f"{sorted({str(x.dtype) for x in jax.tree.leaves(params)})})")
        state = FedState(
            params=params,
            client_params=store(tree.stack(params, num_clients)),
            server_opt_state=server_opt.init(params),
            server_state=server.init(params),
            client_state=store(tree.stack(client.init(params), num_clients)),
            beta=jnp.asarray(spec["beta"], jnp.float32),
            rounds_done=jnp.zeros((), jnp.int32))
        if donate_state:  # every leaf its own buffer: none shared with the caller's params
            state = jax.tree.map(jnp.copy, state)  # or with another leaf (e.g. Adam's m, v)
        return state

    def round_fn(state: FedState, round_input: RoundInput, key):
        w = state.params
        lr = jnp.asarray(round_input.local_lr, jnp.float32)
        num_clients = jax.tree.leaves(state.client_params)[0].shape[0]
        num_steps = jax.tree.leaves(round_input.batches)[0].shape[1]
        mask = round_input.mask
        weights = None if mask is None else mask.astype(jnp.float32)
        aggregation = weights  # the server's means over S: uniform, or by the given weights
        if round_input.weights is not None:
            sizes = round_input.weights.astype(jnp.float32)
            aggregation = sizes if mask is None else sizes * weights
        step_mask = round_input.step_mask  # [N, K] or None
        real_steps = (jnp.full(round_input.client_ids.shape, num_steps, jnp.float32)
                      if step_mask is None else jnp.sum(step_mask, axis=1).astype(jnp.float32))
        ids = (round_input.client_ids if mask is None
               else jnp.where(mask, round_input.client_ids, num_clients))  # padded: dropped
        old_clients = load(tree.gather(state.client_state, ids))
        w_start = tree.relaxed_init(w, load(tree.gather(state.client_params, ids)), state.beta)
        client_keys = jax.random.split(key, ids.shape[0])

        batched = execution != "sequential"  # clients side by side: select, never cond

        def train(args):
            w0, batches, client_key, client_state, steps, k = args
            ctx = LocalContext(w, w0, state.server_state, client_state)
            w_end, loss, carry = local.local_update(
                gradient_fn, lambda g, wk: client.gradient(g, wk, ctx), w0, batches,
                client_key, lr, ctx, clip_norm=clip_norm, weight_decay=local_decay,
                step_mask=steps, skip_by_cond=not batched)
            progress = jax.tree.map(jnp.subtract, w_end, w0)
            return (w_end, progress, loss.astype(jnp.float32),
                    client.finalize(ctx, progress, k * lr, carry))

        def skip(args):  # a padded slot: nothing trained, the old state kept
            w0, _, _, client_state, _, _ = args
            # zeros_like of a slot's own array: varying over a shard_map mesh as train's are
            no_loss = jnp.zeros_like(jax.tree.leaves(w0)[0], jnp.float32, shape=())
            return w0, optax.tree.zeros_like(w0), no_loss, client_state

        def one_client(args):
            if mask is None:
                return train(args)
            *inputs, is_real = args
            if batched:
                return tree.select(is_real, train(tuple(inputs)), skip(tuple(inputs)))
            return lax.cond(is_real, train, skip, tuple(inputs))

        mapped = (w_start, round_input.batches, client_keys, old_clients, step_mask, real_steps)
        w_end, progress, losses, new_clients = strategies.map_clients(
            one_client, mapped if mask is None else mapped + (mask,),
            execution, chunk_size, mesh)

        mean_progress = tree.client_mean(progress, aggregation)
        if delta_from == "start":
            mean_delta = mean_progress
        else:
            mean_delta = tree.client_mean(jax.tree.map(lambda x, y: x - y[None], w_end, w),
                                          aggregation)
        pseudo_grad = jax.tree.map(jnp.negative, mean_delta)
        updates, server_opt_state = server_opt.update(pseudo_grad, state.server_opt_state, w)
        client_params = tree.scatter(state.client_params, ids, w_end)
        client_state = tree.scatter(state.client_state, ids, new_clients)
        server_state, w_new = server.update(state.server_state, ServerInput(
            w_candidate=optax.apply_updates(w, updates),
            mean_w_end=tree.client_mean(w_end, aggregation), mean_progress=mean_progress,
            lr_sum=tree.client_mean(real_steps, weights) * lr, old_clients=old_clients,
            new_clients=new_clients,
            all_clients=load(client_state), num_clients=num_clients, weights=weights))

        new_state = FedState(w_new, client_params, server_opt_state, server_state,
                             client_state, state.beta, state.rounds_done + 1)
        metrics = {
            "train_loss": tree.client_mean(losses, weights),
            "divergence": tree.client_mean(tree.per_client_sq_dist(w_end, w_new), weights),
            "divergence_all": jnp.mean(tree.per_client_sq_dist(client_params, w_new)),
        }
        return new_state, metrics

    donate = (0,) if donate_state else ()
    replicated = None if mesh is None else NamedSharding(mesh, PartitionSpec())
    if mesh is None:
        jitted_round = jax.jit(round_fn, donate_argnums=donate)
    else:  # the state lives replicated on the mesh, so every round sees the same shardings
        jitted_round = jax.jit(round_fn, out_shardings=replicated, donate_argnums=donate)

    expected_states = {}

    def check_state(state, num_clients):
        """ValueError unless `state` has the structure, shapes and dtypes this algorithm's
        init makes (e.g. a SCAFFOLD state handed to FedCM)."""
        signature = (jax.tree.structure(state.params),
                     tuple((x.shape, x.dtype) for x in jax.tree.leaves(state.params)),
                     num_clients)
        if signature not in expected_states:
            expected_states[signature] = jax.eval_shape(lambda p: init(p, num_clients),
                                                        state.params)
        want = expected_states[signature]
        spec_of = lambda t: (jax.tree.structure(t),  # noqa: E731
                             [(tuple(x.shape), jnp.dtype(x.dtype)) for x in jax.tree.leaves(t)])
        for field in FedState._fields:
            if spec_of(getattr(state, field)) != spec_of(getattr(want, field)):
                raise ValueError(f"state.{field} does not match this algorithm's state (was "
                                 "the state made by another algorithm's init, or for other "
                                 "params?)")

    last_beta = [None]  # the beta array of the state this apply returned last

    def check_beta(state):
        """beta lives in the state (traced, so replicas may differ); a state whose beta is not
        the builder's was made by another algorithm (fedavg's 0 given to fedinit) or builder:
        refused, instead of silently running with the state's beta. Checked once per state
        chain: a state this apply returned is trusted without a host read."""
        if state.beta is last_beta[0]:
            return
        if not isinstance(state.beta, jax.core.Tracer) and not np.isclose(
                float(state.beta), spec["beta"], rtol=1e-6, atol=1e-7):
            raise ValueError(f"state.beta={float(state.beta):g} but this algorithm was built "
                             f"with beta={spec['beta']:g}: the state comes from another "
                             "algorithm or builder; use that one, or this one's init")

    def apply(state: FedState, round_input: RoundInput, key):
        if not isinstance(state, FedState):
            raise ValueError(f"state must be a FedState from algo.init, got {type(state)}")
        num_clients = jax.tree.leaves(state.client_params)[0].shape[0]
        check_state(state, num_clients)
        check_beta(state)
        check_round_input(round_input, num_clients, 1 if mesh is None else mesh.size)
        if mesh is not None:
            state = jax.device_put(state, replicated)  # a no-op after the first round
        new_state, metrics = jitted_round(state, as_arrays(round_input), key)
        last_beta[0] = new_state.beta
        return new_state, metrics

    def lower(state, round_input: RoundInput, key):
        """The jit-compiled round of `apply`, lowered for these inputs without running it.

        state and the leaves of round_input.batches may be jax.ShapeDtypeStruct (e.g.
        jax.eval_shape(algo.init, params, C)); client_ids, local_lr and the masks are small
        arrays. `.compile()` gives XLA's account per device (`memory_analysis()`: arguments,
        outputs, temporaries, aliased) and `cost_analysis()` (XLA's FLOPs, which count a
        loop body once: benchmarks/plan.py counts the jaxpr instead); `apply` on inputs of
        the same shapes then reuses that compilation."""
        if mesh is not None:  # as apply puts it: replicated over the mesh
            state = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype,
                                                                sharding=replicated), state)
        return jitted_round.lower(state, as_arrays(round_input), key)

    runtime = dict(execution=execution, chunk_size=chunk_size, num_devices=num_devices,
                   client_state_dtype=client_state_dtype, donate_state=donate_state)

    def with_runtime(**changes) -> FederatedAlgorithm:
        unknown = sorted(set(changes) - set(RUNTIME_DEFAULTS))
        if unknown:
            raise ValueError(f"with_runtime: {', '.join(unknown)} not runtime options; "
                             f"allowed: {', '.join(RUNTIME_DEFAULTS)}")
        return _compile(spec, **{**runtime, **changes})

    return FederatedAlgorithm(init=init, apply=apply, round_fn=round_fn,
                              costs=spec["costs"], with_runtime=with_runtime, lower=lower)
