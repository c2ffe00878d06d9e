"""The durable record of a lazy client store (HostStore, DiskStore): one file of rows per
checkpoint, and a manifest per checkpoint that names and checksums them.

    <folder>/delta-<t>.npy   the rows written in the rounds after the previous checkpoint
                             and up to round t: numpy's .npy format, a record array [n] of
                             (id int64, row [width] in the storage dtype; bfloat16 as its
                             uint16 bits), written and read one block at a time

The manifest of checkpoint t is

    {"format": 1, "rows_held": M,
     "deltas": [{"file": "delta-5.npy", "bytes": ..., "sha256": ..., "rows": n}, ...]}

with one entry for every delta up to t; the binaries save it in the orbax checkpoint of
round t (its step metadata), so it is committed atomically with the server state. The rows
as they were after round t are the *fold* of its deltas: each id's row from the newest
delta holding it, and M = the number of ids the deltas hold. So a checkpoint's rows never
depend on what the store's working copy (host memory, the zarr array) holds after a kill,
nor on files written after it: restoring checkpoint t verifies its deltas (present, size,
sha256; StoreDamaged naming the file otherwise), rebuilds or repairs the working copy from
their fold, and removes the deltas of later rounds.

The record stays bounded (`compacts`, `remove_unreferenced`): when the deltas a checkpoint
would need hold more than COMPACT_AFTER times the rows held, its delta is a *snapshot*,
every row held, and its manifest names that one file (the fold of one snapshot is the
snapshot: the format is unchanged). Once a checkpoint is committed, the deltas that no kept
checkpoint's manifest names are deleted; nothing is deleted while a kept checkpoint's
manifest cannot be read. So the folder holds at most the deltas of the kept checkpoints, each chain under
(COMPACT_AFTER + 1) x the rows, where it grew with every checkpoint (benchmarks/delta_disk.py:
the Shakespeare preset's visits over 1,200 rounds, at most 2.84x the rows held against 7.15x;
for SCAFFOLD's 6.6 MB rows, ~21 GB against ~52 GB).
"""
import hashlib
import os
import re

import jax.numpy as jnp
import numpy as np

__all__ = ["FORMAT", "BLOCK_BYTES", "COMPACT_AFTER", "StoreDamaged", "delta_name",
           "delta_rounds", "block_rows", "compacts", "remove_temporaries", "write_delta",
           "read_delta", "read_blocks", "verify", "entries", "newest_first", "remove_after",
           "remove_unreferenced", "sha256"]

FORMAT = 2
BLOCK_BYTES = 64 << 20  # rows written or read at once: a delta never held whole
COMPACT_AFTER = 2.0  # a snapshot once a checkpoint's deltas would hold more rows than this x held
_DELTA = re.compile(r"^delta-(\d+)\.npy$")
_TEMPORARY = re.compile(r"^\.delta-\d+\.npy\.tmp")  # a write cut by a kill or a full disk


class StoreDamaged(ValueError):
    """A file of a client store's record is missing or damaged: the message names it."""


def delta_name(rounds_done: int) -> str:
    """The file name of the delta of the checkpoint after round `rounds_done`."""
    return f"delta-{rounds_done}.npy"


def delta_rounds(folder: str) -> list[int]:
    """The rounds of the deltas in folder, ascending (temporary files are not deltas)."""
    found = (_DELTA.match(name) for name in os.listdir(folder))
    return sorted(int(m.group(1)) for m in found if m)


def block_rows(row_bytes: int) -> int:
    """Rows of row_bytes each in one block of about BLOCK_BYTES (at least one): what a delta
    write, a delta read and a store's streamed reads hold at once."""
    return max(1, BLOCK_BYTES // max(1, row_bytes))


def compacts(entries: list[dict], written: int, held: int) -> bool:
    """Whether the next checkpoint's delta is a snapshot of every row held.

    Args:
      entries: the manifest entries of the deltas the previous checkpoint needs.
      written: rows written since then (the next delta's, unless a snapshot).
      held: rows held after the next checkpoint (its manifest's rows_held).
    Returns:
      True when entries exist and their rows plus `written` exceed COMPACT_AFTER x held.
    """
    return bool(entries) and sum(e["rows"] for e in entries) + written > COMPACT_AFTER * held


def remove_temporaries(folder: str) -> None:
    """Delete the temporary files of delta writes that a kill or a full disk cut short."""
    for name in os.listdir(folder):
        if _TEMPORARY.match(name):
            os.remove(os.path.join(folder, name))


def _record(stored, width: int) -> np.dtype:
    """The delta's record: (id int64, row [width] of the stored dtype)."""
    return np.dtype([("id", "<i8"), ("row", stored, (width,))])


def _stored(dtype) -> np.dtype:
    """How a row dtype is written: bfloat16 (no numpy type) as its uint16 bits."""
    dtype = jnp.dtype(dtype)
    return np.dtype(np.uint16) if dtype == jnp.bfloat16 else np.dtype(dtype)


def write_delta(folder: str, rounds_done: int, ids: np.ndarray, read_rows) -> dict:
    """Write folder/delta-<rounds_done>.npy (a temporary file renamed into place, synced),
    streaming the rows: memory holds one block of about BLOCK_BYTES, not the delta (a
    delta of 600 LSTM clients' w_i and c_i is 4 GB).

    Args:
      folder: the store's record folder.
      rounds_done: the checkpoint's round t.
      ids: [n] the ids written since the previous checkpoint.
      read_rows: read_rows(some_ids) -> [len(some_ids), width] their rows in the storage
        dtype (called with ids[:0] for the width and dtype, then block by block in order).
    Returns:
      The delta's manifest entry: {"file", "bytes", "sha256", "rows"}.
    """
    ids = np.asarray(ids, np.int64)
    empty = read_rows(ids[:0])
    stored, width = _stored(empty.dtype), empty.shape[1]
    record = _record(stored, width)
    block = block_rows(record.itemsize)
    name = delta_name(rounds_done)
    tmp = os.path.join(folder, f".{name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            np.lib.format.write_array_header_2_0(f, {
                "descr": np.lib.format.dtype_to_descr(record), "fortran_order": False,
                "shape": (ids.size,)})
            for start in range(0, ids.size, block):
                some = ids[start:start + block]
                records = np.empty(some.size, record)
                records["id"] = some
                records["row"] = np.ascontiguousarray(read_rows(some)).view(stored)
                f.write(records.tobytes())
            f.flush()
            os.fsync(f.fileno())
        size, digest = os.path.getsize(tmp), sha256(tmp)
        os.replace(tmp, os.path.join(folder, name))
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return {"file": name, "bytes": size, "sha256": digest, "rows": int(ids.size)}


def read_delta(folder: str, name: str, dtype) -> tuple[np.ndarray, np.ndarray]:
    """(ids [n] int64, rows [n, width] in `dtype`) of one delta, whole; StoreDamaged naming
    the file when it cannot be read."""
    blocks = list(read_blocks(folder, name, dtype))
    return (np.concatenate([ids for ids, _ in blocks]),
            np.concatenate([rows for _, rows in blocks]))


def read_blocks(folder: str, name: str, dtype):
    """Yields (ids [m] int64, rows [m, width] in `dtype`) of one delta, block by block in the
    file's order, each of about BLOCK_BYTES (one empty block for an empty delta): memory
    holds one block, not the delta. StoreDamaged naming the file when it cannot be read."""
    path = os.path.join(folder, name)
    dtype = jnp.dtype(dtype)
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                      else np.lib.format.read_array_header_2_0)
            shape, fortran_order, record = header(f)
            names = record.names or ()
            if (len(shape) != 1 or fortran_order or names != ("id", "row")
                    or record["row"].base != _stored(dtype)):
                raise StoreDamaged(f"{path}: not a delta of {dtype.name} rows ({record}, "
                                   f"shape {shape})")
            count = shape[0]
            block = block_rows(record.itemsize)
            for start in range(0, max(count, 1), block):
                records = np.fromfile(f, record, min(block, count - start))
                if records.size != min(block, count - start):
                    raise StoreDamaged(f"{path}: its rows end after {start + records.size} "
                                       f"of {count}")
                yield (records["id"].astype(np.int64),
                       np.ascontiguousarray(records["row"]).view(dtype))
    except StoreDamaged:
        raise
    except Exception as err:  # noqa: BLE001 - numpy and OS errors alike
        raise StoreDamaged(f"{path}: unreadable ({type(err).__name__}: "
                           f"{str(err).splitlines()[0][:120] if str(err) else ''})") from None


def verify(folder: str, manifest: dict, rounds_done: int) -> None:
    """Every delta the manifest of checkpoint `rounds_done` names is there, of its size and
    sha256; StoreDamaged naming the first file that is not."""
    for entry in manifest["deltas"]:
        path = os.path.join(folder, entry["file"])
        if not os.path.exists(path):
            why = "is missing"
        elif os.path.getsize(path) != entry["bytes"]:
            why = f"has {os.path.getsize(path)} bytes, not {entry['bytes']}"
        elif sha256(path) != entry["sha256"]:
            why = "has changed (sha256 differs)"
        else:
            continue
        raise StoreDamaged(
            f"{path} {why}: the checkpoint after round {rounds_done} needs it to rebuild the "
            "clients' rows, which exist nowhere else; restore the file, or move the workdir "
            "aside and rerun to start over")


def sha256(path: str) -> str:
    """The file's sha256, hex (read in 4 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def entries(folder: str, manifest: dict, rounds_done: int) -> list[str]:
    """The delta files whose fold is the rows after round `rounds_done`, oldest first: the
    manifest's, verified (StoreDamaged naming the first file that is missing or changed,
    or the checkpoint when its manifest is not of FORMAT)."""
    if manifest.get("format") != FORMAT:
        raise StoreDamaged(f"{folder}: the checkpoint after round {rounds_done} records a "
                           f"client-store manifest of format {manifest.get('format')!r}, "
                           f"this fedinit_jax reads format {FORMAT} (.npy deltas)")
    verify(folder, manifest, rounds_done)
    return [entry["file"] for entry in manifest["deltas"]]


def newest_first(folder: str, names: list[str], dtype):
    """The fold, one block at a time: yields (ids, rows) of the ids each delta holds that no
    newer one does, newest delta first (memory: one block of read_blocks)."""
    seen = set()
    for name in reversed(names):
        # within one delta an id appears once (its rows are the journal's unique ids)
        for ids, rows in read_blocks(folder, name, dtype):
            fresh = np.array([i not in seen for i in ids.tolist()], bool)
            seen.update(ids.tolist())
            if fresh.any():
                yield (ids, rows) if fresh.all() else (ids[fresh], rows[fresh])


def remove_after(folder: str, rounds_done: int) -> None:
    """Delete the deltas of checkpoints after round `rounds_done` (never committed, or whose
    checkpoint is unreadable)."""
    for t in delta_rounds(folder):
        if t > rounds_done:
            os.remove(os.path.join(folder, delta_name(t)))


def remove_unreferenced(folder: str, manifests: list) -> list[str]:
    """Delete the deltas that none of `manifests` names: the record of the kept checkpoints
    only. Nothing is deleted when a manifest is None (a kept checkpoint whose metadata
    cannot be read).

    Args:
      folder: the store's record folder.
      manifests: the manifest of every kept checkpoint (Checkpointer.manifests()).
    Returns:
      The names of the deleted deltas.
    """
    if not manifests or any(m is None for m in manifests):
        return []
    named = {entry["file"] for m in manifests for entry in m["deltas"]}
    removed = [delta_name(t) for t in delta_rounds(folder) if delta_name(t) not in named]
    for name in removed:
        os.remove(os.path.join(folder, name))
    return removed
