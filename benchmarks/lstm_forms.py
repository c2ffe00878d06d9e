"""The Shakespeare LSTM's local steps in two forms, side by side (Speed II, issue 25): flax's
`nn.RNN(OptimizedLSTMCell)` (the model's) against the same parameters with each layer's
input projection hoisted out of the time scan (one [B*T, I] x [I, 4H] GEMM; only h @ W_h in
the scan), unrolled 1, 4, 8, 16 positions per scan iteration. One client, K SGD steps in a
jitted lax.scan, B windows of 80 characters; median of the repeats, round-robin.

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/lstm_forms.py [--batch 10] [--steps 10]
"""
import argparse
import functools
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from fedinit_jax import models  # noqa: E402
from fedinit_jax.data import shakespeare  # noqa: E402


def hoisted_layer(p, xs, unroll):
    """One LSTM layer of OptimizedLSTMCell's parameters, input projection outside the scan."""
    gates = "ifgo"
    wi = jnp.concatenate([p["i" + g]["kernel"] for g in gates], 1)  # [I, 4H]
    wh = jnp.concatenate([p["h" + g]["kernel"] for g in gates], 1)  # [H, 4H]
    b = jnp.concatenate([p["h" + g]["bias"] for g in gates])  # [4H]
    xw = jnp.einsum("bti,ig->tbg", xs, wi) + b

    def step(carry, xt):
        c, h = carry
        i, f, g, o = jnp.split(xt + h @ wh, 4, -1)
        c = nn.sigmoid(f) * c + nn.sigmoid(i) * jnp.tanh(g)
        h = nn.sigmoid(o) * jnp.tanh(c)
        return (c, h), h

    zero = jnp.zeros((xs.shape[0], wh.shape[0]), xs.dtype)
    return jnp.swapaxes(jax.lax.scan(step, (zero, zero), xw, unroll=unroll)[1], 0, 1)


def hoisted_apply(params, tokens, unroll=1):
    h = params["Embed_0"]["embedding"][tokens]
    for layer in range(2):
        h = hoisted_layer(params[f"OptimizedLSTMCell_{layer}"], h, unroll)
    return h @ params["Dense_0"]["kernel"] + params["Dense_0"]["bias"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    model = models.get("lstm", shakespeare.VOCAB_SIZE)
    params = model.init(jax.random.key(0), (80,))
    rng = np.random.default_rng(0)
    x, y = (jnp.asarray(rng.integers(3, shakespeare.OOV, (args.batch, 80)), jnp.int32)
            for _ in "xy")

    def loss(apply, p):
        return optax.softmax_cross_entropy_with_integer_labels(apply(p, x), y).mean()

    def local_steps(apply):
        @jax.jit
        def run(p):
            def body(p, _):
                g = jax.grad(functools.partial(loss, apply))(p)
                return jax.tree.map(lambda a, b: a - 0.1 * b, p, g), None
            return jax.lax.scan(body, p, None, length=args.steps)[0]
        return run

    diff = float(jnp.max(jnp.abs(hoisted_apply(params, x) - model.apply(params, x))))
    variants = {"flax nn.RNN(OptimizedLSTMCell)": local_steps(model.apply)}
    for unroll in (1, 4, 8, 16):
        variants[f"hoisted input projection, unroll {unroll}"] = local_steps(
            functools.partial(hoisted_apply, unroll=unroll))
    for run in variants.values():
        jax.block_until_ready(run(params))
    seconds = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, run in variants.items():
            t0 = time.perf_counter()
            jax.block_until_ready(run(params))
            seconds[name].append(time.perf_counter() - t0)
    base = np.median(seconds["flax nn.RNN(OptimizedLSTMCell)"])
    print(f"B={args.batch} x 80 characters, K={args.steps} steps; forms' logits differ by at "
          f"most {diff:.1e}\n")
    print("| LSTM local step form | ms per step | speed vs flax |\n|---|---|---|")
    for name, s in seconds.items():
        print(f"| {name} | {1e3 * np.median(s) / args.steps:.1f} | {base / np.median(s):.2f}x |")


if __name__ == "__main__":
    main()
