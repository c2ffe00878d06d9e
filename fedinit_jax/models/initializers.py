"""The reference's (PyTorch's) initialisations, as flax initializers.

TORCH_DEFAULT: nn.Linear / nn.Conv2d default, kaiming_uniform(a=sqrt(5)), i.e. uniform with
bound 1/sqrt(fan_in). KAIMING_FAN_OUT: torchvision's ResNet/VGG convs, kaiming_normal(fan_out).
Biases start at zero (PyTorch draws them uniformly; a documented difference).
"""
import flax.linen as nn

__all__ = ["TORCH_DEFAULT", "KAIMING_FAN_OUT"]

TORCH_DEFAULT = nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")
KAIMING_FAN_OUT = nn.initializers.variance_scaling(2.0, "fan_out", "normal")
