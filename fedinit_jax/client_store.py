"""Where the per-client state lives: a ClientStore gathers the cohort's rows before a round
and scatters the new ones after; the round (builder.apply_cohort) reads and writes nothing
else, so it costs what its N sampled clients cost, whatever the federation's size C.

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
from jax.sharding import NamedSharding, PartitionSpec

from fedinit_jax import execution, tree
from fedinit_jax.builder import apply_cohort, as_arrays
from fedinit_jax.checks import require
from fedinit_jax.federated_round import Cohort, divergence_all, to_storage
from fedinit_jax.types import FederatedAlgorithm, FedState, RoundInput

CHUNK_ROWS = 4096  # rows streamed at once by divergence_all
PRESENCE_CHUNK = 1024  # clients per chunk of the disk store's presence array


def server_state(algo: FederatedAlgorithm, params) -> FedState:
    """algo.init's state without the [C, ...] client tables (None): what apply_cohort takes
    when a ClientStore holds the clients."""
    shapes = algo.init(params, 1)
    return shapes._replace(client_params=None, client_state=None, client_visited=None)


def initial_row(algo: FederatedAlgorithm, params) -> Cohort:
    """One client's row before it is first sampled: w^0 and the correction's init state, in
    the runtime's storage dtype (leaves without the client axis; whether a client was
    sampled is its row's presence, not part of it)."""
    return Cohort(to_storage(algo.runtime, params),
                  to_storage(algo.runtime, algo.spec.correction.client.init(params)), None)


def run_round(algo: FederatedAlgorithm, state: FedState, client_rows, round_input: RoundInput,
              key):
    """One round on a federation held in `client_rows` (a ClientStore): gather the sampled
    clients' rows, apply_cohort, scatter the real clients' new rows.
    Returns (state, metrics).

    In a multi-process run (every process calls it with the same inputs) each process
    gathers and scatters the rows of its own slots only (those its devices hold), which
    needs a DiskStore on a folder every process reads: process 0 journals the round's ids
    before any row is written and marks them present, and the round ends when every
    process has written its rows."""
    round_input = as_arrays(round_input)
    ids = np.asarray(round_input.client_ids)
    real = (np.ones(ids.size, bool) if round_input.mask is None
            else np.asarray(round_input.mask))
    # a padded slot's id means nothing: it reads some real client's row and writes nothing
    read = np.where(real, ids, ids[real][0])
    if jax.process_count() > 1:
        return _run_round_processes(algo, state, client_rows, round_input, key, ids, real, read)
    cohort = client_rows.gather(read)
    state, new_cohort, metrics = apply_cohort(algo, state, cohort, round_input, key,
                                              client_rows.num_clients)
    kept = np.flatnonzero(real)
    client_rows.scatter(ids[kept], jax.tree.map(lambda x: x[kept], new_cohort))
    return state, metrics


def _run_round_processes(algo, state, client_rows, round_input, key, ids, real, read):
    """run_round when the cohort's slots are split over several processes' devices."""
    from jax.experimental import multihost_utils

    if not isinstance(client_rows, DiskStore):
        raise ValueError(f"a multi-process run keeps its clients in a DiskStore on a folder "
                         f"every process reads, not a {type(client_rows).__name__}: a "
                         "client's row must be readable by whichever process is dealt it")
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

    def flatten(self, rows: Cohort) -> np.ndarray:
        """[N, ...] leaves -> [N, width]."""
        leaves = [np.asarray(x) for x in jax.tree.leaves(rows._replace(client_visited=None))]
        n = leaves[0].shape[0]
        return np.concatenate([x.reshape(n, math.prod(x.shape[1:])).astype(self.dtype)
                               for x in leaves], axis=1)  # n may be 0

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
        self.tables = Cohort(state.client_params, state.client_state, state.client_visited)
        self._gather = jax.jit(tree.gather)
        self._scatter = jax.jit(tree.scatter, donate_argnums=0)

    def gather(self, ids) -> Cohort:
        return self._gather(self.tables, jnp.asarray(_check_ids(ids, self.num_clients)))

    def scatter(self, ids, rows: Cohort) -> None:
        ids = _check_ids(ids, self.num_clients)
        self.tables = self._scatter(self.tables, jnp.asarray(ids), rows)

    def divergence_all(self, w) -> float:
        return float(divergence_all(self.tables.client_params, w))

    @property
    def rows_held(self) -> int:
        return self.num_clients


class _Lazy:
    """What HostStore and DiskStore share: rows created when first written, reads of the
    others as the initial row, Delta^t streamed, and incremental checkpoints.

    Checkpoints (the binaries' resume, exact after a kill at any moment): attach(folder)
    starts a journal of the ids written (appended before their rows are written);
    checkpoint(t) saves the rows written since the last committed checkpoint as
    folder/delta-<t>.npz (one file, renamed into place: the rows of round t's cohorts only,
    not C); committed(t) empties the journal once the server state of round t is saved too;
    restore(t) brings the rows back to round t: deltas after t are removed, and every row
    the journal names is rewritten from the newest delta <= t that holds it, or forgotten
    (a client first sampled after t)."""

    def _init_lazy(self, algo, params, num_clients):
        if not isinstance(num_clients, (int, np.integer)) or num_clients < 1:
            raise ValueError(f"num_clients={num_clients!r} must be a positive int")
        self.num_clients = int(num_clients)
        self.layout = _Layout(initial_row(algo, params))
        self.folder = self._journal = None

    def gather(self, ids) -> Cohort:
        flat, present = self._read_flat(_check_ids(ids, self.num_clients))
        return self.layout.unflatten(flat)._replace(client_visited=jnp.asarray(present))

    def scatter(self, ids, rows: Cohort) -> None:
        ids = _check_ids(ids, self.num_clients)
        if not ids.size:
            return
        self.journal(ids)  # before the rows: a kill between leaves a named id
        self._write_flat(ids, self.layout.flatten(rows))

    def journal(self, ids) -> None:
        """Name ids as about to be written (kept for checkpoint / restore once attached)."""
        if self._journal is not None:
            self._journal.write(np.asarray(ids, np.int64).tobytes())
            self._journal.flush()

    def divergence_all(self, w) -> float:
        w_flat = _flat_params(w)
        held = self._held_ids()
        total = sum(self.layout.sq_dist(self._read_flat(held[s:s + CHUNK_ROWS])[0], w_flat)
                    for s in range(0, held.size, CHUNK_ROWS))
        total += (self.num_clients - held.size) * self.layout.sq_dist(
            self.layout.initial[None], w_flat)
        return total / self.num_clients

    @property
    def rows_held(self) -> int:
        return int(self._held_ids().size)

    # -------------------------------------------------------------- incremental checkpoints
    def attach(self, folder: str) -> None:
        """Journal the ids written from now on into folder (checkpoint / restore)."""
        os.makedirs(folder, exist_ok=True)
        self.folder = folder
        self._journal = open(os.path.join(folder, "journal"), "ab")

    def _journaled(self) -> np.ndarray:
        self._journal.flush()
        with open(os.path.join(self.folder, "journal"), "rb") as f:
            data = f.read()
        return np.unique(np.frombuffer(data[:len(data) // 8 * 8], np.int64))

    def _delta_path(self, rounds_done: int) -> str:
        return os.path.join(self.folder, f"delta-{rounds_done}.npz")

    def _deltas(self) -> list[int]:
        return sorted(int(n[6:-4]) for n in os.listdir(self.folder)
                      if n.startswith("delta-") and n.endswith(".npz"))

    def checkpoint(self, rounds_done: int) -> None:
        """folder/delta-<rounds_done>.npz: the rows written since the last commit."""
        ids = self._journaled()
        path = self._delta_path(rounds_done)
        tmp = f"{path}.tmp{os.getpid()}.npz"
        np.savez(tmp, ids=ids, rows=self._read_flat(ids)[0])
        os.replace(tmp, path)

    def committed(self, rounds_done: int) -> None:
        """The checkpoint of rounds_done is complete (server state saved): the journal starts
        anew."""
        del rounds_done
        self._journal.truncate(0)
        self._journal.seek(0)

    def restore(self, rounds_done: int) -> None:
        """The rows as they were after round rounds_done (0: none written)."""
        for t in self._deltas():
            if t > rounds_done:
                os.remove(self._delta_path(t))
        self._rewrite(self._journaled())
        self.committed(rounds_done)

    def _newest_rows(self, ids) -> dict:
        """{id: its row in the newest delta holding it} for the ids some delta holds."""
        wanted, found = set(ids.tolist()), {}
        for t in reversed(self._deltas()):
            if len(found) == len(wanted):
                break
            with np.load(self._delta_path(t)) as delta:
                for k, i in enumerate(delta["ids"].tolist()):
                    if i in wanted and i not in found:
                        found[i] = delta["rows"][k]
        return found


class HostStore(_Lazy):
    """Rows in host memory (numpy), created when a client is first sampled. On GPU/TPU a
    gather is one host-to-device transfer of the cohort's N rows; the rows are ordinary
    (pageable) memory, not JAX's pinned_host memory kind, which would be a [C, ...] array
    allocated whole at the start instead of growing with the clients ever sampled."""

    def __init__(self, algo: FederatedAlgorithm, params, num_clients: int):
        self._init_lazy(algo, params, num_clients)
        self.slot = {}  # client id -> its row in self.rows (the clients ever sampled)
        self.rows = np.empty((0, self.layout.width), self.layout.dtype)

    def _read_flat(self, ids):
        """([N, width] rows, [N] bool present) of the ids."""
        flat = np.empty((ids.size, self.layout.width), self.layout.dtype)
        present = np.zeros(ids.size, bool)
        for k, i in enumerate(ids.tolist()):
            at = self.slot.get(i)
            present[k] = at is not None
            flat[k] = self.layout.initial if at is None else self.rows[at]
        return flat, present

    def _write_flat(self, ids, flat) -> None:
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

    def _held_ids(self) -> np.ndarray:
        return np.fromiter(self.slot, np.int64, len(self.slot))

    def _rewrite(self, pending) -> None:
        """Host memory does not outlive the process: rebuilt from the deltas (in order)."""
        del pending
        self.slot, self.rows = {}, np.empty((0, self.layout.width), self.layout.dtype)
        for t in self._deltas():
            with np.load(self._delta_path(t)) as delta:
                self._write_flat(delta["ids"], delta["rows"])


class DiskStore(_Lazy):
    """Rows in a zarr array on disk through tensorstore, [C, width] in chunks of one row:
    a client never sampled has no chunk (no file), and reads as its initial row. Which rows
    exist is a second zarr array, [C] uint8, in chunks of PRESENCE_CHUNK clients (small:
    a round reads and rewrites only the chunks its clients fall in)."""

    def __init__(self, algo: FederatedAlgorithm, params, num_clients: int, path: str):
        ts = require("tensorstore", "client_store.DiskStore")
        self._init_lazy(algo, params, num_clients)
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
                                  (min(PRESENCE_CHUNK, self.num_clients),), np.uint8)

    def _read_flat(self, ids):
        """([N, width] rows, [N] bool present) of the ids."""
        if not ids.size:
            return np.empty((0, self.layout.width), self.layout.dtype), np.zeros(0, bool)
        present = np.asarray(self.present.oindex[ids].read().result()).astype(bool)
        flat = np.asarray(self.rows.oindex[ids, :].read().result()).astype(self.layout.dtype)
        flat[~present] = self.layout.initial
        return flat, present

    def _write_flat(self, ids, flat) -> None:
        self._write_rows(ids, flat)
        self.mark_present(ids)  # after the rows

    def _write_rows(self, ids, flat) -> None:
        if ids.size:
            self.rows.oindex[ids, :].write(np.asarray(flat).astype(self.disk_dtype)).result()

    def write_rows(self, ids, rows: Cohort) -> None:
        """A multi-process round's share of scatter: the rows of ids, not yet marked present
        (process 0 marks the round's, after journaling them: run_round)."""
        ids = _check_ids(ids, self.num_clients)
        if ids.size:  # a process whose slots are all padding this round writes nothing
            self._write_rows(ids, self.layout.flatten(rows))

    def mark_present(self, ids) -> None:
        """The rows of ids are written (a client with a row no longer reads as w^0)."""
        ids = _check_ids(ids, self.num_clients)
        if ids.size:
            self.present.oindex[ids].write(np.ones(ids.size, np.uint8)).result()

    def _held_ids(self) -> np.ndarray:
        return np.flatnonzero(np.asarray(self.present.read().result()))

    def _rewrite(self, pending) -> None:
        """Each journaled row back to its newest delta's, or absent (first written later)."""
        found = self._newest_rows(pending)
        back = np.array(sorted(found), np.int64)
        if back.size:
            self._write_flat(back, np.stack([found[i] for i in back.tolist()]))
        gone = np.setdiff1d(pending, back)
        if gone.size:
            self.present.oindex[gone].write(np.zeros(gone.size, np.uint8)).result()
