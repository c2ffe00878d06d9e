"""The Shakespeare LSTM's local steps in several forms, side by side:
the model's two recurrences (models/lstm.py: `scan`, flax's nn.RNN(OptimizedLSTMCell)
differentiated by JAX; `fused`, the hand-written backward with the weight gradients as one
GEMM over all positions), the scan form with only its input projection hoisted out of the
time loop, the fused form as a wavefront over the two layers (one loop of T + 1 iterations,
layer 1 at t beside layer 2 at t - 1, forward and backward: half the loop iterations), and
PyTorch's nn.LSTM (oneDNN) when torch is installed. One client, K SGD steps
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
from fedinit_jax.models.lstm import _shift, cell_weights  # noqa: E402


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


def _cell(z, c):
    """One LSTM cell step from the pre-activation z: (h, c, activated gates)."""
    i, f, g, o = jnp.split(z, 4, -1)
    i, f, g, o = jax.nn.sigmoid(i), jax.nn.sigmoid(f), jnp.tanh(g), jax.nn.sigmoid(o)
    c = f * c + i * g
    return o * jnp.tanh(c), c, jnp.concatenate([i, f, g, o], -1)


def _dz(dh, dc_next, gate, tanh_c, c_prev):
    """A cell step's backward (models/lstm.py _backward): dL/dz and dL/dc_{t-1}."""
    i, f, g, o = jnp.split(gate, 4, -1)
    dc = dc_next + dh * o * (1 - tanh_c * tanh_c)
    return jnp.concatenate([dc * g * i * (1 - i), dc * c_prev * f * (1 - f),
                            dc * i * (1 - g * g), dh * tanh_c * o * (1 - o)], -1), dc * f


def _wavefront_forward(ws, xs):
    """Iteration k runs layer 1 at t = k and layer 2 at t = k - 1 (zero state at k = 0)."""
    (wx0, wh0, b0), (wx1, wh1, b1) = ws
    proj = jnp.einsum("tbi,ig->tbg", xs, wx0) + b0
    proj = jnp.concatenate([proj, jnp.zeros_like(proj[:1])])

    def step(carry, inputs):
        h0, c0, h1, c1 = carry
        proj_k, k = inputs
        n0 = _cell(proj_k + h0 @ wh0, c0)
        n1 = _cell(h0 @ wx1 + h1 @ wh1 + b1, c1)
        started = (k >= 1).astype(xs.dtype)
        return (n0[0], n0[1], n1[0] * started, n1[1] * started), (*n0, *n1)

    zero = jnp.zeros((xs.shape[1], wh0.shape[0]), xs.dtype)
    out = jax.lax.scan(step, (zero,) * 4, (proj, jnp.arange(len(proj))))[1]
    return [a[:-1] for a in out[:3]], [a[1:] for a in out[3:]]


@jax.custom_vjp
def wavefront_layers(ws, xs):
    """The two LSTM layers (time-major) as one wavefront loop: the same values as two fused
    layers, forward and backward (`measure` prints the largest gradient difference)."""
    return _wavefront_forward(ws, xs)[1][0]


def _wavefront_fwd(ws, xs):
    first, second = _wavefront_forward(ws, xs)
    return second[0], (ws, xs, first, second)


def _wavefront_bwd(saved, dhs):
    """Reverse iteration k: layer 2 at t = k - 1, layer 1 at t = k (it needs layer 2's dz_t
    from the iteration before); then every weight gradient as one GEMM over all positions."""
    ((wx0, wh0, _), (wx1, wh1, _)), xs, (h0, c0, g0), (h1, c1, g1) = saved
    after = lambda a: jnp.concatenate([a, jnp.zeros_like(a[:1])])    # noqa: E731
    before = lambda a: jnp.concatenate([jnp.zeros_like(a[:1]), a])   # noqa: E731

    def step(carry, inputs):
        dz0_next, dc0, dz1_next, dc1 = carry
        (gate0, tanh_c0, c0_prev), (gate1, tanh_c1, c1_prev, dh1_out) = inputs
        dz1, dc1 = _dz(dh1_out + dz1_next @ wh1.T, dc1, gate1, tanh_c1, c1_prev)
        dz0, dc0 = _dz(dz0_next @ wh0.T + dz1_next @ wx1.T, dc0, gate0, tanh_c0, c0_prev)
        return (dz0, dc0, dz1, dc1), (dz0, dz1)

    zero, zero4 = jnp.zeros_like(dhs[0]), jnp.zeros_like(g0[0])
    inputs = ((after(g0), after(jnp.tanh(c0)), after(_shift(c0))),
              (before(g1), before(jnp.tanh(c1)), before(_shift(c1)), before(dhs)))
    dz0, dz1 = jax.lax.scan(step, (zero4, zero, zero4, zero), inputs, reverse=True)[1]
    dz0, dz1 = dz0[:-1], dz1[1:]
    grads = [(jnp.einsum("tbi,tbg->ig", x, dz), jnp.einsum("tbh,tbg->hg", _shift(h), dz),
              jnp.sum(dz, (0, 1))) for x, h, dz in ((xs, h0, dz0), (h0, h1, dz1))]
    return grads, jnp.einsum("tbg,ig->tbi", dz0, wx0)


wavefront_layers.defvjp(_wavefront_fwd, _wavefront_bwd)


def wavefront_apply(params, tokens):
    h = jnp.swapaxes(params["Embed_0"]["embedding"][tokens], 0, 1)
    ws = [cell_weights(params[f"OptimizedLSTMCell_{layer}"]) for layer in range(2)]
    h = jnp.swapaxes(wavefront_layers(ws, h), 0, 1)
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
    grads = [jax.grad(functools.partial(loss, apply))(params)
             for apply in (fused.apply, wavefront_apply)]
    wave_diff = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(*map(jax.tree.leaves, grads)))
    variants = {"scan: flax nn.RNN(OptimizedLSTMCell), JAX autodiff": local_steps(scan.apply),
                "scan, input projection hoisted": local_steps(hoisted_apply),
                "fused (the model's default)": local_steps(fused.apply),
                "fused, wavefront over the 2 layers": local_steps(wavefront_apply)}
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
          f"at most {diff:.1e}, the fused and wavefront gradients by {wave_diff:.1e}\n")
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
