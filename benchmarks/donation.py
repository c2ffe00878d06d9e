"""The README API loop at C = 10^3 and 10^6: a FedInit round on the [C, ...] tables with and
without donating the state (fedinit_jax.with_runtime(algo, donate_state=True)), side by side in
one run; median of 10 rounds after 2 compiling ones.

    JAX_PLATFORMS=cpu python benchmarks/donation.py
"""
import time

import jax
import jax.numpy as jnp
import numpy as np

import fedinit_jax
from fedinit_jax import algorithms


def loss_fn(params, batch, key):
    x, y = batch
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)


def main():
    for num_clients in (1000, 1_000_000):
        for donate in (False, True):
            params = {"w": jnp.zeros(4), "b": jnp.zeros(())}
            algo = fedinit_jax.with_runtime(
                algorithms.fedinit(loss_fn, beta=0.1, weight_decay=0.0, clip_norm=None),
                donate_state=donate)
            state = algo.init(params, num_clients=num_clients)
            rng = np.random.default_rng(0)
            times = []
            for t in range(12):
                ids = np.sort(rng.choice(num_clients, 3, replace=False)).astype(np.int32)
                x = rng.normal(size=(3, 5, 8, 4)).astype(np.float32)
                round_input = fedinit_jax.RoundInput(ids, (x, x[..., 0]), 0.05)
                t0 = time.perf_counter()
                state, _ = algo.apply(state, round_input, jax.random.key(t))
                jax.block_until_ready(state)
                times.append(time.perf_counter() - t0)
            print(f"C={num_clients:,} donate_state={donate}: "
                  f"{1e3 * np.median(times[2:]):.2f} ms a round")


if __name__ == "__main__":
    main()
