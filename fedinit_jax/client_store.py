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
nothing at any C. Every store gives the rounds of FedState's tables bit for bit
(tests/test_client_store.py); Delta^t of a lazy store is summed exactly in float64, the
tables' in float32 (they agree to ~1e-6 relative).

A quantity over all C is never computed inside a round: SCAFFOLD's c and FedDyn's mean_C(h_i)
move by the cohort's changes (their server states), and the paper's Delta^t =
(1/C) sum_C ||w_i - w||^2 is `divergence_all`, streamed over the rows in chunks (the rows
never sampled add (C - M) ||w^0 - w||^2 at once).
"""
import errno
import math
import os
import re
import shutil

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from fedinit_jax import execution, row_deltas, tree
from fedinit_jax.builder import apply_cohort, as_arrays
from fedinit_jax.checks import check_inputs, require
from fedinit_jax.federated_round import Cohort, divergence_all, initial_offset_row, to_storage
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
    return Cohort(to_storage(algo.runtime, initial_offset_row(algo.spec, params)),
                  to_storage(algo.runtime, algo.spec.correction.client.init(params)), None)


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
    check_inputs(round_input, client_rows.num_clients, algo.runtime.num_devices or 1)
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


def _written(future, path) -> None:
    """Wait for a tensorstore write; a failure (disk full, I/O) as the OSError it is, naming
    the array (the binaries report an OSError while writing as a failed write)."""
    try:
        future.result()
    except ValueError as err:
        found = re.search(r"os_error_code='?(\d+)", str(err))
        code = int(found.group(1)) if found else errno.EIO
        raise OSError(code, f"{os.strerror(code)} ({str(err).splitlines()[0][:160]})",
                      path) from None


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

    def sq_dists(self, flat, w_flat) -> np.ndarray:
        """[N] ||w_i - w||^2 of each row: float32 differences, squared and summed in
        float64 row by row (a row's value does not depend on the rows beside it)."""
        diff = (flat[:, :self.params_width].astype(np.float32) - w_flat[None]).astype(np.float64)
        return np.sum(diff * diff, axis=1)


def _flat_params(w) -> np.ndarray:
    return np.concatenate([np.asarray(x, np.float32).ravel() for x in jax.tree.leaves(w)])


def _check_ids(ids, num_clients, unique=False):
    """ids as int64, ValueError unless a 1-D array in [0, num_clients) (and, for a
    scatter, without repeats: one client cannot have two new rows)."""
    ids = np.asarray(ids)
    if ids.ndim != 1 or (ids.size and (ids.min() < 0 or ids.max() >= num_clients)):
        raise ValueError(f"client ids must be a 1-D array in [0, {num_clients}), got "
                         f"{ids.tolist()[:10]}")
    if unique and np.unique(ids).size != ids.size:
        values, counts = np.unique(ids, return_counts=True)
        raise ValueError(f"client ids must not repeat within a round, got "
                         f"{values[counts > 1].tolist()[:10]} more than once")
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

    Checkpoints (the binaries' resume, exact after a kill at any moment; row_deltas.py):
    attach(folder) names the folder of the store's record; checkpoint(t) writes the rows
    written since the previous checkpoint as folder/delta-<t>.npz and returns the manifest
    of checkpoint t (every delta up to t, with sizes and sha256), which the caller commits
    with the server state (the orbax checkpoint); committed(t) starts the next delta;
    restore(t, manifest) brings the rows back to round t whatever the working copy holds:
    the deltas are verified against the manifest, the working copy rebuilt or repaired
    from their fold, and the deltas after t removed."""

    def _init_lazy(self, algo, params, num_clients):
        if not isinstance(num_clients, (int, np.integer)) or num_clients < 1:
            raise ValueError(f"num_clients={num_clients!r} must be a positive int")
        self.num_clients = int(num_clients)
        self.layout = _Layout(initial_row(algo, params))
        self.folder = None
        self._written = set()  # ids written since the last checkpoint (once attached)
        self._recorded = set()  # ids some delta holds (once attached)
        self._entries = []  # the manifest entries of the deltas so far

    def gather(self, ids) -> Cohort:
        flat, present = self._read_flat(_check_ids(ids, self.num_clients))
        return self.layout.unflatten(flat)._replace(client_visited=jnp.asarray(present))

    def scatter(self, ids, rows: Cohort) -> None:
        ids = _check_ids(ids, self.num_clients, unique=True)
        if not ids.size:
            return
        self.journal(ids)
        self._write_flat(ids, self.layout.flatten(rows))

    def journal(self, ids) -> None:
        """Name ids as written in this round (the next checkpoint's delta holds their rows)."""
        if self.folder is not None:
            self._written.update(np.asarray(ids, np.int64).tolist())

    def divergence_all(self, w) -> float:
        """Delta^t = (1/C) sum_C ||w_i - w||^2 over every row, the rows never written as
        w^0. Each row's term in float64 from float32 differences, summed exactly
        (math.fsum): the result does not depend on the order rows were written in, so a
        resumed run gives an uninterrupted run's value to the bit. The device tables'
        divergence_all sums in float32 and agrees to float32 rounding (~1e-6 relative)."""
        w_flat = _flat_params(w)
        held = self._held_ids()
        terms = [self.layout.sq_dists(self._read_flat(held[s:s + CHUNK_ROWS])[0], w_flat)
                 for s in range(0, held.size, CHUNK_ROWS)]
        unwritten = (self.num_clients - held.size) * float(
            self.layout.sq_dists(self.layout.initial[None], w_flat)[0])
        return math.fsum([unwritten, *(float(x) for t in terms for x in t)]) / self.num_clients

    @property
    def rows_held(self) -> int:
        return int(self._held_ids().size)

    # -------------------------------------------------------------- incremental checkpoints
    def attach(self, folder: str) -> None:
        """Keep the store's record (deltas) in folder: checkpoint / restore."""
        os.makedirs(folder, exist_ok=True)
        row_deltas.remove_temporaries(folder)
        legacy = os.path.join(folder, "journal")  # the id journal of earlier versions
        if os.path.exists(legacy):
            os.remove(legacy)
        self.folder = folder

    def checkpoint(self, rounds_done: int) -> dict:
        """Write folder/delta-<rounds_done>.npz, the rows written since the previous
        checkpoint. Returns the manifest of this checkpoint (row_deltas.py), to be saved
        with its server state."""
        ids = np.array(sorted(self._written), np.int64)
        entry = row_deltas.write_delta(self.folder, rounds_done, ids, self._read_flat(ids)[0])
        self._entries.append(entry)
        self._recorded.update(self._written)
        return {"format": row_deltas.FORMAT, "deltas": list(self._entries),
                "rows_held": len(self._recorded)}

    def committed(self, rounds_done: int) -> None:
        """The checkpoint of rounds_done is saved with its server state: the next delta
        holds the rows written from now on."""
        del rounds_done
        self._written = set()

    def restore(self, rounds_done: int, manifest: dict | None = None) -> None:
        """The rows as they were after round rounds_done (0: none written), from the
        checkpoint's manifest (None: a checkpoint saved before manifests, or none), whatever
        the working copy holds. StoreDamaged (a ValueError) naming the file when a delta
        the checkpoint needs is missing or damaged."""
        if manifest is None and rounds_done == 0:
            names = []
        else:
            names = row_deltas.entries(self.folder, manifest, rounds_done)
        held = self._rebuild(names)
        if manifest is not None and held != manifest["rows_held"]:
            raise row_deltas.StoreDamaged(
                f"{self.folder}: its deltas hold {held} clients' rows, the checkpoint after "
                f"round {rounds_done} recorded {manifest['rows_held']}")
        row_deltas.remove_after(self.folder, rounds_done)
        self._entries = (list(manifest["deltas"]) if manifest is not None else
                         [row_deltas.describe(self.folder, name) for name in names])
        self._written = set()

    def _folded(self, names):
        """The fold of the deltas `names` (row_deltas.newest_first), noting its ids."""
        self._recorded = set()
        for ids, rows in row_deltas.newest_first(self.folder, names, self.layout.dtype):
            self._recorded.update(ids.tolist())
            yield ids, rows


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

    def _rebuild(self, names) -> int:
        """Host memory does not outlive the process: the rows are the deltas' fold."""
        self.slot, self.rows = {}, np.empty((0, self.layout.width), self.layout.dtype)
        for ids, rows in self._folded(names):
            self._write_flat(ids, rows)
        return len(self.slot)


class DiskStore(_Lazy):
    """Rows in a zarr array on disk through tensorstore, [C, width] in chunks of one row:
    a client never sampled has no chunk (no file), and reads as its initial row. Which rows
    exist is a second zarr array, [C] uint8, in chunks of PRESENCE_CHUNK clients (small:
    a round reads and rewrites only the chunks its clients fall in)."""

    def __init__(self, algo: FederatedAlgorithm, params, num_clients: int, path: str,
                 working_copy: bool = False):
        """Args:
          algo, params: the algorithm and the initial model w^0 (the initial row).
          num_clients: C.
          path: the folder of the zarr arrays (created, or opened when it exists).
          working_copy: the arrays are a copy of a record that restore() rebuilds them
            from (the binaries' attach/checkpoint/restore): an array whose metadata cannot
            be read is created anew instead of refused.
        """
        self._ts = require("tensorstore", "client_store.DiskStore")
        self._init_lazy(algo, params, num_clients)
        self.path = path
        # bfloat16 rows are kept as float32 on disk: widening and rounding back is exact
        self.disk_dtype = np.float16 if self.layout.dtype == np.float16 else np.float32
        self._open_arrays(working_copy)

    def _open_arrays(self, anew_if_damaged=True) -> None:
        def open_array(name, shape, chunks, dtype):
            spec = {"driver": "zarr",
                    "kvstore": {"driver": "file", "path": os.path.join(self.path, name)},
                    "metadata": {"shape": list(shape), "chunks": list(chunks),
                                 "dtype": np.dtype(dtype).str, "fill_value": 0,
                                 "compressor": None}}
            try:
                return self._ts.open(spec, create=True, open=True).result()
            except ValueError as err:
                if not anew_if_damaged:
                    raise row_deltas.StoreDamaged(
                        f"{os.path.join(self.path, name)}: cannot be opened as this "
                        f"store's array ({str(err).splitlines()[0][:160]})") from None
                shutil.rmtree(os.path.join(self.path, name), ignore_errors=True)
                return self._ts.open(spec, create=True, open=True).result()

        self.rows = open_array("rows", (self.num_clients, self.layout.width),
                               (1, self.layout.width), self.disk_dtype)
        self.present = open_array("present", (self.num_clients,),
                                  (min(PRESENCE_CHUNK, self.num_clients),), np.uint8)

    def _read_flat(self, ids):
        """([N, width] rows, [N] bool present) of the ids (only the present rows are read)."""
        flat = np.empty((ids.size, self.layout.width), self.layout.dtype)
        if not ids.size:
            return flat, np.zeros(0, bool)
        present = np.asarray(self.present.oindex[ids].read().result()).astype(bool)
        flat[~present] = self.layout.initial
        if present.any():
            flat[present] = np.asarray(
                self.rows.oindex[ids[present], :].read().result()).astype(self.layout.dtype)
        return flat, present

    def _write_flat(self, ids, flat) -> None:
        self._write_rows(ids, flat)
        self.mark_present(ids)  # after the rows

    def _write_rows(self, ids, flat) -> None:
        if ids.size:
            _written(self.rows.oindex[ids, :].write(np.asarray(flat).astype(self.disk_dtype)),
                     os.path.join(self.path, "rows"))

    def write_rows(self, ids, rows: Cohort) -> None:
        """A multi-process round's share of scatter: the rows of ids, not yet marked present
        (process 0 marks the round's: run_round)."""
        ids = _check_ids(ids, self.num_clients, unique=True)
        if ids.size:  # a process whose slots are all padding this round writes nothing
            self._write_rows(ids, self.layout.flatten(rows))

    def mark_present(self, ids) -> None:
        """The rows of ids are written (a client with a row no longer reads as w^0)."""
        self._write_present(_check_ids(ids, self.num_clients), 1)

    def _write_present(self, ids, value) -> None:
        if ids.size:
            _written(self.present.oindex[ids].write(np.full(ids.size, value, np.uint8)),
                     os.path.join(self.path, "present"))

    def _held_ids(self) -> np.ndarray:
        return np.flatnonzero(np.asarray(self.present.read().result()))

    def _rebuild(self, names) -> int:
        """The zarr arrays repaired to the deltas' fold: each row the fold holds compared
        with the array's and rewritten where it differs (a row written after the
        checkpoint, a chunk deleted), every other row marked absent. A chunk or array that
        cannot be read (truncated, emptied) is rebuilt whole from the fold."""
        try:
            return self._repair(names)
        except ValueError as err:  # tensorstore's read errors: a damaged chunk or array
            if isinstance(err, row_deltas.StoreDamaged):
                raise
            shutil.rmtree(self.path, ignore_errors=True)
            self._open_arrays()
            return self._repair(names)

    def _repair(self, names) -> int:
        present = np.asarray(self.present.read().result()).astype(bool)
        held = np.zeros_like(present)
        for ids, rows in self._folded(names):
            held[ids] = True
            bits = f"u{np.dtype(self.disk_dtype).itemsize}"  # -0.0 is not 0.0 here
            now = np.asarray(self.rows.oindex[ids, :].read().result()).view(bits)
            want = rows.astype(self.disk_dtype).view(bits)
            wrong = ~present[ids] | ~np.all(now == want, axis=1)
            if wrong.any():
                self._write_flat(ids[wrong], rows[wrong])
        stale = np.flatnonzero(present & ~held)
        if stale.size:
            self._write_present(stale, 0)
        return int(held.sum())
