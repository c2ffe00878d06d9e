"""The reference CNN's local steps in float32 and in bfloat16, side by side: is bf16 faster,
and exact enough?

One client, K SGD steps of batch B (a jitted lax.scan), CIFAR-shaped inputs; the model's
computation in `dtype` (models.CNN(dtype=...): parameters and the update stay float32, flax's
mixed precision), for each convolution formulation; median of the repeats, round-robin. Also a
2048^2 matmul in both dtypes and with bfloat16 inputs accumulated in float32 (what the CPU's
bfloat16 units give a large GEMM); and how exact: each variant's gradient at the start against
float32's (relative error of the whole gradient), and its loss after the K steps.

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/conv_dtype.py [--convs auto im2col]
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from fedinit_jax import models  # noqa: E402
from fedinit_jax.models import conv  # noqa: E402

DTYPES = ("float32", "bfloat16")


def _loss(model, p, x, y):
    return optax.softmax_cross_entropy_with_integer_labels(model.apply(p, x), y).mean()


def gradient(model, params, x, y):
    """The whole gradient at params, flattened (float32)."""
    grad = jax.jit(jax.grad(lambda p: _loss(model, p, x, y)))(params)
    return np.concatenate([np.ravel(leaf) for leaf in jax.tree.leaves(grad)])


def local_steps(model, params, xs, ys):
    """K SGD steps (lr 0.1) as one jitted scan: () -> (params, losses)."""
    @jax.jit
    def run(p):
        def step(p, xy):
            value, grad = jax.value_and_grad(_loss, argnums=1)(model, p, *xy)
            return jax.tree.map(lambda a, g: a - 0.1 * g, p, grad), value
        return jax.lax.scan(step, p, (xs, ys))
    return lambda: jax.block_until_ready(run(params))


def matmul(dtype, n=2048):
    """A [n, n] @ [n, n] GEMM in `dtype`; 'bfloat16, float32 accumulation' has bfloat16
    inputs and a float32 result (lax.dot's preferred_element_type)."""
    a = jnp.asarray(np.random.default_rng(0).normal(size=(n, n)), dtype.split(",")[0])
    f = jax.jit(lambda a: jax.lax.dot(a, a, preferred_element_type=jnp.float32)
                if "accumulation" in dtype else a @ a)
    return lambda: jax.block_until_ready(f(a))


def measure(convs, batch, steps, repeats):
    rng = np.random.default_rng(0)
    xs = jnp.asarray(rng.normal(size=(steps, batch, 32, 32, 3)), jnp.float32)
    ys = jnp.asarray(rng.integers(0, 10, (steps, batch)), jnp.int32)
    params = models.get("cnn", 10).init(jax.random.key(0), (32, 32, 3))
    nets = {(c, d): models.get("cnn", 10, conv=c, dtype=d) for c in convs for d in DTYPES}
    variants = {key: local_steps(net, params, xs, ys) for key, net in nets.items()}
    grads = {key: gradient(net, params, xs[0], ys[0]) for key, net in nets.items()}
    variants.update({("2048^2 matmul", d): matmul(d)
                     for d in (*DTYPES, "bfloat16, float32 accumulation")})
    losses = {key: np.asarray(run()[1]) for key, run in variants.items() if key[0] in convs}
    seconds = {key: [] for key in variants}
    for _ in range(repeats):
        for key, run in variants.items():
            t0 = time.perf_counter()
            run()
            seconds[key].append(time.perf_counter() - t0)
    print(f"\nreference CNN (width 1), one client, K={steps} steps x batch {batch}; "
          f"{jax.devices()[0].device_kind}, jax {jax.__version__}; median of {repeats}\n")
    print("| variant | dtype | ms per step (per matmul) | speed vs float32 | gradient vs float32 "
          "| loss at step 1 | loss at step K |\n|---|---|---|---|---|---|---|")
    for (name, dtype), s in seconds.items():
        per = np.median(s) / (steps if name in convs else 1)
        base = np.median(seconds[name, "float32"]) / np.median(s)
        loss = losses.get((name, dtype))
        first, last = ("-", "-") if loss is None else (f"{loss[0]:.4f}", f"{loss[-1]:.4f}")
        error = "-"
        if (name, dtype) in grads:
            want = grads[name, "float32"]
            error = f"{np.linalg.norm(grads[name, dtype] - want) / np.linalg.norm(want):.1e}"
        print(f"| {name} | {dtype} | {1e3 * per:.1f} | {base:.2f}x | {error} | {first} "
              f"| {last} |")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--convs", nargs="+", default=["auto", "im2col"],
                        choices=conv.IMPLEMENTATIONS)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    measure(args.convs, args.batch, args.steps, args.repeats)


if __name__ == "__main__":
    main()
