"""HostStore: the clients' rows in host memory (numpy), created when first sampled."""
import numpy as np

from fedinit_jax.client_store.rows import LazyStore
from fedinit_jax.types import FederatedAlgorithm

__all__ = ["HostStore"]


class HostStore(LazyStore):
    """Rows in host memory (numpy), created when a client is first sampled. On GPU/TPU a
    gather is one host-to-device transfer of the cohort's N rows; the rows are ordinary
    (pageable) memory, not JAX's pinned_host memory kind, which would be a [C, ...] array
    allocated whole at the start instead of growing with the clients ever sampled."""

    def __init__(self, algo: FederatedAlgorithm, params, num_clients: int):
        self._init_lazy(algo, params, num_clients)
        self.slot = {}  # client id -> its row in self.rows (the clients ever sampled)
        self.rows = np.empty((0, self.layout.width), self.layout.dtype)

    @classmethod
    def open(cls, algo: FederatedAlgorithm, params, num_clients: int, folder: str):
        """STORES' constructor: the rows in this process's memory (folder: its record,
        attached by the caller)."""
        del folder
        return cls(algo, params, num_clients)

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


