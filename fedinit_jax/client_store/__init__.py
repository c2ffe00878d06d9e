"""Where the per-client state lives: a ClientStore gathers the cohort's rows before a round
and scatters the new ones after; the round (apply_cohort) reads and writes nothing
else, so it costs what its N sampled clients cost, whatever the federation's size C.

    store = client_store.HostStore(algo, params, num_clients=1_000_000)
    state = client_store.server_state(algo, params)          # FedState without client tables
    for t in range(rounds):
        state, metrics = client_store.run_round(algo, state, store, round_input, key)
    delta = store.divergence_all(state.params)               # streams every row: eval rounds

A row is one client's RI row (its last local model w_i under Algorithm 1's rule, its
offset under an offset rule: FedState.ri_rows) and its correction state (SCAFFOLD's c_i,
FedDyn's h_i), in the runtime's storage dtype. Three places to keep them:

  DeviceStore  the [C, ...] tables of FedState on the device, gathered and scattered with
               jitted .at[ids] (what algo.apply does inside its round), when they fit.
  HostStore    numpy rows in host memory, for federations larger than the device.
  DiskStore    a zarr array on disk (tensorstore), one chunk per client row.

HostStore and DiskStore are lazily materialised: a client never sampled has no row and
reads as its initial one (the offset rule's first row, w^0 under Algorithm 1's, and the
correction's init state: Algorithm 1 line 1), so
their memory grows with the clients ever sampled, not with C, and creating one costs
nothing at any C. Every store gives the rounds of FedState's tables bit for bit
(tests/test_client_store.py); Delta^t of a lazy store is summed exactly in float64, the
tables' in float32 (they agree to ~1e-6 relative).

A quantity over all C is never computed inside a round: SCAFFOLD's c and FedDyn's mean_C(h_i)
move by the cohort's changes (their server states), and the paper's Delta^t =
(1/C) sum_C ||w_i - w||^2 is `divergence_all`, streamed over the rows in chunks (the rows
never sampled add (C - M) ||w^0 - w||^2 at once).
"""
import jax
import numpy as np

from fedinit_jax.builder import apply_cohort, as_arrays
from fedinit_jax.checks import check_inputs
from fedinit_jax.client_store.contract import Checkpointed, ClientStore, SharedStore, implements
from fedinit_jax.client_store.device import DeviceStore
from fedinit_jax.client_store.disk import DiskStore
from fedinit_jax.client_store.host import HostStore
from fedinit_jax.client_store.processes import run_round_processes
from fedinit_jax.client_store.rows import LazyStore, initial_row
from fedinit_jax.types import FederatedAlgorithm, FedState, RoundInput

__all__ = ["ClientStore", "Checkpointed", "SharedStore", "implements", "DeviceStore", "HostStore", "DiskStore",
           "LazyStore", "STORES", "open_store", "server_state", "initial_row", "run_round"]


# name -> the store's class; each takes open(algo, params, num_clients, folder)
STORES = {"device": DeviceStore, "host": HostStore, "disk": DiskStore}


def open_store(name: str, algo: FederatedAlgorithm, params, num_clients: int, folder: str):
    """The registered store `name` for C = num_clients, its files (if any) under folder."""
    return STORES[name].open(algo, params, num_clients, folder)


def server_state(algo: FederatedAlgorithm, params) -> FedState:
    """algo.init's state without the [C, ...] client tables (None): what apply_cohort takes
    when a ClientStore holds the clients."""
    shapes = algo.init(params, 1)
    return shapes._replace(ri_rows=None, client_state=None, client_visited=None)


def run_round(algo: FederatedAlgorithm, state: FedState, client_rows, round_input: RoundInput,
              key):
    """One round on a federation held in `client_rows` (a ClientStore): check the round
    input on the host (checks.check_inputs: ids in range and distinct, a non-empty cohort,
    [N, K, B] batches, ...), gather the sampled clients' rows, apply_cohort, scatter the
    real clients' new rows. Returns (state, metrics).

    In a multi-process run (every process calls it with the same inputs) each process
    gathers and scatters the rows of its own slots only (those its devices hold), which
    needs a DiskStore on a folder every process reads: process 0 journals the round's ids
    before any row is written and marks them present, and the round ends when every
    process has written its rows."""
    if not isinstance(state, FedState) or not implements(client_rows, ClientStore):
        raise ValueError(f"run_round(algo, state, client_rows, round_input, key): state must be "
                         f"a FedState (client_store.server_state), got {type(state).__name__}; "
                         f"client_rows a ClientStore, got {type(client_rows).__name__}")
    check_inputs(round_input, client_rows.num_clients, algo.runtime.num_devices or 1)
    round_input = as_arrays(round_input)
    ids = np.asarray(round_input.client_ids)
    real = (np.ones(ids.size, bool) if round_input.mask is None
            else np.asarray(round_input.mask))
    # a padded slot's id means nothing: it reads some real client's row and writes nothing
    read = np.where(real, ids, ids[real][0])
    if jax.process_count() > 1:
        return run_round_processes(algo, state, client_rows, round_input, key, ids, real, read)
    cohort = client_rows.gather(read)
    state, new_cohort, metrics = apply_cohort(algo, state, cohort, round_input, key,
                                                   client_rows.num_clients)
    kept = np.flatnonzero(real)
    client_rows.scatter(ids[kept], jax.tree.map(lambda x: x[kept], new_cohort))
    return state, metrics


