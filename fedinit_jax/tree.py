"""Pytree helpers that optax.tree lacks: the client axis and relaxed initialization.

Relaxed initialization (FedInit, paper Algorithm 1 line 6) starts client i from

    w_i0 = w + beta * o_i

where w is the global model and o_i its offset: w - w_i under Algorithm 1 (w_i the client's
last local model), another under the offset rules of ri_offset.py.
"""
import jax
import jax.numpy as jnp
import optax
from jax import lax

__all__ = ["offset_init", "client_sum", "client_mean", "run_or_keep", "gather",
           "scatter", "stack", "per_client_sq_dist"]


def offset_init(w_global, offsets, beta):
    """w_i0 = w + beta * o_i for every row i of the stacked offsets [N, ...] (beta a scalar)."""
    return jax.tree.map(lambda w, o: w[None] + beta * o, w_global, offsets)


def _real_rows(x, weights):
    """x with the rows of weight 0 (padded slots) zeroed; inf or NaN there does not leak."""
    keep = (weights > 0).reshape((-1,) + (1,) * (x.ndim - 1))
    return jnp.where(keep, x, jnp.zeros((), x.dtype))


def client_sum(tree, weights=None):
    """Sum over the leading client axis: sum_S(x_i); with weights ([N] >= 0, 0 = a padded
    slot), sum_S(weight_i x_i) over the rows of positive weight only."""
    if weights is None:
        return jax.tree.map(lambda x: jnp.sum(x, axis=0), tree)

    def weighted(x):
        w = weights.reshape((-1,) + (1,) * (x.ndim - 1)).astype(x.dtype)
        return jnp.sum(_real_rows(x, weights) * w, axis=0)

    return jax.tree.map(weighted, tree)


def client_mean(tree, weights=None):
    """Mean over the leading client axis: mean_S(x_i); with weights ([N] >= 0, 0 = a padded
    slot), sum_S(weight_i x_i) / sum_S(weight_i) (0/1 weights: the mean over the real rows)."""
    if weights is None:
        return jax.tree.map(lambda x: jnp.mean(x, axis=0), tree)
    count = jnp.sum(weights)
    return jax.tree.map(lambda x: x / count.astype(x.dtype), client_sum(tree, weights))


def run_or_keep(real, run, keep, operand, by_cond: bool):
    """run(operand) where the scalar bool `real` holds, else keep(operand): a padded slot or a
    masked local step skipped. by_cond: lax.cond (the branch not taken costs nothing; one
    client at a time); else both computed and one selected (optax.tree.where), the only form
    that batches under vmap and shard_map (docs/performance.md)."""
    if by_cond:
        return lax.cond(real, run, keep, operand)
    return optax.tree.where(real, run(operand), keep(operand))


def gather(stacked, ids):
    """Rows `ids` of a [C, ...] stacked pytree -> [N, ...]; an id >= C reads row C - 1."""
    return jax.tree.map(lambda x: jnp.take(x, ids, axis=0, mode="clip"), stacked)


def scatter(stacked, ids, rows):
    """stacked with rows `ids` replaced by `rows` ([N, ...]); a row whose id is >= C (a padded
    slot) is dropped, not written."""
    return jax.tree.map(lambda x, r: x.at[ids].set(r.astype(x.dtype), mode="drop"),
                        stacked, rows)


def stack(tree, n):
    """n copies of `tree` along a new leading axis: [n, ...]."""
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (n, *jnp.shape(x))), tree)  # one op


def per_client_sq_dist(stacked, tree):
    """||x_i - y||^2 for every row i of a [N, ...] stacked pytree -> [N]."""
    parts = jax.tree.map(
        lambda x, y: jnp.sum(jnp.square(x - y[None]).reshape(x.shape[0], -1), axis=1),
        stacked, tree)
    return sum(jax.tree.leaves(parts))
