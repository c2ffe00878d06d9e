"""The one shared local update every algorithm runs on a client (docs/algorithms.md, "The
shared local step"; paper Algorithm 1 lines 7-10).

For k = 0..K-1 on client i's k-th minibatch:

    g = gradient(loss)                 # plain, or SAM's (FedSAM)
    g = correct(g, w)                  # the algorithm's correction (SCAFFOLD, FedDyn, FedCM, ...)
    g = clip_by_global_norm(g, clip)   # clip sees loss + correction, not weight decay
    g = g + wd * w                     # coupled L2 (FedDyn / FedProx add their lam * w here,
                                       # the authors' clip form: the round passes wd + lam)
    u = client_optimizer(g)            # identity by default: the paper's SGD
    w = w - eta_l * u

The last four lines are an optax chain whose learning rate is a traced per-round scalar.
`client_optimizer` is any optax.GradientTransformation whose updates the round scales by
-eta_l (e.g. optax.scale_by_adam(), optax.trace(0.9) for heavy-ball momentum); its state
lives inside the client's K-step scan: it starts fresh every round and is not kept across
rounds. Clipping and weight decay stay before it, in the authors' order. Written for one
client; the round maps it over the sampled clients.
"""
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import lax

from fedinit_jax import tree

__all__ = ["local_optimizer", "Gradient", "plain_gradient", "ascent_step", "sam_gradient",
           "local_update"]


def local_optimizer(learning_rate, clip_norm: float | None, weight_decay: float | None,
                    client_optimizer=None):
    """optax chain: clip_by_global_norm(clip) -> add_decayed_weights(wd) ->
    client_optimizer -> scale(-eta_l). With client_optimizer None this is sgd(eta_l) exactly
    (optax.sgd is identity -> scale_by_learning_rate). clip_norm / weight_decay of None or
    0 leave that stage out."""
    stages = []
    if clip_norm:
        stages.append(optax.clip_by_global_norm(clip_norm))
    if weight_decay:
        stages.append(optax.add_decayed_weights(weight_decay))
    stages.append(optax.identity() if client_optimizer is None else client_optimizer)
    stages.append(optax.scale_by_learning_rate(learning_rate))
    return optax.chain(*stages)


class Gradient(NamedTuple):
    """How a client turns its loss into a local gradient.

    init(ctx) -> carry: per-client state threaded through the K steps (() if none).
    apply(w, batch, key, carry, ctx) -> (loss at w, gradient, carry).
    """

    init: Callable
    apply: Callable


def _no_carry(_ctx):
    return ()


def plain_gradient(loss_fn) -> Gradient:
    """grad loss(w)."""
    value_and_grad = jax.value_and_grad(loss_fn)

    def apply(w, batch, key, carry, _ctx):
        loss, g = value_and_grad(w, batch, key)
        return loss, g, carry

    return Gradient(_no_carry, apply)


def ascent_step(w, direction, rho):
    """w + rho * direction / (||direction|| + 1e-7): SAM's perturbed point and e."""
    scale = rho / (optax.tree.norm(direction) + 1e-7)
    e = jax.tree.map(lambda d: scale * d, direction)
    return jax.tree.map(jnp.add, w, e), e


def sam_gradient(loss_fn, rho) -> Gradient:
    """SAM gradient (FedSAM): g1 = grad at w; e = rho g1 / (||g1|| + 1e-7); g = grad at w + e.

    Both gradients use the same minibatch and key. Returns the loss at w.
    """
    value_and_grad = jax.value_and_grad(loss_fn)

    def apply(w, batch, key, carry, _ctx):
        loss, g1 = value_and_grad(w, batch, key)
        w_adv, _ = ascent_step(w, g1, rho)
        _, g = value_and_grad(w_adv, batch, key)
        return loss, g, carry

    return Gradient(_no_carry, apply)


def local_update(gradient: Gradient, correct, w_start, batches, key, learning_rate, ctx=None,
                 *, clip_norm=None, weight_decay=None, client_optimizer=None, step_mask=None,
                 skip_by_cond=True):
    """K local steps from w_start over `batches` (leaves [K, B, ...]) with lax.scan.

    gradient: a Gradient; correct: (g, w) -> corrected g; ctx: the client's LocalContext.
    step_mask: None, or [K] bool: a False step is skipped, so it changes neither w, the
    optimizer state, the gradient's carry nor the loss: by lax.cond (costs nothing), or with
    skip_by_cond=False by selecting the old state (the round does so for clients run side by
    side, where a cond runs both branches anyway and JAX's vmap-of-cond inside shard_map
    fails: federated_round.py).
    Returns (w_K, mean loss over the real steps, the gradient's final carry).
    """
    opt = local_optimizer(learning_rate, clip_norm, weight_decay, client_optimizer)
    num_steps = jax.tree.leaves(batches)[0].shape[0]
    step_keys = jax.random.split(key, num_steps)

    def take_step(state, batch, step_key):
        w, opt_state, carry = state
        loss, g, carry = gradient.apply(w, batch, step_key, carry, ctx)
        g = correct(g, w)
        updates, opt_state = opt.update(g, opt_state, w)
        return (optax.apply_updates(w, updates), opt_state, carry), loss.astype(jnp.float32)

    def step(state, xs):
        batch, step_key, real = xs
        if real is None:
            return take_step(state, batch, step_key)
        # the skipped step's loss: zeros_like of the client's own w, so that under shard_map
        # it varies over the client mesh as the taken step's loss does
        no_loss = jnp.zeros_like(jax.tree.leaves(state[0])[0], jnp.float32, shape=())
        return tree.run_or_keep(real, lambda s: take_step(s, batch, step_key),
                                lambda s: (s, no_loss), state, skip_by_cond)

    init = (w_start, opt.init(w_start), gradient.init(ctx))
    (w_end, _, carry), losses = lax.scan(step, init, (batches, step_keys, step_mask))
    if step_mask is None:
        return w_end, losses.mean(), carry
    return w_end, losses.sum() / jnp.maximum(jnp.sum(step_mask), 1), carry
