"""Where the per-client state lives: a ClientStore gathers the cohort's rows before a round
and scatters the new ones after; the round (algo.apply_cohort) reads and writes nothing else,
so it costs what its N sampled clients cost, whatever the federation's size C.

    store = client_store.HostStore(algo, params, num_clients=1_000_000)
    state = client_store.server_state(algo, params)          # FedState without client tables
    for t in range(rounds):
        state, metrics = client_store.run_round(algo, state, store, round_input, key)
    delta = store.divergence_all(state.params)               # streams every row: eval rounds

A row is one client's last local model w_i and its correction state (SCAFFOLD's c_i,
FedDyn's h_i), in the runtime's storage dtype. Three places to keep them:

  DeviceStore  the [C, ...] tables of FedState on the device, gathered and scattered with
               jitted .at[ids] (what algo.apply does inside its round), when they fit.
  HostStore    numpy rows in host memory, for federations larger than the device.
  DiskStore    a zarr array on disk (tensorstore), one chunk per client row.

HostStore and DiskStore are lazily materialised: a client never sampled has no row and
reads as its initial one (w^0 and the correction's init state: Algorithm 1 line 1), so
their memory grows with the clients ever sampled, not with C, and creating one costs
nothing at any C. Every store gives the numbers of FedState's tables bit for bit
(tests/test_client_store.py).

A quantity over all C is never computed inside a round: SCAFFOLD's c and FedDyn's mean_C(h_i)
move by the cohort's changes (their server states), and the paper's Delta^t =
(1/C) sum_C ||w_i - w||^2 is `divergence_all`, streamed over the rows in chunks (the rows
never sampled add (C - M) ||w^0 - w||^2 at once).
"""
import math
import os

import jax
import jax.numpy as jnp
import numpy as np

from fedinit_jax import tree
from fedinit_jax.checks import require
from fedinit_jax.federated_round import Cohort, as_arrays, divergence_all, store
from fedinit_jax.types import FederatedAlgorithm, FedState, RoundInput

CHUNK_ROWS = 4096  # rows streamed at once by divergence_all
_divergence_all = jax.jit(divergence_all)


def server_state(algo: FederatedAlgorithm, params) -> FedState:
    """algo.init's state without the [C, ...] client tables (None): what apply_cohort takes
    when a ClientStore holds the clients."""
    shapes = algo.init(params, 1)
    return shapes._replace(client_params=None, client_state=None)


def initial_row(algo: FederatedAlgorithm, params) -> Cohort:
    """One client's row before it is first sampled: w^0 and the correction's init state, in
    the runtime's storage dtype (leaves without the client axis)."""
    return Cohort(store(algo.runtime, params),
                  store(algo.runtime, algo.spec.correction.client.init(params)))


def run_round(algo: FederatedAlgorithm, state: FedState, client_rows, round_input: RoundInput,
              key):
    """One round on a federation held in `client_rows` (a ClientStore): gather the sampled
    clients' rows, algo.apply_cohort, scatter the real clients' new rows.
    Returns (state, metrics)."""
    round_input = as_arrays(round_input)
    ids = np.asarray(round_input.client_ids)
    real = (np.ones(ids.size, bool) if round_input.mask is None
            else np.asarray(round_input.mask))
    # a padded slot's id means nothing: it reads some real client's row and writes nothing
    cohort = client_rows.gather(np.where(real, ids, ids[real][0]))
    state, new_cohort, metrics = algo.apply_cohort(state, cohort, round_input, key,
                                                   client_rows.num_clients)
    kept = np.flatnonzero(real)
    client_rows.scatter(ids[kept], jax.tree.map(lambda x: x[kept], new_cohort))
    return state, metrics


class _Layout:
    """A row as one flat vector: the leaves of a Cohort row, raveled and concatenated (one
    dtype, the storage dtype); client params first, so Delta^t reads a prefix."""

    def __init__(self, row: Cohort):
        leaves, self.treedef = jax.tree.flatten(row)
        self.shapes = [tuple(np.shape(x)) for x in leaves]
        self.sizes = [math.prod(s) for s in self.shapes]
        dtypes = {jnp.dtype(x.dtype) for x in leaves}
        if len(dtypes) != 1:
            raise ValueError(f"a client row's leaves must share one dtype, got {dtypes}")
        self.dtype = dtypes.pop()
        self.width = sum(self.sizes)
        self.params_width = sum(math.prod(np.shape(x)) for x in jax.tree.leaves(row.client_params))
        self.initial = self.flatten(jax.tree.map(lambda x: np.asarray(x)[None], row))[0]

    def flatten(self, rows) -> np.ndarray:
        """[N, ...] leaves -> [N, width]."""
        leaves = [np.asarray(x) for x in jax.tree.leaves(rows)]
        n = leaves[0].shape[0]
        return np.concatenate([x.reshape(n, -1).astype(self.dtype) for x in leaves], axis=1)

    def unflatten(self, flat: np.ndarray) -> Cohort:
        """[N, width] -> a Cohort of [N, ...] device arrays."""
        n, parts, start = flat.shape[0], [], 0
        for shape, size in zip(self.shapes, self.sizes):
            parts.append(jnp.asarray(flat[:, start:start + size].reshape(n, *shape)))
            start += size
        return jax.tree.unflatten(self.treedef, parts)

    def sq_dist(self, flat, w_flat) -> float:
        """sum over the rows of ||w_i - w||^2 (float64 sum of float32 squares)."""
        diff = flat[:, :self.params_width].astype(np.float32) - w_flat[None]
        return float(np.sum(np.einsum("ij,ij->i", diff, diff), dtype=np.float64))


def _flat_params(w) -> np.ndarray:
    return np.concatenate([np.asarray(x, np.float32).ravel() for x in jax.tree.leaves(w)])


def _check_ids(ids, num_clients):
    ids = np.asarray(ids)
    if ids.ndim != 1 or (ids.size and (ids.min() < 0 or ids.max() >= num_clients)):
        raise ValueError(f"client ids must be a 1-D array in [0, {num_clients}), got "
                         f"{ids.tolist()[:10]}")
    return ids.astype(np.int64)


class DeviceStore:
    """The [C, ...] tables on the device (FedState's), gathered and scattered by jit."""

    def __init__(self, algo: FederatedAlgorithm, params, num_clients: int):
        state = algo.init(params, num_clients)
        self.num_clients = num_clients
        self.tables = Cohort(state.client_params, state.client_state)
        self._gather = jax.jit(tree.gather)
        self._scatter = jax.jit(tree.scatter, donate_argnums=0)

    def gather(self, ids) -> Cohort:
        return self._gather(self.tables, jnp.asarray(_check_ids(ids, self.num_clients)))

    def scatter(self, ids, rows: Cohort) -> None:
        ids = _check_ids(ids, self.num_clients)
        self.tables = self._scatter(self.tables, jnp.asarray(ids), rows)

    def divergence_all(self, w) -> float:
        return float(_divergence_all(self.tables.client_params, w))

    @property
    def rows_held(self) -> int:
        return self.num_clients


class HostStore:
    """Rows in host memory (numpy), created when a client is first sampled."""

    def __init__(self, algo: FederatedAlgorithm, params, num_clients: int):
        if not isinstance(num_clients, (int, np.integer)) or num_clients < 1:
            raise ValueError(f"num_clients={num_clients!r} must be a positive int")
        self.num_clients = int(num_clients)
        self.layout = _Layout(initial_row(algo, params))
        self.slot = {}  # client id -> its row in self.rows (the clients ever sampled)
        self.rows = np.empty((0, self.layout.width), self.layout.dtype)

    def gather(self, ids) -> Cohort:
        ids = _check_ids(ids, self.num_clients)
        flat = np.empty((ids.size, self.layout.width), self.layout.dtype)
        for k, i in enumerate(ids.tolist()):
            at = self.slot.get(i)
            flat[k] = self.layout.initial if at is None else self.rows[at]
        return self.layout.unflatten(flat)

    def scatter(self, ids, rows: Cohort) -> None:
        ids = _check_ids(ids, self.num_clients)
        flat = self.layout.flatten(rows)
        for k, i in enumerate(ids.tolist()):
            at = self.slot.get(i)
            if at is None:
                at = self.slot[i] = len(self.slot)
                if at == len(self.rows):  # grow by doubling: amortised O(1) per new client
                    grown = np.empty((max(16, 2 * len(self.rows)), self.layout.width),
                                     self.layout.dtype)
                    grown[:len(self.rows)] = self.rows
                    self.rows = grown
            self.rows[at] = flat[k]

    def divergence_all(self, w) -> float:
        w_flat = _flat_params(w)
        held = len(self.slot)
        total = sum(self.layout.sq_dist(self.rows[s:min(s + CHUNK_ROWS, held)], w_flat)
                    for s in range(0, held, CHUNK_ROWS))
        total += (self.num_clients - held) * self.layout.sq_dist(self.layout.initial[None],
                                                                 w_flat)
        return total / self.num_clients

    @property
    def rows_held(self) -> int:
        return len(self.slot)

    def save(self, path: str) -> None:
        """The rows ever written, to path (.npz, written to a temporary file and renamed)."""
        ids = np.fromiter(self.slot, np.int64, len(self.slot))
        order = np.fromiter(self.slot.values(), np.int64, len(self.slot))
        tmp = f"{path}.tmp{os.getpid()}.npz"
        np.savez(tmp, ids=ids, rows=self.rows[order])
        os.replace(tmp, path)

    def restore(self, path: str) -> None:
        with np.load(path) as saved:
            ids, rows = saved["ids"], saved["rows"]
        self.slot = {int(i): k for k, i in enumerate(ids)}
        self.rows = rows.astype(self.layout.dtype)


class DiskStore:
    """Rows in a zarr array on disk through tensorstore, [C, width] in chunks of one row:
    a client never sampled has no chunk (no file), and reads as its initial row. Which rows
    exist is a second zarr array, [C] uint8, in chunks of 65,536 clients."""

    def __init__(self, algo: FederatedAlgorithm, params, num_clients: int, path: str):
        ts = require("tensorstore", "client_store.DiskStore")
        if not isinstance(num_clients, (int, np.integer)) or num_clients < 1:
            raise ValueError(f"num_clients={num_clients!r} must be a positive int")
        self.num_clients = int(num_clients)
        self.layout = _Layout(initial_row(algo, params))
        self.path = path
        # bfloat16 rows are kept as float32 on disk: widening and rounding back is exact
        self.disk_dtype = np.float16 if self.layout.dtype == np.float16 else np.float32

        def open_array(name, shape, chunks, dtype):
            return ts.open({"driver": "zarr",
                            "kvstore": {"driver": "file", "path": os.path.join(path, name)},
                            "metadata": {"shape": list(shape), "chunks": list(chunks),
                                         "dtype": np.dtype(dtype).str, "fill_value": 0,
                                         "compressor": None}},
                           create=True, open=True).result()

        self.rows = open_array("rows", (self.num_clients, self.layout.width),
                               (1, self.layout.width), self.disk_dtype)
        self.present = open_array("present", (self.num_clients,),
                                  (min(65536, self.num_clients),), np.uint8)

    def gather(self, ids) -> Cohort:
        ids = _check_ids(ids, self.num_clients)
        present = np.asarray(self.present.oindex[ids].read().result()).astype(bool)
        flat = np.asarray(self.rows.oindex[ids, :].read().result()).astype(self.layout.dtype)
        flat[~present] = self.layout.initial
        return self.layout.unflatten(flat)

    def scatter(self, ids, rows: Cohort) -> None:
        ids = _check_ids(ids, self.num_clients)
        if not ids.size:
            return
        self.rows.oindex[ids, :].write(self.layout.flatten(rows).astype(self.disk_dtype)).result()
        self.present.oindex[ids].write(np.ones(ids.size, np.uint8)).result()  # after the rows

    def divergence_all(self, w) -> float:
        w_flat = _flat_params(w)
        held_ids = np.flatnonzero(self.present.read().result())
        total = 0.0
        for s in range(0, held_ids.size, CHUNK_ROWS):
            chunk = held_ids[s:s + CHUNK_ROWS]
            total += self.layout.sq_dist(np.asarray(self.rows.oindex[chunk, :].read().result())
                                         .astype(self.layout.dtype), w_flat)
        total += (self.num_clients - held_ids.size) * self.layout.sq_dist(
            self.layout.initial[None], w_flat)
        return total / self.num_clients

    @property
    def rows_held(self) -> int:
        return int(np.count_nonzero(self.present.read().result()))
