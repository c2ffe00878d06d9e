"""What the round benchmarks share: the round inputs, the models with the library's CIFAR
statistics, round-robin timing, a matmul peak and XLA's memory account. Imported by
round_speed.py, lstm_speed.py, profile_ops.py and bernoulli_draw.py (each puts the repository
on sys.path)."""
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from fedinit_jax import RoundInput, losses, models
from fedinit_jax.experiment import round_memory
from fedinit_jax.experiment.tasks.images import CHANNEL_STATS

MEAN, STD = CHANNEL_STATS["cifar10"]  # the image benchmarks' rounds are CIFAR-10-shaped


def image_model(name, conv, width=1.0):
    """A 10-class image model (models.get), `width` its width multiplier (cnn, mlp)."""
    return models.get(name, 10, conv=conv, **({"width": width} if width != 1.0 else {}))


def image_loss(model):
    """The library's CIFAR-10 training loss of `model` (normalised, augmented)."""
    return losses.classification_loss(model.apply, MEAN, STD, augment=True)


def matmul_peak(n=2048, repeats=5):
    """GFLOP/s of an n^2 float32 matmul: the machine's reference in every table."""
    a = jnp.ones((n, n), jnp.float32)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    best = min(timed(lambda: f(a).block_until_ready()) for _ in range(repeats))
    return 2 * n ** 3 / best / 1e9


def timed(fn):
    """Seconds fn() took."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def time_round_robin(variants, repeats):
    """{name: median seconds of variant.step()}, one call of each in turn per repeat."""
    times = {name: [] for name in variants}
    for _ in range(repeats):
        for name, variant in variants.items():
            times[name].append(timed(variant.step))
    return {name: statistics.median(ts) for name, ts in times.items()}


def round_data(n, k, b, seed=0):
    """A round of n clients x k steps x batch b of 32x32x3 uint8 images (random: speed does
    not depend on the pixel values)."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (n, k, b, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, (n, k, b)).astype(np.int32)
    return RoundInput(np.arange(n, dtype=np.int32), (images, labels), np.float32(0.1))


def compiled_bytes(jitted, *args):
    """XLA's memory account of one compiled call per device (experiment.round_memory's
    peak), or None where unavailable; `jitted` is a jax.jit function or a
    FederatedAlgorithm (its `lower`)."""
    try:
        return round_memory(jitted.lower(*args).compile())["peak"]
    except Exception:  # some backends / versions do not report it
        return None


def mib(n):
    return "-" if n is None else f"{n / 2**20:.0f} MiB"


class Timed:
    """A library round ready to be timed: self.algo, self.state, self.inp; step() runs one."""

    def step(self):
        self.state, metrics = self.algo.apply(self.state, self.inp, jax.random.key(1))
        jax.block_until_ready((self.state.params, metrics))

    def first_round(self):
        """Compile and run the first round, timed (self.compile_seconds)."""
        t0 = time.perf_counter()
        self.step()
        self.compile_seconds = time.perf_counter() - t0
