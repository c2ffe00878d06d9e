"""Convolution formulations: XLA's stock convolution, or ones that run as matmuls on CPU.

`im2col_conv` ("im2col") is every convolution as one GEMM over an im2col view:

    y[b, p, q, :] = concat_{i, j} x_pad[b, s p + i, s q + j, :]  @  W.reshape(kh kw Cin, Cout)

(a pad, kh*kw strided slices concatenated along the channels, one dot), differentiated by
plain autodiff: both gradients are GEMMs plus the slices' transposes, and no XLA convolution
is left in the program. XLA:CPU runs its own convolutions far below matmul speed at small
spatial sizes with many channels (ResNet-18's 2x2 and 1x1 stages) and their weight gradients
inside `lax.scan` (docs/performance.md has the profile). Cost: kh*kw times the input's memory
per conv for the patches.

`fast_conv` ("fast") keeps XLA's forward convolution and replaces only the gradients, with
a custom VJP: the weight gradient as one matmul over the stacked taps,

    dL/dW[i, j] = sum_{b, p, q} x_pad[b, s p + i, s q + j, :]^T  g[b, p, q, :],

and for stride 1 the input gradient as a plain convolution of the cotangent with the
spatially flipped, in/out-transposed kernel (other strides: XLA's transpose).

Forward values agree with the stock convolution to float rounding and both gradients to float
tolerance (tests/test_conv.py, including the whole ResNet-18-GN against float64).
`conv_fn("auto", execution)` depends on the backend and on how the clients are executed
(fedinit_jax/execution.py). On GPU, vmapped (or chunked) clients get `im2col_conv`: under
vmap every client has its own kernel, so XLA's convolution becomes a grouped convolution,
while an im2col GEMM becomes a batched GEMM (one H200, 10 clients x 50 steps x batch 50, a
round 2.46x faster for ResNet-18-GN, 2.18x for VGG-11, 1.15x for the CNN; benchmarks/
RESULTS.md); sequential clients keep the stock convolution (there im2col was 1.01x slower
for ResNet-18-GN and 3.9x for the CNN). On TPU the stock convolution (not measured). On CPU
`cpu_conv`, whatever the execution: per convolution, `fast_conv` when the output has >=
FAST_MIN_POSITIONS spatial positions (XLA's forward is faster than a GEMM over patches kh*kw times the input's size
that no longer stay in cache: the CNN's 28x28 and 10x10 outputs, ResNet's 16x16 stem) and
`im2col_conv` below (ResNet's 8x8 .. 1x1 stages, where XLA's forward is slow too).
"""
import functools

import jax
import jax.numpy as jnp
from jax import lax

from fedinit_jax.execution import resolve as resolve_execution

__all__ = ["NHWC", "IMPLEMENTATIONS", "FAST_MIN_POSITIONS", "fast_conv", "im2col_conv",
           "cpu_conv", "conv_fn"]

NHWC = ("NHWC", "HWIO", "NHWC")
IMPLEMENTATIONS = ("auto", "xla", "fast", "im2col")
FAST_MIN_POSITIONS = 100  # cpu_conv: output positions (H x W) from which fast_conv is used


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
    if not _is_plain(lhs, rhs, lhs_dilation, rhs_dilation, dimension_numbers,
                     feature_group_count, kwargs):
        return lax.conv_general_dilated(
            lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers,
            feature_group_count, precision=precision, **kwargs)
    return _matmul_grad_conv(lhs, rhs, tuple(window_strides),
                             _pads(lhs, rhs, window_strides, padding))


def _is_plain(lhs, rhs, lhs_dilation, rhs_dilation, dimension_numbers, feature_group_count,
              kwargs):
    """NHWC/HWIO, no dilation, one group: the case the matmul formulations handle."""
    return (lhs.ndim == 4 and feature_group_count == 1 and not kwargs
            and all(d == 1 for d in (lhs_dilation or (1, 1)))
            and all(d == 1 for d in (rhs_dilation or (1, 1)))
            and (dimension_numbers is None or dimension_numbers
                 == lax.conv_dimension_numbers(lhs.shape, rhs.shape, NHWC)))


def _pads(lhs, rhs, window_strides, padding):
    if isinstance(padding, str):
        padding = lax.padtype_to_pads(lhs.shape[1:3], rhs.shape[:2], window_strides, padding)
    return tuple(tuple(int(p) for p in pair) for pair in padding)


def _output_size(lhs, rhs, window_strides, pads):
    """(H_out, W_out) of an NHWC/HWIO convolution with explicit pads."""
    (top, bottom), (left, right) = pads
    return ((lhs.shape[1] + top + bottom - rhs.shape[0]) // window_strides[0] + 1,
            (lhs.shape[2] + left + right - rhs.shape[1]) // window_strides[1] + 1)


def im2col_conv(lhs, rhs, window_strides, padding, lhs_dilation=None, rhs_dilation=None,
                dimension_numbers=None, feature_group_count=1, precision=None, **kwargs):
    """`lax.conv_general_dilated` as one GEMM over an im2col view (module docstring); falls
    back to the stock convolution for dilations, groups or layouts other than NHWC/HWIO."""
    if not _is_plain(lhs, rhs, lhs_dilation, rhs_dilation, dimension_numbers,
                     feature_group_count, kwargs):
        return lax.conv_general_dilated(
            lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers,
            feature_group_count, precision=precision, **kwargs)
    pads = _pads(lhs, rhs, window_strides, padding)
    kh, kw, cin, cout = rhs.shape
    sh, sw = window_strides
    out_h, out_w = _output_size(lhs, rhs, window_strides, pads)
    x = lhs
    if any(p for pair in pads for p in pair):
        x = jnp.pad(lhs, ((0, 0), *pads, (0, 0)))
    cols = [x[:, i:i + (out_h - 1) * sh + 1:sh, j:j + (out_w - 1) * sw + 1:sw, :]
            for i in range(kh) for j in range(kw)]
    patches = cols[0] if len(cols) == 1 else jnp.concatenate(cols, axis=-1)
    # a plain 2-D GEMM (measured faster on XLA:CPU than a dot over the 4-D patches)
    y = jnp.matmul(patches.reshape(-1, kh * kw * cin), rhs.reshape(kh * kw * cin, cout),
                   precision=precision)
    return y.reshape(lhs.shape[0], out_h, out_w, cout)


def cpu_conv(lhs, rhs, window_strides, padding, *args, **kwargs):
    """`fast_conv` for outputs of >= FAST_MIN_POSITIONS positions, else `im2col_conv`."""
    out_h, out_w = _output_size(lhs, rhs, window_strides,
                                _pads(lhs, rhs, window_strides, padding))
    conv = fast_conv if out_h * out_w >= FAST_MIN_POSITIONS else im2col_conv
    return conv(lhs, rhs, window_strides, padding, *args, **kwargs)


def conv_fn(implementation: str = "auto", execution: str = "auto"):
    """The conv function for flax's nn.Conv(conv_general_dilated=...).

    Args:
      implementation: one of IMPLEMENTATIONS; 'auto' picks by backend and execution (the
        module docstring gives the rule and its measurements).
      execution: how the clients running the model are executed ('auto', 'vmap',
        'sequential' or 'chunked'; execution.resolve); read only by 'auto'.

    Returns:
      The function, or None for XLA's stock convolution.
    """
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"conv={implementation!r} is not a convolution implementation; "
                         f"allowed: {', '.join(IMPLEMENTATIONS)}")
    if implementation == "auto":
        backend = jax.default_backend()
        if backend == "cpu":
            return cpu_conv
        if backend == "gpu" and resolve_execution(execution) != "sequential":
            return im2col_conv
        return None
    return {"xla": None, "fast": fast_conv, "im2col": im2col_conv}[implementation]
