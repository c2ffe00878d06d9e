"""VGG-11 for 32x32 inputs, the common FL variant (as in FedNova / FedMA code bases).

Features: conv3x3 [64, M, 128, M, 256, 256, M, 512, 512, M, 512, 512, M], ReLU, no
normalisation (no BatchNorm anywhere in this library); classifier 512-512-512-classes with
ReLU. The reference's dropout layers are left out so that params are the only state and a
round is deterministic given its key. 9,750,922 parameters for 10 classes.
"""
from collections.abc import Callable
from typing import Any

import flax.linen as nn

from fedinit_jax.models.initializers import KAIMING_FAN_OUT, TORCH_DEFAULT
from fedinit_jax.models.pool import max_pool_2x2

__all__ = ["VGG11", "VGG11Net"]

VGG11 = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


class VGG11Net(nn.Module):
    num_classes: int = 10
    conv: Callable[..., Any] | None = None  # None: lax.conv_general_dilated

    @nn.compact
    def __call__(self, x):
        for layer in VGG11:
            if layer == "M":
                x = max_pool_2x2(x)
            else:
                x = nn.relu(nn.Conv(layer, (3, 3), padding=((1, 1), (1, 1)),
                                    kernel_init=KAIMING_FAN_OUT, conv_general_dilated=self.conv)(x))
        x = x.reshape(x.shape[0], -1)
        for _ in range(2):
            x = nn.relu(nn.Dense(512, kernel_init=TORCH_DEFAULT)(x))
        return nn.Dense(self.num_classes, kernel_init=TORCH_DEFAULT)(x)
