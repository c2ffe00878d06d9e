"""The one shared local update every algorithm runs on a client (ALGORITHMS.md, "The shared
local step"; paper Algorithm 1 lines 7-10).

For k = 0..K-1 on client i's k-th minibatch:

    g = gradient(loss)                 # plain, or SAM's (FedSAM)
    g = correct(g, w)                  # the algorithm's correction (SCAFFOLD, FedDyn, FedCM, ...)
    g = clip_by_global_norm(g, clip)   # clip sees loss + correction, not weight decay
    g = g + wd * w                     # coupled L2
    w = w - eta_l * g                  # plain SGD

The last three lines are an optax chain whose learning rate is a traced per-round scalar.
Written for one client; the round maps it over the sampled clients.
"""
from typing import Callable, Optional

import jax
import optax
from jax import lax


def client_optimizer(learning_rate, clip_norm: Optional[float], weight_decay: Optional[float]):
    """optax chain: clip_by_global_norm(clip) -> add_decayed_weights(wd) -> sgd(eta_l).

    clip_norm / weight_decay of None or 0 leave that stage out.
    """
    stages = []
    if clip_norm:
        stages.append(optax.clip_by_global_norm(clip_norm))
    if weight_decay:
        stages.append(optax.add_decayed_weights(weight_decay))
    stages.append(optax.sgd(learning_rate))
    return optax.chain(*stages)


def plain_gradient(loss_fn) -> Callable:
    """(w, batch, key) -> (loss, grad loss(w))."""
    return jax.value_and_grad(loss_fn)


def sam_gradient(loss_fn, rho) -> Callable:
    """SAM gradient (FedSAM): g1 = grad at w; e = rho g1 / (||g1|| + 1e-7); g = grad at w + e.

    Both gradients use the same minibatch and key. Returns the loss at w.
    """
    value_and_grad = jax.value_and_grad(loss_fn)

    def gradient(w, batch, key):
        loss, g1 = value_and_grad(w, batch, key)
        scale = rho / (optax.tree.norm(g1) + 1e-7)
        w_adv = jax.tree.map(lambda p, g: p + scale * g, w, g1)
        _, g = value_and_grad(w_adv, batch, key)
        return loss, g

    return gradient


def local_update(gradient_fn, correct, w_start, batches, key, learning_rate, *,
                 clip_norm=None, weight_decay=None):
    """K local steps from w_start over `batches` (leaves [K, B, ...]) with lax.scan.

    gradient_fn: (w, batch, key) -> (loss, g); correct: (g, w) -> corrected g.
    Returns (w_K, mean loss over the K steps).
    """
    opt = client_optimizer(learning_rate, clip_norm, weight_decay)
    num_steps = jax.tree.leaves(batches)[0].shape[0]
    step_keys = jax.random.split(key, num_steps)

    def step(carry, xs):
        w, opt_state = carry
        batch, step_key = xs
        loss, g = gradient_fn(w, batch, step_key)
        g = correct(g, w)
        updates, opt_state = opt.update(g, opt_state, w)
        return (optax.apply_updates(w, updates), opt_state), loss

    (w_end, _), losses = lax.scan(step, (w_start, opt.init(w_start)), (batches, step_keys))
    return w_end, losses.mean()
