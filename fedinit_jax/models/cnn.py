"""The authors' small CIFAR CNN (FL-Simulator's `CNN`), 797,962 parameters for 10 classes.

conv5x5(64, valid)-relu-maxpool2 - conv5x5(64, valid)-relu-maxpool2 - fc384-relu - fc192-relu -
fc(classes). PyTorch-default initialisation (uniform, bound 1/sqrt(fan_in)) as the reference.
`width` scales every hidden size (a smaller documented variant for CPU studies). `dtype`, if
given, is the computation's (flax's convention: parameters stay float32; logits are returned in
float32); bfloat16 measured slower than float32 on this AVX-512/AMX CPU
(benchmarks/conv_dtype.py, benchmarks/RESULTS.md).
"""
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from fedinit_jax.models.initializers import TORCH_DEFAULT
from fedinit_jax.models.pool import max_pool_2x2

__all__ = ["CNN"]


class CNN(nn.Module):
    num_classes: int = 10
    width: float = 1.0
    conv: Callable[..., Any] | None = None  # None: lax.conv_general_dilated
    dtype: Any = None  # the computation's dtype; None: the inputs' and parameters' (flax)

    @nn.compact
    def __call__(self, x):
        c = max(1, int(64 * self.width))
        for _ in range(2):
            x = nn.Conv(c, (5, 5), padding="VALID", kernel_init=TORCH_DEFAULT, dtype=self.dtype,
                        conv_general_dilated=self.conv)(x)
            x = max_pool_2x2(nn.relu(x))
        x = x.reshape(x.shape[0], -1)
        for features in (int(384 * self.width), int(192 * self.width)):
            x = nn.relu(nn.Dense(max(1, features), kernel_init=TORCH_DEFAULT, dtype=self.dtype)(x))
        logits = nn.Dense(self.num_classes, kernel_init=TORCH_DEFAULT, dtype=self.dtype)(x)
        return logits if self.dtype is None else logits.astype(jnp.float32)
