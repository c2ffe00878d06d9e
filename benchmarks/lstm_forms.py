"""The Shakespeare LSTM's local steps in several forms, side by side (Speed II, issue 25):
the model's two recurrences (models/lstm.py: `scan`, flax's nn.RNN(OptimizedLSTMCell)
differentiated by JAX; `fused`, the hand-written backward with the weight gradients as one
GEMM over all positions), the scan form with only its input projection hoisted out of the
time loop, and PyTorch's nn.LSTM (oneDNN) when torch is installed. One client, K SGD steps
(a jitted lax.scan for JAX), B windows of 80 characters; median of the repeats, round-robin.

    JAX_PLATFORMS=cpu .venv/bin/python benchmarks/lstm_forms.py [--batch 4 10] [--steps 10]
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
from fedinit_jax.models.lstm import cell_weights  # noqa: E402


def hoisted_layer(p, xs):
    """One LSTM layer, input projection outside the scan, JAX's autodiff of the scan."""
    wi, wh, b = cell_weights(p)
    xw = jnp.einsum("bti,ig->tbg", xs, wi) + b[None, None]

    def step(carry, xt):
        c, h = carry
        i, f, g, o = jnp.split(xt + h @ wh, 4, -1)
        c = nn.sigmoid(f) * c + nn.sigmoid(i) * jnp.tanh(g)
        h = nn.sigmoid(o) * jnp.tanh(c)
        return (c, h), h

    zero = jnp.zeros((xs.shape[0], wh.shape[0]), xs.dtype)
    return jnp.swapaxes(jax.lax.scan(step, (zero, zero), xw)[1], 0, 1)


def hoisted_apply(params, tokens):
    h = params["Embed_0"]["embedding"][tokens]
    for layer in range(2):
        h = hoisted_layer(params[f"OptimizedLSTMCell_{layer}"], h)
    return h @ params["Dense_0"]["kernel"] + params["Dense_0"]["bias"]


def torch_steps(x, y, steps):
    """PyTorch's twin (embedding 8, nn.LSTM 256 x 2, dense), K SGD steps; None without torch."""
    try:
        import torch
    except ImportError:
        return None
    torch.manual_seed(0)
    embed, lstm = torch.nn.Embedding(shakespeare.VOCAB_SIZE, 8), torch.nn.LSTM(8, 256, 2)
    dense = torch.nn.Linear(256, shakespeare.VOCAB_SIZE)
    params = [*embed.parameters(), *lstm.parameters(), *dense.parameters()]
    opt = torch.optim.SGD(params, lr=0.1)
    tx, ty = (torch.from_numpy(np.array(a)).long() for a in (x, y))

    def run():
        for _ in range(steps):
            opt.zero_grad()
            logits = dense(lstm(embed(tx.T))[0]).transpose(0, 1)
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, shakespeare.VOCAB_SIZE), ty.reshape(-1))
            loss.backward()
            opt.step()
    return run


def measure(batch, steps, repeats):
    fused = models.get("lstm", shakespeare.VOCAB_SIZE)
    scan = models.get("lstm", shakespeare.VOCAB_SIZE, recurrence="scan")
    params = fused.init(jax.random.key(0), (80,))
    rng = np.random.default_rng(0)
    x, y = (jnp.asarray(rng.integers(3, shakespeare.OOV, (batch, 80)), jnp.int32)
            for _ in "xy")

    def loss(apply, p):
        return optax.softmax_cross_entropy_with_integer_labels(apply(p, x), y).mean()

    def local_steps(apply):
        @jax.jit
        def run(p):
            def body(p, _):
                g = jax.grad(functools.partial(loss, apply))(p)
                return jax.tree.map(lambda a, b: a - 0.1 * b, p, g), None
            return jax.lax.scan(body, p, None, length=steps)[0]
        return lambda: jax.block_until_ready(run(params))

    diff = float(jnp.max(jnp.abs(fused.apply(params, x) - scan.apply(params, x))))
    variants = {"scan: flax nn.RNN(OptimizedLSTMCell), JAX autodiff": local_steps(scan.apply),
                "scan, input projection hoisted": local_steps(hoisted_apply),
                "fused (the model's default)": local_steps(fused.apply)}
    torch_run = torch_steps(x, y, steps)
    if torch_run is not None:
        import torch
        variants[f"PyTorch {torch.__version__} nn.LSTM (oneDNN)"] = torch_run
    for run in variants.values():
        run()
    seconds = {name: [] for name in variants}
    for _ in range(repeats):
        for name, run in variants.items():
            t0 = time.perf_counter()
            run()
            seconds[name].append(time.perf_counter() - t0)
    base = np.median(seconds["scan: flax nn.RNN(OptimizedLSTMCell), JAX autodiff"])
    torch_s = [np.median(s) for n, s in seconds.items() if n.startswith("PyTorch")]
    print(f"\nB={batch} x 80 characters, K={steps} steps; the fused and scan logits differ by "
          f"at most {diff:.1e}\n")
    print("| LSTM local step form | ms per step | speed vs scan | speed vs PyTorch |\n"
          "|---|---|---|---|")
    for name, s in seconds.items():
        vs_torch = f"{torch_s[0] / np.median(s):.2f}x" if torch_s else "-"
        print(f"| {name} | {1e3 * np.median(s) / steps:.1f} | {base / np.median(s):.2f}x "
              f"| {vs_torch} |")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, nargs="+", default=[4, 10])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    for batch in args.batch:
        measure(batch, args.steps, args.repeats)


if __name__ == "__main__":
    main()
