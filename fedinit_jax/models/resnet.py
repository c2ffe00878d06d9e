"""ResNet-18 with GroupNorm, as in the authors' code (torchvision resnet18, BatchNorm -> GroupNorm).

`resnet18_gn` keeps torchvision's ImageNet stem on 32x32 inputs (7x7/2 conv, 3x3/2 max-pool):
11,181,642 parameters for 10 classes; the paper's numbers come from this model.
`resnet18_gn_cifar` uses the CIFAR stem (3x3/1 conv, no max-pool) with the same blocks.
Every norm is GroupNorm(2 groups); convs are Kaiming-normal (fan-out) like torchvision.
"""
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from fedinit_jax.models.initializers import KAIMING_FAN_OUT, TORCH_DEFAULT

__all__ = ["BasicBlock", "ResNet18GN"]


def _conv(conv, features, kernel, stride=1, padding=0):
    return nn.Conv(features, (kernel, kernel), strides=(stride, stride),
                   padding=((padding, padding), (padding, padding)), use_bias=False,
                   kernel_init=KAIMING_FAN_OUT, conv_general_dilated=conv)


def _norm():
    return nn.GroupNorm(num_groups=2, epsilon=1e-5)


class BasicBlock(nn.Module):
    features: int
    stride: int = 1
    conv: Callable[..., Any] | None = None

    @nn.compact
    def __call__(self, x):
        y = nn.relu(_norm()(_conv(self.conv, self.features, 3, self.stride, 1)(x)))
        y = _norm()(_conv(self.conv, self.features, 3, 1, 1)(y))
        if self.stride != 1 or x.shape[-1] != self.features:
            x = _norm()(_conv(self.conv, self.features, 1, self.stride, 0)(x))
        return nn.relu(x + y)


class ResNet18GN(nn.Module):
    num_classes: int = 10
    imagenet_stem: bool = True
    conv: Callable[..., Any] | None = None  # None: lax.conv_general_dilated

    @nn.compact
    def __call__(self, x):
        if self.imagenet_stem:
            x = nn.relu(_norm()(_conv(self.conv, 64, 7, 2, 3)(x)))
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
        else:
            x = nn.relu(_norm()(_conv(self.conv, 64, 3, 1, 1)(x)))
        for stage, features in enumerate((64, 128, 256, 512)):
            for block in range(2):
                x = BasicBlock(features, 2 if stage > 0 and block == 0 else 1, self.conv)(x)
        x = jnp.mean(x, axis=(1, 2))
        return nn.Dense(self.num_classes, kernel_init=TORCH_DEFAULT)(x)
