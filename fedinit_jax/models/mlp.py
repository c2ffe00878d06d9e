"""A small MLP (flatten - fc - relu - fc - relu - fc), for the embedded 8x8 digits dataset."""
import flax.linen as nn

from fedinit_jax.models.initializers import TORCH_DEFAULT


class MLP(nn.Module):
    num_classes: int = 10
    width: float = 1.0

    @nn.compact
    def __call__(self, x):
        x = x.reshape(x.shape[0], -1)
        for _ in range(2):
            x = nn.relu(nn.Dense(max(1, int(128 * self.width)), kernel_init=TORCH_DEFAULT)(x))
        return nn.Dense(self.num_classes, kernel_init=TORCH_DEFAULT)(x)
