"""How the sampled clients of a round are executed: the same numbers, different schedules.

  vmap        all N clients at once (jax.vmap); fastest where grouped kernels are good (GPU).
  sequential  one client at a time (lax.map); flat memory in N. On XLA:CPU vmapped
              per-client convolutions become slow grouped convolutions (PERFORMANCE.md:
              ~3.5x slower than sequential for the CNN), so this is the CPU choice.
  chunked     chunk_size clients at a time (lax.map with batch_size=chunk_size).
"""
import jax
from jax import lax

STRATEGIES = ("vmap", "sequential", "chunked")


def resolve(execution: str) -> str:
    """'auto' -> 'sequential' on CPU (grouped convs are slow there), else 'vmap'."""
    if execution != "auto":
        return execution
    return "sequential" if jax.default_backend() == "cpu" else "vmap"


def check_strategy(execution: str, chunk_size) -> None:
    """ValueError unless `execution` names a strategy and chunk_size fits it."""
    if execution not in STRATEGIES:
        raise ValueError(f"execution={execution!r} is not a client execution strategy; "
                         f"allowed: {', '.join(STRATEGIES)}")
    if execution == "chunked" and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"chunk_size={chunk_size!r}: execution='chunked' needs an int >= 1")


def map_clients(fn, xs, execution: str = "vmap", chunk_size=None):
    """Apply fn (one client's pytree -> pytree) to every row of xs (leading client axis)."""
    if execution == "vmap":
        return jax.vmap(fn)(xs)
    if execution == "sequential":
        return lax.map(fn, xs)
    return lax.map(fn, xs, batch_size=chunk_size)
