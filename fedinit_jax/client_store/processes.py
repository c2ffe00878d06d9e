"""A round whose cohort's slots are split over several processes' devices: each process
gathers and scatters the rows of its own slots from a SharedStore (a DiskStore) every
process reads."""
import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from fedinit_jax import execution
from fedinit_jax.builder import apply_cohort
from fedinit_jax.client_store.contract import SharedStore, implements

__all__ = ["run_round_processes"]


def run_round_processes(algo, state, client_rows, round_input, key, ids, real, read):
    """run_round when the cohort's slots are split over several processes' devices."""
    from jax.experimental import multihost_utils

    if not implements(client_rows, SharedStore):
        raise ValueError(f"a multi-process run keeps its clients in a SharedStore (DiskStore) "
                         f"on a folder every process reads, not a "
                         f"{type(client_rows).__name__}: a client's row must be readable by "
                         "whichever process is dealt it")
    sharding = NamedSharding(execution.client_mesh(algo.runtime.num_devices),
                             PartitionSpec("clients"))
    n = ids.size
    mine = np.unique(np.concatenate([np.arange(n)[index[0]] for index in
                                     sharding.addressable_devices_indices_map((n,)).values()]))
    at = np.full(n, -1)
    at[mine] = np.arange(mine.size)
    local = jax.tree.map(np.asarray, client_rows.gather(read[mine]))
    cohort = jax.tree.map(lambda x: jax.make_array_from_callback(
        (n, *x.shape[1:]), sharding, lambda index: x[at[np.arange(n)[index[0]]]]), local)
    client_rows.journal(ids[real])  # before the round's collectives, so before any write
    state, new_cohort, metrics = apply_cohort(algo, state, cohort, round_input, key,
                                                   client_rows.num_clients)
    kept = real[mine]
    client_rows.write_rows(ids[mine][kept], jax.tree.map(
        lambda x: _local_rows(x, at, mine.size)[kept], new_cohort))
    if jax.process_index() == 0:  # every process has gathered: the round's collectives ran
        client_rows.mark_present(ids[real])
    multihost_utils.sync_global_devices("fedinit_jax: the cohort's rows are written")
    return state, metrics


def _local_rows(x, at, count) -> np.ndarray:
    """This process's `count` rows of a [N, ...] array split over the devices, from its own
    shards: slot s is row at[s]."""
    out = np.empty((count, *x.shape[1:]), x.dtype)
    for shard in x.addressable_shards:
        held = np.arange(x.shape[0])[shard.index[0]]
        out[at[held]] = np.asarray(shard.data)
    return out


