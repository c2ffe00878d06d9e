"""DiskStore: the clients' rows in a zarr array on disk (tensorstore), one chunk a row."""
import errno
import os
import re
import shutil

import numpy as np

from fedinit_jax.checks import require
from fedinit_jax.client_store import deltas
from fedinit_jax.client_store.rows import LazyStore, check_ids
from fedinit_jax.federated_round import Cohort
from fedinit_jax.types import FederatedAlgorithm

__all__ = ["PRESENCE_CHUNK", "DiskStore"]

PRESENCE_CHUNK = 1024  # clients per chunk of the disk store's presence array


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


class DiskStore(LazyStore):
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
        super().__init__(algo, params, num_clients)
        self.path = path
        # bfloat16 rows are kept as float32 on disk: widening and rounding back is exact
        self.disk_dtype = np.float16 if self.layout.dtype == np.float16 else np.float32
        self._open_arrays(working_copy)

    @classmethod
    def open(cls, algo: FederatedAlgorithm, params, num_clients: int, folder: str):
        """STORES' constructor: the arrays under folder/store, a working copy of the record
        in folder (restore rebuilds them)."""
        return cls(algo, params, num_clients, os.path.join(folder, "store"),
                   working_copy=True)

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
                    raise deltas.StoreDamaged(
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
        ids = check_ids(ids, self.num_clients, unique=True)
        if ids.size:  # a process whose slots are all padding this round writes nothing
            self._write_rows(ids, self.layout.flatten(rows))

    def mark_present(self, ids) -> None:
        """The rows of ids are written (a client with a row no longer reads as w^0)."""
        self._write_present(check_ids(ids, self.num_clients), 1)

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
            if isinstance(err, deltas.StoreDamaged):
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
