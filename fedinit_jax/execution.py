"""How the sampled clients of a round are executed: the same numbers, different schedules.

  vmap        all N clients at once (jax.vmap); fastest where grouped kernels are good (GPU).
  sequential  one client at a time (lax.map); flat memory in N. On XLA:CPU vmapped
              per-client convolutions become slow grouped convolutions
              (docs/performance.md), so this is the CPU choice.
  chunked     chunk_size clients at a time (lax.map with batch_size=chunk_size).

Across devices: with a mesh, the client axis is split over its "clients" axis with
jax.shard_map, each device running its share of clients with the strategy above; the
aggregation that follows stays a mean over the (now sharded) client axis. On CPU, start JAX
with XLA_FLAGS=--xla_force_host_platform_device_count=2 to get one XLA device per core;
the same code runs on a GPU node or, after jax.distributed.initialize(), across hosts.
"""
import jax
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec

from fedinit_jax.checks import check_choice, check_number

__all__ = ["STRATEGIES", "resolve", "check_strategy", "client_mesh", "map_clients"]

STRATEGIES = ("vmap", "sequential", "chunked")


def resolve(execution: str) -> str:
    """'auto' -> 'sequential' on CPU (grouped convs are slow there), else 'vmap'."""
    if execution != "auto":
        return execution
    return "sequential" if jax.default_backend() == "cpu" else "vmap"


def check_strategy(execution: str, chunk_size) -> None:
    """ValueError unless `execution` names a strategy and chunk_size fits it."""
    check_choice("execution", execution, STRATEGIES)
    if execution == "chunked":
        check_number("chunk_size", chunk_size, 1, integer=True)
    elif chunk_size is not None:
        raise ValueError(f"chunk_size={chunk_size!r}: only execution='chunked' takes a chunk "
                         f"size (execution={execution!r}); leave it None")


def client_mesh(num_devices):
    """A 1-D "clients" mesh over the first num_devices devices (None: no sharding)."""
    if num_devices is None or num_devices == 1:
        return None
    devices = jax.devices()
    if not isinstance(num_devices, int) or not 1 <= num_devices <= len(devices):
        raise ValueError(f"num_devices={num_devices!r} must be an int in [1, {len(devices)}] "
                         f"(the {jax.default_backend()} devices here)")
    return Mesh(np.array(devices[:num_devices]), ("clients",))


def _map_local(fn, xs, execution, chunk_size):
    if execution == "vmap":
        return jax.vmap(fn)(xs)
    if execution == "sequential":
        return lax.map(fn, xs)
    return lax.map(fn, xs, batch_size=chunk_size)


def map_clients(fn, xs, execution: str = "vmap", chunk_size=None, mesh=None):
    """Apply fn (one client's pytree -> pytree) to every row of xs (leading client axis),
    split over the mesh's devices when a mesh is given."""
    if mesh is None:
        return _map_local(fn, xs, execution, chunk_size)
    spec = PartitionSpec("clients")
    return jax.shard_map(lambda local: _map_local(fn, local, execution, chunk_size),
                         mesh=mesh, in_specs=spec, out_specs=spec)(xs)
