"""The contract of a client store, as the round, the binaries and a multi-process run use
it: ClientStore (every store), Checkpointed (its rows outlive the process through incremental
checkpoints) and SharedStore (every process of a multi-process run reads and writes it)."""
import functools
import inspect
from typing import Protocol, runtime_checkable

from fedinit_jax.federated_round import Cohort

__all__ = ["ClientStore", "Checkpointed", "SharedStore", "implements"]


@runtime_checkable
class ClientStore(Protocol):
    """Where a federation's per-client rows live (run_round gathers and scatters them)."""

    num_clients: int

    @classmethod
    def open(cls, algo, params, num_clients: int, folder: str) -> "ClientStore":
        """The binaries' constructor (client_store.STORES): a store for C = num_clients
        whose files, if any, live under folder."""

    def gather(self, ids) -> Cohort:
        """The rows of ids ([N] ints in [0, C)), each leaf [N, ...] (a client never written
        reads as its initial row, client_visited False)."""

    def scatter(self, ids, rows: Cohort) -> None:
        """Write the rows of ids (distinct) from a Cohort of [N, ...] leaves."""

    def divergence_all(self, w) -> float:
        """The mean squared RI offset over all C clients given the global model w: the
        paper's Delta^t = (1/C) sum_C ||w_i - w||^2 where the rows are last local models
        (ri_offset="model"), else (1/C) sum_C ||e_i||^2 of the offsets the rule stores
        (its offset rule's measured_from, ri_offset.py): what the binaries report."""

    @property
    def rows_held(self) -> int:
        """The clients whose rows the store holds."""


@runtime_checkable
class Checkpointed(ClientStore, Protocol):
    """A store whose rows outlive the process through incremental checkpoints (the binaries'
    resume; fedinit_jax/client_store/deltas.py): HostStore, DiskStore."""

    folder: str | None

    def attach(self, folder: str) -> None: ...

    def checkpoint(self, rounds_done: int) -> dict: ...

    def committed(self, rounds_done: int) -> None: ...

    def restore(self, rounds_done: int, manifest: dict | None = None) -> None: ...


@runtime_checkable
class SharedStore(Checkpointed, Protocol):
    """A store every process of a multi-process run reads and writes (DiskStore): each
    process gathers and writes the rows of its own slots (client_store/processes.py)."""

    path: str  # where its rows live, on a file system every process sees

    def journal(self, ids) -> None:
        """Name ids as written in this round (process 0, before any row is written)."""

    def write_rows(self, ids, rows: Cohort) -> None:
        """Write these rows (this process's slots) without marking them present."""

    def mark_present(self, ids) -> None:
        """Mark ids as holding a row (process 0, once every process has written)."""


@functools.cache
def _members(protocol) -> frozenset:
    """The names a Protocol declares, its bases' included (methods, properties, fields)."""
    return frozenset(name for cls in protocol.__mro__ if getattr(cls, "_is_protocol", False)
                     and cls is not Protocol
                     for name in (*vars(cls), *getattr(cls, "__annotations__", {}))
                     if not name.startswith("_"))


def implements(store, protocol) -> bool:
    """Whether `store` has every member of `protocol` (ClientStore, Checkpointed or
    SharedStore), looked up without running them (isinstance on a runtime Protocol reads
    its properties, e.g. rows_held, which reads a store's files)."""
    return all(_has(store, name) for name in _members(protocol))


def _has(store, name) -> bool:
    try:
        inspect.getattr_static(store, name)
    except AttributeError:
        return False
    return True
