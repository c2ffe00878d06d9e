"""What the lazy stores share (HostStore, DiskStore): a row as one flat vector, rows
created when first written, reads of the others as the initial row, Delta^t streamed, and
the incremental checkpoints of fedinit_jax/deltas.py. A lazy backend subclasses LazyStore
(calling its __init__) and implements its four abstract methods: _read_flat(ids),
_write_flat(ids, flat), _held_ids(), _rebuild(delta names)."""
import abc
import math
import os

import jax
import jax.numpy as jnp
import numpy as np

from fedinit_jax.client_store import deltas
from fedinit_jax.federated_round import Cohort, to_storage
from fedinit_jax.types import FederatedAlgorithm

__all__ = ["initial_row", "Layout", "check_ids", "LazyStore"]


def initial_row(algo: FederatedAlgorithm, params) -> Cohort:
    """One client's row before it is first sampled: its offset rule's first row (w^0 under
    Algorithm 1's) and the correction's init state, in the runtime's storage dtype (leaves
    without the client axis; whether a client was sampled is its row's presence, not part
    of it)."""
    return Cohort(to_storage(algo.runtime, algo.spec.ri_offset.first_row(params)),
                  to_storage(algo.runtime, algo.spec.correction.client.init(params)), None)


class Layout:
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
        self.params_width = sum(math.prod(np.shape(x)) for x in jax.tree.leaves(row.ri_rows))
        self.initial = self.flatten(jax.tree.map(lambda x: np.asarray(x)[None], row))[0]
        # rows streamed at once (Delta^t): about deltas.BLOCK_BYTES, whatever the width
        self.block_rows = deltas.block_rows(self.width * self.dtype.itemsize)

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


def check_ids(ids, num_clients, unique=False):
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


class LazyStore(abc.ABC):
    """What HostStore and DiskStore share: rows created when first written, reads of the
    others as the initial row, Delta^t streamed, and incremental checkpoints.

    Checkpoints (the binaries' resume, exact after a kill at any moment; deltas.py):
    attach(folder) names the folder of the store's record; checkpoint(t) writes the rows
    written since the previous checkpoint as folder/delta-<t>.npy and returns the manifest
    of checkpoint t (every delta up to t, with sizes and sha256), which the caller commits
    with the server state (the orbax checkpoint); committed(t) starts the next delta;
    restore(t, manifest) brings the rows back to round t whatever the working copy holds:
    the deltas are verified against the manifest, the working copy rebuilt or repaired
    from their fold, and the deltas after t removed."""

    def __init__(self, algo, params, num_clients: int):
        """A backend's __init__ calls this first (algo, params: the initial row; C)."""
        if not isinstance(num_clients, (int, np.integer)) or num_clients < 1:
            raise ValueError(f"num_clients={num_clients!r} must be a positive int")
        self.num_clients = int(num_clients)
        self.layout = Layout(initial_row(algo, params))
        self.spec = algo.spec
        self.folder = None
        self._written = set()  # ids written since the last checkpoint (once attached)
        self._wrote_unattached = False  # rows written before attach: the first delta reads them
        self._recorded = set()  # ids some delta holds (once attached)
        self._entries = []  # the manifest entries of the deltas so far

    @abc.abstractmethod
    def _read_flat(self, ids):
        """(rows [len(ids), width] in the layout's dtype, present [len(ids)] bool) of ids,
        a client without a row read as layout.initial."""

    @abc.abstractmethod
    def _write_flat(self, ids, flat) -> None:
        """Write the flat rows of ids (distinct), creating the rows not held yet."""

    @abc.abstractmethod
    def _held_ids(self):
        """The ids that hold a row, sorted ([M] int64)."""

    @abc.abstractmethod
    def _rebuild(self, names) -> int:
        """Replace every row by the fold of the deltas `names` (self._folded(names)),
        returning the rows held."""

    def gather(self, ids) -> Cohort:
        flat, present = self._read_flat(check_ids(ids, self.num_clients))
        return self.layout.unflatten(flat)._replace(client_visited=jnp.asarray(present))

    def scatter(self, ids, rows: Cohort) -> None:
        ids = check_ids(ids, self.num_clients, unique=True)
        if not ids.size:
            return
        self.journal(ids)
        self._write_flat(ids, self.layout.flatten(rows))

    def journal(self, ids) -> None:
        """Name ids as written in this round (the next checkpoint's delta holds their rows);
        before the store is attached only that rows were written is noted (attach reads
        which: no set of ids grows with the clients of a store never checkpointed)."""
        if self.folder is None:
            self._wrote_unattached = True
        else:
            self._written.update(np.asarray(ids, np.int64).tolist())

    def divergence_all(self, w) -> float:
        """The mean squared RI offset given the global model w (ClientStore.divergence_all):
        Delta^t = (1/C) sum_C ||w_i - w||^2 over every row, the rows never written as w^0,
        or under an offset rule (1/C) sum_C ||e_i||^2 of the stored offsets. Each row's
        term in float64 from float32 differences, summed exactly (math.fsum): the result
        does not depend on the order rows were written in, so a resumed run gives an
        uninterrupted run's value to the bit. The device tables' divergence_all sums in
        float32 and agrees to float32 rounding (~1e-6 relative)."""
        w_flat = _flat_params(self.spec.ri_offset.measured_from(w))
        held = self._held_ids()
        block = self.layout.block_rows
        terms = [self.layout.sq_dists(self._read_flat(held[s:s + block])[0], w_flat)
                 for s in range(0, held.size, block)]
        unwritten = (self.num_clients - held.size) * float(
            self.layout.sq_dists(self.layout.initial[None], w_flat)[0])
        return math.fsum([unwritten, *(float(x) for t in terms for x in t)]) / self.num_clients

    @property
    def rows_held(self) -> int:
        return int(self._held_ids().size)

    # -------------------------------------------------------------- incremental checkpoints
    def attach(self, folder: str) -> None:
        """Keep the store's record (deltas) in folder: checkpoint / restore. Rows written
        before the store was attached go into its first checkpoint (journal)."""
        if self._wrote_unattached:
            self._written.update(self._held_ids().tolist())
            self._wrote_unattached = False
        os.makedirs(folder, exist_ok=True)
        deltas.remove_temporaries(folder)
        self.folder = folder

    def checkpoint(self, rounds_done: int) -> dict:
        """Write folder/delta-<rounds_done>.npy, the rows written since the previous
        checkpoint, or every row held when the deltas outgrow them (deltas.compacts: a
        snapshot, the manifest's one delta), streamed block by block
        (deltas.write_delta). Returns the manifest of this checkpoint (deltas.py),
        to be saved with its server state."""
        held = self._recorded | self._written
        snapshot = deltas.compacts(self._entries, len(self._written), len(held))
        ids = np.array(sorted(held if snapshot else self._written), np.int64)
        entry = deltas.write_delta(self.folder, rounds_done, ids,
                                       lambda some: self._read_flat(some)[0])
        self._entries = [entry] if snapshot else [*self._entries, entry]
        self._recorded = held
        return {"format": deltas.FORMAT, "deltas": list(self._entries),
                "rows_held": len(self._recorded)}

    def committed(self, rounds_done: int) -> None:
        """The checkpoint of rounds_done is saved with its server state: the next delta
        holds the rows written from now on."""
        del rounds_done
        self._written = set()

    def restore(self, rounds_done: int, manifest: dict | None = None) -> None:
        """The rows as they were after round rounds_done, from the checkpoint's manifest
        (None with rounds_done 0: no row written), whatever the working copy holds.
        StoreDamaged (a ValueError) naming the file when a delta the checkpoint needs is
        missing or damaged, or naming the checkpoint when it records no manifest."""
        if manifest is None and rounds_done:
            raise deltas.StoreDamaged(f"{self.folder}: the checkpoint after round "
                                      f"{rounds_done} records no client-store manifest")
        names = [] if manifest is None else deltas.entries(self.folder, manifest, rounds_done)
        held = self._rebuild(names)
        if manifest is not None and held != manifest["rows_held"]:
            raise deltas.StoreDamaged(
                f"{self.folder}: its deltas hold {held} clients' rows, the checkpoint after "
                f"round {rounds_done} recorded {manifest['rows_held']}")
        deltas.remove_after(self.folder, rounds_done)
        self._entries = [] if manifest is None else list(manifest["deltas"])
        self._written = set()

    def _folded(self, names):
        """The fold of the deltas `names` (deltas.newest_first), noting its ids."""
        self._recorded = set()
        for ids, rows in deltas.newest_first(self.folder, names, self.layout.dtype):
            self._recorded.update(ids.tolist())
            yield ids, rows


