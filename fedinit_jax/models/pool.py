"""2x2 / stride-2 max-pooling as a reshape and a max (same values as nn.max_pool).

XLA:CPU computes nn.max_pool's gradient with select-and-scatter, slowly; the gradient of a
reshape + max is a cheap mask (a faster CNN local step: benchmarks/RESULTS.md). Odd
trailing rows/columns are dropped, as 'VALID' pooling does. Where a window holds several
equal maxima the gradient is shared between them (after a ReLU these are zeros, whose
gradient the ReLU blocks anyway).
"""

__all__ = ["max_pool_2x2"]


def max_pool_2x2(x):
    """[B, H, W, C] -> [B, H // 2, W // 2, C], the max of each 2x2 window."""
    b, h, w, c = x.shape
    x = x[:, : h // 2 * 2, : w // 2 * 2]
    return x.reshape(b, h // 2, 2, w // 2, 2, c).max(axis=(2, 4))
