"""Convolution formulations: XLA's stock convolution, or one whose weight gradient is matmuls.

XLA:CPU computes the convolution weight gradient pathologically slowly (2.5-5 GFLOP/s,
worse inside lax.scan; ../shared/PERFORMANCE.md). `fast_conv` is a drop-in for
`lax.conv_general_dilated` (NHWC/HWIO, no dilation, one group) with a custom VJP:

    dL/dW[i, j] = sum_{b, p, q} x_pad[b, s p + i, s q + j, :]^T  g[b, p, q, :]

computed as one matmul: the kh*kw shifted input windows are stacked along the channel axis
(im2col, kh*kw times the input's memory) and multiplied with the output cotangent (~9% faster
per CNN round here than one matmul per tap walked with lax.scan, the form PERFORMANCE.md
measured). For stride 1 the input gradient is a plain convolution of the cotangent with the
spatially flipped, in/out-transposed kernel, which XLA:CPU runs ~1.5x faster than its own
transposed convolution; other strides use XLA's. The forward is XLA's convolution (an im2col
forward measured slower). Forward values are identical; gradients match the stock ones to
float tolerance (tests/test_conv.py).

`conv_fn("auto")` picks `fast_conv` on CPU and the stock convolution elsewhere (cuDNN has
real weight-gradient kernels).
"""
import functools

import jax
import jax.numpy as jnp
from jax import lax

NHWC = ("NHWC", "HWIO", "NHWC")
IMPLEMENTATIONS = ("auto", "xla", "fast")


def _stock(x, w, strides, pads):
    return lax.conv_general_dilated(x, w, strides, pads, dimension_numbers=NHWC)


def _weight_grad(x, g, kernel_shape, strides, pads):
    """dL/dW as one [kh kw Cin, B Ho Wo] @ [B Ho Wo, Cout] matmul over the stacked taps."""
    kh, kw, cin, cout = kernel_shape
    sh, sw = strides
    _, out_h, out_w, _ = g.shape
    x_pad = jnp.pad(x, ((0, 0), pads[0], pads[1], (0, 0)))
    cols = [x_pad[:, i:i + (out_h - 1) * sh + 1:sh, j:j + (out_w - 1) * sw + 1:sw, :]
            for i in range(kh) for j in range(kw)]
    patches = jnp.stack(cols, axis=3).reshape(-1, kh * kw * cin)
    return (patches.T @ g.reshape(-1, cout)).reshape(kernel_shape)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _matmul_grad_conv(x, w, strides, pads):
    return _stock(x, w, strides, pads)


def _fwd(x, w, strides, pads):
    return _stock(x, w, strides, pads), (x, w)


def _input_grad(x, w, g, strides, pads):
    """dL/dx. Stride 1: a plain convolution of the cotangent with the spatially flipped,
    in/out-transposed kernel (XLA:CPU runs its own transposed convolution far slower);
    other strides: XLA's own transpose."""
    if tuple(strides) != (1, 1):
        _, input_vjp = jax.vjp(lambda x_: _stock(x_, w, strides, pads), x)
        return input_vjp(g)[0]
    kh, kw = w.shape[0], w.shape[1]
    flipped = jnp.swapaxes(w[::-1, ::-1], 2, 3)
    back_pads = ((kh - 1 - pads[0][0], kh - 1 - pads[0][1]),
                 (kw - 1 - pads[1][0], kw - 1 - pads[1][1]))
    return _stock(g, flipped, (1, 1), back_pads)


def _bwd(strides, pads, residuals, g):
    x, w = residuals
    dx = _input_grad(x, w, g, strides, pads).astype(x.dtype)
    return dx, _weight_grad(x, g, w.shape, strides, pads).astype(w.dtype)


_matmul_grad_conv.defvjp(_fwd, _bwd)


def fast_conv(lhs, rhs, window_strides, padding, lhs_dilation=None, rhs_dilation=None,
              dimension_numbers=None, feature_group_count=1, precision=None, **kwargs):
    """`lax.conv_general_dilated` with a matmul weight gradient; falls back to the stock
    convolution for dilations, groups or layouts other than NHWC/HWIO."""
    plain = (lhs.ndim == 4 and feature_group_count == 1 and not kwargs
             and all(d == 1 for d in (lhs_dilation or (1, 1)))
             and all(d == 1 for d in (rhs_dilation or (1, 1)))
             and (dimension_numbers is None or dimension_numbers
                  == lax.conv_dimension_numbers(lhs.shape, rhs.shape, NHWC)))
    if not plain:
        return lax.conv_general_dilated(
            lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers,
            feature_group_count, precision=precision, **kwargs)
    if isinstance(padding, str):
        padding = lax.padtype_to_pads(lhs.shape[1:3], rhs.shape[:2], window_strides, padding)
    pads = tuple(tuple(int(p) for p in pair) for pair in padding)
    return _matmul_grad_conv(lhs, rhs, tuple(window_strides), pads)


def conv_fn(implementation: str = "auto"):
    """The conv function for flax's nn.Conv(conv_general_dilated=...): None = stock."""
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"conv={implementation!r} is not a convolution implementation; "
                         f"allowed: {', '.join(IMPLEMENTATIONS)}")
    if implementation == "auto":
        implementation = "fast" if jax.default_backend() == "cpu" else "xla"
    return fast_conv if implementation == "fast" else None
