"""HostStore: the clients' rows in host memory (numpy), created when first sampled."""
import numpy as np

from fedinit_jax.client_store.rows import LazyStore
from fedinit_jax.types import FederatedAlgorithm

__all__ = ["HostStore"]


class HostStore(LazyStore):
    """Rows in host memory (numpy), created when a client is first sampled, in pages of
    about deltas.BLOCK_BYTES (layout.block_rows rows, at most C): a new client never
    copies the rows already held, so memory is the rows held rounded up to one page (a
    doubled array would hold up to twice them, and both while it grows). On GPU/TPU a gather
    is one host-to-device transfer of the cohort's N rows; the rows are ordinary (pageable)
    memory, not JAX's pinned_host memory kind, which would be a [C, ...] array allocated
    whole at the start instead of growing with the clients ever sampled."""

    def __init__(self, algo: FederatedAlgorithm, params, num_clients: int):
        super().__init__(algo, params, num_clients)
        self.page_rows = min(self.layout.block_rows, self.num_clients)
        self.slot = {}  # client id -> its row's place (the clients ever sampled)
        self.pages = []  # [page_rows, width] arrays; row `at` is pages[at // P][at % P]

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
            flat[k] = (self.layout.initial if at is None
                       else self.pages[at // self.page_rows][at % self.page_rows])
        return flat, present

    def _write_flat(self, ids, flat) -> None:
        for k, i in enumerate(ids.tolist()):
            at = self.slot.get(i)
            if at is None:
                at = self.slot[i] = len(self.slot)
                if at // self.page_rows == len(self.pages):
                    self.pages.append(np.empty((self.page_rows, self.layout.width),
                                               self.layout.dtype))
            self.pages[at // self.page_rows][at % self.page_rows] = flat[k]

    def _held_ids(self) -> np.ndarray:
        return np.fromiter(self.slot, np.int64, len(self.slot))

    def _rebuild(self, names) -> int:
        """Host memory does not outlive the process: the rows are the deltas' fold."""
        self.slot, self.pages = {}, []
        for ids, rows in self._folded(names):
            self._write_flat(ids, rows)
        return len(self.slot)
