"""Matrix-multiply and convolution FLOPs of a jaxpr, independent of the backend.

XLA's `cost_analysis()` counts what its own compiler emits: on GPU a cuDNN convolution or a
cuBLAS matmul is a custom call it does not count (an H200 round of ResNet-18-GN was reported
at 62 GFLOP/s where the jaxpr holds ~11 TFLOP/s of work), so the count here is read from the
program before lowering:

    dot_general:  2 * prod(out.shape) * prod(lhs contracting dims)
    conv:         2 * prod(out.shape) * prod(kernel.shape) / kernel's output features

Inner jaxprs count too: a scan body times its length, the larger branch of a cond, a
shard_map body once per device of its mesh, any other (pjit, custom_vjp, while) once.
Elementwise work is not counted.
"""
import math

import jax
from jax.extend import core

__all__ = ["matmul_flops"]


def matmul_flops(jaxpr) -> float:
    """dot_general and convolution FLOPs of a jaxpr (a `jax.make_jaxpr(f)(...).jaxpr`).

    Args:
      jaxpr: a Jaxpr or ClosedJaxpr.

    Returns:
      The FLOPs, 2 per multiply-add, inner jaxprs included as the module docstring says.
    """
    jaxpr = jaxpr.jaxpr if isinstance(jaxpr, core.ClosedJaxpr) else jaxpr
    total = 0.0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "dot_general":
            (contract, _), _ = eqn.params["dimension_numbers"]
            lhs = eqn.invars[0].aval.shape
            total += 2.0 * math.prod(eqn.outvars[0].aval.shape) * math.prod(
                lhs[d] for d in contract)
        elif name == "conv_general_dilated":
            rhs = eqn.invars[1].aval.shape
            out_feature = eqn.params["dimension_numbers"].rhs_spec[0]
            total += 2.0 * math.prod(eqn.outvars[0].aval.shape) * math.prod(rhs) / rhs[out_feature]
        inner = [v for v in jax.tree.leaves(eqn.params, is_leaf=lambda x: isinstance(
            x, (core.Jaxpr, core.ClosedJaxpr))) if isinstance(v, (core.Jaxpr, core.ClosedJaxpr))]
        if not inner:
            continue
        counts = [matmul_flops(j) for j in inner]
        if name == "cond":
            total += max(counts)
        elif name == "scan":
            total += eqn.params["length"] * sum(counts)
        elif name == "shard_map":
            total += eqn.params["mesh"].size * sum(counts)
        else:
            total += sum(counts)
    return total
